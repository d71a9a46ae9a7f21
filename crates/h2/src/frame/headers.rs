//! HEADERS (RFC 9113 §6.2) and CONTINUATION (§6.10).

use super::{flag, kind, strip_padding, Head};
use crate::error::{Error, Reason};
use bytes::Bytes;

/// RFC 7540 priority fields, carried by HEADERS (PRIORITY flag) and PRIORITY frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityFields {
    /// Stream this one depends on.
    pub dependency: u32,
    /// Exclusive flag.
    pub exclusive: bool,
    /// Weight 1–256.
    pub weight: u16,
}

impl PriorityFields {
    /// Parse five bytes.
    pub(crate) fn parse(b: &[u8]) -> Self {
        let raw = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Self { dependency: raw & 0x7fff_ffff, exclusive: raw & 0x8000_0000 != 0, weight: u16::from(b[4]) + 1 }
    }

    /// Append five bytes.
    pub(crate) fn encode(&self, dst: &mut Vec<u8>) {
        let raw = self.dependency | if self.exclusive { 0x8000_0000 } else { 0 };
        dst.extend_from_slice(&raw.to_be_bytes());
        dst.push((self.weight.clamp(1, 256) - 1) as u8);
    }
}

/// A HEADERS frame: the first fragment of a header block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Stream.
    pub stream: u32,
    /// Block fragment.
    pub fragment: Bytes,
    /// END_STREAM.
    pub end_stream: bool,
    /// END_HEADERS.
    pub end_headers: bool,
    /// RFC 7540 priority fields, if the PRIORITY flag was set.
    pub priority: Option<PriorityFields>,
}

impl Headers {
    /// Decode.
    pub fn decode(head: &Head, payload: Bytes) -> Result<Self, Error> {
        if head.stream == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let (mut start, end) = strip_padding(head, &payload)?;
        let mut priority = None;
        if head.has(flag::PRIORITY) {
            if end - start < 5 {
                return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "HEADERS too short for priority fields"));
            }
            // A dependency on itself (§5.3.1) is checked by the connection once the block is
            // decoded, so that the HPACK context stays in sync.
            priority = Some(PriorityFields::parse(&payload[start..start + 5]));
            start += 5;
        }
        Ok(Self {
            stream: head.stream,
            fragment: payload.slice(start..end),
            end_stream: head.has(flag::END_STREAM),
            end_headers: head.has(flag::END_HEADERS),
            priority,
        })
    }

    /// Encode a header block as one HEADERS frame and as many CONTINUATION frames as
    /// `max_frame` requires.
    pub fn encode(stream: u32, block: &[u8], end_stream: bool, max_frame: usize, dst: &mut Vec<u8>) {
        let end = if end_stream { flag::END_STREAM } else { 0 };
        if block.len() <= max_frame {
            // One frame, as nearly every block is: no chunking.
            Head { len: block.len() as u32, kind: kind::HEADERS, flags: end | flag::END_HEADERS, stream }.encode(dst);
            dst.extend_from_slice(block);
            return;
        }
        let mut chunks = block.chunks(max_frame.max(1));
        let first = chunks.next().unwrap_or(&[]);
        let rest = block.len() > first.len();
        let mut flags = end;
        if !rest {
            flags |= flag::END_HEADERS;
        }
        Head { len: first.len() as u32, kind: kind::HEADERS, flags, stream }.encode(dst);
        dst.extend_from_slice(first);
        let mut chunks = chunks.peekable();
        while let Some(c) = chunks.next() {
            let flags = if chunks.peek().is_none() { flag::END_HEADERS } else { 0 };
            Head { len: c.len() as u32, kind: kind::CONTINUATION, flags, stream }.encode(dst);
            dst.extend_from_slice(c);
        }
    }
}

/// A CONTINUATION frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continuation {
    /// Stream.
    pub stream: u32,
    /// Block fragment.
    pub fragment: Bytes,
    /// END_HEADERS.
    pub end_headers: bool,
}

impl Continuation {
    /// Decode.
    pub fn decode(head: &Head, payload: Bytes) -> Self {
        Self { stream: head.stream, fragment: payload, end_headers: head.has(flag::END_HEADERS) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_into_continuations() {
        let block = vec![7u8; 40];
        let mut v = Vec::new();
        Headers::encode(3, &block, true, 16, &mut v);
        let h1 = Head::parse(&v).unwrap();
        assert_eq!((h1.len, h1.kind, h1.flags), (16, kind::HEADERS, flag::END_STREAM));
        let h2 = Head::parse(&v[25..]).unwrap();
        assert_eq!((h2.len, h2.kind, h2.flags), (16, kind::CONTINUATION, 0));
        let h3 = Head::parse(&v[50..]).unwrap();
        assert_eq!((h3.len, h3.kind, h3.flags), (8, kind::CONTINUATION, flag::END_HEADERS));
        assert_eq!(v.len(), 27 + 40);
        // A block of exactly the frame size, or an empty one: one frame.
        for (len, end, flags) in [(16, false, flag::END_HEADERS), (0, true, flag::END_HEADERS | flag::END_STREAM)] {
            let mut v = Vec::new();
            Headers::encode(5, &block[..len], end, 16, &mut v);
            let h = Head::parse(&v).unwrap();
            assert_eq!((h.len as usize, h.kind, h.flags, h.stream, v.len()), (len, kind::HEADERS, flags, 5, 9 + len));
        }
    }

    #[test]
    fn priority_and_padding() {
        // PADDED | PRIORITY | END_HEADERS, pad 2, dep 1 exclusive, weight 16, fragment "ab".
        let payload = Bytes::from_static(&[2, 0x80, 0, 0, 1, 15, b'a', b'b', 0, 0]);
        let head = Head { len: 10, kind: kind::HEADERS, flags: 0x2c, stream: 3 };
        let h = Headers::decode(&head, payload).unwrap();
        assert_eq!(&h.fragment[..], b"ab");
        assert_eq!(h.priority, Some(PriorityFields { dependency: 1, exclusive: true, weight: 16 }));
        let short = Bytes::from_static(&[0, 0, 0, 3]);
        let head = Head { len: 4, kind: kind::HEADERS, flags: 0x24, stream: 3 };
        assert_eq!(Headers::decode(&head, short).unwrap_err().reason(), Reason::FRAME_SIZE_ERROR);
    }
}
