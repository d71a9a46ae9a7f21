//! One HTTP/2 connection shared by many requests at once, each from its own task: a driver
//! task runs the client engine (`sluice_h2::client`) over the connection, and requests talk
//! to it through channels. The reverse proxy's `h2` and `h2c` upstreams run on it, as `sluice
//! get`'s shared connections run on the same engine ([`crate::H2Conn`]).
//!
//! Why not hyper's client: it drops interim responses (a 103 from an HTTP/2 upstream never
//! reached the proxy's client), and the engine here is the one the server's is tested against.
//!
//! Both directions are bounded. A request body waits ([`MuxSender::send_data`]) while more
//! than [`MuxConfig::send_buffer`] of it is queued in the engine; a response's credit goes
//! back to the server only as the reader [`MuxReceiver::release`]s what it consumed, so a
//! reader that does not keep up (a proxy whose client is slow) holds the server back by one
//! stream window, not the whole response.
//!
//! Every request ends in an event: the response's end, or a reset that says whether the
//! server processed it ([`MuxError::Refused`]: not processed, safe to send again, RFC 9113
//! §8.7). A connection that breaks resets every request on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_h2::client::{Client, ClientConfig, ClientEvent, Request, RequestError};
use sluice_h2::{Error, Initiator, Reason};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

/// A byte stream an HTTP/2 connection runs over (TLS with `h2` agreed, or cleartext h2c).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Bytes read from the connection at a time.
const READ_CHUNK: usize = 64 * 1024;

/// What a shared connection announces and holds.
#[derive(Clone, Copy, Debug)]
pub struct MuxConfig {
    /// The engine's windows and limits (credit is always released by the reader here).
    pub engine: ClientConfig,
    /// Request body bytes one stream may have queued in the engine before its sender waits.
    pub send_buffer: usize,
}

impl Default for MuxConfig {
    fn default() -> Self {
        // Windows that bound what one response (1 MiB) and the connection (4 MiB) buffer ahead
        // of a slow reader, as the proxy's hyper client had them.
        let engine = ClientConfig { stream_window: 1 << 20, connection_window: 4 << 20, ..ClientConfig::default() };
        Self { engine, send_buffer: 256 * 1024 }
    }
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MuxError {
    /// The connection takes no requests (closed, failed, or it sent GOAWAY): the request did
    /// not go out.
    Closed(String),
    /// The server refused the stream without processing it (REFUSED_STREAM, or above its
    /// GOAWAY's last stream): safe to send again.
    Refused,
    /// The stream was reset: by the server (`remote`), or by us for its protocol error.
    Reset {
        /// The RFC 9113 §7 code.
        code: u32,
        /// The server reset it.
        remote: bool,
        /// Why.
        detail: String,
    },
    /// The connection broke while the request was in progress.
    Broken(String),
    /// No stream could be opened within the time given: every one the server allows is busy.
    Busy,
}

impl std::fmt::Display for MuxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed(why) => write!(f, "the HTTP/2 connection is closed: {why}"),
            Self::Refused => f.write_str("the server refused the stream (not processed)"),
            Self::Reset { code, remote: true, detail } => {
                write!(f, "stream reset by the server: {} {detail}", Reason(*code))
            }
            Self::Reset { code, remote: false, detail } => write!(f, "stream reset: {} {detail}", Reason(*code)),
            Self::Broken(why) => write!(f, "the HTTP/2 connection broke: {why}"),
            Self::Busy => f.write_str("every stream of the HTTP/2 connection is busy"),
        }
    }
}

impl std::error::Error for MuxError {}

/// What happens on one request's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// An interim response (1xx other than 101), before the final one.
    Interim {
        /// 100 to 199.
        status: u16,
        /// Its fields, names lower case.
        fields: Vec<(String, String)>,
    },
    /// The final response head.
    Head {
        /// The status.
        status: u16,
        /// Its fields, names lower case.
        fields: Vec<(String, String)>,
        /// The response has no body.
        end_stream: bool,
    },
    /// Response body bytes (release them once consumed).
    Data {
        /// The bytes.
        data: Bytes,
        /// The last of the body.
        end_stream: bool,
    },
    /// The response's trailers: it is complete.
    Trailers(Vec<(String, String)>),
    /// The stream ended without a complete response.
    Reset(MuxError),
}

