//! The send path: the handler's calls queue heads and bytes; `poll_transmit` turns them into
//! frames in scheduler order, spending connection credit only as frames are produced.

use std::time::Instant;

use bytes::Bytes;

use super::{Connection, SendError};
use crate::error::{Error, Initiator, Reason};
use crate::frame::{kind, Data, Head, Headers, RstStream};
use crate::priority::Priority;
use crate::stream::FinalHead;
use crate::transmit::{FrameSink, Transmit};
use sluice_http::{Field, HeadFields};

/// Frames smaller than this are not worth cutting to fit the caller's byte budget; the pick
/// waits for the next transmit instead.
const MIN_FRAME: usize = 1024;

/// How long after a response went out whole, its request's body still coming, the stream is
/// reset with NO_ERROR (RFC 9113 §8.1; see `Connection::finish_early`). Not in the write that
/// carries the response's end: a client that reads the two at once may take the stream for
/// one that closed before its response (curl 7.88 did: "stream 1 closed", no status, exit 92;
/// over TLS it reads a record at a time, but cleartext h2c came in one read even from the next
/// write). Ten milliseconds is past any loopback read and small beside a round trip, during
/// which the client sends on anyway.
const RESET_AFTER_RESPONSE: std::time::Duration = std::time::Duration::from_millis(10);

impl Connection {
    /// The `Date` field value (an IMF-fixdate, RFC 9110 §5.6.7) that every final response head
    /// from now on carries, unless its fields have a `date` of their own (a proxied response's):
    /// an origin server with a clock must send it (RFC 9110 §6.6.1). The engine reads no clock,
    /// so the driver sets it, once a second; the encoder indexes it, so within that second it
    /// costs a byte or two per response.
    pub fn set_date(&mut self, value: Bytes) {
        self.date = Some(value);
    }

    /// Queue a response head of `stream`: an interim response (1xx other than 101; any
    /// number of them, RFC 9113 §8.1) or the final one (200 and up). With `end_stream` the
    /// response has no body. Heads are framed in the order given, before any body data.
    ///
    /// Refused: a status outside 100..=999 or 101 (RFC 9113 §8.6: no Upgrade in HTTP/2) with
    /// [`SendError::InvalidStatus`]; an interim head with `end_stream`, or any head after the
    /// final one, with [`SendError::InvalidState`].
    pub fn send_response(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl Into<HeadFields>,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        if s.final_head != FinalHead::None {
            return Err(SendError::InvalidState);
        }
        // RFC 9110 §15: three digits. RFC 9113 §8.6: 101 (Switching Protocols) is not allowed.
        if !(100..=999).contains(&status) || status == 101 {
            return Err(SendError::InvalidStatus);
        }
        if status < 200 && end_stream {
            // RFC 9113 §8.1: an interim response never carries END_STREAM.
            return Err(SendError::InvalidState);
        }
        if end_stream {
            s.end_queued = true;
        }
        if s.push_head(status, fields.into(), end_stream) {
            self.heads.push_back(stream);
        }
        Ok(())
    }

