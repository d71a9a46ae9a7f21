//! QUIC endpoint settings the client and the server share: datagram size and MTU discovery.

use std::net::SocketAddr;

/// Largest UDP payload Sluice sends or accepts over QUIC. quinn hands the kernel up to ten
/// datagrams per GSO call, and the kernel refuses a GSO send larger than one UDP datagram
/// (65,507 bytes of payload over IPv4) with EMSGSIZE, which quinn-udp drops silently as it
/// would a too-large MTU probe; ten of these stay below that.
pub const MAX_UDP_PAYLOAD: u16 = 6_500;

/// quinn's endpoint settings: datagrams up to [`MAX_UDP_PAYLOAD`] are accepted, and the
/// `max_udp_payload_size` transport parameter (RFC 9000 §18.2) tells the peer so; quinn's
/// default, 1,472, would cap the peer's MTU discovery at Ethernet's size on any path.
/// quinn sizes each endpoint's receive buffer from it (GRO batches: 13 MB instead of 3).
pub fn endpoint_config() -> quinn::EndpointConfig {
    let mut ep = quinn::EndpointConfig::default();
    // Invariant: MAX_UDP_PAYLOAD is within quinn's 1200..=65527.
    let _ = ep.max_udp_payload_size(MAX_UDP_PAYLOAD);
    ep
}

/// MTU discovery (quinn's DPLPMTUD, RFC 8899) up to what the route to `peer` can carry: its
/// MTU less the IP and UDP headers, at most [`MAX_UDP_PAYLOAD`]. On loopback (MTU 65,536)
/// this means 6,500-byte datagrams instead of quinn's default ceiling of 1,452: each datagram
/// has a fixed cost (packet assembly, encryption set-up, ACK bookkeeping) that dominates at
/// high rates. On an Ethernet route the ceiling is the Ethernet payload, so no probe is sent
/// that the first hop cannot carry. A route the kernel will not describe keeps quinn's default.
pub fn mtu_discovery(peer: SocketAddr) -> quinn::MtuDiscoveryConfig {
    let mut mtud = quinn::MtuDiscoveryConfig::default();
    if let Ok(mtu) = sluice_sys::sock::route_mtu(peer) {
        // IPv4 header 20 bytes, IPv6 40, UDP 8.
        let headers = if peer.ip().to_canonical().is_ipv4() { 28 } else { 48 };
        let payload = mtu.saturating_sub(headers).min(u32::from(MAX_UDP_PAYLOAD));
        // Below QUIC's minimum (RFC 9000 §14) there is nothing to discover.
        if payload >= 1200 {
            mtud.upper_bound(payload as u16);
        }
    }
    mtud
}
