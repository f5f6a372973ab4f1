//! Load accounting: runnable tasks per CPU, in thousandths of a task.
//!
//! Load counts runnable tasks, dfsched's and everybody else's:
//!
//! ```text
//!   load(cpu) = external load on cpu (1000 per runnable nice-0 task, or
//!               the body's weighing of it: `Event::ExternalLoadMilli`)
//!             + Σ over runnable engine tasks t whose target set S(t) holds cpu
//!                 of share(S(t), cpu)
//!
//!   share(S, cpu) = 1000 / |S|, plus 1 on each of the (1000 mod |S|) lowest
//!                   CPUs of S, so that Σ_cpu share(S, cpu) = 1000 exactly.
//! ```
//!
//! Everything is integer arithmetic, so the same events give the same loads
//! on every machine, and adding then removing a task restores the vector bit
//! for bit. The engine keeps one [`LoadVec`] up to date incrementally (a hint
//! touches only the CPUs of the sets it changes), and the home rule and the
//! balancer work on copies of it.
//!
//! Invariants: the vector keeps the sum of its loads, so the load of the
//! whole machine costs nothing to read (most groups may use every CPU);
//! and (checked by `Engine::check_invariants`) the engine's vector equals a
//! recomputation from scratch, that sum included.

use crate::cpuset::CpuSet;
use crate::ids::CpuId;

/// One runnable task, in thousandths.
pub(crate) const TASK_MILLI: u64 = 1000;

/// The most external load one CPU holds, in thousandths: `u32::MAX` tasks,
/// the most an `ExternalLoad` sample can name, so that a weighed sample
/// (`ExternalLoadMilli`) cannot overflow the vector's sum either.
pub(crate) const MAX_EXTERNAL_MILLI: u64 = u32::MAX as u64 * TASK_MILLI;

/// Load per CPU in thousandths of a runnable task, indexed by `CpuId.0`.
///
/// Indexes of CPUs the machine lacks (sparse numbering) stay 0 and are never
/// looked at: every scan goes over a [`CpuSet`] of real CPUs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LoadVec {
    /// `milli[c]` is the load of CPU `c`.
    milli: Vec<u64>,
    /// Σ `milli`.
    total: u64,
}

/// Written out so that `clone_from` reuses the vector: the home rule's
/// scratch copy of the load allocates nothing.
impl Clone for LoadVec {
    fn clone(&self) -> Self {
        LoadVec {
            milli: self.milli.clone(),
            total: self.total,
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.milli.clone_from(&source.milli);
        self.total = source.total;
    }
}

impl LoadVec {
    /// All-zero load for CPUs `0..=max(cpus)`.
    pub(crate) fn zero(cpus: &CpuSet) -> LoadVec {
        let len = cpus.last().map_or(0, |c| c.0 as usize + 1);
        LoadVec {
            milli: vec![0; len],
            total: 0,
        }
    }

    /// Σ load over every CPU.
    #[inline]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Load of one CPU (0 for a CPU outside the vector).
    #[inline]
    pub(crate) fn get(&self, cpu: CpuId) -> u64 {
        self.milli.get(cpu.0 as usize).copied().unwrap_or(0)
    }

    /// Adds `milli` to one CPU of the machine.
    #[inline]
    pub(crate) fn add_cpu(&mut self, cpu: CpuId, milli: u64) {
        self.milli[cpu.0 as usize] += milli;
        self.total += milli;
    }

    /// Removes `milli` from one CPU. Saturates rather than wraps, so a bug
    /// shows as a failed `check_invariants` instead of an absurd load.
    #[inline]
    pub(crate) fn sub_cpu(&mut self, cpu: CpuId, milli: u64) {
        let x = &mut self.milli[cpu.0 as usize];
        debug_assert!(*x >= milli, "load of {cpu} would go negative");
        let taken = milli.min(*x);
        *x -= taken;
        self.total -= taken;
    }

    /// Counts one runnable task placed on `set` (see the module doc).
    pub(crate) fn add_task(&mut self, set: &CpuSet) {
        self.add_tasks(set, 1);
    }

    /// Stops counting one runnable task placed on `set`.
    pub(crate) fn sub_task(&mut self, set: &CpuSet) {
        self.sub_tasks(set, 1);
    }

    /// Counts `n` runnable tasks placed on `set`.
    pub(crate) fn add_tasks(&mut self, set: &CpuSet, n: u64) {
        for_each_share(set, |c, m| self.add_cpu(c, m * n));
    }

    /// Stops counting `n` runnable tasks placed on `set`.
    pub(crate) fn sub_tasks(&mut self, set: &CpuSet, n: u64) {
        for_each_share(set, |c, m| self.sub_cpu(c, m * n));
    }

    /// Σ load over `set`.
    #[inline]
    pub(crate) fn sum(&self, set: &CpuSet) -> u64 {
        set.iter().map(|c| self.get(c)).sum()
    }

