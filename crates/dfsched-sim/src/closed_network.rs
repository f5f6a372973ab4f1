//! Squillante & Lazowska's closed network (§II–§III), simulated exactly
//! under any ready-queue policy of [`dfsched_core::dispatch::queue`].
//!
//! ```text
//!        ┌──────────── delay centre: think, Exp(Z) ────────────┐
//!        ▼                                                     │
//!   task_ready ─► ready queue ─► M processors, each visit Exp(D + C·R(i)) ─┘
//!                 (policy: FCFS, FP, LP, MI, LMI(A), LMR(A), ± pause)
//! ```
//!
//! `N` tasks alternate between the delay centre and the multiprocessor. A
//! visit's service is exponential with mean `D + C·R(i)` (eq. 6), or
//! `D + C·R(i)/(1 − U_bus)` with bus interference (eq. 7), where `i` is the
//! number of *distinct* tasks that ran on the processor since this task last
//! ran there — the convention of [`crate::analytic::mva`] — and `R` comes
//! from [`crate::analytic::reload`] for footprint `F` and the cache's `S`
//! sets and `K` ways: `R(0) = 0`, nothing intervened. A task that never ran
//! on the processor reloads what of its footprint a warm cache would hold,
//! [`crate::analytic::reload::cold_reload_ratio`], the limit of `R(I)`
//! (`R = 1` for a footprint that fits).
//!
//! With the bus, `U_bus` is the fixed point of eqs. (7)–(9), found as the
//! paper does (§III-C) by [`crate::analytic::bus::solve_with_bus`]: each
//! iteration simulates every replication at the current `U_bus` (the same
//! seeds each time, so the map is deterministic) and feeds back the
//! measured `R̄` and `U_cpu`.
//!
//! Measures (§V): throughput `X` (visits per unit time), mean response `T`
//! (ready → burst done) and its second moment `T²`, and the `R̄` and
//! `U_cpu` that eq. (9) feeds back (see [`Replication`] for what each
//! counts at the window's edges), each as a mean over
//! replications with a 98% Student-t interval. Replication `r` draws from
//! stream `r` of the seed, so a point is a pure function of its parameters.
//!
//! The policy's choices come from the core (the same code any body would
//! use); this module only keeps time, draws service and think times, and
//! measures. Time is in ticks, [`TICKS_PER_UNIT`] per unit of `D`.

mod network;
mod stats;
#[cfg(test)]
mod tests;

use network::{Network, Stamp, NARROW_TASKS};
pub use stats::{t_quantile_99, Estimate};

use crate::analytic::bus::{bus_utilization, BusFeedback};
use crate::analytic::reload::reload_ratios;
use crate::analytic::AnalyticError;
use crate::cache::CacheGeometry;
use crate::engine::{RunOutcome, Simulation};
use crate::rng::SimRng;
use crate::time::{SimTime, Ticks};
use dfsched_core::dispatch::queue::{QueueError, QueuePolicy};
use serde::Serialize;

/// Ticks per unit of time (per unit of `D`): exponential draws round to
/// ticks, so a unit must be many of them.
pub const TICKS_PER_UNIT: f64 = 1e6;

/// The most tasks simulated (each processor keeps a word per task).
pub const MAX_TASKS: u32 = 1 << 16;

/// The most replications of one point.
pub const MAX_REPLICATIONS: u32 = 1000;

/// Everything a run depends on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClosedNetworkParams {
    /// `M`, processors.
    pub processors: u32,
    /// `N`, tasks.
    pub tasks: u32,
    /// `D`, mean demand per visit; positive.
    pub demand: f64,
    /// `Z`, mean think time; positive.
    pub think_time: f64,
    /// `C`, time to reload a whole footprint; not negative.
    pub reload_time: f64,
    /// `F`, footprint in cache blocks.
    pub footprint_blocks: u64,
    /// `S` sets and `K` ways of each processor's cache.
    pub cache: CacheGeometry,
    /// The dispatch policy.
    pub policy: QueuePolicy,
    /// The pause heuristic (`C ≥ (M/N)·Z`), for LP, MI, LMI, LMR.
    pub pause: bool,
    /// `f_ba` to model bus interference (eqs. 7–9); `None` for eq. 6.
    pub bus_f_ba: Option<f64>,
    /// Time simulated before measuring, in units.
    pub warmup_time: f64,
    /// Time measured per replication, in units.
    pub run_time: f64,
    /// Independent replications (streams `0..R` of the seed).
    pub replications: u32,
    /// The seed.
    pub seed: u64,
}

