//! The send path: the handler's calls encode heads and queue body bytes (bounded per stream);
//! `poll_transmit` hands out writes in order: resets, control and QPACK streams, response heads,
//! then one quantum of body data per scheduler pick (RFC 9218 order).

use bytes::{Buf, Bytes};
use sluice_http::Priority;
use sluice_http::{Field, HeadFields};
use sluice_qpack::{FieldRef, ENTRY_OVERHEAD};

use super::{Connection, SendError, Transmit};
use crate::error::Code;
use crate::frame::{self, kind};
use crate::stream::FinalHead;

/// Quanta one DATA frame may carry when the scheduler would pick its stream again anyway (see
/// `next_data`): 16 × 16 KiB, four of the 64 KiB chunks a body hands out at most.
const RUN_QUANTA: usize = 16;

impl Connection {
    /// The `Date` field value (an IMF-fixdate, RFC 9110 §5.6.7) that every final response head
    /// queued from now on carries, unless its fields have a `date` of their own (a proxied
    /// response's): an origin server with a clock must send it (RFC 9110 §6.6.1). The engine
    /// reads no clock, so the driver sets it, once a second.
    pub fn set_date(&mut self, value: Bytes) {
        self.date = Some(value);
    }

    /// Queue a response head on `stream`: an interim response (1xx, not 101) or the final one.
    /// With `end_stream` the response has no body. A `priority` field among `fields` changes
    /// the stream's priority (RFC 9218 §8: the server's view merged over the client's).
    /// Field names must be lower case and connection-specific fields left out (RFC 9114
    /// §4.2); the engine encodes what it is given.
    pub fn send_response(
        &mut self,
        stream: u64,
        status: u16,
        fields: impl Into<HeadFields>,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let fields = fields.into();
        let s = self.streams.get(&stream).ok_or(SendError::UnknownStream)?;
        if s.send.done || s.send.final_head != FinalHead::None {
            return Err(SendError::InvalidState);
        }
        // RFC 9110 §15: three digits; RFC 9114 §4.5: no 101 (Switching Protocols).
        if !(100..=999).contains(&status) || status == 101 {
            return Err(SendError::InvalidStatus);
        }
        let interim = status < 200;
        if interim && end_stream {
            return Err(SendError::InvalidState);
        }
        let mut priority = s.priority;
        for (_, v) in fields.iter().filter(|(n, _)| *n == b"priority") {
            priority = Priority::parse(v, priority);
        }
        // Three digits (checked above), without a `String` for them.
        // Taken out for the encoding (which borrows the engine), not cloned: a clone and its
        // drop are two atomic operations per response.
        let date = self.date.take();
        let stamp = date.as_deref().filter(|_| !interim && !fields.has_date());
        let status = sluice_http::status_digits(status);
        let list = std::iter::once(FieldRef::new(b":status", &status))
            .chain(stamp.map(|d| FieldRef::new(b"date", d)))
            .chain(fields.iter().map(|(n, v)| FieldRef::new(n, v)));
        let block = self.encode_section(stream, list);
        self.date = date;
        let block = block?;
        self.reprioritize(stream, priority);
        if !interim {
            self.urgencies_seen |= 1 << priority.urgency.min(7);
        }
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        // The frame's header is at most 1 + 8 bytes: room for the whole frame at once.
        s.send.heads.reserve_exact(block.len() + 9);
        frame::encode(kind::HEADERS, &block, &mut s.send.heads);
        if !interim {
            s.send.final_head = FinalHead::Queued;
            s.send.end_queued = end_stream;
        }
        if !s.send.in_heads {
            s.send.in_heads = true;
            self.heads.push_back(stream);
        }
        Ok(())
    }

