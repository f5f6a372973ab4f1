//! The home rule: which cache domain a priority group lives on.
//!
//! Pinter & Zalmanovici map a group to one CPU. On machines with cache
//! hierarchies dfsched maps it to the **smallest cache domain that can hold
//! its runnable threads at the current load**; under heavy load that is one
//! CPU, exactly as in the paper.
//!
//! Terms, for a group `g`:
//! - `A` — the CPUs `g` may use: the intersection of the allowed sets of its
//!   runnable members (of all members when none runs), or their union when
//!   that intersection is empty. Never empty.
//! - `r` — its runnable members.
//! - `base` — the load of every CPU *without* `g`'s runnable members.
//! - a domain `D` **holds** `g` when every runnable thread of `g` can have a
//!   CPU of its own in it, load and capacity both counted on `D ∩ A`, in
//!   whole tasks: `D ∩ A ≠ ∅` and `⌊base(D ∩ A) / 1000⌋ + r ≤ |D ∩ A|`.
//!
//! Why whole tasks: a fraction of a task in `base(D ∩ A)` can only come from
//! tasks whose target straddles `D ∩ A` (a task inside it counts 1000
//! there), and those may run outside it. Counting the fraction would make
//! half-tasks block each other: on 2 CPUs, two threads that have not hinted
//! yet count 500 on each CPU, so the first to hint would find no free CPU,
//! take both, and leave the second the same picture — two one-thread groups
//! each spread over both CPUs, for good, since each keeps seeing the other's
//! halves. Rounding down gives each its own CPU.
//!
//! # Regime
//!
//! The load is **heavy** when `base(A) + r × 1000 ≥ heavy_load_milli × |A|`
//! (at least `Config::heavy_load_milli` runnable tasks per CPU of `A`, the
//! group included), and **light** otherwise. `A` rather than the whole machine
//! is considered because a process confined to 2 CPUs of 16 is heavily loaded
//! when 8 of its threads run, however idle the other 14 CPUs are.
//!
//! # Choosing a home afresh
//!
//! ```text
//!   heavy:  the leaf of c, where c = least-loaded CPU of A by `base`
//!           (ties → the one in the least-loaded branch walking down from
//!           the root: an emptier node, then LLC, …; then lowest CPU id;
//!           see `least_loaded_spread`).
//!
//!   light:  walk up from c:        root ─┐   largest; taken if nothing holds
//!                                  LLC  ─┤
//!                                  core ─┤   first domain that holds g = D
//!                                  leaf(c)
//!           then refine: if some strictly smaller domain inside D holds g,
//!           take the smallest such (fewest CPUs, then least `base` load on
//!           D ∩ A, then lowest DomainId).
//! ```
//!
//! The refinement matters when the least-loaded CPU's own ancestors are
//! crowded by a sibling while another branch has room: without it the fresh
//! choice could fail the "keep" test below and the group would be re-chosen
//! on every evaluation. With it, a fresh choice always passes the keep test
//! (a property test checks this), so homes never flap on unchanged load.
//!
//! A group with no runnable member is sized as if it had one, so that a DF
//! first named by a blocked task still gets a sensible home.
//!
//! # Spread load
//!
//! Inside the engine a DF group's room test counts, in `D`, only the load
//! that must run inside `D`: external load and tasks targeted at one CPU of
//! `D` on their CPU, tasks spread over several CPUs only when their target
//! lies inside `D` (`cothread::Pinned`; each at its share on `A`). A task
//! spread over a wider target may run outside `D`, and the kernel moves it
//! there when `D` fills, so it takes no room in `D`. Counting it by its
//! per-CPU fraction, as `base` does, made spread groups block one another
//! for good: 4 DF groups of 4 on 16 CPUs in 4 LLCs, all spread over the
//! machine (as CPU hot-unplug leaves them: 16 threads on 12 CPUs fit no
//! LLC), put 12 × 1000 / 16 = 750 on every CPU beside each group, so each
//! LLC seemed to hold 3 tasks and room for 1, no group fitted any LLC, and
//! all four stayed spread after the CPUs came back, with every CPU equally
//! loaded and nothing for the balancer to repair. With the spread load
//! left out, the first group re-evaluated finds an LLC empty and takes it,
//! the next finds another, and so on: one LLC each within a pass. (The
//! agent's per-process homes, `rules.rs`, know only per-CPU load and keep
//! counting `base`.)
//!
//! # Keeping the current home (hysteresis)
//!
//! When a group is re-evaluated (a member joins, leaves, wakes or changes its
//! allowed CPUs, and in every balancer pass) it keeps its current home `H`
//! when `H` still satisfies the rule's constraint:
//! - no runnable member (`r = 0`): always kept, there is nothing to place;
//! - heavy: `H` is a single CPU, and that CPU is in `A`;
//! - light: `H` holds `g`, and no strictly smaller domain inside `H` does.
//!
//! Only otherwise is a home chosen afresh. So a group that fits where it is
//! stays there even if another place has become slightly emptier; moving it
//! for balance is the balancer's job, which only moves when the imbalance is
//! at least one whole task.
//!
//! # Co-thread groups
//!
//! A co-thread group (`Shape::near` is `Some`) follows the same rule with
//! these differences, the arithmetic in `cothread.rs`:
//! - a fresh choice starts from the CPU its rules 1–5 pick (where its
//!   co-threads are, where it last ran, …) instead of the least-loaded CPU;
//! - under heavy load a domain holds the group when it stays **within the
//!   fair share** (`cothread::within_share`): `g` on `D ∩ A` would not make
//!   those CPUs imbalanced against the average of `A` by the balancer's
//!   test, `D`'s own load being what must run there — load pinned on its
//!   CPUs and tasks spread inside it (`cothread::Pinned`), not the
//!   fractions of tasks that may run elsewhere too (`cothread.rs`, "Why
//!   pinned load"). For one CPU that is "acceptable". So the walk up from the start
//!   stops at once — the group is packed on one CPU — when the start is
//!   acceptable, and otherwise goes up to the smallest domain within its
//!   share (the root at worst, which always is), then refines inside it as
//!   under light load:
//!
//! ```text
//!   2 CPUs, idle, 1 process of r threads (heavy from r = 4):
//!     r = 4..:   X_0 = r·1000 vs avg = r·500 → CPU 0 not acceptable
//!                root: X = T → within         → home 0-1 (vanilla's spread)
//!   2 CPUs, 9 processes × 3 threads, the others 4 + 4 on the CPUs:
//!     X_c = 15000, avg = 13500, 15000 < 1.25 × 13500 → home = one CPU
//! ```
//!
//! - it keeps its home under heavy load while the home is within its share
//!   and no smaller domain inside it is, and — for a home of several CPUs —
//!   while no CPU of `A` is acceptable (else it would be packed afresh). A
//!   fresh choice passes that test by construction.

