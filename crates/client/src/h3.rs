//! `sluice get --http3` / `sluice put --http3`: one request over HTTP/3 on quinn.
//!
//! The client side of HTTP/3 a measuring tool needs and no more (RFC 9114): a control stream
//! with SETTINGS that advertise no QPACK dynamic table (so the server's responses use only the
//! static table and literals, RFC 9204 §3.2.3), request streams with a HEADERS frame and
//! DATA frames, and a response parser that streams DATA payloads through without buffering
//! them. For one URL the server's own unidirectional streams are never accepted: quinn keeps
//! their few bytes (SETTINGS) against the connection window. For several URLs
//! ([`watch_origins`]) they are read for the control stream's ORIGIN frames (RFC 9412).
//! Windows are generous so the client never limits what it measures. The wire format
//! (varints, frame headers and types, SETTINGS and ORIGIN payloads) is the engine's,
//! `sluice_h3::wire`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use http_body_util::BodyExt;
use quinn::VarInt;
use sluice_h3::wire::{self, frame_type, stream_type, FrameHeader};
use sluice_qpack::{Decoded, Decoder, Encoder, FieldRef};

use super::body::ReqBody;
use super::conn::Target;
use super::{chain, code, Failure};

/// Stream receive window: as the HTTP/2 client's (16 MiB).
const STREAM_WINDOW: u32 = 16 << 20;
/// Connection receive window.
const CONN_WINDOW: u32 = 32 << 20;
/// Largest response header section we take.
const MAX_FIELD_SECTION: u64 = 64 * 1024;
/// Largest read from the response stream at once.
const READ_MAX: usize = 256 * 1024;
/// The longest a client waits, after closing, for its CONNECTION_CLOSE to go out.
const CLOSE_WAIT: Duration = Duration::from_millis(50);
/// UDP socket buffers asked for (the kernel may clamp them).
const SOCKET_BUFFER: usize = 8 << 20;

/// Largest control-stream frame read whole; a larger one ends the watch (the server's
/// SETTINGS and ORIGIN frames are far smaller).
const MAX_CONTROL_FRAME: u64 = 64 * 1024;

/// An established HTTP/3 connection.
pub(crate) struct Connected {
    pub(crate) conn: quinn::Connection,
    /// Kept so the endpoint lives as long as the connection.
    endpoint: quinn::Endpoint,
    /// Kept open: closing the control stream is a connection error (RFC 9114 §6.2.1).
    _control: quinn::SendStream,
    pub(crate) start: Instant,
    /// `time_appconnect`: start → QUIC handshake done (QUIC has no separate connect).
    pub(crate) appconnect: Duration,
}

/// Handshake with `addr` (ALPN h3 in `tls`) and open the control stream.
pub(crate) async fn connect(
    target: &Target,
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<Connected, Failure> {
    let bind: SocketAddr = if addr.is_ipv6() { "[::]:0".parse() } else { "0.0.0.0:0".parse() }
        .map_err(|e| Failure::new(code::CONNECT, format!("{e}")))?;
    let socket = std::net::UdpSocket::bind(bind)
        .map_err(|e| Failure::new(code::CONNECT, format!("cannot open a UDP socket: {e}")))?;
    {
        use std::os::fd::AsRawFd;
        let fd = socket.as_raw_fd();
        let _ = sluice_sys::sock::size_buffer(fd, sluice_sys::sock::Buffer::Receive, SOCKET_BUFFER);
        let _ = sluice_sys::sock::size_buffer(fd, sluice_sys::sock::Buffer::Send, SOCKET_BUFFER);
    }
    let endpoint = quinn::Endpoint::new(crate::quic::endpoint_config(), None, socket, Arc::new(quinn::TokioRuntime))
        .map_err(|e| Failure::new(code::CONNECT, format!("cannot start QUIC: {e}")))?;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| Failure::new(code::TLS, format!("TLS set-up for QUIC: {e}")))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .receive_window(VarInt::from_u32(CONN_WINDOW))
        .send_window(u64::from(CONN_WINDOW))
        .enable_segmentation_offload(true)
        .mtu_discovery_config(Some(crate::quic::mtu_discovery(addr)));
    cfg.transport_config(Arc::new(transport));
    let start = Instant::now();
    let connecting = endpoint
        .connect_with(cfg, addr, &target.host)
        .map_err(|e| Failure::new(code::CONNECT, format!("cannot connect to {addr}: {e}")))?;
    let conn = match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(handshake_failure(target, &e)),
        Err(_) => {
            return Err(Failure::new(
                code::TIMEOUT,
                format!(
                    "QUIC handshake with {}:{} timed out after {timeout:?} (is HTTP/3 served on UDP there?)",
                    target.host, target.port
                ),
            ))
        }
    };
    let appconnect = start.elapsed();
    let mut control = conn.open_uni().await.map_err(|e| Failure::new(code::SEND, format!("control stream: {e}")))?;
    control.write_all(&control_hello()).await.map_err(|e| Failure::new(code::SEND, format!("control stream: {e}")))?;
    Ok(Connected { conn, endpoint, _control: control, start, appconnect })
}

