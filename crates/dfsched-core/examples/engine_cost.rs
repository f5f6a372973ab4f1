//! Rough cost of a DF-switching hint and of a balancer pass, for a few
//! machine shapes and group sizes. Not a benchmark (the criterion ones live
//! in `benches/`): a quick look, e.g. after changing the hot path.
//!
//! `cargo run --release -p dfsched-core --example engine_cost`
//!
//! Each task switches to the next DF in turn, so every hint leaves one
//! group and joins another. Timings on a shared VM are noisy: run it more
//! than once.

use dfsched_core::{AppId, Config, DfId, Engine, Event, Nanos, TaskId, Topology};
use std::time::Instant;

/// `tasks` tasks over `dfs` DFs on `topo`; prints ns per hint and per pass.
fn run(name: &str, topo: Topology, tasks: u64, dfs: u64) {
    let all = topo.cpus().clone();
    let cpus = topo.nr_cpus();
    let mut e = Engine::new(topo, Config::default()).expect("default config");
    let mut out = Vec::new();
    let mut df = vec![0u64; tasks as usize];
    for t in 0..tasks {
        let task = TaskId(t);
        let new = Event::TaskNew {
            task,
            app: AppId(0),
            allowed: all.clone(),
            cpu: None,
        };
        e.handle(new, &mut out).expect("new task");
        df[t as usize] = 1 + t % dfs;
        let hint = Event::Hint {
            task,
            app: AppId(0),
            cur: None,
            next: Some(DfId(df[t as usize])),
        };
        e.handle(hint, &mut out).expect("first hint");
    }
    let hints = 100_000u64;
    let start = Instant::now();
    for i in 0..hints {
        let t = (i % tasks) as usize;
        let (cur, next) = (df[t], 1 + df[t] % dfs);
        df[t] = next;
        out.clear();
        let hint = Event::Hint {
            task: TaskId(t as u64),
            app: AppId(0),
            cur: Some(DfId(cur)),
            next: Some(DfId(next)),
        };
        e.handle(hint, &mut out).expect("switch");
    }
    let per_hint = start.elapsed().as_nanos() as f64 / hints as f64;
    let passes = 1000u64;
    let start = Instant::now();
    for i in 0..passes {
        out.clear();
        e.handle(Event::Balance { now: Nanos(i) }, &mut out)
            .expect("balance");
    }
    let per_pass = start.elapsed().as_nanos() as f64 / passes as f64;
    println!("{name:<28} {cpus:>4} CPUs {tasks:>5} tasks {dfs:>3} DFs: {per_hint:>8.0} ns/hint {per_pass:>9.0} ns/pass");
}

fn main() {
    run("this machine, heavy", Topology::test(1, 1, 2, 1), 8, 2);
    run(
        "this machine, big groups",
        Topology::test(1, 1, 2, 1),
        128,
        4,
    );
    run("8 CPUs, light", Topology::test(1, 2, 2, 2), 16, 4);
    run("32 CPUs, heavy", Topology::test(2, 2, 4, 2), 256, 16);
    run("128 CPUs, light", Topology::test(4, 2, 8, 2), 64, 32);
}
