//! The vocabulary of the ready-queue policies: which policy, the pause
//! rule, the dispatcher's configuration, what a free processor does next,
//! and why a call was refused.
//!
//! Policies parse from and print as short names, the ones the CLI takes:
//! `fcfs`, `fp`, `lp`, `mi`, `lmi:A`, `lmr:A` (`A` associations per task).

use crate::ids::{CpuId, TaskId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Squillante & Lazowska's policies (§IV A–F).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum QueuePolicy {
    /// First Come First Served: the head of the queue, affinity ignored.
    Fcfs,
    /// Fixed Processor: task `t` only ever runs on processor `t mod M`,
    /// FCFS among that processor's tasks; never work conserving.
    FixedProcessor,
    /// Last Processor: the first queued task that last ran here, else the
    /// head.
    LastProcessor,
    /// Minimum Intervening: the queued task with the fewest tasks executed
    /// here since it last ran here.
    MinIntervening,
    /// Limited Minimum Intervening: MI over at most `associations`
    /// processors per task; the worst association is replaced after a burst
    /// on an unassociated processor.
    LimitedMinIntervening {
        /// `A`, processor associations per task: 1 to `M`.
        associations: u32,
    },
    /// Limited Minimum Intervening Routing: like LMI, but a task is matched
    /// to a processor when it becomes ready, not when a processor frees.
    LimitedMinInterveningRouting {
        /// `A`, processor associations per task: 1 to `M`.
        associations: u32,
    },
}

impl QueuePolicy {
    /// `A` for LMI and LMR.
    pub fn associations(self) -> Option<u32> {
        match self {
            QueuePolicy::LimitedMinIntervening { associations }
            | QueuePolicy::LimitedMinInterveningRouting { associations } => Some(associations),
            _ => None,
        }
    }

    /// Whether the pause heuristic means anything for this policy: FCFS has
    /// no affinity to wait for, and FP always waits for its own tasks.
    pub fn can_pause(self) -> bool {
        !matches!(self, QueuePolicy::Fcfs | QueuePolicy::FixedProcessor)
    }
}

impl fmt::Display for QueuePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueuePolicy::Fcfs => f.write_str("fcfs"),
            QueuePolicy::FixedProcessor => f.write_str("fp"),
            QueuePolicy::LastProcessor => f.write_str("lp"),
            QueuePolicy::MinIntervening => f.write_str("mi"),
            QueuePolicy::LimitedMinIntervening { associations } => write!(f, "lmi:{associations}"),
            QueuePolicy::LimitedMinInterveningRouting { associations } => {
                write!(f, "lmr:{associations}")
            }
        }
    }
}

/// A policy name the parser does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown queue policy {0:?}: expected fcfs, fp, lp, mi, lmi:A or lmr:A (A ≥ 1 associations)"
)]
pub struct PolicyParseError(pub String);

impl FromStr for QueuePolicy {
    type Err = PolicyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PolicyParseError(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        let (name, arg) = match lower.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (lower.as_str(), None),
        };
        let assoc = |a: Option<&str>| -> Result<u32, PolicyParseError> {
            match a.map(str::parse::<u32>) {
                Some(Ok(n)) if n >= 1 => Ok(n),
                _ => Err(bad()),
            }
        };
        match (name, arg) {
            ("fcfs", None) => Ok(QueuePolicy::Fcfs),
            ("fp", None) => Ok(QueuePolicy::FixedProcessor),
            ("lp", None) => Ok(QueuePolicy::LastProcessor),
            ("mi", None) => Ok(QueuePolicy::MinIntervening),
            ("lmi", a) => Ok(QueuePolicy::LimitedMinIntervening {
                associations: assoc(a)?,
            }),
            ("lmr", a) => Ok(QueuePolicy::LimitedMinInterveningRouting {
                associations: assoc(a)?,
            }),
            _ => Err(bad()),
        }
    }
}

