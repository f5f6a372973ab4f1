//! Runs the benchmark: threads, the start gate, timing, counters, rounds.
//!
//! One run of one mode:
//!
//! ```text
//!  main                         worker t (×threads)
//!  ────                         ───────────────────
//!  make fresh DFs (zeroed)
//!  dfsched: Runtime::start
//!  spawn workers ─────────────► place itself (mode), read affinity back,
//!                               read /proc/thread-self/sched
//!  wait until all arrived ◄──── arrive at the gate, wait
//!  start = now; open gate ────► work: iterations passes (DF switches)
//!                               finish = now; read sched again
//!  join all ◄────────────────── exit
//!  wall = last finish − start; dfsched: stats, shutdown
//! ```
//!
//! A worker that fails to place itself still arrives at the gate (so nobody
//! waits forever); the gate then stays shut, every worker exits without
//! working, and the run reports the first error. A run never leaves a thread
//! behind: workers are scoped threads joined before the run returns.
//!
//! Rounds: round `r` runs every mode once, in an order shuffled from
//! `(seed, r)`, so slow drift of the machine (thermal, neighbours) spreads
//! over all modes instead of favouring whichever always runs first.

use crate::df::{self, Df, WritePattern};
use crate::gate::StartGate;
use crate::machine::{Machine, TickSample};
use crate::modes::{PlaceError, Placed, Placer};
use crate::os::{self, ThreadSched};
use crate::params::{BenchMode, Mode, Params};
use crate::report::BenchReport;
use crate::BenchError;
use dfsched::{Runtime, RuntimeConfig};
use dfsched_core::{CpuId, CpuSet};
use serde::{Deserialize, Serialize};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

/// What one worker thread saw in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Its index, `0..threads`.
    pub thread: usize,
    /// Its kernel thread id.
    pub tid: u64,
    /// The DF it started on.
    pub initial_df: usize,
    /// The DF it ended on.
    pub final_df: usize,
    /// DF switches it made.
    pub switches: u64,
    /// Pinned modes: the CPUs it pinned itself to at the end (its last pin).
    pub pinned: Option<CpuSet>,
    /// Its affinity read back after placing itself, before the gate opened.
    pub affinity_start: CpuSet,
    /// Its affinity read back after its last pass.
    pub affinity_end: CpuSet,
    /// The CPU it ran its last pass on (`sched_getcpu` right after).
    pub cpu_end: Option<CpuId>,
    /// Pins whose read-back differed from the CPUs asked for.
    pub pin_mismatches: u64,
    /// Seconds from the gate opening to its last pass finishing.
    pub finish_s: f64,
    /// Context switches during the run (`nr_switches` delta).
    pub ctx_switches: u64,
    /// Voluntary context switches during the run.
    pub voluntary_switches: u64,
    /// Involuntary context switches (preemptions) during the run.
    pub involuntary_switches: u64,
    /// Migrations to another CPU during the run (`se.nr_migrations` delta).
    pub migrations: u64,
    /// CPU time consumed during the run, seconds (`se.sum_exec_runtime`).
    pub cpu_s: f64,
}

/// One run of one mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    /// The mode.
    pub mode: Mode,
    /// Which round (0-based) of the case it belongs to.
    pub round: usize,
    /// Seconds from the gate opening to the last thread finishing.
    pub wall_s: f64,
    /// CPU seconds, summed over the threads.
    pub cpu_s: f64,
    /// Context switches, summed over the threads.
    pub ctx_switches: u64,
    /// Voluntary context switches, summed over the threads.
    pub voluntary_switches: u64,
    /// Involuntary context switches, summed over the threads.
    pub involuntary_switches: u64,
    /// Migrations, summed over the threads.
    pub migrations: u64,
    /// (slowest − fastest thread's finish) / wall: 0 when every thread
    /// progressed alike.
    pub spread: f64,
    /// Pins whose read-back differed, summed over the threads (pinned modes).
    pub pin_mismatches: u64,
    /// DF switches, summed over the threads.
    pub df_switches: u64,
    /// Share (0–1) of the allowed CPUs' time that other processes or the
    /// hypervisor took while the run was timed; `None` if unreadable.
    pub others_share: Option<f64>,
    /// The runtime's own statistics at the end of a `dfsched` run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_stats: Option<serde_json::Value>,
    /// Every thread's record (left out of JSON reports: too long).
    #[serde(skip)]
    pub threads: Vec<ThreadRecord>,
}

