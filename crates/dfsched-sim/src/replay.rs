//! Replaying recorded runs (`DFSCHED_RECORD`, [`dfsched_record`]) on a
//! simulated machine of any size, under every policy of
//! [`crate::df_bench::DfPolicy`], with the program model of
//! [`crate::program`] and the kernel placement model of
//! [`crate::program::body::kernel`] (the same body `sim df-bench` and
//! `--predict` run).
//!
//! ```text
//!  recordings (one per process) ──► per thread: points in time
//!    ThreadNew, Hint, Sample, ThreadExit     (CPU time, run-queue wait, DF)
//!        │ between two points: wall = Δt, cpu = ΔCPU, wait = Δwait (interpolated)
//!        │                     blocked = wall − cpu − wait (≥ 0)
//!        ▼
//!  bursts: Switch at each hint; per piece of ≤ `piece_ns` of the interval:
//!    its share of `cpu` as work (on a DF: line accesses + compute, else
//!    compute), then its share of `blocked` as Sleep
//!    — but a ring member's stay (partners.rs): R rounds of
//!      Wait(own) · work · Signal(successor)
//!        ▼
//!  Workload ──► body::run under each policy (scaled, see below)
//! ```
//!
//! The model, and what it assumes:
//!
//! - **Work on a DF.** A recording knows a thread's CPU time, not its
//!   accesses. A thread on a DF is taken to sweep the DF's lines in address
//!   order, `accesses_per_line` accesses per line (default 8: every 8-byte
//!   word, as `bench df` at its default stride), each costing the machine's
//!   private hit (`Calibration::l1_hit_cycles`): one simulated line access
//!   and `accesses_per_line − 1` hits as compute. On the recording machine,
//!   with every access a hit, a thread's work then takes its recorded CPU
//!   time; misses (placement) add to it. `write_pct` of the lines are
//!   written (default 100: sharing at its most costly, as `bench df`'s
//!   headline case; the recording cannot tell reads from writes).
//! - **DF size.** `dfsched_df_size` declares it; otherwise
//!   [`DEFAULT_DF_BYTES`] (8 KiB, `bench df`'s default DF): large enough
//!   that refilling it after a move costs 128 line transfers, small enough
//!   that DFs fit any current private L2, so the default neither hides the
//!   locality a placement buys nor turns a replay into a study of capacity
//!   misses the program may not have.
//! - **Blocking between partners (closed loop).** Threads of one process
//!   on one DF whose switch counts show them handing work to each other
//!   are replayed as a token ring (`replay/partners.rs`): a member's wait ends
//!   when its predecessor signals, having done its part, not after the
//!   recorded time. Their blocked time in the ring is not replayed as
//!   sleep; the ring makes its own.
//! - **Other blocking (open loop).** Off-CPU time that was not run-queue
//!   wait is a sleep of fixed length: nothing says which thread woke which.
//!   A sleep is cut into pieces of at most `piece_ns` interleaved with the
//!   interval's work, so that a thread that blocks a thousand times a
//!   second is not replayed as one long run and one long sleep. Run-queue
//!   wait is not replayed: the simulated kernel makes its own.
//! - **What dfsched's engine sees.** The runtime hears of a block only
//!   through its idle step (no CPU for 2 passes and ≥ 200 ms), so the
//!   replay tells the simulated engine of a block only once it has lasted
//!   that long (scaled; `BodyConfig::engine_block_after_cycles`), and of
//!   the wake at its next balancer pass, after the kernel model has placed
//!   the wakee inside the mask it had.
//! - **Threads** start at their first record and end at their exit (or
//!   their last record); threads the runtime never knew (a program's main
//!   thread that never hinted, under a linked library) are not replayed.
//!   Each recording is one process (`TaskSpec::process`); recordings line
//!   up by their start's wall clock.
//! - **Length.** A real run makes billions of accesses; the replay makes at
//!   most `access_budget` line accesses, so every duration (work, sleeps,
//!   start times) is scaled by `scale` = budget / accesses (at most 1),
//!   and so are the quantum and the balancers' intervals, so that a thread
//!   sees as many slices as in the real run. Per-event costs (a context
//!   switch, a migration, a DF refill after a move) are not scaled: a
//!   scaled replay overstates them by 1/scale (the report says so).
//!
//! Memory stays bounded on large machines: the private cache is capped at
//! the data's footprint rounded up to a power of two (at least 64 KiB; a
//! cache larger than everything touched behaves the same), as
//! [`crate::df_bench::DfBenchParams::calibrated_machine`] caps the LLC; the
//! rest of the body is O(CPUs + threads + bursts).
//!
//! The replay is deterministic (one seed) and does no I/O: the CLI reads
//! and decodes the files.

