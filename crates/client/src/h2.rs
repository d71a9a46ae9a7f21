//! HTTP/2 over TLS on Sluice's own client engine (`sluice_h2::client`): for `sluice get` with
//! several URLs, where unlike hyper's it reports the server's ORIGIN frames (RFC 8336), which
//! decide what the connection may be reused for (`pool.rs`); and, public as [`H2Conn`], for
//! callers that drive requests and read the engine's events themselves (the lab's `priority`
//! experiment).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_h2::client::{Client, ClientConfig, ClientEvent, Request, RequestError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::conn::{self, Proto, Stream};
use super::{code, Failure};

/// Largest read from the socket at once.
const READ_BUF: usize = 64 * 1024;

/// What a response brought.
pub(crate) struct Fetched {
    pub(crate) status: u16,
    /// Body bytes.
    pub(crate) bytes: u64,
    /// When the response head arrived.
    pub(crate) head_at: Instant,
}

/// How an [`H2Connector`] reaches servers and what its connections' engines announce.
#[derive(Clone, Debug)]
pub struct H2Setup {
    /// Bound on name resolution, on the TCP connect and on the TLS handshake (each).
    pub connect_timeout: Duration,
    /// Accept any server certificate, as `--insecure` (the handshake signatures are still
    /// checked).
    pub insecure: bool,
    /// Trust only the CA certificates of this PEM file, as `--cacert`; needed unless
    /// `insecure`.
    pub cacert: Option<PathBuf>,
    /// The engine's windows and limits.
    pub engine: ClientConfig,
}

/// Opens [`H2Conn`]s. Its connections share one TLS configuration and so its session cache:
/// a later connection to a server resumes the TLS session of an earlier one, as the
/// connections of `sluice get` with several URLs do.
pub struct H2Connector {
    tls: Arc<rustls::ClientConfig>,
    setup: H2Setup,
}

impl H2Connector {
    /// The TLS configuration for `setup`: ALPN offers h2 only; any certificate with
    /// `insecure`, else only the CAs of `cacert` (there is no built-in root store).
    pub fn new(setup: H2Setup) -> Result<Self, Failure> {
        let tls = conn::tls_client("HTTP/2 connections", Proto::H2Prior, setup.insecure, setup.cacert.as_deref())?;
        Ok(Self { tls, setup })
    }

    /// TCP and TLS to `url`'s host and port (an `https://` URL; its path is not used); a
    /// server that does not pick h2 by ALPN is an error. The engine's preface and SETTINGS
    /// are queued, not sent: requests queued before the first flush go out in the same write.
    pub async fn connect(&self, url: &str) -> Result<H2Conn, Failure> {
        let target = conn::parse_url(url)?;
        if !target.https {
            return Err(Failure::new(code::URL, format!("`{url}`: HTTP/2 over TLS needs an https:// URL")));
        }
        let timeout = self.setup.connect_timeout;
        let addrs = conn::resolve(&target, &[], timeout).await?;
        let opened = conn::open(&target, &addrs, Some(self.tls.clone()), timeout).await?;
        if !opened.alpn_h2() {
            return Err(Failure::new(
                code::TLS,
                format!("{}:{} did not negotiate h2 with ALPN", target.host, target.port),
            ));
        }
        match opened.stream {
            Stream::Tls(io) => Ok(H2Conn::new(io, self.setup.engine)),
            Stream::Plain(_) => Err(Failure::new(code::TLS, "an https URL without TLS".to_owned())),
        }
    }
}

/// One HTTP/2 connection over TLS, driving a [`Client`] engine: requests are queued with
/// [`H2Conn::request`], bytes go out with [`H2Conn::flush`] (or [`H2Conn::take_transmit`] and
/// [`H2Conn::write`]), and [`H2Conn::next_event`] reads until the engine has something to
/// report. Nothing here has a timeout of its own: callers bound what they await.
pub struct H2Conn {
    io: Box<TlsStream<TcpStream>>,
    engine: Client,
    buf: Vec<u8>,
    /// The ORIGIN frames' entries so far, in order (RFC 8336 §2.3: each adds to the set).
    origins: Vec<String>,
    /// An ORIGIN frame arrived (the Origin Set is initialised).
    origin_seen: bool,
    /// The connection is gone (EOF, error, or GOAWAY).
    broken: bool,
}

