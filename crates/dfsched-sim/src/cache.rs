//! One set-associative cache with exact LRU replacement, and the
//! classification of its misses.
//!
//! ```text
//!   line ──► set = line mod S ──► ways[set·K .. set·K+K]: tag, (stamp, dirty)
//!                                   hit  : stamp ← clock   (most recent)
//!                                   miss : fill an empty way, else the way
//!                                          with the smallest stamp (LRU)
//! ```
//!
//! Each set is a small array of ways; every use writes a fresh value of a
//! per-cache clock into the way's stamp, so the least recently used way is
//! the one with the smallest stamp. That is exact LRU at the cost of one
//! scan of `K` ways per access — no linked lists, no allocation.
//!
//! Misses are classified by what last happened to the line *in this cache*,
//! remembered in a history of lines that were here once and are gone:
//!
//! | kind | the line… |
//! |---|---|
//! | [`MissKind::Cold`] | was never here |
//! | [`MissKind::Reload`] | was evicted by data of another owner (another DF) |
//! | [`MissKind::Capacity`] | was evicted by data of the same owner (its own footprint did not fit) |
//! | [`MissKind::Coherence`] | was invalidated by another cache's write |
//!
//! An *owner* is whatever the body attributes data to — the DF in the DF
//! benchmark, the task in the closed network. "Reload" is judged from the
//! accessor's side: the evicting owner differs from the owner now asking.
//!
//! Invariants:
//! - a line is in at most one way of its set;
//! - a way is empty exactly when its stamp is 0 (the clock starts at 1);
//! - a line is in the history only while it is absent from the cache.

use crate::error::ConfigError;
use crate::hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// The largest associativity supported: a set is scanned linearly.
pub const MAX_WAYS: u32 = 64;

/// A line address: the byte address divided by the line size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LineAddr(pub u64);

/// Whose data a line is, for telling reload misses from capacity misses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Owner(pub u64);

/// The shape of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheGeometry {
    /// Number of sets (`S`); any positive number.
    pub sets: u32,
    /// Lines per set (`K`, the associativity), 1 to [`MAX_WAYS`].
    pub ways: u32,
}

impl CacheGeometry {
    /// Checks the shape.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.sets == 0 || self.ways == 0 {
            return Err(ConfigError::EmptyCache {
                sets: self.sets,
                ways: self.ways,
            });
        }
        if self.ways > MAX_WAYS {
            return Err(ConfigError::TooManyWays {
                ways: self.ways,
                max: MAX_WAYS,
            });
        }
        Ok(())
    }

    /// Capacity in lines.
    pub fn lines(&self) -> u64 {
        u64::from(self.sets) * u64::from(self.ways)
    }
}

/// Why a miss happened; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissKind {
    /// First touch by this cache.
    Cold,
    /// Evicted by another owner's data since the last use.
    Reload,
    /// Evicted by the same owner's data since the last use.
    Capacity,
    /// Invalidated by another cache's write since the last use.
    Coherence,
}

/// Misses counted by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissCounts {
    /// First touches.
    pub cold: u64,
    /// Misses on lines other owners' data evicted.
    pub reload: u64,
    /// Misses on lines the owner's own data evicted.
    pub capacity: u64,
    /// Misses on lines another cache's write invalidated.
    pub coherence: u64,
}

impl MissCounts {
    /// Counts one miss of `kind`.
    #[inline]
    pub fn add(&mut self, kind: MissKind) {
        match kind {
            MissKind::Cold => self.cold += 1,
            MissKind::Reload => self.reload += 1,
            MissKind::Capacity => self.capacity += 1,
            MissKind::Coherence => self.coherence += 1,
        }
    }

    /// All misses.
    pub fn total(&self) -> u64 {
        self.cold + self.reload + self.capacity + self.coherence
    }

    /// The misses of one kind.
    pub fn get(&self, kind: MissKind) -> u64 {
        match kind {
            MissKind::Cold => self.cold,
            MissKind::Reload => self.reload,
            MissKind::Capacity => self.capacity,
            MissKind::Coherence => self.coherence,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &MissCounts) {
        self.cold += other.cold;
        self.reload += other.reload;
        self.capacity += other.capacity;
        self.coherence += other.coherence;
    }
}

/// A cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Accesses that found the line.
    pub hits: u64,
    /// Lines filled, by the kind of miss that brought them.
    pub misses: MissCounts,
    /// Lines pushed out to make room.
    pub evictions: u64,
    /// Evictions of dirty lines (each is a write-back).
    pub writebacks: u64,
    /// Lines removed because another cache wrote them.
    pub invalidations: u64,
}