use crate::config::Config;
use crate::cothread::{self, Near, Pinned};
use crate::cpuset::CpuSet;
use crate::ids::{CpuId, DomainId};
use crate::load::{LoadVec, TASK_MILLI};
use crate::topology::{Domain, Topology};

/// What the home rule needs to know about one group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape<'a> {
    /// Load per CPU without the group's runnable members.
    pub base: &'a LoadVec,
    /// `A`: the CPUs the group may use; never empty.
    pub allowed: &'a CpuSet,
    /// `r`: the group's runnable members.
    pub runnable: u64,
    /// For a co-thread group, where its co-threads are and where the task
    /// being placed last ran (`cothread.rs`); `None` for a DF group.
    pub near: Option<Near<'a>>,
    /// For a DF group homed by the engine, the load sorted by where it must
    /// run (`cothread::Pinned`, without the group): the room test then
    /// counts in `D` only the load that cannot run outside `D` (see "Spread
    /// load" in the module doc). `None` counts `base` (the agent's
    /// per-process homes, `rules.rs`, which know no tasks).
    pub spread: Option<&'a Pinned>,
}

/// What a domain `D` must satisfy to hold a group.
#[derive(Clone, Copy, Debug)]
enum Test<'p> {
    /// Every runnable thread has a CPU of its own on `D ∩ A` (light load),
    /// `D`'s load being `base` or, with `inside`, the load that must run
    /// inside `D` (pinned on its CPUs or spread within it).
    Room {
        /// The load by where it must run, if known.
        inside: Option<&'p Pinned>,
    },
    /// `D ∩ A` stays within its fair share of `A`'s load, `A` having `cpus`
    /// CPUs and carrying `total_milli` with the group (a co-thread group
    /// under heavy load; `cothread::within_share`), `D`'s own load being
    /// the load pinned inside it, not its `base`.
    Share {
        /// The pinned load (`cothread::Pinned`).
        pinned: &'p Pinned,
        /// `T = base(A) + r × 1000`.
        total_milli: u64,
        /// `n = |A|`.
        cpus: u64,
        /// The balancer's `imbalance_pct`.
        pct: u32,
    },
}

/// The load regime a group is evaluated under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Regime {
    /// At least `heavy_load_milli` per CPU of `A`: one CPU per group.
    Heavy,
    /// Below it: the smallest domain that holds the group.
    Light,
}

impl Regime {
    /// The regime of a group given `base(A) + r × 1000`, the load on its
    /// allowed CPUs with the group counted.
    pub(crate) fn of(config: &Config, load_on_a_milli: u64, a_len: usize) -> Regime {
        let threshold = config.heavy_load_milli.saturating_mul(a_len as u64);
        if load_on_a_milli >= threshold {
            Regime::Heavy
        } else {
            Regime::Light
        }
    }
}

