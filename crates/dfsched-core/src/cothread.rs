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
//! - `pin(c)` — the load **pinned** on `c`: external runnable tasks on `c`
//!   plus `g`'s others' runnable tasks targeted at `c` alone (other groups'
//!   members homed on that one CPU, unmanaged tasks moved there). Spread
//!   tasks — targeted at several CPUs — are not in it; `inside(D)` counts
//!   them in the smallest cache domain `D` holding their target (by their
//!   share on `A`), so that `Σ_{c∈A} pin(c) + Σ_D inside(D) = base(A)`
//!   ([`Pinned`]).
//!
//! # Why pinned load
//!
//! Judging a CPU by `base(c)` counts every spread task's fraction on every
//! CPU it may run on, as if it were stuck there. When every process is
//! exactly a CPU's share — 8 processes × 3 threads on 8 CPUs, 2 × 4 on 2
//! — the groups spread while their threads start (light load, or packing
//! not yet within the share), and once the load is heavy each group sees
//! the others' fractions everywhere: 7 groups × 3/8 ≈ 2.6 per CPU, so
//! packed it would carry 5.6 against an average of 3, no CPU is
//! acceptable, and all of them stay spread for good (the simulator ran
//! 8 × 3 on 8 never-sleeping threads in 263k cycles against vanilla's
//! 134k). But spread threads are not stuck: a spread group can still be
//! packed elsewhere, and the kernel balances spread threads around packed
//! ones. So the acceptable and keep tests count only what cannot move:
//! `pin(c)`. With everything spread, `pin = 0` and re-evaluation in
//! group-id order (the balancer's step 0) packs the first group on a CPU
//! (3 vs an average of 3), which then pins 3 there, so the next takes
//! another CPU, and so on: one process per CPU in one pass, each keeping
//! its CPU after (its own CPU pins nothing of the others). The average
//! stays the whole runnable load of `A`, spread tasks included.
//!
//! # Load first: the acceptable CPUs
//!
//! The paper packs a process's co-threads onto one core because the *other
//! processes* keep the other cores busy. A group that is by itself more than
//! a CPU's fair share must not be packed: one process of 32 threads on 2
//! CPUs would get one CPU and leave the other idle. So, with `n = |A|` and
//! the load on `A` counting the group,
//!
//! ```text
//!   T   = base(A) + r·1000               avg = T / n   (per CPU of A)
//!   X_c = pin(c) + r·1000                (c's fixed load with g on it)
//!
//!   acceptable(c) ⇔ ¬ imbalanced(X_c, avg)      — the balancer's own test:
//!                 ⇔ ¬( X_c − avg ≥ 1000  ∧  X_c·100 ≥ avg·(100 + imbalance_pct) )
//! ```
//!
//! i.e. packing `g` on `c` would not make `c` imbalanced against the
//! average by what is pinned there: a whole task above it *and*
//! `imbalance_pct` (25 %) above it. In integers (×n, exact):
//! `X_c·n − T ≥ 1000·n ∧ X_c·n·100 ≥ T·(100 + pct)`.
//!
//! ```text
//!   1 process × 32 threads, 2 idle CPUs:   T = 32000, avg = 16000
//!     X_0 = 32000 ≥ 16000 + 1000 and ≥ 1.25 × 16000   → not acceptable
//!   9 processes × 3 threads, 2 CPUs, 8 packed 4 + 4: T = 27000, avg = 13500
//!     X_c = 12000 + 3000 = 15000 < 1.25 × 13500        → acceptable
//!   8 processes × 3 threads, 8 CPUs, the 7 others spread: T = 24000,
//!     avg = 3000, X_c = 0 + 3000                         → acceptable
//!
//!   load ▲         avg·1.25 ┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄    ░ = pin(c)
//!        │ ▒▒▒          ▒▒▒                         ▒ = r, g packed on c
//!        │ ▒▒▒  avg ┄┄┄┄▒▒▒┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄
//!        │ ░░░          ░░░  ░░░  ░░░
//!        └──0────────────1────2────3──►  (CPUs of A)
//!            ✗ above       ✓ within
//! ```
//!
//! If some CPU is acceptable, rules 1–5 below choose among the acceptable
//! CPUs `K` and the group is packed there (heavy load: the home is that
//! CPU). If none is, the group is **not packed**: `K = A` for rules 1–5,
//! and the home rule (`home.rs`) walks up from the CPU they prefer to the
//! smallest cache domain `D` whose CPUs stay within the fair share by the
//! same test on their average, with `k = |D ∩ A|`:
//!
//! ```text
//!   X_D = pin(D ∩ A) + Σ inside(D') over D' ⊆ D + r·1000
//!   D within ⇔ ¬( X_D·n − T·k ≥ 1000·k·n  ∧  X_D·n·100 ≥ T·k·(100 + pct) )
//! ```
//!
//! i.e. the load that must run on `D`: pinned on its CPUs, or spread over
//! CPUs inside it. For a single CPU that is `acceptable`; the root
//! (`D ∩ A = A`, `X_D = T`) is always within, so a home always exists.
//! Inside `D` the kernel spreads the threads, which is vanilla's behaviour
//! for that group.
//!
//! # Rules 1–5, among `K`
//!
//! ```text
//!   1. K ∩ P ≠ ∅        → its least-`base` CPU         (with its co-threads)
//!   2. L ∈ K            → L                            (where it last ran)
//!   3. P ≠ ∅            → the CPU of K nearest to P    (close to co-threads)
//!   4. L known          → the CPU of K nearest to L    (close to its cache)
//!   5. otherwise        → the least-`base` CPU of K
//! ```
//!
//! Under light load the home rule only needs a CPU to start its walk from,
//! and `K` is as before the fair-share test: the CPUs not imbalanced
//! against the least-loaded CPU of `A` by the balancer's test, both
//! without the group (`¬imbalanced(base(c), min_A base)`), never empty.
//! Rules 1, 3, 4 and 5 still order CPUs by `base` (where the kernel will
//! find the least to share); only which CPUs are in `K` is judged by
//! pinned load.
//!
//! "Nearest" is by cache domain: the fewest steps up from the CPU's leaf to
//! a domain that holds a CPU of `P` (of `{L}`) — 0 for the CPU itself, 1
//! for an SMT sibling, 2 for another core of the same LLC on the test
//! machines. Every tie goes to the least `base`, then the lowest CPU id.
//!
//! # Keeping a home
//!
//! Under heavy load a co-thread group keeps its home while the home stays
//! within the fair share by the same test: a one-CPU home while that CPU
//! is acceptable (so the group stays with its co-threads, rule 1, while the
//! load allows); a larger home while no CPU of `A` is acceptable, the home
//! is within and no smaller domain inside it is. A fresh choice passes this
//! test by construction, so it is always kept on unchanged load (a property
//! test checks it). Under light load the keep test is the home rule's.

