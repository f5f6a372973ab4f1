//! The programs the plan observes from outside: a process of DF groups
//! driven through dfsched's Rust API (`dfsched-vmcheck workload`), spinners
//! (`dfsched-vmspin`), each started as a child of the plan.
//!
//! The workload names its threads `df{D}-{I}` (the kernel's `comm`), so the
//! plan tells groups apart by reading `/proc` alone. It runs until its stdin
//! closes, then prints the runtime's stats and exits 0, or 1 if any call
//! into dfsched returned an error: an error that "escaped". `split` is a
//! one-group variant for the split-persistence check ([`split_main`]).

use crate::guest::observe::{self, Thread};
use dfsched::{Runtime, RuntimeConfig};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The workload's main: `dfs` DFs of `per_df` spinning threads each; with
/// `no_split`, the balancer never splits a group (`split_after_passes` 0).
pub fn workload_main(dfs: u64, per_df: usize, no_split: bool) -> i32 {
    let mut config = RuntimeConfig {
        agent: dfsched::agent::AgentMode::Off,
        ..RuntimeConfig::default()
    };
    if no_split {
        config.engine.split_after_passes = 0;
    }
    let rt = match Runtime::start(config) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("workload: Runtime::start: {e}");
            return 1;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for df in 1..=dfs {
        for i in 0..per_df {
            let (rt, stop, errors) = (rt.clone(), stop.clone(), errors.clone());
            let w = std::thread::Builder::new()
                .name(format!("df{df}-{i}"))
                .spawn(move || {
                    let mut n: u64 = 0;
                    // Relaxed: the flag only ends the loop; nothing is
                    // published through it.
                    while !stop.load(Ordering::Relaxed) {
                        // Repeating the DF costs a thread-local lookup; the
                        // first call (and any after a failure) places.
                        if let Err(e) = rt.enter(df) {
                            eprintln!("workload: df{df}-{i}: enter: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                        }
                        for _ in 0..100_000 {
                            n = std::hint::black_box(n.wrapping_add(1));
                        }
                    }
                    if let Err(e) = rt.leave() {
                        eprintln!("workload: df{df}-{i}: leave: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .expect("spawn a worker");
            workers.push(w);
        }
    }
    // Runs until the plan closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    println!("{}", rt.stats_json());
    if let Err(e) = rt.check_invariants() {
        eprintln!("workload: engine invariants: {e}");
        errors.fetch_add(1, Ordering::Relaxed);
    }
    rt.shutdown();
    if errors.load(Ordering::Relaxed) == 0 {
        0
    } else {
        1
    }
}

/// `dfsched-vmcheck split N`: one DF of 2 spinning threads that warrants
/// a split, for the persistence check. A heavy-load threshold of one task
/// per CPU makes the group's home one CPU (2 threads on the 2 CPUs the plan
/// allows us: heavy), so its CPU carries 2 tasks and the other none: an
/// imbalance no whole-group move narrows, which only a split repairs, and
/// only after `split_after_passes` = N imbalanced passes. Outside load is
/// off (it could break the passes' run of imbalance). A monitor reads the
/// runtime's counters every 5 ms and prints `no-split-up-to I` (the most
/// imbalanced passes seen before any split) and `split-at I` (imbalanced
/// passes when the first split was seen), then, when stdin closes, the
/// stats; exit status as [`workload_main`].
pub fn split_main(split_after_passes: u32) -> i32 {
    let mut config = RuntimeConfig {
        agent: dfsched::agent::AgentMode::Off,
        external_load: false,
        ..RuntimeConfig::default()
    };
    config.engine.split_after_passes = split_after_passes;
    config.engine.heavy_load_milli = 1000;
    let rt = match Runtime::start(config) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("split: Runtime::start: {e}");
            return 1;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for i in 0..2 {
        let (rt, stop, errors) = (rt.clone(), stop.clone(), errors.clone());
        workers.push(
            std::thread::Builder::new()
                .name(format!("df1-{i}"))
                .spawn(move || {
                    if let Err(e) = rt.enter(1) {
                        eprintln!("split: df1-{i}: enter: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut n: u64 = 0;
                    // Relaxed: the flag only ends the loop.
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
                .expect("spawn a worker"),
        );
    }
    let monitor = {
        let (rt, stop) = (rt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut before = 0;
            while !stop.load(Ordering::Relaxed) {
                let e = rt.stats().engine;
                if e.splits > 0 {
                    println!("no-split-up-to {before}");
                    println!("split-at {}", e.imbalanced_passes);
                    return;
                }
                before = e.imbalanced_passes;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            println!("no-split-up-to {before}");
        })
    };
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let _ = monitor.join();
    println!("{}", rt.stats_json());
    rt.shutdown();
    if errors.load(Ordering::Relaxed) == 0 {
        0
    } else {
        1
    }
}

/// A running child the plan watches; killed when dropped.
pub struct Running {
    /// The child.
    pub child: Child,
    /// What it is, for messages.
    pub what: String,
}

impl Running {
    /// Starts `cmd` with stdin, stdout and stderr piped.
    pub fn start(mut cmd: Command, what: &str) -> Result<Running, String> {
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start {what}: {e}"))?;
        Ok(Running {
            child,
            what: what.to_string(),
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its threads now.
    pub fn threads(&self) -> Result<Vec<Thread>, String> {
        observe::threads(self.pid())
    }

    /// Its `df{D}-{I}` threads by DF.
    pub fn groups(&self) -> Result<BTreeMap<u64, Vec<Thread>>, String> {
        let mut g: BTreeMap<u64, Vec<Thread>> = BTreeMap::new();
        for t in self.threads()? {
            let df = t
                .name
                .strip_prefix("df")
                .and_then(|r| r.split_once('-'))
                .and_then(|(d, _)| d.parse().ok());
            if let Some(df) = df {
                g.entry(df).or_default().push(t);
            }
        }
        Ok(g)
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Closes its stdin and waits for it (at most `secs`, then kills it);
    /// `Ok(stdout)` if it exited 0, else its status and stderr.
    pub fn finish(mut self, secs: u64) -> Result<String, String> {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!("{} did not end within {secs} s", self.what));
                }
            }
        }
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if status.success() {
            Ok(out)
        } else {
            Err(format!("{} exited {status}; stderr: {err}", self.what))
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
