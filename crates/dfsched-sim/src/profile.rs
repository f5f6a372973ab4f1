//! A machine profile: what things cost on one real machine, measured by
//! `dfsched calibrate`, and how the simulator's parameters follow from it.
//!
//! ```text
//!   dfsched calibrate ──► machine.json ──► (CLI reads it) ──► MachineProfile
//!                                                              │ validate()
//!                                                              ▼
//!                                          Calibration (cycles, sizes, quantum)
//!                                                              │
//!                       MachineConfig + CostModel + BodyConfig of the simulator
//! ```
//!
//! The profile is plain data (JSON with a [`PROFILE_VERSION`]): the host, the
//! topology as the runtime reads it from sysfs, and one [`Cost`] per probe,
//! each the median of repeated, interleaved rounds with their spread. A
//! probe that could not run (a cross-CPU probe with one CPU allowed) has no
//! median and says why; the simulator then keeps its documented default for
//! that parameter and [`Calibration::defaulted`] names it.
//!
//! This module does no I/O: the CLI reads the file and hands the parsed
//! value in, so a bad profile is refused here, as a whole, before anything
//! is applied ([`MachineProfile::calibration`] returns a complete
//! [`Calibration`] or an error, never half of one).
//!
//! How each measured cost becomes a simulator parameter (all in cycles of
//! the measured clock, `cycles = ns / cycle_ns`):
//!
//! | profile | simulator |
//! |---|---|
//! | `cycle` (one dependent add) | the clock: ns → cycles |
//! | `pass_access` (the DF benchmark's own loop on an L1-resident line) | private (L1) hit |
//! | `l2_hit` | a per-CPU L2 below the private cache |
//! | `llc_hit` | the shared LLC's hit |
//! | `memory_fetch` | [`CostModel::memory_cycles`] |
//! | `line_read_transfer` | [`CostModel::coherence_transfer_cycles`] |
//! | `line_write_transfer` − `line_read_transfer` | [`CostModel::write_transfer_extra_cycles`] |
//! | `line_contended` | recorded only: on the 2-vCPU KVM guest it came out bimodal (0.27 ns or 10–36 ns per access, run to run), which no mapping should take on trust yet |
//! | `context_switch` | [`CostModel::context_switch_cycles`] |
//! | `migration` | [`Calibration::migration_cycles`] (a task starting on a CPU other than its last) |
//! | `wake_same_cpu`, `wake_other_cpu` | [`Calibration::wake_same_cycles`] (less a context switch, halved: a socket call of the Chat model), [`Calibration::wake_other_cycles`] (the latency of a wake-up onto another, idle CPU: `wake_other_cpu` less `wake_other_cpu_time` when that was measured, else all of it) |
//! | `wake_other_cpu_time` − `wake_same_cpu` | [`Calibration::wake_other_cpu_cycles`]: the CPU time a wake-up onto another CPU costs beyond one on the same CPU (the IPI; on a VM guest an exit to the hypervisor), which the waker pays; 0 when not measured (profiles of older builds) |
//! | `setaffinity` | [`Calibration::setaffinity_cycles`] (recorded; no simulated workload calls it yet) |
//! | `l1_hit` | recorded only: the simulator prices a private hit by `pass_access`, the benchmark's own loop (independent stores overlap; a pointer chase's loads do not) |
//! | `timeslice` | the quantum |
//!
//! Cache sizes come from the topology (the first CPU's L1 data cache and L2,
//! the LLC of its domain); ways are not in sysfs, so the simulator assumes
//! 8 (L1), 16 (L2) and 16 (LLC).

use crate::cost::CostModel;
use dfsched_core::{CpuSet, Level, Topology};
use serde::{Deserialize, Serialize};

/// The profile format this build writes and reads.
pub const PROFILE_VERSION: u32 = 1;