impl H2Conn {
    /// A connection on `io` (TLS done, h2 negotiated); nothing is sent yet.
    fn new(io: Box<TlsStream<TcpStream>>, cfg: ClientConfig) -> Self {
        Self {
            io,
            engine: Client::new(cfg, Instant::now()),
            buf: vec![0; READ_BUF],
            origins: Vec::new(),
            origin_seen: false,
            broken: false,
        }
    }

    /// The preface and SETTINGS exchange, bounded by `timeout`; ORIGIN frames sent with the
    /// server's SETTINGS are read with them.
    pub(crate) async fn handshake(io: Box<TlsStream<TcpStream>>, timeout: Duration) -> Result<Self, Failure> {
        let mut c = Self::new(io, ClientConfig::default());
        match tokio::time::timeout(timeout, c.read_until(|c| c.engine.is_ready())).await {
            Ok(r) => r.map(|()| c),
            Err(_) => {
                Err(Failure::new(code::TIMEOUT, format!("no HTTP/2 SETTINGS from the server within {timeout:?}")))
            }
        }
    }

    /// Reads until the SETTINGS exchange is complete both ways: the server's SETTINGS arrived
    /// and it acknowledged ours (RFC 9113 §6.5.3). Events on the way are dropped (ORIGIN
    /// entries are kept); a GOAWAY ends the wait and shows in the next [`H2Conn::request`].
    pub async fn exchange_settings(&mut self) -> Result<(), Failure> {
        self.read_until(|c| c.engine.is_ready() && (c.settings_acknowledged() || !c.engine.accepts_requests())).await
    }

    /// Whether the server acknowledged our SETTINGS. The engine has no accessor for it: its
    /// one timer is the SETTINGS-acknowledgement deadline, cleared by the ACK (and by a
    /// connection error, which [`H2Conn::read_some`] returns first), so no deadline means the
    /// ACK came.
    fn settings_acknowledged(&self) -> bool {
        self.engine.poll_timeout().is_none()
    }

    /// Flushes, then reads and hands every event to nothing (ORIGIN entries are kept) until
    /// `done`; then flushes what the events queued (acknowledgements).
    async fn read_until(&mut self, done: impl Fn(&Self) -> bool) -> Result<(), Failure> {
        while !done(self) {
            self.flush().await?;
            self.read_some().await?;
            self.note_events(|_| {});
        }
        self.flush().await
    }

    /// The ORIGIN entries received so far, or `None` before any ORIGIN frame.
    pub(crate) fn origins(&self) -> Option<&[String]> {
        self.origin_seen.then_some(&self.origins[..])
    }

    /// Whether a new request may go out on it.
    pub(crate) fn usable(&self) -> bool {
        !self.broken && self.engine.accepts_requests()
    }

    /// Queues a request without a body; returns its stream id. It goes out with the next
    /// flush (or [`H2Conn::take_transmit`]).
    pub fn request(&mut self, req: &Request<'_>) -> Result<u32, Failure> {
        self.engine.request(req).map_err(|e| {
            let why = match e {
                RequestError::Closed => "the connection is closed",
                RequestError::GoingAway => "the server sent GOAWAY",
                RequestError::TooManyStreams => "the server's stream limit is reached",
                RequestError::StreamIdsExhausted => "stream ids are used up",
            };
            Failure::new(code::SEND, format!("cannot send the request: {why}"))
        })
    }

    /// Sends a GET (no body) and reads the whole response, counting its body bytes into
    /// `on_data`; frames for other streams are processed on the way.
    pub(crate) async fn get(
        &mut self,
        authority: &str,
        path: &str,
        fields: &[(&str, &str)],
        mut on_data: impl FnMut(&Bytes),
    ) -> Result<Fetched, Failure> {
        let stream = self.request(&Request { method: "GET", scheme: "https", authority, path, fields })?;
        let mut status = None;
        let mut bytes = 0u64;
        let mut head_at = None;
        loop {
            let done = match self.next_event().await? {
                ClientEvent::Response { stream: s, status: st, end_stream, .. } if s == stream => {
                    status = Some(st);
                    head_at = Some(Instant::now());
                    end_stream
                }
                ClientEvent::Data { stream: s, data, end_stream } if s == stream => {
                    bytes += data.len() as u64;
                    on_data(&data);
                    end_stream
                }
                ClientEvent::Trailers { stream: s, .. } if s == stream => true,
                ClientEvent::Reset { stream: s, error } if s == stream => {
                    return Err(Failure::new(code::RECV, format!("the response broke off: {error}")));
                }
                _ => false,
            };
            if done {
                break;
            }
        }
        // What else the last read brought: ORIGIN frames are kept, other streams' events
        // dropped; then the acknowledgements it queued go out.
        self.note_events(|_| {});
        self.flush().await?;
        match (status, head_at) {
            (Some(status), Some(head_at)) => Ok(Fetched { status, bytes, head_at }),
            // The engine reports a response's end only after its head; kept as an error all
            // the same.
            _ => Err(Failure::new(code::RECV, "the response ended without a head".to_owned())),
        }
    }

