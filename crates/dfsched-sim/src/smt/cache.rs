//! One cache shared by the hardware contexts of an SMT core, with every
//! line tagged by the thread that brought it in, so that inter-thread
//! kick-outs (ITKO) are counted exactly.
//!
//! ```text
//!   phys line ─► set = line mod S ─► ways[set·K ..]: (tag, stamp, owner)
//!     hit : stamp ← clock
//!     miss: fill the empty or least recently used way;
//!           victim.owner ≠ filler  ⇒  ITKO (counted in the victim's super-set)
//!                                     and the line is remembered as "kicked"
//!     a later miss on a kicked line ⇒ an inter-thread miss of its owner
//! ```
//!
//! This is not [`crate::cache::SetAssocCache`]: that cache remembers *who
//! evicted* a line but not *whose* line a way holds, which ITKO needs on
//! every fill, and it keeps a history of every line ever evicted, which an
//! SMT run of millions of accesses does not need. Lines of different
//! threads never alias (the page mapping puts each thread's frames in its
//! own physical range), so a line's owner is a property of the line.
//!
//! Invariants: a line is in at most one way of its set; a way is empty
//! exactly when its stamp is 0; a line is in `kicked` only while absent.

use crate::hash::FxHashSet;

/// A thread's index in a run (the owner of lines).
pub type ThreadIx = u16;

const EMPTY: ThreadIx = ThreadIx::MAX;

/// The shape of a level of the SMT hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LevelShape {
    /// Capacity in bytes.
    pub bytes: u64,
    /// Associativity.
    pub ways: u32,
    /// Bytes per line, a power of two.
    pub line_bytes: u32,
}

impl LevelShape {
    /// Sets (`bytes / (ways · line_bytes)`).
    pub fn sets(&self) -> u32 {
        (self.bytes / (u64::from(self.ways) * u64::from(self.line_bytes))) as u32
    }

    /// Lines the whole cache holds.
    pub fn lines(&self) -> u64 {
        self.bytes / u64::from(self.line_bytes)
    }
}

/// What an access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The line was here.
    pub hit: bool,
    /// Whose line the fill evicted, when it was another thread's: an
    /// inter-thread kick-out ([`Outcome::itko`]).
    pub victim: Option<ThreadIx>,
    /// The miss was on a line another thread had kicked out.
    pub inter_thread_miss: bool,
}

impl Outcome {
    /// The fill evicted a line of another thread.
    pub fn itko(&self) -> bool {
        self.victim.is_some()
    }
}

/// Counters of one cache.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SmtCacheStats {
    /// Accesses.
    pub accesses: u64,
    /// Misses.
    pub misses: u64,
    /// Fills that evicted another thread's line.
    pub itko: u64,
    /// Misses on lines another thread had evicted.
    pub inter_thread_misses: u64,
    /// ITKO by the super-set of the evicted line.
    pub itko_by_super_set: Vec<u64>,
}

/// A set-associative, exact-LRU cache with owner-tagged lines.
#[derive(Clone, Debug)]
pub struct SmtCache {
    /// Sets, a power of two.
    sets: u32,
    /// Ways per set.
    ways: usize,
    /// `log2(line_bytes)`.
    line_shift: u32,
    /// `log2(sets per super-set)`.
    super_shift: u32,
    /// Line address in each way, set by set.
    tags: Vec<u64>,
    /// Last use (0: empty).
    stamps: Vec<u64>,
    /// The thread whose line it is.
    owners: Vec<ThreadIx>,
    /// Next stamp; starts at 1.
    clock: u64,
    /// Lines evicted by another thread and not since missed on.
    kicked: FxHashSet<u64>,
    /// Counters.
    stats: SmtCacheStats,
}

impl SmtCache {
    /// An empty cache of `shape`, cut into `super_sets` super-sets. The
    /// caller checked (see `SmtConfig::validate`) that the sets are a power
    /// of two and a multiple of `super_sets`, itself a power of two.
    pub fn new(shape: LevelShape, super_sets: u32) -> Self {
        let sets = shape.sets();
        let lines = (sets as usize) * shape.ways as usize;
        SmtCache {
            sets,
            ways: shape.ways as usize,
            line_shift: shape.line_bytes.trailing_zeros(),
            super_shift: (sets / super_sets).trailing_zeros(),
            tags: vec![0; lines],
            stamps: vec![0; lines],
            owners: vec![EMPTY; lines],
            clock: 1,
            kicked: FxHashSet::default(),
            stats: SmtCacheStats {
                itko_by_super_set: vec![0; super_sets as usize],
                ..SmtCacheStats::default()
            },
        }
    }

    /// The line of a physical byte address.
    #[inline]
    pub fn line_of(&self, paddr: u64) -> u64 {
        paddr >> self.line_shift
    }

    /// The set of a physical byte address.
    #[inline]
    pub fn set_of(&self, paddr: u64) -> u32 {
        (self.line_of(paddr) & u64::from(self.sets - 1)) as u32
    }

    /// The super-set of a byte address (the high-order bits of its set).
    #[inline]
    pub fn super_set_of(&self, addr: u64) -> usize {
        (self.set_of(addr) >> self.super_shift) as usize
    }

    /// Its counters.
    pub fn stats(&self) -> &SmtCacheStats {
        &self.stats
    }

