//! How much of a CPU the runnable threads of processes not under dfsched
//! take from ours: the outside load weighed as CFS shares it out, in
//! thousandths of a nice-0 thread per CPU (`Event::ExternalLoadMilli`).
//! Pure: no I/O; the `/proc` reading is in `procfs.rs`.
//!
//! # Why not count threads
//!
//! CFS is fair between *task groups* before it is fair between threads.
//! With `kernel.sched_autogroup_enabled = 1` (most desktops) every session
//! (`setsid`) is one group of the root task group, and a non-root cpu
//! cgroup is one too. A `cargo build` of 30 runnable threads in another
//! terminal is then one entity whose weight (1024 at nice 0) is spread over
//! the CPUs its threads run on: on a 2-CPU machine it weighs about half a
//! nice-0 thread per CPU, not 15 threads. Counted thread by thread, such a
//! build made the co-thread policy judge the machine heavily loaded and
//! pack a 2-thread program onto one CPU, where it got ~0.67 of a CPU
//! instead of the 1.0 CFS gives it spread.
//!
//! # The rule
//!
//! Each runnable outside thread `t`, last run on CPU `c`, adds to `c`:
//!
//! ```text
//!   t in our own group, in the root task group without autogroup, or of
//!   an unknown group (its files unreadable), or our own group unknown:
//!       weight(nice_t) × 1000 / weight(our nice)         (thread by thread)
//!   t in another group g:
//!       w_g × 1000 / w_ours × n_{g,c} / n_g              (g's share of c)
//!         w_g     = weight(autogroup nice) for an autogroup; 1024 for a
//!                   non-root cpu cgroup (its cpu.weight is not read)
//!         w_ours  = our own group's weight likewise; weight(our nice)
//!                   when we compete thread by thread (no group, unknown)
//!         n_{g,c} = g's runnable outside threads last run on c
//!         n_g     = all of g's runnable threads on the machine that the
//!                   scan saw (those of dfsched processes it skipped are not
//!                   known, so n_g may be low and g's share on a CPU high:
//!                   the safe side, as counting was)
//! ```
//!
//! Everything is relative to *our* weights because the engine counts each of
//! our threads as one task, whatever our nice: a program run entirely under
//! `nice -n 5` sees a thread of its own session at nice 5 as one whole task,
//! as CFS shares the CPU between them, and a program whose autogroup was
//! given more weight (`/proc/self/autogroup`) sees other sessions as the
//! smaller share they get.
//!
//! `weight(nice)` is the kernel's `sched_prio_to_weight` table (nice 0 =
//! 1024, 19 = 15, −20 = 88761). Per CPU, g's term is computed once and
//! rounded down, so g never weighs more than `w_g × 1000 / w_ours` in all,
//! and a group of one thread, of our group's weight, weighs exactly 1000, as
//! counting did.
//!
//! What the model leaves out: our own threads are diluted too when we run
//! in a group of our own (the engine still counts each as one task), a
//! group's share within a CPU follows its thread count rather than its
//! threads' weights, and nested cgroups weigh as one level.
//!
//! Invariants: the output lists each CPU once, in CPU order, with no zero
//! load; the same input gives the same output.

use dfsched_core::rules::TASK_MILLI;
use dfsched_core::CpuId;
use std::collections::BTreeMap;

/// The kernel's `sched_prio_to_weight`: the CFS weight of nice −20 … 19.
const PRIO_TO_WEIGHT: [u64; 40] = [
    88761, 71755, 56483, 46273, 36291, // −20 … −16
    29154, 23254, 18705, 14949, 11916, // −15 … −11
    9548, 7620, 6100, 4904, 3906, // −10 … −6
    3121, 2501, 1991, 1586, 1277, // −5 … −1
    1024, 820, 655, 526, 423, // 0 … 4
    335, 272, 215, 172, 137, // 5 … 9
    110, 87, 70, 56, 45, // 10 … 14
    36, 29, 23, 18, 15, // 15 … 19
];

/// The weight of a nice-0 thread: one task of the engine's load.
pub const NICE_0_WEIGHT: u64 = 1024;

