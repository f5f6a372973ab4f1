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
//! ```text
//!   nodes 0..n (members)        sentinels n..n+k (one per list)
//!   list l:  S(n+l) ⇄ a ⇄ b ⇄ c ⇄ S(n+l)     (circular)
//! ```
//!
//! Each list is circular through its own sentinel node, so insertion and
//! removal never test for an empty list or an end: no branch to
//! mispredict on the dispatcher's hottest paths.
//!
//! Invariants: a node is in at most one list; walking `next` from a list's
//! sentinel visits each of its members once, in order, and comes back to
//! the sentinel; `prev` is the mirror image; a node in no list has `prev
//! == OUT`. The list a node is in is not stored: removal does not need it.

/// `prev` of a node that is in no list (never a valid index: lists hold
/// fewer than `u32::MAX - 1` nodes and sentinels).
const OUT: u32 = u32::MAX;

/// `k` circular doubly linked lists sharing the nodes `0..n`.
#[derive(Clone, Debug)]
pub(crate) struct Lists {
    /// Member nodes are `0..n`; list `l`'s sentinel is node `n + l`.
    n: u32,
    /// Successor of each node (of a sentinel: its list's first member, or
    /// itself when the list is empty). Meaningless for a node in no list.
    next: Vec<u32>,
    /// Predecessor of each node (of a sentinel: its list's last member, or
    /// itself), or [`OUT`] for a node in no list.
    prev: Vec<u32>,
}

impl Lists {
    /// `k` empty lists over the nodes `0..n`.
    pub(crate) fn new(k: usize, n: usize) -> Self {
        assert!(
            n + k < OUT as usize,
            "{n} nodes and {k} lists overflow the links"
        );
        let mut next = vec![OUT; n + k];
        let mut prev = vec![OUT; n + k];
        for s in n..n + k {
            next[s] = s as u32;
            prev[s] = s as u32;
        }
        Lists {
            n: n as u32,
            next,
            prev,
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
        debug_assert!(!self.contains(node), "node {node} is already listed");
        let s = self.n + list;
        let last = self.prev[s as usize];
        self.next[last as usize] = node;
        self.prev[node as usize] = last;
        self.next[node as usize] = s;
        self.prev[s as usize] = node;
    }

    /// Puts `node`, which must be in no list, first in list `list`.
    #[inline]
    pub(crate) fn push_front(&mut self, list: u32, node: u32) {
        debug_assert!(!self.contains(node), "node {node} is already listed");
        let s = self.n + list;
        let first = self.next[s as usize];
        self.prev[first as usize] = node;
        self.next[node as usize] = first;
        self.prev[node as usize] = s;
        self.next[s as usize] = node;
    }

    /// Removes `node`, which must be in a list, from its list.
    #[inline]
    pub(crate) fn remove(&mut self, node: u32) {
        debug_assert!(self.contains(node), "node {node} is in no list");
        let (p, x) = (self.prev[node as usize], self.next[node as usize]);
        self.next[p as usize] = x;
        self.prev[x as usize] = p;
        self.prev[node as usize] = OUT;
    }

    /// The first node of list `list`.
    #[inline]
    pub(crate) fn front(&self, list: u32) -> Option<u32> {
        let f = self.next[(self.n + list) as usize];
        (f < self.n).then_some(f)
    }

    /// The node after `node` in its list.
    #[inline]
    pub(crate) fn after(&self, node: u32) -> Option<u32> {
        let x = self.next[node as usize];
        (x < self.n).then_some(x)
    }

    /// The nodes of list `list`, first to last.
    #[inline]
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
        l.remove(4); // middle
        l.remove(1); // tail
        l.remove(5); // head
        assert_eq!(l.iter(0).collect::<Vec<_>>(), vec![7]);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![3]);
        assert!(!l.contains(4) && !l.contains(1) && l.contains(7));
        // A removed node may join another list, at either end.
        l.push_back(1, 4);
        l.push_front(2, 1);
        assert_eq!(l.iter(1).collect::<Vec<_>>(), vec![4]);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![1, 3]);
        l.remove(3);
        l.remove(1);
        assert_eq!(l.front(2), None);
        l.push_front(2, 6);
        assert_eq!(l.iter(2).collect::<Vec<_>>(), vec![6]);
        assert_eq!(l.front(0), Some(7));
        assert_eq!(l.after(7), None);
        // Emptied lists take members again at either end.
        l.remove(7);
        l.remove(6);
        assert_eq!((l.front(0), l.front(2)), (None, None));
        l.push_back(0, 2);
        l.push_front(0, 0);
        assert_eq!(l.iter(0).collect::<Vec<_>>(), vec![0, 2]);
    }
}
