//! A set of CPUs, and the kernel's cpulist syntax (`0-3,8`).
//!
//! A set is a bitmap of 64-bit words: bit `i % 64` of word `i / 64` is CPU
//! `i`. Sets within CPUs 0–127 — every set on machines of up to 128 CPUs,
//! and the engine's hot path runs on nothing else — keep their words inline,
//! so making, cloning, intersecting and dropping them never allocates; larger
//! sets keep on the heap their words from the first non-zero one to the
//! last, so that a set of a few high CPUs (CPU 8000's leaf, a core
//! 8000-8001) is a word or two, not the 125 zero words below it.
//!
//! ```text
//!   Inline { len: 0..=2, words: [w0, w1] }   CPUs 0-127 (unused words are 0)
//!   Heap { skip: s, words: [ws, …, wn] }     some CPU ≥ 128: words s..=n,
//!                                            ws and wn non-zero
//! ```
//!
//! Invariants: the words in use (`span`) have no trailing zero word, a set
//! is inline exactly when its highest non-zero word is below
//! `INLINE_WORDS`, and a heap set keeps no zero word before its first
//! non-zero one. So a set has one representation, and equality and hashing
//! go by it; ordering is lexicographic on the whole bitmap's words up to
//! the last non-zero one ([`CpuSet::as_words`]), as for a `Vec<u64>` of
//! them.

use crate::ids::CpuId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Words kept inline: CPUs 0–127.
const INLINE_WORDS: usize = 2;

/// A set of CPUs as a bitmap.
#[derive(Clone)]
pub struct CpuSet {
    /// The bitmap; see the module doc for its invariants.
    words: Words,
}

/// The two representations of a bitmap.
#[derive(Clone)]
enum Words {
    /// At most `INLINE_WORDS` words: `words[..len]` are in use, the last of
    /// them non-zero; the rest are 0.
    Inline {
        /// Words in use.
        len: u8,
        /// The words; those at `len` and beyond are 0.
        words: [u64; INLINE_WORDS],
    },
    /// Some word at or past `INLINE_WORDS` is non-zero: the bitmap's
    /// words `skip..skip + words.len()`, the first and the last non-zero;
    /// every word outside them is 0.
    Heap {
        /// Index of the first word kept (the first non-zero one).
        skip: u32,
        /// The words kept.
        words: Box<[u64]>,
    },
}

