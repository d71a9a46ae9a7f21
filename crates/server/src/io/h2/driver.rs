//! The connection's state between waits, in one struct, and what happens on each kind of
//! wake-up: a turn before the wait ([`Driver::turn`]: engine events, handler commands, the next
//! write), then [`Driver::on_read`], [`Driver::on_write_done`], [`Driver::on_command`],
//! [`Driver::on_timer`] or [`Driver::on_stop`] for what woke it (quinn's
//! `ConnectionDriver` is the model). `super::serve` owns the waiting.

use std::ops::ControlFlow;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use sluice_h2::{Connection, Event, Reason, Transmit};

use super::budget::{crowds, write_budget, Allowance};
use super::buffers::{set_mark, ReadBufs, BUSY_READ, IDLE_READ, IDLE_WRITE, SHRINK_AFTER};
use crate::app::respond::ConnInfo;
use crate::io::mailbox::{Receiver, Sender};
use crate::io::stream::{BodyVerdict, Cmd, CmdReceiver, Streams};
use crate::io::Stop;
use crate::message::Proto;
use crate::state::State;
use sluice_tls::split::{ReadChunks, ReadHalf};
use sluice_tune::inflight::{InflightCap, URGENT};
use sluice_tune::recv_mark::RecvMark;

/// How often the driver reads the RTT from TCP_INFO while input arrives.
const RTT_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// How often the in-flight bound learns that the engine has nothing to frame: often within its
/// shortest round (1 ms) to mark it application-limited. A TCP_INFO reading only where the bound
/// needs one for that (`InflightCap::note_idle`).
const IDLE_READING_EVERY: std::time::Duration = std::time::Duration::from_micros(250);

/// Keep going, or end the connection.
pub(super) type Step = ControlFlow<()>;

/// One HTTP/2 connection's engine, streams, buffers and deadlines.
pub(super) struct Driver<S> {
    state: Arc<State>,
    info: Arc<ConnInfo>,
    fd: RawFd,
    conn: Connection,
    pub(super) streams: Streams,
    /// The handlers' commands.
    pub(super) cmd_rx: CmdReceiver,
    /// The writer: one buffer in flight, handed back when written.
    wq_tx: Sender<Transmit>,
    pub(super) done_rx: Receiver<std::io::Result<Transmit>>,
    /// The buffer to fill next; `None` while it is with the writer.
    pub(super) spare: Option<Transmit>,
    pub(super) rd: ReadHalf<S>,
    pub(super) rbuf: ReadBufs,
    /// A TLS 1.3 stream's decrypted records, read without a copy (see `ReadChunks`).
    pub(super) chunks: Vec<BytesMut>,
    /// Bytes the engine reported framed per stream, handed on to the stream layer.
    sent: Vec<(u32, usize)>,
    resets: ResetLog,
    pub(super) eof: bool,
    /// The writer is stuck on a socket the peer does not read: it is aborted, not awaited.
    pub(super) stuck: bool,
    /// Since when the connection has had no stream (its buffers shrink after a while).
    idle_since: Option<tokio::time::Instant>,
    rtt_sampled: Instant,
    /// When the write in flight must have completed: a peer that stops reading (a full TCP
    /// window) cannot hold the connection longer than the idle timeout.
    write_deadline: Option<tokio::time::Instant>,
    pub(super) drain_deadline: Option<tokio::time::Instant>,
    /// A reload's retirement: its GOAWAYs at the connection's next pause.
    retirement: crate::io::Retirement,
    /// A new connection ramps as a single download until it crowds (see `crowds`).
    pace: Option<InflightCap>,
    retry_at: Option<tokio::time::Instant>,
    idle_reading: Instant,
    /// Whether a write went out after the last TCP_INFO reading (see `InflightCap::note_idle`).
    wrote_since_reading: bool,
    /// What the last reading left for the writes that follow it (see `Allowance`).
    allowance: Option<Allowance>,
    /// The receive low-water mark while the peer streams bodies fast (`sluice_tune::recv_mark`).
    mark: Option<RecvMark>,
    /// When the engine last framed response bytes, or had none waiting: a peer that keeps
    /// its flow-control windows shut while sending PINGs holds its streams' memory otherwise.
    progress_at: tokio::time::Instant,
    stall_every: std::time::Duration,
    stall_check: tokio::time::Instant,
    date: crate::io::date::Stamp,
    /// Whether a stream was open at the last turn, and the engine's timeout then: what the
    /// timer that follows the turn was set for.
    active: bool,
    timeout: Option<tokio::time::Instant>,
    /// Its open streams as the metrics last counted them.
    open_counted: usize,
}

