//! A runtime's rules for its own threads ([`crate::rules`]): each attached
//! thread is matched by its name when it attaches, and again when it is
//! renamed through `pthread_setname_np` (interposed in `preload.rs`), and
//! gets what the first matching rule says:
//!
//! ```text
//!  ThreadChoice::Df(d)   Hint{cur: its DF, next: d} by tid, as if the thread had
//!                        called dfsched_enter(d); its shared slot takes d
//!  ThreadChoice::Default a DF a rule gave is taken back (Hint to none); a DF
//!                        of the thread's own hints is kept
//!  ThreadChoice::Leave   Exit from the engine; its record moves to
//!                        `left_alone`; its mask, if still dfsched's, goes back
//!                        to its allowed CPUs. A later rename that no rule
//!                        leaves alone brings it back (TaskNew by tid).
//! ```
//!
//! Everything here runs under the runtime's mutex, reading the thread's
//! name there too: two evaluations of one thread (its own at attach and
//! its creator's rename of it) are ordered by the mutex, and the later one
//! reads the later name, so the thread ends under its latest name's rule
//! whatever the interleaving.
//!
//! Threads that registered by their own hint are not matched at
//! registration (the program chose); a rename still is.

use super::{Inner, State};
use crate::error::Error;
use crate::rules::ThreadChoice;
use crate::state::LeftAlone;
use dfsched_core::{AppId, DfId, Event, TaskId};

impl Inner {
    /// Whether this runtime has rules that look at its threads.
    pub(crate) fn has_thread_rules(&self) -> bool {
        self.config
            .rules
            .as_ref()
            .is_some_and(|r| !r.rules.is_empty())
    }

    /// Under the lock: matches registered (or left-alone) thread `tid`,
    /// whose `pthread_t` is `pthread` (0 = unknown, keep the one known), by
    /// its current name, and carries out what the rules say. `caller`: the
    /// calling thread's tid when `tid` is the caller (its own moves are
    /// made with tid 0). Returns the outcome of any placement of the
    /// caller.
    pub(crate) fn apply_thread_rules(
        &self,
        st: &mut State,
        tid: u64,
        pthread: u64,
        caller: Option<u64>,
    ) -> Option<Result<(), Error>> {
        let (Some(rules), Some(facts)) = (&self.config.rules, &self.process) else {
            return None;
        };
        if pthread != 0 {
            st.pthreads.insert(pthread, tid);
            if let Some(rec) = st.tasks.get_mut(&tid) {
                rec.pthread = pthread;
            }
            if let Some(l) = st.left_alone.get_mut(&tid) {
                l.rec.pthread = pthread;
            }
        }
        let name = crate::sys::thread_name(self.pid, tid)?;
        let choice = rules.thread_choice(facts, &name);
        tracing::debug!(tid, name, ?choice, "dfsched rules: thread matched");
        if choice == ThreadChoice::Leave {
            self.leave_alone(st, tid, caller);
            return None;
        }
        if st.left_alone.contains_key(&tid) {
            if let Err(e) = self.readmit(st, tid, caller) {
                st.stats.balance_errors += 1;
                return Some(Err(e));
            }
        }
        let rec = st.tasks.get(&tid)?;
        let view = st.engine.task(TaskId(tid))?;
        let next = match choice {
            ThreadChoice::Df(d) => Some(DfId(d)),
            ThreadChoice::Default if rec.rule_df => None,
            // A DF of the thread's own hints, or none: the policy's way.
            ThreadChoice::Default | ThreadChoice::Leave => return None,
        };
        if view.df == next {
            return None;
        }
        let event = Event::Hint {
            task: TaskId(tid),
            app: view.app,
            cur: view.df,
            next,
        };
        if st.handle(event).is_err() {
            st.decisions.clear();
            st.stats.balance_errors += 1;
            return None;
        }
        let rec = st.tasks.get_mut(&tid).expect("checked above");
        rec.fast.set_df(next.map_or(0, |d| d.0));
        rec.rule_df = next.is_some();
        st.stats.rule_dfs += u64::from(next.is_some());
        self.apply(st, caller)
    }

    /// Takes `tid` out of the engine and gives it its allowed CPUs back if
    /// its mask is still the one dfsched set.
    fn leave_alone(&self, st: &mut State, tid: u64, caller: Option<u64>) {
        let Some(view) = st.engine.task(TaskId(tid)) else {
            return;
        };
        let Some(rec) = st.tasks.remove(&tid) else {
            return;
        };
        if st.handle(Event::Exit { task: TaskId(tid) }).is_err() {
            st.decisions.clear();
        }
        let target = if caller == Some(tid) { 0 } else { tid };
        if rec.lent.is_none()
            && self
                .sys
                .get_affinity(target)
                .is_ok_and(|m| m == rec.last_set)
        {
            let _ = self.sys.set_affinity(target, &view.allowed);
        }
        st.stats.rule_left_alone += 1;
        st.left_alone.insert(
            tid,
            LeftAlone {
                rec,
                app: view.app.0,
            },
        );
        // The others of its group may have a new home without it.
        self.apply(st, None);
    }

    /// Brings left-alone `tid` back into the engine from its mask now.
    fn readmit(&self, st: &mut State, tid: u64, caller: Option<u64>) -> Result<(), Error> {
        let target = if caller == Some(tid) { 0 } else { tid };
        let mask = self.sys.get_affinity(target)?;
        let allowed = mask.intersection(self.topology.cpus());
        if allowed.is_empty() {
            return Err(Error::NoUsableCpu {
                allowed: mask,
                topology: self.topology.cpus().clone(),
            });
        }
        let LeftAlone { mut rec, app } = st.left_alone.remove(&tid).expect("checked by the caller");
        if let Err(e) = st.handle(Event::TaskNew {
            task: TaskId(tid),
            app: AppId(app),
            allowed,
            cpu: None,
        }) {
            st.decisions.clear();
            st.left_alone.insert(tid, LeftAlone { rec, app });
            return Err(e.into());
        }
        rec.last_set = mask;
        rec.fast.set_df(0);
        rec.rule_df = false;
        st.tasks.insert(tid, rec);
        let _ = self.apply(st, caller);
        Ok(())
    }

    /// A thread of this process known by `pthread` was renamed: matches it
    /// again ([`Inner::apply_thread_rules`]). Nothing for a thread this
    /// runtime does not know or without rules on names.
    pub(crate) fn thread_renamed(&self, pthread: u64) {
        if !self.config.enabled || self.is_shut_down() || !self.has_thread_rules() {
            return;
        }
        let Ok(mut st) = self.lock() else {
            return;
        };
        let Some(&tid) = st.pthreads.get(&pthread) else {
            return;
        };
        let me = crate::sys::gettid();
        let caller = (tid == me).then_some(me);
        if let Some(Err(e)) = self.apply_thread_rules(&mut st, tid, 0, caller) {
            tracing::debug!(tid, error = %e, "dfsched rules: a renamed thread was not placed");
        }
    }

    /// Forgets `tid` if a rule had left it alone (its exit); whether it was.
    pub(crate) fn forget_left_alone(&self, st: &mut State, tid: u64) -> bool {
        match st.left_alone.remove(&tid) {
            Some(l) => {
                st.retired_fast_hints += l.rec.fast.get();
                if l.rec.pthread != 0 {
                    st.pthreads.remove(&l.rec.pthread);
                }
                true
            }
            None => false,
        }
    }
}
