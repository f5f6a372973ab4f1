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
//!
//! A thread whose allowed CPUs are lent to a call that starts a program
//! (`posix_spawn`, `system`, `popen`; see `runtime/spawn.rs`) is neither read back
//! nor moved: its record takes the new mask, which the call's end sets.
//!
//! A placement is *prepared* (step 1 and the record's book-keeping) and then
//! *made* (steps 2–3). The calling thread's own placement comes last in its
//! round, and when it is the last thing left, [`Inner::rounds`] hands it back
//! prepared: the hint path makes the system call itself, from its own frame,
//! and only unlocks after it. Whatever runs after the move runs on the new
//! CPU, where none of it is cached; unwinding through `rounds`, `make` and
//! their frames there cost ≈ 0.4 µs per moving hint on the development VM.
//!
//! **Order.** Placements reach the kernel in the order the engine decided
//! them, because every write dfsched makes to a registered thread's mask
//! is made under the runtime's mutex, the one the engine decides under:
//! other threads' moves here, the caller's own move in the hint path
//! (before the unlock, so a later hint that re-homes its group cannot be
//! overtaken by it), the lend and its end in `runtime/spawn.rs`. The kernel stores
//! the new mask before `sched_setaffinity` returns, under the task's lock
//! that `sched_getaffinity` takes too, so a read-back under the mutex sees
//! dfsched's latest write, never an earlier one, and step 1 cannot mistake
//! dfsched's own placement for someone else's. The reads and writes made
//! outside the mutex touch threads no one else places: an unregistered
//! thread's own mask read at its registration, a new thread's inherited
//! mask (`preload.rs`). Not ordered: two runtimes that both place one
//! thread (each sees the other's writes as someone else's), and the exec
//! hooks' widening (`preload.rs`), made after the lock is released; it is
//! the program's last act unless the exec fails, and then the thread's
//! next placement reads it back as someone else's mask.
//! [`Inner::check_placements`] checks the result against the kernel, and
//! `tests/placement_order.rs` hammers it with concurrent hints.
//!
//! A thread that reads its own mask before every thread has hinted may see
//! a placement that a later hint replaces: each placement is made for the
//! load known when it is decided (a thread counts from its first hint or
//! attach), so under light load a DF's first threads get the LLC, and the
//! hint that makes the load heavy re-homes the group to one CPU and moves
//! them. That is what issue 9's held-out client saw (`t1:01` beside
//! `t3:1`, read at 30 % of the work while later threads had not hinted
//! yet); see `tests/c_abi.rs`.

use super::{Inner, State};
use crate::error::Error;
use dfsched_core::{CpuSet, Decision, Event, TaskId};

/// Rounds of follow-up decisions carried out per call at most. Each round
/// after the first needs a thread that was re-read or found gone, and each
/// thread is re-read once, so this only guards against an engine bug.
const MAX_ROUNDS: usize = 8;

/// Where one call carrying out decisions stands; it may span several calls
/// of [`Inner::rounds`] when the caller's own move is made in between.
#[derive(Default)]
pub(crate) struct Applying {
    /// Threads re-read in this call: each is re-read at most once.
    reread: Vec<u64>,
    /// Rounds carried out so far.
    rounds: usize,
    /// The outcome of the caller's latest placement so far.
    pub(crate) outcome: Option<Result<(), Error>>,
}

/// A placement whose mask was read back and whose book-keeping is done
/// (the record already names `cpus`): only the system call is left. Kept
/// apart so that the caller's own move can be the last thing done under the
/// lock, from the shallowest frame: everything it touches after the move is
/// cache-cold on the new CPU.
pub(crate) struct Prepared {
    /// The thread.
    tid: u64,
    /// Its mask to set.
    pub(crate) cpus: CpuSet,
    /// Its record's mask before, to restore if the call fails; `None` when
    /// it has no record.
    previous: Option<CpuSet>,
}

/// What preparing a placement came to.
enum Prep {
    /// Ready for the system call.
    Ready(Prepared),
    /// Settled without it (the mask read back was someone else's, or the
    /// read failed): the placement's outcome. Follow-ups may be queued.
    Settled(Result<(), Error>),
}

