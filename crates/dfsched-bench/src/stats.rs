//! Statistics of a handful of runs: median, minimum, maximum, the sample
//! standard deviation, paired ratios, and a distribution-free interval for
//! a median ([`MedianInterval`], the sign test's).
//!
//! Benchmarks here repeat each mode a few times on a shared, noisy machine;
//! the median is the headline figure because one disturbed run cannot move
//! it, and min/max show the spread. With an even number of runs the median
//! is the mean of the two middle values. The standard deviation is the
//! sample one (divisor n − 1; 0 for a single run), as the Chat paper's
//! Table 1 discussion compares spreads of five runs.
//!
//! **Paired ratios** ([`PairedRatio`]): on the shared VM the same run drifts
//! by tens of percent from minute to minute, more than the effects measured.
//! A round runs every mode once, back to back, so the runs of one round saw
//! nearly the same machine; a mode's figure divided by the baseline's (the
//! kernel alone: `vanilla`) *of the same round* cancels most of the drift,
//! and the median of those per-round ratios is the figure to compare.
//! Invariant: a ratio exists only for a round in which both the mode and the
//! baseline ran and the baseline's figure is above 0; a mode with no such
//! round, and the baseline itself, has none — never a division by zero.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Median, minimum, maximum and standard deviation of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The middle value (mean of the two middle ones for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The sample standard deviation (divisor n − 1); 0 for one value.
    pub std_dev: f64,
}

impl Summary {
    /// The summary of `values`; `None` when empty or when a value is NaN.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let mean = v.iter().sum::<f64>() / n as f64;
        let std_dev = if n > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            std_dev,
        })
    }
}

/// The tail of a large sample (a benchmark's per-pass or per-call costs):
/// its size, median, 99th percentile and maximum. The percentile is the
/// nearest-rank one: the smallest value with at least 99 % of the sample at
/// or below it (so with fewer than 100 values it is the maximum). JSON:
/// `{n, median, p99, max}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// How many values.
    pub n: usize,
    /// The middle value (mean of the two middle ones for an even count).
    pub median: f64,
    /// The nearest-rank 99th percentile.
    pub p99: f64,
    /// The largest value.
    pub max: f64,
}

impl Tail {
    /// The tail of `values`; `None` when empty or when a value is NaN.
    pub fn of(values: &[f64]) -> Option<Tail> {
        let s = Summary::of(values)?;
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // Nearest rank: ceil(0.99 n), 1-based; integer arithmetic so that
        // 100 values give rank 99 exactly.
        let rank = (99 * n).div_ceil(100).max(1);
        Some(Tail {
            n,
            median: s.median,
            p99: v[rank - 1],
            max: s.max,
        })
    }

    /// The tail with every figure multiplied by `k` (a unit change).
    pub fn scaled(self, k: f64) -> Tail {
        Tail {
            median: self.median * k,
            p99: self.p99 * k,
            max: self.max * k,
            ..self
        }
    }
}

/// The median of `values`, `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    Summary::of(values).map(|s| s.median)
}

/// The median of `f` over `items`, 0 when there are none (a per-mode
/// column that is always a number).
pub fn median_by<T>(items: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(&items.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
}

/// The median of the values `f` has for `items`, the `None`s left out;
/// `None` when no item has one.
pub fn median_some<T>(items: &[T], f: impl Fn(&T) -> Option<f64>) -> Option<f64> {
    median(&items.iter().filter_map(f).collect::<Vec<_>>())
}

/// `a / b`, `None` when either is missing or `b` is not positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A mode's per-round ratios to the baseline, summarised (see the module
/// doc). JSON: `{median, min, max, rounds, per_round: [..]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairedRatio {
    /// The median per-round ratio: the figure to judge.
    pub median: f64,
    /// The smallest per-round ratio.
    pub min: f64,
    /// The largest per-round ratio.
    pub max: f64,
    /// Rounds that had both runs (the length of `per_round`).
    pub rounds: usize,
    /// Every such round's ratio, in round order.
    #[serde(default)]
    pub per_round: Vec<f64>,
}

/// `figure(mode) / figure(baseline)` for every round of `runs` in which
/// both ran and the baseline's figure is above 0, in round order. `key`
/// gives a run's mode, round and figure (the benchmark chooses which figure
/// is compared: operations, operations per second). A round with two runs of
/// one mode counts the last.
pub fn paired_ratios<R, M: PartialEq>(
    runs: &[R],
    mode: M,
    baseline: M,
    key: impl Fn(&R) -> (M, usize, f64),
) -> Vec<f64> {
    let mut of_baseline: BTreeMap<usize, f64> = BTreeMap::new();
    let mut of_mode: BTreeMap<usize, f64> = BTreeMap::new();
    for r in runs {
        let (m, round, figure) = key(r);
        if m == baseline {
            of_baseline.insert(round, figure);
        } else if m == mode {
            of_mode.insert(round, figure);
        }
    }
    of_mode
        .into_iter()
        .filter_map(|(round, x)| {
            let b = *of_baseline.get(&round)?;
            (b > 0.0).then(|| x / b)
        })
        .collect()
}

