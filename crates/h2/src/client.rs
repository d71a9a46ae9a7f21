//! A small sans-IO HTTP/2 client connection (RFC 9113): requests with or without a body (and
//! request trailers), responses as events (interim heads, the final head, body, trailers), and
//! the server's ORIGIN frames (RFC 8336) surfaced, which general clients (hyper's among them)
//! drop. Sluice's own client uses it to coalesce connections.
//!
//! The contract is the server engine's: the current time goes in with every input
//! ([`Client::handle_input`]) and with expired timers ([`Client::handle_timeout`]); bytes to send
//! ([`Client::poll_transmit`]), events ([`Client::poll_event`]) and the next deadline
//! ([`Client::poll_timeout`]) come out. The engine reads no clock. Its timer: the server must
//! acknowledge our SETTINGS within [`ClientConfig::settings_timeout`] (RFC 9113 §6.5.3), or the
//! connection fails with SETTINGS_TIMEOUT; that also bounds a server that never answers.
//!
//! Request bodies ([`Client::send_data`], [`Client::send_trailers`]) are framed in
//! [`Client::poll_transmit`] within the server's flow-control windows (RFC 9113 §6.9), one
//! frame per stream in turn; the caller bounds what it queues with [`Client::buffered`].
//! Received data is taken as consumed when it is handed out, so credit goes back at once, once
//! half a window has been used; with [`ClientConfig::release_on_read`] off it goes back only as
//! the caller [`Client::release`]s what it consumed, so a reader that does not keep up (a
//! proxy whose client is slow) holds the server back by a window at most.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use sluice_hpack::{DecodeError, Decoder, Encoder};

use crate::conn::SendError;
use crate::error::{Error, Initiator, Reason};
use crate::flow::{SendWindow, DEFAULT_WINDOW, MAX_WINDOW};
use crate::frame::{
    flag, kind, Continuation, Data, GoAway, Head, Headers, Origin, Ping, RstStream, Setting, Settings, WindowUpdate,
    HEADER_LEN, PREFACE,
};

/// The largest frame we accept: the RFC's default SETTINGS_MAX_FRAME_SIZE, which we never
/// raise (RFC 9113 §4.2).
const MAX_FRAME: u32 = 16_384;
/// CONTINUATION frames accepted per header block (a flood is ENHANCE_YOUR_CALM).
const MAX_CONTINUATIONS: usize = 64;
/// The largest stream id (RFC 9113 §5.1.1: 31 bits).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// What the client announces and accepts.
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    /// SETTINGS_INITIAL_WINDOW_SIZE: each response's receive window.
    pub stream_window: u32,
    /// The connection's receive window (opened with a WINDOW_UPDATE after the preface).
    pub connection_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE, and the bound on a decoded response head (RFC 9113
    /// §6.5.2 counting); a larger head resets its stream.
    pub max_header_list: u32,
    /// Time the server has to acknowledge our SETTINGS (RFC 9113 §6.5.3), from
    /// [`Client::new`]; then the connection fails with SETTINGS_TIMEOUT.
    pub settings_timeout: Duration,
    /// Receive credit goes back as data is handed out (true), or only as the caller calls
    /// [`Client::release`] (false).
    pub release_on_read: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            stream_window: 16 << 20,
            connection_window: 32 << 20,
            max_header_list: 64 * 1024,
            // As the server engine's `settings_timeout`: a round trip, with room for a slow
            // handshake on a lossy path.
            settings_timeout: Duration::from_secs(10),
            release_on_read: true,
        }
    }
}

/// A request head. Field names must be lower case (RFC 9113 §8.2.1); connection-specific
/// fields are the caller's to leave out.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `:method`.
    pub method: &'a str,
    /// `:scheme`.
    pub scheme: &'a str,
    /// `:authority`.
    pub authority: &'a str,
    /// `:path`.
    pub path: &'a str,
    /// Regular fields.
    pub fields: &'a [(&'a str, &'a str)],
}

