//! The `smt-pair` placement (Kihm et al. §4.2 on Linux): threads whose
//! offline activity vectors are complementary go on the SMT siblings of
//! one core. The decision is `dfsched_core::smt_place`; this file is the
//! Linux part around it: the profile file (`dfsched profile` writes it),
//! the sibling CPUs of the topology, each thread's CPU time from
//! `/proc/PID/task/TID/schedstat`, and one affinity call per thread through
//! [`SysOps`].
//!
//! What it can and cannot claim: the vectors come from an offline Valgrind
//! profile (as the paper's prototype), aligned by each thread's CPU time,
//! not from hardware counters; a thread is matched to the profile by its
//! creation order (the main thread first, as Valgrind numbers them), so a
//! program whose threads start in a different order from run to run is
//! matched wrongly. Whether a placement helps is a property of the cache,
//! which only the simulator measures (`dfsched sim smt`).
//!
//! Two bodies use it: `dfsched smt-pair` places another running process
//! from outside ([`threads_of`] reads its threads), and the runtime's
//! `smt-pair` policy (`DFSCHED_POLICY=smt-pair`, `runtime/smt.rs`) places
//! its own process's registered threads from its balancer thread.
//!
//! Invariants: nothing is placed on a topology without SMT siblings (an
//! error, not a silent no-op), nor from a garbled profile (refused when it
//! is read); each thread gets a mask of exactly one CPU, a sibling of its
//! partner's.

use crate::error::Error;
use crate::sys::SysOps;
use dfsched_core::smt_place::{Position, SmtPlacer, SmtProfile};
use dfsched_core::{CpuId, CpuSet, Topology};
use std::path::Path;

pub use dfsched_core::smt_place::sibling_cores;

/// A thread to place: its tid, its position in creation order (the index
/// of its profile), and the CPU time it has used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfiledThread {
    /// Kernel thread id.
    pub tid: u64,
    /// Index into the profile's threads.
    pub index: usize,
    /// CPU time used so far, in nanoseconds.
    pub cpu_ns: u64,
}

/// The policy: a checked profile and the paper's overlap measure (the
/// decision is [`SmtPlacer`]'s, in the core).
#[derive(Clone, Debug)]
pub struct SmtPair {
    placer: SmtPlacer,
}

/// The refusal of a topology with no SMT siblings (by the command and by
/// the runtime's policy at start).
pub(crate) fn no_siblings(topology: &Topology) -> Error {
    Error::Config(format!(
        "smt-pair needs SMT siblings; the topology's CPUs {} have none",
        topology.cpus()
    ))
}

impl SmtPair {
    /// The policy over `profile`, refused (with the reason) if the profile
    /// is garbled (see [`SmtProfile::validate`]).
    pub fn new(profile: SmtProfile) -> Result<Self, Error> {
        let placer =
            SmtPlacer::new(profile).map_err(|e| Error::Config(format!("smt-pair profile: {e}")))?;
        Ok(SmtPair { placer })
    }

    /// Reads and checks a profile file written by `dfsched profile`; the
    /// error names the file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let io = |reason: String| Error::Io {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| io(e.to_string()))?;
        let profile: SmtProfile =
            serde_json::from_str(&text).map_err(|e| io(format!("not an SMT profile: {e}")))?;
        let placer =
            SmtPlacer::new(profile).map_err(|e| io(format!("not a usable SMT profile: {e}")))?;
        Ok(SmtPair { placer })
    }

    /// The profile.
    pub fn profile(&self) -> &SmtProfile {
        self.placer.profile()
    }

    /// Where each thread goes (tid, CPU): complementary threads on the
    /// siblings of one core. Refused on a topology without SMT siblings.
    pub fn plan(
        &self,
        topology: &Topology,
        threads: &[ProfiledThread],
    ) -> Result<Vec<(u64, CpuId)>, Error> {
        let cores = sibling_cores(topology);
        if cores.is_empty() {
            return Err(no_siblings(topology));
        }
        self.plan_on(&cores, threads)
    }

    /// [`SmtPair::plan`] on sibling cores already read (the runtime reads
    /// them once, at start).
    pub(crate) fn plan_on(
        &self,
        cores: &[Vec<CpuId>],
        threads: &[ProfiledThread],
    ) -> Result<Vec<(u64, CpuId)>, Error> {
        let positions: Vec<Position> = threads
            .iter()
            .map(|t| Position {
                index: t.index,
                cpu_ns: t.cpu_ns,
            })
            .collect();
        let plan = self
            .placer
            .plan(&positions, cores)
            .map_err(|e| Error::Config(format!("smt-pair profile: {e}")))?;
        Ok(plan
            .into_iter()
            .map(|(i, cpu)| (threads[i].tid, cpu))
            .collect())
    }

    /// [`SmtPair::plan`], then each thread's affinity set to its one CPU.
    /// Returns the placements made.
    pub fn apply(
        &self,
        topology: &Topology,
        threads: &[ProfiledThread],
        sys: &dyn SysOps,
    ) -> Result<Vec<(u64, CpuId)>, Error> {
        let plan = self.plan(topology, threads)?;
        for &(tid, cpu) in &plan {
            sys.set_affinity(tid, &CpuSet::single(cpu))?;
        }
        Ok(plan)
    }
}

/// The threads of process `pid` under `proc_root` (normally `/proc`), in
/// creation order (by tid: the kernel hands tids out in increasing order
/// until they wrap, which a profile-guided run of one program does not
/// reach), each with the CPU time from its `schedstat` (first field, ns).
/// A thread that exits while being read is left out.
pub fn threads_of(proc_root: &Path, pid: u32) -> Result<Vec<ProfiledThread>, Error> {
    let dir = proc_root.join(pid.to_string()).join("task");
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::Io {
        path: dir.clone(),
        reason: e.to_string(),
    })?;
    let mut tids: Vec<u64> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    let mut out = Vec::with_capacity(tids.len());
    for (index, tid) in tids.into_iter().enumerate() {
        let path = dir.join(tid.to_string()).join("schedstat");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // exited meanwhile
        };
        let cpu_ns = text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| Error::Io {
                path: path.clone(),
                reason: format!("not a schedstat line: {text:?}"),
            })?;
        out.push(ProfiledThread { tid, index, cpu_ns });
    }
    Ok(out)
}
