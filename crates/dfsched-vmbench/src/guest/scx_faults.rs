//! The sched_ext body's safety checks (a child of `scx.rs`, whose helpers it uses): faults with a
//! benchmark running under the scheduler, CPU hotplug under a home, and a stress-ng soak.
//!
//! - `scx-faults`: four faults, each while `dfsched-vmcheck sums` (`guest/sums.rs`: a DF per LLC,
//!   two threads each, `DFSCHED_SCX=auto`, its result checked against a closed form) runs under
//!   the scheduler, its threads placed in the scheduler's groups first:
//!   - the loader SIGSTOPped: the scheduler stays enabled and every thread stays on its home
//!     (stale maps) for 10 samples, each thread gaining CPU time; SIGCONT, the bench ends, then a
//!     clean unload;
//!   - the loader SIGKILLed: the kernel disables the scheduler, the threads are back on the
//!     default scheduler (`ext.enabled: 0`), clean kernel log;
//!   - the bench's first group never dispatched (`--test-stall-group 0`, test only): the watchdog
//!     ends the scheduler (exit 1, "runnable task stall" naming a bench thread), threads back on
//!     the default scheduler, no `BUG:`/`WARNING:` in the log;
//!   - SysRq-S: the loader exits 2 ("sysrq"), state disabled, clean log;
//!
//!   and after each the bench's threads all gain CPU time, and the bench exits 0 with
//!   `sums verified` (no chunk of work lost or done twice). What the runtime did is shown from
//!   its stats (`scx_body`, `scx_failures`): it finds a dead scheduler only at its next request,
//!   then places by affinity (`crates/dfsched-rt/src/scx.rs`); until then its threads keep the
//!   `SCHED_EXT` policy, which the kernel runs in the fair class when no BPF scheduler is loaded.
//! - `scx-hotplug`: a group of three `SCHED_EXT` spinners on a home of two CPUs (the first half
//!   of the last LLC, so one thread is always queued) while both CPUs go offline: the scheduler
//!   stays enabled (a 6.12 kernel ends a scheduler without `ops.cpu_online`/`cpu_offline` at the
//!   first hotplug event), every spinner leaves the offline CPUs and gains CPU time for 10
//!   samples, the BPF side counts the threads it sent to the shared queue (`enq_home_offline`) or
//!   drained; the CPUs come back, the spinners return to their home, a clean unload (no `stall`).
//! - `scx-soak`: the scheduler in all mode (stress-ng's tasks are scheduled by it) with a group of
//!   spinners placed on a home; `stress-ng --aggressive` with CPU-affinity churn (`--affinity 2
//!   --affinity-rand`) beside `--cpu 2 --schedpolicy 2 --fork 2` (`--schedpolicy` moves its
//!   workers through SCHED_OTHER, BATCH, IDLE, FIFO, RR and DEADLINE, in and out of sched_ext)
//!   for 30 s exits 0; the scheduler stays enabled through it (sampled each second), the spinners
//!   are on their home after it, and the unload is clean with nothing matching
//!   `BUG:|WARNING:|stall` in the kernel log.
//!
//! Invariant: each check leaves sched_ext disabled (the loader is killed on an early return), no
//! stopped loader (SIGCONT on every path) and no offline CPU (`OnlineAgain`).

use super::{
    bad_log_line, ext_enabled, ext_spinners, group_line, half_llc_homes, homes_by_tid,
    kernel_ended, log_since, on_home, online, place_line, reach_and_hold, read, spinners_on_home,
    stat, Client, Loaded, HOLD_SAMPLES, STATE,
};
use crate::guest::checks::{set_online, OnlineAgain};
use crate::guest::observe::Thread;
use crate::guest::workload::Running;
use crate::guest::{poll, Ctx, Step, SAMPLE};
use dfsched_core::{CpuId, CpuSet};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// Threads per DF of the bench (a DF per LLC).
const BENCH_PER_DF: usize = 2;

/// How long every thread of the bench must gain CPU time to count as going on.
const PROGRESS_WINDOW: Duration = Duration::from_secs(3);

