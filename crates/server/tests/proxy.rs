//! The reverse proxy end to end, with real upstreams started here: Sluice itself (HTTP/1.1,
//! h2c, h2 over TLS), nginx, a scripted HTTP/1.1 upstream (echo, stall, garbage, oversized
//! head, truncated body, hints, a slow sink), Node's `http` module (the keep-alive race),
//! grpcio and websockets servers. Clients: curl, h2load and nghttp over HTTP/1.1 and HTTP/2,
//! aioquic over HTTP/3, grpcio, websockets.

mod support;

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sha2::{Digest, Sha256};
use support::{curl, free_port, h3client, have_aioquic, require_tool, run, Options, Proto, Server};

/// A Sluice proxying `/p/` and `/up/` to the upstream described by `upstream` (the body of an
/// `[[upstream]]` table without its name).
fn proxy(upstream: &str, more: &str) -> Server {
    let extra = format!(
        "[[upstream]]\nname = \"up\"\n{upstream}\n{more}\n\
         [[site.route]]\npath = \"/p/\"\nproxy = \"up\"\n\
         [[site.route]]\npath = \"/up/\"\nproxy = \"up\"\n"
    );
    Server::start_with(&Options { extra, ..Options::default() })
}

/// A Sluice origin: files under `/p/`, the speed test under `/up/` (its `__up` echoes the
/// bytes it received, with their digest).
fn origin() -> Server {
    let srv = Server::start_with(&Options {
        extra: "[[site.route]]\npath = \"/up/\"\nspeedtest = true\n".into(),
        ..Options::default()
    });
    fs::create_dir_all(srv.www().join("p")).unwrap();
    srv
}

fn sha(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn big(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect()
}

fn h3(args: &[&str]) -> serde_json::Value {
    let out = run(Command::new("python3").arg(h3client()).arg("--insecure").args(args), Duration::from_secs(90));
    out.expect_success("h3client.py");
    serde_json::from_str(out.stdout.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// 10 MB down and up through the proxy, byte-exact, for every client protocol and every
/// upstream protocol; trailers both ways on the upload (the speed test's digest).
#[test]
fn ten_megabytes_each_way_arrive_byte_exact() {
    require_tool!("curl", "ten_megabytes_each_way_arrive_byte_exact");
    let origin = origin();
    let data = big(10 << 20, 7);
    fs::write(origin.www().join("p/big.bin"), &data).unwrap();
    let upload = origin.scratch("up.bin");
    let up_data = big(10 << 20, 99);
    fs::write(&upload, &up_data).unwrap();
    let cert = origin.scratch("data/self-signed-cert.pem");
    let upstreams = [
        ("http1", format!("servers = [\"127.0.0.1:{}\"]", origin.plain_port)),
        ("h2c", format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port)),
        (
            "h2",
            format!(
                "servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2\"\ntls = {{ ca = '{}', sni = \"localhost\" }}",
                origin.tls_port,
                cert.display()
            ),
        ),
    ];
    for (name, up) in &upstreams {
        let px = proxy(up, "");
        for p in Proto::ALL {
            let r = curl(&px, p, "/p/big.bin", &[]);
            assert_eq!(r.status, 200, "{name} {p:?}: {}", px.log());
            assert_eq!(r.size, data.len() as u64, "{name} {p:?}");
            assert_eq!(sha(&r.body), sha(&data), "{name} {p:?}");
            assert!(r.header("via").is_some_and(|v| v.contains("sluice")), "{name} {p:?}: {}", r.headers);
            let r = curl(&px, p, "/up/__up", &["-T", upload.to_str().unwrap(), "-X", "POST"]);
            assert_eq!(r.status, 200, "{name} {p:?}");
            let body = String::from_utf8_lossy(&r.body);
            assert!(body.contains(&format!("\"bytes\":{}", up_data.len())), "{name} {p:?}: {body}");
        }
        if have_aioquic("ten_megabytes_each_way_arrive_byte_exact (h3)") {
            let out = px.scratch("h3.bin");
            let r = h3(&["--out", out.to_str().unwrap(), &px.https("/p/big.bin")]);
            assert_eq!(r["status"], 200, "{name}: {r}");
            assert_eq!(r["body_sha256"], sha(&data), "{name}");
            let r = h3(&["--method", "POST", "--data-file", upload.to_str().unwrap(), &px.https("/up/__up")]);
            assert_eq!(r["status"], 200, "{name}: {r}");
            assert!(r["body"].as_str().unwrap_or_default().contains(&format!("\"bytes\":{}", up_data.len())), "{r}");
        }
    }
}

/// Request trailers reach the upstream and response trailers come back (gRPC's shape), over
/// HTTP/2 on both sides and from HTTP/2 to an HTTP/1.1 upstream (chunked trailers).
#[test]
fn trailers_cross_the_proxy_both_ways() {
    require_tool!("nghttp", "trailers_cross_the_proxy_both_ways");
    let origin = origin();
    for up in [
        format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port),
        format!("servers = [\"127.0.0.1:{}\"]", origin.plain_port),
    ] {
        let px = proxy(&up, "");
        let data = big(200_000, 3);
        let file = px.scratch("t.bin");
        fs::write(&file, &data).unwrap();
        let digest = {
            use base64::Engine as _;
            format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&data)))
        };
        let out = run(
            Command::new("nghttp")
                .args(["-v", "-y", "-d", file.to_str().unwrap(), "--trailer"])
                .arg(format!("content-digest: {digest}"))
                .args(["-H", "want-content-digest: sha-256=1", "-H", "trailer: content-digest"])
                .arg(px.https("/up/__up")),
            Duration::from_secs(30),
        );
        out.expect_success("nghttp");
        assert!(out.stdout.contains("\"content_digest\":\"verified\""), "{up}: {}", out.stdout);
        // The response's own digest trailer: a HEADERS frame after the body.
        assert!(
            out.stdout.lines().any(|l| l.trim_start().starts_with("content-digest: sha-256=:")),
            "{up}: {}",
            out.stdout
        );
    }
}

/// What a scripted upstream does with each request it reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Script {
    /// 200 with the request head and body length as the body.
    Echo,
    /// Never answers.
    Stall,
    /// An invalid status line.
    Garbage,
    /// A 100 KB response head.
    HugeHead,
    /// A 200 with this many fields in its head (content-length included).
    Fields(usize),
    /// Declares 1 MB, sends 100 KB, closes.
    Truncated,
    /// 500 on `/health`, echo otherwise.
    Unhealthy,
    /// Two 103 (Early Hints) responses, then the echo.
    Hints,
    /// 5,000 103 responses, then the echo.
    HintFlood,
    /// Reads a request body at about 4 MB/s before answering.
    SlowSink,
    /// 100,000 bytes with no length, ended by closing the connection.
    CloseDelimited,
    /// The echo as a chunked body in uneven pieces, sent apart, with a trailer; keeps the
    /// connection.
    Chunked,
    /// Answers 413 as soon as it has the head, then reads the body and closes.
    EarlyAnswer,
    /// 200 with field names in mixed case, a field its `Connection` names, and `Keep-Alive`.
    MixedCase,
    /// The echo for a connection's first request; never answers the ones after it.
    OnceThenStall,
    /// The echo after this many milliseconds (a long poll).
    Delayed(u64),
    /// 204 or 304 with a `Content-Length` (as some origins send them) and no body.
    NoContentWithLength(u16),
    /// Answers an `Upgrade` with 101 and then echoes raw bytes (what an h2c-upgrading origin
    /// would do); a request without one gets the echo.
    SwitchesAnything,
    /// The echo, at once for a connection's first request, after 1.2 s for the ones after it.
    SlowAfterFirst,
    /// The echo with `Connection: close` (and `Keep-Alive`, which that overrides), the
    /// connection then kept open and served: a proxy that pooled it anyway would be answered.
    CloseAnnounced,
}

