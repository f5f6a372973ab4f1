//! Measures the hint's cost on this machine, outside criterion, with a
//! breakdown: `cargo run --release -p dfsched-rt --example hint_cost`.
//!
//! - fast path: a thread repeats the hint for its DF (no lock, no syscall);
//! - move path: the thread alternates between two DFs whose groups live on
//!   two CPUs (kept there by two sleeping anchor threads), against the same
//!   alternation done with bare `sched_setaffinity` calls;
//! - the runtime's counters over the move loop, to show how many placements
//!   (system calls) each hint made.
//!
//! Prints medians of several batches; timings are this machine's, noisy, and
//! never asserted anywhere.

use dfsched::sys::{self, SysOps};
use dfsched::{CpuSet, Error, Runtime, RuntimeConfig};
use std::sync::mpsc;
use std::time::Instant;

const BATCHES: usize = 15;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median over batches of the time per call of `f`, in nanoseconds.
fn per_call_ns(calls: u32, mut f: impl FnMut()) -> f64 {
    median((0..BATCHES).map(|_| batch_ns(calls, &mut f)).collect())
}

fn batch_ns(calls: u32, f: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// A thread that runs batches of its closure on demand and reports each
/// batch's wall-clock and own CPU time per call (the CPU time from
/// `/proc/thread-self/sched`: on a VM, a move's wall time is mostly waiting
/// for the other vCPU to wake, which CPU time leaves out).
struct BatchThread {
    go: mpsc::Sender<u32>,
    done: mpsc::Receiver<(f64, f64)>,
}

impl BatchThread {
    fn spawn(mut f: impl FnMut() + Send + 'static) -> BatchThread {
        let (go, go_rx) = mpsc::channel::<u32>();
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            for calls in go_rx {
                let cpu = || {
                    dfsched::procfs::thread_self_sched()
                        .unwrap()
                        .sum_exec_runtime_ns
                };
                let before = cpu();
                let wall = batch_ns(calls, &mut f);
                let cpu = (cpu() - before) as f64 / f64::from(calls);
                done_tx.send((wall, cpu)).unwrap();
            }
        });
        BatchThread { go, done }
    }

    fn batch(&self, calls: u32) -> (f64, f64) {
        self.go.send(calls).unwrap();
        self.done.recv().unwrap()
    }
}

/// Medians of interleaved batches: `base`, `with`, and `with - base`.
struct Compared {
    base: f64,
    with: f64,
    extra: f64,
    base_cpu: f64,
    with_cpu: f64,
    extra_cpu: f64,
}

/// Batches of `base` and `with`, each on a thread of its own (a bare
/// `sched_setaffinity` on a hinting thread would narrow its allowed CPUs),
/// run interleaved so slow drifts of a shared machine hit both alike.
fn interleaved_ns(
    calls: u32,
    base: impl FnMut() + Send + 'static,
    with: impl FnMut() + Send + 'static,
) -> Compared {
    let (base, with) = (BatchThread::spawn(base), BatchThread::spawn(with));
    let mut v: [Vec<f64>; 6] = Default::default();
    for _ in 0..BATCHES {
        let (x, xc) = base.batch(calls);
        let (y, yc) = with.batch(calls);
        for (slot, value) in v.iter_mut().zip([x, y, y - x, xc, yc, yc - xc]) {
            slot.push(value);
        }
    }
    let [base, with, extra, base_cpu, with_cpu, extra_cpu] = v.map(median);
    Compared {
        base,
        with,
        extra,
        base_cpu,
        with_cpu,
        extra_cpu,
    }
}

/// A kernel that accepts every mask and remembers it per thread, without
/// a system call: what is left of a hint is dfsched's own work.
#[derive(Default)]
struct NoKernel(std::sync::Mutex<std::collections::HashMap<u64, CpuSet>>);

impl SysOps for NoKernel {
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        let tid = if tid == 0 { sys::gettid() } else { tid };
        let known = self.0.lock().unwrap().get(&tid).cloned();
        known.map_or_else(|| sys::get_affinity(tid), Ok)
    }

    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        let tid = if tid == 0 { sys::gettid() } else { tid };
        self.0.lock().unwrap().insert(tid, cpus.clone());
        Ok(())
    }
}

/// Wall ns per moving hint with the kernel taken out (warm caches: the
/// thread never really moves).
fn moving_without_kernel(cfg: RuntimeConfig) -> Result<f64, Error> {
    let rt = Runtime::start_with_sys(cfg, std::sync::Arc::new(NoKernel::default()))?;
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let mut anchors = Vec::new();
    for df in [1u64, 2] {
        let (tx, rx) = mpsc::channel();
        let (rt, stop) = (rt.clone(), stop_rx.clone());
        anchors.push(std::thread::spawn(move || {
            rt.enter(df).unwrap();
            tx.send(()).unwrap();
            let _ = stop.lock().unwrap().recv();
        }));
        rx.recv().unwrap();
    }
    rt.enter(1)?;
    let ns = per_call_ns(20_000, || {
        rt.enter(2).unwrap();
        rt.enter(1).unwrap();
    }) / 2.0;
    drop(stop_tx);
    for h in anchors {
        h.join().unwrap();
    }
    Ok(ns)
}

