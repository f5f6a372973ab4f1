//! What a body tells the engine ([`Event`]) and what the engine answers
//! ([`Decision`]).
//!
//! A body (the Linux runtime, the simulator) turns what happens to its tasks
//! into events, feeds them to [`crate::Engine::handle`] one at a time, and
//! carries out the decisions that come back. The same event sequence always
//! gives the same decisions.

use crate::cpuset::CpuSet;
use crate::ids::{AppId, CpuId, DfId, DomainId, GroupId, GroupKind, Nanos, TaskId};
use serde::{Deserialize, Serialize};

/// Something that happened to a task, an application or the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// An application that gives DF information starts; it gets an empty DF
    /// map. `AppId(0)` (a process's default application) exists from the
    /// start and need not be announced.
    AppNew {
        /// The new application.
        app: AppId,
    },
    /// A task becomes known to the engine, runnable, with no DF yet: under
    /// [`crate::Policy::DataAffinity`] an unmanaged task until it hints,
    /// under [`crate::Policy::CoThread`] a member of its application's
    /// co-thread group (placed at once).
    TaskNew {
        /// The task.
        task: TaskId,
        /// Its application.
        app: AppId,
        /// The CPUs it may ever run on (cpusets, `taskset`); dfsched never
        /// places it outside them. Must meet the topology's CPUs.
        allowed: CpuSet,
        /// Where it runs now, if the body knows: the co-thread rule's "CPU
        /// it last ran on" until the engine places it on a single CPU. A
        /// CPU outside its allowed set or the machine is ignored.
        cpu: Option<CpuId>,
    },
    /// The paper's system call: the task leaves `cur` (if any) and works on
    /// `next` (if any) from now on. `next == None` makes it unmanaged again
    /// (under [`crate::Policy::CoThread`]: a member of its application's
    /// co-thread group again).
    Hint {
        /// The task; must be known.
        task: TaskId,
        /// The application whose DF map `cur` and `next` belong to.
        app: AppId,
        /// The DF the task says it is leaving; must be the task's current DF.
        cur: Option<DfId>,
        /// The DF the task works on next.
        next: Option<DfId>,
    },
    /// The task waits (sleeps, blocks on I/O): it no longer counts as load.
    Block {
        /// The task.
        task: TaskId,
    },
    /// The task returns from a wait: it is placed again by its current DF.
    Wake {
        /// The task.
        task: TaskId,
    },
    /// The task is gone.
    Exit {
        /// The task.
        task: TaskId,
    },
    /// The task's allowed CPUs changed (a `taskset` or cpuset change seen by
    /// the body).
    Allowed {
        /// The task.
        task: TaskId,
        /// Its new allowed set; must meet the topology's CPUs.
        allowed: CpuSet,
    },
    /// Runnable tasks on each CPU that the engine does not manage (other
    /// processes). Replaces the previous sample; CPUs not listed count 0.
    ExternalLoad {
        /// `(cpu, runnable tasks)` pairs.
        runnable: Vec<(CpuId, u32)>,
    },
    /// The same sample as [`Event::ExternalLoad`], weighed in thousandths of
    /// one of the engine's own runnable tasks per CPU rather than counted: a
    /// task that gets a smaller share of a CPU than one of ours (a niced
    /// one, or one of another CFS group's many) counts less than 1000.
    /// Replaces the
    /// previous sample, whichever event gave it; CPUs not listed count 0, a
    /// CPU listed twice counts the sum. A CPU's load saturates at what
    /// `ExternalLoad` can express (`u32::MAX` tasks).
    ExternalLoadMilli {
        /// `(cpu, thousandths of a task)` pairs: a task is one of the
        /// engine's own, so a body weighs outside load against its tasks'
        /// CFS weight.
        load_milli: Vec<(CpuId, u64)>,
    },
    /// Run one pass of the balancer.
    Balance {
        /// The body's time, for the record; the engine reads no clock.
        now: Nanos,
    },
}

/// What the engine wants done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Let `task` run only on `cpus` (already within its allowed set, never
    /// empty). Issued whenever a task's target set changes, whether it runs
    /// or sleeps.
    Place {
        /// The task.
        task: TaskId,
        /// Where it may run now.
        cpus: CpuSet,
    },
    /// A whole group moved to another home; its members' `Place` decisions
    /// come with it.
    GroupMoved {
        /// The group.
        group: GroupId,
        /// Its DF, or the co-thread marker.
        kind: GroupKind,
        /// Old home.
        from: DomainId,
        /// New home.
        to: DomainId,
    },
    /// Part of a group was split off into a new group of the same kind on
    /// another home, because an imbalance persisted.
    GroupSplit {
        /// The group that was split.
        group: GroupId,
        /// The new group.
        new_group: GroupId,
        /// The tasks that went to the new group.
        moved: Vec<TaskId>,
    },
    /// The balancer moved an unmanaged task (one without a DF).
    TaskMoved {
        /// The task.
        task: TaskId,
        /// Its new home.
        to: DomainId,
    },
    /// A group's counter reached 0 and the group was reclaimed.
    GroupReclaimed {
        /// The group.
        group: GroupId,
    },
}
