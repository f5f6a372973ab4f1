//! `bench overhead`: what the runtime costs, against the size of the rest of
//! the machine and of the program itself.
//!
//! A *hinting program* ([`procs::hinter_main`]: a process of its own, linked
//! with the runtime, its threads hinting two DFs) runs beside a process of
//! *other threads* ([`procs::others_main`]: K threads in a session of its
//! own, most asleep, a few hundred runnable) and reports, over a measured
//! window:
//!
//! - the CPU time of each balancer pass (the runtime's bounded per-pass
//!   record, `recent_pass_cpu_ns`): median, p99 and maximum;
//! - the latency of its moving hints (a DF switch: the slow path) and of its
//!   repeating hints (the fast path): median, p99 and maximum;
//! - the *whole runtime's* CPU share of one CPU: the balancer thread's CPU
//!   (its schedstat), the CPU time of the hinting threads' hint bursts, and, with the
//!   agent, the private agent's CPU (every thread of it, by schedstat; it
//!   serves this one program, so all of it is ours). The program is the
//!   agent's only client, so it exchanges with it once every
//!   `dfsched::agent::LONE_PASSES` passes, asking it for no sample (the
//!   agent reads nothing for it), and samples `/proc` itself on every pass
//!   (`own_scans`; `agent_samples` stays 0);
//!   read the agent's share beside the balancer's.
//!
//! ```text
//!  for each size K of others (ascending):      start the others (K threads)
//!    for each own size N (K = 0: the base and every --own size; else base):
//!      for each agent setting (off, on):        on: a private agent
//!        start the hinting program (N threads) ... "ready"
//!        agent CPU reading; "go"; window; agent CPU reading; result
//!  kill the others; check they are gone
//! ```
//!
//! **Cells.** The others sweep runs with the base program ([`DEFAULT_HINTERS`]
//! threads, all hinting); the own sweep runs beside no others, with `N`
//! threads of which [`DEFAULT_HINTERS`] hint and the rest wait (registered,
//! blocked by the idle step: the O(own threads) part of a pass). Each cell's
//! `quiet_ratio` is its pass median over that of the cell with the same
//! agent setting and own size beside no others: the acceptance asks for
//! ≤ 1.5 beside 10k and beside the largest size.
//!
//! **Sizing against the machine's limit** ([`Capacity`]): every thread is a
//! pid, so the others cannot exceed `pid_max`, `threads-max` or the user's
//! `RLIMIT_NPROC` less the threads that exist already; [`PID_RESERVE`] more
//! are left free so that the rest of the machine (the other engineers'
//! builds on a shared one) can still fork. The largest size (`max` in
//! `--others`) is that room rounded down to 500, at most [`MAX_OTHERS`];
//! a size that does not fit is refused before anything runs. The report
//! and the JSON carry the figures it was computed from.
//!
//! **Nothing is left behind.** The others and the hinting programs are
//! [`crate::workers::Workers`] (killed and reaped on every path out); every
//! wait on them is bounded by a [`procs::Watchdog`]; the others also end by
//! themselves when their stdin closes (the benchmark's death included:
//! checked by SIGKILLing the benchmark mid-cell), a hinting program at the
//! end of its window; a private agent is stopped by its guard and has an
//! idle exit of 30 s as backstop.

pub mod procs;

use crate::cothreads::{AgentSetting, PrivateAgent};
use crate::machine::Machine;
use crate::runner::Progress;
use crate::stats::Tail;
use crate::workers::{WorkerError, Workers};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub use procs::{hinter_main, others_main, HinterArgs, HinterResult};

/// Threads of the base hinting program, all hinting.
pub const DEFAULT_HINTERS: usize = 4;
/// Default sizes of the others sweep (`max`: the largest that fits).
pub const DEFAULT_OTHERS: [OthersSize; 4] = [
    OthersSize::Count(0),
    OthersSize::Count(1_000),
    OthersSize::Count(10_000),
    OthersSize::Max,
];
/// Default sizes of the own sweep.
pub const DEFAULT_OWN: [usize; 3] = [10, 1_000, 10_000];
/// Runnable (spinning, nice 19) threads among the others, at most the size.
pub const DEFAULT_RUNNABLE: usize = 200;
/// Default measured window per cell, seconds (50 passes at 100 ms).
pub const DEFAULT_SECONDS: f64 = 5.0;
/// Default warm-up between the last registration and the window, seconds
/// (the idle step needs 2 passes and 200 ms to block a waiting thread).
pub const DEFAULT_WARMUP_S: f64 = 1.0;
/// Default milliseconds between a hinting thread's bursts.
pub const DEFAULT_HINT_PERIOD_MS: u64 = 100;
/// Pids left free for the rest of the machine (module doc).
pub const PID_RESERVE: usize = 4096;
/// The largest others size asked of `max`: the issue's 30k.
pub const MAX_OTHERS: usize = 30_000;
/// At most this many threads of its own.
pub const MAX_OWN: usize = 20_000;
/// How long a helper may take to start its threads, beyond a share per
/// thread ([`start_timeout`]).
const START_TIMEOUT_BASE: Duration = Duration::from_secs(30);

/// How long starting `threads` threads (and registering them) may take
/// before the watchdog gives up: 30 s plus 2 ms a thread.
fn start_timeout(threads: usize) -> Duration {
    START_TIMEOUT_BASE + Duration::from_millis(2 * threads as u64)
}

