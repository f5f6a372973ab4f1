//! Task programs: what simulated tasks do, as a list of bursts, and the
//! workloads they make up.
//!
//! A task runs its program from the first burst to the last (or to
//! [`Burst::Exit`]):
//!
//! | burst | what the body does |
//! |---|---|
//! | `Compute { cycles }` | keeps the CPU busy; touches no data |
//! | `Read { lines }` / `Write { lines }` | the next `lines` lines of the task's current DF, through the cache [`crate::Machine`] (wrapping around the DF's footprint) |
//! | `Sleep { cycles }` | blocks for that long ([`dfsched_core::Event::Block`] / `Wake`) |
//! | `Wait { chan }` | takes a token of channel `chan`, blocking until one is there (a read of a socket or a queue) |
//! | `Signal { chan }` | puts a token on channel `chan`, waking the task that waits there (a write) after the wake-up latency of [`body::BodyConfig::wake_other_cycles`] when it is placed on another, idle CPU |
//! | `Switch { next }` | the paper's hint: the task leaves its DF for `next` ([`dfsched_core::Event::Hint`]), starting at the DF's first line; the task yields so its new placement takes effect before it touches the data |
//! | `Exit` | the task ends |
//!
//! DFs are numbered from 1 ([`DfId`] 0 means "no DF" at the C ABI); DF `d`
//! occupies `bytes` consecutive bytes of a flat address space, each DF
//! starting on a fresh line, so no two DFs share a line.
//!
//! Invariants, checked by [`Workload::validate`]: every DF a program
//! switches to exists; no task reads or writes while it has no DF.

use dfsched_core::{CpuSet, DfId};

pub mod body;
use serde::{Deserialize, Serialize};

/// Why a workload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// A workload needs at least one task.
    #[error("the workload has no task")]
    NoTasks,
    /// A DF of zero bytes.
    #[error("{0} has a footprint of 0 bytes")]
    EmptyDf(DfId),
    /// A task whose allowed set is empty.
    #[error("task {task} may run on no CPU")]
    NoAllowedCpu {
        /// Index of the task.
        task: usize,
    },
    /// A switch to a DF the workload does not have.
    #[error("task {task}, burst {pc}: {df} does not exist (DFs are 1..={dfs})")]
    UnknownDf {
        /// Index of the task.
        task: usize,
        /// Index of the burst.
        pc: usize,
        /// The DF named.
        df: DfId,
        /// How many DFs there are.
        dfs: usize,
    },
    /// A read or write before the task switched to a DF.
    #[error("task {task}, burst {pc}: reads or writes with no DF")]
    AccessWithoutDf {
        /// Index of the task.
        task: usize,
        /// Index of the burst.
        pc: usize,
    },
}

/// One step of a task's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "burst", rename_all = "snake_case")]
pub enum Burst {
    /// Busy for `cycles`, touching no data.
    Compute {
        /// Cycles of work.
        cycles: u64,
    },
    /// Loads of the next `lines` lines of the current DF.
    Read {
        /// Lines to read.
        lines: u64,
    },
    /// Stores to the next `lines` lines of the current DF.
    Write {
        /// Lines to write.
        lines: u64,
    },
    /// Blocks for `cycles` (I/O, a sleep).
    Sleep {
        /// Cycles until it is runnable again.
        cycles: u64,
    },
    /// Takes a token of a channel, blocking until there is one. Channels
    /// are numbered from 0; a workload has as many as its programs name.
    Wait {
        /// The channel.
        chan: u32,
    },
    /// Puts a token on a channel, waking a task that waits on it.
    Signal {
        /// The channel.
        chan: u32,
    },
    /// Changes DF (a hint); `None` leaves every DF.
    Switch {
        /// The DF worked on from now on.
        next: Option<DfId>,
    },
    /// Ends the task.
    Exit,
}

/// A data fragment's footprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DfSpec {
    /// Its size in bytes; at least one byte.
    pub bytes: u64,
}

/// One task of a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// When it starts, in cycles from the start of the run.
    pub start_cycles: u64,
    /// The CPUs it may run on; `None` for all.
    pub allowed: Option<CpuSet>,
    /// What it does.
    pub program: Vec<Burst>,
    /// The process it is a thread of: the engine's `AppId(process)`. The
    /// threads of one process are co-threads (`Policy::CoThread` groups
    /// them when they give no DF). Default 0: one program.
    #[serde(default)]
    pub process: u32,
    /// Load from outside the program (a replay's other processes): it
    /// competes for its CPUs, but the run's makespan does not wait for it,
    /// and the run ends when every other task has exited. Default false.
    #[serde(default)]
    pub background: bool,
}

