//! [`View`]: read-only questions about a group's members and load, and
//! the two places the home rule's inputs are built in place — `base` in
//! the engine's load, the pinned load in the state's maintained one
//! (`State::pinned`) — for `Ctx`'s evaluations (`state.rs`).
//!
//! Invariant: whatever a view takes off the load or the maintained pinned
//! load, its caller puts back before the state is used again
//! (`take_base(.., true)`, `take_off(.., true)`); debug builds check both
//! (the load against a copy, the pinned load against a fresh build), and
//! `State::check` recounts both after every event of the property tests.

use super::{group_allowed, target_for, Census, GroupSlot, State, TaskSlot};
use crate::cothread::Pinned;
use crate::cpuset::CpuSet;
use crate::load::{share_within, LoadVec, TASK_MILLI};
use crate::topology::Topology;
use std::borrow::Cow;

/// What a group's re-evaluation needs before any load vector is built.
pub(crate) struct Facts<'s> {
    /// `A`: the CPUs the group may use.
    pub allowed: Cow<'s, CpuSet>,
    /// `r`: its runnable members.
    pub runnable: u64,
    /// `base(A) + r × 1000`: the load on `A` with the group counted.
    pub load_on_a_milli: u64,
}

/// Read-only questions about a group's members and load. While the home
/// rule runs (`Ctx::evaluate_by_the_rule`, `Ctx::home_for_new`) the
/// state's `load` and `pinned` are out of it — `base` and the pinned load
/// are built in them in place — so a view never reads `st.load` or
/// `st.pinned`: the load is passed in (`View::facts`).
#[derive(Clone, Copy)]
pub(crate) struct View<'s> {
    /// The machine.
    pub topo: &'s Topology,
    /// The state.
    pub st: &'s State,
}