use crate::cache::CacheGeometry;
use crate::df_bench::{DfBenchParams, DfPolicy};
use crate::machine::MachineConfig;
use crate::profile::Calibration;
use crate::program::body::{self, BodyError, BodyReport, KernelModel};
use crate::program::{Burst, DfSpec, TaskSpec, Workload};
use dfsched_core::{DfId, Topology};
use dfsched_record::{Event, Policy as RecPolicy, Recording};
use serde::Serialize;
use std::collections::BTreeMap;

/// A DF's size when the program did not declare it, bytes.
pub const DEFAULT_DF_BYTES: u64 = 8192;
/// Line accesses one replay makes at most, by default.
pub const DEFAULT_ACCESS_BUDGET: u64 = 4_000_000;
/// The kernel's periodic balance interval on a busy CPU, ns (4 ms).
const KERNEL_BALANCE_NS: f64 = 4e6;
/// The Linux runtime's idle step finds a thread blocked when it has used
/// no CPU for this many balancer passes… (`DFSCHED_IDLE_PASSES`' default,
/// dfsched-rt's `idle.rs`)
const RUNTIME_IDLE_PASSES: u64 = 2;
/// …and for at least this long, ns (its `MIN_IDLE_NS`).
const RUNTIME_IDLE_MIN_NS: u64 = 200_000_000;

/// How long a thread must block before the Linux runtime's engine hears of
/// it, with balancer passes every `balance_interval_ns`.
fn runtime_idle_ns(balance_interval_ns: u64) -> u64 {
    (RUNTIME_IDLE_PASSES * balance_interval_ns).max(RUNTIME_IDLE_MIN_NS)
}

/// How to replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayParams {
    /// NUMA nodes of the machine ([`Topology::test`]).
    pub nodes: u32,
    /// LLCs per node.
    pub llcs: u32,
    /// Cores per LLC.
    pub cores: u32,
    /// Hardware threads per core.
    pub smt: u32,
    /// Line accesses the replay makes at most (sets the scale).
    pub access_budget: u64,
    /// The size of a DF the program did not size, bytes.
    pub default_df_bytes: u64,
    /// Percent of a DF's lines a sweep writes.
    pub write_pct: u32,
    /// Accesses of the program per line of a sweep.
    pub accesses_per_line: u32,
    /// Longest piece an interval's work and sleep are cut into, ns.
    pub piece_ns: u64,
    /// Slice noise of the kernel model, thousandths (from the profile's
    /// measured spread; [`KernelModel::default`]'s otherwise).
    pub slice_jitter_milli: u32,
    /// Seed of the kernel model's draws.
    pub seed: u64,
    /// Replay the other processes' load the first recording saw
    /// ([`dfsched_record::Event::OutsideLoad`]) as background tasks pinned
    /// to its CPUs (CPU `c` of the recording on simulated CPU `c mod
    /// CPUs`). Meaningful on the recording's own machine; default false.
    pub outside_load: bool,
    /// Replay threads that block on each other as token rings (closed
    /// loop, `partners.rs`) where the recording lets the replay infer it;
    /// false replays every block open loop. Default true.
    pub closed_loop: bool,
}

