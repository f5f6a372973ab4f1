//! The external load a balancer pass gives the engine
//! (`Event::ExternalLoadMilli`): the load of threads that are not this
//! runtime's, per CPU in thousandths of one of our threads, in two parts
//! treated differently.
//!
//! ```text
//!   unmanaged: processes not under dfsched        others: dfsched processes
//!   (the agent's shared sample, else our own       (the agent's view: what each
//!    signals: /proc/stat less our own CPU time      one reported of its load)
//!    and threads, weighed by CFS group through              │
//!    the rare refresh; signals.rs)                          │
//!        │                                                 │
//!        ▼                                                 │
//!   SustainedWindow: per CPU, the minimum                  │
//!   over the last K samples (K = DFSCHED_EXTERNAL_WINDOW)  │
//!        └──────────────────────── + ──────────────────────┘
//!                                  ▼
//!                  Event::ExternalLoadMilli { load_milli }
//! ```
//!
//! # The unmanaged part: signals, weighed
//!
//! Each pass reads one file, `/proc/stat`: its cost is O(CPUs + our own
//! threads), whatever runs beside us (the rule, and what it gets wrong:
//! [`crate::signals`]). How much an outside thread weighs against ours is
//! CFS's group arithmetic ([`crate::weigh`]): 30 runnable threads of a
//! build in another terminal weigh about half a nice-0 thread per CPU on 2
//! CPUs, not 15, and counting them made the co-thread policy pack a small
//! program onto one CPU for nothing. That needs each runnable thread's
//! process group, so it comes from a rare, budgeted per-thread refresh
//! (`procfs/refresh.rs`: at most one sweep every 2 s, 1 ms a pass), and
//! the signals scale it: load that goes away is dropped at the next busy
//! window, lasting load is seen however old the refresh. The agent does the
//! same for all its clients, weighing per client (`View::unmanaged_milli`).
//! An agent that sends only whole threads (an older one) is taken at 1000
//! per thread.
//!
//! # Why only the unmanaged part is damped
//!
//! The unmanaged estimate rests on an instant (`procs_running`) and on 100
//! ms of busy time. For a process not under dfsched that says little about
//! the next 100 ms: a build's compiler jobs, a shell's commands, a daemon
//! waking up are runnable for milliseconds at a time. Taken at face value,
//! a 2-thread process on a 2-CPU machine that happens to sample two of
//! them decides the machine is heavily loaded and packs itself onto one
//! CPU, halving its own throughput (measured: 0.92–1.10 s against
//! vanilla's 0.60–0.69 s for two independent spinning threads under
//! `co-thread`). So the unmanaged load enters as its per-CPU *minimum* over
//! the last K samples (in thousandths, after weighing): a CPU carries only
//! the load that was there at each of the last K passes. Load that lasts
//! is seen on the K-th pass (≈ 300 ms at the defaults); load that goes away
//! is dropped at the first sample without it, since the minimum includes
//! the latest sample. Before K samples exist, the missing ones count as
//! empty: load present from the start is seen on the K-th pass too.
//!
//! The other dfsched processes' load is not a snapshot: it is what their
//! engines *placed* — each registered runnable thread's share of its
//! target CPUs, reported by the process itself — and it stays where it is
//! until their balancer moves it. It is also exactly the load those engines
//! balance against. Damping it would hide a process's move from the others
//! for K passes, so that two engines would both pick the CPU that just
//! looked free and pile their groups onto it, which is what the shared view
//! exists to prevent. So it is added as reported, every pass (and, when
//! our own signals stand in for the agent's sample, taken off their busy
//! time and runnable count, so that it is not counted twice).

use crate::agent::link::AgentPass;
use crate::error::Error;
use crate::procfs::{clock_ticks_per_sec, Refresh, Stepped, DEFAULT_REFRESH_MS, REFRESH_BUDGET_US};
use crate::signals::{self, BusyTracker, Estimate, SustainedWindow, WeighGate};
use crate::weigh::Unseen;
use dfsched_core::{CpuId, CpuSet};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The most of our threads whose last CPU a pass reads from `/proc` (those
/// targeted at several CPUs that used CPU): bounds the pass's files when we
/// have many threads.
pub const MAX_WHERE_READS: usize = 64;

/// Where a pass's unmanaged load came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The agent's shared sample, carried by its view.
    Agent,
    /// This runtime's own signals (no agent, or one that could not give a
    /// sample).
    OwnScan,
}

