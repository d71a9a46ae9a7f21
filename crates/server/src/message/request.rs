//! The request a handler sees, the same for every protocol: its head, a body that yields data
//! and then trailers ([`RequestBody`]), and what the driver lends it for its life
//! ([`Exchange`]: the access-log counters and, over HTTP/2 and HTTP/3, the path its interim
//! (1xx) responses take, [`Interim`]).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use tokio::sync::mpsc;

use crate::config::ProgressRule;
use crate::message::accesslog::Counters;

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

/// A request head plus a body reader.
pub(crate) struct Request {
    /// Protocol the request arrived on.
    pub(crate) proto: Proto,
    /// The client's address.
    pub(crate) peer: std::net::SocketAddr,
    /// Request method.
    pub(crate) method: Method,
    /// An extended CONNECT for a WebSocket (RFC 8441 over HTTP/2: `CONNECT` with `:protocol`
    /// `websocket`): the stream itself becomes the tunnel.
    pub(crate) websocket: bool,
    /// A CONNECT's tunnel parts (the forward proxy's): set on CONNECT requests only.
    pub(crate) connect: Option<Box<ConnectParts>>,
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
    /// What the driver lends the request: its access-log counters (handlers mark the hints
    /// they sent) and its interim path.
    pub(crate) exchange: ExchangeRef,
}

/// What a CONNECT request brings beyond its head (RFC 9110 §9.3.6; RFC 9298 for UDP).
#[derive(Default)]
pub(crate) struct ConnectParts {
    /// An extended CONNECT with `:protocol` `connect-udp` (RFC 9298 §3): a UDP tunnel.
    pub(crate) udp: bool,
    /// The connection's count of open tunnels (the budget per connection).
    pub(crate) conn_tunnels: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// HTTP/3 with HTTP Datagrams agreed (RFC 9297 §2.1): the stream's QUIC datagrams.
    pub(crate) datagrams: Option<Datagrams>,
}

/// Sends one UDP payload as an HTTP Datagram of a request stream ([`Datagrams::send`]).
pub(crate) type SendDatagram = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// The QUIC DATAGRAM side of one request stream (RFC 9297 §2.1), lent by the HTTP/3 driver.
pub(crate) struct Datagrams {
    /// HTTP Datagram payloads that arrived for the stream (its quarter stream id taken off),
    /// at most the tunnel's queue: more are dropped, as datagrams may be.
    pub(crate) rx: mpsc::Receiver<Bytes>,
    /// Sends one UDP payload (Context ID 0) as an HTTP Datagram of the stream; false when it
    /// cannot go (larger than the path takes, or the connection is gone).
    pub(crate) send: SendDatagram,
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

/// What the protocol driver lends a request for its life, through one shared pointer (each
/// pointer a request holds is a clone and a drop, two atomic operations): the counters of its
/// access-log line and, over HTTP/2 and HTTP/3, the stream that carries its interim responses
/// (there the stream layer's per-stream state implements it: one allocation fewer per
/// request). Over HTTP/1.1 the counters alone ([`Counters`] implements it).
pub(crate) trait Exchange: Send + Sync {
    /// The request's access-log counters.
    fn counters(&self) -> &Counters;

    /// Whether interim (1xx) responses reach the client: not over HTTP/1.1 (hyper's server
    /// sends no 1xx but its own 100, and browsers ignore 103 there).
    fn has_interims(&self) -> bool {
        false
    }

    /// Send an interim head for the request; false when it cannot go out.
    fn send_interim(&self, _status: u16, _fields: Vec<sluice_http::Field>) -> bool {
        false
    }
}

impl Exchange for Counters {
    fn counters(&self) -> &Counters {
        self
    }
}

/// A shared handle on a request's [`Exchange`]; it reads as the counters.
#[derive(Clone)]
pub(crate) struct ExchangeRef(Arc<dyn Exchange>);

impl ExchangeRef {
    pub(crate) fn new(exchange: Arc<dyn Exchange>) -> Self {
        Self(exchange)
    }
}

impl Default for ExchangeRef {
    /// Counters of their own, no interim path.
    fn default() -> Self {
        Self(Arc::new(Counters::default()))
    }
}

impl std::ops::Deref for ExchangeRef {
    type Target = Counters;

    fn deref(&self) -> &Counters {
        self.0.counters()
    }
}

impl std::fmt::Debug for ExchangeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// Where a handler sends interim (1xx) responses (RFC 9110 §15.2), any number before the final
/// response: through the request's stream ([`Exchange`]). Over HTTP/1.1 there is none.
#[derive(Clone, Copy)]
pub(crate) struct Interim<'a>(&'a dyn Exchange);

impl<'a> Interim<'a> {
    /// The interim path of a request (`&req.exchange`).
    pub(crate) fn of(exchange: &'a ExchangeRef) -> Self {
        Self(&*exchange.0)
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
        self.0.has_interims() && self.0.send_interim(code, sluice_http::response_fields(headers))
    }
}

/// A request body: chunks in order, then `None`, then [`RequestBody::trailers`]. Dropping it
/// discards the rest.
pub(crate) struct RequestBody {
    inner: BodyRx,
    /// Bytes taken so far, shared with the access log.
    seen: Option<ExchangeRef>,
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
    rule: ProgressRule,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub(crate) fn hyper(body: hyper::body::Incoming, rule: ProgressRule) -> Self {
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
    pub(crate) fn counting(mut self, seen: ExchangeRef, limit: u64) -> Self {
        self.seen = Some(seen);
        self.limit = limit;
        self
    }

    /// The next chunk, `None` at the end.
    pub(crate) async fn chunk(&mut self) -> Option<Result<Bytes, BodyError>> {
        let item = self.chunk_inner().await;
        if let (Some(Ok(b)), Some(seen)) = (&item, &self.seen) {
            let total = seen.bytes_in.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed) + b.len() as u64;
            crate::message::metrics::bytes_in(Proto::Http1, b.len() as u64);
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
