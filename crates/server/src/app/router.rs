//! Routing a request to its handler.

use http::StatusCode;

use crate::app::http::{Request, Response};
use crate::config::SiteContent;
use crate::state::State;

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
        if let Some(resp) = crate::handlers::speedtest::handle(&state.cfg.speedtest, &mut req).await {
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
        Some(SiteContent::Root(root)) => crate::handlers::static_files::serve(root, &req).await,
        Some(SiteContent::Builtin) => crate::handlers::builtin::serve_builtin(&req),
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