/// Where a long benchmark is, reported after every run.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Runs finished so far, over all cases.
    pub done: usize,
    /// Runs in total, over all cases.
    pub total: usize,
    /// Which case (0-based) the run belonged to.
    pub case: usize,
    /// Number of cases (1 unless a grid runs).
    pub cases: usize,
    /// The run's mode, by name.
    pub mode: &'static str,
    /// The run's round (0-based).
    pub round: usize,
    /// The run's wall time, seconds.
    pub wall_s: f64,
}

/// What a benchmark needs from the environment, read once before any run
/// so that a bad environment fails before anything runs.
pub struct Environment {
    /// The CPUs this process may run on.
    pub allowed: CpuSet,
    /// The machine, for the report.
    pub machine: Machine,
    /// The runtime configuration (`DFSCHED_*`), if a case runs `dfsched`.
    pub rt_config: Option<RuntimeConfig>,
}

impl Environment {
    /// Reads the environment for `cases`.
    pub fn read(cases: &[Params]) -> Result<Environment, BenchError> {
        let allowed = os::get_affinity().map_err(BenchError::Os)?;
        let needs_rt = cases
            .iter()
            .any(|c| c.modes.iter().any(|m| m.uses_runtime()));
        let rt_config = if needs_rt {
            Some(RuntimeConfig::from_env().map_err(BenchError::Runtime)?)
        } else {
            None
        };
        Ok(Environment {
            machine: Machine::describe(&allowed),
            allowed,
            rt_config,
        })
    }
}

/// Validates every case, then runs them in order, each as interleaved
/// rounds; `progress` hears about every finished run.
pub fn run_cases(
    cases: &[Params],
    progress: &mut dyn FnMut(&Progress),
) -> Result<Vec<BenchReport>, BenchError> {
    for c in cases {
        c.validate()?;
    }
    let env = Environment::read(cases)?;
    tracing::info!(
        cases = cases.len(),
        allowed = %env.allowed,
        hypervisor = env.machine.hypervisor,
        "DF benchmark starting"
    );
    let total = cases.iter().map(|c| c.repeat * c.modes.len()).sum();
    let mut rounds = Rounds::new(cases.len(), total, progress);
    let mut reports = Vec::with_capacity(cases.len());
    for (case, params) in cases.iter().enumerate() {
        let order = (&params.modes[..], params.repeat, params.seed);
        let run_mode = |mode: Mode, round| -> Result<RunRecord, BenchError> {
            let run = run_once(params, mode, round, &env)?;
            tracing::debug!(
                case,
                round,
                mode = mode.as_str(),
                wall_s = run.wall_s,
                cpu_s = run.cpu_s,
                ctx_switches = run.ctx_switches,
                migrations = run.migrations,
                "run finished"
            );
            Ok(run)
        };
        let runs = rounds.run_case(case, order, run_mode, |r| r.wall_s)?;
        reports.push(BenchReport::new(params.clone(), env.machine.clone(), runs));
    }
    Ok(reports)
}

/// Every benchmark's cases as interleaved rounds: runs each case's rounds
/// ([`Rounds::run_case`]) and tells `progress` of every run, counted over
/// all cases.
pub(crate) struct Rounds<'p> {
    /// Runs finished so far, over all cases.
    done: usize,
    /// Runs in total, over all cases.
    total: usize,
    /// Number of cases.
    cases: usize,
    /// Hears of every finished run.
    progress: &'p mut dyn FnMut(&Progress),
}

impl<'p> Rounds<'p> {
    /// For `cases` cases of `total` runs in all.
    pub(crate) fn new(cases: usize, total: usize, progress: &'p mut dyn FnMut(&Progress)) -> Self {
        Rounds {
            done: 0,
            total,
            cases,
            progress,
        }
    }

    /// Case number `case`: `repeat` rounds, round `r` running each of
    /// `modes` once, in [`round_order`]`(modes, seed, r)`, by `run(mode,
    /// r)`; `progress` hears of each run as it ends, with `wall_s` of it.
    /// The runs in the order they ran; the first error ends the case.
    pub(crate) fn run_case<M: BenchMode, R, E>(
        &mut self,
        case: usize,
        (modes, repeat, seed): (&[M], usize, u64),
        mut run: impl FnMut(M, usize) -> Result<R, E>,
        wall_s: impl Fn(&R) -> f64,
    ) -> Result<Vec<R>, E> {
        let mut runs = Vec::with_capacity(repeat * modes.len());
        for round in 0..repeat {
            for mode in round_order(modes, seed, round) {
                let r = run(mode, round)?;
                self.done += 1;
                (self.progress)(&Progress {
                    done: self.done,
                    total: self.total,
                    case,
                    cases: self.cases,
                    mode: mode.name(),
                    round,
                    wall_s: wall_s(&r),
                });
                runs.push(r);
            }
        }
        Ok(runs)
    }
}

