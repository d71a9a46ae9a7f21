//! `[[upstream]]` tables (the servers a site or route proxies to) and the `[proxy]` table
//! (which clients' forwarding fields are believed).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};

/// `[[upstream]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub(super) name: Spanned<String>,
    pub(super) servers: Spanned<Vec<Spanned<String>>>,
    pub(super) protocol: Option<Spanned<String>>,
    pub(super) balance: Option<Spanned<String>>,
    pub(super) hash_key: Option<Spanned<String>>,
    pub(super) host: Option<Spanned<String>>,
    pub(super) retries: Option<Spanned<u32>>,
    #[serde(default)]
    pub(super) timeouts: RawUpstreamTimeouts,
    #[serde(default)]
    pub(super) pool: RawPool,
    pub(super) tls: Option<Spanned<RawUpstreamTls>>,
    pub(super) health: Option<Spanned<RawHealth>>,
    #[serde(default)]
    pub(super) eject: RawEject,
    pub(super) early_hints_learn: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamTimeouts {
    pub(super) connect_secs: Option<Spanned<u64>>,
    pub(super) response_head_secs: Option<Spanned<u64>>,
    pub(super) idle_secs: Option<Spanned<u64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) max_idle: Option<usize>,
    pub(super) idle_secs: Option<Spanned<u64>>,
    pub(super) max_connections: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamTls {
    pub(super) ca: Option<Spanned<String>>,
    pub(super) sni: Option<Spanned<String>>,
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    pub(super) path: Option<Spanned<String>>,
    pub(super) interval_secs: Option<Spanned<u64>>,
    pub(super) timeout_secs: Option<Spanned<u64>>,
    pub(super) expect: Option<Spanned<u16>>,
    pub(super) passes: Option<Spanned<u32>>,
    pub(super) fails: Option<Spanned<u32>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEject {
    pub(super) failures: Option<u32>,
    pub(super) secs: Option<Spanned<u64>>,
}

/// `[proxy]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProxy {
    #[serde(default)]
    pub(super) trusted_proxies: Vec<Spanned<String>>,
}

/// Where an upstream server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerAddr {
    /// A TCP address; `host` is what was written (for SNI and logs).
    Tcp { host: String, port: u16 },
    /// A Unix-domain socket (`unix:/path`).
    Unix(PathBuf),
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Self::Tcp { host, port } => write!(f, "{host}:{port}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamServer {
    pub(crate) addr: ServerAddr,
    /// Relative share of requests (round-robin and hash), at least 1.
    pub(crate) weight: u32,
}

