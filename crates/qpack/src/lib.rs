//! QPACK: field compression for HTTP/3 (RFC 9204), sans-IO.
//!
//! QPACK compresses HTTP field sections (headers and trailers) like HPACK,
//! but moves all dynamic table updates onto two dedicated unidirectional
//! streams so that request streams can be delivered out of order:
//!
//! * the **encoder stream** (stream type 0x02, RFC 9204 §4.2) carries
//!   instructions from the [`Encoder`] that change the dynamic table
//!   (§4.3);
//! * the **decoder stream** (stream type 0x03) carries acknowledgments and
//!   cancellations from the [`Decoder`] back to the encoder (§4.4);
//! * each **encoded field section** travels in a HEADERS frame on its own
//!   request stream and starts with a prefix (§4.5.1) saying how much of the
//!   dynamic table it needs.
//!
//! # The sans-IO contract
//!
//! Nothing here touches a socket, a timer or a QUIC stream. The HTTP/3
//! engine owns all I/O and moves bytes between the wire and these types:
//!
//! * **Encoder side** (we compress, the peer decompresses; a server uses it
//!   for responses). Create an [`Encoder`] from the peer's
//!   SETTINGS_QPACK_MAX_TABLE_CAPACITY and SETTINGS_QPACK_BLOCKED_STREAMS.
//!   [`Encoder::encode`] writes an encoded field section for a HEADERS frame
//!   and may queue encoder-stream instructions; after every call, drain
//!   [`Encoder::poll_encoder_stream`] and write the bytes to our encoder
//!   stream (before or together with the HEADERS frame, to keep the peer from
//!   blocking). Feed every byte read from the peer's decoder stream to
//!   [`Encoder::on_decoder_stream`], in order, in chunks of any size.
//! * **Decoder side** (the peer compresses, we decompress; a server uses it
//!   for requests). Create a [`Decoder`] from the values we advertise in our
//!   SETTINGS and our field section size limit. Feed every byte read from the
//!   peer's encoder stream to [`Decoder::on_encoder_stream`], in order, in
//!   chunks of any size. Pass each complete HEADERS frame payload to
//!   [`Decoder::decode`]; it returns the fields, or [`Decoded::Blocked`] when
//!   the section references table entries that have not arrived yet (RFC 9204
//!   §2.2.1). After feeding encoder-stream bytes, call
//!   [`Decoder::poll_unblocked`] until it returns `None` to collect sections
//!   that became decodable. When a request stream is reset or abandoned,
//!   call [`Decoder::cancel_stream`]. After any of these calls, drain
//!   [`Decoder::poll_decoder_stream`] and write the bytes to our decoder
//!   stream.
//!
//! Field sections on one request stream must be passed in stream order.
//! Everything the peer controls is bounded (integers, string lengths,
//! buffered partial instructions, blocked streams), and malformed input never
//! panics: it yields an [`Error`] carrying the RFC 9204 §6 error code with
//! which the HTTP/3 layer closes the connection.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;

use bytes::Bytes;

mod decoder;
mod encoder;
mod prim;
mod static_table;

#[cfg(test)]
mod appendix_b;

pub use decoder::{Decoded, Decoder};
pub use encoder::{Encoder, EncoderOptions};

/// Overhead added to name and value lengths in an entry's size
/// (RFC 9204 §3.2.1), also used for field section sizes (RFC 9114 §4.2.2).
pub const ENTRY_OVERHEAD: u64 = 32;

/// A decoded field line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldLine {
    /// Field name, as sent (QPACK does not validate or lowercase it; the
    /// HTTP/3 layer must check it, RFC 9114 §4.2).
    pub name: Bytes,
    /// Field value, as sent.
    pub value: Bytes,
    /// Set when the peer used a literal representation with the `N` bit
    /// (RFC 9204 §4.5.4, §7.1.3): an intermediary re-encoding this field
    /// must also send it as a never-indexed literal.
    pub never_indexed: bool,
}

impl FieldLine {
    /// Creates a field line that may be indexed.
    pub fn new(name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self { name: name.into(), value: value.into(), never_indexed: false }
    }

    /// Size of the field line as RFC 9114 §4.2.2 and RFC 9204 §3.2.1 count
    /// it: name length + value length + 32.
    pub fn size(&self) -> u64 {
        self.name.len() as u64 + self.value.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A field line to encode, borrowed from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldRef<'a> {
    /// Field name; HTTP/3 requires lowercase names (RFC 9114 §4.2).
    pub name: &'a [u8],
    /// Field value.
    pub value: &'a [u8],
    /// Send as a never-indexed literal (RFC 9204 §4.5.4 `N` bit) and never
    /// insert into the dynamic table. The encoder also does this on its own
    /// for known sensitive names (see [`Encoder::encode`]).
    pub never_indexed: bool,
}

impl<'a> FieldRef<'a> {
    /// A field line that the encoder may index.
    pub fn new(name: &'a [u8], value: &'a [u8]) -> Self {
        Self { name, value, never_indexed: false }
    }

