//! A process's CFS group, as the outside-load scan (`procfs.rs`) reads it
//! for the weighing (`weigh.rs`): the parsers of `/proc/PID/autogroup`,
//! `/proc/PID/cgroup` and `kernel.sched_autogroup_enabled`, the context a
//! scan reads them in, and the scan's result.
//!
//! Which group a process is in, by CFS's rules: a task in a cpu cgroup
//! other than the root one is scheduled within that cgroup (autogroups do
//! not apply to it); a task in the root cgroup is in its session's
//! autogroup when autogroups are on, else in the root group with every
//! other such thread. A file that cannot be read or parsed leaves the
//! group unknown, and the process counts thread by thread, as before
//! weighing.

use super::LoadSampler;
use crate::weigh::{self, GroupInfo, GroupKey, OutsideThread, SchedGroup};
use dfsched_core::CpuId;
use std::borrow::Cow;

/// What `/proc/PID/autogroup` says: `Some(Some((n, nice)))` for
/// `/autogroup-N nice X`, `Some(None)` for an empty file (the task is in
/// the root autogroup: kernel threads, init), `None` for anything else.
pub(crate) fn parse_autogroup(text: &str) -> Option<Option<(u64, i32)>> {
    let text = text.trim();
    if text.is_empty() {
        return Some(None);
    }
    let (name, nice) = text.split_once(" nice ")?;
    let id = name.strip_prefix("/autogroup-")?.parse().ok()?;
    let nice: i32 = nice.trim().parse().ok()?;
    (-20..=19).contains(&nice).then_some(Some((id, nice)))
}

/// The cpu cgroup path in `/proc/PID/cgroup`: the line of the cgroup-v1
/// hierarchy whose controllers include `cpu` (`4:cpu,cpuacct:/path`;
/// `cpuset` and `cpuacct` alone do not count) if there is one, else the
/// cgroup-v2 line (`0::/path`); `None` if neither is there or a line is
/// garbled.
pub(crate) fn parse_cpu_cgroup(text: &str) -> Option<&str> {
    let mut v2 = None;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        id.parse::<u32>().ok()?;
        if !path.starts_with('/') {
            return None;
        }
        if controllers.split(',').any(|c| c == "cpu") {
            return Some(path);
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        }
    }
    v2
}

/// `kernel.sched_autogroup_enabled`: `Some(true)` for `1`, `Some(false)`
/// for `0`, `None` for anything else.
pub(crate) fn parse_enabled(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// The inode of the initial cgroup namespace (`PROC_CGROUP_INIT_INO` in the
/// kernel): in it, a cgroup path of `/` is the root task group.
const INIT_CGROUP_NS_INO: u64 = 0xEFFF_FFFB;

/// What a scan needs to tell processes' groups apart, read once per scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupContext {
    /// `kernel.sched_autogroup_enabled` is 1 (missing: the kernel has no
    /// autogroups).
    pub autogroup: bool,
    /// We read `/proc` from the initial cgroup namespace, so that a cgroup
    /// path of `/` is the real root (in a container's namespace it is the
    /// container's cgroup, which autogroups do not apply to).
    pub root_is_real: bool,
}

/// A scan of the outside threads, ready to be weighed (see [`crate::weigh`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutsideSample {
    /// The runnable threads, by pid then tid order of the scan.
    pub threads: Vec<OutsideThread>,
    /// Their groups, indexed by [`OutsideThread::group`].
    pub groups: Vec<GroupInfo>,
    /// The context the groups were read in, for reading ours the same way.
    pub context: Option<GroupContext>,
}

impl OutsideSample {
    /// The sample's load per CPU in thousandths of one of our threads,
    /// weighed against `ours`, our group, and `our_nice` (see
    /// [`crate::weigh::weigh`]), leaving out the threads of processes for
    /// which `skip` is true (their threads still count in their group's
    /// size).
    pub fn weigh(
        &self,
        ours: &SchedGroup,
        our_nice: i8,
        skip: impl Fn(u32) -> bool,
    ) -> Vec<(CpuId, u64)> {
        weigh::weigh(&self.threads_except(&skip), &self.groups, ours, our_nice)
    }

