//! The HTTP/3 driver: quinn (QUIC) below, the sans-IO engine (`sluice-h3`) in the middle, the
//! same handlers as HTTP/1.1 and HTTP/2 above.
//!
//! One task per connection owns the engine and the send half of every stream, and accepts the
//! streams the client opens. A stream that arrives whole (a request without a body: head and
//! FIN in the packet that opens it) is read there and then; for any other, a reader task
//! passes bytes in through a bounded channel; a request body waits
//! in its reader while the handler holds more than [`BODY_BUFFER`] unconsumed (quinn then stops
//! extending credit, so the client slows down). Writes are pulled from the engine one
//! scheduler pick (at most one quantum, or one chunk of a longer frame for a stream the
//! scheduler would pick again anyway) at a time and handed to quinn without waiting: a stream
//! quinn cannot take more from is reported blocked to the engine, and its waker brings the
//! task back when it can; so the driver holds at most one write per stream beyond what quinn
//! took. Two things keep the order of bytes on the wire the engine's (RFC 9218), not quinn's
//! buffer's:
//! - quinn's send window (unacknowledged plus unsent stream bytes) follows the congestion
//!   window ([`send_window`]), so a bounded amount waits in quinn's buffer;
//! - every stream carries its urgency as quinn's stream priority, so what does wait there goes
//!   out most urgent first (our control and QPACK streams before any response).
//!
//! What is in flight is bounded too: each connection's congestion controller is wrapped by the
//! in-flight bound (`quic_pace.rs`), fed by this driver through a [`PaceLink`] (urgent bytes
//! handed to quinn, and whether the connection has carried several urgencies).
//!
//! The connection's receive window is autotuned with the HTTP/2 tuner under the same memory
//! budget; stream windows are generous (`[quic] stream_window`).
//!
//! The parts: here, the endpoint, the accept loop, each connection's handshake and its wait;
//! [`driver`], the connection's state and what each wake-up does; [`send`], its send path to
//! quinn; [`streams`], the send and receive halves of its QUIC streams (reader tasks,
//! request-body credit, quinn's wakers).

mod driver;
mod keys;
mod send;
mod streams;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quinn::{SendStream, VarInt};
use sluice_h3::{Code, Connection, Field, SendError};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::config::{Config, QuicCongestion};
use crate::io::live::Generation;
use crate::io::quic_pace::{BoundedFactory, PaceLink};
use crate::io::stream::{Engine, Refused};
use crate::state::State;
use driver::{Driver, Step};
use sluice_tls::certs::{Served, ServedCert};
use streams::Input;

/// Request body bytes delivered to a handler and not yet consumed before the stream's reader
/// stops reading (the QUIC stream window then holds the client back).
const BODY_BUFFER: i64 = 1 << 20;
/// Largest read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;
/// Unidirectional streams a client may open at once: control and the two QPACK streams, and
/// room for reserved ones (RFC 9114 §6.2.3 grease).
const MAX_UNI_STREAMS: u32 = 8;

use sluice_client::quic::{endpoint_config, mtu_discovery};

/// A QUIC endpoint serving HTTP/3, and the server settings each connection starts from.
pub(crate) struct Listener {
    pub(crate) ep: quinn::Endpoint,
    server: quinn::ServerConfig,
}

/// Bind UDP at `addr` and start a QUIC endpoint serving HTTP/3 with `tls` (ALPN h3).
pub(crate) fn endpoint(addr: SocketAddr, tls: Arc<rustls::ServerConfig>, cfg: &Config) -> Result<Listener, String> {
    let socket = std::net::UdpSocket::bind(addr).map_err(|e| format!("cannot listen on UDP {addr}: {e}"))?;
    size_buffers(&socket, cfg.quic.socket_buffer);
    let mut server = server_config(tls, cfg)?;
    let mut ep_cfg = endpoint_config();
    let shared = keys::load(&cfg.data_dir);
    if let Some((reset, _)) = &shared {
        ep_cfg.reset_key(reset.clone());
    }
    if let Some((lb, server_id)) = &cfg.quic.lb {
        let enc = Arc::new(
            sluice_quiclb::Encoder::new(lb.clone(), server_id).map_err(|e| format!("QUIC-LB configuration: {e}"))?,
        );
        ep_cfg.cid_generator(move || Box::new(LbCids { enc: enc.clone(), rng: ring::rand::SystemRandom::new() }));
    }
    if let Some((_, token)) = shared {
        server.token_key(token);
    }
    let ep = quinn::Endpoint::new(ep_cfg, Some(server.clone()), socket, Arc::new(quinn::TokioRuntime))
        .map_err(|e| format!("cannot start QUIC on {addr}: {e}"))?;
    Ok(Listener { ep, server })
}