/// A scripted HTTP/1.1 upstream on loopback; records every request head it reads.
struct Scripted {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    conns: Arc<std::sync::atomic::AtomicUsize>,
}

impl Scripted {
    fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (h, c) = (heads.clone(), conns.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let h = h.clone();
                thread::spawn(move || serve_scripted(conn, script, &h));
            }
        });
        Self { port, heads, conns }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve_scripted(conn: TcpStream, script: Script, heads: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok();
    conn.set_nodelay(true).ok();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let mut answered = 0;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let lower = head.to_ascii_lowercase();
        if script == Script::EarlyAnswer {
            let _ = w.write_all(
                b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 9\r\nconnection: close\r\n\r\ntoo large",
            );
        }
        let mut body = 0usize;
        if lower.contains("transfer-encoding: chunked") {
            loop {
                let mut size = String::new();
                if r.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let Ok(n) = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16) else { return };
                if n == 0 {
                    // Trailers, then the empty line; recorded with the head as `trailer> ` lines.
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                            break;
                        }
                        head.push_str("trailer> ");
                        head.push_str(&l);
                    }
                    break;
                }
                let mut buf = vec![0; n + 2];
                if r.read_exact(&mut buf).is_err() {
                    return;
                }
                body += n;
            }
        } else if let Some(cl) = lower.lines().find_map(|l| l.strip_prefix("content-length:")) {
            let n: usize = cl.trim().parse().unwrap_or(0);
            let mut buf = vec![0; 64 * 1024];
            while body < n {
                let k = (n - body).min(buf.len());
                if r.read_exact(&mut buf[..k]).is_err() {
                    return;
                }
                body += k;
                if script == Script::SlowSink {
                    thread::sleep(Duration::from_millis(16));
                }
            }
        }
        heads.lock().unwrap().push(head.clone());
        let echo = |w: &mut TcpStream| {
            let text = format!("{head}body-bytes: {body}\n");
            // One write: `write!` on a socket would send each piece on its own.
            let all =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: text/plain\r\n\r\n{text}", text.len());
            w.write_all(all.as_bytes())
        };
        answered += 1;
        let ok = match script {
            Script::Echo => echo(&mut w).is_ok(),
            Script::CloseAnnounced => {
                let text = format!("{head}body-bytes: {body}\n");
                let all = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\nkeep-alive: timeout=30\r\n\r\n{text}",
                    text.len()
                );
                w.write_all(all.as_bytes()).is_ok()
            }
            Script::Delayed(ms) => {
                thread::sleep(Duration::from_millis(ms));
                echo(&mut w).is_ok()
            }
            Script::NoContentWithLength(status) => {
                let reason = if status == 204 { "No Content" } else { "Not Modified" };
                write!(w, "HTTP/1.1 {status} {reason}\r\ncontent-length: 42\r\netag: \"x\"\r\n\r\n").is_ok()
            }
            Script::SwitchesAnything if lower.contains("\r\nupgrade:") => {
                let _ = w.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n");
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 || w.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                false
            }
            Script::SwitchesAnything => echo(&mut w).is_ok(),
            Script::OnceThenStall if answered == 1 => echo(&mut w).is_ok(),
            Script::OnceThenStall => {
                thread::sleep(Duration::from_secs(20));
                false
            }
            Script::SlowAfterFirst => {
                if answered > 1 {
                    thread::sleep(Duration::from_millis(1200));
                }
                echo(&mut w).is_ok()
            }
            Script::Unhealthy if head.starts_with("GET /health ") => {
                w.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n").is_ok()
            }
            Script::Unhealthy => echo(&mut w).is_ok(),
            Script::Hints => {
                let _ = w.write_all(b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload; as=style\r\n\r\n");
                let _ = w.flush();
                thread::sleep(Duration::from_millis(50));
                // The second joins both links in one field, as Node's `writeEarlyHints` does.
                let _ = w.write_all(
                    b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload; as=style, </b.js>; rel=preload; as=script\r\n\r\n",
                );
                echo(&mut w).is_ok()
            }
            Script::Stall => {
                thread::sleep(Duration::from_secs(20));
                false
            }
            Script::Garbage => {
                let _ = w.write_all(b"HTTP/1.1 2x0 What\r\n\r\n");
                false
            }
            Script::HugeHead => {
                let _ = write!(w, "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n", "a".repeat(100_000));
                false
            }
            Script::Fields(n) => {
                let extra: String = (1..n).map(|i| format!("x-f{i}: {i}\r\n")).collect();
                let _ = write!(w, "HTTP/1.1 200 OK\r\n{extra}content-length: 0\r\n\r\n");
                false
            }
            Script::Truncated => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n");
                let _ = w.write_all(&vec![b'x'; 100_000]);
                let _ = w.flush();
                thread::sleep(Duration::from_millis(200));
                false
            }
            Script::HintFlood => {
                let hint = b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n".repeat(5000);
                let _ = w.write_all(&hint);
                echo(&mut w).is_ok()
            }
            Script::SlowSink => echo(&mut w).is_ok(),
            Script::CloseDelimited => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n");
                let _ = w.write_all(&vec![b'c'; 100_000]);
                false
            }
            Script::Chunked => {
                let text = format!("{head}body-bytes: {body}\n");
                let (a, b) = text.as_bytes().split_at(text.len() / 3);
                let pieces = [
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/plain\r\n\r\n".to_vec(),
                    format!("{:x};ext=1\r\n", a.len()).into_bytes(),
                    [a, b"\r\n"].concat(),
                    format!("{:X}\r\n", b.len()).into_bytes(),
                    [b, b"\r"].concat(),
                    b"\n0\r\nx-checksum: done\r\n\r\n".to_vec(),
                ];
                pieces.iter().all(|p| {
                    thread::sleep(Duration::from_millis(5));
                    w.write_all(p).is_ok()
                })
            }
            Script::EarlyAnswer => false,
            Script::MixedCase => w
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Custom-Name: Value\r\nConnection: Keep-Alive, X-Secret\r\n\
                      Keep-Alive: timeout=30\r\nX-Secret: s\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nContent-Length: 2\r\n\r\nok",
                )
                .is_ok(),
        };
        if !ok {
            return;
        }
    }
}

fn up_at(port: u16, more: &str) -> String {
    format!("servers = [\"127.0.0.1:{port}\"]\n{more}")
}

