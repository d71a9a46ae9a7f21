//! A minimal HTTP/2 client over TLS for the `priority` experiment, built on Sluice's frame
//! encoders and decoders (`sluice_h2::frame`) and HPACK (`sluice_hpack`).
//!
//! It behaves like a browser loading a page whose images were discovered before a
//! render-blocking stylesheet: preface, SETTINGS (INITIAL_WINDOW_SIZE 16 MiB, push off), a
//! connection WINDOW_UPDATE to 1 GiB, then [`IMAGES`] image requests at once, each with both
//! priority signals as Chrome sends them: the RFC 9218 header `priority: u=5, i` and RFC 7540
//! HEADERS priority fields (PRIORITY flag; weight 110, non-exclusive, dependency 0 — the
//! dependency tree is kept flat on purpose, so that a server following RFC 7540 weights
//! rather than a tree still sees the CSS as the heaviest sibling). Once the first
//! [`TRIGGER_BYTES`] of image data have arrived it requests the stylesheet with `priority: u=0`
//! and weight 256, exclusive, on stream 0, and measures the time from sending that request to
//! the END_STREAM of its response. Flow control never limits: stream windows of 16 MiB are
//! topped up with stream WINDOW_UPDATEs, the connection window with connection ones.
//!
//! The idle figure is the same stylesheet alone on a fresh connection, requested once the TLS
//! handshake and the SETTINGS exchange (the server's SETTINGS and the ACK of ours) are done.
//!
//! Every read has a timeout ([`READ_TIMEOUT`]) and a whole measurement is bounded by
//! [`RUN_LIMIT`]; nothing the server sends can make it panic.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use sluice_h2::frame::{
    flag, kind, Data, GoAway, Head, Headers, Ping, PriorityFields, RstStream, Setting, Settings, WindowUpdate,
    HEADER_LEN, PREFACE,
};
use sluice_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// Images requested on the busy connection.
pub const IMAGES: usize = 10;
/// Size of each image, bytes.
pub const IMAGE_BYTES: u64 = 1_000_000;
/// Size of the stylesheet, bytes.
pub const CSS_BYTES: u64 = 50_000;
/// Image data received before the stylesheet is requested.
pub const TRIGGER_BYTES: u64 = 100_000;
/// SETTINGS_INITIAL_WINDOW_SIZE we announce.
const INITIAL_WINDOW: u32 = 16 << 20;
/// The connection window we open (WINDOW_UPDATE on stream 0 after the preface).
const CONNECTION_WINDOW: u32 = 1 << 30;
/// The RFC's initial windows.
const DEFAULT_WINDOW: u32 = 65_535;
/// Stream credit handed back once this much was received on a stream.
const STREAM_TOPUP: u32 = 256 * 1024;
/// Connection credit handed back once this much was received.
const CONNECTION_TOPUP: u32 = 64 << 20;
/// Largest frame payload we accept (we never raise SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: u32 = 16_384;
/// Largest decoded header list we accept.
const MAX_HEADER_LIST: usize = 64 * 1024;
/// Most CONTINUATION frames per header block.
const MAX_CONTINUATIONS: usize = 32;
/// Bound on each network read and on the TCP connect and the TLS handshake.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on one whole measurement (busy and idle connection).
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The image request's priority signals (Chrome's for images).
pub const IMAGE_PRIORITY: (&str, PriorityFields) =
    ("u=5, i", PriorityFields { dependency: 0, exclusive: false, weight: 110 });
/// The stylesheet's priority signals (Chrome's for render-blocking CSS, flattened: exclusive on
/// stream 0 with the top weight).
pub const CSS_PRIORITY: (&str, PriorityFields) =
    ("u=0", PriorityFields { dependency: 0, exclusive: true, weight: 256 });

/// What one measurement found (the JSON the experiment prints per run).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// CSS request sent → its END_STREAM, on the connection busy with the images, ms.
    pub css_busy_ms: f64,
    /// The same on an idle connection, ms.
    pub css_idle_ms: f64,
    /// busy / idle.
    pub ratio: f64,
    /// Image requests sent → last image's END_STREAM, ms.
    pub images_done_ms: f64,
}

