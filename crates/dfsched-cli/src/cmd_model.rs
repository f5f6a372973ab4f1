//! `dfsched model reload | mva`: Squillante & Lazowska's analytic models
//! (§III) from the command line — the cache-reload miss ratio `R(I)` and
//! the exact MVA solution of the Fixed Processor policy — as a table for
//! people or JSON for programs.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use dfsched_sim::analytic::mva::{fixed_processor, FixedProcessorParams};
use dfsched_sim::analytic::reload::{cold_reload_ratio, reload_ratios};
use dfsched_sim::CacheGeometry;
use serde::Serialize;
use std::io::Write;

/// `dfsched model …`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Which model.
    #[command(subcommand)]
    pub command: ModelCommand,
}

/// The analytic models.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// The cache-reload miss ratio R(0..I) of eqs. 1–5: the fraction of an
    /// F-block footprint reloaded after I distinct intervening tasks
    /// (R(0) = 0; the blocks a footprint pushes out itself are its own
    /// misses, not a reload), and the cold ratio, R's limit.
    Reload(ReloadArgs),
    /// Exact MVA of the Fixed Processor policy's closed network with the
    /// reload model (and optionally bus interference, eqs. 7–9).
    Mva(MvaArgs),
}

/// The cache shape and footprint both models share.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// F: the footprint of a task, in cache blocks.
    #[arg(long, default_value_t = 1900, value_parser = clap::value_parser!(u64).range(1..))]
    pub footprint: u64,
    /// S: sets of each processor's cache.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..))]
    pub sets: u32,
    /// K: ways (associativity) of each processor's cache.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub ways: u32,
}

/// `model reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The footprint and cache.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// I: the most intervening tasks tabulated.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(0..=65536))]
    pub max_intervening: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `model mva`.
#[derive(Debug, Args)]
pub struct MvaArgs {
    /// M: processors.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub processors: u32,
    /// N: tasks.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub tasks: u32,
    /// D: mean demand per visit.
    #[arg(long, default_value_t = 1.0)]
    pub demand: f64,
    /// Z: mean think (non-schedulable) time.
    #[arg(long, default_value_t = 1.0)]
    pub think: f64,
    /// C: time to reload a whole footprint.
    #[arg(long, default_value_t = 0.5)]
    pub reload: f64,
    /// The footprint and cache.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Model bus interference with this f_ba (the paper uses 0.1).
    #[arg(long)]
    pub bus_f_ba: Option<f64>,
    /// Also print the solution for every smaller population.
    #[arg(long)]
    pub all_populations: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dfsched model …`.
pub fn run(args: ModelArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match args.command {
        ModelCommand::Reload(a) => reload(a, &mut out),
        ModelCommand::Mva(a) => mva(a, &mut out),
    }
}

#[derive(Serialize)]
struct ReloadReport {
    footprint_blocks: u64,
    sets: u32,
    ways: u32,
    /// `reload_ratios[i]` is R(i); `reload_ratios[0]` is 0.
    reload_ratios: Vec<f64>,
    /// The ratio where the task never ran (R's limit as I grows): 1 for a
    /// footprint that fits, less when its blocks conflict with each other.
    cold_reload_ratio: f64,
}

fn reload(a: ReloadArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let c = &a.cache;
    let r = reload_ratios(c.footprint, c.sets, c.ways, a.max_intervening)
        .context("the reload model refused its parameters")?;
    let geometry = CacheGeometry {
        sets: c.sets,
        ways: c.ways,
    };
    let cold = cold_reload_ratio(c.footprint, geometry)
        .context("the reload model refused its parameters")?;
    if a.json {
        let rep = ReloadReport {
            footprint_blocks: c.footprint,
            sets: c.sets,
            ways: c.ways,
            reload_ratios: r,
            cold_reload_ratio: cold,
        };
        serde_json::to_writer_pretty(&mut *out, &rep)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "R(I): footprint {} blocks, {} sets × {} ways",
        c.footprint, c.sets, c.ways
    )?;
    writeln!(out, "{:>6}  {:>8}", "I", "R(I)")?;
    for (i, x) in r.iter().enumerate() {
        writeln!(out, "{i:>6}  {x:>8.5}")?;
    }
    writeln!(out, "{:>6}  {cold:>8.5}", "cold")?;
    Ok(())
}

fn mva(a: MvaArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let p = FixedProcessorParams {
        processors: a.processors,
        tasks: a.tasks,
        demand: a.demand,
        think_time: a.think,
        reload_time: a.reload,
        footprint_blocks: a.cache.footprint,
        cache: CacheGeometry {
            sets: a.cache.sets,
            ways: a.cache.ways,
        },
        bus_f_ba: a.bus_f_ba,
    };
    let mut r = fixed_processor(&p).context("the MVA model refused its parameters")?;
    if !a.all_populations {
        r.per_population.clear();
    }
    if a.json {
        serde_json::to_writer_pretty(&mut *out, &r)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "FP by exact MVA: M = {}, N = {}, D = {}, Z = {}, C = {}, F = {} blocks, {} sets × {} ways{}",
        p.processors,
        p.tasks,
        p.demand,
        p.think_time,
        p.reload_time,
        p.footprint_blocks,
        p.cache.sets,
        p.cache.ways,
        p.bus_f_ba.map_or(String::new(), |f| format!(", bus f_ba = {f}"))
    )?;
    writeln!(out, "  throughput X        {:.5}", r.throughput)?;
    writeln!(out, "  response T          {:.5}", r.response)?;
    writeln!(out, "  second moment T²    {:.5}", r.response_second_moment)?;
    writeln!(out, "  mean reload R̄       {:.5}", r.mean_reload_ratio)?;
    writeln!(out, "  CPU utilisation     {:.5}", r.cpu_utilization)?;
    if let Some(u) = r.bus_utilization {
        let sat = if r.bus_saturated { " (saturated)" } else { "" };
        writeln!(out, "  bus utilisation     {u:.5}{sat}")?;
    }
    if a.all_populations {
        writeln!(out, "{:>8} {:>10} {:>10} {:>10}", "N", "X", "T", "T²")?;
        for q in &r.per_population {
            writeln!(
                out,
                "{:>8} {:>10.5} {:>10.5} {:>10.5}",
                q.tasks, q.throughput, q.response, q.response_second_moment
            )?;
        }
    }
    Ok(())
}
