//! The HTTP/2 server connection: bytes and time in, frames, events and deadlines out.
//!
//! Call order, as in quinn: feed input with [`Connection::handle_input`] and expired timers with
//! [`Connection::handle_timeout`]; then drain [`Connection::poll_transmit`] (bytes for the
//! socket), [`Connection::poll_event`] (requests, bodies, resets) and [`Connection::poll_timeout`]
//! (the next deadline). The handler side answers with `send_response`, `send_data`,
//! `send_trailers`, `reset` and `release`.
//!
//! Timers: the preface must complete within `Config::header_timeout` of its first byte, a
//! header block within it of its HEADERS; our SETTINGS must be acknowledged within
//! `Config::settings_timeout` of the peer's preface if the peer is otherwise active (see
//! [`Connection::handle_timeout`]); a connection with nothing received and nothing sent for
//! `Config::idle_timeout`, a peer that never sent a byte included, ends with GOAWAY(NO_ERROR),
//! unless a request on it waits on the application (its answer's own timeouts bound it).
//! Budgets: stream resets, PINGs, SETTINGS, and frames that do no useful work
//! (`Config::max_glitches_per_window`) per `Config::flood_window`; beyond them
//! GOAWAY(ENHANCE_YOUR_CALM).

mod recv;
mod send;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use sluice_hpack as hpack;

use crate::config::Config;
use crate::error::{Error, Initiator, Reason};
use crate::flow::{RecvWindow, SendWindow, DEFAULT_WINDOW};
use crate::frame::{self, GoAway, Origin, RstStream, Setting, Settings, WindowUpdate};
use crate::sched::Scheduler;
use crate::stream::{Stream, Streams};
use sluice_http::{Budget, Field, RequestHead};
use sluice_tune::window::WindowPolicy;

/// Something the application must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request. Answer with [`Connection::send_response`].
    Request {
        /// Stream.
        stream: u32,
        /// Pseudo-header and regular fields. Boxed, so that the event moves a pointer rather
        /// than about 200 bytes; hand the box back with [`Connection::recycle_head`].
        head: Box<RequestHead>,
        /// The request has no body.
        end_stream: bool,
    },
    /// Request body bytes. Call [`Connection::release`] as they are consumed.
    Data {
        /// Stream.
        stream: u32,
        /// Bytes (may be empty when only `end_stream` is news).
        data: Bytes,
        /// Last body bytes.
        end_stream: bool,
    },
    /// Request trailers; the body is complete.
    Trailers {
        /// Stream.
        stream: u32,
        /// Trailer fields.
        fields: Vec<Field>,
    },
    /// The stream is gone (reset by the peer, or by us for a peer error): stop work on it.
    Reset {
        /// Stream.
        stream: u32,
        /// Why.
        error: Error,
    },
    /// The peer sent GOAWAY.
    GoAway {
        /// Code.
        reason: Reason,
    },
    /// The connection failed; GOAWAY is queued and the connection closes once it is written.
    ConnectionError(Error),
}

/// A call the engine (server or [client](crate::client::Client)) could not honour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No such open stream (reset, finished, or never opened).
    UnknownStream,
    /// Not allowed in the stream's state: a head after the final one, an interim head with
    /// `end_stream`, body or trailers before the final head or after the end. (From the
    /// client: the request was sent without a body, or its body has ended.)
    InvalidState,
    /// Not a status HTTP/2 can send: three digits (RFC 9110 §15), and not 101 (RFC 9113 §8.6).
    InvalidStatus,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::UnknownStream => "no such open stream",
            Self::InvalidState => "not allowed in the stream's state",
            Self::InvalidStatus => "status code not allowed",
        })
    }
}

impl std::error::Error for SendError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Preface {
    /// Waiting for the 24-byte client magic.
    Magic,
    /// Magic seen, the first frame must be SETTINGS (RFC 9113 §3.4).
    Settings,
    Done,
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    buf: Vec<u8>,
    end_stream: bool,
    continuations: u32,
    priority: Option<frame::PriorityFields>,
}

