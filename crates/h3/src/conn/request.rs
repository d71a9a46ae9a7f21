//! Request streams, receive side (RFC 9114 §4.1): HEADERS, DATA*, trailing HEADERS, with QPACK
//! decoding (which may block on the encoder stream) and message validation (§4.1.2, §4.2, §4.3).

use bytes::{Bytes, BytesMut};
use sluice_http::Priority;
use sluice_http::{Field, RequestHead};
use sluice_qpack::{Decoded, FieldLine};

use super::{Connection, Event, Transmit};
use crate::error::{Code, Error, Initiator, Scope};
use crate::frame::{kind, FrameReader, Read};
use crate::stream::Phase;

/// The size of the blocks a request stream's body pieces are copied into (less when the
/// declared length leaves less to come).
const BODY_BLOCK: usize = 16 * 1024;

/// How reading a stream's input went on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Continue,
    /// The header section waits for QPACK: hold the rest of the input.
    Blocked,
    /// Reading ended (stream reset, or we stopped reading).
    Stop,
}

impl Connection {
    pub(super) fn on_request_data(&mut self, id: u64, data: &[u8], fin: bool) {
        if !self.open_request(id) {
            return;
        }
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.recv.done {
            // Late bytes after STOP_SENDING, or after the request was complete.
            return;
        }
        if s.recv.phase == Phase::HeadBlocked {
            return self.hold(id, data, fin);
        }
        let mut reader = std::mem::take(&mut s.recv.reader);
        let mut input = data;
        let step = self.read_request(id, &mut reader, &mut input);
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.recv.reader = reader;
        match step {
            Ok(Step::Continue) if fin => self.on_request_fin(id),
            Ok(Step::Continue | Step::Stop) => {}
            Ok(Step::Blocked) => self.hold(id, input, fin),
            Err(e) => self.on_error(e),
        }
    }

    /// The client reset its request stream (QUIC RESET_STREAM).
    pub(super) fn on_request_reset(&mut self, id: u64, code: Code) {
        if self.retired.contains(id) {
            return;
        }
        let Some(s) = self.streams.get(&id) else {
            // Reset before any data arrived: nothing was processed.
            self.ops.push_back(Transmit::Reset { stream: id, code: Code::H3_REQUEST_REJECTED });
            self.decoder.cancel_stream(id);
            self.retired.insert(id);
            self.spend_reset();
            return;
        };
        if s.recv.done {
            // The request is complete (or we stopped reading): the response can go on; the
            // client sends STOP_SENDING if it does not want it.
            return;
        }
        // §4.1.1: an incomplete request is abandoned in both directions. RFC 9114 §4.1.1 allows
        // H3_REQUEST_REJECTED only if no processing happened.
        let ours = if s.delivered { Code::H3_REQUEST_CANCELLED } else { Code::H3_REQUEST_REJECTED };
        let error = Error { code, scope: Scope::Stream(id), initiator: Initiator::Remote, reason: "request reset" };
        if let Some(s) = self.streams.get_mut(&id) {
            // The receive side is already over: no STOP_SENDING, but QPACK still hears of it.
            s.recv.done = true;
        }
        self.decoder.cancel_stream(id);
        self.abort_stream(id, Some(ours), None, Some(error));
        // Rapid Reset (CVE-2023-44487): streams opened and cancelled at once cost us work.
        self.spend_reset();
    }

    /// The client does not want the response (QUIC STOP_SENDING).
    pub(super) fn on_request_stop_sending(&mut self, id: u64, code: Code) {
        if self.retired.contains(id) {
            return;
        }
        let Some(s) = self.streams.get(&id) else {
            // On a stream that sent nothing yet: refuse it altogether.
            self.ops.push_back(Transmit::Reset { stream: id, code });
            self.ops.push_back(Transmit::StopSending { stream: id, code: Code::H3_REQUEST_REJECTED });
            self.decoder.cancel_stream(id);
            self.retired.insert(id);
            self.spend_reset();
            return;
        };
        if s.send.done {
            return;
        }
        // RFC 9000 §3.5: answer with RESET_STREAM, copying the code; the request is abandoned.
        let error = Error { code, scope: Scope::Stream(id), initiator: Initiator::Remote, reason: "response stopped" };
        self.abort_stream(id, Some(code), Some(Code::H3_REQUEST_CANCELLED), Some(error));
        self.spend_reset();
    }

