//! Connections for `sluice get` / `sluice put`: URL parsing, name resolution (with curl's
//! `--resolve` overrides), TCP connect, TLS (rustls with the ring provider, ALPN) and the
//! hyper 1 client handshake for HTTP/1.1 or HTTP/2. One URL opens exactly one connection and
//! sends one request on it; several URLs share connections (`pool.rs`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::body::ReqBody;
use super::{code, Failure};

/// HTTP/2 stream receive window: 16 MiB, more than the bandwidth-delay product of 1 Gbit/s at
/// 100 ms (12.5 MB), so the client's flow control never caps a download it measures.
const H2_STREAM_WINDOW: u32 = 16 << 20;
/// HTTP/2 connection receive window (one stream per connection here; twice the stream window).
const H2_CONN_WINDOW: u32 = 32 << 20;

/// Which HTTP version to speak, from `--http1.1` / `--http2` / `--http2-prior-knowledge`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Proto {
    /// No flag: https offers h2 and http/1.1 by ALPN (like curl); http speaks HTTP/1.1.
    Default,
    /// `--http1.1`: HTTP/1.1 only (ALPN offers only http/1.1).
    H1,
    /// `--http2`: like the default over https; over http it would be an h2c upgrade, which this
    /// client does not do (HTTP/1.1 is used, with a warning).
    H2,
    /// `--http2-prior-knowledge`: h2c over http; over https ALPN offers only h2 and HTTP/2 is
    /// spoken whatever the server answers.
    H2Prior,
    /// `--http3`: QUIC with ALPN h3 (https only).
    H3,
}

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL as given (for reports).
    pub(crate) url: String,
    /// `https://`.
    pub(crate) https: bool,
    /// Host to connect to and to name in SNI: no brackets around an IPv6 literal.
    pub(crate) host: String,
    /// Port (80 / 443 when the URL names none).
    pub(crate) port: u16,
    /// `host[:port]` as written in the URL (IPv6 in brackets): the `Host` header / `:authority`.
    pub(crate) authority: Authority,
    /// Path and query (`/` when the URL has none).
    pub(crate) path: String,
}

impl Target {
    /// The request URI for HTTP/1.1 (origin form, the `Host` header names the server) or for
    /// HTTP/2 (absolute, so hyper fills in `:scheme` and `:authority`).
    pub(crate) fn request_uri(&self, h2: bool) -> Result<Uri, Failure> {
        let uri = if h2 {
            let scheme = if self.https { Scheme::HTTPS } else { Scheme::HTTP };
            Uri::builder().scheme(scheme).authority(self.authority.clone()).path_and_query(self.path.as_str()).build()
        } else {
            Uri::builder().path_and_query(self.path.as_str()).build()
        };
        uri.map_err(|e| Failure::new(code::URL, format!("bad URL `{}`: {e}", self.url)))
    }
}

/// Parses an absolute `http://` or `https://` URL; IPv6 literals go in brackets
/// (`http://[::1]:8080/`). User names in URLs and other schemes are refused.
pub(crate) fn parse_url(url: &str) -> Result<Target, Failure> {
    let bad = |why: &str| Failure::new(code::URL, format!("bad URL `{url}`: {why}"));
    let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let https = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("https") => true,
        Some(s) if s.eq_ignore_ascii_case("http") => false,
        Some(s) => return Err(bad(&format!("unsupported scheme `{s}` (http:// or https:// only)"))),
        None => return Err(bad("give an absolute URL starting with http:// or https://")),
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(bad("no host"));
    };
    if authority.as_str().contains('@') {
        return Err(bad("user names in URLs are not supported"));
    }
    let raw_host = authority.host();
    let host = raw_host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(raw_host);
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if raw_host.starts_with('[') && host.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad("not an IPv6 address in brackets"));
    }
    let port = match authority.as_str().strip_prefix(raw_host).and_then(|rest| rest.strip_prefix(':')) {
        None if https => 443,
        None => 80,
        Some(text) => match text.parse::<u16>() {
            Ok(0) | Err(_) => return Err(bad(&format!("bad port `{text}` (1 to 65535)"))),
            Ok(p) => p,
        },
    };
    let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let path = if path.is_empty() { "/".to_owned() } else { path.to_owned() };
    Ok(Target { url: url.to_owned(), https, host: host.to_owned(), port, authority, path })
}

/// The TLS client configuration for `target` (`None` for cleartext): ring provider installed
/// explicitly, ALPN per `proto`, and either any certificate (`--insecure`) or only the CA
/// certificates of `--cacert`. There is no built-in root store.
pub(crate) fn tls_config(
    target: &Target,
    proto: Proto,
    insecure: bool,
    cacert: Option<&Path>,
) -> Result<Option<Arc<rustls::ClientConfig>>, Failure> {
    if !target.https {
        return Ok(None);
    }
    tls_client(&target.url, proto, insecure, cacert).map(Some)
}

