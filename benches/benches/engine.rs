//! The pure engine's cost per event, without any system call: what a hint
//! costs inside `Engine::handle`, and one balancer pass, on a machine larger
//! than this one (2 nodes × 2 LLCs × 8 cores × SMT2 = 64 CPUs) with 4096
//! tasks spread over 256 DFs.

use criterion::{criterion_group, criterion_main, Criterion};
use dfsched_core::{AppId, Config, CpuSet, DfId, Engine, Event, Nanos, TaskId, Topology};

const TASKS: u64 = 4096;
const DFS: u64 = 256;

fn populated() -> Engine {
    let topo = Topology::test(2, 2, 8, 2);
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

criterion_group!(benches, engine);
criterion_main!(benches);
