//! HTTP/3 frames (RFC 9114 §7): `Type (i), Length (i), Payload (..)`. Types, the payload codecs
//! the server needs, and an incremental reader that takes stream bytes in pieces of any size.

use crate::error::{Code, Error};
use crate::varint;

/// Frame types (RFC 9114 §7.2, §11.2.1; RFC 9218 §7.2; RFC 9412 §2).
pub(crate) mod kind {
    pub(crate) const DATA: u64 = 0x00;
    pub(crate) const HEADERS: u64 = 0x01;
    pub(crate) const CANCEL_PUSH: u64 = 0x03;
    pub(crate) const SETTINGS: u64 = 0x04;
    pub(crate) const PUSH_PROMISE: u64 = 0x05;
    pub(crate) const GOAWAY: u64 = 0x07;
    pub(crate) const ORIGIN: u64 = 0x0c;
    pub(crate) const MAX_PUSH_ID: u64 = 0x0d;
    /// PRIORITY_UPDATE for a request stream (RFC 9218 §7.2).
    pub(crate) const PRIORITY_UPDATE_REQUEST: u64 = 0xf0700;
    /// PRIORITY_UPDATE for a push stream (RFC 9218 §7.2).
    pub(crate) const PRIORITY_UPDATE_PUSH: u64 = 0xf0701;

    /// Types HTTP/2 used with no HTTP/3 counterpart (PRIORITY, PING, WINDOW_UPDATE,
    /// CONTINUATION): receipt is H3_FRAME_UNEXPECTED (RFC 9114 §7.2.8).
    pub(crate) fn is_h2_reserved(ty: u64) -> bool {
        matches!(ty, 0x02 | 0x06 | 0x08 | 0x09)
    }
}

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub(crate) mod stream_type {
    pub(crate) const CONTROL: u64 = 0x00;
    pub(crate) const PUSH: u64 = 0x01;
    pub(crate) const QPACK_ENCODER: u64 = 0x02;
    pub(crate) const QPACK_DECODER: u64 = 0x03;
}

/// Setting identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5).
pub(crate) mod setting {
    pub(crate) const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    pub(crate) const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    pub(crate) const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    /// The reserved setting we send (RFC 9114 §7.2.4.1: ids `0x1f * N + 0x21` exercise the rule
    /// that unknown settings are ignored). N = 42 was picked arbitrarily.
    pub(crate) const GREASE: u64 = 0x1f * 42 + 0x21;
    /// Value of the reserved setting: any value will do.
    pub(crate) const GREASE_VALUE: u64 = 0x5c;

    /// Ids HTTP/2 defined with no HTTP/3 counterpart (ENABLE_PUSH, MAX_CONCURRENT_STREAMS,
    /// INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE): receipt is H3_SETTINGS_ERROR (RFC 9114 §7.2.4.1).
    pub(crate) fn is_h2_reserved(id: u64) -> bool {
        matches!(id, 0x02..=0x05)
    }
}

/// Append a frame header.
pub(crate) fn encode_header(ty: u64, len: u64, out: &mut Vec<u8>) {
    varint::encode(ty, out);
    varint::encode(len, out);
}