/// Largest header block buffer kept for the next block (a request head is a few hundred bytes).
const KEPT_BLOCK_BUF: usize = 4096;
/// The least a new buffer for decoded header lists holds (see `Connection::decoded`): about
/// twenty browser requests' heads.
const DECODED_CHUNK: usize = 4096;

/// The longest field list a request head kept for a later one keeps ([`Connection::recycle_head`]).
const KEPT_FIELDS: usize = 32;
/// Request heads kept for later ones: about as many as requests a client sends at once.
const SPARE_HEADS: usize = 16;

/// Streams remembered after closing, to tell "closed" from "never opened" (RFC 9113 §5.1).
const RECENTLY_CLOSED: usize = 256;

/// Control output above which the engine stops asking for input, so a peer that sends
/// without reading cannot grow our queue without bound.
const MAX_CONTROL_BACKLOG: usize = 256 * 1024;

/// One HTTP/2 server connection.
pub struct Connection {
    cfg: Config,
    policy: Box<dyn WindowPolicy>,
    inbuf: BytesMut,
    preface: Preface,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    /// Where header blocks are encoded before framing, and received ones gathered before they
    /// are decoded (kept, so a response or a request head allocates nothing here).
    out_block: Vec<u8>,
    /// The `Date` value final response heads carry ([`Connection::set_date`]).
    date: Option<Bytes>,
    peer_max_frame: usize,
    peer_initial_window: u32,
    send_window: SendWindow,
    recv_window: RecvWindow,
    conn_received: u64,
    /// Open streams; closed ones' slots keep their queues for new ones (a response's head and
    /// body would otherwise allocate two queues per stream).
    streams: Streams,
    /// Decoded header lists are written here, and each is split off as the `Bytes` its fields
    /// are slices of: consecutive requests share one allocation of at least
    /// [`DECODED_CHUNK`] (each had one of its own before, and the first field slice of each
    /// made a second, the reference count's).
    decoded: BytesMut,
    /// The size of the last request's decoded header list: room for that much is made before
    /// the next one is decoded.
    last_decoded: usize,
    /// Request heads handed back ([`Connection::recycle_head`]), emptied, for the next ones:
    /// as many as requests come in one read (h2load -m 10 sends ten). Kept boxed: the boxes
    /// are what events carry and the application hands back.
    #[allow(clippy::vec_box)]
    spare_heads: Vec<Box<RequestHead>>,
    /// Field positions while a header block is decoded (kept between blocks).
    spans: Vec<[usize; 3]>,
    max_client_stream: u32,
    /// With each, the WINDOW_UPDATEs the peer may still send for it for free: those for DATA
    /// frames it read after we closed the stream are a race, not a glitch.
    /// With each, whether we reset it ourselves (then its late frames are ignored).
    recently_closed: VecDeque<(u32, u32, bool)>,
    /// Streams forgotten since [`Connection::take_closed`] last took them, kept only once
    /// [`Connection::report_closed`] asked for them.
    closed: Vec<u32>,
    report_closed: bool,
    block: Option<Block>,
    control: Vec<u8>,
    heads: VecDeque<u32>,
    /// Streams whose response went out whole while their request is still open, and when to
    /// reset them with NO_ERROR (see `RESET_AFTER_RESPONSE`).
    reset_after: Vec<(u32, Instant)>,
    sched: Scheduler,
    /// Urgencies (bit per level) of every stream that had something to send.
    urgencies_seen: u8,
    sent_dirty: Vec<u32>,
    events: VecDeque<Event>,
    resets: Budget,
    pings: Budget,
    settings_budget: Budget,
    /// Frames that did no useful work (`Config::max_glitches_per_window`).
    glitches: Budget,
    /// Connection WINDOW_UPDATEs the peer may send before they count as glitches: one per
    /// DATA frame we sent since its last one (the first is free).
    conn_update_credit: u32,
    /// PINGs we sent (window tuning) whose ACK has not come back.
    pings_out: u32,
    /// The last value the peer set for each known setting id (1 to 9), to tell a SETTINGS
    /// that changes nothing.
    peer_settings: [Option<u32>; 10],
    /// The peer's preface SETTINGS arrived (it is never a glitch, whatever it holds).
    peer_settings_seen: bool,
    unacked_settings: u32,
    /// When our SETTINGS must be acknowledged by: armed at the peer's preface SETTINGS, and
    /// again at its next active frame after a timer found it idle (`Config::settings_timeout`).
    settings_deadline: Option<Instant>,
    /// The peer sent an active frame (HEADERS, DATA, RST_STREAM, PING) since the SETTINGS-ack
    /// timer was armed: a missing ACK is then its fault, not idleness.
    peer_active: bool,
    header_deadline: Option<Instant>,
    last_activity: Instant,
    /// GOAWAY sent after an error: nothing more is read or sent but that frame.
    failed: bool,
    /// Graceful shutdown: last stream we accept.
    draining: Option<u32>,
    peer_goaway: bool,
    /// The path's round-trip time, as the driver last measured it (TCP_INFO).
    rtt: Option<Duration>,
    /// Sum of the receive windows of streams still receiving a body.
    recv_windows: u64,
    /// PRIORITY_UPDATE values for streams the client has not opened yet (RFC 9218 §7.1).
    pending_priority: HashMap<u32, Vec<u8>>,
}

