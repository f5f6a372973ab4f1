//! What `dfsched top` shows, on the wire: a process's [`Detail`] (its
//! policy, groups with their homes, members and runnable counts, its moves
//! and splits, and its last balancer pass), sent by its runtime to the
//! agent only while someone watches, and the agent's [`TopView`] of every
//! process it serves plus the per-CPU load, ours and others'.
//!
//! ```text
//!   dfsched top ──{"v":2,"req":"top"}──► agent: watched for WATCH_FOR
//!   runtime ──report{…,"watchable":true}──► agent
//!           ◄──view{…,"watch":true}──────── (someone watches)
//!   runtime ──report{…,"watchable":true,"detail":{…}}──► agent keeps it
//!   dfsched top ◄──{"reply":{"top":{cpus, processes[detail]}}}
//! ```
//!
//! Costs nothing unwatched: a runtime gathers and sends a detail only when
//! its last view said `watch`, which the agent says only within
//! [`WATCH_FOR`] of a `top` request. Bounded: a detail lists at most
//! [`MAX_DETAIL_GROUPS`] groups (the largest first), so a report line stays
//! well under the protocol's 64 KiB; the agent refuses a larger one.
//!
//! Compatibility (protocol 2, additive, issue 13): `watchable` and `detail`
//! are sent only by runtimes that understand `watch`, and `watch` only to
//! them; an older agent refuses a report carrying `watchable` as malformed,
//! and the runtime then reports without it on that connection (as it does
//! for `weighed`). An older agent answers `top` as malformed; `dfsched top`
//! says the agent is too old.
//!
//! The body (issue 14, additive): a detail's `body` names what carries out
//! the process's placements, `"scx"` (dfsched's sched_ext scheduler) or
//! `"affinity"` (masks). A missing `body` means affinity, and the field is
//! left out when it is affinity, so that a peer from before it meets it only
//! from a runtime on the scx body: an older agent refuses such a report as
//! malformed, and the runtime sends its details without `body` on that
//! connection from then on (its first step back, before `watchable`; the
//! process then shows as affinity); an older `dfsched top` cannot read a
//! view that names the scx body (it says the reply is malformed) and wants
//! upgrading with the agent. `dfsched top --once --json` fills the default
//! in, so its JSON names every process's body.

use crate::scx::Body;
use dfsched_core::{CpuId, CpuSet, Engine, GroupKind};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long after a `top` request the agent asks runtimes for details.
pub const WATCH_FOR: Duration = Duration::from_secs(3);

/// The most groups one detail lists (the ones with most members first).
pub const MAX_DETAIL_GROUPS: usize = 256;

/// The longest policy name a detail may carry.
const MAX_POLICY_LEN: usize = 32;

/// One process's state as its runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detail {
    /// The runtime's policy (`data-affinity`, `co-thread`).
    pub policy: String,
    /// The body that carries out its placements now (the stats JSON's
    /// `body`): absent = affinity (a runtime from before the field), and
    /// left out when affinity (module doc).
    #[serde(default, skip_serializing_if = "Body::is_affinity")]
    pub body: Body,
    /// Threads registered with the runtime.
    pub threads: u32,
    /// Its groups, the largest first, at most [`MAX_DETAIL_GROUPS`].
    pub groups: Vec<GroupTop>,
    /// Groups left out of `groups` by the bound.
    pub groups_omitted: u32,
    /// Whole-group moves by its balancer since it started.
    pub group_moves: u64,
    /// Single-thread moves.
    pub task_moves: u64,
    /// Group splits.
    pub splits: u64,
    /// Group re-homes by the home rule.
    pub rehomes: u64,
    /// Balancer passes.
    pub passes: u64,
    /// The last balancer pass, if one ran.
    pub last_pass: Option<PassTop>,
}

/// One group of a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupTop {
    /// The engine's group id.
    pub id: u64,
    /// Its application.
    pub app: u64,
    /// Its DF; `None` for the co-thread group.
    pub df: Option<u64>,
    /// Its home's CPUs.
    pub home: CpuSet,
    /// Its members.
    pub members: u32,
    /// Members runnable.
    pub runnable: u32,
}

/// What a balancer pass saw and did (the core's `BalanceReport`, in part).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassTop {
    /// Whether it found an imbalance.
    pub imbalanced: bool,
    /// The busiest CPU when it started balancing.
    pub busiest: Option<CpuId>,
    /// The idlest.
    pub idlest: Option<CpuId>,
    /// max − min load before, thousandths.
    pub spread_before_milli: u64,
    /// max − min load after, thousandths.
    pub spread_after_milli: u64,
    /// Homes changed by the home rule.
    pub rehomes: u64,
    /// Whole groups moved.
    pub group_moves: u32,
    /// Single threads moved.
    pub task_moves: u32,
    /// Whether a group was split.
    pub split: bool,
}

/// The agent's answer to `top`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopView {
    /// The agent's pid.
    pub agent_pid: u32,
    /// Per CPU of the machine: our load and the others'.
    pub cpus: Vec<CpuTop>,
    /// The processes the asker may see (its own uid's; root sees all).
    pub processes: Vec<ProcessTop>,
}

/// One CPU's load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuTop {
    /// The CPU.
    pub cpu: CpuId,
    /// Σ of the registered processes' reported load, thousandths of a
    /// runnable thread.
    pub ours_milli: u64,
    /// Runnable threads of processes not under dfsched, from the agent's
    /// shared sample, thousandths; `None` without a sample.
    pub others_milli: Option<u64>,
}

