//! The two bodies of a proxied exchange. [`UpBody`] hands the client's request body to hyper
//! chunk by chunk: a chunk is taken from the client only when hyper asks for the next, so
//! HTTP/2 and HTTP/3 credit goes back to the client as the upstream accepts bytes.
//! [`UpstreamBody`] is read by the client's protocol driver only as the client takes the
//! response (the bounded per-stream send queue), so a slow client holds the upstream back
//! instead of buffering the response.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};

use crate::message::{BodyError, BodySource, RequestBody};

type Next = Pin<Box<dyn Future<Output = (Box<RequestBody>, Option<Result<Bytes, BodyError>>)> + Send>>;

enum UpState {
    /// Boxed: a `RequestBody` is about 200 bytes, and an `UpBody` lives in every proxied
    /// request's future (a request without a body is `Done` and allocates nothing).
    Idle(Box<RequestBody>),
    Reading(Next),
    Done,
}

/// A request body for hyper's client, pulled from the client's [`RequestBody`].
pub(crate) struct UpBody {
    state: UpState,
    len: Option<u64>,
    /// Told when the body has been handed over in full (the response-head timer starts then).
    done: Option<tokio::sync::watch::Sender<bool>>,
}

impl UpBody {
    /// No body.
    pub(crate) fn empty() -> Self {
        Self { state: UpState::Done, len: Some(0), done: None }
    }

    /// The client's body; `len` its declared length, when it has one.
    pub(crate) fn stream(body: RequestBody, len: Option<u64>, done: tokio::sync::watch::Sender<bool>) -> Self {
        Self { state: UpState::Idle(Box::new(body)), len, done: Some(done) }
    }

    fn finished(&mut self) {
        self.state = UpState::Done;
        if let Some(d) = self.done.take() {
            let _ = d.send(true);
        }
    }
}

impl http_body::Body for UpBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            match std::mem::replace(&mut self.state, UpState::Done) {
                UpState::Done => {
                    self.finished();
                    return Poll::Ready(None);
                }
                UpState::Idle(mut b) => {
                    // One boxed future per chunk (up to 64 KiB): `RequestBody::chunk` is async.
                    self.state = UpState::Reading(Box::pin(async move {
                        let c = b.chunk().await;
                        (b, c)
                    }));
                }
                UpState::Reading(mut next) => match next.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = UpState::Reading(next);
                        return Poll::Pending;
                    }
                    Poll::Ready((b, Some(Ok(d)))) => {
                        self.state = UpState::Idle(b);
                        return Poll::Ready(Some(Ok(Frame::data(d))));
                    }
                    Poll::Ready((_, Some(Err(e)))) => {
                        self.finished();
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Ready((b, None)) => {
                        self.finished();
                        // Only what may be a trailer goes on (RFC 9110 §6.5.1), whichever protocol
                        // the client sent it over.
                        return Poll::Ready(b.trailers().map(|mut t| {
                            sluice_http::forward::strip_forbidden_trailers(&mut t);
                            Ok(Frame::trailers(t))
                        }));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, UpState::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Where an upstream response's body comes from.
pub(crate) enum Source {
    /// An HTTP/1.1 exchange of our own client (its connection goes back to the pool at the end).
    H1(Box<super::h1::Exchange>),
    /// A stream of the server's shared HTTP/2 connection.
    H2(Box<H2Body>),
}

/// A response body on a stream of a shared HTTP/2 connection.
pub(crate) struct H2Body {
    rx: sluice_client::MuxReceiver,
    /// The `content-length` the head declared.
    len: Option<u64>,
    ended: bool,
}

impl H2Body {
    /// The body of the response whose head `rx` gave (`len`: its declared length; `ended`: the
    /// head ended the stream).
    pub(crate) fn new(rx: sluice_client::MuxReceiver, len: Option<u64>, ended: bool) -> Self {
        Self { rx, len, ended }
    }
}

impl Source {
    /// Whether the body has been read to its end (or there is none).
    pub(crate) fn is_end_stream(&self) -> bool {
        match self {
            Self::H1(x) => x.is_end_stream(),
            Self::H2(b) => b.ended,
        }
    }

    fn len(&self) -> Option<u64> {
        match self {
            Self::H1(x) => x.len(),
            Self::H2(b) => b.len,
        }
    }

    /// The next frame: data, or (at the end) trailers.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, String>>> {
        match self {
            Self::H1(x) => match std::task::ready!(x.poll_data(cx)) {
                Some(Ok(d)) => Poll::Ready(Some(Ok(Frame::data(d)))),
                Some(Err(e)) => Poll::Ready(Some(Err(e.to_string()))),
                None => Poll::Ready(x.take_trailers().map(|t| Ok(Frame::trailers(t)))),
            },
            Self::H2(b) => loop {
                use sluice_client::StreamEvent;
                return match std::task::ready!(b.rx.poll_event(cx)) {
                    Some(StreamEvent::Data { data, end_stream }) => {
                        // Handed on to the client's bounded send queue: the upstream may send
                        // as much again.
                        b.rx.release(data.len());
                        b.ended |= end_stream;
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Some(StreamEvent::Trailers(fields)) => {
                        b.ended = true;
                        Poll::Ready(Some(Ok(Frame::trailers(to_map(&fields)))))
                    }
                    Some(StreamEvent::Reset(e)) => Poll::Ready(Some(Err(e.to_string()))),
                    // Heads come before the body; nothing else follows.
                    Some(StreamEvent::Interim { .. } | StreamEvent::Head { .. }) => continue,
                    None => {
                        b.ended = true;
                        Poll::Ready(None)
                    }
                };
            },
        }
    }
}

/// Fields from the HTTP/2 client (lower-case names) as a map; a field `http` refuses is left out
/// (the engine checked them as RFC 9113 §8.2 asks).
pub(crate) fn to_map(fields: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(fields.len());
    for (n, v) in fields {
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(n.as_bytes()), http::HeaderValue::from_str(v)) {
            map.append(n, v);
        }
    }
    map
}

/// Scans an HTML response's `<head>` for hints as it streams by, then stores them.
pub(crate) struct Learner {
    up: std::sync::Arc<super::Upstream>,
    key: String,
    scanner: super::hints::HeadScanner,
}

impl Learner {
    pub(crate) fn new(up: std::sync::Arc<super::Upstream>, key: String) -> Self {
        Self { up, key, scanner: super::hints::HeadScanner::default() }
    }

    /// Take body bytes; true when done.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> bool {
        self.scanner.feed(chunk)
    }

    /// Store what was found (nothing: the entry goes).
    pub(crate) fn finish(self) {
        self.up.hints.learn(&self.key, self.scanner.links(), std::time::Instant::now());
    }
}