/// A size of the others sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OthersSize {
    /// This many threads.
    Count(usize),
    /// The largest that fits ([`Capacity::largest_others`]).
    Max,
}

impl std::str::FromStr for OthersSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "max" => Ok(OthersSize::Max),
            n => n
                .replace('_', "")
                .parse()
                .map(OthersSize::Count)
                .map_err(|_| format!("{n:?} is neither a thread count nor max")),
        }
    }
}

/// The machine's thread limit and the room it leaves (module doc). JSON
/// carries every figure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// `/proc/sys/kernel/pid_max`.
    pub pid_max: usize,
    /// `/proc/sys/kernel/threads-max`.
    pub threads_max: usize,
    /// The soft `RLIMIT_NPROC` (`Max processes` of `/proc/self/limits`;
    /// `None`: unlimited or unreadable).
    pub nproc_limit: Option<usize>,
    /// Threads on the machine before the benchmark started anything (the
    /// total of `/proc/loadavg`).
    pub threads_present: usize,
    /// Pids left free for the rest of the machine.
    pub reserve: usize,
    /// The smallest of the three limits.
    pub limit: usize,
    /// What `max` means: `limit − threads_present − reserve − base program`,
    /// rounded down to 500, at most [`MAX_OTHERS`].
    pub largest_others: usize,
}

impl Capacity {
    /// Reads the limits of this machine.
    pub fn read() -> Result<Capacity, OverheadError> {
        let num = |path: &str| -> Result<usize, OverheadError> {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| OverheadError::Capacity(format!("{path} is not readable")))
        };
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let threads_present = parse_loadavg_threads(&loadavg)
            .ok_or_else(|| OverheadError::Capacity("/proc/loadavg has no thread count".into()))?;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        Ok(Capacity::from_figures(
            num("/proc/sys/kernel/pid_max")?,
            num("/proc/sys/kernel/threads-max")?,
            parse_nproc_limit(&limits),
            threads_present,
        ))
    }

    /// The capacity these figures leave.
    pub fn from_figures(
        pid_max: usize,
        threads_max: usize,
        nproc_limit: Option<usize>,
        threads_present: usize,
    ) -> Capacity {
        let limit = pid_max
            .min(threads_max)
            .min(nproc_limit.unwrap_or(usize::MAX));
        let room = limit.saturating_sub(threads_present + PID_RESERVE + DEFAULT_HINTERS + 8);
        Capacity {
            pid_max,
            threads_max,
            nproc_limit,
            threads_present,
            reserve: PID_RESERVE,
            limit,
            largest_others: (room / 500 * 500).min(MAX_OTHERS),
        }
    }

    /// Whether `others` and `own` threads (and the few of the runtime and
    /// the agent) fit beside the present ones with the reserve left free.
    pub fn fits(&self, others: usize, own: usize) -> bool {
        others + own + 8 + self.threads_present + self.reserve <= self.limit
    }
}

/// The fourth field of `/proc/loadavg` is `running/total`: the total.
fn parse_loadavg_threads(s: &str) -> Option<usize> {
    s.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok()
}

