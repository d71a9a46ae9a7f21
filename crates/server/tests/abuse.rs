//! The abuse suite: clients that behave as attackers do, each asserting the server's reaction
//! by counts and codes (connection closed, status, a normal client served meanwhile), never by
//! how fast. Every scenario runs against its own server with short windows, so that a run
//! stays within seconds; every loop is bounded in count and time.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::{require_tool, run, Options, Server};

/// A server whose progress rules act within seconds: 2 s windows (`header_secs`), at least
/// 500 bytes per second, and few connection slots, so that stuck clients would lock it.
fn strict(slots: usize) -> Server {
    let extra = format!("header_secs = 2\nidle_secs = 30\n\n[limits]\nmax_connections = {slots}\nmin_rate = 500\n");
    Server::start_with(&Options { extra, ..Options::default() })
}

/// A client connection whose reads time out (so draining it is bounded).
fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    s
}

/// Reads until EOF or an error; the bytes read. Bounded by `limit`.
fn drain(s: &mut TcpStream, limit: Duration) -> (u64, bool) {
    let deadline = Instant::now() + limit;
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (total, true),
            Ok(n) => total += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            // A reset after the server closed with our unread data: closed all the same.
            Err(_) => return (total, true),
        }
    }
    (total, false)
}

/// curl can get a page through the cleartext port within `limit`.
fn normal_client_served(srv: &Server, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let out = run(
            Command::new("curl")
                .args(["-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(srv.http("/hello.txt")),
            Duration::from_secs(10),
        );
        if out.stdout.trim() == "200" {
            return true;
        }
        thread::sleep(Duration::from_millis(200));
    }
    false
}

/// HTTP/2 frames by hand: a request for a download the client will never read, with every
/// window opened wide so the server writes until the socket is full.
fn h2_greedy_request(path: &str) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let frame = |out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
    };
    // SETTINGS: INITIAL_WINDOW_SIZE (0x4) = 2^31 - 1 (RFC 9113 §6.5.2).
    frame(&mut out, 0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    // WINDOW_UPDATE on the connection: as far as it goes.
    frame(&mut out, 0x8, 0, 0, &0x7fff_0000u32.to_be_bytes());
    // HEADERS (END_STREAM | END_HEADERS): :method GET, :scheme http (static 2, 6), :path and
    // :authority as literals without indexing naming static entries 4 and 1 (RFC 7541 §6.2.2).
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    frame(&mut out, 0x1, 0x5, 1, &block);
    out
}

/// `slots` clients, each sending `request` and then reading nothing, hold every connection slot;
/// the server must cut them off (before: never, the slots stayed taken), a normal client must
/// get through, and each stuck connection must end far short of the 2 GB it asked for.
fn stuck_readers_are_cut_off(request: &[u8]) {
    let slots = 4;
    let srv = strict(slots);
    let mut stuck = Vec::new();
    for _ in 0..slots {
        let mut s = connect(srv.plain_port);
        s.write_all(request).unwrap();
        stuck.push(s);
    }
    assert!(normal_client_served(&srv, Duration::from_secs(30)), "no slot came free:\n{}", srv.log());
    for mut s in stuck {
        let (got, closed) = drain(&mut s, Duration::from_secs(20));
        assert!(closed && got < 200_000_000, "closed {closed}, {got} bytes");
    }
}

#[test]
fn w1_http2_clients_that_stop_reading_are_closed_and_free_their_slots() {
    require_tool!("curl", "w1_http2_clients_that_stop_reading_are_closed_and_free_their_slots");
    stuck_readers_are_cut_off(&h2_greedy_request("/__down?bytes=2000000000"));
}

