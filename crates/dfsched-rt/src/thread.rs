//! The calling thread's dfsched state: which runtimes it is registered with,
//! under which application, in which DF, and the slot where it counts its
//! fast-path hints.
//!
//! ```text
//!   thread-local THREAD ──► [Registration { runtime_id, app, df, fast, Weak<dyn Runtime> }, …]
//!                                   │                                  │
//!        fast path: compare (runtime_id, app, df), bump `fast`          │
//!        thread exit: Drop ─► for each live runtime: ExitListener::thread_exited(tid)
//! ```
//!
//! Invariants:
//! - a thread has at most one registration per runtime, and it exists
//!   exactly while that runtime's engine knows the thread (registration and
//!   engine change together under the runtime's mutex, except when the
//!   runtime dropped a thread it found gone: the stale registration is then
//!   forgotten on the thread's next slow-path call);
//! - `df` (in the slot shared with the runtime) is the DF the engine has
//!   for the thread: only the thread's own hints and a rule naming its DF
//!   (`runtime/rules.rs`, under the runtime's mutex) change it (balancer
//!   moves and splits keep the DF);
//! - nothing here panics: the thread-local may already be destroyed (hints
//!   from other thread-local destructors), which callers see as
//!   [`Error::ThreadExiting`], and the exit hook swallows every failure, as a
//!   panic in a thread-local destructor would abort the process.

use crate::error::Error;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A thread's slot shared with the runtime: its fast-path hint count (a
/// single writer, the thread) and its current DF (written under the
/// runtime's mutex, by the thread's own hints or by a rule that names the
/// thread's DF from another thread: `runtime/rules.rs`).
#[derive(Debug, Default)]
pub(crate) struct FastCounter {
    /// Fast-path hints.
    count: AtomicU64,
    /// The DF the engine has for the thread; 0 = none.
    df: AtomicU64,
}

impl FastCounter {
    /// Adds one. Only the owning thread calls this, so a plain load and
    /// store suffice (no locked read-modify-write on the fast path);
    /// `Relaxed` is enough because readers only need some recent value.
    #[inline]
    pub(crate) fn bump(&self) {
        self.count
            .store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The current count.
    pub(crate) fn get(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The thread's DF (0 = none). `Relaxed`: a rule's change made from
    /// another thread is seen at the thread's next hint at the latest
    /// through the mutex; a fast-path hint racing with it is the program's
    /// own word against the rule's, and either order is a valid one.
    #[inline]
    pub(crate) fn df(&self) -> u64 {
        self.df.load(Ordering::Relaxed)
    }

    /// Sets the thread's DF (under the runtime's mutex).
    pub(crate) fn set_df(&self, df: u64) {
        self.df.store(df, Ordering::Relaxed);
    }
}

/// What a runtime hears from this module: a registered thread's exit. A
/// trait, so that the thread-local state needs nothing of the runtime
/// above it.
pub(crate) trait ExitListener: Send + Sync {
    /// The registered thread `tid` is exiting (its thread-local destructor
    /// runs). Must not panic; a panic is caught and swallowed.
    fn thread_exited(&self, tid: u64);
}

/// The thread's membership in one runtime.
struct Registration {
    /// The runtime's id; ids are never reused.
    runtime_id: u64,
    /// The runtime, to tell it of our exit if it still exists.
    runtime: Weak<dyn ExitListener>,
    /// The thread id the runtime knows us by.
    tid: u64,
    /// Our application.
    app: u64,
    /// Our fast-path hint count; the runtime holds the other reference.
    fast: Arc<FastCounter>,
}

#[derive(Default)]
struct ThreadState {
    regs: RefCell<Vec<Registration>>,
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let regs = std::mem::take(self.regs.get_mut());
        for reg in regs {
            let Some(inner) = reg.runtime.upgrade() else {
                continue;
            };
            // A panic must not escape a thread-local destructor (that aborts
            // the process); the runtime's mutex is then poisoned and later
            // calls report it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                inner.thread_exited(reg.tid);
            }));
        }
    }
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState { regs: RefCell::new(Vec::new()) }
    };
}

/// What the fast path found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fast {
    /// The hint repeats the thread's DF: done, counted.
    Hit,
    /// The slow path must run, with these resolved arguments.
    Miss {
        /// The application (the thread's own if the caller gave none).
        app: u64,
        /// The DF being left (the thread's current one if the caller gave
        /// none).
        cur: u64,
        /// The thread id the runtime knows the thread by, if it is
        /// registered with this runtime: cached at registration, so the slow
        /// path makes no `gettid` system call.
        tid: Option<u64>,
    },
}

/// The fast path: if the thread is registered with runtime `runtime_id`
/// under `app`, in DF `cur`, and `next == cur`, counts the hint and returns
/// [`Fast::Hit`]. `app`/`cur` of `None` mean "the thread's own" (0 for an
/// unregistered thread). No lock, no system call, no allocation.
#[inline]
pub(crate) fn fast_path(
    runtime_id: u64,
    app: Option<u64>,
    cur: Option<u64>,
    next: u64,
) -> Result<Fast, Error> {
    THREAD
        .try_with(|t| {
            let Ok(regs) = t.regs.try_borrow() else {
                return Err(Error::Internal("thread state re-entered".into()));
            };
            let Some(reg) = regs.iter().find(|r| r.runtime_id == runtime_id) else {
                return Ok(Fast::Miss {
                    app: app.unwrap_or(0),
                    cur: cur.unwrap_or(0),
                    tid: None,
                });
            };
            let app = app.unwrap_or(reg.app);
            let df = reg.fast.df();
            let cur = cur.unwrap_or(df);
            if app == reg.app && cur == df && next == cur {
                reg.fast.bump();
                return Ok(Fast::Hit);
            }
            Ok(Fast::Miss {
                app,
                cur,
                tid: Some(reg.tid),
            })
        })
        .unwrap_or(Err(Error::ThreadExiting))
}

