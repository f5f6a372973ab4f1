//! The engine's state and the few primitives every procedure is built from.
//!
//! ```text
//!   State ─ apps:   AppId  → App   { dfs: GroupKind → [group slot, …] }
//!         │                 (DF map; the co-thread group under CoThread)
//!         ├ groups: slab of GroupId → Group { app, kind, home, runnable,
//!         │                 members: TaskId → task slot,
//!         │                 census: [(allowed set, counts)] }
//!         ├ tasks:  slab of TaskId → Task { app, df, group slot, runnable,
//!         │                 allowed, solo_home, target, placed, last_cpu }
//!         └ load:   per-CPU thousandths (see `load.rs`)
//! ```
//!
//! Tasks and groups live in slabs (`slab.rs`): an event looks its task up
//! by id once, and follows slots from there (a task's group, a group's
//! members, a DF's groups) without another search.
//!
//! Invariants (all checked by `State::check`, in `invariants.rs`):
//! 1. a task is in exactly one group when it has a DF, and — under
//!    `Policy::CoThread` — when it has none (then in a co-thread group of
//!    its application); in none otherwise; its group has its application
//!    and its kind is the task's DF (the co-thread marker for no DF);
//! 2. a group has at least one member (it is reclaimed at 0), its `runnable`
//!    counts its runnable members, its `census` counts its members by allowed
//!    set, and its app's DF map lists it under its DF; DF map entries are
//!    never empty;
//! 3. a task's `allowed` is non-empty and within the machine; its `target` is
//!    `home ∩ allowed`, or `allowed` when that is empty ("off-home"), where
//!    `home` is its group's home, its balancer-chosen `solo_home` when it has
//!    no group, or its allowed set when it has neither; so nothing is ever
//!    targeted outside its allowed CPUs;
//! 4. `load` = the external load (in thousandths) + one task's shares on
//!    the target of every runnable task.
//!
//! Every walk that can affect a decision goes in id order (the slabs' and
//! the maps' order; a census in allowed-set order), which makes decisions
//! deterministic. Slots only name things, they never order them.
//!
//! [`View`] (`view.rs`) answers read-only questions about a group and builds
//! the home rule's inputs in place.
//!
//! [`Ctx`] bundles the state with the read-only topology and configuration,
//! the decision list and a scratch pinned load, and offers the primitives:
//! re-target a task (the only place a `Place` is emitted and the load of a
//! task changes), re-home a group, create and reclaim groups. Procedures and
//! the balancer are written on top of it.

use crate::config::Config;
use crate::cothread::{Near, Pinned};
use crate::cpuset::CpuSet;
use crate::engine::Stats;
use crate::event::Decision;
use crate::home::{self, Shape};
use crate::ids::{AppId, CpuId, DfId, DomainId, GroupId, GroupKind, TaskId};
use crate::load::{LoadVec, TASK_MILLI};
use crate::topology::Topology;
use std::borrow::Cow;
use std::collections::BTreeMap;

#[path = "invariants.rs"]
mod invariants;
#[path = "members.rs"]
mod members;
#[path = "slab.rs"]
mod slab;
#[path = "view.rs"]
mod view;
pub(crate) use members::Members;
pub(crate) use slab::{Slab, Slot};
pub(crate) use view::{Facts, View};

/// Where a task lives in [`State::tasks`].
pub(crate) type TaskSlot = Slot<TaskId>;
/// Where a group lives in [`State::groups`].
pub(crate) type GroupSlot = Slot<GroupId>;

