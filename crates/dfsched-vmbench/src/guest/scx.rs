//! The sched_ext body's checks (`dfsched-vmbench run --scx`, on a kernel with sched_ext: the one
//! `scx-kernel/build.sh` builds, or `--kernel`): dfsched's BPF scheduler loaded by `dfsched-scx run`
//! (partial mode) or by `dfsched scx` (both modes), read back from the guest's kernel.
//!
//! - `scx-load-unload`: `state` = `enabled`, `root/ops` = `dfsched`; a program run with `SCHED_EXT`
//!   (`dfsched-scx ext`) shows `ext.enabled: 1` in `/proc/…/sched`, one run without it `0`; SIGINT
//!   unloads (exit 0, "unregistered from user space"), `state` = `disabled`, and the kernel log
//!   gained no line matching `BUG:|WARNING:|stall`.
//! - `scx-groups-on-home`: the scheduler alone, driven through its socket (`dfsched-scx client`):
//!   one group per LLC with a home of half its CPUs and one thread more than the home has CPUs;
//!   every thread runs only on its home, sample after sample, while its `Cpus_allowed_list` stays
//!   every CPU; the group's threads run in succession (`disp_same_group` counted); when the client's
//!   connection closes, its groups are gone.
//! - `scx-runtime-df-groups`: the runtime (`dfsched-vmcheck workload`, a DF per LLC) finds the
//!   scheduler by itself (`DFSCHED_SCX=auto`): its threads get `SCHED_EXT`, each DF's threads share
//!   one scheduler group, and each runs only on its group's home with a full mask.
//! - `scx-bench-df`: `dfsched bench df --modes dfsched` under the scheduler: every worker shows
//!   `ext.enabled: 1` with a full mask and the bench ends with its JSON. Where each worker ran is
//!   counted, not judged: the engine may re-home a group while its threads are still hinting, and
//!   a thread's last CPU then lags its group's new home for a moment.
//! - `scx-engine-replay` (`brain.rs`): the same bench with DF switches, its engine logged
//!   (`DFSCHED_ENGINE_LOG`), the log replayed on the host: one brain, identical decisions.
//!
//! - `scx-succession`, `scx-rehint-and-move`: judged from a trace of the dispatches, in
//!   `scx_trace.rs` (succession on one CPU, quota 8 against 1; a thread re-hinted through the runtime
//!   and a group the runtime's balancer moves, each followed to its new home).
//! - `scx-faults`, `scx-hotplug`, `scx-soak`: the safety checks, in `scx_faults.rs` (the four
//!   faults with a checked benchmark running under the scheduler; a home's CPUs going offline and
//!   back; stress-ng with affinity churn beside the scheduler in all mode).
//!
//! - `scx-cli-partial`, `scx-cli-all`: `dfsched scx --partial|--all --policy co-thread --json`
//!   (the CLI spawning `dfsched-scx` beside it): loaded, the view's mode and policy, membership by
//!   mode (all: every fair-policy task of the system `ext.enabled: 1`), a libdfsched-preloaded
//!   program that chose no policy runs co-thread (one scheduler group) and `dfsched top --once
//!   --json` (through an agent of its own) names its body `scx`, SIGINT to the CLI unloads
//!   cleanly (exit 0, `{"end":{"status":0}}`, state disabled, clean log).
//!
//! Every check loads the scheduler itself and unloads it before returning (the [`Loaded`] guard
//! kills it otherwise), so a failed check leaves the next one a kernel with sched_ext disabled.

#[path = "scx_faults.rs"]
mod faults;
#[path = "scx_load.rs"]
mod load;
#[path = "scx_trace.rs"]
pub mod trace;

use super::checks::CheckFn;
use super::observe::{self, Thread};
use super::workload::Running;
use super::Ctx;
use super::{poll, Step, SAMPLE};
use dfsched_core::{CpuId, CpuSet};
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::Command;
use std::time::{Duration, Instant};

/// The scx checks, in order (the topology check runs first).
pub const PLAN: &[(&str, usize, CheckFn)] = &[
    ("scx-load-unload", 1, load_unload),
    ("scx-groups-on-home", 1, groups_on_home),
    ("scx-runtime-df-groups", 1, runtime_df_groups),
    ("scx-bench-df", 1, bench_df),
    ("scx-engine-replay", 1, super::brain::scx_engine_replay),
    ("scx-succession", 1, trace::succession),
    ("scx-rehint-and-move", 2, trace::rehint_and_move),
    ("scx-faults", 1, faults::faults),
    ("scx-hotplug", 1, faults::hotplug),
    ("scx-hotplug-at-load", 1, load::hotplug_at_load),
    ("scx-soak", 1, faults::soak),
    ("scx-cli-partial", 1, cli_partial),
    ("scx-cli-all", 1, cli_all),
];

const SOCKET: &str = "/run/dfsched-scx/sock";
const STATE: &str = "/sys/kernel/sched_ext/state";
const OPS: &str = "/sys/kernel/sched_ext/root/ops";

/// Worker threads of the `scx-bench-df` run.
const BENCH_THREADS: usize = 8;

/// Its iterations: enough for the workers to live some seconds under TCG (0.12 s for 100,000 on
/// the development host, about 30 s for this many in the guest), so each is sampled several times.
const BENCH_ITERATIONS: &str = "2000000";

