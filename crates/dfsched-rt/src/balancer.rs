//! The balancer thread: every `balance_interval_ms` it runs one engine
//! balancer pass and carries out its moves, whether the moved threads run
//! or sleep (their masks are set by tid).
//!
//! ```text
//!   ┌──────────── sleep on the condvar (interval, or until shutdown) ◄─────┐
//!   ▼                                                                      │
//!   1. the agent's view (others' load, unmanaged load), else our own      │
//!      /proc scan; the unmanaged part through the window (external.rs)    │
//!      (optional; outside the engine's mutex)                             │
//!   2. lock; Event::ExternalLoad { sample }; Event::Balance { now }        │
//!   3. carry out GroupMoved / GroupSplit / TaskMoved → Place per member   │
//!   4. if anything moved: report the new load to the agent at once ───────┘
//! ```
//!
//! Shutdown sets the stop flag under the condvar's mutex and notifies, so a
//! sleeping balancer wakes at once and a running pass is the last one. The
//! balancer's clock is the runtime's age: the engine reads no clock itself.

use crate::error::Error;
use crate::external::Source;
use crate::runtime::Inner;
use dfsched_core::{CpuId, Event, Nanos};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Starts the balancer thread of `inner`.
pub(crate) fn spawn(inner: Arc<Inner>, interval: Duration) -> Result<JoinHandle<()>, Error> {
    // Not attached under LD_PRELOAD: the balancer is not the program's.
    crate::preload::internal_spawn(|| {
        std::thread::Builder::new()
            .name("dfsched-balance".into())
            .spawn(move || run(&inner, interval))
    })
    .map_err(|e| Error::Os {
        call: "pthread_create (balancer thread)",
        errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
    })
}

fn run(inner: &Inner, interval: Duration) {
    let mut stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        // Sleeps a whole interval unless shutdown intervenes; spurious
        // wake-ups go back to sleep inside wait_timeout_while.
        stop = inner
            .wake
            .wait_timeout_while(stop, interval, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if *stop {
            return;
        }
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
                let runnable: Vec<(CpuId, u32)> = sample
                    .runnable
                    .into_iter()
                    .filter(|(cpu, _)| self.topology.cpus().contains(*cpu))
                    .collect();
                st.stats.external_load_samples += 1;
                match sample.source {
                    Source::Agent => st.stats.external_load_agent_samples += 1,
                    Source::OwnScan => st.stats.external_load_own_scans += 1,
                }
                st.stats.external_runnable = runnable.iter().map(|&(_, n)| u64::from(n)).sum();
                if st.handle(Event::ExternalLoad { runnable }).is_err() {
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
        drop(st);
        if moved {
            self.agent_update();
        }
        result.map_err(Error::from)
    }
}

/// Moves carried out so far (group moves, splits, thread moves).
fn moves(stats: &crate::stats::RuntimeStats) -> u64 {
    stats.group_moves + stats.splits + stats.task_moves
}
