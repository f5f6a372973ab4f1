//! What things cost, in CPU cycles.
//!
//! Hit latencies belong to each cache level (see
//! [`crate::machine::CacheLevelConfig`]); everything that leaves the caches
//! is priced here. Defaults are round figures for a current x86 server core
//! at about 3 GHz; they set the ratios that matter (a miss is tens of hits,
//! a context switch is thousands of cycles), not any one machine.

use serde::{Deserialize, Serialize};

/// A count of CPU cycles.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cycles(pub u64);

impl std::ops::Add for Cycles {
    type Output = Cycles;
    #[inline]
    fn add(self, o: Cycles) -> Cycles {
        Cycles(self.0 + o.0)
    }
}

impl std::ops::AddAssign for Cycles {
    #[inline]
    fn add_assign(&mut self, o: Cycles) {
        self.0 += o.0;
    }
}

/// Prices of the events beyond a cache hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostModel {
    /// A line fetched from memory because no cache on the CPU's path held
    /// it. Default 200 cycles (about 70 ns).
    pub memory_cycles: u64,
    /// A line fetched from another cache that held it dirty (a coherence
    /// transfer, cache to cache). Default 100 cycles.
    pub coherence_transfer_cycles: u64,
    /// Extra cost of a write to a line other caches share: the invalidation
    /// round trip before the write may complete. Default 60 cycles.
    pub invalidate_cycles: u64,
    /// A dirty line evicted and written back. Default 50 cycles (write-backs
    /// are buffered, so cheaper than a fetch, but they use the bus).
    pub writeback_cycles: u64,
    /// Switching a CPU from one task to another, cache effects excluded
    /// (those are simulated). Default 3000 cycles (about 1 µs).
    pub context_switch_cycles: u64,
    /// Extra cost of a *write* that takes a line another cache holds dirty,
    /// beyond [`CostModel::coherence_transfer_cycles`] (a read-for-ownership
    /// costs more than a read on some machines; a machine profile measures
    /// both). Default 0: a write transfer costs what a read transfer does.
    #[serde(default)]
    pub write_transfer_extra_cycles: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            memory_cycles: 200,
            coherence_transfer_cycles: 100,
            invalidate_cycles: 60,
            writeback_cycles: 50,
            context_switch_cycles: 3000,
            write_transfer_extra_cycles: 0,
        }
    }
}
