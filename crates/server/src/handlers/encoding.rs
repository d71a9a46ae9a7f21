//! Content codings (RFC 9110 §8.4): which one a request accepts (`Accept-Encoding`, §12.5.3),
//! and the codecs that make them, whole (a static file's stored variant) or as a body streams
//! (each piece flushed, so a Server-Sent Event or a chunk the scheduler picks is never held back
//! waiting for more input).
//!
//! The codecs are their maintained crates (`brotli`, `zstd`, `flate2`); nothing here encodes
//! by hand.

use std::io::{self, Write};

use bytes::Bytes;

use crate::config::{Codec, Compression};
use crate::message::{Body, BodySource, Request, Response};

/// A q-value in thousandths (RFC 9110 §12.4.2: at most three decimals).
type Q = u16;

/// The coding to use for a request whose `Accept-Encoding` values are `accept`, among
/// `offered` (most preferred first): the one with the highest q-value above zero, the
/// server's preference between equals. A coding the request does not name is acceptable only
/// through `*`. `None`: identity (also when the field is absent, RFC 9110 §12.5.3: then any
/// coding is acceptable, but a client that says nothing may not decode one).
pub(crate) fn negotiate<'a>(accept: impl IntoIterator<Item = &'a [u8]>, offered: &[Codec]) -> Option<Codec> {
    let mut named: [Option<Q>; 3] = [None; 3];
    let mut star: Option<Q> = None;
    for value in accept {
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let coding = trim(parts.next().unwrap_or_default());
            if coding.is_empty() {
                continue;
            }
            let mut q: Q = 1000;
            for p in parts {
                let p = trim(p);
                if p.len() > 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                    // A malformed q-value makes the element say nothing.
                    q = match parse_q(&p[2..]) {
                        Some(q) => q,
                        None => continue,
                    };
                }
            }
            if coding == b"*" {
                star = Some(star.map_or(q, |s| s.max(q)));
                continue;
            }
            // RFC 9110 §8.4.1.3: `x-gzip` is `gzip`.
            let codec = Codec::ALL.into_iter().find(|c| {
                coding.eq_ignore_ascii_case(c.token().as_bytes())
                    || *c == Codec::Gzip && coding.eq_ignore_ascii_case(b"x-gzip")
            });
            if let Some(c) = codec {
                let slot = &mut named[c.index()];
                *slot = Some(slot.map_or(q, |s| s.max(q)));
            }
        }
    }
    let mut best: Option<(Codec, Q)> = None;
    for &c in offered {
        let q = named[c.index()].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((c, q));
        }
    }
    best.map(|(c, _)| c)
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t')).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !matches!(c, b' ' | b'\t')).map_or(start, |e| e + 1);
    &b[start..end]
}

/// `0`, `0.5`, `1.000` (RFC 9110 §12.4.2), in thousandths.
fn parse_q(b: &[u8]) -> Option<Q> {
    let (int, frac) = match b.iter().position(|&c| c == b'.') {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Q = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| Q::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// `data` compressed whole with `codec` at `level`.
pub(crate) fn compress(codec: Codec, level: u32, data: &[u8]) -> io::Result<Vec<u8>> {
    match codec {
        Codec::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: level.min(11) as i32,
                lgwin: window_log(data.len()),
                size_hint: data.len(),
                ..Default::default()
            };
            let mut out = Vec::with_capacity(data.len() / 3);
            brotli::BrotliCompress(&mut &data[..], &mut out, &params)?;
            Ok(out)
        }
        Codec::Zstd => zstd::bulk::compress(data, level as i32),
        Codec::Gzip => {
            let mut enc =
                flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 3), flate2::Compression::new(level));
            enc.write_all(data)?;
            enc.finish()
        }
    }
}

/// Brotli's window for a body of `len` bytes: no larger than the body needs (the window is
/// memory the encoder holds), between brotli's bounds of 2^10 and 2^24.
fn window_log(len: usize) -> i32 {
    let bits = usize::BITS - len.max(1).leading_zeros();
    bits.clamp(10, 22) as i32
}

