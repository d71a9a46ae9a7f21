//! Per-stream state.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::flow::{RecvWindow, SendWindow, TuneState};
use crate::priority::Priority;
use sluice_http::{Field, HeadFields};

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
    /// A stream whose queues are `heads` and `queue` (emptied ones of a closed stream).
    pub(crate) fn with_queues(
        send_initial: u32,
        recv_initial: u32,
        recv_target: u32,
        heads: VecDeque<PendingHead>,
        queue: VecDeque<Bytes>,
    ) -> Self {
        Self {
            recv_open: true,
            send_open: true,
            heads,
            final_head: FinalHead::None,
            queue,
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

    /// Queue a response head; returns whether the stream must join the connection's list of
    /// streams with heads to frame (it had none waiting).
    /// The stream's queues, the rest of it dropped.
    pub(crate) fn into_queues(self) -> (VecDeque<PendingHead>, VecDeque<Bytes>) {
        let Self { heads, queue, .. } = self;
        (heads, queue)
    }

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
