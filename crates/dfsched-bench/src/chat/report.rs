//! Chat reports: per-mode summaries, throughput ratios, JSON and tables.
//!
//! JSON shape of one case (`dfsched bench chat --json`):
//!
//! ```text
//! { "params":  { rooms, messages, repeat, modes, seed },
//!   "machine": { cpus_allowed, nr_cpus_allowed, model_name, hypervisor, kernel },
//!   "messages_delivered": N,     // per run: rooms × 20 × 19 × messages
//!   "messages_transmitted": N,   // per run, the paper's count: rooms × 20 × 20 × messages
//!   "modes": { "<mode>": { time_s: { median, min, max, std_dev },
//!                          throughput_msgs_per_s: { median, min, max, std_dev },
//!                          runs_s: [..], median_cpu_s, median_ctx_switches,
//!                          median_migrations, median_others_share,
//!                          pin_mismatches, runs: [ {..} ] } },
//!   "ratios": { dfsched_vs_vanilla, co_thread_vs_vanilla, oracle_vs_vanilla,
//!               split_vs_vanilla, dfsched_vs_oracle },
//!               // ratios of median throughputs (above 1: more messages per
//!               // second than the divisor); null if a side did not run
//!   "note": "..." }
//! ```
//!
//! A grid is `{ "grid": "paper", "machine": {..}, "cells": [ <case>, .. ] }`.

use super::{ChatMode, ChatParams};
use crate::chat::run::ChatRun;
use crate::machine::Machine;
use crate::report::{
    busiest_share, describe_machine, group_by_mode, machine_note, ratio_cell, render_grid_cells,
    share_cell, warn_unheld_pins, BUSY_SHARE, KVM_NOTE,
};
use crate::stats::{median_by, median_some, ratio, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One mode's runs and their summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatModeReport {
    /// Run time, seconds.
    pub time_s: Summary,
    /// Messages delivered per second.
    pub throughput_msgs_per_s: Summary,
    /// Every run's time, seconds, in the order they ran.
    pub runs_s: Vec<f64>,
    /// Median CPU time of the chat threads, seconds.
    pub median_cpu_s: f64,
    /// Median context switches per run.
    pub median_ctx_switches: f64,
    /// Median migrations per run.
    pub median_migrations: f64,
    /// Median share (0–1) of the CPUs other processes took.
    pub median_others_share: Option<f64>,
    /// Pins whose read-back differed, over all runs.
    pub pin_mismatches: u64,
    /// Every run.
    pub runs: Vec<ChatRun>,
}

impl ChatModeReport {
    /// Summarises `runs` (all of one mode); `None` if there are none.
    pub fn of(runs: Vec<ChatRun>) -> Option<ChatModeReport> {
        let times: Vec<f64> = runs.iter().map(|r| r.time_s).collect();
        let tputs: Vec<f64> = runs.iter().map(|r| r.throughput_msgs_per_s).collect();
        Some(ChatModeReport {
            time_s: Summary::of(&times)?,
            throughput_msgs_per_s: Summary::of(&tputs)?,
            runs_s: times,
            median_cpu_s: median_by(&runs, |r| r.cpu_s),
            median_ctx_switches: median_by(&runs, |r| r.ctx_switches as f64),
            median_migrations: median_by(&runs, |r| r.migrations as f64),
            median_others_share: median_some(&runs, |r| r.others_share),
            pin_mismatches: runs.iter().map(|r| r.pin_mismatches).sum(),
            runs,
        })
    }
}

/// Ratios of median throughputs; above 1: more messages per second than
/// the divisor. `None` (JSON `null`) when a side did not run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRatios {
    /// dfsched / vanilla.
    pub dfsched_vs_vanilla: Option<f64>,
    /// co-thread / vanilla.
    pub co_thread_vs_vanilla: Option<f64>,
    /// oracle / vanilla.
    pub oracle_vs_vanilla: Option<f64>,
    /// split / vanilla.
    pub split_vs_vanilla: Option<f64>,
    /// dfsched / oracle: 1 means dfsched did as well as pinning rooms.
    pub dfsched_vs_oracle: Option<f64>,
}

/// The result of one Chat case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatReport {
    /// What ran.
    pub params: ChatParams,
    /// Where it ran.
    pub machine: Machine,
    /// Messages delivered per run.
    pub messages_delivered: u64,
    /// Messages transmitted per run (the paper's count).
    pub messages_transmitted: u64,
    /// Per mode.
    pub modes: BTreeMap<ChatMode, ChatModeReport>,
    /// Ratios of median throughputs.
    pub ratios: ChatRatios,
    /// How to read the figures on this machine.
    pub note: String,
}

