//! An intrusive FIFO over the dense indices `0..n`: mechanism only.
//!
//! The ready queue (tasks in arrival order) and the lists of idle and
//! paused processors both need O(1) push at the tail, O(1) removal from
//! anywhere (a policy may pick a task from the middle of the queue), a
//! count, and iteration in order. A [`Chain`] is one of [`Lists`] (whose
//! circular links make both operations branch-free) with a count, so
//! nothing allocates after construction.
//!
//! Invariants: an index is in the chain at most once; `len` counts the
//! members; iteration visits every member once, in the order they were
//! pushed.

use super::lists::Lists;

/// The "no element" index.
pub(crate) const NONE: u32 = u32::MAX;

/// A doubly linked FIFO of indices below a fixed bound.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    /// One list over `0..n`.
    links: Lists,
    /// Members.
    len: usize,
}

impl Chain {
    /// An empty chain for the indices `0..n`.
    pub(crate) fn new(n: usize) -> Self {
        Chain {
            links: Lists::new(1, n),
            len: 0,
        }
    }

    /// Appends `i`, which must not be a member.
    #[inline]
    pub(crate) fn push_back(&mut self, i: u32) {
        self.links.push_back(0, i);
        self.len += 1;
    }

    /// Removes `i`, which must be a member.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) {
        self.links.remove(i);
        self.len -= 1;
    }

    /// The first member.
    #[inline]
    pub(crate) fn front(&self) -> Option<u32> {
        self.links.front(0)
    }

    /// Whether `i` is a member.
    #[inline]
    pub(crate) fn contains(&self, i: u32) -> bool {
        self.links.contains(i)
    }

    /// Members.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the chain is empty.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The members, first to last.
    #[inline]
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.links.iter(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_push_order_across_removals_from_anywhere() {
        let mut c = Chain::new(6);
        for i in [3, 0, 5, 1] {
            c.push_back(i);
        }
        c.remove(0); // middle
        c.remove(1); // tail
        c.push_back(2);
        c.remove(3); // head
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![5, 2]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.front(), Some(5));
        assert!(c.contains(2) && !c.contains(3));
        c.remove(5);
        c.remove(2);
        assert!(c.is_empty());
        assert_eq!(c.front(), None);
        c.push_back(4);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![4]);
    }
}
