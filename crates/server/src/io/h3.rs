//! The HTTP/3 driver: quinn (QUIC) below, the sans-IO engine (`sluice-h3`) in the middle, the
//! same handlers as HTTP/1.1 and HTTP/2 above.
//!
//! One task per connection owns the engine and the send half of every stream, and accepts the
//! streams the client opens. A stream that arrives whole (a request without a body: head and
//! FIN in the packet that opens it) is read there and then; for any other, a reader task
//! passes bytes in through a bounded channel; a request body waits
//! in its reader while the handler holds more than [`BODY_BUFFER`] unconsumed (quinn then stops
//! extending credit, so the client slows down). Writes are pulled from the engine one
//! scheduler pick (at most one quantum, or one chunk of a longer frame for a stream the
//! scheduler would pick again anyway) at a time and handed to quinn without waiting: a stream
//! quinn cannot take more from is reported blocked to the engine, and its waker brings the
//! task back when it can; so the driver holds at most one write per stream beyond what quinn
//! took. Two things keep the order of bytes on the wire the engine's (RFC 9218), not quinn's
//! buffer's:
//! - quinn's send window (unacknowledged plus unsent stream bytes) follows the congestion
//!   window ([`send_window`]), so a bounded amount waits in quinn's buffer;
//! - every stream carries its urgency as quinn's stream priority, so what does wait there goes
//!   out most urgent first (our control and QPACK streams before any response).
//!
//! What is in flight is bounded too: each connection's congestion controller is wrapped by the
//! in-flight bound (`quic_pace.rs`), fed by this driver through a [`PaceLink`] (urgent bytes
//! handed to quinn, and whether the connection has carried several urgencies).
//!
//! The connection's receive window is autotuned with the HTTP/2 tuner under the same memory
//! budget; stream windows are generous (`[quic] stream_window`).

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::{RecvStream, SendStream, VarInt};
use rustc_hash::FxHashMap;
use sluice_h3::{Code, Connection, Event, Field, SendError, Transmit};
use sluice_tune::window::{TuneState, WindowPolicy};
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};

use crate::app::respond::ConnInfo;
use crate::config::{Config, QuicCongestion};
use crate::io::quic_pace::{BoundedFactory, PaceLink};
use crate::io::stream::{BodyVerdict, Engine, Refused, Streams};
use crate::message::Proto;
use crate::state::State;
use sluice_tls::certs::{Served, ServedCert};
use sluice_tune::inflight::URGENT;

/// Request body bytes delivered to a handler and not yet consumed before the stream's reader
/// stops reading (the QUIC stream window then holds the client back).
const BODY_BUFFER: i64 = 1 << 20;
/// Largest read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;
/// Finished streams kept before the first pruning (see `Driver::finishing`).
const PRUNE_FIRST: usize = 32;
/// How often at most the driver refreshes quinn's send window and the receive-window tuner: on
/// each pass of its loop at least this long after the last. No timer drives it: while data
/// moves, quinn's stream wakers and the readers' input bring the loop round; while nothing
/// moves, there is nothing to tune.
const TUNE_EVERY: Duration = Duration::from_millis(2);
/// Unidirectional streams a client may open at once: control and the two QPACK streams, and
/// room for reserved ones (RFC 9114 §6.2.3 grease).
const MAX_UNI_STREAMS: u32 = 8;

use sluice_client::quic::{endpoint_config, mtu_discovery};

/// A QUIC endpoint serving HTTP/3, and the server settings each connection starts from.
pub(crate) struct Listener {
    pub(crate) ep: quinn::Endpoint,
    server: quinn::ServerConfig,
}

/// Bind UDP at `addr` and start a QUIC endpoint serving HTTP/3 with `tls` (ALPN h3).
pub(crate) fn endpoint(addr: SocketAddr, tls: Arc<rustls::ServerConfig>, cfg: &Config) -> Result<Listener, String> {
    let socket = std::net::UdpSocket::bind(addr).map_err(|e| format!("cannot listen on UDP {addr}: {e}"))?;
    size_buffers(&socket, cfg.quic.socket_buffer);
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("TLS configuration for QUIC: {e}"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    // Every connection is accepted with its own settings (`for_peer`); these are the defaults.
    server.transport_config(Arc::new(transport(cfg, None)?));
    let ep = quinn::Endpoint::new(endpoint_config(), Some(server.clone()), socket, Arc::new(quinn::TokioRuntime))
        .map_err(|e| format!("cannot start QUIC on {addr}: {e}"))?;
    Ok(Listener { ep, server })
}

/// The server settings for a connection from `peer`: the listener's, with MTU discovery up to
/// what the route to `peer` carries and, with `[quic] limit_inflight`, the connection's own
/// bounded congestion controller and the link the driver feeds it through.
fn for_peer(
    server: &quinn::ServerConfig,
    cfg: &Config,
    peer: SocketAddr,
) -> (quinn::ServerConfig, Option<Arc<PaceLink>>) {
    let mut server = server.clone();
    let pace = cfg.quic.limit_inflight.then(|| Arc::new(PaceLink::default()));
    // Invariant: `transport` succeeded with this configuration when the listener started.
    if let Ok(mut t) = transport(cfg, pace.clone()) {
        t.mtu_discovery_config(Some(mtu_discovery(peer)));
        server.transport_config(Arc::new(t));
    }
    (server, pace)
}

/// Ask for `want` bytes of UDP socket buffer each way; say so when the kernel gives less.
fn size_buffers(socket: &std::net::UdpSocket, want: usize) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    for (what, which) in [("receive", sluice_sys::sock::Buffer::Receive), ("send", sluice_sys::sock::Buffer::Send)] {
        match sluice_sys::sock::size_buffer(fd, which, want) {
            Ok(got) if got < want => tracing::warn!(
                asked = want,
                got,
                "the kernel clamped the UDP {what} buffer: raise {} (HTTP/3 may drop packets at high rates)",
                which.sysctl()
            ),
            Ok(got) => tracing::debug!(got, "UDP {what} buffer"),
            Err(e) => tracing::warn!(%e, "cannot size the UDP {what} buffer"),
        }
    }
}

