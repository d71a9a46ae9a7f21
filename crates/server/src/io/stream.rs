//! The stream layer the HTTP/2 and HTTP/3 drivers share: between one connection task (which
//! owns the engine) and the handler tasks of its streams.
//!
//! - **Commands**: a handler talks to the connection task through its stream's [`Shared`]
//!   state (the handler's [`Sink`]), which sends [`Cmd`]s (heads, interim heads included;
//!   data; trailers; failure; priority) on one channel per connection. The driver applies them
//!   to its engine through [`Engine`].
//! - **Send room**: each stream's handler may have at most [`STREAM_SEND_BUFFER`] bytes
//!   queued in the engine, and all streams of the process together at most
//!   `limits.send_buffer` ([`SendRoom`]); [`Streams::sent`] returns room as the engine frames
//!   bytes, so a handler blocks while its queue is full and resumes as frames go out.
//! - **Request-body credit**: request body chunks go to the handler through an unbounded
//!   channel whose size the protocol's flow control bounds; the driver's `on_consumed` callback
//!   runs as the handler takes each chunk (HTTP/2: a release command, so WINDOW_UPDATE follows
//!   consumption; HTTP/3: the stream's reader resumes).
//! - **Reset cleanup**: a reset stream's body reader gets an error, its room is released
//!   (waking a blocked handler, returning its share of the global budget) and its handler is
//!   dropped.
//!
//! Handlers are futures the connection task polls itself, not tasks of their own: the first
//! poll runs as the request arrives (most answers are ready at once: speed test, built-in site,
//! cached files, errors), and a handler that waits is woken through the command channel
//! ([`Cmd::Poll`]) and polled again at most once per trip of the connection task through the
//! scheduler ([`Streams::poll_ready`]). A task per waiting handler (a proxied request) cost its
//! spawn, a second poll right after it, and a scheduler trip for each wake-up on top of the
//! connection task's own: about a tenth of a proxied request's instructions. A plain GET or
//! HEAD for a cached small file needs no handler at all: [`answer_inline`] makes its answer
//! from the engine's head, and it goes to the engine at once, with no command and no stream
//! state.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use sluice_http::{Field, HeadFields, RequestHead};
use tokio::sync::mpsc;

use crate::app::respond::{answer_inline, run_handler, to_request, ConnInfo, Handled, Inline, SendRoom, Sink};
use crate::message::accesslog::Counters;
use crate::message::ExchangeRef;
use crate::message::{BodyError, Proto, RequestBody, TrailerSlot, CHUNK};
use crate::state::State;

/// Response bytes one stream may have queued in the engine and in flight to it: four chunks,
/// enough to keep a write full, small enough that priorities stay meaningful.
pub(crate) const STREAM_SEND_BUFFER: usize = 4 * CHUNK;

/// What a handler asks of the connection task. Stream ids are the engine's (HTTP/2's u32
/// widened).
#[derive(Debug)]
pub(crate) enum Cmd {
    /// A response head: interim (1xx) or final.
    Head { id: u64, status: u16, fields: HeadFields, end: bool },
    /// Body bytes.
    Data { id: u64, data: Bytes, end: bool },
    /// A final head and the whole body after it: [`Cmd::Head`] then [`Cmd::Data`] with `end`,
    /// in one trip through the queue.
    Whole { id: u64, status: u16, fields: HeadFields, data: Bytes },
    /// The trailer section, ending the response.
    Trailers { id: u64, fields: Vec<Field> },
    /// Request body bytes the handler consumed (HTTP/2: credit to hand back).
    Release { id: u64, n: usize },
    /// The response failed half-way: reset the stream.
    Fail { id: u64 },
    /// The handler set the response's priority (RFC 9218 §5).
    Priority { id: u64, value: Bytes },
    /// The handler was woken: poll it again.
    Poll { id: u64 },
}