/// Why a cpulist did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad cpulist {input:?}: {reason}")]
pub struct CpuListError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// CPU ids above this are refused when parsing; the kernel's own limit
/// (`CONFIG_NR_CPUS`) is 8192 today.
pub const MAX_CPUS: u32 = 1 << 16;

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet {
            words: Words::Inline {
                len: 0,
                words: [0; INLINE_WORDS],
            },
        }
    }

    /// CPUs `0..n`.
    pub fn first_n(n: u32) -> Self {
        (0..n).map(CpuId).collect()
    }

    /// The set holding only `cpu`.
    pub fn single(cpu: CpuId) -> Self {
        let mut s = CpuSet::new();
        s.insert(cpu);
        s
    }

    /// A set whose bitmap words `lo..hi` are given by `word(i)` (`i` the
    /// word's index in the whole bitmap) and every other word is 0; zero
    /// words at either end are trimmed, and it is inline when it fits.
    #[inline]
    fn from_range(lo: usize, hi: usize, word: impl Fn(usize) -> u64) -> CpuSet {
        let mut hi = hi;
        while hi > lo && word(hi - 1) == 0 {
            hi -= 1;
        }
        if hi == lo {
            return CpuSet::new();
        }
        if hi <= INLINE_WORDS {
            let mut words = [0; INLINE_WORDS];
            for (i, w) in words.iter_mut().enumerate().take(hi).skip(lo) {
                *w = word(i);
            }
            return CpuSet::inline(words);
        }
        // `hi > lo` and `word(hi - 1)` is non-zero, so this stops by
        // `hi - 1`.
        let mut lo = lo;
        while word(lo) == 0 {
            lo += 1;
        }
        CpuSet {
            words: Words::Heap {
                skip: lo as u32,
                words: (lo..hi).map(word).collect(),
            },
        }
    }

    /// The words in use: the index of the first (0 for an inline set)
    /// and the words from it to the last non-zero one.
    #[inline]
    fn span(&self) -> (usize, &[u64]) {
        match &self.words {
            Words::Inline { len, words } => (0, &words[..usize::from(*len)]),
            Words::Heap { skip, words } => (*skip as usize, words),
        }
    }

    /// One past the index of the last non-zero word (0 when empty).
    #[inline]
    fn end(&self) -> usize {
        let (lo, w) = self.span();
        lo + w.len()
    }

    /// Word `i` of the whole bitmap.
    #[inline]
    fn word(&self, i: usize) -> u64 {
        let (lo, w) = self.span();
        i.checked_sub(lo)
            .and_then(|j| w.get(j))
            .copied()
            .unwrap_or(0)
    }

    /// An inline set from its words, zero or not.
    #[inline]
    fn inline(words: [u64; INLINE_WORDS]) -> CpuSet {
        let len = words.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        CpuSet {
            words: Words::Inline {
                len: len as u8,
                words,
            },
        }
    }

    /// Adds `cpu`; returns whether it was absent.
    pub fn insert(&mut self, cpu: CpuId) -> bool {
        let (w, bit) = (cpu.0 as usize / 64, 1u64 << (cpu.0 % 64));
        match &mut self.words {
            Words::Inline { len, words } if w < INLINE_WORDS => {
                let absent = words[w] & bit == 0;
                words[w] |= bit;
                *len = (*len).max(w as u8 + 1);
                absent
            }
            Words::Heap { skip, words }
                if (*skip as usize..*skip as usize + words.len()).contains(&w) =>
            {
                let x = &mut words[w - *skip as usize];
                let absent = *x & bit == 0;
                *x |= bit;
                absent
            }
            _ => {
                // Outside the words in use: the set is made again over
                // the wider span (on the heap: no set with a CPU this high
                // fits inline).
                let old = std::mem::take(self);
                let (lo, hi) = match old.span() {
                    (_, []) => (w, w + 1),
                    (lo, words) => (lo.min(w), (lo + words.len()).max(w + 1)),
                };
                let add = |i: usize| if i == w { bit } else { 0 };
                *self = CpuSet::from_range(lo, hi, |i| old.word(i) | add(i));
                true
            }
        }
    }

    /// Removes `cpu`; returns whether it was present.
    pub fn remove(&mut self, cpu: CpuId) -> bool {
        let (w, bit) = (cpu.0 as usize / 64, 1u64 << (cpu.0 % 64));
        if !self.contains(cpu) {
            return false;
        }
        let keep = |i: usize| if i == w { !bit } else { !0 };
        let (lo, hi) = (self.span().0, self.end());
        *self = CpuSet::from_range(lo, hi, |i| self.word(i) & keep(i));
        true
    }

    /// Whether `cpu` is in the set.
    #[inline]
    pub fn contains(&self, cpu: CpuId) -> bool {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        self.word(w) & (1 << b) != 0
    }

    /// Number of CPUs in the set.
    #[inline]
    pub fn len(&self) -> usize {
        if let Some(x) = self.inline_words() {
            return x.iter().map(|w| w.count_ones() as usize).sum();
        }
        self.span().1.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The inline words, zeros included, if the set is inline: the hot
    /// operations work on them word by word, without slices.
    #[inline]
    fn inline_words(&self) -> Option<&[u64; INLINE_WORDS]> {
        match &self.words {
            Words::Inline { words, .. } => Some(words),
            Words::Heap { .. } => None,
        }
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.span().1.is_empty()
    }

    /// The lowest CPU, if any.
    #[inline]
    pub fn first(&self) -> Option<CpuId> {
        self.iter().next()
    }

    /// The highest CPU, if any: O(1) (the last word in use is not 0),
    /// where `iter().last()` walks every CPU — 8,192 of them on the
    /// largest machines.
    #[inline]
    pub fn last(&self) -> Option<CpuId> {
        let (lo, words) = self.span();
        let w = *words.last()?;
        let top = 63 - w.leading_zeros();
        Some(CpuId((lo + words.len() - 1) as u32 * 64 + top))
    }

    /// The CPUs in increasing order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        let (lo, words) = self.span();
        words.iter().enumerate().flat_map(move |(wi, &w)| Bits {
            word: w,
            base: (lo + wi) as u32 * 64,
        })
    }

    /// `self ∩ other`.
    #[inline]
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        if let (Some(x), Some(y)) = (self.inline_words(), other.inline_words()) {
            return CpuSet::inline(std::array::from_fn(|i| x[i] & y[i]));
        }
        let lo = self.span().0.max(other.span().0);
        let hi = self.end().min(other.end());
        CpuSet::from_range(lo, hi.max(lo), |i| self.word(i) & other.word(i))
    }

    /// `self ∪ other`.
    #[inline]
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        if self.is_empty() {
            return other.clone();
        }
        if other.is_empty() {
            return self.clone();
        }
        let lo = self.span().0.min(other.span().0);
        let hi = self.end().max(other.end());
        CpuSet::from_range(lo, hi, |i| self.word(i) | other.word(i))
    }

    /// Whether every CPU of `self` is in `other`.
    #[inline]
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        if let (Some(x), Some(y)) = (self.inline_words(), other.inline_words()) {
            return x.iter().zip(y).all(|(a, b)| a & !b == 0);
        }
        let (lo, words) = self.span();
        words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.word(lo + i) == 0)
    }

    /// Whether the two sets share a CPU.
    #[inline]
    pub fn intersects(&self, other: &CpuSet) -> bool {
        if let (Some(x), Some(y)) = (self.inline_words(), other.inline_words()) {
            return x.iter().zip(y).any(|(a, b)| a & b != 0);
        }
        let lo = self.span().0.max(other.span().0);
        let hi = self.end().min(other.end());
        (lo..hi).any(|i| self.word(i) & other.word(i) != 0)
    }

    /// The raw bitmap words from word 0 to the last non-zero one (bit
    /// `i % 64` of word `i / 64` is CPU `i`), as the kernel's `cpu_set_t`
    /// lays them out on 64-bit little-endian machines. Borrowed, except for
    /// a heap set that keeps no words below its first non-zero one: its
    /// zero words are then made.
    #[inline]
    pub fn as_words(&self) -> Cow<'_, [u64]> {
        match self.span() {
            (0, words) => Cow::Borrowed(words),
            (lo, words) => {
                let mut v = vec![0; lo];
                v.extend_from_slice(words);
                Cow::Owned(v)
            }
        }
    }

    /// A set from raw bitmap words (see [`CpuSet::as_words`]).
    pub fn from_words(words: &[u64]) -> Self {
        CpuSet::from_range(0, words.len(), |i| words[i])
    }
}

