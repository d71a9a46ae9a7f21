//! The handler side shared by the HTTP/2 and HTTP/3 drivers: a request head becomes a
//! [`Request`], the handler runs, and its response streams back to the connection task through
//! a [`Sink`], chunk by chunk, each chunk waiting for permits that the connection task returns
//! only as its engine frames earlier bytes (the bounded queue between handler and socket).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use sluice_h2::{Field, RequestHead};
use tokio::sync::Semaphore;

use crate::app::accesslog::{AccessLog, Counters};
use crate::app::http::{Proto, Request, RequestBody, Response, CHUNK};
use crate::app::router::dispatch;
use crate::state::State;

/// What the handlers of one connection need to know about it.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) tls: bool,
    /// An `Alt-Svc` for responses: HTTP/3 on this listener's port (RFC 7838, RFC 9114 §3.1.1).
    pub(crate) alt_svc: Option<http::HeaderValue>,
    /// Over TLS: what the connection serves (421 for other authorities, the ORIGIN frame).
    pub(crate) served: Option<crate::io::tls::Served>,
}

impl ConnInfo {
    /// The 421 (RFC 9110 §15.5.20) for a request whose authority this connection does not
    /// serve, if that is the case.
    pub(crate) fn misdirected(&self, authority: &str) -> Option<Response> {
        let served = self.served.as_ref()?;
        if served.serves(authority) {
            return None;
        }
        tracing::debug!(peer = %self.peer, authority, "421: authority not served on this connection");
        Some(Response::text(
            http::StatusCode::MISDIRECTED_REQUEST,
            "misdirected request: this connection does not serve that authority; open a new one\n",
        ))
    }
}

/// Where a handler's response goes: commands to the connection task of one stream. Each call
/// returns false once the connection task is gone.
pub(crate) trait Sink: Send + 'static {
    /// The handler set the response's priority (a `priority` response header, RFC 9218 §5).
    fn priority(&self, value: Bytes);
    /// The response head; `end` when no body follows.
    fn head(&self, status: u16, fields: Vec<Field>, end: bool) -> bool;
    /// Body bytes; `end` with the last.
    fn data(&self, data: Bytes, end: bool) -> bool;
    /// The body failed half-way: reset the stream with an internal error.
    fn fail(&self);
}

/// A request from an engine's head: the target split into path and query, the authority from
/// `:authority` or else `Host`, lower-cased.
pub(crate) fn to_request(head: RequestHead, body: RequestBody, tls: bool, proto: Proto) -> Request {
    let method = http::Method::from_bytes(&head.method).unwrap_or(http::Method::GET);
    let target = head.path.as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (target, None),
    };
    let mut headers = http::HeaderMap::new();
    let mut authority = head.authority.as_deref().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase());
    for f in head.fields {
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(&f.name), http::HeaderValue::from_maybe_shared(f.value)) {
            if authority.is_none() && n == http::header::HOST {
                authority = v.to_str().ok().map(str::to_ascii_lowercase);
            }
            headers.append(n, v);
        }
    }
    Request { proto, method, authority: authority.unwrap_or_default(), path, query, headers, tls, body }
}

/// Run the handler for `req` (or answer 421 when the connection does not serve its
/// authority) and stream its response into `sink`. `permits` holds the room left in the
/// stream's send queue; the connection's `alt_svc`, when set, is added to the response.
pub(crate) async fn run_handler<S: Sink>(
    sink: S,
    req: Request,
    permits: Arc<Semaphore>,
    counters: Arc<Counters>,
    state: Arc<State>,
    conn: Arc<ConnInfo>,
) {
    let peer = conn.peer;
    let mut log = AccessLog {
        enabled: state.cfg.access_log,
        proto: req.proto,
        peer,
        method: req.method.clone(),
        authority: req.authority.clone(),
        path: req.path.clone(),
        status: 0,
        start: std::time::Instant::now(),
        counters,
        bytes_out: 0,
        outcome: "reset",
    };
    let head_only = req.method == http::Method::HEAD;
    let resp = match conn.misdirected(&req.authority) {
        Some(r) => r,
        None => dispatch(&state, req).await,
    };
    let Response { status, mut headers, mut body } = resp;
    log.status = status.as_u16();
    if let Some(v) = &conn.alt_svc {
        headers.insert(http::header::ALT_SVC, v.clone());
    }
    let fields = response_fields(&headers);
    if let Some(p) = headers.get("priority") {
        sink.priority(Bytes::copy_from_slice(p.as_bytes()));
    }
    let no_body = head_only
        || body.is_empty()
        || status == http::StatusCode::NOT_MODIFIED
        || status == http::StatusCode::NO_CONTENT;
    if !sink.head(status.as_u16(), fields, no_body) {
        return;
    }
    if no_body {
        log.outcome = "ok";
        return;
    }
    let mut left = body.len();
    while let Some(chunk) = body.next_chunk(CHUNK).await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%peer, %e, "response body failed");
                sink.fail();
                log.outcome = "body error";
                return;
            }
        };
        let n = chunk.len();
        // Backpressure: wait until the engine has framed earlier bytes of this stream.
        match permits.acquire_many(n as u32).await {
            Ok(p) => p.forget(),
            Err(_) => return,
        }
        log.bytes_out += n as u64;
        left = left.map(|l| l.saturating_sub(n as u64));
        let end = left == Some(0);
        if !sink.data(chunk, end) {
            return;
        }
        if end {
            log.outcome = "ok";
            return;
        }
    }
    let _ = sink.data(Bytes::new(), true);
    log.outcome = "ok";
}

/// Response header fields for HTTP/2 and HTTP/3: lower-case names (the http crate's are),
/// minus the connection-specific ones both forbid (RFC 9113 §8.2.2, RFC 9114 §4.2).
pub(crate) fn response_fields(headers: &http::HeaderMap) -> Vec<Field> {
    headers
        .iter()
        .filter(|(n, _)| {
            !matches!(n.as_str(), "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade")
        })
        .map(|(n, v)| Field::new(Bytes::copy_from_slice(n.as_str().as_bytes()), Bytes::copy_from_slice(v.as_bytes())))
        .collect()
}
