//! The runtime's counters, as a typed struct with one description per field.
//! They are what the hot path records instead of logging.
//!
//! All counters count since the runtime started and only grow, except
//! `threads_active`, `threads_idle`, `external_runnable`,
//! `external_load_milli` and `external_load_per_cpu_milli`, which are
//! current values.
//! Counters are kept under the runtime's one mutex, except the fast-path
//! hint count, which each thread keeps in its own slot (see `thread.rs`) so
//! that a repeated hint touches no shared cache line.

use crate::error::{code, Error};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// Threads whose attach failed under `LD_PRELOAD` (dfsched could not start,
/// or could not place them): they ran unplaced. Process-wide, since the
/// threads of a preloaded program belong to no runtime until attached.
static PRELOAD_ATTACH_FAILURES: AtomicU64 = AtomicU64::new(0);

/// [`RuntimeStats::preload_attach_failures`]: threads that ran unplaced
/// because attaching them under `LD_PRELOAD` failed, in this process.
pub fn preload_attach_failures() -> u64 {
    // A counter read for a report: no ordering with other memory needed.
    PRELOAD_ATTACH_FAILURES.load(Ordering::Relaxed)
}

/// Counts one thread whose attach failed (the `pthread_create` hook).
pub(crate) fn count_preload_attach_failure() {
    PRELOAD_ATTACH_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// How many recent passes [`RecentPasses`] keeps: at the default 100 ms
/// interval, the last 25.6 s.
pub const RECENT_PASSES: usize = 256;

/// The CPU time of the most recent balancer passes, one sample per pass, so
/// that a benchmark can give a pass's median, p99 and maximum instead of
/// only the mean `balance_cpu_ns / engine.balance_passes`. Bounded: it keeps the
/// last [`RECENT_PASSES`] and forgets older ones. JSON: `{"recorded": N,
/// "cpu_ns": [oldest, …, newest]}`; the samples of the passes after a
/// reading with `recorded = r0` are the last `recorded − r0` entries (all
/// of them if more than [`RECENT_PASSES`] passed: the oldest are lost).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecentPasses {
    /// Passes recorded since the runtime started (kept or forgotten).
    pub recorded: u64,
    /// The CPU time of each of the last ≤ [`RECENT_PASSES`] passes, in
    /// nanoseconds (the same clock as `balance_cpu_ns`), oldest first.
    pub cpu_ns: VecDeque<u64>,
}

impl RecentPasses {
    /// Records one pass's CPU time, forgetting the oldest beyond
    /// [`RECENT_PASSES`].
    pub(crate) fn record(&mut self, cpu_ns: u64) {
        if self.cpu_ns.len() == RECENT_PASSES {
            self.cpu_ns.pop_front();
        }
        self.cpu_ns.push_back(cpu_ns);
        self.recorded += 1;
    }

    /// The samples of the passes recorded after a reading that showed
    /// `recorded_before`, oldest first (fewer if some were forgotten).
    pub fn since(&self, recorded_before: u64) -> Vec<u64> {
        let n = self.recorded.saturating_sub(recorded_before);
        let n = usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(self.cpu_ns.len());
        self.cpu_ns
            .iter()
            .skip(self.cpu_ns.len() - n)
            .copied()
            .collect()
    }
}

/// Why `sched_setaffinity` failed, by errno.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlacementFailures {
    /// `ESRCH`: the thread was gone; dfsched dropped it (`Exit`).
    pub esrch: u64,
    /// `EPERM`: not allowed to move it; it stays where it is.
    pub eperm: u64,
    /// `EINVAL`: the CPUs were refused (a cpuset changed); dfsched re-read
    /// the thread's allowed CPUs and retried once.
    pub einval: u64,
    /// Any other errno.
    pub other: u64,
}

impl PlacementFailures {
    pub(crate) fn record(&mut self, errno: Option<i32>) {
        match errno {
            Some(libc::ESRCH) => self.esrch += 1,
            Some(libc::EPERM) => self.eperm += 1,
            Some(libc::EINVAL) => self.einval += 1,
            _ => self.other += 1,
        }
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        self.esrch + self.eperm + self.einval + self.other
    }
}

/// Hints refused, by reason. A refused hint leaves the thread where it was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefusedHints {
    /// The application was never created.
    pub unknown_app: u64,
    /// The thread belongs to another application.
    pub wrong_app: u64,
    /// The hint's current DF was not the thread's.
    pub not_in_df: u64,
    /// The thread's allowed CPUs hold no CPU of the topology.
    pub no_cpu: u64,
    /// The runtime was shut down.
    pub shut_down: u64,
    /// The calling thread was exiting.
    pub thread_exiting: u64,
    /// Any other reason (see `dfsched_last_error` / the returned error).
    pub other: u64,
}

