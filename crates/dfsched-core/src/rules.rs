//! The policy's arithmetic for deciders outside the engine: one home for
//! each rule, so that a body that decides at another granularity (the
//! `dfsched agent`, which places whole processes that share a pipe) calls
//! the engine's rule instead of writing it again.
//!
//! | rule | the engine's own | here |
//! |---|---|---|
//! | one runnable task weighs 1000 thousandths | `load.rs` | [`TASK_MILLI`] |
//! | a task on a set `S` weighs `1000/|S|` on each CPU of `S`, the remainder on the lowest CPUs | `load.rs` (`for_each_share`) | [`add_task_load`] |
//! | a group's `A`: its members' allowed sets' intersection, their union when that is empty | `state.rs` | [`group_allowed`] |
//! | a DF group's home: kept while it still fits, else the smallest cache domain that holds it (one CPU under heavy load) | `home.rs` | [`df_group_home`] |
//!
//! Each function here is the engine's code called with plain values, not
//! a copy of it: `rules_agree_with_the_engine` (below) replays a group's
//! hints through an [`crate::Engine`] and through [`df_group_home`] and
//! requires the same homes.

use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::home::{self, Shape};
use crate::ids::{CpuId, DomainId};
use crate::load::{self, LoadVec};
use crate::topology::Topology;
use std::collections::BTreeMap;

/// One runnable task of the engine's, in thousandths: the unit of every
/// load in dfsched (a nice-0 thread of the program's own CFS group).
pub const TASK_MILLI: u64 = load::TASK_MILLI;

/// Adds one runnable task placed on `set` to `into`, as the engine counts
/// it: `1000 / |set|` on each CPU of `set`, one more on each of the
/// `1000 mod |set|` lowest, so the task adds exactly [`TASK_MILLI`] in all.
/// An empty set adds nothing. Sums saturate.
pub fn add_task_load(set: &CpuSet, into: &mut BTreeMap<CpuId, u64>) {
    load::for_each_share(set, |cpu, milli| {
        let e = into.entry(cpu).or_default();
        *e = e.saturating_add(milli);
    });
}

/// A group's `A` from its members' allowed sets: their intersection, or
/// their union when the intersection is empty (members confined to
/// disjoint CPUs still form one group). `None` for no sets.
pub fn group_allowed<'a>(sets: impl IntoIterator<Item = &'a CpuSet>) -> Option<CpuSet> {
    let mut inter: Option<CpuSet> = None;
    let mut union = CpuSet::new();
    for s in sets {
        inter = Some(match inter {
            None => s.clone(),
            Some(i) => i.intersection(s),
        });
        union = union.union(s);
    }
    match inter {
        Some(i) if !i.is_empty() => Some(i),
        Some(_) => Some(union),
        None => None,
    }
}

/// What the home rule needs to know about one group, in plain values.
#[derive(Clone, Copy, Debug)]
pub struct GroupLoad<'a> {
    /// The load per CPU of everything but the group's runnable members, in
    /// thousandths. CPUs not listed carry none; CPUs the topology lacks
    /// are ignored.
    pub base: &'a BTreeMap<CpuId, u64>,
    /// `A`: the CPUs the group may use; must meet the topology's CPUs.
    pub allowed: &'a CpuSet,
    /// `r`: its runnable members (a group with none is sized as one).
    pub runnable: u64,
}

/// A group's home: a cache domain, and the CPUs of it the group may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// The domain.
    pub domain: DomainId,
    /// `domain ∩ A`: where the group's threads are placed; never empty.
    pub cpus: CpuSet,
}

