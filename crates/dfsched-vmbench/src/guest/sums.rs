//! A benchmark whose result is checked: `dfsched-vmcheck sums DFS PER_DF`, the workload the
//! sched_ext fault checks run under the scheduler (`guest/scx_faults.rs`).
//!
//! Each DF is a [`Ledger`] of numbered chunks of work. A thread of DF `d` (named `df{d}-{i}`,
//! hinted with `rt.enter(d)` as `dfsched-vmcheck workload` does) claims the next chunk number,
//! sums its elements and adds the chunk's sum to the DF's total, until the plan closes its
//! stdin; a claimed chunk is always finished. Element `k` of DF `d` is `k² + d` (wrapping), so
//! the total of chunks `0..n` has a closed form ([`expected_total`]) that does not repeat the
//! work: a chunk lost (claimed, never added) or done twice (added twice) makes the total or the
//! count differ, and [`Ledger::verify`] says which. The elements pass through
//! [`std::hint::black_box`] one by one, so the compiler cannot turn the loop into that same
//! closed form and the work is real.
//!
//! Output: one `sums df{d}: …` line per DF, then `sums verified` (exit 0) or `sums WRONG: …`
//! (exit 1), then the runtime's stats JSON as the last line. An error returned by the runtime
//! is printed and also makes the exit status 1.
//!
//! Invariant: `claimed ≥ done` at any time, and once every thread has stopped, `claimed == done`
//! for a correct run (a thread never abandons a claimed chunk).

use dfsched::{Runtime, RuntimeConfig};
use std::io::Read as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Elements in a chunk: a few milliseconds of work under TCG, so a thread reaches the end of its
/// chunk soon after the plan asks it to stop.
pub const CHUNK: u64 = 1 << 16;

/// Element `k` of DF `df`.
#[inline(always)]
fn element(df: u64, k: u64) -> u64 {
    k.wrapping_mul(k).wrapping_add(df)
}

/// The sum of chunk `chunk` of DF `df`, element by element.
pub fn chunk_sum(df: u64, chunk: u64) -> u64 {
    let start = chunk * CHUNK;
    (start..start + CHUNK).fold(0u64, |s, k| {
        s.wrapping_add(element(df, std::hint::black_box(k)))
    })
}

/// The total of chunks `0..chunks` of DF `df`, from the closed form: Σk² for k < n is
/// n(n−1)(2n−1)/6, plus n·df; modulo 2⁶⁴ as the wrapping sums are.
pub fn expected_total(df: u64, chunks: u64) -> u64 {
    let n = chunks as u128 * CHUNK as u128;
    // The divisions by 2 and 3 are exact on the factors (n(n−1) is even; 3 divides n, n−1 or
    // 2n−1), so the product can then wrap like the sums do.
    let (mut a, mut b, mut c) = (n, n.saturating_sub(1), (2 * n).saturating_sub(1));
    if a % 2 == 0 {
        a /= 2;
    } else {
        b /= 2;
    }
    if a % 3 == 0 {
        a /= 3;
    } else if b % 3 == 0 {
        b /= 3;
    } else {
        c /= 3;
    }
    let squares = (a as u64).wrapping_mul(b as u64).wrapping_mul(c as u64);
    squares.wrapping_add((n as u64).wrapping_mul(df))
}

/// One DF's account of its work.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The next chunk number to claim (so chunks `0..claimed` were handed out).
    claimed: AtomicU64,
    /// Chunks whose sum was added.
    done: AtomicU64,
    /// The sum of the chunk sums added (wrapping).
    total: AtomicU64,
}

