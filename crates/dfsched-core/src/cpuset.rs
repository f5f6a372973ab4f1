//! A set of CPUs, and the kernel's cpulist syntax (`0-3,8`).
//!
//! Invariant: the word vector has no trailing zero words, so two sets with the
//! same members compare equal and hash alike.

use crate::ids::CpuId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A set of CPUs as a bitmap.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. No trailing zero words.
    words: Vec<u64>,
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
        CpuSet { words: Vec::new() }
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

    /// Adds `cpu`; returns whether it was absent.
    pub fn insert(&mut self, cpu: CpuId) -> bool {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let absent = self.words[w] & (1 << b) == 0;
        self.words[w] |= 1 << b;
        absent
    }

    /// Removes `cpu`; returns whether it was present.
    pub fn remove(&mut self, cpu: CpuId) -> bool {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        let present = self.contains(cpu);
        if present {
            self.words[w] &= !(1 << b);
            self.trim();
        }
        present
    }

    /// Whether `cpu` is in the set.
    #[inline]
    pub fn contains(&self, cpu: CpuId) -> bool {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        self.words.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<CpuId> {
        self.iter().next()
    }

    /// The CPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| Bits {
            word: w,
            base: wi as u32 * 64,
        })
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut s = CpuSet {
            words: self
                .words
                .iter()
                .zip(&other.words)
                .map(|(a, b)| a & b)
                .collect(),
        };
        s.trim();
        s
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let get = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
        CpuSet {
            words: (0..n)
                .map(|i| get(&self.words, i) | get(&other.words, i))
                .collect(),
        }
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// Whether the two sets share a CPU.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// The raw bitmap words (bit `i % 64` of word `i / 64` is CPU `i`), as the
    /// kernel's `cpu_set_t` lays them out on 64-bit little-endian machines.
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }

    /// A set from raw bitmap words (see [`CpuSet::as_words`]).
    pub fn from_words(words: &[u64]) -> Self {
        let mut s = CpuSet {
            words: words.to_vec(),
        };
        s.trim();
        s
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
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

    proptest! {
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