impl ClosedNetworkParams {
    /// The paper's setting (§V): `M = 32`, `D = Z = 1`, `F = 1900` blocks, a
    /// 4-way cache of 8K sets, no pause, no bus; 10 replications of 2000
    /// units after 200 of warm-up.
    pub fn paper(policy: QueuePolicy, tasks: u32, reload_time: f64) -> Self {
        ClosedNetworkParams {
            processors: 32,
            tasks,
            demand: 1.0,
            think_time: 1.0,
            reload_time,
            footprint_blocks: 1900,
            cache: CacheGeometry {
                sets: 8192,
                ways: 4,
            },
            policy,
            pause: false,
            bus_f_ba: None,
            warmup_time: 200.0,
            run_time: 2000.0,
            replications: 10,
            seed: 1,
        }
    }
}

/// Why a run was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClosedNetworkError {
    /// A parameter out of its domain.
    #[error("{name} = {value} is out of range: {why}")]
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        why: &'static str,
    },
    /// The dispatcher refused the policy's configuration.
    #[error(transparent)]
    Policy(#[from] QueueError),
    /// The reload or bus model refused its parameters.
    #[error(transparent)]
    Model(#[from] AnalyticError),
}

/// One replication's measures over its window `[warm-up end, run end]`.
///
/// The per-visit measures (`throughput`, `response`, its second moment,
/// `mean_reload_ratio`) count the visits that *complete* in the window,
/// whole, wherever they began: the usual estimator of a closed network,
/// whose bias at the two edges cancels in the long run. `cpu_utilization`
/// is a time average and counts only the service *inside* the window: the
/// part of a visit begun before the warm-up ended is left out, and so is
/// the part of a visit still running at the end that falls after it. So
/// it lies in `[0, 1]` exactly.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Replication {
    /// The stream it drew from.
    pub stream: u64,
    /// Visits completed per unit of time.
    pub throughput: f64,
    /// Mean response time per visit.
    pub response: f64,
    /// Second moment of the response time.
    pub response_second_moment: f64,
    /// Mean reload miss ratio per visit (`R̄`).
    pub mean_reload_ratio: f64,
    /// Mean processor utilisation (`U_cpu`): service time inside the
    /// window over `M ×` the window; in `[0, 1]`.
    pub cpu_utilization: f64,
    /// Visits measured.
    pub visits: u64,
    /// Times a processor paused with tasks waiting.
    pub pauses: u64,
    /// Events the engine handled (warm-up included).
    pub events: u64,
}

/// A point: the measures over all replications.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClosedNetworkResult {
    /// What was run.
    pub params: ClosedNetworkParams,
    /// Whether the pause heuristic was engaged (`pause` and `C ≥ (M/N)·Z`).
    pub pausing: bool,
    /// `X`.
    pub throughput: Estimate,
    /// `T`.
    pub response: Estimate,
    /// `T²`.
    pub response_second_moment: Estimate,
    /// `R̄`.
    pub mean_reload_ratio: Estimate,
    /// `U_cpu`.
    pub cpu_utilization: Estimate,
    /// `U_bus` at the fixed point, when the bus is modelled.
    pub bus_utilization: Option<f64>,
    /// Whether eq. (9) reached 1 (the measures are then those at the last
    /// unsaturated `U_bus`: an optimistic bound).
    pub bus_saturated: bool,
    /// Bus iterations (simulations of every replication) run; 1 without the
    /// bus.
    pub bus_iterations: u32,
    /// Events handled, all replications and bus iterations together.
    pub events: u64,
    /// Each replication at the final `U_bus`.
    pub replications: Vec<Replication>,
}

