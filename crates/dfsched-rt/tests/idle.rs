//! Idle-thread detection against the real kernel: threads of this test that
//! joined a runtime and then wait use no CPU, and the runtime's passes must
//! turn them into blocked threads (no load) and back once they run or call.
//! Each test has its own runtime with no external load and no agent, so
//! other tests' threads in this process are none of its business; states
//! are waited for with a generous deadline, never timed.

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::{Policy, Runtime, RuntimeConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a state may take to be reached before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);

/// [`quiet`] with idle detection at its default window and no agent.
fn idle_config() -> RuntimeConfig {
    RuntimeConfig {
        idle_passes: dfsched::config::DEFAULT_IDLE_PASSES,
        agent: AgentMode::Off,
        ..quiet()
    }
}

/// A thread that attached to a runtime and then spins, or first waits on a
/// channel until [`Member::run`] (a wait that uses no CPU).
struct Member {
    tid: u64,
    go: Option<Sender<()>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Member {
    fn start(rt: &Runtime, waits: bool) -> Member {
        let (tid_tx, tid_rx) = channel();
        let (go, go_rx) = channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let (rt, flag) = (rt.clone(), Arc::clone(&stop));
        let handle = std::thread::spawn(move || {
            rt.attach().unwrap();
            tid_tx.send(dfsched::sys::gettid()).unwrap();
            if waits {
                let _ = go_rx.recv();
            }
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Member {
            tid: tid_rx.recv().unwrap(),
            go: Some(go),
            stop,
            handle: Some(handle),
        }
    }

    /// A waiting member starts spinning.
    fn run(&mut self) {
        if let Some(go) = self.go.take() {
            go.send(()).unwrap();
        }
    }
}

impl Drop for Member {
    /// Stops the thread (also when a test fails, so no spinner outlives it).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.go = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn runnable(rt: &Runtime, tid: u64) -> bool {
    rt.task(tid).expect("registered").runnable
}

/// Runs balancer passes until `reached` holds, failing after [`DEADLINE`].
fn pass_until(rt: &Runtime, what: &str, reached: impl Fn() -> bool) {
    let start = Instant::now();
    loop {
        rt.balance_now().unwrap();
        if reached() {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what} not reached in {DEADLINE:?}: {:?}",
            rt.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_waiting_thread_stops_counting_as_load_and_counts_again_once_it_runs() {
    let rt = Runtime::start(idle_config()).unwrap();
    let spinner = Member::start(&rt, false);
    let mut waiter = Member::start(&rt, true);
    pass_until(&rt, "the waiting thread blocked", || {
        !runnable(&rt, waiter.tid)
    });
    // A spinning thread is always running or queued: never blocked.
    assert!(runnable(&rt, spinner.tid));
    let s = rt.stats();
    assert_eq!((s.threads_idle, s.idle_blocks), (1, 1), "{s:?}");
    assert!(
        s.idle_cpu_ns > 0 && s.balance_cpu_ns >= s.idle_cpu_ns,
        "{s:?}"
    );
    // It runs again: the next passes see its CPU time move.
    waiter.run();
    pass_until(&rt, "the waiter woken", || runnable(&rt, waiter.tid));
    assert!(runnable(&rt, spinner.tid));
    let s = rt.stats();
    assert_eq!((s.threads_idle, s.idle_wakes), (0, 1), "{s:?}");
    rt.check_invariants().unwrap();
    drop((spinner, waiter));
    rt.shutdown();
}

#[test]
fn a_blocked_thread_that_hints_is_woken_by_its_call() {
    let rt = Runtime::start(idle_config()).unwrap();
    let worker = Worker::spawn();
    let rt2 = rt.clone();
    worker.run(move || rt2.attach()).unwrap();
    pass_until(&rt, "the parked worker blocked", || {
        !runnable(&rt, worker.tid)
    });
    // Its hint wakes it before it joins DF 1: no pass in between.
    let rt2 = rt.clone();
    worker.run(move || rt2.enter(1)).unwrap();
    let view = rt.task(worker.tid).unwrap();
    assert!(view.runnable, "{view:?}");
    let group = rt
        .groups()
        .into_iter()
        .find(|g| g.members.contains(&view.task));
    assert_eq!(group.map(|g| g.runnable), Some(1), "it counts in its group");
    let s = rt.stats();
    assert_eq!(
        (s.idle_blocks, s.idle_wakes, s.threads_idle),
        (1, 1, 0),
        "{s:?}"
    );
    rt.check_invariants().unwrap();
    worker.join();
    rt.shutdown();
}

#[test]
fn idle_detection_off_counts_every_thread_for_good() {
    let rt = Runtime::start(RuntimeConfig {
        idle_passes: 0,
        ..idle_config()
    })
    .unwrap();
    let worker = Worker::spawn();
    let rt2 = rt.clone();
    worker.run(move || rt2.attach()).unwrap();
    // Well past the window (≥ 200 ms and many passes) it still counts.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        rt.balance_now().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(runnable(&rt, worker.tid));
    let s = rt.stats();
    assert_eq!((s.idle_blocks, s.idle_cpu_ns), (0, 0), "{s:?}");
    worker.join();
    rt.shutdown();
}

/// A co-thread runtime on `c0, c1` where 7 outside threads run on `c1`
/// and a process's group is heavy from 6 runnable per CPU (12 in all).
/// Counting 8 of its threads, it is heavy (7 + 8 = 15) and `c0` is within
/// its fair share (8 against an average of 7.5): packed on `c0`. Counting
/// 2, it is light (9 < 12) and no CPU holds 2 threads beside the outside
/// load: spread over both. No splits, which would pin a spinner to `c0` to
/// even out the outside load, whatever counts.
fn co_thread_beside_outside_load(c1: dfsched::CpuId, idle_passes: u32) -> Runtime {
    let mut cfg = idle_config();
    cfg.idle_passes = idle_passes;
    cfg.policy = Policy::CoThread;
    cfg.engine.heavy_load_milli = 6000;
    cfg.engine.split_after_passes = 0;
    let rt = Runtime::start(cfg).unwrap();
    rt.set_external_load(&[(c1, 7)]).unwrap();
    rt
}

#[test]
fn idle_threads_do_not_make_a_co_thread_process_look_heavy() {
    with_two_cpus(
        "idle_threads_do_not_make_a_co_thread_process_look_heavy",
        |c0, c1| {
            let mask = |m: &Member| dfsched::sys::get_affinity(m.tid).unwrap();
            // The premise: with every thread counted (detection off), 6
            // waiting threads then 2 spinning ones are packed on c0.
            let rt = co_thread_beside_outside_load(c1, 0);
            let waiters: Vec<Member> = (0..6).map(|_| Member::start(&rt, true)).collect();
            let spinners: Vec<Member> = (0..2).map(|_| Member::start(&rt, false)).collect();
            rt.balance_now().unwrap();
            for s in &spinners {
                assert_eq!(mask(s), set_of(&[c0]), "premise: packed when all count");
            }
            drop((spinners, waiters));
            rt.shutdown();

            // With detection, the waiting threads are blocked before the
            // spinners come, and the spinners are not narrowed to one CPU.
            let rt = co_thread_beside_outside_load(c1, dfsched::config::DEFAULT_IDLE_PASSES);
            let waiters: Vec<Member> = (0..6).map(|_| Member::start(&rt, true)).collect();
            pass_until(&rt, "the 6 waiting threads blocked", || {
                waiters.iter().all(|w| !runnable(&rt, w.tid))
            });
            let spinners: Vec<Member> = (0..2).map(|_| Member::start(&rt, false)).collect();
            let both = set_of(&[c0, c1]);
            // Passes over more than the idle window (≥ 4 passes, ≥ 300 ms):
            // the spinners stay runnable and the group stays spread.
            let start = Instant::now();
            let mut passes = 0;
            while passes < 4 || start.elapsed() < Duration::from_millis(300) {
                rt.balance_now().unwrap();
                passes += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            for s in &spinners {
                assert_eq!(mask(s), both, "spinner {} narrowed", s.tid);
                assert!(runnable(&rt, s.tid));
            }
            for w in &waiters {
                assert!(!runnable(&rt, w.tid), "waiter {} counts", w.tid);
            }
            let s = rt.stats();
            assert_eq!((s.threads_idle, s.idle_blocks), (6, 6), "{s:?}");
            rt.check_invariants().unwrap();
            drop((spinners, waiters));
            rt.shutdown();
        },
    );
}