    /// A field line that must be sent as a never-indexed literal.
    pub fn sensitive(name: &'a [u8], value: &'a [u8]) -> Self {
        Self { name, value, never_indexed: true }
    }
}

impl<'a> From<&'a FieldLine> for FieldRef<'a> {
    fn from(f: &'a FieldLine) -> Self {
        Self { name: &f.name, value: &f.value, never_indexed: f.never_indexed }
    }
}

impl<'a> From<(&'a [u8], &'a [u8])> for FieldRef<'a> {
    fn from((name, value): (&'a [u8], &'a [u8])) -> Self {
        Self::new(name, value)
    }
}

impl<'a> From<(&'a str, &'a str)> for FieldRef<'a> {
    fn from((name, value): (&'a str, &'a str)) -> Self {
        Self::new(name.as_bytes(), value.as_bytes())
    }
}

/// The QPACK error codes of RFC 9204 §6, in the HTTP/3 error code space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// QPACK_DECOMPRESSION_FAILED (0x0200): an encoded field section could
    /// not be interpreted.
    DecompressionFailed,
    /// QPACK_ENCODER_STREAM_ERROR (0x0201): an encoder instruction could not
    /// be interpreted.
    EncoderStreamError,
    /// QPACK_DECODER_STREAM_ERROR (0x0202): a decoder instruction could not
    /// be interpreted.
    DecoderStreamError,
}

impl ErrorCode {
    /// The code's value on the wire (RFC 9204 §8.3).
    pub const fn value(self) -> u64 {
        match self {
            Self::DecompressionFailed => 0x0200,
            Self::EncoderStreamError => 0x0201,
            Self::DecoderStreamError => 0x0202,
        }
    }
}

/// What exactly was wrong; carried by [`Error`] for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The input ended in the middle of a representation (a field section
    /// must be complete; §4.5).
    Truncated,
    /// An integer exceeded 62 bits or used too many octets (§4.1.1, §7.4).
    IntegerOverflow,
    /// A string literal exceeded our limit (§7.4).
    StringTooLong,
    /// A Huffman-coded string was invalid (RFC 7541 §5.2).
    InvalidHuffman,
    /// A static table index beyond 98 (§3.1).
    InvalidStaticIndex(u64),
    /// A dynamic table reference to an entry that does not exist, was
    /// evicted, or (in a field section) is not below the Required Insert
    /// Count (§2.2.3).
    InvalidDynamicIndex,
    /// The encoded Required Insert Count could not have been produced by a
    /// conforming encoder (§4.5.1.1).
    InvalidRequiredInsertCount,
    /// The Base was negative or out of range (§4.5.1.2).
    InvalidBase,
    /// A section would block more streams than we allow (§2.1.2).
    TooManyBlockedStreams,
    /// Too many sections queued on one blocked stream.
    TooManyQueuedSections,
    /// Set Dynamic Table Capacity above our SETTINGS_QPACK_MAX_TABLE_CAPACITY
    /// (§4.3.1).
    CapacityExceedsLimit {
        /// The capacity the encoder asked for.
        requested: u64,
        /// Our advertised maximum.
        max: u64,
    },
    /// An inserted entry was larger than the table capacity (§3.2.2).
    EntryTooLarge {
        /// Entry size per §3.2.1.
        size: u64,
        /// Current capacity.
        capacity: u64,
    },
    /// A partial instruction exceeded our buffering limit.
    InstructionTooLong,
    /// Section Acknowledgment for a stream without unacknowledged sections
    /// (§4.4.1).
    UnexpectedSectionAck(u64),
    /// Insert Count Increment of zero (§4.4.3).
    ZeroIncrement,
    /// Insert Count Increment beyond the number of inserts we sent (§4.4.3).
    IncrementBeyondInsertCount {
        /// The Known Received Count the increment would produce.
        known_received: u64,
        /// How many entries we have inserted.
        insert_count: u64,
    },
    /// The peer's SETTINGS changed the table capacity after we started using
    /// the dynamic table (§3.2.3).
    SettingsMismatch,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated representation"),
            Self::IntegerOverflow => f.write_str("integer exceeds 62 bits or uses too many octets"),
            Self::StringTooLong => f.write_str("string literal exceeds the limit"),
            Self::InvalidHuffman => f.write_str("invalid Huffman-coded string"),
            Self::InvalidStaticIndex(i) => write!(f, "static table index {i} does not exist"),
            Self::InvalidDynamicIndex => f.write_str("reference to a missing, evicted or unannounced dynamic entry"),
            Self::InvalidRequiredInsertCount => f.write_str("invalid encoded Required Insert Count"),
            Self::InvalidBase => f.write_str("invalid Base"),
            Self::TooManyBlockedStreams => f.write_str("more blocked streams than SETTINGS_QPACK_BLOCKED_STREAMS"),
            Self::TooManyQueuedSections => f.write_str("too many field sections queued on a blocked stream"),
            Self::CapacityExceedsLimit { requested, max } => {
                write!(f, "dynamic table capacity {requested} exceeds the advertised maximum {max}")
            }
            Self::EntryTooLarge { size, capacity } => {
                write!(f, "entry of size {size} exceeds the dynamic table capacity {capacity}")
            }
            Self::InstructionTooLong => f.write_str("partial instruction exceeds the buffering limit"),
            Self::UnexpectedSectionAck(id) => {
                write!(f, "section acknowledgment for stream {id} without an unacknowledged section")
            }
            Self::ZeroIncrement => f.write_str("insert count increment of zero"),
            Self::IncrementBeyondInsertCount { known_received, insert_count } => {
                write!(f, "insert count increment to {known_received} exceeds the {insert_count} entries inserted")
            }
            Self::SettingsMismatch => f.write_str("peer changed SETTINGS_QPACK_MAX_TABLE_CAPACITY after use"),
        }
    }
}

