//! A small sans-IO HTTP/2 client connection (RFC 9113): requests without a body (GET, HEAD),
//! responses as events, and the server's ORIGIN frames (RFC 8336) surfaced, which general
//! clients (hyper's among them) drop. Sluice's own client uses it to coalesce connections.
//!
//! The contract is the server engine's: bytes go in ([`Client::handle_input`]), bytes to send
//! ([`Client::poll_transmit`]) and events ([`Client::poll_event`]) come out. It has no clock
//! (no PINGs of its own, no timers): the driver bounds its reads in time. Received data is
//! taken as consumed when it is handed out, so credit goes back at once, once half a window
//! has been used.

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use sluice_hpack::{DecodeError, Decoder, Encoder};

use crate::error::{Error, Initiator, Reason};
use crate::frame::{
    kind, Continuation, Data, GoAway, Head, Headers, Origin, Ping, RstStream, Setting, Settings, WindowUpdate,
    HEADER_LEN, PREFACE,
};

/// The largest frame we accept: the RFC's default SETTINGS_MAX_FRAME_SIZE, which we never
/// raise (RFC 9113 §4.2).
const MAX_FRAME: u32 = 16_384;
/// The flow-control window every stream and the connection start with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
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
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self { stream_window: 16 << 20, connection_window: 32 << 20, max_header_list: 64 * 1024 }
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
    /// A final response head (informational 1xx heads are skipped).
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
    /// Trailers: the response is complete.
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

/// One response in progress.
#[derive(Default)]
struct Stream {
    /// The final head arrived.
    got_head: bool,
    /// Receive credit left.
    window: i64,
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
    block: Option<Block>,
    /// The server's SETTINGS_MAX_FRAME_SIZE and SETTINGS_MAX_CONCURRENT_STREAMS.
    peer_max_frame: usize,
    peer_max_streams: u32,
    ready: bool,
    goaway: Option<u32>,
    failed: Option<Error>,
}

