//! `dfsched bench spin` and its worker program `dfsched-spin-worker`, run
//! from the built binaries: the worker's ready/go protocol and per-thread
//! counts; the proof that under `dfsched run --policy co-thread` at heavy
//! load the worker's threads are narrowed to one CPU by exactly one runtime
//! (the preloaded library: the worker holds no dfsched code); a tiny
//! benchmark whose JSON has every mode and the paired ratios; bad flags
//! exiting 2 and a missing worker or library failing clearly. No timing is
//! asserted. Tests that need two CPUs, `taskset` or `libdfsched.so` skip
//! with a message without them.

mod cli_support;
#[path = "run_fixtures/support.rs"]
mod support;

use cli_support::{
    assert_every_process_worked, assert_paired_ratio, assert_summaries, assert_usage_errors,
    stdout_json,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{allowed, clean, dfsched as dfsched_exe, thread_masks};

fn worker_exe() -> &'static str {
    env!("CARGO_BIN_EXE_dfsched-spin-worker")
}

/// `dfsched ARGS` with the test's own dfsched and preload variables
/// removed, and `DFSCHED_AGENT=off`: `dfsched run` would otherwise start
/// (or join) the user's agent on its default socket.
fn dfsched(args: &[&str]) -> Output {
    clean(Command::new(dfsched_exe()))
        .args(args)
        .output()
        .expect("the dfsched binary runs")
}

/// The `libdfsched.so` that `dfsched run` will preload (beside the binary
/// or in cargo's deps/), or `None` after saying why the test skips.
fn library(test: &str) -> Option<PathBuf> {
    let dir = Path::new(dfsched_exe()).parent().unwrap();
    let found = [dir.join("libdfsched.so"), dir.join("deps/libdfsched.so")]
        .into_iter()
        .find(|p| p.is_file());
    if found.is_none() {
        support::skip_or_fail(&format!(
            "SKIP {test}: no libdfsched.so beside {}",
            dfsched_exe()
        ));
    }
    found
}

