//! `dfsched compare`: the user's own command, plain and under each dfsched
//! policy, in interleaved, paired rounds (as `hyperfine` does for two
//! commands, with dfsched's paired ratios).
//!
//! ```text
//!  round r (of --repeat N): every mode once, in the order every benchmark
//!                  uses (runner::round_order: shuffled from (seed, r)),
//!                  through the shared round driver (runner::Rounds)
//!     plain:  CMD ARGS
//!     P:      dfsched run --policy P -- CMD ARGS
//!  one run:   spawn (stdin, stdout, stderr: /dev/null unless shown)
//!             sampler thread: every sample_ms, /proc/PID/task/*/sched of the
//!                             command and its descendants (…/children), the
//!                             latest counters per thread kept
//!             waitid(WEXITED | WNOWAIT): the wall time ends here
//!             a last sample of the (zombie) process, then wait4: its rusage
//!  report:    per mode: wall time median, min–max; the per-round ratio to
//!             plain's run of the same round, its median, and a sign-test
//!             interval for that median (stats::MedianInterval); context
//!             switches and migrations per run
//! ```
//!
//! What is counted, and how exactly:
//! - **wall time**: from just before the spawn to the command's exit as
//!   `waitid` sees it (before the reaping), in seconds. Under a policy it
//!   includes `dfsched run`'s own start (finding the library, the agent
//!   check), which is part of what a user pays.
//! - **context switches**: `wait4`'s `ru_nvcsw + ru_nivcsw` of the command:
//!   its own and those of every descendant it waited for, counted by the
//!   kernel at their exits. Exact; a descendant left running or not waited
//!   for is not in it.
//! - **migrations**: `se.nr_migrations` summed over every thread of the
//!   command and its descendants seen in a sample, each at its latest
//!   sample. The kernel keeps no total for ended threads, so this is a
//!   **lower bound**: a thread's migrations after its last sample, and a
//!   thread that lived less than `sample_ms` between samples, are missed.
//!   Sampling costs CPU beside the command (a few µs per thread per
//!   sample); `sample_ms = 0` turns it off and reports no migrations.
//! - **threads seen**: distinct threads found in the samples, for the
//!   per-thread mean of migrations.
//!
//! A run past `timeout` gets SIGKILL, with every descendant found under it
//! in `/proc`, and is reported as timed out (status 128 + 9) and left out.
//!
//! Invariants: every run of a round happens before any run of the next
//! (paired rounds); a mode's ratio exists only for rounds where both it and
//! plain exited 0 and plain took a positive time (see
//! [`crate::stats::PairedRatio`]); a run that exits non-zero is reported
//! with its status and left out of every figure.

use crate::machine::Machine;
use crate::params::BenchMode;
use crate::runner::{Progress, Rounds};
use crate::stats::{MedianInterval, PairedRatio, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The baseline mode's name: the command without dfsched.
pub const PLAIN: &str = "plain";
/// The policies `dfsched run` takes, in the default order.
pub const POLICIES: [&str; 3] = ["none", "co-thread", "data-affinity"];
/// The confidence asked of the ratio's interval (reached from 6 rounds on;
/// below, the interval is [min, max] with its own coverage, reported).
pub const CONFIDENCE: f64 = 0.95;
/// The most rounds accepted.
pub const MAX_REPEAT: usize = 10_000;

/// A mode of the comparison: the command plain, or under a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CompareMode {
    /// The command alone.
    Plain,
    /// `dfsched run --policy none`: the library preloaded, dfsched off.
    None,
    /// `dfsched run --policy co-thread`.
    CoThread,
    /// `dfsched run --policy data-affinity`.
    DataAffinity,
}

crate::params::bench_modes!(CompareMode, CompareError::Params {
    Plain => "plain",
    None => "none",
    CoThread => "co-thread",
    DataAffinity => "data-affinity",
});

/// What to compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareParams {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Rounds; each runs every mode once.
    pub repeat: usize,
    /// The policies to run besides plain (each one of [`POLICIES`]).
    pub policies: Vec<String>,
    /// The `dfsched` binary whose `run` starts the command under a policy.
    pub dfsched: PathBuf,
    /// Milliseconds between /proc samples; 0 = no sampling.
    pub sample_ms: u64,
    /// Let the command's stdout and stderr through (else /dev/null).
    pub show_output: bool,
    /// Seed of the mode order in each round.
    pub seed: u64,
    /// A run still going after this long is killed (SIGKILL to the command
    /// and every descendant found) and reported as timed out; `None`: no
    /// limit.
    pub timeout: Option<Duration>,
}