/// quinn's transport parameters from the configuration; with `pace`, the congestion
/// controller is bounded by the in-flight bound (`quic_pace.rs`).
fn transport(cfg: &Config, pace: Option<Arc<PaceLink>>) -> Result<quinn::TransportConfig, String> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(cfg.limits.max_concurrent_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .stream_receive_window(VarInt::from_u32(cfg.quic.stream_window))
        .receive_window(VarInt::from_u32(cfg.flow.initial_connection_window))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(cfg.timeouts.idle).map_err(|e| format!("idle timeout for QUIC: {e}"))?,
        ))
        .enable_segmentation_offload(true)
        // Streams of one priority take turns; urgencies are distinct priorities (see above).
        .send_fairness(true)
        // The driver sets the send window from the congestion window as soon as data moves;
        // until then quinn's default (10 MB) would let the first responses fill its buffer far
        // past what the path carries, all of it ahead of anything requested later (traced:
        // about 1 MB ahead of an urgent response 0.45 s into a connection).
        .send_window(send_window(INITIAL_WINDOW, sluice_h3::Config::default().quantum));
    let inner: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> = match cfg.quic.congestion {
        QuicCongestion::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
        QuicCongestion::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
        QuicCongestion::NewReno => Arc::new(quinn::congestion::NewRenoConfig::default()),
    };
    match pace {
        Some(link) => t.congestion_controller_factory(Arc::new(BoundedFactory { inner, link })),
        None => t.congestion_controller_factory(inner),
    };
    Ok(t)
}

/// quinn's default initial congestion window, 14,720 bytes (RFC 9002 §7.2: ten datagrams,
/// at most 14,720 bytes).
const INITIAL_WINDOW: u64 = 14_720;

/// quinn's send window for a congestion window of `cwnd` bytes: twice the window plus four
/// quanta. quinn counts selectively acknowledged data against the send window until the
/// contiguous prefix is acknowledged, so after a loss a window near `cwnd` would run dry for a
/// round trip (and quinn's CUBIC ignores ACKs while application-limited); twice leaves room for
/// that, and the slack keeps the congestion controller fed between two of our passes. The order
/// within what waits in quinn's buffer is kept by stream priorities.
pub(crate) fn send_window(cwnd: u64, quantum: usize) -> u64 {
    2 * cwnd + 4 * quantum as u64
}

/// Whether a new send window differs enough from the one set to be worth telling quinn (each
/// call wakes its connection driver): by an eighth.
fn worth_setting(old: u64, new: u64) -> bool {
    old.abs_diff(new) > old / 8
}

/// Accept QUIC connections until shutdown; every connection task holds a clone of `alive`.
pub(crate) async fn accept_loop(
    listener: Listener,
    certs: Arc<Vec<Arc<ServedCert>>>,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    let Listener { ep, server } = listener;
    let server = Arc::new(server);
    let limit = Arc::new(Semaphore::new(state.cfg.limits.max_connections));
    let port = ep.local_addr().map(|a| a.port()).unwrap_or_default();
    loop {
        let incoming = tokio::select! {
            i = ep.accept() => match i {
                Some(i) => i,
                None => break,
            },
            _ = shutdown.changed() => break,
        };
        // At the limit, refuse at once (CONNECTION_REFUSED) rather than hold the handshake.
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::debug!(peer = %incoming.remote_address(), "QUIC connection refused: limits.max_connections");
            incoming.refuse();
            continue;
        };
        let (state, shutdown, alive, certs) = (state.clone(), shutdown.clone(), alive.clone(), certs.clone());
        let server = server.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _alive = alive;
            serve(incoming, &server, &certs, port, state, shutdown).await;
        });
    }
    // Refuse new connections while the open ones drain (each has its own GOAWAY and deadline),
    // then let their CONNECTION_CLOSEs go out.
    ep.set_server_config(None);
    let _ = tokio::time::timeout(state.cfg.timeouts.drain + Duration::from_secs(1), ep.wait_idle()).await;
}

/// New streams, and bytes and news from the reader tasks.
enum Input {
    Data { id: u64, data: Bytes, fin: bool },
    Reset { id: u64, code: u64 },
    Bi(SendStream, RecvStream),
    Uni(RecvStream),
}

