//! Per-CPU run queues: which ready task a CPU runs next, and for how long.
//!
//! Two policies share one mechanism. Every ready task waits in a *batch* on
//! one CPU; a CPU serves its batches in round-robin order, and a batch keeps
//! the CPU until each of its tasks has used its quota (one quantum) in this
//! turn:
//!
//! ```text
//!   cpu 0:  order: [ G7 ] [ G2 ] [ t9 ]          front batch runs
//!           G7: fresh [t1 t4]  spent [t3]        t1, then t4; then G7 goes
//!                                                 to the back, spent → fresh
//! ```
//!
//! - [`RqPolicy::Vanilla`]: every task is a batch of its own, so this is a
//!   plain round robin with a quantum, like a kernel run queue of equal
//!   priorities.
//! - [`RqPolicy::DataAffinity`]: the tasks of one priority group (one DF,
//!   one home) form one batch, so a group's tasks run in succession and the
//!   CPU changes group only after all of them used their quota (Pinter &
//!   Zalmanovici §3–§4.1: "changing currently running bin is done only after
//!   all tasks in the bin finished their quota"). Tasks without a group are
//!   batches of their own.
//!
//! A *group quota* ([`RunQueues::set_group_quota`], default 0 = none) caps a
//! turn at that many picks, as the sched_ext body's `--quota` caps the
//! dispatches a CPU gives one group in a row: a batch whose turn used the
//! quota goes to the back with its fresh tasks still fresh, so they run
//! first in its next turn. Every task still runs once per lap; the quota
//! only cuts a large batch's turn into several. With a quota of 1 groups
//! alternate every quantum (round robin over groups).
//!
//! The body tells the queues what happens ([`RunQueues::enqueue`],
//! [`RunQueues::remove`], [`RunQueues::requeue_spent`]) and asks
//! [`RunQueues::pick`] when a CPU is free; the running task is in no queue.
//! [`RunQueues::steal_for`] is the idle balance of a kernel: a CPU with
//! nothing to run pulls a waiting task from the busiest CPU it may take one
//! from.
//!
//! Invariants ([`RunQueues::check_invariants`]):
//! - a task waits in at most one batch of one CPU, and the task index agrees;
//! - a CPU's order lists each of its batches exactly once, and only
//!   non-empty batches;
//! - iteration is over `Vec`s, `VecDeque`s and `BTreeMap`s only, so the same
//!   calls give the same picks.

use crate::cpuset::CpuSet;
use crate::ids::{CpuId, GroupId, Nanos, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Which dispatch policy the queues follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RqPolicy {
    /// Round robin over tasks with a quantum: the kernel-like baseline.
    Vanilla,
    /// Priority groups run in succession on their CPU.
    DataAffinity,
}

/// Why a run-queue call was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RqError {
    /// The CPU has no run queue.
    #[error("{0} has no run queue")]
    UnknownCpu(CpuId),
    /// The task already waits in a run queue.
    #[error("{task} already waits on {cpu}")]
    AlreadyQueued {
        /// The task.
        task: TaskId,
        /// Where it waits.
        cpu: CpuId,
    },
    /// A quantum of zero would never let a task run.
    #[error("the quantum must be at least 1 ns")]
    ZeroQuantum,
    /// No CPUs at all.
    #[error("run queues need at least one CPU")]
    NoCpus,
}

/// Where a batch's tasks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum BatchKey {
    /// The members of a priority group.
    Group(GroupId),
    /// One task alone (vanilla, or a task without a group).
    Solo(TaskId),
}

/// Tasks of one batch waiting on one CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Batch {
    /// Ready tasks that have not used their quota in this turn, FIFO.
    fresh: VecDeque<TaskId>,
    /// Ready tasks that used their quota in this turn, FIFO.
    spent: VecDeque<TaskId>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.fresh.is_empty() && self.spent.is_empty()
    }

    fn len(&self) -> usize {
        self.fresh.len() + self.spent.len()
    }

    /// Removes `task` from either list; whether it was there.
    fn remove(&mut self, task: TaskId) -> bool {
        for q in [&mut self.fresh, &mut self.spent] {
            if let Some(i) = q.iter().position(|t| *t == task) {
                q.remove(i);
                return true;
            }
        }
        false
    }
}

/// One CPU's queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CpuQueue {
    /// Batches in service order; the front one runs.
    order: VecDeque<BatchKey>,
    /// The batches, by key.
    batches: BTreeMap<BatchKey, Batch>,
    /// Ready tasks waiting here (sum of batch lengths).
    waiting: usize,
    /// The batch of the last pick, to tell when the CPU changes batch.
    last: Option<BatchKey>,
    /// Picks from the front batch in its current turn (for the group
    /// quota); 0 when a turn has not started.
    turn_picks: u32,
}

/// The next task a CPU runs.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pick {
    /// The task; it no longer waits in any queue.
    pub task: TaskId,
    /// How long it may run before it is preempted (the quantum).
    pub slice: Nanos,
    /// Whether this pick's batch differs from the previous pick's on this
    /// CPU (for a data-affinity queue: the CPU changed group).
    pub new_batch: bool,
}

