//! Replays of synthetic recordings whose outcome is known by hand.

use super::*;
use dfsched_record::{Header, Policy as RecPolicy};

const MS: u64 = 1_000_000;

fn header() -> Header {
    Header {
        pid: 1,
        cpus: 2,
        start_unix_ns: 0,
        policy: RecPolicy::DataAffinity,
        balance_interval_ms: 100,
    }
}

/// `threads` threads on `dfs` DFs (thread i on DF i mod dfs), each using
/// `cpu_ms` of CPU spread over `wall_ms` (a sample every 100 ms), with
/// `wait_pct` of the off-CPU time spent waiting for a CPU, the rest
/// blocked.
fn recording(threads: u64, dfs: u64, cpu_ms: u64, wall_ms: u64, wait_pct: u64) -> Recording {
    let mut events = Vec::new();
    for t in 0..threads {
        let tid = 100 + t;
        events.push(Event::ThreadNew {
            t_ns: 0,
            tid,
            app: 0,
            cpu: None,
            cpu_ns: 0,
            wait_ns: 0,
            runs: None,
            voluntary: None,
        });
        events.push(Event::Hint {
            t_ns: 0,
            tid,
            app: 0,
            cur: 0,
            next: 1 + t % dfs,
            cpu_ns: 0,
        });
        let steps = wall_ms / 100;
        for s in 1..=steps {
            let t_ns = s * 100 * MS;
            let cpu_ns = cpu_ms * MS * s / steps;
            let off = t_ns - cpu_ns;
            let ev = if s == steps {
                Event::ThreadExit {
                    t_ns,
                    tid,
                    cpu_ns,
                    wait_ns: off * wait_pct / 100,
                    runs: None,
                    voluntary: None,
                }
            } else {
                Event::Sample {
                    t_ns,
                    tid,
                    cpu_ns,
                    wait_ns: off * wait_pct / 100,
                    cpu: Some(0),
                    runs: None,
                    voluntary: None,
                }
            };
            events.push(ev);
        }
    }
    events.push(Event::End {
        t_ns: wall_ms * MS,
        events: 0,
        dropped: 0,
    });
    Recording {
        header: header(),
        events,
        complete: true,
        truncated: false,
        unknown_records: 0,
        dropped: 0,
    }
}

fn small() -> ReplayParams {
    ReplayParams {
        access_budget: 200_000,
        ..ReplayParams::default()
    }
}

#[test]
fn the_plan_splits_each_interval_into_cpu_wait_and_blocked_time() {
    // 4 threads, each 200 ms of CPU over 400 ms: 200 ms off CPU each,
    // half waiting, half blocked.
    let rec = recording(4, 2, 200, 400, 50);
    let plan = ReplayPlan::new(&[rec], &small(), &Calibration::default()).unwrap();
    assert_eq!(plan.threads, 4);
    assert_eq!(plan.recorded_run_ns, 400 * MS);
    assert_eq!(plan.cpu_ns, 4 * 200 * MS);
    assert_eq!(plan.cpu_on_df_ns, 4 * 200 * MS);
    assert_eq!(plan.wait_ns, 4 * 100 * MS);
    assert_eq!(plan.blocked_ns, 4 * 100 * MS);
    assert_eq!(plan.df_bytes, vec![DEFAULT_DF_BYTES; 2]);
    assert_eq!(plan.dfs_defaulted, 2);
    assert!(plan.scale < 1.0, "scaled to the budget: {}", plan.scale);
    plan.workload.validate().unwrap();
}

#[test]
fn a_declared_df_size_replaces_the_default() {
    let mut rec = recording(2, 1, 100, 200, 0);
    rec.events.insert(
        0,
        Event::DfSize {
            t_ns: 0,
            app: 0,
            df: 1,
            bytes: 4096,
        },
    );
    let plan = ReplayPlan::new(&[rec], &small(), &Calibration::default()).unwrap();
    assert_eq!(plan.df_bytes, vec![4096]);
    assert_eq!(plan.dfs_defaulted, 0);
}

#[test]
fn a_cpu_bound_run_replays_on_its_own_machine_in_about_its_recorded_time() {
    // 4 threads of 200 ms CPU each on 2 CPUs, never blocked: 400 ms.
    let rec = recording(4, 2, 200, 400, 100);
    let plan = ReplayPlan::new(&[rec], &small(), &Calibration::default()).unwrap();
    assert_eq!(plan.blocked_ns, 0);
    let r = run(
        &plan,
        &small(),
        &Calibration::default(),
        &[DfPolicy::DfschedRr],
        |_| {},
    )
    .unwrap();
    let got = r.recorded_policy().unwrap().predicted_ns as f64;
    let want = 400.0 * MS as f64;
    assert!(
        (got / want - 1.0).abs() < 0.15,
        "predicted {:.1} ms for a 400 ms run",
        got / MS as f64
    );
}

