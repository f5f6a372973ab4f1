//! The engine: the public face of the policy. It validates each event,
//! dispatches it to its procedure (`procedures.rs`) or to the balancer
//! (`balancer.rs`), and answers queries.
//!
//! `handle` is all-or-nothing: every check that can refuse an event runs
//! before anything changes, and the procedures behind it cannot fail. A
//! refused event only bumps `Stats::refused`.

use crate::balancer::BalanceReport;
use crate::config::{Config, ConfigError};
use crate::cothread::Pinned;
use crate::cpuset::CpuSet;
use crate::error::CoreError;
use crate::event::{Decision, Event};
use crate::ids::{AppId, CpuId, DfId, DomainId, GroupId, GroupKind, TaskId};
use crate::load::TASK_MILLI;
use crate::state::{Ctx, Group, State, TaskSlot};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Counters of what the engine did, since it was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Hints applied.
    pub hints: u64,
    /// Events refused with an error.
    pub refused: u64,
    /// `Place` decisions issued.
    pub placements: u64,
    /// Groups created for a new DF (or by a split).
    pub groups_created: u64,
    /// Groups reclaimed at counter 0.
    pub groups_reclaimed: u64,
    /// Whole-group moves by the balancer.
    pub group_moves: u64,
    /// Unmanaged task moves by the balancer.
    pub task_moves: u64,
    /// Group splits by the balancer.
    pub splits: u64,
    /// Balancer passes run.
    pub balance_passes: u64,
    /// Passes that found an imbalance.
    pub imbalanced_passes: u64,
    /// Group home changes that were not balancer moves (the home regime
    /// changed with the load).
    pub rehomes: u64,
    /// `Place` decisions that put a task on its whole allowed set because
    /// its group's home lies outside it ("off-home"; the group keeps its
    /// home).
    pub off_home_placements: u64,
    /// Balancer passes whose re-homing step was undone because it would
    /// have widened the load spread and left some CPU above its fair share
    /// of the machine (see `balancer.rs`).
    pub rehomings_discarded: u64,
    /// Balancer candidates passed over because a runnable task may not run
    /// on the destination.
    pub balance_skipped_not_allowed: u64,
    /// Candidate groups passed over because no domain at their home's depth
    /// holds the idlest CPU.
    pub balance_skipped_no_destination: u64,
    /// Balancer candidates passed over because the move would not narrow
    /// the spread.
    pub balance_skipped_no_gain: u64,
}

/// A task as the engine sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task.
    pub task: TaskId,
    /// Its application.
    pub app: AppId,
    /// Its current DF, if it has one.
    pub df: Option<DfId>,
    /// Its group: its DF's, or (under [`crate::Policy::CoThread`], with no
    /// DF) its application's co-thread group; `None` for an unmanaged task.
    pub group: Option<GroupId>,
    /// Whether it counts as runnable.
    pub runnable: bool,
    /// Its allowed CPUs.
    pub allowed: CpuSet,
    /// Where the engine last placed it (its home's CPUs ∩ allowed), if ever.
    pub placed: Option<CpuSet>,
}

/// A priority group as the engine sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupView {
    /// The group.
    pub group: GroupId,
    /// Its application.
    pub app: AppId,
    /// Its DF, or the co-thread marker for a co-thread group.
    pub kind: GroupKind,
    /// Its home.
    pub home: DomainId,
    /// Its members, in id order.
    pub members: Vec<TaskId>,
    /// How many members are runnable.
    pub runnable: usize,
}

/// The policy engine. See the crate documentation.
#[derive(Clone, Debug)]
pub struct Engine {
    /// The machine; read-only.
    topo: Topology,
    /// The tunables.
    config: Config,
    /// Everything that events change.
    st: State,
    /// What the last balancer pass saw and did.
    last_balance: Option<BalanceReport>,
    /// Where the pinned load of a group not allowed on the whole machine
    /// is built, reused from event to event so that evaluating a group
    /// allocates nothing; not state. (The home rule's `base` is built in
    /// place in the state's load, `state.rs`.)
    pinned: Pinned,
}

impl Engine {
    /// An engine for `topology`, with application 0 already present.
    pub fn new(topology: Topology, config: Config) -> Result<Engine, ConfigError> {
        config.validate()?;
        Ok(Engine {
            st: State::new(&topology),
            pinned: Pinned::default(),
            topo: topology,
            config,
            last_balance: None,
        })
    }

