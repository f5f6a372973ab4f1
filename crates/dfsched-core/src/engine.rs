//! The engine: state, and the procedures of Pinter & Zalmanovici §4.1.
//!
//! CONTRACT SKELETON — the implementation is being written; the public
//! signatures below are fixed and other crates build against them.

use crate::config::{Config, ConfigError};
use crate::cpuset::CpuSet;
use crate::error::CoreError;
use crate::event::{Decision, Event};
use crate::ids::{AppId, CpuId, DfId, DomainId, GroupId, TaskId};
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
}

/// A task as the engine sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task.
    pub task: TaskId,
    /// Its application.
    pub app: AppId,
    /// Its current DF, if managed.
    pub df: Option<DfId>,
    /// Its group, if managed.
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
    /// Its DF.
    pub df: DfId,
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
    _topo: Topology,
    _config: Config,
}

impl Engine {
    /// An engine for `topology`, with application 0 already present.
    pub fn new(topology: Topology, config: Config) -> Result<Engine, ConfigError> {
        config.validate()?;
        Ok(Engine {
            _topo: topology,
            _config: config,
        })
    }

    /// Applies one event and appends the resulting decisions to `out`.
    /// On error nothing changes and nothing is appended.
    pub fn handle(&mut self, _event: Event, _out: &mut Vec<Decision>) -> Result<(), CoreError> {
        unimplemented!("contract skeleton")
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self._topo
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self._config
    }

    /// Replaces the configuration; a bad one is refused whole.
    pub fn set_config(&mut self, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        self._config = config;
        Ok(())
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        unimplemented!("contract skeleton")
    }

    /// One task, if known.
    pub fn task(&self, _task: TaskId) -> Option<TaskView> {
        unimplemented!("contract skeleton")
    }

    /// One group, if it exists.
    pub fn group(&self, _group: GroupId) -> Option<GroupView> {
        unimplemented!("contract skeleton")
    }

    /// Every group, in id order.
    pub fn groups(&self) -> Vec<GroupView> {
        unimplemented!("contract skeleton")
    }

    /// Runnable load per CPU in thousandths of a task (dfsched's tasks and
    /// the external load), in CPU order.
    pub fn load_milli(&self) -> Vec<(CpuId, u64)> {
        unimplemented!("contract skeleton")
    }

    /// Checks every invariant of the state; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        unimplemented!("contract skeleton")
    }
}
