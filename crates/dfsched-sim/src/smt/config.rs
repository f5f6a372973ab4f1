//! The SMT machine and model settings, with the paper's values as defaults
//! (Table 1, §4.1) and every choice the paper leaves open named here.

use super::cache::LevelShape;
use super::mapping::Mapping;
use dfsched_core::activity::{Overlap, Threshold, MAX_BITS};
use dfsched_core::smt_pair::PairWeights;
use serde::{Deserialize, Serialize};

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SmtConfigError {
    /// A cache with no way, or whose sets are not a power of two, or (the
    /// L2) fewer than the super-sets.
    #[error(
        "{level}: {sets} sets must be a power of two and a multiple of {super_sets} super-sets"
    )]
    BadSets {
        /// Which cache.
        level: &'static str,
        /// Its sets.
        sets: u32,
        /// Super-sets asked for.
        super_sets: u32,
    },
    /// A line size that is not a power of two.
    #[error("{level}: line size {bytes} is not a power of two")]
    BadLine {
        /// Which cache.
        level: &'static str,
        /// Its line size.
        bytes: u32,
    },
    /// Bits outside 1..=8.
    #[error("{0} bits per super-set: 1 to {MAX_BITS}")]
    BadBits(u8),
    /// No core, no context, no quantum or no time.
    #[error("cores, contexts, quanta and the quantum must all be at least 1")]
    Empty,
    /// More threads or contexts than the owner tags hold.
    #[error("at most 1000 threads and 64 contexts per core")]
    TooBig,
    /// A workload without threads.
    #[error("the workload has no thread")]
    NoThreads,
    /// An exhaustive search too large to run.
    #[error("best-static: {0} pairings is too many to try (limit 2000)")]
    TooManyPartitions(u64),
    /// A threshold no vector can be made with.
    #[error("threshold: {0}")]
    BadThreshold(dfsched_core::activity::ActivityError),
    /// A timing the model cannot run: CPI 0 (an L1 hit would cost nothing
    /// and a context's clock could stand still), an issue slowdown outside
    /// 1.0–8.0, an L2 hit slower than memory, or memory over 100 000 cycles.
    #[error("timing: CPI {cpi} (1 to 1000), issue slowdown {issue_slowdown_milli}/1000 (1000 to 8000), L2 hit {l2_hit_cycles} and memory {memory_cycles} cycles (an L2 hit no slower than memory, memory at most 100000)")]
    BadTiming {
        /// Cycles per instruction.
        cpi: u32,
        /// Slowdown beside a busy sibling, in thousandths.
        issue_slowdown_milli: u32,
        /// Extra cycles of an L2 hit.
        l2_hit_cycles: u32,
        /// Extra cycles of an L2 miss.
        memory_cycles: u32,
    },
}

/// What the activity counters count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Monitor {
    /// Requests that reach the L2 (the L1's misses): the paper's "cache
    /// request bus".
    L2Accesses,
    /// L2 misses (requests to memory).
    L2Misses,
}

/// Which address the counters see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VectorSource {
    /// The physical address, as hardware on the cache's request bus sees.
    Physical,
    /// The virtual address, as the paper's Valgrind profiles record.
    Virtual,
}

/// The threshold rule: a [`Threshold`], or one super-set's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdRule {
    /// Hot at as many events per quantum as one L2 super-set has lines
    /// (the default; see `dfsched_core::activity`).
    SuperSetLines,
    /// An explicit rule.
    Fixed(Threshold),
}

/// Cycle costs of the IPC model.
///
/// A context's clock advances by, per access,
/// `instrs · cpi · (issue_slowdown if its sibling is busy, else 1)` plus
/// the latency of where the data came from (L1 hit: 0 extra, L2 hit:
/// `l2_hit_cycles`, memory: `memory_cycles`). Stalls are not overlapped
/// within a context (no memory-level parallelism) but the sibling runs
/// during them: that is what SMT buys. IPC alone is the same thread's
/// instructions over the cycles the same model gives it alone on a core
/// (its own warm caches, no slowdown).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Cycles per instruction of a context running alone.
    pub cpi: u32,
    /// Slowdown of the compute part when the sibling context is busy
    /// (shared issue slots), in thousandths (1500 = 1.5×).
    pub issue_slowdown_milli: u32,
    /// Extra cycles of an L1 miss that hits the L2.
    pub l2_hit_cycles: u32,
    /// Extra cycles of an L2 miss.
    pub memory_cycles: u32,
}

impl Default for Timing {
    fn default() -> Self {
        // The paper gives no latencies; these are a 2004 Pentium 4's order
        // of magnitude.
        Timing {
            cpi: 1,
            issue_slowdown_milli: 1500,
            l2_hit_cycles: 12,
            memory_cycles: 200,
        }
    }
}

