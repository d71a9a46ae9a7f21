//! HTTP/1.1 messages as a reverse proxy's client writes and reads them (RFC 9112), sans-IO:
//! the request head and chunked body out, the response head, its framing and a chunked body
//! in. The proxy's driver owns the socket and the buffers; everything here takes bytes and
//! says what they are.
//!
//! Written here rather than taken from hyper's client because the proxy needs the response
//! head as fields it can forward without another copy, the connection in its own hands
//! between exchanges (its pool, its liveness check, its upgrade), and no task or channel
//! between the request and the socket: hyper's client, its connection task and the maps around
//! it were about a third of a small proxied response's instructions (77,000 before, 45,000
//! after; `scripts/bench-callgrind.sh --servers sluice-proxy`).

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use crate::packed::Spans;
use crate::PackedFields;

/// At most this many fields in a response head or trailer section (hyper's, HAProxy's and
/// Envoy's limit too).
pub const MAX_FIELDS: usize = 100;

/// Longest chunk-size line, extensions included (RFC 9112 §7.1.1 sets no limit; a line this
/// long is already abuse).
const MAX_CHUNK_LINE: usize = 4096;

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The head (or trailer section) is over the size limit or has more than [`MAX_FIELDS`]
    /// fields.
    TooLarge,
    /// Not HTTP/1.x, or framed in a way that cannot be read safely.
    Invalid(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => f.write_str("response header section too large"),
            Self::Invalid(why) => write!(f, "invalid response: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status code.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The fields in order, names lower-cased, connection-specific ones included, where they
    /// lie in the head's bytes.
    pub fields: PackedFields,
}

impl ResponseHead {
    /// The values of the fields named `name` (lower-case).
    pub fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields.values(name)
    }

    /// Whether a field named `name` (lower-case) is there.
    pub fn has(&self, name: &[u8]) -> bool {
        self.fields.has(name)
    }

    /// Whether `Connection` names `option` (case-insensitive).
    pub fn connection_has(&self, option: &str) -> bool {
        let option = option.as_bytes();
        self.values(b"connection").any(|v| {
            // Nearly always a single option (`keep-alive` or `close`): compared whole, without
            // the splitting iterator (about 200 instructions for every response).
            if !v.contains(&b',') {
                return v.trim_ascii().eq_ignore_ascii_case(option);
            }
            v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(option))
        })
    }

    /// The upstream's `Keep-Alive: timeout=N` (seconds), when it gave one (RFC 2068 §19.7.1.1).
    pub fn keep_alive_timeout(&self) -> Option<u64> {
        self.values(b"keep-alive").flat_map(|v| v.split(|&b| b == b',')).find_map(|p| {
            let p = p.trim_ascii();
            let n = p.get(..8).filter(|k| k.eq_ignore_ascii_case(b"timeout="))?;
            parse_decimal(p[n.len()..].trim_ascii())
        })
    }

    /// The fields as a map (for interim responses, upgrades and other rare paths).
    pub fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.fields.len());
        self.fields.append_to_map(&mut map);
        map
    }
}

/// Reads a response head from the start of `buf`. `Ok(None)`: not complete yet (the caller
/// bounds how much it buffers with `max`). On success the head's bytes are consumed from
/// `buf`; what follows (body, next message) stays.
///
/// Parsed here in one pass rather than by httparse (which the trailer section still uses):
/// httparse, then a second pass over its result to lower-case the names and split the fields
/// off the buffer, cost about 4,000 instructions of a small proxied response's 30,800 for an
/// origin's eight-field head, about 390 more than this. Here the pass that checks a name also
/// lower-cases it in place, and a value's bytes are checked eight at a time. What it accepts is what httparse's default
/// response parser accepts (a test and the `h1_response` fuzz target hold it to that): empty
/// lines before the status line ignored, `HTTP/1.0` or `HTTP/1.1`, one space, three digits, an
/// optional reason phrase; fields `token ":" OWS value OWS` (RFC 9112 §5.1: no whitespace
/// before the colon), a line folded with obs-fold refused (RFC 9112 §5.2 lets a proxy refuse
/// it); lines end with CRLF or a bare LF (RFC 9112 §2.2).
pub fn parse_response(buf: &mut BytesMut, max: usize) -> Result<Option<ResponseHead>, Error> {
    // Where each field's name and value lie in the head.
    let mut spans = Spans::default();
    let Some(Scanned { len, code, minor }) = scan_response(&mut buf[..], &mut spans)? else {
        return if buf.len() > max { Err(Error::TooLarge) } else { Ok(None) };
    };
    if len > max {
        return Err(Error::TooLarge);
    }
    let status = StatusCode::from_u16(code).map_err(|_| Error::Invalid("bad status code"))?;
    let version = if minor == 0 { Version::HTTP_10 } else { Version::HTTP_11 };
    // The values are not checked again: `text_end` refuses a control character other than
    // HTAB, the rule the `http` crate's values follow too (a test below holds it to that).
    let fields = spans.into_fields(buf.split_to(len).freeze());
    Ok(Some(ResponseHead { status, version, fields }))
}

