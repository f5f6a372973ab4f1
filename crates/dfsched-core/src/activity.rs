//! Cache activity vectors (Kihm, Settle, Janiszewski & Connors, §3).
//!
//! A cache is cut into *super-sets*, runs of consecutive sets of equal
//! length (the paper uses 32). For each hardware context an *activity
//! counter* per super-set counts the accesses (or misses) the context makes
//! there during one scheduling interval; the counters are reduced to a few
//! bits each and concatenated into the context's *activity vector*, which
//! the operating system saves as the vector of the thread that ran there.
//!
//! ```text
//!   interval's events ─► ActivityCounters [c0 c1 … c31]   (saturating u32)
//!                              │ quantize(bits, Threshold)
//!                              ▼
//!                        ActivityVector   [l0 l1 … l31]   (0 ..= 2^bits − 1)
//!                              │ overlap(other, Overlap)
//!                              ▼
//!                 super-sets both threads are busy in     (0.0 ..= 32.0)
//! ```
//!
//! # Quantization: the top `bits` bits of a saturating counter
//!
//! The hardware of Fig. 8 increments a saturating counter and hands the OS
//! its high-order bits. A [`Threshold`] says what the top bit is worth: a
//! count of `T` or more sets it. With `b` bits the counter saturates at
//! `2T − 1` and the level is
//!
//! ```text
//!   level = min(2^b − 1, ⌊count · 2^(b−1) / T⌋)
//! ```
//!
//! so one bit is "hot when `count ≥ T`" (the paper's Linux rule: "a bit is
//! set if the corresponding counter exceeds a threshold"), and more bits
//! subdivide the same range `[0, 2T)` more finely rather than extend it,
//! which is what "precision" means in §5.2. Worked numbers, `T = 128`:
//! a count of 100 is level 0 at 1 bit, 1 at 2 bits (`⌊100·2/128⌋`), 6 at 4
//! bits (`⌊100·8/128⌋`) and 100 at 8 bits; a count of 300 saturates every
//! width (1, 3, 15, 255).
//!
//! The paper gives no value for `T`. Three rules are offered:
//! - [`Threshold::Absolute`]: `T` events per interval. Intensity is kept: a
//!   thread that barely touches the cache has no hot super-set, so it pairs
//!   well with anything. The simulator's default is `T` = the lines one
//!   super-set holds ("the thread touched as many lines there as the region
//!   has room for").
//! - [`Threshold::OfMean`]: `T` = a percentage of the interval's mean count
//!   per super-set. Scale-free (no tuning to the interval length), but a
//!   nearly idle thread looks as hot as a busy one.
//! - [`Threshold::Majority`]: `T` = the count of the last of the busiest
//!   super-sets that together hold a percentage of the interval's events
//!   (§2.1's "hot": the regions that hold the majority of the accesses).
//!   Scale-free too.
//!
//! # Overlap
//!
//! The paper scores a candidate by `popcount(AV & AV_sibling)`: the
//! super-sets where both are hot. With more than one bit "AND" is not
//! defined by the text; [`Overlap`] offers the minimum of the two levels
//! (the default: §5.1 finds the less active thread's activity the better
//! predictor of interference), their product, and the literal bitwise AND of
//! the concatenated counters. Every kind is normalised to units of whole
//! super-sets, so at one bit all three are `popcount(AV & AV_sibling)` and a
//! scheduler's weights mean the same at every precision.
//!
//! Invariants: a vector's levels are all `≤ 2^bits − 1`; `1 ≤ bits ≤ 8`;
//! overlap is symmetric and lies in `[0, super_sets]`.

use serde::{Deserialize, Serialize};

/// The number of super-sets the paper uses at every cache level.
pub const PAPER_SUPER_SETS: usize = 32;

/// The widest level supported (the paper studies 1 to 5 bits).
pub const MAX_BITS: u8 = 8;

/// Why an activity vector or a quantization was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivityError {
    /// Bits per super-set outside `1..=8`.
    #[error("{0} bits per super-set: it must be 1 to {MAX_BITS}")]
    BadBits(u8),
    /// A threshold of zero events (or zero percent).
    #[error("a threshold must be at least 1")]
    ZeroThreshold,
    /// A majority threshold above 100 % of the events.
    #[error("a majority of {0} % of the events: it must be 1 to 100")]
    MajorityOver100(u32),
    /// A level above `2^bits − 1`.
    #[error("level {level} does not fit in {bits} bits")]
    LevelTooHigh {
        /// The level.
        level: u8,
        /// The width.
        bits: u8,
    },
    /// Two vectors of different shapes were compared.
    #[error("vectors of {a} and {b} super-sets (or different widths) cannot be compared")]
    ShapeMismatch {
        /// Super-sets of the first.
        a: usize,
        /// Super-sets of the second.
        b: usize,
    },
    /// A permutation that is not one of `0..super_sets`.
    #[error("not a permutation of the {0} super-sets")]
    BadPermutation(usize),
}