/// Samples a placement must hold on once reached.
const HOLD_SAMPLES: u32 = 10;

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The kernel log, a line each.
fn dmesg() -> Vec<String> {
    Command::new("dmesg")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a kernel log line says something went wrong.
fn bad_log_line(line: &str) -> bool {
    ["BUG:", "WARNING:", "stall"]
        .iter()
        .any(|w| line.contains(w))
}

/// The kernel log lines after the first `before` (a length of [`dmesg`] taken earlier) that
/// `bad` picks.
fn log_since(before: usize, bad: impl Fn(&str) -> bool) -> Vec<String> {
    dmesg()
        .into_iter()
        .skip(before)
        .filter(|l| bad(l))
        .collect()
}

/// The loader's "the kernel ended …" line in its output (empty if it printed none).
fn kernel_ended(out: &str) -> String {
    out.lines()
        .find(|l| l.contains("the kernel ended"))
        .unwrap_or_default()
        .to_string()
}

/// `ext.enabled` of thread `tid` of process `pid` (`None`: not readable, e.g. exited).
fn ext_enabled(pid: u32, tid: i32) -> Option<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).ok()?;
    let line = text.lines().find(|l| l.starts_with("ext.enabled"))?;
    Some(line.rsplit(':').next()?.trim() == "1")
}

fn online() -> Result<CpuSet, String> {
    observe::cpulist("/sys/devices/system/cpu/online")
}

/// The scheduler, loaded for one check; killed (which unloads it) if the check ends early.
pub(super) struct Loaded {
    run: Running,
    /// Kernel log lines before the load: only later ones are judged.
    log_before: usize,
    scx: std::path::PathBuf,
}

impl Loaded {
    /// Starts `dfsched-scx run` and waits for the kernel to show it enabled.
    pub(super) fn start(ctx: &Ctx, extra: &[&str]) -> Result<Loaded, String> {
        let state = read(STATE);
        if state != "disabled" {
            return Err(format!(
                "{STATE} is {state:?} before loading (a kernel without sched_ext, or a scheduler left loaded)"
            ));
        }
        let log_before = dmesg().len();
        // A loader that was killed leaves its socket file: the wait below must see the new one.
        let _ = std::fs::remove_file(SOCKET);
        let scx = ctx.bin("dfsched-scx");
        let mut cmd = Command::new(&scx);
        cmd.args(["run", "--socket", SOCKET]).args(extra);
        let run = Running::start(cmd, "dfsched-scx run")?;
        let mut loaded = Loaded {
            run,
            log_before,
            scx,
        };
        let seen = poll(Duration::from_secs(60), || {
            if !loaded.run.alive() {
                return Step::Broken("dfsched-scx run exited".into());
            }
            let (state, ops) = (read(STATE), read(OPS));
            let s = format!("state {state}, ops {ops}");
            if state == "enabled" && ops == "dfsched" && std::path::Path::new(SOCKET).exists() {
                Step::Holds(s)
            } else {
                Step::NotYet(s)
            }
        });
        match seen {
            Ok(_) => Ok(loaded),
            Err(e) => Err(format!("loading: {e}; {}", loaded.output())),
        }
    }

    /// The scheduler's state (`dfsched-scx state`).
    fn state(&self) -> Result<serde_json::Value, String> {
        let out = Command::new(&self.scx)
            .args(["state", "--socket", SOCKET])
            .output()
            .map_err(|e| format!("dfsched-scx state: {e}"))?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "dfsched-scx state: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        if v["ok"] != true {
            return Err(format!("dfsched-scx state: {v}"));
        }
        Ok(v["state"].clone())
    }

    /// Waits (at most `limit`) for the loader to exit by itself; its status and output.
    fn wait_exit(&mut self, limit: Duration) -> Result<(std::process::ExitStatus, String), String> {
        let end = Instant::now() + limit;
        loop {
            match self.run.child.try_wait() {
                Ok(Some(s)) => return Ok((s, self.output())),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
                _ => return Err(format!("the loader did not exit within {limit:?}")),
            }
        }
    }

    /// What the loader printed so far (after it ended: all of it).
    fn output(&mut self) -> String {
        if self.run.alive() {
            return String::from("(still running)");
        }
        let mut out = String::new();
        if let Some(mut o) = self.run.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.run.child.stderr.take() {
            let _ = e.read_to_string(&mut out);
        }
        out
    }

    /// SIGINT; then the loader must exit 0 saying the kernel unregistered it from user space, the
    /// kernel must show sched_ext disabled, and its log must have gained nothing bad.
    pub(super) fn unload(mut self) -> Result<String, String> {
        // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
        unsafe { libc::kill(self.run.pid() as libc::pid_t, libc::SIGINT) };
        let end = Instant::now() + Duration::from_secs(30);
        let status = loop {
            match self.run.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
                _ => return Err("dfsched-scx run did not exit within 30 s of SIGINT".into()),
            }
        };
        let out = self.output();
        if !status.success() {
            return Err(format!("dfsched-scx run exited {status}: {out}"));
        }
        let said = out
            .lines()
            .find(|l| l.contains("unloaded"))
            .unwrap_or_default()
            .to_string();
        if !said.contains("unregistered from user space") {
            return Err(format!("the loader did not report a clean unload: {out}"));
        }
        let state = read(STATE);
        if state != "disabled" {
            return Err(format!("{STATE} is {state:?} after unloading"));
        }
        let bad = log_since(self.log_before, bad_log_line);
        if !bad.is_empty() {
            return Err(format!("kernel log since the load: {bad:?}"));
        }
        Ok(format!("{}; state {state}; log clean", said.trim()))
    }
}

