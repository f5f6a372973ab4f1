//! `dfsched attach PID`: the agent places the threads of a process that
//! runs without dfsched (no preload, no runtime inside it), from outside:
//! its threads are read from `/proc/PID/task`, fed to an engine of its own
//! as tasks, and placed with `sched_setaffinity(TID, …)`; `dfsched detach
//! PID` gives each thread back the mask it had before.
//!
//! ```text
//!  Attach{pid, policy, rules}  ─► Attached::new: facts, the rules' process choice,
//!                                  an Engine (the policy), refresh() at once
//!  every agent tick            ─► refresh(): /proc/PID/task
//!                                    new tid    → TaskNew (allowed = the mask it had
//!                                                 before we placed anything), rule DF
//!                                    gone tid   → Exit
//!                                    renamed    → the rules again (DF, leave alone)
//!                                    mask not ours any more → Allowed (someone else's)
//!                                  Balance; every Place carried out by tid
//!  Detach{pid}, or the agent's stop ─► release(): each thread whose mask is still
//!                                  ours gets its mask from before the attach back
//! ```
//!
//! Invariants:
//! - a thread's `before` is the mask it had when first seen, or, for a
//!   thread created after the attach with a mask dfsched set (inherited
//!   from its creator), the process's main thread's `before`: dfsched never
//!   narrows a thread's allowed CPUs for good;
//! - a mask found to differ from the one dfsched last set is someone
//!   else's (the program, `taskset`): it becomes the thread's allowed set
//!   and its `before`, and is what detach leaves;
//! - the engine knows exactly the threads not left alone (`in_engine`).
//!
//! What it does not see (yet): the engine of an attached process knows its
//! threads only, not the load of other processes (no `ExternalLoad`
//! event), and a thread's runnable state is not tracked (every thread
//! counts as runnable), so homes follow the process's own thread count:
//! a co-thread group is packed onto one CPU only when its own threads make
//! the load heavy. Programs under `dfsched run` get both from their
//! runtime.
//!
//! Who may: the agent checks that the requesting peer owns the process
//! (`server.rs`), and the kernel that the agent may set its threads'
//! masks (same uid, or root). Bounded: one `/proc/PID/task` listing and one
//! mask read per thread per tick; a process that ends is dropped at the
//! next tick.

use crate::engine_log::EngineLog;
use crate::rules::{ProcessChoice, ProcessFacts, Rules, ThreadChoice};
use crate::sys::SysOps;
use dfsched_core::{
    AppId, Config, CpuSet, Decision, DfId, Engine, Event, Nanos, Policy, TaskId, Topology,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One thread of an attached process.
#[derive(Debug)]
struct Thread {
    /// The mask it had before dfsched placed it (what detach restores).
    before: CpuSet,
    /// The mask dfsched last set (or found).
    last_set: CpuSet,
    /// Its name when last matched.
    name: String,
    /// Whether the engine knows it (not left alone by a rule).
    in_engine: bool,
    /// Its DF came from a rule.
    df: Option<u64>,
}

/// An attached process: its engine and its threads.
pub struct Attached {
    pid: u32,
    /// The uid that attached it (and owned it then).
    uid: u32,
    proc_root: PathBuf,
    engine: Engine,
    topology: Topology,
    rules: Option<Rules>,
    facts: ProcessFacts,
    /// The main thread's mask before the attach: the `before` of threads
    /// created later with a mask dfsched set.
    process_before: CpuSet,
    threads: BTreeMap<u64, Thread>,
    decisions: Vec<Decision>,
    /// Its engine log (`dfsched agent --engine-log DIR`), fed by [`feed`].
    engine_log: Option<Box<EngineLog>>,
    /// The policy it runs under.
    pub policy: Policy,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("pid", &self.pid)
            .field("policy", &self.policy)
            .field("threads", &self.threads.len())
            .finish()
    }
}

/// What a refresh or a release came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Threads of the process seen.
    pub threads: u32,
    /// Masks set.
    pub placed: u32,
}

