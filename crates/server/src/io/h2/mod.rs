//! The HTTP/2 driver: the only code between the sans-IO engine and the socket.
//!
//! One task per connection owns the engine. Reads feed it; one write is in flight at a time,
//! filled by `poll_transmit` with about what the congestion window can take now (TCP_INFO), so
//! the engine's scheduler decides as late as possible. Requests run through the stream layer
//! shared with HTTP/3 (`io/stream.rs`): handlers talk to this task through commands, and their
//! body chunks need permits that refill only as the engine frames bytes, so the queue between
//! handler and socket is bounded.
//!
//! The parts: [`driver`] (the connection's state and what each wake-up does), [`budget`] (how
//! much a write carries), [`buffers`] (read and write buffers, the receive mark); here, the
//! engine's side of the stream layer, the wait, and the writer task.

mod budget;
mod buffers;
mod driver;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sluice_h2::{Connection, Field, Reason, SendError, Transmit};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::app::respond::ConnInfo;
use crate::io::stream::{Engine, Refused};
use crate::state::State;
use driver::{Driver, Step};

fn refused(e: SendError) -> Refused {
    match e {
        SendError::UnknownStream => Refused::Gone,
        _ => Refused::Invalid,
    }
}

/// HTTP/2 stream ids are 31 bits (RFC 9113 §5.1.1); the stream layer's ids are u64.
fn h2_id(id: u64) -> u32 {
    // Invariant: every id the stream layer holds came from this engine as a u32.
    u32::try_from(id).unwrap_or(u32::MAX)
}

impl Engine for Connection {
    fn send_head(&mut self, id: u64, status: u16, fields: sluice_http::HeadFields, end: bool) -> Result<(), Refused> {
        self.send_response(h2_id(id), status, fields, end).map_err(refused)
    }

    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused> {
        Self::send_data(self, h2_id(id), data, end).map_err(refused)
    }

    fn accepts_data(&self, _id: u64) -> bool {
        // The HTTP/2 engine queues what it is given; the stream layer's room bounds it.
        true
    }

    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused> {
        Self::send_trailers(self, h2_id(id), fields).map_err(refused)
    }

    fn release(&mut self, id: u64, n: usize) {
        Self::release(self, Instant::now(), h2_id(id), n);
    }

    fn fail(&mut self, id: u64) {
        self.reset(h2_id(id), Reason::INTERNAL_ERROR);
    }

    fn priority(&mut self, id: u64, value: &[u8]) {
        self.apply_priority_field(h2_id(id), value);
    }

    fn buffered(&self, id: u64) -> Option<usize> {
        Self::buffered(self, h2_id(id))
    }

    fn recycle_head(&mut self, head: Box<sluice_http::RequestHead>) {
        Self::recycle_head(self, head);
    }

    fn take_closed(&mut self, out: &mut Vec<u64>) -> bool {
        Self::take_closed(self, out)
    }
}

