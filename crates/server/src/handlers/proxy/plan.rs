//! Phase one of a proxied request: what goes upstream. The fields that cross
//! (`sluice_http::forward`: hop-by-hop ones removed, the forwarding fields added), the
//! authority and target, the framing of the body, whether a WebSocket upgrade goes along, and
//! for an HTTP/2 upstream its request as a map. A request that cannot be forwarded as sent is
//! answered 400 here, before any upstream is asked.

use std::borrow::Cow;

use http::{HeaderValue, Method, StatusCode};

use crate::config::{ProxySettings, Upstream as UpstreamCfg, UpstreamProto};
use crate::message::{Proto, Request, Response};
use sluice_http::forward as headers;

/// What goes upstream, worked out once for every attempt.
pub(super) struct Plan<'a> {
    pub(super) method: Method,
    /// The client's fields as they cross.
    pub(super) fields: headers::RequestPlan<'a>,
    /// What goes upstream as `host` (`:authority`).
    pub(super) authority: &'a [u8],
    /// Path and query.
    pub(super) target: Cow<'a, str>,
    /// A WebSocket handshake's `Upgrade` value, passed on (HTTP/1.1 upstreams only).
    pub(super) upgrade: Option<HeaderValue>,
    /// An extended CONNECT for a WebSocket (RFC 8441) made an HTTP/1.1 handshake (RFC 6455
    /// §4.1): the `Sec-WebSocket-Key` Sluice sends (HTTP/2 has none of its own).
    pub(super) websocket_key: Option<String>,
    /// The client announced trailers: the body goes chunked (RFC 9112 §7.1.2).
    pub(super) trailer: bool,
    /// The body's declared length, when it goes with one.
    pub(super) declared: Option<u64>,
    /// For an HTTP/2 upstream, the request's scheme and fields as the client engine takes them
    /// (boxed: most upstreams are HTTP/1.1, and these would grow every proxied request's plan).
    pub(super) h2: Option<Box<H2Head>>,
}

/// What an HTTP/2 upstream's request head holds besides the method, authority and target.
pub(super) struct H2Head {
    pub(super) scheme: &'static str,
    /// Lower-case names, no connection-specific fields, no `host` (`:authority` says it).
    pub(super) fields: Vec<(String, String)>,
}

