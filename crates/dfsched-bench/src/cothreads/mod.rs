//! The co-thread test program of the co-thread paper (paper 001 §IV,
//! Table I): `processes` processes of `threads` threads each; every thread
//! does read-modify-writes on its own process's shared data for `seconds`;
//! the figure is the number of operations completed.
//!
//! **An operation** is a read-modify-write of one 64-byte line of the
//! process's shared data: each of its eight words loaded and stored plus
//! one (relaxed atomics, plain `mov`s on x86-64). Thread `t` of `T` starts
//! at line `t · lines / T` and walks the data line by line, wrapping, so a
//! process's threads write the same lines as one another.
//!
//! **Processes** are separate programs: the parent re-executes a worker
//! command (the CLI passes its own binary with the hidden subcommand
//! `bench cothreads-worker`) once per process, with stdin and stdout piped
//! ([`worker`] has the line protocol, [`crate::workers`] the parent's
//! side, shared with `bench spin`). Re-executing rather than forking
//! keeps every worker a fresh single-threaded program when it starts its
//! runtime and threads: forking a process that already runs threads (a
//! test harness, a runtime's balancer) copies locks held by threads that do
//! not exist in the child. All workers say "ready" before any is told "go",
//! so all start their timed part together.
//!
//! **Modes** ([`CoMode`]), interleaved per round as `bench df` does:
//! - `vanilla`: the kernel alone;
//! - `co-thread`: each worker starts a runtime with the co-thread policy
//!   and attaches every thread (its threads are one co-thread group);
//! - `oracle`: no runtime; worker `i` pins every one of its threads to
//!   allowed CPU `i mod n` before the gate opens ([`oracle_cpu`]): perfect
//!   co-thread packing with the processes dealt evenly, the best co-thread
//!   can do;
//! - `split`: no runtime; thread `t` of worker `i` pinned to allowed CPU
//!   `(i + t) mod n` ([`split_cpu`]): every process spread, the worst case
//!   for sharing, with the CPUs as evenly loaded as under `oracle`.
//!
//! The pinned modes use the affinity helpers of `crate::os` (the
//! runtime's `sys` module) and read every pin back; a pin that fails or
//! does not hold fails the worker, never a silent fallback to the kernel's
//! placement.
//!
//! **Paired ratios** ([`report`]): the machine drifts between rounds, so
//! each non-vanilla run is divided by the vanilla run of its own round and
//! the median of those per-round ratios is reported beside the ratio of
//! medians.
//!
//! **The agent** ([`agent`]): co-thread workers may share a private `dfsched
//! agent` for the whole benchmark, as `dfsched run` would start one.
//!
//! **Table I** sizes: the paper calls the shared data "small", "medium" and
//! "larger" without numbers, on a machine with 32 KiB L1d and 256 KiB L2 per
//! core and a 6 MiB shared L3. Our reading: small = 16 KiB (half an L1d),
//! medium = 128 KiB (half an L2), larger = 1 MiB (four L2s, well inside the
//! L3) — [`SharedSize`].

pub mod agent;
pub mod report;
pub mod worker;

use crate::cothread::CoThreadError;
use crate::machine::Machine;
use crate::os::OsError;
use crate::runner::{Progress, Rounds};
use crate::stats::median;
use crate::workers::{WorkerError, Workers};
use dfsched_core::{CpuId, CpuSet};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

pub use agent::{idle_exit_secs, AgentSetting, CoAgent, PrivateAgent};
pub use report::{
    describe_co_params, paired_ratio, render_co_grid, render_co_report, render_co_table,
    CoGridReport, CoModeReport, CoRatios, CoReport,
};
pub use worker::{worker_main, WorkerArgs};

/// Default processes (Table I, test 3).
pub const DEFAULT_PROCESSES: usize = 9;
/// Default threads per process (Table I, test 3).
pub const DEFAULT_THREADS: usize = 3;
/// Default shared bytes per process: "small".
pub const DEFAULT_SHARED_BYTES: usize = SharedSize::Small.bytes();
/// Default seconds each run works (the paper timed 10 s).
pub const DEFAULT_SECONDS: f64 = 4.0;
/// Default runs per mode.
pub const DEFAULT_REPEAT: usize = 5;
/// Seconds per run in `--grid paper` unless `--seconds` says otherwise.
pub const PAPER_SECONDS: f64 = 10.0;
/// Runs per mode and cell of `--grid paper` unless `--repeat` says so.
pub const PAPER_REPEAT: usize = 3;

