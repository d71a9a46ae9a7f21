//! ORIGIN (RFC 8336 §2): the origins a server is authoritative for on this connection.

use super::{kind, Head};
use crate::error::{Error, Reason};

/// An ORIGIN frame: a list of ASCII serialised origins (RFC 6454 §6.2), e.g.
/// `https://example.com` or `https://example.com:8443`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// The origins, in order.
    pub origins: Vec<String>,
}

impl Origin {
    /// Decode (for clients and tests; a server ignores the frame, RFC 8336 §2.1). On a stream
    /// other than 0 the frame is ignored too, so this reports that as `None`; a truncated entry
    /// is a FRAME_SIZE_ERROR.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Option<Self>, Error> {
        if head.stream != 0 {
            return Ok(None);
        }
        Self::decode_payload(payload).map(Some)
    }

    /// Decode the entries alone: the payload layout RFC 9412 §2 keeps for HTTP/3's ORIGIN
    /// frame.
    pub fn decode_payload(payload: &[u8]) -> Result<Self, Error> {
        let mut origins = Vec::new();
        let mut p = payload;
        while !p.is_empty() {
            if p.len() < 2 {
                return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "ORIGIN entry without its length"));
            }
            let n = usize::from(u16::from_be_bytes([p[0], p[1]]));
            let Some(entry) = p.get(2..2 + n) else {
                return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "ORIGIN entry longer than the frame"));
            };
            origins.push(String::from_utf8_lossy(entry).into_owned());
            p = &p[2 + n..];
        }
        Ok(Self { origins })
    }

    /// Encode on stream 0 with no flags. Entries longer than 65,535 bytes cannot be encoded
    /// and are left out.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        let entries: Vec<&String> = self.origins.iter().filter(|o| o.len() <= usize::from(u16::MAX)).collect();
        let len: usize = entries.iter().map(|o| 2 + o.len()).sum();
        Head { len: len as u32, kind: kind::ORIGIN, flags: 0, stream: 0 }.encode(dst);
        for o in entries {
            dst.extend_from_slice(&(o.len() as u16).to_be_bytes());
            dst.extend_from_slice(o.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_LEN;

    #[test]
    fn round_trip_with_exact_bytes() {
        let f = Origin { origins: vec!["https://a.test".into(), "https://b.test:8443".into()] };
        let mut v = Vec::new();
        f.encode(&mut v);
        // 2 + 14 + 2 + 19 = 37 bytes of payload, type 0xc, no flags, stream 0.
        assert_eq!(&v[..HEADER_LEN], &[0, 0, 37, 0xc, 0, 0, 0, 0, 0]);
        assert_eq!(&v[HEADER_LEN..HEADER_LEN + 16], b"\x00\x0ehttps://a.test");
        let head = Head::parse(&v).unwrap();
        assert_eq!(Origin::decode(&head, &v[HEADER_LEN..]).unwrap(), Some(f));
        // An empty frame is valid: the connection serves no origin besides the one it was
        // opened for (RFC 8336 §2.3).
        let mut e = Vec::new();
        Origin::default().encode(&mut e);
        assert_eq!(e, [0, 0, 0, 0xc, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn truncated_and_misplaced_frames() {
        let head = Head { len: 3, kind: kind::ORIGIN, flags: 0, stream: 0 };
        assert!(Origin::decode(&head, &[0, 5, b'h']).is_err());
        assert!(Origin::decode(&head, &[0]).is_err());
        let on_stream = Head { stream: 1, ..head };
        assert_eq!(Origin::decode(&on_stream, &[0, 5, b'h']).unwrap(), None);
    }
}
