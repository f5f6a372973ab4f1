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
    /// Inter-thread kick-outs in the L2s.
    pub itko: u64,
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
            // A mean-relative rule has no fixed scale per sample; the
            // super-set's lines stand in.
            Threshold::OfMean { .. } => (cfg.l2.lines() / u64::from(cfg.super_sets)) as f64,
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