/// Which scheduler group and home each placed tid has, from the state's `groups`.
fn homes_by_tid(state: &serde_json::Value) -> BTreeMap<i32, (u64, CpuSet)> {
    let mut out = BTreeMap::new();
    for g in state["groups"].as_array().into_iter().flatten() {
        let Some(home) = g["home"].as_str().and_then(|h| h.parse::<CpuSet>().ok()) else {
            continue;
        };
        let gid = g["gid"].as_u64().unwrap_or(u64::MAX);
        for tid in g["tids"].as_array().into_iter().flatten() {
            if let Some(t) = tid.as_i64() {
                out.insert(t as i32, (gid, home.clone()));
            }
        }
    }
    out
}

/// One sample of `threads` against their homes: `Ok` if each runs in its home with the full mask.
fn on_home(
    pid: u32,
    threads: &[Thread],
    homes: &BTreeMap<i32, (u64, CpuSet)>,
    full: &CpuSet,
) -> Result<String, String> {
    let mut seen = Vec::new();
    let mut bad = Vec::new();
    for t in threads {
        let Some((gid, home)) = homes.get(&t.tid) else {
            bad.push(format!("{} (tid {}) in no group", t.name, t.tid));
            continue;
        };
        if ext_enabled(pid, t.tid) != Some(true) {
            bad.push(format!("{} not ext.enabled", t.name));
        }
        if t.mask != *full {
            bad.push(format!("{} mask {} (not {full})", t.name, t.mask));
        }
        if !home.contains(CpuId(t.cpu)) {
            bad.push(format!("{} on cpu {} outside home {home}", t.name, t.cpu));
        }
        seen.push(format!("{}:g{gid}@{}", t.name, t.cpu));
    }
    if bad.is_empty() {
        Ok(seen.join(" "))
    } else {
        Err(format!("{}; seen {}", bad.join(", "), seen.join(" ")))
    }
}

/// Polls `sample` until it holds (as [`poll`]), then requires it on [`HOLD_SAMPLES`] more samples.
fn reach_and_hold(
    what: &str,
    mut sample: impl FnMut() -> Result<String, String>,
) -> Result<String, String> {
    poll(super::checks::SETTLE, || match sample() {
        Ok(s) => Step::Holds(s),
        Err(s) => Step::NotYet(s),
    })
    .map_err(|e| format!("{what}: {e}"))?;
    let mut last = String::new();
    for i in 0..HOLD_SAMPLES {
        std::thread::sleep(SAMPLE);
        last = sample().map_err(|e| format!("{what}: reached, then broken at sample {i}: {e}"))?;
    }
    Ok(last)
}

fn stat(state: &serde_json::Value, name: &str) -> u64 {
    state["stats"][name].as_u64().unwrap_or(0)
}

