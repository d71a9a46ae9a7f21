//! The HTTP/3 server connection: stream bytes in, stream writes, resets and events out.
//!
//! # Streams
//! The engine sees QUIC streams only by id (RFC 9000 §2.1: the two low bits say who opened the
//! stream and whether it is unidirectional) and never opens one. The driver opens our three
//! unidirectional streams (control, QPACK encoder, QPACK decoder) when the connection is
//! established and passes their ids to [`Connection::new`]; their first bytes (the stream types,
//! then SETTINGS) are the first writes [`Connection::poll_transmit`] returns. Client streams need
//! no announcement: the first [`Connection::on_stream_data`] for an id opens it.
//!
//! # Call order
//! The contract is the HTTP/2 engine's: the current time is passed in with every input, and
//! the engine reads no clock. Feed input with `on_stream_opened`, `on_stream_data`,
//! `on_stream_reset` and `on_stop_sending` (each takes `now` first, as HTTP/2's
//! `handle_input(now, ..)`) and expired timers with [`Connection::handle_timeout`]; then drain
//! [`Connection::poll_event`] (requests, bodies, resets) and [`Connection::poll_transmit`]
//! (writes, resets, STOP_SENDING, close), and arm one timer at [`Connection::poll_timeout`]. The handler side answers with `send_response`,
//! `send_data`, `send_trailers`, `reset` and `stop_reading`. Call `poll_transmit` only when the
//! transport can take more: each write of body data is one scheduler pick of at most one
//! quantum (a stream the scheduler would pick again anyway gets a longer frame, a chunk per
//! write), so the order in which the driver pulls is the RFC 9218 priority order. The driver
//! must accept every write whole (buffering what the QUIC stream does not take at once) and
//! then report [`Connection::on_stream_blocked`] until the stream is writable again.
//!
//! # Timers and budgets
//! A request stream must complete its header section within `Config::header_timeout` of being
//! opened, or it is reset with H3_REQUEST_INCOMPLETE and its reading stopped. Request streams
//! the peer resets (or stops before the response is complete) and streams we reset for its
//! errors are counted against `Config::max_resets_per_window` per `Config::flood_window`; one
//! more closes the connection with H3_EXCESSIVE_LOAD (RFC 9114 §10.5). So do frames and streams
//! that do no useful work (unknown and reserved frames and stream types, empty DATA, repeated
//! PRIORITY_UPDATE, ...) beyond `Config::max_glitches_per_window`, which says what counts.

mod control;
mod request;
mod send;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use sluice_http::Priority;
use sluice_http::{Budget, Scheduler};
use sluice_http::{Field, RequestHead};
use sluice_qpack as qpack;

use crate::config::Config;
use crate::error::{Code, Error, Initiator, Scope};
use crate::frame::{self, setting, stream_type, FrameReader};
use crate::ids::{Kind, Retired};
use crate::stream::Stream;
use crate::varint;

/// Something the application must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request. Answer with [`Connection::send_response`].
    Request {
        /// Request stream id.
        stream: u64,
        /// Pseudo-header and regular fields.
        head: RequestHead,
        /// The request has no body.
        end_stream: bool,
    },
    /// Request body bytes.
    Data {
        /// Stream.
        stream: u64,
        /// Bytes (empty when only `end_stream` is news).
        data: Bytes,
        /// Last body bytes.
        end_stream: bool,
    },
    /// Request trailers; the body is complete.
    Trailers {
        /// Stream.
        stream: u64,
        /// Trailer fields.
        fields: Vec<Field>,
    },
    /// The request's header section exceeds our SETTINGS_MAX_FIELD_SECTION_SIZE. The engine
    /// has stopped reading the request (STOP_SENDING with H3_NO_ERROR, RFC 9114 §4.1); the
    /// application answers 431 (Request Header Fields Too Large, RFC 9114 §4.2.2) with
    /// [`Connection::send_response`], or resets the stream.
    HeaderTooLarge {
        /// Stream.
        stream: u64,
    },
    /// A stream the application knows is gone (reset by the peer, or by us for a peer error,
    /// or the connection failed): stop work on it.
    StreamReset {
        /// Stream.
        stream: u64,
        /// Why.
        error: Error,
    },
    /// The client sent GOAWAY (RFC 9114 §5.2): it is shutting down. A server usually answers
    /// with [`Connection::go_away`].
    GoAway {
        /// The push id in the frame (we never push, so it has no further meaning).
        push_id: u64,
    },
    /// The connection failed; the driver closes it with the [`Transmit::Close`] that follows.
    ConnectionError(Error),
}

