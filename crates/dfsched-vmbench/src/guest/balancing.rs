//! The balancer's checks of the plan (`checks::PLAN` runs them in its
//! order): an imbalance across LLCs repaired by a whole-group move or a
//! split, and a split made only after the configured persistence. Apart
//! from `checks.rs` because both build load on purpose (hogs, a heavy-load
//! threshold) and read the runtime's own counters from the workload's
//! output, not only placement from `/proc`.
//!
//! Invariant: as every check, each leaves no process behind (children are
//! killed on drop).

use super::checks::{describe, df_step, group_llcs, hogs, pin_at_exec, start_workload, SETTLE};
use super::observe::{domain_of, Thread};
use super::workload::Running;
use super::{poll, Ctx, Step};
use dfsched_core::CpuSet;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// The deadline of the balancer's repair: until the runtime's per-thread
/// `/proc` refresh (`procfs/refresh.rs`, budgeted per pass, its period
/// stretched with its work) has seen the hogs twice, they weigh as one
/// other group in all; under TCG that takes tens of seconds.
const REPAIR: Duration = Duration::from_secs(600);

/// Spinning threads of another process pinned to each CPU of the hogged
/// LLC: two per CPU, so that the imbalance is clear of the balancer's
/// threshold (one whole task) even as the runtime estimates outside load.
/// With one per CPU it sat on the threshold: beside a group of 2 spread
/// over an LLC of 4 the true loads are 1.5 and 0.5 tasks per CPU, a
/// difference of exactly one task, and the runtime's estimate of each hog
/// is below 1000 by design (the sustained window's minimum over 3 samples,
/// a CPU shared with our threads read as part-busy: 631–888 per hog CPU in
/// a run on `4llc-16`), so the balancer saw no imbalance and the home rule
/// saw room in the LLC (3.2 hogs + 2 ≤ 4 + 1) whenever the estimate dipped:
/// repairs after 13–244 s, or none in 600 s.
const HOGS_PER_CPU: usize = 2;

/// One group of 2 per LLC; then [`HOGS_PER_CPU`] spinning threads of
/// another process pinned to each CPU of the first group's LLC: the
/// balancer repairs the imbalance, by moving a group that was there out of
/// it whole (its members share one home in another LLC; across nodes on a
/// NUMA preset, where LLCs are nodes), or by splitting one, which its design
/// allows after `split_after_passes` imbalanced passes; the detail says
/// which, and the runtime's balancer counters and outside-load estimate.
pub(super) fn balancer_repairs_llc_imbalance(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let (dfs, per_df) = (e.llcs.len(), 2);
    let w = start_workload(ctx, dfs, per_df)?;
    let mut straddles = 0;
    let before = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &e.online, false, &mut straddles)
    })?;
    let at = group_llcs(&w.groups()?, &e.llcs)?;
    let llc = *at.values().next().ok_or("no group")?;
    let was_there: Vec<u64> = at
        .iter()
        .filter(|(_, &i)| i == llc)
        .map(|(&df, _)| df)
        .collect();
    // Our threads whose mask lies inside the hogged LLC.
    let inside = |groups: &BTreeMap<u64, Vec<Thread>>| {
        groups
            .values()
            .flatten()
            .filter(|t| t.mask.is_subset(&e.llcs[llc]))
            .count()
    };
    let first = inside(&w.groups()?);
    let mut hogs_running = Vec::new();
    for c in e.llcs[llc].iter() {
        hogs_running.push(hogs(ctx, HOGS_PER_CPU, &std::iter::once(c).collect())?);
    }
    let after = poll(REPAIR, || {
        let groups = match w.groups() {
            Ok(g) => g,
            Err(e) => return Step::Broken(e),
        };
        let seen = describe(&groups);
        for df in &was_there {
            let Some(ts) = groups.get(df) else {
                return Step::Broken(format!("df{df} vanished: {seen}"));
            };
            let whole = ts.iter().all(|t| t.mask == ts[0].mask);
            let moved = domain_of(&e.llcs, &ts[0].mask).is_some_and(|i| i != llc);
            if whole && moved {
                return Step::Holds(format!("df{df} moved whole: {seen}"));
            }
        }
        if inside(&groups) < first {
            return Step::Holds(format!(
                "a group was split (after persistence, by design): {seen}"
            ));
        }
        Step::NotYet(format!(
            "none of our {first} threads has left LLC {}: {seen}",
            e.llcs[llc]
        ))
    });
    let after = match after {
        Ok(a) => a,
        Err(why) => {
            // What the runtime saw, for whoever reads the failure.
            let stats = match w.finish(60) {
                Ok(out) | Err(out) => out,
            };
            let stats: String = stats.chars().take(3000).collect();
            return Err(format!(
                "before the hogs: {before}; then: {why}; the workload's stats: {stats}"
            ));
        }
    };
    // The stats while the hogs still run: their last external sample.
    let stats = w.finish(60)?;
    drop(hogs_running);
    Ok(format!(
        "before: {before}; {HOGS_PER_CPU} hogs on each CPU of {}: {after}; runtime: {}",
        e.llcs[llc],
        stats_summary(&stats)
    ))
}

