//! RST_STREAM (RFC 9113 §6.4).

use super::{kind, Head};
use crate::error::{Error, Reason};

/// A RST_STREAM frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RstStream {
    /// Stream.
    pub stream: u32,
    /// Error code.
    pub reason: Reason,
}

impl RstStream {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        if head.stream == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        let Ok(b) = <[u8; 4]>::try_from(payload) else {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "RST_STREAM length is not 4"));
        };
        Ok(Self { stream: head.stream, reason: Reason(u32::from_be_bytes(b)) })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        Head { len: 4, kind: kind::RST_STREAM, flags: 0, stream: self.stream }.encode(dst);
        dst.extend_from_slice(&self.reason.0.to_be_bytes());
    }
}
