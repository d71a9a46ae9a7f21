//! The reverse proxy: a route with `proxy = "name"` forwards its requests to that
//! `[[upstream]]`, streaming both ways (see [`body`]).
//!
//! Per request: pick a server ([`balance`]; servers that are ejected or fail their health
//! check are skipped), take an idle keep-alive connection or open one (HTTP/1.1), or share the
//! server's multiplexed one (HTTP/2, h2c), send the head with the fields of [`headers`], then
//! the body as the upstream takes it. Failures are explicit: 502 when the upstream refuses,
//! resets or answers garbage, 504 on a timeout, 503 when no server may be used, each with a
//! `Proxy-Status` field (RFC 9209) and one log line; a failure after the response head has
//! gone out resets the client's stream (HTTP/1.1: closes the connection).
//!
//! Retries happen only where they are safe: the request never reached the upstream (the
//! connection could not be opened, or a pooled connection was found closed before a byte was
//! written), or the method is idempotent (RFC 9110 §9.2.2) and had no body, and a reused
//! connection closed without answering. A stale pooled connection costs no retry budget;
//! everything else costs one of `retries`.

pub(crate) mod balance;
pub(crate) mod body;
mod connect;
mod h1;
mod health;
pub(crate) mod hints;
mod upstream;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, StatusCode};

use crate::config::{ProxySettings, UpstreamProto};
use crate::message::accesslog;
use crate::message::{Body, Head, Interim, Request, RequestBody, Response};
use body::{UpBody, UpstreamBody};
use sluice_http::forward as headers;
use upstream::{lock, Counted};
pub(crate) use upstream::{Active, Upstream};

/// A response body of at most this many bytes that arrived with its head is sent as one
/// piece, without streaming it from the upstream connection (which goes back to the pool at
/// once). The read buffer holds that much after a head anyway.
const WHOLE_MAX: u64 = 16 * 1024;

/// Interim (1xx) responses of one request passed on to the client; more are dropped.
const MAX_INTERIM: u32 = 16;

/// Why a proxied request failed, as RFC 9209 names it, and the status it gets.
#[derive(Debug)]
pub(crate) struct ProxyError {
    /// An RFC 9209 §2.3 error type.
    kind: &'static str,
    detail: String,
    timeout: bool,
}

impl ProxyError {
    fn new(kind: &'static str, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into(), timeout: false }
    }

    fn timeout(kind: &'static str, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into(), timeout: true }
    }

    fn status(&self) -> StatusCode {
        match self.kind {
            "destination_unavailable" | "connection_limit_reached" => StatusCode::SERVICE_UNAVAILABLE,
            _ if self.timeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// The client's answer: the status, a `Proxy-Status` field and a short text.
    fn response(&self, upstream: &str) -> Response {
        let status = self.status();
        let mut resp = Response::text(
            status,
            format!(
                "{} {}: upstream `{upstream}`: {}\n",
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                self.kind
            ),
        );
        // `details` is a quoted sf-string: printable ASCII, `"` and `\` escaped (RFC 8941 §3.3.3).
        let details: String = self
            .detail
            .chars()
            .filter(|c| (' '..='~').contains(c))
            .flat_map(|c| if c == '"' || c == '\\' { vec!['\\', c] } else { vec![c] })
            .take(200)
            .collect();
        if let Ok(v) = HeaderValue::from_str(&format!("sluice; error={}; details=\"{details}\"", self.kind)) {
            resp.headers.insert("proxy-status", v);
        }
        resp
    }
}

/// RFC 9110 §9.2.2.
fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE)
}

/// How an attempt failed.
struct Failed {
    err: ProxyError,
    /// The request came back unsent: its body, untouched.
    back: Option<UpBody>,
    /// It failed on a reused connection that closed before answering.
    stale: bool,
    /// Counts against the server (passive health).
    server_fault: bool,
    /// The upstream said it did not process the request (HTTP/2 REFUSED_STREAM, RFC 9113
    /// §8.7): any method may go again if its body was not streamed.
    unprocessed: bool,
    /// The client's request body failed (not the upstream): answered 413/408/400.
    client: Option<crate::message::BodyError>,
}

/// The handler of a route with `proxy = "name"`.
pub(crate) struct Proxy {
    upstream: Arc<Upstream>,
    settings: ProxySettings,
    /// The route's configured Early Hints, merged with what was learned.
    hints: Vec<HeaderValue>,
}

impl Proxy {
    pub(crate) fn new(upstream: Arc<Upstream>, settings: ProxySettings, hints: Vec<HeaderValue>) -> Self {
        Self { upstream, settings, hints }
    }

