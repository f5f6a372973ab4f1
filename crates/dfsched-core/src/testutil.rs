//! Test harness shared by the unit tests: an engine that checks its
//! invariants after every event and returns each event's decisions.

use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::engine::Engine;
use crate::error::CoreError;
use crate::event::{Decision, Event};
use crate::ids::{AppId, CpuId, DfId, GroupId, Nanos, TaskId};
use crate::topology::Topology;

/// A CPU set from a cpulist.
pub(crate) fn set(s: &str) -> CpuSet {
    s.parse().expect("test cpulist")
}

/// An engine under test.
pub(crate) struct H {
    /// The engine.
    pub e: Engine,
}

impl H {
    /// An engine with the default configuration.
    pub(crate) fn new(topo: Topology) -> H {
        H::with(topo, Config::default())
    }

    /// An engine with `config`.
    pub(crate) fn with(topo: Topology, config: Config) -> H {
        H {
            e: Engine::new(topo, config).expect("valid test config"),
        }
    }

    /// Applies an event that must succeed; checks the invariants; returns
    /// its decisions.
    pub(crate) fn ev(&mut self, event: Event) -> Vec<Decision> {
        let mut out = Vec::new();
        let shown = format!("{event:?}");
        self.e
            .handle(event, &mut out)
            .unwrap_or_else(|e| panic!("{shown} refused: {e}"));
        if let Err(e) = self.e.check_invariants() {
            panic!("after {shown}: {e}");
        }
        out
    }

    /// Applies an event that must be refused; checks that nothing changed
    /// but the refusal counter, and returns the error.
    pub(crate) fn refused(&mut self, event: Event) -> CoreError {
        let before = self.e.clone();
        let mut out = vec![Decision::GroupReclaimed {
            group: GroupId(999),
        }];
        let err = self.e.handle(event, &mut out).expect_err("must be refused");
        assert_eq!(out.len(), 1, "a refused event appended decisions");
        let mut after = self.e.clone();
        assert_eq!(after.stats().refused, before.stats().refused + 1);
        after.normalise_refused(before.stats().refused);
        assert!(
            after.same_state(&before),
            "a refused event changed the state"
        );
        err
    }

    /// A new task of app 0 allowed on `allowed`.
    pub(crate) fn task(&mut self, t: u64, allowed: &str) -> Vec<Decision> {
        self.ev(Event::TaskNew {
            task: TaskId(t),
            app: AppId(0),
            allowed: set(allowed),
            cpu: None,
        })
    }

    /// A new task of `app` allowed on `allowed`, running on `cpu` as far as
    /// the body knows.
    pub(crate) fn task_at(
        &mut self,
        t: u64,
        app: u64,
        allowed: &str,
        cpu: Option<u32>,
    ) -> Vec<Decision> {
        self.ev(Event::TaskNew {
            task: TaskId(t),
            app: AppId(app),
            allowed: set(allowed),
            cpu: cpu.map(CpuId),
        })
    }

    /// A hint with the task's own application and current DF.
    pub(crate) fn hint(&mut self, t: u64, next: Option<u64>) -> Vec<Decision> {
        let v = self.e.task(TaskId(t)).expect("hinted task");
        self.ev(Event::Hint {
            task: TaskId(t),
            app: v.app,
            cur: v.df,
            next: next.map(DfId),
        })
    }

    /// A new task of app 0 on `allowed` that hints `df` at once.
    pub(crate) fn task_df(&mut self, t: u64, allowed: &str, df: u64) -> Vec<Decision> {
        let mut d = self.task(t, allowed);
        d.extend(self.hint(t, Some(df)));
        d
    }

    /// External runnable tasks, CPU i gets `counts[i]`.
    pub(crate) fn external(&mut self, counts: &[u32]) -> Vec<Decision> {
        self.ev(Event::ExternalLoad {
            runnable: counts
                .iter()
                .enumerate()
                .map(|(i, &n)| (CpuId(i as u32), n))
                .collect(),
        })
    }

    /// One balancer pass.
    pub(crate) fn balance(&mut self) -> Vec<Decision> {
        self.ev(Event::Balance { now: Nanos(0) })
    }

    /// Where a task may run now, as a cpulist.
    pub(crate) fn target(&self, t: u64) -> String {
        self.e.target(TaskId(t)).expect("known task").to_string()
    }

    /// The CPUs of a task's group's home, as a cpulist.
    pub(crate) fn home(&self, t: u64) -> String {
        let g = self
            .e
            .task(TaskId(t))
            .and_then(|v| v.group)
            .expect("managed");
        let home = self.e.group(g).expect("live group").home;
        self.e.topology().domain(home).cpus.to_string()
    }

    /// Load per CPU in thousandths, in CPU order.
    pub(crate) fn load(&self) -> Vec<u64> {
        self.e.load_milli().into_iter().map(|(_, m)| m).collect()
    }
}

/// The `Place` decisions of a list, as `(task, cpulist)`.
pub(crate) fn places(d: &[Decision]) -> Vec<(u64, String)> {
    d.iter()
        .filter_map(|x| match x {
            Decision::Place { task, cpus } => Some((task.0, cpus.to_string())),
            _ => None,
        })
        .collect()
}

/// `(task, cpulist)` pairs from literals.
pub(crate) fn p(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|(t, s)| (*t, s.to_string())).collect()
}