impl ChatReport {
    /// Groups `runs` by mode and summarises them.
    pub fn new(params: ChatParams, machine: Machine, runs: Vec<ChatRun>) -> ChatReport {
        let modes: BTreeMap<ChatMode, ChatModeReport> = group_by_mode(runs, |r| r.mode)
            .into_iter()
            .filter_map(|(m, runs)| ChatModeReport::of(runs).map(|r| (m, r)))
            .collect();
        let tput = |m: ChatMode| modes.get(&m).map(|r| r.throughput_msgs_per_s.median);
        let vs_vanilla = |m| ratio(tput(m), tput(ChatMode::Vanilla));
        let ratios = ChatRatios {
            dfsched_vs_vanilla: vs_vanilla(ChatMode::Dfsched),
            co_thread_vs_vanilla: vs_vanilla(ChatMode::CoThread),
            oracle_vs_vanilla: vs_vanilla(ChatMode::Oracle),
            split_vs_vanilla: vs_vanilla(ChatMode::Split),
            dfsched_vs_oracle: ratio(tput(ChatMode::Dfsched), tput(ChatMode::Oracle)),
        };
        let note = machine_note(&machine).to_string();
        ChatReport {
            messages_delivered: params.messages_delivered(),
            messages_transmitted: params.messages_transmitted(),
            params,
            machine,
            modes,
            ratios,
            note,
        }
    }
}

/// A grid of Chat cases (the one grid shape: [`crate::suite::GridOf`]).
pub type ChatGridReport = crate::suite::GridOf<ChatReport>;

/// One line describing a case.
pub fn describe_chat_params(p: &ChatParams) -> String {
    format!(
        "{} room{} × 20 users, {} messages of 100 B per user ({} delivered per run), {} threads, {} run{} per mode, seed {}",
        p.rooms,
        if p.rooms == 1 { "" } else { "s" },
        p.messages,
        p.messages_delivered(),
        p.threads(),
        p.repeat,
        if p.repeat == 1 { "" } else { "s" },
        p.seed
    )
}

/// The per-mode table of one case, for people.
pub fn render_chat_table(r: &ChatReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:>8} {:>8} {:>8} {:>7} {:>11} {:>9} {:>8} {:>10} {:>8} {:>7} {:>8}",
        "mode",
        "median s",
        "min s",
        "max s",
        "sd s",
        "msgs/s",
        "sd msgs/s",
        "cpu s",
        "ctx switch",
        "migrate",
        "others",
        "/vanilla"
    );
    let vanilla = r
        .modes
        .get(&ChatMode::Vanilla)
        .map(|m| m.throughput_msgs_per_s.median);
    for (mode, m) in &r.modes {
        let t = &m.time_s;
        let _ = writeln!(
            out,
            "{:<9} {:>8.3} {:>8.3} {:>8.3} {:>7.3} {:>11.0} {:>9.0} {:>8.2} {:>10.0} {:>8.0} {:>7} {:>8}",
            mode.as_str(),
            t.median,
            t.min,
            t.max,
            t.std_dev,
            m.throughput_msgs_per_s.median,
            m.throughput_msgs_per_s.std_dev,
            m.median_cpu_s,
            m.median_ctx_switches,
            m.median_migrations,
            share_cell(m.median_others_share),
            ratio_cell(ratio(Some(m.throughput_msgs_per_s.median), vanilla)),
        );
        warn_unheld_pins(&mut out, m.pin_mismatches);
    }
    let _ = writeln!(
        out,
        "throughput ratios (medians): dfsched/vanilla {}  co-thread/vanilla {}  oracle/vanilla {}  split/vanilla {}  dfsched/oracle {}",
        ratio_cell(r.ratios.dfsched_vs_vanilla),
        ratio_cell(r.ratios.co_thread_vs_vanilla),
        ratio_cell(r.ratios.oracle_vs_vanilla),
        ratio_cell(r.ratios.split_vs_vanilla),
        ratio_cell(r.ratios.dfsched_vs_oracle),
    );
    let busiest = busiest_share(r.modes.values().map(|m| m.median_others_share));
    if busiest > BUSY_SHARE {
        let _ = writeln!(
            out,
            "warning: other processes took up to {:.0}% of the CPUs during these runs",
            busiest * 100.0
        );
    }
    out
}

