//! Tests of the balancer (`balancer.rs`): whole-group moves, unmanaged
//! task moves, splits after persistent imbalance, the imbalance test, and
//! re-homing within a pass.

use crate::config::Config;
use crate::event::{Decision, Event};
use crate::ids::{AppId, CpuId, DfId, GroupId, GroupKind, TaskId};
use crate::testutil::{p, places, set, H};
use crate::topology::Topology;

fn two_cpus() -> H {
    H::new(Topology::test(1, 1, 2, 1))
}

/// Groups 1 (tasks 1, 3) and 2 (tasks 2, 4) both on CPU 0 — external
/// load kept CPU 1 busy while they formed, then went away.
fn two_groups_on_cpu0(allowed_g1: &str) -> H {
    let mut h = two_cpus();
    h.external(&[0, 4]);
    h.task_df(1, allowed_g1, 1);
    h.task_df(2, "0-1", 2);
    h.task_df(3, allowed_g1, 1);
    h.task_df(4, "0-1", 2);
    assert_eq!((h.home(1), h.home(2)), ("0".into(), "0".into()));
    h.external(&[]);
    assert_eq!(h.load(), vec![4000, 0]);
    h
}

#[test]
fn a_whole_group_moves_to_the_idlest_cpu() {
    let mut h = two_groups_on_cpu0("0-1");
    h.task(9, "0-1"); // an unmanaged task: groups are tried first
    let leaf = |c| h.e.topology().leaf(CpuId(c)).unwrap();
    let (from, to) = (leaf(0), leaf(1));
    let d = h.balance();
    assert_eq!(
        d,
        vec![
            Decision::GroupMoved {
                group: GroupId(1),
                kind: GroupKind::Df(DfId(1)),
                from,
                to
            },
            Decision::Place {
                task: TaskId(1),
                cpus: set("1")
            },
            Decision::Place {
                task: TaskId(3),
                cpus: set("1")
            },
        ]
    );
    assert_eq!(h.load(), vec![2500, 2500]);
    let s = h.e.stats();
    assert_eq!((s.group_moves, s.task_moves, s.balance_passes), (1, 0, 1));
    assert_eq!(s.rehomes, 0, "a balancer move is not a re-home");
    let r = h.e.last_balance().unwrap();
    assert_eq!((r.busiest, r.idlest), (Some(CpuId(0)), Some(CpuId(1))));
    assert_eq!((r.spread_before_milli, r.spread_after_milli), (4000, 0));
    // Balanced now: the next pass does nothing.
    assert!(h.balance().is_empty());
    assert!(!h.e.last_balance().unwrap().imbalanced);
}

#[test]
fn groups_move_off_busiest_cpus_that_tie() {
    // Four groups of two on CPUs 0 and 1 (external load kept CPUs 2 and 3
    // busy while they formed, then went away): 4000 4000 0 0. No single
    // move narrows max − min (the other busiest CPU keeps the max, the
    // other idlest the min), yet two moves balance the machine; a pass
    // that compared spreads alone moved nothing, for as long as the tie
    // lasted (the simulator's 16-CPU case of issue 14 kept 3 groups on two
    // CPUs and 1 on two others until threads began to exit).
    let mut h = H::new(Topology::test(1, 1, 4, 1));
    h.external(&[0, 0, 8, 8]);
    for t in 1..=8 {
        h.task_df(t, "0-3", t.div_ceil(2));
    }
    h.external(&[]);
    assert_eq!(h.load(), vec![4000, 4000, 0, 0], "the premise");
    h.balance();
    assert_eq!(h.load(), vec![2000, 2000, 2000, 2000]);
    assert_eq!(h.e.stats().group_moves, 2);
    let r = h.e.last_balance().unwrap();
    assert_eq!((r.spread_before_milli, r.spread_after_milli), (4000, 0));
}