    /// Forward `req` to the upstream. Not an `async fn`: the future `serve` makes is large,
    /// and a layer of its own would move it once more per request; the caller boxes it.
    pub(crate) fn serve<'a>(&'a self, req: &'a mut Request) -> impl std::future::Future<Output = Response> + Send + 'a {
        serve(&self.upstream, req, &self.settings, &self.hints)
    }
}

/// Forward `req` to `up`.
async fn serve(
    up: &Arc<Upstream>,
    req: &mut Request,
    settings: &ProxySettings,
    configured_hints: &[HeaderValue],
) -> Response {
    let cfg = &up.cfg;
    let to_h1 = cfg.protocol == UpstreamProto::Http1;
    let fwd = headers::Forwarding {
        peer: req.peer,
        tls: req.tls,
        proto: match req.proto {
            crate::message::Proto::Http1 => headers::Received::Http1,
            crate::message::Proto::Http2 => headers::Received::Http2,
            crate::message::Proto::Http3 => headers::Received::Http3,
        },
        authority: &req.authority,
        trusted: &settings.trusted,
    };
    let plan = headers::RequestPlan::new(&req.headers, &fwd, to_h1);
    // What goes upstream as `host` (`:authority`): the upstream's `host`, else the client's, if
    // it can be a field value (checked in place, not copied into one; an empty one can: RFC
    // 9112 §3.2 sends `Host` empty for a target without an authority).
    let authority: &[u8] = match &cfg.host {
        Some(h) => h.as_bytes(),
        None if sluice_http::map_value(req.authority.as_bytes()) => req.authority.as_bytes(),
        None => return Response::text(StatusCode::BAD_REQUEST, "a request to proxy needs an authority\n"),
    };
    let target: std::borrow::Cow<'_, str> = match &req.query {
        Some(q) => format!("{}?{q}", req.path).into(),
        None => req.path.as_str().into(),
    };
    // An HTTP/1.1 `Upgrade` (a WebSocket handshake, RFC 6455 §4.1) to an HTTP/1.1 upstream
    // passes on, and a 101 turns both connections into a tunnel.
    // (The map is looked up only for such a request.)
    let upgrade = if to_h1 && req.upgrade.is_some() && headers::connection_has(&req.headers, "upgrade") {
        req.headers.get(http::header::UPGRADE).cloned()
    } else {
        None
    };
    // Request trailers need chunked framing over HTTP/1.1 (RFC 9112 §7.1.2).
    // (The plan saw which of these the client sent: no lookup for an absent one.)
    let trailer = to_h1 && plan.has_trailer() && plan.kept(&http::header::TRAILER);
    let length = if plan.has_length() && !trailer && plan.kept(&http::header::CONTENT_LENGTH) {
        req.headers.get(http::header::CONTENT_LENGTH)
    } else {
        None
    };
    // The engines checked it; a length that does not parse would go upstream as a field
    // while the body went chunked (two framings for one message: RFC 9112 §6.3 point 3).
    let declared = match length.map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok())) {
        Some(Some(n)) => Some(n),
        Some(None) => return Response::text(StatusCode::BAD_REQUEST, "an invalid content-length\n"),
        None => None,
    };
    let method = req.method.clone();
    // HTTP/2 upstreams get a request for hyper's client: its URI and fields as a map.
    let h2_request = if to_h1 {
        // The target goes on the request line as it is: visible ASCII only (RFC 9112 §3.2).
        // Every byte looked at (no early stop): checked many at a time.
        if target.bytes().fold(false, |bad, b| bad | !(0x21..=0x7e).contains(&b)) {
            return Response::text(StatusCode::BAD_REQUEST, "the request target cannot be forwarded\n");
        }
        None
    } else {
        let mut fields = plan.to_map();
        fields.remove(http::header::HOST);
        // Sluice forwards trailers to every client, so it asks for them; gRPC servers require
        // `te: trailers` over HTTP/2.
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
        let scheme = if cfg.protocol == UpstreamProto::H2 { "https" } else { "http" };
        match format!("{scheme}://{}{target}", std::str::from_utf8(authority).unwrap_or("localhost"))
            .parse::<http::Uri>()
        {
            // Boxed, as the attempts below are: see there.
            Ok(uri) => Some(Box::new((uri, fields))),
            Err(_) => return Response::text(StatusCode::BAD_REQUEST, "the request target cannot be forwarded\n"),
        }
    };
    // An HTTP/1.1 upstream's request head is written straight from the plan, no map between.
    let head = |out: &mut Vec<u8>| {
        use sluice_http::h1::field;
        sluice_http::h1::request_line(&method, &target, out);
        plan.each(|n, v| {
            // The proxy's own `te`, `host` and framing replace the client's.
            if *n == http::header::TE || *n == http::header::HOST || (trailer && *n == http::header::CONTENT_LENGTH) {
                return;
            }
            field(out, n.as_str().as_bytes(), v.as_bytes());
        });
        match &upgrade {
            Some(u) => {
                field(out, b"upgrade", u.as_bytes());
                field(out, b"connection", b"upgrade");
            }
            // Sluice forwards trailers to every client, so it asks for them (RFC 9110 §10.1.4:
            // with the `TE` connection option over HTTP/1.1).
            None => {
                field(out, b"te", b"trailers");
                field(out, b"connection", b"te");
            }
        }
        field(out, b"host", authority);
    };
    let streamed = !req.body.is_end_stream() && declared != Some(0);
    // Told when a streamed body has gone upstream in full: the response-head timer starts then
    // (without a body, at once).
    let mut done_rx = None;
    let mut body = if streamed {
        let (done_tx, rx) = tokio::sync::watch::channel(false);
        done_rx = Some(rx);
        Some(UpBody::stream(std::mem::replace(&mut req.body, RequestBody::empty()), declared, done_tx))
    } else {
        Some(UpBody::empty())
    };
    // Borrowed, not cloned: a clone and its drop are two atomic operations, per attempt too.
    let interim = Interim::of(&req.exchange);
    // 103 Early Hints (RFC 8297): the route's configured ones and, for a navigation, what the
    // upstream's earlier responses to this URL carried, at once, before asking the upstream.
    // The key is made only when it is used: most responses have nothing to learn.
    let learning = cfg.early_hints_learn && method == Method::GET;
    let learn_key = || hints::HintCache::key(req.tls, &req.authority, &req.path);
    let mut sent: Vec<HeaderValue> = Vec::new();
    if method == Method::GET && interim.available() {
        let mut flags = 0;
        let mut links: Vec<HeaderValue> = configured_hints.to_vec();
        if !links.is_empty() {
            flags |= accesslog::HINTS_CONFIGURED;
        }
        if learning && navigation(&req.headers) {
            for v in up.hints.get(&learn_key(), Instant::now()).unwrap_or_default() {
                if !links.contains(&v) {
                    links.push(v);
                    flags |= accesslog::HINTS_LEARNED;
                }
            }
        }
        if !links.is_empty() {
            let mut h = http::HeaderMap::with_capacity(links.len());
            for v in &links {
                h.append(http::header::LINK, v.clone());
            }
            if interim.send(StatusCode::EARLY_HINTS, &h) {
                req.exchange.hints.fetch_or(flags, Ordering::Relaxed);
                sent = links;
            }
        }
    }
    let sent = Mutex::new(sent);
    let mut budget = cfg.retries;
    let mut tried: Vec<usize> = Vec::new();
    let mut fresh = false;
    loop {
        let Some(i) = up.pick(req, req.peer.ip(), &tried) else {
            let err = ProxyError::new("destination_unavailable", "no server is up (ejected or failing health checks)");
            tracing::warn!(upstream = %up.name, "503: {}", err.detail);
            return err.response(&up.name);
        };
        let active = up.begin(i);
        let out = body.take().unwrap_or_else(UpBody::empty);
        let attempt = match &h2_request {
            None if interim.available() => {
                let mut forwarded = 0u32;
                let (sent, counters) = (&sent, &req.exchange);
                let mut on_interim = move |status: StatusCode, fields: &http::HeaderMap| {
                    // 100 (Continue) answers the upstream's own `Expect` handling. A budget on
                    // the rest: an upstream sending endless 1xx heads does not flood the client
                    // (the response-head timeout ends the exchange).
                    let code = status.as_u16();
                    if code == 100 {
                        return;
                    }
                    forwarded += 1;
                    if forwarded > MAX_INTERIM {
                        return;
                    }
                    let mut h = fields.clone();
                    headers::strip_hop_by_hop(&mut h);
                    if code == 103 {
                        // Merged with the hints already sent: each link once.
                        let mut sent = lock(sent);
                        // Link by link: a field may join several (Node's `writeEarlyHints` does).
                        let links = hints::each_link(h.get_all(http::header::LINK).iter());
                        h.remove(http::header::LINK);
                        let fresh: Vec<HeaderValue> = links.iter().filter(|l| !sent.contains(l)).cloned().collect();
                        if !links.is_empty() && fresh.is_empty() {
                            return;
                        }
                        for l in fresh {
                            sent.push(l.clone());
                            h.append(http::header::LINK, l);
                        }
                    }
                    if interim.send(status, &h) && code == 103 {
                        counters.hints.fetch_or(accesslog::HINTS_UPSTREAM, Ordering::Relaxed);
                    }
                };
                Box::pin(attempt_h1(up, i, (&method, &head, declared), out, &mut on_interim, fresh, &mut done_rx)).await
            }
            // Boxed too: inline, the exchange's future (about 730 bytes) made this one over
            // 1.5 KiB, which glibc serves from its bins instead of the per-thread cache, several
            // times the cost to allocate and free (about 1,000 instructions a request); two
            // blocks under 1 KiB cost less than that one.
            None => {
                Box::pin(attempt_h1(up, i, (&method, &head, declared), out, &mut |_, _| {}, fresh, &mut done_rx)).await
            }
            Some(parts) => {
                let (uri, fields) = &**parts;
                let mut hreq = hyper::Request::new(out);
                *hreq.method_mut() = method.clone();
                *hreq.uri_mut() = uri.clone();
                *hreq.headers_mut() = fields.clone();
                // Boxed: hyper's client makes this future twice the size of the rest of the
                // request's, which HTTP/1.1 upstreams would carry too.
                Box::pin(attempt_h2(up, i, hreq, &mut done_rx)).await
            }
        };
        match attempt {
            Ok(answer) => {
                up.succeeded(i);
                if answer.status == StatusCode::SWITCHING_PROTOCOLS {
                    return switch(up, req, answer, upgrade.is_some());
                }
                let learner = if learning { learn(up, &learn_key, answer.status, &answer.fields) } else { None };
                return response(up, answer, active, learner);
            }
            Err(f) => {
                if let Some(e) = &f.client {
                    return client_body_response(up, e);
                }
                if f.server_fault {
                    up.failed(i, &f.err);
                }
                match f.back {
                    Some(b) => {
                        body = Some(b);
                        if f.stale && !fresh {
                            fresh = true;
                            continue;
                        }
                    }
                    None if (f.stale && idempotent(&method) || f.unprocessed) && !streamed => {
                        body = Some(UpBody::empty());
                    }
                    None => {
                        log_failure(up, i, &f.err, "no retry: the request may have reached the upstream");
                        return f.err.response(&up.name);
                    }
                }
                if budget == 0 {
                    log_failure(up, i, &f.err, "retries used up");
                    return f.err.response(&up.name);
                }
                budget -= 1;
                tracing::debug!(upstream = %up.name, server = %up.servers[i].addr, error = f.err.kind, "retrying");
                tried.push(i);
                fresh = f.stale;
            }
        }
    }
}