    /// The least-loaded CPU of `set`, ties to the lowest id.
    pub(crate) fn argmin(&self, set: &CpuSet) -> Option<CpuId> {
        // `min_by_key` keeps the first of equal keys: the lowest CPU.
        set.iter().min_by_key(|&c| self.get(c))
    }

    /// The most-loaded CPU of `set`, ties to the lowest id.
    pub(crate) fn argmax(&self, set: &CpuSet) -> Option<CpuId> {
        // `max_by_key` keeps the last of equal keys, so compare on the
        // reversed id to keep the lowest.
        set.iter()
            .max_by_key(|&c| (self.get(c), std::cmp::Reverse(c)))
    }

    /// max − min of the load over `set` (0 for an empty set).
    pub(crate) fn spread(&self, set: &CpuSet) -> u64 {
        let mut it = set.iter().map(|c| self.get(c));
        let Some(first) = it.next() else { return 0 };
        let (lo, hi) = it.fold((first, first), |(lo, hi), x| (lo.min(x), hi.max(x)));
        hi - lo
    }

    /// The balancer's measure of imbalance over `set` ([`SpreadKey`]).
    pub(crate) fn spread_key(&self, set: &CpuSet) -> SpreadKey {
        let mut it = set.iter().map(|c| self.get(c));
        let Some(first) = it.next() else {
            return SpreadKey::default();
        };
        let (mut lo, mut hi, mut at_lo, mut at_hi) = (first, first, 1u32, 1u32);
        for x in it {
            match x.cmp(&hi) {
                std::cmp::Ordering::Greater => (hi, at_hi) = (x, 1),
                std::cmp::Ordering::Equal => at_hi += 1,
                std::cmp::Ordering::Less => {}
            }
            match x.cmp(&lo) {
                std::cmp::Ordering::Less => (lo, at_lo) = (x, 1),
                std::cmp::Ordering::Equal => at_lo += 1,
                std::cmp::Ordering::Greater => {}
            }
        }
        SpreadKey {
            spread: hi - lo,
            at_max: at_hi,
            at_min: at_lo,
        }
    }

    /// `(cpu, load)` for every CPU of `set`, in CPU order.
    pub(crate) fn pairs(&self, set: &CpuSet) -> Vec<(CpuId, u64)> {
        set.iter().map(|c| (c, self.get(c))).collect()
    }
}

/// How far a load vector is from balanced, as the balancer compares moves:
/// max − min, then how many CPUs carry the max, then how many the min,
/// compared in that order (smaller is better).
///
/// Why the counts: with two CPUs at the max (or two at the min) no single
/// move narrows max − min, since the other one keeps it, so a balancer
/// that compared spreads alone moved nothing at 4000 4000 0 0 although two
/// group moves make it 2000 × 4. Taking one CPU off the max (or the min)
/// at the same spread is progress, and the order is strict, so a pass
/// still ends and unchanged load gives no moves back and forth: a move
/// that only swaps which CPU is busiest (4000 4000 0 0 → 0 4000 4000 0)
/// keeps the key and is not taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SpreadKey {
    /// max − min, thousandths.
    pub(crate) spread: u64,
    /// CPUs at the max.
    pub(crate) at_max: u32,
    /// CPUs at the min.
    pub(crate) at_min: u32,
}

/// The balancer's imbalance test (Linux 2.6's, which the paper extends):
/// a CPU with load `busy_milli` is imbalanced against one with `idle_milli`
/// when it carries at least one whole task more and at least `pct` percent
/// more. Exact in integers.
#[inline]
pub(crate) fn imbalanced(busy_milli: u64, idle_milli: u64, pct: u32) -> bool {
    busy_milli.saturating_sub(idle_milli) >= TASK_MILLI
        && u128::from(busy_milli) * 100 >= u128::from(idle_milli) * u128::from(100 + pct)
}

/// The part of one task placed on `set` that falls on `within`: 1000 when
/// `set ⊆ within`.
pub(crate) fn share_within(set: &CpuSet, within: &CpuSet) -> u64 {
    if set.is_subset(within) {
        return TASK_MILLI;
    }
    let mut part = 0;
    for_each_share(set, |c, m| {
        if within.contains(c) {
            part += m;
        }
    });
    part
}

