//! The DF benchmark of Pinter & Zalmanovici §5.2 on a simulated machine
//! of any size: threads that each work on one of a few data fragments,
//! started in a loop and never sleeping, run under every policy.
//!
//! Each thread hints its DF, then makes `passes` passes over it: a pass
//! reads the first `100 − write_pct` percent of the DF's lines and writes
//! the rest, so every pass touches every line once (the real benchmark,
//! `dfsched bench df`, does the same with every word). Thread `i` starts at
//! `i × spawn_gap_cycles`; which DF it gets is a seeded shuffle of an even
//! deal, so the same seed gives the same run.
//!
//! Policies ([`DfPolicy`]), all on one machine, one workload:
//!
//! | name | placement | dispatch |
//! |---|---|---|
//! | `vanilla` | kernel-like (fork balance, idle steal) | round robin |
//! | `dfsched` | [`dfsched_core::Engine`] | groups in succession |
//! | `dfsched-rr` | [`dfsched_core::Engine`] | round robin (what the Linux runtime gets: the kernel orders threads) |
//! | `co-thread` | [`dfsched_core::Engine`] with [`Policy::CoThread`], hints not given (the unmodified program: one co-thread group) | round robin |
//! | `oracle` | each DF pinned to one CPU | round robin |
//! | `split` | each DF spread over every CPU | round robin |
//!
//! Reported per policy: run time (cycles until the last thread exits),
//! private-cache misses by kind, context switches, migrations and the
//! number of simulation events; the CLI adds wall time, events per second
//! and peak memory. For machines of a thousand CPUs scale the caches down
//! (`private_kib`, `llc_kib`): each cache keeps a history of the lines it
//! lost (to classify misses), which grows with the lines that pass through
//! it.
//!
//! **Against the measurements (issue 12).** On 8 threads and 2 DFs of
//! 8 KiB on 2 CPUs, `bench df` measured split at 0.91–1.09 × vanilla where
//! this model said 1.39 ×. Three causes, each fixed where it was wrong:
//!
//! 1. *Slices in lockstep.* Both CPUs started their first slice at the same
//!    instant and every slice lasted exactly the quantum, so with split's
//!    alternating DFs on each CPU the threads of one DF either always ran
//!    at the same time or never did, for the whole run: all or nothing,
//!    decided by queue order. The kernel model now cuts each CPU's first
//!    slice to a seeded fraction and jitters every slice
//!    ([`KernelModel::unaligned_slices`], [`KernelModel::slice_jitter_milli`]),
//!    so the CPUs' phase drifts as on a real machine.
//! 2. *Vanilla in strict rotation.* A new task went to the least-loaded
//!    CPU, ties to the lowest: threads landed in rotation, a placement no
//!    kernel guarantees. Ties are now seeded draws and a waking task whose
//!    CPU is busy takes an idle one, as `select_idle_sibling` does; periodic
//!    balancing evens runnable counts ([`KernelModel`]).
//! 3. *One run is one draw.* Where the kernel puts threads and how slices
//!    line up differ from run to run; the benchmark reports medians of
//!    several runs, so `--predict` reports medians over seeds, and
//!    [`DfBenchParams::gate`] reproduces the benchmark's start gate.
//!
//! [`KernelModel::rotation`] keeps the old behaviour (`sim df-bench
//! --rotation`) for the findings established against it.

use crate::cache::CacheGeometry;
use crate::machine::{CacheLevelConfig, MachineConfig};
use crate::profile::Calibration;
use crate::program::body::{self, BodyConfig, BodyError, BodyReport, KernelModel, Placement};
use crate::program::{Burst, DfSpec, TaskSpec, Workload};
use crate::rng::SimRng;
use dfsched_core::dispatch::runqueue::RqPolicy;
use dfsched_core::{Config, DfId, Level, Policy, Topology};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// One policy of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DfPolicy {
    /// No dfsched.
    Vanilla,
    /// dfsched placement with group batching.
    Dfsched,
    /// dfsched placement, kernel round robin.
    DfschedRr,
    /// Best static placement.
    Oracle,
    /// Worst static placement.
    Split,
    /// Co-thread grouping of the program's threads, which give no hints,
    /// kernel round robin.
    CoThread,
}

