//! PRIORITY_UPDATE (RFC 9218 §7.1): a new priority for a request stream, on stream 0.

use super::{kind, Head};
use crate::error::{Error, Reason};

/// A PRIORITY_UPDATE frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityUpdate {
    /// The stream whose priority changes.
    pub prioritized: u32,
    /// The Priority Field Value (same syntax as the `priority` header, RFC 9218 §4).
    pub value: Vec<u8>,
}

/// Longest field value kept; a priority is a handful of bytes (`u=7, i`).
const MAX_VALUE: usize = 1024;

impl PriorityUpdate {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        // §7.1: sent on stream 0 only; anything else is a connection error.
        if head.stream != 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "PRIORITY_UPDATE on a stream"));
        }
        if payload.len() < 4 {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "PRIORITY_UPDATE shorter than 4 bytes"));
        }
        let prioritized = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if prioritized == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "PRIORITY_UPDATE for stream 0"));
        }
        let value = payload[4..payload.len().min(4 + MAX_VALUE)].to_vec();
        Ok(Self { prioritized, value })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        Head { len: 4 + self.value.len() as u32, kind: kind::PRIORITY_UPDATE, flags: 0, stream: 0 }.encode(dst);
        dst.extend_from_slice(&(self.prioritized & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let f = PriorityUpdate { prioritized: 5, value: b"u=0".to_vec() };
        let mut v = Vec::new();
        f.encode(&mut v);
        let h = Head::parse(&v).unwrap();
        assert_eq!(h.kind, kind::PRIORITY_UPDATE);
        assert_eq!(PriorityUpdate::decode(&h, &v[9..]).unwrap(), f);
        let on_stream = Head { stream: 1, ..h };
        assert_eq!(PriorityUpdate::decode(&on_stream, &v[9..]).unwrap_err().reason(), Reason::PROTOCOL_ERROR);
        assert_eq!(PriorityUpdate::decode(&h, &[0, 0, 0]).unwrap_err().reason(), Reason::FRAME_SIZE_ERROR);
        assert_eq!(PriorityUpdate::decode(&h, &[0, 0, 0, 0, b'u']).unwrap_err().reason(), Reason::PROTOCOL_ERROR);
    }
}
