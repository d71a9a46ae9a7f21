//! Wire primitives (RFC 9204 §4.1): prefixed integers and string literals.
//!
//! Encoding reuses `sluice_hpack`'s primitives unchanged: QPACK uses the
//! HPACK integer (RFC 7541 §5.1) and string literal (RFC 7541 §5.2) formats,
//! only with more prefix widths, and `sluice_hpack::string::encode_with`
//! already places the `H` flag right above an arbitrary length prefix.
//!
//! Decoding is our own, for two reasons:
//! * RFC 9204 §4.1.1 requires decoding integers of up to 62 bits (stream IDs
//!   on the decoder stream are QUIC stream IDs), while `sluice_hpack::int`
//!   caps values at 32 bits;
//! * the encoder stream is parsed incrementally, so string literals are first
//!   located (`string_span`, cheap, no Huffman work) and only decoded once the
//!   whole instruction has arrived.

use bytes::Bytes;
use sluice_hpack::huffman;

/// Largest integer we decode: 2^62 - 1 (RFC 9204 §4.1.1 requires 62 bits).
pub(crate) const MAX_INT: u64 = (1 << 62) - 1;

/// Most continuation octets accepted after the prefix. Nine carry 63 bits;
/// one more tolerates a redundant trailing zero group, but the bound stops a
/// peer from feeding an endless run of `0x80` octets (RFC 9204 §7.4).
const MAX_CONTINUATION_OCTETS: usize = 10;

/// Low-level decoding failures; callers map them to the RFC 9204 §6 error of
/// the stream they were reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrimError {
    /// The input ended inside the integer or string.
    Truncated,
    /// An integer beyond [`MAX_INT`] or with too many continuation octets.
    Overflow,
    /// A string literal longer than the caller's limit.
    TooLong,
    /// Invalid Huffman coding (RFC 7541 §5.2: EOS or bad padding).
    Huffman,
}

/// Decodes a prefixed integer (RFC 9204 §4.1.1, RFC 7541 §5.1) whose prefix
/// is the low `prefix_bits` bits of `buf[0]`. Returns the value and the
/// number of octets used.
pub(crate) fn decode_int(buf: &[u8], prefix_bits: u8) -> Result<(u64, usize), PrimError> {
    debug_assert!((1..=8).contains(&prefix_bits));
    let mask = (0xffu16 >> (8 - u16::from(prefix_bits))) as u8;
    let first = *buf.first().ok_or(PrimError::Truncated)?;
    let mut value = u64::from(first & mask);
    if value < u64::from(mask) {
        return Ok((value, 1));
    }
    for i in 0..MAX_CONTINUATION_OCTETS {
        let octet = *buf.get(1 + i).ok_or(PrimError::Truncated)?;
        let group = u64::from(octet & 0x7f);
        if group != 0 {
            let shift = 7 * i as u32;
            // 127 << 56 still fits in a u64; any non-zero group at bit 63 or
            // above is necessarily out of range.
            if shift > 56 {
                return Err(PrimError::Overflow);
            }
            value = value.checked_add(group << shift).ok_or(PrimError::Overflow)?;
            if value > MAX_INT {
                return Err(PrimError::Overflow);
            }
        }
        if octet & 0x80 == 0 {
            return Ok((value, 2 + i));
        }
    }
    Err(PrimError::Overflow)
}

/// Appends `value` as a prefixed integer; `flags` supplies the bits above
/// the `prefix_bits`-bit prefix in the first octet.
pub(crate) fn encode_int(value: u64, prefix_bits: u8, flags: u8, dst: &mut Vec<u8>) {
    sluice_hpack::int::encode(value, prefix_bits, flags, dst);
}

/// Appends a string literal whose length has a `len_prefix_bits`-bit prefix
/// with `H` directly above it (an "N-bit prefix string literal" of RFC 9204
/// §4.1.2 has N = `len_prefix_bits` + 1). `flags` supplies the bits above
/// `H`. Huffman coding is used when `huffman` is set and it is shorter.
pub(crate) fn encode_string(src: &[u8], len_prefix_bits: u8, flags: u8, huffman: bool, dst: &mut Vec<u8>) {
    let use_huffman = huffman && huffman::encoded_len(src) < src.len();
    sluice_hpack::string::encode_with(src, use_huffman, len_prefix_bits, flags, dst);
}

/// Location of a string literal inside a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) huffman: bool,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Locates the string literal starting at `buf[pos]` (length prefix of
/// `len_prefix_bits` bits, `H` right above it) without decoding it.
///
/// `max_len` bounds the decoded length. Raw strings longer than that are
/// rejected from their length alone, before their data has to be present.
/// A Huffman code is at most 30 bits per octet (RFC 7541 Appendix B), so
/// encoded data longer than `4 * max_len + 1` octets cannot decode to
/// `max_len` octets or fewer and is rejected the same way; the exact bound is
/// checked by [`decode_span`].
pub(crate) fn string_span(buf: &[u8], pos: usize, len_prefix_bits: u8, max_len: u64) -> Result<Span, PrimError> {
    let rest = buf.get(pos..).unwrap_or_default();
    let first = *rest.first().ok_or(PrimError::Truncated)?;
    let huffman = first & (1 << len_prefix_bits) != 0;
    let (len, n) = decode_int(rest, len_prefix_bits)?;
    let limit = if huffman { max_len.saturating_mul(4).saturating_add(1) } else { max_len };
    if len > limit {
        return Err(PrimError::TooLong);
    }
    let start = pos + n;
    // `len` is at most MAX_INT; if it does not fit a usize the data cannot
    // be in memory either.
    let end = usize::try_from(len).ok().and_then(|l| start.checked_add(l)).ok_or(PrimError::Truncated)?;
    if end > buf.len() {
        return Err(PrimError::Truncated);
    }
    Ok(Span { huffman, start, end })
}

