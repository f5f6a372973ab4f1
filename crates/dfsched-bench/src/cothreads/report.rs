//! The co-thread benchmark's report: per-mode summaries, ratios of medians,
//! paired per-round ratios, and the text tables.
//!
//! **Paired ratios** ([`PairedRatio`], shared with `bench spin`; why they
//! are the figure to compare: [`crate::stats`]): here each round's
//! `ops(mode) / ops(vanilla)`, operations being what a fixed-time run
//! counts. The ratio of medians ([`CoRatios`]) is kept beside them: the two
//! agreeing says the drift was small. A mode with no round paired has none
//! (`null` in JSON, `-` in the table).

use super::agent::CoAgent;
use super::{CoMode, CoParams, CoRun};
use crate::machine::Machine;
use crate::report::{
    describe_machine, group_by_mode, machine_note, paired_cell, ratio_cell, render_grid_cells,
    KVM_NOTE,
};
use crate::stats::{median, ratio, PairedRatio, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One mode's runs and their summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoModeReport {
    /// Operations per run (all processes).
    pub ops: Summary,
    /// Operations per second per run.
    pub ops_per_s: Summary,
    /// Median of the runs' process spreads.
    pub median_process_spread: f64,
    /// Per-round `ops / vanilla ops` of the same round; `None` for vanilla
    /// itself and when no round has both.
    pub paired_ratio: Option<PairedRatio>,
    /// Every run.
    pub runs: Vec<CoRun>,
}

/// `mode`'s per-round ratios of operations to vanilla's in `runs` (see
/// [`PairedRatio`]); `None` for vanilla and when no round pairs up.
pub fn paired_ratio(runs: &[CoRun], mode: CoMode) -> Option<PairedRatio> {
    PairedRatio::of(runs, mode, CoMode::Vanilla, |r| {
        (r.mode, r.round, r.ops_total as f64)
    })
}

/// The result of one case. JSON: `{ params, machine, agent: { requested,
/// running, failure }, modes: { "<mode>": { ops: {median,min,max,std_dev},
/// ops_per_s: {..}, median_process_spread, paired_ratio: {median,min,max,
/// rounds,per_round:[..]} | null, runs: [..] } }, ratios: { co_thread_vs_vanilla,
/// oracle_vs_vanilla, split_vs_vanilla, co_thread_vs_oracle }, note }`;
/// ratios above 1 mean more work done.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoReport {
    /// What ran.
    pub params: CoParams,
    /// Where.
    pub machine: Machine,
    /// Whether co-thread workers had a private agent.
    pub agent: CoAgent,
    /// Per mode.
    pub modes: BTreeMap<CoMode, CoModeReport>,
    /// Ratios of median operations.
    pub ratios: CoRatios,
    /// How to read the figures here.
    pub note: String,
}

/// Ratios of median operation counts; `None` when a side did not run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoRatios {
    /// co-thread / vanilla.
    pub co_thread_vs_vanilla: Option<f64>,
    /// oracle / vanilla: what perfect co-thread packing gains at best.
    pub oracle_vs_vanilla: Option<f64>,
    /// split / vanilla: the worst case for sharing.
    pub split_vs_vanilla: Option<f64>,
    /// co-thread / oracle: 1 means co-thread packed as well as the oracle.
    pub co_thread_vs_oracle: Option<f64>,
}

impl CoReport {
    /// Groups `runs` by mode and summarises them.
    pub fn new(params: CoParams, machine: Machine, agent: CoAgent, runs: Vec<CoRun>) -> CoReport {
        let modes: BTreeMap<CoMode, CoModeReport> = group_by_mode(runs.iter().cloned(), |r| r.mode)
            .into_iter()
            .filter_map(|(m, mode_runs)| {
                let ops: Vec<f64> = mode_runs.iter().map(|r| r.ops_total as f64).collect();
                let rate: Vec<f64> = mode_runs.iter().map(|r| r.ops_per_s).collect();
                let spread: Vec<f64> = mode_runs.iter().map(|r| r.process_spread).collect();
                Some((
                    m,
                    CoModeReport {
                        ops: Summary::of(&ops)?,
                        ops_per_s: Summary::of(&rate)?,
                        median_process_spread: median(&spread)?,
                        paired_ratio: paired_ratio(&runs, m),
                        runs: mode_runs,
                    },
                ))
            })
            .collect();
        let med = |m: CoMode| modes.get(&m).map(|r| r.ops.median);
        let ratios = CoRatios {
            co_thread_vs_vanilla: ratio(med(CoMode::CoThread), med(CoMode::Vanilla)),
            oracle_vs_vanilla: ratio(med(CoMode::Oracle), med(CoMode::Vanilla)),
            split_vs_vanilla: ratio(med(CoMode::Split), med(CoMode::Vanilla)),
            co_thread_vs_oracle: ratio(med(CoMode::CoThread), med(CoMode::Oracle)),
        };
        let mut note = machine_note(&machine).to_string();
        if machine.nr_cpus_allowed == 1 && params.modes.iter().any(|m| m.is_pinned()) {
            note.push_str(
                "\nnote: only one CPU is allowed: oracle and split pin every thread to it, \
                 so they measure pinning alone, not packing against spreading.",
            );
        }
        CoReport {
            params,
            machine,
            agent,
            modes,
            ratios,
            note,
        }
    }
}

