//! The co-thread rule: which CPU a co-thread group starts from, after the
//! co-thread paper (001, §III, push rules 1–5).
//!
//! Under [`crate::Policy::CoThread`] the tasks of an application that gave
//! no DF form its *co-thread group*. The home rule (`home.rs`) still decides
//! the regime and the home's size — one CPU under heavy load, the smallest
//! cache domain holding the group's runnable threads under light load (the
//! kernel spreads them inside it) — and the keep test (hysteresis) still
//! decides whether the home is chosen afresh. This file decides *which CPU*
//! a fresh choice starts from: under heavy load that CPU is the home; under
//! light load the home rule walks up from it to the first domain that holds
//! the group, then refines inside it, exactly as for a DF group.
//!
//! Terms, for a co-thread group `g` being (re)homed:
//! - `A`, `r`, `base` as in `home.rs` (allowed CPUs, runnable members, load
//!   without `g`'s runnable members);
//! - `P` — where its co-threads are: the union of the targets of its other
//!   members (runnable or not; a task joining or waking is not counted).
//!   Empty for a new group. It may lie outside `A`.
//! - `L` — the CPU the task that set off the evaluation last ran on: its
//!   `TaskNew::cpu` until the engine first places it on a single CPU, that
//!   CPU after. Unknown for an evaluation no task set off (the balancer's).
//!
//! # Load first: the acceptable CPUs
//!
//! The paper's push rules choose among the CPUs the push may go to at all
//! (those running lower-priority work). Here that is load: with `m` the
//! least `base` over `A`, a CPU `c` of `A` is **acceptable** unless it
//! would count as imbalanced against `m` by the balancer's test (both
//! without the group):
//!
//! ```text
//!   acceptable(c)  ⇔  ¬( base(c) − m ≥ 1000  ∧  base(c)·100 ≥ m·(100 + imbalance_pct) )
//!
//!   base ▲                        m = least base on A
//!        │ ███                    ███ = not acceptable (a whole task and
//!        │ ███ ▓▓▓                      imbalance_pct above m)
//!        │ ███ ▓▓▓ ▓▓▓     ▓▓▓    ▓▓▓ = acceptable
//!        │ ███ ▓▓▓ ▓▓▓ ▓▓▓ ▓▓▓
//!        └──0───1───2───3───4──►  (CPUs of A)
//! ```
//!
//! The least-loaded CPU of `A` is always acceptable, so the set `K` of
//! acceptable CPUs is never empty. Every CPU the group adds to gets the same
//! `r` tasks, so comparing `base` is comparing the outcomes.
//!
//! # Rules 1–5, among `K`
//!
//! ```text
//!   1. K ∩ P ≠ ∅        → its least-`base` CPU         (with its co-threads)
//!   2. L ∈ K            → L                            (where it last ran)
//!   3. P ≠ ∅            → the CPU of K nearest to P    (close to co-threads)
//!   4. L known          → the CPU of K nearest to L    (close to its cache)
//!   5. otherwise        → the least-`base` CPU of K = of A
//! ```
//!
//! "Nearest" is by cache domain: the fewest steps up from the CPU's leaf to
//! a domain that holds a CPU of `P` (of `{L}`) — 0 for the CPU itself, 1
//! for an SMT sibling, 2 for another core of the same LLC on the test
//! machines. Every tie goes to the least `base`, then the lowest CPU id.
//!
//! # Keeping a home
//!
//! Under heavy load a co-thread group keeps its home when it is one CPU of
//! `A` (as a DF group) *and* that CPU is acceptable; so the group stays with
//! its co-threads (rule 1) while the load allows, and the CPU a fresh choice
//! picks is always kept on unchanged load (it is acceptable by
//! construction). Under light load the keep test is the home rule's.

use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::ids::CpuId;
use crate::load::{imbalanced, LoadVec};
use crate::topology::Topology;

/// Where a co-thread group's co-threads are and where the task that set off
/// the evaluation last ran: `P` and `L` of the module doc.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Near<'a> {
    /// `P`: the targets of the group's other members; may be empty.
    pub cpus: &'a CpuSet,
    /// `L`: the CPU the task last ran on, if known.
    pub last: Option<CpuId>,
}

/// Which of rules 1–5 chose a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// 1: a CPU where its co-threads are.
    WithCoThreads,
    /// 2: the CPU it last ran on.
    LastCpu,
    /// 3: the CPU nearest to its co-threads.
    NearCoThreads,
    /// 4: the CPU nearest to the one it last ran on.
    NearLastCpu,
    /// 5: the least-loaded CPU.
    AnyCpu,
}

