//! Real programs' memory traces: Valgrind's `lackey` text in, a compact
//! binary trace out, and back to [`Access`]es for the simulator.
//!
//! `valgrind --tool=lackey --trace-mem=yes PROG` prints one record per
//! line: `I  addr,size` for an instruction, ` L addr,size` (load), ` S`
//! (store) and ` M` (modify: load and store of one location, one access
//! here). [`LackeyParser`] turns them into accesses, each carrying the
//! instructions executed since the previous access (at least 1).
//!
//! The binary format (`.dftrace`), every integer an unsigned LEB128
//! varint:
//!
//! ```text
//!   "DFTRACE2"  count  granule_shift  record*count
//!   record = (zigzag(Δ) << 5) | (r << 3) | min(instrs − 1, 7)   [instrs − 8 if ≥ 8]
//! ```
//!
//! where the access's granule (address `>> granule_shift`; 6, a 64-byte
//! line, the smallest line the SMT model uses) is `Δ` away from *reference*
//! `r` of four: the granules last touched through each reference. The
//! encoder takes the nearest reference and moves it to the new granule, so
//! a program that alternates between its stack, its heap and a streamed
//! array keeps a reference on each, and most records are one or two bytes
//! (about 1.7 bytes per access on `/bin/true`'s start-up). The files
//! `dfsched trace import` writes hold these bytes in a zstd frame (0.001–0.57
//! bytes per access on real programs); the CLI decompresses them, so this
//! module, like the rest of the simulator, works on bytes and has no
//! compression dependency. Addresses are kept to the granule: the
//! byte within a 64-byte line never changes which line or set is touched.
//!
//! Everything here works on bytes and strings; the CLI reads and writes
//! the files.

use super::workload::Access;

/// The magic bytes that open a trace.
pub const MAGIC: &[u8; 8] = b"DFTRACE2";

/// References a record can be relative to.
const REFS: usize = 4;

/// Address bits dropped (64-byte granules).
pub const GRANULE_SHIFT: u32 = 6;

/// Why a trace could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a dfsched trace (bad magic)")]
    BadMagic,
    /// The bytes end inside a number or before the promised count.
    #[error("the trace is truncated")]
    Truncated,
    /// A varint longer than 64 bits.
    #[error("a number in the trace overflows 64 bits")]
    Overflow,
    /// A granule shift outside 0..=20.
    #[error("granule shift {0} out of range")]
    BadShift(u64),
    /// A lackey line that is neither an instruction nor a data access.
    #[error("line {line}: not a lackey record: {text:?}")]
    BadLine {
        /// 1-based line number.
        line: u64,
        /// The line.
        text: String,
    },
}

/// Turns lackey's lines into accesses, one line at a time.
#[derive(Clone, Debug, Default)]
pub struct LackeyParser {
    /// Instructions since the last access.
    instrs: u32,
    /// Lines seen.
    line: u64,
}

