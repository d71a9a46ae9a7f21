//! `sluice get` with several URLs against real servers: connections shared on ORIGIN frames
//! (RFC 8336), on address and certificate without them (RFC 9113 §9.1.1), never for an origin
//! an ORIGIN frame left out, and a request answered 421 retried on a connection of its own
//! (Caddy with `strict_sni_host`, which answers 421 to any coalesced request).
//!
//! Host names a.test, b.test and c.test are pinned with `--resolve`, each to its own loopback
//! address unless a case says otherwise; one certificate covers all three.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{note, require_tool, run, Options, Running, Server, HELLO};

const HOSTS: [&str; 3] = ["a.test", "b.test", "c.test"];

/// A certificate for a.test, b.test and c.test (self-signed, not a CA): (cert, key) paths.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(HOSTS.iter().map(|h| h.to_string()).collect::<Vec<_>>()).unwrap();
    let (cert, key) = (dir.join("abc.pem"), dir.join("abc.key"));
    fs::write(&cert, ck.cert.pem()).unwrap();
    fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// Sluice on every loopback address with the certificate; `origins` is the TOML value of
/// `[[certificate]] origins`, or `None` for no ORIGIN frame.
fn sluice(dir: &Path, origins: Option<&str>) -> (Server, PathBuf) {
    let (cert, key) = certificate(dir);
    let origins = origins.map(|o| format!("origins = {o}\n")).unwrap_or_default();
    let extra = format!("[[certificate]]\ncert = '{}'\nkey = '{}'\n{origins}", cert.display(), key.display());
    (Server::start_with(&Options { extra, listen_any: true, ..Options::default() }), cert)
}

/// One `sluice get` line, parsed.
#[derive(Debug)]
struct Line {
    status: u16,
    bytes: u64,
    connection: u64,
    via: String,
    retried: bool,
}

/// `sluice get` of `/hello.txt` on each host in turn, each pinned to `addrs[i]`.
fn get_all(port: u16, hosts: &[&str], addrs: &[&str], cacert: &Path) -> Vec<Line> {
    get_all_with(&[], port, hosts, addrs, cacert)
}

/// [`get_all`] with more options first (`--http3`).
fn get_all_with(opts: &[&str], port: u16, hosts: &[&str], addrs: &[&str], cacert: &Path) -> Vec<Line> {
    let mut cmd = Command::new(support::sluice_bin());
    cmd.arg("get").args(opts).args(["--json", "--max-time", "20", "--cacert"]).arg(cacert);
    for (h, a) in hosts.iter().zip(addrs) {
        cmd.arg("--resolve").arg(format!("{h}:{port}:{a}"));
    }
    for h in hosts {
        cmd.arg(format!("https://{h}:{port}/hello.txt"));
    }
    let out = run(&mut cmd, Duration::from_secs(30));
    out.expect_success("sluice get");
    out.stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert_eq!(v["http_version"], if opts.contains(&"--http3") { "3" } else { "2" }, "{l}");
            Line {
                status: v["status"].as_u64().unwrap() as u16,
                bytes: v["bytes"].as_u64().unwrap(),
                connection: v["connection"].as_u64().unwrap(),
                via: v["via"].as_str().unwrap().to_owned(),
                retried: v["retried_after_421"].as_bool().unwrap(),
            }
        })
        .collect()
}

fn summary(lines: &[Line]) -> Vec<(u64, &str)> {
    for l in lines {
        assert_eq!((l.status, l.bytes), (200, HELLO.len() as u64), "{l:?}");
    }
    lines.iter().map(|l| (l.connection, l.via.as_str())).collect()
}

/// Distinct client addresses (with port) of the first `requests` requests of `proto`
/// (`HTTP/2`, `HTTP/3`) in the server's access log after line `from`: the connections they came
/// on. The access log is written in the background, so this waits for the lines (five seconds
/// at most).
fn connections(srv: &Server, proto: &str, from: usize, requests: usize) -> usize {
    let marker = format!(" {proto} GET ");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = srv.log();
        let mut peers: Vec<&str> = log
            .lines()
            .skip(from)
            .filter(|l| l.contains(&marker))
            .filter_map(|l| l.split(' ').nth(1))
            .take(requests)
            .collect();
        if peers.len() == requests || Instant::now() > deadline {
            assert_eq!(peers.len(), requests, "requests in the access log:\n{log}");
            peers.sort_unstable();
            peers.dedup();
            return peers.len();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn origin_frames_let_other_hosts_share_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, cert) = sluice(dir.path(), Some("\"from-certificate\""));
    let before = srv.log().lines().count();
    let lines = get_all(srv.tls_port, &HOSTS, &["127.0.0.1", "127.0.0.2", "127.0.0.3"], &cert);
    // b.test and c.test live on other addresses: only the ORIGIN frame allows this.
    assert_eq!(summary(&lines), [(1, "new"), (1, "origin-frame"), (1, "origin-frame")]);
    assert_eq!(connections(&srv, "HTTP/2", before, 3), 1, "{}", srv.log());
}