impl Default for CpuSet {
    fn default() -> Self {
        CpuSet::new()
    }
}

/// Equal sets have equal words in use (one representation per set).
impl PartialEq for CpuSet {
    #[inline]
    fn eq(&self, other: &CpuSet) -> bool {
        // Unused inline words are 0, so inline sets compare whole.
        match (self.inline_words(), other.inline_words()) {
            (Some(x), Some(y)) => x == y,
            _ => self.span() == other.span(),
        }
    }
}

impl Eq for CpuSet {}

/// Hashes the words in use and where they start (one representation per
/// set, so equal sets hash alike).
impl Hash for CpuSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.span().hash(state);
    }
}

/// Lexicographic on the bitmap's words up to the last non-zero one, as a
/// `Vec<u64>` of [`CpuSet::as_words`] would order: maps keyed by sets
/// iterate in the same order whatever the representation.
impl Ord for CpuSet {
    #[inline]
    fn cmp(&self, other: &CpuSet) -> Ordering {
        // Equal sets first: a census lookup (`state.rs`) nearly always
        // finds its set, and comparing the words in use at once (a memcmp)
        // is many times faster than the word-by-word walk below on a
        // machine-wide set of 8,192 CPUs (128 words).
        if self == other {
            return Ordering::Equal;
        }
        // Below both sets' first words kept, both bitmaps are 0.
        let start = self.span().0.min(other.span().0);
        let (a_end, b_end) = (self.end(), other.end());
        (start..a_end.min(b_end))
            .map(|i| self.word(i).cmp(&other.word(i)))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| a_end.cmp(&b_end))
    }
}

