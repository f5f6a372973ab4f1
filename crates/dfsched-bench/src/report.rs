//! Reports: per-mode summaries and ratios, as JSON and as tables.
//!
//! JSON shape of one case (`dfsched bench df --json`):
//!
//! ```text
//! { "params":  { threads, dfs, df_bytes, iterations, write_ratio, switch_every,
//!                repeat, modes, seed },
//!   "machine": { cpus_allowed, nr_cpus_allowed, model_name, hypervisor, kernel },
//!   "modes":   { "<mode>": { median_s, min_s, max_s, runs_s: [..],
//!                            median_cpu_s, median_ctx_switches, median_migrations,
//!                            median_spread, median_others_share, pin_mismatches,
//!                            runs: [ {..} ] } },
//!   "ratios":  { dfsched_vs_vanilla, dfsched_vs_oracle, oracle_vs_vanilla,
//!                split_vs_vanilla },            // ratios of medians; null if a side is missing
//!   "note":    "..." }
//! ```
//!
//! A grid (`--grid paper --json`) is `{ "grid": "paper", "machine": {..},
//! "cells": [ <one case as above>, .. ] }`.

use crate::machine::Machine;
use crate::params::{Mode, Params};
use crate::runner::RunRecord;
use crate::stats::{median_by, median_some, ratio, PairedRatio, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Printed beside every result: the caveat of measuring on a VM.
pub const KVM_NOTE: &str = "note: on a KVM guest a wake-up on another vCPU costs tens of µs \
(an IPI and a halt exit), so packing threads on one CPU looks better than on bare metal.";

/// How to read the figures on `machine`: [`KVM_NOTE`] on a VM, else that
/// it is bare metal (every benchmark's report note starts with this).
pub(crate) fn machine_note(machine: &Machine) -> &'static str {
    if machine.hypervisor {
        KVM_NOTE
    } else {
        "bare metal (no hypervisor flag)"
    }
}

/// Runs grouped by their mode (`mode` of each), modes in order, runs in
/// the order given: what every benchmark's report summarises.
pub(crate) fn group_by_mode<M: Ord, R>(
    runs: impl IntoIterator<Item = R>,
    mode: impl Fn(&R) -> M,
) -> BTreeMap<M, Vec<R>> {
    let mut by_mode: BTreeMap<M, Vec<R>> = BTreeMap::new();
    for r in runs {
        by_mode.entry(mode(&r)).or_default().push(r);
    }
    by_mode
}

/// A ratio as a table cell: three places, `-` without one.
pub(crate) fn ratio_cell(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.3}"))
}

/// A share (0–1) of the CPUs as a table cell: a whole percent, `-` without
/// one.
pub(crate) fn share_cell(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// Writes a warning line under a mode whose pins did not all hold
/// (`mismatches` of them); nothing when every pin held.
pub(crate) fn warn_unheld_pins(out: &mut String, mismatches: u64) {
    if mismatches > 0 {
        let _ = writeln!(out, "  warning: {mismatches} pins did not hold");
    }
}

/// The largest of the modes' median shares of the CPUs other processes
/// took (0 when none could say), for the busy-machine warning.
pub(crate) fn busiest_share(shares: impl Iterator<Item = Option<f64>>) -> f64 {
    shares.flatten().fold(0.0, f64::max)
}

/// One mode's runs and their summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeReport {
    /// Median wall time, seconds.
    pub median_s: f64,
    /// Fastest run, seconds.
    pub min_s: f64,
    /// Slowest run, seconds.
    pub max_s: f64,
    /// Every run's wall time, seconds, in the order they ran.
    pub runs_s: Vec<f64>,
    /// Median CPU time (all threads), seconds.
    pub median_cpu_s: f64,
    /// Median context switches per run (all threads).
    pub median_ctx_switches: f64,
    /// Median migrations per run (all threads).
    pub median_migrations: f64,
    /// Median progress spread: (slowest − fastest thread) / wall.
    pub median_spread: f64,
    /// Median share (0–1) of the CPUs that other processes took during the
    /// runs; `null` if `/proc` could not say.
    pub median_others_share: Option<f64>,
    /// Pins whose read-back differed, over all runs (pinned modes; 0 = every
    /// pin held).
    pub pin_mismatches: u64,
    /// Every run.
    pub runs: Vec<RunRecord>,
}

impl ModeReport {
    /// Summarises `runs` (all of one mode); `None` if there are none.
    pub fn of(runs: Vec<RunRecord>) -> Option<ModeReport> {
        let walls: Vec<f64> = runs.iter().map(|r| r.wall_s).collect();
        let wall = Summary::of(&walls)?;
        Some(ModeReport {
            median_s: wall.median,
            min_s: wall.min,
            max_s: wall.max,
            runs_s: walls,
            median_cpu_s: median_by(&runs, |r| r.cpu_s),
            median_ctx_switches: median_by(&runs, |r| r.ctx_switches as f64),
            median_migrations: median_by(&runs, |r| r.migrations as f64),
            median_spread: median_by(&runs, |r| r.spread),
            median_others_share: median_some(&runs, |r| r.others_share),
            pin_mismatches: runs.iter().map(|r| r.pin_mismatches).sum(),
            runs,
        })
    }
}