impl DfPolicy {
    /// Every policy, in report order.
    pub const ALL: [DfPolicy; 6] = [
        DfPolicy::Vanilla,
        DfPolicy::Dfsched,
        DfPolicy::DfschedRr,
        DfPolicy::Oracle,
        DfPolicy::Split,
        DfPolicy::CoThread,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            DfPolicy::Vanilla => "vanilla",
            DfPolicy::Dfsched => "dfsched",
            DfPolicy::DfschedRr => "dfsched-rr",
            DfPolicy::Oracle => "oracle",
            DfPolicy::Split => "split",
            DfPolicy::CoThread => "co-thread",
        }
    }

    /// The policy called `name`, if any.
    pub fn parse(name: &str) -> Option<DfPolicy> {
        DfPolicy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The names of every policy, comma separated, for messages.
    pub fn names() -> String {
        DfPolicy::ALL.map(DfPolicy::name).join(", ")
    }

    /// The body's configuration for this policy: placement, dispatch and
    /// whether the threads' DF switches reach the engine as hints.
    pub(crate) fn body_config(self) -> BodyConfig {
        let engine = |policy| {
            Placement::Engine(Config {
                policy,
                ..Config::default()
            })
        };
        let (placement, dispatch, hints) = match self {
            DfPolicy::Vanilla => (Placement::Vanilla, RqPolicy::Vanilla, true),
            DfPolicy::Dfsched => (engine(Policy::DataAffinity), RqPolicy::DataAffinity, true),
            DfPolicy::DfschedRr => (engine(Policy::DataAffinity), RqPolicy::Vanilla, true),
            DfPolicy::Oracle => (Placement::Oracle, RqPolicy::Vanilla, true),
            DfPolicy::Split => (Placement::Split, RqPolicy::Vanilla, true),
            DfPolicy::CoThread => (engine(Policy::CoThread), RqPolicy::Vanilla, false),
        };
        BodyConfig {
            hints,
            ..BodyConfig::new(placement, dispatch)
        }
    }
}

/// The benchmark's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DfBenchParams {
    /// NUMA nodes of the machine ([`Topology::test`]).
    pub nodes: u32,
    /// LLCs per node.
    pub llcs: u32,
    /// Cores per LLC.
    pub cores: u32,
    /// Hardware threads per core.
    pub smt: u32,
    /// Threads of the benchmark.
    pub threads: u32,
    /// Processes the threads are dealt to, thread `i` to process
    /// `i mod processes`, each its own application (1 to `threads`; a
    /// co-thread group each under `co-thread`).
    #[serde(default = "one_process")]
    pub processes: u32,
    /// Distinct DFs.
    pub dfs: u32,
    /// Bytes of each DF.
    pub df_bytes: u64,
    /// Passes each thread makes over its DF.
    pub passes: u32,
    /// Percent of each pass's lines that are written (0–100).
    pub write_pct: u32,
    /// Cycles between two thread starts.
    pub spawn_gap_cycles: u64,
    /// Private cache per CPU, KiB (8-way, 64-byte lines).
    pub private_kib: u32,
    /// Shared cache per LLC domain, KiB (16-way); 0 for none.
    pub llc_kib: u32,
    /// The quantum, in cycles.
    pub quantum_cycles: u64,
    /// Seed of the thread → DF deal.
    pub seed: u64,
    /// Each process works on one DF of its own: thread `i` gets DF
    /// `i mod processes` (so `dfs` must equal `processes`) instead of a
    /// seeded deal. This is the co-thread test program of paper 001 §IV:
    /// P processes of T threads, each process's threads on its shared data.
    #[serde(default)]
    pub df_per_process: bool,
    /// Thread `i` gets DF `i mod dfs` (what `dfsched bench df` does)
    /// instead of a seeded deal; ignored with `df_per_process`.
    #[serde(default)]
    pub deal_round_robin: bool,
    /// Cycles of work each pass adds beyond its line accesses (the further
    /// accesses of a line already fetched, when the real benchmark touches
    /// several words per line). Default 0.
    #[serde(default)]
    pub compute_per_pass_cycles: u64,
    /// The kernel's own placement ([`KernelModel`]); default the seeded
    /// model.
    #[serde(default)]
    pub kernel: KernelModel,
    /// A start gate, as `dfsched bench df` has: each thread, once started
    /// (and placed by its DF hint), sleeps until every thread has started
    /// (`threads × spawn_gap_cycles` after the first, plus one gap) and
    /// only then works. The threads are placed while the CPUs are idle and
    /// woken together, so the kernel's wake-up placement and its balancing
    /// decide where they work, as in the real benchmark. Default false.
    #[serde(default)]
    pub gate: bool,
    /// Under `dfsched` (groups in succession), the most quanta a CPU gives
    /// one group in a row before it serves the next (the sched_ext body's
    /// `--quota`); 0 (default): a group's turn lasts until each of its
    /// waiting threads there ran one quantum.
    #[serde(default)]
    pub group_quota: u32,
}

