//! Bad input and faults: each returns its error code and message, the
//! process goes on, and the thread stays where the kernel put it.
//!
//! What is simulated (through `FaultySys`, an injectable affinity layer over
//! the real calls), because a root process cannot make the kernel do it on
//! demand:
//! - `EPERM` from `sched_setaffinity` (root may move any thread);
//! - `EINVAL` from a cpuset that shrank under us: a simulated cpuset makes
//!   `set_affinity` outside it fail with `EINVAL` and `get_affinity` report
//!   the mask cut to it, as the kernel does with cgroup cpusets;
//! - `ESRCH` from a thread that exited between a hint and its placement (a
//!   real exiting thread tells the runtime first, from its thread-local
//!   destructor, so the race cannot be staged);
//! - a panic inside dfsched.
//!
//! Everything else is real: masks are read back with `sched_getaffinity`.

mod common;

use common::*;
use dfsched::{code, sys, CpuSet, Runtime};
use std::sync::Arc;

#[test]
fn an_unknown_app_is_refused_and_the_thread_stays_put() {
    let rt = Runtime::start(quiet()).unwrap();
    let w = Worker::spawn();
    let before = w.mask();
    let rt2 = rt.clone();
    let err = w.run(move || rt2.hint(999, 0, 1)).unwrap_err();
    assert_eq!(err.code(), code::E_UNKNOWN_APP);
    assert!(err.to_string().contains("app999"), "{err}");
    assert_eq!(w.mask(), before);
    assert!(rt.task(w.tid).is_none(), "not registered");
    assert_eq!(rt.stats().refused_calls.unknown_app, 1);
    // The program goes on: a created application works.
    let app = rt.create_app().unwrap();
    assert_eq!(app, 1);
    let rt2 = rt.clone();
    w.run(move || rt2.hint(app, 0, 5)).unwrap();
    assert_eq!(rt.task(w.tid).unwrap().app, dfsched::AppId(app));
    // enter/leave use the thread's own application.
    let rt2 = rt.clone();
    w.run(move || rt2.enter(6)).unwrap();
    let rt2 = rt.clone();
    let err = w.run(move || rt2.hint(0, 6, 7)).unwrap_err();
    assert_eq!(err.code(), code::E_WRONG_APP);
    assert_eq!(rt.stats().refused_calls.wrong_app, 1);
}

#[test]
fn a_df_switch_from_a_thread_that_never_hinted_is_refused() {
    let rt = Runtime::start(quiet()).unwrap();
    let w = Worker::spawn();
    let before = w.mask();
    let rt2 = rt.clone();
    let err = w.run(move || rt2.hint(0, 7, 8)).unwrap_err();
    assert_eq!(err.code(), code::E_NOT_IN_DF);
    assert!(err.to_string().contains("df7"), "{err}");
    assert_eq!(w.mask(), before);
    assert_eq!(rt.stats().refused_calls.not_in_df, 1);
    // The thread is registered (its first call), in no DF; enter works.
    let rt2 = rt.clone();
    w.run(move || rt2.enter(8)).unwrap();
    assert_eq!(rt.task(w.tid).unwrap().df, Some(dfsched::DfId(8)));
    rt.check_invariants().unwrap();
}

#[test]
fn hints_after_shutdown_are_refused() {
    let rt = Runtime::start(quiet()).unwrap();
    rt.enter(1).unwrap();
    rt.shutdown();
    let mask = sys::get_affinity(0).unwrap();
    for result in [rt.enter(2), rt.enter(1), rt.leave(), rt.balance_now()] {
        assert_eq!(result.unwrap_err().code(), code::E_SHUT_DOWN);
    }
    assert_eq!(rt.create_app().unwrap_err().code(), code::E_SHUT_DOWN);
    assert_eq!(
        sys::get_affinity(0).unwrap(),
        mask,
        "nothing restored or moved"
    );
    assert_eq!(rt.stats().refused_calls.shut_down, 3);
}