/// The machine and the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SmtConfig {
    /// SMT cores (each its own L1 and L2).
    pub cores: u32,
    /// Hardware contexts per core, sharing its L1 and L2.
    pub contexts: u32,
    /// The L1 data cache.
    pub l1: LevelShape,
    /// The unified L2.
    pub l2: LevelShape,
    /// Super-sets per cache.
    pub super_sets: u32,
    /// Bits per super-set of the activity vectors.
    pub bits: u8,
    /// The threshold rule.
    pub threshold: ThresholdRule,
    /// What is counted.
    pub monitor: Monitor,
    /// Which address the counters see.
    pub vector_source: VectorSource,
    /// How overlap is measured.
    pub overlap: Overlap,
    /// The picker's weights.
    pub weights: PairWeights,
    /// How pages map.
    pub mapping: Mapping,
    /// Cycles per scheduling interval.
    pub quantum_cycles: u64,
    /// Intervals simulated.
    pub quanta: u32,
    /// The IPC model.
    pub timing: Timing,
    /// Seed of every random choice (mapping, random policy, shuffles).
    pub seed: u64,
}

impl Default for SmtConfig {
    /// The paper's §4.1 machine: one 2-way SMT core, an 8 KiB 2-way L1-D
    /// with 64-byte lines and a 512 KiB 8-way L2 with 128-byte lines
    /// (Table 1), 32 super-sets, 1-million-cycle intervals, identity
    /// mapping; 200 intervals rather than the paper's 1000.
    fn default() -> Self {
        SmtConfig {
            cores: 1,
            contexts: 2,
            l1: LevelShape {
                bytes: 8 << 10,
                ways: 2,
                line_bytes: 64,
            },
            l2: LevelShape {
                bytes: 512 << 10,
                ways: 8,
                line_bytes: 128,
            },
            super_sets: 32,
            bits: 1,
            threshold: ThresholdRule::SuperSetLines,
            monitor: Monitor::L2Accesses,
            vector_source: VectorSource::Physical,
            overlap: Overlap::Min,
            weights: PairWeights::default(),
            mapping: Mapping::Identity,
            quantum_cycles: 1_000_000,
            quanta: 200,
            timing: Timing::default(),
            seed: 1,
        }
    }
}

impl SmtConfig {
    /// The paper's machine with a quarter of its L2 (128 KiB: 128 sets, 4
    /// per super-set, as the paper's Fig. 1 text says) and 250 000-cycle
    /// intervals: the same shape, fast enough for tests in debug builds.
    pub fn quarter() -> Self {
        SmtConfig {
            l2: LevelShape {
                bytes: 128 << 10,
                ways: 8,
                line_bytes: 128,
            },
            quantum_cycles: 250_000,
            quanta: 60,
            ..SmtConfig::default()
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), SmtConfigError> {
        if self.cores == 0 || self.contexts == 0 || self.quanta == 0 || self.quantum_cycles == 0 {
            return Err(SmtConfigError::Empty);
        }
        if self.contexts > 64 {
            return Err(SmtConfigError::TooBig);
        }
        if !(1..=MAX_BITS).contains(&self.bits) {
            return Err(SmtConfigError::BadBits(self.bits));
        }
        let t = self.timing;
        if !(1..=1000).contains(&t.cpi)
            || !(1000..=8000).contains(&t.issue_slowdown_milli)
            || t.memory_cycles > 100_000
            || t.l2_hit_cycles > t.memory_cycles
        {
            return Err(SmtConfigError::BadTiming {
                cpi: t.cpi,
                issue_slowdown_milli: t.issue_slowdown_milli,
                l2_hit_cycles: t.l2_hit_cycles,
                memory_cycles: t.memory_cycles,
            });
        }
        // The threshold is judged by the one thing it is for: making a
        // vector (zero, or a majority over 100 %, cannot).
        dfsched_core::activity::ActivityCounters::new(1)
            .vector(self.bits, self.threshold())
            .map_err(SmtConfigError::BadThreshold)?;
        for (level, s) in [("L1", self.l1), ("L2", self.l2)] {
            if !s.line_bytes.is_power_of_two() || s.line_bytes < 8 {
                return Err(SmtConfigError::BadLine {
                    level,
                    bytes: s.line_bytes,
                });
            }
            // The L1 is cut into as many super-sets as it has sets when it
            // has fewer than asked (it is not monitored).
            let sets = if s.ways == 0 { 0 } else { s.sets() };
            if !sets.is_power_of_two()
                || !self.super_sets.is_power_of_two()
                || (level == "L2" && sets < self.super_sets)
            {
                return Err(SmtConfigError::BadSets {
                    level,
                    sets,
                    super_sets: self.super_sets,
                });
            }
        }
        Ok(())
    }

    /// The top-bit threshold in events per quantum.
    pub fn threshold(&self) -> Threshold {
        match self.threshold {
            ThresholdRule::SuperSetLines => Threshold::Absolute {
                hot: (self.l2.lines() / u64::from(self.super_sets)).max(1) as u32,
            },
            ThresholdRule::Fixed(t) => t,
        }
    }

    /// The core-quanta at which a context can change thread (every quantum
    /// after the first, on every core; at least 1): what
    /// [`RunReport::context_changes`](super::metrics::RunReport) is taken
    /// per.
    pub fn switch_points(&self) -> u64 {
        (u64::from(self.cores) * u64::from(self.quanta.saturating_sub(1))).max(1)
    }
}

impl SmtConfig {
    /// Where synthetic kernels lay their lines in this machine's L2.
    pub fn layout(&self) -> super::workload::Layout {
        super::workload::Layout {
            way_bytes: u64::from(self.l2.sets()) * u64::from(self.l2.line_bytes),
            super_sets: self.super_sets,
            line_bytes: self.l2.line_bytes,
        }
    }