/// A worker process, stdin and stdout piped; killed and reaped if dropped
/// before it finished.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Worker {
    fn start(mut cmd: Command) -> Worker {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the worker starts");
        Worker {
            stdin: child.stdin.take(),
            out: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    fn line(&mut self) -> Option<String> {
        let mut line = String::new();
        (self.out.read_line(&mut line).unwrap() > 0).then(|| line.trim().to_string())
    }

    fn ready_and_go(&mut self) {
        assert_eq!(self.line().as_deref(), Some("ready"));
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (stops an --until-eof worker) and returns its result.
    fn result(&mut self) -> Value {
        drop(self.stdin.take());
        let line = self.line().expect("a result line");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "worker exited with {status}");
        serde_json::from_str(&line).expect("the result is JSON")
    }

    /// `Cpus_allowed_list` of every thread whose name starts with `prefix`.
    fn masks(&self, prefix: &str) -> Vec<(String, BTreeSet<u32>)> {
        thread_masks(self.child.id(), prefix)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn ops_of(v: &Value) -> Vec<u64> {
    v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn the_worker_waits_for_go_and_every_thread_counts_work() {
    let mut cmd = clean(Command::new(worker_exe()));
    cmd.args(["--threads", "3", "--seconds", "0.2"]);
    let mut w = Worker::start(cmd);
    w.ready_and_go();
    let r = w.result();
    let ops = ops_of(&r);
    assert_eq!(ops.len(), 3);
    assert!(ops.iter().all(|&n| n > 0), "a thread did nothing: {r}");
    assert!(r["elapsed_s"].as_f64().unwrap() >= 0.2);
    assert_eq!(r["cpus"].as_array().unwrap().len(), 3);
    assert_eq!(r["under_dfsched"], false);
    assert_eq!(r["foreign_threads"], serde_json::json!([]));
}

#[test]
fn a_worker_not_told_go_does_no_work_and_fails() {
    let mut cmd = clean(Command::new(worker_exe()));
    cmd.args(["--threads", "2", "--seconds", "30"]);
    let mut w = Worker::start(cmd);
    assert_eq!(w.line().as_deref(), Some("ready"));
    drop(w.stdin.take());
    assert_eq!(w.line(), None, "no result without go");
    assert_eq!(w.child.wait().unwrap().code(), Some(1));

    let out = clean(Command::new(worker_exe()))
        .args(["--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads 0"));
}

/// Whether `file` contains `needle`.
fn file_contains(file: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(file).unwrap();
    String::from_utf8_lossy(&bytes).contains(needle)
}

#[test]
fn the_worker_program_holds_no_dfsched_runtime() {
    let test = "the_worker_program_holds_no_dfsched_runtime";
    let Some(lib) = library(test) else { return };
    // The balancer thread's name (a string literal) and the C ABI's symbol
    // names: every copy of the runtime holds them, the worker must not.
    let worker = Path::new(worker_exe());
    for marker in ["dfsched-balance", "dfsched_attach"] {
        assert!(file_contains(&lib, marker), "{marker} in {}", lib.display());
        assert!(
            !file_contains(worker, marker),
            "{marker}: the worker links a copy of the runtime; under dfsched run it could have two"
        );
    }
}

#[test]
fn under_co_thread_at_heavy_load_one_preloaded_runtime_packs_the_workers_threads() {
    let test = "under_co_thread_at_heavy_load_one_preloaded_runtime_packs_the_workers_threads";
    let cpus = allowed();
    if cpus.len() < 2 {
        support::skip_or_fail(&format!(
            "SKIP {test}: fewer than 2 CPUs allowed ({cpus:?})"
        ));
        return;
    }
    let Some(lib) = library(test) else { return };
    if clean(Command::new("taskset")).arg("-V").output().is_err() {
        support::skip_or_fail(&format!("SKIP {test}: no taskset on this machine"));
        return;
    }
    let mut it = cpus.iter();
    let (first, second) = (*it.next().unwrap(), *it.next().unwrap());

    // Outside load, not under dfsched, on the second CPU: the machine is
    // heavily loaded and the worker's group fits its share on the first.
    let mut hogs = clean(Command::new("taskset"));
    hogs.args(["-c", &second.to_string(), worker_exe()])
        .args(["--threads", "6", "--until-eof"]);
    let mut hogs = Worker::start(hogs);
    hogs.ready_and_go();

    let threads = 3 * cpus.len();
    let mut cmd = clean(Command::new("taskset"));
    cmd.args(["-c", &format!("{first},{second}"), dfsched_exe(), "run"])
        .args(["--policy", "co-thread", "--lib"])
        .arg(&lib)
        .args(["--", worker_exe(), "--threads", &threads.to_string()])
        .arg("--until-eof");
    let mut w = Worker::start(cmd);
    w.ready_and_go();

    // A correctness wait (the balancer acts every 100 ms), not a timing
    // assertion: poll until every spin thread is on the first CPU alone.
    let want = BTreeSet::from([first]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let masks = loop {
        let masks = w.masks("spin-");
        if masks.iter().all(|(_, m)| *m == want) || Instant::now() > deadline {
            break masks;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(masks.len(), threads);
    for (name, mask) in &masks {
        assert_eq!(*mask, want, "{name} is not in the group's home: {masks:?}");
    }
    // Exactly one runtime: one balancer thread, one copy of the library.
    assert_eq!(w.masks("dfsched-balance").len(), 1, "one balancer");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", w.child.id())).unwrap();
    let copies: BTreeSet<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("libdfsched"))
        .collect();
    assert_eq!(copies.len(), 1, "one libdfsched mapped: {copies:?}");

    let r = w.result();
    assert_eq!(r["under_dfsched"], true);
    assert_eq!(r["foreign_threads"], serde_json::json!(["dfsched-balance"]));
    assert!(ops_of(&r).iter().all(|&n| n > 0), "{r}");
    let home = first.to_string();
    assert!(
        r["cpus"].as_array().unwrap().iter().all(|c| *c == *home),
        "each thread saw its own mask at the stop: {r}"
    );
    assert!(ops_of(&hogs.result()).iter().all(|&n| n > 0));
}

#[test]
fn a_tiny_benchmark_reports_every_mode_with_paired_ratios() {
    let test = "a_tiny_benchmark_reports_every_mode_with_paired_ratios";
    if library(test).is_none() {
        return;
    }
    let out = dfsched(&[
        "bench",
        "spin",
        "--processes",
        "2",
        "--threads",
        "1",
        "--background-threads",
        "1",
        "--seconds",
        "0.2",
        "--repeat",
        "2",
        "--json",
        "--quiet",
    ]);
    let v = stdout_json(&out);
    assert_eq!(v["params"]["processes"], 2);
    assert_eq!(v["params"]["background_threads"], 1);
    assert!(v["machine"]["nr_cpus_allowed"].is_number());
    let bg = v["background_ops"].as_array().expect("background ops");
    assert_eq!(bg.len(), 1);
    for mode in ["vanilla", "co-thread", "data-affinity"] {
        let m = &v["modes"][mode];
        assert_summaries(m, mode, &["ops", "ops_per_s"]);
        assert_every_process_worked(m, mode, 2, 2);
        for r in m["runs"].as_array().unwrap() {
            // One runtime per worker under dfsched, none in vanilla.
            let balancers = if mode == "vanilla" { 0 } else { 2 };
            assert_eq!(r["balancer_threads"], balancers, "{mode}");
            assert!(r["load_avg_1m"].as_f64().is_some_and(|l| l >= 0.0));
        }
        assert_paired_ratio(m, mode, 2);
        if mode != "vanilla" {
            let rounds = m["paired_ratio"]["per_round"].as_array().unwrap();
            assert_eq!(rounds.len(), 2, "{mode}");
        }
    }
}

#[test]
fn bad_flags_exit_2_and_run_nothing() {
    assert_usage_errors(
        dfsched,
        &["bench", "spin"],
        &[
            (&["--processes", "0"], "--processes"),
            (&["--threads", "0"], "--threads"),
            (&["--seconds=-1"], "--seconds"),
            (&["--repeat", "0"], "--repeat"),
            (&["--modes", "dfsched"], "dfsched"),
            (&["--modes", "co-thread,co-thread"], "twice"),
            (&["--grid", "paper", "--processes", "2"], "--processes"),
            (&["--grid", "huge"], "huge"),
        ],
    );
}

#[test]
fn a_missing_worker_or_library_fails_clearly_with_no_result() {
    let out = dfsched(&["bench", "spin", "--worker", "/nonexistent/spin-worker"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/spin-worker") && err.contains("cargo build --release"),
        "{err}"
    );

    // dfsched run cannot find the library: the co-thread worker never
    // starts, and the benchmark says so instead of measuring vanilla twice.
    let out = clean(Command::new(dfsched_exe()))
        .env("DFSCHED_LIB", "/nonexistent/libdfsched.so")
        .args(["bench", "spin", "--seconds", "0.1", "--repeat", "1", "-q"])
        .args(["--modes", "vanilla,co-thread"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("co-thread") && err.contains("dfsched run failed before starting"),
        "{err}"
    );
}
