//! The checks of the plan, in the order they run (see [`PLAN`]). Each
//! reads placement back from the kernel (`/proc/PID/task/TID/status` and
//! `sched_getaffinity`, through [`observe`]) and returns what it saw: `Ok`
//! if the property held, `Err` naming what broke it.
//!
//! Invariant: a check leaves no process, cgroup or offline CPU behind for
//! the next one, whether it passed or not (children are killed on drop;
//! cgroups and CPUs are restored before returning).

use super::balancing;
use super::observe::{self, domain_of, Thread};
use super::workload::Running;
use super::{poll, Ctx, Step};
use dfsched_core::CpuSet;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// A check: `Ok(what was seen)` or `Err(what broke)`.
pub type CheckFn = fn(&Ctx) -> Result<String, String>;

/// The plan: name, the fewest LLCs the check needs to mean anything (it is
/// left out of the plan on smaller presets), and the check.
pub const PLAN: &[(&str, usize, CheckFn)] = &[
    ("topology-sysfs", 1, topology_sysfs),
    ("topology-cli-json", 1, topology_cli_json),
    ("df-groups-one-llc-each", 1, df_groups_one_llc_each),
    (
        "df-groups-spread-before-sharing",
        1,
        df_groups_spread_before_sharing,
    ),
    (
        "df-small-groups-spread-over-llcs",
        2,
        df_small_groups_spread_over_llcs,
    ),
    (
        "balancer-repairs-llc-imbalance",
        2,
        balancing::balancer_repairs_llc_imbalance,
    ),
    (
        "split-after-persistence",
        1,
        balancing::split_after_persistence,
    ),
    (
        "co-thread-light-load-one-llc",
        1,
        co_thread_light_load_one_llc,
    ),
    ("co-thread-heavy-load-packs", 1, co_thread_heavy_load_packs),
    ("cpuset-narrow-widen", 1, cpuset_narrow_widen),
    ("cpu-offline-online", 1, cpu_offline_online),
    // On one LLC a widened group is still inside it: nothing to return.
    ("cpu-online-groups-return", 2, cpu_online_groups_return),
    ("agent-several-processes", 1, agent_several_processes),
    ("bench-df-runs", 1, bench_df_runs),
    ("engine-replay", 1, super::brain::engine_replay),
    ("smt-pair-on-siblings", 1, smt_pair_on_siblings),
    (
        "smt-pair-policy-on-siblings",
        1,
        smt_pair_policy_on_siblings,
    ),
];

/// Checks that mean something only where the guest has SMT siblings: left
/// out of the plan on presets without them, as a check needing more LLCs
/// than a preset has is.
const NEEDS_SMT: &[&str] = &["smt-pair-on-siblings", "smt-pair-policy-on-siblings"];

/// Whether `check` needs SMT siblings (see [`NEEDS_SMT`]).
pub fn needs_smt(check: &str) -> bool {
    NEEDS_SMT.contains(&check)
}

/// Checks known to fail today, with why: the host reports their failure
/// without failing the run, and fails the run if one passes (so the mark
/// goes when the bug does).
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// Checks left out of the default plan, with why: they run only when named
/// with `--only` (`cargo run -p dfsched-vmbench -- run --preset P --only
/// NAME`), where they pass or fail like any other. A check goes here only
/// when its outcome under TCG does not depend on dfsched alone; it leaves
/// when that is fixed.
const OPT_IN: &[(&str, &str)] = &[];

/// Why `check` is left out of the default plan, if it is.
pub fn opt_in(check: &str) -> Option<&'static str> {
    OPT_IN
        .iter()
        .find(|(name, _)| *name == check)
        .map(|(_, why)| *why)
}

/// Why `check` is marked as a known failure, if it is.
pub fn known_failure(check: &str) -> Option<&'static str> {
    KNOWN_FAILURES
        .iter()
        .find(|(name, _)| *name == check)
        .map(|(_, why)| *why)
}

/// How long a state may take to be reached: TCG on a busy 2-CPU host runs
/// a 16-vCPU guest slowly, and this is a deadline, not a measurement.
pub(super) const SETTLE: Duration = Duration::from_secs(300);

/// The sysfs topology equals the preset's.
fn topology_sysfs(ctx: &Ctx) -> Result<String, String> {
    let seen = observe::sysfs_topology()?;
    let show = |e: &crate::preset::Expected| {
        let l = |v: &Vec<CpuSet>| {
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "online {} | llc {} | l2 {} | node {} | smt {}",
            e.online,
            l(&e.llcs),
            l(&e.l2s),
            l(&e.nodes),
            l(&e.smt)
        )
    };
    if seen == ctx.preset.expected {
        Ok(show(&seen))
    } else {
        Err(format!(
            "sysfs shows {} but the preset wants {}",
            show(&seen),
            show(&ctx.preset.expected)
        ))
    }
}

