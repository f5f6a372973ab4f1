//! Property tests of the engine's invariants over random event sequences on
//! random test topologies and configurations, under each [`Policy`] (random
//! mixes of tasks that hint DFs, hint `None` and never hint):
//!
//! - a task is in exactly one group when it has a DF, in none otherwise —
//!   under `CoThread`: in exactly one group always, its application's
//!   co-thread group when it has no DF;
//! - every member of a group is targeted at its home ∩ its allowed set (its
//!   allowed set when that is empty), so nothing is ever placed outside a
//!   task's allowed CPUs;
//! - a `Place` is emitted exactly when a task's target changes;
//! - a balancer pass never widens the spread (max − min load) unless it
//!   leaves every CPU within its fair share of the machine's average;
//! - a refused event changes nothing observable and emits nothing;
//! - `check_invariants` holds after every event;
//! - the same events give byte-identical decisions.

use dfsched_core::{
    AppId, Config, CpuId, CpuSet, Decision, DfId, Engine, Event, GroupKind, Nanos, Policy, TaskId,
    Topology,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Task ids used by the generator.
const TASKS: u64 = 8;

/// An event in terms the generator can pick blindly; turned into an
/// [`Event`] against the engine's state (a hint names the task's real app
/// and DF unless `honest` is false).
#[derive(Clone, Debug)]
enum Op {
    AppNew(u64),
    New {
        task: u64,
        app: u64,
        mask: u32,
    },
    Hint {
        task: u64,
        next: Option<u64>,
        honest: bool,
    },
    Block(u64),
    Wake(u64),
    Exit(u64),
    Allowed {
        task: u64,
        mask: u32,
    },
    External(Vec<u32>),
    /// A weighed sample: thousandths per CPU, not whole tasks.
    ExternalMilli(Vec<u64>),
    Balance,
}

/// A CPU mask: usually every CPU, sometimes any subset (empty and
/// off-machine ones included, which must be refused or cut).
fn mask() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0x7fff_ffff), 1 => any::<u32>()]
}

fn op() -> impl Strategy<Value = Op> {
    let task = 0..TASKS;
    prop_oneof![
        1 => (1u64..3).prop_map(Op::AppNew),
        4 => (task.clone(), prop::sample::select(vec![0u64, 0, 0, 1, 2]), mask())
            .prop_map(|(task, app, mask)| Op::New { task, app, mask }),
        8 => (task.clone(), proptest::option::weighted(0.85, 1u64..5), proptest::bool::weighted(0.9))
            .prop_map(|(task, next, honest)| Op::Hint { task, next, honest }),
        2 => task.clone().prop_map(Op::Block),
        2 => task.clone().prop_map(Op::Wake),
        1 => task.clone().prop_map(Op::Exit),
        1 => (task, mask()).prop_map(|(task, mask)| Op::Allowed { task, mask }),
        2 => proptest::collection::vec(0u32..4, 0..9).prop_map(Op::External),
        1 => proptest::collection::vec(0u64..5000, 0..9).prop_map(Op::ExternalMilli),
        4 => Just(Op::Balance),
    ]
}

fn topologies() -> Vec<Topology> {
    vec![
        Topology::test(1, 1, 2, 1),
        Topology::test(1, 1, 3, 1),
        Topology::test(1, 2, 2, 2),
        Topology::test(2, 2, 2, 1),
        Topology::new(&"0,2,5".parse().unwrap(), vec![]).unwrap(),
    ]
}

fn config(policy: Policy) -> impl Strategy<Value = Config> {
    (
        prop::sample::select(vec![25u32, 50, 100]),
        0u32..4,
        prop::sample::select(vec![1000u64, 2000, 3000]),
        1u32..6,
    )
        .prop_map(move |(pct, split, heavy, moves)| Config {
            imbalance_pct: pct,
            split_after_passes: split,
            heavy_load_milli: heavy,
            max_moves_per_pass: moves,
            policy,
            move_unmanaged: moves % 2 == 1,
        })
}

/// The CPUs of `topo` whose index in CPU order has its bit set in `mask`
/// (plus CPU 40, which no test machine has, when bit 31 is set).
fn cpus(topo: &Topology, mask: u32) -> CpuSet {
    let mut s: CpuSet = topo
        .cpus()
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c)
        .collect();
    if mask & (1 << 31) != 0 {
        s.insert(CpuId(40));
    }
    s
}