impl Input {
    /// What a read of stream `id` brings the connection task; `None` once the connection is
    /// gone (the connection task sees that itself).
    fn read(id: u64, r: Result<Option<quinn::Chunk>, quinn::ReadError>) -> Option<Self> {
        match r {
            Ok(Some(chunk)) => Some(Self::Data { id, data: chunk.bytes, fin: false }),
            Ok(None) => Some(Self::Data { id, data: Bytes::new(), fin: true }),
            Err(quinn::ReadError::Reset(code)) => Some(Self::Reset { id, code: code.into_inner() }),
            Err(_) => None,
        }
    }
}

fn refused(e: SendError) -> Refused {
    match e {
        SendError::UnknownStream => Refused::Gone,
        SendError::Full => Refused::Full,
        _ => Refused::Invalid,
    }
}

impl Engine for Connection {
    fn send_head(&mut self, id: u64, status: u16, fields: sluice_http::HeadFields, end: bool) -> Result<(), Refused> {
        self.send_response(id, status, fields, end).map_err(refused)
    }

    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused> {
        Self::send_data(self, id, data, end).map_err(refused)
    }

    fn accepts_data(&self, id: u64) -> bool {
        // `send_data` refuses body bytes once the stream holds `max_buffered_per_stream`; a
        // gone stream is refused as such.
        self.send_capacity(id).is_none_or(|room| room > 0)
    }

    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused> {
        Self::send_trailers(self, id, fields).map_err(refused)
    }

    fn release(&mut self, _id: u64, _n: usize) {
        // QUIC returns stream credit as the reader task reads (see `Credit`).
    }

    fn fail(&mut self, id: u64) {
        self.reset(id, Code::H3_INTERNAL_ERROR);
    }

    fn priority(&mut self, id: u64, value: &[u8]) {
        // RFC 9218 §8: the handler's priority header, merged over the request's.
        if let Some(current) = Self::priority(self, id) {
            self.set_priority(id, sluice_h3::Priority::parse(value, current));
        }
    }

    fn buffered(&self, id: u64) -> Option<usize> {
        Self::buffered(self, id)
    }
}

/// Request body bytes a handler holds and has not consumed; the stream's reader waits while
/// they exceed [`BODY_BUFFER`].
/// The reader also waits while the engine does not want the stream's bytes yet (its header
/// section waits for QPACK encoder-stream data).
#[derive(Default)]
struct Credit {
    held: AtomicI64,
    paused: AtomicBool,
    freed: Notify,
}

impl Credit {
    async fn wait_room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.held.load(Ordering::Acquire) < BODY_BUFFER && !self.paused.load(Ordering::Acquire) {
                return;
            }
            freed.await;
        }
    }

    fn consumed(&self, n: usize) {
        self.held.fetch_sub(n as i64, Ordering::AcqRel);
        self.freed.notify_waiters();
    }

    fn set_paused(&self, on: bool) {
        if self.paused.swap(on, Ordering::AcqRel) && !on {
            self.freed.notify_waiters();
        }
    }
}

/// Wakes the connection task with the id of a stream quinn can take more from.
struct StreamWake {
    id: u64,
    woken: Arc<Mutex<Vec<u64>>>,
    notify: Arc<Notify>,
}

impl Wake for StreamWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut w) = self.woken.lock() {
            w.push(self.id);
        }
        self.notify.notify_one();
    }
}

/// The send half of a stream and what waits for it.
struct Out {
    send: SendStream,
    queue: VecDeque<Bytes>,
    fin: bool,
    /// Reported blocked to the engine.
    blocked: bool,
    waker: Waker,
    /// The quinn priority set last.
    priority: i32,
}

enum Flushed {
    /// Everything queued went to quinn.
    Done,
    /// Queue empty and the stream finished: forget it.
    Finished,
    /// quinn takes no more for now; the waker will tell.
    Blocked,
    /// The peer stopped the stream (STOP_SENDING with this code) or it is gone.
    Stopped(Option<u64>),
}

impl Out {
    /// Hand queued bytes to quinn; an urgent stream's (RFC 9218 urgency 0 or 1, and our
    /// control and QPACK streams) also go past the in-flight bound as `pace` allows.
    fn flush(&mut self, pace: Option<&PaceLink>) -> Flushed {
        let mut cx = Context::from_waker(&self.waker);
        let pace = pace.filter(|_| self.priority >= quinn_priority(URGENT));
        while !self.queue.is_empty() {
            // The chunks themselves go to quinn (no copy into its buffer): it empties those it
            // took whole and advances the one it took part of.
            let polled = std::pin::pin!(self.send.write_chunks(self.queue.make_contiguous())).poll(&mut cx);
            match polled {
                Poll::Ready(Ok(w)) => {
                    self.queue.drain(..w.chunks);
                    if let Some(p) = pace {
                        p.urgent(w.bytes);
                    }
                    if w.bytes == 0 && !self.queue.is_empty() {
                        // Not expected (quinn reports no room as Pending): look again later
                        // rather than spin, and never finish the stream over unsent bytes.
                        self.waker.wake_by_ref();
                        return Flushed::Blocked;
                    }
                }
                Poll::Ready(Err(quinn::WriteError::Stopped(code))) => return Flushed::Stopped(Some(code.into_inner())),
                Poll::Ready(Err(_)) => return Flushed::Stopped(None),
                Poll::Pending => return Flushed::Blocked,
            }
        }
        if self.fin {
            let _ = self.send.finish();
            return Flushed::Finished;
        }
        Flushed::Done
    }
}

