//! The servers under test by name: Sluice's variants (`Flow`) and every `ServerKind`, with
//! their ports, paths, programs and packages.

/// A Sluice variant: a receive-window policy other than its default (`[flow] policy`), or the
/// congestion window filled without the in-flight bound (`[tcp] limit_inflight = false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flow {
    /// Fixed 64 KiB stream windows (the RFC default), never grown.
    Fixed64k,
    /// Fixed 512 KiB stream windows (nginx512's buffer), never grown.
    Fixed512k,
    /// The write-up's doubling rule.
    Writeup,
    /// quiche's rule.
    Quiche,
    /// hyper's PING-based BDP estimator.
    Hyper,
    /// Default windows; sends fill the congestion window (no in-flight bound near the BDP).
    FillCwnd,
    /// HTTP/3 on quinn's BBR (`[quic] congestion = "bbr"`).
    QuicBbr,
    /// HTTP/3 on quinn's CUBIC (`[quic] congestion = "cubic"`), whatever Sluice's default.
    QuicCubic,
    /// HTTP/3 without Sluice's in-flight bound: quinn's congestion window alone decides what is
    /// sent (`[quic] limit_inflight = false`; a Sluice binary without that setting refuses it).
    QuicNoCap,
    /// Its TCP sockets on CUBIC, filling the congestion window (`[tcp] congestion = "cubic"`,
    /// `limit_inflight = false`): the `fairness` experiment's TCP competitor.
    TcpCubic,
    /// Its TCP sockets on CUBIC with the in-flight bound kept (`[tcp] congestion = "cubic"`):
    /// what BBR, Sluice's default, costs or gains where the bound stays.
    TcpCubicBound,
}

impl Flow {
    /// The `[flow]` table for this policy.
    pub fn table(self) -> String {
        let windows = match self {
            // A connection window of 16 streams' worth, so the stream window is what limits.
            Self::Fixed64k => "initial_stream_window = 65535\ninitial_connection_window = 1048560\n",
            Self::Fixed512k => "initial_stream_window = 524288\ninitial_connection_window = 8388608\n",
            _ => "",
        };
        match self {
            Self::FillCwnd => "\n[tcp]\nlimit_inflight = false\n".into(),
            Self::QuicBbr => "\n[quic]\ncongestion = \"bbr\"\n".into(),
            Self::QuicCubic => "\n[quic]\ncongestion = \"cubic\"\n".into(),
            Self::QuicNoCap => "\n[quic]\nlimit_inflight = false\n".into(),
            Self::TcpCubic => "\n[tcp]\ncongestion = \"cubic\"\nlimit_inflight = false\n".into(),
            Self::TcpCubicBound => "\n[tcp]\ncongestion = \"cubic\"\n".into(),
            _ => format!("\n[flow]\npolicy = \"{}\"\n{windows}", self.policy()),
        }
    }

    /// The `[flow] policy` value.
    pub fn policy(self) -> &'static str {
        match self {
            Self::Fixed64k | Self::Fixed512k => "fixed",
            Self::Writeup => "writeup",
            Self::Quiche => "quiche",
            Self::Hyper => "hyper",
            Self::FillCwnd
            | Self::QuicBbr
            | Self::QuicCubic
            | Self::QuicNoCap
            | Self::TcpCubic
            | Self::TcpCubicBound => "auto",
        }
    }

    /// The configuration that makes this variant, for reports.
    pub fn describe(self) -> String {
        match self {
            Self::FillCwnd => "`[tcp] limit_inflight = false`".into(),
            Self::QuicBbr => "`[quic] congestion = \"bbr\"`".into(),
            Self::QuicCubic => "`[quic] congestion = \"cubic\"`".into(),
            Self::QuicNoCap => "`[quic] limit_inflight = false`".into(),
            Self::TcpCubic => "`[tcp] congestion = \"cubic\"`, `limit_inflight = false`".into(),
            Self::TcpCubicBound => "`[tcp] congestion = \"cubic\"`".into(),
            _ => format!("`[flow] policy = \"{}\"`", self.policy()),
        }
    }
}

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerKind {
    /// Sluice with its default settings, answering the upload itself.
    Sluice,
    /// Sluice with another receive-window policy.
    SluiceFlow(Flow),
    /// nginx as the write-up ran it: `client_body_buffer_size 128k`, unbuffered proxying.
    Nginx,
    /// The same with `client_body_buffer_size 512k` (the write-up's best at 40 ms).
    Nginx512,
    /// h2o, `proxy.reverse.url`.
    H2o,
    /// Caddy, `reverse_proxy`.
    Caddy,
    /// nginx with the prioritization write-up's tuning in the server namespace
    /// (`tcp_notsent_lowat` 16384, BBR): `priority` experiment only.
    NginxTuned,
    /// h2o with the same tuning: `priority` experiment only.
    H2oTuned,
    /// Caddy with the same tuning: `priority` experiment only.
    CaddyTuned,
    /// Sluice serving HTTP/3 too, the client forced onto it: `pageload` experiment only.
    SluiceH3,
    /// Caddy serving HTTP/3 too, the client forced onto it: `pageload` experiment only.
    CaddyH3,
    /// Sluice as a reverse proxy: `upload` proxies `POST /p/__up` to the sink (Sluice does not
    /// rewrite paths, so the sink answers `__up` under a `/p/` speedtest route).
    SluiceProxy,
    /// Sluice as a reverse proxy with `early_hints_learn = false`: `earlyhints` experiment only.
    SluiceNoLearn,
    /// HAProxy (Debian `haproxy`): `proxymem` experiment only.
    Haproxy,
}