/// At most this many processes.
pub const MAX_PROCESSES: usize = 256;
/// At most this many threads per process.
pub const MAX_THREADS: usize = 256;
/// At most this many shared bytes per process (1 GiB).
pub const MAX_SHARED_BYTES: usize = 1 << 30;
/// At most this many seconds per run.
pub const MAX_SECONDS: f64 = 3600.0;

/// Table I's data sizes, as we read them (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedSize {
    /// 16 KiB.
    Small,
    /// 128 KiB.
    Medium,
    /// 1 MiB.
    Larger,
}

impl SharedSize {
    /// Bytes.
    pub const fn bytes(self) -> usize {
        match self {
            SharedSize::Small => 16 * 1024,
            SharedSize::Medium => 128 * 1024,
            SharedSize::Larger => 1024 * 1024,
        }
    }
}

/// Table I: (processes, threads per process, shared data size).
pub const TABLE_I: [(usize, usize, SharedSize); 5] = [
    (7, 1, SharedSize::Small),
    (11, 5, SharedSize::Small),
    (9, 3, SharedSize::Small),
    (9, 3, SharedSize::Medium),
    (9, 3, SharedSize::Larger),
];

/// How the worker processes' threads are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoMode {
    /// The kernel alone.
    Vanilla,
    /// A co-thread runtime per process, every thread attached.
    CoThread,
    /// No runtime; worker `i`'s threads all pinned to allowed CPU `i mod n`.
    Oracle,
    /// No runtime; thread `t` of worker `i` pinned to allowed CPU `(i + t) mod n`.
    Split,
}

crate::params::bench_modes!(CoMode, CoParamError::UnknownMode {
    Vanilla => "vanilla",
    CoThread => "co-thread",
    Oracle => "oracle",
    Split => "split",
});

impl CoMode {
    /// Whether the mode pins threads itself (no runtime).
    pub fn is_pinned(self) -> bool {
        matches!(self, CoMode::Oracle | CoMode::Split)
    }
}

/// The CPU every thread of worker `process` is pinned to under `oracle`:
/// `cpus[process mod n]`, so the processes are dealt evenly over the CPUs.
/// `cpus` must not be empty.
pub fn oracle_cpu(process: usize, cpus: &[CpuId]) -> CpuId {
    assert!(!cpus.is_empty(), "the oracle needs at least one CPU");
    cpus[process % cpus.len()]
}

/// The CPU thread `thread` of worker `process` is pinned to under `split`:
/// `cpus[(process + thread) mod n]`, so each process's threads reach
/// `min(T, n)` CPUs and the CPUs carry as many threads as under `oracle`
/// (with `thread mod n` alone, 7 one-thread processes would all sit on the
/// first CPU and leave the other idle). `cpus` must not be empty.
pub fn split_cpu(process: usize, thread: usize, cpus: &[CpuId]) -> CpuId {
    assert!(!cpus.is_empty(), "split needs at least one CPU");
    cpus[(process + thread) % cpus.len()]
}

/// Parses a comma-separated mode list; empty, unknown or repeated names
/// are errors.
pub fn parse_co_modes(list: &str) -> Result<Vec<CoMode>, CoParamError> {
    crate::params::parse_mode_list(list, CoParamError::DuplicateMode, CoParamError::NoModes)
}