/// A grid of co-thread cases (the one grid shape: [`crate::suite::GridOf`]).
pub type CoGridReport = crate::suite::GridOf<CoReport>;

/// One line describing a case.
pub fn describe_co_params(p: &CoParams) -> String {
    format!(
        "{} processes × {} threads, {} B shared per process, {} s per run, {} run{} per mode, seed {}",
        p.processes,
        p.threads,
        p.shared_bytes,
        p.seconds,
        p.repeat,
        if p.repeat == 1 { "" } else { "s" },
        p.seed
    )
}

/// The per-mode table of one case: `/vanilla` is the ratio of medians,
/// `paired /vanilla` the median [min–max] of the per-round ratios.
pub fn render_co_table(r: &CoReport) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(format!(
        "{:<9} {:>14} {:>14} {:>14} {:>12} {:>12} {:>8}  {}",
        "mode",
        "median ops",
        "min ops",
        "max ops",
        "sd ops",
        "proc spread",
        "/vanilla",
        "paired /vanilla [min–max]"
    ));
    let vanilla = r.modes.get(&CoMode::Vanilla).map(|m| m.ops.median);
    for (mode, m) in &r.modes {
        line(format!(
            "{:<9} {:>14.0} {:>14.0} {:>14.0} {:>12.0} {:>11.1}% {:>8}  {}",
            mode.as_str(),
            m.ops.median,
            m.ops.min,
            m.ops.max,
            m.ops.std_dev,
            m.median_process_spread * 100.0,
            ratio_cell(ratio(Some(m.ops.median), vanilla)),
            paired_cell(m.paired_ratio.as_ref())
        ));
    }
    out
}

/// A whole case for people.
pub fn render_co_report(r: &CoReport) -> String {
    format!(
        "dfsched bench cothreads: {}\n{}\n{}\n\n{}{}\n",
        describe_co_params(&r.params),
        describe_machine(&r.machine),
        r.agent.describe(&r.params.modes),
        render_co_table(r),
        r.note
    )
}

