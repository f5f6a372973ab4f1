//! `dfsched record inspect FILE [--json]`: what a recording
//! (`DFSCHED_RECORD`, `dfsched run --record`) holds, for people (a summary
//! and a table of threads) or as JSON ([`dfsched_record::Summary`]).

use anyhow::Context as _;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `dfsched record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// What to do with a recording.
    #[command(subcommand)]
    pub command: RecordCommand,
}

/// `dfsched record …`.
#[derive(Debug, Subcommand)]
pub enum RecordCommand {
    /// Summarise a recording: threads, DFs, time span, events by kind,
    /// drops.
    Inspect(InspectArgs),
}

/// `record inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The recording.
    pub file: PathBuf,
    /// Print JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Threads listed in the table (all with --json).
    #[arg(long, default_value_t = 32)]
    pub threads: usize,
}

/// Reads and decodes a recording.
pub fn load(path: &Path) -> anyhow::Result<dfsched_record::Recording> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    dfsched_record::decode(&bytes)
        .with_context(|| format!("{} is not a readable recording", path.display()))
}

/// Runs `dfsched record …`.
pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    match args.command {
        RecordCommand::Inspect(a) => inspect(a),
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

fn inspect(a: InspectArgs) -> anyhow::Result<()> {
    let rec = load(&a.file)?;
    let s = rec.summary();
    let mut out = std::io::stdout().lock();
    if a.json {
        #[derive(serde::Serialize)]
        struct Json<'a> {
            file: String,
            header: &'a dfsched_record::Header,
            summary: &'a dfsched_record::Summary,
        }
        serde_json::to_writer_pretty(
            &mut out,
            &Json {
                file: a.file.display().to_string(),
                header: &rec.header,
                summary: &s,
            },
        )?;
        writeln!(out)?;
        return Ok(());
    }
    let policy = match s.policy {
        dfsched_record::Policy::DataAffinity => "data-affinity",
        dfsched_record::Policy::CoThread => "co-thread",
    };
    writeln!(
        out,
        "recording {}: pid {}, {} CPUs, policy {}, balancer every {} ms; {}{}",
        a.file.display(),
        s.pid,
        s.cpus,
        policy,
        rec.header.balance_interval_ms,
        if s.complete {
            "complete"
        } else {
            "cut short (no End record: the program did not end through exit or shutdown)"
        },
        if s.truncated {
            ", its last record truncated"
        } else {
            ""
        }
    )?;
    let exited = s.threads.iter().filter(|t| t.exit_ns.is_some()).count();
    let cpu: u64 = s.threads.iter().map(|t| t.cpu_ns).sum();
    writeln!(
        out,
        "run: {:.3} s from the first thread's start to the last thread's end (events from {:.3} s to {:.3} s)",
        secs(s.run_ns),
        secs(s.first_ns),
        secs(s.last_ns)
    )?;
    writeln!(
        out,
        "threads: {} ({} exited), {:.3} CPU s in all",
        s.threads.len(),
        exited,
        secs(cpu)
    )?;
    let sized: Vec<String> = s
        .df_sizes
        .iter()
        .map(|(app, df, b)| format!("app {app} DF {df}: {b} B"))
        .collect();
    writeln!(
        out,
        "DFs: {} ({} sized{}{})",
        s.dfs,
        s.df_sizes.len(),
        if sized.is_empty() { "" } else { ": " },
        sized.join(", ")
    )?;
    let kinds: Vec<String> = s.events.iter().map(|(k, n)| format!("{k} {n}")).collect();
    writeln!(out, "events: {}", kinds.join(", "))?;
    writeln!(
        out,
        "dropped: {} events (the recording buffer was full{})",
        s.dropped,
        if s.dropped == 0 { ": never" } else { "" }
    )?;
    writeln!(
        out,
        "{:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>7} CPUs",
        "tid", "start s", "end s", "CPU s", "wait s", "runs", "vol. sw", "DFs", "hints", "blocks"
    )?;
    for t in s.threads.iter().take(a.threads) {
        let dfs: Vec<String> = t.dfs.iter().map(u64::to_string).collect();
        let cpus: Vec<String> = t.cpus.iter().map(u32::to_string).collect();
        writeln!(
            out,
            "{:>8} {:>9.3} {:>9} {:>9.3} {:>9.3} {:>9} {:>9} {:>8} {:>6} {:>7} {}",
            t.tid,
            secs(t.start_ns),
            t.exit_ns
                .map_or("-".to_string(), |e| format!("{:.3}", secs(e))),
            secs(t.cpu_ns),
            secs(t.wait_ns),
            t.runs.map_or("-".to_string(), |r| r.to_string()),
            t.voluntary.map_or("-".to_string(), |r| r.to_string()),
            if dfs.is_empty() {
                "-".to_string()
            } else {
                dfs.join(",")
            },
            t.hints,
            t.blocks,
            cpus.join(",")
        )?;
    }
    if s.threads.len() > a.threads {
        writeln!(
            out,
            "… {} more threads (--threads N, or --json for all)",
            s.threads.len() - a.threads
        )?;
    }
    writeln!(
        out,
        "(wait: runnable, waiting for a CPU; runs: times switched in; vol. sw: of the switches out, the thread's own blocks; blocks: the idle step's verdicts; - : not in this recording)"
    )?;
    Ok(())
}