/// Counters of the queues' decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RqStats {
    /// Picks handed out.
    pub picks: u64,
    /// Turns that ended: a batch whose tasks all used their quota went to
    /// the back of its CPU's order.
    pub batch_turns: u64,
    /// Tasks pulled by an idle CPU.
    pub steals: u64,
}

/// The run queues of every CPU of a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunQueues {
    /// The policy.
    policy: RqPolicy,
    /// The quota of one task in one turn.
    quantum: Nanos,
    /// The most picks a batch gets in one turn; 0 = no cap (the turn ends
    /// when each of its tasks used its quota).
    group_quota: u32,
    /// The queues, by CPU.
    cpus: BTreeMap<CpuId, CpuQueue>,
    /// Waiting task → (its CPU, its batch).
    index: BTreeMap<TaskId, (CpuId, BatchKey)>,
    /// Counters.
    stats: RqStats,
}

impl RunQueues {
    /// Empty queues for `cpus`, serving with `policy` and `quantum`.
    pub fn new(policy: RqPolicy, cpus: &CpuSet, quantum: Nanos) -> Result<RunQueues, RqError> {
        if quantum.0 == 0 {
            return Err(RqError::ZeroQuantum);
        }
        if cpus.is_empty() {
            return Err(RqError::NoCpus);
        }
        Ok(RunQueues {
            policy,
            quantum,
            group_quota: 0,
            cpus: cpus.iter().map(|c| (c, CpuQueue::default())).collect(),
            index: BTreeMap::new(),
            stats: RqStats::default(),
        })
    }

    /// The policy.
    pub fn policy(&self) -> RqPolicy {
        self.policy
    }

    /// The quantum.
    pub fn quantum(&self) -> Nanos {
        self.quantum
    }

    /// Caps each turn of a batch at `picks` picks (0 = no cap, the
    /// default): the sched_ext body's `--quota` (module doc).
    pub fn set_group_quota(&mut self, picks: u32) {
        self.group_quota = picks;
    }

    /// The group quota (0 = none).
    pub fn group_quota(&self) -> u32 {
        self.group_quota
    }

    /// The counters.
    pub fn stats(&self) -> RqStats {
        self.stats
    }

    fn key(&self, task: TaskId, group: Option<GroupId>) -> BatchKey {
        match (self.policy, group) {
            (RqPolicy::DataAffinity, Some(g)) => BatchKey::Group(g),
            _ => BatchKey::Solo(task),
        }
    }

    /// `task` (of `group`, if managed) becomes ready on `cpu` with a fresh
    /// quota: it joins its batch there, at the back of the batch.
    pub fn enqueue(
        &mut self,
        cpu: CpuId,
        task: TaskId,
        group: Option<GroupId>,
    ) -> Result<(), RqError> {
        self.insert(cpu, task, group, false)
    }

    /// `task` used its quota and is still ready: it waits on `cpu` until its
    /// batch's next turn.
    pub fn requeue_spent(
        &mut self,
        cpu: CpuId,
        task: TaskId,
        group: Option<GroupId>,
    ) -> Result<(), RqError> {
        self.insert(cpu, task, group, true)
    }

    fn insert(
        &mut self,
        cpu: CpuId,
        task: TaskId,
        group: Option<GroupId>,
        spent: bool,
    ) -> Result<(), RqError> {
        if let Some(&(at, _)) = self.index.get(&task) {
            return Err(RqError::AlreadyQueued { task, cpu: at });
        }
        let key = self.key(task, group);
        let q = self.cpus.get_mut(&cpu).ok_or(RqError::UnknownCpu(cpu))?;
        let batch = q.batches.entry(key).or_insert_with(|| {
            q.order.push_back(key);
            Batch::default()
        });
        if spent {
            batch.spent.push_back(task);
        } else {
            batch.fresh.push_back(task);
        }
        q.waiting += 1;
        self.index.insert(task, (cpu, key));
        Ok(())
    }

    /// Takes `task` out of its queue (it blocked, moved, exited); the CPU
    /// it waited on, or `None` if it waited nowhere.
    pub fn remove(&mut self, task: TaskId) -> Option<CpuId> {
        let (cpu, key) = self.index.remove(&task)?;
        let q = self.cpus.get_mut(&cpu).expect("indexed CPUs exist");
        let batch = q.batches.get_mut(&key).expect("indexed batches exist");
        let found = batch.remove(task);
        debug_assert!(found, "the index and the batch agree");
        q.waiting -= 1;
        if batch.is_empty() {
            q.batches.remove(&key);
            if let Some(i) = q.order.iter().position(|k| *k == key) {
                if i == 0 {
                    q.turn_picks = 0;
                }
                q.order.remove(i);
            }
        }
        Some(cpu)
    }