fn log_failure(up: &Upstream, i: usize, err: &ProxyError, why: &str) {
    tracing::warn!(upstream = %up.name, server = %up.servers[i].addr, error = err.kind, detail = %err.detail,
        status = err.status().as_u16(), "{why}");
}

/// An upstream's response head and the way to its body.
struct Answer {
    status: StatusCode,
    version: http::Version,
    fields: Fields,
    body: body::Source,
}

/// A response head's fields: a map from hyper's HTTP/2 client, a list from our HTTP/1.1 one
/// (which goes to HTTP/2 and HTTP/3 clients as it is, without a map between).
enum Fields {
    Map(http::HeaderMap),
    List(sluice_http::PackedFields),
}

impl Fields {
    /// The first values of `Link`, `Content-Type` and `Content-Encoding`, what learning hints
    /// asks of every response (a list knows whether it has each without a pass over it; the
    /// names are constants there, so their kinds are found at compile time, not per lookup).
    fn for_hints(&self) -> [Option<&[u8]>; 3] {
        match self {
            Self::Map(m) => [&http::header::LINK, &http::header::CONTENT_TYPE, &http::header::CONTENT_ENCODING]
                .map(|n| m.get(n).map(HeaderValue::as_bytes)),
            Self::List(l) => {
                [l.values(b"link").next(), l.values(b"content-type").next(), l.values(b"content-encoding").next()]
            }
        }
    }

