//! One dfsched instance: the topology, the engine behind one mutex, the
//! balancer thread, and the hint path.
//!
//! ```text
//!  Runtime (Clone) ─► Arc<Owner> ─► Arc<Inner> ◄── balancer thread
//!                      (Drop: shutdown)   │   ◄┄┄ Weak from each thread's registration
//!                                         ├─ topology, allowed CPUs, config, SysOps
//!                                         └─ Mutex<State> { engine, task records,
//!                                                           reusable decision Vecs, counters }
//! ```
//!
//! The hint path:
//! 1. *Fast*: the thread-local registration says the thread already has this
//!    (application, DF) in this runtime → count it in the thread's own slot,
//!    return. No lock, no system call.
//! 2. *Slow*: an unregistered thread reads its allowed CPUs and current CPU
//!    (before the lock), then, under the mutex: `TaskNew` on its first call,
//!    `Hint`, and every resulting `Place` carried out at once
//!    (`sched_setaffinity(0, …)` for the caller, so it never touches the DF's
//!    data on the wrong CPU; by tid for other threads). See `runtime/place.rs`.
//!
//! Invariants:
//! - the engine, the task records and the counters change only under
//!   `Inner::state`; placements are carried out under it too, so two
//!   decisions for one thread can never be applied out of order (the
//!   caller's own move comes last, so that only the unlock runs on the CPU
//!   it moved to);
//! - `State::tasks` holds exactly the threads the engine knows;
//! - a disabled runtime (`DFSCHED_DISABLE`) never touches the engine: every
//!   call succeeds and does nothing;
//! - after [`Runtime::shutdown`] nothing is placed any more: hints fail with
//!   [`Error::ShutDown`] and thread exits are ignored;
//! - a runtime serves only the process it started in: in a forked child it
//!   counts as shut down, and its mutex (which a parent thread the child
//!   does not have may hold) is never taken by a hint, an attach, a thread
//!   exit or a shutdown (see `fork.rs`).

mod online;
mod pass;
mod place;
mod recording;
mod rules;
mod smt;
mod spawn;
mod threads;

pub(crate) use crate::state::{State, TaskRec};

use crate::config::RuntimeConfig;
use crate::error::Error;
use crate::stats::RuntimeStats;
use crate::sys::{RealSys, SysOps};
use crate::thread;
use dfsched_core::{
    AppId, CpuId, CpuSet, DfId, Engine, Event, GroupView, TaskId, TaskView, Topology,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runtime ids, so a thread's registration can never be mistaken for one of
/// another runtime, even one at the same address.
static NEXT_RUNTIME_ID: AtomicU64 = AtomicU64::new(1);

/// The shared part of a runtime.
pub(crate) struct Inner {
    /// Unique among runtimes of this process.
    pub(crate) id: u64,
    /// The configuration it started with.
    pub(crate) config: RuntimeConfig,
    /// The topology the engine places on: the machine's cache domains
    /// restricted to `allowed`, read from sysfs for those CPUs alone.
    pub(crate) topology: Topology,
    /// The allowed CPUs of the thread that started the runtime.
    pub(crate) allowed: CpuSet,
    /// The affinity calls (the kernel, or a test's fault injector).
    pub(crate) sys: Arc<dyn SysOps>,
    /// Set once by shutdown; read on every hint.
    pub(crate) shut_down: AtomicBool,
    /// The engine and everything that changes with it.
    pub(crate) state: Mutex<State>,
    /// When the runtime started: the balancer's clock origin.
    pub(crate) started: Instant,
    /// Our process id, skipped by the external-load sample.
    pub(crate) pid: u32,
    /// [`crate::fork::generation`] when the runtime started: a different
    /// one means we are in a forked child (see `fork.rs`).
    pub(crate) fork_generation: u64,
    /// Set to stop the balancer thread; guarded for `wake`.
    pub(crate) stop: Mutex<bool>,
    /// The balancer thread sleeps on this between passes.
    pub(crate) wake: Condvar,
    /// The external-load sampler and window (used outside `state`; see
    /// `external.rs`).
    pub(crate) external: Mutex<crate::external::External>,
    /// The link to `dfsched agent` (used outside `state`; see
    /// `agent/link.rs`).
    pub(crate) agent: Mutex<crate::agent::link::Link>,
    /// This process's facts for the rules (`runtime/rules.rs`), read once
    /// at start; `None` without rules.
    pub(crate) process: Option<crate::rules::ProcessFacts>,
    /// The recording (`DFSCHED_RECORD`), if one was asked for
    /// (`record.rs`, written by the balancer and at the end).
    pub(crate) recorder: Option<Arc<crate::record::Recorder>>,
    /// The `smt-pair` policy's profile and sibling cores, read and checked
    /// at start (`runtime/smt.rs`); `None` under the engine's policies.
    pub(crate) smt: Option<smt::SmtRun>,
}

/// Owns the balancer thread; dropping the last `Runtime` clone shuts down.
struct Owner {
    inner: Arc<Inner>,
    balancer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        shutdown(&self.inner, &self.balancer);
    }
}

