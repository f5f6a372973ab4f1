//! Recording (`DFSCHED_RECORD`) against the real kernel: a runtime that
//! records writes a file that decodes to what its threads did, and a full
//! buffer drops and counts events without ever making a thread wait.

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::{Runtime, RuntimeConfig};
use dfsched_record::{decode, Event};
use std::time::Duration;

/// The calling thread's CPU time, ns.
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the kernel writes only it.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn recording(path: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig {
        record: Some(path.to_path_buf()),
        agent: AgentMode::Off,
        ..quiet()
    }
}

#[test]
fn a_recorded_run_decodes_to_its_threads_hints_sizes_samples_and_exits() {
    let dir = TempDir::new("record-run");
    let path = dir.path().join("run.dfrec");
    let rt = Runtime::start(RuntimeConfig {
        balance_interval_ms: 10,
        ..recording(&path)
    })
    .unwrap();
    let workers: Vec<_> = (0..4u64)
        .map(|i| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                rt.enter(1 + i % 2).unwrap();
                rt.df_size(1 + i % 2, 8192).unwrap();
                // 30 ms of CPU over a few passes, so samples see it move.
                let mut x = 0u64;
                while own_cpu_ns() < 30_000_000 {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                rt.leave().unwrap();
                dfsched::sys::gettid()
            })
        })
        .collect();
    let tids: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let stats = rt.stats_json();
    rt.shutdown();
    let rec = decode(&std::fs::read(&path).unwrap()).unwrap();
    assert!(rec.complete, "no End record");
    assert_eq!(rec.dropped, 0);
    assert_eq!(rec.header.pid, std::process::id());
    let count = |f: &dyn Fn(&Event) -> bool| rec.events.iter().filter(|e| f(e)).count();
    for &tid in &tids {
        assert_eq!(
            count(&|e| matches!(e, Event::ThreadNew { tid: t, .. } if *t == tid)),
            1
        );
        assert_eq!(
            count(&|e| matches!(e, Event::ThreadExit { tid: t, .. } if *t == tid)),
            1
        );
        // enter and leave: two DF changes.
        assert_eq!(
            count(&|e| matches!(e, Event::Hint { tid: t, .. } if *t == tid)),
            2
        );
    }
    assert_eq!(
        count(&|e| matches!(e, Event::DfSize { bytes: 8192, .. })),
        4
    );
    let moved = rec.events.iter().any(|e| {
        matches!(e, Event::Sample { tid, cpu_ns, cpu: Some(_), .. } if tids.contains(tid) && *cpu_ns > 0)
    });
    assert!(moved, "no sample saw a worker's CPU time: {:?}", rec.events);
    let exit_cpu = rec.events.iter().find_map(|e| match e {
        Event::ThreadExit { cpu_ns, .. } => Some(*cpu_ns),
        _ => None,
    });
    assert!(exit_cpu.unwrap() >= 30_000_000, "{exit_cpu:?}");
    assert!(stats.contains("\"record\""), "{stats}");
}

#[test]
fn a_full_buffer_drops_and_counts_without_blocking_the_program() {
    let dir = TempDir::new("record-full");
    let path = dir.path().join("full.dfrec");
    // No balancer: nothing drains the buffer until shutdown.
    let rt = Runtime::start(RuntimeConfig {
        record_buffer_events: 64,
        ..recording(&path)
    })
    .unwrap();
    let rt2 = rt.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        // 1000 DF changes: each a slow-path hint and an event.
        for i in 0..1000u64 {
            rt2.enter(1 + i % 2).unwrap();
        }
        done_tx.send(()).unwrap();
    });
    // A hint that waited for the writer would never finish: nothing writes.
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("hints on a full buffer blocked");
    worker.join().unwrap();
    let stats = rt.stats();
    let r = stats.record.clone().expect("recording stats");
    assert_eq!(r.buffer_events, 64);
    // ThreadNew + 1000 hints + ThreadExit = 1002 events; 64 fit.
    assert_eq!(r.dropped, 1002 - 64);
    assert!(rt
        .stats_json()
        .contains(&format!("\"dropped\":{}", 1002 - 64)));
    rt.shutdown();
    let rec = decode(&std::fs::read(&path).unwrap()).unwrap();
    assert!(rec.complete);
    assert_eq!(rec.dropped, 1002 - 64);
    let kept = rec
        .events
        .iter()
        .filter(|e| matches!(e, Event::Hint { .. } | Event::ThreadNew { .. }))
        .count();
    assert_eq!(kept, 64);
}

#[test]
fn a_second_runtime_recording_to_the_same_name_writes_name_dot_pid() {
    let dir = TempDir::new("record-twice");
    let path = dir.path().join("twice.dfrec");
    let a = Runtime::start(recording(&path)).unwrap();
    let b = Runtime::start(recording(&path)).unwrap();
    let other = dir
        .path()
        .join(format!("twice.dfrec.{}", std::process::id()));
    assert_eq!(b.stats().record.unwrap().path, other.display().to_string());
    a.shutdown();
    b.shutdown();
    assert!(decode(&std::fs::read(&path).unwrap()).unwrap().complete);
    assert!(decode(&std::fs::read(&other).unwrap()).unwrap().complete);
}

#[test]
fn df_size_refuses_a_zero_df_or_size() {
    let rt = Runtime::start(quiet()).unwrap();
    assert!(rt.df_size(0, 10).is_err());
    assert!(rt.df_size(3, 0).is_err());
    rt.df_size(3, 10).unwrap();
    rt.shutdown();
}
