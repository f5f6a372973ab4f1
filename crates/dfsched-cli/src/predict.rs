//! `--predict [PROFILE]` of `bench df` and `bench cothreads`: the
//! simulator runs the benchmark's own parameters on the calibrated machine,
//! and the report shows each mode's predicted ratio to vanilla beside the
//! measured one, with the error.
//!
//! How a benchmark case becomes a simulation ([`df_case`], [`co_case`]):
//!
//! - the machine: as many CPUs as the run was allowed, one LLC; caches,
//!   costs, clock and migration cost from the profile
//!   ([`dfsched_sim::df_bench::run_calibrated`]); the kernel model of
//!   `dfsched_sim::program::body::kernel` with the profile's time slice as
//!   the quantum and the spread of the slices it measured as their noise;
//! - the work: the same threads, DFs (thread `t` on DF `t mod dfs`), DF
//!   bytes and write ratio, one line access per line per pass, and the
//!   further words a pass touches on a line already fetched as compute at
//!   the profile's per-access cost; a start gate, as the real benchmark has,
//!   with the threads started far enough apart that each is placed by the
//!   kernel model's draw on an idle CPU (where a real program's threads
//!   land at creation depends on timing the model does not know), and the
//!   run timed from the gate;
//! - the length: a real run makes up to billions of accesses; the
//!   simulation makes at most [`ACCESS_BUDGET`], so the passes are scaled
//!   by `scale` = budget / real accesses (at most 1), and so are the
//!   kernel's time constants (quantum, balance interval), so that a thread
//!   sees as many slices as in the real run. Per-event costs (a context
//!   switch, a migration, refilling a DF after a slice) are not scaled: a
//!   scaled run overstates them by 1/scale, which the report prints;
//! - the modes: `vanilla` → the kernel model alone, `dfsched` → dfsched's
//!   placement with the kernel ordering threads (the simulator's
//!   `dfsched-rr`, what the Linux runtime gets), `oracle`, `split` and
//!   `co-thread` → the simulator's policies of the same names;
//! - the figure: the median over [`SEEDS`] seeds (the kernel model's draws)
//!   of each policy's run time, and the ratio of medians to vanilla's, as
//!   the benchmark reports the ratio of its medians. `cothreads` counts
//!   operations in a fixed time, so its ratio is vanilla's time over the
//!   mode's (throughput); every thread does the same work in the
//!   simulation.

use anyhow::Context as _;
use dfsched_sim::df_bench::{self, DfBenchParams, DfPolicy};
use dfsched_sim::profile::{Calibration, MachineProfile};
use dfsched_sim::program::body::KernelModel;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Line accesses one simulated run may make.
pub const ACCESS_BUDGET: u64 = 12_000_000;
/// Seeds each policy is simulated with.
pub const SEEDS: u64 = 5;
/// The kernel's periodic balance interval on a busy CPU, ns (4 ms).
const KERNEL_BALANCE_NS: f64 = 4e6;

/// The slices' noise on `profile`'s machine: half their measured spread
/// over the median, in thousandths (at most 500); the kernel model's
/// default without a measure.
pub fn slice_jitter_milli(profile: &MachineProfile) -> u32 {
    let t = &profile.costs.timeslice;
    match (t.median_ns, t.min_ns, t.max_ns) {
        (Some(m), Some(lo), Some(hi)) if m > 0.0 => {
            (((hi - lo) / 2.0 / m) * 1000.0).round().clamp(0.0, 500.0) as u32
        }
        _ => KernelModel::default().slice_jitter_milli,
    }
}

/// The profile `--predict` names (or the default one), loaded.
pub struct Predictor {
    path: PathBuf,
    profile: MachineProfile,
    cal: Calibration,
}