/// One dfsched instance: topology, engine, balancer thread. Cheap to clone
/// (`Arc` inside); the last clone dropped shuts it down.
#[derive(Clone)]
pub struct Runtime {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.owner.inner;
        f.debug_struct("Runtime")
            .field("id", &inner.id)
            .field("enabled", &inner.config.enabled)
            .field("cpus", &inner.topology.cpus().to_string())
            .field("shut_down", &inner.is_shut_down())
            .finish()
    }
}

#[inline]
fn df_of(raw: u64) -> Option<DfId> {
    (raw != 0).then_some(DfId(raw))
}

impl Runtime {
    /// Starts a runtime: validates `config`, reads the allowed CPUs of the
    /// calling thread and the topology under `config.sysfs_root`, makes the
    /// engine, and starts the balancer thread (unless
    /// `balance_interval_ms` is 0). Nothing is started on error.
    ///
    /// A disabled config (`enabled: false`) reads no topology: the runtime
    /// then knows one flat domain over the allowed CPUs and does nothing.
    /// Under `smt-pair` ([`RuntimeConfig::smt_pair`]) the profile is read
    /// and checked and the topology must have SMT siblings, else
    /// [`Error::Config`] says which (`runtime/smt.rs`).
    pub fn start(config: RuntimeConfig) -> Result<Runtime, Error> {
        Self::start_with_sys(config, Arc::new(RealSys))
    }