#[test]
fn a_move_that_only_swaps_which_cpu_is_busiest_is_not_taken() {
    // One group of four on each of CPUs 0 and 1: moving one to CPU 2 or 3
    // leaves as many CPUs at the max and at the min, so nothing moves.
    let mut h = H::new(Topology::test(1, 1, 4, 1));
    h.external(&[0, 0, 8, 8]);
    for t in 1..=8 {
        h.task_df(t, "0-3", 1 + t % 2);
    }
    h.external(&[]);
    assert_eq!(h.load(), vec![4000, 4000, 0, 0], "the premise");
    h.balance();
    assert_eq!(h.e.stats().group_moves, 0);
    assert_eq!(h.load(), vec![4000, 4000, 0, 0]);
}

#[test]
fn a_group_that_may_not_run_on_the_idlest_cpu_is_skipped_and_counted() {
    let mut h = two_groups_on_cpu0("0");
    let d = h.balance();
    assert!(matches!(
        d[0],
        Decision::GroupMoved {
            group: GroupId(2),
            ..
        }
    ));
    assert_eq!(places(&d), p(&[(2, "1"), (4, "1")]));
    assert_eq!(h.e.last_balance().unwrap().skipped_not_allowed, 1);
    assert_eq!(h.e.stats().balance_skipped_not_allowed, 1);
}

#[test]
fn unmanaged_tasks_move_when_no_group_can() {
    let mut h = two_cpus();
    h.external(&[3, 0]);
    h.task(1, "0-1");
    h.task(2, "0-1");
    h.task(3, "0"); // may not move
    assert_eq!(h.load(), vec![5000, 1000]);
    let leaf1 = h.e.topology().leaf(CpuId(1)).unwrap();
    let d = h.balance();
    assert_eq!(
        d,
        vec![
            Decision::TaskMoved {
                task: TaskId(1),
                to: leaf1
            },
            Decision::Place {
                task: TaskId(1),
                cpus: set("1")
            },
            Decision::TaskMoved {
                task: TaskId(2),
                to: leaf1
            },
            Decision::Place {
                task: TaskId(2),
                cpus: set("1")
            },
        ]
    );
    assert_eq!(h.load(), vec![4000, 2000]);
    assert_eq!(h.e.stats().task_moves, 2);
    assert!(h.e.last_balance().unwrap().skipped_not_allowed >= 1);
    // A moved task stays unmanaged, and a DF hint takes it over.
    assert_eq!(h.e.task(TaskId(1)).unwrap().df, None);
    h.hint(1, Some(1));
    assert_eq!(h.e.task(TaskId(1)).unwrap().group, Some(GroupId(1)));
}

#[test]
fn moves_per_pass_are_capped() {
    let mut h = H::with(
        Topology::test(1, 1, 2, 1),
        Config {
            max_moves_per_pass: 1,
            ..Config::default()
        },
    );
    h.external(&[3, 0]);
    h.task(1, "0-1");
    h.task(2, "0-1");
    assert_eq!(h.balance().len(), 2, "one TaskMoved and its Place");
    assert_eq!(h.balance().len(), 2);
    assert!(h.balance().is_empty(), "balanced");
}

#[test]
fn unmanaged_tasks_stay_where_they_are_when_moving_them_is_off() {
    let config = Config {
        move_unmanaged: false,
        ..Config::default()
    };
    let mut h = H::with(Topology::test(1, 1, 2, 1), config);
    h.external(&[3, 0]);
    h.task(1, "0-1");
    h.task(2, "0-1");
    assert!(h.balance().is_empty(), "no TaskMoved, no Place");
    let r = h.e.last_balance().unwrap();
    assert!(r.imbalanced, "the imbalance is seen");
    assert_eq!(r.task_moves, 0);
    assert_eq!(h.target(1), "0-1");
    assert_eq!(h.target(2), "0-1");
}

