//! Runs `dfsched bench cothreads` from the built binary: a tiny run in all
//! four modes starts its worker processes (re-executing the binary), every
//! process and thread reports work, the JSON has the documented keys
//! (paired ratios, the agent), the private agent is gone afterwards, the
//! pinned modes put each thread where they say (read back from
//! `/proc/PID/task/*/status` while the workers wait for "go"), and bad flags
//! exit 2 having run nothing. No timing is asserted.

mod cli_support;
#[path = "run_fixtures/support.rs"]
mod support;

use cli_support::{
    assert_every_process_worked, assert_paired_ratio, assert_summaries, assert_usage_errors,
    dfsched, stdout_json, BIN,
};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn tiny(extra: &[&str]) -> Value {
    let out = dfsched(
        &[
            &[
                "bench",
                "cothreads",
                "--processes",
                "3",
                "--threads",
                "2",
                "--shared-bytes",
                "4096",
                "--seconds",
                "0.3",
                "--repeat",
                "2",
                "--json",
                "--quiet",
            ][..],
            extra,
        ]
        .concat(),
    );
    stdout_json(&out)
}

/// Whether any process's command line names `needle` (a zombie has none).
fn any_process_names(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
}

#[test]
fn tiny_run_has_every_process_working_in_all_four_modes_and_paired_ratios() {
    let v = tiny(&[]);
    assert_eq!(v["params"]["processes"], 3);
    for mode in ["vanilla", "co-thread", "oracle", "split"] {
        let m = &v["modes"][mode];
        assert_summaries(m, mode, &["ops", "ops_per_s"]);
        assert_every_process_worked(m, mode, 2, 3);
        assert_paired_ratio(m, mode, 2);
    }
    for key in [
        "co_thread_vs_vanilla",
        "oracle_vs_vanilla",
        "split_vs_vanilla",
        "co_thread_vs_oracle",
    ] {
        assert!(v["ratios"][key].is_number(), "{key}");
    }
}

#[test]
fn agent_on_serves_co_thread_workers_and_leaves_nothing_behind() {
    let v = tiny(&["--modes", "vanilla,co-thread"]);
    let a = &v["agent"];
    assert_eq!(a["setting"], "on", "{a}");
    assert_eq!(a["running"], true, "{a}");
    let socket = a["socket"].as_str().expect("the socket is reported");
    let dir = Path::new(socket).parent().unwrap();
    assert!(!dir.exists(), "{} was left behind", dir.display());
    assert!(!any_process_names(socket), "a process still names {socket}");
    // The co-thread workers reached it; the vanilla ones start no runtime.
    let reports: u64 = v["modes"]["co-thread"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent_reports"].as_u64().expect("co-thread runs count"))
        .sum();
    assert!(reports > 0, "no co-thread worker reported to the agent");
    for r in v["modes"]["vanilla"]["runs"].as_array().unwrap() {
        assert!(r["agent_reports"].is_null());
    }
}

#[test]
fn a_failed_run_stops_its_agent_and_removes_its_dir() {
    // The agent starts before the workers' DFSCHED_* is checked, so this
    // run fails with an agent running: the guard must clean up.
    let child = Command::new(BIN)
        .args([
            "bench",
            "cothreads",
            "--modes",
            "co-thread",
            "--repeat",
            "1",
        ])
        .env("DFSCHED_POLICY", "bogus")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The bench's pid names its agent's directory.
    let prefix = format!("dfsched-cothreads-{}-", child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("DFSCHED_POLICY").count(), 1, "{err}");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        !any_process_names(&prefix),
        "a process still names {prefix}"
    );
}

#[test]
fn agent_off_runs_co_thread_workers_without_one() {
    let v = tiny(&["--modes", "co-thread", "--agent", "off"]);
    assert_eq!(v["agent"]["setting"], "off");
    assert_eq!(v["agent"]["running"], false);
    assert!(v["agent"]["socket"].is_null());
    for r in v["modes"]["co-thread"]["runs"].as_array().unwrap() {
        assert_eq!(r["agent_reports"], 0, "DFSCHED_AGENT=off was not passed");
    }
}