/// The soft limit of the `Max processes` line of `/proc/self/limits`.
fn parse_nproc_limit(s: &str) -> Option<usize> {
    let line = s.lines().find(|l| l.starts_with("Max processes"))?;
    line["Max processes".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The benchmark's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverheadParams {
    /// Sizes of the others sweep.
    pub others: Vec<OthersSize>,
    /// Sizes of the own sweep (run beside no others).
    pub own: Vec<usize>,
    /// Threads that hint (the base program's size).
    pub hinters: usize,
    /// Runnable threads among the others (at most the size).
    pub others_runnable: usize,
    /// Agent settings, each run for every cell.
    pub agents: Vec<AgentSetting>,
    /// Measured window per cell, seconds.
    pub seconds: f64,
    /// Warm-up before the window, seconds.
    pub warmup_s: f64,
    /// Milliseconds between a hinting thread's bursts.
    pub hint_period_ms: u64,
    /// Rounds: every cell runs this many times, the agent settings
    /// interleaved within each round, and the report adds the medians over
    /// rounds ([`OverheadReport::summary`]).
    #[serde(default = "one_round")]
    pub rounds: usize,
}

fn one_round() -> usize {
    1
}

/// The most rounds `--rounds` takes.
pub const MAX_ROUNDS: usize = 50;

impl Default for OverheadParams {
    fn default() -> Self {
        OverheadParams {
            others: DEFAULT_OTHERS.to_vec(),
            own: DEFAULT_OWN.to_vec(),
            hinters: DEFAULT_HINTERS,
            others_runnable: DEFAULT_RUNNABLE,
            agents: vec![AgentSetting::Off, AgentSetting::On],
            seconds: DEFAULT_SECONDS,
            warmup_s: DEFAULT_WARMUP_S,
            hint_period_ms: DEFAULT_HINT_PERIOD_MS,
            rounds: 1,
        }
    }
}

impl OverheadParams {
    /// A tiny grid for tests and a first look: others {0, 50} with 10
    /// runnable, own {10, 50}, 0.6 s windows after 0.4 s of warm-up.
    pub fn quick() -> OverheadParams {
        OverheadParams {
            others: vec![OthersSize::Count(0), OthersSize::Count(50)],
            own: vec![10, 50],
            others_runnable: 10,
            seconds: 0.6,
            warmup_s: 0.4,
            ..OverheadParams::default()
        }
    }

    /// The others sizes, `max` resolved, sorted, duplicates dropped; 0 is
    /// always there (the quiet reference).
    pub fn others_counts(&self, cap: &Capacity) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .others
            .iter()
            .map(|s| match s {
                OthersSize::Count(n) => *n,
                OthersSize::Max => cap.largest_others,
            })
            .chain([0])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The own sizes run beside `others` threads: the base size, and beside
    /// none every `--own` size too.
    pub fn own_counts(&self, others: usize) -> Vec<usize> {
        let mut v = vec![self.hinters];
        if others == 0 {
            v.extend(self.own.iter().copied());
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Checks every limit, and that every cell fits the machine (`cap`).
    pub fn validate(&self, cap: &Capacity) -> Result<(), OverheadError> {
        let bad = |m: String| Err(OverheadError::Params(m));
        if !(1..=64).contains(&self.hinters) {
            return bad(format!(
                "--hinters {} is not between 1 and 64",
                self.hinters
            ));
        }
        if let Some(&n) = self.own.iter().find(|&&n| n == 0 || n > MAX_OWN) {
            return bad(format!("--own {n} is not between 1 and {MAX_OWN}"));
        }
        if self.agents.is_empty() {
            return bad("--agent names no setting (use off, on or off,on)".into());
        }
        if !(self.seconds > 0.0 && self.seconds <= 600.0) {
            return bad(format!(
                "--seconds {} is not above 0 and at most 600",
                self.seconds
            ));
        }
        if !(0.0..=60.0).contains(&self.warmup_s) {
            return bad(format!(
                "--warmup {} is not between 0 and 60",
                self.warmup_s
            ));
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return bad(format!(
                "--rounds {} is not between 1 and {MAX_ROUNDS}",
                self.rounds
            ));
        }
        if !(1..=10_000).contains(&self.hint_period_ms) {
            return bad(format!(
                "--hint-period-ms {} is not between 1 and 10000",
                self.hint_period_ms
            ));
        }
        for k in self.others_counts(cap) {
            for n in self.own_counts(k) {
                if !cap.fits(k, n) {
                    return bad(format!(
                        "{k} other threads beside {n} of the program's own do not fit: \
                         the limit is {} threads ({} exist, {} kept free); at most {} others",
                        cap.limit, cap.threads_present, cap.reserve, cap.largest_others
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why the benchmark (or a helper) did not complete.
#[derive(Debug, thiserror::Error)]
pub enum OverheadError {
    /// Bad parameters; nothing ran.
    #[error("{0}")]
    Params(String),
    /// The machine's limits could not be read.
    #[error("reading the machine's thread limits: {0}")]
    Capacity(String),
    /// The runtime could not be configured or started.
    #[error("dfsched runtime")]
    Runtime(#[source] dfsched::Error),
    /// A thread could not be created.
    #[error("could not start a thread")]
    Spawn(#[source] std::io::Error),
    /// A thread of the hinting program panicked.
    #[error("a thread of the hinting program panicked")]
    ThreadPanicked,
    /// The hinting program was not told "go".
    #[error("not told to go (the parent ended or said something else)")]
    NoGo,
    /// Talking to the parent failed.
    #[error("talking to the parent")]
    Pipe(#[source] std::io::Error),
    /// A helper process failed.
    #[error(transparent)]
    Helper(#[from] WorkerError),
    /// A helper did not finish in time and was killed.
    #[error("{what} did not {step} within {timeout:?} and was killed")]
    TimedOut {
        /// Which helper.
        what: String,
        /// What it did not do.
        step: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// The private agent could not start.
    #[error("the private agent")]
    Agent(#[source] dfsched::agent::AgentError),
    /// The others process was still there after it was killed.
    #[error("the other-threads process {0} is still running after being killed")]
    OthersLeft(u32),
}

impl OverheadError {
    /// Whether this is bad input (the CLI exits 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, OverheadError::Params(_))
    }
}

/// How to start the helpers: `program` with `hinter_args` (then the
/// hinter's flags) or `others_args` (then the others' flags), and the
/// `dfsched` executable for the private agent.
#[derive(Clone, Debug)]
pub struct HelperCommand {
    /// The program (the CLI: its own executable).
    pub program: PathBuf,
    /// Arguments that make it the hinting program.
    pub hinter_args: Vec<OsString>,
    /// Arguments that make it the others process.
    pub others_args: Vec<OsString>,
}

/// CPU shares of one CPU, percent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shares {
    /// The balancer thread (schedstat; else the passes' own clock).
    pub balancer: f64,
    /// The private agent (0 without one).
    pub agent: f64,
    /// The hinting threads' CPU in their hint bursts.
    pub hints: f64,
    /// All three: the whole runtime.
    pub whole: f64,
}

/// One cell: one own size beside one others size, with one agent setting,
/// in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverheadCell {
    /// The agent setting.
    pub agent: AgentSetting,
    /// The round (from 0).
    #[serde(default)]
    pub round: usize,
    /// Other threads beside the program.
    pub others: usize,
    /// Of those, runnable.
    pub others_runnable: usize,
    /// Threads of the program's own.
    pub own_threads: usize,
    /// Of those, hinting.
    pub hinters: usize,
    /// Threads registered with the runtime at the window's end.
    pub threads_active: u64,
    /// The window, seconds.
    pub window_s: f64,
    /// Balancer passes in the window.
    pub passes: u64,
    /// Per-pass CPU, microseconds.
    pub pass_cpu_us: Option<Tail>,
    /// Pass median / the quiet cell's (same agent and own size, no others).
    pub quiet_ratio: Option<f64>,
    /// Moving hints, microseconds.
    pub hint_move_us: Option<Tail>,
    /// Repeating hints, nanoseconds.
    pub hint_repeat_ns: Option<Tail>,
    /// Hint calls that failed in the window.
    pub hint_errors: u64,
    /// Shares of one CPU, percent.
    pub cpu_share_pct: Shares,
    /// The idle step's part of the passes' CPU, microseconds per pass.
    pub idle_us_per_pass: Option<f64>,
    /// External-load samples from the agent in the window.
    pub agent_samples: u64,
    /// External-load samples from the runtime's own scan in the window.
    pub own_scans: u64,
    /// The agent's CPU in the window by thread name (`comm`, 15 bytes:
    /// `dfsched` its accept loop, `dfsched-agent-t` its tick,
    /// `dfsched-agent-c` a connection, which runs the shared scan),
    /// nanoseconds.
    pub agent_cpu_ns_by_thread: BTreeMap<String, u64>,
    /// The hinting program's raw figures.
    pub raw: HinterResult,
}

/// A started others process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OthersRecord {
    /// Threads.
    pub threads: usize,
    /// Runnable among them.
    pub runnable: usize,
    /// Its pid.
    pub pid: u32,
    /// Seconds it took to start them all.
    pub start_s: f64,
    /// Whether it was gone (reaped, not a zombie) after the benchmark
    /// killed it.
    pub gone_after: bool,
}

/// The medians over rounds of one (agent, others, own) cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    /// The agent setting.
    pub agent: AgentSetting,
    /// Other threads beside the program.
    pub others: usize,
    /// Threads of the program's own.
    pub own_threads: usize,
    /// Rounds the medians are over.
    pub rounds: usize,
    /// Median over rounds of each round's per-pass median, microseconds.
    pub pass_median_us: Option<f64>,
    /// Median over rounds of each round's ×quiet (its pass median over the
    /// same round's quiet cell).
    pub quiet_ratio: Option<f64>,
    /// Median over rounds of each share, separately (so `whole` is the
    /// median of the rounds' sums, not the sum of the medians).
    pub cpu_share_pct: Shares,
    /// The smallest and largest whole share over the rounds.
    pub whole_min_max: (f64, f64),
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverheadReport {
    /// The machine.
    pub machine: Machine,
    /// Its thread limit and the room it left.
    pub capacity: Capacity,
    /// The balancer interval the hinting program ran with, milliseconds.
    pub balance_interval_ms: u64,
    /// The parameters.
    pub params: OverheadParams,
    /// Every cell, in the order run.
    pub cells: Vec<OverheadCell>,
    /// Per agent setting, others size and own size: the medians over the
    /// rounds (one entry per cell when there is one round).
    #[serde(default)]
    pub summary: Vec<CellSummary>,
    /// Every others process started.
    pub others_processes: Vec<OthersRecord>,
}

/// Runs the benchmark (see the module doc).
pub fn run_overhead(
    params: &OverheadParams,
    helpers: &HelperCommand,
    progress: &mut dyn FnMut(&Progress),
) -> Result<OverheadReport, OverheadError> {
    let cap = Capacity::read()?;
    params.validate(&cap)?;
    let rt_cfg = dfsched::RuntimeConfig::from_env().map_err(OverheadError::Runtime)?;
    let allowed = crate::os::get_affinity().map_err(|e| OverheadError::Runtime(e.source))?;
    let others = params.others_counts(&cap);
    let total: usize = others
        .iter()
        .map(|&k| params.own_counts(k).len() * params.agents.len() * params.rounds)
        .sum();
    let mut cells = Vec::with_capacity(total);
    let mut records = Vec::new();
    for &k in &others {
        let guard = if k > 0 {
            Some(OthersProcess::start(
                helpers,
                k,
                params.others_runnable.min(k),
            )?)
        } else {
            None
        };
        for n in params.own_counts(k) {
            for round in 0..params.rounds {
                for &agent in &params.agents {
                    let mut cell = run_cell(params, helpers, agent, k, n)?;
                    cell.round = round;
                    progress(&Progress {
                        done: cells.len() + 1,
                        total,
                        case: cells.len(),
                        cases: total,
                        mode: agent_label(agent),
                        round,
                        wall_s: cell.window_s,
                    });
                    cells.push(cell);
                }
            }
        }
        if let Some(g) = guard {
            records.push(g.stop()?);
        }
    }
    fill_quiet_ratios(&mut cells);
    let summary = summarise(&cells);
    Ok(OverheadReport {
        machine: Machine::describe(&allowed),
        capacity: cap,
        balance_interval_ms: rt_cfg.balance_interval_ms,
        params: params.clone(),
        cells,
        summary,
        others_processes: records,
    })
}

fn agent_label(a: AgentSetting) -> &'static str {
    match a {
        AgentSetting::On => "agent-on",
        AgentSetting::Off => "agent-off",
    }
}

/// Each cell's pass median over the quiet cell's (same agent and own size,
/// beside no others).
fn fill_quiet_ratios(cells: &mut [OverheadCell]) {
    let quiet: Vec<(AgentSetting, usize, usize, Option<f64>)> = cells
        .iter()
        .filter(|c| c.others == 0)
        .map(|c| {
            (
                c.agent,
                c.own_threads,
                c.round,
                c.pass_cpu_us.map(|t| t.median),
            )
        })
        .collect();
    for c in cells.iter_mut() {
        let base = quiet
            .iter()
            .find(|(a, n, r, _)| *a == c.agent && *n == c.own_threads && *r == c.round)
            .and_then(|q| q.3);
        c.quiet_ratio = crate::stats::ratio(c.pass_cpu_us.map(|t| t.median), base);
    }
}

/// The medians over rounds of each (agent, others, own), in the order the
/// cells first ran.
fn summarise(cells: &[OverheadCell]) -> Vec<CellSummary> {
    let mut keys: Vec<(AgentSetting, usize, usize)> = Vec::new();
    for c in cells {
        let key = (c.agent, c.others, c.own_threads);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let median = |v: Vec<f64>| crate::stats::median(&v);
    keys.into_iter()
        .map(|(agent, others, own_threads)| {
            let of: Vec<&OverheadCell> = cells
                .iter()
                .filter(|c| (c.agent, c.others, c.own_threads) == (agent, others, own_threads))
                .collect();
            let share = |f: fn(&Shares) -> f64| {
                median(of.iter().map(|c| f(&c.cpu_share_pct)).collect()).unwrap_or(0.0)
            };
            let wholes = of.iter().map(|c| c.cpu_share_pct.whole);
            let min = wholes.clone().fold(f64::INFINITY, f64::min);
            let max = wholes.fold(f64::NEG_INFINITY, f64::max);
            CellSummary {
                agent,
                others,
                own_threads,
                rounds: of.len(),
                pass_median_us: median(
                    of.iter()
                        .filter_map(|c| c.pass_cpu_us.map(|t| t.median))
                        .collect(),
                ),
                quiet_ratio: median(of.iter().filter_map(|c| c.quiet_ratio).collect()),
                cpu_share_pct: Shares {
                    balancer: share(|s| s.balancer),
                    agent: share(|s| s.agent),
                    hints: share(|s| s.hints),
                    whole: share(|s| s.whole),
                },
                whole_min_max: (min, max),
            }
        })
        .collect()
}

/// The others process and its pipes; killed and reaped when dropped.
struct OthersProcess {
    workers: Workers,
    record: OthersRecord,
}

impl OthersProcess {
    /// Starts `threads` others (`runnable` of them spinning) and waits,
    /// bounded, until they all run.
    fn start(
        helpers: &HelperCommand,
        threads: usize,
        runnable: usize,
    ) -> Result<OthersProcess, OverheadError> {
        let mut workers = Workers::new(crate::workers::explain_status);
        let mut cmd = Command::new(&helpers.program);
        cmd.args(&helpers.others_args)
            .arg("--sleeping")
            .arg((threads - runnable).to_string())
            .arg("--spinning")
            .arg(runnable.to_string());
        let what = format!("the other-threads process ({threads} threads)");
        workers.start(cmd, what.clone())?;
        let pid = workers.pid(0);
        let started = Instant::now();
        let timeout = start_timeout(threads);
        let dog = procs::Watchdog::arm(pid, timeout);
        let ready = workers.ready_go();
        if dog.disarm() {
            return Err(OverheadError::TimedOut {
                what,
                step: "start its threads",
                timeout,
            });
        }
        ready?;
        Ok(OthersProcess {
            workers,
            record: OthersRecord {
                threads,
                runnable,
                pid,
                start_s: started.elapsed().as_secs_f64(),
                gone_after: false,
            },
        })
    }

    /// Kills and reaps it, and checks that it is gone.
    fn stop(self) -> Result<OthersRecord, OverheadError> {
        let OthersProcess {
            workers,
            mut record,
        } = self;
        drop(workers);
        record.gone_after = !crate::cothreads::agent::process_running(record.pid)
            && std::fs::metadata(format!("/proc/{}", record.pid)).is_err();
        if !record.gone_after {
            return Err(OverheadError::OthersLeft(record.pid));
        }
        Ok(record)
    }
}

/// The idle exit given to a private agent, a backstop for a benchmark
/// killed before its guard ran: the agent is idle only from its start until
/// the hinting program's runtime connects (its first pass, one interval
/// after it starts, before its threads), so 30 s plus the warm-up is ample.
fn agent_idle_exit_secs(p: &OverheadParams) -> u64 {
    30 + p.warmup_s.ceil() as u64
}

/// Runs one cell.
fn run_cell(
    p: &OverheadParams,
    helpers: &HelperCommand,
    agent: AgentSetting,
    others: usize,
    own: usize,
) -> Result<OverheadCell, OverheadError> {
    let private = match agent {
        AgentSetting::On => Some(
            PrivateAgent::start(&helpers.program, agent_idle_exit_secs(p))
                .map_err(OverheadError::Agent)?,
        ),
        AgentSetting::Off => None,
    };
    let agent_env: OsString = private
        .as_ref()
        .map_or_else(|| "off".into(), |a| a.socket().as_os_str().to_owned());
    let mut workers = Workers::new(crate::workers::explain_status);
    let mut cmd = Command::new(&helpers.program);
    cmd.env("DFSCHED_AGENT", &agent_env)
        .args(&helpers.hinter_args)
        .arg("--threads")
        .arg(own.to_string())
        .arg("--hinters")
        .arg(p.hinters.min(own).to_string())
        .arg("--seconds")
        .arg(p.seconds.to_string())
        .arg("--warmup")
        .arg(p.warmup_s.to_string())
        .arg("--hint-period-ms")
        .arg(p.hint_period_ms.to_string());
    let what = format!("the hinting program ({own} threads, agent {agent})");
    workers.start(cmd, what.clone())?;
    let pid = workers.pid(0);
    let timeout = start_timeout(own) + Duration::from_secs_f64(p.warmup_s);
    let dog = procs::Watchdog::arm(pid, timeout);
    let ready = workers.ready_go();
    let agent_pid = private.as_ref().map(|a| a.pid().to_string());
    let agent_before = agent_pid.as_deref().map(procs::threads_cpu_ns);
    if dog.disarm() {
        return Err(OverheadError::TimedOut {
            what,
            step: "say ready",
            timeout,
        });
    }
    ready?;
    let started = Instant::now();
    let timeout = Duration::from_secs_f64(p.seconds) + start_timeout(own);
    let dog = procs::Watchdog::arm(pid, timeout);
    // The agent's second reading at the window's end, while the program is
    // still connected: the connection's thread (which runs the shared scan
    // for a report) ends with the connection, and its time with it.
    std::thread::sleep(Duration::from_secs_f64(p.seconds));
    let agent_after = agent_pid.as_deref().map(procs::threads_cpu_ns);
    let elapsed_s = started.elapsed().as_secs_f64();
    let result = workers.finish::<HinterResult>();
    if dog.disarm() {
        return Err(OverheadError::TimedOut {
            what,
            step: "report",
            timeout,
        });
    }
    let raw: Vec<HinterResult> = result?;
    let raw = raw.into_iter().next().expect("one worker, one result");
    if let Some(a) = private {
        a.stop().map_err(OverheadError::Agent)?;
    }
    let by_thread = match (&agent_before, &agent_after) {
        (Some(b), Some(a)) => procs::cpu_between(b, a),
        _ => BTreeMap::new(),
    };
    Ok(cell_from(p, agent, others, own, raw, by_thread, elapsed_s))
}

/// A cell's figures from the hinter's result and the agent's CPU; the
/// agent's share over the parent's own window (from "go" to its second
/// reading of the agent).
fn cell_from(
    p: &OverheadParams,
    agent: AgentSetting,
    others: usize,
    own: usize,
    raw: HinterResult,
    agent_cpu_ns_by_thread: BTreeMap<String, u64>,
    parent_window_s: f64,
) -> OverheadCell {
    let pct = |ns: u64, s: f64| {
        if s > 0.0 {
            ns as f64 * 1e-9 / s * 100.0
        } else {
            0.0
        }
    };
    let balancer_ns = raw.balancer_thread_cpu_ns.unwrap_or(raw.balancer_cpu_ns);
    let agent_ns: u64 = agent_cpu_ns_by_thread.values().sum();
    let balancer = pct(balancer_ns, raw.window_s);
    let agent_pct = pct(agent_ns, parent_window_s);
    let hints = pct(raw.hint_cpu_ns_total, raw.window_s);
    let samples: Vec<f64> = raw.pass_cpu_ns.iter().map(|&n| n as f64).collect();
    OverheadCell {
        agent,
        round: 0,
        others,
        others_runnable: p.others_runnable.min(others),
        own_threads: own,
        hinters: p.hinters.min(own),
        threads_active: raw.threads_active,
        window_s: raw.window_s,
        passes: raw.passes,
        pass_cpu_us: Tail::of(&samples).map(|t| t.scaled(1e-3)),
        quiet_ratio: None,
        hint_move_us: raw.hint_move_ns.map(|t| t.scaled(1e-3)),
        hint_repeat_ns: raw.hint_repeat_ns,
        hint_errors: raw.hint_errors,
        cpu_share_pct: Shares {
            balancer,
            agent: agent_pct,
            hints,
            whole: balancer + agent_pct + hints,
        },
        idle_us_per_pass: (raw.passes > 0)
            .then(|| raw.idle_cpu_ns as f64 * 1e-3 / raw.passes as f64),
        agent_samples: raw.agent_samples,
        own_scans: raw.own_scans,
        agent_cpu_ns_by_thread,
        raw,
    }
}

/// The report as a table for people.
pub fn render_overhead(r: &OverheadReport) -> String {
    let mut out = String::new();
    let c = &r.capacity;
    let _ =
        writeln!(
        out,
        "dfsched bench overhead: {} CPUs allowed ({}), {}; balance interval {} ms; {} s windows",
        r.machine.nr_cpus_allowed,
        r.machine.cpus_allowed,
        if r.machine.hypervisor { "a VM" } else { "bare metal" },
        r.balance_interval_ms,
        r.params.seconds
    );
    let _ = writeln!(
        out,
        "thread limit {} (pid_max {}, threads-max {}, RLIMIT_NPROC {}); {} threads present, {} kept \
         free: at most {} others",
        c.limit,
        c.pid_max,
        c.threads_max,
        c.nproc_limit.map_or("unlimited".into(), |n| n.to_string()),
        c.threads_present,
        c.reserve,
        c.largest_others
    );
    let _ = writeln!(
        out,
        "\n{:<5} {:>6} {:>5} {:>6} | {:>24} {:>6} | {:>17} {:>8} | {:>7} {:>7} {:>7} {:>7}",
        "agent",
        "others",
        "own",
        "passes",
        "pass CPU µs med/p99/max",
        "×quiet",
        "move µs med/p99",
        "rep ns",
        "bal %",
        "agent %",
        "hints %",
        "whole %"
    );
    for cell in &r.cells {
        let tail = |t: Option<Tail>, digits: usize| {
            t.map_or("-".into(), |t| {
                format!("{:.d$}/{:.d$}/{:.d$}", t.median, t.p99, t.max, d = digits)
            })
        };
        let mv = cell
            .hint_move_us
            .map_or("-".into(), |t| format!("{:.1}/{:.1}", t.median, t.p99));
        let s = cell.cpu_share_pct;
        let _ = writeln!(
            out,
            "{:<5} {:>6} {:>5} {:>6} | {:>24} {:>6} | {:>17} {:>8} | {:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            cell.agent.as_str(),
            cell.others,
            cell.own_threads,
            cell.passes,
            tail(cell.pass_cpu_us, 0),
            cell.quiet_ratio.map_or("-".into(), |q| format!("{q:.2}")),
            mv,
            cell.hint_repeat_ns
                .map_or("-".into(), |t| format!("{:.0}", t.median)),
            s.balancer,
            s.agent,
            s.hints,
            s.whole
        );
    }
    if r.params.rounds > 1 {
        let _ = writeln!(
            out,
            "\nmedians over {} rounds (agent settings interleaved in each round):\n{:<5} {:>6} {:>5} | {:>12} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>15}",
            r.params.rounds,
            "agent",
            "others",
            "own",
            "pass med µs",
            "×quiet",
            "bal %",
            "agent %",
            "hints %",
            "whole %",
            "whole min-max"
        );
        for m in &r.summary {
            let s = m.cpu_share_pct;
            let _ = writeln!(
                out,
                "{:<5} {:>6} {:>5} | {:>12} {:>6} | {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>15}",
                m.agent.as_str(),
                m.others,
                m.own_threads,
                m.pass_median_us.map_or("-".into(), |v| format!("{v:.0}")),
                m.quiet_ratio.map_or("-".into(), |q| format!("{q:.2}")),
                s.balancer,
                s.agent,
                s.hints,
                s.whole,
                format!("{:.3}-{:.3}", m.whole_min_max.0, m.whole_min_max.1)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nshares are of one CPU over the window: bal = the balancer thread (schedstat), agent = \
         the private agent's threads (the program, its only client, asks it once a second, for no \
         sample, and samples /proc itself on every pass), hints = the hinting threads' CPU in their hint bursts; ×quiet = pass median / the same row beside \
         0 others. Others: {} runnable (nice 19) threads, the rest asleep, in a session of their \
         own.",
        r.params.others_runnable
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_leaves_the_reserve_and_rounds_down() {
        // This machine: pid_max 32768, ~110 threads present.
        let c = Capacity::from_figures(32_768, 192_729, Some(96_364), 110);
        assert_eq!(c.limit, 32_768);
        // 32768 − 110 − 4096 − 12 = 28550 → 28500.
        assert_eq!(c.largest_others, 28_500);
        assert!(c.fits(28_500, DEFAULT_HINTERS));
        assert!(!c.fits(30_000, DEFAULT_HINTERS));
        // A big machine: capped at MAX_OTHERS.
        let big = Capacity::from_figures(4_194_304, 1_000_000, None, 2_000);
        assert_eq!(big.largest_others, MAX_OTHERS);
        // The lowest limit wins, and a full machine leaves no room at all.
        let tight = Capacity::from_figures(32_768, 192_729, Some(5_000), 110);
        assert_eq!((tight.limit, tight.largest_others), (5_000, 500));
        assert_eq!(
            Capacity::from_figures(4_000, 9_000, None, 100).largest_others,
            0
        );
    }

    #[test]
    fn proc_figures_parse() {
        assert_eq!(
            parse_loadavg_threads("6.88 3.34 1.44 3/105 23938\n"),
            Some(105)
        );
        assert_eq!(parse_loadavg_threads("garbage"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             96364                96364                processes \n";
        assert_eq!(parse_nproc_limit(limits), Some(96_364));
        let unlimited =
            "Max processes             unlimited            unlimited            processes \n";
        assert_eq!(parse_nproc_limit(unlimited), None);
    }

    #[test]
    fn the_grid_has_a_quiet_reference_and_the_own_sweep_beside_none() {
        let cap = Capacity::from_figures(32_768, 192_729, Some(96_364), 110);
        let p = OverheadParams::default();
        assert_eq!(p.others_counts(&cap), [0, 1_000, 10_000, 28_500]);
        assert_eq!(p.own_counts(0), [4, 10, 1_000, 10_000]);
        assert_eq!(p.own_counts(1_000), [4]);
        p.validate(&cap).unwrap();
        let q = OverheadParams {
            others: vec![OthersSize::Count(50)],
            ..OverheadParams::quick()
        };
        assert_eq!(q.others_counts(&cap), [0, 50], "0 is always run");
        let too_many = OverheadParams {
            others: vec![OthersSize::Count(29_000)],
            ..OverheadParams::default()
        };
        let e = too_many.validate(&cap).unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("at most 28500"),
            "{e}"
        );
        for bad in [
            OverheadParams {
                own: vec![0],
                ..OverheadParams::default()
            },
            OverheadParams {
                agents: vec![],
                ..OverheadParams::default()
            },
            OverheadParams {
                seconds: 0.0,
                ..OverheadParams::default()
            },
            OverheadParams {
                hinters: 0,
                ..OverheadParams::default()
            },
        ] {
            assert!(bad.validate(&cap).unwrap_err().is_usage());
        }
        assert_eq!("max".parse(), Ok(OthersSize::Max));
        assert_eq!("10_000".parse(), Ok(OthersSize::Count(10_000)));
        assert!("lots".parse::<OthersSize>().is_err());
    }

    fn raw(pass_ns: &[u64]) -> HinterResult {
        HinterResult {
            threads_active: 4,
            window_s: 2.0,
            pass_cpu_ns: pass_ns.to_vec(),
            passes: pass_ns.len() as u64,
            balancer_cpu_ns: pass_ns.iter().sum(),
            idle_cpu_ns: 0,
            balancer_thread_cpu_ns: Some(20_000_000),
            placements: 0,
            agent_samples: 0,
            own_scans: pass_ns.len() as u64,
            refreshes: 0,
            external_files: pass_ns.len() as u64,
            group_moves: 0,
            task_moves: 0,
            hint_move_ns: None,
            hint_repeat_ns: None,
            hint_wall_ns_total: 3_000_000,
            hint_cpu_ns_total: 2_000_000,
            hint_errors: 0,
        }
    }

    #[test]
    fn a_cell_adds_the_shares_and_ratios_compare_with_the_quiet_row() {
        let p = OverheadParams::default();
        let agent = BTreeMap::from([("dfsched-agent-tick".to_string(), 10_000_000u64)]);
        let quiet = cell_from(
            &p,
            AgentSetting::On,
            0,
            4,
            raw(&[100_000; 3]),
            agent.clone(),
            2.0,
        );
        // 20 ms of 2 s = 1 %; the agent's 10 ms 0.5 %; hints 0.1 %.
        let s = quiet.cpu_share_pct;
        assert!((s.balancer - 1.0).abs() < 1e-9 && (s.agent - 0.5).abs() < 1e-9);
        assert!((s.hints - 0.1).abs() < 1e-9 && (s.whole - 1.6).abs() < 1e-9);
        assert_eq!(quiet.pass_cpu_us.unwrap().median, 100.0);
        let busy = cell_from(
            &p,
            AgentSetting::On,
            1_000,
            4,
            raw(&[150_000; 3]),
            agent,
            2.0,
        );
        let other_agent = cell_from(
            &p,
            AgentSetting::Off,
            1_000,
            4,
            raw(&[300_000; 3]),
            BTreeMap::new(),
            2.0,
        );
        let mut cells = vec![quiet, busy, other_agent];
        fill_quiet_ratios(&mut cells);
        assert_eq!(cells[0].quiet_ratio, Some(1.0));
        assert_eq!(cells[1].quiet_ratio, Some(1.5));
        assert_eq!(cells[2].quiet_ratio, None, "no quiet row for agent off");
        let text = render_overhead(&OverheadReport {
            machine: Machine::describe(&dfsched_core::CpuSet::default()),
            capacity: Capacity::from_figures(32_768, 192_729, None, 110),
            balance_interval_ms: 100,
            params: p,
            summary: summarise(&cells),
            cells,
            others_processes: vec![],
        });
        assert!(text.contains("at most 28500 others"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("on ")).count(), 2);
    }

    /// Rounds: each round's ×quiet is against the same round's quiet cell,
    /// and the summary's figures are medians over the rounds, each share
    /// separately, with the whole share's range.
    #[test]
    fn rounds_compare_within_a_round_and_summarise_by_medians() {
        let p = OverheadParams {
            rounds: 3,
            ..OverheadParams::default()
        };
        let mut cells = Vec::new();
        for (round, (quiet_ns, busy_ns)) in
            [(100_000, 150_000), (200_000, 200_000), (120_000, 360_000)]
                .into_iter()
                .enumerate()
        {
            for (others, ns) in [(0, quiet_ns), (1_000, busy_ns)] {
                let mut r = raw(&[ns; 3]);
                r.balancer_thread_cpu_ns = Some(ns * 100);
                let mut c = cell_from(&p, AgentSetting::Off, others, 4, r, BTreeMap::new(), 2.0);
                c.round = round;
                cells.push(c);
            }
        }
        fill_quiet_ratios(&mut cells);
        let ratios: Vec<Option<f64>> = cells.iter().map(|c| c.quiet_ratio).collect();
        assert_eq!(
            ratios,
            vec![
                Some(1.0),
                Some(1.5),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(3.0)
            ]
        );
        let summary = summarise(&cells);
        assert_eq!(summary.len(), 2);
        let busy = &summary[1];
        assert_eq!((busy.others, busy.rounds), (1_000, 3));
        // Pass medians 150, 200, 360 µs: 200; ×quiet 1.5, 1, 3: 1.5.
        assert_eq!(busy.pass_median_us, Some(200.0));
        assert_eq!(busy.quiet_ratio, Some(1.5));
        // Each share is the median of the rounds' own (0.75, 1 and 1.8 %).
        let mut bal: Vec<f64> = cells
            .iter()
            .filter(|c| c.others == 1_000)
            .map(|c| c.cpu_share_pct.balancer)
            .collect();
        bal.sort_by(f64::total_cmp);
        assert_eq!(busy.cpu_share_pct.balancer, bal[1]);
        assert!(busy.whole_min_max.0 < busy.whole_min_max.1);
        let text = render_overhead(&OverheadReport {
            machine: Machine::describe(&dfsched_core::CpuSet::default()),
            capacity: Capacity::from_figures(32_768, 192_729, None, 110),
            balance_interval_ms: 100,
            params: p,
            summary,
            cells,
            others_processes: vec![],
        });
        assert!(text.contains("medians over 3 rounds"), "{text}");
    }
}