#[test]
fn http3_origin_frames_let_other_hosts_share_the_connection() {
    // RFC 9412: the ORIGIN frame on the control stream; the same rules as on HTTP/2.
    let dir = tempfile::tempdir().unwrap();
    let (srv, cert) = sluice(dir.path(), Some("\"from-certificate\""));
    let before = srv.log().lines().count();
    let three = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let lines = get_all_with(&["--http3"], srv.tls_port, &HOSTS, &three, &cert);
    assert_eq!(summary(&lines), [(1, "new"), (1, "origin-frame"), (1, "origin-frame")]);
    assert_eq!(connections(&srv, "HTTP/3", before, 3), 1, "{}", srv.log());
    // Without ORIGIN frames, three addresses are three connections.
    let (plain, cert) = sluice(dir.path(), None);
    let lines = get_all_with(&["--http3"], plain.tls_port, &HOSTS, &three, &cert);
    assert_eq!(summary(&lines), [(1, "new"), (2, "new"), (3, "new")]);
}

#[test]
fn without_origin_frames_only_address_and_certificate_decide() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, cert) = sluice(dir.path(), None);
    let lines = get_all(srv.tls_port, &HOSTS, &["127.0.0.1", "127.0.0.2", "127.0.0.3"], &cert);
    assert_eq!(summary(&lines), [(1, "new"), (2, "new"), (3, "new")]);
    // The same names on one address: the certificate covers them, so they share.
    let lines = get_all(srv.tls_port, &HOSTS, &["127.0.0.1"; 3], &cert);
    assert_eq!(summary(&lines), [(1, "new"), (1, "same-address"), (1, "same-address")]);
}

#[test]
fn an_origin_frame_is_the_whole_origin_set() {
    // The certificate covers c.test and it resolves to the same address, but the ORIGIN frame
    // names only a.test and b.test: RFC 8336 §2.4 forbids using the connection for c.test.
    let dir = tempfile::tempdir().unwrap();
    let (srv, cert) = sluice(dir.path(), Some("[\"https://a.test:{tls_port}\", \"https://b.test:{tls_port}\"]"));
    let lines = get_all(srv.tls_port, &HOSTS, &["127.0.0.1"; 3], &cert);
    assert_eq!(summary(&lines), [(1, "new"), (1, "origin-frame"), (2, "new")]);
}

#[test]
fn a_421_on_a_shared_connection_is_retried_on_its_own() {
    require_tool!("caddy", "a_421_on_a_shared_connection_is_retried_on_its_own");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path());
    let www = dir.path().join("www");
    fs::create_dir_all(&www).unwrap();
    fs::write(www.join("hello.txt"), HELLO).unwrap();
    let port = support::free_port();
    let caddyfile = dir.path().join("Caddyfile");
    fs::write(
        &caddyfile,
        format!(
            "{{\n\tadmin off\n\tauto_https disable_redirects\n\tservers {{\n\t\tstrict_sni_host on\n\t\tprotocols h1 h2\n\t}}\n}}\n\
             https://a.test:{port}, https://b.test:{port} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\troot * {}\n\tfile_server\n}}\n",
            cert.display(),
            key.display(),
            www.display()
        ),
    )
    .unwrap();
    let state = dir.path().join("caddy-state");
    let _caddy = Running::spawn(
        Command::new("caddy")
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&caddyfile)
            .env("XDG_DATA_HOME", &state)
            .env("XDG_CONFIG_HOME", &state)
            .env("HOME", &state)
            .stdin(Stdio::null()),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !support::accepts(port) {
        assert!(Instant::now() < deadline, "caddy did not start on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Same address, certificate covering b.test: the client shares a.test's connection, Caddy
    // answers 421, the client asks again on a new connection; b.test keeps that one after.
    let lines = get_all(port, &["a.test", "b.test", "b.test", "a.test"], &["127.0.0.1"; 4], &cert);
    assert_eq!(summary(&lines), [(1, "new"), (2, "new"), (2, "same-origin"), (1, "same-origin")]);
    let retried: Vec<bool> = lines.iter().map(|l| l.retried).collect();
    assert_eq!(retried, [false, true, false, false]);
    note("coalesce: Caddy answered the shared connection's b.test request with 421; retried on connection 2");
}
