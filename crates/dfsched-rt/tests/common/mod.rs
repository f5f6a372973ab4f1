//! Helpers shared by the integration tests: CPU checks that skip with a
//! message, a quiet test configuration, temp dirs, sysfs fixture trees, and
//! a fault-injecting [`SysOps`]; the premise rule ([`skip_or_fail`],
//! [`is_root`]) is dfsched-premise's, re-exported.
#![allow(dead_code)]

use dfsched::sys::{self, RealSys, SysOps};
use dfsched::{CpuId, CpuSet, Error, RuntimeConfig};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

// Each test binary uses a different subset of these too.
#[allow(unused_imports)]
pub use dfsched_premise::{is_root, skip_or_fail};

/// The CPUs this test thread may use.
pub fn allowed() -> CpuSet {
    sys::get_affinity(0).expect("sched_getaffinity of the test thread")
}

/// A test that cannot establish its premise: says why and returns (the
/// caller then returns), except under `CI=true`, where it fails instead.
pub fn skip(test: &str, why: &str) {
    skip_or_fail(&format!("SKIP {test}: {why}"));
}

/// The first two allowed CPUs, or `None` after printing why the test skips.
pub fn two_cpus(test: &str) -> Option<(CpuId, CpuId)> {
    let cpus: Vec<CpuId> = allowed().iter().collect();
    if cpus.len() < 2 {
        skip_or_fail(&format!(
            "SKIP {test}: needs 2 allowed CPUs, this process has {}",
            cpus.len()
        ));
        return None;
    }
    Some((cpus[0], cpus[1]))
}

/// Runs `f(c0, c1)` in a thread of its own whose mask is exactly the first
/// two allowed CPUs, so a runtime started inside sees a 2-CPU machine
/// whatever the host has (threads it spawns inherit the mask). Skips with a
/// message when fewer than two CPUs are allowed.
pub fn with_two_cpus(test: &str, f: impl FnOnce(CpuId, CpuId) + Send + 'static) {
    let Some((c0, c1)) = two_cpus(test) else {
        return;
    };
    let t = std::thread::spawn(move || {
        sys::set_affinity(0, &set_of(&[c0, c1])).unwrap();
        f(c0, c1)
    });
    if let Err(panic) = t.join() {
        std::panic::resume_unwind(panic);
    }
}

/// A configuration for deterministic tests: no balancer thread (passes run
/// through `balance_now`), no external-load sampling, and no idle
/// detection: these tests park their threads between calls, and on a slow
/// machine a parked thread would turn blocked (no load) mid-test. The idle
/// tests (`idle.rs`) turn it back on.
pub fn quiet() -> RuntimeConfig {
    RuntimeConfig {
        balance_interval_ms: 0,
        external_load: false,
        idle_passes: 0,
        ..RuntimeConfig::default()
    }
}

/// As [`quiet`], with homes of one CPU from 1 runnable thread per CPU.
pub fn quiet_heavy() -> RuntimeConfig {
    let mut cfg = quiet();
    cfg.engine.heavy_load_milli = 1000;
    cfg
}

/// The set holding `cpus`.
pub fn set_of(cpus: &[CpuId]) -> CpuSet {
    cpus.iter().copied().collect()
}

/// A private directory under the system temp dir, removed on drop. Made by
/// `tempfile`: a fresh random name created with `mkdir` (which fails if the
/// name exists), so no other user can have made it, or a symlink in its
/// place, first; mode 0700.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new empty directory named `dfsched-test-TAG-` and random letters.
    pub fn new(tag: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("dfsched-test-{tag}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes `text` to `rel`, creating parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// One cache of a fixture CPU.
pub struct FixtureCache<'a> {
    pub level: u8,
    pub kind: &'a str,
    pub size: &'a str,
    pub shared: String,
}

/// Writes a sysfs tree: `online`, per-CPU caches, optional SMT siblings,
/// and nodes.
pub fn write_sysfs(
    dir: &TempDir,
    online: &str,
    cpus: &[(u32, Vec<FixtureCache>, Option<String>)],
    nodes: &[&str],
) {
    dir.write("sys/devices/system/cpu/online", &format!("{online}\n"));
    for (cpu, caches, siblings) in cpus {
        for (i, c) in caches.iter().enumerate() {
            let base = format!("sys/devices/system/cpu/cpu{cpu}/cache/index{i}");
            dir.write(&format!("{base}/level"), &format!("{}\n", c.level));
            dir.write(&format!("{base}/type"), &format!("{}\n", c.kind));
            dir.write(&format!("{base}/size"), &format!("{}\n", c.size));
            dir.write(
                &format!("{base}/shared_cpu_list"),
                &format!("{}\n", c.shared),
            );
        }
        if let Some(s) = siblings {
            dir.write(
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"),
                &format!("{s}\n"),
            );
        }
    }
    for (n, list) in nodes.iter().enumerate() {
        dir.write(
            &format!("sys/devices/system/node/node{n}/cpulist"),
            &format!("{list}\n"),
        );
    }
}

/// A fixture shaped like this test machine's kind: every CPU of `cpus` with
/// private L1d/L1i/L2 and one L3 over all of them, one node.
pub fn write_flat_llc(dir: &TempDir, cpus: &CpuSet) {
    let all = cpus.to_string();
    let entries: Vec<_> = cpus
        .iter()
        .map(|c| {
            let me = c.0.to_string();
            let caches = vec![
                FixtureCache {
                    level: 1,
                    kind: "Data",
                    size: "48K",
                    shared: me.clone(),
                },
                FixtureCache {
                    level: 1,
                    kind: "Instruction",
                    size: "32K",
                    shared: me.clone(),
                },
                FixtureCache {
                    level: 2,
                    kind: "Unified",
                    size: "2048K",
                    shared: me.clone(),
                },
                FixtureCache {
                    level: 3,
                    kind: "Unified",
                    size: "107520K",
                    shared: all.clone(),
                },
            ];
            (c.0, caches, Some(me))
        })
        .collect();
    write_sysfs(dir, &all, &entries, &[&all]);
}

/// What a [`FaultySys`] does to calls on one thread.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// `set_affinity` fails with this errno (without calling the kernel).
    pub set_errno: Option<i32>,
    /// How many times `set_errno` fires; `None` = always.
    pub set_times: Option<u32>,
    /// A simulated cpuset: `set_affinity` outside it fails with `EINVAL`,
    /// inside it is cut to it; `get_affinity` reports the mask cut to it.
    pub cpuset: Option<CpuSet>,
    /// `set_affinity` panics.
    pub panic_on_set: bool,
}

