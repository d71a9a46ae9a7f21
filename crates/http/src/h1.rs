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

use crate::Field;

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
    /// The fields in order, names lower-cased, connection-specific ones included; common
    /// names are static, the rest and the values share one copy of the head.
    pub fields: Vec<Field>,
}

impl ResponseHead {
    /// The values of the fields named `name` (lower-case).
    pub fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields.iter().filter(move |f| f.name == name).map(|f| &f.value[..])
    }

    /// Whether a field named `name` (lower-case) is there.
    pub fn has(&self, name: &[u8]) -> bool {
        self.fields.iter().any(|f| f.name == name)
    }

    /// Whether `Connection` names `option` (case-insensitive).
    pub fn connection_has(&self, option: &str) -> bool {
        self.values(b"connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(option.as_bytes()))
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
        crate::append_to_map(&self.fields, &mut map);
        map
    }
}

/// Reads a response head from the start of `buf`. `Ok(None)`: not complete yet (the caller
/// bounds how much it buffers with `max`). On success the head's bytes are consumed from
/// `buf`; what follows (body, next message) stays.
pub fn parse_response(buf: &mut BytesMut, max: usize) -> Result<Option<ResponseHead>, Error> {
    // Where each field's name and value lie in `buf`, taken while httparse borrows it.
    let mut spans = [[0u32; 4]; MAX_FIELDS];
    let (len, n, status, version) = {
        // Uninitialised slots: filling a hundred of them first cost more than parsing a small head.
        let mut slots = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut r = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut r, buf, &mut slots) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return if buf.len() > max { Err(Error::TooLarge) } else { Ok(None) };
            }
            Err(httparse::Error::TooManyHeaders) => return Err(Error::TooLarge),
            Err(_) => return Err(Error::Invalid("malformed response head")),
        };
        if len > max {
            return Err(Error::TooLarge);
        }
        let status = r.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or(Error::Invalid("bad status code"))?;
        let version = if r.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
        for (s, h) in spans.iter_mut().zip(r.headers.iter()) {
            let (name, value) = (span(buf, h.name.as_bytes()), span(buf, h.value));
            // Within `max`, which the caller keeps far under 4 GiB.
            *s = [name.start, name.end, value.start, value.end].map(|x| x as u32);
        }
        (len, r.headers.len(), status, version)
    };
    let fields = to_fields(&spans[..n], buf.split_to(len));
    Ok(Some(ResponseHead { status, version, fields }))
}

/// Where `part` (a slice of `base`) lies in it.
fn span(base: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let at = part.as_ptr() as usize - base.as_ptr() as usize;
    at..at + part.len()
}

/// The fields at `spans` of `head`, split off the connection's read buffer: the names
/// lower-cased in place, common names static, the rest slices of `head`. No copy and no
/// allocation for the head's bytes (its body chunks are slices of that buffer too). The values
/// are not checked again: httparse refuses a control character other than HTAB in one (its
/// `HEADER_VALUE_MAP`), the rule the `http` crate's values follow too (a test below holds it to
/// that).
fn to_fields(spans: &[[u32; 4]], mut head: BytesMut) -> Vec<Field> {
    let at = |a: u32, b: u32| a as usize..b as usize;
    for s in spans {
        lowercase(&mut head[at(s[0], s[1])]);
    }
    let head = head.freeze();
    let mut fields = Vec::with_capacity(spans.len() + 1);
    for s in spans {
        let name = match crate::static_response_name(&head[at(s[0], s[1])]) {
            Some(n) => Bytes::from_static(n),
            None => head.slice(at(s[0], s[1])),
        };
        fields.push(Field { name, value: head.slice(at(s[2], s[3])) });
    }
    fields
}

/// ASCII upper case to lower case in place, eight bytes at a time. An origin's field names are
/// mostly capitalised (`Content-Type`); byte by byte this cost about 550 instructions per
/// proxied response, some six a byte.
fn lowercase(b: &mut [u8]) {
    let n = b.len();
    // Lowering a byte twice changes nothing, so the last word may overlap the one before.
    if n >= 8 {
        let mut i = 0;
        while i + 8 <= n {
            lower_word(b, i);
            i += 8;
        }
        if i < n {
            lower_word(b, n - 8);
        }
    } else if n >= 4 {
        lower_half(b, 0);
        lower_half(b, n - 4);
    } else {
        b.make_ascii_lowercase();
    }
}

/// [`lower8`] of the eight bytes of `b` at `at`.
fn lower_word(b: &mut [u8], at: usize) {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    b[at..at + 8].copy_from_slice(&lower8(u64::from_le_bytes(w)).to_le_bytes());
}

/// [`lower8`] of the four bytes of `b` at `at` (zero bytes above them stay zero).
fn lower_half(b: &mut [u8], at: usize) {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    let low = lower8(u64::from(u32::from_le_bytes(w)));
    b[at..at + 4].copy_from_slice(&low.to_le_bytes()[..4]);
}

/// [`lowercase`] of eight bytes in a word: each byte from `A` to `Z` gains 0x20, every other
/// byte (non-ASCII ones included) stays as it is. Within a byte, its low seven bits plus 0x3f
/// reach bit 7 exactly when they are at least `A` (0x41), plus 0x25 exactly when they are past
/// `Z` (0x5a); neither sum carries into the next byte.
fn lower8(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let low = w & (0x7f * ONES);
    let from_a = low + (0x80 - b'A' as u64) * ONES;
    let past_z = low + (0x80 - b'Z' as u64 - 1) * ONES;
    let upper = from_a & !past_z & !w & (0x80 * ONES);
    w | (upper >> 2)
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
        head.fields.retain(|f| f.name != "content-length");
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
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
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

    #[test]
    fn lowercase_by_words_is_make_ascii_lowercase() {
        // Every byte value, at every position of a word and in the tail past the last word.
        for len in 0..=17 {
            for at in 0..len {
                for v in 0..=255u8 {
                    let mut a: Vec<u8> = (0..len).map(|i| b"Content-Type:Xz@["[i % 17]).collect();
                    a[at] = v;
                    let mut want = a.clone();
                    want.make_ascii_lowercase();
                    lowercase(&mut a);
                    assert_eq!(a, want, "length {len}, byte {v:#04x} at {at}");
                }
            }
        }
    }

    #[test]
    fn a_response_head_parses_and_leaves_the_body() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello"[..]);
        let h = parse_response(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.values(b"x-a").collect::<Vec<_>>(), [b"1", b"2"]);
        // Names are lower-cased, common ones static.
        assert_eq!(h.fields[0].name, "content-length");
        assert_eq!(h.fields[1].name, "x-a");
        assert_eq!(&buf[..], b"hello");
        let mut h = h;
        assert_eq!(framing(&Method::GET, &mut h), Ok(Framing::Length(5)));
        assert_eq!(framing(&Method::HEAD, &mut h), Ok(Framing::Empty));
        assert!(persistent(&h));
    }

    #[test]
    fn a_control_character_in_a_value_is_refused_as_the_http_crate_would() {
        // `to_fields` relies on the parser for this: the fields go to HTTP/2 and HTTP/3 clients
        // and into maps unchecked.
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
                    assert!(HeaderValue::from_maybe_shared(h.fields[0].value.clone()).is_ok());
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
