//! The two helper processes of `bench overhead` and the parent's watchdog.
//!
//! **The hinting program** ([`hinter_main`]): a process linked with the
//! runtime, started with `DFSCHED_AGENT` set by the parent (`off`, or the
//! private agent's socket), every other `DFSCHED_*` as the user has it (the
//! default balance interval unless the user changed it).
//!
//! ```text
//!  hinter                                     parent
//!  ──────                                     ──────
//!  Runtime::start(from the environment)
//!  spawn `threads` threads; thread t enters DF 1 + t mod 2;
//!  threads 0..hinters keep hinting (below), the others wait (no CPU)
//!  all registered; sleep warmup_s
//!  print "ready" ───────────────────────────► agent CPU reading
//!  wait for "go" ◄─────────────────────────── "go"
//!  stats + balancer thread CPU reading; measure `seconds`; reading again
//!                                             (after `seconds`) agent CPU
//!  stop, join; print one JSON line ─────────► reading; reads the result
//! ```
//!
//! A hinting thread, every `hint_period_ms`: one *moving* hint (to the other
//! DF: the slow path, a lock and a `sched_setaffinity`) and
//! [`REPEATS_PER_PERIOD`] *repeating* hints (its DF again: the fast path),
//! each timed with the monotonic clock (so a repeating hint's figure
//! includes ≈ 20 ns of the clock itself, and a moving hint's the wait for
//! the CPU it moved to), then a sleep. The burst's CPU time (the thread's
//! own CPU clock before and after) is what the hints cost the machine.
//! Only calls made while the parent's window is open are counted.
//!
//! **The other threads** ([`others_main`]): a process in a session of its
//! own (`setsid`, so it is a stranger to the measured program, as a
//! server's other programs are), its autogroup at nice 19 and each spinning
//! thread at nice 19 so that its runnable threads stay runnable (the
//! runtime sees and scans them) but take little from the other engineers'
//! work on a shared machine. It starts `sleeping` threads with
//! [`SLEEPER_STACK_BYTES`] stacks, in `pause` for good (one memory mapping
//! each: `spawn_sleeper`), and `spinning` threads,
//! says "ready" and then waits for the end of its stdin: the parent closing
//! the pipe, or dying (Ctrl-C, SIGKILL), ends it, so it can never outlive
//! the benchmark by more than a read. The parent kills it at the end anyway.
//!
//! **The watchdog** ([`Watchdog`]): every wait of the parent on a helper is
//! bounded: a watchdog kills the helper (by pid, before the parent reaps
//! it, so the pid is still the helper's) when a deadline passes, which ends
//! the parent's blocked read with an error.

use super::OverheadError;
use crate::stats::Tail;
use dfsched::{Runtime, RuntimeConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Repeating hints a hinting thread makes per period, after its moving one.
pub const REPEATS_PER_PERIOD: usize = 16;
/// Stack of a sleeping thread of the other-threads process (it only calls
/// `pause`): the C library's minimum is 16 KiB.
pub const SLEEPER_STACK_BYTES: usize = 16 * 1024;
/// Stack of a thread of the hinting program: the runtime's hint path runs
/// on it.
pub const HINTER_STACK_BYTES: usize = 256 * 1024;
/// The name of the runtime's balancer thread, whose CPU clock is read.
const BALANCER_THREAD: &str = "dfsched-balance";

/// What the hinting program is asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct HinterArgs {
    /// Threads of its own, all registered with the runtime.
    pub threads: usize,
    /// Of those, how many keep hinting; the others wait.
    pub hinters: usize,
    /// The measured window, seconds.
    pub seconds: f64,
    /// Seconds between the last registration and "ready" (the idle step
    /// blocks the waiting threads; the balancer settles).
    pub warmup_s: f64,
    /// Milliseconds between a hinting thread's bursts.
    pub hint_period_ms: u64,
}

