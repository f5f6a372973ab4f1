//! The rare, budgeted per-thread look that weighs the outside load by CFS
//! group: a sweep of `/proc` that finds the runnable outside threads with
//! their nice and their process's group, as the old per-pass scan did, but
//! spread over passes and started at most once every [`DEFAULT_REFRESH_MS`].
//! What it gives is one number per client, the mean weight of an outside
//! runnable thread (`signals.rs`); how much load there is and where comes
//! from the per-pass signals.
//!
//! ```text
//!   wanted? (the caller's signals show outside load worth weighing at
//!   │        each of the last K samples: signals::WeighGate; the baseline
//!   │        sweep is always taken)
//!   due? (period since the last sweep ended, stretched so that sweeping
//!   │     takes at most 1/DUTY of the time and a sweep spread over many
//!   │     passes is followed by SPREAD times as many without one)
//!   ▼
//!   list /proc's pids ─► per pid: PID/stat (one file: the whole process's
//!   │                    CPU ticks, its state if single-threaded)
//!   │                      single-threaded, R       → one runnable thread
//!   │                      CPU ticks moved since the
//!   │                      last sweep (multi-thread) → PID/task/*/stat of
//!   │                                                  at most SAMPLE_THREADS
//!   │                                                  of its threads, evenly
//!   │                                                  spaced among the first
//!   │                                                  MAX_LISTED, scaled up
//!   │                      else                      → nothing runnable
//!   │                    runnable? → its group files (groups.rs)
//!   └── each step stops after REFRESH_BUDGET_US and resumes at the next
//! ```
//!
//! Why the CPU-ticks test: a process whose threads all sleep (a JVM's
//! thousands of idle threads) used no CPU since the last sweep, so it
//! costs one file, not one per thread. Its price: a process is looked at
//! thread by thread only from its second sweep on (the first is the
//! baseline; so the very first sweep publishes nothing and the second
//! follows [`MIN_GAP`] later), and a process starved of CPU for a whole
//! period is missed (then the machine is saturated and the signals see it).
//!
//! Why only when wanted: the sweep's one product is the weight of an
//! outside thread, and a weight multiplies the signals' outside load. With
//! none to weigh (a quiet machine, or a few ticks of daemons) a sweep buys
//! nothing, and on a quiet 2-CPU machine it was over half of a balancer
//! pass's system calls (≈ 100 processes' `stat` every 2 s). Wanted means
//! sustained: the load must be there at each of the K samples of the
//! window the weighed load goes through (`signals::WeighGate`), since
//! load gone within K samples never reaches the engine whatever it weighs;
//! gated on one sample, a daemon's wake-up started a sweep a few times in
//! ten seconds on a quiet machine, a third of the runtime's cost there. So
//! lasting load is weighed from the K-th pass on, a sweep finishing a pass
//! or two later at the budget; until then the last weight holds, or the
//! unseen rule, which under-weighs (the safe side). The CPU-ticks baseline
//! is then older, so more processes look moved and are read thread by
//! thread, each still at most [`SAMPLE_THREADS`].

//! Why a sample of a busy process's threads: a process of 10,000 threads
//! of which a few hundred spin (a JVM under load, a thread pool) would
//! otherwise cost 10,000 reads a sweep, and a sweep spread over a hundred
//! passes at [`REFRESH_BUDGET_US`] each puts that cost into most passes
//! (measured: a pass's median went from ≈ 0.2 ms to 1.3 ms beside such a
//! process). At most [`SAMPLE_THREADS`] of its threads are read, evenly
//! spaced over its thread list from an offset that moves with each sweep,
//! and each runnable one found stands for `threads / SAMPLE_THREADS` of
//! them. The price: a rare runnable thread among many sleeping ones is
//! seen in some sweeps and not others (its expected count is right), and
//! their CPUs are those of the threads read. So a sweep's work is
//! O(processes + SAMPLE_THREADS × busy processes), whatever their sizes.
//!
//! Invariants: a sweep's result is published only whole, as one
//! [`OutsideSample`] of at most [`MAX_KEPT_THREADS`] threads; the CPU
//! ticks remembered are those of the last sweep, at most
//! [`MAX_TRACKED_PIDS`] processes (a process past that is never looked at
//! thread by thread); one step's work stops within one file read of its
//! budget; memory is bounded by those caps and one process's thread list.

