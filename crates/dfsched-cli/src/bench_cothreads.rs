//! `dfsched bench cothreads` (the co-thread paper's test program, §IV,
//! Table I) and its hidden worker `dfsched bench cothreads-worker`, which
//! the benchmark runs once per process by re-executing this binary.

use crate::bench::{print_bench, run_bench};
use crate::Failure;
use anyhow::Context;
use clap::{Args, ValueEnum};
use dfsched_bench::cothreads::{
    idle_exit_secs, paper_grid, parse_co_modes, worker_main, AgentSetting, CoAgent, CoMode,
    CoParams, CoThreadsBench, PrivateAgent, WorkerArgs, WorkerCommand, DEFAULT_PROCESSES,
    DEFAULT_REPEAT, DEFAULT_SECONDS, DEFAULT_SHARED_BYTES, DEFAULT_THREADS,
};

/// Where `bench cothreads` sits in the command tree, for usage errors.
const PATH: &[&str] = &["bench", "cothreads"];

/// The long help of `bench cothreads`.
pub const COTHREADS_LONG_ABOUT: &str = "\
The co-thread test program (co-thread paper §IV, Table I).

PROCESSES processes of THREADS threads each; every thread does read-modify-
writes on its own process's shared data of SHARED_BYTES bytes (one operation:
load and store plus one of each word of one 64-byte line; thread t starts at
line t x lines / THREADS and walks the data, wrapping) for SECONDS seconds.
Reported per mode: operations completed (all processes; median, min, max,
standard deviation), operations per second, and the spread between
processes ((most - fewest) / mean).

The processes are this binary re-executed with a hidden subcommand
(bench cothreads-worker), not forks: each worker starts as a fresh
single-threaded program. All say 'ready' before any is told 'go'.

Modes (all four by default, interleaved per round, order shuffled from
--seed):
  vanilla    the kernel alone
  co-thread  each process starts a dfsched runtime with the co-thread policy
             (DFSCHED_* options apply) and attaches every thread: a process's
             threads are one group, packed on one CPU under heavy load
  oracle     no runtime; process i pins all its threads to allowed CPU
             i mod n (n = CPUs this command may use) before the gate opens:
             perfect co-thread packing, processes dealt evenly -- the best
             co-thread can do
  split      no runtime; thread t of process i pinned to allowed CPU
             (i + t) mod n: every process spread, the worst case for
             sharing, the CPUs as evenly loaded as under oracle
A pin that fails or does not hold fails the worker. With one allowed CPU
oracle and split still run (everything on that CPU) and the report says so.

Ratios. The machine drifts between rounds (on a shared VM by tens of percent
from minute to minute), more than the effect measured. Each round runs every
mode back to back, so each non-vanilla run is divided by the vanilla run of
the same round; the table's 'paired /vanilla' column (JSON: modes.<mode>.
paired_ratio) gives the median, min and max of those per-round ratios. The
'/vanilla' column (JSON: ratios) is the ratio of medians, kept beside it.

Agent (--agent on, the default). A real deployment of co-thread runs with the
coordinator (dfsched run starts one on demand), so the benchmark starts a
private dfsched agent for its whole run (socket in a fresh 0700 directory
under the temporary directory), gives co-thread workers DFSCHED_AGENT=<its
socket>, and stops it and removes the directory at the end, also on errors.
--agent off gives co-thread workers DFSCHED_AGENT=off. If the agent cannot
start, stderr says why and co-thread workers run with DFSCHED_AGENT=off. The
header line and the JSON (agent) say which.

--grid paper runs Table I: 7x1 small, 11x5 small, 9x3 small, 9x3 medium,
9x3 larger, 10 s per run and 3 runs per mode, every mode given: with the
four modes 60 runs of 10 s, about 11 minutes. The paper gives no sizes; we
read small = 16 KiB (half the paper's L1d), medium = 128 KiB (half its L2),
larger = 1 MiB (four L2s, inside its L3).

With no flags: 9 processes x 3 threads, 16 KiB each, 4 s per run, 5 runs per
mode, four modes: 20 runs, about 90 s.

On a KVM guest a wake-up on another vCPU costs tens of µs, and a line that
bounces between vCPUs costs more than between cores of one socket.";

/// The grids `--grid` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CoGridArg {
    /// Table I: 7×1 small, 11×5 small, 9×3 small, 9×3 medium, 9×3 larger;
    /// 10 s per run, 3 runs per mode (four modes: about 11 minutes).
    Paper,
}

