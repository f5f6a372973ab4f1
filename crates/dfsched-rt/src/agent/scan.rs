//! The agent's one `/proc` scan, shared by every client: the runnable
//! threads of the processes the agent does not have registered (the
//! *unmanaged* load), which each runtime used to count for itself on every
//! balancer pass.
//!
//! ```text
//!   report from P ──► scan older than the freshness bound?
//!                       yes: scan /proc once (skip the registered pids and
//!                            the agent), keep it per (pid, cpu)
//!                       no:  reuse the last scan
//!                     unmanaged = Σ of the kept pairs whose pid is not
//!                                 registered *now*
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
//! Invariants: at most one scan runs at a time and none starts within the
//! bound of the last one (failed scans included, so a broken `/proc` is not
//! retried on every report); a scan is kept by process, so a process
//! registered after it is taken out of every later view without a new scan.
//! A process that unregisters (its runtime stopped, it still lives) is
//! missing from the unmanaged load until the next scan, at most one bound.

use crate::procfs::LoadSampler;
use dfsched_core::CpuId;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The default freshness bound of the shared scan, in milliseconds: half
/// the runtimes' default balancer interval (see the module doc for why).
pub const DEFAULT_SCAN_FRESH_MS: u64 = 50;

/// A scan by process: `(pid, cpu, runnable threads)`, in pid then CPU
/// order.
pub(super) type ByProcess = [(u32, CpuId, u32)];

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

/// The last scan and the sampler's buffers.
#[derive(Debug)]
pub(super) struct SharedScan {
    sampler: LoadSampler,
    /// When the last scan (successful or not) started.
    taken: Option<Instant>,
    /// Its result by process: `(pid, cpu, runnable threads)`; `None` if it
    /// failed.
    by_process: Option<Vec<(u32, CpuId, u32)>>,
}

impl SharedScan {
    pub(super) fn new(proc_root: impl Into<PathBuf>) -> SharedScan {
        SharedScan {
            sampler: LoadSampler::new(proc_root),
            taken: None,
            by_process: None,
        }
    }

    /// The scan to answer from, taken now if the last one is older than
    /// `fresh` (or there is none); `skip` (the registered pids and the
    /// agent's) is only asked for when a scan is taken.
    pub(super) fn get(
        &mut self,
        fresh: Duration,
        skip: impl FnOnce() -> BTreeSet<u32>,
    ) -> (Option<&ByProcess>, Scanned) {
        let now = Instant::now();
        let stale = match self.taken {
            Some(t) => now.saturating_duration_since(t) >= fresh,
            None => true,
        };
        let scanned = if stale {
            let skip = skip();
            self.taken = Some(now);
            self.by_process = self
                .sampler
                .sample_by_process(|pid| skip.contains(&pid))
                .ok();
            if self.by_process.is_some() {
                Scanned::Taken
            } else {
                Scanned::Failed
            }
        } else {
            Scanned::Reused
        };
        (self.by_process.as_deref(), scanned)
    }
}

/// The unmanaged load per CPU: the scan's runnable threads of every process
/// not in `registered`, CPUs with none left out, in CPU order.
pub(super) fn unmanaged(by_process: &ByProcess, registered: &BTreeSet<u32>) -> Vec<(CpuId, u32)> {
    let mut per_cpu: BTreeMap<CpuId, u32> = BTreeMap::new();
    for &(pid, cpu, n) in by_process {
        if !registered.contains(&pid) {
            *per_cpu.entry(cpu).or_default() += n;
        }
    }
    per_cpu.into_iter().filter(|&(_, n)| n > 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(state: char, threads: u64, cpu: u32) -> String {
        // 52 fields as in Linux 6.x; only 3, 20 and 39 matter here.
        let mut f: Vec<String> = (1..=52).map(|i| i.to_string()).collect();
        f[1] = "(x)".into();
        f[2] = state.to_string();
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
        let skip = || BTreeSet::from([12]);
        let (got, how) = scan.get(Duration::from_secs(3600), skip);
        assert_eq!(how, Scanned::Taken);
        assert_eq!(got.unwrap(), &[(10, CpuId(0), 1), (11, CpuId(1), 1)]);
        // Within the bound: the same scan, even though /proc changed and
        // the skip set would say otherwise (it is not even asked).
        std::fs::remove_dir_all(root.0.join("10")).unwrap();
        let (got, how) = scan.get(Duration::from_secs(3600), || unreachable!());
        assert_eq!(how, Scanned::Reused);
        assert_eq!(got.unwrap().len(), 2);
        // A zero bound rescans.
        let (got, how) = scan.get(Duration::ZERO, skip);
        assert_eq!(how, Scanned::Taken);
        assert_eq!(got.unwrap(), &[(11, CpuId(1), 1)]);
    }

    #[test]
    fn a_failed_scan_gives_no_sample_and_is_not_retried_within_the_bound() {
        let root = fixture();
        let mut scan = SharedScan::new(root.0.join("missing"));
        let (got, how) = scan.get(Duration::from_secs(3600), BTreeSet::new);
        assert_eq!((got, how), (None, Scanned::Failed));
        let (got, how) = scan.get(Duration::from_secs(3600), BTreeSet::new);
        assert_eq!((got, how), (None, Scanned::Reused));
    }

    #[test]
    fn processes_registered_after_the_scan_are_taken_out() {
        let by_process = [(10, CpuId(0), 2), (11, CpuId(1), 1), (12, CpuId(1), 3)];
        assert_eq!(
            unmanaged(&by_process, &BTreeSet::new()),
            vec![(CpuId(0), 2), (CpuId(1), 4)]
        );
        assert_eq!(
            unmanaged(&by_process, &BTreeSet::from([10, 12])),
            vec![(CpuId(1), 1)]
        );
        assert!(unmanaged(&by_process, &BTreeSet::from([10, 11, 12])).is_empty());
    }
}
