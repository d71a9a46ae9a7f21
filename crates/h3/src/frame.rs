//! HTTP/3 frames (RFC 9114 §7): `Type (i), Length (i), Payload (..)`. Types, the payload codecs
//! the server needs, and an incremental reader that takes stream bytes in pieces of any size.

use std::collections::HashSet;

use crate::error::{Code, Error};
use crate::varint;

/// Frame types (RFC 9114 §7.2, §11.2.1; RFC 9218 §7.2; RFC 9412 §2).
pub mod kind {
    /// DATA (RFC 9114 §7.2.1): request or response body bytes.
    pub const DATA: u64 = 0x00;
    /// HEADERS (RFC 9114 §7.2.2): a QPACK-encoded field section.
    pub const HEADERS: u64 = 0x01;
    /// CANCEL_PUSH (RFC 9114 §7.2.3), control stream.
    pub const CANCEL_PUSH: u64 = 0x03;
    /// SETTINGS (RFC 9114 §7.2.4), the first frame of each control stream.
    pub const SETTINGS: u64 = 0x04;
    /// PUSH_PROMISE (RFC 9114 §7.2.5), server to client on a request stream.
    pub const PUSH_PROMISE: u64 = 0x05;
    /// GOAWAY (RFC 9114 §7.2.6), control stream.
    pub const GOAWAY: u64 = 0x07;
    /// ORIGIN (RFC 9412 §2), server to client on the control stream.
    pub const ORIGIN: u64 = 0x0c;
    /// MAX_PUSH_ID (RFC 9114 §7.2.7), client to server on the control stream.
    pub const MAX_PUSH_ID: u64 = 0x0d;
    /// PRIORITY_UPDATE for a request stream (RFC 9218 §7.2).
    pub const PRIORITY_UPDATE_REQUEST: u64 = 0xf0700;
    /// PRIORITY_UPDATE for a push stream (RFC 9218 §7.2).
    pub const PRIORITY_UPDATE_PUSH: u64 = 0xf0701;

    /// Types HTTP/2 used with no HTTP/3 counterpart (PRIORITY, PING, WINDOW_UPDATE,
    /// CONTINUATION): receipt is H3_FRAME_UNEXPECTED (RFC 9114 §7.2.8).
    pub fn is_h2_reserved(ty: u64) -> bool {
        matches!(ty, 0x02 | 0x06 | 0x08 | 0x09)
    }

    /// Reserved types `0x1f * N + 0x21` (RFC 9114 §7.2.8): sent to exercise the rule that
    /// unknown types are ignored, and ignored on receipt.
    pub fn is_reserved(ty: u64) -> bool {
        ty >= 0x21 && (ty - 0x21) % 0x1f == 0
    }
}

/// Unidirectional stream types: the varint that starts each such stream (RFC 9114 §6.2,
/// RFC 9204 §4.2). Reserved types `0x1f * N + 0x21` (§6.2.3) and unknown ones are ignored.
pub mod stream_type {
    /// The control stream (RFC 9114 §6.2.1): one per side, SETTINGS first.
    pub const CONTROL: u64 = 0x00;
    /// A push stream (RFC 9114 §6.2.2): server to client only.
    pub const PUSH: u64 = 0x01;
    /// The QPACK encoder stream (RFC 9204 §4.2).
    pub const QPACK_ENCODER: u64 = 0x02;
    /// The QPACK decoder stream (RFC 9204 §4.2).
    pub const QPACK_DECODER: u64 = 0x03;
}

/// Setting identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5).
pub mod setting {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY (RFC 9204 §5), default 0.
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    /// SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114 §7.2.4.1), default unlimited.
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    /// SETTINGS_QPACK_BLOCKED_STREAMS (RFC 9204 §5), default 0.
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220 §3, the id RFC 8441 gave it), default 0.
    pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
    /// SETTINGS_H3_DATAGRAM (RFC 9297 §2.1.1), default 0; a value other than 0 or 1 is
    /// H3_SETTINGS_ERROR.
    pub const H3_DATAGRAM: u64 = 0x33;
    /// The reserved setting we send (RFC 9114 §7.2.4.1: ids `0x1f * N + 0x21` exercise the rule
    /// that unknown settings are ignored). N = 42 was picked arbitrarily.
    pub const GREASE: u64 = 0x1f * 42 + 0x21;
    /// Value of the reserved setting: any value will do.
    pub const GREASE_VALUE: u64 = 0x5c;

    /// Ids HTTP/2 defined with no HTTP/3 counterpart (ENABLE_PUSH, MAX_CONCURRENT_STREAMS,
    /// INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE): receipt is H3_SETTINGS_ERROR (RFC 9114 §7.2.4.1).
    pub fn is_h2_reserved(id: u64) -> bool {
        matches!(id, 0x02..=0x05)
    }
}

/// A frame header (RFC 9114 §7.1): `Type (i), Length (i)`, then `len` bytes of payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame type (see [`kind`]).
    pub ty: u64,
    /// The payload length in bytes.
    pub len: u64,
}

impl FrameHeader {
    /// Decode a header from the start of `b`: the header and the bytes it took, or `None` if
    /// `b` holds only part of it (read more and try again).
    pub fn decode(b: &[u8]) -> Option<(Self, usize)> {
        let (ty, n) = varint::decode(b)?;
        let (len, m) = varint::decode(&b[n..])?;
        Some((Self { ty, len }, n + m))
    }

