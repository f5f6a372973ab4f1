//! The process-wide default runtime behind the C ABI and the free functions.
//!
//! It starts on first use, configured from the `DFSCHED_*` environment (see
//! [`crate::config`]). The outcome is kept: if the environment is bad, every
//! later call fails with the same [`Error`] (code `DFSCHED_E_CONFIG`) and
//! nothing of it is applied; the program goes on, its threads where the
//! kernel puts them. The runtime lives until the process exits (it is
//! leaked), so its balancer thread does too.
//!
//! One global runtime per process, not per address space: a forked child
//! (see `fork.rs`) starts its own on its first call, and never touches the
//! parent's (whose mutex may be held by a thread the child does not have).
//!
//! ```text
//!  CURRENT ──► Slot { generation, outcome: Result<Runtime, Error> }   (leaked)
//!  global(): slot of this fork generation? → it : start one under the start lock
//! ```
//!
//! **Re-entry.** Starting the runtime creates threads (the sysfs reader's on
//! a machine of thousands of CPUs, the balancer), and under `LD_PRELOAD`
//! every `pthread_create` reaches `preload.rs`, which asks for the global
//! runtime. dfsched's own threads are created through
//! `thread::internal_spawn`, which the hook passes through; any other call
//! back into `global()` from the thread that is starting the runtime (it
//! holds the start lock, and the slot is not published yet) gets an
//! [`Error::Internal`] at once instead of waiting for the lock it holds
//! itself (that wait spun forever: a preloaded program on 8,192 CPUs never
//! got past its start).

use crate::config::RuntimeConfig;
use crate::error::Error;
use crate::runtime::Runtime;
use dfsched_core::CpuSet;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The global runtime of one process, and the fork generation it was
/// started in.
struct Slot {
    /// [`crate::fork::generation`] when it started.
    generation: u64,
    /// The runtime, or why it did not start.
    outcome: Result<Runtime, Error>,
}

/// The current process's slot (null before the first call). Slots are
/// leaked: one per process, and a child's replaces the parent's pointer
/// only in the child's copy of memory.
static CURRENT: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

/// This process's slot, if its global runtime was started (or failed to).
#[inline]
fn current_slot() -> Option<&'static Slot> {
    // Acquire pairs with the Release store in `start_slot`: a thread that
    // sees the pointer sees the slot's contents.
    let ptr = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null CURRENT points to a leaked Box<Slot>, never freed
    // and never written after publication.
    let slot = unsafe { ptr.as_ref() }?;
    (slot.generation == crate::fork::generation()).then_some(slot)
}

thread_local! {
    /// Set while this thread starts the global runtime (and holds the start
    /// lock): a call back into [`global`] from it then fails at once (module
    /// doc, "Re-entry").
    static STARTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is starting the global runtime.
fn starting_here() -> bool {
    STARTING.try_with(std::cell::Cell::get).unwrap_or(false)
}

#[cold]
#[inline(never)]
fn start_slot() -> &'static Slot {
    crate::fork::set_mask_source(mask_without_dfsched);
    crate::fork::register_handlers();
    crate::fork::lock_start();
    // Another thread may have started it while we waited for the lock.
    if let Some(slot) = current_slot() {
        crate::fork::unlock_start();
        return slot;
    }
    let _ = STARTING.try_with(|s| s.set(true));
    let outcome =
        std::panic::catch_unwind(|| RuntimeConfig::for_this_process().and_then(Runtime::start))
            .unwrap_or_else(|_| Err(Error::Internal("panic while starting the runtime".into())));
    let _ = STARTING.try_with(|s| s.set(false));
    match &outcome {
        Ok(rt) if rt.config().stats_path.is_some() => register_stats_at_exit(),
        Ok(_) => {}
        // Asked to log: the reason it did not start is the first thing to
        // say (no subscriber was installed, since no runtime started).
        Err(e) => {
            if std::env::var("DFSCHED_LOG")
                .is_ok_and(|v| crate::log::parse_level(&v).is_ok_and(|l| l.is_some()))
            {
                eprintln!("dfsched[{}]: not started: {e}", std::process::id());
            }
        }
    }
    let slot: &'static Slot = Box::leak(Box::new(Slot {
        generation: crate::fork::generation(),
        outcome,
    }));
    CURRENT.store(std::ptr::from_ref(slot).cast_mut(), Ordering::Release);
    crate::fork::unlock_start();
    slot
}

/// The process-wide default runtime, started on first use from the
/// environment.
#[inline]
pub fn global() -> Result<&'static Runtime, Error> {
    let slot = match current_slot() {
        Some(slot) => slot,
        None if starting_here() => {
            return Err(Error::Internal(
                "dfsched was called back while this thread starts it".into(),
            ))
        }
        None => start_slot(),
    };
    slot.outcome.as_ref().map_err(Clone::clone)
}