/// The modes of round `round`, shuffled (Fisher–Yates) from `(seed, round)`.
pub fn round_order<M: Copy>(modes: &[M], seed: u64, round: usize) -> Vec<M> {
    let mut order = modes.to_vec();
    let mut state = df::mix64(seed ^ df::mix64(round as u64));
    for i in (1..order.len()).rev() {
        state = df::mix64(state);
        let j = (state % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Runs one mode once.
pub fn run_once(
    params: &Params,
    mode: Mode,
    round: usize,
    env: &Environment,
) -> Result<RunRecord, BenchError> {
    let dfs: Vec<Df> = (0..params.dfs).map(|_| Df::new(params.df_bytes)).collect();
    let record = match mode {
        Mode::DfschedRecord => Some(RecordTarget::new(params.record.as_deref(), round)?),
        _ => None,
    };
    let rt = if mode.uses_runtime() {
        let mut cfg = env
            .rt_config
            .clone()
            .expect("Environment::read reads the runtime config for dfsched cases");
        cfg.record = record.as_ref().map(|r| r.path.clone());
        Some(Runtime::start(cfg).map_err(BenchError::Runtime)?)
    } else {
        None
    };
    let placer = Placer::new(mode, params, &env.allowed, rt.clone());
    let outcome = run_threads(params, &dfs, &placer, &env.allowed);
    let runtime_stats = rt.map(|rt| {
        let stats = serde_json::to_value(rt.stats()).unwrap_or(serde_json::Value::Null);
        rt.shutdown();
        stats
    });
    // After the shutdown, which wrote the recording's end: our own
    // recording goes with its directory, a `--record` file stays.
    drop(record);
    let (start, threads, others_share) = outcome?;
    let mut run = summarise(mode, round, start, threads, runtime_stats);
    run.others_share = others_share;
    Ok(run)
}

/// The file a `dfsched-record` run records into.
///
/// With `--record FILE` ([`Params::record`]) it is `FILE`, removed first so
/// that the runtime creates it under its own name (the runtime writes
/// `FILE.PID` beside a file that exists) and kept after the run. Without,
/// it is `round-R.dfrec` in a directory made for this run: a fresh random
/// name under the system temp dir, created by `mkdir` (which fails if the
/// name exists) with mode 0700, so no other user can have placed a file or
/// a symlink where the runtime writes, nor read the recording; the
/// directory and the recording in it are removed when this is dropped.
#[derive(Debug)]
struct RecordTarget {
    /// The file the runtime is told to record into (`DFSCHED_RECORD`).
    path: PathBuf,
    /// The directory holding `path` when the recording is ours to remove
    /// (held only to be removed on drop); `None` for a `--record` file.
    _scratch: Option<tempfile::TempDir>,
}

impl RecordTarget {
    /// The recording of round `round`: into `given` (replaced) if set, else
    /// into a private directory of its own (type doc).
    fn new(given: Option<&Path>, round: usize) -> Result<RecordTarget, BenchError> {
        if let Some(path) = given {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(BenchError::Record(path.to_path_buf(), e)),
            }
            return Ok(RecordTarget {
                path: path.to_path_buf(),
                _scratch: None,
            });
        }
        let dir = crate::private_temp_dir("dfsched-bench-record-")
            .map_err(|e| BenchError::RecordDir(std::env::temp_dir(), e))?;
        Ok(RecordTarget {
            path: dir.path().join(format!("round-{round}.dfrec")),
            _scratch: Some(dir),
        })
    }
}

/// What the timed part of a run gives: the start, every worker's record
/// with its absolute finish, and how busy other processes kept the CPUs.
type Timed = (Instant, Vec<(ThreadRecord, Instant)>, Option<f64>);

/// What a worker hands back: its record (finish time still absolute).
type WorkerOut = Result<(ThreadRecord, Instant), WorkerError>;

/// Why a worker did not finish its work.
#[derive(Debug)]
enum WorkerError {
    /// It could not place itself or read its counters.
    Failed(usize, PlaceError),
    /// Another worker failed (or could not be spawned); it did no work.
    Aborted,
}

/// Spawns the workers, opens the gate, joins them.
fn run_threads(
    params: &Params,
    dfs: &[Df],
    placer: &Placer,
    allowed: &CpuSet,
) -> Result<Timed, BenchError> {
    let gate = StartGate::default();
    thread::scope(|s| {
        let mut handles = Vec::with_capacity(params.threads);
        let mut spawn_error = None;
        for t in 0..params.threads {
            let gate = &gate;
            let spawned = thread::Builder::new()
                .name(format!("df-worker-{t}"))
                .spawn_scoped(s, move || worker(t, params, dfs, placer, gate));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        let all_placed = gate.wait_arrivals(handles.len());
        let go = all_placed && spawn_error.is_none();
        let ticks_before = TickSample::read(allowed);
        let start = Instant::now();
        gate.decide(go);
        let outs: Vec<WorkerOut> = handles
            .into_iter()
            .enumerate()
            .map(|(t, h)| h.join().map_err(|_| BenchError::WorkerPanicked(t)))
            .collect::<Result<_, _>>()?;
        let others_share = ticks_before
            .zip(TickSample::read(allowed))
            .and_then(|(a, b)| a.others_share(&b));
        if let Some(e) = spawn_error {
            return Err(BenchError::Spawn(e));
        }
        let mut records = Vec::with_capacity(outs.len());
        let mut first_error = None;
        for out in outs {
            match out {
                Ok(r) => records.push(r),
                Err(WorkerError::Failed(t, e)) => {
                    first_error.get_or_insert(BenchError::Place {
                        thread: t,
                        source: e,
                    });
                }
                Err(WorkerError::Aborted) => {}
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok((start, records, others_share)),
        }
    })
}

/// One worker thread's life; see the module doc.
fn worker(t: usize, params: &Params, dfs: &[Df], placer: &Placer, gate: &StartGate) -> WorkerOut {
    let initial_df = params.initial_df(t);
    // A panic here must still arrive at the gate, or the main thread would
    // wait for this worker forever.
    let setup = panic::catch_unwind(AssertUnwindSafe(
        || -> Result<(Placed, CpuSet, ThreadSched), PlaceError> {
            let placed = placer.start(t, initial_df)?;
            let affinity = os::get_affinity()?;
            let sched = os::thread_self_sched()?;
            Ok((placed, affinity, sched))
        },
    ));
    let setup = match setup {
        Ok(setup) => setup,
        Err(payload) => {
            gate.arrive(false);
            panic::resume_unwind(payload);
        }
    };
    let go = gate.arrive(setup.is_ok());
    let (mut placed, affinity_start, before) = setup.map_err(|e| WorkerError::Failed(t, e))?;
    if !go {
        return Err(WorkerError::Aborted);
    }
    let mut pattern = WritePattern::new(params.write_ratio, params.seed ^ df::mix64(t as u64));
    let done = df::work(
        dfs,
        params.stride(),
        initial_df,
        params.iterations,
        params.switch_every,
        &mut pattern,
        |_, to| placer.switch(to, &mut placed),
    )
    .map_err(|e| WorkerError::Failed(t, e))?;
    let finish = Instant::now();
    let cpu_end = os::current_cpu();
    let after = (|| -> Result<(CpuSet, ThreadSched), PlaceError> {
        Ok((os::get_affinity()?, os::thread_self_sched()?))
    })();
    let (affinity_end, after) = after.map_err(|e| WorkerError::Failed(t, e))?;
    let record = ThreadRecord {
        thread: t,
        tid: os::gettid(),
        initial_df,
        final_df: done.final_df,
        switches: done.switches,
        pinned: placed.expected,
        affinity_start,
        affinity_end,
        cpu_end,
        pin_mismatches: placed.mismatches,
        finish_s: 0.0,
        ctx_switches: after.nr_switches.saturating_sub(before.nr_switches),
        voluntary_switches: after
            .nr_voluntary_switches
            .saturating_sub(before.nr_voluntary_switches),
        involuntary_switches: after
            .nr_involuntary_switches
            .saturating_sub(before.nr_involuntary_switches),
        migrations: after.nr_migrations.saturating_sub(before.nr_migrations),
        cpu_s: after
            .sum_exec_runtime_ns
            .saturating_sub(before.sum_exec_runtime_ns) as f64
            * 1e-9,
    };
    Ok((record, finish))
}

/// Adds up one run's threads.
fn summarise(
    mode: Mode,
    round: usize,
    start: Instant,
    threads: Vec<(ThreadRecord, Instant)>,
    runtime_stats: Option<serde_json::Value>,
) -> RunRecord {
    let threads: Vec<ThreadRecord> = threads
        .into_iter()
        .map(|(mut r, finish)| {
            r.finish_s = finish.saturating_duration_since(start).as_secs_f64();
            r
        })
        .collect();
    let finishes = threads.iter().map(|r| r.finish_s);
    let wall_s = finishes.clone().fold(0.0, f64::max);
    let first_s = finishes.fold(f64::INFINITY, f64::min);
    let spread = if wall_s > 0.0 {
        (wall_s - first_s) / wall_s
    } else {
        0.0
    };
    RunRecord {
        mode,
        round,
        wall_s,
        cpu_s: threads.iter().map(|r| r.cpu_s).sum(),
        ctx_switches: threads.iter().map(|r| r.ctx_switches).sum(),
        voluntary_switches: threads.iter().map(|r| r.voluntary_switches).sum(),
        involuntary_switches: threads.iter().map(|r| r.involuntary_switches).sum(),
        migrations: threads.iter().map(|r| r.migrations).sum(),
        spread,
        pin_mismatches: threads.iter().map(|r| r.pin_mismatches).sum(),
        df_switches: threads.iter().map(|r| r.switches).sum(),
        others_share: None,
        runtime_stats,
        threads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_runs_every_mode_once_and_the_seed_fixes_the_order() {
        let modes = Mode::ALL.to_vec();
        let mut orders = std::collections::BTreeSet::new();
        for round in 0..20 {
            let o = round_order(&modes, 7, round);
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(sorted, modes, "round {round} is not a permutation");
            assert_eq!(o, round_order(&modes, 7, round));
            orders.insert(o);
        }
        assert!(orders.len() > 3, "rounds barely vary: {orders:?}");
        assert_eq!(round_order(&[Mode::Split], 1, 5), vec![Mode::Split]);
    }

    /// Without `--record`, a run records into a directory of its own: not
    /// a name another user could predict and plant a symlink at, mode 0700
    /// and ours, under the system temp dir, apart for every run (even of
    /// one round), and gone with the recording in it once dropped.
    #[test]
    fn a_default_recording_goes_in_a_private_directory_removed_after_the_run() {
        use std::os::unix::fs::MetadataExt;
        let a = RecordTarget::new(None, 3).unwrap();
        let b = RecordTarget::new(None, 3).unwrap();
        assert_ne!(a.path, b.path, "two runs of one round share a file");
        assert_eq!(a.path.file_name().unwrap(), "round-3.dfrec");
        let dir = a.path.parent().unwrap().to_path_buf();
        assert_eq!(dir.parent().unwrap(), std::env::temp_dir());
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("dfsched-bench-record-"), "{name}");
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.file_type().is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o700, "mode {:o}", meta.mode());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
        assert!(!a.path.exists(), "the runtime creates the file, not us");
        std::fs::write(&a.path, b"recording").unwrap();
        drop(a);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    /// `--record FILE`: the file is replaced before the run (so the runtime
    /// writes `FILE`, not `FILE.PID`) and kept after it.
    #[test]
    fn a_given_recording_is_replaced_before_the_run_and_kept_after() {
        let dir = tempfile::tempdir().unwrap();
        let given = dir.path().join("mine.dfrec");
        std::fs::write(&given, b"last run").unwrap();
        let target = RecordTarget::new(Some(&given), 0).unwrap();
        assert_eq!(target.path, given);
        assert!(!given.exists(), "the old recording is still there");
        std::fs::write(&given, b"this run").unwrap();
        drop(target);
        assert_eq!(std::fs::read(&given).unwrap(), b"this run");
        // A name that cannot be removed is an error naming it.
        let err = RecordTarget::new(Some(dir.path()), 0).unwrap_err();
        assert!(
            matches!(&err, BenchError::Record(p, _) if p == dir.path()),
            "{err}"
        );
    }
}

/// `bench df` on the shared contract ([`crate::suite::Benchmark`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct DfBench;

impl crate::suite::Benchmark for DfBench {
    type Params = Params;
    type Report = BenchReport;
    type Error = BenchError;
    const FAILED: &'static str = "the DF benchmark failed";

    fn run_cases(
        &self,
        cases: &[Params],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<BenchReport>, BenchError> {
        run_cases(cases, progress)
    }

    fn is_usage(e: &BenchError) -> bool {
        matches!(e, BenchError::Params(_))
    }

    fn machine(r: &BenchReport) -> &Machine {
        &r.machine
    }

    fn label(r: &BenchReport) -> String {
        crate::report::describe_params(&r.params)
    }

    fn render(r: &BenchReport) -> String {
        crate::report::render_report(r)
    }

    fn render_grid(g: &crate::GridReport) -> String {
        crate::report::render_grid(g)
    }
}