impl Default for ReplayParams {
    fn default() -> Self {
        ReplayParams {
            nodes: 1,
            llcs: 1,
            cores: 2,
            smt: 1,
            access_budget: DEFAULT_ACCESS_BUDGET,
            default_df_bytes: DEFAULT_DF_BYTES,
            write_pct: 100,
            accesses_per_line: 8,
            piece_ns: 1_000_000,
            slice_jitter_milli: KernelModel::default().slice_jitter_milli,
            seed: 1,
            outside_load: false,
            closed_loop: true,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplayError {
    /// No recording, or no thread in any.
    #[error("nothing to replay: the recordings hold no thread")]
    NoThreads,
    /// A parameter out of range.
    #[error("{name} = {value}: {why}")]
    Param {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: u64,
        /// What it must be.
        why: &'static str,
    },
    /// The simulation refused the workload or the machine.
    #[error(transparent)]
    Body(#[from] BodyError),
}

/// One thread's recorded point: time, cumulative CPU time and wait (when
/// known), and the DF it works on from then.
#[derive(Clone, Copy, Debug)]
struct Point {
    t_ns: u64,
    cpu_ns: Option<u64>,
    wait_ns: Option<u64>,
    /// Cumulative run periods (`schedstat`'s third field), when recorded.
    runs: Option<u64>,
    /// Cumulative voluntary switches, when recorded.
    voluntary: Option<u64>,
    /// `Some(next)` at a hint.
    df: Option<Option<DfId>>,
}

/// A recorded thread, ready to become a task.
#[derive(Clone, Debug)]
struct Thread {
    process: u32,
    tid: u64,
    start_ns: u64,
    points: Vec<Point>,
}

/// The workload a set of recordings makes, before scaling.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayPlan {
    /// Threads replayed.
    pub threads: usize,
    /// Processes (recordings).
    pub processes: usize,
    /// DFs, with their sizes (declared or default), bytes.
    pub df_bytes: Vec<u64>,
    /// DFs whose size was not declared.
    pub dfs_defaulted: usize,
    /// From the first thread's start to the last one's end, ns: the
    /// recorded run's time.
    pub recorded_run_ns: u64,
    /// CPU time of every thread, ns.
    pub cpu_ns: u64,
    /// Of it, on a DF.
    pub cpu_on_df_ns: u64,
    /// Blocked time of every thread, ns (replayed as sleeps, but for the
    /// rings' members in their stays: [`ReplayPlan::rings`]).
    pub blocked_ns: u64,
    /// Groups of threads that block on each other, replayed closed loop as
    /// token rings (`partners.rs`); empty when none was found (or with
    /// [`ReplayParams::closed_loop`] off).
    pub rings: Vec<partners::Ring>,
    /// Run-queue wait of every thread, ns (not replayed).
    pub wait_ns: u64,
    /// The simulated run's length over the real one's (≤ 1).
    pub scale: f64,
    /// The simulator policy that stands for the recorded run's.
    pub recorded_policy: DfPolicy,
    /// Events the recorders dropped, over all recordings.
    pub dropped: u64,
    /// Background tasks standing for other processes' load (with
    /// [`ReplayParams::outside_load`]).
    pub outside_tasks: usize,
    /// Their CPU time at full length, ns.
    pub outside_cpu_ns: u64,
    /// The recorded runtime's balancer interval, ns (the engine's passes
    /// in the replay come as often, scaled).
    pub balance_interval_ns: u64,
    /// The workload itself.
    #[serde(skip)]
    pub workload: Workload,
}

/// One policy's replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayPolicyResult {
    /// The policy.
    pub policy: DfPolicy,
    /// Its time relative to vanilla's, thousandths (when vanilla ran).
    pub runtime_vs_vanilla_milli: Option<u64>,
    /// The predicted run time at full length, ns (the scaled makespan over
    /// the scale).
    pub predicted_ns: u64,
    /// What the simulated run did.
    pub report: BodyReport,
}

/// A replay's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayResult {
    /// The parameters.
    pub params: ReplayParams,
    /// CPUs of the simulated machine.
    pub cpus: usize,
    /// What the recordings became.
    pub plan: ReplayPlan,
    /// One entry per policy, in the order asked.
    pub results: Vec<ReplayPolicyResult>,
}

impl ReplayResult {
    /// The result of the policy that stands for the recorded run's, if it
    /// ran: its predicted time is what a replay on the recording's own
    /// machine must match.
    pub fn recorded_policy(&self) -> Option<&ReplayPolicyResult> {
        self.results
            .iter()
            .find(|r| r.policy == self.plan.recorded_policy)
    }
}

/// Linear interpolation of cumulative `(t, v)` readings at `t` (clamped
/// to the first and last readings).
fn interpolate(readings: &[(u64, u64)], t: u64) -> u64 {
    let Some(&(t0, v0)) = readings.first() else {
        return 0;
    };
    if t <= t0 {
        return v0;
    }
    let i = readings.partition_point(|&(ti, _)| ti <= t);
    if i >= readings.len() {
        return readings[readings.len() - 1].1;
    }
    let (ta, va) = readings[i - 1];
    let (tb, vb) = readings[i];
    if tb == ta {
        return vb;
    }
    va + ((vb.saturating_sub(va)) as u128 * u128::from(t - ta) / u128::from(tb - ta)) as u64
}

impl ReplayPlan {
    /// The plan of `recordings` (one per process) on a machine priced by
    /// `cal`.
    pub fn new(
        recordings: &[Recording],
        params: &ReplayParams,
        cal: &Calibration,
    ) -> Result<ReplayPlan, ReplayError> {
        let p = |name, value: u64, ok: bool, why| {
            if ok {
                Ok(())
            } else {
                Err(ReplayError::Param { name, value, why })
            }
        };
        p(
            "write_pct",
            params.write_pct.into(),
            params.write_pct <= 100,
            "a percentage, 0 to 100",
        )?;
        p(
            "accesses_per_line",
            params.accesses_per_line.into(),
            params.accesses_per_line >= 1,
            "at least 1",
        )?;
        p(
            "piece_ns",
            params.piece_ns,
            params.piece_ns >= 1000,
            "at least 1000 ns",
        )?;
        p(
            "access_budget",
            params.access_budget,
            params.access_budget >= 1000,
            "at least 1000",
        )?;
        p(
            "default_df_bytes",
            params.default_df_bytes,
            params.default_df_bytes >= 1,
            "at least 1 byte",
        )?;
        let origin = recordings
            .iter()
            .map(|r| r.header.start_unix_ns)
            .min()
            .unwrap_or(0);
        let mut threads: Vec<Thread> = Vec::new();
        let mut df_ids: BTreeMap<(u32, u64, u64), DfId> = BTreeMap::new();
        let mut sizes: BTreeMap<DfId, u64> = BTreeMap::new();
        let mut dropped = 0;
        for (proc_i, rec) in recordings.iter().enumerate() {
            let process = proc_i as u32;
            dropped += rec.dropped;
            let offset = rec.header.start_unix_ns - origin;
            let mut by_tid: BTreeMap<u64, Vec<Point>> = BTreeMap::new();
            let df_of = |app: u64, df: u64, ids: &mut BTreeMap<(u32, u64, u64), DfId>| {
                (df != 0).then(|| {
                    let n = ids.len() as u64 + 1;
                    *ids.entry((process, app, df)).or_insert(DfId(n))
                })
            };
            for ev in &rec.events {
                let t_ns = ev.t_ns() + offset;
                let (tid, point) = match *ev {
                    Event::ThreadNew {
                        tid,
                        cpu_ns,
                        wait_ns,
                        runs,
                        voluntary,
                        ..
                    }
                    | Event::ThreadExit {
                        tid,
                        cpu_ns,
                        wait_ns,
                        runs,
                        voluntary,
                        ..
                    }
                    | Event::Sample {
                        tid,
                        cpu_ns,
                        wait_ns,
                        runs,
                        voluntary,
                        ..
                    } => (
                        tid,
                        Point {
                            t_ns,
                            cpu_ns: Some(cpu_ns),
                            wait_ns: Some(wait_ns),
                            runs,
                            voluntary,
                            df: None,
                        },
                    ),
                    Event::Hint {
                        tid,
                        app,
                        next,
                        cpu_ns,
                        ..
                    } => (
                        tid,
                        Point {
                            t_ns,
                            cpu_ns: Some(cpu_ns),
                            wait_ns: None,
                            runs: None,
                            voluntary: None,
                            df: Some(df_of(app, next, &mut df_ids)),
                        },
                    ),
                    Event::DfSize { app, df, bytes, .. } => {
                        if let Some(id) = df_of(app, df, &mut df_ids) {
                            sizes.insert(id, bytes.max(1));
                        }
                        continue;
                    }
                    _ => continue,
                };
                by_tid.entry(tid).or_default().push(point);
            }
            for (tid, mut points) in by_tid {
                // Stable: records of one thread keep their file order at
                // equal times (a hint's reading before the next sample's).
                points.sort_by_key(|p| p.t_ns);
                threads.push(Thread {
                    process,
                    tid,
                    start_ns: points[0].t_ns,
                    points,
                });
            }
        }
        if threads.is_empty() {
            return Err(ReplayError::NoThreads);
        }
        threads.sort_by_key(|t| (t.start_ns, t.process));
        let start = threads.iter().map(|t| t.start_ns).min().unwrap_or(0);
        let end = threads
            .iter()
            .map(|t| t.points.last().map_or(t.start_ns, |p| p.t_ns))
            .max()
            .unwrap_or(start);
        let df_bytes: Vec<u64> = (1..=df_ids.len() as u64)
            .map(|d| {
                sizes
                    .get(&DfId(d))
                    .copied()
                    .unwrap_or(params.default_df_bytes)
            })
            .collect();
        let dfs_defaulted = (1..=df_ids.len() as u64)
            .filter(|d| !sizes.contains_key(&DfId(*d)))
            .count();
        // First pass: the intervals, in ns, and the line accesses they make.
        let line_cycles = u64::from(params.accesses_per_line) * cal.l1_hit_cycles.max(1);
        let line_ns = line_cycles as f64 * cal.cycle_ns;
        let mut intervals: Vec<Vec<Interval>> = Vec::with_capacity(threads.len());
        let (mut cpu, mut on_df, mut blocked, mut wait) = (0u64, 0u64, 0u64, 0u64);
        for th in &threads {
            let iv = intervals_of(th);
            for i in &iv {
                cpu += i.cpu_ns;
                blocked += i.blocked_ns;
                wait += i.wait_ns;
                if i.df.is_some() {
                    on_df += i.cpu_ns;
                }
            }
            intervals.push(iv);
        }
        let accesses = on_df as f64 / line_ns.max(1e-9);
        let scale = (params.access_budget as f64 / accesses.max(1.0)).min(1.0);
        // Threads that block on each other: token rings (partners.rs).
        let members: Vec<partners::Member<'_>> = threads
            .iter()
            .zip(&intervals)
            .map(|(th, ivs)| partners::Member {
                process: th.process,
                tid: th.tid,
                intervals: ivs,
            })
            .collect();
        let (roles, rings) = if params.closed_loop {
            partners::find(&members, scale, 0)
        } else {
            (vec![None; threads.len()], Vec::new())
        };
        // Second pass: bursts, scaled.
        let cyc = |ns: f64| -> u64 { (ns * scale / cal.cycle_ns).round() as u64 };
        let tasks = threads
            .iter()
            .zip(&intervals)
            .zip(&roles)
            .map(|((th, ivs), role)| {
                let mut program = Vec::new();
                let mut df = None;
                for (i, iv) in ivs.iter().enumerate() {
                    if iv.df != df {
                        program.push(Burst::Switch { next: iv.df });
                        df = iv.df;
                    }
                    if let Some(r) = role.filter(|r| (r.first..r.end).contains(&i)) {
                        if i == r.first {
                            let cpu: u64 = ivs[r.first..r.end].iter().map(|v| v.cpu_ns).sum();
                            let cycles = cpu as f64 * scale / cal.cycle_ns;
                            let switch = cal.cost.context_switch_cycles as f64;
                            push_ring(&mut program, df, cycles, switch, &r, line_cycles, params);
                        }
                        continue;
                    }
                    let wall = iv.cpu_ns + iv.blocked_ns;
                    let pieces = if iv.blocked_ns == 0 {
                        1
                    } else {
                        wall.div_ceil(params.piece_ns).max(1)
                    };
                    let work = iv.cpu_ns as f64 / pieces as f64;
                    let sleep = cyc(iv.blocked_ns as f64 / pieces as f64);
                    // Whole-cycle remainders carried from piece to piece.
                    let mut carry = 0.0f64;
                    for _ in 0..pieces {
                        let w = work * scale / cal.cycle_ns + carry;
                        let w_cycles = w.floor() as u64;
                        carry = w - w_cycles as f64;
                        push_work(&mut program, df, w_cycles, line_cycles, params);
                        if sleep > 0 {
                            program.push(Burst::Sleep { cycles: sleep });
                        }
                    }
                }
                program.push(Burst::Exit);
                TaskSpec {
                    start_cycles: cyc((th.start_ns - start) as f64),
                    allowed: None,
                    program,
                    process: th.process,
                    background: false,
                }
            })
            .collect();
        let mut tasks: Vec<TaskSpec> = tasks;
        let (outside_tasks, outside_cpu_ns) = if params.outside_load {
            let cpus = (params.nodes * params.llcs * params.cores * params.smt).max(1);
            let bg = outside_tasks(recordings, origin, start, end, cpus, params.piece_ns, cyc);
            let n = bg.0.len();
            tasks.extend(bg.0.into_iter().enumerate().map(|(k, mut t)| {
                // A process of its own each: never a co-thread of the
                // program's, nor of each other.
                t.process = recordings.len() as u32 + k as u32;
                t
            }));
            (n, bg.1)
        } else {
            (0, 0)
        };
        let recorded_policy = match recordings.first().map(|r| r.header.policy) {
            Some(RecPolicy::CoThread) => DfPolicy::CoThread,
            _ => DfPolicy::DfschedRr,
        };
        Ok(ReplayPlan {
            threads: threads.len(),
            processes: recordings.len(),
            dfs_defaulted,
            recorded_run_ns: end - start,
            cpu_ns: cpu,
            cpu_on_df_ns: on_df,
            blocked_ns: blocked,
            rings,
            wait_ns: wait,
            scale,
            recorded_policy,
            dropped,
            outside_tasks,
            outside_cpu_ns,
            balance_interval_ns: recordings
                .first()
                .map_or(100, |r| u64::from(r.header.balance_interval_ms).max(1))
                * 1_000_000,
            workload: Workload {
                dfs: df_bytes.iter().map(|&bytes| DfSpec { bytes }).collect(),
                tasks,
            },
            df_bytes,
        })
    }
}

/// Background tasks for the other processes' load of the first recording
/// that has any: per simulated CPU, as many tasks as the most whole
/// threads the load ever reached there (at most 8), task `j` busy for
/// the share of each interval by which the load exceeded `j` threads, in
/// pieces of at most `piece_ns` (compute, then sleep for the rest); each
/// interval's load holds from its record to the next (the first also back
/// to the run's start, the last to its end). Returns the tasks (process
/// numbers to be set) and their CPU time, ns.
fn outside_tasks(
    recordings: &[Recording],
    origin: u64,
    start: u64,
    end: u64,
    cpus: u32,
    piece_ns: u64,
    cyc: impl Fn(f64) -> u64,
) -> (Vec<TaskSpec>, u64) {
    let Some(rec) = recordings.iter().find(|r| {
        r.events
            .iter()
            .any(|e| matches!(e, Event::OutsideLoad { .. }))
    }) else {
        return (Vec::new(), 0);
    };
    let offset = rec.header.start_unix_ns - origin;
    let mut samples: Vec<(u64, Vec<u64>)> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            Event::OutsideLoad { t_ns, per_cpu } => {
                let mut load = vec![0u64; cpus as usize];
                for &(c, m) in per_cpu {
                    load[(c % cpus) as usize] += m;
                }
                Some((t_ns + offset, load))
            }
            _ => None,
        })
        .collect();
    samples.sort_by_key(|s| s.0);
    let mut total = 0u64;
    let mut out = Vec::new();
    for c in 0..cpus as usize {
        let most = samples.iter().map(|s| s.1[c]).max().unwrap_or(0);
        let k = most.div_ceil(1000).min(8);
        for j in 0..k {
            let mut program = Vec::new();
            let mut t = start;
            for (i, (_, load)) in samples.iter().enumerate() {
                let until = samples.get(i + 1).map_or(end, |s| s.0.clamp(start, end));
                if until <= t {
                    continue;
                }
                let duty = load[c].saturating_sub(1000 * j).min(1000);
                let span = until - t;
                let pieces = span.div_ceil(piece_ns).max(1);
                let busy = span as f64 * duty as f64 / 1000.0 / pieces as f64;
                let idle = span as f64 / pieces as f64 - busy;
                total += (busy * pieces as f64) as u64;
                for _ in 0..pieces {
                    let (b, s) = (cyc(busy), cyc(idle));
                    if b > 0 {
                        program.push(Burst::Compute { cycles: b });
                    }
                    if s > 0 {
                        program.push(Burst::Sleep { cycles: s });
                    }
                }
                t = until;
            }
            program.push(Burst::Exit);
            out.push(TaskSpec {
                start_cycles: 0,
                allowed: Some(dfsched_core::CpuSet::single(dfsched_core::CpuId(c as u32))),
                program,
                process: 0,
                background: true,
            });
        }
    }
    (out, total)
}