/// Registers [`write_stats_at_exit`] with `atexit`, once per process
/// image (a forked child inherits the registration, and the flag with it).
fn register_stats_at_exit() {
    static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: `write_stats_at_exit` is an `extern "C" fn()` that never
        // unwinds (its body is inside catch_unwind) and lives as long as
        // the process (this library is never unloaded while it runs).
        unsafe { libc::atexit(write_stats_at_exit) };
    }
}

/// At exit: the current global runtime's counters to `DFSCHED_STATS` (`%p`
/// replaced by the pid). Nothing if no runtime of this process image runs
/// (a forked child that never called dfsched); a write that fails is said
/// on stderr.
extern "C" fn write_stats_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(rt) = running() else { return };
        let Some(path) = &rt.config().stats_path else {
            return;
        };
        let path = path
            .to_string_lossy()
            .replace("%p", &std::process::id().to_string());
        let mut json = rt.stats_json();
        json.push('\n');
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!(
                "dfsched[{}]: DFSCHED_STATS: writing {path}: {e}",
                std::process::id()
            );
        }
    });
}

/// The calling thread's CPUs as they would be without dfsched, if the
/// current global runtime placed it: for the fork handler. Never starts a
/// runtime.
pub(crate) fn mask_without_dfsched() -> Option<CpuSet> {
    current_slot()?
        .outcome
        .as_ref()
        .ok()?
        .mask_without_dfsched()
}

/// The current global runtime, if it was started in this process and
/// runs; never starts one.
fn running() -> Option<&'static Runtime> {
    current_slot()?.outcome.as_ref().ok()
}

/// [`Runtime::lend_allowed`] on the current global runtime, for the
/// interposed calls that start a program: whether the calling thread got
/// its allowed CPUs (then [`end_lend`] must follow). Never starts a runtime.
pub(crate) fn lend_allowed() -> bool {
    running().is_some_and(Runtime::lend_allowed)
}

/// [`Runtime::end_lend`] on the current global runtime.
pub(crate) fn end_lend() {
    if let Some(rt) = running() {
        rt.end_lend();
    }
}

/// A thread known by `pthread` was renamed (the interposed
/// `pthread_setname_np`): the running global runtime's rules match it
/// again. Never starts a runtime.
pub(crate) fn thread_renamed(pthread: u64) {
    if let Some(rt) = running() {
        rt.thread_renamed(pthread);
    }
}

/// [`Runtime::attach`] on the global runtime.
pub fn attach() -> Result<(), Error> {
    global()?.attach()
}

/// [`Runtime::hint`] on the global runtime.
pub fn hint(app: u64, cur_df: u64, next_df: u64) -> Result<(), Error> {
    global()?.hint(app, cur_df, next_df)
}

/// [`Runtime::enter`] on the global runtime.
pub fn enter(df: u64) -> Result<(), Error> {
    global()?.enter(df)
}

/// [`Runtime::df_size`] on the global runtime.
pub fn df_size(df: u64, bytes: u64) -> Result<(), Error> {
    global()?.df_size(df, bytes)
}

/// [`Runtime::leave`] on the global runtime.
pub fn leave() -> Result<(), Error> {
    global()?.leave()
}

/// [`Runtime::create_app`] on the global runtime.
pub fn create_app() -> Result<u64, Error> {
    global()?.create_app()
}

/// [`Runtime::balance_now`] on the global runtime.
pub fn balance_now() -> Result<(), Error> {
    global()?.balance_now()
}

/// [`Runtime::stats_json`] of the global runtime, or `{"error": "…"}` if it
/// could not start.
pub fn stats_json() -> String {
    match global() {
        Ok(rt) => rt.stats_json(),
        Err(e) => serde_json::json!({
            "error": e.to_string(),
            "code": e.code(),
            "preload_attach_failures": crate::stats::preload_attach_failures(),
        })
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread starting the runtime holds the start lock; a call back into
    /// `global()` from it (a `pthread_create` of dfsched's that the preload
    /// hook saw as the program's) must fail at once, not wait for the lock it
    /// holds itself. Without the check this waits for ever: the test then
    /// fails on its 10 s bound (the spinning thread is left behind).
    #[test]
    fn a_call_back_from_the_starting_thread_fails_at_once_instead_of_waiting_for_itself() {
        assert!(
            current_slot().is_none(),
            "premise: no unit test of this crate starts the global runtime"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // As `start_slot` is while `Runtime::start` runs.
            crate::fork::lock_start();
            STARTING.with(|s| s.set(true));
            let got = global().map(|_| ());
            STARTING.with(|s| s.set(false));
            crate::fork::unlock_start();
            let _ = tx.send(got);
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("global() from the starting thread returned within 10 s");
        assert!(
            matches!(&got, Err(Error::Internal(m)) if m.contains("called back")),
            "{got:?}"
        );
        assert!(current_slot().is_none(), "nothing was started");
    }
}
