//! Configuration: the TOML file, its defaults and its validation.
//!
//! Two layers: a raw serde layer mirroring the file (`deny_unknown_fields`, every field
//! optional with a default, `toml::Spanned` on what gets validated) and the validated
//! [`Config`] the rest of the server uses. Every error, syntactic or semantic, is reported as
//! `file:line:column: reason` pointing at the offending key or value.
//! `sluice.example.toml` at the repository root documents every field.

use std::fmt;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

pub(crate) mod acme;
mod admin;
mod compression;
pub(crate) mod connect;
mod defaults;
mod raw;
mod site;
mod upstream;

pub(crate) use admin::Admin;
pub(crate) use compression::{Codec, Compression};
use defaults::{
    DEFAULT_MAX_DOWNLOAD, DEFAULT_PLAIN_PORT, DEFAULT_TLS_PORT, MAX_HEADER_TABLE_SIZE, MIN_HEADER_LIST_SIZE,
};
use raw::*;
#[cfg(test)]
pub(crate) use site::HeaderRules;
pub(crate) use site::{host_of, Route, RouteHandler, Site};
pub(crate) use upstream::{Balance, HashKey, ProxySettings, ServerAddr, Upstream, UpstreamProto};

/// The access log's format (`access_log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccessLogFormat {
    Off,
    /// One line of space-separated fields per request.
    Text,
    /// One JSON object per line, with more fields (docs/configuration.md).
    Json,
}

impl AccessLogFormat {
    pub(crate) fn on(self) -> bool {
        self != Self::Off
    }
}

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Where the self-signed default certificate and other state live.
    pub(crate) data_dir: PathBuf,
    /// Listeners.
    pub(crate) listeners: Vec<Listener>,
    /// Certificates (TLS listeners pick one by SNI; the first is the fallback).
    pub(crate) certificates: Vec<Certificate>,
    /// Sites by host name.
    pub(crate) sites: Vec<Site>,
    /// Speed-test endpoints.
    pub(crate) speedtest: Speedtest,
    /// Limits on what a peer controls.
    pub(crate) limits: Limits,
    /// Timeouts.
    pub(crate) timeouts: Timeouts,
    /// The access log: off, text lines or JSON lines.
    pub(crate) access_log: AccessLogFormat,
    /// Where `sluice serve` writes its process id (`sluice reload` reads it when there is no
    /// admin listener).
    pub(crate) pid_file: Option<PathBuf>,
    /// HTTP/2 receive windows.
    pub(crate) flow: Flow,
    /// Socket options of accepted TCP connections.
    pub(crate) tcp: Tcp,
    /// HTTP/3: QUIC on UDP beside every TLS listener.
    pub(crate) quic: Quic,
    /// `[[upstream]]`: what proxied routes forward to (`RouteHandler::Proxy` indexes it).
    pub(crate) upstreams: Vec<Upstream>,
    /// `[proxy]`.
    pub(crate) proxy: ProxySettings,
    /// `[compression]`: content codings of responses.
    pub(crate) compression: Compression,
    /// `[admin]`: the admin listener and metrics.
    pub(crate) admin: Admin,
    /// `[acme]` and the certificates to order; `None`: no site's certificate comes from ACME.
    pub(crate) acme: Option<acme::Acme>,
    /// `[connect]`: the forward proxy's tunnels (CONNECT, CONNECT-UDP); `None`: off.
    pub(crate) connect: Option<connect::Connect>,
}

/// The QUIC congestion controllers quinn offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuicCongestion {
    Cubic,
    Bbr,
    NewReno,
}

/// HTTP/3 over QUIC (quinn).
#[derive(Debug, Clone)]
pub(crate) struct Quic {
    /// Serve HTTP/3 on UDP at the port of every TLS listener, and advertise it with Alt-Svc.
    pub(crate) enabled: bool,
    /// Congestion controller of every connection.
    pub(crate) congestion: QuicCongestion,
    /// SO_RCVBUF and SO_SNDBUF asked for the UDP socket, in bytes (the kernel may clamp them
    /// to net.core.rmem_max / wmem_max; the log says so).
    pub(crate) socket_buffer: usize,
    /// Receive window of each stream (the connection window, autotuned under `[flow] budget`,
    /// bounds the sum).
    pub(crate) stream_window: u32,
    /// Bound bytes in flight near the measured bandwidth-delay product (`io/quic_pace.rs`, the
    /// policy of `sluice_tune::inflight`), over whatever the congestion controller allows.
    pub(crate) limit_inflight: bool,
    /// QUIC-LB connection ids (draft-ietf-quic-load-balancers-21): the configuration and this
    /// server's id; `None`: quinn's random ids.
    pub(crate) lb: Option<(sluice_quiclb::Config, Vec<u8>)>,
}