/// A ring member's stay (partners.rs): `r.rounds` rounds of its wait, an
/// equal share of `cycles` of work on `df` less one context switch
/// (`switch_cycles`), and its successor's signal; a token holder skips its
/// first wait.
///
/// Less a switch: the recorded CPU time holds the switch that ended each
/// of the member's runs (Linux charges a switch's work to the tasks it
/// switches between), and the simulated machine charges its own switch for
/// every hand-off it replays, so the work of a round is what is left.
fn push_ring(
    program: &mut Vec<Burst>,
    df: Option<DfId>,
    cycles: f64,
    switch_cycles: f64,
    r: &partners::Role,
    line_cycles: u64,
    params: &ReplayParams,
) {
    let piece = (cycles / r.rounds as f64 - switch_cycles).max(0.0);
    // Whole-cycle remainders carried from piece to piece.
    let mut carry = 0.0f64;
    for round in 0..r.rounds {
        if round > 0 || !r.holds_token {
            program.push(Burst::Wait { chan: r.wait_chan });
        }
        let w = piece + carry;
        let w_cycles = w.floor() as u64;
        carry = w - w_cycles as f64;
        push_work(program, df, w_cycles, line_cycles, params);
        program.push(Burst::Signal {
            chan: r.signal_chan,
        });
    }
}

