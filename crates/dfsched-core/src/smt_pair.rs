//! Co-scheduling threads on SMT siblings by their activity vectors (Kihm,
//! Settle, Janiszewski & Connors, §4.1 and Algorithm 3).
//!
//! At the end of every scheduling interval each core lets one thread go and
//! picks the one to run next beside the threads that stay:
//!
//! 1. **Removal** ([`removal`]): "the currently resident thread which has
//!    been scheduled the most times is scheduled for removal" (ties: the one
//!    resident longest, then the lower context).
//! 2. **Score** ([`PairPicker::scores`]) every candidate — every runnable
//!    thread not running elsewhere, the one just removed included ("this may
//!    be the second thread already resident"):
//!
//!    ```text
//!    score = w_interference · Σ_levels Σ_co-runners interference(cand, co)
//!          + w_runs         · (runs − fewest runs among the candidates)
//!          + w_priority     · priority
//!    ```
//!
//!    where `interference` is, by [`Scorer`]: the paper's vector overlap
//!    (`popcount(AV & AV_sibling)` at one bit, see
//!    [`crate::activity::Overlap`]); intensity balance only (the
//!    "Distributed Intensity" control: how far the pair's total activity is
//!    from an even share, with no notion of *where* in the cache); or
//!    nothing (round robin by runs: the paper's fairness term alone).
//! 3. **Pick** ([`PairPicker::pick`]) the lowest score (ties: fewer runs,
//!    longer waiting, lower index). The Linux prototype instead lets the
//!    default scheduler pick first and overrides it only with a strictly
//!    better score ([`PairPicker::pick_over_default`]).
//!
//! The runs term is the paper's "round robin scheme to ensure fairness": a
//! candidate is passed over only while its deficit in runs, times `w_runs`,
//! is smaller than the interference it would add. With the defaults
//! (`w_interference` 1 per overlapping super-set, `w_runs` 2 per quantum)
//! and 32 super-sets a chosen thread has at most 16 runs more than the
//! least-run candidate (a property test checks the bound).
//!
//! [`classify`] rates another scheduler's pick as the paper's Fig. 12 does:
//! good if the activity scheduler would have made it, poor if it adds more
//! than half-way from the least to the most interference on offer,
//! moderate otherwise.
//!
//! Everything here is pure arithmetic on plain values: the body gathers the
//! vectors and run counts and applies the pick.

use crate::activity::{ActivityError, ActivityVector, Overlap};
use serde::{Deserialize, Serialize};

/// What the interference term of a score measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scorer {
    /// The paper's: overlap of the candidate's vector with each co-runner's.
    Overlap(Overlap),
    /// Intensity only: `|intensity(cand) + Σ intensity(co) − share|`, with
    /// `share` = (co-runners + 1) × the mean intensity of all threads.
    Intensity,
    /// No interference term: round robin by runs.
    Fair,
}

/// The weights of a score; see the module doc. The paper gives none.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairWeights {
    /// Per unit of interference (one overlapping super-set).
    pub interference: f64,
    /// Per quantum run more than the least-run candidate.
    pub runs: f64,
    /// Per step of priority (lower is better; 0 for all in the simulator).
    pub priority: f64,
}

impl Default for PairWeights {
    fn default() -> Self {
        PairWeights {
            interference: 1.0,
            runs: 2.0,
            priority: 1.0,
        }
    }
}

/// A thread that could run next.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// Quanta it has been scheduled for so far.
    pub runs: u64,
    /// The last quantum it ran in (`None`: never), for ties.
    pub last_ran: Option<u64>,
    /// Priority (lower runs first); the default scheduler's order.
    pub priority: i32,
    /// Its activity vector at each monitored cache level.
    pub profile: &'a [ActivityVector],
}

/// A resident thread, for [`removal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resident {
    /// Quanta it has been scheduled for so far.
    pub runs: u64,
    /// The quantum it became resident in.
    pub since: u64,
}

/// Which resident leaves: the most runs, then resident longest, then the
/// lower index. `None` when there is no resident.
pub fn removal(residents: &[Resident]) -> Option<usize> {
    residents
        .iter()
        .enumerate()
        .min_by(|(i, a), (j, b)| {
            b.runs
                .cmp(&a.runs)
                .then(a.since.cmp(&b.since))
                .then(i.cmp(j))
        })
        .map(|(i, _)| i)
}

/// A pick and why.
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use]
pub struct Pick {
    /// Index into the candidates.
    pub index: usize,
    /// Its score.
    pub score: f64,
    /// Its interference term (before weighting).
    pub interference: f64,
}

