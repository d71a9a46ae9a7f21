//! The forward proxy (`[connect]`): CONNECT (RFC 9110 §9.3.6) opens a TCP tunnel, over
//! HTTP/1.1 (the connection becomes the tunnel after the 200), HTTP/2 (RFC 9113 §8.5) and
//! HTTP/3 (RFC 9114 §4.4) (the request stream does); CONNECT-UDP (RFC 9298) a UDP one
//! ([`udp`]). Every tunnel is checked in the same order: credentials (`Proxy-Authorization`
//! Basic against bcrypt hashes, 407), the destination's syntax (400), the budgets (tunnels in
//! total and per connection, 503), the allow-list by name, then by every address the name
//! resolves to (403), and only then a socket: to the address that was checked (a second
//! lookup could answer differently). Loopback, link-local, unspecified, multicast and the
//! machine's own addresses are refused unless a network entry of the list covers them: a name
//! entry alone does not. A tunnel ends when either side closes, when nothing moves for
//! `idle_secs`, or when a write waits that long (a peer that never reads); its end writes one
//! log line with the bytes each way.

pub(crate) mod udp;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http::{HeaderValue, StatusCode};

use crate::config::connect::{canonical, Connect};
use crate::handlers::pipe;
use crate::message::{Body, Proto, Request, RequestBody, Response};

/// The forward proxy of one configuration.
pub(crate) struct Tunnels {
    cfg: Connect,
    /// The machine's own addresses (refused unless a network entry lists them).
    own: Vec<IpAddr>,
    /// `Proxy-Authorization` values that verified, and their user: bcrypt is slow on purpose
    /// (tens of milliseconds), so a client's every tunnel does not pay it again.
    verified: Mutex<HashMap<HeaderValue, String>>,
    /// Verifications running at once: a flood of wrong passwords costs at most this many
    /// cores' worth of bcrypt; the rest wait.
    verifying: tokio::sync::Semaphore,
}

/// Verified credentials remembered; past this the memory is cleared.
const VERIFIED_MAX: usize = 1024;

/// What kind of tunnel, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Udp,
}

impl Kind {
    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        ["tcp", "udp"][self.index()]
    }
}

/// Why a tunnel was refused, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    Credentials,
    BadTarget,
    Budget,
    NotAllowed,
    Dns,
    Connect,
}

const REFUSALS: [(Refused, &str); 6] = [
    (Refused::Credentials, "credentials"),
    (Refused::BadTarget, "bad_target"),
    (Refused::Budget, "budget"),
    (Refused::NotAllowed, "not_allowed"),
    (Refused::Dns, "dns"),
    (Refused::Connect, "connect"),
];

/// Tunnel counters, across configurations (a reload does not reset the total budget).
struct Counts {
    open: [AtomicI64; 2],
    opened: [AtomicU64; 2],
    refused: [AtomicU64; REFUSALS.len()],
    /// Bytes by kind and direction (0: client to destination, 1: back).
    bytes: [[AtomicU64; 2]; 2],
    /// UDP payloads dropped: a full queue, or too large for a QUIC datagram.
    dropped: AtomicU64,
    /// Tunnels open now, of every kind: the total budget.
    total: AtomicUsize,
}

fn counts() -> &'static Counts {
    static C: std::sync::OnceLock<Counts> = std::sync::OnceLock::new();
    C.get_or_init(|| Counts {
        open: Default::default(),
        opened: Default::default(),
        refused: Default::default(),
        bytes: Default::default(),
        dropped: AtomicU64::new(0),
        total: AtomicUsize::new(0),
    })
}