    /// The task `cpu` runs next, taken out of the queue; `None` when
    /// nothing waits there.
    pub fn pick(&mut self, cpu: CpuId) -> Result<Option<Pick>, RqError> {
        let q = self.cpus.get_mut(&cpu).ok_or(RqError::UnknownCpu(cpu))?;
        // At most one rotation per batch, and one more for a turn cut by
        // the group quota: after a full lap every batch has fresh tasks
        // again.
        for _ in 0..=q.order.len() + 1 {
            let Some(&key) = q.order.front() else {
                return Ok(None);
            };
            if self.group_quota > 0 && q.turn_picks >= self.group_quota && q.order.len() > 1 {
                // The turn used the quota: the batch waits at the back, its
                // fresh tasks still fresh (they run first in its next turn).
                q.order.rotate_left(1);
                q.turn_picks = 0;
                self.stats.batch_turns += 1;
                continue;
            }
            let batch = q.batches.get_mut(&key).expect("ordered batches exist");
            if let Some(task) = batch.fresh.pop_front() {
                q.turn_picks += 1;
                if batch.is_empty() {
                    // The running task's turn ends when it returns; it then
                    // starts a batch of the same key at the back.
                    q.batches.remove(&key);
                    q.order.pop_front();
                    q.turn_picks = 0;
                }
                q.waiting -= 1;
                let new_batch = q.last != Some(key);
                q.last = Some(key);
                self.index.remove(&task);
                self.stats.picks += 1;
                return Ok(Some(Pick {
                    task,
                    slice: self.quantum,
                    new_batch,
                }));
            }
            // Every waiting task of this batch used its quota: its turn
            // ends; it goes to the back with fresh quotas.
            std::mem::swap(&mut batch.fresh, &mut batch.spent);
            q.order.rotate_left(1);
            q.turn_picks = 0;
            self.stats.batch_turns += 1;
        }
        unreachable!("a lap over non-empty batches refreshes every quota")
    }

    /// Tasks waiting on `cpu` (the running one not counted).
    pub fn waiting(&self, cpu: CpuId) -> usize {
        self.cpus.get(&cpu).map_or(0, |q| q.waiting)
    }

    /// Tasks waiting anywhere.
    pub fn total_waiting(&self) -> usize {
        self.index.len()
    }

    /// Where `task` waits, if it does.
    pub fn queued_on(&self, task: TaskId) -> Option<CpuId> {
        self.index.get(&task).map(|(c, _)| *c)
    }

    /// Idle balance: `idle` has nothing to run; take a waiting task from
    /// the CPU with the most waiting tasks (ties → lowest CPU id) among
    /// those with at least `min_waiting`, whose target (`may_run_on`) holds
    /// `idle`. The task moves to `idle`'s queue with its quota kept fresh;
    /// returns it and where it came from. Tasks are tried from the back of
    /// the victim's order (the batch that waits longest for its turn is
    /// the one least likely to find its data in that CPU's cache).
    pub fn steal_for(
        &mut self,
        idle: CpuId,
        min_waiting: usize,
        mut may_run_on: impl FnMut(TaskId, CpuId) -> bool,
    ) -> Result<Option<(TaskId, CpuId)>, RqError> {
        if !self.cpus.contains_key(&idle) {
            return Err(RqError::UnknownCpu(idle));
        }
        let mut victims: Vec<(usize, CpuId)> = self
            .cpus
            .iter()
            .filter(|(c, q)| **c != idle && q.waiting >= min_waiting.max(1))
            .map(|(c, q)| (q.waiting, *c))
            .collect();
        // Most waiting first, then lowest id.
        victims.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, from) in victims {
            let q = &self.cpus[&from];
            let found = q.order.iter().rev().find_map(|k| {
                let b = &q.batches[k];
                b.spent
                    .iter()
                    .rev()
                    .chain(b.fresh.iter().rev())
                    .find(|t| may_run_on(**t, idle))
                    .map(|t| (*t, *k))
            });
            if let Some((task, key)) = found {
                self.remove(task);
                let group = match key {
                    BatchKey::Group(g) => Some(g),
                    BatchKey::Solo(_) => None,
                };
                self.enqueue(idle, task, group)?;
                self.stats.steals += 1;
                return Ok(Some((task, from)));
            }
        }
        Ok(None)
    }

    /// Checks every invariant; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = 0usize;
        for (cpu, q) in &self.cpus {
            if q.order.len() != q.batches.len() {
                return Err(format!(
                    "{cpu}: {} ordered batches, {} batches",
                    q.order.len(),
                    q.batches.len()
                ));
            }
            let mut n = 0;
            for key in &q.order {
                let b = q
                    .batches
                    .get(key)
                    .ok_or_else(|| format!("{cpu}: ordered batch {key:?} missing"))?;
                if b.is_empty() {
                    return Err(format!("{cpu}: empty batch {key:?}"));
                }
                for t in b.fresh.iter().chain(b.spent.iter()) {
                    if self.index.get(t) != Some(&(*cpu, *key)) {
                        return Err(format!("{cpu}: {t} misindexed"));
                    }
                }
                n += b.len();
            }
            if n != q.waiting {
                return Err(format!("{cpu}: counts {} waiting, holds {n}", q.waiting));
            }
            seen += n;
        }
        if seen != self.index.len() {
            return Err(format!("{seen} queued, {} indexed", self.index.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
