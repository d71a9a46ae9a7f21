//! The TLS stream's sending side: plaintext sealed into records (by [`Records`](crate::records::Records), or by rustls
//! for TLS 1.2 and before the hand-over) in room kept for one burst of writes, then written.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::unbuffered::{ConnectionState, EncryptError, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::handshake::encode;
use super::{tls_error, Engine, TlsStream};
use crate::records::{self, HEADER as RECORD_HEADER, MAX_FRAGMENT};

/// Plaintext encrypted per write: the rest waits for the next call (the socket takes this much
/// before more is encrypted, so a large write does not turn into one large buffer).
pub(super) const MAX_ENCRYPT: usize = 64 * 1024;
/// Plaintext per record while a connection's first [`EARLY_BYTES`] of application data go out:
/// a record of about one TCP segment (1,400 bytes and 22 of header, content type and tag within an
/// Ethernet path's 1,448-byte MSS). A client opens a record only once all of it is in, and slow
/// start cuts the first flights short: the initial window is ten segments (RFC 6928), so a
/// full-size record that starts a response (16 KiB and its head, as a download's first write
/// is) cannot be whole before the second round trip. Traced at 200 Mbit/s × 40 ms with curl:
/// the first byte of a large response came 166 ms after the start where Caddy's (whose Go TLS
/// starts with records of a segment too) came after 125, one round trip sooner; small
/// responses, one small record either way, were not delayed. Later flights end on cut records
/// as well, but those are at most one of a flight's many, so the early phase covers the first
/// few flights only.
pub(super) const EARLY_FRAGMENT: usize = 1400;
/// Application data a connection sends in records of [`EARLY_FRAGMENT`] before it uses records of
/// the largest size: about the first three flights of slow start from a ten-segment window
/// (14, 29 and 58 kB: 101 kB), as Go's TLS does (128 KiB). The extra records cost about 90 record
/// headers and tags per connection, once.
pub(super) const EARLY_BYTES: usize = 128 * 1024;
/// A rest of at most this much goes with the write before it instead of in one of its own: an
/// HTTP/2 write seldom ends where a multiple of [`MAX_ENCRYPT`] does, and its last few hundred
/// bytes were a record, a system call and a packet of their own (376 of 2,133 writes during
/// a 100 MB download).
pub(super) const SMALL_REST: usize = 16 * 1024;
/// Small slices of a vectored write are gathered up to this many bytes and sent as one record
/// (a response head and a small body in one, as rustls's buffered writer does).
pub(super) const GATHER: usize = 16 * 1024;
/// Room per record beyond its plaintext when encrypting: header, TLS 1.3's content type, and
/// the AEAD tag (TLS 1.2's explicit nonce fits too). A short buffer only costs a retry.
pub(super) const RECORD_OVERHEAD: usize = RECORD_HEADER + 1 + 16 + 8;