/// What happened on the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// The server's first SETTINGS arrived.
    Ready,
    /// An ORIGIN frame (RFC 8336 §2): the origins the server says it is authoritative for on
    /// this connection, as sent (ASCII serialised, e.g. `https://b.test:8443`).
    Origin(Vec<String>),
    /// An interim response head (1xx other than 101, RFC 9113 §8.1), before the final one;
    /// there may be several (100 Continue, 103 Early Hints).
    Informational {
        /// Stream.
        stream: u32,
        /// Status code, 100 to 199.
        status: u16,
        /// Regular fields, names lower case.
        fields: Vec<(String, String)>,
    },
    /// The final response head (after any [`ClientEvent::Informational`] ones).
    Response {
        /// Stream.
        stream: u32,
        /// Status code.
        status: u16,
        /// Regular fields, names lower case.
        fields: Vec<(String, String)>,
        /// The response has no body.
        end_stream: bool,
    },
    /// Response body bytes (possibly empty when only `end_stream` is news).
    Data {
        /// Stream.
        stream: u32,
        /// Bytes.
        data: Bytes,
        /// The last of the body.
        end_stream: bool,
    },
    /// Response trailers: the response is complete.
    Trailers {
        /// Stream.
        stream: u32,
        /// Fields.
        fields: Vec<(String, String)>,
    },
    /// The stream ended without a complete response: reset by the server, refused by its
    /// GOAWAY (REFUSED_STREAM: not processed, safe to retry), or reset by us because the
    /// server broke the protocol on it.
    Reset {
        /// Stream.
        stream: u32,
        /// The code, who reset it, and why ([`Error::Stream`]).
        error: Error,
    },
    /// The server sent GOAWAY: no new requests on this connection.
    GoAway {
        /// The last stream it processes.
        last_stream: u32,
        /// Its code.
        reason: Reason,
    },
}

/// Why a request could not be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The connection failed or was closed.
    Closed,
    /// The server sent GOAWAY.
    GoingAway,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS is reached.
    TooManyStreams,
    /// Stream ids are used up (RFC 9113 §5.1.1): open a new connection.
    StreamIdsExhausted,
}

/// The request body of a stream, while it is not finished.
struct Upload {
    /// Body bytes not framed yet.
    queue: VecDeque<Bytes>,
    queued: usize,
    /// The caller ended the body: END_STREAM (on the last DATA or on the trailers) follows
    /// the queue.
    end_queued: bool,
    /// Trailer fields, HPACK-encoded only when framed (header blocks must reach the server in
    /// the order the encoder's table saw them).
    trailers: Option<Vec<(String, String)>>,
    /// What the server lets us send on the stream.
    window: SendWindow,
}

/// One request in progress.
struct Stream {
    /// The final response head arrived.
    got_head: bool,
    /// The response is complete (or abandoned): nothing more is reported for it.
    recv_done: bool,
    /// Receive credit left.
    window: i64,
    /// Bytes released and not yet credited back ([`Client::release`]).
    released: i64,
    /// The request body; `None` once END_STREAM has been framed.
    send: Option<Upload>,
}

/// A header block being collected across CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    buf: BytesMut,
    continuations: usize,
}

/// A client connection. See the module documentation.
pub struct Client {
    cfg: ClientConfig,
    out: Vec<u8>,
    input: BytesMut,
    events: VecDeque<ClientEvent>,
    enc: Encoder,
    dec: Decoder,
    next_stream: u32,
    streams: HashMap<u32, Stream>,
    /// Connection receive credit left.
    window: i64,
    /// Bytes released and not yet credited back on the connection.
    released: i64,
    /// What the server lets us send on the connection.
    send_window: SendWindow,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE: each request body's first send window.
    peer_initial_window: u32,
    block: Option<Block>,
    /// The server's SETTINGS_MAX_FRAME_SIZE and SETTINGS_MAX_CONCURRENT_STREAMS.
    peer_max_frame: usize,
    peer_max_streams: u32,
    ready: bool,
    /// When our SETTINGS must have been acknowledged; `None` once it is.
    settings_deadline: Option<Instant>,
    goaway: Option<u32>,
    failed: Option<Error>,
}