enum Cmd {
    Open { head: OwnedRequest, end_stream: bool, reply: oneshot::Sender<Result<Opened, RequestError>> },
    Data { id: u32, data: Bytes, end_stream: bool },
    Trailers { id: u32, fields: Vec<(String, String)> },
    Release { id: u32, n: usize },
    Cancel { id: u32 },
}

/// A request head the driver can hold.
struct OwnedRequest {
    method: String,
    scheme: String,
    authority: String,
    path: String,
    fields: Vec<(String, String)>,
}

struct Opened {
    id: u32,
    events: mpsc::UnboundedReceiver<StreamEvent>,
    room: Arc<Semaphore>,
}

/// What the handles and the driver share.
struct Shared {
    cmds: mpsc::UnboundedSender<Cmd>,
    /// The connection takes no new requests.
    closed: AtomicBool,
    /// Why, once it is.
    why: std::sync::Mutex<String>,
    /// Requests in progress.
    open: AtomicUsize,
    /// A stream ended: a request waiting for room may try again.
    freed: Notify,
}

/// A shared HTTP/2 connection: cheap to clone, one per upstream server.
#[derive(Clone)]
pub struct H2Mux {
    shared: Arc<Shared>,
    send_buffer: usize,
}

impl H2Mux {
    /// Start the connection's driver on `io` (TLS done with `h2` agreed, or cleartext) and
    /// wait, within `timeout`, for the server's SETTINGS.
    pub async fn handshake(io: impl Io, cfg: MuxConfig, timeout: Duration) -> Result<Self, MuxError> {
        let engine_cfg = ClientConfig { release_on_read: false, ..cfg.engine };
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            cmds: tx,
            closed: AtomicBool::new(false),
            why: std::sync::Mutex::new(String::new()),
            open: AtomicUsize::new(0),
            freed: Notify::new(),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let engine = Client::new(engine_cfg, Instant::now());
        tokio::spawn(drive(Box::new(io), engine, rx, Arc::downgrade(&shared), cfg.send_buffer, ready_tx));
        match tokio::time::timeout(timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => Ok(Self { shared, send_buffer: cfg.send_buffer }),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(MuxError::Closed("the connection ended during the handshake".into())),
            Err(_) => Err(MuxError::Closed(format!("no HTTP/2 SETTINGS within {timeout:?}"))),
        }
    }

    /// Whether the connection may take new requests.
    pub fn is_open(&self) -> bool {
        !self.shared.closed.load(Ordering::Acquire)
    }

    /// Requests in progress.
    pub fn open_streams(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }

    /// Send a request head (the body follows on the sender unless `end_stream`), waiting up
    /// to `wait` for a stream while the server's SETTINGS_MAX_CONCURRENT_STREAMS are in use.
    pub async fn request(
        &self,
        req: &Request<'_>,
        end_stream: bool,
        wait: Duration,
    ) -> Result<(MuxSender, MuxReceiver), MuxError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if !self.is_open() {
                return Err(MuxError::Closed(self.why()));
            }
            // Registered before asking, so that a stream freed in between is not missed.
            let freed = self.shared.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let (reply, answer) = oneshot::channel();
            let head = OwnedRequest {
                method: req.method.to_owned(),
                scheme: req.scheme.to_owned(),
                authority: req.authority.to_owned(),
                path: req.path.to_owned(),
                fields: req.fields.iter().map(|&(n, v)| (n.to_owned(), v.to_owned())).collect(),
            };
            if self.shared.cmds.send(Cmd::Open { head, end_stream, reply }).is_err() {
                return Err(MuxError::Closed(self.why()));
            }
            match answer.await {
                Ok(Ok(o)) => {
                    let sender = MuxSender {
                        id: o.id,
                        cmds: self.shared.cmds.clone(),
                        room: o.room,
                        buffer: self.send_buffer,
                        ended: end_stream,
                    };
                    let receiver = MuxReceiver {
                        id: o.id,
                        cmds: self.shared.cmds.clone(),
                        events: o.events,
                        unreleased: 0,
                        done: false,
                    };
                    return Ok((sender, receiver));
                }
                Ok(Err(RequestError::TooManyStreams)) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(MuxError::Busy);
                    }
                }
                Ok(Err(e)) => return Err(MuxError::Closed(format!("{e:?}"))),
                Err(_) => return Err(MuxError::Closed(self.why())),
            }
        }
    }

    fn why(&self) -> String {
        let why = self.shared.why.lock().map(|w| w.clone()).unwrap_or_default();
        if why.is_empty() {
            "the connection is gone".into()
        } else {
            why
        }
    }
}

