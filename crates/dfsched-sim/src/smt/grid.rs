//! The paper's grid of mixes (§4.1: "16 mixes of 4 SPEC2000 programs"),
//! here of traced programs: which mixes to run, and what the acceptance
//! reads off the comparisons (the mean ITKO cut and throughput gain
//! against round robin, the worst mix, and the share of an oracle's gain).
//!
//! The paper names neither its mixes nor how it chose them. [`balanced_mixes`]
//! picks them deterministically so that every program appears about
//! equally often and every pair of programs meets about equally often;
//! with no more combinations than asked for, all of them are taken.
//!
//! [`miss_curve`] says how much any pairing could change a program's
//! misses: its L2 misses alone, with the whole L2 and with the half and the
//! quarter of the ways that a co-runner leaves it.
//!
//! Pure: the comparisons are run by the caller (the CLI runs them in
//! parallel with a progress bar and draws the plot).

use super::cache::{LevelShape, SmtCache};
use super::compare::Comparison;
use super::config::SmtConfig;
use super::mapping::ThreadMap;
use super::metrics::{l1_super_sets, Concentration, RunReport};
use super::workload::ThreadSpec;
use serde::Serialize;
use std::collections::BTreeMap;

/// `count` mixes of `size` of the programs `0..programs`, each sorted, in
/// the order chosen. Greedy: each next mix is the unused combination whose
/// members have appeared least (sum of their appearances so far), then whose
/// pairs have met least, then the first in lexicographic order. Fewer than
/// `count` when there are fewer combinations; none when `size` is 0 or
/// more than `programs`.
pub fn balanced_mixes(programs: usize, size: usize, count: usize) -> Vec<Vec<usize>> {
    if size == 0 || size > programs {
        return Vec::new();
    }
    let mut combos = Vec::new();
    let mut idx: Vec<usize> = (0..size).collect();
    loop {
        combos.push(idx.clone());
        // Next combination in lexicographic order.
        let Some(i) = (0..size).rev().find(|&i| idx[i] < programs - size + i) else {
            break;
        };
        idx[i] += 1;
        for j in i + 1..size {
            idx[j] = idx[j - 1] + 1;
        }
    }
    if combos.len() <= count {
        return combos;
    }
    let mut uses = vec![0u64; programs];
    let mut met = vec![vec![0u64; programs]; programs];
    let mut taken = vec![false; combos.len()];
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let key = |c: &[usize]| {
            let u: u64 = c.iter().map(|&p| uses[p]).sum();
            let m: u64 = c
                .iter()
                .enumerate()
                .flat_map(|(i, &a)| c[i + 1..].iter().map(move |&b| (a, b)))
                .map(|(a, b)| met[a][b])
                .sum();
            (u, m)
        };
        let best = (0..combos.len())
            .filter(|&i| !taken[i])
            .min_by_key(|&i| (key(&combos[i]), i))
            .expect("more combinations than asked for");
        taken[best] = true;
        let c = &combos[best];
        for (i, &a) in c.iter().enumerate() {
            uses[a] += 1;
            for &b in &c[i + 1..] {
                met[a][b] += 1;
                met[b][a] += 1;
            }
        }
        out.push(c.clone());
    }
    out
}

/// One mix's ratios to round robin, per policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixRatios {
    /// The programs of the mix.
    pub programs: Vec<String>,
    /// L2 ITKO / round robin's − 1, per policy (negative: fewer kick-outs).
    pub itko_change: BTreeMap<String, f64>,
    /// The same of the ITKO between co-runners only
    /// ([`RunReport::itko_co_running`](crate::smt::metrics::RunReport)).
    pub co_running_itko_change: BTreeMap<String, f64>,
    /// Relative throughput / round robin's − 1, per policy.
    pub throughput_gain: BTreeMap<String, f64>,
    /// L2 misses (all of them, not only the inter-thread ones) / round
    /// robin's − 1, per policy: what the throughput follows.
    pub l2_miss_change: BTreeMap<String, f64>,
    /// Context changes per core and quantum, per policy (not a ratio: round
    /// robin's is one context per core and quantum).
    pub context_changes: BTreeMap<String, f64>,
    /// The largest lead in quanta run of one thread over another, per
    /// policy (not a ratio).
    pub run_lead: BTreeMap<String, u64>,
}