    /// As [`Runtime::start`], with the affinity calls made through `sys`:
    /// for tests that inject failures (`EPERM`, `EINVAL`, `ESRCH`).
    pub fn start_with_sys(
        mut config: RuntimeConfig,
        sys: Arc<dyn SysOps>,
    ) -> Result<Runtime, Error> {
        config.validate().map_err(Error::Config)?;
        if let Some(level) = config.log {
            crate::log::install(level);
        }
        let allowed = sys.get_affinity(0)?;
        // Only the allowed CPUs' files are read: a process confined to a
        // few CPUs of a large machine (a container) pays for those alone.
        let topology = if config.enabled {
            crate::sysfs::read_topology_within(&config.sysfs_root, &allowed)?
        } else {
            Topology::new(&allowed, Vec::new())?
        };
        // smt-pair: the profile and the sibling cores before anything
        // starts, so that a bad one is refused here and nothing runs half
        // configured (the preloaded program then runs unmanaged).
        let smt = if config.enabled {
            smt::SmtRun::start(&config, &topology)?
        } else {
            None
        };
        // The scheduler link comes before the engine: the scheduler may offer the policy.
        // smt-pair pins by affinity masks itself: no sched_ext body under it.
        let mut scx_stats = crate::stats::RuntimeStats::default();
        let scx = if config.enabled && smt.is_none() {
            scx_link(&mut config, &mut scx_stats)
        } else {
            None
        };
        let engine = Engine::new(topology.clone(), config.engine_config())
            .map_err(|e| Error::Config(e.to_string()))?;
        let started = Instant::now();
        let recorder = match (&config.record, config.enabled) {
            (Some(path), true) => {
                let header = crate::record::Recorder::header(
                    std::process::id(),
                    topology.nr_cpus() as u32,
                    config.policy,
                    config.balance_interval_ms,
                );
                let r = crate::record::Recorder::create(
                    path,
                    config.record_buffer_events,
                    started,
                    header,
                )
                .map_err(|e| Error::Config(format!("DFSCHED_RECORD={}: {e}", path.display())))?;
                Some(Arc::new(r))
            }
            _ => None,
        };
        let id = NEXT_RUNTIME_ID.fetch_add(1, Ordering::Relaxed);
        let engine_log = match (&config.engine_log, config.enabled) {
            (Some(path), true) => {
                let body = if scx.is_some() { "scx" } else { "affinity" };
                let log = crate::engine_log::EngineLog::create(
                    path,
                    config.engine_log_max_bytes,
                    id,
                    &engine,
                    body,
                )
                .map_err(|e| {
                    Error::Config(format!("DFSCHED_ENGINE_LOG={}: {e}", path.display()))
                })?;
                Some(Box::new(log))
            }
            _ => None,
        };
        let mut state = State::new(engine);
        state.scx = scx;
        state.engine_log = engine_log;
        state.stats.scx_body = scx_stats.scx_body;
        state.stats.scx_failures = scx_stats.scx_failures;
        state.stats.scx_policy = scx_stats.scx_policy;
        let inner = Arc::new(Inner {
            id,
            topology,
            allowed,
            sys,
            shut_down: AtomicBool::new(false),
            state: Mutex::new(state),
            started,
            pid: std::process::id(),
            fork_generation: crate::fork::generation(),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            external: Mutex::new(crate::external::External::new(
                "/proc",
                config.external_window,
            )),
            agent: Mutex::new(crate::agent::link::Link::new(&config)),
            process: config.rules.as_ref().and_then(|_| {
                crate::rules::ProcessFacts::read("/proc".as_ref(), std::process::id())
            }),
            recorder,
            smt,
            config,
        });
        if inner.recorder.is_some() || inner.config.engine_log.is_some() {
            recording::finish_at_exit(&inner);
        }
        let balancer = if inner.config.enabled && inner.config.balance_interval_ms > 0 {
            let interval = Duration::from_millis(inner.config.balance_interval_ms);
            Some(pass::spawn(Arc::clone(&inner), interval)?)
        } else {
            None
        };
        crate::fork::register_handlers();
        tracing::info!(
            runtime = inner.id,
            enabled = inner.config.enabled,
            policy = %inner.config.policy,
            smt_pair = inner.smt.is_some(),
            cpus = %inner.topology.cpus(),
            domains = inner.topology.domains().len(),
            balance_interval_ms = inner.config.balance_interval_ms,
            "dfsched runtime started"
        );
        Ok(Runtime {
            owner: Arc::new(Owner {
                inner,
                balancer: Mutex::new(balancer),
            }),
        })
    }

    /// The paper's call, for the calling thread: it leaves DF `cur_df` and
    /// works on `next_df` of application `app` from now on (0 = none for
    /// either DF). The thread's first hint registers it (under `app`); if its
    /// placement changes it is moved before this returns. A hint repeating
    /// the thread's DF (`cur_df == next_df ==` its DF) costs no lock and no
    /// system call.
    ///
    /// On a placement failure (`EPERM`, `EINVAL`) the hint itself is applied,
    /// the thread stays where the kernel put it, and the error is returned.
    #[inline]
    pub fn hint(&self, app: u64, cur_df: u64, next_df: u64) -> Result<(), Error> {
        self.owner.inner.hint(Some(app), Some(cur_df), next_df)
    }

    /// The calling thread works on `df` from now on: a hint from its current
    /// DF (0 if none) to `df`, under its own application (0 for a thread that
    /// has not hinted yet).
    #[inline]
    pub fn enter(&self, df: u64) -> Result<(), Error> {
        self.owner.inner.hint(None, None, df)
    }

