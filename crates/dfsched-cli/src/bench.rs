//! `dfsched bench df`: flags, validation, progress and output.
//!
//! Every flag is optional and states its default; they are turned into
//! [`dfsched_bench::Params`] and validated as a whole before anything runs,
//! so a bad flag exits 2 with nothing started.

use crate::Failure;
use anyhow::Context;
use clap::{Args, ValueEnum};
use dfsched_bench::params::{
    DEFAULT_DFS, DEFAULT_DF_BYTES, DEFAULT_ITERATIONS, DEFAULT_REPEAT, DEFAULT_SEED,
    DEFAULT_STRIDE_BYTES, DEFAULT_SWITCH_EVERY, DEFAULT_THREADS,
};
use dfsched_bench::{parse_modes, Benchmark, DfBench, Grid, Mode, Params, Progress};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::{IsTerminal, Write};

/// Where `bench df` sits in the command tree, for usage errors.
const DF_PATH: &[&str] = &["bench", "df"];

/// The long help of `bench df`.
pub const DF_LONG_ABOUT: &str = "\
The data-fragment benchmark (Pinter & Zalmanovici §5.2).

THREADS threads start at once and never sleep. Thread t works on data fragment
(DF) t mod DFS: a cache-line-aligned buffer of DF_BYTES bytes. One iteration is
one pass over its DF in address order, touching one 8-byte word every
STRIDE_BYTES (default: the first word of every 64-byte line); a WRITE_RATIO
of the accesses are plain stores of the old value plus one, the rest are
loads (which accesses write follows a fixed per-thread pattern). Each run is
timed from a start gate (all threads placed) to the last thread's finish.

Modes (run interleaved: every round runs each mode once, in an order shuffled
from --seed):
  vanilla  the kernel alone: no dfsched, no affinity calls
  dfsched  a fresh dfsched runtime per run; each thread calls enter(df) at start
           and at every DF switch, nothing else
  oracle   the best static placement from the known assignment: whole DFs on
           CPUs balancing thread counts (largest DF first onto the least-loaded
           CPU); each thread pinned to its DF's CPU, re-pinned on a DF switch
  split    the worst case: each DF's threads spread round-robin over all
           allowed CPUs

Per mode it reports the median, min and max wall time (s), median CPU time (s,
summed over threads), context switches and migrations (from
/proc/thread-self/sched, summed over threads), the progress spread ((slowest -
fastest thread finish) / wall), the share of the CPUs other processes took
during the runs (from /proc/stat; above 20% it warns: threads that seldom run
side by side hide what placement is worth), and ratios of medians to vanilla
and oracle.

With no flags it runs the headline case (8 threads, 2 DFs of 8 KiB,
write-shared, 5 runs per mode) in well under two minutes.

On a KVM guest a wake-up on another vCPU costs tens of µs (an IPI and a halt
exit), so packing threads on one CPU looks better there than on bare metal.";

/// The grids `--grid` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GridArg {
    /// Table 3 of the paper: threads {8, 32, 128} × DF size {1000, 8000,
    /// 20000} eight-byte words, 4 DFs; iterations scaled to a fixed budget of
    /// 1.6·10⁹ accesses per run and 5 runs per mode, so the 9 cells take
    /// about 15 minutes on a 2-vCPU machine.
    Paper,
}

/// Flags of `dfsched bench df`.
#[derive(Debug, Args)]
pub struct DfArgs {
    /// Worker threads [default: 8].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    threads: Option<usize>,

    /// Data fragments; thread t starts on DF t mod DFS; at most THREADS
    /// [default: 2].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    dfs: Option<usize>,

    /// Bytes per DF, a multiple of 64 (one cache line) [default: 8192].
    #[arg(long, value_name = "BYTES", conflicts_with = "grid")]
    df_bytes: Option<usize>,

