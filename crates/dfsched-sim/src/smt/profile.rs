//! Per-thread activity profiles from Valgrind (Kihm et al. §4.2: the Linux
//! prototype's vectors came from offline Valgrind profiles, one per 50 M
//! instructions): `valgrind --tool=lackey --trace-mem=yes
//! --trace-sched=yes PROG` text in, a [`SmtProfile`] out.
//!
//! Lackey's records carry no thread; `--trace-sched=yes` adds Valgrind's
//! scheduler lines, and `SCHED[n]:  acquired lock (…)` says that thread
//! slot `n` runs the records that follow. A slot whose acquisition reads
//! `starting new thread` is a new thread (Valgrind reuses the slots of
//! threads that exited), numbered in creation order: the main thread is 0.
//! Records before any scheduler line belong to the main thread.
//!
//! Each thread's intervals are `interval` of its own instructions. In an
//! interval, a super-set's counter counts the distinct lines the thread
//! touches there (its footprint; not every access: over 50 M instructions
//! every super-set of a busy thread would saturate), and a super-set is hot
//! when that footprint reaches the lines the super-set holds
//! (`Threshold::Absolute`, the simulator's default rule: the thread alone
//! would fill the region). The super-set of an address is the high-order
//! bits of its set index in the modelled cache, from virtual addresses (as
//! the paper's; see `docs/kihm.md` on physical indexing).
//!
//! Pure: the CLI runs Valgrind and feeds the lines.

use super::trace::TraceError;
use dfsched_core::activity::{ActivityCounters, ActivityVector, Threshold};
use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
use std::collections::{HashMap, HashSet};

/// The cache whose super-sets a profile's vectors describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileCache {
    /// Bytes.
    pub bytes: u64,
    /// Ways.
    pub ways: u64,
    /// Line bytes.
    pub line_bytes: u64,
    /// Super-sets (divides the sets).
    pub super_sets: usize,
}

impl ProfileCache {
    fn sets(&self) -> u64 {
        self.bytes / self.ways / self.line_bytes
    }

    /// Whether the shape is usable: non-zero, sets a multiple of the
    /// super-sets.
    pub fn valid(&self) -> bool {
        self.ways > 0
            && self.line_bytes > 0
            && self.super_sets > 0
            && self.sets() > 0
            && self.sets().is_multiple_of(self.super_sets as u64)
    }

    /// Lines one super-set holds (all ways): the hot threshold.
    pub fn lines_per_super_set(&self) -> u64 {
        self.sets() / self.super_sets as u64 * self.ways
    }

    fn super_set(&self, addr: u64) -> usize {
        let set = (addr / self.line_bytes) % self.sets();
        (set / (self.sets() / self.super_sets as u64)) as usize
    }
}

#[derive(Debug)]
struct ThreadState {
    instructions: u64,
    in_interval: u64,
    counters: ActivityCounters,
    lines: HashSet<u64>,
    vectors: Vec<ActivityVector>,
}

/// Builds a profile from lackey text, one line at a time.
#[derive(Debug)]
pub struct ProfileBuilder {
    cache: ProfileCache,
    interval: u64,
    bits: u8,
    threads: Vec<ThreadState>,
    /// Valgrind thread slot → index into `threads`.
    slots: HashMap<u32, usize>,
    current: usize,
    line: u64,
}

/// Why a profile cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The cache shape does not split into the super-sets.
    #[error("the cache shape {0:?} does not split into its super-sets")]
    BadCache(ProfileCache),
    /// An interval of no instructions.
    #[error("the interval must be at least one instruction")]
    ZeroInterval,
    /// Bits outside 1..=8.
    #[error("bits must be 1 to 8, not {0}")]
    BadBits(u8),
    /// A line that is not lackey's.
    #[error(transparent)]
    Trace(#[from] TraceError),
}

