//! One balancer pass over a runtime's state, as Linux's `lb_env` pass: the
//! pass's inputs are gathered beforehand as plain values (by
//! `runtime/pass.rs`, outside the state's mutex where they need I/O), and
//! the functions here only feed them to the engine and count. No thread,
//! clock, lock or system call here, so a pass runs in a unit test on a
//! [`State`] built from an engine.
//!
//! ```text
//!   runtime/pass.rs (the balancer thread, every balance_interval_ms)
//!   ┌──────────── sleep on the condvar (interval, or until shutdown) ◄─────┐
//!   ▼                                                                      │
//!   0. online CPUs (sysfs): changed → lock, every thread's allowed set    │
//!      reconciled with its stored mask ∩ online (runtime/online.rs)       │
//!      idle readings: each registered thread's CPU clock (idle.rs)        │
//!      lock → apply_idle: Block / Wake, tracks written back; unlock        │
//!   1. our load (lock) → the agent's view (link.rs, no lock held)          │
//!   2. the external sample: the view's unmanaged load, else our own       │
//!      signals, through the window (external.rs)                          │
//!   3. lock → balance: ExternalLoadMilli, the sharing set's home          │
//!      (Allowed), Balance { now } → decisions left in State::decisions     │
//!   4. carry them out (runtime/place.rs); if anything moved, report the    │
//!      new load to the agent at once ─────────────────────────────────────┘
//! ```
//!
//! Invariant: whatever the inputs, a pass leaves the engine's decisions in
//! `State::decisions` for the caller to carry out, and counts each input in
//! exactly one counter: a refused engine event is a `balance_errors`, a
//! failed sample an `external_load_errors`.

use crate::error::Error;
use crate::external::{Sample, Source};
use crate::idle::Outcome;
use crate::state::State;
use dfsched_core::{CpuId, CpuSet, Event, Nanos, TaskId};

/// Step 0's write-back, under the lock: each reading's track replaces the
/// record's if the record still has the track the reading started from (a
/// hint that woke the thread meanwhile, or a new thread with an exited
/// one's tid, is never overwritten), and its event goes to the engine. A
/// refused event keeps the old track, so that the engine and the record
/// agree.
pub(crate) fn apply_idle(st: &mut State, outcomes: Vec<Outcome>) {
    for o in outcomes {
        let Some(rec) = st.tasks.get_mut(&o.tid) else {
            continue;
        };
        if rec.idle != o.before {
            continue;
        }
        rec.idle = o.after;
        let Some(event) = o.event else {
            continue;
        };
        let blocking = matches!(event, Event::Block { .. });
        if st.handle(event).is_err() {
            if let Some(rec) = st.tasks.get_mut(&o.tid) {
                rec.idle = o.before;
            }
            st.stats.balance_errors += 1;
        } else if blocking {
            st.stats.idle_blocks += 1;
        } else {
            st.stats.idle_wakes += 1;
        }
    }
}

/// What a pass's locked step (3) takes, gathered beforehand.
#[derive(Debug)]
pub(crate) struct Inputs {
    /// The external-load sample, if the runtime samples (`None` with
    /// `DFSCHED_EXTERNAL_LOAD=0`), or the error that kept it from one.
    pub(crate) sample: Option<Result<Sample, Error>>,
    /// The allowed sets the agent's sharing-set home calls for (tid, set),
    /// from `Link::home_changes`.
    pub(crate) home: Vec<(u64, CpuSet)>,
    /// The runtime's age: the balancer's clock, for the record.
    pub(crate) now: Nanos,
}

/// What the locked step did, beyond the state it changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outcome3 {
    /// `Event::Allowed` of the home that reached the engine.
    pub(crate) allowed_events: u64,
    /// The engine's answer to `Event::Balance`.
    pub(crate) balance: Result<(), dfsched_core::CoreError>,
}

/// Step 3, under the lock: the sample (its CPUs outside `cpus`, the CPUs
/// the runtime places on, dropped), the home's allowed sets, then
/// `Event::Balance`. The decisions are left in `st.decisions`.
pub(crate) fn balance(st: &mut State, cpus: &CpuSet, inputs: Inputs) -> Outcome3 {
    match inputs.sample {
        Some(Ok(sample)) => external_sample(st, cpus, sample),
        Some(Err(_)) => st.stats.external_load_errors += 1,
        None => {}
    }
    let mut allowed_events = 0;
    for (tid, allowed) in inputs.home {
        // Never a CPU that was offline at the last look (`runtime/online.rs`).
        let allowed = match allowed.intersection(&st.online) {
            online if online.is_empty() => allowed,
            online => online,
        };
        match st.handle(Event::Allowed {
            task: TaskId(tid),
            allowed,
        }) {
            Ok(()) => allowed_events += 1,
            Err(e) => tracing::debug!(tid, error = %e, "dfsched: agent home not applied"),
        }
    }
    let balance = st.handle(Event::Balance { now: inputs.now });
    match balance {
        // The engine counts the passes it ran (`balance_passes`).
        Ok(()) => {}
        Err(_) => st.stats.balance_errors += 1,
    }
    Outcome3 {
        allowed_events,
        balance,
    }
}