    /// Bytes from one touched word to the next in a pass: 64 touches one
    /// word per cache line, so nearly every access of a bouncing DF is a
    /// cache-to-cache transfer; 8 touches every word, so seven hits follow
    /// each transfer; 16 and 32 lie between [default: 64].
    #[arg(long, value_name = "BYTES")]
    stride_bytes: Option<usize>,

    /// Passes over its DF per thread [default: 600000: 0.7 s (DFs kept
    /// apart) to 3 s (DFs bouncing) per run on a 2-vCPU KVM guest; with
    /// --grid: scaled per cell].
    #[arg(long, value_name = "N")]
    iterations: Option<u64>,

    /// Fraction of accesses that write, 0.0 (read-shared) to 1.0
    /// (write-shared).
    #[arg(long, value_name = "RATIO", default_value = "1.0")]
    write_ratio: f64,

    /// Every N iterations a thread moves to the next DF ((its DF + 1) mod
    /// DFS) before its next pass; thread t works on DF (t + floor(i / N)) mod
    /// DFS in iteration i; 0 = never.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SWITCH_EVERY)]
    switch_every: u64,

    /// Runs per mode [default: 5].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,

    /// Comma-separated modes to run: vanilla, dfsched, oracle, split, and
    /// dfsched-record (dfsched with the runtime recording; interleaved with
    /// dfsched it measures the recording's overhead) (see above).
    #[arg(long, value_name = "LIST", default_value = "vanilla,dfsched,oracle,split", value_parser = parse_mode_list)]
    modes: ModeList,

    /// Keep the recording of the dfsched-record runs in FILE (each run
    /// replaces it: the last one is kept); adds dfsched-record to --modes
    /// if it is not there. Without it, dfsched-record runs record into a
    /// file in a private temporary directory, removed after each run.
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,

    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,

    /// Run a grid of cases instead of one (paper: Table 3, about 15 minutes
    /// here); conflicts with --threads, --dfs and --df-bytes.
    #[arg(long, value_enum, value_name = "GRID")]
    grid: Option<GridArg>,

    /// Seed of the per-thread write-pattern phases and of the mode order in
    /// each round.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    seed: u64,

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,

    /// Also simulate each case on the machine profile PROFILE (default: the
    /// one `dfsched calibrate` wrote) and show each mode's predicted ratio
    /// to vanilla beside the measured one, with the error. Not with
    /// --switch-every.
    #[arg(long, value_name = "PROFILE", num_args = 0..=1)]
    #[allow(clippy::option_option)] // absent, given bare, or given a path
    predict: Option<Option<std::path::PathBuf>>,
}

/// A parsed `--modes` list.
#[derive(Clone, Debug)]
pub struct ModeList(Vec<Mode>);

fn parse_mode_list(s: &str) -> Result<ModeList, String> {
    parse_modes(s).map(ModeList).map_err(|e| e.to_string())
}

impl DfArgs {
    /// The cases to run, validated.
    fn cases(&self) -> Result<Vec<Params>, Failure> {
        let base = Params {
            threads: self.threads.unwrap_or(DEFAULT_THREADS),
            dfs: self.dfs.unwrap_or(DEFAULT_DFS),
            df_bytes: self.df_bytes.unwrap_or(DEFAULT_DF_BYTES),
            stride_bytes: self.stride_bytes.unwrap_or(DEFAULT_STRIDE_BYTES),
            iterations: self.iterations.unwrap_or(DEFAULT_ITERATIONS),
            write_ratio: self.write_ratio,
            switch_every: self.switch_every,
            repeat: self.repeat.unwrap_or(DEFAULT_REPEAT),
            modes: {
                let mut m = self.modes.0.clone();
                if self.record.is_some() && !m.contains(&Mode::DfschedRecord) {
                    m.push(Mode::DfschedRecord);
                }
                m
            },
            seed: self.seed,
            record: self
                .record
                .as_ref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        };
        let cases = match self.grid {
            None => vec![base],
            Some(GridArg::Paper) => Grid::Paper.cells(&base, self.iterations, self.repeat),
        };
        for c in &cases {
            c.validate().map_err(|e| Failure::usage(DF_PATH, e))?;
        }
        Ok(cases)
    }
}

