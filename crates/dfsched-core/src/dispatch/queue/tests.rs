//! Each policy's rule from §IV on tiny hand-checked cases, the pause
//! heuristic, refused calls, and random runs that keep every invariant.

use super::*;
use proptest::prelude::*;

fn dispatcher(policy: QueuePolicy, m: u32, n: u32, pause: Option<PauseRule>) -> QueueDispatcher {
    QueueDispatcher::new(QueueConfig {
        policy,
        processors: m,
        tasks: n,
        pause,
    })
    .unwrap()
}

/// Shorthands that also check the invariants after every call.
trait Drive {
    fn ready(&mut self, t: u64) -> Option<u32>;
    fn done(&mut self, t: u64, p: u32) -> Pick;
}

impl Drive for QueueDispatcher {
    fn ready(&mut self, t: u64) -> Option<u32> {
        let r = self.task_ready(TaskId(t)).unwrap();
        self.check_invariants().unwrap();
        assert_eq!(r.woken, vec![], "no pause ends here");
        r.cpu.map(|c| c.0)
    }
    fn done(&mut self, t: u64, p: u32) -> Pick {
        let r = self.burst_done(TaskId(t), CpuId(p)).unwrap();
        self.check_invariants().unwrap();
        r
    }
}

fn run(t: u64) -> Pick {
    Pick::Run(TaskId(t))
}

/// `C = Z = 1`: engaged whenever `N ≥ M`.
const PAUSE: PauseRule = PauseRule {
    reload_time: 1.0,
    think_time: 1.0,
};

fn lmi(a: u32) -> QueuePolicy {
    QueuePolicy::LimitedMinIntervening { associations: a }
}

fn lmr(a: u32) -> QueuePolicy {
    QueuePolicy::LimitedMinInterveningRouting { associations: a }
}

/// Two processors; task 0 then task 1 run on cpu0 while task 3 holds cpu1;
/// then tasks 1 and 0 wait, in that order, for cpu0 to finish task 2.
/// At that point task 1 has more intervening tasks at cpu0 than task 0.
/// Returns what cpu0 picks.
fn two_waiting_for_cpu0(policy: QueuePolicy) -> Pick {
    let mut d = dispatcher(policy, 2, 4, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.done(0, 0), run(1), "nothing has affinity yet: the head");
    assert_eq!(d.done(1, 0), Pick::Idle);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.done(0, 0), Pick::Idle);
    // cpu0 executed 3 bursts: task 1 after the 2nd, task 0 after the 3rd.
    assert_eq!(d.ready(2), Some(0));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.ready(0), None);
    assert_eq!(d.queued().collect::<Vec<_>>(), vec![TaskId(1), TaskId(0)]);
    d.done(2, 0)
}

#[test]
fn fcfs_runs_the_head_and_gives_arrivals_to_the_longest_idle_processor() {
    let mut d = dispatcher(QueuePolicy::Fcfs, 2, 4, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(d.ready(3), None);
    assert_eq!(d.done(0, 0), run(2));
    assert_eq!(d.done(1, 1), run(3));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.ready(0), None);
    // Task 0 last ran on cpu0, but FCFS takes the head.
    assert_eq!(d.done(2, 0), run(1));
    assert_eq!(d.done(3, 1), run(0));
    assert_eq!(d.done(1, 0), Pick::Idle);
    assert_eq!(d.done(0, 1), Pick::Idle);
    // cpu0 has been idle longer than cpu1.
    assert_eq!(d.ready(3), Some(0));
    assert_eq!(d.intervening(TaskId(0), CpuId(1)).unwrap(), None);
    assert_eq!(two_waiting_for_cpu0(QueuePolicy::Fcfs), run(1));
}

#[test]
fn fp_runs_a_task_only_on_its_own_processor_and_waits_otherwise() {
    let mut d = dispatcher(QueuePolicy::FixedProcessor, 2, 4, None);
    assert_eq!(d.ready(0), Some(0));
    // Task 2 belongs to cpu0 too; idle cpu1 may not take it.
    assert_eq!(d.ready(2), None);
    assert_eq!(d.cpu_state(CpuId(1)).unwrap(), CpuState::Idle);
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(3), None);
    // cpu1 finishes: only task 3 of its own may run, though 2 is ahead.
    assert_eq!(d.done(1, 1), run(3));
    // cpu1 finishes again: task 2 waits, but it is cpu0's.
    assert_eq!(d.done(3, 1), Pick::Pause);
    assert_eq!(d.done(0, 0), run(2));
    assert_eq!(d.done(2, 0), Pick::Idle);
    // A paused processor takes its own task at once.
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.stats().pauses, 1);
}

