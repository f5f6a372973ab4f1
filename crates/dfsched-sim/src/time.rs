//! Simulated time: instants ([`SimTime`]) and durations ([`Ticks`]).
//!
//! A tick is whatever the model says it is: the machine model counts CPU
//! cycles, the closed-network model a fixed fraction of the mean demand. Time
//! is an integer so that the event order is exact and identical on every
//! machine; there is no floating-point rounding in the queue.
//!
//! Invariant: simulated time only advances through the engine (see
//! [`crate::engine`]); nothing in this crate reads a clock.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// An instant of simulated time, in ticks since the start of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct SimTime(pub u64);

/// A span of simulated time, in ticks.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Ticks(pub u64);

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The end of time: an event scheduled here never runs before any other.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub fn since(self, earlier: SimTime) -> Ticks {
        Ticks(self.0.saturating_sub(earlier.0))
    }
}

impl Ticks {
    /// No time at all.
    pub const ZERO: Ticks = Ticks(0);
}

/// Saturates at [`SimTime::MAX`] rather than wrapping: a delay that long
/// means "never" and must not jump to the past.
impl Add<Ticks> for SimTime {
    type Output = SimTime;
    #[inline]
    fn add(self, d: Ticks) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Ticks> for SimTime {
    #[inline]
    fn add_assign(&mut self, d: Ticks) {
        *self = *self + d;
    }
}

impl Sub<SimTime> for SimTime {
    type Output = Ticks;
    /// Saturating, like [`SimTime::since`].
    #[inline]
    fn sub(self, earlier: SimTime) -> Ticks {
        self.since(earlier)
    }
}

impl Add for Ticks {
    type Output = Ticks;
    #[inline]
    fn add(self, o: Ticks) -> Ticks {
        Ticks(self.0.saturating_add(o.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}", self.0)
    }
}

impl fmt::Display for Ticks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ticks", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_huge_delay_saturates_instead_of_wrapping() {
        assert_eq!(SimTime(u64::MAX - 1) + Ticks(10), SimTime::MAX);
        assert_eq!(SimTime(5) + Ticks(3), SimTime(8));
    }

    #[test]
    fn differences_never_go_negative() {
        assert_eq!(SimTime(3) - SimTime(10), Ticks::ZERO);
        assert_eq!(SimTime(10).since(SimTime(3)), Ticks(7));
    }
}