/// Why a process cannot be attached, or is no longer.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The process is gone (or its `/proc` cannot be read).
    #[error("process {0} is gone")]
    Gone(u32),
    /// The rules leave this process alone.
    #[error("the rules leave process {0} alone (policy none): nothing to attach")]
    LeftAlone(u32),
    /// The engine refused its configuration.
    #[error("{0}")]
    Config(String),
}

/// Thread ids of `pid` under `proc_root`, ascending.
fn tids(proc_root: &Path, pid: u32) -> Result<Vec<u64>, AttachError> {
    let dir = proc_root.join(pid.to_string()).join("task");
    let mut out: Vec<u64> = std::fs::read_dir(&dir)
        .map_err(|_| AttachError::Gone(pid))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Feeds one event to an attached process's engine: the one way events
/// reach it, so that its engine log (when on) holds every one.
fn feed(
    engine: &mut Engine,
    log: &mut Option<Box<EngineLog>>,
    event: Event,
    out: &mut Vec<Decision>,
) -> Result<(), dfsched_core::CoreError> {
    match log.as_deref_mut() {
        None => engine.handle(event, out),
        Some(log) => log.handle(engine, event, out),
    }
}

/// Attaches so far in this process: the engine logs' file names of a
/// process attached again (`FILE.PID.N`, see `engine_log.rs`).
static ATTACHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn thread_name(proc_root: &Path, pid: u32, tid: u64) -> Option<String> {
    std::fs::read_to_string(proc_root.join(format!("{pid}/task/{tid}/comm")))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

impl Attached {
    /// Takes process `pid` for `uid` (who owns it: the caller checked)
    /// under `policy` (the rules' process choice first, if rules are
    /// given) and places its threads at once. With `engine_log`, every
    /// event its engine handles is logged there from the first
    /// (`engine_log.rs`; body `attach`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pid: u32,
        uid: u32,
        proc_root: &Path,
        topology: Topology,
        policy: Policy,
        rules: Option<Rules>,
        sys: &dyn SysOps,
        engine_log: Option<&Path>,
    ) -> Result<(Attached, Counts), AttachError> {
        let facts = ProcessFacts::read(proc_root, pid).ok_or(AttachError::Gone(pid))?;
        let policy = match rules.as_ref().map(|r| r.process_choice(&facts)) {
            Some(ProcessChoice::Off) => return Err(AttachError::LeftAlone(pid)),
            Some(ProcessChoice::Policy(p)) => p,
            Some(ProcessChoice::Default) | None => policy,
        };
        let config = Config {
            policy,
            // A move from outside is a pin, as in the runtime: threads in
            // no group are left to the kernel.
            move_unmanaged: false,
            ..Config::default()
        };
        let engine = Engine::new(topology.clone(), config)
            .map_err(|e| AttachError::Config(e.to_string()))?;
        let process_before = sys
            .get_affinity(u64::from(pid))
            .map_err(|_| AttachError::Gone(pid))?;
        let engine_log = match engine_log {
            None => None,
            Some(path) => {
                let serial = ATTACHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let log = EngineLog::create(
                    path,
                    crate::engine_log::DEFAULT_MAX_BYTES,
                    serial,
                    &engine,
                    "attach",
                )
                .map_err(|e| AttachError::Config(format!("engine log {}: {e}", path.display())))?;
                Some(Box::new(log))
            }
        };
        let mut a = Attached {
            pid,
            uid,
            proc_root: proc_root.to_path_buf(),
            engine,
            topology,
            rules,
            facts,
            process_before,
            threads: BTreeMap::new(),
            decisions: Vec::new(),
            engine_log,
            policy,
        };
        let counts = a.refresh(sys, Nanos(0))?;
        Ok((a, counts))
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The uid that attached it.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The engine's view of a thread (for tests).
    pub fn thread_df(&self, tid: u64) -> Option<u64> {
        self.engine.task(TaskId(tid))?.df.map(|d| d.0)
    }

    /// What the rules say of a thread named `name`.
    fn choice(&self, name: &str) -> ThreadChoice {
        self.rules.as_ref().map_or(ThreadChoice::Default, |r| {
            r.thread_choice(&self.facts, name)
        })
    }

    /// One look at the process (see the module doc); `now` for the
    /// balancer's record. [`AttachError::Gone`] once it has ended.
    pub fn refresh(&mut self, sys: &dyn SysOps, now: Nanos) -> Result<Counts, AttachError> {
        let live = tids(&self.proc_root, self.pid)?;
        let gone: Vec<u64> = self
            .threads
            .keys()
            .filter(|t| live.binary_search(t).is_err())
            .copied()
            .collect();
        for tid in gone {
            if self.threads.remove(&tid).is_some_and(|t| t.in_engine) {
                let _ = feed(
                    &mut self.engine,
                    &mut self.engine_log,
                    Event::Exit { task: TaskId(tid) },
                    &mut self.decisions,
                );
            }
        }
        let placed_masks: Vec<CpuSet> = self.threads.values().map(|t| t.last_set.clone()).collect();
        for &tid in &live {
            let Some(name) = thread_name(&self.proc_root, self.pid, tid) else {
                continue; // it ended meanwhile
            };
            let Ok(mask) = sys.get_affinity(tid) else {
                continue;
            };
            match self.threads.get_mut(&tid) {
                None => {
                    // A thread born of one we placed carries our mask: its
                    // allowed CPUs are the process's, not that placement.
                    let before = if placed_masks.contains(&mask) && tid != u64::from(self.pid) {
                        self.process_before.clone()
                    } else {
                        mask.clone()
                    };
                    self.threads.insert(
                        tid,
                        Thread {
                            before,
                            last_set: mask,
                            name: name.clone(),
                            in_engine: false,
                            df: None,
                        },
                    );
                    self.rematch(tid, &name);
                }
                Some(t) => {
                    if mask != t.last_set {
                        // Someone else's mask: the thread's allowed CPUs now.
                        t.before = mask.clone();
                        t.last_set = mask.clone();
                        if t.in_engine {
                            let allowed = mask.intersection(self.topology.cpus());
                            if !allowed.is_empty() {
                                let _ = feed(
                                    &mut self.engine,
                                    &mut self.engine_log,
                                    Event::Allowed {
                                        task: TaskId(tid),
                                        allowed,
                                    },
                                    &mut self.decisions,
                                );
                            }
                        }
                    }
                    if t.name != name {
                        t.name = name.clone();
                        self.rematch(tid, &name);
                    }
                }
            }
        }
        let _ = feed(
            &mut self.engine,
            &mut self.engine_log,
            Event::Balance { now },
            &mut self.decisions,
        );
        if let Some(log) = self.engine_log.as_deref_mut() {
            log.flush();
        }
        let mut counts = Counts {
            threads: self.threads.len() as u32,
            placed: 0,
        };
        for d in std::mem::take(&mut self.decisions) {
            let Decision::Place { task, cpus } = d else {
                continue;
            };
            let Some(t) = self.threads.get_mut(&task.0) else {
                continue;
            };
            if sys.set_affinity(task.0, &cpus).is_ok() {
                t.last_set = cpus;
                counts.placed += 1;
            }
        }
        Ok(counts)
    }

    /// Matches thread `tid` (known, named `name`) against the rules and
    /// updates the engine to what they say.
    fn rematch(&mut self, tid: u64, name: &str) {
        let choice = self.choice(name);
        let t = self.threads.get_mut(&tid).expect("the caller knows it");
        let task = TaskId(tid);
        if choice == ThreadChoice::Leave {
            if t.in_engine {
                let _ = feed(
                    &mut self.engine,
                    &mut self.engine_log,
                    Event::Exit { task },
                    &mut self.decisions,
                );
                t.in_engine = false;
                t.df = None;
            }
            return;
        }
        if !t.in_engine {
            let allowed = t.before.intersection(self.topology.cpus());
            if allowed.is_empty() {
                return;
            }
            let new = Event::TaskNew {
                task,
                app: AppId(0),
                allowed,
                cpu: None,
            };
            if feed(
                &mut self.engine,
                &mut self.engine_log,
                new,
                &mut self.decisions,
            )
            .is_err()
            {
                return;
            }
            t.in_engine = true;
        }
        let next = match choice {
            ThreadChoice::Df(d) => Some(d),
            ThreadChoice::Default | ThreadChoice::Leave => None,
        };
        if next == t.df {
            return;
        }
        let hint = Event::Hint {
            task,
            app: AppId(0),
            cur: t.df.map(DfId),
            next: next.map(DfId),
        };
        if feed(
            &mut self.engine,
            &mut self.engine_log,
            hint,
            &mut self.decisions,
        )
        .is_ok()
        {
            t.df = next;
        }
    }

    /// Gives every thread whose mask is still the one dfsched set its mask
    /// from before the attach back; threads whose mask someone else set
    /// keep it.
    pub fn release(&self, sys: &dyn SysOps) -> Counts {
        let mut counts = Counts {
            threads: self.threads.len() as u32,
            placed: 0,
        };
        for (&tid, t) in &self.threads {
            let ours = sys.get_affinity(tid).is_ok_and(|m| m == t.last_set);
            if ours && t.last_set != t.before && sys.set_affinity(tid, &t.before).is_ok() {
                counts.placed += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::rules::{Action, Glob, Rule};
    use std::sync::Mutex;

    /// Masks by tid, as a kernel would keep them.
    struct FakeSys(Mutex<BTreeMap<u64, CpuSet>>);

    impl SysOps for FakeSys {
        fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
            Ok(self
                .0
                .lock()
                .unwrap()
                .get(&tid)
                .cloned()
                .expect("a known tid"))
        }
        fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
            self.0.lock().unwrap().insert(tid, cpus.clone());
            Ok(())
        }
    }

    /// A `/proc` with process 100 (uid 1000) and threads named `names`
    /// (tids 100, 101, …), in a fresh directory of ours removed on drop.
    struct FakeProc(tempfile::TempDir);

    impl FakeProc {
        fn new(tag: &str, names: &[&str]) -> FakeProc {
            let dir = tempfile::Builder::new()
                .prefix(&format!("dfsched-attached-{tag}-"))
                .tempdir()
                .unwrap();
            let root = dir.path();
            std::fs::create_dir_all(root.join("100/task")).unwrap();
            std::fs::write(
                root.join("100/status"),
                "Name:\tx\nUid:\t1000\t1000\t1000\t1000\n",
            )
            .unwrap();
            std::fs::write(root.join("100/comm"), "server\n").unwrap();
            let p = FakeProc(dir);
            for (i, n) in names.iter().enumerate() {
                p.name(100 + i as u64, n);
            }
            p
        }
        fn root(&self) -> &Path {
            self.0.path()
        }
        fn name(&self, tid: u64, name: &str) {
            let dir = self.root().join(format!("100/task/{tid}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{name}\n")).unwrap();
        }
    }

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn rules() -> Rules {
        let rule = |thread: &str, action| Rule {
            comm: None,
            exe: None,
            cgroup: None,
            uid: None,
            thread: Some(Glob::new(thread).unwrap()),
            action,
        };
        Rules {
            rules: vec![
                rule("gc*", Action::Leave),
                rule(
                    "w-*",
                    Action::Df(crate::rules::DfChoice::Suffix { base: 0 }),
                ),
            ],
        }
    }

    #[test]
    fn renamed_threads_change_df_or_are_left_alone_and_release_restores_their_masks() {
        let proc_ = FakeProc::new("rename", &["server", "w-1", "w-2"]);
        let sys = FakeSys(Mutex::new((100..103).map(|t| (t, set("0-3"))).collect()));
        let topo = Topology::test(1, 1, 4, 1);
        let (mut a, counts) = Attached::new(
            100,
            1000,
            proc_.root(),
            topo,
            Policy::DataAffinity,
            Some(rules()),
            &sys,
            Some(&proc_.root().join("engine.log")),
        )
        .unwrap();
        assert_eq!(counts.threads, 3);
        assert_eq!((a.thread_df(101), a.thread_df(102)), (Some(1), Some(2)));
        assert_eq!(a.thread_df(100), None);
        // w-2 becomes w-1: it joins DF 1, on w-1's CPUs.
        proc_.name(102, "w-1");
        a.refresh(&sys, Nanos(1)).unwrap();
        assert_eq!(a.thread_df(102), Some(1));
        assert_eq!(
            sys.get_affinity(101).unwrap(),
            sys.get_affinity(102).unwrap()
        );
        // w-1 becomes gc: out of the engine.
        proc_.name(101, "gc");
        a.refresh(&sys, Nanos(2)).unwrap();
        assert_eq!(a.thread_df(101), None);
        // A new thread, created with the mask dfsched set on its creator,
        // gets the process's mask as its own allowed set.
        let placed = sys.get_affinity(102).unwrap();
        assert_ne!(placed, set("0-3"), "premise: w-1 is placed narrower");
        sys.set_affinity(103, &placed).unwrap();
        proc_.name(103, "w-1");
        a.refresh(&sys, Nanos(3)).unwrap();
        assert_eq!(a.thread_df(103), Some(1));
        // A thread that ended is forgotten.
        std::fs::remove_dir_all(proc_.root().join("100/task/103")).unwrap();
        assert_eq!(a.refresh(&sys, Nanos(4)).unwrap().threads, 3);
        // Release: every mask still ours goes back to 0-3.
        a.release(&sys);
        for t in 100..103 {
            assert_eq!(sys.get_affinity(t).unwrap(), set("0-3"), "tid {t}");
        }
        // Its engine log, ended when the process is forgotten, replays
        // identically: renames, a new thread, an exit and the passes.
        drop(a);
        let log = std::fs::read_to_string(proc_.root().join("engine.log")).unwrap();
        assert!(log.contains("\"body\":\"attach\""), "{log}");
        for kind in ["task_new", "hint", "exit", "balance"] {
            assert!(
                log.contains(&format!("\"event\":\"{kind}\"")),
                "no {kind}: {log}"
            );
        }
        let r = crate::engine_replay::replay(log.as_bytes()).unwrap();
        assert!(r.ended && r.steps > 8 && r.decisions > 0, "{r:?}");
    }

    #[test]
    fn a_mask_someone_else_set_is_kept_by_release() {
        let proc_ = FakeProc::new("foreign", &["server", "w-1"]);
        let sys = FakeSys(Mutex::new((100..102).map(|t| (t, set("0-3"))).collect()));
        let topo = Topology::test(1, 1, 4, 1);
        let (mut a, _) = Attached::new(
            100,
            1000,
            proc_.root(),
            topo,
            Policy::DataAffinity,
            Some(rules()),
            &sys,
            None,
        )
        .unwrap();
        sys.set_affinity(101, &set("2-3")).unwrap(); // taskset, say
        a.refresh(&sys, Nanos(1)).unwrap();
        a.release(&sys);
        assert_eq!(sys.get_affinity(101).unwrap(), set("2-3"));
    }

    #[test]
    fn a_process_the_rules_leave_alone_is_not_attached() {
        let proc_ = FakeProc::new("off", &["server"]);
        let sys = FakeSys(Mutex::new([(100, set("0-3"))].into()));
        let off = Rules {
            rules: vec![Rule {
                comm: Some(Glob::new("server").unwrap()),
                exe: None,
                cgroup: None,
                uid: None,
                thread: None,
                action: Action::Leave,
            }],
        };
        let r = Attached::new(
            100,
            1000,
            proc_.root(),
            Topology::test(1, 1, 4, 1),
            Policy::CoThread,
            Some(off),
            &sys,
            None,
        );
        assert!(matches!(r, Err(AttachError::LeftAlone(100))));
        assert!(matches!(
            Attached::new(
                7,
                1000,
                proc_.root(),
                Topology::test(1, 1, 4, 1),
                Policy::CoThread,
                None,
                &sys,
                None,
            ),
            Err(AttachError::Gone(7))
        ));
    }
}
