//! The hint path and thread registration of a runtime ([`Inner`]): a
//! hint's fast and slow paths, `attach`, registering a thread with the
//! engine (`TaskNew`), and forgetting it at its exit. The module doc of
//! `runtime.rs` gives the hint path's steps and the invariants these keep:
//! the engine, the task records and the counters change only under the
//! state's mutex, and a forked child never takes it.

use super::place::Applying;
use super::{df_of, Inner, State, TaskRec};
use crate::error::Error;
use crate::thread::{self, Fast, FastCounter};
use dfsched_core::{AppId, CoreError, CpuId, CpuSet, Decision, Event, TaskId};
use std::sync::Arc;

impl Inner {
    /// The hint path (see the module doc). `app`/`cur` of `None` mean the
    /// thread's own.
    #[inline]
    pub(crate) fn hint(
        self: &Arc<Self>,
        app: Option<u64>,
        cur: Option<u64>,
        next: u64,
    ) -> Result<(), Error> {
        if !self.config.enabled {
            return Ok(());
        }
        if self.is_shut_down() {
            return self.refuse_unlocked(Error::ShutDown);
        }
        match thread::fast_path(self.id, app, cur, next) {
            Ok(Fast::Hit) => Ok(()),
            Ok(Fast::Miss { app, cur, tid }) => self.hint_slow(app, cur, next, tid),
            Err(e) => self.refuse_unlocked(e),
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn refuse_unlocked(&self, e: Error) -> Result<(), Error> {
        // In a forked child the mutex may be held for ever: count nothing.
        if self.forked() {
            return Err(e);
        }
        if let Ok(mut st) = self.lock() {
            st.stats.hint_calls += 1;
            st.stats.refused_calls.record(&e);
        }
        Err(e)
    }

    #[inline(never)]
    fn hint_slow(
        self: &Arc<Self>,
        app: u64,
        cur: u64,
        next: u64,
        registered_tid: Option<u64>,
    ) -> Result<(), Error> {
        // A registered thread's tid comes from its registration: a system
        // call less on every moving hint. An unregistered thread's tid,
        // allowed CPUs and current CPU are read before the lock, so the
        // critical section makes no extra call.
        let tid = registered_tid.unwrap_or_else(crate::sys::gettid);
        let first = registered_tid.is_none().then(|| {
            (
                self.sys.get_affinity(0),
                crate::sys::current_cpu(),
                self.recorder.as_ref().map(|_| crate::record::SchedReading {
                    voluntary: crate::record::own_voluntary(),
                    ..crate::record::own_schedstat()
                }),
            )
        });
        let mut st = self.lock()?;
        st.stats.hint_calls += 1;
        let mut outcome = None;
        if let Some((mask, cpu, sched)) = first {
            outcome = match self.register(&mut st, tid, app, mask, cpu, sched) {
                Ok(outcome) => outcome,
                Err(e) => return refuse(&mut st, e),
            };
        }
        self.wake_by_call(&mut st, tid);
        let event = Event::Hint {
            task: TaskId(tid),
            app: AppId(app),
            cur: df_of(cur),
            next: df_of(next),
        };
        if let Err(e) = st.handle(event) {
            if matches!(e, CoreError::UnknownTask(_)) {
                // The runtime dropped this thread (it looked gone, ESRCH),
                // or a rule left it alone: forget the stale registration so
                // the next call starts anew.
                let _ = thread::forget(self.id);
                self.forget_left_alone(&mut st, tid);
            }
            return refuse(&mut st, e.into());
        }
        if let Some(rec) = &self.recorder {
            rec.hint(tid, app, cur, next, crate::sys::own_cpu_ns());
        }
        self.replace_if_stale(&mut st, tid);
        // The engine now has `next` for this thread. Recorded before the
        // thread moves (its thread-local would be cold on the new CPU); the
        // thread-local is alive, the fast path just read it.
        let _ = thread::set_df(self.id, next);
        let mut applying = Applying::default();
        while let Some(own) = self.rounds(&mut st, Some(tid), &mut applying) {
            // The caller's own move, prepared and last: made from this
            // frame, with nothing after it but the unlock, since all that
            // runs after it runs on the new CPU, whose caches hold none of
            // it (each frame returned through and each line touched there
            // is a miss).
            match self.sys.set_affinity(0, &own.cpus) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let failed = self.make_failed(&mut st, own, 0, e, &mut applying);
                    applying.outcome = Some(failed);
                }
            }
        }
        // The hint's own placement decides the outcome; registration's
        // counts only if the hint placed nothing.
        match applying.outcome.or(outcome) {
            None | Some(Ok(())) => Ok(()),
            Some(Err(e)) => {
                drop(st);
                tracing::warn!(tid, error = %e, "dfsched could not place the calling thread");
                Err(e)
            }
        }
    }