    /// Every value of the fields named `name`, as values of a map.
    fn values(&self, name: &http::HeaderName) -> Vec<HeaderValue> {
        match self {
            Self::Map(m) => m.get_all(name).iter().cloned().collect(),
            Self::List(l) => {
                l.values(name.as_str().as_bytes()).filter_map(|v| HeaderValue::from_bytes(v).ok()).collect()
            }
        }
    }

    fn into_map(self) -> http::HeaderMap {
        match self {
            Self::Map(m) => m,
            Self::List(l) => {
                let mut m = http::HeaderMap::with_capacity(l.len());
                l.append_to_map(&mut m);
                m
            }
        }
    }
}

/// The response-head timer: it runs from the end of the request body (`done`; none: there
/// is no body). `timer` is the connection's. It is moved only when it would fire late: a
/// deadline left from an earlier exchange on the connection, earlier than this one's, stays,
/// and when it fires the timer moves on to this one's. On a busy connection exchanges follow
/// each other far faster than the timeout, so the timer is moved about once per timeout, not
/// once per exchange (a move cost about 140 instructions of a small proxied request).
async fn head_timer(
    done: &mut Option<tokio::sync::watch::Receiver<bool>>,
    mut timer: std::pin::Pin<&mut tokio::time::Sleep>,
    timeout: Duration,
) {
    if let Some(done) = done {
        let _ = done.wait_for(|d| *d).await;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    if timer.deadline() > deadline {
        timer.as_mut().reset(deadline);
    }
    loop {
        timer.as_mut().await;
        if tokio::time::Instant::now() >= deadline {
            return;
        }
        timer.as_mut().reset(deadline);
    }
}

fn head_timed_out() -> Failed {
    Failed {
        err: ProxyError::timeout("http_response_timeout", "no response head in time"),
        back: None,
        stale: false,
        server_fault: true,
        unprocessed: false,
        client: None,
    }
}

/// One try on server `i` over HTTP/1.1 (our own client, [`h1`]): the method, what writes the
/// request line and fields, whether they hold `Content-Length`, the body; 1xx heads go to
/// `interim`.
async fn attempt_h1(
    up: &Arc<Upstream>,
    i: usize,
    (method, head, length): (&Method, h1::WriteHead<'_>, Option<u64>),
    body: UpBody,
    interim: &mut (dyn FnMut(StatusCode, &http::HeaderMap) + Send),
    fresh: bool,
    done: &mut Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<Answer, Failed> {
    let cfg = &up.cfg;
    let mut conn = match up.h1(i, fresh).await {
        Ok(c) => c,
        Err(err) => {
            return Err(Failed {
                server_fault: err.kind != "connection_limit_reached",
                err,
                back: Some(body),
                stale: false,
                unprocessed: false,
                client: None,
            })
        }
    };
    let reused = conn.reused;
    let mut timer = conn.head_timer.take().unwrap_or_else(|| Box::pin(tokio::time::sleep(cfg.response_head_timeout)));
    let mut ex = h1::Exchange::new(conn, method, head, length, body);
    let result = tokio::select! {
        // The answer first: no random draw for the order (a poll of the timer that finds it
        // not due costs nothing to the answer).
        biased;
        r = ex.read_head(method, interim) => r,
        () = head_timer(done, timer.as_mut(), cfg.response_head_timeout) => return Err(head_timed_out()),
    };
    ex.keep_head_timer(timer);
    match result {
        Ok(head) => {
            // After a 101 the connection becomes a tunnel; it never goes back to the pool.
            if head.status != StatusCode::SWITCHING_PROTOCOLS {
                // (`Connection: close` is the exchange's to see: a response that is not
                // persistent never goes back to the pool, whatever `keep` says.)
                let keep = match head.keep_alive_timeout() {
                    // Leave a second's margin before the upstream's own idle close.
                    Some(t) => cfg.pool_idle.min(Duration::from_secs(t.saturating_sub(1))),
                    None => cfg.pool_idle,
                };
                ex.set_home(h1::Home { up: up.clone(), server: i, keep });
            }
            Ok(Answer {
                status: head.status,
                version: head.version,
                fields: Fields::List(head.fields),
                body: body::Source::H1(ex),
            })
        }
        Err(f) => {
            let (kind, client) = match f.fail {
                h1::Fail::Client(ref e) => ("proxy_internal_response", Some(e.clone())),
                h1::Fail::Wire(sluice_http::h1::Error::TooLarge) => ("http_response_header_section_size", None),
                h1::Fail::Wire(_) => ("http_protocol_error", None),
                h1::Fail::Io(_) | h1::Fail::Closed | h1::Fail::Truncated => ("connection_terminated", None),
            };
            // A reused connection that failed before any answer: the upstream closed it while
            // it sat idle (the request may be sent again on a fresh one).
            let closed = matches!(f.fail, h1::Fail::Io(_) | h1::Fail::Closed) && !f.answered;
            Err(Failed {
                stale: reused && closed && client.is_none(),
                server_fault: !(reused && closed) && client.is_none(),
                err: ProxyError::new(kind, f.fail.to_string()),
                back: f.back,
                unprocessed: false,
                client,
            })
        }
    }
}

/// One try on server `i` over HTTP/2 (hyper's client, one shared connection).
async fn attempt_h2(
    up: &Arc<Upstream>,
    i: usize,
    hreq: hyper::Request<UpBody>,
    done: &mut Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<Answer, Failed> {
    let cfg = &up.cfg;
    let (mut tx, reused) = match up.h2(i).await {
        Ok(t) => t,
        Err(err) => {
            return Err(Failed {
                err,
                back: Some(hreq.into_body()),
                stale: false,
                server_fault: true,
                unprocessed: false,
                client: None,
            })
        }
    };
    // Waits while the upstream's MAX_CONCURRENT_STREAMS are all in use.
    match tokio::time::timeout(cfg.connect_timeout, tx.ready()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            up.forget_h2(i);
            let err = ProxyError::new("connection_terminated", e.to_string());
            return Err(Failed {
                err,
                back: Some(hreq.into_body()),
                stale: reused,
                server_fault: !reused,
                unprocessed: false,
                client: None,
            });
        }
        Err(_) => {
            let err = ProxyError::new("connection_limit_reached", "every stream of the HTTP/2 connection is busy");
            return Err(Failed {
                err,
                back: Some(hreq.into_body()),
                stale: false,
                server_fault: false,
                unprocessed: false,
                client: None,
            });
        }
    }
    let sent = tx.try_send_request(hreq);
    let mut timer = std::pin::pin!(tokio::time::sleep(cfg.response_head_timeout));
    let result = tokio::select! {
        r = sent => r,
        () = head_timer(done, timer.as_mut(), cfg.response_head_timeout) => return Err(head_timed_out()),
    };
    match result {
        Ok(resp) => {
            let (parts, incoming) = resp.into_parts();
            Ok(Answer {
                status: parts.status,
                version: parts.version,
                fields: Fields::Map(parts.headers),
                body: body::Source::H2(incoming),
            })
        }
        Err(mut e) => {
            let back = e.take_message().map(hyper::Request::into_body);
            let err = e.into_error();
            // RFC 9113 §8.7: a stream refused (REFUSED_STREAM, or above a GOAWAY's last
            // stream id) was not processed and may be retried.
            let reason = h2_reason(&err);
            let refused = reason == Some(h2::Reason::REFUSED_STREAM);
            // A connection-level failure (no stream reason, or the request never left):
            // the next request opens a new connection.
            let client = client_body_error(&err);
            if (reason.is_none() && client.is_none()) || back.is_some() {
                up.forget_h2(i);
            }
            Err(Failed {
                stale: back.is_some() && reused,
                server_fault: !refused && client.is_none(),
                err: ProxyError::new(classify(&err), err.to_string()),
                back,
                unprocessed: refused,
                client,
            })
        }
    }
}

/// The first error of type `T` in `err`'s source chain.
fn source_of<T: std::error::Error + 'static>(err: &hyper::Error) -> Option<&T> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = src {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        src = e.source();
    }
    None
}

/// The client's own request-body failure behind a hyper error, if that is what it was (the
/// body over `limits.max_request_body`, sent too slowly, or reset): the client's fault, not the
/// upstream's.
fn client_body_error(err: &hyper::Error) -> Option<crate::message::BodyError> {
    source_of::<crate::message::BodyError>(err).cloned()
}

/// The answer to a request whose own body failed while it was forwarded.
fn client_body_response(up: &Upstream, e: &crate::message::BodyError) -> Response {
    use crate::message::BodyError;
    let status = match e {
        BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        BodyError::TooSlow => StatusCode::REQUEST_TIMEOUT,
        BodyError::Reset | BodyError::Other(_) => StatusCode::BAD_REQUEST,
    };
    tracing::debug!(upstream = %up.name, %e, status = status.as_u16(), "request body failed while forwarded");
    Response::text(status, format!("{e}\n"))
}

fn h2_reason(err: &hyper::Error) -> Option<h2::Reason> {
    source_of::<h2::Error>(err).and_then(h2::Error::reason)
}

fn classify(err: &hyper::Error) -> &'static str {
    if err.is_parse_too_large() {
        "http_response_header_section_size"
    } else if err.is_parse() || err.is_parse_status() {
        "http_protocol_error"
    } else if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
        "connection_terminated"
    } else if err.is_timeout() {
        "http_response_timeout"
    } else {
        "proxy_internal_response"
    }
}

