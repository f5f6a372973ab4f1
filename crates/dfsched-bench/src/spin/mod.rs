//! The never-worse benchmark (`dfsched bench spin`): independent CPU-bound
//! threads with nothing shared, run plainly and under `dfsched run`. No
//! placement can win anything here, so every mode should match vanilla;
//! the acceptance line asks for at least 0.97 × vanilla throughput
//! under `co-thread` and `data-affinity`, at light and at heavy load.
//!
//! Vocabulary:
//! - a *worker* is one process of the separate program `dfsched-spin-worker`
//!   (a binary of `dfsched-cli` holding no dfsched code; its doc says why):
//!   THREADS threads, each stepping an xorshift stream into a private 4 KiB
//!   buffer; it counts *operations* (steps) for SECONDS after a start gate;
//! - a *run* starts PROCESSES workers in one mode, waits until every one
//!   says "ready", tells each "go", and sums their operations ([`procs`]);
//! - a *round* runs every mode once, in an order shuffled from the seed
//!   ([`crate::runner::round_order`]); a *case* is `repeat` rounds; a
//!   *grid* is a list of cases ([`paper_grid`]).
//!
//! Modes ([`SpinMode`]): `vanilla` runs the worker as is; `co-thread` and
//! `data-affinity` run it as `dfsched run --policy X -- dfsched-spin-worker
//! …`, the real `LD_PRELOAD` path an unmodified program takes, so the
//! preloaded `libdfsched.so` is the worker's one runtime. The worker says
//! whether it ran under dfsched and the run is refused if that is not what
//! the mode asked for: a missing library cannot pass for a good result.
//! `dfsched run` starts or joins the per-user agent as it does for any
//! program (`DFSCHED_AGENT=off` in the environment measures without it).
//!
//! Background load (`background_threads` > 0): one more worker, never under
//! dfsched, spins that many threads for the whole case, started before its
//! first run and stopped after its last: the outside load that made
//! co-thread pack a light process onto one CPU in session 2.
//!
//! Why paired ratios ([`crate::stats::PairedRatio`]): on the shared KVM host the
//! same run drifts by ±30 % from one minute to the next, far more than the
//! 3 % to be judged; the modes of one round run within seconds of one
//! another, so a round's ratio to its own vanilla run cancels most of the
//! drift. The median of those ratios is the figure to judge.

pub mod procs;
pub mod report;

use crate::machine::Machine;
use crate::runner::{Progress, Rounds};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use procs::{SpinCommands, WorkerResult, WORKER_NAME};
pub use report::{
    paired_ratio, render_spin_grid, render_spin_report, SpinGridReport, SpinModeReport, SpinReport,
    SpinRun,
};

/// Default worker processes.
pub const DEFAULT_PROCESSES: usize = 1;
/// Default seconds each run works.
pub const DEFAULT_SECONDS: f64 = 3.0;
/// Default runs per mode.
pub const DEFAULT_REPEAT: usize = 5;
/// At most this many worker processes.
pub const MAX_PROCESSES: usize = 64;
/// At most this many threads per worker (and in the background).
pub const MAX_THREADS: usize = 1024;
/// At most this many seconds per run.
pub const MAX_SECONDS: f64 = 3600.0;
/// At most this many runs per mode.
pub const MAX_REPEAT: usize = 1000;

/// How a run's workers are started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpinMode {
    /// The worker alone: no dfsched.
    Vanilla,
    /// `dfsched run --policy co-thread -- worker`.
    CoThread,
    /// `dfsched run --policy data-affinity -- worker`.
    DataAffinity,
}

crate::params::bench_modes!(SpinMode, SpinParamError::UnknownMode {
    Vanilla => "vanilla",
    CoThread => "co-thread",
    DataAffinity => "data-affinity",
});

impl SpinMode {
    /// The `dfsched run --policy` it runs under, if any.
    pub fn policy(self) -> Option<&'static str> {
        match self {
            SpinMode::Vanilla => None,
            SpinMode::CoThread => Some("co-thread"),
            SpinMode::DataAffinity => Some("data-affinity"),
        }
    }
}

