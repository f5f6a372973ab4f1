//! One process of the co-thread test program: `threads` threads doing
//! read-modify-writes on the process's shared data until told to stop.
//!
//! The parent speaks to it over stdin/stdout, one line at a time:
//!
//! ```text
//!  worker                              parent
//!  ──────                              ──────
//!  (co-thread) start a runtime
//!  (oracle) pin the main thread to allowed CPU `process mod n`
//!  spawn threads; each attaches (co-thread) or pins itself (oracle:
//!  the process's CPU; split: allowed CPU `(process + t) mod n`), reads the pin back,
//!  arrives at the gate
//!  all arrived: print "ready" ───────► waits for every worker's "ready"
//!  wait for a line ◄────────────────── "go" (to every worker in turn)
//!  open the gate; sleep `seconds`;
//!  stop; join; print the result ─────► reads one JSON line per worker
//! ```
//!
//! Anything but "go" (or end of input) sends the threads home without work
//! and fails the worker, so a parent that died leaves no worker spinning.
//! A thread that cannot be placed (attach refused, pin failed or not held)
//! keeps the gate shut the same way, and the worker fails with its error:
//! a pinned mode never silently runs where the kernel put it.

use super::{oracle_cpu, split_cpu, CoMode, CoThreadsError, WorkerResult};
use crate::cothread;
use crate::df::Df;
use crate::gate::StartGate;
use crate::os;
use dfsched_core::{CpuId, CpuSet};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Operations a thread does between looks at the stop flag.
const OPS_PER_CHECK: u64 = 64;

/// What one worker process is asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerArgs {
    /// Placement.
    pub mode: CoMode,
    /// This worker's index among the benchmark's processes (0-based): its
    /// CPU under `oracle`.
    pub process: usize,
    /// Threads in this process.
    pub threads: usize,
    /// Bytes of shared data.
    pub shared_bytes: usize,
    /// How long the threads work once the gate opens.
    pub seconds: f64,
}

