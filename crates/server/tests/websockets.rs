//! WebSockets over HTTP/2 (RFC 8441) and HTTP/3 (RFC 9220): Sluice sends
//! SETTINGS_ENABLE_CONNECT_PROTOCOL, and an extended CONNECT to a proxied route becomes an
//! HTTP/1.1 WebSocket handshake upstream; the stream is the tunnel once the upstream's 101 is
//! in. Clients: Node's `http2` (scripts/ws_h2.js), headless Chromium, aioquic
//! (scripts/ws_h3.py); the upstream: PyPI `websockets`.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::{free_port, require_tool, run, Options, Server};

/// A `websockets` echo server on a free port, killed on drop.
fn echo_server() -> (support::Kill, u16) {
    let port = free_port();
    let script = format!(
        "import websockets.sync.server as s\n\
         def echo(ws):\n    for m in ws:\n        ws.send(m)\n\
         with s.serve(echo, '127.0.0.1', {port}) as srv:\n    srv.serve_forever()\n"
    );
    let child = Command::new("python3").arg("-c").arg(&script).stderr(Stdio::null()).spawn().expect("python3");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(Instant::now() < deadline, "websocket server did not start");
        thread::sleep(Duration::from_millis(50));
    }
    (support::Kill(child), port)
}

fn node_client(srv: &Server, path: &str, count: u32, protocol: &str) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ws_h2.js");
    let out = run(
        Command::new("node").arg(&script).args([&srv.tls_port.to_string(), path, &count.to_string(), protocol]),
        Duration::from_secs(20),
    );
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()))
}

/// A client's result (scripts/ws_h2.js, scripts/ws_h3.py) for 20 messages: the setting was
/// announced, the CONNECT got 200, every message came back in order; the median round trip
/// noted, and the CONNECT in the access log over `proto`.
fn twenty_echoes(srv: &Server, r: &serde_json::Value, proto: &str, test: &str) {
    assert_eq!(r["settings"], true, "{r}");
    assert_eq!(r["status"], 200, "{r}\n{}", srv.log());
    let echoed: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    assert_eq!(r["echoed"], serde_json::json!(echoed), "{r}");
    let mut rtt: Vec<f64> = r["rtt_ms"].as_array().unwrap().iter().filter_map(|v| v.as_f64()).collect();
    rtt.sort_by(f64::total_cmp);
    support::note(&format!("{test}: 20 echoes over one {proto} stream, median round trip {:.2} ms", rtt[10]));
    wait_for_connect(srv, proto);
}

/// Waits for the access log's line of an extended CONNECT over `proto` (`HTTP/2`, `HTTP/3`).
fn wait_for_connect(srv: &Server, proto: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.log().contains(&format!("{proto} CONNECT")) {
        assert!(Instant::now() < deadline, "no access-log line for a {proto} CONNECT:\n{}", srv.log());
        thread::sleep(Duration::from_millis(50));
    }
}

/// Node's client: the setting is there, the CONNECT gets 200, every message comes back; the
/// access log has the CONNECT. A protocol other than websocket gets 501; a route whose
/// upstream answers the handshake with a plain 200 (no switch) gets 502, not a tunnel.
#[test]
fn websockets_ride_the_http2_connection() {
    const TEST: &str = "websockets_ride_the_http2_connection";
    require_tool!("node", TEST);
    if !support::python_has("websockets", TEST) {
        return;
    }
    let (_ws, ws_port) = echo_server();
    // An upstream that answers everything 200: a handshake it does not switch.
    let plain_port = free_port();
    let plain =
        format!("require('http').createServer((q, r) => r.end('not a websocket')).listen({plain_port}, '127.0.0.1');");
    let _plain = support::Kill(Command::new("node").arg("-e").arg(&plain).spawn().expect("node"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::accepts(plain_port) {
        assert!(Instant::now() < deadline, "node did not start");
        thread::sleep(Duration::from_millis(50));
    }
    let extra = format!(
        "[[upstream]]\nname = \"ws\"\nservers = [\"127.0.0.1:{ws_port}\"]\n\
         [[upstream]]\nname = \"plain\"\nservers = [\"127.0.0.1:{plain_port}\"]\n\
         [[site.route]]\npath = \"/ws/\"\nproxy = \"ws\"\n\
         [[site.route]]\npath = \"/plain/\"\nproxy = \"plain\"\n"
    );
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let r = node_client(&srv, "/ws/", 20, "websocket");
    twenty_echoes(&srv, &r, "HTTP/2", TEST);
    let r = node_client(&srv, "/ws/", 1, "webtransport");
    assert_eq!(r["status"], 501, "{r}");
    let r = node_client(&srv, "/plain/", 1, "websocket");
    assert_eq!(r["status"], 502, "{r}\n{}", srv.log());
}

/// Headless Chromium loads a page over HTTP/2 and opens a WebSocket to the same origin: it
/// goes over that connection as an extended CONNECT (the access log shows `HTTP/2 CONNECT`),
/// and the echo arrives.
#[test]
fn chromium_opens_its_websocket_over_http2() {
    const TEST: &str = "chromium_opens_its_websocket_over_http2";
    require_tool!("chromium", TEST);
    if !support::python_has("websockets", TEST) {
        return;
    }
    let (_ws, ws_port) = echo_server();
    let extra = format!("[[upstream]]\nname = \"ws\"\nservers = [\"127.0.0.1:{ws_port}\"]\n[[site.route]]\npath = \"/ws/\"\nproxy = \"ws\"\n");
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    // The page marks itself done when the echo (or an error) arrives; it runs in real time,
    // driven over the DevTools protocol (scripts/speedtest_page.py): with a virtual-time
    // budget, Chromium fast-forwards past an open WebSocket (no request is pending) and often
    // dumped the page before the echo.
    fs::write(
        srv.www().join("ws.html"),
        "<!doctype html><html><body><div id=r>waiting</div><script>\
         const done = (r) => { window.sluiceResults = r; document.body.dataset.done = '1'; };\
         const ws = new WebSocket('wss://' + location.host + '/ws/');\
         ws.onopen = () => ws.send('hello over h2');\
         ws.onmessage = (e) => done({ echo: e.data });\
         ws.onerror = () => done({ error: 'websocket error' });\
         </script></body></html>",
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/speedtest_page.py");
    let out = run(
        Command::new("python3").arg(&script).arg(srv.https("/ws.html")).args(["--timeout", "30"]),
        Duration::from_secs(90),
    );
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()));
    assert_eq!(r["results"]["echo"], "hello over h2", "{r}\n{}", srv.log());
    wait_for_connect(&srv, "HTTP/2");
}

/// aioquic over HTTP/3: the setting is there, the CONNECT gets 200, every message comes back.
#[test]
fn websockets_ride_the_http3_connection() {
    const TEST: &str = "websockets_ride_the_http3_connection";
    if !support::have_aioquic(TEST) || !support::python_has("websockets", TEST) {
        return;
    }
    let (_ws, ws_port) = echo_server();
    let extra = format!("[[upstream]]\nname = \"ws\"\nservers = [\"127.0.0.1:{ws_port}\"]\n[[site.route]]\npath = \"/ws/\"\nproxy = \"ws\"\n");
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ws_h3.py");
    let out = run(
        Command::new("python3").arg(&script).args([&srv.tls_port.to_string(), "/ws/", "20"]),
        Duration::from_secs(30),
    );
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}\n{}", out.stdout, out.stderr, srv.log()));
    twenty_echoes(&srv, &r, "HTTP/3", TEST);
}