/// A task the engine knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    /// Its application.
    pub app: AppId,
    /// Its current DF; `None` = unmanaged, or a co-thread group member.
    pub df: Option<DfId>,
    /// Its group: `Some` when `df` is, and when it is not under
    /// `Policy::CoThread` (its co-thread group).
    pub group: Option<GroupSlot>,
    /// Whether it counts as load.
    pub runnable: bool,
    /// Its allowed CPUs, already cut down to the machine's; never empty.
    pub allowed: CpuSet,
    /// Where the balancer put it while unmanaged; `None` = its allowed set.
    /// Always `None` for a task in a group (its group's home rules).
    pub solo_home: Option<DomainId>,
    /// Where it may run now: see invariant 3.
    pub target: CpuSet,
    /// Whether a `Place` was ever issued for it (a new task runs where the
    /// body put it, on its allowed set, without one).
    pub placed: bool,
    /// The CPU it last ran on, as far as the engine knows: `TaskNew::cpu`,
    /// then the last single-CPU target it was given. The co-thread rule's
    /// `L` (`cothread.rs`).
    pub last_cpu: Option<CpuId>,
}

/// A priority group: the tasks of one DF of one application (or its
/// co-threads), on one home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// Its application.
    pub app: AppId,
    /// Its DF, or the co-thread marker.
    pub kind: GroupKind,
    /// Its home domain.
    pub home: DomainId,
    /// Its members, in id order, with their slots; never empty (the paper's
    /// counter is `members.len()`).
    pub members: Members,
    /// How many members are runnable.
    pub runnable: usize,
    /// Members counted by allowed set, in set order; no entry without a
    /// member. A member's target is a function of the home and its allowed
    /// set (invariant 3), so this is all the home rule needs to know about
    /// the members: re-evaluating a group costs O(distinct allowed sets ×
    /// CPUs) — usually one set — and not O(members). A sorted `Vec`, since
    /// it nearly always has one entry.
    pub census: Vec<(CpuSet, Census)>,
}

/// How many members of a group have one allowed set, and how many of those
/// are runnable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Members with this allowed set.
    pub members: u32,
    /// Of those, the runnable ones.
    pub runnable: u32,
}

/// An application's DF map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct App {
    /// DF (or the co-thread marker) → its groups, in id order (one, unless
    /// the balancer split it); never an empty list.
    pub dfs: BTreeMap<GroupKind, Vec<GroupSlot>>,
}

/// Everything the engine knows, apart from the topology and configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct State {
    /// Applications that give DF information; `AppId(0)` always.
    pub apps: BTreeMap<AppId, App>,
    /// Known tasks.
    pub tasks: Slab<TaskId, Task>,
    /// Live groups.
    pub groups: Slab<GroupId, Group>,
    /// Load per CPU (invariant 4).
    pub load: LoadVec,
    /// External load per CPU in thousandths of a task, indexed by
    /// `CpuId.0` (1000 per task of an `ExternalLoad` sample).
    pub external: Vec<u64>,
    /// The CPUs whose `external` load is not 0, in CPU order: the pinned
    /// load (`View::pinned_without`) and the next sample walk these, not
    /// every CPU — most of a big machine's CPUs have no sample. Rebuilt by
    /// every `ExternalLoad` sample; checked by `State::check`.
    pub external_cpus: Vec<CpuId>,
    /// Cache: the pinned load (`cothread::Pinned`) of every runnable task
    /// at its target and of the external load, for `A` = the machine —
    /// what `View::pinned_without` would build with no group left out.
    /// Changed wherever `load` is (the same tasks, the same targets), so
    /// it is never stale; an evaluation of a group allowed on the whole
    /// machine takes the group and the mover off it and puts them back
    /// (`View::take_off`) instead of walking every group. Checked against a
    /// recount by `State::check`, and against `pinned_without` in debug
    /// builds at every use.
    pub pinned: Pinned,
    /// The id the next group gets; ids are never reused.
    pub next_group: u64,
    /// Consecutive balancer passes that ended imbalanced with nothing moved.
    pub persistence: u32,
    /// Counters.
    pub stats: Stats,
}