/// The servers run by default, in the default order.
pub const DEFAULT: [ServerKind; 5] =
    [ServerKind::Sluice, ServerKind::Nginx, ServerKind::Nginx512, ServerKind::H2o, ServerKind::Caddy];

/// Every server `--servers` knows.
pub const ALL: [ServerKind; 24] = [
    ServerKind::Sluice,
    ServerKind::Nginx,
    ServerKind::Nginx512,
    ServerKind::H2o,
    ServerKind::Caddy,
    ServerKind::SluiceFlow(Flow::Fixed64k),
    ServerKind::SluiceFlow(Flow::Fixed512k),
    ServerKind::SluiceFlow(Flow::Writeup),
    ServerKind::SluiceFlow(Flow::Quiche),
    ServerKind::SluiceFlow(Flow::Hyper),
    ServerKind::SluiceFlow(Flow::FillCwnd),
    ServerKind::SluiceFlow(Flow::QuicBbr),
    ServerKind::SluiceFlow(Flow::QuicCubic),
    ServerKind::SluiceFlow(Flow::QuicNoCap),
    ServerKind::SluiceFlow(Flow::TcpCubic),
    ServerKind::SluiceFlow(Flow::TcpCubicBound),
    ServerKind::NginxTuned,
    ServerKind::H2oTuned,
    ServerKind::CaddyTuned,
    ServerKind::SluiceH3,
    ServerKind::CaddyH3,
    ServerKind::SluiceProxy,
    ServerKind::SluiceNoLearn,
    ServerKind::Haproxy,
];