/// The endpoint's server settings: `tls` (ALPN h3) and the transport from `cfg`. Every
/// connection is accepted with its own settings (`for_peer`); these are the defaults.
pub(crate) fn server_config(tls: Arc<rustls::ServerConfig>, cfg: &Config) -> Result<quinn::ServerConfig, String> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("TLS configuration for QUIC: {e}"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport(cfg, None)?));
    Ok(server)
}

/// The server settings for a connection from `peer`: the listener's, with MTU discovery up to
/// what the route to `peer` carries and, with `[quic] limit_inflight`, the connection's own
/// bounded congestion controller and the link the driver feeds it through.
fn for_peer(
    server: &quinn::ServerConfig,
    cfg: &Config,
    peer: SocketAddr,
) -> (quinn::ServerConfig, Option<Arc<PaceLink>>) {
    let mut server = server.clone();
    let pace = cfg.quic.limit_inflight.then(|| Arc::new(PaceLink::default()));
    // Invariant: `transport` succeeded with this configuration when the listener started.
    if let Ok(mut t) = transport(cfg, pace.clone()) {
        t.mtu_discovery_config(Some(mtu_discovery(peer)));
        server.transport_config(Arc::new(t));
    }
    (server, pace)
}

/// Ask for `want` bytes of UDP socket buffer each way; say so when the kernel gives less.
fn size_buffers(socket: &std::net::UdpSocket, want: usize) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    for (what, which) in [("receive", sluice_sys::sock::Buffer::Receive), ("send", sluice_sys::sock::Buffer::Send)] {
        match sluice_sys::sock::size_buffer(fd, which, want) {
            Ok(got) if got < want => tracing::warn!(
                asked = want,
                got,
                "the kernel clamped the UDP {what} buffer: raise {} (HTTP/3 may drop packets at high rates)",
                which.sysctl()
            ),
            Ok(got) => tracing::debug!(got, "UDP {what} buffer"),
            Err(e) => tracing::warn!(%e, "cannot size the UDP {what} buffer"),
        }
    }
}

/// QUIC-LB connection ids for quinn (draft-ietf-quic-load-balancers-21 §5.4): every id this
/// server issues carries its server id, in the clear or encrypted, behind the configuration id
/// and the encoded length, with a fresh random nonce (so no two ids of a connection are
/// related to an observer without the key).
struct LbCids {
    enc: Arc<sluice_quiclb::Encoder>,
    rng: ring::rand::SystemRandom,
}

impl quinn_proto::ConnectionIdGenerator for LbCids {
    fn generate_cid(&mut self) -> quinn_proto::ConnectionId {
        use ring::rand::SecureRandom;
        let mut nonce = [0u8; 18];
        let n = self.enc.config().nonce_len;
        // The system RNG does not fail once it has worked (ring checks it at start); should it,
        // the nonce stays zeros and the ids stay valid, only linkable.
        let _ = self.rng.fill(&mut nonce[..n]);
        quinn_proto::ConnectionId::new(&self.enc.encode(&nonce[..n], 0))
    }

