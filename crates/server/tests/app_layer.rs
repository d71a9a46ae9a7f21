//! The application layer end to end: trailers both ways (RFC 9530 digests on the speed test's
//! upload), interim 103 responses from a route's `early_hints`, routes and their header rules,
//! with nghttp and curl over HTTP/2 and HTTP/1.1 and aioquic (scripts/h3client.py) over HTTP/3.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use support::{curl, h3client, have_aioquic, require_tool, run, Options, Proto, Server};

const HINT: &str = "</style.css>; rel=preload; as=style";

fn server() -> Server {
    let extra = format!(
        "[[site.route]]\npath = \"/hinted/\"\nroot = 'www'\nearly_hints = [\"{HINT}\"]\n\
         headers = {{ set = {{ \"x-route\" = \"hinted\" }}, add = {{ \"cache-control\" = \"max-age=60\" }}, remove = [\"alt-svc\", \"etag\"] }}\n"
    );
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    fs::create_dir_all(srv.www().join("hinted")).unwrap();
    fs::write(srv.www().join("hinted/page.html"), "<p>hinted</p>\n").unwrap();
    srv
}

fn digest(data: &[u8]) -> String {
    format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(data)))
}

fn upload(srv: &Server) -> (PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let path = srv.scratch("up.bin");
    fs::write(&path, &data).unwrap();
    (path, data)
}

/// nghttp's verbose output of one request: frames and fields as it logs them, body on stdout.
fn nghttp(srv: &Server, args: &[&str], path: &str) -> support::Output {
    run(Command::new("nghttp").args(["-v", "-y"]).args(args).arg(srv.https(path)), Duration::from_secs(30))
}

#[test]
fn trailers_both_ways_over_http2() {
    require_tool!("nghttp", "trailers_both_ways_over_http2");
    let srv = server();
    let (file, data) = upload(&srv);
    let good = format!("content-digest: {}", digest(&data));
    let out = nghttp(
        &srv,
        &["-d", file.to_str().unwrap(), "--trailer", &good, "-H", "want-content-digest: sha-256=1"],
        "/__up",
    );
    out.expect_success("nghttp");
    // The request trailer was checked against the body received.
    assert!(out.stdout.contains("\"content_digest\":\"verified\""), "{}", out.stdout);
    assert!(out.stdout.contains("\"bytes\":300000"), "{}", out.stdout);
    // The response carries its own digest as a trailer: a HEADERS frame with END_STREAM after
    // the DATA, whose value is the digest of the body nghttp printed.
    // nghttp writes the body to stdout between its frame log lines: the JSON object.
    let start = out.stdout.find("{\"bytes\"").expect("JSON body");
    let body = &out.stdout[start..=start + out.stdout[start..].find('}').expect("end of the JSON body")];
    let want = format!("content-digest: {}", digest(body.as_bytes()));
    let trailer_at = out.stdout.rfind(&want).unwrap_or_else(|| panic!("no `{want}` trailer:\n{}", out.stdout));
    let data_at = out.stdout.find("recv DATA frame").expect("a DATA frame");
    assert!(trailer_at > data_at, "the digest came before the body:\n{}", out.stdout);

    // A digest that does not match the body is refused.
    let bad = format!("content-digest: {}", digest(b"something else"));
    let out = nghttp(&srv, &["-d", file.to_str().unwrap(), "--trailer", &bad], "/__up");
    assert!(out.stdout.contains(":status: 400") || out.stdout.contains("does not match"), "{}", out.stdout);
    // Without Want-Content-Digest, no trailer.
    let out = nghttp(&srv, &["-d", file.to_str().unwrap()], "/__up");
    assert!(!out.stdout.contains("content-digest: sha-256"), "{}", out.stdout);

    // HTTP/1.1: a response with trailers goes out chunked, its body whole.
    if support::have("curl") {
        let at = format!("@{}", file.display());
        let extra = ["--data-binary", at.as_str(), "-H", "want-content-digest: sha-256=1", "-H", "TE: trailers"];
        let r = curl(&srv, Proto::H1Tls, "/__up", &extra);
        assert_eq!(r.status, 200, "{}", r.headers);
        assert!(r.header("content-length").is_none(), "{}", r.headers);
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.starts_with("{\"bytes\":300000") && body.ends_with('}'), "{body}");
    }
}