use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::ids::{CpuId, DomainId};
use crate::load::{imbalanced, LoadVec, TASK_MILLI};
use crate::topology::Topology;

/// Where a co-thread group's co-threads are, where the task that set off
/// the evaluation last ran, and the load that is pinned where it is: `P`,
/// `L` and `pin` of the module doc.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Near<'a> {
    /// `P`: the targets of the group's other members; may be empty.
    pub cpus: &'a CpuSet,
    /// `L`: the CPU the task last ran on, if known.
    pub last: Option<CpuId>,
    /// `pin` and `inside`, without the group's runnable members (and the
    /// mover of the event), on the same load as the home rule's `base`.
    pub pinned: &'a Pinned,
}

/// The load the heavy-load tests judge a co-thread group by (module doc,
/// "Why pinned load"): per CPU, what cannot go elsewhere — external runnable
/// tasks and runnable tasks targeted at that CPU alone (`pin`); per cache
/// domain, the runnable tasks spread over several CPUs whose target lies
/// inside it and in none of its children (`inside`), each counted by its
/// share on `A`. Both leave out the group being homed and the mover of the
/// event, as `base` does, so that `Σ_{c∈A} pin(c) + Σ_D inside(D) =
/// base(A)`.
///
/// Two uses, two ways of being kept:
/// - a *scratch* one (the engine keeps one, [`Pinned::reset`] empties it)
///   is filled per evaluation for a group whose `A` is not the whole
///   machine (`View::pinned_without`). Refilling it allocates nothing once
///   it has the machine's size, and costs what was written, not the
///   machine: it keeps the indexes it wrote (the *dirty lists*), `reset`
///   zeroes only those, and [`Pinned::sum_on`] walks only them. On 8,192
///   CPUs and 12k domains a hint used to spend most of its time zeroing
///   and summing these two arrays.
/// - a *maintained* one ([`Pinned::maintained`], `State::pinned`) holds
///   the pinned load of every runnable engine task and of the external
///   load, for `A` = the machine (every share on `A` is then a whole task),
///   kept up to date by every change of the load; an evaluation for such a
///   group takes its own members and the mover off it, reads it, and puts
///   them back ([`Pinned::add_task`], [`Pinned::sub_task`]): O(its census),
///   not O(all groups). It keeps no dirty lists (nothing resets it), but
///   keeps per domain the load that must run inside it (`below`), so that
///   the room test can tell a domain's load without walking its subtree
///   (`home.rs`, `Shape::fit_below`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pinned {
    /// `pin(c)` at index `c`, in thousandths.
    cpu: Vec<u64>,
    /// `inside(D)` at index `D`, in thousandths.
    inside: Vec<u64>,
    /// Whether the dirty lists are kept (a scratch one).
    scratch: bool,
    /// Dirty list of a scratch one: the indexes of `cpu` that are not 0,
    /// each once (an index is listed when an add first makes it non-zero;
    /// a scratch one is only added to). Emptied by `reset`.
    cpu_written: Vec<u32>,
    /// Dirty list of `inside`, as `cpu_written`.
    inside_written: Vec<u32>,
    /// `Σ_D inside(D)`, kept by every add and sub.
    inside_total: u64,
    /// A maintained one's `Σ_{c∈D} pin(c) + Σ_{D'⊆D} inside(D')` at index
    /// `D` (every CPU of the machine being in `A`): what `fit_below` sums
    /// over `D`'s subtree. Kept by every count, O(depth) each; empty in a
    /// scratch one.
    below: Vec<u64>,
}