use super::{GroupContext, LoadSampler, OutsideSample};
use crate::weigh::{GroupInfo, GroupKey, OutsideThread, SchedGroup};
use dfsched_core::CpuId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The least time between the end of one sweep and the start of the next,
/// in milliseconds.
pub const DEFAULT_REFRESH_MS: u64 = 2000;

/// The most wall time one step (one pass) of a sweep takes, in
/// microseconds; past it the sweep resumes at the next pass.
pub const REFRESH_BUDGET_US: u64 = 1000;

/// A sweep's total work takes at most 1/DUTY of the time: the next one
/// waits DUTY × its work if that is longer than the period.
const DUTY: u32 = 20;

/// A sweep spread over many passes is followed by SPREAD times as long
/// without one, so that at most 1/(SPREAD + 1) of the passes do any of its
/// work and the median pass does none.
const SPREAD: u32 = 3;

/// The wait after the baseline sweep: CPU ticks count 10 ms each, so
/// 100 ms is needed to see a process's CPU move.
const MIN_GAP: Duration = Duration::from_millis(100);

/// The most threads of one process a sweep reads (evenly spaced; each
/// runnable one found counts for `threads / SAMPLE_THREADS`).
pub const SAMPLE_THREADS: usize = 64;

/// The most threads of one process listed (`PID/task`) for its sample.
pub const MAX_LISTED: usize = 4096;

/// The most runnable threads one sweep keeps for the weighing.
pub const MAX_KEPT_THREADS: usize = 1 << 14;

/// The most processes whose CPU ticks are remembered between sweeps.
pub const MAX_TRACKED_PIDS: usize = 1 << 16;

/// What one [`Refresh::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// No sweep is due.
    Idle,
    /// A sweep ran and is not finished.
    Working,
    /// A sweep finished: a new sample is published (the baseline sweep
    /// publishes none).
    Done,
    /// `/proc` could not be listed; the next sweep is due a period later.
    Failed,
}

/// The process being read thread by thread.
#[derive(Debug)]
struct Tasks {
    pid: u32,
    /// The threads to read: at most [`SAMPLE_THREADS`] of its list.
    tids: Vec<u64>,
    /// How many threads each one read stands for (1 for a process of at
    /// most [`SAMPLE_THREADS`]).
    scale: usize,
    next: usize,
    /// Its runnable threads so far, `(cpu, nice)`.
    runnable: Vec<(usize, i8)>,
}

/// A sweep under way.
#[derive(Debug)]
struct Sweep {
    /// Whether this is the first sweep (no CPU ticks to compare with).
    baseline: bool,
    context: GroupContext,
    pids: Vec<u32>,
    next: usize,
    tasks: Option<Tasks>,
    sample: OutsideSample,
    index: HashMap<GroupKey, u32>,
    /// CPU ticks of the processes visited, for the next sweep.
    ticks: HashMap<u32, u64>,
    /// Wall time spent in this sweep's steps.
    work: Duration,
    /// Where in a large process's thread list its sample starts: moves
    /// with each sweep, so that every thread is read now and then.
    offset: usize,
    /// When its first step began.
    began: Instant,
}

/// The refresh: its sampler (buffers, file counter), the sweep under way,
/// and the last published sample.
#[derive(Debug)]
pub struct Refresh {
    sampler: LoadSampler,
    period: Duration,
    budget: Duration,
    sweep: Option<Sweep>,
    /// When the next sweep may start; `None`: at once.
    due: Option<Instant>,
    /// CPU ticks per process at the last finished sweep.
    ticks: HashMap<u32, u64>,
    /// Whether a sweep has finished (the next is not a baseline).
    swept: bool,
    sample: Option<OutsideSample>,
    generation: u64,
}

