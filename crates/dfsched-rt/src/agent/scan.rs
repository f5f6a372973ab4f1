//! The agent's one `/proc` scan, shared by every client: the runnable
//! threads of the processes the agent does not have registered (the
//! *unmanaged* load), which each runtime used to count for itself on every
//! balancer pass.
//!
//! ```text
//!   report from P ──► scan older than the freshness bound?
//!                       yes: scan /proc once (skip the registered pids and
//!                            the agent), keep each runnable thread with its
//!                            pid, CPU, nice and its process's CFS group
//!                       no:  reuse the last scan
//!                     unmanaged       = the kept threads whose pid is not
//!                                       registered *now*, counted per CPU
//!                     unmanaged_milli = the same weighed against P's own
//!                                       group (read from /proc/P), if asked
//! ```
//!
//! Why a freshness bound of half the runtimes' 100 ms balancer interval
//! ([`DEFAULT_SCAN_FRESH_MS`]): every pass then sees load at most 50 ms old,
//! well inside the interval over which it acts, while N clients whose
//! passes fall at unrelated moments cost at most one scan per 50 ms — two
//! per interval, not N — and an agent nobody asks scans nothing. A bound of
//! a whole interval would save at most one more scan per interval but could
//! hand a pass a sample already one interval old; a much shorter one gives
//! the sharing back.
//!
//! Why the weighing is per client: a thread of P's own CFS group (its
//! session's autogroup, its cpu cgroup) competes with P's threads one by
//! one, while another group competes as one entity (see `crate::weigh`);
//! which is which depends on P. The scan is shared, the weighing (a pass
//! over the kept threads and two small reads of P's group files) is not.
//!
//! Invariants: at most one scan runs at a time and none starts within the
//! bound of the last one (failed scans included, so a broken `/proc` is not
//! retried on every report); a scan is kept by thread with its pid, so a
//! process registered after it is taken out of every later view without a
//! new scan (its threads still count in their group's size, as they are
//! still runnable). A process that unregisters (its runtime stopped, it
//! still lives) is missing from the unmanaged load until the next scan, at
//! most one bound.

use crate::procfs::{LoadSampler, OutsideSample};
use crate::weigh::SchedGroup;
use dfsched_core::CpuId;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The default freshness bound of the shared scan, in milliseconds: half
/// the runtimes' default balancer interval (see the module doc for why).
pub const DEFAULT_SCAN_FRESH_MS: u64 = 50;

/// What [`SharedScan::get`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scanned {
    /// The last scan was fresh enough and was reused.
    Reused,
    /// A new scan was taken.
    Taken,
    /// A new scan was tried and failed (`/proc` could not be listed).
    Failed,
}

/// One client's share of the scan: the unmanaged load counted and, if
/// asked, weighed against the client's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ForClient {
    /// Runnable threads per CPU, CPUs with none left out, in CPU order.
    pub(super) counted: Vec<(CpuId, u32)>,
    /// Thousandths of one of our threads per CPU, if asked.
    pub(super) milli: Option<Vec<(CpuId, u64)>>,
}

/// The last scan and the sampler's buffers.
#[derive(Debug)]
pub(super) struct SharedScan {
    sampler: LoadSampler,
    /// When the last scan (successful or not) started.
    taken: Option<Instant>,
    /// Its result; `None` if it failed.
    sample: Option<OutsideSample>,
}

impl SharedScan {
    pub(super) fn new(proc_root: impl Into<PathBuf>) -> SharedScan {
        SharedScan {
            sampler: LoadSampler::new(proc_root),
            taken: None,
            sample: None,
        }
    }

    /// Takes a new scan if the last one is older than `fresh` (or there is
    /// none); `skip` (the registered pids and the agent's) is only asked for
    /// when a scan is taken.
    pub(super) fn get(&mut self, fresh: Duration, skip: impl FnOnce() -> BTreeSet<u32>) -> Scanned {
        let now = Instant::now();
        let stale = match self.taken {
            Some(t) => now.saturating_duration_since(t) >= fresh,
            None => true,
        };
        if !stale {
            return Scanned::Reused;
        }
        let skip = skip();
        self.taken = Some(now);
        self.sample = self.sampler.sample_outside(|pid| skip.contains(&pid)).ok();
        if self.sample.is_some() {
            Scanned::Taken
        } else {
            Scanned::Failed
        }
    }

    /// The last scan's unmanaged load for client `pid`: its threads of
    /// processes not in `registered`, counted, and weighed against `pid`'s
    /// CFS group if `weighed`; `None` if the last scan failed.
    pub(super) fn for_client(
        &mut self,
        pid: u32,
        registered: &BTreeSet<u32>,
        weighed: bool,
    ) -> Option<ForClient> {
        let sample = self.sample.as_ref()?;
        let skip = |p: u32| registered.contains(&p);
        let counted = sample.count(skip);
        let milli = weighed.then(|| {
            let ours = match sample.context {
                Some(ctx) => self.sampler.group_of(ctx, pid),
                None => SchedGroup::Unknown,
            };
            let our_nice = self.sampler.nice_of(pid);
            sample.weigh(&ours, our_nice, skip)
        });
        Some(ForClient { counted, milli })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(state: char, threads: u64, cpu: u32) -> String {
        // 52 fields as in Linux 6.x; only 3, 19, 20 and 39 matter here.
        let mut f: Vec<String> = (1..=52).map(|i| i.to_string()).collect();
        f[1] = "(x)".into();
        f[2] = state.to_string();
        f[18] = "0".into(); // nice
        f[19] = threads.to_string();
        f[38] = cpu.to_string();
        f.join(" ")
    }

    struct Root(PathBuf);
    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn fixture() -> Root {
        let root = std::env::temp_dir().join(format!(
            "dfsched-agent-scan-{}-{}",
            std::process::id(),
            crate::sys::gettid()
        ));
        let _ = std::fs::remove_dir_all(&root);
        for (pid, cpu) in [(10, 0), (11, 1), (12, 1)] {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat_line('R', 1, cpu)).unwrap();
        }
        Root(root)
    }

