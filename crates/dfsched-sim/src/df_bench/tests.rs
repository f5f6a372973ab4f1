//! Tests of the DF benchmark on the simulated machine: the policies'
//! order, the deals, parameter checks, Table I's direction, and a machine
//! profile's costs moving the prediction the expected way.
use super::*;
use crate::profile::MachineProfile;

fn small() -> DfBenchParams {
    DfBenchParams {
        threads: 16,
        dfs: 4,
        df_bytes: 4096,
        passes: 20,
        private_kib: 4,
        quantum_cycles: 5_000,
        ..DfBenchParams::default()
    }
}

fn by(r: &DfBenchResult, p: DfPolicy) -> &BodyReport {
    &r.results.iter().find(|x| x.policy == p).unwrap().report
}

#[test]
fn dfsched_beats_vanilla_and_split_on_misses_and_run_time() {
    let r = run(&small(), &DfPolicy::ALL, |_| {}).unwrap();
    let (v, d, s, o) = (
        by(&r, DfPolicy::Vanilla),
        by(&r, DfPolicy::Dfsched),
        by(&r, DfPolicy::Split),
        by(&r, DfPolicy::Oracle),
    );
    let bad = |b: &BodyReport| b.misses.reload + b.misses.coherence;
    assert!(
        bad(d) < bad(v),
        "dfsched {:?} vanilla {:?}",
        d.misses,
        v.misses
    );
    assert!(
        bad(d) < bad(s),
        "dfsched {:?} split {:?}",
        d.misses,
        s.misses
    );
    assert!(d.makespan_cycles < v.makespan_cycles);
    assert!(o.misses.coherence <= d.misses.coherence + 64);
    // Everyone touched the same data the same number of times.
    for x in &r.results {
        let m = &x.report.memory;
        assert_eq!(m.reads + m.writes, 16 * 20 * 64, "{}", x.policy.name());
    }
    assert_eq!(r.results[0].runtime_vs_vanilla_milli, Some(1000));
    // Co-thread: the engine saw no hint, and grouped the program's
    // threads (one co-thread group, never a DF's).
    let c = by(&r, DfPolicy::CoThread).engine.as_ref().unwrap();
    assert_eq!(c.hints, 0);
    assert!(c.groups_created >= 1);
    assert_eq!(by(&r, DfPolicy::CoThread).processes.len(), 1);
}

#[test]
fn co_thread_is_within_3_percent_of_vanilla_when_one_process_is_the_load() {
    // One process of 16 threads on 2 CPUs: packing it would idle a
    // CPU. A model result of the deterministic simulation, established
    // against the strict-rotation kernel model (with the seeded model
    // this one seed gives co-thread 1.10 x vanilla).
    let p = DfBenchParams {
        kernel: KernelModel::rotation(),
        ..small()
    };
    let r = run(&p, &[DfPolicy::Vanilla, DfPolicy::CoThread], |_| {}).unwrap();
    let (v, c) = (by(&r, DfPolicy::Vanilla), by(&r, DfPolicy::CoThread));
    assert!(
        c.makespan_cycles * 100 <= v.makespan_cycles * 103,
        "co-thread {} vanilla {}",
        c.makespan_cycles,
        v.makespan_cycles
    );
    assert_eq!(c.processes[0].cpus().len(), 2);
}

#[test]
fn threads_are_dealt_to_processes() {
    let p = DfBenchParams {
        processes: 3,
        passes: 2,
        ..small()
    };
    let w = p.workload();
    let per: Vec<usize> = (0..3)
        .map(|q| w.tasks.iter().filter(|t| t.process == q).count())
        .collect();
    assert_eq!(per, vec![6, 5, 5]);
    let r = run(&p, &[DfPolicy::CoThread], |_| {}).unwrap();
    assert_eq!(by(&r, DfPolicy::CoThread).processes.len(), 3);
    let bad = DfBenchParams {
        processes: 17,
        ..small()
    };
    assert!(matches!(
        bad.validate(),
        Err(DfBenchError::Param {
            name: "processes",
            ..
        })
    ));
    let zero = DfBenchParams {
        processes: 0,
        ..small()
    };
    assert!(zero.validate().is_err());
    // A JSON document without the field reads as one process.
    let mut v = serde_json::to_value(small()).unwrap();
    v.as_object_mut().unwrap().remove("processes");
    let back: DfBenchParams = serde_json::from_value(v).unwrap();
    assert_eq!(back.processes, 1);
}

