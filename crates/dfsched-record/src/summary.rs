//! A recording's summary for people and for JSON (`dfsched record
//! inspect`): threads, DFs, time span, events by kind, drops.

use crate::{Event, Recording};
use serde::Serialize;
use std::collections::BTreeMap;

/// One thread's life as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadSummary {
    /// Its tid.
    pub tid: u64,
    /// When the runtime first knew it, ns.
    pub start_ns: u64,
    /// When it exited, ns (`None`: still alive when the recording ended).
    pub exit_ns: Option<u64>,
    /// CPU time used while known (the last reading less the first), ns.
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU while known (the last reading
    /// less the first), ns.
    pub wait_ns: u64,
    /// Run periods (times switched in) while known, the last reading less
    /// the first; `None` when the recording has no such readings (older
    /// than the field) or only one.
    pub runs: Option<u64>,
    /// Voluntary switches (blocks) while known, as `runs`.
    pub voluntary: Option<u64>,
    /// DFs it hinted (non-zero `next`), ascending.
    pub dfs: Vec<u64>,
    /// Hints recorded.
    pub hints: u64,
    /// Times the idle step found it blocked.
    pub blocks: u64,
    /// CPUs it was seen on, ascending.
    pub cpus: Vec<u32>,
}

/// What `record inspect` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The recording process.
    pub pid: u32,
    /// CPUs its runtime placed on.
    pub cpus: u32,
    /// The runtime's policy.
    pub policy: crate::Policy,
    /// Whether the recording ended properly.
    pub complete: bool,
    /// Whether its last record was cut short.
    pub truncated: bool,
    /// Events dropped by the recorder.
    pub dropped: u64,
    /// Earliest and latest event time, ns.
    pub first_ns: u64,
    /// Latest event time, ns.
    pub last_ns: u64,
    /// From the first thread's start to the last thread's exit (or the
    /// last event), ns: the recorded run's time.
    pub run_ns: u64,
    /// Events by kind name.
    pub events: BTreeMap<&'static str, u64>,
    /// Distinct (application, DF) pairs hinted or sized.
    pub dfs: u64,
    /// Declared DF sizes: (application, DF, bytes).
    pub df_sizes: Vec<(u64, u64, u64)>,
    /// Every thread, by start time then tid.
    pub threads: Vec<ThreadSummary>,
}

impl Recording {
    /// Its summary.
    pub fn summary(&self) -> Summary {
        let mut events: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut threads: BTreeMap<u64, ThreadSummary> = BTreeMap::new();
        let mut first_cpu: BTreeMap<u64, Firsts> = BTreeMap::new();
        let mut dfs = std::collections::BTreeSet::new();
        let mut df_sizes: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let (mut first, mut last) = (u64::MAX, 0u64);
        for ev in &self.events {
            *events.entry(ev.name()).or_default() += 1;
            let t = ev.t_ns();
            first = first.min(t);
            last = last.max(t);
            match ev {
                Event::ThreadNew {
                    tid,
                    cpu,
                    cpu_ns,
                    wait_ns,
                    runs,
                    voluntary,
                    ..
                } => {
                    let r = Reading::sched(*cpu_ns, *wait_ns, *runs, *voluntary);
                    touch(&mut threads, &mut first_cpu, t, *tid, r, *cpu);
                }
                Event::ThreadExit {
                    tid,
                    cpu_ns,
                    wait_ns,
                    runs,
                    voluntary,
                    ..
                } => {
                    let r = Reading::sched(*cpu_ns, *wait_ns, *runs, *voluntary);
                    touch(&mut threads, &mut first_cpu, t, *tid, r, None).exit_ns = Some(t);
                }
                Event::Hint {
                    tid,
                    app,
                    next,
                    cpu_ns,
                    ..
                } => {
                    let r = Reading {
                        cpu_ns: Some(*cpu_ns),
                        ..Reading::default()
                    };
                    let th = touch(&mut threads, &mut first_cpu, t, *tid, r, None);
                    th.hints += 1;
                    if *next != 0 {
                        if let Err(i) = th.dfs.binary_search(next) {
                            th.dfs.insert(i, *next);
                        }
                        dfs.insert((*app, *next));
                    }
                }
                Event::Block { tid, .. } => {
                    let r = Reading::default();
                    touch(&mut threads, &mut first_cpu, t, *tid, r, None).blocks += 1
                }
                Event::Wake { tid, .. } => {
                    touch(
                        &mut threads,
                        &mut first_cpu,
                        t,
                        *tid,
                        Reading::default(),
                        None,
                    );
                }
                Event::Sample {
                    tid,
                    cpu_ns,
                    wait_ns,
                    cpu,
                    runs,
                    voluntary,
                    ..
                } => {
                    let r = Reading::sched(*cpu_ns, *wait_ns, *runs, *voluntary);
                    touch(&mut threads, &mut first_cpu, t, *tid, r, *cpu);
                }
                Event::DfSize { app, df, bytes, .. } => {
                    dfs.insert((*app, *df));
                    df_sizes.insert((*app, *df), *bytes);
                }
                Event::Sharing { .. }
                | Event::OutsideLoad { .. }
                | Event::Drops { .. }
                | Event::End { .. } => {}
            }
        }
        if first == u64::MAX {
            first = 0;
        }
        let mut threads: Vec<ThreadSummary> = threads.into_values().collect();
        threads.sort_by_key(|t| (t.start_ns, t.tid));
        let start = threads.iter().map(|t| t.start_ns).min().unwrap_or(first);
        let end = if !threads.is_empty() && threads.iter().all(|t| t.exit_ns.is_some()) {
            threads
                .iter()
                .filter_map(|t| t.exit_ns)
                .max()
                .unwrap_or(last)
        } else {
            last
        };
        Summary {
            pid: self.header.pid,
            cpus: self.header.cpus,
            policy: self.header.policy,
            complete: self.complete,
            truncated: self.truncated,
            dropped: self.dropped,
            first_ns: first,
            last_ns: last,
            run_ns: end.saturating_sub(start),
            events,
            dfs: dfs.len() as u64,
            df_sizes: df_sizes.into_iter().map(|((a, d), b)| (a, d, b)).collect(),
            threads,
        }
    }
}