/// quinn sends higher priorities first; RFC 9218 urgency 0 is the most urgent.
fn quinn_priority(urgency: u8) -> i32 {
    7 - i32::from(urgency.min(7))
}

/// Everything one connection task works with.
struct Driver {
    quic: quinn::Connection,
    /// The in-flight bound's link to this connection's congestion controller (`[quic]
    /// limit_inflight`).
    pace: Option<Arc<PaceLink>>,
    engine: Connection,
    state: Arc<State>,
    peer: SocketAddr,
    /// Keyed by stream id, Fx-hashed as the engine's maps are: the ids are the client's, but
    /// QUIC makes it open them in order, and it may have at most the stream limit open.
    outs: FxHashMap<u64, Out>,
    /// Readers to stop (STOP_SENDING with the code sent).
    stops: FxHashMap<u64, oneshot::Sender<u64>>,
    credits: FxHashMap<u64, Arc<Credit>>,
    streams: Streams,
    woken: Arc<Mutex<Vec<u64>>>,
    notify: Arc<Notify>,
    in_tx: mpsc::Sender<Input>,
    /// Stream ids and bytes the engine framed, between `drain_sent` and the stream layer.
    sent: Vec<(u64, usize)>,
    /// When the engine last framed response bytes, or had none waiting (see `stalled`).
    progress_at: Instant,
    /// Finished request streams whose data quinn may still be delivering, kept so that a
    /// graceful end can wait for the peer to acknowledge it all (dropping a finished stream
    /// does not stop its delivery; closing the connection does). Pruned of delivered ones as it
    /// doubles: at most about twice the streams the peer may have open, since quinn frees a
    /// stream's count only once its data is acknowledged. Not a task per stream: a spawn, a
    /// wake-up and a join for every response.
    finishing: Vec<SendStream>,
    /// The length of `finishing` that triggers the next pruning.
    prune_at: usize,
    /// The send window given to quinn last.
    send_window: u64,
    /// The largest send window the tuning gave in the last second, and when: about the most
    /// quinn can hold (unacknowledged plus unsent), which an urgent stream's raise goes past.
    send_window_high: (u64, Instant),
    /// Receive-window tuning of the whole connection (one "stream" for the tuner).
    tuner: sluice_tune::autotune::AutoTune,
    tune: TuneState,
    window: u32,
    closed: bool,
}

