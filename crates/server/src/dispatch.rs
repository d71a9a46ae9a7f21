//! Routing a request to its handler, and the access log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::{Method, StatusCode};

use crate::config::{Config, SiteContent};
use crate::http::{Proto, Request, Response};

/// What every connection shares.
pub(crate) struct State {
    /// The validated configuration.
    pub(crate) cfg: Config,
    /// The HTTP/2 engine configuration derived from it.
    pub(crate) h2: sluice_h2::Config,
    /// The HTTP/3 engine configuration derived from it.
    pub(crate) h3: sluice_h3::Config,
    /// The memory every connection's receive windows may grow into.
    pub(crate) window_budget: std::sync::Arc<sluice_h2::tune::MemoryBudget>,
    /// The congestion control set on accepted sockets, when the kernel offers the configured one.
    pub(crate) congestion: Option<String>,
}

impl State {
    pub(crate) fn new(cfg: Config) -> Self {
        let l = &cfg.limits;
        let h2 = sluice_h2::Config {
            max_concurrent_streams: l.max_concurrent_streams,
            max_header_list_size: l.max_header_list_size,
            max_continuation_frames: l.max_continuation_frames,
            header_table_size: l.header_table_size,
            max_resets_per_window: l.max_resets_per_window,
            max_pings_per_window: l.max_pings_per_window,
            max_settings_per_window: l.max_settings_per_window,
            flood_window: l.flood_window,
            header_timeout: cfg.timeouts.header,
            idle_timeout: cfg.timeouts.idle,
            ..sluice_h2::Config::default()
        };
        let window_budget = sluice_h2::tune::MemoryBudget::new(cfg.flow.budget);
        let congestion = cfg.tcp.congestion.clone().filter(|cc| match crate::sock::congestion_available(cc) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(cc, %e, "congestion control not available here: accepted sockets keep the system default");
                false
            }
        });
        let h3 = sluice_h3::Config {
            max_concurrent_streams: l.max_concurrent_streams as usize,
            max_field_section_size: u64::from(l.max_header_list_size),
            qpack_max_table_capacity: u64::from(l.header_table_size),
            ..sluice_h3::Config::default()
        };
        Self { cfg, h2, h3, window_budget, congestion }
    }

    /// A receive-window policy for a new HTTP/2 connection.
    pub(crate) fn window_policy(&self) -> Box<dyn sluice_h2::flow::WindowPolicy> {
        use crate::config::FlowPolicy;
        use sluice_h2::tune::{AutoTune, HyperBdp, Limits, QuicheRule, WriteupRule};
        let f = &self.cfg.flow;
        let limits = Limits {
            initial_stream: f.initial_stream_window,
            initial_connection: f.initial_connection_window,
            max_stream: f.max_stream_window,
            max_connection: f.max_connection_window,
            budget: self.window_budget.clone(),
        };
        match f.policy {
            FlowPolicy::Auto => Box::new(AutoTune::new(limits)),
            FlowPolicy::Writeup => Box::new(WriteupRule::new(limits)),
            FlowPolicy::Quiche => Box::new(QuicheRule::new(limits)),
            FlowPolicy::Hyper => Box::new(HyperBdp::new(limits)),
            FlowPolicy::Fixed => Box::new(sluice_h2::flow::FixedWindows {
                stream: f.initial_stream_window,
                connection: f.initial_connection_window,
            }),
        }
    }
}

/// Paths of the speed-test endpoints.
const SPEEDTEST_PATHS: &[&str] = &["/__down", "/__up", "/__ping"];

/// Answer one request.
pub(crate) async fn dispatch(state: &State, mut req: Request) -> Response {
    if let Some(len) =
        req.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
    {
        if len > state.cfg.limits.max_request_body {
            return Response::text(StatusCode::PAYLOAD_TOO_LARGE, "request body larger than limits.max_request_body\n");
        }
    }
    if state.cfg.speedtest.enabled && SPEEDTEST_PATHS.contains(&req.path.as_str()) {
        if let Some(resp) = crate::speedtest::handle(&state.cfg.speedtest, &mut req).await {
            return resp;
        }
        return Response::text(StatusCode::NOT_FOUND, "not found\n");
    }
    let host = host_of(&req.authority);
    let site = state
        .cfg
        .sites
        .iter()
        .find(|s| s.hosts.iter().any(|h| h == host))
        .or_else(|| state.cfg.sites.iter().find(|s| s.hosts.is_empty()));
    match site.map(|s| &s.content) {
        Some(SiteContent::Root(root)) => crate::static_files::serve(root, &req).await,
        Some(SiteContent::Builtin) => crate::site::serve_builtin(&req),
        None => Response::text(StatusCode::NOT_FOUND, "no site is configured for this host\n"),
    }
}

/// The host part of an authority: no port, no IPv6 brackets, no trailing dot (the config
/// stores site hosts the same way).
pub(crate) fn host_of(authority: &str) -> &str {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        authority
            .rsplit_once(':')
            .map_or(authority, |(h, p)| if p.chars().all(|c| c.is_ascii_digit()) { h } else { authority })
    };
    host.strip_suffix('.').unwrap_or(host)
}

/// What the protocol driver counts while a request runs, for its access-log line.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Request body bytes received.
    pub(crate) bytes_in: AtomicU64,
    /// Largest receive window granted to the request body (HTTP/2; 0: not applicable).
    pub(crate) recv_window: AtomicU64,
}

/// One access-log line, written when the exchange ends (the guard is dropped).
pub(crate) struct AccessLog {
    pub(crate) enabled: bool,
    pub(crate) proto: Proto,
    pub(crate) peer: SocketAddr,
    pub(crate) method: Method,
    pub(crate) authority: String,
    pub(crate) path: String,
    pub(crate) status: u16,
    pub(crate) start: Instant,
    /// Request body bytes received, and the receive window granted (the driver counts them).
    pub(crate) counters: Arc<Counters>,
    /// Response body bytes handed to the connection.
    pub(crate) bytes_out: u64,
    /// How the exchange ended ("ok", "reset", ...).
    pub(crate) outcome: &'static str,
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        if !self.enabled {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        crate::accesslog::write(&format!(
            "{}.{:03} {} {} {} {} {} {} in={} out={}{} {:.1}ms {}\n",
            now.as_secs(),
            now.subsec_millis(),
            self.peer,
            self.proto,
            self.method,
            self.authority,
            self.path,
            self.status,
            self.counters.bytes_in.load(Ordering::Relaxed),
            self.bytes_out,
            match self.counters.recv_window.load(Ordering::Relaxed) {
                0 => String::new(),
                w => format!(" win={w}"),
            },
            self.start.elapsed().as_secs_f64() * 1e3,
            self.outcome
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(host_of("example.com:8443"), "example.com");
        assert_eq!(host_of("example.com"), "example.com");
        assert_eq!(host_of("[::1]:8443"), "::1");
        assert_eq!(host_of("[::1]"), "::1");
        assert_eq!(host_of("example.com.:443"), "example.com");
    }
}