    /// Queue body bytes; with `end_stream` the body ends after them. The engine buffers what it
    /// is given: the driver bounds it with [`Connection::buffered`] and [`Connection::drain_sent`].
    pub fn send_data(&mut self, stream: u32, data: Bytes, end_stream: bool) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        if s.end_queued || s.final_head == FinalHead::None {
            return Err(SendError::InvalidState);
        }
        if !data.is_empty() {
            s.queued += data.len();
            s.queue.push_back(data);
        }
        s.end_queued |= end_stream;
        self.update_ready(stream);
        Ok(())
    }

    /// Queue trailers; they end the stream after the queued body.
    pub fn send_trailers(&mut self, stream: u32, fields: Vec<Field>) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::UnknownStream)?;
        if s.end_queued || s.final_head == FinalHead::None {
            return Err(SendError::InvalidState);
        }
        s.trailers = Some(fields);
        s.end_queued = true;
        self.update_ready(stream);
        Ok(())
    }

    /// Reset a stream from our side (handler failure, cancelled upload, ...).
    pub fn reset(&mut self, stream: u32, reason: Reason) {
        if self.failed {
            return;
        }
        RstStream { stream, reason }.encode(&mut self.control);
        self.remove_stream(stream);
    }

    /// The application consumed `n` body bytes of `stream`: they become flow-control credit.
    pub fn release(&mut self, now: Instant, stream: u32, n: usize) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let n = (n as u64).min(s.unreleased);
        s.unreleased -= n;
        self.release_inner(now, stream, n as u32);
    }

    /// The application will not read the rest of this request body: credit for what was
    /// delivered and for everything still to come returns at once.
    pub fn discard_body(&mut self, now: Instant, stream: u32) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.discard = true;
        let n = std::mem::take(&mut s.unreleased);
        self.release_inner(now, stream, n as u32);
    }

    /// Change a stream's send priority (handler's choice, or PRIORITY_UPDATE later).
    pub fn set_priority(&mut self, stream: u32, p: Priority) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.scheduled {
            self.sched.remove(stream, s.priority);
            self.sched.push(stream, p);
        }
        s.priority = p;
        s.priority_from_header = true;
    }

    /// Apply a Priority Field Value (RFC 9218 §4: `u=N, i`) to `stream` on top of its current
    /// priority: how a handler (or an upstream's `priority` response header) re-prioritises.
    pub fn apply_priority_field(&mut self, stream: u32, value: &[u8]) {
        if let Some(current) = self.streams.get(&stream).map(|s| s.priority) {
            self.set_priority(stream, Priority::parse(value, current));
        }
    }

    /// Body bytes of `stream` queued and not yet framed; `None` if the stream is gone.
    pub fn buffered(&self, stream: u32) -> Option<usize> {
        self.streams.get(&stream).map(|s| s.queued)
    }

    /// Whether a response head, body bytes, trailers or an end of stream wait to be framed on
    /// any stream (whatever the flow-control windows allow now).
    pub fn has_unframed(&self) -> bool {
        self.streams
            .iter()
            .any(|(_, s)| !s.heads.is_empty() || s.queued > 0 || s.trailers.is_some() || (s.end_queued && s.send_open))
    }

    /// Whether frames wait that need room in a write: queued control frames or headers, or a
    /// ready stream the connection window lets through. The driver uses it to decide whether
    /// to come back when it held a write back (a budget of 0 still sends control frames).
    pub fn wants_write(&self) -> bool {
        !self.control.is_empty()
            || !self.heads.is_empty()
            || (!self.failed && !self.sched.is_empty() && self.send_window.available() > 0)
    }

    /// The urgency (RFC 9218, 0 most urgent) of the most urgent stream with a response head,
    /// data or an end ready to frame, if any.
    pub fn next_urgency(&self) -> Option<u8> {
        let heads = self.heads.iter().filter_map(|id| self.streams.get(id)).map(|s| s.priority.urgency);
        heads.chain(self.sched.urgency()).min()
    }

    /// Whether responses of more than one urgency have been sent on this connection (a browser
    /// loading a page, not a single download): the driver then keeps queues short from the start.
    pub fn mixed_urgencies(&self) -> bool {
        self.urgencies_seen.count_ones() > 1
    }

    /// Report, per stream, body bytes framed since the last call (the driver turns them into
    /// room for the handler: its backpressure).
    pub fn drain_sent(&mut self, mut f: impl FnMut(u32, usize)) {
        // The list keeps its room for the next writes (taken whole, it was an allocation and a
        // free about every other write).
        let mut dirty = std::mem::take(&mut self.sent_dirty);
        for &id in &dirty {
            if let Some(s) = self.streams.get_mut(&id) {
                let n = std::mem::take(&mut s.sent_unreported);
                if n > 0 {
                    f(id, n);
                }
            }
        }
        dirty.clear();
        self.sent_dirty = dirty;
    }

    /// Queue an extension frame (ORIGIN and friends) as control output.
    pub fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        if self.failed {
            return;
        }
        Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut self.control);
        self.control.extend_from_slice(payload);
    }

    /// Append frames to `out`: control frames first, then response heads, then body data in
    /// scheduler order until about `max` bytes were added. Returns whether anything was added.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>, max: usize) -> bool {
        self.transmit(now, out, max, u8::MAX)
    }

    /// As [`poll_transmit`](Self::poll_transmit), but body data only of streams at urgency
    /// `max_urgency` or more urgent: a driver that gives urgent data room it denies the rest
    /// (HTTP/2 driver, in-flight bound) must not see that room filled with less urgent data
    /// while the urgent response's body is still on its way from the handler.
    #[must_use]
    pub fn poll_transmit_upto(&mut self, now: Instant, out: &mut Vec<u8>, max: usize, max_urgency: u8) -> bool {
        self.transmit(now, out, max, max_urgency)
    }

    /// As [`poll_transmit_upto`](Self::poll_transmit_upto), into a [`Transmit`]: DATA payloads
    /// of [`SLICE_MIN`](crate::transmit::SLICE_MIN) bytes or more are handed on as slices of
    /// what the handler gave, not copied.
    #[must_use]
    pub fn poll_transmit_into(&mut self, now: Instant, out: &mut Transmit, max: usize, max_urgency: u8) -> bool {
        self.transmit(now, out, max, max_urgency)
    }

    fn transmit<S: FrameSink>(&mut self, now: Instant, out: &mut S, max: usize, max_urgency: u8) -> bool {
        let start = out.len();
        // Responses completed a while ago, their requests still open: reset now.
        self.reset_due(now);
        out.bytes().append(&mut self.control);
        if self.failed {
            return out.len() > start;
        }
        while let Some(id) = self.heads.pop_front() {
            self.write_head(id, out);
        }
        while out.len() - start < max {
            if self.sched.urgency().is_none_or(|u| u > max_urgency) {
                break;
            }
            let Some(id) = self.sched.next() else { break };
            if !self.write_data(id, out, max - (out.len() - start)) {
                break;
            }
        }
        // Streams whose last frame went out may now be closed: those done both ways, and those
        // whose response is complete while the request's body is still coming (an early 200,
        // 413 or gRPC status), which are reset with NO_ERROR after that last frame: the client
        // may stop sending without error (RFC 9113 §8.1), rather than wait on a window we
        // will not open again.
        // Gathered on the stack, a batch at a time: no list allocated per call, and none kept
        // in every connection's state.
        loop {
            let mut done = [(0u32, false); 16];
            let mut n = 0;
            // A stream already waiting for its reset stays until it is due.
            let waiting = |id: u32| self.reset_after.iter().any(|&(r, _)| r == id);
            for (id, s) in self.streams.iter().filter(|&(id, s)| !s.send_open && (!s.recv_open || !waiting(id))) {
                done[n] = (id, s.recv_open);
                n += 1;
                if n == done.len() {
                    break;
                }
            }
            for &(id, early) in &done[..n] {
                if early {
                    // Reset a little later, not in this write (see `RESET_AFTER_RESPONSE`).
                    if !self.reset_after.iter().any(|&(r, _)| r == id) {
                        self.reset_after.push((id, now + RESET_AFTER_RESPONSE));
                    }
                } else {
                    self.remove_stream(id);
                }
            }
            if n < done.len() {
                break;
            }
        }
        out.bytes().append(&mut self.control);
        let wrote = out.len() > start;
        if wrote {
            self.last_activity = now;
        }
        wrote
    }

    /// Frame every head `id` has waiting, in order.
    fn write_head(&mut self, id: u32, out: &mut impl FrameSink) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        // Popped, not taken: the queue keeps its room for the stream's next head and, through
        // its slot, for the next stream's (taking it cost an allocation per response).
        while let Some(head) = s.heads.pop_front() {
            // Three digits: `send_response` takes only 100..=999 (and the engine's own 431).
            let n = head.status;
            let status = sluice_http::status_digits(n);
            let date = self.date.as_deref().filter(|_| n >= 200 && !head.fields.has_date());
            let status = Lead { status: &status, date, at: 0 };
            let own = head.fields.own.iter().map(|f| line(f.parts()));
            self.out_block.clear();
            let packed = head.fields.packed.iter().map(line);
            // Each part is chained only where it is there: a chain costs at every line.
            match (&head.fields.shared, head.fields.packed.is_empty()) {
                // Shared fields (a file's prebuilt ones) are known to the encoder's memo by
                // identity: a repeat compares the status and the response's other fields only.
                (Some(shared), true) => {
                    let lines = status.clone().chain(shared.iter().map(|f| line(f.parts()))).chain(own.clone());
                    self.encoder.encode_keyed(shared, lines, status.chain(own), &mut self.out_block);
                }
                (None, true) => self.encoder.encode(status.chain(own), &mut self.out_block),
                // Parsed fields (a proxied response's), known to the memo by their image: a
                // repeat compares the status, one image and the response's own fields.
                (None, false) => {
                    let lines = status.clone().chain(packed).chain(own.clone());
                    let part = Parsed(&head.fields.packed);
                    self.encoder.encode_imprinted(&part, lines, status.chain(own), &mut self.out_block);
                }
                (Some(shared), false) => {
                    let shared = shared.iter().map(|f| line(f.parts()));
                    self.encoder.encode(status.chain(shared).chain(packed).chain(own), &mut self.out_block);
                }
            }
            Headers::encode(id, &self.out_block, head.end_stream, self.peer_max_frame, out.bytes());
            if head.status >= 200 {
                s.final_head = FinalHead::Sent;
            }
            if head.end_stream {
                s.send_open = false;
            }
        }
        self.update_ready(id);
    }

    /// Frame one quantum of `id`. Returns false when the connection window is exhausted or the
    /// budget is too small for a useful frame (the loop stops).
    fn write_data(&mut self, id: u32, out: &mut impl FrameSink, budget: usize) -> bool {
        let conn_avail = self.send_window.available();
        let Some(s) = self.streams.get_mut(&id) else {
            return true;
        };
        if s.queued == 0 {
            // Only the end is left: trailers or an empty DATA with END_STREAM (no credit needed).
            if let Some(trailers) = s.trailers.take() {
                let list = trailers.iter().map(|f| (&f.name[..], &f.value[..], is_sensitive(&f.name)));
                self.out_block.clear();
                self.encoder.encode(list, &mut self.out_block);
                Headers::encode(id, &self.out_block, true, self.peer_max_frame, out.bytes());
            } else {
                Data::encode(id, &[], true, out.bytes());
            }
            s.send_open = false;
            self.update_ready(id);
            return true;
        }
        if conn_avail == 0 {
            return false;
        }
        let n = s.queued.min(s.send_window.available()).min(conn_avail).min(self.peer_max_frame).min(self.cfg.quantum);
        if n > budget && budget < MIN_FRAME.min(n) {
            return false;
        }
        let n = n.min(budget.max(MIN_FRAME));
        let end = s.end_queued && s.trailers.is_none() && n == s.queued;
        Head {
            len: n as u32,
            kind: kind::DATA,
            flags: if end { crate::frame::flag::END_STREAM } else { 0 },
            stream: id,
        }
        .encode(out.bytes());
        let mut left = n;
        while left > 0 {
            // Invariant: `queued` is the sum of the chunks, and n <= queued.
            let Some(front) = s.queue.front_mut() else { break };
            let take = front.len().min(left);
            out.payload_from(front, take);
            if front.is_empty() {
                s.queue.pop_front();
            }
            left -= take;
        }
        s.queued -= n;
        s.send_window.consume(n);
        self.send_window.consume(n);
        // The peer may acknowledge each DATA frame with a WINDOW_UPDATE on either window.
        s.update_credit = s.update_credit.saturating_add(1);
        self.conn_update_credit = self.conn_update_credit.saturating_add(1);
        if s.sent_unreported == 0 {
            self.sent_dirty.push(id);
        }
        s.sent_unreported += n;
        if end {
            s.send_open = false;
        }
        self.update_ready(id);
        true
    }

    /// Reset every stream and close: used when the driver gives up (I/O error).
    pub fn abort(&mut self, detail: &'static str) {
        self.fail(Error::Connection { reason: Reason::INTERNAL_ERROR, initiator: Initiator::Local, detail });
    }
}

