//! Version-neutral request and response types shared by the HTTP/1.1, HTTP/2 and HTTP/3
//! drivers and every handler. A handler sees a [`Request`] (whose body yields data, then
//! trailers) and returns a [`Response`] whose [`Body`] the protocol driver pulls chunk by chunk,
//! so nothing above the driver commits bytes early. A body can be fed by another task
//! ([`Body::stream`], what an upstream response will be) and end with trailers; interim (1xx)
//! responses go out through the request's [`Interim`] before the final response.

use std::fmt;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use tokio::sync::mpsc;

/// Largest chunk a body hands out at once. One HTTP/2 DATA frame at the default
/// SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2) is 16 KiB; 64 KiB keeps per-chunk overhead low for
/// HTTP/1.1 while the HTTP/2 engine splits it into frames.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Which protocol a request arrived on (for logs and `Alt-Svc` decisions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    /// HTTP/1.0 or HTTP/1.1.
    Http1,
    /// HTTP/2 over TLS or cleartext (h2c).
    Http2,
    /// HTTP/3 over QUIC.
    Http3,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Http1 => "HTTP/1.1",
            Self::Http2 => "HTTP/2",
            Self::Http3 => "HTTP/3",
        })
    }
}

/// Whether `a` is a valid authority for an `http`/`https` request: `uri-host [":" port]`
/// (RFC 3986 §3.2; RFC 9110 §4.2.1 forbids an empty host), the port at most 65535. This is
/// what `Host` and `:authority` must hold (RFC 9112 §3.2, RFC 9113 §8.3.1).
pub(crate) fn valid_authority(a: &str) -> bool {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        // IP-literal: an IPv6 address (or IPvFuture, which no client sends) in brackets.
        let Some((inner, after)) = rest.split_once(']') else { return false };
        if inner.is_empty() || !inner.bytes().all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.') {
            return false;
        }
        match after {
            "" => return true,
            _ => match after.strip_prefix(':') {
                Some(p) => ("[]", p),
                None => return false,
            },
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (a, ""),
        }
    };
    let host_ok = !host.is_empty()
        && (host == "[]"
            || host.bytes().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(
                        c,
                        b'-' | b'.'
                            | b'_'
                            | b'~'
                            | b'!'
                            | b'$'
                            | b'&'
                            | b'\''
                            | b'('
                            | b')'
                            | b'*'
                            | b'+'
                            | b','
                            | b';'
                            | b'='
                            | b'%'
                    )
            }));
    // An empty port is allowed (RFC 3986 §3.2.3: "host:" means the default port).
    let port_ok = port.is_empty()
        || (port.len() <= 5
            && port.bytes().all(|c| c.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| p <= 65535));
    host_ok && port_ok
}

/// A request head plus a body reader.
pub(crate) struct Request {
    /// Protocol the request arrived on.
    pub(crate) proto: Proto,
    /// The client's address.
    pub(crate) peer: std::net::SocketAddr,
    /// Request method.
    pub(crate) method: Method,
    /// Authority (`:authority` or `Host`), lower-cased, possibly with a port. Shared: on a
    /// connection the requests name the same one, which is then not copied per request
    /// (`ConnInfo::checked` holds it).
    pub(crate) authority: Arc<str>,
    /// Path as sent, percent-encoded, without the query.
    pub(crate) path: String,
    /// Query string without the `?`, if any.
    pub(crate) query: Option<String>,
    /// Request headers (pseudo-headers removed).
    pub(crate) headers: HeaderMap,
    /// Whether the connection is TLS.
    pub(crate) tls: bool,
    /// The body.
    pub(crate) body: RequestBody,
    /// Why the request cannot be served as sent (a header field that does not parse): the
    /// answer is 400, through the usual path (access log included).
    pub(crate) malformed: Option<Refusal>,
    /// HTTP/1.1 with an `Upgrade` field: the connection, once a 101 has gone out (the reverse
    /// proxy tunnels WebSockets through it).
    pub(crate) upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// What the access-log line counts for this request (handlers mark the hints they sent).
    pub(crate) counters: crate::app::accesslog::CountersRef,
}