impl ServerKind {
    /// The name used on the command line, in the CSV and the charts.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sluice => "sluice",
            Self::SluiceFlow(Flow::Fixed64k) => "sluice-fixed64k",
            Self::SluiceFlow(Flow::Fixed512k) => "sluice-fixed512k",
            Self::SluiceFlow(Flow::Writeup) => "sluice-writeup",
            Self::SluiceFlow(Flow::Quiche) => "sluice-quiche",
            Self::SluiceFlow(Flow::Hyper) => "sluice-hyper",
            Self::SluiceFlow(Flow::FillCwnd) => "sluice-cwnd",
            Self::SluiceFlow(Flow::QuicBbr) => "sluice-h3bbr",
            Self::SluiceFlow(Flow::QuicCubic) => "sluice-h3cubic",
            Self::SluiceFlow(Flow::QuicNoCap) => "sluice-h3nocap",
            Self::SluiceFlow(Flow::TcpCubic) => "sluice-tcpcubic",
            Self::SluiceFlow(Flow::TcpCubicBound) => "sluice-cubic",
            Self::Nginx => "nginx",
            Self::Nginx512 => "nginx512",
            Self::H2o => "h2o",
            Self::Caddy => "caddy",
            Self::NginxTuned => "nginx-tuned",
            Self::H2oTuned => "h2o-tuned",
            Self::CaddyTuned => "caddy-tuned",
            Self::SluiceH3 => "sluice-h3",
            Self::CaddyH3 => "caddy-h3",
            Self::SluiceProxy => "sluice-proxy",
            Self::SluiceNoLearn => "sluice-nolearn",
            Self::Haproxy => "haproxy",
        }
    }

    /// Whether this is a variant run with the write-up's sysctl tuning in the server namespace.
    pub fn is_tuned(self) -> bool {
        matches!(self, Self::NginxTuned | Self::H2oTuned | Self::CaddyTuned)
    }

    /// Whether this is a variant whose client is forced onto HTTP/3.
    pub fn is_h3(self) -> bool {
        matches!(self, Self::SluiceH3 | Self::CaddyH3)
    }

    /// Parses a name from `--servers`.
    pub fn parse(s: &str) -> Result<Self, String> {
        ALL.into_iter().find(|k| k.name() == s.trim()).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|k| k.name()).collect();
            format!("unknown server `{}` (known: {})", s.trim(), names.join(", "))
        })
    }

    /// Parses a comma-separated list, keeping its order, refusing duplicates and an empty list.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let k = Self::parse(part)?;
            if out.contains(&k) {
                return Err(format!("server `{}` listed twice in --servers", k.name()));
            }
            out.push(k);
        }
        if out.is_empty() {
            return Err("--servers lists no server".into());
        }
        Ok(out)
    }

    /// TLS port on the server address (each server has its own, so all can run at once).
    pub fn port(self) -> u16 {
        match self {
            Self::Sluice => 8443,
            Self::Nginx => 8444,
            Self::Nginx512 => 8445,
            Self::H2o => 8446,
            Self::Caddy => 8447,
            Self::SluiceFlow(Flow::Fixed64k) => 8448,
            Self::SluiceFlow(Flow::Fixed512k) => 8452,
            Self::SluiceFlow(Flow::Writeup) => 8449,
            Self::SluiceFlow(Flow::Quiche) => 8450,
            Self::SluiceFlow(Flow::Hyper) => 8451,
            Self::SluiceFlow(Flow::FillCwnd) => 8456,
            Self::SluiceFlow(Flow::QuicBbr) => 8457,
            Self::SluiceFlow(Flow::QuicCubic) => 8458,
            Self::SluiceFlow(Flow::QuicNoCap) => 8459,
            Self::SluiceFlow(Flow::TcpCubic) => 8462,
            Self::NginxTuned => 8453,
            Self::H2oTuned => 8454,
            Self::CaddyTuned => 8455,
            Self::SluiceH3 => 8460,
            Self::CaddyH3 => 8461,
            Self::SluiceProxy => 8463,
            Self::SluiceNoLearn => 8464,
            Self::Haproxy => 8465,
            Self::SluiceFlow(Flow::TcpCubicBound) => 8466,
        }
    }

    /// Path the upload is POSTed to: `/__up` where Sluice answers it itself, `/p/__up` through
    /// Sluice as a proxy (the path reaches the sink unchanged), `/up` through the peers (which
    /// rewrite it to the sink's `/__up`).
    pub fn upload_path(self) -> &'static str {
        match self {
            Self::SluiceProxy => "/p/__up",
            _ if self.uses_sink() => "/up",
            _ => "/__up",
        }
    }

    /// Whether the server proxies to the upstream sink.
    pub fn uses_sink(self) -> bool {
        !matches!(self, Self::Sluice | Self::SluiceFlow(_) | Self::SluiceH3)
    }

    /// Whether the server is the Sluice binary.
    pub fn is_sluice(self) -> bool {
        self.program() == "sluice"
    }

    /// The program this server runs.
    pub fn program(self) -> &'static str {
        match self {
            Self::Sluice | Self::SluiceFlow(_) | Self::SluiceH3 | Self::SluiceProxy | Self::SluiceNoLearn => "sluice",
            Self::Nginx | Self::Nginx512 | Self::NginxTuned => "nginx",
            Self::H2o | Self::H2oTuned => "h2o",
            Self::Caddy | Self::CaddyTuned | Self::CaddyH3 => "caddy",
            Self::Haproxy => "haproxy",
        }
    }

    /// The Debian package that provides the program.
    pub fn package(self) -> &'static str {
        match self {
            Self::Sluice | Self::SluiceFlow(_) | Self::SluiceH3 | Self::SluiceProxy | Self::SluiceNoLearn => {
                "(this workspace: cargo build --release -p sluice)"
            }
            Self::Nginx | Self::Nginx512 | Self::NginxTuned => "nginx-light",
            Self::H2o | Self::H2oTuned => "h2o",
            Self::Caddy | Self::CaddyTuned | Self::CaddyH3 => "caddy",
            Self::Haproxy => "haproxy",
        }
    }
}

/// The report's note on the Sluice variants among `servers` ("`sluice-cwnd` is Sluice with
/// `[tcp] limit_inflight = false`; ..."), or `None` when there are none.
pub fn variants_note(servers: &[ServerKind]) -> Option<String> {
    let variants: Vec<String> = servers
        .iter()
        .filter_map(|k| match k {
            ServerKind::SluiceFlow(f) => Some(format!("`{}` is Sluice with {}", k.name(), f.describe())),
            _ => None,
        })
        .collect();
    (!variants.is_empty()).then(|| format!("{}.", variants.join("; ")))
}
