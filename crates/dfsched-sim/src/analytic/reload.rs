//! The cache-reload model of Squillante & Lazowska §III-B (eqs. 1–6),
//! extending Thiebaut & Stone.
//!
//! A task's footprint of `F` blocks lands in a cache of `S` sets × `K` ways,
//! each block in a uniformly random set independently of the others. Then:
//!
//! ```text
//!  X   blocks of one footprint in a given set, capped at K      eqs. (1)-(2)
//!  W_I blocks of I intervening footprints in that set, capped   I-fold convolution of X
//!  V_I blocks of task A replaced by them (LRU)                  eq. (3) with X_B = W_I
//!  reload misses  F − S·(E[X_A] − E[V_I])                       eq. (4)
//!  R(I)          (F − S·(E[X_A] − E[V_I])) / F                  eq. (5), literal
//!                = (F − S·E[X_A]) / F  +  S·E[V_I] / F
//!                  └ A's own conflicts ┘  └ displaced by the I ┘
//!  R(I) here     S·E[V_I] / F           (so R(0) = 0)           see below
//!  cold          S·E[X_A] / F = lim R(I), I → ∞                 never ran there
//!  service       D + C·R(i)                                     eq. (6)
//! ```
//!
//! Why eq. (3) is exact for LRU: the intervening blocks are all used after
//! A's, so in a set where A holds `j` blocks and the others `w` (capped at
//! `K`), A loses `min(j, max(0, j + w − K))` of them. Capping `W_I` at `K`
//! loses nothing, since `w ≥ K` already replaces all of A's blocks.
//!
//! **The choice: `R(0) = 0`.** Eq. (5) taken literally counts, at every
//! `I`, the `F − S·E[X_A]` blocks of A that never fit in the cache beside
//! each other (sets holding more than `K` of them): A evicts them itself
//! while it runs. That term does not depend on `I`, so at `I = 0` eq. (5)
//! gives `R(0) > 0` — a task that comes straight back to a processor on
//! which nothing else ran would pay a "reload transient". Those misses are
//! the task's own, paid on every visit whatever the scheduler does, so they
//! belong to its demand `D`, not to the transient `C·R(i)` that eq. (6)
//! charges for where it is scheduled. We therefore count only the blocks
//! the `I` intervening tasks displace, `S·E[V_I]` (eq. 4's `E[V]` term),
//! and `R(I) = S·E[V_I]/F`: `R(0) = 0` exactly, with no special case
//! (`W_0 = 0` replaces nothing), and each step `R(I+1) − R(I)` is what one
//! more task displaces. This is also what the paper measured as the
//! transient (§II, Fig. 1: cold start minus warm start, where the warm task
//! "returns immediately"): the warm run already pays A's own conflicts, so
//! the difference is the resident part `S·E[X_A]`, which stops growing once
//! the footprint outgrows the cache — the paper's remark that past that
//! point "the task starts to replace portions of its own footprint". So
//! the transient of a task that never ran on the processor, or after
//! infinitely many others, is [`cold_reload_ratio`] `= S·E[X_A]/F`, 1 for
//! footprints that fit. For the paper's settings (Fig. 4: `F ≤ 3800`
//! blocks, 8K × 4 or 16K × 2) the two readings differ by at most 0.008
//! (2·10⁻⁵ at `F = 1900`, 4-way); they part only for footprints near or
//! past the cache's size.
//!
//! Assumptions (the paper's): the `I` intervening tasks are distinct and run
//! long enough to load their whole footprints; all footprints have size `F`.

use super::AnalyticError;
use crate::cache::{CacheGeometry, MAX_WAYS};