impl Default for Quic {
    fn default() -> Self {
        Self {
            enabled: true,
            // BBR holds its rate under random loss where CUBIC falls to the Mathis limit; the
            // in-flight bound keeps it off the bottleneck queue (`docs/protocols.md`, HTTP/3).
            congestion: QuicCongestion::Bbr,
            socket_buffer: 8 << 20,
            stream_window: 16 << 20,
            limit_inflight: true,
            lb: None,
        }
    }
}

/// Socket options of accepted TCP connections.
#[derive(Debug, Clone)]
pub(crate) struct Tcp {
    /// Congestion control per socket (TCP_CONGESTION), `None` for the system default.
    pub(crate) congestion: Option<String>,
    /// TCP_NOTSENT_LOWAT in bytes; 0 leaves the system default.
    pub(crate) notsent_lowat: u32,
    /// HTTP/2: bound bytes in flight near the measured bandwidth-delay product (`pace.rs`), so
    /// priorities act within about a round trip; false fills the congestion window.
    pub(crate) limit_inflight: bool,
    /// HTTP/2: while the peer streams request bodies of declared length fast, let up to about
    /// a millisecond of its input (64 KiB at most) gather in the socket before a read
    /// (SO_RCVLOWAT, `sluice_tune::recv_mark`): a wake-up per batch instead of per DATA frame.
    pub(crate) batch_reads: bool,
}

impl Default for Tcp {
    /// BBR, and 16 KiB of unsent data at most in the kernel: late scheduling (`docs/protocols.md`, writes).
    fn default() -> Self {
        Self { congestion: Some("bbr".into()), notsent_lowat: 16 * 1024, limit_inflight: true, batch_reads: true }
    }
}

/// How HTTP/2 receive windows are sized (see `sluice_tune::autotune`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowPolicy {
    /// Autotuned from the delivered bytes per RTT (the default).
    Auto,
    /// Fixed at the initial windows.
    Fixed,
    /// The write-up's rule: double when the last RTT's bytes exceed a quarter of the window.
    Writeup,
    /// quiche's rule: double when credit is handed back twice within 2 RTT.
    Quiche,
    /// hyper's BDP estimator: bytes received between a PING and its ACK.
    Hyper,
}

/// HTTP/2 receive-window settings.
#[derive(Debug, Clone)]
pub(crate) struct Flow {
    /// Which tuner.
    pub(crate) policy: FlowPolicy,
    /// SETTINGS_INITIAL_WINDOW_SIZE: each stream's starting (and smallest) window.
    pub(crate) initial_stream_window: u32,
    /// The connection's starting window.
    pub(crate) initial_connection_window: u32,
    /// Largest window of one stream.
    pub(crate) max_stream_window: u32,
    /// Largest connection window.
    pub(crate) max_connection_window: u32,
    /// Memory all connections' windows may grow into beyond their initial windows.
    pub(crate) budget: u64,
}

impl Default for Flow {
    fn default() -> Self {
        Self {
            policy: FlowPolicy::Auto,
            initial_stream_window: 1 << 20,
            initial_connection_window: 1 << 20,
            max_stream_window: 16 << 20,
            max_connection_window: 32 << 20,
            budget: 1 << 30,
        }
    }
}

/// One listening socket.
#[derive(Debug, Clone)]
pub(crate) struct Listener {
    /// Address to bind.
    pub(crate) addr: SocketAddr,
    /// TLS (ALPN h2, http/1.1) or cleartext (HTTP/1.1 and h2c with prior knowledge).
    pub(crate) tls: bool,
}

/// A certificate chain and key.
#[derive(Debug, Clone)]
pub(crate) struct Certificate {
    /// PEM chain path (None: the generated self-signed default).
    pub(crate) cert: Option<PathBuf>,
    /// PEM key path.
    pub(crate) key: Option<PathBuf>,
    /// The origin set announced with ORIGIN frames (RFC 8336, RFC 9412) on connections that
    /// present this certificate; `None` sends no ORIGIN frame.
    pub(crate) origins: Option<OriginSpec>,
}