/// What the hinting program reports: its window's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HinterResult {
    /// Threads registered with the runtime at the window's end.
    pub threads_active: u64,
    /// The window, seconds (the hinter's own clock).
    pub window_s: f64,
    /// CPU time of each balancer pass in the window, nanoseconds
    /// (`recent_pass_cpu_ns`), oldest first.
    pub pass_cpu_ns: Vec<u64>,
    /// Passes in the window (more than `pass_cpu_ns` holds if the record
    /// forgot some).
    pub passes: u64,
    /// `balancer_cpu_ns` over the window.
    pub balancer_cpu_ns: u64,
    /// `idle_cpu_ns` over the window.
    pub idle_cpu_ns: u64,
    /// The balancer thread's CPU over the window by its schedstat
    /// (everything it did, sleeping and waking included); `None` when
    /// unreadable.
    pub balancer_thread_cpu_ns: Option<u64>,
    /// Successful `sched_setaffinity` calls in the window (hints' and the
    /// balancer's): what a moving hint costs grows with them.
    pub placements: u64,
    /// External-load samples from the agent's shared scan in the window.
    pub agent_samples: u64,
    /// External-load samples from the runtime's own scan in the window.
    pub own_scans: u64,
    /// Refresh sweeps (the per-thread look that weighs outside load)
    /// finished in the window; none on a quiet machine.
    #[serde(default)]
    pub refreshes: u64,
    /// Files the runtime's external-load sampling opened in the window.
    #[serde(default)]
    pub external_files: u64,
    /// The engine's group moves and single-thread moves in the window:
    /// the balancer's placements beside the hints' own.
    #[serde(default)]
    pub group_moves: u64,
    /// See [`HinterResult::group_moves`].
    #[serde(default)]
    pub task_moves: u64,
    /// Moving hints' latency, nanoseconds.
    pub hint_move_ns: Option<Tail>,
    /// Repeating hints' latency, nanoseconds.
    pub hint_repeat_ns: Option<Tail>,
    /// Wall time spent inside hint calls in the window, summed over the
    /// threads, nanoseconds (a moving hint's includes waiting for the CPU
    /// it moved to).
    pub hint_wall_ns_total: u64,
    /// CPU time of the hinting threads' bursts in the window (their thread
    /// CPU clock around each burst of one moving and the repeating hints;
    /// the clock reads and the burst's loop included), nanoseconds.
    pub hint_cpu_ns_total: u64,
    /// Hint calls that failed in the window.
    pub hint_errors: u64,
}

/// The per-thread record of a hinting thread's window.
#[derive(Default)]
struct HintTimes {
    moving: Vec<f64>,
    repeating: Vec<f64>,
    wall_ns: u64,
    cpu_ns: u64,
    errors: u64,
}

/// What the threads of the hinting program share.
struct Shared {
    rt: Runtime,
    /// Set when the threads must end.
    stop: AtomicBool,
    /// Set while the parent's window is open.
    measuring: AtomicBool,
    /// Waiting threads sleep on this until `stop`.
    done: Mutex<bool>,
    wake: Condvar,
    /// Threads that made their first hint.
    registered: AtomicU64,
    period: Duration,
}

impl Shared {
    fn stopped(&self) -> bool {
        // Relaxed: a flag seen a period late costs a period, nothing else.
        self.stop.load(Ordering::Relaxed)
    }
}

/// Runs the hinting program (module doc). `input` and `output` are the
/// process's stdin and stdout.
pub fn hinter_main(
    args: &HinterArgs,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), OverheadError> {
    let cfg = RuntimeConfig::from_env().map_err(OverheadError::Runtime)?;
    let rt = Runtime::start(cfg).map_err(OverheadError::Runtime)?;
    let shared = Arc::new(Shared {
        rt: rt.clone(),
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        done: Mutex::new(false),
        wake: Condvar::new(),
        registered: AtomicU64::new(0),
        period: Duration::from_millis(args.hint_period_ms),
    });
    let mut handles = Vec::with_capacity(args.threads);
    let spawned = (0..args.threads).try_for_each(|t| {
        let sh = Arc::clone(&shared);
        let hinting = t < args.hinters;
        let h = thread::Builder::new()
            .name(format!("hinter-{t}"))
            .stack_size(HINTER_STACK_BYTES)
            .spawn(move || thread_body(&sh, 1 + (t as u64 % 2), hinting))
            .map_err(OverheadError::Spawn)?;
        handles.push(h);
        Ok(())
    });
    let outcome = spawned.and_then(|()| measure(args, &shared, &mut input, &mut output));
    shared.stop.store(true, Ordering::Relaxed);
    *shared.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
    shared.wake.notify_all();
    let mut times = Vec::new();
    for h in handles {
        times.push(h.join().map_err(|_| OverheadError::ThreadPanicked)?);
    }
    let mut result = outcome?;
    let mut all = HintTimes::default();
    for t in times.into_iter().flatten() {
        all.moving.extend(t.moving);
        all.repeating.extend(t.repeating);
        all.wall_ns += t.wall_ns;
        all.cpu_ns += t.cpu_ns;
        all.errors += t.errors;
    }
    result.hint_move_ns = Tail::of(&all.moving);
    result.hint_repeat_ns = Tail::of(&all.repeating);
    result.hint_wall_ns_total = all.wall_ns;
    result.hint_cpu_ns_total = all.cpu_ns;
    result.hint_errors = all.errors;
    rt.shutdown();
    let line = serde_json::to_string(&result).expect("the result serialises");
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(OverheadError::Pipe)
}

