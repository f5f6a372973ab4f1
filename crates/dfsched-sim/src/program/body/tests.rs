//! Tests of the machine body: programs run to the end, misses land where
//! the placement says they must, the Engine's placement is honoured.

use super::*;
use crate::cache::CacheGeometry;
use crate::machine::CacheLevelConfig;
use crate::program::{DfSpec, TaskSpec};

/// A private cache of `lines` lines (64-byte lines, 4 ways).
fn small_cache(lines: u32) -> MachineConfig {
    MachineConfig {
        private: CacheLevelConfig {
            geometry: CacheGeometry {
                sets: lines / 4,
                ways: 4,
            },
            hit_cycles: 2,
        },
        ..MachineConfig::default()
    }
}

/// `tasks` tasks; task `i` works on DF `i % dfs + 1`: `passes` passes of
/// reads then writes over the whole DF (`lines` lines).
fn workload(tasks: usize, dfs: usize, lines: u64, passes: usize) -> Workload {
    Workload {
        dfs: vec![DfSpec { bytes: lines * 64 }; dfs],
        tasks: (0..tasks)
            .map(|i| {
                let mut program = vec![Burst::Switch {
                    next: Some(DfId((i % dfs) as u64 + 1)),
                }];
                for _ in 0..passes {
                    program.push(Burst::Read { lines });
                    program.push(Burst::Write { lines });
                }
                TaskSpec {
                    process: 0,
                    start_cycles: 0,
                    allowed: None,
                    program,
                    background: false,
                }
            })
            .collect(),
    }
}

fn two_cpus() -> Topology {
    Topology::test(1, 1, 2, 1)
}

fn quick(placement: Placement, dispatch: RqPolicy) -> BodyConfig {
    BodyConfig {
        quantum_cycles: 20_000,
        balance_interval_cycles: 50_000,
        ..BodyConfig::new(placement, dispatch)
    }
}

#[test]
fn one_task_misses_each_line_once_when_its_df_fits() {
    let w = workload(1, 1, 32, 3);
    let r = run(
        &two_cpus(),
        &small_cache(64),
        w,
        quick(Placement::Vanilla, RqPolicy::Vanilla),
        1,
    )
    .unwrap();
    assert_eq!(r.misses.cold, 32);
    assert_eq!(r.misses.total(), 32, "{:?}", r.misses);
    assert_eq!(r.memory.reads + r.memory.writes, 32 * 6);
    assert!(r.makespan_cycles >= 32 * 6 * 2);
    assert_eq!(r.tasks, 1);
}

#[test]
fn sharing_a_df_across_cpus_costs_coherence_misses_and_pinning_it_does_not() {
    // Two tasks on one DF, two CPUs: split spreads them (one per CPU), the
    // oracle pins the DF to one CPU.
    let w = workload(2, 1, 32, 4);
    let split = run(
        &two_cpus(),
        &small_cache(64),
        w.clone(),
        quick(Placement::Split, RqPolicy::Vanilla),
        1,
    )
    .unwrap();
    let oracle = run(
        &two_cpus(),
        &small_cache(64),
        w,
        quick(Placement::Oracle, RqPolicy::Vanilla),
        1,
    )
    .unwrap();
    assert!(split.misses.coherence > 0, "{:?}", split.misses);
    assert_eq!(oracle.misses.coherence, 0, "{:?}", oracle.misses);
    assert_eq!(oracle.misses.cold, 32);
}

#[test]
fn batching_groups_cuts_reload_misses_against_round_robin() {
    // One CPU, two DFs that each fit the cache but not together, two tasks
    // per DF arriving interleaved. Round robin alternates DFs every
    // quantum; batching runs both tasks of a DF back to back.
    let topo = Topology::test(1, 1, 1, 1);
    let w = workload(4, 2, 48, 6);
    let rr = run(
        &topo,
        &small_cache(64),
        w.clone(),
        quick(Placement::Oracle, RqPolicy::Vanilla),
        1,
    )
    .unwrap();
    let da = run(
        &topo,
        &small_cache(64),
        w,
        quick(Placement::Oracle, RqPolicy::DataAffinity),
        1,
    )
    .unwrap();
    assert!(
        da.misses.reload < rr.misses.reload,
        "batched {:?} vs round robin {:?}",
        da.misses,
        rr.misses
    );
    assert!(da.batch_changes < rr.batch_changes);
}

