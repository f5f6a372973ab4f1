//! `dfsched sim pinter-example | df-bench | partition`: the run-queue
//! scenarios of the simulator (Pinter & Zalmanovici), each with `--json`
//! for programs and a table for people.
//!
//! The simulator itself does no I/O; wall time, events per second and
//! peak memory (`VmHWM` of `/proc/self/status`) are measured here.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use dfsched_core::{Config, DfId};
use dfsched_sim::df_bench::{self, DfBenchParams, DfPolicy};
use dfsched_sim::partition::{self, Problem};
use dfsched_sim::pinter_example::{self, PinterParams};
use serde::Serialize;
use std::io::Write;
use std::time::Instant;

/// The run-queue scenarios.
#[derive(Debug, Subcommand)]
pub enum SimRqCommand {
    /// The worked example of Pinter & Zalmanovici's Figs. 2–3: five threads
    /// on two CPUs under CPU affinity and under data affinity, as Gantt
    /// charts (22 and 14 in the paper's slot numbering).
    PinterExample(PinterArgs),
    /// The DF benchmark (§5.2) on a simulated machine of any size: misses
    /// by kind and run time per policy.
    DfBench(DfBenchArgs),
    /// Pinter §3: the minimal penalty T over partitions of tasks onto m
    /// CPUs (exact for small cases, greedy + local search beyond), beside
    /// the online Engine placement.
    Partition(PartitionArgs),
}

/// `sim pinter-example`.
#[derive(Debug, Args)]
pub struct PinterArgs {
    /// Time to read a whole DF into a cache (T_r).
    #[arg(long, default_value_t = 4)]
    t_r: u64,
    /// Time to flush a dirty cache (T_w).
    #[arg(long, default_value_t = 4)]
    t_w: u64,
    /// Execution time of each thread (ex).
    #[arg(long, default_value_t = 1)]
    ex: u64,
    /// Print JSON instead of the charts.
    #[arg(long)]
    json: bool,
}

/// `sim df-bench`.
#[derive(Debug, Args)]
pub struct DfBenchArgs {
    /// CPUs of the machine (a shape of `--llcs` LLCs of equal size); 0 to
    /// use --nodes × --llcs × --cores × --smt.
    #[arg(long, default_value_t = 0)]
    cpus: u32,
    /// NUMA nodes.
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// LLCs per node.
    #[arg(long, default_value_t = 1)]
    llcs: u32,
    /// Cores per LLC.
    #[arg(long, default_value_t = 2)]
    cores: u32,
    /// Hardware threads per core.
    #[arg(long, default_value_t = 1)]
    smt: u32,
    /// Benchmark threads.
    #[arg(long, default_value_t = 32)]
    threads: u32,
    /// Processes the threads are dealt to (thread i to process i mod P),
    /// each its own application: under co-thread, a co-thread group each.
    #[arg(long, default_value_t = 1)]
    processes: u32,
    /// Distinct DFs [default: 4, or --processes with --df-per-process].
    #[arg(long)]
    dfs: Option<u32>,
    /// Each process works on a DF of its own (thread i on DF i mod P), as in
    /// the co-thread test program (paper 001 §IV), instead of a seeded deal
    /// of threads to DFs.
    #[arg(long)]
    df_per_process: bool,
    /// Bytes per DF.
    #[arg(long, default_value_t = 8192)]
    df_bytes: u64,
    /// Passes of each thread over its DF.
    #[arg(long, default_value_t = 40)]
    passes: u32,
    /// Percent of each pass's lines written.
    #[arg(long, default_value_t = 25)]
    write_pct: u32,
    /// Cycles between thread starts.
    #[arg(long, default_value_t = 1000)]
    spawn_gap_cycles: u64,
    /// Private cache per CPU in KiB (8-way, 64-byte lines).
    #[arg(long, default_value_t = 8, conflicts_with = "machine")]
    private_kib: u32,
    /// Shared cache per LLC in KiB (16-way); 0 for none.
    #[arg(long, default_value_t = 0, conflicts_with = "machine")]
    llc_kib: u32,
    /// Quantum in cycles [default: 30000, or the profile's measured time
    /// slice with --machine].
    #[arg(long)]
    quantum_cycles: Option<u64>,
    /// Under dfsched (groups in succession): the most quanta a CPU gives
    /// one group in a row before it serves the next, as the sched_ext
    /// body's --quota; 0: a group's turn lasts until each of its threads
    /// there ran one quantum.
    #[arg(long, default_value_t = 0)]
    group_quota: u32,
    /// A machine profile (`dfsched calibrate`): its caches, costs, clock and
    /// migration cost replace the defaults and --private-kib/--llc-kib.
    #[arg(long, value_name = "PROFILE")]
    machine: Option<std::path::PathBuf>,
    /// Policies, comma separated: vanilla, dfsched, dfsched-rr, oracle,
    /// split, co-thread (the engine's co-thread policy with the program's
    /// hints withheld: an unmodified program).
    #[arg(long, default_value = "vanilla,dfsched,dfsched-rr,oracle,split")]
    policies: String,
    /// Seed of the thread → DF deal and of the kernel model's draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Thread i works on DF i mod DFS, as `dfsched bench df` deals them,
    /// instead of a seeded shuffle.
    #[arg(long)]
    round_robin_deal: bool,
    /// A start gate as `dfsched bench df` has: threads are placed, sleep
    /// until all have started, and are woken together.
    #[arg(long)]
    gate: bool,
    /// The kernel model of the simulator before its seeded choices
    /// (strict rotation, slices in lockstep, no periodic balance).
    #[arg(long)]
    rotation: bool,
    /// Print JSON instead of a table (wall time and memory are left out,
    /// so the same seed prints the same JSON).
    #[arg(long)]
    json: bool,
}

