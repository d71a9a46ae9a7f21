//! DATA (RFC 9113 §6.1).

use super::{flag, kind, strip_padding, Head};
use crate::error::{Error, Reason};
use bytes::Bytes;

/// A DATA frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// Stream.
    pub stream: u32,
    /// Payload without padding.
    pub data: Bytes,
    /// END_STREAM.
    pub end_stream: bool,
    /// The whole frame length including padding: what flow control counts (§6.9.1).
    pub flow_len: u32,
}

impl Data {
    /// Decode.
    pub fn decode(head: &Head, payload: Bytes) -> Result<Self, Error> {
        if head.stream == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let (start, end) = strip_padding(head, &payload)?;
        Ok(Self {
            stream: head.stream,
            data: payload.slice(start..end),
            end_stream: head.has(flag::END_STREAM),
            flow_len: head.len,
        })
    }

    /// Encode a DATA frame header followed by `data` (never padded).
    pub fn encode(stream: u32, data: &[u8], end_stream: bool, dst: &mut Vec<u8>) {
        Head { len: data.len() as u32, kind: kind::DATA, flags: if end_stream { flag::END_STREAM } else { 0 }, stream }
            .encode(dst);
        dst.extend_from_slice(data);
    }
}
