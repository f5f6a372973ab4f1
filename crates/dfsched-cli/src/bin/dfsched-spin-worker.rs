//! `dfsched-spin-worker`: one process of `dfsched bench spin`, the
//! never-worse benchmark. THREADS threads each do CPU-bound work on data
//! of their own and nothing else: nothing is shared between them, so no
//! placement can win anything, and dfsched must not lose anything.
//!
//! **Why a binary of its own, built from std alone.** The `dfsched` binary
//! links the runtime crate statically: its own copy of the runtime and of
//! the `pthread_create` interposer. Under `dfsched run` that binary would
//! also get `libdfsched.so` preloaded, and which copy places its threads
//! would hang on symbol resolution details (today the static interposer
//! stays inactive and passes each call on to the preloaded one, through
//! `dlsym(RTLD_NEXT)`). This program holds no dfsched code at all, so under
//! `dfsched run` the preloaded library is the one and only runtime, exactly
//! as for any unmodified program; `tests/bench_spin.rs` checks that the
//! file holds none of the runtime's code and that one balancer runs.
//!
//! **An operation** is one step of a thread's xorshift64 stream folded into
//! its private, cache-line-aligned 4 KiB buffer (add and rotate into the
//! word the step selects). The buffer goes through `black_box` after every
//! batch of steps and is summed into a checksum at the end, so the work
//! cannot be optimised away.
//!
//! **Protocol** (stdin and stdout, one line each, as `bench cothreads`):
//!
//! ```text
//!  worker                               parent
//!  ──────                               ──────
//!  spawn threads; each allocates its
//!  buffer and arrives at the gate
//!  all arrived: print "ready" ────────► waits for every worker's "ready"
//!  wait for a line ◄─────────────────── "go" (to every worker in turn)
//!  open the gate; work for --seconds
//!  (or, with --until-eof, until stdin
//!  ends); stop; join
//!  print one JSON line ───────────────► {"ops":[..],"elapsed_s":..,
//!                                        "checksum":..,"cpus":[..],
//!                                        "under_dfsched":..,"foreign_threads":[..]}
//! ```
//!
//! Anything but "go" sends the threads home without work and ends the
//! worker with status 1, so a parent that died leaves nothing spinning.
//! `cpus` is each thread's `Cpus_allowed_list` read by the thread itself
//! when it stops (where dfsched had put it); `under_dfsched` says whether
//! `DFSCHED_PRELOAD` asked for the preloaded runtime and `libdfsched` is
//! mapped; `foreign_threads` names the threads that are not the worker's
//! own (a preloaded runtime's balancer).
//!
//! Exit status: 0 done; 1 failed (a thread could not be created, no "go",
//! the parent's pipe closed); 2 bad arguments.

use std::hint::black_box;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// Words in a thread's private buffer: 4 KiB.
const BUFFER_WORDS: usize = 512;
/// Steps a thread takes between looks at the stop flag (a few µs).
const OPS_PER_CHECK: u64 = 1024;
/// At most this many threads.
const MAX_THREADS: usize = 4096;
/// At most this many seconds.
const MAX_SECONDS: f64 = 3600.0;

const USAGE: &str = "usage: dfsched-spin-worker --threads N (--seconds S | --until-eof)\n\
(one process of `dfsched bench spin`; it speaks a ready/go protocol on stdin/stdout)";

/// A thread's private data: one page, aligned so that no line of it is
/// shared with anything else.
#[repr(align(64))]
struct Private([u64; BUFFER_WORDS]);

/// When the threads stop.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Until {
    /// After this many seconds.
    Seconds(f64),
    /// When stdin ends (the background load of `bench spin`).
    Eof,
}

/// The command line.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Args {
    threads: usize,
    until: Until,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut threads = None;
    let mut until = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--threads" => {
                let v = value("--threads")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--threads {v:?} is not a number"))?;
                if !(1..=MAX_THREADS).contains(&n) {
                    return Err(format!("--threads {n} is not between 1 and {MAX_THREADS}"));
                }
                threads = Some(n);
            }
            "--seconds" => {
                let v = value("--seconds")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--seconds {v:?} is not a number"))?;
                if !(s > 0.0 && s <= MAX_SECONDS) {
                    return Err(format!(
                        "--seconds {s} is not above 0 and at most {MAX_SECONDS}"
                    ));
                }
                if until.replace(Until::Seconds(s)).is_some() {
                    return Err("give one of --seconds and --until-eof".into());
                }
            }
            "--until-eof" => {
                if until.replace(Until::Eof).is_some() {
                    return Err("give one of --seconds and --until-eof".into());
                }
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(Args {
        threads: threads.ok_or("--threads is required")?,
        until: until.ok_or("one of --seconds and --until-eof is required")?,
    })
}