impl<'a> Shape<'a> {
    /// The regime, counting the group's own runnable members.
    pub(crate) fn regime(&self, topo: &Topology, config: &Config) -> Regime {
        let total = self.base_on_a(topo) + self.runnable * TASK_MILLI;
        Regime::of(config, total, self.allowed.len())
    }

    /// `base(A)`: O(1) when `A` is the whole machine (most groups: the
    /// vector keeps its total; CPUs the machine lacks stay 0 in it), else
    /// O(|A|).
    fn base_on_a(&self, topo: &Topology) -> u64 {
        if self.allowed == topo.cpus() {
            let total = self.base.total();
            debug_assert_eq!(total, self.base.sum(self.allowed), "base's total");
            total
        } else {
            self.base.sum(self.allowed)
        }
    }

    /// `(load(D ∩ A), |D ∩ A|)` of one domain, its load as `test` counts
    /// it: `base` for [`Test::Room`]; for [`Test::Share`] the load pinned
    /// on its CPUs plus the spread load inside it (`inside` of it and of
    /// every domain below it).
    fn fit_of(&self, topo: &Topology, test: Test<'_>, d: &Domain) -> (u64, u64) {
        let on_cpus = |load: &dyn Fn(CpuId) -> u64| {
            d.cpus
                .iter()
                .filter(|c| self.allowed.contains(*c))
                .fold((0, 0), |(sum, cap), c| (sum + load(c), cap + 1))
        };
        match test {
            Test::Room { inside: None } => on_cpus(&|c| self.base.get(c)),
            Test::Room {
                inside: Some(pinned),
            }
            | Test::Share { pinned, .. } => {
                let (sum, cap) = on_cpus(&|c| pinned.cpu(c));
                (sum + inside_below(topo, pinned, d), cap)
            }
        }
    }

    /// `(base(D ∩ A), |D ∩ A|)` of `d`, found in one walk of its subtree
    /// (bottom-up sums, no allocation), offering every domain strictly
    /// inside `d` that holds the group by `test` to `best`. O(subtree),
    /// however many of its domains are then compared.
    ///
    /// A domain of fewer than `r` CPUs cannot hold the group by the room
    /// test, nor can any domain inside it; so, with the state's maintained
    /// pinned load (which keeps each domain's `below` and is only used when
    /// `A` is the whole machine, `state.rs`), such a subtree is not walked:
    /// its load is `below(D)` and its capacity `|D|`. The keep test of a
    /// group of 16 on an LLC of 32 cores visits 33 domains, not 97.
    fn fit_below(
        &self,
        topo: &Topology,
        test: Test<'_>,
        d: DomainId,
        best: &mut Smallest,
    ) -> (u64, u64) {
        let dom = topo.domain(d);
        if let Test::Room {
            inside: Some(pinned),
        } = test
        {
            if let Some(below) = pinned.below(d) {
                let cpus = dom.cpus.len() as u64;
                if cpus < self.runnable {
                    if cfg!(debug_assertions) {
                        assert!(self.allowed == topo.cpus());
                        let mut none = Smallest::default();
                        let walked = self.fit_walked(topo, test, d, &mut none);
                        assert_eq!((below, cpus), walked, "below is the subtree's sum");
                        assert!(none.best.is_none(), "nothing inside holds the group");
                    }
                    return (below, cpus);
                }
            }
        }
        self.fit_walked(topo, test, d, best)
    }

    /// [`Shape::fit_below`] walking the whole subtree.
    fn fit_walked(
        &self,
        topo: &Topology,
        test: Test<'_>,
        d: DomainId,
        best: &mut Smallest,
    ) -> (u64, u64) {
        let dom = topo.domain(d);
        if dom.children.is_empty() {
            let c = dom.cpus.first().expect("domains are never empty");
            let load = match test {
                Test::Room { inside: None } => self.base.get(c),
                Test::Room {
                    inside: Some(pinned),
                }
                | Test::Share { pinned, .. } => pinned.cpu(c) + pinned.inside(d),
            };
            return if self.allowed.contains(c) {
                (load, 1)
            } else {
                (0, 0)
            };
        }
        let mut fit = match test {
            Test::Room { inside: None } => (0, 0),
            Test::Room {
                inside: Some(pinned),
            }
            | Test::Share { pinned, .. } => (pinned.inside(d), 0),
        };
        for &child in &dom.children {
            let (sum, cap) = self.fit_below(topo, test, child, best);
            if self.holds(test, (sum, cap)) {
                best.offer(topo.domain(child).cpus.len(), sum, child);
            }
            fit = (fit.0 + sum, fit.1 + cap);
        }
        fit
    }

