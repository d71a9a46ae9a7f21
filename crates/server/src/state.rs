//! What every connection shares: the validated configuration and what is derived from it once
//! (engine configurations, the receive-window memory budget, the congestion control to set,
//! every route's handler and the upstreams' live state).

use crate::config::Config;
use crate::handlers::speedtest::Speedtest;
use crate::handlers::Handler;

/// What every connection shares.
pub(crate) struct State {
    /// The validated configuration.
    pub(crate) cfg: Config,
    /// The HTTP/2 engine configuration derived from it.
    pub(crate) h2: sluice_h2::Config,
    /// The HTTP/3 engine configuration derived from it.
    pub(crate) h3: sluice_h3::Config,
    /// The memory every connection's receive windows may grow into.
    pub(crate) window_budget: std::sync::Arc<sluice_tune::autotune::MemoryBudget>,
    /// Response bytes every stream of the process may hold waiting to be framed
    /// (`limits.send_buffer`; see `app::respond::SendRoom`).
    pub(crate) send_budget: std::sync::Arc<tokio::sync::Semaphore>,
    /// The congestion control set on accepted sockets, when the kernel offers the configured one.
    pub(crate) congestion: Option<String>,
    /// The upstreams' live state (`Config::upstreams`, same order).
    pub(crate) upstreams: Vec<std::sync::Arc<crate::handlers::proxy::Upstream>>,
    /// Every route's handler: `handlers[i][j]` answers `cfg.sites[i].routes[j]`.
    pub(crate) handlers: Vec<Vec<Handler>>,
    /// The server-wide speed-test endpoints (`[speedtest]`), answered on every site before
    /// routing.
    pub(crate) speedtest: Speedtest,
    /// The forward proxy (`[connect]`): CONNECT and CONNECT-UDP; `None`: off (405).
    pub(crate) tunnels: Option<crate::handlers::tunnel::Tunnels>,
    /// Whether some route serves files with no header rules and no configured hints: only such
    /// a route's answers can be made inline (`app::respond::answer_inline`). A configuration
    /// without one (a reverse proxy's) skips that attempt for every request.
    pub(crate) inline_routes: bool,
    /// Every route's metrics id (`message::metrics::route_id`), as `handlers`.
    pub(crate) route_ids: Vec<Vec<u32>>,
    /// Set when a reload replaced this state: its HTTP/1.1 connections close after their next
    /// response.
    retired: std::sync::atomic::AtomicBool,
}

impl State {
    /// The state for `cfg` (tests; the server starts through `after`).
    #[cfg(test)]
    pub(crate) fn new(cfg: Config) -> Self {
        Self::after(cfg, None)
    }

