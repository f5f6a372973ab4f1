//! The probes of `dfsched calibrate`: what things cost on this machine.
//!
//! Every probe runs in *rounds*; a round takes many samples and keeps their
//! median, and the rounds of all probes are interleaved (round 1 of every
//! probe, then round 2…, in an order rotated per round), so a disturbance
//! of the machine lands on one round of several probes rather than on
//! every round of one. The caller turns the round medians into a median
//! and a spread.
//!
//! | probe | how |
//! |---|---|
//! | `cycle` | a chain of dependent 64-bit multiplies (3 cycles each on current x86-64 and arm64 cores) |
//! | `pass_access` | `bench df`'s own pass ([`crate::df::pass`], one store per line) over 8 KiB, while a second CPU runs the same loop on its own DF (the oracle's situation) |
//! | `l1_hit`, `l2_hit`, `llc_hit`, `memory_fetch` | a pointer chase through a random cyclic permutation of 64-byte lines, over a buffer sized against the caches sysfs reports (half the L1d; half the L2; four times the L2 but at most half the LLC; four times the LLC, at least 64 MiB and at most [`MEMORY_BUFFER_MAX`], 64 MiB with `--quick`) |
//! | `line_write_transfer`, `line_read_transfer` | thread A on one CPU writes 256 lines, thread B on another then stores to (loads) each once with the benchmark's pass: per line |
//! | `line_contended` | the benchmark's pass over 8 KiB on two CPUs at once, over the same DF: per access (every line written by both). Recorded, not used by the simulator: on the 2-vCPU KVM guest it is bimodal from run to run (0.27 ns, below an uncontended access, or 10–36 ns), which is not understood yet |
//! | `wake_same_cpu`, `wake_other_cpu` | two threads ping-pong a byte over socket pairs, pinned to one CPU / two CPUs: half a round trip |
//! | `wake_other_cpu_time` | the `wake_other_cpu` ping-pong's CPU time (both threads', `/proc/thread-self/schedstat`) per leg: what of a cross-CPU wake-up is work on CPUs rather than waiting |
//! | `context_switch` | `wake_same_cpu` minus a write and a read of a byte that do not block |
//! | `setaffinity` | `sched_setaffinity` to the CPU the thread is on |
//! | `migration` | `sched_setaffinity` to another CPU, minus `setaffinity` |
//! | `timeslice` | two spinning threads on one CPU: the run between two gaps in one thread's clock reads |
//!
//! Threads are pinned with `sched_setaffinity` (the runtime's `sys`
//! module) and restored afterwards. A probe that needs two CPUs, with one
//! allowed, is not run and says so.

use crate::df::{self, Df, Stride, WritePattern};
use crate::os;
use dfsched_core::{CpuId, CpuSet};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest buffer the memory probe walks: 256 MiB. A machine whose
/// LLC is larger than a quarter of this measures a mix of LLC and memory,
/// which its `buffer_bytes` lets a reader see.
pub const MEMORY_BUFFER_MAX: u64 = 256 << 20;

/// Cache sizes the probes size their buffers against.
#[derive(Clone, Copy, Debug)]
pub struct CacheSizes {
    /// L1 data cache bytes.
    pub l1: u64,
    /// L2 bytes.
    pub l2: u64,
    /// LLC bytes.
    pub llc: u64,
}

/// How hard to probe.
#[derive(Clone, Copy, Debug)]
pub struct ProbePlan {
    /// Rounds per probe.
    pub rounds: u32,
    /// Scale of the samples per round (1.0 full; `--quick` less).
    pub effort: f64,
}

impl ProbePlan {
    /// The full calibration: 7 rounds, within a minute on a 2-CPU machine.
    pub fn full() -> ProbePlan {
        ProbePlan {
            rounds: 7,
            effort: 1.0,
        }
    }

    /// `--quick`: 3 short rounds (for tests), a few seconds.
    pub fn quick() -> ProbePlan {
        ProbePlan {
            rounds: 3,
            effort: 0.1,
        }
    }
}

