//! How the dispatcher keeps its indexes (see "Indexes" in the module doc)
//! as tasks join and leave the queue and as bursts change affinity, and
//! the picks that go beyond the front of a list: MI's and LMI's walk of
//! the recency list, LMR's search for an associated task.
//!
//! Every change to the queue goes through [`QueueDispatcher::enqueue`] and
//! [`QueueDispatcher::dequeue`], and every change to an association
//! through [`QueueDispatcher::associate`], so the indexes cannot drift from
//! the queue and the affinity they describe.

use super::chain::NONE;
use super::{QueueDispatcher, QueuePolicy, TaskState};

impl QueueDispatcher {
    /// Puts `t` at the tail of the queue (matched to `matched` under LMR,
    /// unless [`NONE`]) and into the indexes.
    pub(super) fn enqueue(&mut self, t: usize, matched: u32) {
        let tu = t as u32;
        self.queue.push_back(tu);
        self.task_state[t] = TaskState::Queued;
        self.arrivals += 1;
        self.arrival[t] = self.arrivals;
        match self.config.policy {
            QueuePolicy::FixedProcessor => self.by_cpu.push_back(tu % self.m, tu),
            QueuePolicy::LastProcessor if self.last_cpu[t] != NONE => {
                self.by_cpu.push_back(self.last_cpu[t], tu);
            }
            QueuePolicy::LimitedMinInterveningRouting { .. } if matched != NONE => {
                self.matched_to[t] = matched;
                self.matched[matched as usize] += 1;
                self.by_cpu.push_back(matched, tu);
            }
            _ => {}
        }
        if self.pausing && self.is_cold(t) {
            self.cold.push_back(tu);
        }
    }

    /// Takes queued `t` off the queue and out of the indexes (forgetting
    /// LMR's match).
    pub(super) fn dequeue(&mut self, t: usize) {
        let tu = t as u32;
        self.queue.remove(tu);
        if self.uses_by_cpu() && self.by_cpu.contains(tu) {
            self.by_cpu.remove(tu);
        }
        let q = self.matched_to[t];
        if q != NONE {
            self.matched[q as usize] -= 1;
            self.matched_to[t] = NONE;
        }
        if self.pausing && self.cold.contains(tu) {
            self.cold.remove(tu);
        }
    }

    /// Whether the policy keeps `by_cpu` (FP, LP, LMR).
    #[inline]
    pub(super) fn uses_by_cpu(&self) -> bool {
        matches!(
            self.config.policy,
            QueuePolicy::FixedProcessor
                | QueuePolicy::LastProcessor
                | QueuePolicy::LimitedMinInterveningRouting { .. }
        )
    }

    /// Whether the policy keeps `by_assoc`, every task associated with each
    /// processor, most recent burst there first (MI, LMI).
    #[inline]
    pub(super) fn by_recency(&self) -> bool {
        matches!(
            self.config.policy,
            QueuePolicy::MinIntervening | QueuePolicy::LimitedMinIntervening { .. }
        )
    }

    /// The `by_assoc` node of task `t`'s association with `p`, held in
    /// slot `slot`: MI numbers nodes by processor (`A = M`, so this is as
    /// dense, and a refresh needs no search for the slot), LMI by slot.
    /// Either way the node's task is `node >> node_shift`.
    #[inline]
    pub(super) fn assoc_node(&self, t: usize, p: usize, slot: usize) -> u32 {
        let low = if self.config.policy == QueuePolicy::MinIntervening {
            p
        } else {
            slot
        };
        ((t << self.node_shift) + low) as u32
    }