fn refused(r: Refused) {
    if let Some(i) = REFUSALS.iter().position(|(k, _)| *k == r) {
        counts().refused[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// UDP payloads dropped by a tunnel.
pub(crate) fn dropped(n: u64) {
    counts().dropped.fetch_add(n, Ordering::Relaxed);
}

/// The tunnel metrics, for the admin listener's `/metrics`.
pub(crate) fn families() -> Vec<crate::message::metrics::Family> {
    use crate::message::metrics::{Family, Members};
    let c = counts();
    let kinds = |v: &[AtomicU64; 2]| -> Vec<_> {
        (0..2).map(|k| (vec![("kind", ["tcp", "udp"][k].to_owned())], v[k].load(Ordering::Relaxed))).collect()
    };
    let mut bytes = Vec::new();
    for (k, kind) in ["tcp", "udp"].iter().enumerate() {
        for (d, dir) in ["to_destination", "to_client"].iter().enumerate() {
            bytes.push((
                vec![("kind", (*kind).to_owned()), ("direction", (*dir).to_owned())],
                c.bytes[k][d].load(Ordering::Relaxed),
            ));
        }
    }
    vec![
        Family {
            name: "tunnels_open",
            help: "Forward-proxy tunnels open (CONNECT: tcp; CONNECT-UDP: udp)",
            members: Members::Gauges(
                (0..2)
                    .map(|k| (vec![("kind", ["tcp", "udp"][k].to_owned())], c.open[k].load(Ordering::Relaxed)))
                    .collect(),
            ),
        },
        Family { name: "tunnels", help: "Forward-proxy tunnels opened", members: Members::Counters(kinds(&c.opened)) },
        Family {
            name: "tunnels_refused",
            help: "CONNECT and CONNECT-UDP requests refused, by reason",
            members: Members::Counters(
                REFUSALS
                    .iter()
                    .enumerate()
                    .map(|(i, (_, n))| (vec![("reason", (*n).to_owned())], c.refused[i].load(Ordering::Relaxed)))
                    .collect(),
            ),
        },
        Family {
            name: "tunnel_bytes",
            help: "Bytes carried by forward-proxy tunnels (UDP: payloads), by direction",
            members: Members::Counters(bytes),
        },
        Family {
            name: "tunnel_udp_dropped",
            help: "UDP payloads a tunnel dropped (a full queue, or larger than a QUIC datagram)",
            members: Members::Counters(vec![(Vec::new(), c.dropped.load(Ordering::Relaxed))]),
        },
    ]
}

/// One open tunnel: its place in the budgets, its counters; its end is logged and counted
/// when this drops.
pub(crate) struct Open {
    kind: Kind,
    proto: Proto,
    peer: SocketAddr,
    user: Option<String>,
    target: String,
    addr: SocketAddr,
    started: Instant,
    conn: Option<Arc<AtomicU32>>,
    pub(crate) moved: Arc<pipe::Moved>,
    /// The destination's socket was opened: the end is logged and counted (a refusal after
    /// the budgets only gives its place back).
    established: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        let c = counts();
        c.total.fetch_sub(1, Ordering::Relaxed);
        c.open[self.kind.index()].fetch_sub(1, Ordering::Relaxed);
        if let Some(n) = &self.conn {
            n.fetch_sub(1, Ordering::Relaxed);
        }
        if !self.established {
            return;
        }
        let (up, down) = self.moved.get();
        c.bytes[self.kind.index()][0].fetch_add(up, Ordering::Relaxed);
        c.bytes[self.kind.index()][1].fetch_add(down, Ordering::Relaxed);
        tracing::info!(
            kind = self.kind.name(),
            protocol = %self.proto,
            peer = %self.peer,
            user = self.user.as_deref().unwrap_or("-"),
            target = %self.target,
            addr = %self.addr,
            bytes_to_destination = up,
            bytes_to_client = down,
            secs = format_args!("{:.3}", self.started.elapsed().as_secs_f64()),
            "tunnel closed"
        );
    }
}

/// A refusal: `status`, a short text, and RFC 9209's `Proxy-Status` with `error` when there
/// is one.
fn refuse(why: Refused, status: StatusCode, error: Option<&str>, text: String) -> Response {
    refused(why);
    let mut r = Response::text(status, text + "\n");
    if let Some(e) = error {
        if let Ok(v) = HeaderValue::from_str(&format!("sluice; error={e}")) {
            r.headers.insert("proxy-status", v);
        }
    }
    r
}

impl Tunnels {
    pub(crate) fn new(cfg: &Connect) -> Self {
        let own = sluice_sys::net::local_addresses().unwrap_or_else(|e| {
            tracing::warn!(%e, "the machine's addresses could not be listed: only loopback and link-local are refused by default");
            Vec::new()
        });
        Self {
            cfg: cfg.clone(),
            own: own.into_iter().map(canonical).collect(),
            verified: Mutex::new(HashMap::new()),
            verifying: tokio::sync::Semaphore::new(2),
        }
    }

    /// Answer a CONNECT or CONNECT-UDP request (`req.connect` is set).
    pub(crate) async fn serve(&self, req: &mut Request) -> Response {
        let Some(mut parts) = req.connect.take() else {
            return Response::text(StatusCode::INTERNAL_SERVER_ERROR, "not a CONNECT\n");
        };
        let kind = if parts.udp { Kind::Udp } else { Kind::Tcp };
        if kind == Kind::Udp && !self.cfg.udp {
            return Response::text(StatusCode::NOT_IMPLEMENTED, "CONNECT-UDP is off here ([connect] udp = false)\n");
        }
        if kind == Kind::Udp && req.proto == Proto::Http1 {
            return Response::text(StatusCode::NOT_IMPLEMENTED, "CONNECT-UDP is served over HTTP/2 and HTTP/3\n");
        }
        let user = match self.authenticate(req).await {
            Ok(u) => u,
            Err(r) => return r,
        };
        let target = match kind {
            Kind::Tcp => authority_target(&req.authority),
            Kind::Udp => udp::path_target(&req.path),
        };
        let Some((host, port)) = target else {
            let text = match kind {
                Kind::Tcp => "CONNECT names host:port".to_owned(),
                Kind::Udp => "CONNECT-UDP's path is /.well-known/masque/udp/{host}/{port}/".to_owned(),
            };
            return refuse(Refused::BadTarget, StatusCode::BAD_REQUEST, None, text);
        };
        // The budgets, before any lookup or socket.
        let c = counts();
        if c.total.fetch_add(1, Ordering::Relaxed) >= self.cfg.max_tunnels {
            c.total.fetch_sub(1, Ordering::Relaxed);
            crate::message::metrics::limit(crate::message::metrics::Limit::Tunnels);
            let mut r = refuse(Refused::Budget, StatusCode::SERVICE_UNAVAILABLE, None, "too many tunnels open".into());
            r.headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        let conn = parts.conn_tunnels.take();
        if let Some(n) = &conn {
            if n.fetch_add(1, Ordering::Relaxed) >= self.cfg.max_tunnels_per_connection {
                n.fetch_sub(1, Ordering::Relaxed);
                c.total.fetch_sub(1, Ordering::Relaxed);
                crate::message::metrics::limit(crate::message::metrics::Limit::Tunnels);
                return refuse(
                    Refused::Budget,
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    "too many tunnels open on this connection".into(),
                );
            }
        }
        c.open[kind.index()].fetch_add(1, Ordering::Relaxed);
        let mut open = Open {
            kind,
            proto: req.proto,
            peer: req.peer,
            user,
            target: format!("{}:{port}", if host.contains(':') { format!("[{host}]") } else { host.clone() }),
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            started: Instant::now(),
            conn,
            moved: pipe::moved(),
            established: false,
        };
        let addrs = match self.destinations(&host, port).await {
            Ok(a) => a,
            Err(r) => return r,
        };
        match kind {
            Kind::Tcp => self.open_tcp(req, open, &addrs).await,
            Kind::Udp => {
                let Some(sock) = udp::bind(&addrs).await else {
                    return refuse(
                        Refused::Connect,
                        StatusCode::BAD_GATEWAY,
                        Some("destination_unavailable"),
                        format!("no UDP socket to {}", open.target),
                    );
                };
                open.addr = sock.peer_addr().unwrap_or(open.addr);
                open.established = true;
                c.opened[kind.index()].fetch_add(1, Ordering::Relaxed);
                let body = std::mem::replace(&mut req.body, RequestBody::empty());
                udp::serve(sock, body, parts.datagrams.take(), open, &self.cfg)
            }
        }
    }

    /// The user of the request's `Proxy-Authorization` (`None` without `credentials`), or the
    /// 407 to answer.
    async fn authenticate(&self, req: &Request) -> Result<Option<String>, Response> {
        let Some(creds) = &self.cfg.credentials else { return Ok(None) };
        let challenge = || {
            let mut r = refuse(
                Refused::Credentials,
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                None,
                "proxy authentication required".into(),
            );
            r.headers.insert(
                http::header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"sluice\", charset=\"UTF-8\""),
            );
            r
        };
        let Some(value) = req.headers.get(http::header::PROXY_AUTHORIZATION) else { return Err(challenge()) };
        if let Some(u) = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(value) {
            return Ok(Some(u.clone()));
        }
        let Some((user, password)) = basic(value) else { return Err(challenge()) };
        let Some(hash) = creds.users.get(&user).cloned() else { return Err(challenge()) };
        let Ok(_permit) = self.verifying.acquire().await else { return Err(challenge()) };
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if !ok {
            tracing::info!(peer = %req.peer, user = ?user, "proxy credentials refused");
            return Err(challenge());
        }
        let mut v = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if v.len() >= VERIFIED_MAX {
            v.clear();
        }
        v.insert(value.clone(), user.clone());
        Ok(Some(user))
    }

    /// The addresses `host` may be reached at on `port`, in the resolver's order, or the
    /// refusal (403 off the list, 502 when the name does not resolve).
    async fn destinations(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Response> {
        let ports = |a: &crate::config::connect::Allow| a.ports.0 <= port && port <= a.ports.1;
        let literal = host.parse::<IpAddr>().ok();
        let by_name = literal.is_none() && self.cfg.allow.iter().any(|a| ports(a) && a.host.names(host));
        let nets =
            self.cfg.allow.iter().any(|a| ports(a) && matches!(a.host, crate::config::connect::AllowHost::Net(..)));
        let off_list = || {
            tracing::info!(host, port, "tunnel refused: destination not on [connect] allow");
            refuse(
                Refused::NotAllowed,
                StatusCode::FORBIDDEN,
                Some("destination_ip_prohibited"),
                format!("{host}:{port} is not a permitted destination"),
            )
        };
        // A name no entry could admit is not even looked up (lookups leak where clients go).
        if !by_name && !nets {
            return Err(off_list());
        }
        let resolved: Vec<SocketAddr> = match literal {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => match tokio::time::timeout(self.cfg.connect_timeout, tokio::net::lookup_host((host, port))).await {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => {
                    return Err(refuse(
                        Refused::Dns,
                        StatusCode::BAD_GATEWAY,
                        Some("dns_error"),
                        format!("{host} does not resolve: {e}"),
                    ))
                }
                Err(_) => {
                    return Err(refuse(
                        Refused::Dns,
                        StatusCode::GATEWAY_TIMEOUT,
                        Some("dns_timeout"),
                        format!("{host}: lookup timed out"),
                    ))
                }
            },
        };
        let permitted: Vec<SocketAddr> =
            resolved.into_iter().filter(|a| self.permitted(by_name, port, a.ip())).collect();
        if permitted.is_empty() {
            return Err(off_list());
        }
        Ok(permitted)
    }

    /// Whether address `ip` may be a destination on `port`; `by_name`: the name asked for is
    /// on the list.
    fn permitted(&self, by_name: bool, port: u16, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let by_net = self.cfg.allow.iter().any(|a| a.ports.0 <= port && port <= a.ports.1 && a.host.contains(ip));
        if special(ip) || self.own.contains(&ip) {
            return by_net;
        }
        by_name || by_net
    }

    /// Connect to the first address that answers and make the tunnel.
    async fn open_tcp(&self, req: &mut Request, mut open: Open, addrs: &[SocketAddr]) -> Response {
        let deadline = tokio::time::Instant::now() + self.cfg.connect_timeout;
        let mut last = None;
        let mut tcp = None;
        for a in addrs {
            match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    open.addr = *a;
                    tcp = Some(s);
                    break;
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => {
                    return refuse(
                        Refused::Connect,
                        StatusCode::GATEWAY_TIMEOUT,
                        Some("connection_timeout"),
                        format!("connecting to {} timed out", open.target),
                    )
                }
            }
        }
        let Some(tcp) = tcp else {
            let e = last.map_or_else(|| "no address".to_owned(), |e| e.to_string());
            return refuse(
                Refused::Connect,
                StatusCode::BAD_GATEWAY,
                Some("connection_refused"),
                format!("connecting to {} failed: {e}", open.target),
            );
        };
        let _ = tcp.set_nodelay(true);
        open.established = true;
        counts().opened[Kind::Tcp.index()].fetch_add(1, Ordering::Relaxed);
        let idle = self.cfg.idle;
        if req.proto == Proto::Http1 {
            // The connection itself, once hyper has written the 200.
            let Some(upgrade) = req.upgrade.take() else {
                return Response::text(StatusCode::INTERNAL_SERVER_ERROR, "no connection to tunnel\n");
            };
            tokio::spawn(async move {
                if let Ok(up) = upgrade.await {
                    let moved = open.moved.clone();
                    pipe::splice(hyper_util::rt::TokioIo::new(up), tcp, bytes::Bytes::new(), idle, &moved).await;
                }
                drop(open);
            });
            return Response::new(StatusCode::OK, http::HeaderMap::new(), Body::Empty);
        }
        let body = std::mem::replace(&mut req.body, RequestBody::empty());
        let (side, body) = pipe::stream_side(body);
        tokio::spawn(async move {
            let moved = open.moved.clone();
            pipe::splice(side, tcp, bytes::Bytes::new(), idle, &moved).await;
            drop(open);
        });
        Response::new(StatusCode::OK, http::HeaderMap::new(), body)
    }
}

/// Addresses refused as destinations unless a network entry lists them: loopback,
/// unspecified, link-local (RFC 3927, RFC 4291 §2.5.6), multicast and broadcast.
fn special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.is_loopback() || a.is_unspecified() || a.is_link_local() || a.is_multicast() || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            a.is_loopback() || a.is_unspecified() || a.is_multicast() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// `host:port` of a CONNECT's authority (RFC 9110 §9.3.6: the port is required); an IPv6
/// address comes out without its brackets. The host is lower-case already.
fn authority_target(authority: &str) -> Option<(String, u16)> {
    let (host, port) = authority.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            v6.parse::<std::net::Ipv6Addr>().ok()?;
            v6
        }
        None if host.contains(':') || host.is_empty() => return None,
        None => host,
    };
    Some((host.to_owned(), port))
}