impl State {
    /// The state of a fresh engine: application 0, no tasks, no load.
    pub(crate) fn new(topo: &Topology) -> State {
        let load = LoadVec::zero(topo.cpus());
        let len = topo.cpus().last().map_or(0, |c| c.0 as usize + 1);
        State {
            apps: BTreeMap::from([(AppId(0), App::default())]),
            tasks: Slab::default(),
            groups: Slab::default(),
            load,
            external: vec![0; len],
            external_cpus: Vec::new(),
            pinned: Pinned::maintained(topo),
            next_group: 1,
            persistence: 0,
            stats: Stats::default(),
        }
    }

    /// The home a task's target derives from (invariant 3); `None` = its
    /// allowed set.
    #[inline]
    pub(crate) fn home_of(&self, task: &Task) -> Option<DomainId> {
        match task.group {
            Some(g) => Some(self.groups[g].home),
            None => task.solo_home,
        }
    }

    /// The id of a task's group, if it has one.
    #[inline]
    pub(crate) fn group_id(&self, task: &Task) -> Option<GroupId> {
        task.group.map(|g| self.groups.id(g))
    }

    /// The groups of one kind of one application, in id order.
    pub(crate) fn kind_groups(&self, app: AppId, kind: GroupKind) -> Option<&[GroupSlot]> {
        self.apps.get(&app)?.dfs.get(&kind).map(Vec::as_slice)
    }
}

/// A task's target for a home (invariant 3), and whether it is off-home.
#[inline]
pub(crate) fn target_for(
    topo: &Topology,
    allowed: &CpuSet,
    home: Option<DomainId>,
) -> (CpuSet, bool) {
    match home {
        None => (allowed.clone(), false),
        Some(d) => {
            let t = topo.domain(d).cpus.intersection(allowed);
            if t.is_empty() {
                (allowed.clone(), true)
            } else {
                (t, false)
            }
        }
    }
}

/// The state with what it needs to act: topology, configuration, the
/// decisions of the event being handled, and a scratch pinned load.
pub(crate) struct Ctx<'a> {
    /// The machine.
    pub topo: &'a Topology,
    /// The tunables.
    pub config: &'a Config,
    /// The state being changed.
    pub st: &'a mut State,
    /// Decisions of this event, in order.
    pub out: &'a mut Vec<Decision>,
    /// The co-thread rule's pinned load is built here, for the same reason.
    pub pinned: &'a mut Pinned,
}