/// Ratios of median wall times; `None` (JSON `null`) when a mode did not run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// dfsched / vanilla: below 1 means dfsched is faster.
    pub dfsched_vs_vanilla: Option<f64>,
    /// dfsched / oracle: 1 means dfsched found the best static placement.
    pub dfsched_vs_oracle: Option<f64>,
    /// oracle / vanilla: what knowing the assignment is worth here.
    pub oracle_vs_vanilla: Option<f64>,
    /// split / vanilla: what the worst placement costs.
    pub split_vs_vanilla: Option<f64>,
    /// dfsched-record / dfsched: what recording costs (1 = nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_vs_dfsched: Option<f64>,
}

/// The result of one benchmark case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    /// What ran.
    pub params: Params,
    /// Where it ran.
    pub machine: Machine,
    /// Per mode, in mode order.
    pub modes: BTreeMap<Mode, ModeReport>,
    /// Ratios of medians.
    pub ratios: Ratios,
    /// How to read the figures on this machine.
    pub note: String,
}

impl BenchReport {
    /// Groups `runs` by mode and summarises them.
    pub fn new(params: Params, machine: Machine, runs: Vec<RunRecord>) -> BenchReport {
        let modes: BTreeMap<Mode, ModeReport> = group_by_mode(runs, |r| r.mode)
            .into_iter()
            .filter_map(|(m, runs)| ModeReport::of(runs).map(|r| (m, r)))
            .collect();
        let med = |m: Mode| modes.get(&m).map(|r| r.median_s);
        let ratios = Ratios {
            dfsched_vs_vanilla: ratio(med(Mode::Dfsched), med(Mode::Vanilla)),
            dfsched_vs_oracle: ratio(med(Mode::Dfsched), med(Mode::Oracle)),
            oracle_vs_vanilla: ratio(med(Mode::Oracle), med(Mode::Vanilla)),
            split_vs_vanilla: ratio(med(Mode::Split), med(Mode::Vanilla)),
            record_vs_dfsched: ratio(med(Mode::DfschedRecord), med(Mode::Dfsched)),
        };
        let note = machine_note(&machine).to_string();
        BenchReport {
            params,
            machine,
            modes,
            ratios,
            note,
        }
    }
}

/// A grid of DF cases (the one grid shape: [`crate::suite::GridOf`]).
pub type GridReport = crate::suite::GridOf<BenchReport>;

/// One line describing the parameters.
pub fn describe_params(p: &Params) -> String {
    let switch = if p.switch_every == 0 {
        "no DF switches".to_string()
    } else {
        format!("DF switch every {} iterations", p.switch_every)
    };
    format!(
        "{} threads, {} DFs × {} B, stride {} B, {} iterations, write ratio {:.2}, {}, {} run{} per mode, seed {}",
        p.threads,
        p.dfs,
        p.df_bytes,
        p.stride_bytes,
        p.iterations,
        p.write_ratio,
        switch,
        p.repeat,
        if p.repeat == 1 { "" } else { "s" },
        p.seed
    )
}

/// One line describing the machine.
pub fn describe_machine(m: &Machine) -> String {
    format!(
        "machine: {} CPU{} allowed ({}), {}, {}{}",
        m.nr_cpus_allowed,
        if m.nr_cpus_allowed == 1 { "" } else { "s" },
        m.cpus_allowed,
        m.model_name.as_deref().unwrap_or("unknown CPU model"),
        if m.hypervisor {
            "VM (hypervisor flag)"
        } else {
            "no hypervisor flag"
        },
        m.kernel
            .as_deref()
            .map(|k| format!(", Linux {k}"))
            .unwrap_or_default()
    )
}

/// Whether a run's runtime said it was disabled (every hint a no-op).
fn runtime_disabled(r: &RunRecord) -> bool {
    r.runtime_stats
        .as_ref()
        .and_then(|s| s.get("enabled"))
        .and_then(serde_json::Value::as_bool)
        == Some(false)
}

