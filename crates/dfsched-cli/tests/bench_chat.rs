//! Runs `dfsched bench chat` from the built binary: a tiny run's JSON has
//! the documented keys and exact message counts, bad flags exit 2 and run
//! nothing.
//! No timing is asserted.

use serde_json::Value;
use std::process::{Command, Output};

fn dfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dfsched"))
        .args(args)
        .output()
        .expect("the dfsched binary runs")
}

#[test]
fn tiny_chat_run_prints_the_documented_json() {
    let out = dfsched(&[
        "bench",
        "chat",
        "--rooms",
        "1",
        "--messages",
        "5",
        "--repeat",
        "2",
        "--json",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "--quiet prints no progress");
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON value");
    assert_eq!(v["messages_delivered"], 20 * 19 * 5);
    assert_eq!(v["messages_transmitted"], 20 * 20 * 5);
    assert_eq!(v["params"]["rooms"], 1);
    for mode in ["vanilla", "dfsched", "co-thread", "oracle", "split"] {
        let m = &v["modes"][mode];
        assert_eq!(m["runs_s"].as_array().map(Vec::len), Some(2), "{mode}");
        for key in ["median", "min", "max", "std_dev"] {
            assert!(m["time_s"][key].is_number(), "{mode}.time_s.{key}");
            assert!(m["throughput_msgs_per_s"][key].is_number());
        }
        for run in m["runs"].as_array().unwrap() {
            assert_eq!(run["messages_delivered"], 20 * 19 * 5);
        }
    }
    assert!(v["ratios"]["dfsched_vs_vanilla"].is_number());
    assert!(v["machine"]["nr_cpus_allowed"].is_number());
}

#[test]
fn table_output_names_every_mode_and_the_ratios() {
    let out = dfsched(&[
        "bench",
        "chat",
        "--rooms",
        "1",
        "--messages",
        "3",
        "--repeat",
        "1",
        "--modes",
        "split,vanilla",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 room × 20 users, 3 messages"), "{text}");
    assert!(text.contains("split/vanilla"), "{text}");
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        progress.contains("[  2/2]"),
        "one progress line per run: {progress}"
    );
}

#[test]
fn bad_flags_exit_2_and_run_nothing() {
    for (args, needle) in [
        (&["--rooms", "0"][..], "--rooms"),
        (&["--messages", "0"], "--messages"),
        (&["--repeat", "0"], "--repeat"),
        (&["--modes", "vanilla,nope"], "nope"),
        (&["--grid", "paper", "--messages", "5"], "--messages"),
    ] {
        let out = dfsched(&[&["bench", "chat"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn co_thread_runs_with_the_runtime_attached() {
    let out = dfsched(&[
        "bench",
        "chat",
        "--rooms",
        "1",
        "--messages",
        "2",
        "--repeat",
        "1",
        "--modes",
        "co-thread",
        "--json",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stats = &v["modes"]["co-thread"]["runs"][0]["runtime_stats"];
    assert_eq!(
        stats["threads_attached"], 80,
        "every thread attached: {stats}"
    );
}