/// The mean, least and greatest of some values, with the mixes where the
/// extremes were seen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Mean over mixes.
    pub mean: f64,
    /// Least.
    pub min: f64,
    /// Index of the mix with the least.
    pub min_mix: usize,
    /// Greatest.
    pub max: f64,
    /// Index of the mix with the greatest.
    pub max_mix: usize,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        let (mut min_mix, mut max_mix) = (0, 0);
        for (i, &x) in v.iter().enumerate() {
            if x < v[min_mix] {
                min_mix = i;
            }
            if x > v[max_mix] {
                max_mix = i;
            }
        }
        Some(Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[min_mix],
            min_mix,
            max: v[max_mix],
            max_mix,
        })
    }
}

/// One policy over the grid of one mapping.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    /// ITKO / round robin's − 1 over the mixes.
    pub itko_change: Spread,
    /// ITKO between co-runners only / round robin's − 1 over the mixes.
    pub co_running_itko_change: Spread,
    /// Relative throughput / round robin's − 1 over the mixes.
    pub throughput_gain: Spread,
    /// L2 misses / round robin's − 1 over the mixes.
    pub l2_miss_change: Spread,
    /// Context changes per core and quantum over the mixes: how much of
    /// round robin's switching a policy keeps.
    pub context_changes: Spread,
    /// The largest lead in quanta run of one thread over another, over the
    /// mixes: the short-term fairness given up.
    pub run_lead: Spread,
    /// Mean throughput gain / the best static pairing's mean gain (None
    /// without that oracle or when its gain is not positive).
    pub share_of_best_static_gain: Option<f64>,
    /// Mean ITKO cut / the look-ahead oracle's mean cut (None without that
    /// oracle or when it cuts nothing).
    pub share_of_lookahead_itko_cut: Option<f64>,
}

/// The paper's policy against one control, mix by mix (the issue's
/// set-level rule: a claim needs the paper's policy ahead of both
/// intensity-only and shuffled vectors by more than the spread).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Paired {
    /// The paper's ITKO change minus the control's, over mixes (negative:
    /// the paper's policy kicks out fewer).
    pub itko_difference: Spread,
    /// The paper's throughput gain minus the control's (positive: the
    /// paper's policy is ahead).
    pub throughput_difference: Spread,
    /// Mixes where the paper's policy had fewer ITKO than the control.
    pub fewer_itko: usize,
    /// Mixes where it had the higher relative throughput.
    pub higher_throughput: usize,
}

/// The controls the paper's policy is paired with, when run.
pub const CONTROLS: [&str; 3] = ["intensity", "shuffled", "random"];

/// One program's activity vectors under the paper's policy, averaged over
/// the mixes it ran in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgramFill {
    /// Mixes it was in.
    pub mixes: usize,
    /// Mean share of its super-sets hot.
    pub mean_fill: f64,
    /// Mean share of its quanta whose vector was hot everywhere.
    pub all_hot: f64,
    /// Fig. 2's classes of its quanta, mean over the mixes.
    pub concentration: Concentration,
}

/// The grid of one mapping: each mix's ratios and each policy's summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GridSummary {
    /// Per mix, in grid order.
    pub mixes: Vec<MixRatios>,
    /// Per policy (round robin included: all zeros).
    pub policies: BTreeMap<String, PolicySummary>,
    /// The paper's policy (`kihm`) against each of [`CONTROLS`] that ran
    /// beside it.
    pub kihm_against: BTreeMap<String, Paired>,
    /// Per program, its vectors under `kihm`: full vectors (hot in every
    /// super-set) leave the picker nothing to tell threads apart by.
    pub vector_fill: BTreeMap<String, ProgramFill>,
}

/// Why a grid cannot be summarised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    /// No comparison.
    #[error("the grid has no mix")]
    Empty,
    /// A comparison lacks the baseline every ratio is taken against.
    #[error("mix {0} has no round-robin run (every ratio is taken against it)")]
    NoRoundRobin(usize),
    /// The mixes were not run with the same policies.
    #[error("mix {0} was not run with the policies of mix 0")]
    PoliciesDiffer(usize),
}

