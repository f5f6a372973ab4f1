//! `dfsched compare -- CMD ARGS`: the user's command plain and under each
//! policy, in interleaved paired rounds; a table (or `--json`) on stdout,
//! progress on stderr, and the same figures exported as JSON or Markdown.
//! The runs and the statistics are `dfsched_bench::compare`'s; this is the
//! command line and the renderers.

use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_bench::compare::{self, CompareParams, CompareReport, POLICIES};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

/// Text of `dfsched compare --help`.
pub const COMPARE_LONG_ABOUT: &str = "\
Try dfsched on your own program: run CMD plainly and under each policy \
(`dfsched run --policy P -- CMD`), in interleaved, paired rounds: each round \
runs every mode once, in an order rotated from round to round, so that the \
runs of one round saw nearly the same machine. For each mode: the wall \
time's median and min-max; the ratio of its wall time to plain's in the \
same round (below 1: faster than plain), the median of those ratios, and \
a sign-test confidence interval for that median (order statistics of the \
per-round ratios, exact whatever the distribution: 95 % from 6 rounds on; \
with 5 or fewer it is [min, max] and its own coverage is printed, e.g. \
93.8 % for 5); context switches per run (the kernel's rusage of the \
command and every descendant it waited for: exact); migrations \
(se.nr_migrations from /proc/PID/task/TID/sched of the command and its \
descendants, sampled every --sample-ms and summed over the threads seen, \
each at its last sample: a lower bound, since the kernel keeps no count \
for ended threads). A run that exits non-zero is listed and left out of \
the figures. The command's output goes to /dev/null unless --show-output.

Example:
  dfsched compare --repeat 5 -- perf bench sched messaging -g 4 -l 300";

/// Flags of `dfsched compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Rounds; each runs plain and every policy once.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=compare::MAX_REPEAT as u64))]
    repeat: u64,

    /// The policies to compare with plain, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          default_values_t = POLICIES.map(String::from))]
    policies: Vec<String>,

    /// Milliseconds between /proc samples for the migration counts; 0 = no
    /// sampling (and no migrations reported). Each sample costs a few µs
    /// per thread of the command, beside it.
    #[arg(long, value_name = "MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    sample_ms: u64,

    /// Let the command's stdout and stderr through.
    #[arg(long)]
    show_output: bool,

    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,

    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    export_json: Option<PathBuf>,

    /// Also write the table as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    export_markdown: Option<PathBuf>,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD [ARGS]"
    )]
    command: Vec<OsString>,
}

/// Runs `compare`.
pub fn run(args: CompareArgs) -> Result<(), Failure> {
    let params = CompareParams {
        command: args.command,
        repeat: args.repeat as usize,
        policies: args.policies,
        dfsched: std::env::current_exe().context("finding the dfsched executable")?,
        sample_ms: args.sample_ms,
        show_output: args.show_output,
    };
    params
        .validate()
        .map_err(|e| Failure::usage(&["compare"], e))?;
    let modes = params.modes().len();
    eprintln!(
        "dfsched compare: {} rounds of {} modes of `{}`",
        params.repeat,
        modes,
        params.shown()
    );
    let report = compare::run(&params, |done, total, r| {
        let status = if r.status == 0 {
            String::new()
        } else {
            format!(" (exit {})", r.status)
        };
        eprintln!(
            "  [{done}/{total}] round {} {:<14} {:.4} s{status}",
            r.round + 1,
            r.mode,
            r.wall_s
        );
    })
    .map_err(|e| Failure::bench(&["compare"], e.is_usage(), e, "dfsched compare"))?;
    if let Some(path) = &args.export_json {
        let text = serde_json::to_string_pretty(&report).context("encoding the report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.export_markdown {
        std::fs::write(path, markdown(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("writing the report")?;
        writeln!(out).context("writing the report")?;
    } else {
        out.write_all(table(&report).as_bytes())
            .context("writing the report")?;
    }
    Ok(())
}

/// One row's cells: mode, runs, wall median, min–max, ratio, interval,
/// switches, migrations per thread.
fn rows(report: &CompareReport) -> Vec<[String; 8]> {
    let dash = || "-".to_string();
    report
        .modes
        .iter()
        .map(|m| {
            let wall = m.wall_s;
            [
                m.mode.clone(),
                format!("{}/{}", m.ok_runs, report.repeat),
                wall.map_or_else(dash, |w| format!("{:.4} s", w.median)),
                wall.map_or_else(dash, |w| format!("{:.4} – {:.4}", w.min, w.max)),
                match (&m.ratio, m.mode == compare::PLAIN) {
                    (_, true) => "1".into(),
                    (Some(r), _) => format!("{:.3}", r.median),
                    (None, _) => dash(),
                },
                m.ratio_interval.map_or_else(dash, |i| {
                    format!(
                        "{:.3} – {:.3} ({:.1} %)",
                        i.low,
                        i.high,
                        100.0 * i.confidence
                    )
                }),
                m.switches.map_or_else(dash, |s| format!("{:.0}", s.median)),
                m.migrations_per_thread
                    .map_or_else(dash, |v| format!("{v:.2}")),
            ]
        })
        .collect()
}

const HEADERS: [&str; 8] = [
    "mode",
    "runs ok",
    "wall median",
    "min – max (s)",
    "ratio to plain",
    "interval (coverage)",
    "ctx switches/run",
    "migrations/thread",
];

/// The table for people.
fn table(report: &CompareReport) -> String {
    let rows = rows(report);
    let mut widths = HEADERS.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (c, w) in cells.iter().zip(widths) {
            s.push_str(c);
            s.push_str(&" ".repeat(w - c.chars().count() + 2));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = format!(
        "`{}`: {} rounds, interleaved; ratio = wall time / plain's in the same round \
         (median; sign-test interval of the median)\n",
        report.command.join(" "),
        report.repeat
    );
    out += &line(&HEADERS.map(String::from));
    for r in &rows {
        out += &line(r);
    }
    out += &failures(report);
    out
}

/// The runs that failed, one line each (empty if none).
fn failures(report: &CompareReport) -> String {
    report
        .runs
        .iter()
        .filter(|r| r.status != 0)
        .map(|r| {
            format!(
                "round {} {}: exit {} (left out)\n",
                r.round + 1,
                r.mode,
                r.status
            )
        })
        .collect()
}

/// The table as Markdown.
fn markdown(report: &CompareReport) -> String {
    let mut out = format!(
        "`{}`: {} rounds, interleaved; ratio = wall time / plain's in the same round \
         (median; sign-test interval of the median)\n\n",
        report.command.join(" "),
        report.repeat
    );
    out += &format!("| {} |\n", HEADERS.join(" | "));
    out += &format!("|{}\n", "---|".repeat(HEADERS.len()));
    for r in rows(report) {
        out += &format!("| {} |\n", r.join(" | "));
    }
    let failed = failures(report);
    if !failed.is_empty() {
        out += "\n";
        out += &failed;
    }
    out
}
