//! The JSON access log and the request id: curl over HTTP/1.1 and HTTP/2 through the proxy to
//! a Python origin that echoes the `X-Request-Id` it received.

mod support;

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::{curl, free_port, require_tool, Options, Proto, Server};

/// An origin on `port` answering every GET with the `X-Request-Id` it got, padded with text
/// to 4 KB (so that the proxy compresses it).
fn echo_origin(port: u16) -> support::Kill {
    let script = format!(
        "import http.server\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   protocol_version = 'HTTP/1.1'\n\
         \x20   def do_GET(self):\n\
         \x20       rid = self.headers.get_all('x-request-id') or []\n\
         \x20       body = ('|'.join(rid) + '\\n' + 'padding ' * 500).encode()\n\
         \x20       self.send_response(200)\n\
         \x20       self.send_header('content-type', 'text/plain')\n\
         \x20       self.send_header('content-length', str(len(body)))\n\
         \x20       self.end_headers()\n\
         \x20       self.wfile.write(body)\n\
         \x20   def log_message(self, *a):\n\
         \x20       pass\n\
         http.server.ThreadingHTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    );
    let child = Command::new("python3").arg("-c").arg(script).stderr(Stdio::null()).spawn().expect("python3");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(Instant::now() < deadline, "origin did not start");
        thread::sleep(Duration::from_millis(50));
    }
    support::Kill(child)
}

fn server(origin: u16, trusted: bool) -> Server {
    let trust = if trusted { "[proxy]\ntrusted_proxies = [\"127.0.0.1\"]\n" } else { "" };
    Server::start_with(&Options {
        top: "access_log = \"json\"",
        extra: format!(
            "[[upstream]]\nname = \"echo\"\nservers = [\"127.0.0.1:{origin}\"]\n\
             [[site.route]]\npath = \"/p/\"\nproxy = \"echo\"\n{trust}"
        ),
        ..Options::default()
    })
}

/// The JSON lines of the server's log whose path is `path`, waiting for the log's flush.
fn lines(srv: &Server, path: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found: Vec<serde_json::Value> = srv
            .log()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {e}: {l}")))
            .filter(|v: &serde_json::Value| v["path"] == path)
            .collect();
        if found.len() >= n || Instant::now() > deadline {
            return found;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn first_line(body: &[u8]) -> String {
    String::from_utf8_lossy(body).lines().next().unwrap_or_default().to_owned()
}

#[test]
fn json_lines_carry_the_request_id_upstream_tls_and_compression() {
    const TEST: &str = "json_lines_carry_the_request_id_upstream_tls_and_compression";
    require_tool!("curl", TEST);
    let port = free_port();
    let _origin = echo_origin(port);
    let srv = server(port, true);

    // Made here when the client sent none: the origin and the log see the same one.
    let r = curl(&srv, Proto::H2Tls, "/p/made", &["-H", "accept-encoding: gzip", "--compressed"]);
    assert_eq!(r.status, 200);
    let made = first_line(&r.body);
    assert!(made.len() == 16 && made.bytes().all(|b| b.is_ascii_hexdigit()), "{made:?}");
    // A trusted proxy's id is kept (and only one goes upstream).
    let r = curl(&srv, Proto::H1Tls, "/p/kept", &["-H", "x-request-id: edge-42"]);
    assert_eq!(first_line(&r.body), "edge-42");
    // One that is not an id (over 128 characters) is replaced.
    let long = format!("x-request-id: {}", "a".repeat(200));
    let r = curl(&srv, Proto::H1Tls, "/p/long", &["-H", &long]);
    assert_eq!(first_line(&r.body).len(), 16, "{}", first_line(&r.body));
    // A file: an id in the log too.
    assert_eq!(curl(&srv, Proto::H2Tls, "/hello.txt", &[]).status, 200);

    let l = lines(&srv, "/p/made", 1).pop().expect("a JSON line for /p/made");
    assert_eq!(l["request_id"], made.as_str(), "{l}");
    assert_eq!(l["protocol"], "HTTP/2");
    assert_eq!(l["status"], 200);
    assert_eq!(l["outcome"], "ok");
    assert_eq!(l["upstream"]["name"], "echo", "{l}");
    assert_eq!(l["upstream"]["server"], format!("127.0.0.1:{port}"), "{l}");
    assert!(l["upstream"]["ttfb_ms"].as_f64().is_some_and(|t| t > 0.0), "{l}");
    assert_eq!(l["tls"]["version"], "TLSv1_3", "{l}");
    assert!(l["tls"]["cipher"].as_str().is_some_and(|c| c.starts_with("TLS13_")), "{l}");
    assert_eq!(l["tls"]["alpn"], "h2");
    assert_eq!(l["tls"]["resumed"], false);
    assert_eq!(l["compression"]["codec"], "gzip", "{l}");
    assert!(l["compression"]["ratio"].as_f64().is_some_and(|r| r > 5.0), "{l}");
    assert_eq!(l["bytes_out"], l["compression"]["bytes_after"], "{l}");

    let k = lines(&srv, "/p/kept", 1).pop().expect("a line for /p/kept");
    assert_eq!(k["request_id"], "edge-42");
    assert_eq!(k["protocol"], "HTTP/1.1");
    assert_eq!(k["tls"]["alpn"], "http/1.1");
    assert!(k.get("compression").is_none(), "{k}");
    let f = lines(&srv, "/hello.txt", 1).pop().expect("a line for /hello.txt");
    assert!(f["request_id"].as_str().is_some_and(|id| id.len() == 16), "{f}");
    assert!(f.get("upstream").is_none(), "{f}");

    // Not from a trusted proxy: the client's id does not cross.
    let srv = server(port, false);
    let r = curl(&srv, Proto::H1Plain, "/p/untrusted", &["-H", "x-request-id: spoofed"]);
    let id = first_line(&r.body);
    assert!(id != "spoofed" && id.len() == 16, "{id}");
    let u = lines(&srv, "/p/untrusted", 1).pop().expect("a line");
    assert_eq!(u["request_id"], id.as_str());
    assert!(u.get("tls").is_none(), "cleartext: {u}");
}