impl Predictor {
    /// Loads the profile at `path` (`None`: the default path); a bad
    /// profile is an error before anything runs.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Predictor> {
        let (path, profile, cal) = crate::calibrate::load_profile(path)?;
        Ok(Predictor { path, profile, cal })
    }

    /// The slices' noise of this machine ([`slice_jitter_milli`]).
    fn slice_jitter_milli(&self) -> u32 {
        slice_jitter_milli(&self.profile)
    }

    /// `base` with the kernel model, quantum and length of this machine,
    /// for a real run of `real_accesses` line accesses.
    fn scaled(&self, mut base: DfBenchParams, real_accesses: u64) -> (DfBenchParams, f64) {
        let scale = (ACCESS_BUDGET as f64 / real_accesses.max(1) as f64).min(1.0);
        base.passes = ((f64::from(base.passes) * scale).round() as u32).max(1);
        base.quantum_cycles = ((self.cal.quantum_cycles as f64 * scale) as u64).max(1000);
        base.kernel = KernelModel {
            balance_interval_cycles: ((KERNEL_BALANCE_NS / self.cal.cycle_ns * scale) as u64)
                .max(1000),
            slice_jitter_milli: self.slice_jitter_milli(),
            ..KernelModel::default()
        };
        // Threads start far enough apart that each finds every CPU idle
        // and is placed by the kernel model's draw (the real program's
        // creation order says nothing about where its threads land), then
        // wait at the gate, as the benchmark's do.
        base.gate = true;
        base.spawn_gap_cycles = 10 * self.cal.cost.context_switch_cycles.max(1000);
        (base, scale)
    }

    /// Median run time over [`SEEDS`] seeds of each of `policies`, cycles;
    /// `run(seed)` gives one run time per policy.
    fn medians(
        policies: usize,
        run: impl Fn(u64) -> anyhow::Result<Vec<u64>>,
    ) -> anyhow::Result<Vec<u64>> {
        let mut by: Vec<Vec<u64>> = vec![Vec::new(); policies];
        for seed in 1..=SEEDS {
            for (i, x) in run(seed)?.into_iter().enumerate() {
                by[i].push(x);
            }
        }
        Ok(by
            .into_iter()
            .map(|mut v| {
                v.sort();
                v[v.len() / 2]
            })
            .collect())
    }

    /// Predicts one case: `modes` are (name, simulator policy, measured
    /// median seconds) with vanilla among them; `throughput` reports
    /// vanilla's time over the mode's instead of the mode's over vanilla's.
    pub fn predict(
        &self,
        params: DfBenchParams,
        real_accesses: u64,
        modes: &[(String, DfPolicy, Option<f64>)],
        throughput: bool,
    ) -> anyhow::Result<Prediction> {
        let (params, scale) = self.scaled(params, real_accesses);
        let policies: Vec<DfPolicy> = modes.iter().map(|m| m.1).collect();
        let med = Self::medians(policies.len(), |seed| {
            let p = DfBenchParams {
                seed,
                ..params.clone()
            };
            let r = df_bench::run_calibrated(&p, &self.cal, &policies, |_| {})
                .context("simulating the benchmark")?;
            // Timed from the gate, as the benchmark times its runs.
            let open = p.gate_open_cycles();
            Ok(r.results
                .iter()
                .map(|x| x.report.makespan_cycles.saturating_sub(open))
                .collect())
        })?;
        self.rows(
            scale,
            "a slice's context switch and DF refill",
            modes,
            &med,
            throughput,
        )
    }

    /// The prediction of run times `med` (cycles, one per mode, of a run
    /// scaled by `scale`, where `scaled` is what then weighs more than in
    /// the real run) beside the measurements.
    fn rows(
        &self,
        scale: f64,
        scaled: &str,
        modes: &[(String, DfPolicy, Option<f64>)],
        med: &[u64],
        throughput: bool,
    ) -> anyhow::Result<Prediction> {
        let vanilla = modes
            .iter()
            .position(|m| m.1 == DfPolicy::Vanilla)
            .map(|i| (med[i], modes[i].2));
        let rows = modes
            .iter()
            .zip(med)
            .map(|((name, policy, measured_s), &cycles)| {
                let predicted_s = self.cal.seconds(cycles) / scale;
                let ratio = |mode: f64, van: f64| {
                    if throughput {
                        van / mode
                    } else {
                        mode / van
                    }
                };
                let predicted = vanilla.map(|(v, _)| ratio(cycles as f64, v as f64));
                let measured = match (vanilla.and_then(|v| v.1), measured_s) {
                    (Some(v), Some(m)) if v > 0.0 && *m > 0.0 => Some(ratio(*m, v)),
                    _ => None,
                };
                let error = match (predicted, measured) {
                    (Some(p), Some(m)) => Some(p / m - 1.0),
                    _ => None,
                };
                PredictionRow {
                    mode: name.clone(),
                    policy: policy.name().to_string(),
                    measured_s: *measured_s,
                    predicted_s,
                    measured_ratio: measured,
                    predicted_ratio: predicted,
                    error,
                }
            })
            .collect();
        let scale_note = if scale >= 1.0 {
            "not scaled".to_string()
        } else {
            format!("{scaled} weigh {:.0}x as much", 1.0 / scale)
        };
        Ok(Prediction {
            profile: self.path.display().to_string(),
            scale,
            scale_note,
            seeds: SEEDS,
            ratio: if throughput {
                "throughput vs vanilla (vanilla time / mode time)"
            } else {
                "time vs vanilla (mode time / vanilla time)"
            }
            .into(),
            defaulted: self.cal.defaulted.iter().map(|s| s.to_string()).collect(),
            rows,
        })
    }
}