/// Four tasks of one DF packed on CPU 0 of two: no whole-group move can
/// help.
fn one_group_of_four(config: Config) -> H {
    let mut h = H::with(Topology::test(1, 1, 2, 1), config);
    for t in 1..=4 {
        h.task_df(t, "0-1", 1);
    }
    assert_eq!(h.home(4), "0", "4 runnable on 2 CPUs is heavy load");
    assert_eq!(h.load(), vec![4000, 0]);
    h
}

#[test]
fn a_group_is_split_only_after_the_imbalance_persists() {
    let mut h = one_group_of_four(Config {
        split_after_passes: 3,
        ..Config::default()
    });
    for pass in 1..=2 {
        assert!(h.balance().is_empty(), "pass {pass}");
        let r = h.e.last_balance().unwrap();
        assert!(r.imbalanced && !r.split);
        assert_eq!(r.persistence, pass);
        assert!(r.skipped_no_gain >= 1, "moving the group only mirrors it");
    }
    let d = h.balance();
    assert_eq!(
        d,
        vec![
            Decision::GroupSplit {
                group: GroupId(1),
                new_group: GroupId(2),
                moved: vec![TaskId(3), TaskId(4)],
            },
            Decision::Place {
                task: TaskId(3),
                cpus: set("1")
            },
            Decision::Place {
                task: TaskId(4),
                cpus: set("1")
            },
        ]
    );
    assert_eq!(h.load(), vec![2000, 2000]);
    let r = h.e.last_balance().unwrap();
    assert!(r.split);
    assert_eq!(r.persistence, 0, "reset after a split");
    assert_eq!((h.e.stats().splits, h.e.stats().groups_created), (1, 2));
    assert_eq!(
        h.e.df_groups(AppId(0), DfId(1)),
        vec![GroupId(1), GroupId(2)]
    );
    // A newcomer with the DF joins the DF's group whose home is less
    // loaded per CPU.
    h.ev(Event::Exit { task: TaskId(4) });
    assert_eq!(places(&h.task_df(5, "0-1", 1)), p(&[(5, "1")]));
    assert_eq!(h.e.task(TaskId(5)).unwrap().group, Some(GroupId(2)));
}

#[test]
fn splitting_can_be_disabled() {
    let mut h = one_group_of_four(Config {
        split_after_passes: 0,
        ..Config::default()
    });
    for _ in 0..6 {
        assert!(h.balance().is_empty());
    }
    assert_eq!(h.e.stats().splits, 0);
    assert_eq!(h.e.stats().imbalanced_passes, 6);
}

#[test]
fn imbalance_needs_a_whole_task_and_the_percentage() {
    let imbalanced = |h: &mut H| {
        h.balance();
        h.e.last_balance().unwrap().imbalanced
    };
    // 2000 vs 1000: a whole task apart and 100% more.
    let mut h = two_cpus();
    h.external(&[2, 1]);
    assert!(imbalanced(&mut h));
    let mut h = H::with(
        Topology::test(1, 1, 2, 1),
        Config {
            imbalance_pct: 150,
            ..Config::default()
        },
    );
    h.external(&[2, 1]);
    assert!(!imbalanced(&mut h), "100% more is below 150%");
    // 1334 vs 833: far above 25% but less than one task apart.
    let mut h = H::new(Topology::test(1, 1, 3, 1));
    h.task(1, "0");
    h.task(2, "0-2");
    h.task(3, "1-2");
    assert_eq!(h.load(), vec![1334, 833, 833]);
    assert!(!imbalanced(&mut h));
}

#[test]
fn a_pass_rehomes_groups_whose_regime_changed() {
    let mut h = two_cpus();
    h.task_df(1, "0-1", 1);
    h.task_df(2, "0-1", 1);
    assert_eq!(h.home(1), "0-1", "light: the pair gets both CPUs");
    h.task_df(3, "0-1", 2);
    h.task_df(4, "0-1", 2);
    assert_eq!(h.home(4), "0", "heavy by now: one CPU");
    assert_eq!(h.load(), vec![3000, 1000]);
    let rehomes = h.e.stats().rehomes;
    // Group 1 is re-evaluated under heavy load: one CPU, the free one.
    let d = h.balance();
    assert_eq!(places(&d), p(&[(1, "1"), (2, "1")]));
    assert_eq!(h.load(), vec![2000, 2000]);
    assert_eq!(h.e.stats().rehomes, rehomes + 1);
    assert_eq!(h.e.last_balance().unwrap().rehomes, 1);
}

