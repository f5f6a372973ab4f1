//! `dfsched`: the command-line face of dfsched.
//!
//! ```text
//! dfsched [-v…] bench df [--threads N] [--dfs N] … [--json] [--grid paper]
//! dfsched [-v…] bench overhead [--quick] [--others LIST] [--own LIST] … [--json]
//! dfsched [-v…] bench topology [--shape NxLxCxS] [--repeat N] [--json]
//! dfsched [-v…] topology [--json] [--sysfs-root PATH]
//! dfsched [-v…] calibrate [--output PATH] [--quick] [--json]
//! dfsched [-v…] sim closed-network|figure|pinter-example|df-bench|partition …
//! dfsched [-v…] sim smt [--workload KIND [ARG]] [--contexts N] … [--json] [--grid paper]
//! dfsched [-v…] sim replay FILE… --cpus N [--nodes N --llcs N --smt N] [--machine PROFILE] [--json]
//! dfsched [-v…] record inspect FILE [--json]
//! dfsched [-v…] model reload|mva …
//! dfsched [-v…] trace import --out FILE [--skip N] [--accesses N] < lackey.txt
//! dfsched [-v…] profile [--out FILE] [--interval N] … -- PROG [ARGS…]
//! dfsched [-v…] smt-pair --profile FILE --pid PID [--once] [--dry-run]
//! dfsched [-v…] agent [--socket PATH] [--foreground | --status | --stop]
//! dfsched [-v…] run [--policy P] [--rules FILE] … -- PROGRAM [ARGS…]
//! dfsched [-v…] attach PID [--policy P] [--rules FILE] [--socket PATH] [--json]
//! dfsched [-v…] detach PID [--socket PATH] [--json]
//! dfsched [-v…] compare [--repeat N] [--policies LIST] [--json] [--export-json F] [--export-markdown F] -- CMD [ARGS…]
//! dfsched [-v…] agent [--socket PATH] [--foreground | --status | --stop] [--metrics ADDR]
//! dfsched [-v…] top [--socket PATH] [--once [--json]] [--sort KEY] [--filter TEXT]
//! dfsched [-v…] scx [--policy P] [--partial|--all] [--scheduler PATH] [--once] [--json]
//! ```
//!
//! Exit codes: 0 success; 1 a failure while running (with the error and its
//! causes on stderr); 2 bad usage (clap's convention), in which case nothing
//! was run. Output meant for programs (`--json`) goes to stdout alone;
//! progress and logs go to stderr. Only this binary installs a tracing
//! subscriber (`-v` info, `-vv` debug, `-vvv` trace; `RUST_LOG` overrides).

#![warn(missing_docs)]

mod agent;
mod bench;
mod bench_chat;
mod bench_cothreads;
mod bench_overhead;
mod bench_spin;
mod bench_topology;
mod calibrate;
mod cmd_attach;
mod cmd_compare;
mod cmd_engine_replay;
mod cmd_generate;
mod cmd_model;
mod cmd_profile;
mod cmd_record;
mod cmd_scx;
mod cmd_sim;
mod cmd_sim_queue;
mod cmd_sim_replay;
mod cmd_sim_rq;
mod cmd_sim_smt;
mod cmd_smt_pair;
mod cmd_trace;
mod plot;
mod predict;
mod rules_file;
mod run;
#[cfg(test)]
mod test_flags;
mod top;
mod topology;

