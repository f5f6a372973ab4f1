//! `scx-hotplug-at-load`: a CPU that comes or goes while the loader loads the scheduler (a child of
//! `scx.rs`, whose helpers it uses).
//!
//! The loader reads the kernel's CPU hotplug count (`/sys/kernel/sched_ext/hotplug_seq`) before it
//! loads and gives it to the kernel (`ops.hotplug_seq`); the kernel refuses an attach whose count is
//! stale, and the loader loads again, a bounded number of times (crates/dfsched-scx, `sched.rs` and
//! `main.rs`). To make the race certain, the check runs the loader with its test pause
//! (`DFSCHED_SCX_TEST_ATTACH_PAUSE_MS`): it prints `hotplug_seq N read; attaching in M ms` and waits
//! between the read and the attach, and the check changes a CPU's state inside that wait:
//!
//! 1. the last CPU goes offline in the first attempt's wait and comes back in the second's: both
//!    attempts must be refused by the kernel (the loader says so, with the counts), the third must
//!    load (`state` `enabled`, `ops` `dfsched`), and SIGINT must unload it cleanly;
//! 2. the CPU goes offline or comes back in every attempt's wait: the loader must give up after its
//!    last attempt, exit 1 with an error that says the CPUs kept changing, and leave sched_ext
//!    disabled.
//!
//! Neither leaves a CPU offline (`OnlineAgain`), and the kernel log must gain nothing matching
//! `BUG:|WARNING:|stall`. A loader without the hotplug count (before it was set) prints no pause line
//! and loads at the first attempt whatever the CPUs do: the check fails on it.

use super::{bad_log_line, dmesg, log_since, read, OPS, SOCKET, STATE};
use crate::guest::checks::{set_online, OnlineAgain};
use crate::guest::workload::Running;
use crate::guest::{poll, Ctx, Step};
use dfsched_core::{CpuId, CpuSet};
use std::io::{BufRead as _, BufReader};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The loader's attempts before it gives up (`LOAD_ATTEMPTS` in crates/dfsched-scx's `main.rs`).
const LOAD_ATTEMPTS: usize = 5;

/// The test pause between the loader's read of the count and its attach: room for a CPU to go
/// offline or come back under TCG (tens to hundreds of ms), with a margin.
const PAUSE_MS: &str = "3000";

/// A loader whose output is read line by line as it comes.
struct Loader {
    run: Running,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Loader {
    fn start(ctx: &Ctx) -> Result<Loader, String> {
        let state = read(STATE);
        if state != "disabled" {
            return Err(format!("{STATE} is {state:?} before loading"));
        }
        let _ = std::fs::remove_file(SOCKET);
        let mut cmd = Command::new(ctx.bin("dfsched-scx"));
        cmd.args(["run", "--socket", SOCKET])
            .env("DFSCHED_SCX_TEST_ATTACH_PAUSE_MS", PAUSE_MS);
        let mut run = Running::start(cmd, "dfsched-scx run (test pause)")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            run.child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            run.child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let into = lines.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    into.lock().expect("not poisoned").push(l);
                }
            });
        }
        Ok(Loader { run, lines })
    }

    /// The lines so far that contain `what`.
    fn said(&self, what: &str) -> Vec<String> {
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|l| l.contains(what))
            .cloned()
            .collect()
    }

    fn all(&self) -> String {
        self.lines.lock().expect("not poisoned").join(" | ")
    }

    /// Waits for the `n`th pause line (from 1).
    fn pause(&mut self, n: usize) -> Result<String, String> {
        poll(Duration::from_secs(120), || {
            let p = self.said("attaching in");
            match p.get(n - 1) {
                Some(l) => Step::Holds(l.trim().to_string()),
                None if !self.run.alive() => {
                    Step::Broken(format!("the loader ended before pause {n}: {}", self.all()))
                }
                None => Step::NotYet(format!("{} pause lines", p.len())),
            }
        })
        .map_err(|e| format!("{e}; the loader said: {}", self.all()))
    }

    /// Waits for the loader's exit; its status.
    fn exited(&mut self, limit: Duration) -> Result<std::process::ExitStatus, String> {
        let end = std::time::Instant::now() + limit;
        loop {
            match self.run.child.try_wait() {
                Ok(Some(s)) => {
                    // The reader threads finish with the pipes.
                    std::thread::sleep(Duration::from_millis(200));
                    return Ok(s);
                }
                Ok(None) if std::time::Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => return Err(format!("the loader did not exit within {limit:?}")),
            }
        }
    }
}