impl ProfileBuilder {
    /// A builder for vectors of `bits` bits over `cache`, one per
    /// `interval` instructions of each thread.
    pub fn new(cache: ProfileCache, interval: u64, bits: u8) -> Result<Self, ProfileError> {
        if !cache.valid() {
            return Err(ProfileError::BadCache(cache));
        }
        if interval == 0 {
            return Err(ProfileError::ZeroInterval);
        }
        if !(1..=8).contains(&bits) {
            return Err(ProfileError::BadBits(bits));
        }
        let mut b = ProfileBuilder {
            cache,
            interval,
            bits,
            threads: Vec::new(),
            slots: HashMap::new(),
            current: 0,
            line: 0,
        };
        b.new_thread(1);
        Ok(b)
    }

    fn new_thread(&mut self, slot: u32) -> usize {
        self.threads.push(ThreadState {
            instructions: 0,
            in_interval: 0,
            counters: ActivityCounters::new(self.cache.super_sets),
            lines: HashSet::new(),
            vectors: Vec::new(),
        });
        let i = self.threads.len() - 1;
        self.slots.insert(slot, i);
        i
    }

    fn close(&mut self, i: usize) {
        let hot = u32::try_from(self.cache.lines_per_super_set()).unwrap_or(u32::MAX);
        let t = &mut self.threads[i];
        let v = t
            .counters
            .vector(self.bits, Threshold::Absolute { hot })
            .expect("bits checked in new");
        t.vectors.push(v);
        t.counters.clear();
        t.lines.clear();
        t.in_interval = 0;
    }

    /// Feeds one line of Valgrind's output.
    pub fn line(&mut self, text: &str) -> Result<(), ProfileError> {
        self.line += 1;
        if let Some(rest) = text.split("SCHED[").nth(1) {
            // `--1234--   SCHED[n]:  acquired lock (why)`
            let Some((n, what)) = rest.split_once(']') else {
                return Ok(());
            };
            let Ok(slot) = n.parse::<u32>() else {
                return Ok(());
            };
            if what.contains("acquired lock") {
                // The main thread's first acquisition also says "starting
                // new thread"; it already has index 0.
                let fresh = what.contains("starting new thread")
                    && !(slot == 1 && self.threads.len() == 1 && self.threads[0].instructions == 0);
                self.current = match self.slots.get(&slot) {
                    Some(&i) if !fresh => i,
                    _ => self.new_thread(slot),
                };
            }
            return Ok(());
        }
        if text.trim().is_empty() || text.starts_with("==") || text.starts_with("--") {
            return Ok(());
        }
        let bad = || TraceError::BadLine {
            line: self.line,
            text: text.to_string(),
        };
        let (kind, rest) = text.trim_start().split_at(1);
        let addr = rest
            .trim()
            .split(',')
            .next()
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
            .ok_or_else(bad)?;
        let i = self.current;
        match kind {
            "I" => {
                let t = &mut self.threads[i];
                t.instructions += 1;
                t.in_interval += 1;
                if t.in_interval == self.interval {
                    self.close(i);
                }
            }
            "L" | "S" | "M" => {
                let ss = self.cache.super_set(addr);
                let t = &mut self.threads[i];
                if t.lines.insert(addr / self.cache.line_bytes) {
                    t.counters.record(ss);
                }
            }
            _ => return Err(bad().into()),
        }
        Ok(())
    }

