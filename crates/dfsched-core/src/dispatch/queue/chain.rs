//! An intrusive FIFO over the dense indices `0..n`: mechanism only.
//!
//! The ready queue (tasks in arrival order) and the list of idle processors
//! (longest idle first) both need O(1) push at the tail, O(1) removal from
//! anywhere (a policy may pick a task from the middle of the queue) and
//! iteration in order. Links live in two arrays indexed by the element, so
//! nothing allocates after construction.
//!
//! Invariants: an index is in the chain at most once; `len` counts the
//! members; walking `next` from `head` visits every member once, in the
//! order they were pushed, and ends at [`NONE`].

/// The "no element" link.
pub(crate) const NONE: u32 = u32::MAX;

/// A doubly linked FIFO of indices below a fixed bound.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    /// First member, or [`NONE`].
    head: u32,
    /// Last member, or [`NONE`].
    tail: u32,
    /// Successor of each index (meaningless for non-members).
    next: Vec<u32>,
    /// Predecessor of each index (meaningless for non-members).
    prev: Vec<u32>,
    /// Whether each index is a member.
    member: Vec<bool>,
    /// Members.
    len: usize,
}

impl Chain {
    /// An empty chain for the indices `0..n`.
    pub(crate) fn new(n: usize) -> Self {
        Chain {
            head: NONE,
            tail: NONE,
            next: vec![NONE; n],
            prev: vec![NONE; n],
            member: vec![false; n],
            len: 0,
        }
    }

    /// Appends `i`, which must not be a member.
    #[inline]
    pub(crate) fn push_back(&mut self, i: u32) {
        let iu = i as usize;
        debug_assert!(!self.member[iu], "index {i} is already in the chain");
        self.member[iu] = true;
        self.next[iu] = NONE;
        self.prev[iu] = self.tail;
        if self.tail == NONE {
            self.head = i;
        } else {
            self.next[self.tail as usize] = i;
        }
        self.tail = i;
        self.len += 1;
    }

    /// Removes `i`, which must be a member.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) {
        let iu = i as usize;
        debug_assert!(self.member[iu], "index {i} is not in the chain");
        let (p, n) = (self.prev[iu], self.next[iu]);
        if p == NONE {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.member[iu] = false;
        self.len -= 1;
    }

    /// The first member.
    #[inline]
    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NONE).then_some(self.head)
    }

    /// Whether `i` is a member.
    #[inline]
    pub(crate) fn contains(&self, i: u32) -> bool {
        self.member[i as usize]
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
    pub(crate) fn iter(&self) -> ChainIter<'_> {
        ChainIter {
            chain: self,
            at: self.head,
        }
    }
}

/// Walks a [`Chain`] from head to tail.
pub(crate) struct ChainIter<'a> {
    /// The chain walked.
    chain: &'a Chain,
    /// The next index to yield, or [`NONE`].
    at: u32,
}

impl Iterator for ChainIter<'_> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.at == NONE {
            return None;
        }
        let i = self.at;
        self.at = self.chain.next[i as usize];
        Some(i)
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