/// Parses a comma-separated mode list; empty, unknown or repeated names
/// are errors.
pub fn parse_spin_modes(list: &str) -> Result<Vec<SpinMode>, SpinParamError> {
    crate::params::parse_mode_list(list, SpinParamError::DuplicateMode, SpinParamError::NoModes)
}

/// Why parameters were refused. Nothing was run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpinParamError {
    /// `--processes` out of range.
    #[error("--processes {0} is not between 1 and {MAX_PROCESSES}")]
    Processes(usize),
    /// `--threads` out of range.
    #[error("--threads {0} is not between 1 and {MAX_THREADS}")]
    Threads(usize),
    /// `--background-threads` out of range.
    #[error("--background-threads {0} is not between 0 and {MAX_THREADS}")]
    Background(usize),
    /// `--seconds` out of range.
    #[error("--seconds {0} is not above 0 and at most {MAX_SECONDS}")]
    Seconds(f64),
    /// `--repeat` out of range.
    #[error("--repeat {0} is not between 1 and {MAX_REPEAT}")]
    Repeat(usize),
    /// No mode.
    #[error("--modes names no mode (choose from vanilla,co-thread,data-affinity)")]
    NoModes,
    /// Unknown mode.
    #[error("unknown mode {0:?} (choose from vanilla,co-thread,data-affinity)")]
    UnknownMode(String),
    /// A mode listed twice.
    #[error("mode {0} is listed twice in --modes")]
    DuplicateMode(SpinMode),
}

/// Why the benchmark did not complete.
#[derive(Debug, thiserror::Error)]
pub enum SpinError {
    /// Bad parameters; nothing ran.
    #[error(transparent)]
    Params(#[from] SpinParamError),
    /// The process's allowed CPUs could not be read.
    #[error(transparent)]
    Os(crate::OsError),
    /// The worker program is not where it was looked for.
    #[error(
        "the worker program {} is missing: it is a binary of dfsched-cli, built by \
         `cargo build --release` (`cargo run` alone builds only dfsched), or give --worker PATH",
        .0.display()
    )]
    WorkerMissing(PathBuf),
    /// A process could not be started.
    #[error("could not start {what} ({program}): {source}")]
    Start {
        /// Which process (`worker process 2`, `the background load`).
        what: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A process failed or broke the protocol.
    #[error("{what} ({mode}) failed: {detail}")]
    Worker {
        /// Which process.
        what: String,
        /// The mode it ran in.
        mode: SpinMode,
        /// What the parent saw.
        detail: String,
    },
}

/// One case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpinParams {
    /// Worker processes per run.
    pub processes: usize,
    /// Threads per worker.
    pub threads: usize,
    /// Threads of the background worker (never under dfsched) spinning for
    /// the whole case; 0: none.
    pub background_threads: usize,
    /// Seconds each run works.
    pub seconds: f64,
    /// Runs per mode.
    pub repeat: usize,
    /// Modes.
    pub modes: Vec<SpinMode>,
    /// Seed of the per-round mode order.
    pub seed: u64,
}

impl SpinParams {
    /// The default case on a machine of `cpus` allowed CPUs: light load,
    /// one worker of one thread per CPU.
    pub fn light(cpus: usize) -> SpinParams {
        SpinParams {
            processes: DEFAULT_PROCESSES,
            threads: cpus.max(1),
            background_threads: 0,
            seconds: DEFAULT_SECONDS,
            repeat: DEFAULT_REPEAT,
            modes: SpinMode::ALL.to_vec(),
            seed: 1,
        }
    }

    /// Checks every limit.
    pub fn validate(&self) -> Result<(), SpinParamError> {
        if !(1..=MAX_PROCESSES).contains(&self.processes) {
            return Err(SpinParamError::Processes(self.processes));
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(SpinParamError::Threads(self.threads));
        }
        if self.background_threads > MAX_THREADS {
            return Err(SpinParamError::Background(self.background_threads));
        }
        if !(self.seconds > 0.0 && self.seconds <= MAX_SECONDS) {
            return Err(SpinParamError::Seconds(self.seconds));
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return Err(SpinParamError::Repeat(self.repeat));
        }
        crate::params::check_mode_list(
            &self.modes,
            SpinParamError::DuplicateMode,
            SpinParamError::NoModes,
        )
    }

