//! The balancer thread: every `balance_interval_ms` it runs one engine
//! balancer pass and carries out its moves, whether the moved threads run
//! or sleep (their masks are set by tid).
//!
//! ```text
//!   ┌──────────── sleep on the condvar (interval, or until shutdown) ◄─────┐
//!   ▼                                                                      │
//!   0. idle step: threads that used no CPU → Block, again → Wake (idle.rs) │
//!   1. the agent's view (others' load, unmanaged load), else our own      │
//!      /proc scan; the unmanaged part through the window (external.rs)    │
//!      (optional; outside the engine's mutex)                             │
//!   2. lock; Event::ExternalLoadMilli { sample }; Event::Balance { now }    │
//!   3. carry out GroupMoved / GroupSplit / TaskMoved → Place per member   │
//!   4. if anything moved: report the new load to the agent at once ───────┘
//! ```
//!
//! Shutdown sets the stop flag under the condvar's mutex and notifies, so a
//! sleeping balancer wakes at once and a running pass is the last one. The
//! balancer's clock is the runtime's age: the engine reads no clock itself.
//!
//! # Phase
//!
//! The first sleep is shorter than the interval by an offset drawn from the
//! pid ([`first_wait`]), so the passes of processes started together (a
//! benchmark's workers, a shell pipeline) do not fall at the same instant.
//! Passes at one instant decide on views of each other taken before any of
//! them moved: three 2-thread processes on 2 CPUs under co-thread all saw
//! the same CPU as the free one and jumped onto it together, then all
//! jumped back (engineer D's `bench spin` 3×2 ended with all six threads on
//! one CPU in 2 of 5 rounds). Spread over the interval, each pass sees the
//! moves of the passes before it (a runtime that moved reports at once).

use crate::error::Error;
use crate::external::Source;
use crate::runtime::Inner;
use dfsched_core::{CpuId, Event, Nanos, TaskId};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Starts the balancer thread of `inner`.
pub(crate) fn spawn(inner: Arc<Inner>, interval: Duration) -> Result<JoinHandle<()>, Error> {
    // Not attached under LD_PRELOAD: the balancer is not the program's.
    crate::thread::internal_spawn(|| {
        std::thread::Builder::new()
            .name("dfsched-balance".into())
            .spawn(move || run(&inner, interval))
    })
    .map_err(|e| Error::Os {
        call: "pthread_create (balancer thread)",
        errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
    })
}

/// The first sleep: the interval less a pid-derived offset in
/// `[0, interval)` (module doc, "Phase"). A multiplicative hash of the pid,
/// so that consecutive pids land far apart in the interval.
fn first_wait(interval: Duration, pid: u32) -> Duration {
    let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return interval;
    }
    // Fibonacci hashing: the top bits of pid × 2^64/φ, scaled to the interval.
    let frac = u64::from(pid).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    let offset = ((u128::from(nanos) * u128::from(frac)) >> 32) as u64;
    Duration::from_nanos(nanos - offset.min(nanos - 1))
}

fn run(inner: &Inner, interval: Duration) {
    let mut stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
    let mut wait = first_wait(interval, inner.pid);
    loop {
        // Sleeps a whole interval unless shutdown intervenes; spurious
        // wake-ups go back to sleep inside wait_timeout_while.
        stop = inner
            .wake
            .wait_timeout_while(stop, wait, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if *stop {
            return;
        }
        wait = interval;
        drop(stop);
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.balance_pass()));
        if let Ok(Err(e)) = &pass {
            tracing::debug!(runtime = inner.id, error = %e, "dfsched balancer pass failed");
        }
        stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
    }
}

