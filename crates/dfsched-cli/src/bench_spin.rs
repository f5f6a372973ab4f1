//! `dfsched bench spin`: the never-worse benchmark (independent CPU-bound
//! threads, nothing shared) run plainly and under `dfsched run`. Flags,
//! finding the worker program, progress and output; the benchmark itself is
//! `dfsched_bench::spin`, the worker `src/bin/dfsched-spin-worker.rs`.

use crate::bench::{print_bench, run_bench};
use crate::Failure;
use anyhow::Context;
use clap::{Args, ValueEnum};
use dfsched_bench::spin::{
    locate_worker, paper_grid, parse_spin_modes, SpinBench, SpinCommands, SpinError, SpinMode,
    SpinParams, SpinReport, DEFAULT_PROCESSES, DEFAULT_REPEAT, DEFAULT_SECONDS,
};
use std::path::PathBuf;

/// Where `bench spin` sits in the command tree, for usage errors.
const PATH: &[&str] = &["bench", "spin"];

/// The long help of `bench spin`.
pub const SPIN_LONG_ABOUT: &str = "\
The never-worse benchmark: independent CPU-bound threads with no shared data,
run plainly and under `dfsched run`. Nothing is shared, so no placement can
win anything; dfsched must lose nothing (acceptance: >= 0.97 x vanilla
throughput under co-thread and data-affinity, at light and heavy load).

What is measured: PROCESSES worker processes of THREADS threads each. A
thread steps an xorshift64 stream and folds each step into its own 4 KiB,
cache-line-aligned buffer (one operation per step; the buffer is kept with
black_box). Every thread of every worker waits at a start gate; when all
have said 'ready', each worker is told 'go' and its threads count operations
for SECONDS. Reported per mode: operations of all threads (median, min, max,
standard deviation), operations per second, the paired ratio to vanilla, and
how many threads dfsched had narrowed (Cpus_allowed_list at the stop).

The worker is the separate program dfsched-spin-worker, built beside dfsched
by `cargo build --release` (`cargo run` alone builds only dfsched). It holds
no dfsched code, so under `dfsched run` the preloaded libdfsched.so is its
only runtime, as for any unmodified program.

Modes (interleaved: each round runs every mode once, order shuffled from
--seed):
  vanilla        the worker alone
  co-thread      dfsched run --policy co-thread -- dfsched-spin-worker ...
  data-affinity  dfsched run --policy data-affinity -- dfsched-spin-worker ...
A worker that did not run under dfsched in those modes (or did in vanilla)
fails the benchmark. DFSCHED_* variables reach the runtime as usual, and
dfsched run starts (or joins) the per-user agent as it does for any program;
DFSCHED_AGENT=off measures without it.

Why paired ratios: on this shared KVM host the same run drifts by up to
±30 % from one minute to the next. The modes of one round run seconds
apart, so each round's ratio to its own vanilla run cancels most of the
drift; the median of those ratios is the figure to judge, not the ratio of
medians.

With no flags (light load): 1 process x one thread per allowed CPU, 3 s per
run, 5 runs per mode: about 50 s.

--grid paper (n = allowed CPUs; about 4 minutes on 2 CPUs):
  light                        1 x n threads
  heavy, one process           1 x 3n threads
  heavy, several processes     3 x n threads
  light beside outside load    1 x n threads while a background worker of n
                               spinning threads, not under dfsched, runs for
                               the whole cell (the case where co-thread packed
                               a light process onto one CPU in session 2)";

/// The grids `--grid` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SpinGridArg {
    /// Light, heavy (one process), heavy (3 processes), light beside
    /// outside load; about 4 minutes on 2 CPUs.
    Paper,
}

/// Flags of `dfsched bench spin`.
#[derive(Debug, Args)]
pub struct SpinArgs {
    /// Worker processes [default: 1].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    processes: Option<usize>,

    /// Threads per worker process [default: the allowed CPUs].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    threads: Option<usize>,

    /// Threads of a background worker, not under dfsched, spinning for the
    /// whole case (outside load) [default: 0].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    background_threads: Option<usize>,

    /// Seconds each run works (fractions allowed) [default: 3].
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,

    /// Runs per mode [default: 5].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,

    /// Comma-separated modes: vanilla, co-thread, data-affinity.
    #[arg(long, value_name = "LIST", default_value = "vanilla,co-thread,data-affinity", value_parser = parse_mode_list)]
    modes: SpinModeList,

    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,

    /// Run a grid of cases (paper: light, heavy, heavy with 3 processes,
    /// light beside outside load); conflicts with --processes, --threads and
    /// --background-threads.
    #[arg(long, value_enum, value_name = "GRID")]
    grid: Option<SpinGridArg>,