use clap::{ArgAction, CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// Data-affinity scheduling for Linux: threads that work on the same data
/// run where that data already is.
#[derive(Debug, Parser)]
#[command(name = "dfsched", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Log to stderr: -v info, -vv debug, -vvv trace (RUST_LOG overrides).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workload benchmark comparing dfsched with other placements.
    Bench {
        #[command(subcommand)]
        bench: BenchCommand,
    },
    /// Show the CPUs, their cache domains and the allowed CPU set, as the
    /// dfsched runtime sees them.
    Topology(topology::TopologyArgs),
    /// Simulate scheduling policies on a virtual machine of any size.
    Sim(cmd_sim::SimArgs),
    /// Run or query the per-user agent that coordinates processes under
    /// dfsched (shared load view, sharing detection).
    Agent(agent::AgentArgs),
    /// Evaluate the papers' analytic models.
    Model(cmd_model::ModelArgs),
    /// Recordings of runs (`dfsched run --record`, `DFSCHED_RECORD`).
    Record(cmd_record::RecordArgs),
    /// Replay an engine log (`DFSCHED_ENGINE_LOG`) through dfsched's engine
    /// and compare its decisions: 0 identical, 1 different, 2 not a log.
    #[command(long_about = cmd_engine_replay::ENGINE_REPLAY_LONG_ABOUT)]
    EngineReplay(cmd_engine_replay::EngineReplayArgs),
    /// Memory traces of real programs for `sim smt` (from Valgrind lackey).
    Trace(cmd_trace::TraceArgs),
    /// A program's per-thread cache activity profile for the smt-pair
    /// placement (offline, under Valgrind lackey: slow).
    Profile(cmd_profile::ProfileArgs),
    /// Pin a running process's threads so that complementary activity
    /// profiles share SMT siblings (needs SMT; see `dfsched profile`).
    SmtPair(cmd_smt_pair::SmtPairArgs),
    /// A live view of every program under dfsched, through the agent: per
    /// CPU our load and others', per process and group their policy, home,
    /// members, moves and last balancer pass.
    Top(top::TopArgs),
    /// Run an unmodified program under dfsched (LD_PRELOAD of libdfsched.so).
    #[command(long_about = run::LONG_ABOUT)]
    Run(run::RunArgs),
    /// Place the threads of a running process from outside (through the
    /// agent), and keep them placed until `dfsched detach`.
    #[command(long_about = cmd_attach::ATTACH_LONG_ABOUT)]
    Attach(cmd_attach::AttachArgs),
    /// Give an attached process's threads the masks they had before
    /// `dfsched attach` back.
    Detach(cmd_attach::DetachArgs),
    /// Try dfsched on your own command: plain and under each policy, in
    /// interleaved paired rounds, with ratios and intervals.
    #[command(long_about = cmd_compare::COMPARE_LONG_ABOUT)]
    Compare(cmd_compare::CompareArgs),
    /// Load dfsched's sched_ext scheduler, show its state, unload it on
    /// SIGINT/SIGTERM.
    #[command(long_about = cmd_scx::SCX_LONG_ABOUT)]
    Scx(cmd_scx::ScxArgs),
    /// Measure this machine's costs and write a machine profile for the
    /// simulator.
    #[command(long_about = calibrate::CALIBRATE_LONG_ABOUT)]
    Calibrate(calibrate::CalibrateArgs),
    /// Manual pages and shell completions (run by scripts/install.sh).
    #[command(hide = true)]
    Generate(cmd_generate::GenerateArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The data-fragment benchmark (Pinter & Zalmanovici §5.2).
    #[command(long_about = bench::DF_LONG_ABOUT)]
    Df(bench::DfArgs),
    /// The Chat benchmark (Pinter & Zalmanovici §5.1): rooms of 20 users
    /// over TCP on loopback.
    #[command(long_about = bench_chat::CHAT_LONG_ABOUT)]
    Chat(bench_chat::ChatArgs),
    /// The co-thread test program (co-thread paper §IV, Table I).
    #[command(long_about = bench_cothreads::COTHREADS_LONG_ABOUT)]
    Cothreads(bench_cothreads::CothreadsArgs),
    /// One process of `bench cothreads` (run by it, not by people).
    #[command(hide = true)]
    CothreadsWorker(bench_cothreads::WorkerFlags),
    /// The never-worse benchmark: independent CPU-bound threads, nothing
    /// shared, plainly and under `dfsched run`.
    #[command(long_about = bench_spin::SPIN_LONG_ABOUT)]
    Spin(bench_spin::SpinArgs),
    /// What the runtime costs: per-pass CPU, hint latency and CPU share
    /// beside thousands of other threads and with thousands of its own.
    #[command(long_about = bench_overhead::OVERHEAD_LONG_ABOUT)]
    Overhead(bench_overhead::OverheadArgs),
    /// What `dfsched topology` costs on a sysfs fixture of thousands of
    /// CPUs (8,192 by default): medians of the process and of its parts.
    #[command(long_about = bench_topology::TOPOLOGY_LONG_ABOUT)]
    Topology(bench_topology::TopologyBenchArgs),
    /// The hinting program of `bench overhead` (run by it, not by people).
    #[command(hide = true)]
    OverheadHinter(bench_overhead::HinterFlags),
    /// The other threads of `bench overhead` (run by it, not by people).
    #[command(hide = true)]
    OverheadOthers(bench_overhead::OthersFlags),
}

/// A failure, and whether it was the user's input (exit 2) or not (exit 1).
pub(crate) enum Failure {
    /// Bad input; nothing ran. The message is shown with the usage line of
    /// the subcommand at `path` (e.g. `["bench", "df"]`).
    Usage {
        /// The subcommand whose usage to show.
        path: &'static [&'static str],
        /// What is wrong.
        msg: String,
    },
    /// Something failed while running.
    Run(anyhow::Error),
}