/// A 101 from the upstream: both connections become one tunnel once the client has the 101.
fn switch(up: &Arc<Upstream>, req: &mut Request, answer: Answer, asked: bool) -> Response {
    let upstream = match answer.body {
        body::Source::H1(ex) => ex.into_upgraded(),
        body::Source::H2(_) => None,
    };
    let (Some(down), Some((io, pre))) = (req.upgrade.take().filter(|_| asked), upstream) else {
        let err = ProxyError::new("http_protocol_error", "a 101 that was not asked for");
        tracing::warn!(upstream = %up.name, "502: {}", err.detail);
        return err.response(&up.name);
    };
    let mut fields = answer.fields.into_map();
    let proto = fields.get(http::header::UPGRADE).cloned();
    headers::response(&mut fields, answer.version);
    if let Some(p) = proto {
        fields.insert(http::header::UPGRADE, p);
    }
    fields.insert(http::header::CONNECTION, HeaderValue::from_static("upgrade"));
    let (idle, name) = (up.cfg.idle_timeout, up.name.clone());
    tokio::spawn(async move {
        match down.await {
            Ok(d) => tunnel(hyper_util::rt::TokioIo::new(d), io, pre, idle).await,
            Err(e) => tracing::debug!(upstream = %name, %e, "upgrade did not complete"),
        }
    });
    Response::new(StatusCode::SWITCHING_PROTOCOLS, fields, Body::Empty)
}

