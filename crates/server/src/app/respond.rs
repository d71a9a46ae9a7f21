//! The one path every request takes, whatever its protocol: a request head becomes a
//! [`Request`], [`prepare`] answers it (400 for a malformed request, 421 for an authority the
//! connection does not serve, 413 for a declared body over the limit, else the router's
//! handler; then `Alt-Svc` and the access-log line), and the driver sends the prepared response.
//! HTTP/1.1 hands it to hyper; HTTP/2 and HTTP/3 stream it through a [`Sink`] with
//! [`send`], chunk by chunk, each chunk waiting for permits that the connection task returns
//! only as its engine frames earlier bytes (the bounded queue between handler and socket).

use crate::config::AccessLogFormat;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sluice_http::{Field, HeadFields, PackedFields, RequestHead};
use tokio::sync::Semaphore;

use crate::message::accesslog::{AccessLog, Record};
use crate::message::metrics::Tally;
use crate::message::ExchangeRef;
use crate::message::{Body, Head, Proto, Refusal, Request, RequestBody, Response, CHUNK};
use crate::state::State;
use sluice_http::response_fields;

/// What the handlers of one connection need to know about it.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) tls: bool,
    /// An `Alt-Svc` for responses: HTTP/3 on this listener's port (RFC 7838, RFC 9114 §3.1.1).
    pub(crate) alt_svc: Option<http::HeaderValue>,
    /// The same as an engine's field (for answers made without a response map).
    alt_svc_field: Option<Field>,
    /// Over TLS: what the connection serves (421 for other authorities, the ORIGIN frame).
    pub(crate) served: Option<sluice_tls::certs::Served>,
    /// The first authority a request on this connection named that was valid and served
    /// here: later requests naming it again (nearly all of them) skip both checks.
    pub(crate) checked: std::sync::OnceLock<Arc<str>>,
    /// What the TLS handshake agreed, for the JSON access log (`None` unless it is on).
    pub(crate) tls_info: Option<Arc<crate::message::accesslog::TlsInfo>>,
    /// Tunnels open on this connection (the forward proxy's budget per connection), made by
    /// the first CONNECT.
    tunnels: std::sync::OnceLock<Arc<std::sync::atomic::AtomicU32>>,
}

/// A listener's `Alt-Svc` value in both forms a response takes it: as a header value (for a
/// response map) and as an engine's field (for answers made without one). Made once per
/// listener: each connection holds clones, which share the bytes (made per connection, the
/// field's buffer was 0.5 kB of every idle connection's memory).
#[derive(Debug, Clone)]
pub(crate) struct AltSvc {
    value: http::HeaderValue,
    field: Field,
}

impl AltSvc {
    pub(crate) fn new(value: http::HeaderValue) -> Self {
        // Made as `send` makes a response's own fields, so both paths send the same bytes.
        let mut map = HeaderMap::with_capacity(1);
        map.insert(http::header::ALT_SVC, value.clone());
        let field = response_fields(&map).pop().expect("alt-svc is not a connection-specific field");
        Self { value, field }
    }
}

impl ConnInfo {
    pub(crate) fn new(
        peer: SocketAddr,
        tls: bool,
        alt_svc: Option<&AltSvc>,
        served: Option<sluice_tls::certs::Served>,
    ) -> Self {
        Self {
            peer,
            tls,
            alt_svc: alt_svc.map(|a| a.value.clone()),
            alt_svc_field: alt_svc.map(|a| a.field.clone()),
            served,
            checked: std::sync::OnceLock::new(),
            tls_info: None,
            tunnels: std::sync::OnceLock::new(),
        }
    }

    /// The parts of a CONNECT request on this connection (`udp`: CONNECT-UDP).
    pub(crate) fn connect_parts(&self, udp: bool) -> Box<crate::message::ConnectParts> {
        let count = self.tunnels.get_or_init(Default::default).clone();
        Box::new(crate::message::ConnectParts { udp, conn_tunnels: Some(count), datagrams: None })
    }

    /// Whether `authority` is the one already found valid and served on this connection.
    fn checked(&self, authority: &str) -> bool {
        self.checked.get().is_some_and(|a| **a == *authority)
    }

