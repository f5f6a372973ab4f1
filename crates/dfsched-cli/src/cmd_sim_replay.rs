//! `dfsched sim replay FILE… --cpus N`: recorded runs (`DFSCHED_RECORD`,
//! `dfsched run --record`) replayed on a simulated machine of any size
//! under every policy ([`dfsched_sim::replay`]), reported as `sim
//! df-bench` reports (run time, ratio to vanilla, misses by kind, context
//! switches, migrations), with the recorded run's time beside the
//! prediction of the policy it ran under.
//!
//! Files are read and decoded here; the replay itself does no I/O. The
//! policies run in parallel (one thread each, at most the CPUs allowed);
//! a progress bar counts them on stderr when it is a terminal and `--json`
//! is off.

use crate::cmd_sim_rq::peak_rss_kib;
use anyhow::{bail, Context as _};
use clap::Args;
use dfsched_sim::df_bench::DfPolicy;
use dfsched_sim::profile::Calibration;
use dfsched_sim::replay::{self, ReplayParams, ReplayPlan, ReplayPolicyResult};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

/// `sim replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Recordings, one per process of the program (`FILE`, `FILE.PID`…);
    /// they line up by the wall clock of their start.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// CPUs of the simulated machine [default: the CPUs the first
    /// recording's runtime placed on]; --nodes × --llcs × --smt must divide
    /// it.
    #[arg(long)]
    cpus: Option<u32>,
    /// NUMA nodes.
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// LLCs per node.
    #[arg(long, default_value_t = 1)]
    llcs: u32,
    /// Hardware threads per core.
    #[arg(long, default_value_t = 1)]
    smt: u32,
    /// A machine profile (`dfsched calibrate`) pricing the machine [default:
    /// the default profile if there is one, else the simulator's documented
    /// defaults].
    #[arg(long, value_name = "PROFILE")]
    machine: Option<PathBuf>,
    /// Policies, comma separated: vanilla, dfsched, dfsched-rr, oracle,
    /// split, co-thread. The Linux runtime's placement is dfsched-rr.
    #[arg(long, default_value = "vanilla,dfsched,dfsched-rr,oracle,split")]
    policies: String,
    /// Line accesses one policy's replay makes at most: longer recordings
    /// are scaled down to it.
    #[arg(long, default_value_t = replay::DEFAULT_ACCESS_BUDGET)]
    access_budget: u64,
    /// Size of a DF the program did not declare with dfsched_df_size, bytes.
    #[arg(long, default_value_t = replay::DEFAULT_DF_BYTES)]
    default_df_bytes: u64,
    /// Percent of a DF's lines a thread's sweep writes.
    #[arg(long, default_value_t = 100)]
    write_pct: u32,
    /// The program's accesses per line of a sweep (8: every 8-byte word).
    #[arg(long, default_value_t = 8)]
    accesses_per_line: u32,
    /// Seed of the kernel model's draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay the other processes' load the recording saw, as background
    /// tasks pinned to its CPUs: auto = when the simulated machine has as
    /// many CPUs as the recording's (its own machine, where the recorded
    /// time is to be predicted), on, off.
    #[arg(long, value_enum, default_value = "auto")]
    outside_load: OutsideLoad,
    /// Replay every block for its recorded time (open loop), even for
    /// threads the recording shows waiting for each other (by default
    /// those are replayed as token rings: a wake comes when the partner
    /// has done its part).
    #[arg(long)]
    open_loop: bool,
    /// Print JSON instead of a table (wall time and memory left out, so the
    /// same input prints the same JSON).
    #[arg(long)]
    json: bool,
}

/// `--outside-load`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OutsideLoad {
    /// On when the machine has the recording's CPU count.
    Auto,
    /// Always.
    On,
    /// Never: the program alone on the machine.
    Off,
}