    /// Whether a domain holds the group by `test`, from its
    /// `(base(D ∩ A), |D ∩ A|)`.
    #[inline]
    fn holds(&self, test: Test<'_>, (sum, cap): (u64, u64)) -> bool {
        match test {
            // Every runnable thread gets a CPU of its own on D ∩ A, in
            // whole tasks.
            Test::Room { .. } => cap > 0 && sum / TASK_MILLI + self.runnable <= cap,
            Test::Share {
                total_milli,
                cpus,
                pct,
                ..
            } => cothread::within_share(
                sum + self.runnable * TASK_MILLI,
                cap,
                total_milli,
                cpus,
                pct,
            ),
        }
    }

    /// The test a domain must pass to hold the group: [`Test::Room`] but
    /// for a co-thread group under heavy load.
    fn test(&self, topo: &Topology, config: &Config) -> Test<'a> {
        match self.near {
            Some(near) if self.regime(topo, config) == Regime::Heavy => Test::Share {
                pinned: near.pinned,
                total_milli: self.base_on_a(topo) + self.runnable * TASK_MILLI,
                cpus: self.allowed.len() as u64,
                pct: config.imbalance_pct,
            },
            _ => Test::Room {
                inside: self.spread,
            },
        }
    }

    /// The same group counted with at least one runnable member.
    fn at_least_one(&self) -> Shape<'a> {
        Shape {
            runnable: self.runnable.max(1),
            ..*self
        }
    }
}

/// The keep test where it needs no load vector: `Some(true)` for a group
/// with no runnable member or a heavily loaded DF group whose home is a CPU
/// of `A`, `None` when [`keeps`] must decide (a co-thread group's CPU must
/// also be acceptable for the load, which needs the base). `load_on_a_milli`
/// is `base(A) + r × 1000`. This is the hint's fast path under heavy load.
pub(crate) fn keeps_at_a_glance(
    topo: &Topology,
    config: &Config,
    allowed: &CpuSet,
    runnable: u64,
    load_on_a_milli: u64,
    home: DomainId,
    co_thread: bool,
) -> Option<bool> {
    let heavy = Regime::of(config, load_on_a_milli, allowed.len()) == Regime::Heavy;
    let heavy_kept = heavy && !co_thread && keeps_heavy(topo, allowed, home);
    (runnable == 0 || heavy_kept).then_some(true)
}

/// The heavy-load keep test: the home is one CPU, and a CPU of `A`.
fn keeps_heavy(topo: &Topology, allowed: &CpuSet, home: DomainId) -> bool {
    let cpus = &topo.domain(home).cpus;
    cpus.len() == 1 && cpus.is_subset(allowed)
}

/// Whether the group keeps `home` (see "hysteresis" in the module doc).
pub(crate) fn keeps(topo: &Topology, config: &Config, shape: &Shape<'_>, home: DomainId) -> bool {
    if shape.runnable == 0 {
        return true;
    }
    let test = shape.test(topo, config);
    match (shape.regime(topo, config), test) {
        (Regime::Heavy, Test::Room { .. }) => keeps_heavy(topo, shape.allowed, home),
        (Regime::Heavy, Test::Share { pinned, .. }) => {
            let mut inside = Smallest::default();
            let fit = shape.fit_below(topo, test, home, &mut inside);
            shape.holds(test, fit)
                && inside.best.is_none()
                && (topo.domain(home).cpus.len() == 1
                    || !cothread::any_acceptable(
                        topo,
                        config,
                        shape.base,
                        pinned,
                        shape.allowed,
                        shape.runnable,
                    ))
        }
        (Regime::Light, _) => {
            let mut inside = Smallest::default();
            let fit = shape.fit_below(topo, test, home, &mut inside);
            shape.holds(test, fit) && inside.best.is_none()
        }
    }
}

/// A home chosen afresh (see the module doc), walking up from `start` or,
/// when `start` is `None` or not a CPU of `A`, from the least-loaded CPU
/// of `A` — for a co-thread group, from the CPU its rules 1–5 pick.
pub(crate) fn choose(
    topo: &Topology,
    config: &Config,
    shape: &Shape<'_>,
    start: Option<CpuId>,
) -> DomainId {
    let shape = shape.at_least_one();
    let regime = shape.regime(topo, config);
    let c = start
        .filter(|c| shape.allowed.contains(*c) && topo.leaf(*c).is_some())
        .or_else(|| {
            let near = shape.near?;
            let among = match regime {
                Regime::Heavy => cothread::Among::Heavy(shape.runnable),
                Regime::Light => cothread::Among::Light,
            };
            Some(cothread::pick(topo, config, shape.base, shape.allowed, among, near).0)
        })
        .or_else(|| least_loaded_spread(topo, shape.base, shape.allowed))
        .expect("a group's allowed CPUs are never empty");
    let leaf = topo.leaf(c).expect("allowed CPUs are CPUs of the machine");
    let test = shape.test(topo, config);
    if regime == Regime::Heavy && matches!(test, Test::Room { .. }) {
        return leaf; // a DF group: one CPU
    }
    // Walk up from c, growing (base, capacity) by the siblings' CPUs at
    // each step: O(|D|) to find D, not O(machine).
    let mut d = topo.domain(leaf);
    let mut fit = shape.fit_of(topo, test, d);
    while !shape.holds(test, fit) {
        let Some(parent) = d.parent.map(|p| topo.domain(p)) else {
            break; // nothing holds the group: the root
        };
        for &sib in parent.children.iter().filter(|&&s| s != d.id) {
            let (sum, cap) = shape.fit_of(topo, test, topo.domain(sib));
            fit = (fit.0 + sum, fit.1 + cap);
        }
        if let Test::Share { pinned, .. }
        | Test::Room {
            inside: Some(pinned),
        } = test
        {
            fit.0 += pinned.inside(parent.id);
        }
        d = parent;
    }
    let mut inside = Smallest::default();
    shape.fit_below(topo, test, d.id, &mut inside);
    inside.best.map_or(d.id, |(_, _, id)| id)
}

