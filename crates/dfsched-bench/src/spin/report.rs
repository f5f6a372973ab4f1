//! Reports of `bench spin`: per mode the operations (median, min, max,
//! sample standard deviation) and operations per second, the per-round
//! paired ratio to vanilla, and where the threads were.
//!
//! JSON of one case (`dfsched bench spin --json`):
//!
//! ```text
//! { "params":  { processes, threads, background_threads, seconds, repeat, modes, seed },
//!   "machine": { cpus_allowed, nr_cpus_allowed, model_name, hypervisor, kernel },
//!   "modes":   { "<mode>": { ops: {median,min,max,std_dev}, ops_per_s: {..},
//!                            median_narrowed_threads,
//!                            paired_ratio: {median,min,max,rounds,per_round:[..]} | null,
//!                            runs: [ { mode, round, ops_total, ops_per_process, ops_per_s,
//!                                      elapsed_s, thread_spread, narrowed_threads,
//!                                      cpus: {"<cpulist>": threads}, balancer_threads,
//!                                      load_avg_1m } ] } },
//!   "background_ops": [..] | null,
//!   "note": "..." }
//! ```
//!
//! A paired ratio ([`PairedRatio`], shared with `bench cothreads`; why:
//! [`crate::stats`]) is, for one round, the mode's operations per second
//! over vanilla's in the same round (above 1: more work done); `paired_ratio`
//! is null for vanilla itself and when vanilla did not run. A grid
//! (`--grid paper --json`) is `{ "grid": "paper", "machine": {..},
//! "cells": [ <one case as above>, .. ] }`.

use super::procs::{masks, WorkerResult};
use super::{SpinMode, SpinParams};
use crate::machine::Machine;
use crate::report::{describe_machine, group_by_mode, paired_cell, render_grid_cells, KVM_NOTE};
use crate::stats::{median, PairedRatio, Summary};
use dfsched_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The name of a dfsched runtime's balancer thread.
const BALANCER_THREAD: &str = "dfsched-balance";

/// One run: every worker process of one mode, once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpinRun {
    /// The mode.
    pub mode: SpinMode,
    /// The round (0-based).
    pub round: usize,
    /// Operations of all threads of all workers.
    pub ops_total: u64,
    /// Operations per worker process.
    pub ops_per_process: Vec<u64>,
    /// Sum over workers of operations / their elapsed seconds.
    pub ops_per_s: f64,
    /// Median over workers of the seconds from "go" to the stop.
    pub elapsed_s: f64,
    /// (most − fewest operations of a thread) / mean, over all threads.
    pub thread_spread: f64,
    /// Threads whose `Cpus_allowed_list` at the stop was not the machine's
    /// allowed set: placed narrower by dfsched.
    pub narrowed_threads: usize,
    /// Threads per `Cpus_allowed_list` at the stop.
    pub cpus: BTreeMap<String, usize>,
    /// `dfsched-balance` threads over all workers (one per runtime with a
    /// balancer; 0 in vanilla).
    pub balancer_threads: usize,
    /// The 1-minute load average when the run started (the shared
    /// machine's other work shows here); `None` if unreadable.
    pub load_avg_1m: Option<f64>,
}