/// `dfsched-scx client --hold`: one connection, kept while this lives; requests sent as needed.
struct Client {
    run: Running,
    stdin: std::process::ChildStdin,
    replies: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Client {
    fn start(ctx: &Ctx) -> Result<Client, String> {
        let mut cmd = Command::new(ctx.bin("dfsched-scx"));
        cmd.args(["client", "--hold", "--socket", SOCKET]);
        let mut run = Running::start(cmd, "dfsched-scx client --hold")?;
        let stdin = run.child.stdin.take().ok_or("client stdin")?;
        let stdout = run.child.stdout.take().ok_or("client stdout")?;
        Ok(Client {
            run,
            stdin,
            replies: BufReader::new(stdout).lines(),
        })
    }

    /// Sends `lines`; `Err` unless every reply is `ok` (a reply comes within the server's timeout).
    fn send(&mut self, lines: &[String]) -> Result<(), String> {
        for l in lines {
            writeln!(self.stdin, "{l}").map_err(|e| format!("client stdin: {e}"))?;
            let reply = self
                .replies
                .next()
                .ok_or("the client ended")?
                .map_err(|e| format!("client stdout: {e}"))?;
            if !reply.contains(r#""ok":true"#) {
                return Err(format!("{l} got {reply}"));
            }
        }
        Ok(())
    }

    /// SIGINT: the connection closes, and the scheduler drops its groups.
    fn close(self) {
        // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
        unsafe { libc::kill(self.run.pid() as libc::pid_t, libc::SIGINT) };
    }
}

/// `n` spinning threads with `SCHED_EXT` (`dfsched-scx ext -- dfsched-vmspin n`), once all started.
fn ext_spinners(ctx: &Ctx, n: usize) -> Result<(Running, Vec<i32>), String> {
    let mut cmd = Command::new(ctx.bin("dfsched-scx"));
    cmd.arg("ext")
        .arg("--")
        .arg(ctx.bin("dfsched-vmspin"))
        .arg(n.to_string());
    let spin = Running::start(cmd, "SCHED_EXT spinners")?;
    poll(Duration::from_secs(60), || match spin.threads() {
        Ok(ts) if ts.iter().filter(|t| t.name.starts_with("spin-")).count() == n => {
            Step::Holds(String::new())
        }
        _ => Step::NotYet("spinners not all started".into()),
    })?;
    let tids = spin
        .threads()?
        .iter()
        .filter(|t| t.name.starts_with("spin-"))
        .map(|t| t.tid)
        .collect();
    Ok((spin, tids))
}

/// The `spin-*` threads of `spin` against the scheduler's homes (see [`on_home`]).
fn spinners_on_home(loaded: &Loaded, spin: &Running, full: &CpuSet) -> Result<String, String> {
    let state = loaded.state()?;
    let ts: Vec<Thread> = spin
        .threads()?
        .into_iter()
        .filter(|t| t.name.starts_with("spin-"))
        .collect();
    on_home(spin.pid(), &ts, &homes_by_tid(&state), full)
}

fn group_line(group: usize, home: &CpuSet) -> String {
    format!(r#"{{"op":"group","group":{group},"home":"{home}"}}"#)
}

fn place_line(tid: i32, group: usize) -> String {
    format!(r#"{{"op":"place","tid":{tid},"group":{group}}}"#)
}

fn load_unload(ctx: &Ctx) -> Result<String, String> {
    let loaded = Loaded::start(ctx, &[])?;
    let mut cmd = Command::new(ctx.bin("dfsched-scx"));
    cmd.arg("ext")
        .arg("--")
        .arg(ctx.bin("dfsched-vmspin"))
        .arg("2");
    let ext = Running::start(cmd, "dfsched-scx ext -- dfsched-vmspin 2")?;
    let mut cmd = Command::new(ctx.bin("dfsched-vmspin"));
    cmd.arg("1");
    let plain = Running::start(cmd, "dfsched-vmspin 1")?;
    let seen = poll(Duration::from_secs(60), || {
        let (Ok(e), Ok(p)) = (ext.threads(), plain.threads()) else {
            return Step::NotYet("threads not readable yet".into());
        };
        let spin = |ts: &[Thread]| -> Vec<i32> {
            ts.iter()
                .filter(|t| t.name.starts_with("spin-"))
                .map(|t| t.tid)
                .collect()
        };
        let (e, p) = (spin(&e), spin(&p));
        let e_on: Vec<Option<bool>> = e.iter().map(|&t| ext_enabled(ext.pid(), t)).collect();
        let p_on: Vec<Option<bool>> = p.iter().map(|&t| ext_enabled(plain.pid(), t)).collect();
        let s = format!("SCHED_EXT spinners ext.enabled {e_on:?}; plain spinner {p_on:?}");
        if e.len() == 2 && e_on.iter().all(|&x| x == Some(true)) && p_on == [Some(false)] {
            Step::Holds(s)
        } else {
            Step::NotYet(s)
        }
    })?;
    ext.finish(30)?;
    plain.finish(30)?;
    let unloaded = loaded.unload()?;
    Ok(format!(
        "enabled, ops dfsched (partial); {seen}; {unloaded}"
    ))
}

/// The first half (at least one CPU) of each LLC: homes smaller than the LLC, so the kernel's own
/// scheduler would spread the threads beyond them.
fn half_llc_homes(ctx: &Ctx) -> Vec<CpuSet> {
    ctx.preset
        .expected
        .llcs
        .iter()
        .map(|llc| {
            let cpus: Vec<CpuId> = llc.iter().collect();
            cpus[..cpus.len().div_ceil(2)].iter().copied().collect()
        })
        .collect()
}

fn groups_on_home(ctx: &Ctx) -> Result<String, String> {
    let full = online()?;
    let homes = half_llc_homes(ctx);
    let per: Vec<usize> = homes.iter().map(|h| h.len() + 1).collect();
    let total: usize = per.iter().sum();
    let loaded = Loaded::start(ctx, &[])?;
    let (spin, tids) = ext_spinners(ctx, total)?;
    // Group g: the next per[g] spinners, home homes[g].
    let mut lines = Vec::new();
    let mut at = 0;
    for (g, home) in homes.iter().enumerate() {
        lines.push(group_line(g, home));
        lines.extend(tids[at..at + per[g]].iter().map(|&t| place_line(t, g)));
        at += per[g];
    }
    let mut client = Client::start(ctx)?;
    client.send(&lines)?;
    let held = reach_and_hold("spinners on their group's home", || {
        spinners_on_home(&loaded, &spin, &full)
    })?;
    let state = loaded.state()?;
    let (same, switch, enq) = (
        stat(&state, "disp_same_group"),
        stat(&state, "disp_group_switch"),
        stat(&state, "enq_group"),
    );
    if enq == 0 || same == 0 {
        return Err(format!("no grouped dispatch counted: {state}"));
    }
    // Re-homed: group 0 moves to the CPUs of the last LLC that no group has (its second half), and
    // its threads must follow.
    let last = ctx.preset.expected.llcs.last().ok_or("no LLC")?;
    let taken: CpuSet = homes.iter().fold(CpuSet::new(), |a, h| a.union(h));
    let moved: CpuSet = last.iter().filter(|c| !taken.contains(*c)).collect();
    client.send(&[group_line(0, &moved)])?;
    let followed = reach_and_hold("group 0's threads on its new home", || {
        let state = loaded.state()?;
        let g0 = state["groups"]
            .as_array()
            .and_then(|gs| {
                gs.iter().find(|g| {
                    g["tids"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t.as_i64() == Some(tids[0] as i64)))
                })
            })
            .map(|g| g["home"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        if g0 != moved.to_string() {
            return Err(format!("group 0's home is {g0:?}, not {moved}"));
        }
        spinners_on_home(&loaded, &spin, &full)
    })?;
    // The client's connection ends: its groups with it.
    client.close();
    let gone = poll(Duration::from_secs(30), || match loaded.state() {
        Ok(s) if s["groups_in_use"] == 0 && s["threads_placed"] == 0 => {
            Step::Holds("no group left".into())
        }
        Ok(s) => Step::NotYet(format!("{}", s["groups"])),
        Err(e) => Step::NotYet(e),
    })?;
    spin.finish(30)?;
    let unloaded = loaded.unload()?;
    let homes: Vec<String> = homes.iter().map(|h| h.to_string()).collect();
    Ok(format!(
        "homes {homes:?}, {total} threads, full mask {full}; held {HOLD_SAMPLES} samples: {held}; \
         dispatches same-group {same}, group switches {switch}; group 0 re-homed to {moved}, held: {followed}; \
         client gone: {gone}; {unloaded}"
    ))
}

fn runtime_df_groups(ctx: &Ctx) -> Result<String, String> {
    let full = online()?;
    let dfs = ctx.preset.expected.llcs.len() as u64;
    let per = 2;
    let loaded = Loaded::start(ctx, &[])?;
    let mut cmd = Command::new(ctx.bin("dfsched-vmcheck"));
    cmd.args(["workload", &dfs.to_string(), &per.to_string(), "--no-split"])
        .env("DFSCHED_SCX", "auto");
    let wl = Running::start(cmd, "dfsched-vmcheck workload")?;
    let held = reach_and_hold("the runtime's DF threads on their group's home", || {
        let state = loaded.state()?;
        let groups = wl.groups()?;
        let threads: Vec<Thread> = groups.values().flatten().cloned().collect();
        if threads.len() as u64 != dfs * per as u64 {
            return Err(format!(
                "{} DF threads of {}",
                threads.len(),
                dfs * per as u64
            ));
        }
        let homes = homes_by_tid(&state);
        // One scheduler group per DF.
        for (df, ts) in &groups {
            let gids: Vec<Option<u64>> =
                ts.iter().map(|t| homes.get(&t.tid).map(|h| h.0)).collect();
            if gids.windows(2).any(|w| w[0] != w[1]) {
                return Err(format!("df{df}'s threads in groups {gids:?}"));
            }
        }
        on_home(wl.pid(), &threads, &homes, &full)
    })?;
    let out = wl.finish(120)?;
    let stats: serde_json::Value = out
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or(format!("the workload printed no stats: {out}"))?;
    if stats["scx_body"] != true || stats["scx_failures"] != 0 {
        return Err(format!(
            "the runtime's scx body: scx_body {}, scx_failures {}, scx_placements {}",
            stats["scx_body"], stats["scx_failures"], stats["scx_placements"]
        ));
    }
    let state = loaded.state()?;
    let unloaded = loaded.unload()?;
    Ok(format!(
        "{dfs} DFs of {per}; held {HOLD_SAMPLES} samples: {held}; runtime scx_placements {}, affinity_calls {}; \
         dispatches same-group {}, switches {}; {unloaded}",
        stats["scx_placements"],
        stats["affinity_calls"],
        stat(&state, "disp_same_group"),
        stat(&state, "disp_group_switch"),
    ))
}

fn bench_df(ctx: &Ctx) -> Result<String, String> {
    let full = online()?;
    let loaded = Loaded::start(ctx, &[])?;
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args(["bench", "df", "--modes", "dfsched", "--threads"])
        .arg(BENCH_THREADS.to_string())
        .args([
            "--dfs",
            "2",
            "--iterations",
            BENCH_ITERATIONS,
            "--repeat",
            "1",
            "--json",
        ])
        .env("DFSCHED_SCX", "auto");
    let mut bench = Running::start(cmd, "dfsched bench df --modes dfsched")?;
    // tid → (seen with ext.enabled 1, samples on its home, samples with a home, samples).
    let mut workers: BTreeMap<i32, (bool, u32, u32, u32)> = BTreeMap::new();
    let mut bad_masks = Vec::new();
    let end = Instant::now() + Duration::from_secs(900);
    while bench.alive() && Instant::now() < end {
        let state = loaded.state().unwrap_or_default();
        let homes = homes_by_tid(&state);
        for t in bench.threads().unwrap_or_default() {
            if !t.name.starts_with("df-worker") {
                continue;
            }
            let w = workers.entry(t.tid).or_default();
            w.3 += 1;
            if ext_enabled(bench.pid(), t.tid) == Some(true) {
                w.0 = true;
            }
            if t.mask != full {
                bad_masks.push(format!("{} mask {}", t.name, t.mask));
            }
            if let Some((_, home)) = homes.get(&t.tid) {
                w.2 += 1;
                if home.contains(CpuId(t.cpu)) {
                    w.1 += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = bench.finish(60)?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("bench JSON: {e}: {out}"))?;
    // A worker is judged once it was sampled a few times: its first sample may come before its
    // first hint (no placement, no SCHED_EXT yet).
    let judged = workers.values().filter(|w| w.3 >= 3).count();
    if judged < BENCH_THREADS {
        return Err(format!(
            "only {judged} of {BENCH_THREADS} workers were sampled 3 times while the bench ran (samples per worker: {:?})",
            workers.values().map(|w| w.3).collect::<Vec<_>>()
        ));
    }
    let not_ext: Vec<&i32> = workers
        .iter()
        .filter(|(_, w)| w.3 >= 3 && !w.0)
        .map(|(t, _)| t)
        .collect();
    if !not_ext.is_empty() {
        return Err(format!(
            "workers never seen with ext.enabled 1: {not_ext:?}"
        ));
    }
    if !bad_masks.is_empty() {
        bad_masks.truncate(5);
        return Err(format!("narrowed masks under the scx body: {bad_masks:?}"));
    }
    let (on, all) = workers
        .values()
        .fold((0, 0), |(a, b), w| (a + w.1, b + w.2));
    let state = loaded.state()?;
    let unloaded = loaded.unload()?;
    let keys: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    Ok(format!(
        "{} workers ({judged} sampled 3+ times), all ext.enabled 1 with full masks; samples on the group's home {on} of {all} (counted, not judged: a group's home may change while its threads hint); \
         dispatches same-group {}, switches {}; bench JSON keys {keys:?}; {unloaded}",
        workers.len(),
        stat(&state, "disp_same_group"),
        stat(&state, "disp_group_switch"),
    ))
}

/// The scheduling policy of task `tid` of `pid` (`/proc/…/stat` field 41), if readable.
fn sched_policy(pid: u32, tid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(41 - 3)?.parse().ok()
}

/// Every task of the system whose policy is a fair one (SCHED_NORMAL 0, BATCH 3, IDLE 5) or
/// SCHED_EXT (7): `(pid, tid, name, ext.enabled)`; tasks that exit while read are left out.
fn fair_tasks() -> Vec<(u32, i32, String, bool)> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        for t in std::fs::read_dir(p.path().join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let (Some(policy), Some(on)) = (sched_policy(pid, tid), ext_enabled(pid, tid)) else {
                continue;
            };
            if [0, 3, 5, 7].contains(&policy) {
                let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                out.push((pid, tid, name.trim().to_string(), on));
            }
        }
    }
    out
}

/// `dfsched scx --partial` / `--all` (the CLI, which finds `dfsched-scx` beside it), offering
/// co-thread: it loads the scheduler (`state` enabled, `root/ops` dfsched), its `--json` view
/// says the mode and the policy; membership as the mode says (partial: a `SCHED_EXT` program
/// `ext.enabled: 1`, a plain one and init `0`; all: every task of a fair policy `1`, a plain
/// program included); a program preloaded with libdfsched and no `DFSCHED_POLICY` takes the offered
/// co-thread policy (its threads one scheduler group, shown in the view); SIGINT to the CLI unloads
/// it cleanly (exit 0, "unregistered from user space", `{"end":{"status":0}}`, `state` disabled,
/// clean kernel log; in all mode init back to `ext.enabled: 0`).
fn cli(ctx: &Ctx, mode: &str) -> Result<String, String> {
    use std::sync::{Arc, Mutex};
    let state = read(STATE);
    if state != "disabled" {
        return Err(format!("{STATE} is {state:?} before loading"));
    }
    let log_before = dmesg().len();
    let _ = std::fs::remove_file(SOCKET);
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args(["scx", &format!("--{mode}"), "--policy", "co-thread"])
        .args(["--json", "--interval", "1"]);
    let mut run = Running::start(cmd, &format!("dfsched scx --{mode}"))?;
    // A check that fails before its own SIGINT unloads the scheduler through the CLI here, so
    // that the next check finds it disabled (killing the CLI, as `Running` does, would leave
    // its loader running).
    let mut unload_on_error = UnloadOnError(Some(run.pid()));
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = run.child.stdout.take().ok_or("dfsched scx stdout")?;
    let seen = lines.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().unwrap().push(l);
        }
    });
    // The newest state the CLI showed.
    let latest = || -> Option<serde_json::Value> {
        lines
            .lock()
            .unwrap()
            .iter()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("state").is_some())
    };
    let stderr_of = |run: &mut Running| {
        let mut e = String::new();
        if let Some(mut s) = run.child.stderr.take() {
            let _ = s.read_to_string(&mut e);
        }
        e
    };
    let loaded = poll(Duration::from_secs(90), || {
        let (state, ops) = (read(STATE), read(OPS));
        let s = format!("state {state}, ops {ops}");
        if !run.alive() {
            return Step::Broken(format!("dfsched scx exited; {s}"));
        }
        match latest() {
            Some(v) if state == "enabled" && ops == "dfsched" => Step::Holds(format!(
                "{s}; view: mode {}, policy {}",
                v["mode"], v["policy"]
            )),
            _ => Step::NotYet(s),
        }
    });
    let loaded = match loaded {
        Ok(s) => s,
        Err(e) => return Err(format!("loading: {e}; stderr: {}", stderr_of(&mut run))),
    };
    let view = latest().ok_or("no view")?;
    if view["mode"] != mode || view["policy"] != "co-thread" || view["ops"] != "dfsched" {
        return Err(format!("the view says {view}"));
    }
    let mut notes = vec![loaded];
    // `dfsched topology` names the body a program started now would use.
    let topo = Command::new(ctx.bin("dfsched"))
        .args(["topology", "--json"])
        .output()
        .map_err(|e| format!("dfsched topology: {e}"))?;
    let topo: serde_json::Value = serde_json::from_slice(&topo.stdout)
        .map_err(|e| format!("dfsched topology --json: {e}"))?;
    if topo["body"]["active"] != "scx" {
        return Err(format!(
            "dfsched topology's body while loaded: {}",
            topo["body"]
        ));
    }
    notes.push("topology body scx".into());

    let spin_tids = |r: &Running| -> Vec<i32> {
        r.threads()
            .unwrap_or_default()
            .iter()
            .filter(|t| t.name.starts_with("spin-"))
            .map(|t| t.tid)
            .collect()
    };
    let mut plain_cmd = Command::new(ctx.bin("dfsched-vmspin"));
    plain_cmd.arg("2");
    let plain = Running::start(plain_cmd, "dfsched-vmspin 2")?;
    if mode == "all" {
        let s = poll(Duration::from_secs(60), || {
            let on: Vec<Option<bool>> = spin_tids(&plain)
                .iter()
                .map(|&t| ext_enabled(plain.pid(), t))
                .collect();
            let s = format!("plain spinners ext.enabled {on:?}");
            if on.len() == 2 && on.iter().all(|&x| x == Some(true)) {
                Step::Holds(s)
            } else {
                Step::NotYet(s)
            }
        })?;
        notes.push(s);
        let tasks = fair_tasks();
        let off: Vec<String> = tasks
            .iter()
            .filter(|t| !t.3)
            .map(|t| format!("{}/{} {}", t.0, t.1, t.2))
            .collect();
        if !off.is_empty() || tasks.is_empty() {
            return Err(format!(
                "--all: {} of {} fair-policy tasks not ext.enabled: {off:?}",
                off.len(),
                tasks.len()
            ));
        }
        notes.push(format!(
            "all {} fair-policy tasks ext.enabled 1",
            tasks.len()
        ));
    } else {
        let (ext, ext_tids) = ext_spinners(ctx, 2)?;
        let s = poll(Duration::from_secs(60), || {
            let e: Vec<Option<bool>> = ext_tids
                .iter()
                .map(|&t| ext_enabled(ext.pid(), t))
                .collect();
            let p: Vec<Option<bool>> = spin_tids(&plain)
                .iter()
                .map(|&t| ext_enabled(plain.pid(), t))
                .collect();
            let init = ext_enabled(1, 1);
            let s = format!("SCHED_EXT spinners {e:?}, plain spinners {p:?}, init {init:?}");
            if e.iter().all(|&x| x == Some(true))
                && p.len() == 2
                && p.iter().all(|&x| x == Some(false))
                && init == Some(false)
            {
                Step::Holds(s)
            } else {
                Step::NotYet(s)
            }
        })?;
        notes.push(s);
        drop(ext);
    }
    drop(plain);

    // The offered policy: a preloaded program that chose none runs co-thread, one group. It
    // reports to an agent of its own, for `dfsched top` below.
    // In a directory of its own, mode 0700: the agent refuses a socket in a directory others may
    // write (the guest's /run is a tmpfs of mode 777).
    let top_dir = format!("/run/dfsched-scx-top-{mode}");
    let _ = std::fs::remove_dir_all(&top_dir);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&top_dir)
        .map_err(|e| format!("{top_dir}: {e}"))?;
    let top_sock = format!("{top_dir}/agent.sock");
    let agent = Command::new(ctx.bin("dfsched"))
        .args(["agent", "--socket", &top_sock])
        .output()
        .map_err(|e| format!("dfsched agent: {e}"))?;
    if !agent.status.success() {
        return Err(format!(
            "dfsched agent --socket {top_sock}: {}",
            String::from_utf8_lossy(&agent.stderr).trim()
        ));
    }
    let mut pre = Command::new(ctx.bin("dfsched-vmspin"));
    pre.arg("3")
        .env("LD_PRELOAD", ctx.bin("libdfsched.so"))
        .env("DFSCHED_PRELOAD", "1")
        .env("DFSCHED_AGENT", &top_sock)
        .env_remove("DFSCHED_POLICY");
    let pre = Running::start(pre, "libdfsched-preloaded dfsched-vmspin 3")?;
    let s = poll(Duration::from_secs(120), || {
        let tids = spin_tids(&pre);
        let Some(v) = latest() else {
            return Step::NotYet("no view".into());
        };
        let homes = homes_by_tid(&v);
        let gids: std::collections::BTreeSet<u64> = tids
            .iter()
            .filter_map(|t| homes.get(t))
            .map(|h| h.0)
            .collect();
        let on: Vec<Option<bool>> = tids.iter().map(|&t| ext_enabled(pre.pid(), t)).collect();
        let s = format!("preloaded spinners {tids:?}: groups {gids:?}, ext.enabled {on:?}");
        if tids.len() == 3
            && tids.iter().all(|t| homes.contains_key(t))
            && gids.len() == 1
            && on.iter().all(|&x| x == Some(true))
        {
            Step::Holds(s)
        } else {
            Step::NotYet(s)
        }
    })?;
    notes.push(format!("co-thread offered and taken: {s}"));
    // The live view names its body (`dfsched top --once --json`, the agent's view).
    let top = poll(Duration::from_secs(60), || {
        let out = match Command::new(ctx.bin("dfsched"))
            .args(["top", "--once", "--json", "--socket", &top_sock])
            .output()
        {
            Ok(o) => o,
            Err(e) => return Step::Broken(format!("dfsched top: {e}")),
        };
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let entry = v["processes"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["pid"] == pre.pid()).cloned());
        match entry.as_ref().map(|e| &e["detail"]["body"]) {
            Some(b) if b == "scx" => Step::Holds(format!("dfsched top: body {b}")),
            Some(b) if b.is_string() => Step::Broken(format!("dfsched top: body {b}")),
            _ => Step::NotYet(format!(
                "dfsched top exited {}: no detail for {} yet",
                out.status,
                pre.pid()
            )),
        }
    });
    drop(pre);
    let _ = Command::new(ctx.bin("dfsched"))
        .args(["agent", "--stop", "--socket", &top_sock])
        .output();
    notes.push(top?);

    unload_on_error.0 = None;
    // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
    unsafe { libc::kill(run.pid() as libc::pid_t, libc::SIGINT) };
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        match run.child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
            _ => return Err("dfsched scx did not exit within 60 s of SIGINT".into()),
        }
    };
    let err = stderr_of(&mut run);
    std::thread::sleep(Duration::from_millis(300)); // the reader's last lines
    let last = lines.lock().unwrap().last().cloned().unwrap_or_default();
    if status.code() != Some(0) || !err.contains("unregistered from user space") {
        return Err(format!(
            "dfsched scx exited {status}: stderr {err}; last line {last}"
        ));
    }
    let end_rec: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
    if end_rec["end"]["status"] != 0 {
        return Err(format!("the last --json line is not a clean end: {last}"));
    }
    let state = read(STATE);
    if state != "disabled" {
        return Err(format!("{STATE} is {state:?} after SIGINT"));
    }
    if mode == "all" && ext_enabled(1, 1) != Some(false) {
        return Err("init still ext.enabled after the unload".into());
    }
    let bad = log_since(log_before, bad_log_line);
    if !bad.is_empty() {
        return Err(format!("kernel log since the load: {bad:?}"));
    }
    notes.push(format!(
        "SIGINT: exit 0, {}; state {state}; log clean",
        end_rec["end"]["loader"].as_str().unwrap_or_default()
    ));
    Ok(notes.join("; "))
}

