//! Runs `dfsched bench overhead` from the built binary on a tiny grid: every
//! cell of the grid is there with its figures (passes and their per-pass
//! samples, hint latencies, CPU shares), the agent cells used the private
//! agent's scan and the others used their own, the other-threads process
//! was started with the size asked and is gone afterwards, and the
//! capacity the largest size comes from is reported. Sizes beyond the
//! machine's thread limit exit 2 having started nothing. No timing is
//! asserted.

mod cli_support;

use cli_support::{assert_usage_errors, dfsched, stdout_json};
use serde_json::Value;

/// Whether `pid` is gone altogether (not running, not a zombie).
fn gone(pid: u64) -> bool {
    std::fs::metadata(format!("/proc/{pid}")).is_err()
}

#[test]
fn a_tiny_grid_has_every_cell_with_its_figures_and_leaves_no_other_threads() {
    let out = dfsched(&[
        "bench",
        "overhead",
        "--quick",
        "--own",
        "10",
        "--others",
        "0,40",
        "--others-runnable",
        "5",
        "--json",
        "--quiet",
    ]);
    let v: Value = stdout_json(&out);
    // Others 0: own {4 (the base), 10}; others 40: the base only; each
    // with agent off and on.
    let cells = v["cells"].as_array().expect("cells");
    let shape: Vec<(String, u64, u64)> = cells
        .iter()
        .map(|c| {
            (
                c["agent"].as_str().unwrap().to_string(),
                c["others"].as_u64().unwrap(),
                c["own_threads"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64)> = [
        ("off", 0, 4),
        ("on", 0, 4),
        ("off", 0, 10),
        ("on", 0, 10),
        ("off", 40, 4),
        ("on", 40, 4),
    ]
    .iter()
    .map(|&(a, k, n)| (a.to_string(), k, n))
    .collect();
    assert_eq!(shape, want);
    for c in cells {
        let name = format!(
            "{} others {} own {}",
            c["agent"], c["others"], c["own_threads"]
        );
        assert_eq!(
            c["threads_active"], c["own_threads"],
            "{name}: all registered"
        );
        assert_eq!(c["hinters"], 4, "{name}");
        let passes = c["passes"].as_u64().unwrap();
        assert!(passes >= 1, "{name}: no balancer pass in the window: {c}");
        assert_eq!(c["pass_cpu_us"]["n"].as_u64(), Some(passes), "{name}");
        assert_eq!(
            c["raw"]["pass_cpu_ns"].as_array().map(|a| a.len() as u64),
            Some(passes),
            "{name}"
        );
        for key in ["median", "p99", "max"] {
            assert!(
                c["pass_cpu_us"][key].as_f64().unwrap() > 0.0,
                "{name}: {key}"
            );
        }
        assert!(c["hint_move_us"]["n"].as_u64().unwrap() >= 1, "{name}");
        assert!(c["hint_repeat_ns"]["n"].as_u64().unwrap() >= 16, "{name}");
        assert_eq!(c["hint_errors"], 0, "{name}");
        let s = &c["cpu_share_pct"];
        let sum = s["balancer"].as_f64().unwrap()
            + s["agent"].as_f64().unwrap()
            + s["hints"].as_f64().unwrap();
        assert!(
            (s["whole"].as_f64().unwrap() - sum).abs() < 1e-9,
            "{name}: {s}"
        );
        assert!(s["balancer"].as_f64().unwrap() > 0.0, "{name}");
        let agent_threads = c["agent_cpu_ns_by_thread"].as_object().unwrap();
        if c["agent"] == "on" {
            // The program is the agent's only client: it exchanges once
            // every LONE_PASSES passes, asking for no sample after the
            // first, and samples for itself; every pass has one sample or
            // the other.
            let (agent, own) = (
                c["agent_samples"].as_u64().unwrap(),
                c["own_scans"].as_u64().unwrap(),
            );
            assert_eq!(agent + own, passes, "{name}: {c}");
            // Its tick and the connection that serves the program (comm
            // names are cut to 15 bytes).
            for thread in ["dfsched-agent-t", "dfsched-agent-c"] {
                assert!(
                    agent_threads.contains_key(thread),
                    "{name}: {agent_threads:?}"
                );
            }
        } else {
            assert_eq!(
                (c["agent_samples"].as_u64(), c["own_scans"].as_u64()),
                (Some(0), Some(passes)),
                "{name}"
            );
            assert!(agent_threads.is_empty(), "{name}");
            assert_eq!(s["agent"], 0.0, "{name}");
        }
        if c["others"] == 0 {
            assert_eq!(c["quiet_ratio"], 1.0, "{name}");
        } else {
            assert!(c["quiet_ratio"].as_f64().unwrap() > 0.0, "{name}");
        }
    }
    let others = v["others_processes"].as_array().unwrap();
    assert_eq!(others.len(), 1, "one others process, for size 40");
    assert_eq!(
        (
            others[0]["threads"].as_u64(),
            others[0]["runnable"].as_u64()
        ),
        (Some(40), Some(5))
    );
    assert_eq!(others[0]["gone_after"], true);
    assert!(
        gone(others[0]["pid"].as_u64().unwrap()),
        "the others process is still there"
    );
    let cap = &v["capacity"];
    for key in [
        "pid_max",
        "threads_max",
        "threads_present",
        "reserve",
        "limit",
        "largest_others",
    ] {
        assert!(cap[key].as_u64().is_some(), "capacity.{key}: {cap}");
    }
    assert!(cap["limit"].as_u64() <= cap["pid_max"].as_u64());
    assert!(v["balance_interval_ms"].as_u64().is_some());
}

#[test]
fn sizes_beyond_the_thread_limit_and_bad_flags_are_usage_errors() {
    assert_usage_errors(
        dfsched,
        &["bench", "overhead", "--quick"],
        &[
            (&["--others", "0,999999"], "at most"),
            (&["--own", "0"], "--own 0"),
            (&["--seconds", "0"], "--seconds"),
            (&["--agent", "sometimes"], "on or off"),
        ],
    );
}