#[test]
fn the_engine_places_each_df_on_its_own_cpu_and_sees_every_event() {
    // Four tasks, two DFs, two CPUs: heavy load (two per CPU), so each
    // DF's group gets one CPU and no line is ever shared across CPUs.
    let w = workload(4, 2, 32, 4);
    let r = run(
        &two_cpus(),
        &small_cache(64),
        w,
        quick(Placement::Engine(Config::default()), RqPolicy::DataAffinity),
        1,
    )
    .unwrap();
    let e = r
        .engine
        .clone()
        .expect("engine placement reports engine stats");
    assert_eq!(e.hints, 4);
    assert_eq!(e.groups_reclaimed, 2, "both groups emptied at exit");
    assert_eq!(r.misses.coherence, 0, "{:?}", r.misses);
}

#[test]
fn sleepers_block_and_wake_and_the_run_lasts_at_least_the_sleep() {
    let mut w = workload(2, 1, 8, 1);
    w.tasks[0]
        .program
        .insert(1, Burst::Sleep { cycles: 1_000_000 });
    for placement in [Placement::Vanilla, Placement::Engine(Config::default())] {
        let r = run(
            &two_cpus(),
            &small_cache(64),
            w.clone(),
            quick(placement, RqPolicy::DataAffinity),
            1,
        )
        .unwrap();
        assert!(r.makespan_cycles >= 1_000_000, "{}", r.makespan_cycles);
        assert!(r.busy_cycles < 1_000_000, "sleeping is not busy");
    }
}

#[test]
fn a_long_compute_is_preempted_so_others_run_in_between() {
    // One CPU, two compute-only tasks of 10 quanta each: round robin
    // interleaves them, so there are many context switches.
    let program = |_| TaskSpec {
        process: 0,
        start_cycles: 0,
        allowed: None,
        program: vec![Burst::Compute { cycles: 200_000 }],
        background: false,
    };
    let w = Workload {
        dfs: vec![],
        tasks: (0..2).map(program).collect(),
    };
    let r = run(
        &Topology::test(1, 1, 1, 1),
        &small_cache(64),
        w,
        quick(Placement::Vanilla, RqPolicy::Vanilla),
        1,
    )
    .unwrap();
    assert!(
        r.memory.context_switches >= 19,
        "{}",
        r.memory.context_switches
    );
    assert_eq!(
        r.makespan_cycles,
        400_000 + r.memory.context_switches * 3_000
    );
}

#[test]
fn same_workload_same_report() {
    let go = || {
        run(
            &Topology::test(1, 2, 2, 1),
            &small_cache(64),
            workload(12, 3, 24, 3),
            quick(Placement::Engine(Config::default()), RqPolicy::DataAffinity),
            7,
        )
        .unwrap()
    };
    assert_eq!(go(), go());
}

#[test]
fn bad_inputs_are_refused_with_their_cause() {
    let w = workload(1, 1, 8, 1);
    let mut cfg = quick(Placement::Vanilla, RqPolicy::Vanilla);
    cfg.chunk_cycles = 0;
    assert_eq!(
        run(&two_cpus(), &small_cache(64), w.clone(), cfg, 1).unwrap_err(),
        BodyError::Zero("chunk_cycles")
    );
    let mut cfg = quick(Placement::Vanilla, RqPolicy::Vanilla);
    cfg.quantum_cycles = 0;
    assert_eq!(
        run(&two_cpus(), &small_cache(64), w.clone(), cfg, 1).unwrap_err(),
        BodyError::RunQueue(RqError::ZeroQuantum)
    );
    let mut off = w.clone();
    off.tasks[0].allowed = Some("5".parse().unwrap());
    assert!(matches!(
        run(
            &two_cpus(),
            &small_cache(64),
            off,
            quick(Placement::Vanilla, RqPolicy::Vanilla),
            1
        ),
        Err(BodyError::NotOnMachine { task: 0, .. })
    ));
    let mut bad = w;
    bad.tasks[0].program = vec![Burst::Read { lines: 1 }];
    assert!(matches!(
        run(
            &two_cpus(),
            &small_cache(64),
            bad,
            quick(Placement::Vanilla, RqPolicy::Vanilla),
            1
        ),
        Err(BodyError::Workload(WorkloadError::AccessWithoutDf { .. }))
    ));
}