    fn validate(&self, cid: &quinn_proto::ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        let c = self.enc.config();
        let ok = cid.len() == c.cid_len() && sluice_quiclb::Decoder::config_id_of(cid) == Some(c.config_id);
        if ok {
            Ok(())
        } else {
            Err(quinn_proto::InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        self.enc.config().cid_len()
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Bytes of QUIC datagrams a connection buffers each way.
const DATAGRAM_BUFFER: usize = 256 * 1024;

/// quinn's transport parameters from the configuration; with `pace`, the congestion
/// controller is bounded by the in-flight bound (`quic_pace.rs`).
fn transport(cfg: &Config, pace: Option<Arc<PaceLink>>) -> Result<quinn::TransportConfig, String> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(cfg.limits.max_concurrent_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .stream_receive_window(VarInt::from_u32(cfg.quic.stream_window))
        .receive_window(VarInt::from_u32(cfg.flow.initial_connection_window))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(cfg.timeouts.idle).map_err(|e| format!("idle timeout for QUIC: {e}"))?,
        ))
        .enable_segmentation_offload(true)
        // Streams of one priority take turns; urgencies are distinct priorities (see above).
        .send_fairness(true)
        // The driver sets the send window from the congestion window as soon as data moves;
        // until then quinn's default (10 MB) would let the first responses fill its buffer far
        // past what the path carries, all of it ahead of anything requested later (traced:
        // about 1 MB ahead of an urgent response 0.45 s into a connection).
        .send_window(send_window(INITIAL_WINDOW, sluice_h3::Config::default().quantum))
        // QUIC DATAGRAM frames (RFC 9221) carry CONNECT-UDP's payloads; offered only when the
        // forward proxy serves it. What waits to be read or sent is bounded (quinn drops the
        // oldest past it).
        .datagram_receive_buffer_size(cfg.udp_tunnels().then_some(DATAGRAM_BUFFER))
        .datagram_send_buffer_size(DATAGRAM_BUFFER);
    let inner: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> = match cfg.quic.congestion {
        QuicCongestion::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
        QuicCongestion::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
        QuicCongestion::NewReno => Arc::new(quinn::congestion::NewRenoConfig::default()),
    };
    match pace {
        Some(link) => t.congestion_controller_factory(Arc::new(BoundedFactory { inner, link })),
        None => t.congestion_controller_factory(inner),
    };
    Ok(t)
}

/// quinn's default initial congestion window, 14,720 bytes (RFC 9002 §7.2: ten datagrams,
/// at most 14,720 bytes).
const INITIAL_WINDOW: u64 = 14_720;

/// quinn's send window for a congestion window of `cwnd` bytes: twice the window plus four
/// quanta. quinn counts selectively acknowledged data against the send window until the
/// contiguous prefix is acknowledged, so after a loss a window near `cwnd` would run dry for a
/// round trip (and quinn's CUBIC ignores ACKs while application-limited); twice leaves room for
/// that, and the slack keeps the congestion controller fed between two of our passes. The order
/// within what waits in quinn's buffer is kept by stream priorities.
pub(crate) fn send_window(cwnd: u64, quantum: usize) -> u64 {
    2 * cwnd + 4 * quantum as u64
}

/// Whether a new send window differs enough from the one set to be worth telling quinn (each
/// call wakes its connection driver): by an eighth.
pub(super) fn worth_setting(old: u64, new: u64) -> bool {
    old.abs_diff(new) > old / 8
}

/// Accept QUIC connections until `close` (the server stops, or a reload removed the
/// listener); each is served by the generation current when it arrived, to its end, and holds
/// a clone of `alive`. A new generation's certificates and transport settings apply to the
/// connections that arrive after it: the endpoint, and every connection on it, stays.
pub(crate) async fn accept_loop(
    listener: Listener,
    mut live: watch::Receiver<Arc<Generation>>,
    mut close: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    let Listener { ep, server } = listener;
    let mut server = Arc::new(server);
    let mut g = live.borrow_and_update().clone();
    let limit = Arc::new(Semaphore::new(g.state.cfg.limits.max_connections));
    let port = ep.local_addr().map(|a| a.port()).unwrap_or_default();
    loop {
        let incoming = tokio::select! {
            i = ep.accept() => match i {
                Some(i) => i,
                None => break,
            },
            _ = close.changed() => break,
            changed = live.changed() => {
                if changed.is_err() {
                    break;
                }
                g = live.borrow_and_update().clone();
                match g.quic_tls.clone().map(|tls| server_config(tls, &g.state.cfg)) {
                    Some(Ok(s)) => {
                        ep.set_server_config(Some(s.clone()));
                        server = Arc::new(s);
                    }
                    Some(Err(e)) => tracing::error!(%e, "QUIC keeps its previous TLS settings"),
                    None => {}
                }
                continue;
            }
        };
        // At the limit, refuse at once (CONNECTION_REFUSED) rather than hold the handshake.
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::debug!(peer = %incoming.remote_address(), "QUIC connection refused: limits.max_connections");
            crate::message::metrics::limit(crate::message::metrics::Limit::Connections);
            incoming.refuse();
            continue;
        };
        let (state, stop, alive, certs) = (g.state.clone(), g.stop.clone(), alive.clone(), g.certs.clone());
        let server = server.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _alive = alive;
            serve(incoming, &server, &certs, port, state, stop).await;
        });
    }
    // Refuse new connections while the open ones drain (each has its own GOAWAY and deadline),
    // then let their CONNECTION_CLOSEs go out.
    ep.set_server_config(None);
    let drain = g.state.cfg.timeouts.drain;
    let _ = tokio::time::timeout(drain + Duration::from_secs(1), ep.wait_idle()).await;
}