/// Encodes a GET request as one HEADERS frame with END_STREAM, END_HEADERS and PRIORITY
/// (the five RFC 7540 priority bytes before the header block), the `priority` header carrying
/// `urgency`.
pub fn request_frame(
    enc: &mut Encoder,
    stream: u32,
    authority: &str,
    path: &str,
    prio: (&str, PriorityFields),
    dst: &mut Vec<u8>,
) -> Result<(), String> {
    let (urgency, fields) = prio;
    let headers: [(&str, &str); 7] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", authority),
        (":path", path),
        ("user-agent", "sluice-lab-priority"),
        ("accept", "*/*"),
        ("priority", urgency),
    ];
    let mut block = Vec::new();
    enc.encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false)), &mut block);
    let len = block.len() + 5;
    if len > MAX_FRAME as usize {
        return Err(format!("request headers for {path} do not fit one frame ({len} bytes)"));
    }
    let flags = flag::END_STREAM | flag::END_HEADERS | flag::PRIORITY;
    Head { len: len as u32, kind: kind::HEADERS, flags, stream }.encode(dst);
    let raw = (fields.dependency & 0x7fff_ffff) | if fields.exclusive { 0x8000_0000 } else { 0 };
    dst.extend_from_slice(&raw.to_be_bytes());
    dst.push((fields.weight.clamp(1, 256) - 1) as u8);
    dst.extend_from_slice(&block);
    Ok(())
}

/// The connection start: preface, SETTINGS, connection WINDOW_UPDATE.
pub fn preamble(dst: &mut Vec<u8>) {
    dst.extend_from_slice(PREFACE);
    Settings {
        ack: false,
        values: vec![
            Setting::EnablePush(0),
            Setting::InitialWindowSize(INITIAL_WINDOW),
            Setting::HeaderTableSize(4096),
        ],
    }
    .encode(dst);
    WindowUpdate { stream: 0, increment: CONNECTION_WINDOW - DEFAULT_WINDOW }.encode(dst);
}

/// A certificate verifier that accepts any certificate (the lab's is self-signed) but still
/// checks the handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// TLS client configuration: ring provider, any certificate, ALPN h2 only.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// What a frame from the server meant to us.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A response head (`:status`), maybe ending the stream.
    Head { stream: u32, status: u16, end: bool },
    /// Response data.
    Data { stream: u32, len: u64, end: bool },
    /// Anything else (SETTINGS, PING, WINDOW_UPDATE, ...), handled inside.
    Other,
}

/// One client connection.
struct Conn<S> {
    io: S,
    buf: BytesMut,
    out: Vec<u8>,
    enc: Encoder,
    dec: Decoder,
    authority: String,
    deadline: Instant,
    /// Received but not yet handed back, connection-wide and per stream.
    conn_unacked: u32,
    stream_unacked: Vec<(u32, u32)>,
    server_settings: bool,
    settings_acked: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn new(io: S, authority: String, deadline: Instant) -> Self {
        Self {
            io,
            buf: BytesMut::with_capacity(64 * 1024),
            out: Vec::new(),
            enc: Encoder::new(),
            dec: Decoder::new(4096),
            authority,
            deadline,
            conn_unacked: 0,
            stream_unacked: Vec::new(),
            server_settings: false,
            settings_acked: false,
        }
    }