    /// Records `t`'s burst on `p` (whose count is now `now`): refresh an
    /// association, add one while fewer than `A`, or replace the worst;
    /// under MI and LMI, `t` moves to the front of `p`'s recency list.
    pub(super) fn associate(&mut self, t: usize, p: usize, now: u64) {
        let mu = self.m as usize;
        let a = self.a as usize;
        let cell = t * mu + p;
        let recency = self.by_recency();
        if self.at[cell] == 0 {
            let len = self.assoc_len[t] as usize;
            let w = self.words;
            self.assoc_bits[t * w + p / 64] |= 1 << (p % 64);
            let slot = if len < a {
                self.assoc[t * a + len] = p as u32;
                self.assoc_len[t] += 1;
                len
            } else {
                // The worst association: most intervening; ties to the
                // earliest made. (Never under MI: it has room for all.)
                let slot = (0..a)
                    .max_by_key(|&s| {
                        let q = self.assoc[t * a + s] as usize;
                        (self.executed[q] - self.at[t * mu + q], std::cmp::Reverse(s))
                    })
                    .expect("A ≥ 1");
                let old = self.assoc[t * a + slot];
                self.at[t * mu + old as usize] = 0;
                self.assoc_bits[t * w + old as usize / 64] &= !(1 << (old % 64));
                self.assoc[t * a + slot] = p as u32;
                self.stats.replacements += 1;
                if recency {
                    self.by_assoc.remove(self.assoc_node(t, old as usize, slot));
                }
                slot
            };
            if recency {
                self.by_assoc
                    .push_front(p as u32, self.assoc_node(t, p, slot));
            }
        } else if recency {
            let slot = if self.config.policy == QueuePolicy::MinIntervening {
                0 // unused: MI's nodes go by processor
            } else {
                let slot = self.assoc_of(t).iter().position(|&q| q as usize == p);
                slot.expect("an associated processor is in the list")
            };
            let node = self.assoc_node(t, p, slot);
            self.by_assoc.remove(node);
            self.by_assoc.push_front(p as u32, node);
        }
        self.at[cell] = now;
    }

    /// LMR's second choice: the first queued task associated with `p`, by
    /// walking the queue over the tasks' association bits.
    pub(super) fn first_associated(&self, p: usize) -> Option<u32> {
        let (w, word, bit) = (self.words, p / 64, 1 << (p % 64));
        self.queue
            .iter()
            .find(|&t| self.assoc_bits[t as usize * w + word] & bit != 0)
    }

    /// MI and LMI: the queued task associated with `p` that has the fewest
    /// intervening tasks there (the largest `at`), ties to the earlier
    /// arrival; `None` if no queued task is associated with `p`.
    pub(super) fn min_intervening(&self, p: usize) -> Option<u32> {
        let (shift, mu) = (self.node_shift, self.m as usize);
        let at = |t: u32| self.at[t as usize * mu + p];
        let mut budget = self.queue.len();
        let mut node = self.by_assoc.front(p as u32);
        // The first queued task of the recency list...
        let (found, mut best) = loop {
            let x = node?;
            let t = x >> shift;
            if self.task_state[t as usize] == TaskState::Queued {
                break (x, t);
            }
            budget -= 1;
            if budget == 0 {
                return self.scan_min_intervening(p);
            }
            node = self.by_assoc.after(x);
        };
        // ... unless a queued task with the same count arrived earlier.
        let k = at(best);
        let mut node = self.by_assoc.after(found);
        while let Some(x) = node {
            let t = x >> shift;
            if at(t) != k {
                break;
            }
            let tu = t as usize;
            if self.task_state[tu] == TaskState::Queued
                && self.arrival[tu] < self.arrival[best as usize]
            {
                best = t;
            }
            node = self.by_assoc.after(x);
        }
        Some(best)
    }

    /// [`Self::min_intervening`] by walking the whole queue (for a short
    /// queue behind a long recency list).
    fn scan_min_intervening(&self, p: usize) -> Option<u32> {
        let mu = self.m as usize;
        let ex = self.executed[p];
        let mut best: Option<(u64, u32)> = None;
        for t in self.queue.iter() {
            let at = self.at[t as usize * mu + p];
            if at != 0 && best.is_none_or(|(b, _)| ex - at < b) {
                best = Some((ex - at, t));
            }
        }
        best.map(|(_, t)| t)
    }
}