    /// Queue response body bytes; with `end_stream` the body ends after them. Refused with
    /// [`SendError::Full`] while [`Connection::send_capacity`] is 0 (a chunk may overshoot the
    /// bound once); [`Connection::drain_sent`] reports when room is made.
    pub fn send_data(&mut self, stream: u64, data: Bytes, end_stream: bool) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        if s.send.done || s.send.end_queued || s.send.final_head == FinalHead::None {
            return Err(SendError::InvalidState);
        }
        if !data.is_empty() {
            if s.send.queued >= self.cfg.max_buffered_per_stream {
                return Err(SendError::Full);
            }
            s.send.queued += data.len();
            s.send.queue.push_back(data);
        }
        s.send.end_queued = end_stream;
        self.update_ready(stream);
        Ok(())
    }

    /// Queue trailers; they end the response after the queued body.
    pub fn send_trailers(&mut self, stream: u64, fields: Vec<Field>) -> Result<(), SendError> {
        let s = self.streams.get(&stream).ok_or(SendError::UnknownStream)?;
        if s.send.done || s.send.end_queued || s.send.final_head == FinalHead::None {
            return Err(SendError::InvalidState);
        }
        let block = self.encode_section(stream, fields.iter().map(|f| FieldRef::new(&f.name, &f.value)))?;
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        let mut out = Vec::with_capacity(block.len() + 4);
        frame::encode(kind::HEADERS, &block, &mut out);
        s.send.trailers = Some(out);
        s.send.end_queued = true;
        self.update_ready(stream);
        Ok(())
    }

    /// Cancel a stream from our side (handler failure, cancelled upload): reset what is still
    /// open of it with `code` (RFC 9114 §4.1.1: H3_REQUEST_CANCELLED after processing began,
    /// H3_REQUEST_REJECTED if none did).
    pub fn reset(&mut self, stream: u64, code: Code) {
        if !self.failed {
            self.abort_stream(stream, Some(code), Some(code), None);
            self.flush_decoder();
        }
    }

    /// The response of `stream` went out whole. If the request's body is still coming, the rest
    /// of it is not needed: stop reading it with H3_NO_ERROR (RFC 9114 §4.1: a server may
    /// complete its response before the request is complete and ask the client to stop
    /// sending, without error).
    fn sent_all(&mut self, stream: u64) {
        if self.streams.get(&stream).is_some_and(|s| !s.recv.done) {
            self.stop_reading(stream);
        } else {
            self.maybe_close(stream);
        }
    }

    /// The application does not need the rest of the request body (e.g. it answered early):
    /// stop reading with H3_NO_ERROR (RFC 9114 §4.1) and drop further body bytes.
    pub fn stop_reading(&mut self, stream: u64) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.recv.done {
            return;
        }
        s.recv.done = true;
        self.ops.push_back(Transmit::StopSending { stream, code: Code::H3_NO_ERROR });
        self.decoder.cancel_stream(stream);
        self.flush_decoder();
        self.maybe_close(stream);
    }

    /// Set a stream's priority (the handler's own choice).
    pub fn set_priority(&mut self, stream: u64, p: Priority) {
        self.reprioritize(stream, p);
    }

    /// A stream's current priority (for the transport's own stream priority, e.g. quinn's
    /// `set_priority`), if it is open.
    pub fn priority(&self, stream: u64) -> Option<Priority> {
        self.streams.get(&stream).map(|s| s.priority)
    }

    /// Body bytes of `stream` queued and not yet framed; `None` if the stream is gone.
    pub fn buffered(&self, stream: u64) -> Option<usize> {
        self.streams.get(&stream).map(|s| s.send.queued)
    }

    /// Whether a response head or body bytes wait to be handed to the transport on any stream.
    pub fn has_unframed(&self) -> bool {
        !self.heads.is_empty() || self.streams.values().any(|s| s.send.queued > 0)
    }

    /// Body bytes `stream` accepts now before [`Connection::send_data`] refuses more; `None` if
    /// the stream is gone.
    pub fn send_capacity(&self, stream: u64) -> Option<usize> {
        self.streams.get(&stream).map(|s| self.cfg.max_buffered_per_stream.saturating_sub(s.send.queued))
    }

    /// Report, per stream, body bytes framed since the last call (the driver turns them into
    /// room for the handler: its backpressure).
    pub fn drain_sent(&mut self, mut f: impl FnMut(u64, usize)) {
        for id in std::mem::take(&mut self.sent_dirty) {
            if let Some(s) = self.streams.get_mut(&id) {
                let n = std::mem::take(&mut s.send.sent_unreported);
                if n > 0 {
                    f(id, n);
                }
            }
        }
    }

    /// The QUIC stream `stream` cannot take more data now (flow control): the scheduler skips
    /// it until [`Connection::on_stream_writable`].
    pub fn on_stream_blocked(&mut self, stream: u64) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.blocked = true;
            self.update_ready(stream);
        }
    }

    /// The QUIC stream `stream` can take data again.
    pub fn on_stream_writable(&mut self, stream: u64) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.blocked = false;
            self.update_ready(stream);
        }
    }

    /// Whether [`Connection::poll_transmit`] has something to hand out.
    pub fn wants_write(&self) -> bool {
        if self.failed {
            return self.close.is_some();
        }
        !self.ops.is_empty()
            || !self.control_out.is_empty()
            || !self.encoder_out.is_empty()
            || !self.decoder_out.is_empty()
            || self.heads.iter().any(|id| self.streams.get(id).is_some_and(|s| !s.blocked))
            || !self.sched.is_empty()
    }

    /// The urgency (RFC 9218, 0 most urgent) of the most urgent stream with a response head or
    /// body data waiting, if any.
    pub fn next_urgency(&self) -> Option<u8> {
        let heads = self.heads.iter().filter_map(|id| self.streams.get(id)).filter(|s| !s.blocked);
        heads.map(|s| s.priority.urgency).chain(self.sched.urgency()).min()
    }

    /// Whether final responses of more than one urgency have been queued on this connection (a
    /// browser loading a page, not a single download): the driver then keeps queues short from
    /// the start.
    pub fn mixed_urgencies(&self) -> bool {
        self.urgencies_seen.count_ones() > 1
    }

    /// The next thing for the driver to do on the transport, if any: resets and STOP_SENDING
    /// first, then our control, QPACK encoder and decoder streams (so every encoder
    /// instruction goes out before the HEADERS that depend on it), then response heads, then
    /// one quantum of the most urgent stream's body (RFC 9218 order). After a connection error,
    /// only the [`Transmit::Close`].
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if self.failed {
            return self.close.take();
        }
        if let Some(t) = self.ops.pop_front() {
            return Some(t);
        }
        for (id, buf) in [
            (self.control_id, &mut self.control_out),
            (self.encoder_id, &mut self.encoder_out),
            (self.decoder_id, &mut self.decoder_out),
        ] {
            if !buf.is_empty() {
                return Some(Transmit::Write {
                    stream: id,
                    data: Bytes::from(std::mem::take(buf)),
                    body: Bytes::new(),
                    fin: false,
                });
            }
        }
        if let Some(t) = self.next_head() {
            return Some(t);
        }
        self.next_data()
    }

    /// QPACK-encode a field section for `stream`, moving the encoder-stream instructions it
    /// made to our encoder stream.
    fn encode_section<'a>(
        &mut self,
        stream: u64,
        fields: impl Iterator<Item = FieldRef<'a>> + Clone,
    ) -> Result<Vec<u8>, SendError> {
        // RFC 9114 §4.2.2: name + value + 32 per field, against the client's limit.
        let size: u64 = fields.clone().map(|f| (f.name.len() + f.value.len()) as u64 + ENTRY_OVERHEAD).sum();
        if size > self.peer.max_field_section_size {
            return Err(SendError::FieldSectionTooLarge);
        }
        let mut block = Vec::with_capacity(64);
        self.encoder.encode(stream, fields, &mut block);
        while let Some(b) = self.encoder.poll_encoder_stream() {
            self.encoder_out.extend_from_slice(&b);
        }
        Ok(block)
    }

    /// The response heads of the first stream that can take them.
    fn next_head(&mut self) -> Option<Transmit> {
        let pos = self.heads.iter().position(|id| self.streams.get(id).is_some_and(|s| !s.blocked))?;
        let id = self.heads.remove(pos)?;
        let s = self.streams.get_mut(&id)?;
        s.send.in_heads = false;
        let data = Bytes::from(std::mem::take(&mut s.send.heads));
        let mut fin = false;
        if s.send.final_head == FinalHead::Queued {
            s.send.final_head = FinalHead::Written;
            // A response without body or trailers ends with its head.
            fin = s.send.end_queued && s.send.queued == 0 && s.send.trailers.is_none();
        }
        if fin {
            s.send.done = true;
        }
        self.update_ready(id);
        if fin {
            self.sent_all(id);
        }
        Some(Transmit::Write { stream: id, data, body: Bytes::new(), fin })
    }

    /// One quantum of the body of the stream the scheduler picks: a DATA frame (or, for a
    /// frame that spans several chunks, its next chunk), or the end (trailers, or an empty
    /// write with FIN).
    fn next_data(&mut self) -> Option<Transmit> {
        let (key, run) = self.sched.next_run()?;
        let id = u64::from(key) << 2;
        let quantum = self.cfg.quantum.max(1);
        let Some(s) = self.streams.get_mut(&id) else {
            // Invariant: streams leave the scheduler when they are removed.
            debug_assert!(false, "scheduled stream {id} is gone");
            return None;
        };
        // Only the end is left (the stream is ready, so `end_queued`): trailers or FIN.
        let end_only = s.send.frame_left == 0 && s.send.queued == 0;
        let (data, body, taken) = if s.send.frame_left > 0 {
            // The rest of a frame that spans several chunks: its next chunk (or what of it the
            // frame holds), as it is. Invariant: `frame_left <= queued`, so it is queued.
            let Some(front) = s.send.queue.front_mut() else {
                debug_assert!(false, "a frame's payload is queued");
                s.send.frame_left = 0;
                return None;
            };
            let body = front.split_to(front.len().min(s.send.frame_left));
            if front.is_empty() {
                s.send.queue.pop_front();
            }
            s.send.frame_left -= body.len();
            let taken = body.len();
            (Bytes::new(), body, taken)
        } else if end_only {
            (Bytes::from(s.send.trailers.take().unwrap_or_default()), Bytes::new(), 0)
        } else {
            let front = s.send.queue.front().map_or(0, Bytes::len);
            let mut n = s.send.queued.min(quantum);
            if run {
                // The scheduler would pick this stream for the next quanta too: one longer
                // frame, up to RUN_QUANTA quanta, of a slice of the front chunk or of whole
                // queued chunks, each chunk handed on as it is in a write of its own, never
                // copied. The order is the same; the frames, and the pieces quinn keeps per
                // stream, are fewer. quinn finds the piece a packet reads from by walking the
                // stream's pieces from the oldest unacknowledged one, once per STREAM frame
                // (quinn-proto 0.11 `SendBuffer::get`): with two pieces (header, payload) per
                // 16 KiB frame that walk took 22 % of the server's CPU in a 1 GB loopback
                // download, 11 % with one frame per 64 KiB chunk.
                let most = quantum.saturating_mul(RUN_QUANTA);
                let mut whole = 0;
                for c in &s.send.queue {
                    if whole + c.len() > most {
                        break;
                    }
                    whole += c.len();
                }
                n = n.max(front.min(most)).max(whole);
            }
            let mut out = Vec::with_capacity(9);
            frame::encode_header(kind::DATA, n as u64, &mut out);
            // Invariant: `queued` is the sum of the chunks, and n <= queued.
            let body = match s.send.queue.front_mut() {
                // A frame of whole chunks: the first one now, the others as the stream's next
                // writes.
                Some(front) if n > front.len() && run => {
                    let body = std::mem::take(front);
                    s.send.queue.pop_front();
                    s.send.frame_left = n - body.len();
                    body
                }
                // The usual case: the quantum is a slice of one chunk, handed on as it is.
                Some(front) if front.len() >= n => {
                    let body = front.split_to(n);
                    if front.is_empty() {
                        s.send.queue.pop_front();
                    }
                    body
                }
                _ => {
                    out.reserve(n);
                    let mut left = n;
                    while left > 0 {
                        let Some(front) = s.send.queue.front_mut() else { break };
                        let take = front.len().min(left);
                        out.extend_from_slice(&front[..take]);
                        front.advance(take);
                        if front.is_empty() {
                            s.send.queue.pop_front();
                        }
                        left -= take;
                    }
                    Bytes::new()
                }
            };
            // A frame of several chunks hands out its first chunk now, any other frame all
            // of its payload.
            let taken = if s.send.frame_left > 0 { body.len() } else { n };
            (Bytes::from(out), body, taken)
        };
        let fin = if end_only {
            true
        } else {
            s.send.queued -= taken;
            if s.send.sent_unreported == 0 {
                self.sent_dirty.push(id);
            }
            s.send.sent_unreported += taken;
            // Invariant: frame_left <= queued, so nothing of a frame is left once queued is 0.
            s.send.end_queued && s.send.queued == 0 && s.send.trailers.is_none()
        };
        if fin {
            s.send.done = true;
        }
        self.update_ready(id);
        if fin {
            self.sent_all(id);
        }
        Some(Transmit::Write { stream: id, data, body, fin })
    }
}
