//! Per-request-stream state: the receive side's frame FSM (RFC 9114 §4.1) and the send side's
//! bounded queue.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sluice_http::Priority;

use crate::frame::FrameReader;

/// Where the request is in its frame sequence (RFC 9114 §4.1: HEADERS, DATA*, HEADERS?).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the HEADERS frame.
    Head,
    /// The header section waits for QPACK encoder-stream data; later input is held raw.
    HeadBlocked,
    /// The request was delivered; DATA frames or a trailer section may follow.
    Body,
    /// The trailer section waits for QPACK encoder-stream data.
    TrailersBlocked,
    /// Trailers delivered: only unknown frames and the end of the stream may follow.
    Trailers,
}

/// The request (receive) side.
#[derive(Debug)]
pub(crate) struct Recv {
    pub(crate) reader: FrameReader,
    pub(crate) phase: Phase,
    pub(crate) content_length: Option<u64>,
    /// Sum of DATA payload lengths, checked against `content_length` (RFC 9114 §4.1.2).
    pub(crate) received: u64,
    /// The peer's FIN arrived (possibly held behind a blocked section).
    pub(crate) fin: bool,
    /// Nothing more is read: the request is complete, or we stopped reading.
    pub(crate) done: bool,
    /// Input that arrived while the header section was blocked.
    pub(crate) held: Vec<u8>,
    pub(crate) held_fin: bool,
    /// The block the next body pieces are copied into and cut from (see `request_body`).
    pub(crate) block: BytesMut,
}

/// The final response head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FinalHead {
    None,
    /// Encoded, waiting in `Send::heads`.
    Queued,
    Written,
}

/// The response (send) side.
#[derive(Debug)]
pub(crate) struct Send {
    /// Encoded HEADERS frames (interim responses, then the final one) not yet written.
    pub(crate) heads: Vec<u8>,
    /// The stream is in the connection's list of streams with heads to write.
    pub(crate) in_heads: bool,
    pub(crate) final_head: FinalHead,
    /// Body bytes waiting for the scheduler.
    pub(crate) queue: VecDeque<Bytes>,
    pub(crate) queued: usize,
    /// The handler has ended the response (the stream ends after the queue and trailers).
    pub(crate) end_queued: bool,
    /// An encoded trailer HEADERS frame, written after the queue.
    pub(crate) trailers: Option<Vec<u8>>,
    /// FIN written, or the sending part reset: nothing more goes out.
    pub(crate) done: bool,
    /// Body bytes framed since the driver last asked (`drain_sent`).
    pub(crate) sent_unreported: usize,
    /// Payload bytes of the DATA frame whose header was written that are still to be handed
    /// out (a frame that spans several chunks goes out a chunk per write). At most `queued`.
    pub(crate) frame_left: usize,
}

/// One request stream.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) recv: Recv,
    pub(crate) send: Send,
    /// The application knows the stream: `Event::Request` or `Event::HeaderTooLarge` was
    /// emitted, so a later reset is reported to it.
    pub(crate) delivered: bool,
    pub(crate) priority: Priority,
    /// A PRIORITY_UPDATE that arrived before the request was processed; it overrides the
    /// `priority` header once the request is (RFC 9218 §7).
    pub(crate) priority_update: Option<Priority>,
    /// In the scheduler (with `priority`).
    pub(crate) scheduled: bool,
    /// The driver said the QUIC stream cannot take more now (flow control).
    pub(crate) blocked: bool,
    /// When the header section must be complete; `None` once it is (or is not read).
    pub(crate) header_deadline: Option<Instant>,
    /// A PRIORITY_UPDATE named this stream: later ones are glitches.
    pub(crate) priority_signalled: bool,
    /// A frame of unknown or reserved type arrived on this stream: later ones are glitches.
    pub(crate) unknown_frame_seen: bool,
}

impl Stream {
    pub(crate) fn new(priority_update: Option<Priority>) -> Self {
        Self {
            recv: Recv {
                reader: FrameReader::default(),
                phase: Phase::Head,
                content_length: None,
                received: 0,
                fin: false,
                done: false,
                held: Vec::new(),
                held_fin: false,
                block: BytesMut::new(),
            },
            send: Send {
                heads: Vec::new(),
                in_heads: false,
                final_head: FinalHead::None,
                queue: VecDeque::new(),
                queued: 0,
                end_queued: false,
                trailers: None,
                done: false,
                sent_unreported: 0,
                frame_left: 0,
            },
            delivered: false,
            priority: Priority::default(),
            priority_update,
            scheduled: false,
            blocked: false,
            header_deadline: None,
            priority_signalled: priority_update.is_some(),
            unknown_frame_seen: false,
        }
    }

    /// Whether the scheduler should consider the stream: its final head is out and body bytes,
    /// trailers or the end wait, and the driver can take them.
    pub(crate) fn ready(&self) -> bool {
        self.send.final_head == FinalHead::Written
            && !self.send.done
            && !self.blocked
            && (self.send.queued > 0 || self.send.end_queued)
    }
}
