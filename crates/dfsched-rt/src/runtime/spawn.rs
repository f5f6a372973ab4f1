//! A placed thread's allowed CPUs, lent for the length of a call that
//! starts a program (`posix_spawn`, `posix_spawnp`, `system`, `popen`,
//! interposed in `preload.rs`).
//!
//! A child process inherits the mask of the thread that created it, and a
//! program keeps the mask it was exec'd with as its allowed CPUs for good.
//! These calls create the child and exec the program inside libc, where no
//! hook reaches: the only mask that matters is the calling thread's while
//! the call runs. So:
//!
//! ```text
//!  lend:  registered, mask == dfsched's placement (last_set), nothing lent?
//!           → sched_setaffinity(0, allowed); record.lent = Some(allowed)
//!  the real call (the child is cloned with the allowed CPUs)
//!         meanwhile a placement of the thread (balancer, another thread's
//!         hint) only sets record.last_set: it is neither read back nor made
//!  end:   record.lent taken; mask still the one lent?
//!           → sched_setaffinity(0, record.last_set): the placement the
//!             runtime wants now, not the one from before the call
//! ```
//!
//! Invariants:
//! - a record has `lent` only between a `lend` that returned true and its
//!   `end`, both made by the thread itself, under the runtime's mutex;
//! - nothing is lent by a runtime that is shut down or serves another
//!   process (a fork's parent), nor for a thread it does not know, nor when
//!   someone else set the thread's mask (it is not dfsched's to widen);
//! - at the end, a mask someone else set during the call is left as it is;
//!   the thread's next placement reads it back and makes it the thread's
//!   allowed CPUs (`runtime/place.rs`);
//! - a failure only leaves the thread as it was: these steps never fail
//!   the program's call.

use super::Runtime;
use dfsched_core::TaskId;

impl Runtime {
    /// Gives the calling thread its allowed CPUs if its mask is still this
    /// runtime's placement of it, and marks them lent (see the module doc).
    /// Whether it did: then [`Runtime::end_lend`] must follow, from this
    /// thread.
    pub(crate) fn lend_allowed(&self) -> bool {
        let inner = self.inner();
        if !inner.config.enabled || inner.is_shut_down() {
            return false;
        }
        // Unregistered threads pass through: dfsched never placed them.
        let Some(tid) = crate::thread::registered_tid(inner.id) else {
            return false;
        };
        let Ok(mut guard) = inner.lock() else {
            return false;
        };
        let st = &mut *guard;
        let Some(allowed) = st.engine.task(TaskId(tid)).map(|v| v.allowed) else {
            return false;
        };
        let Some(rec) = st.tasks.get_mut(&tid) else {
            return false;
        };
        if rec.lent.is_some() {
            // A nested call (from a signal handler): the outer one lent them.
            return false;
        }
        if !inner
            .sys
            .get_affinity(0)
            .is_ok_and(|now| now == rec.last_set)
        {
            return false;
        }
        if rec.last_set == allowed || inner.sys.set_affinity(0, &allowed).is_err() {
            return false;
        }
        rec.lent = Some(allowed);
        st.stats.spawn_lends += 1;
        true
    }

