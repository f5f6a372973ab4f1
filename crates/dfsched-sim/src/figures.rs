//! The sweeps behind Squillante & Lazowska's Figs. 4–9, as data: which
//! curves, at which loads, over which reload times `C`. The CLI runs them
//! (in parallel, with a progress bar) and writes CSV and plots; this module
//! only says what to run, so every point is a pure function of its
//! parameters and seed.
//!
//! | fig. | measure | curves |
//! |---|---|---|
//! | 4 | `R(I)` | 4-way 8K-set and 2-way 16K-set caches, footprints F/2, F, 2F (analytic) |
//! | 5 | `X` | FCFS, LP, FP |
//! | 6 | `X` | MI, FCFS, LP, FP |
//! | 7 | `T²` | MI, LMI(4), LMR(4), FCFS, LP, FP |
//! | 8 | `X` | LP+pause, LMI(2/4/8)+pause, MI, FP |
//! | 9 | `X` | FCFS, LP, FP with bus interference (f_ba = 0.1), and without |
//!
//! Setting (§V): `M = 32`, `D = Z = 1`, `F = 1900` blocks, 4-way 8K-set
//! cache, `0 ≤ C ≤ 1`. The paper's text does not give its light and heavy
//! populations; the defaults here are `N = 40` (1.25 tasks per processor:
//! the pause heuristic engages from `C = 0.8`) and `N = 128` (4 per
//! processor: from `C = 0.25`).

use crate::analytic::bus::DEFAULT_F_BA;
use crate::analytic::reload::reload_ratios;
use crate::analytic::AnalyticError;
use crate::closed_network::ClosedNetworkParams;
use dfsched_core::dispatch::queue::QueuePolicy;
use serde::Serialize;

/// What a figure plots on its y axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The reload miss ratio `R(I)` against intervening tasks `I`.
    ReloadRatio,
    /// Throughput `X` against `C`.
    Throughput,
    /// Second moment of the response time `T²` against `C`.
    ResponseSecondMoment,
}

/// One curve of a simulated figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    /// Its legend.
    pub label: String,
    /// The policy.
    pub policy: QueuePolicy,
    /// Whether the pause heuristic is on.
    pub pause: bool,
    /// `f_ba` when the bus is modelled.
    pub bus_f_ba: Option<f64>,
}

/// How big a sweep is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SweepOptions {
    /// `N` under light load.
    pub light_tasks: u32,
    /// `N` under heavy load.
    pub heavy_tasks: u32,
    /// Values of `C`, evenly spaced over `[0, 1]` (at least 2).
    pub c_points: u32,
    /// Replications per point.
    pub replications: u32,
    /// Measured time per replication.
    pub run_time: f64,
    /// Warm-up per replication.
    pub warmup_time: f64,
    /// The seed of every point.
    pub seed: u64,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            light_tasks: 40,
            heavy_tasks: 128,
            c_points: 11,
            replications: 5,
            run_time: 2000.0,
            warmup_time: 200.0,
            seed: 1,
        }
    }
}

/// A simulated figure: its curves and measure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figure {
    /// 5 to 9.
    pub number: u8,
    /// The paper's caption, shortened.
    pub title: &'static str,
    /// The y axis.
    pub measure: Measure,
    /// The curves.
    pub series: Vec<Series>,
}

/// One point to simulate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Index into [`Figure::series`].
    pub series: usize,
    /// `"light"` or `"heavy"`.
    pub load: &'static str,
    /// The full parameters.
    pub params: ClosedNetworkParams,
}

/// Why a figure was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FigureError {
    /// Not one of 4–9.
    #[error("there is no figure {0}: the paper's simulated and analytic figures are 4 to 9")]
    Unknown(u8),
    /// Figure 4 is analytic: use [`reload_curves`].
    #[error("figure 4 is analytic (R(I)); it has no simulated sweep")]
    Analytic,
    /// Fewer than two values of `C`.
    #[error("a sweep needs at least 2 values of C, not {0}")]
    TooFewPoints(u32),
}

fn series(label: &str, policy: &str, pause: bool, bus: bool) -> Series {
    Series {
        label: label.to_string(),
        policy: policy.parse().expect("figure policies are valid names"),
        pause,
        bus_f_ba: bus.then_some(DEFAULT_F_BA),
    }
}