    /// Runnable threads of the case (workers and background; the workers'
    /// waiting main threads left out) per allowed CPU, in thousandths: at
    /// most 1000 is light load, from 2000 on dfsched calls it heavy.
    pub fn load_milli(&self, cpus: usize) -> usize {
        (self.processes * self.threads + self.background_threads) * 1000 / cpus.max(1)
    }
}

/// The `--grid paper` cells on a machine of `cpus` allowed CPUs (n), each
/// with `base`'s seconds, repeat, modes and seed:
///
/// | cell | processes × threads | background | load |
/// |---|---|---|---|
/// | light | 1 × n | 0 | one thread per CPU |
/// | heavy, one process | 1 × 3n | 0 | 3 per CPU |
/// | heavy, several processes | 3 × n | 0 | 3 per CPU |
/// | light beside outside load | 1 × n | n | 2 per CPU, half not ours |
pub fn paper_grid(base: &SpinParams, cpus: usize) -> Vec<SpinParams> {
    let n = cpus.max(1);
    [(1, n, 0), (1, 3 * n, 0), (3, n, 0), (1, n, n)]
        .into_iter()
        .map(|(processes, threads, background_threads)| SpinParams {
            processes,
            threads,
            background_threads,
            ..base.clone()
        })
        .collect()
}

/// Where the worker program is: `explicit` if given, else
/// [`WORKER_NAME`] in `exe_dir` (beside the dfsched binary, where cargo
/// builds both). Missing is an error naming the build command.
pub fn locate_worker(explicit: Option<&Path>, exe_dir: &Path) -> Result<PathBuf, SpinError> {
    let path = explicit.map_or_else(|| exe_dir.join(WORKER_NAME), Path::to_path_buf);
    if path.is_file() {
        Ok(path)
    } else {
        Err(SpinError::WorkerMissing(path))
    }
}

/// Validates every case, then runs them in order, each as interleaved
/// rounds; `progress` hears about every finished run.
pub fn run_spin_cases(
    cases: &[SpinParams],
    commands: &SpinCommands,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Vec<SpinReport>, SpinError> {
    for c in cases {
        c.validate()?;
    }
    if !commands.worker.is_file() {
        return Err(SpinError::WorkerMissing(commands.worker.clone()));
    }
    let allowed = crate::os::get_affinity().map_err(SpinError::Os)?;
    let machine = Machine::describe(&allowed);
    let total = cases.iter().map(|c| c.repeat * c.modes.len()).sum();
    let mut rounds = Rounds::new(cases.len(), total, progress);
    let mut reports = Vec::with_capacity(cases.len());
    for (case, p) in cases.iter().enumerate() {
        let background = match p.background_threads {
            0 => None,
            n => Some(procs::Background::start(commands, n)?),
        };
        let order = (&p.modes[..], p.repeat, p.seed);
        let run_mode = |mode: SpinMode, round| -> Result<SpinRun, SpinError> {
            let run = procs::run_once(p, mode, round, commands, &allowed)?;
            tracing::debug!(
                case,
                round,
                mode = mode.as_str(),
                ops = run.ops_total,
                ops_per_s = run.ops_per_s,
                "spin run finished"
            );
            Ok(run)
        };
        let runs = rounds.run_case(case, order, run_mode, |r| r.elapsed_s)?;
        let background_ops = background.map(procs::Background::stop).transpose()?;
        reports.push(SpinReport::new(
            p.clone(),
            machine.clone(),
            background_ops,
            runs,
        ));
    }
    Ok(reports)
}

/// `bench spin` on the shared contract ([`crate::suite::Benchmark`]): the
/// programs its runs start.
#[derive(Clone, Copy, Debug)]
pub struct SpinBench<'a> {
    /// The worker and `dfsched` binaries.
    pub commands: &'a SpinCommands,
}