/// One registered process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessTop {
    /// Its pid.
    pub pid: u32,
    /// Its uid.
    pub uid: u32,
    /// Its command name (`/proc/PID/comm`), if readable.
    pub comm: Option<String>,
    /// Its latest load report, per CPU.
    pub load_milli: Vec<(CpuId, u64)>,
    /// Its sharing set, if any.
    pub set: Option<u64>,
    /// Its latest detail, if its runtime sent one while watched.
    pub detail: Option<Detail>,
    /// How old that detail is, in milliseconds.
    pub detail_age_ms: Option<u64>,
}

impl Detail {
    /// The detail of `engine`, run under `policy`: what a runtime sends
    /// (it fills in `threads` and `body`, which the engine does not know).
    pub fn of(engine: &Engine, policy: &str) -> Detail {
        let topo = engine.topology();
        let mut groups: Vec<GroupTop> = engine
            .groups()
            .into_iter()
            .map(|g| GroupTop {
                id: g.group.0,
                app: g.app.0,
                df: match g.kind {
                    GroupKind::Df(df) => Some(df.0),
                    GroupKind::CoThread => None,
                },
                home: topo.domain(g.home).cpus.clone(),
                members: u32::try_from(g.members.len()).unwrap_or(u32::MAX),
                runnable: u32::try_from(g.runnable).unwrap_or(u32::MAX),
            })
            .collect();
        // The largest first, then by id, so the bound keeps what matters
        // and the order is stable.
        groups.sort_by_key(|g| (std::cmp::Reverse(g.members), g.id));
        let omitted = groups.len().saturating_sub(MAX_DETAIL_GROUPS);
        groups.truncate(MAX_DETAIL_GROUPS);
        let s = engine.stats();
        Detail {
            policy: policy.chars().take(MAX_POLICY_LEN).collect(),
            // The runtime knows its body; the engine does not.
            body: Body::Affinity,
            threads: 0,
            groups,
            groups_omitted: u32::try_from(omitted).unwrap_or(u32::MAX),
            group_moves: s.group_moves,
            task_moves: s.task_moves,
            splits: s.splits,
            rehomes: s.rehomes,
            passes: s.balance_passes,
            last_pass: engine.last_balance().map(|b| PassTop {
                imbalanced: b.imbalanced,
                busiest: b.busiest,
                idlest: b.idlest,
                spread_before_milli: b.spread_before_milli,
                spread_after_milli: b.spread_after_milli,
                rehomes: b.rehomes,
                group_moves: b.group_moves,
                task_moves: b.task_moves,
                split: b.split,
            }),
        }
    }

    /// Whether the agent may keep it: within the bounds, home CPUs within
    /// `cpus`. The reason if not.
    pub fn check(&self, cpus: &CpuSet) -> Result<(), String> {
        if self.groups.len() > MAX_DETAIL_GROUPS {
            return Err(format!(
                "a detail lists at most {MAX_DETAIL_GROUPS} groups, not {}",
                self.groups.len()
            ));
        }
        if self.policy.len() > MAX_POLICY_LEN {
            return Err(format!("a policy name is at most {MAX_POLICY_LEN} bytes"));
        }
        for g in &self.groups {
            if !g.home.is_subset(cpus) || g.runnable > g.members {
                return Err(format!(
                    "group {}: home {} outside the machine's CPUs {cpus}, or more runnable than members",
                    g.id, g.home
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_core::{Config, Event, Topology};

    #[test]
    fn a_detail_names_each_groups_df_home_and_members_within_the_bound() {
        let topo = Topology::test(1, 2, 2, 1);
        let mut engine = Engine::new(topo, Config::default()).unwrap();
        let mut out = Vec::new();
        let all = engine.topology().cpus().clone();
        for t in 1..=3u64 {
            let task = dfsched_core::TaskId(t);
            let app = dfsched_core::AppId(0);
            for event in [
                Event::TaskNew {
                    task,
                    app,
                    allowed: all.clone(),
                    cpu: None,
                },
                Event::Hint {
                    task,
                    app,
                    cur: None,
                    next: Some(dfsched_core::DfId(1 + t % 2)),
                },
            ] {
                engine.handle(event, &mut out).unwrap();
            }
        }
        let d = Detail::of(&engine, "data-affinity");
        assert_eq!(d.groups.len(), 2, "{d:?}");
        // The largest first: DF 2 has tasks 1 and 3.
        assert_eq!(d.groups[0].df, Some(2));
        assert_eq!(d.groups[0].members, 2);
        assert!(!d.groups[0].home.is_empty());
        d.check(engine.topology().cpus()).unwrap();
        let mut bad = d.clone();
        bad.groups[0].home = "7".parse().unwrap();
        assert!(bad.check(engine.topology().cpus()).is_err());
    }

    #[test]
    fn the_body_is_additive_a_missing_one_is_affinity() {
        // A detail from a runtime before the field parses as affinity.
        let old = r#"{"policy":"data-affinity","threads":2,"groups":[],"groups_omitted":0,"group_moves":0,"task_moves":0,"splits":0,"rehomes":0,"passes":1,"last_pass":null}"#;
        let d: Detail = serde_json::from_str(old).unwrap();
        assert_eq!(d.body, Body::Affinity);
        // Affinity is left out on the wire, so an agent or `dfsched top`
        // from before the field reads every affinity runtime's detail.
        let text = serde_json::to_string(&d).unwrap();
        assert!(!text.contains("body"), "{text}");
        assert_eq!(text, old);
        // The scx body is named, and read back.
        let scx = Detail {
            body: Body::Scx,
            ..d
        };
        let text = serde_json::to_string(&scx).unwrap();
        assert!(text.contains(r#""body":"scx""#), "{text}");
        assert_eq!(serde_json::from_str::<Detail>(&text).unwrap(), scx);
    }
}