/// Why a request is answered before any handler sees it, and with what status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) why: &'static str,
}

impl Refusal {
    /// 400: the request is malformed.
    pub(crate) fn bad(why: &'static str) -> Self {
        Self { status: StatusCode::BAD_REQUEST, why }
    }
}

/// Where a handler sends interim (1xx) responses (RFC 9110 §15.2), any number before the final
/// response: through the request's stream ([`HoldsCounters`]), which its counters' handle
/// reaches. Over HTTP/1.1 there is none: hyper's server sends no 1xx but its own 100
/// (Continue), and browsers ignore 103 over HTTP/1.1.
///
/// [`HoldsCounters`]: crate::app::accesslog::HoldsCounters
#[derive(Clone, Copy)]
pub(crate) struct Interim<'a>(&'a dyn crate::app::accesslog::HoldsCounters);

impl<'a> Interim<'a> {
    /// The interim path of the request whose counters are `counters` (`&req.counters`).
    pub(crate) fn of(counters: &'a crate::app::accesslog::CountersRef) -> Self {
        Self(counters.holder())
    }

    /// Whether interim responses reach the client on this request's protocol.
    pub(crate) fn available(&self) -> bool {
        self.0.has_interims()
    }

    /// Send an interim response: `status` 100..=199 but 101 (which only HTTP/1.1 can carry,
    /// and hyper handles). False when it cannot go out (no interim path, a bad status, or the
    /// stream is gone).
    pub(crate) fn send(&self, status: http::StatusCode, headers: &HeaderMap) -> bool {
        let code = status.as_u16();
        if !(100..200).contains(&code) || code == 101 {
            return false;
        }
        self.0.has_interims() && self.0.interim(code, crate::app::respond::response_fields(headers))
    }
}

/// A request body: chunks in order, then `None`, then [`RequestBody::trailers`]. Dropping it
/// discards the rest.
pub(crate) struct RequestBody {
    inner: BodyRx,
    /// Bytes taken so far, shared with the access log.
    seen: Option<crate::app::accesslog::CountersRef>,
    /// Largest body accepted; more is an error.
    limit: u64,
    /// The trailer section, once the body has ended (HTTP/2 and HTTP/3: set by the driver
    /// before it closes the channel; HTTP/1.1: from hyper's last frame).
    trailers: Trailers,
    /// HTTP/1.1: the minimum rate the client must send at while the handler waits for body
    /// bytes (HTTP/2 and HTTP/3 bound a stalled stream with their own timers).
    pace: Option<Pace>,
}

/// The progress an HTTP/1.1 request body owes: at least `rule.min_bytes` per `rule.window`
/// of the handler waiting for it.
struct Pace {
    rule: crate::io::progress::Rule,
    /// End of the current window (from the first wait).
    window_end: Option<tokio::time::Instant>,
    /// Bytes received in the current window.
    moved: u64,
}

/// Where a driver leaves a request's trailers for its handler.
pub(crate) type TrailerSlot = Arc<std::sync::Mutex<Option<HeaderMap>>>;

/// Where a body's trailers are: in a slot a driver fills (HTTP/2, HTTP/3), or here (HTTP/1.1,
/// and bodies that have none: no allocation).
enum Trailers {
    Here(Option<HeaderMap>),
    Slot(TrailerSlot),
}

enum BodyRx {
    Empty,
    Channel(mpsc::UnboundedReceiver<Result<Bytes, BodyError>>, Option<Arc<dyn Fn(usize) + Send + Sync>>),
    Hyper(hyper::body::Incoming),
}

/// Why a request body ended early.
#[derive(Debug, Clone)]
pub(crate) enum BodyError {
    /// The peer reset the stream or closed the connection.
    Reset,
    /// The body exceeded the configured limit.
    TooLarge,
    /// The client sent the body slower than `limits.min_rate` (HTTP/1.1).
    TooSlow,
    /// Any other I/O or protocol error.
    Other(String),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reset => f.write_str("request body reset by peer"),
            Self::TooLarge => f.write_str("request body too large"),
            Self::TooSlow => f.write_str("request body sent slower than limits.min_rate"),
            Self::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for BodyError {}

impl RequestBody {
    /// A body with no bytes.
    pub(crate) fn empty() -> Self {
        Self { inner: BodyRx::Empty, seen: None, limit: u64::MAX, trailers: Trailers::Here(None), pace: None }
    }

