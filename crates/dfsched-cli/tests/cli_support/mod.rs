//! Helpers shared by the tests that run the built `dfsched` binary and read
//! what it prints (tests/cli.rs, sim_rq.rs, sim_queue.rs, bench_chat.rs,
//! bench_cothreads.rs, bench_spin.rs), included by each with
//! `mod cli_support;`: running the binary, the stdout of a run that must
//! succeed, and the checks the benchmarks' JSON and flag validation share.
//! The premise rule ([`skip_or_fail`], [`root_or_skip`]) is dfsched-premise's,
//! re-exported.
//!
//! Invariant: these only run the binary and read its output; a helper that
//! asserts says in its failure message which run and which key failed.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::process::{Command, Output};

// Each test binary uses a different subset of these too.
#[allow(unused_imports)]
pub use dfsched_premise::{root_or_skip, skip_or_fail};

pub const BIN: &str = env!("CARGO_BIN_EXE_dfsched");

/// `dfsched bench df` tiny enough to take well under a second in every mode
/// (append `--quiet`, `--json` or a flag under test).
pub const TINY: &[&str] = &[
    "bench",
    "df",
    "--threads",
    "4",
    "--dfs",
    "2",
    "--df-bytes",
    "1024",
    "--iterations",
    "50",
    "--repeat",
    "1",
];

/// `dfsched ARGS`, run to its end in this test's environment.
pub fn dfsched(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the dfsched binary runs")
}

/// The stdout of a run that must have succeeded (else fails, showing its
/// exit code and stderr, at the caller's line).
#[track_caller]
pub fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

/// The one JSON value a successful run printed on stdout.
#[track_caller]
pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_str(&stdout_of(out)).expect("stdout is one JSON value")
}

/// The one JSON value `dfsched ARGS` printed; the run must succeed.
#[track_caller]
pub fn json(args: &[&str]) -> Value {
    stdout_json(&dfsched(args))
}

/// For each `(args, needle)`: `run(PREFIX ARGS)` exits 2 (bad usage),
/// names `needle` on stderr, prints no result on stdout and started no
/// run (no `[  1/` progress line).
pub fn assert_usage_errors(
    run: impl Fn(&[&str]) -> Output,
    prefix: &[&str],
    cases: &[(&[&str], &str)],
) {
    for &(args, needle) in cases {
        let out = run(&[prefix, args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
        assert!(!err.contains("[  1/"), "{args:?} started running");
    }
}

/// Asserts that each of `metrics` of mode `m` is a summary: median, min,
/// max and standard deviation, all numbers.
pub fn assert_summaries(m: &Value, mode: &str, metrics: &[&str]) {
    for metric in metrics {
        for key in ["median", "min", "max", "std_dev"] {
            assert!(m[metric][key].is_number(), "{mode}.{metric}.{key}");
        }
    }
}

/// Asserts mode `m` has `runs` runs, in each of which every one of
/// `processes` processes did work and `ops_total` is their sum.
pub fn assert_every_process_worked(m: &Value, mode: &str, runs: usize, processes: usize) {
    let all = m["runs"].as_array().unwrap();
    assert_eq!(all.len(), runs, "{mode}");
    for r in all {
        let per: Vec<u64> = r["ops_per_process"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(per.len(), processes, "{mode}");
        assert!(per.iter().all(|&n| n > 0), "{mode}: a process did nothing");
        assert_eq!(r["ops_total"].as_u64().unwrap(), per.iter().sum::<u64>());
    }
}

/// Asserts mode `m`'s paired ratio against vanilla: null for vanilla
/// itself, otherwise over `rounds` rounds with a positive median, min and
/// max.
pub fn assert_paired_ratio(m: &Value, mode: &str, rounds: u64) {
    let p = &m["paired_ratio"];
    if mode == "vanilla" {
        assert!(p.is_null(), "vanilla against itself: {p}");
        return;
    }
    assert_eq!(p["rounds"], rounds, "{mode}: {p}");
    for key in ["median", "min", "max"] {
        assert!(p[key].as_f64().unwrap() > 0.0, "{mode}.paired_ratio.{key}");
    }
}