impl Client {
    /// A new connection at `now`: the preface, our SETTINGS and the connection window are
    /// queued, and the SETTINGS acknowledgement timer starts.
    pub fn new(cfg: ClientConfig, now: Instant) -> Self {
        let mut out = PREFACE.to_vec();
        Settings {
            ack: false,
            values: vec![
                // RFC 9113 §8.4: no server push.
                Setting::EnablePush(0),
                Setting::InitialWindowSize(cfg.stream_window.min(MAX_WINDOW)),
                Setting::MaxHeaderListSize(cfg.max_header_list),
            ],
        }
        .encode(&mut out);
        let connection_window = cfg.connection_window.clamp(DEFAULT_WINDOW, MAX_WINDOW);
        if connection_window > DEFAULT_WINDOW {
            WindowUpdate { stream: 0, increment: connection_window - DEFAULT_WINDOW }.encode(&mut out);
        }
        Self {
            cfg: ClientConfig { connection_window, ..cfg },
            out,
            input: BytesMut::new(),
            events: VecDeque::new(),
            enc: Encoder::new(),
            dec: Decoder::new(4096),
            next_stream: 1,
            streams: HashMap::new(),
            window: i64::from(connection_window),
            released: 0,
            send_window: SendWindow::new(DEFAULT_WINDOW),
            peer_initial_window: DEFAULT_WINDOW,
            block: None,
            peer_max_frame: MAX_FRAME as usize,
            // RFC 9113 §6.5.2: unlimited until the server says otherwise.
            peer_max_streams: u32::MAX,
            ready: false,
            settings_deadline: Some(now + cfg.settings_timeout),
            goaway: None,
            failed: None,
        }
    }

    /// Send a request without a body; returns its stream id.
    pub fn request(&mut self, req: &Request<'_>) -> Result<u32, RequestError> {
        self.send_request(req, true)
    }

    /// Send a request head; returns its stream id. With `end_stream` the request has no body;
    /// otherwise the body follows with [`Client::send_data`] and ends with its `end_stream` or
    /// with [`Client::send_trailers`].
    pub fn send_request(&mut self, req: &Request<'_>, end_stream: bool) -> Result<u32, RequestError> {
        if self.failed.is_some() {
            return Err(RequestError::Closed);
        }
        if self.goaway.is_some() {
            return Err(RequestError::GoingAway);
        }
        if self.streams.len() >= self.peer_max_streams as usize {
            return Err(RequestError::TooManyStreams);
        }
        let id = self.next_stream;
        if id > MAX_STREAM_ID {
            return Err(RequestError::StreamIdsExhausted);
        }
        self.next_stream += 2;
        let pseudo =
            [(":method", req.method), (":scheme", req.scheme), (":authority", req.authority), (":path", req.path)];
        let fields = pseudo.iter().chain(req.fields.iter()).map(|(n, v)| (n.as_bytes(), v.as_bytes(), false));
        let mut block = Vec::new();
        self.enc.encode(fields, &mut block);
        Headers::encode(id, &block, end_stream, self.peer_max_frame, &mut self.out);
        let send = (!end_stream).then(|| Upload {
            queue: VecDeque::new(),
            queued: 0,
            end_queued: false,
            trailers: None,
            window: SendWindow::new(self.peer_initial_window),
        });
        self.streams.insert(
            id,
            Stream { got_head: false, recv_done: false, window: i64::from(self.stream_window()), released: 0, send },
        );
        Ok(id)
    }

    /// Queue request body bytes of `stream`; with `end_stream` the body ends after them. They
    /// are framed by [`Client::poll_transmit`] as the server's windows allow.
    pub fn send_data(&mut self, stream: u32, data: Bytes, end_stream: bool) -> Result<(), SendError> {
        let up = self.upload(stream)?;
        if !data.is_empty() {
            up.queued += data.len();
            up.queue.push_back(data);
        }
        up.end_queued = end_stream;
        Ok(())
    }

