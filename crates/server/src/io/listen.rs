//! Accepting connections: TLS handshake and ALPN, h2c prior-knowledge sniffing, and handing
//! each connection to the HTTP/1.1 or HTTP/2 driver.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::app::respond::ConnInfo;
use crate::io::live::Generation;
use crate::io::progress::WriteProgress;
use crate::message::Proto;
use crate::state::State;
use sluice_tls::certs::{Served, ServedCert};
use sluice_tls::TlsStream;

/// What a TLS listener needs per connection: the TLS configuration, the certificates (for the
/// one SNI picked: 421s and the ORIGIN frame), its port, and the Alt-Svc it advertises. Made
/// anew for each configuration generation.
pub(crate) struct ListenerTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) certs: Arc<Vec<Arc<ServedCert>>>,
    pub(crate) port: u16,
    pub(crate) alt_svc: Option<crate::app::respond::AltSvc>,
}

/// What a TLS listener keeps across generations: its port and the Alt-Svc it advertises.
pub(crate) struct TlsSide {
    pub(crate) port: u16,
    pub(crate) alt_svc: Option<crate::app::respond::AltSvc>,
}

/// First and longest pause after a failed accept.
const ACCEPT_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Accept until `close` (the server stops, or a reload removed the listener); each connection
/// is served by the generation current when it was accepted, to its end, and holds a clone of
/// `alive`.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    self_tls: Option<TlsSide>,
    live: watch::Receiver<Arc<Generation>>,
    mut close: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    let max = live.borrow().state.cfg.limits.max_connections;
    let limit = Arc::new(Semaphore::new(max));
    let mut backoff = std::time::Duration::ZERO;
    // The generation the listener's TLS parts were made for.
    let mut made: Option<(Arc<Generation>, Option<Arc<ListenerTls>>)> = None;
    loop {
        // Take a connection slot before accepting: at the limit, new connections wait in the
        // kernel's backlog instead of being accepted and dropped.
        if limit.available_permits() == 0 {
            crate::message::metrics::limit(crate::message::metrics::Limit::Connections);
        }
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = close.changed() => break,
        };
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => {
                    backoff = std::time::Duration::ZERO;
                    x
                }
                Err(e) => {
                    // Out of descriptors (EMFILE) and the like: back off, doubling up to a
                    // second while it lasts, and say so once per streak.
                    if backoff.is_zero() {
                        tracing::warn!(%e, "accept failed; backing off while it lasts");
                    }
                    backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                    tokio::time::sleep(backoff).await;
                    continue;
                }
            },
            _ = close.changed() => break,
        };
        let g = live.borrow().clone();
        let tls = match &made {
            Some((at, t)) if Arc::ptr_eq(at, &g) => t.clone(),
            _ => {
                let t = self_tls.as_ref().and_then(|side| {
                    Some(Arc::new(ListenerTls {
                        config: g.tls.clone()?,
                        certs: g.certs.clone(),
                        port: side.port,
                        alt_svc: side.alt_svc.clone(),
                    }))
                });
                made = Some((g.clone(), t.clone()));
                t
            }
        };
        // (Invariant: a generation with a TLS listener has TLS; never serve one as cleartext.)
        if tls.is_none() && self_tls.is_some() {
            continue;
        }
        let (state, stop, alive) = (g.state.clone(), g.stop.clone(), alive.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _alive = alive;
            serve_connection(tcp, peer, tls, state, stop).await;
        });
    }
}