/// `[[certificate]] origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OriginSpec {
    /// `"from-certificate"`: the certificate's DNS names that map to a configured site, on the
    /// port of the connection's listener.
    FromCertificate,
    /// Explicit origins, validated against the certificate's names and the TLS listeners'
    /// ports: (host, port).
    List(Vec<(String, u16)>),
}

/// Speed-test endpoints (`/__down`, `/__up`, `/__ping`).
#[derive(Debug, Clone)]
pub(crate) struct Speedtest {
    /// Whether the endpoints answer on every site (`/__down`, `/__up`, `/__ping`).
    pub(crate) enabled: bool,
    /// Largest `bytes=` a download may ask for.
    pub(crate) max_download_bytes: u64,
}

/// Limits on everything a peer controls.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise.
    pub(crate) max_concurrent_streams: u32,
    /// Largest header list (RFC 9113 §6.5.2: name + value + 32 per field).
    pub(crate) max_header_list_size: u32,
    /// CONTINUATION frames allowed after one HEADERS.
    pub(crate) max_continuation_frames: u32,
    /// SETTINGS_HEADER_TABLE_SIZE we advertise (HPACK decoder table).
    pub(crate) header_table_size: u32,
    /// Streams the peer may reset per `flood_window` (Rapid Reset, CVE-2023-44487).
    pub(crate) max_resets_per_window: u32,
    /// PING frames the peer may send per `flood_window`.
    pub(crate) max_pings_per_window: u32,
    /// SETTINGS frames the peer may send per `flood_window`.
    pub(crate) max_settings_per_window: u32,
    /// Frames that do no useful work (empty DATA, redundant WINDOW_UPDATE or PRIORITY,
    /// unknown frames, ...) per `flood_window`, HTTP/2 and HTTP/3.
    pub(crate) max_glitches_per_window: u32,
    /// Window the three counters above are counted in.
    pub(crate) flood_window: Duration,
    /// Largest request body accepted.
    pub(crate) max_request_body: u64,
    /// Concurrent connections per listener.
    pub(crate) max_connections: usize,
    /// Response bytes waiting to be framed, all streams of the process together (HTTP/2,
    /// HTTP/3): what stalled streams can hold at most.
    pub(crate) send_buffer: usize,
    /// Bytes per second a peer must take of a response (or send of a request body) while the
    /// server waits on it, over windows of `timeouts.header`; 0 turns the rule off.
    pub(crate) min_rate: u64,
}

/// Timeouts.
#[derive(Debug, Clone)]
pub(crate) struct Timeouts {
    /// Time to receive a complete request head once a connection or request starts.
    pub(crate) header: Duration,
    /// Idle connection (no open streams, nothing read) before it is closed.
    pub(crate) idle: Duration,
    /// How long in-flight requests may finish after SIGTERM/SIGINT.
    pub(crate) drain: Duration,
}

/// How much progress a peer owes: on a connection's writes (the peer must take the response)
/// and on an HTTP/1.1 request body's reads (`limits.min_rate` over windows of
/// `timeouts.header`; see `io/progress.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProgressRule {
    /// Waiting time over which progress is measured.
    pub(crate) window: Duration,
    /// Bytes that must move within each window of waiting.
    pub(crate) min_bytes: u64,
}

impl ProgressRule {
    /// `rate` bytes per second, measured over `window`.
    pub(crate) fn new(rate: u64, window: Duration) -> Self {
        let min_bytes = (u128::from(rate) * window.as_millis() / 1000).min(u128::from(u64::MAX)) as u64;
        Self { window, min_bytes }
    }
}

/// A configuration error with its position in the file.
#[derive(Debug)]
pub(crate) struct ConfigError {
    /// The file as named by the caller.
    file: PathBuf,
    /// 1-based line and column, when the error has a position.
    pos: Option<(usize, usize)>,
    /// What is wrong.
    msg: String,
}

impl ConfigError {
    /// The reason without the position.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn message(&self) -> &str {
        &self.msg
    }

    /// 1-based line and column.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn position(&self) -> Option<(usize, usize)> {
        self.pos
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file.display(), self.msg),
            None => write!(f, "{}: {}", self.file.display(), self.msg),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The default data directory: `$XDG_DATA_HOME/sluice`, else `~/.local/share/sluice`, else
/// `./.sluice`.
/// The admin listener's address in the embedded default configuration.
pub(crate) fn admin_default_addr() -> Option<std::net::SocketAddr> {
    Admin::default().addr
}