impl Inner {
    /// One balancer pass: external-load sample (if configured), then the
    /// engine's `Balance`, then its moves carried out, then (if any) the new
    /// load reported to the agent.
    pub(crate) fn balance_pass(&self) -> Result<(), Error> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let cpu_before = crate::sys::own_cpu_ns();
        // Idle threads first, so that the load reported to the agent and
        // balanced below counts only threads that use CPU.
        self.idle_pass();
        // The agent's view first: it carries the unmanaged load from the
        // agent's shared scan, and when it does not, its registered pids are
        // left out of our own scan (their load comes with the view).
        let agent = self.agent_exchange();
        let sample = self.config.external_load.then(|| {
            self.external
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .sample(self.pid, &agent)
        });
        let now = Nanos(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let mut st = self.lock()?;
        let moves_before = moves(&st.stats);
        match sample {
            Some(Ok(sample)) => {
                let ours = |cpu: &CpuId| self.topology.cpus().contains(*cpu);
                let load_milli: Vec<(CpuId, u64)> = sample
                    .load_milli
                    .into_iter()
                    .filter(|(cpu, _)| ours(cpu))
                    .collect();
                st.stats.external_load_samples += 1;
                match sample.source {
                    Source::Agent => st.stats.external_load_agent_samples += 1,
                    Source::OwnScan => st.stats.external_load_own_scans += 1,
                }
                st.stats.external_files_read += sample.files;
                st.stats.external_refreshes += u64::from(sample.refreshed);
                st.stats.external_runnable = sample
                    .counted
                    .iter()
                    .filter(|(cpu, _)| ours(cpu))
                    .map(|&(_, n)| u64::from(n))
                    .sum();
                st.stats.external_load_milli = load_milli.iter().map(|&(_, m)| m).sum();
                st.stats.external_load_per_cpu_milli = load_milli.clone();
                if st.handle(Event::ExternalLoadMilli { load_milli }).is_err() {
                    st.stats.balancer_errors += 1;
                }
            }
            Some(Err(_)) => st.stats.external_load_errors += 1,
            None => {}
        }
        self.agent_apply_home(&mut st, &agent);
        let result = st.handle(Event::Balance { now });
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(
                runtime = self.id,
                load_milli = ?st.engine.load_milli(),
                report = ?st.engine.last_balance(),
                "dfsched balancer pass"
            );
        }
        match result {
            Ok(()) => st.stats.balancer_passes += 1,
            Err(_) => st.stats.balancer_errors += 1,
        }
        // Whatever the external load changed is carried out even if the
        // pass itself was refused.
        self.apply(&mut st, None);
        let moved = moves(&st.stats) != moves_before;
        // Our runnable threads now and where they are targeted: the next
        // sample leaves them out of the outside load (external.rs). The
        // external lock is only ever taken inside the state lock here, never
        // the other way round.
        if self.config.external_load {
            let shares = own_shares(
                &st.engine.load_milli(),
                &st.stats.external_load_per_cpu_milli,
            );
            let threads = st
                .tasks
                .keys()
                .filter_map(|&tid| Some((tid, st.engine.target(TaskId(tid))?.clone())))
                .collect();
            self.external
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_own(shares, threads);
        }
        let pass_cpu_ns = crate::sys::own_cpu_ns().saturating_sub(cpu_before);
        st.stats.balancer_cpu_ns += pass_cpu_ns;
        st.stats.recent_pass_cpu_ns.record(pass_cpu_ns);
        drop(st);
        if moved {
            self.agent_update();
        }
        result.map_err(Error::from)
    }
}

/// Our own runnable threads' load per CPU: the engine's load less the
/// external load it was given, CPUs with none left out.
fn own_shares(load: &[(CpuId, u64)], external: &[(CpuId, u64)]) -> Vec<(CpuId, u64)> {
    load.iter()
        .map(|&(cpu, m)| {
            let ext = external
                .binary_search_by_key(&cpu, |&(c, _)| c)
                .map_or(0, |i| external[i].1);
            (cpu, m.saturating_sub(ext))
        })
        .filter(|&(_, m)| m > 0)
        .collect()
}

/// Moves carried out so far: group moves, splits, thread moves, and every
/// placement besides, since a co-thread group re-homed by the home rule
/// (the pass's step 0) moves without a `GroupMoved` — and it is those
/// re-homings that other processes must hear of at once (module doc,
/// "Phase").
fn moves(stats: &crate::stats::RuntimeStats) -> u64 {
    stats.group_moves + stats.splits + stats.task_moves + stats.placements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_shares_are_the_engines_load_less_the_external_load() {
        let load = [(CpuId(0), 3500), (CpuId(1), 500), (CpuId(2), 0)];
        let external = [(CpuId(0), 1500), (CpuId(1), 500)];
        assert_eq!(own_shares(&load, &external), vec![(CpuId(0), 2000)]);
        assert_eq!(own_shares(&load[..2], &[]), load[..2].to_vec());
    }

    #[test]
    fn the_first_wait_is_within_the_interval_and_never_zero() {
        let interval = Duration::from_millis(100);
        for pid in [0, 1, 2, 3, 1000, 4_194_303, u32::MAX] {
            let w = first_wait(interval, pid);
            assert!(w > Duration::ZERO && w <= interval, "pid {pid}: {w:?}");
        }
        assert_eq!(first_wait(Duration::ZERO, 7), Duration::ZERO);
        assert_eq!(
            first_wait(Duration::from_nanos(1), 7),
            Duration::from_nanos(1)
        );
    }

    #[test]
    fn consecutive_pids_get_phases_spread_over_the_interval() {
        // Nine workers started together (consecutive pids): no two passes
        // within 3 ms of each other, and both halves of the interval used.
        let interval = Duration::from_millis(100);
        let mut phases: Vec<Duration> = (5000..5009).map(|p| first_wait(interval, p)).collect();
        phases.sort();
        for pair in phases.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(3), "{phases:?}");
        }
        assert!(phases[0] < Duration::from_millis(50) && phases[8] > Duration::from_millis(50));
    }
}