#[test]
fn lp_prefers_the_first_task_that_last_ran_here_over_the_head() {
    let mut d = dispatcher(QueuePolicy::LastProcessor, 2, 4, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(d.ready(3), None);
    assert_eq!(d.done(0, 0), run(2), "no affinity queued: the head");
    assert_eq!(d.done(1, 1), run(3));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.ready(0), None);
    // Queue [1, 0]: task 0 last ran on cpu0.
    assert_eq!(d.done(2, 0), run(0));
    assert_eq!(d.done(3, 1), run(1));
    assert_eq!(d.stats().picked_matching, 2);
    // Arrival: the last processor if it waits, else the longest idle one.
    assert_eq!(d.done(0, 0), Pick::Idle);
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(
        d.ready(1),
        Some(1),
        "its last processor, though cpu0 idled longer"
    );
    assert_eq!(d.ready(3), Some(0), "cpu1 is busy: any idle one");
    assert_eq!(d.last_cpu(TaskId(3)).unwrap(), Some(CpuId(1)));
    assert_eq!(d.intervening(TaskId(1), CpuId(1)).unwrap(), Some(0));
    // LP takes the first match, not the best one.
    assert_eq!(two_waiting_for_cpu0(QueuePolicy::LastProcessor), run(1));
}

#[test]
fn mi_runs_the_queued_task_with_the_fewest_intervening_tasks() {
    assert_eq!(two_waiting_for_cpu0(QueuePolicy::MinIntervening), run(0));
    // LMI with enough associations is MI.
    assert_eq!(two_waiting_for_cpu0(lmi(2)), run(0));
}

#[test]
fn mi_gives_an_arrival_to_the_idle_processor_it_has_most_affinity_for() {
    let mut d = dispatcher(QueuePolicy::MinIntervening, 2, 3, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(d.done(0, 0), run(2));
    assert_eq!(d.ready(0), None);
    assert_eq!(
        d.done(1, 1),
        run(0),
        "task 0 has no affinity for cpu1: the head"
    );
    assert_eq!(d.done(2, 0), Pick::Idle);
    assert_eq!(d.done(0, 1), Pick::Idle);
    assert_eq!(d.intervening(TaskId(0), CpuId(0)).unwrap(), Some(1));
    assert_eq!(d.intervening(TaskId(0), CpuId(1)).unwrap(), Some(0));
    // cpu0 idled longer, but task 0 has more affinity for cpu1.
    assert_eq!(d.ready(0), Some(1));
    // Task 1's only processor is busy: the idle one.
    assert_eq!(d.ready(1), Some(0));
    assert_eq!(d.associations(TaskId(0)).unwrap(), vec![CpuId(0), CpuId(1)]);
}

#[test]
fn lmi_keeps_at_most_a_associations_and_replaces_the_worst() {
    let mut d = dispatcher(lmi(2), 3, 4, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), Some(2));
    assert_eq!(d.ready(3), None);
    assert_eq!(d.done(0, 0), run(3), "task 3 has no association: the head");
    assert_eq!(d.ready(0), None);
    assert_eq!(
        d.done(1, 1),
        run(0),
        "task 0 is not associated with cpu1: the head"
    );
    assert_eq!(d.done(0, 1), Pick::Idle);
    assert_eq!(d.associations(TaskId(0)).unwrap(), vec![CpuId(0), CpuId(1)]);
    assert_eq!(d.done(3, 0), Pick::Idle);
    assert_eq!(d.ready(3), Some(0), "its associated processor waits");
    assert_eq!(d.done(3, 0), Pick::Idle);
    // Task 0: 2 intervening at cpu0, none at cpu1.
    assert_eq!(d.intervening(TaskId(0), CpuId(0)).unwrap(), Some(2));
    assert_eq!(d.intervening(TaskId(0), CpuId(1)).unwrap(), Some(0));
    assert_eq!(d.ready(3), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(0), None);
    assert_eq!(d.done(2, 2), run(0));
    assert_eq!(d.done(0, 2), Pick::Idle);
    // cpu0 was the worst association: replaced in its slot by cpu2.
    assert_eq!(d.associations(TaskId(0)).unwrap(), vec![CpuId(2), CpuId(1)]);
    assert_eq!(d.intervening(TaskId(0), CpuId(0)).unwrap(), None);
    assert_eq!(d.stats().replacements, 1);
}