/// The home of a DF group (the engine's rule, `home.rs`): `current` while
/// it still passes the keep test, else one chosen afresh. `current` of
/// `None`, or a domain the topology lacks, chooses afresh. Returns `None`
/// only when `group.allowed` has no CPU of the topology.
pub fn df_group_home(
    topo: &Topology,
    config: &Config,
    group: &GroupLoad<'_>,
    current: Option<DomainId>,
) -> Option<Home> {
    let allowed = group.allowed.intersection(topo.cpus());
    if allowed.is_empty() {
        return None;
    }
    let mut base = LoadVec::zero(topo.cpus());
    for (&cpu, &milli) in group.base {
        if topo.cpus().contains(cpu) {
            base.add_cpu(cpu, milli);
        }
    }
    let shape = Shape {
        base: &base,
        allowed: &allowed,
        runnable: group.runnable,
        near: None,
        spread: None,
    };
    let domain = match current.filter(|d| (d.0 as usize) < topo.domains().len()) {
        Some(d) => home::evaluate(topo, config, &shape, d),
        None => home::choose(topo, config, &shape, None),
    };
    let cpus = topo.domain(domain).cpus.intersection(&allowed);
    // A home chosen or kept for A always meets A; be safe anyway.
    let cpus = if cpus.is_empty() { allowed } else { cpus };
    Some(Home { domain, cpus })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::event::{Decision, Event};
    use crate::ids::{AppId, DfId, TaskId};
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn a_task_weighs_one_task_spread_exactly() {
        let mut m = BTreeMap::new();
        add_task_load(&set("0-2"), &mut m);
        assert_eq!(m.values().sum::<u64>(), TASK_MILLI);
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            vec![(CpuId(0), 334), (CpuId(1), 333), (CpuId(2), 333)]
        );
        let mut none = BTreeMap::new();
        add_task_load(&CpuSet::new(), &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_groups_allowed_set_is_the_intersection_else_the_union() {
        assert_eq!(group_allowed([&set("0-3"), &set("2-5")]), Some(set("2-3")));
        assert_eq!(
            group_allowed([&set("0-1"), &set("4-5")]),
            Some(set("0-1,4-5"))
        );
        assert_eq!(group_allowed(std::iter::empty()), None);
    }

    #[test]
    fn homes_shrink_with_load_as_the_engine_s_do() {
        // 2 LLCs of 2 cores of 2 threads; nothing else runs.
        let topo = Topology::test(1, 2, 2, 2);
        let cfg = Config::default();
        let all = topo.cpus().clone();
        let base = BTreeMap::new();
        let home = |r| {
            df_group_home(
                &topo,
                &cfg,
                &GroupLoad {
                    base: &base,
                    allowed: &all,
                    runnable: r,
                },
                None,
            )
            .unwrap()
            .cpus
        };
        assert_eq!(home(1), set("0"));
        assert_eq!(home(2), set("0-1"));
        assert_eq!(home(3), set("0-3"));
        assert_eq!(home(5), set("0-7"));
        let outside = set("9");
        let g = GroupLoad {
            base: &base,
            allowed: &outside,
            runnable: 1,
        };
        assert_eq!(df_group_home(&topo, &cfg, &g, None), None);
    }

    /// The homes one DF group gets from the engine, one task joining it
    /// per step beside that step's outside load (`steps[k]`, set just
    /// before the k-th hint), and from [`df_group_home`] fed the same plain
    /// values with the engine's previous home as `current`.
    fn both_homes(
        topo: &Topology,
        steps: &[Vec<(CpuId, u64)>],
        allowed: &CpuSet,
    ) -> (Vec<Home>, Vec<Home>) {
        let cfg = Config::default();
        let mut e = Engine::new(topo.clone(), cfg.clone()).unwrap();
        let ev = |e: &mut Engine, ev| e.handle(ev, &mut Vec::<Decision>::new()).unwrap();
        let (mut engine, mut rules) = (Vec::new(), Vec::new());
        let mut current = None;
        for (k, external) in steps.iter().enumerate() {
            let task = TaskId(k as u64 + 1);
            ev(
                &mut e,
                Event::ExternalLoadMilli {
                    load_milli: external.clone(),
                },
            );
            // The group's members are the engine's only tasks, so the load
            // without them is the outside load (a CPU listed twice: the sum).
            let mut base: BTreeMap<CpuId, u64> = BTreeMap::new();
            for &(cpu, m) in external {
                *base.entry(cpu).or_default() += m;
            }
            ev(
                &mut e,
                Event::TaskNew {
                    task,
                    app: AppId(0),
                    allowed: allowed.clone(),
                    cpu: None,
                },
            );
            ev(
                &mut e,
                Event::Hint {
                    task,
                    app: AppId(0),
                    cur: None,
                    next: Some(DfId(7)),
                },
            );
            let view = e.group(e.df_groups(AppId(0), DfId(7))[0]).unwrap();
            engine.push(Home {
                domain: view.home,
                cpus: e.target(task).unwrap().clone(),
            });
            let group = GroupLoad {
                base: &base,
                allowed,
                runnable: view.runnable as u64,
            };
            let home = df_group_home(topo, &cfg, &group, current).unwrap();
            current = Some(view.home);
            rules.push(home);
        }
        (engine, rules)
    }

    #[test]
    fn rules_agree_with_the_engine_on_a_two_llc_machine() {
        let topo = Topology::test(1, 2, 2, 2);
        let busy0 = vec![(CpuId(0), 3000)];
        // The load moves to the other LLC after the third hint: a kept home
        // and a fresh choice differ there.
        let busy4 = vec![(CpuId(4), 3000), (CpuId(5), 3000)];
        let steps = [busy0.clone(), busy0.clone(), busy0, busy4.clone(), busy4];
        let (engine, rules) = both_homes(&topo, &steps, topo.cpus());
        assert_eq!(engine, rules);
        // The premise: the load moved the group off CPU 0 and grew it.
        assert!(!engine[0].cpus.contains(CpuId(0)), "{engine:?}");
        assert!(engine[4].cpus.len() > engine[0].cpus.len(), "{engine:?}");
    }

    proptest! {
        /// One brain: for any machine shape and outside load changing
        /// between hints, the agent's way in (plain values, the previous
        /// home as `current`) and the engine decide the same home after
        /// every hint.
        #[test]
        fn rules_agree_with_the_engine(
            (nodes, llcs, cores, smt) in (1u32..=2, 1u32..=3, 1u32..=3, 1u32..=2),
            loads in proptest::collection::vec(
                proptest::collection::vec((0u32..36, 0u64..4000), 0..8),
                1..10,
            ),
            lo in 0u32..4,
        ) {
            let topo = Topology::test(nodes, llcs, cores, smt);
            let n = topo.nr_cpus() as u32;
            // One step per hint, each with its own outside load.
            let steps: Vec<Vec<(CpuId, u64)>> = loads
                .iter()
                .map(|l| l.iter().map(|&(c, m)| (CpuId(c % n), m)).collect())
                .collect();
            let allowed: CpuSet = (lo.min(n - 1)..n).map(CpuId).collect();
            let (engine, rules) = both_homes(&topo, &steps, &allowed);
            prop_assert_eq!(engine, rules);
        }
    }
}