    /// A body fed by an HTTP/2 or HTTP/3 stream. `on_consumed(n)` runs each time the handler
    /// takes `n` bytes, so the driver can hand flow-control credit back to the peer.
    pub(crate) fn channel(
        rx: mpsc::UnboundedReceiver<Result<Bytes, BodyError>>,
        on_consumed: Option<Arc<dyn Fn(usize) + Send + Sync>>,
    ) -> Self {
        Self {
            inner: BodyRx::Channel(rx, on_consumed),
            seen: None,
            limit: u64::MAX,
            trailers: Trailers::Here(None),
            pace: None,
        }
    }

    /// The same, with the slot the driver leaves the trailers in.
    pub(crate) fn with_trailers(mut self, slot: TrailerSlot) -> Self {
        self.trailers = Trailers::Slot(slot);
        self
    }

    /// A body read by hyper's HTTP/1.1 connection, which must arrive at `rule`'s pace while the
    /// handler waits for it (a slowloris body fails with [`BodyError::TooSlow`]).
    pub(crate) fn hyper(body: hyper::body::Incoming, rule: crate::io::progress::Rule) -> Self {
        Self {
            inner: BodyRx::Hyper(body),
            seen: None,
            limit: u64::MAX,
            trailers: Trailers::Here(None),
            pace: Some(Pace { rule, window_end: None, moved: 0 }),
        }
    }

    /// Whether the body is known to hold nothing (no bytes will come).
    pub(crate) fn is_end_stream(&self) -> bool {
        match &self.inner {
            BodyRx::Empty => true,
            BodyRx::Channel(..) => false,
            BodyRx::Hyper(b) => http_body::Body::is_end_stream(b),
        }
    }

    /// The request's trailer section, once [`RequestBody::chunk`] has returned `None`.
    pub(crate) fn trailers(&self) -> Option<HeaderMap> {
        match &self.trailers {
            Trailers::Here(t) => t.clone(),
            Trailers::Slot(slot) => slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone(),
        }
    }

    /// Count the bytes taken into `seen` and fail with [`BodyError::TooLarge`] past `limit`.
    pub(crate) fn counting(mut self, seen: crate::app::accesslog::CountersRef, limit: u64) -> Self {
        self.seen = Some(seen);
        self.limit = limit;
        self
    }

    /// The next chunk, `None` at the end.
    pub(crate) async fn chunk(&mut self) -> Option<Result<Bytes, BodyError>> {
        let item = self.chunk_inner().await;
        if let (Some(Ok(b)), Some(seen)) = (&item, &self.seen) {
            let total = seen.bytes_in.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed) + b.len() as u64;
            if total > self.limit {
                self.inner = BodyRx::Empty;
                return Some(Err(BodyError::TooLarge));
            }
        }
        item
    }