/// The CFS weight of `nice`, clamped to the kernel's range −20 … 19.
pub fn nice_to_weight(nice: i32) -> u64 {
    PRIO_TO_WEIGHT[(nice.clamp(-20, 19) + 20) as usize]
}

/// A CFS task group that competes as one entity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKey {
    /// Autogroup `N` of the root task group (`/proc/PID/autogroup`:
    /// `/autogroup-N nice X`).
    Autogroup(u64),
    /// A cpu cgroup other than the root one, by path (as in
    /// `/proc/PID/cgroup`).
    Cgroup(String),
}

/// What a process's threads compete as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedGroup {
    /// One by one, in the root task group (autogroup off).
    Root,
    /// As one group of this weight.
    Group {
        /// Which group.
        key: GroupKey,
        /// Its weight: its autogroup nice's, or [`NICE_0_WEIGHT`].
        weight: u64,
    },
    /// Not known (its files could not be read): one by one, as if every
    /// thread were alone.
    Unknown,
}

/// A group of the outside threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// Which group.
    pub key: GroupKey,
    /// Its weight.
    pub weight: u64,
    /// Its runnable threads on the machine (`n_g`); fewer than the threads
    /// listed for it count as that many.
    pub runnable: u32,
}

/// One runnable outside thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutsideThread {
    /// Its process.
    pub pid: u32,
    /// Its group, as an index into the groups; `None` = thread by thread
    /// ([`SchedGroup::Root`] or [`SchedGroup::Unknown`]).
    pub group: Option<u32>,
    /// The CPU it last ran on.
    pub cpu: CpuId,
    /// Its nice value.
    pub nice: i8,
}

/// The outside load per CPU, in thousandths of one of our threads, by the
/// module doc's rule: `threads` (their `group` indexes into `groups`; an
/// index out of range counts thread by thread), weighed against `ours`, our
/// own group, and `our_nice`, our threads' nice value.
pub fn weigh(
    threads: &[OutsideThread],
    groups: &[GroupInfo],
    ours: &SchedGroup,
    our_nice: i8,
) -> Vec<(CpuId, u64)> {
    let ours_known = !matches!(ours, SchedGroup::Unknown);
    let our_thread_weight = nice_to_weight(i32::from(our_nice));
    let (our_key, our_group_weight) = match ours {
        SchedGroup::Group { key, weight } => (Some(key), (*weight).max(1)),
        _ => (None, our_thread_weight),
    };
    let mut per_cpu: BTreeMap<CpuId, u64> = BTreeMap::new();
    // Another group's threads per CPU, by group index: (n_{g,c}, listed).
    let mut of_group: BTreeMap<(u32, CpuId), u32> = BTreeMap::new();
    let mut listed: BTreeMap<u32, u32> = BTreeMap::new();
    for t in threads {
        let other = t
            .group
            .and_then(|g| groups.get(g as usize).map(|info| (g, info)))
            .filter(|(_, info)| ours_known && Some(&info.key) != our_key);
        match other {
            Some((g, _)) => {
                *of_group.entry((g, t.cpu)).or_default() += 1;
                *listed.entry(g).or_default() += 1;
            }
            None => {
                *per_cpu.entry(t.cpu).or_default() +=
                    nice_to_weight(i32::from(t.nice)) * TASK_MILLI / our_thread_weight;
            }
        }
    }
    for (&(g, cpu), &n_gc) in &of_group {
        let info = &groups[g as usize];
        let n_g = u64::from(info.runnable.max(listed[&g]));
        let share = info.weight * TASK_MILLI * u64::from(n_gc) / (our_group_weight * n_g);
        *per_cpu.entry(cpu).or_default() += share;
    }
    per_cpu.into_iter().filter(|&(_, m)| m > 0).collect()
}

/// How runnable outside threads that no per-thread look has seen weigh
/// (another pid namespace, or load newer than the last look): they cannot
/// be in our session, so when we are in a group they are taken as one other
/// nice-0 group in all; when we compete thread by thread, as nice-0 threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// All of them together weigh this many thousandths of one of ours.
    OneGroup(u64),
    /// Each weighs this many thousandths of one of ours.
    EachThread(u64),
}