#[test]
fn lmi_with_one_association_follows_the_last_processor() {
    let mut d = dispatcher(lmi(1), 2, 3, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(d.done(1, 1), run(2));
    assert_eq!(d.ready(1), None);
    assert_eq!(
        d.done(0, 0),
        run(1),
        "no queued task is associated with cpu0"
    );
    assert_eq!(d.done(1, 0), Pick::Idle);
    assert_eq!(d.associations(TaskId(1)).unwrap(), vec![CpuId(0)]);
    assert_eq!(d.last_cpu(TaskId(1)).unwrap(), Some(CpuId(0)));
}

#[test]
fn lmr_matches_a_ready_task_to_its_least_loaded_association_and_runs_matches_first() {
    let mut d = dispatcher(lmr(2), 2, 4, None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.done(0, 0), Pick::Idle);
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(d.ready(2), Some(0));
    assert_eq!(d.ready(0), Some(1), "its association is busy: an idle one");
    assert_eq!(d.done(0, 1), Pick::Idle);
    assert_eq!(d.done(2, 0), Pick::Idle);
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(1), Some(0));
    assert_eq!(d.done(1, 0), Pick::Idle);
    assert_eq!(d.done(3, 1), Pick::Idle);
    // Task 0: 2 intervening at cpu0, 1 at cpu1. Task 1: 0 at cpu0, 2 at cpu1.
    assert_eq!(d.ready(2), Some(0));
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(0), None);
    assert_eq!(d.ready(1), None);
    // cpu0 takes task 1, matched to it, over task 0 (ahead, associated).
    assert_eq!(d.done(2, 0), run(1));
    assert_eq!(d.done(3, 1), run(0));
    assert_eq!(d.stats().picked_matching, 2);
}

/// Gives task `t` an association with `p` as if it had last run there
/// when `p` had completed `at` bursts (tests only: sets the state directly).
fn give_affinity(d: &mut QueueDispatcher, t: usize, p: usize, at: u64) {
    let (m, a) = (d.m as usize, d.a as usize);
    d.at[t * m + p] = at;
    let len = d.assoc_len[t] as usize;
    d.assoc[t * a + len] = p as u32;
    d.assoc_len[t] += 1;
    d.rebuild_derived();
}

#[test]
fn lmr_routing_counts_tasks_already_matched() {
    for policy in [lmr(2), lmi(2)] {
        let mut d = dispatcher(policy, 2, 4, None);
        assert_eq!(d.ready(2), Some(0));
        assert_eq!(d.ready(3), Some(1));
        // Tasks 0 and 1 have equal affinity for both processors.
        d.executed = vec![5, 5];
        for t in [0, 1] {
            for p in [0, 1] {
                give_affinity(&mut d, t, p, 5);
            }
        }
        d.check_invariants().unwrap();
        assert_eq!(d.ready(0), None);
        assert_eq!(d.ready(1), None);
        if policy == lmr(2) {
            // Task 0: a tie, to cpu0; task 1: cpu0 now has a match, so cpu1.
            assert_eq!(d.matched, vec![1, 1]);
            assert_eq!(d.done(3, 1), run(1), "its match, not the head");
        } else {
            assert_eq!(
                d.done(3, 1),
                run(0),
                "LMI: equal affinity, the earlier task"
            );
        }
    }
}

#[test]
fn pause_engages_only_when_c_is_at_least_m_over_n_times_z() {
    let rule = |c| PauseRule {
        reload_time: c,
        think_time: 1.0,
    };
    let d = dispatcher(QueuePolicy::LastProcessor, 32, 64, Some(rule(0.49)));
    assert!(!d.pausing());
    let d = dispatcher(QueuePolicy::LastProcessor, 32, 64, Some(rule(0.5)));
    assert!(d.pausing());
    let d = dispatcher(QueuePolicy::LastProcessor, 32, 64, None);
    assert!(!d.pausing());
}

