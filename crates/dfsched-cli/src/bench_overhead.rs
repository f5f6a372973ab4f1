//! `dfsched bench overhead` (what the runtime costs beside other threads
//! and with threads of its own) and its two hidden helpers, `bench
//! overhead-hinter` (the hinting program) and `bench overhead-others` (the
//! other threads), which the benchmark runs by re-executing this binary.

use crate::bench::{print_report, ProgressLine};
use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_bench::cothreads::AgentSetting;
use dfsched_bench::overhead::{
    hinter_main, others_main, render_overhead, run_overhead, HelperCommand, HinterArgs, OthersSize,
    OverheadParams,
};

/// Where `bench overhead` sits in the command tree, for usage errors.
const PATH: &[&str] = &["bench", "overhead"];

/// The long help of `bench overhead`.
pub const OVERHEAD_LONG_ABOUT: &str = "\
What the dfsched runtime costs, against the rest of the machine and the
program's own size.

A hinting program (this binary re-executed: a process linked with the
runtime, every DFSCHED_* as you have it, the default balance interval unless
you set DFSCHED_BALANCE_INTERVAL_MS) runs HINTERS threads that hint two DFs:
every HINT_PERIOD_MS one moving hint (to the other DF: a lock and a
sched_setaffinity) and 16 repeating ones (the fast path). Beside it, a
process in a session of its own runs K other threads: OTHERS_RUNNABLE of them
spinning at nice 19 (its autogroup at nice 19 too, so that a shared machine
keeps its CPUs), the rest asleep with 16 KiB stacks and no guard page (one memory
mapping each, so that 28k stay under vm.max_map_count).

Per cell, over a window of SECONDS after WARMUP seconds:
  pass CPU   each balancer pass's CPU time (the runtime's recent_pass_cpu_ns
             record): median, p99, max in µs; x quiet = median over the same
             row's beside 0 others
  hints      moving hints' latency (median, p99, µs) and repeating ones'
             (median, ns; includes ~20 ns of the clock)
  shares     of one CPU, %: the balancer thread (its schedstat), the private
             agent (all its threads' schedstat; it serves only this
             program), the hinting threads' CPU in their hint bursts (their
             thread CPU clock), and their sum: the whole runtime. The program is
             its agent's only client, so it asks the agent once a second
             (for no sample) and samples /proc itself on every pass: read
             the agent's share.

Grid: the others sweep (--others, default 0,1000,10000,max) with the base
program (HINTERS threads), and the own sweep (--own, default 10,1000,10000
threads, HINTERS of them hinting, the rest registered and waiting) beside no
others; every cell with each --agent setting (default off,on: the runtime
sampling for itself with DFSCHED_AGENT=off, and a private agent on a socket
in a fresh 0700 directory, stopped at the end).

Every thread is a pid: 'max' is the largest size that fits, min(pid_max,
threads-max, RLIMIT_NPROC) less the threads present less 4096 kept free for
the rest of the machine, rounded down to 500, at most 30000 (on a machine
with pid_max 32768 and ~110 threads: 28500). A size that does not fit is
refused before anything runs. The report and the JSON (capacity) give the
figures. The other threads are killed at the end (and end by themselves if
this command dies); every wait on a helper is bounded.

--quick runs a tiny grid (others 0 and 50 with 10 runnable, own 10 and 50,
0.6 s windows): a first look, and what the tests run. The default grid takes
about 14 cells x 7 s plus starting 40k threads: 2-3 minutes.

Timing belongs here, not in tests, and on a shared machine only a quiet run
means anything.";

/// Flags of `dfsched bench overhead`.
#[derive(Debug, Args)]
pub struct OverheadArgs {
    /// Comma-separated others sizes (thread counts, or max) [default:
    /// 0,1000,10000,max; --quick: 0,50].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    others: Option<Vec<OthersSize>>,

    /// Comma-separated sizes of the program's own threads, run beside no
    /// others [default: 10,1000,10000; --quick: 10,50].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    own: Option<Vec<usize>>,

    /// Threads that hint (the base program) [default: 4].
    #[arg(long, value_name = "N")]
    hinters: Option<usize>,

    /// Runnable threads among the others [default: 200; --quick: 10].
    #[arg(long, value_name = "N")]
    others_runnable: Option<usize>,

    /// Agent settings, comma-separated: off (DFSCHED_AGENT=off), on (a
    /// private agent) [default: off,on].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_agent)]
    agent: Option<Vec<AgentSetting>>,

    /// Measured window per cell, seconds [default: 5; --quick: 0.6].
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,

    /// Seconds between the program's last registration and its window
    /// [default: 1; --quick: 0.4].
    #[arg(long, value_name = "S")]
    warmup: Option<f64>,