/// What one probe measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// The median over rounds of each round's median, in nanoseconds;
    /// `null` when the probe could not run here ([`Cost::reason`] says why).
    pub median_ns: Option<f64>,
    /// The smallest round median, ns.
    pub min_ns: Option<f64>,
    /// The largest round median, ns: `[min_ns, max_ns]` is the spread a
    /// second calibration should fall in.
    pub max_ns: Option<f64>,
    /// Rounds measured (each round many samples).
    pub rounds: u32,
    /// Bytes of the buffer a memory probe walked, when it walks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_bytes: Option<u64>,
    /// Why there is no median (one CPU allowed, a call refused…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Cost {
    /// A measured cost from the per-round medians `rounds_ns` (not empty).
    pub fn from_rounds(rounds_ns: &[f64]) -> Cost {
        let mut v: Vec<f64> = rounds_ns.to_vec();
        v.sort_by(f64::total_cmp);
        let median = if v.is_empty() {
            None
        } else if v.len() % 2 == 1 {
            Some(v[v.len() / 2])
        } else {
            Some((v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0)
        };
        Cost {
            median_ns: median,
            min_ns: v.first().copied(),
            max_ns: v.last().copied(),
            rounds: v.len() as u32,
            buffer_bytes: None,
            reason: None,
        }
    }

    /// A probe that could not run, and why.
    pub fn unavailable(reason: impl Into<String>) -> Cost {
        Cost {
            reason: Some(reason.into()),
            ..Cost::default()
        }
    }

    /// A cost a profile written before its probe existed lacks.
    pub fn not_in_older_profiles() -> Cost {
        Cost::unavailable("not measured: the profile predates this probe")
    }

    /// The median, if measured.
    pub fn ns(&self) -> Option<f64> {
        self.median_ns
    }

    /// Checks the fields agree (see [`MachineProfile::validate`]).
    fn check(&self, name: &'static str) -> Result<(), ProfileError> {
        let bad = |why: &'static str| Err(ProfileError::Cost { name, why });
        match (self.median_ns, &self.reason) {
            (None, None) => return bad("no median_ns and no reason"),
            (Some(_), Some(_)) => return bad("both a median_ns and a reason"),
            (None, Some(_)) => return Ok(()),
            (Some(_), None) => {}
        }
        let (Some(m), Some(lo), Some(hi)) = (self.median_ns, self.min_ns, self.max_ns) else {
            return bad("a median_ns needs min_ns and max_ns");
        };
        if ![m, lo, hi].iter().all(|x| x.is_finite() && *x > 0.0) {
            return bad("every time must be a positive number of ns");
        }
        if !(lo <= m && m <= hi) {
            return bad("min_ns <= median_ns <= max_ns does not hold");
        }
        if self.rounds == 0 {
            return bad("rounds must be at least 1");
        }
        Ok(())
    }
}

/// One cost per probe.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// One dependent integer add: the clock period.
    pub cycle: Cost,
    /// One access of the DF benchmark's own pass loop (a store of a word
    /// on a line in the L1) while a second CPU runs the same loop: what a
    /// private hit costs in `bench df` with every CPU busy.
    pub pass_access: Cost,
    /// A dependent load that hits the L1 (pointer chase in half the L1).
    pub l1_hit: Cost,
    /// A dependent load that hits the L2 (pointer chase over a buffer
    /// larger than the L1, smaller than the L2).
    pub l2_hit: Cost,
    /// A dependent load that hits the LLC.
    pub llc_hit: Cost,
    /// A dependent load from memory (a buffer several times the LLC, or as
    /// large as the probe allows: see its `buffer_bytes`).
    pub memory_fetch: Cost,
    /// A written line moving to another CPU that writes it (one leg of a
    /// ping-pong between two pinned threads).
    pub line_write_transfer: Cost,
    /// A read of a line another CPU has just written.
    pub line_read_transfer: Cost,
    /// An access of the DF benchmark's pass loop while another CPU runs the
    /// same loop over the same DF: a written line taken from a CPU that
    /// keeps writing it, the regime of a DF shared by two CPUs at once.
    /// Recorded for comparison; the simulator does not use it (see the
    /// module doc).
    pub line_contended: Cost,
    /// A wake-up (pipe write to a reader blocked in read) with both threads
    /// on one CPU: one leg of a ping-pong.
    pub wake_same_cpu: Cost,
    /// The same with the threads on two CPUs.
    pub wake_other_cpu: Cost,
    /// The CPU time (both threads') of one leg of the `wake_other_cpu`
    /// ping-pong: the part of a cross-CPU wake-up spent on CPUs rather than
    /// waiting (on the 2-vCPU KVM guest about 31 µs of a 40–115 µs leg,
    /// against 1 µs on one CPU). Profiles of older builds lack it: not
    /// measured.
    #[serde(default = "Cost::not_in_older_profiles")]
    pub wake_other_cpu_time: Cost,
    /// A context switch: a ping-pong leg on one CPU minus the pipe calls'
    /// own cost.
    pub context_switch: Cost,
    /// A thread moved to another CPU by `sched_setaffinity`, until it runs
    /// there (the move's cost beyond the call).
    pub migration: Cost,
    /// One `sched_setaffinity` call that does not move the thread.
    pub setaffinity: Cost,
    /// The time a CPU-bound thread runs before the kernel switches to
    /// another CPU-bound thread on the same CPU: the quantum.
    pub timeslice: Cost,
}