/// The [`Unseen`] rule against `ours` and `our_nice`.
pub fn unseen(ours: &SchedGroup, our_nice: i8) -> Unseen {
    match ours {
        SchedGroup::Group { weight, .. } => {
            Unseen::OneGroup(NICE_0_WEIGHT * TASK_MILLI / (*weight).max(1))
        }
        _ => Unseen::EachThread(NICE_0_WEIGHT * TASK_MILLI / nice_to_weight(i32::from(our_nice))),
    }
}

/// The outside threads counted one per thread per CPU (the load before
/// weighing, for the view's old field and the stats), CPUs with none left
/// out, in CPU order.
pub fn count(threads: &[OutsideThread]) -> Vec<(CpuId, u32)> {
    let mut per_cpu: BTreeMap<CpuId, u32> = BTreeMap::new();
    for t in threads {
        *per_cpu.entry(t.cpu).or_default() += 1;
    }
    per_cpu.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const C0: CpuId = CpuId(0);
    const C1: CpuId = CpuId(1);

    fn thread(group: Option<u32>, cpu: CpuId, nice: i8) -> OutsideThread {
        OutsideThread {
            pid: 100 + group.unwrap_or(99),
            group,
            cpu,
            nice,
        }
    }

    fn auto(id: u64, nice: i32, runnable: u32) -> GroupInfo {
        GroupInfo {
            key: GroupKey::Autogroup(id),
            weight: nice_to_weight(nice),
            runnable,
        }
    }

    fn in_auto(id: u64) -> SchedGroup {
        SchedGroup::Group {
            key: GroupKey::Autogroup(id),
            weight: NICE_0_WEIGHT,
        }
    }

    #[test]
    fn the_weight_table_is_the_kernels() {
        assert_eq!(nice_to_weight(0), 1024);
        assert_eq!(nice_to_weight(19), 15);
        assert_eq!(nice_to_weight(-20), 88761);
        assert_eq!(nice_to_weight(1), 820);
        assert_eq!(nice_to_weight(-1), 1277);
        assert_eq!(nice_to_weight(40), 15, "clamped");
        assert_eq!(nice_to_weight(-99), 88761, "clamped");
        // Each step is ~1.25x the next, as the kernel's table is built.
        for w in PRIO_TO_WEIGHT.windows(2) {
            let ratio = w[0] as f64 / w[1] as f64;
            assert!((1.15..1.35).contains(&ratio), "{w:?}");
        }
    }

    #[test]
    fn a_build_in_another_session_weighs_half_a_thread_per_cpu() {
        // 30 runnable threads, 15 per CPU, of autogroup 7 (nice 0).
        let mut threads = vec![thread(Some(0), C0, 0); 15];
        threads.extend(vec![thread(Some(0), C1, 0); 15]);
        let groups = [auto(7, 0, 30)];
        assert_eq!(
            weigh(&threads, &groups, &in_auto(1), 0),
            vec![(C0, 500), (C1, 500)]
        );
        // In our own session: 15 threads per CPU, as counting had it.
        assert_eq!(
            weigh(&threads, &groups, &in_auto(7), 0),
            vec![(C0, 15_000), (C1, 15_000)]
        );
        // Our group unknown: thread by thread too.
        assert_eq!(
            weigh(&threads, &groups, &SchedGroup::Unknown, 0),
            vec![(C0, 15_000), (C1, 15_000)]
        );
        assert_eq!(count(&threads), vec![(C0, 15), (C1, 15)]);
    }

    #[test]
    fn a_groups_share_follows_its_threads_and_its_nice() {
        // 3 threads of a nice-5 autogroup on C0, 1 on C1; its weight 335.
        let threads = [
            thread(Some(0), C0, 0),
            thread(Some(0), C0, 0),
            thread(Some(0), C0, 0),
            thread(Some(0), C1, 0),
        ];
        assert_eq!(
            weigh(&threads, &[auto(3, 5, 4)], &in_auto(1), 0),
            // 335 × 1000 / 1024 × 3/4 = 245.36…, × 1/4 = 81.78…
            vec![(C0, 245), (C1, 81)]
        );
        // Its threads under dfsched (n_g = 8, 4 not listed) dilute it.
        assert_eq!(
            weigh(&threads, &[auto(3, 5, 8)], &in_auto(1), 0),
            vec![(C0, 122), (C1, 40)]
        );
        // A non-root cgroup weighs as a nice-0 group.
        let cg = GroupInfo {
            key: GroupKey::Cgroup("/batch".into()),
            weight: NICE_0_WEIGHT,
            runnable: 4,
        };
        assert_eq!(
            weigh(&threads, &[cg], &SchedGroup::Root, 0),
            vec![(C0, 750), (C1, 250)]
        );
    }

    #[test]
    fn load_is_weighed_against_our_own_nice_and_group() {
        // Our program and the threads of our own session all at nice 5
        // (`nice -n 5` on everything): each is one whole task beside ours.
        let threads = [thread(Some(0), C0, 5), thread(Some(0), C1, 5)];
        let groups = [auto(7, 0, 2)];
        assert_eq!(
            weigh(&threads, &groups, &in_auto(7), 5),
            vec![(C0, 1000), (C1, 1000)]
        );
        // Thread by thread (autogroups off) likewise.
        assert_eq!(
            weigh(&threads, &[], &SchedGroup::Root, 5),
            vec![(C0, 1000), (C1, 1000)]
        );
        // Our autogroup at nice −19 (weight 71755): another session's 30
        // nice-0 threads, 15 per CPU, weigh 1024/71755 of a task in all.
        let mut build = vec![thread(Some(0), C0, 0); 15];
        build.extend(vec![thread(Some(0), C1, 0); 15]);
        let heavy_ours = SchedGroup::Group {
            key: GroupKey::Autogroup(1),
            weight: nice_to_weight(-19),
        };
        assert_eq!(
            weigh(&build, &[auto(7, 0, 30)], &heavy_ours, 0),
            vec![(C0, 7), (C1, 7)]
        );
        // Our autogroup at nice 19 (weight 15): the same build weighs its
        // weight over ours in all, 1024/15 tasks, split by its threads.
        let light_ours = SchedGroup::Group {
            key: GroupKey::Autogroup(1),
            weight: nice_to_weight(19),
        };
        let got = weigh(&build, &[auto(7, 0, 30)], &light_ours, 0);
        let total: u64 = got.iter().map(|&(_, m)| m).sum();
        assert_eq!(total, 2 * (1024 * 1000 * 15 / (15 * 30)));
    }

    #[test]
    fn unseen_threads_are_one_other_group_or_nice_0_threads() {
        assert_eq!(unseen(&in_auto(1), 0), Unseen::OneGroup(1000));
        let heavy = SchedGroup::Group {
            key: GroupKey::Autogroup(1),
            weight: nice_to_weight(-5),
        };
        assert_eq!(unseen(&heavy, 0), Unseen::OneGroup(1024 * 1000 / 3121));
        assert_eq!(unseen(&SchedGroup::Root, 0), Unseen::EachThread(1000));
        assert_eq!(
            unseen(&SchedGroup::Unknown, 5),
            Unseen::EachThread(1024 * 1000 / 335)
        );
    }

    #[test]
    fn thread_by_thread_weighs_each_threads_nice() {
        let threads = [
            thread(None, C0, 0),
            thread(None, C0, 19),
            thread(None, C1, -20),
            thread(Some(5), C1, 1), // no such group: thread by thread
        ];
        assert_eq!(
            weigh(&threads, &[], &SchedGroup::Root, 0),
            // 1000 + 15 × 1000/1024; 88761 × 1000/1024 + 820 × 1000/1024
            vec![(C0, 1014), (C1, 86_680 + 800)]
        );
        assert!(weigh(&[], &[], &SchedGroup::Root, 0).is_empty());
    }

    fn arb_threads() -> impl Strategy<Value = Vec<OutsideThread>> {
        prop::collection::vec(
            (prop::option::of(0u32..4), 0u32..4, -20i8..=19, 1u32..50),
            0..60,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(group, cpu, nice, pid)| OutsideThread {
                    pid,
                    group,
                    cpu: CpuId(cpu),
                    nice,
                })
                .collect()
        })
    }

    fn arb_groups() -> impl Strategy<Value = Vec<GroupInfo>> {
        prop::collection::vec((-20i32..=19, 0u32..80), 4).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (nice, runnable))| GroupInfo {
                    key: GroupKey::Autogroup(i as u64 + 10),
                    weight: nice_to_weight(nice),
                    runnable,
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn our_own_groups_nice_0_threads_weigh_as_counted(
            threads in arb_threads(), groups in arb_groups()
        ) {
            // Every thread at nice 0 and in our group (or thread by thread).
            let ours = groups[0].key.clone();
            let threads: Vec<OutsideThread> = threads
                .into_iter()
                .map(|t| OutsideThread { group: t.group.map(|_| 0), nice: 0, ..t })
                .collect();
            let ours = SchedGroup::Group { key: ours, weight: NICE_0_WEIGHT };
            let counted: Vec<(CpuId, u64)> = count(&threads)
                .into_iter()
                .map(|(c, n)| (c, u64::from(n) * 1000))
                .collect();
            prop_assert_eq!(weigh(&threads, &groups, &ours, 0), counted);
        }

        #[test]
        fn our_groups_threads_at_our_nice_weigh_one_task_each_at_any_nice(
            cpus in prop::collection::vec(0u32..4, 0..40), nice in -20i8..=19
        ) {
            // Our own session, everything at one nice (say `nice -n N`
            // dfsched run … beside more of the same session's work).
            let threads: Vec<OutsideThread> = cpus
                .iter()
                .map(|&c| thread(Some(0), CpuId(c), nice))
                .collect();
            let groups = [auto(1, 0, cpus.len() as u32)];
            let counted: Vec<(CpuId, u64)> = count(&threads)
                .into_iter()
                .map(|(c, n)| (c, u64::from(n) * 1000))
                .collect();
            prop_assert_eq!(weigh(&threads, &groups, &in_auto(1), nice), counted);
        }

        #[test]
        fn another_group_never_weighs_more_than_its_weight(
            threads in arb_threads(), groups in arb_groups()
        ) {
            let ours = in_auto(1);
            for (g, info) in groups.iter().enumerate() {
                let only: Vec<OutsideThread> = threads
                    .iter()
                    .copied()
                    .filter(|t| t.group == Some(g as u32))
                    .collect();
                let total: u64 = weigh(&only, &groups, &ours, 0).iter().map(|&(_, m)| m).sum();
                prop_assert!(total <= info.weight * 1000 / NICE_0_WEIGHT,
                    "group {g}: {total} > {}", info.weight * 1000 / NICE_0_WEIGHT);
                if !only.is_empty() && info.runnable as usize <= only.len() {
                    // All its threads listed: its whole weight, less rounding.
                    let cpus = count(&only).len() as u64;
                    prop_assert!(total + cpus >= info.weight * 1000 / NICE_0_WEIGHT);
                }
            }
        }

        #[test]
        fn a_group_of_one_thread_weighs_as_that_thread(
            nice in -20i32..=19, cpu in 0u32..8
        ) {
            let groups = [auto(4, nice, 1)];
            let got = weigh(&[thread(Some(0), CpuId(cpu), 0)], &groups, &in_auto(1), 0);
            let want = nice_to_weight(nice) * 1000 / 1024;
            prop_assert_eq!(got, vec![(CpuId(cpu), want)]);
            if nice == 0 {
                prop_assert_eq!(want, 1000);
            }
        }

        #[test]
        fn the_output_is_in_cpu_order_without_zeros_and_deterministic(
            threads in arb_threads(), groups in arb_groups(), ours in 0u64..14
        ) {
            let got = weigh(&threads, &groups, &in_auto(ours), 0);
            prop_assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
            prop_assert!(got.iter().all(|&(_, m)| m > 0));
            prop_assert_eq!(&got, &weigh(&threads, &groups, &in_auto(ours), 0));
        }
    }
}