/// One mode's prediction beside its measurement.
#[derive(Clone, Debug, Serialize)]
pub struct PredictionRow {
    /// The benchmark's mode.
    pub mode: String,
    /// The simulator policy that stands for it.
    pub policy: String,
    /// The measured median, seconds.
    pub measured_s: Option<f64>,
    /// The simulated run time at full length, seconds (the scaled run's
    /// time over the scale).
    pub predicted_s: f64,
    /// Measured ratio to vanilla.
    pub measured_ratio: Option<f64>,
    /// Predicted ratio to vanilla.
    pub predicted_ratio: Option<f64>,
    /// predicted / measured − 1.
    pub error: Option<f64>,
}

/// A case's prediction.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// The profile used.
    pub profile: String,
    /// The simulated run's length over the real one's (≤ 1).
    pub scale: f64,
    /// What the scaling distorts.
    pub scale_note: String,
    /// Seeds per policy (medians).
    pub seeds: u64,
    /// What the ratios are.
    pub ratio: String,
    /// Profile costs that were not measured (defaults kept).
    pub defaulted: Vec<String>,
    /// One row per mode.
    pub rows: Vec<PredictionRow>,
}

/// The table of a prediction, for people.
pub fn render(p: &Prediction) -> String {
    let mut s = format!(
        "predicted on {} ({} seeds, run scaled by {:.4}: {}; ratios are {}){}\n",
        p.profile,
        p.seeds,
        p.scale,
        p.scale_note,
        p.ratio,
        if p.defaulted.is_empty() {
            String::new()
        } else {
            format!("; not measured, defaults kept: {}", p.defaulted.join(", "))
        }
    );
    s.push_str(&format!(
        "{:<10} {:>11} {:>11} {:>10} {:>10} {:>8}\n",
        "mode", "measured s", "predicted s", "measured", "predicted", "error"
    ));
    let r3 = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
    for r in &p.rows {
        s.push_str(&format!(
            "{:<10} {:>11} {:>11.3} {:>10} {:>10} {:>8}\n",
            r.mode,
            r3(r.measured_s),
            r.predicted_s,
            r3(r.measured_ratio),
            r3(r.predicted_ratio),
            r.error
                .map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0))
        ));
    }
    s
}

/// `bench df`'s case as the simulator's: see the module doc. Returns the
/// parameters and the real run's line accesses.
pub fn df_case(
    p: &dfsched_bench::Params,
    cpus: usize,
    pass_hit_cycles: u64,
) -> (DfBenchParams, u64) {
    let lines = p.lines_per_df() as u64;
    let per_line = p.stride().per_line() as u64;
    let params = DfBenchParams {
        nodes: 1,
        llcs: 1,
        cores: cpus.max(1) as u32,
        smt: 1,
        threads: p.threads as u32,
        processes: 1,
        dfs: p.dfs as u32,
        df_bytes: p.df_bytes as u64,
        passes: p.iterations.min(u64::from(u32::MAX)) as u32,
        write_pct: (p.write_ratio * 100.0).round() as u32,
        compute_per_pass_cycles: lines * (per_line - 1) * pass_hit_cycles,
        deal_round_robin: true,
        ..DfBenchParams::default()
    };
    let accesses = p.threads as u64 * p.iterations * lines;
    (params, accesses)
}

