//! The HTTP/2 driver: the only code between the sans-IO engine and the socket.
//!
//! One task per connection owns the engine. Reads feed it; one write is in flight at a time,
//! filled by `poll_transmit` with about what the congestion window can take now (TCP_INFO), so
//! the engine's scheduler decides as late as possible. Requests run through the stream layer
//! shared with HTTP/3 (`io/stream.rs`): handlers talk to this task through commands, and their
//! body chunks need permits that refill only as the engine frames bytes, so the queue between
//! handler and socket is bounded.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_h2::frame::{Head, HEADER_LEN, MAX_FRAME_SIZE};
use sluice_h2::{Connection, Event, Field, Reason, SendError, Transmit};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::app::respond::ConnInfo;
use crate::io::stream::{BodyVerdict, Cmd, Engine, Refused, Streams};
use crate::message::Proto;
use crate::state::State;
use sluice_tls::split::{ReadChunks, ReadHalf};
use sluice_tune::inflight::{InflightCap, URGENT};
use sluice_tune::recv_mark::RecvMark;

/// How often the driver reads the RTT from TCP_INFO while input arrives.
const RTT_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Read buffer while the connection has no stream open, and while it has; a new one is taken
/// when less than a quarter of that is left (reads go into what follows the last one, and the
/// engine keeps slices of them, so a buffer is freed when its last DATA payload is). Idle, 256
/// bytes: over TLS the records are read into rustls's own buffer and this one takes plaintext,
/// so a larger request head only takes a few more reads (1 KiB cost 0.7 kB per idle connection,
/// 4 KiB 3 kB; `scripts/bench-idle.sh`).
const IDLE_READ: usize = 256;
const BUSY_READ: usize = 64 * 1024;
/// Write buffer kept while the connection has no stream open: none (the next write allocates;
/// keeping 16 KiB cost 4.6 kB per idle connection, `scripts/bench-idle.sh`).
const IDLE_WRITE: usize = 0;
/// How long a connection has no stream open before its buffers shrink to the idle sizes.
const SHRINK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the in-flight bound learns that the engine has nothing to frame: often within its
/// shortest round (1 ms) to mark it application-limited. A TCP_INFO reading only where the bound
/// needs one for that (`InflightCap::note_idle`).
const IDLE_READING_EVERY: std::time::Duration = std::time::Duration::from_micros(250);

/// Smallest and largest fill of one write.
const MIN_WRITE: usize = 16 * 1024;
const MAX_WRITE: usize = 1024 * 1024;
/// How long a TCP_INFO reading's allowance serves later writes (see [`Allowance`]).
const ALLOWANCE_FOR: std::time::Duration = std::time::Duration::from_millis(1);

/// With the in-flight bound, bytes not yet sent that the socket may hold: what its pacing sends
/// in this long (at least [`MIN_WRITE`]). They wait in the socket, in front of anything written
/// after them, urgent responses included, and the kernel's TCP_NOTSENT_LOWAT does not bound
/// them: one write fills the socket to that mark and one buffer of up to 64 KiB beyond it. Where
/// the bound allows more than BBR's pacing sends (its ramp, which leads BBR's estimate), a
/// write of all of it queued there: the lab's priority experiment at 50 Mbit/s × 20 ms found
/// 21–45 kB unsent when its stylesheet was asked for, busy/idle 0.58–0.62 against 0.54–0.55
/// with a slower ramp; with this limit 0.56 and 0.56 (against 0.57 and 0.55, 5 runs each).
const UNSENT_AHEAD: std::time::Duration = std::time::Duration::from_millis(2);

/// Of `budget`, what keeps the socket's unsent bytes within [`UNSENT_AHEAD`] of its pacing
/// (`pacing_rate` bytes per second, 0 where the kernel does not pace: no limit), but never less
/// than [`MIN_SEND`](sluice_tune::inflight::MIN_SEND) of a budget that has it: that write then waits
/// for the socket to take it (TCP_NOTSENT_LOWAT's wake-up), where a budget of 0 would set the
/// retry timer, which under a peer that stopped reading (a zero window: pacing sends nothing)
/// would fire every millisecond until the write timeout.
fn within_unsent(budget: usize, pacing_rate: u64, notsent: usize) -> usize {
    if pacing_rate == 0 {
        return budget;
    }
    let ahead = ((pacing_rate as f64 * UNSENT_AHEAD.as_secs_f64()) as usize).max(MIN_WRITE);
    budget.min(ahead.saturating_sub(notsent).max(sluice_tune::inflight::MIN_SEND))
}