/// One probe's outcome: the per-round medians in ns, or why it did not
/// run; and the buffer a memory probe walked.
#[derive(Clone, Debug)]
pub struct ProbeOutcome {
    /// Round medians, ns; `Err(reason)` if the probe could not run.
    pub rounds_ns: Result<Vec<f64>, String>,
    /// Bytes of the buffer walked, for memory probes.
    pub buffer_bytes: Option<u64>,
}

/// The probes' names, in the profile's order.
pub const PROBES: [&str; 16] = [
    "cycle",
    "pass_access",
    "l1_hit",
    "l2_hit",
    "llc_hit",
    "memory_fetch",
    "line_write_transfer",
    "line_read_transfer",
    "line_contended",
    "wake_same_cpu",
    "wake_other_cpu",
    "wake_other_cpu_time",
    "context_switch",
    "migration",
    "setaffinity",
    "timeslice",
];

/// Runs every probe on `allowed` (the process's CPUs) against `sizes`,
/// calling `progress(done, total)` after each probe round. The calling
/// thread's affinity is restored before returning.
pub fn run_probes(
    allowed: &CpuSet,
    sizes: CacheSizes,
    plan: ProbePlan,
    mut progress: impl FnMut(usize, usize),
) -> BTreeMap<&'static str, ProbeOutcome> {
    let cpus: Vec<CpuId> = allowed.iter().collect();
    let a = cpus[0];
    let b = cpus.get(1).copied();
    let n = |x: f64| ((x * plan.effort).round() as usize).max(1);
    // A quick calibration walks at most 64 MiB for memory.
    let memory_max = if plan.effort < 1.0 {
        64 << 20
    } else {
        MEMORY_BUFFER_MAX
    };
    let chase_sizes = [
        ("l1_hit", (sizes.l1 / 2).max(4096)),
        ("l2_hit", (sizes.l2 / 2).max(sizes.l1 * 2)),
        (
            "llc_hit",
            (sizes.l2 * 4).min(sizes.llc / 2).max(sizes.l2 * 2),
        ),
        ("memory_fetch", (sizes.llc * 4).clamp(64 << 20, memory_max)),
    ];
    let chains: Vec<(&'static str, Chain)> = chase_sizes
        .iter()
        .map(|&(name, bytes)| (name, Chain::new(bytes, 0x5eed ^ bytes)))
        .collect();
    let mut rounds: BTreeMap<&'static str, Result<Vec<f64>, String>> =
        PROBES.iter().map(|&p| (p, Ok(Vec::new()))).collect();
    let one_cpu = "only one CPU allowed: a cross-CPU cost cannot be measured".to_string();
    if b.is_none() {
        for p in [
            "line_write_transfer",
            "line_read_transfer",
            "line_contended",
            "wake_other_cpu",
            "wake_other_cpu_time",
            "migration",
        ] {
            rounds.insert(p, Err(one_cpu.clone()));
        }
    }
    let total = plan.rounds as usize * PROBES.len();
    let mut done = 0;
    for r in 0..plan.rounds as usize {
        for k in 0..PROBES.len() {
            let name = PROBES[(k + r) % PROBES.len()];
            if rounds[name].is_err() {
                done += 1;
                progress(done, total);
                continue;
            }
            let _ = os::set_affinity(&CpuSet::single(a));
            let got: Result<f64, String> = match name {
                "cycle" => Ok(cycle_ns(n(2e6))),
                "pass_access" => Ok(pass_access_ns(n(20_000.0), b)),
                "line_write_transfer" => transfer_ns(a, b.expect("two CPUs"), true, n(400.0)),
                "line_read_transfer" => transfer_ns(a, b.expect("two CPUs"), false, n(400.0)),
                "line_contended" => contended_pass_ns(a, b.expect("two CPUs"), n(200.0).max(5)),
                "wake_same_cpu" => ping_pong_ns(a, a, n(3000.0)).map(|x| x.wall),
                "wake_other_cpu" => {
                    ping_pong_ns(a, b.expect("two CPUs"), n(3000.0)).map(|x| x.wall)
                }
                "wake_other_cpu_time" => {
                    ping_pong_ns(a, b.expect("two CPUs"), n(3000.0)).and_then(|x| x.cpu)
                }
                "context_switch" => ping_pong_ns(a, a, n(3000.0))
                    .map(|leg| (leg.wall - syscall_pair_ns(n(3000.0))).max(1.0)),
                "setaffinity" => setaffinity_ns(a, n(3000.0)),
                "migration" => migration_ns(a, b.expect("two CPUs"), n(1000.0)),
                "timeslice" => timeslice_ns(a, Duration::from_secs_f64(0.5 * plan.effort.max(0.2))),
                chase => {
                    let (_, chain) = chains.iter().find(|(c, _)| *c == chase).expect("a chase");
                    Ok(chain.ns_per_load(n(2e6)))
                }
            };
            match got {
                Ok(ns) => {
                    if let Some(Ok(v)) = rounds.get_mut(name) {
                        v.push(ns);
                    }
                }
                Err(why) => {
                    rounds.insert(name, Err(why));
                }
            }
            done += 1;
            progress(done, total);
        }
    }
    let _ = os::set_affinity(allowed);
    PROBES
        .iter()
        .map(|&p| {
            let buffer_bytes = chase_sizes.iter().find(|c| c.0 == p).map(|c| c.1);
            (
                p,
                ProbeOutcome {
                    rounds_ns: rounds.remove(p).expect("every probe has an entry"),
                    buffer_bytes,
                },
            )
        })
        .collect()
}

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per cycle: `iters` × 8 steps of `x = x × (x | 1)`, each an OR
/// (1 cycle) and a dependent multiply (3 cycles). The multiplier depends on
/// `x`, so the compiler cannot merge steps (as it would merge `x × m × m`
/// into `x × m²`).
fn cycle_ns(iters: usize) -> f64 {
    let samples: Vec<f64> = (0..5)
        .map(|_| {
            let mut x = black_box(3u64);
            let t = Instant::now();
            for _ in 0..iters {
                for _ in 0..8 {
                    x = x.wrapping_mul(x | 1);
                }
            }
            black_box(x);
            t.elapsed().as_nanos() as f64 / (iters as f64 * 8.0 * 4.0)
        })
        .collect();
    median(samples)
}