impl<S: ReadChunks> Driver<S> {
    /// A driver for a connection read through `rd`, written by the writer task fed through
    /// `wq_tx`; `prefix` holds bytes already read (h2c sniffing).
    #[allow(clippy::too_many_arguments)] // each is a part of the connection made by `serve`
    pub(super) fn new(
        state: Arc<State>,
        info: Arc<ConnInfo>,
        fd: RawFd,
        rd: ReadHalf<S>,
        prefix: &[u8],
        wq_tx: Sender<Transmit>,
        done_rx: Receiver<std::io::Result<Transmit>>,
        stop: Stop,
    ) -> Self {
        let mut cfg = state.h2.clone();
        // RFC 8336: the origin set of the certificate this connection's SNI picked.
        cfg.origins = info.served.as_ref().and_then(sluice_tls::certs::Served::origins);
        let mut conn = Connection::new(cfg, state.window_policy(), Instant::now());
        // The stream layer learns from the engine when a stream is gone (Streams::sweep).
        conn.report_closed();
        if !prefix.is_empty() {
            conn.handle_input(Instant::now(), prefix);
        }
        let (streams, cmd_rx) = Streams::new(state.clone(), info.clone(), Proto::Http2);
        let now = tokio::time::Instant::now();
        let stall_every = state.cfg.timeouts.idle / 4;
        let mut d = Self {
            fd,
            conn,
            streams,
            cmd_rx,
            wq_tx,
            done_rx,
            spare: Some(Transmit::with_capacity(IDLE_WRITE)),
            rd,
            rbuf: ReadBufs::new(IDLE_READ),
            chunks: Vec::new(),
            sent: Vec::new(),
            resets: ResetLog::default(),
            eof: false,
            stuck: false,
            idle_since: None,
            rtt_sampled: Instant::now().checked_sub(RTT_SAMPLE_EVERY).unwrap_or_else(Instant::now),
            write_deadline: None,
            drain_deadline: None,
            retirement: crate::io::Retirement::default(),
            pace: state.cfg.tcp.limit_inflight.then(|| InflightCap::new().leading().lone()),
            retry_at: None,
            idle_reading: Instant::now(),
            wrote_since_reading: false,
            allowance: None,
            mark: state.cfg.tcp.batch_reads.then(|| RecvMark::new(Instant::now())),
            progress_at: now,
            stall_every,
            stall_check: now + stall_every,
            date: crate::io::date::Stamp::default(),
            active: false,
            timeout: None,
            open_counted: 0,
            state,
            info,
        };
        d.on_stop(stop);
        d
    }

    /// Whether a read is wanted now.
    pub(super) fn reading(&self) -> bool {
        !self.eof && self.conn.wants_read()
    }

    /// What the connection does before it waits: engine events to the stream layer, the
    /// handlers' commands to the engine, then a write if one is due and the writer is free.
    /// `Break` when the connection is over.
    pub(super) fn turn(&mut self, now: Instant) -> Step {
        crate::message::metrics::set_turn(Some(now));
        let step = self.turn_timed(now);
        crate::message::metrics::set_turn(None);
        let open = self.conn.open_streams();
        crate::message::metrics::streams_open(Proto::Http2, open as i64 - self.open_counted as i64);
        self.open_counted = open;
        step
    }

    fn turn_timed(&mut self, now: Instant) -> Step {
        // Heads are encoded when framed, below: with the second's `Date`.
        if let Some(d) = self.date.due() {
            self.conn.set_date(d);
        }
        // Streams answered inline have no handler state: the engine holds what they wait for.
        if !self.streams.queued() && !self.conn.has_unframed() {
            self.progress_at = tokio::time::Instant::from_std(now);
        }
        handle_events(&mut self.conn, &mut self.streams, &self.info, &mut self.resets);
        self.drain_commands();
        // Woken handlers run now; what they answer is applied before the write below.
        if self.streams.has_ready() {
            self.streams.poll_ready(&mut self.conn);
            self.drain_commands();
        }
        self.write(now)?;
        if self.spare.is_some() && self.conn.is_done() {
            return Step::Break(());
        }
        if self.eof && self.spare.is_some() && self.streams.is_empty() && !self.conn.has_unframed() {
            return Step::Break(());
        }
        Step::Continue(())
    }

    /// The commands handlers have queued, applied to the engine.
    pub(super) fn drain_commands(&mut self) {
        while let Some(cmd) = self.cmd_rx.try_recv() {
            self.streams.apply(&mut self.conn, cmd);
        }
    }

