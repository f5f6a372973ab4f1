//! Co-thread grouping in the simulator: processes of threads that share
//! their process's data and give no hints, placed by the core's
//! `Policy::CoThread` and dispatched by the kernel-like round robin, on an
//! 8-CPU machine of two LLCs (`Topology::test(1, 2, 4, 1)`).
//!
//! - Heavy load (more than 2 runnable threads per CPU, a process's worth
//!   per CPU): each process's threads are packed on one CPU — nearly all
//!   its cycles run there.
//! - Light load (fewer threads than CPUs): each process stays in one LLC
//!   but is spread over its CPUs.
//!
//! Vanilla placement on the same workloads does neither, so the tests
//! would fail if the co-thread placement did not reach the body.

use dfsched_core::dispatch::runqueue::RqPolicy;
use dfsched_core::{Config, DfId, Policy, Topology};
use dfsched_sim::machine::MachineConfig;
use dfsched_sim::program::body::{self, BodyConfig, BodyReport, Placement};
use dfsched_sim::program::{Burst, DfSpec, TaskSpec, Workload};

fn machine() -> Topology {
    Topology::test(1, 2, 4, 1)
}

/// `processes` processes of `threads` threads; process `p` works on DF
/// `p + 1` (its shared data). Each thread reads and writes it `rounds`
/// times, sleeping briefly after each round (as threads that synchronise
/// do), so that wake-ups let the placement follow the load.
fn workload(processes: u32, threads: u32, rounds: u32) -> Workload {
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
                program.push(Burst::Sleep { cycles: 2_000 });
            }
            tasks.push(TaskSpec {
                start_cycles: u64::from(t * processes + p) * 500,
                allowed: None,
                program,
                process: p,
            });
        }
    }
    Workload {
        dfs: vec![DfSpec { bytes: lines * 64 }; processes as usize],
        tasks,
    }
}

fn run(work: &Workload, placement: Placement) -> BodyReport {
    let cfg = BodyConfig {
        quantum_cycles: 20_000,
        balance_interval_cycles: 100_000,
        hints: false,
        ..BodyConfig::new(placement, RqPolicy::Vanilla)
    };
    body::run(&machine(), &MachineConfig::default(), work.clone(), cfg, 1).expect("valid run")
}

fn co_thread() -> Placement {
    Placement::Engine(Config {
        policy: Policy::CoThread,
        ..Config::default()
    })
}

#[test]
fn heavy_load_packs_each_process_on_one_cpu() {
    // 8 processes × 3 threads = 24 threads on 8 CPUs: 3 per CPU, a
    // process per CPU (the co-thread paper's shapes: Table I, 9 × 3).
    let work = workload(8, 3, 60);
    let r = run(&work, co_thread());
    assert_eq!(r.processes.len(), 8);
    for p in &r.processes {
        assert_eq!(p.threads, 3);
        assert!(
            p.top_cpu_milli() >= 800,
            "process {} spread: {:?}",
            p.process,
            p.cycles_by_cpu
        );
    }
    let engine = r.engine.as_ref().unwrap();
    assert_eq!(engine.hints, 0, "an unmodified program gives no hints");
    // Vanilla spreads every process over the machine.
    let v = run(&work, Placement::Vanilla);
    assert!(
        v.processes.iter().all(|p| p.top_cpu_milli() < 800),
        "{:?}",
        v.processes
    );
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