impl PartialOrd for CpuSet {
    #[inline]
    fn partial_cmp(&self, other: &CpuSet) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The set bits of one bitmap word, lowest first: one step per member
/// rather than per bit, since sets are usually sparse and walked on the
/// engine's hot path.
struct Bits {
    /// Bits not yet returned.
    word: u64,
    /// CPU id of bit 0.
    base: u32,
}

impl Iterator for Bits {
    type Item = CpuId;

    #[inline]
    fn next(&mut self) -> Option<CpuId> {
        if self.word == 0 {
            return None;
        }
        let b = self.word.trailing_zeros();
        self.word &= self.word - 1;
        Some(CpuId(self.base + b))
    }
}

impl FromIterator<CpuId> for CpuSet {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

/// Prints the kernel's cpulist form: `0-3,8`; the empty set prints as an
/// empty string, as in sysfs.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut it = self.iter().map(|c| c.0).peekable();
        let mut first = true;
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end = it.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// Parses the kernel's cpulist form: comma-separated CPUs and ranges `a-b`,
/// optionally with a stride `a-b:s` as `taskset` allows. Whitespace around
/// the list (sysfs ends it with a newline) is ignored.
impl FromStr for CpuSet {
    type Err = CpuListError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| CpuListError {
            input: input.to_string(),
            reason,
        };
        let num = |s: &str| -> Result<u32, CpuListError> {
            let n: u32 = s
                .trim()
                .parse()
                .map_err(|_| err(format!("{s:?} is not a CPU number")))?;
            if n >= MAX_CPUS {
                return Err(err(format!("CPU {n} is beyond the limit of {MAX_CPUS}")));
            }
            Ok(n)
        };
        let mut set = CpuSet::new();
        let text = input.trim();
        if text.is_empty() {
            return Ok(set);
        }
        for part in text.split(',') {
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => (r, num(s)?),
                None => (part, 1),
            };
            if stride == 0 {
                return Err(err("a stride of 0".into()));
            }
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(range)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(err(format!("range {lo}-{hi} runs backwards")));
            }
            for c in (lo..=hi).step_by(stride as usize) {
                set.insert(CpuId(c));
            }
        }
        Ok(set)
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_cpulists() {
        let s: CpuSet = "0-3,8,10-11".parse().unwrap();
        assert_eq!(s.len(), 7);
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert_eq!("5\n".parse::<CpuSet>().unwrap(), CpuSet::single(CpuId(5)));
        assert_eq!("0-7:2".parse::<CpuSet>().unwrap().to_string(), "0,2,4,6");
        assert!("".parse::<CpuSet>().unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_cpulists() {
        for bad in ["a", "3-1", "1-", "1,,2", "0-4:0", "99999999"] {
            assert!(bad.parse::<CpuSet>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn set_algebra() {
        let a: CpuSet = "0-3".parse().unwrap();
        let b: CpuSet = "2-5,70".parse().unwrap();
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.union(&b).to_string(), "0-5,70");
        assert!(!a.is_subset(&b));
        assert!(a.intersection(&b).is_subset(&a));
        let mut c = b.clone();
        assert!(c.remove(CpuId(70)));
        assert_eq!(c.as_words().len(), 1, "trailing zero words are trimmed");
    }

    #[test]
    fn sets_beyond_cpu_127_grow_onto_the_heap_and_shrink_back() {
        let mut s: CpuSet = "1,64".parse().unwrap();
        assert_eq!(&*s.as_words(), &[2, 1]);
        assert!(matches!(s.words, Words::Inline { len: 2, .. }));
        assert!(s.insert(CpuId(200)));
        assert!(matches!(s.words, Words::Heap { skip: 0, .. }));
        assert_eq!(s.as_words().len(), 4);
        assert_eq!(s.to_string(), "1,64,200");
        assert!(s.remove(CpuId(200)));
        assert!(matches!(s.words, Words::Inline { len: 2, .. }));
        assert_eq!(s, "1,64".parse().unwrap());
        let wide: CpuSet = "1,300".parse().unwrap();
        assert_eq!(wide.intersection(&s).to_string(), "1");
        assert!(matches!(
            wide.intersection(&s).words,
            Words::Inline { len: 1, .. }
        ));
        assert_eq!(wide.union(&s).to_string(), "1,64,300");
        assert_eq!(CpuSet::from_words(&[0, 0, 0, 0]), CpuSet::new());
        assert_eq!(&*CpuSet::from_words(&[5, 0, 0]).as_words(), &[5]);
    }

    #[test]
    fn a_set_of_high_cpus_keeps_only_its_own_words() {
        let mut s = CpuSet::single(CpuId(8000));
        assert!(matches!(&s.words, Words::Heap { skip: 125, words } if words.len() == 1));
        assert_eq!(s.as_words().len(), 126);
        assert_eq!(s.first(), Some(CpuId(8000)));
        s.insert(CpuId(8191));
        s.insert(CpuId(7999));
        assert_eq!(s.to_string(), "7999-8000,8191");
        assert!(matches!(&s.words, Words::Heap { skip: 124, words } if words.len() == 4));
        assert!(s.remove(CpuId(7999)));
        assert!(matches!(&s.words, Words::Heap { skip: 125, words } if words.len() == 3));
        assert!(s.remove(CpuId(8191)));
        assert_eq!(s, CpuSet::single(CpuId(8000)));
        assert!(s.remove(CpuId(8000)));
        assert!(matches!(s.words, Words::Inline { len: 0, .. }));
        let high: CpuSet = "8000-8001".parse().unwrap();
        let low: CpuSet = "0-1".parse().unwrap();
        assert!(high.union(&low).as_words().len() == 126 && !high.intersects(&low));
        assert!(high.intersection(&low).is_empty());
        assert_eq!(CpuSet::from_words(&high.as_words()), high);
    }

    /// The same set reached through different operations.
    fn equal_by_two_routes(cpus: &std::collections::BTreeSet<u32>) -> (CpuSet, CpuSet) {
        let built: CpuSet = cpus.iter().copied().map(CpuId).collect();
        let mut big = built.union(&CpuSet::single(CpuId(5000)));
        if !cpus.contains(&5000) {
            big.remove(CpuId(5000));
        }
        (built, big)
    }

    fn hash_of(s: &CpuSet) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    }

    proptest! {
        #[test]
        fn last_is_the_last_cpu_of_the_walk(
            a in proptest::collection::btree_set(0u32..9000, 0..20),
        ) {
            let (x, y) = equal_by_two_routes(&a);
            prop_assert_eq!(x.last(), x.iter().last());
            prop_assert_eq!(y.last(), a.iter().last().map(|&c| CpuId(c)));
        }

        #[test]
        fn equality_hash_and_order_follow_the_words_whatever_the_route(
            a in proptest::collection::btree_set(0u32..300, 0..20),
            b in proptest::collection::btree_set(0u32..300, 0..20),
        ) {
            let (x, y) = equal_by_two_routes(&a);
            prop_assert_eq!(&x, &y);
            prop_assert_eq!(hash_of(&x), hash_of(&y));
            let (u, _) = equal_by_two_routes(&b);
            // The order a `Vec<u64>` of the words would have.
            let words = |s: &CpuSet| s.as_words().to_vec();
            prop_assert_eq!(x.partial_cmp(&u), Some(words(&x).cmp(&words(&u))));
            prop_assert_eq!(x.cmp(&u), words(&x).cmp(&words(&u)));
            prop_assert_eq!(x == u, a == b);
            let inter: Vec<u32> = a.intersection(&b).copied().collect();
            prop_assert!(x.intersection(&u).iter().map(|c| c.0).eq(inter.iter().copied()));
            prop_assert_eq!(x.intersects(&u), !inter.is_empty());
            prop_assert_eq!(x.is_subset(&u), a.is_subset(&b));
            prop_assert_eq!(x.union(&u).len(), a.union(&b).count());
            prop_assert_eq!(CpuSet::from_words(&x.as_words()), x.clone());
        }

        /// Sets far from CPU 0 (kept from their first non-zero word) and
        /// sets near it, mixed: every operation agrees with a plain model.
        #[test]
        fn sets_of_high_cpus_agree_with_a_model(
            a in proptest::collection::btree_set(prop_oneof![0u32..200, 600u32..1400], 0..12),
            b in proptest::collection::btree_set(prop_oneof![0u32..200, 700u32..1300], 0..12),
            probe in 0u32..1500,
        ) {
            let x: CpuSet = a.iter().copied().map(CpuId).collect();
            let y: CpuSet = b.iter().copied().map(CpuId).collect();
            let model = |s: &CpuSet| s.iter().map(|c| c.0).collect::<std::collections::BTreeSet<u32>>();
            prop_assert_eq!(model(&x), a.clone());
            prop_assert_eq!(x.len(), a.len());
            prop_assert_eq!(x.first().map(|c| c.0), a.first().copied());
            prop_assert_eq!(x.contains(CpuId(probe)), a.contains(&probe));
            prop_assert_eq!(model(&x.intersection(&y)), a.intersection(&b).copied().collect());
            prop_assert_eq!(model(&x.union(&y)), a.union(&b).copied().collect());
            prop_assert_eq!(x.is_subset(&y), a.is_subset(&b));
            prop_assert_eq!(x.intersects(&y), !a.is_disjoint(&b));
            prop_assert_eq!(x.cmp(&y), x.as_words().to_vec().cmp(&y.as_words().to_vec()));
            prop_assert_eq!(x == y, a == b);
            let (mut grown, mut shrunk) = (x.clone(), x.clone());
            prop_assert_eq!(grown.insert(CpuId(probe)), !a.contains(&probe));
            prop_assert_eq!(shrunk.remove(CpuId(probe)), a.contains(&probe));
            let mut with = a.clone();
            with.insert(probe);
            let mut without = a.clone();
            without.remove(&probe);
            prop_assert_eq!(&grown, &with.iter().copied().map(CpuId).collect::<CpuSet>());
            prop_assert_eq!(&shrunk, &without.iter().copied().map(CpuId).collect::<CpuSet>());
            prop_assert_eq!(hash_of(&shrunk), hash_of(&without.iter().copied().map(CpuId).collect()));
            prop_assert_eq!(CpuSet::from_words(&x.as_words()), x.clone());
        }

        #[test]
        fn cpulist_round_trips(cpus in proptest::collection::btree_set(0u32..300, 0..40)) {
            let set: CpuSet = cpus.iter().copied().map(CpuId).collect();
            let again: CpuSet = set.to_string().parse().unwrap();
            prop_assert_eq!(&again, &set);
            prop_assert_eq!(set.len(), cpus.len());
            prop_assert!(set.iter().map(|c| c.0).eq(cpus.iter().copied()));
        }
    }
}