/// Copy bytes both ways until both sides have closed, either fails, or nothing moves for
/// `idle`; `pre` (what `b` sent right after its 101) goes to `a` first. A side's end of stream
/// is passed on as a shutdown of the other side's writes.
async fn tunnel<A, B>(a: A, b: B, pre: bytes::Bytes, idle: Duration)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut ar, mut aw) = tokio::io::split(a);
    if !pre.is_empty() && aw.write_all(&pre).await.is_err() {
        return;
    }
    let (mut br, mut bw) = tokio::io::split(b);
    let mut abuf = vec![0u8; 16 * 1024];
    let mut bbuf = vec![0u8; 16 * 1024];
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        tokio::select! {
            r = ar.read(&mut abuf), if a_open => match r {
                Ok(0) | Err(_) => {
                    a_open = false;
                    let _ = bw.shutdown().await;
                }
                Ok(n) => {
                    if bw.write_all(&abuf[..n]).await.is_err() {
                        return;
                    }
                }
            },
            r = br.read(&mut bbuf), if b_open => match r {
                Ok(0) | Err(_) => {
                    b_open = false;
                    let _ = aw.shutdown().await;
                }
                Ok(n) => {
                    if aw.write_all(&bbuf[..n]).await.is_err() {
                        return;
                    }
                }
            },
            () = tokio::time::sleep(idle) => return,
        }
    }
}

