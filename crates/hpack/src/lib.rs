//! HPACK: header compression for HTTP/2 (RFC 7541), sans-IO.
//!
//! * [`Decoder`] turns complete header blocks into header fields, maintaining
//!   the peer encoder's dynamic table (RFC 7541 §2.3, §4).
//! * [`Encoder`] turns header lists into header blocks, maintaining our own
//!   dynamic table.
//! * [`int`], [`string`] and [`huffman`] are the wire primitives
//!   (RFC 7541 §5), kept separate so that QPACK (RFC 9204) can reuse them.
//!
//! Nothing here performs I/O; callers hand in complete header blocks (HEADERS
//! plus any CONTINUATION frames, concatenated) and get bytes back.
//! Input from the peer never causes a panic: every malformed block yields a
//! [`DecodeError`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;

mod decoder;
mod encoder;
pub mod huffman;
pub mod int;
mod memo;
pub mod string;
mod table;

#[cfg(test)]
mod appendix_c;

pub use decoder::Decoder;
pub use encoder::Encoder;
pub use memo::{Imprint, Key, ListMemo};
pub use table::StaticIndex;

/// Errors while decoding a header block.
///
/// All of them are connection errors of type COMPRESSION_ERROR in HTTP/2
/// (RFC 9113 §4.3), except [`DecodeError::HeaderListTooLarge`], after which
/// the decoder state is still in sync with the peer's encoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ended in the middle of a representation, integer or string.
    Truncated,
    /// An integer (RFC 7541 §5.1) exceeded our implementation limit, in value
    /// or in number of continuation octets.
    IntegerOverflow,
    /// An index (RFC 7541 §2.3.3) was 0 or beyond the static and dynamic
    /// tables.
    InvalidIndex(u64),
    /// A Huffman-coded string (RFC 7541 §5.2) had invalid padding or
    /// contained the EOS symbol.
    InvalidHuffman,
    /// A dynamic table size update (RFC 7541 §6.3) asked for more than the
    /// SETTINGS_HEADER_TABLE_SIZE we advertised.
    TableSizeUpdateTooLarge {
        /// The size the peer's encoder asked for.
        requested: usize,
        /// Our advertised limit.
        max: usize,
    },
    /// A dynamic table size update came after a header field representation
    /// (RFC 7541 §4.2 requires it at the start of the block).
    TableSizeUpdateNotAtStart,
    /// A single string literal was longer than the whole header list may be.
    StringTooLong,
    /// The decoded header list exceeded the caller's limit
    /// (RFC 9113 §6.5.2 accounting). The block was still fully processed, so
    /// the dynamic table remains in sync.
    HeaderListTooLarge,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("HPACK header block is truncated"),
            Self::IntegerOverflow => f.write_str("HPACK integer exceeds implementation limits"),
            Self::InvalidIndex(0) => f.write_str("HPACK index 0 is not a valid table index"),
            Self::InvalidIndex(i) => {
                write!(f, "HPACK index {i} is beyond the static and dynamic tables")
            }
            Self::InvalidHuffman => {
                f.write_str("invalid HPACK Huffman string (bad padding or EOS symbol in the string)")
            }
            Self::TableSizeUpdateTooLarge { requested, max } => {
                write!(f, "HPACK dynamic table size update to {requested} exceeds the advertised limit {max}")
            }
            Self::TableSizeUpdateNotAtStart => f.write_str("HPACK dynamic table size update after a header field"),
            Self::StringTooLong => f.write_str("HPACK string literal is longer than the header list limit"),
            Self::HeaderListTooLarge => f.write_str("decoded header list exceeds the size limit"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A deterministic xorshift64 sequence from `seed`, for the randomised tests.
#[cfg(test)]
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_messages_are_specific() {
        let cases = [
            (DecodeError::Truncated, "truncated"),
            (DecodeError::IntegerOverflow, "integer"),
            (DecodeError::InvalidIndex(0), "index 0"),
            (DecodeError::InvalidIndex(99), "index 99"),
            (DecodeError::InvalidHuffman, "Huffman"),
            (
                DecodeError::TableSizeUpdateTooLarge { requested: 5000, max: 4096 },
                "5000 exceeds the advertised limit 4096",
            ),
            (DecodeError::TableSizeUpdateNotAtStart, "after a header field"),
            (DecodeError::StringTooLong, "string literal"),
            (DecodeError::HeaderListTooLarge, "header list"),
        ];
        for (err, needle) in cases {
            let msg = err.to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
    }
}