    /// Milliseconds between a hinting thread's bursts [default: 100].
    #[arg(long, value_name = "MS")]
    hint_period_ms: Option<u64>,

    /// Runs of every cell, the agent settings interleaved within each; the
    /// report adds the medians over rounds [default: 1; at most 50].
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,

    /// The tiny grid (see above); explicit flags still apply.
    #[arg(long)]
    quick: bool,

    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_agent(s: &str) -> Result<AgentSetting, String> {
    s.parse()
}

impl OverheadArgs {
    fn params(&self) -> OverheadParams {
        let base = if self.quick {
            OverheadParams::quick()
        } else {
            OverheadParams::default()
        };
        OverheadParams {
            others: self.others.clone().unwrap_or(base.others),
            own: self.own.clone().unwrap_or(base.own),
            hinters: self.hinters.unwrap_or(base.hinters),
            others_runnable: self.others_runnable.unwrap_or(base.others_runnable),
            agents: self.agent.clone().unwrap_or(base.agents),
            seconds: self.seconds.unwrap_or(base.seconds),
            warmup_s: self.warmup.unwrap_or(base.warmup_s),
            hint_period_ms: self.hint_period_ms.unwrap_or(base.hint_period_ms),
            rounds: self.rounds.unwrap_or(base.rounds),
        }
    }
}

/// Flags of the hidden `dfsched bench overhead-hinter`.
#[derive(Debug, Args)]
pub struct HinterFlags {
    /// Threads of its own.
    #[arg(long)]
    threads: usize,
    /// Of those, hinting.
    #[arg(long)]
    hinters: usize,
    /// The window, seconds.
    #[arg(long)]
    seconds: f64,
    /// Warm-up, seconds.
    #[arg(long)]
    warmup: f64,
    /// Milliseconds between bursts.
    #[arg(long)]
    hint_period_ms: u64,
}

/// Flags of the hidden `dfsched bench overhead-others`.
#[derive(Debug, Args)]
pub struct OthersFlags {
    /// Sleeping threads.
    #[arg(long)]
    sleeping: usize,
    /// Spinning threads.
    #[arg(long)]
    spinning: usize,
}

/// Runs `bench overhead`.
pub fn run(args: OverheadArgs) -> Result<(), Failure> {
    let params = args.params();
    let exe = std::env::current_exe().context("finding this program to re-execute")?;
    let helpers = HelperCommand {
        program: exe,
        hinter_args: vec!["bench".into(), "overhead-hinter".into()],
        others_args: vec!["bench".into(), "overhead-others".into()],
    };
    let mut progress = ProgressLine::new(args.quiet);
    let report = run_overhead(&params, &helpers, &mut |p| progress.show(p))
        .map_err(|e| Failure::bench(PATH, e.is_usage(), e, "the overhead benchmark failed"))?;
    progress.finish();
    print_report(&report, args.json, render_overhead)
}

/// Runs the hidden hinting program.
pub fn run_hinter(flags: HinterFlags) -> Result<(), Failure> {
    let args = HinterArgs {
        threads: flags.threads,
        hinters: flags.hinters,
        seconds: flags.seconds,
        warmup_s: flags.warmup,
        hint_period_ms: flags.hint_period_ms,
    };
    hinter_main(&args, std::io::stdin().lock(), std::io::stdout().lock())
        .context("overhead hinting program")
        .map_err(Failure::Run)
}

/// Runs the hidden other-threads process.
pub fn run_others(flags: OthersFlags) -> Result<(), Failure> {
    others_main(
        flags.sleeping,
        flags.spinning,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )
    .context("overhead other threads")
    .map_err(Failure::Run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_flags::{assert_refused, parse};

    fn params(args: &[&str]) -> Result<OverheadParams, String> {
        parse::<OverheadArgs>(args).map(|a| a.params())
    }

    #[test]
    fn no_flags_is_the_issue_grid_and_quick_is_tiny_with_overrides() {
        assert_eq!(params(&[]).unwrap(), OverheadParams::default());
        assert_eq!(params(&["--quick"]).unwrap(), OverheadParams::quick());
        let p = params(&[
            "--quick", "--others", "0,max", "--agent", "on", "--own", "7",
        ])
        .unwrap();
        assert_eq!(p.others, [OthersSize::Count(0), OthersSize::Max]);
        assert_eq!((p.agents, p.own), (vec![AgentSetting::On], vec![7]));
        assert_eq!(p.seconds, OverheadParams::quick().seconds);
    }

    #[test]
    fn bad_lists_are_refused_naming_the_value() {
        let bad: &[(&[&str], &str)] = &[
            (&["--others", "lots"][..], "lots"),
            (&["--agent", "maybe"], "on or off"),
            (&["--own", "x"], "x"),
        ];
        assert_refused(params, bad);
    }
}