pub(crate) fn default_data_dir() -> PathBuf {
    let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(xdg) = nonempty("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return xdg.join("sluice");
    }
    if let Some(home) = nonempty("HOME") {
        return home.join(".local/share/sluice");
    }
    PathBuf::from(".sluice")
}

/// Whether this host can bind an IPv6 socket (`[::]` then also accepts IPv4 on Linux unless
/// `net.ipv6.bindv6only` is set).
fn ipv6_available() -> bool {
    TcpListener::bind("[::1]:0").is_ok()
}

fn wildcard_addr(port: u16) -> SocketAddr {
    if ipv6_available() {
        SocketAddr::from(([0u16; 8], port))
    } else {
        SocketAddr::from(([0u8; 4], port))
    }
}

fn default_listeners() -> Vec<Listener> {
    vec![
        Listener { addr: wildcard_addr(DEFAULT_TLS_PORT), tls: true },
        Listener { addr: wildcard_addr(DEFAULT_PLAIN_PORT), tls: false },
    ]
}

/// The configuration used when no file is given: HTTPS on `[::]:8443` (or `0.0.0.0:8443`
/// without IPv6) with the self-signed certificate, cleartext on port 8080, the built-in site
/// for any host, the speed test on.
pub(crate) fn default_config(data_dir: PathBuf) -> Config {
    Config {
        data_dir,
        listeners: default_listeners(),
        certificates: vec![Certificate { cert: None, key: None, origins: None }],
        sites: vec![site::builtin_site()],
        speedtest: Speedtest::default(),
        limits: Limits::default(),
        timeouts: Timeouts::default(),
        access_log: AccessLogFormat::Text,
        pid_file: None,
        flow: Flow::default(),
        tcp: Tcp::default(),
        quic: Quic::default(),
        upstreams: Vec::new(),
        proxy: ProxySettings::default(),
        compression: Compression::default(),
        admin: Admin::default(),
        acme: None,
        connect: None,
    }
}

/// Loads and validates a configuration file. Relative paths in it are relative to the
/// directory of the file.
pub(crate) fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        pos: None,
        msg: format!("cannot read: {e}"),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = std::path::absolute(&dir).unwrap_or(dir);
    parse(&text, path, &base)
}

// ---------------------------------------------------------------------------------------------
// Validation: raw layer → Config.

/// What error positions are computed against.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    file: &'a Path,
    base: &'a Path,
}

