//! Per-stream state.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::flow::{RecvWindow, SendWindow};
use crate::priority::Priority;
use sluice_http::{Field, HeadFields};
use sluice_tune::window::TuneState;

/// Where the final response head (status 200 or more) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FinalHead {
    /// Not given yet (interim heads may be).
    None,
    /// Given, waiting in `Stream::heads` to be framed.
    Queued,
    /// Framed: body data, trailers or the end may follow.
    Sent,
}

/// One response head waiting to be framed: an interim (1xx) or the final one.
#[derive(Debug)]
pub(crate) struct PendingHead {
    pub(crate) status: u16,
    pub(crate) fields: HeadFields,
    pub(crate) end_stream: bool,
}

/// One stream the peer opened.
#[derive(Debug)]
pub(crate) struct Stream {
    /// The peer may still send (no END_STREAM yet).
    pub(crate) recv_open: bool,
    /// We have not framed END_STREAM yet.
    pub(crate) send_open: bool,
    /// Response heads given and not yet framed, in order: any number of interim (1xx)
    /// heads, then at most one final head (RFC 9113 §8.1).
    pub(crate) heads: VecDeque<PendingHead>,
    pub(crate) final_head: FinalHead,
    /// Response body bytes waiting for the scheduler.
    pub(crate) queue: VecDeque<Bytes>,
    pub(crate) queued: usize,
    /// The handler has finished the body (END_STREAM follows the queue).
    pub(crate) end_queued: bool,
    /// Trailers to send after the queue.
    pub(crate) trailers: Option<Vec<Field>>,
    pub(crate) send_window: SendWindow,
    pub(crate) recv: RecvWindow,
    /// Body bytes received (without padding), checked against `content_length`.
    pub(crate) received: u64,
    pub(crate) content_length: Option<u64>,
    pub(crate) priority: Priority,
    /// Priority came from the `priority` header or PRIORITY_UPDATE: RFC 7540 signals no longer apply.
    pub(crate) priority_from_header: bool,
    /// In the scheduler (with `priority`).
    pub(crate) scheduled: bool,
    /// The application does not want the rest of the body: credit returns at once.
    pub(crate) discard: bool,
    /// Body bytes handed to the application and not yet released.
    pub(crate) unreleased: u64,
    /// Body bytes framed since the driver last asked.
    pub(crate) sent_unreported: usize,
    /// The window policy's state for this stream's receive window.
    pub(crate) tune: TuneState,
    /// The stream still receives a body: its window counts in the connection's sum.
    pub(crate) tuning: bool,
    /// WINDOW_UPDATEs the peer may send for this stream before they count as glitches: one
    /// per DATA frame we sent since its last one (the first is free).
    pub(crate) update_credit: u32,
    /// A priority frame (PRIORITY or PRIORITY_UPDATE) named this stream: later ones are
    /// glitches.
    pub(crate) priority_signalled: bool,
    /// A frame of unknown type arrived on this stream: later ones are glitches.
    pub(crate) unknown_frame_seen: bool,
}

impl Stream {
    /// A new stream, its queues empty.
    fn new(send_initial: u32, recv_initial: u32, recv_target: u32) -> Self {
        Self {
            recv_open: true,
            send_open: true,
            heads: VecDeque::new(),
            final_head: FinalHead::None,
            queue: VecDeque::new(),
            queued: 0,
            end_queued: false,
            trailers: None,
            send_window: SendWindow::new(send_initial),
            recv: RecvWindow::new(recv_initial, recv_target),
            received: 0,
            content_length: None,
            priority: Priority::default(),
            priority_from_header: false,
            scheduled: false,
            discard: false,
            unreleased: 0,
            sent_unreported: 0,
            tune: TuneState { window: recv_target, ..TuneState::default() },
            tuning: true,
            update_credit: 1,
            priority_signalled: false,
            unknown_frame_seen: false,
        }
    }

    /// Make this (closed, emptied) stream a new one, as [`new`](Self::new) but keeping its
    /// queues' room, field by field: assigning a whole new value moved 256 bytes and ran
    /// the old value's drop (about 150 instructions a stream).
    fn reset(&mut self, send_initial: u32, recv_initial: u32, recv_target: u32) {
        debug_assert!(self.heads.is_empty() && self.queue.is_empty() && self.trailers.is_none());
        self.recv_open = true;
        self.send_open = true;
        self.final_head = FinalHead::None;
        self.queued = 0;
        self.end_queued = false;
        self.send_window = SendWindow::new(send_initial);
        self.recv = RecvWindow::new(recv_initial, recv_target);
        self.received = 0;
        self.content_length = None;
        self.priority = Priority::default();
        self.priority_from_header = false;
        self.scheduled = false;
        self.discard = false;
        self.unreleased = 0;
        self.sent_unreported = 0;
        self.tune = TuneState { window: recv_target, ..TuneState::default() };
        self.tuning = true;
        self.update_credit = 1;
        self.priority_signalled = false;
        self.unknown_frame_seen = false;
    }

    /// Queue a response head; returns whether the stream must join the connection's list of
    /// streams with heads to frame (it had none waiting).
    pub(crate) fn push_head(&mut self, status: u16, fields: HeadFields, end_stream: bool) -> bool {
        let first = self.heads.is_empty();
        if status >= 200 {
            self.final_head = FinalHead::Queued;
        }
        self.heads.push_back(PendingHead { status, fields, end_stream });
        first
    }

