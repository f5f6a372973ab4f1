//! A runtime's state behind its mutex: the engine, the records of the
//! registered threads, the decisions waiting to be carried out, and the
//! counters. Plain data with no thread, clock or system call of its own, so
//! that a balancer pass (`balancer.rs`) can be run on one in a unit test.
//!
//! Invariants (kept by the runtime, `runtime.rs`): `tasks` holds exactly
//! the threads the engine knows, and `left_alone` registered threads it
//! does not (never one tid in both); `decisions` holds the engine's decisions
//! not yet carried out, and is empty whenever the mutex is released.

use crate::idle::Track;
use crate::stats::RuntimeStats;
use crate::thread::FastCounter;
use dfsched_core::{CoreError, CpuSet, Decision, Engine, Event};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Hashes a thread id with one multiplication (Fibonacci hashing), where
/// SipHash costs tens of nanoseconds per lookup on the hint path. Enough
/// here: tids come from the kernel, not from an adversary, and the map is
/// never iterated for a decision. The low bits of the product are a
/// bijection of the tid's low bits (the multiplier is odd), the high bits
/// mix all of them: both ends of the hash are usable, as `HashMap` needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TidHasher(u64);

/// 2^64 / φ, odd.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for TidHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(FIBONACCI);
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b).wrapping_add(self.0.rotate_left(8)));
        }
    }
}

/// What the runtime keeps per registered thread.
#[derive(Debug)]
pub(crate) struct TaskRec {
    /// The thread's fast-path hint count (the thread holds the other Arc).
    pub(crate) fast: Arc<FastCounter>,
    /// The CPU mask dfsched last set on the thread (or found at
    /// registration); a different mask read back means someone else changed
    /// it (or, while CPUs are offline, that `sched_getaffinity` left them
    /// out: `runtime/online.rs` tells the two apart).
    pub(crate) last_set: CpuSet,
    /// The CPUs the world lets the thread use (its mask at registration, or
    /// as someone else last set it: taskset, a cpuset, the kernel's hotplug
    /// fallback), offline CPUs included, ∩ the topology. The engine's
    /// allowed set is this ∩ the CPUs online (`State::online`), so that a
    /// CPU that comes back is the thread's again.
    pub(crate) allowed: CpuSet,
    /// A placement of the thread failed (`EPERM`, `EINVAL`, …), so the
    /// engine's target is not where the thread runs: its next hint places it
    /// even if the engine's target does not change.
    pub(crate) stale: bool,
    /// Its CPU-time readings and whether the engine has it blocked
    /// (`idle.rs`).
    pub(crate) idle: Track,
    /// The allowed CPUs set on it for a call that starts a program
    /// (`runtime/spawn.rs`), while that call runs: placements of it then only
    /// update `last_set`, which the call's end sets.
    pub(crate) lent: Option<CpuSet>,
    /// Its `pthread_t` (as an integer), by which `pthread_setname_np`
    /// names it; 0 when unknown (a thread registered by its own hint).
    pub(crate) pthread: u64,
    /// Its DF was given by a rule (`runtime/rules.rs`), not by its own
    /// hint: a rename that no rule gives a DF takes it away again.
    pub(crate) rule_df: bool,
}

/// A thread a rule left alone (`runtime/rules.rs`): out of the engine, its
/// record kept so that a rename can bring it back.
#[derive(Debug)]
pub(crate) struct LeftAlone {
    /// Its record as it was when it left the engine.
    pub(crate) rec: TaskRec,
    /// Its application.
    pub(crate) app: u64,
}

/// Everything behind a runtime's mutex.
pub(crate) struct State {
    /// The policy engine.
    pub(crate) engine: Engine,
    /// Registered threads by tid. Only looked up, never iterated for a
    /// decision.
    pub(crate) tasks: HashMap<u64, TaskRec, BuildHasherDefault<TidHasher>>,
    /// Decisions the engine appends to; reused so the hot path does not
    /// allocate a Vec per hint.
    pub(crate) decisions: Vec<Decision>,
    /// The second buffer `runtime/place.rs` swaps in while carrying out a batch.
    pub(crate) spare: Vec<Decision>,
    /// Counters (the fast-path ones live in the threads' slots).
    pub(crate) stats: RuntimeStats,
    /// Fast-path hints of threads that are no longer registered.
    pub(crate) retired_fast_hints: u64,
    /// The next application id; ids below it exist.
    pub(crate) next_app: u64,
    /// Threads of ours that the rules leave alone, by tid: registered with
    /// this runtime (their thread-local says so) but not in the engine.
    pub(crate) left_alone: HashMap<u64, LeftAlone, BuildHasherDefault<TidHasher>>,
    /// Registered and left-alone threads by `pthread_t`, for the rules'
    /// look-up on a rename (filled only when there are rules).
    pub(crate) pthreads: HashMap<u64, u64, BuildHasherDefault<TidHasher>>,
    /// The topology's CPUs that were online at the balancer's last look
    /// (`runtime/online.rs`); all of them at the start.
    pub(crate) online: CpuSet,
    /// Passes in a row that took the online CPUs from `/proc/stat` instead
    /// of reading the online file (`runtime/online.rs`, step 1).
    pub(crate) online_reads_skipped_in_a_row: u32,
    /// The link to dfsched's sched_ext scheduler while placements go there
    /// instead of to affinity masks (`crate::scx`); `None`: by affinity.
    pub(crate) scx: Option<crate::scx::ScxLink>,
    /// The engine log (`DFSCHED_ENGINE_LOG`), written here so that its
    /// order is the engine's; `None`: off.
    pub(crate) engine_log: Option<Box<crate::engine_log::EngineLog>>,
}

impl State {
    /// Feeds one event to the engine, its decisions appended to
    /// `self.decisions`: the one way events reach a runtime's engine, so
    /// that the engine log (when on) holds every one of them.
    #[inline]
    pub(crate) fn handle(&mut self, event: Event) -> Result<(), CoreError> {
        match self.engine_log.as_deref_mut() {
            None => self.engine.handle(event, &mut self.decisions),
            Some(log) => log.handle(&mut self.engine, event, &mut self.decisions),
        }
    }
}

impl State {
    /// The state of a runtime whose engine is `engine`, with no thread
    /// registered yet.
    pub(crate) fn new(engine: Engine) -> State {
        let engine_cpus = engine.topology().cpus().clone();
        State {
            engine,
            tasks: HashMap::default(),
            decisions: Vec::with_capacity(16),
            spare: Vec::with_capacity(16),
            stats: RuntimeStats::default(),
            retired_fast_hints: 0,
            next_app: 1,
            left_alone: HashMap::default(),
            pthreads: HashMap::default(),
            online: engine_cpus,
            online_reads_skipped_in_a_row: 0,
            scx: None,
            engine_log: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tid_hashes_spread_over_low_and_high_bits() {
        let hash = |tid: u64| {
            let mut h = TidHasher::default();
            h.write_u64(tid);
            h.finish()
        };
        // Consecutive tids (as the kernel hands them out) fill distinct
        // buckets of a 1024-bucket table, and the 7-bit tags HashMap keeps
        // from the top of the hash take many values.
        let tids = 4000..5024u64;
        let low: std::collections::BTreeSet<u64> = tids.clone().map(|t| hash(t) & 1023).collect();
        assert_eq!(low.len(), 1024);
        let tags: std::collections::BTreeSet<u64> = tids.map(|t| hash(t) >> 57).collect();
        assert!(tags.len() > 100, "only {} tags", tags.len());
    }
}
