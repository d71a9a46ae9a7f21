//! The proxy's HTTP/1.1 client: one exchange at a time on a connection the pool owns between
//! exchanges. The messages are written and read by `sluice_http::h1` (sans-IO); this driver
//! owns the socket and its read buffer.
//!
//! An [`Exchange`] is full duplex, as HTTP/1.1 allows: the request body keeps going while the
//! response head and body are read (an upstream may answer early or stream its answer while
//! it reads), all polled from the task that reads the response — no connection task and no
//! channel between the request and the socket. The connection goes back to the pool when the
//! response has been read to its end, the whole request was sent, the upstream keeps the
//! connection open and nothing extra was received; otherwise it is closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode};
use sluice_http::h1::{self as wire, Chunk, ChunkedDecoder, Framing, ResponseHead};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::body::UpBody;
use super::connect::{Io, MAX_RESPONSE_HEAD};
use crate::message::BodyError;

/// Read buffer for heads and small bodies; a body still to come grows reads to [`BIG_READ`].
const SMALL_READ: usize = 8 * 1024;
const BIG_READ: usize = 64 * 1024;
/// Body pieces up to this size are copied out of the read buffer, which then stays unshared
/// and is reused; larger ones are split off it.
const COPY_MAX: usize = 4 * 1024;

/// An HTTP/1.1 connection to an upstream server, between exchanges.
pub(crate) struct Conn {
    io: Box<dyn Io>,
    buf: BytesMut,
    /// The write buffer, kept from exchange to exchange.
    out: Vec<u8>,
    /// It carried an exchange before (a failure before any answer may be a stale close).
    pub(crate) reused: bool,
    /// The response-head timer, kept from exchange to exchange: a new timer per exchange was
    /// an insertion into tokio's timer wheel and a removal, each under its lock (about 2 % of
    /// a small proxied response's instructions). It is moved only when it would fire too late
    /// for an exchange (see `proxy::head_timer`). While the connection sits idle, the timer may
    /// still hold the last exchange's waker; it is replaced at the next poll, or dropped when
    /// the timer fires.
    pub(crate) head_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    _open: Option<OpenCount>,
}

/// One of a server's open connections, counted while it lives.
struct OpenCount(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl Drop for OpenCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Conn {
    pub(crate) fn new(io: Box<dyn Io>, slot: Option<tokio::sync::OwnedSemaphorePermit>) -> Self {
        Self { io, buf: BytesMut::new(), out: Vec::new(), reused: false, head_timer: None, _slot: slot, _open: None }
    }

    /// The same, counted in `open` while it lives (its server's open connections).
    pub(crate) fn counted(mut self, open: std::sync::Arc<std::sync::atomic::AtomicI64>) -> Self {
        open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self._open = Some(OpenCount(open));
        self
    }

    /// Whether an idle connection can take a request: nothing has arrived on it, not even
    /// the end of the stream (an upstream that closed an idle connection).
    pub(crate) fn looks_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut rb = tokio::io::ReadBuf::new(&mut byte);
        Pin::new(&mut self.io).poll_read(&mut cx, &mut rb).is_pending()
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The connection failed (reading, or writing with no answer to read).
    Io(std::io::Error),
    /// The upstream closed the connection before a whole response head.
    Closed,
    /// The response could not be read.
    Wire(wire::Error),
    /// The body was cut short: the connection closed before its declared end.
    Truncated,
    /// The client's request body failed.
    Client(BodyError),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "upstream connection: {e}"),
            Self::Closed => f.write_str("the upstream closed the connection before a complete response head"),
            Self::Wire(e) => write!(f, "{e}"),
            Self::Truncated => f.write_str("the upstream closed the connection before the end of the body"),
            Self::Client(e) => write!(f, "request body: {e}"),
        }
    }
}

/// A failed start: why, and the request body when none of it was taken.
pub(crate) struct StartFail {
    pub(crate) fail: Fail,
    pub(crate) back: Option<UpBody>,
    /// Whether any byte of the response arrived.
    pub(crate) answered: bool,
}

/// Writes a request's line and fields into the write buffer (the framing field and the empty
/// line are the exchange's).
pub(crate) type WriteHead<'a> = &'a (dyn Fn(&mut Vec<u8>) + Sync);

