//! The agent's one sample of the unmanaged load (the processes it does not
//! have registered), shared by every client: the same per-CPU signals and
//! budgeted refresh a runtime uses alone (`signals.rs`,
//! `procfs/refresh.rs`), with the registered processes in the place of the
//! runtime's own threads.
//!
//! ```text
//!   report from P ──► sample older than the freshness bound?
//!                       yes: /proc/stat; each registered pid's stat (its
//!                            CPU ticks, attributed to the CPUs its reported
//!                            load is on); their reported runnable threads
//!                            off the runnable count; a refresh step
//!                       no:  reuse the last sample
//!                     unmanaged       = the estimate's threads per CPU
//!                     unmanaged_milli = the estimate weighed by P's weight
//!                                       of an outside thread (the refresh's
//!                                       threads weighed against P's group,
//!                                       once per refresh), if asked
//! ```
//!
//! A sample costs O(CPUs + registered processes) files, never one per
//! thread on the machine; the refresh's per-thread look is rare and
//! budgeted (its doc).
//!
//! Why a freshness bound of half the runtimes' 100 ms balancer interval
//! ([`DEFAULT_SCAN_FRESH_MS`]): every pass then sees load at most 50 ms old,
//! well inside the interval over which it acts, while N clients whose
//! passes fall at unrelated moments cost at most one sample per 50 ms — two
//! per interval, not N — and an agent nobody asks reads nothing. Busy
//! fractions still need a 100 ms window (`signals.rs`): samples closer
//! together reuse the last window's.
//!
//! Why the weighing is per client: a thread of P's own CFS group (its
//! session's autogroup, its cpu cgroup) competes with P's threads one by
//! one, while another group competes as one entity (see `crate::weigh`);
//! which is which depends on P. The sample is shared, the weight is not.
//!
//! What it gets wrong, beside `signals.rs`'s list: a process that registers
//! within the bound counts as unmanaged until the next sample (≤ 50 ms);
//! the agent's own CPU time counts as outside busy time (it is small).
//!
//! Invariants: at most one sample is taken at a time and none starts within
//! the bound of the last one (failed ones included, so a broken `/proc` is
//! not retried on every report); the CPU ticks kept are the registered
//! processes' only, and the cached weights one per client per refresh.

use crate::config::DEFAULT_EXTERNAL_WINDOW;
use crate::procfs::{clock_ticks_per_sec, Refresh, DEFAULT_REFRESH_MS, REFRESH_BUDGET_US};
use crate::signals::{self, BusyTracker, Estimate, WeighGate};
use crate::weigh::Unseen;
use dfsched_core::CpuId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The default freshness bound of the shared sample, in milliseconds: half
/// the runtimes' default balancer interval (see the module doc for why).
pub const DEFAULT_SCAN_FRESH_MS: u64 = 50;

/// What [`SharedScan::get`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scanned {
    /// The last sample was fresh enough and was reused.
    Reused,
    /// A new sample was taken.
    Taken,
    /// A new sample was tried and failed (`/proc/stat` could not be read).
    Failed,
}

/// One client's share of the sample: the unmanaged load counted and, if
/// asked, weighed against the client's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ForClient {
    /// Runnable threads per CPU, CPUs with none left out, in CPU order.
    pub(super) counted: Vec<(CpuId, u32)>,
    /// Thousandths of one of our threads per CPU, if asked.
    pub(super) milli: Option<Vec<(CpuId, u64)>>,
}

/// The registered processes as a sample needs them: pid → its reported
/// load per CPU (thousandths).
pub(super) type Registered = BTreeMap<u32, Vec<(CpuId, u64)>>;

/// The last sample, the signals' state and the refresh.
#[derive(Debug)]
pub(super) struct SharedScan {
    refresh: Refresh,
    busy: BusyTracker,
    /// Whether the refresh should sweep (`signals::WeighGate`).
    gate: WeighGate,
    ns_per_tick: u64,
    /// Each registered process's CPU ticks at the last sample (only
    /// registered ones: bounded by the clients).
    ticks: HashMap<u32, u64>,
    /// When the last sample (successful or not) started.
    taken: Option<Instant>,
    /// Its outside busy fractions and runnable count; `None` if it failed.
    sample: Option<(Vec<(CpuId, u64)>, u32)>,
    /// Each client's weighing of the refresh's threads (thousandths of its
    /// thread, threads) and its rule for unseen ones, for the refresh
    /// generation `weights_of`; cleared with each generation.
    weights: HashMap<u32, ((u64, u64), Unseen)>,
    weights_of: u64,
    started: Instant,
}

