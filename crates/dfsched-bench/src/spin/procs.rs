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
//! The processes and their ready/go protocol are [`crate::workers`]'s,
//! whose `Workers` kills and reaps every child still running when dropped,
//! so an error at any step leaves no worker spinning. The background load (`Background`) is one more worker, started with
//! `--until-eof` and never under dfsched (`DFSCHED_PRELOAD` removed from
//! its environment); closing its stdin stops it.

use super::report::SpinRun;
use super::{SpinError, SpinMode, SpinParams};
use crate::workers::{WorkerError, Workers};
use dfsched_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

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
    /// The command of one worker process in `mode` (not started; the
    /// pipes are set by [`Workers::start`]). The
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

/// A worker's failure as the benchmark's error, in `mode`.
fn spin_error(e: WorkerError, mode: SpinMode) -> SpinError {
    match e {
        WorkerError::Start {
            what,
            program,
            source,
            ..
        } => SpinError::Start {
            what,
            program,
            source,
        },
        WorkerError::Failed { what, detail, .. } => SpinError::Worker { what, mode, detail },
    }
}

/// What is wrong with a result, if anything: `threads` counts and masks
/// expected, and under dfsched exactly when `under_dfsched` (what the mode
/// asked for).
fn check(r: &WorkerResult, threads: usize, under_dfsched: bool) -> Result<(), String> {
    if r.ops.len() != threads || r.cpus.len() != threads {
        return Err(format!("{} counts for {threads} threads", r.ops.len()));
    }
    if r.under_dfsched != under_dfsched {
        return Err(if under_dfsched {
            "it ran without dfsched (DFSCHED_PRELOAD unset or libdfsched.so not loaded): \
             its figures would be vanilla's"
        } else {
            "it ran under dfsched although the mode is vanilla (is LD_PRELOAD set?)"
        }
        .into());
    }
    Ok(())
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

/// Runs one mode once (see the module doc).
pub(crate) fn run_once(
    p: &SpinParams,
    mode: SpinMode,
    round: usize,
    commands: &SpinCommands,
    allowed: &CpuSet,
) -> Result<SpinRun, SpinError> {
    let load_avg_1m = load_avg_1m();
    let err = |e| spin_error(e, mode);
    let mut workers = Workers::new(explain);
    for i in 0..p.processes {
        let cmd = commands.command(mode, p.threads, Some(p.seconds));
        workers
            .start(cmd, format!("worker process {i}"))
            .map_err(err)?;
    }
    workers.ready_go().map_err(err)?;
    let results: Vec<WorkerResult> = workers.finish().map_err(err)?;
    for (i, r) in results.iter().enumerate() {
        check(r, p.threads, mode.policy().is_some()).map_err(|d| err(workers.failed(i, d)))?;
    }
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
        let err = |e| spin_error(e, SpinMode::Vanilla);
        let cmd = commands.command(SpinMode::Vanilla, threads, None);
        let mut workers = Workers::new(explain);
        workers
            .start(cmd, "the background load".into())
            .map_err(err)?;
        workers.ready_go().map_err(err)?;
        Ok(Background { workers, threads })
    }

    /// Stops it (closing its stdin); returns the operations it did, per
    /// thread.
    pub(crate) fn stop(mut self) -> Result<Vec<u64>, SpinError> {
        let err = |e| spin_error(e, SpinMode::Vanilla);
        let r: WorkerResult = self.workers.finish().map_err(err)?.remove(0);
        check(&r, self.threads, false).map_err(|d| err(self.workers.failed(0, d)))?;
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