/// Where a finished connection goes back to.
pub(crate) struct Home {
    pub(crate) up: Arc<super::Upstream>,
    pub(crate) server: usize,
    /// How long it may sit idle; zero: it is not kept.
    pub(crate) keep: Duration,
}

/// One request and its response on a connection.
pub(crate) struct Exchange {
    conn: Option<Conn>,
    /// The request body still to send (`None`: all of it is in `out` or sent).
    body: Option<UpBody>,
    /// Whether the body was ever polled (else it can go back for a retry).
    body_touched: bool,
    chunked: bool,
    /// With a declared length, the body bytes still owed: the upstream gets exactly that many
    /// (more would be read as another request on the connection).
    req_left: u64,
    out: Vec<u8>,
    at: usize,
    wrote_any: bool,
    unflushed: bool,
    /// A write failed: the rest of the request is dropped; the answer may still be read.
    write_failed: Option<std::io::Error>,
    answered: bool,
    /// The response body.
    framing: Framing,
    left: u64,
    chunks: ChunkedDecoder,
    complete: bool,
    persistent: bool,
    home: Option<Home>,
    /// The request's trailer section, once the body has given it.
    req_trailers: Option<HeaderMap>,
    /// The response's, once its body has ended.
    trailers: Option<HeaderMap>,
}

impl Exchange {
    /// An exchange on `conn` with its request head written (`head` writes the request line
    /// and fields; `length`: the `Content-Length` they hold) and `body` to follow (with a
    /// length its bytes go as they are, exactly that many, else chunked). Boxed from the
    /// start: the exchange outlives the future that reads the head (it goes on as the
    /// response body), and moving it between futures cost more than the allocation.
    pub(crate) fn new(
        mut conn: Conn,
        method: &Method,
        head: WriteHead<'_>,
        length: Option<u64>,
        body: UpBody,
    ) -> Box<Self> {
        use http_body::Body as _;
        // A body that declared bytes is read even if it says it has none: its end is checked.
        let empty = body.is_end_stream() && length.unwrap_or(0) == 0;
        let framing = if empty {
            wire::RequestBody::Empty
        } else if length.is_some() {
            wire::RequestBody::Length
        } else {
            wire::RequestBody::Chunked
        };
        let mut out = std::mem::take(&mut conn.out);
        out.clear();
        head(&mut out);
        wire::end_head(method, framing, length.is_some(), &mut out);
        Box::new(Self {
            conn: Some(conn),
            body: (!empty).then_some(body),
            body_touched: false,
            chunked: framing == wire::RequestBody::Chunked,
            req_left: length.unwrap_or(0),
            out,
            at: 0,
            wrote_any: false,
            unflushed: false,
            write_failed: None,
            answered: false,
            framing: Framing::Empty,
            left: 0,
            chunks: ChunkedDecoder::new(MAX_RESPONSE_HEAD),
            complete: false,
            persistent: false,
            home: None,
            req_trailers: None,
            trailers: None,
        })
    }

    /// Sends the request as the upstream takes it and reads interim responses (each given to
    /// `interim`) up to the final response head to a request made with `method`. The body
    /// goes on sending after that.
    pub(crate) async fn read_head(
        &mut self,
        method: &Method,
        interim: &mut (dyn FnMut(StatusCode, &HeaderMap) + Send),
    ) -> Result<ResponseHead, StartFail> {
        let head = std::future::poll_fn(|cx| self.poll_head(cx, interim)).await;
        match head {
            Ok(mut head) => {
                self.framing = wire::framing(method, &mut head).map_err(|e| self.fail(Fail::Wire(e)))?;
                self.left = match self.framing {
                    Framing::Length(n) => n,
                    _ => 0,
                };
                self.persistent = wire::persistent(&head) && self.framing != Framing::Close;
                if self.framing == Framing::Empty || self.framing == Framing::Length(0) {
                    self.complete = true;
                }
                Ok(head)
            }
            Err(f) => Err(self.fail(f)),
        }
    }

    fn fail(&mut self, fail: Fail) -> StartFail {
        let back = if self.body_touched || self.wrote_any { None } else { self.body.take() };
        StartFail { fail, back, answered: self.answered }
    }

    fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("an exchange holds its connection until it ends")
    }

    /// Request progress: writes what is queued and takes the next piece of the body.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Result<(), Fail> {
        use http_body::Body as _;
        while self.write_failed.is_none() {
            if self.at < self.out.len() {
                let (out, at) = (&self.out, self.at);
                let io = &mut self.conn.as_mut().expect("connection").io;
                match Pin::new(io).poll_write(cx, &out[at..]) {
                    Poll::Ready(Ok(0)) => self.write_failed = Some(std::io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => {
                        self.at += n;
                        self.wrote_any = true;
                        self.unflushed = true;
                    }
                    Poll::Ready(Err(e)) => self.write_failed = Some(e),
                    Poll::Pending => return Ok(()),
                }
                continue;
            }
            self.out.clear();
            self.at = 0;
            if self.unflushed {
                match Pin::new(&mut self.conn().io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(e)) => self.write_failed = Some(e),
                    Poll::Pending => return Ok(()),
                }
                continue;
            }
            let Some(body) = self.body.as_mut() else { return Ok(()) };
            self.body_touched = true;
            match Pin::new(body).poll_frame(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(d) if self.chunked => wire::encode_chunk(&d, &mut self.out),
                    Ok(d) if d.len() as u64 <= self.req_left => {
                        self.req_left -= d.len() as u64;
                        self.out.extend_from_slice(&d);
                    }
                    Ok(_) => {
                        self.body = None;
                        return Err(Fail::Client(BodyError::Other(
                            "request body longer than its content-length".into(),
                        )));
                    }
                    Err(f) => self.req_trailers = f.into_trailers().ok(),
                },
                Poll::Ready(None) => {
                    self.body = None;
                    if self.chunked {
                        wire::encode_last_chunk(self.req_trailers.take().as_ref(), &mut self.out);
                    } else if self.req_left > 0 {
                        return Err(Fail::Client(BodyError::Other(
                            "request body shorter than its content-length".into(),
                        )));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.body = None;
                    return Err(Fail::Client(e));
                }
            }
        }
        // The upstream stopped taking the request: drop the rest, read what it answers.
        self.body = None;
        Ok(())
    }

    /// Whether the whole request went out.
    fn sent(&self) -> bool {
        self.body.is_none() && self.out.is_empty() && !self.unflushed && self.write_failed.is_none()
    }

    /// Reads more of the response into the buffer: the number of bytes, 0 at the end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, Fail>> {
        let big = matches!(self.framing, Framing::Chunked | Framing::Close) || self.left > SMALL_READ as u64;
        let conn = self.conn.as_mut().expect("connection");
        let want = if big { BIG_READ } else { SMALL_READ };
        if conn.buf.capacity() - conn.buf.len() < want / 4 {
            conn.buf.reserve(want);
        }
        let read = std::pin::pin!(conn.io.read_buf(&mut conn.buf));
        match read.poll(cx) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.answered = true;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(Fail::Io(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        interim: &mut (dyn FnMut(StatusCode, &HeaderMap) + Send),
    ) -> Poll<Result<ResponseHead, Fail>> {
        loop {
            let buf = &mut self.conn().buf;
            if !buf.is_empty() {
                match wire::parse_response(buf, MAX_RESPONSE_HEAD) {
                    // 101 is final: the connection changes protocol.
                    Ok(Some(head))
                        if head.status.is_informational() && head.status != StatusCode::SWITCHING_PROTOCOLS =>
                    {
                        interim(head.status, &head.to_map());
                        continue;
                    }
                    Ok(Some(head)) => return Poll::Ready(Ok(head)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(Fail::Wire(e))),
                }
            }
            self.poll_send(cx)?;
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(match self.write_failed.take() {
                        Some(e) => Fail::Io(e),
                        None => Fail::Closed,
                    }));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Give the response-head timer back to the connection, for its next exchange.
    pub(crate) fn keep_head_timer(&mut self, timer: Pin<Box<tokio::time::Sleep>>) {
        if let Some(c) = self.conn.as_mut() {
            c.head_timer = Some(timer);
        }
    }

    /// Where the connection goes when the exchange ends well.
    pub(crate) fn set_home(&mut self, home: Home) {
        self.home = Some(home);
        if self.complete {
            self.finish();
        }
    }

    /// Whether the response body has been read to its end.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.complete
    }

    /// The declared length of the response body.
    pub(crate) fn len(&self) -> Option<u64> {
        match self.framing {
            Framing::Empty => Some(0),
            Framing::Length(n) => Some(n),
            Framing::Chunked | Framing::Close => None,
        }
    }

    /// The response's trailer section, once the body has ended.
    pub(crate) fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take()
    }

    /// The response is complete: the connection goes back to the pool if it can carry
    /// another exchange (once the request too has gone out in full), else closes. A request
    /// body still being sent is given a moment to finish.
    fn finish(&mut self) {
        self.complete = true;
        let Some(home) = self.home.take() else { return };
        if home.keep.is_zero() || !self.persistent {
            self.conn = None;
            return;
        }
        // Push out what the request still has ready, without waiting.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let _ = self.poll_send(&mut cx);
        match self.conn.take() {
            Some(mut conn) if self.sent() && conn.buf.is_empty() => {
                conn.reused = false;
                conn.out = std::mem::take(&mut self.out);
                // An idle connection keeps small buffers only (a large body grew them).
                if conn.buf.capacity() > 2 * SMALL_READ {
                    conn.buf = BytesMut::new();
                }
                if conn.out.capacity() > 2 * SMALL_READ {
                    conn.out = Vec::new();
                }
                home.up.put_back(home.server, conn, home.keep);
            }
            _ => {}
        }
    }

    fn take(buf: &mut BytesMut, n: usize) -> Bytes {
        if n <= COPY_MAX {
            let b = Bytes::copy_from_slice(&buf[..n]);
            buf.advance(n);
            b
        } else {
            buf.split_to(n).freeze()
        }
    }

    /// The next piece of the response body; `None` at its end (trailers then in
    /// [`Exchange::take_trailers`]).
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Fail>>> {
        loop {
            if self.complete {
                return Poll::Ready(None);
            }
            let buf = &mut self.conn.as_mut().expect("connection").buf;
            match self.framing {
                Framing::Empty => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Framing::Length(left) if !buf.is_empty() => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = Self::take(buf, n);
                    self.left = left - n as u64;
                    self.framing = Framing::Length(self.left);
                    if self.left == 0 {
                        // The last bytes: the exchange is over now (a reader that stops at the
                        // declared length never asks for the end).
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                Framing::Chunked if !buf.is_empty() => match self.chunks.decode(buf) {
                    Ok(Chunk::Data(n)) => return Poll::Ready(Some(Ok(Self::take(buf, n)))),
                    Ok(Chunk::End(t)) => {
                        self.trailers = t;
                        self.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Chunk::NeedMore) => {}
                    Err(e) => return Poll::Ready(Some(Err(Fail::Wire(e)))),
                },
                Framing::Close if !buf.is_empty() => {
                    let n = buf.len();
                    return Poll::Ready(Some(Ok(Self::take(buf, n))));
                }
                _ => {}
            }
            if let Err(e) = self.poll_send(cx) {
                return Poll::Ready(Some(Err(e)));
            }
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) if self.framing == Framing::Close => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(0)) => return Poll::Ready(Some(Err(Fail::Truncated))),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The whole body at once, when it has a declared length of at most `max` bytes and all
    /// of it has already arrived (a small response usually comes in one read with its head):
    /// the exchange ends here and the connection goes back to the pool before the client has
    /// taken a byte.
    pub(crate) fn take_whole(&mut self, max: u64) -> Option<Bytes> {
        let Framing::Length(n) = self.framing else { return None };
        let buf = &mut self.conn.as_mut()?.buf;
        if self.complete || n > max || (buf.len() as u64) < n {
            return None;
        }
        let data = Self::take(buf, n as usize);
        self.left = 0;
        self.framing = Framing::Length(0);
        self.finish();
        Some(data)
    }

    /// After a 101: the connection and what already arrived on it, for a tunnel.
    pub(crate) fn into_upgraded(mut self) -> Option<(Box<dyn Io>, Bytes)> {
        let conn = self.conn.take()?;
        Some((conn.io, conn.buf.freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::RequestBody;
    use tokio::io::AsyncWriteExt;

    /// A body that yields `chunks` and ends.
    fn body(chunks: &[&'static [u8]], len: Option<u64>) -> UpBody {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for c in chunks {
            tx.send(Ok(Bytes::from_static(c))).unwrap();
        }
        drop(tx);
        let (done, _) = tokio::sync::watch::channel(false);
        UpBody::stream(RequestBody::channel(rx, None), len, done)
    }

    /// Runs one exchange against an upstream that reads for a moment, then answers `answer`;
    /// what the exchange gave and every byte the upstream received.
    async fn run(
        chunks: &[&'static [u8]],
        length: Option<u64>,
        answer: &'static [u8],
    ) -> (Result<(u16, Vec<u8>), String>, Vec<u8>) {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let upstream = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), tokio::io::AsyncReadExt::read(&mut theirs, &mut buf))
                    .await
            {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            let _ = theirs.write_all(answer).await;
            // Held open a moment: the exchange reads the answer, not an early close.
            tokio::time::sleep(Duration::from_millis(100)).await;
            got
        });
        let conn = Conn::new(Box::new(ours), None);
        let head = |out: &mut Vec<u8>| {
            wire::request_line(&Method::POST, "/up", out);
            if let Some(n) = length {
                wire::field(out, b"content-length", n.to_string().as_bytes());
            }
        };
        let mut interim = |_, _: &HeaderMap| {};
        let mut ex = Exchange::new(conn, &Method::POST, &head, length, body(chunks, length));
        let result = match ex.read_head(&Method::POST, &mut interim).await {
            Ok(h) => {
                let mut data = Vec::new();
                while let Some(d) = std::future::poll_fn(|cx| ex.poll_data(cx)).await {
                    data.extend_from_slice(&d.map_err(|e| e.to_string()).unwrap());
                }
                Ok((h.status.as_u16(), data))
            }
            Err(f) => Err(f.fail.to_string()),
        };
        (result, upstream.await.unwrap())
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn a_declared_length_goes_as_it_is_and_exactly() {
        let (r, got) = run(&[b"hel", b"lo"], Some(5), OK).await;
        assert_eq!(r, Ok((200, b"ok".to_vec())));
        assert_eq!(got, b"POST /up HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello");
        // More bytes than declared never reach the upstream (they would be a second request).
        let (r, got) = run(&[b"hello", b"GET /smuggled HTTP/1.1\r\n\r\n"], Some(5), OK).await;
        assert!(r.as_ref().is_err_and(|e| e.contains("longer than its content-length")), "{r:?}");
        assert_eq!(got, b"POST /up HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello");
        // Fewer: an error, not an upstream left waiting.
        let (r, _) = run(&[b"hel"], Some(5), OK).await;
        assert!(r.as_ref().is_err_and(|e| e.contains("shorter than its content-length")), "{r:?}");
    }

    #[tokio::test]
    async fn a_body_without_a_length_goes_chunked() {
        let (r, got) = run(&[b"hello", b"", b"world!"], None, OK).await;
        assert_eq!(r, Ok((200, b"ok".to_vec())));
        assert_eq!(
            got,
            b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_chunked_answer_is_read_whole_and_one_cut_short_is_an_error() {
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (r, _) = run(&[], None, chunked).await;
        assert_eq!(r, Ok((200, b"abcde".to_vec())));
        // Cut short: the body is an error, never a clean end.
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let _ = theirs.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc").await;
            let mut sink = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut theirs, &mut sink).await;
        });
        let head = |out: &mut Vec<u8>| wire::request_line(&Method::GET, "/", out);
        let mut interim = |_, _: &HeaderMap| {};
        let mut ex = Exchange::new(Conn::new(Box::new(ours), None), &Method::GET, &head, None, UpBody::empty());
        let h = ex.read_head(&Method::GET, &mut interim).await.map_err(|f| f.fail.to_string()).unwrap();
        assert_eq!(h.status, 200);
        let first = std::future::poll_fn(|cx| ex.poll_data(cx)).await;
        assert_eq!(first.unwrap().unwrap(), Bytes::from_static(b"abc"));
        let next = std::future::poll_fn(|cx| ex.poll_data(cx)).await;
        assert!(matches!(next, Some(Err(Fail::Truncated))), "{next:?}");
    }
}