impl Ctx<'_> {
    /// Recomputes a task's target from its home and allowed set; when it
    /// changes, moves its load (if runnable) and emits `Place`. The only
    /// place a `Place` is emitted outside the balancer's task moves, which
    /// also come through here.
    pub(crate) fn retarget(&mut self, ts: TaskSlot) {
        let st = &mut *self.st;
        let home = st.home_of(&st.tasks[ts]);
        retarget_on(
            self.topo,
            &mut st.tasks,
            home,
            &mut st.load,
            &mut st.pinned,
            &mut st.stats,
            self.out,
            ts,
        );
    }

    /// The home a group should have now, by the home rule with hysteresis
    /// (`home.rs`), with `mover` left out of the load and, when
    /// `mover_joins`, counted as a member. Builds `base` (in place in the
    /// state's load) only when the cheap keep test cannot decide.
    pub(crate) fn evaluate(
        &mut self,
        g: GroupSlot,
        mover: Option<TaskSlot>,
        mover_joins: bool,
    ) -> DomainId {
        let last = mover
            .filter(|_| mover_joins)
            .and_then(|m| self.st.tasks[m].last_cpu);
        self.evaluate_from(g, mover, mover_joins, last)
    }

    /// [`Ctx::evaluate`] with the co-thread rule's `L` given: the CPU the
    /// task that set off the evaluation last ran on (ignored for DF
    /// groups).
    pub(crate) fn evaluate_from(
        &mut self,
        g: GroupSlot,
        mover: Option<TaskSlot>,
        mover_joins: bool,
        last: Option<CpuId>,
    ) -> DomainId {
        let view = View {
            topo: self.topo,
            st: self.st,
        };
        let current = view.st.groups[g].home;
        let co_thread = view.st.groups[g].kind == GroupKind::CoThread;
        let facts = view.facts(&view.st.load, Some(g), mover, mover_joins);
        let glance = home::keeps_at_a_glance(
            self.topo,
            self.config,
            &facts.allowed,
            facts.runnable,
            facts.load_on_a_milli,
            current,
            co_thread,
        );
        if glance == Some(true) {
            return current;
        }
        self.evaluate_by_the_rule(g, mover, mover_joins, last)
    }

    /// The end of [`Ctx::evaluate_from`] when the keep test at a glance
    /// cannot decide: the home rule on a base load built in the scratch
    /// vector and the pinned load. Out of line, so that its locals do not
    /// widen the hint path's stack frames (each line of stack a hint writes
    /// is a cache miss after the thread moved), and so that the state's
    /// pinned load is taken out of the state only here.
    #[inline(never)]
    fn evaluate_by_the_rule(
        &mut self,
        g: GroupSlot,
        mover: Option<TaskSlot>,
        mover_joins: bool,
        last: Option<CpuId>,
    ) -> DomainId {
        let mut load = std::mem::take(&mut self.st.load);
        let mut kept = std::mem::take(&mut self.st.pinned);
        let view = View {
            topo: self.topo,
            st: self.st,
        };
        let co_thread = view.st.groups[g].kind == GroupKind::CoThread;
        let facts = view.facts(&load, Some(g), mover, mover_joins);
        let near = co_thread.then(|| (view.co_thread_cpus(g), last));
        let home = by_the_rule(
            view,
            self.config,
            &facts,
            g,
            mover,
            near,
            &mut load,
            self.pinned,
            &mut kept,
        );
        self.st.load = load;
        self.st.pinned = kept;
        home
    }

    /// A fresh home for a new group of `kind` made of `mover` alone.
    #[inline(never)]
    pub(crate) fn home_for_new(&mut self, mover: TaskSlot, kind: GroupKind) -> DomainId {
        let mut load = std::mem::take(&mut self.st.load);
        let mut kept = std::mem::take(&mut self.st.pinned);
        let view = View {
            topo: self.topo,
            st: self.st,
        };
        let facts = view.facts(&load, None, Some(mover), true);
        let before = cfg!(debug_assertions).then(|| load.clone());
        view.take_base(None, Some(mover), &mut load, false);
        let none = CpuSet::new();
        let co_thread = kind == GroupKind::CoThread;
        // Both kinds: a co-thread group's heavy-load test and a DF group's
        // room test judge by where the load must run.
        let base_on_a = facts.load_on_a_milli - facts.runnable * TASK_MILLI;
        let (allowed, scratch) = (&facts.allowed, &mut *self.pinned);
        let used = view.pinned_for(None, Some(mover), allowed, base_on_a, scratch, &mut kept);
        let pinned = if used { &kept } else { &*self.pinned };
        let near = co_thread.then(|| Near {
            cpus: &none,
            last: view.st.tasks[mover].last_cpu,
            pinned,
        });
        let shape = Shape {
            base: &load,
            allowed: &facts.allowed,
            runnable: facts.runnable,
            near,
            spread: (!co_thread).then_some(pinned),
        };
        let home = home::choose(self.topo, self.config, &shape, None);
        if used {
            view.take_off(None, Some(mover), &mut kept, true);
        }
        view.take_base(None, Some(mover), &mut load, true);
        debug_assert!(before.is_none_or(|b| b == load), "the load is restored");
        self.st.load = load;
        self.st.pinned = kept;
        home
    }

    /// Moves a group to `home` and re-targets its members. Counts a re-home
    /// unless the balancer did it (it counts its own moves).
    pub(crate) fn rehome(&mut self, g: GroupSlot, home: DomainId, by_balancer: bool) {
        let grp = &mut self.st.groups[g];
        if grp.home == home {
            return;
        }
        grp.home = home;
        if !by_balancer {
            self.st.stats.rehomes += 1;
        }
        // Walk the members while re-targeting them: the group is only read,
        // the tasks, load and counters written — so nothing is copied.
        let st = &mut *self.st;
        for m in st.groups[g].members.slots() {
            let (tasks, load, stats) = (&mut st.tasks, &mut st.load, &mut st.stats);
            let pinned = &mut st.pinned;
            retarget_on(
                self.topo,
                tasks,
                Some(home),
                load,
                pinned,
                stats,
                self.out,
                m,
            );
        }
    }

    /// Re-evaluates a group's home by the home rule (with hysteresis),
    /// leaving `mover` out, and re-homes it if needed.
    pub(crate) fn reevaluate(&mut self, g: GroupSlot, mover: Option<TaskSlot>) {
        let home = self.evaluate(g, mover, false);
        self.rehome(g, home, false);
    }

    /// Creates an empty group of `(app, kind)` on `home` and lists it in the
    /// app's DF map. The caller adds members at once (a group is never left
    /// empty).
    #[inline(never)]
    pub(crate) fn create_group(
        &mut self,
        app: AppId,
        kind: GroupKind,
        home: DomainId,
    ) -> GroupSlot {
        let id = GroupId(self.st.next_group);
        self.st.next_group += 1;
        let slot = self.st.groups.insert(
            id,
            Group {
                app,
                kind,
                home,
                members: Members::default(),
                runnable: 0,
                census: Vec::new(),
            },
        );
        let list = self
            .st
            .apps
            .get_mut(&app)
            .expect("groups belong to known apps")
            .dfs
            .entry(kind)
            .or_default();
        // Ids only grow, so pushing keeps the list in id order.
        list.push(slot);
        self.st.stats.groups_created += 1;
        slot
    }

    /// Adds a task to a group's membership (not its target: the caller
    /// re-targets it).
    pub(crate) fn add_member(&mut self, g: GroupSlot, ts: TaskSlot) {
        let id = self.st.tasks.id(ts);
        let t = &mut self.st.tasks[ts];
        let grp = &mut self.st.groups[g];
        grp.members.insert(id, ts);
        grp.runnable += usize::from(t.runnable);
        census_add(&mut grp.census, &t.allowed, t.runnable);
        t.df = grp.kind.df();
        t.group = Some(g);
        t.solo_home = None;
    }

    /// Takes a task out of a group's membership, leaving it with no DF and
    /// no group; no reclaim, no re-evaluation, its target untouched.
    pub(crate) fn remove_member(&mut self, g: GroupSlot, ts: TaskSlot) {
        let id = self.st.tasks.id(ts);
        let t = &mut self.st.tasks[ts];
        let grp = &mut self.st.groups[g];
        grp.members.remove(id);
        grp.runnable -= usize::from(t.runnable);
        census_sub(&mut grp.census, &t.allowed, t.runnable);
        t.df = None;
        t.group = None;
    }

    /// Changes whether a task is runnable: its load, and its group's
    /// counts.
    pub(crate) fn set_runnable(&mut self, ts: TaskSlot, runnable: bool) {
        let t = &mut self.st.tasks[ts];
        if t.runnable == runnable {
            return;
        }
        t.runnable = runnable;
        if runnable {
            self.st.load.add_task(&t.target);
        } else {
            self.st.load.sub_task(&t.target);
        }
        (self.st.pinned).count_tasks(self.topo, &t.target, None, 1, runnable);
        if let Some(g) = t.group {
            let grp = &mut self.st.groups[g];
            let c = census_entry(&mut grp.census, &t.allowed);
            if runnable {
                grp.runnable += 1;
                c.runnable += 1;
            } else {
                grp.runnable -= 1;
                c.runnable -= 1;
            }
        }
    }

    /// Takes a task out of its group: the paper's counter drops; at 0 the
    /// group is reclaimed (`GroupReclaimed`), otherwise it is re-evaluated
    /// without the task. The task is left unmanaged; its target is not
    /// touched (the caller re-targets or forgets it).
    pub(crate) fn leave_group(&mut self, ts: TaskSlot) {
        let Some(g) = self.st.tasks[ts].group else {
            return;
        };
        self.remove_member(g, ts);
        if self.st.groups[g].members.is_empty() {
            self.reclaim(g);
        } else {
            self.reevaluate(g, Some(ts));
        }
    }

    /// [`Ctx::leave_group`] without the re-evaluation: the group left, if
    /// it still has members, for the caller to re-evaluate once the task
    /// is placed elsewhere (`Ctx::hint`).
    pub(crate) fn leave_group_later(&mut self, ts: TaskSlot) -> Option<GroupSlot> {
        let g = self.st.tasks[ts].group?;
        self.remove_member(g, ts);
        if self.st.groups[g].members.is_empty() {
            self.reclaim(g);
            None
        } else {
            Some(g)
        }
    }

    /// Forgets an empty group and its DF map entry.
    #[inline(never)]
    fn reclaim(&mut self, g: GroupSlot) {
        let id = self.st.groups.id(g);
        let grp = self.st.groups.remove(g);
        debug_assert!(grp.members.is_empty());
        let dfs = &mut self
            .st
            .apps
            .get_mut(&grp.app)
            .expect("groups belong to known apps")
            .dfs;
        if let Some(list) = dfs.get_mut(&grp.kind) {
            list.retain(|x| *x != g);
            if list.is_empty() {
                dfs.remove(&grp.kind);
            }
        }
        self.st.stats.groups_reclaimed += 1;
        self.out.push(Decision::GroupReclaimed { group: id });
    }

    /// Every CPU of the machine.
    pub(crate) fn machine(&self) -> &CpuSet {
        self.topo.cpus()
    }

    /// The leaf domain of a CPU of the machine.
    pub(crate) fn leaf(&self, cpu: CpuId) -> DomainId {
        self.topo
            .leaf(cpu)
            .expect("a CPU of the machine has a leaf")
    }
}