/// Whether a request is a navigation (a browser loading a page): `Sec-Fetch-Mode: navigate`,
/// or, from a client that sends no `Sec-Fetch-*` fields, an `Accept` naming `text/html`.
fn navigation(h: &http::HeaderMap) -> bool {
    // One pass over the fields, no lookups by name and no lower-cased copy: this runs for
    // every proxied GET.
    let (mut mode, mut fetch, mut html) = (None, false, false);
    for (n, v) in h {
        let n = n.as_str();
        if n == "sec-fetch-mode" {
            mode = mode.or(Some(v.as_bytes().eq_ignore_ascii_case(b"navigate")));
        } else if n.starts_with("sec-fetch-") {
            fetch = true;
        } else if n == "accept" && !html {
            html = v.to_str().is_ok() && v.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"text/html"));
        }
    }
    mode.unwrap_or(!fetch && html)
}

/// Learn from the upstream's answer to a GET: its hintable `Link` values now, or, for HTML
/// without any `Link`, the `<head>` as it streams by (the returned scanner).
fn learn(up: &Arc<Upstream>, key: &dyn Fn() -> String, status: StatusCode, h: &Fields) -> Option<body::Learner> {
    if !matches!(status.as_u16(), 200 | 301 | 302) {
        return None;
    }
    let [link, content_type, encoding] = h.for_hints();
    if link.is_some() {
        up.hints.learn(&key(), hints::from_link_fields(h.values(&http::header::LINK).iter()), Instant::now());
        return None;
    }
    let html = content_type.is_some_and(|v| v.get(..9).is_some_and(|p| p.eq_ignore_ascii_case(b"text/html")));
    // A compressed document is not scanned.
    let plain = encoding.is_none_or(|v| v.eq_ignore_ascii_case(b"identity"));
    if status == StatusCode::OK && html && plain {
        return Some(body::Learner::new(up.clone(), key()));
    }
    // Nothing to learn any more: what was learned goes (nothing to do when nothing is).
    if !up.hints.is_empty() {
        up.hints.learn(&key(), Vec::new(), Instant::now());
    }
    None
}