fn to_event(e: &Engine, op: &Op) -> Event {
    let topo = e.topology();
    match op.clone() {
        Op::AppNew(app) => Event::AppNew { app: AppId(app) },
        Op::New { task, app, mask } => Event::TaskNew {
            task: TaskId(task),
            app: AppId(app),
            allowed: cpus(topo, mask),
            cpu: None,
        },
        Op::Hint { task, next, honest } => {
            let (app, cur) = e
                .task(TaskId(task))
                .map_or((AppId(0), None), |v| (v.app, v.df));
            let cur = if honest {
                cur
            } else {
                cur.map_or(Some(DfId(1)), |_| None)
            };
            Event::Hint {
                task: TaskId(task),
                app,
                cur,
                next: next.map(DfId),
            }
        }
        Op::Block(t) => Event::Block { task: TaskId(t) },
        Op::Wake(t) => Event::Wake { task: TaskId(t) },
        Op::Exit(t) => Event::Exit { task: TaskId(t) },
        Op::Allowed { task, mask } => Event::Allowed {
            task: TaskId(task),
            allowed: cpus(topo, mask),
        },
        Op::External(counts) => Event::ExternalLoad {
            runnable: topo.cpus().iter().zip(counts).collect(),
        },
        Op::ExternalMilli(milli) => Event::ExternalLoadMilli {
            load_milli: topo.cpus().iter().zip(milli).collect(),
        },
        Op::Balance => Event::Balance { now: Nanos(0) },
    }
}

fn spread(e: &Engine) -> u64 {
    let l = e.load_milli();
    let max = l.iter().map(|x| x.1).max().unwrap_or(0);
    let min = l.iter().map(|x| x.1).min().unwrap_or(0);
    max - min
}

/// Whether the busiest CPU is not imbalanced against the machine's average
/// by the balancer's test: not both a whole task (1000) and `pct` % above
/// it. In integers, ×n: `¬(max·n − T ≥ 1000·n ∧ max·n·100 ≥ T·(100 + pct))`.
fn busiest_within_share(e: &Engine, pct: u32) -> bool {
    let l = e.load_milli();
    let n = l.len() as u128;
    let total: u128 = l.iter().map(|x| u128::from(x.1)).sum();
    let max = u128::from(l.iter().map(|x| x.1).max().unwrap_or(0));
    !(max * n >= total + 1000 * n && max * n * 100 >= total * u128::from(100 + pct))
}

/// Everything observable through the public API, for before/after
/// comparisons.
fn observe(e: &Engine) -> String {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| (e.task(TaskId(t)), e.target(TaskId(t)).cloned()))
        .collect();
    let mut stats = e.stats().clone();
    stats.refused = 0;
    format!("{tasks:?}|{:?}|{:?}|{stats:?}", e.groups(), e.load_milli())
}

fn targets(e: &Engine) -> BTreeMap<TaskId, CpuSet> {
    (0..TASKS)
        .filter_map(|t| e.target(TaskId(t)).map(|c| (TaskId(t), c.clone())))
        .collect()
}

/// Checks the state-wide properties; returns a description of the first
/// violation.
fn check_state(e: &Engine) -> Result<(), String> {
    e.check_invariants()?;
    let groups = e.groups();
    for t in (0..TASKS).map(TaskId) {
        let Some(v) = e.task(t) else { continue };
        let holding: Vec<_> = groups
            .iter()
            .filter(|g| g.members.contains(&t))
            .map(|g| g.group)
            .collect();
        let expected: Vec<_> = v.group.into_iter().collect();
        let grouped = match e.config().policy {
            Policy::DataAffinity => v.df.is_some(),
            Policy::CoThread => true,
        };
        if holding != expected || v.group.is_some() != grouped {
            return Err(format!(
                "{t} in groups {holding:?}, says {:?} / {:?}",
                v.group, v.df
            ));
        }
        if let Some(g) = v.group.and_then(|g| e.group(g)) {
            let kind = v.df.map_or(GroupKind::CoThread, GroupKind::Df);
            if g.kind != kind || g.app != v.app {
                return Err(format!(
                    "{t} ({}, {kind}) in {} of {} {}",
                    v.app, g.group, g.app, g.kind
                ));
            }
        }
        let target = e.target(t).unwrap();
        if target.is_empty() || !target.is_subset(&v.allowed) {
            return Err(format!(
                "{t} targeted {target} outside allowed {}",
                v.allowed
            ));
        }
        if let Some(g) = v.group {
            let g = e.group(g).unwrap();
            let home = &e.topology().domain(g.home).cpus;
            let within = home.intersection(&v.allowed);
            let want = if within.is_empty() {
                v.allowed.clone()
            } else {
                within
            };
            if *target != want {
                return Err(format!(
                    "{t} of {} targeted {target}, home ∩ allowed is {want}",
                    g.group
                ));
            }
        }
    }
    Ok(())
}