    /// The 421 (RFC 9110 §15.5.20) for a request whose authority this connection does not
    /// serve, if that is the case.
    pub(crate) fn misdirected(&self, authority: &str) -> Option<Response> {
        let served = self.served.as_ref()?;
        if self.checked(authority) || served.serves(authority) {
            return None;
        }
        tracing::debug!(peer = %self.peer, authority, "421: authority not served on this connection");
        Some(Response::text(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected request: this connection does not serve that authority; open a new one\n",
        ))
    }
}

/// Where a response goes on HTTP/2 and HTTP/3: commands to the connection task of one stream.
/// Each call returns false once the stream or the connection task is gone.
pub(crate) trait Sink: Send + Sync + 'static {
    /// The handler set the response's priority (a `priority` response header, RFC 9218 §5).
    fn priority(&self, value: Bytes);
    /// A response head: an interim one (1xx, any number, never `end`) or the final one; `end`
    /// when nothing follows.
    fn head(&self, status: u16, fields: HeadFields, end: bool) -> bool;
    /// Body bytes; `end` with the last.
    fn data(&self, data: Bytes, end: bool) -> bool;
    /// A final head and the whole body, not empty: [`head`](Self::head) then
    /// [`data`](Self::data) with `end`, in one.
    fn whole(&self, status: u16, fields: HeadFields, data: Bytes) -> bool;
    /// The trailer section; it ends the response.
    fn trailers(&self, fields: Vec<Field>) -> bool;
    /// The body failed half-way: reset the stream with an internal error, so the truncated
    /// response never looks complete.
    fn fail(&self);
}

/// A request from an engine's head: the target split into path and query, the authority from
/// `:authority` or else `Host`, lower-cased. A field the `http` crate cannot hold (the engines
/// already refuse names that are not tokens and values with NUL, CR or LF; this catches other
/// control characters) makes the request malformed, answered 400, never silently dropped.
pub(crate) fn to_request(
    head: &mut RequestHead,
    body: RequestBody,
    conn: &ConnInfo,
    proto: Proto,
    counters: ExchangeRef,
) -> Request {
    let tls = conn.tls;
    // Invariant: the engines accept only token methods (sluice_http::request_head).
    let method = http::Method::from_bytes(&head.method).unwrap_or(http::Method::GET);
    let target = head.path.as_deref().map(text).unwrap_or_default();
    // By hand, as in `answer_inline`.
    let (path, query) = match target.bytes().position(|b| b == b'?') {
        Some(q) => (target[..q].to_owned(), Some(target[q + 1..].to_owned())),
        None => (target, None),
    };
    let mut headers = HeaderMap::with_capacity(head.fields.len());
    let mut malformed = None;
    // The authority this connection already checked is shared, not copied again.
    let pseudo = head.authority.as_deref().map(|a| match conn.checked.get() {
        Some(c) if c.as_bytes() == a => c.clone(),
        _ => {
            let mut a = text(a);
            a.make_ascii_lowercase();
            Arc::from(a)
        }
    });
    let mut host: Option<String> = None;
    let mut hosts = 0;
    // Drained, so that the engine can reuse the list.
    for f in head.fields.drain(..) {
        match (http::HeaderName::from_bytes(&f.name), http::HeaderValue::from_maybe_shared(f.value)) {
            (Ok(n), Ok(v)) => {
                if n == http::header::HOST {
                    hosts += 1;
                    host = v.to_str().ok().map(str::to_ascii_lowercase);
                }
                headers.append(n, v);
            }
            _ => malformed = Some(Refusal::bad("a header field that does not parse")),
        }
    }
    // RFC 9113 §8.3.1 (and RFC 9114 §4.3.1): `:authority` or `Host` names the target; a `Host`
    // naming another entity than `:authority` makes the request malformed, and so does an
    // authority that is not one, or several `Host` fields.
    if hosts > 1 {
        malformed = Some(Refusal::bad("more than one host field"));
    } else if let (Some(p), Some(h)) = (&pseudo, &host) {
        if **p != **h {
            malformed = Some(Refusal::bad("host differs from :authority"));
        }
    } else if hosts == 1 && host.is_none() {
        malformed = Some(Refusal::bad("a host field that is not text"));
    }
    let authority = pseudo.or_else(|| host.map(Arc::from));
    let (websocket, udp) = match head.protocol.as_deref() {
        None => (false, false),
        Some(p) if p.eq_ignore_ascii_case(b"websocket") => (true, false),
        Some(p) if p.eq_ignore_ascii_case(b"connect-udp") => (false, true),
        // RFC 8441 §4: a protocol the server does not support.
        Some(_) => {
            malformed = Some(Refusal {
                status: http::StatusCode::NOT_IMPLEMENTED,
                why: "extended CONNECT for a protocol other than websocket and connect-udp",
            });
            (false, false)
        }
    };
    // A CONNECT that is not a WebSocket's: the forward proxy's.
    let connect = (method == http::Method::CONNECT && !websocket).then(|| conn.connect_parts(udp));
    match &authority {
        Some(a) if !conn.checked(a) && !sluice_http::valid_authority(a) => {
            malformed = Some(Refusal::bad("an invalid authority"))
        }
        // `http` and `https` have a mandatory authority (RFC 9113 §8.3.1).
        None if head.scheme.as_deref().is_some_and(|s| s == b"http" || s == b"https") => {
            malformed = Some(Refusal::bad("no :authority and no host"));
        }
        _ => {}
    }
    Request {
        proto,
        peer: conn.peer,
        method,
        authority: authority.unwrap_or_default(),
        path,
        query,
        headers,
        tls,
        body,
        malformed,
        upgrade: None,
        exchange: counters,
        websocket,
        connect,
    }
}