/// The client's response from the upstream's.
fn response(up: &Arc<Upstream>, answer: Answer, active: Counted<'_>, learner: Option<body::Learner>) -> Response {
    let mut source = answer.body;
    let whole = match &mut source {
        body::Source::H1(ex) => ex.take_whole(WHOLE_MAX),
        body::Source::H2(_) => None,
    };
    let body = if let Some(data) = whole {
        // Already here in full: sent as it is, the exchange over and its connection pooled.
        if let Some(mut l) = learner {
            l.feed(&data);
            l.finish();
        }
        Body::Full(data)
    } else if source.is_end_stream() {
        // An HTTP/1.1 connection already went back to the pool (`Exchange::set_home`).
        if let Some(l) = learner {
            l.finish();
        }
        Body::Empty
    } else {
        let h2 = answer.version == http::Version::HTTP_2;
        let mut b = UpstreamBody::new(source, up.cfg.idle_timeout, active.keep(up), up.name.clone(), h2);
        b.learner = learner;
        Body::Source(Box::new(b))
    };
    match answer.fields {
        Fields::Map(mut fields) => {
            headers::response(&mut fields, answer.version);
            Response::new(answer.status, fields, body)
        }
        // The list goes to the engines as it is (`Response::head`; an HTTP/1.1 client's
        // response, header rules or an upstream `alt-svc` make it a map first).
        Fields::List(mut fields) => {
            headers::response_fields(&mut fields, answer.version);
            Response { status: answer.status, head: Some(Head::Packed(fields)), headers: http::HeaderMap::new(), body }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::navigation;

    #[test]
    fn the_proxy_s_future_fits_the_allocator_s_thread_cache() {
        // Boxed for every proxied request (see `app::router::dispatch`): glibc serves blocks of up
        // to 1032 bytes from a per-thread cache, larger ones from its bins at several times the
        // cost. It was 1,608 bytes with the HTTP/1.1 exchange inline.
        let cfg = crate::config::for_test("[[site]]\nproxy = \"app\"\n");
        let up = super::Upstream::new(cfg.upstreams[0].clone());
        let mut req = crate::message::Request {
            proto: crate::message::Proto::Http2,
            peer: "127.0.0.1:1".parse().unwrap(),
            upgrade: None,
            exchange: Default::default(),
            method: http::Method::GET,
            authority: "localhost".into(),
            path: "/".into(),
            query: None,
            headers: http::HeaderMap::new(),
            tls: true,
            body: crate::message::RequestBody::empty(),
            malformed: None,
        };
        let fut = super::serve(&up, &mut req, &cfg.proxy, &[]);
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1024, "the proxy's future is {size} bytes");
    }

    fn map(fields: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        for (n, v) in fields {
            m.append(*n, http::HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn a_navigation_is_told_by_sec_fetch_mode_else_by_accept() {
        // `Sec-Fetch-Mode` decides, wherever it stands among the other `Sec-Fetch-*` fields.
        assert!(navigation(&map(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "Navigate")])));
        assert!(!navigation(&map(&[("accept", "text/html"), ("sec-fetch-mode", "cors")])));
        // The first value counts.
        assert!(!navigation(&map(&[("sec-fetch-mode", "no-cors"), ("sec-fetch-mode", "navigate")])));
        // Without it: `Accept` naming HTML (any case), from a client that sends no `Sec-Fetch-*`.
        assert!(navigation(&map(&[("user-agent", "x"), ("accept", "*/*"), ("accept", "Text/HTML;q=0.9")])));
        assert!(!navigation(&map(&[("accept", "text/html"), ("sec-fetch-dest", "document")])));
        assert!(!navigation(&map(&[("accept", "*/*")])));
        assert!(!navigation(&map(&[("accept", "text/htm")])));
        assert!(!navigation(&map(&[])));
    }
}
