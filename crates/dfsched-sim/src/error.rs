//! The simulator's errors. A call that returns an error changed nothing.

use crate::time::SimTime;
use dfsched_core::{CpuId, Level};

/// Why the engine refused a request from a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A model tried to schedule an event before the current time.
    #[error("cannot schedule at {at}: it is already {now}")]
    InThePast {
        /// The requested instant.
        at: SimTime,
        /// The current instant.
        now: SimTime,
    },
}

/// Why a machine description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A cache with no sets or no ways.
    #[error("a cache needs at least one set and one way (got {sets} sets × {ways} ways)")]
    EmptyCache {
        /// Sets asked for.
        sets: u32,
        /// Ways asked for.
        ways: u32,
    },
    /// More ways than the exact LRU supports.
    #[error("{ways} ways is more than the {max} an exact-LRU set supports")]
    TooManyWays {
        /// Ways asked for.
        ways: u32,
        /// The limit.
        max: u32,
    },
    /// The line size is not a power of two of at least 8 bytes.
    #[error("line size {0} bytes: it must be a power of two, at least 8")]
    BadLineSize(u32),
    /// A shared cache was asked for at a level the topology does not have.
    #[error("no cache domain at level {level:?} in this topology (its levels: {present:?})")]
    NoDomainAtLevel {
        /// The level asked for.
        level: Level,
        /// The levels the topology has.
        present: Vec<Level>,
    },
    /// A shared cache was asked for at the level of single CPUs; that is the
    /// private cache.
    #[error("a shared cache cannot sit at the level of single CPUs; configure the private cache")]
    SharedAtCpuLevel,
    /// Two shared caches at the same level.
    #[error("two shared caches configured at level {0:?}")]
    DuplicateLevel(Level),
}

/// Why a machine refused an access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// The CPU is not part of the machine.
    #[error("{0} is not a CPU of this machine")]
    UnknownCpu(CpuId),
}
