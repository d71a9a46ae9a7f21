//! WINDOW_UPDATE (RFC 9113 §6.9).

use super::{kind, Head};
use crate::error::{Error, Reason};

/// A WINDOW_UPDATE frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowUpdate {
    /// Stream, 0 for the connection.
    pub stream: u32,
    /// Increment (1 to 2^31-1).
    pub increment: u32,
}

impl WindowUpdate {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        let Ok(b) = <[u8; 4]>::try_from(payload) else {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "WINDOW_UPDATE length is not 4"));
        };
        // The reserved bit is ignored (§6.9).
        let increment = u32::from_be_bytes(b) & 0x7fff_ffff;
        if increment == 0 {
            // §6.9: a zero increment is a PROTOCOL_ERROR, of the scope of the frame.
            return Err(if head.stream == 0 {
                Error::conn(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE increment of 0")
            } else {
                Error::stream(head.stream, Reason::PROTOCOL_ERROR, "WINDOW_UPDATE increment of 0")
            });
        }
        Ok(Self { stream: head.stream, increment })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        Head { len: 4, kind: kind::WINDOW_UPDATE, flags: 0, stream: self.stream }.encode(dst);
        dst.extend_from_slice(&(self.increment & 0x7fff_ffff).to_be_bytes());
    }
}
