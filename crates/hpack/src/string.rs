//! String literals (RFC 7541 §5.2), shared with QPACK (RFC 9204 §4.1.2).
//!
//! A string literal is a Huffman flag `H`, a length as a prefixed integer
//! (see [`crate::int`]) and the string octets, raw or Huffman-coded. In HPACK
//! the length has a 7-bit prefix and `H` is the high bit of its first octet;
//! QPACK also uses shorter prefixes, with `H` right above the prefix and
//! other flags above that. These functions take the prefix width to serve
//! both.

use crate::{huffman, int, DecodeError};

/// Appends `src` as a string literal with a `prefix_bits`-bit length prefix
/// (1..=7), Huffman-coded when that is shorter.
///
/// `first_byte_flags` supplies the bits above the `H` flag in the first
/// octet (0 for HPACK).
pub fn encode(src: &[u8], prefix_bits: u8, first_byte_flags: u8, dst: &mut Vec<u8>) {
    let huffman_len = huffman::encoded_len(src);
    encode_with(src, huffman_len < src.len(), prefix_bits, first_byte_flags, dst);
}

/// Like [`encode`], but the caller decides whether to Huffman-code.
pub fn encode_with(src: &[u8], use_huffman: bool, prefix_bits: u8, first_byte_flags: u8, dst: &mut Vec<u8>) {
    debug_assert!((1..=7).contains(&prefix_bits), "prefix must be 1..=7 bits");
    let h_flag = 1u8 << prefix_bits.clamp(1, 7);
    // Clear the H flag from the caller's flags; we decide it.
    let flags = first_byte_flags & !(h_flag | (h_flag - 1));
    if use_huffman {
        let len = huffman::encoded_len(src);
        int::encode(len as u64, prefix_bits, flags | h_flag, dst);
        huffman::encode_sized(src, len, dst);
    } else {
        int::encode(src.len() as u64, prefix_bits, flags, dst);
        dst.extend_from_slice(src);
    }
}

/// Encodes `src` Huffman-coded when that is shorter, else raw (the encoder's choice for
/// every string), measuring the Huffman length once.
pub fn encode_shortest(src: &[u8], prefix_bits: u8, first_byte_flags: u8, dst: &mut Vec<u8>) {
    debug_assert!((1..=7).contains(&prefix_bits), "prefix must be 1..=7 bits");
    let h_flag = 1u8 << prefix_bits.clamp(1, 7);
    let flags = first_byte_flags & !(h_flag | (h_flag - 1));
    let len = huffman::encoded_len(src);
    if len < src.len() {
        int::encode(len as u64, prefix_bits, flags | h_flag, dst);
        huffman::encode_sized(src, len, dst);
    } else {
        int::encode(src.len() as u64, prefix_bits, flags, dst);
        dst.extend_from_slice(src);
    }
}

/// Number of octets [`encode`] produces for `src` with `prefix_bits`.
pub fn encoded_len(src: &[u8], prefix_bits: u8) -> usize {
    let len = huffman::encoded_len(src).min(src.len());
    int::encoded_len(len as u64, prefix_bits) + len
}

/// Decodes a string literal with a `prefix_bits`-bit length prefix (1..=7)
/// from the start of `buf`.
///
/// Raw strings are returned as a slice of `buf`; Huffman-coded ones are
/// decoded into `scratch` (cleared first) and returned from there. The second
/// value is the number of octets of `buf` consumed.
///
/// # Errors
/// [`DecodeError::StringTooLong`] if the string is longer than `max_len`
/// octets (for Huffman, once its decoding would exceed `max_len`; checked
/// before the rest of the literal is required to be present);
/// [`DecodeError::Truncated`] if `buf` ends before the string does;
/// [`DecodeError::InvalidHuffman`] and integer errors as for
/// [`huffman::decode`] and [`int::decode`].
pub fn decode<'a>(
    buf: &'a [u8],
    prefix_bits: u8,
    max_len: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<(&'a [u8], usize), DecodeError> {
    debug_assert!((1..=7).contains(&prefix_bits), "prefix must be 1..=7 bits");
    let first = *buf.first().ok_or(DecodeError::Truncated)?;
    let is_huffman = first & (1u8 << prefix_bits.clamp(1, 7)) != 0;
    let (len, header) = int::decode(buf, prefix_bits)?;
    // int::decode bounds the value to 32 bits, which always fits a usize on
    // the platforms we support; saturate just in case.
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if !is_huffman && len > max_len {
        return Err(DecodeError::StringTooLong);
    }
    let end = header.checked_add(len).ok_or(DecodeError::Truncated)?;
    let data = buf.get(header..end).ok_or(DecodeError::Truncated)?;
    if is_huffman {
        scratch.clear();
        huffman::decode_bounded(data, max_len, scratch)?;
        Ok((scratch.as_slice(), end))
    } else {
        Ok((data, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(src: &[u8], prefix: u8) {
        let mut buf = Vec::new();
        encode(src, prefix, 0, &mut buf);
        assert_eq!(buf.len(), encoded_len(src, prefix));
        buf.push(0xaa); // trailing data must not be consumed
        let mut scratch = Vec::new();
        let (s, n) = decode(&buf, prefix, usize::MAX, &mut scratch).unwrap();
        assert_eq!(s, src);
        assert_eq!(n, buf.len() - 1);
    }

    #[test]
    fn round_trips() {
        for prefix in 1..=7 {
            round_trip(b"", prefix);
            round_trip(b"custom-key", prefix);
            round_trip(&[0xfe; 300], prefix); // raw is shorter for these
            round_trip(&b"aaaaaaaaaaaaaaaa".repeat(20), prefix);
        }
    }

    #[test]
    fn rfc_c2_1_raw_literal() {
        let mut buf = Vec::new();
        encode_with(b"custom-key", false, 7, 0, &mut buf);
        assert_eq!(buf[0], 0x0a);
        assert_eq!(&buf[1..], b"custom-key");
    }

    #[test]
    fn huffman_flag_sits_above_the_prefix() {
        let mut buf = Vec::new();
        // QPACK-style: 3-bit prefix, H at 0x08, a flag at 0x20.
        encode_with(b"www.example.com", true, 3, 0x20, &mut buf);
        assert_eq!(buf[0] & 0xf8, 0x28);
        let mut scratch = Vec::new();
        let (s, _) = decode(&buf, 3, 100, &mut scratch).unwrap();
        assert_eq!(s, b"www.example.com");
    }

    #[test]
    fn errors() {
        let mut scratch = Vec::new();
        assert_eq!(decode(&[], 7, 10, &mut scratch), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0x03, b'a'], 7, 10, &mut scratch), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0x03, b'a', b'b', b'c'], 7, 2, &mut scratch), Err(DecodeError::StringTooLong));
        // Announced length far beyond the limit is rejected before the data is needed.
        assert_eq!(decode(&[0x7f, 0xff, 0xff, 0x03], 7, 1000, &mut scratch), Err(DecodeError::StringTooLong));
        // Huffman: 3 octets decode to "0000", more than 3 allowed.
        let mut buf = Vec::new();
        encode_with(b"0000", true, 7, 0, &mut buf);
        assert_eq!(decode(&buf, 7, 3, &mut scratch), Err(DecodeError::StringTooLong));
        assert_eq!(decode(&buf, 7, 4, &mut scratch).unwrap().0, b"0000");
        assert_eq!(decode(&[0x81, 0xff], 7, 10, &mut scratch), Err(DecodeError::InvalidHuffman));
    }
}