impl Connection {
    /// A new server connection at `now`. Our SETTINGS (and a connection WINDOW_UPDATE) are
    /// queued at once; the server may send them before the client preface arrives (§3.4).
    pub fn new(cfg: Config, policy: Box<dyn WindowPolicy>, now: Instant) -> Self {
        let stream_window = policy.initial_stream_window();
        let conn_window = policy.initial_connection_window();
        let mut values = vec![
            Setting::MaxConcurrentStreams(cfg.max_concurrent_streams),
            Setting::InitialWindowSize(stream_window),
            Setting::MaxHeaderListSize(cfg.max_header_list_size),
            Setting::EnablePush(0),
            Setting::MaxFrameSize(crate::frame::MAX_FRAME_SIZE),
        ];
        if cfg.header_table_size != 4096 {
            values.insert(0, Setting::HeaderTableSize(cfg.header_table_size));
        }
        if cfg.no_rfc7540_priorities {
            values.push(Setting::NoRfc7540Priorities(1));
        }
        if cfg.enable_connect_protocol {
            values.push(Setting::EnableConnectProtocol(1));
        }
        let mut control = Vec::with_capacity(256);
        Settings { ack: false, values }.encode(&mut control);
        if let Some(origins) = &cfg.origins {
            // RFC 8336 §2: on stream 0; sent right after SETTINGS so the client knows the
            // connection's origin set before it could reuse the connection.
            Origin { origins: origins.clone() }.encode(&mut control);
        }
        let mut recv_window = RecvWindow::new(DEFAULT_WINDOW, conn_window);
        if let Some(inc) = recv_window.poll_update() {
            WindowUpdate { stream: 0, increment: inc }.encode(&mut control);
        }
        Self {
            // Until our SETTINGS is acknowledged the peer may use the RFC default table size
            // (RFC 7541 §4.2), so the decoder accepts the larger of the two.
            decoder: hpack::Decoder::new(cfg.header_table_size.max(4096) as usize),
            encoder: hpack::Encoder::new(),
            out_block: Vec::new(),
            date: None,
            policy,
            inbuf: BytesMut::new(),
            preface: Preface::Magic,
            peer_max_frame: 16_384,
            peer_initial_window: DEFAULT_WINDOW,
            send_window: SendWindow::new(DEFAULT_WINDOW),
            recv_window,
            conn_received: 0,
            streams: Streams::default(),
            decoded: BytesMut::new(),
            last_decoded: 0,
            spare_heads: Vec::new(),
            spans: Vec::new(),
            max_client_stream: 0,
            // Grows with use (up to RECENTLY_CLOSED): reserving it all at once cost 2 kB per
            // connection, most of which never close that many streams.
            recently_closed: VecDeque::new(),
            closed: Vec::new(),
            report_closed: false,
            block: None,
            control,
            heads: VecDeque::new(),
            reset_after: Vec::new(),
            sched: Scheduler::default(),
            urgencies_seen: 0,
            sent_dirty: Vec::new(),
            events: VecDeque::new(),
            resets: Budget::new(cfg.max_resets_per_window, cfg.flood_window),
            pings: Budget::new(cfg.max_pings_per_window, cfg.flood_window),
            settings_budget: Budget::new(cfg.max_settings_per_window, cfg.flood_window),
            glitches: Budget::new(cfg.max_glitches_per_window, cfg.flood_window),
            conn_update_credit: 1,
            pings_out: 0,
            peer_settings: [None; 10],
            peer_settings_seen: false,
            unacked_settings: 1,
            // Both wait for the peer: the SETTINGS-ack timer for its preface SETTINGS, the
            // preface timer for its first byte. Until then it is idle (`idle_deadline`).
            settings_deadline: None,
            peer_active: false,
            header_deadline: None,
            last_activity: now,
            failed: false,
            draining: None,
            peer_goaway: false,
            rtt: None,
            recv_windows: 0,
            pending_priority: HashMap::new(),
            cfg,
        }
    }

