//! One HTTP/3 connection's state between waits, in one struct, and what happens on each kind
//! of wake-up: a turn before the wait ([`Driver::turn`]: engine events, handler commands, the
//! engine's writes to quinn), then [`Driver::on_input`], [`Driver::on_command`],
//! [`Driver::on_woken`], [`Driver::on_timer`] or [`Driver::on_stop`] for what woke it
//! (quinn's `ConnectionDriver` is the model). `super::serve` owns the waiting.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::{RecvStream, SendStream, VarInt};
use rustc_hash::FxHashMap;
use sluice_h3::{Code, Connection, Event};
use sluice_tune::window::{TuneState, WindowPolicy};
use tokio::sync::{mpsc, oneshot, Notify};

use super::streams::{poll_once, read_stream, Credit, Input, Out, StreamWake};
use super::READ_CHUNK;
use crate::app::respond::ConnInfo;
use crate::io::quic_pace::PaceLink;
use crate::io::stream::{BodyVerdict, Cmd, CmdReceiver, Streams};
use crate::io::Stop;
use crate::message::Proto;
use crate::state::State;
use sluice_tls::certs::Served;

/// Finished streams kept before the first pruning (see `Driver::finishing`).
pub(super) const PRUNE_FIRST: usize = 32;
/// How often at most the driver refreshes quinn's send window and the receive-window tuner: on
/// each pass of its loop at least this long after the last. No timer drives it: while data
/// moves, quinn's stream wakers and the readers' input bring the loop round; while nothing
/// moves, there is nothing to tune.
const TUNE_EVERY: Duration = Duration::from_millis(2);

/// Keep going, or end the connection.
pub(super) type Step = ControlFlow<()>;

/// Everything one connection task works with.
pub(super) struct Driver {
    pub(super) quic: quinn::Connection,
    /// The in-flight bound's link to this connection's congestion controller (`[quic]
    /// limit_inflight`).
    pub(super) pace: Option<Arc<PaceLink>>,
    pub(super) engine: Connection,
    pub(super) state: Arc<State>,
    pub(super) peer: SocketAddr,
    /// Keyed by stream id, Fx-hashed as the engine's maps are: the ids are the client's, but
    /// QUIC makes it open them in order, and it may have at most the stream limit open.
    pub(super) outs: FxHashMap<u64, Out>,
    /// Readers to stop (STOP_SENDING with the code sent).
    pub(super) stops: FxHashMap<u64, oneshot::Sender<u64>>,
    pub(super) credits: FxHashMap<u64, Arc<Credit>>,
    pub(super) streams: Streams,
    /// The handlers' commands.
    pub(super) cmd_rx: CmdReceiver,
    pub(super) woken: Arc<Mutex<Vec<u64>>>,
    pub(super) notify: Arc<Notify>,
    /// What the reader tasks bring in.
    pub(super) in_tx: mpsc::Sender<Input>,
    pub(super) in_rx: mpsc::Receiver<Input>,
    /// Stream ids and bytes the engine framed, between `drain_sent` and the stream layer.
    pub(super) sent: Vec<(u64, usize)>,
    /// When the engine last framed response bytes, or had none waiting (see `stalled`).
    pub(super) progress_at: Instant,
    /// Finished request streams whose data quinn may still be delivering, kept so that a
    /// graceful end can wait for the peer to acknowledge it all (dropping a finished stream
    /// does not stop its delivery; closing the connection does). Pruned of delivered ones as it
    /// doubles: at most about twice the streams the peer may have open, since quinn frees a
    /// stream's count only once its data is acknowledged. Not a task per stream: a spawn, a
    /// wake-up and a join for every response.
    pub(super) finishing: Vec<SendStream>,
    /// The length of `finishing` that triggers the next pruning.
    pub(super) prune_at: usize,
    /// The send window given to quinn last.
    pub(super) send_window: u64,
    /// The largest send window the tuning gave in the last second, and when: about the most
    /// quinn can hold (unacknowledged plus unsent), which an urgent stream's raise goes past.
    pub(super) send_window_high: (u64, Instant),
    /// Receive-window tuning of the whole connection (one "stream" for the tuner).
    pub(super) tuner: sluice_tune::autotune::AutoTune,
    pub(super) tune: TuneState,
    pub(super) tuned: Instant,
    pub(super) window: u32,
    pub(super) closed: bool,
    /// Set by shutdown: when the streams in progress are given up.
    pub(super) drain_deadline: Option<tokio::time::Instant>,
    /// A reload's retirement: its GOAWAYs at the connection's next pause.
    retirement: crate::io::Retirement,
    /// Since when no stream has been open.
    idle_since: Option<tokio::time::Instant>,
    pub(super) stall_every: Duration,
    pub(super) stall_check: tokio::time::Instant,
    /// Heads are encoded when queued: the `Date` is brought up to date before each turn's
    /// heads and before a command's.
    pub(super) date: crate::io::date::Stamp,
    /// Whether a stream was open at the last turn, and the engine's timeout then: what the
    /// timer that follows the turn was set for.
    pub(super) active: bool,
    pub(super) timeout: Option<tokio::time::Instant>,
    /// Its open streams as the metrics last counted them.
    pub(super) open_counted: usize,
    /// CONNECT-UDP streams' datagram queues by quarter stream id (RFC 9297 §2.1), shared with
    /// the task reading the connection's QUIC datagrams: made by the first such request.
    datagram_routes: Option<Routes>,
}