/// The request body's side of a stream.
pub struct MuxSender {
    id: u32,
    cmds: mpsc::UnboundedSender<Cmd>,
    room: Arc<Semaphore>,
    buffer: usize,
    ended: bool,
}

impl MuxSender {
    /// Queue body bytes (ending the body with `end_stream`), waiting while the stream has its
    /// buffer's worth queued in the engine. `Err` once the stream or the connection is gone.
    pub async fn send_data(&mut self, mut data: Bytes, end_stream: bool) -> Result<(), MuxError> {
        // In pieces of at most the buffer, each waiting for room for all of its bytes (the
        // driver gives room back byte for byte as the engine frames them).
        loop {
            let piece = data.split_to(data.len().min(self.buffer));
            let last = data.is_empty();
            if !piece.is_empty() {
                // Invariant: a piece is at most the buffer, far below u32::MAX.
                let n = u32::try_from(piece.len()).unwrap_or(u32::MAX);
                match self.room.acquire_many(n).await {
                    Ok(p) => p.forget(),
                    Err(_) => return Err(MuxError::Closed("the stream is gone".into())),
                }
            }
            let end = end_stream && last;
            self.ended |= end;
            self.cmds
                .send(Cmd::Data { id: self.id, data: piece, end_stream: end })
                .map_err(|_| MuxError::Closed("the connection is gone".into()))?;
            if last {
                return Ok(());
            }
        }
    }

    /// End the body with trailers (RFC 9113 §8.1).
    pub fn send_trailers(&mut self, fields: Vec<(String, String)>) -> Result<(), MuxError> {
        self.ended = true;
        self.cmds
            .send(Cmd::Trailers { id: self.id, fields })
            .map_err(|_| MuxError::Closed("the connection is gone".into()))
    }
}

impl Drop for MuxSender {
    /// A body dropped before its end (the client's body failed): the request is abandoned, so
    /// the server does not wait for the rest (RST_STREAM CANCEL).
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.cmds.send(Cmd::Cancel { id: self.id });
        }
    }
}

/// The response's side of a stream.
pub struct MuxReceiver {
    id: u32,
    cmds: mpsc::UnboundedSender<Cmd>,
    events: mpsc::UnboundedReceiver<StreamEvent>,
    /// Body bytes handed out and not released yet.
    unreleased: usize,
    /// The response is complete or reset.
    done: bool,
}

impl MuxReceiver {
    /// The next event; `None` once the response is over.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        let e = std::task::ready!(self.events.poll_recv(cx));
        match &e {
            Some(StreamEvent::Data { data, end_stream }) => {
                self.unreleased += data.len();
                self.done = *end_stream;
            }
            Some(StreamEvent::Head { end_stream: true, .. } | StreamEvent::Trailers(_) | StreamEvent::Reset(_))
            | None => {
                self.done = true;
            }
            _ => {}
        }
        Poll::Ready(e)
    }

    /// The next event; `None` once the response is over.
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// `n` body bytes were consumed: their credit may go back to the server.
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.unreleased);
        if n > 0 {
            self.unreleased -= n;
            let _ = self.cmds.send(Cmd::Release { id: self.id, n });
        }
    }
}

