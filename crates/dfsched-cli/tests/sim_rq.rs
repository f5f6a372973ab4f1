//! Runs `dfsched sim pinter-example | df-bench | partition`: the paper's
//! numbers come out, the same seed prints the same JSON, bad input exits
//! non-zero with a message.

mod cli_support;

use cli_support::{dfsched, json, stdout_of as stdout};
use serde_json::Value;

const TINY_BENCH: &[&str] = &[
    "sim",
    "df-bench",
    "--threads",
    "8",
    "--dfs",
    "2",
    "--df-bytes",
    "2048",
    "--passes",
    "4",
    "--json",
];

#[test]
fn pinter_example_gives_22_and_14() {
    let v = json(&["sim", "pinter-example", "--json"]);
    assert_eq!(v["cpu_affinity"]["paper_length"], 22);
    assert_eq!(v["data_affinity"]["paper_length"], 14);
    let table = stdout(&dfsched(&["sim", "pinter-example"]));
    assert!(table.contains("length 22"), "{table}");
    assert!(table.contains("length 14"), "{table}");
    assert!(table.contains("P2    .  .  .  .  . R1 R1 R1 R1 x1 x4 W4 W4 W4 W4"));
}

#[test]
fn df_bench_same_seed_same_json_and_every_policy_reports_misses() {
    let a = stdout(&dfsched(TINY_BENCH));
    let b = stdout(&dfsched(TINY_BENCH));
    assert_eq!(a, b, "the same seed prints the same JSON");
    let v: Value = serde_json::from_str(&a).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    for r in results {
        assert!(r["report"]["misses"]["cold"].as_u64().unwrap() > 0);
        assert!(r["report"]["makespan_cycles"].as_u64().unwrap() > 0);
    }
    // Another seed gives other runs (a different program; not merely a
    // different label in the output).
    let mut other = TINY_BENCH.to_vec();
    other.extend(["--seed", "9"]);
    let c = stdout(&dfsched(&other));
    let strip = |s: &str| -> Value {
        let mut v: Value = serde_json::from_str(s).unwrap();
        v.as_object_mut().unwrap().remove("params");
        v
    };
    assert_ne!(strip(&c)["results"], strip(&a)["results"]);
}

#[test]
fn df_bench_table_reports_speed_and_memory() {
    let mut args = TINY_BENCH.to_vec();
    args.pop(); // no --json
    args.extend(["--policies", "vanilla,dfsched"]);
    let t = stdout(&dfsched(&args));
    assert!(t.contains("events/s") && t.contains("VmHWM"), "{t}");
    assert!(t.lines().any(|l| l.starts_with("dfsched ")), "{t}");
}

#[test]
fn partition_exact_never_beats_itself_and_is_deterministic() {
    let args = ["sim", "partition", "--tasks", "9", "--cpus", "3", "--json"];
    let v = json(&args);
    assert_eq!(v, json(&args));
    let exact = v["exact"]["penalty"].as_u64().unwrap();
    assert!(v["heuristic"]["penalty"].as_u64().unwrap() >= exact);
    let paper = json(&[
        "sim",
        "partition",
        "--task-dfs",
        "2,1,1,2",
        "--cpus",
        "2",
        "--json",
    ]);
    assert_eq!(paper["exact"]["max_dfs"], 1);
    assert_eq!(paper["online_paper"]["max_dfs"], 1);
}

#[test]
fn bad_input_fails_with_a_message() {
    for args in [
        &["sim", "df-bench", "--policies", "fastest"][..],
        &["sim", "df-bench", "--write-pct", "150"],
        &["sim", "partition", "--task-dfs", "1,0"],
        &["sim", "partition", "--cpus", "0"],
    ] {
        let out = dfsched(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn df_bench_runs_the_co_thread_policy_with_hints_withheld() {
    let mut args = TINY_BENCH.to_vec();
    args.extend(["--policies", "vanilla,co-thread"]);
    let a = stdout(&dfsched(&args));
    assert_eq!(
        a,
        stdout(&dfsched(&args)),
        "the same seed prints the same JSON"
    );
    let v: Value = serde_json::from_str(&a).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let co = &results[1];
    assert_eq!(co["policy"], "co-thread");
    assert_eq!(co["report"]["engine"]["hints"], 0);
    assert!(co["report"]["engine"]["groups_created"].as_u64().unwrap() >= 1);
    assert_eq!(co["report"]["processes"].as_array().unwrap().len(), 1);
    // An unknown name lists the known ones, co-thread among them.
    let out = dfsched(&["sim", "df-bench", "--policies", "cothread"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("co-thread"));
}

#[test]
fn df_bench_deals_threads_to_processes() {
    let mut args = TINY_BENCH.to_vec();
    args.extend(["--policies", "co-thread", "--processes", "2"]);
    let v: Value = serde_json::from_str(&stdout(&dfsched(&args))).unwrap();
    assert_eq!(v["params"]["processes"], 2);
    let report = &v["results"][0]["report"];
    assert_eq!(report["processes"].as_array().unwrap().len(), 2);
    // More processes than threads is refused with the parameter's name.
    let mut args = TINY_BENCH.to_vec();
    args.extend(["--processes", "100000"]);
    let out = dfsched(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("processes"));
}

#[test]
fn df_bench_df_per_process_gives_each_process_a_df_of_its_own() {
    let args = [
        "sim",
        "df-bench",
        "--threads",
        "6",
        "--processes",
        "3",
        "--df-per-process",
        "--df-bytes",
        "2048",
        "--passes",
        "2",
        "--policies",
        "vanilla,co-thread",
        "--json",
    ];
    let v = json(&args);
    // --dfs defaults to --processes with --df-per-process.
    assert_eq!(v["params"]["dfs"], 3);
    assert_eq!(v["params"]["df_per_process"], true);
    assert_eq!(
        v["results"][1]["report"]["processes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let table = stdout(&dfsched(&args[..args.len() - 1]));
    assert!(table.contains("3 DFs"), "{table}");
    assert!(table.contains("each on a DF of its own"), "{table}");
    // A --dfs that disagrees is refused, naming the parameter.
    let mut bad = args.to_vec();
    bad.extend(["--dfs", "4"]);
    let out = dfsched(&bad);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dfs = 4") && err.contains("df_per_process"),
        "{err}"
    );
}
