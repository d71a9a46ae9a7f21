//! Phase three of a proxied request: the attempts, on the servers the balancer picks, with
//! the retries that are safe ([`Retry`]), until one answers with a response head.
//!
//! Retries happen only where they are safe: the request never reached the upstream (the
//! connection could not be opened, or a pooled connection was found closed before a byte was
//! written), or the method is idempotent (RFC 9110 §9.2.2) and had no body, and a reused
//! connection closed without answering, or the upstream said it did not process it. A stale
//! pooled connection costs no retry budget; everything else costs one of `retries`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};

use super::answer::{Answer, Fields};
use super::body::{self, UpBody};
use super::error::{Blame, ErrorType, Failed, ProxyError, Retry};
use super::plan::{H2Head, Plan};
use super::upstream::{lock, Counted, Upstream};
use super::{h1, hints};
use crate::message::accesslog;
use crate::message::{BodyError, Interim, Request, Response};
use sluice_http::forward as headers;

/// Interim (1xx) responses of one request passed on to the client; more are dropped.
const MAX_INTERIM: u32 = 16;

/// RFC 9110 §9.2.2.
fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE)
}

/// Send the planned request until a server answers with a head: the answer and its server's
/// count of requests in progress, or the client's answer (a 502, 503 or 504 with
/// `Proxy-Status`, or the client's own body failure). `streamed`: the body goes as it comes
/// (it cannot be sent twice); `done`: told when it has gone in full (the response-head timer
/// starts then); `sent`: the Early Hints already sent (an upstream's 103 adds only new links).
pub(super) async fn forward<'u>(
    up: &'u Arc<Upstream>,
    req: &Request,
    plan: &Plan<'_>,
    body: UpBody,
    streamed: bool,
    mut done: Option<tokio::sync::watch::Receiver<bool>>,
    sent: &Mutex<Vec<HeaderValue>>,
) -> Result<(Answer, Counted<'u>), Response> {
    // Borrowed, not cloned: a clone and its drop are two atomic operations, per attempt too.
    let interim = Interim::of(&req.exchange);
    let mut body = Some(body);
    let mut budget = up.cfg.retries;
    let mut tried: Vec<usize> = Vec::new();
    let mut fresh = false;
    loop {
        let Some(i) = up.pick(req, req.peer.ip(), &tried) else {
            let err = ProxyError::new(
                ErrorType::DestinationUnavailable,
                "no server is up (ejected or failing health checks)",
            );
            tracing::warn!(upstream = %up.name, "503: {}", err.detail);
            return Err(up.fail_response(&err));
        };
        let active = up.begin(i);
        let sent_at = std::time::Instant::now();
        let out = body.take().unwrap_or_else(UpBody::empty);
        let head = |o: &mut Vec<u8>| plan.write_h1_head(o);
        let length = plan.declared;
        let attempt = if interim.available() {
            let mut forwarded = 0u32;
            let counters = &req.exchange;
            let mut on_interim = move |status: StatusCode, fields: &http::HeaderMap| {
                // 100 (Continue) answers the upstream's own `Expect` handling. A budget on the
                // rest: an upstream sending endless 1xx heads does not flood the client (the
                // response-head timeout ends the exchange).
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
                    crate::message::metrics::hint(accesslog::HINTS_UPSTREAM);
                }
            };
            match &plan.h2 {
                None => {
                    Box::pin(attempt_h1(up, i, (&plan.method, &head, length), out, &mut on_interim, fresh, &mut done))
                        .await
                }
                Some(h2) => Box::pin(attempt_h2(up, i, plan, h2, out, &mut on_interim, &mut done)).await,
            }
        } else {
            // Boxed too: inline, the exchange's future (about 730 bytes) made this one over
            // 1.5 KiB, which glibc serves from its bins instead of the per-thread cache, several
            // times the cost to allocate and free (about 1,000 instructions a request); two
            // blocks under 1 KiB cost less than that one.
            match &plan.h2 {
                None => {
                    Box::pin(attempt_h1(up, i, (&plan.method, &head, length), out, &mut |_, _| {}, fresh, &mut done))
                        .await
                }
                Some(h2) => Box::pin(attempt_h2(up, i, plan, h2, out, &mut |_, _| {}, &mut done)).await,
            }
        };
        let f = match attempt {
            Ok(answer) => {
                let took = sent_at.elapsed();
                up.answered(i, took);
                req.exchange.upstream(&up.name, &up.servers[i].label, took);
                return Ok((answer, active));
            }
            Err(f) => f,
        };
        if matches!(f.err.blame, Blame::Client(_)) {
            return Err(up.fail_response(&f.err));
        }
        if f.err.blame == Blame::Server {
            up.failed(i, &f.err);
        }
        let stale = f.err.retry == Retry::Stale;
        match f.back {
            Some(b) => {
                body = Some(b);
                // A pooled connection found closed: once more on a fresh one, free.
                if stale && !fresh {
                    fresh = true;
                    continue;
                }
            }
            None if (stale && idempotent(&plan.method) || f.err.retry == Retry::Unprocessed) && !streamed => {
                body = Some(UpBody::empty());
            }
            None => {
                log_failure(up, i, &f.err, "no retry: the request may have reached the upstream");
                return Err(up.fail_response(&f.err));
            }
        }
        if budget == 0 {
            log_failure(up, i, &f.err, "retries used up");
            return Err(up.fail_response(&f.err));
        }
        budget -= 1;
        up.retries.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(upstream = %up.name, server = %up.servers[i].addr, error = %f.err.kind, "retrying");
        tried.push(i);
        fresh = stale;
    }
}