/// The per-mode table of one case, for people.
pub fn render_table(r: &BenchReport) -> String {
    let mut out = String::new();
    let vanilla = r.modes.get(&Mode::Vanilla).map(|m| m.median_s);
    let _ = writeln!(
        out,
        "{:<8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>7} {:>7} {:>8}",
        "mode",
        "median s",
        "min s",
        "max s",
        "cpu s",
        "ctx switch",
        "migrate",
        "spread",
        "others",
        "/vanilla"
    );
    for (mode, m) in &r.modes {
        let vs = ratio_cell(ratio(Some(m.median_s), vanilla));
        let _ = writeln!(
            out,
            "{:<8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>11.0} {:>9.0} {:>6.1}% {:>7} {:>8}",
            mode.as_str(),
            m.median_s,
            m.min_s,
            m.max_s,
            m.median_cpu_s,
            m.median_ctx_switches,
            m.median_migrations,
            m.median_spread * 100.0,
            share_cell(m.median_others_share),
            vs
        );
        warn_unheld_pins(&mut out, m.pin_mismatches);
        if m.runs.iter().any(runtime_disabled) {
            let _ = writeln!(
                out,
                "  warning: the dfsched runtime was disabled (DFSCHED_DISABLE): this is vanilla"
            );
        }
    }
    let _ = writeln!(
        out,
        "ratios of medians: dfsched/vanilla {}  dfsched/oracle {}  oracle/vanilla {}  split/vanilla {}",
        ratio_cell(r.ratios.dfsched_vs_vanilla),
        ratio_cell(r.ratios.dfsched_vs_oracle),
        ratio_cell(r.ratios.oracle_vs_vanilla),
        ratio_cell(r.ratios.split_vs_vanilla)
    );
    if let Some(x) = r.ratios.record_vs_dfsched {
        let _ = writeln!(
            out,
            "recording overhead: dfsched-record/dfsched {:.3} ({:+.1} %)",
            x,
            (x - 1.0) * 100.0
        );
    }
    let busiest = busiest_share(r.modes.values().map(|m| m.median_others_share));
    if busiest > BUSY_SHARE {
        let _ = writeln!(
            out,
            "warning: other processes took up to {:.0}% of the CPUs during these runs; \
             the threads seldom ran side by side, which hides what placement is worth",
            busiest * 100.0
        );
    }
    out
}

/// Above this share of the CPUs taken by other processes, the table warns
/// that the machine was too busy for the modes to differ as they would.
pub const BUSY_SHARE: f64 = 0.2;

/// A whole case for people: parameters, machine, table, note.
pub fn render_report(r: &BenchReport) -> String {
    format!(
        "dfsched bench df: {}\n{}\n\n{}{}\n",
        describe_params(&r.params),
        describe_machine(&r.machine),
        render_table(r),
        r.note
    )
}

/// A paired ratio as a table cell: `median [min–max]` to three places, `-`
/// without one.
pub(crate) fn paired_cell(p: Option<&PairedRatio>) -> String {
    p.map_or("-".into(), |p| {
        format!("{:.3} [{:.3}–{:.3}]", p.median, p.min, p.max)
    })
}

/// The part every benchmark's grid rendering shares: the heading
/// (`dfsched bench <bench> --grid <grid>: N cells`, the machine), then each
/// cell's parameters and table. `cells` gives each cell's described
/// parameters and its rendered table, in order.
pub(crate) fn render_grid_cells(
    bench: &str,
    grid: &str,
    machine: &Machine,
    cells: impl ExactSizeIterator<Item = (String, String)>,
) -> String {
    let n = cells.len();
    let mut out = format!(
        "dfsched bench {bench} --grid {grid}: {n} cells\n{}\n",
        describe_machine(machine)
    );
    for (i, (params, table)) in cells.enumerate() {
        let _ = write!(out, "\n[cell {}/{n}] {params}\n{table}", i + 1);
    }
    out
}

