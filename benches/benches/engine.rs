//! The pure engine's cost per event, without any system call, against the
//! machine's size: the same 4096 tasks spread over 256 DFs on 64, 512,
//! 2,048 and 8,192 CPUs (2 nodes × {2, 8, 32, 64} LLCs × {8, 16, 16, 32}
//! cores × SMT2; the largest is the largest machine Linux builds for, 12k
//! domains). A cost that grows with the CPUs or the domains shows as a
//! curve along the parameter (the CPU count) of each group:
//!
//! - `engine_hint_switch_known_df/<cpus>`: one task switching between two
//!   known DFs — the runtime's fast path, under a lock on every DF switch;
//! - `engine_balance_pass_4096tasks/<cpus>`: a steady-state balancer pass,
//!   what the balancer thread pays every interval once the groups settled;
//! - `engine_start_4096tasks/<cpus>`: `Engine::new` and the tasks' arrival
//!   (`TaskNew` + first `Hint` each).
//!
//! (Before: `engine/hint_switch_known_df` and
//! `engine/balance_pass_64cpu_4096tasks` are now `…/64` of the first two
//! groups; `engine_8192cpu/*` are now `…/8192` of all three.)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dfsched_core::{AppId, Config, CpuSet, DfId, Engine, Event, Nanos, TaskId, Topology};

const TASKS: u64 = 4096;
const DFS: u64 = 256;

/// `(nodes, LLCs per node, cores per LLC, SMT)`: 64, 512, 2,048 and 8,192
/// CPUs.
const SHAPES: [(u32, u32, u32, u32); 4] =
    [(2, 2, 8, 2), (2, 8, 16, 2), (2, 32, 16, 2), (2, 64, 32, 2)];

fn topo((nodes, llcs, cores, smt): (u32, u32, u32, u32)) -> Topology {
    Topology::test(nodes, llcs, cores, smt)
}

fn populated_on(topo: Topology) -> Engine {
    let all: CpuSet = topo.cpus().clone();
    let mut e = Engine::new(topo, Config::default()).expect("default config");
    let mut out = Vec::new();
    for t in 0..TASKS {
        e.handle(
            Event::TaskNew {
                task: TaskId(t),
                app: AppId(0),
                allowed: all.clone(),
                cpu: None,
            },
            &mut out,
        )
        .expect("task new");
        e.handle(
            Event::Hint {
                task: TaskId(t),
                app: AppId(0),
                cur: None,
                next: Some(DfId(1 + t % DFS)),
            },
            &mut out,
        )
        .expect("hint");
        out.clear();
    }
    e
}

/// A hint, then a steady-state pass, on one populated engine per size.
fn engine(c: &mut Criterion) {
    let mut engines: Vec<(usize, Engine)> = SHAPES
        .iter()
        .map(|&s| {
            let t = topo(s);
            (t.nr_cpus(), populated_on(t))
        })
        .collect();
    let mut out = Vec::with_capacity(64);

    let mut group = c.benchmark_group("engine_hint_switch_known_df");
    for (cpus, e) in &mut engines {
        // One task switches back and forth between two known DFs.
        let mut df = [DfId(1 + (TASKS - 1) % DFS), DfId(1)];
        group.bench_function(BenchmarkId::from_parameter(*cpus), |b| {
            b.iter(|| {
                out.clear();
                e.handle(
                    Event::Hint {
                        task: TaskId(TASKS - 1),
                        app: AppId(0),
                        cur: Some(df[0]),
                        next: Some(df[1]),
                    },
                    &mut out,
                )
                .expect("switch");
                df.swap(0, 1);
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("engine_balance_pass_4096tasks");
    for (cpus, e) in &mut engines {
        if *cpus >= 2048 {
            group.sample_size(10);
        }
        let mut now = 0;
        group.bench_function(BenchmarkId::from_parameter(*cpus), |b| {
            b.iter(|| {
                out.clear();
                now += 1;
                e.handle(Event::Balance { now: Nanos(now) }, &mut out)
                    .expect("balance");
            })
        });
    }
    group.finish();
}

/// `Engine::new` and 4096 tasks arriving and hinting, per size.
fn start(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_start_4096tasks");
    group.sample_size(10);
    for s in SHAPES {
        let t = topo(s);
        group.bench_with_input(BenchmarkId::from_parameter(t.nr_cpus()), &t, |b, t| {
            b.iter(|| populated_on(t.clone()))
        });
    }
    group.finish();
}

criterion_group!(benches, engine, start);
criterion_main!(benches);
