//! The simulated machine body: virtual CPUs that run task programs through
//! the cache machine, with placement from a policy and dispatch from
//! [`dfsched_core::dispatch::runqueue`].
//!
//! ```text
//!   Arrive/Wake ──► placement ──► target CPUs ──► RunQueues (core) ──► pick
//!        ▲         (vanilla, Engine,               per CPU              │
//!        │          oracle, split)                                      ▼
//!   Sleep bursts ◄───────────── ChunkDone(cpu) ◄── run bursts on Machine
//! ```
//!
//! Time is in CPU cycles (one tick = one cycle). A CPU runs its task in
//! *chunks* of at most [`BodyConfig::chunk_cycles`], so that the accesses of
//! different CPUs interleave finely in the shared caches and the coherence
//! directory; a chunk also ends at the end of the task's slice and just
//! before a control burst (`Sleep`, `Switch`, `Exit`), which is carried out
//! at the chunk's end time. A CPU that changes task pays the machine's
//! context-switch cost. An idle CPU steals a waiting task that may run on
//! it from the busiest CPU (the kernel's idle balance); an Engine-placed
//! task may run only on its home, so a steal never breaks a group off its
//! home. Within a task's target, the kernel's own placement (wake-up and
//! fork placement, periodic balancing, migration cost, unaligned slices)
//! is [`kernel`]'s model, [`BodyConfig::kernel`].
//!
//! A wake-up, in the order a Linux machine runs it:
//!
//! ```text
//!  Signal / end of a Sleep
//!   1. the kernel places the wakee, inside the target the placement set
//!      before the wake (the affinity mask the runtime last wrote): its last
//!      CPU if idle, an idle CPU, the waker's or its last ([`kernel::place`])
//!   2. onto another, idle CPU (a Signal): the wakee is that CPU's at once
//!      (counted in its load, as on the kernel's wake list, so no other
//!      placement takes the CPU for idle) and starts there after
//!      [`BodyConfig::wake_other_cycles`]
//!   3. the Engine hears of the wake (if it heard of the block) after the
//!      kernel placed it: at once, or, when the body plays the Linux
//!      runtime's idle detection ([`BodyConfig::engine_block_after_cycles`]
//!      above 0), at its next balancer pass, which is when the runtime
//!      notices; a `Place` it then makes moves the task as the runtime's
//!      `sched_setaffinity` would
//! ```
//!
//! Placement ([`Placement`]):
//! - `Vanilla`: the kernel alone ([`kernel`]: a task goes to its last CPU
//!   if idle, else an idle CPU, else its last CPU or, new, the least
//!   loaded); hints are ignored.
//! - `Engine`: [`dfsched_core::Engine`] gets `AppNew` (one application per
//!   process of the workload), `TaskNew`, `Hint`, `Block`, `Wake`, `Exit`
//!   and periodic `Balance` events; its `Place` decisions set each task's
//!   target, and the body moves waiting tasks into it (a running task moves
//!   at the end of its chunk). The same code the Linux runtime uses; its
//!   [`Config::policy`] decides what becomes of tasks with no DF (co-thread
//!   grouping). With [`BodyConfig::hints`] off, DF switches change what a
//!   task touches but are not told to the engine: an unmodified program.
//! - `Oracle`: each DF pinned to one CPU, DFs spread by their task counts
//!   (largest first onto the least-loaded CPU): the best static placement
//!   for the known assignment.
//! - `Split`: the tasks of each DF dealt round robin over all CPUs: every
//!   DF spread over the machine, the worst case.
//!
//! Invariants: a task runs only on a CPU of its target; a task is running,
//! waiting in exactly one run queue, on its way to one CPU (woken there,
//! counted in its load), blocked, not yet arrived, or done; the same
//! workload, configuration and seed give the same [`BodyReport`].

use crate::cache::{MissCounts, Owner};
use crate::engine::{Context, Model, Simulation};
use crate::error::ConfigError as MachineConfigError;
use crate::machine::{AccessKind, CpuMemStats, Machine, MachineConfig};
use crate::program::{Burst, Workload, WorkloadError};
use crate::time::Ticks;
use dfsched_core::dispatch::runqueue::{RqError, RqPolicy, RqStats, RunQueues};
use dfsched_core::{
    AppId, Config, CoreError, CpuId, CpuSet, Decision, DfId, Engine, Event, GroupId, Nanos, Stats,
    TaskId, Topology,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

mod channels;
pub mod kernel;
use channels::Channels;
pub use kernel::KernelModel;

/// Where tasks may run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Kernel-like: fork balance, wake on the last CPU, idle steal.
    Vanilla,
    /// dfsched's data-affinity placement, from [`dfsched_core::Engine`].
    Engine(Config),
    /// Each DF pinned to one CPU, balanced by task counts.
    Oracle,
    /// Each DF's tasks spread round robin over every CPU.
    Split,
}

impl Placement {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Vanilla => "vanilla",
            Placement::Engine(_) => "engine",
            Placement::Oracle => "oracle",
            Placement::Split => "split",
        }
    }
}