impl PairedRatio {
    /// The summary of [`paired_ratios`]`(runs, mode, baseline, key)`;
    /// `None` for the baseline itself and when no round pairs up.
    pub fn of<R, M: PartialEq>(
        runs: &[R],
        mode: M,
        baseline: M,
        key: impl Fn(&R) -> (M, usize, f64),
    ) -> Option<PairedRatio> {
        if mode == baseline {
            return None;
        }
        let per_round = paired_ratios(runs, mode, baseline, key);
        let s = Summary::of(&per_round)?;
        Some(PairedRatio {
            median: s.median,
            min: s.min,
            max: s.max,
            rounds: per_round.len(),
            per_round,
        })
    }
}

/// A distribution-free confidence interval for the median of a sample:
/// two of its order statistics. JSON: `{low, high, confidence}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MedianInterval {
    /// The lower end: the k-th smallest value.
    pub low: f64,
    /// The upper end: the k-th largest value.
    pub high: f64,
    /// The interval's coverage, exact whatever the distribution:
    /// `1 − 2·P(B ≤ k−1)`, `B ~ Binomial(n, ½)`.
    pub confidence: f64,
}

impl MedianInterval {
    /// The sign-test (order-statistics) interval for the median of
    /// `values`: `[x₍k₎, x₍n−k+1₎]` with the largest `k` whose coverage is
    /// at least `level` (0.95 for a 95 % interval). Needs no assumption on
    /// the distribution, only independent draws with one median. With too
    /// few values for `level` (n ≤ 5 for 95 %) it is `[min, max]` with its
    /// own, lower, coverage `1 − 2^(1−n)`: said, never hidden. `None` when
    /// empty or a value is NaN.
    pub fn sign_test(values: &[f64], level: f64) -> Option<MedianInterval> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // cdf[j] = P(B ≤ j), B ~ Binomial(n, ½), from the binomial
        // coefficients in f64 (exact well past any repeat count used here).
        let mut cdf = Vec::with_capacity(n + 1);
        let (mut coef, mut acc) = (1.0f64, 0.0f64);
        let total = 2f64.powi(n as i32);
        for j in 0..=n {
            acc += coef / total;
            cdf.push(acc);
            coef = coef * (n - j) as f64 / (j + 1) as f64;
        }
        let coverage = |k: usize| 1.0 - 2.0 * cdf[k - 1];
        let mut k = 1;
        while k < n.div_ceil(2) && coverage(k + 1) >= level {
            k += 1;
        }
        Some(MedianInterval {
            low: v[k - 1],
            high: v[n - k],
            confidence: coverage(k).max(0.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_interval_takes_the_widest_order_statistics_it_needs() {
        // n = 5: no pair reaches 95 %; [min, max] covers 1 - 2/32.
        let five = MedianInterval::sign_test(&[1.3, 0.9, 1.0, 1.1, 1.2], 0.95).unwrap();
        assert_eq!((five.low, five.high), (0.9, 1.3));
        assert!((five.confidence - 0.9375).abs() < 1e-12);
        // n = 10: P(B <= 1) = 11/1024, so k = 2 covers 1 - 22/1024; k = 3
        // would cover 1 - 112/1024 < 95 %.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let i = MedianInterval::sign_test(&ten, 0.95).unwrap();
        assert_eq!((i.low, i.high), (2.0, 9.0));
        assert!((i.confidence - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // One value: itself, with no confidence to speak of.
        let one = MedianInterval::sign_test(&[2.0], 0.95).unwrap();
        assert_eq!((one.low, one.high, one.confidence), (2.0, 2.0, 0.0));
        assert_eq!(MedianInterval::sign_test(&[], 0.95), None);
        // Many values: the interval narrows around the median.
        let many: Vec<f64> = (1..=101).map(f64::from).collect();
        let m = MedianInterval::sign_test(&many, 0.95).unwrap();
        assert!(
            m.low > 35.0 && m.high < 67.0 && m.confidence >= 0.95,
            "{m:?}"
        );
        assert_eq!(m.low + m.high, 102.0, "symmetric order statistics");
    }

    /// (mode, round, figure): the shape every benchmark's run reduces to.
    type Run = (&'static str, usize, f64);

    fn paired(runs: &[Run], mode: &'static str) -> Option<PairedRatio> {
        PairedRatio::of(runs, mode, "vanilla", |r| *r)
    }

    #[test]
    fn paired_ratios_divide_within_a_round_not_across() {
        // The host drifts: round 1 runs at double speed. Ratios of medians
        // would mix rounds; paired ratios see 0.9 and 1.0 within each.
        let runs = [
            ("vanilla", 0, 100.0),
            ("co-thread", 0, 90.0),
            ("vanilla", 1, 200.0),
            ("co-thread", 1, 200.0),
            ("vanilla", 2, 100.0),
            ("co-thread", 2, 95.0),
            ("data-affinity", 2, 50.0),
        ];
        let p = paired(&runs, "co-thread").unwrap();
        assert_eq!(p.per_round, vec![0.9, 1.0, 0.95]);
        assert_eq!((p.median, p.min, p.max, p.rounds), (0.95, 0.9, 1.0, 3));
        assert_eq!(paired(&runs, "vanilla"), None, "the baseline has none");
        assert_eq!(paired(&runs, "data-affinity").unwrap().per_round, vec![0.5]);
    }

    #[test]
    fn a_mode_twice_the_baseline_every_round_has_median_2_whatever_the_drift() {
        // The baseline drifts 10x between rounds; every paired ratio is 2.
        let mut runs = Vec::new();
        for (round, v) in [100.0, 1000.0, 150.0, 900.0, 120.0].into_iter().enumerate() {
            runs.push(("vanilla", round, v));
            runs.push(("oracle", round, 2.0 * v));
        }
        let p = paired(&runs, "oracle").unwrap();
        assert_eq!((p.median, p.min, p.max, p.rounds), (2.0, 2.0, 2.0, 5));
    }

    #[test]
    fn paired_ratio_uses_only_rounds_with_both_runs_and_never_divides_by_zero() {
        let runs = [
            ("vanilla", 0, 100.0),
            ("co-thread", 0, 110.0),
            // Round 1: the baseline is missing.
            ("co-thread", 1, 999.0),
            // Round 2: the baseline did nothing.
            ("vanilla", 2, 0.0),
            ("co-thread", 2, 50.0),
            ("vanilla", 3, 200.0),
            ("co-thread", 3, 180.0),
        ];
        assert_eq!(
            paired_ratios(&runs, "co-thread", "vanilla", |r| *r),
            vec![1.1, 0.9]
        );
        let p = paired(&runs, "co-thread").unwrap();
        assert_eq!((p.min, p.max, p.rounds), (0.9, 1.1, 2));
        assert!((p.median - 1.0).abs() < 1e-12);
        // No baseline at all, or only one that did nothing: no ratio.
        let no_baseline: Vec<Run> = runs.iter().copied().filter(|r| r.0 != "vanilla").collect();
        assert_eq!(paired(&no_baseline, "co-thread"), None);
        assert_eq!(
            paired(&[("vanilla", 0, 0.0), ("split", 0, 5.0)], "split"),
            None
        );
    }

    #[test]
    fn paired_ratio_json_has_the_summary_and_every_round() {
        let p = paired(&[("vanilla", 0, 4.0), ("split", 0, 2.0)], "split").unwrap();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"median": 0.5, "min": 0.5, "max": 0.5, "rounds": 1, "per_round": [0.5]})
        );
    }

    #[test]
    fn odd_count_median_is_the_middle_value() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0, 0.5]).unwrap();
        assert_eq!(
            s,
            Summary {
                median: 2.0,
                min: 0.5,
                max: 10.0,
                std_dev: s.std_dev,
            }
        );
        // mean 3.3, squared deviations sum to 59.8, / 4.
        assert!(
            (s.std_dev - (59.8f64 / 4.0).sqrt()).abs() < 1e-12,
            "{}",
            s.std_dev
        );
    }

