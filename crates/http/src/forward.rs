//! The fields a proxied request and response carry: hop-by-hop fields removed (RFC 9110
//! §7.6.1), `Via` added (§7.6.3), the client described to the upstream in `X-Forwarded-*` and
//! `Forwarded` (RFC 7239), cookie crumbs joined for HTTP/1.1 (RFC 9113 §8.2.3). Pure functions
//! over `HeaderMap`s, tested here and fuzzed (`fuzz/fuzz_targets/proxy_fields.rs`).

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The protocol a message was received on, for `Via`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// HTTP/1.0 or HTTP/1.1.
    Http1,
    /// HTTP/2.
    Http2,
    /// HTTP/3.
    Http3,
}

/// A network and prefix length: a client address inside it is a trusted proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network's address.
    pub net: IpAddr,
    /// Its prefix length.
    pub len: u8,
}

impl Cidr {
    /// Whether `ip` is inside (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.len == 0 { 0 } else { u32::MAX << (32 - u32::from(self.len.min(32))) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.len == 0 { 0 } else { u128::MAX << (128 - u32::from(self.len.min(128))) };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Connection-specific fields (RFC 9110 §7.6.1, RFC 9113 §8.2.2) that never cross a proxy.
/// `te` is handled apart: `te: trailers` is kept (gRPC asks for trailers with it).
/// `HTTP2-Settings` belongs to an `Upgrade: h2c` (RFC 7540 §3.2.1, gone from RFC 9113), which a
/// proxy must not pass on (the h2c-smuggling pattern): it goes even when `Connection` does not
/// name it.
static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("http2-settings"),
];

/// The `Connection` field's options (RFC 9110 §7.6.1), as sent (compared without case),
/// without copying them: this runs for every proxied exchange, twice.
fn connection_options(h: &HeaderMap) -> impl Iterator<Item = &[u8]> + '_ {
    h.get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Whether the `Connection` field names `option` (`close`, `upgrade`, ...; case-insensitive).
pub fn connection_has(h: &HeaderMap, option: &str) -> bool {
    connection_options(h).any(|t| t.eq_ignore_ascii_case(option.as_bytes()))
}

/// The `Upgrade` value of a request that asks for a WebSocket (RFC 6455 §4.1: `websocket`,
/// compared without case, alone in the field), the only upgrade a proxy should pass on and
/// tunnel: `h2c` or anything else would turn the connection into a tunnel that no longer
/// goes through per-request routing. `None` for every other request.
pub fn websocket_upgrade(h: &HeaderMap) -> Option<&HeaderValue> {
    let mut values = h.get_all(header::UPGRADE).iter();
    let v = values.next()?;
    let only = values.next().is_none();
    (only && v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"websocket")).then_some(v)
}

/// Fields a trailer section must not carry (RFC 9110 §6.5.1): those whose meaning is needed
/// before the content (framing, routing, request modifiers, authentication, cookies, response
/// controls, the content's format) and the connection-specific ones. A sender must not
/// generate them in trailers; a proxy that receives them drops them rather than pass them on
/// to a recipient that might merge them into the header section (RFC 9110 §6.5.2).
const FORBIDDEN_IN_TRAILERS: [&str; 32] = [
    "content-length",
    "transfer-encoding",
    "trailer",
    "host",
    "expect",
    "max-forwards",
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "te",
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
    "cookie",
    "set-cookie",
    "cache-control",
    "expires",
    "pragma",
    "age",
    "date",
    "location",
    "retry-after",
    "vary",
    "content-encoding",
    "content-type",
    "content-range",
    "connection",
    "upgrade",
];