/// ns per access of `bench df`'s pass over an 8 KiB DF (L1-resident),
/// while a thread on `companion` (if any) does the same on a DF of its own:
/// the oracle's situation, where every CPU runs the loop at once (on a VM
/// two vCPUs may be one core's hardware threads, and then each runs it at
/// about half speed).
fn pass_access_ns(passes: usize, companion: Option<CpuId>) -> f64 {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = companion.map(|b| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = os::set_affinity(&CpuSet::single(b));
            let d = Df::new(8192);
            let mut p = WritePattern::new(1.0, 4);
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..100 {
                    black_box(df::pass(&d, Stride::LINE, &mut p));
                }
            }
        })
    });
    let ns = pass_access_alone(passes);
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = other {
        let _ = t.join();
    }
    ns
}

/// ns per access of the pass loop on the calling thread's CPU.
fn pass_access_alone(passes: usize) -> f64 {
    let d = Df::new(8192);
    let mut p = WritePattern::new(1.0, 1);
    for _ in 0..100 {
        df::pass(&d, Stride::LINE, &mut p);
    }
    let samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..passes {
                black_box(df::pass(&d, Stride::LINE, &mut p));
            }
            t.elapsed().as_nanos() as f64 / (passes * d.lines()) as f64
        })
        .collect();
    median(samples)
}

/// A cyclic permutation of 64-byte lines: following it makes every load
/// depend on the last. The lines of each 4 KiB page are visited in a random
/// order and the pages in a random order, so the prefetchers cannot guess
/// the next line, while a page's translation serves its 64 loads (a miss in
/// the TLB on every load, costly on a VM's nested page tables, would
/// measure the page walk rather than the cache).
struct Chain {
    /// `next[i * 8]` is the index (in words) of the line after line `i`.
    next: Vec<usize>,
}

