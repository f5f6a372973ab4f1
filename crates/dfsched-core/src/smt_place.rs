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

use crate::activity::{ActivityError, ActivityVector};
use crate::ids::CpuId;
use crate::smt_pair::PairPicker;
use serde::{Deserialize, Serialize};

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

    proptest! {
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