/// The calibration `--machine` (or the default profile) gives, its name and
/// its slice noise.
fn calibration(path: Option<&std::path::Path>) -> anyhow::Result<(String, Calibration, u32)> {
    let default = crate::calibrate::default_profile_path()
        .ok()
        .filter(|p| p.exists());
    match path.map(|p| p.to_path_buf()).or(default) {
        Some(p) => {
            let (p, profile, cal) = crate::calibrate::load_profile(Some(&p))?;
            let jitter = crate::predict::slice_jitter_milli(&profile);
            Ok((p.display().to_string(), cal, jitter))
        }
        None => Ok((
            "the simulator's defaults (no profile: run `dfsched calibrate`)".into(),
            Calibration::default(),
            dfsched_sim::program::body::KernelModel::default().slice_jitter_milli,
        )),
    }
}

/// Runs `sim replay`.
pub fn run(a: ReplayArgs) -> anyhow::Result<()> {
    let mut policies = Vec::new();
    for name in a
        .policies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match DfPolicy::parse(name) {
            Some(p) if !policies.contains(&p) => policies.push(p),
            Some(_) => bail!("--policies names {name} twice"),
            None => bail!("unknown policy {name:?}; known: {}", DfPolicy::names()),
        }
    }
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    let recordings = a
        .files
        .iter()
        .map(|f| crate::cmd_record::load(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cpus = a.cpus.unwrap_or(recordings[0].header.cpus.max(1));
    let per_core = a.nodes * a.llcs * a.smt;
    if per_core == 0 || cpus == 0 || !cpus.is_multiple_of(per_core) {
        bail!(
            "--cpus {cpus} is not a multiple of --nodes {} × --llcs {} × --smt {}",
            a.nodes,
            a.llcs,
            a.smt
        );
    }
    let (profile, cal, jitter) = calibration(a.machine.as_deref())?;
    let params = ReplayParams {
        nodes: a.nodes,
        llcs: a.llcs,
        cores: cpus / per_core,
        smt: a.smt,
        access_budget: a.access_budget,
        default_df_bytes: a.default_df_bytes,
        write_pct: a.write_pct,
        accesses_per_line: a.accesses_per_line,
        slice_jitter_milli: jitter,
        seed: a.seed,
        outside_load: match a.outside_load {
            OutsideLoad::On => true,
            OutsideLoad::Off => false,
            OutsideLoad::Auto => cpus == recordings[0].header.cpus,
        },
        closed_loop: !a.open_loop,
        ..ReplayParams::default()
    };
    replay::topology(&params)?;
    let plan = ReplayPlan::new(&recordings, &params, &cal).context("building the replay")?;
    let started = Instant::now();
    let results = run_parallel(&plan, &params, &cal, &policies, !a.json)?;
    let wall_s = started.elapsed().as_secs_f64();
    let result = replay::with_ratios(&plan, &params, results);
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &result)?;
        writeln!(out)?;
        return Ok(());
    }
    let files: Vec<String> = a.files.iter().map(|f| f.display().to_string()).collect();
    writeln!(
        out,
        "replay of {}: {} threads in {} process(es), {} DFs ({} of the default {} B), recorded run {:.3} s, {:.3} CPU s, {:.3} s blocked, {:.3} s waiting for a CPU{}",
        files.join(", "),
        plan.threads,
        plan.processes,
        plan.df_bytes.len(),
        plan.dfs_defaulted,
        params.default_df_bytes,
        plan.recorded_run_ns as f64 * 1e-9,
        plan.cpu_ns as f64 * 1e-9,
        plan.blocked_ns as f64 * 1e-9,
        plan.wait_ns as f64 * 1e-9,
        if plan.dropped > 0 {
            format!("; {} events were dropped when recording", plan.dropped)
        } else {
            String::new()
        }
    )?;
    let capacity = f64::from(recordings[0].header.cpus.max(1)) * plan.recorded_run_ns as f64;
    writeln!(
        out,
        "the program's threads used {:.0} % of the recorded CPUs' time; other processes' load {}",
        plan.cpu_ns as f64 / capacity.max(1.0) * 100.0,
        if params.outside_load {
            format!(
                "replayed as {} background task(s), {:.3} CPU s",
                plan.outside_tasks,
                plan.outside_cpu_ns as f64 * 1e-9
            )
        } else {
            "not replayed (--outside-load)".to_string()
        }
    )?;
    if plan.rings.is_empty() {
        writeln!(
            out,
            "blocking: replayed open loop (each block lasts its recorded time){}",
            if params.closed_loop {
                ": no group of threads on a DF waits for itself, or the recording has no run periods"
            } else {
                " (--open-loop)"
            }
        )?;
    }
    for r in &plan.rings {
        let tids: Vec<String> = r.tids.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "closed loop: threads {} on {} wait for each other: a ring of {} token(s) (on a CPU at once: {:.2} recorded, {:.2} counting run-queue wait), {} hand-offs each ({} replayed); their {:.3} s blocked become its waits",
            tids.join(","),
            r.df,
            r.tokens,
            r.running_milli as f64 / 1000.0,
            r.runnable_milli as f64 / 1000.0,
            r.recorded_rounds,
            r.replayed_rounds,
            r.blocked_ns as f64 * 1e-9
        )?;
    }
    writeln!(
        out,
        "machine: {} CPUs ({} node(s) × {} LLC(s) × {} cores × {} SMT), priced by {}",
        result.cpus, params.nodes, params.llcs, params.cores, params.smt, profile
    )?;
    writeln!(
        out,
        "scale {:.5}{}",
        plan.scale,
        if plan.scale < 1.0 {
            format!(
                " (a context switch, a migration and a DF refill weigh {:.0}x as much as in the real run)",
                1.0 / plan.scale
            )
        } else {
            " (not scaled)".to_string()
        }
    )?;
    writeln!(
        out,
        "{:<11} {:>12} {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>10}",
        "policy",
        "predicted s",
        "vs van.",
        "cold",
        "reload",
        "capacity",
        "coherence",
        "ctx sw",
        "migr.",
        "events"
    )?;
    for r in &result.results {
        let m = &r.report.misses;
        let ratio = r
            .runtime_vs_vanilla_milli
            .map_or("-".to_string(), |v| format!("{:.3}", v as f64 / 1000.0));
        writeln!(
            out,
            "{:<11} {:>12.3} {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>10}",
            r.policy.name(),
            r.predicted_ns as f64 * 1e-9,
            ratio,
            m.cold,
            m.reload,
            m.capacity,
            m.coherence,
            r.report.memory.context_switches,
            r.report.migrations,
            r.report.events
        )?;
    }
    if let Some(r) = result.recorded_policy() {
        let rec = plan.recorded_run_ns as f64;
        writeln!(
            out,
            "recorded run {:.3} s under the runtime; the replay's {} predicts {:.3} s ({:+.1} %){}",
            rec * 1e-9,
            r.policy.name(),
            r.predicted_ns as f64 * 1e-9,
            (r.predicted_ns as f64 / rec.max(1.0) - 1.0) * 100.0,
            if u64::from(recordings[0].header.cpus) != result.cpus as u64 {
                format!(
                    " on {} CPUs; it was recorded on {}",
                    result.cpus, recordings[0].header.cpus
                )
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        out,
        "replay took {:.2} s{}",
        wall_s,
        peak_rss_kib().map_or(String::new(), |k| format!(
            ", peak memory (VmHWM) {:.1} MiB",
            k as f64 / 1024.0
        ))
    )?;
    Ok(())
}

/// Every policy's replay, in parallel (module doc), in `policies`' order.
fn run_parallel(
    plan: &ReplayPlan,
    params: &ReplayParams,
    cal: &Calibration,
    policies: &[DfPolicy],
    bar_wanted: bool,
) -> anyhow::Result<Vec<ReplayPolicyResult>> {
    use indicatif::{ProgressBar, ProgressStyle};
    let bar = if bar_wanted && std::io::stderr().is_terminal() {
        ProgressBar::new(policies.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} policies {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(policies.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<anyhow::Result<ReplayPolicyResult>>>> =
        Mutex::new((0..policies.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                // Relaxed: the counter only hands out indices; results go
                // through the mutex.
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&policy) = policies.get(i) else {
                    break;
                };
                let r = replay::run_policy(plan, params, cal, policy)
                    .with_context(|| format!("replaying under {}", policy.name()));
                slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                bar.set_message(policy.name());
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    slots
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every policy ran"))
        .collect()
}
