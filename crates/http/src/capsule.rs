//! HTTP Datagrams and the Capsule Protocol (RFC 9297), as CONNECT-UDP (RFC 9298) uses them:
//! capsules are type-length-value records in a tunnel stream's data (HTTP/2, and HTTP/3
//! without QUIC DATAGRAM); a DATAGRAM capsule (type 0x00) carries one HTTP Datagram, whose
//! payload starts with a Context ID (RFC 9298 §4: 0 is a UDP payload). Over HTTP/3 an HTTP
//! Datagram also rides a QUIC DATAGRAM frame, prefixed with its request stream's id divided by
//! four (RFC 9297 §2.1). Integers are QUIC variable-length integers (RFC 9000 §16).

use bytes::{Buf, Bytes, BytesMut};

use crate::varint::{decode as get_varint, encode as put_varint};

/// The DATAGRAM capsule type (RFC 9297 §3.5).
pub const DATAGRAM: u64 = 0x00;

/// A DATAGRAM capsule carrying a UDP payload (Context ID 0).
pub fn udp_capsule(payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 10);
    put_varint(DATAGRAM, &mut out);
    put_varint(payload.len() as u64 + 1, &mut out);
    out.push(0);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// A QUIC DATAGRAM frame's payload carrying a UDP payload (Context ID 0) for the request on
/// stream `stream`.
pub fn udp_quic_datagram(stream: u64, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 9);
    put_varint(stream / 4, &mut out);
    out.push(0);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// The UDP payload of an HTTP Datagram (after its Context ID), or `None` when the Context ID
/// is not 0 (RFC 9298 §4: unknown ones are dropped) or the datagram is empty.
pub fn udp_payload(mut datagram: Bytes) -> Option<Bytes> {
    let (ctx, n) = get_varint(&datagram)?;
    if ctx != 0 {
        return None;
    }
    datagram.advance(n);
    Some(datagram)
}

/// Why a capsule stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapsuleError {
    /// A capsule longer than the reader's bound.
    TooLong,
    /// The stream ended inside a capsule (RFC 9297 §3.3: malformed).
    Truncated,
}

/// Capsules out of a stream's data, as it arrives in pieces.
#[derive(Debug)]
pub struct CapsuleReader {
    buf: BytesMut,
    max: usize,
}

impl CapsuleReader {
    /// A reader that refuses capsules whose value is longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { buf: BytesMut::new(), max }
    }

    /// Take more of the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole capsule (type, value), if one is buffered.
    pub fn next_capsule(&mut self) -> Result<Option<(u64, Bytes)>, CapsuleError> {
        let Some((ty, a)) = get_varint(&self.buf) else { return Ok(None) };
        let Some((len, b)) = get_varint(&self.buf[a..]) else { return Ok(None) };
        if len > self.max as u64 {
            return Err(CapsuleError::TooLong);
        }
        let total = a + b + len as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        self.buf.advance(a + b);
        Ok(Some((ty, self.buf.split_to(len as usize).freeze())))
    }

    /// The stream ended: an error if a capsule was cut short.
    pub fn finish(&self) -> Result<(), CapsuleError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(CapsuleError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capsules_come_out_whole_however_the_stream_is_cut() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&udp_capsule(b"hello"));
        // An unknown capsule type (RFC 9297 §3.2: skipped by the receiver).
        put_varint(0x2a, &mut stream);
        put_varint(3, &mut stream);
        stream.extend_from_slice(b"xyz");
        stream.extend_from_slice(&udp_capsule(&[7u8; 300]));
        for cut in 1..stream.len() {
            let mut r = CapsuleReader::new(1500);
            let mut got = Vec::new();
            for piece in stream.chunks(cut) {
                r.push(piece);
                while let Some(c) = r.next_capsule().unwrap() {
                    got.push(c);
                }
            }
            r.finish().unwrap();
            assert_eq!(got.len(), 3);
            assert_eq!(udp_payload(got[0].1.clone()).as_deref(), Some(&b"hello"[..]));
            assert_eq!(got[1], (0x2a, Bytes::from_static(b"xyz")));
            assert_eq!(udp_payload(got[2].1.clone()).unwrap().len(), 300);
        }
    }

    #[test]
    fn oversized_and_truncated_capsules_are_errors() {
        let mut r = CapsuleReader::new(100);
        r.push(&udp_capsule(&[0u8; 200]));
        assert_eq!(r.next_capsule(), Err(CapsuleError::TooLong));
        let mut r = CapsuleReader::new(100);
        r.push(&udp_capsule(b"abc")[..4]);
        assert_eq!(r.next_capsule(), Ok(None));
        assert_eq!(r.finish(), Err(CapsuleError::Truncated));
    }

    #[test]
    fn only_context_zero_is_a_udp_payload() {
        assert_eq!(udp_payload(Bytes::from_static(&[0, 1, 2])).as_deref(), Some(&[1u8, 2][..]));
        assert_eq!(udp_payload(Bytes::from_static(&[2, 1, 2])), None);
        assert_eq!(udp_payload(Bytes::new()), None);
        let d = udp_quic_datagram(8, b"x");
        assert_eq!(&d[..], &[2, 0, b'x']);
    }
}
