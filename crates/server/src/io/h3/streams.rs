//! A connection's QUIC streams as the driver holds them: what the reader tasks bring in
//! ([`Input`]), the request-body credit that holds a reader back ([`Credit`]), and each send
//! half with what waits for it ([`Out`]) and the waker quinn calls when it can take more.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use quinn::{RecvStream, SendStream, VarInt};
use tokio::sync::{mpsc, oneshot, Notify};

use super::{BODY_BUFFER, READ_CHUNK};
use crate::io::quic_pace::PaceLink;
use sluice_tune::inflight::URGENT;

/// New streams, and bytes and news from the reader tasks.
pub(super) enum Input {
    Data { id: u64, data: Bytes, fin: bool },
    Reset { id: u64, code: u64 },
    Bi(SendStream, RecvStream),
    Uni(RecvStream),
}

impl Input {
    /// What a read of stream `id` brings the connection task; `None` once the connection is
    /// gone (the connection task sees that itself).
    pub(super) fn read(id: u64, r: Result<Option<quinn::Chunk>, quinn::ReadError>) -> Option<Self> {
        match r {
            Ok(Some(chunk)) => Some(Self::Data { id, data: chunk.bytes, fin: false }),
            Ok(None) => Some(Self::Data { id, data: Bytes::new(), fin: true }),
            Err(quinn::ReadError::Reset(code)) => Some(Self::Reset { id, code: code.into_inner() }),
            Err(_) => None,
        }
    }
}

/// Request body bytes a handler holds and has not consumed; the stream's reader waits while
/// they exceed [`BODY_BUFFER`].
/// The reader also waits while the engine does not want the stream's bytes yet (its header
/// section waits for QPACK encoder-stream data).
#[derive(Default)]
pub(super) struct Credit {
    pub(super) held: AtomicI64,
    pub(super) paused: AtomicBool,
    pub(super) freed: Notify,
}

impl Credit {
    pub(super) async fn wait_room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.held.load(Ordering::Acquire) < BODY_BUFFER && !self.paused.load(Ordering::Acquire) {
                return;
            }
            freed.await;
        }
    }

    pub(super) fn consumed(&self, n: usize) {
        self.held.fetch_sub(n as i64, Ordering::AcqRel);
        self.freed.notify_waiters();
    }

    pub(super) fn set_paused(&self, on: bool) {
        if self.paused.swap(on, Ordering::AcqRel) && !on {
            self.freed.notify_waiters();
        }
    }
}

/// Wakes the connection task with the id of a stream quinn can take more from.
pub(super) struct StreamWake {
    pub(super) id: u64,
    pub(super) woken: Arc<Mutex<Vec<u64>>>,
    pub(super) notify: Arc<Notify>,
}

impl Wake for StreamWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut w) = self.woken.lock() {
            w.push(self.id);
        }
        self.notify.notify_one();
    }
}

/// The send half of a stream and what waits for it.
pub(super) struct Out {
    pub(super) send: SendStream,
    pub(super) queue: VecDeque<Bytes>,
    pub(super) fin: bool,
    /// Reported blocked to the engine.
    pub(super) blocked: bool,
    pub(super) waker: Waker,
    /// The quinn priority set last.
    pub(super) priority: i32,
}

pub(super) enum Flushed {
    /// Everything queued went to quinn.
    Done,
    /// Queue empty and the stream finished: forget it.
    Finished,
    /// quinn takes no more for now; the waker will tell.
    Blocked,
    /// The peer stopped the stream (STOP_SENDING with this code) or it is gone.
    Stopped(Option<u64>),
}

impl Out {
    /// Hand queued bytes to quinn; an urgent stream's (RFC 9218 urgency 0 or 1, and our
    /// control and QPACK streams) also go past the in-flight bound as `pace` allows.
    pub(super) fn flush(&mut self, pace: Option<&PaceLink>) -> Flushed {
        let mut cx = Context::from_waker(&self.waker);
        let pace = pace.filter(|_| self.priority >= quinn_priority(URGENT));
        while !self.queue.is_empty() {
            // The chunks themselves go to quinn (no copy into its buffer): it empties those it
            // took whole and advances the one it took part of.
            let polled = std::pin::pin!(self.send.write_chunks(self.queue.make_contiguous())).poll(&mut cx);
            match polled {
                Poll::Ready(Ok(w)) => {
                    self.queue.drain(..w.chunks);
                    if let Some(p) = pace {
                        p.urgent(w.bytes);
                    }
                    if w.bytes == 0 && !self.queue.is_empty() {
                        // Not expected (quinn reports no room as Pending): look again later
                        // rather than spin, and never finish the stream over unsent bytes.
                        self.waker.wake_by_ref();
                        return Flushed::Blocked;
                    }
                }
                Poll::Ready(Err(quinn::WriteError::Stopped(code))) => return Flushed::Stopped(Some(code.into_inner())),
                Poll::Ready(Err(_)) => return Flushed::Stopped(None),
                Poll::Pending => return Flushed::Blocked,
            }
        }
        if self.fin {
            let _ = self.send.finish();
            return Flushed::Finished;
        }
        Flushed::Done
    }
}

/// quinn sends higher priorities first; RFC 9218 urgency 0 is the most urgent.
pub(super) fn quinn_priority(urgency: u8) -> i32 {
    7 - i32::from(urgency.min(7))
}

/// Poll `f` once, without a waker to call back: for what quinn may already hold.
pub(super) fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
    std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop()))
}

/// Read one stream into the connection task until it ends, is reset, or the task stops it.
pub(super) async fn read_stream(
    id: u64,
    mut rx: RecvStream,
    tx: mpsc::Sender<Input>,
    credit: Option<Arc<Credit>>,
    mut stop: oneshot::Receiver<u64>,
) {
    loop {
        if let Some(c) = &credit {
            tokio::select! {
                () = c.wait_room() => {}
                code = &mut stop => {
                    if let Ok(code) = code {
                        let _ = rx.stop(VarInt::from_u64(code).unwrap_or_default());
                    }
                    return;
                }
            }
        }
        let input = tokio::select! {
            r = rx.read_chunk(READ_CHUNK, true) => match Input::read(id, r) {
                Some(input) => input,
                None => return,
            },
            code = &mut stop => {
                if let Ok(code) = code {
                    let _ = rx.stop(VarInt::from_u64(code).unwrap_or_default());
                }
                return;
            }
        };
        let last = !matches!(input, Input::Data { fin: false, .. });
        if tx.send(input).await.is_err() || last {
            return;
        }
    }
}