/// The paper's picker with its settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairPicker {
    /// What interference means.
    pub scorer: Scorer,
    /// The weights.
    pub weights: PairWeights,
}

impl Default for PairPicker {
    fn default() -> Self {
        PairPicker {
            scorer: Scorer::Overlap(Overlap::default()),
            weights: PairWeights::default(),
        }
    }
}

impl PairPicker {
    /// The interference term of one candidate against the co-runners
    /// (each a profile with one vector per monitored level).
    /// `mean_intensity` is used by [`Scorer::Intensity`] only.
    pub fn interference(
        &self,
        cand: &[ActivityVector],
        co_runners: &[&[ActivityVector]],
        mean_intensity: f64,
    ) -> Result<f64, ActivityError> {
        match self.scorer {
            Scorer::Fair => Ok(0.0),
            Scorer::Overlap(kind) => {
                let mut sum = 0.0;
                for co in co_runners {
                    for (a, b) in cand.iter().zip(co.iter()) {
                        sum += a.overlap(b, kind)?;
                    }
                }
                Ok(sum)
            }
            Scorer::Intensity => {
                let mut sum = 0.0;
                for (level, c) in cand.iter().enumerate() {
                    let pair: f64 = c.intensity()
                        + co_runners
                            .iter()
                            .filter_map(|co| co.get(level))
                            .map(ActivityVector::intensity)
                            .sum::<f64>();
                    let share = (co_runners.len() + 1) as f64 * mean_intensity;
                    sum += (pair - share).abs();
                }
                Ok(sum)
            }
        }
    }

