//! `dfsched run --policy smt-pair`: the preloaded runtime's `smt-pair`
//! policy on a real kernel. This machine has no SMT siblings, so the
//! placement test reads the topology from a sysfs fixture that makes this
//! machine's CPUs 0 and 1 the two siblings of one core
//! (`DFSCHED_SYSFS_ROOT`): the runtime then pins the program's real threads
//! with real `sched_setaffinity` calls, read back from
//! `/proc/PID/task/TID/status`. On the machine's own topology (no SMT
//! siblings) and with a garbled profile the program runs without dfsched,
//! with the reason on stderr; without a profile nothing runs.
//!
//! The masks are polled until they settle (a correctness wait, bounded,
//! never a timing assertion): the first pass comes within the balance
//! interval, the re-pairing once a spinning thread has used two seconds of
//! CPU time.

#[path = "run_fixtures/support.rs"]
mod support;

use dfsched_core::activity::ActivityVector;
use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{allowed, c_program, run_cmd, scratch, skip_or_fail, Running};

const LO: u64 = 0x0000_ffff;
const HI: u64 = 0xffff_0000;

/// CPU time of one profile interval: long against the first pass (50 ms),
/// short against the wait bound.
const INTERVAL_NS: u64 = 2_000_000_000;

/// A profile of `threads spin 3` (the main thread, then three spinners),
/// one vector list per thread in creation order.
fn write_profile(dir: &Path, name: &str, threads: &[&[u64]]) -> PathBuf {
    let p = SmtProfile {
        command: vec!["threads".into(), "spin".into(), "3".into()],
        interval_instructions: INTERVAL_NS,
        ns_per_instruction: 1.0,
        bits: 1,
        super_sets: 32,
        threads: threads
            .iter()
            .map(|vs| ThreadProfile {
                instructions: INTERVAL_NS * vs.len() as u64,
                vectors: vs
                    .iter()
                    .map(|&m| ActivityVector::from_mask(m, 32))
                    .collect(),
            })
            .collect(),
    };
    let f = dir.join(name);
    std::fs::write(&f, serde_json::to_string(&p).unwrap()).unwrap();
    f
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = scratch().join(format!("smt-{tag}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Polls the program's masks, in creation order (by tid), until `want`
/// holds them; panics with the last ones after `bound`.
fn wait_for(r: &Running, tids: &[u32], want: &[BTreeSet<u32>], what: &str, bound: Duration) {
    let start = Instant::now();
    loop {
        let masks: Vec<BTreeSet<u32>> = tids
            .iter()
            .map(|&t| support::cpus_allowed(r.pid, t))
            .collect();
        if masks == want {
            return;
        }
        assert!(
            start.elapsed() < bound,
            "{what}: masks {masks:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_preloaded_policy_pins_complementary_threads_on_the_siblings_and_re_pairs_them() {
    let test = "the_preloaded_policy_pins_complementary_threads_on_the_siblings_and_re_pairs_them";
    let Some(program) = c_program() else { return };
    let cpus = allowed();
    if !(cpus.contains(&0) && cpus.contains(&1)) {
        skip_or_fail(&format!(
            "SKIP {test}: needs CPUs 0 and 1, allowed {cpus:?}"
        ));
        return;
    }
    let dir = fresh_dir("siblings");
    // One core whose SMT siblings are CPUs 0 and 1.
    dfsched::sysfs::write_test_tree(&dir.join("sysfs"), 1, 1, 1, 2).unwrap();
    // main low; spinner 0 low, then high after 2 s of CPU time; spinner 1
    // high; spinner 2 high, then low.
    let profile = write_profile(&dir, "p.json", &[&[LO], &[LO, HI], &[HI, HI], &[HI, LO]]);
    let mut cmd = run_cmd(
        &[
            "--policy",
            "smt-pair",
            "--smt-profile",
            profile.to_str().unwrap(),
            "--balance-interval-ms",
            "50",
        ],
        &program,
        &["spin", "3"],
    );
    cmd.env("DFSCHED_SYSFS_ROOT", dir.join("sysfs"));
    let r = Running::start(cmd);
    let mut tids = r.tids.clone();
    tids.sort_unstable();
    assert_eq!(tids.len(), 4, "premise: the main thread and 3 spinners");
    assert_eq!(tids[0], r.pid, "premise: the main thread is the first");
    let on = |c: u32| BTreeSet::from([c]);
    // First passes, every thread in its first interval (main L, 0 L, 1 H,
    // 2 H): pairs (main, 1) and (0, 2), each pair's first on the sibling
    // CPU 0 and its second on CPU 1 (`smt_place::place`).
    wait_for(
        &r,
        &tids,
        &[on(0), on(0), on(1), on(1)],
        "the first pairing",
        Duration::from_secs(30),
    );
    // Spinner 0 has used 2 s of CPU: high now, so it leaves the low main
    // thread's sibling CPU for the other and spinner 1 takes its place
    // (pairs (main, 0) and (1, 2)); spinner 2 turning low later keeps it.
    wait_for(
        &r,
        &tids,
        &[on(0), on(1), on(0), on(1)],
        "the re-pairing as CPU time moved",
        Duration::from_secs(120),
    );
    assert!(r.finish().success());
}

/// Runs `threads stats 2` under `dfsched run ARGS` with `sysfs` as the
/// topology's root (or the machine's): every thread must run with its full
/// mask, the program without counters (no runtime), and stderr must say
/// why. Returns stderr.
fn runs_unplaced(args: &[&str], sysfs: Option<&Path>) -> Option<String> {
    let program = c_program()?;
    let cpus = allowed();
    let mut cmd = run_cmd(args, &program, &["stats", "2"]);
    if let Some(root) = sysfs {
        cmd.env("DFSCHED_SYSFS_ROOT", root);
    }
    cmd.stderr(Stdio::piped());
    let mut r = Running::start(cmd);
    assert_eq!(r.tids.len(), 3, "every thread ran");
    for (tid, mask) in r.masks() {
        assert_eq!(mask, cpus, "thread {tid} was placed");
    }
    assert_eq!(r.line_starting("stats"), "NULL", "no runtime started");
    drop(r.stdin.take());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut r.child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(r.child.wait().unwrap().success());
    Some(stderr)
}

#[test]
fn without_smt_siblings_the_program_runs_unplaced_and_says_why() {
    let dir = fresh_dir("nosmt");
    let profile = write_profile(&dir, "p.json", &[&[LO], &[HI], &[LO]]);
    // This machine's own topology when it has no SMT siblings (the 2-CPU
    // development VM); else a fixture of two cores without SMT.
    let machine = dfsched::sysfs::read_topology(Path::new("/")).unwrap();
    let root = if dfsched::smt_pair::sibling_cores(&machine).is_empty() {
        None
    } else {
        dfsched::sysfs::write_test_tree(&dir.join("sysfs"), 1, 1, 2, 1).unwrap();
        Some(dir.join("sysfs"))
    };
    let args = [
        "--policy",
        "smt-pair",
        "--smt-profile",
        profile.to_str().unwrap(),
    ];
    let Some(stderr) = runs_unplaced(&args, root.as_deref()) else {
        return;
    };
    assert!(
        stderr.contains("dfsched: not started") && stderr.contains("needs SMT siblings"),
        "{stderr}"
    );
}

#[test]
fn a_garbled_profile_runs_the_program_unplaced_and_names_the_file() {
    let dir = fresh_dir("garbled");
    dfsched::sysfs::write_test_tree(&dir.join("sysfs"), 1, 1, 1, 2).unwrap();
    let garbled = dir.join("garbled.json");
    std::fs::write(&garbled, "{\"threads\": 3}").unwrap();
    let args = [
        "--policy",
        "smt-pair",
        "--smt-profile",
        garbled.to_str().unwrap(),
    ];
    let Some(stderr) = runs_unplaced(&args, Some(&dir.join("sysfs"))) else {
        return;
    };
    assert!(
        stderr.contains("garbled.json") && stderr.contains("not an SMT profile"),
        "{stderr}"
    );
}

#[test]
fn smt_pair_without_a_profile_runs_nothing() {
    let marker = scratch().join("ran-smt-no-profile");
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let o = run_cmd(&["--policy", "smt-pair"], Path::new("sh"), &["-c", &touch])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("DFSCHED_SMT_PROFILE"), "{err}");
    assert!(!marker.exists(), "the program ran without its profile");
}
