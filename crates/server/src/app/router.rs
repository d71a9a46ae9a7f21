//! Routing a request to its handler: the site by host name (the default site for any other
//! host), then the route with the longest matching path prefix (`Config::route_for`), then
//! the route's handler, built once in the server state, and the route's response header
//! rules. The server-wide speed-test endpoints (`[speedtest]`) answer on every site before
//! routing.

use http::StatusCode;

use crate::config::Route;
use crate::handlers::Handler;
use crate::message::{Interim, Request, Response};
use crate::state::State;

/// The route, its handler and its metrics id for `path` on the site serving `authority`.
pub(crate) fn route<'a>(state: &'a State, authority: &str, path: &str) -> Option<(&'a Route, &'a Handler, u32)> {
    let (site, route) = state.cfg.route_for(authority, path)?;
    Some((&state.cfg.sites[site].routes[route], state.handler(site, route), state.route_ids[site][route]))
}

/// Answer one request, and say which route did (its metrics id; 0: none). `alt_svc` goes into
/// the response before the route's header rules, so a rule can change or remove it.
pub(crate) async fn dispatch(state: &State, req: &mut Request, alt_svc: Option<&http::HeaderValue>) -> (Response, u32) {
    if !req.tls && state.cfg.acme.is_some() {
        // HTTP-01 answers, and https for the names that have their ACME certificate.
        if let Some(resp) = crate::acme::shared().cleartext(&req.authority, &req.path, req.query.as_deref()) {
            return (resp, 0);
        }
    }
    if req.connect.is_some() {
        // The forward proxy's, whatever the site: a CONNECT's authority is where it goes.
        let resp = match &state.tunnels {
            Some(t) => Box::pin(t.serve(req)).await,
            None => {
                let mut r = Response::text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "this server is not a forward proxy ([connect] is not configured)\n",
                );
                r.headers
                    .insert(http::header::ALLOW, http::HeaderValue::from_static(crate::app::respond::SERVER_METHODS));
                r
            }
        };
        return (resp, 0);
    }
    if state.speedtest.claims(&req.path) {
        let mut resp = state.speedtest.serve_claimed(req).await;
        add_alt_svc(&mut resp, alt_svc);
        return (resp, 0);
    }
    let Some((route, handler, id)) = route(state, &req.authority, &req.path) else {
        let mut resp = Response::text(StatusCode::NOT_FOUND, "no site or route is configured for this host and path\n");
        add_alt_svc(&mut resp, alt_svc);
        return (resp, 0);
    };
    if !handler.sends_own_hints()
        && !route.early_hints.is_empty()
        && req.method == http::Method::GET
        && Interim::of(&req.exchange).available()
    {
        // RFC 8297: the hints go out before the handler starts on the final response.
        let mut hints = http::HeaderMap::with_capacity(route.early_hints.len());
        for v in &route.early_hints {
            hints.append(http::header::LINK, v.clone());
        }
        if Interim::of(&req.exchange).send(StatusCode::EARLY_HINTS, &hints) {
            req.exchange
                .hints
                .fetch_or(crate::message::accesslog::HINTS_CONFIGURED, std::sync::atomic::Ordering::Relaxed);
            crate::message::metrics::hint(crate::message::accesslog::HINTS_CONFIGURED);
        }
    }
    let compress = state.cfg.compression.enabled && route.compress;
    let mut revalidated = 0u8;
    // The handlers' futures are awaited right here, not through a helper `async fn`: each
    // layer of async functions moves its child's (large) future once more per request.
    let mut resp = match handler {
        Handler::Files(files) => files.serve(req).await,
        Handler::Builtin => crate::handlers::builtin::serve_builtin(req),
        Handler::Speedtest(s) => s.serve_route(req).await,
        // Boxed: the proxy's future is large, and inline it would grow every request's future
        // (and the allocation each HTTP/2 and HTTP/3 request makes for it).
        Handler::Proxy(p) => {
            // A client revalidating a compressed response names the variant's tag, which only
            // Sluice knows: the upstream is asked about its own.
            if compress {
                revalidated = crate::handlers::encoding::unvary_preconditions(&mut req.headers);
            }
            Box::pin(p.serve(req)).await
        }
    };
    add_alt_svc(&mut resp, alt_svc);
    if !route.headers.is_empty() {
        // The rules may set or remove any field: they see every one in the map.
        resp.materialize();
        route.headers.apply(&mut resp.headers);
    }
    // Content codings, after the rules (a rule's `no-transform` or encoding is respected).
    // The static files keep encoded variants of their own; the speed test measures bytes.
    if compress && !matches!(handler, Handler::Files(_) | Handler::Speedtest(_)) {
        crate::handlers::encoding::encode_response(&state.cfg.compression, req, revalidated, &mut resp);
    }
    (resp, id)
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