/// How the body runs a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyConfig {
    /// Where tasks may run.
    pub placement: Placement,
    /// Which waiting task a CPU runs next.
    pub dispatch: RqPolicy,
    /// A task's quota per turn, in cycles. Default 300,000 (100 µs at
    /// 3 GHz; short, so that a small simulated run still sees many turns).
    pub quantum_cycles: u64,
    /// Longest stretch a CPU runs before the others catch up, in cycles.
    /// Default 2,000.
    pub chunk_cycles: u64,
    /// Cycles between two balancer passes of the Engine. Default 3,000,000
    /// (1 ms at 3 GHz).
    pub balance_interval_cycles: u64,
    /// Whether DF switches reach the Engine as hints. Default true; false
    /// runs the workload as an unmodified program would (the Engine sees
    /// its threads, never their DFs).
    pub hints: bool,
    /// The kernel's own placement within each task's target.
    #[serde(default)]
    pub kernel: KernelModel,
    /// Latency of a wake-up ([`Burst::Signal`]) of a task the kernel
    /// places on another CPU that is idle (an IPI and the CPU's way out of
    /// idle), cycles. Default 0.
    #[serde(default)]
    pub wake_other_cycles: u64,
    /// CPU time a wake-up ([`Burst::Signal`]) onto another, idle CPU costs
    /// the waker beyond one on its own CPU (the IPI that brings the CPU
    /// out of idle; on a VM guest an exit to the hypervisor), cycles: the
    /// waker's CPU works on it before the waker goes on, and the wakee's
    /// latency ([`BodyConfig::wake_other_cycles`]) starts after it. Default
    /// 0.
    ///
    /// Not charged onto a busy CPU: there Linux interrupts the CPU only
    /// when the wakee is to preempt the task running there, and the body
    /// queues a wakee without preempting (its run queues have no wake-up
    /// preemption), so it sends no IPI. On the 2-vCPU KVM guest such an
    /// IPI costs the same (28–30 µs of CPU time per leg of a pipe
    /// ping-pong across CPUs with a spinning thread on each, which the
    /// wakee preempts); [`BodyReport::cross_cpu_wakes`] counts the
    /// wake-ups that would be candidates.
    #[serde(default)]
    pub wake_other_cpu_cycles: u64,
    /// How long a task must stay blocked before the Engine hears of it,
    /// cycles; 0 (default): at once. The Linux runtime sees a block only
    /// through its idle step (no CPU time for ≥ 2 balancer passes and
    /// ≥ 200 ms), so a thread that blocks for microseconds at a time stays
    /// runnable in its engine's eyes; a replay of a recorded run sets this
    /// to that delay so that the simulated engine sees what the runtime
    /// saw. A block shorter than this is never told, nor is its wake.
    #[serde(default)]
    pub engine_block_after_cycles: u64,
    /// Under [`RqPolicy::DataAffinity`], the most picks a group gets on a
    /// CPU in one turn (`RunQueues::set_group_quota`): the sched_ext body's
    /// `--quota`. 0 (default): the paper's rule, a turn lasts until each
    /// of the group's waiting tasks there used its quantum.
    #[serde(default)]
    pub group_quota: u32,
}

impl BodyConfig {
    /// Defaults for `placement` and `dispatch`.
    pub fn new(placement: Placement, dispatch: RqPolicy) -> BodyConfig {
        BodyConfig {
            placement,
            dispatch,
            quantum_cycles: 300_000,
            chunk_cycles: 2_000,
            balance_interval_cycles: 3_000_000,
            hints: true,
            kernel: KernelModel::default(),
            wake_other_cycles: 0,
            wake_other_cpu_cycles: 0,
            engine_block_after_cycles: 0,
            group_quota: 0,
        }
    }
}