/// Flags of `dfsched bench cothreads`.
#[derive(Debug, Args)]
pub struct CothreadsArgs {
    /// Processes [default: 9].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    processes: Option<usize>,

    /// Threads per process [default: 3].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    threads: Option<usize>,

    /// Bytes of shared data per process, a multiple of 64 [default: 16384].
    #[arg(long, value_name = "BYTES", conflicts_with = "grid")]
    shared_bytes: Option<usize>,

    /// Seconds each run works (fractions allowed) [default: 4; with --grid:
    /// 10].
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,

    /// Runs per mode [default: 5; with --grid: 3].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,

    /// Comma-separated modes: vanilla, co-thread, oracle, split.
    #[arg(long, value_name = "LIST", default_value = "vanilla,co-thread,oracle,split", value_parser = parse_mode_list)]
    modes: CoModeList,

    /// A private dfsched agent for the co-thread workers: on or off.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_agent)]
    agent: AgentSetting,

    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,

    /// Run a grid of cases (paper: Table I, about 11 minutes); conflicts
    /// with --processes, --threads and --shared-bytes.
    #[arg(long, value_enum, value_name = "GRID")]
    grid: Option<CoGridArg>,

    /// Seed of the mode order in each round.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,

    /// Also simulate each case on the machine profile PROFILE (default: the
    /// one `dfsched calibrate` wrote) and show each mode's predicted
    /// throughput ratio to vanilla beside the measured one, with the error
    /// (needs the vanilla mode).
    #[arg(long, value_name = "PROFILE", num_args = 0..=1)]
    #[allow(clippy::option_option)] // absent, given bare, or given a path
    predict: Option<Option<std::path::PathBuf>>,
}

/// A parsed `--modes` list.
#[derive(Clone, Debug)]
pub struct CoModeList(Vec<CoMode>);

fn parse_mode_list(s: &str) -> Result<CoModeList, String> {
    parse_co_modes(s).map(CoModeList).map_err(|e| e.to_string())
}

fn parse_agent(s: &str) -> Result<AgentSetting, String> {
    s.parse()
}

/// Flags of the hidden `dfsched bench cothreads-worker`.
#[derive(Debug, Args)]
pub struct WorkerFlags {
    /// vanilla, co-thread, oracle or split.
    #[arg(long, value_parser = parse_one_mode)]
    mode: CoMode,
    /// This worker's index (0-based): its CPU under oracle.
    #[arg(long)]
    process: usize,
    /// Threads.
    #[arg(long)]
    threads: usize,
    /// Shared bytes.
    #[arg(long)]
    shared_bytes: usize,
    /// Seconds of work after "go".
    #[arg(long)]
    seconds: f64,
}

fn parse_one_mode(s: &str) -> Result<CoMode, String> {
    s.parse()
        .map_err(|e: dfsched_bench::cothreads::CoParamError| e.to_string())
}

impl CothreadsArgs {
    fn cases(&self) -> Result<Vec<CoParams>, Failure> {
        let base = CoParams {
            processes: self.processes.unwrap_or(DEFAULT_PROCESSES),
            threads: self.threads.unwrap_or(DEFAULT_THREADS),
            shared_bytes: self.shared_bytes.unwrap_or(DEFAULT_SHARED_BYTES),
            seconds: self.seconds.unwrap_or(DEFAULT_SECONDS),
            repeat: self.repeat.unwrap_or(DEFAULT_REPEAT),
            modes: self.modes.0.clone(),
            seed: self.seed,
        };
        let cases = match self.grid {
            None => vec![base],
            Some(CoGridArg::Paper) => paper_grid(&base, self.seconds, self.repeat),
        };
        for c in &cases {
            c.validate().map_err(|e| Failure::usage(PATH, e))?;
        }
        Ok(cases)
    }
}

/// Starts the private agent if `--agent on` and a co-thread mode runs;
/// says on stderr when it cannot start.
fn start_agent(
    setting: AgentSetting,
    cases: &[CoParams],
    exe: &std::path::Path,
) -> (Option<PrivateAgent>, CoAgent) {
    let needed = cases.iter().any(|c| c.modes.contains(&CoMode::CoThread));
    match setting {
        AgentSetting::Off => (None, CoAgent::off()),
        AgentSetting::On if !needed => (None, CoAgent::not_started(None)),
        AgentSetting::On => match PrivateAgent::start(exe, idle_exit_secs(cases)) {
            Ok(a) => {
                let info = CoAgent::running(&a);
                (Some(a), info)
            }
            Err(e) => {
                eprintln!(
                    "dfsched bench cothreads: could not start a private agent: {e}; \
                     co-thread workers run without one (DFSCHED_AGENT=off)"
                );
                (None, CoAgent::not_started(Some(e.to_string())))
            }
        },
    }
}