impl Pinned {
    /// A maintained one for `topo`, with no load (see the type's doc).
    pub(crate) fn maintained(topo: &Topology) -> Pinned {
        let len = topo.cpus().last().map_or(0, |c| c.0 as usize + 1);
        Pinned {
            cpu: vec![0; len],
            inside: vec![0; topo.domains().len()],
            below: vec![0; topo.domains().len()],
            ..Pinned::default()
        }
    }

    /// Empties a scratch one for `topo`: no load anywhere. O(entries
    /// written since the last reset), unless the machine's size changed
    /// (then O(machine)).
    pub(crate) fn reset(&mut self, topo: &Topology) {
        let len = topo.cpus().last().map_or(0, |c| c.0 as usize + 1);
        let domains = topo.domains().len();
        if self.scratch && self.cpu.len() == len && self.inside.len() == domains {
            for &c in &self.cpu_written {
                self.cpu[c as usize] = 0;
            }
            for &d in &self.inside_written {
                self.inside[d as usize] = 0;
            }
        } else {
            self.cpu.clear();
            self.cpu.resize(len, 0);
            self.inside.clear();
            self.inside.resize(domains, 0);
        }
        self.scratch = true;
        self.cpu_written.clear();
        self.inside_written.clear();
        self.inside_total = 0;
        // A stale dirty list would leave load behind: check the whole
        // arrays where it costs nothing that matters.
        debug_assert!(self.cpu.iter().chain(&self.inside).all(|&x| x == 0));
    }

    /// Counts (`add`) or stops counting `n` runnable tasks targeted at
    /// `target` in a maintained one, as `View::pinned_without` counts them
    /// for `A` = the machine: on its CPU if it is one, else a whole task
    /// each inside the smallest domain holding it. `holding` is that
    /// domain when the caller knows it.
    pub(crate) fn count_tasks(
        &mut self,
        topo: &Topology,
        target: &CpuSet,
        holding: Option<DomainId>,
        n: u64,
        add: bool,
    ) {
        debug_assert!(!self.scratch, "only a maintained one counts tasks");
        let milli = n * TASK_MILLI;
        if target.len() == 1 {
            let c = target.first().expect("one CPU");
            self.external(topo, c, milli, add);
            return;
        }
        let d = holding.unwrap_or_else(|| topo.smallest_holding(target));
        debug_assert_eq!(d, topo.smallest_holding(target));
        let x = &mut self.inside[d.0 as usize];
        if add {
            *x += milli;
            self.inside_total += milli;
        } else {
            debug_assert!(*x >= milli, "pinned load would go negative");
            *x -= milli;
            self.inside_total -= milli;
        }
        self.count_below(topo, Some(d), milli, add);
    }