/// `bench df`'s mode as a simulator policy.
pub fn df_policy(m: dfsched_bench::Mode) -> DfPolicy {
    match m {
        dfsched_bench::Mode::Vanilla => DfPolicy::Vanilla,
        dfsched_bench::Mode::Dfsched | dfsched_bench::Mode::DfschedRecord => DfPolicy::DfschedRr,
        dfsched_bench::Mode::Oracle => DfPolicy::Oracle,
        dfsched_bench::Mode::Split => DfPolicy::Split,
    }
}

impl Predictor {
    /// The predicted cycles of one access of the benchmark's loop.
    pub fn pass_hit_cycles(&self) -> u64 {
        self.cal.l1_hit_cycles
    }

    /// Predicts a `bench df` case beside its report.
    pub fn df(&self, r: &dfsched_bench::BenchReport) -> anyhow::Result<Prediction> {
        let (params, accesses) =
            df_case(&r.params, r.machine.nr_cpus_allowed, self.pass_hit_cycles());
        let mut modes: Vec<(String, DfPolicy, Option<f64>)> = Vec::new();
        if !r.params.modes.contains(&dfsched_bench::Mode::Vanilla) {
            modes.push(("vanilla".into(), DfPolicy::Vanilla, None));
        }
        for &m in &r.params.modes {
            modes.push((
                m.as_str().to_string(),
                df_policy(m),
                r.modes.get(&m).map(|x| x.median_s),
            ));
        }
        self.predict(params, accesses, &modes, false)
    }
}

/// `bench cothreads`' mode as a simulator policy.
pub fn co_policy(m: dfsched_bench::cothreads::CoMode) -> DfPolicy {
    use dfsched_bench::cothreads::CoMode;
    match m {
        CoMode::Vanilla => DfPolicy::Vanilla,
        CoMode::CoThread => DfPolicy::CoThread,
        CoMode::Oracle => DfPolicy::Oracle,
        CoMode::Split => DfPolicy::Split,
    }
}

/// `bench cothreads`' case as the simulator's: each process's threads on
/// a DF of its own (the process's shared data), every access a write; an
/// operation (eight loads and eight stores on one line) is a line access
/// and seven more of the benchmark's accesses as compute. `ops` is the
/// real run's operation count (vanilla's median), which sets the length.
pub fn co_case(
    p: &dfsched_bench::cothreads::CoParams,
    cpus: usize,
    ops: f64,
    pass_hit_cycles: u64,
) -> (DfBenchParams, u64) {
    let lines = (p.shared_bytes as u64).div_ceil(64).max(1);
    let threads = (p.processes * p.threads) as u64;
    let passes = (ops / (threads * lines) as f64).round().max(1.0);
    let params = DfBenchParams {
        nodes: 1,
        llcs: 1,
        cores: cpus.max(1) as u32,
        smt: 1,
        threads: threads as u32,
        processes: p.processes as u32,
        dfs: p.processes as u32,
        df_per_process: true,
        df_bytes: lines * 64,
        passes: passes.min(f64::from(u32::MAX)) as u32,
        write_pct: 100,
        compute_per_pass_cycles: lines * 7 * pass_hit_cycles,
        ..DfBenchParams::default()
    };
    (params, ops.max(1.0) as u64)
}