impl SpinRun {
    /// The run of `results` (one per worker, none empty); `allowed` is the
    /// machine's allowed set.
    pub(crate) fn of(
        mode: SpinMode,
        round: usize,
        results: &[WorkerResult],
        allowed: &CpuSet,
    ) -> SpinRun {
        let ops_per_process: Vec<u64> = results.iter().map(|r| r.ops.iter().sum()).collect();
        let ops_total = ops_per_process.iter().sum();
        let ops_per_s = results
            .iter()
            .zip(&ops_per_process)
            .filter(|(r, _)| r.elapsed_s > 0.0)
            .map(|(r, &ops)| ops as f64 / r.elapsed_s)
            .sum();
        let elapsed_s =
            median(&results.iter().map(|r| r.elapsed_s).collect::<Vec<_>>()).unwrap_or(0.0);
        let per_thread: Vec<u64> = results.iter().flat_map(|r| r.ops.iter().copied()).collect();
        let thread_spread = match (per_thread.iter().min(), per_thread.iter().max()) {
            (Some(&lo), Some(&hi)) if ops_total > 0 => {
                (hi - lo) as f64 / (ops_total as f64 / per_thread.len() as f64)
            }
            _ => 0.0,
        };
        let (cpus, narrowed_threads) = masks(results, allowed);
        SpinRun {
            mode,
            round,
            ops_total,
            ops_per_process,
            ops_per_s,
            elapsed_s,
            thread_spread,
            narrowed_threads,
            cpus,
            balancer_threads: results
                .iter()
                .flat_map(|r| &r.foreign_threads)
                .filter(|n| *n == BALANCER_THREAD)
                .count(),
            load_avg_1m: None,
        }
    }
}

/// `mode`'s per-round ratios of operations per second to vanilla's in
/// `runs` (see [`PairedRatio`]); `None` for vanilla and when no round pairs
/// up. Rates, not counts: a worker's timed part can end a little late.
pub fn paired_ratio(runs: &[SpinRun], mode: SpinMode) -> Option<PairedRatio> {
    PairedRatio::of(runs, mode, SpinMode::Vanilla, |r| {
        (r.mode, r.round, r.ops_per_s)
    })
}

/// One mode's runs and their summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpinModeReport {
    /// Operations per run (all workers).
    pub ops: Summary,
    /// Operations per second per run.
    pub ops_per_s: Summary,
    /// Median over runs of the threads dfsched placed narrower than the
    /// machine.
    pub median_narrowed_threads: f64,
    /// Per-round ratio to vanilla; `None` for vanilla and without it.
    pub paired_ratio: Option<PairedRatio>,
    /// Every run.
    pub runs: Vec<SpinRun>,
}

/// The result of one case (JSON shape in the module doc).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpinReport {
    /// What ran.
    pub params: SpinParams,
    /// Where.
    pub machine: Machine,
    /// Per mode.
    pub modes: BTreeMap<SpinMode, SpinModeReport>,
    /// Operations per thread of the background load over the whole case;
    /// `None` without one.
    pub background_ops: Option<Vec<u64>>,
    /// How to read the figures.
    pub note: String,
}

impl SpinReport {
    /// Groups `runs` by mode and summarises them.
    pub fn new(
        params: SpinParams,
        machine: Machine,
        background_ops: Option<Vec<u64>>,
        runs: Vec<SpinRun>,
    ) -> SpinReport {
        let modes = group_by_mode(runs.iter().cloned(), |r| r.mode)
            .into_iter()
            .filter_map(|(m, of_mode)| {
                let ops: Vec<f64> = of_mode.iter().map(|r| r.ops_total as f64).collect();
                let rate: Vec<f64> = of_mode.iter().map(|r| r.ops_per_s).collect();
                let narrowed: Vec<f64> =
                    of_mode.iter().map(|r| r.narrowed_threads as f64).collect();
                Some((
                    m,
                    SpinModeReport {
                        ops: Summary::of(&ops)?,
                        ops_per_s: Summary::of(&rate)?,
                        median_narrowed_threads: median(&narrowed)?,
                        paired_ratio: paired_ratio(&runs, m),
                        runs: of_mode,
                    },
                ))
            })
            .collect();
        let note = format!(
            "judge a mode by its paired ratio (per round, against that round's vanilla run): \
             the host drifts by up to ±30 % between minutes. {}",
            if machine.hypervisor {
                KVM_NOTE
            } else {
                "bare metal (no hypervisor flag)."
            }
        );
        SpinReport {
            params,
            machine,
            modes,
            background_ops,
            note,
        }
    }
}

/// A grid of spin cases (the one grid shape: [`crate::suite::GridOf`]).
pub type SpinGridReport = crate::suite::GridOf<SpinReport>;

