//! Co-thread grouping in the simulator: processes of threads that share
//! their process's data and give no hints, placed by the core's
//! `Policy::CoThread` and dispatched by the kernel-like round robin, on an
//! 8-CPU machine of two LLCs (`Topology::test(1, 2, 4, 1)`) or on 2 CPUs.
//!
//! - Heavy load, each process a fraction of a CPU's share (9 × 3 threads
//!   on 2 CPUs, the co-thread paper's Table I shape): most processes are
//!   packed on one CPU — nearly all their cycles run there.
//! - Heavy load from one process, or from processes each larger than a
//!   CPU's share: not packed (it would leave CPUs idle) — every CPU is
//!   used and the run takes no longer than vanilla's (a model result of a
//!   deterministic simulation, not a timing).
//! - Light load (fewer threads than CPUs): each process stays in one LLC
//!   but is spread over its CPUs.
//!
//! Vanilla placement on the same workloads neither packs the 9 × 3
//! processes nor keeps a light process in one LLC, so those tests would
//! fail if the co-thread placement did not reach the body.

use dfsched_core::dispatch::runqueue::RqPolicy;
use dfsched_core::{Config, DfId, Policy, Topology};
use dfsched_sim::machine::MachineConfig;
use dfsched_sim::program::body::{self, BodyConfig, BodyReport, KernelModel, Placement};
use dfsched_sim::program::{Burst, DfSpec, TaskSpec, Workload};

fn machine() -> Topology {
    Topology::test(1, 2, 4, 1)
}

/// `processes` processes of `threads` threads; process `p` works on DF
/// `p + 1` (its shared data). Each thread reads and writes it `rounds`
/// times, sleeping briefly after each round (as threads that synchronise
/// do), so that wake-ups let the placement follow the load.
fn workload(processes: u32, threads: u32, rounds: u32) -> Workload {
    workload_with(processes, threads, rounds, true)
}

/// [`workload`], with threads that never sleep when `sleep` is false
/// (CPU-bound threads, always runnable).
fn workload_with(processes: u32, threads: u32, rounds: u32, sleep: bool) -> Workload {
    let lines = 32;
    let mut tasks = Vec::new();
    for t in 0..threads {
        for p in 0..processes {
            let mut program = vec![Burst::Switch {
                next: Some(DfId(u64::from(p) + 1)),
            }];
            for _ in 0..rounds {
                program.push(Burst::Read { lines });
                program.push(Burst::Write { lines: lines / 4 });
                if sleep {
                    program.push(Burst::Sleep { cycles: 2_000 });
                }
            }
            tasks.push(TaskSpec {
                start_cycles: u64::from(t * processes + p) * 500,
                allowed: None,
                program,
                process: p,
                background: false,
            });
        }
    }
    Workload {
        dfs: vec![DfSpec { bytes: lines * 64 }; processes as usize],
        tasks,
    }
}

fn run(work: &Workload, placement: Placement) -> BodyReport {
    run_on(&machine(), work, placement)
}

fn run_on(topo: &Topology, work: &Workload, placement: Placement) -> BodyReport {
    let cfg = BodyConfig {
        quantum_cycles: 20_000,
        balance_interval_cycles: 100_000,
        hints: false,
        // The findings below were established against the strict-rotation
        // kernel model (every process spread as widely as possible); the
        // seeded model of `body::kernel` narrows co-thread's margins.
        kernel: KernelModel::rotation(),
        ..BodyConfig::new(placement, RqPolicy::Vanilla)
    };
    body::run(topo, &MachineConfig::default(), work.clone(), cfg, 1).expect("valid run")
}

fn co_thread() -> Placement {
    Placement::Engine(Config {
        policy: Policy::CoThread,
        ..Config::default()
    })
}

#[test]
fn heavy_load_packs_each_process_of_one_cpus_share_on_one_cpu() {
    // 8 processes × 3 threads = 24 threads on 8 CPUs: 3 per CPU, a process
    // per CPU (the co-thread paper's shape). Threads that never sleep and
    // threads that sleep after each round: either way every process is
    // packed on one CPU — nearly all its cycles run there — and the run is
    // no longer than vanilla's (+3 %; a model result of a deterministic
    // simulation, not a timing). Before groups were judged by their pinned
    // load, the processes spread while starting stayed spread (never
    // sleeping: 263k cycles against vanilla's 134k).
    for sleep in [false, true] {
        let work = workload_with(8, 3, 60, sleep);
        let c = run(&work, co_thread());
        let v = run(&work, Placement::Vanilla);
        eprintln!(
            "8 x 3 on 8, sleep {sleep}: co-thread {} vanilla {} cycles",
            c.makespan_cycles, v.makespan_cycles
        );
        assert_eq!(c.processes.len(), 8);
        assert_eq!(c.engine.as_ref().unwrap().hints, 0, "an unmodified program");
        for p in &c.processes {
            assert_eq!(p.threads, 3);
            assert!(
                p.top_cpu_milli() >= 800,
                "sleep {sleep}: process {} spread: {:?}",
                p.process,
                p.cycles_by_cpu
            );
        }
        assert!(
            c.makespan_cycles * 100 <= v.makespan_cycles * 103,
            "sleep {sleep}: co-thread {} vs vanilla {}",
            c.makespan_cycles,
            v.makespan_cycles
        );
        if sleep {
            // Vanilla spreads every sleeping process over the machine
            // (never sleeping, its round robin start happens to put each
            // process's threads on one CPU too).
            assert!(
                v.processes.iter().all(|p| p.top_cpu_milli() < 800),
                "{:?}",
                v.processes
            );
        }
    }
}

