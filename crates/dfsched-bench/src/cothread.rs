//! The runtime's co-thread policy, as the benchmarks use it: one place that
//! starts a runtime with `Policy::CoThread` and attaches a thread to it.
//!
//! The policy (paper 001 §III: a process's threads are co-threads, packed
//! on one CPU under heavy load and kept in one cache domain under light
//! load) lives in the core and the runtime; a benchmark only configures a
//! runtime with it and calls `attach()` from every thread it wants placed.
//! While the runtime lacks the policy, [`AVAILABLE`] is false, the modes
//! that need it are refused when their flags are parsed, and these functions
//! answer [`CoThreadError::Unavailable`] — never a run that pretends.

use dfsched::{Runtime, RuntimeConfig};

/// Whether this build's runtime has the co-thread policy and `attach()`.
pub const AVAILABLE: bool = false;

/// Why a co-thread runtime could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CoThreadError {
    /// The runtime has no co-thread policy in this build.
    #[error("this build's dfsched runtime has no co-thread policy (Policy::CoThread, attach)")]
    Unavailable,
    /// The runtime refused.
    #[error(transparent)]
    Runtime(#[from] dfsched::Error),
}

/// Starts a runtime from `config` with the co-thread policy.
pub fn start_runtime(config: RuntimeConfig) -> Result<Runtime, CoThreadError> {
    let _ = config;
    Err(CoThreadError::Unavailable)
}

/// Registers the calling thread with `rt` so that its policy places it.
pub fn attach(rt: &Runtime) -> Result<(), CoThreadError> {
    let _ = rt;
    Err(CoThreadError::Unavailable)
}