/// The scx body failed: it is dropped for good (its scheduler ends the
/// groups of the closed connection), counted and warned about once; the
/// runtime places by affinity from now on.
#[cold]
fn scx_failed(st: &mut State, e: crate::scx::ScxError) {
    st.scx = None;
    st.stats.scx_body = false;
    st.stats.scx_failures += 1;
    tracing::warn!(error = %e, "sched_ext body failed; placing by affinity from now on");
}

impl Inner {
    /// Carries out `st.decisions` (leaving it empty). Returns the outcome of
    /// the latest placement of `caller` (the calling thread's tid), if any
    /// decision placed it.
    pub(crate) fn apply(&self, st: &mut State, caller: Option<u64>) -> Option<Result<(), Error>> {
        let mut a = Applying::default();
        while let Some(own) = self.rounds(st, caller, &mut a) {
            a.outcome = Some(self.make(st, own, true, &mut a));
        }
        a.outcome
    }

    /// Carries out rounds of `st.decisions` until none is left, except that
    /// when the caller's latest placement would be the last thing done, it
    /// is prepared and returned instead: the caller makes it (tid 0, see
    /// [`Inner::make`]) and calls again.
    pub(crate) fn rounds(
        &self,
        st: &mut State,
        caller: Option<u64>,
        a: &mut Applying,
    ) -> Option<Prepared> {
        while !st.decisions.is_empty() {
            if a.rounds == MAX_ROUNDS {
                st.decisions.clear();
                break;
            }
            a.rounds += 1;
            let mut batch = std::mem::replace(&mut st.decisions, std::mem::take(&mut st.spare));
            // The caller's latest placement in this round, carried out last.
            let mut own: Option<CpuSet> = None;
            for decision in batch.drain(..) {
                match decision {
                    Decision::Place { task, cpus } if Some(task.0) == caller => own = Some(cpus),
                    Decision::Place { task, cpus } => {
                        // Failures are counted; they are not the caller's.
                        let _ = match self.prepare(st, task.0, cpus, task.0, a) {
                            Prep::Ready(p) => self.make(st, p, false, a),
                            Prep::Settled(outcome) => outcome,
                        };
                    }
                    // The scx body ends the group's queue and home.
                    Decision::GroupReclaimed { group } if st.scx.is_some() => {
                        if let Some(link) = st.scx.as_mut() {
                            match link.reclaim(group) {
                                Ok(()) => st.stats.scx_placements += 1,
                                Err(e) => scx_failed(st, e),
                            }
                        }
                    }
                    // Counted by the engine as it decides them; their
                    // members' `Place` decisions carry them out.
                    Decision::GroupMoved { .. }
                    | Decision::GroupSplit { .. }
                    | Decision::TaskMoved { .. }
                    | Decision::GroupReclaimed { .. } => {}
                }
            }
            st.spare = batch;
            // The caller moves last: its system call migrates it to another
            // CPU, where everything it touches afterwards is cache-cold.
            if let (Some(cpus), Some(tid)) = (own, caller) {
                match self.prepare(st, tid, cpus, 0, a) {
                    // Under the scx body nothing moves the caller now (the
                    // scheduler does, later): `make` sends it from here.
                    Prep::Ready(p) if st.decisions.is_empty() && st.scx.is_none() => {
                        return Some(p)
                    }
                    Prep::Ready(p) => a.outcome = Some(self.make(st, p, true, a)),
                    Prep::Settled(outcome) => a.outcome = Some(outcome),
                }
            }
        }
        None
    }