/// One pass's external load, ready for `Event::ExternalLoadMilli`.
#[derive(Debug)]
pub(crate) struct Sample {
    /// The damped, weighed unmanaged load plus the others' load, per CPU in
    /// thousandths.
    pub(crate) load_milli: Vec<(CpuId, u64)>,
    /// The unmanaged runnable threads of this sample, unweighed, per CPU
    /// (before the window; `signals.rs`'s `threads_c`, rounded).
    pub(crate) counted: Vec<(CpuId, u32)>,
    /// Where the unmanaged part came from.
    pub(crate) source: Source,
    /// Files this pass opened for it (none when the agent gave the sample).
    pub(crate) files: u64,
    /// Whether a refresh sweep finished in this pass.
    pub(crate) refreshed: bool,
}

/// The runtime's external-load source: its own signals and refresh (for
/// when the agent gives no sample) and the window.
#[derive(Debug)]
pub(crate) struct External {
    refresh: Refresh,
    busy: BusyTracker,
    window: SustainedWindow,
    /// Whether the refresh should sweep: the same window over the
    /// unweighed signals (`signals::WeighGate`).
    gate: WeighGate,
    /// Our runnable threads' load per CPU at the end of the last pass (in
    /// thousandths): how many of the machine's runnable threads are ours.
    own_shares: Vec<(CpuId, u64)>,
    /// Our registered threads and where the engine targets them, at the end
    /// of the last pass: where our CPU time of the next window is attributed.
    own_threads: Vec<(u64, CpuSet)>,
    /// Each of those threads' CPU clock at the last own sample.
    thread_ns: HashMap<u64, u64>,
    /// Our process's CPU clock at the last own sample.
    own_cpu_ns: Option<u64>,
    /// The refresh's threads weighed against ours (thousandths, threads),
    /// the rule for the ones it did not see, and the refresh generation
    /// they were computed from.
    weight: Option<(u64, (u64, u64), Unseen)>,
    /// The CPUs the last `/proc/stat` read listed (the online ones), until
    /// taken by the next pass's online step (`runtime/online.rs`).
    stat_cpus: Option<CpuSet>,
    started: Instant,
}

impl External {
    pub(crate) fn new(proc_root: &str, window: u32) -> External {
        External {
            refresh: Refresh::new(
                proc_root,
                Duration::from_millis(DEFAULT_REFRESH_MS),
                Duration::from_micros(REFRESH_BUDGET_US),
            ),
            busy: BusyTracker::new(clock_ticks_per_sec()),
            window: SustainedWindow::new(window),
            gate: WeighGate::new(window),
            own_shares: Vec::new(),
            own_threads: Vec::new(),
            thread_ns: HashMap::new(),
            own_cpu_ns: None,
            weight: None,
            stat_cpus: None,
            started: Instant::now(),
        }
    }

    /// The CPUs the last sample's `/proc/stat` read listed, if a sample
    /// since the last call read it (its own signals, not the agent's):
    /// the kernel lists exactly the CPUs online there.
    pub(crate) fn take_stat_cpus(&mut self) -> Option<CpuSet> {
        self.stat_cpus.take()
    }

    /// Our runnable threads' load per CPU after a pass (in thousandths),
    /// and our registered threads with their targets: the next own sample
    /// leaves that many threads out of the machine's runnable count and
    /// attributes our CPU time to where the threads are.
    pub(crate) fn set_own(&mut self, shares: Vec<(CpuId, u64)>, threads: Vec<(u64, CpuSet)>) {
        self.own_shares = shares;
        self.own_threads = threads;
    }

