//! Newtypes for the ids and units the engine works with.
//!
//! Every id is a plain integer behind a type, so that a `TaskId` can never be
//! passed where a `DfId` is meant. Ids order by their integer, and all engine
//! maps are keyed by them in `BTreeMap`s, which makes every decision's iteration
//! order deterministic.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A logical CPU, numbered as the kernel numbers it.
    CpuId(u32),
    "cpu"
);
id_type!(
    /// A schedulable task: on Linux, a thread id (`gettid()`).
    TaskId(u64),
    "task"
);
id_type!(
    /// An application that gives DF information; it owns a DF map.
    ///
    /// DF ids are only meaningful within one application.
    AppId(u64),
    "app"
);
id_type!(
    /// A data fragment: a piece of data that tasks work on together.
    ///
    /// The C ABI uses 0 for "no DF"; inside the engine that is `Option::None`,
    /// so a `DfId` is never 0 by convention of the bodies.
    DfId(u64),
    "df"
);
id_type!(
    /// A priority group: the tasks of one DF batched on one home.
    GroupId(u64),
    "group"
);
id_type!(
    /// A cache domain of the topology (see [`crate::topology`]).
    DomainId(u32),
    "dom"
);

/// A duration or instant in nanoseconds. The engine never reads a clock:
/// time always comes in as an argument.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Nanos(ms * 1_000_000)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

/// What binds a priority group's members together: one DF of their
/// application, or — under [`crate::Policy::CoThread`] — being threads of
/// one application that gave no DF (its *co-thread group*).
///
/// Orders DFs by id, then the co-thread marker; serialized as
/// `{"df": 3}` or `"co-thread"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupKind {
    /// The tasks working on this DF.
    Df(DfId),
    /// The tasks of the application with no DF (co-threads).
    CoThread,
}

impl GroupKind {
    /// The DF of a DF group; `None` for a co-thread group.
    pub fn df(self) -> Option<DfId> {
        match self {
            GroupKind::Df(df) => Some(df),
            GroupKind::CoThread => None,
        }
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupKind::Df(df) => df.fmt(f),
            GroupKind::CoThread => f.write_str("co-thread"),
        }
    }
}