    /// Whether the scheduler should consider this stream: its head is out and it has data it
    /// may send, or only END_STREAM (or trailers) left, which need no window.
    pub(crate) fn ready(&self) -> bool {
        if self.final_head != FinalHead::Sent || !self.send_open {
            return false;
        }
        if self.queued > 0 {
            return self.send_window.available() > 0;
        }
        self.end_queued
    }
}

/// Closed streams whose slots keep their queues' room for the next stream, at most: as many as
/// a busy client keeps open at once (h2load -m 10 and a page's first burst of requests take
/// more than 8). Further closed slots give their queues' room back.
const ROOMY_FREE_SLOTS: usize = 16;

/// The open streams of a connection, by ID.
///
/// Written by hand rather than a `HashMap<u32, Stream>`: such a map moves each stream (256
/// bytes) in when it opens and out when it closes, about 230 instructions a request in
/// callgrind on small responses. Here a stream lives in a slot that stays put; the map holds
/// only its index, and a closed stream's slot, queues and all, becomes the next stream's.
/// Slots are as many as the most streams open at once (bounded by
/// SETTINGS_MAX_CONCURRENT_STREAMS); they go when the connection has none open and shrinks.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    /// Stream ID to slot. Fx-hashed: a lookup per frame and per response, and at most
    /// SETTINGS_MAX_CONCURRENT_STREAMS entries, so a peer choosing colliding IDs gains little.
    index: rustc_hash::FxHashMap<u32, u32>,
    slots: Vec<Stream>,
    /// Slots of closed streams, their queues emptied.
    free: Vec<u32>,
}

impl Streams {
    pub(crate) fn get(&self, id: &u32) -> Option<&Stream> {
        self.index.get(id).map(|&i| &self.slots[i as usize])
    }

    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut Stream> {
        self.index.get(id).map(|&i| &mut self.slots[i as usize])
    }

    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.index.contains_key(id)
    }

    /// Open streams.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The open streams, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Stream)> {
        self.index.iter().map(|(&id, &i)| (id, &self.slots[i as usize]))
    }

    /// A new stream `id` (not open now), made in a free slot (keeping that slot's queues'
    /// room) or a new one.
    pub(crate) fn open(&mut self, id: u32, send_initial: u32, recv_initial: u32, recv_target: u32) -> &mut Stream {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].reset(send_initial, recv_initial, recv_target);
                i
            }
            None => {
                // Slots are as many as the most streams open at once, which a u32 holds.
                let i = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                self.slots.push(Stream::new(send_initial, recv_initial, recv_target));
                i
            }
        };
        self.index.insert(id, i);
        &mut self.slots[i as usize]
    }

    /// Forget stream `id`: its queued heads, body and trailers are dropped, and the rest is
    /// returned for the connection's accounting, valid until the next [`open`](Self::open).
    pub(crate) fn close(&mut self, id: u32) -> Option<&mut Stream> {
        let i = self.index.remove(&id)?;
        let s = &mut self.slots[i as usize];
        if self.free.len() < ROOMY_FREE_SLOTS {
            s.heads.clear();
            s.queue.clear();
        } else {
            s.heads = VecDeque::new();
            s.queue = VecDeque::new();
        }
        s.trailers = None;
        self.free.push(i);
        Some(s)
    }

    /// Forget every stream, returning their IDs; the slots go too.
    pub(crate) fn close_all(&mut self) -> Vec<u32> {
        let ids = self.index.keys().copied().collect();
        *self = Self::default();
        ids
    }

    /// Let go of the slots if no stream is open.
    pub(crate) fn shrink(&mut self) {
        if self.is_empty() {
            *self = Self::default();
        }
    }

    /// Room held: map entries, slots and their queues.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.index.capacity() + self.slots.capacity()
    }

    /// The free slots' queues, for tests.
    #[cfg(test)]
    pub(crate) fn free_queues(&self) -> impl Iterator<Item = (&VecDeque<PendingHead>, &VecDeque<Bytes>)> {
        self.free.iter().map(|&i| (&self.slots[i as usize].heads, &self.slots[i as usize].queue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_is_a_new_stream() {
        let mut streams = Streams::default();
        let s = streams.open(1, 100, 200, 300);
        // Everything a stream's life changes.
        s.recv_open = false;
        s.send_open = false;
        s.push_head(200, HeadFields::default(), false);
        s.final_head = FinalHead::Sent;
        s.queue.push_back(Bytes::from_static(b"body"));
        s.queued = 4;
        s.end_queued = true;
        s.trailers = Some(vec![Field::new("grpc-status", "0")]);
        s.send_window = SendWindow::new(7);
        s.recv = RecvWindow::new(8, 9);
        s.received = 10;
        s.content_length = Some(11);
        s.priority = Priority { urgency: 1, incremental: true };
        s.priority_from_header = true;
        s.scheduled = true;
        s.discard = true;
        s.unreleased = 12;
        s.sent_unreported = 13;
        s.tune = TuneState { received: 14, last_per_rtt: 15, reserved: 16, ..TuneState::default() };
        s.tuning = false;
        s.update_credit = 17;
        s.priority_signalled = true;
        s.unknown_frame_seen = true;
        let closed = streams.close(1).unwrap();
        assert!(closed.heads.is_empty() && closed.queue.is_empty() && closed.trailers.is_none());
        assert!(streams.get(&1).is_none() && streams.is_empty());
        let reused = format!("{:?}", streams.open(3, 100, 200, 300));
        let fresh = Stream::new(100, 200, 300);
        assert_eq!(reused, format!("{fresh:?}"));
        assert_eq!(streams.slots.len(), 1, "the slot was reused");
    }
}