/// A thread's cumulative readings in one event, where it has them.
#[derive(Clone, Copy, Debug, Default)]
struct Reading {
    cpu_ns: Option<u64>,
    wait_ns: Option<u64>,
    runs: Option<u64>,
    voluntary: Option<u64>,
}

impl Reading {
    /// A `schedstat` (and `status`) reading: thread new, sample, exit.
    fn sched(cpu_ns: u64, wait_ns: u64, runs: Option<u64>, voluntary: Option<u64>) -> Reading {
        Reading {
            cpu_ns: Some(cpu_ns),
            wait_ns: Some(wait_ns),
            runs,
            voluntary,
        }
    }
}

/// A thread's first reading of each cumulative counter.
#[derive(Clone, Copy, Debug, Default)]
struct Firsts {
    cpu_ns: Option<u64>,
    wait_ns: Option<u64>,
    runs: Option<u64>,
    voluntary: Option<u64>,
}

/// A count since its first reading: `None` until a second one.
fn since_first(first: &mut Option<u64>, total: &mut Option<u64>, reading: Option<u64>) {
    if let Some(n) = reading {
        match *first {
            None => *first = Some(n),
            Some(f) => *total = Some(total.unwrap_or(0).max(n.saturating_sub(f))),
        }
    }
}

/// The summary of thread `tid`, made on first sight at `t`, with its
/// readings and a CPU it ran on folded in (each counter: the largest
/// reading less the first).
fn touch<'a>(
    threads: &'a mut BTreeMap<u64, ThreadSummary>,
    firsts: &mut BTreeMap<u64, Firsts>,
    t: u64,
    tid: u64,
    r: Reading,
    cpu: Option<u32>,
) -> &'a mut ThreadSummary {
    let th = threads.entry(tid).or_insert_with(|| ThreadSummary {
        tid,
        start_ns: t,
        exit_ns: None,
        cpu_ns: 0,
        wait_ns: 0,
        runs: None,
        voluntary: None,
        dfs: Vec::new(),
        hints: 0,
        blocks: 0,
        cpus: Vec::new(),
    });
    th.start_ns = th.start_ns.min(t);
    let f = firsts.entry(tid).or_default();
    if let Some(c) = r.cpu_ns {
        let first = *f.cpu_ns.get_or_insert(c);
        th.cpu_ns = th.cpu_ns.max(c.saturating_sub(first));
    }
    if let Some(w) = r.wait_ns {
        let first = *f.wait_ns.get_or_insert(w);
        th.wait_ns = th.wait_ns.max(w.saturating_sub(first));
    }
    since_first(&mut f.runs, &mut th.runs, r.runs);
    since_first(&mut f.voluntary, &mut th.voluntary, r.voluntary);
    if let Some(c) = cpu {
        if let Err(i) = th.cpus.binary_search(&c) {
            th.cpus.insert(i, c);
        }
    }
    th
}
