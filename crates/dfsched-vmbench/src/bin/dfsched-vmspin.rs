//! `dfsched-vmspin N [--cpus LIST]`: N threads named `spin-I` that spin
//! until stdin closes; with `--cpus`, pinned (all of them) to LIST first.
//! It links nothing of dfsched, so it serves as load that is not ours and
//! as an unmodified program under `dfsched run`.

use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Pins the calling thread (and so the threads it starts) to `list`.
fn pin(list: &str) -> Result<(), String> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (
            a.parse().map_err(|_| format!("bad cpulist {list}"))?,
            b.parse().map_err(|_| format!("bad cpulist {list}"))?,
        );
        for c in a..=b {
            // SAFETY: CPU_SET bounds-checks `c` against the set's size.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is us.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(format!(
            "sched_setaffinity {list}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = match args.first().and_then(|a| a.parse().ok()) {
        Some(n) => n,
        None => {
            eprintln!("usage: dfsched-vmspin N [--cpus LIST]");
            std::process::exit(2);
        }
    };
    if let Some(i) = args.iter().position(|a| a == "--cpus") {
        if let Err(e) = args
            .get(i + 1)
            .ok_or("--cpus LIST".to_string())
            .and_then(|l| pin(l))
        {
            eprintln!("dfsched-vmspin: {e}");
            std::process::exit(2);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .spawn(move || {
                    let mut x: u64 = 0;
                    // Relaxed: the flag only ends the loop.
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                })
                .expect("spawn")
        })
        .collect();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
}