impl Connected {
    /// Close the connection (H3_NO_ERROR) and give quinn a moment to send the
    /// CONNECTION_CLOSE: a process that exits right after `close` may never send it, and the
    /// server then keeps the connection, probing a closed port, until its idle timeout.
    /// Bounded by [`CLOSE_WAIT`], not the whole draining period (three PTOs, RFC 9000 §10.2):
    /// the frame goes out at once.
    pub(crate) async fn close(&self) {
        self.conn.close(VarInt::from_u32(0x100), b"");
        let _ = tokio::time::timeout(CLOSE_WAIT, self.endpoint.wait_idle()).await;
    }
}

/// What the control stream starts with: the stream type, then an empty SETTINGS frame: every
/// setting at its default, which for QPACK means no dynamic table and no blocked streams
/// (RFC 9204 §5).
fn control_hello() -> Vec<u8> {
    let mut hello = Vec::new();
    wire::varint::encode(stream_type::CONTROL, &mut hello);
    wire::encode_settings(&[], &mut hello);
    hello
}

/// The ORIGIN frames a connection received (RFC 8336 §2.3 via RFC 9412): whether any came
/// (the Origin Set is then initialised) and their entries in order.
#[derive(Debug, Default)]
pub(crate) struct OriginFrames {
    pub(crate) seen: bool,
    pub(crate) entries: Vec<String>,
}

/// Reads the server's unidirectional streams in the background for as long as the connection
/// lives: ORIGIN frames from its control stream go into the returned set; anything else
/// (QPACK streams, which carry nothing for a client without a dynamic table; reserved types)
/// is read and dropped (RFC 9114 §6.2).
pub(crate) fn watch_origins(conn: &quinn::Connection) -> Arc<Mutex<OriginFrames>> {
    let set = Arc::new(Mutex::new(OriginFrames::default()));
    let (conn, watched) = (conn.clone(), set.clone());
    tokio::spawn(async move {
        while let Ok(recv) = conn.accept_uni().await {
            tokio::spawn(read_uni(recv, watched.clone()));
        }
    });
    set
}

async fn read_uni(mut recv: quinn::RecvStream, set: Arc<Mutex<OriginFrames>>) {
    let mut buf = BytesMut::new();
    let ty = loop {
        if let Some((ty, n)) = wire::varint::decode(&buf) {
            buf.advance(n);
            break ty;
        }
        if !matches!(more_or_end(&mut recv, &mut buf).await, Ok(true)) {
            return;
        }
    };
    if ty != stream_type::CONTROL {
        while let Ok(Some(_)) = recv.read_chunk(READ_MAX, true).await {}
        return;
    }
    while let Ok(Some((ty, len))) = read_frame_header_or_end(&mut recv, &mut buf).await {
        if len > MAX_CONTROL_FRAME || fill(&mut recv, &mut buf, len as usize).await.is_err() {
            return;
        }
        let payload = buf.split_to(len as usize);
        if ty != frame_type::ORIGIN {
            continue;
        }
        // Entries that do not parse are the pool's to skip; a broken frame adds none.
        if let Ok(origins) = wire::parse_origin(&payload) {
            if let Ok(mut s) = set.lock() {
                s.seen = true;
                s.entries.extend(origins);
            }
        }
    }
}

fn handshake_failure(target: &Target, e: &quinn::ConnectionError) -> Failure {
    let text = e.to_string();
    let code = if text.contains("certificate") || text.contains("crypto") { code::PEER_VERIFY } else { code::CONNECT };
    Failure::new(code, format!("QUIC handshake with {}:{} failed: {}", target.host, target.port, chain(e)))
}

/// The response of one request.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_length: Option<u64>,
    pub(crate) starttransfer: Duration,
    pub(crate) recv: quinn::RecvStream,
    /// Bytes read past the response head.
    rest: BytesMut,
    /// Payload bytes of the current DATA frame still to come.
    data_left: u64,
    /// The task sending the request body.
    sending: Option<tokio::task::JoinHandle<Result<(), Failure>>>,
}