    /// Fill and hand the writer a buffer, if the engine has bytes to frame (or the in-flight
    /// bound is due a reading) and the writer has none.
    fn write(&mut self, now: Instant) -> Step {
        let conn = &mut self.conn;
        // With nothing to frame there is nothing to budget: the in-flight bound needs a reading
        // now and then to see the connection application-limited, not one per turn of the loop
        // (a bulk upload turns it once per DATA frame consumed: 48,000 TCP_INFO calls per GB).
        let mut budget_due = conn.wants_write()
            || self.pace.is_some() && now.saturating_duration_since(self.idle_reading) >= IDLE_READING_EVERY;
        // An idle moment the bound can note without a reading (see `InflightCap::note_idle`).
        if budget_due
            && self.spare.is_some()
            && !conn.wants_write()
            && self.pace.as_mut().is_some_and(|p| p.note_idle(now, !self.wrote_since_reading))
        {
            self.idle_reading = now;
            budget_due = false;
        }
        if !budget_due {
            self.retry_at = None;
        }
        let Some(mut buf) = self.spare.take_if(|_| budget_due) else { return Step::Continue(()) };
        buf.clear();
        if !conn.wants_write() {
            self.idle_reading = now;
        }
        let urgency = conn.next_urgency();
        let guarded = conn.mixed_urgencies();
        if let Some(p) = self.pace.as_mut() {
            p.set_guarded(guarded);
            if crowds(conn.open_streams(), urgency) {
                p.set_lone(false);
            }
        }
        let reuse = self
            .allowance
            .filter(|_| conn.wants_write() && !self.pace.as_ref().is_some_and(InflightCap::ramping))
            .and_then(|a| a.budget(now, urgency, guarded));
        let b = match reuse {
            Some(b) => b,
            None => {
                let b = write_budget(self.fd, self.pace.as_mut(), conn.wants_write(), urgency, now);
                self.wrote_since_reading = false;
                self.allowance = Some(Allowance::new(now, &b));
                b
            }
        };
        // Held back by the in-flight bound with data waiting: look again shortly.
        self.retry_at = b.retry.filter(|_| conn.wants_write()).map(|d| tokio::time::Instant::now() + d);
        // Urgent data first, in the room only it may use; then the rest, in what the bound
        // leaves once the urgent bytes are counted.
        let urgent = b.urgent > 0 && conn.poll_transmit_into(now, &mut buf, b.urgent, URGENT);
        let rest = b.other.saturating_sub(buf.len());
        if conn.poll_transmit_into(now, &mut buf, rest, u8::MAX) || urgent {
            self.write_deadline = Some(tokio::time::Instant::now() + self.state.cfg.timeouts.idle);
            self.wrote_since_reading = true;
            if let Some(a) = self.allowance.as_mut() {
                a.spend(buf.len());
            }
            if self.wq_tx.send(buf).is_err() {
                return Step::Break(());
            }
        } else {
            self.spare = Some(buf);
        }
        let sent = &mut self.sent;
        conn.drain_sent(|id, n| sent.push((id, n)));
        if !self.sent.is_empty() {
            self.progress_at = tokio::time::Instant::now();
        }
        for (id, n) in self.sent.drain(..) {
            self.streams.sent(conn, u64::from(id), n);
        }
        Step::Continue(())
    }