/// [`tls_config`] for any https URL; `what` names the URLs in the error without `--cacert`
/// or `--insecure`.
pub(crate) fn tls_client(
    what: &str,
    proto: Proto,
    insecure: bool,
    cacert: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, Failure> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Failure::new(code::TLS, format!("TLS set-up: {e}")))?;
    let mut cfg = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider))).with_no_client_auth()
    } else if let Some(path) = cacert {
        builder.with_root_certificates(read_roots(path)?).with_no_client_auth()
    } else {
        return Err(Failure::new(
            code::CA_CERT,
            format!(
                "{}: no trusted CA certificates: sluice carries no built-in root store; \
                 pass --cacert FILE (PEM) to trust the CA that signed the server's certificate, \
                 or -k/--insecure to skip certificate verification",
                what
            ),
        ));
    };
    cfg.alpn_protocols = match proto {
        Proto::H1 => vec![b"http/1.1".to_vec()],
        Proto::H2Prior => vec![b"h2".to_vec()],
        Proto::H3 => vec![b"h3".to_vec()],
        Proto::Default | Proto::H2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Arc::new(cfg))
}

/// The certificates of a PEM file as the only trust anchors.
fn read_roots(path: &Path) -> Result<rustls::RootCertStore, Failure> {
    let fail = |why: String| Failure::new(code::CA_CERT, format!("CA file `{}`: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".to_owned()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| fail(format!("unusable certificate: {e}")))?;
    }
    Ok(roots)
}

/// `--insecure`: accepts any server certificate (any issuer, name, validity), but still checks
/// the handshake signatures with the provider's algorithms, so the TLS handshake itself is a
/// real one (same cost as with verification, minus the chain check).
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A request sender on an HTTP/1.1 or HTTP/2 connection.
pub(crate) enum Sender {
    H1(http1::SendRequest<ReqBody>),
    H2(http2::SendRequest<ReqBody>),
}

impl Sender {
    /// Sends `req`; resolves when the response head has arrived.
    pub(crate) async fn send(&mut self, req: Request<ReqBody>) -> hyper::Result<Response<Incoming>> {
        match self {
            Self::H1(s) => s.send_request(req).await,
            Self::H2(s) => s.send_request(req).await,
        }
    }
}

/// An established connection, with the times curl reports for it.
pub(crate) struct Connected {
    pub(crate) sender: Sender,
    /// Whether it speaks HTTP/2.
    pub(crate) h2: bool,
    /// When the clock started: after name resolution, just before the TCP connect.
    pub(crate) start: Instant,
    /// `time_connect`: start → TCP connection established.
    pub(crate) connect: Duration,
    /// `time_appconnect`: start → TLS handshake done (`None` for cleartext).
    pub(crate) appconnect: Option<Duration>,
}

/// `--resolve HOST:PORT:ADDR` (curl's syntax): connect to ADDR for HOST:PORT, without asking
/// the system resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Override {
    host: String,
    port: u16,
    addr: std::net::IpAddr,
}

impl Override {
    pub(crate) fn parse(text: &str) -> Result<Self, Failure> {
        let bad = |why: &str| Failure::new(code::USAGE, format!("--resolve `{text}`: {why} (expected HOST:PORT:ADDR)"));
        let (host, rest) = text.split_once(':').ok_or_else(|| bad("no port"))?;
        let (port, addr) = rest.split_once(':').ok_or_else(|| bad("no address"))?;
        let port = port.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("bad port"))?;
        let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
        let addr = addr.parse().map_err(|_| bad("bad address"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Self { host: host.to_ascii_lowercase(), port, addr })
    }
}

/// The addresses for `target`: from `overrides` when one names its host and port, else from
/// the system resolver, bounded by `timeout`.
pub(crate) async fn resolve(
    target: &Target,
    overrides: &[Override],
    timeout: Duration,
) -> Result<Vec<SocketAddr>, Failure> {
    let host = target.host.to_ascii_lowercase();
    let pinned: Vec<SocketAddr> = overrides
        .iter()
        .filter(|o| o.host == host && o.port == target.port)
        .map(|o| SocketAddr::new(o.addr, target.port))
        .collect();
    if !pinned.is_empty() {
        return Ok(pinned);
    }
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(timeout, tokio::net::lookup_host((target.host.as_str(), target.port))).await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                return Err(Failure::new(code::RESOLVE, format!("cannot resolve host `{}`: {e}", target.host)))
            }
            Err(_) => return Err(Failure::new(code::TIMEOUT, format!("resolving `{}` timed out", target.host))),
        };
    if addrs.is_empty() {
        return Err(Failure::new(code::RESOLVE, format!("host `{}` has no addresses", target.host)));
    }
    Ok(addrs)
}