    /// Every candidate's (score, interference), in order.
    pub fn scores(
        &self,
        candidates: &[Candidate<'_>],
        co_runners: &[&[ActivityVector]],
        mean_intensity: f64,
    ) -> Result<Vec<(f64, f64)>, ActivityError> {
        let fewest = candidates.iter().map(|c| c.runs).min().unwrap_or(0);
        candidates
            .iter()
            .map(|c| {
                let i = self.interference(c.profile, co_runners, mean_intensity)?;
                let w = &self.weights;
                let score = w.interference * i
                    + w.runs * (c.runs - fewest) as f64
                    + w.priority * f64::from(c.priority);
                Ok((score, i))
            })
            .collect()
    }

    /// The lowest score (ties: fewer runs, waited longer, lower index);
    /// `None` without candidates.
    pub fn pick(
        &self,
        candidates: &[Candidate<'_>],
        co_runners: &[&[ActivityVector]],
        mean_intensity: f64,
    ) -> Result<Option<Pick>, ActivityError> {
        let scores = self.scores(candidates, co_runners, mean_intensity)?;
        Ok(best(candidates, &scores))
    }

    /// The Linux prototype's rule: the default scheduler's choice
    /// (`default`, an index into the candidates) runs unless another
    /// candidate has a strictly lower score.
    pub fn pick_over_default(
        &self,
        candidates: &[Candidate<'_>],
        default: usize,
        co_runners: &[&[ActivityVector]],
        mean_intensity: f64,
    ) -> Result<Option<Pick>, ActivityError> {
        let scores = self.scores(candidates, co_runners, mean_intensity)?;
        let Some(b) = best(candidates, &scores) else {
            return Ok(None);
        };
        Ok(Some(match scores.get(default) {
            Some(&(score, interference)) if score <= b.score => Pick {
                index: default,
                score,
                interference,
            },
            _ => b,
        }))
    }
}

fn best(candidates: &[Candidate<'_>], scores: &[(f64, f64)]) -> Option<Pick> {
    // `last_ran` None (never ran) waits longest: map it below every quantum.
    let waited = |c: &Candidate<'_>| c.last_ran.map_or(0, |q| q + 1);
    (0..candidates.len())
        .min_by(|&i, &j| {
            scores[i]
                .0
                .total_cmp(&scores[j].0)
                .then(candidates[i].runs.cmp(&candidates[j].runs))
                .then(waited(&candidates[i]).cmp(&waited(&candidates[j])))
                .then(i.cmp(&j))
        })
        .map(|i| Pick {
            index: i,
            score: scores[i].0,
            interference: scores[i].1,
        })
}

/// How good another scheduler's pick was (the paper's Fig. 12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    /// As little interference as the activity scheduler's own pick.
    Good,
    /// Worse than that, at most half-way to the worst on offer.
    Moderate,
    /// More than half-way from the least to the most interference on offer.
    Poor,
}

/// Rates a pick with interference `picked`, when the activity scheduler's
/// pick had `activity` and the candidates offered `least..=most`.
pub fn classify(picked: f64, activity: f64, least: f64, most: f64) -> Quality {
    if picked <= activity {
        Quality::Good
    } else if most > least && picked > (least + most) / 2.0 {
        Quality::Poor
    } else {
        Quality::Moderate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::{max_level, PAPER_SUPER_SETS};
    use proptest::prelude::*;

    fn v(mask: u64) -> ActivityVector {
        ActivityVector::from_mask(mask, PAPER_SUPER_SETS)
    }

    const LO: u64 = 0x0000_ffff;
    const HI: u64 = 0xffff_0000;

    fn cand(runs: u64, profile: &[ActivityVector]) -> Candidate<'_> {
        Candidate {
            runs,
            last_ran: None,
            priority: 0,
            profile,
        }
    }

    #[test]
    fn picks_the_thread_whose_hot_half_is_the_other_one() {
        let (lo, hi) = ([v(LO)], [v(HI)]);
        let p = PairPicker::default();
        let cands = [cand(0, &lo), cand(0, &hi), cand(0, &lo)];
        let pick = p.pick(&cands, &[&lo], 0.0).unwrap().unwrap();
        assert_eq!((pick.index, pick.interference), (1, 0.0));
    }

    #[test]
    fn a_thread_far_behind_in_runs_wins_over_a_better_fit() {
        // Overlap 16 against 0, but 9 runs behind at 2 per run: 16 < 18.
        let (lo, hi) = ([v(LO)], [v(HI)]);
        let p = PairPicker::default();
        let cands = [cand(9, &hi), cand(0, &lo)];
        assert_eq!(p.pick(&cands, &[&lo], 0.0).unwrap().unwrap().index, 1);
        // 7 behind: 16 > 14, the fit wins.
        let cands = [cand(7, &hi), cand(0, &lo)];
        assert_eq!(p.pick(&cands, &[&lo], 0.0).unwrap().unwrap().index, 0);
    }

    #[test]
    fn fair_scorer_is_round_robin_by_runs_then_waiting() {
        let (lo, hi) = ([v(LO)], [v(HI)]);
        let p = PairPicker {
            scorer: Scorer::Fair,
            ..PairPicker::default()
        };
        let mut a = cand(3, &hi);
        let mut b = cand(3, &lo);
        a.last_ran = Some(5);
        b.last_ran = Some(2);
        assert_eq!(p.pick(&[a, b], &[&lo], 0.0).unwrap().unwrap().index, 1);
    }

    #[test]
    fn intensity_scorer_pairs_heavy_with_light_and_ignores_where() {
        let heavy = [v(u64::from(u32::MAX))];
        let light = [v(0b1)];
        let other_half_heavy = [v(HI)];
        let p = PairPicker {
            scorer: Scorer::Intensity,
            ..PairPicker::default()
        };
        // Mean intensity (32 + 1 + 16)/3: a heavy resident gets the light one.
        let mean = (32.0 + 1.0 + 16.0) / 3.0;
        let cands = [cand(0, &other_half_heavy), cand(0, &light)];
        assert_eq!(p.pick(&cands, &[&heavy], mean).unwrap().unwrap().index, 1);
    }

    #[test]
    fn linux_rule_keeps_the_default_unless_strictly_beaten() {
        let (lo, hi) = ([v(LO)], [v(HI)]);
        let p = PairPicker::default();
        let cands = [cand(0, &lo), cand(0, &hi), cand(0, &hi)];
        let over = |d| {
            p.pick_over_default(&cands, d, &[&lo], 0.0)
                .unwrap()
                .unwrap()
        };
        assert_eq!(over(0).index, 1, "the default overlaps: overridden");
        assert_eq!(over(2).index, 2, "a tie keeps the default");
    }

    #[test]
    fn removal_takes_the_most_run_then_the_longest_resident() {
        let r = |runs, since| Resident { runs, since };
        assert_eq!(removal(&[r(3, 0), r(5, 2)]), Some(1));
        assert_eq!(removal(&[r(5, 4), r(5, 2)]), Some(1));
        assert_eq!(removal(&[r(5, 2), r(5, 2)]), Some(0));
        assert_eq!(removal(&[]), None);
    }

    #[test]
    fn classify_matches_fig_12s_three_bands() {
        assert_eq!(classify(0.0, 0.0, 0.0, 16.0), Quality::Good);
        assert_eq!(classify(8.0, 0.0, 0.0, 16.0), Quality::Moderate);
        assert_eq!(classify(9.0, 0.0, 0.0, 16.0), Quality::Poor);
    }

    fn profile(bits: u8) -> impl Strategy<Value = Vec<ActivityVector>> {
        proptest::collection::vec(0..=max_level(bits), PAPER_SUPER_SETS)
            .prop_map(move |l| vec![ActivityVector::new(bits, l).unwrap()])
    }

    proptest! {
        #[test]
        fn the_pick_has_the_lowest_score_and_is_deterministic(
            bits in 1u8..=4,
            profiles in proptest::collection::vec(profile(4), 2..8),
            runs in proptest::collection::vec(0u64..20, 8),
            resident in profile(4),
        ) {
            // Requantize to `bits` by keeping the top bits.
            let cut = |p: &Vec<ActivityVector>| -> Vec<ActivityVector> {
                p.iter().map(|v| ActivityVector::new(
                    bits, v.levels().iter().map(|l| l >> (4 - bits)).collect()).unwrap()).collect()
            };
            let profiles: Vec<Vec<ActivityVector>> = profiles.iter().map(cut).collect();
            let resident = cut(&resident);
            let cands: Vec<Candidate<'_>> = profiles.iter().zip(&runs)
                .map(|(p, &r)| cand(r, p)).collect();
            let p = PairPicker::default();
            let scores = p.scores(&cands, &[&resident], 0.0).unwrap();
            let pick = p.pick(&cands, &[&resident], 0.0).unwrap().unwrap();
            prop_assert!(scores.iter().all(|&(s, _)| pick.score <= s));
            prop_assert_eq!(pick, p.pick(&cands, &[&resident], 0.0).unwrap().unwrap());
            // The fairness bound of the module doc: never more than
            // S·w_i/w_runs runs ahead of the least-run candidate.
            let fewest = runs[..cands.len()].iter().min().unwrap();
            let bound = PAPER_SUPER_SETS as f64 * p.weights.interference / p.weights.runs;
            prop_assert!((cands[pick.index].runs - fewest) as f64 <= bound);
        }

        #[test]
        fn no_thread_starves_under_remove_and_pick(
            masks in proptest::collection::vec(any::<u32>(), 3..9),
            contexts in 1usize..4,
            flips in proptest::collection::vec(any::<u32>(), 64),
        ) {
            // N threads with arbitrary (changing) one-bit vectors on one core:
            // each quantum one resident leaves and the picker refills. The
            // run counts of all threads stay within the picker's bound plus
            // the removal rule's slack.
            let n = masks.len();
            prop_assume!(contexts < n);
            let p = PairPicker::default();
            let mut vecs: Vec<Vec<ActivityVector>> =
                masks.iter().map(|&m| vec![v(u64::from(m))]).collect();
            let mut runs = vec![0u64; n];
            let mut since = vec![0u64; n];
            let mut resident: Vec<usize> = (0..contexts).collect();
            for (q, flip) in flips.iter().enumerate() {
                let q = q as u64;
                for &t in &resident { runs[t] += 1; }
                // Vectors change arbitrarily between quanta.
                let t = (*flip as usize) % n;
                vecs[t] = vec![v(u64::from(flip.rotate_left(q as u32)))];
                let rs: Vec<Resident> =
                    resident.iter().map(|&t| Resident { runs: runs[t], since: since[t] }).collect();
                let out = resident.remove(removal(&rs).unwrap());
                let pool: Vec<usize> = (0..n).filter(|t| !resident.contains(t)).collect();
                prop_assert!(pool.contains(&out));
                let cands: Vec<Candidate<'_>> =
                    pool.iter().map(|&t| cand(runs[t], &vecs[t])).collect();
                let co: Vec<&[ActivityVector]> = resident.iter().map(|&t| vecs[t].as_slice()).collect();
                let pick = p.pick(&cands, &co, 0.0).unwrap().unwrap();
                let chosen = pool[pick.index];
                if chosen != out { since[chosen] = q + 1; }
                resident.push(chosen);
                let spread = runs.iter().max().unwrap() - runs.iter().min().unwrap();
                let bound = (PAPER_SUPER_SETS * contexts) as u64 / 2 + 2 * contexts as u64 + 2;
                prop_assert!(spread <= bound, "spread {} > {} at quantum {}", spread, bound, q);
            }
        }
    }
}
