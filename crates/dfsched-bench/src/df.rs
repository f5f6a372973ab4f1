//! The workload: data fragments, the access pattern, and one thread's work.
//!
//! A DF is a cache-line-aligned array of [`Line`]s of eight 8-byte words.
//! One *pass* walks the DF in address order and touches one word every
//! [`Stride`] bytes (8: every word; 64: the first word of every line), so
//! every line of the DF is touched in every pass. A write is a relaxed load
//! and a relaxed store of the value plus one (plain `mov`s on x86-64, no
//! locked read-modify-write, and no data race in Rust's sense); a read is a
//! relaxed load added to a sum that is `black_box`ed at the end.
//!
//! When another CPU wrote a line since this CPU last had it, the first
//! access to the line in a pass fetches it across caches: that transfer is
//! what placement can save. The stride sets how much work on the data each
//! transfer is amortised over: one access per line makes nearly every
//! access a transfer, one access per word leaves seven cache hits after it.
//!
//! Concurrent writers of one word lose updates; that is intended (the
//! benchmark wants store traffic, not a counter) and harmless.
//!
//! Which accesses write is decided by a [`WritePattern`]: a fixed-point
//! accumulator that writes exactly ⌊phase + n·ratio⌋ times in n accesses, so
//! every prefix of the access stream has the requested ratio to within one
//! access. Each thread starts at its own seeded phase so that at ratios
//! below 1 threads do not write the same lines in lockstep.
//!
//! DF switches (`--switch-every N`, N > 0): thread `t` works on DF
//! `(t + ⌊i / N⌋) mod dfs` in its iteration `i` (counting from 0): it starts
//! on DF `t mod dfs` and moves to the next DF, wrapping around, before
//! iterations N, 2N, 3N… With one DF there is nothing to move to and no
//! switch happens.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Eight-byte words in a cache line.
const WORDS_PER_LINE: usize = crate::params::LINE_BYTES / 8;

/// One cache line of a DF.
#[repr(C, align(64))]
pub struct Line {
    words: [AtomicU64; WORDS_PER_LINE],
}

/// A data fragment: `lines` cache lines, zeroed at creation.
pub struct Df {
    lines: Box<[Line]>,
}