/// Summarises the comparisons of one mapping's grid (one per mix, all run
/// with the same policies, round robin among them).
pub fn summarise(runs: &[Comparison]) -> Result<GridSummary, GridError> {
    let first = runs.first().ok_or(GridError::Empty)?;
    let names = &first.order;
    let mut mixes = Vec::with_capacity(runs.len());
    for (i, c) in runs.iter().enumerate() {
        if &c.order != names {
            return Err(GridError::PoliciesDiffer(i));
        }
        let rr = c
            .policies
            .get("round-robin")
            .ok_or(GridError::NoRoundRobin(i))?;
        // Each policy's `get` over round robin's, − 1.
        let ratios = |get: fn(&RunReport) -> f64| -> BTreeMap<String, f64> {
            names
                .iter()
                .map(|n| {
                    let (x, base) = (get(&c.policies[n]), get(rr));
                    let r = if base > 0.0 { x / base - 1.0 } else { 0.0 };
                    (n.clone(), r)
                })
                .collect()
        };
        mixes.push(MixRatios {
            programs: c.threads.clone(),
            itko_change: ratios(|r| r.itko as f64),
            co_running_itko_change: ratios(|r| r.itko_co_running as f64),
            throughput_gain: ratios(|r| r.relative_throughput),
            l2_miss_change: ratios(|r| r.l2_misses as f64),
            context_changes: names
                .iter()
                .map(|n| {
                    let changes = c.policies[n].context_changes as f64;
                    (n.clone(), changes / c.config.switch_points() as f64)
                })
                .collect(),
            run_lead: names
                .iter()
                .map(|n| (n.clone(), c.policies[n].run_lead))
                .collect(),
        });
    }
    let column = |f: &dyn Fn(&MixRatios) -> f64| -> Vec<f64> { mixes.iter().map(f).collect() };
    let mean_gain = |n: &str| Spread::of(&column(&|m| m.throughput_gain[n])).map(|s| s.mean);
    let mean_cut = |n: &str| Spread::of(&column(&|m| -m.itko_change[n])).map(|s| s.mean);
    let oracle_gain = names
        .iter()
        .any(|n| n == "best-static")
        .then(|| mean_gain("best-static"))
        .flatten();
    let oracle_cut = names
        .iter()
        .any(|n| n == "lookahead")
        .then(|| mean_cut("lookahead"))
        .flatten();
    let mut policies = BTreeMap::new();
    for n in names {
        let share = |own: Option<f64>, oracle: Option<f64>| match (own, oracle) {
            (Some(o), Some(g)) if g > 0.0 => Some(o / g),
            _ => None,
        };
        policies.insert(
            n.clone(),
            PolicySummary {
                itko_change: Spread::of(&column(&|m| m.itko_change[n])).ok_or(GridError::Empty)?,
                co_running_itko_change: Spread::of(&column(&|m| m.co_running_itko_change[n]))
                    .ok_or(GridError::Empty)?,
                throughput_gain: Spread::of(&column(&|m| m.throughput_gain[n]))
                    .ok_or(GridError::Empty)?,
                l2_miss_change: Spread::of(&column(&|m| m.l2_miss_change[n]))
                    .ok_or(GridError::Empty)?,
                context_changes: Spread::of(&column(&|m| m.context_changes[n]))
                    .ok_or(GridError::Empty)?,
                run_lead: Spread::of(&column(&|m| m.run_lead[n] as f64)).ok_or(GridError::Empty)?,
                share_of_best_static_gain: share(mean_gain(n), oracle_gain),
                share_of_lookahead_itko_cut: share(mean_cut(n), oracle_cut),
            },
        );
    }
    let mut kihm_against = BTreeMap::new();
    if names.iter().any(|n| n == "kihm") {
        for control in CONTROLS {
            if !names.iter().any(|n| n == control) {
                continue;
            }
            let d_itko = column(&|m| m.itko_change["kihm"] - m.itko_change[control]);
            let d_thr = column(&|m| m.throughput_gain["kihm"] - m.throughput_gain[control]);
            kihm_against.insert(
                control.to_string(),
                Paired {
                    fewer_itko: d_itko.iter().filter(|&&d| d < 0.0).count(),
                    higher_throughput: d_thr.iter().filter(|&&d| d > 0.0).count(),
                    itko_difference: Spread::of(&d_itko).ok_or(GridError::Empty)?,
                    throughput_difference: Spread::of(&d_thr).ok_or(GridError::Empty)?,
                },
            );
        }
    }
    let mut vector_fill: BTreeMap<String, ProgramFill> = BTreeMap::new();
    for c in runs {
        let Some(k) = c.policies.get("kihm") else {
            continue;
        };
        for t in &k.threads {
            let f = vector_fill.entry(t.name.clone()).or_insert(ProgramFill {
                mixes: 0,
                mean_fill: 0.0,
                all_hot: 0.0,
                concentration: Concentration::default(),
            });
            f.mixes += 1;
            f.mean_fill += t.vectors.mean_fill;
            f.all_hot += t.vectors.all_hot;
            f.concentration.add(&t.concentration);
        }
    }
    for f in vector_fill.values_mut() {
        let n = f.mixes as f64;
        f.mean_fill /= n;
        f.all_hot /= n;
        f.concentration.scale(1.0 / n);
    }
    Ok(GridSummary {
        mixes,
        policies,
        kihm_against,
        vector_fill,
    })
}

