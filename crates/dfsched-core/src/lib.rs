//! dfsched-core: the policy engine of dfsched.
//!
//! CONTRACT SKELETON: the crate doc is written with the engine.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod balancer;
pub mod config;
pub mod cpuset;
pub mod engine;
pub mod error;
pub mod event;
mod home;
pub mod ids;
mod load;
mod procedures;
mod state;
pub mod topology;

pub use balancer::BalanceReport;
pub use config::{Config, ConfigError};
pub use cpuset::{CpuListError, CpuSet};
pub use engine::{Engine, GroupView, Stats, TaskView};
pub use error::CoreError;
pub use event::{Decision, Event};
pub use ids::{AppId, CpuId, DfId, DomainId, GroupId, Nanos, TaskId};
pub use topology::{Cache, Domain, DomainSpec, Level, Topology, TopologyError};
#[cfg(test)]
mod testutil;