fn log_failure(up: &Upstream, i: usize, err: &ProxyError, why: &str) {
    tracing::warn!(upstream = %up.name, server = %up.servers[i].addr, error = %err.kind, detail = %err.detail,
        status = err.status().as_u16(), "{why}");
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
    ProxyError::new(ErrorType::HttpResponseTimeout, "no response head in time").into()
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
        Err(err) => return Err(Failed { err, back: Some(body) }),
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
                fields: Fields(head.fields),
                body: body::Source::H1(ex),
            })
        }
        Err(f) => {
            let kind = match f.fail {
                h1::Fail::Client(_) => ErrorType::ProxyInternalResponse,
                h1::Fail::Wire(sluice_http::h1::Error::TooLarge) => ErrorType::HttpResponseHeaderSectionSize,
                h1::Fail::Wire(_) => ErrorType::HttpProtocolError,
                h1::Fail::Io(_) | h1::Fail::Closed | h1::Fail::Truncated => ErrorType::ConnectionTerminated,
            };
            // A reused connection that failed before any answer: the upstream closed it while
            // it sat idle (the request may be sent again on a fresh one).
            let closed = matches!(f.fail, h1::Fail::Io(_) | h1::Fail::Closed) && !f.answered;
            let err = ProxyError::new(kind, f.fail.to_string());
            let err = match f.fail {
                h1::Fail::Client(e) => err.blaming(Blame::Client(e)),
                _ if reused && closed => err.blaming(Blame::Nobody).retry(Retry::Stale),
                _ => err,
            };
            Err(Failed { err, back: f.back })
        }
    }
}

