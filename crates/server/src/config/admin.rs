//! `[admin]`: the admin listener (metrics, health) and whether metrics are counted. See
//! docs/configuration.md.

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Listener, Source};

/// The admin listener's address when none is configured: loopback only, as Caddy's
/// `localhost:2019`.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:9901";

/// `[admin]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admin {
    /// Where `/metrics`, `/healthz` and `/readyz` are served (cleartext HTTP/1.1); `None`: no
    /// admin listener.
    pub(crate) addr: Option<SocketAddr>,
    /// Whether `addr` was configured (a default that cannot be bound is a warning, a
    /// configured one an error).
    pub(crate) explicit: bool,
    /// Whether requests, connections and upstream exchanges are counted.
    pub(crate) metrics: bool,
}

impl Default for Admin {
    fn default() -> Self {
        Self { addr: DEFAULT_ADDR.parse().ok(), explicit: false, metrics: true }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    enabled: Option<bool>,
    addr: Option<Spanned<String>>,
    metrics: Option<bool>,
}

/// `[admin]`, validated: its address parses and is none of the public listeners'.
pub(super) fn admin(src: &Source<'_>, raw: &RawAdmin, listeners: &[Listener]) -> Result<Admin, ConfigError> {
    let d = Admin::default();
    if raw.enabled == Some(false) {
        return Ok(Admin { addr: None, explicit: true, metrics: raw.metrics.unwrap_or(false) });
    }
    let (addr, explicit) = match &raw.addr {
        None => (d.addr, false),
        Some(a) => {
            let parsed: SocketAddr = a.get_ref().parse().map_err(|_| {
                src.err(a.span(), format!("`{}` is not an address and port (`127.0.0.1:9901`)", a.get_ref()))
            })?;
            // Nothing admin is reachable on a public listener.
            if listeners.iter().any(|l| {
                l.addr.port() == parsed.port()
                    && (l.addr.ip() == parsed.ip() || l.addr.ip().is_unspecified() || parsed.ip().is_unspecified())
            }) {
                return Err(src.err(a.span(), format!("the admin listener `{parsed}` overlaps a [[listener]]")));
            }
            (Some(parsed), true)
        }
    };
    Ok(Admin { addr, explicit, metrics: raw.metrics.unwrap_or(d.metrics) })
}