#[test]
fn w2_http1_clients_that_stop_reading_are_closed_and_free_their_slots() {
    require_tool!("curl", "w2_http1_clients_that_stop_reading_are_closed_and_free_their_slots");
    stuck_readers_are_cut_off(b"GET /__down?bytes=2000000000 HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

#[test]
fn w2_http1_slow_request_bodies_are_answered_408_and_closed() {
    require_tool!("curl", "w2_http1_slow_request_bodies_are_answered_408_and_closed");
    let slots = 4;
    let srv = strict(slots);
    let mut slow = Vec::new();
    for _ in 0..slots {
        let mut s = TcpStream::connect(("127.0.0.1", srv.plain_port)).unwrap();
        s.write_all(b"POST /__up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n").unwrap();
        slow.push(s);
    }
    // One byte every 300 ms from each: about 7 bytes per 2 s window, far below 1,000.
    let mut answered = vec![String::new(); slots];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut open = slots;
    while open > 0 && Instant::now() < deadline {
        for (i, s) in slow.iter_mut().enumerate() {
            if answered[i].contains("\r\n\r\n") {
                continue;
            }
            if s.write_all(b"x").is_err() {
                answered[i].push_str("(closed)\r\n\r\n");
                open -= 1;
                continue;
            }
            s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            let mut buf = [0u8; 512];
            if let Ok(n) = s.read(&mut buf) {
                answered[i].push_str(&String::from_utf8_lossy(&buf[..n]));
                if n == 0 || answered[i].contains("\r\n\r\n") {
                    open -= 1;
                }
            }
        }
        thread::sleep(Duration::from_millis(300));
    }
    for a in &answered {
        assert!(a.starts_with("HTTP/1.1 408"), "answered: {a:?}");
    }
    // Then the connections close, and a normal client is served.
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (_, closed) = drain(s, Duration::from_secs(10));
        assert!(closed);
    }
    assert!(normal_client_served(&srv, Duration::from_secs(10)));
}

/// One HTTP/1.x request on a fresh connection; the status line's code.
fn h1_status(srv: &Server, request: &[u8]) -> String {
    let mut s = connect(srv.plain_port);
    s.write_all(request).unwrap();
    support::h1_status_of(&mut s)
}

/// The status of one HTTP/2 request (h2c prior knowledge) with `fields`, on the own client
/// engine; or the stream's reset.
fn h2_status(srv: &Server, authority: &str, fields: &[(&str, &str)]) -> String {
    use sluice_h2::client::{Client, ClientConfig, ClientEvent, Request};
    let mut s = connect(srv.plain_port);
    let mut c = Client::new(ClientConfig::default(), Instant::now());
    let req = Request { method: "GET", scheme: "http", authority, path: "/hello.txt", fields };
    let id = c.request(&req).expect("request");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 16384];
    while Instant::now() < deadline {
        while let Some(out) = c.poll_transmit() {
            s.write_all(&out).unwrap();
        }
        while let Some(ev) = c.poll_event() {
            match ev {
                ClientEvent::Response { stream, status, .. } if stream == id => return status.to_string(),
                ClientEvent::Reset { stream, .. } if stream == id => return "reset".into(),
                _ => {}
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return "closed".into(),
            Ok(n) => {
                if c.handle_input(Instant::now(), &buf[..n]).is_err() {
                    return "connection error".into();
                }
            }
        }
    }
    "timeout".into()
}

#[test]
fn w10_host_rules_of_http1_and_http2() {
    let srv = strict(16);
    // RFC 9112 §3.2: no Host, two, or an invalid one: 400.
    let cases: &[(&[u8], &str)] = &[
        (b"GET /hello.txt HTTP/1.1\r\n\r\n", "400"),
        (b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n", "400"),
        (b"GET /hello.txt HTTP/1.1\r\nHost: a b\r\n\r\n", "400"),
        (b"GET /hello.txt HTTP/1.1\r\nHost: localhost:99999\r\n\r\n", "400"),
        (b"GET /hello.txt HTTP/1.1\r\nHost: localhost:8080\r\n\r\n", "200"),
        // HTTP/1.0 needs no Host.
        (b"GET /hello.txt HTTP/1.0\r\n\r\n", "200"),
    ];
    for (req, want) in cases {
        assert_eq!(h1_status(&srv, req), *want, "{}", String::from_utf8_lossy(req));
    }
    // RFC 9113 §8.3.1: a host naming another entity than :authority is malformed.
    assert_eq!(h2_status(&srv, "localhost", &[]), "200");
    assert_eq!(h2_status(&srv, "localhost", &[("host", "localhost")]), "200");
    assert_eq!(h2_status(&srv, "localhost", &[("host", "evil.example")]), "400");
    assert_eq!(h2_status(&srv, "localhost:99999", &[]), "400");
}

#[test]
fn w3_w9_response_memory_is_bounded_during_a_burst_and_returned_after() {
    require_tool!("h2load", "w3_w9_response_memory_is_bounded_during_a_burst_and_returned_after");
    let srv = strict(1000);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(srv.www().join("medium.bin"), &big).unwrap();
    let start = srv.rss_kb().expect("server RSS");
    // 2,560 streams of a 300 KB file at once (20 connections of 128): without a process-wide
    // budget each stream kept up to 320 KB queued (820 MB); glibc then kept it after the burst.
    let mut load = support::Running::spawn(
        Command::new("h2load").args(["-c", "20", "-m", "128", "-n", "20000"]).arg(srv.https("/medium.bin")),
    );
    let mut peak = start;
    let deadline = Instant::now() + Duration::from_secs(120);
    while load.is_running() && Instant::now() < deadline {
        peak = peak.max(srv.rss_kb().unwrap_or(0));
        thread::sleep(Duration::from_millis(50));
    }
    let out = load.finish(Duration::from_secs(10));
    assert!(out.stdout.contains("20000 succeeded"), "{}", out.stdout);
    // The default budget is 128 MiB of queued response bytes; the rest is TLS, engine state and
    // each connection's write buffer (up to 1 MiB).
    assert!(peak < 250_000, "peak RSS {peak} kB (start {start} kB)");
    // And the memory comes back (the allocator is trimmed every 5 s): at least seven eighths of
    // what the burst added. Untrimmed, glibc kept it all (167-186 MB resident 20 s after the
    // burst, measured); trimmed, 4-12 MB over the start stays (live small blocks scattered over
    // the arenas' pages), and once 16.7 MB on a busy machine, so a fixed 16 MB was too tight.
    let bound = (start * 3 / 2).max(start + 16_000).max(start + (peak - start) / 8);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut now = peak;
    while Instant::now() < deadline {
        now = srv.rss_kb().unwrap_or(u64::MAX);
        if now <= bound {
            return;
        }
        thread::sleep(Duration::from_millis(500));
    }
    panic!("RSS {now} kB 20 s after the burst (start {start} kB, peak {peak} kB, bound {bound} kB)");
}

#[test]
fn w3_an_http2_peer_that_keeps_its_windows_shut_while_pinging_is_closed() {
    // Default windows (64 KiB): the server frames that much and then waits for a
    // WINDOW_UPDATE that never comes; a PING every 500 ms keeps the connection busy.
    let (_srv, mut s, mut req) = stall_setup();
    req.extend_from_slice(&get(1, "/__down?bytes=100000000"));
    s.write_all(&req).unwrap();
    let (closed, got) = ping_until_closed(&mut s);
    assert!(closed, "the stalled connection was kept open for 30 s");
    // It got about one window of data, then a GOAWAY (type 0x7) said why.
    assert!(got.len() < 200_000, "{} bytes", got.len());
    assert!(frame_types(&got).contains(&0x7), "no GOAWAY before the close");
}

#[test]
fn w3_a_stalled_response_answered_without_a_handler_is_closed_too() {
    // A cached small file, asked for a second time on the connection, is answered from the
    // engine's head with no handler state: the stall check must see its bytes in the engine.
    let (_srv, mut s, mut req) = stall_setup();
    req.extend_from_slice(&get(1, "/hello.txt"));
    s.write_all(&req).unwrap();
    // The first answer goes through a handler (the connection checks the authority) and
    // ends; then every stream window is shut (SETTINGS_INITIAL_WINDOW_SIZE = 0) and the
    // second request waits with its body unsent.
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ended(&got, 1) {
        assert!(Instant::now() < deadline, "no whole response to the first request");
        let n = s.read(&mut buf).expect("read the first response");
        assert!(n > 0, "closed before the first response");
        got.extend_from_slice(&buf[..n]);
    }
    let mut req = vec![0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x4, 0, 0, 0, 0];
    req.extend_from_slice(&get(3, "/hello.txt"));
    s.write_all(&req).unwrap();
    let (closed, got) = ping_until_closed(&mut s);
    assert!(closed, "the stalled connection was kept open for 30 s");
    assert!(frame_types(&got).contains(&0x7), "no GOAWAY before the close");
}

/// A server whose idle timeout is 4 s (no response byte framed for that long while bytes wait
/// closes a connection), a cleartext connection to it, and the client's first bytes: the
/// preface, an empty SETTINGS and the ACK of the server's.
fn stall_setup() -> (Server, TcpStream, Vec<u8>) {
    let extra = "header_secs = 2\nidle_secs = 4\n".to_owned();
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let s = connect(srv.plain_port);
    let mut req = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    req.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    req.extend_from_slice(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]);
    (srv, s, req)
}

/// A HEADERS frame for `GET path` on `stream`, authority localhost, ending the stream.
fn get(stream: u8, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    let mut f = (block.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[0x1, 0x5, 0, 0, 0, stream]);
    f.extend_from_slice(&block);
    f
}

/// The frames in `got` as (type, flags, stream), in order (a partial last frame left out).
fn frames(got: &[u8]) -> Vec<(u8, u8, u32)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 9 <= got.len() {
        let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
        let stream = u32::from_be_bytes([got[at + 5], got[at + 6], got[at + 7], got[at + 8]]) & 0x7fff_ffff;
        if at + 9 + len > got.len() {
            break;
        }
        out.push((got[at + 3], got[at + 4], stream));
        at += 9 + len;
    }
    out
}

