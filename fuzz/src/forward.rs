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
/// the client is a trusted proxy, bit 5 the proxy sends its own `X-Request-Id`), then `name: value` lines (a field that `http` cannot hold is
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
        request_id: if flags & 32 != 0 { b"0123456789abcdef" } else { b"" },
    };
    let join = flags & 2 != 0;
    let mut response = h.clone();
    let tls = f.tls;
    let out = forward::request(&h, &f, join);
    check_hop_by_hop(&out, &named);
    // The client's X-Request-Id never crosses: only the proxy's own, when it gives one.
    let ids: Vec<&[u8]> = out.get_all("x-request-id").iter().map(HeaderValue::as_bytes).collect();
    let want: &[&[u8]] = if flags & 32 != 0 { &[b"0123456789abcdef"] } else { &[] };
    assert_eq!(ids, want, "x-request-id sent upstream");
    // A field the proxy sets for the next hop may be named in Connection too: the client's
    // values go, the proxy's own stand alone.
    for n in &named {
        let values: Vec<&[u8]> = out.get_all(n).iter().map(HeaderValue::as_bytes).collect();
        let own = match n.as_str() {
            "x-forwarded-for" => values == [b"192.0.2.9"],
            "x-forwarded-proto" => values == [if tls { &b"https"[..] } else { b"http" }],
            "x-forwarded-host" => values == [b"app.example:8443"],
            "forwarded" => values.len() == 1 && values[0].starts_with(b"for=192.0.2.9;proto="),
            "via" => values.len() == 1 && values[0].ends_with(b" sluice"),
            "x-request-id" => values.is_empty() || values == [b"0123456789abcdef"],
            _ => true,
        };
        assert!(own, "{n}, named in Connection, crossed the proxy: {values:?}");
    }
    assert_eq!(out.get_all("x-forwarded-for").iter().count(), 1);
    let xff = out["x-forwarded-for"].as_bytes();
    assert!(xff == b"192.0.2.9" || xff.ends_with(b", 192.0.2.9"), "{xff:?}");
    assert_eq!(out.get_all("forwarded").iter().count(), 1);
    assert!(out["forwarded"].as_bytes().windows(19).any(|w| w == b"for=192.0.2.9;proto"));
    assert!(out.get_all("via").iter().last().is_some_and(|v| v.as_bytes().ends_with(b" sluice")));
    if join {
        assert!(out.get_all("cookie").iter().count() <= 1);
    }
    // The HTTP/1.1 client's form of a response (fields, not a map) loses the same fields.
    let mut fields =
        sluice_http::PackedFields::copied(response.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())));
    forward::response(&mut response, http::Version::HTTP_11);
    forward::response_fields(&mut fields, http::Version::HTTP_11);
    let mut as_map: Vec<(Vec<u8>, Vec<u8>)> =
        response.iter().map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    let mut as_fields: Vec<(Vec<u8>, Vec<u8>)> = fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
    as_map.sort();
    as_fields.sort();
    assert_eq!(as_map, as_fields, "the two forms of a forwarded response differ");
    check_hop_by_hop(&response, &named);
    if named.iter().any(|n| n == "via") {
        assert_eq!(response.get_all("via").iter().count(), 1, "an upstream's Via named in Connection crossed");
    }
    assert!(!response.contains_key("te"));
}

/// Fields the proxy sets itself for the next hop (checked apart, in `run`).
const OWN: [&str; 5] = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "via"];

fn check_hop_by_hop(h: &HeaderMap, named: &[HeaderName]) {
    for n in HOP {
        assert!(!h.contains_key(n), "{n} crossed the proxy");
    }
    for n in named {
        let exempt = n == "te" || OWN.contains(&n.as_str());
        assert!(exempt || !h.contains_key(n), "{n}, named in Connection, crossed the proxy");
    }
    for v in h.get_all("te") {
        assert_eq!(v, "trailers");
    }
}