/// Simulates one point (all replications; with the bus, until `U_bus`
/// settles).
pub fn simulate(p: &ClosedNetworkParams) -> Result<ClosedNetworkResult, ClosedNetworkError> {
    check(p)?;
    let ratios = ratio_table(p)?;
    let mut events = 0u64;
    let mut run_all = |u_bus: f64| -> Result<(Vec<Replication>, BusFeedback), ClosedNetworkError> {
        let reps = (0..u64::from(p.replications))
            .map(|r| replicate(p, &ratios, u_bus, r))
            .collect::<Result<Vec<_>, _>>()?;
        events += reps.iter().map(|r| r.events).sum::<u64>();
        let n = reps.len() as f64;
        let fb = BusFeedback {
            mean_ratio: reps.iter().map(|r| r.mean_reload_ratio).sum::<f64>() / n,
            cpu_utilization: reps.iter().map(|r| r.cpu_utilization).sum::<f64>() / n,
        };
        Ok((reps, fb))
    };
    let (reps, u_bus, saturated, iterations) = match p.bus_f_ba {
        None => (run_all(0.0)?.0, None, false, 1),
        Some(f_ba) => bus_fixed_point(p, f_ba, &mut run_all)?,
    };
    let est = |f: fn(&Replication) -> f64| {
        Estimate::from_samples(&reps.iter().map(f).collect::<Vec<_>>())
    };
    Ok(ClosedNetworkResult {
        params: *p,
        pausing: p.pause
            && p.reload_time >= f64::from(p.processors) / f64::from(p.tasks) * p.think_time,
        throughput: est(|r| r.throughput),
        response: est(|r| r.response),
        response_second_moment: est(|r| r.response_second_moment),
        mean_reload_ratio: est(|r| r.mean_reload_ratio),
        cpu_utilization: est(|r| r.cpu_utilization),
        bus_utilization: u_bus,
        bus_saturated: saturated,
        bus_iterations: iterations,
        events,
        replications: reps,
    })
}

/// The tolerance on `U_bus` between two iterations.
pub const BUS_TOLERANCE: f64 = 1e-3;

/// The most bus iterations (each simulates every replication).
pub const BUS_MAX_ITERATIONS: u32 = 100;

/// The fixed point of eqs. (7)–(9) by the paper's iteration (§III-C):
/// simulate at `U_bus = 0`, update `U_bus` by eq. (9) from the measured
/// `R̄` and `U_cpu`, repeat. Without noise the iterates climb monotonically
/// (see [`crate::analytic::bus`]); a simulated map is noisy, so the loop
/// also stops as soon as an iterate fails to climb — the remaining change
/// is noise, not drift — besides stopping on a change under
/// [`BUS_TOLERANCE`] or on saturation (eq. 9 reaching 1). Returns the
/// replications at the final `U_bus`, that `U_bus`, whether the bus
/// saturated, and the iterations run.
#[allow(clippy::type_complexity)]
fn bus_fixed_point(
    p: &ClosedNetworkParams,
    f_ba: f64,
    run_all: &mut impl FnMut(f64) -> Result<(Vec<Replication>, BusFeedback), ClosedNetworkError>,
) -> Result<(Vec<Replication>, Option<f64>, bool, u32), ClosedNetworkError> {
    let mut u = 0.0;
    let (mut reps, mut fb) = run_all(u)?;
    let mut iterations = 1;
    loop {
        let next = bus_utilization(
            p.processors,
            f_ba,
            p.reload_time,
            fb.mean_ratio,
            p.demand,
            fb.cpu_utilization,
        );
        if next >= 1.0 {
            return Ok((reps, Some(1.0), true, iterations));
        }
        if (next - u).abs() < BUS_TOLERANCE || (iterations > 1 && next <= u) {
            return Ok((reps, Some(u), false, iterations));
        }
        if iterations >= BUS_MAX_ITERATIONS {
            return Err(AnalyticError::NoConvergence {
                what: "the simulated bus utilisation (eqs. 7-9)",
                iterations,
            }
            .into());
        }
        u = next;
        (reps, fb) = run_all(u)?;
        iterations += 1;
    }
}

/// `R(0..N)`: enough for every count of distinct intervening tasks.
fn ratio_table(p: &ClosedNetworkParams) -> Result<Vec<f64>, AnalyticError> {
    reload_ratios(p.footprint_blocks, p.cache.sets, p.cache.ways, p.tasks)
}

