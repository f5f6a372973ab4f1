//! The cost of the hint on the runtime's hot paths, against the real kernel.
//!
//! - `hint/same_df`: a thread repeats the hint for the DF it already has. The
//!   runtime answers from a thread-local cache: no lock, no system call.
//! - `move/bare_setaffinity` and `move/dfsched_hint`, side by side: the calling
//!   thread goes back and forth between two CPUs, once with two bare
//!   `sched_setaffinity` calls and once with two hints for DFs whose groups
//!   live on those two CPUs. The difference of the medians is dfsched's own
//!   share of a moving hint (engine, lock, bookkeeping); the move itself costs
//!   tens of microseconds on a KVM guest (an IPI and a halt exit).
//!
//! The moving pair needs two allowed CPUs; with one, it is skipped with a
//! message.

use criterion::{criterion_group, criterion_main, Criterion};
use dfsched::{sys, Runtime, RuntimeConfig};
use dfsched_core::CpuSet;
use std::sync::mpsc;
use std::thread;

/// A runtime whose groups always get a single-CPU home (the heavy-load
/// regime from one runnable task per CPU), with no balancer passes and no
/// external-load sampling to disturb the measurement.
fn runtime() -> Runtime {
    let mut cfg = RuntimeConfig::default();
    cfg.engine.heavy_load_milli = 1000;
    cfg.balance_interval_ms = 3_600_000;
    cfg.external_load = false;
    Runtime::start(cfg).expect("the runtime starts")
}

fn same_df(c: &mut Criterion) {
    let rt = runtime();
    rt.enter(1).expect("first hint");
    c.bench_function("hint/same_df", |b| {
        b.iter(|| rt.enter(std::hint::black_box(1)).expect("repeated hint"))
    });
    rt.leave().expect("leave");
    rt.shutdown();
}

/// Two anchor threads hold DFs 1 and 2 so that their groups stay put, on
/// different CPUs, while the measuring thread joins and leaves them.
fn anchors(rt: &Runtime) -> (Vec<u32>, mpsc::Sender<()>, Vec<thread::JoinHandle<()>>) {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let mut cpus = Vec::new();
    let mut handles = Vec::new();
    for df in [1u64, 2] {
        let (tx, rx) = mpsc::channel();
        let rt = rt.clone();
        let stop = stop_rx.clone();
        handles.push(thread::spawn(move || {
            rt.enter(df).expect("anchor hint");
            let placed = sys::get_affinity(0).expect("anchor affinity");
            tx.send(placed.first().expect("placed somewhere").0)
                .expect("send");
            // Sleep until told to stop; the runtime still counts the anchor.
            let _ = stop.lock().expect("stop lock").recv();
        }));
        cpus.push(rx.recv().expect("anchor placed"));
    }
    (cpus, stop_tx, handles)
}

fn moving(c: &mut Criterion) {
    let allowed = sys::get_affinity(0).expect("sched_getaffinity");
    if allowed.len() < 2 {
        eprintln!("move/*: skipped, only CPUs {allowed} are allowed and a move needs two");
        return;
    }
    let rt = runtime();
    let (cpus, stop, handles) = anchors(&rt);
    assert_ne!(
        cpus[0], cpus[1],
        "the two DFs' groups live on different CPUs"
    );
    let a = CpuSet::single(dfsched_core::CpuId(cpus[0]));
    let b = CpuSet::single(dfsched_core::CpuId(cpus[1]));

    let mut group = c.benchmark_group("move");
    group.bench_function("bare_setaffinity", |bch| {
        bch.iter(|| {
            sys::set_affinity(0, &a).expect("to a");
            sys::set_affinity(0, &b).expect("to b");
        })
    });
    // The runtime takes a thread's mask at its first hint as the CPUs it may
    // use; give it back the whole allowed set the bare loop narrowed.
    sys::set_affinity(0, &allowed).expect("restore affinity");
    group.bench_function("dfsched_hint", |bch| {
        bch.iter(|| {
            rt.enter(1).expect("to DF 1");
            rt.enter(2).expect("to DF 2");
        })
    });
    group.finish();
    // The hints really moved the thread: each lands on its DF's CPU.
    rt.enter(1).expect("to DF 1");
    assert_eq!(sys::current_cpu(), Some(dfsched_core::CpuId(cpus[0])));
    rt.enter(2).expect("to DF 2");
    assert_eq!(sys::current_cpu(), Some(dfsched_core::CpuId(cpus[1])));

    rt.leave().expect("leave");
    drop(stop);
    for h in handles {
        h.join().expect("anchor");
    }
    rt.shutdown();
    sys::set_affinity(0, &allowed).expect("restore affinity");
}

criterion_group!(benches, same_df, moving);
criterion_main!(benches);