impl Drop for MuxReceiver {
    /// A response abandoned before its end: the request is cancelled (RST_STREAM CANCEL).
    /// What was handed out and not released goes back to the connection either way.
    fn drop(&mut self) {
        if self.unreleased > 0 {
            let _ = self.cmds.send(Cmd::Release { id: self.id, n: self.unreleased });
        }
        if !self.done {
            let _ = self.cmds.send(Cmd::Cancel { id: self.id });
        }
    }
}

/// The driver's view of one stream.
struct Route {
    events: mpsc::UnboundedSender<StreamEvent>,
    room: Arc<Semaphore>,
    /// Body bytes given to the engine and not yet framed (their room is held).
    queued: usize,
}

/// The connection's task: reads, writes, timers and commands, until the connection ends or
/// every handle is gone.
async fn drive(
    io: Box<dyn Io>,
    mut engine: Client,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    shared: std::sync::Weak<Shared>,
    send_buffer: usize,
    ready: oneshot::Sender<Result<(), MuxError>>,
) {
    let (mut rd, mut wr) = tokio::io::split(io);
    let mut routes: HashMap<u32, Route> = HashMap::new();
    let mut ready = Some(ready);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut out: Vec<u8> = Vec::new();
    let mut written = 0;
    let why = loop {
        // What the engine has to say and to send.
        while let Some(e) = engine.poll_event() {
            route(e, &mut routes, &mut ready);
        }
        if written == out.len() {
            out.clear();
            written = 0;
        }
        while let Some(b) = engine.poll_transmit() {
            out.extend_from_slice(&b);
        }
        // Room back for body bytes the engine framed; routes of streams the engine forgot go.
        let mut freed = false;
        routes.retain(|&id, r| match engine.buffered(id) {
            Some(left) => {
                if left < r.queued {
                    r.room.add_permits(r.queued - left);
                    r.queued = left;
                }
                true
            }
            None => {
                r.room.close();
                freed = true;
                false
            }
        });
        if let Some(s) = shared.upgrade() {
            s.open.store(routes.len(), Ordering::Release);
            if freed {
                s.freed.notify_waiters();
            }
            if !engine.accepts_requests() && !s.closed.swap(true, Ordering::AcqRel) {
                set_why(&s, "the server sent GOAWAY");
                s.freed.notify_waiters();
            }
        } else if routes.is_empty() {
            // Every handle is gone and nothing is in progress.
            break "no more users".to_owned();
        }
        let timer = engine.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    break if routes.is_empty() {
                        "the server closed the connection".to_owned()
                    } else {
                        "the connection closed with requests in progress".to_owned()
                    };
                }
                Ok(n) => {
                    if let Err(e) = engine.handle_input(Instant::now(), &buf[..n]) {
                        while let Some(e) = engine.poll_event() {
                            route(e, &mut routes, &mut ready);
                        }
                        // The GOAWAY the engine queued, on a best-effort basis.
                        while let Some(b) = engine.poll_transmit() {
                            out.extend_from_slice(&b);
                        }
                        let _ = tokio::time::timeout(Duration::from_millis(100), wr.write_all(&out[written..])).await;
                        break e.to_string();
                    }
                }
            },
            w = wr.write(&out[written..]), if written < out.len() => match w {
                Ok(0) | Err(_) => break "the connection broke while writing".to_owned(),
                Ok(n) => {
                    written += n;
                    if written == out.len() {
                        let _ = wr.flush().await;
                    }
                }
            },
            c = cmds.recv() => match c {
                Some(c) => apply(c, &mut engine, &mut routes, send_buffer),
                None => {
                    // Every handle is gone: requests in progress keep their routes until they end.
                    if routes.is_empty() {
                        break "no more users".to_owned();
                    }
                }
            },
            () = async {
                match timer {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Err(e) = engine.handle_timeout(Instant::now()) {
                    break e.to_string();
                }
            }
        }
    };
    // The end: every request in progress learns it, the handles see the connection closed.
    if let Some(r) = ready.take() {
        let _ = r.send(Err(MuxError::Closed(why.clone())));
    }
    for (_, r) in routes.drain() {
        let _ = r.events.send(StreamEvent::Reset(MuxError::Broken(why.clone())));
        r.room.close();
    }
    if let Some(s) = shared.upgrade() {
        set_why(&s, &why);
        s.closed.store(true, Ordering::Release);
        s.open.store(0, Ordering::Release);
        s.freed.notify_waiters();
    }
    let _ = wr.shutdown().await;
}