/// Lines per 4 KiB page.
const PAGE_LINES: usize = 64;

impl Chain {
    fn new(bytes: u64, seed: u64) -> Chain {
        let lines = (bytes / 64).max(2) as usize;
        let mut s = seed;
        let mut shuffle = |v: &mut [usize]| {
            for i in (1..v.len()).rev() {
                s = df::mix64(s);
                v.swap(i, (s % (i as u64 + 1)) as usize);
            }
        };
        let mut pages: Vec<usize> = (0..lines.div_ceil(PAGE_LINES)).collect();
        shuffle(&mut pages);
        let mut order: Vec<usize> = Vec::with_capacity(lines);
        for p in pages {
            let mut in_page: Vec<usize> =
                (p * PAGE_LINES..((p + 1) * PAGE_LINES).min(lines)).collect();
            shuffle(&mut in_page);
            order.extend(in_page);
        }
        let mut next = vec![0usize; lines * 8];
        for w in 0..lines {
            next[order[w] * 8] = order[(w + 1) % lines] * 8;
        }
        Chain { next }
    }

    fn ns_per_load(&self, loads: usize) -> f64 {
        let mut i = 0usize;
        // Warm: one lap, at most the loads asked.
        for _ in 0..(self.next.len() / 8).min(loads) {
            i = self.next[i];
        }
        // Five samples, their median: one preemption spoils one sample,
        // not the round.
        let per = loads.div_ceil(5);
        let samples: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..per {
                    i = self.next[i];
                }
                t.elapsed().as_nanos() as f64 / per as f64
            })
            .collect();
        black_box(i);
        median(samples)
    }
}

/// Lines of the transfer probes' buffer.
const TRANSFER_LINES: usize = 256;

/// Per line: thread A (on `a`) writes every line, then thread B (on `b`)
/// passes over them storing (`write`) or loading; `reps` times; the
/// median of B's passes.
fn transfer_ns(a: CpuId, b: CpuId, write: bool, reps: usize) -> Result<f64, String> {
    let d = Arc::new(Df::new(TRANSFER_LINES * 64));
    let turn = Arc::new(AtomicU64::new(0));
    let (d2, turn2) = (d.clone(), turn.clone());
    let writer = std::thread::spawn(move || -> Result<(), String> {
        os::set_affinity(&CpuSet::single(a)).map_err(|e| e.to_string())?;
        let mut p = WritePattern::new(1.0, 2);
        for r in 0..reps as u64 {
            while turn2.load(Ordering::Acquire) != 2 * r {
                std::hint::spin_loop();
            }
            df::pass(&d2, Stride::LINE, &mut p);
            turn2.store(2 * r + 1, Ordering::Release);
        }
        Ok(())
    });
    os::set_affinity(&CpuSet::single(b)).map_err(|e| e.to_string())?;
    let mut p = WritePattern::new(if write { 1.0 } else { 0.0 }, 3);
    let mut samples = Vec::with_capacity(reps);
    for r in 0..reps as u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while turn.load(Ordering::Acquire) != 2 * r + 1 {
            if Instant::now() > deadline {
                return Err("the writer thread did not run within 5 s".into());
            }
            std::hint::spin_loop();
        }
        let t = Instant::now();
        black_box(df::pass(&d, Stride::LINE, &mut p));
        samples.push(t.elapsed().as_nanos() as f64 / TRANSFER_LINES as f64);
        turn.store(2 * r + 2, Ordering::Release);
    }
    writer
        .join()
        .map_err(|_| "the writer thread panicked".to_string())??;
    Ok(median(samples))
}

/// One leg of a ping-pong: its wall time and the CPU time both threads
/// spent on it, ns.
struct Leg {
    /// Half a round trip.
    wall: f64,
    /// Both threads' CPU time over the timed legs, per leg; an error when
    /// `/proc/thread-self/schedstat` cannot be read.
    cpu: Result<f64, String>,
}