/// Why a comparison did not run or complete.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Bad parameters; nothing ran.
    #[error("{0}")]
    Params(String),
    /// The command could not be started.
    #[error("cannot start {command}: {reason}")]
    Spawn {
        /// The command as shown.
        command: String,
        /// The OS's reason.
        reason: String,
    },
    /// Waiting for the command failed.
    #[error("waiting for {0}: {1}")]
    Wait(String, String),
}

impl CompareError {
    /// Whether the parameters were refused (a usage error).
    pub fn is_usage(&self) -> bool {
        matches!(self, CompareError::Params(_))
    }
}

impl CompareParams {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), CompareError> {
        let bad = |m: String| Err(CompareError::Params(m));
        if self.command.is_empty() {
            return bad("no command to compare (give it after `--`)".into());
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return bad(format!("--repeat must be from 1 to {MAX_REPEAT}"));
        }
        if self.policies.is_empty() {
            return bad("--policies names no policy".into());
        }
        for (i, p) in self.policies.iter().enumerate() {
            if !POLICIES.contains(&p.as_str()) {
                return bad(format!(
                    "unknown policy {p:?} in --policies (known: {})",
                    POLICIES.join(", ")
                ));
            }
            if self.policies[..i].contains(p) {
                return bad(format!("policy {p:?} named twice in --policies"));
            }
        }
        Ok(())
    }

    /// Every mode, baseline first (the policies checked by
    /// [`CompareParams::validate`]; an unknown one is left out).
    pub fn modes(&self) -> Vec<CompareMode> {
        std::iter::once(CompareMode::Plain)
            .chain(
                self.policies
                    .iter()
                    .filter_map(|p| p.parse().ok())
                    .filter(|m| *m != CompareMode::Plain),
            )
            .collect()
    }

    /// The command as a person would type it.
    pub fn shown(&self) -> String {
        self.command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The process to start for `mode`.
    fn command_for(&self, mode: &str) -> Command {
        let mut cmd = if mode == PLAIN {
            let mut c = Command::new(&self.command[0]);
            c.args(&self.command[1..]);
            c
        } else {
            let mut c = Command::new(&self.dfsched);
            c.args(["run", "--policy", mode, "--"]).args(&self.command);
            c
        };
        cmd.stdin(Stdio::null());
        if !self.show_output {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        cmd
    }
}

/// One run of one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareRun {
    /// `plain` or a policy.
    pub mode: String,
    /// Its round, from 0.
    pub round: usize,
    /// Seconds from the spawn to the exit.
    pub wall_s: f64,
    /// The exit status (128 + signal for a signal).
    pub status: i32,
    /// Voluntary context switches (rusage: the command and what it waited
    /// for).
    pub voluntary_switches: u64,
    /// Involuntary context switches (the same).
    pub involuntary_switches: u64,
    /// `se.nr_migrations` summed over the threads seen (a lower bound;
    /// `None` without sampling).
    pub migrations: Option<u64>,
    /// Distinct threads seen in the samples.
    pub threads_seen: u64,
    /// Killed at the timeout (its status is then 128 + 9).
    #[serde(default)]
    pub timed_out: bool,
}

impl CompareRun {
    /// Context switches of the run, both kinds.
    pub fn switches(&self) -> u64 {
        self.voluntary_switches + self.involuntary_switches
    }
}

/// One mode's figures over its successful runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareModeReport {
    /// `plain` or a policy.
    pub mode: String,
    /// Runs that exited 0.
    pub ok_runs: usize,
    /// Wall time, seconds.
    pub wall_s: Option<Summary>,
    /// Per-round wall-time ratio to plain (< 1: faster than plain); `None`
    /// for plain itself.
    pub ratio: Option<PairedRatio>,
    /// The sign-test interval of the median ratio (`confidence` says its
    /// exact coverage).
    pub ratio_interval: Option<MedianInterval>,
    /// Context switches per run.
    pub switches: Option<Summary>,
    /// Migrations per run (lower bound; `None` without sampling).
    pub migrations: Option<Summary>,
    /// Migrations per thread seen, median over runs.
    pub migrations_per_thread: Option<f64>,
}