/// What the driver must do on the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// Write `data` and then `body` to `stream`, then finish it if `fin`.
    Write {
        /// Stream id (a request stream or one of our unidirectional streams).
        stream: u64,
        /// Bytes (empty when only `fin` is news).
        data: Bytes,
        /// A DATA frame's payload, after its frame header in `data`: the handler's own bytes,
        /// kept apart so that they are not copied (empty for every other write, and where a
        /// payload spans several of the handler's chunks).
        body: Bytes,
        /// Finish the sending part of the stream after `data` and `body`.
        fin: bool,
    },
    /// Reset the sending part of `stream` (QUIC RESET_STREAM).
    Reset {
        /// Stream.
        stream: u64,
        /// Application error code.
        code: Code,
    },
    /// Abort reading `stream` (QUIC STOP_SENDING).
    StopSending {
        /// Stream.
        stream: u64,
        /// Application error code.
        code: Code,
    },
    /// Close the connection (QUIC CONNECTION_CLOSE); nothing follows.
    Close {
        /// Application error code.
        code: Code,
        /// Reason phrase.
        reason: &'static str,
    },
}

/// A call the engine could not honour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No such open stream (reset, finished, or never opened).
    UnknownStream,
    /// Not allowed in the stream's state (head already sent, body already ended, no head yet).
    InvalidState,
    /// Not a status HTTP/3 can send (three digits; 101 is not allowed, RFC 9114 §4.5).
    InvalidStatus,
    /// The stream's send buffer is full: wait until [`Connection::drain_sent`] reports
    /// progress. The data was not queued.
    Full,
    /// The field section exceeds the client's SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114
    /// §4.2.2: we SHOULD NOT send it).
    FieldSectionTooLarge,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::UnknownStream => "no such open stream",
            Self::InvalidState => "not allowed in the stream's state",
            Self::InvalidStatus => "status code not allowed",
            Self::Full => "send buffer full",
            Self::FieldSectionTooLarge => "field section exceeds the peer's limit",
        })
    }
}

impl std::error::Error for SendError {}

/// A client unidirectional stream (RFC 9114 §6.2).
#[derive(Debug)]
enum Uni {
    /// The stream type has not fully arrived.
    Pending(varint::Partial),
    Control,
    Encoder,
    Decoder,
}

/// What we know about the client.
#[derive(Debug)]
struct Peer {
    /// Its SETTINGS arrived (the first frame on its control stream, RFC 9114 §6.2.1).
    settings: bool,
    /// Its SETTINGS_MAX_FIELD_SECTION_SIZE (unlimited by default, RFC 9114 §7.2.4.1).
    max_field_section_size: u64,
    /// It sent SETTINGS_H3_DATAGRAM = 1 (RFC 9297 §2.1.1).
    h3_datagram: bool,
    control: Option<u64>,
    encoder: Option<u64>,
    decoder: Option<u64>,
    /// The push id of its last GOAWAY.
    goaway: Option<u64>,
    /// Its last MAX_PUSH_ID.
    max_push_id: Option<u64>,
    /// A frame of unknown or reserved type arrived on its control stream: later ones are
    /// glitches.
    unknown_control_frame: bool,
}

/// The reserved frame type [`Connection::keep_alive`] sends (RFC 9114 §7.2.8: `0x1f * N +
/// 0x21`; N = 1, 0x40, two bytes as a varint).
const KEEP_ALIVE_FRAME: u64 = 0x1f + 0x21;

