//! `sluice get` with several URLs: connections shared between origins the way RFC 9113 §9.1.1
//! and RFC 8336 allow, and retried after 421 (RFC 9110 §15.5.20).
//!
//! URLs are fetched one after another. For each https URL (HTTP/2) the client looks for an
//! open connection that may carry it:
//! - the connection opened for that origin;
//! - once the connection has received an ORIGIN frame, one whose Origin Set (the initial
//!   origin, from SNI and port, plus every ORIGIN entry) holds the origin, and whose
//!   certificate is valid for its host; no DNS lookup is needed (RFC 8336 §2.4). Nothing else:
//!   the Origin Set is then the whole truth;
//! - before any ORIGIN frame, one on the same port whose peer address is among the host's
//!   addresses and whose certificate is valid for the host.
//!
//! The certificate check is a name check against the certificate the connection presented
//! (its SAN entries); with `-k` the chain is not verified, but names still are. A 421 on a
//! shared connection removes the origin from that connection's set and the request is sent
//! again, once, on a connection of its own. With `--http3` the same rules hold for QUIC
//! connections, the ORIGIN frames coming on the server's control stream (RFC 9412). HTTP/1.1
//! and h2c open a connection per URL.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use rustls::pki_types::{CertificateDer, ServerName};

use super::conn::{self, Connected, Proto, Stream, Target};
use super::h2::{Fetched, H2Conn};
use super::h3::{self, OriginFrames};
use super::progress::Counter;
use super::{code, download, download_on, own_fields, Failure, Report, Setup};

/// How a URL found its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// A new connection for this URL.
    New,
    /// The connection opened earlier for the same origin.
    SameOrigin,
    /// Another origin's connection whose ORIGIN frame named this one.
    OriginFrame,
    /// Another origin's connection to the same address, its certificate covering this host.
    SameAddress,
}

impl Via {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::SameOrigin => "same-origin",
            Self::OriginFrame => "origin-frame",
            Self::SameAddress => "same-address",
        }
    }
}

/// Which connection served a URL.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reuse {
    /// 1 for the first connection the run opened, 2 for the second, ...
    pub(crate) connection: usize,
    pub(crate) via: Via,
    /// The first answer was 421 on a shared connection; this one is from a new connection.
    pub(crate) retried_after_421: bool,
}

/// An origin: lower-case host and port (the scheme is https).
type Origin = (String, u16);

fn origin_of(t: &Target) -> Origin {
    (t.host.to_ascii_lowercase(), t.port)
}

/// An ORIGIN entry (RFC 6454 §6.2 serialisation) as an https origin; anything else is skipped
/// (RFC 8336 §2.2: entries that do not parse are ignored).
fn parse_origin(entry: &str) -> Option<Origin> {
    let t = conn::parse_url(entry).ok()?;
    let bare = entry.len() == entry.find("://")? + 3 + t.authority.as_str().len();
    (t.https && bare).then(|| origin_of(&t))
}

/// A shared connection: HTTP/2 over TLS, or HTTP/3.
enum Transport {
    H2(Box<H2Conn>),
    H3 { c: h3::Connected, origins: Arc<Mutex<OriginFrames>> },
}

impl Transport {
    fn usable(&self) -> bool {
        match self {
            Self::H2(c) => c.usable(),
            Self::H3 { c, .. } => c.conn.close_reason().is_none(),
        }
    }

    /// The ORIGIN frames' entries, or `None` before any ORIGIN frame.
    fn origin_entries(&self) -> Option<Vec<String>> {
        match self {
            Self::H2(c) => c.origins().map(<[String]>::to_vec),
            Self::H3 { origins, .. } => {
                let o = origins.lock().ok()?;
                o.seen.then(|| o.entries.clone())
            }
        }
    }

    fn version(&self) -> &'static str {
        match self {
            Self::H2(_) => "2",
            Self::H3 { .. } => "3",
        }
    }

    /// GET `setup`'s URL with the default and `--header` fields, counting body bytes.
    async fn get(&mut self, setup: &Setup, counter: &Counter) -> Result<Fetched, Failure> {
        let t = &setup.target;
        let fields = own_fields(setup, None);
        match self {
            Self::H2(c) => {
                let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                c.get(t.authority.as_str(), &t.path, &fields, |data| counter.add(data.len() as u64)).await
            }
            Self::H3 { c, .. } => {
                let mut resp = h3::send(c, t, &Method::GET, &fields, None).await?;
                let head_at = Instant::now();
                let mut bytes = 0;
                while let Some(data) = resp.chunk().await? {
                    bytes += data.len() as u64;
                    counter.add(data.len() as u64);
                }
                Ok(Fetched { status: resp.status, bytes, head_at })
            }
        }
    }
}