impl Costs {
    /// Every cost with its JSON name, in declaration order.
    pub fn named(&self) -> [(&'static str, &Cost); 16] {
        [
            ("cycle", &self.cycle),
            ("pass_access", &self.pass_access),
            ("l1_hit", &self.l1_hit),
            ("l2_hit", &self.l2_hit),
            ("llc_hit", &self.llc_hit),
            ("memory_fetch", &self.memory_fetch),
            ("line_write_transfer", &self.line_write_transfer),
            ("line_read_transfer", &self.line_read_transfer),
            ("line_contended", &self.line_contended),
            ("wake_same_cpu", &self.wake_same_cpu),
            ("wake_other_cpu", &self.wake_other_cpu),
            ("wake_other_cpu_time", &self.wake_other_cpu_time),
            ("context_switch", &self.context_switch),
            ("migration", &self.migration),
            ("setaffinity", &self.setaffinity),
            ("timeslice", &self.timeslice),
        ]
    }

    /// Mutable access by JSON name (tests and the CLI's error messages).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Cost> {
        Some(match name {
            "cycle" => &mut self.cycle,
            "pass_access" => &mut self.pass_access,
            "l1_hit" => &mut self.l1_hit,
            "l2_hit" => &mut self.l2_hit,
            "llc_hit" => &mut self.llc_hit,
            "memory_fetch" => &mut self.memory_fetch,
            "line_write_transfer" => &mut self.line_write_transfer,
            "line_read_transfer" => &mut self.line_read_transfer,
            "line_contended" => &mut self.line_contended,
            "wake_same_cpu" => &mut self.wake_same_cpu,
            "wake_other_cpu" => &mut self.wake_other_cpu,
            "wake_other_cpu_time" => &mut self.wake_other_cpu_time,
            "context_switch" => &mut self.context_switch,
            "migration" => &mut self.migration,
            "setaffinity" => &mut self.setaffinity,
            "timeslice" => &mut self.timeslice,
            _ => return None,
        })
    }
}

/// Where the profile was measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileHost {
    /// `model name` of `/proc/cpuinfo`.
    pub model_name: String,
    /// Whether the CPU flags say we run under a hypervisor.
    pub hypervisor: bool,
    /// The kernel release.
    pub kernel: String,
    /// The CPUs calibrate was allowed to use.
    pub allowed: CpuSet,
    /// Whether this was a `--quick` calibration (fewer, shorter rounds).
    pub quick: bool,
    /// When it was measured, seconds since the Unix epoch.
    pub unix_time_s: u64,
}

/// A machine profile: `dfsched calibrate`'s output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineProfile {
    /// [`PROFILE_VERSION`] of the writer.
    pub version: u32,
    /// Where it was measured.
    pub host: ProfileHost,
    /// The cache topology, as `dfsched topology --json` prints it.
    pub topology: Topology,
    /// The measured costs.
    pub costs: Costs,
}

