//! The coherence directory: for every cached line, which caches hold it and
//! which one, if any, holds it dirty.
//!
//! The protocol is write-invalidate (MSI-like), run by
//! [`crate::machine::Machine::access`]:
//!
//! ```text
//!   write by CPU c : every copy outside c's cache path is invalidated;
//!                    c's private cache holds the line dirty (M)
//!   read by CPU c  : if another CPU's private cache holds it dirty, that
//!                    cache hands it over (a coherence transfer) and keeps
//!                    a clean copy (M → S); otherwise the nearest cache on
//!                    c's path, or memory, supplies it
//!   dirty eviction : a write-back; the line is clean everywhere after
//! ```
//!
//! A CPU's *path* is its private cache followed by the shared caches of its
//! enclosing domains. A write leaves the writer's shared caches holding the
//! line: they are on the writer's path, and a read by another CPU sharing
//! them finds the dirty private copy first (a transfer inside the domain).
//!
//! Invariants (checked by [`crate::machine::Machine::check_coherence`]):
//! - a cache is listed as a holder exactly when it contains the line;
//! - the dirty holder, if any, is a private cache that contains the line
//!   dirty, and no cache off its CPU's path holds the line;
//! - entries with no holder are removed, so the directory only grows with
//!   the lines currently cached.

use crate::hash::FxHashMap;

/// Index of a cache in the machine's cache list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CacheIdx(pub u32);

/// The directory entry of one line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineState {
    /// Caches holding a valid copy, in no particular order. Usually one or
    /// two, so a vector beats a bitmap sized for a thousand caches.
    holders: Vec<CacheIdx>,
    /// The private cache holding the only up-to-date copy, if written since
    /// it was last written back.
    dirty: Option<CacheIdx>,
}

impl LineState {
    /// Caches holding a valid copy.
    pub fn holders(&self) -> &[CacheIdx] {
        &self.holders
    }

    /// The cache holding the line dirty, if any.
    pub fn dirty(&self) -> Option<CacheIdx> {
        self.dirty
    }
}

/// Where every cached line is.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    /// Entries of lines held by at least one cache. Probed, never iterated
    /// for a decision.
    lines: FxHashMap<u64, LineState>,
}

impl Directory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry of `line`, if any cache holds it.
    #[inline]
    pub fn get(&self, line: u64) -> Option<&LineState> {
        self.lines.get(&line)
    }

    /// The dirty holder of `line`, if any.
    #[inline]
    pub fn dirty(&self, line: u64) -> Option<CacheIdx> {
        self.lines.get(&line).and_then(|s| s.dirty)
    }

    /// Records that `cache` now holds `line`.
    #[inline]
    pub fn add_holder(&mut self, line: u64, cache: CacheIdx) {
        let e = self.lines.entry(line).or_default();
        if !e.holders.contains(&cache) {
            e.holders.push(cache);
        }
    }

    /// Records that `cache` no longer holds `line` (eviction or
    /// invalidation). If it was the dirty holder, the line is clean now.
    #[inline]
    pub fn remove_holder(&mut self, line: u64, cache: CacheIdx) {
        if let Some(e) = self.lines.get_mut(&line) {
            if let Some(p) = e.holders.iter().position(|&c| c == cache) {
                e.holders.swap_remove(p);
            }
            if e.dirty == Some(cache) {
                e.dirty = None;
            }
            if e.holders.is_empty() {
                self.lines.remove(&line);
            }
        }
    }

    /// Records that `cache` holds `line` dirty. It must be a holder.
    #[inline]
    pub fn set_dirty(&mut self, line: u64, cache: CacheIdx) {
        let e = self.lines.entry(line).or_default();
        debug_assert!(e.holders.contains(&cache), "dirty holder must hold");
        e.dirty = Some(cache);
    }

    /// Records that `line` is clean everywhere.
    #[inline]
    pub fn clear_dirty(&mut self, line: u64) {
        if let Some(e) = self.lines.get_mut(&line) {
            e.dirty = None;
        }
    }

    /// Lines held by at least one cache.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether no cache holds anything.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Every entry, sorted by line (for checks and tests; sorting makes the
    /// order independent of the hash map's).
    pub fn entries(&self) -> Vec<(u64, &LineState)> {
        let mut v: Vec<_> = self.lines.iter().map(|(&l, s)| (l, s)).collect();
        v.sort_by_key(|&(l, _)| l);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_vanish_with_their_last_holder_and_dirtiness_with_its_holder() {
        let mut d = Directory::new();
        d.add_holder(7, CacheIdx(0));
        d.add_holder(7, CacheIdx(1));
        d.add_holder(7, CacheIdx(1));
        assert_eq!(d.get(7).unwrap().holders().len(), 2);
        d.set_dirty(7, CacheIdx(1));
        d.remove_holder(7, CacheIdx(1));
        assert_eq!(d.dirty(7), None);
        d.remove_holder(7, CacheIdx(0));
        assert!(d.is_empty());
    }
}
