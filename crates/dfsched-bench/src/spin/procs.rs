//! Starting, steering and reaping the worker processes of `bench spin`.
//!
//! ```text
//!  run_once(mode)
//!    start P workers  ── vanilla:   dfsched-spin-worker --threads T --seconds S
//!                     └─ co-thread: dfsched run --policy co-thread -- dfsched-spin-worker …
//!    read "ready" from each (all threads of all workers at their gates)
//!    write "go" to each, in turn
//!    read one JSON result from each; check it (a count per thread, and
//!    under dfsched exactly when the mode says so); wait for status 0
//! ```
//!
//! Invariant: a `Workers` kills and reaps every child still running when
//! dropped, so an error at any step leaves no worker spinning. The
//! background load (`Background`) is one more worker, started with
//! `--until-eof` and never under dfsched (`DFSCHED_PRELOAD` removed from
//! its environment); closing its stdin stops it.

use super::report::SpinRun;
use super::{SpinError, SpinMode, SpinParams};
use dfsched_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

/// The worker program's file name, beside the `dfsched` binary.
pub const WORKER_NAME: &str = "dfsched-spin-worker";

/// `dfsched run`'s exit status when it failed before starting the program.
const RUN_FAILED: i32 = 125;

/// The programs a run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpinCommands {
    /// `dfsched-spin-worker`.
    pub worker: PathBuf,
    /// The `dfsched` binary whose `run` subcommand starts the workers of the
    /// co-thread and data-affinity modes.
    pub dfsched: PathBuf,
}

impl SpinCommands {
    /// The command of one worker process in `mode` (not started). The
    /// vanilla worker loses `DFSCHED_PRELOAD`, so that it runs without
    /// dfsched even if the benchmark itself was started under it.
    pub fn command(&self, mode: SpinMode, threads: usize, seconds: Option<f64>) -> Command {
        let mut cmd = match mode.policy() {
            None => {
                let mut c = Command::new(&self.worker);
                c.env_remove("DFSCHED_PRELOAD");
                c
            }
            Some(policy) => {
                let mut c = Command::new(&self.dfsched);
                c.args(["run", "--policy", policy, "--"]).arg(&self.worker);
                c
            }
        };
        cmd.arg("--threads").arg(threads.to_string());
        match seconds {
            Some(s) => cmd.arg("--seconds").arg(s.to_string()),
            None => cmd.arg("--until-eof"),
        };
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        cmd
    }
}

/// What one worker process reports (its last line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Operations per thread.
    pub ops: Vec<u64>,
    /// Seconds from "go" to the stop.
    pub elapsed_s: f64,
    /// The threads' buffers folded together (only so the work is kept).
    pub checksum: u64,
    /// Each thread's `Cpus_allowed_list` when it stopped.
    pub cpus: Vec<String>,
    /// Whether the preloaded dfsched runtime was asked for and loaded.
    pub under_dfsched: bool,
    /// Names of the worker's threads that are not its own: a preloaded
    /// runtime's (`dfsched-balance`).
    pub foreign_threads: Vec<String>,
}

/// One started process and its pipes.
struct Worker {
    /// `worker process 2`, `the background load`.
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Worker {
    fn start(mut cmd: Command, what: String) -> Result<Worker, SpinError> {
        let mut child = cmd.spawn().map_err(|source| SpinError::Start {
            what: what.clone(),
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Ok(Worker {
            what,
            child,
            stdin,
            out,
        })
    }

    fn failed(&self, mode: SpinMode, detail: String) -> SpinError {
        SpinError::Worker {
            what: self.what.clone(),
            mode,
            detail,
        }
    }

    /// Why the process's output ended: its exit status, explained.
    fn ended(&mut self, mode: SpinMode, before: &str) -> SpinError {
        let detail = match self.child.wait() {
            Ok(status) => format!("it ended before {before} ({})", explain(status)),
            Err(e) => format!("it ended before {before} (waiting for it: {e})"),
        };
        self.failed(mode, detail)
    }

    /// Reads one line; `None` at the end of the output.
    fn line(&mut self, mode: SpinMode) -> Result<Option<String>, SpinError> {
        let mut line = String::new();
        match self.out.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.trim().to_string())),
            Err(e) => Err(self.failed(mode, format!("reading its output: {e}"))),
        }
    }

    fn expect_ready(&mut self, mode: SpinMode) -> Result<(), SpinError> {
        match self.line(mode)? {
            Some(l) if l == "ready" => Ok(()),
            Some(l) => Err(self.failed(mode, format!("it said {l:?} instead of ready"))),
            None => Err(self.ended(mode, "saying ready")),
        }
    }

    fn say_go(&mut self, mode: SpinMode) -> Result<(), SpinError> {
        let stdin = self.stdin.as_mut().expect("stdin is piped until finish");
        let sent = writeln!(stdin, "go").and_then(|()| stdin.flush());
        sent.map_err(|e| self.failed(mode, format!("telling it to go: {e}")))
    }