/// Every way an upstream can fail gets an explicit answer: 502 or 504 with `Proxy-Status`
/// before the head, a reset (HTTP/2) or a closed connection (HTTP/1.1) after it, never a
/// truncated body that looks complete.
#[test]
fn upstream_failures_are_explicit() {
    require_tool!("curl", "upstream_failures_are_explicit");
    // Port 1 (tcpmux): nothing listens there; a port found free a moment ago may be another
    // test's listener by the time the proxy connects.
    let px = proxy(&up_at(1, "retries = 0"), "");
    for p in [Proto::H1Plain, Proto::H2Tls] {
        let r = curl(&px, p, "/p/x", &[]);
        assert_eq!(r.status, 502, "{p:?}");
        assert!(r.header("proxy-status").is_some_and(|v| v.contains("error=connection_refused")), "{}", r.headers);
    }
    let cases = [
        (Script::Stall, 504, "http_response_timeout"),
        (Script::Garbage, 502, "http_protocol_error"),
        (Script::HugeHead, 502, "http_response_header_section_size"),
        // More than 100 fields (hyper's limit, HAProxy's and Envoy's too).
        (Script::Fields(101), 502, "http_response_header_section_size"),
    ];
    for (script, status, kind) in cases {
        let up = Scripted::start(script);
        let px = proxy(&up_at(up.port, "[upstream.timeouts]\nresponse_head_secs = 1"), "");
        for p in [Proto::H1Plain, Proto::H2Tls] {
            let r = curl(&px, p, "/p/x", &[]);
            assert_eq!(r.status, status, "{script:?} {p:?}");
            let ps = r.header("proxy-status").unwrap_or_default();
            assert!(ps.starts_with("sluice; error=") && ps.contains(&format!("error={kind}")), "{script:?}: {ps}");
        }
        assert!(px.log().contains("upstream=up"), "one log line names the upstream: {}", px.log());
    }
    // 100 fields pass.
    let up = Scripted::start(Script::Fields(100));
    let px = proxy(&up_at(up.port, ""), "");
    for p in [Proto::H1Plain, Proto::H2Tls] {
        let r = curl(&px, p, "/p/x", &[]);
        assert_eq!(r.status, 200, "{p:?}");
        assert_eq!(r.header("x-f99").as_deref(), Some("99"), "{p:?}");
    }
    // A body cut short: curl must report a failure (HTTP/1.1: the connection closes before
    // content-length is reached; HTTP/2: the stream is reset).
    let up = Scripted::start(Script::Truncated);
    let px = proxy(&up_at(up.port, ""), "");
    for p in [Proto::H1Plain, Proto::H2Tls, Proto::H2c] {
        let out = run(
            Command::new("curl")
                .args(["-sS", "-k", "--max-time", "20", p.flag(), "-o", "/dev/null"])
                .arg(p.url(&px, "/p/x")),
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{p:?}: a truncated response must not look complete: {}", out.stderr);
    }
}

/// The response-head timeout holds for an exchange on a pooled connection too, whose timer
/// was kept from its previous exchange and moved to the new deadline.
#[test]
fn the_response_head_timeout_holds_on_a_reused_connection() {
    require_tool!("curl", "the_response_head_timeout_holds_on_a_reused_connection");
    let up = Scripted::start(Script::OnceThenStall);
    let px = proxy(&up_at(up.port, "[upstream.timeouts]\nresponse_head_secs = 1"), "");
    let r = curl(&px, Proto::H2Tls, "/p/first", &[]);
    assert_eq!(r.status, 200, "{}", r.headers);
    let r = curl(&px, Proto::H2Tls, "/p/second", &[]);
    assert_eq!(r.status, 504, "{}", r.headers);
    let ps = r.header("proxy-status").unwrap_or_default();
    assert!(ps.contains("error=http_response_timeout"), "{ps}");
    // Both went over one upstream connection: the second on the pooled one.
    assert_eq!(up.conns.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(up.heads().len(), 2);
}

/// A response with `Connection: close` ends its upstream connection's use (RFC 9112 §9.6),
/// even with a `Keep-Alive` timeout beside it and the upstream still serving on it.
#[test]
fn an_upstream_connection_announced_closed_is_not_used_again() {
    require_tool!("curl", "an_upstream_connection_announced_closed_is_not_used_again");
    let up = Scripted::start(Script::CloseAnnounced);
    let px = proxy(&up_at(up.port, ""), "");
    for path in ["/p/first", "/p/second"] {
        let r = curl(&px, Proto::H2Tls, path, &[]);
        assert_eq!(r.status, 200, "{}", r.headers);
    }
    assert_eq!(
        up.conns.load(std::sync::atomic::Ordering::Relaxed),
        2,
        "each request had an upstream connection of its own"
    );
    assert_eq!(up.heads().len(), 2);
}

/// A pooled connection's timer keeps the deadline of an earlier exchange when that one is
/// earlier than the new exchange needs; when it fires, the exchange is not over: the timer
/// moves on to the exchange's own deadline. Here the first exchange leaves the timer due at
/// about 2 s, the second starts at 1.5 s and its answer comes at 2.7 s, within its own 2 s.
#[test]
fn a_deadline_left_from_an_earlier_exchange_does_not_cut_the_next_one_short() {
    require_tool!("curl", "a_deadline_left_from_an_earlier_exchange_does_not_cut_the_next_one_short");
    let up = Scripted::start(Script::SlowAfterFirst);
    let px = proxy(&up_at(up.port, "[upstream.timeouts]\nresponse_head_secs = 2"), "");
    let r = curl(&px, Proto::H2Tls, "/p/first", &[]);
    assert_eq!(r.status, 200, "{}", r.headers);
    thread::sleep(Duration::from_millis(1500));
    let r = curl(&px, Proto::H2Tls, "/p/second", &[]);
    assert_eq!(r.status, 200, "{}", r.headers);
    assert_eq!(up.conns.load(std::sync::atomic::Ordering::Relaxed), 1, "the second went on the pooled connection");
}

/// Whatever framing the upstream's responses use, the client gets the whole body: read to
/// the close (and the connection not reused), chunked in uneven pieces with a trailer (and
/// the connection reused), or answered before the request body was read (the answer
/// forwarded, not a 502).
#[test]
fn every_response_framing_of_an_http1_upstream_is_read() {
    require_tool!("curl", "every_response_framing_of_an_http1_upstream_is_read");
    let up = Scripted::start(Script::CloseDelimited);
    let px = proxy(&up_at(up.port, ""), "");
    for p in [Proto::H2Tls, Proto::H1Plain] {
        let r = curl(&px, p, "/p/x", &[]);
        assert_eq!((r.status, r.body.len()), (200, 100_000), "{p:?}");
        assert!(r.body.iter().all(|&b| b == b'c'), "{p:?}");
    }
    assert_eq!(up.conns.load(std::sync::atomic::Ordering::Relaxed), 2, "a body read to the close ends its connection");

    let up = Scripted::start(Script::Chunked);
    let px = proxy(&up_at(up.port, ""), "");
    for i in 0..3 {
        let r = curl(&px, Proto::H2Tls, &format!("/p/chunked-{i}"), &[]);
        assert_eq!(r.status, 200);
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            body.starts_with(&format!("GET /p/chunked-{i} HTTP/1.1\r\n")) && body.ends_with("body-bytes: 0\n"),
            "{body}"
        );
        assert!(r.headers.contains("x-checksum: done"), "the trailer arrives: {}", r.headers);
    }
    assert_eq!(up.conns.load(std::sync::atomic::Ordering::Relaxed), 1, "a chunked body keeps its connection");

    let up = Scripted::start(Script::EarlyAnswer);
    let px = proxy(&up_at(up.port, ""), "");
    let file = px.scratch("early.bin");
    fs::write(&file, vec![b'e'; 2_000_000]).unwrap();
    let data = format!("@{}", file.display());
    for p in [Proto::H2Tls, Proto::H1Plain] {
        let r = curl(&px, p, "/p/upload", &["--data-binary", &data]);
        assert_eq!(r.status, 413, "{p:?}: {}", r.headers);
        assert_eq!(r.body, b"too large", "{p:?}");
        assert!(r.header("proxy-status").is_none(), "{p:?}: {}", r.headers);
    }
}

/// An upstream's response fields reach every client protocol lower-cased (HTTP/2 and HTTP/3
/// refuse upper-case names), in order, without the connection-specific ones and the ones its
/// `Connection` names, with `Via` added.
#[test]
fn response_fields_cross_lower_cased_without_connection_specific_ones() {
    require_tool!("curl", "response_fields_cross_lower_cased_without_connection_specific_ones");
    let up = Scripted::start(Script::MixedCase);
    let px = proxy(&up_at(up.port, ""), "");
    for p in [Proto::H2Tls, Proto::H1Plain, Proto::H2c] {
        let r = curl(&px, p, "/p/x", &[]);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]), "{p:?}");
        let h = r.headers.to_ascii_lowercase();
        assert!(h.contains("x-custom-name: value\r\n"), "{p:?}: {}", r.headers);
        assert!(h.contains("set-cookie: a=1\r\nset-cookie: b=2\r\n"), "{p:?}: {}", r.headers);
        assert!(h.contains("via: 1.1 sluice\r\n"), "{p:?}: {}", r.headers);
        assert!(!h.contains("x-secret") && !h.contains("keep-alive: timeout"), "{p:?}: {}", r.headers);
        if !matches!(p, Proto::H1Plain) {
            assert!(!r.headers.contains("X-Custom-Name"), "{p:?}: names are lower-cased: {}", r.headers);
        }
    }
    if have_aioquic("response_fields_cross_lower_cased_without_connection_specific_ones (h3)") {
        let r = h3(&[&px.https("/p/x")]);
        assert_eq!(r["status"], 200, "{r}");
        let text = r.to_string().to_ascii_lowercase();
        assert!(text.contains("x-custom-name") && !text.contains("x-secret"), "{r}");
    }
    assert_eq!(up.conns.load(std::sync::atomic::Ordering::Relaxed), 1, "one kept-alive upstream connection");
}

