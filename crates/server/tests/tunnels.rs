//! The forward proxy (`[connect]`): CONNECT over HTTP/1.1 (curl `-p -x`), HTTP/2 (Node's
//! `http2`, scripts/connect_h2.js) and HTTP/3 (aioquic, scripts/masque.py); CONNECT-UDP
//! (RFC 9298) over HTTP/3 with QUIC DATAGRAM frames and with capsules, and over HTTP/2 with
//! capsules, carrying a UDP echo and a whole QUIC connection to a second Sluice; and what
//! abuse gets: destinations off the list, wrong credentials, tunnels opened and abandoned,
//! datagram floods, a client that never reads.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::{require_tool, run, Options, Server};

/// A TCP server on a free port answering every connection with one HTTP/1.1 response after
/// reading its request head.
fn http_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                let mut s = s;
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let body = "through the tunnel";
                let _ =
                    write!(s, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            });
        }
    });
    port
}

/// A TCP server that writes without end to whoever connects (until the write fails).
fn endless_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                let mut s = s;
                let chunk = [b'z'; 16 * 1024];
                while s.write_all(&chunk).is_ok() {}
            });
        }
    });
    port
}

/// A UDP echo on a free port.
fn udp_echo() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut b = [0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut b) {
            let _ = s.send_to(&b[..n], from);
        }
    });
    port
}

fn script(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(name)
}

/// One JSON object a client script printed.
fn json(out: &support::Output, srv: &Server) -> serde_json::Value {
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()))
}

fn masque(srv: &Server, args: &[&str]) -> serde_json::Value {
    let out = run(
        Command::new("python3").arg(script("masque.py")).arg(args[0]).arg(srv.tls_port.to_string()).args(&args[1..]),
        Duration::from_secs(60),
    );
    json(&out, srv)
}

fn node(srv: &Server, args: &[&str]) -> serde_json::Value {
    let out = run(
        Command::new("node").arg(script("connect_h2.js")).arg(args[0]).arg(srv.tls_port.to_string()).args(&args[1..]),
        Duration::from_secs(30),
    );
    json(&out, srv)
}

/// A metric's value from the admin listener (0 when absent).
fn metric(srv: &Server, line_start: &str) -> f64 {
    let out = run(Command::new("curl").args(["-s", &srv.admin("/metrics")]), Duration::from_secs(10));
    out.stdout
        .lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `cond` holds, or fails with `what` after `limit`.
fn wait_until(limit: Duration, what: &str, srv: &Server, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}\n{}", srv.log());
        thread::sleep(Duration::from_millis(100));
    }
}

/// curl through CONNECT over HTTP/1.1, to the cleartext and the TLS listener, with the right
/// credentials; refused without them (407), with wrong ones (407), to a port off the list
/// and to a listed name that resolves to loopback (403). The tunnel's log line names the user and the
/// bytes each way.
#[test]
fn curl_tunnels_through_connect() {
    const TEST: &str = "curl_tunnels_through_connect";
    require_tool!("curl", TEST);
    let backend = http_backend();
    let creds = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let file = creds.path().join("users");
    std::fs::write(&file, format!("# proxy users\nalice:{hash}\n")).unwrap();
    // `localhost` by name on another port: a name entry alone never admits loopback.
    let named = http_backend();
    let extra = format!(
        "[connect]\nallow = [\"127.0.0.1:{backend}\", \"localhost:{named}\"]\ncredentials = '{}'\n",
        file.display()
    );
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let target = format!("http://127.0.0.1:{backend}/");
    let curl = |proxy: &str, user: Option<&str>, url: &str| {
        let mut c = Command::new("curl");
        c.args(["-s", "-p", "--proxy-insecure", "-x", proxy, "-w", "\n%{http_connect}", "--max-time", "10"]);
        if let Some(u) = user {
            c.args(["--proxy-user", u]);
        }
        let out = run(c.arg(url), Duration::from_secs(20));
        let (body, code) = out.stdout.rsplit_once('\n').map(|(a, b)| (a.to_owned(), b.to_owned())).unwrap_or_default();
        (body, code)
    };
    let plain = format!("http://127.0.0.1:{}", srv.plain_port);
    let tls = format!("https://127.0.0.1:{}", srv.tls_port);
    assert_eq!(
        curl(&plain, Some("alice:s3cret"), &target),
        ("through the tunnel".into(), "200".into()),
        "{}",
        srv.log()
    );
    assert_eq!(curl(&tls, Some("alice:s3cret"), &target), ("through the tunnel".into(), "200".into()), "{}", srv.log());
    assert_eq!(curl(&plain, None, &target).1, "407");
    assert_eq!(curl(&plain, Some("alice:wrong"), &target).1, "407");
    assert_eq!(curl(&plain, Some("mallory:s3cret"), &target).1, "407");
    let other = support::free_port();
    assert_eq!(curl(&plain, Some("alice:s3cret"), &format!("http://127.0.0.1:{other}/")).1, "403");
    // On the list by name, but it resolves to loopback, which only a network entry admits.
    assert_eq!(curl(&plain, Some("alice:s3cret"), &format!("http://localhost:{named}/")).1, "403");
    // A name whose address lies in a listed network is admitted by that entry.
    assert_eq!(curl(&plain, Some("alice:s3cret"), &format!("http://localhost:{backend}/")).1, "200");
    wait_until(Duration::from_secs(5), "no tunnel log line", &srv, || {
        srv.log().lines().any(|l| {
            l.contains("tunnel closed")
                && l.contains("user=\"alice\"")
                && l.contains(&format!("target=127.0.0.1:{backend}"))
                && !l.contains("bytes_to_client=0 ")
                && !l.contains("bytes_to_destination=0 ")
        })
    });
    assert_eq!(metric(&srv, "sluice_tunnels_total{kind=\"tcp\"}"), 3.0);
    assert_eq!(metric(&srv, "sluice_tunnels_refused_total{reason=\"credentials\"}"), 3.0);
    assert_eq!(metric(&srv, "sluice_tunnels_refused_total{reason=\"not_allowed\"}"), 2.0);
}

