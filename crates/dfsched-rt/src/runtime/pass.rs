//! The balancer thread of a runtime, and what each of its passes gathers
//! before `balancer.rs` feeds it to the engine: the idle readings (each
//! registered thread's CPU clock, `idle.rs`), our own load for the agent,
//! the agent's view (`agent/link.rs`), the external sample
//! (`external.rs`). Whatever needs I/O is done here, outside the state's
//! mutex or with it held only to copy plain values; the picture of a pass
//! is in `balancer.rs`.
//!
//! Shutdown sets the stop flag under the condvar's mutex and notifies, so a
//! sleeping balancer wakes at once and a running pass is the last one. The
//! balancer's clock is the runtime's age: the engine reads no clock itself.
//!
//! # Phase
//!
//! The first sleep is shorter than the interval by an offset drawn from the
//! pid ([`first_wait`]), so the passes of processes started together (a
//! benchmark's workers, a shell pipeline) do not fall at the same instant.
//! Passes at one instant decide on views of each other taken before any of
//! them moved: three 2-thread processes on 2 CPUs under co-thread all saw
//! the same CPU as the free one and jumped onto it together, then all
//! jumped back (engineer D's `bench spin` 3×2 ended with all six threads on
//! one CPU in 2 of 5 rounds). Spread over the interval, each pass sees the
//! moves of the passes before it (a runtime that moved reports at once).

use super::{Inner, Runtime};
use crate::agent::link::{self, AgentPass, LinkStatus, Ours};
use crate::agent::top::Detail;
use crate::balancer::{self, Inputs};
use crate::error::Error;
use crate::idle::{self, Step, Track, Window, MIN_IDLE_NS};
use dfsched_core::{rules, CpuId, Event, Nanos, TaskId};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Starts the balancer thread of `inner`.
pub(crate) fn spawn(inner: Arc<Inner>, interval: Duration) -> Result<JoinHandle<()>, Error> {
    // Not attached under LD_PRELOAD: the balancer is not the program's.
    crate::thread::internal_spawn(|| {
        std::thread::Builder::new()
            .name("dfsched-balance".into())
            .spawn(move || run(&inner, interval))
    })
    .map_err(|e| Error::Os {
        call: "pthread_create (balancer thread)",
        errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
    })
}

/// The first sleep: the interval less a pid-derived offset in
/// `[0, interval)` (module doc, "Phase"). A multiplicative hash of the pid,
/// so that consecutive pids land far apart in the interval.
fn first_wait(interval: Duration, pid: u32) -> Duration {
    let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return interval;
    }
    // Fibonacci hashing: the top bits of pid × 2^64/φ, scaled to the interval.
    let frac = u64::from(pid).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    let offset = ((u128::from(nanos) * u128::from(frac)) >> 32) as u64;
    Duration::from_nanos(nanos - offset.min(nanos - 1))
}

fn run(inner: &Inner, interval: Duration) {
    let mut stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
    let mut wait = first_wait(interval, inner.pid);
    loop {
        // Sleeps a whole interval unless shutdown intervenes; spurious
        // wake-ups go back to sleep inside wait_timeout_while.
        stop = inner
            .wake
            .wait_timeout_while(stop, wait, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if *stop {
            return;
        }
        wait = interval;
        drop(stop);
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.balance_pass()));
        if let Ok(Err(e)) = &pass {
            tracing::debug!(runtime = inner.id, error = %e, "dfsched balancer pass failed");
        }
        stop = inner.stop.lock().unwrap_or_else(PoisonError::into_inner);
    }
}