/// One HTTP/3 server connection.
pub struct Connection {
    cfg: Config,
    control_id: u64,
    encoder_id: u64,
    decoder_id: u64,
    encoder: qpack::Encoder,
    decoder: qpack::Decoder,
    /// The `Date` value final response heads carry ([`Connection::set_date`]).
    date: Option<bytes::Bytes>,
    peer: Peer,
    /// Frame reader of the client's control stream.
    control_reader: FrameReader,
    uni: HashMap<u64, Uni>,
    retired_uni: Retired,
    /// Request streams. Fx-hashed (as HTTP/2's): several lookups per request, and at most as
    /// many as the QUIC stream limit lets the peer open, so colliding ids gain a peer little.
    streams: rustc_hash::FxHashMap<u64, Stream>,
    retired: Retired,
    /// Highest request stream id seen.
    max_request_id: Option<u64>,
    /// PRIORITY_UPDATE values for request streams not opened yet (RFC 9218 §7).
    pending_priority: HashMap<u64, Priority>,
    sched: Scheduler,
    /// Urgencies of the final responses queued so far, one bit each.
    urgencies_seen: u8,
    /// Streams with response heads to write, in call order.
    heads: VecDeque<u64>,
    control_out: Vec<u8>,
    encoder_out: Vec<u8>,
    decoder_out: Vec<u8>,
    /// Resets and STOP_SENDINGs to hand out, in order.
    ops: VecDeque<Transmit>,
    events: VecDeque<Event>,
    sent_dirty: Vec<u64>,
    /// The stream id of our GOAWAY: requests on it and above are rejected.
    goaway: Option<u64>,
    failed: bool,
    /// The CONNECTION_CLOSE to hand out after a failure.
    close: Option<Transmit>,
    /// Header-section deadlines of request streams, earliest first (each also in its stream).
    header_deadlines: BTreeSet<(Instant, u64)>,
    /// Request streams reset by the peer or for its errors.
    resets: Budget,
    /// Frames and streams that did no useful work (`Config::max_glitches_per_window`).
    glitches: Budget,
    /// The time of the latest input or timer call: when what it causes happens.
    now: Option<Instant>,
}