/// `DfBenchParams::processes` when a JSON document predates it.
fn one_process() -> u32 {
    1
}

impl Default for DfBenchParams {
    /// The paper's 32-thread, 4-DF case on a 2-CPU machine like this one,
    /// with a private cache that holds two of the four DFs and a 10 µs
    /// quantum (at 3 GHz), so that each thread runs for several quanta.
    fn default() -> Self {
        DfBenchParams {
            nodes: 1,
            llcs: 1,
            cores: 2,
            smt: 1,
            threads: 32,
            processes: 1,
            dfs: 4,
            df_bytes: 8192,
            passes: 40,
            write_pct: 25,
            spawn_gap_cycles: 1000,
            private_kib: 8,
            llc_kib: 0,
            quantum_cycles: 30_000,
            seed: 1,
            df_per_process: false,
            deal_round_robin: false,
            compute_per_pass_cycles: 0,
            kernel: KernelModel::default(),
            gate: false,
            group_quota: 0,
        }
    }
}

/// Why the benchmark could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DfBenchError {
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
    /// The run itself failed.
    #[error(transparent)]
    Body(#[from] BodyError),
}

/// One policy's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DfPolicyResult {
    /// The policy.
    pub policy: DfPolicy,
    /// Its run time relative to vanilla's, in thousandths (when vanilla
    /// ran).
    pub runtime_vs_vanilla_milli: Option<u64>,
    /// What the run did.
    pub report: BodyReport,
}

/// The benchmark's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DfBenchResult {
    /// The parameters.
    pub params: DfBenchParams,
    /// CPUs of the machine.
    pub cpus: usize,
    /// One entry per policy run, in the order asked.
    pub results: Vec<DfPolicyResult>,
}

/// The most benchmark threads (and DFs, and processes) a run accepts: the
/// simulator keeps a task, a program and a group per thread, so a mistyped
/// `--threads 1000000000` would allocate until the process aborts.
pub const MAX_THREADS: u32 = 100_000;
/// The largest DF a run accepts, in bytes (1 GiB).
pub const MAX_DF_BYTES: u64 = 1 << 30;
/// The most bursts (threads × passes) a run's workload may hold in memory.
pub const MAX_BURSTS: u64 = 10_000_000;
/// The most cache-line accesses one policy's run may make (threads ×
/// passes × DF lines): about a minute per policy at the ~14 million line
/// accesses per second this simulator makes on the project's machine, so
/// a mistyped `--df-bytes` is refused rather than left running for days.
pub const MAX_LINE_ACCESSES: u64 = 1_000_000_000;

fn param(name: &'static str, value: u64, ok: bool, why: &'static str) -> Result<(), DfBenchError> {
    if ok {
        Ok(())
    } else {
        Err(DfBenchError::Param { name, value, why })
    }
}