/// Runs replication `stream` at bus utilisation `u_bus`, with 16-bit burst
/// stamps up to [`NARROW_TASKS`] tasks and 32-bit ones beyond.
fn replicate(
    p: &ClosedNetworkParams,
    ratios: &[f64],
    u_bus: f64,
    stream: u64,
) -> Result<Replication, ClosedNetworkError> {
    if p.tasks <= NARROW_TASKS {
        replicate_with::<i16>(p, ratios, u_bus, stream)
    } else {
        replicate_with::<i32>(p, ratios, u_bus, stream)
    }
}

/// [`replicate`] with burst stamps of type `S`.
fn replicate_with<S: Stamp>(
    p: &ClosedNetworkParams,
    ratios: &[f64],
    u_bus: f64,
    stream: u64,
) -> Result<Replication, ClosedNetworkError> {
    let model = Network::<S>::new(p, ratios, u_bus)?;
    let mut sim = Simulation::with_rng(model, SimRng::with_stream(p.seed, stream));
    let warm = SimTime((p.warmup_time * TICKS_PER_UNIT).round() as u64);
    let outcome = sim.run_until(warm);
    debug_assert_eq!(
        outcome,
        RunOutcome::TimeLimit,
        "a closed network never drains"
    );
    sim.model_mut().start_measuring(warm);
    let end = warm + Ticks((p.run_time * TICKS_PER_UNIT).round() as u64);
    let _ = sim.run_until(end);
    sim.model_mut().stop_measuring(end);
    let events = sim.stats().events_handled;
    let m = sim.model();
    let visits = m.visits.max(1) as f64;
    // The window as simulated: `run_time` rounded to whole ticks, so that a
    // processor busy throughout it has a utilisation of exactly 1.
    let window_ticks = end.since(warm).0;
    let window = network::units(window_ticks);
    Ok(Replication {
        stream,
        throughput: m.visits as f64 / window,
        response: m.response_sum / visits,
        response_second_moment: m.response_sq_sum / visits,
        mean_reload_ratio: m.ratio_sum / visits,
        // Both sides rounded once from exact integers, busy ≤ M × window:
        // the quotient cannot round above 1.
        cpu_utilization: m.busy_ticks as f64
            / (u128::from(p.processors) * u128::from(window_ticks)) as f64,
        visits: m.visits,
        pauses: m.dispatcher.stats().pauses - m.pauses_before,
        events,
    })
}

fn check(p: &ClosedNetworkParams) -> Result<(), ClosedNetworkError> {
    let bad = |name, value: f64, why| Err(ClosedNetworkError::OutOfRange { name, value, why });
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if p.processors == 0 {
        return bad("M", 0.0, "at least one processor");
    }
    if p.tasks == 0 || p.tasks > MAX_TASKS {
        return bad("N", f64::from(p.tasks), "1 to 65536 tasks");
    }
    if !positive(p.demand) {
        return bad("D", p.demand, "finite and positive");
    }
    if !positive(p.think_time) {
        return bad(
            "Z",
            p.think_time,
            "finite and positive (a closed network needs a delay centre)",
        );
    }
    if !(p.reload_time.is_finite() && p.reload_time >= 0.0) {
        return bad("C", p.reload_time, "finite and not negative");
    }
    if !(positive(p.run_time) && p.warmup_time.is_finite() && p.warmup_time >= 0.0) {
        return bad(
            "run time",
            p.run_time,
            "a positive run time and a non-negative warm-up",
        );
    }
    if (p.warmup_time + p.run_time) * TICKS_PER_UNIT > 1e18 {
        return bad(
            "run time",
            p.run_time,
            "warm-up + run must fit in 10^12 units",
        );
    }
    if p.replications == 0 || p.replications > MAX_REPLICATIONS {
        return bad("replications", f64::from(p.replications), "1 to 1000");
    }
    if let Some(f) = p.bus_f_ba {
        if !(f > 0.0 && f <= 1.0) {
            return bad("f_ba", f, "a fraction in (0, 1]");
        }
    }
    Ok(())
}