#[test]
fn same_seed_same_result_and_the_seed_changes_the_deal() {
    let p = DfBenchParams {
        passes: 2,
        ..small()
    };
    let a = run(&p, &[DfPolicy::Dfsched, DfPolicy::CoThread], |_| {}).unwrap();
    let b = run(&p, &[DfPolicy::Dfsched, DfPolicy::CoThread], |_| {}).unwrap();
    assert_eq!(a, b);
    // The JSON a seed prints, byte for byte.
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let q = DfBenchParams {
        seed: 2,
        ..p.clone()
    };
    assert_ne!(p.workload(), q.workload());
}

#[test]
fn bad_parameters_are_refused_by_name() {
    let p = DfBenchParams {
        write_pct: 101,
        ..small()
    };
    let e = run(&p, &[DfPolicy::Vanilla], |_| {}).unwrap_err();
    assert_eq!(e.to_string(), "write_pct = 101: a percentage, 0 to 100");
    let p = DfBenchParams {
        threads: 0,
        ..small()
    };
    assert!(matches!(
        run(&p, &[DfPolicy::Vanilla], |_| {}),
        Err(DfBenchError::Param {
            name: "threads",
            ..
        })
    ));
}

#[test]
fn a_shared_llc_is_added_only_where_the_topology_has_one() {
    let p = DfBenchParams {
        llc_kib: 256,
        ..small()
    };
    assert_eq!(p.machine(&p.topology()).shared.len(), 1);
    let one = DfBenchParams {
        cores: 1,
        ..p.clone()
    };
    assert!(one.machine(&one.topology()).shared.is_empty());
    let r = run(&p, &[DfPolicy::Vanilla, DfPolicy::Dfsched], |_| {}).unwrap();
    assert!(r.results.iter().all(|x| x.report.memory.shared_hits > 0));
}

/// The co-thread test program of paper 001 §IV (Table I) on the
/// paper's 8 logical CPUs: P processes of T threads, each process's
/// threads on 16 KiB of its own ("small"), 32 KiB private caches.
fn table_i(processes: u32, threads_per_process: u32) -> DfBenchParams {
    DfBenchParams {
        cores: 8,
        threads: processes * threads_per_process,
        processes,
        dfs: processes,
        df_per_process: true,
        df_bytes: 16 * 1024,
        private_kib: 32,
        llc_kib: 6144,
        passes: 50,
        // Table I's findings below were established against the
        // strict-rotation kernel model, which spreads every process
        // as widely as possible; under the seeded model (the default)
        // one seed gives 9 x 3 co-thread 1.08 x vanilla's throughput
        // and 11 x 5 29 % fewer coherence misses.
        kernel: KernelModel::rotation(),
        ..DfBenchParams::default()
    }
}

#[test]
fn df_per_process_puts_each_process_on_a_df_of_its_own() {
    let p = table_i(9, 3);
    let w = p.workload();
    assert_eq!(w.dfs.len(), 9);
    for (i, t) in w.tasks.iter().enumerate() {
        assert_eq!(t.process, i as u32 % 9);
        // The first burst names the DF: the process's own, 1-based.
        assert!(
            matches!(t.program[0], Burst::Switch { next: Some(DfId(d)) } if d == u64::from(t.process) + 1),
            "task {i}: {:?}",
            t.program[0]
        );
    }
    // The seed does not change that deal.
    assert_eq!(
        DfBenchParams {
            seed: 7,
            ..p.clone()
        }
        .workload(),
        w
    );
    // dfs must say as many DFs as there are processes.
    let bad = DfBenchParams {
        dfs: 4,
        ..p.clone()
    };
    assert!(matches!(
        bad.validate(),
        Err(DfBenchError::Param {
            name: "dfs",
            value: 4,
            ..
        })
    ));
    // A JSON document without the field reads as the seeded deal.
    let mut v = serde_json::to_value(small()).unwrap();
    v.as_object_mut().unwrap().remove("df_per_process");
    let back: DfBenchParams = serde_json::from_value(v).unwrap();
    assert!(!back.df_per_process);
}