impl DfBenchParams {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), DfBenchError> {
        for (name, v) in [
            ("nodes", self.nodes),
            ("llcs", self.llcs),
            ("cores", self.cores),
            ("smt", self.smt),
            ("threads", self.threads),
            ("processes", self.processes),
            ("dfs", self.dfs),
            ("passes", self.passes),
            ("private_kib", self.private_kib),
        ] {
            param(name, v.into(), v >= 1, "must be at least 1")?;
        }
        param(
            "processes",
            self.processes.into(),
            self.processes <= self.threads,
            "at most one process per thread",
        )?;
        param(
            "dfs",
            self.dfs.into(),
            !self.df_per_process || self.dfs == self.processes,
            "must equal processes when each process has a DF of its own (df_per_process)",
        )?;
        for (name, v) in [
            ("threads", self.threads),
            ("dfs", self.dfs),
            ("processes", self.processes),
        ] {
            param(
                name,
                v.into(),
                v <= MAX_THREADS,
                "at most 100000 (MAX_THREADS)",
            )?;
        }
        param(
            "df_bytes",
            self.df_bytes,
            self.df_bytes <= MAX_DF_BYTES,
            "at most 1073741824 (1 GiB, MAX_DF_BYTES)",
        )?;
        let bursts = u64::from(self.threads) * u64::from(self.passes);
        param(
            "threads × passes",
            bursts,
            bursts <= MAX_BURSTS,
            "at most 10000000 (MAX_BURSTS): the workload is held in memory",
        )?;
        let accesses = bursts.saturating_mul(self.df_bytes.div_ceil(64));
        param(
            "threads × passes × DF lines (df_bytes / 64)",
            accesses,
            accesses <= MAX_LINE_ACCESSES,
            "at most 1000000000 line accesses per policy (MAX_LINE_ACCESSES, about a minute each)",
        )?;
        let cpus = u64::from(self.nodes) * u64::from(self.llcs) * u64::from(self.cores);
        let cpus = cpus * u64::from(self.smt);
        param("cpus", cpus, cpus <= 4096, "at most 4096 CPUs")?;
        param(
            "df_bytes",
            self.df_bytes,
            self.df_bytes >= 1,
            "must be at least 1",
        )?;
        param(
            "write_pct",
            self.write_pct.into(),
            self.write_pct <= 100,
            "a percentage, 0 to 100",
        )?;
        param(
            "quantum_cycles",
            self.quantum_cycles,
            self.quantum_cycles >= 1,
            "must be at least 1",
        )?;
        Ok(())
    }

    /// The machine's topology.
    pub fn topology(&self) -> Topology {
        Topology::test(self.nodes, self.llcs, self.cores, self.smt)
    }

    /// The machine's caches.
    pub fn machine(&self, topology: &Topology) -> MachineConfig {
        let cache = |kib: u32, ways: u32, hit_cycles| CacheLevelConfig {
            geometry: CacheGeometry {
                sets: (kib * 1024 / 64 / ways).max(1),
                ways,
            },
            hit_cycles,
        };
        let mut m = MachineConfig {
            private: cache(self.private_kib, 8, 4),
            ..MachineConfig::default()
        };
        let has_llc = topology
            .domains()
            .iter()
            .any(|d| d.level == Level::Llc && d.cpus.len() > 1);
        if self.llc_kib > 0 && has_llc {
            m = m.with_shared(Level::Llc, cache(self.llc_kib, 16, 40));
        }
        m
    }

    /// The caches and costs of the machine `cal` describes, on `topology`:
    ///
    /// - the private cache is the CPU's L2 (the simulator has one private
    ///   level; 8-way), or its L1 when no L2 is known; its hit costs
    ///   `cal.l1_hit_cycles` (the benchmark's own access on an L1 line)
    ///   while the DFs a CPU holds fit its L1 (the DFs' bytes over the
    ///   CPUs, at most all of them), else `cal.l2_hit_cycles`;
    /// - the shared LLC (where the topology has one spanning several CPUs)
    ///   is the real one's size capped at four times the DFs' bytes (at
    ///   least 1 MiB, a power of two): a cache larger than everything the
    ///   run touches behaves the same and costs the simulator memory;
    /// - every price beyond hits is `cal.cost`.
    pub fn calibrated_machine(&self, topology: &Topology, cal: &Calibration) -> MachineConfig {
        let geometry = |bytes: u64, ways: u32| CacheGeometry {
            sets: ((bytes / 64 / u64::from(ways)).max(1)).min(u64::from(u32::MAX)) as u32,
            ways,
        };
        let footprint = u64::from(self.dfs) * self.df_bytes;
        let cpus = topology.nr_cpus() as u64;
        let per_cpu = footprint.div_ceil(cpus.max(1));
        let private_bytes = if cal.l2_bytes > 0 {
            cal.l2_bytes
        } else {
            cal.l1_bytes
        };
        let hit_cycles = if per_cpu <= cal.l1_bytes {
            cal.l1_hit_cycles
        } else {
            cal.l2_hit_cycles
        };
        let mut m = MachineConfig {
            private: CacheLevelConfig {
                geometry: geometry(private_bytes, 8),
                hit_cycles,
            },
            cost: cal.cost,
            ..MachineConfig::default()
        };
        let has_llc = topology
            .domains()
            .iter()
            .any(|d| d.level == Level::Llc && d.cpus.len() > 1);
        if cal.llc_bytes > 0 && has_llc {
            let cap = (4 * footprint).max(1 << 20).next_power_of_two();
            m = m.with_shared(
                Level::Llc,
                CacheLevelConfig {
                    geometry: geometry(cal.llc_bytes.min(cap), 16),
                    hit_cycles: cal.llc_hit_cycles,
                },
            );
        }
        m
    }

    /// When the start gate opens (with [`DfBenchParams::gate`]): one
    /// spawn gap after the last thread started. A run time measured as the
    /// real benchmark measures it, from the gate, is the makespan less
    /// this.
    pub fn gate_open_cycles(&self) -> u64 {
        (u64::from(self.threads) + 1) * self.spawn_gap_cycles.max(1)
    }

    /// The threads and DFs.
    pub fn workload(&self) -> Workload {
        let lines = self.df_bytes.div_ceil(64);
        let written = lines * u64::from(self.write_pct) / 100;
        let deal: Vec<u32> = if self.df_per_process {
            // The DF of thread i's process (i mod processes): see `workload`.
            (0..self.threads).map(|i| i % self.processes).collect()
        } else if self.deal_round_robin {
            (0..self.threads).map(|i| i % self.dfs).collect()
        } else {
            let mut deal: Vec<u32> = (0..self.threads).map(|i| i % self.dfs).collect();
            deal.shuffle(&mut SimRng::new(self.seed));
            deal
        };
        let tasks = deal
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let mut program = vec![Burst::Switch {
                    next: Some(DfId(u64::from(d) + 1)),
                }];
                let start = i as u64 * self.spawn_gap_cycles;
                if self.gate {
                    program.push(Burst::Sleep {
                        cycles: self.gate_open_cycles() - start,
                    });
                }
                for _ in 0..self.passes {
                    if self.compute_per_pass_cycles > 0 {
                        program.push(Burst::Compute {
                            cycles: self.compute_per_pass_cycles,
                        });
                    }
                    if lines > written {
                        program.push(Burst::Read {
                            lines: lines - written,
                        });
                    }
                    if written > 0 {
                        program.push(Burst::Write { lines: written });
                    }
                }
                TaskSpec {
                    process: i as u32 % self.processes,
                    start_cycles: start,
                    allowed: None,
                    program,
                    background: false,
                }
            })
            .collect();
        Workload {
            dfs: vec![
                DfSpec {
                    bytes: self.df_bytes
                };
                self.dfs as usize
            ],
            tasks,
        }
    }
}

