//! A fast, deterministic hasher for integer keys (line addresses, event
//! sequence numbers).
//!
//! The standard library's SipHash is built to resist hash flooding by
//! untrusted input, which a simulator's own addresses are not, and it costs
//! several times more than a multiply. This is the Fx hash of rustc and
//! Firefox: one rotate, xor and multiply per word.
//!
//! Invariant: maps using it are only probed, never iterated to make a
//! decision, so their (seed-independent but arbitrary) order can never leak
//! into results.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fx hashing of machine words.
#[derive(Clone, Copy, Default)]
pub struct FxHasher {
    /// The running hash.
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A `HashSet` with [`FxHasher`].
pub type FxHashSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_alike_and_nearby_keys_differ() {
        let b = BuildHasherDefault::<FxHasher>::default();
        assert_eq!(b.hash_one(12345u64), b.hash_one(12345u64));
        assert_ne!(b.hash_one(1u64), b.hash_one(2u64));
    }
}
