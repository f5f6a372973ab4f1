//! Profile-guided placement on SMT siblings: the decision of the `smt-pair`
//! runtime policy (Kihm et al. §4.2, the Linux prototype that took its
//! vectors from offline Valgrind profiles).
//!
//! A [`SmtProfile`] holds, per thread of a program (in creation order: the
//! main thread first), one activity vector per interval of that thread's
//! own CPU time. At run time each thread's vector is looked up by the CPU
//! time it has used so far ([`SmtProfile::vector_at`]: "aligned at run
//! time"), and [`sibling_groups`] puts the threads into groups of one core's
//! width with the least summed interference, scored exactly as the
//! simulator's picker scores a pair ([`PairPicker::interference`]; the
//! runs and priority terms do not apply to a placement). [`place`] then
//! gives each group a core and each member one of its sibling CPUs.
//!
//! Invariants: every thread is in exactly one group; a group is never
//! wider than the core it gets; a thread without a vector (unprofiled, or
//! a profile with no interval) interferes with nobody, so it fills in
//! wherever the others leave room. Pure: the runtime reads the profile
//! file, the CPU times and the topology and applies the affinities.
//!
//! One pass of the policy, whoever runs it (`dfsched smt-pair` against a
//! process, or the `smt-pair` policy of the preloaded runtime from its
//! balancer thread), is [`SmtPlacer::plan`]:
//!
//! ```text
//!  threads (creation order, CPU time) ──► vector_at ──► sibling_groups ──► place
//!  SmtProfile (checked: validate)            │              (least overlap)   │
//!  topology ──► sibling_cores ───────────────┴────────────────────────────────┘
//!                                                        (thread, one CPU) each
//! ```
//!
//! The same inputs give the same placement, so a pass whose threads have
//! not moved to another interval places every thread where the last one
//! did (the body then has nothing to change).

use crate::activity::{ActivityError, ActivityVector, Overlap, MAX_BITS};
use crate::ids::CpuId;
use crate::smt_pair::{PairPicker, Scorer};
use crate::topology::{Level, Topology};
use serde::{Deserialize, Serialize};

/// Why a profile is refused by [`SmtProfile::validate`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// No interval length.
    #[error("interval_instructions is 0")]
    ZeroInterval,
    /// A rate that converts no CPU time to a position.
    #[error("ns_per_instruction is {0}: it must be a finite number above 0")]
    BadRate(f64),
    /// Bits outside `1..=8`.
    #[error("bits is {0}: it must be 1 to {MAX_BITS}")]
    BadBits(u8),
    /// No super-set.
    #[error("super_sets is 0")]
    NoSuperSets,
    /// No thread.
    #[error("the profile has no thread")]
    NoThreads,
    /// A vector unlike the header, or with a level above its bits.
    #[error("thread {thread}, interval {interval}: {reason}")]
    BadVector {
        /// The thread's index.
        thread: usize,
        /// The interval's index.
        interval: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// One thread's vectors, one per interval of its CPU time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadProfile {
    /// Instructions the thread executed in the profile.
    pub instructions: u64,
    /// One vector per interval (the last may cover less than a whole one).
    pub vectors: Vec<ActivityVector>,
}

/// A program's profile (what `dfsched profile` writes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SmtProfile {
    /// The profiled command line.
    pub command: Vec<String>,
    /// Instructions per interval (the paper: 50 M).
    pub interval_instructions: u64,
    /// Nanoseconds of CPU time per instruction, measured on this machine by
    /// a run of the program outside Valgrind: converts a thread's CPU time
    /// to its position in the profile.
    pub ns_per_instruction: f64,
    /// Bits per super-set of the vectors.
    pub bits: u8,
    /// Super-sets per vector.
    pub super_sets: usize,
    /// The threads, in creation order (Valgrind's thread 1, 2, …).
    pub threads: Vec<ThreadProfile>,
}

