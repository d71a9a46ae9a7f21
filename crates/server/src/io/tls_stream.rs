//! TLS server connections over rustls's unbuffered API: the stream type every TLS listener's
//! connections are served on (HTTP/1.1 and HTTP/2 alike).
//!
//! Why not `tokio-rustls` (which the upstream client still uses): its stream sits on rustls's
//! buffered connection, whose receive buffer is grown to 4 KiB before every read of the socket
//! and never handed back, so every idle TLS connection held 4 KiB for nothing (about a quarter
//! of what one cost, measured with `scripts/bench-idle.sh` and a heap profile). Here the
//! buffers are this stream's own, and each holds memory only while it holds bytes:
//!
//! - received TLS bytes are read into a buffer on the stack when none are waiting, and
//!   decrypted there; only what a read cut off (part of a record) is kept on the heap, and a
//!   connection whose reads keep filling the buffer keeps its heap buffer between them;
//! - decrypted bytes go straight into the caller's buffer; records it has no room for wait
//!   undecrypted for the next read (only a record larger than all its room is decrypted and
//!   the rest kept);
//! - encrypted bytes to send go into room that is kept from one write to the next and let go
//!   when the writer flushes (the HTTP/2 writer and hyper flush after each burst).
//!
//! Once a TLS 1.3 handshake is done, the records are protected by [`Records`]
//! (`tls_records.rs`) with the traffic keys rustls hands over: sealed straight into the room
//! above, opened in place in the receive buffer, one copy per byte each way (rustls's
//! unbuffered API makes two). TLS 1.2 connections stay with rustls, which copies each record
//! it encrypts once more.
//!
//! Reads are larger than `tokio-rustls`'s too (which reads at most 4 KiB at a time): up to
//! [`STACK_READ`] from the stack, [`HEAP_READ`] into the heap buffer of a busy connection.
//!
//! The read side never writes to the socket and the write side never reads from it (the
//! HTTP/2 driver reads and writes one stream from two tasks, and a socket keeps one waker per
//! direction). TLS messages the read side must answer (a TLS 1.3 key update, a session
//! ticket) are queued and go out ahead of the next write.
//!
//! The SNI name: rustls's unbuffered server connection does not say which name the client
//! asked for, so the certificate resolver notes it for the handshake that called it
//! ([`crate::io::tls::take_hello_sni`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::io::split::ReadChunks;
use crate::io::tls_records::{self, Opened, Records, APPLICATION_DATA, HEADER as RECORD_HEADER, MAX_FRAGMENT};

/// Bytes read at a time into the stack buffer: a whole record of the largest size (16 KiB of
/// plaintext, RFC 8446 §5.1, plus its header, content type and tag; RFC 8446 §5.2 allows up to
/// 256 bytes of expansion) and a little more.
const STACK_READ: usize = 17 * 1024;
/// What a busy connection reads at a time into its heap buffer, after the rest of a record it
/// holds: four whole records of the largest size (64 KiB of plaintext).
const HEAP_READ: usize = 4 * FULL_RECORD;
/// Plaintext encrypted per write: the rest waits for the next call (the socket takes this much
/// before more is encrypted, so a large write does not turn into one large buffer).
const MAX_ENCRYPT: usize = 64 * 1024;
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
const EARLY_FRAGMENT: usize = 1400;
/// Application data a connection sends in records of [`EARLY_FRAGMENT`] before it uses records of
/// the largest size: about the first three flights of slow start from a ten-segment window
/// (14, 29 and 58 kB: 101 kB), as Go's TLS does (128 KiB). The extra records cost about 90 record
/// headers and tags per connection, once.
const EARLY_BYTES: usize = 128 * 1024;
/// A rest of at most this much goes with the write before it instead of in one of its own: an
/// HTTP/2 write seldom ends where a multiple of [`MAX_ENCRYPT`] does, and its last few hundred
/// bytes were a record, a system call and a packet of their own (376 of 2,133 writes during
/// a 100 MB download).
const SMALL_REST: usize = 16 * 1024;

