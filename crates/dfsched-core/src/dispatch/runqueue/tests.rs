//! Unit tests of the per-CPU run queues: round robin, group batching, idle
//! balance, refusals.

use super::*;

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

fn t(n: u64) -> TaskId {
    TaskId(n)
}

/// Runs `cpu` for `n` picks; each picked task uses its whole quota and is
/// requeued (as a body does when a quantum expires).
fn run(
    q: &mut RunQueues,
    cpu: CpuId,
    n: usize,
    group: impl Fn(TaskId) -> Option<GroupId>,
) -> Vec<u64> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let p = q.pick(cpu).unwrap().expect("a task waits");
        seen.push(p.task.0);
        q.requeue_spent(cpu, p.task, group(p.task)).unwrap();
        q.check_invariants().unwrap();
    }
    seen
}

/// Tasks 1 and 3 are in group 10, tasks 2 and 4 in group 20.
fn two_groups(task: TaskId) -> Option<GroupId> {
    Some(GroupId(if task.0 % 2 == 1 { 10 } else { 20 }))
}

#[test]
fn vanilla_is_round_robin_over_tasks_whatever_their_groups() {
    let mut q = RunQueues::new(RqPolicy::Vanilla, &set("0"), Nanos(100)).unwrap();
    for n in 1..=4 {
        q.enqueue(CpuId(0), t(n), two_groups(t(n))).unwrap();
    }
    assert_eq!(
        run(&mut q, CpuId(0), 8, two_groups),
        vec![1, 2, 3, 4, 1, 2, 3, 4]
    );
}

#[test]
fn data_affinity_runs_a_group_in_succession_and_changes_group_after_all_quotas() {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0"), Nanos(100)).unwrap();
    for n in 1..=4 {
        q.enqueue(CpuId(0), t(n), two_groups(t(n))).unwrap();
    }
    // Group 10 (tasks 1, 3) first: it arrived first; then group 20.
    assert_eq!(
        run(&mut q, CpuId(0), 8, two_groups),
        vec![1, 3, 2, 4, 1, 3, 2, 4]
    );
    assert!(q.stats().batch_turns >= 3);
}

/// Tasks 1, 3, 5 are in group 10, tasks 2, 4, 6 in group 20.
fn three_and_three() -> RunQueues {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0"), Nanos(100)).unwrap();
    for n in [1, 3, 5, 2, 4, 6] {
        q.enqueue(CpuId(0), t(n), two_groups(t(n))).unwrap();
    }
    q
}

#[test]
fn a_group_quota_cuts_a_turn_and_still_runs_every_task_once_per_lap() {
    // No quota: a turn is the whole group.
    let mut q = three_and_three();
    assert_eq!(q.group_quota(), 0);
    assert_eq!(
        run(&mut q, CpuId(0), 12, two_groups),
        vec![1, 3, 5, 2, 4, 6, 1, 3, 5, 2, 4, 6]
    );
    // Quota 2: two picks per turn; the task a cut turn left fresh runs
    // first in its group's next turn, so each lap of 6 picks runs each task
    // once.
    let mut q = three_and_three();
    q.set_group_quota(2);
    let picks = run(&mut q, CpuId(0), 12, two_groups);
    assert_eq!(picks, vec![1, 3, 2, 4, 5, 6, 1, 3, 2, 4, 5, 6]);
    for lap in picks.chunks(6) {
        let mut l = lap.to_vec();
        l.sort_unstable();
        assert_eq!(l, vec![1, 2, 3, 4, 5, 6]);
    }
    // Quota 1: the groups alternate every pick (the scx body's --quota 1).
    let mut q = three_and_three();
    q.set_group_quota(1);
    assert_eq!(
        run(&mut q, CpuId(0), 12, two_groups),
        vec![1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6]
    );
}

#[test]
fn a_group_alone_keeps_its_cpu_past_its_quota() {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0"), Nanos(100)).unwrap();
    q.set_group_quota(1);
    for n in [1, 3] {
        q.enqueue(CpuId(0), t(n), two_groups(t(n))).unwrap();
    }
    assert_eq!(run(&mut q, CpuId(0), 4, two_groups), vec![1, 3, 1, 3]);
    // Another group arrives: the spent quota hands the CPU over.
    q.enqueue(CpuId(0), t(2), two_groups(t(2))).unwrap();
    assert_eq!(run(&mut q, CpuId(0), 4, two_groups), vec![2, 1, 2, 3]);
}

#[test]
fn group_changes_are_flagged_only_when_the_batch_changes() {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0"), Nanos(100)).unwrap();
    for n in 1..=4 {
        q.enqueue(CpuId(0), t(n), two_groups(t(n))).unwrap();
    }
    let mut flags = Vec::new();
    for _ in 0..4 {
        let p = q.pick(CpuId(0)).unwrap().unwrap();
        flags.push(p.new_batch);
        assert_eq!(p.slice, Nanos(100));
        q.requeue_spent(CpuId(0), p.task, two_groups(p.task))
            .unwrap();
    }
    assert_eq!(flags, vec![true, false, true, false]);
}