impl SmtProfile {
    /// Checks what a profile file's JSON cannot: an interval and a rate
    /// above 0, `1..=8` bits, at least one super-set and one thread, and
    /// every vector of the header's width and super-sets with levels that
    /// fit its bits (a vector deserialized from a file is not checked as
    /// [`ActivityVector::new`] checks one). A body checks a profile once,
    /// before its first placement, so that a garbled file is refused at
    /// start rather than mid-run.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.interval_instructions == 0 {
            return Err(ProfileError::ZeroInterval);
        }
        if !(self.ns_per_instruction.is_finite() && self.ns_per_instruction > 0.0) {
            return Err(ProfileError::BadRate(self.ns_per_instruction));
        }
        if !(1..=MAX_BITS).contains(&self.bits) {
            return Err(ProfileError::BadBits(self.bits));
        }
        if self.super_sets == 0 {
            return Err(ProfileError::NoSuperSets);
        }
        if self.threads.is_empty() {
            return Err(ProfileError::NoThreads);
        }
        for (thread, t) in self.threads.iter().enumerate() {
            for (interval, v) in t.vectors.iter().enumerate() {
                let bad = |reason: String| ProfileError::BadVector {
                    thread,
                    interval,
                    reason,
                };
                if v.bits() != self.bits || v.super_sets() != self.super_sets {
                    return Err(bad(format!(
                        "{} bits over {} super-sets, the header says {} over {}",
                        v.bits(),
                        v.super_sets(),
                        self.bits,
                        self.super_sets
                    )));
                }
                ActivityVector::new(v.bits(), v.levels().to_vec())
                    .map_err(|e| bad(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// CPU time of one interval, in nanoseconds (at least 1).
    pub fn interval_ns(&self) -> u64 {
        ((self.interval_instructions as f64 * self.ns_per_instruction).round() as u64).max(1)
    }

    /// The vector of the `thread`-th thread after `cpu_ns` of CPU time: the
    /// interval it is in, or the last one once it has run longer than in
    /// the profile. `None` for a thread the profile does not have or that
    /// has no interval.
    pub fn vector_at(&self, thread: usize, cpu_ns: u64) -> Option<&ActivityVector> {
        let t = self.threads.get(thread)?;
        let i = (cpu_ns / self.interval_ns()) as usize;
        t.vectors.get(i.min(t.vectors.len().checked_sub(1)?))
    }
}

/// The SMT cores of `topology`: each `Core` domain of two or more CPUs, as
/// its CPUs in order, in the topology's domain order. Empty on a machine
/// without SMT (or whose allowed CPUs hold one sibling of each core: a
/// restricted topology's cores shrink with it).
pub fn sibling_cores(topology: &Topology) -> Vec<Vec<CpuId>> {
    topology
        .domains()
        .iter()
        .filter(|d| d.level == Level::Core && d.cpus.len() >= 2)
        .map(|d| d.cpus.iter().collect())
        .collect()
}

/// A thread at run time, as the body sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Its place in creation order among the program's live threads: the
    /// index of its profile (the main thread 0).
    pub index: usize,
    /// The CPU time it has used, in nanoseconds: where it is in its profile.
    pub cpu_ns: u64,
}

/// The `smt-pair` policy: a checked profile and the paper's overlap
/// measure. Both bodies (`dfsched smt-pair`, the runtime's policy) decide
/// through it.
#[derive(Clone, Debug)]
pub struct SmtPlacer {
    profile: SmtProfile,
    picker: PairPicker,
}

impl SmtPlacer {
    /// The policy over `profile` (checked with [`SmtProfile::validate`]),
    /// scoring a pair by the paper's overlap of the less active thread
    /// (`min`, choice 8 of `docs/kihm.md`; the runs and priority terms of
    /// the simulator's picker do not apply to a placement).
    pub fn new(profile: SmtProfile) -> Result<Self, ProfileError> {
        profile.validate()?;
        Ok(SmtPlacer {
            profile,
            picker: PairPicker {
                scorer: Scorer::Overlap(Overlap::Min),
                ..PairPicker::default()
            },
        })
    }

    /// The profile.
    pub fn profile(&self) -> &SmtProfile {
        &self.profile
    }

    /// One pass: each thread's vector at its CPU time, the least-overlap
    /// groups of one core's width, each group on one core's siblings.
    /// Returns `(i, cpu)` for every `threads[i]`, each exactly once, every
    /// CPU one of `cores`'. Empty when `cores` is.
    pub fn plan(
        &self,
        threads: &[Position],
        cores: &[Vec<CpuId>],
    ) -> Result<Vec<(usize, CpuId)>, ActivityError> {
        let vectors: Vec<_> = threads
            .iter()
            .map(|t| self.profile.vector_at(t.index, t.cpu_ns))
            .collect();
        let groups = sibling_groups(&vectors, &self.picker)?;
        Ok(place(&groups, cores))
    }
}

/// Most threads [`sibling_groups`] pairs exactly (10,395 pairings of 12);
/// beyond, it pairs greedily.
pub const EXACT_LIMIT: usize = 12;

fn cost(
    picker: &PairPicker,
    a: Option<&ActivityVector>,
    b: Option<&ActivityVector>,
) -> Result<f64, ActivityError> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let co: &[ActivityVector] = std::slice::from_ref(b);
            picker.interference(std::slice::from_ref(a), &[co], 0.0)
        }
        _ => Ok(0.0),
    }
}