/// Send a request: `headers` are regular fields (lower-case names), `body` is sent as DATA
/// frames. Returns once the final response head has arrived.
pub(crate) async fn send(
    c: &Connected,
    target: &Target,
    method: &Method,
    headers: &[(String, String)],
    body: Option<ReqBody>,
) -> Result<Response, Failure> {
    let (mut send, mut recv) =
        c.conn.open_bi().await.map_err(|e| Failure::new(code::SEND, format!("cannot open a request stream: {e}")))?;
    let id = u64::from(send.id());
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", method.as_str().as_bytes()),
        (b":scheme", b"https"),
        (b":authority", target.authority.as_str().as_bytes()),
        (b":path", target.path.as_bytes()),
    ];
    fields.extend(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let mut block = Vec::new();
    Encoder::new(0, 0).encode(id, fields.into_iter().map(FieldRef::from), &mut block);
    let mut head = Vec::with_capacity(block.len() + 16);
    wire::encode_frame(frame_type::HEADERS, &block, &mut head);
    let send_failure = |e: quinn::WriteError| Failure::new(code::SEND, format!("sending the request failed: {e}"));
    send.write_all(&head).await.map_err(send_failure)?;
    let has_body = body.is_some();
    if !has_body {
        // No body: the FIN goes with the head, in the same packet. Finished from the task
        // below, after the connection had already sent the head, it took a second packet,
        // and two ack-eliciting packets per request draw an immediate ACK from the server
        // (RFC 9000 §13.2.2): four datagrams per request instead of two.
        let _ = send.finish();
    }
    let sender = async move {
        let sent = async {
            if let Some(mut body) = body {
                while let Some(frame) = body.frame().await {
                    let frame =
                        frame.map_err(|e| Failure::new(code::READ, format!("reading the upload failed: {e}")))?;
                    let Ok(data) = frame.into_data() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    let mut h = Vec::with_capacity(16);
                    FrameHeader { ty: frame_type::DATA, len: data.len() as u64 }.encode(&mut h);
                    send.write_all_chunks(&mut [Bytes::from(h), data]).await.map_err(send_failure)?;
                }
            }
            Ok::<(), Failure>(())
        }
        .await;
        if sent.is_err() {
            // Dropping the stream would finish it: a short body would look complete.
            let _ = send.reset(request_cancelled());
            return sent;
        }
        if has_body {
            let _ = send.finish();
        }
        // Keep the stream (and its unsent data) until the peer has it all or stops it.
        let _ = send.stopped().await;
        Ok(())
    };
    let sending = tokio::spawn(sender);
    let mut buf = BytesMut::new();
    let mut decoder = Decoder::new(0, 0, MAX_FIELD_SECTION);
    loop {
        let (ty, len) = read_frame_header(&mut recv, &mut buf).await?;
        if ty != frame_type::HEADERS {
            // Unknown and reserved frames are skipped (RFC 9114 §9); DATA before HEADERS is a
            // protocol error, but a client measuring a server only needs to say so.
            if ty == frame_type::DATA {
                return Err(Failure::new(code::RECV, "DATA before the response head".to_owned()));
            }
            skip(&mut recv, &mut buf, len).await?;
            continue;
        }
        if len > MAX_FIELD_SECTION {
            return Err(Failure::new(code::RECV, format!("response head of {len} bytes is too large")));
        }
        fill(&mut recv, &mut buf, len as usize).await?;
        let section = buf.split_to(len as usize);
        let fields = match decoder.decode(id, &section) {
            Ok(Decoded::Fields(f)) => f,
            Ok(Decoded::Blocked) => {
                return Err(Failure::new(
                    code::RECV,
                    "response head refers to a QPACK table we did not allow".to_owned(),
                ))
            }
            Err(e) => return Err(Failure::new(code::RECV, format!("response head: {e}"))),
        };
        let get = |name: &[u8]| fields.iter().find(|f| f.name.as_ref() == name).map(|f| f.value.clone());
        let status = get(b":status")
            .and_then(|v: Bytes| std::str::from_utf8(&v).ok().and_then(|s| s.parse::<u16>().ok()))
            .ok_or_else(|| Failure::new(code::RECV, "response head without a valid :status".to_owned()))?;
        if (100..200).contains(&status) {
            continue;
        }
        let content_length = get(b"content-length").and_then(|v: Bytes| std::str::from_utf8(&v).ok()?.parse().ok());
        return Ok(Response {
            status,
            content_length,
            starttransfer: c.start.elapsed(),
            recv,
            rest: buf,
            data_left: 0,
            sending: Some(sending),
        });
    }
}

impl Response {
    /// After the whole response: whether the request body went out whole (a server may answer
    /// before it has read the body; an upload that failed half-way must not look complete).
    pub(crate) async fn upload_result(&mut self) -> Result<(), Failure> {
        match self.sending.take() {
            Some(t) if t.is_finished() => t.await.unwrap_or(Ok(())),
            _ => Ok(()),
        }
    }

