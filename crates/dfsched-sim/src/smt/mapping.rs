//! Page mapping models: how a thread's virtual addresses become the
//! physical addresses that index the L2.
//!
//! Kihm et al. take their vectors from virtual addresses (Valgrind), but an
//! L2 is physically indexed. With the paper's L2 (512 sets of 128-byte
//! lines) the set index is address bits 7–15 and the super-set bits 11–15;
//! a 4 KiB page keeps bits 0–11, so only one of the five super-set bits
//! survives a random mapping. The models:
//!
//! | model | physical frame of virtual page `p` | set index kept |
//! |---|---|---|
//! | [`Mapping::Identity`] | `p` | all of it |
//! | [`Mapping::Random4k`] | a keyed permutation of `p` (4 KiB pages) | bits below 12 |
//! | [`Mapping::Huge2m`] | a keyed permutation of `p` (2 MiB pages) | bits below 21 (all, for caches ≤ 2 MiB per way) |
//! | [`Mapping::Coloured`] | a permutation that keeps `colour_bits` low bits of `p` (page colouring) | all, for `colour_bits` ≥ set bits above 12 |
//!
//! Frames are a bijection of pages (a 4-round Feistel network keyed by the
//! seed and the thread), so two pages of one thread never share a frame,
//! and each thread's frames live in their own physical range (the thread
//! index + 1 in bits 48–63, above every 48-bit address), so threads never
//! alias. The mapping is a pure function of (seed, thread, address): it
//! does not depend on the order of first touches, so every policy of a
//! comparison sees the same layout.

use serde::{Deserialize, Serialize};

/// How virtual pages map to physical frames; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// Physical = virtual.
    Identity,
    /// 4 KiB pages placed at random.
    Random4k,
    /// 2 MiB pages placed at random.
    Huge2m,
    /// 4 KiB pages placed at random but keeping their colour (the low
    /// `colour_bits` bits of the page number).
    Coloured {
        /// Page-number bits kept.
        colour_bits: u32,
    },
}

impl std::str::FromStr for Mapping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "identity" => Ok(Mapping::Identity),
            "random-4k" | "random4k" | "4k" => Ok(Mapping::Random4k),
            "2m" | "huge-2m" => Ok(Mapping::Huge2m),
            // Enough colours for caches of up to 64 KiB per way (the
            // paper's L2 has 64 KiB ways: 4 bits above the page offset).
            "coloured" | "colored" => Ok(Mapping::Coloured { colour_bits: 4 }),
            other => Err(format!(
                "unknown mapping {other:?} (identity, random-4k, 2m, coloured)"
            )),
        }
    }
}

/// Virtual address bits the models handle (48, as x86-64 user space).
const VA_BITS: u32 = 48;

/// Mapping of one thread's addresses.
#[derive(Clone, Copy, Debug)]
pub struct ThreadMap {
    /// The model.
    mapping: Mapping,
    /// The Feistel key of this thread.
    key: u64,
    /// `(thread + 1) << 48`: the thread's own physical range (16 bits:
    /// threads 0 to 65 534; a run has at most 1000).
    base: u64,
}

impl ThreadMap {
    /// The map of `thread` under `mapping` for `seed`.
    pub fn new(mapping: Mapping, seed: u64, thread: u16) -> Self {
        ThreadMap {
            mapping,
            key: splitmix(seed ^ (u64::from(thread) << 32) ^ 0x6b69_686d),
            base: (u64::from(thread) + 1) << VA_BITS,
        }
    }

    /// The physical address of `vaddr`.
    #[inline]
    pub fn translate(&self, vaddr: u64) -> u64 {
        let va = vaddr & ((1 << VA_BITS) - 1);
        let pa = match self.mapping {
            Mapping::Identity => va,
            Mapping::Random4k => permute_pages(va, 12, self.key),
            Mapping::Huge2m => permute_pages(va, 21, self.key),
            Mapping::Coloured { colour_bits } => {
                let page = va >> 12;
                let colour = page & ((1 << colour_bits) - 1);
                let upper = feistel(page >> colour_bits, VA_BITS - 12 - colour_bits, self.key);
                (((upper << colour_bits) | colour) << 12) | (va & 0xfff)
            }
        };
        self.base | pa
    }
}

/// `va` with its page number (above `page_shift`) permuted.
#[inline]
fn permute_pages(va: u64, page_shift: u32, key: u64) -> u64 {
    let frame = feistel(va >> page_shift, VA_BITS - page_shift, key);
    (frame << page_shift) | (va & ((1 << page_shift) - 1))
}

/// A keyed bijection on `bits`-bit numbers (an unbalanced Feistel network
/// on the even width at or above `bits`, cycle-walked back into range).
fn feistel(x: u64, bits: u32, key: u64) -> u64 {
    let half = bits.div_ceil(2);
    let mask = (1u64 << half) - 1;
    let limit = 1u64 << bits;
    let mut v = x;
    // Cycle-walking: a permutation of [0, 2^(2·half)) restricted to
    // [0, 2^bits) by re-applying it until the value lands in range.
    loop {
        let (mut l, mut r) = (v >> half, v & mask);
        for round in 0..4u64 {
            let f = splitmix(r ^ key.rotate_left(round as u32 * 16) ^ round) & mask;
            (l, r) = (r, l ^ f);
        }
        v = (l << half) | r;
        if v < limit {
            return v;
        }
    }
}

/// SplitMix64's finaliser: a cheap, well-mixed hash of a word.
#[inline]
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn feistel_is_a_bijection_on_small_widths() {
        for bits in [1, 4, 7, 10] {
            let out: BTreeSet<u64> = (0..1u64 << bits).map(|x| feistel(x, bits, 99)).collect();
            assert_eq!(out.len(), 1 << bits, "{bits} bits");
            assert!(out.iter().all(|&v| v < 1 << bits));
        }
    }

    #[test]
    fn each_model_keeps_the_bits_its_table_row_says() {
        let va = 0x1234_5678_9abc_u64;
        for (m, kept) in [
            (Mapping::Identity, 48),
            (Mapping::Random4k, 12),
            (Mapping::Huge2m, 21),
            (Mapping::Coloured { colour_bits: 4 }, 16),
        ] {
            let t = ThreadMap::new(m, 7, 3);
            let pa = t.translate(va);
            let mask = (1u64 << kept) - 1;
            assert_eq!(pa & mask, va & mask, "{m:?} keeps {kept} bits");
            assert_eq!(pa >> 48, 4, "thread 3's range");
        }
        // And a random 4 KiB mapping does move the bits above the page.
        let moved = (0..64u64)
            .map(|p| ThreadMap::new(Mapping::Random4k, 7, 0).translate(p << 12) >> 12 & 0xf)
            .collect::<BTreeSet<_>>();
        assert!(moved.len() > 8, "the colour bits are scrambled: {moved:?}");
    }

    #[test]
    fn threads_and_pages_never_alias() {
        // Thread 256 would have wrapped onto thread 0 with the range in
        // bits 56–63 (identity frames make that a certain collision).
        for mapping in [Mapping::Identity, Mapping::Random4k] {
            let mut seen = BTreeSet::new();
            for thread in [0, 1, 2, 255, 256, 999] {
                let t = ThreadMap::new(mapping, 1, thread);
                for page in 0..512u64 {
                    assert!(seen.insert(t.translate(page << 12) >> 12), "{mapping:?}");
                }
            }
        }
    }
}