/// Remove from a trailer section the fields that may not be trailers
/// ([`FORBIDDEN_IN_TRAILERS`]) and the hop-by-hop ones.
pub fn strip_forbidden_trailers(t: &mut HeaderMap) {
    strip_hop_by_hop(t);
    // A `te` kept by `strip_hop_by_hop` (`te: trailers`) is a request modifier: gone too.
    if t.keys().any(|n| FORBIDDEN_IN_TRAILERS.contains(&n.as_str())) {
        let names: Vec<HeaderName> =
            t.keys().filter(|n| FORBIDDEN_IN_TRAILERS.contains(&n.as_str())).cloned().collect();
        for n in names {
            t.remove(n);
        }
    }
}

/// Remove the hop-by-hop fields, the ones `Connection` names included. (`Proxy-Authorization`
/// is meant for a proxy that authenticates; Sluice does not, so it is passed on, as nginx does.)
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    // One pass over the names first: most messages carry none of these fields, and each
    // removal below is a lookup (about 2,000 instructions per proxied exchange for nothing).
    // Which of the fixed names are there, as bits of HOP_BY_HOP's positions: only those are
    // removed.
    let (mut present, mut te) = (0u8, false);
    for n in h.keys() {
        // By name, in HOP_BY_HOP's order (a string match costs less than six name comparisons).
        match n.as_str() {
            "te" => te = true,
            "connection" => present |= 1,
            "keep-alive" => present |= 2,
            "proxy-connection" => present |= 4,
            "transfer-encoding" => present |= 8,
            "upgrade" => present |= 16,
            "proxy-authenticate" => present |= 32,
            "http2-settings" => present |= 64,
            _ => {}
        }
    }
    if present == 0 && !te {
        return;
    }
    // Only a `Connection` field names more (HOP_BY_HOP[0]).
    if present & 1 != 0 {
        // `close` names no field and `keep-alive` goes below anyway: the usual options cost
        // no lookup. (`HeaderName::from_bytes` lower-cases.)
        let named: Vec<HeaderName> = connection_options(h)
            .filter(|t| !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
            .filter_map(|t| HeaderName::from_bytes(t).ok())
            .collect();
        for n in &named {
            h.remove(n);
        }
    }
    for (i, n) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            h.remove(n);
        }
    }
    let te_trailers = h
        .get_all(header::TE)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))));
    h.remove(header::TE);
    if te_trailers {
        h.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// What the forwarding fields say about a request.
pub struct Forwarding<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the client's connection is TLS.
    pub tls: bool,
    /// The protocol the request came on.
    pub proto: Received,
    /// The authority the client asked for.
    pub authority: &'a str,
    /// Clients whose forwarding fields are extended instead of replaced.
    pub trusted: &'a [Cidr],
    /// The request's `X-Request-Id` sent upstream (valid field-value bytes; empty: none). The
    /// client's goes either way: the proxy decides whether this is the client's value.
    pub request_id: &'a [u8],
}

/// Write a `Forwarded` node for `ip` (RFC 7239 §6: IPv6 in brackets, quoted).
fn write_node(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => push_v4(out, v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => push_v4(out, v4),
            // Writes to a Vec cannot fail.
            None => {
                let _ = write!(out, "\"[{v6}]\"");
            }
        },
    }
}

/// An IPv4 address in dotted decimal, written without the formatting machinery (it runs for
/// every proxied request).
fn push_v4(out: &mut Vec<u8>, v4: std::net::Ipv4Addr) {
    for (i, o) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        if o >= 100 {
            out.push(b'0' + o / 100);
        }
        if o >= 10 {
            out.push(b'0' + o / 10 % 10);
        }
        out.push(b'0' + o % 10);
    }
}

/// `prior` (a trusted proxy's values) with `, ` after it, appended to `out`, to append an
/// element to.
fn list(out: &mut Vec<u8>, prior: Option<Vec<u8>>) {
    if let Some(p) = prior {
        out.extend_from_slice(&p);
        out.extend_from_slice(b", ");
    }
}