/// Windows of [`PROGRESS_WINDOW`] in which every spinner must gain CPU time while its home is
/// offline.
const OFFLINE_WINDOWS: u32 = 2;

/// How long stress-ng runs, and how long it is given to end (start, 30 s, stop, under TCG).
const SOAK_SECS: u64 = 30;
const SOAK_LIMIT: Duration = Duration::from_secs(300);

/// Sends `sig` to `pid`, our child.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// CPU time (user + system, in clock ticks) of thread `tid` of `pid`: `/proc/…/stat` fields 14
/// and 15; `None` once it has exited.
fn cpu_ticks(pid: u32, tid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace().skip(14 - 3);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Whether every thread in `tids` of `pid` gains CPU time over [`PROGRESS_WINDOW`]: `Ok` with
/// the gains, `Err` naming the threads that did not (stranded, or gone).
fn all_gain(pid: u32, tids: &[i32]) -> Result<String, String> {
    let before: Vec<Option<u64>> = tids.iter().map(|&t| cpu_ticks(pid, t)).collect();
    std::thread::sleep(PROGRESS_WINDOW);
    let mut gains = Vec::new();
    let mut stuck = Vec::new();
    for (i, &t) in tids.iter().enumerate() {
        match (before[i], cpu_ticks(pid, t)) {
            (Some(a), Some(b)) if b > a => gains.push(b - a),
            (a, b) => stuck.push(format!("tid {t} ticks {a:?} → {b:?}")),
        }
    }
    if stuck.is_empty() {
        Ok(format!(
            "every thread gained CPU time over {PROGRESS_WINDOW:?} (ticks {gains:?})"
        ))
    } else {
        Err(format!("threads that did not run: {}", stuck.join(", ")))
    }
}

/// SIGCONT to a stopped loader however the check ends.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}

/// `dfsched-vmcheck sums` under the scheduler (`DFSCHED_SCX=auto`).
struct Bench {
    run: Running,
    threads: usize,
}

impl Bench {
    fn start(ctx: &Ctx) -> Result<Bench, String> {
        let dfs = ctx.preset.expected.llcs.len();
        let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
        cmd.args(["sums", &dfs.to_string(), &BENCH_PER_DF.to_string()])
            .env("DFSCHED_SCX", "auto");
        Ok(Bench {
            run: Running::start(cmd, "dfsched-vmcheck sums")?,
            threads: dfs * BENCH_PER_DF,
        })
    }

    fn pid(&self) -> u32 {
        self.run.pid()
    }

    /// Its DF threads (`df{D}-{I}`).
    fn threads(&self) -> Result<Vec<Thread>, String> {
        Ok(self.run.groups()?.into_values().flatten().collect())
    }

    fn tids(&self) -> Result<Vec<i32>, String> {
        Ok(self.threads()?.iter().map(|t| t.tid).collect())
    }

    /// Waits until every DF thread is in one of the scheduler's groups and `ext.enabled`.
    fn placed(&self, loaded: &Loaded) -> Result<BTreeMap<i32, (u64, CpuSet)>, String> {
        let mut homes = BTreeMap::new();
        poll(Duration::from_secs(120), || {
            let (ts, state) = match (self.threads(), loaded.state()) {
                (Ok(ts), Ok(s)) => (ts, s),
                (Err(e), _) | (_, Err(e)) => return Step::NotYet(e),
            };
            homes = homes_by_tid(&state);
            let placed = ts
                .iter()
                .filter(|t| {
                    homes.contains_key(&t.tid) && ext_enabled(self.pid(), t.tid) == Some(true)
                })
                .count();
            let s = format!(
                "{placed} of {} bench threads placed, ext.enabled",
                self.threads
            );
            if ts.len() == self.threads && placed == self.threads {
                Step::Holds(s)
            } else {
                Step::NotYet(s)
            }
        })
        .map_err(|e| format!("the bench under the scheduler: {e}"))?;
        Ok(homes)
    }

    /// Waits until no DF thread is `ext.enabled` (back on the default scheduler) and sched_ext
    /// is disabled.
    fn back_on_default(&self) -> Result<String, String> {
        poll(Duration::from_secs(60), || {
            let state = read(STATE);
            let tids = self.tids().unwrap_or_default();
            let on: Vec<Option<bool>> = tids.iter().map(|&t| ext_enabled(self.pid(), t)).collect();
            let s = format!("state {state}, bench ext.enabled {on:?}");
            if state == "disabled"
                && on.len() == self.threads
                && on.iter().all(|&x| x == Some(false))
            {
                Step::Holds(s)
            } else {
                Step::NotYet(s)
            }
        })
    }

    /// Every DF thread gains CPU time ([`all_gain`]).
    fn goes_on(&self) -> Result<String, String> {
        all_gain(self.pid(), &self.tids()?)
    }

    /// Ends it (stdin closed): it must exit 0 having verified its result; what its runtime's
    /// stats say of the scx body.
    fn finish(self) -> Result<String, String> {
        let out = self.run.finish(180)?;
        let verified = out.lines().find(|l| l.starts_with("sums verified"));
        let sums: Vec<&str> = out.lines().filter(|l| l.starts_with("sums df")).collect();
        if verified.is_none() {
            return Err(format!("the bench did not verify its result: {out}"));
        }
        let stats: serde_json::Value = out
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .ok_or(format!("the bench printed no stats: {out}"))?;
        Ok(format!(
            "bench exit 0, verified ({}); runtime scx_body {}, scx_failures {}, scx_placements {}, affinity_calls {}",
            sums.join(", ").replace("sums ", ""),
            stats["scx_body"],
            stats["scx_failures"],
            stats["scx_placements"],
            stats["affinity_calls"],
        ))
    }
}

/// SIGSTOP: the BPF side goes on with the maps as they were.
fn stopped(ctx: &Ctx) -> Result<String, String> {
    let full = online()?;
    let loaded = Loaded::start(ctx, &[])?;
    let bench = Bench::start(ctx)?;
    // The homes as placed, read now: the stopped loader cannot answer `state`.
    let homes = bench.placed(&loaded)?;
    let pid = loaded.run.pid();
    signal(pid, libc::SIGSTOP);
    let cont = Continue(pid);
    let mut held = String::new();
    for i in 0..HOLD_SAMPLES {
        std::thread::sleep(SAMPLE);
        let state = read(STATE);
        if state != "enabled" {
            return Err(format!("loader stopped: state {state}"));
        }
        held = on_home(bench.pid(), &bench.threads()?, &homes, &full)
            .map_err(|e| format!("loader stopped, sample {i}: {e}"))?;
    }
    let gain = bench
        .goes_on()
        .map_err(|e| format!("loader stopped: {e}"))?;
    drop(cont);
    let result = bench.finish()?;
    let unloaded = loaded.unload()?;
    Ok(format!(
        "SIGSTOP: state enabled, bench threads on their home for {HOLD_SAMPLES} samples ({held}), {gain}; \
         SIGCONT; {result}; SIGINT: {unloaded}"
    ))
}

/// SIGKILL: the kernel unloads the scheduler; the bench goes on under the default scheduler.
fn killed(ctx: &Ctx) -> Result<String, String> {
    let mut loaded = Loaded::start(ctx, &[])?;
    let bench = Bench::start(ctx)?;
    bench.placed(&loaded)?;
    signal(loaded.run.pid(), libc::SIGKILL);
    let back = bench.back_on_default()?;
    let _ = loaded.run.child.wait();
    let bad = log_since(loaded.log_before, bad_log_line);
    if !bad.is_empty() {
        return Err(format!("after SIGKILL, kernel log: {bad:?}"));
    }
    let gain = bench.goes_on()?;
    let result = bench.finish()?;
    Ok(format!("SIGKILL: {back}; log clean; {gain}; {result}"))
}

/// A stalled group, the bench's first (the scheduler told never to dispatch it, a test-only
/// setting): the watchdog ends the scheduler; the kernel log says "stall" here, as it must.
fn stalled(ctx: &Ctx) -> Result<String, String> {
    let mut loaded = Loaded::start(ctx, &["--timeout-ms", "3000", "--test-stall-group", "0"])?;
    let bench = Bench::start(ctx)?;
    let (status, out) = loaded.wait_exit(Duration::from_secs(180))?;
    let said = kernel_ended(&out);
    // The kernel names the task that failed to run: one of the bench's (`df{D}-{I}[tid]`).
    if status.code() != Some(1) || !said.contains("stall") || !said.contains(": df") {
        return Err(format!(
            "after a stall of the bench's group the loader exited {status}: {out}"
        ));
    }
    let back = bench.back_on_default()?;
    let bad = log_since(loaded.log_before, |l| {
        l.contains("BUG:") || l.contains("WARNING:")
    });
    if !bad.is_empty() {
        return Err(format!("after the stall, kernel log: {bad:?}"));
    }
    let gain = bench.goes_on()?;
    let result = bench.finish()?;
    Ok(format!(
        "stalled group: exit 1, {}; {back}; {gain}; {result}",
        said.trim()
    ))
}

/// SysRq-S: the kernel ends the scheduler; the loader exits 2 with the kernel's reason.
fn sysrq(ctx: &Ctx) -> Result<String, String> {
    let mut loaded = Loaded::start(ctx, &[])?;
    let bench = Bench::start(ctx)?;
    bench.placed(&loaded)?;
    std::fs::write("/proc/sysrq-trigger", "S").map_err(|e| format!("/proc/sysrq-trigger: {e}"))?;
    let (status, out) = loaded.wait_exit(Duration::from_secs(30))?;
    let said = kernel_ended(&out);
    if status.code() != Some(2) || !said.to_lowercase().contains("sysrq") {
        return Err(format!("after SysRq-S the loader exited {status}: {out}"));
    }
    let back = bench.back_on_default()?;
    let bad = log_since(loaded.log_before, bad_log_line);
    if !bad.is_empty() {
        return Err(format!("after SysRq-S, kernel log: {bad:?}"));
    }
    let gain = bench.goes_on()?;
    let result = bench.finish()?;
    Ok(format!(
        "SysRq-S: exit 2, {}; {back}; log clean; {gain}; {result}",
        said.trim()
    ))
}

/// `scx-faults`: see the module doc.
pub(super) fn faults(ctx: &Ctx) -> Result<String, String> {
    let mut seen = Vec::new();
    for (what, fault) in [
        ("SIGSTOP", stopped as fn(&Ctx) -> Result<String, String>),
        ("SIGKILL", killed),
        ("stall", stalled),
        ("SysRq-S", sysrq),
    ] {
        seen.push(fault(ctx).map_err(|e| format!("{what}: {e}; before it: {}", seen.join("; ")))?);
    }
    Ok(seen.join(" | "))
}

/// `scx-hotplug`: see the module doc.
pub(super) fn hotplug(ctx: &Ctx) -> Result<String, String> {
    let full = online()?;
    let home = half_llc_homes(ctx).pop().ok_or("no LLC")?;
    if home.contains(CpuId(0)) {
        return Err(format!(
            "the home {home} holds CPU 0, which cannot go offline"
        ));
    }
    let _ = std::fs::remove_file(HOTPLUG_TRACE);
    let mut loaded = Loaded::start(ctx, &["--trace", HOTPLUG_TRACE, "--trace-max-mb", "32"])?;
    let (spin, tids) = ext_spinners(ctx, home.len() + 1)?;
    let mut client = Client::start(ctx)?;
    let mut lines = vec![group_line(0, &home)];
    lines.extend(tids.iter().map(|&t| place_line(t, 0)));
    client.send(&lines)?;
    let start = reach_and_hold("spinners on their home", || {
        spinners_on_home(&loaded, &spin, &full)
    })?;
    let before = loaded.state()?;
    let _back = OnlineAgain(home.clone());
    set_online(&home, false)?;
    // Every spinner leaves the offline CPUs (its last CPU is an online one)…
    let moved = poll(Duration::from_secs(60), || {
        if !loaded.run.alive() || read(STATE) != "enabled" {
            return Step::Broken(format!(
                "the scheduler ended with {home} offline: state {}; {}",
                read(STATE),
                loaded.output()
            ));
        }
        let Ok(ts) = spin.threads() else {
            return Step::NotYet("spinners not readable".into());
        };
        let at: Vec<String> = ts
            .iter()
            .filter(|t| t.name.starts_with("spin-"))
            .map(|t| format!("{}@{}", t.name, t.cpu))
            .collect();
        let s = format!("{home} offline: {}", at.join(" "));
        let on_offline = ts
            .iter()
            .any(|t| t.name.starts_with("spin-") && home.contains(CpuId(t.cpu)));
        if on_offline {
            Step::NotYet(s)
        } else {
            Step::Holds(s)
        }
    })?;
    // …and they all keep running, while the scheduler stays.
    let mut gains = Vec::new();
    for _ in 0..OFFLINE_WINDOWS {
        gains.push(all_gain(spin.pid(), &tids)?);
        if !loaded.run.alive() || read(STATE) != "enabled" {
            return Err(format!(
                "the scheduler ended with {home} offline: {}",
                loaded.output()
            ));
        }
    }
    let after = loaded.state()?;
    let d = |n: &str| stat(&after, n).saturating_sub(stat(&before, n));
    let (offline_enq, drained) = (d("enq_home_offline"), d("disp_drain"));
    if offline_enq + drained == 0 {
        return Err(format!(
            "{home} offline, yet no thread went to the shared queue nor was drained: {after}"
        ));
    }
    set_online(&home, true)?;
    let returned = reach_and_hold("spinners back on their home", || {
        spinners_on_home(&loaded, &spin, &full)
    })?;
    let (partly, away) = part_of_home_offline(ctx, &mut loaded, &spin, &tids, &home)?;
    client.close();
    spin.finish(30)?;
    let unloaded = loaded.unload()?;
    let traced = hotplug_in_trace(ctx, &home, &away)?;
    Ok(format!(
        "home {home}, {} spinners: {start}; {moved}, state enabled; {}; enq_home_offline {offline_enq}, disp_drain {drained}; \
         back online: {returned}; {partly}; {unloaded}; {traced}",
        tids.len(),
        gains.join("; ")
    ))
}

/// `scx-hotplug`'s dispatch trace (`run --trace`): the BPF side's `ops.cpu_offline`/`cpu_online` write
/// a record each (`C t cpu off|on`), and `dfsched-scx trace --json` counts them.
const HOTPLUG_TRACE: &str = "/tmp/scx-hotplug.trace";

/// The trace of `scx-hotplug` must hold its CPU changes, in order: `home` offline then online, then
/// `away` offline then online.
fn hotplug_in_trace(ctx: &Ctx, home: &CpuSet, away: &CpuSet) -> Result<String, String> {
    let s = super::trace::summary(ctx, HOTPLUG_TRACE, 0, None)?;
    let h = &s["hotplug"];
    let got: Vec<String> = h["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}{}",
                e["cpu"],
                if e["online"] == true { "+" } else { "-" }
            )
        })
        .collect();
    let mut want = Vec::new();
    for (set, online) in [(home, false), (home, true), (away, false), (away, true)] {
        want.extend(
            set.iter()
                .map(|c| format!("{}{}", c.0, if online { "+" } else { "-" })),
        );
    }
    let _ = std::fs::remove_file(HOTPLUG_TRACE);
    if got != want {
        return Err(format!(
            "the trace's hotplug records (cpu+ online, cpu- offline): {got:?}, expected {want:?}; {h}"
        ));
    }
    Ok(format!(
        "trace: {} offline, {} online: {}",
        h["offline"],
        h["online"],
        got.join(" ")
    ))
}