/// Two tasks that ping-pong `n` tokens over channels 0 and 1, on `a` and `b`.
fn ping_pong(n: usize, a: u32, b: u32) -> Workload {
    let mut pa = Vec::new();
    let mut pb = Vec::new();
    for _ in 0..n {
        pa.extend([Burst::Signal { chan: 0 }, Burst::Wait { chan: 1 }]);
        pb.extend([Burst::Wait { chan: 0 }, Burst::Signal { chan: 1 }]);
    }
    let task = |cpu: u32, program| TaskSpec {
        process: 0,
        start_cycles: 0,
        allowed: Some(CpuSet::single(CpuId(cpu))),
        program,
        background: false,
    };
    Workload {
        dfs: vec![],
        tasks: vec![task(a, pa), task(b, pb)],
    }
}

#[test]
fn channels_pass_every_token_and_a_wake_up_onto_an_idle_cpu_pays_its_latency() {
    let cfg = |wake: u64| BodyConfig {
        wake_other_cycles: wake,
        ..quick(Placement::Vanilla, RqPolicy::Vanilla)
    };
    let run_pp = |a, b, wake| {
        run(
            &two_cpus(),
            &small_cache(64),
            ping_pong(50, a, b),
            cfg(wake),
            1,
        )
        .unwrap()
    };
    // Across CPUs: 100 tokens; the first finds B not yet waiting (it is
    // kept, no wake-up), each of the other 99 wakes a task whose CPU is
    // idle.
    let cheap = run_pp(0, 1, 0);
    let dear = run_pp(0, 1, 10_000);
    assert_eq!(dear.remote_wakes, 99, "{dear:?}");
    assert!(
        dear.makespan_cycles >= cheap.makespan_cycles + 99 * 10_000,
        "{} vs {}",
        dear.makespan_cycles,
        cheap.makespan_cycles
    );
    // On one CPU the wakee waits for the waker to block: no latency.
    let same = run_pp(0, 0, 10_000);
    assert_eq!(same.remote_wakes, 0);
    assert!(same.makespan_cycles < dear.makespan_cycles);
    assert_eq!(same.tasks, 2);
}

#[test]
fn the_engine_hears_only_of_blocks_that_outlast_the_runtimes_idle_delay() {
    // One task: ten sleeps of 1,000 cycles, then one of 1,000,000, between
    // bits of work. Told at once, the engine hears of all eleven; with a
    // delay of 100,000 cycles (the runtime's idle step), of the long one.
    let mut program = vec![Burst::Switch {
        next: Some(DfId(1)),
    }];
    for k in 0..11 {
        program.push(Burst::Compute { cycles: 5_000 });
        program.push(Burst::Sleep {
            cycles: if k == 10 { 1_000_000 } else { 1_000 },
        });
    }
    program.push(Burst::Compute { cycles: 5_000 });
    let work = Workload {
        dfs: vec![DfSpec { bytes: 4096 }],
        tasks: vec![TaskSpec {
            process: 0,
            start_cycles: 0,
            allowed: None,
            program,
            background: false,
        }],
    };
    let engine = || Placement::Engine(dfsched_core::Config::default());
    let told = |delay| {
        let cfg = BodyConfig {
            engine_block_after_cycles: delay,
            ..quick(engine(), RqPolicy::Vanilla)
        };
        let r = run(&two_cpus(), &small_cache(64), work.clone(), cfg, 1).unwrap();
        assert!(r.makespan_cycles >= 1_010_000, "every sleep is slept");
        r.engine_blocks
    };
    assert_eq!(told(0), 11);
    assert_eq!(told(100_000), 1);
    assert_eq!(told(2_000_000), 0, "longer than any sleep: never told");
}

fn spec(process: u32, start_cycles: u64, allowed: Option<&str>, program: Vec<Burst>) -> TaskSpec {
    TaskSpec {
        process,
        start_cycles,
        allowed: allowed.map(|a| a.parse().unwrap()),
        program,
        background: false,
    }
}

/// The CPUs process `p` ran on.
fn ran_on(r: &BodyReport, p: u32) -> CpuSet {
    r.processes[p as usize].cpus()
}