/// Where a connection's handlers send their commands, and where its task takes them.
pub(crate) type CmdSender = crate::io::mailbox::Sender<Cmd>;
pub(crate) type CmdReceiver = crate::io::mailbox::Receiver<Cmd>;

/// Why an engine did not take a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The stream is gone (reset, finished): the handler should stop.
    Gone,
    /// The stream's send buffer is full: keep the bytes and offer them again after progress.
    Full,
    /// Not allowed now (a head after the final head, a bad status): a handler bug.
    Invalid,
}

/// What the stream layer needs of an engine.
pub(crate) trait Engine {
    fn send_head(&mut self, id: u64, status: u16, fields: HeadFields, end: bool) -> Result<(), Refused>;
    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused>;
    /// Whether [`Engine::send_data`] takes body bytes for `id` now, rather than refusing them
    /// as [`Refused::Full`]. Asked first, so that no copy of the bytes is kept in case of a
    /// refusal (cloning a `Bytes` made from a `Vec` allocates its shared state).
    fn accepts_data(&self, id: u64) -> bool;
    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused>;
    /// Hand `n` bytes of request-body credit back (HTTP/2); nothing for engines whose
    /// transport returns credit as it is read.
    fn release(&mut self, id: u64, n: usize);
    /// Reset the stream: the server failed (INTERNAL_ERROR / H3_INTERNAL_ERROR).
    fn fail(&mut self, id: u64);
    /// Apply a `priority` response field (RFC 9218 §8: merged over the request's).
    fn priority(&mut self, id: u64, value: &[u8]);
    /// Response bytes still queued in the engine; `None` once the stream is gone from it.
    fn buffered(&self, id: u64) -> Option<usize>;
    /// The streams the engine has forgotten since the last call, appended to `out`; `false`
    /// when the engine does not report them, and [`Streams::sweep`] asks
    /// [`Engine::buffered`] about each finished stream on every call instead.
    fn take_closed(&mut self, out: &mut Vec<u64>) -> bool {
        let _ = out;
        false
    }
    /// Take back a request head the stream layer has done with, for the engine's next one
    /// (dropped by engines that do not reuse them).
    fn recycle_head(&mut self, head: Box<RequestHead>) {
        drop(head);
    }
}

/// Hand `data` to the engine if it takes body bytes for `id` now: `Ok(None)` when it did,
/// `Ok(Some(data))` when its queue is full (hold the bytes and offer them again after
/// progress). An engine that refuses as full what [`Engine::accepts_data`] allowed loses the
/// bytes: the stream fails.
fn offer<E: Engine>(engine: &mut E, id: u64, data: Bytes, end: bool) -> Result<Option<Bytes>, Refused> {
    if !data.is_empty() && !engine.accepts_data(id) {
        return Ok(Some(data));
    }
    match engine.send_data(id, data, end) {
        Ok(()) => Ok(None),
        Err(Refused::Full) => {
            tracing::error!(stream = id, "the engine refused body bytes it said it would take: stream reset");
            engine.fail(id);
            Err(Refused::Invalid)
        }
        Err(e) => Err(e),
    }
}

/// What a connection's streams share with their handlers, in one allocation: the server's
/// state, the connection's, and the command channel. A stream clones one pointer for all three
/// (and its interim heads go through it too): each clone and each drop is an atomic operation,
/// and a proxied request made four clones of the parts (eight atomic operations of its 170).
pub(crate) struct ConnShared {
    state: Arc<State>,
    info: Arc<ConnInfo>,
    tx: CmdSender,
}

/// What the driver does with a request body chunk ([`Streams::body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyVerdict {
    /// Delivered (or nothing to deliver to).
    Taken,
    /// Over `limits.max_request_body`: the handler got an error; reset the stream.
    TooLarge,
    /// The handler dropped its body: read no more of it.
    Unwanted,
}