/// Runs `bench cothreads`.
pub fn run(args: CothreadsArgs) -> Result<(), Failure> {
    let cases = args.cases()?;
    if args.predict.is_some() && cases.iter().any(|c| !c.modes.contains(&CoMode::Vanilla)) {
        return Err(Failure::usage(
            PATH,
            "--predict needs the vanilla mode in --modes (it sets the simulated run's length)",
        ));
    }
    // A bad profile fails here, before anything runs.
    let predictor = match &args.predict {
        Some(p) => Some(crate::predict::Predictor::load(p.as_deref())?),
        None => None,
    };
    let exe = std::env::current_exe().context("finding this program to re-execute")?;
    // The guard stops the agent and removes its directory on every path
    // out of here, the error ones included.
    let (agent, agent_info) = start_agent(args.agent, &cases, &exe);
    let worker = WorkerCommand {
        program: exe,
        args: vec!["bench".into(), "cothreads-worker".into()],
        co_thread_env: vec![("DFSCHED_AGENT".into(), agent_info.env_value())],
    };
    let bench = CoThreadsBench {
        worker: &worker,
        agent: &agent_info,
    };
    let reports = run_bench(&bench, PATH, &cases, args.quiet)?;
    if let Some(a) = agent {
        if let Err(e) = a.stop() {
            eprintln!("dfsched bench cothreads: stopping the private agent: {e}");
        }
    }
    let grid = args.grid.map(|CoGridArg::Paper| "paper");
    print_bench::<CoThreadsBench>(
        reports,
        grid,
        args.json,
        predictor.as_ref().map(|p| move |r: &_| p.cothreads(r)),
    )
}

/// Runs the hidden worker: one process of the benchmark.
pub fn run_worker(flags: WorkerFlags) -> Result<(), Failure> {
    let args = WorkerArgs {
        mode: flags.mode,
        process: flags.process,
        threads: flags.threads,
        shared_bytes: flags.shared_bytes,
        seconds: flags.seconds,
    };
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    worker_main(&args, stdin, stdout)
        .context("cothreads worker")
        .map_err(Failure::Run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_flags::{assert_refused, parse};

    fn cases(args: &[&str]) -> Result<Vec<CoParams>, String> {
        parse::<CothreadsArgs>(args)?
            .cases()
            .map_err(Failure::usage_message)
    }

    #[test]
    fn no_flags_is_table_i_test_3() {
        assert_eq!(cases(&[]).unwrap(), vec![CoParams::default()]);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        let bad: &[(&[&str], &str)] = &[
            (&["--processes", "0"][..], "--processes"),
            (&["--threads", "0"], "--threads"),
            (&["--shared-bytes", "100"], "--shared-bytes"),
            (&["--seconds", "0"], "--seconds"),
            (&["--repeat", "0"], "--repeat"),
            (&["--modes", "vanilla,x"], "\"x\""),
            (&["--modes", "oracle,oracle"], "twice"),
            (&["--agent", "maybe"], "on or off"),
            (&["--grid", "paper", "--threads", "2"], "--threads"),
        ];
        assert_refused(cases, bad);
    }

    #[test]
    fn pinned_modes_and_agent_off_parse() {
        let c = cases(&["--modes", "oracle,split"]).unwrap();
        assert_eq!(c[0].modes, vec![CoMode::Oracle, CoMode::Split]);
        let a = parse::<CothreadsArgs>(&["--agent", "off"]).unwrap();
        assert_eq!(a.agent, AgentSetting::Off);
        let a = parse::<CothreadsArgs>(&[]).unwrap();
        assert_eq!(a.agent, AgentSetting::On);
        assert_eq!(a.modes.0, CoMode::ALL.to_vec());
    }

    #[test]
    fn grid_takes_seconds_and_repeat() {
        let c = cases(&["--grid", "paper", "--seconds", "0.5", "--repeat", "1"]).unwrap();
        assert_eq!(c.len(), 5);
        assert!(c.iter().all(|p| p.seconds == 0.5 && p.repeat == 1));
        assert!(
            c.iter().all(|p| p.modes == CoMode::ALL.to_vec()),
            "four modes"
        );
    }
}