/// A line pushed out by a fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    /// The line that left.
    pub line: LineAddr,
    /// Whether it was dirty here (its eviction is a write-back).
    pub dirty: bool,
}

/// What a fill did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    /// Why the line was missing.
    pub kind: MissKind,
    /// The line evicted to make room, if the set was full.
    pub victim: Option<Victim>,
}

/// Why a line is no longer in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    /// Replaced by a line of this owner.
    Evicted { by: Owner },
    /// Removed by another cache's write.
    Invalidated,
}

/// The state of one way besides its tag: `stamp << 1 | dirty`, the clock
/// value of the last use (0: the way is empty) and whether the line was
/// written since it was filled and not yet written back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Meta(u64);

impl Meta {
    #[inline]
    fn stamp(self) -> u64 {
        self.0 >> 1
    }

    #[inline]
    fn dirty(self) -> bool {
        self.0 & 1 == 1
    }

    #[inline]
    fn is_empty(self) -> bool {
        self.stamp() == 0
    }

    #[inline]
    fn set_stamp(&mut self, stamp: u64) {
        self.0 = stamp << 1 | (self.0 & 1);
    }

    #[inline]
    fn set_dirty(&mut self, dirty: bool) {
        self.0 = (self.0 & !1) | u64::from(dirty);
    }
}

/// A set-associative cache with exact LRU replacement.
#[derive(Clone, Debug)]
pub struct SetAssocCache {
    /// Its shape.
    geometry: CacheGeometry,
    /// `sets − 1`, used as a mask when `sets` is a power of two.
    set_mask: u64,
    /// Whether `sets` is a power of two (index by mask, not by division).
    pow2: bool,
    /// The line in each way, set by set: set `s` is `tags[s·K .. s·K+K]`.
    /// Meaningless where the way is empty. Kept apart from the metadata so
    /// that a lookup scans `K` contiguous words: simulating megabyte caches,
    /// the host's own cache misses are the cost that matters.
    tags: Vec<u64>,
    /// Stamp and dirty bit of each way (same index); 16 bytes per way in
    /// all, so a thousand CPUs with megabyte caches still fit in memory.
    meta: Vec<Meta>,
    /// Use counter; the next stamp. Starts at 1 so that 0 marks empty ways.
    clock: u64,
    /// Lines that were here and left, with why. Probed, never iterated.
    history: FxHashMap<u64, Gone>,
    /// Counters.
    stats: CacheStats,
}

impl SetAssocCache {
    /// An empty cache of this shape.
    pub fn new(geometry: CacheGeometry) -> Result<Self, ConfigError> {
        geometry.validate()?;
        Ok(SetAssocCache {
            geometry,
            set_mask: u64::from(geometry.sets) - 1,
            pow2: geometry.sets.is_power_of_two(),
            tags: vec![0; geometry.lines() as usize],
            meta: vec![Meta::default(); geometry.lines() as usize],
            clock: 1,
            history: FxHashMap::default(),
            stats: CacheStats::default(),
        })
    }

    /// Its shape.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// Its counters.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// The set a line maps to.
    #[inline]
    pub fn set_of(&self, line: LineAddr) -> u32 {
        if self.pow2 {
            (line.0 & self.set_mask) as u32
        } else {
            (line.0 % u64::from(self.geometry.sets)) as u32
        }
    }

    #[inline]
    fn set_range(&self, line: LineAddr) -> std::ops::Range<usize> {
        let k = self.geometry.ways as usize;
        let start = self.set_of(line) as usize * k;
        start..start + k
    }