/// A response's parsed fields as the HPACK encoder's memo knows them: by their image.
struct Parsed<'a>(&'a sluice_http::PackedFields);

impl sluice_hpack::Imprint for Parsed<'_> {
    fn imprint_len(&self) -> usize {
        self.0.imprint_len()
    }

    fn imprint(&self, out: &mut Vec<u8>) {
        self.0.imprint(out);
    }

    fn is_imprint(&self, kept: &[u8]) -> bool {
        self.0.is_imprint(kept)
    }
}

/// A response field as the HPACK encoder takes it.
fn line<'a>((name, value): (&'a [u8], &'a [u8])) -> (&'a [u8], &'a [u8], bool) {
    (name, value, is_sensitive(name))
}

/// Fields an intermediary must not index (RFC 7541 §7.1.3): credentials.
fn is_sensitive(name: &[u8]) -> bool {
    matches!(name, b"set-cookie" | b"authorization" | b"proxy-authorization")
}

/// A response head's first lines: `:status`, then `date` if the engine adds one. One small
/// iterator rather than a chain of two: each list is walked twice (compared with the memo's,
/// then encoded on a miss), and a chain's extra layer costs at every step.
#[derive(Clone)]
struct Lead<'a> {
    status: &'a [u8],
    date: Option<&'a [u8]>,
    at: u8,
}

impl<'a> Iterator for Lead<'a> {
    type Item = (&'a [u8], &'a [u8], bool);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.at += 1;
        match self.at {
            1 => Some((b":status", self.status, false)),
            2 => self.date.map(|d| (&b"date"[..], d, false)),
            _ => {
                self.at = 3;
                None
            }
        }
    }
}
