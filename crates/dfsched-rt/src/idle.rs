//! Idle-thread detection: the kernel does not tell a library when a thread
//! blocks, so each balancer pass looks at every registered thread's CPU
//! time and turns a thread that has used none for a while into
//! `Event::Block`, and a blocked thread whose CPU time moves again into
//! `Event::Wake`.
//!
//! ```text
//!   pass: lock, copy (tid, Track) of every record, unlock
//!         for each: its CPU clock (one clock_gettime, ~0.3 µs)
//!            moved          → Track reset; blocked before? → Wake
//!            still ≥ passes → is it running or queued now (its /proc stat,
//!            and ≥ min time    state R)? no → Block; yes or unreadable → wait
//!         lock, write each Track back unless it changed meanwhile, send the
//!         events, carry out their placements
//! ```
//!
//! A thread is **idle** when its CPU time has not moved over the last
//! `idle_passes` passes *and* over at least [`MIN_IDLE_NS`] of wall time,
//! and it is not in state `R` when that is first true. The test is
//! deliberately "no CPU at all": a thread that blocks on a socket for a few
//! milliseconds at a time uses some CPU in every window and keeps counting
//! as runnable (chat's server threads, each well under 1 % of a CPU). A
//! thread that hints (slow path) is woken at once by its call
//! (`runtime/threads.rs`). The readings are made by `runtime/pass.rs`,
//! their write-back by `balancer::apply_idle`: this file is the rule alone.
//!
//! Why the CPU clock and not the `schedstat` file: opening and reading
//! `/proc/self/task/TID/schedstat` costs ~8–13 µs per thread on the
//! development guest, a thread's CPU clock ~0.3 µs — for hundreds of threads
//! per 100 ms pass that is 1–3 % of a CPU against under 0.1 %. The clock is
//! the file's first field (plus the slice running now). Its second field,
//! the time spent waiting for a CPU, adds nothing: the kernel adds a wait
//! to it only when the wait ends (the thread gets a CPU or migrates), so a
//! thread starved for the whole window shows neither counter moving. That
//! case is what the state read catches, once per idle episode rather than
//! per pass.
//!
//! Invariants:
//! - `Track::blocked` of a record is true exactly when the engine has the
//!   thread not runnable (both change together under the runtime's mutex);
//! - a record's track is written back only if it is the one the reading
//!   started from: a hint that woke the thread meanwhile, or a new thread
//!   that got the tid of an exited one, is never overwritten by a stale
//!   reading. (A thread found idle that wakes between its reading and the
//!   write-back, without a call that finds it blocked, is blocked for one
//!   pass: the next reading sees its CPU time move and wakes it.)

use dfsched_core::Event;

/// The least wall time a thread must have used no CPU before it counts as
/// blocked, whatever the number of passes: two passes of the default
/// 100 ms interval. Passes run by `balance_now` may come much faster.
pub const MIN_IDLE_NS: u64 = 200_000_000;

/// How long a thread must have used no CPU to count as idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// Consecutive passes with its CPU time unchanged; at least 1.
    pub(crate) passes: u32,
    /// And at least this much wall time since its CPU time was first read
    /// at its current value.
    pub(crate) min_ns: u64,
}

/// One registered thread's idle state, kept in its runtime record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Track {
    /// Its CPU time at the last reading; `None` before the first reading
    /// (and after a call of its own woke it).
    cpu_ns: Option<u64>,
    /// The runtime's age when `cpu_ns` was first read at its value.
    since_ns: u64,
    /// Readings since then that found it unchanged.
    still: u32,
    /// The engine has it blocked (`Event::Block` sent, no `Wake` since).
    pub(crate) blocked: bool,
}

/// What one reading of a thread's CPU time calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing to tell the engine.
    Nothing,
    /// It was blocked and has used CPU since: `Event::Wake`.
    Wake,
    /// It has used no CPU over the whole window: blocked, unless it is
    /// running or waiting for a CPU right now (the caller looks, then
    /// [`Track::block`]s it or not).
    Idle,
}

impl Track {
    /// Takes in a reading of the thread's CPU time `cpu_ns` at runtime age
    /// `now_ns`. Readings of one thread come in pass order (`now_ns` never
    /// decreases).
    pub(crate) fn observe(&mut self, cpu_ns: u64, now_ns: u64, window: Window) -> Step {
        if self.cpu_ns != Some(cpu_ns) {
            let was_blocked = self.blocked;
            *self = Track {
                cpu_ns: Some(cpu_ns),
                since_ns: now_ns,
                still: 0,
                blocked: false,
            };
            return if was_blocked {
                Step::Wake
            } else {
                Step::Nothing
            };
        }
        if self.blocked {
            return Step::Nothing;
        }
        self.still = self.still.saturating_add(1);
        let long_enough = now_ns.saturating_sub(self.since_ns) >= window.min_ns;
        if self.still >= window.passes && long_enough {
            Step::Idle
        } else {
            Step::Nothing
        }
    }

    /// The caller sent `Event::Block` for an [`Step::Idle`] thread.
    pub(crate) fn block(&mut self) {
        self.blocked = true;
    }

    /// The thread itself called the runtime (a hint), so it runs: forgets
    /// the readings (the next one starts a new window) and the block (the
    /// caller sends `Event::Wake` if it was blocked).
    pub(crate) fn woken_by_call(&mut self) {
        *self = Track::default();
    }
}

