//! What answers requests: static files, the speed test, the built-in site and the reverse
//! proxy, each a variant of [`Handler`], built once per route from the configuration (when the
//! server state is made), so that answering a request is a `match`: no boxed handler, no
//! lookup by name, no handler reaching into another.
//!
//! Layer rule (checked by `tests/layers.rs`): a handler module uses the message types, the
//! configuration and the shared helpers here ([`conditional`], [`pipe`]), never another
//! handler.

pub(crate) mod builtin;
pub(crate) mod conditional;
pub(crate) mod encoding;
pub(crate) mod pipe;
pub(crate) mod proxy;
pub(crate) mod speedtest;
pub(crate) mod static_files;
pub(crate) mod tunnel;

use std::sync::Arc;

use crate::config::{Config, Route, RouteHandler};

/// What answers one route's requests.
pub(crate) enum Handler {
    /// Files under a root directory.
    Files(static_files::Files),
    /// The built-in site.
    Builtin,
    /// The speed-test endpoints, by the path's last segment.
    Speedtest(speedtest::Speedtest),
    /// The reverse proxy (boxed: it is the largest, and the rest are a pointer or two).
    Proxy(Box<proxy::Proxy>),
}

impl Handler {
    /// The handler of `route`; `upstreams` are the live upstreams in `Config::upstreams`'s
    /// order.
    pub(crate) fn new(route: &Route, cfg: &Config, upstreams: &[Arc<proxy::Upstream>]) -> Self {
        match &route.handler {
            RouteHandler::Root(root) => Self::Files(static_files::Files::new(
                root.clone(),
                (cfg.compression.enabled && route.compress).then(|| Arc::new(cfg.compression.clone())),
            )),
            RouteHandler::Builtin => Self::Builtin,
            RouteHandler::Speedtest => Self::Speedtest(speedtest::Speedtest::new(&cfg.speedtest)),
            RouteHandler::Proxy(i) => Self::Proxy(Box::new(proxy::Proxy::new(
                upstreams[*i].clone(),
                cfg.proxy.clone(),
                route.early_hints.clone(),
            ))),
        }
    }

    /// Whether the handler sends the route's configured Early Hints itself (the proxy merges
    /// them with what it learned from the upstream); for the others the router sends them.
    pub(crate) fn sends_own_hints(&self) -> bool {
        matches!(self, Self::Proxy(_))
    }
}