/// The calling thread's time on a CPU so far, ns: the first field of
/// `/proc/thread-self/schedstat`.
fn thread_cpu_ns() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")
        .map_err(|e| format!("/proc/thread-self/schedstat: {e}"))?;
    s.split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| format!("/proc/thread-self/schedstat: unexpected {s:?}"))
}

/// Half a round trip of a byte between two threads pinned to `a` and `b`
/// over two socket pairs (a wake-up of a thread blocked in `read`), and the
/// CPU time the two threads spent per leg over the timed trips.
fn ping_pong_ns(a: CpuId, b: CpuId, trips: usize) -> Result<Leg, String> {
    let (mut x1, mut y1) = UnixStream::pair().map_err(|e| e.to_string())?;
    let (mut x2, mut y2) = UnixStream::pair().map_err(|e| e.to_string())?;
    // The echo thread's CPU time at the start of the timed trips (it reads
    // its clock when it sees the byte 's') and at its end.
    let echo = std::thread::spawn(move || -> Result<Result<u64, String>, String> {
        os::set_affinity(&CpuSet::single(b)).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 1];
        let mut start = Ok(0);
        loop {
            match y1.read(&mut buf) {
                Ok(1) => {}
                _ => return Ok(start.and_then(|s| Ok(thread_cpu_ns()? - s))),
            }
            if buf[0] == b's' {
                start = thread_cpu_ns();
            }
            y2.write_all(&buf).map_err(|e| e.to_string())?;
        }
    });
    os::set_affinity(&CpuSet::single(a)).map_err(|e| e.to_string())?;
    x1.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    x2.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 1];
    let mut trip = |n: usize, first: u8| -> Result<f64, String> {
        let t = Instant::now();
        for k in 0..n {
            let byte = if k == 0 { first } else { b'x' };
            x1.write_all(&[byte]).map_err(|e| e.to_string())?;
            x2.read_exact(&mut buf).map_err(|e| e.to_string())?;
        }
        Ok(t.elapsed().as_nanos() as f64 / n as f64 / 2.0)
    };
    trip(trips.min(100), b'x')?;
    // The timed trips start with 's': the echo thread starts its clock
    // when it has it, as this one does before sending it.
    let mine = thread_cpu_ns();
    let per = trips.div_ceil(5);
    let samples: Result<Vec<f64>, String> = (0..5)
        .map(|k| trip(per, if k == 0 { b's' } else { b'x' }))
        .collect();
    let mine = mine.and_then(|m| Ok(thread_cpu_ns()? - m));
    drop(x1);
    let theirs = echo
        .join()
        .map_err(|_| "the echo thread panicked".to_string())??;
    let legs = (2 * 5 * per) as f64;
    let cpu = mine.and_then(|m| Ok((m + theirs?) as f64 / legs));
    Ok(Leg {
        wall: median(samples?),
        cpu,
    })
}

/// ns per access of `bench df`'s pass over an 8 KiB DF while a thread on
/// `b` runs the same loop over the same DF: the regime of two CPUs working
/// on one DF at once, where nearly every access takes a line the other
/// CPU has just written. The median of `reps` timed batches of 100 passes.
fn contended_pass_ns(a: CpuId, b: CpuId, reps: usize) -> Result<f64, String> {
    let d = Arc::new(Df::new(8192));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ready = Arc::new(AtomicU64::new(0));
    let (d2, stop2, ready2) = (d.clone(), stop.clone(), ready.clone());
    let other = std::thread::spawn(move || -> Result<(), String> {
        os::set_affinity(&CpuSet::single(b)).map_err(|e| e.to_string())?;
        let mut p = WritePattern::new(1.0, 5);
        ready2.store(1, Ordering::Release);
        while !stop2.load(Ordering::Relaxed) {
            black_box(df::pass(&d2, Stride::LINE, &mut p));
        }
        Ok(())
    });
    os::set_affinity(&CpuSet::single(a)).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while ready.load(Ordering::Acquire) == 0 {
        if Instant::now() > deadline {
            stop.store(true, Ordering::Relaxed);
            return Err("the second thread did not run within 5 s".into());
        }
        std::hint::spin_loop();
    }
    let mut p = WritePattern::new(1.0, 6);
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..100 {
            black_box(df::pass(&d, Stride::LINE, &mut p));
        }
        samples.push(t.elapsed().as_nanos() as f64 / (100 * d.lines()) as f64);
    }
    stop.store(true, Ordering::Relaxed);
    other
        .join()
        .map_err(|_| "the second thread panicked".to_string())??;
    Ok(median(samples))
}