impl<'s> View<'s> {
    /// The members of `group` by allowed set, as `(allowed set, members,
    /// runnable)`; nothing for `None`. Never includes the mover of an
    /// event: it is taken out of the census before a group is evaluated,
    /// and put in after.
    #[inline]
    pub(super) fn census_of(
        self,
        group: Option<GroupSlot>,
    ) -> impl Iterator<Item = (&'s CpuSet, u32, u32)> + Clone {
        let census: &'s [(CpuSet, Census)] = match group {
            Some(g) => &self.st.groups[g].census,
            None => &[],
        };
        census
            .iter()
            .map(|(allowed, c)| (allowed, c.members, c.runnable))
    }

    /// The target of a member of `group` with allowed set `allowed`.
    #[inline]
    pub(super) fn member_target(self, group: GroupSlot, allowed: &CpuSet) -> CpuSet {
        target_for(self.topo, allowed, Some(self.st.groups[group].home)).0
    }

    /// `P` of a co-thread group (`cothread.rs`): the union of its members'
    /// targets. Never includes the mover of an event (not in the census).
    pub(crate) fn co_thread_cpus(self, group: GroupSlot) -> CpuSet {
        let mut p = CpuSet::new();
        for (a, _, _) in self.census_of(Some(group)) {
            let t = self.member_target(group, a);
            if !t.is_subset(&p) {
                p = p.union(&t);
            }
        }
        p
    }

    /// `A`, `r` and the load on `A` of a group (or of no group: `None` for
    /// a new one), with `mover` (a task changing groups in this event, not
    /// in the census) counted as a member when `mover_joins`, `load` being
    /// the engine's load (`State::load`, passed apart since the slow path
    /// takes it out of the state to build `base` in it). No load vector is
    /// built.
    pub(crate) fn facts(
        self,
        load: &LoadVec,
        group: Option<GroupSlot>,
        mover: Option<TaskSlot>,
        mover_joins: bool,
    ) -> Facts<'s> {
        let census = self.census_of(group);
        let mover = mover.map(|m| &self.st.tasks[m]);
        let joining = mover
            .filter(|_| mover_joins)
            .map(|t| (&t.allowed, u32::from(t.runnable)));
        let entries = census.clone().map(|(a, _, r)| (a, r)).chain(joining);
        let runnable: u64 = entries.clone().map(|(_, r)| u64::from(r)).sum();
        let allowed = group_allowed(entries, runnable > 0);
        // base(A) = load(A) minus what the group and the mover put on A.
        let mut taken = 0;
        for (a, _, r) in census.filter(|c| c.2 > 0) {
            let target = self.member_target(group.expect("a census has a group"), a);
            taken += u64::from(r) * share_within(&target, &allowed);
        }
        if let Some(t) = mover.filter(|t| t.runnable) {
            taken += share_within(&t.target, &allowed);
        }
        let on_a = (self.load_on(load, &allowed) + runnable * TASK_MILLI).saturating_sub(taken);
        Facts {
            allowed,
            runnable,
            load_on_a_milli: on_a,
        }
    }

    /// Writes into `pinned` the load pinned where it is (`cothread.rs`,
    /// "Why pinned load") without a group's runnable members and without
    /// `mover`, spread load counted by its share on `allowed` (`A`): the
    /// same load as [`View::base_without`], sorted by where it may run.
    /// O(CPUs with external load + groups × distinct allowed sets), not
    /// O(machine) (`Pinned` resets and sums only what it wrote); allocates
    /// only the first time `pinned` is used.
    ///
    /// Under `Policy::CoThread`, the only policy with co-thread groups,
    /// every task is in a group (invariant 1) but the mover of an event,
    /// which is left out anyway: the groups' censuses hold every other
    /// engine task. Should an unmanaged task be runnable all the same, the
    /// sums disagree with `base(A)` and the tasks are walked.
    pub(crate) fn pinned_without(
        self,
        group: Option<GroupSlot>,
        mover: Option<TaskSlot>,
        allowed: &CpuSet,
        base_on_a_milli: u64,
        pinned: &mut Pinned,
    ) {
        pinned.reset(self.topo);
        let topo = self.topo;
        let add = |pinned: &mut Pinned, target: &CpuSet, n: u64| {
            if target.len() == 1 {
                let c = target.first().expect("one CPU");
                pinned.add_cpu(c, n * TASK_MILLI);
            } else {
                let d = topo.smallest_holding(target);
                pinned.add_inside(d, n * share_within(target, allowed));
            }
        };
        for &c in &self.st.external_cpus {
            pinned.add_cpu(c, self.st.external[c.0 as usize]);
        }
        for (_, slot, grp) in self.st.groups.iter() {
            if Some(slot) == group || grp.runnable == 0 {
                continue;
            }
            let home = topo.domain(grp.home);
            for (a, _, r) in self.census_of(Some(slot)).filter(|c| c.2 > 0) {
                let r = u64::from(r);
                if !home.cpus.is_subset(a) {
                    add(pinned, &self.member_target(slot, a), r);
                } else if home.children.is_empty() {
                    // A leaf: the target is its one CPU.
                    let c = home.cpus.first().expect("domains are never empty");
                    pinned.add_cpu(c, r * TASK_MILLI);
                } else {
                    // The target is the home's CPUs (invariant 3), and no
                    // two domains have the same CPUs: the smallest domain
                    // holding it is the home. What `add` finds, without
                    // building the target or walking up to it.
                    pinned.add_inside(home.id, r * share_within(&home.cpus, allowed));
                }
            }
        }
        if pinned.sum_on(allowed) != base_on_a_milli {
            let mover = mover.map(|m| self.st.tasks.id(m));
            for (id, _, t) in self.st.tasks.iter() {
                if t.group.is_none() && t.runnable && Some(id) != mover {
                    add(pinned, &t.target, 1);
                }
            }
        }
        debug_assert_eq!(pinned.sum_on(allowed), base_on_a_milli);
    }

    /// Takes off the maintained pinned load `kept` (`State::pinned`, out
    /// of the state while it is used) what `pinned_without` leaves out —
    /// `group`'s runnable members at their targets and `mover` if it is
    /// runnable (in no census) — or, with `put_back`, counts them again.
    /// O(distinct allowed sets of the group), whatever the machine.
    pub(super) fn take_off(
        self,
        group: Option<GroupSlot>,
        mover: Option<TaskSlot>,
        kept: &mut Pinned,
        put_back: bool,
    ) {
        let topo = self.topo;
        if let Some(g) = group {
            let home = topo.domain(self.st.groups[g].home);
            for (a, _, r) in self.census_of(group).filter(|c| c.2 > 0) {
                let r = u64::from(r);
                if home.cpus.is_subset(a) {
                    // The target is the home's CPUs (invariant 3), and no
                    // two domains have the same CPUs.
                    kept.count_tasks(topo, &home.cpus, Some(home.id), r, put_back);
                } else {
                    kept.count_tasks(topo, &self.member_target(g, a), None, r, put_back);
                }
            }
        }
        if let Some(t) = mover.map(|m| &self.st.tasks[m]).filter(|t| t.runnable) {
            kept.count_tasks(topo, &t.target, None, 1, put_back);
        }
    }

    /// The pinned load without `group` and `mover`, as `pinned_without`
    /// builds it: for `A` = the machine, the maintained one `kept` with
    /// them taken off (O(the group's census), and the caller puts them back
    /// with `take_off(.., true)` once done: the result says so); for any
    /// other `A`, built in `scratch` (O(groups)). In debug builds the first
    /// is compared with the second, so a stale cache fails every test that
    /// evaluates a group.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pinned_for(
        self,
        group: Option<GroupSlot>,
        mover: Option<TaskSlot>,
        allowed: &CpuSet,
        base_on_a_milli: u64,
        scratch: &mut Pinned,
        kept: &mut Pinned,
    ) -> bool {
        if allowed != self.topo.cpus() {
            self.pinned_without(group, mover, allowed, base_on_a_milli, scratch);
            return false;
        }
        self.take_off(group, mover, kept, false);
        if cfg!(debug_assertions) {
            self.pinned_without(group, mover, allowed, base_on_a_milli, scratch);
            assert!(
                scratch.same_load(kept),
                "the maintained pinned load is stale: {kept:?}, built {scratch:?}"
            );
        }
        true
    }

    /// Σ `load` over `set`; O(1) for the whole machine.
    #[inline]
    pub(super) fn load_on(self, load: &LoadVec, set: &CpuSet) -> u64 {
        if set == self.topo.cpus() {
            load.total()
        } else {
            load.sum(set)
        }
    }

    /// Turns the engine's load `load` (out of the state while it is used)
    /// into the home rule's `base` in place — without `group`'s runnable
    /// members at their targets and without `mover` if it is runnable — or,
    /// with `put_back`, back into the engine's load. O(the CPUs of those
    /// targets), where a copy of the vector was O(machine) (64 KiB on
    /// 8,192 CPUs, 40 % of a hint there). Taking off then putting back the
    /// same tasks restores the vector bit for bit (`load.rs`); debug
    /// builds check it, and `State::check` recounts the load after every
    /// event of the property tests.
    pub(super) fn take_base(
        self,
        group: Option<GroupSlot>,
        mover: Option<TaskSlot>,
        load: &mut LoadVec,
        put_back: bool,
    ) {
        let mut count = |target: &CpuSet, n: u64| {
            if put_back {
                load.add_tasks(target, n);
            } else {
                load.sub_tasks(target, n);
            }
        };
        if let Some(g) = group {
            let home = self.topo.domain(self.st.groups[g].home);
            for (a, _, r) in self.census_of(group).filter(|c| c.2 > 0) {
                if home.cpus.is_subset(a) {
                    // The target is the home's CPUs (invariant 3).
                    count(&home.cpus, u64::from(r));
                } else {
                    count(&self.member_target(g, a), u64::from(r));
                }
            }
        }
        if let Some(t) = mover.map(|m| &self.st.tasks[m]).filter(|t| t.runnable) {
            count(&t.target, 1);
        }
    }
}