/// The distribution of `X`, the blocks of an `F`-block footprint in one
/// set, capped at `K` (eqs. 1–2): element `i < K` is `Pr[X = i]`, the
/// binomial `C(F,i) p^i (1−p)^(F−i)` with `p = 1/S`, and element `K` is the
/// tail `Pr[X ≥ K]`. Length `K + 1`; sums to 1.
///
/// Computed in log space so that footprints far larger than the cache
/// (where `(1−p)^F` underflows) stay exact.
pub fn footprint_distribution(
    footprint_blocks: u64,
    geometry: CacheGeometry,
) -> Result<Vec<f64>, AnalyticError> {
    check_geometry(geometry)?;
    let (f, k) = (footprint_blocks, geometry.ways as usize);
    let mut dist = vec![0.0; k + 1];
    if geometry.sets == 1 {
        // Every block is in the one set.
        dist[(f as usize).min(k)] = 1.0;
        return Ok(dist);
    }
    let p = 1.0 / f64::from(geometry.sets);
    let (ln_p, ln_q) = (p.ln(), (-p).ln_1p());
    // ln Pr[X = i], advanced by the ratio of successive binomial terms.
    let ln_pmf0 = f as f64 * ln_q;
    let step =
        |ln_pmf: f64, i: u64| ln_pmf + ((f - i) as f64).ln() - ((i + 1) as f64).ln() + ln_p - ln_q;
    let mut ln_pmf = ln_pmf0;
    let mut head = 0.0;
    for (i, d) in dist.iter_mut().enumerate().take(k) {
        let i = i as u64;
        if i > f {
            break; // Pr[X = i] = 0 beyond the footprint.
        }
        *d = ln_pmf.exp();
        head += *d;
        if i < f {
            ln_pmf = step(ln_pmf, i);
        }
    }
    dist[k] = if (k as u64) > f {
        0.0
    } else if head < 0.5 {
        // The tail is at least 0.5: no cancellation in 1 − head.
        (1.0 - head).max(0.0)
    } else {
        // A small tail: sum it directly, from i = K up, until the terms
        // (decreasing past the mode) no longer change the sum.
        let mode = ((f + 1) as f64 * p).floor() as u64;
        let mut tail = 0.0;
        let mut i = k as u64;
        loop {
            let term = ln_pmf.exp();
            tail += term;
            if i >= f || (i > mode && term <= tail * 1e-18) {
                break;
            }
            ln_pmf = step(ln_pmf, i);
            i += 1;
        }
        tail
    };
    Ok(dist)
}

/// The distribution of `min(W_I, K)`, where `W_I` is the sum of `I`
/// independent copies of `X` (`x` as from [`footprint_distribution`]): the
/// `I`-fold convolution of §III-B, capped because only `min(W_I, K)`
/// matters to LRU. `I = 0` gives `W = 0`.
pub fn intervening_distribution(x: &[f64], intervening: u32) -> Vec<f64> {
    let mut w = vec![0.0; x.len()];
    w[0] = 1.0;
    for _ in 0..intervening {
        w = convolve_capped(&w, x);
    }
    w
}

/// The distribution of `V`, the blocks of task A in a set replaced by the
/// intervening blocks `W` (both capped at `K`), by eq. (3):
/// `Pr[V = i] = Σ_{j=i..K} Pr[X_A = j]·Pr[W = K + i − j]` for `1 ≤ i ≤ K`;
/// `Pr[V = 0]` is the rest. Length `K + 1`.
pub fn replaced_distribution(x_a: &[f64], w: &[f64]) -> Vec<f64> {
    let k = x_a.len() - 1;
    assert_eq!(w.len(), k + 1, "X_A and W must share the associativity");
    let mut v = vec![0.0; k + 1];
    for (i, vi) in v.iter_mut().enumerate().skip(1) {
        *vi = (i..=k).map(|j| x_a[j] * w[k + i - j]).sum();
    }
    // Computed directly, not as 1 − Σ, to keep small probabilities exact:
    // nothing is replaced when A has no block or everything fits.
    v[0] = (0..=k)
        .flat_map(|j| (0..=k).map(move |b| (j, b)))
        .filter(|&(j, b)| j == 0 || j + b <= k)
        .map(|(j, b)| x_a[j] * w[b])
        .sum();
    v
}

/// The mean of a distribution over `0, 1, 2, …`.
pub fn mean(dist: &[f64]) -> f64 {
    dist.iter().enumerate().map(|(i, p)| i as f64 * p).sum()
}

/// Eqs. (4)–(5) without A's own conflicts (see the module doc): the
/// reload miss ratio given the distribution of `V`, the blocks of A the
/// others displaced, `S·E[V] / F`, clamped to `[0, 1]` against rounding.
/// Eq. (5) literally adds `(F − S·E[X_A]) / F`, the same at every `I`.
fn ratio(footprint_blocks: u64, sets: u32, v: &[f64]) -> f64 {
    let displaced = f64::from(sets) * mean(v);
    (displaced / footprint_blocks as f64).clamp(0.0, 1.0)
}

/// The reload miss ratio of an `F`-block footprint on a processor where
/// its task never ran (or after so many others that none of it is left):
/// `S·E[X_A] / F`, the blocks of it that a warm cache would hold, and the
/// limit of [`reload_ratios`] as `I` grows. It is 1 for a footprint that
/// fits, and less for one whose own blocks conflict: those it misses on
/// every visit, cold or warm, so they are not part of the transient.
pub fn cold_reload_ratio(
    footprint_blocks: u64,
    geometry: CacheGeometry,
) -> Result<f64, AnalyticError> {
    if footprint_blocks == 0 {
        return Err(AnalyticError::EmptyFootprint);
    }
    let x_a = footprint_distribution(footprint_blocks, geometry)?;
    let resident = f64::from(geometry.sets) * mean(&x_a);
    Ok((resident / footprint_blocks as f64).clamp(0.0, 1.0))
}