impl Refresh {
    /// A refresh of `proc_root` at most every `period` (after a sweep
    /// ends), each step stopping after `budget`.
    pub fn new(
        proc_root: impl Into<std::path::PathBuf>,
        period: Duration,
        budget: Duration,
    ) -> Refresh {
        Refresh {
            sampler: LoadSampler::new(proc_root),
            period,
            budget,
            sweep: None,
            due: None,
            ticks: HashMap::new(),
            swept: false,
            sample: None,
            generation: 0,
        }
    }

    /// The last published sample, if any.
    pub fn sample(&self) -> Option<&OutsideSample> {
        self.sample.as_ref()
    }

    /// How many samples have been published: changes when
    /// [`Refresh::sample`] does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The sampler, for reading other files with the same buffers and
    /// counter (our group, `/proc/stat`).
    pub fn sampler(&mut self) -> &mut LoadSampler {
        &mut self.sampler
    }

    /// Files opened so far by the refresh and every read through
    /// [`Refresh::sampler`].
    pub fn files_opened(&self) -> u64 {
        self.sampler.files_opened()
    }

    /// Works on the sweep for at most the budget if one is under way, or
    /// due at `now` and `wanted` (the first, the baseline, is taken
    /// whether wanted or not: see the module doc), skipping processes for
    /// which `skip` is true.
    pub fn step(&mut self, now: Instant, wanted: bool, skip: impl Fn(u32) -> bool) -> Stepped {
        let mut sweep = match self.sweep.take() {
            Some(s) => s,
            None if self.due.is_some_and(|d| now < d) => return Stepped::Idle,
            None if self.swept && !wanted => return Stepped::Idle,
            None => match self.start() {
                Some(s) => s,
                None => {
                    self.due = Some(now + self.period);
                    return Stepped::Failed;
                }
            },
        };
        let began = Instant::now();
        let deadline = began + self.budget;
        let finished = self.work(&mut sweep, &skip, deadline);
        sweep.work += began.elapsed();
        if !finished {
            self.sweep = Some(sweep);
            return Stepped::Working;
        }
        let end = Instant::now();
        let wait = if sweep.baseline {
            MIN_GAP
        } else {
            let spread = end.saturating_duration_since(sweep.began);
            self.period.max(sweep.work * DUTY).max(spread * SPREAD)
        };
        self.due = Some(end + wait);
        self.ticks = sweep.ticks;
        if !sweep.baseline {
            self.sample = Some(sweep.sample);
            self.generation += 1;
        }
        self.swept = true;
        Stepped::Done
    }

    /// A new sweep: the group context and the list of pids (one directory).
    fn start(&mut self) -> Option<Sweep> {
        let context = self.sampler.group_context();
        self.sampler.files += 1;
        let dir = std::fs::read_dir(&self.sampler.proc_root).ok()?;
        let pids = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect();
        Some(Sweep {
            baseline: !self.swept,
            context,
            pids,
            next: 0,
            tasks: None,
            sample: OutsideSample {
                context: Some(context),
                ..OutsideSample::default()
            },
            index: HashMap::new(),
            ticks: HashMap::new(),
            work: Duration::ZERO,
            // A multiplicative hash of the sweep's number: consecutive
            // sweeps start their samples far apart in a thread list.
            offset: (self.generation as usize).wrapping_mul(2_654_435_761),
            began: Instant::now(),
        })
    }