/// Runs `bench df`.
pub fn run(args: DfArgs) -> Result<(), Failure> {
    let cases = args.cases()?;
    if args.predict.is_some() && args.switch_every > 0 {
        return Err(Failure::usage(
            DF_PATH,
            "--predict does not model --switch-every yet",
        ));
    }
    // A bad profile fails here, before anything runs.
    let predictor = match &args.predict {
        Some(p) => Some(crate::predict::Predictor::load(p.as_deref())?),
        None => None,
    };
    let reports = run_bench(&DfBench, DF_PATH, &cases, args.quiet)?;
    let grid = args.grid.map(|GridArg::Paper| Grid::Paper.as_str());
    print_bench::<DfBench>(
        reports,
        grid,
        args.json,
        predictor.as_ref().map(|p| move |r: &_| p.df(r)),
    )
}

/// Runs `cases` of `bench` (shared by every benchmark command), with the
/// progress line on stderr unless `quiet`: one report per case. A refusal
/// of the parameters is a usage error of the subcommand at `path`.
pub(crate) fn run_bench<B: Benchmark>(
    bench: &B,
    path: &'static [&'static str],
    cases: &[B::Params],
    quiet: bool,
) -> Result<Vec<B::Report>, Failure> {
    let mut progress = ProgressLine::new(quiet);
    let reports = bench
        .run_cases(cases, &mut |p| progress.show(p))
        .map_err(|e| Failure::bench(path, B::is_usage(&e), e, B::FAILED))?;
    progress.finish();
    Ok(reports)
}

/// Prints a benchmark's reports (shared by every benchmark command): one
/// case's, or the grid `grid` of them (the one grid shape,
/// [`dfsched_bench::GridOf`]), as JSON or text; with `predict`, each
/// case's prediction beside it (see [`print_predicted`]).
pub(crate) fn print_bench<B: Benchmark>(
    reports: Vec<B::Report>,
    grid: Option<&str>,
    json: bool,
    predict: Option<impl Fn(&B::Report) -> anyhow::Result<crate::predict::Prediction>>,
) -> Result<(), Failure> {
    let predictions = match &predict {
        Some(p) => Some(reports.iter().map(p).collect::<anyhow::Result<Vec<_>>>()?),
        None => None,
    };
    match grid {
        None => {
            let one = reports
                .first()
                .ok_or_else(|| anyhow::anyhow!("the benchmark ran no case"))?;
            print_predicted(one, json, B::render, predictions, None)
        }
        Some(name) => {
            let labels: Vec<String> = reports.iter().map(B::label).collect();
            let grid =
                B::grid(name, reports).ok_or_else(|| anyhow::anyhow!("the grid ran no cell"))?;
            print_predicted(&grid, json, B::render_grid, predictions, Some(labels))
        }
    }
}

/// Prints a report (see [`print_report`]) and, with `predictions`, its
/// prediction beside it: under `prediction` in JSON (one object for a
/// case; a list, one per cell, for a grid, when `cell_labels` names the
/// cells) and as tables after the report's.
pub(crate) fn print_predicted<T: Serialize>(
    report: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
    predictions: Option<Vec<crate::predict::Prediction>>,
    cell_labels: Option<Vec<String>>,
) -> Result<(), Failure> {
    let Some(p) = predictions else {
        return print_report(report, json, render);
    };
    let text = |w: &WithPrediction<'_, T, serde_json::Value>| {
        let mut s = render(w.report);
        match &cell_labels {
            None => {
                s.push('\n');
                s.push_str(&crate::predict::render(&p[0]));
            }
            Some(labels) => {
                for (i, (p, l)) in p.iter().zip(labels).enumerate() {
                    s.push_str(&format!(
                        "\ncell {}: {l}\n{}",
                        i + 1,
                        crate::predict::render(p)
                    ));
                }
            }
        }
        s
    };
    let value = if cell_labels.is_some() {
        serde_json::to_value(&p)
    } else {
        serde_json::to_value(&p[0])
    }
    .context("serialising the prediction")?;
    print_report(
        &WithPrediction {
            report,
            prediction: &value,
        },
        json,
        text,
    )
}