/// The fields the upstream sees: hop-by-hop ones gone (also those `Connection` names), `Via`
/// and the forwarding fields set, forged forwarding fields replaced, `Host` passed through
/// (or set by the upstream's `host`), cookie crumbs joined for HTTP/1.1.
#[test]
fn the_upstream_sees_forwarding_fields_and_no_hop_by_hop_ones() {
    require_tool!("curl", "the_upstream_sees_forwarding_fields_and_no_hop_by_hop_ones");
    let up = Scripted::start(Script::Echo);
    let px = proxy(&up_at(up.port, ""), "");
    let r = curl(
        &px,
        Proto::H1Plain,
        "/p/echo?q=1",
        &[
            "-H",
            "Connection: x-private",
            "-H",
            "X-Private: secret",
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            "-H",
            "Keep-Alive: 1",
        ],
    );
    assert_eq!(r.status, 200);
    let seen = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(seen.starts_with("get /p/echo?q=1 http/1.1\r\n"), "{seen}");
    assert!(!seen.contains("x-private") && !seen.contains("keep-alive: 1"), "{seen}");
    assert!(seen.contains("x-forwarded-for: 127.0.0.1\r\n"), "{seen}");
    assert!(seen.contains("x-forwarded-proto: http\r\n"), "{seen}");
    assert!(seen.contains("via: 1.1 sluice\r\n"), "{seen}");
    assert!(seen.contains(&format!("host: 127.0.0.1:{}\r\n", px.plain_port)), "{seen}");
    assert!(seen.contains("forwarded: for=127.0.0.1;proto=http;"), "{seen}");
    // HTTP/2: cookie crumbs arrive as one field.
    let r = curl(&px, Proto::H2Tls, "/p/echo", &["-H", "cookie: a=1", "-H", "cookie: b=2"]);
    let seen = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(seen.contains("cookie: a=1; b=2\r\n"), "{seen}");
    assert!(seen.contains("via: 2 sluice\r\n") && seen.contains("x-forwarded-proto: https\r\n"), "{seen}");
    // A configured host replaces the client's.
    let px = proxy(&up_at(up.port, "host = \"app.internal\""), "");
    let r = curl(&px, Proto::H2c, "/p/echo", &[]);
    let seen = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(seen.contains("host: app.internal\r\n"), "{seen}");
    // From a trusted proxy, forwarding fields are extended instead.
    let px = proxy(&up_at(up.port, ""), "[proxy]\ntrusted_proxies = [\"127.0.0.0/8\"]");
    let r = curl(&px, Proto::H1Plain, "/p/echo", &["-H", "X-Forwarded-For: 203.0.113.5"]);
    let seen = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(seen.contains("x-forwarded-for: 203.0.113.5, 127.0.0.1\r\n"), "{seen}");
}

/// Raw HTTP/1.1 to the proxy; the status codes of every response read until it closes.
fn raw_h1(port: u16, bytes: &[u8]) -> Vec<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| String::from_utf8_lossy(&out)[i + 9..].get(..3).and_then(|c| c.parse().ok()))
        .collect()
}