#[test]
fn light_load_keeps_each_process_in_one_llc_spread_over_its_cpus() {
    // 2 processes × 3 threads = 6 threads on 8 CPUs.
    let work = workload(2, 3, 60);
    let r = run(&work, co_thread());
    let llcs = ["0-3", "4-7"].map(|s| s.parse::<dfsched_core::CpuSet>().unwrap());
    let mut used = Vec::new();
    for p in &r.processes {
        let cpus = p.cpus();
        let llc = llcs.iter().position(|l| cpus.is_subset(l));
        assert!(llc.is_some(), "process {} ran on {cpus}", p.process);
        assert!(cpus.len() >= 2, "process {} not spread: {cpus}", p.process);
        used.push(llc);
    }
    assert_ne!(used[0], used[1], "the two processes share an LLC");
    // Vanilla lets some process straddle the two LLCs.
    let v = run(&work, Placement::Vanilla);
    assert!(
        v.processes
            .iter()
            .any(|p| !llcs.iter().any(|l| p.cpus().is_subset(l))),
        "{:?}",
        v.processes
    );
}

#[test]
fn the_same_seed_prints_the_same_json() {
    let work = workload(3, 4, 10);
    let a = serde_json::to_string(&run(&work, co_thread())).unwrap();
    let b = serde_json::to_string(&run(&work, co_thread())).unwrap();
    assert_eq!(a, b);
    assert!(a.contains("\"processes\""));
}

/// 2 CPUs, as this machine.
fn two() -> Topology {
    Topology::test(1, 1, 2, 1)
}

#[test]
fn one_process_larger_than_a_cpus_share_is_not_packed() {
    // 1 × 32 and 1 × 8 CPU-bound threads on 2 CPUs: packed on one CPU the
    // other would idle (before the fair-share test co-thread took 1.88×
    // vanilla's time on the default df-bench). Both CPUs run it, about
    // evenly, and the run is no longer than vanilla's (+3 %).
    for threads in [8, 32] {
        let work = workload_with(1, threads, 20, false);
        let c = run_on(&two(), &work, co_thread());
        let v = run_on(&two(), &work, Placement::Vanilla);
        let p = &c.processes[0];
        assert_eq!(p.cpus().to_string(), "0-1", "{threads}: {p:?}");
        assert!(p.top_cpu_milli() <= 600, "{threads}: {p:?}");
        assert!(
            c.makespan_cycles * 100 <= v.makespan_cycles * 103,
            "{threads}: co-thread {} vs vanilla {}",
            c.makespan_cycles,
            v.makespan_cycles
        );
    }
}

#[test]
fn nine_processes_of_three_on_two_cpus_are_packed_and_beat_vanilla() {
    // Each process a third of a CPU's share: most are packed on one CPU
    // (the others' load fills the other one), and the run is shorter than
    // vanilla's, which spreads every process.
    let work = workload_with(9, 3, 60, false);
    let c = run_on(&two(), &work, co_thread());
    let v = run_on(&two(), &work, Placement::Vanilla);
    assert_eq!(c.engine.as_ref().unwrap().hints, 0, "an unmodified program");
    let packed = c
        .processes
        .iter()
        .filter(|p| p.top_cpu_milli() >= 800)
        .count();
    assert!(packed >= 6, "{:?}", c.processes);
    assert!(v.processes.iter().all(|p| p.top_cpu_milli() < 800));
    assert!(c.makespan_cycles < v.makespan_cycles);
    // Both CPUs carry work within 25 % of each other.
    let mut by_cpu = [0u64; 2];
    for p in &c.processes {
        for (cpu, cycles) in &p.cycles_by_cpu {
            by_cpu[cpu.0 as usize] += cycles;
        }
    }
    assert!(
        by_cpu[0].max(by_cpu[1]) * 100 <= by_cpu[0].min(by_cpu[1]) * 125,
        "{by_cpu:?}"
    );
}

#[test]
fn four_processes_of_six_on_eight_cpus_use_every_cpu() {
    // Each process twice a CPU's share: not packed; all 8 CPUs run.
    let work = workload(4, 6, 60);
    let c = run(&work, co_thread());
    let used = c
        .processes
        .iter()
        .fold(dfsched_core::CpuSet::new(), |u, p| u.union(&p.cpus()));
    assert_eq!(used.to_string(), "0-7");
    for p in &c.processes {
        assert!(p.cpus().len() >= 3, "{p:?}");
    }
}