    /// The synthetic kernels' shape on this machine: working sets of ¾ of
    /// a slice, 4 instructions per access, and phases of about
    /// `phase_quanta` quanta of the thread's own progress — estimated at
    /// the speed of a co-running thread that hits in the L2, so that a
    /// phase lasts `phase_quanta` quanta when the pairing is right.
    pub fn kernel_shape(&self, phase_quanta: u64) -> super::workload::KernelShape {
        let instrs = 4u64;
        let t = self.timing;
        let milli_per_access = instrs * u64::from(t.cpi) * u64::from(t.issue_slowdown_milli)
            + u64::from(t.l2_hit_cycles) * 1000;
        super::workload::KernelShape {
            layout: self.layout(),
            l2_ways: self.l2.ways,
            ws_fraction_of_slice: 0.75,
            instrs_per_access: instrs as u32,
            phase_accesses: (phase_quanta * self.quantum_cycles * 1000 / milli_per_access).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timing with CPI 0 would let a context's clock stand still on L1
    /// hits (a run that never ends); the others are outside the model.
    #[test]
    fn validate_refuses_timings_the_model_cannot_run() {
        let with = |t: Timing| {
            SmtConfig {
                timing: t,
                ..SmtConfig::quarter()
            }
            .validate()
        };
        let d = Timing::default();
        assert!(with(d).is_ok());
        for bad in [
            Timing { cpi: 0, ..d },
            Timing { cpi: 1001, ..d },
            Timing {
                issue_slowdown_milli: 999,
                ..d
            },
            Timing {
                issue_slowdown_milli: 8001,
                ..d
            },
            Timing {
                l2_hit_cycles: 201,
                ..d
            },
            Timing {
                memory_cycles: 100_001,
                ..d
            },
        ] {
            assert!(
                matches!(with(bad), Err(SmtConfigError::BadTiming { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn validate_refuses_shapes_the_model_cannot_cut_into_super_sets() {
        assert!(SmtConfig::default().validate().is_ok());
        assert!(SmtConfig::quarter().validate().is_ok());
        let bad_l2 = |l2: LevelShape| {
            SmtConfig {
                l2,
                ..SmtConfig::default()
            }
            .validate()
        };
        let l2 = SmtConfig::default().l2;
        assert!(
            bad_l2(LevelShape { ways: 0, ..l2 }).is_err(),
            "no way: no division by zero"
        );
        assert!(
            bad_l2(LevelShape {
                bytes: 384 << 10,
                ..l2
            })
            .is_err(),
            "384 sets"
        );
        assert!(
            bad_l2(LevelShape {
                bytes: 2 << 10,
                ..l2
            })
            .is_err(),
            "2 sets < 32 super-sets"
        );
        assert!(bad_l2(LevelShape {
            line_bytes: 96,
            ..l2
        })
        .is_err());
        // A tiny L1 is cut into as many super-sets as it has sets.
        let tiny_l1 = LevelShape {
            bytes: 1 << 10,
            ways: 2,
            line_bytes: 64,
        };
        assert!(SmtConfig {
            l1: tiny_l1,
            ..SmtConfig::default()
        }
        .validate()
        .is_ok());
        assert!(SmtConfig {
            bits: 0,
            ..SmtConfig::default()
        }
        .validate()
        .is_err());
        assert!(SmtConfig {
            quanta: 0,
            ..SmtConfig::default()
        }
        .validate()
        .is_err());
        // The default threshold is one L2 super-set's lines: 4096 / 32.
        assert_eq!(
            SmtConfig::default().threshold(),
            Threshold::Absolute { hot: 128 }
        );
    }
}