/// What the top bit of an activity counter is worth; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Threshold {
    /// Hot at `hot` events or more per interval.
    Absolute {
        /// Events per interval that set the top bit.
        hot: u32,
    },
    /// Hot at `percent` % of the interval's mean count per super-set or
    /// more (100: busier than an even spread would be).
    OfMean {
        /// Percent of the mean that sets the top bit.
        percent: u32,
    },
    /// Hot in the busiest super-sets that together hold `percent` % of the
    /// interval's events: `T` is the count of the last super-set needed,
    /// busiest first (ties at `T` are hot too). The paper's own word for
    /// "hot" (§2.1: regions that "account for the majority of an
    /// application's cache accesses").
    Majority {
        /// Percent of the interval's events the hot super-sets hold, 1 to
        /// 100.
        percent: u32,
    },
}

/// How two vectors' overlap is measured; see the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// `Σ min(a, b) / max_level`: the less active thread's activity.
    #[default]
    Min,
    /// `Σ a·b / max_level²`.
    Product,
    /// `Σ popcount(a & b) / bits`: the literal AND of the concatenated
    /// counters.
    BitAnd,
}

/// One interval's activity counters of one context at one cache level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityCounters {
    /// Events per super-set; saturating.
    counts: Vec<u32>,
}

impl ActivityCounters {
    /// Zeroed counters for `super_sets` super-sets.
    pub fn new(super_sets: usize) -> Self {
        ActivityCounters {
            counts: vec![0; super_sets],
        }
    }

    /// Counts one event in `super_set` (saturating, as the hardware's adder).
    /// Panics if `super_set` is out of range: the body computes it from a
    /// set index it owns, so that is a bug, not an input.
    #[inline]
    pub fn record(&mut self, super_set: usize) {
        let c = &mut self.counts[super_set];
        *c = c.saturating_add(1);
    }

    /// Zeroes every counter (the start of an interval).
    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
    }

    /// The counts, super-set by super-set.
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// All events of the interval.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// The count of the last super-set, busiest first, that brings the
    /// busiest ones to `percent` % of the events (0 for an idle interval).
    fn majority_count(&self, percent: u32) -> u32 {
        busiest_holding(&self.counts, percent).map_or(0, |(_, last)| last)
    }

    /// The interval's activity vector at `bits` bits per super-set.
    pub fn vector(&self, bits: u8, threshold: Threshold) -> Result<ActivityVector, ActivityError> {
        check_bits(bits)?;
        let max = max_level(bits);
        let half = 1u128 << (bits - 1);
        let s = self.counts.len() as u128;
        // level = ⌊count · 2^(b−1) / T⌋ with T = num/den, computed exactly.
        let (num, den): (u128, u128) = match threshold {
            Threshold::Absolute { hot: 0 }
            | Threshold::OfMean { percent: 0 }
            | Threshold::Majority { percent: 0 } => return Err(ActivityError::ZeroThreshold),
            Threshold::Majority { percent } if percent > 100 => {
                return Err(ActivityError::MajorityOver100(percent))
            }
            Threshold::Absolute { hot } => (u128::from(hot), 1),
            // T = percent/100 · total/S.
            Threshold::OfMean { percent } => {
                (u128::from(percent) * u128::from(self.total()), 100 * s)
            }
            Threshold::Majority { percent } => (u128::from(self.majority_count(percent)), 1),
        };
        let levels = self
            .counts
            .iter()
            .map(|&c| {
                if num == 0 {
                    // An idle interval under OfMean or Majority: nothing
                    // is hot.
                    return 0;
                }
                let l = u128::from(c) * half * den / num;
                l.min(u128::from(max)) as u8
            })
            .collect();
        Ok(ActivityVector { bits, levels })
    }
}