/// One line describing a case.
pub fn describe_spin_params(p: &SpinParams) -> String {
    let background = match p.background_threads {
        0 => String::new(),
        n => format!(" beside {n} background threads (not under dfsched)"),
    };
    format!(
        "{} process{} × {} threads{background}, {} s per run, {} run{} per mode, seed {}",
        p.processes,
        if p.processes == 1 { "" } else { "es" },
        p.threads,
        p.seconds,
        p.repeat,
        if p.repeat == 1 { "" } else { "s" },
        p.seed
    )
}

/// The per-mode table of one case.
pub fn render_spin_table(r: &SpinReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<13} {:>14} {:>14} {:>14} {:>12} {:>14} {:>8}  paired/vanilla median [min–max]",
        "mode", "median ops", "min ops", "max ops", "sd ops", "median ops/s", "narrowed",
    );
    for (mode, m) in &r.modes {
        let _ = writeln!(
            out,
            "{:<13} {:>14.0} {:>14.0} {:>14.0} {:>12.0} {:>14.3e} {:>8}  {}",
            mode.as_str(),
            m.ops.median,
            m.ops.min,
            m.ops.max,
            m.ops.std_dev,
            m.ops_per_s.median,
            m.median_narrowed_threads,
            paired_cell(m.paired_ratio.as_ref())
        );
    }
    out
}

/// "load average (1 min) at run starts: a–b", or nothing if unknown.
fn load_line(r: &SpinReport) -> String {
    let loads: Vec<f64> = r
        .modes
        .values()
        .flat_map(|m| m.runs.iter().filter_map(|run| run.load_avg_1m))
        .collect();
    Summary::of(&loads).map_or(String::new(), |s| {
        format!(
            "load average (1 min) at run starts: {:.2}–{:.2}\n",
            s.min, s.max
        )
    })
}

/// A whole case for people.
pub fn render_spin_report(r: &SpinReport) -> String {
    format!(
        "dfsched bench spin: {}\n{}\n\n{}{}\n{}\n",
        describe_spin_params(&r.params),
        describe_machine(&r.machine),
        render_spin_table(r),
        load_line(r),
        r.note
    )
}