    async fn chunk_inner(&mut self) -> Option<Result<Bytes, BodyError>> {
        match &mut self.inner {
            BodyRx::Empty => None,
            BodyRx::Channel(rx, on_consumed) => {
                let item = rx.recv().await?;
                if let (Ok(b), Some(f)) = (&item, on_consumed.as_ref()) {
                    f(b.len());
                }
                Some(item)
            }
            BodyRx::Hyper(body) => {
                use http_body_util::BodyExt;
                loop {
                    let frame = match &mut self.pace {
                        Some(p) => {
                            let now = tokio::time::Instant::now();
                            let end = *p.window_end.get_or_insert(now + p.rule.window);
                            match tokio::time::timeout_at(end, body.frame()).await {
                                Ok(f) => f,
                                Err(_) => {
                                    if p.moved < p.rule.min_bytes {
                                        return Some(Err(BodyError::TooSlow));
                                    }
                                    p.moved = 0;
                                    p.window_end = Some(tokio::time::Instant::now() + p.rule.window);
                                    continue;
                                }
                            }
                        }
                        None => body.frame().await,
                    };
                    if let (Some(Ok(f)), Some(p)) = (&frame, &mut self.pace) {
                        if let Some(d) = f.data_ref() {
                            p.moved += d.len() as u64;
                        }
                    }
                    match frame? {
                        Ok(frame) => match frame.into_data() {
                            Ok(data) => return Some(Ok(data)),
                            Err(frame) => {
                                if let Ok(t) = frame.into_trailers() {
                                    self.trailers = Trailers::Here(Some(t));
                                }
                            }
                        },
                        Err(e) => return Some(Err(BodyError::Other(e.to_string()))),
                    }
                }
            }
        }
    }
}

/// A response head and body.
pub(crate) struct Response {
    /// Status code.
    pub(crate) status: StatusCode,
    /// Header fields already in the HTTP/2 and HTTP/3 engines' form (lower-case names, none
    /// connection-specific), sent before `headers`. A handler sets it for fields that are
    /// fixed and shared between responses (a cached file's, built once per file version):
    /// converting a map of them per request cost about 2,150 instructions of a small file's
    /// 22,600 (a clone of the map, its drop, and a copy of every value into the engine's form).
    /// The proxy sets it for an HTTP/1.1 upstream's response: the fields where the parser left
    /// them in the head's bytes ([`Head::Packed`]), which go to the engine as they lie. A step
    /// that changes fields after the handler, or reads them from the map alone, calls
    /// [`Response::materialize`] first, which moves them into `headers` (the HTTP/2 and
    /// HTTP/3 sender reads both).
    pub(crate) head: Option<Head>,
    /// Response headers. `content-length` is set by the handler when the length is known.
    pub(crate) headers: HeaderMap,
    /// The body.
    pub(crate) body: Body,
}

impl Response {
    /// A response with `headers` and no prebuilt fields.
    pub(crate) fn new(status: StatusCode, headers: HeaderMap, body: Body) -> Self {
        Self { status, head: None, headers, body }
    }

    /// A response with the given status, a `text/plain` body and its length.
    pub(crate) fn text(status: StatusCode, text: impl Into<Bytes>) -> Self {
        let text = text.into();
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
        headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(text.len()));
        Self::new(status, headers, Body::Full(text))
    }

    /// Move the prebuilt fields ([`Response::head`]) into `headers`, ahead of what is there.
    pub(crate) fn materialize(&mut self) {
        let Some(fields) = self.head.take() else { return };
        let mut map = HeaderMap::with_capacity(fields.len() + self.headers.len());
        fields.append_to_map(&mut map);
        // Appended, not inserted: on the wire both lists go out whole, so a name in both is sent
        // twice either way.
        let mut last: Option<http::HeaderName> = None;
        for (n, v) in std::mem::take(&mut self.headers) {
            if let Some(n) = n {
                last = Some(n);
            }
            // Invariant: a map's iteration names its first value.
            if let Some(n) = &last {
                map.append(n.clone(), v);
            }
        }
        self.headers = map;
    }

    /// Whether the prebuilt fields hold one named `name` (lower-case).
    pub(crate) fn head_has(&self, name: &str) -> bool {
        self.head.as_ref().is_some_and(|h| h.iter().any(|(n, _)| n == name.as_bytes()))
    }
}

/// Fields many responses share (a cached file version's), by pointer: a thin one, not an
/// `Arc<[Field]>`.
pub(crate) type SharedHead = Arc<Vec<sluice_http::Field>>;

/// Prebuilt response fields ([`Response::head`]).
#[derive(Debug)]
pub(crate) enum Head {
    /// Shared by many responses.
    Shared(SharedHead),
    /// This response's own, where an HTTP/1.1 upstream's head holds them (the proxy's).
    Packed(sluice_http::PackedFields),
}

