//! `dfsched sim closed-network | figure`: Squillante & Lazowska's closed
//! network under the ready-queue policies, one point at a time or as the
//! sweeps behind the paper's Figs. 4–9.
//!
//! The simulator does no I/O and starts no thread; here the sweep's points
//! run on every core (`std::thread::scope`, a shared next-point counter;
//! each point is deterministic for its seed, so the order in which threads
//! take them does not matter), with a progress bar on stderr, and the
//! results go to CSV and SVG files in `--out`.

use crate::plot::{self, Curve, Panel, Point};
use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use dfsched_core::dispatch::queue::QueuePolicy;
use dfsched_sim::closed_network::{simulate, ClosedNetworkParams, ClosedNetworkResult, Estimate};
use dfsched_sim::figures::{self, Figure, Measure, ReloadCurve, SweepOptions, SweepPoint};
use dfsched_sim::CacheGeometry;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The queue scenarios.
#[derive(Debug, Subcommand)]
pub enum SimQueueCommand {
    /// Squillante & Lazowska's closed network: M processors, N tasks,
    /// exponential demand D and think time Z, reload time C·R(i) under a
    /// ready-queue policy; X, T and T² with 98% confidence intervals.
    ClosedNetwork(ClosedNetworkArgs),
    /// The sweeps behind Squillante & Lazowska's Figs. 4–9, written as CSV
    /// and SVG to --out.
    Figure(FigureArgs),
}

