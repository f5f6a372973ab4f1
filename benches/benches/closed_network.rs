//! The closed-network simulator's speed in events per second on one core
//! (the issue asks for at least 5 million for every policy): one
//! replication of Squillante & Lazowska's network at the paper's setting
//! (M = 32, D = Z = 1, F = 1900, 4-way 8K-set cache, C = 0.5) under every
//! policy — FCFS, FP, LP, MI, LMI(4), LMR(4) — at light (N = 40) and heavy
//! (N = 128) load, and the pausing policies with the heuristic engaged at
//! N = 128 (`C ≥ (M/N)·Z`). Criterion reports the throughput in elements
//! per second, an element being one engine event.
//!
//! Run with `cargo bench -p dfsched-benches --bench closed_network`; add a
//! filter such as `-- 'closed_network/mi'` for one policy.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dfsched_core::dispatch::queue::QueuePolicy;
use dfsched_sim::closed_network::{simulate, ClosedNetworkParams};

fn closed_network(c: &mut Criterion) {
    let mut g = c.benchmark_group("closed_network");
    g.sample_size(10);
    let mut points = Vec::new();
    for policy in ["fcfs", "fp", "lp", "mi", "lmi:4", "lmr:4"] {
        for tasks in [40u32, 128] {
            points.push((policy.to_string(), policy, tasks, false));
        }
    }
    for policy in ["lp", "mi", "lmi:4", "lmr:4"] {
        points.push((format!("{policy}+pause"), policy, 128, true));
    }
    for (name, policy, tasks, pause) in points {
        let p = ClosedNetworkParams {
            replications: 1,
            warmup_time: 10.0,
            run_time: 2000.0,
            pause,
            ..ClosedNetworkParams::paper(policy.parse::<QueuePolicy>().unwrap(), tasks, 0.5)
        };
        let events = simulate(&p).expect("the paper's point").events;
        g.throughput(Throughput::Elements(events));
        g.bench_with_input(BenchmarkId::new(name, tasks), &p, |b, p| {
            b.iter(|| simulate(p).expect("the paper's point"))
        });
    }
    g.finish();
}

criterion_group!(benches, closed_network);
criterion_main!(benches);