/// The balancer's counters from a workload's stats JSON (its last stdout
/// line), for the detail of a check about the balancer.
fn stats_summary(stdout: &str) -> String {
    let Some(v) = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    else {
        return "no stats".into();
    };
    let e = &v["engine"];
    format!(
        "passes {} group_moves {} splits {} skipped(no_gain {} no_dest {} not_allowed {}) \
         external: samples {} refreshes {} last {} per-cpu {}",
        e["balance_passes"],
        e["group_moves"],
        e["splits"],
        e["balance_skipped_no_gain"],
        e["balance_skipped_no_destination"],
        e["balance_skipped_not_allowed"],
        v["external_load_samples"],
        v["external_refreshes"],
        v["external_load_milli"],
        v["external_load_per_cpu_milli"],
    )
}

/// The settings of `split_after_passes` the persistence check runs with:
/// low and high.
const SPLIT_AFTER: [u32; 2] = [3, 30];

/// A group that warrants a split (`dfsched-vmcheck split N`: one DF of 2
/// threads packed on one CPU by a heavy-load threshold of one task per
/// CPU, on 2 CPUs of the first LLC, the other CPU idle: no whole-group move
/// narrows that, a split does) is split only after `split_after_passes`
/// imbalanced passes, with the setting low and high: the split is seen in
/// the kernel (the two threads on two CPUs), it came at an imbalanced pass
/// no earlier than the setting (the workload's own counters), and with the
/// low setting before the high one's.
pub(super) fn split_after_persistence(ctx: &Ctx) -> Result<String, String> {
    let two: CpuSet = ctx.preset.expected.llcs[0].iter().take(2).collect();
    if two.len() < 2 {
        return Err(format!("needs 2 CPUs in an LLC, the first is {two}"));
    }
    let mut seen = Vec::new();
    let mut split_at = Vec::new();
    for n in SPLIT_AFTER {
        let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
        cmd.args(["split", &n.to_string()]);
        pin_at_exec(&mut cmd, &two);
        let w = Running::start(cmd, &format!("split workload, split_after_passes {n}"))?;
        let mut packed = false;
        let state = poll(SETTLE, || {
            let groups = match w.groups() {
                Ok(g) => g,
                Err(e) => return Step::Broken(e),
            };
            let ts = groups.get(&1).cloned().unwrap_or_default();
            let masks: Vec<String> = ts.iter().map(|t| t.mask.to_string()).collect();
            if let Some(t) = ts.iter().find(|t| !t.mask.is_subset(&two)) {
                return Step::Broken(format!("tid {} on {} outside {two}", t.tid, t.mask));
            }
            if ts.len() != 2 {
                return Step::NotYet(format!("{} of 2 threads: {masks:?}", ts.len()));
            }
            let single = ts.iter().all(|t| t.mask.len() == 1);
            if single && ts[0].mask == ts[1].mask {
                packed = true;
                return Step::NotYet(format!("packed on {}", ts[0].mask));
            }
            if single {
                Step::Holds(format!("split: {masks:?}"))
            } else {
                Step::NotYet(format!("{masks:?}"))
            }
        })
        .map_err(|why| format!("split_after_passes {n}: {why}"))?;
        let out = w.finish(60)?;
        let field = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let (Some(before), Some(at)) = (field("no-split-up-to "), field("split-at ")) else {
            return Err(format!(
                "split_after_passes {n}: the workload reported no split: {}",
                out.lines().take(3).collect::<Vec<_>>().join(" | ")
            ));
        };
        if at < u64::from(n) {
            return Err(format!(
                "split_after_passes {n}: split at imbalanced pass {at}, before the setting"
            ));
        }
        split_at.push(at);
        seen.push(format!(
            "split_after_passes {n}: no split up to imbalanced pass {before}, split at {at}{}, {state}",
            if packed { " (seen packed before)" } else { "" }
        ));
    }
    if split_at[0] >= split_at[1] {
        return Err(format!(
            "the low setting split no sooner than the high one: {}",
            seen.join("; ")
        ));
    }
    Ok(seen.join("; "))
}