/// The fewest of the busiest super-sets (counts per super-set, busiest
/// first) that hold `percent` % of all the events, as how many they are and
/// the count of the last of them; `None` when there is no event. The
/// [`Threshold::Majority`] rule, and the paper's Fig. 2 classes ("60 % or
/// more of the accesses in one half or one eighth of the cache").
pub fn busiest_holding(counts: &[u32], percent: u32) -> Option<(usize, u32)> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return None;
    }
    let mut sorted = counts.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut held = 0u64;
    for (i, c) in sorted.into_iter().enumerate() {
        held += u64::from(c);
        // held / total ≥ percent / 100, exactly.
        if 100 * held >= u64::from(percent) * total {
            return Some((i + 1, c));
        }
    }
    // Only a percent above 100: not even all of them hold it.
    None
}

/// A thread's activity levels over the super-sets of one cache level.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActivityVector {
    /// Bits per super-set, 1 to [`MAX_BITS`].
    bits: u8,
    /// Level per super-set, each `≤ 2^bits − 1`.
    levels: Vec<u8>,
}

/// `2^bits − 1`.
#[inline]
pub fn max_level(bits: u8) -> u8 {
    ((1u16 << bits) - 1) as u8
}

fn check_bits(bits: u8) -> Result<(), ActivityError> {
    if (1..=MAX_BITS).contains(&bits) {
        Ok(())
    } else {
        Err(ActivityError::BadBits(bits))
    }
}

impl ActivityVector {
    /// A vector from explicit levels.
    pub fn new(bits: u8, levels: Vec<u8>) -> Result<Self, ActivityError> {
        check_bits(bits)?;
        let max = max_level(bits);
        if let Some(&level) = levels.iter().find(|&&l| l > max) {
            return Err(ActivityError::LevelTooHigh { level, bits });
        }
        Ok(ActivityVector { bits, levels })
    }

    /// A vector with nothing hot (a thread never seen running).
    pub fn idle(bits: u8, super_sets: usize) -> Result<Self, ActivityError> {
        Self::new(bits, vec![0; super_sets])
    }

    /// A one-bit vector from a mask: bit `i` set = super-set `i` hot (the
    /// paper's register form; at most 64 super-sets).
    pub fn from_mask(mask: u64, super_sets: usize) -> Self {
        let levels = (0..super_sets.min(64))
            .map(|i| ((mask >> i) & 1) as u8)
            .collect();
        ActivityVector { bits: 1, levels }
    }

    /// Bits per super-set.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// Level per super-set.
    pub fn levels(&self) -> &[u8] {
        &self.levels
    }

    /// The number of super-sets.
    pub fn super_sets(&self) -> usize {
        self.levels.len()
    }

    /// Activity in units of fully hot super-sets: `Σ level / max_level`
    /// (the popcount at one bit). What an intensity-only scheduler sees.
    pub fn intensity(&self) -> f64 {
        let sum: u32 = self.levels.iter().map(|&l| u32::from(l)).sum();
        f64::from(sum) / f64::from(max_level(self.bits))
    }

    /// The overlap with `other`, in units of whole super-sets; see the
    /// module doc. Both must have the same shape.
    pub fn overlap(&self, other: &ActivityVector, kind: Overlap) -> Result<f64, ActivityError> {
        if self.bits != other.bits || self.levels.len() != other.levels.len() {
            return Err(ActivityError::ShapeMismatch {
                a: self.levels.len(),
                b: other.levels.len(),
            });
        }
        let max = u32::from(max_level(self.bits));
        let pairs = self.levels.iter().zip(&other.levels);
        let (sum, unit): (u32, u32) = match kind {
            Overlap::Min => (pairs.map(|(&a, &b)| u32::from(a.min(b))).sum(), max),
            Overlap::Product => (
                pairs.map(|(&a, &b)| u32::from(a) * u32::from(b)).sum(),
                max * max,
            ),
            Overlap::BitAnd => (
                pairs.map(|(&a, &b)| (a & b).count_ones()).sum(),
                u32::from(self.bits),
            ),
        };
        Ok(f64::from(sum) / f64::from(unit))
    }