/// Append a whole frame.
pub(crate) fn encode(ty: u64, payload: &[u8], out: &mut Vec<u8>) {
    encode_header(ty, payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// The SETTINGS payload: pairs of identifier and value (RFC 9114 §7.2.4).
pub(crate) fn encode_settings(values: &[(u64, u64)], out: &mut Vec<u8>) {
    let mut payload = Vec::with_capacity(values.len() * 4);
    for &(id, v) in values {
        varint::encode(id, &mut payload);
        varint::encode(v, &mut payload);
    }
    encode(kind::SETTINGS, &payload, out);
}

/// The ORIGIN payload: `Origin-Len (16), ASCII-Origin (..)` per entry (RFC 9412 §2.1).
pub(crate) fn encode_origin(origins: &[String], out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    for o in origins {
        let Ok(n) = u16::try_from(o.len()) else { continue };
        payload.extend_from_slice(&n.to_be_bytes());
        payload.extend_from_slice(o.as_bytes());
    }
    encode(kind::ORIGIN, &payload, out);
}

/// Parse a SETTINGS payload. Truncated pairs are H3_FRAME_ERROR (RFC 9114 §7.1); a duplicate
/// id (§7.2.4 permits the error) or an HTTP/2-only id (§7.2.4.1) is H3_SETTINGS_ERROR.
pub(crate) fn parse_settings(mut p: &[u8]) -> Result<Vec<(u64, u64)>, Error> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    while !p.is_empty() {
        let truncated = || Error::conn(Code::H3_FRAME_ERROR, "truncated SETTINGS");
        let (id, n) = varint::decode(p).ok_or_else(truncated)?;
        let (v, m) = varint::decode(&p[n..]).ok_or_else(truncated)?;
        p = &p[n + m..];
        if setting::is_h2_reserved(id) {
            return Err(Error::conn(Code::H3_SETTINGS_ERROR, "HTTP/2 setting in SETTINGS"));
        }
        // The payload is bounded by max_frame_payload, so this scan is too.
        if out.iter().any(|&(seen, _)| seen == id) {
            return Err(Error::conn(Code::H3_SETTINGS_ERROR, "duplicate setting"));
        }
        out.push((id, v));
    }
    Ok(out)
}

/// Parse a payload that is exactly one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH): anything
/// else is H3_FRAME_ERROR (RFC 9114 §7.1, §10.8: lengths must match exactly).
pub(crate) fn parse_single_varint(p: &[u8], what: &'static str) -> Result<u64, Error> {
    match varint::decode(p) {
        Some((v, n)) if n == p.len() => Ok(v),
        _ => Err(Error::conn(Code::H3_FRAME_ERROR, what)),
    }
}

/// Parse a PRIORITY_UPDATE payload: `Prioritized Element ID (i), Priority Field Value (..)`
/// (RFC 9218 §7.2).
pub(crate) fn parse_priority_update(p: &[u8]) -> Result<(u64, &[u8]), Error> {
    let (id, n) = varint::decode(p).ok_or(Error::conn(Code::H3_FRAME_ERROR, "truncated PRIORITY_UPDATE"))?;
    Ok((id, &p[n..]))
}

/// What [`FrameReader::read`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read<'a> {
    /// A frame header. Before reading on, the caller chooses how its payload is consumed:
    /// [`FrameReader::buffer`], [`FrameReader::stream`] or [`FrameReader::skip`].
    Start { ty: u64, len: u64 },
    /// A buffered frame is complete.
    Frame { ty: u64, payload: Vec<u8> },
    /// A piece of a streamed frame's payload; `end` on the last piece (which may be empty when
    /// the frame is).
    Chunk { data: &'a [u8], end: bool },
}

#[derive(Debug)]
enum State {
    /// Reading a frame header (its bytes accumulate in `head`).
    Head,
    /// Header read; the caller has not chosen yet.
    Undecided {
        ty: u64,
        len: u64,
    },
    Buffer {
        ty: u64,
        len: usize,
        buf: Vec<u8>,
    },
    Stream {
        left: u64,
    },
    Skip {
        left: u64,
    },
}

/// Splits one stream's bytes into frames, whatever the read boundaries: headers can be split at
/// any byte, payloads are buffered, streamed or skipped as the caller decides per frame.
#[derive(Debug)]
pub(crate) struct FrameReader {
    /// A partial frame header: two varints, at most 16 bytes.
    head: [u8; 16],
    head_len: usize,
    state: State,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self { head: [0; 16], head_len: 0, state: State::Head }
    }
}