#[test]
fn a_wakee_sent_to_an_idle_cpu_holds_that_cpu_while_it_wakes_and_starts_there() {
    // Three CPUs. S (pinned to 0) wakes A, which last ran on CPU 1, now
    // idle: the kernel puts A on CPU 1 and the wake-up takes 10,000
    // cycles. N arrives in between and may use CPUs 1-2. On Linux, A is
    // on CPU 1's wake list from the wake on, so CPU 1 is not idle to N's
    // placement: N goes to CPU 2 and A starts on CPU 1. (The body used to
    // leave CPU 1 looking idle until A got there, let N take it, and then
    // place A afresh, on CPU 2, having paid the latency for CPU 1.)
    let work = Workload {
        dfs: vec![],
        tasks: vec![
            spec(
                0,
                0,
                Some("0"),
                vec![
                    Burst::Compute { cycles: 50_000 },
                    Burst::Signal { chan: 0 },
                    Burst::Compute { cycles: 1_000 },
                ],
            ),
            spec(
                1,
                0,
                Some("1-2"),
                vec![Burst::Wait { chan: 0 }, Burst::Compute { cycles: 100_000 }],
            ),
            spec(
                2,
                55_000,
                Some("1-2"),
                vec![Burst::Compute { cycles: 100_000 }],
            ),
        ],
    };
    let cfg = BodyConfig {
        wake_other_cycles: 10_000,
        kernel: KernelModel {
            random_ties: false,
            ..KernelModel::default()
        },
        ..quick(Placement::Vanilla, RqPolicy::Vanilla)
    };
    let r = run(&Topology::test(1, 1, 3, 1), &small_cache(64), work, cfg, 1).unwrap();
    assert_eq!(r.remote_wakes, 1, "{r:?}");
    assert_eq!(
        ran_on(&r, 1),
        "1".parse().unwrap(),
        "A waits for and runs on CPU 1"
    );
    assert_eq!(
        ran_on(&r, 2),
        "2".parse().unwrap(),
        "N takes the CPU nobody holds"
    );
    assert_eq!(r.migrations, 0, "{r:?}");
}

/// One task (process 0) on DF 1 works 10,000 cycles, sleeps `sleep`
/// cycles, works 400,000; from `z_start`, a task of process 1 pinned to
/// `z_cpu` computes 3,000,000.
fn sleeper_and_intruder(sleep: u64, z_start: u64, z_cpu: &str) -> Workload {
    Workload {
        dfs: vec![DfSpec { bytes: 4096 }],
        tasks: vec![
            spec(
                0,
                0,
                None,
                vec![
                    Burst::Switch {
                        next: Some(DfId(1)),
                    },
                    Burst::Compute { cycles: 10_000 },
                    Burst::Sleep { cycles: sleep },
                    Burst::Compute { cycles: 400_000 },
                ],
            ),
            spec(
                1,
                z_start,
                Some(z_cpu),
                vec![Burst::Compute { cycles: 3_000_000 }],
            ),
        ],
    }
}

#[test]
fn the_kernel_places_a_wakee_inside_the_mask_the_runtime_set_before_the_runtime_hears_of_the_wake()
{
    // The task's group has its home on one CPU (H); the task sleeps long
    // enough for the runtime to notice, and meanwhile a pinned task
    // settles on H. At the wake, the engine, once told, re-homes the group
    // to the free CPU; but the runtime hears of the wake only at its next
    // pass, and until then the kernel may place the task only on H, its
    // mask: it shares H with the intruder until the pass moves it.
    let engine = || Placement::Engine(Config::default());
    let cfg = |delay| BodyConfig {
        engine_block_after_cycles: delay,
        balance_interval_cycles: 300_000,
        ..quick(engine(), RqPolicy::Vanilla)
    };
    let topo = two_cpus();
    // Where the group lives: the CPU the task ran its first work on.
    let alone = run(
        &topo,
        &small_cache(64),
        sleeper_and_intruder(1_000, 0, "0-1"),
        cfg(0),
        1,
    )
    .unwrap();
    let h = alone.processes[0].cycles_by_cpu[0].0;
    let other = if h.0 == 0 { "1" } else { "0" };
    let work = sleeper_and_intruder(1_000_000, 20_000, &h.0.to_string());
    let r = run(&topo, &small_cache(64), work, cfg(100_000), 1).unwrap();
    assert_eq!(r.engine_blocks, 1, "{r:?}");
    assert_eq!(r.engine_wakes, 1, "told at the pass after the wake");
    let on = |cpu: CpuId| {
        r.processes[0]
            .cycles_by_cpu
            .iter()
            .find(|x| x.0 == cpu)
            .map_or(0, |x| x.1)
    };
    assert!(
        on(h) > 10_000,
        "after the wake it ran on H ({h:?}) beside the intruder until the pass: {:?}",
        r.processes[0]
    );
    assert!(
        on(other.parse::<CpuSet>().unwrap().first().unwrap()) > 0,
        "the pass moved it to the free CPU: {:?}",
        r.processes[0]
    );
}