/// Why parameters were refused. Nothing was run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoParamError {
    /// `--processes` out of range.
    #[error("--processes {0} is not between 1 and {MAX_PROCESSES}")]
    Processes(usize),
    /// `--threads` out of range.
    #[error("--threads {0} is not between 1 and {MAX_THREADS}")]
    Threads(usize),
    /// `--shared-bytes` out of range or not whole lines.
    #[error("--shared-bytes {0} is not a multiple of 64 between 64 and {MAX_SHARED_BYTES}")]
    SharedBytes(usize),
    /// `--seconds` out of range.
    #[error("--seconds {0} is not above 0 and at most {MAX_SECONDS}")]
    Seconds(f64),
    /// `--repeat` out of range.
    #[error("--repeat {0} is not between 1 and 1000")]
    Repeat(usize),
    /// No mode.
    #[error("--modes names no mode (choose from vanilla,co-thread,oracle,split)")]
    NoModes,
    /// Unknown mode.
    #[error("unknown mode {0:?} (choose from vanilla,co-thread,oracle,split)")]
    UnknownMode(String),
    /// A mode listed twice.
    #[error("mode {0} is listed twice in --modes")]
    DuplicateMode(CoMode),
}

/// Why the benchmark (or one worker) did not complete. A variant with a
/// source does not repeat it in its message: the CLI prints the chain.
#[derive(Debug, thiserror::Error)]
pub enum CoThreadsError {
    /// Bad parameters; nothing ran.
    #[error(transparent)]
    Params(#[from] CoParamError),
    /// The runtime configuration (`DFSCHED_*`) was refused.
    #[error("dfsched runtime")]
    Runtime(#[source] dfsched::Error),
    /// The co-thread runtime failed.
    #[error("co-thread runtime")]
    CoThread(#[source] CoThreadError),
    /// A thread could not be created.
    #[error("could not start a thread")]
    Spawn(#[source] std::io::Error),
    /// A worker thread panicked.
    #[error("a worker thread panicked")]
    WorkerPanicked,
    /// The worker was not told "go".
    #[error("the worker was not told to go (its parent ended or said something else)")]
    NoGo,
    /// Not every thread ended up attached.
    #[error("{attached} of {threads} threads were attached")]
    NotAttached {
        /// Threads the runtime counted.
        attached: u64,
        /// Threads there were.
        threads: usize,
    },
    /// A pinned mode could not read the CPUs it may use. (The OS error is
    /// in the message rather than a source: it carries its own source, and
    /// a chain would print that twice.)
    #[error("reading the allowed CPUs: {0}")]
    Affinity(OsError),
    /// `sched_getaffinity` gave no CPU to pin to.
    #[error("sched_getaffinity reported no allowed CPU")]
    NoCpus,
    /// A pinned mode's pin failed.
    #[error("could not pin {thread} to CPU {cpu}: {reason}")]
    Pin {
        /// Which thread (`main`, `cothreads-T`).
        thread: String,
        /// The CPU asked for.
        cpu: CpuId,
        /// The affinity call's error (in the message, as for `Affinity`).
        reason: OsError,
    },
    /// A pinned mode's pin did not hold: the kernel reports other CPUs.
    #[error("{thread} was pinned to CPU {cpu} but runs on CPUs {got}")]
    PinNotHeld {
        /// Which thread.
        thread: String,
        /// The CPU asked for.
        cpu: CpuId,
        /// What `sched_getaffinity` says.
        got: CpuSet,
    },
    /// Talking to the parent failed.
    #[error("writing to the parent")]
    Pipe(#[source] std::io::Error),
    /// A worker process could not be started.
    #[error("could not start worker process {process} ({program})")]
    Start {
        /// Which process.
        process: usize,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker process failed.
    #[error("worker process {process} failed: {detail} (its own error is on stderr above)")]
    Worker {
        /// Which process.
        process: usize,
        /// What the parent saw.
        detail: String,
    },
}

/// What one worker process reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Operations per thread.
    pub ops: Vec<u64>,
    /// Seconds from the gate opening to the stop.
    pub elapsed_s: f64,
    /// Co-thread workers: load reports the agent answered (`None` in other
    /// modes); 0 when the worker never reached an agent.
    #[serde(default)]
    pub agent_reports: Option<u64>,
}

/// One case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoParams {
    /// Worker processes.
    pub processes: usize,
    /// Threads per process.
    pub threads: usize,
    /// Shared bytes per process.
    pub shared_bytes: usize,
    /// Seconds each run works.
    pub seconds: f64,
    /// Runs per mode.
    pub repeat: usize,
    /// Modes.
    pub modes: Vec<CoMode>,
    /// Seed of the per-round mode order.
    pub seed: u64,
}

impl Default for CoParams {
    fn default() -> Self {
        CoParams {
            processes: DEFAULT_PROCESSES,
            threads: DEFAULT_THREADS,
            shared_bytes: DEFAULT_SHARED_BYTES,
            seconds: DEFAULT_SECONDS,
            repeat: DEFAULT_REPEAT,
            modes: CoMode::ALL.to_vec(),
            seed: 1,
        }
    }
}

impl CoParams {
    /// Checks every limit.
    pub fn validate(&self) -> Result<(), CoParamError> {
        if !(1..=MAX_PROCESSES).contains(&self.processes) {
            return Err(CoParamError::Processes(self.processes));
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(CoParamError::Threads(self.threads));
        }
        let b = self.shared_bytes;
        if !(64..=MAX_SHARED_BYTES).contains(&b) || !b.is_multiple_of(64) {
            return Err(CoParamError::SharedBytes(b));
        }
        if !(self.seconds > 0.0 && self.seconds <= MAX_SECONDS) {
            return Err(CoParamError::Seconds(self.seconds));
        }
        if !(1..=1000).contains(&self.repeat) {
            return Err(CoParamError::Repeat(self.repeat));
        }
        crate::params::check_mode_list(
            &self.modes,
            CoParamError::DuplicateMode,
            CoParamError::NoModes,
        )
    }
}

/// Table I's cells; `base` gives the modes and seed, `seconds` and
/// `repeat` override [`PAPER_SECONDS`] and [`PAPER_REPEAT`].
pub fn paper_grid(base: &CoParams, seconds: Option<f64>, repeat: Option<usize>) -> Vec<CoParams> {
    TABLE_I
        .iter()
        .map(|&(processes, threads, size)| CoParams {
            processes,
            threads,
            shared_bytes: size.bytes(),
            seconds: seconds.unwrap_or(PAPER_SECONDS),
            repeat: repeat.unwrap_or(PAPER_REPEAT),
            ..base.clone()
        })
        .collect()
}

/// How to start one worker process: `program` with `args`, to which the
/// worker's own flags are appended (`--mode`, `--process`, `--threads`,
/// `--shared-bytes`, `--seconds`).
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The program (the CLI: its own executable).
    pub program: PathBuf,
    /// Arguments before the worker's flags (the CLI: `bench cothreads-worker`).
    pub args: Vec<OsString>,
    /// Environment added for co-thread workers only (the CLI:
    /// `DFSCHED_AGENT`); the other modes start no runtime.
    pub co_thread_env: Vec<(OsString, OsString)>,
}

/// One run of one mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoRun {
    /// The mode.
    pub mode: CoMode,
    /// Round (0-based).
    pub round: usize,
    /// Operations of all threads of all processes.
    pub ops_total: u64,
    /// Operations per process.
    pub ops_per_process: Vec<u64>,
    /// (most − fewest operations of a process) / mean: 0 when every
    /// process got as far.
    pub process_spread: f64,
    /// Median over the processes of the seconds they worked.
    pub elapsed_s: f64,
    /// `ops_total` / `elapsed_s`.
    pub ops_per_s: f64,
    /// Co-thread runs: load reports the agent answered, summed over the
    /// processes (`None` in other modes).
    #[serde(default)]
    pub agent_reports: Option<u64>,
}

/// Runs every case (validated first), each as interleaved rounds, starting
/// worker processes with `worker`.
pub fn run_cothread_cases(
    cases: &[CoParams],
    worker: &WorkerCommand,
    agent: &CoAgent,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Vec<CoReport>, CoThreadsError> {
    for c in cases {
        c.validate()?;
    }
    if cases.iter().any(|c| c.modes.contains(&CoMode::CoThread)) {
        // Refuse a bad DFSCHED_* here rather than in every worker.
        dfsched::RuntimeConfig::from_env().map_err(CoThreadsError::Runtime)?;
    }
    let allowed = crate::os::get_affinity().map_err(|e| CoThreadsError::Runtime(e.source))?;
    let machine = Machine::describe(&allowed);
    let total = cases.iter().map(|c| c.repeat * c.modes.len()).sum();
    let mut rounds = Rounds::new(cases.len(), total, progress);
    let mut reports = Vec::new();
    for (case, p) in cases.iter().enumerate() {
        let order = (&p.modes[..], p.repeat, p.seed);
        let run_mode = |mode, round| run_once(p, mode, round, worker);
        let runs = rounds.run_case(case, order, run_mode, |r| r.elapsed_s)?;
        reports.push(CoReport::new(
            p.clone(),
            machine.clone(),
            agent.clone(),
            runs,
        ));
    }
    Ok(reports)
}

/// A worker's failure as the benchmark's error.
fn co_error(e: WorkerError) -> CoThreadsError {
    match e {
        WorkerError::Start {
            index,
            program,
            source,
            ..
        } => CoThreadsError::Start {
            process: index,
            program,
            source,
        },
        WorkerError::Failed { index, detail, .. } => CoThreadsError::Worker {
            process: index,
            detail,
        },
    }
}

/// An exit status as [`CoThreadsError::Worker`] says it (that error itself
/// points at stderr).
fn exited(status: ExitStatus) -> String {
    format!("it exited with {status}")
}

/// Runs one mode once: starts the workers ([`crate::workers`]: all ready
/// before any is told to go; killed and reaped on any error), collects and
/// checks their results.
fn run_once(
    p: &CoParams,
    mode: CoMode,
    round: usize,
    worker: &WorkerCommand,
) -> Result<CoRun, CoThreadsError> {
    let mut workers = Workers::new(exited);
    for process in 0..p.processes {
        let mut cmd = Command::new(&worker.program);
        if mode == CoMode::CoThread {
            cmd.envs(worker.co_thread_env.iter().map(|(k, v)| (k, v)));
        }
        cmd.args(&worker.args)
            .arg("--mode")
            .arg(mode.as_str())
            .arg("--process")
            .arg(process.to_string())
            .arg("--threads")
            .arg(p.threads.to_string())
            .arg("--shared-bytes")
            .arg(p.shared_bytes.to_string())
            .arg("--seconds")
            .arg(p.seconds.to_string());
        workers
            .start(cmd, format!("worker process {process}"))
            .map_err(co_error)?;
    }
    workers.ready_go().map_err(co_error)?;
    let results: Vec<WorkerResult> = workers.finish().map_err(co_error)?;
    for (i, r) in results.iter().enumerate() {
        if r.ops.len() != p.threads {
            let detail = format!("{} thread counts for {} threads", r.ops.len(), p.threads);
            return Err(co_error(workers.failed(i, detail)));
        }
    }
    let per_process: Vec<u64> = results.iter().map(|r| r.ops.iter().sum()).collect();
    let total: u64 = per_process.iter().sum();
    let mean = total as f64 / per_process.len() as f64;
    let (lo, hi) = (
        *per_process.iter().min().expect("at least one process"),
        *per_process.iter().max().expect("at least one process"),
    );
    let elapsed_s = median(&results.iter().map(|r| r.elapsed_s).collect::<Vec<_>>())
        .expect("at least one process");
    let agent_reports = (mode == CoMode::CoThread)
        .then(|| results.iter().map(|r| r.agent_reports.unwrap_or(0)).sum());
    Ok(CoRun {
        mode,
        round,
        ops_total: total,
        ops_per_process: per_process,
        process_spread: if mean > 0.0 {
            (hi - lo) as f64 / mean
        } else {
            0.0
        },
        elapsed_s,
        ops_per_s: if elapsed_s > 0.0 {
            total as f64 / elapsed_s
        } else {
            0.0
        },
        agent_reports,
    })
}

/// `bench cothreads` on the shared contract ([`crate::suite::Benchmark`]):
/// the worker program and the agent its runs use.
#[derive(Clone, Copy, Debug)]
pub struct CoThreadsBench<'a> {
    /// How to start one worker process.
    pub worker: &'a WorkerCommand,
    /// The agent the co-thread runs share.
    pub agent: &'a CoAgent,
}

impl crate::suite::Benchmark for CoThreadsBench<'_> {
    type Params = CoParams;
    type Report = CoReport;
    type Error = CoThreadsError;
    const FAILED: &'static str = "the co-thread benchmark failed";

    fn run_cases(
        &self,
        cases: &[CoParams],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<CoReport>, CoThreadsError> {
        run_cothread_cases(cases, self.worker, self.agent, progress)
    }

    fn is_usage(e: &CoThreadsError) -> bool {
        matches!(e, CoThreadsError::Params(_))
    }

    fn machine(r: &CoReport) -> &Machine {
        &r.machine
    }

    fn label(r: &CoReport) -> String {
        describe_co_params(&r.params)
    }

    fn render(r: &CoReport) -> String {
        render_co_report(r)
    }

    fn render_grid(g: &CoGridReport) -> String {
        render_co_grid(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_grid_is_table_i() {
        let cells = paper_grid(&CoParams::default(), None, None);
        let shape: Vec<(usize, usize, usize)> = cells
            .iter()
            .map(|c| (c.processes, c.threads, c.shared_bytes))
            .collect();
        assert_eq!(
            shape,
            vec![
                (7, 1, 16384),
                (11, 5, 16384),
                (9, 3, 16384),
                (9, 3, 131072),
                (9, 3, 1048576)
            ]
        );
        assert!(cells.iter().all(|c| c.seconds == PAPER_SECONDS
            && c.repeat == PAPER_REPEAT
            && c.validate().is_ok()));
        let short = paper_grid(&CoParams::default(), Some(0.5), Some(1));
        assert!(short.iter().all(|c| c.seconds == 0.5 && c.repeat == 1));
    }

    #[test]
    fn bad_params_are_refused_naming_the_flag() {
        let with = |f: fn(&mut CoParams)| {
            let mut p = CoParams::default();
            f(&mut p);
            p.validate()
        };
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(with(|p| p.processes = 0), Err(CoParamError::Processes(0)));
        assert_eq!(with(|p| p.threads = 0), Err(CoParamError::Threads(0)));
        assert_eq!(
            with(|p| p.shared_bytes = 100),
            Err(CoParamError::SharedBytes(100))
        );
        assert_eq!(with(|p| p.seconds = 0.0), Err(CoParamError::Seconds(0.0)));
        assert!(matches!(
            with(|p| p.seconds = f64::NAN),
            Err(CoParamError::Seconds(_))
        ));
        assert_eq!(with(|p| p.repeat = 0), Err(CoParamError::Repeat(0)));
        assert_eq!(
            parse_co_modes("vanilla,vanilla"),
            Err(CoParamError::DuplicateMode(CoMode::Vanilla))
        );
        assert_eq!(
            parse_co_modes("fast"),
            Err(CoParamError::UnknownMode("fast".into()))
        );
        assert_eq!(parse_co_modes("co-thread").unwrap(), vec![CoMode::CoThread]);
        assert_eq!(
            parse_co_modes("oracle, split").unwrap(),
            vec![CoMode::Oracle, CoMode::Split]
        );
        let e = parse_co_modes("oracel").unwrap_err().to_string();
        assert!(e.contains("oracle,split"), "{e}");
    }

    #[test]
    fn oracle_deals_processes_evenly_and_split_deals_threads() {
        let cpus = [CpuId(2), CpuId(5)];
        let oracle: Vec<CpuId> = (0..5).map(|i| oracle_cpu(i, &cpus)).collect();
        assert_eq!(oracle, [2, 5, 2, 5, 2].map(CpuId));
        let split: Vec<CpuId> = (0..3).map(|t| split_cpu(0, t, &cpus)).collect();
        assert_eq!(split, [2, 5, 2].map(CpuId));
        let split: Vec<CpuId> = (0..3).map(|t| split_cpu(1, t, &cpus)).collect();
        assert_eq!(split, [5, 2, 5].map(CpuId));
        // One thread per process: dealt like the oracle, not all on cpus[0].
        let ones: Vec<CpuId> = (0..4).map(|i| split_cpu(i, 0, &cpus)).collect();
        assert_eq!(ones, [2, 5, 2, 5].map(CpuId));
        // One CPU: everything on it, in both.
        assert_eq!(oracle_cpu(7, &[CpuId(3)]), CpuId(3));
        assert_eq!(split_cpu(4, 7, &[CpuId(3)]), CpuId(3));
    }
}