#[test]
fn blocked_time_is_replayed_as_sleep_even_with_cpus_to_spare() {
    // One thread: 50 ms of CPU over 400 ms, the rest blocked. On 64 CPUs
    // it still takes about 400 ms: the sleeps are not compressible.
    let rec = recording(1, 1, 50, 400, 0);
    let params = ReplayParams {
        cores: 64,
        ..small()
    };
    let plan = ReplayPlan::new(&[rec], &params, &Calibration::default()).unwrap();
    assert_eq!(plan.blocked_ns, 350 * MS);
    let r = run(
        &plan,
        &params,
        &Calibration::default(),
        &[DfPolicy::Vanilla],
        |_| {},
    )
    .unwrap();
    let got = r.results[0].predicted_ns as f64 / MS as f64;
    assert!((380.0..440.0).contains(&got), "{got} ms");
}

#[test]
fn more_cpus_shorten_a_cpu_bound_replay_and_the_same_input_gives_the_same_result() {
    // Reads only: no coherence traffic, so vanilla's spreading costs
    // nothing and the CPUs alone decide.
    let rec = recording(8, 2, 100, 400, 100);
    let at = |cores| {
        let params = ReplayParams {
            cores,
            write_pct: 0,
            ..small()
        };
        let plan =
            ReplayPlan::new(std::slice::from_ref(&rec), &params, &Calibration::default()).unwrap();
        run(
            &plan,
            &params,
            &Calibration::default(),
            &DfPolicy::ALL,
            |_| {},
        )
        .unwrap()
    };
    let two = at(2);
    assert_eq!(two, at(2), "a replay is deterministic");
    let many = at(64);
    let v = |r: &ReplayResult| r.results[0].predicted_ns;
    assert!(v(&many) * 2 < v(&two), "{} vs {}", v(&many), v(&two));
    assert_eq!(many.cpus, 64);
}

#[test]
fn nothing_to_replay_is_refused() {
    let mut rec = recording(1, 1, 10, 100, 0);
    rec.events.clear();
    assert_eq!(
        ReplayPlan::new(&[rec], &small(), &Calibration::default()),
        Err(ReplayError::NoThreads)
    );
}

#[test]
fn other_processes_load_is_replayed_on_the_recorded_cpus_when_asked() {
    // One thread, 100 ms of CPU over 200 ms on 1 CPU, waiting the rest:
    // another process took half the CPU (1000 milli beside it).
    let mut rec = recording(1, 1, 100, 200, 100);
    rec.header.cpus = 1;
    for t in [100, 200] {
        rec.events.push(Event::OutsideLoad {
            t_ns: t * MS,
            per_cpu: vec![(0, 1000)],
        });
    }
    let alone = ReplayParams {
        cores: 1,
        ..small()
    };
    let with = ReplayParams {
        outside_load: true,
        ..alone.clone()
    };
    let cal = Calibration::default();
    let time = |p: &ReplayParams| {
        let plan = ReplayPlan::new(std::slice::from_ref(&rec), p, &cal).unwrap();
        let r = run(&plan, p, &cal, &[DfPolicy::Vanilla], |_| {}).unwrap();
        (plan, r.results[0].predicted_ns as f64 / MS as f64)
    };
    let (plan, t_alone) = time(&alone);
    assert_eq!(plan.outside_tasks, 0);
    let (plan, t_with) = time(&with);
    assert_eq!(plan.outside_tasks, 1);
    assert!((90.0..125.0).contains(&t_alone), "alone: {t_alone} ms");
    assert!(
        (170.0..240.0).contains(&t_with),
        "beside the load: {t_with} ms"
    );
}

/// A group of `members` threads of one process on DF 1 that hand work to
/// each other: each uses `cpu_ms` of CPU over `wall_ms`, blocked the rest,
/// and ends `runs` run periods (a sample every 100 ms; run periods
/// recorded, as the runtime writes them since the field exists).
fn handing_off(members: u64, cpu_ms: u64, wall_ms: u64, runs: u64) -> Recording {
    let mut rec = recording(members, 1, cpu_ms, wall_ms, 0);
    let steps = wall_ms / 100;
    // Every run ends in a block (its members hand off on CPUs of their
    // own).
    for ev in &mut rec.events {
        match ev {
            Event::ThreadNew {
                runs: r,
                voluntary: v,
                ..
            } => (*r, *v) = (Some(0), Some(0)),
            Event::Sample {
                t_ns,
                runs: r,
                voluntary: v,
                ..
            }
            | Event::ThreadExit {
                t_ns,
                runs: r,
                voluntary: v,
                ..
            } => {
                *r = Some(runs * (*t_ns / (100 * MS)) / steps);
                *v = *r;
            }
            _ => {}
        }
    }
    rec
}

/// Reads only, no wake-up latency: a ring's time is its work and
/// switches alone.
fn plain() -> (ReplayParams, Calibration) {
    let params = ReplayParams {
        write_pct: 0,
        ..small()
    };
    let cal = Calibration {
        wake_other_cycles: 0,
        ..Calibration::default()
    };
    (params, cal)
}

