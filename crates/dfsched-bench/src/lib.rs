//! dfsched-bench: the data-fragment (DF) benchmark of Pinter & Zalmanovici
//! §5.2, run under four placements so that dfsched can be judged against the
//! kernel alone, the best static placement, and the worst. Beside it: the
//! Chat benchmark of §5.1 ([`chat`]) and the co-thread paper's test program
//! ([`cothreads`]), which reuse its start gate (`gate`), interleaved
//! rounds ([`runner::round_order`]), statistics ([`stats`]) and machine
//! description ([`machine`]); and the never-worse benchmark ([`spin`]):
//! independent CPU-bound threads run plainly and under `dfsched run`.
//! `cothreads` and `spin` share their worker processes' ready/go driver
//! ([`workers`]) and per-round paired ratios ([`stats::PairedRatio`]);
//! [`overhead`] measures the runtime's own cost (per-pass CPU, hint
//! latency, CPU share) beside thousands of other threads, on the same
//! worker driver and the tail statistics of [`stats::Tail`].
//!
//! Vocabulary:
//! - a *DF* (data fragment) is a cache-line-aligned buffer that a set of
//!   threads work on together ([`df`]);
//! - a *pass* walks a DF touching one word every `stride_bytes` (default:
//!   one per cache line), writing a `write_ratio` of them ([`df::pass`]);
//! - a *run* starts `threads` threads, places them by a [`Mode`], opens a
//!   start gate and times until the last thread has done its `iterations`
//!   passes ([`runner`]);
//! - a *case* is one parameter set run `repeat` rounds, each round running
//!   every mode once in a seeded order; its [`BenchReport`] gives per mode
//!   the median, min and max wall time, CPU time, context switches,
//!   migrations and progress spread, and the ratios of medians ([`report`]);
//! - a *grid* is a list of cases ([`grid`]: Table 3 of the paper).
//!
//! The modes ([`modes`]): `vanilla` (the kernel alone), `dfsched` (a fresh
//! `dfsched::Runtime` per run, each thread calling `enter(df)` at start and
//! at every DF switch), `oracle` (whole DFs pinned to CPUs, balancing thread
//! counts) and `split` (every DF spread over every CPU: the worst case).
//!
//! ```no_run
//! use dfsched_bench::{run_cases, Mode, Params};
//!
//! let params = Params { threads: 4, iterations: 1000, modes: vec![Mode::Vanilla, Mode::Oracle], ..Params::default() };
//! let reports = run_cases(&[params], &mut |_| {}).expect("bench ran");
//! println!("{}", dfsched_bench::report::render_report(&reports[0]));
//! ```
//!
//! Timing belongs here and never in pass/fail tests: the tests check what
//! ran and where, not how fast. How to run it from the command line, why one
//! access per line is the default, and measured figures: `README.md` beside
//! this crate.

#![warn(missing_docs)]

pub mod calibrate;
pub mod chat;
pub mod compare;
pub mod cothread;
pub mod cothreads;
pub mod df;
mod gate;
pub mod grid;
pub mod machine;
pub mod modes;
mod os;
pub mod overhead;
pub mod params;
pub mod report;
pub mod runner;
pub mod spin;
pub mod stats;
pub mod suite;
pub mod workers;

pub use grid::Grid;

/// A fresh directory of ours under the system temp dir, named `PREFIX` and
/// random letters, removed when the handle is dropped: created by `mkdir`
/// (which fails if the name exists) with mode 0700, asked for explicitly
/// because `tempfile` otherwise leaves a directory's mode to the umask. No
/// other user can have made it or a symlink in its place first, nor read or
/// change what is put in it.
pub fn private_temp_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
}
pub use machine::Machine;
pub use os::OsError;
pub use params::{parse_modes, Mode, ParamError, Params, DEFAULT_MODES};
pub use report::{BenchReport, GridReport, ModeReport, Ratios};
pub use runner::{run_cases, DfBench, Progress, RunRecord, ThreadRecord};
pub use suite::{Benchmark, GridOf};

/// Why a benchmark did not complete.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The parameters were refused; nothing ran.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// Reading the process's own state failed.
    #[error(transparent)]
    Os(OsError),
    /// The dfsched runtime could not be configured or started.
    #[error("dfsched runtime: {0}")]
    Runtime(#[source] dfsched::Error),
    /// A worker thread could not be created.
    #[error("could not start a worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// A worker could not place itself or read its counters.
    #[error("worker thread {thread}: {source}")]
    Place {
        /// The worker's index.
        thread: usize,
        /// What failed.
        #[source]
        source: modes::PlaceError,
    },
    /// A worker thread panicked.
    #[error("worker thread {0} panicked")]
    WorkerPanicked(usize),
    /// The recording file of a `dfsched-record` run could not be replaced.
    #[error("the recording {0} cannot be replaced: {1}")]
    Record(std::path::PathBuf, #[source] std::io::Error),
    /// No private directory for a `dfsched-record` run's own recording
    /// could be made in the system temp dir (named).
    #[error("cannot make a private directory for the recording in {0}: {1}")]
    RecordDir(std::path::PathBuf, #[source] std::io::Error),
}

impl BenchError {
    /// Whether this is bad input (a usage error) rather than a failure while
    /// running; the CLI exits 2 for the former.
    pub fn is_usage(&self) -> bool {
        matches!(self, BenchError::Params(_))
    }
}