/// A connection and what it may be used for.
struct Pooled {
    id: usize,
    conn: Transport,
    /// The origin it was opened for (SNI and port: the Origin Set's initial origin).
    origin: Origin,
    peer: SocketAddr,
    /// The end-entity certificate it presented.
    cert: CertificateDer<'static>,
    /// Origins answered with 421 here (RFC 8336 §2.3: removed from the Origin Set).
    refused: HashSet<Origin>,
}

impl Pooled {
    /// Whether it may carry a request for `o`; `addrs` are `o`'s addresses, if looked up.
    fn serves(&self, o: &Origin, addrs: Option<&[SocketAddr]>) -> Option<Via> {
        if !self.conn.usable() || self.refused.contains(o) {
            return None;
        }
        if *o == self.origin {
            return Some(Via::SameOrigin);
        }
        match self.conn.origin_entries() {
            Some(entries) => {
                let listed = entries.iter().filter_map(|e| parse_origin(e)).any(|e| e == *o);
                (listed && self.covers(&o.0)).then_some(Via::OriginFrame)
            }
            None => {
                let same_address = o.1 == self.origin.1 && addrs?.contains(&self.peer);
                (same_address && self.covers(&o.0)).then_some(Via::SameAddress)
            }
        }
    }

    /// Whether the certificate is valid for `host` (RFC 9110 §4.3.4 name matching).
    fn covers(&self, host: &str) -> bool {
        let Ok(name) = ServerName::try_from(host) else { return false };
        webpki::EndEntityCert::try_from(&self.cert).is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
    }
}

/// The connections of one run.
#[derive(Default)]
pub(crate) struct Pool {
    conns: Vec<Pooled>,
    /// Connections opened so far (pooled or not).
    opened: usize,
}

impl Pool {
    /// Close the HTTP/3 connections cleanly (HTTP/2 ones end with their TCP connections).
    pub(crate) async fn close(self) {
        for p in &self.conns {
            if let Transport::H3 { c, .. } = &p.conn {
                c.close().await;
            }
        }
    }

    /// Downloads `setup`'s URL on a shared connection where allowed, else on a new one.
    pub(crate) async fn fetch(&mut self, setup: &Setup, fail: bool, counter: &Counter) -> Result<Report, Failure> {
        let t = &setup.target;
        if !t.https || setup.proto == Proto::H1 {
            let mut report = download(setup, None, fail, counter).await?;
            self.opened += 1;
            report.reuse = Some(Reuse { connection: self.opened, via: Via::New, retried_after_421: false });
            return Ok(report);
        }
        let o = origin_of(t);
        // The Origin Set and the connection's own origin need no DNS; the address rule does.
        let mut addrs = None;
        let mut pick = self.pick(&o, None);
        if pick.is_none() {
            let a = setup.addrs().await?;
            pick = self.pick(&o, Some(&a));
            addrs = Some(a);
        }
        let Some((i, via)) = pick else {
            return self.fetch_new(setup, addrs, fail, counter, false).await;
        };
        let start = Instant::now();
        let id = self.conns[i].id;
        let version = self.conns[i].conn.version();
        match self.conns[i].conn.get(setup, counter).await {
            Ok(f) if f.status == 421 => {
                // RFC 8336 §2.3: not this connection's origin after all.
                self.conns[i].refused.insert(o);
                self.fetch_new(setup, addrs, fail, counter, true).await
            }
            Ok(f) => Ok(Report {
                version,
                status: f.status,
                bytes: f.bytes,
                total: start.elapsed(),
                connect: Duration::ZERO,
                appconnect: Some(Duration::ZERO),
                starttransfer: f.head_at - start,
                reuse: Some(Reuse { connection: id, via, retried_after_421: false }),
                ..Report::new(t)
            }),
            // A shared connection that went away between requests (idle timeout, GOAWAY):
            // the request goes out again on a new one.
            Err(_) if !self.conns[i].conn.usable() && counter.bytes() == 0 => {
                self.fetch_new(setup, addrs, fail, counter, false).await
            }
            Err(e) => Err(e),
        }
    }

    fn pick(&self, o: &Origin, addrs: Option<&[SocketAddr]>) -> Option<(usize, Via)> {
        let found = self.conns.iter().enumerate().filter_map(|(i, c)| c.serves(o, addrs).map(|v| (i, v)));
        // The origin's own connection first.
        found.min_by_key(|&(_, v)| v != Via::SameOrigin)
    }