fn predicted_ms(rec: &Recording, params: &ReplayParams, cal: &Calibration, p: DfPolicy) -> f64 {
    let plan = ReplayPlan::new(std::slice::from_ref(rec), params, cal).unwrap();
    let r = run(&plan, params, cal, &[p], |_| {}).unwrap();
    r.results[0].predicted_ns as f64 / MS as f64
}

#[test]
fn a_pair_that_hands_off_replays_as_a_ring_whose_time_is_its_work() {
    // Ping-pong: each of two threads 200 ms of CPU over 400 ms, blocked
    // while the other runs; 20,000 hand-offs each. On its own CPU
    // (oracle) the ring takes the pair's CPU time: 400 ms.
    let rec = handing_off(2, 200, 400, 20_000);
    let (params, cal) = plain();
    let plan = ReplayPlan::new(std::slice::from_ref(&rec), &params, &cal).unwrap();
    assert_eq!(plan.rings.len(), 1, "{:?}", plan.rings);
    let ring = &plan.rings[0];
    assert_eq!(ring.tids, vec![100, 101]);
    assert_eq!(ring.tokens, 1);
    assert_eq!(ring.recorded_rounds, 20_000);
    assert_eq!(
        ring.replayed_rounds,
        (20_000.0 * plan.scale).round() as u64,
        "rounds scale with the replay"
    );
    plan.workload.validate().unwrap();
    let got = predicted_ms(&rec, &params, &cal, DfPolicy::Oracle);
    assert!((390.0..415.0).contains(&got), "{got} ms for 400 ms of work");
}

#[test]
fn a_one_token_ring_never_runs_two_members_at_once_where_open_loop_would() {
    // The same pair on 64 CPUs, split over two (coherence misses slow
    // every piece): closed loop, its members still take turns, so the run
    // lasts at least their summed run time; open loop, each sleeps its
    // recorded time whatever the other does, and they overlap.
    let rec = handing_off(2, 200, 400, 20_000);
    let params = ReplayParams {
        cores: 64,
        ..small()
    };
    let cal = Calibration::default();
    let report = |p: &ReplayParams| {
        let plan = ReplayPlan::new(std::slice::from_ref(&rec), p, &cal).unwrap();
        let r = run(&plan, p, &cal, &[DfPolicy::Split], |_| {}).unwrap();
        r.results[0].report.clone()
    };
    let ran = |r: &BodyReport| -> u64 {
        r.processes
            .iter()
            .flat_map(|p| p.cycles_by_cpu.iter().map(|x| x.1))
            .sum()
    };
    let closed = report(&params);
    assert_eq!(closed.cpus, 64);
    assert!(
        closed.makespan_cycles >= ran(&closed),
        "one token: {} cycles of run time in a makespan of {}",
        ran(&closed),
        closed.makespan_cycles
    );
    let open = report(&ReplayParams {
        closed_loop: false,
        ..params.clone()
    });
    assert!(
        open.makespan_cycles < ran(&open),
        "open loop overlaps the pair: {} cycles of run time in {}",
        ran(&open),
        open.makespan_cycles
    );
}

#[test]
fn two_tokens_let_two_members_of_four_run_at_once() {
    // Four threads, each 100 ms of CPU over 200 ms, blocked the rest: two
    // ran at any time. On CPUs to spare the ring of two tokens takes the
    // work over two: 200 ms; one CPU takes all of it: 400 ms.
    let rec = handing_off(4, 100, 200, 4_000);
    let (params, cal) = plain();
    let plan = ReplayPlan::new(std::slice::from_ref(&rec), &params, &cal).unwrap();
    assert_eq!(plan.rings[0].tokens, 2);
    let wide = ReplayParams {
        cores: 64,
        ..params.clone()
    };
    let got = predicted_ms(&rec, &wide, &cal, DfPolicy::Vanilla);
    assert!((190.0..215.0).contains(&got), "{got} ms on 64 CPUs");
    let one = ReplayParams { cores: 1, ..params };
    let got = predicted_ms(&rec, &one, &cal, DfPolicy::Vanilla);
    assert!((390.0..425.0).contains(&got), "{got} ms on 1 CPU");
}

#[test]
fn recordings_without_run_periods_replay_open_loop_as_before() {
    // The same hand-off shape with no run periods (a recording made before
    // the field): no ring, and the plan is what the open loop makes.
    let old = recording(2, 1, 200, 400, 0);
    let (params, cal) = plain();
    let plan = ReplayPlan::new(std::slice::from_ref(&old), &params, &cal).unwrap();
    assert!(plan.rings.is_empty());
    let open = ReplayPlan::new(
        std::slice::from_ref(&old),
        &ReplayParams {
            closed_loop: false,
            ..params
        },
        &cal,
    )
    .unwrap();
    assert_eq!(plan.workload, open.workload);
}