/// Runs one worker process's part; see the module doc. `input` and
/// `output` are the process's stdin and stdout.
pub fn worker_main(
    args: &WorkerArgs,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), CoThreadsError> {
    let rt = match args.mode {
        CoMode::Vanilla => None,
        CoMode::CoThread => {
            let cfg = dfsched::RuntimeConfig::from_env().map_err(CoThreadsError::Runtime)?;
            Some(cothread::start_runtime(cfg).map_err(CoThreadsError::CoThread)?)
        }
        CoMode::Oracle | CoMode::Split => None,
    };
    let plan = Plan::new(args)?;
    let data = Df::new(args.shared_bytes);
    let stop = AtomicBool::new(false);
    let gate = StartGate::default();
    let outcome = thread::scope(|s| {
        let mut handles = Vec::with_capacity(args.threads);
        for t in 0..args.threads {
            let (data, stop, gate, rt, plan) = (&data, &stop, &gate, rt.as_ref(), &plan);
            let lines = data.lines();
            let start_line = t * lines / args.threads;
            let h = thread::Builder::new()
                .name(format!("cothreads-{t}"))
                .spawn_scoped(s, move || {
                    let placed = match (rt, plan.cpu_of(t)) {
                        (Some(rt), _) => cothread::attach(rt).map_err(CoThreadsError::CoThread),
                        (None, Some(cpu)) => pin_self(&format!("cothreads-{t}"), cpu),
                        (None, None) => Ok(()),
                    };
                    if !gate.arrive(placed.is_ok()) {
                        return placed.map(|()| 0);
                    }
                    let mut line = start_line;
                    let mut ops = 0u64;
                    // Relaxed: the flag only has to be seen eventually; the
                    // join publishes the count.
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..OPS_PER_CHECK {
                            data.rmw_line(line);
                            line += 1;
                            if line == lines {
                                line = 0;
                            }
                        }
                        ops += OPS_PER_CHECK;
                    }
                    Ok(ops)
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.wait_arrivals(handles.len());
                    gate.decide(false);
                    return Err(CoThreadsError::Spawn(e));
                }
            }
        }
        let placed = gate.wait_arrivals(handles.len());
        let mut line = String::new();
        let told = placed
            && writeln!(output, "ready")
                .and_then(|()| output.flush())
                .is_ok()
            && input.read_line(&mut line).is_ok()
            && line.trim() == "go";
        gate.decide(told);
        let start = Instant::now();
        if told {
            thread::sleep(Duration::from_secs_f64(args.seconds));
        }
        stop.store(true, Ordering::Relaxed);
        let elapsed_s = start.elapsed().as_secs_f64();
        let mut ops = Vec::with_capacity(handles.len());
        let mut first_error = None;
        for h in handles {
            match h.join() {
                Ok(Ok(n)) => ops.push(n),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(CoThreadsError::WorkerPanicked);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if !told {
            return Err(CoThreadsError::NoGo);
        }
        Ok(WorkerResult {
            ops,
            elapsed_s,
            agent_reports: None,
        })
    });
    let result = outcome;
    let attached = rt.as_ref().map(|rt| rt.stats().threads_attached);
    let agent_reports = rt.as_ref().map(|rt| rt.agent_link().reports);
    if let Some(rt) = rt {
        rt.shutdown();
    }
    let mut result = result?;
    if let Some(n) = attached {
        if n != args.threads as u64 {
            return Err(CoThreadsError::NotAttached {
                attached: n,
                threads: args.threads,
            });
        }
    }
    result.agent_reports = agent_reports;
    result.ops.shrink_to_fit();
    let line = serde_json::to_string(&result).expect("a result serialises");
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(CoThreadsError::Pipe)
}

/// Where a worker's threads are pinned.
enum Plan {
    /// Not pinned (vanilla, co-thread).
    Free,
    /// Every thread on this CPU (oracle).
    Process(CpuId),
    /// Thread `t` of worker `process` on `cpus[(process + t) mod n]` (split).
    Threads { process: usize, cpus: Vec<CpuId> },
}

impl Plan {
    /// The plan for `args`; under `oracle` the calling (main) thread is
    /// pinned too, so that every thread of the process is on its CPU.
    fn new(args: &WorkerArgs) -> Result<Plan, CoThreadsError> {
        if !args.mode.is_pinned() {
            return Ok(Plan::Free);
        }
        let allowed = os::get_affinity().map_err(CoThreadsError::Affinity)?;
        let cpus: Vec<CpuId> = allowed.iter().collect();
        if cpus.is_empty() {
            return Err(CoThreadsError::NoCpus);
        }
        Ok(match args.mode {
            CoMode::Oracle => {
                let cpu = oracle_cpu(args.process, &cpus);
                pin_self("main", cpu)?;
                Plan::Process(cpu)
            }
            _ => Plan::Threads {
                process: args.process,
                cpus,
            },
        })
    }

    /// The CPU of thread `t`, if pinned.
    fn cpu_of(&self, t: usize) -> Option<CpuId> {
        match self {
            Plan::Free => None,
            Plan::Process(cpu) => Some(*cpu),
            Plan::Threads { process, cpus } => Some(split_cpu(*process, t, cpus)),
        }
    }
}

/// Pins the calling thread (`name` in errors) to `cpu` and reads the
/// affinity back: a pin that fails or does not hold is an error.
fn pin_self(name: &str, cpu: CpuId) -> Result<(), CoThreadsError> {
    let want = CpuSet::single(cpu);
    os::set_affinity(&want).map_err(|reason| CoThreadsError::Pin {
        thread: name.to_string(),
        cpu,
        reason,
    })?;
    let got = os::get_affinity().map_err(CoThreadsError::Affinity)?;
    if got != want {
        return Err(CoThreadsError::PinNotHeld {
            thread: name.to_string(),
            cpu,
            got,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: CoMode) -> WorkerArgs {
        WorkerArgs {
            mode,
            process: 1,
            threads: 3,
            shared_bytes: 4096,
            seconds: 0.05,
        }
    }

    #[test]
    fn a_worker_says_ready_waits_for_go_and_reports_every_thread() {
        for mode in CoMode::ALL {
            // Its own thread: the pinned modes pin the calling thread.
            let out = std::thread::spawn(move || {
                let mut out = Vec::new();
                worker_main(&args(mode), &b"go\n"[..], &mut out).map(|()| out)
            })
            .join()
            .unwrap()
            .unwrap();
            let text = String::from_utf8(out).unwrap();
            let mut lines = text.lines();
            assert_eq!(lines.next(), Some("ready"));
            let r: WorkerResult = serde_json::from_str(lines.next().unwrap()).unwrap();
            assert_eq!(r.ops.len(), 3, "{mode}");
            assert!(r.ops.iter().all(|&n| n > 0), "{mode}: a thread did nothing");
            assert!(r.elapsed_s >= 0.05);
        }
    }

    #[test]
    fn a_pin_that_fails_is_an_error_naming_the_thread_and_cpu() {
        // Its own thread, in case the kernel took the pin after all.
        let e = std::thread::spawn(|| pin_self("cothreads-7", CpuId(4000)))
            .join()
            .unwrap()
            .unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, CoThreadsError::Pin { .. }) && text.contains("cothreads-7"),
            "{text}"
        );
    }

    #[test]
    fn a_worker_without_go_does_no_work_and_fails() {
        let mut out = Vec::new();
        let e = worker_main(&args(CoMode::Vanilla), &b""[..], &mut out).unwrap_err();
        assert!(matches!(e, CoThreadsError::NoGo), "{e}");
        assert_eq!(String::from_utf8(out).unwrap(), "ready\n");
        let mut out = Vec::new();
        let e = worker_main(&args(CoMode::Vanilla), &b"stop\n"[..], &mut out).unwrap_err();
        assert!(matches!(e, CoThreadsError::NoGo));
    }
}
