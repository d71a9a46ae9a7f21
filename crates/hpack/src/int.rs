//! Prefixed integers (RFC 7541 §5.1), shared with QPACK (RFC 9204 §4.1.1).
//!
//! An integer starts in the low `prefix_bits` bits of a first octet whose
//! high bits carry representation flags. Values that do not fit in the prefix
//! fill it with ones and continue in 7-bit groups, least significant first,
//! with the high bit of each octet flagging that another octet follows.

use crate::DecodeError;

/// Largest value [`decode`] accepts.
///
/// No HPACK quantity (table index, string length, table size) legitimately
/// needs more than 32 bits; the bound keeps all later arithmetic free of
/// overflow, including on 32-bit targets. RFC 7541 §5.1 allows rejecting
/// integers that exceed implementation limits.
pub const MAX_VALUE: u64 = u32::MAX as u64;

/// Most continuation octets [`decode`] reads before giving up.
///
/// Five suffice for any value up to [`MAX_VALUE`]; a few more are tolerated
/// for encoders that pad with redundant zero groups, but the bound stops a
/// peer from making us walk an arbitrarily long run of `0x80` octets.
pub const MAX_CONTINUATION_OCTETS: usize = 10;

/// Appends `value` encoded with a `prefix_bits`-bit prefix (1..=8).
///
/// `first_byte_flags` supplies the bits above the prefix in the first octet
/// (e.g. `0x80` for an indexed header field); bits inside the prefix are
/// ignored.
pub fn encode(value: u64, prefix_bits: u8, first_byte_flags: u8, dst: &mut Vec<u8>) {
    debug_assert!((1..=8).contains(&prefix_bits), "prefix must be 1..=8 bits");
    let max_prefix = prefix_mask(prefix_bits);
    let flags = first_byte_flags & !max_prefix;
    if value < u64::from(max_prefix) {
        // The value fits in the prefix (RFC 7541 §5.1, first case).
        dst.push(flags | value as u8);
        return;
    }
    dst.push(flags | max_prefix);
    let mut rest = value - u64::from(max_prefix);
    while rest >= 0x80 {
        dst.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.push(rest as u8);
}

/// Number of octets [`encode`] produces for `value` with `prefix_bits`.
pub fn encoded_len(value: u64, prefix_bits: u8) -> usize {
    let max_prefix = u64::from(prefix_mask(prefix_bits));
    if value < max_prefix {
        return 1;
    }
    let mut rest = value - max_prefix;
    let mut len = 2;
    while rest >= 0x80 {
        rest >>= 7;
        len += 1;
    }
    len
}

/// Decodes an integer with a `prefix_bits`-bit prefix (1..=8) from the start
/// of `buf`, ignoring the flag bits above the prefix.
///
/// Returns the value and the number of octets consumed.
///
/// # Errors
/// [`DecodeError::Truncated`] if `buf` ends before the integer does;
/// [`DecodeError::IntegerOverflow`] if the value exceeds [`MAX_VALUE`] or
/// uses more than [`MAX_CONTINUATION_OCTETS`] continuation octets.
// Inlined: nearly every integer of a header block (indexes, lengths) fits in its prefix, and
// the call cost more than that case (a block of five fields decodes about ten integers).
#[inline]
pub fn decode(buf: &[u8], prefix_bits: u8) -> Result<(u64, usize), DecodeError> {
    debug_assert!((1..=8).contains(&prefix_bits), "prefix must be 1..=8 bits");
    let max_prefix = prefix_mask(prefix_bits);
    let first = *buf.first().ok_or(DecodeError::Truncated)?;
    let value = u64::from(first & max_prefix);
    if value < u64::from(max_prefix) {
        return Ok((value, 1));
    }
    decode_continued(buf, value)
}

/// The rest of [`decode`], for a value that filled its prefix (`value`).
#[inline(never)]
fn decode_continued(buf: &[u8], mut value: u64) -> Result<(u64, usize), DecodeError> {
    for i in 0..MAX_CONTINUATION_OCTETS {
        let octet = *buf.get(1 + i).ok_or(DecodeError::Truncated)?;
        let group = u64::from(octet & 0x7f);
        if group != 0 {
            let shift = 7 * i as u32;
            // A non-zero group at bit 32 or above is necessarily too large;
            // below that the shifted group fits comfortably in a u64.
            if shift >= 32 {
                return Err(DecodeError::IntegerOverflow);
            }
            value += group << shift;
            if value > MAX_VALUE {
                return Err(DecodeError::IntegerOverflow);
            }
        }
        if octet & 0x80 == 0 {
            return Ok((value, 2 + i));
        }
    }
    Err(DecodeError::IntegerOverflow)
}

/// All-ones mask of the low `prefix_bits` bits (2^N - 1 in RFC 7541 §5.1).
#[inline]
fn prefix_mask(prefix_bits: u8) -> u8 {
    (0xffu16 >> (8 - u16::from(prefix_bits.clamp(1, 8)))) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(value: u64, prefix: u8, flags: u8) -> Vec<u8> {
        let mut v = Vec::new();
        encode(value, prefix, flags, &mut v);
        assert_eq!(v.len(), encoded_len(value, prefix));
        v
    }

    #[test]
    fn rfc_c1_1_ten_with_5_bit_prefix() {
        assert_eq!(enc(10, 5, 0), [0b0000_1010]);
        assert_eq!(decode(&[0b1110_1010], 5), Ok((10, 1)));
    }

    #[test]
    fn rfc_c1_2_1337_with_5_bit_prefix() {
        assert_eq!(enc(1337, 5, 0), [0b0001_1111, 0b1001_1010, 0b0000_1010]);
        assert_eq!(decode(&[0x1f, 0x9a, 0x0a, 0xff], 5), Ok((1337, 3)));
    }

    #[test]
    fn rfc_c1_3_42_at_octet_boundary() {
        assert_eq!(enc(42, 8, 0), [42]);
        assert_eq!(decode(&[42], 8), Ok((42, 1)));
    }

    #[test]
    fn flags_are_kept_and_prefix_boundary() {
        assert_eq!(enc(62, 6, 0x40), [0x7e]);
        assert_eq!(enc(63, 6, 0x40), [0x7f, 0x00]);
        assert_eq!(enc(64, 6, 0xc0), [0xff, 0x01]);
        assert_eq!(decode(&[0x7f, 0x00], 6), Ok((63, 2)));
    }

    #[test]
    fn round_trip_many_values() {
        for prefix in 1..=8u8 {
            for value in (0..3000u64).chain([MAX_VALUE - 1, MAX_VALUE, 1 << 31]) {
                let v = enc(value, prefix, 0xff);
                assert_eq!(decode(&v, prefix), Ok((value, v.len())), "{value} {prefix}");
            }
        }
    }

    #[test]
    fn truncated() {
        assert_eq!(decode(&[], 5), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0x1f], 5), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0x1f, 0x80, 0x80], 5), Err(DecodeError::Truncated));
    }

    #[test]
    fn overflow() {
        // 2^32 + 30 with a 5-bit prefix.
        let mut too_big = Vec::new();
        encode(MAX_VALUE + 1, 5, 0, &mut too_big);
        assert_eq!(decode(&too_big, 5), Err(DecodeError::IntegerOverflow));
        // Non-zero group at bit 35.
        let buf = [0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(decode(&buf, 5), Err(DecodeError::IntegerOverflow));
        // Endless continuation octets.
        let mut buf = vec![0x1f];
        buf.extend([0x80; 64]);
        buf.push(0);
        assert_eq!(decode(&buf, 5), Err(DecodeError::IntegerOverflow));
        // u64-sized encodings are rejected without arithmetic overflow.
        let mut buf = vec![0xff];
        buf.extend([0xff; 9]);
        buf.push(0x01);
        assert_eq!(decode(&buf, 8), Err(DecodeError::IntegerOverflow));
    }

    #[test]
    fn redundant_zero_groups_are_tolerated() {
        assert_eq!(decode(&[0x1f, 0x80, 0x80, 0x00], 5), Ok((31, 4)));
    }
}