/// Why a profile was refused. Nothing of it was applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// Written by another format version.
    #[error("profile version {found}, this dfsched reads version {PROFILE_VERSION}: run `dfsched calibrate` again")]
    Version {
        /// The file's version.
        found: u32,
    },
    /// A cost whose fields disagree.
    #[error("cost {name}: {why}")]
    Cost {
        /// The cost's JSON name.
        name: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// The clock probe did not run: nothing converts to cycles.
    #[error("cost cycle has no median: the profile cannot be converted to cycles")]
    NoClock,
    /// The allowed CPUs are not in the topology.
    #[error("host.allowed {allowed} is empty or not in the topology's CPUs {cpus}")]
    Allowed {
        /// The allowed set.
        allowed: CpuSet,
        /// The topology's CPUs.
        cpus: CpuSet,
    },
}

/// The simulator's parameters on a machine: what a profile sets, or the
/// documented defaults ([`Calibration::default`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    /// Nanoseconds per simulated cycle.
    pub cycle_ns: f64,
    /// Private (L1 data) cache bytes and hit cycles.
    pub l1_bytes: u64,
    /// Cycles of a private hit.
    pub l1_hit_cycles: u64,
    /// Per-CPU L2 bytes below the private cache; 0 for none.
    pub l2_bytes: u64,
    /// Cycles of an L2 hit.
    pub l2_hit_cycles: u64,
    /// Shared LLC bytes; 0 for none.
    pub llc_bytes: u64,
    /// Cycles of an LLC hit.
    pub llc_hit_cycles: u64,
    /// Prices beyond hits.
    pub cost: CostModel,
    /// The quantum, cycles.
    pub quantum_cycles: u64,
    /// Cost of a task starting on a CPU other than its last (the kernel's
    /// migration work; cache effects are simulated), cycles.
    pub migration_cycles: u64,
    /// Latency of a wake-up onto the waker's CPU, cycles.
    pub wake_same_cycles: u64,
    /// Latency of a wake-up onto another (idle) CPU, cycles: how long the
    /// wakee waits beyond the CPU time the wake-up costs
    /// ([`Calibration::wake_other_cpu_cycles`]).
    pub wake_other_cycles: u64,
    /// CPU time a wake-up onto another CPU costs the waker beyond one on
    /// its own CPU (the IPI; on a VM guest, an exit to the hypervisor),
    /// cycles. 0 when not measured.
    pub wake_other_cpu_cycles: u64,
    /// Cost of one `sched_setaffinity` call, cycles.
    pub setaffinity_cycles: u64,
    /// Profile costs that were not measured, whose defaults were kept.
    pub defaulted: Vec<&'static str>,
}

impl Default for Calibration {
    /// Round figures for a current x86 server core at 3 GHz: a 32 KiB L1
    /// (4-cycle hits), a 1 MiB L2 (14), a 32 MiB LLC (40), the
    /// [`CostModel`] defaults, a 3 ms quantum (9 M cycles), 5 µs of
    /// migration work, 3 µs (same CPU) and 10 µs (other CPU) wake-ups, 1 µs
    /// per `sched_setaffinity`.
    fn default() -> Self {
        Calibration {
            cycle_ns: 1.0 / 3.0,
            l1_bytes: 32 << 10,
            l1_hit_cycles: 4,
            l2_bytes: 1 << 20,
            l2_hit_cycles: 14,
            llc_bytes: 32 << 20,
            llc_hit_cycles: 40,
            cost: CostModel::default(),
            quantum_cycles: 9_000_000,
            migration_cycles: 15_000,
            wake_same_cycles: 9_000,
            wake_other_cycles: 30_000,
            wake_other_cpu_cycles: 0,
            setaffinity_cycles: 3_000,
            defaulted: Vec::new(),
        }
    }
}

