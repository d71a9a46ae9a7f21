//! PRIORITY (RFC 9113 §6.3; the RFC 7540 scheme is deprecated but the frame is still parsed
//! and kept for the scheduler).

use super::headers::PriorityFields;
use super::{kind, Head};
use crate::error::{Error, Reason};

/// A PRIORITY frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// Stream.
    pub stream: u32,
    /// Dependency, exclusivity and weight.
    pub fields: PriorityFields,
}

impl Priority {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        if head.stream == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "PRIORITY on stream 0"));
        }
        if payload.len() != 5 {
            // §6.3: a length other than 5 is a stream error of type FRAME_SIZE_ERROR.
            return Err(Error::stream(head.stream, Reason::FRAME_SIZE_ERROR, "PRIORITY length is not 5"));
        }
        let fields = PriorityFields::parse(payload);
        if fields.dependency == head.stream {
            // §5.3.1: a stream cannot depend on itself.
            return Err(Error::stream(head.stream, Reason::PROTOCOL_ERROR, "stream depends on itself"));
        }
        Ok(Self { stream: head.stream, fields })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        Head { len: 5, kind: kind::PRIORITY, flags: 0, stream: self.stream }.encode(dst);
        self.fields.encode(dst);
    }
}
