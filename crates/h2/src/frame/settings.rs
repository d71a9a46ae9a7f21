//! SETTINGS (RFC 9113 §6.5).

use super::{flag, kind, Head};
use crate::error::{Error, Reason};

/// One setting parameter (RFC 9113 §6.5.2, RFC 9218 §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// SETTINGS_HEADER_TABLE_SIZE (0x1).
    HeaderTableSize(u32),
    /// SETTINGS_ENABLE_PUSH (0x2).
    EnablePush(u32),
    /// SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
    MaxConcurrentStreams(u32),
    /// SETTINGS_INITIAL_WINDOW_SIZE (0x4).
    InitialWindowSize(u32),
    /// SETTINGS_MAX_FRAME_SIZE (0x5).
    MaxFrameSize(u32),
    /// SETTINGS_MAX_HEADER_LIST_SIZE (0x6).
    MaxHeaderListSize(u32),
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (0x8, RFC 8441).
    EnableConnectProtocol(u32),
    /// SETTINGS_NO_RFC7540_PRIORITIES (0x9, RFC 9218 §2.1).
    NoRfc7540Priorities(u32),
    /// Anything else: ignored (§6.5.2).
    Unknown(u16, u32),
}

impl Setting {
    pub(crate) fn id_value(self) -> (u16, u32) {
        match self {
            Self::HeaderTableSize(v) => (0x1, v),
            Self::EnablePush(v) => (0x2, v),
            Self::MaxConcurrentStreams(v) => (0x3, v),
            Self::InitialWindowSize(v) => (0x4, v),
            Self::MaxFrameSize(v) => (0x5, v),
            Self::MaxHeaderListSize(v) => (0x6, v),
            Self::EnableConnectProtocol(v) => (0x8, v),
            Self::NoRfc7540Priorities(v) => (0x9, v),
            Self::Unknown(id, v) => (id, v),
        }
    }

    fn from_id_value(id: u16, v: u32) -> Result<Self, Error> {
        Ok(match id {
            0x1 => Self::HeaderTableSize(v),
            0x2 => {
                if v > 1 {
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1"));
                }
                Self::EnablePush(v)
            }
            0x3 => Self::MaxConcurrentStreams(v),
            0x4 => {
                if v > crate::flow::MAX_WINDOW {
                    return Err(Error::conn(Reason::FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"));
                }
                Self::InitialWindowSize(v)
            }
            0x5 => {
                if !(16_384..=16_777_215).contains(&v) {
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range"));
                }
                Self::MaxFrameSize(v)
            }
            0x6 => Self::MaxHeaderListSize(v),
            0x8 => {
                if v > 1 {
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "SETTINGS_ENABLE_CONNECT_PROTOCOL not 0 or 1"));
                }
                Self::EnableConnectProtocol(v)
            }
            0x9 => {
                if v > 1 {
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "SETTINGS_NO_RFC7540_PRIORITIES not 0 or 1"));
                }
                Self::NoRfc7540Priorities(v)
            }
            _ => Self::Unknown(id, v),
        })
    }
}

/// A SETTINGS frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// ACK flag (then `values` is empty).
    pub ack: bool,
    /// Parameters in order.
    pub values: Vec<Setting>,
}

/// Most parameters one SETTINGS frame may carry before we call it a flood: the RFC defines
/// seven, so 64 leaves room for extensions and duplicates.
const MAX_PARAMS: usize = 64;

impl Settings {
    /// Decode.
    pub fn decode(head: &Head, payload: &[u8]) -> Result<Self, Error> {
        if head.stream != 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        let ack = head.has(flag::ACK);
        if ack {
            if !payload.is_empty() {
                return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            return Ok(Self { ack, values: Vec::new() });
        }
        if payload.len() % 6 != 0 {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6"));
        }
        if payload.len() / 6 > MAX_PARAMS {
            return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "too many SETTINGS parameters"));
        }
        let values = payload
            .chunks_exact(6)
            .map(|c| {
                Setting::from_id_value(u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]]))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { ack, values })
    }

    /// Encode.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        let flags = if self.ack { flag::ACK } else { 0 };
        Head { len: 6 * self.values.len() as u32, kind: kind::SETTINGS, flags, stream: 0 }.encode(dst);
        for s in &self.values {
            let (id, v) = s.id_value();
            dst.extend_from_slice(&id.to_be_bytes());
            dst.extend_from_slice(&v.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(len: usize, flags: u8) -> Head {
        Head { len: len as u32, kind: kind::SETTINGS, flags, stream: 0 }
    }

    #[test]
    fn round_trip() {
        let s = Settings {
            ack: false,
            values: vec![
                Setting::MaxConcurrentStreams(100),
                Setting::InitialWindowSize(65535),
                Setting::Unknown(0x99, 7),
            ],
        };
        let mut v = Vec::new();
        s.encode(&mut v);
        let h = Head::parse(&v).unwrap();
        assert_eq!(Settings::decode(&h, &v[9..]).unwrap(), s);
    }

    #[test]
    fn invalid_values() {
        let bad = |id: u16, v: u32| {
            let mut p = id.to_be_bytes().to_vec();
            p.extend_from_slice(&v.to_be_bytes());
            Settings::decode(&head(6, 0), &p).unwrap_err().reason()
        };
        assert_eq!(bad(0x2, 2), Reason::PROTOCOL_ERROR);
        assert_eq!(bad(0x4, 1 << 31), Reason::FLOW_CONTROL_ERROR);
        assert_eq!(bad(0x5, 16_383), Reason::PROTOCOL_ERROR);
        assert_eq!(bad(0x5, 1 << 24), Reason::PROTOCOL_ERROR);
        assert_eq!(Settings::decode(&head(5, 0), &[0; 5]).unwrap_err().reason(), Reason::FRAME_SIZE_ERROR);
        assert_eq!(Settings::decode(&head(6, flag::ACK), &[0; 6]).unwrap_err().reason(), Reason::FRAME_SIZE_ERROR);
    }
}