#[test]
fn a_task_that_joins_the_running_group_runs_before_the_group_changes() {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0"), Nanos(100)).unwrap();
    q.enqueue(CpuId(0), t(1), two_groups(t(1))).unwrap();
    q.enqueue(CpuId(0), t(3), two_groups(t(3))).unwrap();
    q.enqueue(CpuId(0), t(2), two_groups(t(2))).unwrap();
    let p = q.pick(CpuId(0)).unwrap().unwrap();
    assert_eq!(p.task, t(1));
    // Task 5 (group 10) wakes while task 1 runs.
    q.enqueue(CpuId(0), t(5), two_groups(t(5))).unwrap();
    q.requeue_spent(CpuId(0), t(1), two_groups(t(1))).unwrap();
    assert_eq!(run(&mut q, CpuId(0), 4, two_groups), vec![3, 5, 2, 1]);
}

#[test]
fn removed_tasks_are_never_picked_and_empty_queues_pick_nothing() {
    let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0-1"), Nanos(5)).unwrap();
    q.enqueue(CpuId(1), t(1), two_groups(t(1))).unwrap();
    q.enqueue(CpuId(1), t(3), two_groups(t(3))).unwrap();
    assert_eq!(q.waiting(CpuId(1)), 2);
    assert_eq!(q.remove(t(1)), Some(CpuId(1)));
    assert_eq!(q.remove(t(1)), None, "already gone");
    q.check_invariants().unwrap();
    assert_eq!(q.pick(CpuId(1)).unwrap().unwrap().task, t(3));
    assert_eq!(q.pick(CpuId(1)).unwrap(), None);
    assert_eq!(q.pick(CpuId(0)).unwrap(), None);
    assert_eq!(q.total_waiting(), 0);
    q.check_invariants().unwrap();
}

#[test]
fn refusals_name_their_cause_and_change_nothing() {
    assert_eq!(
        RunQueues::new(RqPolicy::Vanilla, &set("0"), Nanos(0)).unwrap_err(),
        RqError::ZeroQuantum
    );
    assert_eq!(
        RunQueues::new(RqPolicy::Vanilla, &CpuSet::new(), Nanos(1)).unwrap_err(),
        RqError::NoCpus
    );
    let mut q = RunQueues::new(RqPolicy::Vanilla, &set("0-1"), Nanos(1)).unwrap();
    q.enqueue(CpuId(0), t(1), None).unwrap();
    let before = q.clone();
    assert_eq!(
        q.enqueue(CpuId(1), t(1), None).unwrap_err(),
        RqError::AlreadyQueued {
            task: t(1),
            cpu: CpuId(0)
        }
    );
    assert_eq!(
        q.enqueue(CpuId(7), t(2), None).unwrap_err(),
        RqError::UnknownCpu(CpuId(7))
    );
    assert_eq!(q.pick(CpuId(7)).unwrap_err(), RqError::UnknownCpu(CpuId(7)));
    assert_eq!(q, before);
}

#[test]
fn an_idle_cpu_steals_from_the_busiest_only_what_may_run_there() {
    let mut q = RunQueues::new(RqPolicy::Vanilla, &set("0-2"), Nanos(1)).unwrap();
    for n in 1..=3 {
        q.enqueue(CpuId(0), t(n), None).unwrap();
    }
    q.enqueue(CpuId(1), t(4), None).unwrap();
    // Task 3 may not run on CPU 2; task 2 may.
    let got = q.steal_for(CpuId(2), 2, |task, _| task != t(3)).unwrap();
    assert_eq!(got, Some((t(2), CpuId(0))));
    assert_eq!(q.queued_on(t(2)), Some(CpuId(2)));
    // CPU 1 has only one waiting task: below the threshold of 2.
    assert_eq!(q.steal_for(CpuId(0), 2, |_, _| true).unwrap(), None);
    assert_eq!(q.stats().steals, 1);
    q.check_invariants().unwrap();
}

#[test]
fn same_calls_same_picks() {
    let script = || {
        let mut q = RunQueues::new(RqPolicy::DataAffinity, &set("0-1"), Nanos(3)).unwrap();
        for n in 1..=9 {
            q.enqueue(CpuId((n % 2) as u32), t(n), Some(GroupId(n % 3)))
                .unwrap();
        }
        let g = |task: TaskId| Some(GroupId(task.0 % 3));
        let mut a = run(&mut q, CpuId(0), 12, g);
        a.extend(run(&mut q, CpuId(1), 12, g));
        a
    };
    assert_eq!(script(), script());
}