/// Bytes as text, invalid UTF-8 replaced; valid text (nearly always) is checked by the fast
/// validator and copied once.
fn text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// A response ready to go out, with its access-log line.
pub(crate) struct Prepared {
    pub(crate) status: StatusCode,
    /// Fields sent before `headers` (see [`Response::head`]); always `None` for HTTP/1.1.
    pub(crate) head: Option<crate::message::Head>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Body,
    /// No body goes out (HEAD, 204, 304, or an empty body without trailers).
    pub(crate) no_body: bool,
    /// Its access-log line and metrics tally, written and counted when this drops.
    pub(crate) log: Record,
}

/// The access-log line of a request being answered, and what its answer needs to know.
pub(crate) struct Admitted {
    log: Record,
    proto: Proto,
    head_only: bool,
}

/// The part of answering `req` that comes before its handler: the access-log line, and the
/// answers no handler gives (400 for a malformed request, 421, 413 for a declared body over
/// the limit; with `Alt-Svc`). `None` hands the request on to the router.
pub(crate) fn admit(req: &Request, state: &State, conn: &ConnInfo) -> (Admitted, Option<Response>) {
    // Without an access log, the line is not made: no copies, no clock, no counters' handle.
    let json = state.cfg.access_log == AccessLogFormat::Json;
    if json {
        let trusted = state.cfg.proxy.trusts(conn.peer.ip());
        req.exchange.request_id(&req.headers, trusted);
        req.exchange.detail();
    }
    let log = Record {
        line: state.cfg.access_log.on().then(|| {
            let mut l = access_log(req.proto, conn.peer, &req.method, &req.authority, &req.path, req.exchange.clone());
            l.json = json;
            l.tls = conn.tls_info.clone();
            Box::new(l)
        }),
        tally: if state.cfg.admin.metrics { Tally::start(req.proto) } else { Tally::off() },
    };
    let head_only = req.method == http::Method::HEAD;
    // A body known to be empty declares no length over the limit (the engines refuse a
    // request that ends with its head but declares content, RFC 9113 §8.1.1): no lookup.
    let declared = if req.body.is_end_stream() {
        None
    } else {
        req.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
    };
    // A CONNECT's authority names where its tunnel goes, not something served here.
    let tunnel_target = req.connect.as_ref().is_some_and(|c| !c.udp);
    let refused = if let Some(r) = req.malformed {
        tracing::debug!(peer = %conn.peer, why = r.why, status = r.status.as_u16(), "request refused");
        Some(Response::text(r.status, format!("{}: {}\n", r.status.canonical_reason().unwrap_or("refused"), r.why)))
    } else if let Some(r) = conn.misdirected(&req.authority).filter(|_| !tunnel_target) {
        Some(r)
    } else if declared.is_some_and(|n| n > state.cfg.limits.max_request_body) {
        crate::message::metrics::limit(crate::message::metrics::Limit::RequestBody);
        Some(Response::text(StatusCode::PAYLOAD_TOO_LARGE, "request body larger than limits.max_request_body\n"))
    } else if req.path == "*" {
        Some(server_wide(&req.method))
    } else {
        None
    };
    if refused.is_none() && !req.authority.is_empty() && conn.checked.get().is_none() && !tunnel_target {
        // Valid (a malformed request was refused above) and served here.
        let _ = conn.checked.set(req.authority.clone());
    }
    // Routed answers get `Alt-Svc` from the router, before the route's header rules.
    let refused = refused.map(|mut r| {
        crate::app::router::add_alt_svc(&mut r, conn.alt_svc.as_ref());
        r
    });
    (Admitted { log, proto: req.proto, head_only }, refused)
}

