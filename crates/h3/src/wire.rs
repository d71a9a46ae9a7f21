//! The HTTP/3 wire format (RFC 9114 §6, §7; RFC 9000 §2.1, §16), for drivers and clients that
//! put bytes on QUIC streams themselves, so that they need not re-implement it.
//!
//! - [`varint`]: QUIC variable-length integers, in which every type, length, setting and id is
//!   written.
//! - [`FrameHeader`], [`encode_frame`]: `Type (i), Length (i), Payload (..)`; the frame type
//!   values in [`frame_type`]. [`encode_settings`] / [`parse_settings`] and
//!   [`encode_origin`] / [`parse_origin`] for the control-stream frames a client needs.
//! - [`StreamKind`], [`is_client_initiated`], [`is_unidirectional`]: what a QUIC stream id says
//!   about its stream; [`stream_type`]: the type that opens each unidirectional stream;
//!   [`setting`]: SETTINGS identifiers.
//!
//! These are the functions the engine itself uses; errors carry the engine's [`Code`](crate::Code)s.

/// QUIC variable-length integers (RFC 9000 §16): 1, 2, 4 or 8 bytes, the two high bits of the
/// first byte giving the length.
pub mod varint {
    pub use crate::varint::{decode, encode, len, Partial, MAX};
}

pub use crate::frame::kind as frame_type;
pub use crate::frame::{
    encode as encode_frame, encode_origin, encode_settings, parse_origin, parse_settings, setting, stream_type,
    FrameHeader,
};
pub use crate::ids::{is_client_initiated, is_unidirectional, Kind as StreamKind};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_control_stream_round_trips() {
        // What a client writes first on its control stream, built from these pieces alone.
        let mut out = Vec::new();
        varint::encode(stream_type::CONTROL, &mut out);
        encode_settings(&[(setting::QPACK_MAX_TABLE_CAPACITY, 4096), (setting::QPACK_BLOCKED_STREAMS, 16)], &mut out);
        assert_eq!(out, [0x00, 0x04, 0x05, 0x01, 0x50, 0x00, 0x07, 0x10]);
        let mut partial = varint::Partial::default();
        let mut rest = &out[..];
        assert_eq!(partial.push(&mut rest), Some(stream_type::CONTROL));
        let (head, n) = FrameHeader::decode(rest).unwrap();
        assert_eq!(head, FrameHeader { ty: frame_type::SETTINGS, len: 5 });
        assert_eq!(parse_settings(&rest[n..]).unwrap(), [(0x01, 4096), (0x07, 16)]);
        assert_eq!(StreamKind::of(2), StreamKind::ClientUni);
        assert!(is_client_initiated(2) && is_unidirectional(2));
    }
}