/// How much of `total` bytes offered to write one call takes (see [`SMALL_REST`]).
pub(super) fn take_now(total: usize) -> usize {
    if total <= MAX_ENCRYPT + SMALL_REST {
        total
    } else {
        MAX_ENCRYPT
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// The part of `inb` rustls has seen (not the whole records left for the reader): what the
    /// write side shows it when it asks for its state.
    pub(super) fn seen(&self) -> usize {
        if self.ready {
            0
        } else {
            self.inb.len()
        }
    }

    /// Write `out` to the transport until it is empty (its room is kept for the next write,
    /// until a flush).
    pub(super) fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, self.out.pending()))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// After `n` bytes were encrypted into `out`: send now, and report them taken even if the
    /// socket does not take them all (the rest goes ahead of the next write, or the flush).
    pub(super) fn poll_accepted(&mut self, cx: &mut Context<'_>, n: usize) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// Encrypt `data` into `out` (after anything rustls has queued to go first).
    pub(super) fn encrypt(&mut self, data: &[u8]) -> io::Result<()> {
        if matches!(self.engine, Engine::Records(_)) {
            return self.seal_records(&[io::IoSlice::new(data)], data.len());
        }
        let seen = self.seen();
        let mut inb = std::mem::take(&mut self.inb);
        let r = self.encrypt_with(&mut inb[..seen], data);
        self.inb = inb;
        r
    }

    /// Seal the first `total` bytes of `bufs` (at most [`take_now`] takes) into `out` as records
    /// of application data, each filled to [`MAX_FRAGMENT`] across the slices' ends (the last
    /// one takes what is left; [`EARLY_FRAGMENT`] while the connection's first [`EARLY_BYTES`]
    /// go out): an HTTP/2 write of frame headers and the payloads between them goes out in as
    /// few records as one slice of the same bytes would.
    pub(super) fn seal_records(&mut self, bufs: &[io::IoSlice<'_>], total: usize) -> io::Result<()> {
        let Engine::Records(records) = &mut self.engine else {
            return Err(io::Error::other("TLS: records sealed before the hand-over"));
        };
        if let Some(e) = &self.failed {
            return Err(tls_error(e));
        }
        // Nothing follows close_notify (RFC 8446 §6.1).
        if self.closing {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        debug_assert!(total <= MAX_ENCRYPT + SMALL_REST && total <= bufs.iter().map(|b| b.len()).sum::<usize>());
        // Room for every record at once (and key updates'), so `out` grows once.
        let early = total.min(self.early);
        let count = early.div_ceil(EARLY_FRAGMENT) + (total - early).div_ceil(MAX_FRAGMENT);
        let per_record = records::OVERHEAD + records::KEY_UPDATE_RECORD;
        let room = self.out.space(total + count * per_record);
        let mut at = 0;
        let mut sealed = Ok(());
        // Where the next plaintext byte comes from: slice `slice`, offset `off`.
        let (mut slice, mut off) = (0, 0);
        let mut left = total;
        let mut early_left = self.early;
        while left > 0 {
            let len = left.min(if early_left > 0 { EARLY_FRAGMENT.min(early_left) } else { MAX_FRAGMENT });
            early_left = early_left.saturating_sub(len);
            let fill = |dst: &mut [u8]| {
                let mut put = 0;
                while put < dst.len() {
                    let src = &bufs[slice][off..];
                    let n = src.len().min(dst.len() - put);
                    dst[put..put + n].copy_from_slice(&src[..n]);
                    put += n;
                    off += n;
                    if off == bufs[slice].len() {
                        slice += 1;
                        off = 0;
                    }
                }
            };
            let key_update = if records.key_update_due() { records.seal_key_update(&mut room[at..]) } else { Ok(0) };
            match key_update.and_then(|n| Ok(n + records.seal_data_with(len, fill, &mut room[at + n..])?)) {
                Ok(n) => at += n,
                Err(e) => {
                    sealed = Err(e);
                    break;
                }
            }
            left -= len;
        }
        // What was sealed goes out (its sequence numbers are spent); after an error nothing
        // more is.
        self.out.commit(at);
        self.early = early_left;
        if let Err(e) = sealed {
            let err = tls_error(&e);
            self.failed = Some(e);
            return Err(err);
        }
        Ok(())
    }

    pub(super) fn encrypt_with(&mut self, inb: &mut [u8], data: &[u8]) -> io::Result<()> {
        // rustls is asked for its state with the bytes it has not consumed (it may hold
        // handshake records it joins): it consumes none of them here, since the read side
        // processed every complete record already.
        loop {
            if let Some(e) = &self.failed {
                return Err(tls_error(e));
            }
            let Engine::Rustls(conn) = &mut self.engine else {
                return Err(io::Error::other("TLS: the connection was lost while its records were handed over"));
            };
            let UnbufferedStatus { discard, state } = conn.process_tls_records(inb);
            if discard != 0 {
                // The read side processes every complete record before it returns.
                debug_assert!(false, "a complete record left for the write side");
                return Err(io::Error::other("TLS: a received record was left unprocessed"));
            }
            match state {
                Err(e) => {
                    self.failed = Some(e);
                    self.queue_alert(inb);
                }
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    let records = data.len().div_ceil(MAX_FRAGMENT).max(1);
                    let mut room = data.len() + records * RECORD_OVERHEAD;
                    loop {
                        match w.encrypt(data, self.out.space(room)) {
                            Ok(n) => {
                                self.out.commit(n);
                                return Ok(());
                            }
                            Err(EncryptError::InsufficientSize(s)) if s.required_size > room => room = s.required_size,
                            Err(e) => return Err(io::Error::other(e)),
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, &mut self.out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::PeerClosed) => self.peer_closed = true,
                Ok(ConnectionState::ReadTraffic(_)) | Ok(ConnectionState::ReadEarlyData(_)) => {
                    // The read side drains every decrypted record before it returns.
                    debug_assert!(false, "decrypted data left for the write side");
                    return Err(io::Error::other("TLS: decrypted data left unread"));
                }
                Ok(ConnectionState::Closed) => return Err(io::ErrorKind::BrokenPipe.into()),
                Ok(_) => return Err(io::Error::other("TLS: cannot send yet")),
            }
        }
    }

    /// close_notify into `out`, once.
    pub(super) fn queue_close_notify(&mut self) {
        if self.closing || self.failed.is_some() {
            return;
        }
        self.closing = true;
        if let Engine::Records(records) = &mut self.engine {
            if let Ok(n) = records.seal_alert(records::alert::CLOSE_NOTIFY, self.out.space(2 + records::OVERHEAD)) {
                self.out.commit(n);
            }
            return;
        }
        let seen = self.seen();
        let mut inb = std::mem::take(&mut self.inb);
        for _ in 0..8 {
            let Engine::Rustls(conn) = &mut self.engine else { break };
            let UnbufferedStatus { state, .. } = conn.process_tls_records(&mut inb[..seen]);
            match state {
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    let n = w.queue_close_notify(self.out.space(64)).unwrap_or(0);
                    self.out.commit(n);
                    break;
                }
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, &mut self.out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::PeerClosed) => self.peer_closed = true,
                _ => break,
            }
        }
        self.inb = inb;
    }
}

/// Encrypted bytes waiting for the transport (`room[at..len]`), in room that stays between the
/// writes of one burst (a large write is encrypted 64 KiB at a time) and goes at its flush: room
/// must be zeroed before rustls may encrypt into it, and made anew for every 64 KiB that was a
/// `memset` and an allocation each time.
#[derive(Default)]
pub(super) struct OutBuf {
    /// Initialised throughout (its length is the room).
    room: Vec<u8>,
    len: usize,
    at: usize,
}

impl OutBuf {
    /// `n` bytes of room after what is held, to write into (then `commit`).
    pub(super) fn space(&mut self, n: usize) -> &mut [u8] {
        if self.at == self.len {
            self.at = 0;
            self.len = 0;
        }
        if self.room.len() < self.len + n {
            self.room.resize(self.len + n, 0);
        }
        &mut self.room[self.len..self.len + n]
    }

    pub(super) fn commit(&mut self, n: usize) {
        self.len += n;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.at == self.len
    }

    pub(super) fn pending(&self) -> &[u8] {
        &self.room[self.at..self.len]
    }

    pub(super) fn advance(&mut self, n: usize) {
        self.at += n;
    }

    /// Let the room go (nothing may be held).
    pub(super) fn release(&mut self) {
        debug_assert!(self.is_empty());
        *self = Self::default();
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.room.capacity()
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        // What waits goes first, and `out` does not grow while the socket is full.
        std::task::ready!(this.poll_send(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = take_now(data.len());
        this.encrypt(&data[..n])?;
        this.poll_accepted(cx, n)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_send(cx))?;
        if matches!(this.engine, Engine::Records(_)) {
            let taken = take_now(bufs.iter().map(|b| b.len()).sum::<usize>());
            if taken == 0 {
                return Poll::Ready(Ok(0));
            }
            this.seal_records(bufs, taken)?;
            return this.poll_accepted(cx, taken);
        }
        // rustls (TLS 1.2, or before the hand-over) encrypts one slice at a time.
        // Up to MAX_ENCRYPT of the slices, sent together: large slices encrypted as they are,
        // runs of small ones gathered into records of up to GATHER bytes (a response head and
        // a small body in one record, as rustls's buffered writer does), in stack memory that
        // is not zeroed first (`ReadBuf` keeps track of the part written).
        let mut taken = 0;
        let mut room = [std::mem::MaybeUninit::<u8>::uninit(); GATHER];
        let mut gathered = ReadBuf::uninit(&mut room);
        for b in bufs {
            let b = &b[..b.len().min(MAX_ENCRYPT - taken)];
            if b.is_empty() {
                continue;
            }
            if (b.len() >= GATHER || gathered.remaining() < b.len()) && !gathered.filled().is_empty() {
                this.encrypt(gathered.filled())?;
                gathered.clear();
            }
            if b.len() >= GATHER {
                this.encrypt(b)?;
            } else {
                gathered.put_slice(b);
            }
            taken += b.len();
            if taken == MAX_ENCRYPT {
                break;
            }
        }
        if !gathered.filled().is_empty() {
            this.encrypt(gathered.filled())?;
        }
        if taken == 0 {
            return Poll::Ready(Ok(0));
        }
        this.poll_accepted(cx, taken)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_send(cx))?;
        // The end of a burst of writes: a connection that goes idle now holds no room.
        this.out.release();
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.queue_close_notify();
        std::task::ready!(this.poll_send(cx))?;
        this.out.release();
        match std::task::ready!(Pin::new(&mut this.io).poll_shutdown(cx)) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}