    /// Accesses `paddr` for thread `owner`: a hit refreshes the line, a miss
    /// fills it in the least recently used way.
    #[inline]
    pub fn access(&mut self, paddr: u64, owner: ThreadIx) -> Outcome {
        let line = self.line_of(paddr);
        let set = (line & u64::from(self.sets - 1)) as usize;
        let base = set * self.ways;
        self.stats.accesses += 1;
        let clock = self.clock;
        self.clock += 1;
        let mut lru = base;
        for w in base..base + self.ways {
            if self.stamps[w] != 0 && self.tags[w] == line {
                self.stamps[w] = clock;
                return Outcome {
                    hit: true,
                    victim: None,
                    inter_thread_miss: false,
                };
            }
            if self.stamps[w] < self.stamps[lru] {
                lru = w;
            }
        }
        self.stats.misses += 1;
        let inter_thread_miss = !self.kicked.is_empty() && self.kicked.remove(&line);
        if inter_thread_miss {
            self.stats.inter_thread_misses += 1;
        }
        let victim_owner = self.owners[lru];
        let itko = self.stamps[lru] != 0 && victim_owner != owner;
        if itko {
            self.stats.itko += 1;
            self.stats.itko_by_super_set[set >> self.super_shift] += 1;
            self.kicked.insert(self.tags[lru]);
        }
        self.tags[lru] = line;
        self.stamps[lru] = clock;
        self.owners[lru] = owner;
        Outcome {
            hit: false,
            victim: itko.then_some(victim_owner),
            inter_thread_miss,
        }
    }

    /// Lines held per thread (index = thread), for checks and reports.
    pub fn occupancy(&self, threads: usize) -> Vec<u64> {
        let mut out = vec![0; threads];
        for (s, &o) in self.stamps.iter().zip(&self.owners) {
            if *s != 0 {
                out[o as usize] += 1;
            }
        }
        out
    }

    /// Checks the module's invariants; the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (s, chunk) in self.tags.chunks(self.ways).enumerate() {
            let stamps = &self.stamps[s * self.ways..(s + 1) * self.ways];
            for (i, (&t, &st)) in chunk.iter().zip(stamps).enumerate() {
                if st == 0 {
                    continue;
                }
                if (t & u64::from(self.sets - 1)) as usize != s {
                    return Err(format!("line {t:#x} sits in set {s}"));
                }
                if chunk[i + 1..]
                    .iter()
                    .zip(&stamps[i + 1..])
                    .any(|(&u, &su)| su != 0 && u == t)
                {
                    return Err(format!("line {t:#x} twice in set {s}"));
                }
                if self.kicked.contains(&t) {
                    return Err(format!("line {t:#x} present and kicked"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tiny(sets: u32, ways: u32) -> SmtCache {
        SmtCache::new(
            LevelShape {
                bytes: u64::from(sets * ways) * 64,
                ways,
                line_bytes: 64,
            },
            sets.min(2),
        )
    }

    #[test]
    fn itko_is_a_fill_that_evicts_another_threads_line() {
        let mut c = tiny(1, 2);
        let l = |n: u64| n * 64;
        assert!(!c.access(l(1), 0).itko());
        assert!(!c.access(l(2), 0).itko(), "an empty way is no kick-out");
        assert!(
            !c.access(l(3), 0).itko(),
            "evicting one's own line is not ITKO"
        );
        let o = c.access(l(4), 1);
        assert!(o.itko() && !o.hit, "thread 1 evicts thread 0's line 2");
        assert_eq!(o.victim, Some(0), "and says whose");
        let o = c.access(l(2), 0);
        assert!(
            o.inter_thread_miss && !o.itko(),
            "0 misses on its kicked line; the LRU way holds its own line 3"
        );
        c.check_invariants().unwrap();
    }

    /// The same sequence classified by brute force: a reference LRU that
    /// keeps (line, owner) per set and replays the definitions; the last
    /// item is the owner of each line kicked out, in order.
    fn reference(sets: u64, ways: usize, seq: &[(u64, u16)]) -> (u64, u64, u64, Vec<u16>) {
        let mut q: Vec<Vec<(u64, u16)>> = vec![Vec::new(); sets as usize];
        let mut kicked = std::collections::BTreeSet::new();
        let (mut misses, mut itko, mut inter) = (0, 0, 0);
        let mut victims = Vec::new();
        for &(line, owner) in seq {
            let s = &mut q[(line % sets) as usize];
            if let Some(p) = s.iter().position(|&(l, _)| l == line) {
                let e = s.remove(p);
                s.push(e);
                continue;
            }
            misses += 1;
            if kicked.remove(&line) {
                inter += 1;
            }
            if s.len() == ways {
                let (vl, vo) = s.remove(0);
                if vo != owner {
                    itko += 1;
                    victims.push(vo);
                    kicked.insert(vl);
                }
            }
            s.push((line, owner));
        }
        (misses, itko, inter, victims)
    }

    proptest! {
        #[test]
        fn counts_match_a_reference_on_any_sequence(
            sets_log in 0u32..3,
            ways in 1u32..4,
            seq in proptest::collection::vec((0u64..24, 0u16..3), 0..300),
        ) {
            let sets = 1u32 << sets_log;
            let mut c = tiny(sets, ways);
            // Each thread's lines are its own: line = n·3 + owner.
            let seq: Vec<(u64, u16)> = seq.iter().map(|&(n, o)| (n * 3 + u64::from(o), o)).collect();
            let mut victims = Vec::new();
            for &(line, o) in &seq {
                victims.extend(c.access(line * 64, o).victim);
            }
            let (m, i, x, v) = reference(u64::from(sets), ways as usize, &seq);
            prop_assert_eq!(victims, v);
            prop_assert_eq!((c.stats().misses, c.stats().itko, c.stats().inter_thread_misses), (m, i, x));
            prop_assert_eq!(c.stats().itko_by_super_set.iter().sum::<u64>(), i);
            prop_assert!(c.check_invariants().is_ok());
        }
    }
}
