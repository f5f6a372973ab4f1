//! SMT co-scheduling by cache activity vectors (Kihm, Settle, Janiszewski
//! & Connors): SMT cores whose hardware contexts share an L1 and an L2,
//! inter-thread kick-outs counted exactly, activity vectors kept from the
//! simulated accesses, and the paper's pairing policy beside baselines and
//! oracles.
//!
//! - [`cache`]: the owner-tagged LRU cache that counts ITKO.
//! - [`mapping`]: virtual → physical page models (the L2 is physically
//!   indexed; the paper's vectors were virtual).
//! - [`workload`]: synthetic kernels (complementary, uniform, phased,
//!   mixes) and looped traces.
//! - [`config`]: the machine (Table 1 by default) and every model choice.
//! - [`run`]: one policy's run, quantum by quantum.
//! - [`metrics`]: what a run measures, and the alone reference of relative
//!   throughput.
//! - [`profile`]: per-thread activity profiles from Valgrind (`dfsched
//!   profile`, for the `smt-pair` runtime placement).
//! - [`trace`]: Valgrind lackey text → a compact binary trace → accesses.
//! - [`compare`]: several policies on one workload, with the exhaustive
//!   best static pairing.
//! - [`grid`]: the paper's 16 mixes of 4 programs: which mixes, and the
//!   acceptance's summary of their comparisons.
//!
//! The choices the paper leaves open or contradicts are listed in
//! `docs/kihm.md` at the repository's root.
//!
//! ```
//! use dfsched_sim::smt::{compare::{compare, PolicyChoice}, config::SmtConfig, workload};
//!
//! let cfg = SmtConfig { quanta: 6, ..SmtConfig::quarter() };
//! let shape = workload::KernelShape {
//!     layout: workload::Layout { way_bytes: 16 << 10, super_sets: 32, line_bytes: 128 },
//!     l2_ways: 8,
//!     ws_fraction_of_slice: 0.75,
//!     instrs_per_access: 4,
//!     phase_accesses: 10_000,
//! };
//! let w = workload::complementary(&shape, 4, 2, 1);
//! let c = compare(&cfg, &w, &[PolicyChoice::Kihm, PolicyChoice::RoundRobin], |_| {}).unwrap();
//! assert!(c.policies["kihm"].itko <= c.policies["round-robin"].itko);
//! ```

pub mod cache;
pub mod compare;
pub mod config;
pub mod grid;
pub mod mapping;
pub mod metrics;
pub mod profile;
pub mod run;
pub mod trace;
pub mod workload;
