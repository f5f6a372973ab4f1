//! The sched_ext checks judged from a trace of the dispatches (`dfsched-scx run --trace FILE`: a
//! record each time a thread gets a CPU, with its group, and each map change the loader makes, on one
//! clock, `CLOCK_MONOTONIC`), summarised by `dfsched-scx trace FILE --json` (crates/dfsched-scx,
//! `src/trace.rs`):
//!
//! - `scx-succession`: two groups of two spinners share one CPU, under `--quota 8` and then
//!   `--quota 1` (one task per batch): on that CPU, consecutive records of the same group against
//!   group switches, from the trace, over a window of [`SUCCESSION_WINDOW`]; the first share must
//!   exceed the second by 50 points, the mean run (records of one group back to back) must be longer,
//!   and the trace must be whole (its end line, nothing dropped). The scheduler's own counters
//!   (`disp_same_group`, `disp_group_switch`, over the same window) are shown beside it and must agree.
//! - `scx-rehint-and-move`: the runtime (`dfsched-vmcheck rehint`, `DFSCHED_SCX=auto`): DF 1 and DF 2
//!   of two threads each and a thread `mv-0` hinting DF 1, each DF's group on its own home. (a) `mv-0`
//!   re-hints DF 2: in the trace its placement into DF 2's group comes between the re-hint's start and
//!   its return, and from there on its runs are on DF 2's home only (one run already dispatched when
//!   the maps changed is allowed per change, [`MAX_IN_FLIGHT`]); the scheduler's state names the same
//!   group and home. (b) Spinning `SCHED_EXT` threads pinned two per CPU to DF 1's LLC: the runtime's
//!   balancer moves DF 1's group to the other LLC (the runtime's stats count a move); in the trace the
//!   group's first home out of that LLC comes after the hogs started, and the group's runs from then to
//!   its next home (the balancer may go on moving groups) or the cut are on it; with no later move
//!   the state at the cut names the same home.
//!
//! A child module of `scx.rs` (as `scx_faults.rs`): it uses that file's helpers as they are. Each
//! check loads the scheduler itself ([`scx::Loaded`]) and judges the trace after the unload,
//! when the loader has written its end line. `rehint_main` is the workload of the second check.

use super as scx;
use super::{Client, Loaded};
use crate::guest::observe::Thread;
use crate::guest::workload::Running;
use crate::guest::{poll, Ctx, Step};
use dfsched::{Runtime, RuntimeConfig};
use dfsched_core::{CpuId, CpuSet};
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The trace file's limit (MiB), far above what a check writes (a record a slice per CPU: about
/// 50 KB/s on 8 CPUs), small beside the guest's memory (the file is in its RAM).
const TRACE_MAX_MB: &str = "32";

/// How long the succession check counts.
const SUCCESSION_WINDOW: Duration = Duration::from_secs(5);

/// Runs off the new home a thread may still have after a map change (its placement, its group's
/// home): one it was already dispatched to (a CPU's local queue) before the change.
const MAX_IN_FLIGHT: u64 = 1;

/// Runs on its new home a moved or re-hinted thread must show in the trace before the cut.
const MIN_ON_HOME: u64 = 5;

/// How long the homes are watched after the balancer's move out of the hogged LLC.
const WATCH: Duration = Duration::from_secs(10);

/// Home changes of the two DFs allowed in [`WATCH`]: on steady load the rules give none after the
/// move (the core's test of this case); the runtime's outside-load estimate still moves under TCG
/// (a CPU's window may lose a sample), so a change or two is allowed, not the thrash of before
/// (10–34 re-homes a run while the estimate lost the hogs).
const MAX_HOME_CHANGES: usize = 2;

/// The rehint workload's engine log (`DFSCHED_ENGINE_LOG`), sent to the host.
const ENGINE_LOG: &str = "/tmp/scx-rehint-engine.log";

/// Its size limit: far above a run's passes (a pass is two steps of about 1 KB), small enough for
/// the serial console.
const ENGINE_LOG_MAX_BYTES: &str = "8388608";

/// The balancer's deadline. Its outside-load estimate needs tens of seconds under TCG to see the
/// hogs (`balancing.rs`, 600 s there); here the first run (Nov 26, busy host) saw the move 394 s
/// after the hogs started, so the deadline leaves room above that.
const REPAIR: Duration = Duration::from_secs(900);

/// Spinning threads pinned to each CPU of the hogged LLC (as `balancing.rs`, which says why two).
const HOGS_PER_CPU: usize = 2;

/// How long the trace records DF 1's group after its move is seen, before the cut.
const MOVED_RUNS: Duration = Duration::from_secs(3);