/// A reading's outcome for one thread, carried from outside the lock to
/// the write-back (`balancer::apply_idle`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The thread.
    pub(crate) tid: u64,
    /// The record's track the reading started from.
    pub(crate) before: Track,
    /// The track after the reading.
    pub(crate) after: Track,
    /// The event to send, if any.
    pub(crate) event: Option<Event>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: Window = Window {
        passes: 2,
        min_ns: MIN_IDLE_NS,
    };
    const MS: u64 = 1_000_000;

    /// Feeds `(cpu_ns, now_ns)` readings; the steps.
    fn run(track: &mut Track, readings: &[(u64, u64)], window: Window) -> Vec<Step> {
        readings
            .iter()
            .map(|&(cpu, now)| track.observe(cpu, now, window))
            .collect()
    }

    #[test]
    fn a_thread_still_for_two_passes_and_200_ms_is_idle() {
        let mut t = Track::default();
        let steps = run(&mut t, &[(5, 0), (5, 100 * MS), (5, 200 * MS)], W);
        assert_eq!(steps, [Step::Nothing, Step::Nothing, Step::Idle]);
    }

    #[test]
    fn both_the_passes_and_the_wall_time_must_be_met() {
        // Fast passes (balance_now): three still readings within 30 ms are
        // not enough, the one at 200 ms is.
        let mut t = Track::default();
        let steps = run(
            &mut t,
            &[
                (5, 0),
                (5, 10 * MS),
                (5, 20 * MS),
                (5, 30 * MS),
                (5, 200 * MS),
            ],
            W,
        );
        assert_eq!(steps[..4], [Step::Nothing; 4]);
        assert_eq!(steps[4], Step::Idle);
        // Slow passes: one still reading 10 s later is not two passes.
        let mut t = Track::default();
        let steps = run(&mut t, &[(5, 0), (5, 10_000 * MS), (5, 10_001 * MS)], W);
        assert_eq!(steps, [Step::Nothing, Step::Nothing, Step::Idle]);
    }

    #[test]
    fn an_idle_thread_not_blocked_stays_a_candidate_and_a_blocked_one_wakes_once() {
        let mut t = Track::default();
        run(&mut t, &[(5, 0), (5, 100 * MS)], W);
        // Seen running at the deciding pass: the caller does not block it;
        // the next pass asks again.
        assert_eq!(t.observe(5, 200 * MS, W), Step::Idle);
        assert_eq!(t.observe(5, 300 * MS, W), Step::Idle);
        t.block();
        assert_eq!(t.observe(5, 400 * MS, W), Step::Nothing, "already blocked");
        assert_eq!(t.observe(6, 500 * MS, W), Step::Wake);
        assert!(!t.blocked);
        assert_eq!(t.observe(7, 600 * MS, W), Step::Nothing);
    }

    #[test]
    fn a_call_of_the_thread_starts_a_new_window() {
        let mut t = Track::default();
        run(&mut t, &[(5, 0), (5, 100 * MS), (5, 200 * MS)], W);
        t.block();
        t.woken_by_call();
        assert!(!t.blocked);
        // The reading after the call is a baseline, not a wake: the caller
        // already sent Wake with the call.
        let steps = run(&mut t, &[(5, 300 * MS), (5, 400 * MS), (5, 500 * MS)], W);
        assert_eq!(steps, [Step::Nothing, Step::Nothing, Step::Idle]);
    }

    proptest! {
        #[test]
        fn a_thread_whose_cpu_time_keeps_growing_is_never_idle(
            start in 0u64..1_000_000_000,
            deltas in prop::collection::vec((1u64..10_000_000, 0u64..2_000_000_000), 1..60),
            passes in 1u32..5,
        ) {
            let window = Window { passes, min_ns: MIN_IDLE_NS };
            let mut t = Track::default();
            let (mut cpu, mut now) = (start, 0u64);
            for (d_cpu, d_now) in deltas {
                cpu += d_cpu;
                now += d_now;
                prop_assert_eq!(t.observe(cpu, now, window), Step::Nothing);
                prop_assert!(!t.blocked);
            }
        }

        #[test]
        fn a_still_thread_is_idle_exactly_once_the_window_is_over(
            gaps in prop::collection::vec(0u64..300_000_000, 1..20),
            passes in 1u32..5,
        ) {
            let window = Window { passes, min_ns: MIN_IDLE_NS };
            let mut t = Track::default();
            prop_assert_eq!(t.observe(42, 0, window), Step::Nothing);
            let mut now = 0u64;
            for (i, gap) in gaps.into_iter().enumerate() {
                now += gap;
                let still = i as u32 + 1;
                let expect = if still >= passes && now >= MIN_IDLE_NS {
                    Step::Idle
                } else {
                    Step::Nothing
                };
                prop_assert_eq!(t.observe(42, now, window), expect);
            }
        }

        #[test]
        fn a_blocked_thread_wakes_on_any_cpu_time_and_only_then(
            stills in 0usize..10,
            more in 1u64..1_000_000,
        ) {
            let mut t = Track::default();
            run(&mut t, &[(9, 0), (9, 100 * MS), (9, 200 * MS)], W);
            t.block();
            for i in 0..stills {
                prop_assert_eq!(t.observe(9, (300 + i as u64 * 100) * MS, W), Step::Nothing);
            }
            prop_assert_eq!(t.observe(9 + more, 10_000 * MS, W), Step::Wake);
        }
    }
}
