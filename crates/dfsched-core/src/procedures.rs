//! The procedures of Pinter & Zalmanovici §4.1, one per event.
//!
//! | situation (§4.1)                  | procedure here                         |
//! |-----------------------------------|----------------------------------------|
//! | a new task enters the system      | [`Ctx::task_new`]: runnable, unmanaged |
//! |                                   | (co-thread: joins its app's co-thread  |
//! |                                   | group, see `cothread.rs`)              |
//! | a task arrives with a new DF      | [`Ctx::hint`] → new group, home chosen |
//! |                                   | by the home rule from the least-loaded |
//! |                                   | allowed CPU                            |
//! | a task arrives with a known DF    | [`Ctx::hint`] → joins the DF's group   |
//! |                                   | at its home (re-evaluated)             |
//! | a task switches DFs               | [`Ctx::hint`]: leaves its old group    |
//! |                                   | (counter, reclaim at 0), then as above;|
//! |                                   | the old group is re-evaluated last     |
//! | a task returns from a wait queue  | [`Ctx::wake`]: its DF is looked up and |
//! |                                   | it rejoins its group                   |
//! | a task dies                       | [`Ctx::exit`]: counter, reclaim at 0   |
//!
//! Under `Policy::CoThread` "no DF" is a group too: a task that never hinted,
//! or hinted `next = None`, is in its application's co-thread group (kind
//! `GroupKind::CoThread`), created, joined, left and reclaimed exactly as a
//! DF's group, and homed by the same home rule with the co-thread rule's
//! start (`cothread.rs`). A hint to a DF leaves the co-thread group.
//!
//! Every procedure here is infallible: the engine has validated the event
//! before calling it (that is what makes `handle` all-or-nothing). Each one
//! changes a task's target only through [`Ctx::retarget`], so a `Place` is
//! emitted exactly when a target changes. None of them walks all tasks or
//! even a whole group to decide: a hint looks its task up by id once (in
//! `Engine::check`), its new DF once, and follows slots from there; it
//! costs O(log tasks + log DFs + log members + distinct allowed sets in the
//! groups it touches × CPUs) — the groups' censuses stand for their members
//! — plus O(members) for each group whose home actually changes, since each
//! member whose target changes gets a `Place`. When a group may use the
//! whole machine, the load on its CPUs is read without a walk over them; no
//! load vector is copied unless the cheap keep test cannot decide, and then
//! into a reused scratch vector.

use crate::config::Policy;
use crate::cpuset::CpuSet;
use crate::ids::{AppId, CpuId, DfId, GroupKind, TaskId};
use crate::load::{share_within, MAX_EXTERNAL_MILLI};
use crate::state::{App, Ctx, GroupSlot, Task, TaskSlot};