impl Connection {
    /// A new server connection whose unidirectional streams the driver has opened with ids
    /// `control`, `encoder` and `decoder` (server-initiated: low bits 0x3). Our control stream
    /// header and SETTINGS (and ORIGIN, if configured) are queued at once: RFC 9114 §7.2.4.2
    /// says SETTINGS goes out as soon as the transport can send.
    pub fn new(cfg: Config, control: u64, encoder: u64, decoder: u64) -> Self {
        debug_assert!([control, encoder, decoder].iter().all(|&id| Kind::of(id) == Kind::ServerUni));
        let mut control_out = Vec::with_capacity(64);
        // RFC 9114 §6.2.1: the stream type, then SETTINGS as the first frame.
        varint::encode(stream_type::CONTROL, &mut control_out);
        let mut settings = vec![
            (setting::QPACK_MAX_TABLE_CAPACITY, cfg.qpack_max_table_capacity),
            (setting::MAX_FIELD_SECTION_SIZE, cfg.max_field_section_size),
            (setting::QPACK_BLOCKED_STREAMS, cfg.qpack_blocked_streams),
        ];
        if cfg.enable_connect_protocol {
            settings.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        if cfg.h3_datagram {
            settings.push((setting::H3_DATAGRAM, 1));
        }
        if cfg.grease {
            settings.push((setting::GREASE, setting::GREASE_VALUE));
        }
        frame::encode_settings(&settings, &mut control_out);
        if let Some(origins) = &cfg.origins {
            // RFC 9412 §2 with RFC 8336 §2: on the control stream, right after SETTINGS.
            frame::encode_origin(origins, &mut control_out);
        }
        let mut encoder_out = Vec::new();
        varint::encode(stream_type::QPACK_ENCODER, &mut encoder_out);
        let mut decoder_out = Vec::new();
        varint::encode(stream_type::QPACK_DECODER, &mut decoder_out);
        Self {
            // The client's QPACK settings are 0 until its SETTINGS arrive (RFC 9204 §3.2.3,
            // RFC 9114 §7.2.4.2: use the defaults before then).
            encoder: qpack::Encoder::new(0, 0),
            date: None,
            decoder: qpack::Decoder::new(
                cfg.qpack_max_table_capacity,
                cfg.qpack_blocked_streams,
                cfg.max_field_section_size,
            ),
            peer: Peer {
                settings: false,
                max_field_section_size: u64::MAX,
                h3_datagram: false,
                control: None,
                encoder: None,
                decoder: None,
                goaway: None,
                max_push_id: None,
                unknown_control_frame: false,
            },
            control_reader: FrameReader::default(),
            uni: HashMap::new(),
            retired_uni: Retired::default(),
            streams: rustc_hash::FxHashMap::default(),
            retired: Retired::default(),
            max_request_id: None,
            pending_priority: HashMap::new(),
            sched: Scheduler::default(),
            urgencies_seen: 0,
            heads: VecDeque::new(),
            control_out,
            encoder_out,
            decoder_out,
            ops: VecDeque::new(),
            events: VecDeque::new(),
            sent_dirty: Vec::new(),
            goaway: None,
            failed: false,
            close: None,
            header_deadlines: BTreeSet::new(),
            resets: Budget::new(cfg.max_resets_per_window, cfg.flood_window),
            glitches: Budget::new(cfg.max_glitches_per_window, cfg.flood_window),
            now: None,
            control_id: control,
            encoder_id: encoder,
            decoder_id: decoder,
            cfg,
        }
    }

    /// The client opened `id` at `now` (optional: the first data on a stream opens it too).
    /// A request stream's header timer starts when it is opened.
    pub fn on_stream_opened(&mut self, now: Instant, id: u64) {
        if !self.failed && Kind::of(id) == Kind::Request {
            self.now = Some(now);
            self.open_request(id);
        }
    }

    /// Bytes read from stream `id` at `now`, in order; `fin` when the stream ended cleanly after
    /// them.
    pub fn on_stream_data(&mut self, now: Instant, id: u64, data: &[u8], fin: bool) {
        if self.failed {
            return;
        }
        self.now = Some(now);
        match Kind::of(id) {
            Kind::Request => self.on_request_data(id, data, fin),
            Kind::ClientUni => self.on_uni_data(id, data, fin),
            // The client cannot send on streams we open, and HTTP/3 uses no server-initiated
            // bidirectional streams (RFC 9114 §6.1): a driver bug, nothing to read.
            Kind::ServerBidi | Kind::ServerUni => {}
        }
        self.flush_decoder();
    }

    /// The client reset its sending part of `id` (QUIC RESET_STREAM) with `code`, seen at
    /// `now`. A reset request stream counts against the reset budget.
    pub fn on_stream_reset(&mut self, now: Instant, id: u64, code: u64) {
        if self.failed {
            return;
        }
        self.now = Some(now);
        match Kind::of(id) {
            Kind::Request => self.on_request_reset(id, Code(code)),
            Kind::ClientUni => self.on_uni_reset(id),
            Kind::ServerBidi | Kind::ServerUni => {}
        }
        self.flush_decoder();
    }

    /// The client asked us to stop sending on `id` (QUIC STOP_SENDING) with `code`, seen at
    /// `now`. A request stream whose response was not complete counts against the reset budget.
    pub fn on_stop_sending(&mut self, now: Instant, id: u64, code: u64) {
        if self.failed {
            return;
        }
        self.now = Some(now);
        if [self.control_id, self.encoder_id, self.decoder_id].contains(&id) {
            // RFC 9114 §6.2.1 (the receiver MUST NOT ask to close the control stream) and
            // RFC 9204 §4.2 (closing a QPACK stream is a connection error).
            return self.fail(Error::conn(Code::H3_CLOSED_CRITICAL_STREAM, "STOP_SENDING on a critical stream"));
        }
        if Kind::of(id) == Kind::Request {
            self.on_request_stop_sending(id, Code(code));
            self.flush_decoder();
        }
    }

    /// Run the timers that expired at `now`: request streams whose header section is not
    /// complete within `Config::header_timeout` are reset with H3_REQUEST_INCOMPLETE and their
    /// reading stopped (RFC 9114 §4.1.1); each counts against the reset budget.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed {
            return;
        }
        self.now = Some(now);
        while let Some(&(deadline, id)) = self.header_deadlines.first() {
            if deadline > now {
                break;
            }
            self.header_deadlines.pop_first();
            if let Some(s) = self.streams.get_mut(&id) {
                s.header_deadline = None;
            }
            let code = Code::H3_REQUEST_INCOMPLETE;
            let error = Error::stream(id, code, "request header timeout");
            self.abort_stream(id, Some(code), Some(code), Some(error));
            if self.spend_reset() {
                break;
            }
        }
        self.flush_decoder();
    }

    /// The next deadline, if any: when [`Connection::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed {
            return None;
        }
        self.header_deadlines.first().map(|&(deadline, _)| deadline)
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Announce a graceful shutdown without refusing anything yet: GOAWAY with the largest
    /// client-initiated bidirectional stream identifier (RFC 9114 §5.2 lets a server send
    /// several, each no larger than the last). The peer stops opening requests; those already
    /// on the wire are still served. [`Connection::go_away`], a round trip later, names the
    /// real limit.
    pub fn go_away_announce(&mut self) {
        if self.failed || self.goaway.is_some() {
            return;
        }
        let mut payload = Vec::with_capacity(8);
        // 2^62 - 4: the largest varint that is a client bidirectional stream id.
        varint::encode((1 << 62) - 4, &mut payload);
        frame::encode(frame::kind::GOAWAY, &payload, &mut self.control_out);
    }
    /// Whether HTTP Datagrams may ride QUIC DATAGRAM frames: we sent SETTINGS_H3_DATAGRAM = 1
    /// and so did the peer (RFC 9297 §2.1.1).
    pub fn datagrams(&self) -> bool {
        self.cfg.h3_datagram && self.peer.h3_datagram
    }

    /// Start a graceful shutdown (RFC 9114 §5.2): GOAWAY with the first request stream id we
    /// will not process (the one after the highest we have seen). Requests below it finish;
    /// later ones are rejected with H3_REQUEST_REJECTED.
    pub fn go_away(&mut self) {
        if self.failed || self.goaway.is_some() {
            return;
        }
        let id = self.max_request_id.map_or(0, |m| m + 4);
        self.goaway = Some(id);
        let mut payload = Vec::with_capacity(8);
        varint::encode(id, &mut payload);
        frame::encode(frame::kind::GOAWAY, &payload, &mut self.control_out);
    }

    /// Whether a request waits on the application: delivered whole (its FIN read), its response
    /// not complete, with nothing of it queued (so nothing waits on the peer's flow control).
    /// Such a connection is not idle however long the answer takes (a long poll, a slow
    /// upstream): the driver keeps it alive with [`Connection::keep_alive`]. Looked at when the
    /// driver's keep-alive timer fires, not on every turn.
    pub fn awaits_application(&self) -> bool {
        self.streams
            .values()
            .any(|s| s.delivered && s.recv.fin && !s.send.done && s.send.queued == 0 && !s.send.end_queued)
    }

    /// Something for the peer to acknowledge, so that neither side's QUIC idle timer runs out
    /// while a request waits on the application (RFC 9000 §10.1.2: it restarts on a packet
    /// received, and on sending an ack-eliciting one): a frame of a reserved type on the
    /// control stream, which every peer ignores (RFC 9114 §7.2.8).
    pub fn keep_alive(&mut self) {
        if !self.failed {
            frame::encode(KEEP_ALIVE_FRAME, &[], &mut self.control_out);
        }
    }

    /// Whether the connection is finished: after a failure once the close was handed out;
    /// after [`Connection::go_away`] once every accepted request is complete and everything
    /// was handed to the driver. The driver then closes the QUIC connection (with H3_NO_ERROR
    /// after a graceful shutdown, RFC 9114 §5.2).
    pub fn is_done(&self) -> bool {
        if self.failed {
            return self.close.is_none();
        }
        self.goaway.is_some() && self.streams.is_empty() && !self.wants_write()
    }

    /// Whether the driver should keep reading request stream `id`. False while its header
    /// section waits for QPACK encoder-stream data (its body cannot be delivered before its
    /// head; resume when this is true again, at the latest with the stream's `Event::Request`
    /// or when it is reset), and once nothing more is read from it.
    pub fn wants_read(&self, id: u64) -> bool {
        if self.failed || self.retired.contains(id) {
            return false;
        }
        self.streams.get(&id).is_none_or(|s| !s.recv.done && s.recv.phase != crate::stream::Phase::HeadBlocked)
    }

    /// Number of request streams the engine tracks.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// A connection error: queue CONNECTION_CLOSE, forget every stream, stop.
    fn fail(&mut self, e: Error) {
        if self.failed {
            return;
        }
        self.failed = true;
        self.close = Some(Transmit::Close { code: e.code, reason: e.reason });
        let mut delivered: Vec<u64> = self.streams.iter().filter(|(_, s)| s.delivered).map(|(&id, _)| id).collect();
        delivered.sort_unstable();
        for stream in delivered {
            self.events.push_back(Event::StreamReset { stream, error: e });
        }
        self.streams.clear();
        self.header_deadlines.clear();
        self.sched = Scheduler::default();
        self.heads.clear();
        self.ops.clear();
        self.events.push_back(Event::ConnectionError(e));
    }

    /// Apply an error: a stream error resets that stream, a connection error closes.
    fn on_error(&mut self, e: Error) {
        match e.scope {
            Scope::Stream(id) => {
                self.abort_stream(id, Some(e.code), Some(e.code), Some(e));
                if e.initiator == Initiator::Remote {
                    self.spend_reset();
                }
            }
            Scope::Connection => self.fail(e),
        }
    }

    /// Count one request stream reset by the peer or for its error; beyond the budget, close
    /// the connection with H3_EXCESSIVE_LOAD (RFC 9114 §10.5). Returns whether it closed.
    fn spend_reset(&mut self) -> bool {
        // Invariant: every input and timer call sets `now` before anything it causes.
        let Some(now) = self.now else { return false };
        if self.resets.spend(now) {
            self.fail(Error::conn(Code::H3_EXCESSIVE_LOAD, "too many stream resets"));
            return true;
        }
        false
    }

    /// Count a frame or stream that did no useful work (`Config::max_glitches_per_window`);
    /// beyond the budget the error to close the connection with (H3_EXCESSIVE_LOAD, RFC 9114
    /// §10.5), `what` naming the last kind.
    fn glitch(&mut self, what: &'static str) -> Result<(), Error> {
        // Invariant: every input and timer call sets `now` before anything it causes.
        let Some(now) = self.now else { return Ok(()) };
        if self.glitches.spend(now) {
            return Err(Error::conn(Code::H3_EXCESSIVE_LOAD, what));
        }
        Ok(())
    }

    /// The header section of `id` is complete (or will not be read): its timer stops.
    fn stop_header_timer(&mut self, id: u64) {
        if let Some(deadline) = self.streams.get_mut(&id).and_then(|s| s.header_deadline.take()) {
            self.header_deadlines.remove(&(deadline, id));
        }
    }

    /// End a request stream abruptly: reset the sending part with `reset` and stop reading with
    /// `stop` where those directions are still open (RFC 9114 §4.1.1), tell the application
    /// if it knows the stream, and forget it.
    fn abort_stream(&mut self, id: u64, reset: Option<Code>, stop: Option<Code>, event: Option<Error>) {
        let Some(s) = self.streams.remove(&id) else { return };
        if let Some(deadline) = s.header_deadline {
            self.header_deadlines.remove(&(deadline, id));
        }
        if s.scheduled {
            self.sched.remove(sched_key(id), s.priority);
        }
        if s.send.in_heads {
            self.heads.retain(|&h| h != id);
        }
        if let (Some(code), false) = (reset, s.send.done) {
            self.ops.push_back(Transmit::Reset { stream: id, code });
        }
        if !s.recv.done {
            if let Some(code) = stop {
                self.ops.push_back(Transmit::StopSending { stream: id, code });
            }
            // RFC 9204 §2.2.2.2: reading abandoned before the end of the stream.
            self.decoder.cancel_stream(id);
        }
        if let (Some(error), true) = (event, s.delivered) {
            self.events.push_back(Event::StreamReset { stream: id, error });
        }
        self.retired.insert(id);
    }

    /// Reject a request stream before any processing (RFC 9114 §4.1.1: H3_REQUEST_REJECTED,
    /// which lets the client retry it).
    fn reject(&mut self, id: u64) {
        self.ops.push_back(Transmit::Reset { stream: id, code: Code::H3_REQUEST_REJECTED });
        self.ops.push_back(Transmit::StopSending { stream: id, code: Code::H3_REQUEST_REJECTED });
        self.decoder.cancel_stream(id);
        self.retired.insert(id);
    }

    /// Track a request stream the client opened; false if it is gone or refused.
    fn open_request(&mut self, id: u64) -> bool {
        if self.retired.contains(id) {
            return false;
        }
        if self.streams.contains_key(&id) {
            return true;
        }
        // The scheduler keys streams by `id >> 2` as u32: 2^32 requests on one connection.
        let beyond_keys = (id >> 2) > u64::from(u32::MAX);
        if self.goaway.is_some_and(|g| id >= g) || self.streams.len() >= self.cfg.max_concurrent_streams || beyond_keys
        {
            self.reject(id);
            return false;
        }
        self.max_request_id = Some(self.max_request_id.map_or(id, |m| m.max(id)));
        let update = self.pending_priority.remove(&id);
        let mut stream = Stream::new(update);
        if let Some(now) = self.now {
            let deadline = now + self.cfg.header_timeout;
            stream.header_deadline = Some(deadline);
            self.header_deadlines.insert((deadline, id));
        }
        self.streams.insert(id, stream);
        true
    }

    /// Forget a stream once both directions are over.
    fn maybe_close(&mut self, id: u64) {
        if self.streams.get(&id).is_some_and(|s| s.recv.done && s.send.done) {
            self.abort_stream(id, None, None, None);
        }
    }

    /// Put a stream in or out of the scheduler to match its state.
    fn update_ready(&mut self, id: u64) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        let ready = s.ready();
        if ready != s.scheduled {
            if ready {
                self.sched.push(sched_key(id), s.priority);
            } else {
                self.sched.remove(sched_key(id), s.priority);
            }
            s.scheduled = ready;
        }
    }

    /// Change a stream's priority, moving it in the scheduler.
    fn reprioritize(&mut self, id: u64, p: Priority) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.scheduled && s.priority != p {
            self.sched.remove(sched_key(id), s.priority);
            self.sched.push(sched_key(id), p);
        }
        s.priority = p;
    }

    /// Move the QPACK decoder's output (acknowledgments, cancellations, insert count
    /// increments) to our decoder stream.
    fn flush_decoder(&mut self) {
        while let Some(b) = self.decoder.poll_decoder_stream() {
            self.decoder_out.extend_from_slice(&b);
        }
    }
}

/// The scheduler's key for a request stream: its sequence number (RFC 9000 §2.1), which keeps
/// stream order. `open_request` refuses streams whose number does not fit.
fn sched_key(id: u64) -> u32 {
    (id >> 2) as u32
}