/// A grid for people: a table per cell, then Table I's layout with the
/// paired ratios of every mode and co-thread's ratio of medians.
pub fn render_co_grid(g: &CoGridReport) -> String {
    let mut out = render_grid_cells(
        "cothreads",
        &g.grid,
        &g.machine,
        g.cells
            .iter()
            .map(|c| (describe_co_params(&c.params), render_co_table(c))),
    );
    if let Some(c) = g.cells.first() {
        let _ = writeln!(out, "\n{}", c.agent.describe(&c.params.modes));
    }
    let _ = writeln!(
        out,
        "\npaired /vanilla: median of the per-round ratios; medians: ratio of median ops\n\
         {:>9} {:>7} {:>9} {:>17} {:>17} {:>17} {:>19}",
        "processes",
        "threads",
        "shared B",
        "co-thread paired",
        "oracle paired",
        "split paired",
        "co-thread medians"
    );
    for c in &g.cells {
        let paired = |m: CoMode| {
            ratio_cell(
                c.modes
                    .get(&m)
                    .and_then(|r| r.paired_ratio.as_ref().map(|p| p.median)),
            )
        };
        let _ = writeln!(
            out,
            "{:>9} {:>7} {:>9} {:>17} {:>17} {:>17} {:>19}",
            c.params.processes,
            c.params.threads,
            c.params.shared_bytes,
            paired(CoMode::CoThread),
            paired(CoMode::Oracle),
            paired(CoMode::Split),
            ratio_cell(c.ratios.co_thread_vs_vanilla)
        );
    }
    let _ = writeln!(
        out,
        "{}",
        g.cells.first().map_or(KVM_NOTE, |c| c.note.as_str())
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: CoMode, round: usize, ops: u64) -> CoRun {
        CoRun {
            mode,
            round,
            ops_total: ops,
            ops_per_process: vec![ops / 2, ops / 2],
            process_spread: 0.0,
            elapsed_s: 1.0,
            ops_per_s: ops as f64,
            agent_reports: None,
        }
    }

    fn machine() -> Machine {
        Machine::describe(&"0-1".parse().unwrap())
    }

    #[test]
    fn report_divides_median_operations() {
        let r = CoReport::new(
            CoParams::default(),
            machine(),
            CoAgent::off(),
            vec![
                run(CoMode::Vanilla, 0, 100),
                run(CoMode::CoThread, 0, 120),
                run(CoMode::Vanilla, 1, 300),
                run(CoMode::CoThread, 1, 360),
            ],
        );
        assert_eq!(r.ratios.co_thread_vs_vanilla, Some(1.2));
        assert_eq!(r.ratios.oracle_vs_vanilla, None);
        let v = serde_json::to_value(&r).unwrap();
        for key in ["median", "min", "max", "std_dev"] {
            assert!(v["modes"]["co-thread"]["ops"][key].is_number());
        }
        assert!(render_co_report(&r).contains("1.200"));
    }

    #[test]
    fn a_mode_twice_vanilla_every_round_has_paired_median_2_whatever_the_drift() {
        // Vanilla drifts 10x between rounds; the ratio of medians is thrown
        // off by the odd count, the paired ratio is not.
        let mut runs = Vec::new();
        for (round, v) in [100u64, 1000, 150, 900, 120].into_iter().enumerate() {
            runs.push(run(CoMode::Vanilla, round, v));
            runs.push(run(CoMode::Oracle, round, 2 * v));
            runs.push(run(CoMode::Split, round, v / 2));
        }
        let r = CoReport::new(CoParams::default(), machine(), CoAgent::off(), runs);
        let o = r.modes[&CoMode::Oracle].paired_ratio.clone().unwrap();
        assert_eq!((o.median, o.min, o.max, o.rounds), (2.0, 2.0, 2.0, 5));
        let s = r.modes[&CoMode::Split].paired_ratio.clone().unwrap();
        assert_eq!((s.median, s.rounds), (0.5, 5));
        assert_eq!(r.modes[&CoMode::Vanilla].paired_ratio, None);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["modes"]["oracle"]["paired_ratio"]["median"], 2.0);
        assert!(v["modes"]["vanilla"]["paired_ratio"].is_null());
        assert!(render_co_table(&r).contains("2.000 [2.000–2.000]"));
    }

    #[test]
    fn paired_ratios_compare_operations_not_rates() {
        // Co-thread did 1.5x vanilla's operations in twice the time: the
        // figure paired is operations (a fixed-time run's count), not ops/s.
        let mut co = run(CoMode::CoThread, 0, 150);
        co.elapsed_s = 2.0;
        co.ops_per_s = 75.0;
        let p = paired_ratio(&[run(CoMode::Vanilla, 0, 100), co], CoMode::CoThread).unwrap();
        assert_eq!(p.per_round, vec![1.5]);
    }

    #[test]
    fn a_mode_without_any_vanilla_run_has_no_paired_ratio_and_renders() {
        let r = CoReport::new(
            CoParams {
                modes: vec![CoMode::Oracle, CoMode::Split],
                ..CoParams::default()
            },
            machine(),
            CoAgent::off(),
            vec![run(CoMode::Oracle, 0, 100), run(CoMode::Split, 0, 50)],
        );
        assert_eq!(r.modes[&CoMode::Oracle].paired_ratio, None);
        assert_eq!(r.ratios.oracle_vs_vanilla, None);
        let table = render_co_table(&r);
        assert!(table.lines().nth(1).unwrap().trim_end().ends_with('-'));
        let grid = render_co_grid(&CoGridReport {
            grid: "paper".into(),
            machine: machine(),
            cells: vec![r],
        });
        assert!(grid.contains("oracle paired"));
    }

    #[test]
    fn one_allowed_cpu_is_said_when_pinned_modes_ran() {
        let one = Machine::describe(&"0".parse().unwrap());
        let r = CoReport::new(CoParams::default(), one.clone(), CoAgent::off(), vec![]);
        assert!(r.note.contains("only one CPU"), "{}", r.note);
        let r = CoReport::new(
            CoParams {
                modes: vec![CoMode::Vanilla, CoMode::CoThread],
                ..CoParams::default()
            },
            one,
            CoAgent::off(),
            vec![],
        );
        assert!(!r.note.contains("only one CPU"));
        let two = CoReport::new(CoParams::default(), machine(), CoAgent::off(), vec![]);
        assert!(!two.note.contains("only one CPU"));
    }
}