impl Ctx<'_> {
    /// An application that gives DF information starts.
    pub(crate) fn app_new(&mut self, app: AppId) {
        self.st.apps.insert(app, App::default());
    }

    /// A new task: runnable, unmanaged, targeted at its allowed set (already
    /// cut to the machine). The body already runs it there, so no `Place`.
    /// Its load is spread over that set: the CPU the body may name in
    /// `TaskNew::cpu` is where it happens to be now, not where it must run;
    /// it is remembered (if allowed) as the CPU it last ran on.
    ///
    /// Under `Policy::CoThread` it then joins its application's co-thread
    /// group and is placed at its home (a `Place` unless that is its
    /// allowed set).
    pub(crate) fn task_new(&mut self, id: TaskId, app: AppId, allowed: CpuSet, cpu: Option<CpuId>) {
        self.st.load.add_task(&allowed);
        (self.st.pinned).count_tasks(self.topo, &allowed, None, 1, true);
        let last_cpu = cpu.filter(|c| allowed.contains(*c));
        let ts = self.st.tasks.insert(
            id,
            Task {
                app,
                df: None,
                group: None,
                runnable: true,
                target: allowed.clone(),
                allowed,
                solo_home: None,
                placed: false,
                last_cpu,
            },
        );
        if self.config.policy == Policy::CoThread {
            self.join(ts, app, GroupKind::CoThread);
            self.retarget(ts);
        }
    }

    /// The DF hint: the task leaves its current DF and is placed by `next`.
    /// A hint that names the DF the task is already in changes nothing.
    ///
    /// The group it left (unless reclaimed) is re-evaluated last, once the
    /// task is placed by `next`: it still runs, and the left group's home
    /// is judged against the load as it will be, the task at its new
    /// target. Judged with the task counted nowhere, the machine looked one
    /// task lighter than it is, and at the regime boundary (2 DFs of 2
    /// threads on 2 CPUs, threads switching DFs) every switch flipped the
    /// left group to light load and spread it, and the joined group back to
    /// a CPU: each hint re-homed a group and moved 2–3 threads that had not
    /// hinted (`a_df_switch_at_the_regime_boundary_moves_only_the_switching_thread`).
    pub(crate) fn hint(&mut self, ts: TaskSlot, next: Option<DfId>) {
        self.st.stats.hints += 1;
        let t = &self.st.tasks[ts];
        if t.df == next {
            return;
        }
        let app = t.app;
        let left = self.leave_group_later(ts);
        match (next, self.config.policy) {
            (Some(df), _) => self.join(ts, app, GroupKind::Df(df)),
            (None, Policy::CoThread) => self.join(ts, app, GroupKind::CoThread),
            // Unmanaged again: its home is its allowed set.
            (None, Policy::DataAffinity) => self.st.tasks[ts].solo_home = None,
        }
        self.retarget(ts);
        if let Some(g) = left {
            self.reevaluate(g, None);
        }
    }

    /// Puts a task that is in no group into a group of `kind`: a new group
    /// for a new DF (or an application's first co-thread), else the kind's
    /// group (the least loaded one per CPU of its home if it was split),
    /// re-evaluated with the task counted in it. The caller re-targets the
    /// task.
    fn join(&mut self, ts: TaskSlot, app: AppId, kind: GroupKind) {
        let known = self.st.apps[&app].dfs.get(&kind);
        let group = match known {
            None => {
                let home = self.home_for_new(ts, kind);
                self.create_group(app, kind, home)
            }
            Some(list) => {
                let g = if list.len() == 1 {
                    list[0]
                } else {
                    self.least_loaded_group(list, ts)
                };
                let home = self.evaluate(g, Some(ts), true);
                self.rehome(g, home, false);
                g
            }
        };
        self.add_member(group, ts);
    }

    /// Of a split DF's groups, the one whose home has the least load per CPU
    /// (not counting the joining task itself); ties → lowest id.
    fn least_loaded_group(&self, list: &[GroupSlot], joiner: TaskSlot) -> GroupSlot {
        let t = &self.st.tasks[joiner];
        // The load of a home without the joiner: what the joiner's share
        // inside it is taken off, exactly as if its load were removed CPU by
        // CPU.
        let per_cpu = |g: &GroupSlot| {
            let cpus = &self.topo.domain(self.st.groups[*g].home).cpus;
            let mut sum = self.st.load.sum(cpus);
            if t.runnable {
                sum -= share_within(&t.target, cpus);
            }
            (sum, cpus.len() as u64)
        };
        let mut best = list[0];
        let (mut best_sum, mut best_n) = per_cpu(&best);
        for g in &list[1..] {
            let (sum, n) = per_cpu(g);
            // sum/n < best_sum/best_n, exactly, in integers.
            if u128::from(sum) * u128::from(best_n) < u128::from(best_sum) * u128::from(n) {
                (best, best_sum, best_n) = (*g, sum, n);
            }
        }
        best
    }

    /// The task waits: it no longer counts as load, and stays in its group.
    /// Blocking a blocked task changes nothing.
    pub(crate) fn block(&mut self, ts: TaskSlot) {
        self.set_runnable(ts, false);
    }

    /// The task returns from a wait: it counts as load again, its DF is
    /// looked up and it rejoins its group (its co-thread group if it has no
    /// DF, under `Policy::CoThread`), whose home is re-evaluated with it
    /// runnable — for a co-thread group, with the CPU it last ran on as the
    /// rule's `L`. Waking a runnable task changes nothing.
    pub(crate) fn wake(&mut self, ts: TaskSlot) {
        if self.st.tasks[ts].runnable {
            return;
        }
        self.set_runnable(ts, true);
        let t = &self.st.tasks[ts];
        if let Some(g) = t.group {
            let home = self.evaluate_from(g, None, false, t.last_cpu);
            self.rehome(g, home, false);
        }
        self.retarget(ts);
    }

    /// The task is gone: it leaves its group (counter, reclaim at 0) and is
    /// forgotten.
    pub(crate) fn exit(&mut self, ts: TaskSlot) {
        self.leave_group(ts);
        let t = self.st.tasks.remove(ts);
        if t.runnable {
            self.st.load.sub_task(&t.target);
            (self.st.pinned).count_tasks(self.topo, &t.target, None, 1, false);
        }
    }

    /// The task's allowed CPUs changed (already cut to the machine): its
    /// group is re-evaluated with the new set and the task re-targeted.
    pub(crate) fn allowed(&mut self, ts: TaskSlot, allowed: CpuSet) {
        let t = &mut self.st.tasks[ts];
        // A balancer-chosen CPU the task may no longer use is forgotten: an
        // unmanaged task is never "off-home".
        if let Some(d) = t.solo_home {
            if !self.topo.domain(d).cpus.intersects(&allowed) {
                t.solo_home = None;
            }
        }
        let Some(g) = t.group else {
            t.allowed = allowed;
            self.retarget(ts);
            return;
        };
        // Re-join with the new set: out of the group while it is
        // evaluated (its load still sits on its old target), back in after.
        self.remove_member(g, ts);
        self.st.tasks[ts].allowed = allowed;
        let home = self.evaluate(g, Some(ts), true);
        self.add_member(g, ts);
        self.rehome(g, home, false);
        self.retarget(ts);
    }

    /// A new sample of other processes' load per CPU, in thousandths of a
    /// nice-0 task; CPUs not listed count 0, a CPU listed twice counts the
    /// sum, saturating at [`MAX_EXTERNAL_MILLI`] per CPU.
    pub(crate) fn external_load(&mut self, load_milli: impl Iterator<Item = (CpuId, u64)>) {
        // Only the CPUs of the last sample with load, and of this one, are
        // touched: O(sample), not O(machine).
        let st = &mut *self.st;
        for &c in &st.external_cpus {
            let old = std::mem::take(&mut st.external[c.0 as usize]);
            st.load.sub_cpu(c, old);
            st.pinned.external(self.topo, c, old, false);
        }
        st.external_cpus.clear();
        for (c, m) in load_milli {
            let e = &mut st.external[c.0 as usize];
            *e = e.saturating_add(m).min(MAX_EXTERNAL_MILLI);
            if *e > 0 {
                st.external_cpus.push(c);
            }
        }
        st.external_cpus.sort_unstable();
        st.external_cpus.dedup();
        for &c in &st.external_cpus {
            st.load.add_cpu(c, st.external[c.0 as usize]);
            (st.pinned).external(self.topo, c, st.external[c.0 as usize], true);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::event::{Decision, Event};
    use crate::ids::{AppId, CpuId, DfId, GroupId, TaskId};
    use crate::testutil::{p, places, set, H};
    use crate::topology::Topology;

    fn two_cpus() -> H {
        H::new(Topology::test(1, 1, 2, 1))
    }

    /// 8 CPUs: node 0-7 ⊃ LLCs 0-3, 4-7 ⊃ SMT cores {0,1}, {2,3}, … .
    fn eight_cpus() -> H {
        H::new(Topology::test(1, 2, 2, 2))
    }

    #[test]
    fn a_new_task_is_runnable_unmanaged_and_not_placed() {
        let mut h = two_cpus();
        assert!(h.task(1, "0-1").is_empty());
        assert_eq!(h.load(), vec![500, 500]);
        assert_eq!(h.target(1), "0-1");
        // Allowed CPUs the machine lacks are cut off.
        h.task(2, "1-5");
        assert_eq!(h.e.task(TaskId(2)).unwrap().allowed, set("1"));
        assert_eq!(h.load(), vec![500, 1500]);
    }

    #[test]
    fn a_new_df_goes_to_the_least_loaded_cpu() {
        let mut h = H::new(Topology::test(1, 1, 4, 1));
        assert_eq!(places(&h.task_df(1, "0-3", 1)), p(&[(1, "0")]));
        assert_eq!(places(&h.task_df(2, "0-3", 2)), p(&[(2, "1")]));
        assert_eq!(places(&h.task_df(3, "0-3", 3)), p(&[(3, "2")]));
        assert_eq!(places(&h.task_df(4, "0-3", 4)), p(&[(4, "3")]));
        assert_eq!(h.e.stats().groups_created, 4);
        assert_eq!(h.e.stats().hints, 4);
        assert_eq!(h.e.stats().placements, 4);
        // Only allowed CPUs are considered.
        let mut h = H::new(Topology::test(1, 1, 4, 1));
        assert_eq!(places(&h.task_df(1, "2-3", 1)), p(&[(1, "2")]));
    }

    #[test]
    fn external_load_steers_new_groups_away_from_busy_cpus() {
        let mut h = H::new(Topology::test(1, 1, 4, 1));
        h.external(&[2, 0, 1, 0]);
        assert_eq!(h.load(), vec![2000, 0, 1000, 0]);
        assert_eq!(places(&h.task_df(1, "0-3", 1)), p(&[(1, "1")]));
        assert_eq!(places(&h.task_df(2, "0-3", 2)), p(&[(2, "3")]));
        // A new sample replaces the old one.
        h.external(&[0, 0, 0, 5]);
        assert_eq!(h.load(), vec![0, 1000, 0, 6000]);
        assert_eq!(places(&h.task_df(3, "0-3", 3)), p(&[(3, "0")]));
    }

    fn milli(h: &mut H, load: &[u64]) -> Vec<Decision> {
        h.ev(Event::ExternalLoadMilli {
            load_milli: load
                .iter()
                .enumerate()
                .map(|(i, &m)| (CpuId(i as u32), m))
                .collect(),
        })
    }

    #[test]
    fn weighed_external_load_of_500_per_cpu_is_exactly_half_of_one_task_per_cpu() {
        let mut counted = H::new(Topology::test(1, 1, 4, 1));
        counted.external(&[1, 1, 1, 1]);
        let mut weighed = H::new(Topology::test(1, 1, 4, 1));
        milli(&mut weighed, &[500, 500, 500, 500]);
        assert_eq!(counted.load(), vec![1000; 4]);
        assert_eq!(weighed.load(), vec![500; 4]);
        // Each new sample replaces the last, whichever event gave it.
        counted.external(&[0, 0, 0, 0]);
        milli(&mut counted, &[0, 250, 0, 1250]);
        assert_eq!(counted.load(), vec![0, 250, 0, 1250]);
        counted.external(&[2]);
        assert_eq!(counted.load(), vec![2000, 0, 0, 0]);
    }

    #[test]
    fn weighed_external_load_in_whole_tasks_decides_as_the_counted_sample() {
        let counts = [3u32, 0, 1, 2];
        let mut counted = H::new(Topology::test(1, 1, 4, 1));
        let mut weighed = H::new(Topology::test(1, 1, 4, 1));
        assert_eq!(
            counted.external(&counts),
            milli(&mut weighed, &counts.map(|n| u64::from(n) * 1000))
        );
        for t in 1..=6 {
            assert_eq!(
                counted.task_df(t, "0-3", t % 3),
                weighed.task_df(t, "0-3", t % 3)
            );
        }
        assert_eq!(counted.balance(), weighed.balance());
        assert_eq!(counted.load(), weighed.load());
    }

    #[test]
    fn weighed_external_load_sums_a_repeated_cpu_and_saturates() {
        let mut h = two_cpus();
        h.ev(Event::ExternalLoadMilli {
            load_milli: vec![(CpuId(1), 300), (CpuId(1), 450), (CpuId(0), u64::MAX)],
        });
        assert_eq!(h.load(), vec![u64::from(u32::MAX) * 1000, 750]);
        milli(&mut h, &[]);
        assert_eq!(h.load(), vec![0, 0]);
        let err = h.refused(Event::ExternalLoadMilli {
            load_milli: vec![(CpuId(0), 1), (CpuId(2), 1)],
        });
        assert_eq!(err, crate::error::CoreError::UnknownCpu(CpuId(2)));
    }

    #[test]
    fn a_known_df_joins_its_group_at_the_group_home() {
        let mut h = two_cpus();
        h.external(&[2, 2]); // heavy: one CPU per group
        h.task_df(1, "0-1", 1);
        h.task_df(2, "0-1", 2);
        assert_eq!((h.target(1), h.target(2)), ("0".into(), "1".into()));
        assert_eq!(places(&h.task_df(3, "0-1", 1)), p(&[(3, "0")]));
        assert_eq!(places(&h.task_df(4, "0-1", 2)), p(&[(4, "1")]));
        assert_eq!(
            h.e.group(GroupId(1)).unwrap().members,
            vec![TaskId(1), TaskId(3)]
        );
        assert_eq!(h.e.stats().rehomes, 0);
    }

    #[test]
    fn light_load_homes_grow_from_cpu_to_core_to_llc() {
        let mut h = eight_cpus();
        assert_eq!(places(&h.task_df(1, "0-7", 1)), p(&[(1, "0")]));
        // Two threads no longer fit one CPU: the group moves to the core.
        assert_eq!(
            places(&h.task_df(2, "0-7", 1)),
            p(&[(1, "0-1"), (2, "0-1")])
        );
        let three = h.task_df(3, "0-7", 1);
        assert_eq!(places(&three), p(&[(1, "0-3"), (2, "0-3"), (3, "0-3")]));
        h.task_df(4, "0-7", 1);
        assert_eq!(h.home(4), "0-3", "an LLC holds 4");
        h.task_df(5, "0-7", 1);
        assert_eq!(h.home(5), "0-7");
        assert_eq!(h.e.stats().rehomes, 3);
    }

    #[test]
    fn heavy_load_homes_are_one_cpu_on_both_shapes() {
        let mut h = eight_cpus();
        h.external(&[2; 8]);
        for t in 1..=3 {
            h.task_df(t, "0-7", 1);
        }
        assert_eq!(h.home(3), "0");
        let mut h = two_cpus();
        h.external(&[2, 2]);
        h.task_df(1, "0-1", 1);
        h.task_df(2, "0-1", 1);
        assert_eq!((h.home(2), h.target(1)), ("0".into(), "0".into()));
    }

    #[test]
    fn a_df_switch_at_the_regime_boundary_moves_only_the_switching_thread() {
        // 4 threads in 2 DFs on 2 CPUs (2 runnable a CPU: the heavy
        // threshold), each switching to the other DF in turn, as
        // `bench overhead`'s hinting program does every 100 ms.
        let mut h = two_cpus();
        let mut df = [0, 2, 1, 2, 1];
        for t in 1..=4 {
            h.task_df(t, "0-1", df[t as usize]);
        }
        h.balance();
        assert_eq!(h.load(), vec![2000, 2000], "settled: a DF a CPU");
        let rehomes = h.e.stats().rehomes;
        for round in 0..3 {
            for t in 1..=4u64 {
                df[t as usize] = 3 - df[t as usize];
                let d = h.hint(t, Some(df[t as usize]));
                assert_eq!(
                    d.iter()
                        .filter(|d| matches!(d, Decision::Place { .. }))
                        .count(),
                    1,
                    "round {round}, task {t}: {d:?}"
                );
                assert!(
                    places(&d).iter().all(|(task, _)| *task == t),
                    "round {round}: task {t}'s hint moved another: {d:?}"
                );
            }
            assert_eq!(h.load(), vec![2000, 2000], "round {round}");
        }
        assert_eq!(h.e.stats().rehomes, rehomes, "no group re-homed");
    }

    #[test]
    fn a_df_switch_leaves_the_old_group_and_is_placed_anew() {
        let mut h = eight_cpus();
        h.task_df(1, "0-7", 1);
        h.task_df(2, "0-7", 1);
        assert_eq!(h.home(1), "0-1");
        let d = h.hint(2, Some(2));
        // The switcher gets the least-loaded CPU for its new DF, in the
        // emptier LLC (4-7) rather than beside the old group; then the old
        // group, re-evaluated with the switcher there, shrinks back to one
        // CPU.
        assert_eq!(places(&d), p(&[(2, "4"), (1, "0")]));
        assert_eq!(h.e.group(GroupId(1)).unwrap().members, vec![TaskId(1)]);
        assert_eq!(h.e.task(TaskId(2)).unwrap().group, Some(GroupId(2)));
        assert_eq!(h.e.stats().groups_created, 2);
    }

    #[test]
    fn hinting_no_df_makes_a_task_unmanaged_on_its_allowed_cpus() {
        let mut h = two_cpus();
        h.task_df(1, "0-1", 1);
        let d = h.hint(1, None);
        assert_eq!(
            d,
            vec![
                Decision::GroupReclaimed { group: GroupId(1) },
                Decision::Place {
                    task: TaskId(1),
                    cpus: set("0-1")
                },
            ]
        );
        let v = h.e.task(TaskId(1)).unwrap();
        assert_eq!((v.df, v.group), (None, None));
        assert!(h.e.groups().is_empty());
    }

    #[test]
    fn a_hint_that_changes_nothing_emits_nothing() {
        let mut h = two_cpus();
        h.task_df(1, "0-1", 1);
        let before = h.e.stats().placements;
        assert!(h.hint(1, Some(1)).is_empty());
        h.task(2, "0-1");
        assert!(h.hint(2, None).is_empty());
        assert_eq!(h.e.stats().placements, before);
        assert_eq!(h.e.stats().hints, 3, "they still count as hints");
    }

    #[test]
    fn exit_drops_the_counter_and_reclaims_the_group_at_zero() {
        let mut h = two_cpus();
        h.task_df(1, "0-1", 1);
        h.task_df(2, "0-1", 1);
        assert_eq!(h.home(2), "0-1");
        // One left: the group shrinks to a CPU and is not reclaimed.
        let d = h.ev(Event::Exit { task: TaskId(1) });
        assert_eq!(
            d,
            vec![Decision::Place {
                task: TaskId(2),
                cpus: set("0")
            }]
        );
        assert_eq!(h.e.group(GroupId(1)).unwrap().members, vec![TaskId(2)]);
        assert_eq!(h.load(), vec![1000, 0]);
        let d = h.ev(Event::Exit { task: TaskId(2) });
        assert_eq!(d, vec![Decision::GroupReclaimed { group: GroupId(1) }]);
        assert!(h.e.task(TaskId(2)).is_none());
        assert!(h.e.df_groups(AppId(0), DfId(1)).is_empty());
        assert_eq!(h.e.stats().groups_reclaimed, 1);
        assert_eq!(h.load(), vec![0, 0]);
        // The DF is new again: a new group.
        h.task_df(3, "0-1", 1);
        assert_eq!(h.e.task(TaskId(3)).unwrap().group, Some(GroupId(2)));
    }

    #[test]
    fn blocking_stops_counting_load_and_keeps_the_group() {
        let mut h = two_cpus();
        h.task_df(1, "0-1", 1);
        assert!(h.ev(Event::Block { task: TaskId(1) }).is_empty());
        assert_eq!(h.load(), vec![0, 0]);
        let g = h.e.group(GroupId(1)).unwrap();
        assert_eq!((g.members.len(), g.runnable), (1, 0));
        // Blocking twice is harmless.
        assert!(h.ev(Event::Block { task: TaskId(1) }).is_empty());
        assert_eq!(h.e.group(GroupId(1)).unwrap().runnable, 0);
    }

    #[test]
    fn wake_looks_up_the_df_and_rejoins_the_group() {
        let mut h = eight_cpus();
        h.task_df(1, "0-7", 1);
        h.task_df(2, "0-7", 1);
        h.ev(Event::Block { task: TaskId(2) });
        // Two runnable members: the core still holds them.
        assert_eq!(places(&h.task_df(3, "0-7", 1)), p(&[(3, "0-1")]));
        // Waking unchanged: no Place.
        h.ev(Event::Block { task: TaskId(3) });
        assert!(h.ev(Event::Wake { task: TaskId(3) }).is_empty());
        // Waking the third runnable member: the group needs the LLC, and
        // every member moves with it.
        let d = h.ev(Event::Wake { task: TaskId(2) });
        assert_eq!(places(&d), p(&[(1, "0-3"), (2, "0-3"), (3, "0-3")]));
        assert_eq!(h.e.group(GroupId(1)).unwrap().runnable, 3);
        // Waking a runnable task is harmless.
        assert!(h.ev(Event::Wake { task: TaskId(2) }).is_empty());
    }

    #[test]
    fn sleeping_members_are_placed_when_their_group_moves() {
        let mut h = eight_cpus();
        h.task_df(1, "0-7", 1);
        h.task_df(2, "0-7", 1);
        h.ev(Event::Block { task: TaskId(2) });
        h.task_df(3, "0-7", 1);
        let d = h.task_df(4, "0-7", 1);
        assert_eq!(
            places(&d),
            p(&[(1, "0-3"), (2, "0-3"), (3, "0-3"), (4, "0-3")])
        );
        assert!(!h.e.task(TaskId(2)).unwrap().runnable);
    }

    #[test]
    fn allowed_changes_replace_the_task_and_never_leave_its_cpus() {
        let mut h = two_cpus();
        h.task(1, "0-1");
        let d = h.ev(Event::Allowed {
            task: TaskId(1),
            allowed: set("1"),
        });
        assert_eq!(places(&d), p(&[(1, "1")]));
        assert_eq!(h.load(), vec![0, 1000]);
        // A group follows its members when it may.
        h.ev(Event::Exit { task: TaskId(1) });
        h.task_df(2, "0-1", 2);
        assert_eq!(h.home(2), "0");
        let d = h.ev(Event::Allowed {
            task: TaskId(2),
            allowed: set("1"),
        });
        assert_eq!(places(&d), p(&[(2, "1")]));
        assert_eq!(h.home(2), "1");
    }

    #[test]
    fn a_member_whose_allowed_set_misses_the_home_runs_off_home() {
        let mut h = two_cpus();
        h.external(&[2, 2]);
        h.task_df(1, "0", 1);
        h.task_df(2, "0-1", 1);
        assert_eq!(h.home(1), "0");
        // The members' allowed sets no longer meet: the group keeps its
        // home and task 2 runs on its own allowed set.
        let d = h.ev(Event::Allowed {
            task: TaskId(2),
            allowed: set("1"),
        });
        assert_eq!(places(&d), p(&[(2, "1")]));
        assert_eq!(h.home(2), "0");
        assert_eq!(h.e.stats().off_home_placements, 1);
    }

    #[test]
    fn tasks_of_two_apps_with_the_same_df_id_are_not_grouped() {
        let mut h = two_cpus();
        h.ev(Event::AppNew { app: AppId(1) });
        h.task_df(1, "0-1", 7);
        h.ev(Event::TaskNew {
            task: TaskId(2),
            app: AppId(1),
            allowed: set("0-1"),
            cpu: None,
        });
        h.ev(Event::Hint {
            task: TaskId(2),
            app: AppId(1),
            cur: None,
            next: Some(DfId(7)),
        });
        assert_eq!(h.e.groups().len(), 2);
        assert_eq!(h.e.df_groups(AppId(1), DfId(7)), vec![GroupId(2)]);
    }

    #[test]
    fn threads_that_have_not_hinted_yet_do_not_crowd_out_the_first_hinter() {
        // Two threads start on 2 CPUs (500 each per CPU); each then hints
        // its own DF. Each gets its own CPU: the other's half-task on every
        // CPU is a thread that can run elsewhere.
        let mut h = two_cpus();
        h.task(1, "0-1");
        h.task(2, "0-1");
        assert_eq!(places(&h.hint(1, Some(1))), p(&[(1, "0")]));
        assert_eq!(places(&h.hint(2, Some(2))), p(&[(2, "1")]));
    }
}