/// A complete response head found by [`scan_response`].
struct Scanned {
    /// Its length, the final empty line included.
    len: usize,
    code: u16,
    /// `HTTP/1.x`'s `x`.
    minor: u8,
}

/// Token characters (RFC 9110 §5.6.2) mapped to their lower case; every other byte to 0.
const NAME_BYTE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        if crate::request::is_tchar(c) {
            t[i] = c.to_ascii_lowercase();
        }
        i += 1;
    }
    t
};

const MALFORMED: Error = Error::Invalid("malformed response head");

/// Checks the response head at the start of `b`, lower-cases its field names in place and
/// notes where each name and value lies in `spans`. `Ok(None)`: not complete yet.
fn scan_response(b: &mut [u8], spans: &mut Spans) -> Result<Option<Scanned>, Error> {
    let mut at = 0;
    // Empty lines before the status line are ignored (RFC 9112 §2.2).
    loop {
        match b.get(at) {
            None => return Ok(None),
            Some(b'\n') => at += 1,
            Some(b'\r') => match b.get(at + 1) {
                None => return Ok(None),
                Some(b'\n') => at += 2,
                Some(_) => return Err(MALFORMED),
            },
            Some(_) => break,
        }
    }
    // `HTTP/1.0 ` or `HTTP/1.1 `, told wrong as soon as a byte differs.
    let start = &b[at..];
    let seen = start.len().min(9);
    let fits = |i: usize, c: u8| match i {
        7 => c == b'0' || c == b'1',
        _ => c == b"HTTP/1.x "[i],
    };
    if !start[..seen].iter().enumerate().all(|(i, &c)| fits(i, c)) {
        return Err(Error::Invalid("not an HTTP/1.x response"));
    }
    if seen < 9 {
        return Ok(None);
    }
    let minor = start[7] - b'0';
    at += 9;
    // Three digits, then a space and the reason phrase, or the end of the line.
    let mut code = 0u16;
    for i in 0..3 {
        match b.get(at + i) {
            None => return Ok(None),
            Some(c) if c.is_ascii_digit() => code = code * 10 + u16::from(c - b'0'),
            Some(_) => return Err(Error::Invalid("bad status code")),
        }
    }
    at += 3;
    at = match b.get(at) {
        None => return Ok(None),
        Some(b' ') => match line_end(b, at + 1)? {
            Some((_, next)) => next,
            None => return Ok(None),
        },
        Some(b'\r' | b'\n') => match line_end(b, at)? {
            Some((_, next)) => next,
            None => return Ok(None),
        },
        Some(_) => return Err(Error::Invalid("bad status line")),
    };
    loop {
        // An empty line ends the head.
        match b.get(at) {
            None => return Ok(None),
            Some(b'\n') => return Ok(Some(Scanned { len: at + 1, code, minor })),
            Some(b'\r') => {
                return match b.get(at + 1) {
                    None => Ok(None),
                    Some(b'\n') => Ok(Some(Scanned { len: at + 2, code, minor })),
                    Some(_) => Err(MALFORMED),
                }
            }
            Some(_) => {}
        }
        // The name, lower-cased as it is checked. A line starting with whitespace (obs-fold)
        // has no name: refused.
        let name = at;
        loop {
            // Letters, digits and `-` (nearly every name's bytes) eight at a time, up to the
            // first other byte; that one by the table.
            at = lower_plain_name(b, at);
            let Some(&c) = b.get(at) else { return Ok(None) };
            let lower = NAME_BYTE[usize::from(c)];
            if lower == 0 {
                break;
            }
            b[at] = lower;
            at += 1;
        }
        if at == name || b[at] != b':' {
            return Err(MALFORMED);
        }
        let name_end = at;
        at += 1;
        while matches!(b.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let value = at;
        let Some((mut value_end, next)) = line_end(b, at)? else { return Ok(None) };
        while value_end > value && matches!(b[value_end - 1], b' ' | b'\t') {
            value_end -= 1;
        }
        if spans.len() == MAX_FIELDS {
            return Err(Error::TooLarge);
        }
        // Within `max`, which the caller keeps far under 4 GiB; a longer buffer is refused
        // as too large before these are read.
        spans.push(&b[name..name_end], [name, name_end, value, value_end].map(|x| x as u32));
        at = next;
    }
}

/// Lower-cases the letters of the name bytes from `at` on, eight at a time while they are all
/// letters, digits or `-`; returns where the first other byte is (or the last word that does not
/// fit whole starts). In a word of bytes under 0x80, adding `0x80 - k` to each byte carries
/// into its top bit exactly when the byte is `k` or more, and never into the next byte.
fn lower_plain_name(b: &mut [u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * ONES;
    // Top bit of each byte of `low` (bytes under 0x80) that is `k` or more.
    let at_least = |low: u64, k: u8| low.wrapping_add(u64::from(0x80 - k) * ONES) & HIGH;
    while let Some(word) = b.get(at..at + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let low = w & !HIGH;
        let range = |a: u8, z: u8| at_least(low, a) & !at_least(low, z + 1);
        let upper = range(b'A', b'Z');
        let plain = (upper | range(b'a', b'z') | range(b'0', b'9') | range(b'-', b'-')) & !(w & HIGH);
        let other = !plain & HIGH;
        // The bytes before the first other one: 0x20 added to their capitals.
        let before = if other == 0 { u64::MAX } else { (1u64 << (other.trailing_zeros() & !7)) - 1 };
        let lowered = w | (upper & before) >> 2;
        b[at..at + 8].copy_from_slice(&lowered.to_le_bytes());
        if other != 0 {
            return at + (other.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at
}

/// The end of the line whose remaining text starts at `at`, a field value or reason phrase
/// (RFC 9110 §5.5: visible ASCII, obs-text, SP and HTAB): where its text ends and where the
/// next line starts. `Ok(None)`: the line is not complete yet. Any other byte before the end
/// of the line, a CR not followed by LF included, makes the head malformed.
fn line_end(b: &[u8], at: usize) -> Result<Option<(usize, usize)>, Error> {
    let end = text_end(b, at);
    match b.get(end) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((end, end + 1))),
        Some(b'\r') => match b.get(end + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((end, end + 2))),
            Some(_) => Err(MALFORMED),
        },
        Some(_) => Err(MALFORMED),
    }
}

/// The first byte from `at` on that cannot be in a field value (a control character other
/// than HTAB, or DEL), else `b.len()`. Eight bytes at a time: in a word, `(w - 0x20…) & !w &
/// 0x80…` marks bytes under 0x20, and the same of `w ^ 0x7f…` with 0x01 marks DEL; a byte's
/// mark can be wrong only above a byte rightly marked (a borrow out of it), so the lowest mark
/// is right.
fn text_end(b: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * ONES;
    while let Some(word) = b.get(at..at + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let del = w ^ (0x7f * ONES);
        let marks = ((w.wrapping_sub(0x20 * ONES) & !w) | (del.wrapping_sub(ONES) & !del)) & HIGH;
        if marks == 0 {
            at += 8;
            continue;
        }
        let first = at + (marks.trailing_zeros() / 8) as usize;
        if b[first] != b'\t' {
            return first;
        }
        at = first + 1;
    }
    while let Some(&c) = b.get(at) {
        if (c < 0x20 && c != b'\t') || c == 0x7f {
            return at;
        }
        at += 1;
    }
    at
}

/// Where `part` (a slice of `base`) lies in it.
fn span(base: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let at = part.as_ptr() as usize - base.as_ptr() as usize;
    at..at + part.len()
}

/// The fields `parsed` from `base` as a map, their values slices of one copy of `base`.
fn to_map(parsed: &[httparse::Header<'_>], base: &[u8]) -> Result<HeaderMap, Error> {
    let head = Bytes::copy_from_slice(base);
    let mut fields = HeaderMap::with_capacity(parsed.len());
    for h in parsed {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| Error::Invalid("bad field name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(span(base, h.value)))
            .map_err(|_| Error::Invalid("bad field value"))?;
        fields.append(name, value);
    }
    Ok(fields)
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a response to HEAD, a 1xx, 204 or 304.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the upstream closes (the connection cannot be reused).
    Close,
}

/// The framing of a final response to a request made with `method`. A `Transfer-Encoding`
/// other than a final `chunked` reads to the close; with both `Transfer-Encoding` and
/// `Content-Length`, the former wins and the latter is removed from `fields` (RFC 9112 §6.3
/// point 3: the intermediary removes it); `Content-Length` values that disagree or do not
/// parse are an error (point 5).
pub fn framing(method: &Method, head: &mut ResponseHead) -> Result<Framing, Error> {
    let code = head.status.as_u16();
    if *method == Method::HEAD || code < 200 || code == 204 || code == 304 {
        return Ok(Framing::Empty);
    }
    if head.has(b"transfer-encoding") {
        head.fields.retain(|n, _| n != b"content-length");
        if head.version == Version::HTTP_10 {
            return Err(Error::Invalid("transfer-encoding in an HTTP/1.0 response"));
        }
        let last = head
            .values(b"transfer-encoding")
            .flat_map(|v| v.split(|&b| b == b','))
            .filter(|c| !c.trim_ascii().is_empty())
            .last()
            .map(<[u8]>::trim_ascii);
        return Ok(if last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")) {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    let mut len: Option<u64> = None;
    for v in head.values(b"content-length") {
        // A list of identical values is one length (RFC 9110 §8.6).
        for part in v.split(|&b| b == b',') {
            let n = parse_decimal(part.trim_ascii()).ok_or(Error::Invalid("bad content-length"))?;
            if len.is_some_and(|l| l != n) {
                return Err(Error::Invalid("conflicting content-length values"));
            }
            len = Some(n);
        }
    }
    Ok(match len {
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Whether the connection may carry another exchange after this response: HTTP/1.1 without
/// `Connection: close` (RFC 9112 §9.3). HTTP/1.0 connections are not reused.
pub fn persistent(head: &ResponseHead) -> bool {
    head.version == Version::HTTP_11 && !head.connection_has("close")
}

/// How a request's body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// No body (for a method that gives content a meaning, `content-length: 0` is sent).
    Empty,
    /// The fields carry `Content-Length`; the body's bytes go as they are.
    Length,
    /// Chunked transfer coding (`transfer-encoding: chunked` is added).
    Chunked,
}

/// Appends a request line. `target` must be visible ASCII (RFC 9112 §3.2; the caller checks).
pub fn request_line(method: &Method, target: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Ends a request head whose fields are written: the framing field `body` needs (`length`:
/// the fields hold `Content-Length`), then the empty line.
pub fn end_head(method: &Method, body: RequestBody, length: bool, out: &mut Vec<u8>) {
    match body {
        RequestBody::Chunked => field(out, b"transfer-encoding", b"chunked"),
        // RFC 9110 §8.6: a user agent sends Content-Length when the method defines a meaning
        // for content.
        RequestBody::Empty if matches!(*method, Method::POST | Method::PUT | Method::PATCH) && !length => {
            field(out, b"content-length", b"0");
        }
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one field line.
#[inline]
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    // Room for the whole line at once: the appends below then only copy.
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk of a chunked body (RFC 9112 §7.1). An empty `data` appends nothing: a
/// zero-size chunk would end the body.
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    use std::io::Write as _;
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the end of a chunked body: the last chunk and the trailer section.
pub fn encode_last_chunk(trailers: Option<&HeaderMap>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// What [`ChunkedDecoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    /// The next this many bytes of the buffer are body data: the caller takes them.
    Data(usize),
    /// The body ended; its trailer section, if it had fields.
    End(Option<HeaderMap>),
    /// More bytes are needed.
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// A chunked body being read (RFC 9112 §7.1).
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    max_trailers: usize,
}

impl ChunkedDecoder {
    /// A decoder that accepts a trailer section of at most `max_trailers` bytes.
    pub fn new(max_trailers: usize) -> Self {
        Self { state: State::Size, max_trailers }
    }

    /// Whether the body has ended.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads framing from the start of `buf` (consuming it) up to the next data, the end or
    /// the end of what is buffered.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Chunk, Error> {
        loop {
            match self.state {
                State::Size => {
                    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
                        if buf.len() > MAX_CHUNK_LINE {
                            return Err(Error::Invalid("chunk-size line too long"));
                        }
                        return Ok(Chunk::NeedMore);
                    };
                    if eol > MAX_CHUNK_LINE {
                        return Err(Error::Invalid("chunk-size line too long"));
                    }
                    let line = &buf[..eol];
                    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                    if digits == 0 || digits > 16 {
                        return Err(Error::Invalid("bad chunk size"));
                    }
                    // After the size: nothing, or extensions (`;`, possibly after spaces).
                    let rest = &line[digits..];
                    let ext = rest.iter().position(|&b| b != b' ' && b != b'\t');
                    if ext.is_some_and(|i| rest[i] != b';') || rest.iter().any(|&b| b < 0x20 && b != b'\t') {
                        return Err(Error::Invalid("bad chunk size"));
                    }
                    let size = line[..digits]
                        .iter()
                        .fold(0u64, |n, &d| (n << 4) | u64::from((d as char).to_digit(16).unwrap_or(0)));
                    buf.advance(eol + 2);
                    self.state = if size == 0 { State::Trailers } else { State::Data(size) };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Chunk::NeedMore);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let left = left - n as u64;
                    self.state = if left == 0 { State::DataEnd } else { State::Data(left) };
                    return Ok(Chunk::Data(n));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Chunk::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(Error::Invalid("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        self.state = State::Done;
                        return Ok(Chunk::End(None));
                    }
                    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
                    let (len, map) = match httparse::parse_headers(buf, &mut slots) {
                        Ok(httparse::Status::Complete((n, _))) if n > self.max_trailers => return Err(Error::TooLarge),
                        Ok(httparse::Status::Complete((n, parsed))) => (n, to_map(parsed, &buf[..n])?),
                        Ok(httparse::Status::Partial) if buf.len() > self.max_trailers => return Err(Error::TooLarge),
                        Ok(httparse::Status::Partial) => return Ok(Chunk::NeedMore),
                        Err(httparse::Error::TooManyHeaders) => return Err(Error::TooLarge),
                        Err(_) => return Err(Error::Invalid("malformed trailer section")),
                    };
                    buf.advance(len);
                    self.state = State::Done;
                    return Ok(Chunk::End(Some(map)));
                }
                State::Done => return Ok(Chunk::End(None)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    fn head(text: &str) -> Result<Option<ResponseHead>, Error> {
        parse_response(&mut BytesMut::from(text.as_bytes()), 64 * 1024)
    }

    /// A parse's outcome as the differential test compares it: the head's length, status,
    /// minor version and fields (names lower-cased).
    type Outcome = Result<Option<(usize, u16, u8, Vec<(Vec<u8>, Vec<u8>)>)>, Error>;

    /// What httparse's default response parser makes of `text`, as [`parse_response`] reports
    /// it.
    fn by_httparse(text: &[u8], max: usize) -> Outcome {
        let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut r = httparse::Response::new(&mut slots);
        match r.parse(text) {
            Ok(httparse::Status::Complete(n)) if n > max => Err(Error::TooLarge),
            Ok(httparse::Status::Complete(n)) => {
                let code = r.code.expect("complete");
                if code < 100 {
                    return Err(MALFORMED);
                }
                let fields = r.headers.iter().map(|h| (h.name.to_ascii_lowercase().into_bytes(), h.value.to_vec()));
                Ok(Some((n, code, r.version.expect("complete"), fields.collect())))
            }
            Ok(httparse::Status::Partial) if text.len() > max => Err(Error::TooLarge),
            Ok(httparse::Status::Partial) => Ok(None),
            Err(httparse::Error::TooManyHeaders) => Err(Error::TooLarge),
            Err(_) => Err(MALFORMED),
        }
    }

    /// [`parse_response`]'s answer in [`by_httparse`]'s form; every error but `TooLarge` is
    /// one (they differ only in the reason given).
    fn by_us(text: &[u8], max: usize) -> Outcome {
        let mut buf = BytesMut::from(text);
        match parse_response(&mut buf, max) {
            Ok(Some(h)) => {
                let len = text.len() - buf.len();
                let minor = u8::from(h.version == Version::HTTP_11);
                let fields = h.fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec()));
                Ok(Some((len, h.status.as_u16(), minor, fields.collect())))
            }
            Ok(None) => Ok(None),
            Err(Error::TooLarge) => Err(Error::TooLarge),
            Err(_) => Err(MALFORMED),
        }
    }

    #[test]
    fn the_response_parser_agrees_with_httparse() {
        // Heads built from pieces chosen to sit on every rule's edge (line ends, whitespace,
        // the status line's parts, a byte of every class in names and values), each also cut
        // at every length: complete, incomplete, refused, the same answer from both.
        const PIECES: &[&[u8]] = &[
            b"HTTP/1.1 ",
            b"HTTP/1.0 ",
            b"HTTP/1.2 ",
            b"HTTP/1.1",
            b"http/1.1 ",
            b"200",
            b"404",
            b"099",
            b"20x",
            b" OK",
            b" ",
            b"",
            b"\r\n",
            b"\n",
            b"\r",
            b"\r\r\n",
            b"Content-Length",
            b"X-A",
            b"x-a",
            b"Set-Cookie",
            b":",
            b": ",
            b":\t",
            b" :",
            b"value",
            b" value ",
            b"a\tb",
            b"\t",
            b"\x7f",
            b"\x00",
            b"\x1f",
            b"\x80\xff",
            b"\"quoted\"",
            b"(",
            b"a,b",
            b"Date",
            b"Mon, 01 Jan 2026 00:00:00 GMT",
            b"0123456789abcdef",
            b"\x0b",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut texts: Vec<Vec<u8>> = vec![
            b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/html\r\nContent-Length: 14\r\n\r\nbody".to_vec(),
            b"\r\n\nHTTP/1.0 304\nETag: \"x\"\n\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 \x80reason\tphrase\r\nA:\r\nB: \t \r\n\r\n".to_vec(),
        ];
        // Long values cross the eight-byte words at every offset, with a bad byte anywhere.
        for len in 0..=20 {
            for bad in [None, Some(b'\x01'), Some(b'\t'), Some(b'\x7f'), Some(b'\r'), Some(b'\n')] {
                for at in 0..len.max(1) {
                    let mut v = vec![b'v'; len];
                    if let (Some(c), true) = (bad, at < len) {
                        v[at] = c;
                    }
                    let mut t = b"HTTP/1.1 200 OK\r\nName: ".to_vec();
                    t.extend_from_slice(&v);
                    t.extend_from_slice(b"\r\n\r\n");
                    texts.push(t);
                }
            }
        }
        // Long names too (eight bytes at a time while they are letters, digits and `-`), with
        // a byte of another class anywhere: the edges of each range the words are tested
        // against, other token characters, bytes no name holds (a capital with the top bit
        // set among them).
        for len in 1..=20 {
            for odd in [b'@', b'A', b'Z', b'[', b'`', b'a', b'z', b'{', b'/', b'0', b'9', b'-', b'.', b'_', b'~', b'!']
                .into_iter()
                .chain([b':', b' ', b'\t', b'\x80', b'\xc1', b'\xff', b'\x7f', b'\x00'])
            {
                for at in 0..len {
                    let mut name: Vec<u8> = (0..len).map(|i| b"Xy-9"[i % 4]).collect();
                    name[at] = odd;
                    let mut t = b"HTTP/1.1 200 OK\r\n".to_vec();
                    t.extend_from_slice(&name);
                    t.extend_from_slice(b": v\r\n\r\n");
                    texts.push(t);
                }
            }
        }
        // Pieces at random, and heads shaped as heads with a piece at random in each place.
        let mut pick = |usual: &[&'static [u8]]| {
            if usual.is_empty() || next(6) == 0 {
                PIECES[next(PIECES.len())]
            } else {
                usual[next(usual.len())]
            }
        };
        for _ in 0..1000 {
            let mut t = pick(&[b"HTTP/1.1 "]).to_vec();
            for _ in 0..pick(&[b"12345678"]).len() * 3 {
                t.extend_from_slice(pick(&[]));
            }
            texts.push(t);
        }
        for _ in 0..3000 {
            let mut t = Vec::new();
            for usual in [&[&b"HTTP/1.1 "[..], b"HTTP/1.0 "][..], &[b"200", b"404"], &[b" OK", b""], &[b"\r\n", b"\n"]]
            {
                t.extend_from_slice(pick(usual));
            }
            for _ in 0..pick(&[b"", b"1", b"12", b"123", b"1234"]).len() {
                for usual in [
                    &[&b"Content-Length"[..], b"X-A", b"x-a", b"Date"][..],
                    &[b": ", b":"],
                    &[b"value", b" value ", b"a\tb", b"Mon, 01 Jan 2026 00:00:00 GMT", b""],
                    &[b"\r\n", b"\n"],
                ] {
                    t.extend_from_slice(pick(usual));
                }
            }
            t.extend_from_slice(pick(&[b"\r\n", b"\n"]));
            texts.push(t);
        }
        let mut complete = 0;
        for t in &texts {
            for cut in 0..=t.len() {
                let text = &t[..cut];
                let max = if next(8) == 0 { next(64) } else { 64 * 1024 };
                let (ours, theirs) = (by_us(text, max), by_httparse(text, max));
                assert_eq!(ours, theirs, "{:?} (max {max})", String::from_utf8_lossy(text));
                complete += usize::from(matches!(ours, Ok(Some(_))));
            }
        }
        // The generator reaches complete heads, not only refusals.
        assert!(complete > 1000, "{complete} complete heads");
    }

    #[test]
    fn more_fields_than_the_limit_are_refused_as_httparse_refuses_them() {
        for n in [MAX_FIELDS - 1, MAX_FIELDS, MAX_FIELDS + 1] {
            let many: String = (0..n).map(|i| format!("f{i}: v\r\n")).collect();
            let text = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
            assert_eq!(by_us(text.as_bytes(), 1 << 20), by_httparse(text.as_bytes(), 1 << 20), "{n} fields");
        }
    }

    #[test]
    fn a_response_head_parses_and_leaves_the_body() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello"[..]);
        let h = parse_response(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.values(b"x-a").collect::<Vec<_>>(), [b"1", b"2"]);
        // Names are lower-cased.
        let names: Vec<_> = h.fields.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"content-length"[..], b"x-a", b"x-a"]);
        assert_eq!(&buf[..], b"hello");
        let mut h = h;
        assert_eq!(framing(&Method::GET, &mut h), Ok(Framing::Length(5)));
        assert_eq!(framing(&Method::HEAD, &mut h), Ok(Framing::Empty));
        assert!(persistent(&h));
    }

    #[test]
    fn a_control_character_in_a_value_is_refused_as_the_http_crate_would() {
        // The fields go to HTTP/2 and HTTP/3 clients and into maps unchecked: the parser
        // checks the values.
        for b in (0u8..=0xff).filter(|&b| b != b'\r' && b != b'\n') {
            let mut text = b"HTTP/1.1 200 OK\r\nx: a".to_vec();
            text.extend_from_slice(&[b, b'b']);
            text.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
            let parsed = parse_response(&mut BytesMut::from(&text[..]), 1024);
            let valid = HeaderValue::from_bytes(&[b'a', b, b'b']).is_ok();
            assert_eq!(crate::map_value(&[b]), valid, "{b:#04x}");
            match parsed {
                Ok(Some(h)) => {
                    assert!(valid, "{b:#04x} accepted");
                    assert_eq!(h.values(b"x").next(), Some(&[b'a', b, b'b'][..]));
                    assert!(HeaderValue::from_maybe_shared(h.fields.first_bytes(b"x").unwrap()).is_ok());
                }
                Ok(None) => panic!("{b:#04x}: incomplete"),
                Err(e) => assert!(!valid, "{b:#04x} refused: {e}"),
            }
        }
    }

    #[test]
    fn partial_oversized_and_garbage_heads() {
        assert!(head("HTTP/1.1 200 OK\r\nx: y\r\n").unwrap().is_none());
        assert_eq!(
            parse_response(&mut BytesMut::from(&b"HTTP/1.1 200 OK\r\nx: yyyyyyyy"[..]), 10).unwrap_err(),
            Error::TooLarge
        );
        let many: String = (0..=MAX_FIELDS).map(|i| format!("f{i}: v\r\n")).collect();
        assert_eq!(head(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).unwrap_err(), Error::TooLarge);
        let exactly: String = (0..MAX_FIELDS).map(|i| format!("f{i}: v\r\n")).collect();
        assert_eq!(head(&format!("HTTP/1.1 200 OK\r\n{exactly}\r\n")).unwrap().unwrap().fields.len(), MAX_FIELDS);
        assert!(matches!(head("HTTP/1.1 2x0 What\r\n\r\n"), Err(Error::Invalid(_))));
        assert!(matches!(head("SSH-2.0-OpenSSH\r\n\r\n"), Err(Error::Invalid(_))));
    }

    #[test]
    fn connection_options_are_found_whole_or_in_a_list() {
        let has = |fields: &str, option: &str| {
            head(&format!("HTTP/1.1 200 OK\r\n{fields}\r\n")).unwrap().unwrap().connection_has(option)
        };
        assert!(has("Connection: close\r\n", "close"));
        assert!(has("Connection: CLOSE \r\n", "close"));
        assert!(!has("Connection: keep-alive\r\n", "close"));
        assert!(!has("Connection: closed\r\n", "close") && !has("Connection: clos\r\n", "close"));
        assert!(has("Connection: keep-alive, Close\r\n", "close"));
        assert!(has("Connection: x ,close,y\r\n", "close"));
        assert!(!has("Connection: x, closed\r\n", "close"));
        assert!(has("Connection: keep-alive\r\nConnection: close\r\n", "close"));
        assert!(!has("X-Connection: close\r\n", "close") && !has("", "close"));
    }

    #[test]
    fn framing_follows_rfc_9112_section_6_3() {
        let f = |m: Method, text: &str| {
            let mut h = head(text).unwrap().unwrap();
            let r = framing(&m, &mut h);
            (r, h.has(b"content-length"))
        };
        assert_eq!(f(Method::GET, "HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n").0, Ok(Framing::Empty));
        assert_eq!(f(Method::GET, "HTTP/1.1 304 Not Modified\r\n\r\n").0, Ok(Framing::Empty));
        assert_eq!(f(Method::GET, "HTTP/1.1 103 Early Hints\r\n\r\n").0, Ok(Framing::Empty));
        assert_eq!(f(Method::GET, "HTTP/1.1 200 OK\r\n\r\n").0, Ok(Framing::Close));
        // Transfer-Encoding wins over Content-Length, which is removed.
        assert_eq!(
            f(Method::GET, "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"),
            (Ok(Framing::Chunked), false)
        );
        assert_eq!(
            f(Method::GET, "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n").0,
            Ok(Framing::Chunked)
        );
        assert_eq!(f(Method::GET, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n").0, Ok(Framing::Close));
        assert!(f(Method::GET, "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").0.is_err());
        assert_eq!(
            f(Method::GET, "HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\ncontent-length: 7\r\n\r\n").0,
            Ok(Framing::Length(7))
        );
        assert!(f(Method::GET, "HTTP/1.1 200 OK\r\ncontent-length: 7\r\ncontent-length: 8\r\n\r\n").0.is_err());
        assert!(f(Method::GET, "HTTP/1.1 200 OK\r\ncontent-length: +7\r\n\r\n").0.is_err());
        assert!(f(Method::GET, "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n").0.is_err());
        let h = head("HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\n\r\n").unwrap().unwrap();
        assert!(!persistent(&h));
        let h = head("HTTP/1.1 200 OK\r\nKeep-Alive: max=100, Timeout=5\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.keep_alive_timeout(), Some(5));
        assert!(persistent(&h));
        let h = head("HTTP/1.1 200 OK\r\nkeep-alive: timeout=5, max=100\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.keep_alive_timeout(), Some(5));
        assert_eq!(head("HTTP/1.1 200 OK\r\nx: y\r\n\r\n").unwrap().unwrap().keep_alive_timeout(), None);
        assert!(matches!(head("HTTP/1.1 200 OK\r\nx: a\x7fb\r\n\r\n"), Err(Error::Invalid(_))));
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n").unwrap().unwrap();
        assert!(!persistent(&h));
    }

    /// A request head: its line, `fields`, and the framing field `body` needs.
    fn encode_request(method: &Method, target: &str, fields: &HeaderMap, body: RequestBody, out: &mut Vec<u8>) {
        request_line(method, target, out);
        for (name, value) in fields {
            field(out, name.as_str().as_bytes(), value.as_bytes());
        }
        end_head(method, body, fields.contains_key(header::CONTENT_LENGTH), out);
    }

    #[test]
    fn a_request_head_carries_its_framing() {
        let mut fields = HeaderMap::new();
        fields.insert(header::HOST, HeaderValue::from_static("example.com"));
        let mut out = Vec::new();
        encode_request(&Method::GET, "/a?b", &fields, RequestBody::Empty, &mut out);
        assert_eq!(out, b"GET /a?b HTTP/1.1\r\nhost: example.com\r\n\r\n");
        out.clear();
        encode_request(&Method::POST, "/", &fields, RequestBody::Empty, &mut out);
        assert_eq!(out, b"POST / HTTP/1.1\r\nhost: example.com\r\ncontent-length: 0\r\n\r\n");
        out.clear();
        encode_request(&Method::PUT, "/", &fields, RequestBody::Chunked, &mut out);
        assert_eq!(out, b"PUT / HTTP/1.1\r\nhost: example.com\r\ntransfer-encoding: chunked\r\n\r\n");
        out.clear();
        encode_chunk(b"", &mut out);
        encode_chunk(&[b'a'; 26], &mut out);
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        encode_last_chunk(Some(&t), &mut out);
        let mut expect = b"1a\r\n".to_vec();
        expect.extend_from_slice(&[b'a'; 26]);
        expect.extend_from_slice(b"\r\n0\r\ngrpc-status: 0\r\n\r\n");
        assert_eq!(out, expect);
    }

    /// Decodes `wire` fed in pieces of `step` bytes; the data and the trailers.
    fn dechunk(wire: &[u8], step: usize) -> Result<(Vec<u8>, Option<HeaderMap>), Error> {
        let mut d = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Chunk::Data(n) => data.extend_from_slice(&buf.split_to(n)),
                Chunk::End(t) => return Ok((data, t)),
                Chunk::NeedMore if fed >= wire.len() => return Err(Error::Invalid("truncated")),
                Chunk::NeedMore => {
                    let end = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_in_any_pieces() {
        let wire = b"5\r\nhello\r\n1A;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-t: 1\r\n\r\n";
        for step in [1, 2, 3, 7, 100] {
            let (data, t) = dechunk(wire, step).unwrap();
            assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            assert_eq!(t.unwrap().get("x-t").unwrap(), "1");
        }
        let (data, t) = dechunk(b"3 ;x\r\nabc\r\n0\r\n\r\n", 4).unwrap();
        assert_eq!((data.as_slice(), t), (&b"abc"[..], None));
        // Whatever follows the body stays in the buffer.
        let mut d = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::from(&b"0\r\n\r\nHTTP/1.1"[..]);
        assert_eq!(d.decode(&mut buf), Ok(Chunk::End(None)));
        assert!(d.done());
        assert_eq!(&buf[..], b"HTTP/1.1");
    }

    #[test]
    fn bad_chunked_framing_is_an_error() {
        for wire in [
            &b"x\r\n"[..],
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5 5\r\nhello\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"5\nhello\r\n",
            b"0\r\nbad trailer\r\n\r\n",
        ] {
            assert!(dechunk(wire, 100).is_err(), "{}", String::from_utf8_lossy(wire));
        }
        let long = format!("5;{}\r\n", "e".repeat(MAX_CHUNK_LINE));
        assert!(dechunk(long.as_bytes(), 100).is_err());
        let big_trailers = format!("0\r\nx: {}\r\n\r\n", "v".repeat(2000));
        assert_eq!(dechunk(big_trailers.as_bytes(), 100).unwrap_err(), Error::TooLarge);
    }
}