impl MachineProfile {
    /// Checks the whole profile: the version, every cost's fields, a
    /// measured clock, the allowed CPUs within the topology.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.version != PROFILE_VERSION {
            return Err(ProfileError::Version {
                found: self.version,
            });
        }
        for (name, c) in self.costs.named() {
            c.check(name)?;
        }
        if self.costs.cycle.median_ns.is_none() {
            return Err(ProfileError::NoClock);
        }
        let cpus = self.topology.cpus();
        if self.host.allowed.is_empty() || !self.host.allowed.iter().all(|c| cpus.contains(c)) {
            return Err(ProfileError::Allowed {
                allowed: self.host.allowed.clone(),
                cpus: cpus.clone(),
            });
        }
        Ok(())
    }

    /// The simulator's parameters on this machine (see the module doc's
    /// table); every cost not measured keeps [`Calibration::default`]'s
    /// value, converted at the measured clock, and is named in
    /// `defaulted`.
    pub fn calibration(&self) -> Result<Calibration, ProfileError> {
        self.validate()?;
        let d = Calibration::default();
        let cycle_ns = self.costs.cycle.median_ns.ok_or(ProfileError::NoClock)?;
        let mut defaulted = Vec::new();
        // A measured cost in cycles, or the default's (kept in ns, so a
        // default means the same time on any clock).
        let mut cyc = |name: &'static str, c: &Cost, default_cycles: u64| -> u64 {
            match c.median_ns {
                Some(ns) => ((ns / cycle_ns).round() as u64).max(1),
                None => {
                    defaulted.push(name);
                    ((default_cycles as f64 * d.cycle_ns / cycle_ns).round() as u64).max(1)
                }
            }
        };
        let k = &self.costs;
        let l1_hit_cycles = cyc("pass_access", &k.pass_access, d.l1_hit_cycles);
        let l2_hit_cycles = cyc("l2_hit", &k.l2_hit, d.l2_hit_cycles);
        let llc_hit_cycles = cyc("llc_hit", &k.llc_hit, d.llc_hit_cycles);
        let memory_cycles = cyc("memory_fetch", &k.memory_fetch, d.cost.memory_cycles);
        let read_t = cyc(
            "line_read_transfer",
            &k.line_read_transfer,
            d.cost.coherence_transfer_cycles,
        );
        let write_t = cyc(
            "line_write_transfer",
            &k.line_write_transfer,
            d.cost.coherence_transfer_cycles,
        );
        let context_switch_cycles = cyc(
            "context_switch",
            &k.context_switch,
            d.cost.context_switch_cycles,
        );
        let migration_cycles = cyc("migration", &k.migration, d.migration_cycles);
        let wake_same_cycles = cyc("wake_same_cpu", &k.wake_same_cpu, d.wake_same_cycles);
        let wake_other_cycles = cyc("wake_other_cpu", &k.wake_other_cpu, d.wake_other_cycles);
        let setaffinity_cycles = cyc("setaffinity", &k.setaffinity, d.setaffinity_cycles);
        let quantum_cycles = cyc("timeslice", &k.timeslice, d.quantum_cycles);
        // A leg across CPUs = its CPU time + the wait; the CPU time beyond
        // a same-CPU leg's (all CPU: one of the two always runs) is the
        // cross-CPU wake-up's own work. Not measured: all of the leg is
        // latency, as before the probe existed.
        let (wake_other_cycles, wake_other_cpu_cycles) =
            match (k.wake_other_cpu.median_ns, k.wake_other_cpu_time.median_ns) {
                (Some(_), Some(cpu_ns)) => {
                    let cpu = ((cpu_ns / cycle_ns).round() as u64).min(wake_other_cycles);
                    (
                        (wake_other_cycles - cpu).max(1),
                        cpu.saturating_sub(wake_same_cycles),
                    )
                }
                _ => {
                    if k.wake_other_cpu.median_ns.is_some() {
                        defaulted.push("wake_other_cpu_time");
                    }
                    (wake_other_cycles, d.wake_other_cpu_cycles)
                }
            };
        let cpu0 = self.host.allowed.iter().next().expect("validated");
        let (l1, l2, llc) = cache_sizes(&self.topology, cpu0);
        Ok(Calibration {
            cycle_ns,
            l1_bytes: l1.unwrap_or(d.l1_bytes),
            l1_hit_cycles,
            l2_bytes: l2.unwrap_or(0),
            l2_hit_cycles,
            llc_bytes: llc.unwrap_or(0),
            llc_hit_cycles,
            cost: CostModel {
                memory_cycles,
                coherence_transfer_cycles: read_t,
                // A write upgrade of a shared line is an invalidation round
                // trip: the difference between a write and a read transfer
                // is its best measured proxy; never below the default's
                // share of a transfer.
                invalidate_cycles: write_t.saturating_sub(read_t).max(read_t / 2),
                writeback_cycles: d.cost.writeback_cycles * memory_cycles
                    / d.cost.memory_cycles.max(1),
                context_switch_cycles,
                write_transfer_extra_cycles: write_t.saturating_sub(read_t),
            },
            quantum_cycles,
            migration_cycles,
            wake_same_cycles,
            wake_other_cycles,
            wake_other_cpu_cycles,
            setaffinity_cycles,
            defaulted,
        })
    }
}

