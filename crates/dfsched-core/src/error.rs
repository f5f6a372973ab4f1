//! Why the engine refused an event. A refused event changes nothing.

use crate::cpuset::CpuSet;
use crate::ids::{AppId, CpuId, DfId, TaskId};

/// An event the engine could not apply. The engine's state is exactly as it
/// was before the event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The event names a task the engine does not know.
    #[error("unknown task {0}")]
    UnknownTask(TaskId),
    /// `TaskNew` for a task that is already known.
    #[error("task {0} is already known")]
    DuplicateTask(TaskId),
    /// The event names an application that was never announced.
    #[error("unknown application {0}")]
    UnknownApp(AppId),
    /// `AppNew` for an application that exists.
    #[error("application {0} already exists")]
    DuplicateApp(AppId),
    /// A hint's application is not the task's.
    #[error("task {task} belongs to {actual}, not {claimed}")]
    WrongApp {
        /// The task.
        task: TaskId,
        /// The application the hint named.
        claimed: AppId,
        /// The task's application.
        actual: AppId,
    },
    /// A hint claims to leave a DF the task is not in (for example a DF
    /// switch from a task that never hinted).
    #[error("task {task} is in {actual}, not in {claimed}", actual = fmt_df(*.actual), claimed = fmt_df(*.claimed))]
    NotInDf {
        /// The task.
        task: TaskId,
        /// The DF the hint said it leaves.
        claimed: Option<DfId>,
        /// The DF it is in.
        actual: Option<DfId>,
    },
    /// An allowed set with no CPU of this machine.
    #[error("allowed CPUs {0} hold no CPU of this machine")]
    NoAllowedCpu(CpuSet),
    /// An external load sample names a CPU the machine lacks.
    #[error("{0} is not a CPU of this machine")]
    UnknownCpu(CpuId),
}

fn fmt_df(df: Option<DfId>) -> String {
    df.map_or_else(|| "no DF".to_string(), |d| d.to_string())
}