/// What a stream's handler and the connection task share, in one allocation: the stream's
/// send room, the handler's way back to the connection task (its [`Sink`]: commands on the
/// connection's channel), and the handler's waker, which asks the connection task to poll the
/// handler again, once until it has.
pub(crate) struct Shared {
    room: SendRoom,
    id: u64,
    /// A [`Cmd::Poll`] is on its way and the handler has not been polled since.
    queued: AtomicBool,
    conn: Arc<ConnShared>,
    /// The request's access-log counters ([`ExchangeRef`]).
    counters: Counters,
}

impl Shared {
    fn new(id: u64, conn: &Arc<ConnShared>) -> Arc<Self> {
        Arc::new(Self {
            room: SendRoom::new(STREAM_SEND_BUFFER, conn.state.send_budget.clone()),
            id,
            queued: AtomicBool::new(false),
            conn: conn.clone(),
            counters: Counters::default(),
        })
    }

    fn send(&self, cmd: Cmd) -> bool {
        self.conn.tx.send(cmd).is_ok()
    }
}

impl Sink for Shared {
    fn priority(&self, value: Bytes) {
        self.send(Cmd::Priority { id: self.id, value });
    }

    fn head(&self, status: u16, fields: HeadFields, end: bool) -> bool {
        self.send(Cmd::Head { id: self.id, status, fields, end })
    }

    fn data(&self, data: Bytes, end: bool) -> bool {
        self.send(Cmd::Data { id: self.id, data, end })
    }

    fn whole(&self, status: u16, fields: HeadFields, data: Bytes) -> bool {
        self.send(Cmd::Whole { id: self.id, status, fields, data })
    }

    fn trailers(&self, fields: Vec<Field>) -> bool {
        self.send(Cmd::Trailers { id: self.id, fields })
    }

    fn fail(&self) {
        self.send(Cmd::Fail { id: self.id });
    }
}

impl Handled for Shared {
    fn state(&self) -> &State {
        &self.conn.state
    }

    fn conn(&self) -> &ConnInfo {
        &self.conn.info
    }
}

impl crate::message::Exchange for Shared {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn has_interims(&self) -> bool {
        true
    }

    fn send_interim(&self, status: u16, fields: Vec<Field>) -> bool {
        self.conn.tx.send(Cmd::Head { id: self.id, status, fields: fields.into(), end: false }).is_ok()
    }
}

impl std::ops::Deref for Shared {
    type Target = SendRoom;

    fn deref(&self) -> &SendRoom {
        &self.room
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.send(Cmd::Poll { id: self.id });
        }
    }
}

/// A handler that did not finish on its first poll.
struct Handler {
    fut: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Made from the stream's [`Shared`].
    waker: Waker,
}

struct StreamCtx {
    body_tx: Option<mpsc::UnboundedSender<Result<Bytes, BodyError>>>,
    trailers: Option<TrailerSlot>,
    /// The send room, the handler's waker, and the request's access-log counters (a request
    /// body's bytes are counted there).
    room: Arc<Shared>,
    /// The handler; `None` once it finished.
    handler: Option<Handler>,
    /// Data the engine refused as [`Refused::Full`], offered again after progress.
    held: VecDeque<(Bytes, bool)>,
    /// Trailers waiting behind `held`.
    held_trailers: Option<Vec<Field>>,
    /// Bytes the engine framed after the handler finished: still counted in the room's share
    /// of the global budget, and handed back with the rest when the stream is released. A
    /// finished handler takes no more room, so there is no one to give it to sooner, and each
    /// hand-back was about seven atomic operations (two semaphores' counts and wait lists) of a
    /// small response's 170.
    framed: usize,
    /// A CONNECT's stream: its request body is a tunnel's bytes, not bounded by
    /// `limits.max_request_body` (the forward proxy's budgets bound tunnels).
    tunnel: bool,
}

/// The streams of one connection and their handlers.
pub(crate) struct Streams {
    /// By stream id. The ids are the peer's, but an engine admits only a bounded number of
    /// open streams, so flooding one bucket costs the peer as much as us: Fx hashing, not
    /// SipHash (which was 2 % of a small request's instructions).
    map: rustc_hash::FxHashMap<u64, StreamCtx>,
    conn: Arc<ConnShared>,
    proto: Proto,
    /// Made on the first request, and dropped again by [`Streams::shrink`]: an idle
    /// connection carries 8 bytes for it, not two empty lists' 48.
    lists: Option<Box<Lists>>,
}

