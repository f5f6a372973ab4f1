//! `dfsched attach PID` and `dfsched detach PID`: a process already
//! running without dfsched, placed from outside by the agent, and given its
//! masks back.
//!
//! ```text
//! dfsched attach PID [--policy co-thread|data-affinity] [--rules FILE] [--socket PATH] [--json]
//!   1. the rules file, if any, checked (errors point at the line; nothing is sent)
//!   2. the agent on the socket, started (detached, on demand) if none listens
//!   3. Attach{pid, policy, rules}: the agent checks that this user owns PID,
//!      places its threads before answering, and keeps them placed (new and
//!      renamed threads too) at each tick until detach or the process ends
//! dfsched detach PID [--socket PATH] [--json]
//!   Detach{pid}: each thread whose mask is still dfsched's gets the mask it
//!   had before the attach back
//! ```
//!
//! Bounds as for `dfsched agent --status`: only an agent of this user in a
//! private directory is talked to, and each exchange ends after
//! `dfsched::agent::IO_TIMEOUT`. Exit status 0 when placed (or released),
//! 1 when the agent refused or could not be reached, 2 for a bad option or
//! rules file.

use crate::run::RunPolicy;
use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched::agent::{self, AttachRequest, Client, ConnectOptions, Trust};
use std::io::Write as _;
use std::path::PathBuf;

/// Text of `dfsched attach --help`.
pub const ATTACH_LONG_ABOUT: &str = "\
Place the threads of a process that is already running, without dfsched in \
it (nothing preloaded): the per-user agent reads its threads from \
/proc/PID/task, places them by the policy (and the rules, if given) with \
sched_setaffinity, and keeps them placed, new and renamed threads too, \
until `dfsched detach PID` or the process ends. The process must belong to \
you. The agent is started (detached) if none runs; it stays while any \
process is attached. Read the placement back with:
  grep Cpus_allowed_list /proc/PID/task/*/status";

/// Flags of `dfsched attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The process.
    #[arg(value_name = "PID")]
    pid: u32,

    /// The policy for the process's threads, unless a rule says otherwise.
    #[arg(long, value_enum, default_value = "co-thread")]
    policy: RunPolicy,

    /// A rules file (TOML, as for `dfsched run --rules`): the process's
    /// policy and each thread's DF or "leave alone" by name.
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,

    /// The agent's socket (default: the user's, as for `dfsched agent`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,

    /// Print the agent's answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `dfsched detach`.
#[derive(Debug, Args)]
pub struct DetachArgs {
    /// The attached process.
    #[arg(value_name = "PID")]
    pid: u32,

    /// The agent's socket (default: the user's).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,

    /// Print the agent's answer as JSON.
    #[arg(long)]
    json: bool,
}

fn connect(socket: &std::path::Path) -> anyhow::Result<Client> {
    Ok(Client::connect_with(
        socket,
        ConnectOptions {
            trust: Trust::OwnUid,
            timeout: agent::IO_TIMEOUT,
        },
    )?)
}

fn print(reply: &agent::AttachReply, json: bool, what: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, reply)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{what} process {} ({}): {} threads, {} masks set",
            reply.pid, reply.policy, reply.threads, reply.placed
        )?;
    }
    Ok(())
}

/// Runs `attach`.
pub fn run_attach(args: AttachArgs) -> Result<(), Failure> {
    let rules = match &args.rules {
        Some(path) => {
            Some(crate::rules_file::load(path).map_err(|e| Failure::usage(&["attach"], e))?)
        }
        None => None,
    };
    let policy = match args.policy {
        RunPolicy::CoThread => dfsched::Policy::CoThread,
        RunPolicy::DataAffinity => dfsched::Policy::DataAffinity,
        RunPolicy::None => {
            return Err(Failure::usage(
                &["attach"],
                "--policy none places nothing: nothing to attach",
            ))
        }
        RunPolicy::SmtPair => {
            return Err(Failure::usage(
                &["attach"],
                "--policy smt-pair is not the agent's: place a running process \
                 with `dfsched smt-pair --profile FILE --pid PID`",
            ))
        }
    };
    let socket = args.socket.unwrap_or_else(agent::default_socket_path);
    agent::ensure_running(&socket, Trust::OwnUid).context("dfsched attach: the agent")?;
    let reply = connect(&socket)
        .and_then(|mut c| {
            Ok(c.attach(AttachRequest {
                pid: args.pid,
                policy,
                rules,
            })?)
        })
        .with_context(|| format!("dfsched attach {}", args.pid))?;
    print(&reply, args.json, "attached").context("writing the answer")?;
    Ok(())
}

/// Runs `detach`.
pub fn run_detach(args: DetachArgs) -> Result<(), Failure> {
    let socket = args.socket.unwrap_or_else(agent::default_socket_path);
    let reply = connect(&socket)
        .and_then(|mut c| Ok(c.detach(args.pid)?))
        .with_context(|| format!("dfsched detach {}", args.pid))?;
    print(&reply, args.json, "detached").context("writing the answer")?;
    Ok(())
}