/// Runs the benchmark under each of `policies` (in that order), calling
/// `progress` after each with the policy's result.
pub fn run(
    params: &DfBenchParams,
    policies: &[DfPolicy],
    progress: impl FnMut(&DfPolicyResult),
) -> Result<DfBenchResult, DfBenchError> {
    params.validate()?;
    let machine = params.machine(&params.topology());
    run_on(params, &machine, policies, progress)
}

/// Runs the benchmark on the machine `cal` describes (a machine profile's
/// [`Calibration`], or its defaults): its caches and costs replace
/// `private_kib`, `llc_kib` and the cost defaults, and its migration cost
/// joins `params.kernel`; the quantum, the topology and everything else
/// are `params`'s. See [`DfBenchParams::calibrated_machine`].
pub fn run_calibrated(
    params: &DfBenchParams,
    cal: &Calibration,
    policies: &[DfPolicy],
    progress: impl FnMut(&DfPolicyResult),
) -> Result<DfBenchResult, DfBenchError> {
    params.validate()?;
    let machine = params.calibrated_machine(&params.topology(), cal);
    let params = DfBenchParams {
        kernel: KernelModel {
            migration_cycles: cal.migration_cycles,
            ..params.kernel
        },
        ..params.clone()
    };
    run_on(&params, &machine, policies, progress)
}

fn run_on(
    params: &DfBenchParams,
    machine: &MachineConfig,
    policies: &[DfPolicy],
    mut progress: impl FnMut(&DfPolicyResult),
) -> Result<DfBenchResult, DfBenchError> {
    let topo = params.topology();
    let machine = machine.clone();
    let work = params.workload();
    let mut results: Vec<DfPolicyResult> = Vec::new();
    for &policy in policies {
        let cfg = BodyConfig {
            quantum_cycles: params.quantum_cycles,
            kernel: params.kernel,
            group_quota: params.group_quota,
            ..policy.body_config()
        };
        let report = body::run(&topo, &machine, work.clone(), cfg, params.seed)?;
        let r = DfPolicyResult {
            policy,
            runtime_vs_vanilla_milli: None,
            report,
        };
        progress(&r);
        results.push(r);
    }
    if let Some(v) = results
        .iter()
        .find(|r| r.policy == DfPolicy::Vanilla)
        .map(|r| r.report.makespan_cycles)
    {
        for r in &mut results {
            r.runtime_vs_vanilla_milli = Some(r.report.makespan_cycles * 1000 / v.max(1));
        }
    }
    Ok(DfBenchResult {
        params: params.clone(),
        cpus: topo.nr_cpus(),
        results,
    })
}

#[cfg(test)]
mod tests;