    /// Applies one event and appends the resulting decisions to `out`.
    /// On error nothing changes and nothing is appended.
    pub fn handle(&mut self, event: Event, out: &mut Vec<Decision>) -> Result<(), CoreError> {
        let ts = match self.check(&event) {
            Ok(ts) => ts,
            Err(e) => return Err(self.refuse(e)),
        };
        // The task of an event about one, looked up once by `check`.
        let task = || ts.expect("check found the event's task");
        let mut cx = Ctx {
            topo: &self.topo,
            config: &self.config,
            st: &mut self.st,
            out,
            pinned: &mut self.pinned,
        };
        match event {
            Event::AppNew { app } => cx.app_new(app),
            Event::TaskNew {
                task,
                app,
                allowed,
                cpu,
            } => {
                let allowed = allowed.intersection(cx.topo.cpus());
                cx.task_new(task, app, allowed, cpu);
            }
            Event::Hint { next, .. } => cx.hint(task(), next),
            Event::Block { .. } => cx.block(task()),
            Event::Wake { .. } => cx.wake(task()),
            Event::Exit { .. } => cx.exit(task()),
            Event::Allowed { allowed, .. } => {
                let allowed = allowed.intersection(cx.topo.cpus());
                cx.allowed(task(), allowed);
            }
            Event::ExternalLoad { runnable } => {
                let milli = runnable
                    .iter()
                    .map(|&(c, n)| (c, u64::from(n) * TASK_MILLI));
                cx.external_load(milli)
            }
            Event::ExternalLoadMilli { load_milli } => cx.external_load(load_milli.iter().copied()),
            Event::Balance { now } => {
                let report = cx.balance_pass(now);
                self.last_balance = Some(report);
            }
        }
        Ok(())
    }

    /// Counts a refusal; kept out of line, off the hot path.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, e: CoreError) -> CoreError {
        self.st.stats.refused += 1;
        e
    }

    /// Every check that can refuse `event`, against the current state.
    /// Returns the slot of the event's task for events about a known task.
    #[inline]
    fn check(&self, event: &Event) -> Result<Option<TaskSlot>, CoreError> {
        let task = |id: &TaskId| {
            let slot = self.st.tasks.slot(id).ok_or(CoreError::UnknownTask(*id))?;
            Ok::<_, CoreError>((slot, &self.st.tasks[slot]))
        };
        let allowed_ok = |allowed: &CpuSet| {
            if allowed.intersects(self.topo.cpus()) {
                Ok(())
            } else {
                Err(CoreError::NoAllowedCpu(allowed.clone()))
            }
        };
        match event {
            Event::AppNew { app } => {
                if self.st.apps.contains_key(app) {
                    return Err(CoreError::DuplicateApp(*app));
                }
            }
            Event::TaskNew {
                task, app, allowed, ..
            } => {
                if self.st.tasks.contains(task) {
                    return Err(CoreError::DuplicateTask(*task));
                }
                if !self.st.apps.contains_key(app) {
                    return Err(CoreError::UnknownApp(*app));
                }
                allowed_ok(allowed)?;
            }
            Event::Hint {
                task: id, app, cur, ..
            } => {
                let (slot, t) = task(id)?;
                if !self.st.apps.contains_key(app) {
                    return Err(CoreError::UnknownApp(*app));
                }
                if t.app != *app {
                    return Err(CoreError::WrongApp {
                        task: *id,
                        claimed: *app,
                        actual: t.app,
                    });
                }
                if t.df != *cur {
                    return Err(CoreError::NotInDf {
                        task: *id,
                        claimed: *cur,
                        actual: t.df,
                    });
                }
                return Ok(Some(slot));
            }
            Event::Block { task: id } | Event::Wake { task: id } | Event::Exit { task: id } => {
                return Ok(Some(task(id)?.0));
            }
            Event::Allowed { task: id, allowed } => {
                let slot = task(id)?.0;
                allowed_ok(allowed)?;
                return Ok(Some(slot));
            }
            Event::ExternalLoad { runnable } => {
                if let Some((cpu, _)) = runnable
                    .iter()
                    .find(|(c, _)| !self.topo.cpus().contains(*c))
                {
                    return Err(CoreError::UnknownCpu(*cpu));
                }
            }
            Event::ExternalLoadMilli { load_milli } => {
                if let Some((cpu, _)) = load_milli
                    .iter()
                    .find(|(c, _)| !self.topo.cpus().contains(*c))
                {
                    return Err(CoreError::UnknownCpu(*cpu));
                }
            }
            Event::Balance { .. } => {}
        }
        Ok(None)
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Replaces the configuration; a bad one is refused whole. The policy
    /// is fixed for an engine's life (changing it would regroup every task
    /// with no DF, which takes decisions this call cannot return): a
    /// different one is refused with [`ConfigError::PolicyChange`].
    pub fn set_config(&mut self, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        if config.policy != self.config.policy {
            return Err(ConfigError::PolicyChange {
                from: self.config.policy,
                to: config.policy,
            });
        }
        self.config = config;
        Ok(())
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.st.stats
    }

    /// What the last balancer pass saw and did, if one ran.
    pub fn last_balance(&self) -> Option<&BalanceReport> {
        self.last_balance.as_ref()
    }

    /// One task, if known.
    pub fn task(&self, task: TaskId) -> Option<TaskView> {
        let t = self.st.tasks.get(&task)?;
        Some(TaskView {
            task,
            app: t.app,
            df: t.df,
            group: self.st.group_id(t),
            runnable: t.runnable,
            allowed: t.allowed.clone(),
            placed: t.placed.then(|| t.target.clone()),
        })
    }

    /// One group, if it exists.
    pub fn group(&self, group: GroupId) -> Option<GroupView> {
        let g = self.st.groups.get(&group)?;
        Some(Self::group_view(group, g))
    }

    fn group_view(group: GroupId, g: &Group) -> GroupView {
        GroupView {
            group,
            app: g.app,
            kind: g.kind,
            home: g.home,
            members: g.members.ids().collect(),
            runnable: g.runnable,
        }
    }

    /// Every group, in id order.
    pub fn groups(&self) -> Vec<GroupView> {
        self.st
            .groups
            .iter()
            .map(|(id, _, g)| Self::group_view(id, g))
            .collect()
    }

    /// The groups of one DF of one application, in id order (one unless
    /// the DF was split; none for a DF no task works on).
    pub fn df_groups(&self, app: AppId, df: DfId) -> Vec<GroupId> {
        self.kind_groups(app, GroupKind::Df(df))
    }

    /// The co-thread groups of one application, in id order (one unless
    /// the balancer split it; none under [`crate::Policy::DataAffinity`] or
    /// when every task of the application has a DF).
    pub fn co_thread_groups(&self, app: AppId) -> Vec<GroupId> {
        self.kind_groups(app, GroupKind::CoThread)
    }

    /// The groups of one kind of one application, in id order.
    pub fn kind_groups(&self, app: AppId, kind: GroupKind) -> Vec<GroupId> {
        self.st
            .kind_groups(app, kind)
            .unwrap_or_default()
            .iter()
            .map(|&g| self.st.groups.id(g))
            .collect()
    }

    /// Where a task may run now: its home's CPUs ∩ its allowed set (its
    /// allowed set when unmanaged or off-home). Unlike [`TaskView::placed`]
    /// this is known before the first `Place`.
    pub fn target(&self, task: TaskId) -> Option<&CpuSet> {
        self.st.tasks.get(&task).map(|t| &t.target)
    }

    /// Runnable load per CPU in thousandths of a task (dfsched's tasks and
    /// the external load), in CPU order.
    pub fn load_milli(&self) -> Vec<(CpuId, u64)> {
        self.st.load.pairs(self.topo.cpus())
    }

    /// Checks every invariant of the state; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.st.check(&self.topo, self.config.policy)
    }
}