/// A whole case for people.
pub fn render_chat_report(r: &ChatReport) -> String {
    format!(
        "dfsched bench chat: {}\n{}\n\n{}{}\n",
        describe_chat_params(&r.params),
        describe_machine(&r.machine),
        render_chat_table(r),
        r.note
    )
}

/// A grid for people: a table per cell, then Table 1's layout.
pub fn render_chat_grid(g: &ChatGridReport) -> String {
    let mut out = render_grid_cells(
        "chat",
        &g.grid,
        &g.machine,
        g.cells
            .iter()
            .map(|c| (describe_chat_params(&c.params), render_chat_table(c))),
    );
    let _ = writeln!(
        out,
        "\n{:>5} {:>8} {:>18} {:>18} {:>16} {:>16}",
        "rooms",
        "messages",
        "vanilla s (sd)",
        "dfsched s (sd)",
        "dfsched/vanilla",
        "oracle/vanilla"
    );
    let cell = |c: &ChatReport, m| {
        c.modes
            .get(&m)
            .map_or("-".to_string(), |r: &ChatModeReport| {
                format!("{:.2} ({:.2})", r.time_s.median, r.time_s.std_dev)
            })
    };
    for c in &g.cells {
        let _ = writeln!(
            out,
            "{:>5} {:>8} {:>18} {:>18} {:>16} {:>16}",
            c.params.rooms,
            c.params.messages,
            cell(c, ChatMode::Vanilla),
            cell(c, ChatMode::Dfsched),
            ratio_cell(c.ratios.dfsched_vs_vanilla),
            ratio_cell(c.ratios.oracle_vs_vanilla),
        );
    }
    let _ = writeln!(
        out,
        "(ratios are of median throughputs)\n{}",
        g.cells.first().map_or(KVM_NOTE, |c| c.note.as_str())
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_core::CpuSet;

    fn run(mode: ChatMode, round: usize, time_s: f64) -> ChatRun {
        ChatRun {
            mode,
            round,
            time_s,
            throughput_msgs_per_s: 1000.0 / time_s,
            messages_delivered: 1000,
            cpu_s: time_s,
            ctx_switches: 5,
            migrations: 1,
            pin_mismatches: 0,
            others_share: Some(0.01),
            runtime_stats: None,
        }
    }

    fn machine() -> Machine {
        Machine {
            cpus_allowed: "0-1".parse::<CpuSet>().unwrap(),
            nr_cpus_allowed: 2,
            model_name: None,
            hypervisor: true,
            kernel: None,
        }
    }

    #[test]
    fn ratios_are_of_median_throughputs() {
        let runs = vec![
            run(ChatMode::Vanilla, 0, 2.0),
            run(ChatMode::Vanilla, 1, 4.0),
            run(ChatMode::Vanilla, 2, 1.0),
            run(ChatMode::Dfsched, 0, 1.0),
            run(ChatMode::Dfsched, 1, 1.0),
            run(ChatMode::Dfsched, 2, 0.5),
        ];
        let r = ChatReport::new(ChatParams::default(), machine(), runs);
        let v = &r.modes[&ChatMode::Vanilla];
        assert_eq!(v.time_s.median, 2.0);
        assert_eq!(v.throughput_msgs_per_s.median, 500.0);
        assert!(v.time_s.std_dev > 0.0);
        // dfsched's median throughput 1000 over vanilla's 500.
        assert_eq!(r.ratios.dfsched_vs_vanilla, Some(2.0));
        assert_eq!(r.ratios.oracle_vs_vanilla, None);
        let t = render_chat_report(&r);
        assert!(t.contains("dfsched/vanilla 2.000"), "{t}");
    }

    #[test]
    fn json_has_the_documented_keys() {
        let r = ChatReport::new(
            ChatParams::default(),
            machine(),
            vec![run(ChatMode::Vanilla, 0, 1.0), run(ChatMode::Split, 0, 2.0)],
        );
        let v = serde_json::to_value(&r).unwrap();
        for key in ["median", "min", "max", "std_dev"] {
            assert!(v["modes"]["split"]["time_s"][key].is_number(), "{key}");
            assert!(v["modes"]["split"]["throughput_msgs_per_s"][key].is_number());
        }
        assert_eq!(v["ratios"]["split_vs_vanilla"], 0.5);
        assert!(v["ratios"]["co_thread_vs_vanilla"].is_null());
        assert_eq!(v["params"]["rooms"], 4);
        assert!(v["messages_delivered"].is_u64());
        let back: ChatReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.modes.len(), 2);
    }
}