    #[inline]
    fn find(&self, line: LineAddr) -> Option<usize> {
        let r = self.set_range(line);
        let base = r.start;
        // Compare tags first (cheap, contiguous); an empty way may hold a
        // stale tag, so a match must also be occupied.
        self.tags[r]
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t == line.0)
            .map(|(i, _)| base + i)
            .find(|&i| !self.meta[i].is_empty())
    }

    /// Whether the line is here. Changes nothing (not even the LRU order).
    #[inline]
    pub fn contains(&self, line: LineAddr) -> bool {
        self.find(line).is_some()
    }

    /// Whether the line is here and dirty.
    #[inline]
    pub fn is_dirty(&self, line: LineAddr) -> bool {
        self.find(line).is_some_and(|i| self.meta[i].dirty())
    }

    /// Uses the line if it is here: it becomes the most recently used, and
    /// the access counts as a hit. Returns whether it was here; a miss
    /// changes nothing (call [`SetAssocCache::fill`] to bring the line in).
    #[inline]
    pub fn touch(&mut self, line: LineAddr) -> bool {
        match self.find(line) {
            Some(i) => {
                self.meta[i].set_stamp(self.clock);
                self.clock += 1;
                self.stats.hits += 1;
                true
            }
            None => false,
        }
    }

    /// Brings a line in as the most recently used, on behalf of `owner`,
    /// evicting the least recently used line of a full set, and counts the
    /// miss by kind. If the line is already here it only becomes the most
    /// recently used (no miss, no hit counted) and the result is `None`.
    pub fn fill(&mut self, line: LineAddr, owner: Owner) -> Option<Fill> {
        if let Some(i) = self.find(line) {
            self.meta[i].set_stamp(self.clock);
            self.clock += 1;
            return None;
        }
        let kind = match self.history.remove(&line.0) {
            None => MissKind::Cold,
            Some(Gone::Invalidated) => MissKind::Coherence,
            Some(Gone::Evicted { by }) if by == owner => MissKind::Capacity,
            Some(Gone::Evicted { .. }) => MissKind::Reload,
        };
        self.stats.misses.add(kind);
        let r = self.set_range(line);
        let base = r.start;
        // An empty way if any, else the least recently used one.
        let slot = base
            + self.meta[r]
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| w.stamp())
                .map(|(i, _)| i)
                .expect("a set has at least one way");
        let (old_tag, old) = (self.tags[slot], self.meta[slot]);
        let victim = (!old.is_empty()).then(|| {
            self.history.insert(old_tag, Gone::Evicted { by: owner });
            self.stats.evictions += 1;
            if old.dirty() {
                self.stats.writebacks += 1;
            }
            Victim {
                line: LineAddr(old_tag),
                dirty: old.dirty(),
            }
        });
        self.tags[slot] = line.0;
        self.meta[slot] = Meta(self.clock << 1);
        self.clock += 1;
        Some(Fill { kind, victim })
    }

    /// Marks a present line dirty; returns whether it was here.
    pub fn mark_dirty(&mut self, line: LineAddr) -> bool {
        match self.find(line) {
            Some(i) => {
                self.meta[i].set_dirty(true);
                true
            }
            None => false,
        }
    }

    /// Marks a present line clean (its data was written back or handed to
    /// another cache); returns whether it was dirty.
    pub fn clean(&mut self, line: LineAddr) -> bool {
        match self.find(line) {
            Some(i) => {
                let was = self.meta[i].dirty();
                self.meta[i].set_dirty(false);
                was
            }
            None => false,
        }
    }

    /// Removes a line because another cache wrote it. Returns `None` if it
    /// was not here, else whether it was dirty. The next miss on it is a
    /// coherence miss.
    pub fn invalidate(&mut self, line: LineAddr) -> Option<bool> {
        let i = self.find(line)?;
        let dirty = self.meta[i].dirty();
        self.meta[i] = Meta::default();
        self.history.insert(line.0, Gone::Invalidated);
        self.stats.invalidations += 1;
        Some(dirty)
    }

    /// Looks the line up for `owner` and brings it in on a miss: the whole
    /// access of a cache used on its own. Returns `None` on a hit, else the
    /// fill.
    pub fn access(&mut self, line: LineAddr, owner: Owner) -> Option<Fill> {
        if self.touch(line) {
            None
        } else {
            self.fill(line, owner)
        }
    }

    /// Every line held, with whether it is dirty, set by set (for checks).
    pub fn lines(&self) -> impl Iterator<Item = (LineAddr, bool)> + '_ {
        self.tags
            .iter()
            .zip(&self.meta)
            .filter(|(_, m)| !m.is_empty())
            .map(|(&t, m)| (LineAddr(t), m.dirty()))
    }

    /// Lines currently held.
    pub fn occupancy(&self) -> usize {
        self.meta.iter().filter(|m| !m.is_empty()).count()
    }

    /// Checks the module's invariants; returns the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let k = self.geometry.ways as usize;
        for (s, (tags, meta)) in self.tags.chunks(k).zip(self.meta.chunks(k)).enumerate() {
            let held: Vec<(u64, Meta)> = tags
                .iter()
                .copied()
                .zip(meta.iter().copied())
                .filter(|(_, m)| !m.is_empty())
                .collect();
            for (i, &(tag, m)) in held.iter().enumerate() {
                if self.set_of(LineAddr(tag)) as usize != s {
                    return Err(format!("line {tag} sits in set {s}"));
                }
                if held[i + 1..].iter().any(|&(t, _)| t == tag) {
                    return Err(format!("line {tag} is twice in set {s}"));
                }
                if self.history.contains_key(&tag) {
                    return Err(format!("line {tag} is present and in the history"));
                }
                if m.stamp() >= self.clock {
                    return Err(format!("line {tag} has a stamp from the future"));
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
    use std::collections::VecDeque;

    fn cache(sets: u32, ways: u32) -> SetAssocCache {
        SetAssocCache::new(CacheGeometry { sets, ways }).unwrap()
    }

    const A: Owner = Owner(1);
    const B: Owner = Owner(2);

    #[test]
    fn evicts_the_least_recently_used_line() {
        let mut c = cache(1, 2);
        c.access(LineAddr(1), A);
        c.access(LineAddr(2), A);
        assert!(c.touch(LineAddr(1)), "1 is now the most recent");
        let f = c.access(LineAddr(3), A).unwrap();
        assert_eq!(f.victim.map(|v| v.line), Some(LineAddr(2)));
        assert!(c.contains(LineAddr(1)) && c.contains(LineAddr(3)));
    }

    #[test]
    fn classifies_cold_reload_capacity_and_coherence_misses() {
        let mut c = cache(1, 1);
        assert_eq!(c.access(LineAddr(10), A).unwrap().kind, MissKind::Cold);
        // B's data pushes A's line out: A's next miss is a reload.
        c.access(LineAddr(20), B);
        assert_eq!(c.access(LineAddr(10), A).unwrap().kind, MissKind::Reload);
        // A's own line pushes it out: a capacity miss.
        c.access(LineAddr(11), A);
        assert_eq!(c.access(LineAddr(10), A).unwrap().kind, MissKind::Capacity);
        // Another cache's write: a coherence miss.
        assert_eq!(c.invalidate(LineAddr(10)), Some(false));
        assert_eq!(c.access(LineAddr(10), A).unwrap().kind, MissKind::Coherence);
        let m = c.stats().misses;
        assert_eq!((m.cold, m.reload, m.capacity, m.coherence), (3, 1, 1, 1));
        c.check_invariants().unwrap();
    }

    #[test]
    fn dirty_victims_are_write_backs() {
        let mut c = cache(1, 1);
        c.access(LineAddr(1), A);
        assert!(c.mark_dirty(LineAddr(1)));
        let f = c.access(LineAddr(2), A).unwrap();
        assert_eq!(
            f.victim,
            Some(Victim {
                line: LineAddr(1),
                dirty: true
            })
        );
        assert_eq!(c.stats().writebacks, 1);
    }

    #[test]
    fn non_power_of_two_sets_index_by_modulo() {
        let c = cache(6, 2);
        assert_eq!(c.set_of(LineAddr(13)), 1);
        let c = cache(8, 2);
        assert_eq!(c.set_of(LineAddr(13)), 5);
    }

    #[test]
    fn rejects_empty_and_oversized_geometries() {
        for (sets, ways) in [(0, 4), (4, 0), (4, MAX_WAYS + 1)] {
            assert!(SetAssocCache::new(CacheGeometry { sets, ways }).is_err());
        }
    }

    /// A reference LRU: one queue per set, most recent at the back.
    fn reference_hits(sets: u32, ways: u32, lines: &[u64]) -> Vec<bool> {
        let mut q: Vec<VecDeque<u64>> = vec![VecDeque::new(); sets as usize];
        lines
            .iter()
            .map(|&l| {
                let s = &mut q[(l % u64::from(sets)) as usize];
                let hit = if let Some(p) = s.iter().position(|&x| x == l) {
                    s.remove(p);
                    true
                } else {
                    if s.len() == ways as usize {
                        s.pop_front();
                    }
                    false
                };
                s.push_back(l);
                hit
            })
            .collect()
    }

    proptest! {
        #[test]
        fn matches_a_reference_lru_on_any_sequence(
            sets in 1u32..6,
            ways in 1u32..5,
            lines in proptest::collection::vec(0u64..40, 0..300),
        ) {
            let mut c = cache(sets, ways);
            let hits: Vec<bool> = lines.iter().map(|&l| c.access(LineAddr(l), A).is_none()).collect();
            prop_assert_eq!(hits, reference_hits(sets, ways, &lines));
            prop_assert!(c.check_invariants().is_ok());
            prop_assert!(c.occupancy() as u64 <= c.geometry().lines());
        }
    }
}