/// A TCP connection, with TLS when the URL is https.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// A transport connection and the times curl reports for it.
pub(crate) struct Opened {
    pub(crate) stream: Stream,
    /// The address connected to.
    pub(crate) peer: SocketAddr,
    /// When the clock started: after name resolution, just before the TCP connect.
    pub(crate) start: Instant,
    /// `time_connect`: start → TCP connection established.
    pub(crate) connect: Duration,
    /// `time_appconnect`: start → TLS handshake done (`None` for cleartext).
    pub(crate) appconnect: Option<Duration>,
}

impl Opened {
    /// Whether TLS negotiated h2 by ALPN.
    pub(crate) fn alpn_h2(&self) -> bool {
        matches!(&self.stream, Stream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2"))
    }
}

/// Connects to `addrs` (each in turn) and does TLS when `tls` is given. `timeout` bounds the
/// connect and the TLS handshake, as curl's `--connect-timeout` does.
pub(crate) async fn open(
    target: &Target,
    addrs: &[SocketAddr],
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<Opened, Failure> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start) + timeout;
    let tcp = tcp_connect(addrs, deadline, timeout).await?;
    let connect = start.elapsed();
    let peer = tcp.peer_addr().map_err(|e| Failure::new(code::CONNECT, format!("connection lost at once: {e}")))?;
    // Like curl: requests go out at once, not held back by Nagle's algorithm.
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Opened { stream: Stream::Plain(tcp), peer, start, connect, appconnect: None });
    };
    let name = ServerName::try_from(target.host.clone())
        .map_err(|e| Failure::new(code::URL, format!("`{}` cannot be a TLS server name: {e}", target.host)))?;
    let stream = match tokio::time::timeout_at(deadline, tokio_rustls::TlsConnector::from(tls).connect(name, tcp)).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(tls_failure(target, &e)),
        Err(_) => {
            return Err(Failure::new(
                code::TIMEOUT,
                format!("TLS handshake with {}:{} timed out after {timeout:?}", target.host, target.port),
            ))
        }
    };
    let appconnect = Some(start.elapsed());
    Ok(Opened { stream: Stream::Tls(Box::new(stream)), peer, start, connect, appconnect })
}

/// Connects to `addrs` as [`open`] does, and does the HTTP handshake (hyper).
pub(crate) async fn connect(
    target: &Target,
    addrs: &[SocketAddr],
    proto: Proto,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<Connected, Failure> {
    let opened = open(target, addrs, tls, timeout).await?;
    // Over TLS, h2 when ALPN picked it; --http2-prior-knowledge speaks it regardless.
    let h2 = opened.alpn_h2() || proto == Proto::H2Prior;
    let Opened { stream, start, connect, appconnect, .. } = opened;
    let sender = match stream {
        Stream::Plain(s) => handshake(s, h2).await?,
        Stream::Tls(s) => handshake(s, h2).await?,
    };
    Ok(Connected { sender, h2, start, connect, appconnect })
}

/// Connects to the first address that accepts, before `deadline`.
async fn tcp_connect(
    addrs: &[SocketAddr],
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<TcpStream, Failure> {
    let mut errors = Vec::new();
    for addr in addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => errors.push(format!("{addr}: {}", describe_connect_error(&e))),
            Err(_) => {
                return Err(Failure::new(code::TIMEOUT, format!("connecting to {addr} timed out after {timeout:?}")))
            }
        }
    }
    Err(Failure::new(code::CONNECT, format!("cannot connect to {}", errors.join("; "))))
}

fn describe_connect_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused (is anything listening there?)".to_owned(),
        _ => e.to_string(),
    }
}

/// A failed TLS handshake: a rejected certificate gets curl's 60 and a hint, anything else 35.
fn tls_failure(target: &Target, e: &std::io::Error) -> Failure {
    let peer = format!("{}:{}", target.host, target.port);
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(why)) => Failure::new(
            code::PEER_VERIFY,
            format!(
                "TLS: the certificate of {peer} was not accepted ({why:?}); \
                 use --cacert FILE to trust its CA, or -k/--insecure to skip verification"
            ),
        ),
        Some(other) => Failure::new(code::TLS, format!("TLS handshake with {peer} failed: {other}")),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => Failure::new(
            code::TLS,
            format!("TLS handshake with {peer} failed: the server closed the connection (is it a TLS port?)"),
        ),
        None => Failure::new(code::TLS, format!("TLS handshake with {peer} failed: {e}")),
    }
}

