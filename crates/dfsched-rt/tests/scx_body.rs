//! The scx body from the runtime's side: with `DFSCHED_SCX` naming a socket, the engine's placements
//! go to it (the thread gets `SCHED_EXT`, its group the home, the thread the group) and no affinity
//! mask is narrowed; a scheduler that refuses a request ends the body and the runtime places by
//! affinity again. The scheduler here is a fake serving the socket from this process (so it is root's
//! only when the test runs as root, which the body requires); the policy and affinity calls go to a
//! recording `SysOps` on a sysfs fixture of two LLCs (this machine has one).

mod common;

use common::{is_root, TempDir};
use dfsched::scx::ScxMode;
use dfsched::sys::SysOps;
use dfsched::sysfs::write_test_tree;
use dfsched::{CpuSet, Error, Runtime};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Mutex};

/// Records the affinity and policy calls; masks read back are the fixture's CPUs.
#[derive(Default)]
struct Recording {
    sets: Mutex<Vec<(u64, CpuSet)>>,
    ext: Mutex<Vec<u64>>,
}

impl SysOps for Recording {
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        let sets = self.sets.lock().unwrap();
        Ok(sets
            .iter()
            .rev()
            .find(|(t, _)| *t == tid)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| "0-3".parse().unwrap()))
    }
    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        self.sets.lock().unwrap().push((tid, cpus.clone()));
        Ok(())
    }
    fn set_sched_ext(&self, tid: u64) -> Result<(), Error> {
        self.ext.lock().unwrap().push(tid);
        Ok(())
    }
}

/// A fake scheduler socket: answers each line with `answer`, keeps the lines.
fn fake_scheduler(
    dir: &TempDir,
    answer: &'static str,
) -> (std::path::PathBuf, Arc<Mutex<Vec<String>>>) {
    let path = dir.path().join("scx.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut w = stream.try_clone().unwrap();
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            seen.lock().unwrap().push(line);
            if w.write_all(format!("{answer}\n").as_bytes()).is_err() {
                return;
            }
        }
    });
    (path, lines)
}

