//! Routing a request to its handler: the site by host name (the default site for any other
//! host), then the route with the longest matching path prefix, then the route's response
//! header rules. The speed-test endpoints (`[speedtest]`) answer on every site before routing.

use http::StatusCode;

use crate::app::http::{Interim, Request, Response};
use crate::config::{Config, Route, RouteHandler, Site};
use crate::state::State;

/// Answer one request. `alt_svc` goes into the response before the route's header rules, so a
/// rule can change or remove it.
pub(crate) async fn dispatch(state: &State, req: &mut Request, alt_svc: Option<&http::HeaderValue>) -> Response {
    // `handle` answers only the speed-test paths (when enabled), and leaves others untouched.
    if let Some(mut resp) = crate::handlers::speedtest::handle(&state.cfg.speedtest, req).await {
        add_alt_svc(&mut resp, alt_svc);
        return resp;
    }
    let Some(route) = route(&state.cfg, &req.authority, &req.path) else {
        let mut resp = Response::text(StatusCode::NOT_FOUND, "no site or route is configured for this host and path\n");
        add_alt_svc(&mut resp, alt_svc);
        return resp;
    };
    // The proxy sends the configured hints itself, merged with what it learned.
    let proxied = matches!(route.handler, RouteHandler::Proxy(_));
    if !proxied
        && !route.early_hints.is_empty()
        && req.method == http::Method::GET
        && Interim::of(&req.counters).available()
    {
        // RFC 8297: the hints go out before the handler starts on the final response.
        let mut hints = http::HeaderMap::with_capacity(route.early_hints.len());
        for v in &route.early_hints {
            hints.append(http::header::LINK, v.clone());
        }
        if Interim::of(&req.counters).send(StatusCode::EARLY_HINTS, &hints) {
            req.counters.hints.fetch_or(crate::app::accesslog::HINTS_CONFIGURED, std::sync::atomic::Ordering::Relaxed);
        }
    }
    // The handlers' futures are awaited right here, not through a helper `async fn`: each
    // layer of async functions moves its child's (large) future once more per request.
    let mut resp = match &route.handler {
        RouteHandler::Root(root) => crate::handlers::static_files::serve(root, req).await,
        RouteHandler::Builtin => crate::handlers::builtin::serve_builtin(req),
        RouteHandler::Speedtest => match crate::handlers::speedtest::endpoint(&req.path) {
            Some(ep) => crate::handlers::speedtest::serve(&state.cfg.speedtest, req, ep).await,
            None => Response::text(StatusCode::NOT_FOUND, "not a speed-test endpoint (__down, __up, __ping)\n"),
        },
        // Boxed: the proxy's future is large, and inline it would grow every request's future
        // (and the allocation each HTTP/2 and HTTP/3 request makes for it).
        RouteHandler::Proxy(i) => {
            Box::pin(crate::proxy::serve(&state.upstreams[*i], req, &state.cfg.proxy, &route.early_hints)).await
        }
    };
    add_alt_svc(&mut resp, alt_svc);
    if !route.headers.is_empty() {
        // The rules may set or remove any field: they see every one in the map.
        resp.materialize();
        route.headers.apply(&mut resp.headers);
    }
    resp
}

/// Add the connection's `Alt-Svc` to `resp`, if it has one (RFC 7838). In place: a response
/// is a few hundred bytes to move.
pub(crate) fn add_alt_svc(resp: &mut Response, alt_svc: Option<&http::HeaderValue>) {
    if let Some(v) = alt_svc {
        // `insert` replaces: a prebuilt `alt-svc` must be in the map for that.
        if resp.head_has("alt-svc") {
            resp.materialize();
        }
        resp.headers.insert(http::header::ALT_SVC, v.clone());
    }
}

/// The site serving `authority`: the one naming its host, else the default site.
pub(crate) fn site<'a>(cfg: &'a Config, authority: &str) -> Option<&'a Site> {
    let host = host_of(authority);
    cfg.sites
        .iter()
        .find(|s| s.hosts.iter().any(|h| h == host))
        .or_else(|| cfg.sites.iter().find(|s| s.hosts.is_empty()))
}

/// The route for `path` on the site serving `authority`: the longest prefix that matches
/// (routes are kept longest first). A prefix ending in `/` matches what starts with it; one
/// that does not also matches the same path with a `/` after it, never a longer name
/// (`/api` matches `/api` and `/api/x`, not `/apis`).
pub(crate) fn route<'a>(cfg: &'a Config, authority: &str, path: &str) -> Option<&'a Route> {
    site(cfg, authority)?.routes.iter().find(|r| prefix_matches(&r.path, path))
}

fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// The host part of an authority: no port, no IPv6 brackets, no trailing dot (the config
/// stores site hosts the same way).
pub(crate) fn host_of(authority: &str) -> &str {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        // The port, if any, is the digits after the last colon: scanned from the end by hand
        // (`rsplit_once(':')` sets up a general searcher, about 150 instructions a request).
        let b = authority.as_bytes();
        let mut at = b.len();
        while at > 0 && b[at - 1].is_ascii_digit() {
            at -= 1;
        }
        if at > 0 && b[at - 1] == b':' {
            &authority[..at - 1]
        } else {
            authority
        }
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
        // What follows the last colon is a port only if it is all digits (or nothing).
        assert_eq!(host_of("example.com:"), "example.com");
        assert_eq!(host_of("a:b1"), "a:b1");
        assert_eq!(host_of("a:1b"), "a:1b");
        assert_eq!(host_of("a:1:2"), "a:1");
        assert_eq!(host_of("8443"), "8443");
    }

    #[test]
    fn prefixes() {
        assert!(prefix_matches("/", "/anything"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(!prefix_matches("/api/", "/api"));
        assert!(prefix_matches("/api", "/api"));
        assert!(prefix_matches("/api", "/api/x"));
        assert!(!prefix_matches("/api", "/apis"));
        assert!(!prefix_matches("/api", "/"));
    }
}