/// `dfsched topology --json` runs and its LLC and node domains are sysfs's.
fn topology_cli_json(ctx: &Ctx) -> Result<String, String> {
    let out = Command::new(ctx.bin("dfsched"))
        .args(["topology", "--json"])
        .output()
        .map_err(|e| format!("dfsched topology: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dfsched topology --json exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("not JSON: {e}"))?;
    let level_sets = |level: &str| -> Result<Vec<CpuSet>, String> {
        let mut sets: Vec<CpuSet> = v["topology"]["domains"]
            .as_array()
            .ok_or("no topology.domains")?
            .iter()
            .filter(|d| d["level"] == level)
            .map(|d| {
                d["cpus"]
                    .as_str()
                    .unwrap_or("")
                    .parse::<CpuSet>()
                    .map_err(|e| format!("{level} cpus: {e:?}"))
            })
            .collect::<Result<_, _>>()?;
        sets.sort();
        Ok(sets)
    };
    let e = &ctx.preset.expected;
    let llcs = level_sets("llc")?;
    if llcs != e.llcs {
        return Err(format!("llc domains {llcs:?}, sysfs {:?}", e.llcs));
    }
    // A node with the same CPUs as an LLC is one domain (level "llc"), so
    // each node must be some domain's CPUs, whatever its level.
    let all: Vec<CpuSet> = ["cpu", "core", "l2", "llc", "node", "machine"]
        .iter()
        .map(|l| level_sets(l))
        .collect::<Result<Vec<_>, _>>()?
        .concat();
    for node in &e.nodes {
        if !all.contains(node) {
            return Err(format!("no domain has node {node}'s CPUs: {all:?}"));
        }
    }
    let allowed = v["allowed"].as_str().unwrap_or("");
    if allowed != e.online.to_string() {
        return Err(format!("allowed {allowed:?}, online {}", e.online));
    }
    Ok(format!("llc domains {llcs:?}, allowed {allowed}"))
}

/// One line per group: `df1 0-3×4`.
pub(super) fn describe(groups: &BTreeMap<u64, Vec<Thread>>) -> String {
    groups
        .iter()
        .map(|(df, ts)| {
            let masks: Vec<String> = ts.iter().map(|t| t.mask.to_string()).collect();
            format!("df{df} [{}]", masks.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The LLC index holding each group's threads, if every group's members
/// share one mask inside one LLC; else which group does not.
pub(super) fn group_llcs(
    groups: &BTreeMap<u64, Vec<Thread>>,
    llcs: &[CpuSet],
) -> Result<BTreeMap<u64, usize>, String> {
    let mut at = BTreeMap::new();
    for (df, ts) in groups {
        let first = &ts[0].mask;
        if ts.iter().any(|t| t.mask != *first) {
            return Err(format!("df{df}'s members are not in one home"));
        }
        match domain_of(llcs, first) {
            Some(i) => at.insert(*df, i),
            None => return Err(format!("df{df} straddles LLCs: {first}")),
        };
    }
    Ok(at)
}

/// Whether `at` spreads groups over LLCs before sharing one: with no more
/// groups than LLCs each has its own, else their counts differ by ≤ 1.
fn spread(at: &BTreeMap<u64, usize>, nr_llcs: usize) -> bool {
    let mut per = vec![0usize; nr_llcs];
    for &i in at.values() {
        per[i] += 1;
    }
    let (min, max) = (per.iter().min().copied(), per.iter().max().copied());
    max.unwrap_or(0) - min.unwrap_or(0) <= 1
}

/// Tracks straddling across samples: a group caught between LLCs on this
/// many samples in a row is a straddle, not a move in progress.
const STRADDLE_SAMPLES: u32 = 4;

/// The step for a DF workload of `dfs` groups of `per_df` threads: holds
/// when every group is whole in one LLC, spread as [`spread`] says, and
/// every mask inside `allowed`.
pub(super) fn df_step(
    w: &Running,
    dfs: usize,
    per_df: usize,
    llcs: &[CpuSet],
    allowed: &CpuSet,
    require_spread: bool,
    straddles: &mut u32,
) -> Step {
    let groups = match w.groups() {
        Ok(g) => g,
        Err(e) => return Step::Broken(e),
    };
    let seen = describe(&groups);
    for t in groups.values().flatten() {
        if !t.mask.is_subset(allowed) {
            return Step::Broken(format!(
                "tid {} on {} outside {allowed}: {seen}",
                t.tid, t.mask
            ));
        }
    }
    if groups.len() != dfs || groups.values().any(|g| g.len() != per_df) {
        return Step::NotYet(format!("not every thread started: {seen}"));
    }
    match group_llcs(&groups, llcs) {
        Err(why) if why.contains("straddles") => {
            *straddles += 1;
            if *straddles >= STRADDLE_SAMPLES {
                return Step::Broken(format!("{why} on {} samples: {seen}", *straddles));
            }
            Step::NotYet(format!("{why}: {seen}"))
        }
        Err(why) => {
            *straddles = 0;
            Step::NotYet(format!("{why}: {seen}"))
        }
        Ok(at) => {
            *straddles = 0;
            if !require_spread || spread(&at, llcs.len()) {
                Step::Holds(seen)
            } else {
                Step::NotYet(format!(
                    "groups share an LLC while another has fewer: {seen}"
                ))
            }
        }
    }
}

/// `dfsched-vmcheck workload DFS PER_DF`.
pub(super) fn start_workload(ctx: &Ctx, dfs: usize, per_df: usize) -> Result<Running, String> {
    let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
    cmd.args(["workload", &dfs.to_string(), &per_df.to_string()]);
    Running::start(cmd, &format!("workload {dfs}x{per_df}"))
}

/// `dfsched-vmcheck workload DFS PER_DF --no-split`: the balancer never
/// splits a group (see [`offline_online`] for why).
fn start_unsplit_workload(ctx: &Ctx, dfs: usize, per_df: usize) -> Result<Running, String> {
    let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
    cmd.args([
        "workload",
        &dfs.to_string(),
        &per_df.to_string(),
        "--no-split",
    ]);
    Running::start(cmd, &format!("workload {dfs}x{per_df} (no splits)"))
}

/// Waits for the workload's groups to settle, then ends it; it must exit
/// 0 (no call into dfsched returned an error).
fn settle_df(ctx: &Ctx, dfs: usize, per_df: usize) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let w = start_workload(ctx, dfs, per_df)?;
    let mut straddles = 0;
    let seen = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &e.online, true, &mut straddles)
    })?;
    w.finish(60)?;
    Ok(seen)
}

/// As many DF groups as LLCs, each as big as an LLC: each group's threads
/// share one home inside one LLC, and no two groups share an LLC.
fn df_groups_one_llc_each(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    settle_df(ctx, e.llcs.len(), e.llcs[0].len())
}

/// Twice as many DF groups of 2 threads as LLCs: each group whole in one
/// LLC, two per LLC.
fn df_groups_spread_before_sharing(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    settle_df(ctx, 2 * e.llcs.len(), 2)
}

/// As many DF groups of 2 threads as LLCs: each group in an LLC of its
/// own, not two in one LLC while another is empty.
fn df_small_groups_spread_over_llcs(ctx: &Ctx) -> Result<String, String> {
    settle_df(ctx, ctx.preset.expected.llcs.len(), 2)
}

/// `dfsched-vmspin N` pinned to `cpus` (not under dfsched).
pub(super) fn hogs(ctx: &Ctx, n: usize, cpus: &CpuSet) -> Result<Running, String> {
    let mut cmd = Command::new(ctx.bin("dfsched-vmspin"));
    cmd.args([n.to_string(), "--cpus".into(), cpus.to_string()]);
    Running::start(cmd, &format!("{n} hogs on {cpus}"))
}

/// `dfsched run --policy co-thread --no-agent -- dfsched-vmspin 3` alone on
/// the machine (light load): its threads stay within one LLC.
fn co_thread_light_load_one_llc(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let p = run_spin(ctx, &["--no-agent"], 3)?;
    let seen = poll(SETTLE, || spin_step(&p, 3, &e.llcs))?;
    p.finish(60)?;
    Ok(seen)
}

/// The co-thread test of `dfsched run` on this machine, in the first LLC:
/// `dfsched run --policy co-thread --no-agent -- dfsched-vmspin 3`
/// confined (by its affinity at exec) to the first LLC, beside 6 spinning
/// threads of another process pinned to each of that LLC's other CPUs: the
/// LLC is heavily loaded (≥ 2 runnable threads per CPU) and the program's
/// group fits its fair share on the free CPU, so every thread of it must
/// end up on that CPU alone.
fn co_thread_heavy_load_packs(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let llc = e.llcs[0].clone();
    let first = llc.first().ok_or("an empty LLC")?;
    let mut hogs_running = Vec::new();
    for c in llc.iter().filter(|&c| c != first) {
        hogs_running.push(hogs(ctx, 6, &std::iter::once(c).collect())?);
    }
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args(["run", "--policy", "co-thread", "--no-agent", "--"])
        .arg(ctx.bin("dfsched-vmspin"))
        .arg("3");
    pin_at_exec(&mut cmd, &llc);
    let p = Running::start(cmd, "dfsched run co-thread vmspin 3 (heavy)")?;
    let want: CpuSet = std::iter::once(first).collect();
    let seen = poll(SETTLE, || {
        let ts = match p.threads() {
            Ok(t) => t,
            Err(e) => return Step::Broken(e),
        };
        let spin: Vec<&Thread> = ts.iter().filter(|t| t.name.starts_with("spin-")).collect();
        let shown = spin
            .iter()
            .map(|t| t.mask.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(t) = spin.iter().find(|t| !t.mask.is_subset(&llc)) {
            return Step::Broken(format!(
                "tid {} on {} outside {llc}: [{shown}]",
                t.tid, t.mask
            ));
        }
        if spin.len() == 3 && spin.iter().all(|t| t.mask == want) {
            Step::Holds(format!("[{shown}]"))
        } else {
            Step::NotYet(format!("[{shown}], want all on {want}"))
        }
    })?;
    p.finish(60)?;
    drop(hogs_running);
    Ok(format!("6 hogs on each CPU of {llc} but {want}: {seen}"))
}

/// The `smt-pair` placement (Kihm et al.'s Linux method: `dfsched
/// smt-pair`, issue 11) on real SMT siblings. `dfsched-vmspin 4` runs a main
/// thread and `spin-0`..`spin-3`; a profile (written here, as `dfsched
/// profile` would from Valgrind, which the guest lacks) gives the main thread
/// no vector, `spin-0` and `spin-3` the low half of the 32 super-sets and
/// `spin-1` and `spin-2` the high half. `dfsched smt-pair --once` must pin
/// every thread to one CPU of its own and never put two threads whose vectors
/// overlap on the siblings of one core. The kernel's own placement (every
/// mask full) and a pairing in creation order (`spin-1` with `spin-2`) both
/// fail it. Masks read back with `sched_getaffinity`.
fn smt_pair_on_siblings(ctx: &Ctx) -> Result<String, String> {
    use dfsched_core::activity::ActivityVector;
    use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
    let cores = smt_cores(ctx)?;
    const LOW: u64 = 0x0000_ffff;
    const HIGH: u64 = 0xffff_0000;
    let thread = |mask: Option<u64>| ThreadProfile {
        instructions: 1_000_000,
        vectors: mask
            .map(|m| vec![ActivityVector::from_mask(m, 32)])
            .unwrap_or_default(),
    };
    // Creation order: the main thread, then spin-0..3.
    let masks = [None, Some(LOW), Some(HIGH), Some(HIGH), Some(LOW)];
    let profile = SmtProfile {
        command: vec!["dfsched-vmspin".into(), "4".into()],
        interval_instructions: 1_000_000,
        ns_per_instruction: 1.0,
        bits: 1,
        super_sets: 32,
        threads: masks.iter().map(|&m| thread(m)).collect(),
    };
    let path = std::env::temp_dir().join("dfsched-smt-profile.json");
    let text = serde_json::to_string(&profile).map_err(|e| format!("profile: {e}"))?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cmd = Command::new(ctx.bin("dfsched-vmspin"));
    cmd.arg("4");
    let p = Running::start(cmd, "dfsched-vmspin 4")?;
    poll(SETTLE, || match p.threads() {
        Ok(ts) if ts.len() == 5 => Step::Holds(String::new()),
        Ok(ts) => Step::NotYet(format!("{} of 5 threads", ts.len())),
        Err(e) => Step::Broken(e),
    })?;
    let out = Command::new(ctx.bin("dfsched"))
        .args(["smt-pair", "--once", "--profile"])
        .arg(&path)
        .args(["--pid", &p.pid().to_string()])
        .output()
        .map_err(|e| format!("dfsched smt-pair: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dfsched smt-pair --once: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut ts = p.threads()?;
    ts.sort_by_key(|t| t.tid);
    let shown = paired_on_siblings(&ts, &masks, &cores)?;
    p.finish(60)?;
    let _ = std::fs::remove_file(&path);
    let cores = cores.iter().map(CpuSet::to_string).collect::<Vec<_>>();
    Ok(format!("{shown} (cores {})", cores.join(" ")))
}

/// The SMT cores of the preset (sibling sets of 2 or more CPUs); an error
/// unless there are at least 3 (for 5 threads, one CPU each).
fn smt_cores(ctx: &Ctx) -> Result<Vec<CpuSet>, String> {
    let cores: Vec<CpuSet> = ctx
        .preset
        .expected
        .smt
        .iter()
        .filter(|s| s.len() >= 2)
        .cloned()
        .collect();
    if cores.len() < 3 {
        return Err(format!(
            "needs 3 cores of SMT siblings for 5 threads; the guest shows {:?}",
            ctx.preset.expected.smt
        ));
    }
    Ok(cores)
}

/// `ts` (in creation order) placed by the smt-pair rule with `vectors`
/// (one-bit masks of 32 super-sets per thread, `None` for none): every
/// thread on one CPU of its own, a core of `cores`, and no two threads
/// whose vectors overlap on one core's siblings. `Ok(the masks shown)`.
fn paired_on_siblings(
    ts: &[Thread],
    vectors: &[Option<u64>],
    cores: &[CpuSet],
) -> Result<String, String> {
    let shown = ts
        .iter()
        .map(|t| format!("{}={}", t.name, t.mask))
        .collect::<Vec<_>>()
        .join(" ");
    let mut used = CpuSet::default();
    let mut on_core: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, t) in ts.iter().enumerate() {
        if t.mask.len() != 1 || !t.mask.intersection(&used).is_empty() {
            return Err(format!("not one CPU of its own each: {shown}"));
        }
        used = used.union(&t.mask);
        let core = domain_of(cores, &t.mask).ok_or(format!("{} on no core: {shown}", t.name))?;
        on_core.entry(core).or_default().push(i);
    }
    for members in on_core.values() {
        let overlap = members
            .iter()
            .filter_map(|&i| vectors.get(i).copied().flatten())
            .fold((0u64, false), |(seen, clash), m| {
                (seen | m, clash || seen & m != 0)
            });
        if overlap.1 {
            return Err(format!("overlapping vectors on one core: {shown}"));
        }
    }
    Ok(shown)
}

/// CPU time thread `tid` of `pid` has used, in ns (`schedstat`'s first
/// field).
fn cpu_ns(pid: u32, tid: i32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .ok_or(format!("{path}: not a schedstat line: {text:?}"))
}

/// The `smt-pair` *policy* of the preloaded runtime (issue 11: `dfsched
/// run --policy smt-pair --smt-profile FILE`) on real SMT siblings:
/// `dfsched-vmspin 4` (the main thread, `spin-0`..`spin-3`) with a profile
/// of two intervals of 20 s of CPU time each: main none; `spin-0` low then
/// high, `spin-1` high, `spin-2` high then low, `spin-3` low (low = the
/// low half of the 32 super-sets). First, with every spinner in its first
/// interval, the runtime's own balancer passes must pin every program
/// thread to one CPU of its own with no overlapping vectors on one core
/// (`spin-0` with `spin-1`, `spin-2` with `spin-3`); then, once every
/// spinner has used 20 s of CPU, the same by the second interval's vectors,
/// which separates `spin-0` from `spin-1` (`spin-0` with `spin-2`). The
/// runtime's balancer thread (`dfsched-balance`) is not the program's and
/// is not counted. Masks read back from `/proc`.
fn smt_pair_policy_on_siblings(ctx: &Ctx) -> Result<String, String> {
    use dfsched_core::activity::ActivityVector;
    use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
    let cores = smt_cores(ctx)?;
    const LOW: u64 = 0x0000_ffff;
    const HIGH: u64 = 0xffff_0000;
    // Long against the guest's start and the three samples a state needs
    // under TCG, short against the 300 s deadline.
    const INTERVAL_NS: u64 = 20_000_000_000;
    // Creation order: the main thread, then spin-0..3; per interval.
    let first = [None, Some(LOW), Some(HIGH), Some(HIGH), Some(LOW)];
    let second = [None, Some(HIGH), Some(HIGH), Some(LOW), Some(LOW)];
    let profile = SmtProfile {
        command: vec!["dfsched-vmspin".into(), "4".into()],
        interval_instructions: INTERVAL_NS,
        ns_per_instruction: 1.0,
        bits: 1,
        super_sets: 32,
        threads: first
            .iter()
            .zip(&second)
            .map(|(a, b)| ThreadProfile {
                instructions: 2 * INTERVAL_NS,
                vectors: a
                    .iter()
                    .chain(b)
                    .map(|&m| ActivityVector::from_mask(m, 32))
                    .collect(),
            })
            .collect(),
    };
    let path = std::env::temp_dir().join("dfsched-smt-policy-profile.json");
    let text = serde_json::to_string(&profile).map_err(|e| format!("profile: {e}"))?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args(["run", "--policy", "smt-pair", "--no-agent", "--smt-profile"])
        .arg(&path)
        .arg("--")
        .arg(ctx.bin("dfsched-vmspin"))
        .arg("4");
    let p = Running::start(cmd, "dfsched run smt-pair vmspin 4")?;
    let program = || -> Result<Vec<Thread>, String> {
        let mut ts: Vec<Thread> = p
            .threads()?
            .into_iter()
            .filter(|t| t.name != "dfsched-balance")
            .collect();
        ts.sort_by_key(|t| t.tid);
        Ok(ts)
    };
    let spinners_past = |ts: &[Thread]| -> Result<usize, String> {
        let mut n = 0;
        for t in ts.iter().skip(1) {
            if cpu_ns(p.pid(), t.tid)? >= INTERVAL_NS {
                n += 1;
            }
        }
        Ok(n)
    };
    let before = poll(SETTLE, || match program() {
        Ok(ts) if ts.len() != 5 => Step::NotYet(format!("{} of 5 threads", ts.len())),
        Ok(ts) => match spinners_past(&ts) {
            Ok(0) => match paired_on_siblings(&ts, &first, &cores) {
                Ok(shown) => Step::Holds(shown),
                Err(e) => Step::NotYet(e),
            },
            Ok(_) => {
                Step::Broken("a spinner used 20 s of CPU before the first pairing was seen".into())
            }
            Err(e) => Step::Broken(e),
        },
        Err(e) => Step::Broken(e),
    })?;
    let after = poll(SETTLE, || match program() {
        Ok(ts) if ts.len() != 5 => Step::Broken(format!("{} of 5 threads", ts.len())),
        Ok(ts) => match spinners_past(&ts) {
            Ok(4) => match paired_on_siblings(&ts, &second, &cores) {
                Ok(shown) => Step::Holds(shown),
                Err(e) => Step::NotYet(e),
            },
            Ok(n) => Step::NotYet(format!("{n} of 4 spinners past 20 s of CPU")),
            Err(e) => Step::Broken(e),
        },
        Err(e) => Step::Broken(e),
    })?;
    p.finish(60)?;
    let _ = std::fs::remove_file(&path);
    let cores = cores.iter().map(CpuSet::to_string).collect::<Vec<_>>();
    Ok(format!(
        "first interval: {before}; after 20 s of CPU: {after} (cores {})",
        cores.join(" ")
    ))
}

/// Makes `cmd`'s program start with its affinity set to `cpus`.
pub(super) fn pin_at_exec(cmd: &mut Command, cpus: &CpuSet) {
    use std::os::unix::process::CommandExt as _;
    let cpus: Vec<usize> = cpus.iter().map(|c| c.0 as usize).collect();
    // SAFETY: only sched_setaffinity (async-signal-safe) on a cpu_set_t
    // built in the closure, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `dfsched run --policy co-thread EXTRA -- dfsched-vmspin N`.
fn run_spin(ctx: &Ctx, extra: &[&str], n: usize) -> Result<Running, String> {
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args(["run", "--policy", "co-thread"])
        .args(extra)
        .arg("--")
        .arg(ctx.bin("dfsched-vmspin"))
        .arg(n.to_string());
    Running::start(cmd, &format!("dfsched run co-thread vmspin {n}"))
}

/// Holds when `n` `spin-*` threads of `p` share one LLC.
fn spin_step(p: &Running, n: usize, llcs: &[CpuSet]) -> Step {
    let ts = match p.threads() {
        Ok(t) => t,
        Err(e) => return Step::Broken(e),
    };
    let spin: Vec<&Thread> = ts.iter().filter(|t| t.name.starts_with("spin-")).collect();
    let union = spin.iter().fold(CpuSet::default(), |u, t| u.union(&t.mask));
    let seen = spin
        .iter()
        .map(|t| t.mask.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    if spin.len() != n {
        return Step::NotYet(format!("{} of {n} threads: {seen}", spin.len()));
    }
    match domain_of(llcs, &union) {
        Some(_) => Step::Holds(format!("[{seen}] within {union}")),
        None => Step::NotYet(format!("[{seen}] straddles LLCs")),
    }
}

/// Writes `value` to `path`.
fn write(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value:?} to {path}: {e}"))
}

/// A cgroup v2 directory, removed on drop (after its processes ended).
struct Cgroup(String);

impl Cgroup {
    fn new(name: &str, cpuset: bool) -> Result<Cgroup, String> {
        let root = "/sys/fs/cgroup";
        if cpuset {
            write(&format!("{root}/cgroup.subtree_control"), "+cpuset")?;
        }
        let dir = format!("{root}/{name}");
        let _ = std::fs::create_dir(&dir);
        Ok(Cgroup(dir))
    }

    fn join(&self, pid: u32) -> Result<(), String> {
        write(&format!("{}/cgroup.procs", self.0), &pid.to_string())
    }

    fn set_cpus(&self, cpus: &CpuSet) -> Result<(), String> {
        write(&format!("{}/cpuset.cpus", self.0), &cpus.to_string())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes may take a moment to be reaped after a kill.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A workload of one group of 2 per LLC in a cgroup whose `cpuset.cpus` is
/// narrowed to the first LLC (the first half of the CPUs on a one-LLC
/// preset), then widened to every CPU, while it runs: no thread is ever
/// outside the cpuset, every group stays whole in one LLC, and no call
/// into dfsched returns an error.
fn cpuset_narrow_widen(ctx: &Ctx) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let (dfs, per_df) = (e.llcs.len(), 2);
    let narrow: CpuSet = if e.llcs.len() > 1 {
        e.llcs[0].clone()
    } else {
        e.online.iter().take(e.online.len() / 2).collect()
    };
    let cg = Cgroup::new("vmbench-cpuset", true)?;
    cg.set_cpus(&e.online)?;
    let w = start_workload(ctx, dfs, per_df)?;
    cg.join(w.pid())?;
    let mut straddles = 0;
    let start = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &e.online, false, &mut straddles)
    })?;
    cg.set_cpus(&narrow)?;
    // Inside the narrowed set at once (the kernel sees to that), and every
    // group whole in one home there once dfsched has noticed.
    let narrowed = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &narrow, false, &mut straddles)
    })
    .map_err(|why| format!("narrowed to {narrow}: {why}"))?;
    cg.set_cpus(&e.online)?;
    let widened = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &e.online, false, &mut straddles)
    })
    .map_err(|why| format!("widened again: {why}"))?;
    w.finish(60)?;
    Ok(format!(
        "start: {start}; narrowed to {narrow}: {narrowed}; widened: {widened}"
    ))
}

