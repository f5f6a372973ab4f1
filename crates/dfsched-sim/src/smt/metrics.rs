//! What a run measures: ITKO and misses, relative throughput against each
//! thread's alone run ([`AloneTable`]), fairness, right pairing, Fig. 12's
//! decision quality, and the correlation study of Figs. 9–11.
//!
//! Relative throughput (§2.3, after Snavely & Tullsen) is, per quantum,
//! `Σ_contexts IPC_together / IPC_alone` = `Σ_contexts alone_cycles(work
//! done) / quantum`; a run's value is the mean over quanta, summed over
//! cores (at most `cores × contexts`). The alone cycles of a stretch of a
//! thread's accesses come from that thread run by itself on a core of its
//! own, warm, with the same timing model and no sibling slowdown, computed
//! once per workload and shared by every policy of a comparison.
//!
//! Invariant: every figure here is a pure function of the run's inputs.

use super::cache::SmtCache;
use super::config::SmtConfig;
use super::mapping::ThreadMap;
use super::workload::{Stream, Workload};
use dfsched_core::activity::Threshold;
use dfsched_core::smt_pair::Quality;
use serde::Serialize;

/// Fig. 12's three bands, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DecisionCounts {
    /// As good as the activity scheduler's pick.
    pub good: u64,
    /// In between.
    pub moderate: u64,
    /// Poor.
    pub poor: u64,
}

impl DecisionCounts {
    pub(super) fn add(&mut self, q: Quality) {
        match q {
            Quality::Good => self.good += 1,
            Quality::Moderate => self.moderate += 1,
            Quality::Poor => self.poor += 1,
        }
    }

    /// The share of poor decisions (0 with none).
    pub fn poor_share(&self) -> f64 {
        let n = self.good + self.moderate + self.poor;
        if n == 0 {
            0.0
        } else {
            self.poor as f64 / n as f64
        }
    }
}

/// One thread's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadReport {
    /// Its name.
    pub name: String,
    /// Quanta it ran.
    pub runs: u64,
    /// Accesses it made.
    pub accesses: u64,
    /// Its work valued in alone-cycles over the run's cycles.
    pub progress: f64,
    /// How much of the cache its vectors called hot: a vector hot
    /// everywhere (or nowhere) tells the picker nothing about where.
    pub vectors: VectorFill,
    /// Fig. 2: how concentrated its L2 requests were, quantum by quantum.
    pub concentration: Concentration,
}

/// Fig. 2 of the paper, for one thread: the share of the quanta it ran in
/// each class of concentration of its monitored L2 events. A quantum with
/// fewer events than the run's median over every thread's quanta is *low*
/// ("relatively unimportant"); otherwise it is *eighth* when 60 % or more
/// of its events fell in an eighth of the super-sets, *half* when in a
/// half (and not an eighth), else *spread* (§2.1: "the typical case for
/// 181.mcf"). The paper does not say whether a half is any half or a
/// contiguous one; here it is the busiest super-sets, wherever they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Concentration {
    /// Below the run's median activity.
    pub low: f64,
    /// Evenly spread: no half holds 60 % of the events.
    pub spread: f64,
    /// 60 % or more in a half of the super-sets, not in an eighth.
    pub half: f64,
    /// 60 % or more in an eighth of the super-sets.
    pub eighth: f64,
}

/// Where a quantum's events fell, before the run's median is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Focus {
    /// No half of the super-sets holds 60 % of them (or there were none).
    Even,
    /// A half does, no eighth.
    Half,
    /// An eighth does.
    Eighth,
}

impl Focus {
    /// Classifies one quantum's event counts per super-set: how many of
    /// the busiest it takes to hold 60 % of them (an eighth, at least one).
    pub(super) fn of(counts: &[u32]) -> Focus {
        let Some((needed, _)) = dfsched_core::activity::busiest_holding(counts, 60) else {
            return Focus::Even;
        };
        if needed <= (counts.len() / 8).max(1) {
            Focus::Eighth
        } else if needed <= (counts.len() / 2).max(1) {
            Focus::Half
        } else {
            Focus::Even
        }
    }
}

impl Concentration {
    /// Adds `o`'s shares to these (a sum over runs, to be scaled).
    pub(super) fn add(&mut self, o: &Concentration) {
        self.low += o.low;
        self.spread += o.spread;
        self.half += o.half;
        self.eighth += o.eighth;
    }

    /// Multiplies every share by `f`.
    pub(super) fn scale(&mut self, f: f64) {
        self.low *= f;
        self.spread *= f;
        self.half *= f;
        self.eighth *= f;
    }

    /// The shares of each thread's samples `(events, focus)`, a sample
    /// being low when its events are below the median of all of them.
    pub(super) fn of_run(samples: &[&[(u64, Focus)]]) -> Vec<Concentration> {
        let mut all: Vec<u64> = samples
            .iter()
            .flat_map(|ss| ss.iter().map(|s| s.0))
            .collect();
        all.sort_unstable();
        let median = all.get(all.len() / 2).copied().unwrap_or(0);
        samples
            .iter()
            .map(|ss| {
                let mut c = Concentration::default();
                if ss.is_empty() {
                    return c;
                }
                let one = 1.0 / ss.len() as f64;
                for &(events, focus) in *ss {
                    let slot = if events < median {
                        &mut c.low
                    } else {
                        match focus {
                            Focus::Even => &mut c.spread,
                            Focus::Half => &mut c.half,
                            Focus::Eighth => &mut c.eighth,
                        }
                    };
                    *slot += one;
                }
                c
            })
            .collect()
    }
}