/// The hyper client handshake; the connection is driven by a task of its own.
pub(crate) async fn handshake<T>(io: T, h2: bool) -> Result<Sender, Failure>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let fail = |e: hyper::Error| {
        let version = if h2 { "HTTP/2" } else { "HTTP/1.1" };
        Failure::new(code::SEND, format!("{version} handshake failed: {}", super::chain(&e)))
    };
    if h2 {
        let mut builder = http2::Builder::new(TokioExecutor::new());
        builder.initial_stream_window_size(H2_STREAM_WINDOW).initial_connection_window_size(H2_CONN_WINDOW);
        let (sender, conn) = builder.handshake(io).await.map_err(fail)?;
        // Errors surface through the request and the response body as well.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = http1::Builder::new().handshake(io).await.map_err(fail)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Sender::H1(sender))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = parse_url("https://example.com/a/b?c=d").expect("valid");
        assert!(t.https);
        assert_eq!(
            (t.host.as_str(), t.port, t.authority.as_str(), t.path.as_str()),
            ("example.com", 443, "example.com", "/a/b?c=d")
        );
        let t = parse_url("http://127.0.0.1:8080").expect("valid");
        assert!(!t.https);
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("127.0.0.1", 8080, "/"));
        let t = parse_url("HTTP://localhost/x").expect("valid");
        assert_eq!((t.port, t.path.as_str()), (80, "/x"));
    }

    #[test]
    fn parses_ipv6_literals() {
        let t = parse_url("https://[::1]:8443/__down?bytes=1").expect("valid");
        assert_eq!(t.host, "::1");
        assert_eq!(t.port, 8443);
        assert_eq!(t.authority.as_str(), "[::1]:8443");
        assert_eq!(t.request_uri(true).expect("uri").to_string(), "https://[::1]:8443/__down?bytes=1");
        assert_eq!(t.request_uri(false).expect("uri").to_string(), "/__down?bytes=1");
        let t = parse_url("http://[fe80::1]/").expect("valid");
        assert_eq!((t.host.as_str(), t.port), ("fe80::1", 80));
    }

    #[test]
    fn refuses_bad_urls() {
        for url in [
            "",
            "example.com/x",
            "ftp://example.com/",
            "http://",
            "http://user@host/",
            "http://host:99999/",
            "http://host:0/",
            "http://[zz]/",
            "http://a b/",
            "http://host:/",
        ] {
            let e = parse_url(url).expect_err(url);
            assert_eq!(e.code, code::URL, "{url}: {}", e.msg);
            assert!(e.msg.contains("bad URL"), "{url}: {}", e.msg);
        }
    }

    #[test]
    fn resolve_overrides_parse_as_curl_writes_them() {
        let o = Override::parse("A.test:8443:127.0.0.2").expect("valid");
        assert_eq!((o.host.as_str(), o.port, o.addr.to_string().as_str()), ("a.test", 8443, "127.0.0.2"));
        let o = Override::parse("b.test:443:[::1]").expect("valid");
        assert_eq!(o.addr.to_string(), "::1");
        for bad in
            ["a.test", "a.test:443", "a.test:0:127.0.0.1", "a.test:x:127.0.0.1", ":443:127.0.0.1", "a.test:443:nowhere"]
        {
            assert_eq!(Override::parse(bad).expect_err(bad).code, code::USAGE, "{bad}");
        }
    }

    #[tokio::test]
    async fn overrides_answer_for_their_host_and_port_only() {
        let o = [Override::parse("a.test:8443:127.0.0.2").expect("valid")];
        let t = parse_url("https://A.TEST:8443/").expect("valid");
        let got = resolve(&t, &o, Duration::from_secs(5)).await.expect("pinned");
        assert_eq!(got, ["127.0.0.2:8443".parse::<SocketAddr>().expect("addr")]);
        // Another port is not pinned: the resolver answers (localhost is in /etc/hosts).
        let t = parse_url("https://localhost:9/").expect("valid");
        let got = resolve(&t, &o, Duration::from_secs(5)).await.expect("resolved");
        assert!(got.iter().all(|a| a.ip().is_loopback() && a.port() == 9), "{got:?}");
    }

    #[test]
    fn https_needs_a_trust_decision() {
        let t = parse_url("https://127.0.0.1/").expect("valid");
        let e = tls_config(&t, Proto::Default, false, None).expect_err("no CA");
        assert_eq!(e.code, code::CA_CERT);
        assert!(e.msg.contains("--cacert") && e.msg.contains("-k"), "{}", e.msg);
        let cfg = tls_config(&t, Proto::Default, true, None).expect("insecure").expect("tls");
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        let cfg = tls_config(&t, Proto::H1, true, None).expect("insecure").expect("tls");
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let plain = parse_url("http://127.0.0.1/").expect("valid");
        assert!(tls_config(&plain, Proto::Default, false, None).expect("cleartext").is_none());
        let e = tls_config(&t, Proto::Default, false, Some(Path::new("/nonexistent/ca.pem"))).expect_err("no file");
        assert_eq!(e.code, code::CA_CERT);
    }
}