/// Whether a connection with `open` streams, the most urgent of them with data ready at
/// `urgency`, is more than a single download: then its in-flight bound keeps the startup gain
/// of 2 (see `InflightCap::set_lone`). Several streams at once, or an urgent one (a browser's
/// document, whose stylesheets follow on the same connection).
fn crowds(open: usize, urgency: Option<u8>) -> bool {
    open > 1 || is_urgent(urgency)
}

/// Whether data at `urgency` is urgent ([`URGENT`] or more urgent): what the bound keeps room for.
fn is_urgent(urgency: Option<u8>) -> bool {
    urgency.is_some_and(|u| u <= URGENT)
}

fn refused(e: SendError) -> Refused {
    match e {
        SendError::UnknownStream => Refused::Gone,
        _ => Refused::Invalid,
    }
}

/// HTTP/2 stream ids are 31 bits (RFC 9113 §5.1.1); the stream layer's ids are u64.
fn h2_id(id: u64) -> u32 {
    // Invariant: every id the stream layer holds came from this engine as a u32.
    u32::try_from(id).unwrap_or(u32::MAX)
}

impl Engine for Connection {
    fn send_head(&mut self, id: u64, status: u16, fields: sluice_http::HeadFields, end: bool) -> Result<(), Refused> {
        self.send_response(h2_id(id), status, fields, end).map_err(refused)
    }

    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused> {
        Self::send_data(self, h2_id(id), data, end).map_err(refused)
    }

    fn accepts_data(&self, _id: u64) -> bool {
        // The HTTP/2 engine queues what it is given; the stream layer's room bounds it.
        true
    }

    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused> {
        Self::send_trailers(self, h2_id(id), fields).map_err(refused)
    }

    fn release(&mut self, id: u64, n: usize) {
        Self::release(self, Instant::now(), h2_id(id), n);
    }

    fn fail(&mut self, id: u64) {
        self.reset(h2_id(id), Reason::INTERNAL_ERROR);
    }

    fn priority(&mut self, id: u64, value: &[u8]) {
        self.apply_priority_field(h2_id(id), value);
    }

    fn buffered(&self, id: u64) -> Option<usize> {
        Self::buffered(self, h2_id(id))
    }

    fn recycle_head(&mut self, head: Box<sluice_http::RequestHead>) {
        Self::recycle_head(self, head);
    }

    fn take_closed(&mut self, out: &mut Vec<u64>) -> bool {
        Self::take_closed(self, out)
    }
}

