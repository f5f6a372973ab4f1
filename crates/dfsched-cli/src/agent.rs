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
//! `--status` and `--stop` talk only to an agent of this user in a private
//! directory (root's too with `--trust-root-agent`), and give up after
//! `dfsched::agent::IO_TIMEOUT` on a stopped or full agent.
//!
//! Exit codes as every subcommand: 1 when no agent answers (`--status`,
//! `--stop`) or one already runs (starting), with the reason on stderr.

use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use dfsched::agent::{self, Agent, AgentConfig, Client, ConnectOptions, SpawnOptions, Trust};
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
started on demand by `dfsched run` gets `--idle-exit 30`.

Trust: the socket's directory must belong to the user with mode 0700 (the \
agent refuses to start otherwise), and clients (programs under dfsched, \
--status, --stop, dfsched run) talk only to an agent running as their own \
user in such a directory, so another user who creates /tmp/dfsched-$UID \
first gets nothing from them. An agent serves its own user only; one run \
by root serves root only unless started with --serve-all-users (its \
directory may then be readable by others, its socket is 0666), and other \
users' programs use it only with DFSCHED_AGENT_TRUST_ROOT=1 \
(--trust-root-agent here). Every request is checked against the sender's \
current uid, so a process that connected as root and then dropped to \
another user cannot stop a root agent.

Bounds: a client waits at most 1 s for the agent (50 ms per balancer \
pass, with a growing back-off after a failure), even if the agent is \
stopped or its accept queue is full. The agent keeps at most \
--max-connections connections (--max-connections-per-uid per user) and \
closes a connection that sends no whole request within \
--idle-timeout-ms. A report whose load names a CPU twice, or more load \
than one process can have (1000 per possible thread: pid_max x 1000), is \
refused with an error.")]
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

    /// For a root agent: serve every user, not root only (its socket is
    /// then 0666; its directory may be readable, never writable, by
    /// others). Other users' programs use it with
    /// DFSCHED_AGENT_TRUST_ROOT=1.
    #[arg(long, conflicts_with_all = ["status", "stop"])]
    serve_all_users: bool,

    /// Connections the agent keeps open at once, in all; beyond, a new one
    /// is refused ("busy") and closed. Each costs a thread and three
    /// descriptors.
    #[arg(long, value_name = "N", default_value_t = agent::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections: u32,

    /// Connections the agent keeps open at once per user.
    #[arg(long, value_name = "N", default_value_t = agent::DEFAULT_MAX_CONNECTIONS_PER_UID,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections_per_uid: u32,

    /// Milliseconds a connection may go without sending a whole request
    /// before the agent closes it (programs under dfsched send one per
    /// balancer pass, and reconnect after half the default of 60 s).
    #[arg(long, value_name = "MS",
          default_value_t = agent::DEFAULT_IDLE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    idle_timeout_ms: u64,

    /// Serve the agent's counters and every process's load, groups and
    /// moves in the Prometheus text format (OpenMetrics when asked) over
    /// HTTP at ADDR: a loopback HOST:PORT (127.0.0.1:9477) or an absolute
    /// Unix socket path (mode 0600; only this user and root may read it).
    /// Metric names and types: `dfsched::agent::metrics`, and the README.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["status", "stop"])]
    metrics: Option<agent::metrics::MetricsAddr>,

    /// Log the engine of each process attached with `dfsched attach` into
    /// DIR/attach-PID.log (JSON lines, for `dfsched engine-replay`; the
    /// files are the agent user's, mode 0600, never written through a
    /// symlink).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["status", "stop"])]
    engine_log: Option<std::path::PathBuf>,

    /// With --status or --stop: also talk to an agent run by root (in a
    /// root-owned directory no one else may write), as
    /// DFSCHED_AGENT_TRUST_ROOT=1 lets programs do.
    #[arg(long)]
    trust_root_agent: bool,
}

/// How long `--stop` waits for the agent to stop listening.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `agent`.
/// `--engine-log DIR` as an absolute path (a detached agent does not keep
/// this process's working directory).
fn engine_log_dir(dir: Option<&std::path::Path>) -> anyhow::Result<Option<std::path::PathBuf>> {
    dir.map(|d| std::path::absolute(d).with_context(|| format!("--engine-log {}", d.display())))
        .transpose()
}

pub fn run(args: AgentArgs) -> Result<(), Failure> {
    let socket = args.socket.unwrap_or_else(agent::default_socket_path);
    let connect = ConnectOptions {
        trust: if args.trust_root_agent {
            Trust::OwnUidOrRoot
        } else {
            Trust::OwnUid
        },
        timeout: agent::IO_TIMEOUT,
    };
    if args.status {
        let status = Client::connect_with(&socket, connect)
            .and_then(|mut c| c.status())
            .context("dfsched agent --status")?;
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &status).context("writing the status")?;
        writeln!(out).context("writing the status")?;
        return Ok(());
    }
    if args.stop {
        Client::connect_with(&socket, connect)
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
        config.serve_other_uids = args.serve_all_users;
        config.max_connections = args.max_connections;
        config.max_connections_per_uid = args.max_connections_per_uid;
        config.idle_timeout = Duration::from_millis(args.idle_timeout_ms);
        config.metrics = args.metrics.clone();
        config.engine_log_dir = engine_log_dir(args.engine_log.as_deref())?;
        let agent = Agent::bind(config).context("dfsched agent")?;
        tracing::info!(socket = %socket.display(), pid = std::process::id(), "dfsched agent listening");
        if let Some(m) = &args.metrics {
            tracing::info!(metrics = %m, "dfsched agent serving metrics");
        }
        agent.run().context("dfsched agent")?;
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding the dfsched executable")?;
    let options = SpawnOptions {
        tick_ms: args.tick_ms,
        scan_fresh_ms: args.scan_fresh_ms,
        idle_exit_secs: args.idle_exit,
        serve_other_uids: args.serve_all_users,
        max_connections: args.max_connections,
        max_connections_per_uid: args.max_connections_per_uid,
        idle_timeout_ms: args.idle_timeout_ms,
        metrics: args.metrics.clone(),
        engine_log_dir: engine_log_dir(args.engine_log.as_deref())?,
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