    /// Our CPU time since the last own sample, per CPU: each registered
    /// thread's (its CPU clock) on its target CPU if it has one, else on the
    /// CPU its `stat` says it last ran on (one file, for at most
    /// [`MAX_WHERE_READS`] threads a pass; past that, spread over its
    /// target), and the rest (unregistered threads: this pass, the
    /// program's own) on the CPU this pass runs on.
    fn own_since(&mut self, own_pid: u32) -> Vec<(CpuId, u64)> {
        let cpu_ns = crate::sys::process_cpu_ns();
        let total = self
            .own_cpu_ns
            .replace(cpu_ns)
            .map_or(0, |before| cpu_ns.saturating_sub(before));
        let mut out: BTreeMap<CpuId, u64> = BTreeMap::new();
        let mut placed = 0u64;
        let mut reads = 0;
        let mut now_ns = HashMap::with_capacity(self.own_threads.len());
        for (tid, target) in &self.own_threads {
            let Ok(ns) = crate::sys::thread_cpu_ns(*tid) else {
                continue;
            };
            now_ns.insert(*tid, ns);
            let delta = self
                .thread_ns
                .get(tid)
                .map_or(0, |&before| ns.saturating_sub(before));
            if delta == 0 {
                continue;
            }
            placed += delta;
            let ran_on = match target.first() {
                Some(only) if target.len() == 1 => Some(only),
                _ if reads < MAX_WHERE_READS => {
                    reads += 1;
                    self.refresh.sampler().thread_last_cpu(own_pid, *tid)
                }
                _ => None,
            };
            match ran_on {
                Some(cpu) => *out.entry(cpu).or_default() += delta,
                None => {
                    let shares: Vec<(CpuId, u64)> = target.iter().map(|c| (c, 1)).collect();
                    for (cpu, ns) in signals::attribute(delta, &shares) {
                        *out.entry(cpu).or_default() += ns;
                    }
                }
            }
        }
        self.thread_ns = now_ns;
        if let Some(cpu) = crate::sys::current_cpu() {
            *out.entry(cpu).or_default() += total.saturating_sub(placed);
        }
        out.into_iter().filter(|&(_, ns)| ns > 0).collect()
    }

    /// This pass's external load: the unmanaged part from `agent`'s view if
    /// it carries one, else from our own signals (`signals.rs`: `/proc/stat`
    /// less our own CPU time and threads, and the other dfsched processes'
    /// load the view carries), weighed by the refresh against `own_pid`'s
    /// CFS group; damped by the window; the others' load added as it is.
    /// Fails only if our own `/proc/stat` could not be read (the window is
    /// then left as it was).
    pub(crate) fn sample(&mut self, own_pid: u32, agent: &AgentPass) -> Result<Sample, Error> {
        let files_before = self.refresh.files_opened();
        let (est, source, refreshed) = match agent.unmanaged() {
            Some(u) => (
                Estimate {
                    milli: u.milli,
                    counted: u.counted,
                },
                Source::Agent,
                false,
            ),
            None => {
                let (est, refreshed) = self.own_signals(own_pid, agent)?;
                (est, Source::OwnScan, refreshed)
            }
        };
        let unmanaged = self.window.push(&est.milli);
        Ok(Sample {
            load_milli: agent.add_others(unmanaged),
            counted: est.counted,
            source,
            files: self.refresh.files_opened() - files_before,
            refreshed,
        })
    }