    /// Seed of the mode order in each round.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,

    /// The worker program [default: dfsched-spin-worker beside this
    /// binary].
    #[arg(long, value_name = "PATH")]
    worker: Option<PathBuf>,

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
}

/// A parsed `--modes` list.
#[derive(Clone, Debug)]
pub struct SpinModeList(Vec<SpinMode>);

fn parse_mode_list(s: &str) -> Result<SpinModeList, String> {
    parse_spin_modes(s)
        .map(SpinModeList)
        .map_err(|e| e.to_string())
}

impl SpinArgs {
    /// The cases to run on a machine of `cpus` allowed CPUs, validated.
    fn cases(&self, cpus: usize) -> Result<Vec<SpinParams>, Failure> {
        let light = SpinParams::light(cpus);
        let base = SpinParams {
            processes: self.processes.unwrap_or(DEFAULT_PROCESSES),
            threads: self.threads.unwrap_or(light.threads),
            background_threads: self.background_threads.unwrap_or(0),
            seconds: self.seconds.unwrap_or(DEFAULT_SECONDS),
            repeat: self.repeat.unwrap_or(DEFAULT_REPEAT),
            modes: self.modes.0.clone(),
            seed: self.seed,
        };
        let cases = match self.grid {
            None => vec![base],
            Some(SpinGridArg::Paper) => paper_grid(&base, cpus),
        };
        for c in &cases {
            c.validate().map_err(|e| Failure::usage(PATH, e))?;
        }
        Ok(cases)
    }
}

/// How many CPUs this process may run on (the workers inherit them).
fn allowed_cpus() -> Result<usize, Failure> {
    let allowed = dfsched::sys::get_affinity(0).context("reading this process's allowed CPUs")?;
    Ok(allowed.len())
}

/// Runs `bench spin`.
pub fn run(args: SpinArgs) -> Result<(), Failure> {
    let cases = args.cases(allowed_cpus()?)?;
    let exe = std::env::current_exe().context("finding this program")?;
    let dir = exe.parent().context("this program's directory")?;
    let commands = SpinCommands {
        worker: locate_worker(args.worker.as_deref(), dir).map_err(Failure::from_spin)?,
        dfsched: exe.clone(),
    };
    let reports = run_bench(
        &SpinBench {
            commands: &commands,
        },
        PATH,
        &cases,
        args.quiet,
    )?;
    let grid = args.grid.map(|SpinGridArg::Paper| "paper");
    print_bench::<SpinBench>(reports, grid, args.json, NO_PREDICTION)
}

/// `bench spin` has no simulator prediction.
const NO_PREDICTION: Option<fn(&SpinReport) -> anyhow::Result<crate::predict::Prediction>> = None;

impl Failure {
    /// A benchmark error: bad parameters are usage errors, the rest
    /// failures.
    fn from_spin(e: SpinError) -> Failure {
        let usage = matches!(e, SpinError::Params(_));
        Failure::bench(PATH, usage, e, "the spin benchmark failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_flags::{assert_refused, parse};

    fn cases(args: &[&str], cpus: usize) -> Result<Vec<SpinParams>, String> {
        parse::<SpinArgs>(args)?
            .cases(cpus)
            .map_err(Failure::usage_message)
    }

    #[test]
    fn no_flags_is_light_load_one_thread_per_cpu() {
        assert_eq!(cases(&[], 2).unwrap(), vec![SpinParams::light(2)]);
        assert_eq!(cases(&[], 8).unwrap()[0].threads, 8);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        let bad: &[(&[&str], &str)] = &[
            (&["--processes", "0"][..], "--processes"),
            (&["--threads", "0"], "--threads"),
            (&["--background-threads", "100000"], "--background-threads"),
            (&["--seconds", "0"], "--seconds"),
            (&["--repeat", "0"], "--repeat"),
            (&["--modes", "vanilla,dfsched"], "\"dfsched\""),
            (&["--modes", "vanilla,vanilla"], "twice"),
            (&["--grid", "paper", "--threads", "2"], "--threads"),
        ];
        assert_refused(|args| cases(args, 2), bad);
    }

    #[test]
    fn the_paper_grid_takes_seconds_repeat_and_modes() {
        let c = cases(
            &[
                "--grid",
                "paper",
                "--seconds",
                "0.5",
                "--repeat",
                "1",
                "--modes",
                "vanilla,co-thread",
            ],
            2,
        )
        .unwrap();
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|p| p.seconds == 0.5
            && p.repeat == 1
            && p.modes == [SpinMode::Vanilla, SpinMode::CoThread]));
        assert_eq!(c[3].background_threads, 2);
    }
}
