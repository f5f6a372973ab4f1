//! The engine's tunables, each with its default and unit, and the placement
//! [`Policy`] for tasks that give no DF.
//!
//! Invariant: a [`Config`] the engine holds passed [`Config::validate`].
//! A [`Policy`] is spelled the same in serde, [`FromStr`] and [`fmt::Display`]
//! (`data-affinity`, `co-thread`), so a name printed by one parses in all.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What the engine does with a task that has no DF (it never hinted, or
/// hinted `next = None`). Tasks with a DF are in their DF's group under
/// every policy.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Data affinity only (Pinter & Zalmanovici §4.1): a task with no DF is
    /// unmanaged — it runs on its allowed set unless the balancer moves it.
    #[default]
    DataAffinity,
    /// Co-thread grouping (paper 001 §III) for tasks with no DF: they form
    /// their application's co-thread group (one per [`AppId`]), homed on one
    /// CPU under heavy load and on one cache domain under light load. Hinted
    /// tasks are still grouped by their DF.
    ///
    /// [`AppId`]: crate::AppId
    CoThread,
}

impl Policy {
    /// Every policy, in declaration order.
    pub const ALL: [Policy; 2] = [Policy::DataAffinity, Policy::CoThread];

    /// The policy's name: `data-affinity` or `co-thread` (as serde spells it).
    pub fn name(self) -> &'static str {
        match self {
            Policy::DataAffinity => "data-affinity",
            Policy::CoThread => "co-thread",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is none of [`Policy::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}: expected data-affinity or co-thread")]
pub struct PolicyParseError(pub String);

impl FromStr for Policy {
    type Err = PolicyParseError;

    /// Parses `data-affinity` or `co-thread`, exactly (case matters, as in
    /// serde, so every accepted spelling round-trips).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| PolicyParseError(s.to_string()))
    }
}

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
    /// What becomes of tasks with no DF. Default [`Policy::DataAffinity`]
    /// (they are unmanaged); see [`Policy`].
    pub policy: Policy,
    /// Whether the balancer may move an unmanaged task (one in no group) to
    /// a single CPU when no group move narrows an imbalance (its step 3).
    /// Default true, as in the paper's in-kernel balancer, where moving a
    /// task is one migration.
    ///
    /// The Linux runtime turns it off: there a move is an affinity mask, a
    /// pin that lasts until the next move, and the kernel already balances
    /// tasks it may move — every ~4 ms, on run-queue lengths this engine
    /// sees only as a sample every 100 ms. Pinned, an unmanaged thread
    /// could not go back when that sample was a passing burst:
    /// `dfsched bench spin` (3 processes × 2 independent threads on 2
    /// CPUs) ran at 0.90× vanilla under data-affinity with two threads
    /// pinned this way.
    pub move_unmanaged: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            imbalance_pct: 25,
            split_after_passes: 10,
            heavy_load_milli: 2000,
            max_moves_per_pass: 16,
            policy: Policy::DataAffinity,
            move_unmanaged: true,
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
    /// A running engine's policy cannot change (`Engine::set_config`).
    #[error("the policy cannot change from {from} to {to} on a running engine")]
    PolicyChange {
        /// The engine's policy.
        from: Policy,
        /// The refused one.
        to: Policy,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_through_fromstr_display_and_serde() {
        for p in Policy::ALL {
            assert_eq!(p.to_string().parse::<Policy>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
            assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p);
        }
        assert_eq!("co-thread".parse::<Policy>(), Ok(Policy::CoThread));
        assert_eq!("data-affinity".parse::<Policy>(), Ok(Policy::DataAffinity));
    }

    #[test]
    fn unknown_policy_names_are_refused() {
        for bad in [
            "",
            "none",
            "CoThread",
            "co_thread",
            "Co-Thread",
            " co-thread",
        ] {
            let err = bad.parse::<Policy>().unwrap_err();
            assert_eq!(err, PolicyParseError(bad.to_string()));
            assert!(err.to_string().contains("co-thread"));
            assert!(serde_json::from_str::<Policy>(&format!("{bad:?}")).is_err());
        }
    }

    #[test]
    fn default_policy_is_data_affinity() {
        assert_eq!(Policy::default(), Policy::DataAffinity);
        assert_eq!(Config::default().policy, Policy::DataAffinity);
    }

    #[test]
    fn config_round_trips_through_serde_with_each_policy() {
        for policy in Policy::ALL {
            let cfg = Config {
                policy,
                imbalance_pct: 40,
                ..Config::default()
            };
            cfg.validate().unwrap();
            let json = serde_json::to_string(&cfg).unwrap();
            assert!(json.contains(&format!("\"policy\":\"{policy}\"")), "{json}");
            assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), cfg);
        }
    }

    #[test]
    fn config_without_policy_field_defaults_to_data_affinity() {
        let cfg: Config = serde_json::from_str(r#"{"imbalance_pct": 30}"#).unwrap();
        assert_eq!(cfg.policy, Policy::DataAffinity);
        assert_eq!(cfg.imbalance_pct, 30);
        let cfg: Config = serde_json::from_str(r#"{"policy": "co-thread"}"#).unwrap();
        assert_eq!(
            cfg,
            Config {
                policy: Policy::CoThread,
                ..Config::default()
            }
        );
    }

    #[test]
    fn config_with_unknown_policy_is_refused() {
        let err = serde_json::from_str::<Config>(r#"{"policy": "round-robin"}"#).unwrap_err();
        assert!(err.to_string().contains("round-robin"), "{err}");
    }
}