/// `sim partition`.
#[derive(Debug, Args)]
pub struct PartitionArgs {
    /// Tasks (n).
    #[arg(long, default_value_t = 12)]
    tasks: usize,
    /// CPUs (m).
    #[arg(long, default_value_t = 3)]
    cpus: u32,
    /// DFs the tasks are dealt over at random.
    #[arg(long, default_value_t = 4)]
    dfs: u64,
    /// Explicit DF of each task, comma separated (overrides --tasks/--dfs).
    #[arg(long)]
    task_dfs: Option<String>,
    /// T_r + T_w: the price of a DF change.
    #[arg(long, default_value_t = 8)]
    switch_cost: u64,
    /// Seed of the random deal.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs one scenario.
pub fn run(cmd: SimRqCommand) -> anyhow::Result<()> {
    match cmd {
        SimRqCommand::PinterExample(a) => pinter(a),
        SimRqCommand::DfBench(a) => dfbench(a),
        SimRqCommand::Partition(a) => partition_cmd(a),
    }
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

fn pinter(a: PinterArgs) -> anyhow::Result<()> {
    let ex = pinter_example::run(PinterParams {
        t_r: a.t_r,
        t_w: a.t_w,
        ex: a.ex,
    });
    if a.json {
        return print_json(&ex);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Pinter & Zalmanovici Figs. 2-3: T_r = {}, T_w = {}, ex = {}; R = T_r(v), x = ex(v), W = T_w(v)",
        a.t_r, a.t_w, a.ex
    )?;
    for (title, s) in [
        ("CPU affinity (Fig. 2)", &ex.cpu_affinity),
        ("data affinity (Fig. 3)", &ex.data_affinity),
    ] {
        writeln!(out, "\n{title}:")?;
        write!(out, "{}", s.gantt())?;
        writeln!(
            out,
            "length {} (last slot; slots numbered from 0, as in the paper) = {} time units",
            s.paper_length, s.makespan
        )?;
    }
    Ok(())
}

/// Peak resident memory of this process in KiB (`VmHWM`), if readable.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn dfbench(a: DfBenchArgs) -> anyhow::Result<()> {
    let mut policies = Vec::new();
    for name in a
        .policies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match DfPolicy::parse(name) {
            Some(p) => policies.push(p),
            None => {
                bail!("unknown policy {name:?}; known: {}", DfPolicy::names())
            }
        }
    }
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    let (llcs, cores) = if a.cpus > 0 {
        if !a.cpus.is_multiple_of(a.llcs) {
            bail!("--cpus {} is not a multiple of --llcs {}", a.cpus, a.llcs);
        }
        (a.llcs, a.cpus / a.llcs)
    } else {
        (a.llcs, a.cores)
    };
    let dfs = a
        .dfs
        .unwrap_or(if a.df_per_process { a.processes } else { 4 });
    let profile = match &a.machine {
        Some(p) => Some(crate::calibrate::load_profile(Some(p))?),
        None => None,
    };
    let quantum_cycles = a.quantum_cycles.unwrap_or(match &profile {
        Some((_, _, cal)) => cal.quantum_cycles,
        None => 30_000,
    });
    let params = DfBenchParams {
        nodes: if a.cpus > 0 { 1 } else { a.nodes },
        llcs,
        cores,
        smt: if a.cpus > 0 { 1 } else { a.smt },
        threads: a.threads,
        processes: a.processes,
        dfs,
        df_bytes: a.df_bytes,
        passes: a.passes,
        write_pct: a.write_pct,
        spawn_gap_cycles: a.spawn_gap_cycles,
        private_kib: a.private_kib,
        llc_kib: a.llc_kib,
        quantum_cycles,
        seed: a.seed,
        df_per_process: a.df_per_process,
        deal_round_robin: a.round_robin_deal,
        gate: a.gate,
        group_quota: a.group_quota,
        kernel: if a.rotation {
            dfsched_sim::program::body::KernelModel::rotation()
        } else {
            Default::default()
        },
        ..DfBenchParams::default()
    };
    let mut walls = Vec::new();
    let mut t0 = Instant::now();
    let progress = |r: &df_bench::DfPolicyResult| {
        let wall = t0.elapsed().as_secs_f64();
        tracing::info!(policy = r.policy.name(), wall_s = wall, "policy done");
        walls.push(wall);
        t0 = Instant::now();
    };
    let result = match &profile {
        Some((_, _, cal)) => df_bench::run_calibrated(&params, cal, &policies, progress),
        None => df_bench::run(&params, &policies, progress),
    }
    .context("df-bench")?;
    if a.json {
        return print_json(&result);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "df-bench: {} CPUs, {} threads, {} DFs of {} bytes, {} passes, {}% written; private {} KiB, LLC {} KiB",
        result.cpus, a.threads, dfs, a.df_bytes, a.passes, a.write_pct, a.private_kib, a.llc_kib
    )?;
    if let Some((path, _, cal)) = &profile {
        writeln!(
            out,
            "machine profile {}: {:.3} ns per cycle, quantum {} cycles{}",
            path.display(),
            cal.cycle_ns,
            quantum_cycles,
            if cal.defaulted.is_empty() {
                String::new()
            } else {
                format!("; defaults kept for {}", cal.defaulted.join(", "))
            }
        )?;
    }
    if a.df_per_process {
        writeln!(
            out,
            "threads dealt to {} processes, each on a DF of its own",
            a.processes
        )?;
    } else if a.processes > 1 {
        writeln!(out, "threads dealt to {} processes", a.processes)?;
    }
    writeln!(
        out,
        "{:<11} {:>14} {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8} {:>11}",
        "policy",
        "run cycles",
        "vs van.",
        "cold",
        "reload",
        "capacity",
        "coherence",
        "ctx sw",
        "migr.",
        "events",
        "wall s",
        "events/s"
    )?;
    for (r, wall) in result.results.iter().zip(&walls) {
        let m = &r.report.misses;
        let ratio = r
            .runtime_vs_vanilla_milli
            .map_or("-".to_string(), |v| format!("{:.3}", v as f64 / 1000.0));
        writeln!(
            out,
            "{:<11} {:>14} {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8.2} {:>11.0}",
            r.policy.name(),
            r.report.makespan_cycles,
            ratio,
            m.cold,
            m.reload,
            m.capacity,
            m.coherence,
            r.report.memory.context_switches,
            r.report.migrations,
            r.report.events,
            wall,
            r.report.events as f64 / wall.max(1e-9)
        )?;
    }
    if let Some(kib) = peak_rss_kib() {
        writeln!(out, "peak memory (VmHWM): {:.1} MiB", kib as f64 / 1024.0)?;
    }
    Ok(())
}