/// The home rule for group `g` when the keep test at a glance cannot
/// decide ([`Ctx::evaluate_by_the_rule`]): on `base`, built in place in
/// the engine's `load` (out of the state meanwhile) and turned back into it
/// before returning, and on the pinned load (`pinned` the scratch one,
/// `kept` the state's maintained one, out of the state too). Out of line,
/// so that its locals do not widen the hint path's stack frames.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn by_the_rule(
    view: View<'_>,
    config: &Config,
    facts: &Facts<'_>,
    g: GroupSlot,
    mover: Option<TaskSlot>,
    near: Option<(CpuSet, Option<CpuId>)>,
    load: &mut LoadVec,
    pinned: &mut Pinned,
    kept: &mut Pinned,
) -> DomainId {
    let before = cfg!(debug_assertions).then(|| load.clone());
    view.take_base(Some(g), mover, load, false);
    // Both kinds: a co-thread group's heavy-load test and a DF group's room
    // test judge by where the load must run.
    let base_on_a = facts.load_on_a_milli - facts.runnable * TASK_MILLI;
    let used = view.pinned_for(Some(g), mover, &facts.allowed, base_on_a, pinned, kept);
    let pinned = if used { &*kept } else { &*pinned };
    let shape = Shape {
        base: &*load,
        allowed: &facts.allowed,
        runnable: facts.runnable,
        near: near.as_ref().map(|(cpus, last)| Near {
            cpus,
            last: *last,
            pinned,
        }),
        spread: near.is_none().then_some(pinned),
    };
    let home = home::evaluate(view.topo, config, &shape, view.st.groups[g].home);
    if used {
        view.take_off(Some(g), mover, kept, true);
    }
    view.take_base(Some(g), mover, load, true);
    debug_assert!(before.is_none_or(|b| b == *load), "the load is restored");
    home
}