/// The protocol spoken to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamProto {
    /// HTTP/1.1 with a keep-alive pool (TLS when `[upstream.tls]` is given).
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`), multiplexed.
    H2,
    /// HTTP/2 over cleartext TCP with prior knowledge (RFC 9113 §3.3), multiplexed.
    H2c,
}

/// What a consistent hash is computed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HashKey {
    ClientIp,
    Header(http::HeaderName),
    Cookie(String),
}

/// How a server is chosen for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Balance {
    /// Smooth weighted round-robin.
    RoundRobin,
    /// The server with the fewest requests in progress (relative to its weight).
    LeastRequests,
    /// Weighted rendezvous hashing on a request key: a key keeps its server while that server
    /// is up, and only the keys of a server that goes away move.
    Hash(HashKey),
}

/// Upstream TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamTls {
    /// CA bundle (PEM) to verify the upstream with; `None`: the system's roots.
    pub(crate) ca: Option<PathBuf>,
    /// Server name sent and verified; `None`: the server's host as written.
    pub(crate) sni: Option<String>,
    /// Client certificate and key (PEM), for upstreams that ask for one.
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
}

/// Active health checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Health {
    pub(crate) path: String,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) expect: u16,
    /// Consecutive passes that bring a server back.
    pub(crate) passes: u32,
    /// Consecutive failures that take a server out.
    pub(crate) fails: u32,
}

/// A validated `[[upstream]]`.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub(crate) name: String,
    pub(crate) servers: Vec<UpstreamServer>,
    pub(crate) protocol: UpstreamProto,
    pub(crate) balance: Balance,
    /// `Host` (HTTP/1.1) or `:authority` (HTTP/2) sent upstream; `None`: the client's.
    pub(crate) host: Option<http::HeaderValue>,
    /// Further attempts a request may make where that is safe (see `proxy`).
    pub(crate) retries: u32,
    pub(crate) connect_timeout: Duration,
    /// From the request's end (or its head, for a streamed body) to the response head.
    pub(crate) response_head_timeout: Duration,
    /// Longest wait for the next body bytes in either direction.
    pub(crate) idle_timeout: Duration,
    /// Idle keep-alive connections kept per server.
    pub(crate) pool_max_idle: usize,
    /// How long an idle connection is kept (shortened by the upstream's `Keep-Alive: timeout`).
    pub(crate) pool_idle: Duration,
    /// Connections per server, busy or idle; 0 is no limit.
    pub(crate) max_connections: usize,
    pub(crate) tls: Option<UpstreamTls>,
    /// The TLS client configuration built from `tls` (loaded when the file is checked).
    pub(crate) tls_config: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub(crate) health: Option<Health>,
    /// Consecutive failed requests that eject a server (0: never), and for how long.
    pub(crate) eject_failures: u32,
    pub(crate) eject_for: Duration,
    /// Learn 103 Early Hints from this upstream's responses (`proxy::hints`).
    pub(crate) early_hints_learn: bool,
}

impl Upstream {
    /// Whether a reload may keep the running upstream (its pools, health, learned hints) for
    /// `other`: every setting is the same. The TLS client configuration is compared by what
    /// made it (`tls`): a CA file whose content changed under the same name takes a restart or
    /// a renamed file.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        let Self {
            name,
            servers,
            protocol,
            balance,
            host,
            retries,
            connect_timeout,
            response_head_timeout,
            idle_timeout,
            pool_max_idle,
            pool_idle,
            max_connections,
            tls,
            tls_config: _,
            health,
            eject_failures,
            eject_for,
            early_hints_learn,
        } = self;
        *name == other.name
            && *servers == other.servers
            && *protocol == other.protocol
            && *balance == other.balance
            && *host == other.host
            && *retries == other.retries
            && *connect_timeout == other.connect_timeout
            && *response_head_timeout == other.response_head_timeout
            && *idle_timeout == other.idle_timeout
            && *pool_max_idle == other.pool_max_idle
            && *pool_idle == other.pool_idle
            && *max_connections == other.max_connections
            && *tls == other.tls
            && *health == other.health
            && *eject_failures == other.eject_failures
            && *eject_for == other.eject_for
            && *early_hints_learn == other.early_hints_learn
    }
}

pub(crate) use sluice_http::forward::Cidr;

/// `[proxy]`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProxySettings {
    /// Clients whose `X-Forwarded-*` and `Forwarded` fields are kept and extended; from anyone
    /// else they are replaced.
    pub(crate) trusted: Vec<Cidr>,
}

impl ProxySettings {
    /// Whether `ip` is a trusted proxy (`Cidr::contains` takes an IPv4-mapped IPv6 address as
    /// its IPv4 one).
    pub(crate) fn trusts(&self, ip: std::net::IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }
}

pub(super) fn proxy_settings(src: &Source<'_>, raw: &RawProxy) -> Result<ProxySettings, ConfigError> {
    let trusted = raw
        .trusted_proxies
        .iter()
        .map(|s| parse_cidr(s.get_ref()).map_err(|e| src.err(s.span(), e)))
        .collect::<Result<_, _>>()?;
    Ok(ProxySettings { trusted })
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let net: IpAddr = ip.parse().map_err(|_| format!("`{s}` is not an IP address or network (`10.0.0.0/8`)"))?;
    let max = if net.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => return Err(format!("`{s}`: the prefix length must be 0 to {max}")),
        },
    };
    Ok(Cidr { net, len })
}

/// `"host:port"`, `"[v6]:port"` or `"unix:/path"`, then optionally ` weight=N`.
fn server(s: &str) -> Result<UpstreamServer, String> {
    let mut parts = s.split_whitespace();
    let addr = parts.next().ok_or("an empty server")?;
    let mut weight = 1;
    for p in parts {
        match p.strip_prefix("weight=").map(str::parse::<u32>) {
            Some(Ok(w)) if (1..=1000).contains(&w) => weight = w,
            Some(_) => return Err(format!("`{p}`: a weight is 1 to 1000")),
            None => return Err(format!("`{p}`: the only server option is `weight=N`")),
        }
    }
    let addr = if let Some(path) = addr.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("`{addr}`: a Unix socket path must be absolute"));
        }
        ServerAddr::Unix(PathBuf::from(path))
    } else if let Ok(sa) = addr.parse::<SocketAddr>() {
        ServerAddr::Tcp { host: sa.ip().to_string(), port: sa.port() }
    } else {
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("`{addr}` needs a port (`host:port`)"))?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| format!("`{addr}`: bad port"))?;
        if host.is_empty() || !host.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.') {
            return Err(format!("`{addr}`: `{host}` is not a host name or IP address"));
        }
        ServerAddr::Tcp { host: host.to_ascii_lowercase(), port }
    };
    Ok(UpstreamServer { addr, weight })
}

fn secs(v: Option<&Spanned<u64>>, default: u64, src: &Source<'_>, what: &str) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(Duration::from_secs(default)),
        Some(s) if *s.get_ref() == 0 || *s.get_ref() > 86_400 => {
            Err(src.err(s.span(), format!("`{what}` must be 1 to 86400 seconds")))
        }
        Some(s) => Ok(Duration::from_secs(*s.get_ref())),
    }
}

fn upstream(src: &Source<'_>, r: &Spanned<RawUpstream>) -> Result<Upstream, ConfigError> {
    let raw = r.get_ref();
    let name = raw.name.get_ref().clone();
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')) {
        return Err(src.err(raw.name.span(), "an upstream name is letters, digits, `-`, `_` and `.`"));
    }
    if raw.servers.get_ref().is_empty() {
        return Err(src.err(raw.servers.span(), "an upstream needs at least one server"));
    }
    let servers = raw
        .servers
        .get_ref()
        .iter()
        .map(|s| server(s.get_ref()).map_err(|e| src.err(s.span(), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let protocol = match raw.protocol.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
        None | Some(("http1", _)) => UpstreamProto::Http1,
        Some(("h2", _)) => UpstreamProto::H2,
        Some(("h2c", _)) => UpstreamProto::H2c,
        Some((other, span)) => {
            return Err(src.err(span, format!("unknown upstream protocol `{other}` (http1, h2 or h2c)")));
        }
    };
    let tls = match &raw.tls {
        None if protocol == UpstreamProto::H2 => Some(UpstreamTls { ca: None, sni: None, client_cert: None }),
        None => None,
        Some(t) if protocol == UpstreamProto::H2c => {
            return Err(src.err(t.span(), "`h2c` is HTTP/2 without TLS; use `protocol = \"h2\"` for HTTP/2 over TLS"));
        }
        Some(t) => {
            let tr = t.get_ref();
            let file = |f: &Spanned<String>| -> Result<PathBuf, ConfigError> {
                let p = src.path(f.get_ref());
                std::fs::metadata(&p).map_err(|e| src.err(f.span(), format!("`{}`: {e}", p.display())))?;
                Ok(p)
            };
            let client_cert = match (&tr.cert, &tr.key) {
                (Some(c), Some(k)) => Some((file(c)?, file(k)?)),
                (None, None) => None,
                _ => return Err(src.err(t.span(), "a client certificate needs both `cert` and `key`")),
            };
            if let Some(s) = &tr.sni {
                rustls::pki_types::ServerName::try_from(s.get_ref().as_str())
                    .map_err(|_| src.err(s.span(), "`sni` is not a DNS name or IP address"))?;
            }
            Some(UpstreamTls {
                ca: tr.ca.as_ref().map(file).transpose()?,
                sni: tr.sni.as_ref().map(|s| s.get_ref().clone()),
                client_cert,
            })
        }
    };
    let hash_key = match &raw.hash_key {
        None => HashKey::ClientIp,
        Some(k) => {
            let text = k.get_ref();
            if text == "client_ip" {
                HashKey::ClientIp
            } else if let Some(h) = text.strip_prefix("header:") {
                HashKey::Header(
                    http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes())
                        .map_err(|_| src.err(k.span(), format!("`{h}` is not a header field name")))?,
                )
            } else if let Some(c) = text.strip_prefix("cookie:").filter(|c| !c.is_empty()) {
                HashKey::Cookie(c.to_owned())
            } else {
                return Err(src.err(k.span(), "`hash_key` is `client_ip`, `header:NAME` or `cookie:NAME`"));
            }
        }
    };
    let balance = match raw.balance.as_ref().map(|b| (b.get_ref().as_str(), b.span())) {
        None | Some(("round_robin", _)) => Balance::RoundRobin,
        Some(("least_requests", _)) => Balance::LeastRequests,
        Some(("hash", _)) => Balance::Hash(hash_key),
        Some((other, span)) => {
            return Err(src.err(span, format!("unknown `balance` `{other}` (round_robin, least_requests or hash)")));
        }
    };
    if let Some(k) = raw.hash_key.as_ref().filter(|_| !matches!(balance, Balance::Hash(_))) {
        return Err(src.err(k.span(), "`hash_key` needs `balance = \"hash\"`"));
    }
    let host = match &raw.host {
        None => None,
        Some(h) if sluice_http::valid_authority(&h.get_ref().to_ascii_lowercase()) => {
            Some(http::HeaderValue::from_str(h.get_ref()).map_err(|_| src.err(h.span(), "not a valid `host`"))?)
        }
        Some(h) => return Err(src.err(h.span(), format!("`{}` is not a host[:port]", h.get_ref()))),
    };
    let health = match &raw.health {
        None => None,
        Some(h) => {
            let hr = h.get_ref();
            let path = hr.path.as_ref().map_or_else(|| "/".to_owned(), |p| p.get_ref().clone());
            if !path.starts_with('/') || path.bytes().any(|c| c <= b' ' || c == 0x7f) {
                return Err(src.err(hr.path.as_ref().unwrap().span(), "a health-check path starts with `/`"));
            }
            let count = |v: &Option<Spanned<u32>>, d: u32, what: &str| match v {
                Some(n) if !(1..=100).contains(n.get_ref()) => Err(src.err(n.span(), format!("`{what}` is 1 to 100"))),
                Some(n) => Ok(*n.get_ref()),
                None => Ok(d),
            };
            let expect = match &hr.expect {
                Some(e) if !(100..=599).contains(e.get_ref()) => {
                    return Err(src.err(e.span(), "`expect` is an HTTP status code"));
                }
                Some(e) => *e.get_ref(),
                None => 200,
            };
            Some(Health {
                path,
                interval: secs(hr.interval_secs.as_ref(), 5, src, "interval_secs")?,
                timeout: secs(hr.timeout_secs.as_ref(), 2, src, "timeout_secs")?,
                expect,
                passes: count(&hr.passes, 2, "passes")?,
                fails: count(&hr.fails, 3, "fails")?,
            })
        }
    };
    let retries = match &raw.retries {
        Some(n) if *n.get_ref() > 10 => return Err(src.err(n.span(), "`retries` is 0 to 10")),
        Some(n) => *n.get_ref(),
        None => 1,
    };
    let tls_config = match &tls {
        None => None,
        Some(t) => Some(
            sluice_tls::client_config(
                t.ca.as_deref(),
                t.client_cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
                match protocol {
                    UpstreamProto::H2 => &[b"h2"],
                    _ => &[b"http/1.1"],
                },
            )
            .map_err(|e| src.err(raw.tls.as_ref().map_or(r.span(), Spanned::span), e))?,
        ),
    };
    Ok(Upstream {
        name,
        servers,
        protocol,
        balance,
        host,
        retries,
        connect_timeout: secs(raw.timeouts.connect_secs.as_ref(), 5, src, "connect_secs")?,
        response_head_timeout: secs(raw.timeouts.response_head_secs.as_ref(), 60, src, "response_head_secs")?,
        idle_timeout: secs(raw.timeouts.idle_secs.as_ref(), 60, src, "idle_secs")?,
        pool_max_idle: raw.pool.max_idle.unwrap_or(256),
        pool_idle: secs(raw.pool.idle_secs.as_ref(), 30, src, "pool.idle_secs")?,
        max_connections: raw.pool.max_connections.unwrap_or(0),
        tls,
        tls_config,
        health,
        eject_failures: raw.eject.failures.unwrap_or(5),
        eject_for: secs(raw.eject.secs.as_ref(), 30, src, "eject.secs")?,
        early_hints_learn: raw.early_hints_learn.unwrap_or(true),
    })
}