/// A value of a field that crosses the proxy: the client's, or one this hop made.
#[derive(Debug, Clone, Copy)]
pub enum FieldValue<'a> {
    /// The client's value, as it came.
    Client(&'a HeaderValue),
    /// A value made here (valid field-value bytes).
    Own(&'a [u8]),
}

impl FieldValue<'_> {
    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Client(v) => v.as_bytes(),
            Self::Own(b) => b,
        }
    }
}

const XFF: HeaderName = HeaderName::from_static("x-forwarded-for");
const XFP: HeaderName = HeaderName::from_static("x-forwarded-proto");
const XFH: HeaderName = HeaderName::from_static("x-forwarded-host");
const XRID: HeaderName = HeaderName::from_static("x-request-id");

/// The fields of a request sent upstream, worked out once from the client's without copying
/// them: hop-by-hop fields go (the fixed ones, `te` but for `te: trailers`, and the ones
/// `Connection` names), `Via` and the forwarding fields are set, cookies are joined into one
/// field when `join_cookies` (HTTP/1.1 upstreams). `host` is not touched here (the proxy sets
/// it per upstream protocol). [`RequestPlan::each`] gives the fields in order; [`request`]
/// collects them into a map, the HTTP/1.1 client writes them straight onto the wire.
pub struct RequestPlan<'h> {
    h: &'h HeaderMap,
    /// The options of `Connection`: the client's fields of these names go.
    named: Vec<&'h [u8]>,
    te_trailers: bool,
    keep_xfp: bool,
    keep_xfh: bool,
    xfh_valid: bool,
    authority: &'h str,
    tls: bool,
    /// The new `X-Forwarded-For` value (up to `xff_end`), then the new `Forwarded` value: one
    /// buffer for both.
    own: Vec<u8>,
    xff_end: usize,
    via: &'static str,
    request_id: &'h [u8],
    /// The joined `Cookie` value (HTTP/1.1 upstreams).
    cookie: Option<Vec<u8>>,
    join_cookies: bool,
    /// Whether the client sent `Content-Length`, `Trailer` (seen in the one pass over the
    /// names: the proxy asks, and a lookup by name costs more).
    has_length: bool,
    has_trailer: bool,
}