impl Source<'_> {
    pub(super) fn err(&self, span: Range<usize>, msg: impl Into<String>) -> ConfigError {
        ConfigError { file: self.file.to_path_buf(), pos: Some(line_col(self.text, span.start)), msg: msg.into() }
    }

    pub(super) fn path(&self, p: &str) -> PathBuf {
        self.base.join(p)
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub(super) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    // Round down to a char boundary so slicing cannot panic on a stray offset.
    let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Parses and validates configuration text. `file` names it in errors, `base` resolves
/// relative paths.
fn parse(text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
    let src = Source { text, file, base };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        // toml's messages may span lines ("invalid string\nexpected ..."); keep one line.
        let msg = e.message().trim().replace('\n', "; ");
        match e.span() {
            Some(span) => src.err(span, msg),
            None => ConfigError { file: file.to_path_buf(), pos: None, msg },
        }
    })?;

    let data_dir = match &raw.data_dir {
        Some(d) if d.get_ref().is_empty() => return Err(src.err(d.span(), "`data_dir` must not be empty")),
        Some(d) => src.path(d.get_ref()),
        None => default_data_dir(),
    };

    let listeners = listeners(&src, raw.listener.as_ref())?;
    let mut certificates = Vec::new();
    for c in &raw.certificate {
        certificates.push(certificate(&src, c, &listeners)?);
    }
    if certificates.is_empty() && listeners.iter().any(|l| l.tls) {
        certificates.push(Certificate { cert: None, key: None, origins: None });
    }
    let upstreams = upstream::upstreams(&src, &raw.upstream)?;
    let proxy = upstream::proxy_settings(&src, &raw.proxy)?;
    let sites = site::sites(&src, raw.site.as_deref(), &upstreams)?;
    let speedtest = Speedtest {
        enabled: raw.speedtest.enabled.unwrap_or(true),
        max_download_bytes: raw.speedtest.max_download_bytes.unwrap_or(DEFAULT_MAX_DOWNLOAD),
    };
    let limits = limits(&src, &raw.limits)?;
    let timeouts = timeouts(&src, &raw.timeouts)?;
    let flow = flow(&src, &raw.flow)?;
    let tcp = tcp(&src, &raw.tcp)?;
    let quic = quic(&src, &raw.quic)?;
    let compression = compression::compression(&src, &raw.compression)?;
    let admin = admin::admin(&src, &raw.admin, &listeners)?;
    let site_tls: Vec<Option<Spanned<String>>> = match raw.site.as_deref() {
        None => vec![None; sites.len()],
        Some(list) => list.iter().map(|s| s.get_ref().tls.clone()).collect(),
    };
    // Read only when a site of public names asks (the generation reads them for serving).
    let configured: std::cell::OnceCell<Vec<sluice_tls::certs::LoadedCert>> = std::cell::OnceCell::new();
    let covered = |h: &str| {
        configured
            .get_or_init(|| {
                certificates
                    .iter()
                    .filter_map(|c| sluice_tls::certs::load_cert(c.cert.as_ref()?, c.key.as_ref()?).ok())
                    .collect()
            })
            .iter()
            .any(|c| c.covers(h))
    };
    let acme = acme::acme(&src, &raw.acme, &sites, &site_tls, &listeners, &covered)?;
    let connect = connect::connect(&src, &raw.connect)?;
    Ok(Config {
        data_dir,
        listeners,
        certificates,
        sites,
        speedtest,
        limits,
        timeouts,
        access_log: match &raw.access_log {
            None => AccessLogFormat::Text,
            Some(v) => match v.get_ref() {
                raw::RawAccessLog::On(true) => AccessLogFormat::Text,
                raw::RawAccessLog::On(false) => AccessLogFormat::Off,
                raw::RawAccessLog::Format(f) if f == "text" => AccessLogFormat::Text,
                raw::RawAccessLog::Format(f) if f == "json" => AccessLogFormat::Json,
                raw::RawAccessLog::Format(f) => {
                    return Err(
                        src.err(v.span(), format!("`access_log` is true, false, \"text\" or \"json\", not \"{f}\""))
                    )
                }
            },
        },
        pid_file: match &raw.pid_file {
            Some(p) if p.get_ref().is_empty() => return Err(src.err(p.span(), "`pid_file` must not be empty")),
            Some(p) => Some(src.path(p.get_ref())),
            None => None,
        },
        flow,
        tcp,
        quic,
        upstreams,
        proxy,
        compression,
        admin,
        acme,
        connect,
    })
}

fn quic(src: &Source<'_>, raw: &RawQuic) -> Result<Quic, ConfigError> {
    let d = Quic::default();
    let congestion = match &raw.congestion {
        None => d.congestion,
        Some(c) => match c.get_ref().as_str() {
            "cubic" => QuicCongestion::Cubic,
            "bbr" => QuicCongestion::Bbr,
            "newreno" => QuicCongestion::NewReno,
            other => {
                return Err(src.err(
                    c.span(),
                    format!("unknown QUIC congestion controller `{other}`, expected cubic, bbr or newreno"),
                ))
            }
        },
    };
    let socket_buffer = bounded(src, &raw.socket_buffer, "socket_buffer", 64 << 10, 1 << 30, d.socket_buffer)?;
    // RFC 9000 §4: flow-control limits are varints; quinn takes a u32 here, and a window below
    // one full-size packet's payload would stall.
    let stream_window = bounded(src, &raw.stream_window, "stream_window", 16 << 10, (1 << 31) - 1, d.stream_window)?;
    Ok(Quic {
        enabled: raw.enabled.unwrap_or(d.enabled),
        congestion,
        socket_buffer,
        stream_window,
        limit_inflight: raw.limit_inflight.unwrap_or(d.limit_inflight),
        lb: quic_lb(src, raw)?,
    })
}

