//! PING (RFC 9113 §6.7).

use super::{flag, kind, Head};
use crate::error::{Error, Reason};

/// A PING frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ping {
    /// ACK flag.
    pub ack: bool,
    /// Opaque data.
    pub payload: [u8; 8],
}

impl Ping {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        if head.stream != 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "PING on a stream"));
        }
        let Ok(payload) = <[u8; 8]>::try_from(payload) else {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "PING length is not 8"));
        };
        Ok(Self { ack: head.has(flag::ACK), payload })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        let flags = if self.ack { flag::ACK } else { 0 };
        Head { len: 8, kind: kind::PING, flags, stream: 0 }.encode(dst);
        dst.extend_from_slice(&self.payload);
    }
}