/// Records that the calling thread (`tid`) is now registered with the
/// runtime `runtime_id` (`runtime` hears of its exit) under `app`, with no
/// DF. Forgets registrations of dropped runtimes.
pub(crate) fn register(
    runtime_id: u64,
    runtime: Weak<dyn ExitListener>,
    tid: u64,
    app: u64,
    fast: Arc<FastCounter>,
) -> Result<(), Error> {
    with_regs(|regs| {
        regs.retain(|r| r.runtime.strong_count() > 0 && r.runtime_id != runtime_id);
        regs.push(Registration {
            runtime_id,
            runtime,
            tid,
            app,
            fast,
        });
    })
}

/// Sets the calling thread's DF in runtime `runtime_id`.
pub(crate) fn set_df(runtime_id: u64, df: u64) -> Result<(), Error> {
    with_regs(|regs| {
        if let Some(r) = regs.iter_mut().find(|r| r.runtime_id == runtime_id) {
            r.fast.set_df(df);
        }
    })
}

/// Forgets the calling thread's registration with runtime `runtime_id`
/// (the runtime dropped it).
pub(crate) fn forget(runtime_id: u64) -> Result<(), Error> {
    with_regs(|regs| regs.retain(|r| r.runtime_id != runtime_id))
}

/// Whether the calling thread is registered with runtime `runtime_id`;
/// [`Error::ThreadExiting`] if its thread-local state is gone. No lock.
pub(crate) fn is_registered(runtime_id: u64) -> Result<bool, Error> {
    THREAD
        .try_with(|t| {
            let regs = t
                .regs
                .try_borrow()
                .map_err(|_| Error::Internal("thread state re-entered".into()))?;
            Ok(regs.iter().any(|r| r.runtime_id == runtime_id))
        })
        .unwrap_or(Err(Error::ThreadExiting))
}

/// The calling thread's `(app, df)` in runtime `runtime_id`, if registered.
pub(crate) fn current(runtime_id: u64) -> Option<(u64, u64)> {
    THREAD
        .try_with(|t| {
            let regs = t.regs.try_borrow().ok()?;
            regs.iter()
                .find(|r| r.runtime_id == runtime_id)
                .map(|r| (r.app, r.fast.df()))
        })
        .ok()
        .flatten()
}

/// The thread id runtime `runtime_id` knows the calling thread by, if it is
/// registered with it. Read from the thread-local registration, not from
/// `gettid`: in the child of a `vfork` (which runs on its parent thread's
/// thread-local storage until it execs) this is still the parent thread's
/// id, the one whose placement the child inherited. No lock.
pub(crate) fn registered_tid(runtime_id: u64) -> Option<u64> {
    THREAD
        .try_with(|t| {
            let regs = t.regs.try_borrow().ok()?;
            regs.iter()
                .find(|r| r.runtime_id == runtime_id)
                .map(|r| r.tid)
        })
        .ok()
        .flatten()
}

fn with_regs<R>(f: impl FnOnce(&mut Vec<Registration>) -> R) -> Result<R, Error> {
    THREAD
        .try_with(|t| {
            let mut regs = t
                .regs
                .try_borrow_mut()
                .map_err(|_| Error::Internal("thread state re-entered".into()))?;
            Ok(f(&mut regs))
        })
        .unwrap_or(Err(Error::ThreadExiting))
}

thread_local! {
    /// Set while dfsched itself creates a thread (the balancer), so that
    /// the `pthread_create` hook under `LD_PRELOAD` does not attach it.
    static INTERNAL_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (which creates dfsched's own thread) so that the thread is not
/// attached to a runtime as one of the program's.
pub(crate) fn internal_spawn<R>(f: impl FnOnce() -> R) -> R {
    let _ = INTERNAL_SPAWN.try_with(|s| s.set(true));
    let r = f();
    let _ = INTERNAL_SPAWN.try_with(|s| s.set(false));
    r
}

/// Whether the calling thread is inside [`internal_spawn`].
pub(crate) fn spawning_internally() -> bool {
    INTERNAL_SPAWN
        .try_with(std::cell::Cell::get)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_counter_counts() {
        let c = FastCounter::default();
        for _ in 0..5 {
            c.bump();
        }
        assert_eq!(c.get(), 5);
    }

    #[test]
    fn an_unregistered_thread_misses_with_defaults() {
        let got = std::thread::spawn(|| fast_path(u64::MAX, None, None, 3))
            .join()
            .unwrap();
        assert_eq!(
            got,
            Ok(Fast::Miss {
                app: 0,
                cur: 0,
                tid: None
            })
        );
        assert_eq!(current(u64::MAX), None);
    }
}