/// One program's L2 misses alone at one L2 shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MissPoint {
    /// Ways of the L2 (its sets are the machine's).
    pub ways: u32,
    /// Its capacity in KiB.
    pub kib: u64,
    /// L2 misses per 1000 of the program's accesses.
    pub misses_per_kilo_access: f64,
}

/// A program's miss curve: its L2 misses alone on a core, with the
/// machine's L2 and with half and a quarter of its ways (the sets stay, so
/// each super-set keeps its place). A program whose misses hardly change
/// from the whole L2 to its half — one that fits in the half, or one that
/// streams through more than the whole — leaves a pairing nothing to save.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MissCurve {
    /// Accesses simulated: those the program makes alone in the run's
    /// length (`quanta · quantum_cycles`) with the whole L2.
    pub accesses: u64,
    /// Requests reaching the L2 (the L1's misses) per 1000 accesses.
    pub l2_requests_per_kilo_access: f64,
    /// Whole, half and quarter of the ways (fewer when the L2 has fewer).
    pub points: Vec<MissPoint>,
    /// Whether a co-runner can cost the program misses (see
    /// [`co_runner_sensitive`]).
    pub co_runner_sensitive: bool,
}

/// How many times as often a program must miss with the least share of the
/// L2 measured as with the whole of it to count as one a co-runner can
/// hurt (see [`co_runner_sensitive`]).
pub const SENSITIVE_FACTOR: f64 = 2.0;

/// The fewest misses per 1000 accesses, with the least share measured, of
/// a program a co-runner can hurt (see [`co_runner_sensitive`]).
pub const SENSITIVE_FLOOR: f64 = 1.0;

/// Whether a co-runner can cost a program with these miss points (whole L2
/// first) misses: with the least share measured (a quarter of the ways,
/// or a half on an L2 of 2–3 ways) it misses at least [`SENSITIVE_FACTOR`]
/// times as often as with the whole L2 and at least [`SENSITIVE_FLOOR`]
/// times per 1000 accesses. A program that fits in the quarter, or that
/// streams through more than the whole, is not: a pairing can save it
/// nothing. The rule (and its two numbers) was fixed on 2026-11-26 before
/// any grid ran on the programs it selects; it is how `sim smt --grid
/// paper --grid-programs sensitive` picks the programs its mixes draw on,
/// as the paper's SPEC2000 programs were memory-bound ones.
pub fn co_runner_sensitive(points: &[MissPoint]) -> bool {
    match points {
        [whole, .., least] => {
            least.misses_per_kilo_access >= SENSITIVE_FLOOR
                && least.misses_per_kilo_access >= SENSITIVE_FACTOR * whole.misses_per_kilo_access
        }
        _ => false,
    }
}