/// The main thread's part: waits for every registration, warms up, says
/// "ready", waits for "go", measures. The hint times are filled in by the
/// caller once the threads have ended.
fn measure(
    args: &HinterArgs,
    sh: &Shared,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> Result<HinterResult, OverheadError> {
    // The parent's watchdog bounds this wait.
    while sh.registered.load(Ordering::Acquire) < args.threads as u64 {
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(Duration::from_secs_f64(args.warmup_s));
    writeln!(output, "ready")
        .and_then(|()| output.flush())
        .map_err(OverheadError::Pipe)?;
    let mut line = String::new();
    input.read_line(&mut line).map_err(OverheadError::Pipe)?;
    if line.trim() != "go" {
        return Err(OverheadError::NoGo);
    }
    let s0 = sh.rt.stats();
    let b0 = thread_cpu_ns_named("self", BALANCER_THREAD);
    let start = Instant::now();
    sh.measuring.store(true, Ordering::Relaxed);
    thread::sleep(Duration::from_secs_f64(args.seconds));
    sh.measuring.store(false, Ordering::Relaxed);
    let window_s = start.elapsed().as_secs_f64();
    let s1 = sh.rt.stats();
    let b1 = thread_cpu_ns_named("self", BALANCER_THREAD);
    let r0 = s0.recent_pass_cpu_ns.recorded;
    Ok(HinterResult {
        threads_active: s1.threads_active,
        window_s,
        pass_cpu_ns: s1.recent_pass_cpu_ns.since(r0),
        passes: s1.recent_pass_cpu_ns.recorded - r0,
        balancer_cpu_ns: s1.balance_cpu_ns - s0.balance_cpu_ns,
        idle_cpu_ns: s1.idle_cpu_ns - s0.idle_cpu_ns,
        balancer_thread_cpu_ns: b0.zip(b1).map(|(a, b)| b.saturating_sub(a)),
        placements: s1.affinity_calls - s0.affinity_calls,
        agent_samples: s1.external_load_agent_samples - s0.external_load_agent_samples,
        own_scans: s1.external_load_own_scans - s0.external_load_own_scans,
        refreshes: s1.external_refreshes - s0.external_refreshes,
        external_files: s1.external_files_read - s0.external_files_read,
        group_moves: s1.engine.group_moves - s0.engine.group_moves,
        task_moves: s1.engine.task_moves - s0.engine.task_moves,
        hint_move_ns: None,
        hint_repeat_ns: None,
        hint_wall_ns_total: 0,
        hint_cpu_ns_total: 0,
        hint_errors: 0,
    })
}

/// One thread of the hinting program: enters `df`; a hinting thread then
/// hints until stopped, a waiting one waits. Its times, if it hinted.
fn thread_body(sh: &Shared, mut df: u64, hinting: bool) -> Option<HintTimes> {
    let first = sh.rt.enter(df);
    // Release: pairs with the main thread's Acquire count; the count, not
    // the hint's outcome, is what it waits for.
    sh.registered.fetch_add(1, Ordering::Release);
    let mut times = HintTimes::default();
    if first.is_err() {
        times.errors += 1;
    }
    if !hinting {
        let mut done = sh.done.lock().unwrap_or_else(PoisonError::into_inner);
        while !*done {
            done = sh.wake.wait(done).unwrap_or_else(PoisonError::into_inner);
        }
        return None;
    }
    let mut timed = |call: &dyn Fn() -> Result<(), dfsched::Error>, into_moving: bool| {
        let t0 = Instant::now();
        let r = call();
        let ns = t0.elapsed().as_nanos() as u64;
        if sh.measuring.load(Ordering::Relaxed) {
            times.wall_ns += ns;
            times.errors += u64::from(r.is_err());
            let list = if into_moving {
                &mut times.moving
            } else {
                &mut times.repeating
            };
            list.push(ns as f64);
        }
    };
    let tid = dfsched::sys::gettid();
    let mut cpu_ns = 0;
    while !sh.stopped() {
        let cpu0 = dfsched::sys::thread_cpu_ns(tid).unwrap_or(0);
        let next = 3 - df;
        timed(&|| sh.rt.enter(next), true);
        df = next;
        for _ in 0..REPEATS_PER_PERIOD {
            timed(&|| sh.rt.enter(df), false);
        }
        if sh.measuring.load(Ordering::Relaxed) {
            cpu_ns += dfsched::sys::thread_cpu_ns(tid)
                .unwrap_or(0)
                .saturating_sub(cpu0);
        }
        thread::sleep(sh.period);
    }
    times.cpu_ns = cpu_ns;
    Some(times)
}

/// Runs the other-threads process (module doc): `sleeping` parked threads
/// and `spinning` nice-19 spinners in a session of its own, "ready" when
/// all run, then until `input` ends.
pub fn others_main(
    sleeping: usize,
    spinning: usize,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), OverheadError> {
    // SAFETY: setsid takes no pointers and only changes this process's
    // session; it fails (harmlessly, already a leader) or succeeds.
    let _ = unsafe { libc::setsid() };
    // Raising our own autogroup's nice needs no privilege; where autogroups
    // are off it fails and the per-thread nice below still applies.
    let _ = std::fs::write("/proc/self/autogroup", "19");
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..sleeping {
        spawn_sleeper().map_err(OverheadError::Spawn)?;
    }
    for t in 0..spinning {
        let stop = Arc::clone(&stop);
        thread::Builder::new()
            .name(format!("other-spin-{t}"))
            .spawn(move || {
                // SAFETY: setpriority takes no pointers; who 0 is the
                // calling thread on Linux. A failure leaves it at nice 0.
                let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                }
            })
            .map_err(OverheadError::Spawn)?;
    }
    writeln!(output, "ready")
        .and_then(|()| output.flush())
        .map_err(OverheadError::Pipe)?;
    let mut sink = Vec::new();
    let _ = input.read_to_end(&mut sink);
    stop.store(true, Ordering::Relaxed);
    Ok(())
}

/// A sleeping thread's whole life: `pause` until the process ends.
extern "C" fn sleeper(_: *mut libc::c_void) -> *mut libc::c_void {
    loop {
        // SAFETY: pause takes nothing and only blocks the calling thread.
        unsafe { libc::pause() };
    }
}

/// Starts one sleeping thread with a [`SLEEPER_STACK_BYTES`] stack and no
/// guard page, detached, by `pthread_create` rather than `std::thread`:
/// a std thread maps a signal stack and its guard besides its own stack
/// and guard (4 mappings), and 28k of those pass `vm.max_map_count`
/// (65530 by default); this one is a single mapping.
fn spawn_sleeper() -> std::io::Result<()> {
    // SAFETY: `attr` is initialised by pthread_attr_init before any other
    // use and destroyed once, after pthread_create has copied it; the start
    // routine takes no argument (null) and never returns, so nothing it
    // could point at has to outlive anything.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let rc = libc::pthread_attr_init(&mut attr);
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        let mut rc = libc::pthread_attr_setstacksize(&mut attr, SLEEPER_STACK_BYTES);
        if rc == 0 {
            rc = libc::pthread_attr_setguardsize(&mut attr, 0);
        }
        if rc == 0 {
            rc = libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        }
        let mut thread: libc::pthread_t = 0;
        if rc == 0 {
            rc = libc::pthread_create(&mut thread, &attr, sleeper, std::ptr::null_mut());
        }
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Kills a helper process if it is not done by a deadline.
pub struct Watchdog {
    cancel: Option<mpsc::Sender<()>>,
    handle: Option<thread::JoinHandle<bool>>,
}

impl Watchdog {
    /// Arms: `pid` gets SIGKILL after `timeout` unless the watchdog is
    /// [`Watchdog::disarm`]ed or dropped first. The caller must not reap
    /// `pid` while armed.
    pub fn arm(pid: u32, timeout: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                // SAFETY: kill takes no pointers; `pid` is our unreaped
                // child (the caller's contract), so it names no one else.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return true;
            }
            false
        });
        Watchdog {
            cancel: Some(tx),
            handle: Some(handle),
        }
    }

    /// Stops the watchdog; whether it had fired.
    pub fn disarm(mut self) -> bool {
        self.stop()
    }

    fn stop(&mut self) -> bool {
        drop(self.cancel.take());
        self.handle
            .take()
            .map(|h| h.join().unwrap_or(false))
            .unwrap_or(false)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU time of one task by its schedstat (`/proc/<pid>/task/<tid>/schedstat`:
/// nanoseconds on the CPU, first field); `None` if unreadable.
fn task_cpu_ns(pid: &str, tid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// CPU nanoseconds of the first thread of `pid` (`"self"` or a number)
/// named `name`, if any.
pub fn thread_cpu_ns_named(pid: &str, name: &str) -> Option<u64> {
    threads_cpu_ns(pid)
        .into_iter()
        .find(|t| t.name == name)
        .map(|t| t.cpu_ns)
}

/// One thread's name and CPU time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCpu {
    /// Its tid.
    pub tid: u64,
    /// Its `comm`.
    pub name: String,
    /// Its schedstat CPU time, nanoseconds.
    pub cpu_ns: u64,
}

/// Every thread of `pid` with its CPU time (empty if the process is gone).
pub fn threads_cpu_ns(pid: &str) -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<ThreadCpu> = dir
        .flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.to_string();
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some(ThreadCpu {
                tid: tid.parse().ok()?,
                name: name.trim().to_string(),
                cpu_ns: task_cpu_ns(pid, &tid)?,
            })
        })
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