impl crate::suite::Benchmark for SpinBench<'_> {
    type Params = SpinParams;
    type Report = SpinReport;
    type Error = SpinError;
    const FAILED: &'static str = "the spin benchmark failed";

    fn run_cases(
        &self,
        cases: &[SpinParams],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<SpinReport>, SpinError> {
        run_spin_cases(cases, self.commands, progress)
    }

    fn is_usage(e: &SpinError) -> bool {
        matches!(e, SpinError::Params(_))
    }

    fn machine(r: &SpinReport) -> &Machine {
        &r.machine
    }

    fn label(r: &SpinReport) -> String {
        report::describe_spin_params(&r.params)
    }

    fn render(r: &SpinReport) -> String {
        render_spin_report(r)
    }

    fn render_grid(g: &SpinGridReport) -> String {
        render_spin_grid(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_grid_scales_with_the_cpus() {
        let base = SpinParams::light(2);
        let shape = |cpus| -> Vec<(usize, usize, usize)> {
            paper_grid(&base, cpus)
                .iter()
                .map(|c| (c.processes, c.threads, c.background_threads))
                .collect()
        };
        assert_eq!(
            shape(2),
            vec![(1, 2, 0), (1, 6, 0), (3, 2, 0), (1, 2, 2)],
            "light, heavy one process, heavy 3 processes, light beside outside load"
        );
        assert_eq!(shape(8)[2], (3, 8, 0));
        let loads: Vec<usize> = paper_grid(&base, 2)
            .iter()
            .map(|c| c.load_milli(2))
            .collect();
        assert_eq!(loads, vec![1000, 3000, 3000, 2000]);
        assert!(paper_grid(&base, 2).iter().all(|c| c.validate().is_ok()
            && c.seconds == DEFAULT_SECONDS
            && c.modes == SpinMode::ALL));
    }

    #[test]
    fn bad_params_are_refused_naming_the_flag() {
        let with = |f: fn(&mut SpinParams)| {
            let mut p = SpinParams::light(2);
            f(&mut p);
            p.validate()
        };
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(with(|p| p.processes = 0), Err(SpinParamError::Processes(0)));
        assert_eq!(with(|p| p.threads = 0), Err(SpinParamError::Threads(0)));
        assert_eq!(
            with(|p| p.background_threads = MAX_THREADS + 1),
            Err(SpinParamError::Background(MAX_THREADS + 1))
        );
        assert_eq!(with(|p| p.seconds = 0.0), Err(SpinParamError::Seconds(0.0)));
        assert!(matches!(
            with(|p| p.seconds = f64::INFINITY),
            Err(SpinParamError::Seconds(_))
        ));
        assert_eq!(with(|p| p.repeat = 0), Err(SpinParamError::Repeat(0)));
        assert_eq!(
            with(|p| p.modes = vec![SpinMode::CoThread, SpinMode::CoThread]),
            Err(SpinParamError::DuplicateMode(SpinMode::CoThread))
        );
    }

    #[test]
    fn mode_lists_parse_and_refuse_unknown_and_repeated_names() {
        assert_eq!(
            parse_spin_modes("data-affinity, vanilla").unwrap(),
            vec![SpinMode::DataAffinity, SpinMode::Vanilla]
        );
        assert_eq!(
            parse_spin_modes("vanilla,dfsched"),
            Err(SpinParamError::UnknownMode("dfsched".into()))
        );
        assert_eq!(parse_spin_modes(" , "), Err(SpinParamError::NoModes));
        assert_eq!(
            parse_spin_modes("co-thread,co-thread"),
            Err(SpinParamError::DuplicateMode(SpinMode::CoThread))
        );
        assert_eq!(SpinMode::CoThread.policy(), Some("co-thread"));
        assert_eq!(SpinMode::Vanilla.policy(), None);
    }

    #[test]
    fn a_missing_worker_is_an_error_naming_the_build_command() {
        let dir = std::env::temp_dir();
        let e = locate_worker(None, &dir.join("no-such-dir")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(WORKER_NAME), "{msg}");
        assert!(msg.contains("cargo build --release"), "{msg}");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(locate_worker(Some(&exe), &dir).unwrap(), exe);
    }
}
