//! The receive path: frames in, state changes and events out.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use super::{Block, Connection, Event, Preface};
use crate::error::{Error, Initiator, Reason};
use crate::frame::{
    self, kind, Data, GoAway, Head, Headers, Ping, Priority as PriorityFrame, PriorityUpdate, RstStream, Setting,
    Settings, WindowUpdate, PREFACE,
};
use crate::priority::Priority;
use sluice_http::request;

/// Smallest DATA payload handed on as a slice of the input buffer, not a copy: bulk uploads'
/// frames are never copied.
const SHARE_MIN: usize = 8 * 1024;

impl Connection {
    /// Parse and handle one frame from the input buffer; `Ok(false)` when more bytes are needed.
    pub(super) fn step(&mut self, now: Instant) -> Result<bool, Error> {
        if self.preface == Preface::Magic {
            if self.inbuf.is_empty() {
                return Ok(false);
            }
            // The preface must complete within the header timeout of its first byte; a peer
            // that sends nothing at all is idle, not slow (a browser's spare connection).
            self.header_deadline.get_or_insert(now + self.cfg.header_timeout);
            let n = self.inbuf.len().min(PREFACE.len());
            if self.inbuf[..n] != PREFACE[..n] {
                return Err(Error::conn(Reason::PROTOCOL_ERROR, "invalid connection preface"));
            }
            if n < PREFACE.len() {
                return Ok(false);
            }
            self.inbuf.advance(PREFACE.len());
            self.preface = Preface::Settings;
        }
        let Some(head) = Head::parse(&self.inbuf) else { return Ok(false) };
        if head.len > frame::MAX_FRAME_SIZE {
            return Err(Error::conn(Reason::FRAME_SIZE_ERROR, "frame larger than SETTINGS_MAX_FRAME_SIZE"));
        }
        let total = frame::HEADER_LEN + head.len as usize;
        if self.inbuf.len() < total {
            return Ok(false);
        }
        self.inbuf.advance(frame::HEADER_LEN);
        let payload = self.inbuf.split_to(head.len as usize).freeze();
        if self.preface == Preface::Settings {
            if head.kind != kind::SETTINGS || head.has(frame::flag::ACK) {
                return Err(Error::conn(Reason::PROTOCOL_ERROR, "first frame is not SETTINGS"));
            }
            self.preface = Preface::Done;
            if self.block.is_none() {
                self.header_deadline = None;
            }
            // §6.5.3: the peer has our SETTINGS from now at the latest; see `handle_timeout`.
            if self.unacked_settings > 0 {
                self.settings_deadline = Some(now + self.cfg.settings_timeout);
            }
        }
        match self.on_frame(now, head, payload) {
            Ok(()) => Ok(true),
            Err(e) => {
                self.reset_on_stream_error(now, e)?;
                Ok(!self.failed)
            }
        }
    }

    /// A frame's error: a stream error resets that stream; a connection error is returned.
    fn reset_on_stream_error(&mut self, now: Instant, e: Error) -> Result<(), Error> {
        match e {
            Error::Stream { .. } => {
                self.reset_stream(now, e);
                Ok(())
            }
            e => Err(e),
        }
    }

    /// When the driver moves to a new read buffer with part of a DATA frame unparsed, hand that
    /// part on now as a DATA frame of its own (without END_STREAM), and return the header of a
    /// DATA frame for the rest (flags as the original's), for the driver to start its new buffer
    /// with: 9 bytes carried over instead of up to a whole frame. A frame is usually cut where a
    /// read buffer ends, and copying the cut part was a fifth of a 16 KiB-frame upload's bytes
    /// copied once more (with 64 KiB frames, all of them).
    ///
    /// Only where the part cannot fail: an open stream whose windows, the connection's and its
    /// own, take the whole frame, and whose content-length, if any, its payload does not pass.
    /// A frame that would be refused is left whole, to be refused once, as any other. Padded
    /// frames are left whole too (the padding is at the end, its length at the start).
    pub(super) fn split_partial_data(&mut self, now: Instant) -> Option<BytesMut> {
        let head = self.partial_data()?;
        let have = self.inbuf.len() - frame::HEADER_LEN;
        if have < SHARE_MIN {
            return None;
        }
        self.inbuf.advance(frame::HEADER_LEN);
        let part = std::mem::take(&mut self.inbuf).freeze();
        self.data_part(now, head, part, false);
        let mut rest = Vec::with_capacity(frame::HEADER_LEN);
        Head { len: head.len - have as u32, ..head }.encode(&mut rest);
        Some(BytesMut::from(&rest[..]))
    }

