//! A priority group's members: task ids in order, each with its slot.
//!
//! ```text
//!   Few(sorted Vec<(TaskId, TaskSlot)>)   up to FEW members — nearly every group
//!   Many(BTreeMap<TaskId, TaskSlot>)      more
//! ```
//!
//! A hint takes its task out of one group and puts it into another, and on
//! the runtime's hot path it does so on a CPU whose caches hold none of the
//! group (the thread just moved): every cache line and every line of code
//! it touches is a miss. A short sorted `Vec` is one or two lines of data,
//! a binary search and a `memmove`; a B-tree is a node of several lines and
//! a few hundred bytes of code and stack for each of search, insert and
//! remove. Large groups keep the tree, whose cost grows with the log of
//! their size rather than linearly.
//!
//! Invariants: ids are unique and iterate in increasing order; a group is
//! `Few` exactly when it has at most `FEW` members (one representation per
//! membership, so equal memberships compare equal).

use crate::ids::TaskId;
use crate::state::TaskSlot;
use std::collections::BTreeMap;

/// Members kept in a sorted `Vec`; beyond, a `BTreeMap`.
const FEW: usize = 64;

/// A group's members; see the module doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Members {
    /// At most `FEW` members, sorted by id.
    Few(Vec<(TaskId, TaskSlot)>),
    /// More than `FEW` members.
    Many(BTreeMap<TaskId, TaskSlot>),
}

impl Default for Members {
    fn default() -> Self {
        Members::Few(Vec::new())
    }
}

impl Members {
    /// How many members.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Members::Few(v) => v.len(),
            Members::Many(m) => m.len(),
        }
    }

    /// Whether there is none.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is a member.
    pub(crate) fn contains(&self, id: TaskId) -> bool {
        match self {
            Members::Few(v) => v.binary_search_by_key(&id, |e| e.0).is_ok(),
            Members::Many(m) => m.contains_key(&id),
        }
    }

    /// Adds `id` (in `slot`), which must not be a member yet.
    #[inline]
    pub(crate) fn insert(&mut self, id: TaskId, slot: TaskSlot) {
        match self {
            Members::Few(v) => match v.binary_search_by_key(&id, |e| e.0) {
                Ok(_) => debug_assert!(false, "{id} is a member already"),
                Err(i) if v.len() < FEW => v.insert(i, (id, slot)),
                Err(_) => self.grow(id, slot),
            },
            Members::Many(m) => {
                let old = m.insert(id, slot);
                debug_assert!(old.is_none(), "{id} is a member already");
            }
        }
    }

    /// The `FEW + 1`-th member: the sorted `Vec` becomes a tree.
    #[cold]
    fn grow(&mut self, id: TaskId, slot: TaskSlot) {
        let mut m: BTreeMap<TaskId, TaskSlot> = self.iter().collect();
        m.insert(id, slot);
        *self = Members::Many(m);
    }

    /// Removes `id`; whether it was a member.
    #[inline]
    pub(crate) fn remove(&mut self, id: TaskId) -> bool {
        match self {
            Members::Few(v) => match v.binary_search_by_key(&id, |e| e.0) {
                Ok(i) => {
                    v.remove(i);
                    true
                }
                Err(_) => false,
            },
            Members::Many(m) => {
                let was = m.remove(&id).is_some();
                if m.len() <= FEW {
                    // Back to the sorted Vec: one representation per size.
                    *self = Members::Few(m.iter().map(|(&i, &s)| (i, s)).collect());
                }
                was
            }
        }
    }

    /// Every member with its slot, in id order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        match self {
            Members::Few(v) => Iter::Few(v.iter()),
            Members::Many(m) => Iter::Many(m.iter()),
        }
    }

    /// Every member's slot, in id order.
    pub(crate) fn slots(&self) -> impl DoubleEndedIterator<Item = TaskSlot> + '_ {
        self.iter().map(|(_, s)| s)
    }

    /// Every member's id, in increasing order.
    pub(crate) fn ids(&self) -> impl DoubleEndedIterator<Item = TaskId> + '_ {
        self.iter().map(|(id, _)| id)
    }
}

/// The members of a group with their slots, in id order.
pub(crate) enum Iter<'a> {
    /// Over a sorted `Vec`.
    Few(std::slice::Iter<'a, (TaskId, TaskSlot)>),
    /// Over a tree.
    Many(std::collections::btree_map::Iter<'a, TaskId, TaskSlot>),
}

impl Iterator for Iter<'_> {
    type Item = (TaskId, TaskSlot);

    #[inline]
    fn next(&mut self) -> Option<(TaskId, TaskSlot)> {
        match self {
            Iter::Few(i) => i.next().copied(),
            Iter::Many(i) => i.next().map(|(&id, &s)| (id, s)),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<(TaskId, TaskSlot)> {
        match self {
            Iter::Few(i) => i.next_back().copied(),
            Iter::Many(i) => i.next_back().map(|(&id, &s)| (id, s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Slab;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the order of joins and leaves, and across the switch
        /// between the two representations: the members are the ids that
        /// joined and did not leave, in order, with their own slots, and
        /// equal memberships compare equal.
        #[test]
        fn members_follow_joins_and_leaves_in_id_order(
            ops in proptest::collection::vec((0u64..200, any::<bool>()), 0..400),
        ) {
            let mut slab: Slab<TaskId, ()> = Slab::default();
            let slots: Vec<TaskSlot> = (0..200).map(|i| slab.insert(TaskId(i), ())).collect();
            let mut members = Members::default();
            let mut want: BTreeMap<TaskId, TaskSlot> = BTreeMap::new();
            for (id, join) in ops {
                let (id, slot) = (TaskId(id), slots[id as usize]);
                if join && !want.contains_key(&id) {
                    members.insert(id, slot);
                    want.insert(id, slot);
                } else if !join {
                    prop_assert_eq!(members.remove(id), want.remove(&id).is_some());
                }
                prop_assert_eq!(members.len(), want.len());
                prop_assert_eq!(matches!(members, Members::Few(_)), want.len() <= FEW);
            }
            prop_assert!(members.iter().eq(want.iter().map(|(&i, &s)| (i, s))));
            prop_assert!(members.ids().rev().eq(want.keys().rev().copied()));
            prop_assert!(want.keys().all(|&id| members.contains(id)));
            // Built afresh from the same ids, equal.
            let mut again = Members::default();
            for (&id, &slot) in &want {
                again.insert(id, slot);
            }
            prop_assert_eq!(again, members);
        }
    }
}