    /// Feed bytes read from the socket.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) {
        if self.failed {
            return;
        }
        self.last_activity = now;
        self.inbuf.extend_from_slice(data);
        self.parse_input(now);
    }

    /// Feed bytes read from the socket, handing their buffer over. When no partial frame is
    /// held, the buffer becomes the input buffer as it is; when one is, and the buffer continues
    /// the same allocation (the driver reads into what follows its last read), the two are
    /// joined without a copy. Either way DATA payloads are slices of the buffer read from the
    /// socket: on a bulk upload every byte is copied once on its way from TLS to the handler.
    /// A driver that moves to a new read buffer starts it with [`Self::take_unparsed_input`].
    ///
    /// A buffer that does not continue the held bytes (the TLS stream hands over each record's
    /// plaintext where it was decrypted) is not copied onto them whole: only what completes the
    /// frame header is, and then the payload of a DATA frame is handed on from the buffer as it
    /// is, a part at a time (see `split_partial_data`); only other frames are completed by a
    /// copy (they are small: control frames and header blocks).
    pub fn handle_input_buf(&mut self, now: Instant, mut data: BytesMut) {
        if self.failed {
            return;
        }
        self.last_activity = now;
        while !self.inbuf.is_empty() && !data.is_empty() && !continues(&self.inbuf, &data) {
            if self.preface != Preface::Done {
                break;
            }
            if self.take_data_part(now, &mut data) {
                continue;
            }
            let have = self.inbuf.len();
            let need = match frame::Head::parse(&self.inbuf) {
                // The whole frame; one larger than announced is refused by `step` as it is.
                Some(h) => frame::HEADER_LEN + (h.len.min(frame::MAX_FRAME_SIZE) as usize),
                None => frame::HEADER_LEN,
            };
            let take = need.saturating_sub(have).clamp(1, data.len());
            self.inbuf.extend_from_slice(&data[..take]);
            data.advance(take);
            self.parse_input(now);
            if self.failed {
                return;
            }
        }
        if self.inbuf.is_empty() {
            self.inbuf = data;
        } else {
            self.inbuf.unsplit(data);
        }
        self.parse_input(now);
        if self.inbuf.is_empty() {
            // Hold no share of the driver's read buffer between reads (an idle connection
            // would keep it alive).
            self.inbuf = BytesMut::new();
        }
    }

    /// Handle every whole frame in the input buffer; a connection error fails the connection.
    fn parse_input(&mut self, now: Instant) {
        loop {
            match self.step(now) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.fail(e);
                    break;
                }
            }
        }
    }

    /// Hands back what a busier time left allocated (queues and maps at their largest, the
    /// closed streams' slots and queues, scratch buffers); for the driver to call once the
    /// connection has been idle a while. What is still in use stays.
    pub fn shrink(&mut self) {
        self.streams.shrink();
        self.events.shrink_to_fit();
        self.heads.shrink_to_fit();
        self.sent_dirty.shrink_to_fit();
        self.recently_closed.shrink_to_fit();
        self.closed.shrink_to_fit();
        self.pending_priority.shrink_to_fit();
        self.control.shrink_to_fit();
        self.out_block = Vec::new();
        self.decoded = BytesMut::new();
        self.spare_heads = Vec::new();
        self.spans = Vec::new();
        self.encoder.shrink();
    }

    /// The bytes of a frame not yet complete (at most one frame), taken out: a driver moving to
    /// a new read buffer puts them at its start and hands them back with its next read, so that
    /// what it reads next continues them in one allocation (otherwise every later read would be
    /// copied onto them, since frames rarely end where a read does).
    ///
    /// Part of a DATA frame is handed on at `now` instead (see `split_partial_data`); what is
    /// left to carry over is then a frame header for the rest.
    pub fn take_unparsed_input(&mut self, now: Instant) -> BytesMut {
        if let Some(rest) = self.split_partial_data(now) {
            return rest;
        }
        std::mem::take(&mut self.inbuf)
    }

    /// The socket reached end of input: the peer will send nothing more.
    pub fn handle_eof(&mut self) {
        if !self.failed {
            self.failed = true;
            for id in self.streams.close_all() {
                let error = Error::Stream {
                    id,
                    reason: Reason::CANCEL,
                    initiator: Initiator::Remote,
                    detail: "connection closed by peer",
                };
                self.events.push_back(Event::Reset { stream: id, error });
            }
        }
    }

    /// Run expired timers.
    ///
    /// Our SETTINGS must be acknowledged within `settings_timeout` of the peer's preface
    /// SETTINGS (RFC 9113 §6.5.3), but that is an error only for a peer that is otherwise
    /// active: one that has sent HEADERS, DATA, RST_STREAM or a PING since the timer started
    /// uses the connection and so reads it, yet does not acknowledge. A peer silent since (a
    /// browser's spare connection) may simply not have read yet: the timer stops, the idle
    /// timeout governs (GOAWAY(NO_ERROR)), and the timer starts again at its next active frame.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed {
            return;
        }
        if self.settings_deadline.is_some_and(|d| now >= d) {
            if self.peer_active {
                return self.fail(Error::conn(Reason::SETTINGS_TIMEOUT, "SETTINGS not acknowledged in time"));
            }
            self.settings_deadline = None;
        }
        self.reset_due(now);
        if self.header_deadline.is_some_and(|d| now >= d) {
            self.fail(Error::conn(Reason::PROTOCOL_ERROR, "request header timeout"));
        } else if self.idle_deadline().is_some_and(|d| now >= d) {
            if self.awaits_application() {
                // Not idle: a request waits on its handler (a long poll, a slow upstream), whose
                // own timeouts bound it. The timer starts over.
                self.last_activity = now;
            } else {
                self.fail(Error::Connection {
                    reason: Reason::NO_ERROR,
                    initiator: Initiator::Local,
                    detail: "idle timeout",
                });
            }
        }
    }

    /// The next deadline, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed {
            return None;
        }
        let reset = self.reset_after.iter().map(|&(_, at)| at).min();
        [self.settings_deadline, self.header_deadline, self.idle_deadline(), reset].into_iter().flatten().min()
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the driver should keep reading: false once the connection failed or while
    /// too much control output (e.g. PING acknowledgements) waits for the socket.
    pub fn wants_read(&self) -> bool {
        !self.failed && self.control.len() < MAX_CONTROL_BACKLOG
    }

    /// Whether the connection is finished: once the driver has written everything
    /// `poll_transmit` produced, it closes the socket.
    pub fn is_done(&self) -> bool {
        let quiet = self.control.is_empty() && self.heads.is_empty();
        if self.failed {
            return quiet;
        }
        (self.draining.is_some() || self.peer_goaway) && self.streams.is_empty() && quiet
    }

    /// Announce a graceful shutdown without refusing anything yet: GOAWAY with the largest
    /// stream identifier (RFC 9113 §6.8: "a server that is attempting to gracefully shut down
    /// a connection SHOULD send an initial GOAWAY frame with the last stream identifier set to
    /// 2^31-1"). The peer stops opening streams; those already on the wire are still served.
    /// [`Connection::go_away`], at least a round trip later, names the real last stream.
    pub fn go_away_announce(&mut self) {
        if self.failed || self.draining.is_some() {
            return;
        }
        GoAway { last_stream: (1 << 31) - 1, reason: Reason::NO_ERROR, debug: Vec::new() }.encode(&mut self.control);
    }

    /// Start a graceful shutdown: GOAWAY with the last stream we will process (RFC 9113 §6.8);
    /// streams up to it finish, later ones are refused.
    pub fn go_away(&mut self) {
        if self.failed || self.draining.is_some() {
            return;
        }
        self.draining = Some(self.max_client_stream);
        GoAway { last_stream: self.max_client_stream, reason: Reason::NO_ERROR, debug: Vec::new() }
            .encode(&mut self.control);
    }

    /// The path's current round-trip time (from TCP_INFO): window tuning measures per RTT.
    pub fn handle_rtt(&mut self, rtt: Duration) {
        if !rtt.is_zero() {
            self.rtt = Some(rtt);
        }
    }

    /// The receive window currently granted to `stream`, if it is open.
    pub fn stream_window(&self, stream: u32) -> Option<u32> {
        self.streams.get(&stream).map(|s| s.recv.target())
    }

    /// Bytes the peer is bound to send without anything more from us: over the streams still
    /// receiving a body of declared length (`content-length`, which the body must match, RFC
    /// 9113 §8.1.1), what remains of it within the stream's window, all within the
    /// connection's window, less the input held here and not yet parsed (a frame cut by a
    /// read). A body of undeclared length counts for nothing: it may end at any frame. A
    /// driver may let that many bytes gather in the socket before it reads (the server's
    /// `sluice_tune::recv_mark`); anything else the peer sends only comes on top.
    pub fn declared_input(&self) -> u64 {
        if self.failed {
            return 0;
        }
        let mut sum = 0u64;
        for (_, s) in self.streams.iter() {
            if let Some(cl) = s.content_length.filter(|_| s.recv_open) {
                sum += cl.saturating_sub(s.received).min(u64::from(s.recv.open()));
            }
        }
        sum.min(u64::from(self.recv_window.open())).saturating_sub(self.inbuf.len() as u64)
    }

    /// Take back a request head (`Event::Request`) the application has done with (what it
    /// still holds is dropped now): a later request's head goes in it, and in its field list
    /// (each was an allocation and a free per request). A field list longer than a browser's
    /// usual request head is let go, and so are heads beyond [`SPARE_HEADS`].
    pub fn recycle_head(&mut self, mut head: Box<RequestHead>) {
        if self.spare_heads.len() < SPARE_HEADS {
            head.clear();
            if head.fields.capacity() > KEPT_FIELDS {
                head.fields = Vec::new();
            }
            self.spare_heads.push(head);
        }
    }

    /// Number of open streams.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether a stream waits on the application: its request has arrived whole and its
    /// response is not complete, with nothing held back by the peer's flow-control windows.
    /// Such a connection is not idle, however long the answer takes; one whose streams wait on
    /// the peer (a request body that stopped coming, a response behind a shut window) is.
    /// Looked at only when the idle timer fires, not on every turn.
    fn awaits_application(&self) -> bool {
        self.streams.iter().any(|(_, s)| !s.recv_open && s.send_open && s.queued == 0 && !s.end_queued)
    }

    /// No bytes in and none framed out for `idle_timeout`: an idle connection, or one stalled
    /// on a peer that never opens its flow-control window (zero-window stall), unless a
    /// request waits on the application ([`Connection::awaits_application`]).
    fn idle_deadline(&self) -> Option<Instant> {
        self.block.is_none().then(|| self.last_activity + self.cfg.idle_timeout)
    }

    /// A connection error: queue GOAWAY, forget the streams, stop.
    fn fail(&mut self, e: Error) {
        if self.failed {
            return;
        }
        let reason = e.reason();
        let detail = match &e {
            Error::Connection { detail, .. } | Error::Stream { detail, .. } => *detail,
        };
        let last = self.max_client_stream;
        GoAway { last_stream: last, reason, debug: detail.as_bytes().to_vec() }.encode(&mut self.control);
        self.heads.clear();
        for id in self.streams.close_all() {
            self.events.push_back(Event::Reset { stream: id, error: e.clone() });
        }
        self.sched = Scheduler::default();
        self.failed = true;
        self.events.push_back(Event::ConnectionError(e));
    }

    /// Count a frame that did no useful work (`Config::max_glitches_per_window`): beyond the
    /// budget the connection fails with ENHANCE_YOUR_CALM, `what` naming the last kind.
    fn glitch(&mut self, now: Instant, what: &'static str) -> Result<(), Error> {
        if self.glitches.spend(now) {
            return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, what));
        }
        Ok(())
    }

    /// The peer sent a frame that uses the connection: a missing SETTINGS ACK is now its fault
    /// (see [`Connection::handle_timeout`]); the timer starts if a silent spell had stopped it.
    fn on_active(&mut self, now: Instant) {
        self.peer_active = true;
        if self.unacked_settings > 0 && self.settings_deadline.is_none() {
            self.settings_deadline = Some(now + self.cfg.settings_timeout);
        }
    }

    /// Reset a stream because of an error, ours or the peer's, and tell the application.
    fn reset_stream(&mut self, now: Instant, error: Error) {
        let Error::Stream { id, reason, initiator, .. } = error else {
            return self.fail(error);
        };
        RstStream { stream: id, reason }.encode(&mut self.control);
        if initiator == Initiator::Remote && self.resets.spend(now) {
            return self.fail(Error::conn(Reason::ENHANCE_YOUR_CALM, "too many stream errors"));
        }
        if self.remove_stream(id) {
            self.mark_reset(id);
            self.events.push_back(Event::Reset { stream: id, error });
        }
    }

    /// A stream whose response is complete while its request is still open: RST_STREAM with
    /// NO_ERROR after the response's last frame (RFC 9113 §8.1), and the request body's reader
    /// told it ends there (a reset, not a clean end: the body is incomplete).
    /// Reset the streams of [`Connection::reset_after`] that are due at `now`.
    fn reset_due(&mut self, now: Instant) {
        if self.reset_after.iter().any(|&(_, at)| at <= now) {
            let mut list = std::mem::take(&mut self.reset_after);
            list.retain(|&(id, at)| {
                if at <= now {
                    self.finish_early(id);
                }
                at > now
            });
            self.reset_after = list;
        }
    }

    fn finish_early(&mut self, id: u32) {
        match self.streams.get(&id) {
            None => return,
            // The request's body ended meanwhile: nothing to stop.
            Some(s) if !s.recv_open => {
                self.remove_stream(id);
                return;
            }
            Some(_) => {}
        }
        let reason = Reason::NO_ERROR;
        RstStream { stream: id, reason }.encode(&mut self.control);
        if self.remove_stream(id) {
            self.mark_reset(id);
            let error = Error::Stream { id, reason, initiator: Initiator::Local, detail: "response complete" };
            self.events.push_back(Event::Reset { stream: id, error });
        }
    }

    /// We sent RST_STREAM on `id`, just forgotten: frames for it that the peer sent before it
    /// read ours are ignored (RFC 9113 §5.1), not answered with another reset.
    fn mark_reset(&mut self, id: u32) {
        if let Some(entry) = self.recently_closed.iter_mut().rev().find(|(closed, _, _)| *closed == id) {
            entry.2 = true;
        }
    }

    /// Forget a stream: return its unconsumed credit to the connection window and remember it
    /// as closed. Returns whether it existed.
    fn remove_stream(&mut self, id: u32) -> bool {
        let Some(s) = self.streams.close(id) else { return false };
        stop_receiving(&mut self.recv_windows, &mut *self.policy, s);
        if s.scheduled {
            self.sched.remove(id, s.priority);
        }
        let (unreleased, update_credit) = (s.unreleased, s.update_credit);
        self.heads.retain(|&h| h != id);
        self.recv_window.release(u32::try_from(unreleased).unwrap_or(u32::MAX));
        if self.recently_closed.len() == RECENTLY_CLOSED {
            self.recently_closed.pop_front();
        }
        self.recently_closed.push_back((id, update_credit, false));
        if self.report_closed {
            self.closed.push(id);
        }
        true
    }

    /// From now on, keep the id of every stream the connection forgets (closed both ways, or
    /// reset) for [`Connection::take_closed`]. Off by default: a caller that never takes them
    /// would keep a list that grows with every stream. A server's stream layer uses it to learn
    /// when a finished request's stream is gone without asking about each one on every turn.
    pub fn report_closed(&mut self) {
        self.report_closed = true;
    }

    /// The streams forgotten since the last call, in the order they went, appended to `out`;
    /// `false` (and nothing appended) unless [`Connection::report_closed`] was called.
    pub fn take_closed(&mut self, out: &mut Vec<u64>) -> bool {
        out.extend(self.closed.drain(..).map(u64::from));
        self.report_closed
    }

    /// Close the stream if both directions are done.
    fn maybe_close(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(|s| !s.recv_open && !s.send_open) {
            self.remove_stream(id);
        }
    }

    /// Put a stream in or out of the scheduler to match its state.
    fn update_ready(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        let ready = s.ready();
        if ready != s.scheduled {
            if ready {
                self.urgencies_seen |= 1 << s.priority.urgency.min(7);
                self.sched.push(id, s.priority);
            } else {
                self.sched.remove(id, s.priority);
            }
            s.scheduled = ready;
        }
    }

    /// Open stream `id`. One that will receive a body (`end_stream` false) counts in the sum
    /// of receive windows until it ends.
    fn open_stream(&mut self, id: u32, end_stream: bool) -> &mut Stream {
        let initial = self.policy.initial_stream_window();
        let s = self.streams.open(id, self.peer_initial_window, initial, initial);
        self.recv_windows += u64::from(initial);
        s.recv_open = !end_stream;
        if end_stream {
            stop_receiving(&mut self.recv_windows, &mut *self.policy, s);
        }
        s
    }
}