/// Smuggling probes: whatever the proxy makes of an ambiguous request, the upstream never
/// reads more requests than the proxy answered, and never an ambiguous framing.
#[test]
fn smuggling_probes_never_reach_the_upstream_as_two_requests() {
    let up = Scripted::start(Script::Echo);
    let px = proxy(&up_at(up.port, ""), "");
    let probes: [&[u8]; 4] = [
        b"POST /p/a HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\nGET /p/smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /p/b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\nConnection: close\r\n\r\nhelloGET /p/smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /p/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nGET /p/smuggled HTTP/1.1\r\nHost: x\r\n\r\n0\r\n\r\n",
        b"POST /p/d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ];
    for probe in probes {
        let before = up.heads().len();
        let statuses = raw_h1(px.plain_port, probe);
        let heads = up.heads();
        let new = &heads[before..];
        assert!(
            new.len() <= statuses.iter().filter(|s| **s < 400).count(),
            "probe {:?}: upstream read {} requests, client got {statuses:?}",
            String::from_utf8_lossy(probe),
            new.len()
        );
        for h in new {
            let l = h.to_ascii_lowercase();
            assert!(!l.contains("/p/smuggled"), "smuggled: {h}");
            assert!(!(l.contains("content-length:") && l.contains("transfer-encoding:")), "ambiguous framing: {h}");
            assert!(l.matches("content-length:").count() <= 1, "{h}");
        }
    }
}

/// Weighted round-robin spreads requests by weight; a server that refuses is retried on
/// another, then ejected; an unhealthy one (active checks) leaves the rotation.
#[test]
fn balancing_retries_ejection_and_health_checks() {
    require_tool!("curl", "balancing_retries_ejection_and_health_checks");
    let a = Scripted::start(Script::Echo);
    let b = Scripted::start(Script::Echo);
    let px = proxy(&format!("servers = [\"127.0.0.1:{} weight=3\", \"127.0.0.1:{}\"]", a.port, b.port), "");
    for _ in 0..8 {
        assert_eq!(curl(&px, Proto::H1Plain, "/p/rr", &[]).status, 200);
    }
    assert_eq!((a.heads().len(), b.heads().len()), (6, 2), "weights 3:1 over 8 requests");

    // One server refuses: every request still succeeds (retried), and it gets ejected. (Port 1:
    // nothing listens there; see `upstream_failures_are_explicit`.)
    let closed = 1;
    let px = proxy(
        &format!(
            "servers = [\"127.0.0.1:{closed}\", \"127.0.0.1:{}\"]\n[upstream.eject]\nfailures = 2\nsecs = 60",
            a.port
        ),
        "",
    );
    for _ in 0..6 {
        assert_eq!(curl(&px, Proto::H1Plain, "/p/retry", &[]).status, 200, "{}", px.log());
    }
    assert!(px.log().contains("upstream server ejected"), "{}", px.log());

    // Active health checks take a server answering 500 on /health out of rotation.
    let sick = Scripted::start(Script::Unhealthy);
    let px = proxy(
        &format!(
            "servers = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n[upstream.health]\npath = \"/health\"\ninterval_secs = 1\nfails = 1",
            sick.port, b.port
        ),
        "",
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !px.log().contains("server out of rotation") {
        assert!(std::time::Instant::now() < deadline, "no health verdict: {}", px.log());
        thread::sleep(Duration::from_millis(100));
    }
    let before = sick.heads().iter().filter(|h| !h.starts_with("GET /health")).count();
    for _ in 0..4 {
        assert_eq!(curl(&px, Proto::H1Plain, "/p/h", &[]).status, 200);
    }
    let after = sick.heads().iter().filter(|h| !h.starts_with("GET /health")).count();
    assert_eq!(before, after, "no request goes to the unhealthy server");

    // Consistent hashing on a header: the same key always lands on the same server.
    let px = proxy(
        &format!(
            "servers = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\nbalance = \"hash\"\nhash_key = \"header:x-user\"",
            a.port, b.port
        ),
        "",
    );
    let mut by_user: HashMap<String, (usize, usize)> = HashMap::new();
    for i in 0..12 {
        let user = format!("u{}", i % 3);
        // Only this part's requests count: the health-checking proxy above still probes `b`.
        let hashed = |s: &Scripted| s.heads().iter().filter(|h| h.starts_with("GET /p/hash ")).count();
        let (a0, b0) = (hashed(&a), hashed(&b));
        assert_eq!(curl(&px, Proto::H1Plain, "/p/hash", &["-H", &format!("x-user: {user}")]).status, 200);
        let hit = (hashed(&a) - a0, hashed(&b) - b0);
        let first = *by_user.entry(user.clone()).or_insert(hit);
        assert_eq!(first, hit, "user {user} moved");
    }
}

/// Node's `http` server closes idle keep-alive connections after its `keepAliveTimeout`
/// (5 s by default; 2 s here to keep the test short, the same race) and says so in
/// `Keep-Alive: timeout=N`. Requests spaced to land on that moment, half of them POSTs (which
/// may not be retried), must all succeed.
#[test]
fn node_keep_alive_timeout_causes_no_errors() {
    require_tool!("node", "node_keep_alive_timeout_causes_no_errors");
    require_tool!("curl", "node_keep_alive_timeout_causes_no_errors");
    let port = free_port();
    let script = format!(
        "const http = require('http');\n\
         const s = http.createServer((req, res) => {{ let n = 0; req.on('data', d => n += d.length); \
         req.on('end', () => res.end('ok ' + req.method + ' ' + n + '\\n')); }});\n\
         s.keepAliveTimeout = 2000;\n\
         s.listen({port}, '127.0.0.1');\n"
    );
    let mut node = Command::new("node").arg("-e").arg(&script).spawn().expect("node");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "node did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let px = proxy(&up_at(port, ""), "");
    let body = px.scratch("post.txt");
    fs::write(&body, "hello").unwrap();
    let mut failures = Vec::new();
    // Gaps from 1.8 s to 2.2 s around the 2 s timeout, in 50 ms steps.
    for i in 0..18u64 {
        let gap = Duration::from_millis(1800 + (i % 9) * 50);
        thread::sleep(gap);
        let args: Vec<&str> = if i % 2 == 0 { vec![] } else { vec!["--data-binary", "@"] };
        let data_arg = format!("@{}", body.display());
        let args: Vec<&str> = if args.is_empty() { args } else { vec!["--data-binary", &data_arg] };
        let r = curl(&px, Proto::H2Tls, "/p/ka", &args);
        if r.status != 200 {
            failures.push((i, gap, r.status, String::from_utf8_lossy(&r.body).into_owned()));
        }
    }
    let _ = node.kill();
    let _ = node.wait();
    assert!(failures.is_empty(), "{failures:?}\n{}", px.log());
}

/// An HTTP/1.1 upstream's 103s reach HTTP/2 and HTTP/3 clients, each of them, before the final
/// response; HTTP/1.1 clients get none.
#[test]
fn interim_responses_from_the_upstream_are_forwarded() {
    require_tool!("curl", "interim_responses_from_the_upstream_are_forwarded");
    let up = Scripted::start(Script::Hints);
    let px = proxy(&up_at(up.port, ""), "");
    let r = curl(&px, Proto::H2Tls, "/p/page", &[]);
    assert_eq!(r.status, 200);
    let first = r.headers.find("HTTP/2 103").expect("a 103");
    let second = r.headers[first + 1..].find("HTTP/2 103").expect("a second 103") + first + 1;
    let fin = r.headers.find("HTTP/2 200").expect("the final head");
    assert!(first < second && second < fin, "{}", r.headers);
    assert!(r.headers.contains("link: </a.css>; rel=preload; as=style"), "{}", r.headers);
    assert!(r.headers.contains("link: </b.js>; rel=preload; as=script"), "{}", r.headers);
    let r = curl(&px, Proto::H1Plain, "/p/page", &[]);
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains(" 103"), "{}", r.headers);
    // A flood of them is cut to a budget; the final response still arrives.
    let flood = Scripted::start(Script::HintFlood);
    let px2 = proxy(&up_at(flood.port, ""), "");
    let r = curl(&px2, Proto::H2Tls, "/p/page", &[]);
    assert_eq!(r.status, 200);
    let n = r.headers.matches("HTTP/2 103").count();
    assert!((1..=16).contains(&n), "{n} interim responses forwarded");
    if have_aioquic("interim_responses_from_the_upstream_are_forwarded (h3)") {
        let r = h3(&[&px.https("/p/page")]);
        assert_eq!(r["status"], 200, "{r}");
        let interim = r["interim"].as_array().expect("interim");
        assert_eq!(interim.len(), 2, "{r}");
        assert!(interim.iter().all(|i| i[0] == 103), "{r}");
    }
}

/// A WebSocket (PyPI `websockets`) upgrades through the proxy and echoes text and a 100 KB
/// binary message both ways.
#[test]
fn websockets_tunnel_through_the_proxy() {
    if !support::python_has("websockets", "websockets_tunnel_through_the_proxy") {
        return;
    }
    let port = free_port();
    let server = format!(
        "import websockets.sync.server as s\n\
         def echo(ws):\n    for m in ws:\n        ws.send(m)\n\
         with s.serve(echo, '127.0.0.1', {port}) as srv:\n    srv.serve_forever()\n"
    );
    // Its stderr is quiet: the readiness probe below is a connection without a handshake.
    let mut child =
        Command::new("python3").arg("-c").arg(&server).stderr(std::process::Stdio::null()).spawn().expect("python3");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "websocket server did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let px = proxy(&up_at(port, ""), "");
    let client = format!(
        "import websockets.sync.client as c\n\
         with c.connect('ws://127.0.0.1:{}/p/ws') as ws:\n\
         \x20   ws.send('hello')\n\
         \x20   assert ws.recv(timeout=10) == 'hello'\n\
         \x20   data = bytes(range(256)) * 400\n\
         \x20   ws.send(data)\n\
         \x20   assert ws.recv(timeout=10) == data\n\
         print('ok')\n",
        px.plain_port
    );
    let out = run(Command::new("python3").arg("-c").arg(&client), Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    assert!(out.status.success() && out.stdout.contains("ok"), "{}\n{}\n{}", out.stdout, out.stderr, px.log());
}

/// gRPC (PyPI grpcio) through the proxy to an h2c gRPC server: unary, server and client
/// streaming, and an error status, which travels in the trailers; over HTTP/2 with TLS and h2c,
/// and a unary call over HTTP/3 (aioquic, gRPC's framing by hand).
#[test]
fn grpc_calls_cross_the_proxy() {
    if !support::python_has("grpc", "grpc_calls_cross_the_proxy") {
        return;
    }
    let port = free_port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/grpc_echo.py");
    let mut child = Command::new("python3").arg(&script).args(["serve", &port.to_string()]).spawn().expect("python3");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "gRPC server did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let px = proxy(
        &format!("servers = [\"127.0.0.1:{port}\"]\nprotocol = \"h2c\""),
        "[[site.route]]\npath = \"/echo.Echo/\"\nproxy = \"up\"\n",
    );
    let ca = px.scratch("data/self-signed-cert.pem");
    let tls = run(
        Command::new("python3").arg(&script).args(["call", &format!("127.0.0.1:{}", px.tls_port), "--ca"]).arg(&ca),
        Duration::from_secs(60),
    );
    let plain = run(
        Command::new("python3").arg(&script).args(["call", &format!("127.0.0.1:{}", px.plain_port)]),
        Duration::from_secs(60),
    );
    let h3_result = have_aioquic("grpc_calls_cross_the_proxy (h3)").then(|| {
        let msg = px.scratch("grpc.msg");
        let payload = b"hello over h3";
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        framed.extend_from_slice(payload);
        fs::write(&msg, &framed).unwrap();
        h3(&[
            "--method",
            "POST",
            "--data-file",
            msg.to_str().unwrap(),
            "--header",
            "content-type: application/grpc",
            "--header",
            "te: trailers",
            &px.https("/echo.Echo/Unary"),
        ])
    });
    let _ = child.kill();
    let _ = child.wait();
    tls.expect_success(&format!("gRPC over TLS h2: {}", px.log()));
    assert!(tls.stdout.contains("\"fail_code\": \"NOT_FOUND\""), "{}", tls.stdout);
    plain.expect_success("gRPC over h2c");
    if let Some(r) = h3_result {
        assert_eq!(r["status"], 200, "{r}");
        let trailers = r["trailers"].as_array().expect("trailers");
        assert!(trailers.iter().any(|t| t[0] == "grpc-status" && t[1] == "0"), "{r}");
        assert_eq!(r["body_len"], 5 + 13, "{r}");
    }
}

/// A slow client costs bounded memory: while curl reads a 400 MB response at 2 MB/s through
/// the proxy, the proxy holds no more than a few windows of it, whatever the upstream protocol.
#[test]
fn a_slow_client_holds_the_upstream_back() {
    require_tool!("curl", "a_slow_client_holds_the_upstream_back");
    let origin = origin();
    let f = fs::File::create(origin.www().join("p/huge.bin")).unwrap();
    f.set_len(400 << 20).unwrap();
    for up in [
        format!("servers = [\"127.0.0.1:{}\"]", origin.plain_port),
        format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port),
    ] {
        let px = proxy(&up, "");
        let before = px.rss_kb().expect("rss");
        for p in [Proto::H2Tls, Proto::H1Plain] {
            let out = run(
                Command::new("curl")
                    .args(["-sS", "-k", "--limit-rate", "2M", "--max-time", "3", p.flag(), "-o", "/dev/null"])
                    .args(["-w", "%{size_download}"])
                    .arg(p.url(&px, "/p/huge.bin")),
                Duration::from_secs(20),
            );
            let got: u64 = out.stdout.trim().parse().unwrap_or(0);
            assert!(got > 1 << 20 && got < 100 << 20, "{up} {p:?}: {got} bytes in 3 s at 2 MB/s: {}", out.stderr);
            let grown = px.rss_kb().expect("rss").saturating_sub(before);
            assert!(grown < 48 * 1024, "{up} {p:?}: the proxy grew by {grown} kB for a slow client");
        }
    }
}

