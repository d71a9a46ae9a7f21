//! Content codings of static files (`[compression]`): negotiated from `Accept-Encoding` over
//! HTTP/1.1 and HTTP/2 (curl), stored variants and precompressed siblings, `Vary`, an entity
//! tag per variant, conditional requests and ranges.

mod support;

use std::fs;
use std::io::Read;
use std::process::Command;

use support::{curl, require_tool, Options, Proto, Response, Server};

/// A script of about 300 kB that compresses about as well as a real library.
fn script() -> Vec<u8> {
    let mut s = String::new();
    for i in 0..6000 {
        s.push_str(&format!(
            "function handler_{i}(event, options) {{ if (options.enabled && event.type === 'click') {{ return dispatch({}, event.target); }} }}\n",
            i % 97
        ));
    }
    s.into_bytes()
}

fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "br" => brotli::Decompressor::new(body, 4096).read_to_end(&mut out).expect("brotli"),
        "zstd" => zstd::stream::read::Decoder::new(body).expect("zstd").read_to_end(&mut out).expect("zstd"),
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out).expect("gzip"),
        other => panic!("unexpected coding {other}"),
    };
    out
}

fn get(srv: &Server, proto: Proto, path: &str, accept: &str, more: &[&str]) -> Response {
    let h = format!("accept-encoding: {accept}");
    let mut args = vec!["-H", h.as_str()];
    args.extend_from_slice(more);
    curl(srv, proto, path, &args)
}

fn server() -> Server {
    let srv = Server::start_with(&Options {
        extra: "[[site]]\nhosts = [\"plain.test\"]\n[[site.route]]\npath = \"/\"\nroot = '{www}'\ncompress = false\n"
            .into(),
        ..Options::default()
    });
    let www = srv.www();
    fs::write(www.join("app.js"), script()).unwrap();
    fs::write(www.join("small.css"), "body { color: #333; margin: 0 auto; max-width: 40em; } ".repeat(40)).unwrap();
    fs::write(www.join("tiny.txt"), "short\n").unwrap();
    fs::write(www.join("photo.png"), vec![0x89u8; 4000]).unwrap();
    srv
}

#[test]
fn each_coding_is_negotiated_and_decodes_to_the_file() {
    let srv = server();
    let js = script();
    for proto in [Proto::H1Tls, Proto::H2Tls, Proto::H2c] {
        for (accept, want) in [
            ("gzip, deflate, br, zstd", "br"),
            ("gzip, zstd", "zstd"),
            ("gzip", "gzip"),
            ("br;q=0, gzip;q=0.5, zstd;q=0.4", "gzip"),
            ("x-gzip", "gzip"),
        ] {
            // Twice: the first makes the variant, the second finds it (over HTTP/2, answered
            // from the cache without a handler when the file is small).
            for path in ["/app.js", "/small.css"] {
                let whole = fs::read(srv.www().join(&path[1..])).unwrap();
                let mut tags = Vec::new();
                for _ in 0..2 {
                    let r = get(&srv, proto, path, accept, &[]);
                    assert_eq!(r.status, 200, "{proto:?} {path} {accept}: {}", r.headers);
                    assert_eq!(
                        r.header("content-encoding").as_deref(),
                        Some(want),
                        "{proto:?} {path} {accept}: {}",
                        r.headers
                    );
                    assert_eq!(r.header("vary").as_deref(), Some("accept-encoding"), "{}", r.headers);
                    assert_eq!(r.header("content-length"), Some(r.body.len().to_string()), "{}", r.headers);
                    assert_eq!(decode(want, &r.body), whole, "{proto:?} {path} {accept}");
                    let tag = r.header("etag").unwrap_or_default();
                    assert!(tag.ends_with(&format!("-{want}\"")), "{tag}");
                    tags.push(tag);
                }
                assert_eq!(tags[0], tags[1]);
            }
        }
        let r = get(&srv, proto, "/app.js", "br", &[]);
        assert!(r.body.len() * 5 < js.len(), "brotli: {} of {} bytes", r.body.len(), js.len());
    }
}