    /// Works until the sweep is over (true) or `deadline` has passed (one
    /// item at least, so that any budget makes progress).
    fn work(&mut self, sweep: &mut Sweep, skip: &impl Fn(u32) -> bool, deadline: Instant) -> bool {
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && Instant::now() >= deadline {
                return false;
            }
            if let Some(mut t) = sweep.tasks.take() {
                if t.next < t.tids.len() {
                    let path = self
                        .sampler
                        .proc_root
                        .join(format!("{}/task/{}/stat", t.pid, t.tids[t.next]));
                    t.next += 1;
                    if let Some(f) = self.sampler.read_stat(&path) {
                        keep(&mut t.runnable, f);
                    }
                    sweep.tasks = Some(t);
                } else {
                    let runnable = scaled(&t.runnable, t.scale);
                    self.found(sweep, t.pid, &runnable);
                }
                continue;
            }
            let Some(&pid) = sweep.pids.get(sweep.next) else {
                return true;
            };
            sweep.next += 1;
            if skip(pid) {
                continue;
            }
            let path = self.sampler.proc_root.join(format!("{pid}/stat"));
            // Gone since the listing, or unparsable: nothing runnable.
            let Some(f) = self.sampler.read_stat(&path) else {
                continue;
            };
            let before = self.ticks.get(&pid).copied();
            if sweep.ticks.len() < MAX_TRACKED_PIDS {
                sweep.ticks.insert(pid, f.cpu_ticks);
            }
            if f.num_threads <= 1 {
                let mut runnable = Vec::new();
                keep(&mut runnable, f);
                self.found(sweep, pid, &runnable);
                continue;
            }
            // Multi-threaded: thread by thread only if it used CPU since
            // the last sweep (a process new since then: if it used any).
            let moved = match before {
                Some(t) => t != f.cpu_ticks,
                None => !sweep.baseline && f.cpu_ticks > 0 && self.ticks.len() < MAX_TRACKED_PIDS,
            };
            if !moved {
                continue;
            }
            self.sampler.files += 1;
            let dir = self.sampler.proc_root.join(format!("{pid}/task"));
            let Ok(list) = std::fs::read_dir(dir) else {
                continue;
            };
            // Listing a huge process's threads is itself O(threads) in one
            // step the budget cannot cut: list at most MAX_LISTED (the
            // kernel lists them in tid order, a chunk at a time), sample
            // those, and scale to the thread count its stat gave.
            let listed: Vec<u64> = list
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .take(MAX_LISTED)
                .collect();
            let (tids, scale) = sample_of(listed, sweep.offset, f.num_threads as usize);
            sweep.tasks = Some(Tasks {
                pid,
                tids,
                scale,
                next: 0,
                runnable: Vec::new(),
            });
        }
    }

    /// Process `pid` has `runnable` threads: they join the sample with its
    /// group (read now), up to [`MAX_KEPT_THREADS`].
    fn found(&mut self, sweep: &mut Sweep, pid: u32, runnable: &[(usize, i8)]) {
        let room = MAX_KEPT_THREADS.saturating_sub(sweep.sample.threads.len());
        if runnable.is_empty() || room == 0 {
            return;
        }
        let runnable = &runnable[..runnable.len().min(room)];
        let group = match self.sampler.group_of(sweep.context, pid) {
            SchedGroup::Group { key, weight } => {
                let next = sweep.sample.groups.len() as u32;
                let g = *sweep.index.entry(key.clone()).or_insert(next);
                if g == next {
                    sweep.sample.groups.push(GroupInfo {
                        key,
                        weight,
                        runnable: 0,
                    });
                }
                let n = &mut sweep.sample.groups[g as usize].runnable;
                *n = n.saturating_add(runnable.len() as u32);
                Some(g)
            }
            SchedGroup::Root | SchedGroup::Unknown => None,
        };
        sweep
            .sample
            .threads
            .extend(runnable.iter().map(|&(cpu, nice)| OutsideThread {
                pid,
                group,
                cpu: CpuId(cpu as u32),
                nice,
            }));
    }
}

/// At most [`SAMPLE_THREADS`] of `tids` (the listed threads of a process
/// of `threads` in all), evenly spaced from `offset` (taken modulo the
/// stride), and how many of its threads each stands for: the whole list
/// and 1 when it is short enough and complete.
fn sample_of(tids: Vec<u64>, offset: usize, threads: usize) -> (Vec<u64>, usize) {
    let n = tids.len();
    let threads = threads.max(n);
    let (picked, read) = if n <= SAMPLE_THREADS {
        (tids, n)
    } else {
        let stride = n.div_ceil(SAMPLE_THREADS);
        let start = offset % stride;
        let picked: Vec<u64> = tids.into_iter().skip(start).step_by(stride).collect();
        let read = picked.len();
        (picked, read)
    };
    // Each read thread stands for threads / read of them, rounded: the
    // expected runnable count is then the process's (to the rounding).
    let scale = ((threads + read / 2) / read.max(1)).max(1);
    (picked, scale)
}

