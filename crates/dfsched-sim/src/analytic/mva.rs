//! Exact Mean Value Analysis of the Fixed Processor (FP) policy, with the
//! cache-reload model and, optionally, bus interference (Squillante &
//! Lazowska §III and §V: "the exact MVA technique in combination with our
//! analytic cache model was used … for the FP policy").
//!
//! Under FP the `N` tasks are divided evenly among the `M` processors and
//! never move, so the closed network falls apart into `M` independent ones:
//! a processor (an FCFS queue with exponential service) and the delay centre
//! (think time `Z`, infinite server), with `⌈N/M⌉` or `⌊N/M⌋` tasks each.
//!
//! ```text
//!        ┌────────── think, mean Z ──────────┐
//!        ▼                                   │
//!   ─► queue ─► processor p, mean s = D + C·R̄ (eq. 6, or eq. 7 with bus) ─┘
//! ```
//!
//! **The reload term.** A visit's service is `D + C·R(i)` with `i` the
//! number of distinct tasks that ran on the processor since this one left.
//! Under FCFS with `n` tasks that number is exact in terms of the state at
//! the task's departure: the `k` tasks then at the processor all run before
//! its next service, and of the `n − 1 − k` then thinking, each runs before
//! it exactly if it comes back first. With exponential think times the
//! returning task's rank among them is uniform, so
//! `i = k + U`, `U` uniform on `0..=n−1−k`. By the arrival theorem a
//! departing task sees `k` distributed as the time-average queue of the same
//! network with `n − 1` tasks. The model takes the service time as
//! exponential with the resulting mean `s = D + C·E[R(k + U)]` — the one
//! approximation, needed to keep product form — and iterates `s` to its
//! fixed point (`s` rises with queueing, which raises `k`).
//!
//! With `s` fixed, the network is solved by exact MVA (the recursion over
//! populations `1..=n` of Lazowska et al., ch. 6), which also gives the
//! results for every smaller population. The response time's second moment
//! follows from the arrival theorem too: a task arriving to find `k` ahead
//! waits for `k + 1` exponential services, so `E[T²] = s²·E[(k+1)(k+2)]`.
//!
//! With bus interference, `U_bus` is the fixed point of eqs. (7)–(9) over the
//! whole machine ([`super::bus::solve_with_bus`]).

use super::bus::{solve_with_bus, BusFeedback, BusParams};
use super::reload::{check_geometry, reload_ratios};
use super::{check_at_least, AnalyticError};
use crate::cache::CacheGeometry;
use serde::{Deserialize, Serialize};

/// The FP model's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FixedProcessorParams {
    /// `M`, processors; at least 1.
    pub processors: u32,
    /// `N`, tasks; at least 1.
    pub tasks: u32,
    /// `D`, mean computing demand per visit; positive.
    pub demand: f64,
    /// `Z`, mean time non-schedulable between visits; not negative.
    pub think_time: f64,
    /// `C`, time to reload a whole footprint; not negative.
    pub reload_time: f64,
    /// `F`, the footprint of every task, in cache blocks.
    pub footprint_blocks: u64,
    /// `S` and `K` of each processor's cache.
    pub cache: CacheGeometry,
    /// `f_ba` to model bus interference (eqs. 7–9); `None` to ignore the
    /// bus (eq. 6).
    pub bus_f_ba: Option<f64>,
}

impl FixedProcessorParams {
    /// The paper's setting (§V): `M = 32`, `D = Z = 1`, `F = 1900` blocks, a
    /// 4-way cache of 8K sets, no bus; `N` and `C` as given.
    pub fn paper(tasks: u32, reload_time: f64) -> Self {
        FixedProcessorParams {
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
            bus_f_ba: None,
        }
    }
}

/// The solution for one total population.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MvaPoint {
    /// Total tasks `N`.
    pub tasks: u32,
    /// `X̄`: visits completed per unit of time, all processors together.
    pub throughput: f64,
    /// `T̄`: mean time per visit at the processors (queueing plus service).
    pub response: f64,
    /// `T²`: second moment of that time.
    pub response_second_moment: f64,
    /// `R̄`: mean reload miss ratio per visit.
    pub mean_reload_ratio: f64,
    /// `U_cpu`: mean processor utilisation.
    pub cpu_utilization: f64,
    /// `U_bus` when the bus is modelled.
    pub bus_utilization: Option<f64>,
    /// Whether the bus saturated (then the point is an optimistic bound).
    pub bus_saturated: bool,
}

/// The FP solution for `N` tasks and for every smaller population.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MvaResult {
    /// The parameters solved.
    pub params: FixedProcessorParams,
    /// `X̄` at `N`.
    pub throughput: f64,
    /// `T̄` at `N`.
    pub response: f64,
    /// `T²` at `N`.
    pub response_second_moment: f64,
    /// `R̄` at `N`.
    pub mean_reload_ratio: f64,
    /// `U_cpu` at `N`.
    pub cpu_utilization: f64,
    /// `U_bus` at `N`, when modelled.
    pub bus_utilization: Option<f64>,
    /// Whether the bus saturated at `N`.
    pub bus_saturated: bool,
    /// `R(0..⌈N/M⌉−1)`, the reload ratios used.
    pub reload_ratios: Vec<f64>,
    /// The solution for populations `1..=N` (the last is the one above).
    pub per_population: Vec<MvaPoint>,
}