async fn serve(
    incoming: quinn::Incoming,
    server: &quinn::ServerConfig,
    certs: &[Arc<ServedCert>],
    port: u16,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = incoming.remote_address();
    let (config, pace) = for_peer(server, &state.cfg, peer);
    let connecting = match incoming.accept_with(Arc::new(config)) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, %e, "QUIC connection not accepted");
            return;
        }
    };
    let quic = match tokio::time::timeout(state.cfg.timeouts.header, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, %e, "QUIC handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "QUIC handshake timed out");
            return;
        }
    };
    // RFC 9114 §6.2.1: each side opens its control stream (and here both QPACK streams) at once.
    let mut uni = Vec::with_capacity(3);
    for _ in 0..3 {
        match quic.open_uni().await {
            Ok(s) => uni.push(s),
            Err(e) => {
                tracing::debug!(%peer, %e, "cannot open the HTTP/3 control streams");
                return;
            }
        }
    }
    let ids: Vec<u64> = uni.iter().map(|s| u64::from(s.id())).collect();
    // The certificate the client's SNI picked: its origins (RFC 9412) and the 421 rule.
    let sni = quic
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let served = Served::for_sni(certs, sni.as_deref(), port);
    let mut cfg = state.h3.clone();
    cfg.origins = served.as_ref().and_then(Served::origins);
    let engine = Connection::new(cfg, ids[0], ids[1], ids[2]);
    let info = Arc::new(ConnInfo::new(peer, true, None, served));
    let (in_tx, mut in_rx) = mpsc::channel::<Input>(64);
    let (streams, mut cmd_rx) = Streams::new(state.clone(), info, Proto::Http3);
    let f = &state.cfg.flow;
    let limits = sluice_tune::autotune::Limits {
        initial_stream: f.initial_connection_window,
        initial_connection: f.initial_connection_window,
        max_stream: f.max_connection_window,
        max_connection: f.max_connection_window,
        budget: state.window_budget.clone(),
    };
    let mut d = Driver {
        quic: quic.clone(),
        pace,
        engine,
        peer,
        outs: FxHashMap::default(),
        stops: FxHashMap::default(),
        credits: FxHashMap::default(),
        streams,
        woken: Arc::new(Mutex::new(Vec::new())),
        notify: Arc::new(Notify::new()),
        in_tx,
        sent: Vec::new(),
        progress_at: Instant::now(),
        finishing: Vec::new(),
        prune_at: PRUNE_FIRST,
        send_window: 0,
        send_window_high: (0, Instant::now()),
        tuner: sluice_tune::autotune::AutoTune::new(limits),
        tune: TuneState { window: f.initial_connection_window, ..TuneState::default() },
        window: f.initial_connection_window,
        closed: false,
        state: state.clone(),
    };
    for s in uni {
        // RFC 9204 §2.1.2 and RFC 9114 §6.2.1: encoder instructions and control frames must
        // not wait behind response bodies that may depend on them.
        let _ = s.set_priority(i32::MAX);
        let id = d.add_out(s);
        if let Some(out) = d.outs.get_mut(&id) {
            out.priority = i32::MAX;
        }
    }
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    if *shutdown.borrow() {
        d.engine.go_away();
        drain_deadline = Some(tokio::time::Instant::now() + state.cfg.timeouts.drain);
    }
    let mut tuned = Instant::now();
    let stall_every = state.cfg.timeouts.idle / 4;
    let mut stall_check = tokio::time::Instant::now() + stall_every;
    // Streams the client opens are accepted here, not by a task of their own: one wake-up and
    // no channel message per request. Off once the connection refuses more. These futures, and
    // the shutdown and close watches, live across turns of the loop (a new one each turn cost
    // its set-up and its registration with quinn or tokio every time); each is replaced once it
    // has fired, and shutdown fires once.
    let mut accepting = true;
    let mut accept_bi = std::pin::pin!(quic.accept_bi());
    let mut accept_uni = std::pin::pin!(quic.accept_uni());
    let mut shutdown_changed = std::pin::pin!(shutdown.changed());
    let mut closed = std::pin::pin!(quic.closed());
    let mut timer = std::pin::pin!(tokio::time::sleep_until(tokio::time::Instant::now()));
    let mut timer_at: Option<tokio::time::Instant> = None;
    // Heads are encoded when queued: the `Date` is brought up to date before each turn's
    // heads and before a command's.
    let mut date = crate::io::date::Stamp::default();
    loop {
        if let Some(v) = date.due() {
            d.engine.set_date(v);
        }
        // Streams answered inline have no handler state: the engine holds what they wait for.
        if !d.streams.queued() && !d.engine.has_unframed() {
            d.progress_at = Instant::now();
        }
        d.handle_events();
        while let Some(cmd) = cmd_rx.try_recv() {
            d.streams.apply(&mut d.engine, cmd);
        }
        // Woken handlers run now (see the HTTP/2 driver).
        if d.streams.has_ready() {
            d.streams.poll_ready(&mut d.engine);
            while let Some(cmd) = cmd_rx.try_recv() {
                d.streams.apply(&mut d.engine, cmd);
            }
        }
        if tuned.elapsed() >= TUNE_EVERY {
            tuned = Instant::now();
            d.tune_windows(tuned);
        }
        d.pump();
        d.report_sent();
        if d.closed || (d.engine.is_done() && !d.outs.keys().any(|&id| id & 0x2 == 0)) {
            break;
        }
        let notify = d.notify.clone();
        // One timer for every deadline (see `io::arm`), as over HTTP/2.
        let timeout = d.engine.poll_timeout().map(tokio::time::Instant::from_std);
        let active = !d.streams.is_empty() || d.engine.open_streams() > 0;
        let next = [timeout, active.then_some(stall_check), drain_deadline].into_iter().flatten().min();
        crate::io::arm(timer.as_mut(), &mut timer_at, next);
        tokio::select! {
            Some(input) = in_rx.recv() => {
                d.input(input);
                while let Ok(input) = in_rx.try_recv() {
                    d.input(input);
                }
            }
            Some(cmd) = cmd_rx.recv() => {
                if let Some(v) = date.due() {
                    d.engine.set_date(v);
                }
                d.streams.apply(&mut d.engine, cmd);
            }
            r = &mut accept_bi, if accepting => {
                accept_bi.set(quic.accept_bi());
                match r {
                    Ok((send, recv)) => d.input(Input::Bi(send, recv)),
                    Err(_) => accepting = false,
                }
            }
            r = &mut accept_uni, if accepting => {
                accept_uni.set(quic.accept_uni());
                match r {
                    Ok(recv) => d.input(Input::Uni(recv)),
                    Err(_) => accepting = false,
                }
            }
            _ = notify.notified() => d.on_woken(),
            () = &mut timer, if timer_at.is_some() => {
                timer_at = None;
                let now = tokio::time::Instant::now();
                if drain_deadline.is_some_and(|d| d <= now) {
                    break;
                }
                // The engine's timers: header timeouts of request streams, the reset budget's
                // window.
                if timeout.is_some_and(|t| t <= now) {
                    d.engine.handle_timeout(Instant::now());
                }
                // As over HTTP/2: response bytes waiting and none taken by quinn for the idle
                // timeout (a peer that keeps its QUIC flow-control credit shut while it keeps
                // the connection alive) ends the connection and frees what its streams hold.
                if active && stall_check <= now {
                    stall_check = now + stall_every;
                    // A request waiting on its handler (a long poll, a slow upstream) is not
                    // idleness: something for the client to acknowledge keeps both QUIC idle
                    // timers from running out (HTTP/2 needs nothing: its idle timer is ours).
                    if d.engine.awaits_application() {
                        d.engine.keep_alive();
                    }
                    if (d.streams.queued() || d.engine.has_unframed()) && d.progress_at.elapsed() >= state.cfg.timeouts.idle {
                        tracing::info!(%peer, "no response byte taken for timeouts.idle: the peer keeps its credit shut; closing");
                        quic.close(VarInt::from_u64(Code::H3_EXCESSIVE_LOAD.0).unwrap_or_default(), b"stalled");
                        break;
                    }
                }
            }
            _ = &mut shutdown_changed, if drain_deadline.is_none() => {
                d.engine.go_away();
                drain_deadline = Some(tokio::time::Instant::now() + state.cfg.timeouts.drain);
            }
            e = &mut closed => {
                tracing::debug!(%peer, %e, "QUIC connection closed");
                break;
            }
            // A handler that woke itself: polled on the next turn, after a trip through the
            // scheduler (see the HTTP/2 driver).
            () = tokio::task::yield_now(), if d.streams.has_ready() => {}
        }
    }
    let stats = quic.stats();
    tracing::debug!(
        %peer,
        mtu = stats.path.current_mtu,
        cwnd = stats.path.cwnd,
        rtt_us = stats.path.rtt.as_micros() as u64,
        sent_packets = stats.path.sent_packets,
        lost_packets = stats.path.lost_packets,
        congestion_events = stats.path.congestion_events,
        black_holes = stats.path.black_holes_detected,
        "QUIC connection done"
    );
    d.streams.abort_all();
    d.tuner.on_stream_closed(&mut d.tune);
    if !d.closed {
        // A graceful end: let quinn deliver what finished streams still hold (bounded by the
        // drain deadline, or the drain timeout), then close.
        let deadline = drain_deadline.unwrap_or_else(|| tokio::time::Instant::now() + state.cfg.timeouts.drain);
        let _ = tokio::time::timeout_at(deadline, async {
            for s in &mut d.finishing {
                let _ = s.stopped().await;
            }
        })
        .await;
        quic.close(VarInt::from_u64(Code::H3_NO_ERROR.0).unwrap_or_default(), b"");
    }
}

