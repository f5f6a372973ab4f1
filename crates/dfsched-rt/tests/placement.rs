//! Placement against the real kernel: every CPU mask here is read back with
//! `sched_getaffinity`. Each test starts its own `Runtime`, so tests run in
//! parallel without sharing state.

mod common;

use common::*;
use dfsched::sys;
use dfsched::{CpuSet, Runtime, RuntimeConfig};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Starts `workers` threads that each enter the DF `df_of(i)` in turn (in
/// index order, so the engine sees a fixed event sequence).
fn enter_in_order(rt: &Runtime, n: usize, df_of: impl Fn(usize) -> u64) -> Vec<Worker> {
    let workers: Vec<Worker> = (0..n).map(|_| Worker::spawn()).collect();
    // Register every thread first (unmanaged), so the load is known up
    // front, then hint one by one.
    for w in &workers {
        let rt = rt.clone();
        w.run(move || rt.hint(0, 0, 0)).unwrap();
    }
    for (i, w) in workers.iter().enumerate() {
        let rt = rt.clone();
        let df = df_of(i);
        w.run(move || rt.enter(df)).unwrap();
    }
    workers
}

/// Asserts each worker's kernel mask is what the engine placed it on.
fn assert_masks_match_engine(rt: &Runtime, workers: &[Worker]) {
    for w in workers {
        let placed = rt.task(w.tid).and_then(|t| t.placed);
        let placed = placed.unwrap_or_else(|| rt.task(w.tid).unwrap().allowed);
        assert_eq!(
            w.mask(),
            placed,
            "tid {} is not where the engine put it",
            w.tid
        );
        assert!(w.mask().is_subset(rt.allowed()));
    }
}

#[test]
fn threads_of_one_df_share_one_home() {
    with_two_cpus("threads_of_one_df_share_one_home", |_c0, _c1| {
        let rt = Runtime::start(quiet()).unwrap();
        // 4 threads on 2 CPUs: 2 runnable per CPU, heavy load, homes of one CPU.
        let workers = enter_in_order(&rt, 4, |i| 1 + (i as u64 % 2));
        let df1: Vec<CpuSet> = workers.iter().step_by(2).map(Worker::mask).collect();
        let df2: Vec<CpuSet> = workers
            .iter()
            .skip(1)
            .step_by(2)
            .map(Worker::mask)
            .collect();
        assert!(df1.iter().all(|m| *m == df1[0]), "DF 1 split: {df1:?}");
        assert!(df2.iter().all(|m| *m == df2[0]), "DF 2 split: {df2:?}");
        assert_eq!(df1[0].len(), 1, "heavy load: a home is one CPU");
        assert_eq!(df2[0].len(), 1);
        assert_ne!(df1[0], df2[0], "the second DF goes to the less loaded CPU");
        assert_masks_match_engine(&rt, &workers);
        let groups = rt.groups();
        assert_eq!(groups.len(), 2);
        assert!(groups.iter().all(|g| g.members.len() == 2));
        let stats = rt.stats();
        assert_eq!(stats.threads_registered, 4);
        assert!(stats.affinity_calls >= 4, "{stats:?}");
        assert_eq!(stats.affinity_failures.total(), 0);
        rt.check_invariants().unwrap();
    });
}

#[test]
fn a_df_switch_moves_the_thread() {
    with_two_cpus("a_df_switch_moves_the_thread", |_c0, _c1| {
        let rt = Runtime::start(quiet()).unwrap();
        let workers = enter_in_order(&rt, 4, |i| 1 + (i as u64 % 2));
        let (w0, w1) = (&workers[0], &workers[1]);
        let before = w0.mask();
        assert_ne!(before, w1.mask());
        let rt2 = rt.clone();
        w0.run(move || {
            rt2.enter(2)?;
            // Moved before enter returned: the thread already runs there.
            let here = sys::current_cpu().unwrap();
            assert!(sys::get_affinity(0)?.contains(here));
            Ok(())
        })
        .unwrap();
        assert_eq!(w0.mask(), w1.mask(), "thread 0 joined DF 2's home");
        assert_ne!(w0.mask(), before);
        assert_eq!(rt.task(w0.tid).unwrap().df, Some(dfsched::DfId(2)));
        assert_masks_match_engine(&rt, &workers);
        // Leaving makes it unmanaged: its mask is its allowed set again.
        let rt2 = rt.clone();
        w0.run(move || rt2.leave()).unwrap();
        assert_eq!(w0.mask(), rt.allowed().clone());
        rt.check_invariants().unwrap();
    });
}

#[test]
fn the_balancer_moves_whole_groups() {
    with_two_cpus("the_balancer_moves_whole_groups", |c0, c1| {
        let rt = Runtime::start(quiet()).unwrap();
        // While the second CPU looks busy, every new DF lands on the first.
        rt.set_external_load(&[(c1, 10)]).unwrap();
        let workers = enter_in_order(&rt, 8, |i| 1 + (i as u64 / 2));
        let first = set_of(&[c0]);
        assert!(
            workers.iter().all(|w| w.mask() == first),
            "all piled onto {c0}"
        );
        assert_eq!(rt.groups().len(), 4);
        // The other process goes away: the balancer spreads whole groups.
        rt.set_external_load(&[]).unwrap();
        rt.balance_now().unwrap();
        let stats = rt.stats();
        assert!(stats.engine.group_moves > 0, "{stats:?}");
        assert_eq!(stats.engine.splits, 0, "whole groups moved, none split");
        for pair in workers.chunks(2) {
            assert_eq!(pair[0].mask(), pair[1].mask(), "a group stays together");
        }
        let on_second = workers.iter().filter(|w| w.mask() == set_of(&[c1])).count();
        assert_eq!(on_second, 4, "two of the four groups moved to {c1}");
        assert_masks_match_engine(&rt, &workers);
        rt.check_invariants().unwrap();
    });
}

#[test]
fn under_a_one_cpu_mask_everything_stays_on_that_cpu() {
    // Runs in a thread of its own: its mask (and its children's) is narrowed.
    std::thread::spawn(|| {
        let cpu = allowed().first().unwrap();
        let only = CpuSet::single(cpu);
        sys::set_affinity(0, &only).unwrap();
        let rt = Runtime::start(quiet()).unwrap();
        assert_eq!(rt.allowed(), &only);
        assert_eq!(rt.topology().cpus(), &only);
        let workers = enter_in_order(&rt, 4, |i| 1 + i as u64);
        rt.set_external_load(&[]).unwrap();
        rt.balance_now().unwrap();
        for w in &workers {
            assert_eq!(w.mask(), only);
        }
        let stats = rt.stats();
        assert_eq!(stats.affinity_failures.total(), 0, "{stats:?}");
        assert_eq!(stats.refused_calls.total(), 0);
        assert_eq!(stats.engine.hints, 8, "4 registrations and 4 enters");
        rt.check_invariants().unwrap();
    })
    .join()
    .unwrap();
}

#[test]
fn a_thread_exit_is_noticed_without_a_call() {
    let rt = Runtime::start(quiet()).unwrap();
    let w = Worker::spawn();
    let tid = w.tid;
    let rt2 = rt.clone();
    w.run(move || rt2.enter(7)).unwrap();
    assert!(rt.task(tid).is_some());
    assert_eq!(rt.groups().len(), 1);
    w.join();
    let stats = rt.stats();
    assert_eq!(stats.threads_exited, 1);
    assert_eq!(stats.threads_active, 0);
    assert!(rt.task(tid).is_none());
    assert!(rt.groups().is_empty(), "the DF's group was reclaimed");
    assert_eq!(stats.engine.groups_reclaimed, 1);
}

#[test]
fn a_repeated_hint_makes_no_system_call() {
    let sys = Arc::new(FaultySys::default());
    let rt = Runtime::start_with_sys(quiet(), sys.clone()).unwrap();
    rt.enter(3).unwrap();
    let calls = sys.calls();
    for _ in 0..1000 {
        rt.enter(3).unwrap();
        rt.hint(0, 3, 3).unwrap();
    }
    assert_eq!(sys.calls(), calls, "the fast path called the kernel");
    let stats = rt.stats();
    assert_eq!(stats.fast_hints, 2000);
    assert_eq!(stats.hint_calls, 2001);
    assert_eq!(stats.engine.hints, 1, "the engine saw only the first");
    assert_eq!(rt.thread_df(), Some(3));
    // A different DF takes the slow path again.
    rt.enter(4).unwrap();
    assert_eq!(rt.thread_df(), Some(4));
    assert_eq!(rt.stats().engine.hints, 2);
}

#[test]
fn a_mask_narrowed_by_taskset_is_honoured() {
    with_two_cpus("a_mask_narrowed_by_taskset_is_honoured", |c0, c1| {
        // Heavy from one runnable thread per CPU: homes are single CPUs.
        let rt = Runtime::start(quiet_heavy()).unwrap();
        let (u, t) = (Worker::spawn(), Worker::spawn());
        let rt2 = rt.clone();
        t.run(move || rt2.hint(0, 0, 0)).unwrap(); // registered, unmanaged: both CPUs
        let rt2 = rt.clone();
        u.run(move || rt2.enter(1)).unwrap();
        assert_eq!(u.mask(), set_of(&[c0]), "DF 1's home is the first CPU");
        // An administrator narrows t to the second CPU (as taskset -p would).
        sys::set_affinity(t.tid, &set_of(&[c1])).unwrap();
        let rt2 = rt.clone();
        t.run(move || rt2.enter(1)).unwrap();
        assert_eq!(t.mask(), set_of(&[c1]), "placed within its narrowed mask");
        assert_eq!(rt.task(t.tid).unwrap().allowed, set_of(&[c1]));
        assert_eq!(rt.stats().allowed_changes, 1);
        rt.check_invariants().unwrap();
    });
}

#[test]
fn runtimes_are_independent_and_a_thread_may_join_several() {
    let a = Runtime::start(quiet()).unwrap();
    let b = Runtime::start(quiet()).unwrap();
    a.enter(1).unwrap();
    b.enter(2).unwrap();
    assert_eq!(a.thread_df(), Some(1));
    assert_eq!(b.thread_df(), Some(2));
    a.enter(1).unwrap();
    assert_eq!(a.stats().fast_hints, 1);
    assert_eq!(b.stats().fast_hints, 0);
    assert_eq!(a.stats().threads_registered, 1);
    assert_eq!(b.stats().threads_registered, 1);
    a.leave().unwrap();
    b.leave().unwrap();
}

#[test]
fn the_balancer_thread_runs_passes_until_shut_down() {
    let cfg = RuntimeConfig {
        balance_interval_ms: 1,
        external_load: true,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(cfg).unwrap();
    rt.enter(1).unwrap();
    // Wait (with a generous bound, not a timing assertion) for passes.
    let mut waited = 0;
    while rt.stats().engine.balance_passes < 3 {
        std::thread::sleep(Duration::from_millis(5));
        waited += 1;
        assert!(waited < 4000, "the balancer thread ran no passes");
    }
    let stats = rt.stats();
    assert!(stats.external_load_samples >= 1, "{stats:?}");
    assert_eq!(stats.balance_errors, 0);
    rt.shutdown();
    let after = rt.stats().engine.balance_passes;
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        rt.stats().engine.balance_passes,
        after,
        "no pass after shutdown"
    );
    assert!(rt.stats().shut_down);
    rt.shutdown(); // idempotent
}

#[test]
fn shutdown_wakes_a_sleeping_balancer_at_once() {
    let cfg = RuntimeConfig {
        balance_interval_ms: dfsched::config::MAX_BALANCE_INTERVAL_MS,
        external_load: false,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(cfg).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let rt2 = rt.clone();
    std::thread::spawn(move || {
        rt2.shutdown();
        tx.send(()).unwrap();
    });
    // A hang guard, not a timing assertion: an hour-long sleep would fail.
    rx.recv_timeout(Duration::from_secs(60))
        .expect("shutdown waited for the balancer's hour-long sleep");
    assert_eq!(rt.enter(1).unwrap_err().code(), dfsched::code::E_SHUT_DOWN);
}

#[test]
fn dropping_the_last_clone_stops_the_balancer() {
    let cfg = RuntimeConfig {
        balance_interval_ms: dfsched::config::MAX_BALANCE_INTERVAL_MS,
        external_load: false,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(cfg).unwrap();
    let worker = Worker::spawn();
    let rt2 = rt.clone();
    worker.run(move || rt2.enter(5)).unwrap();
    drop(rt); // the worker's closure clone is gone too: this was the last
              // The worker's registration outlives the runtime: its exit must not
              // touch it.
    worker.join();
}

#[test]
fn a_disabled_runtime_does_nothing_successfully() {
    let cfg = RuntimeConfig {
        enabled: false,
        sysfs_root: "/nonexistent".into(),
        ..quiet()
    };
    let rt = Runtime::start(cfg).unwrap();
    let w = Worker::spawn();
    let before = w.mask();
    let rt2 = rt.clone();
    w.run(move || {
        rt2.enter(1)?;
        rt2.hint(99, 5, 6)?; // even bad input: a no-op
        rt2.leave()
    })
    .unwrap();
    assert_eq!(w.mask(), before);
    assert_eq!(rt.create_app().unwrap(), 1);
    rt.balance_now().unwrap();
    let stats = rt.stats();
    assert!(!stats.enabled);
    assert_eq!(
        (
            stats.hint_calls,
            stats.affinity_calls,
            stats.threads_registered
        ),
        (0, 0, 0)
    );
}

#[test]
fn stats_json_has_the_counters() {
    let rt = Runtime::start(quiet()).unwrap();
    rt.enter(1).unwrap();
    rt.enter(1).unwrap();
    let json: serde_json::Value = serde_json::from_str(&rt.stats_json()).unwrap();
    assert_eq!(json["hint_calls"], 2);
    assert_eq!(json["fast_hints"], 1);
    assert_eq!(json["threads_registered"], 1);
    assert_eq!(json["engine"]["hints"], 1);
    assert!(json["affinity_failures"]["eperm"].is_u64());
    assert!(json["refused_calls"]["not_in_df"].is_u64());
}

#[test]
fn a_fixture_sysfs_root_shapes_the_topology() {
    let dir = TempDir::new("rt-root");
    // This machine's CPUs, and one more it cannot use.
    let online: CpuSet = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .parse()
        .unwrap();
    let mut cpus = online.clone();
    cpus.insert(dfsched::CpuId(online.iter().last().unwrap().0 + 1));
    write_flat_llc(&dir, &cpus);
    let cfg = RuntimeConfig {
        sysfs_root: dir.path().to_path_buf(),
        ..quiet()
    };
    let rt = Runtime::start(cfg).unwrap();
    let machine = dfsched::sysfs::read_topology(dir.path()).unwrap();
    assert_eq!(machine.cpus(), &cpus);
    // The engine places only on the CPUs we may use, in the fixture's
    // domain: its LLC and the cache's size, the CPU beyond left out.
    let topo = rt.topology();
    assert_eq!(topo.cpus(), &cpus.intersection(rt.allowed()));
    let root = topo.domain(topo.root());
    assert_eq!(root.level, dfsched::Level::Llc);
    assert_eq!(root.caches[0].size_bytes, Some(107520 * 1024));
    rt.enter(1).unwrap();
    assert!(sys::get_affinity(0).unwrap().is_subset(rt.allowed()));

    // A missing root is refused, naming the file.
    let cfg = RuntimeConfig {
        sysfs_root: dir.path().join("missing"),
        ..quiet()
    };
    let err = Runtime::start(cfg).unwrap_err();
    assert_eq!(err.code(), dfsched::code::E_TOPOLOGY);
    assert!(
        err.to_string().contains("sys/devices/system/cpu/online"),
        "{err}"
    );
}

#[test]
fn a_topology_without_our_cpus_refuses_to_start() {
    let dir = TempDir::new("rt-foreign");
    // A machine of CPUs this process cannot use.
    write_flat_llc(&dir, &"9000-9001".parse().unwrap());
    let cfg = RuntimeConfig {
        sysfs_root: dir.path().to_path_buf(),
        ..quiet()
    };
    let err = Runtime::start(cfg).unwrap_err();
    assert_eq!(err.code(), dfsched::code::E_NO_CPU, "{err}");
}

#[test]
fn concurrent_hints_keep_the_engine_consistent() {
    let rt = Runtime::start(quiet()).unwrap();
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n as u64)
        .map(|i| {
            let (rt, barrier) = (rt.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for round in 0..50u64 {
                    rt.enter(1 + (i + round) % 3).unwrap();
                    let mask = sys::get_affinity(0).unwrap();
                    assert!(mask.is_subset(rt.allowed()));
                }
                rt.leave().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = rt.stats();
    assert_eq!(stats.threads_exited, n as u64);
    assert_eq!(stats.affinity_failures.total(), 0, "{stats:?}");
    assert!(rt.groups().is_empty());
    rt.check_invariants().unwrap();
}