    /// Ends what [`Runtime::lend_allowed`] began: the calling thread gets
    /// the placement the runtime wants for it now, unless someone else set
    /// its mask meanwhile (see the module doc).
    pub(crate) fn end_lend(&self) {
        let inner = self.inner();
        if inner.forked() {
            // The mutex may be held by a thread this process does not have.
            return;
        }
        let Some(tid) = crate::thread::registered_tid(inner.id) else {
            return;
        };
        let Ok(mut guard) = inner.lock() else {
            return;
        };
        let st = &mut *guard;
        let shut_down = inner.is_shut_down();
        let Some(rec) = st.tasks.get_mut(&tid) else {
            return;
        };
        let Some(lent) = rec.lent.take() else {
            return;
        };
        if shut_down || !inner.sys.get_affinity(0).is_ok_and(|now| now == lent) {
            // Shut down: nothing is placed any more. Someone else's mask:
            // the next placement reads it back.
            return;
        }
        match inner.sys.set_affinity(0, &rec.last_set) {
            Ok(()) => st.stats.affinity_calls += 1,
            Err(e) => {
                // The kernel kept the allowed CPUs; the next hint retries.
                rec.last_set = lent;
                rec.stale = true;
                st.stats.affinity_failures.record(e.errno());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::RuntimeConfig;
    use crate::runtime::Runtime;
    use crate::sys;
    use dfsched_core::{CpuId, CpuSet, Decision, TaskId};
    use dfsched_premise::skip_or_fail;

    /// A runtime with no balancer, no load sampling, no idle detection, and
    /// single CPUs as homes from one runnable thread per CPU.
    fn quiet_heavy() -> RuntimeConfig {
        let mut cfg = RuntimeConfig {
            balance_interval_ms: 0,
            external_load: false,
            idle_passes: 0,
            ..RuntimeConfig::default()
        };
        cfg.engine.heavy_load_milli = 1000;
        cfg
    }

    fn set_of(cpus: &[CpuId]) -> CpuSet {
        cpus.iter().copied().collect()
    }

    /// Runs `f(c0, c1)` in a thread of its own whose mask is the first two
    /// allowed CPUs; skips with a message when fewer are allowed.
    fn with_two_cpus(test: &str, f: impl FnOnce(CpuId, CpuId) + Send + 'static) {
        let cpus: Vec<CpuId> = sys::get_affinity(0).unwrap().iter().collect();
        if cpus.len() < 2 {
            skip_or_fail(&format!(
                "SKIP {test}: needs 2 allowed CPUs, this process has {}",
                cpus.len()
            ));
            return;
        }
        let (c0, c1) = (cpus[0], cpus[1]);
        let t = std::thread::spawn(move || {
            sys::set_affinity(0, &set_of(&[c0, c1])).unwrap();
            f(c0, c1)
        });
        if let Err(panic) = t.join() {
            std::panic::resume_unwind(panic);
        }
    }

    /// Places the calling thread on one CPU (its DF's home); which one.
    fn placed_alone(rt: &Runtime) -> CpuSet {
        rt.enter(1).unwrap();
        let mask = sys::get_affinity(0).unwrap();
        assert_eq!(mask.len(), 1, "premise: DF 1's home is one CPU: {mask}");
        mask
    }

    #[test]
    fn a_placed_thread_gets_its_allowed_cpus_for_the_call_and_its_placement_after() {
        let test = "a_placed_thread_gets_its_allowed_cpus_for_the_call_and_its_placement_after";
        with_two_cpus(test, |c0, c1| {
            let rt = Runtime::start(quiet_heavy()).unwrap();
            let placed = placed_alone(&rt);
            assert!(rt.lend_allowed());
            assert_eq!(sys::get_affinity(0).unwrap(), set_of(&[c0, c1]));
            assert!(!rt.lend_allowed(), "a nested call lends nothing more");
            rt.end_lend();
            assert_eq!(sys::get_affinity(0).unwrap(), placed);
            assert_eq!(rt.stats().spawn_lends, 1);
            rt.check_invariants().unwrap();
        });
    }

    #[test]
    fn a_placement_made_during_the_call_is_the_one_set_after_it() {
        let test = "a_placement_made_during_the_call_is_the_one_set_after_it";
        with_two_cpus(test, |c0, c1| {
            let rt = Runtime::start(quiet_heavy()).unwrap();
            let placed = placed_alone(&rt);
            let other = if placed == set_of(&[c0]) { c1 } else { c0 };
            let tid = sys::gettid();
            assert!(rt.lend_allowed());
            // The balancer moves the thread while the call runs.
            let inner = rt.inner();
            let mut st = inner.lock().unwrap();
            st.decisions.push(Decision::Place {
                task: TaskId(tid),
                cpus: set_of(&[other]),
            });
            inner.apply(&mut st, None).map(Result::unwrap);
            drop(st);
            assert_eq!(
                sys::get_affinity(0).unwrap(),
                set_of(&[c0, c1]),
                "narrowed while the call runs"
            );
            rt.end_lend();
            assert_eq!(sys::get_affinity(0).unwrap(), set_of(&[other]));
            assert_eq!(rt.stats().affinity_failures.total(), 0);
        });
    }

    #[test]
    fn a_mask_set_by_someone_else_is_neither_widened_nor_overwritten() {
        let test = "a_mask_set_by_someone_else_is_neither_widened_nor_overwritten";
        with_two_cpus(test, |c0, c1| {
            let rt = Runtime::start(quiet_heavy()).unwrap();
            let placed = placed_alone(&rt);
            let other = if placed == set_of(&[c0]) { c1 } else { c0 };
            // Before the call: the program's own mask is not dfsched's.
            sys::set_affinity(0, &set_of(&[other])).unwrap();
            assert!(!rt.lend_allowed());
            assert_eq!(sys::get_affinity(0).unwrap(), set_of(&[other]));
            // During the call: left as it is at the end.
            sys::set_affinity(0, &placed).unwrap();
            assert!(rt.lend_allowed());
            sys::set_affinity(0, &set_of(&[other])).unwrap();
            rt.end_lend();
            assert_eq!(sys::get_affinity(0).unwrap(), set_of(&[other]));
        });
    }

    #[test]
    fn an_unregistered_thread_or_a_shut_down_runtime_lends_nothing() {
        let rt = Runtime::start(quiet_heavy()).unwrap();
        let before = sys::get_affinity(0).unwrap();
        assert!(!rt.lend_allowed(), "not registered");
        rt.end_lend();
        rt.shutdown();
        assert!(!rt.lend_allowed(), "shut down");
        assert_eq!(sys::get_affinity(0).unwrap(), before);
        assert_eq!(rt.stats().spawn_lends, 0);
    }
}
