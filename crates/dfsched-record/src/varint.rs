//! Unsigned LEB128 varints (7 bits a byte, low first, high bit = more) and
//! zigzag for signed values. A value takes at most 10 bytes.

/// Appends `v` as a varint.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at the start of `b` and its length; `None` if `b` ends
/// inside it or it does not fit 64 bits.
pub(crate) fn get(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        let part = u64::from(byte & 0x7f);
        if i == 9 && part > 1 {
            return None;
        }
        v |= part << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Signed → unsigned, small magnitudes small.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}
