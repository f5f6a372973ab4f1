//! dfsched-sim: the simulator body of dfsched, and the papers' analytic
//! models.
//!
//! Vocabulary:
//!
//! - **engine** ([`engine`], [`queue`], [`time`], [`rng`]): a deterministic
//!   discrete-event engine. A [`engine::Model`] reacts to its own events
//!   through a [`engine::Context`]; events are ordered by (time, sequence
//!   number) and the only randomness is a seeded [`rng::SimRng`], so the same
//!   model and seed give the same run, event for event.
//! - **machine** ([`cache`], [`coherence`], [`cost`], [`machine`]): CPUs with
//!   private set-associative exact-LRU caches, optional caches shared by the
//!   CPUs of a cache domain of a [`dfsched_core::Topology`], write-invalidate
//!   coherence, and the cost of every access in cycles. Misses are
//!   classified as cold, reload (another owner's data evicted the line),
//!   capacity (the owner's own data did) or coherence (another cache's write
//!   invalidated it).
//! - **smt** ([`smt`]): Kihm et al.'s SMT co-scheduling by cache activity
//!   vectors: shared-cache SMT cores, exact inter-thread kick-outs, page
//!   mapping models, synthetic and traced workloads, policies and oracles.
//! - **analytic** ([`analytic`]): Squillante & Lazowska's cache-reload model
//!   `R(I)`, the `TB_cr` table, bus interference and exact MVA of the Fixed
//!   Processor policy.
//!
//! The crate does no I/O, reads no clock and starts no thread.
//!
//! A complete example: a processor with a one-task queue, timed by the
//! engine.
//!
//! ```
//! use dfsched_sim::engine::{Context, Model, Simulation};
//! use dfsched_sim::time::{SimTime, Ticks};
//!
//! /// A task that computes for an exponential time, then thinks, forever.
//! struct OneTask { visits: u64 }
//!
//! #[derive(Clone, Copy, Debug)]
//! enum Ev { Arrive, Done }
//!
//! impl Model for OneTask {
//!     type Event = Ev;
//!     fn start(&mut self, ctx: &mut Context<'_, Ev>) {
//!         ctx.schedule_in(Ticks(0), Ev::Arrive);
//!     }
//!     fn handle(&mut self, ev: Ev, ctx: &mut Context<'_, Ev>) {
//!         let next = match ev {
//!             Ev::Arrive => Ev::Done,
//!             Ev::Done => { self.visits += 1; Ev::Arrive }
//!         };
//!         let d = ctx.rng().exponential_ticks(1000.0);
//!         ctx.schedule_in(d, next);
//!     }
//! }
//!
//! let mut sim = Simulation::new(OneTask { visits: 0 }, 42);
//! let _ = sim.run_until(SimTime(2_000_000));
//! // A visit takes 1000 ticks of service and 1000 of thinking on average.
//! assert!((900..1100).contains(&sim.model().visits));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analytic;
pub mod cache;
pub mod chat_bench;
pub mod closed_network;
pub mod coherence;
pub mod cost;
pub mod df_bench;
pub mod engine;
pub mod error;
pub mod figures;
pub mod hash;
pub mod machine;
pub mod partition;
pub mod pinter_example;
pub mod profile;
pub mod program;
pub mod queue;
pub mod replay;
pub mod rng;
pub mod smt;
pub mod time;

pub use cache::{CacheGeometry, LineAddr, MissCounts, MissKind, Owner, SetAssocCache};
pub use cost::{CostModel, Cycles};
pub use engine::{Context, EngineStats, Model, RunOutcome, Simulation};
pub use error::{ConfigError, MachineError, SimError};
pub use machine::{AccessKind, AccessOutcome, Machine, MachineConfig, Source};
pub use rng::SimRng;
pub use time::{SimTime, Ticks};