/// Brotli's window while streaming: 256 KiB (a response's memory while it streams is the
/// codec's window and tables; 4 MiB, brotli's default, per stream would be most of a
/// connection's budget).
const STREAM_WINDOW_LOG: i32 = 18;
/// Zstandard's window while streaming, for the same reason (its level 3 default is 2 MiB).
const STREAM_ZSTD_WINDOW_LOG: u32 = 18;

/// A body compressed as it streams: each piece given to [`Encoder::push`] comes out at once,
/// compressed and flushed (the coding's flush: brotli's FLUSH operation, a zstd block end,
/// deflate's sync flush), so what the client receives never waits for input that has not come.
pub(crate) struct Encoder(Inner);

enum Inner {
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

impl Encoder {
    /// An encoder for `codec` at `level`.
    pub(crate) fn new(codec: Codec, level: u32) -> io::Result<Self> {
        Ok(Self(match codec {
            Codec::Br => Inner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                level.min(11),
                STREAM_WINDOW_LOG as u32,
            ))),
            Codec::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), level as i32)?;
                e.window_log(STREAM_ZSTD_WINDOW_LOG)?;
                Inner::Zstd(e)
            }
            Codec::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level))),
        }))
    }

    /// `data` compressed and flushed: everything the client needs to decode it.
    pub(crate) fn push(&mut self, data: &[u8]) -> io::Result<Bytes> {
        match &mut self.0 {
            Inner::Br(w) => {
                w.write_all(data)?;
                w.flush()?;
                Ok(Bytes::from(std::mem::take(w.get_mut())))
            }
            Inner::Zstd(w) => {
                w.write_all(data)?;
                w.flush()?;
                Ok(Bytes::from(std::mem::take(w.get_mut())))
            }
            Inner::Gzip(w) => {
                w.write_all(data)?;
                w.flush()?;
                Ok(Bytes::from(std::mem::take(w.get_mut())))
            }
        }
    }

    /// The end of the coding (brotli's last block, zstd's frame end, gzip's trailer).
    pub(crate) fn finish(self) -> io::Result<Bytes> {
        match self.0 {
            Inner::Br(w) => Ok(Bytes::from(w.into_inner())),
            Inner::Zstd(w) => Ok(Bytes::from(w.finish()?)),
            Inner::Gzip(w) => Ok(Bytes::from(w.finish()?)),
        }
    }
}

/// Add `accept-encoding` to the response's `Vary` (RFC 9110 §12.5.5), unless it varies on
/// everything already or names it.
pub(crate) fn add_vary(headers: &mut http::HeaderMap) {
    let named = headers.get_all(http::header::VARY).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|t| {
            let t = trim(t);
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !named {
        headers.append(http::header::VARY, http::HeaderValue::from_static("accept-encoding"));
    }
}

/// The entity tag of a representation encoded with `codec`, from its identity's `tag` (with
/// quotes, weak or strong): the same tag with `-br`, `-zstd` or `-gzip` before the closing
/// quote, so that each variant has its own (RFC 9110 §8.8.3). `None` for a value that is not
/// an entity tag.
pub(crate) fn variant_tag(tag: &[u8], codec: Codec, weak: bool) -> Option<http::HeaderValue> {
    let (was_weak, opaque) = match tag.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, tag),
    };
    let inner = opaque.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut v = Vec::with_capacity(tag.len() + 8);
    if weak || was_weak {
        v.extend_from_slice(b"W/");
    }
    v.push(b'"');
    v.extend_from_slice(inner);
    v.push(b'-');
    v.extend_from_slice(codec.token().as_bytes());
    v.push(b'"');
    http::HeaderValue::from_bytes(&v).ok()
}

/// Responses being compressed as they stream, process-wide (`[compression] max_streams`).
static STREAMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of [`STREAMS`], given back on drop.
struct Slot;