/// The pause heuristic of §V-B: a processor that finds no matching task
/// waits (until a matching task arrives) when `C ≥ (M/N)·Z`, the expected
/// time for a task with affinity to come back.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseRule {
    /// `C`, the time to reload a whole footprint; finite, not negative.
    pub reload_time: f64,
    /// `Z`, the mean time a task stays away; finite, not negative.
    pub think_time: f64,
}

impl PauseRule {
    /// Whether processors pause with `processors` processors and `tasks`
    /// tasks: `C ≥ (M/N)·Z`.
    pub fn engaged(&self, processors: u32, tasks: u32) -> bool {
        self.reload_time >= f64::from(processors) / f64::from(tasks) * self.think_time
    }
}

/// What a [`super::QueueDispatcher`] is built from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// The policy.
    pub policy: QueuePolicy,
    /// `M`: processors are `CpuId(0..M)`.
    pub processors: u32,
    /// `N`: tasks are `TaskId(0..N)`.
    pub tasks: u32,
    /// The pause heuristic, for policies that can pause; `None`: work
    /// conserving (except FP, which never is).
    pub pause: Option<PauseRule>,
}

/// What a processor does after a burst.
#[must_use = "the processor must run the task, or wait"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pick {
    /// Run this task (it has left the ready queue).
    Run(TaskId),
    /// Tasks wait, but none for this processor: it waits for a matching
    /// task (the pause heuristic, or FP's own tasks).
    Pause,
    /// The ready queue is empty: wait for any task.
    Idle,
}

/// What a processor is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuState {
    /// Waiting for any task (the queue was empty when it freed).
    Idle,
    /// Waiting for a matching task only.
    Paused,
    /// Serving a task's burst.
    Running(TaskId),
}

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Not schedulable (thinking: the delay centre). Every task starts here.
    Away,
    /// On the ready queue.
    Queued,
    /// Being served by a processor.
    Running(CpuId),
}

/// Why the dispatcher refused a configuration or a call. A refused call
/// changes nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueueError {
    /// `M = 0` or `N = 0`.
    #[error(
        "a queue needs at least one processor and one task (got M = {processors}, N = {tasks})"
    )]
    Empty {
        /// `M` given.
        processors: u32,
        /// `N` given.
        tasks: u32,
    },
    /// `M·N` affinity cells beyond the limit.
    #[error("{processors} processors × {tasks} tasks is more affinity state than the limit of {limit} cells")]
    TooLarge {
        /// `M` given.
        processors: u32,
        /// `N` given.
        tasks: u32,
        /// The limit on `M·N`.
        limit: u64,
    },
    /// `A` outside `1..=M`.
    #[error("{policy} needs 1 to {processors} associations per task")]
    BadAssociations {
        /// The policy given.
        policy: QueuePolicy,
        /// `M`.
        processors: u32,
    },
    /// A pause rule for FCFS or FP.
    #[error("the pause heuristic does not apply to {0}: FCFS has no affinity to wait for and FP always waits for its own tasks")]
    PauseNotApplicable(QueuePolicy),
    /// A pause rule with a negative or non-finite time.
    #[error("the pause rule needs finite, non-negative C and Z (got C = {reload_time}, Z = {think_time})")]
    BadPauseRule {
        /// `C` given.
        reload_time: f64,
        /// `Z` given.
        think_time: f64,
    },
    /// A task id not below `N`.
    #[error("{0} is not one of this queue's tasks")]
    UnknownTask(TaskId),
    /// A processor id not below `M`.
    #[error("{0} is not one of this queue's processors")]
    UnknownCpu(CpuId),
    /// `task_ready` for a task that is queued or running.
    #[error("{task} cannot become ready: it is {state:?}")]
    NotAway {
        /// The task.
        task: TaskId,
        /// Where it is.
        state: TaskState,
    },
    /// `burst_done` for a task the processor is not running.
    #[error("{cpu} is not running {task} (it is {state:?})")]
    NotRunning {
        /// The task.
        task: TaskId,
        /// The processor.
        cpu: CpuId,
        /// What the processor is doing.
        state: CpuState,
    },
}