/// The whole comparison. JSON: this struct.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    /// The command compared.
    pub command: Vec<String>,
    /// Where it ran.
    pub machine: Machine,
    /// Rounds run.
    pub repeat: usize,
    /// Milliseconds between /proc samples (0: none).
    pub sample_ms: u64,
    /// How the ratio's interval is made.
    pub interval_method: String,
    /// Per mode, plain first.
    pub modes: Vec<CompareModeReport>,
    /// Every run, in the order run.
    pub runs: Vec<CompareRun>,
}

/// Runs the comparison; `progress` after each run (as every benchmark's).
pub fn run(
    params: &CompareParams,
    progress: &mut dyn FnMut(&Progress),
) -> Result<CompareReport, CompareError> {
    params.validate()?;
    let modes = params.modes();
    let mut rounds = Rounds::new(1, modes.len() * params.repeat, progress);
    let runs = rounds.run_case(
        0,
        (&modes, params.repeat, params.seed),
        |mode, round| run_once(params, mode.name(), round),
        |r| r.wall_s,
    )?;
    Ok(report(params, runs))
}

/// `dfsched compare` on the shared contract ([`crate::suite::Benchmark`]):
/// each case is one command compared.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompareBench;

impl crate::suite::Benchmark for CompareBench {
    type Params = CompareParams;
    type Report = CompareReport;
    type Error = CompareError;
    const FAILED: &'static str = "dfsched compare failed";