/// The CPUs the check takes offline: the last LLC's, or the upper half of a
/// one-LLC preset (never CPU 0, which cannot go offline).
fn offline_set(ctx: &Ctx) -> CpuSet {
    let e = &ctx.preset.expected;
    let last = e.llcs.last().expect("an LLC").clone();
    if e.llcs.len() > 1 {
        last
    } else {
        e.online.iter().skip(e.online.len() / 2).collect()
    }
}

/// Sets CPUs `cpus` online (`true`) or offline.
pub(super) fn set_online(cpus: &CpuSet, online: bool) -> Result<(), String> {
    for c in cpus.iter() {
        let path = format!("/sys/devices/system/cpu/cpu{}/online", c.0);
        write(&path, if online { "1" } else { "0" })?;
    }
    Ok(())
}

/// Brings offline CPUs back however the check ended.
pub(super) struct OnlineAgain(pub(super) CpuSet);

impl Drop for OnlineAgain {
    fn drop(&mut self) {
        let _ = set_online(&self.0, true);
    }
}

/// A workload of one group per LLC, each as big as an LLC, while the last
/// LLC's CPUs go offline and come back: every thread always runs on an
/// online CPU, every group keeps one home with an online CPU in it while
/// they are away and one home after, and no call into dfsched returns an
/// error.
fn cpu_offline_online(ctx: &Ctx) -> Result<String, String> {
    offline_online(ctx, false)
}

