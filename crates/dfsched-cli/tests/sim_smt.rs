//! Runs `dfsched sim smt` and `dfsched trace import`: the JSON names each
//! policy's ITKO and relative throughput, the same seed prints the same
//! JSON, traces imported from Valgrind lackey text run as threads, and bad
//! input fails with a message.

mod cli_support;

use cli_support::{dfsched, json, stdout_of as stdout};
use std::io::Write;
use std::process::{Command, Stdio};

/// A small, fast run: a quarter-size L2, short quanta.
const SMALL: &[&str] = &[
    "sim",
    "smt",
    "--l2-kib",
    "128",
    "--quantum-cycles",
    "100000",
    "--quanta",
    "12",
];

fn with(extra: &[&str]) -> Vec<String> {
    SMALL.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run_args(args: &[String]) -> std::process::Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    dfsched(&a)
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/smt");

#[test]
fn json_names_itko_and_relative_throughput_of_every_policy_and_is_deterministic() {
    let args = with(&[
        "--policies",
        "kihm,round-robin,shuffled,best-static",
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    for p in ["kihm", "round-robin", "shuffled", "best-static"] {
        assert!(v["policies"][p]["itko"].as_u64().is_some(), "{p}: {v}");
        let rt = v["policies"][p]["relative_throughput"].as_f64().unwrap();
        assert!(rt > 0.0 && rt <= 2.0, "{p}: {rt}");
    }
    assert_eq!(v["best_static"]["tried"], 3);
    assert_eq!(v, json(&a), "the same seed prints the same JSON");
}

#[test]
fn table_lists_each_policy_with_its_ratio_to_round_robin() {
    let args = with(&[
        "--workload",
        "mix",
        "slice0/2,slice1/2,uniform,light",
        "--policies",
        "kihm,rr,intensity",
    ]);
    let t = stdout(&run_args(&args));
    for p in ["kihm", "round-robin", "intensity"] {
        assert!(t.lines().any(|l| l.starts_with(p)), "{p} missing:\n{t}");
    }
    assert!(t.contains("vs RR") && t.contains("mix slice0/2"), "{t}");
}

#[test]
fn lackey_text_imports_to_a_trace_that_runs_as_a_thread() {
    let dir = std::env::temp_dir().join(format!("dfsched-smt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("sample.dftrace");
    let sample = std::fs::read(format!("{FIXTURES}/lackey-sample.txt")).unwrap();
    let mut child = Command::new(cli_support::BIN)
        .args(["trace", "import", "--out"])
        .arg(&out)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&sample).unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    // The sample holds 16 loads, stores and modifies.
    assert!(err.contains(": 16 accesses"), "{err}");
    // Beside the committed traces of /bin/true, three threads.
    for f in ["true-start.dftrace", "true-later.dftrace"] {
        std::fs::copy(format!("{FIXTURES}/{f}"), dir.join(f)).unwrap();
    }
    let args = with(&[
        "--workload",
        "traces",
        dir.to_str().unwrap(),
        "--policies",
        "kihm,rr",
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    let names: Vec<&str> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(names, ["sample", "true-later", "true-start"]);
    let threads = v["policies"]["kihm"]["threads"].as_array().unwrap();
    assert!(
        threads.iter().all(|t| t["accesses"].as_u64().unwrap() > 0),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_fails_with_a_message() {
    for (extra, needle) in [
        (&["--policies", "kihm,nope"][..], "unknown policy"),
        (
            &["--workload", "traces", "/nonexistent-dfsched"][..],
            "nonexistent",
        ),
        (&["--workload", "sideways"][..], "sideways"),
        (&["--bits", "9"][..], "bits"),
        (&["--mapping", "diagonal"][..], "diagonal"),
    ] {
        let out = run_args(&with(extra));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(out.stdout.is_empty(), "{extra:?} printed a result");
    }
}

#[test]
fn seeds_report_each_policys_mean_and_spread_against_round_robin() {
    let args = with(&["--seeds", "2", "--policies", "kihm,round-robin", "--json"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    assert_eq!(v["seeds"], serde_json::json!([1, 2]));
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    let k = &v["policies"]["kihm"];
    assert!(
        k["itko"].is_number() && k["relative_throughput"].is_number(),
        "{k}"
    );
    let s = &k["relative_throughput_vs_round_robin"];
    let (lo, mean, hi) = (
        s["min"].as_f64().unwrap(),
        s["mean"].as_f64().unwrap(),
        s["max"].as_f64().unwrap(),
    );
    assert!(lo <= mean && mean <= hi, "{s}");
    // Round robin against itself is exactly 1 on every seed.
    assert_eq!(
        v["policies"]["round-robin"]["itko_vs_round_robin"]["min"],
        1.0
    );
}