/// Poll `f` once, without a waker to call back: for what quinn may already hold.
fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
    std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop()))
}

/// Read one stream into the connection task until it ends, is reset, or the task stops it.
async fn read_stream(
    id: u64,
    mut rx: RecvStream,
    tx: mpsc::Sender<Input>,
    credit: Option<Arc<Credit>>,
    mut stop: oneshot::Receiver<u64>,
) {
    loop {
        if let Some(c) = &credit {
            tokio::select! {
                () = c.wait_room() => {}
                code = &mut stop => {
                    if let Ok(code) = code {
                        let _ = rx.stop(VarInt::from_u64(code).unwrap_or_default());
                    }
                    return;
                }
            }
        }
        let input = tokio::select! {
            r = rx.read_chunk(READ_CHUNK, true) => match Input::read(id, r) {
                Some(input) => input,
                None => return,
            },
            code = &mut stop => {
                if let Ok(code) = code {
                    let _ = rx.stop(VarInt::from_u64(code).unwrap_or_default());
                }
                return;
            }
        };
        let last = !matches!(input, Input::Data { fin: false, .. });
        if tx.send(input).await.is_err() || last {
            return;
        }
    }
}

impl Driver {
    fn add_out(&mut self, send: SendStream) -> u64 {
        let id = u64::from(send.id());
        let waker = Waker::from(Arc::new(StreamWake { id, woken: self.woken.clone(), notify: self.notify.clone() }));
        self.outs.insert(id, Out { send, queue: VecDeque::new(), fin: false, blocked: false, waker, priority: 0 });
        id
    }

