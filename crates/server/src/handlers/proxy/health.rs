//! Active health checks: every `interval`, a `GET path` on a fresh connection to each server;
//! `fails` consecutive failures (no answer within `timeout`, or a status other than `expect`)
//! take the server out of rotation, `passes` consecutive passes bring it back.

use std::sync::atomic::Ordering;

use http::HeaderValue;

use super::body::UpBody;
use super::{connect, h1, Upstream};
use crate::config::UpstreamProto;

/// Check server `i` of `up` for as long as a configuration uses the upstream (after a reload
/// that dropped it, until the last connection of the old configuration ends).
pub(super) async fn run(up: std::sync::Weak<Upstream>, i: usize) {
    let Some(h) = up.upgrade().and_then(|u| u.cfg.health.clone()) else { return };
    let (mut passes, mut fails) = (0u32, 0u32);
    let mut tick = tokio::time::interval(h.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(up) = up.upgrade() else { return };
        let outcome = match tokio::time::timeout(h.timeout, check(&up, i)).await {
            Ok(Ok(status)) if status == h.expect => Ok(()),
            Ok(Ok(status)) => Err(format!("status {status}, expected {}", h.expect)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer within {} s", h.timeout.as_secs())),
        };
        let s = &up.servers[i];
        let healthy = s.healthy.load(Ordering::Relaxed);
        match outcome {
            Ok(()) => {
                fails = 0;
                passes += 1;
                if !healthy && passes >= h.passes {
                    s.healthy.store(true, Ordering::Relaxed);
                    tracing::info!(upstream = %up.name, server = %s.addr, "health check passes: server back in rotation");
                }
            }
            Err(why) => {
                passes = 0;
                fails += 1;
                if healthy && fails >= h.fails {
                    s.healthy.store(false, Ordering::Relaxed);
                    tracing::warn!(upstream = %up.name, server = %s.addr, %why, "health check fails: server out of rotation");
                }
            }
        }
    }
}

async fn check(up: &Upstream, i: usize) -> Result<u16, String> {
    let cfg = &up.cfg;
    let h = cfg.health.as_ref().ok_or("no health check")?;
    let s = &up.servers[i];
    let io = connect::transport(cfg, up.tls.as_ref(), &s.addr, cfg.connect_timeout).await.map_err(|e| e.detail)?;
    let host = cfg
        .host
        .clone()
        .unwrap_or_else(|| HeaderValue::from_str(&s.addr.to_string()).unwrap_or(HeaderValue::from_static("localhost")));
    let status = if cfg.protocol == UpstreamProto::Http1 {
        let mut fields = http::HeaderMap::new();
        fields.insert("user-agent", HeaderValue::from_static("sluice-health-check"));
        fields.insert(http::header::HOST, host);
        fields.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        if !h.path.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err("bad path".into());
        }
        let head = |out: &mut Vec<u8>| {
            sluice_http::h1::request_line(&http::Method::GET, &h.path, out);
            for (n, v) in &fields {
                sluice_http::h1::field(out, n.as_str().as_bytes(), v.as_bytes());
            }
        };
        let conn = h1::Conn::new(io, None);
        let mut interim = |_, _: &http::HeaderMap| {};
        let mut ex = h1::Exchange::new(conn, &http::Method::GET, &head, None, UpBody::empty());
        ex.read_head(&http::Method::GET, &mut interim).await.map_err(|f| f.fail.to_string())?.status.as_u16()
    } else {
        let scheme = if cfg.protocol == UpstreamProto::H2 { "https" } else { "http" };
        let mux = connect::h2(io, cfg.connect_timeout).await.map_err(|e| e.detail)?;
        let req = sluice_h2::client::Request {
            method: "GET",
            scheme,
            authority: host.to_str().unwrap_or("localhost"),
            path: &h.path,
            fields: &[("user-agent", "sluice-health-check")],
        };
        let (_tx, mut rx) = mux.request(&req, true, cfg.connect_timeout).await.map_err(|e| e.to_string())?;
        loop {
            match rx.next_event().await {
                Some(sluice_client::StreamEvent::Head { status, .. }) => break status,
                Some(sluice_client::StreamEvent::Interim { .. }) => continue,
                Some(sluice_client::StreamEvent::Reset(e)) => return Err(e.to_string()),
                _ => return Err("no response head".into()),
            }
        }
    };
    Ok(status)
}