/// [`Ctx::retarget`] on the parts of the state it changes, for a task whose
/// home is `home`; apart so that a group's members can be re-targeted while
/// the group is borrowed.
#[allow(clippy::too_many_arguments)]
fn retarget_on(
    topo: &Topology,
    tasks: &mut Slab<TaskId, Task>,
    home: Option<DomainId>,
    load: &mut LoadVec,
    pinned: &mut Pinned,
    stats: &mut Stats,
    out: &mut Vec<Decision>,
    ts: TaskSlot,
) {
    let id = tasks.id(ts);
    let t = &mut tasks[ts];
    let (target, off_home) = target_for(topo, &t.allowed, home);
    if t.target == target {
        return;
    }
    if t.runnable {
        load.sub_task(&t.target);
        load.add_task(&target);
        pinned.count_tasks(topo, &t.target, None, 1, false);
        pinned.count_tasks(topo, &target, None, 1, true);
    }
    if target.len() == 1 {
        t.last_cpu = target.first();
    }
    t.target = target.clone();
    t.placed = true;
    stats.placements += 1;
    if off_home {
        stats.off_home_placements += 1;
    }
    out.push(Decision::Place {
        task: id,
        cpus: target,
    });
}

/// `A` from `(allowed set, runnable count)` entries: the intersection of
/// the sets with runnable tasks (of all sets when `runnable_only` is false),
/// or their union when the intersection is empty. Empty only for no entries.
pub(crate) fn group_allowed<'t>(
    entries: impl Iterator<Item = (&'t CpuSet, u32)> + Clone,
    runnable_only: bool,
) -> Cow<'t, CpuSet> {
    let chosen = entries
        .filter(|(_, r)| *r > 0 || !runnable_only)
        .map(|(a, _)| a);
    let Some(first) = chosen.clone().next() else {
        return Cow::Owned(CpuSet::new());
    };
    // The common case — one allowed set — borrows.
    let mut inter = Cow::Borrowed(first);
    for a in chosen.clone().skip(1) {
        if *a != *inter {
            inter = Cow::Owned(inter.intersection(a));
        }
    }
    if !inter.is_empty() {
        return inter;
    }
    let mut union = first.clone();
    for a in chosen.skip(1) {
        if !a.is_subset(&union) {
            union = union.union(a);
        }
    }
    Cow::Owned(union)
}