/// The least-loaded CPU of `allowed`; among equally loaded ones, the one
/// reached by walking down from the root into the child with the least
/// load per allowed CPU (ties to the lowest id) that still holds such a
/// CPU. So with two groups of two on two idle LLCs of four, the second
/// group starts in the empty LLC, not on the free core beside the first:
/// groups spread over LLCs (and nodes) before they share one. Without
/// ties this is plain `argmin`. Cost: O(|allowed| × depth).
pub(crate) fn least_loaded_spread(
    topo: &Topology,
    base: &LoadVec,
    allowed: &CpuSet,
) -> Option<CpuId> {
    let min = allowed.iter().map(|c| base.get(c)).min()?;
    let mut d = topo.domain(topo.root());
    loop {
        // (Σ load, |D ∩ A|, id) of the best child holding a least-loaded CPU.
        let mut best: Option<(u64, u64, DomainId)> = None;
        for &child in &d.children {
            let cpus = &topo.domain(child).cpus;
            let mine = cpus.intersection(allowed);
            if !mine.iter().any(|c| base.get(c) == min) {
                continue;
            }
            let (sum, n) = (base.sum(&mine), mine.len() as u64);
            // sum/n < best_sum/best_n, compared without division.
            let better = best.is_none_or(|(bs, bn, _)| sum * bn < bs * n);
            if better {
                best = Some((sum, n, child));
            }
        }
        match best {
            Some((_, _, child)) => d = topo.domain(child),
            None => break,
        }
    }
    d.cpus
        .intersection(allowed)
        .iter()
        .find(|&c| base.get(c) == min)
}

/// `Σ inside` over `d` and every domain below it.
fn inside_below(topo: &Topology, pinned: &Pinned, d: &Domain) -> u64 {
    pinned.inside(d.id)
        + d.children
            .iter()
            .map(|&c| inside_below(topo, pinned, topo.domain(c)))
            .sum::<u64>()
}

/// Re-evaluates a group: `current` if it is kept, else a fresh choice.
pub(crate) fn evaluate(
    topo: &Topology,
    config: &Config,
    shape: &Shape<'_>,
    current: DomainId,
) -> DomainId {
    if keeps(topo, config, shape, current) {
        current
    } else {
        choose(topo, config, shape, None)
    }
}

/// The best strictly smaller domain inside a domain that holds the group:
/// fewest CPUs, then least base load on `D ∩ A`, then lowest id.
#[derive(Default)]
struct Smallest {
    /// `(|D|, base(D ∩ A), D)` of the best so far.
    best: Option<(usize, u64, DomainId)>,
}