/// Serve one HTTP/2 connection. `prefix` holds bytes already read (h2c sniffing).
pub(crate) fn serve<S>(
    io: S,
    fd: RawFd,
    prefix: Bytes,
    info: ConnInfo,
    state: Arc<State>,
    stop: crate::io::StopRx,
) -> impl std::future::Future<Output = ()> + Send
where
    S: sluice_tls::split::ReadChunks + Send + 'static,
{
    // Split before the future is made, not in it: an `async fn` keeps its arguments for its
    // whole life, and the stream (1,384 bytes over TLS) would stay in every connection's
    // future next to the halves it was moved into.
    // Split here, not with `tokio::io::split`: the read half reads a TLS stream's records
    // without a copy (`ReadChunks`).
    let (rd, wr) = sluice_tls::split::split(io);
    // Shared before the future is made, for the same reason: captured by value, the 184-byte
    // `ConnInfo` kept its slot in the future after it had moved into the `Arc`.
    let info = Arc::new(info);
    async move {
        let drain = state.cfg.timeouts.drain;
        let (wq_tx, wq_rx) = crate::io::mailbox::mailbox::<Transmit>();
        let (done_tx, done_rx) = crate::io::mailbox::mailbox::<std::io::Result<Transmit>>();
        let writer = tokio::spawn(write_loop(wr, wq_rx, done_tx));
        let now_stop = *stop.borrow();
        let mut d = Driver::new(state, info, fd, rd, &prefix, wq_tx, done_rx, now_stop);
        drop(prefix);
        // Made once, not each turn of the loop: set anew only after it fired (a reload, then
        // perhaps the shutdown); its branch is off once the connection drains.
        let mut stop_next = std::pin::pin!(crate::io::next_stop(stop));
        // One timer for every deadline of the loop (see `io::arm`): a timer per deadline made
        // anew each turn was a registration and a removal in tokio's timer wheel, each under
        // its lock, two or three times per turn.
        let mut timer = std::pin::pin!(tokio::time::sleep_until(tokio::time::Instant::now()));
        let mut timer_at: Option<tokio::time::Instant> = None;
        loop {
            // One clock reading per turn, for what the turn decides before it waits (the
            // handlers run in between take microseconds).
            if d.turn(Instant::now()).is_break() {
                break;
            }
            let next = d.before_wait();
            crate::io::arm(timer.as_mut(), &mut timer_at, next);
            // The futures borrow the driver's parts; each branch's handler runs once they are
            // gone, with the whole driver.
            let step = tokio::select! {
                r = std::future::poll_fn(|cx| d.rd.poll_read_chunks(cx, &mut d.chunks, &mut d.rbuf.cur)), if d.reading() => {
                    d.on_read(r);
                    Step::Continue(())
                }
                done = d.done_rx.recv(), if d.spare.is_none() => d.on_write_done(done),
                Some(cmd) = d.cmd_rx.recv() => {
                    d.on_command(cmd);
                    // A handler's answer woke the connection: with a write about to go out, let
                    // the other tasks that are ready run first (handlers woken by the same
                    // readiness, a proxy's upstream answers arriving together), so that their
                    // answers share this write: one TLS record and one system call for many
                    // small responses instead of one each. Idle, this costs one trip through
                    // the scheduler's queue.
                    if d.spare.is_some() {
                        tokio::task::yield_now().await;
                    }
                    d.drain_commands();
                    Step::Continue(())
                }
                () = &mut timer, if timer_at.is_some() => {
                    timer_at = None;
                    d.on_timer()
                }
                (s, rx) = &mut stop_next, if d.drain_deadline.is_none() => {
                    d.on_stop(s);
                    stop_next.set(crate::io::next_stop(rx));
                    Step::Continue(())
                }
                // A handler woken while the handlers ran (one that woke itself) is polled on the
                // next turn, after a trip through the scheduler: not in a loop that never
                // yields, and not ahead of the connection's own input.
                () = tokio::task::yield_now(), if d.streams.has_ready() => Step::Continue(()),
            };
            if step.is_break() {
                break;
            }
        }
        let (rd, stuck, eof) = d.finish();
        close(writer, rd, stuck, eof, drain).await;
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: sluice_tls::split::WriteHalf<W>,
    mut rx: crate::io::mailbox::Receiver<Transmit>,
    done: crate::io::mailbox::Sender<std::io::Result<Transmit>>,
) {
    while let Some(mut buf) = rx.recv().await {
        let r = async {
            // Vectored where the DATA payloads are slices of the handlers' chunks (see
            // `Transmit`); a plain write where all was copied (small responses: a vectored
            // write's list of slices costs more than it saves there).
            match buf.flat() {
                Some(bytes) => wr.write_all(bytes).await?,
                None => wr.write_all_buf(&mut buf.reader()).await?,
            }
            wr.flush().await
        }
        .await;
        // The payloads go back to whoever shares their memory now, not when the buffer is
        // filled again.
        buf.clear();
        let failed = r.is_err();
        if done.send(r.map(|()| buf)).is_err() || failed {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// End the connection. The writer gets at most `drain` to finish what it holds (and shut the
/// write side down, sending FIN); a writer stuck on a full socket is aborted, so a peer that
/// stops reading cannot keep the socket, its descriptor and its connection slot. After a
/// clean finish the read side is drained briefly (`linger`): closing a socket with unread input
/// makes the kernel send RST, which can destroy our last frames (a GOAWAY saying why) before
/// the peer reads them.
async fn close<R: AsyncRead + Unpin>(
    mut writer: tokio::task::JoinHandle<()>,
    mut rd: R,
    stuck: bool,
    eof: bool,
    drain: std::time::Duration,
) {
    if stuck || tokio::time::timeout(drain, &mut writer).await.is_err() {
        writer.abort();
        return;
    }
    if eof {
        return;
    }
    crate::io::linger::drain_input(&mut rd).await;
}
