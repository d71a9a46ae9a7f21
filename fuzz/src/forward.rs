//! The reverse proxy's field translation (`sluice_http::forward`): whatever fields a client or
//! an upstream sends, what crosses the proxy holds no hop-by-hop field (RFC 9110 §7.6.1), at
//! most `te: trailers`, exactly one `X-Forwarded-For` and one `Forwarded` (ending with this hop),
//! our `Via` last, and one `Cookie` when joined for HTTP/1.1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sluice_http::forward::{self, Cidr, Forwarding, Received};

const HOP: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "proxy-authenticate"];

/// Raw input: byte 0 holds flags (bit 0 TLS, bit 1 join cookies, bits 2-3 the protocol, bit 4
/// the client is a trusted proxy), then `name: value` lines (a field that `http` cannot hold is
/// skipped, as the server refuses such requests before the proxy).
pub fn run(data: &[u8]) {
    let [flags, rest @ ..] = data else { return };
    let mut h = HeaderMap::new();
    for line in rest.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let name = line[..colon].to_ascii_lowercase();
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(&name), HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    let named: Vec<HeaderName> = h
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().to_ascii_lowercase().as_bytes()).ok())
        .collect();
    let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)), 4000);
    let trusted = [Cidr { net: peer.ip(), len: 32 }];
    let f = Forwarding {
        peer,
        tls: flags & 1 != 0,
        proto: [Received::Http1, Received::Http2, Received::Http3, Received::Http2][usize::from(flags >> 2 & 3)],
        authority: "app.example:8443",
        trusted: if flags & 16 != 0 { &trusted } else { &[] },
    };
    let join = flags & 2 != 0;
    let mut response = h.clone();
    let out = forward::request(h, &f, join);
    check_hop_by_hop(&out, &named);
    assert_eq!(out.get_all("x-forwarded-for").iter().count(), 1);
    let xff = out["x-forwarded-for"].as_bytes();
    assert!(xff == b"192.0.2.9" || xff.ends_with(b", 192.0.2.9"), "{xff:?}");
    assert_eq!(out.get_all("forwarded").iter().count(), 1);
    assert!(out["forwarded"].as_bytes().windows(19).any(|w| w == b"for=192.0.2.9;proto"));
    assert!(out.get_all("via").iter().last().is_some_and(|v| v.as_bytes().ends_with(b" sluice")));
    if join {
        assert!(out.get_all("cookie").iter().count() <= 1);
    }
    forward::response(&mut response, http::Version::HTTP_11);
    check_hop_by_hop(&response, &named);
    assert!(!response.contains_key("te"));
}

fn check_hop_by_hop(h: &HeaderMap, named: &[HeaderName]) {
    for n in HOP {
        assert!(!h.contains_key(n), "{n} crossed the proxy");
    }
    for n in named {
        assert!(n == "te" || !h.contains_key(n), "{n}, named in Connection, crossed the proxy");
    }
    for v in h.get_all("te") {
        assert_eq!(v, "trailers");
    }
}
