//! Phase four of a proxied request: the client's response from the upstream's answer. The
//! head's fields are translated (hop-by-hop ones out, `Via` in; an HTTP/1.1 upstream's list
//! goes to HTTP/2 and HTTP/3 clients as it lies), the body is streamed as the client takes it
//! or sent whole when it came with the head, a 101 joins both connections into a tunnel, and
//! a GET's answer teaches the Early Hints cache.

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, StatusCode};

use super::body::{self, UpstreamBody};
use super::error::{ErrorType, ProxyError};
use super::hints;
use super::upstream::{Counted, Upstream};
use crate::handlers::pipe;
use crate::message::{Body, Head, Response};
use sluice_http::forward as headers;

/// A response body of at most this many bytes that arrived with its head is sent as one
/// piece, without streaming it from the upstream connection (which goes back to the pool at
/// once). The read buffer holds that much after a head anyway.
const WHOLE_MAX: u64 = 16 * 1024;

/// An upstream's response head and the way to its body.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) version: http::Version,
    pub(super) fields: Fields,
    pub(super) body: body::Source,
}

/// A response head's fields as the upstream client parsed them (lower-case names): they go to
/// HTTP/2 and HTTP/3 clients as they are, without a map between.
pub(super) struct Fields(pub(super) sluice_http::PackedFields);

impl Fields {
    /// The first values of `Link`, `Content-Type` and `Content-Encoding`, what learning hints
    /// asks of every response (the list knows whether it has each without a pass over it; the
    /// names are constants there, so their kinds are found at compile time, not per lookup).
    fn for_hints(&self) -> [Option<&[u8]>; 3] {
        let l = &self.0;
        [l.values(b"link").next(), l.values(b"content-type").next(), l.values(b"content-encoding").next()]
    }

    /// Every value of the fields named `name`, as values of a map.
    fn values(&self, name: &http::HeaderName) -> Vec<HeaderValue> {
        self.0.values(name.as_str().as_bytes()).filter_map(|v| HeaderValue::from_bytes(v).ok()).collect()
    }

    fn into_map(self) -> http::HeaderMap {
        let mut m = http::HeaderMap::with_capacity(self.0.len());
        self.0.append_to_map(&mut m);
        m
    }
}

/// A 101 from the upstream: both connections become one tunnel once the client has the 101.
pub(super) fn switch(
    up: &Arc<Upstream>,
    client: &mut Option<hyper::upgrade::OnUpgrade>,
    answer: Answer,
    asked: bool,
) -> Response {
    let upstream = match answer.body {
        body::Source::H1(ex) => ex.into_upgraded(),
        body::Source::H2(_) => None,
    };
    let (Some(down), Some((io, pre))) = (client.take().filter(|_| asked), upstream) else {
        let err = ProxyError::new(ErrorType::HttpProtocolError, "a 101 that was not asked for");
        tracing::warn!(upstream = %up.name, "502: {}", err.detail);
        return up.fail_response(&err);
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
            Ok(d) => pipe::splice(hyper_util::rt::TokioIo::new(d), io, pre, idle, &pipe::Moved::default()).await,
            Err(e) => tracing::debug!(upstream = %name, %e, "upgrade did not complete"),
        }
    });
    Response::new(StatusCode::SWITCHING_PROTOCOLS, fields, Body::Empty)
}

/// The answer to a WebSocket over HTTP/2 (RFC 8441): after the upstream's 101, a 200 whose
/// body is what the upstream sends, while the stream's request body goes to the upstream; the
/// tunnel opens only on a 101 (bytes before it would go to whatever the upstream made of
/// them). A refusal (4xx, 5xx) passes on; a 2xx that is not a switch is a 502, as it would
/// look like an open tunnel to the client.
pub(super) fn websocket_stream(
    up: &Arc<Upstream>,
    answer: Answer,
    active: Counted<'_>,
    client: crate::message::RequestBody,
) -> Response {
    if answer.status != StatusCode::SWITCHING_PROTOCOLS {
        if answer.status.is_success() || answer.status.is_informational() {
            let err = ProxyError::new(ErrorType::HttpProtocolError, "the upstream did not switch to WebSocket");
            tracing::warn!(upstream = %up.name, "502: {}", err.detail);
            return up.fail_response(&err);
        }
        return response(up, answer, active, None);
    }
    let upstream = match answer.body {
        body::Source::H1(ex) => ex.into_upgraded(),
        body::Source::H2(_) => None,
    };
    let Some((io, pre)) = upstream else {
        let err = ProxyError::new(ErrorType::HttpProtocolError, "a 101 that was not asked for");
        return up.fail_response(&err);
    };
    let mut fields = answer.fields.into_map();
    headers::response(&mut fields, answer.version);
    // RFC 8441 §5: HTTP/2 has no key and no accept.
    fields.remove("sec-websocket-accept");
    fields.remove(http::header::UPGRADE);
    // The stream's two directions meet the upstream connection through an in-memory pipe, so
    // that the tunnel's copying and idle timeout are the HTTP/1.1 tunnel's.
    let (side, body) = pipe::stream_side(client);
    let idle = up.cfg.idle_timeout;
    tokio::spawn(async move { pipe::splice(side, io, pre, idle, &pipe::Moved::default()).await });
    Response::new(StatusCode::OK, fields, body)
}

/// Learn from the upstream's answer to a GET: its hintable `Link` values now, or, for HTML
/// without any `Link`, the `<head>` as it streams by (the returned scanner).
pub(super) fn learn(
    up: &Arc<Upstream>,
    key: &dyn Fn() -> String,
    status: StatusCode,
    h: &Fields,
) -> Option<body::Learner> {
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
pub(super) fn response(
    up: &Arc<Upstream>,
    answer: Answer,
    active: Counted<'_>,
    learner: Option<body::Learner>,
) -> Response {
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
    // A 204 has no content and no `Content-Length` (RFC 9110 §8.6: it must not carry one), and
    // a 304's would describe a representation not sent: both go without it, on every protocol
    // (HTTP/2 and HTTP/3 clients such as curl and nghttp2 refuse a stream whose announced
    // length its DATA does not match; hyper drops it for HTTP/1.1 clients).
    let no_length = answer.status == StatusCode::NO_CONTENT || answer.status == StatusCode::NOT_MODIFIED;
    // The list goes to the engines as it is (`Response::head`; an HTTP/1.1 client's response,
    // header rules or an upstream `alt-svc` make it a map first).
    let mut fields = answer.fields.0;
    headers::response_fields(&mut fields, answer.version);
    if no_length {
        fields.retain(|n, _| n != b"content-length");
    }
    Response { status: answer.status, head: Some(Head::Packed(fields)), headers: http::HeaderMap::new(), body }
}