    /// The time left for a read: [`READ_TIMEOUT`], at most until the deadline.
    fn read_limit(&self) -> Result<Duration, String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("the measurement exceeded {} s", RUN_LIMIT.as_secs()));
        }
        Ok(left.min(READ_TIMEOUT))
    }

    async fn flush(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        let limit = self.read_limit()?;
        let out = std::mem::take(&mut self.out);
        match tokio::time::timeout(limit, async {
            self.io.write_all(&out).await?;
            self.io.flush().await
        })
        .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("writing to the server: {e}")),
            Err(_) => Err(format!("writing to the server timed out after {} ms", limit.as_millis())),
        }
    }

    fn request(&mut self, stream: u32, path: &str, prio: (&str, PriorityFields)) -> Result<(), String> {
        let authority = self.authority.clone();
        request_frame(&mut self.enc, stream, &authority, path, prio, &mut self.out)
    }

    /// Reads one whole frame (header, payload), waiting at most [`READ_TIMEOUT`] per read.
    async fn read_frame(&mut self) -> Result<(Head, Bytes), String> {
        // Bounded: each pass either returns or reads at least one byte, and reads are timed.
        loop {
            if let Some(head) = Head::parse(&self.buf) {
                if head.len > MAX_FRAME {
                    return Err(format!("the server sent a {}-byte frame (our maximum is {MAX_FRAME})", head.len));
                }
                let total = HEADER_LEN + head.len as usize;
                if self.buf.len() >= total {
                    self.buf.advance(HEADER_LEN);
                    let payload = self.buf.split_to(head.len as usize).freeze();
                    return Ok((head, payload));
                }
            }
            let limit = self.read_limit()?;
            self.buf.reserve(32 * 1024);
            match tokio::time::timeout(limit, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) => return Err("the server closed the connection".into()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("reading from the server: {e}")),
                Err(_) => return Err(format!("no data from the server for {} ms", limit.as_millis())),
            }
        }
    }

    /// Reads and handles one frame.
    async fn next_event(&mut self) -> Result<Event, String> {
        let (head, payload) = self.read_frame().await?;
        let ev = self.handle(head, payload).await?;
        self.flush().await?;
        Ok(ev)
    }

    async fn handle(&mut self, head: Head, payload: Bytes) -> Result<Event, String> {
        let h2err = |e: sluice_h2::Error| format!("bad frame from the server: {e:?}");
        match head.kind {
            kind::SETTINGS => {
                let s = Settings::decode(&head, &payload).map_err(h2err)?;
                if s.ack {
                    self.settings_acked = true;
                } else {
                    self.server_settings = true;
                    Settings { ack: true, values: Vec::new() }.encode(&mut self.out);
                }
                Ok(Event::Other)
            }
            kind::PING => {
                let p = Ping::decode(&head, &payload).map_err(h2err)?;
                if !p.ack {
                    Ping { ack: true, payload: p.payload }.encode(&mut self.out);
                }
                Ok(Event::Other)
            }
            kind::GOAWAY => {
                let g = GoAway::decode(&head, &payload).map_err(h2err)?;
                Err(format!(
                    "the server sent GOAWAY ({:?}, last stream {}): {}",
                    g.reason,
                    g.last_stream,
                    String::from_utf8_lossy(&g.debug).chars().take(200).collect::<String>()
                ))
            }
            kind::RST_STREAM => {
                let r = RstStream::decode(&head, &payload).map_err(h2err)?;
                Err(format!("the server reset stream {} ({:?})", r.stream, r.reason))
            }
            kind::PUSH_PROMISE => Err("the server sent PUSH_PROMISE although push is off".into()),
            kind::HEADERS => {
                let h = Headers::decode(&head, payload).map_err(h2err)?;
                let mut block = h.fragment.to_vec();
                let mut end_headers = h.end_headers;
                let mut n = 0;
                while !end_headers {
                    n += 1;
                    if n > MAX_CONTINUATIONS {
                        return Err("the server sent too many CONTINUATION frames".into());
                    }
                    let (c, p) = self.read_frame().await?;
                    if c.kind != kind::CONTINUATION || c.stream != h.stream {
                        return Err(format!("expected CONTINUATION on stream {}, got type {}", h.stream, c.kind));
                    }
                    if block.len() + p.len() > MAX_HEADER_LIST {
                        return Err("the server's header block is too large".into());
                    }
                    block.extend_from_slice(&p);
                    end_headers = c.has(flag::END_HEADERS);
                }
                let mut status = None;
                self.dec
                    .decode(&block, MAX_HEADER_LIST, &mut |name, value, _| {
                        if name == b":status" {
                            status = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u16>().ok());
                        }
                    })
                    .map_err(|e| format!("HPACK from the server: {e}"))?;
                // A trailer block has no :status; report it as a head with status 0 only
                // when it ends the stream.
                Ok(Event::Head { stream: h.stream, status: status.unwrap_or(0), end: h.end_stream })
            }
            kind::DATA => {
                let d = Data::decode(&head, payload).map_err(h2err)?;
                self.credit(d.stream, d.flow_len, d.end_stream);
                Ok(Event::Data { stream: d.stream, len: d.data.len() as u64, end: d.end_stream })
            }
            // WINDOW_UPDATE, PRIORITY, PRIORITY_UPDATE, ORIGIN, unknown types: nothing to do.
            _ => Ok(Event::Other),
        }
    }

    /// Hands credit back so that flow control never limits the server.
    fn credit(&mut self, stream: u32, flow_len: u32, ended: bool) {
        self.conn_unacked = self.conn_unacked.saturating_add(flow_len);
        if self.conn_unacked >= CONNECTION_TOPUP {
            WindowUpdate { stream: 0, increment: self.conn_unacked }.encode(&mut self.out);
            self.conn_unacked = 0;
        }
        let i = match self.stream_unacked.iter().position(|(s, _)| *s == stream) {
            Some(i) => i,
            None => {
                self.stream_unacked.push((stream, 0));
                self.stream_unacked.len() - 1
            }
        };
        if ended {
            self.stream_unacked.swap_remove(i);
            return;
        }
        let e = &mut self.stream_unacked[i];
        e.1 = e.1.saturating_add(flow_len);
        if e.1 >= STREAM_TOPUP {
            WindowUpdate { stream, increment: e.1 }.encode(&mut self.out);
            e.1 = 0;
        }
    }
}