/// A response body read from an upstream.
pub(crate) struct UpstreamBody {
    body: Source,
    len: Option<u64>,
    rest: Bytes,
    trailers: Option<HeaderMap>,
    ended: bool,
    idle: Duration,
    /// Armed while a read waits for the upstream: a body that stalls longer than `idle` is an
    /// error. Made at the first wait and reset for later ones (most small bodies never wait).
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the stall timer runs for the current wait.
    waiting: bool,
    /// Whether trailers may follow: a body without a declared length, or from an HTTP/2
    /// upstream (which may send trailers after a declared length too).
    may_trail: bool,
    /// Held until the body is dropped: the server's count of requests in progress.
    _active: super::Active,
    upstream: std::sync::Arc<str>,
    /// Learning 103 hints from the document's head, while it lasts.
    pub(crate) learner: Option<Learner>,
}

impl UpstreamBody {
    pub(crate) fn new(
        body: Source,
        idle: Duration,
        active: super::Active,
        upstream: std::sync::Arc<str>,
        h2: bool,
    ) -> Self {
        let len = body.len();
        let may_trail = len.is_none() || h2;
        Self {
            body,
            len,
            rest: Bytes::new(),
            trailers: None,
            ended: false,
            idle,
            stall: None,
            waiting: false,
            may_trail,
            _active: active,
            upstream,
            learner: None,
        }
    }

    /// The body is complete: what was learned is stored. (An HTTP/1.1 exchange has already
    /// given its connection back.)
    fn end(&mut self) {
        self.ended = true;
        if let Some(l) = self.learner.take() {
            l.finish();
        }
    }

    /// Whether the upstream has stalled past the idle timeout, for a read that found nothing.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = tokio::time::Instant::now() + self.idle;
        let timer = match &mut self.stall {
            Some(t) => {
                if !self.waiting {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self.stall.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.waiting = true;
        timer.as_mut().poll(cx).is_ready()
    }
}

impl BodySource for UpstreamBody {
    /// An upstream that fails or stalls longer than the idle timeout is an error (the client's
    /// stream is reset).
    fn poll_chunk(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<Option<std::io::Result<Bytes>>> {
        loop {
            if !self.rest.is_empty() {
                let n = self.rest.len().min(max);
                return Poll::Ready(Some(Ok(self.rest.split_to(n))));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            let frame = match self.body.poll_frame(cx) {
                Poll::Pending => {
                    if self.stalled(cx) {
                        tracing::warn!(upstream = %self.upstream, "upstream response body stalled past idle_secs: client stream reset");
                        self.ended = true;
                        return Poll::Ready(Some(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "upstream body stalled",
                        ))));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(f) => f,
            };
            self.waiting = false;
            match frame {
                None => {
                    self.end();
                    return Poll::Ready(None);
                }
                Some(Err(e)) => {
                    tracing::warn!(upstream = %self.upstream, %e, "upstream response body failed: client stream reset");
                    self.ended = true;
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        if self.learner.as_mut().is_some_and(|l| l.feed(&d)) {
                            if let Some(l) = self.learner.take() {
                                l.finish();
                            }
                        }
                        self.rest = d;
                        // The last bytes of a declared length: the exchange is over now (a
                        // reader that stops at the length never polls for the end).
                        if self.body.is_end_stream() && !self.may_trail {
                            self.end();
                        }
                    }
                    Err(f) => {
                        if let Ok(mut t) = f.into_trailers() {
                            sluice_http::forward::strip_forbidden_trailers(&mut t);
                            self.trailers = Some(t);
                        }
                    }
                },
            }
        }
    }

    fn len(&self) -> Option<u64> {
        self.len
    }

    fn may_trail(&self) -> bool {
        self.may_trail
    }

    fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take()
    }
}
