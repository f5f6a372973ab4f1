//! Runs `dfsched bench cothreads` from the built binary: a tiny run in both
//! modes starts its worker processes (re-executing the binary), every
//! process and thread reports work, the JSON has the documented keys, and
//! bad flags exit 2 having run nothing. No timing is asserted.

use serde_json::Value;
use std::process::{Command, Output};

fn dfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dfsched"))
        .args(args)
        .output()
        .expect("the dfsched binary runs")
}

#[test]
fn tiny_run_has_every_process_working_in_both_modes() {
    let out = dfsched(&[
        "bench",
        "cothreads",
        "--processes",
        "3",
        "--threads",
        "2",
        "--shared-bytes",
        "4096",
        "--seconds",
        "0.2",
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
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(v["params"]["processes"], 3);
    for mode in ["vanilla", "co-thread"] {
        let m = &v["modes"][mode];
        for key in ["median", "min", "max", "std_dev"] {
            assert!(m["ops"][key].is_number(), "{mode}.ops.{key}");
            assert!(m["ops_per_s"][key].is_number());
        }
        let runs = m["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for r in runs {
            let per: Vec<u64> = r["ops_per_process"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            assert_eq!(per.len(), 3);
            assert!(per.iter().all(|&n| n > 0), "{mode}: a process did nothing");
            assert_eq!(r["ops_total"].as_u64().unwrap(), per.iter().sum::<u64>());
        }
    }
    assert!(v["ratios"]["co_thread_vs_vanilla"].is_number());
}

#[test]
fn bad_flags_exit_2_and_run_nothing() {
    for (args, needle) in [
        (&["--processes", "0"][..], "--processes"),
        (&["--shared-bytes", "65"], "--shared-bytes"),
        (&["--seconds=-1"], "--seconds"),
        (&["--modes", "dfsched"], "dfsched"),
        (&["--grid", "paper", "--processes", "2"], "--processes"),
    ] {
        let out = dfsched(&[&["bench", "cothreads"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_worker_not_told_to_go_fails_without_working() {
    let out = Command::new(env!("CARGO_BIN_EXE_dfsched"))
        .args([
            "bench",
            "cothreads-worker",
            "--mode",
            "vanilla",
            "--threads",
            "2",
            "--shared-bytes",
            "128",
            "--seconds",
            "0.1",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not told to go"));
}
