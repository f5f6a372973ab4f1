//! Placements reach the kernel in the order they were decided: many
//! threads hint at once, and once every hint has returned, every thread's
//! kernel mask (read back with `sched_getaffinity`, under the runtime's
//! lock, by [`Runtime::check_placements`]) is the engine's target for it,
//! and every member of a group sits in the group's home.

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::{Runtime, RuntimeConfig};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// The quiet configuration with the agent off too: nothing but the hints
/// places a thread.
fn hints_only() -> RuntimeConfig {
    RuntimeConfig {
        agent: AgentMode::Off,
        ..quiet()
    }
}

/// One round on a fresh runtime: `n` threads released at once, thread `i`
/// hinting the DFs `dfs_of(i)` in turn; once every hint has returned, the
/// kernel's masks are compared with the engine's view. Meanwhile every
/// thread spins, so that it is on a CPU when another thread's hint moves
/// it, as a working thread would be (the kernel then migrates it through
/// its stopper thread rather than as a sleeping task).
fn one_round(n: usize, dfs_of: &dyn Fn(usize) -> Vec<u64>) -> Result<(), String> {
    let rt = Runtime::start(hints_only()).unwrap();
    let app = rt.create_app().unwrap();
    let start = Arc::new(Barrier::new(n + 1));
    let hinted = Arc::new(AtomicUsize::new(0));
    let checked = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (rt, start, hinted, checked) =
                (rt.clone(), start.clone(), hinted.clone(), checked.clone());
            let dfs = dfs_of(i);
            std::thread::spawn(move || {
                start.wait();
                let mut cur = 0;
                for df in dfs {
                    rt.hint(app, cur, df).unwrap();
                    cur = df;
                }
                hinted.fetch_add(1, Ordering::SeqCst);
                while !checked.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            })
        })
        .collect();
    start.wait();
    while hinted.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
    let outcome = rt.check_placements();
    checked.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    outcome
}

/// Runs `rounds` rounds of `n` threads on two CPUs (so that homes shrink
/// from the LLC to one CPU as threads register, whatever the host); fails
/// listing every round whose masks were off.
fn hammer(test: &'static str, rounds: usize, n: usize, dfs_of: fn(usize) -> Vec<u64>) {
    if allowed().len() < 2 {
        skip(test, "needs 2 allowed CPUs: on one, no hint moves anything");
        return;
    }
    with_two_cpus(test, move |_, _| {
        let bad: Vec<String> = (0..rounds)
            .filter_map(|r| {
                one_round(n, &dfs_of)
                    .err()
                    .map(|e| format!("round {r}: {e}"))
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{} of {rounds} rounds left a thread off its target:\n{}",
            bad.len(),
            bad.join("\n")
        );
    });
}

/// 24 threads in 3 DFs, each hinting once, all at once.
#[test]
fn concurrent_first_hints_leave_every_mask_on_its_target() {
    hammer(
        "concurrent_first_hints_leave_every_mask_on_its_target",
        200,
        24,
        |i| vec![1 + (i as u64 % 3)],
    );
}

/// 24 threads over 4 DFs, each hinting 2 or 3 times (a first DF, then
/// switches), all at once: groups lose members and re-home while others
/// join them.
#[test]
fn concurrent_df_switches_leave_every_mask_on_its_target() {
    hammer(
        "concurrent_df_switches_leave_every_mask_on_its_target",
        300,
        24,
        |i| {
            let i = i as u64;
            (0..2 + i % 2).map(|k| 1 + (i + k) % 4).collect()
        },
    );
}

#[test]
fn the_check_reports_a_mask_set_behind_dfscheds_back() {
    with_two_cpus(
        "the_check_reports_a_mask_set_behind_dfscheds_back",
        |c0, c1| {
            let rt = Runtime::start(RuntimeConfig {
                agent: AgentMode::Off,
                ..quiet_heavy()
            })
            .unwrap();
            let w = Worker::spawn();
            let r = rt.clone();
            w.run(move || r.enter(1)).unwrap();
            let placed = w.mask();
            assert_eq!(placed.len(), 1, "heavy load: a home of one CPU");
            rt.check_placements().unwrap();
            let other = if placed.contains(c0) { c1 } else { c0 };
            dfsched::sys::set_affinity(w.tid, &set_of(&[other])).unwrap();
            let err = rt.check_placements().unwrap_err();
            assert!(err.contains(&format!("tid {}", w.tid)), "{err}");
            assert!(err.contains("engine target"), "{err}");
            assert!(err.contains("its group's home"), "{err}");
            // Put back where dfsched set it, the two agree again.
            dfsched::sys::set_affinity(w.tid, &placed).unwrap();
            rt.check_placements().unwrap();
            w.join();
        },
    );
}
