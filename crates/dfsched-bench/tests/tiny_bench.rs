//! Runs tiny benchmarks in every mode this machine supports and checks what
//! ran and where: the report's JSON shape, and that pinned threads really
//! were on their CPUs (affinity read back inside each thread, and the CPU
//! it last ran on). No timing is asserted.

use dfsched_bench::modes::{oracle_assignment, split_assignment};
use dfsched_bench::{run_cases, BenchError, Mode, ParamError, Params, RunRecord};
use dfsched_core::{CpuId, CpuSet};
use dfsched_premise::skip_or_fail;

fn tiny(modes: Vec<Mode>) -> Params {
    Params {
        threads: 4,
        dfs: 2,
        df_bytes: 4096,
        iterations: 200,
        repeat: 1,
        modes,
        ..Params::default()
    }
}

/// The CPUs this test process may use (read the same way the bench does:
/// from a fresh thread, so no other test's pinning can leak in).
fn allowed() -> CpuSet {
    std::thread::spawn(|| {
        let set: CpuSet = std::fs::read_to_string("/proc/thread-self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in /proc/thread-self/status")
            .parse()
            .unwrap();
        set
    })
    .join()
    .unwrap()
}

fn runs_of(report: &dfsched_bench::BenchReport, mode: Mode) -> &[RunRecord] {
    &report.modes[&mode].runs
}

#[test]
fn every_supported_mode_runs_and_the_json_has_the_documented_shape() {
    let modes = Mode::ALL.to_vec();
    let reports = run_cases(&[tiny(modes.clone())], &mut |_| {}).unwrap();
    assert_eq!(reports.len(), 1);
    let v = serde_json::to_value(&reports[0]).unwrap();
    for m in &modes {
        let m = &v["modes"][m.as_str()];
        for key in [
            "median_s",
            "min_s",
            "max_s",
            "median_cpu_s",
            "median_ctx_switches",
        ] {
            assert!(m[key].is_number(), "modes.{key} missing in {m}");
        }
        assert!(m["median_migrations"].is_number() && m["median_spread"].is_number());
        let others = &m["median_others_share"];
        assert!(others.is_null() || (0.0..=1.0).contains(&others.as_f64().unwrap()));
        assert_eq!(m["runs_s"].as_array().unwrap().len(), 1);
        let run = &m["runs"][0];
        assert!(run["wall_s"].as_f64().unwrap() > 0.0);
        assert!(run["cpu_s"].as_f64().unwrap() >= 0.0);
    }
    for key in [
        "dfsched_vs_vanilla",
        "dfsched_vs_oracle",
        "oracle_vs_vanilla",
        "split_vs_vanilla",
    ] {
        assert!(v["ratios"].get(key).is_some(), "ratios.{key} missing");
    }
    assert!(v["ratios"]["oracle_vs_vanilla"].is_number());
    assert_eq!(v["params"]["threads"], 4);
    assert_eq!(v["machine"]["cpus_allowed"], allowed().to_string());
    assert!(v["machine"]["hypervisor"].is_boolean());
    // Every thread really did its passes on a live run.
    for m in &modes {
        let run = &runs_of(&reports[0], *m)[0];
        assert_eq!(run.threads.len(), 4, "{m}");
        assert!(run
            .threads
            .iter()
            .all(|t| t.finish_s > 0.0 && t.finish_s <= run.wall_s));
    }
}

#[test]
fn oracle_threads_run_on_their_dfs_cpus() {
    let params = tiny(vec![Mode::Oracle]);
    let cpus: Vec<CpuId> = allowed().iter().collect();
    let home = oracle_assignment(&params.threads_per_df(), &cpus);
    let reports = run_cases(&[params], &mut |_| {}).unwrap();
    let run = &runs_of(&reports[0], Mode::Oracle)[0];
    assert_eq!(run.pin_mismatches, 0);
    for t in &run.threads {
        let want = CpuSet::single(home[t.initial_df]);
        assert_eq!(
            t.affinity_start, want,
            "thread {} before the gate",
            t.thread
        );
        assert_eq!(t.affinity_end, want, "thread {} at the end", t.thread);
        assert_eq!(
            t.cpu_end,
            Some(home[t.initial_df]),
            "thread {} ran elsewhere",
            t.thread
        );
        assert_eq!(t.migrations, 0, "a pinned thread migrated");
    }
    if cpus.len() >= 2 {
        assert_ne!(home[0], home[1], "two DFs on two CPUs get a CPU each");
    } else {
        skip_or_fail("one CPU allowed: skipping the check that DFs get different CPUs");
    }
}

