//! Recording and replay end to end, with the built binary: a recorded
//! `bench df` dfsched-mode run and a C program using the hints whose threads
//! block and wake on pipes (tests/record_fixtures/pipes.c, built here with
//! gcc against libdfsched.so) are recorded, inspected, and replayed on 2,
//! 64 and 1,024 CPUs. `dfsched run --record` records a preloaded program
//! from its first thread. No timing is asserted: only that each step
//! works and says what the recording holds.

mod cli_support;

use cli_support::{dfsched, skip_or_fail, stdout_json, stdout_of, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh scratch directory named by `tag`, removed when dropped (passed
/// or failed).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-record-{tag}-"))
        .tempdir()
        .unwrap()
}

/// A command with the test's own DFSCHED_* and LD_PRELOAD removed, the
/// agent off and the balancer every 20 ms (more samples in a short run).
fn clean(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("DFSCHED_") || k == "LD_PRELOAD")
        {
            cmd.env_remove(k);
        }
    }
    cmd.env("DFSCHED_AGENT", "off")
        .env("DFSCHED_BALANCE_INTERVAL_MS", "20");
    cmd
}

/// The directory of the newest libdfsched.so beside the binary (as
/// `dfsched run` finds it).
fn lib_dir() -> PathBuf {
    let dir = Path::new(BIN).parent().unwrap();
    [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .filter(|d| d.join("libdfsched.so").is_file())
        .max_by_key(|d| {
            d.join("libdfsched.so")
                .metadata()
                .unwrap()
                .modified()
                .unwrap()
        })
        .expect("libdfsched.so is built beside the binary")
}

/// pipes.c built against libdfsched.so, or `None` after saying why.
fn pipes_program(dir: &Path) -> Option<PathBuf> {
    fixture_program(dir, "pipes")
}

/// tests/record_fixtures/NAME.c built against libdfsched.so, or `None`
/// after saying why.
fn fixture_program(dir: &Path, name: &str) -> Option<PathBuf> {
    if !Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip_or_fail("SKIP: no gcc on this machine");
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join(name);
    let lib = lib_dir();
    let o = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"])
        .arg(format!("-I{}", root.join("include").display()))
        .arg("-o")
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/record_fixtures/{name}.c")))
        .arg(format!("-L{}", lib.display()))
        .arg("-ldfsched")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out)
}

/// `record inspect FILE --json`.
fn inspect(file: &Path) -> Value {
    stdout_json(&dfsched(&[
        "record",
        "inspect",
        file.to_str().unwrap(),
        "--json",
    ]))
}

/// `sim replay FILE --cpus N --json` with a small access budget (a test
/// replays for correctness, not length).
fn replay(file: &Path, cpus: u32) -> Value {
    let v = stdout_json(&dfsched(&[
        "sim",
        "replay",
        file.to_str().unwrap(),
        "--cpus",
        &cpus.to_string(),
        "--access-budget",
        "100000",
        "--json",
    ]));
    assert_eq!(v["cpus"], cpus, "{cpus} CPUs");
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["vanilla", "dfsched", "dfsched-rr", "oracle", "split"]
    );
    for r in results {
        assert!(r["predicted_ns"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["report"]["cpus"], cpus);
        let m = &r["report"]["misses"];
        for kind in ["cold", "reload", "capacity", "coherence"] {
            assert!(m[kind].is_u64(), "misses.{kind}: {m}");
        }
    }
    assert_eq!(
        results[0]["runtime_vs_vanilla_milli"], 1000,
        "ratios to vanilla"
    );
    v
}

/// Checks the replays of a recording on 2, 64 and 1,024 CPUs agree on the
/// program's plan; returns the 2-CPU plan.
fn replays_everywhere(file: &Path) -> Value {
    let two = replay(file, 2);
    for cpus in [64, 1024] {
        let many = replay(file, cpus);
        // The program's part of the plan does not depend on the machine;
        // other processes' load is replayed on the recording's own size
        // only (--outside-load auto).
        for key in [
            "threads",
            "df_bytes",
            "cpu_ns",
            "blocked_ns",
            "recorded_run_ns",
            "scale",
        ] {
            assert_eq!(
                many["plan"][key], two["plan"][key],
                "plan.{key} at {cpus} CPUs"
            );
        }
        assert_eq!(many["plan"]["outside_tasks"], 0);
    }
    two["plan"].clone()
}