/// Calls `f(cpu, share)` for each CPU of `set` with that CPU's share of one
/// task: `1000 / n`, and one more on the `1000 mod n` lowest CPUs. CPUs whose
/// share is 0 (sets larger than 1000 CPUs) are skipped, and not walked.
pub(crate) fn for_each_share(set: &CpuSet, mut f: impl FnMut(CpuId, u64)) {
    let n = set.len() as u64;
    if n == 0 {
        return;
    }
    let (base, extra) = (TASK_MILLI / n, TASK_MILLI % n);
    if base == 0 {
        // More than 1000 CPUs: only the 1000 lowest get a share (of 1), so
        // only they are walked — a task on all 8,192 CPUs of the largest
        // machines costs 1000 steps, not 8,192 (the start of 4096 tasks
        // there spent 77 % of its time walking zero shares).
        for c in set.iter().take(extra as usize) {
            f(c, 1);
        }
        return;
    }
    for (i, c) in set.iter().enumerate() {
        let share = base + u64::from((i as u64) < extra);
        if share > 0 {
            f(c, share);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn a_task_on_three_cpus_gives_the_remainder_to_the_lowest() {
        let mut v = LoadVec::zero(&set("0-3"));
        v.add_task(&set("1-3"));
        assert_eq!(
            v.pairs(&set("0-3")),
            vec![
                (CpuId(0), 0),
                (CpuId(1), 334),
                (CpuId(2), 333),
                (CpuId(3), 333)
            ]
        );
        assert_eq!(v.sum(&set("0-3")), 1000);
    }

    #[test]
    fn the_total_follows_every_change_and_clone_from_copies_it() {
        let mut v = LoadVec::zero(&set("0-3"));
        v.add_task(&set("1-3"));
        v.add_cpu(CpuId(0), 2000);
        assert_eq!(v.total(), 3000);
        v.sub_tasks(&set("1-3"), 1);
        assert_eq!(v.total(), 2000);
        let mut w = LoadVec::zero(&set("0-7"));
        w.clone_from(&v);
        assert_eq!((w.total(), &w), (2000, &v));
    }

    #[test]
    fn share_within_counts_the_part_of_a_task_inside_a_set() {
        assert_eq!(share_within(&set("1-2"), &set("0-3")), 1000);
        assert_eq!(share_within(&set("1-3"), &set("1")), 334);
        assert_eq!(share_within(&set("1-3"), &set("2-3")), 666);
        assert_eq!(share_within(&set("1-3"), &set("5")), 0);
    }

    #[test]
    fn argmin_and_argmax_break_ties_to_the_lowest_cpu() {
        let mut v = LoadVec::zero(&set("0-3"));
        v.add_cpu(CpuId(1), 5);
        v.add_cpu(CpuId(3), 5);
        assert_eq!(v.argmax(&set("0-3")), Some(CpuId(1)));
        assert_eq!(v.argmin(&set("0-3")), Some(CpuId(0)));
        assert_eq!(v.argmin(&set("1,3")), Some(CpuId(1)));
        assert_eq!(v.spread(&set("0-3")), 5);
        assert_eq!(v.spread(&CpuSet::new()), 0);
    }

    #[test]
    fn the_spread_key_counts_the_cpus_at_either_end() {
        let mut v = LoadVec::zero(&set("0-3"));
        v.add_cpu(CpuId(0), 4000);
        v.add_cpu(CpuId(1), 4000);
        let k = v.spread_key(&set("0-3"));
        assert_eq!((k.spread, k.at_max, k.at_min), (4000, 2, 2));
        v.add_cpu(CpuId(2), 2000);
        v.sub_cpu(CpuId(0), 2000);
        let after = v.spread_key(&set("0-3"));
        assert_eq!((after.spread, after.at_max, after.at_min), (4000, 1, 1));
        assert!(
            after < k,
            "one CPU off each end at the same spread is progress"
        );
        let flat = LoadVec::zero(&set("0-3")).spread_key(&set("0-3"));
        assert_eq!((flat.spread, flat.at_max, flat.at_min), (0, 4, 4));
        assert_eq!(v.spread_key(&CpuSet::new()), SpreadKey::default());
    }

    /// `for_each_share` as it was written before it stopped walking zero
    /// shares: every CPU of the set, in order.
    fn shares_by_the_plain_walk(set: &CpuSet) -> Vec<(CpuId, u64)> {
        let n = set.len() as u64;
        let (base, extra) = (TASK_MILLI / n, TASK_MILLI % n);
        set.iter()
            .enumerate()
            .map(|(i, c)| (c, base + u64::from((i as u64) < extra)))
            .filter(|&(_, share)| share > 0)
            .collect()
    }

    proptest! {
        #[test]
        fn the_shares_are_those_of_the_plain_walk_on_sets_of_any_size(
            cpus in proptest::collection::btree_set(0u32..3000, 1..2500),
        ) {
            let s: CpuSet = cpus.iter().copied().map(CpuId).collect();
            let mut walked = Vec::new();
            for_each_share(&s, |c, m| walked.push((c, m)));
            prop_assert_eq!(walked, shares_by_the_plain_walk(&s));
        }

        #[test]
        fn every_task_counts_exactly_one_thousand_and_removal_restores(
            cpus in proptest::collection::btree_set(0u32..1100, 1..1100),
        ) {
            let s: CpuSet = cpus.iter().copied().map(CpuId).collect();
            let mut v = LoadVec::zero(&s);
            v.add_task(&s);
            prop_assert_eq!(v.sum(&s), TASK_MILLI);
            prop_assert_eq!(v.total(), TASK_MILLI);
            // No CPU gets more than one above another.
            prop_assert!(v.spread(&s) <= 1);
            v.sub_task(&s);
            prop_assert_eq!(v, LoadVec::zero(&s));
        }
    }
}