/// Runs `ops`, checking every property after every event; returns every
/// event's decisions.
fn run(topo: &Topology, config: &Config, ops: &[Op]) -> Result<Vec<Vec<Decision>>, TestCaseError> {
    let mut e = Engine::new(topo.clone(), config.clone()).unwrap();
    let mut all = Vec::new();
    for op in ops {
        let event = to_event(&e, op);
        let shown = format!("{event:?}");
        let (before, before_targets, before_spread) = (observe(&e), targets(&e), spread(&e));
        let is_balance = matches!(event, Event::Balance { .. });
        let mut out = Vec::new();
        let result = e.handle(event, &mut out);
        if result.is_err() {
            prop_assert!(out.is_empty(), "{shown}: refused but decided {out:?}");
            prop_assert_eq!(observe(&e), before, "{}: refused but changed", shown);
        }
        if let Err(msg) = check_state(&e) {
            return Err(TestCaseError::fail(format!("after {shown}: {msg}")));
        }
        // A Place exactly when a target changes, and never outside the
        // task's allowed CPUs.
        let mut running = before_targets;
        for d in &out {
            if let Decision::Place { task, cpus } = d {
                let allowed = e.task(*task).map(|v| v.allowed).unwrap_or_default();
                prop_assert!(
                    !cpus.is_empty() && cpus.is_subset(&allowed),
                    "{shown}: {d:?} outside {allowed}"
                );
                prop_assert_ne!(
                    running.get(task),
                    Some(cpus),
                    "{}: Place without change",
                    shown
                );
                running.insert(*task, cpus.clone());
            }
        }
        let after = targets(&e);
        for (t, c) in &after {
            if let Some(old) = running.get(t) {
                prop_assert_eq!(old, c, "{}: {} changed target without a Place", shown, t);
            }
        }
        if is_balance {
            // A pass leaves the spread no wider, or every CPU within its
            // fair share of the machine (balancer.rs, "Invariant").
            prop_assert!(
                spread(&e) <= before_spread || busiest_within_share(&e, config.imbalance_pct),
                "{shown} widened the spread {before_spread} → {} with {:?} above its share",
                spread(&e),
                e.load_milli()
            );
        }
        all.push(out);
    }
    Ok(all)
}

/// Runs `ops` after creating `tasks`, twice: every property holds, and the
/// same events give byte-identical decisions.
fn check_sequence(
    topo_idx: usize,
    config: &Config,
    tasks: Vec<(u64, u32)>,
    rest: Vec<Op>,
) -> Result<(), TestCaseError> {
    let topo = topologies()[topo_idx].clone();
    // Some tasks first, so that most later events find them.
    let ops: Vec<Op> = tasks
        .into_iter()
        .map(|(task, mask)| Op::New { task, app: 0, mask })
        .chain(rest)
        .collect();
    let first = run(&topo, config, &ops)?;
    let again = run(&topo, config, &ops)?;
    prop_assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_event_sequences_keep_every_invariant(
        topo_idx in 0usize..5,
        config in config(Policy::DataAffinity),
        tasks in proptest::collection::vec((0..TASKS, mask()), 1..6),
        rest in proptest::collection::vec(op(), 1..80),
    ) {
        check_sequence(topo_idx, &config, tasks, rest)?;
    }

    #[test]
    fn random_event_sequences_keep_every_invariant_under_co_thread(
        topo_idx in 0usize..5,
        config in config(Policy::CoThread),
        tasks in proptest::collection::vec((0..TASKS, mask()), 1..6),
        rest in proptest::collection::vec(op(), 1..80),
    ) {
        check_sequence(topo_idx, &config, tasks, rest)?;
    }
}