/// Where QUIC datagrams go: the queue of the stream whose id / 4 they start with.
type Routes = Arc<Mutex<FxHashMap<u64, mpsc::Sender<Bytes>>>>;

/// HTTP Datagrams queued per CONNECT-UDP stream for its tunnel (each at most a QUIC
/// datagram, about 1,400 bytes); more are dropped.
const DATAGRAM_QUEUE: usize = 64;

impl Driver {
    /// The driver of `quic`, whose control and QPACK streams are `uni` (opened in that order),
    /// served for `served`.
    pub(super) fn new(
        quic: quinn::Connection,
        pace: Option<Arc<PaceLink>>,
        uni: Vec<SendStream>,
        served: Option<Served>,
        state: Arc<State>,
        stop: Stop,
    ) -> Self {
        let peer = quic.remote_address();
        let ids: Vec<u64> = uni.iter().map(|s| u64::from(s.id())).collect();
        let mut cfg = state.h3.clone();
        cfg.origins = served.as_ref().and_then(Served::origins);
        let engine = Connection::new(cfg, ids[0], ids[1], ids[2]);
        let mut info = ConnInfo::new(peer, true, None, served);
        if state.cfg.access_log == crate::config::AccessLogFormat::Json {
            // QUIC is TLS 1.3 (RFC 9001); quinn does not say which suite or whether it resumed.
            info.tls_info = Some(Arc::new(crate::message::accesslog::TlsInfo {
                version: Some("TLSv1_3"),
                cipher: None,
                alpn: Some("h3"),
                resumed: None,
            }));
        }
        let info = Arc::new(info);
        let (in_tx, in_rx) = mpsc::channel::<Input>(64);
        let (streams, cmd_rx) = Streams::new(state.clone(), info, Proto::Http3);
        let f = &state.cfg.flow;
        let limits = sluice_tune::autotune::Limits {
            initial_stream: f.initial_connection_window,
            initial_connection: f.initial_connection_window,
            max_stream: f.max_connection_window,
            max_connection: f.max_connection_window,
            budget: state.window_budget.clone(),
        };
        let stall_every = state.cfg.timeouts.idle / 4;
        let mut d = Self {
            quic,
            pace,
            engine,
            peer,
            outs: FxHashMap::default(),
            stops: FxHashMap::default(),
            credits: FxHashMap::default(),
            streams,
            cmd_rx,
            woken: Arc::new(Mutex::new(Vec::new())),
            notify: Arc::new(Notify::new()),
            in_tx,
            in_rx,
            sent: Vec::new(),
            progress_at: Instant::now(),
            finishing: Vec::new(),
            prune_at: PRUNE_FIRST,
            send_window: 0,
            send_window_high: (0, Instant::now()),
            tuner: sluice_tune::autotune::AutoTune::new(limits),
            tune: TuneState { window: f.initial_connection_window, ..TuneState::default() },
            tuned: Instant::now(),
            window: f.initial_connection_window,
            closed: false,
            drain_deadline: None,
            retirement: crate::io::Retirement::default(),
            idle_since: None,
            stall_every,
            stall_check: tokio::time::Instant::now() + stall_every,
            date: crate::io::date::Stamp::default(),
            active: false,
            timeout: None,
            open_counted: 0,
            datagram_routes: None,
            state,
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
        d.on_stop(stop);
        d
    }

    /// What the connection does before it waits: engine events to the stream layer, the
    /// handlers' commands to the engine, the windows retuned now and then, the engine's writes
    /// to quinn. `Break` when the connection is over.
    pub(super) fn turn(&mut self) -> Step {
        crate::message::metrics::set_turn(Some(Instant::now()));
        let step = self.turn_timed();
        crate::message::metrics::set_turn(None);
        let open = self.engine.open_streams();
        crate::message::metrics::streams_open(Proto::Http3, open as i64 - self.open_counted as i64);
        self.open_counted = open;
        step
    }

    fn turn_timed(&mut self) -> Step {
        if let Some(v) = self.date.due() {
            self.engine.set_date(v);
        }
        // Streams answered inline have no handler state: the engine holds what they wait for.
        if !self.streams.queued() && !self.engine.has_unframed() {
            self.progress_at = Instant::now();
        }
        self.handle_events();
        self.drain_commands();
        // Woken handlers run now (see the HTTP/2 driver).
        if self.streams.has_ready() {
            self.streams.poll_ready(&mut self.engine);
            self.drain_commands();
        }
        if self.tuned.elapsed() >= TUNE_EVERY {
            self.tuned = Instant::now();
            self.tune_windows(self.tuned);
        }
        self.pump();
        self.report_sent();
        if self.closed || (self.engine.is_done() && !self.outs.keys().any(|&id| id & 0x2 == 0)) {
            return Step::Break(());
        }
        Step::Continue(())
    }

    fn drain_commands(&mut self) {
        while let Some(cmd) = self.cmd_rx.try_recv() {
            self.streams.apply(&mut self.engine, cmd);
        }
    }

    /// When the turn's wait must end at the latest: the earliest deadline.
    pub(super) fn before_wait(&mut self) -> Option<tokio::time::Instant> {
        self.timeout = self.engine.poll_timeout().map(tokio::time::Instant::from_std);
        self.active = !self.streams.is_empty() || self.engine.open_streams() > 0;
        if self.active {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(tokio::time::Instant::now());
        }
        [
            self.timeout,
            self.active.then_some(self.stall_check),
            self.drain_deadline,
            self.retirement.deadline(self.idle_since),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// What the reader tasks brought, all of it that is there.
    pub(super) fn on_input(&mut self, input: Input) {
        self.input(input);
        while let Ok(input) = self.in_rx.try_recv() {
            self.input(input);
        }
    }

    /// A handler's command (a head among them: encoded now, with the second's `Date`).
    pub(super) fn on_command(&mut self, cmd: Cmd) {
        if let Some(v) = self.date.due() {
            self.engine.set_date(v);
        }
        self.streams.apply(&mut self.engine, cmd);
    }

    /// The timer fired: whichever deadline is due.
    pub(super) fn on_timer(&mut self) -> Step {
        let now = tokio::time::Instant::now();
        if self.drain_deadline.is_some_and(|d| d <= now) {
            return Step::Break(());
        }
        match self.retirement.due(now, self.idle_since) {
            Some(crate::io::GoAway::Announce) => self.engine.go_away_announce(),
            Some(crate::io::GoAway::Final) => self.engine.go_away(),
            None => {}
        }
        // The engine's timers: header timeouts of request streams, the reset budget's window.
        if self.timeout.is_some_and(|t| t <= now) {
            self.engine.handle_timeout(Instant::now());
        }
        // As over HTTP/2: response bytes waiting and none taken by quinn for the idle timeout
        // (a peer that keeps its QUIC flow-control credit shut while it keeps the connection
        // alive) ends the connection and frees what its streams hold.
        if self.active && self.stall_check <= now {
            self.stall_check = now + self.stall_every;
            // A request waiting on its handler (a long poll, a slow upstream) is not idleness:
            // something for the client to acknowledge keeps both QUIC idle timers from running
            // out (HTTP/2 needs nothing: its idle timer is ours).
            if self.engine.awaits_application() {
                self.engine.keep_alive();
            }
            if (self.streams.queued() || self.engine.has_unframed())
                && self.progress_at.elapsed() >= self.state.cfg.timeouts.idle
            {
                tracing::info!(peer = %self.peer, "no response byte taken for timeouts.idle: the peer keeps its credit shut; closing");
                crate::message::metrics::limit(crate::message::metrics::Limit::Timeout);
                self.quic.close(VarInt::from_u64(Code::H3_EXCESSIVE_LOAD.0).unwrap_or_default(), b"stalled");
                return Step::Break(());
            }
        }
        Step::Continue(())
    }

    /// The server asks the connection to stop: as over HTTP/2 (`io::h2::driver`), a reload's
    /// GOAWAY announced once the connection pauses and then final, with no deadline; a
    /// shutdown's final at once, with one.
    pub(super) fn on_stop(&mut self, stop: Stop) {
        if self.retirement.on_stop(stop) {
            self.engine.go_away();
            self.drain_deadline = Some(tokio::time::Instant::now() + self.state.cfg.timeouts.drain);
        }
    }

    /// The connection is over: its handlers are stopped and, unless it was closed already,
    /// what finished streams hold is delivered (within the drain deadline) before the close.
    pub(super) async fn finish(mut self) {
        crate::message::metrics::streams_open(Proto::Http3, -(self.open_counted as i64));
        let stats = self.quic.stats();
        tracing::debug!(
            peer = %self.peer,
            mtu = stats.path.current_mtu,
            cwnd = stats.path.cwnd,
            rtt_us = stats.path.rtt.as_micros() as u64,
            sent_packets = stats.path.sent_packets,
            lost_packets = stats.path.lost_packets,
            congestion_events = stats.path.congestion_events,
            black_holes = stats.path.black_holes_detected,
            "QUIC connection done"
        );
        crate::message::metrics::quic_closed(
            stats.path.rtt,
            stats.path.lost_packets,
            stats.path.sent_packets,
            stats.path.cwnd,
        );
        self.streams.abort_all();
        self.tuner.on_stream_closed(&mut self.tune);
        if !self.closed {
            // A graceful end: let quinn deliver what finished streams still hold (bounded by
            // the drain deadline, or the drain timeout), then close.
            let deadline =
                self.drain_deadline.unwrap_or_else(|| tokio::time::Instant::now() + self.state.cfg.timeouts.drain);
            let finishing = &mut self.finishing;
            let _ = tokio::time::timeout_at(deadline, async {
                for s in finishing {
                    let _ = s.stopped().await;
                }
            })
            .await;
            self.quic.close(VarInt::from_u64(Code::H3_NO_ERROR.0).unwrap_or_default(), b"");
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

    pub(super) fn input(&mut self, input: Input) {
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

    fn handle_events(&mut self) {
        let peer = self.peer;
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Request { stream, head, end_stream } => {
                    let datagrams = self.datagrams_for(stream, &head);
                    // Request-body credit: the stream's reader waits while the handler holds
                    // more than BODY_BUFFER unconsumed bytes. (No body, no credit to return.)
                    let on_consumed = (!end_stream).then(|| {
                        let credit = self.credits.get(&stream).cloned().unwrap_or_default();
                        Arc::new(move |n| credit.consumed(n)) as Arc<dyn Fn(usize) + Send + Sync>
                    });
                    self.streams.start(&mut self.engine, stream, Box::new(head), end_stream, on_consumed, datagrams);
                }
                Event::Data { stream, data, end_stream } => self.body(stream, data, end_stream),
                Event::Trailers { stream, fields } => self.streams.trailers(stream, fields),
                Event::HeaderTooLarge { stream } => {
                    crate::message::metrics::limit(crate::message::metrics::Limit::HeaderList);
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

    /// The QUIC datagram side of a CONNECT-UDP request on `stream`, when both sides agreed to
    /// HTTP Datagrams (RFC 9297 §2.1.1) and quinn to QUIC DATAGRAM frames (RFC 9221).
    fn datagrams_for(&mut self, stream: u64, head: &sluice_http::RequestHead) -> Option<crate::message::Datagrams> {
        let udp = &head.method[..] == b"CONNECT"
            && head.protocol.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(b"connect-udp"));
        if !udp || !self.engine.datagrams() || self.quic.max_datagram_size().is_none() {
            return None;
        }
        let routes = match &self.datagram_routes {
            Some(r) => r.clone(),
            None => {
                let r = Routes::default();
                tokio::spawn(read_datagrams(self.quic.clone(), r.clone()));
                self.datagram_routes = Some(r.clone());
                r
            }
        };
        let (tx, rx) = mpsc::channel(DATAGRAM_QUEUE);
        {
            let mut map = routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            map.retain(|_, t| !t.is_closed());
            map.insert(stream / 4, tx);
        }
        let quic = self.quic.clone();
        let send = Box::new(move |payload: &[u8]| {
            quic.send_datagram(sluice_http::capsule::udp_quic_datagram(stream, payload)).is_ok()
        });
        Some(crate::message::Datagrams { rx, send })
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
            BodyVerdict::TooLarge => {
                crate::message::metrics::limit(crate::message::metrics::Limit::RequestBody);
                self.engine.reset(stream, Code::H3_REQUEST_CANCELLED);
            }
            BodyVerdict::Unwanted => {
                if let (true, Some(c)) = (delivered, &credit) {
                    c.consumed(n);
                }
                self.engine.stop_reading(stream);
            }
        }
    }
}

/// Hand each QUIC datagram of the connection to its stream's queue, until the connection
/// ends. A datagram for no open CONNECT-UDP stream is dropped (RFC 9297 §2.1 allows a
/// receiver to drop those it cannot yet place); one for a full queue too, and counted.
async fn read_datagrams(quic: quinn::Connection, routes: Routes) {
    while let Ok(d) = quic.read_datagram().await {
        let Some((quarter, n)) = sluice_http::varint::decode(&d) else { continue };
        let tx = routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&quarter).cloned();
        if let Some(tx) = tx {
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(d.slice(n..)) {
                crate::handlers::tunnel::dropped(1);
            }
        }
    }
}