/// User and password of a `Basic` credential (RFC 7617).
fn basic(v: &HeaderValue) -> Option<(String, String)> {
    use base64::Engine;
    let v = v.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(token.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::connect::{Allow, AllowHost};

    fn tunnels(allow: Vec<Allow>) -> Tunnels {
        let cfg = Connect {
            allow,
            credentials: None,
            udp: true,
            max_tunnels: 10,
            max_tunnels_per_connection: 2,
            idle: std::time::Duration::from_secs(1),
            connect_timeout: std::time::Duration::from_secs(1),
            udp_buffer: 1 << 16,
        };
        let mut t = Tunnels::new(&cfg);
        t.own = vec!["192.0.2.7".parse().unwrap()];
        t
    }

    #[test]
    fn special_and_own_addresses_need_a_network_entry() {
        let name = Allow { host: AllowHost::Name("svc.example".into()), ports: (443, 443) };
        let t = tunnels(vec![name.clone()]);
        assert!(t.permitted(true, 443, "203.0.113.5".parse().unwrap()));
        for ip in
            ["127.0.0.1", "::1", "169.254.1.1", "fe80::1", "0.0.0.0", "224.0.0.1", "192.0.2.7", "::ffff:127.0.0.1"]
        {
            assert!(!t.permitted(true, 443, ip.parse().unwrap()), "{ip} passed by name alone");
        }
        let t = tunnels(vec![name, Allow { host: AllowHost::Net("127.0.0.0".parse().unwrap(), 8), ports: (1, 65535) }]);
        assert!(t.permitted(false, 9000, "127.0.0.1".parse().unwrap()));
        assert!(t.permitted(true, 443, "::ffff:127.0.0.2".parse().unwrap()));
        assert!(!t.permitted(false, 443, "203.0.113.5".parse().unwrap()), "a name not asked for");
        assert!(!t.permitted(true, 80, "::1".parse().unwrap()));
    }

    #[test]
    fn connect_targets_need_a_port() {
        assert_eq!(authority_target("example.com:443"), Some(("example.com".into(), 443)));
        assert_eq!(authority_target("[::1]:8080"), Some(("::1".into(), 8080)));
        for bad in ["example.com", "example.com:0", "::1:80", "[zz]:80", ":80", "a:b"] {
            assert_eq!(authority_target(bad), None, "{bad}");
        }
    }

    #[test]
    fn basic_credentials_decode() {
        let v = HeaderValue::from_static("Basic YWxpY2U6czNjcjN0OndpdGg6Y29sb25z");
        assert_eq!(basic(&v), Some(("alice".into(), "s3cr3t:with:colons".into())));
        assert_eq!(basic(&HeaderValue::from_static("Bearer abc")), None);
        assert_eq!(basic(&HeaderValue::from_static("Basic !!!")), None);
    }
}