/// A grid for people: a table per cell, then the ratios side by side.
pub fn render_grid(g: &GridReport) -> String {
    let mut out = render_grid_cells(
        "df",
        &g.grid,
        &g.machine,
        g.cells
            .iter()
            .map(|c| (describe_params(&c.params), render_table(c))),
    );
    let _ = writeln!(
        out,
        "\n{:>7} {:>9} {:>16} {:>15} {:>15} {:>14}",
        "threads",
        "DF words",
        "dfsched/vanilla",
        "dfsched/oracle",
        "oracle/vanilla",
        "split/vanilla"
    );
    for c in &g.cells {
        let _ = writeln!(
            out,
            "{:>7} {:>9} {:>16} {:>15} {:>15} {:>14}",
            c.params.threads,
            c.params.df_bytes / 8,
            ratio_cell(c.ratios.dfsched_vs_vanilla),
            ratio_cell(c.ratios.dfsched_vs_oracle),
            ratio_cell(c.ratios.oracle_vs_vanilla),
            ratio_cell(c.ratios.split_vs_vanilla)
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
    use dfsched_core::CpuSet;

    #[test]
    fn runs_group_by_mode_in_mode_order_keeping_their_own_order() {
        let g = group_by_mode([(2, 'a'), (1, 'b'), (2, 'c'), (1, 'd')], |r| r.0);
        assert_eq!(
            g.into_iter().collect::<Vec<_>>(),
            vec![(1, vec![(1, 'b'), (1, 'd')]), (2, vec![(2, 'a'), (2, 'c')])]
        );
        assert_eq!(ratio_cell(Some(2.0 / 3.0)), "0.667");
        assert_eq!(ratio_cell(None), "-");
    }

    fn run(mode: Mode, round: usize, wall_s: f64) -> RunRecord {
        RunRecord {
            mode,
            round,
            wall_s,
            cpu_s: 2.0 * wall_s,
            ctx_switches: 10,
            voluntary_switches: 1,
            involuntary_switches: 9,
            migrations: 3,
            spread: 0.1,
            pin_mismatches: 0,
            df_switches: 0,
            others_share: Some(0.05),
            runtime_stats: None,
            threads: vec![],
        }
    }

    fn machine() -> Machine {
        Machine {
            cpus_allowed: "0-1".parse::<CpuSet>().unwrap(),
            nr_cpus_allowed: 2,
            model_name: Some("Test CPU".into()),
            hypervisor: true,
            kernel: None,
        }
    }

    #[test]
    fn report_summarises_each_mode_and_divides_medians() {
        let runs = vec![
            run(Mode::Vanilla, 0, 2.0),
            run(Mode::Dfsched, 0, 1.0),
            run(Mode::Vanilla, 1, 4.0),
            run(Mode::Dfsched, 1, 1.5),
            run(Mode::Vanilla, 2, 3.0),
            run(Mode::Dfsched, 2, 0.5),
        ];
        let r = BenchReport::new(Params::default(), machine(), runs);
        let v = &r.modes[&Mode::Vanilla];
        assert_eq!((v.median_s, v.min_s, v.max_s), (3.0, 2.0, 4.0));
        assert_eq!(v.runs_s, vec![2.0, 4.0, 3.0], "runs keep their order");
        assert_eq!(v.median_cpu_s, 6.0);
        assert_eq!(r.ratios.dfsched_vs_vanilla, Some(1.0 / 3.0));
        assert_eq!(r.ratios.dfsched_vs_oracle, None, "oracle did not run");
        assert!(r.note.contains("KVM"));
    }

    #[test]
    fn json_has_the_documented_keys() {
        let r = BenchReport::new(
            Params::default(),
            machine(),
            vec![run(Mode::Oracle, 0, 1.0), run(Mode::Split, 0, 2.0)],
        );
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for key in [
            "median_s",
            "min_s",
            "max_s",
            "runs_s",
            "median_cpu_s",
            "runs",
        ] {
            assert!(
                v["modes"]["oracle"][key].is_number() || v["modes"]["oracle"][key].is_array(),
                "{key}"
            );
        }
        assert!(v["ratios"]["dfsched_vs_vanilla"].is_null());
        assert_eq!(v["machine"]["cpus_allowed"], "0-1");
        assert_eq!(v["params"]["modes"][1], "dfsched");
        assert!(v["modes"]["oracle"]["runs"][0].get("threads").is_none());
        let back: BenchReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.modes.len(), 2);
    }

    #[test]
    fn table_warns_when_other_processes_held_the_cpus() {
        let quiet = run(Mode::Vanilla, 0, 1.0);
        let mut busy = run(Mode::Split, 0, 1.0);
        busy.others_share = Some(0.6);
        let table = |runs| render_table(&BenchReport::new(Params::default(), machine(), runs));
        assert!(!table(vec![quiet.clone()]).contains("other processes took"));
        let t = table(vec![quiet, busy]);
        assert!(t.contains("other processes took up to 60%"), "{t}");
        assert!(t.contains("  5%"), "the others column: {t}");
    }

    #[test]
    fn table_warns_when_the_runtime_was_disabled() {
        let mut off = run(Mode::Dfsched, 0, 1.0);
        off.runtime_stats = Some(serde_json::json!({ "enabled": false }));
        let mut on = run(Mode::Dfsched, 0, 1.0);
        on.runtime_stats = Some(serde_json::json!({ "enabled": true }));
        let warns = |r: RunRecord| {
            render_table(&BenchReport::new(Params::default(), machine(), vec![r]))
                .contains("runtime was disabled")
        };
        assert!(warns(off));
        assert!(!warns(on));
    }

    #[test]
    fn table_lists_every_mode_with_its_ratio_to_vanilla() {
        let r = BenchReport::new(
            Params::default(),
            machine(),
            vec![run(Mode::Vanilla, 0, 2.0), run(Mode::Split, 0, 3.0)],
        );
        let t = render_report(&r);
        assert!(t.contains("vanilla"));
        assert!(t.contains("1.500"), "split/vanilla ratio: {t}");
        assert!(t.contains("KVM guest"));
        assert!(t.contains("8 threads, 2 DFs × 8192 B"));
    }
}