    /// Steps 1 and the book-keeping of a placement of thread `tid` (`target`
    /// 0 for the calling thread) on `cpus` (see the module doc).
    fn prepare(
        &self,
        st: &mut State,
        tid: u64,
        cpus: CpuSet,
        target: u64,
        a: &mut Applying,
    ) -> Prep {
        let may_reread = !a.reread.contains(&tid);
        let Some(rec) = st.tasks.get_mut(&tid) else {
            // Every task the engine knows has a record; be safe anyway.
            st.stats.affinity_calls += 1;
            return Prep::Ready(Prepared {
                tid,
                cpus,
                previous: None,
            });
        };
        if rec.lent.is_some() {
            // In a call that starts a program with the thread's allowed CPUs
            // (`runtime/spawn.rs`): narrowing it now could confine the program; the
            // call's end places it where `last_set` says then (and counts
            // that placement).
            rec.last_set = cpus;
            rec.stale = false;
            return Prep::Settled(Ok(()));
        }
        // Under the scx body the mask is the program's, never ours: there
        // is nothing of dfsched's to read back.
        if st.scx.is_none() {
            match self.sys.affinity_if_not(target, &rec.last_set) {
                Ok(Some(mask)) if may_reread => {
                    a.reread.push(tid);
                    // `sched_getaffinity` leaves offline CPUs out: only the
                    // stored mask says whether someone else set it.
                    let stored = self.sys.stored_mask(target).unwrap_or(mask);
                    if stored != rec.last_set {
                        return Prep::Settled(self.allowed_changed(st, tid, stored));
                    }
                }
                Ok(_) => {}
                Err(e) => return Prep::Settled(self.placement_failed(st, tid, e)),
            }
        }
        let Some(rec) = st.tasks.get_mut(&tid) else {
            return Prep::Settled(Ok(()));
        };
        // Book-keeping before the system call, undone if it fails: after a
        // move of the caller this state would be cold.
        let previous = std::mem::replace(&mut rec.last_set, cpus.clone());
        rec.stale = false;
        if st.scx.is_none() {
            st.stats.affinity_calls += 1;
        }
        Prep::Ready(Prepared {
            tid,
            cpus,
            previous: Some(previous),
        })
    }

    /// Step 2 of a prepared placement (tid 0 for the calling thread), and
    /// step 3 if the kernel says no.
    pub(crate) fn make(
        &self,
        st: &mut State,
        p: Prepared,
        is_caller: bool,
        a: &mut Applying,
    ) -> Result<(), Error> {
        let target = if is_caller { 0 } else { p.tid };
        if st.scx.is_some() {
            match self.make_scx(st, &p) {
                Some(outcome) => return outcome,
                // The body failed and is gone: place by affinity instead.
                None => st.stats.affinity_calls += 1,
            }
        }
        match self.sys.set_affinity(target, &p.cpus) {
            Ok(()) => Ok(()),
            Err(e) => self.make_failed(st, p, target, e, a),
        }
    }

    /// Step 2 under the scx body: the placement goes to dfsched's sched_ext
    /// scheduler (the thread's group gets the home `p.cpus`, the thread the
    /// group; see `crate::scx`). `None` when the body failed and was
    /// dropped: the caller places by affinity.
    fn make_scx(&self, st: &mut State, p: &Prepared) -> Option<Result<(), Error>> {
        let group = st.engine.task(TaskId(p.tid)).and_then(|v| v.group);
        let link = st.scx.as_mut()?;
        match link.place(&*self.sys, p.tid, group, &p.cpus) {
            Ok(()) => {
                st.stats.scx_placements += 1;
                Some(Ok(()))
            }
            // The thread exited: as a failed affinity call would say.
            Err(crate::scx::ScxError::Policy(e)) if e.errno() == Some(libc::ESRCH) => {
                Some(self.placement_failed(st, p.tid, e))
            }
            Err(e) => {
                scx_failed(st, e);
                None
            }
        }
    }

    /// Step 3: the system call of a prepared placement failed with `e`.
    #[cold]
    #[inline(never)]
    pub(crate) fn make_failed(
        &self,
        st: &mut State,
        p: Prepared,
        target: u64,
        e: Error,
        a: &mut Applying,
    ) -> Result<(), Error> {
        let tid = p.tid;
        st.stats.affinity_calls -= 1;
        let Some(previous) = p.previous else {
            return self.placement_failed(st, tid, e);
        };
        // The kernel kept the thread's mask: `previous`, as just read back.
        if let Some(rec) = st.tasks.get_mut(&tid) {
            rec.last_set = previous;
            rec.stale = true;
        }
        if e.errno() == Some(libc::EINVAL) && !a.reread.contains(&tid) {
            st.stats.affinity_failures.record(e.errno());
            a.reread.push(tid);
            return match self.sys.stored_mask(target) {
                // The retry's own outcome replaces this one.
                Ok(mask) => self.allowed_changed(st, tid, mask).and(Err(e)),
                Err(again) => self.placement_failed(st, tid, again),
            };
        }
        self.placement_failed(st, tid, e)
    }