    /// When the input buffer holds the start of a DATA frame and `data` (a buffer that does not
    /// continue it in memory) the rest or more of it: hand on what the input buffer holds of
    /// its payload, then what `data` holds, as DATA frames of their own (END_STREAM on the
    /// last), advancing `data`; the input buffer is left with a header for the rest, if any.
    /// Under the conditions of `split_partial_data`; false (nothing done) when they do not hold.
    pub(super) fn take_data_part(&mut self, now: Instant, data: &mut BytesMut) -> bool {
        let Some(head) = self.partial_data() else { return false };
        let have = self.inbuf.len() - frame::HEADER_LEN;
        if have > 0 {
            let held = self.inbuf.split_off(frame::HEADER_LEN).freeze();
            self.data_part(now, head, held, false);
            if self.failed {
                return true;
            }
        }
        let rest = head.len as usize - have;
        let take = rest.min(data.len());
        let last = take == rest;
        let part = data.split_to(take).freeze();
        self.inbuf.clear();
        self.data_part(now, head, part, last);
        if !last {
            let mut header = Vec::with_capacity(frame::HEADER_LEN);
            Head { len: (rest - take) as u32, ..head }.encode(&mut header);
            self.inbuf = BytesMut::from(&header[..]);
        }
        true
    }

    /// The header of the DATA frame the input buffer holds the start of (header whole, payload
    /// not), if a part of it can be handed on: not padded, on an open stream whose windows,
    /// the connection's and its own, take the whole frame, and whose content-length, if any, its
    /// payload does not pass. A frame that would be refused is left whole, to be refused once,
    /// as any other.
    fn partial_data(&self) -> Option<Head> {
        if self.failed || self.preface != Preface::Done || self.block.is_some() {
            return None;
        }
        let head = Head::parse(&self.inbuf)?;
        let have = self.inbuf.len() - frame::HEADER_LEN;
        if head.kind != kind::DATA
            || head.has(frame::flag::PADDED)
            || head.len > frame::MAX_FRAME_SIZE
            || have >= head.len as usize
        {
            return None;
        }
        let s = self.streams.get(&head.stream)?;
        let fits = s.recv_open
            && s.recv.open() >= head.len
            && self.recv_window.open() >= head.len
            && s.content_length.is_none_or(|cl| s.received + u64::from(head.len) <= cl);
        fits.then_some(head)
    }

    /// Hand on `part` of the DATA frame `head` as a frame of its own, with END_STREAM (if
    /// `head` has it) only when it is the `last`.
    fn data_part(&mut self, now: Instant, head: Head, part: Bytes, last: bool) {
        let flags = if last { head.flags } else { head.flags & !frame::flag::END_STREAM };
        let h = Head { len: part.len() as u32, flags, ..head };
        // An error is not expected (checked by `partial_data`); handled as `step` would.
        if let Err(e) = self.on_frame(now, h, part).or_else(|e| self.reset_on_stream_error(now, e)) {
            self.fail(e);
        }
    }