#[test]
fn eperm_leaves_the_thread_where_it_is() {
    with_two_cpus("eperm_leaves_the_thread_where_it_is", |_, _| {
        let faulty = Arc::new(FaultySys::default());
        let rt = Runtime::start_with_sys(quiet(), faulty.clone()).unwrap();
        let w = Worker::spawn();
        let before = w.mask();
        faulty.inject(
            w.tid,
            Faults {
                set_errno: Some(libc::EPERM),
                ..Faults::default()
            },
        );
        let rt2 = rt.clone();
        // One thread, light load: DF 1's home is one CPU, so it must move.
        let err = w.run(move || rt2.enter(1)).unwrap_err();
        assert_eq!(err.code(), code::E_PERM);
        assert!(err.to_string().contains("EPERM"), "{err}");
        assert_eq!(w.mask(), before, "left where the kernel put it");
        let stats = rt.stats();
        assert_eq!(stats.affinity_failures.eperm, 1);
        // The hint itself counts: the engine has the thread in DF 1.
        assert_eq!(rt.task(w.tid).unwrap().df, Some(dfsched::DfId(1)));
        // Once allowed again, the next move works.
        faulty.clear(w.tid);
        let rt2 = rt.clone();
        w.run(move || rt2.enter(2)).unwrap();
        assert_eq!(Some(w.mask()), rt.task(w.tid).unwrap().placed);
    });
}

/// U in DF 1 on the first CPU, T in DF 2 on the second (heavy: one CPU per
/// home). Returns them.
fn two_homes(rt: &Runtime) -> (Worker, Worker) {
    let (u, t) = (Worker::spawn(), Worker::spawn());
    let rt2 = rt.clone();
    u.run(move || rt2.enter(1)).unwrap();
    let rt2 = rt.clone();
    t.run(move || rt2.enter(2)).unwrap();
    assert_eq!(u.mask().len(), 1);
    assert_eq!(t.mask().len(), 1);
    assert_ne!(u.mask(), t.mask());
    (u, t)
}

#[test]
fn einval_from_a_shrunk_cpuset_rereads_the_allowed_cpus_and_retries() {
    with_two_cpus("einval_from_a_shrunk_cpuset", |_, c1| {
        let faulty = Arc::new(FaultySys::default());
        let rt = Runtime::start_with_sys(quiet_heavy(), faulty.clone()).unwrap();
        let (u, t) = two_homes(&rt);
        assert_eq!(t.mask(), CpuSet::single(c1));
        // T's cpuset shrinks to the CPU it is on; the kernel mask is
        // unchanged, so only set_affinity can tell.
        faulty.inject(
            t.tid,
            Faults {
                cpuset: Some(CpuSet::single(c1)),
                ..Faults::default()
            },
        );
        // T switches to DF 1, whose home is U's CPU: outside the cpuset.
        let rt2 = rt.clone();
        t.run(move || rt2.enter(1)).unwrap();
        assert_eq!(t.mask(), CpuSet::single(c1), "placed within its new cpuset");
        let stats = rt.stats();
        assert_eq!(stats.affinity_failures.einval, 1);
        assert_eq!(stats.allowed_changes, 1);
        assert_eq!(rt.task(t.tid).unwrap().allowed, CpuSet::single(c1));
        assert_eq!(rt.task(t.tid).unwrap().df, Some(dfsched::DfId(1)));
        // The engine may re-home DF 1 where both members may run: U then
        // follows. Either way every mask is the engine's.
        assert_eq!(Some(u.mask()), rt.task(u.tid).unwrap().placed);
        rt.check_invariants().unwrap();
    });
}

#[test]
fn einval_twice_falls_back_with_an_error() {
    with_two_cpus("einval_twice_falls_back_with_an_error", |_, _| {
        let faulty = Arc::new(FaultySys::default());
        let rt = Runtime::start_with_sys(quiet_heavy(), faulty.clone()).unwrap();
        let (_u, t) = two_homes(&rt);
        let before = t.mask();
        faulty.inject(
            t.tid,
            Faults {
                set_errno: Some(libc::EINVAL),
                ..Faults::default()
            },
        );
        let rt2 = rt.clone();
        let err = t.run(move || rt2.enter(1)).unwrap_err();
        assert_eq!(err.code(), code::E_INVAL);
        assert_eq!(t.mask(), before, "left where it was");
        let stats = rt.stats();
        assert_eq!(
            stats.affinity_failures.einval, 2,
            "the first try and one retry"
        );
        assert_eq!(stats.allowed_changes, 1);
    });
}