/// The simulated figure `number` (5–9).
pub fn figure(number: u8) -> Result<Figure, FigureError> {
    let s = |l, p| series(l, p, false, false);
    let (title, measure, series) = match number {
        4 => return Err(FigureError::Analytic),
        5 => (
            "Throughput of FCFS, LP and FP (M = 32)",
            Measure::Throughput,
            vec![s("FCFS", "fcfs"), s("LP", "lp"), s("FP", "fp")],
        ),
        6 => (
            "Throughput of MI, FCFS, LP and FP (M = 32)",
            Measure::Throughput,
            vec![
                s("MI", "mi"),
                s("FCFS", "fcfs"),
                s("LP", "lp"),
                s("FP", "fp"),
            ],
        ),
        7 => (
            "T² of MI, LMI, LMR, FCFS, LP and FP (M = 32)",
            Measure::ResponseSecondMoment,
            vec![
                s("MI", "mi"),
                s("LMI(4)", "lmi:4"),
                s("LMR(4)", "lmr:4"),
                s("FCFS", "fcfs"),
                s("LP", "lp"),
                s("FP", "fp"),
            ],
        ),
        8 => (
            "Throughput of LP and LMI with pause, MI and FP (M = 32)",
            Measure::Throughput,
            vec![
                series("LP+pause", "lp", true, false),
                series("LMI(2)+pause", "lmi:2", true, false),
                series("LMI(4)+pause", "lmi:4", true, false),
                series("LMI(8)+pause", "lmi:8", true, false),
                s("MI", "mi"),
                s("FP", "fp"),
            ],
        ),
        9 => (
            "Throughput of FCFS, LP and FP with bus interference (M = 32)",
            Measure::Throughput,
            vec![
                series("FCFS bus", "fcfs", false, true),
                series("LP bus", "lp", false, true),
                series("FP bus", "fp", false, true),
                s("FCFS", "fcfs"),
                s("LP", "lp"),
                s("FP", "fp"),
            ],
        ),
        n => return Err(FigureError::Unknown(n)),
    };
    Ok(Figure {
        number,
        title,
        measure,
        series,
    })
}

/// Every point of a simulated figure: each curve at both loads and every
/// `C`, in that order.
pub fn sweep(fig: &Figure, opts: &SweepOptions) -> Result<Vec<SweepPoint>, FigureError> {
    if opts.c_points < 2 {
        return Err(FigureError::TooFewPoints(opts.c_points));
    }
    let mut out = Vec::new();
    for (load, tasks) in [("light", opts.light_tasks), ("heavy", opts.heavy_tasks)] {
        for (i, s) in fig.series.iter().enumerate() {
            for k in 0..opts.c_points {
                let c = f64::from(k) / f64::from(opts.c_points - 1);
                out.push(SweepPoint {
                    series: i,
                    load,
                    params: ClosedNetworkParams {
                        pause: s.pause,
                        bus_f_ba: s.bus_f_ba,
                        replications: opts.replications,
                        run_time: opts.run_time,
                        warmup_time: opts.warmup_time,
                        seed: opts.seed,
                        ..ClosedNetworkParams::paper(s.policy, tasks, c)
                    },
                });
            }
        }
    }
    Ok(out)
}

/// One analytic curve of Fig. 4.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReloadCurve {
    /// Its legend.
    pub label: String,
    /// Footprint in blocks.
    pub footprint_blocks: u64,
    /// Sets.
    pub sets: u32,
    /// Ways.
    pub ways: u32,
    /// `R(0..=I)`.
    pub ratios: Vec<f64>,
}

/// Fig. 4: `R(I)` for `I = 0..=max_intervening` for a 4-way cache of 8K
/// sets and a 2-way cache of 16K sets (the same size), for footprints of
/// half, once and twice `footprint_blocks`.
pub fn reload_curves(
    footprint_blocks: u64,
    max_intervening: u32,
) -> Result<Vec<ReloadCurve>, AnalyticError> {
    let mut out = Vec::new();
    for (sets, ways) in [(8192u32, 4u32), (16384, 2)] {
        for f in [footprint_blocks / 2, footprint_blocks, footprint_blocks * 2] {
            out.push(ReloadCurve {
                label: format!("{ways}-way {}K sets, F={f}", sets / 1024),
                footprint_blocks: f,
                sets,
                ways,
                ratios: reload_ratios(f.max(1), sets, ways, max_intervening)?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_simulated_figure_sweeps_each_curve_at_both_loads_over_c() {
        let opts = SweepOptions {
            c_points: 3,
            ..SweepOptions::default()
        };
        for n in 5..=9 {
            let fig = figure(n).unwrap();
            let pts = sweep(&fig, &opts).unwrap();
            assert_eq!(pts.len(), fig.series.len() * 2 * 3);
            assert_eq!(pts[0].params.reload_time, 0.0);
            assert_eq!(pts[2].params.reload_time, 1.0);
            assert_eq!(pts.last().unwrap().params.tasks, 128);
            assert!(pts.iter().all(|p| p.params.processors == 32));
        }
        assert!(figure(8).unwrap().series.iter().filter(|s| s.pause).count() == 4);
        assert!(figure(9)
            .unwrap()
            .series
            .iter()
            .any(|s| s.bus_f_ba == Some(0.1)));
    }

    #[test]
    fn unknown_figures_and_tiny_sweeps_are_refused() {
        assert_eq!(figure(3), Err(FigureError::Unknown(3)));
        assert_eq!(figure(4), Err(FigureError::Analytic));
        let opts = SweepOptions {
            c_points: 1,
            ..SweepOptions::default()
        };
        assert!(sweep(&figure(5).unwrap(), &opts).is_err());
    }

    #[test]
    fn fig_4_has_six_rising_curves_and_the_2_way_cache_reloads_more() {
        let curves = reload_curves(1900, 20).unwrap();
        assert_eq!(curves.len(), 6);
        for c in &curves {
            assert!(c.ratios.windows(2).all(|w| w[1] >= w[0]), "{}", c.label);
        }
        // Same size, less associativity: more conflicts early on.
        assert!(curves[4].ratios[2] > curves[1].ratios[2]);
    }
}