#[test]
fn with_the_runtimes_idle_delay_the_engine_hears_of_a_wake_only_at_its_next_pass() {
    // A long sleep the engine hears of; the run ends before the pass after
    // the wake, so the engine never hears of the wake; with a pass soon
    // after the wake, it does; told at once (delay 0), at the wake.
    let engine = || Placement::Engine(Config::default());
    let told = |delay, interval| {
        let cfg = BodyConfig {
            engine_block_after_cycles: delay,
            balance_interval_cycles: interval,
            ..quick(engine(), RqPolicy::Vanilla)
        };
        let work = Workload {
            dfs: vec![DfSpec { bytes: 4096 }],
            tasks: vec![spec(
                0,
                0,
                None,
                vec![
                    Burst::Switch {
                        next: Some(DfId(1)),
                    },
                    Burst::Sleep { cycles: 1_000_000 },
                    Burst::Compute { cycles: 50_000 },
                ],
            )],
        };
        let r = run(&two_cpus(), &small_cache(64), work, cfg, 1).unwrap();
        (r.engine_blocks, r.engine_wakes)
    };
    // Passes every 900,000 cycles: at 900,000 (asleep), 1,800,000 (done).
    assert_eq!(told(100_000, 900_000), (1, 0));
    // Passes every 30,000: one falls inside the 50,000 of work.
    assert_eq!(told(100_000, 30_000), (1, 1));
    assert_eq!(told(0, 900_000), (1, 1));
}

#[test]
fn a_wake_up_onto_another_cpu_costs_the_waker_its_cpu_work_before_the_latency() {
    // The ping-pong across CPUs: 99 wake-ups onto an idle CPU. With 5,000
    // cycles of the waker's work each, the CPUs are busy 99 × 5,000 more
    // and the run (strictly in turn) lasts as much longer; on one CPU
    // nothing changes.
    let cfg = |cpu_work: u64| BodyConfig {
        wake_other_cycles: 10_000,
        wake_other_cpu_cycles: cpu_work,
        ..quick(Placement::Vanilla, RqPolicy::Vanilla)
    };
    let go = |a, b, cpu_work| {
        run(
            &two_cpus(),
            &small_cache(64),
            ping_pong(50, a, b),
            cfg(cpu_work),
            1,
        )
        .unwrap()
    };
    let (wait, work) = (go(0, 1, 0), go(0, 1, 5_000));
    assert_eq!((wait.remote_wakes, work.remote_wakes), (99, 99));
    assert_eq!(work.cross_cpu_wakes, 99);
    assert_eq!(work.busy_cycles, wait.busy_cycles + 99 * 5_000);
    assert_eq!(work.makespan_cycles, wait.makespan_cycles + 99 * 5_000);
    let same = go(0, 0, 5_000);
    assert_eq!(same.cross_cpu_wakes, 0);
    assert_eq!(go(0, 0, 0).makespan_cycles, same.makespan_cycles);
    // Onto a busy CPU (a spinner shares B's CPU) the wakee is queued
    // without preempting: no IPI, no latency, no work charged.
    let busy = |cpu_work: u64| {
        let mut w = ping_pong(50, 0, 1);
        w.tasks.push(spec(
            1,
            0,
            Some("1"),
            vec![Burst::Compute {
                cycles: 100_000_000,
            }],
        ));
        let mut cfg = cfg(cpu_work);
        cfg.quantum_cycles = 1_000_000;
        run(&two_cpus(), &small_cache(64), w, cfg, 1).unwrap()
    };
    let (quiet, loud) = (busy(0), busy(5_000));
    assert!(loud.cross_cpu_wakes >= 99, "{loud:?}");
    let own = |r: &BodyReport| {
        r.processes[0]
            .cycles_by_cpu
            .iter()
            .map(|x| x.1)
            .sum::<u64>()
    };
    assert_eq!(own(&loud), own(&quiet) + loud.remote_wakes * 5_000);
    assert!(loud.remote_wakes < loud.cross_cpu_wakes, "{loud:?}");
}