/// Errors from the [`Encoder`] and [`Decoder`].
///
/// All variants but [`Error::FieldSectionTooLarge`] are QPACK errors of
/// RFC 9204 §6, which this crate treats as connection errors: the HTTP/3
/// layer closes the connection with [`Error::code`] (RFC 9204 §7.4 allows a
/// stream error for some of them; a connection error is always acceptable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// QPACK_DECOMPRESSION_FAILED: an encoded field section was invalid.
    DecompressionFailed(Reason),
    /// QPACK_ENCODER_STREAM_ERROR: the peer's encoder stream was invalid.
    EncoderStream(Reason),
    /// QPACK_DECODER_STREAM_ERROR: the peer's decoder stream was invalid.
    DecoderStream(Reason),
    /// The decoded field section exceeded our max field section size
    /// (RFC 9114 §4.2.2 accounting: name + value + 32 per field).
    ///
    /// Not a QPACK error: the decoder stays in sync (the section was
    /// acknowledged as processed), and the HTTP/3 layer can refuse the
    /// request (e.g. with a 431 response or H3_REQUEST_REJECTED).
    FieldSectionTooLarge {
        /// The limit that was exceeded.
        limit: u64,
    },
}

impl Error {
    /// The RFC 9204 §6 error code, or `None` for
    /// [`Error::FieldSectionTooLarge`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::DecompressionFailed(_) => Some(ErrorCode::DecompressionFailed),
            Self::EncoderStream(_) => Some(ErrorCode::EncoderStreamError),
            Self::DecoderStream(_) => Some(ErrorCode::DecoderStreamError),
            Self::FieldSectionTooLarge { .. } => None,
        }
    }

    /// The detailed reason, if this is a QPACK error.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Self::DecompressionFailed(r) | Self::EncoderStream(r) | Self::DecoderStream(r) => Some(r),
            Self::FieldSectionTooLarge { .. } => None,
        }
    }

    /// Whether the connection must be closed (every QPACK error).
    pub fn is_connection_error(&self) -> bool {
        self.code().is_some()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DecompressionFailed(r) => write!(f, "QPACK_DECOMPRESSION_FAILED: {r}"),
            Self::EncoderStream(r) => write!(f, "QPACK_ENCODER_STREAM_ERROR: {r}"),
            Self::DecoderStream(r) => write!(f, "QPACK_DECODER_STREAM_ERROR: {r}"),
            Self::FieldSectionTooLarge { limit } => write!(f, "field section exceeds the size limit of {limit}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<prim::PrimError> for Reason {
    fn from(e: prim::PrimError) -> Self {
        match e {
            prim::PrimError::Truncated => Self::Truncated,
            prim::PrimError::Overflow => Self::IntegerOverflow,
            prim::PrimError::TooLong => Self::StringTooLong,
            prim::PrimError::Huffman => Self::InvalidHuffman,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_match_rfc_9204_section_6() {
        assert_eq!(ErrorCode::DecompressionFailed.value(), 0x200);
        assert_eq!(ErrorCode::EncoderStreamError.value(), 0x201);
        assert_eq!(ErrorCode::DecoderStreamError.value(), 0x202);
        assert_eq!(Error::DecompressionFailed(Reason::Truncated).code(), Some(ErrorCode::DecompressionFailed));
        assert_eq!(Error::EncoderStream(Reason::Truncated).code(), Some(ErrorCode::EncoderStreamError));
        assert_eq!(Error::DecoderStream(Reason::ZeroIncrement).code(), Some(ErrorCode::DecoderStreamError));
        let too_large = Error::FieldSectionTooLarge { limit: 10 };
        assert_eq!(too_large.code(), None);
        assert!(!too_large.is_connection_error());
        assert!(Error::DecoderStream(Reason::ZeroIncrement).is_connection_error());
    }

    #[test]
    fn display_names_the_code() {
        let e = Error::EncoderStream(Reason::CapacityExceedsLimit { requested: 5000, max: 4096 });
        assert_eq!(
            e.to_string(),
            "QPACK_ENCODER_STREAM_ERROR: dynamic table capacity 5000 exceeds the advertised maximum 4096"
        );
        assert!(Error::FieldSectionTooLarge { limit: 7 }.to_string().contains("7"));
    }

    #[test]
    fn field_size_counts_overhead() {
        assert_eq!(FieldLine::new("ab", "cde").size(), 37);
    }
}