/// The group of the first `place` line.
fn lines_group(lines: &[String]) -> serde_json::Value {
    let first = lines
        .iter()
        .find(|l| l.contains(r#""op":"place""#))
        .expect("a place line");
    serde_json::from_str::<serde_json::Value>(first).unwrap()["group"].clone()
}

fn start(dir: &TempDir, socket: std::path::PathBuf, sys: Arc<Recording>) -> Runtime {
    // 1 node, 2 LLCs of 2 cores: CPUs 0-1 and 2-3.
    write_test_tree(dir.path(), 1, 2, 2, 1).unwrap();
    let mut cfg = common::quiet();
    cfg.agent = dfsched::agent::AgentMode::Off;
    cfg.sysfs_root = dir.path().to_path_buf();
    cfg.scx = ScxMode::Socket(socket);
    Runtime::start_with_sys(cfg, sys).unwrap()
}

#[test]
fn placements_go_to_the_scheduler_and_no_mask_is_narrowed() {
    if !is_root() {
        return common::skip(
            "placements_go_to_the_scheduler_and_no_mask_is_narrowed",
            "the body talks only to a root-run scheduler, and this test's is ours",
        );
    }
    let dir = TempDir::new("scx-body");
    let (socket, lines) = fake_scheduler(&dir, r#"{"ok":true}"#);
    let sys = Arc::new(Recording::default());
    let rt = start(&dir, socket, sys.clone());
    assert!(rt.stats().scx_body, "the body is on");
    let json: serde_json::Value = serde_json::from_str(&rt.stats_json()).unwrap();
    assert_eq!(json["body"], "scx", "the stats JSON names the body");
    // Two threads of DF 1, alive together (so one group of two), checked while they wait.
    let entered = Arc::new(std::sync::Barrier::new(3));
    let done = Arc::new(std::sync::Barrier::new(3));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (rt, entered, done) = (rt.clone(), entered.clone(), done.clone());
            std::thread::spawn(move || {
                rt.enter(1).unwrap();
                let tid = dfsched::sys::gettid();
                entered.wait();
                done.wait();
                tid
            })
        })
        .collect();
    entered.wait();
    let lines = lines.lock().unwrap().clone();
    let sets = sys.sets.lock().unwrap().clone();
    let ext = sys.ext.lock().unwrap().clone();
    done.wait();
    let tids: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(sets.is_empty(), "no affinity call: {sets:?}");
    let mut ext_sorted = ext.clone();
    ext_sorted.sort_unstable();
    let mut tids_sorted = tids.clone();
    tids_sorted.sort_unstable();
    assert_eq!(ext_sorted, tids_sorted, "each thread got SCHED_EXT once");
    let homes: Vec<CpuSet> = lines
        .iter()
        .filter(|l| l.contains(r#""op":"group""#))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["group"], lines_group(&lines), "one group: {lines:?}");
            v["home"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    let last = homes.last().expect("a home was written");
    assert!(
        *last == "0-1".parse().unwrap() || *last == "2-3".parse().unwrap(),
        "the group of two ends with one LLC as its home: {lines:?}"
    );
    for tid in &tids {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(r#""op":"place""#) && l.contains(&format!(r#""tid":{tid}"#))),
            "tid {tid} placed: {lines:?}"
        );
    }
    let st = rt.stats();
    assert_eq!(st.affinity_calls, 0);
    assert!(st.scx_placements >= 3, "{st:?}");
    assert_eq!(st.scx_failures, 0);
    rt.shutdown();
}

#[test]
fn a_refusing_scheduler_ends_the_body_and_placement_falls_back_to_affinity() {
    if !is_root() {
        return common::skip(
            "a_refusing_scheduler_ends_the_body_and_placement_falls_back_to_affinity",
            "the body talks only to a root-run scheduler, and this test's is ours",
        );
    }
    let dir = TempDir::new("scx-refuse");
    let (socket, _) = fake_scheduler(&dir, r#"{"ok":false,"error":"no"}"#);
    let sys = Arc::new(Recording::default());
    let rt = start(&dir, socket, sys.clone());
    let rt2 = rt.clone();
    let tid = std::thread::spawn(move || {
        rt2.enter(1).unwrap();
        dfsched::sys::gettid()
    })
    .join()
    .unwrap();
    let st = rt.stats();
    assert!(!st.scx_body, "the body ended");
    assert_eq!(st.scx_failures, 1);
    let json: serde_json::Value = serde_json::from_str(&rt.stats_json()).unwrap();
    assert_eq!(json["body"], "affinity", "back to affinity, by name");
    let sets = sys.sets.lock().unwrap().clone();
    // The hinting thread moves itself (tid 0: the calling thread).
    assert!(
        sets.iter().any(|(t, c)| *t == 0 && !c.is_empty()),
        "tid {tid} placed by affinity instead: {sets:?}"
    );
    rt.shutdown();
}

#[test]
fn an_unreachable_scheduler_is_counted_and_the_runtime_places_by_affinity() {
    let dir = TempDir::new("scx-none");
    let sys = Arc::new(Recording::default());
    let rt = start(&dir, dir.path().join("nobody-listens.sock"), sys.clone());
    let st = rt.stats();
    assert!(!st.scx_body);
    assert_eq!(st.scx_failures, 1);
    let rt2 = rt.clone();
    std::thread::spawn(move || rt2.enter(1).unwrap())
        .join()
        .unwrap();
    assert!(!sys.sets.lock().unwrap().is_empty(), "placed by affinity");
    rt.shutdown();
}

/// `dfsched scx --policy co-thread`: a runtime whose policy was not chosen takes the scheduler's
/// offer (its first request is `state`); one whose policy was chosen (`DFSCHED_POLICY`, which
/// `dfsched run` always sets) keeps its own.
#[test]
fn the_schedulers_offered_policy_is_taken_only_when_none_was_chosen() {
    if !is_root() {
        return common::skip(
            "the_schedulers_offered_policy_is_taken_only_when_none_was_chosen",
            "the body talks only to a root-run scheduler, and this test's is ours",
        );
    }
    let offer = r#"{"ok":true,"state":{"state":"enabled","ops":"dfsched","policy":"co-thread"}}"#;
    let dir = TempDir::new("scx-policy");
    let (socket, lines) = fake_scheduler(&dir, offer);
    let rt = start(&dir, socket, Arc::new(Recording::default()));
    assert_eq!(rt.config().policy, dfsched::Policy::CoThread, "offer taken");
    let st = rt.stats();
    assert!(
        st.scx_body && st.scx_policy && st.scx_failures == 0,
        "{st:?}"
    );
    assert_eq!(
        lines.lock().unwrap().first().map(String::as_str),
        Some(r#"{"op":"state"}"#)
    );
    rt.shutdown();

    let dir = TempDir::new("scx-policy-chosen");
    let (socket, lines) = fake_scheduler(&dir, offer);
    write_test_tree(dir.path(), 1, 2, 2, 1).unwrap();
    let mut cfg = common::quiet();
    cfg.apply_vars([("DFSCHED_POLICY", "data-affinity")])
        .unwrap();
    cfg.agent = dfsched::agent::AgentMode::Off;
    cfg.sysfs_root = dir.path().to_path_buf();
    cfg.scx = ScxMode::Socket(socket);
    let rt = Runtime::start_with_sys(cfg, Arc::new(Recording::default())).unwrap();
    assert_eq!(
        rt.config().policy,
        dfsched::Policy::DataAffinity,
        "its own kept"
    );
    let st = rt.stats();
    assert!(st.scx_body && !st.scx_policy, "{st:?}");
    assert!(
        lines.lock().unwrap().is_empty(),
        "no state asked: {lines:?}"
    );
    rt.shutdown();
}
