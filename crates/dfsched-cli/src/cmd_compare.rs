//! `dfsched compare -- CMD ARGS`: the user's command plain and under each
//! policy, in interleaved paired rounds; a table (or `--json`) on stdout,
//! progress on stderr, and the same figures exported as JSON or Markdown.
//! The runs, the statistics and the renderers are `dfsched_bench::compare`'s,
//! driven like every benchmark (`bench.rs`'s `run_bench`, `print_bench`);
//! this is the command line.

use crate::bench::{print_bench, run_bench};
use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_bench::compare::{self, CompareBench, CompareParams, CompareReport, POLICIES};
use std::ffi::OsString;
use std::path::PathBuf;

/// Text of `dfsched compare --help`.
pub const COMPARE_LONG_ABOUT: &str = "\
Try dfsched on your own program: run CMD plainly and under each policy \
(`dfsched run --policy P -- CMD`), in interleaved, paired rounds: each round \
runs every mode once, in an order shuffled per round from --seed (as \
every `dfsched bench`), so that the runs of one round saw nearly the same \
machine. For each mode: the wall \
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

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,

    /// Kill a run still going after SECS seconds (SIGKILL to the command
    /// and its descendants) and report it as timed out; default: no limit.
    #[arg(long, value_name = "SECS")]
    timeout_s: Option<f64>,

    /// Seed of the mode order in each round.
    #[arg(long, value_name = "N", default_value_t = dfsched_bench::params::DEFAULT_SEED)]
    seed: u64,

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
        seed: args.seed,
        timeout: match args.timeout_s {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => {
                Some(std::time::Duration::from_secs_f64(s))
            }
            Some(s) => {
                return Err(Failure::usage(
                    &["compare"],
                    format!("--timeout-s must be above 0 and at most 86400, not {s}"),
                ))
            }
        },
    };
    params
        .validate()
        .map_err(|e| Failure::usage(&["compare"], e))?;
    let reports = run_bench(
        &CompareBench,
        &["compare"],
        std::slice::from_ref(&params),
        args.quiet,
    )?;
    let report = reports.first().context("dfsched compare ran nothing")?;
    if let Some(path) = &args.export_json {
        let text = serde_json::to_string_pretty(report).context("encoding the report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.export_markdown {
        std::fs::write(path, compare::markdown(report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    print_bench::<CompareBench>(reports, None, args.json, NO_PREDICTION)
}

/// `dfsched compare` has no simulator prediction.
const NO_PREDICTION: Option<fn(&CompareReport) -> anyhow::Result<crate::predict::Prediction>> =
    None;