#[test]
fn a_thread_gone_before_its_placement_is_dropped() {
    with_two_cpus("a_thread_gone_before_its_placement_is_dropped", |_, _| {
        let faulty = Arc::new(FaultySys::default());
        let rt = Runtime::start_with_sys(quiet(), faulty.clone()).unwrap();
        let (v, t) = (Worker::spawn(), Worker::spawn());
        let rt2 = rt.clone();
        t.run(move || rt2.hint(0, 0, 0)).unwrap();
        let rt2 = rt.clone();
        v.run(move || rt2.enter(1)).unwrap();
        assert_eq!(v.mask().len(), 1, "a group of one has one CPU (light load)");
        // V "exits" (simulated): moving it now fails with ESRCH.
        faulty.inject(
            v.tid,
            Faults {
                set_errno: Some(libc::ESRCH),
                ..Faults::default()
            },
        );
        // T joins DF 1: the group of two needs both CPUs, so V is re-placed.
        let rt2 = rt.clone();
        t.run(move || rt2.enter(1)).unwrap();
        let stats = rt.stats();
        assert_eq!(stats.affinity_failures.esrch, 1, "{stats:?}");
        assert_eq!(stats.threads_gone, 1);
        assert!(rt.task(v.tid).is_none(), "dropped");
        assert_eq!(rt.groups()[0].members, vec![dfsched::TaskId(t.tid)]);
        rt.check_invariants().unwrap();
        // Had V lived on, its next DF change would be refused once (its
        // registration is stale), then it would start anew.
        faulty.clear(v.tid);
        let rt2 = rt.clone();
        let err = v.run(move || rt2.enter(2)).unwrap_err();
        assert_eq!(err.code(), code::E_REFUSED);
        let rt2 = rt.clone();
        v.run(move || rt2.enter(2)).unwrap();
        assert!(rt.task(v.tid).is_some());
        v.join();
        assert_eq!(rt.stats().threads_exited, 1);
    });
}

#[test]
fn a_panic_inside_dfsched_poisons_only_its_runtime() {
    // The injected panic fires on a placement, which needs a second CPU.
    with_two_cpus("a_panic_inside_dfsched_poisons_only_its_runtime", |_, _| {
        let faulty = Arc::new(FaultySys::default());
        let rt = Runtime::start_with_sys(quiet(), faulty.clone()).unwrap();
        let w = Worker::spawn();
        faulty.inject(
            w.tid,
            Faults {
                panic_on_set: true,
                ..Faults::default()
            },
        );
        let rt2 = rt.clone();
        let caught = w.run(move || {
            // The Rust API lets a panic propagate, as Rust does; the C ABI
            // catches it (see c_abi.rs). Catch it here to keep the worker.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = rt2.hint(0, 0, 0);
                rt2.enter(1)
            }));
            assert!(r.is_err(), "the injected panic propagated");
            Ok(())
        });
        caught.unwrap();
        // The worker exits: its thread-local destructor meets a poisoned
        // runtime and must neither panic nor abort the process.
        w.join();
        let err = rt.enter(3).unwrap_err();
        assert_eq!(err.code(), code::E_INTERNAL);
        // Counters stay readable; other runtimes are unaffected.
        let _ = rt.stats();
        let other = Runtime::start(quiet()).unwrap();
        other.enter(3).unwrap();
    });
}

#[test]
fn bad_configuration_refuses_to_start() {
    let mut cfg = quiet();
    cfg.engine.imbalance_pct = 0;
    let err = Runtime::start(cfg).unwrap_err();
    assert_eq!(err.code(), code::E_CONFIG);
    assert!(err.to_string().contains("imbalance_pct"), "{err}");
}