    /// The next event: flushes what is queued, then reads until the engine reports something.
    /// ORIGIN entries are also kept for the connection.
    pub async fn next_event(&mut self) -> Result<ClientEvent, Failure> {
        loop {
            self.flush().await?;
            if let Some(e) = self.poll_event() {
                return Ok(e);
            }
            self.read_some().await?;
        }
    }

    /// The engine's next event, keeping ORIGIN entries.
    fn poll_event(&mut self) -> Option<ClientEvent> {
        let e = self.engine.poll_event()?;
        if let ClientEvent::Origin(list) = &e {
            self.origin_seen = true;
            self.origins.extend(list.iter().cloned());
        }
        Some(e)
    }

    /// Hands every pending event to `f`, keeping the ORIGIN entries.
    fn note_events(&mut self, mut f: impl FnMut(ClientEvent)) {
        while let Some(e) = self.poll_event() {
            f(e);
        }
    }

    /// Everything the engine has to send, taken out of it, for a caller that adds to the bytes
    /// before it [`H2Conn::write`]s them.
    pub fn take_transmit(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(bytes) = self.engine.poll_transmit() {
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Writes `bytes` to the server.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        if let Err(e) = self.io.write_all(bytes).await {
            self.broken = true;
            return Err(Failure::new(code::SEND, format!("writing to the server failed: {e}")));
        }
        Ok(())
    }

    /// Writes everything the engine has to send.
    pub async fn flush(&mut self) -> Result<(), Failure> {
        while let Some(out) = self.engine.poll_transmit() {
            self.write(&out).await?;
        }
        Ok(())
    }

    async fn read_some(&mut self) -> Result<(), Failure> {
        let n = match self.io.read(&mut self.buf).await {
            Ok(0) => {
                self.broken = true;
                return Err(Failure::new(code::RECV, "the server closed the connection".to_owned()));
            }
            Ok(n) => n,
            Err(e) => {
                self.broken = true;
                return Err(Failure::new(code::RECV, format!("reading from the server failed: {e}")));
            }
        };
        // The engine's timers (an unacknowledged SETTINGS) are checked as input arrives; the
        // caller's own time limit bounds a server that sends nothing at all.
        let now = Instant::now();
        if let Err(e) = self.engine.handle_input(now, &self.buf[..n]).and_then(|()| self.engine.handle_timeout(now)) {
            self.broken = true;
            // Tell the server why (the GOAWAY the engine queued), as far as it goes.
            let _ = self.flush().await;
            return Err(Failure::new(code::RECV, format!("the server broke HTTP/2: {e}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_h2::{Config, Connection, Event};
    use sluice_tune::window::FixedWindows;
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;

    const BODY: &[u8] = b"styles for the test\n";

    /// A TLS listener on loopback with a fresh self-signed certificate, offering `alpn`.
    async fn listen(alpn: &[&[u8]]) -> (TcpListener, TlsAcceptor) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)
            .expect("the key matches the certificate");
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        (listener, TlsAcceptor::from(Arc::new(cfg)))
    }

    /// Serves connections with the server engine: every request gets a 200 with [`BODY`].
    async fn serve(listener: TcpListener, acceptor: TlsAcceptor) {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve_one(tcp, acceptor.clone()));
        }
    }

    async fn serve_one(tcp: TcpStream, acceptor: TlsAcceptor) {
        let Ok(mut tls) = acceptor.accept(tcp).await else { return };
        let w = FixedWindows { stream: 1 << 20, connection: 1 << 20 };
        let mut conn = Connection::new(Config::default(), Box::new(w), Instant::now());
        let mut buf = vec![0; 16 * 1024];
        loop {
            let mut out = Vec::new();
            while conn.poll_transmit(Instant::now(), &mut out, usize::MAX) {}
            if tls.write_all(&out).await.is_err() {
                return;
            }
            let n = match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            conn.handle_input(Instant::now(), &buf[..n]);
            while let Some(e) = conn.poll_event() {
                if let Event::Request { stream, .. } = e {
                    conn.send_response(stream, 200, Vec::new(), false).expect("a head for a new request");
                    conn.send_data(stream, Bytes::from_static(BODY), true).expect("its body");
                }
            }
        }
    }

    fn connector() -> H2Connector {
        let setup = H2Setup {
            connect_timeout: Duration::from_secs(5),
            insecure: true,
            cacert: None,
            engine: ClientConfig::default(),
        };
        H2Connector::new(setup).expect("an insecure TLS configuration needs no files")
    }

    /// A server offering `alpn` on a loopback port: its https URL.
    async fn server(alpn: &[&[u8]]) -> (String, tokio::task::JoinHandle<()>) {
        let (listener, acceptor) = listen(alpn).await;
        let port = listener.local_addr().expect("bound").port();
        (format!("https://127.0.0.1:{port}/"), tokio::spawn(serve(listener, acceptor)))
    }

    #[tokio::test]
    async fn settings_then_a_request_written_by_hand() {
        let (url, server) = server(&[b"h2"]).await;
        let run = async {
            let mut c = connector().connect(&url).await?;
            assert!(!c.settings_acknowledged(), "nothing is sent before the first flush");
            c.exchange_settings().await?;
            assert!(c.engine.is_ready() && c.settings_acknowledged());
            let fields = [("priority", "u=0")];
            let req =
                Request { method: "GET", scheme: "https", authority: "127.0.0.1", path: "/style.css", fields: &fields };
            let stream = c.request(&req)?;
            let out = c.take_transmit();
            assert!(!out.is_empty(), "the request's HEADERS");
            assert!(c.take_transmit().is_empty(), "taken once");
            c.write(&out).await?;
            let (mut status, mut body) = (None, Vec::new());
            loop {
                match c.next_event().await? {
                    ClientEvent::Response { stream: s, status: st, .. } if s == stream => status = Some(st),
                    ClientEvent::Data { stream: s, data, end_stream } if s == stream => {
                        body.extend_from_slice(&data);
                        if end_stream {
                            break;
                        }
                    }
                    ClientEvent::Reset { error, .. } => panic!("reset: {error}"),
                    _ => {}
                }
            }
            Ok::<_, Failure>((status, body))
        };
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), run).await.expect("in time").expect("works");
        assert_eq!(status, Some(200));
        assert_eq!(body, BODY);
        server.abort();
    }

