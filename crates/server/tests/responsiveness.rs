//! The responsiveness test (draft-ietf-ippm-responsiveness-08, "RPM"): the server's endpoints
//! checked against the draft with curl over HTTP/1.1 and HTTP/2 and `sluice get` over
//! HTTP/3, and exercised end to end by `sluice speedtest`, whose requests the server's
//! metrics and access log then show.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{curl, require_tool, run, Proto, Server};

/// `/.well-known/nq` names the three resources on the request's origin under both name sets;
/// small is 1 byte, large announces 8 GiB, upload takes a POST; all `no-store`, the data
/// `application/octet-stream`; the wrong methods are 405.
#[test]
fn the_endpoints_follow_the_draft() {
    require_tool!("curl", "the_endpoints_follow_the_draft");
    let srv = Server::start();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let r = curl(&srv, proto, "/.well-known/nq", &[]);
        assert_eq!(r.status, 200, "{proto:?}");
        assert_eq!(r.header("content-type").as_deref(), Some("application/json"));
        assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
        let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(doc["version"], 1);
        let origin = format!("https://127.0.0.1:{}", srv.tls_port);
        assert_eq!(doc["urls"]["small_download_url"], format!("{origin}/__nq/small"), "{doc}");
        assert_eq!(doc["urls"]["large_download_url"], format!("{origin}/__nq/large"));
        assert_eq!(doc["urls"]["upload_url"], format!("{origin}/__nq/upload"));
        assert_eq!(doc["urls"]["small_https_download_url"], doc["urls"]["small_download_url"]);
        assert_eq!(doc["urls"]["large_https_download_url"], doc["urls"]["large_download_url"]);
        assert_eq!(doc["urls"]["https_upload_url"], doc["urls"]["upload_url"]);
        let small = curl(&srv, proto, "/__nq/small", &[]);
        assert_eq!((small.status, small.body.len()), (200, 1));
        assert_eq!(small.header("content-type").as_deref(), Some("application/octet-stream"));
        assert_eq!(small.header("cache-control").as_deref(), Some("no-store"));
        let large = curl(&srv, proto, "/__nq/large", &["--head"]);
        assert_eq!(large.status, 200);
        assert!(large.header("content-length").and_then(|v| v.parse::<u64>().ok()).unwrap() >= 8_000_000_000);
        let up =
            curl(&srv, proto, "/__nq/upload", &["--data-binary", "@-", "-H", "content-type: application/octet-stream"]);
        assert_eq!(up.status, 200);
        assert_eq!(curl(&srv, proto, "/__nq/upload", &[]).status, 405);
        assert_eq!(curl(&srv, proto, "/__nq/small", &["-X", "POST"]).status, 405);
    }
    // HTTP/3 (the draft's MAY) with Sluice's own client.
    let out = run(
        Command::new(support::sluice_bin())
            .args(["get", "--http3", "-k", "--json"])
            .arg(format!("https://127.0.0.1:{}/__nq/small", srv.tls_port)),
        Duration::from_secs(30),
    );
    let r: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(
        (r["status"].as_u64(), r["bytes"].as_u64(), r["http_version"].as_str()),
        (Some(200), Some(1), Some("3")),
        "{r}"
    );
}

