//! The TLS stream's receiving side: reads from the transport into the stack or a heap buffer,
//! records opened in place ([`Records`](crate::records::Records)) or handed to rustls, plaintext into the caller's
//! buffer or, for the HTTP/2 driver, as chunks of the receive buffer ([`ReadChunks`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{tls_error, truncated, Engine, Sink, TlsStream};
use crate::records::{self, Opened, APPLICATION_DATA, HEADER as RECORD_HEADER, MAX_FRAGMENT};
use crate::split::ReadChunks;

/// Bytes read at a time into the stack buffer: a whole record of the largest size (16 KiB of
/// plaintext, RFC 8446 §5.1, plus its header, content type and tag; RFC 8446 §5.2 allows up to
/// 256 bytes of expansion) and a little more.
pub(super) const STACK_READ: usize = 17 * 1024;
/// What a busy connection reads at a time into its heap buffer, after the rest of a record it
/// holds: four whole records of the largest size (64 KiB of plaintext).
pub(super) const HEAP_READ: usize = 4 * FULL_RECORD;
/// A record of the largest plaintext as TLS 1.3 sends it with AES-GCM or ChaCha20-Poly1305:
/// header, plaintext, content type, 16-byte tag.
pub(super) const FULL_RECORD: usize = RECORD_HEADER + MAX_FRAGMENT + 1 + 16;
/// Largest record body rustls accepts (TLS 1.2's limit, RFC 5246 §6.2.3: 2^14 + 2048).
pub(super) const MAX_CIPHERTEXT: usize = MAX_FRAGMENT + 2048;

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// Read once from the transport and process what arrived (and what waited). `Pending`
    /// only when the transport has nothing; `Ready(Ok)` after a read that may have given the
    /// sink nothing (part of a record, a handshake message) or ended the transport (`eof`).
    pub(super) fn poll_receive(&mut self, cx: &mut Context<'_>, sink: &mut Sink<'_, '_>) -> Poll<io::Result<()>> {
        if self.inb.is_empty() && !self.busy {
            // Nothing waits: read into the stack and keep on the heap only what is left over.
            // Not zeroed: a read that finds nothing (most of them, on a connection that waits
            // for its next request) costs no 17 KiB of stores.
            let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); STACK_READ];
            let mut rb = ReadBuf::uninit(&mut stack);
            std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                self.eof = true;
                return Poll::Ready(Ok(()));
            }
            self.busy = n == STACK_READ;
            let read = rb.filled_mut();
            let used = self.process(read, sink);
            let rest = &read[used..];
            if !rest.is_empty() || self.busy {
                // Room for the records it starts, whole, so that the reads that finish them go
                // into this buffer without moving it.
                let more = if self.busy { HEAP_READ } else { 0 };
                self.inb = BytesMut::with_capacity(rest.len() + to_complete(rest) + more);
                self.inb.extend_from_slice(rest);
            }
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(self.poll_fill(cx))?;
        if !self.eof {
            self.process_held(sink);
        }
        Poll::Ready(Ok(()))
    }

    /// Read once from the transport into the heap buffer `inb` (after what it holds); sets
    /// `eof` at the end of the stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A busy connection reads what completes the record it holds and four more of the
        // largest size (records that size, as bulk senders send them, then end where a read
        // does: nothing cut, and the buffer's room is taken back without copying; else the
        // part of a record the last read cut moves to the front). Another connection reads
        // what completes the records it holds.
        let was_busy = self.busy;
        let limit = if was_busy {
            let first = if self.inb.is_empty() { 0 } else { to_complete(&self.inb) };
            first + HEAP_READ
        } else {
            to_complete(&self.inb)
        };
        self.inb.reserve(limit);
        let n = match poll_read_into(&mut self.io, cx, &mut self.inb, limit) {
            Poll::Ready(r) => r?,
            Poll::Pending => {
                // Nothing waits after all: a connection that may now stay idle holds no room
                // (the next read goes to the stack, as after any pause), unless its reader
                // expects a batch at the next wake-up (`bulk`).
                if self.inb.is_empty() && !self.bulk {
                    self.inb = BytesMut::new();
                    self.busy = false;
                }
                return Poll::Pending;
            }
        };
        if n == 0 {
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        self.busy = self.bulk || was_busy && n == limit;
        Poll::Ready(Ok(()))
    }

    /// Open every whole record `inb` starts with, in place, and split each one's plaintext off
    /// into `chunks` (none for a record without any): how many bytes they hold. `inb` keeps
    /// the part of a record that follows.
    pub(super) fn open_chunks(&mut self, chunks: &mut Vec<BytesMut>) -> usize {
        self.ready = false;
        let mut total = 0;
        while self.failed.is_none() && !self.peer_closed {
            let Engine::Records(records) = &mut self.engine else { break };
            let base = self.inb.as_ptr() as usize;
            let (used, plain) = match records.open(&mut self.inb[..]) {
                Ok(None) => break,
                Ok(Some((n, opened))) => match opened {
                    Opened::Data(p) => (n, Some((p.as_ptr() as usize - base, p.len()))),
                    Opened::Closed => {
                        self.peer_closed = true;
                        (n, None)
                    }
                    Opened::Nothing => (n, None),
                },
                Err(fatal) => {
                    self.fatal(fatal);
                    break;
                }
            };
            let mut record = self.inb.split_to(used);
            if let Some((at, len)) = plain.filter(|&(_, len)| len > 0) {
                record.advance(at);
                record.truncate(len);
                total += len;
                chunks.push(record);
            }
        }
        // As `process_held` keeps it: a connection that is not busy holds no room.
        if self.inb.is_empty() && !self.busy {
            self.inb = BytesMut::new();
        }
        total
    }

    /// Process the whole records a full reader left in `inb` (`ready`).
    pub(super) fn process_ready(&mut self, sink: &mut Sink<'_, '_>) {
        self.ready = false;
        self.process_held(sink);
    }

    /// Process what `inb` holds; it keeps what is left (and its room, while `busy`).
    pub(super) fn process_held(&mut self, sink: &mut Sink<'_, '_>) {
        let mut inb = std::mem::take(&mut self.inb);
        let used = self.process(&mut inb, sink);
        inb.advance(used);
        if !inb.is_empty() || self.busy {
            self.inb = inb;
        }
    }

    /// [`Self::process`] once [`Records`](crate::records::Records) protect the records.
    pub(super) fn open_records(&mut self, incoming: &mut [u8], sink: &mut Sink<'_, '_>) -> usize {
        let mut used = 0;
        while self.failed.is_none() && !self.peer_closed {
            if no_room_for_next(sink, &incoming[used..]) {
                self.ready = true;
                break;
            }
            let Engine::Records(records) = &mut self.engine else { break };
            match records.open(&mut incoming[used..]) {
                Ok(None) => break,
                Ok(Some((n, opened))) => {
                    used += n;
                    match opened {
                        Opened::Data(payload) => deliver(payload, sink, &mut self.plain),
                        Opened::Closed => self.peer_closed = true,
                        Opened::Nothing => {}
                    }
                }
                Err(fatal) => self.fatal(fatal),
            }
        }
        used
    }

    /// A fatal error of the record layer: its alert queued for the peer (none after our own
    /// close_notify), and the stream failed.
    pub(super) fn fatal(&mut self, fatal: records::Fatal) {
        if let (Some(alert), Engine::Records(records)) = (fatal.alert.filter(|_| !self.closing), &mut self.engine) {
            if let Ok(n) = records.seal_alert(alert, self.out.space(2 + records::OVERHEAD)) {
                self.out.commit(n);
            }
        }
        self.failed = Some(fatal.error);
    }
}