fn frame_types(got: &[u8]) -> Vec<u8> {
    frames(got).into_iter().map(|f| f.0).collect()
}

/// Whether `got` holds a HEADERS or DATA frame with END_STREAM on `stream`.
fn ended(got: &[u8], stream: u32) -> bool {
    frames(got).iter().any(|&(t, flags, id)| id == stream && (t == 0x0 || t == 0x1) && flags & 0x1 != 0)
}

/// PINGs every 500 ms (keeping the connection busy) and reads, until the server closes the
/// connection or 30 s pass: whether it closed, and what was read.
fn ping_until_closed(s: &mut TcpStream) -> (bool, Vec<u8>) {
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let ping = [0, 0, 8, 0x6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let mut last_ping = Instant::now();
    let closed = loop {
        if Instant::now() >= deadline {
            break false;
        }
        if last_ping.elapsed() >= Duration::from_millis(500) {
            last_ping = Instant::now();
            if s.write_all(&ping).is_err() {
                break true;
            }
        }
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
    };
    (closed, got)
}

#[test]
fn w11_one_header_size_rule_over_tls_and_cleartext() {
    require_tool!("curl", "w11_one_header_size_rule_over_tls_and_cleartext");
    let srv = strict(16);
    // Past the 64 KiB limit: 431 over TLS and cleartext alike; below it: served.
    for (size, want) in [(70_000, "431"), (100_000, "431"), (50_000, "204")] {
        let field = format!("x-big: {}", "a".repeat(size));
        let hdr = srv.scratch("big-header.txt");
        std::fs::write(&hdr, &field).unwrap();
        let at = format!("@{}", hdr.display());
        for url in [srv.https("/__ping"), srv.http("/__ping")] {
            let out = run(
                Command::new("curl")
                    .args(["-sk", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                    .arg(&at)
                    .arg(&url),
                Duration::from_secs(20),
            );
            assert_eq!(out.stdout.trim(), want, "{size}-byte field, {url}");
        }
    }
}

#[test]
fn w5_http3_rapid_reset_closes_the_connection_with_excessive_load() {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/h3reset.py");
    if !support::have_aioquic("w5_http3_rapid_reset_closes_the_connection_with_excessive_load") {
        return;
    }
    let srv = strict(16);
    // 400 streams opened and reset at once, against a budget of 200 per 10 s.
    let out = run(
        Command::new("python3").arg(&script).args(["--streams", "400"]).arg(srv.https("/")),
        Duration::from_secs(60),
    );
    out.expect_success("h3reset.py");
    let v: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    // H3_EXCESSIVE_LOAD (RFC 9114 §8.1) before all 400 went out (45,000 were taken before).
    assert_eq!(v["closed"], 0x107, "{v}");
    assert!(v["sent"].as_u64().is_some_and(|n| n > 200), "{v}");
    // Another client is served.
    let out = run(
        Command::new("python3").arg(support::h3client()).arg("--insecure").arg(srv.https("/hello.txt")),
        Duration::from_secs(30),
    );
    out.expect_success("h3client.py");
    assert!(out.stdout.contains("\"status\": 200"), "{}", out.stdout);
}

#[test]
fn a_goaway_for_abuse_reaches_a_peer_that_keeps_sending() {
    let srv = strict(16);
    // Ten times: a PING flood (over the budget of 50 per 10 s) from a peer whose frames keep
    // coming after the GOAWAY; each time the GOAWAY with ENHANCE_YOUR_CALM must be read, not
    // lost to a reset of a socket closed with unread input.
    for round in 0..10 {
        let mut s = connect(srv.plain_port);
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        out.extend_from_slice(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]);
        let ping = [0, 0, 8, 0x6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        for _ in 0..200 {
            out.extend_from_slice(&ping);
        }
        let _ = s.write_all(&out);
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Keep sending, as a flooding client does.
            let _ = s.write_all(&ping);
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        let mut at = 0;
        let mut code = None;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            if got[at + 3] == 0x7 && at + 9 + 8 <= got.len() {
                code = Some(u32::from_be_bytes(got[at + 13..at + 17].try_into().unwrap()));
            }
            at += 9 + len;
        }
        assert_eq!(code, Some(0xb), "round {round}: no GOAWAY(ENHANCE_YOUR_CALM) read ({} bytes)", got.len());
    }
}

#[test]
fn an_http1_refusal_reaches_a_client_that_is_still_sending() {
    let srv = strict(16);
    // Ten times: a request head past the 64 KiB limit, and more of it after the server has
    // answered 431 and closed its side. The client's writes must not be reset (a client such
    // as curl gives up on a failed send before it reads the answer) and the answer must be
    // read: RFC 9112 §9.6, a server closes in stages and keeps reading after its FIN.
    let head = format!("GET /__ping HTTP/1.1\r\nhost: x\r\nx-big: {}", "a".repeat(70_000));
    for round in 0..10 {
        let mut s = connect(srv.plain_port);
        s.write_all(head.as_bytes()).unwrap_or_else(|e| panic!("round {round}: head: {e}"));
        std::thread::sleep(Duration::from_millis(100));
        for i in 0..8 {
            s.write_all(&[b'a'; 4096]).unwrap_or_else(|e| panic!("round {round}: write {i} after the answer: {e}"));
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 431"), "round {round}: read {got:?}");
    }
}

#[test]
fn w8_a_flood_of_frames_that_do_nothing_closes_the_connection() {
    let srv = strict(16);
    // Each kind: 1,100 frames that do no useful work against a budget of 1,000 per 10 s.
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let floods: Vec<(&str, Vec<u8>)> = vec![
        // PRIORITY frames for idle streams (RFC 9113 §6.3).
        ("priority", (0..1100u32).flat_map(|i| frame(0x2, 0, 2 * i + 101, &[0, 0, 0, 0, 16])).collect()),
        // Unknown frame types on the connection.
        ("unknown", (0..1100u32).flat_map(|_| frame(0xfa, 0, 0, b"x")).collect()),
        // SETTINGS that change nothing.
        ("settings", (0..1100u32).flat_map(|_| frame(0x4, 0, 0, &[])).collect()),
    ];
    for (what, flood) in floods {
        let mut s = connect(srv.plain_port);
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend_from_slice(&frame(0x4, 0, 0, &[]));
        out.extend_from_slice(&frame(0x4, 0x1, 0, &[]));
        out.extend_from_slice(&flood);
        let _ = s.write_all(&out);
        let (got, closed) = {
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let closed = loop {
                match s.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(_) => break true,
                }
            };
            (got, closed)
        };
        let mut at = 0;
        let mut code = None;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            if got[at + 3] == 0x7 && at + 17 <= got.len() {
                code = Some(u32::from_be_bytes(got[at + 13..at + 17].try_into().unwrap()));
            }
            at += 9 + len;
        }
        assert!(closed, "{what}: still open");
        // SETTINGS frames also meet max_settings_per_window first; either way ENHANCE_YOUR_CALM.
        assert_eq!(code, Some(0xb), "{what}: GOAWAY code");
    }
}