/// The methods some route of the server answers: what `OPTIONS *` announces.
pub(crate) const SERVER_METHODS: &str = "GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE";

/// The answer to a request for `*`, the server as a whole: `OPTIONS *` (RFC 9110 §9.3.7, a
/// "ping" that names no resource) is 204 with the methods the server answers somewhere;
/// another method cannot have `*` as its target (RFC 9112 §3.2.4), 400.
fn server_wide(method: &http::Method) -> Response {
    if *method != http::Method::OPTIONS {
        return Response::text(StatusCode::BAD_REQUEST, "Bad Request: only OPTIONS may ask for *\n");
    }
    let mut headers = HeaderMap::with_capacity(1);
    headers.insert(http::header::ALLOW, http::HeaderValue::from_static(SERVER_METHODS));
    Response::new(StatusCode::NO_CONTENT, headers, Body::Empty)
}

/// The access-log line of a request as it arrives (written when the exchange ends).
fn access_log(
    proto: Proto,
    peer: SocketAddr,
    method: &http::Method,
    authority: &str,
    path: &str,
    counters: ExchangeRef,
) -> AccessLog {
    AccessLog {
        proto,
        peer,
        method: method.clone(),
        authority: authority.to_owned(),
        path: path.to_owned(),
        status: 0,
        start: std::time::Instant::now(),
        counters,
        bytes_out: 0,
        outcome: "reset",
        json: false,
        tls: None,
    }
}

/// A 200 response the stream layer sends itself, without a handler ([`answer_inline`]).
pub(crate) struct Inline {
    /// The file's prebuilt fields ([`Inline::fields`] puts `Alt-Svc` after them, as `send`
    /// does); `None` once taken. Kept as the pointer until the head goes to the engine: an
    /// answer moves a few times on its way, and a whole head's fields are 96 bytes.
    pub(crate) wire: Option<crate::message::SharedHead>,
    /// The whole body; empty: none (the head ends the stream).
    pub(crate) body: Bytes,
    /// Its access-log line and metrics tally, written and counted when this drops: set the
    /// bytes and the outcome first.
    pub(crate) log: Record,
}

impl Inline {
    /// The head's fields, taken: the prebuilt ones, then the connection's `Alt-Svc`.
    pub(crate) fn fields(&mut self, conn: &ConnInfo) -> HeadFields {
        HeadFields {
            shared: self.wire.take(),
            packed: PackedFields::default(),
            own: conn.alt_svc_field.iter().cloned().collect(),
        }
    }

    /// How the exchange ended, and the body bytes handed on, for the log line.
    pub(crate) fn ended(&mut self, outcome: &'static str, bytes_out: u64) {
        self.log.ended(outcome);
        self.log.sent(bytes_out);
    }
}