/// Connects over TCP and TLS (ALPN h2) with timeouts.
async fn connect(
    tls: &Arc<rustls::ClientConfig>,
    addr: Ipv4Addr,
    port: u16,
    deadline: Instant,
) -> Result<Conn<tokio_rustls::client::TlsStream<TcpStream>>, String> {
    let tcp = tokio::time::timeout(READ_TIMEOUT, TcpStream::connect((addr, port)))
        .await
        .map_err(|_| format!("connecting to {addr}:{port} timed out"))?
        .map_err(|e| format!("connecting to {addr}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::V4(addr).into());
    let tls = tokio::time::timeout(READ_TIMEOUT, tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp))
        .await
        .map_err(|_| format!("TLS handshake with {addr}:{port} timed out"))?
        .map_err(|e| format!("TLS handshake with {addr}:{port}: {e}"))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(format!("{addr}:{port} did not negotiate h2 with ALPN"));
    }
    Ok(Conn::new(tls, format!("{addr}:{port}"), deadline))
}

/// Expected body size of a path.
fn expected_size(path: &str) -> u64 {
    if path.ends_with(".css") {
        CSS_BYTES
    } else {
        IMAGE_BYTES
    }
}

/// Per-stream progress.
#[derive(Clone, Debug)]
struct Progress {
    stream: u32,
    path: String,
    bytes: u64,
    done: Option<Instant>,
}

/// Applies an event to the streams; `Err` on a non-200 status, a short body or an unknown
/// stream.
fn apply(streams: &mut [Progress], ev: &Event, now: Instant) -> Result<(), String> {
    let (stream, end) = match *ev {
        Event::Head { stream, status, end } => {
            let p = streams.iter().find(|p| p.stream == stream);
            let Some(p) = p else { return Err(format!("response on unknown stream {stream}")) };
            if status != 200 && !(status == 0 && end) {
                return Err(format!("GET {}: HTTP status {status}", p.path));
            }
            (stream, end)
        }
        Event::Data { stream, len, end } => {
            let Some(p) = streams.iter_mut().find(|p| p.stream == stream) else {
                return Err(format!("data on unknown stream {stream}"));
            };
            p.bytes += len;
            (stream, end)
        }
        Event::Other => return Ok(()),
    };
    if end {
        if let Some(p) = streams.iter_mut().find(|p| p.stream == stream) {
            if p.bytes != expected_size(&p.path) {
                return Err(format!("GET {}: {} bytes instead of {}", p.path, p.bytes, expected_size(&p.path)));
            }
            p.done = Some(now);
        }
    }
    Ok(())
}

/// The busy connection: (CSS ms, images done ms).
async fn busy(
    tls: &Arc<rustls::ClientConfig>,
    addr: Ipv4Addr,
    port: u16,
    deadline: Instant,
) -> Result<(f64, f64), String> {
    let mut c = connect(tls, addr, port, deadline).await?;
    preamble(&mut c.out);
    let mut streams: Vec<Progress> = Vec::new();
    for i in 0..IMAGES {
        let stream = 1 + 2 * i as u32;
        let path = format!("/img{i}.jpg");
        c.request(stream, &path, IMAGE_PRIORITY)?;
        streams.push(Progress { stream, path, bytes: 0, done: None });
    }
    let images_sent = Instant::now();
    c.flush().await?;
    let css_stream = 1 + 2 * IMAGES as u32;
    let mut css_sent: Option<Instant> = None;
    // Bounded by the deadline (every read is timed against it).
    while streams.iter().any(|p| p.done.is_none()) {
        let ev = c.next_event().await?;
        apply(&mut streams, &ev, Instant::now())?;
        if css_sent.is_none() {
            let image_bytes: u64 = streams.iter().map(|p| p.bytes).sum();
            if image_bytes >= TRIGGER_BYTES {
                c.request(css_stream, "/style.css", CSS_PRIORITY)?;
                css_sent = Some(Instant::now());
                c.flush().await?;
                streams.push(Progress { stream: css_stream, path: "/style.css".into(), bytes: 0, done: None });
            }
        }
    }
    let css = match (css_sent, streams.iter().find(|p| p.stream == css_stream).and_then(|p| p.done)) {
        (Some(s), Some(d)) => d.duration_since(s),
        _ => return Err("the stylesheet was never requested".into()),
    };
    let images = streams
        .iter()
        .filter(|p| p.stream != css_stream)
        .filter_map(|p| p.done)
        .max()
        .map(|d| d.duration_since(images_sent))
        .unwrap_or_default();
    Ok((ms(css), ms(images)))
}