/// CONNECT over HTTP/2 (Node) and HTTP/3 (aioquic): the stream is the tunnel; off the list is
/// 403 with `Proxy-Status`.
#[test]
fn connect_over_http2_and_http3() {
    const TEST: &str = "connect_over_http2_and_http3";
    require_tool!("node", TEST);
    if !support::have_aioquic(TEST) {
        return;
    }
    let backend = http_backend();
    let extra = format!("[connect]\nallow = [\"127.0.0.1:{backend}\"]\n");
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let b = backend.to_string();
    let r = node(&srv, &["tcp", "127.0.0.1", &b]);
    assert_eq!(r["status"], 200, "{r}\n{}", srv.log());
    assert!(r["data"].as_str().unwrap().ends_with("through the tunnel"), "{r}");
    let r = masque(&srv, &["tcp", "127.0.0.1", &b]);
    assert_eq!(r["status"], 200, "{r}\n{}", srv.log());
    assert!(r["data"].as_str().unwrap().ends_with("through the tunnel"), "{r}");
    let off = support::free_port().to_string();
    let r = node(&srv, &["tcp", "127.0.0.1", &off]);
    assert_eq!(r["status"], 403, "{r}");
    assert_eq!(r["proxy_status"], "sluice; error=destination_ip_prohibited", "{r}");
    let r = masque(&srv, &["tcp", "127.0.0.1", &off]);
    assert_eq!(r["status"], 403, "{r}");
    let log = srv.log();
    assert!(log.contains(&format!("HTTP/2 CONNECT 127.0.0.1:{backend}")), "{log}");
    assert!(log.contains(&format!("HTTP/3 CONNECT 127.0.0.1:{backend}")), "{log}");
}