impl Smallest {
    fn offer(&mut self, cpus: usize, base_milli: u64, d: DomainId) {
        if self.best.is_none_or(|b| (cpus, base_milli, d) < b) {
            self.best = Some((cpus, base_milli, d));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// A load vector with `milli[i]` on CPU i.
    fn load(milli: &[u64]) -> LoadVec {
        let mut v = LoadVec::zero(&CpuSet::first_n(milli.len() as u32));
        for (i, &m) in milli.iter().enumerate() {
            v.add_cpu(CpuId(i as u32), m);
        }
        v
    }

    fn cpus_of(topo: &Topology, d: DomainId) -> String {
        topo.domain(d).cpus.to_string()
    }

    fn fresh(topo: &Topology, base: &LoadVec, allowed: &str, r: u64) -> String {
        let a = set(allowed);
        let shape = Shape {
            base,
            allowed: &a,
            runnable: r,
            near: None,
            spread: None,
        };
        cpus_of(topo, choose(topo, &Config::default(), &shape, None))
    }

    #[test]
    fn load_spread_over_the_machine_keeps_no_df_group_out_of_an_empty_llc() {
        // 4 LLCs of 4; the other 12 threads of three groups spread over the
        // machine: 750 on every CPU, all of it spread at the root.
        let t = Topology::test(1, 4, 4, 1);
        let cfg = Config::default();
        let base = load(&[750; 16]);
        let a = set("0-15");
        let mut pinned = Pinned::default();
        pinned.reset(&t);
        pinned.add_inside(t.root(), 12_000);
        let by_base = Shape {
            base: &base,
            allowed: &a,
            runnable: 4,
            near: None,
            spread: None,
        };
        // Counted per CPU, no LLC has room (⌊3000⌋ + 4 > 4): the machine,
        // and the machine is kept.
        assert_eq!(cpus_of(&t, choose(&t, &cfg, &by_base, None)), "0-15");
        assert!(keeps(&t, &cfg, &by_base, t.root()));
        // Counted where it must run, every LLC has room: the group takes
        // one, and a home on the whole machine is not kept.
        let by_place = Shape {
            spread: Some(&pinned),
            ..by_base
        };
        assert_eq!(cpus_of(&t, choose(&t, &cfg, &by_place, None)), "0-3");
        assert!(!keeps(&t, &cfg, &by_place, t.root()));
        // Load pinned in an LLC still counts there.
        pinned.add_inside(t.smallest_holding(&set("0-3")), 4_000);
        let fuller = Shape {
            spread: Some(&pinned),
            ..by_base
        };
        assert_eq!(cpus_of(&t, choose(&t, &cfg, &fuller, None)), "4-7");
    }

    #[test]
    fn light_load_on_two_cpus_gives_one_task_a_cpu_and_more_both() {
        let t = Topology::test(1, 1, 2, 1);
        let idle = load(&[0, 0]);
        assert_eq!(fresh(&t, &idle, "0-1", 1), "0");
        assert_eq!(fresh(&t, &idle, "0-1", 2), "0-1");
        assert_eq!(
            fresh(&t, &idle, "0-1", 3),
            "0-1",
            "nothing holds 3: the root"
        );
    }

    #[test]
    fn heavy_load_on_two_cpus_gives_one_cpu() {
        let t = Topology::test(1, 1, 2, 1);
        // 4 runnable tasks on 2 CPUs is the default threshold (2 per CPU).
        assert_eq!(fresh(&t, &load(&[0, 0]), "0-1", 4), "0");
        assert_eq!(fresh(&t, &load(&[2000, 0]), "0-1", 2), "1");
        assert_eq!(
            fresh(&t, &load(&[1000, 1000]), "0-1", 2),
            "0",
            "tie → lowest"
        );
    }

    #[test]
    fn light_load_takes_the_smallest_domain_holding_the_group() {
        // 8 CPUs: node 0-7, LLCs 0-3 and 4-7, SMT cores {0,1} {2,3} ...
        let t = Topology::test(1, 2, 2, 2);
        let idle = load(&[0; 8]);
        assert_eq!(fresh(&t, &idle, "0-7", 1), "0");
        assert_eq!(fresh(&t, &idle, "0-7", 2), "0-1");
        assert_eq!(fresh(&t, &idle, "0-7", 3), "0-3");
        assert_eq!(fresh(&t, &idle, "0-7", 4), "0-3");
        assert_eq!(fresh(&t, &idle, "0-7", 5), "0-7");
        // Busy first LLC: a group of 3 goes to the other one.
        let busy = load(&[1000, 1000, 0, 1000, 0, 0, 0, 0]);
        assert_eq!(fresh(&t, &busy, "0-7", 3), "4-7");
        // Capacity is counted on D ∩ A only.
        assert_eq!(fresh(&t, &idle, "0-2", 3), "0-3");
        assert_eq!(fresh(&t, &idle, "0-2", 2), "0-1");
    }

    #[test]
    fn fresh_choice_refines_into_a_branch_with_room() {
        // CPU 0 is the least loaded but its core sibling is busy; the other
        // core of the same LLC is (almost) free and holds a group of 2.
        let t = Topology::test(1, 2, 2, 2);
        let l = load(&[0, 1500, 0, 0, 500, 500, 500, 500]);
        assert_eq!(fresh(&t, &l, "0-7", 2), "2-3");
    }

    #[test]
    fn a_fresh_home_spreads_over_llcs_before_sharing_one() {
        // Two LLCs of two SMT cores; a group of two already on core 0-1.
        let topo = Topology::test(1, 2, 2, 2);
        let mut base = LoadVec::zero(topo.cpus());
        base.add_cpu(CpuId(0), 1000);
        base.add_cpu(CpuId(1), 1000);
        assert_eq!(
            least_loaded_spread(&topo, &base, topo.cpus()),
            Some(CpuId(4)),
            "the empty LLC, not core 2-3 beside the busy one"
        );
        // A less loaded CPU still wins over an emptier domain.
        base.add_cpu(CpuId(4), 1000);
        base.add_cpu(CpuId(5), 300);
        base.add_cpu(CpuId(6), 300);
        base.add_cpu(CpuId(7), 300);
        base.add_cpu(CpuId(2), 1000);
        assert_eq!(
            least_loaded_spread(&topo, &base, topo.cpus()),
            Some(CpuId(3))
        );
        // Only allowed CPUs count.
        assert_eq!(
            least_loaded_spread(&topo, &base, &set("4-5")),
            Some(CpuId(5))
        );
    }

    #[test]
    fn a_start_cpu_overrides_the_least_loaded_one() {
        let t = Topology::test(1, 2, 2, 2);
        let a = set("0-7");
        let idle = load(&[0; 8]);
        let shape = Shape {
            base: &idle,
            allowed: &a,
            runnable: 1,
            near: None,
            spread: None,
        };
        let d = choose(&t, &Config::default(), &shape, Some(CpuId(6)));
        assert_eq!(cpus_of(&t, d), "6");
        // A start outside A is ignored.
        let b = set("0-3");
        let shape = Shape {
            allowed: &b,
            ..shape
        };
        let d = choose(&t, &Config::default(), &shape, Some(CpuId(6)));
        assert_eq!(cpus_of(&t, d), "0");
    }

    #[test]
    fn keep_test_is_exact() {
        let t = Topology::test(1, 2, 2, 2);
        let cfg = Config::default();
        let a = set("0-7");
        let dom = |s: &str| t.smallest_holding(&set(s));
        let keeps_at = |l: &LoadVec, r: u64, home: &str| {
            let shape = Shape {
                base: l,
                allowed: &a,
                runnable: r,
                near: None,
                spread: None,
            };
            keeps(&t, &cfg, &shape, dom(home))
        };
        let idle = load(&[0; 8]);
        // Light: holds and nothing smaller inside holds.
        assert!(keeps_at(&idle, 2, "0-1"));
        assert!(keeps_at(&idle, 2, "4-5"), "any fitting place is kept");
        assert!(!keeps_at(&idle, 2, "0-3"), "a core inside holds 2");
        assert!(!keeps_at(&idle, 3, "0-1"), "a core cannot hold 3");
        assert!(keeps_at(&idle, 3, "0-3"));
        // Exactly full still holds: 1 + 1 ≤ 2 whole tasks.
        let one = load(&[1000, 0, 0, 0, 0, 0, 0, 0]);
        assert!(keeps_at(&one, 1, "1"));
        assert!(!keeps_at(&one, 1, "0"), "CPU 0 is taken");
        assert!(!keeps_at(&one, 2, "0-1"), "one task too many for the core");
        // Fractions of tasks (of tasks straddling the domain) do not count,
        // a whole task does.
        let almost = load(&[999, 0, 0, 0, 0, 0, 0, 0]);
        assert!(keeps_at(&almost, 1, "0"));
        assert!(keeps_at(&almost, 2, "0-1"));
        let halves = load(&[500, 500, 0, 0, 0, 0, 0, 0]);
        assert!(
            !keeps_at(&halves, 2, "0-1"),
            "two halves on the core make one task"
        );
        assert!(keeps_at(&halves, 1, "0"));
        // No runnable member: kept whatever it is.
        assert!(keeps_at(&idle, 0, "0-7"));
        // Heavy (≥ 2 per CPU with the group): single CPU in A, and only that.
        let heavy = load(&[2000; 8]);
        assert!(keeps_at(&heavy, 1, "5"));
        assert!(!keeps_at(&heavy, 1, "4-5"));
        let b = set("0-3");
        let shape = Shape {
            base: &heavy,
            allowed: &b,
            runnable: 1,
            near: None,
            spread: None,
        };
        assert!(!keeps(&t, &cfg, &shape, dom("5")), "CPU 5 is outside A");
    }

    #[test]
    fn co_thread_keep_test_under_heavy_load_is_the_fair_share() {
        let t = Topology::test(1, 1, 2, 1);
        let cfg = Config::default();
        let a = set("0-1");
        let none = CpuSet::new();
        let keeps_at = |l: &LoadVec, r: u64, home: &str, co_thread: bool| {
            let pinned = Pinned::all_of(l, &t);
            let near = Near {
                cpus: &none,
                last: None,
                pinned: &pinned,
            };
            let shape = Shape {
                base: l,
                allowed: &a,
                runnable: r,
                near: co_thread.then_some(near),
                spread: None,
            };
            keeps(&t, &cfg, &shape, t.smallest_holding(&set(home)))
        };
        // 8 threads alone: not one CPU (8 vs an average of 4), the machine.
        let idle = load(&[0, 0]);
        assert!(!keeps_at(&idle, 8, "0", true));
        assert!(keeps_at(&idle, 8, "0-1", true));
        assert_eq!(fresh_co(&t, &idle, 8), "0-1");
        // A DF group of 8 keeps its CPU: the paper's rule, unchanged.
        assert!(keeps_at(&idle, 8, "0", false));
        // 3 threads beside 8 others per CPU: a CPU is acceptable (11 vs
        // 9.5), so it is kept and the machine is not.
        let l = load(&[8000, 8000]);
        assert!(keeps_at(&l, 3, "1", true));
        assert!(!keeps_at(&l, 3, "0-1", true));
        assert_eq!(fresh_co(&t, &l, 3), "0");
        // The CPU stops being kept when the load makes it unacceptable:
        // 3 + 8 against an average of 8.5 (other CPU at 3).
        let l = load(&[8000, 3000]);
        assert!(!keeps_at(&l, 3, "0", true));
        assert!(keeps_at(&l, 3, "1", true));
    }

    /// A fresh home for a co-thread group with no co-threads placed yet.
    fn fresh_co(topo: &Topology, base: &LoadVec, r: u64) -> String {
        let a = topo.cpus().clone();
        let none = CpuSet::new();
        let pinned = Pinned::all_of(base, topo);
        let shape = Shape {
            base,
            allowed: &a,
            runnable: r,
            near: Some(Near {
                cpus: &none,
                last: None,
                pinned: &pinned,
            }),
            spread: None,
        };
        cpus_of(topo, choose(topo, &Config::default(), &shape, None))
    }

    #[test]
    fn regime_threshold_counts_the_group_and_only_cpus_of_a() {
        let cfg = Config::default();
        let t = Topology::test(1, 1, 2, 2);
        let a = set("0-1");
        let l = load(&[1000, 1000, 0, 0]);
        let shape = |r| Shape {
            base: &l,
            allowed: &a,
            runnable: r,
            near: None,
            spread: None,
        };
        assert_eq!(shape(1).regime(&t, &cfg), Regime::Light, "3000 < 4000");
        assert_eq!(shape(2).regime(&t, &cfg), Regime::Heavy, "4000 ≥ 4000");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The hysteresis never fights the fresh choice: on unchanged load a
        /// freshly chosen home is always kept, for DF and co-thread groups.
        #[test]
        fn a_fresh_choice_is_always_kept(
            shape_idx in 0usize..4,
            loads in proptest::collection::vec(0u64..5000, 16),
            allowed_bits in 1u32..0xffff,
            r in 0u64..10,
            co_thread in any::<bool>(),
            near_bits in 0u32..0xffff,
            last in proptest::option::of(0u32..17),
            pinned_milli in proptest::collection::vec(0u64..6000, 16),
            up in proptest::collection::vec(0usize..4, 16),
        ) {
            let t = [
                Topology::test(1, 1, 2, 1),
                Topology::test(1, 2, 2, 2),
                Topology::test(2, 2, 2, 1),
                Topology::test(2, 2, 2, 2),
            ][shape_idx].clone();
            let n = t.nr_cpus();
            let l = load(&loads[..n]);
            let a: CpuSet = (0..n as u32).filter(|i| allowed_bits & (1 << i) != 0).map(CpuId).collect();
            prop_assume!(!a.is_empty());
            // Half the cases are co-thread groups with co-threads on
            // `near_bits` and a last CPU (the rules 1–5 start).
            let p: CpuSet = (0..n as u32).filter(|i| near_bits & (1 << i) != 0).map(CpuId).collect();
            // Some of each CPU's load (`pinned_milli`, at most all of it)
            // is pinned there; the rest is spread inside one of its
            // domains above its leaf (by `up`), counted there when the
            // CPU is in A — so the pinned view adds up to base(A), as the
            // engine's does.
            let mut pinned = Pinned::default();
            pinned.reset(&t);
            for c in t.cpus().iter() {
                let i = c.0 as usize;
                let pin = pinned_milli[i].min(l.get(c));
                pinned.add_cpu(c, pin);
                // Spread load is never inside a leaf alone (a task on one
                // CPU is pinned there).
                let above: Vec<_> = t.ancestors(c).skip(1).map(|d| d.id).collect();
                let d = above[up[i] % above.len()];
                if a.contains(c) {
                    pinned.add_inside(d, l.get(c) - pin);
                }
            }
            let near = co_thread.then_some(Near { cpus: &p, last: last.map(CpuId), pinned: &pinned });
            let shape = Shape {
                base: &l,
                allowed: &a,
                runnable: r,
                near,
                spread: None,
            };
            let cfg = Config::default();
            let home = choose(&t, &cfg, &shape, None);
            prop_assert!(t.domain(home).cpus.intersects(&a));
            // Kept, or the root because nothing holds the group; either way
            // re-evaluating on the same load changes nothing.
            prop_assert!(keeps(&t, &cfg, &shape, home) || home == t.root());
            prop_assert_eq!(evaluate(&t, &cfg, &shape, home), home);
        }
    }
}