/// As `cpu-offline-online`, and then the groups must be one per LLC
/// again, none straddling, once the CPUs are back.
fn cpu_online_groups_return(ctx: &Ctx) -> Result<String, String> {
    offline_online(ctx, true)
}

/// The scenario of `cpu-offline-online`; `groups_return` adds that the
/// groups are one per LLC again after.
///
/// The workload runs with splits off. With one LLC of two offline (or half
/// the CPUs of `1llc-4`), the groups' threads are 2 per online CPU: heavy
/// load, where a group's home is one CPU and the CPU beside it idles, so
/// the balancer splits a group after `split_after_passes` (10) imbalanced
/// passes, by design; and a thread split off stays in its new group while
/// it keeps its DF, so its DF would never be one home again. That is the
/// split's behaviour (`split-after-persistence` checks it), not hotplug's;
/// seen here once on `1llc-4` (`df1 [0 0 1 1]` while 2-3 were offline),
/// and on `2node-2llc-smt` only the race with the 10 passes kept it away.
fn offline_online(ctx: &Ctx, groups_return: bool) -> Result<String, String> {
    let e = &ctx.preset.expected;
    let (dfs, per_df) = (e.llcs.len(), e.llcs[0].len());
    let off = offline_set(ctx);
    let w = start_unsplit_workload(ctx, dfs, per_df)?;
    let mut straddles = 0;
    let start = poll(SETTLE, || {
        df_step(&w, dfs, per_df, &e.llcs, &e.online, true, &mut straddles)
    })?;
    let _restore = OnlineAgain(off.clone());
    set_online(&off, false)?;
    let online_now = observe::cpulist("/sys/devices/system/cpu/online")?;
    if online_now.intersects(&off) {
        return Err(format!(
            "{off} still online after writing 0: online {online_now}"
        ));
    }
    let offline = poll(SETTLE, || {
        let groups = match w.groups() {
            Ok(g) => g,
            Err(e) => return Step::Broken(e),
        };
        let seen = describe(&groups);
        for t in groups.values().flatten() {
            if off.contains(dfsched_core::CpuId(t.cpu)) {
                return Step::Broken(format!(
                    "tid {} ran on offline CPU {}: {seen}",
                    t.tid, t.cpu
                ));
            }
        }
        for (df, ts) in &groups {
            if ts.iter().any(|t| t.mask != ts[0].mask) {
                return Step::NotYet(format!("df{df} not in one home: {seen}"));
            }
            if !ts[0].mask.intersects(&online_now) {
                return Step::NotYet(format!("df{df} has no online CPU: {seen}"));
            }
        }
        Step::Holds(seen)
    })
    .map_err(|why| format!("with {off} offline: {why}"))?;
    set_online(&off, true)?;
    let back = poll(SETTLE, || {
        if groups_return {
            return df_step(&w, dfs, per_df, &e.llcs, &e.online, true, &mut straddles);
        }
        // Every group in one home (its members share a mask), inside the
        // online CPUs.
        let groups = match w.groups() {
            Ok(g) => g,
            Err(e) => return Step::Broken(e),
        };
        let seen = describe(&groups);
        for (df, ts) in &groups {
            if ts.iter().any(|t| t.mask != ts[0].mask) {
                return Step::NotYet(format!("df{df} not in one home: {seen}"));
            }
        }
        Step::Holds(seen)
    })
    .map_err(|why| format!("with {off} back online: {why}"))?;
    w.finish(60)?;
    Ok(format!(
        "start: {start}; {off} offline: {offline}; back: {back}"
    ))
}