/// Starts a worker of `mode` as process `process` and waits for "ready".
fn ready_worker(
    mode: &str,
    process: usize,
    threads: usize,
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(BIN)
        .args(["bench", "cothreads-worker", "--mode", mode, "--process"])
        .arg(process.to_string())
        .arg("--threads")
        .arg(threads.to_string())
        .args(["--shared-bytes", "4096", "--seconds", "0.05"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "{mode} worker {process}");
    (child, out)
}

/// Each thread's name and allowed CPUs, read from /proc.
fn thread_cpus(pid: u32) -> Vec<(String, Vec<u32>)> {
    support::thread_masks(pid, "")
        .into_iter()
        .map(|(name, cpus)| (name, cpus.into_iter().collect()))
        .collect()
}

/// Tells a ready worker to go and checks it succeeds.
fn finish(mut child: Child, mut out: BufReader<std::process::ChildStdout>) {
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert!(r["ops"].is_array());
    assert!(child.wait().unwrap().success());
}

#[test]
fn oracle_pins_each_process_to_one_cpu_dealt_i_mod_n_and_split_pins_thread_t_of_process_i_to_i_plus_t_mod_n(
) {
    // The calling thread's allowed CPUs (what a child inherits).
    let cpus: Vec<u32> = support::allowed().into_iter().collect();
    let n = cpus.len();
    if n < 2 {
        support::skip_or_fail(&format!(
            "SKIP oracle_pins_each_process…: only {n} CPU allowed, oracle and split place nothing apart"
        ));
        return;
    }
    let threads = n + 1;
    for process in 0..=n {
        let (child, out) = ready_worker("oracle", process, threads);
        let seen = thread_cpus(child.id());
        assert_eq!(seen.len(), threads + 1, "{seen:?}");
        let want = vec![cpus[process % n]];
        for (name, on) in &seen {
            assert_eq!(on, &want, "oracle process {process}: thread {name}");
        }
        finish(child, out);
    }
    let (child, out) = ready_worker("split", 1, threads);
    let seen = thread_cpus(child.id());
    let mut workers = 0;
    for (name, on) in &seen {
        if let Some(t) = name.strip_prefix("cothreads-") {
            let t: usize = t.parse().unwrap();
            assert_eq!(
                on,
                &vec![cpus[(1 + t) % n]],
                "split thread {t} of process 1"
            );
            workers += 1;
        }
    }
    assert_eq!(workers, threads, "{seen:?}");
    finish(child, out);
}

#[test]
fn bad_flags_exit_2_and_run_nothing() {
    assert_usage_errors(
        dfsched,
        &["bench", "cothreads"],
        &[
            (&["--processes", "0"], "--processes"),
            (&["--shared-bytes", "65"], "--shared-bytes"),
            (&["--seconds=-1"], "--seconds"),
            (&["--modes", "dfsched"], "dfsched"),
            (&["--modes", "oracle,split,oracle"], "twice"),
            (&["--agent", "maybe"], "on or off"),
            (&["--grid", "paper", "--processes", "2"], "--processes"),
        ],
    );
}

#[test]
fn a_worker_not_told_to_go_fails_without_working() {
    let out = Command::new(BIN)
        .args([
            "bench",
            "cothreads-worker",
            "--mode",
            "vanilla",
            "--process",
            "0",
            "--threads",
            "2",
            "--shared-bytes",
            "128",
            "--seconds",
            "0.1",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not told to go"));
}

/// Whether `pid` is gone altogether: not running and not a zombie waiting
/// to be reaped (a zombie keeps its `/proc/PID`).
fn reaped(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_stopped_private_agent_is_reaped_leaving_no_zombie_child() {
    use dfsched_bench::cothreads::PrivateAgent;
    let exe = Path::new(BIN);
    // Stopped the normal way, as at the end of the benchmark.
    let agent = PrivateAgent::start(exe, 60).expect("a private agent starts");
    let pid = agent.pid();
    let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
    assert_eq!(ppid, Some(std::process::id()), "the agent is our child");
    agent.stop().expect("the agent stops");
    assert!(
        reaped(pid),
        "agent {pid} is still there (a <defunct> child?)"
    );
    // Dropped on an error path.
    let agent = PrivateAgent::start(exe, 60).expect("a private agent starts");
    let pid = agent.pid();
    drop(agent);
    assert!(
        reaped(pid),
        "agent {pid} is still there after the drop guard"
    );
}