/// How many more bytes complete the records `held` starts (the next record at the largest size
/// when it ends in part of a header or where a record does: rustls may be joining the records
/// it holds into one handshake message).
pub(super) fn to_complete(held: &[u8]) -> usize {
    let mut at = 0;
    while at + RECORD_HEADER <= held.len() {
        // A longer record is refused by rustls as soon as it reads the header; no room for it.
        let len = usize::from(u16::from_be_bytes([held[at + 3], held[at + 4]])).min(MAX_CIPHERTEXT);
        let end = at + RECORD_HEADER + len;
        if end > held.len() {
            return end - held.len();
        }
        at = end;
    }
    // Part of a header, or none: the next record, whole, at the largest size.
    RECORD_HEADER + MAX_FRAGMENT + 256 - (held.len() - at)
}

/// Whether the record `rest` starts with should wait for the next read: the caller was given
/// something already and has no room for it (its length bounds its plaintext).
pub(super) fn no_room_for_next(sink: &Sink<'_, '_>, rest: &[u8]) -> bool {
    match sink {
        Sink::Caller(dst, before) => {
            dst.filled().len() > *before
                && rest.len() >= RECORD_HEADER
                && rest[0] == APPLICATION_DATA
                && usize::from(u16::from_be_bytes([rest[3], rest[4]])) > dst.remaining()
        }
        Sink::Keep => false,
    }
}

