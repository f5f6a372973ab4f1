//! The start gate: workers place themselves, arrive, and wait until the
//! main thread has seen every one arrive and decided whether they go.
//!
//! Invariant: `arrive` returns only after `decide`, and `decide` is called
//! by the main thread only after `wait_arrivals(n)` saw all `n` workers, so
//! the timed part of a run starts with every worker placed. A worker that
//! failed its setup still arrives (with `ok = false`), so the main thread
//! never waits for a worker that will not come.

use std::sync::{Condvar, Mutex};

/// Holds placed workers until every one has arrived and the main thread
/// has decided whether they go.
#[derive(Default)]
pub(crate) struct StartGate {
    state: Mutex<GateState>,
    /// Signalled on every arrival and on the decision.
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Workers that have arrived.
    arrived: usize,
    /// Whether any arrived with a failed setup.
    failed: bool,
    /// `Some(go)` once the main thread decided.
    decision: Option<bool>,
}

impl StartGate {
    /// A worker arrives (`ok` = its setup worked) and waits for the
    /// decision; returns whether to go.
    pub(crate) fn arrive(&self, ok: bool) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.arrived += 1;
        s.failed |= !ok;
        self.changed.notify_all();
        loop {
            if let Some(go) = s.decision {
                return go;
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until `n` workers have arrived; returns whether all were ok.
    pub(crate) fn wait_arrivals(&self, n: usize) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.arrived < n {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        !s.failed
    }

    /// Lets the workers go (or sends them home).
    pub(crate) fn decide(&self, go: bool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.decision = Some(go);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn start_gate_releases_only_after_the_decision() {
        let gate = StartGate::default();
        thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|i| {
                    s.spawn({
                        let gate = &gate;
                        move || gate.arrive(i != 1)
                    })
                })
                .collect();
            assert!(!gate.wait_arrivals(3), "one worker failed its setup");
            gate.decide(false);
            for h in hs {
                assert!(!h.join().unwrap(), "nobody goes after a failure");
            }
        });
    }
}