/// One try on server `i` over HTTP/2: a stream of the server's shared connection (Sluice's
/// client engine); its 1xx heads go to `interim`. The request body goes on a task of its own,
/// as the upstream takes it (the response may come while it is still going, as a gRPC stream's
/// does).
async fn attempt_h2(
    up: &Arc<Upstream>,
    i: usize,
    plan: &Plan<'_>,
    head: &H2Head,
    body: UpBody,
    interim: &mut (dyn FnMut(StatusCode, &http::HeaderMap) + Send),
    done: &mut Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<Answer, Failed> {
    use http_body::Body as _;
    use sluice_client::{MuxError, StreamEvent};
    let cfg = &up.cfg;
    let (mux, reused) = match up.h2(i).await {
        Ok(t) => t,
        Err(err) => return Err(Failed { err, back: Some(body) }),
    };
    let fields: Vec<(&str, &str)> = head.fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let req = sluice_h2::client::Request {
        method: plan.method.as_str(),
        scheme: head.scheme,
        // Invariant: the plan checked that it is UTF-8.
        authority: std::str::from_utf8(plan.authority).unwrap_or_default(),
        path: &plan.target,
        fields: &fields,
    };
    let end = body.is_end_stream();
    // Waits while the upstream's MAX_CONCURRENT_STREAMS are all in use.
    let (tx, mut rx) = match mux.request(&req, end, cfg.connect_timeout).await {
        Ok(s) => s,
        Err(MuxError::Busy) => {
            let err =
                ProxyError::new(ErrorType::ConnectionLimitReached, "every stream of the HTTP/2 connection is busy")
                    .blaming(Blame::Nobody);
            return Err(Failed { err, back: Some(body) });
        }
        Err(e) => {
            up.forget_h2(i);
            let err = ProxyError::new(ErrorType::ConnectionTerminated, e.to_string());
            let err = if reused { err.blaming(Blame::Nobody).retry(Retry::Stale) } else { err };
            return Err(Failed { err, back: Some(body) });
        }
    };
    // The client's own body failing is its fault, not the upstream's (413, 408 or 400).
    let (client_tx, mut client_failed) = tokio::sync::oneshot::channel();
    if !end {
        tokio::spawn(pump(body, tx, client_tx));
    }
    let mut timer = std::pin::pin!(tokio::time::sleep(cfg.response_head_timeout));
    let err = loop {
        let event = tokio::select! {
            biased;
            e = rx.next_event() => e,
            Ok(e) = &mut client_failed => {
                let err = ProxyError::new(ErrorType::ProxyInternalResponse, e.to_string()).blaming(Blame::Client(e));
                return Err(err.into());
            }
            () = head_timer(done, timer.as_mut(), cfg.response_head_timeout) => return Err(head_timed_out()),
        };
        match event {
            Some(StreamEvent::Interim { status, fields }) => {
                if let Ok(s) = StatusCode::from_u16(status) {
                    interim(s, &body::to_map(&fields));
                }
                continue;
            }
            Some(StreamEvent::Head { status, fields, end_stream }) => {
                let Ok(status) = StatusCode::from_u16(status) else {
                    break ProxyError::new(ErrorType::HttpProtocolError, format!("status {status}"));
                };
                let len = fields.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.trim().parse().ok());
                let list = sluice_http::PackedFields::copied(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
                return Ok(Answer {
                    status,
                    version: http::Version::HTTP_2,
                    fields: Fields(list),
                    body: body::Source::H2(Box::new(body::H2Body::new(rx, len, end_stream))),
                });
            }
            // RFC 9113 §8.7: a stream refused (REFUSED_STREAM, or above a GOAWAY's last stream
            // id) was not processed and may be retried.
            Some(StreamEvent::Reset(MuxError::Refused)) => {
                break ProxyError::new(ErrorType::ConnectionTerminated, MuxError::Refused.to_string())
                    .blaming(Blame::Nobody)
                    .retry(Retry::Unprocessed);
            }
            Some(StreamEvent::Reset(e @ MuxError::Reset { remote: false, .. })) => {
                break ProxyError::new(ErrorType::HttpProtocolError, e.to_string());
            }
            Some(StreamEvent::Reset(e)) => {
                if matches!(e, MuxError::Broken(_)) {
                    up.forget_h2(i);
                }
                break ProxyError::new(ErrorType::ConnectionTerminated, e.to_string());
            }
            Some(StreamEvent::Data { .. } | StreamEvent::Trailers(_)) | None => {
                break ProxyError::new(ErrorType::HttpProtocolError, "the stream ended without a response head");
            }
        };
    };
    Err(err.into())
}

/// Send the client's body on an HTTP/2 stream as the upstream takes it: data, then trailers or
/// the end. The client's own failure goes to `failed` (and the stream is cancelled: the sender
/// is dropped before the end).
async fn pump(body: UpBody, mut tx: sluice_client::MuxSender, failed: tokio::sync::oneshot::Sender<BodyError>) {
    use http_body::Body as _;
    let mut body = std::pin::pin!(body);
    loop {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            None => {
                let _ = tx.send_data(bytes::Bytes::new(), true).await;
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => {
                    if tx.send_data(d, false).await.is_err() {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        let list = t
                            .iter()
                            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                            .collect();
                        let _ = tx.send_trailers(list);
                    }
                    return;
                }
            },
            Some(Err(e)) => {
                let _ = failed.send(e);
                return;
            }
        }
    }
}