    /// A new connection for `setup`'s origin: pooled when it speaks HTTP/2 or HTTP/3, else
    /// used for this URL alone over HTTP/1.1.
    async fn fetch_new(
        &mut self,
        setup: &Setup,
        addrs: Option<Vec<SocketAddr>>,
        fail: bool,
        counter: &Counter,
        retried_after_421: bool,
    ) -> Result<Report, Failure> {
        let t = &setup.target;
        let addrs = match addrs {
            Some(a) => a,
            None => setup.addrs().await?,
        };
        let reuse = Reuse { connection: self.opened + 1, via: Via::New, retried_after_421 };
        let opened = if setup.proto == Proto::H3 {
            open_h3(setup, &addrs).await?
        } else {
            match open_h2(setup, &addrs).await? {
                Ok(o) => o,
                Err(c) => {
                    // The server does not speak h2: this URL over HTTP/1.1 (hyper), not shared.
                    self.opened += 1;
                    let mut report = download_on(setup, c, None, fail, counter).await?;
                    report.reuse = Some(reuse);
                    return Ok(report);
                }
            }
        };
        self.opened += 1;
        let NewConn { conn, peer, cert, start, connect, appconnect } = opened;
        self.conns.push(Pooled { id: self.opened, conn, origin: origin_of(t), peer, cert, refused: HashSet::new() });
        let last = self.conns.len() - 1;
        let version = self.conns[last].conn.version();
        let f = self.conns[last].conn.get(setup, counter).await?;
        Ok(Report {
            version,
            status: f.status,
            bytes: f.bytes,
            total: start.elapsed(),
            connect,
            appconnect,
            starttransfer: f.head_at - start,
            reuse: Some(reuse),
            ..Report::new(t)
        })
    }
}

/// A connection just opened, with what the report needs.
struct NewConn {
    conn: Transport,
    peer: SocketAddr,
    cert: CertificateDer<'static>,
    start: Instant,
    connect: Duration,
    appconnect: Option<Duration>,
}

fn no_certificate() -> Failure {
    Failure::new(code::TLS, "the server presented no certificate".to_owned())
}

/// TCP, TLS and the HTTP/2 handshake; the hyper HTTP/1.1 connection instead (`Err`) when
/// ALPN did not pick h2.
async fn open_h2(setup: &Setup, addrs: &[SocketAddr]) -> Result<Result<NewConn, Connected>, Failure> {
    let opened = conn::open(&setup.target, addrs, setup.tls.clone(), setup.connect_timeout).await?;
    // As for one URL: h2 when ALPN picked it, or regardless with --http2-prior-knowledge.
    let h2 = opened.alpn_h2() || setup.proto == Proto::H2Prior;
    let conn::Opened { stream, peer, start, connect, appconnect } = opened;
    let Stream::Tls(tls) = stream else {
        return Err(Failure::new(code::TLS, "an https URL without TLS".to_owned()));
    };
    if !h2 {
        let sender = conn::handshake(tls, false).await?;
        return Ok(Err(Connected { sender, h2: false, start, connect, appconnect }));
    }
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned());
    let cert = cert.ok_or_else(no_certificate)?;
    let conn = Transport::H2(Box::new(H2Conn::handshake(tls, setup.connect_timeout).await?));
    Ok(Ok(NewConn { conn, peer, cert, start, connect, appconnect }))
}

/// The QUIC handshake and HTTP/3's control stream; the server's ORIGIN frames are watched.
async fn open_h3(setup: &Setup, addrs: &[SocketAddr]) -> Result<NewConn, Failure> {
    let tls = setup.tls.clone().ok_or_else(|| Failure::new(code::USAGE, "--http3 needs https://".to_owned()))?;
    let c = h3::connect(&setup.target, addrs[0], tls, setup.connect_timeout).await?;
    let cert = c
        .conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .and_then(|chain| chain.into_iter().next())
        .ok_or_else(no_certificate)?;
    let (peer, start, appconnect) = (c.conn.remote_address(), c.start, c.appconnect);
    let origins = h3::watch_origins(&c.conn);
    let conn = Transport::H3 { c, origins };
    Ok(NewConn { conn, peer, cert, start, connect: appconnect, appconnect: Some(appconnect) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_entries_parse_as_https_origins_only() {
        assert_eq!(parse_origin("https://b.test"), Some(("b.test".into(), 443)));
        assert_eq!(parse_origin("https://B.Test:8443"), Some(("b.test".into(), 8443)));
        assert_eq!(parse_origin("https://[::1]:8443"), Some(("::1".into(), 8443)));
        for bad in ["http://b.test", "https://b.test/", "https://b.test/x", "b.test", "https://", "https://b.test:0"] {
            assert_eq!(parse_origin(bad), None, "{bad}");
        }
    }
}