impl Df {
    /// A DF of `bytes` bytes, rounded up to whole lines (at least one).
    pub fn new(bytes: usize) -> Df {
        let n = bytes.div_ceil(crate::params::LINE_BYTES).max(1);
        let lines = (0..n)
            .map(|_| Line {
                words: std::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        Df { lines }
    }

    /// Number of cache lines.
    pub fn lines(&self) -> usize {
        self.lines.len()
    }

    /// Number of 8-byte words.
    pub fn words(&self) -> usize {
        self.lines.len() * WORDS_PER_LINE
    }

    /// Sum of all words: the number of writes that were not lost.
    pub fn total(&self) -> u64 {
        self.lines
            .iter()
            .flat_map(|l| &l.words)
            .map(|w| w.load(Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Read-modify-write of every word of line `i mod lines`: a relaxed load
    /// and a relaxed store of the value plus one per word (one operation of
    /// the co-thread test program, see [`crate::cothreads`]).
    #[inline]
    pub fn rmw_line(&self, i: usize) {
        let line = &self.lines[i % self.lines.len()];
        for w in &line.words {
            w.store(w.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }

    /// The address of the first line, for alignment checks.
    pub fn as_ptr(&self) -> *const Line {
        self.lines.as_ptr()
    }
}

/// Fixed-point one: the accumulator writes each time it passes this.
const ONE: u64 = 1 << 32;

/// Decides, access by access, whether to write; see the module doc.
#[derive(Clone, Debug)]
pub struct WritePattern {
    /// Fractional position in `[0, ONE)`.
    acc: u64,
    /// `ratio × ONE`, in `[0, ONE]`.
    step: u64,
}

impl WritePattern {
    /// A pattern writing a `ratio` (clamped to `[0, 1]`) of accesses,
    /// starting at a phase taken from `phase_seed`.
    pub fn new(ratio: f64, phase_seed: u64) -> WritePattern {
        let step = (ratio.clamp(0.0, 1.0) * ONE as f64).round() as u64;
        WritePattern {
            acc: mix64(phase_seed) % ONE,
            step,
        }
    }

    /// Whether the next access writes.
    #[inline(always)]
    pub fn next_is_write(&mut self) -> bool {
        self.acc += self.step;
        if self.acc >= ONE {
            self.acc -= ONE;
            true
        } else {
            false
        }
    }
}

/// How far apart the words a pass touches are: 8, 16, 32 or 64 bytes, so
/// that every line is touched the same number of times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stride {
    /// Words from one access to the next: 1, 2, 4 or 8.
    words: usize,
}

impl Stride {
    /// Every word.
    pub const WORD: Stride = Stride { words: 1 };
    /// The first word of every line.
    pub const LINE: Stride = Stride {
        words: WORDS_PER_LINE,
    };

    /// The stride of `bytes` bytes, if it is 8, 16, 32 or 64.
    pub fn from_bytes(bytes: usize) -> Option<Stride> {
        matches!(bytes, 8 | 16 | 32 | 64).then_some(Stride { words: bytes / 8 })
    }

    /// Accesses per line in one pass.
    pub fn per_line(self) -> usize {
        WORDS_PER_LINE / self.words
    }
}

/// One pass over `df` touching a word every `stride`; returns the sum of
/// the values read (not written).
#[inline]
pub fn pass(df: &Df, stride: Stride, pattern: &mut WritePattern) -> u64 {
    // One monomorphised loop per stride: the inner loop's trip count is a
    // constant, so the per-access overhead does not depend on the stride.
    match stride.words {
        1 => pass_step::<1>(df, pattern),
        2 => pass_step::<2>(df, pattern),
        4 => pass_step::<4>(df, pattern),
        _ => pass_step::<WORDS_PER_LINE>(df, pattern),
    }
}

#[inline(always)]
fn pass_step<const STEP: usize>(df: &Df, pattern: &mut WritePattern) -> u64 {
    let mut sum = 0u64;
    for line in df.lines.iter() {
        for word in line.words.iter().step_by(STEP) {
            let old = word.load(Relaxed);
            if pattern.next_is_write() {
                word.store(old.wrapping_add(1), Relaxed);
            } else {
                sum = sum.wrapping_add(old);
            }
        }
    }
    sum
}

/// The DF a thread that started on `initial` works on in iteration `i`.
pub fn df_at(initial: usize, i: u64, switch_every: u64, dfs: usize) -> usize {
    if switch_every == 0 || dfs <= 1 {
        return initial;
    }
    let moves = (i / switch_every) % dfs as u64;
    (initial + moves as usize) % dfs
}

/// What one thread's work did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkDone {
    /// DF switches made.
    pub switches: u64,
    /// The DF it was on at the end.
    pub final_df: usize,
    /// The read sum (kept so the reads cannot be optimised away).
    pub read_sum: u64,
}

/// Runs `iterations` passes at `stride` for a thread that starts on DF
/// `initial`, moving DF every `switch_every` iterations (0 = never) and
/// calling `on_switch(from, to)` before the first pass on the new DF. Stops
/// at the first error `on_switch` returns.
pub fn work<E>(
    dfs: &[Df],
    stride: Stride,
    initial: usize,
    iterations: u64,
    switch_every: u64,
    pattern: &mut WritePattern,
    mut on_switch: impl FnMut(usize, usize) -> Result<(), E>,
) -> Result<WorkDone, E> {
    let mut sum = 0u64;
    let mut switches = 0;
    let mut df = initial;
    let mut i = 0;
    while i < iterations {
        let next = df_at(initial, i, switch_every, dfs.len());
        if next != df {
            on_switch(df, next)?;
            switches += 1;
            df = next;
        }
        // Run to the next switch point without checking per pass.
        let end = match i.checked_div(switch_every) {
            None => iterations,
            Some(segment) => iterations.min((segment + 1).saturating_mul(switch_every)),
        };
        let target = &dfs[df];
        for _ in i..end {
            sum = sum.wrapping_add(pass(target, stride, pattern));
        }
        i = end;
    }
    Ok(WorkDone {
        switches,
        final_df: df,
        read_sum: black_box(sum),
    })
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn writes(ratio: f64, seed: u64, n: u64) -> u64 {
        let mut p = WritePattern::new(ratio, seed);
        (0..n).filter(|_| p.next_is_write()).count() as u64
    }

    #[test]
    fn write_pattern_gives_the_ratio_in_every_prefix() {
        for ratio in [0.0, 0.1, 0.25, 1.0 / 3.0, 0.5, 0.9, 1.0] {
            for seed in [0, 1, 77] {
                for n in [1u64, 7, 64, 1000, 12_345] {
                    let got = writes(ratio, seed, n) as f64;
                    let want = ratio * n as f64;
                    assert!(
                        (got - want).abs() <= 1.0 + 1e-6,
                        "ratio {ratio} seed {seed}: {got} writes in {n}, want {want}"
                    );
                }
            }
        }
        assert_eq!(writes(1.0, 5, 100), 100);
        assert_eq!(writes(0.0, 5, 100), 0);
    }

    #[test]
    fn rmw_line_writes_one_line_and_wraps() {
        let df = Df::new(64 * 3);
        df.rmw_line(1);
        df.rmw_line(4); // line 1 again
        assert_eq!(df.total(), 16);
        assert_eq!(df.lines[1].words[7].load(Relaxed), 2);
        assert_eq!(df.lines[0].words[0].load(Relaxed), 0);
    }

    #[test]
    fn different_threads_start_at_different_phases() {
        let first_writes = |seed| {
            let mut p = WritePattern::new(0.25, seed);
            (0..8).map(|_| p.next_is_write()).collect::<Vec<_>>()
        };
        let patterns: std::collections::BTreeSet<_> = (0..16).map(first_writes).collect();
        assert!(patterns.len() > 1, "every seed gave the same phase");
    }

    #[test]
    fn a_pass_writes_each_word_once_at_ratio_one_and_never_at_zero() {
        let df = Df::new(8192);
        assert_eq!((df.lines(), df.words()), (128, 1024));
        assert_eq!(df.as_ptr() as usize % 64, 0, "lines are cache-line aligned");
        let mut all = WritePattern::new(1.0, 3);
        for _ in 0..5 {
            assert_eq!(pass(&df, Stride::WORD, &mut all), 0, "no reads at ratio 1");
        }
        assert_eq!(df.total(), 5 * 1024);
        let mut none = WritePattern::new(0.0, 3);
        assert_eq!(
            pass(&df, Stride::WORD, &mut none),
            5 * 1024,
            "reads see the writes"
        );
        assert_eq!(df.total(), 5 * 1024);
    }

    #[test]
    fn strides_touch_every_line_the_same_number_of_times() {
        for (bytes, per_line) in [(8, 8), (16, 4), (32, 2), (64, 1)] {
            let stride = Stride::from_bytes(bytes).unwrap();
            assert_eq!(stride.per_line(), per_line);
            let df = Df::new(64 * 3);
            let mut all = WritePattern::new(1.0, 0);
            pass(&df, stride, &mut all);
            for line in df.lines.iter() {
                let touched: Vec<usize> = (0..8)
                    .filter(|&w| line.words[w].load(Relaxed) == 1)
                    .collect();
                let want: Vec<usize> = (0..8).step_by(bytes / 8).collect();
                assert_eq!(touched, want, "stride {bytes}");
            }
        }
        assert_eq!(Stride::from_bytes(64), Some(Stride::LINE));
        for bad in [0, 4, 24, 128] {
            assert_eq!(Stride::from_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn passes_write_the_requested_fraction_of_words() {
        let df = Df::new(64 * 100);
        let mut half = WritePattern::new(0.5, 9);
        for _ in 0..10 {
            pass(&df, Stride::WORD, &mut half);
        }
        // 10 passes × 800 words, half of them written.
        assert!((3999..=4001).contains(&df.total()), "{}", df.total());
    }

    #[test]
    fn switching_cycles_through_the_dfs() {
        // Thread starting on DF 1 of 3, switching every 2 iterations.
        let seq: Vec<usize> = (0..8).map(|i| df_at(1, i, 2, 3)).collect();
        assert_eq!(seq, vec![1, 1, 2, 2, 0, 0, 1, 1]);
        assert_eq!(df_at(2, 1000, 0, 3), 2, "0 = never switch");
        assert_eq!(df_at(0, 1000, 1, 1), 0, "one DF: nowhere to go");
    }

    #[test]
    fn work_switches_at_the_documented_iterations_and_does_every_pass() {
        let dfs: Vec<Df> = (0..3).map(|_| Df::new(64 * 4)).collect();
        let mut seen = Vec::new();
        let mut p = WritePattern::new(1.0, 0);
        let done = work(&dfs, Stride::WORD, 0, 10, 4, &mut p, |from, to| {
            seen.push((from, to));
            Ok::<(), Infallible>(())
        })
        .unwrap();
        // Iterations 0-3 on DF 0, 4-7 on DF 1, 8-9 on DF 2.
        assert_eq!(seen, vec![(0, 1), (1, 2)]);
        assert_eq!(done.switches, 2);
        assert_eq!(done.final_df, 2);
        let totals: Vec<u64> = dfs.iter().map(Df::total).collect();
        assert_eq!(totals, vec![128, 128, 64], "32 words × passes per DF");
    }

    #[test]
    fn work_stops_at_a_failed_switch() {
        let dfs: Vec<Df> = (0..2).map(|_| Df::new(64)).collect();
        let mut p = WritePattern::new(1.0, 0);
        let r = work(&dfs, Stride::WORD, 0, 10, 3, &mut p, |_, _| Err("no"));
        assert_eq!(r, Err("no"));
        assert_eq!(
            dfs[0].total(),
            3 * 8,
            "only the passes before the switch ran"
        );
        assert_eq!(dfs[1].total(), 0);
    }
}