    /// The state for `cfg`, taking over from `previous` (a reload) what did not change: each
    /// upstream whose configuration is the same keeps its connection pools, health and learned
    /// hints, and the memory budgets of the same size stay shared, so that connections of
    /// either configuration draw on one budget.
    pub(crate) fn after(cfg: Config, previous: Option<&Self>) -> Self {
        let l = &cfg.limits;
        let h2 = sluice_h2::Config {
            max_concurrent_streams: l.max_concurrent_streams,
            max_header_list_size: l.max_header_list_size,
            max_continuation_frames: l.max_continuation_frames,
            header_table_size: l.header_table_size,
            max_resets_per_window: l.max_resets_per_window,
            max_pings_per_window: l.max_pings_per_window,
            max_settings_per_window: l.max_settings_per_window,
            max_glitches_per_window: l.max_glitches_per_window,
            flood_window: l.flood_window,
            header_timeout: cfg.timeouts.header,
            idle_timeout: cfg.timeouts.idle,
            // RFC 8441: WebSockets ride the connection (bridged to HTTP/1.1 upstreams).
            enable_connect_protocol: true,
            ..sluice_h2::Config::default()
        };
        let window_budget = match previous {
            Some(p) if p.window_budget.limit() == cfg.flow.budget => p.window_budget.clone(),
            _ => sluice_tune::autotune::MemoryBudget::new(cfg.flow.budget),
        };
        let congestion = cfg.tcp.congestion.clone().filter(|cc| match sluice_sys::sock::congestion_available(cc) {
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
            // The same budgets as HTTP/2 (`docs/hardening.md`, Limits: every limit holds for both).
            header_timeout: cfg.timeouts.header,
            max_resets_per_window: l.max_resets_per_window,
            max_glitches_per_window: l.max_glitches_per_window,
            flood_window: l.flood_window,
            // RFC 9220: WebSockets over HTTP/3 too.
            enable_connect_protocol: true,
            // RFC 9297: CONNECT-UDP's payloads in QUIC DATAGRAM frames.
            h3_datagram: cfg.udp_tunnels(),
            ..sluice_h3::Config::default()
        };
        let send_budget = match previous {
            Some(p) if p.cfg.limits.send_buffer == cfg.limits.send_buffer => p.send_budget.clone(),
            _ => std::sync::Arc::new(tokio::sync::Semaphore::new(cfg.limits.send_buffer)),
        };
        let upstreams: Vec<_> = cfg
            .upstreams
            .iter()
            .map(|u| match previous.and_then(|p| p.upstreams.iter().find(|o| o.cfg.same_as(u))) {
                Some(kept) => kept.clone(),
                None => crate::handlers::proxy::Upstream::new(u.clone()),
            })
            .collect();
        let handlers =
            cfg.sites.iter().map(|s| s.routes.iter().map(|r| Handler::new(r, &cfg, &upstreams)).collect()).collect();
        let speedtest = Speedtest::new(&cfg.speedtest);
        let tunnels = cfg.connect.as_ref().map(crate::handlers::tunnel::Tunnels::new);
        let inline_routes = cfg.sites.iter().flat_map(|s| &s.routes).any(|r| {
            matches!(r.handler, crate::config::RouteHandler::Root(_))
                && r.early_hints.is_empty()
                && r.headers.is_empty()
        });
        let route_ids = cfg
            .sites
            .iter()
            .map(|s| {
                let site = s.hosts.first().map_or("default", String::as_str);
                s.routes.iter().map(|r| crate::message::metrics::route_id(site, &r.path)).collect()
            })
            .collect();
        Self {
            cfg,
            h2,
            h3,
            window_budget,
            send_budget,
            congestion,
            upstreams,
            handlers,
            speedtest,
            tunnels,
            inline_routes,
            route_ids,
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A reload replaced this state: HTTP/1.1 connections close after their next response.
    pub(crate) fn retire(&self) {
        self.retired.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The minimum-progress rule for a connection's writes and an HTTP/1.1 request body's
    /// reads: `limits.min_rate` over windows of `timeouts.header` (0: never enforced).
    pub(crate) fn write_rule(&self) -> crate::config::ProgressRule {
        crate::config::ProgressRule::new(self.cfg.limits.min_rate, self.cfg.timeouts.header)
    }

    /// The handler of route `route` of site `site` (indexes into `cfg.sites`, as
    /// `Config::route_for` gives them).
    pub(crate) fn handler(&self, site: usize, route: usize) -> &Handler {
        &self.handlers[site][route]
    }

    /// A receive-window policy for a new HTTP/2 connection.
    pub(crate) fn window_policy(&self) -> Box<dyn sluice_tune::window::WindowPolicy> {
        use crate::config::FlowPolicy;
        use sluice_tune::autotune::{AutoTune, HyperBdp, Limits, QuicheRule, WriteupRule};
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
            FlowPolicy::Fixed => Box::new(sluice_tune::window::FixedWindows {
                stream: f.initial_stream_window,
                connection: f.initial_connection_window,
            }),
        }
    }
}

/// A state for tests from `sites` (TOML): see `config::for_test`.
#[cfg(test)]
pub(crate) fn for_test(sites: &str) -> State {
    State::new(crate::config::for_test(sites))
}

#[cfg(test)]
mod tests {
    use super::for_test as state;

    #[test]
    fn only_a_plain_file_route_can_be_answered_inline() {
        assert!(state("[[site]]\nroot = 'www'\n").inline_routes);
        assert!(!state("[[site]]\nproxy = \"app\"\n").inline_routes);
        // Header rules change a file's answer: it takes the usual path.
        let ruled = "[[site]]\nproxy = \"app\"\n[[site.route]]\npath = \"/s/\"\nroot = 'www'\n\
                     headers = { add = { \"x-a\" = \"1\" } }\n";
        assert!(!state(ruled).inline_routes);
        let mixed = "[[site]]\nproxy = \"app\"\n[[site.route]]\npath = \"/s/\"\nroot = 'www'\n";
        assert!(state(mixed).inline_routes);
    }
}