    /// The unmanaged load from our own signals; whether a refresh finished.
    fn own_signals(&mut self, own_pid: u32, agent: &AgentPass) -> Result<(Estimate, bool), Error> {
        let stat = self.refresh.sampler().cpu_stat()?;
        self.stat_cpus = Some(stat.busy_ticks.iter().map(|&(c, _)| c).collect());
        let now = Instant::now();
        let at_ns = u64::try_from(now.duration_since(self.started).as_nanos()).unwrap_or(u64::MAX);
        let own_since = self.own_since(own_pid);
        let mut busy = self
            .busy
            .observe(at_ns, &stat.busy_ticks, &stat.idle_ticks, &own_since)
            .to_vec();
        // The other dfsched processes' load comes with the view: it is not
        // unmanaged. Their placed load stands in for their busy time and
        // their runnable threads.
        let others = agent.add_others(Vec::new());
        for (cpu, u) in &mut busy {
            if let Ok(i) = others.binary_search_by_key(cpu, |&(c, _)| c) {
                *u = u.saturating_sub(others[i].1);
            }
        }
        busy.retain(|&(_, u)| u > 0);
        let ours: u64 = self.own_shares.iter().chain(&others).map(|&(_, m)| m).sum();
        let runnable = signals::outside_runnable(stat.procs_running, ours);
        let wanted = self.gate.wanted(&busy, runnable);
        let stepped = self
            .refresh
            .step(now, wanted, |pid| pid == own_pid || agent.skips(pid));
        let generation = self.refresh.generation();
        if self.weight.is_none_or(|(g, _, _)| g != generation) {
            let sample = self.refresh.sample().cloned();
            let sampler = self.refresh.sampler();
            let ctx = match &sample {
                Some(s) => s.context.unwrap_or_else(|| sampler.group_context()),
                None => sampler.group_context(),
            };
            let ours = sampler.group_of(ctx, own_pid);
            let our_nice = sampler.nice_of(own_pid);
            let seen = sample.map_or((0, 0), |s| s.weighed_total(&ours, our_nice, |_| false));
            self.weight = Some((generation, seen, crate::weigh::unseen(&ours, our_nice)));
        }
        let weight = self.weight.map_or(
            dfsched_core::rules::TASK_MILLI,
            |(_, (milli, threads), unseen)| {
                signals::mean_weight_milli(milli, threads, runnable, unseen)
            },
        );
        Ok((
            signals::estimate(&busy, runnable, weight),
            stepped == Stepped::Done,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C0: CpuId = CpuId(0);
    const C1: CpuId = CpuId(1);

    #[test]
    fn our_cpu_time_is_taken_off_the_cpu_our_thread_ran_on() {
        // A thread of ours spins on the last allowed CPU (its kernel mask),
        // while the engine's target for it is every allowed CPU: the sample
        // finds where it ran from its stat, not by spreading it.
        let allowed = crate::sys::get_affinity(0).unwrap();
        let last = allowed.iter().last().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let spinner = std::thread::spawn(move || {
            let only: CpuSet = [last].into_iter().collect();
            crate::sys::set_affinity(0, &only).unwrap();
            tid_tx.send(crate::sys::gettid()).unwrap();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = tid_rx.recv().unwrap();
        let mut ext = External::new("/proc", 1);
        ext.set_own(vec![(last, 1000)], vec![(tid, allowed.clone())]);
        let pid = std::process::id();
        ext.own_since(pid);
        let spun = crate::sys::thread_cpu_ns(tid).unwrap();
        while crate::sys::thread_cpu_ns(tid).unwrap() < spun + 50_000_000 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let files = ext.refresh.files_opened();
        let got = ext.own_since(pid);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        let on_last = got
            .iter()
            .find(|&&(c, _)| c == last)
            .map_or(0, |&(_, ns)| ns);
        assert!(on_last >= 50_000_000, "{got:?} (last CPU {last})");
        assert_eq!(ext.refresh.files_opened() - files, 1, "one stat read");
    }

    #[test]
    fn the_others_load_is_not_damped() {
        // With no agent view the pass is our own scan of /proc; with one,
        // the agent's unmanaged sample is damped and the others' load is
        // added in full from the first pass.
        let pass = AgentPass::for_test(&[(C1, 2000)], Some(&[(C0, 1)]));
        let mut ext = External::new("/proc", 3);
        let s = ext.sample(std::process::id(), &pass).unwrap();
        assert_eq!(s.source, Source::Agent);
        assert_eq!(
            s.load_milli,
            vec![(C1, 2000)],
            "unmanaged not yet sustained"
        );
        assert_eq!(s.counted, vec![(C0, 1)]);
        ext.sample(std::process::id(), &pass).unwrap();
        let s = ext.sample(std::process::id(), &pass).unwrap();
        assert_eq!(s.load_milli, vec![(C0, 1000), (C1, 2000)]);
        let none = AgentPass::default();
        let s = ext.sample(std::process::id(), &none).unwrap();
        assert_eq!(s.source, Source::OwnScan);
        let mut missing = External::new("/nonexistent-proc", 3);
        assert!(missing.sample(1, &none).is_err());
    }
}