impl Predictor {
    /// Predicts a `bench cothreads` case beside its report. The measured
    /// "seconds" of a mode are the time it would take to do vanilla's
    /// median operations at its median rate, so that ratios of times are
    /// inverse ratios of throughput.
    pub fn cothreads(&self, r: &dfsched_bench::cothreads::CoReport) -> anyhow::Result<Prediction> {
        use dfsched_bench::cothreads::CoMode;
        let Some(v) = r.modes.get(&CoMode::Vanilla) else {
            anyhow::bail!("--predict needs the vanilla mode to set the run's length");
        };
        let ops = v.ops.median;
        let (params, accesses) = co_case(
            &r.params,
            r.machine.nr_cpus_allowed,
            ops,
            self.pass_hit_cycles(),
        );
        let modes: Vec<(String, DfPolicy, Option<f64>)> = r
            .params
            .modes
            .iter()
            .map(|&m| {
                let measured = r
                    .modes
                    .get(&m)
                    .filter(|x| x.ops.median > 0.0)
                    .map(|x| r.params.seconds * ops / x.ops.median);
                (m.as_str().to_string(), co_policy(m), measured)
            })
            .collect();
        self.predict(params, accesses, &modes, true)
    }
}

/// `bench chat`'s mode as a simulator policy.
pub fn chat_policy(m: dfsched_bench::chat::ChatMode) -> DfPolicy {
    use dfsched_bench::chat::ChatMode;
    match m {
        ChatMode::Vanilla => DfPolicy::Vanilla,
        ChatMode::Dfsched => DfPolicy::DfschedRr,
        ChatMode::CoThread => DfPolicy::CoThread,
        ChatMode::Oracle => DfPolicy::Oracle,
        ChatMode::Split => DfPolicy::Split,
    }
}

/// Bursts one simulated Chat run may hold (about 16 bytes each).
const CHAT_BURST_BUDGET: u64 = 1_500_000;

impl Predictor {
    /// Predicts a `bench chat` case beside its report
    /// ([`dfsched_sim::chat_bench`]): the same rooms on the CPUs allowed,
    /// each user's messages scaled down to a budget of bursts (and the
    /// kernel's time constants with them); a socket call costs half of what
    /// a same-CPU wake-up costs beyond its context switch (a write and a
    /// read on a socket pair; TCP on loopback costs more). Throughput
    /// ratios, from the median run times.
    pub fn chat(&self, r: &dfsched_bench::chat::ChatReport) -> anyhow::Result<Prediction> {
        use dfsched_sim::chat_bench::{self, ChatSimParams};
        let p = &r.params;
        let per_message = p.rooms as u64 * 20 * 180;
        let messages = (CHAT_BURST_BUDGET / per_message.max(1)).clamp(1, p.messages.max(1));
        let scale = messages as f64 / p.messages.max(1) as f64;
        let sys = self
            .cal
            .wake_same_cycles
            .saturating_sub(self.cal.cost.context_switch_cycles)
            / 2;
        let params = ChatSimParams {
            cpus: r.machine.nr_cpus_allowed.max(1) as u32,
            rooms: p.rooms as u32,
            messages: messages as u32,
            syscall_cycles: sys.max(1),
            quantum_cycles: ((self.cal.quantum_cycles as f64 * scale) as u64).max(1000),
            kernel: KernelModel {
                balance_interval_cycles: ((KERNEL_BALANCE_NS / self.cal.cycle_ns * scale) as u64)
                    .max(1000),
                slice_jitter_milli: self.slice_jitter_milli(),
                ..KernelModel::default()
            },
            // As for bench df: each thread placed by the kernel model's
            // draw on an idle CPU, then the gate.
            spawn_gap_cycles: 10 * self.cal.cost.context_switch_cycles.max(1000),
            seed: 1,
        };
        let modes: Vec<(String, DfPolicy, Option<f64>)> = p
            .modes
            .iter()
            .map(|&m| {
                (
                    m.as_str().to_string(),
                    chat_policy(m),
                    r.modes.get(&m).map(|x| x.time_s.median),
                )
            })
            .collect();
        let policies: Vec<DfPolicy> = modes.iter().map(|m| m.1).collect();
        let med = Self::medians(policies.len(), |seed| {
            let q = ChatSimParams {
                seed,
                ..params.clone()
            };
            let r = chat_bench::run_calibrated(&q, &self.cal, &policies)
                .context("simulating the Chat benchmark")?;
            let open = chat_bench::gate_open_cycles(&q);
            Ok(r.iter()
                .map(|x| x.report.makespan_cycles.saturating_sub(open))
                .collect())
        })?;
        self.rows(scale, "start-up and the gate", &modes, &med, true)
    }
}