/// Each runnable thread of a sample, `scale` times (a sample of a large
/// process stands for all its threads).
fn scaled(runnable: &[(usize, i8)], scale: usize) -> Vec<(usize, i8)> {
    let mut out = Vec::with_capacity(runnable.len().saturating_mul(scale).min(MAX_KEPT_THREADS));
    for &r in runnable {
        for _ in 0..scale {
            if out.len() == MAX_KEPT_THREADS {
                return out;
            }
            out.push(r);
        }
    }
    out
}

/// Keeps a runnable thread of a parsed stat line, as `(cpu, nice)`.
fn keep(runnable: &mut Vec<(usize, i8)>, f: super::StatFields) {
    // CPU numbers come from the kernel; bound them anyway so a garbled
    // file cannot make a caller allocate without limit.
    if f.state == b'R' && f.processor < dfsched_core::cpuset::MAX_CPUS {
        runnable.push((f.processor as usize, f.nice));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::stat_line;
    use super::*;

    /// A fixture `/proc` in a fresh directory of ours, removed on drop.
    struct Root(tempfile::TempDir);
    impl Root {
        fn new(tag: &str) -> Root {
            let dir = tempfile::Builder::new()
                .prefix(&format!("dfsched-refresh-{tag}-"))
                .tempdir()
                .unwrap();
            Root(dir)
        }
        fn path(&self) -> &std::path::Path {
            self.0.path()
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        /// A process of `threads` threads whose CPU ticks are `ticks`, its
        /// threads `R` on `cpu` if `runnable`.
        fn process(&self, pid: u32, threads: u32, ticks: u64, runnable: bool, cpu: u32) {
            let state = if runnable { 'R' } else { 'S' };
            let line = |ticks: u64| {
                let mut f: Vec<String> = stat_line("p", state, u64::from(threads), cpu)
                    .split(' ')
                    .map(String::from)
                    .collect();
                f[13] = ticks.to_string();
                f[14] = "0".into();
                f.join(" ")
            };
            self.write(&format!("{pid}/stat"), &line(ticks));
            if threads > 1 {
                for t in 0..threads {
                    self.write(&format!("{pid}/task/{}/stat", pid + t), &line(0));
                }
            }
        }
    }

    fn refresh(root: &Root) -> Refresh {
        Refresh::new(root.path(), Duration::ZERO, Duration::from_secs(3600))
    }

    /// Steps until a sample is published.
    fn sweep(r: &mut Refresh) {
        let gen = r.generation();
        for _ in 0..1000 {
            // The baseline's gap is waited out by stepping at a later now.
            let later = Instant::now() + Duration::from_secs(1);
            r.step(later, true, |_| false);
            if r.generation() > gen {
                return;
            }
        }
        panic!("no sample");
    }

    #[test]
    fn a_sleeping_many_threaded_process_costs_one_file_per_sweep() {
        let root = Root::new("sleep");
        // 500 sleeping threads that used CPU once, and never since.
        root.process(10, 500, 7, false, 0);
        // A busy 4-thread process: its ticks move between sweeps.
        root.process(20, 4, 1, true, 1);
        let mut r = refresh(&root);
        sweep(&mut r); // baseline, then the first published sweep
        let s = r.sample().unwrap();
        assert!(s.threads.is_empty(), "no process moved: {s:?}");
        root.process(20, 4, 2, true, 1);
        let before = r.files_opened();
        sweep(&mut r);
        let files = r.files_opened() - before;
        // The listing, the autogroup switch, 2 stat files, process 20's task
        // listing and 4 task files, its cgroup file: never process 10's 500.
        assert!(files <= 12, "{files} files");
        let s = r.sample().unwrap();
        assert_eq!(s.count(|_| false), vec![(CpuId(1), 4)]);
    }

    #[test]
    fn a_busy_process_of_many_threads_is_read_by_a_sample_and_counted_whole() {
        let root = Root::new("big");
        // 2,000 runnable threads on CPU 1 in one process whose CPU ticks move.
        root.process(30, 2000, 1, true, 1);
        let mut r = refresh(&root);
        sweep(&mut r);
        root.process(30, 2000, 2, true, 1);
        let before = r.files_opened();
        sweep(&mut r);
        let files = r.files_opened() - before;
        // The listing, the autogroup switch, its stat, its task listing,
        // SAMPLE_THREADS task files and its group file: not 2,000 reads.
        assert!(files <= SAMPLE_THREADS as u64 + 8, "{files} files");
        // Counted as the whole process: 64 read of 2,000 stand for ~31 each.
        let n: u32 = r
            .sample()
            .unwrap()
            .count(|_| false)
            .iter()
            .map(|&(_, n)| n)
            .sum();
        assert!((1900..=2100).contains(&n), "{n} runnable threads counted");
        // Past MAX_LISTED threads only the first MAX_LISTED are listed, and
        // the count is scaled to the thread count of the process's stat.
        let big = (MAX_LISTED + 2000) as u32;
        root.process(40, big, 1, true, 0);
        sweep(&mut r);
        root.process(40, big, 2, true, 0);
        root.process(30, 2000, 3, true, 1);
        sweep(&mut r);
        let on0: u32 = r
            .sample()
            .unwrap()
            .count(|_| false)
            .iter()
            .filter(|&&(c, _)| c == CpuId(0))
            .map(|&(_, n)| n)
            .sum();
        let want = big as f64;
        assert!(
            (f64::from(on0) - want).abs() < want * 0.05,
            "{on0} of {big} runnable threads counted"
        );
    }

    #[test]
    fn a_sample_is_evenly_spaced_moves_with_the_offset_and_is_whole_when_short() {
        let short: Vec<u64> = (0..SAMPLE_THREADS as u64).collect();
        assert_eq!(
            sample_of(short.clone(), 99, SAMPLE_THREADS),
            (short.clone(), 1)
        );
        // Listed only in part (MAX_LISTED): scaled to the whole count.
        assert_eq!(
            sample_of(short.clone(), 0, 10 * SAMPLE_THREADS),
            (short, 10)
        );
        let long: Vec<u64> = (0..1000).collect();
        let (a, scale) = sample_of(long.clone(), 0, 1000);
        assert!(
            a.len() <= SAMPLE_THREADS && a.len() >= SAMPLE_THREADS - 1,
            "{}",
            a.len()
        );
        assert_eq!(a[1] - a[0], 16, "evenly spaced");
        assert_eq!(
            scale,
            1000 / a.len() + usize::from(1000 % a.len() * 2 >= a.len())
        );
        let (b, _) = sample_of(long, 5, 1000);
        assert_eq!(b[0], 5, "the offset moves the sample");
        assert_eq!(scaled(&[(1, 0), (0, 5)], 3).len(), 6);
        assert_eq!(
            scaled(&[(1, 0)], MAX_KEPT_THREADS + 5).len(),
            MAX_KEPT_THREADS
        );
    }

    #[test]
    fn a_sweep_over_its_budget_resumes_at_the_next_step() {
        let root = Root::new("budget");
        for pid in 10..40 {
            root.process(pid, 1, 5, true, pid % 2);
        }
        // A zero budget: each step reads one file and stops.
        let mut r = Refresh::new(root.path(), Duration::ZERO, Duration::ZERO);
        let mut steps = 0;
        let mut last = Stepped::Idle;
        while r.generation() == 0 {
            let now = Instant::now() + Duration::from_secs(1);
            let files = r.files_opened();
            last = r.step(now, true, |pid| pid == 39);
            assert!(r.files_opened() - files <= 4, "one item per step");
            steps += 1;
            assert!(steps < 10_000);
        }
        assert_eq!(last, Stepped::Done);
        assert!(steps > 30, "{steps} steps");
        let s = r.sample().unwrap();
        assert_eq!(s.threads.len(), 29, "pid 39 skipped");
        assert_eq!(s.count(|_| false), vec![(CpuId(0), 15), (CpuId(1), 14)]);
    }

    #[test]
    fn a_sweep_spread_over_passes_is_followed_by_thrice_as_long_without() {
        let root = Root::new("spread");
        for pid in 10..15 {
            root.process(pid, 1, 5, true, 0);
        }
        let mut r = Refresh::new(root.path(), Duration::ZERO, Duration::ZERO);
        // The baseline, then a sweep of one item a step, a step every 30 ms:
        // it spans ≥ 120 ms (5 pids, 4 gaps).
        let mut now = Instant::now() + Duration::from_secs(1);
        while r.step(now, true, |_| false) != Stepped::Done {}
        now += Duration::from_secs(1);
        let mut last = r.step(now, true, |_| false);
        while last != Stepped::Done {
            std::thread::sleep(Duration::from_millis(30));
            last = r.step(Instant::now(), true, |_| false);
        }
        let end = Instant::now();
        assert_eq!(r.generation(), 1);
        assert_eq!(
            r.step(end + Duration::from_millis(300), true, |_| false),
            Stepped::Idle
        );
        let later = end + Duration::from_secs(5);
        assert_ne!(r.step(later, true, |_| false), Stepped::Idle);
    }

    #[test]
    fn a_sweep_not_wanted_starts_only_as_the_baseline_and_one_under_way_goes_on() {
        let root = Root::new("wanted");
        for pid in 10..40 {
            root.process(pid, 1, 1, true, 0);
        }
        let mut r = Refresh::new(root.path(), Duration::ZERO, Duration::from_secs(3600));
        let now = Instant::now();
        // The baseline is taken unwanted: the CPU ticks to compare with.
        assert_eq!(r.step(now, false, |_| false), Stepped::Done, "the baseline");
        let later = now + Duration::from_secs(1);
        let files = r.files_opened();
        for _ in 0..5 {
            assert_eq!(r.step(later, false, |_| false), Stepped::Idle);
        }
        assert_eq!(r.files_opened(), files, "no file read while unwanted");
        assert_eq!(r.generation(), 0);
        // Wanted: it sweeps.
        assert_eq!(r.step(later, true, |_| false), Stepped::Done);
        assert_eq!(r.generation(), 1);
        assert!(r.files_opened() > files);
        // A sweep cut by its budget (zero: one file a step) goes on when
        // no longer wanted, to its end.
        let mut slow = Refresh::new(root.path(), Duration::ZERO, Duration::ZERO);
        while slow.step(now, false, |_| false) == Stepped::Working {}
        assert_eq!(slow.step(later, true, |_| false), Stepped::Working);
        let mut steps = 1;
        while slow.step(later, false, |_| false) == Stepped::Working {
            steps += 1;
        }
        assert!(steps > 1, "the zero budget spread the sweep");
        assert_eq!(slow.generation(), 1, "published unwanted");
    }

    #[test]
    fn sweeps_wait_for_the_period_and_a_missing_proc_fails() {
        let root = Root::new("period");
        root.process(10, 1, 1, true, 0);
        let mut r = Refresh::new(root.path(), Duration::from_secs(60), Duration::from_secs(1));
        let now = Instant::now();
        assert_eq!(r.step(now, true, |_| false), Stepped::Done, "the baseline");
        assert_eq!(r.generation(), 0, "the baseline publishes nothing");
        assert_eq!(
            r.step(now, true, |_| false),
            Stepped::Idle,
            "within its gap"
        );
        let later = now + Duration::from_secs(1);
        assert_eq!(r.step(later, true, |_| false), Stepped::Done);
        assert_eq!(r.generation(), 1);
        assert_eq!(
            r.step(later, true, |_| false),
            Stepped::Idle,
            "within the period"
        );
        assert_eq!(
            r.step(later + Duration::from_secs(61), true, |_| false),
            Stepped::Done
        );
        let mut missing = Refresh::new(root.path().join("none"), Duration::ZERO, Duration::ZERO);
        assert_eq!(
            missing.step(Instant::now(), true, |_| false),
            Stepped::Failed
        );
        assert!(missing.sample().is_none());
    }
}