/// The largest `N` solved (the per-population list has `N` entries).
pub const MAX_TASKS: u32 = 1 << 20;

/// Solves FP for `params.tasks` tasks and every smaller population.
pub fn fixed_processor(params: &FixedProcessorParams) -> Result<MvaResult, AnalyticError> {
    check(params)?;
    let m = params.processors;
    let per_cpu_max = params.tasks.div_ceil(m);
    let r = reload_ratios(
        params.footprint_blocks,
        params.cache.sets,
        params.cache.ways,
        per_cpu_max.saturating_sub(1),
    )?;
    let model = Stations::new(params, &r);
    let per_population = match params.bus_f_ba {
        None => {
            // One solution per processor population serves every N.
            let st = (0..=per_cpu_max)
                .map(|n| model.solve(n, 1.0))
                .collect::<Result<Vec<_>, _>>()?;
            (1..=params.tasks)
                .map(|n| {
                    let (q, extra) = ((n / m) as usize, n % m);
                    let hi = st.get(q + 1).copied().unwrap_or_default();
                    combine(n, m, extra, &st[q], &hi, None)
                })
                .collect()
        }
        Some(f_ba) => {
            let mut bus = BusParams::new(m, params.reload_time, params.demand);
            bus.f_ba = f_ba;
            (1..=params.tasks)
                .map(|n| {
                    let (q, extra) = (n / m, n % m);
                    let sol = solve_with_bus(&bus, |u_bus| {
                        let inflate = 1.0 / (1.0 - u_bus);
                        let lo = model.solve(q, inflate)?;
                        // With no processor above q tasks, q + 1 may lie
                        // beyond the R table: skip it.
                        let hi = if extra > 0 {
                            model.solve(q + 1, inflate)?
                        } else {
                            Station::default()
                        };
                        let p = combine(n, m, extra, &lo, &hi, Some(u_bus));
                        let fb = BusFeedback {
                            mean_ratio: p.mean_reload_ratio,
                            cpu_utilization: p.cpu_utilization,
                        };
                        Ok::<_, AnalyticError>((p, fb))
                    })?;
                    let mut p = sol.solution;
                    p.bus_utilization = Some(sol.u_bus);
                    p.bus_saturated = sol.saturated;
                    Ok(p)
                })
                .collect::<Result<Vec<_>, AnalyticError>>()?
        }
    };
    let last = *per_population.last().expect("N ≥ 1");
    Ok(MvaResult {
        params: *params,
        throughput: last.throughput,
        response: last.response,
        response_second_moment: last.response_second_moment,
        mean_reload_ratio: last.mean_reload_ratio,
        cpu_utilization: last.cpu_utilization,
        bus_utilization: last.bus_utilization,
        bus_saturated: last.bus_saturated,
        reload_ratios: r,
        per_population,
    })
}

/// One processor with its own tasks, solved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Station {
    /// Visits per unit of time.
    throughput: f64,
    /// Mean time per visit (queue + service).
    response: f64,
    /// Its second moment.
    response_sq: f64,
    /// Mean reload ratio per visit.
    ratio: f64,
    /// Busy fraction.
    utilization: f64,
}

/// The pieces shared by every station solution.
struct Stations<'a> {
    /// The model.
    p: &'a FixedProcessorParams,
    /// `R(i)` for `i = 0..`.
    r: &'a [f64],
    /// `prefix[i] = R(0) + … + R(i−1)`, for the uniform averages.
    prefix: Vec<f64>,
    /// `ln i!` for `i = 0..=max population`.
    ln_fact: Vec<f64>,
}

impl<'a> Stations<'a> {
    fn new(p: &'a FixedProcessorParams, r: &'a [f64]) -> Self {
        let mut prefix = vec![0.0];
        for &x in r {
            prefix.push(prefix.last().copied().unwrap_or(0.0) + x);
        }
        let mut ln_fact = vec![0.0];
        for i in 1..=r.len() + 1 {
            ln_fact.push(ln_fact[i - 1] + (i as f64).ln());
        }
        Stations {
            p,
            r,
            prefix,
            ln_fact,
        }
    }