#[test]
fn a_paused_processor_waits_for_a_matching_task_only() {
    let mut d = dispatcher(QueuePolicy::LastProcessor, 2, 4, Some(PAUSE));
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(
        d.done(0, 0),
        run(2),
        "a cold task: nothing better to wait for"
    );
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.done(2, 0), Pick::Pause, "task 1 is warm on cpu1");
    assert_eq!(d.cpu_state(CpuId(0)).unwrap(), CpuState::Paused);
    assert_eq!(
        d.ready(0),
        Some(0),
        "task 0 last ran on cpu0: the pause ends"
    );
    assert_eq!(d.done(0, 0), Pick::Pause);
    assert_eq!(d.done(3, 1), run(1));
    assert_eq!(
        d.ready(3),
        None,
        "warm elsewhere: it does not end the pause"
    );
    assert_eq!(d.ready(2), Some(0));
    assert_eq!(d.stats().pauses, 2);
    // Without the heuristic cpu0 takes the head instead of pausing.
    let mut d = dispatcher(QueuePolicy::LastProcessor, 2, 4, None);
    for (t, p) in [(0, Some(0)), (1, Some(1)), (2, None)] {
        assert_eq!(d.ready(t), p);
    }
    assert_eq!(d.done(0, 0), run(2));
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.done(2, 0), run(1));
}

#[test]
fn a_cold_task_ends_a_pause_when_no_processor_idles() {
    let mut d = dispatcher(QueuePolicy::LastProcessor, 2, 4, Some(PAUSE));
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(d.ready(2), Some(1));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.done(0, 0), Pick::Pause);
    assert_eq!(d.ready(3), Some(0), "task 3 never ran: cpu0 takes it");
}

#[test]
fn lmi_pauses_for_associated_tasks() {
    let mut d = dispatcher(lmi(2), 2, 4, Some(PAUSE));
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.ready(1), Some(1));
    assert_eq!(d.ready(2), None);
    assert_eq!(d.done(0, 0), run(2));
    assert_eq!(d.done(1, 1), Pick::Idle);
    assert_eq!(d.ready(3), Some(1));
    assert_eq!(d.ready(1), None);
    assert_eq!(d.done(2, 0), Pick::Pause);
    assert_eq!(d.done(3, 1), run(1));
    assert_eq!(d.ready(3), None);
    assert_eq!(d.ready(0), Some(0));
    assert_eq!(d.queued().collect::<Vec<_>>(), vec![TaskId(3)]);
}

#[test]
fn bad_configurations_are_refused() {
    let cfg = |policy, m, n, pause| QueueConfig {
        policy,
        processors: m,
        tasks: n,
        pause,
    };
    let new = |c| QueueDispatcher::new(c).err();
    assert!(matches!(
        new(cfg(QueuePolicy::Fcfs, 0, 4, None)),
        Some(QueueError::Empty { .. })
    ));
    assert!(matches!(
        new(cfg(QueuePolicy::Fcfs, 4, 0, None)),
        Some(QueueError::Empty { .. })
    ));
    assert!(matches!(
        new(cfg(lmi(0), 4, 4, None)),
        Some(QueueError::BadAssociations { .. })
    ));
    assert!(matches!(
        new(cfg(lmr(5), 4, 4, None)),
        Some(QueueError::BadAssociations { .. })
    ));
    assert!(matches!(
        new(cfg(QueuePolicy::Fcfs, 4, 4, Some(PAUSE))),
        Some(QueueError::PauseNotApplicable(_))
    ));
    assert!(matches!(
        new(cfg(QueuePolicy::FixedProcessor, 4, 4, Some(PAUSE))),
        Some(QueueError::PauseNotApplicable(_))
    ));
    let nan = PauseRule {
        reload_time: f64::NAN,
        think_time: 1.0,
    };
    assert!(matches!(
        new(cfg(QueuePolicy::LastProcessor, 4, 4, Some(nan))),
        Some(QueueError::BadPauseRule { .. })
    ));
    assert!(matches!(
        new(cfg(QueuePolicy::MinIntervening, 1 << 13, 1 << 12, None)),
        Some(QueueError::TooLarge { .. })
    ));
}