/// What `sim partition --json` prints.
#[derive(Serialize)]
struct PartitionReport {
    tasks: Vec<DfId>,
    cpus: u32,
    capacity_per_cpu: u32,
    switch_cost: u64,
    exact: Option<partition::Solution>,
    heuristic: partition::Solution,
    online_dfsched: partition::Solution,
    online_paper: partition::Solution,
}

fn partition_cmd(a: PartitionArgs) -> anyhow::Result<()> {
    let tasks: Vec<DfId> = match &a.task_dfs {
        Some(list) => list
            .split(',')
            .map(|s| {
                let d: u64 = s.trim().parse().with_context(|| format!("bad DF {s:?}"))?;
                if d == 0 {
                    bail!("DF ids start at 1 (0 means no DF)");
                }
                Ok(DfId(d))
            })
            .collect::<anyhow::Result<_>>()?,
        None => {
            if a.dfs == 0 {
                bail!("--dfs must be at least 1");
            }
            partition::random_tasks(a.tasks, a.dfs, a.seed)
        }
    };
    if tasks.is_empty() {
        bail!("no tasks");
    }
    let p = Problem {
        cpus: a.cpus,
        switch_cost: a.switch_cost,
    };
    let exact = if tasks.len() <= partition::EXACT_MAX_TASKS {
        Some(partition::exact(p, &tasks)?)
    } else {
        None
    };
    let paper = Config {
        heavy_load_milli: 1000,
        ..Config::default()
    };
    let report = PartitionReport {
        cpus: a.cpus,
        capacity_per_cpu: (tasks.len() as u32).div_ceil(a.cpus.max(1)),
        switch_cost: a.switch_cost,
        heuristic: partition::heuristic(p, &tasks)?,
        online_dfsched: partition::online(p, &tasks, Config::default())?,
        online_paper: partition::online(p, &tasks, paper)?,
        exact,
        tasks,
    };
    if a.json {
        return print_json(&report);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "partition: {} tasks on {} CPUs (at most {} per CPU), a DF change costs {}",
        report.tasks.len(),
        report.cpus,
        report.capacity_per_cpu,
        report.switch_cost
    )?;
    writeln!(
        out,
        "{:<16} {:>8} {:>8} {:>10}  per CPU (DF×tasks)",
        "method", "T", "max DFs", "max tasks"
    )?;
    let rows = [
        ("exact", report.exact.as_ref()),
        ("heuristic", Some(&report.heuristic)),
        ("online dfsched", Some(&report.online_dfsched)),
        ("online paper", Some(&report.online_paper)),
    ];
    for (name, s) in rows {
        let Some(s) = s else {
            writeln!(
                out,
                "{name:<16} {:>8}  (more than {} tasks)",
                "-",
                partition::EXACT_MAX_TASKS
            )?;
            continue;
        };
        let per: Vec<String> = s
            .cpus
            .iter()
            .map(|c| {
                c.iter()
                    .map(|(d, n)| format!("{}×{n}", d.0))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        writeln!(
            out,
            "{name:<16} {:>8} {:>8} {:>10}  [{}]",
            s.penalty,
            s.max_dfs,
            s.max_tasks,
            per.join("] [")
        )?;
    }
    Ok(())
}