/// SIGINT to the `dfsched scx` CLI of a check that ended early (it forwards it to its loader),
/// then up to 60 s for the scheduler to be disabled; nothing once the check took the pid out.
struct UnloadOnError(Option<u32>);

impl Drop for UnloadOnError {
    fn drop(&mut self) {
        let Some(pid) = self.0 else {
            return;
        };
        // SAFETY: kill has no memory effects; the pid is the check's child, not yet reaped (its
        // `Running` is dropped after this guard).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        let _ = poll(Duration::from_secs(60), || {
            if read(STATE) == "disabled" {
                Step::Holds("disabled".to_string())
            } else {
                Step::NotYet("the scheduler still loaded".to_string())
            }
        });
    }
}

fn cli_partial(ctx: &Ctx) -> Result<String, String> {
    cli(ctx, "partial")
}

fn cli_all(ctx: &Ctx) -> Result<String, String> {
    cli(ctx, "all")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_log_is_judged_by_the_three_words() {
        assert!(bad_log_line("[ 9.1] BUG: kernel NULL pointer dereference"));
        assert!(bad_log_line(
            "sched_ext: BPF scheduler \"dfsched\" disabled (runnable task stall)"
        ));
        assert!(bad_log_line(
            "[ 3.0] WARNING: CPU: 1 PID: 5 at kernel/sched/ext.c"
        ));
        assert!(!bad_log_line(
            "sched_ext: BPF scheduler \"dfsched\" disabled (unregistered from user space)"
        ));
    }

    #[test]
    fn homes_are_read_by_tid_from_the_state() {
        let state = serde_json::json!({"groups": [
            {"gid": 0, "home": "0-1", "tids": [10, 11]},
            {"gid": 1, "home": "4-5", "tids": [12]},
        ]});
        let h = homes_by_tid(&state);
        assert_eq!(h[&10], (0, "0-1".parse().unwrap()));
        assert_eq!(h[&12], (1, "4-5".parse().unwrap()));
        assert_eq!(h.len(), 3);
    }
}
