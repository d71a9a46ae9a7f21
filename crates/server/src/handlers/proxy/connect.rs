//! Opening a connection to an upstream server: TCP (no Nagle) or a Unix socket, then TLS when
//! the upstream has it. HTTP/1.1 then runs on our own client ([`super::h1`]); HTTP/2 on one
//! connection per server shared by its requests (`sluice_client::H2Mux`, on the client engine
//! of `sluice_h2`, which reports interim responses).

use std::time::Duration;

use sluice_client::{H2Mux, MuxConfig, MuxError};
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::{ErrorType, ProxyError};
use crate::config::{ServerAddr, Upstream, UpstreamProto};

/// A byte stream to an upstream.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Largest response head (and trailer section) accepted from an upstream (nginx's
/// `proxy_buffer_size` default is 4–8 KiB, Envoy's header limit 60 KiB).
pub(crate) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// One upstream's TLS client configuration (ALPN by protocol).
pub(crate) fn tls_connector(cfg: &Upstream) -> Option<tokio_rustls::TlsConnector> {
    cfg.tls_config.clone().map(tokio_rustls::TlsConnector::from)
}

/// A transport connection to `addr`, within `timeout` (TLS handshake included).
pub(crate) async fn transport(
    cfg: &Upstream,
    tls: Option<&tokio_rustls::TlsConnector>,
    addr: &ServerAddr,
    timeout: Duration,
) -> Result<Box<dyn Io>, ProxyError> {
    let fut = async {
        let io: Box<dyn Io> = match addr {
            ServerAddr::Tcp { host, port } => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(|e| connect_error(&e))?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
            ServerAddr::Unix(path) => {
                Box::new(tokio::net::UnixStream::connect(path).await.map_err(|e| connect_error(&e))?)
            }
        };
        let Some(tls) = tls else { return Ok(io) };
        let name = match (&cfg.tls.as_ref().and_then(|t| t.sni.clone()), addr) {
            (Some(sni), _) => sni.clone(),
            (None, ServerAddr::Tcp { host, .. }) => host.clone(),
            (None, ServerAddr::Unix(_)) => "localhost".to_owned(),
        };
        let name = rustls::pki_types::ServerName::try_from(name)
            .map_err(|_| ProxyError::new(ErrorType::TlsProtocolError, "no valid server name for TLS"))?;
        let s = tls.connect(name, io).await.map_err(|e| {
            let certificate = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<rustls::Error>())
                .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
            ProxyError::new(
                if certificate { ErrorType::TlsCertificateError } else { ErrorType::TlsProtocolError },
                e.to_string(),
            )
        })?;
        if cfg.protocol == UpstreamProto::H2 && s.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(ProxyError::new(ErrorType::TlsProtocolError, "the upstream did not agree to h2 in ALPN"));
        }
        Ok(Box::new(s) as Box<dyn Io>)
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(ProxyError::new(ErrorType::ConnectionTimeout, "connect timed out")),
    }
}

fn connect_error(e: &std::io::Error) -> ProxyError {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
            ProxyError::new(ErrorType::ConnectionRefused, e.to_string())
        }
        _ if e.to_string().contains("lookup") || e.to_string().contains("resolve") => {
            ProxyError::new(ErrorType::DnsError, e.to_string())
        }
        _ => ProxyError::new(ErrorType::DestinationUnavailable, e.to_string()),
    }
}

/// An HTTP/2 connection over `io` (Sluice's own client engine, shared by every request to the
/// server), within `timeout` for the SETTINGS exchange.
pub(crate) async fn h2(io: Box<dyn Io>, timeout: Duration) -> Result<H2Mux, ProxyError> {
    let mut cfg = MuxConfig::default();
    // Responses stream to the client as it takes them; the windows bound what one stream
    // (1 MiB) and the connection (4 MiB) buffer from the upstream meanwhile.
    cfg.engine.max_header_list = MAX_RESPONSE_HEAD as u32;
    H2Mux::handshake(io, cfg, timeout).await.map_err(|e| match e {
        MuxError::Closed(why) if why.starts_with("no HTTP/2 SETTINGS") => {
            ProxyError::new(ErrorType::ConnectionTimeout, "HTTP/2 handshake timed out")
        }
        e => ProxyError::new(ErrorType::HttpProtocolError, e.to_string()),
    })
}
