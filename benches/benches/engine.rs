//! The pure engine's cost per event, without any system call: what a hint
//! costs inside `Engine::handle`, and one balancer pass, on a machine larger
//! than this one (2 nodes × 2 LLCs × 8 cores × SMT2 = 64 CPUs) with 4096
//! tasks spread over 256 DFs; and the same on the largest machine Linux
//! builds for (2 nodes × 64 LLCs × 32 cores × SMT2 = 8,192 CPUs, 12k
//! domains), where a cost that grows with the CPUs or the domains shows:
//! start-up (`Engine::new` and the tasks' arrival), a hint, a pass.

use criterion::{criterion_group, criterion_main, Criterion};
use dfsched_core::{AppId, Config, CpuSet, DfId, Engine, Event, Nanos, TaskId, Topology};

const TASKS: u64 = 4096;
const DFS: u64 = 256;

fn populated() -> Engine {
    populated_on(Topology::test(2, 2, 8, 2))
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

fn engine(c: &mut Criterion) {
    let mut e = populated();
    let mut out = Vec::with_capacity(64);
    // One task switches back and forth between two known DFs.
    let mut df = [DfId(1 + (TASKS - 1) % DFS), DfId(1)];
    c.bench_function("engine/hint_switch_known_df", |b| {
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
    // A steady-state pass: what the balancer thread pays every interval once
    // the groups have settled.
    let mut now = 0;
    c.bench_function("engine/balance_pass_64cpu_4096tasks", |b| {
        b.iter(|| {
            out.clear();
            now += 1;
            e.handle(Event::Balance { now: Nanos(now) }, &mut out)
                .expect("balance");
        })
    });
}

/// The same events on 8,192 CPUs: the engine's start with 4096 tasks
/// arriving and hinting, a hint, and a steady-state pass.
fn engine_8192(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_8192cpu");
    group.sample_size(10);
    group.bench_function("start_4096tasks", |b| {
        b.iter(|| populated_on(Topology::test(2, 64, 32, 2)))
    });
    let mut e = populated_on(Topology::test(2, 64, 32, 2));
    let mut out = Vec::with_capacity(64);
    let mut df = [DfId(1 + (TASKS - 1) % DFS), DfId(1)];
    group.bench_function("hint_switch_known_df", |b| {
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
    let mut now = 0;
    group.bench_function("balance_pass_4096tasks", |b| {
        b.iter(|| {
            out.clear();
            now += 1;
            e.handle(Event::Balance { now: Nanos(now) }, &mut out)
                .expect("balance");
        })
    });
    group.finish();
}

criterion_group!(benches, engine, engine_8192);
criterion_main!(benches);
