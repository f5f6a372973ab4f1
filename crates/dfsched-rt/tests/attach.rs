//! `Runtime::attach`: a thread registered with no hint is placed by the
//! policy. Masks are read back with `sched_getaffinity`. Each test starts its
//! own runtime; the 2-CPU ones skip with a message where fewer CPUs are
//! allowed.

mod common;

use common::*;
use dfsched::{CpuSet, Error, Policy, Runtime, RuntimeConfig};

fn quiet_with(policy: Policy) -> RuntimeConfig {
    RuntimeConfig { policy, ..quiet() }
}

/// `n` workers, each attached (in index order).
fn attach_all(rt: &Runtime, n: usize) -> Vec<Worker> {
    let workers: Vec<Worker> = (0..n).map(|_| Worker::spawn()).collect();
    for w in &workers {
        let rt = rt.clone();
        w.run(move || rt.attach()).unwrap();
    }
    workers
}

#[test]
fn attach_registers_a_thread_once_with_no_df() {
    let rt = Runtime::start(quiet()).unwrap();
    let w = Worker::spawn();
    for _ in 0..3 {
        let rt2 = rt.clone();
        w.run(move || rt2.attach()).unwrap();
    }
    let s = rt.stats();
    assert_eq!((s.threads_registered, s.threads_attached), (1, 1));
    assert_eq!(s.threads_active, 1);
    let view = rt.task(w.tid).expect("the attached thread is known");
    assert_eq!((view.df, view.group), (None, None));
    // A later hint works as for any thread; attach then changes nothing.
    let rt2 = rt.clone();
    w.run(move || rt2.enter(7)).unwrap();
    let rt2 = rt.clone();
    w.run(move || rt2.attach()).unwrap();
    assert_eq!(rt.task(w.tid).unwrap().df, Some(dfsched::DfId(7)));
    assert_eq!(rt.stats().threads_registered, 1);
    w.join();
    let s = rt.stats();
    assert_eq!((s.threads_exited, s.threads_active), (1, 0));
}

#[test]
fn attached_threads_of_the_process_share_one_home_under_co_thread() {
    with_two_cpus(
        "attached_threads_of_the_process_share_one_home_under_co_thread",
        |c0, c1| {
            let rt = Runtime::start(quiet_with(Policy::CoThread)).unwrap();
            // Other processes keep c1 busy with 6 runnable threads: the
            // machine is heavily loaded, and the process's co-thread group
            // fits its share on c0 alone, so all of it goes there.
            rt.set_external_load(&[(c1, 6)]).unwrap();
            let workers = attach_all(&rt, 4);
            let masks: Vec<CpuSet> = workers.iter().map(Worker::mask).collect();
            assert!(
                masks.iter().all(|m| *m == set_of(&[c0])),
                "the co-threads are not all on {c0}: {masks:?}"
            );
            // Each is where the engine says, in one group.
            assert_one_group_where_the_engine_says(&rt, &workers);
            rt.check_invariants().unwrap();
            assert_eq!(rt.stats().threads_attached, 4);
        },
    );
}

#[test]
fn a_lone_processs_co_threads_share_one_home_within_its_cpus() {
    with_two_cpus(
        "a_lone_processs_co_threads_share_one_home_within_its_cpus",
        |_c0, _c1| {
            let rt = Runtime::start(quiet_with(Policy::CoThread)).unwrap();
            // 6 threads on 2 CPUs and nothing else: one group, one home (the
            // engine keeps a group within its fair share, so here the home
            // may be both CPUs), every thread exactly where the engine put it.
            let workers = attach_all(&rt, 6);
            let masks: Vec<CpuSet> = workers.iter().map(Worker::mask).collect();
            assert!(masks.iter().all(|m| *m == masks[0]), "{masks:?}");
            assert!(masks[0].is_subset(rt.allowed()));
            assert_one_group_where_the_engine_says(&rt, &workers);
        },
    );
}

/// Asserts the workers are all in one group, each with its kernel mask
/// where the engine placed it.
fn assert_one_group_where_the_engine_says(rt: &Runtime, workers: &[Worker]) {
    let groups: Vec<_> = workers
        .iter()
        .map(|w| rt.task(w.tid).unwrap().group)
        .collect();
    assert!(
        groups[0].is_some() && groups.iter().all(|g| *g == groups[0]),
        "{groups:?}"
    );
    for w in workers {
        let view = rt.task(w.tid).unwrap();
        // Never placed: the engine's home is the thread's allowed set.
        let placed = view.placed.unwrap_or(view.allowed);
        assert_eq!(w.mask(), placed, "tid {}", w.tid);
    }
}

#[test]
fn attached_threads_stay_unmanaged_under_data_affinity() {
    with_two_cpus(
        "attached_threads_stay_unmanaged_under_data_affinity",
        |_c0, _c1| {
            let rt = Runtime::start(quiet_with(Policy::DataAffinity)).unwrap();
            let workers = attach_all(&rt, 6);
            for w in &workers {
                assert_eq!(rt.task(w.tid).unwrap().group, None);
                assert_eq!(
                    w.mask(),
                    *rt.allowed(),
                    "an unmanaged thread keeps its mask"
                );
            }
            assert_eq!(rt.stats().threads_attached, 6);
        },
    );
}

#[test]
fn a_hint_takes_an_attached_co_thread_to_its_df_group() {
    with_two_cpus(
        "a_hint_takes_an_attached_co_thread_to_its_df_group",
        |_c0, _c1| {
            let rt = Runtime::start(quiet_with(Policy::CoThread)).unwrap();
            let workers = attach_all(&rt, 4);
            let cothreads = rt.task(workers[1].tid).unwrap().group;
            let rt2 = rt.clone();
            workers[0].run(move || rt2.enter(5)).unwrap();
            let view = rt.task(workers[0].tid).unwrap();
            assert_eq!(view.df, Some(dfsched::DfId(5)));
            assert_ne!(view.group, cothreads, "still in the co-thread group");
            assert_eq!(Some(workers[0].mask()), view.placed);
            rt.check_invariants().unwrap();
        },
    );
}

#[test]
fn attach_on_a_disabled_runtime_succeeds_and_does_nothing() {
    let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "none")]).unwrap();
    let rt = Runtime::start(cfg).unwrap();
    let w = Worker::spawn();
    let before = w.mask();
    let rt2 = rt.clone();
    w.run(move || rt2.attach()).unwrap();
    assert_eq!(w.mask(), before);
    assert_eq!(rt.stats().threads_registered, 0);
    assert!(rt.task(w.tid).is_none());
}

#[test]
fn attach_after_shutdown_is_refused() {
    let rt = Runtime::start(quiet()).unwrap();
    rt.shutdown();
    let w = Worker::spawn();
    let rt2 = rt.clone();
    assert_eq!(w.run(move || rt2.attach()), Err(Error::ShutDown));
    assert_eq!(rt.stats().refused_calls.shut_down, 1);
    assert_eq!(rt.stats().threads_registered, 0);
}