/// An upload is taken from the client only as fast as the upstream reads it: over HTTP/2 the
/// receive credit follows the slow upstream (about 4 MB/s), so in 3 s curl sends far less than
/// the 200 MB it has, and the proxy holds a bounded amount of it.
#[test]
fn an_upload_moves_at_the_upstreams_pace() {
    require_tool!("curl", "an_upload_moves_at_the_upstreams_pace");
    let up = Scripted::start(Script::SlowSink);
    let px = proxy(&up_at(up.port, ""), "");
    let file = px.scratch("big-upload.bin");
    fs::File::create(&file).unwrap().set_len(200 << 20).unwrap();
    let before = px.rss_kb().expect("rss");
    for p in [Proto::H2Tls, Proto::H1Plain] {
        let out = run(
            Command::new("curl")
                .args(["-sS", "-k", "--max-time", "3", p.flag(), "-o", "/dev/null", "-w", "%{size_upload}"])
                .arg("--data-binary")
                .arg(format!("@{}", file.display()))
                .arg(p.url(&px, "/p/sink")),
            Duration::from_secs(20),
        );
        let sent: u64 = out.stdout.trim().parse().unwrap_or(0);
        assert!(sent > 1 << 20 && sent < 60 << 20, "{p:?}: {sent} bytes sent in 3 s to a 4 MB/s upstream");
        let grown = px.rss_kb().expect("rss").saturating_sub(before);
        assert!(grown < 48 * 1024, "{p:?}: the proxy grew by {grown} kB for a slow upstream");
    }
}

/// An h2c upstream allowing 2 concurrent streams gets no more: 400 requests, 40 at a time
/// from the client, all answered.
#[test]
fn an_h2_upstreams_stream_limit_is_respected() {
    require_tool!("h2load", "an_h2_upstreams_stream_limit_is_respected");
    let origin =
        Server::start_with(&Options { extra: "[limits]\nmax_concurrent_streams = 2\n".into(), ..Options::default() });
    fs::create_dir_all(origin.www().join("p")).unwrap();
    fs::write(origin.www().join("p/small.txt"), "fourteen bytes").unwrap();
    let px = proxy(&format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port), "");
    let out = run(
        Command::new("h2load").args(["-n", "400", "-c", "2", "-m", "20"]).arg(px.https("/p/small.txt")),
        Duration::from_secs(60),
    );
    out.expect_success("h2load");
    assert!(out.stdout.contains("400 succeeded, 0 failed, 0 errored"), "{}\n{}", out.stdout, px.log());
    assert!(out.stdout.contains("status codes: 400 2xx"), "{}", out.stdout);
}

/// Configured hints and the upstream's own 103s merge: each link goes out once, the
/// configured ones first, and the access log names both sources.
#[test]
fn configured_and_upstream_hints_merge_without_duplicates() {
    require_tool!("curl", "configured_and_upstream_hints_merge_without_duplicates");
    let up = Scripted::start(Script::Hints);
    let extra = format!(
        "[[upstream]]\nname = \"up\"\nservers = [\"127.0.0.1:{}\"]\n\
         [[site.route]]\npath = \"/p/\"\nproxy = \"up\"\nearly_hints = [\"</a.css>; rel=preload; as=style\"]\n",
        up.port
    );
    let px = Server::start_with(&Options { extra, ..Options::default() });
    let r = curl(&px, Proto::H2Tls, "/p/page", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.matches("link: </a.css>; rel=preload; as=style").count(), 1, "{}", r.headers);
    assert_eq!(r.headers.matches("link: </b.js>; rel=preload; as=script").count(), 1, "{}", r.headers);
    // Two 103s: the configured one, then the upstream's second (its first only repeated it).
    assert_eq!(r.headers.matches("HTTP/2 103").count(), 2, "{}", r.headers);
    assert!(r.headers.find("</a.css>").unwrap() < r.headers.find("</b.js>").unwrap());
    // The access log is written out every 100 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !px.log().lines().any(|l| l.contains("/p/page") && l.contains(" hints=configured+upstream ")) {
        assert!(std::time::Instant::now() < deadline, "{}", px.log());
        thread::sleep(Duration::from_millis(50));
    }
}