    /// Queue request trailers (RFC 9113 §8.1: a HEADERS frame with END_STREAM after the body);
    /// they end the request after the queued body. Names must be lower case and no
    /// pseudo-fields (§8.1); the engine encodes what it is given.
    pub fn send_trailers(&mut self, stream: u32, fields: &[(&str, &str)]) -> Result<(), SendError> {
        let up = self.upload(stream)?;
        up.trailers = Some(fields.iter().map(|&(n, v)| (n.to_owned(), v.to_owned())).collect());
        up.end_queued = true;
        Ok(())
    }

    /// Request body bytes of `stream` queued and not yet framed; `None` if the stream is gone.
    pub fn buffered(&self, stream: u32) -> Option<usize> {
        self.streams.get(&stream).map(|s| s.send.as_ref().map_or(0, |u| u.queued))
    }

    /// The open request body of `stream`, or why there is none.
    fn upload(&mut self, stream: u32) -> Result<&mut Upload, SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        s.send.as_mut().filter(|u| !u.end_queued).ok_or(SendError::InvalidState)
    }

    /// Abandon a request (RST_STREAM CANCEL); nothing more is reported for it.
    pub fn cancel(&mut self, stream: u32) {
        if self.streams.remove(&stream).is_some() && self.failed.is_none() {
            RstStream { stream, reason: Reason::CANCEL }.encode(&mut self.out);
        }
    }

    /// Bytes from the server, read at `now`. Expired timers run after them (so a driver that
    /// only calls this when bytes arrive still enforces the SETTINGS timeout). A connection
    /// error queues GOAWAY and is returned; the connection takes no more requests after it.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.input.extend_from_slice(data);
        while let Some(head) = Head::parse(&self.input) {
            if head.len > MAX_FRAME {
                return self.fail(Error::conn(Reason::FRAME_SIZE_ERROR, "frame larger than SETTINGS_MAX_FRAME_SIZE"));
            }
            let total = HEADER_LEN + head.len as usize;
            if self.input.len() < total {
                break;
            }
            let payload = self.input.split_to(total).freeze().slice(HEADER_LEN..);
            match self.frame(&head, payload) {
                Ok(()) => {}
                // RFC 9113 §5.4.2: only the stream is reset.
                Err(Error::Stream { id, reason, detail, .. }) => self.reset_for(id, reason, detail),
                Err(e) => return self.fail(e),
            }
        }
        self.handle_timeout(now)
    }

    /// Run the timers expired at `now`: SETTINGS not acknowledged within
    /// [`ClientConfig::settings_timeout`] fails the connection with SETTINGS_TIMEOUT (RFC 9113
    /// §6.5.3), returned as from [`Client::handle_input`].
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.settings_deadline.is_some_and(|d| now >= d) {
            return self.fail(Error::conn(Reason::SETTINGS_TIMEOUT, "SETTINGS not acknowledged in time"));
        }
        Ok(())
    }

    /// The next deadline, if any: when [`Client::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        self.settings_deadline
    }

    /// Bytes to write to the server, if any: control frames and request heads as they were
    /// made, then request body data the server's windows allow.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.failed.is_none() {
            self.frame_bodies();
        }
        if self.out.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.out))
        }
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Whether the server's SETTINGS have arrived.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether new requests can go out (no GOAWAY received, no connection error).
    pub fn accepts_requests(&self) -> bool {
        self.failed.is_none() && self.goaway.is_none()
    }

    /// Requests in progress: a response or a request body still to come.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    fn stream_window(&self) -> u32 {
        self.cfg.stream_window.min(MAX_WINDOW)
    }

    fn fail(&mut self, e: Error) -> Result<(), Error> {
        // RFC 9113 §5.4.1: GOAWAY with the code; we accept no server-initiated streams, so the
        // last stream id is 0.
        GoAway { last_stream: 0, reason: e.reason(), debug: Vec::new() }.encode(&mut self.out);
        self.streams.clear();
        self.failed = Some(e.clone());
        Err(e)
    }

    /// Frame queued request bodies within the windows: one frame per stream in turn, streams
    /// in id order, until no stream can send more.
    fn frame_bodies(&mut self) {
        let mut ids: Vec<u32> = self.streams.iter().filter(|(_, s)| s.send.is_some()).map(|(&id, _)| id).collect();
        ids.sort_unstable();
        while !ids.is_empty() {
            ids.retain(|&id| self.frame_body(id));
        }
    }

    /// One frame of `id`'s request body: DATA within the windows, or the end (trailers, or an
    /// empty DATA with END_STREAM). Returns whether the stream may have more to frame now.
    fn frame_body(&mut self, id: u32) -> bool {
        let Some(s) = self.streams.get_mut(&id) else { return false };
        let Some(up) = s.send.as_mut() else { return false };
        if up.queued == 0 {
            if !up.end_queued {
                return false;
            }
            if let Some(trailers) = up.trailers.take() {
                let list = trailers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false));
                let mut block = Vec::with_capacity(64);
                self.enc.encode(list, &mut block);
                Headers::encode(id, &block, true, self.peer_max_frame, &mut self.out);
            } else {
                Data::encode(id, &[], true, &mut self.out);
            }
            self.end_upload(id);
            return false;
        }
        let n = up.queued.min(up.window.available()).min(self.send_window.available()).min(self.peer_max_frame);
        if n == 0 {
            return false;
        }
        let end = up.end_queued && up.trailers.is_none() && n == up.queued;
        let flags = if end { flag::END_STREAM } else { 0 };
        Head { len: n as u32, kind: kind::DATA, flags, stream: id }.encode(&mut self.out);
        let mut left = n;
        while left > 0 {
            // Invariant: `queued` is the sum of the chunks, and n <= queued.
            let Some(front) = up.queue.front_mut() else { break };
            let take = front.len().min(left);
            self.out.extend_from_slice(&front[..take]);
            front.advance(take);
            if front.is_empty() {
                up.queue.pop_front();
            }
            left -= take;
        }
        up.queued -= n;
        up.window.consume(n);
        self.send_window.consume(n);
        if end {
            self.end_upload(id);
            return false;
        }
        true
    }

    /// END_STREAM went out on `id`: forget the stream if its response is complete too.
    fn end_upload(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.send = None;
            if s.recv_done {
                self.streams.remove(&id);
            }
        }
    }

    /// The response on `id` is complete: forget the stream if its request is sent too.
    fn finish_recv(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.recv_done = true;
            if s.send.is_none() {
                self.streams.remove(&id);
            }
        }
    }

    /// Whether `id` is a stream we never opened (RFC 9113 §5.1: idle, or server-initiated,
    /// which push being off rules out, §8.4).
    fn not_ours(&self, id: u32) -> bool {
        id % 2 == 0 || id >= self.next_stream
    }

    fn frame(&mut self, head: &Head, payload: Bytes) -> Result<(), Error> {
        // RFC 9113 §6.10: nothing may come between a HEADERS without END_HEADERS and its
        // CONTINUATIONs.
        if let Some(b) = &self.block {
            if head.kind != kind::CONTINUATION || head.stream != b.stream {
                return Err(Error::conn(Reason::PROTOCOL_ERROR, "expected CONTINUATION"));
            }
        }
        match head.kind {
            kind::DATA => self.on_data(Data::decode(head, payload)?),
            kind::HEADERS => {
                let h = Headers::decode(head, payload)?;
                if self.not_ours(h.stream) {
                    // RFC 9113 §5.1.1, §8.4: a server opens no streams (push is off).
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "HEADERS on a stream we did not open"));
                }
                let mut buf = BytesMut::from(&h.fragment[..]);
                if h.end_headers {
                    return self.on_block(h.stream, h.end_stream, &buf.split().freeze());
                }
                self.block = Some(Block { stream: h.stream, end_stream: h.end_stream, buf, continuations: 0 });
                Ok(())
            }
            kind::CONTINUATION => {
                let Some(mut b) = self.block.take() else {
                    return Err(Error::conn(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
                };
                let c = Continuation::decode(head, payload);
                b.continuations += 1;
                b.buf.extend_from_slice(&c.fragment);
                if b.continuations > MAX_CONTINUATIONS || b.buf.len() > 2 * self.cfg.max_header_list as usize {
                    return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "header block too long"));
                }
                if c.end_headers {
                    return self.on_block(b.stream, b.end_stream, &b.buf.freeze());
                }
                self.block = Some(b);
                Ok(())
            }
            kind::RST_STREAM => {
                let r = RstStream::decode(head, &payload)?;
                // RFC 9113 §8.1: after a complete response, RST_STREAM (NO_ERROR) only asks us
                // to stop sending the request; nothing to report.
                if self.streams.remove(&r.stream).is_some_and(|s| !s.recv_done) {
                    let error = Error::Stream {
                        id: r.stream,
                        reason: r.reason,
                        initiator: Initiator::Remote,
                        detail: "reset by the server",
                    };
                    self.events.push_back(ClientEvent::Reset { stream: r.stream, error });
                }
                Ok(())
            }
            kind::SETTINGS => self.on_settings(Settings::decode(head, &payload)?),
            kind::PING => {
                let p = Ping::decode(head, &payload)?;
                if !p.ack {
                    Ping { ack: true, payload: p.payload }.encode(&mut self.out);
                }
                Ok(())
            }
            kind::GOAWAY => {
                let g = GoAway::decode(head, &payload)?;
                self.goaway = Some(g.last_stream);
                self.events.push_back(ClientEvent::GoAway { last_stream: g.last_stream, reason: g.reason });
                // RFC 9113 §6.8: streams above the last one were not processed.
                let mut refused: Vec<u32> = self.streams.keys().copied().filter(|&id| id > g.last_stream).collect();
                refused.sort_unstable();
                for stream in refused {
                    self.streams.remove(&stream);
                    let error = Error::Stream {
                        id: stream,
                        reason: Reason::REFUSED_STREAM,
                        initiator: Initiator::Remote,
                        detail: "not processed: the server is going away",
                    };
                    self.events.push_back(ClientEvent::Reset { stream, error });
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => self.on_window_update(head, &payload),
            kind::PUSH_PROMISE => Err(Error::conn(Reason::PROTOCOL_ERROR, "PUSH_PROMISE with push disabled")),
            // RFC 8336 §2.1: flags 0x1 to 0x8 are reserved for incompatible changes; a frame
            // carrying one is ignored.
            kind::ORIGIN if head.flags & 0x0f != 0 => Ok(()),
            kind::ORIGIN => {
                if let Some(o) = Origin::decode(head, &payload)? {
                    self.events.push_back(ClientEvent::Origin(o.origins));
                }
                Ok(())
            }
            // PRIORITY, PRIORITY_UPDATE and unknown types are ignored (RFC 9113 §5.5).
            _ => Ok(()),
        }
    }

    /// Credit for our request bodies (RFC 9113 §6.9).
    fn on_window_update(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 && self.not_ours(head.stream) {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on a stream we did not open"));
        }
        let w = WindowUpdate::decode(head, payload)?;
        if w.stream == 0 {
            // §6.9.1: a window above 2^31-1 is an error of the frame's scope.
            return self
                .send_window
                .grow(w.increment)
                .map_err(|()| Error::conn(Reason::FLOW_CONTROL_ERROR, "connection window above 2^31-1"));
        }
        let Some(up) = self.streams.get_mut(&w.stream).and_then(|s| s.send.as_mut()) else {
            // The request is sent (or the stream gone): its credit no longer matters.
            return Ok(());
        };
        up.window
            .grow(w.increment)
            .map_err(|()| Error::stream(w.stream, Reason::FLOW_CONTROL_ERROR, "stream window above 2^31-1"))
    }

    fn on_settings(&mut self, s: Settings) -> Result<(), Error> {
        if s.ack {
            self.settings_deadline = None;
            return Ok(());
        }
        for v in &s.values {
            match *v {
                // Our encoder's table may not outgrow the server's decoder's (RFC 7541 §4.2).
                Setting::HeaderTableSize(n) => self.enc.set_max_table_size(n.min(4096) as usize),
                Setting::MaxFrameSize(n) => self.peer_max_frame = n as usize,
                Setting::MaxConcurrentStreams(n) => self.peer_max_streams = n,
                Setting::InitialWindowSize(n) => {
                    // §6.9.2: every open request body's window moves by the difference (and
                    // may go negative); past 2^31-1 is a connection FLOW_CONTROL_ERROR.
                    let delta = i64::from(n) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = n;
                    for up in self.streams.values_mut().filter_map(|s| s.send.as_mut()) {
                        up.window.adjust(delta).map_err(|()| {
                            Error::conn(Reason::FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window")
                        })?;
                    }
                }
                _ => {}
            }
        }
        Settings { ack: true, values: Vec::new() }.encode(&mut self.out);
        if !self.ready {
            self.ready = true;
            self.events.push_back(ClientEvent::Ready);
        }
        Ok(())
    }

    fn on_data(&mut self, d: Data) -> Result<(), Error> {
        // RFC 9113 §6.9.1: padding counts against the windows too.
        let len = i64::from(d.flow_len);
        self.window -= len;
        if self.window < 0 {
            return Err(Error::conn(Reason::FLOW_CONTROL_ERROR, "DATA beyond the connection window"));
        }
        let on_read = self.cfg.release_on_read;
        if on_read {
            self.return_connection_credit();
        }
        if self.not_ours(d.stream) {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "DATA on a stream we did not open"));
        }
        let window = i64::from(self.stream_window());
        let Some(s) = self.streams.get_mut(&d.stream).filter(|s| !s.recv_done) else {
            // A stream we cancelled or whose response ended: the bytes only count for the
            // connection, and nobody will release them.
            if !on_read {
                self.release_connection(len);
            }
            return Ok(());
        };
        if !s.got_head {
            self.reset_for(d.stream, Reason::PROTOCOL_ERROR, "DATA before the response head");
            return Ok(());
        }
        s.window -= len;
        if s.window < 0 {
            self.reset_for(d.stream, Reason::FLOW_CONTROL_ERROR, "DATA beyond the stream window");
            return Ok(());
        }
        if on_read {
            if !d.end_stream && window - s.window >= window / 2 {
                let increment = (window - s.window) as u32;
                s.window = window;
                WindowUpdate { stream: d.stream, increment }.encode(&mut self.out);
            }
        } else {
            // The padding is nobody's to consume: released at once.
            let padding = len - d.data.len() as i64;
            if padding > 0 {
                self.release(d.stream, padding as usize);
            }
        }
        if d.end_stream {
            self.finish_recv(d.stream);
        }
        self.events.push_back(ClientEvent::Data { stream: d.stream, data: d.data, end_stream: d.end_stream });
        Ok(())
    }

    /// `n` bytes of `stream`'s response were consumed (with [`ClientConfig::release_on_read`]
    /// off): their credit goes back to the server once half a window's worth has been, on the
    /// stream (while its response is still coming) and on the connection.
    pub fn release(&mut self, stream: u32, n: usize) {
        if self.failed.is_some() || self.cfg.release_on_read || n == 0 {
            return;
        }
        let n = n as i64;
        let window = i64::from(self.stream_window());
        if let Some(s) = self.streams.get_mut(&stream).filter(|s| !s.recv_done) {
            s.released += n;
            if s.released >= window / 2 {
                WindowUpdate { stream, increment: s.released as u32 }.encode(&mut self.out);
                s.window += s.released;
                s.released = 0;
            }
        }
        self.release_connection(n);
    }

    /// `n` bytes of the connection's credit consumed: back once half its window has been.
    fn release_connection(&mut self, n: i64) {
        self.released += n;
        if self.released >= i64::from(self.cfg.connection_window) / 2 {
            WindowUpdate { stream: 0, increment: self.released as u32 }.encode(&mut self.out);
            self.window += self.released;
            self.released = 0;
        }
    }

    fn return_connection_credit(&mut self) {
        let window = i64::from(self.cfg.connection_window);
        if window - self.window >= window / 2 {
            let increment = (window - self.window) as u32;
            self.window = window;
            WindowUpdate { stream: 0, increment }.encode(&mut self.out);
        }
    }

    /// A complete header block on `stream`: a response head, informational head or trailers.
    fn on_block(&mut self, stream: u32, end_stream: bool, block: &[u8]) -> Result<(), Error> {
        let mut fields = Vec::new();
        let max = self.cfg.max_header_list as usize;
        let decoded = self.dec.decode(block, max, &mut |n, v, _| {
            fields.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()));
        });
        match decoded {
            Ok(()) => {}
            // The decoder is still in sync: only this response is lost.
            Err(DecodeError::HeaderListTooLarge) => {
                self.reset_for(
                    stream,
                    Reason::PROTOCOL_ERROR,
                    "response head larger than SETTINGS_MAX_HEADER_LIST_SIZE",
                );
                return Ok(());
            }
            Err(_) => return Err(Error::conn(Reason::COMPRESSION_ERROR, "HPACK decoding failed")),
        }
        let Some(s) = self.streams.get_mut(&stream).filter(|s| !s.recv_done) else {
            // Decoded to keep HPACK in sync; the stream was cancelled or its response ended.
            return Ok(());
        };
        if s.got_head {
            // RFC 9113 §8.1: a second block is trailers and ends the stream; no pseudo-fields.
            if !end_stream || fields.iter().any(|(n, _)| n.starts_with(':')) {
                self.reset_for(stream, Reason::PROTOCOL_ERROR, "malformed trailers");
                return Ok(());
            }
            self.finish_recv(stream);
            self.events.push_back(ClientEvent::Trailers { stream, fields });
            return Ok(());
        }
        let Some(status) = response_status(&fields) else {
            self.reset_for(stream, Reason::PROTOCOL_ERROR, "malformed response head");
            return Ok(());
        };
        fields.retain(|(n, _)| !n.starts_with(':'));
        if (100..200).contains(&status) {
            // RFC 9113 §8.1: informational heads never end a stream; §8.6: no 101 in HTTP/2.
            if end_stream {
                self.reset_for(stream, Reason::PROTOCOL_ERROR, "informational response with END_STREAM");
            } else if status == 101 {
                self.reset_for(stream, Reason::PROTOCOL_ERROR, "101 (Switching Protocols) in HTTP/2");
            } else {
                self.events.push_back(ClientEvent::Informational { stream, status, fields });
            }
            return Ok(());
        }
        s.got_head = true;
        if end_stream {
            self.finish_recv(stream);
        }
        self.events.push_back(ClientEvent::Response { stream, status, fields, end_stream });
        Ok(())
    }

    /// RFC 9113 §5.4.2: a stream error the server caused: RST_STREAM with `reason`, and a
    /// [`ClientEvent::Reset`] unless the response was already complete.
    fn reset_for(&mut self, stream: u32, reason: Reason, detail: &'static str) {
        if let Some(s) = self.streams.remove(&stream) {
            RstStream { stream, reason }.encode(&mut self.out);
            if !s.recv_done {
                let error = Error::Stream { id: stream, reason, initiator: Initiator::Local, detail };
                self.events.push_back(ClientEvent::Reset { stream, error });
            }
        }
    }
}

/// `:status` as RFC 9113 §8.3.2 wants it: exactly one, first among the fields, three digits,
/// and no other pseudo-field.
fn response_status(fields: &[(String, String)]) -> Option<u16> {
    let mut pseudo = fields.iter().take_while(|(n, _)| n.starts_with(':'));
    let (name, value) = pseudo.next()?;
    if name != ":status" || pseudo.next().is_some() || fields.iter().filter(|(n, _)| n.starts_with(':')).count() != 1 {
        return None;
    }
    if value.len() != 3 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests;
