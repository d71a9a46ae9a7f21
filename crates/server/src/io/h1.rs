//! HTTP/1.1 through hyper's server connection (keep-alive, chunked bodies, Expect:
//! 100-continue), answered by the same path as HTTP/2 and HTTP/3 (`app::respond::prepare`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::io::Stop;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::app::respond::{prepare, ConnInfo, Prepared};
use crate::message::accesslog::Record;
use crate::message::ExchangeRef;
use crate::message::{Body, Proto, Refusal, Request, RequestBody, CHUNK};
use crate::state::State;

/// Serve one HTTP/1.1 connection until it closes or shutdown drains it.
pub(crate) async fn serve<S>(io: S, info: ConnInfo, state: Arc<State>, mut stop: crate::io::StopRx)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = info.peer;
    let svc_state = state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (state, info) = (svc_state.clone(), info.clone());
        async move { Ok::<_, std::convert::Infallible>(handle(req, &info, state).await) }
    });
    // hyper owns the stream to the end; it comes back when hyper drops it, for a lingering close.
    let (io, returned) = crate::io::linger::Returning::new(io);
    let mut conn = Box::pin(
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(state.cfg.timeouts.header)
            .keep_alive(true)
            .max_buf_size(state.cfg.limits.max_header_list_size.max(8192) as usize)
            .serve_connection(TokioIo::new(io), svc)
            // The reverse proxy tunnels WebSockets (RFC 6455 §4) after a 101.
            .with_upgrades(),
    );
    let drain = state.cfg.timeouts.drain;
    // A reload (`Stop::Retire`) changes nothing here: the next response says
    // `Connection: close` (see `handle`), and one in progress finishes however long it takes.
    let mut watching = *stop.borrow() != Stop::Drain;
    let linger = loop {
        tokio::select! {
            r = conn.as_mut() => break match r {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(%peer, %e, "HTTP/1.1 connection ended with an error");
                    // Refused heads (431, 400) are answered and then closed with the rest of
                    // the peer's input unread; a transport failure or a timeout has no answer
                    // to save.
                    e.is_parse() || e.is_parse_too_large()
                }
            },
            changed = stop.changed(), if watching => {
                watching = changed.is_ok() && *stop.borrow_and_update() != Stop::Drain;
                if changed.is_ok() && !watching {
                    conn.as_mut().graceful_shutdown();
                    break tokio::time::timeout(drain, conn.as_mut()).await.is_ok_and(|r| r.is_ok());
                }
            }
        }
    };
    // Dropping the connection drops the stream, which lands in `returned` if its input did
    // not end (an upgraded stream lives on in its tunnel instead).
    drop(conn);
    let back = returned.lock().ok().and_then(|mut s| s.take());
    if let (true, Some(s)) = (linger, back) {
        crate::io::linger::close(s).await;
    }
}

async fn handle(mut req: hyper::Request<Incoming>, info: &ConnInfo, state: Arc<State>) -> hyper::Response<H1Body> {
    // A CONNECT's connection becomes its tunnel after a 2xx, as an upgrade's after a 101.
    let connect = req.method() == http::Method::CONNECT;
    let upgrade = (connect || req.headers().contains_key(http::header::UPGRADE)).then(|| hyper::upgrade::on(&mut req));
    let (parts, incoming) = req.into_parts();
    let malformed = head_problem(&parts, state.cfg.limits.max_header_list_size);
    // RFC 9112 §3.2.2: with an absolute-form target, its authority is the one to use.
    let authority = parts
        .uri
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| parts.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()));
    // The authority this connection already checked is shared, not copied again.
    let authority: Arc<str> = match (authority, info.checked.get()) {
        (Some(a), Some(c)) if **c == *a => c.clone(),
        (Some(a), _) => a.to_ascii_lowercase().into(),
        (None, _) => Arc::from(""),
    };
    let counters = ExchangeRef::default();
    let body =
        RequestBody::hyper(incoming, state.write_rule()).counting(counters.clone(), state.cfg.limits.max_request_body);
    let mut req = Request {
        proto: Proto::Http1,
        peer: info.peer,
        method: parts.method,
        authority,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        tls: info.tls,
        body,
        // hyper sends no 1xx but its own 100 (Continue); browsers ignore 103 over HTTP/1.1.
        malformed,
        upgrade,
        exchange: counters,
        websocket: false,
        connect: connect.then(|| info.connect_parts(false)),
    };
    // `head` is always `None` here: `finish` moves it into the map for HTTP/1.1.
    let Prepared { status, headers, body, no_body, log, .. } = prepare(&mut req, &state, info).await;
    let body = if no_body { Body::Empty } else { body };
    // A body with trailers goes out chunked (its trailers after the last chunk, to clients that
    // accept them): no length for hyper to frame it by.
    let len = if no_body {
        Some(0)
    } else if body.has_trailers() {
        None
    } else {
        body.len()
    };
    let mut resp = hyper::Response::new(H1Body { body: Some(body), pending: None, len, trailers: None, log });
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    // A reload replaced this connection's configuration: this response is its last (RFC 9112
    // §9.6); a 101 hands the connection to its tunnel instead.
    let tunnel = status == http::StatusCode::SWITCHING_PROTOCOLS || (connect && status.is_success());
    if state.retired() && !tunnel {
        resp.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    resp
}