/// How much of `total` bytes offered to write one call takes (see [`SMALL_REST`]).
fn take_now(total: usize) -> usize {
    if total <= MAX_ENCRYPT + SMALL_REST {
        total
    } else {
        MAX_ENCRYPT
    }
}
/// Small slices of a vectored write are gathered up to this many bytes and sent as one record
/// (a response head and a small body in one, as rustls's buffered writer does).
const GATHER: usize = 16 * 1024;
/// Room per record beyond its plaintext when encrypting: header, TLS 1.3's content type, and
/// the AEAD tag (TLS 1.2's explicit nonce fits too). A short buffer only costs a retry.
const RECORD_OVERHEAD: usize = RECORD_HEADER + 1 + 16 + 8;
/// A record of the largest plaintext as TLS 1.3 sends it with AES-GCM or ChaCha20-Poly1305:
/// header, plaintext, content type, 16-byte tag.
const FULL_RECORD: usize = RECORD_HEADER + MAX_FRAGMENT + 1 + 16;
/// Largest record body rustls accepts (TLS 1.2's limit, RFC 5246 §6.2.3: 2^14 + 2048).
const MAX_CIPHERTEXT: usize = MAX_FRAGMENT + 2048;

/// A server's TLS connection on `IO`.
pub(crate) struct TlsStream<IO> {
    io: IO,
    engine: Engine,
    /// The application protocol agreed with ALPN.
    alpn: Option<Box<[u8]>>,
    /// Received TLS bytes not yet consumed (by rustls, or by [`Records`]): part of a record,
    /// handshake records rustls still joins, or (`ready`) whole records the reader had no room
    /// for. Without memory when
    /// there are none (unless `busy`). Consumed bytes are advanced over, not moved: the rest
    /// moves to the front only when the room after it runs short (`BytesMut::reserve`).
    inb: BytesMut,
    /// `inb` starts with whole records, not yet processed, that the last read decrypted no
    /// further because the reader's buffer was full (or that follow the end of a TLS 1.3
    /// handshake): the next read takes them first.
    ready: bool,
    /// rustls went on past the record that completed a TLS 1.3 handshake: it keeps the
    /// connection (see `process`).
    keep_rustls: bool,
    /// Decrypted bytes not yet read (`plain[plain_at..]`).
    plain: Vec<u8>,
    plain_at: usize,
    /// Encrypted bytes not yet written.
    out: OutBuf,
    /// The peer sent close_notify: reads end (cleanly).
    peer_closed: bool,
    /// The transport's read side ended.
    eof: bool,
    /// The last read filled all the room it had: more is probably waiting, so `inb` keeps its
    /// memory between reads.
    busy: bool,
    /// The reader expects a batch at every read (its receive low-water mark is set, see
    /// `io/recv_mark.rs`): `busy` stays on through pauses, so reads go straight into `inb`,
    /// not first into the stack.
    bulk: bool,
    /// Application data still to go in records of [`EARLY_FRAGMENT`] (from [`EARLY_BYTES`]).
    early: usize,
    /// close_notify is queued (or sent).
    closing: bool,
    /// A fatal TLS error: reads and writes fail with it from then on.
    failed: Option<rustls::Error>,
    /// The name the client asked for (SNI), if it did.
    sni: Option<Box<str>>,
}

/// What protects the records: rustls during the handshake and for TLS 1.2; for TLS 1.3, once
/// the handshake is done, [`Records`] (see `tls_records.rs` for why).
enum Engine {
    /// Boxed: a TLS 1.3 connection lets it go after the handshake (it is over 1 KB).
    Rustls(Box<UnbufferedServerConnection>),
    Records(Box<Records>),
    /// Only while rustls hands over.
    Gone,
}

/// What processing received bytes did with the decrypted ones.
enum Sink<'a, 'b> {
    /// Into the caller's buffer first (the rest to `plain`), which held the given number of
    /// bytes when the read began.
    Caller(&'a mut ReadBuf<'b>, usize),
    /// All to `plain` (during the handshake, before anyone reads).
    Keep,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// Run the server side of a TLS handshake on `io` with `config`.
    pub(crate) async fn accept(io: IO, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let conn =
            UnbufferedServerConnection::new(config).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut s = Self {
            io,
            engine: Engine::Rustls(Box::new(conn)),
            alpn: None,
            inb: BytesMut::new(),
            ready: false,
            keep_rustls: false,
            plain: Vec::new(),
            plain_at: 0,
            out: OutBuf::default(),
            peer_closed: false,
            eof: false,
            busy: false,
            bulk: false,
            early: EARLY_BYTES,
            closing: false,
            failed: None,
            sni: None,
        };
        std::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        if let Engine::Rustls(conn) = &s.engine {
            s.alpn = conn.alpn_protocol().map(Box::from);
        }
        s.take_over()?;
        if s.out.is_empty() {
            s.out.release();
        }
        Ok(s)
    }