#[test]
fn refused_calls_change_nothing() {
    let mut d = dispatcher(QueuePolicy::MinIntervening, 2, 3, None);
    d.ready(0);
    d.ready(1);
    d.ready(2);
    let before = format!("{d:?}");
    assert_eq!(
        d.task_ready(TaskId(9)),
        Err(QueueError::UnknownTask(TaskId(9)))
    );
    assert!(matches!(
        d.task_ready(TaskId(2)),
        Err(QueueError::NotAway { .. })
    ));
    assert!(matches!(
        d.burst_done(TaskId(1), CpuId(0)),
        Err(QueueError::NotRunning { .. })
    ));
    assert!(matches!(
        d.burst_done(TaskId(2), CpuId(0)),
        Err(QueueError::NotRunning { .. })
    ));
    assert_eq!(
        d.burst_done(TaskId(0), CpuId(7)),
        Err(QueueError::UnknownCpu(CpuId(7)))
    );
    assert_eq!(format!("{d:?}"), before);
    d.check_invariants().unwrap();
}

#[test]
fn policy_names_round_trip_and_bad_ones_are_refused() {
    for p in [
        QueuePolicy::Fcfs,
        QueuePolicy::FixedProcessor,
        QueuePolicy::LastProcessor,
        QueuePolicy::MinIntervening,
        lmi(3),
        lmr(8),
    ] {
        assert_eq!(p.to_string().parse::<QueuePolicy>().unwrap(), p);
    }
    assert_eq!("LMI:2".parse::<QueuePolicy>().unwrap(), lmi(2));
    for bad in ["", "lmi", "lmi:0", "lmr:x", "fcfs:1", "sjf"] {
        assert!(bad.parse::<QueuePolicy>().is_err(), "{bad:?} parsed");
    }
}

fn any_policy() -> impl Strategy<Value = (QueuePolicy, bool)> {
    prop_oneof![
        Just((QueuePolicy::Fcfs, false)),
        Just((QueuePolicy::FixedProcessor, false)),
        any::<bool>().prop_map(|p| (QueuePolicy::LastProcessor, p)),
        any::<bool>().prop_map(|p| (QueuePolicy::MinIntervening, p)),
        (1u32..=3, any::<bool>()).prop_map(|(a, p)| (lmi(a), p)),
        (1u32..=3, any::<bool>()).prop_map(|(a, p)| (lmr(a), p)),
    ]
}

/// Drives a dispatcher with a random interleaving of ready tasks and
/// finished bursts; returns every answer.
fn random_run(policy: QueuePolicy, pause: bool, m: u32, n: u32, choices: &[u16]) -> Vec<String> {
    let rule = pause.then_some(PAUSE);
    let policy = match policy {
        QueuePolicy::LimitedMinIntervening { associations } => lmi(associations.min(m)),
        QueuePolicy::LimitedMinInterveningRouting { associations } => lmr(associations.min(m)),
        p => p,
    };
    let mut d = dispatcher(policy, m, n, rule);
    let mut out = Vec::new();
    for &c in choices {
        let away: Vec<u64> = (0..u64::from(n))
            .filter(|&t| d.task_state(TaskId(t)).unwrap() == TaskState::Away)
            .collect();
        let running: Vec<(u64, u32)> = (0..m)
            .filter_map(|p| match d.cpu_state(CpuId(p)).unwrap() {
                CpuState::Running(t) => Some((t.0, p)),
                _ => None,
            })
            .collect();
        let total = away.len() + running.len();
        assert!(total > 0, "every task vanished");
        let k = usize::from(c) % total;
        if k < away.len() {
            out.push(format!("{:?}", d.task_ready(TaskId(away[k])).unwrap()));
        } else {
            let (t, p) = running[k - away.len()];
            out.push(format!("{:?}", d.burst_done(TaskId(t), CpuId(p)).unwrap()));
        }
        d.check_invariants().unwrap();
    }
    out
}

proptest! {
    #[test]
    fn random_runs_keep_every_invariant_and_repeat_exactly(
        (policy, pause) in any_policy(),
        m in 1u32..=4,
        extra in 0u32..=6,
        choices in proptest::collection::vec(any::<u16>(), 1..200),
    ) {
        let n = m + extra;
        let a = random_run(policy, pause, m, n, &choices);
        let b = random_run(policy, pause, m, n, &choices);
        prop_assert_eq!(a, b);
    }
}

