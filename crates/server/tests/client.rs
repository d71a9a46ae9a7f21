//! End-to-end tests of the measuring client, `sluice get` and `sluice put`, against a real
//! Sluice server on free loopback ports (see `support`). Every client run is bounded twice:
//! by its own `--max-time` and by the harness, which kills it when the limit passes.

// The harness is shared with the other end-to-end tests; this file uses part of it.
#[allow(unused)]
mod support;

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;
use std::thread;
use std::time::Duration;

use support::{run, sluice_bin, Output, Server};

/// Harness limit for one client run (each also gets `--max-time 50`).
const LIMIT: Duration = Duration::from_secs(60);
/// Size of the `/__down` downloads.
const DOWN_BYTES: u64 = 5_000_000;
/// Size of the uploaded file.
const UP_BYTES: usize = 3_000_000;

/// Runs `sluice` with `args` (plus `--max-time 50`); never hangs the suite.
fn sluice(args: &[&str]) -> Output {
    run(Command::new(sluice_bin()).args(args).args(["--max-time", "50"]), LIMIT)
}

/// The JSON object a successful `--json` run printed.
fn json_of(out: &Output, what: &str) -> serde_json::Value {
    out.expect_success(what);
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}):\n{}\nstderr:\n{}", out.stdout, out.stderr))
}