impl Head {
    /// Every field as (name, value).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let (shared, packed) = match self {
            Self::Shared(s) => (Some(s.iter().map(sluice_http::Field::parts)), None),
            Self::Packed(p) => (None, Some(p.iter())),
        };
        shared.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    /// How many fields there are.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Shared(s) => s.len(),
            Self::Packed(p) => p.len(),
        }
    }

    /// Append every field to `map`. Prebuilt fields come from a map
    /// (`respond::response_fields`) or the proxy's checked parse, so they convert back.
    pub(crate) fn append_to_map(&self, map: &mut HeaderMap) {
        match self {
            Self::Shared(s) => sluice_http::append_to_map(s.iter(), map),
            Self::Packed(p) => p.append_to_map(map),
        }
    }
}

/// A response body the driver pulls from, at most [`CHUNK`] bytes at a time.
pub(crate) enum Body {
    /// No body.
    Empty,
    /// Bytes in memory.
    Full(Bytes),
    /// `len` zero bytes from a shared static buffer (speed test: no allocation per chunk).
    Zeros(u64),
    /// A section of a file, read as the driver asks.
    File {
        /// The open file.
        file: std::fs::File,
        /// First byte.
        offset: u64,
        /// Bytes to send.
        len: u64,
    },
    /// Several bodies one after another (multipart byte ranges).
    Concat(std::collections::VecDeque<Self>),
    /// Chunks another task sends, then perhaps trailers ([`Body::stream`]). Boxed, as the
    /// trailers below: a `Body` is moved several times per request (handler, router, the
    /// prepared response), and these rare variants made every one 152 bytes instead of 40.
    Stream(Box<StreamBody>),
    /// An upstream's response, read as the client takes it (the reverse proxy).
    Upstream(Box<crate::proxy::body::UpstreamBody>),
    /// A body followed by a trailer section.
    Trailed(Box<Self>, Box<HeaderMap>),
}

/// What a task feeding a [`Body::Stream`] sends.
#[derive(Debug)]
#[allow(dead_code)] // For handlers whose body another task produces; a unit test feeds it (the proxy reads upstream bodies directly, `Body::Upstream`).
pub(crate) enum Piece {
    /// Body bytes.
    Data(Bytes),
    /// The trailer section; nothing follows it.
    Trailers(HeaderMap),
}

/// The receiving end of a streamed body. The feeding task waits while the channel is full (a
/// few chunks): it runs only as fast as the client takes the response.
pub(crate) struct StreamBody {
    rx: mpsc::Receiver<io::Result<Piece>>,
    len: Option<u64>,
    trailers: Option<HeaderMap>,
    /// What is left of a chunk larger than the reader asked for.
    rest: Bytes,
}

/// Chunks a streamed body's channel holds before its feeder waits.
const STREAM_DEPTH: usize = 4;

static ZEROS: [u8; CHUNK] = [0; CHUNK];

impl Body {
    /// A body fed by another task through the returned sender: [`Piece::Data`] chunks, then
    /// optionally [`Piece::Trailers`]; an `Err` fails the response (the client's stream is
    /// reset, or the HTTP/1.1 connection closed, so a truncated body never looks complete).
    /// Dropping the sender ends the body. `len`, when known, becomes the `content-length`.
    #[allow(dead_code)] // See `Piece`: no handler feeds a body from another task yet.
    pub(crate) fn stream(len: Option<u64>) -> (mpsc::Sender<io::Result<Piece>>, Self) {
        let (tx, rx) = mpsc::channel(STREAM_DEPTH);
        (tx, Self::Stream(Box::new(StreamBody { rx, len, trailers: None, rest: Bytes::new() })))
    }

    /// The trailer section, once [`Body::next_chunk`] has returned `None`.
    pub(crate) fn take_trailers(&mut self) -> Option<HeaderMap> {
        match self {
            Self::Stream(s) => s.trailers.take(),
            Self::Upstream(u) => u.take_trailers(),
            Self::Trailed(_, t) => Some(std::mem::take(&mut **t)).filter(|t| !t.is_empty()),
            _ => None,
        }
    }