    /// Adds (`add`) or takes off `milli` of load that can only run on
    /// `cpu`, in a maintained one: external load, or tasks targeted at
    /// `cpu` alone.
    pub(crate) fn external(&mut self, topo: &Topology, cpu: CpuId, milli: u64, add: bool) {
        debug_assert!(!self.scratch, "a scratch one is only added to");
        let x = &mut self.cpu[cpu.0 as usize];
        if add {
            *x += milli;
        } else {
            debug_assert!(*x >= milli, "pinned load would go negative");
            *x -= milli;
        }
        self.count_below(topo, topo.leaf(cpu), milli, add);
    }

    /// `below` of `d` and of every domain above it, ± `milli`.
    fn count_below(&mut self, topo: &Topology, mut d: Option<DomainId>, milli: u64, add: bool) {
        while let Some(at) = d {
            let b = &mut self.below[at.0 as usize];
            if add {
                *b += milli;
            } else {
                *b -= milli;
            }
            d = topo.domain(at).parent;
        }
    }

    /// A maintained one's load that must run inside `d` (`below`, module
    /// doc's `X_D` without the group); `None` for a scratch one.
    #[inline]
    pub(crate) fn below(&self, d: DomainId) -> Option<u64> {
        self.below.get(d.0 as usize).copied()
    }

    /// Whether two hold the same load (`pin` and `inside` everywhere),
    /// however they are kept.
    pub(crate) fn same_load(&self, other: &Pinned) -> bool {
        self.cpu == other.cpu && self.inside == other.inside
    }

    /// Adds load that can only run on `cpu` (a CPU of the machine).
    #[inline]
    pub(crate) fn add_cpu(&mut self, cpu: CpuId, milli: u64) {
        let x = &mut self.cpu[cpu.0 as usize];
        if self.scratch && *x == 0 && milli > 0 {
            self.cpu_written.push(cpu.0);
        }
        *x += milli;
    }

    /// Adds load spread over several CPUs inside `d` and in none of its
    /// children, `milli` being its share on `A`.
    #[inline]
    pub(crate) fn add_inside(&mut self, d: DomainId, milli: u64) {
        let x = &mut self.inside[d.0 as usize];
        if self.scratch && *x == 0 && milli > 0 {
            self.inside_written.push(d.0);
        }
        *x += milli;
        self.inside_total += milli;
    }

    /// `pin(cpu)` (0 for a CPU the machine lacks).
    #[inline]
    pub(crate) fn cpu(&self, cpu: CpuId) -> u64 {
        self.cpu.get(cpu.0 as usize).copied().unwrap_or(0)
    }

    /// `inside(d)`.
    #[inline]
    pub(crate) fn inside(&self, d: DomainId) -> u64 {
        self.inside.get(d.0 as usize).copied().unwrap_or(0)
    }

    /// `Σ_{c∈A} pin(c) + Σ_D inside(D)`: `base(A)` when it was filled
    /// right. O(CPUs written) for a scratch one, O(|A| + domains) for a
    /// maintained one (only checks call it).
    pub(crate) fn sum_on(&self, allowed: &CpuSet) -> u64 {
        let full =
            || allowed.iter().map(|c| self.cpu(c)).sum::<u64>() + self.inside.iter().sum::<u64>();
        if !self.scratch {
            return full();
        }
        let on_a: u64 = (self.cpu_written.iter())
            .filter(|&&c| allowed.contains(CpuId(c)))
            .map(|&c| self.cpu[c as usize])
            .sum();
        debug_assert_eq!(
            on_a + self.inside_total,
            full(),
            "the dirty lists and the inside total are those of the arrays"
        );
        on_a + self.inside_total
    }

    /// A load where everything is pinned: `pin = base`, nothing spread (as
    /// when all of it is external).
    #[cfg(test)]
    pub(crate) fn all_of(base: &LoadVec, topo: &Topology) -> Pinned {
        let mut p = Pinned::default();
        p.reset(topo);
        for c in topo.cpus().iter() {
            p.add_cpu(c, base.get(c));
        }
        p
    }
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

/// The fair-share test of the module doc: whether a domain whose CPUs in
/// `A` number `k` and carry `x_milli` with the group on them (`X_D`) is
/// not imbalanced against the average of `A` — `n` CPUs carrying
/// `total_milli` (`T`), the group included — by the balancer's test on
/// their averages. Exact in integers; `k = 0` is never within.
pub(crate) fn within_share(x_milli: u64, k: u64, total_milli: u64, n: u64, pct: u32) -> bool {
    if k == 0 {
        return false;
    }
    let (x, k, t, n) = (
        u128::from(x_milli),
        u128::from(k),
        u128::from(total_milli),
        u128::from(n),
    );
    let whole_task_above = x * n >= t * k + u128::from(TASK_MILLI) * k * n;
    let pct_above = x * n * 100 >= t * k * u128::from(100 + pct);
    !(whole_task_above && pct_above)
}

/// The acceptable test for a co-thread group of `runnable` threads
/// allowed on `allowed` under heavy load (see the module doc), with `T`
/// summed once: whether packing the group on a CPU would not make it
/// imbalanced against the average of `allowed`, the group counted. CPUs
/// outside `allowed` are not acceptable.
pub(crate) fn acceptable_test<'a>(
    config: &Config,
    base: &'a LoadVec,
    pinned: &'a Pinned,
    allowed: &'a CpuSet,
    runnable: u64,
) -> impl Fn(CpuId) -> bool + 'a {
    let r = runnable * TASK_MILLI;
    let total = base.sum(allowed) + r;
    let n = allowed.len() as u64;
    let pct = config.imbalance_pct;
    move |cpu| allowed.contains(cpu) && within_share(pinned.cpu(cpu) + r, 1, total, n, pct)
}