    /// Reads the result line and waits for status 0. `under_dfsched` is
    /// what the mode asked for; `threads` how many counts to expect.
    fn finish(
        &mut self,
        mode: SpinMode,
        threads: usize,
        under_dfsched: bool,
    ) -> Result<WorkerResult, SpinError> {
        // Closing stdin stops an --until-eof worker and is harmless to a
        // timed one.
        drop(self.stdin.take());
        let Some(line) = self.line(mode)? else {
            return Err(self.ended(mode, "reporting"));
        };
        let r: WorkerResult = serde_json::from_str(&line)
            .map_err(|e| self.failed(mode, format!("its result {line:?} is not JSON: {e}")))?;
        let status = self
            .child
            .wait()
            .map_err(|e| self.failed(mode, format!("waiting for it: {e}")))?;
        if !status.success() {
            return Err(self.failed(mode, explain(status)));
        }
        if r.ops.len() != threads || r.cpus.len() != threads {
            return Err(self.failed(
                mode,
                format!("{} counts for {threads} threads", r.ops.len()),
            ));
        }
        if r.under_dfsched != under_dfsched {
            let detail = if under_dfsched {
                "it ran without dfsched (DFSCHED_PRELOAD unset or libdfsched.so not loaded): \
                 its figures would be vanilla's"
            } else {
                "it ran under dfsched although the mode is vanilla (is LD_PRELOAD set?)"
            };
            return Err(self.failed(mode, detail.into()));
        }
        Ok(r)
    }
}

/// An exit status, with what 125 means from `dfsched run`.
fn explain(status: ExitStatus) -> String {
    if status.code() == Some(RUN_FAILED) {
        format!(
            "{status}: dfsched run failed before starting the worker, its reason is on stderr \
             above (is libdfsched.so built? `cargo build --release`)"
        )
    } else {
        format!("{status}; its own message, if any, is on stderr above")
    }
}

/// Kills (and reaps) every child still running when dropped.
#[derive(Default)]
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            if matches!(w.child.try_wait(), Ok(None)) {
                let _ = w.child.kill();
            }
            let _ = w.child.wait();
        }
    }
}

/// Runs one mode once (see the module doc).
pub(crate) fn run_once(
    p: &SpinParams,
    mode: SpinMode,
    round: usize,
    commands: &SpinCommands,
    allowed: &CpuSet,
) -> Result<SpinRun, SpinError> {
    let load_avg_1m = load_avg_1m();
    let mut workers = Workers::default();
    for i in 0..p.processes {
        let cmd = commands.command(mode, p.threads, Some(p.seconds));
        workers
            .0
            .push(Worker::start(cmd, format!("worker process {i}"))?);
    }
    for w in &mut workers.0 {
        w.expect_ready(mode)?;
    }
    for w in &mut workers.0 {
        w.say_go(mode)?;
    }
    let results = workers
        .0
        .iter_mut()
        .map(|w| w.finish(mode, p.threads, mode.policy().is_some()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut run = SpinRun::of(mode, round, &results, allowed);
    run.load_avg_1m = load_avg_1m;
    Ok(run)
}

/// The 1-minute load average (`/proc/loadavg`), if readable: how busy the
/// shared machine was when a run started.
fn load_avg_1m() -> Option<f64> {
    parse_load_avg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The first field of `/proc/loadavg`.
fn parse_load_avg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The background load: a worker never under dfsched, spinning until
/// stopped.
pub(crate) struct Background {
    workers: Workers,
    /// Its threads.
    threads: usize,
}

impl Background {
    /// Starts `threads` spinning threads and waits until they spin.
    pub(crate) fn start(commands: &SpinCommands, threads: usize) -> Result<Background, SpinError> {
        let cmd = commands.command(SpinMode::Vanilla, threads, None);
        let mut workers = Workers(vec![Worker::start(cmd, "the background load".into())?]);
        let w = &mut workers.0[0];
        w.expect_ready(SpinMode::Vanilla)?;
        w.say_go(SpinMode::Vanilla)?;
        Ok(Background { workers, threads })
    }

    /// Stops it; returns the operations it did, per thread.
    pub(crate) fn stop(mut self) -> Result<Vec<u64>, SpinError> {
        let threads = self.threads;
        let r = self.workers.0[0].finish(SpinMode::Vanilla, threads, false)?;
        Ok(r.ops)
    }
}

/// Threads per distinct `Cpus_allowed_list` over all results, and how
/// many threads had a list other than `allowed` (narrowed by dfsched).
pub(crate) fn masks(
    results: &[WorkerResult],
    allowed: &CpuSet,
) -> (BTreeMap<String, usize>, usize) {
    let mut by_list = BTreeMap::new();
    let mut narrowed = 0;
    for list in results.iter().flat_map(|r| &r.cpus) {
        *by_list.entry(list.clone()).or_insert(0) += 1;
        if list.parse::<CpuSet>().is_ok_and(|s| s != *allowed) {
            narrowed += 1;
        }
    }
    (by_list, narrowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_average_is_the_first_field() {
        assert_eq!(parse_load_avg("7.14 7.81 6.83 3/412 15636\n"), Some(7.14));
        assert_eq!(parse_load_avg(""), None);
        assert_eq!(parse_load_avg("x 1 2"), None);
    }

    #[test]
    fn a_vanilla_worker_loses_dfsched_preload_and_others_go_through_dfsched_run() {
        let c = SpinCommands {
            worker: "/w".into(),
            dfsched: "/d".into(),
        };
        let v = c.command(SpinMode::Vanilla, 2, Some(1.5));
        assert_eq!(v.get_program(), "/w");
        let args: Vec<_> = v.get_args().collect();
        assert_eq!(args, ["--threads", "2", "--seconds", "1.5"]);
        assert!(v
            .get_envs()
            .any(|(k, val)| k == "DFSCHED_PRELOAD" && val.is_none()));
        let d = c.command(SpinMode::DataAffinity, 3, None);
        assert_eq!(d.get_program(), "/d");
        let args: Vec<_> = d.get_args().collect();
        assert_eq!(
            args,
            [
                "run",
                "--policy",
                "data-affinity",
                "--",
                "/w",
                "--threads",
                "3",
                "--until-eof"
            ]
        );
    }
}
