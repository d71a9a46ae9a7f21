//! HTTP/2 frames (RFC 9113 §4 and §6): one file per frame type, each with a symmetric
//! `decode(head, payload)` / `encode(dst)` pair.

mod data;
mod goaway;
mod headers;
mod origin;
mod ping;
mod priority;
mod priority_update;
mod rst_stream;
mod settings;
mod window_update;

pub use data::Data;
pub use goaway::GoAway;
pub use headers::{Continuation, Headers, PriorityFields};
pub use origin::Origin;
pub use ping::Ping;
pub use priority::Priority;
pub use priority_update::PriorityUpdate;
pub use rst_stream::RstStream;
pub use settings::{Setting, Settings};
pub use window_update::WindowUpdate;

use crate::error::{Error, Reason};

/// Length of the fixed frame header (RFC 9113 §4.1).
pub const HEADER_LEN: usize = 9;

/// The largest frame the server engine accepts, announced as its SETTINGS_MAX_FRAME_SIZE
/// (RFC 9113 §6.5.2: 2^14, the default, to 2^24-1). A peer that honours it (hyper's client
/// does) sends a bulk upload in a quarter of the DATA frames, and each frame costs the receive
/// path an event, a hand-over to the handler and a flow-control credit. Without the engine's
/// split of a DATA frame cut by the end of a read buffer, larger frames cost more than they
/// save: the cut part is copied to the next buffer, and a 64 KiB frame almost always is cut
/// (200 MB upload from `sluice put`, server under callgrind: 1,184 M instructions with 64 KiB
/// frames, 1,067 M with 16 KiB ones, 985 M with 64 KiB frames split; HTTP/1.1 961 M).
pub const MAX_FRAME_SIZE: u32 = 64 * 1024;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type codes (RFC 9113 §6, RFC 8336, RFC 9218 §7.1).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (deprecated by RFC 9113 §5.3.2, still parsed).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (a server never accepts one).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
    /// ORIGIN (RFC 8336).
    pub const ORIGIN: u8 = 0xc;
    /// PRIORITY_UPDATE (RFC 9218 §7.1).
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

/// Frame flags (RFC 9113 §6).
pub mod flag {
    /// END_STREAM on DATA and HEADERS.
    pub const END_STREAM: u8 = 0x1;
    /// ACK on SETTINGS and PING.
    pub const ACK: u8 = 0x1;
    /// END_HEADERS on HEADERS and CONTINUATION.
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED on DATA and HEADERS.
    pub const PADDED: u8 = 0x8;
    /// PRIORITY on HEADERS.
    pub const PRIORITY: u8 = 0x20;
}

/// The 9-byte frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit is masked off).
    pub stream: u32,
}

impl Head {
    /// Parse a header from at least [`HEADER_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Self {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            // RFC 9113 §4.1: the reserved bit MUST be ignored when receiving.
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }

    /// Append the header to `dst`.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        debug_assert!(self.len < 1 << 24);
        let l = self.len.to_be_bytes();
        dst.extend_from_slice(&[l[1], l[2], l[3], self.kind, self.flags]);
        dst.extend_from_slice(&(self.stream & 0x7fff_ffff).to_be_bytes());
    }

    /// Whether `f` is set.
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Strip padding (RFC 9113 §6.1, §6.2): returns the payload without the pad-length byte and
/// the padding. Padding that fills the whole payload is a PROTOCOL_ERROR.
pub(crate) fn strip_padding(head: &Head, payload: &[u8]) -> Result<(usize, usize), Error> {
    if !head.has(flag::PADDED) {
        return Ok((0, payload.len()));
    }
    let Some(&pad) = payload.first() else {
        return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "padded frame without pad length"));
    };
    let pad = pad as usize;
    if pad >= payload.len() {
        return Err(Error::conn(Reason::PROTOCOL_ERROR, "padding as long as the frame"));
    }
    Ok((1, payload.len() - pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trip_masks_reserved_bit() {
        let h = Head { len: 0x123456, kind: 1, flags: 5, stream: 7 };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v, [0x12, 0x34, 0x56, 1, 5, 0, 0, 0, 7]);
        assert_eq!(Head::parse(&v), Some(h));
        v[5] |= 0x80;
        assert_eq!(Head::parse(&v).map(|h| h.stream), Some(7));
        assert_eq!(Head::parse(&v[..8]), None);
    }

    #[test]
    fn padding_rules() {
        let h = Head { len: 4, kind: 0, flags: flag::PADDED, stream: 1 };
        assert_eq!(strip_padding(&h, &[2, b'a', 0, 0]), Ok((1, 2)));
        assert_eq!(strip_padding(&h, &[3, 0, 0, 0]), Ok((1, 1)));
        assert!(strip_padding(&h, &[4, 0, 0, 0]).is_err());
        assert!(strip_padding(&h, &[]).is_err());
    }
}
