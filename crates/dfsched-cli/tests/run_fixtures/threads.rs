//! A Rust test program for `dfsched run` (crates/dfsched-cli/tests/run.rs),
//! compiled by the test with rustc: `threads N` starts N std threads that
//! spin; prints "pid P", one "tid T" per thread, "ready0"; runs until stdin
//! closes, then exits 0. It uses no crate, only std (and the raw gettid
//! system call through an extern declaration of libc's `syscall`).
//!
//! `threads spawn`: no thread of its own (its lone main thread is the one
//! dfsched places, on one CPU under co-thread); prints "parent-mask
//! <cpulist>", runs this program as `threads mask command-mask` with
//! `std::process::Command` (`DFSCHED_POLICY=none`, so the child prints the
//! mask it was created with), copies its output, prints "parent-mask
//! <cpulist>" again, exits 0. `threads mask T` prints "T <cpulist>".

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

extern "C" {
    fn syscall(n: i64, ...) -> i64;
}

/// `SYS_gettid` on x86-64 and aarch64.
#[cfg(target_arch = "x86_64")]
const SYS_GETTID: i64 = 186;
#[cfg(target_arch = "aarch64")]
const SYS_GETTID: i64 = 178;

/// The calling thread's `Cpus_allowed_list`.
fn mask() -> String {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// `threads spawn` (see the module doc).
fn spawn() {
    println!("parent-mask {}", mask());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["mask", "command-mask"])
        .env("DFSCHED_POLICY", "none")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    print!("{}", String::from_utf8(out.stdout).unwrap());
    println!("parent-mask {}", mask());
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("spawn") => return spawn(),
        Some("mask") => {
            let tag = std::env::args().nth(2).unwrap_or_else(|| "mask".into());
            println!("{tag} {}", mask());
            return;
        }
        _ => {}
    }
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = |out: &Mutex<std::io::Stdout>, line: String| {
        let mut o = out.lock().unwrap();
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    say(&out, format!("pid {}", std::process::id()));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (stop, started, out) = (stop.clone(), started.clone(), out.clone());
            std::thread::spawn(move || {
                // SAFETY: gettid takes no arguments and cannot fail.
                let tid = unsafe { syscall(SYS_GETTID) };
                say(&out, format!("tid {tid}"));
                started.fetch_add(1, Ordering::SeqCst);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    while started.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
    say(&out, "ready0".to_string());
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}