/// The cache-reload miss ratio `R(I)` for `I = 0..=max_intervening` (eq. 5,
/// without A's own conflicts: see the module doc): the expected fraction
/// of an `F`-block footprint that must be reloaded when its task returns
/// after `I` distinct tasks with equal footprints ran on the processor.
/// `R(0) = 0`; `R` rises with `I` towards [`cold_reload_ratio`] (1 for a
/// footprint that fits the cache).
///
/// ```
/// use dfsched_sim::analytic::reload::reload_ratios;
/// // The paper's Fig. 4: F = 1900 blocks, 4-way cache with 8K sets.
/// let r = reload_ratios(1900, 8192, 4, 10).unwrap();
/// assert!(r[0] == 0.0 && r[1] < r[5] && r[10] < 1.0);
/// ```
pub fn reload_ratios(
    footprint_blocks: u64,
    sets: u32,
    ways: u32,
    max_intervening: u32,
) -> Result<Vec<f64>, AnalyticError> {
    if footprint_blocks == 0 {
        return Err(AnalyticError::EmptyFootprint);
    }
    if max_intervening > MAX_INTERVENING {
        return Err(AnalyticError::TooLarge {
            what: "intervening tasks",
            size: u64::from(max_intervening),
            limit: u64::from(MAX_INTERVENING),
        });
    }
    let g = CacheGeometry { sets, ways };
    let x = footprint_distribution(footprint_blocks, g)?;
    let k = ways as usize;
    let mut out = Vec::with_capacity(max_intervening as usize + 1);
    // W_I built incrementally: one more convolution per step.
    let mut w = vec![0.0; k + 1];
    w[0] = 1.0;
    for i in 0..=max_intervening {
        if i > 0 {
            w = convolve_capped(&w, &x);
        }
        out.push(ratio(
            footprint_blocks,
            sets,
            &replaced_distribution(&x, &w),
        ));
    }
    Ok(out)
}

/// The reload miss ratio of an `F`-block footprint after the processor ran
/// a single program that touched `other_blocks` distinct blocks: Thiebaut
/// and Stone's original two-task model (eqs. 1–5 with `I = 1` and `X_B` of
/// footprint `other_blocks`). This is how §VI-B estimates the transient
/// from a count of cache-block replacements instead of intervening tasks.
/// Like [`reload_ratios`] it counts only the displaced blocks: no
/// replacement, no reload.
pub fn reload_ratio_after_blocks(
    footprint_blocks: u64,
    other_blocks: u64,
    geometry: CacheGeometry,
) -> Result<f64, AnalyticError> {
    if footprint_blocks == 0 {
        return Err(AnalyticError::EmptyFootprint);
    }
    let x_a = footprint_distribution(footprint_blocks, geometry)?;
    let x_b = footprint_distribution(other_blocks, geometry)?;
    Ok(ratio(
        footprint_blocks,
        geometry.sets,
        &replaced_distribution(&x_a, &x_b),
    ))
}

/// Eq. (6): the mean time a task spends in service per visit, its demand
/// `D` plus the reload transient `C·R(i)`.
pub fn service_time(demand: f64, reload_time: f64, reload_ratio: f64) -> f64 {
    demand + reload_time * reload_ratio
}

/// The most intervening tasks [`reload_ratios`] computes (each costs one
/// `K²` convolution): `R(I)` is within rounding of its limit long before.
pub const MAX_INTERVENING: u32 = 1 << 16;

fn convolve_capped(w: &[f64], x: &[f64]) -> Vec<f64> {
    let k = x.len() - 1;
    let mut next = vec![0.0; k + 1];
    for (a, &pa) in w.iter().enumerate() {
        for (b, &pb) in x.iter().enumerate() {
            next[(a + b).min(k)] += pa * pb;
        }
    }
    next
}

