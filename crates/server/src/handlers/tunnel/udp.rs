//! CONNECT-UDP (RFC 9298): a UDP socket per tunnel, connected to the one destination the
//! request names, its payloads carried as HTTP Datagrams (RFC 9297) with Context ID 0 — in
//! QUIC DATAGRAM frames when HTTP/3 agreed to them (`Datagrams`, lent by the driver), else in
//! DATAGRAM capsules on the request stream, both ways (HTTP/2, always). A client may send
//! capsules on the stream over HTTP/3 too: they are read either way. Unknown capsule types and
//! Context IDs are skipped (RFC 9297 §3.2, RFC 9298 §4); a capsule larger than any UDP payload
//! ends the tunnel. What waits for a slow client is bounded (`udp_buffer` bytes of capsules;
//! QUIC datagrams in quinn's send buffer, oldest dropped first); past it payloads are dropped
//! and counted, as the network would.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use sluice_http::capsule::{self, CapsuleReader};

use super::Open;
use crate::config::connect::Connect;
use crate::message::{Body, BodySource, Datagrams, RequestBody, Response};

/// The largest UDP payload (IPv4: 65,535 − 8 − 20), and a capsule's bound (a Context ID more).
const MAX_PAYLOAD: usize = 65_527;
const MAX_CAPSULE: usize = MAX_PAYLOAD + 8;

/// RFC 9298 §2's default URI template's path: `/.well-known/masque/udp/{target_host}/{target_port}/`.
const PREFIX: &str = "/.well-known/masque/udp/";

/// The destination a CONNECT-UDP's path names: host (percent-decoded; an IPv6 address comes
/// without brackets) and port.
pub(super) fn path_target(path: &str) -> Option<(String, u16)> {
    let rest = path.strip_prefix(PREFIX)?;
    let mut parts = rest.split('/');
    let (host, port) = (parts.next()?, parts.next()?);
    if !matches!(parts.next(), None | Some("")) || parts.next().is_some() {
        return None;
    }
    let host = percent_encoding::percent_decode_str(host).decode_utf8().ok()?.to_ascii_lowercase();
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let name_ok = host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if host.is_empty() || (host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err()) {
        return None;
    }
    if !host.contains(':') && !name_ok {
        return None;
    }
    Some((host, port))
}

/// A UDP socket connected to the first of `addrs` that takes one.
pub(super) async fn bind(addrs: &[SocketAddr]) -> Option<tokio::net::UdpSocket> {
    for a in addrs {
        let local: SocketAddr = if a.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let Ok(s) = tokio::net::UdpSocket::bind(local).await else { continue };
        if s.connect(a).await.is_ok() {
            return Some(s);
        }
    }
    None
}

/// Capsules waiting for the client, bounded in bytes.
struct Queue {
    items: VecDeque<Bytes>,
    bytes: usize,
    /// The tunnel ended: the body ends once the queue is empty.
    closed: bool,
    waker: Option<Waker>,
}

/// The response body of a CONNECT-UDP tunnel: the capsules the tunnel queues.
struct QueueSource(Arc<Mutex<Queue>>);