    /// Append the header, each varint in its shortest form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        varint::encode(self.ty, out);
        varint::encode(self.len, out);
    }

    /// Bytes [`FrameHeader::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        varint::len(self.ty) + varint::len(self.len)
    }
}

/// Append a frame header.
pub(crate) fn encode_header(ty: u64, len: u64, out: &mut Vec<u8>) {
    FrameHeader { ty, len }.encode(out);
}

/// Append a whole frame: its header, then `payload`.
pub fn encode(ty: u64, payload: &[u8], out: &mut Vec<u8>) {
    encode_header(ty, payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// Append a SETTINGS frame: pairs of identifier and value (RFC 9114 §7.2.4).
pub fn encode_settings(values: &[(u64, u64)], out: &mut Vec<u8>) {
    let mut payload = Vec::with_capacity(values.len() * 4);
    for &(id, v) in values {
        varint::encode(id, &mut payload);
        varint::encode(v, &mut payload);
    }
    encode(kind::SETTINGS, &payload, out);
}

/// Append an ORIGIN frame: `Origin-Len (16), ASCII-Origin (..)` per entry (RFC 9412 §2,
/// RFC 8336 §2). Entries longer than 65,535 bytes cannot be encoded and are left out.
pub fn encode_origin(origins: &[String], out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    for o in origins {
        let Ok(n) = u16::try_from(o.len()) else { continue };
        payload.extend_from_slice(&n.to_be_bytes());
        payload.extend_from_slice(o.as_bytes());
    }
    encode(kind::ORIGIN, &payload, out);
}

/// Parse an ORIGIN payload into its entries, as sent (ASCII serialised origins, e.g.
/// `https://b.example:8443`; bytes that are not UTF-8 are replaced). An entry longer than
/// what is left of the payload is H3_FRAME_ERROR (RFC 9114 §7.1: the layout must match).
pub fn parse_origin(mut p: &[u8]) -> Result<Vec<String>, Error> {
    let mut origins = Vec::new();
    while !p.is_empty() {
        let truncated = || Error::conn(Code::H3_FRAME_ERROR, "truncated ORIGIN entry");
        let len = p.get(..2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))).ok_or_else(truncated)?;
        let entry = p.get(2..2 + len).ok_or_else(truncated)?;
        origins.push(String::from_utf8_lossy(entry).into_owned());
        p = &p[2 + len..];
    }
    Ok(origins)
}

/// Parse a SETTINGS payload. Truncated pairs are H3_FRAME_ERROR (RFC 9114 §7.1); a duplicate
/// id (§7.2.4 permits the error) or an HTTP/2-only id (§7.2.4.1) is H3_SETTINGS_ERROR.
/// Linear in the payload: duplicates are found with a hash set, not by scanning what came
/// before (a 64 KiB frame of distinct ids would otherwise cost some 10^8 comparisons).
pub fn parse_settings(mut p: &[u8]) -> Result<Vec<(u64, u64)>, Error> {
    // Each pair takes at least two bytes.
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(p.len() / 2);
    let mut seen: HashSet<u64> = HashSet::with_capacity(p.len() / 2);
    while !p.is_empty() {
        let truncated = || Error::conn(Code::H3_FRAME_ERROR, "truncated SETTINGS");
        let (id, n) = varint::decode(p).ok_or_else(truncated)?;
        let (v, m) = varint::decode(&p[n..]).ok_or_else(truncated)?;
        p = &p[n + m..];
        if setting::is_h2_reserved(id) {
            return Err(Error::conn(Code::H3_SETTINGS_ERROR, "HTTP/2 setting in SETTINGS"));
        }
        if !seen.insert(id) {
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
                    if let Some((FrameHeader { ty, len }, _)) = FrameHeader::decode(&self.head[..self.head_len]) {
                        self.head_len = 0;
                        self.state = State::Undecided { ty, len };
                        return Some(Read::Start { ty, len });
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
    fn frame_header_codec() {
        let h = FrameHeader { ty: kind::PRIORITY_UPDATE_REQUEST, len: 300 };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out, [0x80, 0x0f, 0x07, 0x00, 0x41, 0x2c]);
        assert_eq!(h.encoded_len(), 6);
        out.push(0xaa);
        assert_eq!(FrameHeader::decode(&out), Some((h, 6)), "payload bytes after it stay");
        assert_eq!(FrameHeader::decode(&out[..5]), None);
        assert_eq!(FrameHeader::decode(&[]), None);
        assert!(kind::is_reserved(0x21) && kind::is_reserved(0x21 + 0x1f * 7) && !kind::is_reserved(0x22));
        assert!(!kind::is_reserved(0x02));
    }

    #[test]
    fn origin_parse() {
        let mut out = Vec::new();
        encode_origin(&["https://a.example".into(), String::new()], &mut out);
        assert_eq!(parse_origin(&out[2..]).unwrap(), ["https://a.example", ""]);
        assert_eq!(parse_origin(&[]).unwrap(), Vec::<String>::new());
        assert_eq!(parse_origin(&[0x00]).unwrap_err().code, Code::H3_FRAME_ERROR);
        assert_eq!(parse_origin(&[0x00, 0x03, b'a', b'b']).unwrap_err().code, Code::H3_FRAME_ERROR);
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