/// `cycles` of work on `df` as bursts: line accesses of a sweep and the
/// rest of the sweep's accesses as compute; compute alone off any DF.
fn push_work(
    program: &mut Vec<Burst>,
    df: Option<DfId>,
    cycles: u64,
    line_cycles: u64,
    params: &ReplayParams,
) {
    if cycles == 0 {
        return;
    }
    let Some(_) = df else {
        program.push(Burst::Compute { cycles });
        return;
    };
    let lines = cycles / line_cycles;
    let rest = cycles - lines * line_cycles;
    // Each line: one simulated access (priced by the machine) and the
    // sweep's other accesses as hits.
    let hit = line_cycles / u64::from(params.accesses_per_line);
    let compute = lines * (line_cycles - hit) + rest;
    if compute > 0 {
        program.push(Burst::Compute { cycles: compute });
    }
    let written = lines * u64::from(params.write_pct) / 100;
    if lines > written {
        program.push(Burst::Read {
            lines: lines - written,
        });
    }
    if written > 0 {
        program.push(Burst::Write { lines: written });
    }
}

/// One stretch of a thread between two of its points.
#[derive(Clone, Copy, Debug)]
struct Interval {
    df: Option<DfId>,
    cpu_ns: u64,
    wait_ns: u64,
    blocked_ns: u64,
    /// Run periods in the interval (interpolated between the readings
    /// that carry them, so a stay's sum is exact where readings bracket
    /// it); `None` without two readings.
    runs: Option<u64>,
    /// Voluntary switches in the interval, likewise.
    voluntary: Option<u64>,
    /// Unclamped run-queue wait (`wait_ns` is cut to what the interval's
    /// wall time leaves; the kernel adds a wait only when it ends, so a
    /// reading lags, and the cut parts come back in a later interval):
    /// sums over many intervals are right where `wait_ns`'s overstate the
    /// blocked time.
    wait_raw_ns: u64,
}