impl Slot {
    fn take(max: usize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        STREAMS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok().map(|_| Self)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        STREAMS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The values of the response's fields named `name` (lower case), prebuilt ones first.
fn values<'a>(resp: &'a Response, name: &'a http::HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
    let head = resp
        .head
        .iter()
        .flat_map(move |h| h.iter().filter(move |(n, _)| *n == name.as_str().as_bytes()).map(|(_, v)| v));
    head.chain(resp.headers.get_all(name).iter().map(http::HeaderValue::as_bytes))
}

/// Whether one of the comma-separated elements of the fields named `name` is `token` (any
/// case) or `*` when `star` counts.
fn lists(resp: &Response, name: &http::HeaderName, token: &[u8], star: bool) -> bool {
    values(resp, name).any(|v| {
        v.split(|&b| b == b',').any(|t| {
            let t = trim(t);
            t.eq_ignore_ascii_case(token) || star && t == b"*"
        })
    })
}

/// Compress `resp`, a response to `req` from a handler other than the static files' (which
/// keep variants of their own), with the coding `req`'s `Accept-Encoding` selects, as its
/// body streams: a 2xx of a compressed media type (`[compression] types`) that is not encoded
/// already, not a range, not `no-transform`, and not known to be under `min_size`. Such a
/// response says `Vary: accept-encoding` whether or not it is compressed. An entity tag gets the
/// coding's name and becomes weak (the bytes depend on how the body arrives); a 304 to a
/// request that named a variant's tag in `codec` (`revalidated`, bits by `Codec::index`, from
/// [`unvary_preconditions`]) gets that tag back when `codec` is still the one selected.
pub(crate) fn encode_response(cfg: &Compression, req: &Request, revalidated: u8, resp: &mut Response) {
    use http::header;
    let accept = || req.headers.get_all(header::ACCEPT_ENCODING).iter().map(http::HeaderValue::as_bytes);
    if resp.status == http::StatusCode::NOT_MODIFIED {
        let Some(codec) = negotiate(accept(), &cfg.codecs) else { return };
        let asked = revalidated & (1 << codec.index()) != 0;
        let tag = values(resp, &header::ETAG).next().map(<[u8]>::to_vec);
        if let (true, Some(tag)) = (asked, tag) {
            if let Some(v) = variant_tag(&tag, codec, true) {
                resp.materialize();
                resp.headers.insert(header::ETAG, v);
                add_vary(&mut resp.headers);
            }
        }
        return;
    }
    if !resp.status.is_success()
        || resp.status == http::StatusCode::NO_CONTENT
        || resp.status == http::StatusCode::PARTIAL_CONTENT
    {
        return;
    }
    // Cheapest first: most small responses end at their length.
    if resp.body.len().is_some_and(|n| n < cfg.min_size) {
        return;
    }
    let Some(ctype) = values(resp, &header::CONTENT_TYPE).next() else { return };
    if !cfg.compresses(ctype)
        || values(resp, &header::CONTENT_ENCODING).next().is_some()
        || values(resp, &header::CONTENT_RANGE).next().is_some()
        || lists(resp, &header::CACHE_CONTROL, b"no-transform", false)
        || !pollable(&resp.body)
    {
        return;
    }
    let codec = negotiate(accept(), &cfg.codecs);
    let varies = !lists(resp, &header::VARY, b"accept-encoding", true);
    let slot = codec.and_then(|_| Slot::take(cfg.max_streams));
    let encoder = codec.filter(|_| slot.is_some()).and_then(|c| match Encoder::new(c, cfg.levels(c).streaming) {
        Ok(e) => Some((c, e)),
        Err(e) => {
            tracing::warn!(codec = c.token(), "cannot start compressing: {e}");
            None
        }
    });
    let Some((codec, encoder)) = encoder else {
        if varies {
            // Appended beside the prebuilt fields: a second `Vary` line adds to the first.
            resp.headers.append(header::VARY, http::HeaderValue::from_static("accept-encoding"));
        }
        return;
    };
    resp.materialize();
    let h = &mut resp.headers;
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    h.insert(header::CONTENT_ENCODING, http::HeaderValue::from_static(codec.token()));
    if varies {
        h.append(header::VARY, http::HeaderValue::from_static("accept-encoding"));
    }
    if let Some(tag) = h.get(header::ETAG).and_then(|t| variant_tag(t.as_bytes(), codec, true)) {
        h.insert(header::ETAG, tag);
    }
    let inner = std::mem::replace(&mut resp.body, Body::Empty);
    resp.body = Body::Source(Box::new(Encoded {
        inner,
        encoder: Some(encoder),
        _slot: slot,
        codec,
        read: 0,
        written: 0,
        exchange: req.exchange.clone(),
    }));
}

/// `W/"tag-br"` (a variant's tag as [`encode_response`] makes it): the identity's tag,
/// `W/"tag"`, and the coding.
pub(crate) fn strip_variant(tag: &[u8]) -> Option<(&[u8], Codec)> {
    let inner = tag.strip_prefix(b"W/\"")?.strip_suffix(b"\"")?;
    Codec::ALL.into_iter().find_map(|c| {
        let cut = inner.strip_suffix(c.token().as_bytes())?.strip_suffix(b"-")?;
        Some((&tag[..2 + 1 + cut.len()], c))
    })
}

/// `If-None-Match` and `If-Match` of a request about to go upstream with the tags of our
/// variants (`W/"tag-br"`) as the upstream made them (`W/"tag"`; a weak comparison matches its
/// strong tag too), so that a client revalidating a compressed response gets its 304. Which
/// codings' tags were named: bits by `Codec::index`.
pub(crate) fn unvary_preconditions(headers: &mut http::HeaderMap) -> u8 {
    // One pass over the names first: most requests carry neither field, and each lookup below
    // is a hash probe (two cost about 300 instructions a proxied request).
    if !headers.keys().any(|n| n == http::header::IF_NONE_MATCH || n == http::header::IF_MATCH) {
        return 0;
    }
    let mut named = 0u8;
    for name in [http::header::IF_NONE_MATCH, http::header::IF_MATCH] {
        let values: Vec<http::HeaderValue> = headers.get_all(&name).iter().cloned().collect();
        if !values.iter().any(|v| v.as_bytes().split(|&b| b == b',').any(|t| strip_variant(trim(t)).is_some())) {
            continue;
        }
        headers.remove(&name);
        for v in values {
            let mut out = Vec::with_capacity(v.len());
            for (i, t) in v.as_bytes().split(|&b| b == b',').enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                let t = trim(t);
                match strip_variant(t) {
                    Some((tag, codec)) => {
                        named |= 1 << codec.index();
                        out.extend_from_slice(tag);
                        out.push(b'"');
                    }
                    None => out.extend_from_slice(t),
                }
            }
            if let Ok(v) = http::HeaderValue::from_bytes(&out) {
                headers.append(&name, v);
            }
        }
    }
    named
}