    /// After a TLS 1.3 handshake, rustls hands the records over to [`Records`]: first it is
    /// driven until it offers to encrypt application data, with what it still has to send
    /// (session tickets) queued in `out`. (Every complete record received was processed by
    /// the handshake.) In any other state it keeps the connection.
    fn take_over(&mut self) -> io::Result<()> {
        let mut writable = false;
        for _ in 0..64 {
            let Engine::Rustls(conn) = &mut self.engine else { return Ok(()) };
            if conn.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3)
                || self.failed.is_some()
                || self.keep_rustls
            {
                return Ok(());
            }
            // No received bytes: those after the record that completed the handshake are not
            // rustls's (see `process`), and it holds no part of a message (a key change must
            // end its record, RFC 8446 §5.1, which rustls checks).
            let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut []);
            let more = match state {
                Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                    encode(&mut enc, &mut self.out);
                    true
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    t.done();
                    true
                }
                Ok(ConnectionState::WriteTraffic(_)) => {
                    writable = true;
                    false
                }
                _ => false,
            };
            if discard != 0 || !more {
                break;
            }
        }
        if !writable || self.peer_closed {
            return Ok(());
        }
        let Engine::Rustls(conn) = std::mem::replace(&mut self.engine, Engine::Gone) else { return Ok(()) };
        let records = Records::new(*conn)
            .map_err(|e| io::Error::other(format!("TLS: the records could not be taken over: {e}")))?;
        self.engine = Engine::Records(Box::new(records));
        Ok(())
    }

    /// The application protocol agreed with ALPN.
    pub(crate) fn alpn_protocol(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// The TLS version agreed.
    #[cfg(test)]
    fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        match &self.engine {
            Engine::Rustls(conn) => conn.protocol_version(),
            Engine::Records(_) => Some(rustls::ProtocolVersion::TLSv1_3),
            Engine::Gone => None,
        }
    }

    /// The server name the client sent (SNI).
    pub(crate) fn server_name(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let sent = self.poll_send(cx)?;
            if let Some(e) = &self.failed {
                return Poll::Ready(Err(tls_error(e)));
            }
            // Done, even if the last messages (session tickets) wait for room: they go out
            // ahead of the first write.
            if !matches!(&self.engine, Engine::Rustls(conn) if conn.is_handshaking()) {
                return Poll::Ready(Ok(()));
            }
            // The peer reads our flight before it sends more.
            std::task::ready!(sent);
            if self.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed during the TLS handshake",
                )));
            }
            std::task::ready!(self.poll_receive(cx, &mut Sink::Keep))?;
        }
    }

    /// Read once from the transport and process what arrived (and what waited). `Pending`
    /// only when the transport has nothing; `Ready(Ok)` after a read that may have given the
    /// sink nothing (part of a record, a handshake message) or ended the transport (`eof`).
    fn poll_receive(&mut self, cx: &mut Context<'_>, sink: &mut Sink<'_, '_>) -> Poll<io::Result<()>> {
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
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
    fn open_chunks(&mut self, chunks: &mut Vec<BytesMut>) -> usize {
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
    fn process_ready(&mut self, sink: &mut Sink<'_, '_>) {
        self.ready = false;
        self.process_held(sink);
    }

    /// Process what `inb` holds; it keeps what is left (and its room, while `busy`).
    fn process_held(&mut self, sink: &mut Sink<'_, '_>) {
        let mut inb = std::mem::take(&mut self.inb);
        let used = self.process(&mut inb, sink);
        inb.advance(used);
        if !inb.is_empty() || self.busy {
            self.inb = inb;
        }
    }

    /// The part of `inb` rustls has seen (not the whole records left for the reader): what the
    /// write side shows it when it asks for its state.
    fn seen(&self) -> usize {
        if self.ready {
            0
        } else {
            self.inb.len()
        }
    }

    /// Hand `incoming` to rustls until it needs more bytes: decrypted bytes to `sink`, TLS
    /// messages to send to `out`, an error to `failed`. Returns how many bytes of `incoming`
    /// it consumed (the rest must be given again, first, next time).
    ///
    /// Once the caller's buffer has been given something, a record of application data it has
    /// no room for is left as it is (`ready`): decrypted now, the part that does not fit would
    /// be copied into `plain` and out again; left, it is decrypted straight into the next
    /// read's buffer, and does not move (`inb` is advanced over what was consumed).
    fn process(&mut self, incoming: &mut [u8], sink: &mut Sink<'_, '_>) -> usize {
        if matches!(self.engine, Engine::Records(_)) {
            return self.open_records(incoming, sink);
        }
        let mut used = 0;
        let handshaking = matches!(&self.engine, Engine::Rustls(conn) if conn.is_handshaking());
        if handshaking {
            crate::io::tls::take_hello_sni();
        }
        while self.failed.is_none() {
            // A record rustls has not seen (it consumes records whole once it has: only
            // handshake messages it is joining stay, and no other record type may come between
            // their pieces, RFC 8446 §5.1).
            if no_room_for_next(sink, &incoming[used..]) {
                self.ready = true;
                break;
            }
            let Engine::Rustls(conn) = &mut self.engine else { break };
            let was_handshaking = conn.is_handshaking();
            let UnbufferedStatus { mut discard, state } = conn.process_tls_records(&mut incoming[used..]);
            let more = match state {
                Err(e) => {
                    self.failed = Some(e);
                    false
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(r) => {
                                discard += r.discard;
                                deliver(r.payload, sink, &mut self.plain);
                            }
                            Err(e) => {
                                self.failed = Some(e);
                                break;
                            }
                        }
                    }
                    true
                }
                Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                    encode(&mut enc, &mut self.out);
                    true
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    // Queued in `out`, in order: sent before anything written later.
                    t.done();
                    true
                }
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    true
                }
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    false
                }
                // Everything complete was consumed: more bytes are needed.
                Ok(ConnectionState::WriteTraffic(_)) | Ok(ConnectionState::BlockedHandshake) => false,
                Ok(ConnectionState::ReadEarlyData(_)) => {
                    // Not offered (`max_early_data_size` is 0), so never accepted.
                    self.failed = Some(rustls::Error::General("early data was not offered".into()));
                    false
                }
                Ok(_) => {
                    self.failed = Some(rustls::Error::General("unexpected TLS connection state".into()));
                    false
                }
            };
            // The handshake just completed. For TLS 1.3 the records from here on are for
            // [`Records`]: rustls gets no more of them (what it did with one would be lost in
            // the hand-over: a KeyUpdate it answers only with its next write, say). The
            // client's Finished is the one protected record of its flight (no client
            // certificate is asked for, no early data accepted), so if the call that completed
            // the handshake consumed another (rustls goes on when it has no session ticket to
            // send), rustls keeps the connection.
            if was_handshaking
                && matches!(&self.engine, Engine::Rustls(c)
                    if !c.is_handshaking() && c.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3))
            {
                self.keep_rustls |= incoming.get(used..used + discard).map_or(0, protected_records) != 1;
                used += discard;
                self.ready = used < incoming.len();
                break;
            }
            used += discard;
            if !more {
                break;
            }
        }
        if handshaking {
            if let Some(sni) = crate::io::tls::take_hello_sni() {
                self.sni = sni;
            }
        }
        if self.failed.is_some() {
            self.queue_alert(&mut incoming[used..]);
        }
        used
    }

    /// [`Self::process`] once [`Records`] protect the records.
    fn open_records(&mut self, incoming: &mut [u8], sink: &mut Sink<'_, '_>) -> usize {
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
    fn fatal(&mut self, fatal: tls_records::Fatal) {
        if let (Some(alert), Engine::Records(records)) = (fatal.alert.filter(|_| !self.closing), &mut self.engine) {
            if let Ok(n) = records.seal_alert(alert, self.out.space(2 + tls_records::OVERHEAD)) {
                self.out.commit(n);
            }
        }
        self.failed = Some(fatal.error);
    }

    /// After a fatal error, the alert rustls queued for the peer, into `out`. `incoming` is
    /// what it has not consumed: rustls may look at it again (handshake messages it holds
    /// are read from it; an empty buffer in its place would not hold them).
    fn queue_alert(&mut self, incoming: &mut [u8]) {
        // Bounded: what rustls queued (a handshake flight and the alert) is a few messages.
        for _ in 0..64 {
            let Engine::Rustls(conn) = &mut self.engine else { return };
            let UnbufferedStatus { state, .. } = conn.process_tls_records(incoming);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, &mut self.out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                _ => break,
            }
        }
    }

    /// Write `out` to the transport until it is empty (its room is kept for the next write,
    /// until a flush).
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
    fn poll_accepted(&mut self, cx: &mut Context<'_>, n: usize) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// Encrypt `data` into `out` (after anything rustls has queued to go first).
    fn encrypt(&mut self, data: &[u8]) -> io::Result<()> {
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
    fn seal_records(&mut self, bufs: &[io::IoSlice<'_>], total: usize) -> io::Result<()> {
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
        let per_record = tls_records::OVERHEAD + tls_records::KEY_UPDATE_RECORD;
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

    fn encrypt_with(&mut self, inb: &mut [u8], data: &[u8]) -> io::Result<()> {
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
    fn queue_close_notify(&mut self) {
        if self.closing || self.failed.is_some() {
            return;
        }
        self.closing = true;
        if let Engine::Records(records) = &mut self.engine {
            if let Ok(n) =
                records.seal_alert(tls_records::alert::CLOSE_NOTIFY, self.out.space(2 + tls_records::OVERHEAD))
            {
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

/// How many more bytes complete the records `held` starts (the next record at the largest size
/// when it ends in part of a header or where a record does: rustls may be joining the records
/// it holds into one handshake message).
fn to_complete(held: &[u8]) -> usize {
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

/// A handshake record (or an alert) into `out`.
fn encode(enc: &mut rustls::unbuffered::EncodeTlsData<'_, rustls::server::ServerConnectionData>, out: &mut OutBuf) {
    let mut room = 1024;
    loop {
        match enc.encode(out.space(room)) {
            Ok(n) => {
                out.commit(n);
                return;
            }
            Err(EncodeError::InsufficientSize(s)) if s.required_size > room => room = s.required_size,
            Err(_) => return,
        }
    }
}

/// Encrypted bytes waiting for the transport (`room[at..len]`), in room that stays between the
/// writes of one burst (a large write is encrypted 64 KiB at a time) and goes at its flush: room
/// must be zeroed before rustls may encrypt into it, and made anew for every 64 KiB that was a
/// `memset` and an allocation each time.
#[derive(Default)]
struct OutBuf {
    /// Initialised throughout (its length is the room).
    room: Vec<u8>,
    len: usize,
    at: usize,
}

impl OutBuf {
    /// `n` bytes of room after what is held, to write into (then `commit`).
    fn space(&mut self, n: usize) -> &mut [u8] {
        if self.at == self.len {
            self.at = 0;
            self.len = 0;
        }
        if self.room.len() < self.len + n {
            self.room.resize(self.len + n, 0);
        }
        &mut self.room[self.len..self.len + n]
    }

    fn commit(&mut self, n: usize) {
        self.len += n;
    }

    fn is_empty(&self) -> bool {
        self.at == self.len
    }

    fn pending(&self) -> &[u8] {
        &self.room[self.at..self.len]
    }

    fn advance(&mut self, n: usize) {
        self.at += n;
    }

    /// Let the room go (nothing may be held).
    fn release(&mut self) {
        debug_assert!(self.is_empty());
        *self = Self::default();
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.room.capacity()
    }
}

/// How many whole records in `b` are protected ones (TLS 1.3: outer type application_data).
fn protected_records(mut b: &[u8]) -> usize {
    let mut n = 0;
    while let (Some(&typ), Some(len)) = (b.first(), b.get(3..5)) {
        let end = RECORD_HEADER + usize::from(u16::from_be_bytes([len[0], len[1]]));
        if b.len() < end {
            break;
        }
        n += usize::from(typ == APPLICATION_DATA);
        b = &b[end..];
    }
    n
}

/// Whether the record `rest` starts with should wait for the next read: the caller was given
/// something already and has no room for it (its length bounds its plaintext).
fn no_room_for_next(sink: &Sink<'_, '_>, rest: &[u8]) -> bool {
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
fn deliver(payload: &[u8], sink: &mut Sink<'_, '_>, plain: &mut Vec<u8>) {
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
fn poll_read_into<IO: AsyncRead + Unpin>(
    io: &mut IO,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    limit: usize,
) -> Poll<io::Result<usize>> {
    debug_assert!(limit > 0 && buf.capacity() - buf.len() >= limit);
    crate::io::split::poll_read_buf(io, cx, &mut buf.limit(limit))
}

/// The end of the stream without close_notify (RFC 8446 §6.1): the data may have been cut short.
fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection without sending TLS close_notify")
}

fn tls_error(e: &rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.clone())
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
            return crate::io::split::poll_read_buf(self, cx, buf);
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

#[cfg(test)]
mod tests;