#[test]
fn rehoming_that_would_widen_the_spread_is_discarded() {
    let mut h = two_cpus();
    h.task_df(1, "0-1", 1);
    h.task_df(2, "0-1", 1);
    h.external(&[3, 3]);
    assert_eq!(h.load(), vec![4000, 4000]);
    // Heavy load wants the pair on one CPU, which would leave the CPUs
    // 2000 apart with nothing to move back, CPU 0 at 5000 against an
    // average of 4000 — a whole task and 25 % above its share: the pass
    // keeps the state.
    assert!(h.balance().is_empty());
    assert_eq!(h.home(1), "0-1");
    let r = h.e.last_balance().unwrap();
    assert!(r.rehoming_discarded);
    assert_eq!((r.spread_before_milli, r.spread_after_milli), (0, 0));
    assert_eq!(h.e.stats().rehomings_discarded, 1);
}

#[test]
fn rehoming_that_widens_the_spread_within_the_fair_share_is_kept() {
    // The same DF pair beside 12 + 12 external tasks: packed, CPU 0
    // carries 14000 against an average of 13000 — less than 25 % above
    // it — so the pass keeps the re-home though the spread widens from 0
    // to 2000; nothing fights it after (moving the pair back is no
    // narrower) and the keep test keeps it.
    let mut h = two_cpus();
    h.task_df(1, "0-1", 1);
    h.task_df(2, "0-1", 1);
    h.external(&[12, 12]);
    assert_eq!(h.load(), vec![13000, 13000]);
    assert_eq!(places(&h.balance()), p(&[(1, "0"), (2, "0")]));
    let r = h.e.last_balance().unwrap();
    assert!(!r.rehoming_discarded, "{r:?}");
    assert_eq!((r.spread_before_milli, r.spread_after_milli), (0, 2000));
    for _ in 0..20 {
        assert!(h.balance().is_empty());
    }
    assert_eq!((h.home(1), h.load()), ("0".into(), vec![14000, 12000]));
    assert_eq!(h.e.stats().rehomings_discarded, 0);
}