/// DFs and the tasks that work on them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// DF `i + 1` is `dfs[i]`.
    pub dfs: Vec<DfSpec>,
    /// Task `i` (its [`dfsched_core::TaskId`] is `i + 1`).
    pub tasks: Vec<TaskSpec>,
}

impl Workload {
    /// Checks the invariants of the module doc; the first violation found.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.tasks.is_empty() {
            return Err(WorkloadError::NoTasks);
        }
        if let Some(i) = self.dfs.iter().position(|d| d.bytes == 0) {
            return Err(WorkloadError::EmptyDf(DfId(i as u64 + 1)));
        }
        for (i, t) in self.tasks.iter().enumerate() {
            if t.allowed.as_ref().is_some_and(|a| a.is_empty()) {
                return Err(WorkloadError::NoAllowedCpu { task: i });
            }
            let mut df: Option<DfId> = None;
            for (pc, b) in t.program.iter().enumerate() {
                match *b {
                    Burst::Switch { next } => {
                        if let Some(d) = next {
                            if d.0 == 0 || d.0 > self.dfs.len() as u64 {
                                return Err(WorkloadError::UnknownDf {
                                    task: i,
                                    pc,
                                    df: d,
                                    dfs: self.dfs.len(),
                                });
                            }
                        }
                        df = next;
                    }
                    Burst::Read { .. } | Burst::Write { .. } if df.is_none() => {
                        return Err(WorkloadError::AccessWithoutDf { task: i, pc });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The first byte of each DF, line-aligned for `line_bytes`, and the
    /// number of lines of each (index `d − 1` for DF `d`).
    pub fn layout(&self, line_bytes: u64) -> Vec<(u64, u64)> {
        let mut next = 0u64;
        self.dfs
            .iter()
            .map(|d| {
                let lines = d.bytes.div_ceil(line_bytes);
                let base = next;
                next += lines * line_bytes;
                (base, lines)
            })
            .collect()
    }

    /// Channels the programs name (the largest channel number + 1).
    pub fn channels(&self) -> usize {
        self.tasks
            .iter()
            .flat_map(|t| &t.program)
            .filter_map(|b| match *b {
                Burst::Wait { chan } | Burst::Signal { chan } => Some(chan as usize + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The DF each task works on first (its first `Switch`), if any.
    pub fn first_dfs(&self) -> Vec<Option<DfId>> {
        self.tasks
            .iter()
            .map(|t| {
                t.program.iter().find_map(|b| match b {
                    Burst::Switch { next } => Some(*next),
                    _ => None,
                })?
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_task(program: Vec<Burst>) -> Workload {
        Workload {
            dfs: vec![DfSpec { bytes: 100 }, DfSpec { bytes: 64 }],
            tasks: vec![TaskSpec {
                process: 0,
                start_cycles: 0,
                allowed: None,
                program,
                background: false,
            }],
        }
    }

    #[test]
    fn a_valid_program_passes_and_bad_ones_name_their_fault() {
        let ok = one_task(vec![
            Burst::Switch {
                next: Some(DfId(2)),
            },
            Burst::Read { lines: 3 },
            Burst::Switch { next: None },
            Burst::Compute { cycles: 5 },
        ]);
        ok.validate().unwrap();
        assert_eq!(
            one_task(vec![Burst::Write { lines: 1 }]).validate(),
            Err(WorkloadError::AccessWithoutDf { task: 0, pc: 0 })
        );
        assert_eq!(
            one_task(vec![Burst::Switch {
                next: Some(DfId(3))
            }])
            .validate(),
            Err(WorkloadError::UnknownDf {
                task: 0,
                pc: 0,
                df: DfId(3),
                dfs: 2
            })
        );
        assert_eq!(Workload::default().validate(), Err(WorkloadError::NoTasks));
        let mut w = ok.clone();
        w.dfs[1].bytes = 0;
        assert_eq!(w.validate(), Err(WorkloadError::EmptyDf(DfId(2))));
        let mut w = ok;
        w.tasks[0].allowed = Some(CpuSet::new());
        assert_eq!(w.validate(), Err(WorkloadError::NoAllowedCpu { task: 0 }));
    }

    #[test]
    fn dfs_start_on_fresh_lines_and_never_share_one() {
        let w = one_task(vec![]);
        // 100 bytes = 2 lines of 64; the next DF starts at line 2.
        assert_eq!(w.layout(64), vec![(0, 2), (128, 1)]);
    }
}
