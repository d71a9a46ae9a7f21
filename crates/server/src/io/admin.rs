//! The admin listener (`[admin] addr`, loopback by default): `/metrics` (Prometheus text),
//! `/healthz` (the process serves) and `/readyz` (it takes new connections: not while it
//! drains), and `POST /reload` (what `sluice reload` uses). Cleartext HTTP/1.1 on its own
//! socket: nothing here is reachable on a public listener.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::handlers::proxy::ErrorType;
use crate::io::live::{Generation, ReloadRequest};
use crate::message::metrics::{self, Family, Labels, Members};
use crate::state::State;

/// Connections the admin listener serves at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;
/// How long an admin connection may take to send its request.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serve the admin endpoints on `listener` until the process ends (once it drains, `/readyz`
/// says so: the listener stays up while connections drain). `POST /reload` asks `reload` for
/// a reload and answers with its outcome.
pub(crate) async fn serve(
    listener: TcpListener,
    live: watch::Receiver<Arc<Generation>>,
    draining: watch::Receiver<bool>,
    reload: mpsc::Sender<ReloadRequest>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let (live, draining, reload) = (live.clone(), draining.clone(), reload.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let (live, draining, reload) = (live.clone(), draining.clone(), reload.clone());
                async move {
                    if req.uri().path() == "/reload" {
                        return Ok::<_, Infallible>(reload_answer(req.method(), &reload).await);
                    }
                    let state = live.borrow().state.clone();
                    let draining = *draining.borrow();
                    Ok(answer(&req, &state, draining))
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(REQUEST_TIMEOUT)
                .serve_connection(TokioIo::new(tcp), svc);
            let _ = conn.await;
        });
    }
}

fn text(status: u16, ctype: &'static str, body: String) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ctype));
    r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    r
}

const PLAIN: &str = "text/plain; charset=utf-8";

/// `POST /reload`: 200 with what changed, or 422 with why the configuration was refused (the
/// running one keeps serving).
async fn reload_answer(method: &http::Method, reload: &mpsc::Sender<ReloadRequest>) -> hyper::Response<Full<Bytes>> {
    if method != http::Method::POST {
        return text(405, PLAIN, "POST /reload reloads the configuration\n".into());
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if reload.send(tx).await.is_err() {
        return text(503, PLAIN, "the server is stopping\n".into());
    }
    match rx.await {
        Ok(Ok(what)) => text(200, PLAIN, format!("{what}\n")),
        Ok(Err(why)) => text(422, PLAIN, format!("reload refused, the running configuration keeps serving:\n{why}\n")),
        Err(_) => text(503, PLAIN, "the server is stopping\n".into()),
    }
}

fn answer(req: &hyper::Request<Incoming>, state: &State, draining: bool) -> hyper::Response<Full<Bytes>> {
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return text(405, PLAIN, "method not allowed\n".into());
    }
    match req.uri().path() {
        "/metrics" if state.cfg.admin.metrics => {
            text(200, "text/plain; version=0.0.4; charset=utf-8", metrics::encode(families(state)))
        }
        "/metrics" => text(404, PLAIN, "metrics are off ([admin] metrics = false)\n".into()),
        "/healthz" => text(200, PLAIN, "ok\n".into()),
        "/readyz" if draining => text(503, PLAIN, "draining: not taking new connections\n".into()),
        "/readyz" => text(200, PLAIN, "ready\n".into()),
        _ => text(404, PLAIN, "not found: /metrics, /healthz, /readyz, POST /reload\n".into()),
    }
}

/// What the server's state adds to each scrape: the budgets and the upstreams.
fn families(state: &State) -> Vec<Family> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let family = |name, help, members| Family { name, help, members };
    let mut out = vec![
        family(
            "receive_window_budget_bytes",
            "HTTP/2 and HTTP/3 receive windows granted beyond the initial ones, and [flow] budget",
            Members::Gauges(vec![
                (vec![("kind", "in_use".into())], int(state.window_budget.used())),
                (vec![("kind", "limit".into())], int(state.window_budget.limit())),
            ]),
        ),
        family(
            "send_buffer_available_bytes",
            "Response bytes streams may still hold waiting to be framed ([limits] send_buffer)",
            Members::Gauges(vec![(Vec::new(), int(state.send_budget.available_permits() as u64))]),
        ),
    ];
    let (mut open, mut idle, mut usable) = (Vec::new(), Vec::new(), Vec::new());
    let (mut requests, mut ejections, mut errors, mut retries, mut ttfb) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for up in &state.upstreams {
        let name = up.cfg.name.clone();
        for s in &up.servers {
            let labels: Labels = vec![("upstream", name.clone()), ("server", s.addr.to_string())];
            open.push((labels.clone(), s.stats.open_h1.load(Ordering::Relaxed) + i64::from(s.h2_open())));
            idle.push((labels.clone(), int(s.idle_count() as u64)));
            usable.push((labels.clone(), i64::from(s.usable())));
            requests.push((labels.clone(), load(&s.stats.requests)));
            ejections.push((labels.clone(), load(&s.stats.ejections)));
            let counts = s.stats.ttfb.iter().map(load).collect();
            ttfb.push((labels, counts, load(&s.stats.ttfb_us) as f64 / 1e6));
        }
        for (i, t) in ErrorType::ALL.iter().enumerate() {
            let n = load(&up.errors[i]);
            if n > 0 {
                errors.push((vec![("upstream", name.clone()), ("error_type", t.as_str().to_owned())], n));
            }
        }
        retries.push((vec![("upstream", name.clone())], load(&up.retries)));
    }
    out.extend([
        family(
            "upstream_open_connections",
            "Connections open to each upstream server (HTTP/1.1 busy and idle, and the shared HTTP/2 one)",
            Members::Gauges(open),
        ),
        family(
            "upstream_idle_connections",
            "Idle HTTP/1.1 connections kept for each upstream server",
            Members::Gauges(idle),
        ),
        family(
            "upstream_server_usable",
            "1 when the server passes its health checks and is not ejected",
            Members::Gauges(usable),
        ),
        family(
            "upstream_requests",
            "Requests sent to each upstream server (each attempt)",
            Members::Counters(requests),
        ),
        family("upstream_ejections", "Times passive health checks ejected the server", Members::Counters(ejections)),
        family(
            "upstream_failures",
            "Proxied requests answered 502, 503 or 504, by RFC 9209 error type",
            Members::Counters(errors),
        ),
        family("upstream_retries", "Requests sent again after a failure", Members::Counters(retries)),
        family(
            "upstream_time_to_first_byte_seconds",
            "From sending a request to an upstream server to its response head",
            Members::Histograms(ttfb),
        ),
    ]);
    out.extend(crate::acme::families());
    out.extend(crate::handlers::tunnel::families());
    out
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}