/// CPU used between two readings of one process's threads, by thread name:
/// a thread in both counts its difference, one that appeared its whole
/// time (it started in between), one that ended is lost (its time is not
/// readable any more). Names sum over threads of the same name.
pub fn cpu_between(before: &[ThreadCpu], after: &[ThreadCpu]) -> BTreeMap<String, u64> {
    let mut by_name = BTreeMap::new();
    for a in after {
        let base = before
            .iter()
            .find(|b| b.tid == a.tid)
            .map_or(0, |b| b.cpu_ns);
        *by_name.entry(a.name.clone()).or_insert(0) += a.cpu_ns.saturating_sub(base);
    }
    by_name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tid: u64, name: &str, cpu_ns: u64) -> ThreadCpu {
        ThreadCpu {
            tid,
            name: name.into(),
            cpu_ns,
        }
    }

    #[test]
    fn cpu_between_counts_differences_new_threads_whole_and_sums_by_name() {
        let before = [t(1, "main", 100), t(2, "conn", 50), t(3, "gone", 7)];
        let after = [t(1, "main", 130), t(2, "conn", 60), t(4, "conn", 5)];
        let d = cpu_between(&before, &after);
        assert_eq!(d.get("main"), Some(&30));
        assert_eq!(d.get("conn"), Some(&15), "10 + a new thread's 5");
        assert_eq!(d.get("gone"), None);
    }

    #[test]
    fn this_process_threads_are_read_with_names_and_cpu() {
        let me = threads_cpu_ns("self");
        assert!(!me.is_empty());
        let pid = std::process::id();
        assert!(me.iter().any(|t| t.tid == u64::from(pid)), "{me:?}");
        assert_eq!(threads_cpu_ns("999999999"), Vec::new());
    }

    #[test]
    fn a_watchdog_kills_a_stuck_child_and_a_disarmed_one_does_not() {
        let mut stuck = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let dog = Watchdog::arm(stuck.id(), Duration::from_millis(50));
        let status = stuck.wait().unwrap();
        assert!(dog.disarm(), "it fired");
        assert!(!status.success());
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let dog = Watchdog::arm(quick.id(), Duration::from_secs(600));
        assert!(!dog.disarm());
        assert!(quick.wait().unwrap().success());
    }
}