impl<'h> RequestPlan<'h> {
    /// The plan for the client's fields `h`.
    pub fn new(h: &'h HeaderMap, f: &Forwarding<'h>, join_cookies: bool) -> Self {
        // One pass over the names first: most requests carry none of `Connection`, `TE` and
        // `Cookie`, and a lookup by name costs more than looking at every name once.
        let (mut has_connection, mut has_te, mut has_cookie) = (false, false, false);
        let (mut has_length, mut has_trailer) = (false, false);
        for n in h.keys() {
            has_connection |= *n == header::CONNECTION;
            has_te |= *n == header::TE;
            has_cookie |= *n == header::COOKIE;
            has_length |= *n == header::CONTENT_LENGTH;
            has_trailer |= *n == header::TRAILER;
        }
        let named: Vec<&[u8]> = if has_connection { connection_options(h).collect() } else { Vec::new() };
        let is_named = |n: &HeaderName| named.iter().any(|o| o.eq_ignore_ascii_case(n.as_str().as_bytes()));
        let te_trailers = has_te
            && !is_named(&header::TE)
            && h.get_all(header::TE)
                .iter()
                .any(|v| v.as_bytes().split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers")));
        let ip = match f.peer.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(f.peer.ip(), IpAddr::V4),
            v4 => v4,
        };
        let trusted = f.trusted.iter().any(|c| c.contains(ip));
        // From a client that is not a trusted proxy these fields are whatever it claims:
        // replaced. A trusted proxy's are extended (unless its `Connection` names them).
        let from_trusted = |n: &HeaderName| trusted && !is_named(n);
        let prior_xff = if from_trusted(&XFF) { joined(h, &XFF) } else { None };
        let prior_fwd = if from_trusted(&header::FORWARDED) { joined(h, &header::FORWARDED) } else { None };
        let keep_xfp = from_trusted(&XFP) && h.contains_key(&XFP);
        let keep_xfh = from_trusted(&XFH) && h.contains_key(&XFH);
        let scheme = if f.tls { "https" } else { "http" };
        // Values are joined as bytes: a trusted proxy's obs-text passes unchanged.
        let mut own = Vec::with_capacity(
            128 + f.authority.len() + prior_xff.as_ref().map_or(0, Vec::len) + prior_fwd.as_ref().map_or(0, Vec::len),
        );
        list(&mut own, prior_xff);
        let ip_at = own.len();
        match ip {
            IpAddr::V4(v4) => push_v4(&mut own, v4),
            IpAddr::V6(v6) => {
                let _ = write!(own, "{v6}");
            }
        }
        let xff_end = own.len();
        let fwd = &mut own;
        list(fwd, prior_fwd);
        fwd.extend_from_slice(b"for=");
        match ip {
            // The same dotted quad as in `X-Forwarded-For`: copied, not written again.
            IpAddr::V4(_) => fwd.extend_from_within(ip_at..xff_end),
            IpAddr::V6(_) => write_node(fwd, ip),
        }
        fwd.extend_from_slice(b";proto=");
        fwd.extend_from_slice(scheme.as_bytes());
        if quotable(f.authority) {
            // RFC 7239 §4: a value that is not a token is quoted; an authority with `:` is not one.
            fwd.extend_from_slice(b";host=\"");
            fwd.extend_from_slice(f.authority.as_bytes());
            fwd.push(b'"');
        }
        let cookie = if has_cookie && join_cookies && !is_named(&header::COOKIE) {
            joined_with(h, &header::COOKIE, b"; ")
        } else {
            None
        };
        // As `HeaderValue::from_str` would judge it, without making one.
        let xfh_valid = crate::map_value(f.authority.as_bytes());
        let via = match f.proto {
            Received::Http1 => "1.1 sluice",
            Received::Http2 => "2 sluice",
            Received::Http3 => "3 sluice",
        };
        Self {
            h,
            named,
            te_trailers,
            keep_xfp,
            keep_xfh,
            xfh_valid,
            authority: f.authority,
            tls: f.tls,
            own,
            xff_end,
            via,
            request_id: f.request_id,
            cookie,
            join_cookies,
            has_length,
            has_trailer,
        }
    }

    /// Whether the client sent `Content-Length`.
    pub fn has_length(&self) -> bool {
        self.has_length
    }

    /// Whether the client sent `Trailer`.
    pub fn has_trailer(&self) -> bool {
        self.has_trailer
    }

    /// Whether the client's fields named `n` cross as they are.
    pub fn kept(&self, n: &HeaderName) -> bool {
        if HOP_BY_HOP.contains(n) || *n == header::TE || *n == XFF || *n == header::FORWARDED || *n == XRID {
            return false;
        }
        if (*n == XFP && !self.keep_xfp) || (*n == XFH && !self.keep_xfh) || (*n == header::COOKIE && self.join_cookies)
        {
            return false;
        }
        !self.named.iter().any(|o| o.eq_ignore_ascii_case(n.as_str().as_bytes()))
    }