#[test]
fn what_is_not_worth_compressing_goes_as_it_is() {
    let srv = server();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        // Compressed already (an image), under the size floor, not accepted, or turned off.
        for (path, accept, host, vary) in [
            ("/photo.png", "br, gzip", None, false),
            ("/tiny.txt", "br, gzip", None, false),
            ("/app.js", "identity", None, true),
            ("/app.js", "br;q=0, zstd;q=0, gzip;q=0", None, true),
            ("/app.js", "br, gzip", Some("host: plain.test"), false),
        ] {
            let more: Vec<&str> = host.iter().flat_map(|h| ["-H", *h]).collect();
            let r = get(&srv, proto, path, accept, &more);
            assert_eq!(r.status, 200, "{proto:?} {path}: {}", r.headers);
            assert_eq!(r.header("content-encoding"), None, "{proto:?} {path} {accept}: {}", r.headers);
            assert_eq!(r.header("vary").is_some(), vary, "{proto:?} {path} {accept} {host:?}: {}", r.headers);
            assert_eq!(r.body, fs::read(srv.www().join(&path[1..])).unwrap());
        }
    }
}

#[test]
fn variants_have_their_own_tags_for_conditional_requests() {
    let srv = server();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let br = get(&srv, proto, "/app.js", "br", &[]);
        let plain = get(&srv, proto, "/app.js", "identity", &[]);
        let (br_tag, plain_tag) = (br.header("etag").unwrap(), plain.header("etag").unwrap());
        assert_ne!(br_tag, plain_tag);
        // The variant's own tag: 304, with Vary.
        let h = format!("if-none-match: {br_tag}");
        let r = get(&srv, proto, "/app.js", "br", &["-H", &h]);
        assert_eq!(r.status, 304, "{}", r.headers);
        assert_eq!(r.header("vary").as_deref(), Some("accept-encoding"), "{}", r.headers);
        assert_eq!(r.header("etag").as_deref(), Some(br_tag.as_str()));
        // The identity's tag does not validate the brotli variant, nor the other way round.
        let h = format!("if-none-match: {plain_tag}");
        assert_eq!(get(&srv, proto, "/app.js", "br", &["-H", &h]).status, 200);
        let h = format!("if-none-match: {br_tag}");
        assert_eq!(get(&srv, proto, "/app.js", "gzip", &["-H", &h]).status, 200);
        // HEAD: the variant's fields, no body.
        let r = get(&srv, proto, "/app.js", "br", &["--head"]);
        assert_eq!(r.header("content-encoding").as_deref(), Some("br"), "{}", r.headers);
        assert_eq!(r.header("content-length"), br.header("content-length"));
    }
}

#[test]
fn ranges_are_ranges_of_the_file_as_it_is() {
    let srv = server();
    let js = script();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let r = get(&srv, proto, "/app.js", "br, gzip", &["-H", "range: bytes=100-199"]);
        assert_eq!(r.status, 206, "{}", r.headers);
        assert_eq!(r.header("content-encoding"), None, "{}", r.headers);
        assert_eq!(r.body, &js[100..200]);
    }
}