/// Drives the indexed dispatcher and the scanning [`super::reference`]
/// one with the same random interleaving; fails at the first answer,
/// counter, queue or state where they part, or at a broken invariant
/// (checked every `check_every` steps).
fn agrees_with_the_reference(
    policy: QueuePolicy,
    pause: bool,
    (m, n): (u32, u32),
    choices: &[u16],
    check_every: usize,
) -> Result<(), String> {
    let policy = match policy {
        QueuePolicy::LimitedMinIntervening { associations } => lmi(associations.min(m)),
        QueuePolicy::LimitedMinInterveningRouting { associations } => lmr(associations.min(m)),
        p => p,
    };
    let config = QueueConfig {
        policy,
        processors: m,
        tasks: n,
        pause: pause.then_some(PAUSE),
    };
    let mut d = QueueDispatcher::new(config).unwrap();
    let mut r = super::reference::Reference::new(config).unwrap();
    for (step, &c) in choices.iter().enumerate() {
        let (tasks, cpus) = r.states();
        let away: Vec<u64> = (0..u64::from(n))
            .filter(|&t| tasks[t as usize] == TaskState::Away)
            .collect();
        let running: Vec<(u64, u32)> = (0..m)
            .filter_map(|p| match cpus[p as usize] {
                CpuState::Running(t) => Some((t.0, p)),
                _ => None,
            })
            .collect();
        let k = usize::from(c) % (away.len() + running.len());
        let (mine, theirs) = if k < away.len() {
            let t = TaskId(away[k]);
            (
                format!("{:?}", d.task_ready(t).unwrap()),
                format!("{:?}", r.task_ready(t).unwrap()),
            )
        } else {
            let (t, p) = running[k - away.len()];
            (
                format!("{:?}", d.burst_done(TaskId(t), CpuId(p)).unwrap()),
                format!("{:?}", r.burst_done(TaskId(t), CpuId(p)).unwrap()),
            )
        };
        let queue: Vec<u32> = d.queued().map(|t| t.0 as u32).collect();
        let states = (
            (0..n)
                .map(|t| d.task_state(TaskId(t.into())).unwrap())
                .collect(),
            (0..m).map(|p| d.cpu_state(CpuId(p)).unwrap()).collect(),
        );
        if mine != theirs || d.stats() != r.stats() || queue != r.queued() || states != r.states() {
            return Err(format!(
                "step {step}: {mine} vs the reference's {theirs}; stats {:?} vs {:?}",
                d.stats(),
                r.stats()
            ));
        }
        if step % check_every == 0 {
            d.check_invariants()?;
        }
    }
    d.check_invariants()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn indexed_picks_are_the_reference_scans_answers(
        (policy, pause) in any_policy(),
        m in 1u32..=5,
        extra in 0u32..=9,
        choices in proptest::collection::vec(any::<u16>(), 1..400),
    ) {
        let n = m + extra;
        if let Err(e) = agrees_with_the_reference(policy, pause, (m, n), &choices, 1) {
            return Err(TestCaseError::fail(format!("{policy} pause={pause} M={m} N={n}: {e}")));
        }
    }
}

#[test]
fn long_runs_agree_with_the_reference_with_few_and_with_over_64_processors() {
    // Long runs reach the MI walk's fallback (a short queue behind a long
    // recency list) and LMI's replacements many times over; 70 processors
    // take the waiting and association bitsets past one word.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let choices: Vec<u16> = (0..6_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 48) as u16
        })
        .collect();
    for (m, n, steps, check_every) in [(8, 24, 6_000, 1), (70, 90, 1_500, 25)] {
        for (policy, pause) in [
            (QueuePolicy::MinIntervening, false),
            (QueuePolicy::MinIntervening, true),
            (lmi(3), false),
            (lmi(3), true),
            (lmr(3), true),
            (QueuePolicy::LastProcessor, true),
        ] {
            agrees_with_the_reference(policy, pause, (m, n), &choices[..steps], check_every)
                .unwrap_or_else(|e| panic!("{policy} pause={pause} M={m}: {e}"));
        }
    }
}