    #[test]
    fn even_count_median_is_the_mean_of_the_middle_two() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!((s.min, s.max), (1.0, 4.0));
        // mean 2.5: deviations ±1.5, ±0.5 → (2·2.25 + 2·0.25) / 3.
        assert!((s.std_dev - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn one_value_is_its_own_summary_and_nothing_has_none() {
        assert_eq!(
            Summary::of(&[7.0]).unwrap(),
            Summary {
                median: 7.0,
                min: 7.0,
                max: 7.0,
                std_dev: 0.0,
            }
        );
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn a_mode_column_is_0_without_runs_and_a_share_skips_runs_that_could_not_say() {
        let runs = [(1.0, Some(0.5)), (3.0, None), (2.0, Some(0.1))];
        assert_eq!(median_by(&runs, |r| r.0), 2.0);
        assert_eq!(median_by(&runs[..0], |r| r.0), 0.0);
        assert_eq!(median_some(&runs, |r| r.1), Some(0.3));
        assert_eq!(median_some(&runs[1..2], |r| r.1), None);
    }

    #[test]
    fn ratios_need_both_sides_and_a_positive_divisor() {
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(None, Some(4.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn tail_gives_nearest_rank_p99_and_needs_values() {
        assert_eq!(Tail::of(&[]), None);
        assert_eq!(Tail::of(&[1.0, f64::NAN]), None);
        let one = Tail::of(&[7.0]).unwrap();
        assert_eq!((one.n, one.median, one.p99, one.max), (1, 7.0, 7.0, 7.0));
        // 1..=100: rank 99 is 99; the median of an even count is the mean.
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let t = Tail::of(&v).unwrap();
        assert_eq!((t.n, t.median, t.p99, t.max), (100, 50.5, 99.0, 100.0));
        // 1..=1000: rank 990.
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(Tail::of(&v).unwrap().p99, 990.0);
        // Under 100 values the p99 is the maximum.
        let t = Tail::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((t.median, t.p99, t.max), (2.0, 3.0, 3.0));
        let us = t.scaled(1e-3);
        assert_eq!((us.n, us.median, us.max), (3, 2e-3, 3e-3));
    }
}