impl Inner {
    /// One balancer pass (the picture in `balancer.rs`): the idle step, our
    /// load and the agent's view, the external sample, the engine's pass,
    /// its moves carried out, and the new load reported if anything moved.
    pub(crate) fn balance_pass(&self) -> Result<(), Error> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let cpu_before = crate::sys::own_cpu_ns();
        // The CPUs online, first: a thread the kernel moved off a CPU that
        // went away, or a CPU that came back, changes allowed sets
        // (`runtime/online.rs`) before anything is weighed.
        self.online_pass();
        // smt-pair: the profile's placement replaces everything below (the
        // engine places nothing of its own under it; see runtime/smt.rs).
        if let Some(smt) = &self.smt {
            let out = self.smt_pass(smt, cpu_before);
            self.record_pass();
            return out;
        }
        // Idle threads first, so that the load reported to the agent and
        // balanced below counts only threads that use CPU.
        self.idle_pass();
        // The agent's view first: it carries the unmanaged load from the
        // agent's shared sample, and when it does not, its registered pids'
        // load comes with the view and is left out of our own.
        // This process's threads the engine does not know, read once a pass
        // (/proc/self/task) for both reports.
        let mut unknown = None;
        let agent = self.agent_exchange(&mut unknown);
        if let (Some(rec), Some(view)) = (&self.recorder, agent.view()) {
            rec.sharing(
                view.set,
                view.home.as_ref().map(|h| h.iter().map(|c| c.0).collect()),
            );
        }
        let sample = self.config.external_load.then(|| {
            self.external
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .sample(self.pid, &agent)
        });
        let now = Nanos(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let mut st = self.lock()?;
        let moves_before = balancer::moves(&st);
        let home = {
            let mut tids: Vec<u64> = st.tasks.keys().copied().collect();
            tids.sort_unstable();
            let engine = &st.engine;
            self.agent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .home_changes(agent.view(), self.topology.cpus(), &tids, |tid| {
                    engine.task(TaskId(tid)).map(|v| v.allowed)
                })
        };
        let inputs = Inputs { sample, home, now };
        let out = balancer::balance(&mut st, self.topology.cpus(), inputs);
        if out.allowed_events > 0 {
            self.agent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .count_allowed_events(out.allowed_events);
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(
                runtime = self.id,
                load_milli = ?st.engine.load_milli(),
                report = ?st.engine.last_balance(),
                "dfsched balancer pass"
            );
        }
        // Whatever the external load changed is carried out even if the
        // pass itself was refused.
        self.apply(&mut st, None);
        if let Some(log) = st.engine_log.as_deref_mut() {
            log.flush();
        }
        let moved = balancer::moves(&st) != moves_before;
        // Our runnable threads now and where they are targeted: the next
        // sample leaves them out of the outside load (external.rs). The
        // external lock is only ever taken inside the state lock here, never
        // the other way round.
        if self.config.external_load {
            let shares = balancer::own_shares(
                &st.engine.load_milli(),
                &st.stats.external_load_per_cpu_milli,
            );
            let threads = st
                .tasks
                .keys()
                .filter_map(|&tid| Some((tid, st.engine.target(TaskId(tid))?.clone())))
                .collect();
            self.external
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_own(shares, threads);
        }
        // The outside load the engine now has, for the recording (plain
        // values copied under the lock, encoded after it).
        let outside = match (&self.recorder, self.config.external_load) {
            (Some(_), true) => Some(
                st.stats
                    .external_load_per_cpu_milli
                    .iter()
                    .map(|&(c, m)| (c.0, m))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        let pass_cpu_ns = crate::sys::own_cpu_ns().saturating_sub(cpu_before);
        st.stats.balance_cpu_ns += pass_cpu_ns;
        st.stats.recent_pass_cpu_ns.record(pass_cpu_ns);
        drop(st);
        if moved {
            self.agent_update(&mut unknown);
        }
        // The recording's samples and write-out, after the pass's own
        // work, on this thread (never a program thread's).
        if let (Some(rec), Some(per_cpu)) = (&self.recorder, outside) {
            rec.note(&dfsched_record::Event::OutsideLoad {
                t_ns: rec.now_ns(),
                per_cpu,
            });
        }
        self.record_pass();
        out.balance.map_err(Error::from)
    }

    /// Step 0 (`balancer.rs`): the idle readings, made outside the lock,
    /// then written back under it; nothing when
    /// `idle_passes` is 0. Runs before the agent exchange, so that the load
    /// reported is the one after it.
    pub(crate) fn idle_pass(&self) {
        let passes = self.config.idle_passes;
        if passes == 0 {
            return;
        }
        let window = Window {
            passes,
            min_ns: MIN_IDLE_NS,
        };
        let cpu_before = crate::sys::own_cpu_ns();
        let snapshot: Vec<(u64, Track)> = match self.lock() {
            Ok(st) => st.tasks.iter().map(|(&tid, r)| (tid, r.idle)).collect(),
            Err(_) => return,
        };
        let now_ns = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut outcomes = Vec::with_capacity(snapshot.len());
        for (tid, before) in snapshot {
            // A thread that exited since is left to its exit hook.
            let Ok(cpu_ns) = crate::sys::thread_cpu_ns(tid) else {
                continue;
            };
            let mut after = before;
            let task = TaskId(tid);
            let event = match after.observe(cpu_ns, now_ns, window) {
                Step::Nothing => None,
                Step::Wake => {
                    if let Some(rec) = &self.recorder {
                        rec.note(&dfsched_record::Event::Wake {
                            t_ns: rec.now_ns(),
                            tid,
                        });
                    }
                    Some(Event::Wake { task })
                }
                // Running or queued right now, or unreadable: not idle yet;
                // it stays a candidate and is looked at again next pass.
                Step::Idle => match crate::procfs::thread_runnable_now(self.pid, tid) {
                    Some(false) => {
                        if let Some(rec) = &self.recorder {
                            rec.note(&dfsched_record::Event::Block {
                                t_ns: rec.now_ns(),
                                tid,
                            });
                        }
                        after.block();
                        Some(Event::Block { task })
                    }
                    Some(true) | None => None,
                },
            };
            if after != before {
                outcomes.push(idle::Outcome {
                    tid,
                    before,
                    after,
                    event,
                });
            }
        }
        let Ok(mut st) = self.lock() else {
            return;
        };
        balancer::apply_idle(&mut st, outcomes);
        // A woken thread's group may have been re-homed.
        self.apply(&mut st, None);
        st.stats.idle_cpu_ns += crate::sys::own_cpu_ns().saturating_sub(cpu_before);
    }

    /// Step 1 of `agent/link.rs`: this process's own load, per CPU, in
    /// thousandths, and its allowed CPUs; `None` if the state is unusable
    /// (poisoned). `unknown` holds the runnable threads the engine does not
    /// know, read from `/proc/self/task` by the first call of a pass and
    /// reused by the second (their count changes little in a pass; the
    /// engine's own threads are taken afresh).
    fn ours(&self, unknown: &mut Option<BTreeMap<CpuId, u64>>) -> Option<Ours> {
        // Only while someone runs `dfsched top` (agent/top.rs).
        let watched = link::watched(&self.agent);
        let (mut load, known, detail) = {
            let st = self.lock().ok()?;
            let mut load = BTreeMap::new();
            for &tid in st.tasks.keys() {
                let task = TaskId(tid);
                if st.engine.task(task).is_some_and(|v| v.runnable) {
                    if let Some(target) = st.engine.target(task) {
                        rules::add_task_load(target, &mut load);
                    }
                }
            }
            let known: HashSet<u64> = st.tasks.keys().copied().collect();
            let detail = watched.then(|| {
                let mut d = Detail::of(&st.engine, &self.config.policy.to_string());
                d.threads = u32::try_from(st.tasks.len()).unwrap_or(u32::MAX);
                d.body = crate::scx::Body::of_scx_flag(st.stats.scx_body);
                Box::new(d)
            });
            (load, known, detail)
        };
        let unknown = unknown.get_or_insert_with(|| unknown_runnable(&known, crate::sys::gettid()));
        for (&cpu, &m) in unknown.iter() {
            if self.topology.cpus().contains(cpu) {
                *load.entry(cpu).or_default() += m;
            }
        }
        Some(Ours {
            load,
            allowed: self.allowed.intersection(self.topology.cpus()),
            detail,
        })
    }

    /// Steps 1–2 of `agent/link.rs`: our load out, the agent's view back;
    /// an empty pass when the agent is off or the state is unusable.
    fn agent_exchange(&self, unknown: &mut Option<BTreeMap<CpuId, u64>>) -> AgentPass {
        link::exchange(&self.agent, self.id, || self.ours(unknown))
    }

    /// Step 5 of `agent/link.rs`: the new load, after a pass that moved
    /// threads, on the open connection only.
    fn agent_update(&self, unknown: &mut Option<BTreeMap<CpuId, u64>>) {
        link::update(&self.agent, self.id, || self.ours(unknown));
    }
}

/// Runnable threads of this process not in `known`, per CPU, from
/// `/proc/self/task`; `skip` (the caller) excluded.
fn unknown_runnable(known: &HashSet<u64>, skip: u64) -> BTreeMap<CpuId, u64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if tid == skip || known.contains(&tid) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(f) = crate::procfs::parse_stat(&text) {
            if f.state == b'R' {
                *out.entry(CpuId(f.processor)).or_default() += 1000;
            }
        }
    }
    out
}

impl Runtime {
    /// What the runtime last heard from the agent (see [`LinkStatus`]).
    pub fn agent_link(&self) -> LinkStatus {
        self.inner()
            .agent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .status()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_wait_is_within_the_interval_and_never_zero() {
        let interval = Duration::from_millis(100);
        for pid in [0, 1, 2, 3, 1000, 4_194_303, u32::MAX] {
            let w = first_wait(interval, pid);
            assert!(w > Duration::ZERO && w <= interval, "pid {pid}: {w:?}");
        }
        assert_eq!(first_wait(Duration::ZERO, 7), Duration::ZERO);
        assert_eq!(
            first_wait(Duration::from_nanos(1), 7),
            Duration::from_nanos(1)
        );
    }

    #[test]
    fn consecutive_pids_get_phases_spread_over_the_interval() {
        // Nine workers started together (consecutive pids): no two passes
        // within 3 ms of each other, and both halves of the interval used.
        let interval = Duration::from_millis(100);
        let mut phases: Vec<Duration> = (5000..5009).map(|p| first_wait(interval, p)).collect();
        phases.sort();
        for pair in phases.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(3), "{phases:?}");
        }
        assert!(phases[0] < Duration::from_millis(50) && phases[8] > Duration::from_millis(50));
    }
}