fn set_why(s: &Shared, why: &str) {
    if let Ok(mut w) = s.why.lock() {
        if w.is_empty() {
            why.clone_into(&mut w);
        }
    }
}

/// One engine event to its stream (or the handshake's waiter).
fn route(e: ClientEvent, routes: &mut HashMap<u32, Route>, ready: &mut Option<oneshot::Sender<Result<(), MuxError>>>) {
    let (id, ev) = match e {
        ClientEvent::Ready => {
            if let Some(r) = ready.take() {
                let _ = r.send(Ok(()));
            }
            return;
        }
        ClientEvent::Origin(_) | ClientEvent::GoAway { .. } => return,
        ClientEvent::Informational { stream, status, fields } => (stream, StreamEvent::Interim { status, fields }),
        ClientEvent::Response { stream, status, fields, end_stream } => {
            (stream, StreamEvent::Head { status, fields, end_stream })
        }
        ClientEvent::Data { stream, data, end_stream } => (stream, StreamEvent::Data { data, end_stream }),
        ClientEvent::Trailers { stream, fields } => (stream, StreamEvent::Trailers(fields)),
        ClientEvent::Reset { stream, error } => (stream, StreamEvent::Reset(reset_error(&error))),
    };
    if let Some(r) = routes.get(&id) {
        // A receiver dropped meanwhile: its cancel is on the way.
        let _ = r.events.send(ev);
    }
}

fn reset_error(e: &Error) -> MuxError {
    match e {
        Error::Stream { reason, .. } if *reason == Reason::REFUSED_STREAM => MuxError::Refused,
        Error::Stream { reason, initiator, detail, .. } => {
            MuxError::Reset { code: reason.0, remote: *initiator == Initiator::Remote, detail: (*detail).to_owned() }
        }
        other => MuxError::Broken(other.to_string()),
    }
}

/// One command from a handle.
fn apply(c: Cmd, engine: &mut Client, routes: &mut HashMap<u32, Route>, send_buffer: usize) {
    match c {
        Cmd::Open { head, end_stream, reply } => {
            let fields: Vec<(&str, &str)> = head.fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let req = Request {
                method: &head.method,
                scheme: &head.scheme,
                authority: &head.authority,
                path: &head.path,
                fields: &fields,
            };
            let opened = engine.send_request(&req, end_stream).map(|id| {
                let (tx, rx) = mpsc::unbounded_channel();
                let room = Arc::new(Semaphore::new(send_buffer));
                routes.insert(id, Route { events: tx, room: room.clone(), queued: 0 });
                Opened { id, events: rx, room }
            });
            if let Err(Ok(o)) = reply.send(opened) {
                // The requester gave up meanwhile.
                engine.cancel(o.id);
            }
        }
        Cmd::Data { id, data, end_stream } => {
            let n = data.len();
            if engine.send_data(id, data, end_stream).is_ok() {
                if let Some(r) = routes.get_mut(&id) {
                    r.queued += n;
                }
            }
        }
        Cmd::Trailers { id, fields } => {
            let list: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let _ = engine.send_trailers(id, &list);
        }
        Cmd::Release { id, n } => engine.release(id, n),
        Cmd::Cancel { id } => engine.cancel(id),
    }
}