    fn run_cases(
        &self,
        cases: &[CompareParams],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<CompareReport>, CompareError> {
        for c in cases {
            c.validate()?;
        }
        cases.iter().map(|c| run(c, progress)).collect()
    }

    fn is_usage(e: &CompareError) -> bool {
        e.is_usage()
    }

    fn machine(r: &CompareReport) -> &Machine {
        &r.machine
    }

    fn label(r: &CompareReport) -> String {
        format!("`{}`", r.command.join(" "))
    }

    fn render(r: &CompareReport) -> String {
        table(r)
    }

    fn render_grid(g: &crate::GridOf<CompareReport>) -> String {
        g.cells.iter().map(table).collect::<Vec<_>>().join("\n")
    }
}

/// The report of `runs` (see the module doc for what each figure is).
pub fn report(params: &CompareParams, runs: Vec<CompareRun>) -> CompareReport {
    let ok: Vec<&CompareRun> = runs.iter().filter(|r| r.status == 0).collect();
    let modes = params
        .modes()
        .into_iter()
        .map(|mode| mode.name().to_string())
        .map(|mode| {
            let mine: Vec<&&CompareRun> = ok.iter().filter(|r| r.mode == mode).collect();
            let walls: Vec<f64> = mine.iter().map(|r| r.wall_s).collect();
            let ratio = PairedRatio::of(&ok, mode.as_str(), PLAIN, |r| {
                (r.mode.as_str(), r.round, r.wall_s)
            });
            let ratio_interval = ratio
                .as_ref()
                .and_then(|p| MedianInterval::sign_test(&p.per_round, CONFIDENCE));
            let switches: Vec<f64> = mine.iter().map(|r| r.switches() as f64).collect();
            let migrations: Vec<f64> = mine
                .iter()
                .filter_map(|r| r.migrations.map(|m| m as f64))
                .collect();
            let per_thread: Vec<f64> = mine
                .iter()
                .filter(|r| r.threads_seen > 0)
                .filter_map(|r| Some(r.migrations? as f64 / r.threads_seen as f64))
                .collect();
            CompareModeReport {
                ok_runs: mine.len(),
                wall_s: Summary::of(&walls),
                ratio,
                ratio_interval,
                switches: Summary::of(&switches),
                migrations: Summary::of(&migrations),
                migrations_per_thread: crate::stats::median(&per_thread),
                mode,
            }
        })
        .collect();
    let allowed = dfsched::sys::get_affinity(0).unwrap_or_default();
    CompareReport {
        machine: Machine::describe(&allowed),
        command: params
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        repeat: params.repeat,
        sample_ms: params.sample_ms,
        interval_method: "sign test: order statistics of the per-round ratios".into(),
        modes,
        runs,
    }
}

/// The latest counters of every thread seen, by (pid, tid).
type Seen = BTreeMap<(u32, u64), u64>;

/// One sample of `root`'s tree: each thread's `se.nr_migrations` into
/// `seen`. Threads and processes that end meanwhile are skipped.
fn sample_tree(root: u32, seen: &mut Seen) {
    let mut todo = vec![root];
    // Bounded by the tree's size: each pid is expanded once per sample.
    let mut expanded = std::collections::BTreeSet::new();
    while let Some(pid) = todo.pop() {
        if !expanded.insert(pid) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else {
                continue;
            };
            if let Ok(s) = dfsched::procfs::thread_sched(pid, tid) {
                seen.insert((pid, tid), s.nr_migrations);
            }
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
}

/// Runs `mode` once (see the module doc).
fn run_once(params: &CompareParams, mode: &str, round: usize) -> Result<CompareRun, CompareError> {
    let mut cmd = params.command_for(mode);
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| CompareError::Spawn {
        command: params.shown(),
        reason: e.to_string(),
    })?;
    let pid = child.id();
    let seen = Arc::new(Mutex::new(Seen::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = (params.sample_ms > 0).then(|| {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        let every = Duration::from_millis(params.sample_ms);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut local = Seen::new();
                sample_tree(pid, &mut local);
                seen.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(local);
                std::thread::sleep(every);
            }
        })
    });
    let watchdog = params.timeout.map(|limit| Watchdog::start(pid, limit));
    let waited = wait_exited(pid);
    let wall_s = start.elapsed().as_secs_f64();
    let timed_out = watchdog.is_some_and(Watchdog::stop);
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = sampler {
        let _ = s.join();
    }
    waited.map_err(|e| CompareError::Wait(params.shown(), e.to_string()))?;
    // The zombie's own thread is still readable before it is reaped.
    let mut seen = std::mem::take(
        &mut *seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    if params.sample_ms > 0 {
        sample_tree(pid, &mut seen);
    }
    let (status, usage) =
        reap(pid).map_err(|e| CompareError::Wait(params.shown(), e.to_string()))?;
    // Reaped above; dropping the handle neither waits nor kills.
    drop(child);
    Ok(CompareRun {
        mode: mode.to_string(),
        round,
        wall_s,
        status,
        voluntary_switches: usage.ru_nvcsw.max(0) as u64,
        involuntary_switches: usage.ru_nivcsw.max(0) as u64,
        migrations: (params.sample_ms > 0).then(|| seen.values().sum()),
        threads_seen: seen.len() as u64,
        timed_out,
    })
}

/// Kills a run that outlives its limit: a thread that waits for the limit
/// or for [`Watchdog::stop`], whichever comes first.
struct Watchdog {
    /// Set by `stop`; the thread waits on it.
    done: Arc<(Mutex<bool>, std::sync::Condvar)>,
    /// The thread; its result says whether it killed.
    thread: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    /// Watches child `pid` (not reaped while watched, so its pid stays
    /// its own) for `limit`.
    fn start(pid: u32, limit: Duration) -> Watchdog {
        let done = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let theirs = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let (flag, wake) = &*theirs;
            let deadline = Instant::now() + limit;
            let mut stopped = flag
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while !*stopped {
                let now = Instant::now();
                if now >= deadline {
                    kill_tree(pid);
                    return true;
                }
                stopped = wake
                    .wait_timeout(stopped, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            false
        });
        Watchdog { done, thread }
    }

