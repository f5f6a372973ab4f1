//! Sharing detection and the sharing sets' homes.
//!
//! Two registered processes *share* when both hold the same pipe or socket
//! (the same `pipe:[N]` / `socket:[N]` inode among their `/proc/PID/fd`
//! links); sharing is closed transitively (union-find), and each resulting
//! **sharing set** of two or more processes is treated as one DF: it gets
//! one home, and its members' runtimes narrow their threads' allowed CPUs to
//! it.
//!
//! The home rule is the core's, called through `dfsched_core::rules`
//! ([`dfsched_core::rules::df_group_home`], the engine's own code for a DF
//! group), at the granularity the agent sees — whole processes and their
//! reported load:
//! - `A`: the members' allowed CPUs ([`dfsched_core::rules::group_allowed`]:
//!   their intersection, their union when that is empty);
//! - `r`: the set's runnable threads, Σ of its members' reported load
//!   rounded up to whole threads (at least 1);
//! - `base`: every other registered process's reported load;
//! - the set keeps its home (a cache domain) while the rule's keep test
//!   passes, so homes do not flap on unchanged load.
//!
//! Inodes that never join processes: the agent connections' own sockets
//! (inherited by a forked child), and inodes also held by a process that is
//! not registered ([`held_outside`]: the environment, not a channel).
//!
//! Invariants: a home is never empty and always within `A`; an ignored
//! inode never joins processes.

use dfsched_core::rules::{self, GroupLoad, Home};
use dfsched_core::{Config, CpuId, CpuSet, DomainId, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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

/// One registered process as the home rule sees it: its reported load
/// and its allowed CPUs.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    /// Its pid.
    pub pid: u32,
    /// Its reported load, thousandths per CPU.
    pub load_milli: &'a [(CpuId, u64)],
    /// The CPUs it may use.
    pub allowed: &'a CpuSet,
}