/// Table I's direction on the paper's machine size: packing each
/// process on one CPU removes at least a third of the coherence misses
/// of its threads running at once on several CPUs, and the run is at least
/// 1/1.10 shorter (≥ 1.10 × the throughput) for 9 × 3 and 11 × 5, and
/// the same for 7 × 1 (one thread a process: nothing to pack).
#[test]
fn co_thread_reaches_table_i_on_eight_cpus() {
    for (p, t) in [(9, 3), (11, 5)] {
        let r = run(
            &table_i(p, t),
            &[DfPolicy::Vanilla, DfPolicy::CoThread],
            |_| {},
        )
        .unwrap();
        let (v, c) = (by(&r, DfPolicy::Vanilla), by(&r, DfPolicy::CoThread));
        assert!(
            c.misses.coherence * 3 < v.misses.coherence * 2,
            "{p}x{t}: coherence misses {} vs vanilla's {}",
            c.misses.coherence,
            v.misses.coherence
        );
        assert!(
            c.makespan_cycles * 110 <= v.makespan_cycles * 100,
            "{p}x{t}: {} cycles vs vanilla's {}",
            c.makespan_cycles,
            v.makespan_cycles
        );
    }
    let r = run(
        &table_i(7, 1),
        &[DfPolicy::Vanilla, DfPolicy::CoThread],
        |_| {},
    )
    .unwrap();
    let (v, c) = (by(&r, DfPolicy::Vanilla), by(&r, DfPolicy::CoThread));
    assert!(
        c.makespan_cycles.abs_diff(v.makespan_cycles) * 100 <= v.makespan_cycles * 3,
        "7x1: {} cycles vs vanilla's {}",
        c.makespan_cycles,
        v.makespan_cycles
    );
}

/// The headline case of `bench df` on a calibrated 2-CPU machine,
/// medians of three seeds (vanilla's placement is a seeded draw).
fn headline_on(cal: &Calibration) -> (u64, u64, u64) {
    let by = |p: DfPolicy| {
        let mut v: Vec<u64> = (1..=3)
            .map(|seed| {
                let params = DfBenchParams {
                    threads: 8,
                    dfs: 2,
                    df_bytes: 8192,
                    passes: 300,
                    write_pct: 100,
                    deal_round_robin: true,
                    quantum_cycles: 40_000,
                    seed,
                    ..DfBenchParams::default()
                };
                run_calibrated(&params, cal, &[p], |_| {}).unwrap().results[0]
                    .report
                    .makespan_cycles
            })
            .collect();
        v.sort();
        v[1]
    };
    (
        by(DfPolicy::Vanilla),
        by(DfPolicy::Oracle),
        by(DfPolicy::Split),
    )
}

#[test]
fn a_dearer_line_transfer_widens_the_gap_between_oracle_and_sharing() {
    let profile = MachineProfile::example(Topology::test(1, 1, 2, 1));
    let cal = profile.calibration().unwrap();
    let (v, o, s) = headline_on(&cal);
    let mut dear = profile.clone();
    for name in ["line_read_transfer", "line_write_transfer"] {
        let c = dear.costs.get_mut(name).unwrap();
        *c = crate::profile::Cost::from_rounds(&[c.median_ns.unwrap() * 4.0]);
    }
    let dear_cal = dear.calibration().unwrap();
    assert!(dear_cal.cost.coherence_transfer_cycles > cal.cost.coherence_transfer_cycles);
    let (v2, o2, s2) = headline_on(&dear_cal);
    // The oracle never moves a line between CPUs: unchanged.
    assert_eq!(o2, o);
    // Vanilla and split share DFs across CPUs: slower, and further
    // from the oracle.
    assert!(v2 > v && s2 > s, "vanilla {v} -> {v2}, split {s} -> {s2}");
    assert!(o2 * 1000 / v2 < o * 1000 / v, "oracle/vanilla must fall");
}