/// Whether a body can be read through `BodySource::poll_chunk` (in memory or another
/// component's stream; not a file, which the static files answer with their own variants).
fn pollable(body: &Body) -> bool {
    match body {
        Body::Empty | Body::Full(_) | Body::Zeros(_) | Body::Source(_) => true,
        Body::Trailed(b, _) => pollable(b),
        Body::File { .. } | Body::Concat(_) => false,
    }
}

/// Input read at once while streaming: each piece is compressed and flushed on its own, so it
/// is small enough that the client sees progress, large enough that the flushes cost little.
const PIECE: usize = 32 * 1024;

/// A body compressed as it streams ([`Encoder`]): each piece the inner body yields goes out
/// compressed and flushed before the next is read; trailers pass through.
struct Encoded {
    inner: Body,
    /// `None` once finished.
    encoder: Option<Encoder>,
    _slot: Option<Slot>,
    codec: Codec,
    /// Bytes in and out so far, for the metrics and the request's log line.
    read: u64,
    written: u64,
    exchange: crate::message::ExchangeRef,
}

impl Drop for Encoded {
    fn drop(&mut self) {
        crate::message::metrics::compressed(self.codec.index(), self.read, self.written);
        self.exchange.compressed(self.codec.index(), self.read, self.written);
    }
}

fn poll_inner(
    body: &mut Body,
    cx: &mut std::task::Context<'_>,
    max: usize,
) -> std::task::Poll<Option<io::Result<Bytes>>> {
    use std::task::Poll;
    match body {
        Body::Source(s) => s.poll_chunk(cx, max),
        Body::Trailed(b, _) => poll_inner(b, cx, max),
        other => Poll::Ready(other.next_ready(max).flatten()),
    }
}