/// Whether a connection to a TLS listener opens with plain HTTP: its first byte is an
/// uppercase letter (a method) where a TLS record starts with 0x16 (a handshake). One peek,
/// by `deadline`; a connection that sends nothing is left to the TLS handshake's deadline.
async fn plain_http_on_tls(tcp: &TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut first = [0u8; 1];
    matches!(tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await, Ok(Ok(1)) if first[0].is_ascii_uppercase())
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<ListenerTls>>,
    state: Arc<State>,
    shutdown: crate::io::StopRx,
) {
    let fd = tcp.as_raw_fd();
    let _ = sluice_sys::sock::set_nodelay(fd);
    if let Err(e) = sluice_sys::sock::set_notsent_lowat(fd, state.cfg.tcp.notsent_lowat) {
        tracing::debug!(%e, "TCP_NOTSENT_LOWAT not available");
    }
    if let Some(cc) = &state.congestion {
        if let Err(e) = sluice_sys::sock::set_congestion(fd, cc) {
            tracing::debug!(%e, cc, "TCP_CONGESTION failed");
        }
    }
    let header_timeout = state.cfg.timeouts.header;
    // The peek and the TLS handshake share one deadline: a silent client is closed after the
    // header timeout, not twice it.
    let handshake_deadline = tokio::time::Instant::now() + header_timeout;
    if tls.is_some() && plain_http_on_tls(&tcp, handshake_deadline).await {
        // As nginx does: a clear answer instead of a TLS alert the client cannot read (and
        // rustls is not asked to parse text as records).
        tracing::debug!(%peer, "plain HTTP on a TLS listener: 400");
        let mut tcp = tcp;
        let body = "This port speaks HTTPS: use https:// for this address.\n";
        let resp = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tokio::time::timeout(header_timeout, tcp.write_all(resp.as_bytes())).await;
        crate::io::linger::close(tcp).await;
        return;
    }
    // Every connection's writes must keep up with the minimum rate (a peer that stops reading
    // is cut off, its slot freed): below TLS, so handshakes are covered too.
    let tcp = WriteProgress::new(tcp, state.write_rule());
    // This future lives as long as the connection, at the size of its largest state: what it
    // holds beside the protocol's own future is paid by every idle connection.
    if let Some(t) = tls {
        // In a block of its own: a local that was borrowed keeps its place in the future until
        // its scope ends, and the TLS stream (1,384 bytes) would stay beside the protocol's
        // future that owns it.
        let (stream, info, h2) = {
            let events = crate::message::metrics::events();
            let stream =
                match tokio::time::timeout_at(handshake_deadline, TlsStream::accept(tcp, t.config.clone())).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, %e, "TLS handshake failed");
                        events.tls_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        events.tls_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                };
            if stream.alpn_protocol() == Some(sluice_tls::certs::ACME_TLS_ALPN) {
                // A TLS-ALPN-01 validation: the handshake was all (RFC 8737 §3).
                return;
            }
            let done = if stream.resumed() { &events.tls_resumed } else { &events.tls_ok };
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let served = Served::for_sni_with(&t.certs, &crate::acme::shared().certs, stream.server_name(), t.port);
            let h2 = stream.alpn_protocol() == Some(b"h2");
            let mut info = ConnInfo::new(peer, true, t.alt_svc.as_ref(), served);
            if state.cfg.access_log == crate::config::AccessLogFormat::Json {
                info.tls_info = Some(Arc::new(crate::message::accesslog::TlsInfo {
                    version: stream.version_name(),
                    cipher: stream.cipher_name(),
                    alpn: Some(if h2 { "h2" } else { "http/1.1" }),
                    resumed: Some(stream.resumed()),
                }));
            }
            (stream, info, h2)
        };
        let _open = crate::message::metrics::Connection::open(if h2 { Proto::Http2 } else { Proto::Http1 });
        if h2 {
            crate::io::h2::serve(stream, fd, Bytes::new(), info, state, shutdown).await;
        } else {
            // Boxed: HTTP/1.1's future is the larger one, and inline it would size every
            // connection's future, HTTP/2 ones included.
            Box::pin(crate::io::h1::serve(stream, info, state, shutdown)).await;
        }
        return;
    }
    // Cleartext: HTTP/2 with prior knowledge starts with the preface (RFC 9113 §3.3); anything
    // else must be an HTTP/1.x request line. Read until the two can be told apart.
    let mut tcp = tcp;
    let mut buf = Vec::with_capacity(1024);
    let sniff = async {
        let mut chunk = [0u8; 1024];
        while classify(&buf).is_none() {
            let n = tcp.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, io::Error>(())
    };
    if !matches!(tokio::time::timeout(header_timeout, sniff).await, Ok(Ok(()))) {
        return;
    }
    let prefix = Bytes::from(buf);
    match classify(&prefix) {
        Some(Cleartext::H2) => {
            let info = ConnInfo::new(peer, false, None, None);
            let _open = crate::message::metrics::Connection::open(Proto::Http2);
            crate::io::h2::serve(tcp, fd, prefix, info, state, shutdown).await
        }
        Some(Cleartext::H1) => {
            let info = ConnInfo::new(peer, false, None, None);
            let _open = crate::message::metrics::Connection::open(Proto::Http1);
            Box::pin(crate::io::h1::serve(Rewind { prefix, inner: tcp }, info, state, shutdown)).await
        }
        Some(Cleartext::Neither) | None => {
            tracing::debug!(%peer, "neither an HTTP/2 preface nor an HTTP/1.x request line: closing");
        }
    }
}

/// Longest first line we wait for before letting the HTTP/1.1 parser judge it.
const MAX_SNIFF: usize = 8192;

#[derive(Debug, PartialEq, Eq)]
enum Cleartext {
    H2,
    H1,
    Neither,
}

/// What the first bytes of a cleartext connection are, once that can be known.
fn classify(buf: &[u8]) -> Option<Cleartext> {
    let preface = sluice_h2::frame::PREFACE;
    let n = buf.len().min(preface.len());
    if buf[..n] == preface[..n] {
        return (n == preface.len()).then_some(Cleartext::H2);
    }
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return (buf.len() >= MAX_SNIFF).then_some(Cleartext::H1);
    };
    // RFC 9112 §3: request-line = method SP request-target SP HTTP-version. A line that does
    // not end in an HTTP/1.x version is neither protocol: close instead of answering 400 in a
    // protocol the peer may not speak (as RFC 9113 §3.4 expects for a bad preface).
    let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    Some(if line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0") { Cleartext::H1 } else { Cleartext::Neither })
}

/// A stream that first yields bytes already read.
struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_cleartext_protocols_apart() {
        assert_eq!(classify(b"PRI * HTTP/2.0\r\n"), None, "preface prefix: wait");
        assert_eq!(classify(sluice_h2::frame::PREFACE), Some(Cleartext::H2));
        assert_eq!(classify(b"GET / HT"), None);
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: x\r\n"), Some(Cleartext::H1));
        assert_eq!(classify(b"GET / HTTP/1.0\n"), Some(Cleartext::H1));
        assert_eq!(classify(b"INVALID CONNECTION PREFACE\r\n\r\n"), Some(Cleartext::Neither));
        assert_eq!(classify(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), Some(Cleartext::Neither));
        assert_eq!(classify(&[b'a'; MAX_SNIFF]), Some(Cleartext::H1));
    }
}