    fn on_frame(&mut self, now: Instant, head: Head, payload: Bytes) -> Result<(), Error> {
        if let Some(b) = &self.block {
            // §6.10: a header block is a single unit; nothing may interleave.
            if head.kind != kind::CONTINUATION || head.stream != b.stream {
                return Err(Error::conn(Reason::PROTOCOL_ERROR, "frame interleaved with a header block"));
            }
        }
        if matches!(head.kind, kind::HEADERS | kind::DATA | kind::RST_STREAM)
            || (head.kind == kind::PING && !head.has(frame::flag::ACK))
        {
            self.on_active(now);
        }
        match head.kind {
            kind::DATA => self.on_data(now, Data::decode(&head, payload)?),
            kind::HEADERS => self.on_headers(now, &head, payload),
            kind::CONTINUATION => self.on_continuation(now, &head, payload),
            kind::PRIORITY => self.on_priority(now, PriorityFrame::decode(&head, &payload)?),
            kind::RST_STREAM => self.on_rst_stream(now, RstStream::decode(&head, &payload)?),
            kind::SETTINGS => self.on_settings(now, Settings::decode(&head, &payload)?),
            kind::PUSH_PROMISE => Err(Error::conn(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => self.on_ping(now, Ping::decode(&head, &payload)?),
            kind::GOAWAY => {
                let g = GoAway::decode(&head, &payload)?;
                if self.peer_goaway {
                    self.glitch(now, "glitch flood: repeated GOAWAY")?;
                }
                self.peer_goaway = true;
                self.events.push_back(Event::GoAway { reason: g.reason });
                Ok(())
            }
            kind::WINDOW_UPDATE => self.on_window_update(now, &head, &payload),
            kind::PRIORITY_UPDATE => self.on_priority_update(now, PriorityUpdate::decode(&head, &payload)?),
            // §5.5: unknown frame types are ignored. The first on an open stream is free (a
            // client greasing its requests), any other is a glitch.
            _ => {
                if let Some(s) = self.streams.get_mut(&head.stream) {
                    if !std::mem::replace(&mut s.unknown_frame_seen, true) {
                        return Ok(());
                    }
                }
                self.glitch(now, "glitch flood: frames of unknown type")
            }
        }
    }

    /// Whether a client stream ID was never opened and is above every opened one (idle, §5.1).
    fn is_idle(&self, id: u32) -> bool {
        id > self.max_client_stream
    }

    fn on_data(&mut self, now: Instant, d: Data) -> Result<(), Error> {
        let id = d.stream;
        if self.is_idle(id) {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        if d.data.is_empty() && !d.end_stream && self.streams.get(&id).is_some_and(|s| s.recv_open) {
            // Nothing delivered, nothing ended (CVE-2019-9518). On a closed stream it is a
            // stream error below, counted as a reset.
            self.glitch(now, "glitch flood: empty DATA frames")?;
        }
        if self.recv_window.receive(d.flow_len).is_err() {
            return Err(Error::conn(Reason::FLOW_CONTROL_ERROR, "DATA beyond the connection window"));
        }
        self.conn_received += u64::from(d.flow_len);
        if let Some(token) = self.policy.poll_ping(now, u64::from(d.flow_len)) {
            Ping { ack: false, payload: token.to_be_bytes() }.encode(&mut self.control);
            self.pings_out = self.pings_out.saturating_add(1);
        }
        let padding = d.flow_len - d.data.len() as u32;
        let Some(s) = self.streams.get_mut(&id) else {
            // Closed stream: the bytes still count for the connection (§6.9), so hand them back.
            self.recv_window.release(d.flow_len);
            self.queue_conn_update(now);
            // After our RST_STREAM, what the peer sent before it read ours is ignored (§5.1).
            if self.recently_closed.iter().any(|&(closed, _, ours)| closed == id && ours) {
                return Ok(());
            }
            return Err(Error::stream(id, Reason::STREAM_CLOSED, "DATA on a closed stream"));
        };
        if !s.recv_open {
            self.recv_window.release(d.flow_len);
            self.queue_conn_update(now);
            return Err(Error::stream(id, Reason::STREAM_CLOSED, "DATA after END_STREAM"));
        }
        if s.recv.receive(d.flow_len).is_err() {
            self.recv_window.release(d.flow_len);
            self.queue_conn_update(now);
            return Err(Error::stream(id, Reason::FLOW_CONTROL_ERROR, "DATA beyond the stream window"));
        }
        s.received += d.data.len() as u64;
        s.tune.received += u64::from(d.flow_len);
        let target = self.policy.on_stream_data(&mut s.tune, now, self.rtt);
        super::raise_target(&mut self.recv_windows, s, target);
        // §8.1.1: content-length must match the DATA received.
        if let Some(cl) = s.content_length {
            if s.received > cl || (d.end_stream && s.received != cl) {
                self.recv_window.release(d.flow_len);
                self.queue_conn_update(now);
                return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "body length differs from content-length"));
            }
        }
        let mut give_back = padding;
        if s.discard {
            give_back += d.data.len() as u32;
        } else {
            s.unreleased += d.data.len() as u64;
        }
        let deliver = !s.discard && (!d.data.is_empty() || d.end_stream);
        if give_back > 0 {
            self.release_inner(now, id, give_back);
        }
        if deliver {
            // A payload is a slice of the driver's read buffer, which it keeps alive until the
            // handler is done with it; a small one is copied out, so that a peer's few bytes
            // left unread cannot hold much more than themselves (at most the read buffer's size
            // per SHARE_MIN bytes of flow-control window).
            let data = if d.data.len() < SHARE_MIN { Bytes::copy_from_slice(&d.data) } else { d.data };
            self.events.push_back(Event::Data { stream: id, data, end_stream: d.end_stream });
        }
        if d.end_stream {
            self.end_of_body(id);
            self.maybe_close(id);
        }
        Ok(())
    }

    fn on_headers(&mut self, now: Instant, head: &Head, payload: Bytes) -> Result<(), Error> {
        let h = Headers::decode(head, payload)?;
        if h.stream % 2 == 0 {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "client used an even stream ID"));
        }
        // Into the scratch buffer header blocks are encoded in (`out_block`, cleared), not a new
        // one per request: received blocks are gathered and decoded between transmits, and a
        // transmit while CONTINUATIONs are awaited finds it taken and makes another. One
        // buffer, not two, in every connection's state.
        let mut buf = std::mem::take(&mut self.out_block);
        buf.clear();
        buf.extend_from_slice(&h.fragment);
        self.block =
            Some(Block { stream: h.stream, buf, end_stream: h.end_stream, continuations: 0, priority: h.priority });
        if h.end_headers {
            self.finish_block(now)
        } else {
            self.header_deadline.get_or_insert(now + self.cfg.header_timeout);
            Ok(())
        }
    }

    fn on_continuation(&mut self, now: Instant, head: &Head, payload: Bytes) -> Result<(), Error> {
        let c = frame::Continuation::decode(head, payload);
        let Some(b) = &mut self.block else {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
        };
        b.continuations += 1;
        // A compressed block cannot usefully exceed twice the decoded limit (§6.5.2 counts 32
        // bytes per field on top of the strings); bound both count and size.
        let max_block = 2 * self.cfg.max_header_list_size as usize + frame::MAX_FRAME_SIZE as usize;
        if b.continuations > self.cfg.max_continuation_frames || b.buf.len() + c.fragment.len() > max_block {
            return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "CONTINUATION flood"));
        }
        b.buf.extend_from_slice(&c.fragment);
        if c.end_headers {
            self.finish_block(now)
        } else if c.fragment.is_empty() {
            self.glitch(now, "glitch flood: empty CONTINUATION frames")
        } else {
            Ok(())
        }
    }

    /// A complete header block: decode it (always, to keep HPACK in sync), then open a stream or
    /// take trailers.
    fn finish_block(&mut self, now: Instant) -> Result<(), Error> {
        // Invariant: callers set `self.block` just before.
        let Some(b) = self.block.take() else { return Ok(()) };
        if self.preface == Preface::Done {
            self.header_deadline = None;
        }
        let limit = self.cfg.max_header_list_size as usize;
        // Every decoded name and value goes into one buffer, and the fields are slices of it.
        // Room is made for as much as the last block decoded to (requests on one connection
        // look alike), so that it rarely grows while decoding; a new buffer, when one is
        // needed, has room for several blocks (the old one stays with the requests using it).
        let want = (2 * b.buf.len() + 64).max(self.last_decoded);
        if self.decoded.capacity() < want {
            self.decoded.reserve(want.max(super::DECODED_CHUNK));
        }
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        let all = &mut self.decoded;
        let decoded = self.decoder.decode(&b.buf, limit, &mut |n, v, _| {
            let at = all.len();
            all.extend_from_slice(n);
            all.extend_from_slice(v);
            spans.push([at, at + n.len(), all.len()]);
        });
        let all = self.decoded.split().freeze();
        // At most the list size limit, so a large block does not set every later buffer's size.
        self.last_decoded = all.len().min(limit);
        // The block's buffer goes back, unless a long block (CONTINUATIONs) grew it.
        if b.buf.capacity() <= super::KEPT_BLOCK_BUF {
            self.out_block = b.buf;
        }
        // The fields as the request checks take them: read in place, sliced only when kept
        // (pseudo-header names never are; common names, methods and schemes are kept as
        // static bytes).
        let list =
            spans.iter().map(|&[a, m, e]| (Span { all: &all, at: a, end: m }, Span { all: &all, at: m, end: e }));
        let too_large = match decoded {
            Ok(()) => false,
            Err(sluice_hpack::DecodeError::HeaderListTooLarge) => true,
            Err(_) => return Err(Error::conn(Reason::COMPRESSION_ERROR, "HPACK decoding failed")),
        };
        let id = b.stream;
        if let Some(s) = self.streams.get_mut(&id) {
            // A second header block on an open stream: trailers (§8.1).
            if !s.recv_open {
                return Err(Error::stream(id, Reason::STREAM_CLOSED, "HEADERS after END_STREAM"));
            }
            if !b.end_stream {
                return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "trailers without END_STREAM"));
            }
            if too_large {
                return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "trailers too large"));
            }
            let fields = request::trailers(list).map_err(|d| Error::stream(id, Reason::PROTOCOL_ERROR, d));
            self.spans = spans;
            let fields = fields?;
            if s.content_length.is_some_and(|cl| cl != s.received) {
                return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "body length differs from content-length"));
            }
            if !s.discard {
                self.events.push_back(Event::Trailers { stream: id, fields });
            }
            self.end_of_body(id);
            self.maybe_close(id);
            return Ok(());
        }
        if !self.is_idle(id) {
            // §5.1.1: a stream ID may not be reused or go backwards.
            return Err(if self.recently_closed.iter().any(|&(closed, _, _)| closed == id) {
                Error::conn(Reason::STREAM_CLOSED, "HEADERS on a closed stream")
            } else {
                Error::conn(Reason::PROTOCOL_ERROR, "stream ID lower than a previous one")
            });
        }
        self.max_client_stream = id;
        if let Some(p) = b.priority {
            if p.dependency == id {
                return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "stream depends on itself"));
            }
        }
        if self.draining.is_some() || self.peer_goaway {
            return Err(Error::Stream {
                id,
                reason: Reason::REFUSED_STREAM,
                initiator: Initiator::Local,
                detail: "connection is shutting down",
            });
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            // §5.1.2: beyond SETTINGS_MAX_CONCURRENT_STREAMS.
            return Err(Error::stream(id, Reason::REFUSED_STREAM, "too many concurrent streams"));
        }
        if too_large {
            // §8.2.2 / RFC 6585: answer 431 and drop the body.
            let s = self.open_stream(id, b.end_stream);
            s.discard = true;
            s.end_queued = true;
            s.push_head(431, vec![request::Field::new("content-length", "0")].into(), true);
            self.heads.push_back(id);
            return Ok(());
        }
        // Everything that can refuse the request comes before the stream opens.
        let mut head = self.spare_heads.pop().unwrap_or_default();
        let filled = request::fill_request_head(list, &mut head);
        self.spans = spans;
        filled.map_err(|d| Error::stream(id, Reason::PROTOCOL_ERROR, d))?;
        if head.protocol.is_some() && !self.cfg.enable_connect_protocol {
            // RFC 8441 §4: `:protocol` only where SETTINGS_ENABLE_CONNECT_PROTOCOL was sent.
            return Err(Error::stream(
                id,
                Reason::PROTOCOL_ERROR,
                ":protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL",
            ));
        }
        let content_length =
            request::content_length(&head).map_err(|d| Error::stream(id, Reason::PROTOCOL_ERROR, d))?;
        if b.end_stream && content_length.is_some_and(|cl| cl != 0) {
            return Err(Error::stream(id, Reason::PROTOCOL_ERROR, "content-length on a request without body"));
        }
        let (mut priority, mut from_header) = (Priority::default(), false);
        if let Some(v) = head.get(b"priority") {
            (priority, from_header) = (Priority::parse(v, Priority::default()), true);
        } else if let Some(p) = b.priority {
            // A client that ignores SETTINGS_NO_RFC7540_PRIORITIES: map its weight.
            priority = Priority::from_rfc7540_weight(p.weight);
        }
        // Looked up only when there is something to find: a lookup hashes the ID first.
        let pending = if self.pending_priority.is_empty() { None } else { self.pending_priority.remove(&id) };
        let signalled = pending.is_some();
        if let Some(v) = pending {
            // §7.1: an update that arrived before the stream takes precedence over its header.
            (priority, from_header) = (Priority::parse(&v, priority), true);
        }
        let s = self.open_stream(id, b.end_stream);
        s.content_length = content_length;
        s.priority = priority;
        s.priority_from_header = from_header;
        s.priority_signalled = signalled;
        if !b.end_stream {
            self.start_body(now, id, content_length);
        }
        self.events.push_back(Event::Request { stream: id, head, end_stream: b.end_stream });
        Ok(())
    }

    fn on_priority_update(&mut self, now: Instant, u: PriorityUpdate) -> Result<(), Error> {
        let id = u.prioritized;
        if id % 2 == 0 {
            // §7.1: a server receiving an update for a push stream (even, server-initiated) id.
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "PRIORITY_UPDATE for a push stream"));
        }
        let first = if let Some(s) = self.streams.get_mut(&id) {
            let next = Priority::parse(&u.value, s.priority);
            if s.scheduled {
                self.sched.remove(id, s.priority);
                self.sched.push(id, next);
            }
            s.priority = next;
            s.priority_from_header = true;
            !std::mem::replace(&mut s.priority_signalled, true)
        } else if self.is_idle(id) {
            let known = self.pending_priority.contains_key(&id);
            let room = known || self.pending_priority.len() < self.cfg.max_pending_priority_updates;
            if room {
                self.pending_priority.insert(id, u.value);
            }
            // Kept once per stream for free; a repeat, or one dropped for want of room, is not.
            !known && room
        } else {
            // A closed stream: nothing to do.
            false
        };
        if !first {
            self.glitch(now, "glitch flood: PRIORITY_UPDATE frames")?;
        }
        Ok(())
    }

    fn on_priority(&mut self, now: Instant, p: PriorityFrame) -> Result<(), Error> {
        let id = p.stream;
        let Some(s) = self.streams.get_mut(&id) else {
            // Idle or closed: we keep no RFC 7540 tree, so it changes nothing.
            return self.glitch(now, "glitch flood: PRIORITY frames");
        };
        if !s.priority_from_header {
            let next = Priority::from_rfc7540_weight(p.fields.weight);
            if s.scheduled {
                self.sched.remove(id, s.priority);
                self.sched.push(id, next);
            }
            s.priority = next;
        }
        if std::mem::replace(&mut s.priority_signalled, true) {
            return self.glitch(now, "glitch flood: PRIORITY frames");
        }
        Ok(())
    }

    fn on_rst_stream(&mut self, now: Instant, r: RstStream) -> Result<(), Error> {
        if self.is_idle(r.stream) {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
        }
        if self.streams.contains_key(&r.stream) {
            // Rapid Reset (CVE-2023-44487): streams opened and cancelled at once cost us work.
            if self.resets.spend(now) {
                return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "too many stream resets"));
            }
            self.remove_stream(r.stream);
            let error =
                Error::Stream { id: r.stream, reason: r.reason, initiator: Initiator::Remote, detail: "reset by peer" };
            self.events.push_back(Event::Reset { stream: r.stream, error });
            return Ok(());
        }
        // A closed stream: nothing left to stop.
        self.glitch(now, "glitch flood: RST_STREAM for closed streams")
    }

    fn on_settings(&mut self, now: Instant, s: Settings) -> Result<(), Error> {
        if s.ack {
            if self.unacked_settings == 0 {
                return self.glitch(now, "glitch flood: SETTINGS ACK for no SETTINGS");
            }
            self.unacked_settings -= 1;
            if self.unacked_settings == 0 {
                self.settings_deadline = None;
                self.decoder.set_max_table_size(self.cfg.header_table_size as usize);
            }
            return Ok(());
        }
        if self.settings_budget.spend(now) {
            return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "SETTINGS flood"));
        }
        let preface = !std::mem::replace(&mut self.peer_settings_seen, true);
        let mut changed = false;
        for v in &s.values {
            let (id, value) = v.id_value();
            if let Some(last) = self.peer_settings.get_mut(usize::from(id)) {
                changed |= last.replace(value) != Some(value);
            }
        }
        if !preface && !changed {
            self.glitch(now, "glitch flood: SETTINGS that change nothing")?;
        }
        for v in s.values {
            match v {
                Setting::HeaderTableSize(n) => self.encoder.set_max_table_size(n as usize),
                Setting::InitialWindowSize(n) => {
                    // §6.9.2: adjust every stream's send window by the difference.
                    let delta = i64::from(n) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = n;
                    let ids: Vec<u32> = self.streams.iter().map(|(id, _)| id).collect();
                    for id in ids {
                        if let Some(s) = self.streams.get_mut(&id) {
                            if s.send_window.adjust(delta).is_err() {
                                return Err(Error::conn(
                                    Reason::FLOW_CONTROL_ERROR,
                                    "SETTINGS_INITIAL_WINDOW_SIZE overflows a window",
                                ));
                            }
                        }
                        self.update_ready(id);
                    }
                }
                Setting::MaxFrameSize(n) => self.peer_max_frame = n as usize,
                _ => {}
            }
        }
        Settings { ack: true, values: Vec::new() }.encode(&mut self.control);
        Ok(())
    }

    fn on_ping(&mut self, now: Instant, p: Ping) -> Result<(), Error> {
        if p.ack {
            if self.pings_out == 0 {
                return self.glitch(now, "glitch flood: PING ACK for no PING");
            }
            self.pings_out -= 1;
            self.policy.on_ping_ack(u64::from_be_bytes(p.payload), now);
            return Ok(());
        }
        if self.pings.spend(now) {
            return Err(Error::conn(Reason::ENHANCE_YOUR_CALM, "PING flood"));
        }
        Ping { ack: true, payload: p.payload }.encode(&mut self.control);
        Ok(())
    }

    /// A WINDOW_UPDATE is useful when it replenishes credit we spent (one per DATA frame we
    /// sent on that window since the last, the first free) or frees data the window held back;
    /// any other is a glitch (`Config::max_glitches_per_window`).
    fn on_window_update(&mut self, now: Instant, head: &Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 && self.is_idle(head.stream) {
            return Err(Error::conn(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let w = WindowUpdate::decode(head, payload)?;
        if w.stream == 0 {
            let blocked = self.send_window.available() == 0 && !self.sched.is_empty();
            if self.send_window.grow(w.increment).is_err() {
                return Err(Error::conn(Reason::FLOW_CONTROL_ERROR, "connection window above 2^31-1"));
            }
            if self.conn_update_credit > 0 {
                self.conn_update_credit -= 1;
            } else if !blocked {
                self.glitch(now, "glitch flood: WINDOW_UPDATE frames")?;
            }
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(&w.stream) else {
            // A closed stream: free while it has credit left from the DATA we sent on it.
            let credit = self.recently_closed.iter_mut().find(|(closed, _, _)| *closed == w.stream);
            if let Some((_, n @ 1.., _)) = credit {
                *n -= 1;
                return Ok(());
            }
            return self.glitch(now, "glitch flood: WINDOW_UPDATE for closed streams");
        };
        let blocked = s.send_window.available() == 0 && s.queued > 0;
        let useful = if s.update_credit > 0 {
            s.update_credit -= 1;
            true
        } else {
            blocked
        };
        if s.send_window.grow(w.increment).is_err() {
            return Err(Error::stream(w.stream, Reason::FLOW_CONTROL_ERROR, "stream window above 2^31-1"));
        }
        self.update_ready(w.stream);
        if !useful {
            self.glitch(now, "glitch flood: WINDOW_UPDATE frames")?;
        }
        Ok(())
    }

    /// Stream `id` will receive a body of `declared` bytes: the policy may start it on a
    /// larger window than SETTINGS gave, handed to the peer at once.
    fn start_body(&mut self, now: Instant, id: u32, declared: Option<u64>) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        let target = self.policy.on_stream_body(&mut s.tune, declared);
        if !super::raise_target(&mut self.recv_windows, s, target) {
            return;
        }
        if let Some(inc) = s.recv.poll_update() {
            WindowUpdate { stream: id, increment: inc }.encode(&mut self.control);
        }
        self.queue_conn_update(now);
    }

    /// The peer ended the request body (END_STREAM or trailers).
    fn end_of_body(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.recv_open = false;
            super::stop_receiving(&mut self.recv_windows, &mut *self.policy, s);
        }
    }

    /// Return `n` consumed bytes of `id` as credit, stream and connection.
    pub(super) fn release_inner(&mut self, now: Instant, id: u32, n: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.recv.release(n);
            if s.recv_open && s.recv.due().is_some() {
                let target = self.policy.on_stream_update(&mut s.tune, now, self.rtt);
                super::raise_target(&mut self.recv_windows, s, target);
                if let Some(inc) = s.recv.poll_update() {
                    WindowUpdate { stream: id, increment: inc }.encode(&mut self.control);
                }
            }
        }
        self.recv_window.release(n);
        self.queue_conn_update(now);
    }

    pub(super) fn queue_conn_update(&mut self, now: Instant) {
        let target = self.policy.connection_target(self.recv_windows, now);
        self.recv_window.set_target(target);
        if let Some(inc) = self.recv_window.poll_update() {
            WindowUpdate { stream: 0, increment: inc }.encode(&mut self.control);
        }
    }
}

/// A decoded field name or value where it lies in a header block's buffer.
struct Span<'a> {
    all: &'a Bytes,
    at: usize,
    end: usize,
}

impl AsRef<[u8]> for Span<'_> {
    fn as_ref(&self) -> &[u8] {
        &self.all[self.at..self.end]
    }
}

impl request::Name for Span<'_> {
    // Common names, methods and schemes never get here: `request_head` keeps those as static
    // bytes.
    fn into_bytes(self) -> Bytes {
        self.all.slice(self.at..self.end)
    }
}