impl LackeyParser {
    /// A parser at the start of a trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one line; returns the access it makes, if any. Lines that are
    /// Valgrind's own messages (`==pid== …`) and blank lines are skipped.
    pub fn line(&mut self, text: &str) -> Result<Option<Access>, TraceError> {
        self.line += 1;
        let bad = || TraceError::BadLine {
            line: self.line,
            text: text.to_string(),
        };
        if text.trim().is_empty() || text.starts_with("==") || text.starts_with("--") {
            return Ok(None);
        }
        let (kind, rest) = text.trim_start().split_at(1);
        let addr = rest
            .trim()
            .split(',')
            .next()
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
            .ok_or_else(bad)?;
        match kind {
            "I" => {
                self.instrs = self.instrs.saturating_add(1);
                Ok(None)
            }
            "L" | "S" | "M" => {
                let instrs = std::mem::take(&mut self.instrs).max(1);
                Ok(Some(Access {
                    vaddr: addr,
                    instrs,
                }))
            }
            _ => Err(bad()),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn get_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, TraceError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos).ok_or(TraceError::Truncated)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(TraceError::Overflow)
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// The binary trace of `accesses`.
pub fn encode(accesses: &[Access]) -> Vec<u8> {
    let mut out = Vec::with_capacity(accesses.len() + 24);
    out.extend_from_slice(MAGIC);
    put_varint(&mut out, accesses.len() as u64);
    put_varint(&mut out, u64::from(GRANULE_SHIFT));
    let mut refs = [0u64; REFS];
    for a in accesses {
        let g = a.vaddr >> GRANULE_SHIFT;
        // The nearest reference (ties: the lowest).
        let (r, delta) = refs
            .iter()
            .map(|&p| g.wrapping_sub(p) as i64)
            .enumerate()
            .min_by_key(|&(i, d)| (d.unsigned_abs(), i))
            .expect("REFS > 0");
        refs[r] = g;
        let extra = a.instrs.max(1) - 1;
        // A delta beyond ±2^57 would not survive the shift by 5; granules
        // of 48-bit user addresses are 42 bits, far below that.
        put_varint(
            &mut out,
            zigzag(delta) << 5 | (r as u64) << 3 | u64::from(extra.min(7)),
        );
        if extra >= 7 {
            put_varint(&mut out, u64::from(extra - 7));
        }
    }
    out
}

/// The accesses of a binary trace (addresses to the granule).
pub fn decode(bytes: &[u8]) -> Result<Vec<Access>, TraceError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(TraceError::BadMagic);
    }
    let mut pos = MAGIC.len();
    let count = get_varint(bytes, &mut pos)?;
    let shift = get_varint(bytes, &mut pos)?;
    if shift > 20 {
        return Err(TraceError::BadShift(shift));
    }
    // Each record is at least one byte: a count beyond the bytes left is
    // a lie, not a reason to allocate.
    if count > (bytes.len() - pos) as u64 {
        return Err(TraceError::Truncated);
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut refs = [0u64; REFS];
    for _ in 0..count {
        let r = get_varint(bytes, &mut pos)?;
        let mut extra = (r & 7) as u32;
        if extra == 7 {
            let more = get_varint(bytes, &mut pos)?;
            extra = 7u32.saturating_add(u32::try_from(more).unwrap_or(u32::MAX));
        }
        let slot = ((r >> 3) & 3) as usize;
        refs[slot] = refs[slot].wrapping_add(unzigzag(r >> 5) as u64);
        out.push(Access {
            vaddr: refs[slot] << shift,
            instrs: extra.saturating_add(1),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_lackey_records() {
        let text = "==123== Lackey, an example Valgrind tool\n\
                    I  04016a5,3\n\
                    I  04016a8,2\n\
                     L 1ffefffb80,8\n\
                     S 1ffefffb78,8\n\
                    I  04016aa,4\n\
                     M 0421c10,4\n";
        let mut p = LackeyParser::new();
        let got: Vec<Access> = text.lines().filter_map(|l| p.line(l).unwrap()).collect();
        assert_eq!(
            got,
            vec![
                Access {
                    vaddr: 0x1ffefffb80,
                    instrs: 2
                },
                Access {
                    vaddr: 0x1ffefffb78,
                    instrs: 1
                },
                Access {
                    vaddr: 0x0421c10,
                    instrs: 1
                },
            ]
        );
        assert!(p.line(" X 12,4").is_err());
        assert!(p.line(" L zz,4").is_err());
    }

    #[test]
    fn refuses_bad_magic_truncation_and_lying_counts() {
        assert_eq!(decode(b"nope"), Err(TraceError::BadMagic));
        let mut t = encode(&[Access {
            vaddr: 1 << 40,
            instrs: 30,
        }]);
        t.pop();
        assert_eq!(decode(&t), Err(TraceError::Truncated));
        let mut lie = MAGIC.to_vec();
        lie.extend([0xff, 0xff, 0x7f, 6]);
        assert_eq!(decode(&lie), Err(TraceError::Truncated));
    }

    #[test]
    fn a_strided_walk_costs_about_one_byte_per_access() {
        // Δ = +1 granule, reference 0, 2 extra instructions: one byte.
        let a: Vec<Access> = (0..10_000u64)
            .map(|i| Access {
                vaddr: 0x7fff_0000_0000 + i * 64,
                instrs: 3,
            })
            .collect();
        let bytes = encode(&a);
        assert!(bytes.len() < 10_000 + 32, "{} bytes", bytes.len());
    }

    proptest! {
        #[test]
        fn round_trips_to_the_granule(
            acc in proptest::collection::vec((0u64..1 << 48, 1u32..100_000), 0..200),
        ) {
            let a: Vec<Access> = acc.iter().map(|&(vaddr, instrs)| Access { vaddr, instrs }).collect();
            let back = decode(&encode(&a)).unwrap();
            prop_assert_eq!(back.len(), a.len());
            for (x, y) in a.iter().zip(&back) {
                prop_assert_eq!(x.vaddr >> GRANULE_SHIFT << GRANULE_SHIFT, y.vaddr);
                prop_assert_eq!(x.instrs, y.instrs);
            }
        }
    }
}
