//! `dfsched agent`: the per-user coordinator that gives processes under
//! dfsched one view of the machine's load and places processes that share
//! pipes or sockets together. The logic lives in `dfsched::agent`; this is
//! the command line.
//!
//! ```text
//! dfsched agent [--socket PATH] [--idle-exit SECS]               start a detached agent, return once it listens
//! dfsched agent [--socket PATH] [--idle-exit SECS] --foreground  run it in this process (logs on stderr)
//! dfsched agent [--socket PATH] --status      print its state as JSON
//! dfsched agent [--socket PATH] --stop        ask it to end, wait until it has
//! ```
//!
//! An agent runs until stopped unless given `--idle-exit`; one started on
//! demand (`dfsched run`, through `dfsched::agent::ensure_running`) gets
//! `--idle-exit 30`.
//!
//! Exit codes as every subcommand: 1 when no agent answers (`--status`,
//! `--stop`) or one already runs (starting), with the reason on stderr.

use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use dfsched::agent::{self, Agent, AgentConfig, Client, SpawnOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `dfsched agent`.
#[derive(Debug, Args)]
#[command(after_help = "\
The agent is one per user and machine: processes under dfsched report their \
load to it on each balancer pass and get back everyone else's, including one \
shared /proc scan of the processes not under dfsched, and a common home when \
they share pipes or sockets.

Lifetime: an agent started with this command runs until `--stop`, unless \
`--idle-exit SECS` is given: it then ends by itself once no process has been \
connected for SECS seconds, removing its socket and lock file. An agent \
started on demand by `dfsched run` gets `--idle-exit 30`.")]
pub struct AgentArgs {
    /// The socket: default $XDG_RUNTIME_DIR/dfsched/agent.sock, or
    /// /tmp/dfsched-$UID/agent.sock without XDG_RUNTIME_DIR. Its directory
    /// is created 0700 and must be private to the user.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,

    /// Serve in this process instead of starting a detached agent.
    #[arg(long, conflicts_with_all = ["status", "stop"])]
    foreground: bool,

    /// Print the running agent's state (processes, sharing sets and their
    /// homes, counters) as one JSON object.
    #[arg(long, conflicts_with = "stop")]
    status: bool,

    /// Ask the running agent to end; returns once it no longer listens.
    #[arg(long)]
    stop: bool,

    /// Milliseconds between the agent's ticks (liveness check and sharing
    /// detection).
    #[arg(long, value_name = "MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    tick_ms: u64,

    /// End once no process has been connected for SECS seconds (socket and
    /// lock file removed). Without it the agent runs until --stop.
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=604_800))]
    idle_exit: Option<u64>,

    /// How old, in milliseconds, the agent's shared /proc scan of the
    /// processes not under dfsched may be before a report takes a new one;
    /// 0 scans on every report. The default, half the runtimes' 100 ms
    /// balancer interval, costs at most two scans per interval however
    /// many processes report.
    #[arg(long, value_name = "MS", default_value_t = agent::DEFAULT_SCAN_FRESH_MS,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    scan_fresh_ms: u64,
}

/// How long `--stop` waits for the agent to stop listening.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `agent`.
pub fn run(args: AgentArgs) -> Result<(), Failure> {
    let socket = args.socket.unwrap_or_else(agent::default_socket_path);
    if args.status {
        let status = Client::connect(&socket)
            .and_then(|mut c| c.status())
            .context("dfsched agent --status")?;
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &status).context("writing the status")?;
        writeln!(out).context("writing the status")?;
        return Ok(());
    }
    if args.stop {
        Client::connect(&socket)
            .and_then(|mut c| c.stop())
            .context("dfsched agent --stop")?;
        let asked = Instant::now();
        while agent::is_live(&socket) {
            if asked.elapsed() > STOP_TIMEOUT {
                return Err(anyhow!(
                    "the agent on {} was asked to stop but still listens after {STOP_TIMEOUT:?}",
                    socket.display()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("dfsched agent on {} stopped", socket.display());
        return Ok(());
    }
    if args.foreground {
        let mut config = AgentConfig::new(socket.clone()).context("dfsched agent")?;
        config.tick_ms = args.tick_ms;
        config.scan_fresh_ms = args.scan_fresh_ms;
        config.idle_exit = args.idle_exit.map(Duration::from_secs);
        let agent = Agent::bind(config).context("dfsched agent")?;
        tracing::info!(socket = %socket.display(), pid = std::process::id(), "dfsched agent listening");
        agent.run().context("dfsched agent")?;
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding the dfsched executable")?;
    let options = SpawnOptions {
        tick_ms: args.tick_ms,
        scan_fresh_ms: args.scan_fresh_ms,
        idle_exit_secs: args.idle_exit,
    };
    // This process exits now: the agent is left to init, not reaped here.
    let agent = agent::spawn_detached(&exe, &socket, &options).context("dfsched agent")?;
    eprintln!(
        "dfsched agent started (pid {}), listening on {}",
        agent.pid(),
        socket.display()
    );
    Ok(())
}