/// The answer [`prepare`] gives to a request without a body, when it is known without running
/// it: a GET or HEAD, for a file in the small-file cache, that every step before the handler
/// passes through unchanged. Made from the engine's head, with no [`Request`] (its header map
/// and strings), no handler future and no task, and sent by the stream layer at once: those
/// were about a quarter of a small static response's instructions over TLS h2. `None` hands
/// the request to the usual path, which answers everything else.
///
/// What is checked, step by step, against the usual path (after a first look at whether the
/// configuration has a route whose answers can be made here at all, `State::inline_routes`):
/// - [`to_request`] and [`admit`]: the `:authority` is the one this connection already found
///   valid and served (so no 400 or 421), there is no `host` field (checked against it there)
///   and no `content-length` (the 413 check), `:path` is UTF-8 (no lossy conversion), and every
///   field parses as an `http` header field (no 400).
/// - The router: not a speed-test path; the route serves files, with no header rules and no
///   configured early hints.
/// - The file handler: none of the fields its answer depends on (`Files::selects`); the file
///   is cached (a hit is what `serve` answers from, too).
///
/// The body is a slice of the cache's copy: a response queued here holds no bytes of its own,
/// so it takes nothing from the process-wide send budget (which bounds bytes handlers read or
/// make for stalled streams).
pub(crate) fn answer_inline(head: &RequestHead, state: &State, conn: &ConnInfo, proto: Proto) -> Option<Inline> {
    use crate::handlers::static_files::Files;
    use crate::handlers::Handler;
    // The JSON log's fields (request id, compression) come from the usual path.
    if !state.inline_routes || state.cfg.access_log == AccessLogFormat::Json || (!conn.tls && state.cfg.acme.is_some())
    {
        return None;
    }
    let head_only = match &head.method[..] {
        b"GET" => false,
        b"HEAD" => true,
        _ => return None,
    };
    // The authority this connection checked, as text (no conversion of the request's bytes).
    let sent = head.authority.as_deref()?;
    let authority = conn.checked.get().map(|a| &**a).filter(|a| a.as_bytes() == sent)?;
    if head.protocol.is_some() {
        return None;
    }
    let mut accept: Option<&[u8]> = None;
    for f in &head.fields {
        let n = &f.name[..];
        if n == b"host" || n == b"content-length" || Files::selects(n) {
            return None;
        }
        if n == b"accept-encoding" {
            // One field: several are for the usual path to join.
            if accept.is_some() {
                return None;
            }
            accept = Some(&f.value[..]);
        }
        // The engines take only lower-case token names, which `http` takes too, up to its
        // length bound.
        if n.len() > MAX_NAME {
            return None;
        }
    }
    // `http` refuses values with control characters other than HTAB (its
    // `HeaderValue::from_bytes`); the engines refuse only NUL, CR and LF.
    if head.controls {
        return None;
    }
    let target = std::str::from_utf8(head.path.as_deref()?).ok()?;
    // By hand: `split_once('?')` sets up a general searcher (about 100 instructions).
    let path = target.bytes().position(|b| b == b'?').map_or(target, |q| &target[..q]);
    if state.speedtest.claims(path) {
        return None;
    }
    let (route, handler, route_id) = crate::app::router::route(state, authority, path)?;
    let Handler::Files(files) = handler else { return None };
    if !route.early_hints.is_empty() || !route.headers.is_empty() {
        return None;
    }
    let (wire, body) = files.cached_whole(path, head_only, accept)?;
    let mut log = Record {
        line: state.cfg.access_log.on().then(|| {
            let method = if head_only { http::Method::HEAD } else { http::Method::GET };
            Box::new(access_log(proto, conn.peer, &method, authority, path, NO_COUNTS.clone()))
        }),
        tally: if state.cfg.admin.metrics {
            let mut t = Tally::start(proto);
            t.route = route_id;
            t
        } else {
            Tally::off()
        },
    };
    log.answered(200);
    // As `send` makes them: the prebuilt fields, then the map's (`Alt-Svc` from the router),
    // which `Inline::fields` adds.
    Some(Inline { wire: Some(wire), body, log })
}

/// The access-log counters of requests answered inline: they receive no body and send no
/// hints, so one all-zero set serves them all.
static NO_COUNTS: std::sync::LazyLock<ExchangeRef> = std::sync::LazyLock::new(ExchangeRef::default);

/// The longest field name the `http` crate takes.
const MAX_NAME: usize = (1 << 16) - 1;

/// The part after the handler: whether a body goes out, and the status for the log.
pub(crate) fn finish(a: Admitted, resp: Response) -> Prepared {
    let Admitted { mut log, proto, head_only } = a;
    let mut resp = resp;
    if proto == Proto::Http1 {
        // HTTP/1.1 writes its head from the map (handlers set `head` only for the others).
        resp.materialize();
    }
    let Response { status, head, headers, body } = resp;
    let no_body =
        head_only || body.is_empty() || status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT;
    log.answered(status.as_u16());
    if no_body {
        log.ended("ok");
    }
    Prepared { status, head, headers, body, no_body, log }
}

/// Answer `req`, the same way on every protocol: [`admit`], the router, [`finish`]. The request
/// is borrowed: passed on by value, each `async fn` layer would keep a copy of it in its future
/// (an `async fn` keeps each argument as passed and as moved into its body).
pub(crate) async fn prepare(req: &mut Request, state: &State, conn: &ConnInfo) -> Prepared {
    let (mut admitted, refused) = admit(req, state, conn);
    let resp = match refused {
        None => {
            let (resp, route) = crate::app::router::dispatch(state, req, conn.alt_svc.as_ref()).await;
            admitted.log.tally.route = route;
            resp
        }
        Some(resp) => resp,
    };
    finish(admitted, resp)
}

