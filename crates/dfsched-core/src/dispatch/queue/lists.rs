//! Many intrusive doubly linked lists over one set of dense node indices
//! `0..n`, one list per key `0..k`: mechanism only.
//!
//! The dispatcher keeps per-processor views of its tasks so that a free
//! processor finds its pick without walking the whole ready queue: the
//! queued tasks that last ran on each processor (LP), the queued tasks of
//! each processor (FP), the queued tasks matched to each processor (LMR),
//! the queued tasks associated with each processor (LMR), and every task
//! associated with each processor, most recent first (MI, LMI). Each of
//! those needs O(1) insertion at either end, O(1) removal from anywhere and
//! iteration in order; [`Lists`] gives them without allocating after
//! construction, with two link words per node.
//!
//! Invariants: a node is in at most one list; walking `next` from a list's
//! head visits each of its members once, in order, and ends at [`NONE`];
//! `prev` is the mirror image; a node outside every list has `prev ==
//! OUT`. The list a node is in is not stored: the caller always knows it
//! (it is the node's processor, match or association), and passes it to
//! [`Lists::remove`].

use super::chain::NONE;

/// `prev` of a node that is in no list (never a valid index: lists hold
/// fewer than `u32::MAX - 1` nodes).
const OUT: u32 = u32::MAX - 1;

/// `k` doubly linked lists sharing the nodes `0..n`.
#[derive(Clone, Debug)]
pub(crate) struct Lists {
    /// First node of each list, or [`NONE`].
    head: Vec<u32>,
    /// Last node of each list, or [`NONE`].
    tail: Vec<u32>,
    /// Successor of each node in its list, or [`NONE`] at the tail
    /// (meaningless outside every list).
    next: Vec<u32>,
    /// Predecessor of each node in its list, [`NONE`] at the head, or
    /// [`OUT`] for a node in no list.
    prev: Vec<u32>,
}

impl Lists {
    /// `k` empty lists over the nodes `0..n`.
    pub(crate) fn new(k: usize, n: usize) -> Self {
        Lists {
            head: vec![NONE; k],
            tail: vec![NONE; k],
            next: vec![NONE; n],
            prev: vec![OUT; n],
        }
    }

    /// Lists with no nodes at all, for a policy that does not use them.
    pub(crate) fn unused() -> Self {
        Lists::new(0, 0)
    }

    /// Whether `node` is in some list.
    #[inline]
    pub(crate) fn contains(&self, node: u32) -> bool {
        self.prev[node as usize] != OUT
    }

    /// Appends `node`, which must be in no list, to list `list`.
    #[inline]
    pub(crate) fn push_back(&mut self, list: u32, node: u32) {
        let (l, n) = (list as usize, node as usize);
        debug_assert!(!self.contains(node), "node {node} is already listed");
        let t = self.tail[l];
        self.prev[n] = t;
        self.next[n] = NONE;
        if t == NONE {
            self.head[l] = node;
        } else {
            self.next[t as usize] = node;
        }
        self.tail[l] = node;
    }

    /// Puts `node`, which must be in no list, first in list `list`.
    #[inline]
    pub(crate) fn push_front(&mut self, list: u32, node: u32) {
        let (l, n) = (list as usize, node as usize);
        debug_assert!(!self.contains(node), "node {node} is already listed");
        let h = self.head[l];
        self.prev[n] = NONE;
        self.next[n] = h;
        if h == NONE {
            self.tail[l] = node;
        } else {
            self.prev[h as usize] = node;
        }
        self.head[l] = node;
    }

    /// Removes `node` from list `list`, which must hold it.
    #[inline]
    pub(crate) fn remove(&mut self, list: u32, node: u32) {
        let (l, n) = (list as usize, node as usize);
        debug_assert!(self.contains(node), "node {node} is in no list");
        let (p, x) = (self.prev[n], self.next[n]);
        if p == NONE {
            debug_assert_eq!(self.head[l], node, "node {node} is not in list {list}");
            self.head[l] = x;
        } else {
            self.next[p as usize] = x;
        }
        if x == NONE {
            self.tail[l] = p;
        } else {
            self.prev[x as usize] = p;
        }
        self.prev[n] = OUT;
    }

    /// The first node of list `list`.
    #[inline]
    pub(crate) fn front(&self, list: u32) -> Option<u32> {
        let h = self.head[list as usize];
        (h != NONE).then_some(h)
    }

    /// The node after `node` in its list.
    #[inline]
    pub(crate) fn after(&self, node: u32) -> Option<u32> {
        let x = self.next[node as usize];
        (x != NONE).then_some(x)
    }

    /// The nodes of list `list`, first to last.
    pub(crate) fn iter(&self, list: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(self.front(list), |&n| self.after(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_share_nodes_keep_order_and_forget_removed_nodes() {
        let mut l = Lists::new(3, 8);
        l.push_back(0, 4);
        l.push_back(0, 1);
        l.push_front(0, 7);
        l.push_back(2, 3);
        l.push_front(2, 5);
        assert_eq!(l.iter(0).collect::<Vec<_>>(), vec![7, 4, 1]);
        assert_eq!(l.iter(1).count(), 0);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![5, 3]);
        l.remove(0, 4); // middle
        l.remove(0, 1); // tail
        l.remove(2, 5); // head
        assert_eq!(l.iter(0).collect::<Vec<_>>(), vec![7]);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![3]);
        assert!(!l.contains(4) && !l.contains(1) && l.contains(7));
        // A removed node may join another list, at either end.
        l.push_back(1, 4);
        l.push_front(2, 1);
        assert_eq!(l.iter(1).collect::<Vec<_>>(), vec![4]);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![1, 3]);
        l.remove(2, 3);
        l.remove(2, 1);
        assert_eq!(l.front(2), None);
        l.push_front(2, 6);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![6]);
        assert_eq!(l.front(0), Some(7));
        assert_eq!(l.after(7), None);
    }
}