/// Two programs under `dfsched run --policy co-thread` (which starts the
/// agent) in different cgroups and sessions: each keeps its threads in one
/// LLC, on different CPUs from the other when the machine has more than
/// one LLC, and the agent serves both.
fn agent_several_processes(ctx: &Ctx) -> Result<String, String> {
    use std::os::unix::process::CommandExt as _;
    let e = &ctx.preset.expected;
    let n = 2;
    let mut programs = Vec::new();
    let mut groups = Vec::new();
    for name in ["vmbench-agent-a", "vmbench-agent-b"] {
        let cg = Cgroup::new(name, false)?;
        let mut cmd = Command::new(ctx.bin("dfsched"));
        cmd.args(["run", "--policy", "co-thread", "--"])
            .arg(ctx.bin("dfsched-vmspin"))
            .arg(n.to_string());
        // SAFETY: setsid is async-signal-safe; the closure touches nothing
        // else between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let p = Running::start(cmd, name)?;
        cg.join(p.pid())?;
        programs.push(p);
        groups.push(cg);
    }
    let seen = poll(SETTLE, || {
        let mut masks = Vec::new();
        let mut seen = Vec::new();
        for p in &programs {
            match spin_step(p, n, &e.llcs) {
                Step::Holds(s) => seen.push(s),
                other => return other,
            }
            let ts = p.threads().unwrap_or_default();
            masks.push(
                ts.iter()
                    .filter(|t| t.name.starts_with("spin-"))
                    .fold(CpuSet::default(), |u, t| u.union(&t.mask)),
            );
        }
        let seen = seen.join(" | ");
        if e.llcs.len() > 1 && masks[0].intersects(&masks[1]) {
            return Step::NotYet(format!("the two programs share CPUs: {seen}"));
        }
        Step::Holds(seen)
    })?;
    // The agent knows both programs (`dfsched run` execs the program: the
    // same pid).
    let pids: Vec<u64> = programs.iter().map(|p| u64::from(p.pid())).collect();
    let served = poll(SETTLE, || {
        let out = match Command::new(ctx.bin("dfsched"))
            .args(["agent", "--status"])
            .output()
        {
            Ok(o) => o,
            Err(e) => return Step::Broken(format!("dfsched agent --status: {e}")),
        };
        let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
            Ok(v) => v,
            Err(_) => {
                return Step::NotYet(format!(
                    "agent --status exited {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let known: Vec<u64> = v["processes"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["pid"].as_u64()).collect())
            .unwrap_or_default();
        let shown = format!("agent pid {} serves pids {known:?}", v["agent_pid"]);
        if pids.iter().all(|p| known.contains(p)) {
            Step::Holds(shown)
        } else {
            Step::NotYet(format!("{shown}, not all of {pids:?}"))
        }
    })?;
    for p in programs {
        p.finish(60)?;
    }
    let _ = Command::new(ctx.bin("dfsched"))
        .args(["agent", "--stop"])
        .output();
    drop(groups);
    Ok(format!("{seen}; {served}"))
}

/// `dfsched bench df --threads 16 --dfs 4` runs to its end and prints its
/// JSON (its timings mean nothing under TCG and are not judged).
fn bench_df_runs(ctx: &Ctx) -> Result<String, String> {
    let out = Command::new(ctx.bin("dfsched"))
        .args(["bench", "df", "--threads", "16", "--dfs", "4"])
        .args(["--iterations", "200", "--repeat", "1", "--json"])
        .output()
        .map_err(|e| format!("dfsched bench df: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("not JSON: {e}"))?;
    let keys: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    Ok(format!("JSON with keys {keys:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_allows_a_difference_of_one_group_per_llc_at_most() {
        let at = |v: &[usize]| v.iter().enumerate().map(|(i, &l)| (i as u64, l)).collect();
        assert!(spread(&at(&[0, 1]), 2));
        assert!(!spread(&at(&[0, 0]), 2));
        assert!(spread(&at(&[0, 1, 0]), 2));
        assert!(!spread(&at(&[0, 0, 0, 1]), 2));
        assert!(!spread(&at(&[0, 1, 1, 2]), 4));
    }
}