/// Why a run could not be done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BodyError {
    /// The workload is malformed.
    #[error("workload: {0}")]
    Workload(#[from] WorkloadError),
    /// The machine's caches are malformed.
    #[error("machine: {0}")]
    Machine(#[from] MachineConfigError),
    /// The Engine's configuration was refused.
    #[error("engine configuration: {0}")]
    EngineConfig(#[from] dfsched_core::ConfigError),
    /// The run queues were refused (a zero quantum).
    #[error("run queues: {0}")]
    RunQueue(#[from] RqError),
    /// A zero chunk or balance interval.
    #[error("{0} must be at least 1 cycle")]
    Zero(&'static str),
    /// A task may run on no CPU of this machine.
    #[error("task {task}: its allowed CPUs {allowed} are not on this machine")]
    NotOnMachine {
        /// Index of the task.
        task: usize,
        /// Its allowed set.
        allowed: CpuSet,
    },
    /// The Engine refused an event: a bug of the body or the engine.
    #[error("the engine refused an event: {0}")]
    Engine(#[from] CoreError),
}

/// What one run did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BodyReport {
    /// Placement name.
    pub placement: String,
    /// Dispatch policy.
    pub dispatch: RqPolicy,
    /// CPUs.
    pub cpus: usize,
    /// Tasks.
    pub tasks: usize,
    /// When the last task exited, in cycles: the run time (background
    /// tasks left out).
    pub makespan_cycles: u64,
    /// Cycles CPUs spent running tasks (context switches included).
    pub busy_cycles: u64,
    /// Private-cache misses by kind, over all CPUs.
    pub misses: MissCounts,
    /// Every counter of the memory side, over all CPUs.
    pub memory: CpuMemStats,
    /// Times a task started on a CPU other than the one it last ran on.
    pub migrations: u64,
    /// Picks that changed the CPU's batch (a group change under data
    /// affinity).
    pub batch_changes: u64,
    /// Run-queue counters.
    pub runqueue: RqStats,
    /// Engine counters (Engine placement only).
    pub engine: Option<Stats>,
    /// Where each process's threads ran, by process number.
    pub processes: Vec<ProcessReport>,
    /// Events the simulation handled.
    pub events: u64,
    /// Wake-ups ([`Burst::Signal`]) that went to another, idle CPU and
    /// paid [`BodyConfig::wake_other_cycles`].
    pub remote_wakes: u64,
    /// Wake-ups ([`Burst::Signal`]) that put the wakee on a CPU other than
    /// its waker's, idle or busy (those onto an idle CPU are
    /// `remote_wakes`).
    pub cross_cpu_wakes: u64,
    /// Blocks the Engine was told of (Engine placement; with
    /// [`BodyConfig::engine_block_after_cycles`], only those that lasted
    /// that long).
    pub engine_blocks: u64,
    /// Wakes the Engine was told of (of the blocks it was told of; with
    /// [`BodyConfig::engine_block_after_cycles`], at the balancer pass
    /// after the wake).
    pub engine_wakes: u64,
}

/// Where the threads of one process ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessReport {
    /// The process ([`crate::program::TaskSpec::process`]).
    pub process: u32,
    /// Its threads.
    pub threads: usize,
    /// Cycles its threads ran (context switches excluded) on each CPU
    /// where they ran at all, in CPU order.
    pub cycles_by_cpu: Vec<(CpuId, u64)>,
}

impl ProcessReport {
    /// The share of its cycles, in thousandths, on the CPU where it ran
    /// most (0 when it never ran).
    pub fn top_cpu_milli(&self) -> u64 {
        let total: u64 = self.cycles_by_cpu.iter().map(|x| x.1).sum();
        let top = self.cycles_by_cpu.iter().map(|x| x.1).max().unwrap_or(0);
        (top * 1000).checked_div(total).unwrap_or(0)
    }

    /// The CPUs where it ran.
    pub fn cpus(&self) -> CpuSet {
        self.cycles_by_cpu.iter().map(|x| x.0).collect()
    }
}

/// A task's life in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Its start time has not come.
    Unborn,
    /// Waiting in a run queue.
    Ready,
    /// On a CPU.
    Running,
    /// Sleeping.
    Blocked,
    /// Woken onto another CPU that was idle: counted in that CPU's load,
    /// it starts there when the wake-up's latency is over
    /// ([`Ev::WokenOn`]).
    Waking,
    /// Exited.
    Done,
}

/// A task's progress.
#[derive(Clone, Debug)]
struct Task {
    /// Where it is in its life.
    phase: Phase,
    /// Next burst.
    pc: usize,
    /// What is left of the current burst (cycles or lines); 0: not begun.
    left: u64,
    /// Current DF.
    df: Option<DfId>,
    /// Next line of the current DF to touch.
    cursor: u64,
    /// Allowed CPUs (the machine's CPUs when unrestricted).
    allowed: CpuSet,
    /// Where it may run now; `None`: its allowed set.
    target: Option<CpuSet>,
    /// The CPU it last ran on.
    last_cpu: Option<CpuId>,
    /// Its group, for batching (Engine: the priority group; static
    /// placements: its DF).
    group: Option<GroupId>,
    /// Its blocks so far: a pending [`Ev::BlockSeen`] of an earlier block
    /// is stale.
    blocks: u32,
    /// Whether the Engine was told of its current block (so is to be told
    /// of the wake).
    engine_blocked: bool,
    /// Whether it woke from a block the Engine was told of and the Engine
    /// is yet to hear of the wake (at its next pass).
    wake_untold: bool,
}

/// A CPU's state.
#[derive(Clone, Debug, Default)]
struct Cpu {
    /// The task on it and the cycles left of its slice.
    running: Option<(usize, u64)>,
    /// The last task it ran, for context-switch charges.
    last_task: Option<usize>,
    /// Whether it has started a slice yet (its first is cut short when
    /// slices are unaligned).
    started: bool,
}

/// The body's events.
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// Task `i` starts.
    Arrive(u32),
    /// The chunk running on CPU index `c` ends.
    ChunkDone(u32),
    /// Task `i` wakes from a sleep.
    Wake(u32),
    /// Task `i`, woken onto CPU index `c` when it was idle, gets there
    /// (the wake-up's latency is over).
    WokenOn(u32, u32),
    /// Task `i`'s block number `n` has lasted
    /// [`BodyConfig::engine_block_after_cycles`]: the Engine hears of it if
    /// the task still sleeps in it.
    BlockSeen(u32, u32),
    /// A balancer pass of the Engine.
    Balance,
    /// A periodic balance pass of the kernel model.
    KernelBalance,
}

/// The body as a [`Model`].
struct Body {
    cfg: BodyConfig,
    work: Workload,
    machine: Machine,
    engine: Option<Engine>,
    rq: RunQueues,
    cpu_ids: Vec<CpuId>,
    /// CPU number → index into `cpus`.
    slot: Vec<u32>,
    cpus: Vec<Cpu>,
    /// Tasks running or waiting per CPU index.
    load: Vec<u32>,
    tasks: Vec<Task>,
    /// First byte and lines of each DF.
    layout: Vec<(u64, u64)>,
    /// Static placements: DF → CPU index (oracle) or DF → next CPU index
    /// (split).
    static_cpu: Vec<u32>,
    line_bytes: u64,
    alive: usize,
    /// Tasks not [`crate::program::TaskSpec::background`] still to exit:
    /// the run stops when none is left.
    foreground: usize,
    makespan: u64,
    busy: u64,
    migrations: u64,
    batch_changes: u64,
    decisions: Vec<Decision>,
    error: Option<BodyError>,
    /// Cycles run per process (index) and CPU (index).
    proc_cycles: Vec<Vec<u64>>,
    /// The channels' tokens and waiting tasks.
    channels: Channels,
    /// Wake-ups that crossed to an idle CPU (and paid the latency).
    remote_wakes: u64,
    /// Wake-ups that crossed to another CPU.
    cross_cpu_wakes: u64,
    /// Blocks told to the Engine.
    engine_blocks: u64,
    /// Wakes told to the Engine.
    engine_wakes: u64,
    /// Tasks whose wake the Engine hears of at its next pass, in the
    /// order they woke.
    untold_wakes: Vec<usize>,
}

/// Runs `work` on `topology` with the caches of `machine`, placing and
/// dispatching by `cfg`. `seed` seeds the engine (the body itself draws no
/// random numbers, so the seed matters only to models that do).
pub fn run(
    topology: &Topology,
    machine: &MachineConfig,
    work: Workload,
    cfg: BodyConfig,
    seed: u64,
) -> Result<BodyReport, BodyError> {
    let body = Body::new(topology, machine, work, cfg)?;
    let mut sim = Simulation::new(body, seed);
    let _ = sim.run();
    let events = sim.stats().events_handled;
    let body = sim.into_model();
    if let Some(e) = body.error {
        return Err(e);
    }
    debug_assert_eq!(body.foreground, 0, "every task exits once the queue drains");
    Ok(BodyReport {
        placement: body.cfg.placement.name().to_string(),
        dispatch: body.cfg.dispatch,
        cpus: body.cpu_ids.len(),
        tasks: body.tasks.len(),
        makespan_cycles: body.makespan,
        busy_cycles: body.busy,
        misses: body.machine.total_stats().misses,
        memory: body.machine.total_stats(),
        migrations: body.migrations,
        batch_changes: body.batch_changes,
        runqueue: body.rq.stats(),
        engine: body.engine.as_ref().map(|e| e.stats().clone()),
        processes: body.process_reports(),
        events,
        remote_wakes: body.remote_wakes,
        cross_cpu_wakes: body.cross_cpu_wakes,
        engine_blocks: body.engine_blocks,
        engine_wakes: body.engine_wakes,
    })
}

impl Body {
    fn new(
        topology: &Topology,
        mcfg: &MachineConfig,
        work: Workload,
        cfg: BodyConfig,
    ) -> Result<Body, BodyError> {
        work.validate()?;
        if cfg.chunk_cycles == 0 {
            return Err(BodyError::Zero("chunk_cycles"));
        }
        if cfg.balance_interval_cycles == 0 {
            return Err(BodyError::Zero("balance_interval_cycles"));
        }
        let machine = Machine::new(topology, mcfg)?;
        let all = topology.cpus().clone();
        let cpu_ids: Vec<CpuId> = all.iter().collect();
        let mut slot = vec![u32::MAX; cpu_ids.last().map_or(0, |c| c.0 as usize + 1)];
        for (i, c) in cpu_ids.iter().enumerate() {
            slot[c.0 as usize] = i as u32;
        }
        let mut rq = RunQueues::new(cfg.dispatch, &all, Nanos(cfg.quantum_cycles))?;
        rq.set_group_quota(cfg.group_quota);
        let processes = work.tasks.iter().map(|t| t.process as usize + 1).max();
        let processes = processes.unwrap_or(1);
        let engine = match &cfg.placement {
            Placement::Engine(c) => {
                let mut e = Engine::new(topology.clone(), c.clone())?;
                let mut out = Vec::new();
                for p in 1..processes {
                    e.handle(Event::AppNew { app: app(p as u32) }, &mut out)?;
                }
                Some(e)
            }
            _ => None,
        };
        let mut tasks = Vec::with_capacity(work.tasks.len());
        for (i, t) in work.tasks.iter().enumerate() {
            let allowed = match &t.allowed {
                Some(a) => a.intersection(&all),
                None => all.clone(),
            };
            if allowed.is_empty() {
                return Err(BodyError::NotOnMachine {
                    task: i,
                    allowed: t.allowed.clone().unwrap_or_default(),
                });
            }
            tasks.push(Task {
                phase: Phase::Unborn,
                pc: 0,
                left: 0,
                df: None,
                cursor: 0,
                allowed,
                target: None,
                last_cpu: None,
                group: None,
                blocks: 0,
                engine_blocked: false,
                wake_untold: false,
            });
        }
        let static_cpu = match cfg.placement {
            Placement::Oracle => oracle_cpus(&work, cpu_ids.len()),
            Placement::Split => (0..work.dfs.len() as u32)
                .map(|d| d % cpu_ids.len() as u32)
                .collect(),
            _ => Vec::new(),
        };
        let line_bytes = machine.line_bytes();
        let channels = work.channels();
        let proc_cycles = vec![vec![0; cpu_ids.len()]; processes];
        Ok(Body {
            layout: work.layout(line_bytes),
            alive: tasks.len(),
            foreground: work.tasks.iter().filter(|t| !t.background).count(),
            cpus: vec![Cpu::default(); cpu_ids.len()],
            load: vec![0; cpu_ids.len()],
            cfg,
            work,
            machine,
            engine,
            rq,
            cpu_ids,
            slot,
            tasks,
            static_cpu,
            line_bytes,
            makespan: 0,
            busy: 0,
            migrations: 0,
            batch_changes: 0,
            decisions: Vec::new(),
            error: None,
            proc_cycles,
            channels: Channels::new(channels),
            remote_wakes: 0,
            cross_cpu_wakes: 0,
            engine_blocks: 0,
            engine_wakes: 0,
            untold_wakes: Vec::new(),
        })
    }

    /// Where each process's threads ran.
    fn process_reports(&self) -> Vec<ProcessReport> {
        let mut threads = vec![0; self.proc_cycles.len()];
        for t in &self.work.tasks {
            threads[t.process as usize] += 1;
        }
        self.proc_cycles
            .iter()
            .enumerate()
            .map(|(p, by_cpu)| ProcessReport {
                process: p as u32,
                threads: threads[p],
                cycles_by_cpu: by_cpu
                    .iter()
                    .enumerate()
                    .filter(|x| *x.1 > 0)
                    .map(|(c, &n)| (self.cpu_ids[c], n))
                    .collect(),
            })
            .collect()
    }

    fn tid(i: usize) -> TaskId {
        TaskId(i as u64 + 1)
    }

    fn idx(&self, cpu: CpuId) -> usize {
        self.slot[cpu.0 as usize] as usize
    }

    /// Feeds the engine (if any) and applies its decisions.
    fn engine_event(&mut self, ev: Event, ctx: &mut Context<'_, Ev>) {
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        self.decisions.clear();
        if let Err(e) = engine.handle(ev, &mut self.decisions) {
            self.fail(e.into(), ctx);
            return;
        }
        let decisions = std::mem::take(&mut self.decisions);
        for d in &decisions {
            match d {
                Decision::Place { task, cpus } => {
                    let i = (task.0 - 1) as usize;
                    self.tasks[i].target = Some(cpus.clone());
                    self.refresh_group(i);
                    if self.tasks[i].phase == Phase::Ready {
                        let at = self.rq.queued_on(*task).expect("ready tasks wait");
                        if !cpus.contains(at) {
                            self.rq.remove(*task);
                            let a = self.idx(at);
                            self.load[a] -= 1;
                            self.tasks[i].phase = Phase::Blocked;
                            self.make_ready(i, ctx);
                        }
                    }
                }
                Decision::GroupSplit { moved, .. } => {
                    for task in moved {
                        let i = (task.0 - 1) as usize;
                        self.refresh_group(i);
                        if let Some(at) = self.rq.remove(*task) {
                            let g = self.tasks[i].group;
                            self.rq.enqueue(at, *task, g).expect("just removed");
                        }
                    }
                }
                _ => {}
            }
        }
        self.decisions = decisions;
    }

    fn refresh_group(&mut self, i: usize) {
        if let Some(e) = &self.engine {
            self.tasks[i].group = e.task(Self::tid(i)).and_then(|v| v.group);
        }
    }

    fn fail(&mut self, e: BodyError, ctx: &mut Context<'_, Ev>) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        ctx.stop();
    }

    /// The least-loaded CPU index of `set` (ties → lowest CPU).
    fn least_loaded(&self, set: &CpuSet) -> usize {
        set.iter()
            .map(|c| self.idx(c))
            .min_by_key(|&c| (self.load[c], c))
            .expect("targets are never empty")
    }

    /// Where task `i` may run now.
    fn target_of(&self, i: usize) -> &CpuSet {
        let t = &self.tasks[i];
        t.target.as_ref().unwrap_or(&t.allowed)
    }

    /// Task `i` becomes ready: choose its CPU, queue it, start the CPU if
    /// idle.
    fn make_ready(&mut self, i: usize, ctx: &mut Context<'_, Ev>) {
        let c = self.choose_cpu(i, None, ctx);
        self.enqueue_on(i, c, ctx);
    }

    /// Task `i` becomes ready on CPU index `c`: queue it there, start the
    /// CPU if idle.
    fn enqueue_on(&mut self, i: usize, c: usize, ctx: &mut Context<'_, Ev>) {
        self.tasks[i].phase = Phase::Ready;
        let g = self.tasks[i].group;
        if let Err(e) = self.rq.enqueue(self.cpu_ids[c], Self::tid(i), g) {
            self.fail(e.into(), ctx);
            return;
        }
        self.load[c] += 1;
        if self.cpus[c].running.is_none() {
            self.dispatch(c, ctx);
        }
    }

    /// The CPU index task `i` goes to when it becomes runnable now: the
    /// one CPU of its target, or the kernel model's choice (`waker`: the
    /// CPU index of the task that woke it, if one did).
    fn choose_cpu(&mut self, i: usize, waker: Option<usize>, ctx: &mut Context<'_, Ev>) -> usize {
        let target = self.target_of(i);
        if target.len() == 1 {
            self.least_loaded(target)
        } else {
            let cands: Vec<kernel::CpuView> = target
                .iter()
                .map(|c| {
                    let idx = self.idx(c);
                    kernel::CpuView {
                        idx,
                        load: self.load[idx],
                    }
                })
                .collect();
            let last = self.tasks[i]
                .last_cpu
                .filter(|l| target.contains(*l))
                .map(|l| self.idx(l));
            let waker = waker.filter(|w| target.contains(self.cpu_ids[*w]));
            kernel::place(&self.cfg.kernel, &cands, last, waker, ctx.rng())
        }
    }

    /// Sets the static target of task `i` for its DF.
    fn static_place(&mut self, i: usize) {
        let Some(df) = self.tasks[i].df else {
            self.tasks[i].target = None;
            self.tasks[i].group = None;
            return;
        };
        let d = (df.0 - 1) as usize;
        let c = match self.cfg.placement {
            Placement::Oracle => self.static_cpu[d],
            Placement::Split => {
                let c = self.static_cpu[d];
                self.static_cpu[d] = (c + 1) % self.cpu_ids.len() as u32;
                c
            }
            _ => return,
        };
        let cpu = self.cpu_ids[c as usize];
        let t = &mut self.tasks[i];
        t.target = Some(if t.allowed.contains(cpu) {
            CpuSet::single(cpu)
        } else {
            t.allowed.clone()
        });
        t.group = Some(GroupId(df.0));
    }

    /// Task `i` has just blocked (a sleep or a wait): the Engine hears of
    /// it now, or once it has lasted
    /// [`BodyConfig::engine_block_after_cycles`].
    fn blocked(&mut self, i: usize, ctx: &mut Context<'_, Ev>) {
        let t = &mut self.tasks[i];
        t.blocks = t.blocks.wrapping_add(1);
        if self.cfg.engine_block_after_cycles == 0 {
            t.engine_blocked = true;
            self.engine_blocks += u64::from(self.engine.is_some());
            self.engine_event(Event::Block { task: Self::tid(i) }, ctx);
        } else if self.engine.is_some() {
            let n = t.blocks;
            ctx.schedule_in(
                Ticks(self.cfg.engine_block_after_cycles),
                Ev::BlockSeen(i as u32, n),
            );
        }
    }

    /// Task `i` has woken and the kernel has placed it: the Engine hears
    /// of it if it heard of the block, at once or, when the body plays the
    /// runtime's idle detection, at its next pass ([`Self::tell_wakes`]).
    fn woken(&mut self, i: usize, ctx: &mut Context<'_, Ev>) {
        // A pending BlockSeen of this block is stale from now.
        let t = &mut self.tasks[i];
        t.blocks = t.blocks.wrapping_add(1);
        if !t.engine_blocked {
            return;
        }
        if self.cfg.engine_block_after_cycles == 0 {
            t.engine_blocked = false;
            self.engine_wakes += 1;
            self.engine_event(Event::Wake { task: Self::tid(i) }, ctx);
        } else if !t.wake_untold {
            t.wake_untold = true;
            self.untold_wakes.push(i);
        }
    }

    /// A balancer pass of the runtime: it notices the wakes since the last
    /// one (a thread it held blocked has used CPU time), before the pass.
    /// A task that has blocked again since is, to the runtime, a thread
    /// that must stay still for its idle step anew.
    fn tell_wakes(&mut self, ctx: &mut Context<'_, Ev>) {
        for i in std::mem::take(&mut self.untold_wakes) {
            let t = &mut self.tasks[i];
            t.wake_untold = false;
            if t.phase == Phase::Done || !std::mem::take(&mut t.engine_blocked) {
                continue;
            }
            let again = t.phase == Phase::Blocked;
            let n = t.blocks;
            self.engine_wakes += 1;
            self.engine_event(Event::Wake { task: Self::tid(i) }, ctx);
            if again {
                ctx.schedule_in(
                    Ticks(self.cfg.engine_block_after_cycles),
                    Ev::BlockSeen(i as u32, n),
                );
            }
        }
    }

    /// A token on channel `chan`, put there by the task on CPU index `c`:
    /// the first task waiting there takes it and wakes. The kernel places
    /// it first, within its current target; on `c` or a busy CPU it is
    /// queued at once, on another, idle CPU it is that CPU's at once and
    /// starts there after [`BodyConfig::wake_other_cpu_cycles`] (the
    /// waker's work on it) and [`BodyConfig::wake_other_cycles`]. The
    /// Engine hears of the wake after ([`Self::woken`]). Returns the cycles
    /// the waker's CPU spends on the wake-up.
    #[must_use]
    fn signal(&mut self, chan: usize, c: usize, ctx: &mut Context<'_, Ev>) -> u64 {
        let Some(w) = self.channels.put(chan) else {
            return 0;
        };
        let to = self.choose_cpu(w, Some(c), ctx);
        let remote_idle = to != c && self.load[to] == 0 && self.cpus[to].running.is_none();
        self.cross_cpu_wakes += u64::from(to != c);
        let (spent, latency) = (self.cfg.wake_other_cpu_cycles, self.cfg.wake_other_cycles);
        let spent = if remote_idle && spent + latency > 0 {
            self.remote_wakes += 1;
            // The kernel has put the wakee on `to`'s wake list: `to` is no
            // longer idle to any other placement while it comes out of
            // idle, and the wakee starts there.
            self.tasks[w].phase = Phase::Waking;
            self.load[to] += 1;
            ctx.schedule_in(Ticks(spent + latency), Ev::WokenOn(w as u32, to as u32));
            spent
        } else {
            self.enqueue_on(w, to, ctx);
            0
        };
        self.woken(w, ctx);
        spent
    }

    /// The kernel model's periodic balance (step 3 of [`kernel`]): while
    /// the busiest and the least-loaded CPU differ by two or more runnable
    /// tasks, the least loaded takes a waiting task that may run on it.
    fn kernel_balance(&mut self, ctx: &mut Context<'_, Ev>) {
        for _ in 0..self.cpu_ids.len() {
            let (Some(max), Some(min)) = (
                (0..self.load.len()).max_by_key(|&c| (self.load[c], std::cmp::Reverse(c))),
                (0..self.load.len()).min_by_key(|&c| (self.load[c], c)),
            ) else {
                return;
            };
            if self.load[max] < self.load[min] + 2 {
                return;
            }
            let cpu = self.cpu_ids[min];
            let tasks = &self.tasks;
            // The run queues give up a waiting task of the CPU with the
            // most waiting that may run on `cpu`.
            let stolen = self
                .rq
                .steal_for(cpu, 1, |t, to| {
                    let task = &tasks[(t.0 - 1) as usize];
                    task.target.as_ref().unwrap_or(&task.allowed).contains(to)
                })
                .expect("known CPU");
            let Some((_, from)) = stolen else {
                return;
            };
            let f = self.idx(from);
            self.load[f] -= 1;
            self.load[min] += 1;
            if self.cpus[min].running.is_none() {
                self.dispatch(min, ctx);
            }
        }
    }

    /// CPU index `c` is free: run the next task, stealing one if none
    /// waits.
    fn dispatch(&mut self, c: usize, ctx: &mut Context<'_, Ev>) {
        let cpu = self.cpu_ids[c];
        let mut pick = self.rq.pick(cpu).expect("known CPU");
        if pick.is_none() {
            let tasks = &self.tasks;
            let slot = &self.slot;
            let stolen = self
                .rq
                .steal_for(cpu, 1, |t, to| {
                    let task = &tasks[(t.0 - 1) as usize];
                    task.target.as_ref().unwrap_or(&task.allowed).contains(to)
                })
                .expect("known CPU");
            if let Some((_, from)) = stolen {
                self.load[slot[from.0 as usize] as usize] -= 1;
                self.load[c] += 1;
                pick = self.rq.pick(cpu).expect("known CPU");
            }
        }
        let Some(p) = pick else {
            return;
        };
        let i = (p.task.0 - 1) as usize;
        debug_assert!(self.target_of(i).contains(cpu), "runs only on its target");
        if p.new_batch {
            self.batch_changes += 1;
        }
        let mut cycles = 0;
        if self.cpus[c].last_task != Some(i) {
            cycles += self.machine.context_switch(cpu).expect("known CPU").0;
        }
        if self.tasks[i].last_cpu.is_some_and(|l| l != cpu) {
            self.migrations += 1;
            cycles += self.cfg.kernel.migration_cycles;
        }
        let mut slice = kernel::slice(&self.cfg.kernel, p.slice.0, ctx.rng());
        if !self.cpus[c].started {
            self.cpus[c].started = true;
            if self.cfg.kernel.unaligned_slices {
                // A seeded fraction in (0, 1] of the first slice.
                slice = 1 + ctx.rng().below(slice.max(1));
            }
        }
        self.tasks[i].last_cpu = Some(cpu);
        self.tasks[i].phase = Phase::Running;
        self.cpus[c].running = Some((i, slice));
        self.cpus[c].last_task = Some(i);
        self.run_chunk(c, cycles, ctx);
    }

    /// Runs the task on CPU index `c` for one chunk (after `extra` cycles
    /// of switching) and schedules the chunk's end.
    fn run_chunk(&mut self, c: usize, extra: u64, ctx: &mut Context<'_, Ev>) {
        let (i, slice) = self.cpus[c].running.expect("a task runs");
        let cpu = self.cpu_ids[c];
        let budget = self.cfg.chunk_cycles.min(slice).max(1);
        let mut used = 0u64;
        while used < budget {
            let t = &mut self.tasks[i];
            let Some(&burst) = self.work.tasks[i].program.get(t.pc) else {
                break; // the end: an implicit Exit
            };
            match burst {
                Burst::Compute { cycles } => {
                    if t.left == 0 {
                        t.left = cycles;
                    }
                    let n = t.left.min(budget - used);
                    used += n;
                    t.left -= n;
                    if t.left == 0 {
                        t.pc += 1;
                    }
                }
                Burst::Read { lines } | Burst::Write { lines } => {
                    let kind = if matches!(burst, Burst::Read { .. }) {
                        AccessKind::Read
                    } else {
                        AccessKind::Write
                    };
                    if t.left == 0 {
                        t.left = lines;
                    }
                    let df = t.df.expect("validated: accesses have a DF");
                    let (base, n_lines) = self.layout[(df.0 - 1) as usize];
                    while t.left > 0 && used < budget {
                        let addr = base + t.cursor * self.line_bytes;
                        t.cursor = (t.cursor + 1) % n_lines;
                        t.left -= 1;
                        let out = self
                            .machine
                            .access(cpu, addr, kind, Owner(df.0))
                            .expect("known CPU");
                        used += out.cycles.0;
                    }
                    if t.left == 0 {
                        t.pc += 1;
                    }
                }
                // Zero-length bursts cost nothing.
                Burst::Sleep { cycles: 0 } => t.pc += 1,
                Burst::Sleep { .. }
                | Burst::Switch { .. }
                | Burst::Exit
                | Burst::Wait { .. }
                | Burst::Signal { .. } => break,
            }
        }
        let (_, slice) = self.cpus[c].running.as_mut().expect("a task runs");
        *slice = slice.saturating_sub(used);
        self.proc_cycles[self.work.tasks[i].process as usize][c] += used;
        self.busy += used + extra;
        ctx.schedule_in(Ticks(used + extra), Ev::ChunkDone(c as u32));
    }

    /// The chunk on CPU index `c` ended: carry out a control burst, or
    /// preempt at the end of the slice, or run on.
    fn chunk_done(&mut self, c: usize, ctx: &mut Context<'_, Ev>) {
        let (i, slice) = self.cpus[c].running.expect("a task runs");
        let cpu = self.cpu_ids[c];
        let burst = self.work.tasks[i].program.get(self.tasks[i].pc).copied();
        // Channel bursts that need not stop the task are carried out here;
        // the task then runs on.
        match burst {
            Some(Burst::Signal { chan }) => {
                self.tasks[i].pc += 1;
                let spent = self.signal(chan as usize, c, ctx);
                if spent == 0 {
                    return self.chunk_done(c, ctx);
                }
                // The waker's CPU works on the wake-up before the waker
                // goes on: a chunk of it, out of the waker's slice.
                let (_, slice) = self.cpus[c].running.as_mut().expect("a task runs");
                *slice = slice.saturating_sub(spent);
                self.proc_cycles[self.work.tasks[i].process as usize][c] += spent;
                self.busy += spent;
                ctx.schedule_in(Ticks(spent), Ev::ChunkDone(c as u32));
                return;
            }
            Some(Burst::Wait { chan }) if self.channels.try_take(chan as usize) => {
                self.tasks[i].pc += 1;
                return self.chunk_done(c, ctx);
            }
            _ => {}
        }
        let stop = |b: &Option<Burst>| {
            matches!(
                b,
                None | Some(
                    Burst::Exit | Burst::Switch { .. } | Burst::Sleep { .. } | Burst::Wait { .. }
                )
            )
        };
        if stop(&burst) {
            self.cpus[c].running = None;
            self.load[c] -= 1;
            match burst {
                None | Some(Burst::Exit) => {
                    self.tasks[i].phase = Phase::Done;
                    self.alive -= 1;
                    if !self.work.tasks[i].background {
                        self.makespan = self.makespan.max(ctx.now().0);
                        self.foreground -= 1;
                        if self.foreground == 0 {
                            // Background load alone is no run: stop.
                            ctx.stop();
                        }
                    }
                    self.engine_event(Event::Exit { task: Self::tid(i) }, ctx);
                }
                Some(Burst::Wait { chan }) => {
                    self.tasks[i].pc += 1;
                    self.tasks[i].phase = Phase::Blocked;
                    self.channels.wait(chan as usize, i);
                    self.blocked(i, ctx);
                }
                Some(Burst::Sleep { cycles }) => {
                    self.tasks[i].pc += 1;
                    self.tasks[i].phase = Phase::Blocked;
                    self.blocked(i, ctx);
                    ctx.schedule_in(Ticks(cycles), Ev::Wake(i as u32));
                }
                Some(Burst::Switch { next }) => {
                    let cur = self.tasks[i].df;
                    self.tasks[i].pc += 1;
                    self.tasks[i].df = next;
                    self.tasks[i].cursor = 0;
                    // Yield: the new placement takes effect before the
                    // task touches its new data.
                    self.tasks[i].phase = Phase::Blocked;
                    if self.engine.is_some() {
                        if self.cfg.hints {
                            let process = self.work.tasks[i].process;
                            self.engine_event(
                                Event::Hint {
                                    task: Self::tid(i),
                                    app: app(process),
                                    cur,
                                    next,
                                },
                                ctx,
                            );
                            self.refresh_group(i);
                        }
                    } else {
                        self.static_place(i);
                    }
                    self.make_ready(i, ctx);
                }
                Some(_) => unreachable!("only control bursts stop a chunk"),
            }
            if self.cpus[c].running.is_none() {
                self.dispatch(c, ctx);
            }
            return;
        }
        let off_target = !self.target_of(i).contains(cpu);
        if slice == 0 || off_target {
            // Preempted: the quota is used (or the task must move).
            self.cpus[c].running = None;
            self.load[c] -= 1;
            let g = self.tasks[i].group;
            if off_target {
                self.tasks[i].phase = Phase::Blocked;
                self.make_ready(i, ctx);
            } else {
                self.tasks[i].phase = Phase::Ready;
                self.rq
                    .requeue_spent(cpu, Self::tid(i), g)
                    .expect("a running task waits nowhere");
                self.load[c] += 1;
            }
            if self.cpus[c].running.is_none() {
                self.dispatch(c, ctx);
            }
            return;
        }
        self.run_chunk(c, 0, ctx);
    }
}

impl Model for Body {
    type Event = Ev;

    fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        for (i, t) in self.work.tasks.iter().enumerate() {
            ctx.schedule_in(Ticks(t.start_cycles), Ev::Arrive(i as u32));
        }
        if self.engine.is_some() {
            ctx.schedule_in(Ticks(self.cfg.balance_interval_cycles), Ev::Balance);
        }
        if self.cfg.kernel.balance_interval_cycles > 0 {
            ctx.schedule_in(
                Ticks(self.cfg.kernel.balance_interval_cycles),
                Ev::KernelBalance,
            );
        }
    }

    fn handle(&mut self, ev: Ev, ctx: &mut Context<'_, Ev>) {
        match ev {
            Ev::Arrive(i) => {
                let i = i as usize;
                let allowed = self.tasks[i].allowed.clone();
                let process = self.work.tasks[i].process;
                self.engine_event(
                    Event::TaskNew {
                        task: Self::tid(i),
                        app: app(process),
                        allowed,
                        cpu: None,
                    },
                    ctx,
                );
                // A co-thread joins its group on arrival, placed or not.
                self.refresh_group(i);
                self.tasks[i].phase = Phase::Blocked;
                self.make_ready(i, ctx);
            }
            Ev::ChunkDone(c) => self.chunk_done(c as usize, ctx),
            Ev::Wake(i) => {
                let i = i as usize;
                self.make_ready(i, ctx);
                self.woken(i, ctx);
            }
            Ev::WokenOn(i, c) => {
                let (i, c) = (i as usize, c as usize);
                self.load[c] -= 1;
                // The runtime may have moved it meanwhile (a pass, a hint
                // of another task): then the kernel places it anew.
                if self.target_of(i).contains(self.cpu_ids[c]) {
                    self.enqueue_on(i, c, ctx);
                } else {
                    self.make_ready(i, ctx);
                }
            }
            Ev::BlockSeen(i, n) => {
                let t = &self.tasks[i as usize];
                if t.blocks == n && !t.engine_blocked {
                    self.tasks[i as usize].engine_blocked = true;
                    self.engine_blocks += 1;
                    self.engine_event(
                        Event::Block {
                            task: TaskId(u64::from(i) + 1),
                        },
                        ctx,
                    );
                }
            }
            Ev::Balance => {
                if self.alive > 0 {
                    self.tell_wakes(ctx);
                    let now = Nanos(ctx.now().0);
                    self.engine_event(Event::Balance { now }, ctx);
                    ctx.schedule_in(Ticks(self.cfg.balance_interval_cycles), Ev::Balance);
                }
            }
            Ev::KernelBalance => {
                if self.alive > 0 {
                    self.kernel_balance(ctx);
                    ctx.schedule_in(
                        Ticks(self.cfg.kernel.balance_interval_cycles),
                        Ev::KernelBalance,
                    );
                }
            }
        }
    }
}

/// The engine's application of a process.
fn app(process: u32) -> AppId {
    AppId(u64::from(process))
}

/// The oracle's CPU for each DF: DFs by descending task count (then id),
/// each onto the CPU with the fewest tasks so far (then lowest index).
fn oracle_cpus(work: &Workload, cpus: usize) -> Vec<u32> {
    let mut count = vec![0u64; work.dfs.len()];
    for df in work.first_dfs().into_iter().flatten() {
        count[(df.0 - 1) as usize] += 1;
    }
    let mut order: Vec<usize> = (0..work.dfs.len()).collect();
    order.sort_by_key(|&d| (std::cmp::Reverse(count[d]), d));
    let mut load = vec![0u64; cpus];
    let mut out = vec![0u32; work.dfs.len()];
    let mut by_load: BTreeSet<(u64, usize)> = (0..cpus).map(|c| (0, c)).collect();
    for d in order {
        let (l, c) = by_load.pop_first().expect("at least one CPU");
        out[d] = c as u32;
        load[c] = l + count[d];
        by_load.insert((load[c], c));
    }
    out
}

#[cfg(test)]
mod tests;
