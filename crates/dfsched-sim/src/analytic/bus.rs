//! Bus interference from cache reloading: Squillante & Lazowska §III-C,
//! eqs. (7)–(9).
//!
//! Reload traffic slows reloads down, which the model expresses by inflating
//! the reload transient by the bus utilisation (eq. 7):
//!
//! ```text
//!   service per visit     D + C·R(i) / (1 − U_bus)                     (7)
//!   one CPU's bus share   f_ba·C·R̄·U_cpu / (C·R̄ + D)                   (8)
//!   U_bus                 min(M·f_ba·C·R̄·U_cpu / (C·R̄ + D), 1)         (9)
//! ```
//!
//! `R̄` and `U_cpu` come out of solving the scheduling model with eq. (7), so
//! the paper iterates: start from `U_bus = 0`, solve, update `U_bus` by
//! eq. (9), and repeat until it changes by less than a tolerance or the bus
//! saturates. [`solve_with_bus`] runs that iteration around any model.
//!
//! The iteration map is non-decreasing in `U_bus` for the closed networks of
//! the paper (slower reloads keep processors busier and raise `R̄`), so from
//! 0 it climbs monotonically to the smallest fixed point or to saturation.

use super::{check_at_least, AnalyticError};
use serde::Serialize;

/// The paper's conservative fraction of a reload that occupies the bus.
pub const DEFAULT_F_BA: f64 = 0.1;

/// Eq. (7): the mean service per visit with the reload transient inflated
/// by bus utilisation. Infinite once the bus is saturated.
pub fn inflated_service_time(demand: f64, reload_time: f64, reload_ratio: f64, u_bus: f64) -> f64 {
    if u_bus >= 1.0 {
        return f64::INFINITY;
    }
    demand + reload_time * reload_ratio / (1.0 - u_bus)
}

/// Eq. (9): the bus utilisation of `processors` processors, each busy a
/// fraction `u_cpu` of the time, whose visits demand `demand` and reload a
/// mean fraction `mean_ratio` of a footprint costing `reload_time`.
pub fn bus_utilization(
    processors: u32,
    f_ba: f64,
    reload_time: f64,
    mean_ratio: f64,
    demand: f64,
    u_cpu: f64,
) -> f64 {
    let reload = reload_time * mean_ratio;
    if reload <= 0.0 {
        return 0.0;
    }
    (f64::from(processors) * f_ba * reload * u_cpu / (reload + demand)).min(1.0)
}

/// What a model reports to the bus iteration after one solution.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BusFeedback {
    /// `R̄`, the mean reload miss ratio per visit.
    pub mean_ratio: f64,
    /// `U_cpu`, the mean utilisation of a processor.
    pub cpu_utilization: f64,
}

/// Parameters of the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BusParams {
    /// `M`.
    pub processors: u32,
    /// `f_ba`, in `(0, 1]`; [`DEFAULT_F_BA`] in the paper.
    pub f_ba: f64,
    /// `C`.
    pub reload_time: f64,
    /// `D`.
    pub demand: f64,
    /// Stop when `U_bus` changes by less than this.
    pub tolerance: f64,
    /// Give up after this many solutions.
    pub max_iterations: u32,
}

impl BusParams {
    /// The paper's iteration for `M`, `C`, `D` with `f_ba = 0.1`, a
    /// tolerance of 1e-10 and up to 100,000 iterations.
    pub fn new(processors: u32, reload_time: f64, demand: f64) -> Self {
        BusParams {
            processors,
            f_ba: DEFAULT_F_BA,
            reload_time,
            demand,
            tolerance: 1e-10,
            max_iterations: 100_000,
        }
    }
}

/// The outcome of the iteration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BusSolution<T> {
    /// The final `U_bus` (1 when saturated).
    pub u_bus: f64,
    /// Whether eq. (9) reached 1: the bus is the bottleneck and the model's
    /// numbers at the last unsaturated `U_bus` are an optimistic bound.
    pub saturated: bool,
    /// Model solutions computed.
    pub iterations: u32,
    /// The model's solution at the final `U_bus` (at the last unsaturated
    /// one when saturated).
    pub solution: T,
    /// What the model reported with it.
    pub feedback: BusFeedback,
}