    /// The next piece of the body (DATA payloads, in order); `None` at the end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            if self.data_left > 0 {
                if self.rest.is_empty() {
                    // No copy: at most the rest of this DATA frame, straight from quinn.
                    let max = self.data_left.min(READ_MAX as u64) as usize;
                    return match self.recv.read_chunk(max, true).await {
                        Ok(Some(chunk)) => {
                            self.data_left -= chunk.bytes.len() as u64;
                            Ok(Some(chunk.bytes))
                        }
                        Ok(None) => {
                            Err(Failure::new(code::RECV, "the response ended in the middle of a frame".to_owned()))
                        }
                        Err(e) => Err(read_failure(e)),
                    };
                }
                let n = self.data_left.min(self.rest.len() as u64) as usize;
                self.data_left -= n as u64;
                return Ok(Some(self.rest.split_to(n).freeze()));
            }
            match read_frame_header_or_end(&mut self.recv, &mut self.rest).await? {
                None => return Ok(None),
                Some((frame_type::DATA, len)) => self.data_left = len,
                // Trailers and unknown frames.
                Some((_, len)) => skip(&mut self.recv, &mut self.rest, len).await?,
            }
        }
    }
}

/// Read more bytes into `buf`; an error at the end of the stream.
async fn more(recv: &mut quinn::RecvStream, buf: &mut BytesMut) -> Result<(), Failure> {
    if !more_or_end(recv, buf).await? {
        return Err(Failure::new(code::RECV, "the response ended in the middle of a frame".to_owned()));
    }
    Ok(())
}

/// Read more bytes into `buf`; false at the end of the stream.
async fn more_or_end(recv: &mut quinn::RecvStream, buf: &mut BytesMut) -> Result<bool, Failure> {
    match recv.read_chunk(READ_MAX, true).await {
        Ok(Some(chunk)) => {
            buf.extend_from_slice(&chunk.bytes);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(read_failure(e)),
    }
}

fn read_failure(e: quinn::ReadError) -> Failure {
    match e {
        quinn::ReadError::Reset(code) => {
            Failure::new(code::RECV, format!("the server reset the stream (code 0x{:x})", code.into_inner()))
        }
        e => Failure::new(code::RECV, format!("receiving the response failed: {}", chain(&e))),
    }
}

async fn fill(recv: &mut quinn::RecvStream, buf: &mut BytesMut, n: usize) -> Result<(), Failure> {
    while buf.len() < n {
        more(recv, buf).await?;
    }
    Ok(())
}

async fn skip(recv: &mut quinn::RecvStream, buf: &mut BytesMut, mut n: u64) -> Result<(), Failure> {
    loop {
        let take = n.min(buf.len() as u64) as usize;
        buf.advance(take);
        n -= take as u64;
        if n == 0 {
            return Ok(());
        }
        more(recv, buf).await?;
    }
}

async fn read_frame_header(recv: &mut quinn::RecvStream, buf: &mut BytesMut) -> Result<(u64, u64), Failure> {
    read_frame_header_or_end(recv, buf)
        .await?
        .ok_or_else(|| Failure::new(code::EMPTY_REPLY, "the stream ended without a response".to_owned()))
}

/// A frame's type and length, or `None` when the stream ends cleanly between frames.
async fn read_frame_header_or_end(
    recv: &mut quinn::RecvStream,
    buf: &mut BytesMut,
) -> Result<Option<(u64, u64)>, Failure> {
    loop {
        if let Some((FrameHeader { ty, len }, n)) = FrameHeader::decode(buf) {
            buf.advance(n);
            return Ok(Some((ty, len)));
        }
        if !more_or_end(recv, buf).await? {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(Failure::new(code::RECV, "the response ended in the middle of a frame".to_owned()));
        }
    }
}

/// RFC 9114 §8.1: H3_REQUEST_CANCELLED, as a QUIC error code.
fn request_cancelled() -> VarInt {
    // Invariant: HTTP/3 error codes are QUIC varints (0x010c here), below 2^62.
    VarInt::from_u64(sluice_h3::Code::H3_REQUEST_CANCELLED.0).unwrap_or(VarInt::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_stream_starts_with_an_empty_settings_frame() {
        // Stream type CONTROL, then SETTINGS (0x04) of length 0: no QPACK dynamic table.
        assert_eq!(control_hello(), [0x00, 0x04, 0x00]);
    }

    #[test]
    fn request_cancelled_is_h3_request_cancelled() {
        assert_eq!(request_cancelled().into_inner(), 0x010c);
    }
}
