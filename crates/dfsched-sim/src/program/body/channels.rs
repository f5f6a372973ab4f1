//! The channels of [`crate::program::Burst::Wait`] and
//! [`crate::program::Burst::Signal`]: mechanism only (tokens and the tasks
//! waiting for them). Where a woken task goes and what its wake-up costs is
//! the body's business.
//!
//! Invariant: a channel never has both a token and a waiter: a token put
//! where a task waits goes to that task at once.

use std::collections::VecDeque;

/// Every channel's tokens and waiting tasks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Channels {
    /// Tokens waiting on each channel.
    tokens: Vec<u64>,
    /// Tasks (body indexes) blocked on each channel, in the order they
    /// blocked.
    waiters: Vec<VecDeque<usize>>,
}

impl Channels {
    /// `n` empty channels.
    pub fn new(n: usize) -> Channels {
        Channels {
            tokens: vec![0; n],
            waiters: vec![VecDeque::new(); n],
        }
    }

    /// Puts a token on `chan`: returns the task that takes it (the first
    /// waiting), which the caller wakes, or keeps the token.
    #[must_use]
    pub fn put(&mut self, chan: usize) -> Option<usize> {
        let w = self.waiters[chan].pop_front();
        if w.is_none() {
            self.tokens[chan] += 1;
        }
        w
    }

    /// Takes a token of `chan` if there is one.
    pub fn try_take(&mut self, chan: usize) -> bool {
        if self.tokens[chan] > 0 {
            self.tokens[chan] -= 1;
            true
        } else {
            false
        }
    }

    /// Task `task` blocks on `chan` (which has no token).
    pub fn wait(&mut self, chan: usize, task: usize) {
        debug_assert_eq!(self.tokens[chan], 0, "a token was there to take");
        self.waiters[chan].push_back(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_goes_to_the_first_waiter_or_waits_itself() {
        let mut c = Channels::new(2);
        assert_eq!(c.put(0), None, "nobody waits: the token stays");
        assert!(c.try_take(0));
        assert!(!c.try_take(0));
        c.wait(1, 7);
        c.wait(1, 3);
        assert_eq!(c.put(1), Some(7), "first come, first woken");
        assert_eq!(c.put(1), Some(3));
        assert_eq!(c.put(1), None);
        assert!(c.try_take(1));
    }
}