/// `scx-hotplug-at-load` (see the module doc).
pub(super) fn hotplug_at_load(ctx: &Ctx) -> Result<String, String> {
    let online = crate::guest::observe::cpulist("/sys/devices/system/cpu/online")?;
    let cpu = online.iter().last().ok_or("no CPU online")?;
    if cpu == CpuId(0) {
        return Err("only CPU 0 is online, and it cannot go offline".into());
    }
    let one: CpuSet = [cpu].into_iter().collect();
    let _back = OnlineAgain(one.clone());
    let log_before = dmesg().len();

    // 1. Two refused attempts, then a load.
    let mut l = Loader::start(ctx)?;
    let first = l.pause(1)?;
    set_online(&one, false)?;
    let second = l.pause(2)?;
    set_online(&one, true)?;
    let third = l.pause(3)?;
    let loaded = poll(Duration::from_secs(60), || {
        if !l.run.alive() {
            return Step::Broken(format!("the loader ended: {}", l.all()));
        }
        let (state, ops) = (read(STATE), read(OPS));
        let s = format!("state {state}, ops {ops}");
        if state == "enabled" && ops == "dfsched" && !l.said("dfsched-scx: loaded").is_empty() {
            Step::Holds(s)
        } else {
            Step::NotYet(s)
        }
    })
    .map_err(|e| format!("{e}; the loader said: {}", l.all()))?;
    let refused = l.said("refused by the kernel");
    if refused.len() != 2
        || !refused[0].contains("attempt 1 of")
        || !refused[1].contains("attempt 2 of")
    {
        return Err(format!(
            "{cpu} went offline in the first attempt's pause and came back in the second's: \
             two refusals expected, the loader said: {}",
            l.all()
        ));
    }
    if l.said("attaching in").len() != 3 {
        return Err(format!("three attempts expected: {}", l.all()));
    }
    // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
    unsafe { libc::kill(l.run.pid() as libc::pid_t, libc::SIGINT) };
    let status = l.exited(Duration::from_secs(30))?;
    if !status.success() || l.said("unregistered from user space").is_empty() {
        return Err(format!("unload: exit {status}: {}", l.all()));
    }
    let part1 = format!(
        "{first}; {cpu} offline; {}; {second}; {cpu} online; {}; {third}; {loaded}; SIGINT: exit 0, unregistered from user space",
        refused[0].trim(),
        refused[1].trim()
    );

    // 2. A hotplug in every attempt's pause: the loader gives up.
    let mut l = Loader::start(ctx)?;
    for n in 1..=LOAD_ATTEMPTS {
        l.pause(n)?;
        set_online(&one, n % 2 == 0)?;
    }
    set_online(&one, true)?;
    let status = l.exited(Duration::from_secs(60))?;
    let gave_up = l.said("not loaded: the CPUs changed");
    if status.code() != Some(1)
        || gave_up.is_empty()
        || l.said("refused by the kernel").len() != LOAD_ATTEMPTS
    {
        return Err(format!(
            "{part1}; a hotplug in each of {LOAD_ATTEMPTS} pauses: exit {status}, expected 1 after {LOAD_ATTEMPTS} refusals and an error naming the hotplug: {}",
            l.all()
        ));
    }
    let state = read(STATE);
    if state != "disabled" {
        return Err(format!("{part1}; after giving up {STATE} is {state:?}"));
    }
    let bad = log_since(log_before, bad_log_line);
    if !bad.is_empty() {
        return Err(format!("{part1}; kernel log: {bad:?}"));
    }
    Ok(format!(
        "{part1}; a hotplug in each of {LOAD_ATTEMPTS} pauses: {LOAD_ATTEMPTS} refusals, exit 1: {}; state {state}; log clean",
        gave_up[0].trim()
    ))
}