/// `sluice speedtest --json` against a Sluice: both directions measured, responsiveness from
/// its probes, the figures plausible for loopback; the server counted what it served.
#[test]
fn sluice_speedtest_measures_rpm() {
    let srv = Server::start();
    let out = run(
        Command::new(support::sluice_bin())
            .args(["speedtest", "-k", "--json", "--duration", "3", "--interval", "0.5"])
            .arg(format!("https://127.0.0.1:{}/", srv.tls_port)),
        Duration::from_secs(60),
    );
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()));
    assert_eq!(r["protocol"], "h2", "{r}");
    assert!(r["idle_latency_ms"].as_f64().unwrap() > 0.0, "{r}");
    for leg in ["download", "upload"] {
        let l = &r[leg];
        assert!(l["mbps"].as_f64().unwrap() > 10.0, "{leg}: {r}");
        assert!(l["rpm"].as_f64().unwrap() > 0.0, "{leg}: {r}");
        assert!(l["loaded_latency_ms"]["self"].as_f64().unwrap() > 0.0, "{leg}: {r}");
        assert!(l["flows"].as_u64().unwrap() >= 1 && l["intervals"].as_u64().unwrap() >= 1, "{leg}: {r}");
        assert!(["low", "medium", "high"].contains(&l["confidence"].as_str().unwrap()), "{r}");
    }
    support::note(&format!("sluice_speedtest_measures_rpm: {r}"));
    let metrics = run(Command::new("curl").args(["-s", &srv.admin("/metrics")]), Duration::from_secs(10)).stdout;
    let count = |endpoint: &str| -> u64 {
        let key = format!("sluice_speedtest_requests_total{{endpoint=\"{endpoint}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&key)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    assert!(count("nq_config") >= 1 && count("nq_large") >= 1 && count("nq_upload") >= 1, "{metrics}");
    // Idle probes, self and foreign probes: dozens of small GETs.
    assert!(count("nq_small") >= 20, "{metrics}");
    assert!(srv.log().contains("GET 127.0.0.1:") && srv.log().contains("/__nq/large"), "{}", srv.log());
}

/// One run of the speed-test page in headless Chromium at `width` (a phone's below 600 px),
/// in real time over the DevTools protocol (scripts/speedtest_page.py): its results JSON and
/// its layout report (both written into the page when it is done).
fn page_run(srv: &Server, width: u32) -> (serde_json::Value, serde_json::Value) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/speedtest_page.py");
    let out = run(
        Command::new("python3")
            .arg(&script)
            .arg(format!("https://localhost:{}/speedtest.html?auto=1&quick=1", srv.tls_port))
            .args(["--width", &width.to_string(), "--height", "900", "--timeout", "60"]),
        Duration::from_secs(120),
    );
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()));
    (r["results"].clone(), r["layout"].clone())
}

/// The built-in speed-test page, run whole by headless Chromium over HTTP/2: idle latency,
/// downloads and uploads (each with its protocol), latency under load on the loaded connection
/// and on a separate one (the other loopback name), RPM; and every part of the page on screen
/// and inside the viewport at a phone's width (390 px, emulated) and a desktop's.
#[test]
fn the_speed_test_page_runs_in_chromium() {
    const TEST: &str = "the_speed_test_page_runs_in_chromium";
    require_tool!("chromium", TEST);
    // The DevTools client (scripts/speedtest_page.py).
    if !support::python_has("websockets", TEST) {
        return;
    }
    let srv = Server::start();
    // The embedded site's files, served as static files from the test's document root.
    let site = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("site");
    for f in ["speedtest.html", "speedtest.js", "style.css", "favicon.svg"] {
        std::fs::copy(site.join(f), srv.www().join(f)).unwrap();
    }
    for width in [390, 1280] {
        let (r, layout) = page_run(&srv, width);
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(r["protocol"], "h2", "{r}");
        assert!(r["latency"]["idle_ms"].as_f64().unwrap() > 0.0, "{r}");
        for leg in ["download", "upload"] {
            assert!(r[leg]["mbps_p90"].as_f64().unwrap() > 0.0, "{leg}: {r}");
            assert!(r[leg]["loaded_latency_ms"]["samples_own"].as_u64().unwrap() >= 1, "{leg}: {r}");
            assert!(r[leg]["loaded_latency_ms"]["samples_separate"].as_u64().unwrap() >= 1, "{leg}: {r}");
        }
        assert!(r["rpm"].as_f64().unwrap() > 0.0, "{r}");
        let ms = r["measurements"].as_array().unwrap();
        assert!(ms.len() >= 12, "{r}");
        assert!(ms.iter().all(|m| m["protocol"] == "h2"), "every transfer's protocol is known: {r}");
        for (id, e) in layout["elements"].as_object().unwrap() {
            assert_eq!(
                (e["visible"].as_bool(), e["fits"].as_bool()),
                (Some(true), Some(true)),
                "{id} at {width}: {layout}"
            );
        }
        assert_eq!(layout["width"].as_u64(), Some(u64::from(width)), "{layout}");
    }
    // The server's side of it.
    let log = srv.log();
    assert!(log.contains("HTTP/2 POST") && log.contains("/__up") && log.contains("/__nq/small"), "{log}");
}