    /// This vector with super-set `i` moved to position `perm[i]`: the
    /// "shuffled vectors" control keeps each thread's intensity and destroys
    /// where its activity lies.
    pub fn permuted(&self, perm: &[usize]) -> Result<ActivityVector, ActivityError> {
        let n = self.levels.len();
        let mut seen = vec![false; n];
        if perm.len() != n
            || perm
                .iter()
                .any(|&p| p >= n || std::mem::replace(&mut seen[p], true))
        {
            return Err(ActivityError::BadPermutation(n));
        }
        let mut levels = vec![0; n];
        for (i, &p) in perm.iter().enumerate() {
            levels[p] = self.levels[i];
        }
        Ok(ActivityVector {
            bits: self.bits,
            levels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counters(counts: &[u32]) -> ActivityCounters {
        ActivityCounters {
            counts: counts.to_vec(),
        }
    }

    #[test]
    fn worked_numbers_of_the_module_doc() {
        let t = Threshold::Absolute { hot: 128 };
        let c = counters(&[100, 300, 0, 128]);
        let at = |b| c.vector(b, t).unwrap().levels().to_vec();
        assert_eq!(at(1), vec![0, 1, 0, 1]);
        assert_eq!(at(2), vec![1, 3, 0, 2]);
        assert_eq!(at(4), vec![6, 15, 0, 8]);
        assert_eq!(at(8), vec![100, 255, 0, 128]);
    }

    #[test]
    fn of_mean_marks_super_sets_busier_than_an_even_spread() {
        // Mean 25: only the 70 and the 30 are at or above it.
        let c = counters(&[70, 30, 0, 0]);
        let v = c.vector(1, Threshold::OfMean { percent: 100 }).unwrap();
        assert_eq!(v.levels(), &[1, 1, 0, 0]);
        // An idle interval has nothing hot rather than dividing by zero.
        let idle = counters(&[0; 4]);
        let v = idle.vector(3, Threshold::OfMean { percent: 100 }).unwrap();
        assert_eq!(v.levels(), &[0; 4]);
    }

    #[test]
    fn counters_saturate_and_clear() {
        let mut c = ActivityCounters::new(2);
        c.counts[1] = u32::MAX;
        c.record(1);
        c.record(0);
        assert_eq!(c.counts(), &[1, u32::MAX]);
        c.clear();
        assert_eq!(c.total(), 0);
    }

    #[test]
    fn refuses_bad_bits_thresholds_levels_shapes_and_permutations() {
        let c = ActivityCounters::new(4);
        assert_eq!(
            c.vector(0, Threshold::Absolute { hot: 1 }),
            Err(ActivityError::BadBits(0))
        );
        assert_eq!(
            c.vector(9, Threshold::Absolute { hot: 1 }),
            Err(ActivityError::BadBits(9))
        );
        assert_eq!(
            c.vector(1, Threshold::Absolute { hot: 0 }),
            Err(ActivityError::ZeroThreshold)
        );
        assert_eq!(
            c.vector(1, Threshold::Majority { percent: 0 }),
            Err(ActivityError::ZeroThreshold)
        );
        assert_eq!(
            c.vector(1, Threshold::Majority { percent: 101 }),
            Err(ActivityError::MajorityOver100(101))
        );
        assert!(ActivityVector::new(2, vec![4]).is_err());
        let a = ActivityVector::from_mask(0b11, 4);
        let b = ActivityVector::from_mask(0b11, 5);
        assert!(a.overlap(&b, Overlap::Min).is_err());
        assert!(a.permuted(&[0, 0, 1, 2]).is_err());
        assert!(a.permuted(&[0, 1, 2]).is_err());
    }

    /// Worked numbers: 60 % of 100 events are held by the busiest two
    /// super-sets (40 + 20), so the threshold is 20 and a super-set with as
    /// many is hot too; at two bits 40 saturates and 10 is level 1
    /// (`⌊10·2/20⌋`).
    #[test]
    fn majority_marks_the_busiest_super_sets_that_hold_the_share() {
        let c = counters(&[40, 20, 20, 10, 10, 0]);
        let t = Threshold::Majority { percent: 60 };
        assert_eq!(c.vector(1, t).unwrap().levels(), &[1, 1, 1, 0, 0, 0]);
        assert_eq!(c.vector(2, t).unwrap().levels(), &[3, 2, 2, 1, 1, 0]);
        let all = Threshold::Majority { percent: 100 };
        assert_eq!(c.vector(1, all).unwrap().levels(), &[1, 1, 1, 1, 1, 0]);
        let idle = counters(&[0, 0, 0]);
        assert_eq!(idle.vector(1, t).unwrap().levels(), &[0, 0, 0]);
    }

    #[test]
    fn one_bit_overlap_is_popcount_of_and() {
        let a = ActivityVector::from_mask(0b1011_0110, 32);
        let b = ActivityVector::from_mask(0b0110_0111, 32);
        let want = f64::from((0b1011_0110u32 & 0b0110_0111).count_ones());
        for kind in [Overlap::Min, Overlap::Product, Overlap::BitAnd] {
            assert_eq!(a.overlap(&b, kind).unwrap(), want, "{kind:?}");
        }
    }

    fn vector(bits: u8) -> impl Strategy<Value = ActivityVector> {
        proptest::collection::vec(0..=max_level(bits), PAPER_SUPER_SETS)
            .prop_map(move |l| ActivityVector::new(bits, l).unwrap())
    }

    fn two_vectors() -> impl Strategy<Value = (ActivityVector, ActivityVector)> {
        (1u8..=MAX_BITS).prop_flat_map(|b| (vector(b), vector(b)))
    }

    proptest! {
        #[test]
        fn levels_fit_their_bits_and_grow_with_the_count(
            counts in proptest::collection::vec(0u32..5_000, 1..64),
            bits in 1u8..=MAX_BITS,
            hot in 1u32..3_000,
            percent in 1u32..400,
        ) {
            let c = counters(&counts);
            for t in [
                Threshold::Absolute { hot },
                Threshold::OfMean { percent },
                Threshold::Majority { percent: 1 + percent % 100 },
            ] {
                let v = c.vector(bits, t).unwrap();
                prop_assert_eq!(v.super_sets(), counts.len());
                prop_assert!(v.levels().iter().all(|&l| l <= max_level(bits)));
                // Monotone: a busier super-set never gets a lower level.
                for i in 0..counts.len() {
                    for j in 0..counts.len() {
                        if counts[i] >= counts[j] {
                            prop_assert!(v.levels()[i] >= v.levels()[j]);
                        }
                    }
                }
            }
            // Majority: the hot super-sets hold at least `share` % of the
            // events, and without the least busy of them (and its equals)
            // they would not.
            let share = 1 + percent % 100;
            let m = c.vector(1, Threshold::Majority { percent: share }).unwrap();
            let total: u64 = counts.iter().map(|&x| u64::from(x)).sum();
            let hot_sets: Vec<u32> = counts
                .iter()
                .zip(m.levels())
                .filter(|(_, &l)| l == 1)
                .map(|(&x, _)| x)
                .collect();
            let held: u64 = hot_sets.iter().map(|&x| u64::from(x)).sum();
            if total == 0 {
                prop_assert!(hot_sets.is_empty());
            } else {
                prop_assert!(100 * held >= u64::from(share) * total);
                let least = *hot_sets.iter().min().unwrap();
                let without: u64 = hot_sets
                    .iter()
                    .filter(|&&x| x > least)
                    .map(|&x| u64::from(x))
                    .sum();
                prop_assert!(100 * without < u64::from(share) * total);
            }
            // The top bit at any width is the one-bit vector: more bits
            // refine the same range, never move the hot/cold line.
            let t = Threshold::Absolute { hot };
            let one = c.vector(1, t).unwrap();
            let wide = c.vector(bits, t).unwrap();
            for (a, b) in one.levels().iter().zip(wide.levels()) {
                prop_assert_eq!(*a, b >> (bits - 1));
            }
        }

        #[test]
        fn overlap_is_symmetric_bounded_and_zero_against_idle((a, b) in two_vectors()) {
            let idle = ActivityVector::idle(a.bits(), a.super_sets()).unwrap();
            for kind in [Overlap::Min, Overlap::Product, Overlap::BitAnd] {
                let ab = a.overlap(&b, kind).unwrap();
                prop_assert_eq!(ab, b.overlap(&a, kind).unwrap());
                prop_assert!((0.0..=a.super_sets() as f64).contains(&ab));
                prop_assert_eq!(a.overlap(&idle, kind).unwrap(), 0.0);
            }
            // Min never exceeds either side's intensity.
            let m = a.overlap(&b, Overlap::Min).unwrap();
            prop_assert!(m <= a.intensity() + 1e-9 && m <= b.intensity() + 1e-9);
        }

        #[test]
        fn permuting_keeps_intensity_and_permuting_both_keeps_overlap(
            (a, b) in two_vectors(),
            seed in any::<u64>(),
        ) {
            // A permutation from the seed (Fisher–Yates on a tiny LCG).
            let n = a.super_sets();
            let mut perm: Vec<usize> = (0..n).collect();
            let mut x = seed | 1;
            for i in (1..n).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                perm.swap(i, (x >> 33) as usize % (i + 1));
            }
            let pa = a.permuted(&perm).unwrap();
            let pb = b.permuted(&perm).unwrap();
            prop_assert_eq!(pa.intensity(), a.intensity());
            prop_assert_eq!(
                pa.overlap(&pb, Overlap::Min).unwrap(),
                a.overlap(&b, Overlap::Min).unwrap()
            );
        }
    }
}
