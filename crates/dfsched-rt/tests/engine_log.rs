//! The engine log (`DFSCHED_ENGINE_LOG`) of a real runtime: threads that
//! hint in an application of their own, an outside-load sample, balancer
//! passes (the balancer thread's and `balance_now`), and the log replays
//! through a fresh engine with identical decisions; a small size limit cuts
//! the log, counts what it left out and still replays up to the cut.

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::engine_log::MIN_MAX_BYTES;
use dfsched::engine_replay::replay;
use dfsched::{Runtime, RuntimeConfig};
use dfsched_core::CpuId;

fn logging(path: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig {
        engine_log: Some(path.to_path_buf()),
        agent: AgentMode::Off,
        ..quiet()
    }
}

fn replay_file(path: &std::path::Path) -> dfsched::engine_replay::Replayed {
    let f = std::fs::File::open(path).unwrap();
    match replay(std::io::BufReader::new(f)) {
        Ok(r) => r,
        Err(e) => panic!("{}: {e}\n{e:?}", path.display()),
    }
}

#[test]
fn a_runtime_run_with_apps_hints_and_passes_replays_identically() {
    let dir = TempDir::new("engine-log-run");
    let path = dir.path().join("engine.log");
    let rt = Runtime::start(RuntimeConfig {
        balance_interval_ms: 10,
        external_load: true,
        ..logging(&path)
    })
    .unwrap();
    // An application of its own: its AppNew must be in the log, or the
    // replay refuses the hints that name it.
    let app = rt.create_app().unwrap();
    let workers: Vec<_> = (0..6u64)
        .map(|i| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let mut df = 0;
                for round in 0..20u64 {
                    let next = 1 + (i + round) % 3;
                    rt.hint(app, df, next).unwrap();
                    df = next;
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                rt.leave().unwrap();
            })
        })
        .collect();
    let cpus: Vec<CpuId> = rt.topology().cpus().iter().collect();
    rt.set_external_load(&[(cpus[0], 2)]).unwrap();
    for w in workers {
        w.join().unwrap();
    }
    rt.balance_now().unwrap();
    rt.shutdown();
    let stats = rt.stats().engine_log.expect("the log's stats");
    assert_eq!(stats.write_errors, 0);
    assert!(!stats.truncated);
    assert!(
        stats.steps >= 6 * 20,
        "every thread's hints were logged: {stats:?}"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    for kind in [
        "\"event\":\"app_new\"",
        "\"event\":\"task_new\"",
        "\"event\":\"hint\"",
        "\"event\":\"balance\"",
        "\"event\":\"external_load",
        "\"event\":\"exit\"",
        "\"decision\":\"place\"",
    ] {
        assert!(text.contains(kind), "no {kind} in the log");
    }
    let r = replay_file(&path);
    assert_eq!(r.steps, stats.steps, "{r:?}");
    assert!(r.ended, "shutdown wrote the end line");
    assert!(r.decisions > 0 && r.truncated.is_none());
}

#[test]
fn a_size_limit_cuts_the_log_counts_the_rest_and_the_cut_replays() {
    let dir = TempDir::new("engine-log-cut");
    let path = dir.path().join("engine.log");
    let rt = Runtime::start(RuntimeConfig {
        engine_log_max_bytes: MIN_MAX_BYTES,
        ..logging(&path)
    })
    .unwrap();
    // 4 threads × 400 DF changes: ≈ 1,600 steps of ≈ 150 bytes, well past
    // 64 KiB.
    let workers: Vec<_> = (0..4u64)
        .map(|i| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let mut df = 0;
                for round in 0..400u64 {
                    let next = 1 + (i + round) % 5;
                    rt.hint(0, df, next).unwrap();
                    df = next;
                }
                rt.leave().unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    rt.shutdown();
    let stats = rt.stats().engine_log.expect("the log's stats");
    assert!(stats.truncated, "{stats:?}");
    assert!(stats.steps_not_logged > 0, "{stats:?}");
    assert!(
        std::fs::metadata(&path).unwrap().len() <= MIN_MAX_BYTES,
        "the file stays within its limit"
    );
    let r = replay_file(&path);
    assert_eq!(r.steps, stats.steps);
    assert_eq!(r.truncated.map(|c| c.steps), Some(stats.steps));
}