/// `[quic] server_id` and the `lb_*` keys: QUIC-LB connection ids.
fn quic_lb(src: &Source<'_>, raw: &RawQuic) -> Result<Option<(sluice_quiclb::Config, Vec<u8>)>, ConfigError> {
    let Some(sid) = &raw.server_id else {
        if let Some(k) = &raw.lb_key {
            return Err(src.err(k.span(), "`lb_key` without `server_id`"));
        }
        return Ok(None);
    };
    let server_id = sluice_quiclb::unhex(sid.get_ref())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| src.err(sid.span(), "`server_id` is hex, 1 to 15 octets (\"0a1b\")"))?;
    let key = match &raw.lb_key {
        None => None,
        Some(k) => Some(
            sluice_quiclb::unhex(k.get_ref())
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .ok_or_else(|| src.err(k.span(), "`lb_key` is 32 hex digits (an AES-128 key)"))?,
        ),
    };
    let cfg = sluice_quiclb::Config {
        config_id: raw.lb_config_id.as_ref().map_or(0, |c| *c.get_ref()),
        server_id_len: server_id.len(),
        nonce_len: raw.lb_nonce_len.as_ref().map_or(8, |n| *n.get_ref()),
        key,
        encode_len: true,
    };
    if let Err(e) = cfg.check() {
        let span = match e.0 {
            m if m.contains("configuration id") => raw.lb_config_id.as_ref().map(|c| c.span()),
            m if m.contains("nonce") => raw.lb_nonce_len.as_ref().map(|c| c.span()),
            _ => None,
        };
        return Err(src.err(span.unwrap_or(sid.span()), format!("QUIC-LB: {e}")));
    }
    Ok(Some((cfg, server_id)))
}

fn tcp(src: &Source<'_>, raw: &RawTcp) -> Result<Tcp, ConfigError> {
    let d = Tcp::default();
    let congestion = match &raw.congestion {
        None => d.congestion,
        Some(c) if c.get_ref().is_empty() => None,
        Some(c) => {
            // TCP_CA_NAME_MAX is 16 bytes including the terminating NUL.
            let name = c.get_ref();
            if name.len() > 15 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(src.err(c.span(), format!("`{name}` is not a congestion control name")));
            }
            Some(name.clone())
        }
    };
    let notsent_lowat = bounded(src, &raw.notsent_lowat, "notsent_lowat", 0, 1 << 30, d.notsent_lowat)?;
    Ok(Tcp {
        congestion,
        notsent_lowat,
        limit_inflight: raw.limit_inflight.unwrap_or(d.limit_inflight),
        batch_reads: raw.batch_reads.unwrap_or(d.batch_reads),
    })
}

fn flow(src: &Source<'_>, raw: &RawFlow) -> Result<Flow, ConfigError> {
    let d = Flow::default();
    let policy = match &raw.policy {
        None => d.policy,
        Some(p) => match p.get_ref().as_str() {
            "auto" => FlowPolicy::Auto,
            "fixed" => FlowPolicy::Fixed,
            "writeup" => FlowPolicy::Writeup,
            "quiche" => FlowPolicy::Quiche,
            "hyper" => FlowPolicy::Hyper,
            other => {
                return Err(src.err(
                    p.span(),
                    format!("unknown flow policy `{other}`, expected auto, fixed, writeup, quiche or hyper"),
                ))
            }
        },
    };
    // RFC 9113 §6.9.1: windows are at most 2^31-1.
    const MAX: u32 = (1 << 31) - 1;
    let initial_stream_window =
        bounded(src, &raw.initial_stream_window, "initial_stream_window", 1, MAX, d.initial_stream_window)?;
    let initial_connection_window = bounded(
        src,
        &raw.initial_connection_window,
        "initial_connection_window",
        65_535,
        MAX,
        d.initial_connection_window,
    )?;
    let max_stream_window = bounded(
        src,
        &raw.max_stream_window,
        "max_stream_window",
        initial_stream_window,
        MAX,
        d.max_stream_window.max(initial_stream_window),
    )?;
    let max_connection_window = bounded(
        src,
        &raw.max_connection_window,
        "max_connection_window",
        initial_connection_window,
        MAX,
        d.max_connection_window.max(initial_connection_window),
    )?;
    let budget = bounded(src, &raw.budget, "budget", 0, u64::MAX, d.budget)?;
    Ok(Flow {
        policy,
        initial_stream_window,
        initial_connection_window,
        max_stream_window,
        max_connection_window,
        budget,
    })
}

fn listeners(src: &Source<'_>, raw: Option<&Spanned<Vec<Spanned<RawListener>>>>) -> Result<Vec<Listener>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(default_listeners());
    };
    if raw.get_ref().is_empty() {
        return Err(src.err(raw.span(), "at least one `[[listener]]` is needed"));
    }
    let mut out: Vec<Listener> = Vec::new();
    for l in raw.get_ref() {
        let addr_s = &l.get_ref().addr;
        let addr: SocketAddr = addr_s.get_ref().trim().parse().map_err(|_| {
            src.err(
                addr_s.span(),
                format!("`{}` is not an address with a port (e.g. `0.0.0.0:443`, `[::]:443`)", addr_s.get_ref()),
            )
        })?;
        if out.iter().any(|o| o.addr == addr) {
            return Err(src.err(addr_s.span(), format!("listener `{addr}` appears twice")));
        }
        out.push(Listener { addr, tls: l.get_ref().tls.unwrap_or(true) });
    }
    Ok(out)
}

