//! The reverse proxy: a route with `proxy = "name"` forwards its requests to that
//! `[[upstream]]`, streaming both ways (see [`body`]).
//!
//! A request goes through four phases, each in a file of its own:
//! 1. [`plan`]: what goes upstream (fields, authority, target, framing); 400 when it cannot
//!    be forwarded as sent.
//! 2. [`hints::send_early`]: Early Hints, configured and learned, before the upstream is asked.
//! 3. [`attempt`]: a server picked ([`balance`]; ejected or unhealthy ones skipped), an idle
//!    keep-alive connection taken or one opened (HTTP/1.1), or the server's multiplexed one
//!    shared (HTTP/2, h2c), the head sent, then the body as the upstream takes it; retries
//!    where safe.
//! 4. [`answer`]: the client's response, streamed, or a tunnel after a 101.
//!
//! Failures are explicit ([`error`]): 502 when the upstream refuses, resets or answers garbage,
//! 504 on a timeout, 503 when no server may be used, each with a `Proxy-Status` field (RFC
//! 9209) and one log line; a failure after the response head has gone out resets the client's
//! stream (HTTP/1.1: closes the connection).

mod answer;
mod attempt;
pub(crate) mod balance;
pub(crate) mod body;
mod connect;
mod error;
mod h1;
mod health;
pub(crate) mod hints;
mod plan;
mod upstream;

use std::sync::{Arc, Mutex};

use http::{HeaderValue, StatusCode};

use crate::config::ProxySettings;
use crate::message::{Request, RequestBody, Response};
use body::UpBody;
pub(crate) use error::ErrorType;
pub(crate) use upstream::{Active, Upstream};

/// The handler of a route with `proxy = "name"`.
pub(crate) struct Proxy {
    upstream: Arc<Upstream>,
    settings: ProxySettings,
    /// The route's configured Early Hints, merged with what was learned.
    hints: Vec<HeaderValue>,
}

impl Proxy {
    pub(crate) fn new(upstream: Arc<Upstream>, settings: ProxySettings, hints: Vec<HeaderValue>) -> Self {
        Self { upstream, settings, hints }
    }

    /// Forward `req` to the upstream. Not an `async fn`: the future `serve` makes is large,
    /// and a layer of its own would move it once more per request; the caller boxes it.
    pub(crate) fn serve<'a>(&'a self, req: &'a mut Request) -> impl std::future::Future<Output = Response> + Send + 'a {
        serve(&self.upstream, req, &self.settings, &self.hints)
    }
}

/// Forward `req` to `up`, phase by phase.
async fn serve(
    up: &Arc<Upstream>,
    req: &mut Request,
    settings: &ProxySettings,
    configured_hints: &[HeaderValue],
) -> Response {
    // What the request hands over before it is planned: its body, and the client connection
    // for a tunnel (taken only if an upgrade goes through).
    let client_body = std::mem::replace(&mut req.body, RequestBody::empty());
    let mut client_conn = req.upgrade.take();
    let req: &Request = req;
    // 1. Plan.
    let plan = match plan::Plan::new(&up.cfg, req, settings, client_conn.is_some()) {
        Ok(p) => p,
        Err(why) => return plan::Plan::refusal(why),
    };
    // A WebSocket over HTTP/2: the handshake goes alone, the stream's bytes after the 101.
    // (Boxed: held across the attempts, it would grow every proxied request's future past the
    // allocator's thread cache; see the test below.)
    let (client_body, tunnel_body) =
        if req.websocket { (RequestBody::empty(), Some(Box::new(client_body))) } else { (client_body, None) };
    let streamed = !client_body.is_end_stream() && plan.declared != Some(0);
    // Told when a streamed body has gone upstream in full: the response-head timer starts then
    // (without a body, at once).
    // (The client's body is consumed either way: kept to the end of this function, it would
    // be carried in the future across every await, about 200 bytes.)
    let (body, done) = if streamed {
        let (done_tx, rx) = tokio::sync::watch::channel(false);
        (UpBody::stream(client_body, plan.declared, done_tx), Some(rx))
    } else {
        drop(client_body);
        (UpBody::empty(), None)
    };
    // 2. Early Hints.
    let learning = up.cfg.early_hints_learn && plan.method == http::Method::GET;
    let learn_key = || hints::HintCache::key(req.tls, &req.authority, &req.path);
    let sent = Mutex::new(hints::send_early(&up.hints, req, configured_hints, learning, &learn_key));
    // 3. Attempts. Inline: each exchange inside is boxed (see `attempt::forward`), so this
    // future stays under the 1 KiB the test below holds it to.
    let (answer, active) = match attempt::forward(up, req, &plan, body, streamed, done, &sent).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    // 4. The client's response.
    if let Some(client) = tunnel_body {
        return answer::websocket_stream(up, answer, active, *client);
    }
    if answer.status == StatusCode::SWITCHING_PROTOCOLS {
        return answer::switch(up, &mut client_conn, answer, plan.upgrade.is_some());
    }
    let learner = if learning { answer::learn(up, &learn_key, answer.status, &answer.fields) } else { None };
    answer::response(up, answer, active, learner)
}

#[cfg(test)]
mod tests {
    use super::hints::navigation;

    #[test]
    fn the_proxy_s_future_fits_the_allocator_s_thread_cache() {
        // Boxed for every proxied request (see `app::router::dispatch`): glibc serves blocks of up
        // to 1032 bytes from a per-thread cache, larger ones from its bins at several times the
        // cost. It was 1,608 bytes with the HTTP/1.1 exchange inline; with the attempts inline
        // and each exchange boxed it is about 900 (a box of its own for the attempts cost
        // an allocation per request).
        let cfg = crate::config::for_test("[[site]]\nproxy = \"app\"\n");
        let up = super::Upstream::new(cfg.upstreams[0].clone());
        let mut req = crate::message::Request {
            proto: crate::message::Proto::Http2,
            peer: "127.0.0.1:1".parse().unwrap(),
            upgrade: None,
            websocket: false,
            connect: None,
            exchange: Default::default(),
            method: http::Method::GET,
            authority: "localhost".into(),
            path: "/".into(),
            query: None,
            headers: http::HeaderMap::new(),
            tls: true,
            body: crate::message::RequestBody::empty(),
            malformed: None,
        };
        let fut = super::serve(&up, &mut req, &cfg.proxy, &[]);
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1024, "the proxy's future is {size} bytes");
        drop(fut);
    }

    fn map(fields: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        for (n, v) in fields {
            m.append(*n, http::HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn a_navigation_is_told_by_sec_fetch_mode_else_by_accept() {
        // `Sec-Fetch-Mode` decides, wherever it stands among the other `Sec-Fetch-*` fields.
        assert!(navigation(&map(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "Navigate")])));
        assert!(!navigation(&map(&[("accept", "text/html"), ("sec-fetch-mode", "cors")])));
        // The first value counts.
        assert!(!navigation(&map(&[("sec-fetch-mode", "no-cors"), ("sec-fetch-mode", "navigate")])));
        // Without it: `Accept` naming HTML (any case), from a client that sends no `Sec-Fetch-*`.
        assert!(navigation(&map(&[("user-agent", "x"), ("accept", "*/*"), ("accept", "Text/HTML;q=0.9")])));
        assert!(!navigation(&map(&[("accept", "text/html"), ("sec-fetch-dest", "document")])));
        assert!(!navigation(&map(&[("accept", "*/*")])));
        assert!(!navigation(&map(&[("accept", "text/htm")])));
        assert!(!navigation(&map(&[])));
    }
}
