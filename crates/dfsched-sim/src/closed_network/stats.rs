//! Confidence intervals across replications: Student's t at 98%, the level
//! Squillante & Lazowska report ("within 4% of the mean at 98% confidence").
//!
//! Each replication gives one number per measure; the interval is
//! `mean ± t(0.99, n−1)·s/√n` with `s` the sample standard deviation. With
//! one replication there is no interval: the half-width is `None`.

use serde::Serialize;

/// A mean and its 98% confidence half-width.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// The mean over replications.
    pub mean: f64,
    /// Half-width of the 98% confidence interval; `None` with fewer than
    /// two replications.
    pub half_width_98: Option<f64>,
}

impl Estimate {
    /// The estimate from one value per replication (at least one).
    pub fn from_samples(samples: &[f64]) -> Estimate {
        assert!(!samples.is_empty(), "an estimate needs a sample");
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Estimate {
                mean,
                half_width_98: None,
            };
        }
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Estimate {
            mean,
            half_width_98: Some(t_quantile_99(n as u64 - 1) * (var / n as f64).sqrt()),
        }
    }

    /// The half-width relative to the mean (0 when the mean is 0).
    pub fn relative_half_width(&self) -> Option<f64> {
        self.half_width_98.map(|h| {
            if self.mean == 0.0 {
                0.0
            } else {
                h / self.mean.abs()
            }
        })
    }
}

/// The 0.99 quantile of Student's t with `df` degrees of freedom (the
/// two-sided 98% critical value): a table to 30, then the Cornish–Fisher
/// expansion around the normal quantile (error below 1e-3 from 30 on).
pub fn t_quantile_99(df: u64) -> f64 {
    // t(0.99, 11) is 2.718 to three places; it is not Euler's number.
    #[allow(clippy::approx_constant)]
    const TABLE: [f64; 30] = [
        31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718, 2.681, 2.650,
        2.624, 2.602, 2.583, 2.567, 2.552, 2.539, 2.528, 2.518, 2.508, 2.500, 2.492, 2.485, 2.479,
        2.473, 2.467, 2.462, 2.457,
    ];
    assert!(df >= 1, "Student's t needs at least one degree of freedom");
    if let Some(&t) = TABLE.get(df as usize - 1) {
        return t;
    }
    let z: f64 = 2.326_347_874_040_841;
    let v = df as f64;
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_table_and_tend_to_the_normal() {
        assert_eq!(t_quantile_99(1), 31.821);
        assert_eq!(t_quantile_99(10), 2.764);
        // The expansion continues the table smoothly: 2.457 at 30, 2.423 at 40.
        assert!((t_quantile_99(40) - 2.423).abs() < 1e-3);
        assert!((t_quantile_99(120) - 2.358).abs() < 1e-3);
        assert!((t_quantile_99(1_000_000) - 2.3263).abs() < 1e-3);
    }

    #[test]
    fn the_interval_is_t_times_the_standard_error() {
        let e = Estimate::from_samples(&[1.0, 2.0, 3.0]);
        assert_eq!(e.mean, 2.0);
        // s = 1, n = 3: 6.965 / √3.
        assert!((e.half_width_98.unwrap() - 6.965 / 3f64.sqrt()).abs() < 1e-12);
        assert_eq!(Estimate::from_samples(&[5.0]).half_width_98, None);
    }
}