/// What a thread hands back.
struct ThreadResult {
    ops: u64,
    checksum: u64,
    cpus: String,
}

/// A thread's work until `stop`: xorshift64 steps folded into its own
/// buffer. Returns the operations done and the buffer's checksum.
fn spin(stop: &AtomicBool, buf: &mut Private, seed: u64) -> (u64, u64) {
    // xorshift64 must not start at 0 (it would stay there).
    let mut x = seed | 1;
    let mut ops = 0u64;
    // Relaxed: the flag only has to be seen eventually; the join publishes
    // the count.
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..OPS_PER_CHECK {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let w = &mut buf.0[(x as usize) % BUFFER_WORDS];
            *w = w.wrapping_add(x).rotate_left(7);
        }
        ops += OPS_PER_CHECK;
        // The buffer escapes: its stores must happen.
        black_box(&mut *buf);
    }
    let checksum = buf.0.iter().fold(0u64, |a, &w| a.rotate_left(1) ^ w);
    (ops, checksum)
}

/// The calling thread's `Cpus_allowed_list`, or "?" if `/proc` cannot say.
fn own_cpus() -> String {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// Whether the preloaded dfsched runtime was asked for and is loaded.
fn under_dfsched() -> bool {
    let asked = std::env::var("DFSCHED_PRELOAD")
        .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
    let mapped = std::fs::read_to_string("/proc/self/maps").is_ok_and(|m| m.contains("libdfsched"));
    asked && mapped
}

/// Names of this process's threads that are not the worker's own (its
/// main thread and its `spin-N` threads): those a preloaded runtime
/// started. Kept free of any dfsched thread name, so that this file holds
/// none of the runtime's strings (a test looks for them).
fn foreign_threads() -> Vec<String> {
    let pid = std::process::id().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut names: Vec<String> = tasks
        .flatten()
        .filter(|t| t.file_name().to_str() != Some(pid.as_str()))
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .filter(|c| !c.starts_with("spin-"))
        .collect();
    names.sort();
    names
}

/// Runs the worker (see the module doc) with `input` and `output` as its
/// stdin and stdout.
fn run(args: Args, mut input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    let stop = AtomicBool::new(false);
    let go = AtomicBool::new(false);
    // Every thread and the main thread: all arrived, then the decision.
    let arrived = Barrier::new(args.threads + 1);
    let decided = Barrier::new(args.threads + 1);
    let pid = u64::from(std::process::id());
    thread::scope(|s| {
        let mut handles = Vec::with_capacity(args.threads);
        for t in 0..args.threads {
            let (stop, go, arrived, decided) = (&stop, &go, &arrived, &decided);
            let h = thread::Builder::new()
                .name(format!("spin-{t}"))
                .spawn_scoped(s, move || {
                    // Allocated (and first touched) by the thread itself, so
                    // it is its own and local to where it starts.
                    let mut buf = Box::new(Private([0; BUFFER_WORDS]));
                    arrived.wait();
                    decided.wait();
                    // Acquire/Release not needed: the barrier orders the
                    // decision before this load.
                    if !go.load(Ordering::Relaxed) {
                        return None;
                    }
                    let seed = (pid << 32) ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let (ops, checksum) = spin(stop, &mut buf, seed);
                    Some(ThreadResult {
                        ops,
                        checksum,
                        cpus: own_cpus(),
                    })
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The threads started wait at a barrier that can no
                    // longer fill: end the process, which ends them.
                    eprintln!("dfsched-spin-worker: could not start thread {t}: {e}");
                    std::process::exit(1);
                }
            }
        }
        arrived.wait();
        let mut line = String::new();
        let told = writeln!(output, "ready")
            .and_then(|()| output.flush())
            .is_ok()
            && input.read_line(&mut line).is_ok()
            && line.trim() == "go";
        go.store(told, Ordering::Relaxed);
        decided.wait();
        let start = Instant::now();
        if told {
            match args.until {
                Until::Seconds(s) => thread::sleep(Duration::from_secs_f64(s)),
                Until::Eof => {
                    // Anything read before the end is ignored.
                    let mut sink = Vec::new();
                    let _ = input.read_to_end(&mut sink);
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let elapsed_s = start.elapsed().as_secs_f64();
        let results: Vec<Option<ThreadResult>> = handles
            .into_iter()
            .map(|h| h.join().expect("a spin thread does not panic"))
            .collect();
        if !told {
            return Err("not told to go (the parent ended or said something else)".into());
        }
        let results: Vec<ThreadResult> = results.into_iter().flatten().collect();
        let list = |f: &dyn Fn(&ThreadResult) -> String| {
            results.iter().map(f).collect::<Vec<_>>().join(",")
        };
        let checksum = results.iter().fold(0u64, |a, r| a ^ r.checksum);
        let foreign: Vec<String> = foreign_threads()
            .iter()
            .map(|n| format!("\"{}\"", json_escape(n)))
            .collect();
        let line = format!(
            "{{\"ops\":[{}],\"elapsed_s\":{elapsed_s},\"checksum\":{checksum},\"cpus\":[{}],\
             \"under_dfsched\":{},\"foreign_threads\":[{}]}}",
            list(&|r| r.ops.to_string()),
            list(&|r| format!("\"{}\"", json_escape(&r.cpus))),
            under_dfsched(),
            foreign.join(",")
        );
        writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(|e| format!("writing the result: {e}"))
    })
}

/// `s` as the inside of a JSON string (thread names are the program's
/// choice and may hold anything).
fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dfsched-spin-worker: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    if let Err(e) = run(args, stdin, stdout) {
        eprintln!("dfsched-spin-worker: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments_are_checked_naming_the_flag() {
        assert_eq!(
            args(&["--threads", "3", "--seconds", "0.5"]),
            Ok(Args {
                threads: 3,
                until: Until::Seconds(0.5)
            })
        );
        assert_eq!(
            args(&["--until-eof", "--threads", "1"]).unwrap().until,
            Until::Eof
        );
        for (bad, needle) in [
            (&["--threads", "0", "--seconds", "1"][..], "--threads 0"),
            (&["--threads", "x", "--seconds", "1"], "--threads \"x\""),
            (&["--threads", "2"], "--until-eof is required"),
            (&["--seconds", "1"], "--threads is required"),
            (&["--threads", "2", "--seconds", "0"], "--seconds 0"),
            (
                &["--threads", "2", "--seconds", "1", "--until-eof"],
                "one of",
            ),
            (&["--threads", "2", "--seconds"], "needs a value"),
            (&["--threads", "2", "--fast"], "\"--fast\""),
        ] {
            let e = args(bad).expect_err(&format!("{bad:?} accepted"));
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
    }

    #[test]
    fn every_thread_works_after_go_and_reports() {
        let mut out = Vec::new();
        let a = Args {
            threads: 3,
            until: Until::Seconds(0.05),
        };
        run(a, &b"go\n"[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("ready"));
        let result = lines.next().expect("a result line");
        let ops = result
            .strip_prefix("{\"ops\":[")
            .and_then(|r| r.split(']').next())
            .expect("ops first");
        let ops: Vec<u64> = ops.split(',').map(|n| n.parse().unwrap()).collect();
        assert_eq!(ops.len(), 3);
        assert!(ops.iter().all(|&n| n > 0), "a thread did nothing: {result}");
        // (The test harness's own threads are foreign here; the binary's
        // tests in tests/bench_spin.rs see none.)
        assert!(result.contains("\"under_dfsched\":false"), "{result}");
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn until_eof_works_until_input_ends() {
        let mut out = Vec::new();
        let a = Args {
            threads: 2,
            until: Until::Eof,
        };
        run(a, &b"go\nanything\n"[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("ready\n{\"ops\":["), "{text}");
    }

    #[test]
    fn without_go_no_thread_works_and_the_worker_fails() {
        for input in [&b""[..], b"stop\n"] {
            let mut out = Vec::new();
            let a = Args {
                threads: 2,
                until: Until::Seconds(5.0),
            };
            let e = run(a, input, &mut out).unwrap_err();
            assert!(e.contains("not told to go"), "{e}");
            assert_eq!(String::from_utf8(out).unwrap(), "ready\n");
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_escape("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
    }

    #[test]
    fn spin_does_work_and_stops_when_told() {
        let stop = AtomicBool::new(false);
        let mut buf = Box::new(Private([0; BUFFER_WORDS]));
        let (ops, checksum) = thread::scope(|s| {
            let h = s.spawn(|| spin(&stop, &mut buf, 7));
            thread::sleep(Duration::from_millis(20));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap()
        });
        assert!(ops >= OPS_PER_CHECK);
        assert_ne!(checksum, 0, "the buffer was written");
    }
}