/// Decrypted bytes to the caller, as many as it has room for, the rest to `plain`.
pub(super) fn deliver(payload: &[u8], sink: &mut Sink<'_, '_>, plain: &mut Vec<u8>) {
    let n = match sink {
        Sink::Caller(dst, _) => {
            let n = payload.len().min(dst.remaining());
            dst.put_slice(&payload[..n]);
            n
        }
        Sink::Keep => 0,
    };
    plain.extend_from_slice(&payload[n..]);
}

/// Read from `io` into the room after `buf`'s bytes (not zeroed first), at most `limit` (which
/// must not be 0: a read of 0 bytes is the end of the stream).
pub(super) fn poll_read_into<IO: AsyncRead + Unpin>(
    io: &mut IO,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    limit: usize,
) -> Poll<io::Result<usize>> {
    debug_assert!(limit > 0 && buf.capacity() - buf.len() >= limit);
    crate::split::poll_read_buf(io, cx, &mut buf.limit(limit))
}

/// What the HTTP/2 driver's read half asks of the stream (`io::split`).
impl<IO: AsyncRead + AsyncWrite + Unpin> ReadChunks for TlsStream<IO> {
    /// Whether every read should expect a batch (see `bulk`); off, the room goes at the next
    /// pause, as after any read that did not fill it.
    fn set_bulk(&mut self, on: bool) {
        self.bulk = on;
        self.busy |= on;
    }

    /// Read decrypted bytes without copying them where it can: on a busy TLS 1.3 connection,
    /// each record's plaintext as it lies in the receive buffer, where it was opened, handed
    /// over as a `BytesMut` of its own into `chunks` (sharing the buffer's memory, which the
    /// next read then leaves to them and moves on from). Otherwise (TLS 1.2; the first read
    /// after a pause, which goes to the stack; bytes rustls decrypted during the handshake)
    /// a read into `buf`, as `AsyncRead` does. `Ready(Ok(0))` at the end of the stream.
    ///
    /// Why: the HTTP/2 driver hands DATA payloads to handlers as slices of what it read, so
    /// with chunks a body byte is not copied at all on its way from the socket buffer to the
    /// handler, where a read into `buf` copied every one (see `io::h2`).
    fn poll_read_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut Vec<BytesMut>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        let chunked = matches!(self.engine, Engine::Records(_))
            && self.plain_at == self.plain.len()
            && (self.busy || !self.inb.is_empty());
        if !chunked {
            return crate::split::poll_read_buf(self, cx, buf);
        }
        loop {
            let before = chunks.len();
            let n = self.open_chunks(chunks);
            if chunks.len() > before {
                return Poll::Ready(Ok(n));
            }
            if let Some(e) = &self.failed {
                return Poll::Ready(Err(tls_error(e)));
            }
            if self.peer_closed {
                return Poll::Ready(Ok(0));
            }
            if self.eof {
                return Poll::Ready(Err(truncated()));
            }
            std::task::ready!(self.poll_fill(cx))?;
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.plain_at < this.plain.len() {
                let n = (this.plain.len() - this.plain_at).min(buf.remaining());
                buf.put_slice(&this.plain[this.plain_at..this.plain_at + n]);
                this.plain_at += n;
                if this.plain_at == this.plain.len() {
                    this.plain = Vec::new();
                    this.plain_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = &this.failed {
                return Poll::Ready(Err(tls_error(e)));
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            if this.ready {
                this.process_ready(&mut Sink::Caller(buf, before));
                if buf.filled().len() > before {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Err(truncated()));
            }
            std::task::ready!(this.poll_receive(cx, &mut Sink::Caller(buf, before)))?;
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
        }
    }
}
