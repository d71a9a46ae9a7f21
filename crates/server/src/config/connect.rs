//! `[connect]`: Sluice as a forward proxy for CONNECT (RFC 9110 §9.3.6, TCP tunnels) and
//! CONNECT-UDP (RFC 9298), off unless the section lists where tunnels may go. See
//! docs/configuration.md#connect.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};

/// `[connect]`, validated.
#[derive(Debug, Clone)]
pub(crate) struct Connect {
    /// Where tunnels may go.
    pub(crate) allow: Vec<Allow>,
    /// `Proxy-Authorization: Basic` users and their bcrypt hashes; `None`: no authentication.
    pub(crate) credentials: Option<Credentials>,
    /// CONNECT-UDP (RFC 9298) too, not only CONNECT.
    pub(crate) udp: bool,
    /// Tunnels open at once, in total (TCP and UDP).
    pub(crate) max_tunnels: usize,
    /// Tunnels open at once on one client connection.
    pub(crate) max_tunnels_per_connection: u32,
    /// A tunnel in which nothing moved either way for this long is closed.
    pub(crate) idle: Duration,
    /// How long opening the TCP connection to a destination may take.
    pub(crate) connect_timeout: Duration,
    /// Bytes of UDP payloads a CONNECT-UDP tunnel holds for its client (in capsules waiting
    /// for the stream); more are dropped, as datagrams may be.
    pub(crate) udp_buffer: usize,
}

impl super::Config {
    /// Whether CONNECT-UDP is served: HTTP/3 connections then offer QUIC DATAGRAM (RFC 9221)
    /// and HTTP Datagrams (RFC 9297).
    pub(crate) fn udp_tunnels(&self) -> bool {
        self.connect.as_ref().is_some_and(|c| c.udp)
    }
}

/// One entry of `allow`: a destination host pattern and a port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allow {
    pub(crate) host: AllowHost,
    pub(crate) ports: (u16, u16),
}

/// What an `allow` entry's host names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllowHost {
    /// One DNS name, lower-case.
    Name(String),
    /// Any name under a domain (`*.example.com`: not `example.com` itself), lower-case, with
    /// its leading dot.
    Under(String),
    /// An address or a network (`10.0.0.0/8`, `[2001:db8::]/32`): the only kind that can
    /// admit loopback, link-local or the server's own addresses.
    Net(IpAddr, u8),
}

impl AllowHost {
    /// Whether the network contains `ip` (IPv4-mapped IPv6 addresses compare as IPv4).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let Self::Net(net, bits) = self else { return false };
        match (canonical(*net), canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if *bits == 0 { 0 } else { u32::MAX << (32 - u32::from(*bits)) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if *bits == 0 { 0 } else { u128::MAX << (128 - u32::from(*bits)) };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// Whether the name `host` (lower-case, not an address) matches.
    pub(crate) fn names(&self, host: &str) -> bool {
        match self {
            Self::Name(n) => n == host,
            Self::Under(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
            Self::Net(..) => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The users of `credentials`: name → bcrypt hash.
#[derive(Debug, Clone)]
pub(crate) struct Credentials {
    pub(crate) users: HashMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConnect {
    allow: Option<Spanned<Vec<Spanned<String>>>>,
    credentials: Option<Spanned<String>>,
    udp: Option<bool>,
    max_tunnels: Option<Spanned<usize>>,
    max_tunnels_per_connection: Option<Spanned<u32>>,
    idle_secs: Option<Spanned<u64>>,
    connect_timeout_secs: Option<Spanned<u64>>,
    udp_buffer: Option<Spanned<usize>>,
}

/// `[connect]`; `None` when the section is absent or its `allow` is empty (the forward proxy
/// is off: CONNECT is answered 405).
pub(super) fn connect(src: &Source<'_>, raw: &RawConnect) -> Result<Option<Connect>, ConfigError> {
    let Some(list) = &raw.allow else {
        if let Some(c) = &raw.credentials {
            return Err(src.err(c.span(), "`credentials` without `allow`: no tunnel may go anywhere"));
        }
        return Ok(None);
    };
    let mut allow = Vec::new();
    for entry in list.get_ref() {
        allow.push(parse_allow(entry.get_ref()).map_err(|why| src.err(entry.span(), why))?);
    }
    if allow.is_empty() {
        return Ok(None);
    }
    let credentials = match &raw.credentials {
        None => None,
        Some(p) => Some(credentials(&src.path(p.get_ref())).map_err(|e| match e {
            CredError::Read(msg) => src.err(p.span(), msg),
            CredError::Line(e) => e,
        })?),
    };
    Ok(Some(Connect {
        allow,
        credentials,
        udp: raw.udp.unwrap_or(true),
        max_tunnels: super::bounded(src, &raw.max_tunnels, "max_tunnels", 1, 1_000_000, 4096)?,
        max_tunnels_per_connection: super::bounded(
            src,
            &raw.max_tunnels_per_connection,
            "max_tunnels_per_connection",
            1,
            10_000,
            64,
        )?,
        idle: Duration::from_secs(super::bounded(src, &raw.idle_secs, "idle_secs", 1, 86_400, 300)?),
        connect_timeout: Duration::from_secs(super::bounded(
            src,
            &raw.connect_timeout_secs,
            "connect_timeout_secs",
            1,
            300,
            10,
        )?),
        udp_buffer: super::bounded(src, &raw.udp_buffer, "udp_buffer", 2048, 64 << 20, 256 << 10)?,
    }))
}

/// One `allow` entry: `HOST:PORTS`, where HOST is a name, `*.domain`, an IPv4 address or
/// network (`10.0.0.0/8`), or an IPv6 one in brackets (`[::1]`, `[fd00::]/8`), and PORTS a
/// port, a range `8000-8999` or `*`.
fn parse_allow(s: &str) -> Result<Allow, String> {
    let bad = |why: &str| {
        format!("`allow` entry `{s}`: {why} (HOST:PORT, e.g. \"example.com:443\", \"10.0.0.0/8:*\", \"[::1]:8080\")")
    };
    let (host, ports) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let ports = match ports {
        "*" => (1, u16::MAX),
        p => match p.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad("bad port"))?, b.parse().map_err(|_| bad("bad port"))?),
            None => {
                let n = p.parse().map_err(|_| bad("bad port"))?;
                (n, n)
            }
        },
    };
    if ports.0 == 0 || ports.0 > ports.1 {
        return Err(bad("bad port range"));
    }
    let (addr, bits) = match host.rsplit_once('/') {
        Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad("bad prefix length"))?)),
        None => (host, None),
    };
    let literal = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        if ip.is_ipv6() && literal == addr {
            return Err(bad("an IPv6 address goes in brackets"));
        }
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad("prefix longer than the address"));
        }
        return Ok(Allow { host: AllowHost::Net(ip, bits), ports });
    }
    if bits.is_some() {
        return Err(bad("a prefix length needs an address"));
    }
    let host = host.to_ascii_lowercase();
    let (name, under) = match host.strip_prefix("*.") {
        Some(rest) => (rest, true),
        None => (host.as_str(), false),
    };
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad("not a host name, *.domain, address or network"));
    }
    Ok(Allow { host: if under { AllowHost::Under(format!(".{name}")) } else { AllowHost::Name(name.into()) }, ports })
}