/// The threads (by index into `vectors`) in pairs, the last a single when
/// their number is odd, with the least summed interference under `picker`
/// (use a picker with `Scorer::Overlap`: the paper's measure). Exact up to
/// [`EXACT_LIMIT`] threads, greedy (cheapest pair first) beyond. Ties go to
/// the lower indices, so the result is deterministic.
pub fn sibling_groups(
    vectors: &[Option<&ActivityVector>],
    picker: &PairPicker,
) -> Result<Vec<Vec<usize>>, ActivityError> {
    let n = vectors.len();
    let mut c = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            c[i][j] = cost(picker, vectors[i], vectors[j])?;
            c[j][i] = c[i][j];
        }
    }
    if n <= EXACT_LIMIT {
        return Ok(exact(&c));
    }
    let mut pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect();
    pairs.sort_by(|&(a, b), &(x, y)| c[a][b].total_cmp(&c[x][y]).then((a, b).cmp(&(x, y))));
    let mut used = vec![false; n];
    let mut out = Vec::new();
    for (a, b) in pairs {
        if !used[a] && !used[b] {
            used[a] = true;
            used[b] = true;
            out.push(vec![a, b]);
        }
    }
    out.extend((0..n).filter(|&i| !used[i]).map(|i| vec![i]));
    Ok(out)
}

/// Minimum-cost pairing by trying every one (the first unpaired thread
/// with each other, recursively; an odd one out is tried at every place).
fn exact(c: &[Vec<f64>]) -> Vec<Vec<usize>> {
    fn rec(
        left: &[usize],
        c: &[Vec<f64>],
        acc: &mut Vec<Vec<usize>>,
        sum: f64,
        best: &mut Option<(f64, Vec<Vec<usize>>)>,
    ) {
        let Some((&first, rest)) = left.split_first() else {
            if best.as_ref().is_none_or(|(b, _)| sum < *b) {
                *best = Some((sum, acc.clone()));
            }
            return;
        };
        if best.as_ref().is_some_and(|(b, _)| sum >= *b) {
            return;
        }
        // An odd count leaves one single: `first` may be it.
        if left.len() % 2 == 1 {
            acc.push(vec![first]);
            rec(rest, c, acc, sum, best);
            acc.pop();
        }
        for (k, &other) in rest.iter().enumerate() {
            let others: Vec<usize> = rest
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != k)
                .map(|(_, &t)| t)
                .collect();
            acc.push(vec![first, other]);
            rec(&others, c, acc, sum + c[first][other], best);
            acc.pop();
        }
    }
    let all: Vec<usize> = (0..c.len()).collect();
    let mut best = None;
    rec(&all, c, &mut Vec::new(), 0.0, &mut best);
    best.map_or_else(Vec::new, |(_, g)| g)
}