/// The home of the sharing set `members` among the registered `procs`
/// (see the module doc): the core's DF-group rule fed the set's `A`, its
/// runnable threads and the others' load; `current` is kept while the
/// rule's keep test passes. A set whose members allow no CPU of `topo` is
/// homed as if it could use every CPU.
pub fn set_home<'a>(
    topo: &Topology,
    config: &Config,
    procs: impl IntoIterator<Item = Member<'a>>,
    members: &[u32],
    current: Option<DomainId>,
) -> Home {
    let mut base: BTreeMap<CpuId, u64> = BTreeMap::new();
    let mut own_milli = 0u64;
    let mut allowed_sets = Vec::new();
    for p in procs {
        if members.contains(&p.pid) {
            own_milli = own_milli.saturating_add(p.load_milli.iter().map(|&(_, m)| m).sum());
            allowed_sets.push(p.allowed);
        } else {
            for &(cpu, m) in p.load_milli {
                let e = base.entry(cpu).or_default();
                *e = e.saturating_add(m);
            }
        }
    }
    let allowed = rules::group_allowed(allowed_sets)
        .filter(|a| !a.intersection(topo.cpus()).is_empty())
        .unwrap_or_else(|| topo.cpus().clone());
    let group = GroupLoad {
        base: &base,
        allowed: &allowed,
        runnable: own_milli.div_ceil(rules::TASK_MILLI).max(1),
    };
    rules::df_group_home(topo, config, &group, current).unwrap_or_else(|| Home {
        domain: topo.root(),
        cpus: topo.cpus().clone(),
    })
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

    /// The set {1, 2} beside process 3 carrying `base`, each member
    /// reporting `r_each` threads' load spread over `allowed`.
    fn home(
        topo: &Topology,
        base: &[(CpuId, u64)],
        allowed: &CpuSet,
        r: u64,
        current: Option<&str>,
    ) -> CpuSet {
        let own = [(CpuId(0), r * 1000)];
        let all = topo.cpus().clone();
        let procs = [
            Member {
                pid: 1,
                load_milli: &own,
                allowed,
            },
            Member {
                pid: 2,
                load_milli: &[],
                allowed,
            },
            Member {
                pid: 3,
                load_milli: base,
                allowed: &all,
            },
        ];
        let current = current.map(|c| topo.smallest_holding(&set(c)));
        set_home(topo, &Config::default(), procs, &[1, 2], current).cpus
    }

    #[test]
    fn a_light_set_gets_the_smallest_domain_that_holds_it() {
        // 2 LLCs of 2 cores of 2 SMT threads: CPUs 0-7.
        let topo = Topology::test(1, 2, 2, 2);
        let base = [(CpuId(0), 1000), (CpuId(1), 1000)];
        let all = set("0-7");
        // One thread: a whole free CPU's leaf, the least loaded, in the
        // emptier LLC (ties between free CPUs go to the least-loaded
        // branch: see dfsched-core's home::least_loaded_spread).
        assert_eq!(home(&topo, &base, &all, 1, None), set("4"));
        // Two threads: a free core of the emptier LLC, not 2-3 beside the
        // busy one.
        assert_eq!(home(&topo, &base, &all, 2, None), set("4-5"));
        // Three: CPUs 0-3 hold only 2 more, so the other LLC.
        assert_eq!(home(&topo, &base, &all, 3, None), set("4-7"));
        // Nine threads on 8 CPUs with 2 busy: nothing holds them, but the
        // load is light (11 < 16): the whole allowed set.
        assert_eq!(home(&topo, &base, &all, 9, None), all);
    }

    #[test]
    fn a_heavy_set_gets_the_least_loaded_cpu_and_keeps_it() {
        let topo = Topology::test(1, 1, 2, 1);
        let base = [(CpuId(0), 3000)];
        let all = set("0-1");
        // 3000 + 2000 ≥ 2000 × 2: heavy, CPU 1 is the least loaded.
        assert_eq!(home(&topo, &base, &all, 2, None), set("1"));
        // Sticky: CPU 0 is still a CPU of A, so a set already there stays.
        assert_eq!(home(&topo, &base, &all, 2, Some("0")), set("0"));
        // A home of two CPUs fails the heavy keep test.
        assert_eq!(home(&topo, &base, &all, 2, Some("0-1")), set("1"));
    }

    #[test]
    fn a_light_home_is_kept_while_it_holds_and_nothing_smaller_does() {
        let topo = Topology::test(1, 2, 2, 2);
        let all = set("0-7");
        // 6-7 holds two threads and no single CPU does: kept, although
        // 0-1 has the lower id.
        assert_eq!(home(&topo, &[], &all, 2, Some("6-7")), set("6-7"));
        // 4-7 holds them but 4-5 (inside it) does too: re-chosen.
        assert_eq!(home(&topo, &[], &all, 2, Some("4-7")), set("0-1"));
        // A home outside A is never kept.
        assert_eq!(home(&topo, &[], &set("0-3"), 2, Some("6-7")), set("0-1"));
    }

    #[test]
    fn members_confined_to_disjoint_cpus_share_their_union() {
        let topo = Topology::test(1, 2, 2, 2);
        let (a, b) = (set("0-1"), set("6-7"));
        let own = [(CpuId(0), 1000)];
        let procs = [
            Member {
                pid: 1,
                load_milli: &own,
                allowed: &a,
            },
            Member {
                pid: 2,
                load_milli: &own,
                allowed: &b,
            },
        ];
        let h = set_home(&topo, &Config::default(), procs, &[1, 2], None);
        assert!(h.cpus.is_subset(&set("0-1,6-7")), "{h:?}");
        let nowhere = set("12");
        let lost = [Member {
            pid: 1,
            load_milli: &own,
            allowed: &nowhere,
        }];
        // Its A is then the whole machine: one thread gets a CPU of it.
        let h = set_home(&topo, &Config::default(), lost, &[1], None);
        assert_eq!(h.cpus, set("0"));
    }
}