/// A report with its prediction beside it: the report's own keys, and
/// `prediction` (one per case; a list for a grid).
#[derive(Serialize)]
struct WithPrediction<'a, R: Serialize, P: Serialize> {
    #[serde(flatten)]
    report: &'a R,
    prediction: &'a P,
}

/// Writes a benchmark's report on stdout (shared by every `bench`
/// subcommand): pretty JSON with `json`, else `render`'s text; one newline
/// at the end either way.
pub(crate) fn print_report<T: Serialize>(
    report: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> Result<(), Failure> {
    let text = if json {
        serde_json::to_string_pretty(report).context("serialising the report")?
    } else {
        render(report)
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.trim_end()).context("writing the report")?;
    Ok(())
}

/// Progress on stderr (shared by every `bench` subcommand): an indicatif bar with an ETA on a terminal, a line
/// per run otherwise (logs, CI); nothing with `--quiet`.
pub(crate) struct ProgressLine {
    quiet: bool,
    /// The bar, once the first run finished (we learn the total then).
    bar: Option<ProgressBar>,
    tty: bool,
}

impl ProgressLine {
    pub(crate) fn new(quiet: bool) -> ProgressLine {
        ProgressLine {
            quiet,
            bar: None,
            tty: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn show(&mut self, p: &Progress) {
        if self.quiet {
            return;
        }
        let cell = if p.cases > 1 {
            format!(" cell {}/{}", p.case + 1, p.cases)
        } else {
            String::new()
        };
        let what = format!(
            "{cell} round {} {:<8} {:.3} s",
            p.round + 1,
            p.mode,
            p.wall_s
        );
        if !self.tty {
            let _ = writeln!(
                std::io::stderr().lock(),
                "[{:>3}/{}]{what}",
                p.done,
                p.total
            );
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::new(p.total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:20}] {pos}/{len} eta {eta}{msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        bar.set_message(what);
        bar.set_position(p.done as u64);
    }

    pub(crate) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_flags::{assert_refused, parse};

    fn cases(args: &[&str]) -> Result<Vec<Params>, String> {
        parse::<DfArgs>(args)?
            .cases()
            .map_err(Failure::usage_message)
    }

    #[test]
    fn no_flags_is_the_headline_case() {
        let c = cases(&[]).unwrap();
        assert_eq!(c, vec![Params::default()]);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        let bad: &[(&[&str], &str)] = &[
            (&["--threads", "0"][..], "--threads"),
            (&["--dfs", "9"], "--dfs"),
            (&["--df-bytes", "32"], "--df-bytes"),
            (&["--stride-bytes", "24"], "--stride-bytes"),
            (&["--write-ratio", "1.5"], "--write-ratio"),
            (&["--modes", "vanilla,warp"], "warp"),
            (&["--repeat", "0"], "--repeat"),
            (&["--grid", "paper", "--threads", "4"], "--threads"),
            (&["--grid", "huge"], "huge"),
        ];
        assert_refused(cases, bad);
    }

    #[test]
    fn grid_keeps_explicit_iterations_and_other_flags() {
        let c = cases(&[
            "--grid",
            "paper",
            "--iterations",
            "7",
            "--write-ratio",
            "0.5",
        ])
        .unwrap();
        assert_eq!(c.len(), 9);
        assert!(c.iter().all(|p| p.iterations == 7
            && p.write_ratio == 0.5
            && p.repeat == dfsched_bench::grid::PAPER_REPEAT));
    }
}