    /// Exact length when known.
    pub(crate) fn len(&self) -> Option<u64> {
        match self {
            Self::Empty => Some(0),
            Self::Full(b) => Some(b.len() as u64),
            Self::Zeros(n) => Some(*n),
            Self::File { len, .. } => Some(*len),
            Self::Concat(parts) => parts.iter().map(Self::len).sum(),
            Self::Stream(s) => s.len,
            Self::Upstream(u) => u.len(),
            Self::Trailed(b, _) => b.len(),
        }
    }

    /// Whether the body ends with trailers (known before it is sent: then even an empty body
    /// is sent, so that the trailers can follow).
    pub(crate) fn has_trailers(&self) -> bool {
        match self {
            Self::Trailed(..) | Self::Stream(_) => true,
            Self::Upstream(u) => u.may_trail(),
            _ => false,
        }
    }

    /// Whether the body is known to be empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == Some(0) && !self.has_trailers()
    }

    /// For bodies in memory, the next chunk without waiting (`Some(None)` at the end); `None`
    /// when the body must be read with [`Body::next_chunk`].
    pub(crate) fn next_ready(&mut self, max: usize) -> Option<Option<io::Result<Bytes>>> {
        let max = max.clamp(1, CHUNK);
        match self {
            Self::Empty => Some(None),
            Self::Full(b) if b.is_empty() => Some(None),
            Self::Full(b) => {
                let n = b.len().min(max);
                Some(Some(Ok(b.split_to(n))))
            }
            Self::Zeros(0) => Some(None),
            Self::Zeros(left) => {
                let n = (*left).min(max as u64) as usize;
                *left -= n as u64;
                Some(Some(Ok(Bytes::from_static(&ZEROS[..n]))))
            }
            Self::Trailed(b, _) => b.next_ready(max),
            Self::File { .. } | Self::Concat(_) | Self::Stream(_) | Self::Upstream(_) => None,
        }
    }

    /// The next chunk of at most `max` bytes, `None` at the end.
    pub(crate) async fn next_chunk(&mut self, max: usize) -> Option<io::Result<Bytes>> {
        let max = max.clamp(1, CHUNK);
        loop {
            match self {
                Self::Empty => return None,
                Self::Full(b) => {
                    if b.is_empty() {
                        return None;
                    }
                    let n = b.len().min(max);
                    return Some(Ok(b.split_to(n)));
                }
                Self::Zeros(left) => {
                    if *left == 0 {
                        return None;
                    }
                    let n = (*left).min(max as u64) as usize;
                    *left -= n as u64;
                    return Some(Ok(Bytes::from_static(&ZEROS[..n])));
                }
                Self::File { file, offset, len } => {
                    if *len == 0 {
                        return None;
                    }
                    let n = (*len).min(max as u64) as usize;
                    // Page-cached data is read right here (RWF_NOWAIT never blocks on the disk);
                    // only data that would need the disk goes to the blocking pool.
                    let read = match read_cached(file, *offset, n) {
                        Some(r) => r,
                        None => {
                            let f = match file.try_clone() {
                                Ok(f) => f,
                                Err(e) => return Some(Err(e)),
                            };
                            let off = *offset;
                            match tokio::task::spawn_blocking(move || read_exact_at(&f, off, n)).await {
                                Ok(r) => r,
                                Err(e) => Err(io::Error::other(e)),
                            }
                        }
                    };
                    return match read {
                        Ok(b) => {
                            *offset += b.len() as u64;
                            *len -= b.len() as u64;
                            Some(Ok(b))
                        }
                        Err(e) => Some(Err(e)),
                    };
                }
                Self::Concat(parts) => {
                    let front = parts.front_mut()?;
                    match Box::pin(front.next_chunk(max)).await {
                        Some(r) => return Some(r),
                        None => {
                            parts.pop_front();
                        }
                    }
                }
                Self::Trailed(b, _) => return Box::pin(b.next_chunk(max)).await,
                Self::Upstream(u) => return u.next(max).await,
                Self::Stream(s) => {
                    if !s.rest.is_empty() {
                        let n = s.rest.len().min(max);
                        return Some(Ok(s.rest.split_to(n)));
                    }
                    if s.trailers.is_some() {
                        return None;
                    }
                    return match s.rx.recv().await? {
                        Ok(Piece::Data(b)) if b.is_empty() => continue,
                        Ok(Piece::Data(mut b)) => {
                            if b.len() > max {
                                s.rest = b.split_off(max);
                            }
                            Some(Ok(b))
                        }
                        Ok(Piece::Trailers(t)) => {
                            s.rx.close();
                            s.trailers = Some(t);
                            None
                        }
                        Err(e) => Some(Err(e)),
                    };
                }
            }
        }
    }
}