impl MachineProfile {
    /// A well-formed profile of round figures on `topology` (every CPU
    /// allowed) for tests and examples: a 2.5 GHz clock (0.4 ns), 1.2 ns
    /// per pass access, 1.6 ns L1, 5 ns L2, 20 ns LLC and 90 ns memory
    /// loads, 60/50 ns write/read transfers, 2 µs and 20 µs wake-ups (12 µs
    /// of the latter on CPUs), a
    /// 1.5 µs context switch, 4 µs migration, 1 µs `sched_setaffinity` and
    /// a 3 ms slice.
    pub fn example(topology: Topology) -> MachineProfile {
        let c = |ns: f64| Cost::from_rounds(&[ns * 0.95, ns, ns * 1.1]);
        MachineProfile {
            version: PROFILE_VERSION,
            host: ProfileHost {
                model_name: "example".into(),
                allowed: topology.cpus().clone(),
                ..ProfileHost::default()
            },
            topology,
            costs: Costs {
                cycle: c(0.4),
                pass_access: c(1.2),
                l1_hit: c(1.6),
                l2_hit: c(5.0),
                llc_hit: c(20.0),
                memory_fetch: c(90.0),
                line_write_transfer: c(60.0),
                line_read_transfer: c(50.0),
                line_contended: c(70.0),
                wake_same_cpu: c(2_000.0),
                wake_other_cpu: c(20_000.0),
                wake_other_cpu_time: c(12_000.0),
                context_switch: c(1_500.0),
                migration: c(4_000.0),
                setaffinity: c(1_000.0),
                timeslice: c(3_000_000.0),
            },
        }
    }
}

impl Calibration {
    /// `ns` in cycles of this clock (at least 1).
    pub fn cycles(&self, ns: f64) -> u64 {
        ((ns / self.cycle_ns).round() as u64).max(1)
    }

    /// `cycles` in seconds of this clock.
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 * self.cycle_ns * 1e-9
    }
}

/// The L1 data, L2 and LLC sizes of `cpu`'s caches in `topo`, when known:
/// the L1 data cache and the largest level-2 cache among the domains
/// holding `cpu` up to its core, and the largest cache of its LLC domain.
pub fn cache_sizes(
    topo: &Topology,
    cpu: dfsched_core::CpuId,
) -> (Option<u64>, Option<u64>, Option<u64>) {
    let mut l1 = None;
    let mut l2 = None;
    let mut llc = None;
    for d in topo.ancestors(cpu) {
        for c in &d.caches {
            match c.level {
                1 if c.kind != "Instruction" => l1 = l1.or(c.size_bytes),
                2 if d.level <= Level::L2 => l2 = l2.max(c.size_bytes),
                _ => {}
            }
            if d.level == Level::Llc && c.level >= 2 {
                llc = llc.max(c.size_bytes);
            }
        }
    }
    (l1, l2, llc)
}

#[cfg(test)]
mod tests;
