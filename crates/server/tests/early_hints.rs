//! 103 Early Hints learned from the upstream, end to end: a Sluice origin whose pages carry a
//! `Link` field or `<link>` elements in their head, a Sluice proxy in front; curl over HTTP/2,
//! aioquic over HTTP/3, headless Chromium.

mod support;

use std::fs;
use std::process::Command;
use std::time::Duration;

use support::{curl, h3client, have_aioquic, require_tool, run, Options, Proto, Server};

const LINKED: &str = "</p/app.css>; rel=preload; as=style";

/// A Sluice origin: `/p/linked.html` answered with a `Link` field, `/p/head.html` with
/// `<link>` elements in its head and no `Link` field.
fn origin() -> Server {
    let srv = Server::start_with(&Options {
        extra: format!(
            "[[site.route]]\npath = \"/p/linked.html\"\nroot = 'www'\n\
             headers = {{ add = {{ \"link\" = \"{LINKED}, </p/x>; rel=canonical\" }} }}\n\
             [[site.route]]\npath = \"/p/b.css\"\nroot = 'www'\n\
             headers = {{ set = {{ \"cache-control\" = \"max-age=3600\" }} }}\n"
        ),
        ..Options::default()
    });
    fs::create_dir_all(srv.www().join("p")).unwrap();
    fs::write(srv.www().join("p/linked.html"), "<!doctype html><p>linked</p>\n").unwrap();
    fs::write(srv.www().join("p/app.css"), "p { color: green }\n").unwrap();
    fs::write(srv.www().join("p/b.css"), "p { color: blue }\n").unwrap();
    write_head_page(&srv, true);
    srv
}

fn write_head_page(srv: &Server, with_link: bool) {
    let link = if with_link { "<link rel=stylesheet href=\"/p/b.css\">" } else { "" };
    let page = format!(
        "<!doctype html><html><head><title>h</title>{link}</head><body><div id=r></div>\
         <script>document.getElementById('r').textContent = JSON.stringify(performance.getEntriesByType('resource')\
         .map(e => [e.name.replace(location.origin, ''), e.initiatorType]));</script></body></html>\n"
    );
    fs::write(srv.www().join("p/head.html"), page).unwrap();
}

fn proxy(origin: &Server, more: &str) -> Server {
    let extra = format!(
        "[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:{}\"]\n{more}\n\
         [[site.route]]\npath = \"/p/\"\nproxy = \"o\"\n",
        origin.plain_port
    );
    Server::start_with(&Options { extra, ..Options::default() })
}

const NAV: [&str; 2] = ["-H", "sec-fetch-mode: navigate"];

fn hints_in(r: &support::Response) -> Vec<String> {
    // curl -D writes every header block; the 103s come before the final one.
    let mut out = Vec::new();
    let mut in_103 = false;
    for l in r.headers.lines() {
        if l.starts_with("HTTP/") {
            in_103 = l.contains(" 103");
        } else if in_103 {
            if let Some(v) = l.strip_prefix("link: ") {
                out.push(v.trim().to_owned());
            }
        }
    }
    out
}