/// Whether `cpu` is acceptable (see [`acceptable_test`]).
#[cfg(test)]
pub(crate) fn acceptable(
    config: &Config,
    base: &LoadVec,
    pinned: &Pinned,
    allowed: &CpuSet,
    runnable: u64,
    cpu: CpuId,
) -> bool {
    acceptable_test(config, base, pinned, allowed, runnable)(cpu)
}

/// Whether some CPU of `allowed` (of the machine) is acceptable: whether a
/// heavily loaded co-thread group is packed at all.
pub(crate) fn any_acceptable(
    topo: &Topology,
    config: &Config,
    base: &LoadVec,
    pinned: &Pinned,
    allowed: &CpuSet,
    runnable: u64,
) -> bool {
    // The CPU with the least pinned load is acceptable if any is (the test
    // grows with pin(c)).
    allowed
        .iter()
        .filter(|&c| topo.leaf(c).is_some())
        .min_by_key(|&c| pinned.cpu(c))
        .is_some_and(acceptable_test(config, base, pinned, allowed, runnable))
}

/// Steps up from `cpu`'s leaf to the first domain meeting `set`; `None`
/// when no domain does (an empty set).
fn steps_to(topo: &Topology, cpu: CpuId, set: &CpuSet) -> Option<usize> {
    topo.ancestors(cpu).position(|d| d.cpus.intersects(set))
}

/// The load regime rules 1–5 run under, which decides `K` (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Among {
    /// Light load: CPUs not imbalanced against the least-loaded one.
    Light,
    /// Heavy load, a group of this many runnable threads (at least 1): the
    /// acceptable CPUs, or all of `A` when none is.
    Heavy(u64),
}