#[test]
fn a_precompressed_sibling_is_sent_when_it_is_not_older() {
    require_tool!("gzip", "a_precompressed_sibling_is_sent_when_it_is_not_older");
    let srv = server();
    let www = srv.www();
    let js = script();
    fs::write(www.join("lib.js"), &js).unwrap();
    // gzip -1: bytes Sluice's own gzip (level 9) would not make, so the test tells them apart.
    let made = support::run(
        Command::new("gzip").args(["-1", "-k", "-n"]).arg(www.join("lib.js")),
        std::time::Duration::from_secs(30),
    );
    made.expect_success("gzip -1 -k");
    let sibling = fs::read(www.join("lib.js.gz")).unwrap();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let r = get(&srv, proto, "/lib.js", "gzip", &[]);
        assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"), "{}", r.headers);
        assert_eq!(r.body, sibling, "{proto:?}: the sibling's bytes");
        // Not a file of its own kind: asking for `lib.js.gz` gets the gzip file as it is.
        let r = get(&srv, proto, "/lib.js.gz", "gzip", &[]);
        assert_eq!(r.header("content-encoding"), None, "{}", r.headers);
    }
    // An older sibling is ignored: the file is compressed by Sluice instead.
    fs::write(www.join("old.js"), &js).unwrap();
    fs::write(www.join("old.js.gz"), &sibling).unwrap();
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options().write(true).open(www.join("old.js.gz")).unwrap().set_modified(past).unwrap();
    let r = get(&srv, Proto::H2Tls, "/old.js", "gzip", &[]);
    assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"));
    assert_ne!(r.body, sibling);
    assert_eq!(decode("gzip", &r.body), js);
}

#[test]
fn curl_and_its_own_decoding_agree() {
    // curl's `--compressed` asks for what it can decode and decodes it.
    let srv = server();
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let r = curl(&srv, proto, "/app.js", &["--compressed"]);
        assert_eq!(r.status, 200);
        assert!(r.header("content-encoding").is_some(), "{}", r.headers);
        assert_eq!(r.body, script());
    }
}

/// A Sluice origin that compresses nothing, serving `/p/app.js`, and a Sluice proxying `/p/`
/// to it.
fn proxied() -> (Server, Server) {
    let origin =
        Server::start_with(&Options { extra: "[compression]\nenabled = false\n".into(), ..Options::default() });
    fs::create_dir_all(origin.www().join("p")).unwrap();
    fs::write(origin.www().join("p/app.js"), script()).unwrap();
    let proxy = Server::start_with(&Options {
        extra: format!(
            "[[upstream]]\nname = \"up\"\nservers = [\"127.0.0.1:{}\"]\n[[site.route]]\npath = \"/p/\"\nproxy = \"up\"\n",
            origin.plain_port
        ),
        ..Options::default()
    });
    (origin, proxy)
}

#[test]
fn a_proxied_response_is_compressed_as_it_streams_and_revalidates() {
    let (_origin, px) = proxied();
    let js = script();
    for proto in [Proto::H1Tls, Proto::H2Tls, Proto::H1Plain] {
        for coding in ["br", "zstd", "gzip"] {
            let r = get(&px, proto, "/p/app.js", coding, &[]);
            assert_eq!(r.status, 200, "{proto:?}: {}", r.headers);
            assert_eq!(r.header("content-encoding").as_deref(), Some(coding), "{proto:?}: {}", r.headers);
            assert_eq!(r.header("vary").as_deref(), Some("accept-encoding"), "{}", r.headers);
            assert_eq!(r.header("content-length"), None, "{}", r.headers);
            assert_eq!(decode(coding, &r.body), js, "{proto:?} {coding}");
            // The origin's strong tag, weak and with the coding's name.
            let tag = r.header("etag").unwrap_or_default();
            assert!(tag.starts_with("W/\"") && tag.ends_with(&format!("-{coding}\"")), "{tag}");
            // Revalidating that variant: the origin is asked about its own tag, and the 304 names the variant's.
            let h = format!("if-none-match: {tag}");
            let r = get(&px, proto, "/p/app.js", coding, &["-H", &h]);
            assert_eq!(r.status, 304, "{proto:?} {coding}: {}", r.headers);
            assert_eq!(r.header("etag").as_deref(), Some(tag.as_str()), "{}", r.headers);
        }
        // Not accepted: the origin's bytes and tag as they are, with Vary.
        let r = get(&px, proto, "/p/app.js", "identity", &[]);
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("vary").as_deref(), Some("accept-encoding"), "{}", r.headers);
        assert!(r.header("etag").is_some_and(|t| t.starts_with('"')), "{}", r.headers);
        assert_eq!(r.body, js);
        // A range goes to the origin and comes back as it is.
        let r = get(&px, proto, "/p/app.js", "br", &["-H", "range: bytes=0-99"]);
        assert_eq!((r.status, r.header("content-encoding")), (206, None), "{}", r.headers);
        assert_eq!(r.body, &js[..100]);
    }
}