/// CONNECT-UDP: a UDP echo over HTTP/3 in QUIC DATAGRAM frames and in capsules, and over
/// HTTP/2 in capsules; a whole HTTP/3 connection to a second Sluice through the tunnel; a
/// destination off the list is 403.
#[test]
fn connect_udp_carries_datagrams_and_quic() {
    const TEST: &str = "connect_udp_carries_datagrams_and_quic";
    require_tool!("node", TEST);
    if !support::have_aioquic(TEST) {
        return;
    }
    let echo = udp_echo();
    let inner = Server::start();
    let extra = format!("[connect]\nallow = [\"127.0.0.1:{echo}\", \"127.0.0.1:{}\"]\n", inner.tls_port);
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let e = echo.to_string();
    let r = masque(&srv, &["udp", "127.0.0.1", &e, "50"]);
    assert_eq!((r["status"].as_u64(), r["h3_datagram"].as_bool()), (Some(200), Some(true)), "{r}\n{}", srv.log());
    assert_eq!(r["headers"]["capsule-protocol"], "?1", "{r}");
    assert_eq!(r["echoed"], 50, "{r}");
    support::note(&format!("{TEST}: UDP echo over HTTP/3 datagrams, median round trip {:.2} ms", r["rtt_median_ms"]));
    let r = masque(&srv, &["udp", "127.0.0.1", &e, "20", "--capsules"]);
    assert_eq!(r["echoed"], 20, "{r}");
    let r = node(&srv, &["udp", "127.0.0.1", &e, "20"]);
    assert_eq!((r["status"].as_u64(), r["echoed"].as_u64()), (Some(200), Some(20)), "{r}\n{}", srv.log());
    assert_eq!(r["capsule_protocol"], "?1", "{r}");
    let r = masque(&srv, &["quic", &inner.tls_port.to_string(), "/"]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(
        (r["inner_status"].as_u64(), r["inner_done"].as_bool()),
        (Some(200), Some(true)),
        "{r}\n{}",
        inner.log()
    );
    assert!(r["inner_body_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(inner.log().contains("HTTP/3 GET"), "the inner server saw no HTTP/3 request:\n{}", inner.log());
    let off = support::free_port().to_string();
    let r = masque(&srv, &["udp", "127.0.0.1", &off, "1"]);
    assert_eq!(r["status"], 403, "{r}");
    wait_until(Duration::from_secs(5), "UDP tunnels not counted", &srv, || {
        metric(&srv, "sluice_tunnels_total{kind=\"udp\"}") >= 4.0
            && metric(&srv, "sluice_tunnel_bytes_total{kind=\"udp\",direction=\"to_client\"}") > 0.0
    });
}

/// Abuse: tunnels opened and abandoned (the client vanishes without a word) are all closed
/// by the QUIC idle timeout; the per-connection budget refuses the fifth tunnel of one
/// connection (503); a flood of datagrams leaves the tunnel working; a client that never
/// reads holds at most its windows' worth of the destination's bytes, and its tunnel ends
/// after `idle_secs` of a write that cannot go.
#[test]
fn tunnel_abuse_is_bounded() {
    const TEST: &str = "tunnel_abuse_is_bounded";
    require_tool!("node", TEST);
    if !support::have_aioquic(TEST) {
        return;
    }
    let echo = udp_echo();
    let endless = endless_backend();
    let extra = format!(
        "[connect]\nallow = [\"127.0.0.1:{echo}\", \"127.0.0.1:{endless}\"]\nmax_tunnels_per_connection = 4\nidle_secs = 2\n"
    );
    let srv = Server::start_with(&Options { extra, idle_secs: Some(3), ..Options::default() });
    let e = echo.to_string();
    let r = masque(&srv, &["abandon", "127.0.0.1", &e, "6"]);
    assert_eq!(r["opened"], 4, "{r}");
    assert_eq!(r["statuses"], serde_json::json!([200, 503]), "{r}");
    assert!(metric(&srv, "sluice_tunnels_open{kind=\"udp\"}") >= 1.0, "abandoned tunnels gone too soon");
    wait_until(Duration::from_secs(15), "abandoned tunnels still open", &srv, || {
        metric(&srv, "sluice_tunnels_open{kind=\"udp\"}") == 0.0
    });
    let r = masque(&srv, &["flood", "127.0.0.1", &e, "20000", "--size", "1000"]);
    assert_eq!((r["status"].as_u64(), r["after_echoed"].as_u64()), (Some(200), Some(5)), "{r}\n{}", srv.log());
    support::note(&format!("{TEST}: flood of 20,000 datagrams: {} echoed, then 5 of 5", r["flood_echoed"]));
    let r = node(&srv, &["stall", "127.0.0.1", &endless.to_string()]);
    assert_eq!(r["status"], 200, "{r}");
    let line = {
        let mut found = String::new();
        wait_until(Duration::from_secs(10), "the stalled tunnel did not end", &srv, || {
            found = srv
                .log()
                .lines()
                .find(|l| l.contains("tunnel closed") && l.contains(&format!("target=127.0.0.1:{endless}")))
                .unwrap_or_default()
                .to_owned();
            !found.is_empty()
        });
        found
    };
    let to_client: u64 = line
        .split("bytes_to_client=")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    // Node's stream window (64 KiB) plus the tunnel's pipe and buffer: far below what the
    // destination would write in 3 s.
    assert!(to_client < 1 << 20, "{line}");
    support::note(&format!("{TEST}: a client that never reads took {to_client} bytes before its tunnel ended"));
}