/// `sim closed-network`.
#[derive(Debug, Args)]
pub struct ClosedNetworkArgs {
    /// The policy: fcfs, fp, lp, mi, lmi:A or lmr:A.
    #[arg(long, default_value = "lp")]
    pub policy: QueuePolicy,
    /// M: processors.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub processors: u32,
    /// N: tasks.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub tasks: u32,
    /// D: mean demand per visit.
    #[arg(long, default_value_t = 1.0)]
    pub demand: f64,
    /// Z: mean think time.
    #[arg(long, default_value_t = 1.0)]
    pub think: f64,
    /// C: time to reload a whole footprint.
    #[arg(long, default_value_t = 0.5)]
    pub reload: f64,
    /// F: footprint, in cache blocks.
    #[arg(long, default_value_t = 1900)]
    pub footprint: u64,
    /// S: cache sets.
    #[arg(long, default_value_t = 8192)]
    pub sets: u32,
    /// K: cache ways.
    #[arg(long, default_value_t = 4)]
    pub ways: u32,
    /// The pause heuristic (pause when C ≥ (M/N)·Z; LP, MI, LMI, LMR).
    #[arg(long)]
    pub pause: bool,
    /// Bus interference (eqs. 7–9).
    #[arg(long)]
    pub bus: bool,
    /// f_ba, the fraction of a reload on the bus.
    #[arg(long, default_value_t = 0.1)]
    pub f_ba: f64,
    /// Warm-up per replication, in units of time.
    #[arg(long, default_value_t = 200.0)]
    pub warmup: f64,
    /// Measured time per replication.
    #[arg(long, default_value_t = 2000.0)]
    pub run_time: f64,
    /// Replications (independent random streams).
    #[arg(long, default_value_t = 10)]
    pub replications: u32,
    /// The seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `sim figure`.
#[derive(Debug, Args)]
pub struct FigureArgs {
    /// Which figure: 4 (R(I), analytic) or 5–9 (simulated sweeps).
    #[arg(value_parser = clap::value_parser!(u8).range(4..=9))]
    pub number: u8,
    /// Where to write figN.csv and figN.svg (created if missing).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// N under light load.
    #[arg(long, default_value_t = 40)]
    pub light_tasks: u32,
    /// N under heavy load.
    #[arg(long, default_value_t = 128)]
    pub heavy_tasks: u32,
    /// Values of C over [0, 1].
    #[arg(long, default_value_t = 11)]
    pub points: u32,
    /// Replications per point.
    #[arg(long, default_value_t = 5)]
    pub replications: u32,
    /// Measured time per replication.
    #[arg(long, default_value_t = 2000.0)]
    pub run_time: f64,
    /// Warm-up per replication.
    #[arg(long, default_value_t = 200.0)]
    pub warmup: f64,
    /// The seed of every point.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (default: every available CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Fig. 4: the most intervening tasks.
    #[arg(long, default_value_t = 64)]
    pub max_intervening: u32,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `dfsched sim closed-network | figure`.
pub fn run(cmd: SimQueueCommand) -> anyhow::Result<()> {
    match cmd {
        SimQueueCommand::ClosedNetwork(a) => closed_network(a),
        SimQueueCommand::Figure(a) => figure(a),
    }
}

fn closed_network(a: ClosedNetworkArgs) -> anyhow::Result<()> {
    let p = ClosedNetworkParams {
        processors: a.processors,
        tasks: a.tasks,
        demand: a.demand,
        think_time: a.think,
        reload_time: a.reload,
        footprint_blocks: a.footprint,
        cache: CacheGeometry {
            sets: a.sets,
            ways: a.ways,
        },
        policy: a.policy,
        pause: a.pause,
        bus_f_ba: a.bus.then_some(a.f_ba),
        warmup_time: a.warmup,
        run_time: a.run_time,
        replications: a.replications,
        seed: a.seed,
    };
    let started = Instant::now();
    let r = simulate(&p).context("the closed network refused its parameters")?;
    let secs = started.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
        return Ok(());
    }
    let ci = |e: &Estimate| match e.half_width_98 {
        Some(h) => format!("{:.4} ± {h:.4}", e.mean),
        None => format!("{:.4}", e.mean),
    };
    writeln!(
        out,
        "closed network: {} on M = {}, N = {}, D = {}, Z = {}, C = {}, F = {} blocks, {} sets × {} ways{}{}",
        p.policy,
        p.processors,
        p.tasks,
        p.demand,
        p.think_time,
        p.reload_time,
        p.footprint_blocks,
        p.cache.sets,
        p.cache.ways,
        if r.pausing { ", pausing" } else if p.pause { ", pause (not engaged)" } else { "" },
        p.bus_f_ba.map_or(String::new(), |f| format!(", bus f_ba = {f}")),
    )?;
    writeln!(
        out,
        "  {} replications × {} units after {} of warm-up (98% intervals)",
        p.replications, p.run_time, p.warmup_time
    )?;
    writeln!(out, "  throughput X        {}", ci(&r.throughput))?;
    writeln!(out, "  response T          {}", ci(&r.response))?;
    writeln!(
        out,
        "  second moment T²    {}",
        ci(&r.response_second_moment)
    )?;
    writeln!(out, "  mean reload R̄       {}", ci(&r.mean_reload_ratio))?;
    writeln!(out, "  CPU utilisation     {}", ci(&r.cpu_utilization))?;
    if let Some(u) = r.bus_utilization {
        let sat = if r.bus_saturated {
            " (saturated: the figures above are an optimistic bound)"
        } else {
            ""
        };
        writeln!(
            out,
            "  bus utilisation     {u:.4} after {} iterations{sat}",
            r.bus_iterations
        )?;
    }
    writeln!(
        out,
        "  {} events in {secs:.2} s ({:.2} M events/s)",
        r.events,
        r.events as f64 / secs / 1e6
    )?;
    Ok(())
}

fn figure(a: FigureArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    if a.number == 4 {
        let curves = figures::reload_curves(1900, a.max_intervening).context("the reload model")?;
        let csv = a.out.join("fig4.csv");
        write_reload_csv(&csv, &curves)?;
        let svg = a.out.join("fig4.svg");
        plot_reload(&svg, &curves)?;
        say_wrote(&csv, &svg)?;
        return Ok(());
    }
    let fig = figures::figure(a.number)?;
    let opts = SweepOptions {
        light_tasks: a.light_tasks,
        heavy_tasks: a.heavy_tasks,
        c_points: a.points,
        replications: a.replications,
        run_time: a.run_time,
        warmup_time: a.warmup,
        seed: a.seed,
    };
    let points = figures::sweep(&fig, &opts)?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let results = run_sweep(&points, threads, a.quiet)?;
    let csv = a.out.join(format!("fig{}.csv", a.number));
    write_sweep_csv(&csv, &fig, &points, &results)?;
    let svg = a.out.join(format!("fig{}.svg", a.number));
    plot_sweep(&svg, &fig, &opts, &points, &results)?;
    say_wrote(&csv, &svg)
}

/// Says which files a figure went to, on stdout (a closed pipe is an error
/// the caller ends quietly on, not a panic as in `println!`).
fn say_wrote(csv: &std::path::Path, svg: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} and {}",
        csv.display(),
        svg.display()
    )?;
    Ok(())
}

