//! Measures what weighing the outside load by CFS group adds to a `/proc`
//! scan: `cargo run --release -p dfsched-rt --example scan_cost [hogs]`.
//!
//! Alternates, batch by batch, the counting scan (`sample_except`: every
//! process's `stat`, and its threads' for multi-threaded ones) with the
//! weighing one (`sample_outside` + our group + `weigh`: the same, plus
//! the group files of each process with a runnable thread and our own),
//! and prints the median time per scan of each. With `hogs` (a number),
//! starts that many spinning `sh` loops, each in a session of its own, so
//! that there are runnable processes whose groups must be read. Timings
//! are this machine's, noisy, and never asserted anywhere.

use dfsched::procfs::LoadSampler;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const BATCHES: usize = 21;
const SCANS: u32 = 50;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let hogs: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of hogs"))
        .unwrap_or(0);
    let mut children: Vec<Child> = (0..hogs)
        .map(|_| {
            Command::new("setsid")
                .args(["sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .spawn()
                .expect("setsid sh")
        })
        .collect();
    let me = std::process::id();
    let mut sampler = LoadSampler::new("/proc");
    let (mut counting, mut weighing) = (Vec::new(), Vec::new());
    let mut last = (0, 0);
    for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..SCANS {
            last.0 = sampler.sample_except(|p| p == me).unwrap().len();
        }
        counting.push(t.elapsed().as_secs_f64() / f64::from(SCANS));
        let t = Instant::now();
        for _ in 0..SCANS {
            let s = sampler.sample_outside(|p| p == me).unwrap();
            let ours = sampler.group_of(s.context.unwrap(), me);
            let our_nice = sampler.nice_of(me);
            last.1 = s.weigh(&ours, our_nice, |_| false).len();
        }
        weighing.push(t.elapsed().as_secs_f64() / f64::from(SCANS));
    }
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .count();
    println!(
        "{processes} processes, {hogs} hogs; median per scan over {BATCHES} batches of {SCANS}: \
         counting {:.1} us, weighing {:.1} us ({} / {} CPUs with load)",
        median(counting) * 1e6,
        median(weighing) * 1e6,
        last.0,
        last.1
    );
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
