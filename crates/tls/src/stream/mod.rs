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
//! (`records.rs`) with the traffic keys rustls hands over: sealed straight into the room
//! above, opened in place in the receive buffer, one copy per byte each way (rustls's
//! unbuffered API makes two). TLS 1.2 connections stay with rustls, which copies each record
//! it encrypts once more.
//!
//! Reads are larger than `tokio-rustls`'s too (which reads at most 4 KiB at a time): up to
//! [`read::STACK_READ`] from the stack, [`read::HEAP_READ`] into the heap buffer of a busy
//! connection.
//!
//! The parts: `handshake.rs` (rustls's part: the handshake, TLS 1.2 throughout, the hand-over
//! to [`Records`]), `read.rs` (receiving and opening records, `AsyncRead` and the chunked
//! reads of [`ReadChunks`](crate::split::ReadChunks)), `write.rs` (sealing and sending,
//! `AsyncWrite`).
//!
//! The read side never writes to the socket and the write side never reads from it (the
//! HTTP/2 driver reads and writes one stream from two tasks, and a socket keeps one waker per
//! direction). TLS messages the read side must answer (a TLS 1.3 key update, a session
//! ticket) are queued and go out ahead of the next write.
//!
//! The SNI name: rustls's unbuffered server connection does not say which name the client
//! asked for, so the certificate resolver notes it for the handshake that called it
//! ([`crate::certs::take_hello_sni`]).

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use rustls::server::UnbufferedServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::records::Records;

mod handshake;
mod read;
mod write;

use write::{OutBuf, EARLY_BYTES};

/// A server's TLS connection on `IO`.
pub struct TlsStream<IO> {
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
    /// `sluice_tune::recv_mark`): `busy` stays on through pauses, so reads go straight into `inb`,
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
    /// The handshake resumed a session (a ticket or session id the client offered).
    resumed: bool,
    /// The TLS version and cipher suite agreed, by their IANA names.
    version: Option<&'static str>,
    cipher: Option<&'static str>,
}

/// What protects the records: rustls during the handshake and for TLS 1.2; for TLS 1.3, once
/// the handshake is done, [`Records`] (see `records.rs` for why).
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
    pub async fn accept(io: IO, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
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
            resumed: false,
            version: None,
            cipher: None,
        };
        std::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        if let Engine::Rustls(conn) = &s.engine {
            s.alpn = conn.alpn_protocol().map(Box::from);
            s.resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            s.version = conn.protocol_version().and_then(|v| v.as_str());
            s.cipher = conn.negotiated_cipher_suite().and_then(|c| c.suite().as_str());
        }
        s.take_over()?;
        if s.out.is_empty() {
            s.out.release();
        }
        Ok(s)
    }

    /// The application protocol agreed with ALPN.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
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
    pub fn server_name(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// Whether the handshake resumed an earlier session.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The TLS version agreed (`TLSv1_3`, `TLSv1_2`), for logs.
    pub fn version_name(&self) -> Option<&'static str> {
        self.version
    }

    /// The cipher suite agreed (`TLS13_AES_128_GCM_SHA256`, ...), for logs.
    pub fn cipher_name(&self) -> Option<&'static str> {
        self.cipher
    }
}

/// The end of the stream without close_notify (RFC 8446 §6.1): the data may have been cut short.
fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection without sending TLS close_notify")
}

fn tls_error(e: &rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.clone())
}

#[cfg(test)]
mod tests;