/// Serve one HTTP/2 connection. `prefix` holds bytes already read (h2c sniffing).
pub(crate) fn serve<S>(
    io: S,
    fd: RawFd,
    prefix: Bytes,
    info: ConnInfo,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send
where
    S: sluice_tls::split::ReadChunks + Send + 'static,
{
    // Split before the future is made, not in it: an `async fn` keeps its arguments for its
    // whole life, and the stream (1,384 bytes over TLS) would stay in every connection's
    // future next to the halves it was moved into.
    // Split here, not with `tokio::io::split`: the read half reads a TLS stream's records
    // without a copy (`ReadChunks`).
    let (mut rd, wr) = sluice_tls::split::split(io);
    // Shared before the future is made, for the same reason: captured by value, the 184-byte
    // `ConnInfo` kept its slot in the future after it had moved into the `Arc`.
    let info = Arc::new(info);
    async move {
        let peer = info.peer;
        // In a block of its own: a configuration moved into the engine still held 144 bytes of
        // the future for the connection's life.
        let mut conn = {
            let mut cfg = state.h2.clone();
            // RFC 8336: the origin set of the certificate this connection's SNI picked.
            cfg.origins = info.served.as_ref().and_then(sluice_tls::certs::Served::origins);
            let mut conn = Connection::new(cfg, state.window_policy(), Instant::now());
            // The stream layer learns from the engine when a stream is gone (Streams::sweep).
            conn.report_closed();
            conn
        };
        if !prefix.is_empty() {
            conn.handle_input(Instant::now(), &prefix);
        }
        let (mut streams, mut cmd_rx) = Streams::new(state.clone(), info.clone(), Proto::Http2);
        let mut sent: Vec<(u32, usize)> = Vec::new();
        let mut resets = ResetLog::default();
        // The writer: one buffer in flight, handed back when written.
        let (wq_tx, wq_rx) = crate::io::mailbox::mailbox::<Transmit>();
        let (done_tx, mut done_rx) = crate::io::mailbox::mailbox::<std::io::Result<Transmit>>();
        let writer = tokio::spawn(write_loop(wr, wq_rx, done_tx));
        let mut rbuf = ReadBufs::new(IDLE_READ);
        // A TLS 1.3 stream's decrypted records, read without a copy (see `ReadChunks`).
        let mut chunks: Vec<BytesMut> = Vec::new();
        let mut idle_since: Option<tokio::time::Instant> = None;
        let mut spare: Option<Transmit> = Some(Transmit::with_capacity(IDLE_WRITE));
        let mut eof = false;
        let mut rtt_sampled = Instant::now().checked_sub(RTT_SAMPLE_EVERY).unwrap_or_else(Instant::now);
        // When the write in flight must have completed: a peer that stops reading (a full TCP
        // window) cannot hold the connection longer than the idle timeout.
        let mut write_deadline: Option<tokio::time::Instant> = None;
        let mut drain_deadline: Option<tokio::time::Instant> = None;
        // A new connection ramps as a single download until it crowds (see `crowds`).
        let mut pace = state.cfg.tcp.limit_inflight.then(|| InflightCap::new().leading().lone());
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut idle_reading = Instant::now();
        // Whether a write went out after the last TCP_INFO reading (see `InflightCap::note_idle`).
        let mut wrote_since_reading = false;
        // What the last reading left for the writes that follow it (see `Allowance`).
        let mut allowance: Option<Allowance> = None;
        // The receive low-water mark while the peer streams bodies fast (`sluice_tune::recv_mark`).
        let mut mark = state.cfg.tcp.batch_reads.then(|| RecvMark::new(Instant::now()));
        // The writer is stuck on a socket the peer does not read: it is aborted, not awaited.
        let mut stuck = false;
        // When the engine last framed response bytes, or had none waiting: a peer that keeps
        // its flow-control windows shut while sending PINGs holds its streams' memory otherwise.
        let mut progress_at = tokio::time::Instant::now();
        let stall_every = state.cfg.timeouts.idle / 4;
        let mut stall_check = tokio::time::Instant::now() + stall_every;
        if *shutdown.borrow() {
            conn.go_away();
            drain_deadline = Some(tokio::time::Instant::now() + state.cfg.timeouts.drain);
        }
        // Made once, not each turn of the loop: shutdown fires once (then its branch is off).
        let mut shutdown_changed = std::pin::pin!(shutdown.changed());
        // One timer for every deadline of the loop (see `io::arm`): a timer per deadline made
        // anew each turn was a registration and a removal in tokio's timer wheel, each under
        // its lock, two or three times per turn.
        let mut timer = std::pin::pin!(tokio::time::sleep_until(tokio::time::Instant::now()));
        let mut timer_at: Option<tokio::time::Instant> = None;
        let mut date = crate::io::date::Stamp::default();
        loop {
            // One clock reading per turn, for what the turn decides before it waits (the handlers
            // run in between take microseconds).
            let now = Instant::now();
            // Heads are encoded when framed, below: with the second's `Date`.
            if let Some(d) = date.due() {
                conn.set_date(d);
            }
            // Streams answered inline have no handler state: the engine holds what they wait for.
            if !streams.queued() && !conn.has_unframed() {
                progress_at = tokio::time::Instant::from_std(now);
            }
            handle_events(&mut conn, &mut streams, &info, &mut resets);
            while let Some(cmd) = cmd_rx.try_recv() {
                streams.apply(&mut conn, cmd);
            }
            // Woken handlers run now; what they answer is applied before the write below.
            if streams.has_ready() {
                streams.poll_ready(&mut conn);
                while let Some(cmd) = cmd_rx.try_recv() {
                    streams.apply(&mut conn, cmd);
                }
            }
            // With nothing to frame there is nothing to budget: the in-flight bound needs a reading
            // now and then to see the connection application-limited, not one per turn of the loop
            // (a bulk upload turns it once per DATA frame consumed: 48,000 TCP_INFO calls per GB).
            let mut budget_due = conn.wants_write()
                || pace.is_some() && now.saturating_duration_since(idle_reading) >= IDLE_READING_EVERY;
            // An idle moment the bound can note without a reading (see `InflightCap::note_idle`).
            if budget_due
                && spare.is_some()
                && !conn.wants_write()
                && pace.as_mut().is_some_and(|p| p.note_idle(now, !wrote_since_reading))
            {
                idle_reading = now;
                budget_due = false;
            }
            if !budget_due {
                retry_at = None;
            }
            if let Some(mut buf) = spare.take_if(|_| budget_due) {
                buf.clear();
                if !conn.wants_write() {
                    idle_reading = now;
                }
                let urgency = conn.next_urgency();
                let guarded = conn.mixed_urgencies();
                if let Some(p) = pace.as_mut() {
                    p.set_guarded(guarded);
                    if crowds(conn.open_streams(), urgency) {
                        p.set_lone(false);
                    }
                }
                let reuse = allowance
                    .filter(|_| conn.wants_write() && !pace.as_ref().is_some_and(InflightCap::ramping))
                    .and_then(|a| a.budget(now, urgency, guarded));
                let b = match reuse {
                    Some(b) => b,
                    None => {
                        let b = write_budget(fd, pace.as_mut(), conn.wants_write(), urgency, now);
                        wrote_since_reading = false;
                        allowance = Some(Allowance::new(now, &b));
                        b
                    }
                };
                // Held back by the in-flight bound with data waiting: look again shortly.
                retry_at = b.retry.filter(|_| conn.wants_write()).map(|d| tokio::time::Instant::now() + d);
                // Urgent data first, in the room only it may use; then the rest, in what the bound
                // leaves once the urgent bytes are counted.
                let urgent = b.urgent > 0 && conn.poll_transmit_into(now, &mut buf, b.urgent, URGENT);
                let rest = b.other.saturating_sub(buf.len());
                if conn.poll_transmit_into(now, &mut buf, rest, u8::MAX) || urgent {
                    write_deadline = Some(tokio::time::Instant::now() + state.cfg.timeouts.idle);
                    wrote_since_reading = true;
                    if let Some(a) = allowance.as_mut() {
                        a.spend(buf.len());
                    }
                    if wq_tx.send(buf).is_err() {
                        break;
                    }
                } else {
                    spare = Some(buf);
                }
                conn.drain_sent(|id, n| sent.push((id, n)));
                if !sent.is_empty() {
                    progress_at = tokio::time::Instant::now();
                }
                for (id, n) in sent.drain(..) {
                    streams.sent(&mut conn, u64::from(id), n);
                }
            }
            if spare.is_some() && conn.is_done() {
                break;
            }
            if eof && spare.is_some() && streams.is_empty() && !conn.has_unframed() {
                break;
            }
            // A busy connection reads and writes in large buffers; one without a stream for
            // SHRINK_AFTER keeps small ones (a 64 KiB read buffer and a written-through 1 MiB
            // write buffer were most of what an idle connection cost). Not at once: a connection
            // whose streams come in bursts keeps its large buffers between them.
            let active = !streams.is_empty() || conn.open_streams() > 0;
            let read_size = if active { BUSY_READ } else { IDLE_READ };
            if active {
                idle_since = None;
            } else if idle_since.is_none() {
                idle_since = Some(tokio::time::Instant::now());
            }
            let big = rbuf.big() || spare.as_ref().is_some_and(|b| b.capacity() > IDLE_WRITE);
            let shrink_at = idle_since.filter(|_| big).map(|t| t + SHRINK_AFTER);
            if shrink_at.is_some_and(|t| t <= tokio::time::Instant::now()) {
                rbuf.renew(&mut conn, IDLE_READ, false);
                conn.shrink();
                streams.shrink();
                cmd_rx.shrink();
                // The writer's queues too (its own side cannot tell a pause from idleness).
                wq_tx.shrink();
                done_rx.shrink();
                if let Some(buf) = spare.as_mut().filter(|b| b.capacity() > IDLE_WRITE) {
                    *buf = Transmit::with_capacity(IDLE_WRITE);
                }
            } else if rbuf.cur.capacity() < read_size / 4 {
                rbuf.renew(&mut conn, read_size, true);
            }
            let timeout = conn.poll_timeout().map(tokio::time::Instant::from_std);
            let next = [
                write_deadline,
                timeout,
                active.then_some(stall_check),
                retry_at.filter(|_| spare.is_some()),
                shrink_at,
                drain_deadline,
                mark.as_ref().and_then(RecvMark::deadline).map(tokio::time::Instant::from_std),
            ]
            .into_iter()
            .flatten()
            .min();
            crate::io::arm(timer.as_mut(), &mut timer_at, next);
            tokio::select! {
                r = std::future::poll_fn(|cx| rd.poll_read_chunks(cx, &mut chunks, &mut rbuf.cur)), if !eof && conn.wants_read() => match r {
                    Ok(0) | Err(_) => {
                        eof = true;
                        conn.handle_eof();
                    }
                    Ok(n) => {
                        let now = Instant::now();
                        // Window tuning measures per RTT: refresh it now and then from TCP_INFO.
                        if now.saturating_duration_since(rtt_sampled) >= RTT_SAMPLE_EVERY {
                            rtt_sampled = now;
                            if let Some(rtt) = sluice_sys::sock::path_info(fd).ok().and_then(|p| p.rtt()) {
                                conn.handle_rtt(rtt);
                            }
                        }
                        if chunks.is_empty() {
                            conn.handle_input_buf(now, rbuf.cur.split());
                        } else {
                            // What a move to a new read buffer carried over goes first (see
                            // `ReadBufs::renew`), then each record's plaintext as it is.
                            if !rbuf.cur.is_empty() {
                                conn.handle_input_buf(now, rbuf.cur.split());
                            }
                            for chunk in chunks.drain(..) {
                                conn.handle_input_buf(now, chunk);
                            }
                        }
                        if let Some(m) = mark.as_mut() {
                            m.on_read(now, n);
                            if let Some(v) = m.update(now, || conn.declared_input()) {
                                set_mark(fd, &rd, &mut mark, v);
                            }
                        }
                    }
                },
                done = done_rx.recv(), if spare.is_none() => match done {
                    Some(Ok(buf)) => {
                        spare = Some(buf);
                        write_deadline = None;
                    }
                    _ => break,
                },
                Some(cmd) = cmd_rx.recv() => {
                    streams.apply(&mut conn, cmd);
                    // A handler's answer woke the connection: with a write about to go out, let
                    // the other tasks that are ready run first (handlers woken by the same
                    // readiness, a proxy's upstream answers arriving together), so that their
                    // answers share this write: one TLS record and one system call for many
                    // small responses instead of one each. Idle, this costs one trip through
                    // the scheduler's queue.
                    if spare.is_some() {
                        tokio::task::yield_now().await;
                    }
                    while let Some(cmd) = cmd_rx.try_recv() {
                        streams.apply(&mut conn, cmd);
                    }
                }
                () = &mut timer, if timer_at.is_some() => {
                    timer_at = None;
                    let now = tokio::time::Instant::now();
                    if write_deadline.is_some_and(|d| d <= now) {
                        tracing::info!(%peer, "peer stopped reading: write timed out, closing");
                        stuck = true;
                        break;
                    }
                    if drain_deadline.is_some_and(|d| d <= now) {
                        break;
                    }
                    if timeout.is_some_and(|t| t <= now) {
                        conn.handle_timeout(Instant::now());
                    }
                    if active && stall_check <= now {
                        stall_check = now + stall_every;
                        if (streams.queued() || conn.has_unframed()) && progress_at.elapsed() >= state.cfg.timeouts.idle {
                            tracing::info!(%peer, "no response byte framed for timeouts.idle: the peer keeps its windows shut; closing");
                            conn.abort("stalled: the peer's flow-control windows stayed shut for the idle timeout");
                        }
                    }
                    if retry_at.is_some_and(|d| d <= now) {
                        retry_at = None;
                    }
                    if let Some(v) = mark.as_mut().and_then(|m| m.update(now.into_std(), || conn.declared_input())) {
                        set_mark(fd, &rd, &mut mark, v);
                    }
                    // A due `shrink_at`: the next turn of the loop shrinks the buffers.
                }
                _ = &mut shutdown_changed, if drain_deadline.is_none() => {
                    conn.go_away();
                    drain_deadline = Some(tokio::time::Instant::now() + state.cfg.timeouts.drain);
                }
                // A handler woken while the handlers ran (one that woke itself) is polled on the
                // next turn, after a trip through the scheduler: not in a loop that never
                // yields, and not ahead of the connection's own input.
                () = tokio::task::yield_now(), if streams.has_ready() => {}
            }
        }
        streams.abort_all();
        if resets.suppressed > 0 {
            tracing::info!(%peer, more = resets.suppressed, "more streams reset for peer errors on this connection");
        }
        drop(wq_tx);
        close(writer, rd, stuck, eof, state.cfg.timeouts.drain).await;
    }
}

/// Set the socket's receive low-water mark to `v` (0: none), and tell the reader whether to
/// expect batches; if the system refuses, stop batching reads on this connection.
fn set_mark<S: ReadChunks>(fd: RawFd, rd: &ReadHalf<S>, mark: &mut Option<RecvMark>, v: u32) {
    if let Err(e) = sluice_sys::sock::set_rcvlowat(fd, v.max(1)) {
        tracing::debug!(error = %e, "SO_RCVLOWAT refused: reads are not batched on this connection");
        let _ = sluice_sys::sock::set_rcvlowat(fd, 1);
        *mark = None;
        rd.set_bulk(false);
        return;
    }
    rd.set_bulk(v > 0);
}

/// The connection's read buffers: reads go into what follows the last one, and the engine
/// keeps slices of them (DATA payloads), so a buffer's memory is in use until its last payload
/// is consumed. When one runs low, the one before it is taken back if nothing holds it any
/// more (a handler that has consumed everything it was given); else a new one is allocated.
struct ReadBufs {
    cur: BytesMut,
    prev: Option<BytesMut>,
    /// The size `cur` was allocated with (its capacity shrinks as reads are split off).
    size: usize,
}

impl ReadBufs {
    fn new(size: usize) -> Self {
        Self { cur: BytesMut::with_capacity(size), prev: None, size }
    }

    /// Whether it holds more than an idle connection needs.
    fn big(&self) -> bool {
        self.size > IDLE_READ || self.prev.is_some()
    }

    /// Move on to a buffer of `size` (the previous one, or a new one), starting with the bytes
    /// of a frame the last read cut (of a DATA frame, only a header for its rest when the
    /// engine hands on the part read; of any other, that part: under 64 KiB), so that the reads
    /// that follow go on joining them in place (see `Connection::take_unparsed_input`). With
    /// `keep` false, as when shrinking, the old buffers are let go.
    ///
    /// The new buffer has room for the whole of the frame it starts with, so that a large frame
    /// is copied once, not once per read: an idle connection reads 256 bytes at a time, and each
    /// new buffer started with all of the frame so far (for a 64 KiB HEADERS frame sent to a
    /// connection with no stream open, 256 buffers and about 8 MB copied, by the arithmetic).
    fn renew(&mut self, conn: &mut Connection, size: usize, keep: bool) {
        let unparsed = conn.take_unparsed_input(Instant::now());
        let frame = Head::parse(&unparsed).map_or(0, |h| HEADER_LEN + h.len.min(MAX_FRAME_SIZE) as usize);
        let want = (size + unparsed.len()).max(frame);
        let reused = self.prev.take().filter(|_| keep).and_then(|mut b| b.try_reclaim(want).then_some(b));
        let mut next = reused.unwrap_or_else(|| BytesMut::with_capacity(want));
        next.extend_from_slice(&unparsed);
        drop(unparsed);
        let old = std::mem::replace(&mut self.cur, next);
        self.size = size;
        if keep {
            self.prev = Some(old);
        }
    }
}

/// End the connection. The writer gets at most `drain` to finish what it holds (and shut the
/// write side down, sending FIN); a writer stuck on a full socket is aborted, so a peer that
/// stops reading cannot keep the socket, its descriptor and its connection slot. After a
/// clean finish the read side is drained briefly (`linger`): closing a socket with unread input
/// makes the kernel send RST, which can destroy our last frames (a GOAWAY saying why) before
/// the peer reads them.
async fn close<R: AsyncRead + Unpin>(
    mut writer: tokio::task::JoinHandle<()>,
    mut rd: R,
    stuck: bool,
    eof: bool,
    drain: std::time::Duration,
) {
    if stuck || tokio::time::timeout(drain, &mut writer).await.is_err() {
        writer.abort();
        return;
    }
    if eof {
        return;
    }
    crate::io::linger::drain_input(&mut rd).await;
}

/// What the next write may carry.
struct Budget {
    /// What the congestion window can take now (at least [`MIN_WRITE`]).
    room: usize,
    /// Bytes of urgent data ([`URGENT`] or more urgent): `room`, when such data waits; else 0.
    urgent: usize,
    /// Bytes in all, urgent data included: with the in-flight bound, what it leaves.
    other: usize,
    /// When to look again, if the bound holds data back.
    retry: Option<std::time::Duration>,
}

/// What the in-flight bound needs from one TCP_INFO reading.
fn sample(p: &sluice_sys::sock::PathInfo) -> sluice_tune::inflight::Sample {
    sluice_tune::inflight::Sample {
        delivery_rate: p.delivery_rate,
        acked: p.delivered_bytes(),
        min_rtt: Duration::from_micros(u64::from(p.min_rtt_us)),
        in_flight: p.in_flight_bytes(),
        notsent_bytes: p.notsent_bytes as usize,
        segment: p.mss.max(536) as usize,
        settled: p.unacked == 0 && p.notsent_bytes == 0,
        srtt: Duration::from_micros(u64::from(p.rtt_us)),
    }
}

/// What the next write may carry: what the congestion window can take now (TCP_INFO), at
/// least [`MIN_WRITE`] and at most [`MAX_WRITE`], and with `pace` no more than its in-flight
/// bound leaves, except for urgent data (`busy`: the engine has data waiting).
fn write_budget(fd: RawFd, pace: Option<&mut InflightCap>, busy: bool, urgency: Option<u8>, now: Instant) -> Budget {
    let Ok(p) = sluice_sys::sock::path_info(fd) else {
        return Budget { room: MAX_WRITE, urgent: 0, other: MAX_WRITE, retry: None };
    };
    let room = if p.cwnd > 0 { p.cwnd_room().clamp(MIN_WRITE, MAX_WRITE) } else { MAX_WRITE };
    let urgent = if is_urgent(urgency) { room } else { 0 };
    let Some(pace) = pace else { return Budget { room, urgent, other: room, retry: None } };
    let s = sample(&p);
    pace.update(now, &s, busy);
    let budget = within_unsent(pace.budget(&s, room), p.pacing_rate, s.notsent_bytes);
    tracing::trace!(
        urgency = urgency.unwrap_or(8),
        rate = s.delivery_rate,
        pacing = p.pacing_rate,
        est = pace.max_rate(),
        min_rtt_us = s.min_rtt.as_micros() as u64,
        srtt_us = p.rtt_us,
        in_flight = s.in_flight,
        notsent = s.notsent_bytes,
        cwnd = p.cwnd,
        room,
        cap = pace.cap(&s).unwrap_or(0),
        gain = pace.gain(),
        urgent,
        budget,
        "write budget"
    );
    Budget { room, urgent, other: budget, retry: (budget == 0).then(|| pace.retry_after(&s)) }
}

/// What is left of the last TCP_INFO reading's budget: writes that follow within
/// [`ALLOWANCE_FOR`] and fit in it take no reading of their own. A connection that carries
/// small responses wrote every few hundred microseconds, a few responses at a time, and read
/// TCP_INFO before each write: a system call for every third proxied request. What is left only
/// shrinks as writes spend it, while ACKs arriving since would only have made more room, so a
/// write within it is one the reading allowed. Not on a connection that has carried several
/// urgencies (a page load: the bound's every reading counts there), nor in a ramp of the bound
/// that keeps the readings of the last RTT, nor once less than [`MIN_WRITE`] is left.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Allowance {
    at: Instant,
    room: usize,
    other: usize,
}