/// How full a thread's activity vectors were, over the quanta it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct VectorFill {
    /// Mean share of the super-sets hot (at more than one bit: the mean
    /// level over the top level).
    pub mean_fill: f64,
    /// Share of its vectors hot in every super-set.
    pub all_hot: f64,
    /// Share of its vectors hot in none.
    pub none_hot: f64,
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// The policy.
    pub policy: String,
    /// Inter-thread kick-outs in the L2s: every fill that evicts another
    /// thread's line, running or not (choice 16 of docs/kihm.md).
    pub itko: u64,
    /// The part of `itko` between co-runners: the evicted line's owner was
    /// running on the same core (the sibling context) in that quantum. The
    /// rest is the displacement of descheduled threads' lines.
    pub itko_co_running: u64,
    /// Inter-thread kick-outs in the L1s.
    pub itko_l1: u64,
    /// L2 ITKO by super-set (summed over cores).
    pub itko_by_super_set: Vec<u64>,
    /// L2 misses on lines another thread had evicted.
    pub inter_thread_misses: u64,
    /// L2 misses.
    pub l2_misses: u64,
    /// L2 accesses.
    pub l2_accesses: u64,
    /// Mean over quanta of `Σ IPC_together / IPC_alone`, summed over cores.
    pub relative_throughput: f64,
    /// Contexts whose thread changed from one quantum to the next (the
    /// first quantum's fill not counted). Round robin and the paper's
    /// procedure change one context per core and quantum at most; a pick
    /// that keeps the thread it let go changes none.
    pub context_changes: u64,
    /// The largest lead in quanta run of one thread over another at the end
    /// of any quantum: the short-term fairness the runs weight trades for
    /// interference (choice 11 of docs/kihm.md).
    pub run_lead: u64,
    /// Jain's index of the threads' progress (1: all equal).
    pub fairness_jain: f64,
    /// Least over most progress.
    pub fairness_min_max: f64,
    /// Core-quanta whose residents were in different slices, over those
    /// with two or more labelled residents (`None`: no labels).
    pub right_pairing: Option<f64>,
    /// Fig. 12 quality of every context change.
    pub decisions: DecisionCounts,
    /// Figs. 9–11: how well misses predict ITKO per super-set.
    pub correlation: Correlation,
    /// Per thread.
    pub threads: Vec<ThreadReport>,
}

/// The cycles each thread's work costs it alone on a core.
#[derive(Clone, Debug)]
pub struct AloneTable {
    /// One per thread.
    refs: Vec<AloneRef>,
}

#[derive(Clone, Debug)]
struct AloneRef {
    /// The thread's stream from its start.
    stream: Stream,
    /// Its mapping.
    map: ThreadMap,
    /// Its own core's caches.
    l1: SmtCache,
    l2: SmtCache,
    /// `cum[i]`: cycles of the first `i` accesses, modulo 2^32 (only
    /// differences over less than 2^32 cycles are taken).
    cum: Vec<u32>,
}

impl AloneTable {
    /// The table of `workload` on `cfg`'s machine.
    pub fn new(cfg: &SmtConfig, workload: &Workload) -> Self {
        AloneTable {
            refs: workload
                .threads
                .iter()
                .enumerate()
                .map(|(i, t)| AloneRef {
                    stream: t.stream.clone(),
                    map: ThreadMap::new(cfg.mapping, cfg.seed, i as u16),
                    l1: SmtCache::new(cfg.l1, l1_super_sets(cfg)),
                    l2: SmtCache::new(cfg.l2, cfg.super_sets),
                    cum: vec![0],
                })
                .collect(),
        }
    }

    /// Alone cycles of thread `t`'s accesses `a0..a1`.
    pub fn cycles(&mut self, cfg: &SmtConfig, t: usize, a0: u64, a1: u64) -> u64 {
        let r = &mut self.refs[t];
        while (r.cum.len() as u64) <= a1 {
            let a = r.stream.next_access();
            let pa = r.map.translate(a.vaddr);
            let tm = &cfg.timing;
            let mut c = u64::from(a.instrs) * u64::from(tm.cpi);
            if !r.l1.access(pa, 0).hit {
                c += u64::from(if r.l2.access(pa, 0).hit {
                    tm.l2_hit_cycles
                } else {
                    tm.memory_cycles
                });
            }
            let last = *r.cum.last().expect("cum starts with 0");
            r.cum.push(last.wrapping_add(c as u32));
        }
        u64::from(r.cum[a1 as usize].wrapping_sub(r.cum[a0 as usize]))
    }
}