/// `scx-hotplug`'s second half: the home's CPUs but its first go offline, while a `SCHED_EXT` thread
/// of another process is pinned to one of them alone. The group's spinners must run on the home's
/// online CPU only (none elsewhere while it is online: the home counts only its online CPUs), every
/// one gaining CPU time, and the BPF side must send none of them to the shared queue (the home is
/// live). The pinned thread's affinity then allows only offline CPUs: by the kernel's rule it
/// widens it (`select_fallback_rq`: "no longer affine to cpuN"), and the thread must go on running,
/// with the scheduler enabled (no stall, no error). The CPUs come back and the spinners return to
/// their whole home.
fn part_of_home_offline(
    ctx: &Ctx,
    loaded: &mut Loaded,
    spin: &Running,
    tids: &[i32],
    home: &CpuSet,
) -> Result<(String, CpuSet), String> {
    let mut cpus = home.iter();
    let keep: CpuSet = cpus.next().into_iter().collect();
    let away: CpuSet = cpus.collect();
    let Some(pin_to) = away.iter().next() else {
        return Err(format!("the home {home} has one CPU: no part of it can go"));
    };
    let full = online()?;
    let mut cmd = Command::new(ctx.bin("dfsched-scx"));
    cmd.args(["ext", "--"])
        .arg(ctx.bin("dfsched-vmspin"))
        .args(["1", "--cpus", &pin_to.0.to_string()]);
    let pinned = Running::start(cmd, "a SCHED_EXT spinner pinned to one CPU")?;
    let pinned_tid: i32 = poll(Duration::from_secs(60), || match pinned.threads() {
        Ok(ts) => match ts.iter().find(|t| t.name == "spin-0") {
            Some(t) if t.mask == [pin_to].into_iter().collect::<CpuSet>() => {
                Step::Holds(t.tid.to_string())
            }
            Some(t) => Step::NotYet(format!("spin-0 mask {}", t.mask)),
            None => Step::NotYet("no spin-0 yet".into()),
        },
        Err(e) => Step::NotYet(e),
    })?
    .parse()
    .map_err(|e| format!("spin-0's tid: {e}"))?;
    let before = loaded.state()?;
    let _back = OnlineAgain(away.clone());
    set_online(&away, false)?;
    let on_rest = reach_and_hold(
        &format!("spinners on {keep}, the online part of their home, with {away} offline"),
        || {
            if !loaded.run.alive() || read(STATE) != "enabled" {
                return Err(format!("the scheduler ended: state {}", read(STATE)));
            }
            let ts = spin.threads()?;
            let at: Vec<String> = ts
                .iter()
                .filter(|t| t.name.starts_with("spin-"))
                .map(|t| format!("{}@{}", t.name, t.cpu))
                .collect();
            let s = at.join(" ");
            let elsewhere = ts
                .iter()
                .any(|t| t.name.starts_with("spin-") && !keep.contains(CpuId(t.cpu)));
            if elsewhere {
                Err(s)
            } else {
                Ok(s)
            }
        },
    )
    .map_err(|e| {
        if !loaded.run.alive() || read(STATE) != "enabled" {
            format!("{e}; {}", loaded.output())
        } else {
            e
        }
    })?;
    let gained = all_gain(spin.pid(), tids)?;
    let pinned_gained = all_gain(pinned.pid(), &[pinned_tid])
        .map_err(|e| format!("the thread pinned to offline CPU {pin_to}: {e}"))?;
    let widened = pinned
        .threads()?
        .into_iter()
        .find(|t| t.tid == pinned_tid)
        .map(|t| format!("its mask now {}, last on CPU {}", t.mask, t.cpu))
        .ok_or("the pinned spinner is gone")?;
    if !loaded.run.alive() || read(STATE) != "enabled" {
        return Err(format!(
            "the scheduler ended with {away} offline: {}",
            loaded.output()
        ));
    }
    let after = loaded.state()?;
    let sent = stat(&after, "enq_home_offline").saturating_sub(stat(&before, "enq_home_offline"));
    if sent > 0 {
        return Err(format!(
            "{keep} of the home {home} online, yet {sent} of its threads went to the shared queue (enq_home_offline)"
        ));
    }
    set_online(&away, true)?;
    let back = reach_and_hold("spinners back on their whole home", || {
        spinners_on_home(loaded, spin, &full)
    })?;
    pinned.finish(30)?;
    let said = format!(
        "{away} offline, {keep} online: {on_rest}; {gained}; enq_home_offline +0; \
         a thread pinned to {pin_to} alone: {pinned_gained}, {widened}; back online: {back}"
    );
    Ok((said, away))
}

