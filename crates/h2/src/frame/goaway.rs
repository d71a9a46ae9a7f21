//! GOAWAY (RFC 9113 §6.8).

use super::{kind, Head};
use crate::error::{Error, Reason};

/// A GOAWAY frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoAway {
    /// Highest stream the sender may have processed.
    pub last_stream: u32,
    /// Error code.
    pub reason: Reason,
    /// Debug data.
    pub debug: Vec<u8>,
}

impl GoAway {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        if head.stream != 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "GOAWAY on a stream"));
        }
        if payload.len() < 8 {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes"));
        }
        let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        // Keep at most a little debug data for the log; the rest is dropped.
        let debug = payload[8..payload.len().min(8 + 256)].to_vec();
        Ok(Self { last_stream: last & 0x7fff_ffff, reason: Reason(code), debug })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        Head { len: 8 + self.debug.len() as u32, kind: kind::GOAWAY, flags: 0, stream: 0 }.encode(dst);
        dst.extend_from_slice(&(self.last_stream & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&self.reason.0.to_be_bytes());
        dst.extend_from_slice(&self.debug);
    }
}