/// A write and a read of one byte on a socket pair, neither blocking.
fn syscall_pair_ns(n: usize) -> f64 {
    let Ok((mut x, mut y)) = UnixStream::pair() else {
        return 0.0;
    };
    let mut buf = [0u8; 1];
    let samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n.div_ceil(5) {
                let _ = x.write_all(b"x");
                let _ = y.read_exact(&mut buf);
            }
            t.elapsed().as_nanos() as f64 / n.div_ceil(5) as f64
        })
        .collect();
    median(samples)
}

/// One `sched_setaffinity` to the CPU the thread is already on.
fn setaffinity_ns(a: CpuId, n: usize) -> Result<f64, String> {
    let one = CpuSet::single(a);
    os::set_affinity(&one).map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(5);
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n.div_ceil(5) {
            os::set_affinity(&one).map_err(|e| e.to_string())?;
        }
        samples.push(t.elapsed().as_nanos() as f64 / n.div_ceil(5) as f64);
    }
    Ok(median(samples))
}

/// A `sched_setaffinity` that moves the thread between `a` and `b`, less
/// one that does not.
fn migration_ns(a: CpuId, b: CpuId, n: usize) -> Result<f64, String> {
    let (sa, sb) = (CpuSet::single(a), CpuSet::single(b));
    os::set_affinity(&sa).map_err(|e| e.to_string())?;
    let t = Instant::now();
    for i in 0..n {
        os::set_affinity(if i % 2 == 0 { &sb } else { &sa }).map_err(|e| e.to_string())?;
    }
    let moving = t.elapsed().as_nanos() as f64 / n as f64;
    let still = setaffinity_ns(a, n)?;
    Ok((moving - still).max(1.0))
}

/// The median run of one of two spinning threads pinned to `a`, between
/// gaps of more than 20 µs in its clock reads, over `span`.
fn timeslice_ns(a: CpuId, span: Duration) -> Result<f64, String> {
    let spin = move || -> Result<Vec<f64>, String> {
        os::set_affinity(&CpuSet::single(a)).map_err(|e| e.to_string())?;
        let gap = Duration::from_micros(20);
        let start = Instant::now();
        let mut last = start;
        let mut run_start = start;
        let mut runs = Vec::new();
        while last.duration_since(start) < span {
            let now = Instant::now();
            if now.duration_since(last) > gap {
                runs.push(last.duration_since(run_start).as_nanos() as f64);
                run_start = now;
            }
            last = now;
        }
        Ok(runs)
    };
    let other = std::thread::spawn(spin);
    let mine = spin()?;
    let theirs = other
        .join()
        .map_err(|_| "the spinning thread panicked".to_string())??;
    // The first run of each began before the other thread was there.
    let runs: Vec<f64> = mine
        .into_iter()
        .skip(1)
        .chain(theirs.into_iter().skip(1))
        .collect();
    if runs.len() < 3 {
        return Err(format!(
            "too few switches between two spinning threads on CPU {a} in {span:?}"
        ));
    }
    Ok(median(runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_visits_every_line_once_per_lap() {
        let c = Chain::new(64 * 100, 9);
        let mut seen = std::collections::BTreeSet::new();
        let mut i = 0;
        for _ in 0..100 {
            assert!(seen.insert(i), "line {} twice", i / 8);
            i = c.next[i];
        }
        assert_eq!(i, 0, "a cycle through all 100 lines");
    }
}