impl BodySource for Encoded {
    fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
        max: usize,
    ) -> std::task::Poll<Option<io::Result<Bytes>>> {
        use std::task::Poll;
        loop {
            let Some(enc) = self.encoder.as_mut() else { return Poll::Ready(None) };
            let out = match std::task::ready!(poll_inner(&mut self.inner, cx, max.min(PIECE))) {
                Some(Ok(data)) => {
                    self.read += data.len() as u64;
                    enc.push(&data)
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => match self.encoder.take() {
                    Some(enc) => enc.finish(),
                    None => return Poll::Ready(None),
                },
            };
            match out {
                Ok(b) if b.is_empty() => continue,
                Ok(b) => {
                    self.written += b.len() as u64;
                    return Poll::Ready(Some(Ok(b)));
                }
                Err(e) => {
                    self.encoder = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn len(&self) -> Option<u64> {
        None
    }

    fn may_trail(&self) -> bool {
        self.inner.has_trailers()
    }

    fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        self.inner.take_trailers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    const ALL: [Codec; 3] = Codec::ALL;

    fn pick(v: &str) -> Option<Codec> {
        negotiate([v.as_bytes()], &ALL)
    }

    #[test]
    fn the_highest_q_wins_and_the_server_breaks_ties() {
        assert_eq!(pick("gzip, deflate, br, zstd"), Some(Codec::Br));
        assert_eq!(pick("gzip, deflate"), Some(Codec::Gzip));
        assert_eq!(pick("gzip;q=1.0, br;q=0.5"), Some(Codec::Gzip));
        assert_eq!(pick("zstd, br;q=0.999"), Some(Codec::Zstd));
        assert_eq!(pick(" X-GZIP ; Q=0.3 "), Some(Codec::Gzip));
        // `*` stands for what is not named; q=0 refuses.
        assert_eq!(pick("*"), Some(Codec::Br));
        assert_eq!(pick("br;q=0, *;q=0.5"), Some(Codec::Zstd));
        assert_eq!(pick("br;q=0, zstd;q=0, gzip;q=0, *"), None);
        assert_eq!(pick("identity"), None);
        assert_eq!(pick(""), None);
        assert_eq!(negotiate(std::iter::empty::<&[u8]>(), &ALL), None);
        // Malformed q-values say nothing about the coding (it keeps q=1 here) or are ignored.
        assert_eq!(pick("gzip;q=2, br;q=0"), Some(Codec::Gzip));
        assert_eq!(pick("br;q=0.0001"), Some(Codec::Br));
        // Several fields add up; the server's own order where q ties.
        assert_eq!(negotiate([&b"gzip"[..], &b"br"[..]], &[Codec::Gzip, Codec::Br]), Some(Codec::Gzip));
        assert_eq!(negotiate([&b"br"[..]], &[Codec::Gzip]), None);
    }

    #[test]
    fn q_values_parse_to_thousandths() {
        assert_eq!(parse_q(b"0"), Some(0));
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.123"), Some(123));
        assert_eq!(parse_q(b"1"), Some(1000));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"1.001"), None);
        assert_eq!(parse_q(b"0.1234"), None);
        assert_eq!(parse_q(b".5"), None);
        assert_eq!(parse_q(b"0.x"), None);
    }

    fn decode(codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match codec {
            Codec::Br => brotli::Decompressor::new(data, 4096).read_to_end(&mut out).unwrap(),
            Codec::Zstd => zstd::stream::read::Decoder::new(data).unwrap().read_to_end(&mut out).unwrap(),
            Codec::Gzip => flate2::read::GzDecoder::new(data).read_to_end(&mut out).unwrap(),
        };
        out
    }

    #[test]
    fn whole_and_streamed_bodies_decode_to_what_went_in() {
        let text: Vec<u8> =
            (0..200_000u32).flat_map(|i| format!("line {} of the body\n", i % 977).into_bytes()).collect();
        for codec in ALL {
            let whole = compress(codec, 5, &text).unwrap();
            assert!(whole.len() < text.len() / 10, "{codec:?}: {}", whole.len());
            assert_eq!(decode(codec, &whole), text, "{codec:?} whole");
            let mut enc = Encoder::new(codec, 3).unwrap();
            let mut out = Vec::new();
            for piece in text.chunks(16 * 1024) {
                out.extend_from_slice(&enc.push(piece).unwrap());
            }
            out.extend_from_slice(&enc.finish().unwrap());
            assert_eq!(decode(codec, &out), text, "{codec:?} streamed");
        }
    }

    #[test]
    fn each_pushed_piece_decodes_before_the_next_is_given() {
        // A Server-Sent Event pushed alone must be readable at once: what `push` returned so
        // far decodes to every event so far.
        for codec in ALL {
            let mut enc = Encoder::new(codec, 3).unwrap();
            let mut out = Vec::new();
            let mut sent = Vec::new();
            for i in 0..5 {
                let event = format!("data: event {i}\n\n");
                sent.extend_from_slice(event.as_bytes());
                out.extend_from_slice(&enc.push(event.as_bytes()).unwrap());
                let mut got = Vec::new();
                let _ = match codec {
                    Codec::Br => brotli::Decompressor::new(&out[..], 4096).read_to_end(&mut got),
                    Codec::Zstd => zstd::stream::read::Decoder::new(&out[..]).unwrap().read_to_end(&mut got),
                    Codec::Gzip => flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut got),
                };
                assert_eq!(got, sent, "{codec:?} after event {i}");
            }
        }
    }

    #[test]
    fn variants_get_their_own_tags_and_vary_is_added_once() {
        assert_eq!(variant_tag(b"\"abc-12\"", Codec::Br, false).unwrap(), "\"abc-12-br\"");
        assert_eq!(variant_tag(b"W/\"x\"", Codec::Gzip, false).unwrap(), "W/\"x-gzip\"");
        assert_eq!(variant_tag(b"\"x\"", Codec::Zstd, true).unwrap(), "W/\"x-zstd\"");
        assert!(variant_tag(b"x", Codec::Br, false).is_none());
        let mut h = http::HeaderMap::new();
        add_vary(&mut h);
        add_vary(&mut h);
        assert_eq!(h.get_all(http::header::VARY).iter().count(), 1);
        let mut h = http::HeaderMap::new();
        h.insert(http::header::VARY, http::HeaderValue::from_static("Origin, Accept-Encoding"));
        add_vary(&mut h);
        assert_eq!(h.get_all(http::header::VARY).iter().count(), 1);
    }

    #[test]
    fn a_variant_s_tag_goes_upstream_as_the_upstream_made_it() {
        assert_eq!(strip_variant(b"W/\"abc-br\""), Some((&b"W/\"abc"[..], Codec::Br)));
        assert_eq!(strip_variant(b"W/\"a-b-gzip\""), Some((&b"W/\"a-b"[..], Codec::Gzip)));
        // Strong tags are the origin's own (Apache's `"x-gzip"`), and other suffixes stay.
        assert_eq!(strip_variant(b"\"abc-br\""), None);
        assert_eq!(strip_variant(b"W/\"abcbr\""), None);
        let mut h = http::HeaderMap::new();
        h.append(http::header::IF_NONE_MATCH, http::HeaderValue::from_static("W/\"x-zstd\", \"y\""));
        h.append(http::header::IF_NONE_MATCH, http::HeaderValue::from_static("W/\"z-br\""));
        h.insert(http::header::IF_MATCH, http::HeaderValue::from_static("\"q-gzip\""));
        let named = unvary_preconditions(&mut h);
        assert_eq!(named, 1 << Codec::Zstd.index() | 1 << Codec::Br.index());
        let inm: Vec<_> =
            h.get_all(http::header::IF_NONE_MATCH).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        assert_eq!(inm, ["W/\"x\", \"y\"", "W/\"z\""]);
        assert_eq!(h.get(http::header::IF_MATCH).unwrap(), "\"q-gzip\"");
    }
}