#[test]
fn a_dearer_context_switch_slows_every_policy_that_switches() {
    let profile = MachineProfile::example(Topology::test(1, 1, 2, 1));
    let cal = profile.calibration().unwrap();
    let (v, o, s) = headline_on(&cal);
    let mut dear = profile.clone();
    let c = dear.costs.get_mut("context_switch").unwrap();
    *c = crate::profile::Cost::from_rounds(&[c.median_ns.unwrap() * 10.0]);
    let (v2, o2, s2) = headline_on(&dear.calibration().unwrap());
    assert!(v2 > v && o2 > o && s2 > s, "{v}/{o}/{s} -> {v2}/{o2}/{s2}");
}

#[test]
fn round_robin_deal_is_what_bench_df_does() {
    let p = DfBenchParams {
        threads: 7,
        dfs: 3,
        deal_round_robin: true,
        passes: 1,
        ..small()
    };
    let firsts: Vec<Option<DfId>> = p.workload().first_dfs();
    let want: Vec<Option<DfId>> = (0..7).map(|i| Some(DfId(i % 3 + 1))).collect();
    assert_eq!(firsts, want);
}

#[test]
fn what_cannot_run_is_refused_with_its_limit_in_the_message() {
    let cases = [
        (
            DfBenchParams {
                threads: 1_000_000_000,
                ..small()
            },
            MAX_THREADS.to_string(),
        ),
        (
            DfBenchParams {
                df_bytes: 1_000_000_000_000_000,
                ..small()
            },
            MAX_DF_BYTES.to_string(),
        ),
        (
            DfBenchParams {
                threads: 50_000,
                passes: 1_000,
                ..small()
            },
            MAX_BURSTS.to_string(),
        ),
        (
            DfBenchParams {
                threads: 1_000,
                passes: 1_000,
                df_bytes: 1 << 20,
                ..small()
            },
            MAX_LINE_ACCESSES.to_string(),
        ),
    ];
    for (params, limit) in cases {
        let e = params.validate().expect_err("refused").to_string();
        assert!(e.contains(&limit), "{e} names the limit {limit}");
    }
    // The limits themselves run.
    let at_limit = DfBenchParams {
        threads: 1_000,
        passes: 1,
        df_bytes: MAX_LINE_ACCESSES / 1_000 * 64,
        ..small()
    };
    at_limit.validate().unwrap();
}

#[test]
fn a_group_quota_cuts_succession_into_shorter_turns() {
    // 2 CPUs, 4 DFs of 4 threads: each CPU serves two groups. Without a
    // quota a group's turn is its 4 threads' quanta; with a quota of 1 the
    // CPU changes group at (nearly) every pick, as the scx body's
    // `--quota 1` does; the same work is done either way.
    let p = DfBenchParams {
        deal_round_robin: true,
        ..small()
    };
    let whole = run(&p, &[DfPolicy::Dfsched], |_| {}).unwrap();
    let one = run(
        &DfBenchParams {
            group_quota: 1,
            ..p.clone()
        },
        &[DfPolicy::Dfsched],
        |_| {},
    )
    .unwrap();
    let (w, o) = (by(&whole, DfPolicy::Dfsched), by(&one, DfPolicy::Dfsched));
    assert!(
        o.batch_changes > 2 * w.batch_changes,
        "quota 1: {} group changes, none: {}",
        o.batch_changes,
        w.batch_changes
    );
    assert_eq!(
        o.memory.reads + o.memory.writes,
        w.memory.reads + w.memory.writes
    );
    // Round robin ignores the quota.
    let rr = |q| {
        let r = run(
            &DfBenchParams {
                group_quota: q,
                ..p.clone()
            },
            &[DfPolicy::DfschedRr],
            |_| {},
        )
        .unwrap();
        by(&r, DfPolicy::DfschedRr).clone()
    };
    assert_eq!(rr(0), rr(1));
}