    /// The run has ended: stops the watch; whether it killed the run.
    fn stop(self) -> bool {
        let (flag, wake) = &*self.done;
        *flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        wake.notify_all();
        self.thread.join().unwrap_or(false)
    }
}

/// SIGKILL to `root` and every descendant found under it in `/proc`. Each
/// is stopped (SIGSTOP) as it is found, before its children are read, and
/// killed only once the whole tree is stopped: a stopped process can
/// neither fork a child the walk would miss nor see its children die and
/// exit by itself. (Killing the children first, `sh -c 'sleep 30 & sleep
/// 30; wait'` under load saw its sleeps die, went on and exited 0 before
/// its own SIGKILL came: a run killed at its limit reported status 0.)
fn kill_tree(root: u32) {
    let signal = |pid: u32, sig: libc::c_int| {
        // SAFETY: kill has no memory effects; a pid that ended meanwhile
        // gets ESRCH, ignored.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    };
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let pid = found[i];
        i += 1;
        signal(pid, libc::SIGSTOP);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                found.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    for pid in found {
        signal(pid, libc::SIGKILL);
    }
}

/// Waits until child `pid` has exited, leaving it a zombie
/// (`waitid(WEXITED | WNOWAIT)`).
fn wait_exited(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data, valid zeroed; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a child of ours by pid, a live siginfo_t to write.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps exited child `pid`: its exit status (128 + signal for a signal)
/// and its rusage (its own and its waited-for descendants').
fn reap(pid: u32) -> std::io::Result<(i32, libc::rusage)> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data, valid zeroed; wait4 writes it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a child of ours by pid, live out-parameters.
        let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if rc == pid as libc::pid_t {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            return Ok((code, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One row's cells: mode, runs, wall median, min–max, ratio, interval,
/// switches, migrations per thread.
fn rows(report: &CompareReport) -> Vec<[String; 8]> {
    let dash = || "-".to_string();
    report
        .modes
        .iter()
        .map(|m| {
            let wall = m.wall_s;
            [
                m.mode.clone(),
                format!("{}/{}", m.ok_runs, report.repeat),
                wall.map_or_else(dash, |w| format!("{:.4} s", w.median)),
                wall.map_or_else(dash, |w| format!("{:.4} – {:.4}", w.min, w.max)),
                match (&m.ratio, m.mode == PLAIN) {
                    (_, true) if m.ok_runs > 0 => "1".into(),
                    (Some(r), _) => format!("{:.3}", r.median),
                    (None, _) => dash(),
                },
                m.ratio_interval.map_or_else(dash, |i| {
                    format!(
                        "{:.3} – {:.3} ({:.1} %)",
                        i.low,
                        i.high,
                        100.0 * i.confidence
                    )
                }),
                m.switches.map_or_else(dash, |s| format!("{:.0}", s.median)),
                m.migrations_per_thread
                    .map_or_else(dash, |v| format!("{v:.2}")),
            ]
        })
        .collect()
}

/// The table's column headers.
const HEADERS: [&str; 8] = [
    "mode",
    "runs ok",
    "wall median",
    "min – max (s)",
    "ratio to plain",
    "interval (coverage)",
    "ctx switches/run",
    "migrations/thread",
];

/// The line above the table.
fn title(report: &CompareReport) -> String {
    format!(
        "`{}`: {} rounds, interleaved; ratio = wall time / plain's in the same round \
         (median; sign-test interval of the median)\n",
        report.command.join(" "),
        report.repeat
    )
}

/// The report as a table for people.
pub fn table(report: &CompareReport) -> String {
    let rows = rows(report);
    let mut widths = HEADERS.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (c, w) in cells.iter().zip(widths) {
            s.push_str(c);
            s.push_str(&" ".repeat(w - c.chars().count() + 2));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = title(report);
    out += &line(&HEADERS.map(String::from));
    for r in &rows {
        out += &line(r);
    }
    out += &failures(report);
    out
}

/// The runs that failed, one line each (empty if none).
fn failures(report: &CompareReport) -> String {
    report
        .runs
        .iter()
        .filter(|r| r.status != 0)
        .map(|r| {
            let why = if r.timed_out {
                "timed out, killed".to_string()
            } else {
                format!("exit {}", r.status)
            };
            format!("round {} {}: {why} (left out)\n", r.round + 1, r.mode)
        })
        .collect()
}

/// The report as a Markdown table.
pub fn markdown(report: &CompareReport) -> String {
    let mut out = title(report) + "\n";
    out += &format!("| {} |\n", HEADERS.join(" | "));
    out += &format!("|{}\n", "---|".repeat(HEADERS.len()));
    for r in rows(report) {
        out += &format!("| {} |\n", r.join(" | "));
    }
    let failed = failures(report);
    if !failed.is_empty() {
        out += "\n";
        out += &failed;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(command: &[&str], policies: &[&str]) -> CompareParams {
        CompareParams {
            command: command.iter().map(OsString::from).collect(),
            repeat: 3,
            policies: policies.iter().map(|p| p.to_string()).collect(),
            dfsched: PathBuf::from("/nonexistent/dfsched"),
            sample_ms: 10,
            show_output: false,
            seed: 1,
            timeout: None,
        }
    }

    fn run_of(mode: &str, round: usize, wall_s: f64) -> CompareRun {
        CompareRun {
            mode: mode.into(),
            round,
            wall_s,
            status: 0,
            voluntary_switches: 10,
            involuntary_switches: 5,
            migrations: Some(6),
            threads_seen: 3,
            timed_out: false,
        }
    }

    #[test]
    fn bad_parameters_are_refused_before_anything_runs() {
        for (p, msg) in [
            (params(&[], &["none"]), "no command"),
            (params(&["true"], &["fast"]), "unknown policy \"fast\""),
            (params(&["true"], &["none", "none"]), "named twice"),
            (params(&["true"], &[]), "names no policy"),
        ] {
            let e = run(&p, &mut |_| panic!("ran")).unwrap_err();
            assert!(e.is_usage() && e.to_string().contains(msg), "{e}");
        }
        let mut zero = params(&["true"], &["none"]);
        zero.repeat = 0;
        assert!(zero.validate().is_err());
    }

    #[test]
    fn the_report_pairs_each_policy_with_plain_in_the_same_round() {
        let p = params(&["x"], &["co-thread"]);
        let mut runs = vec![
            run_of(PLAIN, 0, 1.0),
            run_of("co-thread", 0, 0.9),
            run_of(PLAIN, 1, 2.0),
            run_of("co-thread", 1, 1.6),
            run_of(PLAIN, 2, 1.0),
            run_of("co-thread", 2, 1.1),
        ];
        // A failed run is reported and left out of every figure.
        let mut failed = run_of("co-thread", 2, 0.01);
        failed.status = 3;
        failed.round = 3;
        runs.push(failed);
        let r = report(&p, runs);
        assert_eq!(r.modes[0].mode, PLAIN);
        assert!(r.modes[0].ratio.is_none());
        let c = &r.modes[1];
        assert_eq!(c.ok_runs, 3);
        let ratio = c.ratio.as_ref().unwrap();
        assert_eq!(ratio.rounds, 3);
        assert!((ratio.median - 0.9).abs() < 1e-12, "{ratio:?}");
        let i = c.ratio_interval.unwrap();
        assert!((i.low - 0.8).abs() < 1e-12 && (i.high - 1.1).abs() < 1e-12);
        assert!((i.confidence - 0.75).abs() < 1e-12);
        assert_eq!(c.switches.unwrap().median, 15.0);
        assert_eq!(c.migrations_per_thread, Some(2.0));
        assert_eq!(r.runs.len(), 7);
        let text = table(&r);
        assert!(
            text.contains("round 4 co-thread: exit 3 (left out)"),
            "{text}"
        );
        let md = markdown(&r);
        assert!(md.contains("| co-thread | 3/3 | 1.1000 s |"), "{md}");
    }

    #[test]
    fn a_plain_run_counts_the_switches_and_threads_of_its_whole_tree() {
        // sh waits for its two children: their switches are in its rusage.
        let mut p = params(&["sh", "-c", "sleep 0.05; sleep 0.05"], &["none"]);
        p.repeat = 1;
        let r = run_once(&p, PLAIN, 0).unwrap();
        assert_eq!(r.status, 0);
        assert!(r.wall_s >= 0.1, "{r:?}");
        // Each sleep blocks at least once: voluntary switches of the tree.
        assert!(r.voluntary_switches >= 2, "{r:?}");
        assert!(r.threads_seen >= 2, "sh and a sleep seen: {r:?}");
        assert!(r.migrations.is_some());
        let failed = run_once(&params(&["sh", "-c", "exit 7"], &["none"]), PLAIN, 0).unwrap();
        assert_eq!(failed.status, 7);
        // A run past its limit is killed, with its children.
        let mut slow = params(&["sh", "-c", "sleep 30 & sleep 30; wait"], &["none"]);
        slow.timeout = Some(Duration::from_millis(300));
        let r = run_once(&slow, PLAIN, 0).unwrap();
        assert!(r.timed_out && r.status == 128 + 9, "{r:?}");
        assert!(
            r.wall_s < 10.0,
            "killed at the limit, not after the sleeps: {r:?}"
        );
        let missing = run_once(&params(&["/nonexistent/x"], &["none"]), PLAIN, 0);
        assert!(matches!(missing, Err(CompareError::Spawn { .. })));
    }
}