/// The engine's part alone: the same alternating hints fed straight to an
/// `Engine` by a thread that moves with bare `sched_setaffinity` calls, so
/// the engine's state is as cold as in the runtime. Returns the median extra
/// CPU ns per pair of (move + hint) over `bare_pair`.
fn engine_after_bare_moves(
    rt: &Runtime,
    a: CpuSet,
    b: CpuSet,
    bare_pair: impl FnMut() + Send + 'static,
) -> f64 {
    use dfsched_core::{AppId, DfId, Engine, Event, TaskId};
    let mut engine = Engine::new(rt.topology().clone(), rt.config().engine.clone()).unwrap();
    let mut out = Vec::new();
    for t in 1..=3 {
        let task_new = Event::TaskNew {
            task: TaskId(t),
            app: AppId(0),
            allowed: rt.allowed().clone(),
            cpu: None,
        };
        engine.handle(task_new, &mut out).unwrap();
    }
    let hint = |task, cur: Option<u64>, next: Option<u64>| Event::Hint {
        task: TaskId(task),
        app: AppId(0),
        cur: cur.map(DfId),
        next: next.map(DfId),
    };
    engine.handle(hint(1, None, Some(1)), &mut out).unwrap();
    engine.handle(hint(2, None, Some(2)), &mut out).unwrap();
    engine.handle(hint(3, None, Some(2)), &mut out).unwrap();
    interleaved_ns(2_000, bare_pair, move || {
        sys::set_affinity(0, &a).unwrap();
        out.clear();
        engine.handle(hint(3, Some(2), Some(1)), &mut out).unwrap();
        sys::set_affinity(0, &b).unwrap();
        out.clear();
        engine.handle(hint(3, Some(1), Some(2)), &mut out).unwrap();
    })
    .extra_cpu
}

fn main() -> Result<(), dfsched::Error> {
    let allowed = sys::get_affinity(0)?;
    let mut cfg = RuntimeConfig {
        balance_interval_ms: 0,
        external_load: false,
        ..RuntimeConfig::default()
    };
    cfg.engine.heavy_load_milli = 1000;
    let rt = Runtime::start(cfg.clone())?;

    rt.enter(1)?;
    let fast = per_call_ns(1_000_000, || rt.enter(std::hint::black_box(1)).unwrap());
    rt.leave()?;
    println!("fast path (repeated hint):       {fast:8.1} ns/hint");

    if allowed.len() < 2 {
        println!("move path: skipped, only CPUs {allowed} are allowed");
        return Ok(());
    }
    // Two anchors hold DFs 1 and 2 on two CPUs.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let mut cpus = Vec::new();
    let mut anchors = Vec::new();
    for df in [1u64, 2] {
        let (tx, rx) = mpsc::channel();
        let (rt, stop) = (rt.clone(), stop_rx.clone());
        anchors.push(std::thread::spawn(move || {
            rt.enter(df).unwrap();
            tx.send(sys::get_affinity(0).unwrap()).unwrap();
            let _ = stop.lock().unwrap().recv();
        }));
        cpus.push(rx.recv().unwrap());
    }
    let (a, b) = (cpus[0].clone(), cpus[1].clone());
    assert_ne!(a, b, "the anchors' groups share a CPU");

    let bare_pair = {
        let (a, b) = (a.clone(), b.clone());
        move || {
            sys::set_affinity(0, &a).unwrap();
            sys::set_affinity(0, &b).unwrap();
        }
    };
    let getaffinity = interleaved_ns(2_000, bare_pair.clone(), {
        let (a, b) = (a.clone(), b.clone());
        move || {
            let _ = sys::get_affinity(0).unwrap();
            sys::set_affinity(0, &a).unwrap();
            let _ = sys::get_affinity(0).unwrap();
            sys::set_affinity(0, &b).unwrap();
        }
    })
    .extra_cpu;
    let engine = engine_after_bare_moves(&rt, a.clone(), b.clone(), bare_pair.clone());
    let before = rt.stats();
    let m = interleaved_ns(2_000, bare_pair, {
        let rt = rt.clone();
        move || {
            rt.enter(2).unwrap();
            rt.enter(1).unwrap();
        }
    });
    let after = rt.stats();
    let hints = after.hint_calls - before.hint_calls;
    let placements = after.affinity_calls - before.affinity_calls;
    println!("                                    wall ns   CPU ns   (per move; medians of interleaved batches)");
    println!(
        "bare sched_setaffinity move:     {:8.0} {:8.0}",
        m.base / 2.0,
        m.base_cpu / 2.0
    );
    println!(
        "dfsched hint that moves:         {:8.0} {:8.0}",
        m.with / 2.0,
        m.with_cpu / 2.0
    );
    println!(
        "dfsched's share:                 {:8.0} {:8.0}",
        m.extra / 2.0,
        m.extra_cpu / 2.0
    );
    println!(
        "  of which sched_getaffinity:             {:8.0}",
        getaffinity / 2.0
    );
    println!(
        "  of which the engine's hint:             {:8.0}   (a cold engine after a bare move)",
        engine / 2.0
    );
    let own = moving_without_kernel(cfg)?;
    println!("dfsched hint, no-op kernel:      {own:8.0}          (engine, lock, bookkeeping; warm caches)");
    println!(
        "placements per moving hint:      {:8.2} ({placements} placements over {hints} hints)",
        placements as f64 / hints as f64
    );
    drop(stop_tx);
    for h in anchors {
        h.join().unwrap();
    }
    rt.shutdown();
    Ok(())
}