impl Allowance {
    fn new(at: Instant, b: &Budget) -> Self {
        Self { at, room: b.room, other: b.other }
    }

    /// The budget of a write at `now` without a reading, if what is left covers one.
    fn budget(&self, now: Instant, urgency: Option<u8>, guarded: bool) -> Option<Budget> {
        let urgent = is_urgent(urgency);
        let fresh = now.saturating_duration_since(self.at) < ALLOWANCE_FOR;
        if guarded || !fresh || self.other < MIN_WRITE || urgent && self.room < MIN_WRITE {
            return None;
        }
        Some(Budget { room: self.room, urgent: if urgent { self.room } else { 0 }, other: self.other, retry: None })
    }

    /// `n` bytes written.
    fn spend(&mut self, n: usize) {
        self.room = self.room.saturating_sub(n);
        self.other = self.other.saturating_sub(n);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: sluice_tls::split::WriteHalf<W>,
    mut rx: crate::io::mailbox::Receiver<Transmit>,
    done: crate::io::mailbox::Sender<std::io::Result<Transmit>>,
) {
    while let Some(mut buf) = rx.recv().await {
        let r = async {
            // Vectored where the DATA payloads are slices of the handlers' chunks (see
            // `Transmit`); a plain write where all was copied (small responses: a vectored
            // write's list of slices costs more than it saves there).
            match buf.flat() {
                Some(bytes) => wr.write_all(bytes).await?,
                None => wr.write_all_buf(&mut buf.reader()).await?,
            }
            wr.flush().await
        }
        .await;
        // The payloads go back to whoever shares their memory now, not when the buffer is
        // filled again.
        buf.clear();
        let failed = r.is_err();
        if done.send(r.map(|()| buf)).is_err() || failed {
            break;
        }
    }
    let _ = wr.shutdown().await;
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
                streams.start(conn, id, head, end_stream, on_consumed);
            }
            Event::Data { stream, data, end_stream } => {
                let window = conn.stream_window(stream);
                match streams.body(u64::from(stream), data, end_stream, window) {
                    BodyVerdict::Taken => {}
                    BodyVerdict::TooLarge => conn.reset(stream, Reason::CANCEL),
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_h2::frame::PREFACE;

    #[test]
    fn a_new_read_buffer_has_room_for_the_whole_frame_it_starts_with() {
        let now = Instant::now();
        let windows = sluice_tune::window::FixedWindows { stream: 65_535, connection: 65_535 };
        let mut conn = Connection::new(sluice_h2::Config::default(), Box::new(windows), now);
        let mut input = PREFACE.to_vec();
        Head { len: 0, kind: 0x4, flags: 0, stream: 0 }.encode(&mut input);
        // The first 1,000 bytes of a 40,000-byte frame (of an unknown type: skipped when whole).
        Head { len: 40_000, kind: 0xfa, flags: 0, stream: 0 }.encode(&mut input);
        input.extend([0; 1_000]);
        conn.handle_input(now, &input);
        let mut rbuf = ReadBufs::new(IDLE_READ);
        rbuf.renew(&mut conn, IDLE_READ, true);
        assert_eq!(rbuf.cur.len(), HEADER_LEN + 1_000, "the part read is carried over");
        assert!(rbuf.cur.capacity() >= HEADER_LEN + 40_000, "room for the rest: {}", rbuf.cur.capacity());
        // Nothing unparsed: the size asked for.
        let mut conn = Connection::new(sluice_h2::Config::default(), Box::new(windows), now);
        conn.handle_input(now, &input[..PREFACE.len() + HEADER_LEN]);
        rbuf.renew(&mut conn, IDLE_READ, false);
        assert_eq!((rbuf.cur.len(), rbuf.cur.capacity()), (0, IDLE_READ));
    }

    #[test]
    fn writes_close_behind_a_reading_spend_what_it_allowed() {
        let t = Instant::now();
        let read = Budget { room: 100_000, urgent: 0, other: 60_000, retry: None };
        let mut a = Allowance::new(t, &read);
        let soon = t + ALLOWANCE_FOR / 2;
        let b = a.budget(soon, Some(3), false).expect("within the allowance");
        assert_eq!((b.room, b.urgent, b.other, b.retry), (100_000, 0, 60_000, None));
        // Urgent data gets the congestion window's room, as from a reading.
        assert_eq!(a.budget(soon, Some(0), false).map(|b| b.urgent), Some(100_000));
        a.spend(50_000);
        // 10 kB left: less than a write's worth, so the next write reads.
        assert_eq!(a, Allowance { at: t, room: 50_000, other: 10_000 });
        assert!(a.budget(soon, Some(3), false).is_none());
        let a = Allowance::new(t, &read);
        // Stale, or a page load's connection: a reading.
        assert!(a.budget(t + ALLOWANCE_FOR, Some(3), false).is_none());
        assert!(a.budget(soon, Some(3), true).is_none());
        // The bound left room for other data but the window little for urgent data: a reading.
        let tight = Allowance::new(t, &Budget { room: MIN_WRITE - 1, urgent: 0, other: 60_000, retry: None });
        assert!(tight.budget(soon, Some(URGENT), false).is_none());
        assert!(tight.budget(soon, Some(URGENT + 1), false).is_some());
        // A reading that held writes back leaves nothing to spend.
        let held = Allowance::new(t, &Budget { room: 100_000, urgent: 0, other: 0, retry: Some(ALLOWANCE_FOR) });
        assert!(held.budget(soon, None, false).is_none());
    }

    #[test]
    fn only_a_single_download_that_is_not_urgent_ramps_alone() {
        // curl or `sluice get`: one stream at the default urgency 3, or none ready yet.
        assert!(!crowds(1, Some(3)) && !crowds(1, None) && !crowds(0, None));
        // A page: several streams, or a document or stylesheet (urgency 0 or 1) even alone.
        assert!(crowds(2, Some(5)) && crowds(10, None));
        assert!(crowds(1, Some(0)) && crowds(1, Some(URGENT)));
    }

    #[test]
    fn unsent_bytes_stay_within_what_pacing_sends_in_two_milliseconds() {
        // Paced at 25 MB/s (200 Mbit/s): 50 kB may wait unsent.
        let rate = 25_000_000;
        assert_eq!(within_unsent(200_000, rate, 0), 50_000);
        assert_eq!(within_unsent(200_000, rate, 30_000), 20_000);
        assert_eq!(within_unsent(10_000, rate, 30_000), 10_000, "the bound's budget, when smaller");
        // Less than the smallest write left: the smallest write (it waits for the socket, not
        // for a timer); none where the bound allows none.
        assert_eq!(within_unsent(200_000, rate, 47_000), sluice_tune::inflight::MIN_SEND);
        assert_eq!(within_unsent(200_000, rate, 1 << 20), sluice_tune::inflight::MIN_SEND);
        assert_eq!(within_unsent(0, rate, 0), 0);
        // A slow pace still allows the smallest fill of a write; no pacing, no limit.
        assert_eq!(within_unsent(200_000, 100_000, 0), MIN_WRITE);
        assert_eq!(within_unsent(200_000, 0, 1 << 20), 200_000);
    }
}