/// Super-sets of the L1 (fewer when it has fewer sets than super-sets).
pub(super) fn l1_super_sets(cfg: &SmtConfig) -> u32 {
    cfg.super_sets.min(cfg.l1.sets())
}

/// Pearson sums of one model against ITKO.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pearson {
    n: f64,
    x: f64,
    y: f64,
    xx: f64,
    yy: f64,
    xy: f64,
}

impl Pearson {
    pub(super) fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        self.x += x;
        self.y += y;
        self.xx += x * x;
        self.yy += y * y;
        self.xy += x * y;
    }

    /// The correlation coefficient (`None` when either side is constant).
    pub(super) fn r(&self) -> Option<f64> {
        let cov = self.n * self.xy - self.x * self.y;
        let vx = self.n * self.xx - self.x * self.x;
        let vy = self.n * self.yy - self.y * self.y;
        (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
    }
}

/// Figs. 9–11: per (two-context quantum, super-set) sample, L2 ITKO
/// against the two threads' L2 misses there.
#[derive(Clone, Debug, Default)]
pub(super) struct CorrelationSums {
    /// Against the sum of the two threads' misses.
    sum: Pearson,
    /// Against the smaller of the two.
    min: Pearson,
    /// Against the sum quantized to 1..=5 bits (§5.2's precision study).
    bits: [Pearson; 5],
}

impl CorrelationSums {
    pub(super) fn add(&mut self, a: &[u32], b: &[u32], itko: &[u64], cfg: &SmtConfig) {
        let hot = match cfg.threshold() {
            Threshold::Absolute { hot } => f64::from(hot),
            // A relative rule has no fixed scale per sample; the
            // super-set's lines stand in.
            Threshold::OfMean { .. } | Threshold::Majority { .. } => {
                (cfg.l2.lines() / u64::from(cfg.super_sets)) as f64
            }
        };
        for ((&x, &y), &k) in a.iter().zip(b).zip(itko) {
            let (sum, min, k) = (f64::from(x) + f64::from(y), f64::from(x.min(y)), k as f64);
            self.sum.add(sum, k);
            self.min.add(min, k);
            for (i, p) in self.bits.iter_mut().enumerate() {
                let levels = f64::from(1u32 << (i + 1)) - 1.0;
                let half = f64::from(1u32 << i);
                p.add((sum * half / hot).floor().min(levels), k);
            }
        }
    }

    pub(super) fn report(&self) -> Correlation {
        Correlation {
            samples: self.sum.n as u64,
            r_sum: self.sum.r(),
            r_min: self.min.r(),
            r_bits: self.bits.iter().map(Pearson::r).collect(),
        }
    }
}

/// The correlation studies of Figs. 9–11 over a run's two-context quanta.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Correlation {
    /// (quantum, super-set) samples.
    pub samples: u64,
    /// Pearson r of ITKO against the sum of the pair's L2 misses (Fig. 9
    /// left).
    pub r_sum: Option<f64>,
    /// … against the smaller of the two (Fig. 9 right).
    pub r_min: Option<f64>,
    /// … against the sum quantized to 1, 2, 3, 4, 5 bits (Fig. 11).
    pub r_bits: Vec<Option<f64>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantum_is_in_an_eighth_a_half_or_spread_by_its_busiest_super_sets() {
        let mut c = vec![1u32; 32];
        assert_eq!(Focus::of(&c), Focus::Even);
        assert_eq!(Focus::of(&[0; 32]), Focus::Even, "no event: nothing is hot");
        // 60 % exactly in 4 super-sets (an eighth of 32), wherever they are.
        c = vec![0; 32];
        for i in [1, 9, 17, 30] {
            c[i] = 15;
        }
        c[20..28].iter_mut().for_each(|x| *x = 5); // 40 elsewhere: 60 of 100
        assert_eq!(Focus::of(&c), Focus::Eighth, "{c:?}");
        c[20] += 1; // 60 of 101: no longer 60 %, but the busiest half holds all
        assert_eq!(Focus::of(&c), Focus::Half, "{c:?}");
        // Just under 60 % in the busiest eighth, over it in a half.
        let mut d = vec![0u32; 32];
        d[..4].iter_mut().for_each(|x| *x = 14); // 56
        d[4..16].iter_mut().for_each(|x| *x = 3); // 36
        d[16..].iter_mut().for_each(|x| *x = 1); // 16 → 56/108 < 60 %
        assert_eq!(Focus::of(&d), Focus::Half, "{d:?}");
    }

    #[test]
    fn a_sample_below_the_median_of_the_whole_run_is_low() {
        let s: [&[(u64, Focus)]; 3] = [
            &[(10, Focus::Eighth), (100, Focus::Eighth)],
            &[(100, Focus::Half), (100, Focus::Even)],
            &[],
        ];
        let c = Concentration::of_run(&s);
        // Median of 10, 100, 100, 100 is 100: only the 10 is low.
        assert_eq!(c[0].low, 0.5);
        assert_eq!(c[0].eighth, 0.5);
        assert_eq!((c[1].half, c[1].spread, c[1].low), (0.5, 0.5, 0.0));
        assert_eq!(c[2], Concentration::default(), "a thread that never ran");
    }
}