    /// Every field that crosses, in order: the client's that are kept, then those this hop
    /// sets (`te: trailers` when the client asked for trailers, the forwarding fields, `Via`,
    /// the joined `Cookie`).
    #[inline]
    pub fn each(&self, mut emit: impl FnMut(&HeaderName, FieldValue<'_>)) {
        // Most fields are kept: the name checks run once per name, not per value.
        let mut last: Option<(&HeaderName, bool)> = None;
        for (n, v) in self.h {
            let keep = match last {
                Some((l, k)) if l == n => k,
                _ => self.kept(n),
            };
            last = Some((n, keep));
            if keep {
                emit(n, FieldValue::Client(v));
            }
        }
        if self.te_trailers {
            emit(&header::TE, FieldValue::Own(b"trailers"));
        }
        emit(&XFF, FieldValue::Own(&self.own[..self.xff_end]));
        if !self.keep_xfp {
            emit(&XFP, FieldValue::Own(if self.tls { b"https" } else { b"http" }));
        }
        if !self.keep_xfh && self.xfh_valid {
            emit(&XFH, FieldValue::Own(self.authority.as_bytes()));
        }
        emit(&header::FORWARDED, FieldValue::Own(&self.own[self.xff_end..]));
        emit(&header::VIA, FieldValue::Own(self.via.as_bytes()));
        if !self.request_id.is_empty() {
            emit(&XRID, FieldValue::Own(self.request_id));
        }
        if let Some(c) = &self.cookie {
            emit(&header::COOKIE, FieldValue::Own(c));
        }
    }
}

/// The fields of the request sent upstream, from the client's, as a map ([`RequestPlan`]).
pub fn request(h: &HeaderMap, f: &Forwarding<'_>, join_cookies: bool) -> HeaderMap {
    RequestPlan::new(h, f, join_cookies).to_map()
}

impl RequestPlan<'_> {
    /// The fields, collected into a map (the client's values shared, not copied).
    pub fn to_map(&self) -> HeaderMap {
        // Room for the fields added here and the proxy's own (`te`, `host`) at once. (`try_`:
        // a map near its size limit grows as it goes instead of panicking here.)
        let mut out = HeaderMap::new();
        let _ = out.try_reserve(self.h.len() + 8);
        self.each(|n, v| match v {
            FieldValue::Client(v) => {
                out.append(n.clone(), v.clone());
            }
            FieldValue::Own(b) => {
                if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::copy_from_slice(b)) {
                    out.append(n.clone(), v);
                }
            }
        });
        out
    }
}

/// The fields of an upstream's response as sent to the client: hop-by-hop fields removed and
/// `Via` added.
pub fn response(h: &mut HeaderMap, upstream_proto: http::Version) {
    strip_hop_by_hop(h);
    h.remove(header::TE);
    h.append(
        header::VIA,
        HeaderValue::from_static(if upstream_proto == http::Version::HTTP_2 { "2 sluice" } else { "1.1 sluice" }),
    );
}