fn certificate(src: &Source<'_>, raw: &RawCertificate, listeners: &[Listener]) -> Result<Certificate, ConfigError> {
    let cert = src.path(raw.cert.get_ref());
    let key = src.path(raw.key.get_ref());
    let chain = sluice_tls::certs::read_chain(&cert).map_err(|e| src.err(raw.cert.span(), e))?;
    let key_der = sluice_tls::certs::read_key(&key).map_err(|e| src.err(raw.key.span(), e))?;
    let loaded = sluice_tls::certs::certified(chain, key_der)
        .map_err(|e| src.err(raw.key.span(), format!("`{}` for `{}`: {e}", key.display(), cert.display())))?;
    let origins = match &raw.origins {
        None => None,
        Some(o) => Some(match o.get_ref() {
            toml::Value::String(k) if k == "from-certificate" => OriginSpec::FromCertificate,
            toml::Value::Array(list) => {
                let ports: Vec<u16> = listeners.iter().filter(|l| l.tls).map(|l| l.addr.port()).collect();
                let mut out = Vec::new();
                for entry in list {
                    let Some(text) = entry.as_str() else {
                        return Err(src.err(o.span(), "`origins` entries must be strings like \"https://example.com\""));
                    };
                    let entry = Spanned::new(o.span(), text.to_owned());
                    let (host, port) = parse_origin(entry.get_ref()).map_err(|e| src.err(entry.span(), e))?;
                    // RFC 8336 §2.4: a client uses the connection for an origin only if the
                    // certificate is valid for it; announcing one it does not cover is an error.
                    if !loaded.covers(&host) {
                        return Err(src.err(
                            entry.span(),
                            format!(
                                "origin `{}` is not covered by certificate `{}` (its names: {})",
                                entry.get_ref(),
                                cert.display(),
                                loaded.dns_names.join(", ")
                            ),
                        ));
                    }
                    if !ports.contains(&port) {
                        return Err(src.err(
                            entry.span(),
                            format!("origin `{}`: no TLS listener on port {port}", entry.get_ref()),
                        ));
                    }
                    out.push((host, port));
                }
                OriginSpec::List(out)
            }
            other => {
                return Err(src
                    .err(o.span(), format!("`origins = {other}`: expected \"from-certificate\" or a list of origins")))
            }
        }),
    };
    Ok(Certificate { cert: Some(cert), key: Some(key), origins })
}

/// `https://host[:port]` (RFC 6454 §6.2 serialisation) → (lower-case host, port). Only https:
/// ORIGIN frames are sent over TLS connections, and an origin's scheme is the connection's.
pub(crate) fn parse_origin(s: &str) -> Result<(String, u16), String> {
    let bad = |why: &str| format!("origin `{s}`: {why}");
    let rest = s.strip_prefix("https://").ok_or_else(|| bad("must start with https://"))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return Err(bad("expected https://host or https://host:port, with no path"));
    }
    let port_of = |p: &str| p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| bad("bad port"));
    let (host, port) = match rest.strip_prefix('[') {
        Some(r) => {
            let (h, after) = r.split_once(']').ok_or_else(|| bad("`[` without `]`"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => port_of(p)?,
                None if after.is_empty() => 443,
                None => return Err(bad("expected `:port` after `]`")),
            };
            (h, port)
        }
        None => match rest.split_once(':') {
            Some((h, p)) => (h, port_of(p)?),
            None => (rest, 443),
        },
    };
    let host = host_name(host).map_err(|e| bad(&e))?;
    Ok((host, port))
}

/// Validates a host name for `[[site]] hosts`: lower-cased, trailing dot removed, no port;
/// IPv6 literals (with or without brackets) are stored without brackets, as the host part of
/// an authority is matched without them.
pub(super) fn host_name(h: &str) -> Result<String, String> {
    let h = h.trim().trim_end_matches('.').to_ascii_lowercase();
    if h.is_empty() {
        return Err("empty host name".into());
    }
    let unbracketed = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(&h);
    if let Ok(v6) = unbracketed.parse::<std::net::Ipv6Addr>() {
        return Ok(v6.to_string());
    }
    if h.contains(':') {
        return Err(format!("`{h}`: host names have no port"));
    }
    if !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_') {
        return Err(format!("`{h}` is not a host name (letters, digits, `-`, `.`; no wildcards)"));
    }
    Ok(h)
}