    /// The calling thread leaves its DF: a hint from its current DF to none.
    #[inline]
    pub fn leave(&self) -> Result<(), Error> {
        self.owner.inner.hint(None, None, 0)
    }

    /// Declares DF `df`'s size, `bytes`, in the calling thread's
    /// application (0 for a thread that has not hinted): an optional hint
    /// for `dfsched sim replay`, which otherwise assumes a default size
    /// (see `docs/record-format.md`). Changes no placement; recorded when
    /// the runtime records (`DFSCHED_RECORD`), else only checked. Costs a
    /// thread-local lookup and, when recording, one push on the
    /// recording's buffer: no lock, no system call.
    ///
    /// `df` 0 (no DF) or `bytes` 0 is refused with
    /// [`Error::InvalidArgument`].
    pub fn df_size(&self, df: u64, bytes: u64) -> Result<(), Error> {
        if df == 0 || bytes == 0 {
            return Err(Error::InvalidArgument(format!(
                "dfsched_df_size(df {df}, bytes {bytes}): the DF and its size must be non-zero"
            )));
        }
        let inner = &self.owner.inner;
        if !inner.config.enabled {
            return Ok(());
        }
        if inner.is_shut_down() {
            return Err(Error::ShutDown);
        }
        if let Some(rec) = &inner.recorder {
            let app = thread::current(inner.id).map_or(0, |(app, _)| app);
            rec.df_size(app, df, bytes);
        }
        Ok(())
    }

    /// Registers the calling thread with no hint (application 0, no DF),
    /// so that the policy places it from now on: under
    /// [`dfsched_core::Policy::CoThread`] it joins its process's co-thread
    /// group and is moved to the group's home before this returns; under
    /// [`dfsched_core::Policy::DataAffinity`] it is an unmanaged thread
    /// that counts as load and that the balancer may move. Idempotent: a
    /// thread already registered (by an attach or a hint) is left as it
    /// is, at the cost of a thread-local lookup. Its later hints work as
    /// for any thread.
    ///
    /// A placement failure (`EPERM`, `EINVAL`) leaves the thread
    /// registered, where the kernel put it, and is returned.
    pub fn attach(&self) -> Result<(), Error> {
        self.owner.inner.attach()
    }

    /// A new application id, with an empty DF map. Application 0 always
    /// exists. A disabled runtime still hands out ids.
    pub fn create_app(&self) -> Result<u64, Error> {
        let inner = &self.owner.inner;
        if inner.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let mut st = inner.lock()?;
        let id = st.next_app;
        if inner.config.enabled {
            // Through `State::handle`, as every event (the engine log).
            st.handle(Event::AppNew { app: AppId(id) })?;
            inner.apply(&mut st, None);
        }
        st.next_app += 1;
        st.stats.apps_created += 1;
        Ok(id)
    }

    /// Runs one balancer pass now (with an external-load sample first if
    /// configured), carrying out its moves before returning.
    pub fn balance_now(&self) -> Result<(), Error> {
        let inner = &self.owner.inner;
        if !inner.config.enabled {
            return Ok(());
        }
        inner.balance_pass()
    }

    /// Tells the engine how many threads of other processes are runnable on
    /// each CPU (`(cpu, count)`; CPUs not listed count 0), replacing the
    /// previous sample. For bodies that measure load themselves and for
    /// tests; with `external_load` on, the balancer's own samples replace it
    /// at the next pass. Moves that follow are carried out.
    pub fn set_external_load(&self, runnable: &[(CpuId, u32)]) -> Result<(), Error> {
        let inner = &self.owner.inner;
        if !inner.config.enabled {
            return Ok(());
        }
        if inner.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let mut st = inner.lock()?;
        let runnable: Vec<(CpuId, u32)> = runnable
            .iter()
            .copied()
            .filter(|(cpu, _)| inner.topology.cpus().contains(*cpu))
            .collect();
        st.handle(Event::ExternalLoad { runnable })?;
        inner.apply(&mut st, None);
        Ok(())
    }