/// The CPU a co-thread group starts from, by rules 1–5 among the CPUs `K`
/// of `allowed` (module doc), and the rule that chose it. `allowed` is
/// never empty.
pub(crate) fn pick(
    topo: &Topology,
    config: &Config,
    base: &LoadVec,
    allowed: &CpuSet,
    among: Among,
    near: Near<'_>,
) -> (CpuId, Rule) {
    let m = least(base, allowed);
    let pct = config.imbalance_pct;
    let heavy = match among {
        Among::Light => None,
        Among::Heavy(r) => Some(acceptable_test(config, base, near.pinned, allowed, r)),
    };
    let ok = |c: CpuId| match &heavy {
        None => !imbalanced(base.get(c), m, pct),
        Some(test) => test(c),
    };
    // Under heavy load with no acceptable CPU, K = A.
    let all = match among {
        Among::Light => false,
        Among::Heavy(r) => !any_acceptable(topo, config, base, near.pinned, allowed, r),
    };
    let k = || {
        allowed
            .iter()
            .filter(move |&c| topo.leaf(c).is_some() && (all || ok(c)))
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
    let c = best_by(&|_| Some(0)).expect("K is never empty");
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
        let base = load(base);
        let pinned = Pinned::all_of(&base, &eight());
        let near = Near {
            cpus: &p,
            last: last.map(CpuId),
            pinned: &pinned,
        };
        pick(
            &eight(),
            &Config::default(),
            &base,
            &set(allowed),
            Among::Heavy(1),
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
    fn acceptable_is_the_balancers_imbalance_test_against_the_average() {
        let cfg = Config::default(); // 25 %
        let a = set("0-7");
        let ok = |l: &[u64], r: u64, allowed: &CpuSet, c: u32| {
            let base = load(l);
            let topo = Topology::test(1, 1, l.len() as u32, 1);
            let pinned = Pinned::all_of(&base, &topo);
            acceptable(&cfg, &base, &pinned, allowed, r, CpuId(c))
        };
        // One thread on a uniformly loaded machine: 3 vs an average of
        // 2.125 is less than a whole task above → acceptable anywhere.
        assert!(ok(&[2000; 8], 1, &a, 0));
        // Two threads: 4 vs 2.25, a whole task and 78 % above → nowhere.
        assert!(!ok(&[2000; 8], 2, &a, 0));
        // 32 threads alone on 2 CPUs: 32 vs 16 → not acceptable.
        assert!(!ok(&[0, 0], 32, &set("0-1"), 0));
        // 9 × 3 on 2 CPUs, the other 8 processes 4 + 4: 15 vs 13.5, 11 %
        // above → acceptable.
        assert!(ok(&[12000, 12000], 3, &set("0-1"), 1));
        // Exactly 25 % and exactly a whole task above counts as
        // imbalanced: T = 8000 on 2 CPUs (avg 4000), X_0 = 5000.
        assert!(!ok(&[4000, 3000], 1, &set("0-1"), 0));
        assert!(ok(&[4000, 3000], 1, &set("0-1"), 1));
        assert!(ok(&[3999, 3001], 1, &set("0-1"), 0), "just under a task");
        // Only CPUs of A count, for the average and the candidate.
        let l = [3000, 3000, 0, 0, 0, 0, 0, 0];
        assert!(ok(&l, 1, &set("0-1"), 0));
        assert!(!ok(&l, 1, &set("0-1"), 2));
    }

    #[test]
    fn within_share_is_acceptable_for_one_cpu_and_always_holds_for_a() {
        // One CPU: the same as acceptable (X = 5000 vs T = 8000 on 2).
        assert!(!within_share(5000, 1, 8000, 2, 25));
        assert!(within_share(4999, 1, 8000, 2, 25));
        // The whole of A: X = T.
        for t in [0, 1000, 32_000, 1 << 40] {
            assert!(within_share(t, 4, t, 4, 25));
        }
        // A domain: 2 CPUs of 8 carrying 10 of T = 24 (avg 3): 5 per CPU
        // is 2 above (≥ 1) and 67 % above → not within; 7 is within.
        assert!(!within_share(10_000, 2, 24_000, 8, 25));
        assert!(within_share(7_000, 2, 24_000, 8, 25));
        assert!(!within_share(0, 0, 0, 8, 25), "no CPU of A");
    }

    #[test]
    fn with_no_acceptable_cpu_the_rules_choose_among_all_of_a() {
        // 2 threads on uniformly loaded CPUs: none acceptable; rule 1 still
        // finds the co-threads' CPU, rule 2 the last CPU.
        let base = load(&[2000; 8]);
        let a = set("0-7");
        let p = set("5");
        let pinned = Pinned::all_of(&base, &eight());
        let pick2 = |p: &CpuSet, last| {
            let near = Near {
                cpus: p,
                last,
                pinned: &pinned,
            };
            pick(
                &eight(),
                &Config::default(),
                &base,
                &a,
                Among::Heavy(2),
                near,
            )
        };
        assert!(!any_acceptable(
            &eight(),
            &Config::default(),
            &base,
            &pinned,
            &a,
            2
        ));
        assert_eq!(pick2(&p, Some(CpuId(2))), (CpuId(5), Rule::WithCoThreads));
        assert_eq!(
            pick2(&CpuSet::new(), Some(CpuId(2))),
            (CpuId(2), Rule::LastCpu)
        );
        // Under light load K is the old test: not imbalanced against the
        // least-loaded CPU, whatever the group's size.
        let l = load(&[2000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
        let pinned = Pinned::all_of(&l, &eight());
        let near = Near {
            cpus: &p,
            last: None,
            pinned: &pinned,
        };
        assert_eq!(
            pick(&eight(), &Config::default(), &l, &a, Among::Light, near),
            (CpuId(5), Rule::WithCoThreads)
        );
        let p0 = set("0");
        let near = Near {
            cpus: &p0,
            last: None,
            pinned: &pinned,
        };
        assert_eq!(
            pick(&eight(), &Config::default(), &l, &a, Among::Light, near),
            (CpuId(1), Rule::NearCoThreads)
        );
    }
}

#[cfg(test)]
#[path = "cothread_tests.rs"]
mod engine_tests;