    /// The sample's threads of processes for which `skip` is false,
    /// weighed against `ours` and `our_nice` and summed over the CPUs (in
    /// thousandths of one of ours), and how many they are: the seen part of
    /// `signals::mean_weight_milli`.
    pub fn weighed_total(
        &self,
        ours: &SchedGroup,
        our_nice: i8,
        skip: impl Fn(u32) -> bool,
    ) -> (u64, u64) {
        let kept = self.threads_except(&skip);
        let weighed = weigh::weigh(&kept, &self.groups, ours, our_nice)
            .iter()
            .map(|&(_, m)| m)
            .sum();
        (weighed, kept.len() as u64)
    }

    /// The sample's runnable threads per CPU, unweighed, leaving out the
    /// processes for which `skip` is true.
    pub fn count(&self, skip: impl Fn(u32) -> bool) -> Vec<(CpuId, u32)> {
        weigh::count(&self.threads_except(&skip))
    }

    /// The threads of processes for which `skip` is false; borrowed, with
    /// no copy, when none is skipped (the runtime's own scan already left
    /// its skipped processes out).
    fn threads_except(&self, skip: &impl Fn(u32) -> bool) -> Cow<'_, [OutsideThread]> {
        if self.threads.iter().any(|t| skip(t.pid)) {
            Cow::Owned(
                self.threads
                    .iter()
                    .copied()
                    .filter(|t| !skip(t.pid))
                    .collect(),
            )
        } else {
            Cow::Borrowed(&self.threads)
        }
    }
}

