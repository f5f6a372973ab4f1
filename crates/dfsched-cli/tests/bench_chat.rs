//! Runs `dfsched bench chat` from the built binary: a tiny run's JSON has
//! the documented keys and exact message counts, bad flags exit 2 and run
//! nothing.
//! No timing is asserted.

mod cli_support;

use cli_support::{assert_summaries, assert_usage_errors, dfsched, stdout_json};
use std::process::Output;

/// `dfsched bench chat` on one room of `messages` messages, `repeat` runs
/// of each mode, then `extra`.
fn chat(messages: &str, repeat: &str, extra: &[&str]) -> Output {
    let args = [
        "bench",
        "chat",
        "--rooms",
        "1",
        "--messages",
        messages,
        "--repeat",
        repeat,
    ];
    dfsched(&[&args[..], extra].concat())
}

#[test]
fn tiny_chat_run_prints_the_documented_json() {
    let out = chat("5", "2", &["--json", "--quiet"]);
    let v = stdout_json(&out);
    assert!(out.stderr.is_empty(), "--quiet prints no progress");
    assert_eq!(v["messages_delivered"], 20 * 19 * 5);
    assert_eq!(v["messages_transmitted"], 20 * 20 * 5);
    assert_eq!(v["params"]["rooms"], 1);
    for mode in ["vanilla", "dfsched", "co-thread", "oracle", "split"] {
        let m = &v["modes"][mode];
        assert_eq!(m["runs_s"].as_array().map(Vec::len), Some(2), "{mode}");
        assert_summaries(m, mode, &["time_s", "throughput_msgs_per_s"]);
        for run in m["runs"].as_array().unwrap() {
            assert_eq!(run["messages_delivered"], 20 * 19 * 5);
        }
    }
    assert!(v["ratios"]["dfsched_vs_vanilla"].is_number());
    assert!(v["machine"]["nr_cpus_allowed"].is_number());
}

#[test]
fn table_output_names_every_mode_and_the_ratios() {
    let out = chat("3", "1", &["--modes", "split,vanilla"]);
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
    assert_usage_errors(
        dfsched,
        &["bench", "chat"],
        &[
            (&["--rooms", "0"], "--rooms"),
            (&["--messages", "0"], "--messages"),
            (&["--repeat", "0"], "--repeat"),
            (&["--modes", "vanilla,nope"], "nope"),
            (&["--grid", "paper", "--messages", "5"], "--messages"),
        ],
    );
}

#[test]
fn co_thread_runs_with_the_runtime_attached() {
    let v = stdout_json(&chat(
        "2",
        "1",
        &["--modes", "co-thread", "--json", "--quiet"],
    ));
    let stats = &v["modes"]["co-thread"]["runs"][0]["runtime_stats"];
    assert_eq!(
        stats["threads_attached"], 80,
        "every thread attached: {stats}"
    );
}