/// The `key=value` pairs of a successful run's single output line.
fn fields_of(out: &Output, what: &str) -> HashMap<String, String> {
    out.expect_success(what);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: expected one line, got {:?}", out.stdout);
    lines[0]
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{what}: not key=value: {kv:?}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn num(fields: &HashMap<String, String>, key: &str) -> f64 {
    fields.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no number `{key}` in {fields:?}"))
}

/// The speed is size / time as curl computes it (allowing for the six decimals of the time).
fn assert_speed(speed: f64, size: f64, secs: f64, what: &str) {
    assert!(secs > 0.0, "{what}: time must be positive");
    let expected = size / secs;
    assert!((speed - expected).abs() <= expected * 0.01 + 1.0, "{what}: speed {speed} is not {size} / {secs}");
}

/// Checks a `--json` report: bytes, status, version and consistent rates.
fn check_json(v: &serde_json::Value, bytes: u64, version: &str, what: &str) {
    assert_eq!(v["bytes"].as_u64(), Some(bytes), "{what}: {v}");
    assert_eq!(v["status"].as_u64(), Some(200), "{what}: {v}");
    assert_eq!(v["http_version"].as_str(), Some(version), "{what}: {v}");
    let secs = v["seconds"].as_f64().unwrap_or_else(|| panic!("{what}: no seconds in {v}"));
    let bps = v["bytes_per_second"].as_f64().unwrap_or_else(|| panic!("{what}: no bytes_per_second in {v}"));
    assert_speed(bps, bytes as f64, secs, what);
    let mbps = v["mbps"].as_f64().unwrap_or_else(|| panic!("{what}: no mbps in {v}"));
    assert!((mbps - bps * 8.0 / 1e6).abs() <= mbps * 0.01 + 0.01, "{what}: mbps {mbps} vs bytes/s {bps}");
    for t in ["time_connect", "time_starttransfer"] {
        let t = v[t].as_f64().unwrap_or_else(|| panic!("{what}: no {t} in {v}"));
        assert!(t > 0.0 && t <= secs, "{what}: {t} outside (0, {secs}]");
    }
}

#[test]
fn get_reports_downloads_over_h1_and_h2() {
    let srv = Server::start();
    let path = format!("/__down?bytes={DOWN_BYTES}");
    let (https, http) = (srv.https(&path), srv.http(&path));
    for (flag, url, version) in [
        ("--http1.1", &https, "1.1"),
        ("--http2", &https, "2"),
        ("--http1.1", &http, "1.1"),
        ("--http2-prior-knowledge", &http, "2"),
    ] {
        let what = format!("sluice get {flag} {url}");
        let v = json_of(&sluice(&["get", "-k", flag, url, "--json"]), &what);
        check_json(&v, DOWN_BYTES, version, &what);
        assert_eq!(v["url"].as_str(), Some(url.as_str()), "{what}: {v}");
    }

    // The default https protocol is h2 (ALPN), and the default output is curl's -w line.
    let f = fields_of(&sluice(&["get", "-k", &https]), "sluice get (line)");
    assert_eq!(f["size_download"], DOWN_BYTES.to_string(), "{f:?}");
    assert_eq!(f["http_version"], "2", "{f:?}");
    assert_eq!(f["http_code"], "200", "{f:?}");
    assert_speed(num(&f, "speed_download"), num(&f, "size_download"), num(&f, "time_total"), "line");
    let time = &f["time_total"];
    assert_eq!(time.split_once('.').map(|(_, d)| d.len()), Some(6), "time_total has six decimals: {time}");
}

#[test]
fn put_reports_uploads_over_h1_h2_and_h2c() {
    let srv = Server::start();
    let file = srv.scratch("upload.bin");
    fs::write(&file, (0..UP_BYTES).map(|i| (i % 253) as u8).collect::<Vec<u8>>()).expect("write upload file");
    let data = format!("@{}", file.display());
    let (https, http) = (srv.https("/__up"), srv.http("/__up"));
    for (flag, url, version) in
        [("--http1.1", &https, "1.1"), ("--http2", &https, "2"), ("--http2-prior-knowledge", &http, "2")]
    {
        let what = format!("sluice put {flag} {url}");
        let v = json_of(&sluice(&["put", "-k", flag, "--data", &data, url, "--json"]), &what);
        check_json(&v, UP_BYTES as u64, version, &what);
        assert_eq!(v["response"]["bytes"].as_u64(), Some(UP_BYTES as u64), "{what}: server's count: {v}");
    }

    let f = fields_of(&sluice(&["put", "--http2-prior-knowledge", "--data", &data, &http]), "sluice put (line)");
    assert_eq!(f["size_upload"], UP_BYTES.to_string(), "{f:?}");
    assert_eq!(f["http_code"], "200", "{f:?}");
    assert_eq!(f["http_version"], "2", "{f:?}");
    assert_speed(num(&f, "speed_upload"), num(&f, "size_upload"), num(&f, "time_total"), "put line");

    // Expect: 100-continue over HTTP/1.1: the body follows the server's 100 Continue.
    let what = "sluice put --expect-100 (h1 cleartext)";
    let v = json_of(&sluice(&["put", "--expect-100", "--data", &data, &http, "--json"]), what);
    check_json(&v, UP_BYTES as u64, "1.1", what);
    assert_eq!(v["response"]["bytes"].as_u64(), Some(UP_BYTES as u64), "{what}: {v}");

    // A literal body, POSTed.
    let what = "sluice put -X POST --data STRING";
    let v = json_of(&sluice(&["put", "-k", "-X", "POST", "--data", "hello, sluice", &https, "--json"]), what);
    assert_eq!(v["bytes"].as_u64(), Some(13), "{what}: {v}");
    assert_eq!(v["response"]["bytes"].as_u64(), Some(13), "{what}: {v}");

    // A missing upload file fails before connecting, with curl's code 26.
    let out = sluice(&["put", "--data", "@/nonexistent/upload.bin", &http]);
    assert_eq!(out.status.code(), Some(26), "missing file: {}", out.stderr);
    assert!(out.stderr.contains("/nonexistent/upload.bin"), "{}", out.stderr);
}

#[test]
fn output_file_gets_the_exact_content() {
    let srv = Server::start();
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    fs::write(srv.www().join("big.bin"), &big).expect("write big.bin");
    for (flag, url, name, expected) in [
        ("--http2", srv.https("/data.bin"), "h2.bin", support::data_bin()),
        ("--http1.1", srv.https("/big.bin"), "h1.bin", big.clone()),
        ("--http2-prior-knowledge", srv.http("/big.bin"), "h2c.bin", big.clone()),
        ("--http1.1", srv.http("/data.bin"), "h1c.bin", support::data_bin()),
    ] {
        let dest = srv.scratch(name);
        let dest_s = dest.display().to_string();
        let what = format!("sluice get {flag} {url} -o {name}");
        let f = fields_of(&sluice(&["get", "-k", flag, &url, "-o", &dest_s]), &what);
        assert_eq!(f["size_download"], expected.len().to_string(), "{what}: {f:?}");
        let got = fs::read(&dest).unwrap_or_else(|e| panic!("{what}: cannot read the output: {e}"));
        assert!(got == expected, "{what}: the file differs ({} bytes, expected {})", got.len(), expected.len());
    }
}

#[test]
fn tls_needs_a_trust_decision_and_cacert_works() {
    let srv = Server::start();
    let url = srv.https("/hello.txt");
    let out = sluice(&["get", &url]);
    assert_eq!(out.status.code(), Some(77), "neither -k nor --cacert: {}", out.stderr);
    assert!(out.stderr.contains("--cacert") && out.stderr.contains("-k"), "hint: {}", out.stderr);

    // The server's generated self-signed certificate (SANs localhost, 127.0.0.1, ::1) as the CA.
    let ca = srv.scratch("data/self-signed-cert.pem");
    let ca_s = ca.display().to_string();
    let f = fields_of(&sluice(&["get", "--cacert", &ca_s, &url]), "sluice get --cacert");
    assert_eq!(f["size_download"], support::HELLO.len().to_string(), "{f:?}");
    assert_eq!(f["http_version"], "2", "{f:?}");

    // A CA that did not sign the server's certificate: verification fails (curl's 60).
    let other = srv.scratch("other-ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("generate a certificate");
    fs::write(&other, cert.cert.pem()).expect("write other CA");
    let out = sluice(&["get", "--cacert", &other.display().to_string(), &url]);
    assert_eq!(out.status.code(), Some(60), "wrong CA: {}", out.stderr);
    assert!(out.stderr.contains("certificate"), "{}", out.stderr);

    // TLS to the cleartext port: a TLS failure (curl's 35), not a hang.
    let out = sluice(&["get", "-k", &format!("https://127.0.0.1:{}/", srv.plain_port)]);
    assert_eq!(out.status.code(), Some(35), "TLS to a cleartext port: {}", out.stderr);
    assert!(out.stderr.contains("TLS"), "{}", out.stderr);
}

#[test]
fn http_errors_exit_zero_unless_fail() {
    let srv = Server::start();
    let url = srv.http("/no-such-file.txt");
    let f = fields_of(&sluice(&["get", &url]), "sluice get 404");
    assert_eq!(f["http_code"], "404", "{f:?}");
    let out = sluice(&["get", "--fail", &url]);
    assert_eq!(out.status.code(), Some(22), "--fail on 404: {}", out.stderr);
    assert!(out.stdout.contains("http_code=404"), "the figures are still printed: {}", out.stdout);
    assert!(out.stderr.contains("404"), "{}", out.stderr);
}

#[test]
fn refused_connection_and_bad_url_fail_clearly() {
    let port = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        l.local_addr().expect("addr").port()
    };
    let out = sluice(&["get", &format!("http://127.0.0.1:{port}/")]);
    assert_eq!(out.status.code(), Some(7), "refused: {}", out.stderr);
    assert!(out.stderr.contains("connection refused"), "message: {}", out.stderr);
    assert!(out.stdout.is_empty(), "no figures on failure: {}", out.stdout);

    let out = sluice(&["put", "--data", "x", &format!("http://127.0.0.1:{port}/__up")]);
    assert_eq!(out.status.code(), Some(7), "put refused: {}", out.stderr);

    for bad in ["127.0.0.1/x", "ftp://127.0.0.1/", "http://[::1/", "http://127.0.0.1:70000/"] {
        let out = sluice(&["get", bad]);
        assert_eq!(out.status.code(), Some(3), "{bad}: {}", out.stderr);
        assert!(out.stderr.contains("bad URL"), "{bad}: {}", out.stderr);
    }
}

#[test]
fn max_time_bounds_a_transfer() {
    let srv = Server::start();
    let url = srv.https("/__down?bytes=10000000000");
    let out = run(Command::new(sluice_bin()).args(["get", "-k", "--max-time", "0.3", &url]), LIMIT);
    assert_eq!(out.status.code(), Some(28), "timeout: {}", out.stderr);
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
}

/// An IPv6 literal URL: a one-shot HTTP/1.1 responder on [::1] (skipped where IPv6 loopback
/// is unavailable); the client must connect there and send `Host: [::1]:PORT`.
#[test]
fn ipv6_literal_urls_work() {
    let Ok(listener) = TcpListener::bind("[::1]:0") else {
        support::note("SKIP ipv6_literal_urls_work: no IPv6 loopback");
        return;
    };
    let port = listener.local_addr().expect("addr").port();
    let responder = thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        conn.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\nconnection: close\r\n\r\nhello ipv6\n");
        String::from_utf8_lossy(&head).into_owned()
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("v6.txt");
    let url = format!("http://[::1]:{port}/v6");
    let out = sluice(&["get", &url, "--json", "-o", &dest.display().to_string()]);
    let v = json_of(&out, "sluice get http://[::1]");
    assert_eq!(v["bytes"].as_u64(), Some(11), "{v}");
    assert_eq!(v["http_version"].as_str(), Some("1.1"), "{v}");
    assert_eq!(fs::read(&dest).expect("output"), b"hello ipv6\n");
    let head = responder.join().expect("responder");
    assert!(head.starts_with("GET /v6 HTTP/1.1\r\n"), "request line: {head:?}");
    assert!(head.to_ascii_lowercase().contains(&format!("host: [::1]:{port}\r\n")), "Host header: {head:?}");
}