    /// Time-average distribution of the number of tasks at the processor
    /// (queue + service) with `m` tasks in the station and mean service `s`:
    /// the product form `P(k) ∝ s^k·Z^(m−k)/(m−k)!`.
    fn queue_distribution(&self, m: usize, s: f64) -> Vec<f64> {
        let z = self.p.think_time;
        let mut dist = vec![0.0; m + 1];
        if z == 0.0 {
            dist[m] = 1.0; // nobody ever leaves the queue
            return dist;
        }
        let (ln_s, ln_z) = (s.ln(), z.ln());
        let ln_w: Vec<f64> = (0..=m)
            .map(|k| k as f64 * ln_s + (m - k) as f64 * ln_z - self.ln_fact[m - k])
            .collect();
        let top = ln_w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut total = 0.0;
        for (d, lw) in dist.iter_mut().zip(&ln_w) {
            *d = (lw - top).exp();
            total += *d;
        }
        dist.iter_mut().for_each(|d| *d /= total);
        dist
    }

    /// `E[R(k + U)]` for `k` distributed as `dist` (over `0..=m`) and `U`
    /// uniform on `0..=m−k`.
    fn mean_ratio(&self, dist: &[f64]) -> f64 {
        let m = dist.len() - 1;
        dist.iter()
            .enumerate()
            .map(|(k, pk)| pk * (self.prefix[m + 1] - self.prefix[k]) / (m + 1 - k) as f64)
            .sum()
    }

    /// Solves one processor with `n` tasks, the reload transient inflated
    /// by `inflate` (1, or `1/(1 − U_bus)` by eq. 7).
    fn solve(&self, n: u32, inflate: f64) -> Result<Station, AnalyticError> {
        if n == 0 {
            return Ok(Station::default());
        }
        let (d, c) = (self.p.demand, self.p.reload_time * inflate);
        let m = n as usize - 1;
        debug_assert!(m < self.r.len(), "R is computed up to ⌈N/M⌉ − 1");
        // Fixed point of s = D + C·E[R(i)]: non-decreasing from s = D.
        let mut s = d;
        let mut iterations = 0;
        let (dist, ratio) = loop {
            let dist = self.queue_distribution(m, s);
            let ratio = self.mean_ratio(&dist);
            let next = d + c * ratio;
            iterations += 1;
            if (next - s).abs() <= 1e-13 * next {
                break (dist, ratio);
            }
            if iterations >= 100_000 {
                return Err(AnalyticError::NoConvergence {
                    what: "the FP service time",
                    iterations,
                });
            }
            s = next;
        };
        // Exact MVA over populations 1..=n with service s.
        let z = self.p.think_time;
        let (mut x, mut resp, mut q) = (0.0, 0.0, 0.0);
        for j in 1..=n {
            resp = s * (1.0 + q);
            x = f64::from(j) / (resp + z);
            q = x * resp;
        }
        let resp_sq = s
            * s
            * dist
                .iter()
                .enumerate()
                .map(|(k, pk)| pk * ((k + 1) * (k + 2)) as f64)
                .sum::<f64>();
        Ok(Station {
            throughput: x,
            response: resp,
            response_sq: resp_sq,
            ratio,
            utilization: x * s,
        })
    }
}

/// The machine's point for `n` tasks: `extra` processors with `q + 1`
/// tasks (`hi`), the others with `q` (`lo`).
fn combine(n: u32, m: u32, extra: u32, lo: &Station, hi: &Station, u_bus: Option<f64>) -> MvaPoint {
    let (a, b) = (f64::from(m - extra), f64::from(extra));
    let x = a * lo.throughput + b * hi.throughput;
    let by_visits =
        |f: fn(&Station) -> f64| (a * lo.throughput * f(lo) + b * hi.throughput * f(hi)) / x;
    MvaPoint {
        tasks: n,
        throughput: x,
        response: by_visits(|s| s.response),
        response_second_moment: by_visits(|s| s.response_sq),
        mean_reload_ratio: by_visits(|s| s.ratio),
        cpu_utilization: (a * lo.utilization + b * hi.utilization) / f64::from(m),
        bus_utilization: u_bus,
        bus_saturated: false,
    }
}

fn check(p: &FixedProcessorParams) -> Result<(), AnalyticError> {
    let count = |name, v: u32, max: u32| {
        if v == 0 || v > max {
            Err(AnalyticError::OutOfRange {
                name,
                value: f64::from(v),
                why: "it must be at least 1 and at most the limit",
            })
        } else {
            Ok(())
        }
    };
    count("M", p.processors, u32::MAX)?;
    count("N", p.tasks, MAX_TASKS)?;
    if !(p.demand.is_finite() && p.demand > 0.0) {
        return Err(AnalyticError::OutOfRange {
            name: "D",
            value: p.demand,
            why: "it must be finite and positive",
        });
    }
    check_at_least("Z", p.think_time, 0.0)?;
    check_at_least("C", p.reload_time, 0.0)?;
    if p.footprint_blocks == 0 {
        return Err(AnalyticError::EmptyFootprint);
    }
    check_geometry(p.cache)?;
    if let Some(f) = p.bus_f_ba {
        if !(f > 0.0 && f <= 1.0) {
            return Err(AnalyticError::OutOfRange {
                name: "f_ba",
                value: f,
                why: "it is a fraction in (0, 1]",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