#[cfg(test)]
impl Engine {
    /// Whether two engines hold the same state, counters included.
    pub(crate) fn same_state(&self, other: &Engine) -> bool {
        self.st == other.st
            && self.last_balance == other.last_balance
            && self.config == other.config
    }

    /// Sets the refusal counter, to compare states across a refusal.
    pub(crate) fn normalise_refused(&mut self, refused: u64) {
        self.st.stats.refused = refused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{set, H};

    /// A 2-CPU engine with app 1, a managed task 1 (df 1) and an unmanaged
    /// task 2, both of app 0.
    fn populated() -> H {
        let mut h = H::new(Topology::test(1, 1, 2, 1));
        h.ev(Event::AppNew { app: AppId(1) });
        h.task_df(1, "0-1", 1);
        h.task(2, "0-1");
        h
    }

    #[test]
    fn every_refusal_names_its_cause_and_changes_nothing() {
        let mut h = populated();
        let t = |n| TaskId(n);
        let cases: Vec<(Event, CoreError)> = vec![
            (
                Event::AppNew { app: AppId(0) },
                CoreError::DuplicateApp(AppId(0)),
            ),
            (
                Event::TaskNew {
                    task: t(1),
                    app: AppId(0),
                    allowed: set("0"),
                    cpu: None,
                },
                CoreError::DuplicateTask(t(1)),
            ),
            (
                Event::TaskNew {
                    task: t(9),
                    app: AppId(7),
                    allowed: set("0"),
                    cpu: None,
                },
                CoreError::UnknownApp(AppId(7)),
            ),
            (
                Event::TaskNew {
                    task: t(9),
                    app: AppId(0),
                    allowed: set("2-3"),
                    cpu: None,
                },
                CoreError::NoAllowedCpu(set("2-3")),
            ),
            (
                Event::TaskNew {
                    task: t(9),
                    app: AppId(0),
                    allowed: CpuSet::new(),
                    cpu: None,
                },
                CoreError::NoAllowedCpu(CpuSet::new()),
            ),
            (
                Event::Hint {
                    task: t(9),
                    app: AppId(0),
                    cur: None,
                    next: Some(DfId(1)),
                },
                CoreError::UnknownTask(t(9)),
            ),
            (
                Event::Hint {
                    task: t(1),
                    app: AppId(5),
                    cur: Some(DfId(1)),
                    next: None,
                },
                CoreError::UnknownApp(AppId(5)),
            ),
            (
                Event::Hint {
                    task: t(1),
                    app: AppId(1),
                    cur: Some(DfId(1)),
                    next: None,
                },
                CoreError::WrongApp {
                    task: t(1),
                    claimed: AppId(1),
                    actual: AppId(0),
                },
            ),
            // A DF switch from a task that never hinted.
            (
                Event::Hint {
                    task: t(2),
                    app: AppId(0),
                    cur: Some(DfId(1)),
                    next: Some(DfId(2)),
                },
                CoreError::NotInDf {
                    task: t(2),
                    claimed: Some(DfId(1)),
                    actual: None,
                },
            ),
            (
                Event::Hint {
                    task: t(1),
                    app: AppId(0),
                    cur: None,
                    next: Some(DfId(2)),
                },
                CoreError::NotInDf {
                    task: t(1),
                    claimed: None,
                    actual: Some(DfId(1)),
                },
            ),
            (Event::Block { task: t(9) }, CoreError::UnknownTask(t(9))),
            (Event::Wake { task: t(9) }, CoreError::UnknownTask(t(9))),
            (Event::Exit { task: t(9) }, CoreError::UnknownTask(t(9))),
            (
                Event::Allowed {
                    task: t(9),
                    allowed: set("0"),
                },
                CoreError::UnknownTask(t(9)),
            ),
            (
                Event::Allowed {
                    task: t(1),
                    allowed: set("5"),
                },
                CoreError::NoAllowedCpu(set("5")),
            ),
            (
                Event::ExternalLoad {
                    runnable: vec![(CpuId(0), 1), (CpuId(2), 1)],
                },
                CoreError::UnknownCpu(CpuId(2)),
            ),
        ];
        let n = cases.len() as u64;
        for (event, want) in cases {
            let shown = format!("{event:?}");
            assert_eq!(h.refused(event), want, "{shown}");
        }
        assert_eq!(h.e.stats().refused, n);
        // The engine still works after all that.
        h.hint(2, Some(1));
        assert_eq!(
            h.e.group(GroupId(1)).unwrap().members,
            vec![TaskId(1), TaskId(2)]
        );
    }

    #[test]
    fn errors_read_well() {
        let e = CoreError::NotInDf {
            task: TaskId(3),
            claimed: Some(DfId(1)),
            actual: None,
        };
        assert_eq!(e.to_string(), "task task3 is in no DF, not in df1");
        assert_eq!(
            CoreError::UnknownCpu(CpuId(9)).to_string(),
            "cpu9 is not a CPU of this machine"
        );
    }

    #[test]
    fn a_bad_config_is_refused_whole() {
        let mut h = populated();
        let bad = Config {
            imbalance_pct: 0,
            ..Config::default()
        };
        assert!(Engine::new(Topology::test(1, 1, 2, 1), bad.clone()).is_err());
        assert_eq!(h.e.set_config(bad), Err(ConfigError::ImbalancePct(0)));
        assert_eq!(h.e.config(), &Config::default());
    }

    #[test]
    fn views_report_tasks_groups_and_load() {
        let mut h = populated();
        let v = h.e.task(TaskId(1)).unwrap();
        assert_eq!(
            (v.df, v.group, v.runnable),
            (Some(DfId(1)), Some(GroupId(1)), true)
        );
        assert_eq!(v.placed, Some(set("0")));
        let u = h.e.task(TaskId(2)).unwrap();
        assert_eq!(
            (u.df, u.group, u.placed),
            (None, None, None),
            "never placed"
        );
        assert_eq!(h.e.target(TaskId(2)), Some(&set("0-1")));
        assert_eq!(h.load(), vec![1500, 500]);
        assert_eq!(h.e.groups().len(), 1);
        assert_eq!(h.e.df_groups(AppId(0), DfId(1)), vec![GroupId(1)]);
        assert!(h.e.df_groups(AppId(3), DfId(1)).is_empty());
        h.ev(Event::Block { task: TaskId(2) });
        assert_eq!(h.load(), vec![1000, 0]);
        assert!(!h.e.task(TaskId(2)).unwrap().runnable);
        assert!(h.e.task(TaskId(77)).is_none() && h.e.group(GroupId(77)).is_none());
    }
}