    /// Size the buffers for what the connection is doing, and say when the turn's wait must
    /// end at the latest: the earliest deadline.
    pub(super) fn before_wait(&mut self) -> Option<tokio::time::Instant> {
        // A busy connection reads and writes in large buffers; one without a stream for
        // SHRINK_AFTER keeps small ones (a 64 KiB read buffer and a written-through 1 MiB
        // write buffer were most of what an idle connection cost). Not at once: a connection
        // whose streams come in bursts keeps its large buffers between them.
        let active = !self.streams.is_empty() || self.conn.open_streams() > 0;
        let read_size = if active { BUSY_READ } else { IDLE_READ };
        if active {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(tokio::time::Instant::now());
        }
        let big = self.rbuf.big() || self.spare.as_ref().is_some_and(|b| b.capacity() > IDLE_WRITE);
        let shrink_at = self.idle_since.filter(|_| big).map(|t| t + SHRINK_AFTER);
        if shrink_at.is_some_and(|t| t <= tokio::time::Instant::now()) {
            self.rbuf.renew(&mut self.conn, IDLE_READ, false);
            self.conn.shrink();
            self.streams.shrink();
            self.cmd_rx.shrink();
            // The writer's queues too (its own side cannot tell a pause from idleness).
            self.wq_tx.shrink();
            self.done_rx.shrink();
            if let Some(buf) = self.spare.as_mut().filter(|b| b.capacity() > IDLE_WRITE) {
                *buf = Transmit::with_capacity(IDLE_WRITE);
            }
        } else if self.rbuf.cur.capacity() < read_size / 4 {
            self.rbuf.renew(&mut self.conn, read_size, true);
        }
        self.active = active;
        self.timeout = self.conn.poll_timeout().map(tokio::time::Instant::from_std);
        // A due `shrink_at` fires the timer at once: the next turn shrinks the buffers.
        [
            self.write_deadline,
            self.timeout,
            active.then_some(self.stall_check),
            self.retry_at.filter(|_| self.spare.is_some()),
            shrink_at,
            self.drain_deadline,
            self.retirement.deadline(self.idle_since),
            self.mark.as_ref().and_then(RecvMark::deadline).map(tokio::time::Instant::from_std),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A read finished: `Ok(n)` bytes are in `rbuf` (or `chunks`), or the peer is gone.
    pub(super) fn on_read(&mut self, r: std::io::Result<usize>) {
        let n = match r {
            Ok(0) | Err(_) => {
                self.eof = true;
                self.conn.handle_eof();
                return;
            }
            Ok(n) => n,
        };
        let conn = &mut self.conn;
        let now = Instant::now();
        // Window tuning measures per RTT: refresh it now and then from TCP_INFO.
        if now.saturating_duration_since(self.rtt_sampled) >= RTT_SAMPLE_EVERY {
            self.rtt_sampled = now;
            if let Some(rtt) = sluice_sys::sock::path_info(self.fd).ok().and_then(|p| p.rtt()) {
                conn.handle_rtt(rtt);
            }
        }
        if self.chunks.is_empty() {
            conn.handle_input_buf(now, self.rbuf.cur.split());
        } else {
            // What a move to a new read buffer carried over goes first (see
            // `ReadBufs::renew`), then each record's plaintext as it is.
            if !self.rbuf.cur.is_empty() {
                conn.handle_input_buf(now, self.rbuf.cur.split());
            }
            for chunk in self.chunks.drain(..) {
                conn.handle_input_buf(now, chunk);
            }
        }
        if let Some(m) = self.mark.as_mut() {
            m.on_read(now, n);
            if let Some(v) = m.update(now, || conn.declared_input()) {
                set_mark(self.fd, &self.rd, &mut self.mark, v);
            }
        }
    }

    /// The writer handed the buffer back (`None` or an error: it is gone).
    pub(super) fn on_write_done(&mut self, done: Option<std::io::Result<Transmit>>) -> Step {
        match done {
            Some(Ok(buf)) => {
                self.spare = Some(buf);
                self.write_deadline = None;
                Step::Continue(())
            }
            _ => Step::Break(()),
        }
    }

    /// A handler's command.
    pub(super) fn on_command(&mut self, cmd: Cmd) {
        self.streams.apply(&mut self.conn, cmd);
    }

    /// The timer fired: whichever deadline is due.
    pub(super) fn on_timer(&mut self) -> Step {
        let now = tokio::time::Instant::now();
        if self.write_deadline.is_some_and(|d| d <= now) {
            tracing::info!(peer = %self.info.peer, "peer stopped reading: write timed out, closing");
            self.stuck = true;
            crate::message::metrics::limit(crate::message::metrics::Limit::StalledPeer);
            return Step::Break(());
        }
        if self.drain_deadline.is_some_and(|d| d <= now) {
            return Step::Break(());
        }
        match self.retirement.due(now, self.idle_since) {
            Some(crate::io::GoAway::Announce) => self.conn.go_away_announce(),
            Some(crate::io::GoAway::Final) => self.conn.go_away(),
            None => {}
        }
        if self.timeout.is_some_and(|t| t <= now) {
            self.conn.handle_timeout(Instant::now());
        }
        if self.active && self.stall_check <= now {
            self.stall_check = now + self.stall_every;
            if (self.streams.queued() || self.conn.has_unframed())
                && self.progress_at.elapsed() >= self.state.cfg.timeouts.idle
            {
                tracing::info!(peer = %self.info.peer, "no response byte framed for timeouts.idle: the peer keeps its windows shut; closing");
                crate::message::metrics::limit(crate::message::metrics::Limit::Timeout);
                self.conn.abort("stalled: the peer's flow-control windows stayed shut for the idle timeout");
            }
        }
        if self.retry_at.is_some_and(|d| d <= now) {
            self.retry_at = None;
        }
        let conn = &self.conn;
        if let Some(v) = self.mark.as_mut().and_then(|m| m.update(now.into_std(), || conn.declared_input())) {
            set_mark(self.fd, &self.rd, &mut self.mark, v);
        }
        Step::Continue(())
    }

    /// The server asks the connection to stop. Retired by a reload, the connection keeps its
    /// configuration while the peer keeps it busy; once it has had no stream open for
    /// [`crate::io::RETIRE_IDLE`], GOAWAY is announced, and made final a grace period later
    /// (streams the peer sent meanwhile are served); there is no deadline for the streams in
    /// progress. A GOAWAY in the middle of a peer's work fails requests it was about to send
    /// at clients that do not retry them (h2load counts them failed). The server shutting
    /// down: GOAWAY and a deadline.
    pub(super) fn on_stop(&mut self, stop: Stop) {
        if self.retirement.on_stop(stop) {
            self.conn.go_away();
            self.drain_deadline = Some(tokio::time::Instant::now() + self.state.cfg.timeouts.drain);
        }
    }

    /// The connection is over: its handlers are stopped; the read half, for the close.
    pub(super) fn finish(mut self) -> (ReadHalf<S>, bool, bool) {
        crate::message::metrics::streams_open(Proto::Http2, -(self.open_counted as i64));
        self.streams.abort_all();
        if self.resets.suppressed > 0 {
            tracing::info!(peer = %self.info.peer, more = self.resets.suppressed, "more streams reset for peer errors on this connection");
        }
        (self.rd, self.stuck, self.eof)
    }
}

/// Stream resets for peer errors logged at info per connection; more are summed up in one line
/// when the connection ends (a peer must not be able to inflate the log at will).
const LOGGED_RESETS: u32 = 3;

/// How many peer-caused stream resets a connection logged, and how many it did not.
#[derive(Default)]
struct ResetLog {
    logged: u32,
    suppressed: u32,
}

fn handle_events(conn: &mut Connection, streams: &mut Streams, info: &Arc<ConnInfo>, resets: &mut ResetLog) {
    let peer = info.peer;
    while let Some(ev) = conn.poll_event() {
        match ev {
            Event::Request { stream, head, end_stream } => {
                tracing::trace!(stream, path = %String::from_utf8_lossy(head.path.as_deref().unwrap_or_default()), "request");
                // Request-body credit goes back to the peer as the handler consumes bytes.
                let id = u64::from(stream);
                let on_consumed = (!end_stream).then(|| {
                    let release = streams.commands();
                    Arc::new(move |n| {
                        let _ = release.send(Cmd::Release { id, n });
                    }) as Arc<dyn Fn(usize) + Send + Sync>
                });
                streams.start(conn, id, head, end_stream, on_consumed, None);
            }
            Event::Data { stream, data, end_stream } => {
                let window = conn.stream_window(stream);
                match streams.body(u64::from(stream), data, end_stream, window) {
                    BodyVerdict::Taken => {}
                    BodyVerdict::TooLarge => {
                        crate::message::metrics::limit(crate::message::metrics::Limit::RequestBody);
                        conn.reset(stream, Reason::CANCEL);
                    }
                    BodyVerdict::Unwanted => conn.discard_body(Instant::now(), stream),
                }
            }
            Event::Trailers { stream, fields } => streams.trailers(u64::from(stream), fields),
            Event::Reset { stream, error } => {
                streams.reset(u64::from(stream));
                match &error {
                    // The peer's own RST_STREAM, or the connection going away: routine.
                    sluice_h2::Error::Stream {
                        initiator: sluice_h2::Initiator::Remote,
                        detail: "reset by peer",
                        ..
                    }
                    | sluice_h2::Error::Connection { .. } => tracing::debug!(%peer, stream, %error, "stream reset"),
                    // A limit or a protocol rule the peer broke: say so, a few times per
                    // connection; the rest is counted and summed up when the connection ends.
                    _ => {
                        crate::message::metrics::limit(crate::message::metrics::Limit::Streams);
                        if resets.logged < LOGGED_RESETS {
                            resets.logged += 1;
                            tracing::info!(%peer, stream, %error, "stream reset");
                        } else {
                            resets.suppressed += 1;
                            tracing::debug!(%peer, stream, %error, "stream reset");
                        }
                    }
                }
            }
            Event::GoAway { reason } => tracing::debug!(%peer, %reason, "peer sent GOAWAY"),
            Event::ConnectionError(e) => {
                if e.reason() == Reason::NO_ERROR {
                    tracing::debug!(%peer, %e, "connection closing");
                } else {
                    tracing::info!(%peer, %e, "HTTP/2 connection error");
                }
            }
        }
    }
    streams.sweep(conn);
}