    /// [`Runtime::attach`].
    pub(crate) fn attach(self: &Arc<Self>) -> Result<(), Error> {
        if !self.config.enabled {
            return Ok(());
        }
        if self.is_shut_down() {
            return self.refuse_unlocked(Error::ShutDown);
        }
        match thread::is_registered(self.id) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return self.refuse_unlocked(e),
        }
        let tid = crate::sys::gettid();
        let mask = self.sys.get_affinity(0);
        let cpu = crate::sys::current_cpu();
        let sched = self.recorder.as_ref().map(|_| crate::record::SchedReading {
            voluntary: crate::record::own_voluntary(),
            ..crate::record::own_schedstat()
        });
        let mut st = self.lock()?;
        let mut outcome = match self.register(&mut st, tid, 0, mask, cpu, sched) {
            Ok(outcome) => outcome,
            Err(e) => return refuse(&mut st, e),
        };
        st.stats.threads_attached += 1;
        if self.has_thread_rules() {
            // SAFETY: pthread_self has no preconditions.
            // pthread_t is an unsigned long: u64 here, u32 on 32-bit targets.
            #[allow(clippy::useless_conversion)]
            let pthread = u64::from(unsafe { libc::pthread_self() });
            if let Some(ruled) = self.apply_thread_rules(&mut st, tid, pthread, Some(tid)) {
                outcome = Some(ruled);
            }
        }
        match outcome {
            None | Some(Ok(())) => Ok(()),
            Some(Err(e)) => {
                drop(st);
                tracing::warn!(tid, error = %e, "dfsched could not place an attached thread");
                Err(e)
            }
        }
    }

    /// Registers the calling thread (`TaskNew`) under `app`, from its kernel
    /// mask `mask`; returns the outcome of any placement of it that followed.
    /// `sched` is its schedstat reading when recording (read before the
    /// lock).
    fn register(
        self: &Arc<Self>,
        st: &mut State,
        tid: u64,
        app: u64,
        mask: Result<CpuSet, Error>,
        cpu: Option<CpuId>,
        sched: Option<crate::record::SchedReading>,
    ) -> Result<Option<Result<(), Error>>, Error> {
        if app >= st.next_app {
            return Err(CoreError::UnknownApp(AppId(app)).into());
        }
        let mask = mask?;
        let allowed = mask.intersection(self.topology.cpus());
        if allowed.is_empty() {
            return Err(Error::NoUsableCpu {
                allowed: mask,
                topology: self.topology.cpus().clone(),
            });
        }
        // While some CPU is offline, the mask read leaves it out: the stored
        // mask says whether the thread may use it when it comes back
        // (`runtime/online.rs`). A cold path: CPUs are rarely offline.
        let world = if self.topology.cpus().is_subset(&st.online) {
            allowed.clone()
        } else {
            self.sys
                .stored_mask(0)
                .map(|m| m.intersection(self.topology.cpus()))
                .ok()
                .filter(|m| allowed.is_subset(m))
                .unwrap_or_else(|| allowed.clone())
        };
        let usable = super::online::usable(&world, &st.online).unwrap_or_else(|| allowed.clone());
        let cpu = cpu.filter(|c| usable.contains(*c));
        st.handle(Event::TaskNew {
            task: TaskId(tid),
            app: AppId(app),
            allowed: usable,
            cpu,
        })?;
        let fast = Arc::new(FastCounter::default());
        st.tasks.insert(
            tid,
            TaskRec {
                fast: Arc::clone(&fast),
                last_set: mask,
                allowed: world,
                stale: false,
                idle: crate::idle::Track::default(),
                lent: None,
                pthread: 0,
                rule_df: false,
            },
        );
        st.stats.threads_registered += 1;
        if let Some(rec) = &self.recorder {
            let sched = sched.unwrap_or_else(crate::record::SchedReading::own_clock);
            rec.thread_new(tid, app, cpu.map(|c| c.0), sched);
        }
        let listener: std::sync::Weak<dyn thread::ExitListener> = Arc::downgrade(self) as _;
        if let Err(e) = thread::register(self.id, listener, tid, app, fast) {
            // Without a registration the thread's exit would go unnoticed:
            // take it back out of the engine.
            self.forget_task(st, tid);
            let _ = st.handle(Event::Exit { task: TaskId(tid) });
            st.decisions.clear();
            return Err(e);
        }
        Ok(self.apply(st, Some(tid)))
    }

    /// If an earlier placement of the calling thread failed and the hint
    /// does not place it anew, queues its placement on the engine's target:
    /// a retry, without which the engine's target and the thread's CPUs
    /// would stay apart until the target changed.
    fn replace_if_stale(&self, st: &mut State, tid: u64) {
        if !st.tasks.get(&tid).is_some_and(|r| r.stale) {
            return;
        }
        let task = TaskId(tid);
        let placed = st
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::Place { task: t, .. } if *t == task));
        if !placed {
            if let Some(cpus) = st.engine.task(task).and_then(|v| v.placed) {
                st.decisions.push(Decision::Place { task, cpus });
            }
        }
    }

    /// The calling thread `tid` runs: if the idle step had it blocked, it is
    /// woken now (`Event::Wake`, its placements carried out at once), not a
    /// pass later. A hint of a blocked thread would otherwise join its group
    /// as not runnable.
    pub(crate) fn wake_by_call(&self, st: &mut State, tid: u64) {
        let Some(rec) = st.tasks.get_mut(&tid) else {
            return;
        };
        if !rec.idle.blocked {
            return;
        }
        rec.idle.woken_by_call();
        if let Some(r) = &self.recorder {
            r.wake_by_call(tid);
        }
        if st.handle(Event::Wake { task: TaskId(tid) }).is_ok() {
            st.stats.idle_wakes += 1;
            // Carried out before the hint, whose refusal would drop them.
            self.apply(st, None);
        } else {
            st.stats.balance_errors += 1;
        }
    }

    /// Removes `tid`'s record, keeping its fast-path count; whether it was
    /// there.
    pub(crate) fn forget_task(&self, st: &mut State, tid: u64) -> bool {
        if let Some(link) = st.scx.as_mut() {
            link.forget(tid);
        }
        match st.tasks.remove(&tid) {
            Some(rec) => {
                st.retired_fast_hints += rec.fast.get();
                if rec.pthread != 0 {
                    st.pthreads.remove(&rec.pthread);
                }
                true
            }
            None => false,
        }
    }
}

impl thread::ExitListener for Inner {
    /// Called from the exiting thread's thread-local destructor.
    fn thread_exited(&self, tid: u64) {
        if !self.config.enabled || self.is_shut_down() {
            return;
        }
        let sched = self.recorder.as_ref().map(|_| crate::record::SchedReading {
            voluntary: crate::record::own_voluntary(),
            ..crate::record::own_schedstat()
        });
        let Ok(mut st) = self.lock() else {
            return;
        };
        if !self.forget_task(&mut st, tid) {
            self.forget_left_alone(&mut st, tid);
            return;
        }
        st.stats.threads_exited += 1;
        if let Some(rec) = &self.recorder {
            rec.thread_exit(
                tid,
                sched.unwrap_or_else(crate::record::SchedReading::own_clock),
            );
        }
        if st.handle(Event::Exit { task: TaskId(tid) }).is_ok() {
            self.apply(&mut st, None);
        }
    }
}

/// Counts `e` as a refused call and drops the decisions it left.
fn refuse(st: &mut State, e: Error) -> Result<(), Error> {
    st.decisions.clear();
    st.stats.refused_calls.record(&e);
    Err(e)
}