impl FrameReader {
    /// The next item from `input` (advancing it), or `None` when `input` is used up without one.
    pub(crate) fn read<'a>(&mut self, input: &mut &'a [u8]) -> Option<Read<'a>> {
        loop {
            match &mut self.state {
                State::Head => loop {
                    if let Some((ty, n)) = varint::decode(&self.head[..self.head_len]) {
                        if let Some((len, _)) = varint::decode(&self.head[n..self.head_len]) {
                            self.head_len = 0;
                            self.state = State::Undecided { ty, len };
                            return Some(Read::Start { ty, len });
                        }
                    }
                    let (&b, rest) = input.split_first()?;
                    // Invariant: both varints complete within 16 bytes, and the check above
                    // runs after every byte, so `head_len` < 16 here.
                    self.head[self.head_len] = b;
                    self.head_len += 1;
                    *input = rest;
                },
                // A caller bug: it must decide after Start. Skipping keeps the stream in sync.
                State::Undecided { len, .. } => {
                    debug_assert!(false, "frame payload mode not chosen");
                    self.state = State::Skip { left: *len };
                }
                State::Buffer { ty, len, buf } => {
                    let take = (*len - buf.len()).min(input.len());
                    buf.extend_from_slice(&input[..take]);
                    *input = &input[take..];
                    if buf.len() < *len {
                        return None;
                    }
                    let (ty, payload) = (*ty, std::mem::take(buf));
                    self.state = State::Head;
                    return Some(Read::Frame { ty, payload });
                }
                State::Stream { left } => {
                    if *left > 0 && input.is_empty() {
                        return None;
                    }
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(input.len());
                    let data = &input[..take];
                    *input = &input[take..];
                    *left -= take as u64;
                    let end = *left == 0;
                    if end {
                        self.state = State::Head;
                    }
                    return Some(Read::Chunk { data, end });
                }
                State::Skip { left } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(input.len());
                    *input = &input[take..];
                    *left -= take as u64;
                    if *left > 0 {
                        return None;
                    }
                    self.state = State::Head;
                }
            }
        }
    }

    /// Buffer the payload of the frame just started and return it whole. The caller has
    /// checked its length against a limit that fits in memory.
    pub(crate) fn buffer(&mut self) {
        if let State::Undecided { ty, len } = self.state {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            self.state = State::Buffer { ty, len, buf: Vec::with_capacity(len.min(16 * 1024)) };
        }
    }

    /// Hand out the payload of the frame just started in pieces, as it arrives.
    pub(crate) fn stream(&mut self) {
        if let State::Undecided { len, .. } = self.state {
            self.state = State::Stream { left: len };
        }
    }

    /// Discard the payload of the frame just started.
    pub(crate) fn skip(&mut self) {
        if let State::Undecided { len, .. } = self.state {
            self.state = State::Skip { left: len };
        }
    }

    /// Whether the reader is between frames: a stream may end cleanly only here (RFC 9114 §7.1:
    /// a truncated last frame is H3_FRAME_ERROR).
    pub(crate) fn at_boundary(&self) -> bool {
        matches!(self.state, State::Head) && self.head_len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(bytes: &[u8], step: usize) -> Vec<(u64, Vec<u8>)> {
        let mut r = FrameReader::default();
        let mut out = Vec::new();
        let mut streamed: Option<(u64, Vec<u8>)> = None;
        for piece in bytes.chunks(step) {
            let mut input = piece;
            while let Some(item) = r.read(&mut input) {
                match item {
                    Read::Start { ty: 0, .. } => {
                        r.stream();
                        streamed = Some((0, Vec::new()));
                    }
                    Read::Start { ty: 0x21, .. } => r.skip(),
                    Read::Start { .. } => r.buffer(),
                    Read::Frame { ty, payload } => out.push((ty, payload)),
                    Read::Chunk { data, end } => {
                        let s = streamed.as_mut().unwrap();
                        s.1.extend_from_slice(data);
                        if end {
                            out.push(streamed.take().unwrap());
                        }
                    }
                }
            }
        }
        assert!(r.at_boundary());
        out
    }

    #[test]
    fn splits_frames_at_any_boundary() {
        let mut b = Vec::new();
        encode(kind::HEADERS, b"abc", &mut b);
        encode(0x21, &[9; 70], &mut b);
        encode(kind::DATA, &[7; 300], &mut b);
        encode(kind::DATA, &[], &mut b);
        encode(kind::PRIORITY_UPDATE_REQUEST, b"\x04u=1", &mut b);
        encode(kind::HEADERS, &[], &mut b);
        let want = vec![
            (kind::HEADERS, b"abc".to_vec()),
            (kind::DATA, vec![7; 300]),
            (kind::DATA, vec![]),
            (kind::PRIORITY_UPDATE_REQUEST, b"\x04u=1".to_vec()),
            (kind::HEADERS, vec![]),
        ];
        for step in [1, 2, 3, 7, 64, b.len()] {
            assert_eq!(frames(&b, step), want, "step {step}");
        }
    }

    #[test]
    fn boundary_tracking() {
        let mut r = FrameReader::default();
        let mut input = &[0x40][..];
        assert_eq!(r.read(&mut input), None);
        assert!(!r.at_boundary(), "half a frame type");
        let mut input = &[0x01, 0x02, 0xaa][..];
        assert_eq!(r.read(&mut input), Some(Read::Start { ty: 1, len: 2 }));
        r.buffer();
        assert_eq!(r.read(&mut input), None);
        assert!(!r.at_boundary(), "half a payload");
    }

    #[test]
    fn settings_codec() {
        let mut out = Vec::new();
        encode_settings(&[(1, 4096), (6, 1 << 20)], &mut out);
        assert_eq!(out, [0x04, 0x08, 0x01, 0x50, 0x00, 0x06, 0x80, 0x10, 0x00, 0x00]);
        assert_eq!(parse_settings(&out[2..]).unwrap(), [(1, 4096), (6, 1 << 20)]);
        assert_eq!(parse_settings(&[0x01]).unwrap_err().code, Code::H3_FRAME_ERROR);
        assert_eq!(parse_settings(&[0x03, 0x00]).unwrap_err().code, Code::H3_SETTINGS_ERROR);
        assert_eq!(parse_settings(&[0x06, 0x00, 0x06, 0x01]).unwrap_err().code, Code::H3_SETTINGS_ERROR);
        assert_eq!(parse_settings(&[0x21, 0x00, 0x00, 0x05]).unwrap(), [(0x21, 0), (0, 5)]);
    }

    #[test]
    fn single_varint_payloads() {
        assert_eq!(parse_single_varint(&[0x40, 0x05], "x"), Ok(5));
        assert_eq!(parse_single_varint(&[0x05, 0x00], "x").unwrap_err().code, Code::H3_FRAME_ERROR);
        assert_eq!(parse_single_varint(&[0x40], "x").unwrap_err().code, Code::H3_FRAME_ERROR);
        assert_eq!(parse_single_varint(&[], "x").unwrap_err().code, Code::H3_FRAME_ERROR);
    }

    #[test]
    fn origin_layout() {
        let mut out = Vec::new();
        encode_origin(&["https://a.example".into(), String::new()], &mut out);
        let mut want = vec![0x0c, 21, 0, 17];
        want.extend_from_slice(b"https://a.example");
        want.extend_from_slice(&[0, 0]);
        assert_eq!(out, want);
    }
}