    /// The profile: each thread's vectors (a partial last interval closed
    /// if it holds instructions), in creation order.
    pub fn finish(mut self, command: Vec<String>, ns_per_instruction: f64) -> SmtProfile {
        for i in 0..self.threads.len() {
            if self.threads[i].in_interval > 0 {
                self.close(i);
            }
        }
        SmtProfile {
            command,
            interval_instructions: self.interval,
            ns_per_instruction,
            bits: self.bits,
            super_sets: self.cache.super_sets,
            threads: self
                .threads
                .into_iter()
                .map(|t| ThreadProfile {
                    instructions: t.instructions,
                    vectors: t.vectors,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 32 super-sets of 1 set each, 2 ways, 64-byte lines: a super-set is
    /// hot at 2 distinct lines in an interval.
    const TINY: ProfileCache = ProfileCache {
        bytes: 32 * 2 * 64,
        ways: 2,
        line_bytes: 64,
        super_sets: 32,
    };

    fn feed(b: &mut ProfileBuilder, lines: &[&str]) {
        for l in lines {
            b.line(l).unwrap();
        }
    }

    #[test]
    fn sched_lines_split_the_records_by_thread_in_creation_order() {
        let mut b = ProfileBuilder::new(TINY, 2, 1).unwrap();
        let way = 32 * 64; // one way: the next address in the same set
        let main_hot0 = [" L 0,8".to_string(), format!(" S {way:x},8")];
        let second_hot5 = [
            format!(" L {:x},8", 5 * 64),
            format!(" L {:x},8", 5 * 64 + way),
        ];
        feed(
            &mut b,
            &[
                "==1== Lackey",
                "--1--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))",
            ],
        );
        feed(
            &mut b,
            &main_hot0.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        feed(&mut b, &["I  1000,4", "I  1004,4"]);
        feed(
            &mut b,
            &["--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))"],
        );
        feed(
            &mut b,
            &second_hot5.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        feed(&mut b, &["I  2000,4"]);
        // Back to the main thread: an idle interval (one line only).
        feed(
            &mut b,
            &[
                "--1--   SCHED[1]:  acquired lock (VG_(vg_yield))",
                " L 0,8",
                "I  1008,4",
                "I  100c,4",
            ],
        );
        let p = b.finish(vec!["prog".into()], 0.5);
        assert_eq!(p.threads.len(), 2);
        assert_eq!(p.threads[0].instructions, 4);
        assert_eq!(p.threads[0].vectors.len(), 2);
        assert_eq!(p.threads[0].vectors[0], ActivityVector::from_mask(1, 32));
        assert_eq!(
            p.threads[0].vectors[1],
            ActivityVector::from_mask(0, 32),
            "one line of two: not hot"
        );
        assert_eq!(p.threads[1].instructions, 1);
        assert_eq!(
            p.threads[1].vectors,
            vec![ActivityVector::from_mask(1 << 5, 32)],
            "a partial last interval"
        );
        assert_eq!(p.interval_instructions, 2);
    }

    #[test]
    fn a_reused_slot_is_a_new_thread_and_repeated_lines_count_once() {
        let mut b = ProfileBuilder::new(TINY, 10, 1).unwrap();
        feed(&mut b, &[" L 0,8", " L 0,8", " L 0,8", "I  0,1"]);
        feed(
            &mut b,
            &[
                "--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))",
                "I  0,1",
            ],
        );
        feed(
            &mut b,
            &[
                "--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))",
                "I  0,1",
            ],
        );
        let p = b.finish(vec![], 1.0);
        assert_eq!(p.threads.len(), 3, "slot 2 reused by a third thread");
        assert_eq!(
            p.threads[0].vectors,
            vec![ActivityVector::from_mask(0, 32)],
            "one line, counted once"
        );
    }

    #[test]
    fn bad_shapes_and_lines_are_refused() {
        assert!(matches!(
            ProfileBuilder::new(
                ProfileCache {
                    super_sets: 3,
                    ..TINY
                },
                1,
                1
            ),
            Err(ProfileError::BadCache(_))
        ));
        assert_eq!(
            ProfileBuilder::new(TINY, 0, 1).unwrap_err(),
            ProfileError::ZeroInterval
        );
        assert_eq!(
            ProfileBuilder::new(TINY, 1, 9).unwrap_err(),
            ProfileError::BadBits(9)
        );
        let mut b = ProfileBuilder::new(TINY, 1, 1).unwrap();
        assert!(b.line("X 12,4").is_err());
    }
}