impl Client {
    /// A new connection: the preface, our SETTINGS and the connection window are queued.
    pub fn new(cfg: ClientConfig) -> Self {
        let mut out = PREFACE.to_vec();
        Settings {
            ack: false,
            values: vec![
                // RFC 9113 §8.4: no server push.
                Setting::EnablePush(0),
                Setting::InitialWindowSize(cfg.stream_window.min(crate::flow::MAX_WINDOW)),
                Setting::MaxHeaderListSize(cfg.max_header_list),
            ],
        }
        .encode(&mut out);
        let connection_window = cfg.connection_window.clamp(DEFAULT_WINDOW, crate::flow::MAX_WINDOW);
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
            block: None,
            peer_max_frame: MAX_FRAME as usize,
            // RFC 9113 §6.5.2: unlimited until the server says otherwise.
            peer_max_streams: u32::MAX,
            ready: false,
            goaway: None,
            failed: None,
        }
    }

    /// Send a request without a body; returns its stream id.
    pub fn request(&mut self, req: &Request<'_>) -> Result<u32, RequestError> {
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
        Headers::encode(id, &block, true, self.peer_max_frame, &mut self.out);
        self.streams.insert(id, Stream { got_head: false, window: i64::from(self.stream_window()) });
        Ok(id)
    }

    /// Abandon a response (RST_STREAM CANCEL); nothing more is reported for it.
    pub fn cancel(&mut self, stream: u32) {
        if self.streams.remove(&stream).is_some() && self.failed.is_none() {
            RstStream { stream, reason: Reason::CANCEL }.encode(&mut self.out);
        }
    }

    /// Bytes from the server. A connection error queues GOAWAY and is returned; the
    /// connection takes no more requests after it.
    pub fn handle_input(&mut self, data: &[u8]) -> Result<(), Error> {
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
            if let Err(e) = self.frame(&head, payload) {
                return self.fail(e);
            }
        }
        Ok(())
    }

    /// Bytes to write to the server, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
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

    /// Responses in progress.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    fn stream_window(&self) -> u32 {
        self.cfg.stream_window.min(crate::flow::MAX_WINDOW)
    }

    fn fail(&mut self, e: Error) -> Result<(), Error> {
        // RFC 9113 §5.4.1: GOAWAY with the code; we accept no server-initiated streams, so the
        // last stream id is 0.
        GoAway { last_stream: 0, reason: e.reason(), debug: Vec::new() }.encode(&mut self.out);
        self.streams.clear();
        self.failed = Some(e.clone());
        Err(e)
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
                if h.stream % 2 == 0 || h.stream >= self.next_stream {
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
                if self.streams.remove(&r.stream).is_some() {
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
            // We send no bodies, so the server's credit does not matter; the frame is still
            // checked (a zero increment is an error, RFC 9113 §6.9).
            kind::WINDOW_UPDATE => WindowUpdate::decode(head, &payload).map(drop),
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

    fn on_settings(&mut self, s: Settings) -> Result<(), Error> {
        if s.ack {
            return Ok(());
        }
        for v in &s.values {
            match *v {
                // Our encoder's table may not outgrow the server's decoder's (RFC 7541 §4.2).
                Setting::HeaderTableSize(n) => self.enc.set_max_table_size(n.min(4096) as usize),
                Setting::MaxFrameSize(n) => self.peer_max_frame = n as usize,
                Setting::MaxConcurrentStreams(n) => self.peer_max_streams = n,
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
        self.return_connection_credit();
        if d.stream % 2 == 0 || d.stream >= self.next_stream {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "DATA on a stream we did not open"));
        }
        let window = i64::from(self.stream_window());
        let Some(s) = self.streams.get_mut(&d.stream) else {
            // A stream we cancelled or that ended: the bytes only count for the connection.
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
        if d.end_stream {
            self.streams.remove(&d.stream);
        } else if window - s.window >= window / 2 {
            let increment = (window - s.window) as u32;
            s.window = window;
            WindowUpdate { stream: d.stream, increment }.encode(&mut self.out);
        }
        self.events.push_back(ClientEvent::Data { stream: d.stream, data: d.data, end_stream: d.end_stream });
        Ok(())
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
        let Some(s) = self.streams.get_mut(&stream) else {
            // Decoded to keep HPACK in sync; the stream was cancelled or has ended.
            return Ok(());
        };
        if s.got_head {
            // RFC 9113 §8.1: a second block is trailers and ends the stream; no pseudo-fields.
            if !end_stream || fields.iter().any(|(n, _)| n.starts_with(':')) {
                self.reset_for(stream, Reason::PROTOCOL_ERROR, "malformed trailers");
                return Ok(());
            }
            self.streams.remove(&stream);
            self.events.push_back(ClientEvent::Trailers { stream, fields });
            return Ok(());
        }
        let Some(status) = response_status(&fields) else {
            self.reset_for(stream, Reason::PROTOCOL_ERROR, "malformed response head");
            return Ok(());
        };
        if (100..200).contains(&status) {
            // RFC 9113 §8.1: informational heads never end a stream.
            if end_stream {
                self.reset_for(stream, Reason::PROTOCOL_ERROR, "informational response with END_STREAM");
            }
            return Ok(());
        }
        s.got_head = true;
        fields.retain(|(n, _)| !n.starts_with(':'));
        if end_stream {
            self.streams.remove(&stream);
        }
        self.events.push_back(ClientEvent::Response { stream, status, fields, end_stream });
        Ok(())
    }

    /// RFC 9113 §5.4.2: a stream error the server caused: RST_STREAM with `reason`.
    fn reset_for(&mut self, stream: u32, reason: Reason, detail: &'static str) {
        if self.streams.remove(&stream).is_some() {
            RstStream { stream, reason }.encode(&mut self.out);
            let error = Error::Stream { id: stream, reason, initiator: Initiator::Local, detail };
            self.events.push_back(ClientEvent::Reset { stream, error });
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
