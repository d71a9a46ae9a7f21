//! The admin listener: `/metrics` read by the Prometheus client's own parser after traffic
//! over every protocol, each figure checked against what the test sent; `/healthz` and
//! `/readyz`; nothing admin on the public listeners.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{curl, free_port, require_tool, Options, Proto, Server};

/// Samples by name: (labels, value).
type Samples = HashMap<String, Vec<(HashMap<String, String>, f64)>>;

/// `/metrics`, parsed by `prometheus_client.parser` (scripts/prom_parse.py).
fn scrape(srv: &Server) -> Samples {
    let text = curl_text(&srv.admin("/metrics"));
    let mut child = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/prom_parse.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the parser refused /metrics: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut samples = Samples::new();
    for (name, list) in v.as_object().unwrap() {
        for s in list.as_array().unwrap() {
            let labels = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            samples.entry(name.clone()).or_default().push((labels, s["value"].as_f64().unwrap()));
        }
    }
    samples
}

fn curl_text(url: &str) -> String {
    let out = support::run(Command::new("curl").args(["-sS", "--max-time", "20", url]), Duration::from_secs(30));
    out.expect_success(url);
    out.stdout
}

/// The value of sample `name` whose labels include `want` (0 when there is none).
fn value(m: &Samples, name: &str, want: &[(&str, &str)]) -> f64 {
    m.get(name)
        .into_iter()
        .flatten()
        .filter(|(l, _)| want.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn metrics_count_what_was_sent_on_every_protocol() {
    require_tool!("curl", "metrics_count_what_was_sent_on_every_protocol");
    if !support::python_has("prometheus_client", "metrics") {
        return;
    }
    let dead = free_port();
    let srv = Server::start_with(&Options {
        extra: format!(
            "[[upstream]]\nname = \"gone\"\nservers = [\"127.0.0.1:{dead}\"]\nretries = 0\n\
             [[site.route]]\npath = \"/gone/\"\nproxy = \"gone\"\n\
             [limits]\nmax_request_body = 1000\n"
        ),
        ..Options::default()
    });
    let before = scrape(&srv);
    assert_eq!(value(&before, "sluice_requests_total", &[]), 0.0, "nothing counted before traffic");
    // HTTP/1.1 over TLS and cleartext, HTTP/2 over TLS and h2c: three 200s each, one 404.
    for proto in [Proto::H1Tls, Proto::H1Plain, Proto::H2Tls, Proto::H2c] {
        for _ in 0..3 {
            assert_eq!(curl(&srv, proto, "/hello.txt", &[]).status, 200);
        }
        assert_eq!(curl(&srv, proto, "/missing.txt", &[]).status, 404);
    }
    // A declared body over the limit: 413, and the limit counted.
    let r = curl(&srv, Proto::H1Tls, "/hello.txt", &["-X", "POST", "--data-binary", &"x".repeat(2000)]);
    assert_eq!(r.status, 413);
    // An upstream that refuses connections: 502 with connection_refused.
    assert_eq!(curl(&srv, Proto::H2Tls, "/gone/x", &[]).status, 502);
    let mut h3 = 0.0;
    if support::have_aioquic("metrics_count_what_was_sent_on_every_protocol (HTTP/3)") {
        let url = srv.https("/hello.txt");
        let out = support::run(
            Command::new("python3").arg(support::h3client()).args(["--insecure", &url, &url]),
            Duration::from_secs(60),
        );
        out.expect_success("h3client.py");
        h3 = 2.0;
    }
    // The access log and the metrics count when the exchange's record drops; give the last
    // ones a moment.
    std::thread::sleep(Duration::from_millis(300));
    let m = scrape(&srv);
    let hello = support::HELLO.len() as f64;
    for (proto, label) in [("http1", 6.0), ("http2", 6.0)] {
        let ok = value(
            &m,
            "sluice_requests_total",
            &[("protocol", proto), ("class", "2xx"), ("route", "/"), ("site", "default")],
        );
        assert_eq!(ok, label, "{proto} 2xx");
        assert_eq!(
            value(&m, "sluice_requests_total", &[("protocol", proto), ("class", "4xx"), ("route", "/")]),
            2.0,
            "{proto} 4xx"
        );
        assert!(value(&m, "sluice_response_body_bytes_total", &[("protocol", proto)]) >= label * hello);
        // Every request in the duration histogram and in its count.
        let count = value(&m, "sluice_request_duration_seconds_count", &[("protocol", proto)]);
        assert_eq!(count, value(&m, "sluice_requests_total", &[("protocol", proto)]), "{proto}");
        let inf = value(&m, "sluice_request_duration_seconds_bucket", &[("protocol", proto), ("le", "+Inf")]);
        assert_eq!(inf, count);
    }
    assert_eq!(value(&m, "sluice_requests_total", &[("protocol", "http3"), ("class", "2xx")]), h3);
    assert_eq!(value(&m, "sluice_requests_total", &[("route", "/gone/"), ("class", "5xx")]), 1.0);
    assert_eq!(
        value(&m, "sluice_upstream_failures_total", &[("upstream", "gone"), ("error_type", "connection_refused")]),
        1.0
    );
    assert_eq!(value(&m, "sluice_upstream_requests_total", &[("upstream", "gone")]), 1.0);
    assert_eq!(value(&m, "sluice_limits_tripped_total", &[("kind", "request_body")]), 1.0);
    // The 413 is answered before routing: no site or route.
    assert_eq!(value(&m, "sluice_requests_total", &[("protocol", "http1"), ("class", "4xx"), ("route", "")]), 1.0);
    // TLS handshakes: one per curl over TLS (each curl is a new connection).
    assert!(value(&m, "sluice_tls_handshakes_total", &[("result", "full")]) >= 9.0);
    assert_eq!(value(&m, "sluice_connections_total", &[("protocol", "http3")]), if h3 > 0.0 { 1.0 } else { 0.0 });
    // Nothing is open once the clients are gone.
    for proto in ["http1", "http2", "http3"] {
        assert_eq!(value(&m, "sluice_open_requests", &[("protocol", proto)]), 0.0, "{proto}");
    }
    assert_eq!(value(&m, "sluice_receive_window_budget_bytes", &[("kind", "limit")]), (1u64 << 30) as f64);
}

#[test]
fn health_and_readiness_and_nothing_admin_on_public_listeners() {
    let srv = Server::start();
    assert_eq!(curl_text(&srv.admin("/healthz")), "ok\n");
    assert_eq!(curl_text(&srv.admin("/readyz")), "ready\n");
    for proto in [Proto::H1Tls, Proto::H2Tls, Proto::H1Plain] {
        assert_eq!(curl(&srv, proto, "/metrics", &[]).status, 404, "{proto:?}");
    }
    // A bad address is refused at start-up with its position.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[listener]]\naddr = \"127.0.0.1:18081\"\ntls = false\n[admin]\naddr = \"127.0.0.1:18081\"\n",
    )
    .unwrap();
    let out = support::run(
        Command::new(support::sluice_bin()).arg("check").arg("--config").arg(&cfg),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(out.stderr.contains("bad.toml:5:8") && out.stderr.contains("overlaps a [[listener]]"), "{}", out.stderr);
}