#[test]
fn early_hints_go_out_on_http2_before_the_final_response_and_not_on_http1() {
    require_tool!("curl", "early_hints_go_out_on_http2_before_the_final_response_and_not_on_http1");
    let srv = server();
    // curl's header dump holds every response head it received, interim ones first.
    let r = curl(&srv, Proto::H2Tls, "/hinted/page.html", &[]);
    assert_eq!(r.status, 200);
    let hint = r.headers.find("HTTP/2 103").unwrap_or_else(|| panic!("no 103:\n{}", r.headers));
    let link = r.headers.find(&format!("link: {HINT}")).expect("the 103's link");
    let last = r.headers.find("HTTP/2 200").expect("the final response");
    assert!(hint < link && link < last, "{}", r.headers);
    // Cleartext h2 too; HTTP/1.1 gets none (hyper sends no 103; browsers ignore it there).
    let r = curl(&srv, Proto::H2c, "/hinted/page.html", &[]);
    assert!(r.headers.contains("HTTP/2 103"), "{}", r.headers);
    for proto in [Proto::H1Tls, Proto::H1Plain] {
        let r = curl(&srv, proto, "/hinted/page.html", &[]);
        assert_eq!(r.status, 200);
        assert!(!r.headers.contains(" 103"), "{proto:?}:\n{}", r.headers);
    }
    // Routes without hints send none.
    let r = curl(&srv, Proto::H2Tls, "/hello.txt", &[]);
    assert!(!r.headers.contains(" 103"), "{}", r.headers);
}

#[test]
fn routes_apply_their_header_rules_on_every_protocol() {
    require_tool!("curl", "routes_apply_their_header_rules_on_every_protocol");
    let srv = server();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/hinted/page.html", &[]);
        assert_eq!(r.status, 200, "{proto:?}");
        assert_eq!(r.body, b"<p>hinted</p>\n", "{proto:?}");
        assert_eq!(r.header("x-route").as_deref(), Some("hinted"), "{proto:?}\n{}", r.headers);
        assert_eq!(r.header("cache-control").as_deref(), Some("max-age=60"), "{proto:?}");
        assert!(r.header("alt-svc").is_none() && r.header("etag").is_none(), "{proto:?}\n{}", r.headers);
        // The site's own route keeps the defaults.
        let r = curl(&srv, proto, "/hello.txt", &[]);
        assert!(r.header("x-route").is_none() && r.header("etag").is_some(), "{proto:?}\n{}", r.headers);
    }
}

fn h3(args: &[&str]) -> serde_json::Value {
    let out = run(Command::new("python3").arg(h3client()).arg("--insecure").args(args), Duration::from_secs(60));
    out.expect_success("h3client.py");
    serde_json::from_str(out.stdout.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

#[test]
fn trailers_and_early_hints_over_http3() {
    if !have_aioquic("trailers_and_early_hints_over_http3") {
        return;
    }
    let srv = server();
    let (file, data) = upload(&srv);
    let good = format!("content-digest: {}", digest(&data));
    let r = h3(&[
        "--method",
        "POST",
        "--data-file",
        file.to_str().unwrap(),
        "--header",
        "trailer: content-digest",
        "--header",
        "want-content-digest: sha-256=1",
        "--trailer",
        &good,
        &srv.https("/__up"),
    ]);
    assert_eq!(r["status"], 200, "{r}");
    let body = r["body"].as_str().expect("body");
    assert!(body.contains("\"content_digest\":\"verified\""), "{r}");
    assert_eq!(r["trailers"], serde_json::json!([["content-digest", digest(body.as_bytes())]]), "{r}");
    // An unannounced digest trailer cannot be checked: refused, not ignored.
    let r = h3(&["--method", "POST", "--data-file", file.to_str().unwrap(), "--trailer", &good, &srv.https("/__up")]);
    assert_eq!(r["status"], 400, "{r}");

    let r = h3(&[&srv.https("/hinted/page.html")]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["interim"], serde_json::json!([[103, [[":status", "103"], ["link", HINT]]]]), "{r}");
    assert_eq!(r["body"], "<p>hinted</p>\n");
}