    /// The counters.
    pub fn stats(&self) -> RuntimeStats {
        let inner = &self.owner.inner;
        // Counters stay readable even after a panic poisoned the mutex.
        let st = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut s = st.stats.clone();
        s.fast_hints = st.retired_fast_hints + st.tasks.values().map(|r| r.fast.get()).sum::<u64>();
        s.hint_calls += s.fast_hints;
        s.threads_active = st.tasks.len() as u64;
        s.threads_idle = st.tasks.values().filter(|r| r.idle.blocked).count() as u64;
        s.enabled = inner.config.enabled;
        s.shut_down = inner.is_shut_down();
        s.engine = st.engine.stats().clone();
        s.preload_attach_failures = crate::stats::preload_attach_failures();
        s.record = inner.recorder.as_ref().map(|r| r.stats());
        s.engine_log = st.engine_log.as_ref().map(|l| l.stats());
        s.body = crate::scx::Body::of_scx_flag(s.scx_body);
        s
    }

    /// The counters as JSON (the text of `dfsched_stats_json`).
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats())
            .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
    }

    /// The topology the engine places threads on: the machine's cache
    /// domains restricted to [`Runtime::allowed`].
    pub fn topology(&self) -> &Topology {
        &self.owner.inner.topology
    }

    /// The allowed CPUs of the thread that started the runtime (for a
    /// process started under `taskset`, the process's set). dfsched never
    /// places a thread outside them.
    pub fn allowed(&self) -> &CpuSet {
        &self.owner.inner.allowed
    }

    /// The configuration the runtime started with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.owner.inner.config
    }

    /// A thread of this process known by `pthread` (a `pthread_t`) was
    /// renamed: the rules match it again (`runtime/rules.rs`).
    pub(crate) fn thread_renamed(&self, pthread: u64) {
        self.owner.inner.thread_renamed(pthread);
    }

    /// The shared part, for the agent link's accessors.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.owner.inner
    }

    /// The calling thread's current DF in this runtime (0 = none), or
    /// `None` if it is not registered.
    pub fn thread_df(&self) -> Option<u64> {
        thread::current(self.owner.inner.id).map(|(_, df)| df)
    }

    /// The engine's view of thread `tid`, if registered.
    pub fn task(&self, tid: u64) -> Option<TaskView> {
        self.owner.inner.lock().ok()?.engine.task(TaskId(tid))
    }

    /// The engine's priority groups, in id order.
    pub fn groups(&self) -> Vec<GroupView> {
        self.owner
            .inner
            .lock()
            .map(|st| st.engine.groups())
            .unwrap_or_default()
    }

    /// Checks the engine's invariants (for tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = self.owner.inner.lock().map_err(|e| e.to_string())?;
        st.engine.check_invariants()
    }

    /// Checks that the kernel agrees with the engine (for tests): every
    /// registered thread's mask, read back with `sched_getaffinity` under
    /// the runtime's lock, is the engine's target for it and, for a member
    /// of a group, the group's home. Threads whose last placement failed
    /// are reported; threads lent to a call that starts a program are
    /// skipped. The error lists every mismatch.
    pub fn check_placements(&self) -> Result<(), String> {
        let inner = &self.owner.inner;
        let st = inner.lock().map_err(|e| e.to_string())?;
        inner.check_placements(&st)
    }

    /// Stops the balancer thread and stops placing threads; restores
    /// nothing (threads keep their last CPUs). Idempotent; returns once the
    /// balancer thread has ended.
    pub fn shutdown(&self) {
        shutdown(&self.owner.inner, &self.owner.balancer);
    }

    /// The calling thread's allowed CPUs, if this runtime set its mask
    /// (the mask read now is the one dfsched last set): where it would run
    /// without dfsched. `None` if it is not registered, dfsched did not
    /// place it, or someone else changed its mask since.
    pub(crate) fn mask_without_dfsched(&self) -> Option<CpuSet> {
        self.masks_set_and_allowed().map(|(_, allowed)| allowed)
    }

    /// The calling thread's mask as dfsched set it and its allowed CPUs,
    /// under the same conditions as [`Runtime::mask_without_dfsched`].
    pub(crate) fn masks_set_and_allowed(&self) -> Option<(CpuSet, CpuSet)> {
        let inner = &self.owner.inner;
        if !inner.config.enabled || inner.is_shut_down() {
            return None;
        }
        // The registered id, not gettid: in a vfork child (see
        // `preload::exec_without_placement`) gettid is the child's own id.
        let tid = crate::thread::registered_tid(inner.id).unwrap_or_else(crate::sys::gettid);
        let st = inner.lock().ok()?;
        let rec = st.tasks.get(&tid)?;
        let now = inner.sys.get_affinity(0).ok()?;
        if now != rec.last_set {
            return None;
        }
        st.engine.task(TaskId(tid)).map(|v| (now, v.allowed))
    }
}

