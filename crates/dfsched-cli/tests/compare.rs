//! `dfsched compare`: the acceptance command (`perf bench sched
//! messaging`, when perf is here) prints a table and writes JSON with a
//! paired ratio and an interval per policy; a small shell command checks
//! the JSON's shape, the Markdown export, and that bad options are usage
//! errors. No figure is judged: only that each is there and well formed.

#[path = "run_fixtures/support.rs"]
mod support;

use std::process::Command;
use support::{clean, dfsched, have, scratch, skip_or_fail};

fn compare(args: &[&str]) -> std::process::Output {
    clean(Command::new(dfsched()))
        .arg("compare")
        .args(args)
        .output()
        .unwrap()
}

/// Checks one policy's entry of the JSON report: `rounds` paired ratios,
/// an interval around their median with its coverage.
fn check_policy(mode: &serde_json::Value, rounds: u64) {
    let name = &mode["mode"];
    assert_eq!(mode["ok_runs"], rounds, "{name}");
    let ratio = &mode["ratio"];
    assert_eq!(ratio["rounds"], rounds, "{name}: {ratio}");
    let median = ratio["median"].as_f64().unwrap();
    let i = &mode["ratio_interval"];
    let (low, high) = (i["low"].as_f64().unwrap(), i["high"].as_f64().unwrap());
    assert!(
        low <= median && median <= high,
        "{name}: {i} around {median}"
    );
    let c = i["confidence"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c), "{name}: {i}");
    assert!(mode["switches"]["median"].as_f64().unwrap() > 0.0, "{name}");
}

#[test]
fn compare_prints_a_table_and_json_with_a_paired_ratio_and_interval_per_policy() {
    if !have("perf") {
        skip_or_fail("SKIP compare_prints_a_table_and_json…: no perf on this machine");
        return;
    }
    let json = scratch().join("compare-perf.json");
    let out = compare(&[
        "--repeat",
        "5",
        "--export-json",
        json.to_str().unwrap(),
        "--",
        "perf",
        "bench",
        "sched",
        "messaging",
        "-g",
        "4",
        "-l",
        "300",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for mode in ["plain", "none", "co-thread", "data-affinity"] {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(mode))
            .unwrap_or_else(|| panic!("no {mode} row in\n{stdout}"));
        assert!(row.contains("5/5"), "{row}");
        if mode != "plain" {
            assert!(
                row.contains("(93.8 %)"),
                "5 rounds: [min, max] covers 93.75 %: {row}"
            );
        }
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["repeat"], 5);
    let modes = report["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 4);
    assert_eq!(modes[0]["mode"], "plain");
    assert!(modes[0]["ratio"].is_null());
    for m in &modes[1..] {
        check_policy(m, 5);
        // perf's messaging forks 160 processes: the samples see threads.
        assert!(m["migrations_per_thread"].is_number(), "{m}");
    }
    assert_eq!(report["runs"].as_array().unwrap().len(), 20);
}

#[test]
fn compare_json_and_markdown_of_a_shell_command() {
    let md = scratch().join("compare.md");
    let out = compare(&[
        "--repeat",
        "2",
        "--policies",
        "none,co-thread",
        "--json",
        "--export-markdown",
        md.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "sleep 0.01",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes = report["modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["plain", "none", "co-thread"]);
    for m in &modes[1..] {
        check_policy(m, 2);
    }
    // Rounds are interleaved and paired: every round runs each mode once.
    let runs = report["runs"].as_array().unwrap();
    for round in 0..2 {
        let mut in_round: Vec<&str> = runs
            .iter()
            .filter(|r| r["round"] == round)
            .map(|r| r["mode"].as_str().unwrap())
            .collect();
        in_round.sort_unstable();
        assert_eq!(in_round, ["co-thread", "none", "plain"]);
    }
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("| mode | runs ok | wall median |"), "{text}");
    assert!(text.contains("| co-thread | 2/2 |"), "{text}");
}

#[test]
fn compare_refuses_bad_options_as_usage_errors() {
    for args in [
        &["--policies", "fast", "--", "true"][..],
        &["--policies", "none,none", "--", "true"],
        &["--repeat", "0", "--", "true"],
        &["--timeout-s", "-1", "--", "true"],
        &[],
    ] {
        let out = compare(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