    /// Thread `tid`'s kernel mask (as stored, offline CPUs included) is
    /// `mask`, not what dfsched set: it becomes the thread's world-allowed
    /// set, the engine is told that ∩ the CPUs online (`runtime/online.rs`),
    /// and the thread's placement by the engine's new answer is queued.
    pub(super) fn allowed_changed(
        &self,
        st: &mut State,
        tid: u64,
        mask: CpuSet,
    ) -> Result<(), Error> {
        let world = mask.intersection(self.topology.cpus());
        let allowed = super::online::usable(&world, &st.online).unwrap_or_else(|| world.clone());
        if world.is_empty() {
            // Pinned outside every CPU we may use: leave it alone.
            st.stats.affinity_failures.other += 1;
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
            rec.allowed = world;
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
    pub(super) fn placement_failed(&self, st: &mut State, tid: u64, e: Error) -> Result<(), Error> {
        st.stats.affinity_failures.record(e.errno());
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

impl Inner {
    /// The engine-vs-kernel invariant, checked under the lock (so no
    /// placement is under way): every registered thread's kernel mask is
    /// its engine target (where the engine last placed it, or its allowed
    /// CPUs if it never did), and a member of a group sits in the group's
    /// home (the home's CPUs ∩ its allowed CPUs, when they meet). A thread
    /// lent to a call that starts a program (`runtime/spawn.rs`) is skipped: its
    /// mask is its allowed set until the call's end sets its target. A
    /// thread whose last placement failed (its record is stale) is
    /// reported: its mask is not its target. Returns every mismatch, by
    /// tid. Under the scx body the masks are the program's and placement is
    /// the BPF scheduler's, which this cannot read: it says so as an error
    /// rather than pass unchecked. Under `smt-pair` the engine's target is
    /// not checked (the profile's pass pins the threads), the rest is.
    pub(crate) fn check_placements(&self, st: &State) -> Result<(), String> {
        if st.scx.is_some() {
            return Err("placements go to the sched_ext scheduler (scx body): \
                        the kernel masks are not dfsched's to check"
                .into());
        }
        let mut tids: Vec<u64> = st.tasks.keys().copied().collect();
        tids.sort_unstable();
        let mut bad = Vec::new();
        for tid in tids {
            let rec = &st.tasks[&tid];
            if rec.lent.is_some() {
                continue;
            }
            let Some(view) = st.engine.task(TaskId(tid)) else {
                bad.push(format!("tid {tid}: registered but unknown to the engine"));
                continue;
            };
            let kernel = match self.sys.get_affinity(tid) {
                Ok(mask) => mask,
                Err(e) => {
                    bad.push(format!("tid {tid}: its mask cannot be read: {e}"));
                    continue;
                }
            };
            let target = view.placed.clone().unwrap_or_else(|| view.allowed.clone());
            // Under smt-pair the pass pins by the profile, not the engine
            // (`runtime/smt.rs`): only dfsched's last mask is the target.
            if kernel != target && self.smt.is_none() {
                bad.push(format!(
                    "tid {tid}: kernel mask {kernel}, engine target {target}{}",
                    if rec.stale {
                        " (its last placement failed)"
                    } else {
                        ""
                    }
                ));
            }
            if kernel != rec.last_set {
                bad.push(format!(
                    "tid {tid}: kernel mask {kernel}, last set by dfsched {}",
                    rec.last_set
                ));
            }
            let home = view
                .group
                .and_then(|g| st.engine.group(g))
                .map(|g| {
                    self.topology
                        .domain(g.home)
                        .cpus
                        .intersection(&view.allowed)
                })
                .filter(|home| !home.is_empty());
            if let Some(home) = home {
                if kernel != home {
                    bad.push(format!(
                        "tid {tid}: kernel mask {kernel}, its group's home {home}"
                    ));
                }
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }
}