impl RefusedHints {
    pub(crate) fn record(&mut self, err: &Error) {
        match err.code() {
            code::E_UNKNOWN_APP => self.unknown_app += 1,
            code::E_WRONG_APP => self.wrong_app += 1,
            code::E_NOT_IN_DF => self.not_in_df += 1,
            code::E_NO_CPU => self.no_cpu += 1,
            code::E_SHUT_DOWN => self.shut_down += 1,
            code::E_THREAD_EXITING => self.thread_exiting += 1,
            _ => self.other += 1,
        }
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.unknown_app
            + self.wrong_app
            + self.not_in_df
            + self.no_cpu
            + self.shut_down
            + self.thread_exiting
            + self.other
    }
}

/// What a runtime did since it started. Serializes to the JSON of
/// `dfsched_stats_json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RuntimeStats {
    /// Whether dfsched is on (false under `DFSCHED_DISABLE=1`: nothing else
    /// moves then).
    pub enabled: bool,
    /// Whether [`crate::Runtime::shutdown`] was called.
    pub shut_down: bool,
    /// Hint calls (`hint`, `enter`, `leave`), including refused ones and
    /// fast-path ones (the engine's `hints` counts the hints it took).
    pub hint_calls: u64,
    /// Hints that repeated the thread's DF and returned at once, with no
    /// lock and no system call.
    pub fast_hints: u64,
    /// Threads registered (on their first hint or attach).
    pub threads_registered: u64,
    /// Threads registered by [`crate::Runtime::attach`] (and, under
    /// `LD_PRELOAD`, at their creation) rather than by a hint.
    pub threads_attached: u64,
    /// DFs given to threads by a rule on their name (`DFSCHED_RULES`; see
    /// [`crate::rules`]).
    pub rule_dfs: u64,
    /// Threads a rule left alone: taken out of the engine, their allowed
    /// CPUs given back.
    pub rule_left_alone: u64,
    /// Registered threads whose exit dfsched noticed (thread-local drop).
    pub threads_exited: u64,
    /// Registered threads found gone when placing them (`ESRCH`) and
    /// dropped.
    pub threads_gone: u64,
    /// Threads registered now.
    pub threads_active: u64,
    /// Of those, the ones the idle step has blocked now (not counted as
    /// load; see [`crate::idle`]).
    pub threads_idle: u64,
    /// Applications created (application 0 always exists and is not
    /// counted).
    pub apps_created: u64,
    /// Successful `sched_setaffinity` calls (the engine's `placements`
    /// counts the placements it decided).
    pub affinity_calls: u64,
    /// The body that carries out placements now: `"affinity"`
    /// (`sched_setaffinity`) or `"scx"` (dfsched's sched_ext scheduler,
    /// [`crate::scx`]); the same as `scx_body`, by name.
    pub body: crate::scx::Body,
    /// Whether placements go to dfsched's sched_ext scheduler (the scx
    /// body, [`crate::scx`]) rather than to affinity masks, now.
    pub scx_body: bool,
    /// Placements and group ends carried out through the sched_ext
    /// scheduler's socket.
    pub scx_placements: u64,
    /// Failures of the scx body (the socket unreachable at start, a request
    /// refused or timed out, `SCHED_EXT` refused): each ends the body for
    /// this runtime, which then places by affinity.
    pub scx_failures: u64,
    /// Whether the policy was taken from the sched_ext scheduler's offer
    /// (`dfsched scx --policy`; see [`crate::RuntimeConfig::scx_policy`]).
    pub scx_policy: bool,
    /// Failed `sched_setaffinity` calls, by errno.
    pub affinity_failures: PlacementFailures,
    /// Times a thread's allowed CPUs were found changed by someone else
    /// (taskset, a cpuset) and the engine was told (`Event::Allowed`).
    pub allowed_changes: u64,
    /// Balancer passes that found the online CPUs changed (CPU hotplug)
    /// and reconciled every thread's allowed set (`runtime/online.rs`).
    pub online_changes: u64,
    /// Threads whose allowed set the engine was given anew because CPUs
    /// went offline or came back (their mask itself unchanged).
    pub online_allowed_changes: u64,
    /// Passes that could not read `sys/devices/system/cpu/online`.
    pub online_read_errors: u64,
    /// Passes that did not read `sys/devices/system/cpu/online` because
    /// the previous pass's `/proc/stat` listed the online CPUs already held
    /// (`runtime/online.rs`, step 1).
    pub online_reads_skipped: u64,
    /// Calls refused, by reason (the engine's `refused` counts the events
    /// it refused).
    pub refused_calls: RefusedHints,
    /// Engine events of the balancer's passes that the engine refused
    /// (should stay 0; the passes run are the engine's `balance_passes`,
    /// and its group moves, splits and thread moves are the engine's
    /// counters too).
    pub balance_errors: u64,
    /// CPU time the balancer passes took, in nanoseconds (the thread that
    /// ran each pass, by its own CPU clock): with the engine's
    /// `balance_passes`, the cost of a pass.
    pub balance_cpu_ns: u64,
    /// The same per pass, for the most recent passes (bounded; see
    /// [`RecentPasses`]).
    pub recent_pass_cpu_ns: RecentPasses,
    /// `Event::Block`s sent: a thread used no CPU over the idle window
    /// (`DFSCHED_IDLE_PASSES`; see [`crate::idle`]).
    pub idle_blocks: u64,
    /// `Event::Wake`s sent: a blocked thread used CPU again (seen by a
    /// pass) or called the runtime (a hint).
    pub idle_wakes: u64,
    /// Of `balance_cpu_ns`, the idle step's share (reading the threads'
    /// CPU clocks, and their state when one looks idle).
    pub idle_cpu_ns: u64,
    /// External-load samples given to the engine (one per pass with
    /// `external_load` on): `external_load_agent_samples +
    /// external_load_own_scans`.
    pub external_load_samples: u64,
    /// Samples whose unmanaged load came from the agent's shared sample:
    /// this runtime read nothing for it.
    pub external_load_agent_samples: u64,
    /// Samples this runtime took itself from its own signals (no agent, or
    /// its view carried no sample; see [`crate::signals`]).
    pub external_load_own_scans: u64,
    /// Files (and directories) the own samples opened: one (`/proc/stat`)
    /// a pass, plus the refresh's budgeted per-thread look now and then
    /// (`procfs/refresh.rs`). With `external_load_own_scans`, what a pass
    /// reads; it does not grow with the threads on the machine.
    pub external_files_read: u64,
    /// Refresh sweeps (the per-thread look that weighs the outside load by
    /// CFS group) finished by the own samples.
    pub external_refreshes: u64,
    /// External-load samples that failed (the pass ran without one).
    pub external_load_errors: u64,
    /// Runnable threads of processes not under dfsched on our CPUs in the
    /// last sample, unweighed (the signals' estimate, before the CFS-group
    /// weighing and the window; the other dfsched processes' load not
    /// included).
    pub external_runnable: u64,
    /// The external load the engine got at the last pass, summed over our
    /// CPUs, in thousandths of one of our threads: the unmanaged load weighed
    /// by CFS group and damped by the window, plus the other dfsched
    /// processes' reported load.
    pub external_load_milli: u64,
    /// The same per CPU, `(cpu, thousandths)` in CPU order, CPUs with none
    /// left out.
    pub external_load_per_cpu_milli: Vec<(dfsched_core::CpuId, u64)>,
    /// Calls starting a program (`posix_spawn`, `posix_spawnp`, `system`,
    /// `popen`, under `LD_PRELOAD`) made by a thread dfsched had placed,
    /// which ran with the thread's allowed CPUs so that the program got
    /// them (see `runtime/spawn.rs`).
    pub spawn_lends: u64,
    /// Passes of the `smt-pair` policy (`DFSCHED_POLICY=smt-pair`,
    /// `runtime/smt.rs`): each replaces the engine's balance, so the
    /// engine's `balance_passes` stays 0 under it.
    pub smt_pair_passes: u64,
    /// Placements those passes asked for: a thread put on a CPU other than
    /// its mask (a thread whose CPU did not change is not touched again;
    /// one that could not be placed counts here and in
    /// `affinity_failures`).
    pub smt_pair_moves: u64,
    /// Threads a pass left where they were because their planned CPU is
    /// outside their allowed CPUs (the program or the admin narrowed them).
    pub smt_pair_not_allowed: u64,
    /// Threads of this process that ran unplaced because attaching them
    /// under `LD_PRELOAD` failed (process-wide, not per runtime).
    pub preload_attach_failures: u64,
    /// The engine's own counters.
    pub engine: dfsched_core::Stats,
    /// The recording (`DFSCHED_RECORD`), if one is made: its file, events
    /// written, events dropped because the buffer was full, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<crate::record::RecordStats>,
    /// The engine log (`DFSCHED_ENGINE_LOG`), if one is written: its file,
    /// steps and bytes written, whether it was cut at its limit, the steps
    /// it does not hold, write errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_log: Option<crate::engine_log::EngineLogStats>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AffinityOp;

    #[test]
    fn failures_and_refusals_land_in_their_buckets() {
        let mut f = PlacementFailures::default();
        for errno in [libc::ESRCH, libc::EPERM, libc::EINVAL, libc::EFAULT] {
            f.record(Some(errno));
        }
        f.record(None);
        assert_eq!((f.esrch, f.eperm, f.einval, f.other), (1, 1, 1, 2));
        assert_eq!(f.total(), 5);

        let mut r = RefusedHints::default();
        r.record(&Error::ShutDown);
        r.record(&Error::ThreadExiting);
        r.record(&Error::Affinity {
            op: AffinityOp::Set,
            tid: 1,
            errno: libc::EPERM,
        });
        r.record(&Error::from(dfsched_core::CoreError::UnknownApp(
            dfsched_core::AppId(3),
        )));
        assert_eq!(
            (r.shut_down, r.thread_exiting, r.other, r.unknown_app),
            (1, 1, 1, 1)
        );
        assert_eq!(r.total(), 4);
    }

    #[test]
    fn recent_passes_keep_the_last_ones_in_order_and_count_all() {
        let mut r = RecentPasses::default();
        assert_eq!(r.since(0), Vec::<u64>::new());
        for ns in 1..=3 {
            r.record(ns);
        }
        assert_eq!(r.since(0), [1, 2, 3]);
        assert_eq!(r.since(1), [2, 3]);
        assert_eq!(r.since(3), Vec::<u64>::new());
        for ns in 4..=(RECENT_PASSES as u64 + 10) {
            r.record(ns);
        }
        assert_eq!(r.recorded, RECENT_PASSES as u64 + 10);
        assert_eq!(r.cpu_ns.len(), RECENT_PASSES, "bounded");
        assert_eq!(r.cpu_ns.front(), Some(&11), "the oldest forgotten first");
        // Asked for more than it kept: all it has.
        assert_eq!(r.since(0).len(), RECENT_PASSES);
        assert_eq!(
            r.since(r.recorded - 2),
            [RECENT_PASSES as u64 + 9, RECENT_PASSES as u64 + 10]
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["recorded"], RECENT_PASSES as u64 + 10);
        assert_eq!(json["cpu_ns"].as_array().unwrap().len(), RECENT_PASSES);
    }

    #[test]
    fn stats_serialize_with_every_documented_key() {
        let json = serde_json::to_value(RuntimeStats::default()).unwrap();
        for key in [
            "hint_calls",
            "fast_hints",
            "affinity_calls",
            "body",
            "scx_body",
            "scx_placements",
            "scx_failures",
            "scx_policy",
            "balance_errors",
            "balance_cpu_ns",
            "recent_pass_cpu_ns",
            "idle_blocks",
            "idle_wakes",
            "idle_cpu_ns",
            "threads_idle",
            "spawn_lends",
            "smt_pair_passes",
            "smt_pair_moves",
            "smt_pair_not_allowed",
            "external_load_agent_samples",
            "external_load_own_scans",
            "external_files_read",
            "external_refreshes",
            "online_reads_skipped",
            "external_runnable",
            "external_load_milli",
            "external_load_per_cpu_milli",
            "affinity_failures",
            "refused_calls",
            "engine",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert!(json["affinity_failures"].get("eperm").is_some());
        assert!(json["refused_calls"].get("not_in_df").is_some());
        // One set of names: what the engine counts is only under `engine`,
        // and no top-level key repeats one of the engine's under another
        // name or means something else under the same one.
        for key in [
            "balance_passes",
            "group_moves",
            "task_moves",
            "splits",
            "hints",
            "placements",
            "refused",
        ] {
            assert!(json.get(key).is_none(), "{key} repeated at the top level");
            assert!(json["engine"].get(key).is_some(), "engine.{key} missing");
        }
        for key in ["balancer_passes", "balancer_errors", "balancer_cpu_ns"] {
            assert!(json.get(key).is_none(), "{key}: the old name");
        }
    }
}