fn shutdown(inner: &Inner, balancer: &Mutex<Option<JoinHandle<()>>>) {
    inner.shut_down.store(true, Ordering::Release);
    if inner.forked() {
        // The balancer thread is the parent's: joining it would wait for
        // ever, and its mutexes may be held by threads the child does not
        // have. Leave everything as it is.
        if let Ok(mut handle) = balancer.try_lock() {
            std::mem::forget(handle.take());
        }
        return;
    }
    {
        let mut stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
        *stop = true;
        inner.wake.notify_all();
    }
    let handle = balancer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(handle) = handle {
        // The balancer thread never shuts its own runtime down, but a join
        // of oneself would deadlock: check rather than trust.
        if handle.thread().id() != std::thread::current().id() {
            let _ = handle.join();
        }
    }
    inner.finish_recording();
    inner.finish_engine_log(false);
}

/// The link to dfsched's sched_ext scheduler, when `config.scx` says to use
/// one (see [`crate::scx`]); a scheduler that cannot be reached is counted
/// and warned about, and the runtime places by affinity. When the policy
/// was not chosen (`config.scx_policy`) and the scheduler offers one
/// (`dfsched scx --policy`), `config` takes it.
fn scx_link(
    config: &mut RuntimeConfig,
    stats: &mut crate::stats::RuntimeStats,
) -> Option<crate::scx::ScxLink> {
    let path = config.scx.socket(&config.sysfs_root)?;
    let mut link = match crate::scx::ScxLink::connect(&path) {
        Ok(link) => link,
        Err(e) => {
            stats.scx_failures += 1;
            tracing::warn!(error = %e, "sched_ext body not used; placing by affinity");
            return None;
        }
    };
    if config.scx_policy {
        match link.offered_policy() {
            Ok(None) => {}
            Ok(Some(name)) => match crate::config::parse_policy(&name) {
                Ok(Some(policy)) => {
                    config.policy = policy;
                    config.engine.policy = policy;
                    stats.scx_policy = true;
                    tracing::info!(%policy, "the sched_ext scheduler's policy taken");
                }
                _ => tracing::warn!(
                    offered = %name,
                    "the sched_ext scheduler offers an unknown policy; keeping ours"
                ),
            },
            Err(e) => {
                stats.scx_failures += 1;
                tracing::warn!(error = %e, "sched_ext body not used; placing by affinity");
                return None;
            }
        }
    }
    stats.scx_body = true;
    Some(link)
}

impl Inner {
    /// Shut down, or started by the parent of this (forked) process.
    #[inline]
    pub(crate) fn is_shut_down(&self) -> bool {
        // Acquire pairs with shutdown's Release: a thread that sees the flag
        // also sees that the balancer was told to stop.
        self.shut_down.load(Ordering::Acquire) || self.forked()
    }

    /// Whether this runtime was started by an ancestor of this process.
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        crate::fork::generation() != self.fork_generation
    }

    /// The state, or [`Error::Internal`] if a panic inside dfsched poisoned
    /// it (the engine may then be half-updated, so it is not used again).
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, State>, Error> {
        self.state.lock().map_err(|_| {
            Error::Internal(
                "an earlier call panicked inside dfsched; this runtime is unusable".into(),
            )
        })
    }
}
