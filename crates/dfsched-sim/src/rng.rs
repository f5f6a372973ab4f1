//! The simulator's seeded random number generator.
//!
//! Every random choice of a run comes from one [`SimRng`] held in the
//! engine's state, so a run is a pure function of its inputs and its seed.
//! The generator is ChaCha8 (`rand_chacha`): its output for a given seed and
//! stream is fixed by the algorithm, not by the `rand` version, so golden
//! results survive dependency upgrades. Replications of one experiment use
//! one seed and different *streams* ([`SimRng::with_stream`]), which are
//! independent sequences rather than overlapping slices of one sequence.

use crate::time::Ticks;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded, reproducible random number generator.
#[derive(Clone, Debug)]
pub struct SimRng {
    /// The generator; never reseeded after construction.
    inner: ChaCha8Rng,
}

impl SimRng {
    /// The generator for `seed`, stream 0.
    pub fn new(seed: u64) -> Self {
        Self::with_stream(seed, 0)
    }

    /// The generator for `seed` on an independent `stream` (one per
    /// replication of an experiment, say).
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        let mut inner = ChaCha8Rng::seed_from_u64(seed);
        inner.set_stream(stream);
        SimRng { inner }
    }

    /// A uniform draw from `[0, 1)` with 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        // The top 53 bits map exactly onto the doubles of [0, 1) spaced 2^-53.
        (self.inner.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An exponential draw with the given mean (inversion: `-mean·ln(1-U)`;
    /// `1-U` lies in `(0, 1]`, so the logarithm is finite).
    #[inline]
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }

    /// An exponential duration with mean `mean_ticks`, rounded to the nearest
    /// tick. Pick the tick small enough that rounding does not matter (the
    /// closed-network model uses 10^6 ticks per unit of demand).
    #[inline]
    pub fn exponential_ticks(&mut self, mean_ticks: f64) -> Ticks {
        Ticks(self.exponential(mean_ticks).round() as u64)
    }

    /// A uniform integer in `0..n` (Lemire's method, unbiased). `n` must be
    /// at least 1.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "SimRng::below(0): the range is empty");
        // Widening multiply maps a 64-bit draw onto 0..n; redraw the few
        // values that would make some results more likely than others.
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.inner.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Whether an event of probability `p` happens.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }
}

/// Lets the `rand` crate's helpers (shuffles, ranges) draw from the
/// simulation's generator.
impl RngCore for SimRng {
    #[inline]
    fn next_u32(&mut self) -> u32 {
        self.inner.next_u32()
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.inner.fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn streams_and_seeds_differ() {
        let first = |mut r: SimRng| r.next_u64();
        assert_ne!(first(SimRng::new(1)), first(SimRng::new(2)));
        assert_ne!(
            first(SimRng::with_stream(1, 0)),
            first(SimRng::with_stream(1, 1))
        );
    }

    #[test]
    fn exponential_mean_is_close_to_the_requested_mean() {
        let mut r = SimRng::new(7);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| r.exponential(2.5)).sum::<f64>() / n as f64;
        // Standard error is 2.5/sqrt(n) ≈ 0.0056; allow six of them.
        assert!((mean - 2.5).abs() < 0.034, "mean {mean}");
    }

    #[test]
    fn below_stays_in_range_and_hits_every_value() {
        let mut r = SimRng::new(3);
        let mut seen = [0u32; 7];
        for _ in 0..7_000 {
            seen[r.below(7) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    }

    #[test]
    fn uniform_is_in_the_half_open_unit_interval() {
        let mut r = SimRng::new(9);
        for _ in 0..10_000 {
            let u = r.uniform();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