/// Decodes a located string literal into owned bytes, enforcing `max_len`
/// on the decoded length.
pub(crate) fn decode_span(buf: &[u8], span: Span, max_len: u64) -> Result<Bytes, PrimError> {
    let data = &buf[span.start..span.end];
    if !span.huffman {
        return Ok(Bytes::copy_from_slice(data));
    }
    let mut out = Vec::new();
    huffman::decode(data, &mut out).map_err(|_| PrimError::Huffman)?;
    if out.len() as u64 > max_len {
        return Err(PrimError::TooLong);
    }
    Ok(Bytes::from(out))
}

/// Decodes the string literal at `buf[pos]`, appending it to `out`; returns
/// where it lies in `out` and the position in `buf` right after it.
pub(crate) fn decode_string_into(
    buf: &[u8],
    pos: usize,
    len_prefix_bits: u8,
    max_len: u64,
    out: &mut Vec<u8>,
) -> Result<(std::ops::Range<usize>, usize), PrimError> {
    let span = string_span(buf, pos, len_prefix_bits, max_len)?;
    let data = &buf[span.start..span.end];
    let start = out.len();
    if span.huffman {
        huffman::decode(data, out).map_err(|_| PrimError::Huffman)?;
        if (out.len() - start) as u64 > max_len {
            return Err(PrimError::TooLong);
        }
    } else {
        out.extend_from_slice(data);
    }
    Ok((start..out.len(), span.end))
}

/// Decodes the string literal at `buf[pos]`; returns it and the position
/// right after it (the tests' view of [`decode_string_into`]).
#[cfg(test)]
pub(crate) fn decode_string(
    buf: &[u8],
    pos: usize,
    len_prefix_bits: u8,
    max_len: u64,
) -> Result<(Bytes, usize), PrimError> {
    let mut out = Vec::new();
    let (range, end) = decode_string_into(buf, pos, len_prefix_bits, max_len, &mut out)?;
    Ok((Bytes::copy_from_slice(&out[range]), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_round_trip_up_to_62_bits() {
        for prefix in 1..=8u8 {
            for value in [0, 1, 30, 31, 62, 63, 127, 128, 255, 1337, u32::MAX as u64, 1 << 40, MAX_INT - 1, MAX_INT] {
                let mut buf = Vec::new();
                encode_int(value, prefix, 0, &mut buf);
                assert_eq!(decode_int(&buf, prefix), Ok((value, buf.len())), "{value} prefix {prefix}");
            }
        }
    }

    #[test]
    fn int_limits() {
        // 2^62 is one too many.
        let mut buf = Vec::new();
        encode_int(MAX_INT + 1, 6, 0, &mut buf);
        assert_eq!(decode_int(&buf, 6), Err(PrimError::Overflow));
        // u64::MAX-sized encodings must not overflow our arithmetic.
        let mut buf = vec![0xff];
        buf.extend([0xff; 9]);
        buf.push(0x01);
        assert_eq!(decode_int(&buf, 8), Err(PrimError::Overflow));
        // Endless continuation octets.
        let mut buf = vec![0x3f];
        buf.extend([0x80; 40]);
        assert_eq!(decode_int(&buf, 6), Err(PrimError::Overflow));
        // Truncation.
        assert_eq!(decode_int(&[], 6), Err(PrimError::Truncated));
        assert_eq!(decode_int(&[0x3f, 0x80], 6), Err(PrimError::Truncated));
        // Redundant zero group is tolerated.
        assert_eq!(decode_int(&[0x3f, 0x80, 0x00], 6), Ok((63, 3)));
    }

    #[test]
    fn strings_with_h_above_any_prefix() {
        for prefix in 3..=7u8 {
            for (text, huffman) in [(&b"www.example.com"[..], true), (b"custom-key", false), (b"", true)] {
                let mut buf = vec![0xaa];
                encode_string(text, prefix, 0, huffman, &mut buf);
                buf.push(0x55);
                let (s, end) = decode_string(&buf, 1, prefix, 100).unwrap();
                assert_eq!(&s[..], text);
                assert_eq!(end, buf.len() - 1);
            }
        }
    }

    #[test]
    fn string_limits_are_checked_before_data_arrives() {
        // Raw, announced length 1000, limit 100, no data yet.
        let mut buf = Vec::new();
        encode_int(1000, 7, 0, &mut buf);
        assert_eq!(string_span(&buf, 0, 7, 100), Err(PrimError::TooLong));
        // Huffman, announced length 1000: even at 30 bits per octet this
        // decodes to more than 100 octets.
        let mut buf = Vec::new();
        encode_int(1000, 7, 0x80, &mut buf);
        assert_eq!(string_span(&buf, 0, 7, 100), Err(PrimError::TooLong));
        // Within limits but incomplete.
        let mut buf = Vec::new();
        encode_int(10, 7, 0, &mut buf);
        buf.extend_from_slice(b"abc");
        assert_eq!(string_span(&buf, 0, 7, 100), Err(PrimError::Truncated));
        // Huffman that decodes to more than the limit: "0000" is 4 x 5 bits.
        let mut buf = Vec::new();
        encode_string(b"00000000", 7, 0, true, &mut buf);
        assert_eq!(decode_string(&buf, 0, 7, 7), Err(PrimError::TooLong));
        assert_eq!(&decode_string(&buf, 0, 7, 8).unwrap().0[..], b"00000000");
        // Bad Huffman padding.
        assert_eq!(decode_string(&[0x81, 0x00], 0, 7, 10), Err(PrimError::Huffman));
    }
}
