//! `dfsched engine-replay` end to end, with the built binary: a
//! `bench df` dfsched-mode run and a preloaded program under `dfsched run`
//! log their engines (`DFSCHED_ENGINE_LOG`), and the logs replay
//! identically (exit 0); a log with one decision edited is reported at that
//! event (exit 1); a log cut at its size limit replays to the cut and says
//! so; a garbled header is refused with its reason (exit 2).

mod cli_support;

use cli_support::{dfsched, stdout_json, stdout_of, BIN};
use std::path::Path;
use std::process::Command;

/// A fresh scratch directory named by `tag`, removed when dropped (passed
/// or failed).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-engine-replay-{tag}-"))
        .tempdir()
        .unwrap()
}

/// A command with the test's own DFSCHED_* and LD_PRELOAD removed, the
/// agent off, the balancer every 10 ms, and the engine log at `log`.
fn logged(log: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("DFSCHED_") || k == "LD_PRELOAD")
        {
            cmd.env_remove(k);
        }
    }
    cmd.env("DFSCHED_AGENT", "off")
        .env("DFSCHED_BALANCE_INTERVAL_MS", "10")
        .env("DFSCHED_ENGINE_LOG", log);
    cmd
}

/// `bench df` in dfsched mode, its engine logged at `log`.
fn bench_df(log: &Path, max_bytes: Option<&str>, switch_every: &str) {
    let mut cmd = logged(log);
    if let Some(max) = max_bytes {
        cmd.env("DFSCHED_ENGINE_LOG_MAX_BYTES", max);
    }
    cmd.args([
        "bench",
        "df",
        "--modes",
        "dfsched",
        "--threads",
        "8",
        "--dfs",
        "4",
    ])
    .args(["--iterations", "2000", "--repeat", "1", "--json"])
    .args(["--switch-every", switch_every]);
    stdout_of(&cmd.output().unwrap());
}

fn replay(log: &Path, json: bool) -> std::process::Output {
    let mut args = vec!["engine-replay", log.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    dfsched(&args)
}

#[test]
fn a_bench_df_run_logs_its_engine_and_replays_identically() {
    let dir = scratch("bench");
    let log = dir.path().join("engine.log");
    bench_df(&log, None, "100");
    let text = stdout_of(&replay(&log, false));
    assert!(text.contains(": identical: "), "{text}");
    let j = stdout_json(&replay(&log, true));
    assert_eq!(j["identical"], true, "{j}");
    let r = &j["replayed"];
    assert!(r["steps"].as_u64().unwrap() > 8, "{j}");
    assert!(r["decisions"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(r["ended"], true, "{j}");
    assert_eq!(r["truncated"], serde_json::Value::Null, "{j}");
}

#[test]
fn an_edited_decision_is_reported_at_its_event_and_a_garbled_header_is_refused() {
    let dir = scratch("edit");
    let log = dir.path().join("engine.log");
    bench_df(&log, None, "100");
    let text = std::fs::read_to_string(&log).unwrap();
    // The first hint that placed its thread: its CPUs changed.
    let (at, line) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("\"event\":\"hint\"") && l.contains("\"decision\":\"place\""))
        .expect("a hint placed a thread");
    let mut step: serde_json::Value = serde_json::from_str(line).unwrap();
    let n = step["step"]["n"].as_u64().unwrap();
    let cpus = &mut step["step"]["decisions"][0]["cpus"];
    *cpus = if cpus == "0" { "1".into() } else { "0".into() };
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == at {
                step.to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    let bad = dir.path().join("edited.log");
    std::fs::write(&bad, edited.join("\n") + "\n").unwrap();
    let out = replay(&bad, false);
    assert_eq!(out.status.code(), Some(1));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("DIFFERENT at event {n} ")),
        "{shown}"
    );
    assert!(
        shown.contains("logged:") && shown.contains("replayed:"),
        "{shown}"
    );
    let out = replay(&bad, true);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["identical"], false);
    assert_eq!(j["divergence"]["step"], n, "{j}");
    assert_eq!(j["divergence"]["line"], at as u64 + 1, "{j}");
    assert_eq!(j["divergence"]["logged"], step["step"]["decisions"], "{j}");
    // A garbled header: exit 2, with the reason.
    let garbled = dir.path().join("garbled.log");
    std::fs::write(
        &garbled,
        format!(
            "{{\"header\":{{\"version\":1\n{}",
            text.split_once('\n').unwrap().1
        ),
    )
    .unwrap();
    let out = replay(&garbled, false);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not an engine log: line 1 is no header"),
        "{err}"
    );
    let out = replay(&dir.path().join("missing.log"), true);
    assert_eq!(out.status.code(), Some(2));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["error"].as_str().unwrap().contains("reading"), "{j}");
}

#[test]
fn a_log_cut_at_its_limit_replays_to_the_cut_and_says_so() {
    let dir = scratch("cut");
    let log = dir.path().join("engine.log");
    // A DF switch every iteration: thousands of hints, past 64 KiB.
    bench_df(&log, Some("65536"), "1");
    assert!(std::fs::metadata(&log).unwrap().len() <= 65536);
    let text = stdout_of(&replay(&log, false));
    assert!(text.contains("cut at its size limit"), "{text}");
    let j = stdout_json(&replay(&log, true));
    assert_eq!(j["identical"], true, "{j}");
    assert_eq!(
        j["replayed"]["truncated"]["steps"], j["replayed"]["steps"],
        "{j}"
    );
}

#[test]
fn a_preloaded_program_ends_its_log_at_exit() {
    let dir = scratch("run");
    let log = dir.path().join("engine.log");
    let mut cmd = logged(&log);
    cmd.args(["run", "--policy", "co-thread", "--", "sleep", "0.1"]);
    stdout_of(&cmd.output().unwrap());
    // The program's own process writes FILE (dfsched run itself starts no
    // runtime); its global runtime is never shut down, so the end line
    // comes from the exit handler.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"event\":\"task_new\""), "{text}");
    assert!(
        text.trim_end().ends_with("}}") && text.lines().last().unwrap().starts_with("{\"end\""),
        "{text}"
    );
    let j = stdout_json(&replay(&log, true));
    assert_eq!(j["identical"], true, "{j}");
    assert_eq!(j["replayed"]["ended"], true, "{j}");
}