/// The census entry of allowed set `allowed`, which must be there.
fn census_entry<'c>(census: &'c mut [(CpuSet, Census)], allowed: &CpuSet) -> &'c mut Census {
    let i = census
        .binary_search_by(|(a, _)| a.cmp(allowed))
        .expect("a member is in its group's census");
    &mut census[i].1
}

/// Counts a member with allowed set `allowed` in a census.
pub(crate) fn census_add(census: &mut Vec<(CpuSet, Census)>, allowed: &CpuSet, runnable: bool) {
    let i = match census.binary_search_by(|(a, _)| a.cmp(allowed)) {
        Ok(i) => i,
        Err(i) => {
            census.insert(i, (allowed.clone(), Census::default()));
            i
        }
    };
    let c = &mut census[i].1;
    c.members += 1;
    c.runnable += u32::from(runnable);
}

/// Stops counting a member with allowed set `allowed` in a census.
pub(crate) fn census_sub(census: &mut Vec<(CpuSet, Census)>, allowed: &CpuSet, runnable: bool) {
    let i = census
        .binary_search_by(|(a, _)| a.cmp(allowed))
        .expect("a member is in its group's census");
    let c = &mut census[i].1;
    c.members -= 1;
    c.runnable -= u32::from(runnable);
    if c.members == 0 {
        census.remove(i);
    }
}
