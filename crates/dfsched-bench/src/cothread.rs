//! The runtime's co-thread policy, as the benchmarks use it: one place that
//! starts a runtime with `Policy::CoThread` and attaches a thread to it.
//!
//! The policy (paper 001 §III: a process's threads are co-threads, packed
//! on one CPU under heavy load and kept in one cache domain under light
//! load) lives in the core and the runtime; a benchmark only configures a
//! runtime with it and calls `attach()` from every thread it wants placed.
//! In the runtime one process is one application, so all the threads a
//! benchmark attaches form one co-thread group.

use dfsched::{Runtime, RuntimeConfig};
use dfsched_core::Policy;

/// Why a co-thread runtime could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CoThreadError {
    /// The runtime refused.
    #[error(transparent)]
    Runtime(#[from] dfsched::Error),
}

/// Starts a runtime from `config` (`DFSCHED_*`) with the co-thread policy,
/// whatever `DFSCHED_POLICY` said.
pub fn start_runtime(mut config: RuntimeConfig) -> Result<Runtime, CoThreadError> {
    config.policy = Policy::CoThread;
    Ok(Runtime::start(config)?)
}

/// Registers the calling thread with `rt` so that its policy places it.
pub fn attach(rt: &Runtime) -> Result<(), CoThreadError> {
    Ok(rt.attach()?)
}
