//! What a balancer pass costs beside threads that are not ours:
//! `cargo run --release -p dfsched-rt --example pass_cost [sleepers] [seconds]`.
//!
//! Starts a child process (this example again) holding `sleepers` sleeping
//! threads (default 2000), then a runtime of its own sampling the outside
//! load itself (agent off, the default 100 ms interval) with 4 threads that
//! hint 2 DFs a few times a second, and after `seconds` (default 10)
//! prints `balance_cpu_ns / engine.balance_passes` and the files its outside
//! samples opened per pass. A quick look, not the benchmark (that is
//! `dfsched bench overhead`): timings are this machine's, noisy, and never
//! asserted anywhere.

use dfsched::agent::AgentMode;
use dfsched::{Runtime, RuntimeConfig};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--sleepers-child") {
        let n: usize = args.next().unwrap().parse().unwrap();
        sleepers_child(n);
        return;
    }
    let sleepers: usize = first.map_or(2000, |s| s.parse().expect("a number of sleepers"));
    let seconds: u64 = args.next().map_or(10, |s| s.parse().expect("seconds"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--sleepers-child", &sleepers.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let rt = Runtime::start(RuntimeConfig {
        agent: AgentMode::Off,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let app = rt.create_app().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4u64)
        .map(|i| {
            let (rt, stop) = (rt.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                rt.attach().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    // Each thread works on DF i mod 2: two groups of two.
                    let _ = rt.hint(app, i % 2, i % 2);
                    // A little work, then a rest: a hinting program.
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_millis(2) {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let s = rt.stats();
    rt.shutdown();
    drop(child.stdin.take());
    let mut rest = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut rest);
    let _ = child.wait();
    let passes = s.engine.balance_passes.max(1);
    println!(
        "sleepers {sleepers}: {} passes, {:.0} us CPU a pass, {} outside samples",
        s.engine.balance_passes,
        s.balance_cpu_ns as f64 / passes as f64 / 1000.0,
        s.external_load_own_scans,
    );
    let stats = serde_json::to_value(&s).unwrap();
    if let Some(recent) = stats["recent_pass_cpu_ns"]["cpu_ns"].as_array() {
        let mut v: Vec<u64> = recent.iter().filter_map(|x| x.as_u64()).collect();
        v.sort_unstable();
        if !v.is_empty() {
            println!(
                "  per pass: median {} us, p90 {} us, max {} us ({} passes)",
                v[v.len() / 2] / 1000,
                v[v.len() * 9 / 10] / 1000,
                v[v.len() - 1] / 1000,
                v.len()
            );
        }
    }
    if let Some(files) = stats.get("external_files_read").and_then(|v| v.as_u64()) {
        println!(
            "  {:.1} files a pass, {} refreshes",
            files as f64 / passes as f64,
            stats["external_refreshes"]
        );
    }
}

/// Holds `n` sleeping threads until stdin ends.
fn sleepers_child(n: usize) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let _ = rx.lock().map(|r| r.recv());
                })
                .unwrap()
        })
        .collect();
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(tx);
    for t in threads {
        let _ = t.join();
    }
}
