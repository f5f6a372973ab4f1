//! dfsched-core: the policy engine of dfsched — data-affinity scheduling
//! after Pinter & Zalmanovici (§4.1), with cache domains as homes.
//!
//! The engine is pure: no I/O, no clock, no threads, no `unsafe`. A body
//! (the Linux runtime, the simulator) feeds it [`Event`]s one at a time
//! through [`Engine::handle`] and carries out the [`Decision`]s it returns.
//! The same events always give the same decisions, byte for byte.
//!
//! # Vocabulary
//!
//! - **Task** ([`TaskId`]): something the kernel schedules; on Linux a
//!   thread. It has an *allowed set* of CPUs (cpusets, `taskset`) that the
//!   engine never places it outside of.
//! - **Application** ([`AppId`]): a program that gives DF information. It
//!   owns a *DF map*: DF → the priority group(s) of that DF. `AppId(0)`
//!   always exists; others are announced with [`Event::AppNew`].
//! - **DF**, data fragment ([`DfId`]): a piece of data tasks work on
//!   together. A task says which DF it works on with the paper's hint,
//!   [`Event::Hint`] (`cur` → `next`).
//! - **Priority group** ([`GroupId`]): the tasks of one DF of one
//!   application, batched on one home. Its member count is the paper's
//!   counter: at 0 the group is reclaimed. A DF normally has one group; the
//!   balancer may split it when an imbalance persists.
//! - **Home** ([`DomainId`]): the cache domain of the [`Topology`] a group
//!   lives on — the smallest one that holds its runnable tasks at the
//!   current load, and a single CPU under heavy load, as in the paper. A
//!   task's *target* is its group's home ∩ its allowed set (its allowed set
//!   when they do not meet: "off-home"); [`Decision::Place`] is issued
//!   exactly when a target changes.
//! - **Load**: runnable tasks per CPU in thousandths ([`Engine::load_milli`]):
//!   other processes' runnable tasks ([`Event::ExternalLoad`]) × 1000, or
//!   their weighed load in thousandths ([`Event::ExternalLoadMilli`]), plus
//!   1000 per runnable engine task spread evenly over its target. Blocked
//!   tasks do not count.
//! - **Unmanaged task**: a task with no DF (it never hinted, or hinted
//!   `next = None`) under [`Policy::DataAffinity`], the default. It runs on
//!   its allowed set, unless the balancer moved it to a CPU.
//! - **Co-thread group**: under [`Policy::CoThread`] the tasks with no DF
//!   are not unmanaged: each application's form its co-thread group
//!   ([`GroupKind::CoThread`]), homed like a DF's group — one CPU under
//!   heavy load, one cache domain under light load — but starting from
//!   where its co-threads are or where the task last ran (the co-thread
//!   paper's rules 1–5, among CPUs the load allows). Tasks that hint a DF
//!   are in their DF's group under either policy.
//!
//! The procedures of §4.1 are in `procedures.rs`, the home rule in
//! `home.rs`, the co-thread rule in `cothread.rs`, the balancer
//! ([`Event::Balance`]) in `balancer.rs`, load accounting in `load.rs`;
//! each file's doc states its rules and invariants. [`rules`] lends the
//! load formula and the home rule to deciders outside the engine (the
//! `dfsched agent`), so that no rule is written twice.
//!
//! # Example
//!
//! ```
//! use dfsched_core::{AppId, Config, CpuSet, Decision, DfId, Engine, Event, TaskId, Topology};
//!
//! // A machine like this one: 2 CPUs with private L1/L2 and a shared L3.
//! let mut engine = Engine::new(Topology::test(1, 1, 2, 1), Config::default()).unwrap();
//! let all: CpuSet = "0-1".parse().unwrap();
//! let mut out = Vec::new();
//!
//! // Two threads start; they may run anywhere.
//! for t in [1, 2] {
//!     let task = TaskId(t);
//!     engine.handle(Event::TaskNew { task, app: AppId(0), allowed: all.clone(), cpu: None }, &mut out)?;
//! }
//! assert!(out.is_empty(), "a new task already runs on its allowed set");
//!
//! // Each works on its own DF: each gets a CPU of its own.
//! for (t, df) in [(1, 10), (2, 20)] {
//!     let hint = Event::Hint { task: TaskId(t), app: AppId(0), cur: None, next: Some(DfId(df)) };
//!     engine.handle(hint, &mut out)?;
//! }
//! assert_eq!(
//!     out,
//!     vec![
//!         Decision::Place { task: TaskId(1), cpus: "0".parse().unwrap() },
//!         Decision::Place { task: TaskId(2), cpus: "1".parse().unwrap() },
//!     ]
//! );
//!
//! // Thread 2 moves over to thread 1's data: it joins DF 10's group, which
//! // now needs both CPUs (light load: a CPU per runnable thread); DF 20 has
//! // no task left and its group is reclaimed.
//! out.clear();
//! let switch = Event::Hint { task: TaskId(2), app: AppId(0), cur: Some(DfId(20)), next: Some(DfId(10)) };
//! engine.handle(switch, &mut out)?;
//! assert!(matches!(out[0], Decision::GroupReclaimed { .. }));
//! assert_eq!(engine.task(TaskId(2)).unwrap().placed, Some(all.clone()));
//! assert_eq!(engine.groups().len(), 1);
//!
//! // A hint that breaks the rules is refused and changes nothing.
//! let bogus = Event::Hint { task: TaskId(1), app: AppId(0), cur: Some(DfId(99)), next: None };
//! assert!(engine.handle(bogus, &mut out).is_err());
//! engine.check_invariants().unwrap();
//! # Ok::<(), dfsched_core::CoreError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod activity;
mod balancer;
pub mod config;
mod cothread;
pub mod cpuset;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod event;
mod home;
pub mod ids;
mod load;
mod procedures;
pub mod rules;
pub mod smt_pair;
pub mod smt_place;
mod state;
pub mod topology;

pub use balancer::BalanceReport;
pub use config::{Config, ConfigError, Policy, PolicyParseError};
pub use cpuset::{CpuListError, CpuSet};
pub use engine::{Engine, GroupView, Stats, TaskView};
pub use error::CoreError;
pub use event::{Decision, Event};
pub use ids::{AppId, CpuId, DfId, DomainId, GroupId, GroupKind, Nanos, TaskId};
pub use topology::{Cache, Domain, DomainSpec, Level, Topology, TopologyError};
#[cfg(test)]
mod testutil;