/// An h2c upstream that closes idle connections (GOAWAY after 1 s): the next requests, GET and
/// POST, open a new connection instead of failing on the old one.
#[test]
fn an_h2_upstream_closing_idle_connections_causes_no_errors() {
    require_tool!("curl", "an_h2_upstream_closing_idle_connections_causes_no_errors");
    let origin = Server::start_with(&Options {
        extra: "[[site.route]]\npath = \"/up/\"\nspeedtest = true\n".into(),
        idle_secs: Some(1),
        ..Options::default()
    });
    fs::create_dir_all(origin.www().join("p")).unwrap();
    fs::write(origin.www().join("p/a.txt"), "hello\n").unwrap();
    let px = proxy(&format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port), "");
    let body = px.scratch("b.txt");
    fs::write(&body, "x".repeat(1000)).unwrap();
    for round in 0..3 {
        assert_eq!(curl(&px, Proto::H2Tls, "/p/a.txt", &[]).status, 200, "round {round}: {}", px.log());
        let data = format!("@{}", body.display());
        let r = curl(&px, Proto::H2Tls, "/up/__up", &["--data-binary", &data]);
        assert_eq!(r.status, 200, "round {round}: {}", px.log());
        thread::sleep(Duration::from_millis(1600));
    }
}

/// `[upstream.pool] max_connections = 2`: 200 requests, 20 at a time, share two upstream
/// connections and all succeed.
#[test]
fn the_connection_limit_per_server_holds() {
    require_tool!("h2load", "the_connection_limit_per_server_holds");
    let up = Scripted::start(Script::Echo);
    let px = proxy(&up_at(up.port, "[upstream.pool]\nmax_connections = 2"), "");
    let out = run(
        Command::new("h2load").args(["-n", "200", "-c", "2", "-m", "10"]).arg(px.https("/p/limit")),
        Duration::from_secs(60),
    );
    out.expect_success("h2load");
    assert!(out.stdout.contains("200 succeeded, 0 failed, 0 errored"), "{}\n{}", out.stdout, px.log());
    assert_eq!(up.heads().len(), 200);
    let n = up.conns.load(std::sync::atomic::Ordering::Relaxed);
    assert!((1..=2).contains(&n), "{n} upstream connections");
}