/// Simulates every point on `threads` threads.
fn run_sweep(
    points: &[SweepPoint],
    threads: usize,
    quiet: bool,
) -> anyhow::Result<Vec<ClosedNetworkResult>> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(points.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} points, eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<anyhow::Result<ClosedNetworkResult>>>> =
        Mutex::new((0..points.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.min(points.len()) {
            s.spawn(|| loop {
                // Relaxed is enough: the counter only hands out indices;
                // results are published through the mutex.
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(pt) = points.get(i) else { break };
                let r = simulate(&pt.params).map_err(anyhow::Error::from);
                slots
                    .lock()
                    .expect("no worker panics while holding the lock")[i] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    slots
        .into_inner()
        .expect("workers are done")
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Some(r) => r.with_context(|| format!("point {i}")),
            None => bail!("point {i} was not run"),
        })
        .collect()
}

fn hw(e: &Estimate) -> String {
    e.half_width_98.map_or(String::new(), |h| format!("{h}"))
}

fn write_sweep_csv(
    path: &Path,
    fig: &Figure,
    points: &[SweepPoint],
    results: &[ClosedNetworkResult],
) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(f, "figure,load,tasks,series,policy,pause,pausing,bus_f_ba,C,X,X_hw98,T,T_hw98,T2,T2_hw98,R_mean,U_cpu,U_bus,bus_saturated,replications,seed")?;
    for (pt, r) in points.iter().zip(results) {
        let s = &fig.series[pt.series];
        let p = &pt.params;
        writeln!(
            f,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            fig.number,
            pt.load,
            p.tasks,
            s.label,
            p.policy,
            p.pause,
            r.pausing,
            p.bus_f_ba.map_or(String::new(), |x| x.to_string()),
            p.reload_time,
            r.throughput.mean,
            hw(&r.throughput),
            r.response.mean,
            hw(&r.response),
            r.response_second_moment.mean,
            hw(&r.response_second_moment),
            r.mean_reload_ratio.mean,
            r.cpu_utilization.mean,
            r.bus_utilization.map_or(String::new(), |x| x.to_string()),
            r.bus_saturated,
            p.replications,
            p.seed,
        )?;
    }
    f.flush()?;
    Ok(())
}

fn write_reload_csv(path: &Path, curves: &[ReloadCurve]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(f, "footprint_blocks,sets,ways,intervening,R")?;
    for c in curves {
        for (i, r) in c.ratios.iter().enumerate() {
            writeln!(f, "{},{},{},{i},{r}", c.footprint_blocks, c.sets, c.ways)?;
        }
    }
    f.flush()?;
    Ok(())
}

fn plot_reload(path: &Path, curves: &[ReloadCurve]) -> anyhow::Result<()> {
    let series: Vec<Curve> = curves
        .iter()
        .map(|c| Curve {
            label: c.label.clone(),
            points: c
                .ratios
                .iter()
                .enumerate()
                .map(|(i, &r)| Point {
                    x: i as f64,
                    y: r,
                    hw: None,
                })
                .collect(),
        })
        .collect();
    let panel = Panel {
        name: String::new(),
        x_desc: "intervening tasks I",
        y_desc: "R(I)",
        curves: series,
    };
    plot::draw_svg(
        path,
        (900, 600),
        "Fig. 4: expected cache-reload miss ratio R(I)",
        &[panel],
    )
}

/// The sweep's curves, one panel per load, each point a mean with its
/// 98 % half-width (the CSV's `*_hw98`) as an error bar.
fn plot_sweep(
    path: &Path,
    fig: &Figure,
    opts: &SweepOptions,
    points: &[SweepPoint],
    results: &[ClosedNetworkResult],
) -> anyhow::Result<()> {
    let y_desc = match fig.measure {
        Measure::ResponseSecondMoment => "T² (second moment of response time)",
        _ => "throughput X",
    };
    let panels: Vec<Panel> = [("light", opts.light_tasks), ("heavy", opts.heavy_tasks)]
        .into_iter()
        .map(|(load, n)| Panel {
            name: format!("{load} load, N = {n}"),
            x_desc: "C (footprint reload time)",
            y_desc,
            curves: fig
                .series
                .iter()
                .enumerate()
                .map(|(i, s)| Curve {
                    label: s.label.clone(),
                    points: points
                        .iter()
                        .zip(results)
                        .filter(|(p, _)| p.series == i && p.load == load)
                        .map(|(p, r)| {
                            let e = match fig.measure {
                                Measure::ResponseSecondMoment => &r.response_second_moment,
                                _ => &r.throughput,
                            };
                            Point {
                                x: p.params.reload_time,
                                y: e.mean,
                                hw: e.half_width_98,
                            }
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let title = format!("Fig. {}: {}", fig.number, fig.title);
    plot::draw_svg(path, (1200, 600), &title, &panels)
}