    #[test]
    fn a_fresh_scan_is_reused_and_a_stale_one_retaken() {
        let root = fixture();
        let mut scan = SharedScan::new(&root.0);
        let none = BTreeSet::new();
        let skip = || BTreeSet::from([12]);
        assert_eq!(scan.get(Duration::from_secs(3600), skip), Scanned::Taken);
        let counted = |scan: &mut SharedScan| scan.for_client(1, &none, false).unwrap().counted;
        assert_eq!(counted(&mut scan), vec![(CpuId(0), 1), (CpuId(1), 1)]);
        // Within the bound: the same scan, even though /proc changed and
        // the skip set would say otherwise (it is not even asked).
        std::fs::remove_dir_all(root.0.join("10")).unwrap();
        let how = scan.get(Duration::from_secs(3600), || unreachable!());
        assert_eq!(how, Scanned::Reused);
        assert_eq!(counted(&mut scan).len(), 2);
        // A zero bound rescans.
        assert_eq!(scan.get(Duration::ZERO, skip), Scanned::Taken);
        assert_eq!(counted(&mut scan), vec![(CpuId(1), 1)]);
    }

    #[test]
    fn a_failed_scan_gives_no_sample_and_is_not_retried_within_the_bound() {
        let root = fixture();
        let mut scan = SharedScan::new(root.0.join("missing"));
        let how = scan.get(Duration::from_secs(3600), BTreeSet::new);
        assert_eq!(how, Scanned::Failed);
        assert_eq!(scan.for_client(1, &BTreeSet::new(), true), None);
        let how = scan.get(Duration::from_secs(3600), BTreeSet::new);
        assert_eq!(how, Scanned::Reused);
    }

    #[test]
    fn processes_registered_after_the_scan_are_taken_out() {
        let root = fixture();
        let mut scan = SharedScan::new(&root.0);
        scan.get(Duration::ZERO, BTreeSet::new);
        let counted = |scan: &mut SharedScan, registered: &[u32]| {
            let registered: BTreeSet<u32> = registered.iter().copied().collect();
            scan.for_client(1, &registered, false).unwrap().counted
        };
        assert_eq!(counted(&mut scan, &[]), vec![(CpuId(0), 1), (CpuId(1), 2)]);
        assert_eq!(counted(&mut scan, &[10, 12]), vec![(CpuId(1), 1)]);
        assert!(counted(&mut scan, &[10, 11, 12]).is_empty());
    }

    #[test]
    fn each_client_gets_the_load_weighed_against_its_own_group() {
        // 10, 11 and 12 in autogroup 5 (3 threads: 1 on CPU 0, 2 on CPU 1);
        // client 20 in the same session, client 21 in another.
        let root = fixture();
        let write = |rel: &str, text: &str| {
            let p = root.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("sys/kernel/sched_autogroup_enabled", "1");
        for (pid, group) in [(10, 5), (11, 5), (12, 5), (20, 5), (21, 6)] {
            write(&format!("{pid}/cgroup"), "0::/\n");
            write(
                &format!("{pid}/autogroup"),
                &format!("/autogroup-{group} nice 0"),
            );
        }
        let mut scan = SharedScan::new(&root.0);
        scan.get(Duration::ZERO, BTreeSet::new);
        let none = BTreeSet::new();
        let same = scan.for_client(20, &none, true).unwrap();
        assert_eq!(same.milli, Some(vec![(CpuId(0), 1000), (CpuId(1), 2000)]));
        let other = scan.for_client(21, &none, true).unwrap();
        assert_eq!(other.milli, Some(vec![(CpuId(0), 333), (CpuId(1), 666)]));
        assert_eq!(other.counted, vec![(CpuId(0), 1), (CpuId(1), 2)]);
        // Not asked: not weighed. An unknown client: thread by thread.
        assert_eq!(scan.for_client(21, &none, false).unwrap().milli, None);
        let unknown = scan.for_client(99, &none, true).unwrap();
        assert_eq!(
            unknown.milli,
            Some(vec![(CpuId(0), 1000), (CpuId(1), 2000)])
        );
        // 12 registered since the scan: out of the load, still in its
        // group's size.
        let registered = BTreeSet::from([12]);
        let other = scan.for_client(21, &registered, true).unwrap();
        assert_eq!(other.milli, Some(vec![(CpuId(0), 333), (CpuId(1), 333)]));
    }
}