impl LoadSampler {
    /// Whether autogroups are on and `/` is the real root cgroup (see
    /// [`GroupContext`]); read anew by each [`LoadSampler::sample_outside`].
    pub fn group_context(&mut self) -> GroupContext {
        let autogroup = self
            .read_small(&self.proc_root.join("sys/kernel/sched_autogroup_enabled"))
            .and_then(parse_enabled)
            .unwrap_or(false);
        // No namespace file (an old kernel, a fixture): one namespace only.
        let root_is_real = std::fs::metadata(self.proc_root.join("self/ns/cgroup"))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m) == INIT_CGROUP_NS_INO)
            .unwrap_or(true);
        GroupContext {
            autogroup,
            root_is_real,
        }
    }

    /// Process `pid`'s nice value (its main thread's, `stat` field 19); 0
    /// if it cannot be read.
    pub fn nice_of(&mut self, pid: u32) -> i8 {
        let path = self.proc_root.join(pid.to_string()).join("stat");
        self.read_small(&path)
            .and_then(super::parse_stat)
            .map_or(0, |f| f.nice)
    }

    /// Process `pid`'s CFS group: its cpu cgroup if that is not the root
    /// one, else its autogroup when autogroups are on, else the root group
    /// (thread by thread). [`SchedGroup::Unknown`] if a file it needs cannot
    /// be read or parsed.
    pub fn group_of(&mut self, context: GroupContext, pid: u32) -> SchedGroup {
        let mut path = self.proc_root.join(pid.to_string());
        path.push("cgroup");
        let Some(cgroup) = self.read_small(&path).and_then(parse_cpu_cgroup) else {
            return SchedGroup::Unknown;
        };
        if cgroup != "/" || !context.root_is_real {
            return SchedGroup::Group {
                key: GroupKey::Cgroup(cgroup.to_owned()),
                weight: weigh::NICE_0_WEIGHT,
            };
        }
        if !context.autogroup {
            return SchedGroup::Root;
        }
        path.set_file_name("autogroup");
        match self.read_small(&path).and_then(parse_autogroup) {
            Some(Some((id, nice))) => SchedGroup::Group {
                key: GroupKey::Autogroup(id),
                weight: weigh::nice_to_weight(nice),
            },
            Some(None) => SchedGroup::Root,
            None => SchedGroup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{nice_stat_line, stat_line};
    use super::*;

    #[test]
    fn parses_autogroup_files() {
        assert_eq!(
            parse_autogroup("/autogroup-300 nice 0\n"),
            Some(Some((300, 0)))
        );
        assert_eq!(
            parse_autogroup("/autogroup-7 nice -19"),
            Some(Some((7, -19)))
        );
        assert_eq!(
            parse_autogroup("/autogroup-7 nice 19\n"),
            Some(Some((7, 19)))
        );
        // Empty: the root autogroup (kernel threads, init).
        assert_eq!(parse_autogroup(""), Some(None));
        assert_eq!(parse_autogroup("\n"), Some(None));
        for bad in [
            "/autogroup-",
            "/autogroup-3",
            "/autogroup-3 nice",
            "/autogroup-3 nice x",
            "/autogroup-3 nice 20",
            "/autogroup--3 nice 0",
            "autogroup-3 nice 0",
            "/autogroup-3 nice 0 extra",
            "\u{0}\u{1}garbage",
        ] {
            assert_eq!(parse_autogroup(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_the_cpu_cgroup_of_v1_v2_and_hybrid_files() {
        let hybrid = "9:name=systemd:/user.slice\n4:memory:/m\n3:cpuset:/s\n\
                      2:cpuacct:/a\n1:cpu:/batch\n0::/user.slice/x\n";
        assert_eq!(parse_cpu_cgroup(hybrid), Some("/batch"));
        assert_eq!(parse_cpu_cgroup("5:cpu,cpuacct:/\n"), Some("/"));
        assert_eq!(parse_cpu_cgroup("5:cpuacct,cpu:/a b\n"), Some("/a b"));
        // No v1 cpu line: the v2 one.
        assert_eq!(
            parse_cpu_cgroup("3:cpuset:/s\n0::/user.slice/session-2.scope\n"),
            Some("/user.slice/session-2.scope")
        );
        assert_eq!(parse_cpu_cgroup("0::/\n"), Some("/"));
        // Neither, truncated or garbage.
        for bad in [
            "",
            "3:cpuset:/s\n",
            "0::",
            "0:",
            "x::/\n",
            "1:cpu:relative\n",
            "garbage",
            "1:cpu\n",
        ] {
            assert_eq!(parse_cpu_cgroup(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_the_autogroup_switch() {
        assert_eq!(parse_enabled("1\n"), Some(true));
        assert_eq!(parse_enabled("0"), Some(false));
        for bad in ["", "2", "yes", "1 1"] {
            assert_eq!(parse_enabled(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn outside_threads_are_weighed_by_their_processes_groups() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-procfs-groups-")
            .tempdir()
            .unwrap();
        let root = tmp.path();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let in_root = "1:cpu,cpuacct:/\n0::/\n";
        write("sys/kernel/sched_autogroup_enabled", "1\n");
        // pids 10 and 11: one session (autogroup 5), 3 runnable threads.
        write("10/stat", &stat_line("a", 'R', 1, 0));
        write("10/cgroup", in_root);
        write("10/autogroup", "/autogroup-5 nice 0\n");
        write("11/stat", &stat_line("b", 'S', 3, 0));
        write("11/task/11/stat", &stat_line("b", 'R', 3, 0));
        write("11/task/12/stat", &stat_line("b", 'R', 3, 1));
        write("11/task/13/stat", &stat_line("b", 'S', 3, 1));
        write("11/cgroup", in_root);
        write("11/autogroup", "/autogroup-5 nice 0\n");
        // pid 20: our session, at nice 19.
        write("20/stat", &nice_stat_line("c", 'R', 1, 1, 19));
        write("20/cgroup", in_root);
        write("20/autogroup", "/autogroup-6 nice 0\n");
        // pid 21: a cpu cgroup of its own.
        write("21/stat", &stat_line("d", 'R', 1, 1));
        write("21/cgroup", "1:cpu:/batch\n0::/\n");
        // pid 22: unreadable groups; pid 23: the root autogroup (kthread).
        write("22/stat", &stat_line("e", 'R', 1, 0));
        write("23/stat", &stat_line("f", 'R', 1, 0));
        write("23/cgroup", in_root);
        write("23/autogroup", "");
        // pid 30: us, skipped.
        write("30/stat", &stat_line("me", 'R', 1, 0));
        write("30/cgroup", in_root);
        write("30/autogroup", "/autogroup-6 nice 0\n");

        let mut sampler = LoadSampler::new(root);
        let sample = sampler.sample_outside(|pid| pid == 30).unwrap();
        let ctx = sample.context.unwrap();
        assert_eq!(
            ctx,
            GroupContext {
                autogroup: true,
                root_is_real: true
            }
        );
        let ours = sampler.group_of(ctx, 30);
        assert_eq!(
            ours,
            SchedGroup::Group {
                key: GroupKey::Autogroup(6),
                weight: 1024
            }
        );
        assert_eq!(sampler.group_of(ctx, 22), SchedGroup::Unknown);
        assert_eq!(sampler.group_of(ctx, 23), SchedGroup::Root);
        assert_eq!(sample.threads.len(), 7);
        assert_eq!(sample.count(|_| false), vec![(CpuId(0), 4), (CpuId(1), 3)]);
        // Autogroup 5: 1024 over 3 threads, 2 on CPU 0. Ours (nice 19):
        // 15/1024 of a thread. /batch: one thread, 1000. pids 22, 23: 1000.
        assert_eq!(
            sample.weigh(&ours, 0, |_| false),
            vec![(CpuId(0), 666 + 2000), (CpuId(1), 333 + 14 + 1000)]
        );
        // pid 11 taken out afterwards: autogroup 5 still has 3 threads.
        assert_eq!(
            sample.weigh(&ours, 0, |pid| pid == 11),
            vec![(CpuId(0), 333 + 2000), (CpuId(1), 14 + 1000)]
        );
        // Autogroups off: the root group's threads count one by one.
        write("sys/kernel/sched_autogroup_enabled", "0\n");
        let sample = sampler.sample_outside(|pid| pid == 30).unwrap();
        let ctx = sample.context.unwrap();
        assert!(!ctx.autogroup);
        let ours = sampler.group_of(ctx, 30);
        assert_eq!(ours, SchedGroup::Root);
        assert_eq!(
            sample.weigh(&ours, 0, |_| false),
            vec![(CpuId(0), 4000), (CpuId(1), 2000 + 14)]
        );
    }

    #[test]
    fn the_weighed_total_leaves_skipped_processes_out() {
        // 4 runnable threads of autogroup 5 (pid 10), 2 per CPU.
        let sample = OutsideSample {
            threads: [0, 0, 1, 1]
                .iter()
                .map(|&c| OutsideThread {
                    pid: 10,
                    group: Some(0),
                    cpu: CpuId(c),
                    nice: 0,
                })
                .collect(),
            groups: vec![GroupInfo {
                key: GroupKey::Autogroup(5),
                weight: 1024,
                runnable: 4,
            }],
            context: None,
        };
        let other = SchedGroup::Group {
            key: GroupKey::Autogroup(6),
            weight: 1024,
        };
        assert_eq!(sample.weighed_total(&other, 0, |_| false), (1000, 4));
        let same = SchedGroup::Group {
            key: GroupKey::Autogroup(5),
            weight: 1024,
        };
        assert_eq!(sample.weighed_total(&same, 0, |_| false), (4000, 4));
        assert_eq!(sample.weighed_total(&same, 0, |p| p == 10), (0, 0));
    }

    #[test]
    fn our_own_group_is_known_on_this_machine() {
        let mut sampler = LoadSampler::new("/proc");
        let ctx = sampler.group_context();
        let ours = sampler.group_of(ctx, std::process::id());
        assert_ne!(ours, SchedGroup::Unknown, "{ctx:?}");
        if ctx.autogroup && ctx.root_is_real {
            // Root or an autogroup, unless we run in a cpu cgroup.
            eprintln!("our group here: {ours:?}");
        }
        assert_eq!(sampler.group_of(ctx, u32::MAX), SchedGroup::Unknown);
    }
}
