//! What becomes of dfsched across `fork()`.
//!
//! A forked child has one thread (the one that called `fork`) and a copy of
//! the parent's memory: the runtimes' records name the parent's threads,
//! their balancer threads do not exist, and any mutex another parent thread
//! held at the fork stays locked for ever. So a runtime never serves the
//! process it was not started in:
//!
//! ```text
//!  parent                         │ child (one thread)
//!  prepare: note where the forking │ child handler (async-signal-safe only):
//!   thread may run without dfsched │  1. GENERATION += 1: every runtime of the
//!   (its allowed CPUs), if dfsched │     parent now counts as shut down here,
//!   placed it                      │     without touching its mutex
//!  ─────────── fork() ────────────►│  2. the forking thread's mask back to its
//!                                  │     allowed CPUs (one raw system call)
//!                                  │  3. the global runtime's start lock freed
//!                                  │ later, in normal context: the first
//!                                  │ dfsched call (under LD_PRELOAD: the first
//!                                  │ pthread_create) starts a fresh global
//!                                  │ runtime from the environment
//! ```
//!
//! Why not start the child's runtime in the child handler: after a fork in a
//! multi-threaded process, only async-signal-safe functions may run until
//! the child calls `exec` or goes on as a program of its own. Starting a
//! runtime allocates, reads sysfs and spawns a thread, none of which is.
//! The child handler does only atomic stores and one `sched_setaffinity`
//! system call (made with `syscall(2)`, which touches no lock). A child that
//! `exec`s gets a fresh runtime from its own constructor (under
//! `LD_PRELOAD`); one that goes on without exec runs unplaced, on its
//! allowed CPUs as it would without dfsched, until its first dfsched call or
//! thread creation.
//!
//! Invariant: [`generation`] changes only in a child handler, which runs in
//! the child's only thread before anything else in the child; so a Relaxed
//! load is enough to tell, in any thread, whether a runtime was started in
//! this process.

use dfsched_core::CpuSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Forks this process is removed from its original one: 0 in the process
/// that loaded dfsched, +1 in each child (inherited by grandchildren, which
/// add their own).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Where the prepare handler learns the forking thread's CPUs without
/// dfsched: set by the global runtime (`global.rs`, the only runtime whose
/// placement a forked child inherits unasked), so that this module needs
/// nothing above it.
static MASK_SOURCE: OnceLock<fn() -> Option<CpuSet>> = OnceLock::new();

/// Sets the prepare handler's source of the forking thread's mask without
/// dfsched (the first call wins; there is one global runtime).
pub(crate) fn set_mask_source(source: fn() -> Option<CpuSet>) {
    let _ = MASK_SOURCE.set(source);
}

/// Words of the mask the child handler restores: 1024 CPUs. A thread
/// allowed CPUs beyond that is left as it is in the child.
const MASK_WORDS: usize = 16;

/// The mask to set on the forking thread in the child, written by the
/// prepare handler (in the parent, normal context) and read by the child
/// handler. Atomics so that both are plain loads and stores.
static CHILD_MASK: [AtomicU64; MASK_WORDS] = [const { AtomicU64::new(0) }; MASK_WORDS];
/// Words of [`CHILD_MASK`] in use; 0 = leave the child's mask alone.
static CHILD_MASK_WORDS: AtomicUsize = AtomicUsize::new(0);

/// Held (true) while the global runtime of this process is being started,
/// and across a fork (prepare to parent/child handler), so a child never
/// inherits a start half done by another thread. A flag, not a mutex: the
/// child handler must be able to release it.
static START_LOCK: AtomicBool = AtomicBool::new(false);

static REGISTER: Once = Once::new();

/// This process's fork generation (see the module doc).
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// Registers the fork handlers, once per process (children inherit them).
/// A failure to register leaves forks unhandled: the child's dfsched calls
/// would then use the parent's runtime, so it is reported.
pub(crate) fn register_handlers() {
    REGISTER.call_once(|| {
        // SAFETY: the three handlers are `extern "C" fn()` that live as long
        // as the process (or this library), as pthread_atfork requires.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            tracing::warn!(
                errno = rc,
                "dfsched could not register its fork handlers; a forked child must not call dfsched"
            );
        }
    });
}

/// Takes the start lock, waiting for a start in progress in another thread.
pub(crate) fn lock_start() {
    while START_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

/// Releases the start lock.
pub(crate) fn unlock_start() {
    START_LOCK.store(false, Ordering::Release);
}

/// Notes `mask` as the forking thread's mask in the child (`None`: leave it).
fn set_child_mask(mask: Option<&CpuSet>) {
    let words = mask.map(CpuSet::as_words);
    let words: &[u64] = words.as_deref().unwrap_or(&[]);
    if words.len() > MASK_WORDS || words.iter().all(|w| *w == 0) {
        CHILD_MASK_WORDS.store(0, Ordering::Relaxed);
        return;
    }
    for (slot, w) in CHILD_MASK.iter().zip(words) {
        slot.store(*w, Ordering::Relaxed);
    }
    CHILD_MASK_WORDS.store(words.len(), Ordering::Relaxed);
}

/// In the parent before the fork: no runtime start in progress, and the
/// mask the child's thread should have.
extern "C" fn prepare() {
    lock_start();
    // Never unwind into libc: a panic here only loses the mask restore.
    let mask = MASK_SOURCE
        .get()
        .and_then(|source| std::panic::catch_unwind(*source).ok().flatten());
    set_child_mask(mask.as_ref());
}

/// In the parent after the fork.
extern "C" fn parent() {
    unlock_start();
}

/// In the child after the fork: async-signal-safe only (see the module doc).
extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    let n = CHILD_MASK_WORDS.load(Ordering::Relaxed);
    if n > 0 {
        let mut words = [0u64; MASK_WORDS];
        for (w, slot) in words.iter_mut().zip(&CHILD_MASK).take(n) {
            *w = slot.load(Ordering::Relaxed);
        }
        // SAFETY: a raw system call with a live buffer of `n` words; the
        // kernel only reads it. `syscall(2)` takes no lock, so it is safe
        // in a forked child. A failure (the parent's cpuset changed) leaves
        // the thread where it is, as without dfsched.
        unsafe {
            libc::syscall(
                libc::SYS_sched_setaffinity,
                0,
                n * std::mem::size_of::<u64>(),
                words.as_ptr(),
            );
        }
    }
    START_LOCK.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_mask_holds_a_set_and_refuses_an_empty_or_oversized_one() {
        let set: CpuSet = "1,3,70".parse().unwrap();
        set_child_mask(Some(&set));
        let n = CHILD_MASK_WORDS.load(Ordering::Relaxed);
        let words: Vec<u64> = CHILD_MASK[..n]
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        assert_eq!(CpuSet::from_words(&words), set);
        set_child_mask(None);
        assert_eq!(CHILD_MASK_WORDS.load(Ordering::Relaxed), 0);
        set_child_mask(Some(&"5000".parse().unwrap()));
        assert_eq!(CHILD_MASK_WORDS.load(Ordering::Relaxed), 0);
    }
}