    #[tokio::test]
    async fn a_connectors_later_connections_resume_the_tls_session() {
        let (url, server) = server(&[b"h2"]).await;
        let run = async {
            let shared = connector();
            let mut kinds = Vec::new();
            for _ in 0..2 {
                let mut c = shared.connect(&url).await?;
                // Reading takes the server's session tickets in.
                c.exchange_settings().await?;
                kinds.push(c.io.get_ref().1.handshake_kind());
            }
            let mut fresh = connector().connect(&url).await?;
            fresh.exchange_settings().await?;
            kinds.push(fresh.io.get_ref().1.handshake_kind());
            Ok::<_, Failure>(kinds)
        };
        let kinds = tokio::time::timeout(Duration::from_secs(10), run).await.expect("in time").expect("works");
        use rustls::HandshakeKind::{Full, Resumed};
        assert_eq!(kinds, [Some(Full), Some(Resumed), Some(Full)]);
        server.abort();
    }

    #[tokio::test]
    async fn a_server_that_does_not_pick_h2_is_refused() {
        let (url, server) = server(&[]).await;
        let got = tokio::time::timeout(Duration::from_secs(10), connector().connect(&url)).await.expect("in time");
        let Err(e) = got else { panic!("connected without h2") };
        assert!(e.to_string().contains("did not negotiate h2"), "{e}");
        assert!(connector().connect("http://127.0.0.1:1/").await.is_err(), "cleartext is refused");
        server.abort();
    }
}