/// The stressors `scx-soak` runs, each of which must report work done.
const SOAK_STRESSORS: [&str; 4] = ["affinity", "cpu", "schedpolicy", "fork"];

/// Bogo ops per stressor from stress-ng's `--metrics-brief` lines
/// (`stress-ng: metrc: [PID] NAME BOGO_OPS REAL USR SYS RATE RATE`).
fn bogo_ops(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| {
            let rest = l.split_once("metrc:")?.1;
            let mut f = rest.split_whitespace().skip(1);
            let name = f.next()?;
            let ops = f.next()?.parse().ok()?;
            Some((name.to_string(), ops))
        })
        .collect()
}

/// `scx-soak`: see the module doc.
pub(super) fn soak(ctx: &Ctx) -> Result<String, String> {
    let stress = ctx.bin("stress-ng");
    if !stress.is_file() {
        return Err(format!(
            "{} is not in the guest (the --scx initramfs carries it)",
            stress.display()
        ));
    }
    let full = online()?;
    let home: CpuSet = half_llc_homes(ctx).remove(0);
    let mut loaded = Loaded::start(ctx, &["--all"])?;
    let (spin, tids) = ext_spinners(ctx, home.len() + 1)?;
    let mut client = Client::start(ctx)?;
    let mut lines = vec![group_line(0, &home)];
    lines.extend(tids.iter().map(|&t| place_line(t, 0)));
    client.send(&lines)?;
    reach_and_hold("spinners on their home", || {
        spinners_on_home(&loaded, &spin, &full)
    })?;
    let mut cmd = Command::new(&stress);
    cmd.args(["--aggressive", "--affinity", "2", "--affinity-rand"])
        .args(["--cpu", "2", "--schedpolicy", "2", "--fork", "2"])
        .args([
            "-t",
            &format!("{SOAK_SECS}s"),
            "--metrics-brief",
            "--stdout",
        ])
        .current_dir("/tmp");
    let mut run = Running::start(cmd, "stress-ng")?;
    let started = Instant::now();
    let mut samples = 0;
    while run.alive() && started.elapsed() < SOAK_LIMIT {
        std::thread::sleep(Duration::from_secs(1));
        if !loaded.run.alive() || read(STATE) != "enabled" {
            return Err(format!(
                "the scheduler ended under stress-ng after {:?}: state {}; {}",
                started.elapsed(),
                read(STATE),
                loaded.output()
            ));
        }
        samples += 1;
    }
    let took = started.elapsed();
    let out = run.finish(10)?;
    let after = reach_and_hold("spinners on their home after stress-ng", || {
        spinners_on_home(&loaded, &spin, &full)
    })?;
    let state = loaded.state()?;
    client.close();
    spin.finish(30)?;
    let unloaded = loaded.unload()?;
    let ops = bogo_ops(&out);
    let idle: Vec<&&str> = SOAK_STRESSORS
        .iter()
        .filter(|n| ops.get(**n).copied().unwrap_or(0) == 0)
        .collect();
    if !out.contains("successful run completed") || !idle.is_empty() {
        return Err(format!(
            "stress-ng exited 0 but stressors {idle:?} did no work (or no successful run): {out}"
        ));
    }
    Ok(format!(
        "stress-ng exit 0 after {:.0} s, successful run, bogo ops {ops:?}; state enabled on {samples} samples; spinners: {after}; \
         dispatches shared {}, group {}; {unloaded}",
        took.as_secs_f64(),
        stat(&state, "disp_shared"),
        stat(&state, "disp_same_group") + stat(&state, "disp_group_switch"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_ngs_metrics_give_bogo_ops_per_stressor() {
        let out = "stress-ng: info:  [99] dispatching hogs: 2 affinity, 2 cpu\n\
                   stress-ng: metrc: [99] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\n\
                   stress-ng: metrc: [99]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)\n\
                   stress-ng: metrc: [99] affinity          1234     30.01      0.27      0.00       41.1        123.4\n\
                   stress-ng: metrc: [99] cpu                  0     30.00      0.27      0.00        0.0          0.0\n\
                   stress-ng: info:  [99] successful run completed in 30.20s\n";
        let ops = bogo_ops(out);
        assert_eq!(ops.get("affinity"), Some(&1234));
        assert_eq!(ops.get("cpu"), Some(&0));
        assert_eq!(ops.len(), 2, "{ops:?}");
    }
}