/// Raise stream `s`'s receive window to `target` (a policy's answer; windows never shrink),
/// counting the growth in the connection's sum of receive windows (`recv_windows`). Whether it
/// grew. A function of the parts, as [`stop_receiving`] is.
fn raise_target(recv_windows: &mut u64, s: &mut Stream, target: u32) -> bool {
    let before = s.recv.target();
    if target <= before {
        return false;
    }
    s.recv.set_target(target);
    *recv_windows += u64::from(s.recv.target() - before);
    true
}

/// Stream `s` will receive no more body: its window leaves the connection's sum
/// (`recv_windows`) and its growth goes back to the budget. A function of the parts rather than
/// a method, so that `s` can be one of the connection's own streams.
fn stop_receiving(recv_windows: &mut u64, policy: &mut dyn WindowPolicy, s: &mut Stream) {
    if s.tuning {
        s.tuning = false;
        *recv_windows = recv_windows.saturating_sub(u64::from(s.recv.target()));
        policy.on_stream_closed(&mut s.tune);
    }
}

#[cfg(test)]
mod tests;

/// Whether `next` starts where `held` ends in memory (the same read buffer, read on into), so
/// that `BytesMut::unsplit` joins them without a copy.
fn continues(held: &BytesMut, next: &BytesMut) -> bool {
    held.as_ptr().wrapping_add(held.len()) == next.as_ptr()
}
