//! A slab: values in the slots of a `Vec`, named by their ids through an
//! ordered index, and by their slot once looked up.
//!
//! ```text
//!   index: BTreeMap<id, Slot>      id order: every walk is deterministic
//!   slots: [ (id, value) | free | (id, value) | … ]   Slot = position
//!   free:  slots to reuse, last freed first
//! ```
//!
//! The engine's hot path looks an id up once (the task of an event, the
//! group of a DF) and follows slots from there — a task's group, a group's
//! members — at the cost of an index into a `Vec` rather than a walk down a
//! tree.
//!
//! Invariants: `index` maps every live id to the slot holding it, and
//! nothing else; a free slot is in `free` exactly once. Slots are reused
//! in a fixed order (last freed first), so the same operations give the
//! same slots: two slabs built alike compare equal.

use std::collections::BTreeMap;
use std::marker::PhantomData;

/// The position of a value in a [`Slab`] keyed by `K`; valid while the
/// value lives.
#[derive(Debug)]
pub(crate) struct Slot<K> {
    /// Index into `Slab::slots`.
    at: u32,
    /// The id type, so a task's slot is never used for a group.
    key: PhantomData<fn() -> K>,
}

impl<K> Clone for Slot<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Slot<K> {}

impl<K> PartialEq for Slot<K> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl<K> Eq for Slot<K> {}

impl<K> Slot<K> {
    #[inline]
    fn new(at: usize) -> Slot<K> {
        Slot {
            at: u32::try_from(at).expect("fewer than 2^32 live entries"),
            key: PhantomData,
        }
    }

    #[inline]
    fn at(self) -> usize {
        self.at as usize
    }
}

/// Values by id, in reusable slots. See the module doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slab<K: Ord + Copy, V> {
    /// Live id → its slot, in id order.
    index: BTreeMap<K, Slot<K>>,
    /// `Some((id, value))` for a live slot, `None` for a free one.
    slots: Vec<Option<(K, V)>>,
    /// Free slots; the last is reused first.
    free: Vec<Slot<K>>,
}

impl<K: Ord + Copy, V> Default for Slab<K, V> {
    fn default() -> Self {
        Slab {
            index: BTreeMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<K: Ord + Copy, V> Slab<K, V> {
    /// The slot of `id`, if it lives.
    #[inline]
    pub(crate) fn slot(&self, id: &K) -> Option<Slot<K>> {
        self.index.get(id).copied()
    }

    /// The value of `id`, if it lives.
    #[inline]
    pub(crate) fn get(&self, id: &K) -> Option<&V> {
        self.slot(id).map(|s| &self[s])
    }

    /// Whether `id` lives.
    #[inline]
    pub(crate) fn contains(&self, id: &K) -> bool {
        self.index.contains_key(id)
    }

    /// The id of the value in `slot`.
    #[inline]
    pub(crate) fn id(&self, slot: Slot<K>) -> K {
        self.entry(slot).0
    }

    #[inline]
    fn entry(&self, slot: Slot<K>) -> &(K, V) {
        self.slots[slot.at()]
            .as_ref()
            .expect("a slot is used only while its value lives")
    }

    /// Adds `value` under `id`, which must not live yet; returns its slot.
    pub(crate) fn insert(&mut self, id: K, value: V) -> Slot<K> {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s.at()] = Some((id, value));
                s
            }
            None => {
                self.slots.push(Some((id, value)));
                Slot::new(self.slots.len() - 1)
            }
        };
        let old = self.index.insert(id, slot);
        debug_assert!(old.is_none(), "an id lives once");
        slot
    }

    /// Removes the value in `slot` and returns it.
    pub(crate) fn remove(&mut self, slot: Slot<K>) -> V {
        let (id, value) = self.slots[slot.at()]
            .take()
            .expect("a removed slot was live");
        self.index.remove(&id);
        self.free.push(slot);
        value
    }

    /// Every live `(id, slot, value)`, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, Slot<K>, &V)> + Clone + '_ {
        self.index.iter().map(|(&id, &s)| (id, s, &self[s]))
    }

    /// Every live id with its slot, in id order.
    pub(crate) fn slots(&self) -> impl Iterator<Item = (K, Slot<K>)> + '_ {
        self.index.iter().map(|(&id, &s)| (id, s))
    }

    /// Checks the invariants; for `State::check`.
    pub(crate) fn check(&self) -> Result<(), String> {
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        if live != self.index.len() || live + self.free.len() != self.slots.len() {
            return Err(format!(
                "slab: {live} live slots, {} indexed, {} free of {}",
                self.index.len(),
                self.free.len(),
                self.slots.len()
            ));
        }
        for (id, s) in &self.index {
            if self.slots[s.at()].as_ref().map(|e| &e.0) != Some(id) {
                return Err("slab: an index entry names a slot without its id".into());
            }
        }
        Ok(())
    }
}

impl<K: Ord + Copy, V> std::ops::Index<Slot<K>> for Slab<K, V> {
    type Output = V;

    #[inline]
    fn index(&self, slot: Slot<K>) -> &V {
        &self.entry(slot).1
    }
}

impl<K: Ord + Copy, V> std::ops::IndexMut<Slot<K>> for Slab<K, V> {
    #[inline]
    fn index_mut(&mut self, slot: Slot<K>) -> &mut V {
        &mut self.slots[slot.at()]
            .as_mut()
            .expect("a slot is used only while its value lives")
            .1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_find_their_values_and_walks_go_in_id_order() {
        let mut s: Slab<u64, &str> = Slab::default();
        let b = s.insert(20, "b");
        let a = s.insert(10, "a");
        assert_eq!((s[a], s[b]), ("a", "b"));
        assert_eq!(s.get(&20), Some(&"b"));
        assert_eq!(s.id(a), 10);
        let order: Vec<u64> = s.iter().map(|(id, _, _)| id).collect();
        assert_eq!(order, vec![10, 20], "id order, not slot order");
        s.check().unwrap();
    }

    #[test]
    fn freed_slots_are_reused_last_freed_first_and_lookups_forget_the_id() {
        let mut s: Slab<u64, u32> = Slab::default();
        let slots: Vec<_> = (0..3).map(|i| s.insert(i, i as u32)).collect();
        assert_eq!(s.remove(slots[0]), 0);
        assert_eq!(s.remove(slots[2]), 2);
        assert!(!s.contains(&0) && s.get(&2).is_none());
        assert_eq!(s.insert(7, 70), slots[2]);
        assert_eq!(s.insert(8, 80), slots[0]);
        s[slots[1]] += 5;
        assert_eq!(s.get(&1), Some(&6));
        s.check().unwrap();
        // Built alike, equal.
        let mut t: Slab<u64, u32> = Slab::default();
        let ts: Vec<_> = (0..3).map(|i| t.insert(i, i as u32)).collect();
        t.remove(ts[0]);
        t.remove(ts[2]);
        t.insert(7, 70);
        t.insert(8, 80);
        t[ts[1]] += 5;
        assert_eq!(s, t);
    }
}