fn refused(e: SendError) -> Refused {
    match e {
        SendError::UnknownStream => Refused::Gone,
        SendError::Full => Refused::Full,
        _ => Refused::Invalid,
    }
}

impl Engine for Connection {
    fn send_head(&mut self, id: u64, status: u16, fields: sluice_http::HeadFields, end: bool) -> Result<(), Refused> {
        self.send_response(id, status, fields, end).map_err(refused)
    }

    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused> {
        Self::send_data(self, id, data, end).map_err(refused)
    }

    fn accepts_data(&self, id: u64) -> bool {
        // `send_data` refuses body bytes once the stream holds `max_buffered_per_stream`; a
        // gone stream is refused as such.
        self.send_capacity(id).is_none_or(|room| room > 0)
    }

    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused> {
        Self::send_trailers(self, id, fields).map_err(refused)
    }

    fn release(&mut self, _id: u64, _n: usize) {
        // QUIC returns stream credit as the reader task reads (see `Credit`).
    }

    fn fail(&mut self, id: u64) {
        self.reset(id, Code::H3_INTERNAL_ERROR);
    }

    fn priority(&mut self, id: u64, value: &[u8]) {
        // RFC 9218 §8: the handler's priority header, merged over the request's.
        if let Some(current) = Self::priority(self, id) {
            self.set_priority(id, sluice_h3::Priority::parse(value, current));
        }
    }

    fn buffered(&self, id: u64) -> Option<usize> {
        Self::buffered(self, id)
    }
}

/// Accept one connection, open its control and QPACK streams, and learn which certificate
/// it was served: the connection, its link to the in-flight bound, those streams, and what it
/// is served for. `None` (logged) when it does not get that far.
async fn handshake(
    incoming: quinn::Incoming,
    server: &quinn::ServerConfig,
    certs: &[Arc<ServedCert>],
    port: u16,
    state: &State,
) -> Option<(quinn::Connection, Option<Arc<PaceLink>>, Vec<SendStream>, Option<Served>)> {
    let peer = incoming.remote_address();
    let (config, pace) = for_peer(server, &state.cfg, peer);
    let connecting = match incoming.accept_with(Arc::new(config)) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, %e, "QUIC connection not accepted");
            return None;
        }
    };
    let quic = match tokio::time::timeout(state.cfg.timeouts.header, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, %e, "QUIC handshake failed");
            crate::message::metrics::events().quic_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "QUIC handshake timed out");
            crate::message::metrics::events().quic_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
    };
    // RFC 9114 §6.2.1: each side opens its control stream (and here both QPACK streams) at once.
    let mut uni = Vec::with_capacity(3);
    for _ in 0..3 {
        match quic.open_uni().await {
            Ok(s) => uni.push(s),
            Err(e) => {
                tracing::debug!(%peer, %e, "cannot open the HTTP/3 control streams");
                return None;
            }
        }
    }
    // The certificate the client's SNI picked: its origins (RFC 9412) and the 421 rule.
    let sni = quic
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let served = Served::for_sni_with(certs, &crate::acme::shared().certs, sni.as_deref(), port);
    Some((quic, pace, uni, served))
}