/// `spec` run alone (thread `index` of the mapping) on `cfg`'s core with
/// the L2 at full, half and quarter ways, on one pass of its stream: the
/// L1 is the same for all, the clock is the full L2's.
pub fn miss_curve(cfg: &SmtConfig, index: u16, spec: &ThreadSpec) -> MissCurve {
    let mut stream = spec.stream.clone();
    let map = ThreadMap::new(cfg.mapping, cfg.seed, index);
    let mut l1 = SmtCache::new(cfg.l1, l1_super_sets(cfg));
    let shapes: Vec<LevelShape> = [1, 2, 4]
        .iter()
        .filter(|&&d| cfg.l2.ways >= d && cfg.l2.ways.is_multiple_of(d))
        .map(|&d| LevelShape {
            ways: cfg.l2.ways / d,
            bytes: cfg.l2.bytes / u64::from(d),
            ..cfg.l2
        })
        .collect();
    let mut l2s: Vec<SmtCache> = shapes
        .iter()
        .map(|&s| SmtCache::new(s, cfg.super_sets))
        .collect();
    let mut misses = vec![0u64; shapes.len()];
    let (mut accesses, mut requests, mut cycles) = (0u64, 0u64, 0u64);
    let tm = cfg.timing;
    let budget = u64::from(cfg.quanta) * cfg.quantum_cycles;
    while cycles < budget {
        let a = stream.next_access();
        let pa = map.translate(a.vaddr);
        accesses += 1;
        cycles += u64::from(a.instrs) * u64::from(tm.cpi);
        if l1.access(pa, 0).hit {
            continue;
        }
        requests += 1;
        for (i, l2) in l2s.iter_mut().enumerate() {
            let hit = l2.access(pa, 0).hit;
            misses[i] += u64::from(!hit);
            if i == 0 {
                cycles += u64::from(if hit {
                    tm.l2_hit_cycles
                } else {
                    tm.memory_cycles
                });
            }
        }
    }
    let per_kilo = |x: u64| x as f64 * 1000.0 / accesses.max(1) as f64;
    let points: Vec<MissPoint> = shapes
        .iter()
        .zip(&misses)
        .map(|(s, &m)| MissPoint {
            ways: s.ways,
            kib: s.bytes >> 10,
            misses_per_kilo_access: per_kilo(m),
        })
        .collect();
    MissCurve {
        accesses,
        l2_requests_per_kilo_access: per_kilo(requests),
        co_runner_sensitive: co_runner_sensitive(&points),
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairing with the controls is the per-mix difference of the
    /// policies' own ratios, and the fill the mean of the runs' own.
    #[test]
    fn kihm_is_paired_with_each_control_mix_by_mix_and_fill_is_averaged() {
        use crate::smt::compare::{compare, PolicyChoice};
        use crate::smt::config::SmtConfig;
        use crate::smt::workload;
        let cfg = SmtConfig {
            quanta: 12,
            ..SmtConfig::quarter()
        };
        let runs: Vec<Comparison> = [
            "slice0/2,slice1/2,slice0/2,slice1/2",
            "phased,phased,uniform,light",
        ]
        .iter()
        .map(|spec| {
            let w = workload::mix(&cfg.kernel_shape(4), spec, 1).unwrap();
            let p = [
                PolicyChoice::Kihm,
                PolicyChoice::RoundRobin,
                PolicyChoice::Shuffled,
                PolicyChoice::Random,
            ];
            compare(&cfg, &w, &p, |_| {}).unwrap()
        })
        .collect();
        let g = summarise(&runs).unwrap();
        assert_eq!(
            g.kihm_against.keys().collect::<Vec<_>>(),
            ["random", "shuffled"],
            "intensity did not run"
        );
        for (control, p) in &g.kihm_against {
            let d: Vec<f64> = g
                .mixes
                .iter()
                .map(|m| m.itko_change["kihm"] - m.itko_change[control])
                .collect();
            assert_eq!(p.itko_difference, Spread::of(&d).unwrap(), "{control}");
            assert_eq!(p.fewer_itko, d.iter().filter(|&&x| x < 0.0).count());
            let t: Vec<f64> = g
                .mixes
                .iter()
                .map(|m| m.throughput_gain["kihm"] - m.throughput_gain[control])
                .collect();
            assert_eq!(p.throughput_difference, Spread::of(&t).unwrap());
            assert_eq!(p.higher_throughput, t.iter().filter(|&&x| x > 0.0).count());
        }
        // The co-runners' share of the ITKO, as a ratio like the others (0
        // where round robin has none: in the first mix it pairs right, and
        // all its kick-outs are of descheduled threads' lines).
        let mut with_base = 0;
        for (m, c) in g.mixes.iter().zip(&runs) {
            let rr = c.policies["round-robin"].itko_co_running as f64;
            let k = c.policies["kihm"].itko_co_running as f64;
            let want = if rr > 0.0 { k / rr - 1.0 } else { 0.0 };
            with_base += usize::from(rr > 0.0);
            assert_eq!(m.co_running_itko_change["kihm"], want);
            assert_eq!(m.co_running_itko_change["round-robin"], 0.0);
        }
        assert!(
            with_base > 0,
            "a mix where round robin's co-runners kick out"
        );
        let k: Vec<f64> = g
            .mixes
            .iter()
            .map(|m| m.co_running_itko_change["kihm"])
            .collect();
        assert_eq!(
            g.policies["kihm"].co_running_itko_change,
            Spread::of(&k).unwrap()
        );
        // Switching is per core and quantum after the first, and the lead
        // is the run's own; round robin changes one context per quantum.
        for (m, c) in g.mixes.iter().zip(&runs) {
            for (n, r) in &c.policies {
                assert_eq!(m.context_changes[n], r.context_changes as f64 / 11.0);
                assert_eq!(m.run_lead[n], r.run_lead);
            }
            assert_eq!(m.context_changes["round-robin"], 1.0);
        }
        let leads: Vec<f64> = g.mixes.iter().map(|m| m.run_lead["kihm"] as f64).collect();
        assert_eq!(g.policies["kihm"].run_lead, Spread::of(&leads).unwrap());
        // Every thread name of the two mixes, each from the one mix it ran in.
        let names: usize = runs.iter().map(|c| c.threads.len()).sum();
        assert_eq!(g.vector_fill.len(), names);
        for c in &runs {
            for t in &c.policies["kihm"].threads {
                let f = &g.vector_fill[&t.name];
                assert_eq!(f.mixes, 1);
                assert_eq!(f.mean_fill, t.vectors.mean_fill);
                assert_eq!(f.all_hot, t.vectors.all_hot);
                assert_eq!(f.concentration, t.concentration);
            }
        }
        // The complementary mix's threads fill half their vectors.
        assert!(g
            .vector_fill
            .values()
            .any(|f| (0.45..=0.55).contains(&f.mean_fill)));
    }

    /// A thread that fits its half of the cache with the whole L2 misses
    /// only while it warms up there, and far more with half the ways (¾ of
    /// a slice's lines in a quarter of them per set); an LRU cache of fewer
    /// ways and the same sets never misses less (the stack property).
    #[test]
    fn a_co_runner_sensitive_program_misses_twice_as_often_and_at_least_once_per_thousand_on_a_quarter(
    ) {
        let curve = |m: &[f64]| -> Vec<MissPoint> {
            m.iter()
                .zip([8u32, 4, 2])
                .map(|(&x, ways)| MissPoint {
                    ways,
                    kib: 64 * u64::from(ways),
                    misses_per_kilo_access: x,
                })
                .collect()
        };
        for (m, sensitive, why) in [
            (
                &[0.1, 0.1, 18.9][..],
                true,
                "fits the half, not the quarter",
            ),
            (&[1.1, 2.7, 6.8][..], true, "grows with every way lost"),
            (&[0.0, 0.0, 1.0][..], true, "at the floor"),
            (&[5.0, 6.0, 10.0][..], true, "exactly twice"),
            (&[5.0, 6.0, 9.9][..], false, "less than twice"),
            (&[0.0, 0.0, 0.9][..], false, "under the floor"),
            (&[20.8, 20.8, 20.8][..], false, "streams: flat"),
            (&[169.3, 250.9, 291.7][..], false, "thrashes alone already"),
            (
                &[0.0, 4.0][..],
                true,
                "a 2-way L2: the half is the least share",
            ),
            (&[3.0][..], false, "one point: nothing to compare"),
            (&[][..], false, "no point"),
        ] {
            assert_eq!(co_runner_sensitive(&curve(m)), sensitive, "{why}: {m:?}");
        }
    }

    #[test]
    fn a_thread_that_fits_the_l2_misses_when_a_co_runner_takes_half_the_ways() {
        use crate::smt::workload;
        let cfg = SmtConfig {
            quanta: 20,
            ..SmtConfig::quarter()
        };
        let w = workload::mix(&cfg.kernel_shape(4), "slice0/2,light", 1).unwrap();
        let fits = miss_curve(&cfg, 0, &w.threads[0]);
        let ways: Vec<u32> = fits.points.iter().map(|p| p.ways).collect();
        assert_eq!(ways, [8, 4, 2]);
        assert_eq!(fits.points[1].kib, cfg.l2.bytes >> 11);
        let m: Vec<f64> = fits
            .points
            .iter()
            .map(|p| p.misses_per_kilo_access)
            .collect();
        assert!(m.windows(2).all(|w| w[0] <= w[1]), "{m:?}");
        // Cold misses only: the working set's lines once, over the run.
        let lines = (cfg.l2.lines() / 2) as f64 * 0.75;
        let cold = lines * 1000.0 / fits.accesses as f64;
        assert!(fits.accesses > 100_000, "{fits:?}");
        assert!(m[0] <= cold * 1.01, "{m:?} vs cold {cold}");
        assert!(m[1] > 20.0 * m[0], "{m:?}");
        assert!(fits.l2_requests_per_kilo_access >= m[0]);
        assert!(fits.co_runner_sensitive, "{fits:?}");
        // The light thread fits in the L1's share of the L2 and then some:
        // no co-runner can cost it misses.
        let light = miss_curve(&cfg, 1, &w.threads[1]);
        assert!(!light.co_runner_sensitive, "{light:?}");
        // Deterministic, and the same as a run of the whole machine sees:
        // one thread alone on a one-context core under round robin.
        assert_eq!(fits, miss_curve(&cfg, 0, &w.threads[0]));
        let alone = crate::smt::compare::compare(
            &SmtConfig {
                contexts: 1,
                ..cfg.clone()
            },
            &workload::Workload {
                name: "one".into(),
                threads: vec![w.threads[0].clone()],
            },
            &[crate::smt::compare::PolicyChoice::RoundRobin],
            |_| {},
        )
        .unwrap();
        let rr = &alone.policies["round-robin"];
        let per_kilo = rr.l2_misses as f64 * 1000.0 / rr.threads[0].accesses as f64;
        assert!(
            (per_kilo - m[0]).abs() <= 0.05 * m[0] + 0.01,
            "{per_kilo} vs {m:?}"
        );
    }

    #[test]
    fn few_programs_give_every_combination() {
        assert_eq!(balanced_mixes(4, 4, 16), vec![vec![0, 1, 2, 3]]);
        assert_eq!(balanced_mixes(5, 4, 16).len(), 5);
        assert!(balanced_mixes(3, 4, 16).is_empty());
        assert!(balanced_mixes(3, 0, 16).is_empty());
    }

    #[test]
    fn sixteen_mixes_of_seven_programs_are_distinct_and_balanced() {
        let m = balanced_mixes(7, 4, 16);
        assert_eq!(m.len(), 16);
        let set: std::collections::BTreeSet<_> = m.iter().cloned().collect();
        assert_eq!(set.len(), 16, "no mix twice");
        let mut uses = [0; 7];
        for mix in &m {
            assert_eq!(mix.len(), 4);
            assert!(mix.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
            for &p in mix {
                uses[p] += 1;
            }
        }
        // 64 slots over 7 programs: 9 or 10 each.
        let (lo, hi) = (uses.iter().min().unwrap(), uses.iter().max().unwrap());
        assert!(hi - lo <= 1, "{uses:?}");
        assert_eq!(m, balanced_mixes(7, 4, 16), "deterministic");
    }

    #[test]
    fn mixes_of_ten_programs_balance_uses_too() {
        let m = balanced_mixes(10, 4, 16);
        let mut uses = [0; 10];
        for mix in &m {
            for &p in mix {
                uses[p] += 1;
            }
        }
        let (lo, hi) = (uses.iter().min().unwrap(), uses.iter().max().unwrap());
        assert!(hi - lo <= 1, "{uses:?}");
    }
}