pub(super) fn upstreams(src: &Source<'_>, raw: &[Spanned<RawUpstream>]) -> Result<Vec<Upstream>, ConfigError> {
    let mut out: Vec<Upstream> = Vec::with_capacity(raw.len());
    for r in raw {
        let u = upstream(src, r)?;
        if out.iter().any(|o| o.name == u.name) {
            return Err(src.err(r.get_ref().name.span(), format!("upstream `{}` is defined twice", u.name)));
        }
        out.push(u);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_and_weights() {
        let s = server("127.0.0.1:9000 weight=3").unwrap();
        assert_eq!(s.addr, ServerAddr::Tcp { host: "127.0.0.1".into(), port: 9000 });
        assert_eq!(s.weight, 3);
        assert_eq!(server("[::1]:80").unwrap().addr, ServerAddr::Tcp { host: "::1".into(), port: 80 });
        assert_eq!(
            server("App.Internal:8080").unwrap().addr,
            ServerAddr::Tcp { host: "app.internal".into(), port: 8080 }
        );
        assert_eq!(server("unix:/run/app.sock").unwrap().addr, ServerAddr::Unix("/run/app.sock".into()));
        for bad in ["127.0.0.1", "a:0", "a:x", "unix:rel", "a b:1", "h:1 weight=0", "h:1 weight=x", "h:1 w=2", ""] {
            assert!(server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn networks() {
        let c = parse_cidr("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        let one = parse_cidr("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()) && !one.contains("::2".parse().unwrap()));
        assert!(parse_cidr("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
        for bad in ["10.0.0.0/33", "x", "10.0.0.0/", "::/129"] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }
}