pub(crate) fn check_geometry(g: CacheGeometry) -> Result<(), AnalyticError> {
    if g.sets == 0 || g.ways == 0 || g.ways > MAX_WAYS {
        return Err(AnalyticError::BadCache {
            sets: g.sets,
            ways: g.ways,
            max_ways: MAX_WAYS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(sets: u32, ways: u32) -> CacheGeometry {
        CacheGeometry { sets, ways }
    }

    fn binomial(n: u64, k: u64, p: f64) -> f64 {
        let c: f64 = (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product();
        c * p.powi(k as i32) * (1.0 - p).powi((n - k) as i32)
    }

    #[test]
    fn footprint_distribution_is_the_capped_binomial_of_eqs_1_and_2() {
        let d = footprint_distribution(50, g(16, 4)).unwrap();
        assert_eq!(d.len(), 5);
        for (i, &di) in d.iter().enumerate().take(4) {
            let b = binomial(50, i as u64, 1.0 / 16.0);
            assert!((di - b).abs() < 1e-12, "i={i}: {di} vs {b}");
        }
        let tail: f64 = (4..=50).map(|j| binomial(50, j, 1.0 / 16.0)).sum();
        assert!((d[4] - tail).abs() < 1e-12);
        assert!((d.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn small_tails_are_summed_exactly_and_huge_footprints_do_not_underflow() {
        // Tail Pr[X ≥ 4] for F = 10, S = 1000 is about C(10,4)/1000^4.
        let d = footprint_distribution(10, g(1000, 4)).unwrap();
        let tail: f64 = (4..=10).map(|j| binomial(10, j, 1e-3)).sum();
        assert!((d[4] / tail - 1.0).abs() < 1e-9, "{} vs {tail}", d[4]);
        // 10^7 blocks in 64 sets: every set is full.
        let d = footprint_distribution(10_000_000, g(64, 8)).unwrap();
        assert!((d[8] - 1.0).abs() < 1e-12);
        // A footprint smaller than the associativity never fills a set.
        let d = footprint_distribution(2, g(4, 4)).unwrap();
        assert_eq!(d[3], 0.0);
        assert_eq!(d[4], 0.0);
        assert!((d[2] - 1.0 / 16.0).abs() < 1e-12);
        // One set: X is the footprint, capped.
        assert_eq!(footprint_distribution(9, g(1, 4)).unwrap()[4], 1.0);
    }

    #[test]
    fn eq_3_matches_the_lru_rule_summed_directly() {
        let x = footprint_distribution(40, g(16, 4)).unwrap();
        let w = intervening_distribution(&x, 2);
        let v = replaced_distribution(&x, &w);
        let mut direct = [0.0; 5];
        for (j, &pj) in x.iter().enumerate() {
            for (b, &pb) in w.iter().enumerate() {
                let lost = if j == 0 {
                    0
                } else {
                    j.min((j + b).saturating_sub(4))
                };
                direct[lost] += pj * pb;
            }
        }
        for i in 0..=4 {
            assert!((v[i] - direct[i]).abs() < 1e-14, "i={i}");
        }
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn convolution_caps_at_the_associativity() {
        let x = vec![0.5, 0.5, 0.0];
        let w = intervening_distribution(&x, 3);
        // Sum of three fair coins, capped at 2: 0 → 1/8, 1 → 3/8, ≥2 → 1/2.
        assert_eq!(w, vec![0.125, 0.375, 0.5]);
        assert_eq!(intervening_distribution(&x, 0), vec![1.0, 0.0, 0.0]);
    }

    #[test]
    fn reload_ratio_rises_with_intervening_tasks_towards_one() {
        let r = reload_ratios(1900, 8192, 4, 40).unwrap();
        assert!(r.windows(2).all(|w| w[1] > w[0]), "{r:?}");
        assert_eq!(r[0], 0.0, "nothing intervened, nothing to reload");
        assert!(r[40] > 0.95 && r[40] <= 1.0);
        // A 2-way cache of the same size loses more to one intervening task
        // (Fig. 4's dotted curves lie above the solid ones at small I).
        let r2 = reload_ratios(1900, 16384, 2, 2).unwrap();
        assert!(r2[1] > r[1], "{} vs {}", r2[1], r[1]);
    }

    #[test]
    fn fully_associative_reload_follows_from_capacity() {
        // One set of K ways, F = K/2: one intervening footprint fits beside
        // A; two of them push A out entirely.
        let r = reload_ratios(4, 1, 8, 2).unwrap();
        assert_eq!(r, vec![0.0, 0.0, 1.0]);
    }

    #[test]
    fn r0_is_zero_even_when_the_footprint_conflicts_with_itself() {
        // F = 3 blocks, one set of 2 ways: one block never fits beside the
        // other two, and eq. (5) read literally gives R(0) = 1/3. It is A's
        // own miss on every visit, not a transient: R(0) = 0. One more
        // footprint of 3 fills the set and displaces both resident blocks:
        // R(1) = 2/3, the cold ratio, not 1.
        let r = reload_ratios(3, 1, 2, 2).unwrap();
        assert_eq!(r[0], 0.0);
        let cold = cold_reload_ratio(3, g(1, 2)).unwrap();
        assert!((cold - 2.0 / 3.0).abs() < 1e-12, "{cold}");
        assert!((r[1] - cold).abs() < 1e-12 && (r[2] - cold).abs() < 1e-12);
        // No replacements by the §VI-B estimate either: no reload.
        assert_eq!(reload_ratio_after_blocks(3, 0, g(1, 2)).unwrap(), 0.0);
    }

    #[test]
    fn a_footprint_that_fits_reloads_whole_when_cold() {
        assert_eq!(cold_reload_ratio(4, g(1, 8)).unwrap(), 1.0);
        // 1900 blocks in 8K × 4: self-conflicts cost about 2·10⁻⁵.
        let cold = cold_reload_ratio(1900, g(8192, 4)).unwrap();
        assert!(cold < 1.0 && cold > 1.0 - 1e-4, "{cold}");
        assert_eq!(
            cold_reload_ratio(0, g(8, 4)),
            Err(AnalyticError::EmptyFootprint)
        );
    }

    #[test]
    fn replacement_count_model_equals_one_intervening_task_of_that_size() {
        let geo = g(256, 4);
        let one = reload_ratios(300, 256, 4, 1).unwrap()[1];
        let by_blocks = reload_ratio_after_blocks(300, 300, geo).unwrap();
        assert!((one - by_blocks).abs() < 1e-12);
        assert!(reload_ratio_after_blocks(300, 0, geo).unwrap() < one);
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert_eq!(
            reload_ratios(0, 8, 4, 3),
            Err(AnalyticError::EmptyFootprint)
        );
        assert!(matches!(
            reload_ratios(10, 0, 4, 3),
            Err(AnalyticError::BadCache { .. })
        ));
        assert!(matches!(
            reload_ratios(10, 8, 0, 3),
            Err(AnalyticError::BadCache { .. })
        ));
        assert!(matches!(
            reload_ratios(10, 8, 4, MAX_INTERVENING + 1),
            Err(AnalyticError::TooLarge { .. })
        ));
    }

    #[test]
    fn service_time_is_demand_plus_reload_transient() {
        assert_eq!(service_time(1.0, 0.5, 0.2), 1.1);
    }

    /// Eq. (5) as printed: `(F − S·(E[X_A] − E[V_I])) / F`, unclamped.
    fn eq5_literal(f: u64, geo: CacheGeometry, i: u32) -> f64 {
        let x = footprint_distribution(f, geo).unwrap();
        let v = replaced_distribution(&x, &intervening_distribution(&x, i));
        (f as f64 - f64::from(geo.sets) * (mean(&x) - mean(&v))) / f as f64
    }

    proptest::proptest! {
        /// R(0) = 0; R rises with I (never by more than rounding downwards),
        /// stays within [0, cold], and differs from eq. (5) as printed by
        /// the same I-free self-conflict term at every I, so R(I) for
        /// I ≥ 1 is eq. (5)'s curve moved down by its value at 0: no jump
        /// between I = 0 and I = 1 but what one task displaces.
        #[test]
        fn r_is_zero_at_0_and_rises_continuously_to_the_cold_ratio(
            f in 1u64..3000,
            sets in 1u32..600,
            ways in 1u32..=8,
            max_i in 1u32..12,
        ) {
            let geo = g(sets, ways);
            let r = reload_ratios(f, sets, ways, max_i).unwrap();
            let cold = cold_reload_ratio(f, geo).unwrap();
            proptest::prop_assert_eq!(r[0], 0.0);
            for w in r.windows(2) {
                proptest::prop_assert!(w[1] >= w[0] - 1e-12, "{:?}", r);
            }
            let self_term = eq5_literal(f, geo, 0);
            for (i, &ri) in r.iter().enumerate() {
                proptest::prop_assert!((0.0..=cold + 1e-12).contains(&ri), "R({}) = {} > {}", i, ri, cold);
                let lit = eq5_literal(f, geo, i as u32);
                proptest::prop_assert!((ri - (lit - self_term)).abs() < 1e-9, "I = {}: {} vs {}", i, ri, lit - self_term);
            }
            // One intervening task displaces what the §VI-B estimate says
            // one program of the same footprint does.
            let one = reload_ratio_after_blocks(f, f, geo).unwrap();
            proptest::prop_assert!((r[1] - one).abs() < 1e-12);
        }
    }
}