/// An HTTP/1.1 upstream that answers one request with Server-Sent Events, sending each only
/// when told to.
fn event_source(events: std::sync::mpsc::Receiver<String>) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((conn, _)) = listener.accept() else { return };
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            line.clear();
        }
        let _ = w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        while let Ok(e) = events.recv_timeout(std::time::Duration::from_secs(20)) {
            let _ = w.write_all(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
        }
        let _ = w.write_all(b"0\r\n\r\n");
    });
    port
}

#[test]
fn server_sent_events_are_never_held_back_by_compression() {
    use std::io::Read;
    let (tx, rx) = std::sync::mpsc::channel();
    let port = event_source(rx);
    let px = Server::start_with(&Options {
        extra: format!("[[upstream]]\nname = \"up\"\nservers = [\"127.0.0.1:{port}\"]\n[[site.route]]\npath = \"/events\"\nproxy = \"up\"\n"),
        ..Options::default()
    });
    // curl decodes as it receives (`--compressed --no-buffer`); each event must come out
    // before the next is even sent.
    let mut child = Command::new("curl")
        .args(["-sS", "-k", "--http2", "--compressed", "--no-buffer", "--max-time", "30", "-D", "/dev/stderr"])
        .arg(px.https("/events"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    let mut out = child.stdout.take().unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            let _ = seen_tx.send(String::from_utf8_lossy(&got).into_owned());
        }
    });
    for i in 0..3 {
        let event = format!("data: event {i}\n\n");
        tx.send(event.clone()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match seen_rx.recv_timeout(left) {
                Ok(text) if text.ends_with(&event) => break,
                Ok(_) => {}
                Err(_) => panic!("event {i} not received within 10 s: held back"),
            }
        }
    }
    drop(tx);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(err.to_ascii_lowercase().contains("content-encoding: br"), "compressed: {err}");
}

#[test]
fn http3_gets_the_same_variants() {
    if !support::have_aioquic("http3_gets_the_same_variants") {
        return;
    }
    let srv = server();
    let (_origin, px) = proxied();
    let js = script();
    for (s, path) in [(&srv, "/app.js"), (&srv, "/small.css"), (&px, "/p/app.js")] {
        let whole = if path == "/small.css" { fs::read(srv.www().join("small.css")).unwrap() } else { js.clone() };
        let out_file = s.scratch("h3.body");
        let url = s.https(path);
        // Twice on one connection, one after the other: the second finds the variant made.
        let out = support::run(
            Command::new("python3")
                .arg(support::h3client())
                .args(["--insecure", "--serial", "--header", "accept-encoding: gzip, br"])
                .arg(&url)
                .arg(&url),
            std::time::Duration::from_secs(60),
        );
        out.expect_success("h3client.py");
        for line in out.stdout.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let headers = v["headers"].as_array().unwrap();
            let field = |n: &str| headers.iter().find(|h| h[0] == n).and_then(|h| h[1].as_str()).map(str::to_owned);
            assert_eq!(field("content-encoding").as_deref(), Some("br"), "{path}: {line}");
            assert_eq!(field("vary").as_deref(), Some("accept-encoding"), "{path}: {line}");
        }
        let single = support::run(
            Command::new("python3")
                .arg(support::h3client())
                .args(["--insecure", "--header", "accept-encoding: br", "--out"])
                .arg(&out_file)
                .arg(&url),
            std::time::Duration::from_secs(60),
        );
        single.expect_success("h3client.py --out");
        assert_eq!(decode("br", &fs::read(&out_file).unwrap()), whole, "{path}");
    }
}