impl SharedScan {
    pub(super) fn new(proc_root: impl Into<PathBuf>) -> SharedScan {
        let hz = clock_ticks_per_sec();
        SharedScan {
            refresh: Refresh::new(
                proc_root,
                Duration::from_millis(DEFAULT_REFRESH_MS),
                Duration::from_micros(REFRESH_BUDGET_US),
            ),
            busy: BusyTracker::new(hz),
            gate: WeighGate::new(DEFAULT_EXTERNAL_WINDOW),
            ns_per_tick: 1_000_000_000 / hz,
            ticks: HashMap::new(),
            taken: None,
            sample: None,
            weights: HashMap::new(),
            weights_of: 0,
            started: Instant::now(),
        }
    }

    /// Takes a new sample if the last one is older than `fresh` (or there
    /// is none); `registered` (the registered processes with their load,
    /// and the agent's own pid with none) is only asked for when one is
    /// taken.
    pub(super) fn get(
        &mut self,
        fresh: Duration,
        registered: impl FnOnce() -> Registered,
    ) -> Scanned {
        let now = Instant::now();
        let stale = match self.taken {
            Some(t) => now.saturating_duration_since(t) >= fresh,
            None => true,
        };
        if !stale {
            return Scanned::Reused;
        }
        let registered = registered();
        self.taken = Some(now);
        self.sample = self.take(now, &registered);
        // Gated over the clients' default window: what a client weighs
        // reaches its engine only through a window of that many samples.
        let wanted = match &self.sample {
            Some((busy, runnable)) => self.gate.wanted(busy, *runnable),
            None => false,
        };
        self.refresh
            .step(now, wanted, |pid| registered.contains_key(&pid));
        if self.sample.is_some() {
            Scanned::Taken
        } else {
            Scanned::Failed
        }
    }

    /// One sample of the signals: `/proc/stat`, less the registered
    /// processes' CPU time (one `stat` each, attributed by their reported
    /// load) and runnable threads (their reported load).
    fn take(&mut self, now: Instant, registered: &Registered) -> Option<(Vec<(CpuId, u64)>, u32)> {
        let stat = self.refresh.sampler().cpu_stat().ok()?;
        let mut theirs: BTreeMap<CpuId, u64> = BTreeMap::new();
        let mut ticks = HashMap::with_capacity(registered.len());
        for (&pid, load) in registered {
            let Some(t) = self.refresh.sampler().process_cpu_ticks(pid) else {
                continue;
            };
            ticks.insert(pid, t);
            let Some(&before) = self.ticks.get(&pid) else {
                continue;
            };
            let delta_ns = t.saturating_sub(before).saturating_mul(self.ns_per_tick);
            for (cpu, ns) in signals::attribute(delta_ns, load) {
                *theirs.entry(cpu).or_default() += ns;
            }
        }
        self.ticks = ticks;
        let theirs: Vec<(CpuId, u64)> = theirs.into_iter().collect();
        let at_ns = u64::try_from(now.duration_since(self.started).as_nanos()).unwrap_or(u64::MAX);
        let busy = self
            .busy
            .observe(at_ns, &stat.busy_ticks, &stat.idle_ticks, &theirs)
            .to_vec();
        let placed: u64 = registered.values().flatten().map(|&(_, m)| m).sum();
        Some((busy, signals::outside_runnable(stat.procs_running, placed)))
    }

    /// The last sample's unmanaged load for client `pid`: counted, and
    /// weighed against `pid`'s CFS group if `weighed` (the refresh's threads
    /// of processes in `registered` left out); `None` if the last sample
    /// failed.
    pub(super) fn for_client(
        &mut self,
        pid: u32,
        registered: &BTreeSet<u32>,
        weighed: bool,
    ) -> Option<ForClient> {
        let (busy, runnable) = self.sample.clone()?;
        let counted = signals::estimate(&busy, runnable, dfsched_core::rules::TASK_MILLI).counted;
        let milli = weighed.then(|| {
            let weight = self.weight(pid, registered, runnable);
            let Estimate { milli, .. } = signals::estimate(&busy, runnable, weight);
            milli
        });
        Some(ForClient { counted, milli })
    }