enum CredError {
    Read(String),
    Line(ConfigError),
}

/// A credentials file: `user:hash` per line, the hash bcrypt's (`htpasswd -nbB user pass`
/// makes one); blank lines and `#` comments are skipped.
fn credentials(path: &Path) -> Result<Credentials, CredError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CredError::Read(format!("`credentials`: cannot read {}: {e}", path.display())))?;
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |msg: &str| {
            CredError::Line(ConfigError { file: path.to_path_buf(), pos: Some((i + 1, 1)), msg: msg.to_owned() })
        };
        let Some((user, hash)) = line.split_once(':') else {
            return Err(err("a line is `user:bcrypt-hash`"));
        };
        if user.is_empty() {
            return Err(err("an empty user name"));
        }
        if !["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) || hash.len() != 60 {
            return Err(err("the hash is not bcrypt's (`htpasswd -nbB user password` makes one)"));
        }
        if users.insert(user.to_owned(), hash.to_owned()).is_some() {
            return Err(err("a user named twice"));
        }
    }
    if users.is_empty() {
        return Err(CredError::Read(format!("`credentials`: {} names no user", path.display())));
    }
    Ok(Credentials { users })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_entries_parse_and_match() {
        let a = parse_allow("Example.COM:443").unwrap();
        assert_eq!(a, Allow { host: AllowHost::Name("example.com".into()), ports: (443, 443) });
        let a = parse_allow("*.example.org:8000-8999").unwrap();
        assert!(a.host.names("a.example.org") && a.host.names("b.a.example.org"));
        assert!(!a.host.names("example.org") && !a.host.names("badexample.org"));
        assert_eq!(a.ports, (8000, 8999));
        let a = parse_allow("10.0.0.0/8:*").unwrap();
        assert_eq!(a.ports, (1, 65535));
        assert!(a.host.contains("10.1.2.3".parse().unwrap()));
        assert!(a.host.contains("::ffff:10.9.9.9".parse().unwrap()));
        assert!(!a.host.contains("11.0.0.1".parse().unwrap()));
        let a = parse_allow("[fd00::]/8:53").unwrap();
        assert!(a.host.contains("fdab::1".parse().unwrap()) && !a.host.contains("fe80::1".parse().unwrap()));
        let a = parse_allow("127.0.0.1:9000").unwrap();
        assert!(a.host.contains("127.0.0.1".parse().unwrap()) && !a.host.contains("127.0.0.2".parse().unwrap()));
        let a = parse_allow("0.0.0.0/0:443").unwrap();
        assert!(a.host.contains("8.8.8.8".parse().unwrap()));
        for bad in ["example.com", "example.com:0", "example.com:9-1", "::1:80", "10.0.0.0/33:1", "a b:1", "x/8:1"] {
            assert!(parse_allow(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credential_files_are_checked_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("users");
        let hash = "$2y$05$abcdefghijklmnopqrstuu5Wq3ZxR1o0ZAZ9rN.0rQ0t1FZ8aV9u2";
        assert_eq!(hash.len(), 60);
        std::fs::write(&p, format!("# users\nalice:{hash}\n\nbob:{hash}\n")).unwrap();
        let c = credentials(&p).ok().unwrap();
        assert_eq!(c.users.len(), 2);
        std::fs::write(&p, format!("alice:{hash}\nbob:plaintext\n")).unwrap();
        match credentials(&p) {
            Err(CredError::Line(e)) => assert_eq!(e.pos, Some((2, 1)), "{e}"),
            _ => panic!("a plaintext password was accepted"),
        }
    }
}