/// A number from the file, checked against `min..=max`, or `default` when absent.
pub(super) fn bounded<T>(
    src: &Source<'_>,
    v: &Option<Spanned<T>>,
    name: &str,
    min: T,
    max: T,
    default: T,
) -> Result<T, ConfigError>
where
    T: Copy + PartialOrd + fmt::Display,
{
    match v {
        None => Ok(default),
        Some(s) if *s.get_ref() < min || *s.get_ref() > max => {
            Err(src.err(s.span(), format!("`{name}` must be between {min} and {max}, not {}", s.get_ref())))
        }
        Some(s) => Ok(*s.get_ref()),
    }
}

fn limits(src: &Source<'_>, raw: &RawLimits) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    Ok(Limits {
        max_concurrent_streams: bounded(
            src,
            &raw.max_concurrent_streams,
            "max_concurrent_streams",
            1,
            u32::MAX,
            d.max_concurrent_streams,
        )?,
        max_header_list_size: bounded(
            src,
            &raw.max_header_list_size,
            "max_header_list_size",
            MIN_HEADER_LIST_SIZE,
            u32::MAX,
            d.max_header_list_size,
        )?,
        max_continuation_frames: raw.max_continuation_frames.unwrap_or(d.max_continuation_frames),
        header_table_size: bounded(
            src,
            &raw.header_table_size,
            "header_table_size",
            0,
            MAX_HEADER_TABLE_SIZE,
            d.header_table_size,
        )?,
        max_resets_per_window: bounded(
            src,
            &raw.max_resets_per_window,
            "max_resets_per_window",
            1,
            u32::MAX,
            d.max_resets_per_window,
        )?,
        max_pings_per_window: bounded(
            src,
            &raw.max_pings_per_window,
            "max_pings_per_window",
            1,
            u32::MAX,
            d.max_pings_per_window,
        )?,
        max_settings_per_window: bounded(
            src,
            &raw.max_settings_per_window,
            "max_settings_per_window",
            1,
            u32::MAX,
            d.max_settings_per_window,
        )?,
        max_glitches_per_window: bounded(
            src,
            &raw.max_glitches_per_window,
            "max_glitches_per_window",
            1,
            u32::MAX,
            d.max_glitches_per_window,
        )?,
        flood_window: Duration::from_secs(bounded(
            src,
            &raw.flood_window_secs,
            "flood_window_secs",
            1,
            3600,
            d.flood_window.as_secs(),
        )?),
        max_request_body: raw.max_request_body.unwrap_or(d.max_request_body),
        max_connections: bounded(src, &raw.max_connections, "max_connections", 1, 1 << 24, d.max_connections)?,
        min_rate: bounded(src, &raw.min_rate, "min_rate", 0, 1 << 30, d.min_rate)?,
        send_buffer: bounded(src, &raw.send_buffer, "send_buffer", 1 << 20, 1 << 40, d.send_buffer)?,
    })
}

fn timeouts(src: &Source<'_>, raw: &RawTimeouts) -> Result<Timeouts, ConfigError> {
    let d = Timeouts::default();
    // A day is far beyond any sensible value and keeps `Instant + Duration` from overflowing.
    const DAY: u64 = 86_400;
    let secs =
        |v, name, min, default: Duration| bounded(src, v, name, min, DAY, default.as_secs()).map(Duration::from_secs);
    Ok(Timeouts {
        header: secs(&raw.header_secs, "header_secs", 1, d.header)?,
        idle: secs(&raw.idle_secs, "idle_secs", 1, d.idle)?,
        drain: secs(&raw.drain_secs, "drain_secs", 0, d.drain)?,
    })
}

/// A configuration for tests from `sites` (TOML), with an upstream `app` (at a port nothing
/// answers on) and a `www` directory beside the configuration file.
#[cfg(test)]
pub(crate) fn for_test(sites: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "data_dir = '{d}'\naccess_log = false\n[quic]\nenabled = false\n\
         [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n{sites}",
        d = dir.path().display()
    );
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("sluice.toml"), toml).unwrap();
    load(&dir.path().join("sluice.toml")).unwrap()
}

#[cfg(test)]
mod tests;