impl Ledger {
    /// Claims the next chunk: its number.
    pub fn claim(&self) -> u64 {
        // Relaxed: the counter only hands out distinct numbers; the results are read after the
        // threads are joined, which orders everything.
        self.claimed.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds a finished chunk's sum.
    pub fn add(&self, sum: u64) {
        self.total.fetch_add(sum, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Chunks finished so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Once every thread of DF `df` has stopped: `Ok` (what was verified) if every chunk handed
    /// out was added exactly once, with the right sum.
    pub fn verify(&self, df: u64) -> Result<String, String> {
        let claimed = self.claimed.load(Ordering::Relaxed);
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let expected = expected_total(df, claimed);
        let seen = format!(
            "df{df}: {done} chunks of {claimed} claimed, total {total:#x}, expected {expected:#x}"
        );
        if claimed == 0 {
            return Err(format!("{seen}: no work done"));
        }
        if done != claimed || total != expected {
            return Err(seen);
        }
        Ok(seen)
    }
}

/// `dfsched-vmcheck sums DFS PER_DF`: see the module doc. The exit status.
pub fn sums_main(dfs: u64, per_df: usize) -> i32 {
    let config = RuntimeConfig {
        agent: dfsched::agent::AgentMode::Off,
        ..RuntimeConfig::default()
    };
    let rt = match Runtime::start(config) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sums: Runtime::start: {e}");
            return 1;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let ledgers: Vec<Arc<Ledger>> = (0..dfs).map(|_| Arc::default()).collect();
    let mut workers = Vec::new();
    for df in 1..=dfs {
        for i in 0..per_df {
            let (rt, stop, errors) = (rt.clone(), stop.clone(), errors.clone());
            let ledger = ledgers[(df - 1) as usize].clone();
            let w = std::thread::Builder::new()
                .name(format!("df{df}-{i}"))
                .spawn(move || {
                    // Relaxed: the flag only ends the loop; the ledger is read after the join.
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = rt.enter(df) {
                            eprintln!("sums: df{df}-{i}: enter: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let chunk = ledger.claim();
                        ledger.add(chunk_sum(df, chunk));
                    }
                    if let Err(e) = rt.leave() {
                        eprintln!("sums: df{df}-{i}: leave: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .expect("spawn a worker");
            workers.push(w);
        }
    }
    // Runs until the plan closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let mut wrong = Vec::new();
    for (i, l) in ledgers.iter().enumerate() {
        match l.verify(i as u64 + 1) {
            Ok(s) => println!("sums {s}"),
            Err(s) => {
                println!("sums {s}");
                wrong.push(s);
            }
        }
    }
    if wrong.is_empty() {
        println!("sums verified");
    } else {
        println!("sums WRONG: {}", wrong.join("; "));
    }
    println!("{}", rt.stats_json());
    rt.shutdown();
    if wrong.is_empty() && errors.load(Ordering::Relaxed) == 0 {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_form_is_the_sum_of_the_chunks() {
        for df in [1, 2, 7] {
            let mut s = 0u64;
            for c in 0..5 {
                assert_eq!(expected_total(df, c), s, "df {df}, {c} chunks");
                s = s.wrapping_add(chunk_sum(df, c));
            }
        }
        assert_eq!(expected_total(3, 0), 0);
    }

    #[test]
    fn the_closed_form_wraps_as_the_sums_do() {
        // Far enough that Σk² passes 2⁶⁴ (n ≈ 2²² already does): the wrapping chunk sums and
        // the truncated closed form still agree.
        let (df, c) = (1, 100);
        let before = expected_total(df, c);
        let after = expected_total(df, c + 1);
        assert_eq!(after, before.wrapping_add(chunk_sum(df, c)));
        assert!((c as u128 * CHUNK as u128).pow(3) / 3 > u64::MAX as u128);
    }

    /// A ledger after chunks `0..n` were each added once, by several threads.
    fn honest(df: u64, n: u64) -> Ledger {
        let l = Ledger::default();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| loop {
                    let c = l.claim();
                    if c >= n {
                        // Unclaim past the end: only for building the test's premise.
                        l.claimed.fetch_sub(1, Ordering::Relaxed);
                        return;
                    }
                    l.add(chunk_sum(df, c));
                });
            }
        });
        l
    }

    #[test]
    fn every_chunk_added_once_verifies() {
        let l = honest(2, 9);
        assert_eq!((l.claimed.load(Ordering::Relaxed), l.done()), (9, 9));
        let ok = l.verify(2).expect("an honest run verifies");
        assert!(ok.contains("9 chunks of 9"), "{ok}");
    }

    #[test]
    fn a_lost_chunk_fails_the_verification() {
        // Claimed, never added: a thread that stopped mid-chunk.
        let l = honest(1, 6);
        l.claim();
        assert!(l.verify(1).is_err());
        // Added as done but its sum lost.
        let l = honest(1, 6);
        l.claim();
        l.add(0);
        assert!(l.verify(1).is_err());
    }

    #[test]
    fn a_chunk_done_twice_fails_the_verification() {
        let l = honest(1, 6);
        l.add(chunk_sum(1, 3));
        let e = l.verify(1).unwrap_err();
        assert!(e.contains("7 chunks of 6"), "{e}");
        // Twice with the count right but the sum of another chunk: the total differs.
        let l = honest(1, 6);
        l.total.fetch_add(chunk_sum(1, 2), Ordering::Relaxed);
        assert!(l.verify(1).is_err());
    }

    #[test]
    fn the_wrong_df_fails_the_verification() {
        // Chunks summed as another DF's: the element's `+ d` term catches a mix-up of ledgers.
        let l = honest(1, 4);
        assert!(l.verify(2).is_err());
    }

    #[test]
    fn no_work_is_not_a_verified_run() {
        assert!(Ledger::default().verify(1).is_err());
    }
}
