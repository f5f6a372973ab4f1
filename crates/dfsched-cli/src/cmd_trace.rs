//! `dfsched trace import`: Valgrind lackey's text (`valgrind --tool=lackey
//! --trace-mem=yes PROG 2>&1`) on stdin to a compact binary trace (see
//! `dfsched_sim::smt::trace`), a window of it: `--skip` accesses dropped,
//! then at most `--accesses` kept.
//!
//! ```text
//! valgrind --tool=lackey --trace-mem=yes gzip -c big.txt 2>&1 >/dev/null \
//!   | dfsched trace import --skip 1000000 --accesses 4000000 --out traces/gzip.dftrace
//! ```

use anyhow::Context as _;
use clap::{Args, Subcommand};
use dfsched_sim::smt::trace::{encode, LackeyParser};
use std::io::BufRead;
use std::path::PathBuf;

/// `dfsched trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// Trace subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Lackey text on stdin → a binary trace file.
    Import(ImportArgs),
}

/// `trace import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The trace file to write (`*.dftrace`).
    #[arg(long)]
    out: PathBuf,
    /// Accesses to drop first (the program's start-up).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Accesses to keep at most.
    #[arg(long, default_value_t = 4_000_000)]
    accesses: u64,
}

/// Runs `dfsched trace …`.
pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    match args.command {
        TraceCommand::Import(a) => import(a),
    }
}

fn import(a: ImportArgs) -> anyhow::Result<()> {
    let mut parser = LackeyParser::new();
    let mut kept = Vec::new();
    let mut seen = 0u64;
    let stdin = std::io::stdin().lock();
    for line in stdin.lines() {
        let line = line.context("reading stdin")?;
        if let Some(acc) = parser.line(&line)? {
            seen += 1;
            if seen > a.skip {
                kept.push(acc);
                if kept.len() as u64 >= a.accesses {
                    // Stop reading: the writer sees a closed pipe and
                    // (valgrind) ends on SIGPIPE, which is what we want.
                    break;
                }
            }
        }
    }
    if kept.is_empty() {
        anyhow::bail!("no access in the input after skipping {}", a.skip);
    }
    let bytes = encode(&kept);
    std::fs::write(&a.out, &bytes).with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "{}: {} accesses, {} bytes ({:.2} bytes per access)",
        a.out.display(),
        kept.len(),
        bytes.len(),
        bytes.len() as f64 / kept.len() as f64
    );
    Ok(())
}