/// Serve one QUIC connection: the handshake, then the driver's turns and the wait between
/// them.
async fn serve(
    incoming: quinn::Incoming,
    server: &quinn::ServerConfig,
    certs: &[Arc<ServedCert>],
    port: u16,
    state: Arc<State>,
    stop: crate::io::StopRx,
) {
    let Some((quic, pace, uni, served)) = handshake(incoming, server, certs, port, &state).await else { return };
    let _open = crate::message::metrics::Connection::open(crate::message::Proto::Http3);
    let now_stop = *stop.borrow();
    let mut d = Driver::new(quic.clone(), pace, uni, served, state, now_stop);
    // Streams the client opens are accepted here, not by a task of their own: one wake-up and
    // no channel message per request. Off once the connection refuses more. These futures, and
    // the stop and close watches, live across turns of the loop (a new one each turn cost
    // its set-up and its registration with quinn or tokio every time); each is replaced once it
    // has fired.
    let mut accepting = true;
    let mut accept_bi = std::pin::pin!(quic.accept_bi());
    let mut accept_uni = std::pin::pin!(quic.accept_uni());
    let mut stop_next = std::pin::pin!(crate::io::next_stop(stop));
    let mut closed = std::pin::pin!(quic.closed());
    // One timer for every deadline (see `io::arm`), as over HTTP/2.
    let mut timer = std::pin::pin!(tokio::time::sleep_until(tokio::time::Instant::now()));
    let mut timer_at: Option<tokio::time::Instant> = None;
    loop {
        if d.turn().is_break() {
            break;
        }
        let next = d.before_wait();
        crate::io::arm(timer.as_mut(), &mut timer_at, next);
        let notify = d.notify.clone();
        // The futures borrow the driver's parts; each branch's handler runs once they are gone,
        // with the whole driver.
        let step = tokio::select! {
            Some(input) = d.in_rx.recv() => {
                d.on_input(input);
                Step::Continue(())
            }
            Some(cmd) = d.cmd_rx.recv() => {
                d.on_command(cmd);
                Step::Continue(())
            }
            r = &mut accept_bi, if accepting => {
                accept_bi.set(quic.accept_bi());
                match r {
                    Ok((send, recv)) => d.input(Input::Bi(send, recv)),
                    Err(_) => accepting = false,
                }
                Step::Continue(())
            }
            r = &mut accept_uni, if accepting => {
                accept_uni.set(quic.accept_uni());
                match r {
                    Ok(recv) => d.input(Input::Uni(recv)),
                    Err(_) => accepting = false,
                }
                Step::Continue(())
            }
            _ = notify.notified() => {
                d.on_woken();
                Step::Continue(())
            }
            () = &mut timer, if timer_at.is_some() => {
                timer_at = None;
                d.on_timer()
            }
            (s, rx) = &mut stop_next, if d.drain_deadline.is_none() => {
                d.on_stop(s);
                stop_next.set(crate::io::next_stop(rx));
                Step::Continue(())
            }
            e = &mut closed => {
                tracing::debug!(peer = %d.peer, %e, "QUIC connection closed");
                Step::Break(())
            }
            // A handler that woke itself: polled on the next turn, after a trip through the
            // scheduler (see the HTTP/2 driver).
            () = tokio::task::yield_now(), if d.streams.has_ready() => Step::Continue(()),
        };
        if step.is_break() {
            break;
        }
    }
    d.finish().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_window_follows_the_congestion_window() {
        assert_eq!(send_window(14_720, 16_384), 2 * 14_720 + 65_536);
        assert_eq!(send_window(4_000_000, 16_384), 8_065_536);
        // Only changes of more than an eighth are passed on.
        assert!(worth_setting(0, 100_000));
        assert!(!worth_setting(800_000, 850_000));
        assert!(worth_setting(800_000, 950_000) && worth_setting(800_000, 650_000));
    }
}