/// [`response`] for a response head held as [`PackedFields`](crate::PackedFields) (lower-case
/// names, as the HTTP/1.1 client parses them): the same fields go, `Via` is appended.
pub fn response_fields(fields: &mut crate::PackedFields, upstream_proto: http::Version) {
    // The fixed hop-by-hop names.
    const HOP: crate::packed::Names = crate::packed::Names::new(&[
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"upgrade",
        b"proxy-authenticate",
        // As `HOP_BY_HOP` (the map's path): hop-by-hop by RFC 7540 §3.2.1 wherever it comes.
        b"http2-settings",
    ]);
    const VIA_1: crate::packed::StaticField = (b"via", b"1.1 sluice");
    const VIA_2: crate::packed::StaticField = (b"via", b"2 sluice");
    // The options `Connection` names besides the usual two (which name no other field or one
    // that goes anyway). `Connection: keep-alive` (or `close`) alone, as nearly every HTTP/1.1
    // origin sends it, names nothing: no need to split and trim it.
    let usual = |v: &[u8]| v.eq_ignore_ascii_case(b"keep-alive") || v.eq_ignore_ascii_case(b"close");
    let named: Vec<Vec<u8>> = if fields.values(b"connection").any(|v| !usual(v)) {
        fields
            .values(b"connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
            .map(<[u8]>::to_ascii_lowercase)
            .collect()
    } else {
        Vec::new()
    };
    fields.remove(&HOP);
    if !named.is_empty() {
        fields.retain(|n, _| !named.iter().any(|o| o == n));
    }
    fields.push_static(if upstream_proto == http::Version::HTTP_2 { &VIA_2 } else { &VIA_1 });
}

/// Whether `a` can go inside a quoted string as it is (RFC 7230 qdtext: visible ASCII but `"`
/// and `\`).
fn quotable(a: &str) -> bool {
    // Every byte looked at (no early stop): checked many at a time.
    !a.is_empty() && !a.bytes().fold(false, |bad, c| bad | !(0x21..=0x7e).contains(&c) | (c == b'"') | (c == b'\\'))
}

/// Every value of `name` joined with `, `, or `None` when there is none.
fn joined(h: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    joined_with(h, name, b", ")
}

fn joined_with(h: &HeaderMap, name: &HeaderName, sep: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for v in h.get_all(name) {
        match &mut out {
            Some(o) => {
                o.extend_from_slice(sep);
                o.extend_from_slice(v.as_bytes());
            }
            None => out = Some(v.as_bytes().to_vec()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn fwd<'a>(peer: &str, trusted: &'a [Cidr]) -> Forwarding<'a> {
        Forwarding {
            peer: peer.parse().unwrap(),
            tls: true,
            proto: Received::Http2,
            authority: "app.example",
            trusted,
            request_id: b"",
        }
    }

    #[test]
    fn the_request_id_sent_is_the_proxy_s_own_whatever_the_client_sent() {
        let h = map(&[("x-request-id", "from-the-client"), ("x-a", "1")]);
        let mut f = fwd("192.0.2.1:5000", &[]);
        f.request_id = b"0123456789abcdef";
        let out = request(&h, &f, false);
        let ids: Vec<_> = out.get_all("x-request-id").iter().collect();
        assert_eq!(ids, ["0123456789abcdef"]);
        // None given: none sent, the client's neither.
        let out = request(&h, &fwd("192.0.2.1:5000", &[]), false);
        assert!(out.get("x-request-id").is_none());
    }

    #[test]
    fn ipv4_addresses_are_written_as_display_writes_them() {
        for ip in ["0.0.0.0", "255.255.255.255", "10.0.100.9", "192.0.2.1", "1.22.203.4"] {
            let v4: std::net::Ipv4Addr = ip.parse().unwrap();
            let mut out = Vec::new();
            push_v4(&mut out, v4);
            assert_eq!(out, ip.as_bytes());
        }
    }

    #[test]
    fn trailers_lose_the_fields_that_may_not_be_trailers() {
        let mut t = HeaderMap::new();
        for (n, v) in [
            ("x-checksum", "abc"),
            ("content-length", "5"),
            ("host", "evil.example"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("authorization", "Basic eDp5"),
            ("grpc-status", "0"),
            ("content-type", "text/html"),
            ("set-cookie", "a=1"),
        ] {
            t.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        strip_forbidden_trailers(&mut t);
        let left: Vec<&str> = t.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-checksum", "grpc-status"]);
    }

    #[test]
    fn only_a_websocket_upgrade_is_one_to_pass_on() {
        let map = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (n, v) in pairs {
                h.append(*n, HeaderValue::from_static(v));
            }
            h
        };
        assert!(websocket_upgrade(&map(&[("upgrade", "websocket")])).is_some());
        assert!(websocket_upgrade(&map(&[("upgrade", " WebSocket ")])).is_some());
        for bad in [
            &[("upgrade", "h2c")][..],
            &[("upgrade", "websocket, h2c")],
            &[("upgrade", "websocket"), ("upgrade", "h2c")],
            &[],
        ] {
            assert!(websocket_upgrade(&map(bad)).is_none(), "{bad:?}");
        }
        // HTTP2-Settings goes whatever `Connection` says.
        let mut h = map(&[("http2-settings", "AAMAAABkAAQAAP__"), ("x-a", "1")]);
        strip_hop_by_hop(&mut h);
        assert!(h.get("http2-settings").is_none() && h.get("x-a").is_some());
    }

    #[test]
    fn hop_by_hop_fields_and_the_ones_connection_names_are_removed() {
        let mut h = map(&[
            ("connection", "close, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip, trailers"),
            ("x-kept", "yes"),
        ]);
        assert!(connection_has(&h, "close") && connection_has(&h, "X-Secret") && !connection_has(&h, "upgrade"));
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, vec!["x-kept", "te"]);
        assert_eq!(h["te"], "trailers");
        let mut h = map(&[("te", "gzip")]);
        strip_hop_by_hop(&mut h);
        assert!(h.is_empty());
        // Each fixed name on its own (the bits found by name must match HOP_BY_HOP's order).
        for n in &HOP_BY_HOP {
            let mut h = map(&[(n.as_str(), "x"), ("x-kept", "yes")]);
            strip_hop_by_hop(&mut h);
            let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
            assert_eq!(names, vec!["x-kept"], "{n}");
        }
    }

    #[test]
    fn the_plan_knows_whether_the_client_sent_a_length_and_a_trailer() {
        for (pairs, length, trailer) in [
            (&[("accept", "*/*")][..], false, false),
            (&[("content-length", "5"), ("accept", "*/*")][..], true, false),
            (&[("Trailer", "x-sum"), ("x-a", "1")][..], false, true),
            (&[("x-a", "1"), ("trailer", "x-sum"), ("content-length", "0")][..], true, true),
        ] {
            let h = map(pairs);
            let plan = RequestPlan::new(&h, &fwd("192.0.2.1:1", &[]), true);
            assert_eq!((plan.has_length(), plan.has_trailer()), (length, trailer), "{pairs:?}");
            assert_eq!(plan.has_length(), h.contains_key(header::CONTENT_LENGTH));
        }
    }

    #[test]
    fn forwarding_fields_from_an_untrusted_client_are_replaced() {
        let h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "evil.example"),
            ("forwarded", "for=6.6.6.6"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
        ]);
        let out = request(&h, &fwd("192.0.2.7:5555", &[]), true);
        assert_eq!(out["x-forwarded-for"], "192.0.2.7");
        assert_eq!(out["x-forwarded-proto"], "https");
        assert_eq!(out["x-forwarded-host"], "app.example");
        assert_eq!(out["forwarded"], "for=192.0.2.7;proto=https;host=\"app.example\"");
        assert_eq!(out["via"], "2 sluice");
        assert_eq!(out.get_all("cookie").iter().count(), 1);
        assert_eq!(out["cookie"], "a=1; b=2");
    }

    #[test]
    fn forwarding_fields_from_a_trusted_proxy_are_extended() {
        let trusted = [Cidr { net: "10.0.0.0".parse().unwrap(), len: 8 }];
        let h = map(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-proto", "http"),
            ("forwarded", "for=203.0.113.9"),
            ("via", "1.1 edge"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
        ]);
        let out = request(&h, &fwd("[::ffff:10.1.1.1]:1", &trusted), false);
        assert_eq!(out["x-forwarded-for"], "203.0.113.9, 10.1.1.1");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out["forwarded"], "for=203.0.113.9, for=10.1.1.1;proto=https;host=\"app.example\"");
        let via: Vec<_> = out.get_all("via").iter().collect();
        assert_eq!(via, vec!["1.1 edge", "2 sluice"]);
        // Not joined for an HTTP/2 upstream.
        assert_eq!(out.get_all("cookie").iter().count(), 2);
        // IPv6 clients are quoted in `Forwarded`.
        let out = request(&HeaderMap::new(), &fwd("[2001:db8::1]:1", &[]), true);
        assert_eq!(out["forwarded"], "for=\"[2001:db8::1]\";proto=https;host=\"app.example\"");
        assert_eq!(out["x-forwarded-for"], "2001:db8::1");
    }

    #[test]
    fn fields_a_trusted_proxys_connection_names_are_replaced_not_extended() {
        let trusted = [Cidr { net: "10.0.0.0".parse().unwrap(), len: 8 }];
        let h = map(&[
            ("connection", "X-Forwarded-Proto, via, te, cookie"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-for", "203.0.113.9"),
            ("via", "1.1 edge"),
            ("te", "trailers"),
            ("cookie", "a=1"),
            ("x-kept", "1"),
            ("x-kept", "2"),
        ]);
        let plan = RequestPlan::new(&h, &fwd("10.1.1.1:1", &trusted), true);
        assert!(plan.kept(&HeaderName::from_static("x-kept")) && !plan.kept(&header::VIA));
        let mut seen = Vec::new();
        plan.each(|n, v| seen.push(format!("{n}: {}", String::from_utf8_lossy(v.as_bytes()))));
        assert_eq!(
            seen,
            [
                "x-kept: 1",
                "x-kept: 2",
                "x-forwarded-for: 203.0.113.9, 10.1.1.1",
                "x-forwarded-proto: https",
                "x-forwarded-host: app.example",
                "forwarded: for=10.1.1.1;proto=https;host=\"app.example\"",
                "via: 2 sluice",
            ]
        );
        // The map holds the same.
        let out = request(&h, &fwd("10.1.1.1:1", &trusted), true);
        assert_eq!(out.len(), seen.len());
    }

    #[test]
    fn a_response_as_fields_loses_what_the_map_loses() {
        let pairs = [
            ("connection", "Keep-Alive, X-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-authenticate", "Basic"),
            ("via", "1.1 origin"),
            ("content-type", "text/plain"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ];
        let mut map = map(&pairs);
        response(&mut map, http::Version::HTTP_11);
        let packed = |pairs: &[(&'static str, &'static str)]| {
            crate::PackedFields::copied(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
        };
        let mut fields = packed(&pairs);
        response_fields(&mut fields, http::Version::HTTP_11);
        let from_map: Vec<(String, String)> =
            map.iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned())).collect();
        let from_fields: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        assert_eq!(
            from_fields,
            [
                ("via", "1.1 origin"),
                ("content-type", "text/plain"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
                ("via", "1.1 sluice")
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        let mut sorted_map = from_map;
        let mut sorted_fields = from_fields;
        sorted_map.sort();
        sorted_fields.sort();
        assert_eq!(sorted_map, sorted_fields);
        // `Connection: keep-alive` alone names nothing; an option in a second `Connection`
        // field still goes.
        let names = |pairs: &[(&'static str, &'static str)]| {
            let mut fields = packed(pairs);
            response_fields(&mut fields, http::Version::HTTP_11);
            fields.iter().map(|(n, _)| String::from_utf8_lossy(n).into_owned()).collect::<Vec<_>>()
        };
        let usual = [("connection", "Keep-Alive"), ("x-a", "1"), ("content-length", "2")];
        assert_eq!(names(&usual), ["x-a", "content-length", "via"]);
        let second = [("connection", "close"), ("x-a", "1"), ("connection", "x-a"), ("x-b", "2")];
        assert_eq!(names(&second), ["x-b", "via"]);
        // Both forms drop HTTP2-Settings (found by the proxy_fields fuzz target).
        assert_eq!(names(&[("cookiq", "a=2"), ("http2-settings", "6.6.6")]), ["cookiq", "via"]);
    }

    #[test]
    fn responses_lose_hop_by_hop_fields() {
        let mut h = map(&[("connection", "keep-alive"), ("keep-alive", "timeout=5, max=100"), ("content-length", "3")]);
        response(&mut h, http::Version::HTTP_11);
        assert!(!h.contains_key("keep-alive") && !h.contains_key("connection"));
        assert_eq!(h["content-length"], "3");
        assert_eq!(h["via"], "1.1 sluice");
        let mut h = map(&[("x", "y")]);
        response(&mut h, http::Version::HTTP_2);
        assert_eq!(h["via"], "2 sluice");
    }
}
