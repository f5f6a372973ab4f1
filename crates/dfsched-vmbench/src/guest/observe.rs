//! Reading the guest's kernel: sysfs topology files as they are (not
//! through dfsched's reader, which is what is under test) and every
//! thread's placement, from `/proc/PID/task/TID/status`
//! (`Cpus_allowed_list`) checked against `sched_getaffinity`.
//!
//! Invariant: a thread whose two readings disagree (beyond offline CPUs,
//! which `sched_getaffinity` leaves out) is an error, never silently one or
//! the other.

use dfsched_core::{CpuId, CpuSet};
use std::collections::BTreeSet;
use std::path::Path;

/// Reads a cpulist file.
pub fn cpulist(path: impl AsRef<Path>) -> Result<CpuSet, String> {
    let p = path.as_ref();
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{}: {text:?}: {e:?}", p.display()))
}

/// The topology sysfs shows, as the preset's [`crate::preset::Expected`].
pub fn sysfs_topology() -> Result<crate::preset::Expected, String> {
    let cpu_dir = Path::new("/sys/devices/system/cpu");
    let online = cpulist(cpu_dir.join("online"))?;
    let (mut llcs, mut l2s, mut smt) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for cpu in online.iter() {
        let dir = cpu_dir.join(format!("cpu{}", cpu.0));
        smt.insert(cpulist(dir.join("topology/thread_siblings_list"))?);
        for index in std::fs::read_dir(dir.join("cache")).map_err(|e| e.to_string())? {
            let index = index.map_err(|e| e.to_string())?.path();
            if !index
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("index"))
            {
                continue;
            }
            let level = std::fs::read_to_string(index.join("level")).map_err(|e| e.to_string())?;
            let shared = cpulist(index.join("shared_cpu_list"))?;
            match level.trim() {
                "3" => llcs.insert(shared),
                "2" => l2s.insert(shared),
                _ => false,
            };
        }
    }
    let mut nodes = BTreeSet::new();
    for n in std::fs::read_dir("/sys/devices/system/node").map_err(|e| e.to_string())? {
        let n = n.map_err(|e| e.to_string())?.path();
        let is_node = n
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_prefix("node"))
            .is_some_and(|rest| rest.parse::<u32>().is_ok());
        if is_node {
            nodes.insert(cpulist(n.join("cpulist"))?);
        }
    }
    Ok(crate::preset::Expected {
        online,
        llcs: llcs.into_iter().collect(),
        l2s: l2s.into_iter().collect(),
        nodes: nodes.into_iter().collect(),
        smt: smt.into_iter().collect(),
    })
}

/// One thread as the kernel sees it now.
#[derive(Clone, Debug)]
pub struct Thread {
    /// Its tid.
    pub tid: i32,
    /// Its name (`comm`).
    pub name: String,
    /// Its affinity mask as stored (`Cpus_allowed_list`: offline CPUs
    /// included; `sched_getaffinity` gives it ∩ the active CPUs).
    pub mask: CpuSet,
    /// The CPU it last ran on (`/proc/…/stat` field 39).
    pub cpu: u32,
}

/// `tid`'s mask from `sched_getaffinity`.
fn getaffinity(tid: i32) -> Result<CpuSet, String> {
    // SAFETY: an all-zero cpu_set_t is valid; sched_getaffinity writes at
    // most size_of::<cpu_set_t>() bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(format!(
            "sched_getaffinity({tid}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below CPU_SETSIZE, the set's capacity.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| CpuId(i as u32))
        .collect())
}

/// Every thread of process `pid` now; threads that exit while being read
/// are left out.
pub fn threads(pid: u32) -> Result<Vec<Thread>, String> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    for e in entries.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let name = field("Name:").unwrap_or_default();
        let list = field("Cpus_allowed_list:").ok_or(format!("{tid}: no Cpus_allowed_list"))?;
        let mask: CpuSet = list
            .parse()
            .map_err(|e| format!("{tid}: Cpus_allowed_list {list:?}: {e:?}"))?;
        let Ok(kernel) = getaffinity(tid) else {
            continue; // exited meanwhile
        };
        // sched_getaffinity gives the mask ∩ the active CPUs, /proc the mask
        // as stored: they may differ by offline CPUs only. The mask may also
        // have changed between the two reads: then read /proc again.
        let online = cpulist("/sys/devices/system/cpu/online")?;
        if kernel != mask.intersection(&online) {
            let again = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            let again: Option<CpuSet> = again
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|v| v.trim().parse().ok());
            if again.map(|m| m.intersection(&online)) != Some(kernel.clone()) {
                return Err(format!(
                    "tid {tid}: /proc says {mask}, sched_getaffinity says {kernel} (online {online})"
                ));
            }
        }
        // Field 39 counted after the ")" that ends comm (comm may hold spaces).
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let cpu = after
            .split_whitespace()
            .nth(36)
            .and_then(|c| c.parse().ok())
            .ok_or(format!("{tid}: no processor field in stat"))?;
        out.push(Thread {
            tid,
            name,
            mask,
            cpu,
        });
    }
    out.sort_by_key(|t| t.tid);
    Ok(out)
}

/// The index of the set in `domains` that holds all of `mask`, if one does.
pub fn domain_of(domains: &[CpuSet], mask: &CpuSet) -> Option<usize> {
    domains.iter().position(|d| mask.is_subset(d))
}