#[test]
fn a_recorded_bench_df_run_inspects_and_replays_on_2_64_and_1024_cpus() {
    let dir = scratch("bench");
    let file = dir.path().join("bench.dfrec");
    let mut cmd = clean(Command::new(BIN));
    cmd.args([
        "bench",
        "df",
        "--threads",
        "8",
        "--dfs",
        "2",
        "--df-bytes",
        "8192",
        "--iterations",
        "20000",
        "--modes",
        "dfsched",
        "--repeat",
        "1",
        "--json",
        "--quiet",
        "--record",
    ])
    .arg(&file);
    let report = stdout_json(&cmd.output().unwrap());
    assert!(
        report["modes"]["dfsched-record"]["median_s"].is_number(),
        "--record adds the dfsched-record mode: {}",
        report["modes"]
    );
    assert!(report["ratios"]["record_vs_dfsched"].is_number());
    let s = &inspect(&file)["summary"];
    assert_eq!(s["complete"], true);
    assert_eq!(s["dropped"], 0);
    assert_eq!(s["dfs"], 2);
    assert_eq!(s["events"]["hint"], 8, "one DF hint per worker: {s}");
    assert_eq!(s["events"]["thread_exit"], 8);
    let threads = s["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 8);
    assert!(threads.iter().all(|t| t["cpu_ns"].as_u64().unwrap() > 0));
    let plan = replays_everywhere(&file);
    assert_eq!(plan["threads"], 8);
    assert_eq!(plan["dfs_defaulted"], 2, "bench df declares no sizes");
    assert_eq!(plan["recorded_policy"], "dfsched-rr");
    // People's summary names the same.
    let text = stdout_of(&dfsched(&["record", "inspect", file.to_str().unwrap()]));
    assert!(text.contains("threads: 8 (8 exited)"), "{text}");
}

#[test]
fn a_c_program_blocking_on_pipes_records_its_sizes_and_replays_its_blocking() {
    let dir = scratch("pipes");
    let Some(pipes) = pipes_program(dir.path()) else {
        return;
    };
    let file = dir.path().join("pipes.dfrec");
    let mut cmd = clean(Command::new(&pipes));
    cmd.args(["2", "300", "20"]).env("DFSCHED_RECORD", &file);
    let out = cmd.output().unwrap();
    assert_eq!(stdout_of(&out).trim(), "done");
    let s = &inspect(&file)["summary"];
    assert_eq!(s["complete"], true);
    assert_eq!(s["dfs"], 2);
    let sizes = s["df_sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2, "{s}");
    assert!(sizes.iter().all(|x| x[2] == 16384), "{sizes:?}");
    // The linked library knows the four players, not main.
    assert_eq!(s["threads"].as_array().unwrap().len(), 4);
    let plan = replays_everywhere(&file);
    assert_eq!(plan["df_bytes"], serde_json::json!([16384, 16384]));
    assert_eq!(plan["dfs_defaulted"], 0);
    assert!(
        plan["blocked_ns"].as_u64().unwrap() > 0,
        "ping-pong threads block on their pipes: {plan}"
    );
}

/// Records `program ARGS` (linked with the library) and returns the
/// recording's inspect summary and its 2-CPU replay (`--outside-load off`,
/// only the policies that take no engine: their structure is the point).
fn record_and_replay(dir: &Path, program: &Path, args: &[&str], tag: &str) -> (Value, Value) {
    let file = dir.join(format!("{tag}.dfrec"));
    let mut cmd = clean(Command::new(program));
    cmd.args(args).env("DFSCHED_RECORD", &file);
    let out = cmd.output().unwrap();
    assert_eq!(stdout_of(&out).trim(), "done", "{tag}");
    let summary = inspect(&file)["summary"].clone();
    assert_eq!(summary["complete"], true, "{tag}");
    let v = stdout_json(&dfsched(&[
        "sim",
        "replay",
        file.to_str().unwrap(),
        "--cpus",
        "2",
        "--policies",
        "oracle,dfsched-rr",
        "--outside-load",
        "off",
        "--access-budget",
        "200000",
        "--json",
    ]));
    (summary, v)
}

/// Checks that a replay found one ring per `groups` (each a set of tids,
/// in ring order) with at most `2 × rounds` hand-offs each, and at least
/// `0.9 × rounds` when the program passes one token (with more, a member
/// may take the next token without switching out, so its switches count
/// fewer hand-offs), and that
/// the oracle replay (each ring on a CPU of its own) takes at least the
/// ring's recorded CPU time less 10 %: with one token its members take
/// turns, so it cannot beat their summed work, whatever the machine did
/// while recording. Returns the rings.
fn check_rings(
    summary: &Value,
    v: &Value,
    groups: &[Vec<u64>],
    rounds: u64,
    one_token: bool,
) -> Vec<Value> {
    let ring_tids = |r: &Value| -> Vec<u64> {
        r["tids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect()
    };
    // The plan lists rings in the order their threads first appear in the
    // recording, which the scheduler decides: compare them in tid order.
    let mut rings = v["plan"]["rings"].as_array().unwrap().clone();
    rings.sort_by_cached_key(ring_tids);
    let mut groups = groups.to_vec();
    groups.sort_unstable();
    let found: Vec<Vec<u64>> = rings.iter().map(ring_tids).collect();
    assert_eq!(
        found, groups,
        "the rings are the groups on one DF; plan {}, threads {}",
        v["plan"], summary["threads"]
    );
    let cpu_of = |tid: u64| -> u64 {
        summary["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == tid)
            .unwrap()["cpu_ns"]
            .as_u64()
            .unwrap()
    };
    for r in &rings {
        let hand_offs = r["recorded_rounds"].as_u64().unwrap();
        assert!(
            hand_offs <= 2 * rounds && (!one_token || hand_offs >= rounds * 9 / 10),
            "each member hands off about once a round ({rounds}): {r}"
        );
        assert!(r["replayed_rounds"].as_u64().unwrap() >= 1);
    }
    let oracle = &v["results"][0];
    assert_eq!(oracle["policy"], "oracle");
    for (r, g) in rings.iter().zip(&groups) {
        if r["tokens"] != 1 {
            continue;
        }
        let work: u64 = g.iter().map(|&t| cpu_of(t)).sum();
        let predicted = oracle["predicted_ns"].as_u64().unwrap();
        assert!(
            predicted as f64 >= 0.9 * work as f64,
            "a one-token ring replays no faster than its work: {predicted} ns for {work} ns"
        );
    }
    rings
}

/// The tids of a summary's threads, ascending.
fn tids(summary: &Value) -> Vec<u64> {
    let mut t: Vec<u64> = summary["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tid"].as_u64().unwrap())
        .collect();
    t.sort_unstable();
    t
}

#[test]
fn ping_pong_pairs_on_pipes_replay_closed_loop_each_pair_a_ring_of_one_token() {
    let dir = scratch("pairs");
    let Some(pipes) = pipes_program(dir.path()) else {
        return;
    };
    // One pair (2 threads), then two (4 threads): each pair on its own DF,
    // 2,000 rounds.
    for pairs in [1u64, 2] {
        let (summary, v) = record_and_replay(
            dir.path(),
            &pipes,
            &[&pairs.to_string(), "2000", "20"],
            &format!("pairs{pairs}"),
        );
        let threads = summary["threads"].as_array().unwrap();
        assert_eq!(threads.len() as u64, 2 * pairs);
        for t in threads {
            assert!(
                t["runs"].as_u64().is_some() && t["voluntary"].as_u64().is_some(),
                "the recording has switch counts: {t}"
            );
        }
        // pipes.c: the two threads of pair k hint DF k + 1; tids of a
        // pair are created one after the other.
        let by_df = |df: u64| -> Vec<u64> {
            let mut g: Vec<u64> = threads
                .iter()
                .filter(|t| t["dfs"] == serde_json::json!([df]))
                .map(|t| t["tid"].as_u64().unwrap())
                .collect();
            g.sort_unstable();
            g
        };
        let groups: Vec<Vec<u64>> = (1..=pairs).map(by_df).collect();
        let rings = check_rings(&summary, &v, &groups, 2000, true);
        for r in &rings {
            assert_eq!(r["tokens"], 1, "a pair takes turns: {r}");
        }
        // The same recording replayed open loop has no ring.
        let file = dir.path().join(format!("pairs{pairs}.dfrec"));
        let open = stdout_json(&dfsched(&[
            "sim",
            "replay",
            file.to_str().unwrap(),
            "--policies",
            "oracle",
            "--open-loop",
            "--access-budget",
            "100000",
            "--json",
        ]));
        assert_eq!(open["plan"]["rings"], serde_json::json!([]));
    }
}

#[test]
fn a_token_ring_of_pipes_replays_as_one_ring_with_at_most_its_tokens() {
    let dir = scratch("ring");
    let Some(ring) = fixture_program(dir.path(), "ring") else {
        return;
    };
    // Three threads passing one token, and four passing two.
    for (threads, tokens) in [(3u64, 1u64), (4, 2)] {
        let (summary, v) = record_and_replay(
            dir.path(),
            &ring,
            &[&threads.to_string(), "2000", "40", &tokens.to_string()],
            &format!("ring{threads}"),
        );
        let all = tids(&summary);
        assert_eq!(all.len() as u64, threads);
        let rings = check_rings(&summary, &v, &[all], 2000, tokens == 1);
        let k = rings[0]["tokens"].as_u64().unwrap();
        assert!(
            (1..=tokens).contains(&k),
            "never more members at once than tokens ({tokens}): {}",
            rings[0]
        );
    }
}

#[test]
fn dfsched_run_record_records_a_preloaded_program_from_its_first_thread() {
    let dir = scratch("run");
    let Some(pipes) = pipes_program(dir.path()) else {
        return;
    };
    let file = dir.path().join("run.dfrec");
    // An old file of that name is replaced, not appended to or kept.
    std::fs::write(&file, b"old").unwrap();
    let mut cmd = clean(Command::new(BIN));
    cmd.args(["run", "--policy", "data-affinity", "--record"])
        .arg(&file)
        .arg("--")
        .arg(&pipes)
        .args(["1", "100", "5"]);
    assert_eq!(stdout_of(&cmd.output().unwrap()).trim(), "done");
    let s = &inspect(&file)["summary"];
    assert_eq!(s["complete"], true);
    // Preloaded: main and the two players are known from their creation.
    assert_eq!(s["threads"].as_array().unwrap().len(), 3, "{s}");
}

#[test]
fn bad_files_and_policies_are_refused_with_their_reason() {
    let dir = scratch("bad");
    let file = dir.path().join("not.dfrec");
    std::fs::write(&file, b"this is not a recording at all, not even close").unwrap();
    let out = dfsched(&["record", "inspect", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no DFSCHREC magic"));
    let out = dfsched(&[
        "sim",
        "replay",
        file.to_str().unwrap(),
        "--policies",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy"));
}