/// What makes an HTTP/1.1 request head unservable:
/// - a header section over `limits.max_header_list_size`, counted as HTTP/2 and HTTP/3 count
///   it (name + value + 32 per field, RFC 9113 §6.5.2): 431, the same rule on every protocol.
///   hyper's own bound (its read buffer) is only approximate: a head read in large pieces, as
///   TLS records deliver it, can pass it;
/// - RFC 9112 §3.2: no `Host` field in an HTTP/1.1 request, more than one, or an invalid one:
///   400. (HTTP/1.0 requests need none.)
fn head_problem(parts: &http::request::Parts, max_header_list_size: u32) -> Option<Refusal> {
    let size: usize = parts.headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum();
    if size > max_header_list_size as usize {
        return Some(Refusal {
            status: http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            why: "header section larger than limits.max_header_list_size",
        });
    }
    let mut hosts = parts.headers.get_all(http::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if parts.version == http::Version::HTTP_11 => Some(Refusal::bad("no host field")),
        (None, _) => None,
        (Some(_), Some(_)) => Some(Refusal::bad("more than one host field")),
        (Some(h), None) => match h.to_str() {
            Ok(h) if sluice_http::valid_authority(h) => None,
            _ => Some(Refusal::bad("an invalid host field")),
        },
    }
}

type ChunkFuture = Pin<Box<dyn Future<Output = (Body, Option<std::io::Result<Bytes>>)> + Send>>;

/// A response body for hyper that pulls our [`Body`] chunk by chunk.
pub(crate) struct H1Body {
    body: Option<Body>,
    pending: Option<ChunkFuture>,
    len: Option<u64>,
    /// The body's trailer section, sent after its last chunk (chunked encoding; hyper sends
    /// trailers only to clients that said `TE: trailers`).
    trailers: Option<http::HeaderMap>,
    log: Record,
}

impl http_body::Body for H1Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.pending.is_none() {
            let Some(mut body) = this.body.take() else {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            };
            // In-memory bodies answer without waiting: no future (and no allocation) per chunk.
            if let Some(ready) = body.next_ready(CHUNK) {
                return Poll::Ready(this.deliver(body, ready));
            }
            this.pending = Some(Box::pin(async move {
                let r = body.next_chunk(CHUNK).await;
                (body, r)
            }));
        }
        // Invariant: set just above or on an earlier poll.
        let fut = this.pending.as_mut().expect("pending future");
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready((body, r)) => {
                this.pending = None;
                Poll::Ready(this.deliver(body, r))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.trailers.is_none() && self.body.as_ref().is_none_or(Body::is_empty)
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl H1Body {
    fn deliver(
        &mut self,
        mut body: Body,
        r: Option<std::io::Result<Bytes>>,
    ) -> Option<Result<Frame<Bytes>, std::io::Error>> {
        match r {
            None => {
                self.log.ended("ok");
                // Written and counted now: the exchange is over.
                self.log = Record::default();
                body.take_trailers().filter(|t| !t.is_empty()).map(|t| Ok(Frame::trailers(t)))
            }
            Some(Ok(chunk)) => {
                self.log.sent(chunk.len() as u64);
                if self.len.is_some_and(|l| l == self.log.bytes_out()) {
                    self.log.ended("ok");
                }
                self.body = Some(body);
                Some(Ok(Frame::data(chunk)))
            }
            Some(Err(e)) => {
                self.log.ended("body error");
                Some(Err(e))
            }
        }
    }
}
