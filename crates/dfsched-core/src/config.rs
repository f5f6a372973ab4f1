//! The engine's tunables, each with its default and unit.

use serde::{Deserialize, Serialize};

/// Tunables of the placement policy and the balancer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// A CPU is imbalanced when its runnable load is at least this many
    /// percent above the least-loaded CPU's. Default 25, as in Linux 2.6's
    /// balancer that the paper extends.
    pub imbalance_pct: u32,
    /// Number of consecutive balancer passes that found an imbalance no whole
    /// group (or unmanaged task) move could reduce, before a group may be
    /// split. 0 disables splitting.
    ///
    /// Default 10 (one second at the runtime's 100 ms interval). A split
    /// trades the group's cache affinity for an idle CPU, and the imbalance
    /// it answers is most often a run's tail: one DF's threads finished and
    /// the other's still run. On the 2-vCPU guest `dfsched bench df` was
    /// measured on, splitting the remaining write-shared 8 KiB DF over both
    /// CPUs at such a tail made its last 0.2 s of work take 0.7 s (the
    /// threads then bounced the DF's lines between the CPUs), so only an
    /// imbalance that lasts is worth it. With 3 passes, 2 of 8 runs split
    /// at the tail and ran 1.6–3× the oracle's time.
    pub split_after_passes: u32,
    /// Runnable tasks per CPU (in thousandths) from which the machine counts
    /// as heavily loaded and a group's home is a single CPU, as in the paper.
    /// Default 2000 (two runnable tasks per CPU).
    pub heavy_load_milli: u64,
    /// At most this many moves (group moves, task moves, splits) in one
    /// balancer pass. Default 16.
    pub max_moves_per_pass: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            imbalance_pct: 25,
            split_after_passes: 10,
            heavy_load_milli: 2000,
            max_moves_per_pass: 16,
        }
    }
}

/// Why a configuration was refused. Nothing of it is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `imbalance_pct` must be in 1..=1000.
    #[error("imbalance_pct must be between 1 and 1000, not {0}")]
    ImbalancePct(u32),
    /// `heavy_load_milli` must be at least 1000 (one task per CPU).
    #[error("heavy_load_milli must be at least 1000, not {0}")]
    HeavyLoad(u64),
    /// `max_moves_per_pass` must be at least 1.
    #[error("max_moves_per_pass must be at least 1")]
    MaxMoves,
}

impl Config {
    /// Checks every field; an error leaves nothing applied.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1000).contains(&self.imbalance_pct) {
            return Err(ConfigError::ImbalancePct(self.imbalance_pct));
        }
        if self.heavy_load_milli < 1000 {
            return Err(ConfigError::HeavyLoad(self.heavy_load_milli));
        }
        if self.max_moves_per_pass == 0 {
            return Err(ConfigError::MaxMoves);
        }
        Ok(())
    }
}