/// What an HTTP/2 or HTTP/3 handler runs with, in one shared object per stream: where its
/// response goes ([`Sink`]), the room it may take ([`SendRoom`]), and the server's and the
/// connection's state. One pointer for all of it: each clone of a pointer and each drop is an
/// atomic operation.
pub(crate) trait Handled: Sink + std::ops::Deref<Target = SendRoom> {
    fn state(&self) -> &State;
    fn conn(&self) -> &ConnInfo;
}

/// Answer `req` and stream the response into `h`, as its room allows.
///
/// A plain function returning an `async move` block, not an `async fn`, for the reason given at
/// [`prepare`]. The future is boxed for every HTTP/2 and HTTP/3 request, so its size is paid per
/// request; the request comes boxed too, which keeps the future under 1 KiB, where the
/// allocator's per-thread cache serves it (a larger block costs several times as much to
/// allocate and free).
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(crate) fn run_handler<H: Handled>(
    mut req: Box<Request>,
    h: Arc<H>,
) -> impl std::future::Future<Output = ()> + Send {
    async move {
        let h: &H = &h;
        let prepared = prepare(&mut req, h.state(), h.conn()).await;
        send(h, prepared, h, h.conn().peer).await;
    }
}

const PRIORITY: http::HeaderName = http::HeaderName::from_static("priority");

/// Send a prepared response through `sink`: head, body chunks as permits allow, trailers.
/// (Not an `async fn`, for the reason given at [`run_handler`]: `p` is used in place.)
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(crate) fn send<'a, S: Sink + ?Sized>(
    sink: &'a S,
    mut p: Prepared,
    room: &'a SendRoom,
    peer: SocketAddr,
) -> impl std::future::Future<Output = ()> + Send + 'a {
    async move {
        // Most responses' maps are empty (their fields are in `head`): no lookup then.
        let in_map = if p.headers.is_empty() { None } else { p.headers.get(PRIORITY) };
        if let Some(v) = in_map {
            sink.priority(Bytes::copy_from_slice(v.as_bytes()));
        } else if let Some(v) = p.head.as_ref().and_then(|h| match h {
            Head::Shared(s) => s.iter().find(|f| f.name == "priority").map(|f| f.value.clone()),
            Head::Packed(l) => l.first_bytes(b"priority"),
        }) {
            sink.priority(v);
        }
        let own = response_fields(&p.headers);
        let fields = match p.head.take() {
            Some(Head::Shared(shared)) => HeadFields { shared: Some(shared), packed: PackedFields::default(), own },
            // Parsed fields (a proxied response's) go as they lie: the HPACK memo compares
            // their lines.
            Some(Head::Packed(packed)) => HeadFields { shared: None, packed, own },
            None => HeadFields { shared: None, packed: PackedFields::default(), own },
        };
        // A body here whole that fits one chunk goes with its head in one command: one trip
        // through the connection's queue (its lock and wake-up: about five atomic operations)
        // instead of two. The room comes first, as for any chunk.
        let whole = match &p.body {
            Body::Full(b) if !p.no_body && !b.is_empty() && b.len() <= CHUNK => b.len(),
            _ => 0,
        };
        if whole > 0 {
            if room.take(whole).await.is_err() {
                return;
            }
            let Body::Full(data) = std::mem::replace(&mut p.body, Body::Empty) else { return };
            // The line is written when `p` drops, as below.
            if sink.whole(p.status.as_u16(), fields, data) {
                p.log.sent(whole as u64);
                p.log.ended("ok");
            }
            return;
        }
        if !sink.head(p.status.as_u16(), fields, p.no_body) || p.no_body {
            return;
        }
        // The line is written when `p` drops (it is read there, not here).
        let log = &mut p.log;
        // With trailers to follow, no data chunk ends the stream.
        let trailed = p.body.has_trailers();
        let mut left = p.body.len();
        loop {
            // Room first, then the bytes: a file is read only once the stream's queue and the
            // process-wide budget can take what is read (a stalled stream holds no read-ahead).
            let want = left.map_or(CHUNK, |l| l.min(CHUNK as u64) as usize).max(1);
            if room.take(want).await.is_err() {
                return;
            }
            let Some(chunk) = p.body.next_chunk(want).await else {
                room.give_back(want);
                break;
            };
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    room.give_back(want);
                    tracing::warn!(%peer, %e, "response body failed");
                    sink.fail();
                    log.ended("body error");
                    return;
                }
            };
            let n = chunk.len();
            room.give_back(want - n.min(want));
            log.sent(n as u64);
            left = left.map(|l| l.saturating_sub(n as u64));
            let end = left == Some(0) && !trailed;
            if !sink.data(chunk, end) {
                return;
            }
            if end {
                log.ended("ok");
                return;
            }
        }
        let sent = match p.body.take_trailers() {
            Some(t) if !t.is_empty() => sink.trailers(response_fields(&t)),
            _ => sink.data(Bytes::new(), true),
        };
        if sent {
            log.ended("ok");
        }
    }
}