#[test]
fn hints_are_learned_from_link_fields_and_sent_to_later_navigations() {
    require_tool!("curl", "hints_are_learned_from_link_fields_and_sent_to_later_navigations");
    let origin = origin();
    let px = proxy(&origin, "");
    // Nothing learned yet.
    let r = curl(&px, Proto::H2Tls, "/p/linked.html", &NAV);
    assert_eq!(r.status, 200);
    assert!(hints_in(&r).is_empty(), "{}", r.headers);
    // Learned: the preload (not the canonical link), at once, before the final head; the query
    // is ignored.
    let r = curl(&px, Proto::H2Tls, "/p/linked.html?utm=1", &NAV);
    assert_eq!(r.status, 200);
    assert_eq!(hints_in(&r), vec![LINKED], "{}", r.headers);
    assert!(r.headers.find("HTTP/2 103").unwrap() < r.headers.find("HTTP/2 200").unwrap());
    // A 103 carries nothing else of the upstream's response.
    let block = &r.headers[r.headers.find("HTTP/2 103").unwrap()..r.headers.find("HTTP/2 200").unwrap()];
    assert_eq!(block.lines().filter(|l| l.contains(':')).count(), 1, "{block}");
    // Accept: text/html without Sec-Fetch fields is a navigation too; neither `*/*` nor a
    // subresource fetch is.
    assert_eq!(hints_in(&curl(&px, Proto::H2Tls, "/p/linked.html", &["-H", "accept: text/html"])), vec![LINKED]);
    assert!(hints_in(&curl(&px, Proto::H2Tls, "/p/linked.html", &[])).is_empty());
    assert!(hints_in(&curl(&px, Proto::H2Tls, "/p/linked.html", &["-H", "sec-fetch-mode: no-cors"])).is_empty());
    // Never over HTTP/1.1.
    let r = curl(&px, Proto::H1Tls, "/p/linked.html", &NAV);
    assert!(!r.headers.contains(" 103"), "{}", r.headers);
    // Never for another host (the same proxy, reached by another name).
    let other = format!("localhost:{}:127.0.0.1", px.tls_port);
    let out = run(
        Command::new("curl")
            .args(["-sS", "-k", "--http2", "-o", "/dev/null", "-D", "-", "--resolve", &other, "-H", NAV[1]])
            .arg(format!("https://localhost:{}/p/linked.html", px.tls_port)),
        Duration::from_secs(20),
    );
    out.expect_success("curl localhost");
    assert!(out.stdout.contains("HTTP/2 200") && !out.stdout.contains(" 103"), "{}", out.stdout);
    // The access log is written out every 100 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !px.log().lines().any(|l| l.contains("/p/linked.html") && l.contains(" hints=learned ")) {
        assert!(std::time::Instant::now() < deadline, "{}", px.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Turned off per upstream.
    let off = proxy(&origin, "early_hints_learn = false");
    curl(&off, Proto::H2Tls, "/p/linked.html", &NAV);
    assert!(hints_in(&curl(&off, Proto::H2Tls, "/p/linked.html", &NAV)).is_empty());
}

#[test]
fn hints_are_learned_from_the_html_head_and_dropped_when_it_changes() {
    require_tool!("curl", "hints_are_learned_from_the_html_head_and_dropped_when_it_changes");
    let origin = origin();
    let px = proxy(&origin, "");
    curl(&px, Proto::H2Tls, "/p/head.html", &NAV);
    let want = "</p/b.css>; rel=preload; as=style";
    assert_eq!(hints_in(&curl(&px, Proto::H2Tls, "/p/head.html", &NAV)), vec![want]);
    if have_aioquic("hints_are_learned_from_the_html_head_and_dropped_when_it_changes (h3)") {
        let out = run(
            Command::new("python3")
                .arg(h3client())
                .args(["--insecure", "--header", "sec-fetch-mode: navigate"])
                .arg(px.https("/p/head.html")),
            Duration::from_secs(60),
        );
        out.expect_success("h3client.py");
        let v: serde_json::Value = serde_json::from_str(out.stdout.lines().next().unwrap_or_default()).unwrap();
        assert_eq!(v["interim"], serde_json::json!([[103, [[":status", "103"], ["link", want]]]]), "{v}");
    }
    // The page no longer links the stylesheet: the next response unlearns it (after the
    // origin's own small-file cache, 1 s, has let go of the old page).
    write_head_page(&origin, false);
    std::thread::sleep(Duration::from_millis(1200));
    curl(&px, Proto::H2Tls, "/p/head.html", &NAV);
    assert!(hints_in(&curl(&px, Proto::H2Tls, "/p/head.html", &NAV)).is_empty());
}

/// Headless Chromium through the proxy: on a fresh profile's load after the proxy has learned
/// the page, the stylesheet arrives by the 103 (`initiatorType` `early-hints`). The origin
/// (Node's `http`) takes 300 ms to produce the page, as an application would: on loopback an
/// instant answer races the hint. Chromium keeps an early-hints preload in its HTTP cache, so
/// the stylesheet must be cacheable (`max-age`), or the page revalidates it and reports its own
/// fetch.
#[test]
fn chromium_preloads_from_learned_hints() {
    require_tool!("chromium", "chromium_preloads_from_learned_hints");
    require_tool!("openssl", "chromium_preloads_from_learned_hints");
    require_tool!("node", "chromium_preloads_from_learned_hints");
    let port = support::free_port();
    let script = format!(
        "const http = require('http');\n\
         const page = '<!doctype html><html><head><title>h</title><link rel=stylesheet href=\"/p/b.css\"></head>' +\n\
           '<body><div id=r></div><script>document.getElementById(\"r\").textContent = JSON.stringify(' +\n\
           'performance.getEntriesByType(\"resource\").map(e => [e.name.replace(location.origin, \"\"), e.initiatorType]));' +\n\
           '</scr' + 'ipt></body></html>';\n\
         http.createServer((req, res) => {{\n\
           if (req.url.startsWith('/p/b.css')) {{\n\
             res.writeHead(200, {{'content-type': 'text/css', 'cache-control': 'max-age=3600'}});\n\
             return res.end('p {{ color: blue }}');\n\
           }}\n\
           setTimeout(() => {{ res.writeHead(200, {{'content-type': 'text/html'}}); res.end(page); }}, 300);\n\
         }}).listen({port}, '127.0.0.1');\n"
    );
    let mut node = Command::new("node").arg("-e").arg(&script).spawn().expect("node");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !support::accepts(port) {
        assert!(std::time::Instant::now() < deadline, "node did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let extra = format!(
        "[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:{port}\"]\n[[site.route]]\npath = \"/p/\"\nproxy = \"o\"\n"
    );
    let px = Server::start_with(&Options { extra, ..Options::default() });
    let cert = px.scratch("data/self-signed-cert.pem");
    let spki = support::spki_pin(&cert);
    let load = || {
        let profile = tempfile::tempdir().unwrap();
        let out = run(
            Command::new("chromium")
                .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"])
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
                .arg("--dump-dom")
                .arg(px.https("/p/head.html")),
            Duration::from_secs(60),
        );
        out.stdout
    };
    let first = load();
    // Headless Chromium does not act on every 103 it gets (here about half of the loads fetched
    // the stylesheet only after the page, though the 103 had gone out 300 ms before): up to
    // five fresh-profile loads, of which one must have used the hint.
    let mut later = Vec::new();
    for _ in 0..5 {
        later.push(load());
        if later.last().is_some_and(|l| l.contains("[\"/p/b.css\",\"early-hints\"]")) {
            break;
        }
    }
    let _ = node.kill();
    let _ = node.wait();
    assert!(first.contains("[\"/p/b.css\",\"link\"]"), "first load, nothing learned yet:\n{first}");
    assert!(
        later.iter().any(|l| l.contains("[\"/p/b.css\",\"early-hints\"]")),
        "no load used the hint:\n{}\n{}",
        later.join("\n"),
        px.log()
    );
}