/// A thread's intervals: CPU time from consecutive readings (never going
/// back), run-queue wait interpolated between the readings that carry it,
/// the rest of each interval's wall time blocked.
fn intervals_of(th: &Thread) -> Vec<Interval> {
    let waits: Vec<(u64, u64)> = {
        let mut v: Vec<(u64, u64)> = th
            .points
            .iter()
            .filter_map(|p| Some((p.t_ns, p.wait_ns?)))
            .collect();
        // Cumulative: never decreasing.
        for i in 1..v.len() {
            v[i].1 = v[i].1.max(v[i - 1].1);
        }
        v
    };
    // Cumulative counts, never decreasing; none without two readings.
    let counts = |f: fn(&Point) -> Option<u64>| -> Option<Vec<(u64, u64)>> {
        let mut v: Vec<(u64, u64)> = th
            .points
            .iter()
            .filter_map(|p| Some((p.t_ns, f(p)?)))
            .collect();
        for i in 1..v.len() {
            v[i].1 = v[i].1.max(v[i - 1].1);
        }
        (v.len() >= 2).then_some(v)
    };
    let runs = counts(|p| p.runs);
    let voluntary = counts(|p| p.voluntary);
    let between = |c: &Option<Vec<(u64, u64)>>, a: u64, b: u64| {
        c.as_ref()
            .map(|c| interpolate(c, b).saturating_sub(interpolate(c, a)))
    };
    let mut out = Vec::with_capacity(th.points.len());
    let mut df = None;
    let mut cpu_prev: Option<u64> = None;
    let mut prev_t = th.start_ns;
    for p in &th.points {
        let wall = p.t_ns - prev_t;
        let cpu = match (cpu_prev, p.cpu_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
        .min(wall);
        if let Some(c) = p.cpu_ns {
            cpu_prev = Some(cpu_prev.map_or(c, |a| a.max(c)));
        }
        let wait_raw = interpolate(&waits, p.t_ns).saturating_sub(interpolate(&waits, prev_t));
        let wait = wait_raw.min(wall - cpu);
        if wall > 0 {
            out.push(Interval {
                df,
                cpu_ns: cpu,
                wait_ns: wait,
                blocked_ns: wall - cpu - wait,
                runs: between(&runs, prev_t, p.t_ns),
                voluntary: between(&voluntary, prev_t, p.t_ns),
                wait_raw_ns: wait_raw,
            });
        }
        if let Some(next) = p.df {
            df = next;
        }
        prev_t = p.t_ns;
    }
    out
}

/// The caches and costs of the machine `cal` describes on `topology`, for
/// `plan`'s data: [`DfBenchParams::calibrated_machine`] for the whole
/// footprint, with the private cache capped at the footprint (module doc).
pub fn machine(plan: &ReplayPlan, topology: &Topology, cal: &Calibration) -> MachineConfig {
    let footprint: u64 = plan.df_bytes.iter().map(|b| b.div_ceil(64) * 64).sum();
    let as_bench = DfBenchParams {
        dfs: 1,
        df_bytes: footprint.max(64),
        ..DfBenchParams::default()
    };
    let mut m = as_bench.calibrated_machine(topology, cal);
    let cap = footprint.max(64 << 10).next_power_of_two();
    let g = m.private.geometry;
    if g.lines() * 64 > cap {
        m.private.geometry = CacheGeometry {
            sets: ((cap / 64 / u64::from(g.ways)).max(1)) as u32,
            ways: g.ways,
        };
    }
    m
}

/// The simulated machine of `params`: its topology (after checking the
/// shape).
pub fn topology(params: &ReplayParams) -> Result<Topology, ReplayError> {
    for (name, v) in [
        ("nodes", params.nodes),
        ("llcs", params.llcs),
        ("cores", params.cores),
        ("smt", params.smt),
    ] {
        if v == 0 {
            return Err(ReplayError::Param {
                name,
                value: 0,
                why: "must be at least 1",
            });
        }
    }
    let cpus = u64::from(params.nodes) * u64::from(params.llcs) * u64::from(params.cores);
    let cpus = cpus * u64::from(params.smt);
    if cpus > 4096 {
        return Err(ReplayError::Param {
            name: "cpus",
            value: cpus,
            why: "at most 4096 CPUs",
        });
    }
    Ok(Topology::test(
        params.nodes,
        params.llcs,
        params.cores,
        params.smt,
    ))
}

/// Replays `plan` under `policy` on the machine of `params` priced by
/// `cal`. Independent of any other policy's run, so policies may run in
/// parallel; [`with_ratios`] then joins them.
pub fn run_policy(
    plan: &ReplayPlan,
    params: &ReplayParams,
    cal: &Calibration,
    policy: DfPolicy,
) -> Result<ReplayPolicyResult, ReplayError> {
    let topo = topology(params)?;
    let mcfg = machine(plan, &topo, cal);
    let s = plan.scale;
    let kernel = KernelModel {
        migration_cycles: cal.migration_cycles,
        balance_interval_cycles: ((KERNEL_BALANCE_NS / cal.cycle_ns * s) as u64).max(1000),
        slice_jitter_milli: params.slice_jitter_milli,
        ..KernelModel::default()
    };
    let base = policy.body_config();
    let cfg = body::BodyConfig {
        quantum_cycles: ((cal.quantum_cycles as f64 * s) as u64).max(1000),
        balance_interval_cycles: ((plan.balance_interval_ns as f64 / cal.cycle_ns * s) as u64)
            .max(1000),
        kernel,
        // A ring's hand-off onto another, idle CPU waits the wake-up's
        // latency, as in `bench chat`; the CPU time it costs the waker
        // (`wake_other_cpu_cycles`) is left out: the recorded CPU time of
        // a thread already holds what its hand-offs to other CPUs cost it.
        wake_other_cycles: cal.wake_other_cycles,
        wake_other_cpu_cycles: 0,
        // The engine hears of a block when the runtime's idle step would
        // have: after a thread has been still for its passes and time.
        engine_block_after_cycles: ((runtime_idle_ns(plan.balance_interval_ns) as f64
            / cal.cycle_ns
            * s) as u64)
            .max(1),
        ..base
    };
    let report = body::run(&topo, &mcfg, plan.workload.clone(), cfg, params.seed)?;
    let predicted_ns = (report.makespan_cycles as f64 * cal.cycle_ns / s).round() as u64;
    Ok(ReplayPolicyResult {
        policy,
        runtime_vs_vanilla_milli: None,
        predicted_ns,
        report,
    })
}

/// The replay's result from its policies' runs: each one's time relative
/// to vanilla's, when vanilla ran.
pub fn with_ratios(
    plan: &ReplayPlan,
    params: &ReplayParams,
    mut results: Vec<ReplayPolicyResult>,
) -> ReplayResult {
    if let Some(v) = results
        .iter()
        .find(|r| r.policy == DfPolicy::Vanilla)
        .map(|r| r.report.makespan_cycles)
    {
        for r in &mut results {
            r.runtime_vs_vanilla_milli = Some(r.report.makespan_cycles * 1000 / v.max(1));
        }
    }
    let cpus = results.first().map_or(0, |r| r.report.cpus);
    ReplayResult {
        params: params.clone(),
        cpus,
        plan: plan.clone(),
        results,
    }
}

/// Replays `plan` under each of `policies` (in that order) on the machine
/// of `params` priced by `cal`, calling `progress` after each.
pub fn run(
    plan: &ReplayPlan,
    params: &ReplayParams,
    cal: &Calibration,
    policies: &[DfPolicy],
    mut progress: impl FnMut(&ReplayPolicyResult),
) -> Result<ReplayResult, ReplayError> {
    topology(params)?;
    let mut results = Vec::with_capacity(policies.len());
    for &policy in policies {
        let r = run_policy(plan, params, cal, policy)?;
        progress(&r);
        results.push(r);
    }
    Ok(with_ratios(plan, params, results))
}

mod partners;
pub use partners::Ring;

#[cfg(test)]
mod tests;