/// Read `n` bytes at `off`, blocking as long as it takes.
fn read_exact_at(f: &std::fs::File, off: u64, n: usize) -> io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Bytes::from(buf))
}

/// Read up to `n` bytes at `off` only if they are in the page cache; `None` when that would
/// block.
fn read_cached(f: &std::fs::File, off: u64, n: usize) -> Option<io::Result<Bytes>> {
    sluice_sys::file::read_cached(f, off, n).map(|r| r.map(Bytes::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_streamed_body_is_read_in_pieces_as_fed_then_its_trailers() {
        let (tx, mut body) = Body::stream(None);
        assert!(body.has_trailers() && !body.is_empty() && body.len().is_none());
        let feeder = tokio::spawn(async move {
            // A piece larger than a reader's chunk, an empty one, then trailers.
            tx.send(Ok(Piece::Data(Bytes::from(vec![7u8; 100_000])))).await.unwrap();
            tx.send(Ok(Piece::Data(Bytes::new()))).await.unwrap();
            tx.send(Ok(Piece::Data(Bytes::from_static(b"end")))).await.unwrap();
            let mut t = HeaderMap::new();
            t.insert("grpc-status", http::HeaderValue::from_static("0"));
            tx.send(Ok(Piece::Trailers(t))).await.unwrap();
        });
        let mut sizes = Vec::new();
        while let Some(c) = body.next_chunk(CHUNK).await {
            sizes.push(c.unwrap().len());
        }
        assert_eq!(sizes, vec![CHUNK, 100_000 - CHUNK, 3]);
        assert_eq!(body.take_trailers().unwrap()["grpc-status"], "0");
        feeder.await.unwrap();
        // A feeder's error fails the body; a dropped feeder ends it without trailers.
        let (tx, mut body) = Body::stream(Some(10));
        tx.send(Err(io::Error::other("upstream reset"))).await.unwrap();
        assert!(body.next_chunk(CHUNK).await.unwrap().is_err());
        let (tx, mut body) = Body::stream(None);
        drop(tx);
        assert!(body.next_chunk(CHUNK).await.is_none() && body.take_trailers().is_none());
    }

    #[test]
    fn authorities() {
        for good in [
            "localhost",
            "localhost:8443",
            "a.example",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "xn--bcher-kva.example",
            "a:",
            "b%20c",
        ] {
            assert!(valid_authority(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "localhost:99999",
            "localhost:65536",
            "a:b",
            ":80",
            "[::1",
            "[::1]x",
            "[]",
            "a/b",
            "a@b",
            "[::1]:80:1",
            "a\tb",
            "localhost:123456",
        ] {
            assert!(!valid_authority(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn file_bodies_read_from_cache_or_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // Just written, so in the page cache: either served from it or not supported here.
        if let Some(r) = read_cached(&f, 10, 100) {
            assert_eq!(&r.unwrap()[..], &content[10..110]);
        }
        assert_eq!(&read_exact_at(&f, 5, 7).unwrap()[..], &content[5..12]);
        let mut body = Body::File { file: f, offset: 1000, len: 150_000 };
        let mut got = Vec::new();
        while let Some(c) = body.next_chunk(CHUNK).await {
            got.extend_from_slice(&c.unwrap());
        }
        assert_eq!(got, &content[1000..151_000]);
    }
}