    /// Keep input that arrived while the header section is blocked.
    fn hold(&mut self, id: u64, data: &[u8], fin: bool) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.recv.held.extend_from_slice(data);
        s.recv.held_fin |= fin;
        if s.recv.held.len() > self.cfg.max_blocked_input {
            self.on_error(Error::stream(id, Code::H3_EXCESSIVE_LOAD, "too much input behind a blocked header section"));
        }
    }

    fn read_request(&mut self, id: u64, reader: &mut FrameReader, input: &mut &[u8]) -> Result<Step, Error> {
        while let Some(item) = reader.read(input) {
            let step = match item {
                Read::Start { ty, len } => self.request_frame_start(id, reader, ty, len)?,
                Read::Frame { payload, .. } => self.request_section(id, &payload)?,
                Read::Chunk { data, .. } => self.request_body(id, data)?,
            };
            if step != Step::Continue {
                return Ok(step);
            }
        }
        Ok(Step::Continue)
    }

    /// Check a frame header against the request's state (§4.1) and choose how to read it.
    fn request_frame_start(&mut self, id: u64, reader: &mut FrameReader, ty: u64, len: u64) -> Result<Step, Error> {
        let Some(phase) = self.streams.get(&id).map(|s| s.recv.phase) else { return Ok(Step::Stop) };
        let unexpected = |reason| Err(Error::conn(Code::H3_FRAME_UNEXPECTED, reason));
        match ty {
            kind::DATA => match phase {
                Phase::Body if len == 0 => {
                    // Carries nothing: the request's end is the stream's FIN.
                    reader.stream();
                    self.glitch("glitch flood: empty DATA frames")?;
                }
                Phase::Body => reader.stream(),
                Phase::Head | Phase::HeadBlocked => return unexpected("DATA before HEADERS"),
                Phase::TrailersBlocked | Phase::Trailers => return unexpected("DATA after trailers"),
            },
            kind::HEADERS => {
                let too_large = len > self.cfg.max_field_section_size;
                match phase {
                    // §4.2.2: answered with 431; the section is not read.
                    Phase::Head if too_large => return Ok(self.head_too_large(id)),
                    Phase::Body if too_large => {
                        return Err(Error::stream(id, Code::H3_EXCESSIVE_LOAD, "trailer section too large"));
                    }
                    Phase::Head | Phase::Body => reader.buffer(),
                    _ => return unexpected("HEADERS after trailers"),
                }
            }
            // Control-stream frames (§7.2.3, §7.2.4, §7.2.6, §7.2.7; RFC 9218 §7.2), a client
            // PUSH_PROMISE (§7.2.5) and HTTP/2-only types (§7.2.8).
            kind::CANCEL_PUSH
            | kind::SETTINGS
            | kind::PUSH_PROMISE
            | kind::GOAWAY
            | kind::MAX_PUSH_ID
            | kind::PRIORITY_UPDATE_REQUEST
            | kind::PRIORITY_UPDATE_PUSH => return unexpected("frame not allowed on a request stream"),
            t if kind::is_h2_reserved(t) => return unexpected("HTTP/2 frame type"),
            // §9: unknown and reserved frame types are ignored; the first on a stream is free
            // (greasing), later ones are glitches.
            _ => {
                reader.skip();
                let seen = self.streams.get_mut(&id).is_none_or(|s| std::mem::replace(&mut s.unknown_frame_seen, true));
                if seen {
                    self.glitch("glitch flood: request frames of unknown type")?;
                }
            }
        }
        Ok(Step::Continue)
    }

    /// A complete HEADERS frame: the request head or its trailers.
    fn request_section(&mut self, id: u64, payload: &[u8]) -> Result<Step, Error> {
        let Some(phase) = self.streams.get(&id).map(|s| s.recv.phase) else { return Ok(Step::Stop) };
        let head = phase == Phase::Head;
        match self.decoder.decode(id, payload) {
            Ok(Decoded::Fields(fields)) if head => self.deliver_head(id, fields),
            Ok(Decoded::Fields(fields)) => self.deliver_trailers(id, fields),
            Ok(Decoded::Blocked) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.recv.phase = if head { Phase::HeadBlocked } else { Phase::TrailersBlocked };
                }
                Ok(if head { Step::Blocked } else { Step::Continue })
            }
            Err(e) => self.section_error(id, head, &e),
        }
    }

    /// A QPACK error for a section of `id`: too large is ours to answer (§4.2.2), anything
    /// else breaks the shared QPACK state and closes the connection (RFC 9204 §2.2).
    fn section_error(&mut self, id: u64, head: bool, e: &sluice_qpack::Error) -> Result<Step, Error> {
        match e {
            sluice_qpack::Error::FieldSectionTooLarge { .. } if head => Ok(self.head_too_large(id)),
            sluice_qpack::Error::FieldSectionTooLarge { .. } => {
                Err(Error::stream(id, Code::H3_EXCESSIVE_LOAD, "trailer section too large"))
            }
            e => Err(Error::conn(Code::from(e), "invalid field section")),
        }
    }

    /// The header section is over our limit: stop reading and let the application answer 431.
    fn head_too_large(&mut self, id: u64) -> Step {
        self.stop_header_timer(id);
        let Some(s) = self.streams.get_mut(&id) else { return Step::Stop };
        s.delivered = true;
        s.recv.done = true;
        s.recv.held = Vec::new();
        let fin = s.recv.fin || s.recv.held_fin;
        // RFC 9204 §2.2.2.2: reading abandoned.
        self.decoder.cancel_stream(id);
        if !fin {
            // §4.1: the rest of the request is not needed; H3_NO_ERROR asks the client to stop.
            self.ops.push_back(Transmit::StopSending { stream: id, code: Code::H3_NO_ERROR });
        }
        self.events.push_back(Event::HeaderTooLarge { stream: id });
        Step::Stop
    }

    /// A decoded header section: validate (§4.1.2, §4.2, §4.3) and deliver the request.
    fn deliver_head(&mut self, id: u64, fields: Vec<FieldLine>) -> Result<Step, Error> {
        let malformed = |reason| Error::stream(id, Code::H3_MESSAGE_ERROR, reason);
        let list = fields.into_iter().map(|f| (f.name, f.value));
        let head = sluice_http::request_head(list).map_err(malformed)?;
        check_h3_head(&head, self.cfg.enable_connect_protocol).map_err(malformed)?;
        let content_length = sluice_http::content_length(&head).map_err(malformed)?;
        // RFC 9218 §4: field lines of one dictionary combine; later members win.
        let mut priority = Priority::default();
        for f in head.fields.iter().filter(|f| f.name == "priority") {
            priority = Priority::parse(&f.value, priority);
        }
        self.stop_header_timer(id);
        let Some(s) = self.streams.get_mut(&id) else { return Ok(Step::Stop) };
        if let Some(update) = s.priority_update.take() {
            // RFC 9218 §7: a PRIORITY_UPDATE that arrived first is applied after the request.
            priority = update;
        }
        s.priority = priority;
        s.recv.content_length = content_length;
        s.recv.phase = Phase::Body;
        s.delivered = true;
        self.events.push_back(Event::Request { stream: id, head, end_stream: false });
        Ok(Step::Continue)
    }

    /// Decoded trailers: validate and deliver; the body is complete (§4.1).
    fn deliver_trailers(&mut self, id: u64, fields: Vec<FieldLine>) -> Result<Step, Error> {
        let malformed = |reason| Error::stream(id, Code::H3_MESSAGE_ERROR, reason);
        let list = fields.into_iter().map(|f| (f.name, f.value));
        let fields: Vec<Field> = sluice_http::trailers(list).map_err(malformed)?;
        let Some(s) = self.streams.get_mut(&id) else { return Ok(Step::Stop) };
        if s.recv.content_length.is_some_and(|cl| cl != s.recv.received) {
            return Err(malformed("content-length does not match the DATA received"));
        }
        s.recv.phase = Phase::Trailers;
        let fin = s.recv.fin;
        self.events.push_back(Event::Trailers { stream: id, fields });
        if fin {
            self.finish_recv(id);
        }
        Ok(Step::Continue)
    }

    /// A piece of a DATA frame's payload.
    fn request_body(&mut self, id: u64, data: &[u8]) -> Result<Step, Error> {
        if data.is_empty() {
            return Ok(Step::Continue);
        }
        let Some(s) = self.streams.get_mut(&id) else { return Ok(Step::Stop) };
        s.recv.received += data.len() as u64;
        if s.recv.content_length.is_some_and(|cl| s.recv.received > cl) {
            // §4.1.2: malformed; no need to wait for the end.
            return Err(Error::stream(id, Code::H3_MESSAGE_ERROR, "more DATA than content-length"));
        }
        // A piece is a packet's worth (about 1.2 kB): copied into a block of the stream's own
        // and cut from it, one allocation per block rather than per piece. Not a slice of the
        // packet: quinn receives a batch of datagrams (GRO, up to 64 KiB) into one buffer, and
        // a handler that holds a piece would keep the whole batch, the other streams' bytes
        // too. A stream's pieces are consumed in order, so what a handler holds keeps at most
        // one block more than itself.
        let r = &mut s.recv;
        if r.block.capacity() - r.block.len() < data.len() {
            let rest = r.content_length.map_or(u64::MAX, |cl| cl - r.received + data.len() as u64);
            let size = (BODY_BLOCK as u64).min(rest) as usize;
            r.block = BytesMut::with_capacity(size.max(data.len()));
        }
        r.block.extend_from_slice(data);
        let data = r.block.split().freeze();
        self.events.push_back(Event::Data { stream: id, data, end_stream: false });
        Ok(Step::Continue)
    }

    /// The client ended the request stream cleanly and all its input was read.
    fn on_request_fin(&mut self, id: u64) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.recv.fin = true;
        if !s.recv.reader.at_boundary() {
            // §7.1: a truncated last frame.
            return self.fail(Error::conn(Code::H3_FRAME_ERROR, "request stream ended inside a frame"));
        }
        match s.recv.phase {
            Phase::Head => {
                // §4.1: the stream ended without a request; H3_REQUEST_INCOMPLETE.
                s.recv.done = true;
                self.abort_stream(id, Some(Code::H3_REQUEST_INCOMPLETE), None, None);
            }
            Phase::Body => {
                if s.recv.content_length.is_some_and(|cl| cl != s.recv.received) {
                    // The request side is over: reset only the response.
                    s.recv.done = true;
                    let e =
                        Error::stream(id, Code::H3_MESSAGE_ERROR, "content-length does not match the DATA received");
                    return self.on_error(e);
                }
                self.end_body(id);
                self.finish_recv(id);
            }
            Phase::Trailers => self.finish_recv(id),
            // Trailers still blocked: the end is reported with them.
            Phase::TrailersBlocked | Phase::HeadBlocked => {}
        }
    }

    /// Mark the request's end on its last event if that is still queued, else send an empty
    /// final `Data`.
    fn end_body(&mut self, id: u64) {
        match self.events.back_mut() {
            Some(Event::Request { stream, end_stream, .. } | Event::Data { stream, end_stream, .. })
                if *stream == id =>
            {
                *end_stream = true;
            }
            _ => self.events.push_back(Event::Data { stream: id, data: Bytes::new(), end_stream: true }),
        }
    }

    /// Nothing more will be read from the stream.
    fn finish_recv(&mut self, id: u64) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.recv.done = true;
            s.recv.fin = true;
            // What is left of the last block: the pieces cut from it keep their part.
            s.recv.block = BytesMut::new();
        }
        self.maybe_close(id);
    }

    /// A section of `id` that waited for the encoder stream was decoded (or failed).
    pub(super) fn on_unblocked(&mut self, id: u64, result: Result<Vec<FieldLine>, sluice_qpack::Error>) {
        let Some(phase) = self.streams.get(&id).map(|s| s.recv.phase) else { return };
        let head = match phase {
            Phase::HeadBlocked => true,
            Phase::TrailersBlocked => false,
            _ => return,
        };
        let step = match result {
            Ok(fields) if head => self.deliver_head(id, fields),
            Ok(fields) => self.deliver_trailers(id, fields),
            Err(e) => self.section_error(id, head, &e),
        };
        match step {
            Ok(Step::Continue) if head => {
                // Replay what arrived behind the header section.
                let Some(s) = self.streams.get_mut(&id) else { return };
                let held = std::mem::take(&mut s.recv.held);
                let fin = std::mem::take(&mut s.recv.held_fin);
                self.on_request_data(id, &held, fin);
            }
            Ok(_) => {}
            Err(e) => self.on_error(e),
        }
    }
}

/// HTTP/3 rules beyond those shared with HTTP/2 (`sluice_http::request_head`).
fn check_h3_head(head: &RequestHead, extended_connect: bool) -> Result<(), &'static str> {
    if head.protocol.is_some() && !extended_connect {
        // RFC 9220 §3: `:protocol` needs SETTINGS_ENABLE_CONNECT_PROTOCOL, which we did not send.
        return Err(":protocol without extended CONNECT");
    }
    // §4.3.1: schemes with a mandatory authority need `:authority` or `host`, neither empty,
    // and equal when both are present.
    if matches!(head.scheme.as_deref(), Some(b"http" | b"https")) {
        let host = head.get(b"host");
        match (&head.authority, host) {
            (None, None) => return Err("no :authority or host"),
            (Some(a), _) if a.is_empty() => return Err("empty :authority"),
            (_, Some(h)) if h.is_empty() => return Err("empty host"),
            (Some(a), Some(h)) if a != h => return Err(":authority and host differ"),
            _ => {}
        }
    }
    Ok(())
}