/// Runs the fixed-point iteration of §III-C around `solve`, which solves
/// the scheduling model for a given `U_bus` (using eq. 7 for its service
/// times) and reports `R̄` and `U_cpu`.
pub fn solve_with_bus<T, E>(
    params: &BusParams,
    mut solve: impl FnMut(f64) -> Result<(T, BusFeedback), E>,
) -> Result<BusSolution<T>, E>
where
    E: From<AnalyticError>,
{
    check_params(params)?;
    let mut u = 0.0;
    let (mut sol, mut fb) = solve(u)?;
    let mut iterations = 1;
    loop {
        let next = bus_utilization(
            params.processors,
            params.f_ba,
            params.reload_time,
            fb.mean_ratio,
            params.demand,
            fb.cpu_utilization,
        );
        if next >= 1.0 {
            return Ok(BusSolution {
                u_bus: 1.0,
                saturated: true,
                iterations,
                solution: sol,
                feedback: fb,
            });
        }
        let settled = (next - u).abs() < params.tolerance;
        u = next;
        (sol, fb) = solve(u)?;
        iterations += 1;
        if settled {
            return Ok(BusSolution {
                u_bus: u,
                saturated: false,
                iterations,
                solution: sol,
                feedback: fb,
            });
        }
        if iterations >= params.max_iterations {
            return Err(AnalyticError::NoConvergence {
                what: "the bus utilisation (eqs. 7-9)",
                iterations,
            }
            .into());
        }
    }
}

fn check_params(p: &BusParams) -> Result<(), AnalyticError> {
    if p.processors == 0 {
        return Err(AnalyticError::OutOfRange {
            name: "M",
            value: 0.0,
            why: "there must be at least one processor",
        });
    }
    if !(p.f_ba > 0.0 && p.f_ba <= 1.0) {
        return Err(AnalyticError::OutOfRange {
            name: "f_ba",
            value: p.f_ba,
            why: "it is a fraction in (0, 1]",
        });
    }
    check_at_least("C", p.reload_time, 0.0)?;
    check_at_least("D", p.demand, 0.0)?;
    let positive = p.tolerance.is_finite() && p.tolerance > 0.0;
    if !positive || p.max_iterations == 0 {
        return Err(AnalyticError::OutOfRange {
            name: "tolerance",
            value: p.tolerance,
            why: "the iteration needs a positive tolerance and at least one step",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_9_scales_with_processors_and_caps_at_one() {
        let u = bus_utilization(8, 0.1, 1.0, 0.5, 1.0, 1.0);
        assert!((u - 8.0 * 0.1 * 0.5 / 1.5).abs() < 1e-12);
        assert!((bus_utilization(8, 0.1, 1.0, 0.5, 1.0, 0.5) - u / 2.0).abs() < 1e-12);
        assert_eq!(bus_utilization(320, 0.1, 1.0, 0.5, 1.0, 1.0), 1.0);
        assert_eq!(bus_utilization(32, 0.1, 0.0, 0.5, 1.0, 1.0), 0.0);
    }

    #[test]
    fn eq_7_inflates_only_the_reload_part() {
        assert_eq!(inflated_service_time(1.0, 0.5, 0.4, 0.5), 1.4);
        assert!(inflated_service_time(1.0, 0.5, 0.4, 1.0).is_infinite());
    }

    /// A toy model whose utilisation grows with the service time, as a
    /// closed network's does: U_cpu = s / (s + 1).
    fn toy(c: f64, r: f64) -> impl FnMut(f64) -> Result<(f64, BusFeedback), AnalyticError> {
        move |u_bus| {
            let s = inflated_service_time(1.0, c, r, u_bus);
            Ok((
                s,
                BusFeedback {
                    mean_ratio: r,
                    cpu_utilization: s / (s + 1.0),
                },
            ))
        }
    }

    #[test]
    fn the_iteration_finds_the_fixed_point_of_eqs_7_to_9() {
        let p = BusParams::new(8, 1.0, 1.0);
        let sol = solve_with_bus(&p, toy(1.0, 0.5)).unwrap();
        assert!(!sol.saturated);
        // At the fixed point, eq. 9 of the solution gives U_bus back.
        let again = bus_utilization(8, 0.1, 1.0, 0.5, 1.0, sol.feedback.cpu_utilization);
        assert!((again - sol.u_bus).abs() < 1e-9, "{again} vs {}", sol.u_bus);
        assert!(sol.u_bus > 0.0 && sol.solution > 1.5);
    }

    #[test]
    fn a_heavy_reload_load_saturates_the_bus() {
        let p = BusParams::new(64, 1.0, 1.0);
        let sol = solve_with_bus(&p, toy(1.0, 1.0)).unwrap();
        assert!(sol.saturated);
        assert_eq!(sol.u_bus, 1.0);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut p = BusParams::new(8, 1.0, 1.0);
        p.f_ba = 0.0;
        assert!(solve_with_bus(&p, toy(1.0, 0.5)).is_err());
        let p = BusParams::new(0, 1.0, 1.0);
        assert!(solve_with_bus(&p, toy(1.0, 0.5)).is_err());
    }
}