/// The least `base` over `allowed` (0 for an empty set).
fn least(base: &LoadVec, allowed: &CpuSet) -> u64 {
    base.argmin(allowed).map_or(0, |c| base.get(c))
}

/// Whether `cpu` is acceptable for a group allowed on `allowed` (see the
/// module doc): not imbalanced against the least-loaded CPU of `allowed`,
/// both measured without the group.
pub(crate) fn acceptable(config: &Config, base: &LoadVec, allowed: &CpuSet, cpu: CpuId) -> bool {
    allowed.contains(cpu) && !imbalanced(base.get(cpu), least(base, allowed), config.imbalance_pct)
}

/// Steps up from `cpu`'s leaf to the first domain meeting `set`; `None`
/// when no domain does (an empty set).
fn steps_to(topo: &Topology, cpu: CpuId, set: &CpuSet) -> Option<usize> {
    topo.ancestors(cpu).position(|d| d.cpus.intersects(set))
}

/// The CPU a co-thread group starts from, by rules 1–5 among the acceptable
/// CPUs of `allowed`, and the rule that chose it. `allowed` is never empty.
pub(crate) fn pick(
    topo: &Topology,
    config: &Config,
    base: &LoadVec,
    allowed: &CpuSet,
    near: Near<'_>,
) -> (CpuId, Rule) {
    let m = least(base, allowed);
    let pct = config.imbalance_pct;
    let k = || {
        allowed
            .iter()
            .filter(move |&c| topo.leaf(c).is_some() && !imbalanced(base.get(c), m, pct))
    };
    // Least (key, base, id); `min_by_key` keeps the first of equal keys,
    // and K is walked in id order.
    let best_by = |key: &dyn Fn(CpuId) -> Option<usize>| {
        k().filter_map(|c| key(c).map(|d| (d, base.get(c), c)))
            .min()
            .map(|(_, _, c)| c)
    };
    if let Some(c) = best_by(&|c| near.cpus.contains(c).then_some(0)) {
        return (c, Rule::WithCoThreads);
    }
    if let Some(l) = near.last.filter(|&l| k().any(|c| c == l)) {
        return (l, Rule::LastCpu);
    }
    if !near.cpus.is_empty() {
        if let Some(c) = best_by(&|c| steps_to(topo, c, near.cpus)) {
            return (c, Rule::NearCoThreads);
        }
    }
    if let Some(l) = near.last.filter(|l| topo.leaf(*l).is_some()) {
        let only_l = CpuSet::single(l);
        if let Some(c) = best_by(&|c| steps_to(topo, c, &only_l)) {
            return (c, Rule::NearLastCpu);
        }
    }
    let c = best_by(&|_| Some(0)).expect("the least-loaded allowed CPU is acceptable");
    (c, Rule::AnyCpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn load(milli: &[u64]) -> LoadVec {
        let mut v = LoadVec::zero(&CpuSet::first_n(milli.len() as u32));
        for (i, &m) in milli.iter().enumerate() {
            v.add_cpu(CpuId(i as u32), m);
        }
        v
    }

    /// 8 CPUs: node 0-7 ⊃ LLCs 0-3, 4-7 ⊃ SMT cores {0,1}, {2,3}, … .
    fn eight() -> Topology {
        Topology::test(1, 2, 2, 2)
    }

    fn pick_on(base: &[u64], allowed: &str, p: &str, last: Option<u32>) -> (CpuId, Rule) {
        let p = if p.is_empty() { CpuSet::new() } else { set(p) };
        let near = Near {
            cpus: &p,
            last: last.map(CpuId),
        };
        pick(
            &eight(),
            &Config::default(),
            &load(base),
            &set(allowed),
            near,
        )
    }

    const IDLE: [u64; 8] = [2000; 8];

    #[test]
    fn rule_1_goes_where_the_co_threads_are() {
        assert_eq!(
            pick_on(&IDLE, "0-7", "5", Some(2)),
            (CpuId(5), Rule::WithCoThreads)
        );
        // Co-threads spread over a core: its less loaded CPU.
        let l = [2000, 2000, 2000, 2000, 2400, 2000, 2000, 2000];
        assert_eq!(
            pick_on(&l, "0-7", "4-5", None),
            (CpuId(5), Rule::WithCoThreads)
        );
    }

    #[test]
    fn rule_2_takes_the_last_cpu_when_no_co_thread_cpu_is_acceptable() {
        // No co-threads yet.
        assert_eq!(
            pick_on(&IDLE, "0-7", "", Some(6)),
            (CpuId(6), Rule::LastCpu)
        );
        // Co-threads on CPU 1, which is overloaded (5 tasks vs 2).
        let l = [2000, 5000, 2000, 2000, 2000, 2000, 2000, 2000];
        assert_eq!(pick_on(&l, "0-7", "1", Some(6)), (CpuId(6), Rule::LastCpu));
    }

    #[test]
    fn rule_3_goes_nearest_to_the_co_threads() {
        // Co-threads on CPU 1 (overloaded) and the last CPU 6 (overloaded):
        // CPU 0 shares a core with 1.
        let l = [2000, 5000, 2000, 2000, 2000, 2000, 5000, 2000];
        assert_eq!(
            pick_on(&l, "0-7", "1", Some(6)),
            (CpuId(0), Rule::NearCoThreads)
        );
        // CPU 0 overloaded too: the other core of the LLC, its least loaded
        // CPU (3), before anything in the other LLC.
        let l = [5000, 5000, 2500, 2000, 2000, 2000, 5000, 2000];
        assert_eq!(
            pick_on(&l, "0-7", "1", Some(6)),
            (CpuId(3), Rule::NearCoThreads)
        );
        // Co-threads on CPUs the task may not use (rule 3's case in the
        // paper): the nearest allowed CPU.
        assert_eq!(
            pick_on(&IDLE, "2-7", "0-1", None),
            (CpuId(2), Rule::NearCoThreads)
        );
    }

    #[test]
    fn rule_4_goes_nearest_to_the_last_cpu() {
        // No co-threads; the last CPU 6 is overloaded: its SMT sibling 7.
        let l = [2000, 2000, 2000, 2000, 2000, 2000, 5000, 2000];
        assert_eq!(
            pick_on(&l, "0-7", "", Some(6)),
            (CpuId(7), Rule::NearLastCpu)
        );
        // Last CPU outside the allowed set: the nearest allowed one.
        assert_eq!(
            pick_on(&IDLE, "0-3", "", Some(5)),
            (CpuId(0), Rule::NearLastCpu)
        );
        assert_eq!(
            pick_on(&IDLE, "0-4", "", Some(5)),
            (CpuId(4), Rule::NearLastCpu)
        );
    }

    #[test]
    fn rule_5_takes_the_least_loaded_allowed_cpu() {
        let l = [3000, 2000, 2000, 1000, 2000, 2000, 2000, 2000];
        assert_eq!(pick_on(&l, "0-7", "", None), (CpuId(3), Rule::AnyCpu));
        assert_eq!(pick_on(&l, "4-7", "", None), (CpuId(4), Rule::AnyCpu));
        // A last CPU the machine lacks is no information.
        assert_eq!(pick_on(&l, "0-7", "", Some(40)), (CpuId(3), Rule::AnyCpu));
    }

    #[test]
    fn acceptable_is_the_balancers_imbalance_test_against_the_least_loaded() {
        let cfg = Config::default(); // 25 %
        let a = set("0-7");
        // 2 vs 1: a whole task and 100 % above → not acceptable.
        let l = load(&[2000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
        assert!(!acceptable(&cfg, &l, &a, CpuId(0)));
        assert!(acceptable(&cfg, &l, &a, CpuId(1)));
        // 5 vs 4: a whole task but only 25 % above... exactly 25 % counts.
        let l = load(&[5000, 4000, 4000, 4000, 4000, 4000, 4000, 4000]);
        assert!(!acceptable(&cfg, &l, &a, CpuId(0)));
        // 6 vs 5: 20 % above → acceptable.
        let l = load(&[6000, 5000, 5000, 5000, 5000, 5000, 5000, 5000]);
        assert!(acceptable(&cfg, &l, &a, CpuId(0)));
        // Less than a whole task above → acceptable, whatever the ratio.
        let l = load(&[900, 0, 0, 0, 0, 0, 0, 0]);
        assert!(acceptable(&cfg, &l, &a, CpuId(0)));
        // Only CPUs of A count, for the minimum and the candidate.
        let l = load(&[3000, 3000, 0, 0, 0, 0, 0, 0]);
        assert!(acceptable(&cfg, &l, &set("0-1"), CpuId(0)));
        assert!(!acceptable(&cfg, &l, &set("0-1"), CpuId(2)));
    }
}

#[cfg(test)]
#[path = "cothread_tests.rs"]
mod engine_tests;