impl<'a> Plan<'a> {
    /// The plan for `req` to the upstream of `cfg`; `upgradable`: the client's HTTP/1.1
    /// connection can become a tunnel (hyper's `OnUpgrade` is there). `Err` says why the
    /// request cannot be forwarded as sent (a 400, [`Plan::refusal`]).
    pub(super) fn new(
        cfg: &'a UpstreamCfg,
        req: &'a Request,
        settings: &'a ProxySettings,
        upgradable: bool,
    ) -> Result<Self, &'static str> {
        let to_h1 = cfg.protocol == UpstreamProto::Http1;
        let fwd = headers::Forwarding {
            peer: req.peer,
            tls: req.tls,
            proto: match req.proto {
                Proto::Http1 => headers::Received::Http1,
                Proto::Http2 => headers::Received::Http2,
                Proto::Http3 => headers::Received::Http3,
            },
            authority: &req.authority,
            trusted: &settings.trusted,
            // Kept from a trusted proxy, else made here (and in the access log).
            request_id: req.exchange.request_id(&req.headers, settings.trusts(req.peer.ip())).as_bytes(),
        };
        let fields = headers::RequestPlan::new(&req.headers, &fwd, to_h1);
        // What goes upstream as `host` (`:authority`): the upstream's `host`, else the
        // client's, if it can be a field value (checked in place, not copied into one; an
        // empty one can: RFC 9112 §3.2 sends `Host` empty for a target without an authority).
        let authority: &[u8] = match &cfg.host {
            Some(h) => h.as_bytes(),
            None if sluice_http::map_value(req.authority.as_bytes()) => req.authority.as_bytes(),
            None => return Err("a request to proxy needs an authority"),
        };
        let target: Cow<'_, str> = match &req.query {
            Some(q) => format!("{}?{q}", req.path).into(),
            None => req.path.as_str().into(),
        };
        // An HTTP/1.1 WebSocket handshake (RFC 6455 §4.1) to an HTTP/1.1 upstream passes on,
        // and the upstream's 101 turns both connections into a tunnel. No other upgrade does
        // (`h2c` would make the connection a tunnel past per-request routing: h2c smuggling);
        // `Upgrade` is hop-by-hop, so without this it goes nowhere. (The map is looked up only
        // for such a request.)
        let upgrade = if to_h1 && upgradable && headers::connection_has(&req.headers, "upgrade") {
            headers::websocket_upgrade(&req.headers).cloned()
        } else if req.websocket {
            if !to_h1 {
                return Err("a WebSocket over HTTP/2 reaches HTTP/1.1 upstreams only");
            }
            Some(HeaderValue::from_static("websocket"))
        } else {
            None
        };
        let websocket_key = req.websocket.then(websocket_key);
        // Request trailers need chunked framing over HTTP/1.1 (RFC 9112 §7.1.2).
        // (The plan saw which of these the client sent: no lookup for an absent one.)
        let trailer = to_h1 && fields.has_trailer() && fields.kept(&http::header::TRAILER);
        let length = if fields.has_length() && !trailer && fields.kept(&http::header::CONTENT_LENGTH) {
            req.headers.get(http::header::CONTENT_LENGTH)
        } else {
            None
        };
        // The engines checked it; a length that does not parse would go upstream as a field
        // while the body went chunked (two framings for one message: RFC 9112 §6.3 point 3).
        let declared = match length.map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok())) {
            Some(Some(n)) => Some(n),
            Some(None) => return Err("an invalid content-length"),
            None => None,
        };
        let h2 = if to_h1 {
            // The target goes on the request line as it is: visible ASCII only (RFC 9112
            // §3.2). Every byte looked at (no early stop): checked many at a time.
            if target.bytes().fold(false, |bad, b| bad | !(0x21..=0x7e).contains(&b)) {
                return Err("the request target cannot be forwarded");
            }
            None
        } else {
            let mut map = fields.to_map();
            map.remove(http::header::HOST);
            // Sluice forwards trailers to every client, so it asks for them; gRPC servers
            // require `te: trailers` over HTTP/2.
            map.insert(http::header::TE, HeaderValue::from_static("trailers"));
            let scheme = if cfg.protocol == UpstreamProto::H2 { "https" } else { "http" };
            if std::str::from_utf8(authority).is_err() || target.is_empty() {
                return Err("the request target cannot be forwarded");
            }
            let mut list = Vec::with_capacity(map.len());
            for (n, v) in &map {
                // The client engine takes text; a value that is not UTF-8 (obs-text, RFC 9110
                // §5.5) is refused rather than changed.
                let Ok(v) = std::str::from_utf8(v.as_bytes()) else {
                    return Err("a field value that cannot be forwarded over HTTP/2");
                };
                list.push((n.as_str().to_owned(), v.to_owned()));
            }
            Some(Box::new(H2Head { scheme, fields: list }))
        };
        // The handshake is a GET without a body; the stream's bytes go through the tunnel.
        let (method, declared) = if req.websocket { (http::Method::GET, None) } else { (req.method.clone(), declared) };
        Ok(Self { method, fields, authority, target, upgrade, websocket_key, trailer, declared, h2 })
    }

    /// The client's answer to a request [`Plan::new`] refused.
    pub(super) fn refusal(why: &str) -> Response {
        Response::text(StatusCode::BAD_REQUEST, format!("{why}\n"))
    }

    /// An HTTP/1.1 upstream's request head, written straight from the plan, no map between.
    pub(super) fn write_h1_head(&self, out: &mut Vec<u8>) {
        use sluice_http::h1::field;
        sluice_http::h1::request_line(&self.method, &self.target, out);
        // A WebSocket handshake made from an extended CONNECT has no body: a length the client
        // declared would have the upstream read the tunnel's first bytes as one.
        let drop_length = self.trailer || self.websocket_key.is_some();
        self.fields.each(|n, v| {
            // The proxy's own `te`, `host` and framing replace the client's.
            if *n == http::header::TE || *n == http::header::HOST || (drop_length && *n == http::header::CONTENT_LENGTH)
            {
                return;
            }
            field(out, n.as_str().as_bytes(), v.as_bytes());
        });
        match &self.upgrade {
            Some(u) => {
                field(out, b"upgrade", u.as_bytes());
                field(out, b"connection", b"upgrade");
                if let Some(k) = &self.websocket_key {
                    field(out, b"sec-websocket-key", k.as_bytes());
                }
            }
            // Sluice forwards trailers to every client, so it asks for them (RFC 9110 §10.1.4:
            // with the `TE` connection option over HTTP/1.1).
            None => {
                field(out, b"te", b"trailers");
                field(out, b"connection", b"te");
            }
        }
        field(out, b"host", self.authority);
    }
}

/// A `Sec-WebSocket-Key`: 16 bytes, base64 (RFC 6455 §4.1). A nonce the upstream answers
/// with its hash, not a secret: the standard library's randomly keyed hasher makes it.
fn websocket_key() -> String {
    use base64::Engine;
    use std::hash::{BuildHasher, Hasher};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
