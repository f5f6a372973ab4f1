//! Sharing detection and the sharing sets' homes.
//!
//! Two registered processes *share* when both hold the same pipe or socket
//! (the same `pipe:[N]` / `socket:[N]` inode among their `/proc/PID/fd`
//! links); sharing is closed transitively (union-find), and each resulting
//! **sharing set** of two or more processes is treated as one DF: it gets
//! one home, and its members' runtimes narrow their threads' allowed CPUs to
//! it.
//!
//! The home rule is the core's (`dfsched-core/src/home.rs`), at the
//! granularity the agent sees — whole processes and their reported load:
//! - `A`: the intersection of the members' allowed CPUs (their union when
//!   that is empty);
//! - `r`: the set's runnable threads, Σ of its members' reported load
//!   rounded up to whole threads (at least 1);
//! - `base`: every other registered process's reported load;
//! - **heavy** when `base(A) + 1000·r ≥ heavy_load_milli·|A|`: the least
//!   loaded CPU of `A` (ties: lowest id);
//! - **light** otherwise: the smallest cache domain `D` that holds the set
//!   (`⌊base(D∩A)/1000⌋ + r ≤ |D∩A|`), ties broken by least `base`, then
//!   lowest domain id; the whole of `A` when none does;
//! - **sticky**: a set keeps its home while the home still passes the rule's
//!   keep test (heavy: one CPU of `A`; light: it holds the set and no
//!   strictly smaller domain inside it does), so homes do not flap on
//!   unchanged load.
//!
//! Inodes that never join processes: the agent connections' own sockets
//! (inherited by a forked child), and inodes also held by a process that is
//! not registered ([`held_outside`]: the environment, not a channel).
//!
//! Invariants: a home is never empty and always within `A`; an ignored
//! inode never joins processes.

use dfsched_core::{CpuId, CpuSet, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One runnable thread, in thousandths.
const TASK_MILLI: u64 = 1000;

/// The pipe and socket inodes among `pid`'s open files, ascending and
/// without repeats; empty if the process is gone or unreadable.
pub fn shared_inodes(proc_root: &Path, pid: u32) -> Vec<u64> {
    let dir = proc_root.join(pid.to_string()).join("fd");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<u64> = entries
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| parse_fd_link(target.to_str()?))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The inode of a `pipe:[N]` or `socket:[N]` link target.
pub fn parse_fd_link(target: &str) -> Option<u64> {
    let rest = target
        .strip_prefix("pipe:[")
        .or_else(|| target.strip_prefix("socket:["))?;
    rest.strip_suffix(']')?.parse().ok()
}

/// Which of `candidates` some process other than `skip` holds, among the
/// processes whose `/proc/PID/fd` this process may read (all for root, its
/// own user's otherwise).
///
/// Why: an inode also held outside the registered processes is part of
/// their environment, not a channel between them — the pipe of the shell's
/// or the test harness's stderr they all inherited, a build tool's
/// jobserver pipe. A pipeline `a | b` or a socket pair between a server and
/// its clients is held by those processes alone once their parent has
/// closed its copies.
pub fn held_outside(
    proc_root: &Path,
    skip: &BTreeSet<u32>,
    candidates: &BTreeSet<u64>,
) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if skip.contains(&pid) {
            continue;
        }
        for ino in shared_inodes(proc_root, pid) {
            if candidates.contains(&ino) {
                out.insert(ino);
            }
        }
        if out.len() == candidates.len() {
            break;
        }
    }
    out
}

/// A component of the sharing relation: processes and the inodes joining
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// Member pids, ascending; at least two.
    pub members: Vec<u32>,
    /// The inodes held by two or more members, ascending.
    pub inodes: Vec<u64>,
}