impl BodySource for QueueSource {
    fn poll_chunk(&mut self, cx: &mut Context<'_>, _max: usize) -> Poll<Option<std::io::Result<Bytes>>> {
        let mut q = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(b) = q.items.pop_front() {
            q.bytes -= b.len();
            return Poll::Ready(Some(Ok(b)));
        }
        if q.closed {
            return Poll::Ready(None);
        }
        q.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn len(&self) -> Option<u64> {
        None
    }

    fn may_trail(&self) -> bool {
        false
    }

    fn take_trailers(&mut self) -> Option<HeaderMap> {
        None
    }
}

impl Drop for QueueSource {
    fn drop(&mut self) {
        // The client's stream is gone: the tunnel sees it and ends.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).closed = true;
    }
}

/// Queue `b` for the client; false when it does not fit (dropped).
fn push(q: &Mutex<Queue>, b: Bytes, cap: usize) -> bool {
    let mut q = q.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if q.bytes + b.len() > cap {
        return false;
    }
    q.bytes += b.len();
    q.items.push_back(b);
    if let Some(w) = q.waker.take() {
        w.wake();
    }
    true
}

/// The 200 that opens the tunnel, and the task that carries it.
pub(super) fn serve(
    sock: tokio::net::UdpSocket,
    body: RequestBody,
    datagrams: Option<Datagrams>,
    open: Open,
    cfg: &Connect,
) -> Response {
    let queue = Arc::new(Mutex::new(Queue { items: VecDeque::new(), bytes: 0, closed: false, waker: None }));
    let (cap, idle) = (cfg.udp_buffer, cfg.idle);
    let q = queue.clone();
    tokio::spawn(async move {
        run(sock, body, datagrams, &q, cap, idle, &open).await;
        let mut q = q.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        q.closed = true;
        if let Some(w) = q.waker.take() {
            w.wake();
        }
        drop(q);
        drop(open);
    });
    let mut headers = HeaderMap::with_capacity(1);
    // RFC 9297 §3.4: the stream's data is capsules.
    headers.insert("capsule-protocol", HeaderValue::from_static("?1"));
    Response::new(StatusCode::OK, headers, Body::Source(Box::new(QueueSource(queue))))
}

/// Carry payloads both ways until the client's stream ends or fails, the client's side of the
/// response is gone, or nothing moves for `idle`.
async fn run(
    sock: tokio::net::UdpSocket,
    mut body: RequestBody,
    mut datagrams: Option<Datagrams>,
    queue: &Mutex<Queue>,
    cap: usize,
    idle: std::time::Duration,
    open: &Open,
) {
    let moved = &open.moved;
    let mut reader = CapsuleReader::new(MAX_CAPSULE);
    let mut buf = vec![0u8; MAX_PAYLOAD + 1];
    let mut dropped = 0u64;
    // Whether the response body is still read (checked on every wake-up).
    let client_gone = || queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).closed;
    let mut check = tokio::time::interval(std::time::Duration::from_millis(500));
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            // An error is ICMP's on a connected socket (port unreachable): the destination
            // may come back, and datagrams are best effort.
            r = sock.recv(&mut buf) => if let Ok(n) = r {
                last = tokio::time::Instant::now();
                moved.b_to_a.fetch_add(n as u64, Ordering::Relaxed);
                let sent = match &datagrams {
                    Some(d) => (d.send)(&buf[..n]),
                    None => push(queue, capsule::udp_capsule(&buf[..n]), cap),
                };
                if !sent {
                    dropped += 1;
                }
            },
            Some(d) = async { datagrams.as_mut()?.rx.recv().await }, if datagrams.is_some() => {
                last = tokio::time::Instant::now();
                if let Some(p) = capsule::udp_payload(d) {
                    moved.a_to_b.fetch_add(p.len() as u64, Ordering::Relaxed);
                    let _ = sock.send(&p).await;
                }
            },
            chunk = body.chunk() => match chunk {
                Some(Ok(b)) => {
                    last = tokio::time::Instant::now();
                    reader.push(&b);
                    loop {
                        match reader.next_capsule() {
                            Ok(Some((capsule::DATAGRAM, v))) => {
                                if let Some(p) = capsule::udp_payload(v) {
                                    moved.a_to_b.fetch_add(p.len() as u64, Ordering::Relaxed);
                                    let _ = sock.send(&p).await;
                                }
                            }
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(e) => {
                                tracing::info!(peer = %open.peer, ?e, "CONNECT-UDP: malformed capsule: tunnel closed");
                                super::dropped(dropped);
                                return;
                            }
                        }
                    }
                }
                // The client closed its side (or it failed): the tunnel ends (RFC 9298 §3).
                None | Some(Err(_)) => break,
            },
            _ = check.tick() => {
                if client_gone() || last.elapsed() >= idle {
                    break;
                }
            }
        }
        if datagrams.as_ref().is_some_and(|d| d.rx.is_closed() && d.rx.is_empty()) {
            datagrams = None;
        }
    }
    super::dropped(dropped);
}

#[cfg(test)]
mod tests {
    use super::path_target;

    #[test]
    fn the_default_template_names_host_and_port() {
        assert_eq!(path_target("/.well-known/masque/udp/192.0.2.6/443/"), Some(("192.0.2.6".into(), 443)));
        assert_eq!(path_target("/.well-known/masque/udp/Example.COM/53/"), Some(("example.com".into(), 53)));
        assert_eq!(path_target("/.well-known/masque/udp/2001%3Adb8%3A%3A42/443/"), Some(("2001:db8::42".into(), 443)));
        assert_eq!(path_target("/.well-known/masque/udp/a.example/53"), Some(("a.example".into(), 53)));
        for bad in [
            "/.well-known/masque/udp/a.example/0/",
            "/.well-known/masque/udp/a.example/",
            "/.well-known/masque/udp/a.example/53/x/",
            "/.well-known/masque/udp/a%20b/53/",
            "/.well-known/masque/udp/zz%3A%3Azz/53/",
            "/masque/udp/a.example/53/",
        ] {
            assert_eq!(path_target(bad), None, "{bad}");
        }
    }
}