/// Real affinity calls, with per-thread faults injected, and counts of the
/// calls made. Thread ids are real (tid 0 is resolved to the caller's).
#[derive(Default)]
pub struct FaultySys {
    faults: Mutex<HashMap<u64, Faults>>,
    pub gets: AtomicU64,
    pub sets: AtomicU64,
}

impl FaultySys {
    pub fn inject(&self, tid: u64, faults: Faults) {
        self.faults.lock().unwrap().insert(tid, faults);
    }

    pub fn clear(&self, tid: u64) {
        self.faults.lock().unwrap().remove(&tid);
    }

    pub fn calls(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::SeqCst),
            self.sets.load(Ordering::SeqCst),
        )
    }

    fn real_tid(tid: u64) -> u64 {
        if tid == 0 {
            sys::gettid()
        } else {
            tid
        }
    }
}

impl SysOps for FaultySys {
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let mask = RealSys.get_affinity(tid)?;
        let faults = self
            .faults
            .lock()
            .unwrap()
            .get(&Self::real_tid(tid))
            .cloned();
        match faults.and_then(|f| f.cpuset) {
            Some(cpuset) => {
                let cut = mask.intersection(&cpuset);
                Ok(if cut.is_empty() { cpuset } else { cut })
            }
            None => Ok(mask),
        }
    }

    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        self.sets.fetch_add(1, Ordering::SeqCst);
        let real = Self::real_tid(tid);
        let mut all = self.faults.lock().unwrap();
        if let Some(f) = all.get_mut(&real) {
            if f.panic_on_set {
                drop(all);
                panic!("injected panic in set_affinity");
            }
            if let Some(errno) = f.set_errno {
                let fire = match &mut f.set_times {
                    None => true,
                    Some(0) => false,
                    Some(n) => {
                        *n -= 1;
                        true
                    }
                };
                if fire {
                    return Err(Error::Affinity {
                        op: dfsched::AffinityOp::Set,
                        tid,
                        errno,
                    });
                }
            }
            if let Some(cpuset) = &f.cpuset {
                let cut = cpus.intersection(cpuset);
                if cut.is_empty() {
                    return Err(Error::Affinity {
                        op: dfsched::AffinityOp::Set,
                        tid,
                        errno: libc::EINVAL,
                    });
                }
                drop(all);
                return RealSys.set_affinity(tid, &cut);
            }
        }
        drop(all);
        RealSys.set_affinity(tid, cpus)
    }
}

/// A thread that registers with a runtime and then runs the steps the test
/// sends it, one at a time, answering each; its tid is known.
pub struct Worker {
    pub tid: u64,
    to: std::sync::mpsc::Sender<Box<dyn FnOnce() -> Result<(), Error> + Send>>,
    from: std::sync::mpsc::Receiver<Result<(), Error>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    pub fn spawn() -> Worker {
        let (to, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() -> Result<(), Error> + Send>>();
        let (tx, from) = std::sync::mpsc::channel();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            tid_tx.send(sys::gettid()).unwrap();
            for step in rx {
                if tx.send(step()).is_err() {
                    break;
                }
            }
        });
        Worker {
            tid: tid_rx.recv().unwrap(),
            to,
            from,
            handle: Some(handle),
        }
    }

    /// Runs `step` on the worker thread and returns its result.
    pub fn run(
        &self,
        step: impl FnOnce() -> Result<(), Error> + Send + 'static,
    ) -> Result<(), Error> {
        self.to.send(Box::new(step)).unwrap();
        self.from.recv().expect("the worker thread died")
    }

    /// The worker's CPU mask, read back from the kernel.
    pub fn mask(&self) -> CpuSet {
        sys::get_affinity(self.tid).unwrap()
    }

    /// Ends the thread and waits for it (its thread-locals are destroyed).
    pub fn join(mut self) {
        let handle = self.handle.take().unwrap();
        drop(self);
        handle.join().unwrap();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Dropping the sender ends the worker's loop.
        let (dead, _) = std::sync::mpsc::channel();
        self.to = dead;
    }
}
