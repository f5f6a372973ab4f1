//! Statistics of a handful of runs: median, minimum, maximum, and the
//! sample standard deviation.
//!
//! Benchmarks here repeat each mode a few times on a shared, noisy machine;
//! the median is the headline figure because one disturbed run cannot move
//! it, and min/max show the spread. With an even number of runs the median
//! is the mean of the two middle values. The standard deviation is the
//! sample one (divisor n − 1; 0 for a single run), as the Chat paper's
//! Table 1 discussion compares spreads of five runs.

use serde::{Deserialize, Serialize};

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

/// The median of `values`, `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    Summary::of(values).map(|s| s.median)
}

/// `a / b`, `None` when either is missing or `b` is not positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn ratios_need_both_sides_and_a_positive_divisor() {
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(None, Some(4.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }
}