/// `CLOCK_MONOTONIC` now, ns: the trace's clock (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `dfsched-scx trace FILE --json` counting the records in `[since, until)`.
pub(super) fn summary(
    ctx: &Ctx,
    file: &str,
    since: u64,
    until: Option<u64>,
) -> Result<serde_json::Value, String> {
    let mut cmd = Command::new(ctx.bin("dfsched-scx"));
    cmd.args(["trace", file, "--json", "--since-ns", &since.to_string()]);
    if let Some(u) = until {
        cmd.args(["--until-ns", &u.to_string()]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("dfsched-scx trace: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dfsched-scx trace {file}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let s: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("dfsched-scx trace --json: {e}"))?;
    // A trace cut short or with holes would count less than happened.
    let end = &s["end"];
    if end.is_null() {
        return Err(format!(
            "{file} has no end line: the loader did not finish it"
        ));
    }
    if end["dropped_ring"] != 0 || end["dropped_size"] != 0 {
        return Err(format!("{file} dropped records: {end}"));
    }
    Ok(s)
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// What one succession run counted on the shared CPU.
struct Counted {
    records: u64,
    same: u64,
    switches: u64,
    share: f64,
    mean_run: f64,
    max_run: u64,
    counter_same: u64,
    counter_switches: u64,
}

/// Two groups of two spinners on `cpu` under `--quota quota`, traced over [`SUCCESSION_WINDOW`].
fn succession_run(ctx: &Ctx, quota: u32, cpu: CpuId) -> Result<Counted, String> {
    let full = scx::online()?;
    let file = format!("/tmp/scx-succession-q{quota}.trace");
    let loaded = Loaded::start(
        ctx,
        &[
            "--quota",
            &quota.to_string(),
            "--trace",
            &file,
            "--trace-max-mb",
            TRACE_MAX_MB,
        ],
    )?;
    let (spin, tids) = scx::ext_spinners(ctx, 4)?;
    let home = CpuSet::single(cpu);
    let mut client = Client::start(ctx)?;
    let mut lines = vec![scx::group_line(0, &home), scx::group_line(1, &home)];
    lines.extend(
        tids.iter()
            .enumerate()
            .map(|(i, &t)| scx::place_line(t, i / 2)),
    );
    client.send(&lines)?;
    scx::reach_and_hold("four spinners of two groups on one CPU", || {
        scx::spinners_on_home(&loaded, &spin, &full)
    })?;
    let before = loaded.state()?;
    let from = monotonic_ns();
    std::thread::sleep(SUCCESSION_WINDOW);
    let until = monotonic_ns();
    let after = loaded.state()?;
    let d = |n: &str| scx::stat(&after, n).saturating_sub(scx::stat(&before, n));
    let (counter_same, counter_switches) = (d("disp_same_group"), d("disp_group_switch"));
    client.close();
    spin.finish(30)?;
    loaded.unload()?;
    let s = summary(ctx, &file, from, Some(until))?;
    let c = &s["cpus"][cpu.0.to_string()];
    Ok(Counted {
        records: u(&c["records"]),
        same: u(&c["successions"]),
        switches: u(&c["switches"]),
        share: c["succession_share"].as_f64().unwrap_or(0.0),
        mean_run: c["mean_run"].as_f64().unwrap_or(0.0),
        max_run: u(&c["max_run"]),
        counter_same,
        counter_switches,
    })
}

/// `scx-succession` (see the module's doc).
pub(super) fn succession(ctx: &Ctx) -> Result<String, String> {
    let cpu = scx::online()?.iter().last().ok_or("no CPU online")?;
    let q8 = succession_run(ctx, 8, cpu)?;
    let q1 = succession_run(ctx, 1, cpu)?;
    let frac = |s: u64, w: u64| s as f64 / (s + w).max(1) as f64;
    let line = |q: u32, c: &Counted| {
        format!(
            "quota {q}: trace {} records, {} same-group successions / {} switches ({:.0} %), mean run {:.2}, longest {}; \
             counters {} same / {} switches ({:.0} %)",
            c.records,
            c.same,
            c.switches,
            c.share * 100.0,
            c.mean_run,
            c.max_run,
            c.counter_same,
            c.counter_switches,
            frac(c.counter_same, c.counter_switches) * 100.0
        )
    };
    let seen = format!(
        "two groups of 2 on CPU {} for {SUCCESSION_WINDOW:?}: {}; {}",
        cpu.0,
        line(8, &q8),
        line(1, &q1)
    );
    if q8.records < 20 || q1.records < 20 {
        return Err(format!("too few records in the traces to compare: {seen}"));
    }
    // Expected: 7 of 8 back to back with quota 8 (runs of 8), none with quota 1 (the other group
    // always has a thread queued).
    if q8.share < q1.share + 0.5 || q8.mean_run <= q1.mean_run {
        return Err(format!("no succession in the trace: {seen}"));
    }
    // The counters, over the same window, must say the same.
    if frac(q8.counter_same, q8.counter_switches) < frac(q1.counter_same, q1.counter_switches) + 0.5
    {
        return Err(format!("the trace and the counters disagree: {seen}"));
    }
    Ok(seen)
}

/// The `rehint` workload's threads: DF 1 and DF 2 of two each, and `mv-0`.
const REHINT_THREADS: [&str; 5] = ["df1-0", "df1-1", "df2-0", "df2-1", "mv-0"];

/// `dfsched-vmcheck rehint`: DF 1 (`df1-0`, `df1-1`) and DF 2 (`df2-0`, `df2-1`) of spinning threads
/// hinting their DF through dfsched's Rust API, and `mv-0` hinting DF 1 until a line `rehint` comes
/// on stdin, then DF 2. It prints `rehint-at T` just before its first hint of DF 2 and `rehinted T`
/// once that returned (T: `CLOCK_MONOTONIC` ns), and when stdin closes, the runtime's stats. The
/// balancer never splits a group (`split_after_passes` 0), so it repairs an imbalance by a move.
/// Exit status as [`crate::guest::workload::workload_main`]'s.
pub fn rehint_main() -> i32 {
    // From the environment, so that the check can turn the engine log on (`DFSCHED_ENGINE_LOG`).
    let mut config = match RuntimeConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rehint: the runtime's settings: {e}");
            return 1;
        }
    };
    config.agent = dfsched::agent::AgentMode::Off;
    config.engine.split_after_passes = 0;
    let rt = match Runtime::start(config) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rehint: Runtime::start: {e}");
            return 1;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    // mv-0's DF; the others' is fixed.
    let mover_df = Arc::new(AtomicU64::new(1));
    let mut workers = Vec::new();
    for name in REHINT_THREADS {
        let (rt, stop, errors, mover_df) =
            (rt.clone(), stop.clone(), errors.clone(), mover_df.clone());
        let fixed: Option<u64> = name
            .strip_prefix("df")
            .and_then(|r| r.split_once('-'))
            .and_then(|(d, _)| d.parse().ok());
        let w = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut n: u64 = 0;
                let mut was = 0;
                // Relaxed: the flags only steer the loop; nothing is published through them.
                while !stop.load(Ordering::Relaxed) {
                    let df = fixed.unwrap_or_else(|| mover_df.load(Ordering::Relaxed));
                    let moving = was != 0 && df != was;
                    if moving {
                        println!("rehint-at {}", monotonic_ns());
                    }
                    if let Err(e) = rt.enter(df) {
                        eprintln!("rehint: {name}: enter {df}: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    if moving {
                        println!("rehinted {}", monotonic_ns());
                        let _ = std::io::stdout().flush();
                    }
                    was = df;
                    for _ in 0..100_000 {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                }
                if let Err(e) = rt.leave() {
                    eprintln!("rehint: {name}: leave: {e}");
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("spawn a worker");
        workers.push(w);
    }
    for line in std::io::stdin().lock().lines() {
        match line.as_deref().map(str::trim) {
            Ok("rehint") => mover_df.store(2, Ordering::Relaxed),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    println!("{}", rt.stats_json());
    if let Err(e) = rt.check_invariants() {
        eprintln!("rehint: engine invariants: {e}");
        errors.fetch_add(1, Ordering::Relaxed);
    }
    rt.shutdown();
    if errors.load(Ordering::Relaxed) == 0 {
        0
    } else {
        1
    }
}

/// The rehint workload's five threads by name, against the scheduler's groups: each name's thread
/// and (group, home) (`None`: not placed).
type Seen = BTreeMap<String, (Thread, Option<(u64, CpuSet)>)>;

fn seen_now(loaded: &Loaded, wl: &Running) -> Result<Seen, String> {
    let homes = scx::homes_by_tid(&loaded.state()?);
    let mut out = Seen::new();
    for t in wl.threads()? {
        if REHINT_THREADS.contains(&t.name.as_str()) {
            let h = homes.get(&t.tid).cloned();
            out.insert(t.name.clone(), (t, h));
        }
    }
    if out.len() != REHINT_THREADS.len() {
        return Err(format!(
            "{} of the workload's {} threads",
            out.len(),
            REHINT_THREADS.len()
        ));
    }
    Ok(out)
}

/// `name`'s group and home in `seen`.
fn group_of(seen: &Seen, name: &str) -> Result<(u64, CpuSet), String> {
    seen.get(name)
        .and_then(|(_, h)| h.clone())
        .ok_or_else(|| format!("{name} is in no group"))
}

/// All five on their group's home (full masks, `ext.enabled`), `mover_with` naming the DF thread
/// whose group `mv-0` must share; with `disjoint`, the two DFs' groups on disjoint homes.
fn rehint_sample(
    loaded: &Loaded,
    wl: &Running,
    mover_with: &str,
    disjoint: bool,
    full: &CpuSet,
) -> Result<String, String> {
    let seen = seen_now(loaded, wl)?;
    let (g1, h1) = group_of(&seen, "df1-0")?;
    let (g2, h2) = group_of(&seen, "df2-0")?;
    for (name, g) in [("df1-1", g1), ("df2-1", g2)] {
        if group_of(&seen, name)?.0 != g {
            return Err(format!("{name} is not in its DF's group {g}"));
        }
    }
    let (gm, _) = group_of(&seen, "mv-0")?;
    if gm != group_of(&seen, mover_with)?.0 {
        return Err(format!("mv-0 in group {gm}, not {mover_with}'s"));
    }
    if g1 == g2 || (disjoint && !h1.intersection(&h2).is_empty()) {
        return Err(format!(
            "DF 1 (group {g1}, home {h1}) and DF 2 (group {g2}, home {h2}) do not have two homes"
        ));
    }
    let threads: Vec<Thread> = seen.values().map(|(t, _)| t.clone()).collect();
    let homes = seen
        .values()
        .filter_map(|(t, h)| Some((t.tid, h.clone()?)))
        .collect();
    let on = scx::on_home(wl.pid(), &threads, &homes, full)?;
    Ok(format!(
        "DF 1 group {g1} home {h1}, DF 2 group {g2} home {h2}: {on}"
    ))
}

/// Busy clock ticks per CPU from `/proc/stat` (user + nice + system + irq + softirq), and
/// `procs_running`.
fn stat_busy() -> (BTreeMap<u32, u64>, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut busy = BTreeMap::new();
    let mut running = 0;
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(c) = w.first().and_then(|c| c.strip_prefix("cpu")) {
            if let Ok(c) = c.parse::<u32>() {
                let f = |i: usize| w.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                busy.insert(c, f(1) + f(2) + f(3) + f(6) + f(7));
            }
        } else if w.first() == Some(&"procs_running") {
            running = w.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    (busy, running)
}

/// Each thread of `pid`: (name, utime + stime in ticks, the CPU it last ran on).
fn task_ticks(pid: u32) -> BTreeMap<u64, (String, u64, u32)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in dir.flatten() {
        let Ok(tid) = t.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = text.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |h| h.1).to_string();
        let w: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state is field 3, utime 14, stime 15, processor 39 (1-based).
        let f = |i: usize| {
            w.get(i - 3)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(tid, (name, f(14) + f(15), f(39) as u32));
    }
    out
}

/// Where the CPU time went over `over`: each CPU's busy share from `/proc/stat`, the machine's
/// runnable count at the end, and each thread of `pids` with its share and last CPU (percent of
/// one CPU): what the runtime's outside-load signals read, beside who really ran.
fn cpu_use(pids: &[(String, u32)], over: Duration) -> String {
    let (b0, _) = stat_busy();
    let t0: Vec<_> = pids.iter().map(|(_, p)| task_ticks(*p)).collect();
    std::thread::sleep(over);
    let (b1, running) = stat_busy();
    let ticks = over.as_secs_f64() * 100.0;
    let pct = |d: u64| (d as f64 * 100.0 / ticks).round() as u64;
    let busy: Vec<String> = b1
        .iter()
        .map(|(c, v)| format!("{c}:{}", pct(v.saturating_sub(*b0.get(c).unwrap_or(&0)))))
        .collect();
    let mut threads = Vec::new();
    for ((what, pid), before) in pids.iter().zip(t0) {
        let mut parts = Vec::new();
        for (tid, (name, t, cpu)) in task_ticks(*pid) {
            let d = t.saturating_sub(before.get(&tid).map_or(t, |b| b.1));
            if d > 0 {
                parts.push(format!("{name}:{}%@{cpu}", pct(d)));
            }
        }
        threads.push(format!("{what} [{}]", parts.join(" ")));
    }
    format!(
        "busy % per CPU {} (procs_running {running}); threads: {}",
        busy.join(" "),
        threads.join("; ")
    )
}

/// After the balancer's move out of the hogged LLC, for [`WATCH`]: no group homed inside that LLC
/// (a home of its CPUs only; a home spread over both LLCs is what the home rule gives a group no LLC
/// holds, `dfsched-core`'s test `groups_leave_a_hogged_llc_once_and_stay_where_the_home_rule_puts_them`),
/// and the two DFs' homes changing at most [`MAX_HOME_CHANGES`] times. `Ok` with the homes seen.
fn watch_homes(loaded: &Loaded, wl: &Running, hogged: &CpuSet) -> Result<String, String> {
    let show = |v: &[(CpuSet, CpuSet)]| {
        v.iter()
            .map(|(a, b)| format!("{a}/{b}"))
            .collect::<Vec<_>>()
            .join(" → ")
    };
    let mut seen: Vec<(CpuSet, CpuSet)> = Vec::new();
    let samples = (WATCH.as_millis() / super::SAMPLE.as_millis()).max(1);
    for i in 0..samples {
        let now = seen_now(loaded, wl)?;
        let homes = (group_of(&now, "df1-0")?.1, group_of(&now, "df2-0")?.1);
        if seen.last() != Some(&homes) {
            seen.push(homes.clone());
        }
        for (df, h) in [("DF 1", &homes.0), ("DF 2", &homes.1)] {
            if h.is_subset(hogged) {
                return Err(format!(
                    "{df} homed {h}, inside the hogged LLC {hogged}, at sample {i} (homes DF 1/DF 2: {})",
                    show(&seen)
                ));
            }
        }
        if seen.len() > MAX_HOME_CHANGES + 1 {
            return Err(format!(
                "the homes changed more than {MAX_HOME_CHANGES} times in {WATCH:?}: {}",
                show(&seen)
            ));
        }
        std::thread::sleep(super::SAMPLE);
    }
    Ok(format!(
        "homes DF 1/DF 2 over {WATCH:?} after the move: {} (none inside {hogged}, {} changes)",
        show(&seen),
        seen.len() - 1
    ))
}

/// DF 1's group and home in the state, and a cut of the trace at which they held: the state read
/// just before and just after the cut's time agree (retried while the balancer moves it between).
fn stable_cut(loaded: &Loaded, wl: &Running) -> Result<(u64, CpuSet, u64), String> {
    let mut last = String::new();
    for _ in 0..10 {
        let before = group_of(&seen_now(loaded, wl)?, "df1-0")?;
        let cut = monotonic_ns();
        let after = group_of(&seen_now(loaded, wl)?, "df1-0")?;
        if before == after {
            return Ok((before.0, before.1, cut));
        }
        last = format!("{before:?} then {after:?}");
        std::thread::sleep(super::SAMPLE);
    }
    Err(format!("DF 1's group kept moving: {last}"))
}

/// The workload's stdout, a line each, read as it comes.
fn read_lines(wl: &mut Running) -> Result<Arc<Mutex<Vec<String>>>, String> {
    let out = wl.child.stdout.take().ok_or("the workload's stdout")?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let into = lines.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            into.lock().expect("not poisoned").push(l);
        }
    });
    Ok(lines)
}

/// The number after `key ` on the first line that has it.
fn field(lines: &Mutex<Vec<String>>, key: &str) -> Option<u64> {
    lines
        .lock()
        .expect("not poisoned")
        .iter()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

/// A placement summary (`since_place` / `since_home`, runs judged against the home of the moment)
/// judged: no run off the home once the thread (each thread of the group) reached it, at most
/// `in_flight` before, at least [`MIN_ON_HOME`] on it.
fn followed(p: &serde_json::Value, in_flight: u64) -> Result<String, String> {
    let s = format!(
        "{} runs on the home, {} in flight, {} off it, on CPUs {}",
        u(&p["on_home"]),
        u(&p["in_flight"]),
        u(&p["off_home"]),
        p["cpus"].as_str().unwrap_or("")
    );
    if u(&p["off_home"]) > 0 || u(&p["in_flight"]) > in_flight || u(&p["on_home"]) < MIN_ON_HOME {
        return Err(s);
    }
    Ok(s)
}

/// The trace's events from `from_ns` on that concern thread `tid` (its runs, its placements) or
/// any group's home, the first `n` in time order, as `+MS line`: what a reader of a failure or of
/// runs in flight wants to see.
fn events_after(file: &str, tid: i32, from_ns: u64, n: usize) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut ev: Vec<(u64, &str)> = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let t: u64 = w.get(1)?.parse().ok()?;
            let ours = match w[0] {
                "R" => w.get(3)?.parse::<i32>().ok()? == tid,
                "P" | "U" => w.get(2)?.parse::<i32>().ok()? == tid,
                "G" => true,
                _ => false,
            };
            (ours && t >= from_ns).then_some((t, l))
        })
        .collect();
    ev.sort_by_key(|e| e.0);
    ev.iter()
        .take(n)
        .map(|(t, l)| format!("+{:.1}ms {l}", (t - from_ns) as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The home a group's summary says it was given last, and when.
fn last_home(g: &serde_json::Value) -> Option<(u64, CpuSet)> {
    let h = g["homes"].as_array()?.last()?;
    Some((u(&h["t_ns"]), h["home"].as_str()?.parse().ok()?))
}

/// `scx-rehint-and-move` (see the module's doc).
pub(super) fn rehint_and_move(ctx: &Ctx) -> Result<String, String> {
    let full = scx::online()?;
    let file = "/tmp/scx-rehint-and-move.trace";
    let loaded = Loaded::start(ctx, &["--trace", file, "--trace-max-mb", TRACE_MAX_MB])?;
    let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
    let _ = std::fs::remove_file(ENGINE_LOG);
    cmd.arg("rehint")
        .env("DFSCHED_SCX", "auto")
        .env("DFSCHED_ENGINE_LOG", ENGINE_LOG)
        .env("DFSCHED_ENGINE_LOG_MAX_BYTES", ENGINE_LOG_MAX_BYTES);
    let mut wl = Running::start(cmd, "dfsched-vmcheck rehint")?;
    let lines = read_lines(&mut wl)?;
    let mut notes = Vec::new();

    // (a) The re-hint.
    let before = scx::reach_and_hold(
        "the workload's threads on their homes, mv-0 with DF 1",
        || rehint_sample(&loaded, &wl, "df1-0", true, &full),
    )?;
    notes.push(format!("before: {before}"));
    let seen = seen_now(&loaded, &wl)?;
    let mover = seen["mv-0"].0.tid;
    let (ga, _) = group_of(&seen, "df1-0")?;
    let mut stdin = wl.child.stdin.take().ok_or("the workload's stdin")?;
    writeln!(stdin, "rehint").map_err(|e| format!("the workload's stdin: {e}"))?;
    poll(Duration::from_secs(60), || {
        match field(&lines, "rehinted ") {
            Some(_) => Step::Holds(String::new()),
            None => Step::NotYet("no 'rehinted' line yet".into()),
        }
    })?;
    let (at, done) = (
        field(&lines, "rehint-at ").ok_or("no 'rehint-at' line")?,
        field(&lines, "rehinted ").ok_or("no 'rehinted' line")?,
    );
    let after = scx::reach_and_hold("mv-0 with DF 2, every thread on its home", || {
        rehint_sample(&loaded, &wl, "df2-0", true, &full)
    })?;
    let seen = seen_now(&loaded, &wl)?;
    let (gb, home_b) = group_of(&seen, "df2-0")?;
    let (ga_now, home_a) = group_of(&seen, "df1-0")?;
    if ga_now != ga {
        return Err(format!(
            "DF 1's group changed from {ga} to {ga_now} at the re-hint"
        ));
    }
    notes.push(format!("mv-0 (tid {mover}) re-hinted: {after}"));
    let cut_a = monotonic_ns();

    // (b) The balancer's move: DF 1's LLC hogged by SCHED_EXT spinners (plain ones would starve
    // our threads there: the fair class runs before sched_ext's in partial mode).
    let llcs = &ctx.preset.expected.llcs;
    let llc = llcs
        .iter()
        .find(|l| home_a.is_subset(l))
        .ok_or(format!("DF 1's home {home_a} is in no one LLC"))?
        .clone();
    let hogs_from = monotonic_ns();
    let mut hogs = Vec::new();
    for c in llc.iter() {
        let mut cmd = Command::new(ctx.bin("dfsched-scx"));
        cmd.args(["ext", "--"])
            .arg(ctx.bin("dfsched-vmspin"))
            .args([HOGS_PER_CPU.to_string(), "--cpus".into(), c.0.to_string()]);
        hogs.push(Running::start(
            cmd,
            &format!("SCHED_EXT hogs on CPU {}", c.0),
        )?);
    }
    let moved = poll(REPAIR, || {
        let seen = match seen_now(&loaded, &wl) {
            Ok(s) => s,
            Err(e) => return Step::NotYet(e),
        };
        match (group_of(&seen, "df1-0"), group_of(&seen, "df1-1")) {
            (Ok((g0, h0)), Ok((g1, _))) if g0 == g1 && h0.intersection(&llc).is_empty() => {
                Step::Holds(format!("DF 1's group {g0} home {h0}"))
            }
            (a, b) => Step::NotYet(format!("DF 1: {a:?} {b:?}")),
        }
    })
    .map_err(|e| {
        format!(
            "{}; the balancer did not move DF 1 out of {llc}: {e}",
            notes.join("; ")
        )
    })?;
    // Runs on the new home for the trace to judge. Not a hold of every thread on its home in
    // /proc: the balancer may go on moving groups (it moved DF 2 into the hogged LLC in the first
    // runs), and the trace judges each run against the home of its moment anyway.
    let mut pids = vec![("workload".to_string(), wl.pid())];
    pids.extend(hogs.iter().map(|h| ("hogs".to_string(), h.pid())));
    notes.push(format!(
        "CPU use after the move: {}",
        cpu_use(&pids, MOVED_RUNS)
    ));
    let watched = watch_homes(&loaded, &wl, &llc)
        .map_err(|e| format!("{}; DF 1 moved out ({moved}), then: {e}", notes.join("; ")))?;
    notes.push(watched);
    let (ga_moved, home_moved, cut_b) = stable_cut(&loaded, &wl)?;
    notes.push(format!(
        "{HOGS_PER_CPU} SCHED_EXT hogs on each CPU of {llc}: {moved}; at the cut DF 1's group {ga_moved} home {home_moved}"
    ));
    // The hogs stay until the workload has printed its stats: its outside-load figures then
    // are those the balancer saw while they ran.
    drop(stdin);
    wl.finish(120)?;
    drop(hogs);
    let stats: serde_json::Value = lines
        .lock()
        .expect("not poisoned")
        .iter()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or("the workload printed no stats")?;
    let e = &stats["engine"];
    let unloaded = loaded.unload()?;
    // The engine's log goes to the host, which replays it (one brain) and keeps it
    // (`target/vmbench/runs/`) for a look at the balancer's inputs and decisions.
    let log = std::fs::read(ENGINE_LOG).map_err(|err| format!("{ENGINE_LOG}: {err}"))?;
    crate::guest::attach("rehint-engine.log", log);
    if stats["scx_body"] != true || stats["scx_failures"] != 0 {
        return Err(format!(
            "the runtime's scx body: scx_body {}, scx_failures {}",
            stats["scx_body"], stats["scx_failures"]
        ));
    }
    if u(&e["group_moves"]) + u(&e["rehomes"]) == 0 || u(&e["splits"]) != 0 {
        return Err(format!(
            "the runtime's balancer: group_moves {}, rehomes {}, splits {}",
            e["group_moves"], e["rehomes"], e["splits"]
        ));
    }
    notes.push(format!(
        "runtime: group_moves {}, rehomes {}, balance_passes {}, scx_placements {}; outside load: last {} per CPU {}, runnable {}, refreshes {}",
        e["group_moves"], e["rehomes"], e["balance_passes"], stats["scx_placements"],
        stats["external_load_milli"], stats["external_load_per_cpu_milli"],
        stats["external_runnable"], stats["external_refreshes"]
    ));

    // The trace, up to each cut.
    let sa = summary(ctx, file, 0, Some(cut_a))?;
    let t = &sa["tids"][mover.to_string()];
    let placed = &t["last_place"];
    let placed_at = u(&placed["t_ns"]);
    // Its last placement: the re-hint's, or a later one into the same group (a re-home of DF 2).
    if placed["gid"].as_str() != Some(gb.to_string().as_str()) || placed_at < at {
        return Err(format!(
            "{}; the trace's last placement of mv-0 is {placed}, not into group {gb} after the re-hint began at {at}",
            notes.join("; ")
        ));
    }
    let (_, traced_b) =
        last_home(&sa["groups"][gb.to_string()]).ok_or("DF 2's group has no home in the trace")?;
    if traced_b != home_b {
        return Err(format!(
            "DF 2's home: the trace says {traced_b}, the state {home_b}"
        ));
    }
    // The events from just before the placement, when some run was off the home: what happened
    // (from the re-hint's start they are its own runs during the hint's socket exchanges).
    let at_rehint = events_after(file, mover, placed_at.saturating_sub(5_000_000).max(at), 12);
    let a = followed(&t["since_place"], 2 * MAX_IN_FLIGHT).map_err(|s| {
        format!(
            "{}; mv-0 after its re-hint: {s}; the trace from 5 ms before its placement: {at_rehint}",
            notes.join("; ")
        )
    })?;
    if u(&t["since_place"]["in_flight"]) > 0 {
        notes.push(format!(
            "runs in flight; the trace from 5 ms before its placement: {at_rehint}"
        ));
    }
    notes.push(format!(
        "trace: mv-0 in groups {} (DF 1 {ga}, DF 2 {gb}), last placed in {gb} {:.1} ms after the re-hint began (which returned after {:.1} ms); since: {a}",
        t["groups"],
        (placed_at - at) as f64 / 1e6,
        done.saturating_sub(at) as f64 / 1e6
    ));

    // DF 1's group's first home out of the hogged LLC after the hogs started, and its runs from
    // there to its next home (the balancer may move it again) or the cut.
    if ga_moved != ga {
        return Err(format!(
            "{}; DF 1's group was {ga}, at the cut {ga_moved}",
            notes.join("; ")
        ));
    }
    let whole = summary(ctx, file, 0, Some(cut_b))?;
    let homes: Vec<(u64, CpuSet)> = whole["groups"][ga.to_string()]["homes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| Some((u(&h["t_ns"]), h["home"].as_str()?.parse().ok()?)))
        .collect();
    let Some(i) = homes
        .iter()
        .position(|(t, h)| *t >= hogs_from && h.intersection(&llc).is_empty())
    else {
        return Err(format!(
            "{}; the trace shows no home of DF 1's group {ga} out of {llc} after the hogs: {homes:?}",
            notes.join("; ")
        ));
    };
    let (moved_at, traced) = homes[i].clone();
    let next = homes.get(i + 1).map(|h| h.0);
    // With no later move the state at the cut must be the trace's home.
    if next.is_none() && traced != home_moved {
        return Err(format!(
            "{}; DF 1's home at the cut: the trace says {traced}, the state {home_moved}",
            notes.join("; ")
        ));
    }
    let sb = summary(ctx, file, 0, Some(next.unwrap_or(cut_b)))?;
    let g = &sb["groups"][ga.to_string()];
    if last_home(g) != Some((moved_at, traced.clone())) {
        return Err(format!(
            "the summary's last home of group {ga}: {}",
            g["homes"]
        ));
    }
    let b = followed(&g["since_home"], 2 * MAX_IN_FLIGHT)
        .map_err(|s| format!("{}; DF 1's group after its move: {s}", notes.join("; ")))?;
    let first: Vec<String> = g["windows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| u(&w["from_ns"]) + u(&sb["t0_ns"]) + u(&sb["window_ns"]) > moved_at)
        .take(3)
        .map(|w| {
            format!(
                "{:.0}s:{}",
                u(&w["from_ns"]) as f64 / 1e9,
                w["cpus"].as_str().unwrap_or("")
            )
        })
        .collect();
    notes.push(format!(
        "trace: DF 1's group {ga} homed {traced} {:.1} s after the hogs{}; from then to {}: {b}; its CPUs by second from then: {}",
        (moved_at - hogs_from) as f64 / 1e9,
        if i > 0 { format!(" (homes before: {:?})", &homes[..i].iter().map(|h| h.1.to_string()).collect::<Vec<_>>()) } else { String::new() },
        match next {
            Some(t) => format!("its next home {:.1} s later", (t - moved_at) as f64 / 1e9),
            None => "the cut".into(),
        },
        first.join(" ")
    ));
    notes.push(unloaded);
    Ok(notes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_is_followed_only_with_no_run_off_home_and_few_in_flight() {
        let p = |on: u64, fl: u64, off: u64| serde_json::json!({"on_home": on, "in_flight": fl, "off_home": off, "cpus": "4-5"});
        assert!(followed(&p(10, 2, 0), 2).is_ok());
        assert!(
            followed(&p(10, 0, 1), 2).is_err(),
            "a run off the home once there"
        );
        assert!(
            followed(&p(10, 3, 0), 2).is_err(),
            "more in flight than allowed"
        );
        assert!(
            followed(&p(MIN_ON_HOME - 1, 0, 0), 2).is_err(),
            "too few runs to judge"
        );
    }

    #[test]
    fn the_last_home_of_a_group_is_read_from_the_summary() {
        let g = serde_json::json!({"homes": [
            {"t_ns": 5, "home": "0-3"},
            {"t_ns": 9, "home": "4-5"},
        ]});
        assert_eq!(last_home(&g), Some((9, "4-5".parse().unwrap())));
        assert_eq!(last_home(&serde_json::json!({"homes": []})), None);
    }

    #[test]
    fn the_workloads_time_lines_are_read_by_key() {
        let lines = Mutex::new(vec![
            "rehint-at 100".to_string(),
            "rehinted 250".to_string(),
            "{\"engine\":{}}".to_string(),
        ]);
        assert_eq!(field(&lines, "rehint-at "), Some(100));
        assert_eq!(field(&lines, "rehinted "), Some(250));
        assert_eq!(field(&lines, "moved "), None);
    }
}