/// A grid for people: a table per cell, then every cell's paired ratios.
pub fn render_spin_grid(g: &SpinGridReport) -> String {
    let mut out = render_grid_cells(
        "spin",
        &g.grid,
        &g.machine,
        g.cells.iter().map(|c| {
            (
                describe_spin_params(&c.params),
                render_spin_table(c) + &load_line(c),
            )
        }),
    );
    let others: Vec<SpinMode> = SpinMode::ALL
        .into_iter()
        .filter(|m| *m != SpinMode::Vanilla)
        .filter(|m| g.cells.iter().any(|c| c.modes.contains_key(m)))
        .collect();
    let _ = write!(
        out,
        "\n{:>9} {:>7} {:>10} {:>12}",
        "processes", "threads", "background", "threads/CPU"
    );
    for m in &others {
        let _ = write!(out, "  {:>27}", format!("{m}/vanilla (paired)"));
    }
    let _ = writeln!(out);
    for c in &g.cells {
        let _ = write!(
            out,
            "{:>9} {:>7} {:>10} {:>12.1}",
            c.params.processes,
            c.params.threads,
            c.params.background_threads,
            c.params.load_milli(g.machine.nr_cpus_allowed) as f64 / 1000.0
        );
        for m in &others {
            let p = c.modes.get(m).and_then(|r| r.paired_ratio.as_ref());
            let _ = write!(out, "  {:>27}", paired_cell(p));
        }
        let _ = writeln!(out);
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

    fn result(ops: &[u64], elapsed_s: f64, cpus: &[&str]) -> WorkerResult {
        WorkerResult {
            ops: ops.to_vec(),
            elapsed_s,
            checksum: 1,
            cpus: cpus.iter().map(|s| s.to_string()).collect(),
            under_dfsched: false,
            foreign_threads: vec![BALANCER_THREAD.into(), "other".into()],
        }
    }

    #[test]
    fn a_run_sums_workers_and_counts_narrowed_threads() {
        let allowed: CpuSet = "0-1".parse().unwrap();
        let run = SpinRun::of(
            SpinMode::CoThread,
            3,
            &[
                result(&[100, 300], 2.0, &["0", "0"]),
                result(&[200, 200], 4.0, &["0-1", "1"]),
            ],
            &allowed,
        );
        assert_eq!(run.ops_total, 800);
        assert_eq!(run.ops_per_process, vec![400, 400]);
        assert_eq!(run.ops_per_s, 400.0 / 2.0 + 400.0 / 4.0);
        assert_eq!(run.elapsed_s, 3.0);
        assert_eq!(run.thread_spread, 200.0 / 200.0);
        assert_eq!(run.narrowed_threads, 3);
        assert_eq!(run.balancer_threads, 2, "one per worker");
        assert_eq!(
            run.cpus,
            BTreeMap::from([("0".into(), 2), ("0-1".into(), 1), ("1".into(), 1)])
        );
    }

    fn run(mode: SpinMode, round: usize, ops_per_s: f64) -> SpinRun {
        SpinRun {
            mode,
            round,
            ops_total: ops_per_s as u64,
            ops_per_process: vec![ops_per_s as u64],
            ops_per_s,
            elapsed_s: 1.0,
            thread_spread: 0.0,
            narrowed_threads: 0,
            cpus: BTreeMap::new(),
            balancer_threads: 0,
            load_avg_1m: Some(1.0),
        }
    }

    #[test]
    fn paired_ratios_compare_rates_not_counts() {
        // Co-thread did 1.5x vanilla's operations in twice the time: the
        // figure paired is operations per second.
        let mut co = run(SpinMode::CoThread, 0, 75.0);
        co.ops_total = 150;
        co.elapsed_s = 2.0;
        let runs = [run(SpinMode::Vanilla, 0, 100.0), co];
        assert_eq!(
            paired_ratio(&runs, SpinMode::CoThread).unwrap().per_round,
            vec![0.75]
        );
        assert_eq!(paired_ratio(&runs, SpinMode::Vanilla), None);
    }

    #[test]
    fn the_report_has_every_mode_and_its_paired_ratio_in_json_and_text() {
        let machine = Machine::describe(&"0-1".parse().unwrap());
        let runs = vec![
            run(SpinMode::Vanilla, 0, 100.0),
            run(SpinMode::CoThread, 0, 97.0),
            run(SpinMode::DataAffinity, 0, 103.0),
        ];
        let r = SpinReport::new(SpinParams::light(2), machine.clone(), None, runs);
        let v = serde_json::to_value(&r).unwrap();
        for mode in ["vanilla", "co-thread", "data-affinity"] {
            for key in ["median", "min", "max", "std_dev"] {
                assert!(v["modes"][mode]["ops"][key].is_number(), "{mode} {key}");
                assert!(v["modes"][mode]["ops_per_s"][key].is_number());
            }
        }
        assert!(v["modes"]["vanilla"]["paired_ratio"].is_null());
        assert_eq!(v["modes"]["co-thread"]["paired_ratio"]["median"], 0.97);
        assert_eq!(v["modes"]["data-affinity"]["paired_ratio"]["rounds"], 1);
        let text = render_spin_report(&r);
        assert!(text.contains("0.970 [0.970–0.970]"), "{text}");
        assert!(
            text.contains("load average (1 min) at run starts: 1.00–1.00"),
            "{text}"
        );
        let grid = render_spin_grid(&SpinGridReport {
            grid: "paper".into(),
            machine,
            cells: vec![r],
        });
        assert!(grid.contains("co-thread/vanilla (paired)"), "{grid}");
        assert!(grid.contains("1.030 [1.030–1.030]"), "{grid}");
    }
}