#[test]
fn a_light_group_moves_between_llcs_as_a_whole() {
    // 8 CPUs: LLCs 0-3 and 4-7. Three tasks of DF 1 share LLC 0-3 next
    // to one external task: the LLC still holds them, so the home rule
    // keeps it, but CPU 0 is a whole task busier than LLC 4-7.
    // The tasks come first: on an idle machine the group starts in the
    // first LLC; the external task arrives after (the event may re-place
    // nothing: the LLC still holds the group).
    let mut h = H::new(Topology::test(1, 2, 2, 2));
    for t in 1..=3 {
        h.task_df(t, "0-7", 1);
    }
    h.external(&[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(h.home(1), "0-3");
    assert_eq!(h.load(), vec![1750, 750, 750, 750, 0, 0, 0, 0]);
    let d = h.balance();
    let dom = |s: &str| h.e.topology().smallest_holding(&set(s));
    assert_eq!(
        d[0],
        Decision::GroupMoved {
            group: GroupId(1),
            kind: GroupKind::Df(DfId(1)),
            from: dom("0-3"),
            to: dom("4-7")
        }
    );
    assert_eq!(places(&d), p(&[(1, "4-7"), (2, "4-7"), (3, "4-7")]));
    assert_eq!(h.e.last_balance().unwrap().rehomes, 0);
}

#[test]
fn a_group_that_still_fits_keeps_its_home_when_another_cpu_empties() {
    let mut h = two_cpus();
    h.external(&[1, 0]);
    h.task_df(1, "0-1", 1);
    assert_eq!(h.home(1), "1");
    // CPU 0 is now the emptier one, but CPU 1 still holds the group:
    // no re-home, and moving it would only mirror the imbalance.
    h.external(&[]);
    for _ in 0..5 {
        assert!(h.balance().is_empty());
    }
    assert_eq!(h.home(1), "1");
    assert_eq!(h.e.stats().rehomes, 0);
    assert_eq!(h.e.stats().splits, 0, "a group of one is never split");
}

#[test]
fn a_group_with_no_domain_of_its_depth_near_the_idlest_cpu_is_skipped() {
    // CPUs 0-3 share an L2 and come in SMT pairs; CPU 4 stands alone,
    // so no domain at a core's depth holds it.
    use crate::topology::{DomainSpec, Level};
    let spec = |level, cpus: &str| DomainSpec {
        level,
        cpus: set(cpus),
        caches: vec![],
    };
    let topo = Topology::new(
        &set("0-4"),
        vec![
            spec(Level::L2, "0-3"),
            spec(Level::Core, "0-1"),
            spec(Level::Core, "2-3"),
        ],
    )
    .unwrap();
    let mut h = H::new(topo);
    h.external(&[0, 0, 1, 1, 0]);
    h.task_df(1, "0-4", 1);
    h.task_df(2, "0-4", 1);
    assert_eq!(h.home(1), "0-1");
    assert_eq!(h.load(), vec![1000, 1000, 1000, 1000, 0]);
    assert!(h.balance().is_empty());
    let r = h.e.last_balance().unwrap();
    assert!(r.imbalanced);
    assert_eq!(r.skipped_no_destination, 1);
    assert_eq!(h.e.stats().balance_skipped_no_destination, 1);
}

#[test]
fn sleeping_members_move_with_their_group() {
    let mut h = two_groups_on_cpu0("0-1");
    h.ev(Event::Block { task: TaskId(3) });
    h.external(&[1, 1]); // heavy load: groups stay on one CPU each
    assert_eq!(h.load(), vec![4000, 1000]);
    let d = h.balance();
    assert!(matches!(
        d[0],
        Decision::GroupMoved {
            group: GroupId(1),
            ..
        }
    ));
    assert_eq!(places(&d), p(&[(1, "1"), (3, "1")]));
    assert!(!h.e.task(TaskId(3)).unwrap().runnable);
    assert_eq!(h.load(), vec![3000, 2000]);
}

#[test]
fn groups_leave_a_hogged_llc_once_and_stay_where_the_home_rule_puts_them() {
    // dfsched-vmbench's `scx-rehint-and-move` on correct inputs: 2 LLCs of
    // 4 CPUs (2 nodes, SMT pairs), DF 1 of 2 threads and DF 2 of 3, each
    // in an LLC of its own, then two spinning threads of another program
    // on each CPU of DF 1's LLC, seen as they are (2000 a CPU) at every
    // pass. In the VM the runtime saw them as almost nothing (the guest's
    // /proc/stat busy columns lose timer ticks under TCG:
    // `signals::BusyTracker`), and its passes moved DF 2 into the hogged
    // LLC and DF 1 back (1–9 group moves, 10–34 re-homes a run).
    //
    // On these inputs the first pass re-homes DF 1 out, whole, to half of
    // the other LLC (its home 0-1 no longer holds it), and the home rule then finds no LLC that holds DF 2 (the
    // other LLC has DF 1's 2 threads inside and 4 CPUs: 2 + 3 > 4; the
    // hogged one 8 + 3 > 4), so DF 2 goes to the whole machine, its
    // answer when nothing smaller holds a group: no home inside the hogged
    // LLC, only one spread over both. Nothing moves after that pass in 50:
    // no move narrows the spread (DF 2's home holds both the busiest and
    // the idlest CPU, DF 1's not the busiest).
    let mut h = H::new(Topology::test(2, 1, 2, 2));
    for t in 1..=2 {
        h.task_df(t, "0-7", 1);
    }
    for t in 3..=5 {
        h.task_df(t, "0-7", 2);
    }
    assert_eq!((h.home(1), h.home(3)), ("0-1".into(), "4-7".into()));
    h.external(&[2, 2, 2, 2, 0, 0, 0, 0]);
    let before = h.e.stats().clone();
    let mut homes = Vec::new();
    for _ in 0..50 {
        h.balance();
        homes.push((h.home(1), h.home(3)));
    }
    assert!(
        homes
            .iter()
            .all(|x| *x == ("4-5".to_string(), "0-7".to_string())),
        "{homes:?}"
    );
    assert_eq!(h.load(), vec![2375, 2375, 2375, 2375, 1375, 1375, 375, 375]);
    let s = h.e.stats();
    let moved = (
        s.group_moves - before.group_moves,
        s.rehomes - before.rehomes,
        s.splits,
    );
    assert_eq!(
        moved,
        (0, 2, 0),
        "one re-home of each group, in the first pass"
    );
}

#[test]
fn outside_noise_on_the_busiest_cpu_does_not_swap_a_group_between_equal_homes() {
    // A DF group of 2 on core 0-1 of a 4-CPU LLC, core 2-3 empty, and 27
    // thousandths of estimated outside load on CPU 1 (1000 1027 0 0).
    // Moving the group to 2-3 narrows max − min from 1027 to 1000, but
    // only swaps which core is busy (0 27 1000 1000); with the next pass's
    // noise on the other core it would move back. Seen 15 times in a
    // minute of dfsched-vmbench's `scx-rehint-and-move`.
    let mut h = H::new(Topology::test(1, 1, 2, 2));
    h.task_df(1, "0-3", 1);
    h.task_df(2, "0-3", 1);
    assert_eq!(h.home(1), "0-1");
    let noise = |h: &mut H, cpu: u32, milli: u64| {
        h.ev(Event::ExternalLoadMilli {
            load_milli: vec![(CpuId(cpu), milli)],
        })
    };
    noise(&mut h, 1, 27);
    assert_eq!(h.load(), vec![1000, 1027, 0, 0]);
    assert!(h.balance().is_empty(), "a swap on noise");
    assert_eq!(h.home(1), "0-1");
    assert!(h.e.last_balance().unwrap().skipped_no_gain > 0);
    // A real imbalance still moves it: a whole outside task on CPU 1.
    noise(&mut h, 1, 1000);
    let d = h.balance();
    assert_eq!(h.home(1), "2-3", "{d:?}");
    assert_eq!(h.load(), vec![0, 1000, 1000, 1000]);
}

#[test]
fn outside_noise_does_not_split_groups_that_no_move_can_balance() {
    // dfsched-vmbench's `scx-faults`: a DF group of 2 per LLC, each on
    // half its LLC (1000 on CPUs 0, 1, 4, 5; 0 on the rest). The machine
    // is imbalanced by the test and no move narrows it (each is a swap),
    // so the imbalance "lasts"; a split only narrows max − min by the
    // outside estimate's noise (30 thousandths on CPU 0 here), and it
    // split a group within 10 passes of the VM run.
    let config = Config {
        split_after_passes: 3,
        ..Config::default()
    };
    let mut h = H::with(Topology::test(2, 1, 2, 2), config);
    for t in 1..=2 {
        h.task_df(t, "0-7", 1);
    }
    for t in 3..=4 {
        h.task_df(t, "0-7", 2);
    }
    assert_eq!((h.home(1), h.home(3)), ("0-1".into(), "4-5".into()));
    h.ev(Event::ExternalLoadMilli {
        load_milli: vec![(CpuId(0), 30)],
    });
    for _ in 0..10 {
        assert!(h.balance().is_empty());
    }
    let s = h.e.stats();
    assert_eq!((s.splits, s.group_moves), (0, 0));
    assert!(s.imbalanced_passes >= 10);
}
