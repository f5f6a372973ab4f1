//! Squillante & Lazowska's analytic models (IEEE TPDS 1993, §III), in `f64`.
//!
//! - [`reload`]: the footprint distribution and the cache-reload miss ratio
//!   `R(I)` after `I` intervening tasks (eqs. 1–5, after Thiebaut & Stone),
//!   and the per-visit service time `D + C·R(i)` (eq. 6);
//! - [`tbcr`]: the precomputed table `TB_cr` of §VI-B that a practical
//!   scheduler indexes by footprint class and intervening tasks (or cache
//!   block replacements);
//! - [`bus`]: bus interference, the fixed point of eqs. 7–9;
//! - [`mva`]: exact Mean Value Analysis of the Fixed Processor (FP) policy's
//!   closed network, with the cache model and optionally the bus.
//!
//! Notation follows the paper: `F` footprint in cache blocks (lines), `S`
//! sets, `K` ways, `I` intervening tasks, `M` processors, `N` tasks, `D`
//! mean demand per visit, `Z` mean think (non-schedulable) time, `C` time to
//! reload a whole footprint, `f_ba` the fraction of a reload that occupies
//! the bus. Times are in one arbitrary unit (the paper normalises `D = 1`).
//!
//! Nothing here does I/O or keeps state; every function is pure.

pub mod bus;
pub mod mva;
pub mod reload;
pub mod tbcr;

/// Why an analytic model refused its parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnalyticError {
    /// A footprint of zero blocks has no reload ratio.
    #[error("the footprint must be at least one block")]
    EmptyFootprint,
    /// A cache with no sets or no ways, or absurdly many ways.
    #[error("bad cache shape: {sets} sets × {ways} ways (need ≥ 1 set and 1 to {max_ways} ways)")]
    BadCache {
        /// Sets given.
        sets: u32,
        /// Ways given.
        ways: u32,
        /// The largest associativity the models accept.
        max_ways: u32,
    },
    /// A parameter outside its domain.
    #[error("{name} = {value} is out of range: {why}")]
    OutOfRange {
        /// The parameter's name as in the paper.
        name: &'static str,
        /// The value given.
        value: f64,
        /// What it must be.
        why: &'static str,
    },
    /// A table or sweep that would be too large to compute.
    #[error("{what}: {size} is more than the limit of {limit}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// The size asked for.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A footprint class list that is empty or not strictly increasing.
    #[error("footprint classes must be a non-empty, strictly increasing list of positive sizes")]
    BadClasses,
    /// A fixed-point iteration did not settle.
    #[error("{what} did not converge in {iterations} iterations")]
    NoConvergence {
        /// Which iteration.
        what: &'static str,
        /// Iterations run.
        iterations: u32,
    },
}

/// Checks that `value` is finite and at least `min`.
pub(crate) fn check_at_least(
    name: &'static str,
    value: f64,
    min: f64,
) -> Result<(), AnalyticError> {
    if value.is_finite() && value >= min {
        Ok(())
    } else {
        Err(AnalyticError::OutOfRange {
            name,
            value,
            why: if min == 0.0 {
                "it must be finite and not negative"
            } else {
                "it must be finite and at least its minimum"
            },
        })
    }
}