/// Chromium (headless) loads a page whose scripts come compressed, one stored (a static file)
/// and one compressed as it streams (proxied from a Node origin that sends it as it is): both
/// decode and run, and the resource timing shows fewer bytes on the wire than decoded.
#[test]
fn chromium_decodes_and_runs_compressed_scripts() {
    const TEST: &str = "chromium_decodes_and_runs_compressed_scripts";
    require_tool!("chromium", TEST);
    require_tool!("openssl", TEST);
    require_tool!("node", TEST);
    let mut js = String::from("window.PARTS = window.PARTS || {};\n");
    let body = |name: &str| {
        let mut s = format!("PARTS['{name}'] = [];\n");
        for i in 0..3000 {
            s.push_str(&format!("PARTS['{name}'].push('line {i} of {name}: the quick brown fox jumps');\n"));
        }
        s
    };
    js.push_str(&body("stored"));
    let origin_js = format!("window.PARTS = window.PARTS || {{}};\n{}", body("streamed"));
    let port = support::free_port();
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("streamed.js"), &origin_js).unwrap();
    let node_script = format!(
        "const http = require('http'); const fs = require('fs');\n\
         const js = fs.readFileSync('{}');\n\
         http.createServer((req, res) => {{\n\
           res.writeHead(200, {{'content-type': 'text/javascript'}});\n\
           res.end(js);\n\
         }}).listen({port}, '127.0.0.1');\n",
        dir.path().join("streamed.js").display()
    );
    let mut node = Command::new("node").arg("-e").arg(&node_script).spawn().expect("node");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "node did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let extra = format!(
        "[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:{port}\"]\n[[site.route]]\npath = \"/p/\"\nproxy = \"o\"\n"
    );
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    fs::write(srv.www().join("stored.js"), &js).unwrap();
    fs::write(
        srv.www().join("page.html"),
        "<!doctype html><html><head><title>c</title></head><body><div id=r></div>\
         <script src=\"/stored.js\"></script><script src=\"/p/streamed.js\"></script>\
         <script>document.getElementById('r').textContent = JSON.stringify(\
         performance.getEntriesByType('resource').map(e => [e.name.replace(location.origin, ''), \
         e.encodedBodySize, e.decodedBodySize, (PARTS[e.name.includes('/p/') ? 'streamed' : 'stored'] || []).length]));\
         </script></body></html>",
    )
    .unwrap();
    let cert = srv.scratch("data/self-signed-cert.pem");
    let spki = support::spki_pin(&cert);
    let profile = tempfile::tempdir().unwrap();
    let out = support::run(
        Command::new("chromium")
            .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
            .arg("--dump-dom")
            .arg(srv.https("/page.html")),
        std::time::Duration::from_secs(60),
    );
    let _ = node.kill();
    let _ = node.wait();
    let dom = out.stdout;
    let start = dom.find("<div id=\"r\">").map(|i| i + "<div id=\"r\">".len()).unwrap_or_else(|| panic!("{dom}"));
    let end = dom[start..].find("</div>").unwrap() + start;
    let entries: serde_json::Value =
        serde_json::from_str(&dom[start..end]).unwrap_or_else(|e| panic!("{e}: {}\n{}", &dom[start..end], srv.log()));
    let entries = entries.as_array().unwrap();
    for (path, len) in [("/stored.js", js.len()), ("/p/streamed.js", origin_js.len())] {
        let e = entries.iter().find(|e| e[0] == path).unwrap_or_else(|| panic!("{path} not loaded: {entries:?}"));
        assert_eq!(e[3], 3000, "{path} ran whole: {e}");
        assert_eq!(e[2].as_u64(), Some(len as u64), "{path} decoded to its size: {e}");
        let wire = e[1].as_u64().unwrap();
        assert!(wire > 0 && wire * 4 < len as u64, "{path} came compressed ({wire} of {len} bytes): {e}");
    }
}