/// Stream ids the driver's loop comes back to.
#[derive(Default)]
struct Lists {
    /// Streams whose handler was woken, to poll on the next [`Streams::poll_ready`].
    ready: Vec<u64>,
    /// Streams whose handler has finished (or that never had one): the only ones
    /// [`Streams::sweep`] looks at, not every stream on every turn of the driver's loop.
    finished: Vec<u64>,
    /// The streams the engine reported gone ([`Engine::take_closed`]), between two sweeps.
    closed: Vec<u64>,
}

impl Streams {
    /// The streams of a new connection, and the receiving end of its command channel.
    pub(crate) fn new(state: Arc<State>, info: Arc<ConnInfo>, proto: Proto) -> (Self, CmdReceiver) {
        let (tx, rx) = crate::io::mailbox::mailbox();
        let conn = Arc::new(ConnShared { state, info, tx });
        (Self { map: rustc_hash::FxHashMap::default(), conn, proto, lists: None }, rx)
    }

    /// A sender of commands (HTTP/2's credit release uses it).
    pub(crate) fn commands(&self) -> CmdSender {
        self.conn.tx.clone()
    }

    /// Hands back the map's room when no stream is left (an idle connection).
    pub(crate) fn shrink(&mut self) {
        if self.map.is_empty() {
            self.map.shrink_to_fit();
        }
        if self.lists.as_ref().is_some_and(|l| l.ready.is_empty() && l.finished.is_empty() && l.closed.is_empty()) {
            self.lists = None;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    /// Start the handler of a new request. `on_consumed(n)` runs as the handler takes `n`
    /// request body bytes.
    #[inline]
    pub(crate) fn start<E: Engine>(
        &mut self,
        engine: &mut E,
        id: u64,
        mut head: Box<RequestHead>,
        end_stream: bool,
        on_consumed: Option<Arc<dyn Fn(usize) + Send + Sync>>,
        datagrams: Option<crate::message::Datagrams>,
    ) {
        if end_stream {
            if let Some(a) = answer_inline(&head, &self.conn.state, &self.conn.info, self.proto) {
                self.send_inline(engine, id, a);
                engine.recycle_head(head);
                return;
            }
        }
        // A request without a body needs no channel and no trailer slot.
        let (body, body_tx, trailers) = if end_stream {
            (RequestBody::empty(), None, None)
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            let slot = TrailerSlot::default();
            (RequestBody::channel(rx, on_consumed).with_trailers(slot.clone()), Some(tx), Some(slot))
        };
        let room = Shared::new(id, &self.conn);
        // The request's counters live in the stream's shared state: no allocation of their own
        // (and through them the request reaches its interim path).
        let counters = ExchangeRef::new(room.clone());
        let tunnel = &head.method[..] == b"CONNECT";
        let mut req = Box::new(to_request(&mut head, body, &self.conn.info, self.proto, counters));
        engine.recycle_head(head);
        if let (Some(c), Some(d)) = (req.connect.as_mut(), datagrams) {
            c.datagrams = Some(d);
        }
        let fut = Box::pin(run_handler(req, room.clone()));
        let ctx = StreamCtx {
            body_tx,
            trailers,
            room,
            handler: None,
            held: VecDeque::new(),
            held_trailers: None,
            framed: 0,
            tunnel,
        };
        self.run(engine, id, ctx, fut);
    }

    /// Keep `ctx` for stream `id` with `fut` as its handler, and poll it once right here: most
    /// answers are ready at once.
    fn run<E: Engine>(
        &mut self,
        engine: &mut E,
        id: u64,
        mut ctx: StreamCtx,
        fut: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        ctx.handler = Some(Handler { fut, waker: Waker::from(ctx.room.clone()) });
        self.map.insert(id, ctx);
        self.poll_handler(engine, id);
    }

    /// Poll the handler of `id`, if it has one still running. A handler that panics fails its
    /// stream only (as a task of its own would have), not the connection.
    fn poll_handler<E: Engine>(&mut self, engine: &mut E, id: u64) {
        let Some(s) = self.map.get_mut(&id) else { return };
        let Some(h) = s.handler.as_mut() else { return };
        // Cleared before the poll: a wake-up during it asks for another.
        s.room.queued.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&h.waker);
        let fut = &mut h.fut;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Pending) => {}
            Ok(Poll::Ready(())) => {
                if let Some(s) = self.map.get_mut(&id) {
                    s.handler = None;
                    self.lists().finished.push(id);
                }
            }
            Err(_) => {
                tracing::error!(peer = %self.conn.info.peer, stream = id, "request handler panicked: stream reset");
                engine.fail(id);
                self.reset(id);
            }
        }
    }

    /// Poll each handler woken since the last call, once. Wake-ups during these polls (a
    /// handler that woke itself: tokio's cooperative budget does that once a task has used
    /// it up) are polled on the next call: the driver calls this once per trip through the
    /// scheduler, so that a handler cannot keep the connection task from yielding.
    pub(crate) fn poll_ready<E: Engine>(&mut self, engine: &mut E) {
        let mut ready = std::mem::take(&mut self.lists().ready);
        for id in ready.drain(..) {
            self.poll_handler(engine, id);
        }
        // Polls queue their wake-ups as commands, not here: the list is still empty.
        let lists = self.lists();
        if lists.ready.is_empty() {
            lists.ready = ready;
        }
    }

    /// Whether a woken handler waits for [`Streams::poll_ready`].
    pub(crate) fn has_ready(&self) -> bool {
        self.lists.as_ref().is_some_and(|l| !l.ready.is_empty())
    }

    fn lists(&mut self) -> &mut Lists {
        self.lists.get_or_insert_with(Box::default)
    }

    /// Send a response made without a handler: what [`apply`](Self::apply) does with its
    /// head and its one data chunk. Data the engine refuses as full is held for later, as a
    /// handler's would be.
    fn send_inline<E: Engine>(&mut self, engine: &mut E, id: u64, mut a: Inline) {
        let end = a.body.is_empty();
        let fields = a.fields(&self.conn.info);
        if !self.head(engine, id, 200, fields, end) {
            return;
        }
        if end {
            a.ended("ok", 0);
            return;
        }
        let len = a.body.len() as u64;
        match offer(engine, id, std::mem::take(&mut a.body), true) {
            Ok(None) => a.ended("ok", len),
            Ok(Some(body)) => {
                a.ended("ok", len);
                let room = Shared::new(id, &self.conn);
                let mut held = VecDeque::new();
                held.push_back((body, true));
                let ctx = StreamCtx {
                    body_tx: None,
                    trailers: None,
                    room,
                    handler: None,
                    held,
                    held_trailers: None,
                    framed: 0,
                    tunnel: false,
                };
                self.map.insert(id, ctx);
                self.lists().finished.push(id);
            }
            Err(_) => a.ended("reset", len),
        }
    }

    /// Hand a response head to the engine; false if it did not take it (a final head that
    /// cannot go out fails the stream: the client would wait for it otherwise).
    fn head<E: Engine>(&self, engine: &mut E, id: u64, status: u16, fields: HeadFields, end: bool) -> bool {
        let Err(e) = engine.send_head(id, status, fields, end) else { return true };
        tracing::debug!(peer = %self.conn.info.peer, stream = id, status, ?e, "response head not sent");
        if e == Refused::Invalid && status >= 200 {
            engine.fail(id);
        }
        false
    }

    /// A request body chunk arrived. `window` is the receive window granted so far (for the
    /// access log).
    pub(crate) fn body(&mut self, id: u64, data: Bytes, end_stream: bool, window: Option<u32>) -> BodyVerdict {
        let Some(s) = self.map.get_mut(&id) else { return BodyVerdict::Taken };
        let total = s.room.counters.bytes_in.fetch_add(data.len() as u64, Ordering::Relaxed) + data.len() as u64;
        crate::message::metrics::bytes_in(self.proto, data.len() as u64);
        if let Some(w) = window {
            s.room.counters.recv_window.fetch_max(u64::from(w), Ordering::Relaxed);
        }
        let Some(tx) = &s.body_tx else { return BodyVerdict::Taken };
        if total > self.conn.state.cfg.limits.max_request_body && !s.tunnel {
            let _ = tx.send(Err(BodyError::TooLarge));
            tracing::info!(peer = %self.conn.info.peer, stream = id, "request body over limits.max_request_body: stream cancelled");
            s.body_tx = None;
            return BodyVerdict::TooLarge;
        }
        if !data.is_empty() && tx.send(Ok(data)).is_err() {
            s.body_tx = None;
            return BodyVerdict::Unwanted;
        }
        if end_stream {
            s.body_tx = None;
        }
        BodyVerdict::Taken
    }

    /// The request's trailer section arrived: it ends the body. A field the `http` crate
    /// cannot hold fails the body.
    pub(crate) fn trailers(&mut self, id: u64, fields: Vec<Field>) {
        let Some(s) = self.map.get_mut(&id) else { return };
        let mut map = http::HeaderMap::with_capacity(fields.len());
        for f in fields {
            match (http::HeaderName::from_bytes(&f.name), http::HeaderValue::from_maybe_shared(f.value)) {
                (Ok(n), Ok(v)) => {
                    map.append(n, v);
                }
                _ => {
                    if let Some(tx) = s.body_tx.take() {
                        let _ = tx.send(Err(BodyError::Other("a trailer field that does not parse".into())));
                    }
                    return;
                }
            }
        }
        if let Some(slot) = &s.trailers {
            *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(map);
        }
        // Closing the channel after the slot is set: the handler sees the end, then the trailers.
        s.body_tx = None;
    }

    /// Whether the handler of `id` dropped its request body while the body was still open.
    pub(crate) fn body_unwanted(&self, id: u64) -> bool {
        self.map.get(&id).and_then(|s| s.body_tx.as_ref()).is_some_and(mpsc::UnboundedSender::is_closed)
    }

    /// Streams whose handler dropped its body while the body was open; each is reported once.
    pub(crate) fn take_unwanted(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        for (&id, s) in &mut self.map {
            if s.body_tx.as_ref().is_some_and(mpsc::UnboundedSender::is_closed) {
                s.body_tx = None;
                out.push(id);
            }
        }
        out
    }

    /// The stream was reset (by the peer or by the engine): fail its body, wake and stop its
    /// handler.
    pub(crate) fn reset(&mut self, id: u64) {
        if let Some(s) = self.map.remove(&id) {
            if let Some(tx) = &s.body_tx {
                let _ = tx.send(Err(BodyError::Reset));
            }
            s.room.release();
            // The handler (if still running) is dropped with `s`.
        }
    }

    /// Apply one handler command to the engine.
    pub(crate) fn apply<E: Engine>(&mut self, engine: &mut E, cmd: Cmd) {
        match cmd {
            Cmd::Head { id, status, fields, end } => {
                self.head(engine, id, status, fields, end);
            }
            Cmd::Whole { id, status, fields, data } => {
                // As the two commands it stands for: the data follows whatever became of the
                // head (a stream the engine no longer takes gives its room back there).
                self.head(engine, id, status, fields, false);
                self.apply(engine, Cmd::Data { id, data, end: true });
            }
            Cmd::Data { id, data, end } => {
                let Some(s) = self.map.get_mut(&id) else {
                    let _ = engine.send_data(id, data, end);
                    return;
                };
                if !s.held.is_empty() {
                    s.held.push_back((data, end));
                    return;
                }
                match offer(engine, id, data, end) {
                    Ok(None) => {}
                    Ok(Some(data)) => s.held.push_back((data, end)),
                    Err(_) => s.room.release(),
                }
            }
            Cmd::Trailers { id, fields } => {
                if let Some(s) = self.map.get_mut(&id) {
                    if !s.held.is_empty() {
                        s.held_trailers = Some(fields);
                        return;
                    }
                }
                if engine.send_trailers(id, fields).is_err() {
                    if let Some(s) = self.map.get(&id) {
                        s.room.release();
                    }
                }
            }
            Cmd::Release { id, n } => engine.release(id, n),
            Cmd::Priority { id, value } => engine.priority(id, &value),
            Cmd::Fail { id } => {
                engine.fail(id);
                self.reset(id);
            }
            Cmd::Poll { id } => self.lists().ready.push(id),
        }
    }

    /// The engine framed `n` more bytes of `id`: room in its queue for the handler, and for
    /// what the engine refused earlier.
    pub(crate) fn sent<E: Engine>(&mut self, engine: &mut E, id: u64, n: usize) {
        let Some(s) = self.map.get_mut(&id) else { return };
        if s.handler.is_some() {
            s.room.framed(n);
        } else {
            s.framed += n;
        }
        while let Some((data, end)) = s.held.pop_front() {
            match offer(engine, id, data, end) {
                Ok(None) => {}
                Ok(Some(data)) => {
                    s.held.push_front((data, end));
                    return;
                }
                Err(_) => {
                    s.room.release();
                    s.held.clear();
                    return;
                }
            }
        }
        if let Some(fields) = s.held_trailers.take() {
            if engine.send_trailers(id, fields).is_err() {
                s.room.release();
            }
        }
    }

    /// Forget streams whose handler finished and whose engine stream is gone.
    ///
    /// With an engine that reports the streams it forgets, each stream is looked at twice at
    /// most: when the engine reports it, and when its handler finishes. Otherwise every
    /// finished stream the engine still holds is asked about on every call: with ten requests
    /// answered at a time about eight wait for their last bytes to be framed, and that walk
    /// cost about 170 instructions per proxied request (callgrind; forgetting a stream, its
    /// state dropped and its room released, is some 400 more either way).
    #[inline]
    pub(crate) fn sweep<E: Engine>(&mut self, engine: &mut E) {
        let Some(lists) = self.lists.as_mut() else { return };
        let map = &mut self.map;
        if engine.take_closed(&mut lists.closed) {
            // Gone from the engine: done once the handler is (what is still held cannot go out).
            for id in lists.closed.drain(..) {
                if let std::collections::hash_map::Entry::Occupied(s) = map.entry(id) {
                    if s.get().handler.is_none() {
                        s.remove().room.release_finished();
                    }
                }
            }
            // Finished handlers: done if the engine forgot the stream already, else when it
            // reports it (above, on a later call).
            for id in lists.finished.drain(..) {
                if engine.buffered(id).is_none() {
                    if let Some(s) = map.remove(&id) {
                        s.room.release_finished();
                    }
                }
            }
            return;
        }
        lists.finished.retain(|&id| {
            // Gone already: reset.
            let Some(s) = map.get(&id) else { return false };
            if !s.held.is_empty() || engine.buffered(id).is_some() {
                return true;
            }
            // Whatever the engine dropped unframed goes back to the global budget.
            s.room.release_finished();
            map.remove(&id);
            false
        });
    }

    /// Whether any stream has response bytes queued that the engine has not framed.
    pub(crate) fn queued(&self) -> bool {
        self.map.values().any(|s| s.room.held() > s.framed || !s.held.is_empty())
    }

    /// The connection ends: stop every handler.
    pub(crate) fn abort_all(&mut self) {
        for (_, s) in self.map.drain() {
            s.room.release();
        }
        self.lists = None;
    }
}

#[cfg(test)]
mod tests;