/// The external sample into the counters and the engine.
fn external_sample(st: &mut State, cpus: &CpuSet, sample: Sample) {
    let ours = |cpu: &CpuId| cpus.contains(*cpu);
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
        st.stats.balance_errors += 1;
    }
}

/// Our own runnable threads' load per CPU: the engine's load less the
/// external load it was given, CPUs with none left out.
pub(crate) fn own_shares(load: &[(CpuId, u64)], external: &[(CpuId, u64)]) -> Vec<(CpuId, u64)> {
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

/// Moves so far: the engine's group moves, splits and thread moves, and
/// every placement made besides, since a co-thread group re-homed by the
/// home rule (the pass's step 0) moves without a `GroupMoved` — and it is
/// those re-homings that other processes must hear of at once
/// (`runtime/pass.rs`, "Phase").
pub(crate) fn moves(st: &State) -> u64 {
    let e = st.engine.stats();
    e.group_moves + e.splits + e.task_moves + st.stats.affinity_calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idle::Track;
    use crate::state::TaskRec;
    use crate::thread::FastCounter;
    use dfsched_core::{AppId, Config, Decision, DfId, Engine, Topology};
    use std::sync::Arc;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// A runtime's state on `cpus` CPUs (one LLC) with `tasks` registered
    /// threads (tids 1…) that hinted DF 1, their decisions cleared.
    fn state(cpus: u32, tasks: u64) -> State {
        let topo = Topology::test(1, 1, cpus, 1);
        let mut st = State::new(Engine::new(topo.clone(), Config::default()).unwrap());
        for tid in 1..=tasks {
            let task = TaskId(tid);
            st.handle(Event::TaskNew {
                task,
                app: AppId(0),
                allowed: topo.cpus().clone(),
                cpu: None,
            })
            .unwrap();
            st.handle(Event::Hint {
                task,
                app: AppId(0),
                cur: None,
                next: Some(DfId(1)),
            })
            .unwrap();
            st.tasks.insert(
                tid,
                TaskRec {
                    fast: Arc::new(FastCounter::default()),
                    last_set: topo.cpus().clone(),
                    allowed: topo.cpus().clone(),
                    stale: false,
                    idle: Track::default(),
                    lent: None,
                    pthread: 0,
                    rule_df: false,
                },
            );
        }
        st.decisions.clear();
        st
    }

    fn sample(load_milli: Vec<(CpuId, u64)>) -> Sample {
        Sample {
            counted: load_milli
                .iter()
                .map(|&(c, m)| (c, (m / 1000) as u32))
                .collect(),
            load_milli,
            source: Source::OwnScan,
            files: 3,
            refreshed: true,
        }
    }

    fn inputs(sample: Option<Result<Sample, Error>>) -> Inputs {
        Inputs {
            sample,
            home: Vec::new(),
            now: Nanos(1),
        }
    }

    #[test]
    fn a_pass_counts_its_sample_and_leaves_the_moves_to_the_caller() {
        // Two threads of one DF on 2 CPUs, under heavy outside load on
        // CPU 0: the group's home is re-evaluated by the sample and the pass.
        let mut st = state(2, 2);
        let cpus = set("0-1");
        let out = balance(
            &mut st,
            &cpus,
            inputs(Some(Ok(sample(vec![(CpuId(0), 5000), (CpuId(7), 9000)])))),
        );
        assert_eq!(out.balance, Ok(()));
        assert_eq!(st.engine.stats().balance_passes, 1);
        assert_eq!(st.stats.external_load_samples, 1);
        assert_eq!(st.stats.external_load_own_scans, 1);
        assert_eq!(st.stats.external_files_read, 3);
        assert_eq!(st.stats.external_refreshes, 1);
        // CPU 7 is not ours: dropped before the engine and the counters.
        assert_eq!(st.stats.external_load_per_cpu_milli, vec![(CpuId(0), 5000)]);
        assert_eq!(st.stats.external_load_milli, 5000);
        assert_eq!(st.stats.external_runnable, 5);
        assert_eq!(st.stats.balance_errors, 0);
        // The engine has the sample: its load on CPU 0 holds it.
        let load = st.engine.load_milli();
        assert!(load[0].1 >= 5000, "{load:?}");
        // Nothing was carried out here: any move is a decision left over.
        assert_eq!(st.stats.affinity_calls, 0);
    }

    #[test]
    fn a_failed_sample_is_counted_and_the_pass_goes_on() {
        let mut st = state(2, 1);
        let err = Error::Internal("no /proc".into());
        let out = balance(&mut st, &set("0-1"), inputs(Some(Err(err))));
        assert_eq!(out.balance, Ok(()));
        assert_eq!(st.stats.external_load_errors, 1);
        assert_eq!(st.stats.external_load_samples, 0);
        assert_eq!(st.engine.stats().balance_passes, 1);
        let none = balance(&mut st, &set("0-1"), inputs(None));
        assert_eq!(none.balance, Ok(()));
        assert_eq!(st.stats.external_load_errors, 1);
        assert_eq!(st.engine.stats().balance_passes, 2);
    }

    #[test]
    fn the_homes_allowed_sets_reach_the_engine_and_unknown_threads_are_skipped() {
        let mut st = state(2, 2);
        let mut pass = inputs(None);
        pass.home = vec![(1, set("1")), (2, set("1")), (99, set("1"))];
        let out = balance(&mut st, &set("0-1"), pass);
        assert_eq!(out.allowed_events, 2, "tid 99 is unknown to the engine");
        for tid in [1, 2] {
            let view = st.engine.task(TaskId(tid)).unwrap();
            assert_eq!(view.allowed, set("1"));
        }
        // Their placement on CPU 1 is left for the caller.
        assert!(st
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::Place { cpus, .. } if *cpus == set("1"))));
    }

    #[test]
    fn idle_outcomes_block_and_wake_and_never_overwrite_a_newer_track() {
        let mut st = state(2, 3);
        let idle_track = {
            let mut t = Track::default();
            t.block();
            t
        };
        let outcomes = vec![
            Outcome {
                tid: 1,
                before: Track::default(),
                after: idle_track,
                event: Some(Event::Block { task: TaskId(1) }),
            },
            // Thread 2's record changed since its reading (a hint woke it):
            // the reading is dropped.
            Outcome {
                tid: 2,
                before: idle_track,
                after: Track::default(),
                event: Some(Event::Wake { task: TaskId(2) }),
            },
            // A thread that exited since.
            Outcome {
                tid: 42,
                before: Track::default(),
                after: idle_track,
                event: Some(Event::Block { task: TaskId(42) }),
            },
        ];
        apply_idle(&mut st, outcomes);
        assert_eq!(st.stats.idle_blocks, 1);
        assert_eq!(st.stats.idle_wakes, 0);
        assert!(st.tasks[&1].idle.blocked);
        assert!(!st.engine.task(TaskId(1)).unwrap().runnable);
        assert!(!st.tasks[&2].idle.blocked);
        assert!(st.engine.task(TaskId(2)).unwrap().runnable);
        // Woken by its next reading.
        apply_idle(
            &mut st,
            vec![Outcome {
                tid: 1,
                before: idle_track,
                after: Track::default(),
                event: Some(Event::Wake { task: TaskId(1) }),
            }],
        );
        assert_eq!(st.stats.idle_wakes, 1);
        assert!(st.engine.task(TaskId(1)).unwrap().runnable);
    }

    #[test]
    fn a_refused_idle_event_keeps_the_old_track() {
        let mut st = state(2, 1);
        // A record the engine does not know (it can only come from a bug):
        // the engine refuses its Block, and the record must not claim it.
        let rec = TaskRec {
            fast: Arc::new(FastCounter::default()),
            last_set: set("0-1"),
            allowed: set("0-1"),
            stale: false,
            idle: Track::default(),
            lent: None,
            pthread: 0,
            rule_df: false,
        };
        st.tasks.insert(77, rec);
        let before = Track::default();
        let mut after = Track::default();
        after.block();
        apply_idle(
            &mut st,
            vec![Outcome {
                tid: 77,
                before,
                after,
                event: Some(Event::Block { task: TaskId(77) }),
            }],
        );
        assert_eq!(st.tasks[&77].idle, before);
        assert_eq!(st.stats.balance_errors, 1);
        assert_eq!(st.stats.idle_blocks, 0);
    }

    #[test]
    fn our_shares_are_the_engines_load_less_the_external_load() {
        let load = [(CpuId(0), 3500), (CpuId(1), 500), (CpuId(2), 0)];
        let external = [(CpuId(0), 1500), (CpuId(1), 500)];
        assert_eq!(own_shares(&load, &external), vec![(CpuId(0), 2000)]);
        assert_eq!(own_shares(&load[..2], &[]), load[..2].to_vec());
    }
}