impl Failure {
    /// `e` as bad input to the subcommand at `path`, with `e`'s message.
    pub(crate) fn usage(path: &'static [&'static str], e: impl std::fmt::Display) -> Failure {
        Failure::Usage {
            path,
            msg: e.to_string(),
        }
    }

    /// A benchmark's error: with `usage` (its parameters were refused; the
    /// error is transparent, so its message is theirs) bad input to the
    /// subcommand at `path`, otherwise a failure under `context`.
    pub(crate) fn bench<E>(
        path: &'static [&'static str],
        usage: bool,
        e: E,
        context: &'static str,
    ) -> Failure
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if usage {
            Failure::usage(path, e)
        } else {
            Failure::Run(anyhow::Error::new(e).context(context))
        }
    }

    /// The message of a usage error (tests of argument handling); panics
    /// on any other failure.
    #[cfg(test)]
    pub(crate) fn usage_message(self) -> String {
        match self {
            Failure::Usage { msg, .. } => msg,
            Failure::Run(e) => panic!("not a usage error: {e}"),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Run(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let result = match cli.command {
        Command::Bench {
            bench: BenchCommand::Df(args),
        } => bench::run(args),
        Command::Bench {
            bench: BenchCommand::Chat(args),
        } => bench_chat::run(args),
        Command::Bench {
            bench: BenchCommand::Cothreads(args),
        } => bench_cothreads::run(args),
        Command::Bench {
            bench: BenchCommand::CothreadsWorker(flags),
        } => bench_cothreads::run_worker(flags),
        Command::Bench {
            bench: BenchCommand::Spin(args),
        } => bench_spin::run(args),
        Command::Bench {
            bench: BenchCommand::Overhead(args),
        } => bench_overhead::run(args),
        Command::Bench {
            bench: BenchCommand::Topology(args),
        } => bench_topology::run(args),
        Command::Bench {
            bench: BenchCommand::OverheadHinter(flags),
        } => bench_overhead::run_hinter(flags),
        Command::Bench {
            bench: BenchCommand::OverheadOthers(flags),
        } => bench_overhead::run_others(flags),
        Command::Topology(args) => topology::run(args),
        Command::Sim(args) => cmd_sim::run(args).map_err(|e| {
            // Parameters the simulator refuses up front are bad input.
            match e.downcast_ref::<dfsched_sim::df_bench::DfBenchError>() {
                Some(p @ dfsched_sim::df_bench::DfBenchError::Param { .. }) => {
                    Failure::usage(&["sim", "df-bench"], p)
                }
                _ => Failure::Run(e),
            }
        }),
        Command::Agent(args) => agent::run(args),
        Command::Model(args) => cmd_model::run(args).map_err(Failure::Run),
        Command::Record(args) => cmd_record::run(args).map_err(Failure::Run),
        Command::EngineReplay(args) => cmd_engine_replay::run(args),
        Command::Trace(args) => cmd_trace::run(args).map_err(Failure::Run),
        Command::Profile(args) => cmd_profile::run(args).map_err(Failure::Run),
        Command::SmtPair(args) => cmd_smt_pair::run(args).map_err(Failure::Run),
        Command::Run(args) => run::run(args),
        Command::Attach(args) => cmd_attach::run_attach(args),
        Command::Detach(args) => cmd_attach::run_detach(args),
        Command::Compare(args) => cmd_compare::run(args),
        Command::Top(args) => top::run(args),
        Command::Scx(args) => cmd_scx::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Generate(args) => cmd_generate::run(args).map_err(Failure::Run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage { path, msg }) => {
            // clap prints "error: …" with the usage line and exits 2.
            let mut cmd = Cli::command().bin_name("dfsched");
            cmd.build();
            let mut sub = &mut cmd;
            for name in path {
                sub = sub
                    .find_subcommand_mut(name)
                    .expect("usage paths name real subcommands");
            }
            sub.error(clap::error::ErrorKind::ValueValidation, msg)
                .exit()
        }
        // `dfsched … | head` closing the pipe early is not an error.
        Err(Failure::Run(e)) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(Failure::Run(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Whether `e` comes from writing to a pipe whose reader has gone: an
/// `io::Error` anywhere in its chain, or one inside a `serde_json::Error`
/// (whose `source()` skips the `io::Error` it wraps, so the chain alone
/// misses `--json | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
    })
}

/// Installs a stderr subscriber at the level `-v` asks for.
fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // A second install can only fail if something else installed one first;
    // logging then goes there, which is fine.
    // Colour only on a terminal: a log captured to a file or a pipe (CI,
    // `2> log`) must read as plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}
