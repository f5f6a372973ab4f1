//! The handful of OS calls the benchmark makes, in one place.
//!
//! The runtime crate (`dfsched`) is the project's home for FFI: its `sys`
//! and `procfs` modules own `sched_{get,set}affinity`, `sched_getcpu`,
//! `gettid` and the `/proc/thread-self/sched` reader. This module is a thin
//! adapter over them, so the rest of the benchmark names no FFI function,
//! and it turns the runtime's errors into [`OsError`] naming the call that
//! failed.
//!
//! Every function acts on the calling thread.

use dfsched_core::{CpuId, CpuSet};

/// An OS call that failed, with the call's name and the runtime's reason.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {source}")]
pub struct OsError {
    /// Which call failed (`sched_setaffinity`, `/proc/thread-self/sched`…).
    pub call: &'static str,
    /// The runtime's error.
    #[source]
    pub source: dfsched::Error,
}

/// Scheduler counters of one thread, as the kernel keeps them.
pub type ThreadSched = dfsched::procfs::ThreadSched;

/// The calling thread's kernel thread id.
pub fn gettid() -> u64 {
    dfsched::sys::gettid()
}

/// The calling thread's allowed CPUs (`sched_getaffinity`).
pub fn get_affinity() -> Result<CpuSet, OsError> {
    dfsched::sys::get_affinity(0).map_err(|source| OsError {
        call: "sched_getaffinity",
        source,
    })
}

/// Restricts the calling thread to `cpus` (`sched_setaffinity`).
pub fn set_affinity(cpus: &CpuSet) -> Result<(), OsError> {
    dfsched::sys::set_affinity(0, cpus).map_err(|source| OsError {
        call: "sched_setaffinity",
        source,
    })
}

/// The CPU the calling thread runs on right now (`sched_getcpu`).
pub fn current_cpu() -> Option<CpuId> {
    dfsched::sys::current_cpu()
}

/// The calling thread's scheduler counters (`/proc/thread-self/sched`).
pub fn thread_self_sched() -> Result<ThreadSched, OsError> {
    dfsched::procfs::thread_self_sched().map_err(|source| OsError {
        call: "/proc/thread-self/sched",
        source,
    })
}