    /// Client `pid`'s weight of one of `runnable` outside threads
    /// (`signals.rs`), its group read once per refresh generation.
    fn weight(&mut self, pid: u32, registered: &BTreeSet<u32>, runnable: u32) -> u64 {
        let generation = self.refresh.generation();
        if self.weights_of != generation {
            self.weights.clear();
            self.weights_of = generation;
        }
        let ((milli, seen), unseen) = match self.weights.get(&pid) {
            Some(&w) => w,
            None => {
                let sample = self.refresh.sample().cloned();
                let sampler = self.refresh.sampler();
                let ctx = match &sample {
                    Some(s) => s.context.unwrap_or_else(|| sampler.group_context()),
                    None => sampler.group_context(),
                };
                let ours = sampler.group_of(ctx, pid);
                let our_nice = sampler.nice_of(pid);
                let skip = |p: u32| registered.contains(&p);
                let seen = sample.map_or((0, 0), |s| s.weighed_total(&ours, our_nice, skip));
                let w = (seen, crate::weigh::unseen(&ours, our_nice));
                self.weights.insert(pid, w);
                w
            }
        };
        signals::mean_weight_milli(milli, seen, runnable, unseen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C0: CpuId = CpuId(0);
    const C1: CpuId = CpuId(1);

    fn stat_line(state: char, ticks: u64, cpu: u32) -> String {
        // 52 fields as in Linux 6.x; only 3, 14, 15, 19, 20 and 39 matter.
        let mut f: Vec<String> = (1..=52).map(|i| i.to_string()).collect();
        f[1] = "(x)".into();
        f[2] = state.to_string();
        f[13] = ticks.to_string();
        f[14] = "0".into();
        f[18] = "0".into(); // nice
        f[19] = "1".into(); // threads
        f[38] = cpu.to_string();
        f.join(" ")
    }

    /// A fixture's `/proc` (a fresh directory of ours, removed on drop),
    /// and how many `/proc/stat` files it has written.
    struct Root(tempfile::TempDir, std::cell::Cell<u64>);
    impl Root {
        fn path(&self) -> &std::path::Path {
            self.0.path()
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        /// `/proc/stat` with these busy ticks and runnable count. The idle
        /// column gains 100 ticks (1 s) at each write, more than a window
        /// between two writes, so that the busy ticks alone set the busy
        /// time (`signals::BusyTracker` takes the larger of the two).
        fn stat(&self, busy: [u64; 2], running: u32) {
            let idle = 100 * self.1.replace(self.1.get() + 1);
            self.write(
                "stat",
                &format!(
                    "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 {} 0 0 {idle} 0 0 0 0 0 0\n\
                     cpu1 {} 0 0 {idle} 0 0 0 0 0 0\nprocs_running {running}\n",
                    busy[0], busy[1]
                ),
            );
        }
    }

    /// Processes 10, 11, 12 runnable (on CPUs 0, 1, 1), single-threaded.
    fn fixture() -> Root {
        let dir = tempfile::Builder::new()
            .prefix("dfsched-agent-scan-")
            .tempdir()
            .unwrap();
        let root = Root(dir, std::cell::Cell::new(0));
        for (pid, cpu) in [(10, 0), (11, 1), (12, 1)] {
            root.write(&format!("{pid}/stat"), &stat_line('R', 5, cpu));
        }
        root.stat([0, 0], 1);
        root
    }

    /// A window later: both CPUs busy by `busy` ticks more (10 = whole).
    fn window(root: &Root, scan: &mut SharedScan, busy: [u64; 2], running: u32) {
        std::thread::sleep(Duration::from_millis(110));
        root.stat(busy, running);
        assert_eq!(scan.get(Duration::ZERO, Registered::new), Scanned::Taken);
    }

    #[test]
    fn a_fresh_sample_is_reused_and_a_stale_one_retaken() {
        let root = fixture();
        let mut scan = SharedScan::new(root.path());
        let none = BTreeSet::new();
        assert_eq!(scan.get(Duration::ZERO, Registered::new), Scanned::Taken);
        // CPU 0 busy the whole window, 3 outside threads runnable (the
        // reader is the fourth): all 3 queued on CPU 0.
        window(&root, &mut scan, [20, 0], 4);
        let counted = |scan: &mut SharedScan| scan.for_client(1, &none, false).unwrap().counted;
        assert_eq!(counted(&mut scan), vec![(C0, 3)]);
        // Within the bound: the same sample, even though /proc changed and
        // the registered processes would say otherwise (not even asked).
        root.stat([40, 40], 9);
        let how = scan.get(Duration::from_secs(3600), || unreachable!());
        assert_eq!(how, Scanned::Reused);
        assert_eq!(counted(&mut scan), vec![(C0, 3)]);
    }

    #[test]
    fn quiet_windows_read_only_proc_stat_and_outside_load_starts_a_sweep() {
        let root = fixture();
        let mut scan = SharedScan::new(root.path());
        // The first sample and the refresh's baseline sweep.
        assert_eq!(scan.get(Duration::ZERO, Registered::new), Scanned::Taken);
        for _ in 0..3 {
            let files = scan.refresh.files_opened();
            window(&root, &mut scan, [0, 0], 1);
            assert_eq!(scan.refresh.files_opened() - files, 1, "/proc/stat only");
        }
        assert_eq!(scan.refresh.generation(), 0, "nothing weighed");
        // CPU 0 busy a whole window with 3 outside threads runnable: a
        // sweep starts at the window's third sample of it and publishes
        // (within a few more on a machine busy enough to cut its 1 ms
        // steps short).
        let mut busy = 0;
        for _ in 0..50 {
            busy += 20;
            window(&root, &mut scan, [busy, 0], 4);
            if scan.refresh.generation() > 0 {
                break;
            }
        }
        assert_eq!(scan.refresh.generation(), 1, "the load was weighed");
    }

    #[test]
    fn a_failed_sample_gives_no_load_and_is_not_retried_within_the_bound() {
        let root = fixture();
        let mut scan = SharedScan::new(root.path().join("missing"));
        let how = scan.get(Duration::from_secs(3600), Registered::new);
        assert_eq!(how, Scanned::Failed);
        assert_eq!(scan.for_client(1, &BTreeSet::new(), true), None);
        let how = scan.get(Duration::from_secs(3600), Registered::new);
        assert_eq!(how, Scanned::Reused);
    }

    #[test]
    fn registered_processes_cpu_time_and_threads_are_not_unmanaged() {
        let root = fixture();
        let mut scan = SharedScan::new(root.path());
        // Process 20 is registered with 2 threads placed on CPU 1.
        root.write("20/stat", &stat_line('R', 100, 1));
        let registered = || Registered::from([(20, vec![(C1, 2000)])]);
        assert_eq!(scan.get(Duration::ZERO, registered), Scanned::Taken);
        std::thread::sleep(Duration::from_millis(110));
        // Both CPUs busy; CPU 1's time is all process 20's (its ticks grew
        // by more than the window); 1 + 2 of its + 1 outside runnable.
        root.write("20/stat", &stat_line('R', 130, 1));
        root.stat([20, 20], 4);
        assert_eq!(scan.get(Duration::ZERO, registered), Scanned::Taken);
        let got = scan.for_client(1, &BTreeSet::from([20]), false).unwrap();
        assert_eq!(got.counted, vec![(C0, 1)]);
    }

    #[test]
    fn each_client_gets_the_load_weighed_against_its_own_group() {
        // 10, 11 and 12 in autogroup 5; client 20 in the same session,
        // client 21 in another. The refresh publishes its first sample a
        // gap after its baseline.
        let root = fixture();
        root.write("sys/kernel/sched_autogroup_enabled", "1");
        for (pid, group) in [(10, 5), (11, 5), (12, 5), (20, 5), (21, 6)] {
            root.write(&format!("{pid}/cgroup"), "0::/\n");
            root.write(
                &format!("{pid}/autogroup"),
                &format!("/autogroup-{group} nice 0"),
            );
        }
        root.write("20/stat", &stat_line('S', 1, 0));
        root.write("21/stat", &stat_line('S', 1, 0));
        let mut scan = SharedScan::new(root.path());
        let clients = || Registered::from([(20, Vec::new()), (21, Vec::new())]);
        scan.get(Duration::ZERO, clients);
        // The load must last the window (three samples) to be weighed; the
        // sweep then publishes within a few more samples (one on a quiet
        // machine; more when load cuts its 1 ms steps short).
        let mut k = 0;
        while scan.refresh.generation() == 0 && k < 50 {
            k += 1;
            std::thread::sleep(Duration::from_millis(110));
            root.stat([100 * k, 100 * k], 4);
            scan.get(Duration::ZERO, clients);
            if k < u64::from(DEFAULT_EXTERNAL_WINDOW) {
                assert_eq!(scan.refresh.generation(), 0, "weighed at sample {k}");
            }
        }
        assert_eq!(scan.refresh.generation(), 1, "the refresh published");
        let none = BTreeSet::new();
        // Both CPUs busy, 3 threads: 1.5 on each.
        let same = scan.for_client(20, &none, true).unwrap();
        assert_eq!(same.counted, vec![(C0, 2), (C1, 2)]);
        assert_eq!(same.milli, Some(vec![(C0, 1500), (C1, 1500)]));
        // Another session: the group weighs one thread in all, 333 each.
        let other = scan.for_client(21, &none, true).unwrap();
        assert_eq!(other.milli, Some(vec![(C0, 499), (C1, 499)]));
        // Not asked: not weighed. An unknown client: thread by thread.
        assert_eq!(scan.for_client(21, &none, false).unwrap().milli, None);
        let unknown = scan.for_client(99, &none, true).unwrap();
        assert_eq!(unknown.milli, Some(vec![(C0, 1500), (C1, 1500)]));
    }
}