/// The room a stream's response may take in memory before the engine frames it: the stream's
/// own queue (a few chunks, so priorities stay meaningful) and the process-wide budget of
/// response bytes waiting to be framed (`limits.send_buffer`: stalled streams cannot add up to
/// more than that, however many there are). The connection task returns room as the engine
/// frames bytes ([`SendRoom::framed`]) and all of it when the stream ends ([`SendRoom::release`]).
pub(crate) struct SendRoom {
    stream: Semaphore,
    global: Arc<Semaphore>,
    /// Bytes of the global budget this stream holds.
    held: std::sync::atomic::AtomicUsize,
}

impl SendRoom {
    pub(crate) fn new(per_stream: usize, global: Arc<Semaphore>) -> Self {
        Self { stream: Semaphore::new(per_stream), global, held: std::sync::atomic::AtomicUsize::new(0) }
    }

    /// Wait for room for `n` bytes; `Err` once the stream is gone.
    pub(crate) async fn take(&self, n: usize) -> Result<(), ()> {
        use std::sync::atomic::Ordering;
        // Invariant: n is at most CHUNK, far below u32::MAX.
        let n32 = n as u32;
        acquire(&self.stream, n32).await?;
        // The global budget is never closed.
        acquire(&self.global, n32).await?;
        self.held.fetch_add(n, Ordering::AcqRel);
        if self.stream.is_closed() {
            // Released meanwhile: what `release` could not see goes back here.
            self.give_global(n);
            return Err(());
        }
        Ok(())
    }

    /// Room taken and not used.
    pub(crate) fn give_back(&self, n: usize) {
        if n > 0 {
            self.stream.add_permits(n);
            self.give_global(n);
        }
    }

    fn give_global(&self, n: usize) {
        use std::sync::atomic::Ordering;
        let mut cur = self.held.load(Ordering::Acquire);
        loop {
            let k = n.min(cur);
            match self.held.compare_exchange(cur, cur - k, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.global.add_permits(k);
                    return;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// The engine framed `n` bytes of this stream.
    pub(crate) fn framed(&self, n: usize) {
        self.give_back(n);
    }

    /// The stream is gone: wake a handler waiting for room, and hand back every byte of the
    /// global budget it held.
    pub(crate) fn release(&self) {
        self.stream.close();
        self.release_finished();
    }

    /// [`release`](Self::release) for a stream whose handler has finished: no one can be
    /// waiting for room, so the stream's own count is left as it is (closing it takes its
    /// wait list's lock).
    pub(crate) fn release_finished(&self) {
        use std::sync::atomic::Ordering;
        let held = self.held.swap(0, Ordering::AcqRel);
        if held > 0 {
            self.global.add_permits(held);
        }
    }

    /// Bytes of the global budget held: bytes the handler queued that the engine has not
    /// framed yet (and, once it has finished, framed ones not handed back).
    pub(crate) fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// `n` permits of `sem`, kept (forgotten); `Err` once it is closed. Taken at once when they
/// are there (nearly always: a response's chunk fits its stream's queue), without building the
/// waiting future. Permits sit in the count only when no one waits (released ones go to the
/// waiters first), so this takes none out of turn.
async fn acquire(sem: &Semaphore, n: u32) -> Result<(), ()> {
    match sem.try_acquire_many(n) {
        Ok(p) => p.forget(),
        Err(tokio::sync::TryAcquireError::Closed) => return Err(()),
        Err(tokio::sync::TryAcquireError::NoPermits) => sem.acquire_many(n).await.map_err(|_| ())?.forget(),
    }
    Ok(())
}