    fn add_reader(&mut self, id: u64, recv: RecvStream, credit: Option<Arc<Credit>>) {
        let (stop_tx, stop_rx) = oneshot::channel();
        self.stops.insert(id, stop_tx);
        tokio::spawn(read_stream(id, recv, self.in_tx.clone(), credit, stop_rx));
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Bi(send, mut recv) => {
                let id = self.add_out(send);
                self.engine.on_stream_opened(Instant::now(), id);
                // A request without a body nearly always arrives whole with its stream: the
                // STREAM frame that opens it carries the head and the FIN. What quinn holds
                // already is read here, at most two chunks (128 KiB, far below BODY_BUFFER, and
                // as much as a reader could have read before the engine paused it for a header
                // section waiting on QPACK encoder data); a reader task, with its spawn and a
                // channel message per chunk, only for a stream with more to come.
                for _ in 0..2 {
                    let Poll::Ready(r) = poll_once(recv.read_chunk(READ_CHUNK, true)) else { break };
                    let Some(input) = Input::read(id, r) else { return };
                    let last = !matches!(input, Input::Data { fin: false, .. });
                    self.input(input);
                    if last {
                        return;
                    }
                }
                // Credit only where a reader reads (a stream read whole has none to pace),
                // paused already if what was read left the head waiting on QPACK.
                let credit = Arc::new(Credit::default());
                credit.set_paused(!self.engine.wants_read(id));
                self.credits.insert(id, credit.clone());
                self.add_reader(id, recv, Some(credit));
            }
            Input::Uni(recv) => {
                let id = u64::from(recv.id());
                self.add_reader(id, recv, None);
            }
            Input::Data { id, data, fin } => {
                if id & 0x2 == 0 {
                    // Request streams: what the receive-window tuner measures.
                    self.tune.received += data.len() as u64;
                }
                self.engine.on_stream_data(Instant::now(), id, &data, fin);
                if fin {
                    self.stops.remove(&id);
                }
                // A request whose header section waits for QPACK encoder-stream data: its reader
                // pauses. Encoder-stream data (on a unidirectional stream) may unblock any of
                // them (RFC 9204 §2.1.2), so then every reader is looked at; a request stream's
                // own data changes only its own (not every stream's, on every chunk of every
                // upload).
                if id & 0x2 == 0 {
                    if let Some(c) = self.credits.get(&id) {
                        c.set_paused(!self.engine.wants_read(id));
                    }
                } else {
                    for (&sid, c) in &self.credits {
                        c.set_paused(!self.engine.wants_read(sid));
                    }
                }
            }
            Input::Reset { id, code } => {
                self.stops.remove(&id);
                self.engine.on_stream_reset(Instant::now(), id, code);
            }
        }
    }

    /// Pull writes from the engine, in its order, while quinn takes them.
    fn pump(&mut self) {
        while !self.closed {
            let Some(t) = self.engine.poll_transmit() else { break };
            match t {
                Transmit::Write { stream, data, body, fin } => {
                    let urgency = self.engine.priority(stream).map(|p| p.urgency);
                    let Some(out) = self.outs.get_mut(&stream) else { continue };
                    if let Some(u) = urgency {
                        let p = quinn_priority(u);
                        if p != out.priority {
                            out.priority = p;
                            let _ = out.send.set_priority(p);
                        }
                    }
                    for b in [data, body] {
                        if !b.is_empty() {
                            out.queue.push_back(b);
                        }
                    }
                    out.fin |= fin;
                    self.flush(stream);
                }
                Transmit::Reset { stream, code } => {
                    if let Some(mut out) = self.outs.remove(&stream) {
                        let _ = out.send.reset(VarInt::from_u64(code.0).unwrap_or_default());
                    }
                }
                Transmit::StopSending { stream, code } => {
                    if let Some(stop) = self.stops.remove(&stream) {
                        let _ = stop.send(code.0);
                    }
                }
                Transmit::Close { code, reason } => {
                    self.quic.close(VarInt::from_u64(code.0).unwrap_or_default(), reason.as_bytes());
                    self.closed = true;
                }
            }
        }
    }

    fn flush(&mut self, id: u64) {
        let Some(out) = self.outs.get_mut(&id) else { return };
        let mut flushed = out.flush(self.pace.as_deref());
        if matches!(flushed, Flushed::Blocked) && out.priority >= quinn_priority(URGENT) {
            // An urgent stream does not wait for room in quinn's send window behind less urgent
            // data that filled it: the window is raised above anything quinn can hold now by
            // what the stream has queued, and quinn sends the most urgent stream first (the
            // next tuning pass sets the window back, which leaves what was written). Without
            // it a response head waited 190–390 ms at 20 Mbit/s for quinn's buffer to drain
            // below a window the bound had just shrunk (h3_priority test, traced).
            let want: u64 = out.queue.iter().map(|b| b.len() as u64).sum::<u64>().max(1);
            let now = Instant::now();
            let high = if now.duration_since(self.send_window_high.1) < Duration::from_secs(1) {
                self.send_window_high.0.max(self.send_window)
            } else {
                self.send_window
            };
            // Not recorded as the high-water mark: repeated raises (a QPACK stream's many small
            // writes) must not ratchet the window up.
            self.send_window = high + want;
            self.quic.set_send_window(self.send_window);
            let Some(out) = self.outs.get_mut(&id) else { return };
            flushed = out.flush(self.pace.as_deref());
        }
        let Some(out) = self.outs.get_mut(&id) else { return };
        match flushed {
            Flushed::Done => {
                if std::mem::take(&mut out.blocked) {
                    self.engine.on_stream_writable(id);
                }
            }
            Flushed::Finished => {
                if let Some(out) = self.outs.remove(&id) {
                    self.finishing.push(out.send);
                    if self.finishing.len() >= self.prune_at {
                        // Delivered (or stopped by the peer): nothing left to wait for.
                        self.finishing.retain_mut(|s| poll_once(s.stopped()).is_pending());
                        self.prune_at = (2 * self.finishing.len()).max(PRUNE_FIRST);
                    }
                }
            }
            Flushed::Blocked => {
                if !out.blocked {
                    out.blocked = true;
                    self.engine.on_stream_blocked(id);
                }
            }
            Flushed::Stopped(code) => {
                self.outs.remove(&id);
                match code {
                    Some(code) => self.engine.on_stop_sending(Instant::now(), id, code),
                    None => self.engine.on_stream_reset(Instant::now(), id, Code::H3_REQUEST_CANCELLED.0),
                }
            }
        }
    }

    /// Flush the streams quinn woke, most urgent first. quinn wakes every stream blocked on the
    /// connection's send window at once when room frees, in its own order; the first to write
    /// takes the room. Without the order a font blocked among twenty image streams got about a
    /// twenty-first of each ACK's room (the pageload experiment's font took 1.0–1.6 s over
    /// HTTP/3 at 5 Mbit/s, with the bottleneck queue short).
    fn on_woken(&mut self) {
        let mut ids: Vec<u64> = self.woken.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
        ids.sort_by_key(|id| (std::cmp::Reverse(self.outs.get(id).map_or(i32::MIN, |o| o.priority)), *id));
        ids.dedup();
        for id in ids {
            self.flush(id);
        }
    }

    /// Give quinn a send window of `window` bytes.
    fn set_send_window(&mut self, now: Instant, window: u64) {
        self.send_window = window;
        if window >= self.send_window_high.0 || now.duration_since(self.send_window_high.1) >= Duration::from_secs(1) {
            self.send_window_high = (window, now);
        }
        self.quic.set_send_window(window);
    }

    /// quinn's send window from its congestion window, and the receive window from the tuner.
    fn tune_windows(&mut self, now: Instant) {
        if let Some(p) = &self.pace {
            p.set_guarded(self.engine.mixed_urgencies());
        }
        let stats = self.quic.stats();
        let window = send_window(stats.path.cwnd, self.state.h3.quantum);
        if worth_setting(self.send_window, window) {
            self.set_send_window(now, window);
        }
        let target = self.tuner.on_stream_data(&mut self.tune, now, Some(self.quic.rtt()));
        if target > self.window {
            self.window = target;
            self.quic.set_receive_window(VarInt::from_u32(target));
        }
    }

    /// Hand framed bytes back to the handlers as room in their queues.
    fn report_sent(&mut self) {
        let sent = &mut self.sent;
        self.engine.drain_sent(|id, n| sent.push((id, n)));
        if !self.sent.is_empty() {
            self.progress_at = Instant::now();
        }
        for (id, n) in self.sent.drain(..) {
            self.streams.sent(&mut self.engine, id, n);
        }
    }

    fn handle_events(&mut self) {
        let peer = self.peer;
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Request { stream, head, end_stream } => {
                    // Request-body credit: the stream's reader waits while the handler holds
                    // more than BODY_BUFFER unconsumed bytes. (No body, no credit to return.)
                    let on_consumed = (!end_stream).then(|| {
                        let credit = self.credits.get(&stream).cloned().unwrap_or_default();
                        Arc::new(move |n| credit.consumed(n)) as Arc<dyn Fn(usize) + Send + Sync>
                    });
                    self.streams.start(&mut self.engine, stream, Box::new(head), end_stream, on_consumed);
                }
                Event::Data { stream, data, end_stream } => self.body(stream, data, end_stream),
                Event::Trailers { stream, fields } => self.streams.trailers(stream, fields),
                Event::HeaderTooLarge { stream } => {
                    // RFC 9114 §4.2.2: 431, and the engine has stopped reading the request.
                    let _ = self.engine.send_response(stream, 431, Vec::new(), true);
                }
                Event::StreamReset { stream, error } => {
                    self.streams.reset(stream);
                    // The engine's Transmit::Reset that comes with it resets our side (dropping
                    // the stream here would finish it cleanly instead).
                    tracing::debug!(%peer, stream, %error, "HTTP/3 stream reset");
                }
                Event::GoAway { .. } => {
                    tracing::debug!(%peer, "peer sent GOAWAY");
                    self.engine.go_away();
                }
                Event::ConnectionError(e) => tracing::info!(%peer, %e, "HTTP/3 connection error"),
            }
        }
        // A handler that dropped its request body: read no more of it.
        for id in self.streams.take_unwanted() {
            self.engine.stop_reading(id);
        }
        self.streams.sweep(&mut self.engine);
        // Credits live from the start of the stream's reader (before its request event, if its
        // head waits on QPACK) to its end.
        let (streams, engine) = (&self.streams, &self.engine);
        self.credits.retain(|id, _| streams.contains(*id) || engine.buffered(*id).is_some() || engine.wants_read(*id));
    }

    fn body(&mut self, stream: u64, data: Bytes, end_stream: bool) {
        let credit = self.credits.get(&stream).cloned();
        let n = data.len();
        let delivered = !data.is_empty() && self.streams.contains(stream) && !self.streams.body_unwanted(stream);
        if let (true, Some(c)) = (delivered, &credit) {
            c.held.fetch_add(n as i64, Ordering::AcqRel);
        }
        match self.streams.body(stream, data, end_stream, Some(self.window)) {
            BodyVerdict::Taken => {}
            BodyVerdict::TooLarge => self.engine.reset(stream, Code::H3_REQUEST_CANCELLED),
            BodyVerdict::Unwanted => {
                if let (true, Some(c)) = (delivered, &credit) {
                    c.consumed(n);
                }
                self.engine.stop_reading(stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_window_follows_the_congestion_window() {
        assert_eq!(send_window(14_720, 16_384), 2 * 14_720 + 65_536);
        assert_eq!(send_window(4_000_000, 16_384), 8_065_536);
        // Only changes of more than an eighth are passed on.
        assert!(worth_setting(0, 100_000));
        assert!(!worth_setting(800_000, 850_000));
        assert!(worth_setting(800_000, 950_000) && worth_setting(800_000, 650_000));
    }
}