/// Each member of each group on one CPU: group `g` on core `g mod
/// cores.len()`, its `i`-th member on that core's `i`-th sibling. With more
/// groups than cores, groups share cores (the kernel time-shares them);
/// a group wider than its core wraps around its siblings. Empty when there
/// is no core.
pub fn place(groups: &[Vec<usize>], cores: &[Vec<CpuId>]) -> Vec<(usize, CpuId)> {
    let cores: Vec<&Vec<CpuId>> = cores.iter().filter(|c| !c.is_empty()).collect();
    if cores.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (g, members) in groups.iter().enumerate() {
        let core = cores[g % cores.len()];
        for (i, &t) in members.iter().enumerate() {
            out.push((t, core[i % core.len()]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::{Overlap, PAPER_SUPER_SETS};
    use crate::smt_pair::Scorer;
    use proptest::prelude::*;

    fn v(mask: u64) -> ActivityVector {
        ActivityVector::from_mask(mask, PAPER_SUPER_SETS)
    }

    fn picker() -> PairPicker {
        PairPicker {
            scorer: Scorer::Overlap(Overlap::Min),
            ..PairPicker::default()
        }
    }

    const LO: u64 = 0x0000_ffff;
    const HI: u64 = 0xffff_0000;

    #[test]
    fn complementary_threads_pair_low_with_high() {
        let (a, b, c, d) = (v(LO), v(LO), v(HI), v(HI));
        let g = sibling_groups(&[Some(&a), Some(&b), Some(&c), Some(&d)], &picker()).unwrap();
        assert_eq!(g, vec![vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn an_odd_thread_out_is_the_one_that_fits_nobody() {
        // Three low threads and one high: the high one pairs with a low
        // one, the two other lows cannot both be paired well: one of them
        // stays single rather than sharing a core with the other.
        let (l, h) = (v(LO), v(HI));
        let g = sibling_groups(&[Some(&l), Some(&l), Some(&h)], &picker()).unwrap();
        let mut sizes: Vec<usize> = g.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![1, 2]);
        assert!(g.iter().any(|p| p.len() == 2 && p.contains(&2)), "{g:?}");
    }

    #[test]
    fn profile_lookup_follows_cpu_time_and_keeps_the_last_interval() {
        let p = SmtProfile {
            command: vec!["x".into()],
            interval_instructions: 1000,
            ns_per_instruction: 0.5,
            bits: 1,
            super_sets: PAPER_SUPER_SETS,
            threads: vec![
                ThreadProfile {
                    instructions: 2500,
                    vectors: vec![v(LO), v(HI), v(LO)],
                },
                ThreadProfile {
                    instructions: 0,
                    vectors: vec![],
                },
            ],
        };
        assert_eq!(p.interval_ns(), 500);
        assert_eq!(p.vector_at(0, 0), Some(&v(LO)));
        assert_eq!(p.vector_at(0, 499), Some(&v(LO)));
        assert_eq!(p.vector_at(0, 500), Some(&v(HI)));
        assert_eq!(
            p.vector_at(0, 1_000_000),
            Some(&v(LO)),
            "past the end: last"
        );
        assert_eq!(p.vector_at(1, 0), None, "no interval");
        assert_eq!(p.vector_at(2, 0), None, "not in the profile");
    }

    #[test]
    fn place_puts_each_group_on_one_cores_siblings() {
        let cores = vec![vec![CpuId(0), CpuId(1)], vec![CpuId(2), CpuId(3)]];
        let p = place(&[vec![0, 2], vec![1, 3], vec![4]], &cores);
        assert_eq!(
            p,
            vec![
                (0, CpuId(0)),
                (2, CpuId(1)),
                (1, CpuId(2)),
                (3, CpuId(3)),
                (4, CpuId(0))
            ]
        );
        assert!(place(&[vec![0]], &[]).is_empty());
    }

    fn profile(threads: Vec<Vec<ActivityVector>>) -> SmtProfile {
        SmtProfile {
            command: vec!["x".into()],
            interval_instructions: 1000,
            ns_per_instruction: 1.0,
            bits: 1,
            super_sets: PAPER_SUPER_SETS,
            threads: threads
                .into_iter()
                .map(|vectors| ThreadProfile {
                    instructions: 1000 * vectors.len() as u64,
                    vectors,
                })
                .collect(),
        }
    }

    #[test]
    fn validate_refuses_each_kind_of_garbled_profile() {
        let good = profile(vec![vec![v(LO)], vec![]]);
        assert_eq!(good.validate(), Ok(()));
        let mut p = good.clone();
        p.interval_instructions = 0;
        assert_eq!(p.validate(), Err(ProfileError::ZeroInterval));
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut p = good.clone();
            p.ns_per_instruction = rate;
            assert!(
                matches!(p.validate(), Err(ProfileError::BadRate(_))),
                "{rate}"
            );
        }
        let mut p = good.clone();
        p.bits = 0;
        assert_eq!(p.validate(), Err(ProfileError::BadBits(0)));
        let mut p = good.clone();
        p.super_sets = 0;
        assert_eq!(p.validate(), Err(ProfileError::NoSuperSets));
        assert_eq!(profile(vec![]).validate(), Err(ProfileError::NoThreads));
        // A vector of another shape than the header's.
        let p = profile(vec![vec![ActivityVector::from_mask(LO, 16)]]);
        assert!(matches!(
            p.validate(),
            Err(ProfileError::BadVector {
                thread: 0,
                interval: 0,
                ..
            })
        ));
        // A level that does not fit its bits, as only a file can hold one.
        let json = serde_json::to_string(&good)
            .unwrap()
            .replacen("[1,", "[7,", 1);
        let p: SmtProfile = serde_json::from_str(&json).unwrap();
        assert!(
            matches!(p.validate(), Err(ProfileError::BadVector { .. })),
            "{:?}",
            p.validate()
        );
        assert!(SmtPlacer::new(p).is_err(), "the placer checks its profile");
    }

    #[test]
    fn sibling_cores_are_the_core_domains_of_two_or_more_cpus() {
        let smt = Topology::test(1, 1, 2, 2);
        assert_eq!(
            sibling_cores(&smt),
            vec![vec![CpuId(0), CpuId(1)], vec![CpuId(2), CpuId(3)]]
        );
        assert!(sibling_cores(&Topology::test(1, 1, 4, 1)).is_empty());
    }

    #[test]
    fn the_plan_re_pairs_as_cpu_time_moves_a_thread_to_its_next_interval() {
        // Thread 0 is low then high; 1 low; 2 and 3 high. At the start 0
        // pairs with a high thread; once its CPU time passes one interval
        // (1000 ns here) it is high, and the lows and highs pair across.
        let placer = SmtPlacer::new(profile(vec![
            vec![v(LO), v(HI)],
            vec![v(LO)],
            vec![v(HI)],
            vec![v(HI)],
        ]))
        .unwrap();
        let cores = vec![vec![CpuId(0), CpuId(1)], vec![CpuId(2), CpuId(3)]];
        let core_of = |plan: &[(usize, CpuId)], i: usize| {
            let cpu = plan.iter().find(|&&(t, _)| t == i).unwrap().1;
            cores.iter().position(|c| c.contains(&cpu)).unwrap()
        };
        let at = |cpu0: u64| -> Vec<Position> {
            (0..4)
                .map(|index| Position {
                    index,
                    cpu_ns: if index == 0 { cpu0 } else { 0 },
                })
                .collect()
        };
        let before = placer.plan(&at(999), &cores).unwrap();
        assert_ne!(core_of(&before, 0), core_of(&before, 1), "two lows apart");
        let after = placer.plan(&at(1000), &cores).unwrap();
        // Now 0 is high: three highs and one low, so the low thread (1)
        // shares its core with a high one.
        let high = [true, false, true, true];
        let lone_low_core = core_of(&after, 1);
        let partners: Vec<usize> = (0..4)
            .filter(|&j| j != 1 && core_of(&after, j) == lone_low_core)
            .collect();
        assert_eq!(partners.len(), 1, "{after:?}");
        assert!(high[partners[0]]);
        assert_ne!(before, after, "the pass re-paired");
        // Same inputs, same placement: a pass with nothing moved changes
        // nothing.
        assert_eq!(placer.plan(&at(1000), &cores).unwrap(), after);
    }

    proptest! {
        /// A pass places every thread exactly once, each on a sibling CPU
        /// of the given cores, two members of a group on distinct siblings
        /// of one core; whatever the threads' CPU times and the profile's
        /// (a thread beyond the profile included).
        #[test]
        fn a_plan_places_every_thread_once_on_a_sibling(
            masks in proptest::collection::vec(proptest::collection::vec(any::<u32>(), 0..4), 1..6),
            times in proptest::collection::vec(0u64..10_000, 0..9),
            cores_n in 1usize..4,
        ) {
            let p = profile(masks.iter().map(|t| t.iter().map(|&m| v(u64::from(m))).collect()).collect());
            let placer = SmtPlacer::new(p).unwrap();
            let cores: Vec<Vec<CpuId>> = (0..cores_n as u32).map(|c| vec![CpuId(2 * c), CpuId(2 * c + 1)]).collect();
            let threads: Vec<Position> = times.iter().enumerate().map(|(index, &cpu_ns)| Position { index, cpu_ns }).collect();
            let plan = placer.plan(&threads, &cores).unwrap();
            let mut seen: Vec<usize> = plan.iter().map(|&(i, _)| i).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..threads.len()).collect::<Vec<_>>());
            let all: Vec<CpuId> = cores.concat();
            prop_assert!(plan.iter().all(|(_, c)| all.contains(c)));
            if threads.len() <= 2 * cores_n {
                // Room for every group on a core of its own: one thread per CPU.
                let mut cpus: Vec<CpuId> = plan.iter().map(|&(_, c)| c).collect();
                cpus.sort_unstable();
                cpus.dedup();
                prop_assert_eq!(cpus.len(), threads.len());
            }
            prop_assert_eq!(placer.plan(&threads, &cores).unwrap(), plan, "deterministic");
        }

        /// Every thread is placed once, and the exact pairing costs no more
        /// than the greedy one or the identity pairing.
        #[test]
        fn groups_partition_the_threads_at_least_cost(masks in proptest::collection::vec(any::<u32>(), 0..9)) {
            let vs: Vec<ActivityVector> = masks.iter().map(|&m| v(u64::from(m))).collect();
            let refs: Vec<Option<&ActivityVector>> = vs.iter().map(Some).collect();
            let pk = picker();
            let g = sibling_groups(&refs, &pk).unwrap();
            let mut all: Vec<usize> = g.concat();
            all.sort_unstable();
            prop_assert_eq!(all, (0..vs.len()).collect::<Vec<_>>());
            prop_assert!(g.iter().all(|p| !p.is_empty() && p.len() <= 2));
            prop_assert!(g.iter().filter(|p| p.len() == 1).count() == vs.len() % 2);
            let total = |g: &[Vec<usize>]| -> f64 {
                g.iter().filter(|p| p.len() == 2).map(|p| cost(&pk, refs[p[0]], refs[p[1]]).unwrap()).sum()
            };
            let naive: Vec<Vec<usize>> = (0..vs.len()).collect::<Vec<_>>().chunks(2).map(<[usize]>::to_vec).collect();
            prop_assert!(total(&g) <= total(&naive) + 1e-9);
        }
    }
}
