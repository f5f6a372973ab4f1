//! `dfsched sim …`: the simulator's scenarios. The queue scenarios
//! (Squillante & Lazowska) live in `cmd_sim_queue.rs`, the run-queue ones
//! (Pinter & Zalmanovici) in `cmd_sim_rq.rs`, the SMT one (Kihm et al.) in
//! `cmd_sim_smt.rs`, the replay of recorded runs in `cmd_sim_replay.rs`; this file only joins them
//! under one subcommand.

use clap::{Args, Subcommand};

use crate::cmd_sim_queue::{self, SimQueueCommand};
use crate::cmd_sim_replay::{self, ReplayArgs};
use crate::cmd_sim_rq::{self, SimRqCommand};
use crate::cmd_sim_smt::{self, SmtArgs};

/// `dfsched sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Which scenario.
    #[command(subcommand)]
    pub command: SimCommand,
}

/// Every simulator scenario.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Squillante & Lazowska's closed network and figures.
    #[command(flatten)]
    Queue(SimQueueCommand),
    /// Pinter & Zalmanovici's run-queue scenarios.
    #[command(flatten)]
    Rq(SimRqCommand),
    /// Kihm et al.'s SMT co-scheduling by cache activity vectors: one
    /// workload under several policies, ITKO and relative throughput.
    Smt(Box<SmtArgs>),
    /// Replays recorded runs (`dfsched run --record`, `DFSCHED_RECORD`) on
    /// a simulated machine of any size under every policy.
    Replay(ReplayArgs),
}

/// Runs `dfsched sim …`.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    match args.command {
        SimCommand::Queue(c) => cmd_sim_queue::run(c),
        SimCommand::Rq(c) => cmd_sim_rq::run(c),
        SimCommand::Smt(a) => cmd_sim_smt::run(*a),
        SimCommand::Replay(a) => cmd_sim_replay::run(a),
    }
}