/// The idle connection: CSS ms once the SETTINGS exchange is done.
async fn idle(tls: &Arc<rustls::ClientConfig>, addr: Ipv4Addr, port: u16, deadline: Instant) -> Result<f64, String> {
    let mut c = connect(tls, addr, port, deadline).await?;
    preamble(&mut c.out);
    c.flush().await?;
    while !(c.server_settings && c.settings_acked) {
        let ev = c.next_event().await?;
        if ev != Event::Other {
            return Err(format!("unexpected {ev:?} before any request"));
        }
    }
    let mut streams = vec![Progress { stream: 1, path: "/style.css".into(), bytes: 0, done: None }];
    c.request(1, "/style.css", CSS_PRIORITY)?;
    let sent = Instant::now();
    c.flush().await?;
    while streams[0].done.is_none() {
        let ev = c.next_event().await?;
        apply(&mut streams, &ev, Instant::now())?;
    }
    Ok(streams[0].done.map(|d| ms(d.duration_since(sent))).unwrap_or_default())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One measurement against `addr:port`: the idle connection, then the busy one. Runs its own
/// single-threaded runtime; call it from a thread inside the client namespace.
pub fn measure(addr: Ipv4Addr, port: u16) -> Result<Outcome, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the client runtime: {e}"))?;
    let tls = tls_config()?;
    rt.block_on(async {
        let deadline = Instant::now() + RUN_LIMIT;
        let run = async {
            let css_idle_ms = idle(&tls, addr, port, deadline).await?;
            let (css_busy_ms, images_done_ms) = busy(&tls, addr, port, deadline).await?;
            let ratio = if css_idle_ms > 0.0 { css_busy_ms / css_idle_ms } else { f64::NAN };
            Ok::<_, String>(Outcome { css_busy_ms, css_idle_ms, ratio, images_done_ms })
        };
        match tokio::time::timeout(RUN_LIMIT + Duration::from_secs(1), run).await {
            Ok(r) => r,
            Err(_) => Err(format!("the measurement exceeded {} s", RUN_LIMIT.as_secs())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_headers(frame: &[u8]) -> (Head, Headers, Vec<(String, String)>) {
        let head = Head::parse(frame).unwrap();
        assert_eq!(frame.len(), HEADER_LEN + head.len as usize);
        let h = Headers::decode(&head, Bytes::copy_from_slice(&frame[HEADER_LEN..])).unwrap();
        let mut fields = Vec::new();
        Decoder::new(4096)
            .decode(&h.fragment, 1 << 16, &mut |n, v, _| {
                fields.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
            })
            .unwrap();
        (head, h, fields)
    }

    #[test]
    fn image_request_carries_both_priority_signals() {
        let mut out = Vec::new();
        request_frame(&mut Encoder::new(), 3, "10.99.0.2:8443", "/img1.jpg", IMAGE_PRIORITY, &mut out).unwrap();
        let (head, h, fields) = decode_headers(&out);
        assert_eq!(head.kind, kind::HEADERS);
        assert_eq!(head.stream, 3);
        assert!(head.has(flag::END_STREAM) && head.has(flag::END_HEADERS) && head.has(flag::PRIORITY));
        assert!(h.end_stream && h.end_headers);
        assert_eq!(h.priority, Some(PriorityFields { dependency: 0, exclusive: false, weight: 110 }));
        let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get(":method"), Some("GET"));
        assert_eq!(get(":scheme"), Some("https"));
        assert_eq!(get(":authority"), Some("10.99.0.2:8443"));
        assert_eq!(get(":path"), Some("/img1.jpg"));
        assert_eq!(get("priority"), Some("u=5, i"));
        // Pseudo-headers first.
        assert!(fields.iter().take(4).all(|(k, _)| k.starts_with(':')));
    }

    #[test]
    fn css_request_is_urgent_and_exclusive() {
        let mut enc = Encoder::new();
        let mut out = Vec::new();
        // A first request fills the dynamic table; the second must still decode in sequence.
        request_frame(&mut enc, 1, "a:1", "/img0.jpg", IMAGE_PRIORITY, &mut out).unwrap();
        let first = HEADER_LEN + Head::parse(&out).unwrap().len as usize;
        request_frame(&mut enc, 21, "a:1", "/style.css", CSS_PRIORITY, &mut out).unwrap();
        let mut dec = Decoder::new(4096);
        let mut seen = Vec::new();
        for frame in [&out[..first], &out[first..]] {
            let head = Head::parse(frame).unwrap();
            let h = Headers::decode(&head, Bytes::copy_from_slice(&frame[HEADER_LEN..])).unwrap();
            dec.decode(&h.fragment, 1 << 16, &mut |n, v, _| {
                if n == b"priority" || n == b":path" {
                    seen.push(String::from_utf8_lossy(v).into_owned());
                }
            })
            .unwrap();
            if head.stream == 21 {
                assert_eq!(h.priority, Some(PriorityFields { dependency: 0, exclusive: true, weight: 256 }));
            }
        }
        assert_eq!(seen, ["/img0.jpg", "u=5, i", "/style.css", "u=0"]);
    }

    #[test]
    fn preamble_opens_the_windows() {
        let mut out = Vec::new();
        preamble(&mut out);
        assert!(out.starts_with(PREFACE));
        let rest = &out[PREFACE.len()..];
        let head = Head::parse(rest).unwrap();
        assert_eq!(head.kind, kind::SETTINGS);
        let s = Settings::decode(&head, &rest[HEADER_LEN..HEADER_LEN + head.len as usize]).unwrap();
        assert!(s.values.contains(&Setting::InitialWindowSize(16 << 20)));
        assert!(s.values.contains(&Setting::EnablePush(0)));
        let rest = &rest[HEADER_LEN + head.len as usize..];
        let head = Head::parse(rest).unwrap();
        let w = WindowUpdate::decode(&head, &rest[HEADER_LEN..]).unwrap();
        assert_eq!((w.stream, w.increment + DEFAULT_WINDOW), (0, 1 << 30));
    }

    #[test]
    fn progress_checks_status_and_sizes() {
        let now = Instant::now();
        let mut s = vec![Progress { stream: 1, path: "/style.css".into(), bytes: 0, done: None }];
        apply(&mut s, &Event::Head { stream: 1, status: 200, end: false }, now).unwrap();
        apply(&mut s, &Event::Data { stream: 1, len: CSS_BYTES - 1, end: false }, now).unwrap();
        assert!(apply(&mut s, &Event::Data { stream: 1, len: 0, end: true }, now).unwrap_err().contains("bytes"));
        apply(&mut s, &Event::Data { stream: 1, len: 1, end: true }, now).unwrap();
        assert_eq!(s[0].done, Some(now));
        assert!(apply(&mut s, &Event::Head { stream: 3, status: 200, end: false }, now).is_err());
        let mut s = vec![Progress { stream: 1, path: "/img0.jpg".into(), bytes: 0, done: None }];
        assert!(apply(&mut s, &Event::Head { stream: 1, status: 404, end: false }, now).unwrap_err().contains("404"));
    }

    #[tokio::test]
    async fn frames_from_a_peer_are_parsed_without_panics() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut c = Conn::new(a, "x:1".into(), Instant::now() + Duration::from_secs(5));
        let mut wire = Vec::new();
        Settings { ack: false, values: vec![Setting::MaxConcurrentStreams(100)] }.encode(&mut wire);
        Data::encode(1, b"hello", true, &mut wire);
        // An oversized frame header: refused with an error, not a panic.
        Head { len: 1 << 20, kind: kind::DATA, flags: 0, stream: 1 }.encode(&mut wire);
        b.write_all(&wire).await.unwrap();
        assert_eq!(c.next_event().await.unwrap(), Event::Other);
        assert!(c.server_settings);
        assert_eq!(c.next_event().await.unwrap(), Event::Data { stream: 1, len: 5, end: true });
        assert!(c.next_event().await.unwrap_err().contains("frame"));
        // Our SETTINGS ACK went out.
        let mut got = vec![0u8; HEADER_LEN];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(Head::parse(&got).unwrap(), Head { len: 0, kind: kind::SETTINGS, flags: flag::ACK, stream: 0 });
    }
}