/// nginx (Debian's) as an HTTP/1.1 upstream: a 10 MB file byte-exact over HTTP/1.1 and HTTP/2,
/// its 404 passed through, HEAD without a body, and keep-alive connections reused.
#[test]
fn nginx_as_the_upstream() {
    require_tool!("nginx", "nginx_as_the_upstream");
    require_tool!("curl", "nginx_as_the_upstream");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    fs::create_dir_all(root.join("p")).unwrap();
    let data = big(10 << 20, 11);
    fs::write(root.join("p/big.bin"), &data).unwrap();
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    fs::write(
        &conf,
        format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n{user}\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             \x20 server {{ listen 127.0.0.1:{port}; root {r}; }}\n}}\n",
            d = dir.path().display(),
            r = root.display(),
            // As root, nginx's worker would drop to `nobody`, who cannot read a private temp dir.
            user = if Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n")) {
                "user root;\n"
            } else {
                ""
            },
        ),
    )
    .unwrap();
    let mut child = Command::new("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        // One process (`master_process off`), killed below; nothing of it holds the test's output.
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "nginx did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let px = proxy(&up_at(port, ""), "");
    for p in [Proto::H1Plain, Proto::H2Tls] {
        let r = curl(&px, p, "/p/big.bin", &[]);
        assert_eq!(r.status, 200, "{p:?}");
        assert_eq!(sha(&r.body), sha(&data), "{p:?}");
        assert!(r.header("server").is_some_and(|s| s.starts_with("nginx")), "{}", r.headers);
        assert_eq!(curl(&px, p, "/p/missing", &[]).status, 404, "{p:?}");
        let r = curl(&px, p, "/p/big.bin", &["--head"]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length").as_deref(), Some("10485760"), "{}", r.headers);
    }
    let _ = child.kill();
    let _ = child.wait();
    // Six requests to nginx over fewer connections: the pool kept them alive.
    let log = fs::read_to_string(dir.path().join("access.log")).unwrap_or_default();
    assert_eq!(log.lines().count(), 6, "{log}");
}

/// A client body that grows past `limits.max_request_body` while it is forwarded (chunked, no
/// declared length) is the client's fault: 413, not a 502, and the server is not ejected.
#[test]
fn a_body_over_the_limit_is_a_413_not_a_502() {
    require_tool!("curl", "a_body_over_the_limit_is_a_413_not_a_502");
    let up = Scripted::start(Script::Echo);
    let px = proxy(&up_at(up.port, "[upstream.eject]\nfailures = 1"), "[limits]\nmax_request_body = 1000\n");
    let file = px.scratch("big.txt");
    fs::write(&file, "x".repeat(100_000)).unwrap();
    let data = format!("@{}", file.display());
    for _ in 0..2 {
        let r = curl(&px, Proto::H1Plain, "/p/up", &["-H", "transfer-encoding: chunked", "--data-binary", &data]);
        assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
        assert!(r.header("proxy-status").is_none(), "{}", r.headers);
    }
    // Not ejected: a normal request still reaches the upstream.
    assert_eq!(curl(&px, Proto::H1Plain, "/p/ok", &[]).status, 200);
}

/// A Sluice proxying `/p/` to the upstream of `upstream`, with `[timeouts] idle_secs` at
/// `idle`.
fn proxy_idle(upstream: &str, idle: u64) -> Server {
    let extra = format!("[[upstream]]\nname = \"up\"\n{upstream}\n[[site.route]]\npath = \"/p/\"\nproxy = \"up\"\n");
    Server::start_with(&Options { extra, idle_secs: Some(idle), ..Options::default() })
}

/// A request waiting on its upstream is not an idle connection: a long poll that outlasts
/// `[timeouts] idle_secs` is answered on HTTP/1.1, HTTP/2 (TLS and h2c) and HTTP/3 (before,
/// HTTP/2 cut it with GOAWAY at `idle_secs`).
#[test]
fn a_long_poll_outlives_the_idle_timeout_on_every_protocol() {
    require_tool!("curl", "a_long_poll_outlives_the_idle_timeout_on_every_protocol");
    let up = Scripted::start(Script::Delayed(3_500));
    let px = proxy_idle(&up_at(up.port, ""), 2);
    for p in Proto::ALL {
        let r = curl(&px, p, "/p/poll", &[]);
        assert_eq!(r.status, 200, "{p:?}: {}", r.headers);
        assert!(String::from_utf8_lossy(&r.body).starts_with("GET /p/poll"), "{p:?}");
    }
    if !have_aioquic("a_long_poll_outlives_the_idle_timeout_on_every_protocol (HTTP/3)") {
        return;
    }
    let v = h3(&[&px.https("/p/poll")]);
    assert_eq!(v["status"], 200, "{v}");
}

/// Streams waiting on a stalled upstream end with 504 and `Proxy-Status` at the upstream's
/// `response_head_secs`, not as resets at the client connection's `idle_secs`.
#[test]
fn streams_on_a_stalled_upstream_get_504s_not_resets() {
    require_tool!("h2load", "streams_on_a_stalled_upstream_get_504s_not_resets");
    require_tool!("curl", "streams_on_a_stalled_upstream_get_504s_not_resets");
    let up = Scripted::start(Script::Stall);
    // No passive ejection: every request meets the stalled server, none a 503.
    let px =
        proxy_idle(&up_at(up.port, "[upstream.timeouts]\nresponse_head_secs = 4\n[upstream.eject]\nfailures = 0"), 2);
    let out = run(
        Command::new("h2load").args(["-n", "40", "-c", "1", "-m", "40"]).arg(px.https("/p/stalled")),
        Duration::from_secs(60),
    );
    out.expect_success("h2load");
    assert!(out.stdout.contains("status codes: 0 2xx, 0 3xx, 0 4xx, 40 5xx"), "{}", out.stdout);
    let r = curl(&px, Proto::H2c, "/p/stalled-too", &[]);
    assert_eq!(r.status, 504, "{}", r.headers);
    assert!(r.header("proxy-status").unwrap_or_default().contains("error=http_response_timeout"), "{}", r.headers);
}

/// An `Upgrade: h2c` (with `HTTP2-Settings`) is not passed to an HTTP/1.1 upstream, so an
/// origin that would switch never turns the connection into a tunnel past per-request
/// routing (h2c smuggling); the request is proxied as a plain one. A WebSocket upgrade still
/// goes through (`websockets_tunnel_through_the_proxy`).
#[test]
fn an_h2c_upgrade_is_not_passed_upstream() {
    require_tool!("curl", "an_h2c_upgrade_is_not_passed_upstream");
    let up = Scripted::start(Script::SwitchesAnything);
    let px = proxy(&up_at(up.port, ""), "");
    for p in [Proto::H1Plain, Proto::H1Tls] {
        let r = curl(
            &px,
            p,
            "/p/smuggle",
            &[
                "-H",
                "Connection: Upgrade, HTTP2-Settings",
                "-H",
                "Upgrade: h2c",
                "-H",
                "HTTP2-Settings: AAMAAABkAAQAAP__",
            ],
        );
        assert_eq!(r.status, 200, "{p:?}: {}", r.headers);
    }
    // And without `Connection` naming them: `Upgrade` and `HTTP2-Settings` still go.
    let r = curl(&px, Proto::H1Plain, "/p/bare", &["-H", "Upgrade: h2c", "-H", "HTTP2-Settings: AAMAAABkAAQAAP__"]);
    assert_eq!(r.status, 200, "{}", r.headers);
    for head in up.heads() {
        let lower = head.to_ascii_lowercase();
        assert!(!lower.contains("upgrade:") && !lower.contains("http2-settings"), "{head}");
    }
}

/// A 204 or 304 an HTTP/1.1 upstream sends with `Content-Length` reaches HTTP/2 and HTTP/3
/// clients without it (RFC 9110 §8.6; curl refused the stream before), as HTTP/1.1 ones.
#[test]
fn no_content_and_not_modified_lose_their_length() {
    require_tool!("curl", "no_content_and_not_modified_lose_their_length");
    for status in [204, 304] {
        let up = Scripted::start(Script::NoContentWithLength(status));
        let px = proxy(&up_at(up.port, ""), "");
        for p in Proto::ALL {
            let r = curl(&px, p, "/p/empty", &[]);
            assert_eq!(r.status, status, "{p:?}: {}", r.headers);
            assert!(r.header("content-length").is_none(), "{p:?} {status}: {}", r.headers);
        }
        if have_aioquic("no_content_and_not_modified_lose_their_length (HTTP/3)") {
            let v = h3(&[&px.https("/p/empty")]);
            assert_eq!(v["status"], status, "{v}");
            assert!(v["headers"].as_array().unwrap().iter().all(|h| h[0] != "content-length"), "{v}");
        }
    }
}

/// Fields that may not be trailers (RFC 9110 §6.5.1: framing, routing, authentication, ...)
/// in a request's trailer section are not passed to the upstream, whatever protocol the
/// client used; the others are.
#[test]
fn trailers_reach_the_upstream_without_the_fields_that_may_not_be_trailers() {
    let up = Scripted::start(Script::Echo);
    let px = proxy(&up_at(up.port, ""), "");
    let req = b"POST /p/t HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nTrailer: x-checksum\r\n\r\n\
                5\r\nhello\r\n0\r\nx-checksum: abc\r\ncontent-length: 5\r\nhost: evil.example\r\n\
                authorization: Basic eDp5\r\n\r\n";
    assert_eq!(raw_h1(px.plain_port, req), [200]);
    if have_aioquic("trailers_reach_the_upstream_without_the_fields_that_may_not_be_trailers (HTTP/3)") {
        let body = px.scratch("t.body");
        fs::write(&body, b"hello").unwrap();
        let v = h3(&[
            "--method",
            "POST",
            "--data-file",
            body.to_str().unwrap(),
            "--trailer",
            "x-checksum: def",
            "--trailer",
            "content-type: text/html",
            "--trailer",
            "cookie: a=1",
            &px.https("/p/t3"),
        ]);
        assert_eq!(v["status"], 200, "{v}");
    }
    let heads = up.heads();
    for head in &heads {
        let trailers: Vec<&str> = head.lines().filter_map(|l| l.strip_prefix("trailer> ")).collect();
        assert_eq!(trailers.len(), 1, "only x-checksum crosses: {head}");
        assert!(trailers[0].starts_with("x-checksum: "), "{head}");
    }
    assert!(!heads.is_empty());
}

/// An HTTP/2 upstream's 103s reach the client as an HTTP/1.1 upstream's do (the upstream runs
/// on Sluice's own HTTP/2 client, which reports interim responses: hyper's dropped them), over
/// h2c and over TLS.
#[test]
fn interim_responses_from_an_http2_upstream_are_forwarded() {
    require_tool!("curl", "interim_responses_from_an_http2_upstream_are_forwarded");
    let origin = Server::start_with(&Options {
        extra: "[[site.route]]\npath = \"/p/\"\nroot = \"www\"\nearly_hints = [\"</o.css>; rel=preload; as=style\"]\n"
            .into(),
        ..Options::default()
    });
    fs::create_dir_all(origin.www().join("p")).unwrap();
    fs::write(origin.www().join("p/page.html"), "<!doctype html><title>page</title>").unwrap();
    let cert = origin.scratch("data/self-signed-cert.pem");
    for upstream in [
        format!("servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"", origin.plain_port),
        format!(
            "servers = [\"127.0.0.1:{}\"]\nprotocol = \"h2\"\ntls = {{ ca = '{}', sni = \"localhost\" }}",
            origin.tls_port,
            cert.display()
        ),
    ] {
        let px = proxy(&upstream, "");
        let r = curl(&px, Proto::H2Tls, "/p/page.html", &[]);
        assert_eq!(r.status, 200, "{upstream}: {}", r.headers);
        let hint = r.headers.find("HTTP/2 103").unwrap_or_else(|| panic!("{upstream}: no 103: {}", r.headers));
        assert!(hint < r.headers.find("HTTP/2 200").unwrap(), "{}", r.headers);
        assert!(r.headers.contains("link: </o.css>; rel=preload; as=style"), "{}", r.headers);
        // The access log is written every 100 ms.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !px.log().lines().any(|l| l.contains("/p/page.html") && l.contains(" hints=upstream ")) {
            assert!(std::time::Instant::now() < deadline, "{upstream}: no hints=upstream: {}", px.log());
            thread::sleep(Duration::from_millis(50));
        }
    }
}
