//! Carrying out the engine's decisions on real threads, and what to do when
//! the kernel says no.
//!
//! For each `Place { task, cpus }`, under the runtime's mutex:
//! 1. read the thread's mask back; if it differs from the mask dfsched last
//!    set, someone else (taskset, a cpuset, the program) changed it: tell
//!    the engine (`Event::Allowed` with that mask ∩ the topology) and place
//!    by its new answer instead;
//! 2. `sched_setaffinity(tid, cpus)` (tid 0 for the calling thread);
//! 3. on failure, by errno:
//!    - `ESRCH`: the thread exited between its hint and now → `Exit`, count;
//!    - `EINVAL`: the allowed CPUs changed under us (a cpuset) → re-read
//!      the thread's mask, `Event::Allowed`, retry once; a second `EINVAL`
//!      leaves the thread where it is;
//!    - `EPERM`, anything else: the thread stays where it is; counted, and
//!      returned to the caller if it is the caller's own placement.
//!
//! Follow-up events (`Exit`, `Allowed`) append decisions that are carried out
//! in the next round of the same call; each thread is re-read at most once
//! per call, so rounds are bounded. The engine's view stays as decided when
//! a placement fails: the thread keeps its DF and group, its record is marked
//! stale, and its next hint places it again even if its target is unchanged.

use crate::error::Error;
use crate::runtime::{Inner, State};
use dfsched_core::{CpuSet, Decision, Event, TaskId};

/// Rounds of follow-up decisions carried out per call at most. Each round
/// after the first needs a thread that was re-read or found gone, and each
/// thread is re-read once, so this only guards against an engine bug.
const MAX_ROUNDS: usize = 8;

impl Inner {
    /// Carries out `st.decisions` (leaving it empty). Returns the outcome of
    /// the latest placement of `caller` (the calling thread's tid), if any
    /// decision placed it.
    pub(crate) fn apply(&self, st: &mut State, caller: Option<u64>) -> Option<Result<(), Error>> {
        if st.decisions.is_empty() {
            return None;
        }
        let mut outcome = None;
        let mut batch = std::mem::replace(&mut st.decisions, std::mem::take(&mut st.spare));
        // Allocates only on a fault path.
        let mut reread: Vec<u64> = Vec::new();
        for _ in 0..MAX_ROUNDS {
            // The caller's latest placement in this round, carried out last.
            let mut own: Option<CpuSet> = None;
            for decision in batch.drain(..) {
                match decision {
                    Decision::Place { task, cpus } if Some(task.0) == caller => own = Some(cpus),
                    Decision::Place { task, cpus } => {
                        // Failures are counted; they are not the caller's.
                        let _ = self.place(st, task.0, cpus, false, &mut reread);
                    }
                    Decision::GroupMoved { .. } => st.stats.group_moves += 1,
                    Decision::GroupSplit { .. } => st.stats.splits += 1,
                    Decision::TaskMoved { .. } => st.stats.task_moves += 1,
                    Decision::GroupReclaimed { .. } => {}
                }
            }
            // The caller moves last: its system call migrates it to another
            // CPU, where everything it touches afterwards is cache-cold.
            if let (Some(cpus), Some(tid)) = (own, caller) {
                outcome = Some(self.place(st, tid, cpus, true, &mut reread));
            }
            if st.decisions.is_empty() {
                break;
            }
            std::mem::swap(&mut batch, &mut st.decisions);
        }
        st.decisions.clear();
        st.spare = batch;
        outcome
    }

    /// Places thread `tid` on `cpus` (see the module doc).
    fn place(
        &self,
        st: &mut State,
        tid: u64,
        cpus: CpuSet,
        is_caller: bool,
        reread: &mut Vec<u64>,
    ) -> Result<(), Error> {
        let target = if is_caller { 0 } else { tid };
        let may_reread = !reread.contains(&tid);
        let Some(rec) = st.tasks.get_mut(&tid) else {
            // Every task the engine knows has a record; be safe anyway.
            return match self.sys.set_affinity(target, &cpus) {
                Ok(()) => {
                    st.stats.placements += 1;
                    Ok(())
                }
                Err(e) => self.placement_failed(st, tid, e),
            };
        };
        match self.sys.affinity_if_not(target, &rec.last_set) {
            Ok(Some(mask)) if may_reread => {
                reread.push(tid);
                return self.allowed_changed(st, tid, mask);
            }
            Ok(_) => {}
            Err(e) => return self.placement_failed(st, tid, e),
        }
        // Book-keeping before the system call, undone if it fails: after a
        // move of the caller this state would be cold.
        let previous = std::mem::replace(&mut rec.last_set, cpus);
        rec.stale = false;
        st.stats.placements += 1;
        let Err(e) = self.sys.set_affinity(target, &rec.last_set) else {
            return Ok(());
        };
        // The kernel kept the thread's mask: `previous`, as just read back.
        rec.last_set = previous;
        rec.stale = true;
        st.stats.placements -= 1;
        if e.errno() == Some(libc::EINVAL) && may_reread {
            st.stats.placement_failures.record(e.errno());
            reread.push(tid);
            return match self.sys.get_affinity(target) {
                // The retry's own outcome replaces this one.
                Ok(mask) => self.allowed_changed(st, tid, mask).and(Err(e)),
                Err(again) => self.placement_failed(st, tid, again),
            };
        }
        self.placement_failed(st, tid, e)
    }

    /// Thread `tid`'s kernel mask is `mask`, not what dfsched set: tells the
    /// engine and queues the thread's placement by the engine's new answer.
    fn allowed_changed(&self, st: &mut State, tid: u64, mask: CpuSet) -> Result<(), Error> {
        let allowed = mask.intersection(self.topology.cpus());
        if allowed.is_empty() {
            // Pinned outside every CPU we may use: leave it alone.
            st.stats.placement_failures.other += 1;
            if let Some(rec) = st.tasks.get_mut(&tid) {
                rec.stale = true;
            }
            return Err(Error::NoUsableCpu {
                allowed: mask,
                topology: self.topology.cpus().clone(),
            });
        }
        let before = st.decisions.len();
        let task = TaskId(tid);
        st.handle(Event::Allowed { task, allowed })?;
        st.stats.allowed_changes += 1;
        if let Some(rec) = st.tasks.get_mut(&tid) {
            rec.last_set = mask;
        }
        let placed_again = st.decisions[before..]
            .iter()
            .any(|d| matches!(d, Decision::Place { task: t, .. } if *t == task));
        if !placed_again {
            // The engine's target did not change, but the kernel's mask did:
            // put the thread back on its target.
            if let Some(cpus) = st.engine.task(task).and_then(|v| v.placed) {
                st.decisions.push(Decision::Place { task, cpus });
            }
        }
        Ok(())
    }

    /// Counts a failed affinity call on `tid`; drops the thread if it is
    /// gone. Returns the error.
    fn placement_failed(&self, st: &mut State, tid: u64, e: Error) -> Result<(), Error> {
        st.stats.placement_failures.record(e.errno());
        if let Some(rec) = st.tasks.get_mut(&tid) {
            rec.stale = true;
        }
        if e.errno() == Some(libc::ESRCH) && self.forget_task(st, tid) {
            st.stats.threads_gone += 1;
            // Its group may re-home without it; those moves follow.
            let _ = st.handle(Event::Exit { task: TaskId(tid) });
        }
        Err(e)
    }
}