#[test]
fn oracle_repins_threads_when_they_switch_df() {
    let params = Params {
        iterations: 10,
        switch_every: 3,
        ..tiny(vec![Mode::Oracle])
    };
    let cpus: Vec<CpuId> = allowed().iter().collect();
    let home = oracle_assignment(&params.threads_per_df(), &cpus);
    let reports = run_cases(&[params], &mut |_| {}).unwrap();
    let run = &runs_of(&reports[0], Mode::Oracle)[0];
    // Iterations 3, 6 and 9 start on a new DF: 3 switches per thread.
    assert_eq!(run.df_switches, 4 * 3);
    for t in &run.threads {
        assert_eq!(t.final_df, (t.initial_df + 3) % 2);
        assert_eq!(
            t.affinity_end,
            CpuSet::single(home[t.final_df]),
            "thread {}",
            t.thread
        );
        assert_eq!(t.cpu_end, Some(home[t.final_df]));
        assert_eq!(t.pin_mismatches, 0);
    }
}

#[test]
fn split_threads_run_on_their_round_robin_cpus() {
    let params = Params {
        threads: 6,
        ..tiny(vec![Mode::Split])
    };
    let cpus: Vec<CpuId> = allowed().iter().collect();
    let thread_df: Vec<usize> = (0..6).map(|t| params.initial_df(t)).collect();
    let plan = split_assignment(&thread_df, 2, &cpus);
    let reports = run_cases(&[params], &mut |_| {}).unwrap();
    let run = &runs_of(&reports[0], Mode::Split)[0];
    for t in &run.threads {
        assert_eq!(t.affinity_start, CpuSet::single(plan[t.thread]));
        assert_eq!(t.cpu_end, Some(plan[t.thread]));
    }
    if cpus.len() >= 2 {
        for df in 0..2 {
            let on: CpuSet = run
                .threads
                .iter()
                .filter(|t| t.initial_df == df)
                .filter_map(|t| t.cpu_end)
                .collect();
            assert!(on.len() >= 2, "DF {df} ran only on {on}");
        }
    } else {
        skip_or_fail("one CPU allowed: skipping the check that DFs are split");
    }
}

#[test]
fn vanilla_makes_no_affinity_calls() {
    let reports = run_cases(&[tiny(vec![Mode::Vanilla])], &mut |_| {}).unwrap();
    let run = &runs_of(&reports[0], Mode::Vanilla)[0];
    let allowed = allowed();
    for t in &run.threads {
        assert_eq!(t.affinity_start, allowed);
        assert_eq!(t.affinity_end, allowed);
        assert!(t.pinned.is_none());
    }
}

#[test]
fn rounds_interleave_modes_and_progress_counts_every_run() {
    let params = Params {
        repeat: 3,
        ..tiny(vec![Mode::Vanilla, Mode::Split])
    };
    let mut seen = Vec::new();
    let reports = run_cases(&[params], &mut |p| {
        seen.push((p.done, p.total, p.round, p.mode))
    })
    .unwrap();
    assert_eq!(seen.len(), 6);
    assert_eq!(seen.last().unwrap().0, 6);
    assert!(seen.iter().all(|s| s.1 == 6));
    for round in 0..3 {
        let mut modes: Vec<&str> = seen.iter().filter(|s| s.2 == round).map(|s| s.3).collect();
        modes.sort();
        assert_eq!(
            modes,
            ["split", "vanilla"],
            "round {round} runs each mode once"
        );
    }
    assert_eq!(reports[0].modes[&Mode::Vanilla].runs_s.len(), 3);
}

#[test]
fn bad_parameters_run_nothing() {
    let mut called = false;
    let bad = Params {
        dfs: 5,
        ..tiny(vec![Mode::Vanilla])
    };
    let good = tiny(vec![Mode::Vanilla]);
    // The bad case is second: validation still happens before the first runs.
    let err = run_cases(&[good, bad], &mut |_| called = true).unwrap_err();
    assert!(matches!(
        err,
        BenchError::Params(ParamError::MoreDfsThanThreads { dfs: 5, threads: 4 })
    ));
    assert!(err.is_usage());
    assert!(!called, "a run happened before validation failed");
}

/// A `dfsched-record` run without `--record` records (the runtime's stats
/// name the file and count its bytes) into a private directory of its own
/// under the system temp dir, and leaves neither behind.
#[test]
fn a_recording_run_without_a_file_records_privately_and_leaves_nothing() {
    let reports = run_cases(&[tiny(vec![Mode::DfschedRecord])], &mut |_| {}).unwrap();
    let run = &runs_of(&reports[0], Mode::DfschedRecord)[0];
    let stats = run.runtime_stats.as_ref().expect("a dfsched run's stats");
    let record = &stats["record"];
    assert!(
        record["bytes"].as_u64().unwrap() > 0,
        "nothing recorded: {record}"
    );
    let path = std::path::PathBuf::from(record["path"].as_str().unwrap());
    let dir = path.parent().unwrap();
    assert_eq!(dir.parent().unwrap(), std::env::temp_dir(), "{record}");
    let name = dir.file_name().unwrap().to_string_lossy();
    assert!(name.starts_with("dfsched-bench-record-"), "{record}");
    assert!(!dir.exists(), "{} left behind", dir.display());
}