/// The components of two or more processes, given each process's inodes,
/// ignoring the inodes in `ignore`; ordered by their smallest pid.
pub fn components(fds: &BTreeMap<u32, Vec<u64>>, ignore: &BTreeSet<u64>) -> Vec<Component> {
    let pids: Vec<u32> = fds.keys().copied().collect();
    let mut parent: Vec<usize> = (0..pids.len()).collect();
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    // inode → (first holder's index, whether a second holder was seen).
    let mut holder: BTreeMap<u64, (usize, bool)> = BTreeMap::new();
    for (i, inodes) in fds.values().enumerate() {
        for &ino in inodes {
            if ignore.contains(&ino) {
                continue;
            }
            match holder.get_mut(&ino) {
                None => {
                    holder.insert(ino, (i, false));
                }
                Some((first, shared)) => {
                    *shared = true;
                    let (a, b) = (find(&mut parent, *first), find(&mut parent, i));
                    // The smaller index becomes the root, so roots (and the
                    // output order) do not depend on the order of merges.
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
    }
    let mut by_root: BTreeMap<usize, Component> = BTreeMap::new();
    for (i, &pid) in pids.iter().enumerate() {
        let root = find(&mut parent, i);
        by_root
            .entry(root)
            .or_insert_with(|| Component {
                members: Vec::new(),
                inodes: Vec::new(),
            })
            .members
            .push(pid);
    }
    for (ino, (first, shared)) in holder {
        if shared {
            let root = find(&mut parent, first);
            if let Some(c) = by_root.get_mut(&root) {
                c.inodes.push(ino);
            }
        }
    }
    by_root
        .into_values()
        .filter(|c| c.members.len() >= 2)
        .collect()
}

/// What the home rule needs to know about one sharing set.
#[derive(Clone, Debug)]
pub struct SetShape<'a> {
    /// Load per CPU of every registered process outside the set, in
    /// thousandths.
    pub base: &'a BTreeMap<CpuId, u64>,
    /// `A`: the CPUs the set may use; never empty.
    pub allowed: &'a CpuSet,
    /// `r`: its runnable threads, at least 1.
    pub runnable: u64,
}

impl SetShape<'_> {
    fn base_of(&self, cpus: &CpuSet) -> u64 {
        cpus.iter()
            .map(|c| self.base.get(&c).copied().unwrap_or(0))
            .sum()
    }

    fn heavy(&self, heavy_load_milli: u64) -> bool {
        let load = self.base_of(self.allowed) + self.runnable * TASK_MILLI;
        load >= heavy_load_milli.saturating_mul(self.allowed.len() as u64)
    }

    fn holds(&self, cpus: &CpuSet) -> bool {
        !cpus.is_empty() && self.base_of(cpus) / TASK_MILLI + self.runnable <= cpus.len() as u64
    }

    /// The smallest domain (∩ A) that holds the set, strictly inside
    /// `within` if given: fewest CPUs, then least base, then lowest id.
    fn smallest_holding(&self, topo: &Topology, within: Option<&CpuSet>) -> Option<CpuSet> {
        topo.domains()
            .iter()
            .enumerate()
            .map(|(id, d)| (id, d.cpus.intersection(self.allowed)))
            .filter(|(_, cpus)| match within {
                Some(w) => cpus.is_subset(w) && cpus.len() < w.len(),
                None => true,
            })
            .filter(|(_, cpus)| self.holds(cpus))
            .min_by_key(|(id, cpus)| (cpus.len(), self.base_of(cpus), *id))
            .map(|(_, cpus)| cpus)
    }
}

/// The set's home: `current` if it passes the keep test, else a fresh
/// choice (see the module doc). Never empty, always within `shape.allowed`.
pub fn home_for(
    topo: &Topology,
    heavy_load_milli: u64,
    shape: &SetShape<'_>,
    current: Option<&CpuSet>,
) -> CpuSet {
    let heavy = shape.heavy(heavy_load_milli);
    if let Some(h) = current {
        let keep = !h.is_empty()
            && h.is_subset(shape.allowed)
            && if heavy {
                h.len() == 1
            } else {
                shape.holds(h) && shape.smallest_holding(topo, Some(h)).is_none()
            };
        if keep {
            return h.clone();
        }
    }
    if heavy {
        let cpu = shape
            .allowed
            .iter()
            .min_by_key(|c| (shape.base.get(c).copied().unwrap_or(0), c.0))
            .expect("A is never empty");
        return CpuSet::single(cpu);
    }
    shape
        .smallest_holding(topo, None)
        .unwrap_or_else(|| shape.allowed.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn fd_links_name_pipes_and_sockets_only() {
        assert_eq!(parse_fd_link("pipe:[123]"), Some(123));
        assert_eq!(parse_fd_link("socket:[9]"), Some(9));
        assert_eq!(parse_fd_link("anon_inode:[eventfd]"), None);
        assert_eq!(parse_fd_link("/dev/null"), None);
        assert_eq!(parse_fd_link("pipe:[12"), None);
    }

    #[test]
    fn processes_join_transitively_through_shared_inodes() {
        let fds: BTreeMap<u32, Vec<u64>> = [
            (10, vec![1, 2]),
            (20, vec![2, 3]),
            (30, vec![3]),
            (40, vec![4]),
            (50, vec![5, 7]),
            (60, vec![5]),
            (70, vec![7, 99]),
        ]
        .into_iter()
        .collect();
        let got = components(&fds, &BTreeSet::new());
        assert_eq!(
            got,
            vec![
                Component {
                    members: vec![10, 20, 30],
                    inodes: vec![2, 3]
                },
                Component {
                    members: vec![50, 60, 70],
                    inodes: vec![5, 7]
                },
            ]
        );
        // Ignoring inode 5 (say, an agent connection) detaches 60.
        let got = components(&fds, &[5].into_iter().collect());
        assert_eq!(got[1].members, vec![50, 70]);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn this_process_has_its_pipe_inode_in_proc() {
        let (r, _w) = std::io::pipe().unwrap();
        use std::os::fd::AsRawFd;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", r.as_raw_fd())).unwrap();
        let ino = parse_fd_link(link.to_str().unwrap()).unwrap();
        let mine = shared_inodes(Path::new("/proc"), std::process::id());
        assert!(mine.contains(&ino));
        assert!(shared_inodes(Path::new("/proc"), u32::MAX).is_empty());
    }

    #[test]
    fn a_light_set_gets_the_smallest_domain_that_holds_it() {
        // 2 LLCs of 2 cores of 2 SMT threads: CPUs 0-7.
        let topo = Topology::test(1, 2, 2, 2);
        let base: BTreeMap<CpuId, u64> = [(CpuId(0), 1000), (CpuId(1), 1000)].into();
        let all = set("0-7");
        let shape = |r| SetShape {
            base: &base,
            allowed: &all,
            runnable: r,
        };
        // One thread: a whole free CPU's leaf, the least loaded, lowest id.
        assert_eq!(home_for(&topo, 2000, &shape(1), None), set("2"));
        // Two threads: the free core 2-3.
        assert_eq!(home_for(&topo, 2000, &shape(2), None), set("2-3"));
        // Three: CPUs 0-3 hold only 2 more, so the other LLC.
        assert_eq!(home_for(&topo, 2000, &shape(3), None), set("4-7"));
        // Nine threads on 8 CPUs with 2 busy: nothing holds them, but the
        // load is light (11 < 16): the whole allowed set.
        assert_eq!(home_for(&topo, 2000, &shape(9), None), all);
    }

    #[test]
    fn a_heavy_set_gets_the_least_loaded_cpu_and_keeps_it() {
        let topo = Topology::test(1, 1, 2, 1);
        let base: BTreeMap<CpuId, u64> = [(CpuId(0), 3000)].into();
        let all = set("0-1");
        let shape = SetShape {
            base: &base,
            allowed: &all,
            runnable: 2,
        };
        // 3000 + 2000 ≥ 2000 × 2: heavy, CPU 1 is the least loaded.
        assert_eq!(home_for(&topo, 2000, &shape, None), set("1"));
        // Sticky: CPU 0 is still a CPU of A, so a set already there stays.
        assert_eq!(home_for(&topo, 2000, &shape, Some(&set("0"))), set("0"));
        // A home of two CPUs fails the heavy keep test.
        assert_eq!(home_for(&topo, 2000, &shape, Some(&all)), set("1"));
    }

    #[test]
    fn a_light_home_is_kept_while_it_holds_and_nothing_smaller_does() {
        let topo = Topology::test(1, 2, 2, 2);
        let base = BTreeMap::new();
        let all = set("0-7");
        let two = SetShape {
            base: &base,
            allowed: &all,
            runnable: 2,
        };
        // 6-7 holds two threads and no single CPU does: kept, although
        // 0-1 has the lower id.
        assert_eq!(home_for(&topo, 2000, &two, Some(&set("6-7"))), set("6-7"));
        // 4-7 holds them but 4-5 (inside it) does too: re-chosen.
        assert_eq!(home_for(&topo, 2000, &two, Some(&set("4-7"))), set("0-1"));
        // A home outside A is never kept.
        let some = set("0-3");
        let confined = SetShape {
            allowed: &some,
            ..two
        };
        assert_eq!(
            home_for(&topo, 2000, &confined, Some(&set("6-7"))),
            set("0-1")
        );
    }
}
