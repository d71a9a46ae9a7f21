//! End-to-end tests: the `sluice` binary against real clients (curl, nghttp, h2load).
//!
//! Each test starts its own server on free loopback ports (see `support`). A test whose
//! client tool is missing prints `SKIP …` and passes; `scripts/setup.sh` installs the tools.

mod support;

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::{curl, require_tool, run, Options, Proto, Running, Server, DATA_LEN, HELLO, SECRET};

#[test]
fn static_file_over_every_protocol() {
    require_tool!("curl", "static_file_over_every_protocol");
    let srv = Server::start();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/hello.txt", &[]);
        assert_eq!(r.status, 200, "{proto:?} GET /hello.txt");
        assert_eq!(r.version, proto.version(), "{proto:?} negotiated the wrong protocol");
        assert_eq!(r.body, HELLO, "{proto:?} body of /hello.txt");

        let r = curl(&srv, proto, "/data.bin", &[]);
        assert_eq!(r.status, 200, "{proto:?} GET /data.bin");
        assert!(r.body == support::data_bin(), "{proto:?} body of /data.bin differs ({} bytes)", r.body.len());

        let r = curl(&srv, proto, "/", &[]);
        assert_eq!(r.status, 200, "{proto:?} GET /");
        assert_eq!(r.body, fs::read(srv.www().join("index.html")).expect("index"), "{proto:?} / is not index.html");

        let r = curl(&srv, proto, "/no-such-file.txt", &[]);
        assert_eq!(r.status, 404, "{proto:?} GET of a missing file");
    }
}

#[test]
fn head_has_headers_and_no_body() {
    require_tool!("curl", "head_has_headers_and_no_body");
    let srv = Server::start();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/hello.txt", &["--head"]);
        assert_eq!(r.status, 200, "{proto:?} HEAD /hello.txt");
        assert_eq!(
            r.header("content-length"),
            Some(HELLO.len().to_string()),
            "{proto:?} HEAD content-length\n{}",
            r.headers
        );
        assert_eq!(r.size, 0, "{proto:?} HEAD returned a body");
    }
}

#[test]
fn range_request_gives_206_and_the_bytes() {
    require_tool!("curl", "range_request_gives_206_and_the_bytes");
    let srv = Server::start();
    let data = support::data_bin();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/data.bin", &["-r", "1000-1999"]);
        assert_eq!(r.status, 206, "{proto:?} range request");
        assert_eq!(r.body, &data[1000..2000], "{proto:?} range body");
        assert_eq!(
            r.header("content-range").as_deref(),
            Some(&*format!("bytes 1000-1999/{DATA_LEN}")),
            "{proto:?}\n{}",
            r.headers
        );

        // A suffix range: the last 10 bytes.
        let r = curl(&srv, proto, "/data.bin", &["-r", "-10"]);
        assert_eq!(r.status, 206, "{proto:?} suffix range");
        assert_eq!(r.body, &data[DATA_LEN - 10..], "{proto:?} suffix range body");
    }
}

#[test]
fn if_none_match_gives_304() {
    require_tool!("curl", "if_none_match_gives_304");
    let srv = Server::start();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/hello.txt", &[]);
        assert_eq!(r.status, 200);
        let etag = r.header("etag").unwrap_or_else(|| panic!("{proto:?}: no ETag in\n{}", r.headers));
        let r = curl(&srv, proto, "/hello.txt", &["-H", &format!("If-None-Match: {etag}")]);
        assert_eq!(r.status, 304, "{proto:?} If-None-Match: {etag}");
        assert!(r.body.is_empty(), "{proto:?} 304 with a body");

        let r = curl(&srv, proto, "/hello.txt", &["-H", "If-None-Match: \"something-else\""]);
        assert_eq!(r.status, 200, "{proto:?} a different ETag must give the file");
    }
}

#[test]
fn a_cached_file_asked_again_on_one_h2_connection_gets_the_same_answer() {
    require_tool!("curl", "a_cached_file_asked_again_on_one_h2_connection_gets_the_same_answer");
    let srv = Server::start();
    // The first answer comes from the file handler; on the same connection the next ones are
    // made from the request head (`respond::answer_inline`). GET and HEAD over TLS h2 (curl
    // 7.88 fails a reused `--http2-prior-knowledge` connection itself: curl/curl#10634).
    for proto in [Proto::H2Tls] {
        for head in [false, true] {
            let url = proto.url(&srv, "/hello.txt");
            let out = run(
                Command::new("curl")
                    .args(["-sS", "-k", "--noproxy", "*", "--max-time", "50", proto.flag()])
                    // The heads on standard output: `-I` writes them there; for GET, `-D -`
                    // does, with one `-o` per URL (curl pairs them in order) for the bodies.
                    .args(if head {
                        &["-I"][..]
                    } else {
                        &["-D", "-", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"][..]
                    })
                    .args([&url, &url, &url]),
                Duration::from_secs(60),
            );
            out.expect_success("curl, three requests on one connection");
            let blocks: Vec<&str> = out.stdout.split("\r\n\r\n").map(str::trim).filter(|b| !b.is_empty()).collect();
            assert_eq!(blocks.len(), 3, "{proto:?} head={head}:\n{}", out.stdout);
            assert!(blocks[0].starts_with("HTTP/2 200"), "{proto:?} head={head}:\n{}", blocks[0]);
            assert!(blocks[0].contains(&format!("content-length: {}", HELLO.len())), "{}", blocks[0]);
            for b in &blocks[1..] {
                assert_eq!(b, &blocks[0], "{proto:?} head={head}: a later answer differs");
            }
        }
        // And the body, three times.
        let url = proto.url(&srv, "/hello.txt");
        let out = run(
            Command::new("curl")
                .args(["-sS", "-k", "--noproxy", "*", "--max-time", "50", proto.flag()])
                .args([&url, &url, &url]),
            Duration::from_secs(60),
        );
        out.expect_success("curl, three bodies on one connection");
        assert_eq!(out.stdout.as_bytes(), HELLO.repeat(3), "{proto:?}");
    }
    // Each request has its access-log line (the log is written out every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = srv.log();
        let lines =
            log.lines().filter(|l| l.contains(" HTTP/2 ") && l.contains("/hello.txt") && l.ends_with(" ok")).count();
        if lines >= 9 {
            break;
        }
        assert!(Instant::now() < deadline, "{lines} access-log lines for 9 requests:\n{log}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn path_traversal_is_refused() {
    require_tool!("curl", "path_traversal_is_refused");
    let srv = Server::start();
    let paths = [
        "/../etc/passwd",
        "/../../../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/../secret.txt",
        "/sub/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/..%5csecret.txt",
        "/sub/..%2f..%2fsecret.txt",
    ];
    for proto in Proto::ALL {
        for path in paths {
            let r = curl(&srv, proto, path, &["--path-as-is"]);
            let body = String::from_utf8_lossy(&r.body);
            assert_ne!(r.status, 200, "{proto:?} GET {path} answered 200 with\n{body}");
            assert!(
                !body.contains("root:") && !body.contains(SECRET),
                "{proto:?} GET {path} leaked a file outside the root:\n{body}"
            );
        }
    }
}

/// Plain HTTP sent to the TLS listener gets a 400 that says to use https (as nginx answers),
/// not a TLS alert; the listener goes on serving TLS.
#[test]
fn plain_http_on_the_tls_port_is_told_to_use_https() {
    require_tool!("curl", "plain_http_on_the_tls_port_is_told_to_use_https");
    let srv = Server::start();
    let out = support::run(
        std::process::Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", "--max-time", "10"])
            .arg(format!("http://127.0.0.1:{}/", srv.tls_port)),
        std::time::Duration::from_secs(20),
    );
    assert!(out.stdout.ends_with("\n400"), "{}", out.stdout);
    assert!(out.stdout.contains("use https://"), "{}", out.stdout);
    assert_eq!(curl(&srv, Proto::H2Tls, "/", &[]).status, 200);
    assert!(!srv.log().contains("panicked"), "{}", srv.log());
}

#[test]
fn speedtest_download_has_the_asked_size() {
    require_tool!("curl", "speedtest_download_has_the_asked_size");
    let srv = Server::start();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/__down?bytes=1000000", &[]);
        assert_eq!(r.status, 200, "{proto:?} /__down");
        assert_eq!(r.version, proto.version());
        assert_eq!(r.body.len(), 1_000_000, "{proto:?} /__down?bytes=1000000 size");
        assert!(r.body.iter().all(|&b| b == 0), "{proto:?} /__down sent non-zero bytes");

        let r = curl(&srv, proto, "/__down?bytes=0", &[]);
        assert_eq!((r.status, r.body.len()), (200, 0), "{proto:?} /__down?bytes=0");
    }
}

#[test]
fn speedtest_ping_answers_204() {
    require_tool!("curl", "speedtest_ping_answers_204");
    let srv = Server::start();
    for proto in Proto::ALL {
        let r = curl(&srv, proto, "/__ping", &[]);
        assert_eq!(r.status, 204, "{proto:?} /__ping");
        assert!(r.body.is_empty());
    }
}

#[test]
fn speedtest_upload_counts_10_mb() {
    require_tool!("curl", "speedtest_upload_counts_10_mb");
    let srv = Server::start();
    let upload = srv.scratch("upload.bin");
    fs::write(&upload, vec![0x5a_u8; 10_000_000]).expect("write upload file");
    let data = format!("@{}", upload.display());
    for proto in Proto::ALL {
        // `Expect:` off: curl would otherwise wait for 100 Continue on HTTP/1.1 only.
        let r = curl(
            &srv,
            proto,
            "/__up",
            &["--data-binary", &data, "-H", "Content-Type: application/octet-stream", "-H", "Expect:"],
        );
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 200, "{proto:?} POST /__up: {body}");
        assert_eq!(r.version, proto.version());
        assert_eq!(support::json_u64(&body, "bytes"), Some(10_000_000), "{proto:?} POST /__up answered {body}");
        assert!(body.contains("\"seconds\"") && body.contains("\"mbps\""), "{proto:?} POST /__up answered {body}");
    }
}

#[test]
fn http1_chunked_upload_with_expect_100_continue() {
    require_tool!("curl", "http1_chunked_upload_with_expect_100_continue");
    let srv = Server::start();
    let upload = srv.scratch("chunked.bin");
    fs::write(&upload, vec![0x33_u8; 3_000_000]).expect("write upload file");
    let data = format!("@{}", upload.display());
    for proto in [Proto::H1Tls, Proto::H1Plain] {
        // A chunked body behind `Expect: 100-continue`: the server must send 100 Continue (or
        // curl waits a second and sends anyway; either way the count must be exact) and decode
        // the chunked framing.
        let r = curl(
            &srv,
            proto,
            "/__up",
            &["--data-binary", &data, "-H", "Transfer-Encoding: chunked", "-H", "Expect: 100-continue", "-v"],
        );
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 200, "{proto:?} chunked POST /__up: {body}");
        assert_eq!(support::json_u64(&body, "bytes"), Some(3_000_000), "{proto:?} answered {body}");
    }
}

#[test]
fn nghttp_receives_settings_and_200() {
    require_tool!("nghttp", "nghttp_receives_settings_and_200");
    let srv = Server::start();
    let out = run(Command::new("nghttp").args(["-nv", &srv.https("/hello.txt")]), Duration::from_secs(30));
    out.expect_success("nghttp -nv");
    assert!(out.stdout.contains("recv SETTINGS frame"), "no SETTINGS from the server:\n{}", out.stdout);
    assert!(out.stdout.contains(":status: 200"), "no :status: 200:\n{}", out.stdout);
}

/// Parses h2load's `requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, …`.
fn h2load_counts(stdout: &str) -> Option<(u64, u64)> {
    let line = stdout.lines().find(|l| l.trim_start().starts_with("requests:"))?;
    let field = |name: &str| {
        line.split(',').find_map(|part| {
            let part = part.trim().trim_start_matches("requests:").trim();
            part.strip_suffix(name).and_then(|n| n.trim().parse::<u64>().ok())
        })
    };
    Some((field("succeeded")?, field("failed")?))
}

#[test]
fn h2load_2000_requests_all_succeed() {
    require_tool!("h2load", "h2load_2000_requests_all_succeed");
    let srv = Server::start();
    let out = run(
        Command::new("h2load").args(["-n", "2000", "-c", "10", "-m", "10", &srv.https("/hello.txt")]),
        Duration::from_secs(120),
    );
    out.expect_success("h2load");
    assert!(out.stdout.contains("Application protocol: h2"), "h2load did not negotiate h2:\n{}", out.stdout);
    let counts = h2load_counts(&out.stdout);
    assert_eq!(counts, Some((2000, 0)), "h2load (succeeded, failed):\n{}", out.stdout);
    assert!(out.stdout.contains("2000 2xx"), "not all responses were 2xx:\n{}", out.stdout);
}

#[test]
fn h2load_parser_reads_its_summary() {
    let sample = "finished in 1.02s, 1960.78 req/s, 123KB/s\n\
                  requests: 2000 total, 2000 started, 2000 done, 1990 succeeded, 10 failed, 10 errored, 0 timeout\n";
    assert_eq!(h2load_counts(sample), Some((1990, 10)));
    assert_eq!(support::json_u64("{\"bytes\": 10000000,\"seconds\":0.1}", "bytes"), Some(10_000_000));
}

/// A 50 MB download at 20 MiB/s is in flight when SIGTERM arrives: it completes, new
/// connections are refused, and the server exits 0 within the drain timeout.
fn graceful_shutdown(proto: Proto, test: &str) {
    const SIZE: u64 = 50_000_000;
    const DRAIN_SECS: u64 = 10;
    let mut srv = Server::start_with(&Options { drain_secs: DRAIN_SECS, ..Options::default() });
    let out_file = srv.scratch("down.bin");
    let url = proto.url(&srv, &format!("/__down?bytes={SIZE}"));
    let mut download = Running::spawn(
        Command::new("curl")
            .args(["-sS", "-k", "--noproxy", "*", "--max-time", "60", "--limit-rate", "20M", proto.flag()])
            .arg("-o")
            .arg(&out_file)
            .args(["-w", "%{http_code} %{http_version} %{size_download}"])
            .arg(&url),
    );

    support::wait_until_flowing(&mut download, &out_file, test);
    // Half the body still to come: at 20 MiB/s over a second of the download outlasts SIGTERM.
    assert!(support::file_len(&out_file) < SIZE / 2, "{test}: download too fast for the test to mean anything");
    let sigterm_at = Instant::now();
    srv.terminate();

    // New connections are refused soon after SIGTERM (the listeners are closed).
    let refused_by = Instant::now() + Duration::from_secs(3);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, srv.tls_port));
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            _ if Instant::now() >= refused_by => {
                panic!("{test}: new connections still accepted 3 s after SIGTERM")
            }
            _ => thread::sleep(Duration::from_millis(50)),
        }
    }
    assert!(!support::accepts(srv.plain_port), "{test}: cleartext listener still accepts after SIGTERM");
    let out = download.finish(Duration::from_secs(40));
    out.expect_success(&format!("{test}: curl of the in-flight download"));
    let expected = format!("200 {} {SIZE}", proto.version());
    assert_eq!(out.stdout.trim(), expected, "{test}: in-flight download (code, version, size)");
    assert_eq!(support::file_len(&out_file), SIZE, "{test}: downloaded file size");

    srv.expect_clean_exit(sigterm_at, DRAIN_SECS, test);
}

#[test]
fn graceful_shutdown_finishes_h2_download() {
    require_tool!("curl", "graceful_shutdown_finishes_h2_download");
    graceful_shutdown(Proto::H2Tls, "graceful_shutdown_finishes_h2_download");
}

#[test]
fn graceful_shutdown_finishes_h1_download() {
    require_tool!("curl", "graceful_shutdown_finishes_h1_download");
    graceful_shutdown(Proto::H1Tls, "graceful_shutdown_finishes_h1_download");
}

#[test]
fn startup_prints_addresses_and_fingerprint() {
    let srv = Server::start();
    // The banner may trail the moment the sockets accept by a little.
    let deadline = Instant::now() + Duration::from_secs(3);
    let ok = |log: &str| {
        log.contains(&srv.tls_port.to_string()) && log.contains(&srv.plain_port.to_string()) && has_fingerprint(log)
    };
    while !ok(&srv.log()) {
        assert!(Instant::now() < deadline, "start-up output lacks the ports or a SHA-256 fingerprint:\n{}", srv.log());
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `text` holds a SHA-256 fingerprint: 64 hex digits, optionally in `:`-separated pairs.
fn has_fingerprint(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == ':')).any(|word| {
        word.chars().filter(char::is_ascii_hexdigit).count() == 64 && word.split(':').all(|p| !p.is_empty())
    })
}

#[test]
fn fingerprint_shapes() {
    let hex = "ab".repeat(32);
    assert!(has_fingerprint(&format!("SHA-256 fingerprint: {hex}\n")));
    assert!(has_fingerprint(&format!("sha256={}", vec!["AB"; 32].join(":"))));
    assert!(!has_fingerprint("listening on 127.0.0.1:8443"));
}

/// `sluice check --config FILE` with `text` as FILE.
fn check(dir: &std::path::Path, name: &str, text: &str) -> support::Output {
    let path = dir.join(name);
    fs::write(&path, text).expect("write config");
    run(Command::new(support::sluice_bin()).arg("check").arg("--config").arg(&path), Duration::from_secs(30))
}

#[test]
fn check_reports_bad_config_with_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        ("unknown-key.toml", "access_log = true\n\n[speedtest]\nenabld = true\n", 4),
        ("bad-type.toml", "[limits]\nmax_concurrent_streams = \"many\"\n", 2),
        ("bad-addr.toml", "[[listener]]\ntls = false\naddr = \"not an address\"\n", 3),
        ("missing-root.toml", "data_dir = '/tmp'\n[[site]]\nroot = '/nonexistent/sluice/test/root'\n", 3),
        ("syntax.toml", "access_log = true\n[limits\n", 2),
    ];
    for (name, text, line) in cases {
        let out = check(dir.path(), name, text);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!out.status.success(), "sluice check accepted {name}:\n{text}\noutput: {all}");
        assert!(all.contains(&format!("{name}:{line}:")), "sluice check on {name} did not name line {line}:\n{all}");
    }
}

#[test]
fn check_accepts_example_and_test_configs() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sluice.example.toml");
    let out = run(Command::new(support::sluice_bin()).args(["check", "--config", example]), Duration::from_secs(30));
    out.expect_success("sluice check --config sluice.example.toml");

    // The config the harness writes is valid too (checked while its server runs).
    let srv = Server::start();
    let out = run(
        Command::new(support::sluice_bin()).arg("check").arg("--config").arg(srv.config_path()),
        Duration::from_secs(30),
    );
    out.expect_success("sluice check of the harness config");
}

/// Whether /proc/cpuinfo names an AMD processor of family 0x19 (Zen 3, Zen 4) or later.
fn amd_zen3_or_later() -> bool {
    let info = fs::read_to_string("/proc/cpuinfo").expect("read /proc/cpuinfo");
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    };
    field("vendor_id").as_deref() == Some("AuthenticAMD")
        && field("cpu family").and_then(|f| f.parse::<u32>().ok()).is_some_and(|f| f >= 0x19)
}

/// Whether `hay` holds `needle`.
fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_server_runs_with_glibc_s_tunables_set_and_keeps_the_operator_s() {
    // A larger per-thread cache of freed blocks everywhere; on AMD Zen 3 and later, copies
    // kept off `rep movsb`.
    const SET: &str = "glibc.cpu.x86_rep_movsb_threshold=1073741824";
    const CACHE: &str = "glibc.malloc.tcache_count=64";
    let zen = amd_zen3_or_later();
    let srv = Server::start();
    let env = srv.environ();
    // Checked tunable by tunable: glibc may have turned the colons between them into NULs.
    assert!(holds(&env, &format!("GLIBC_TUNABLES={CACHE}")), "the server ran itself again with the cache's size set");
    assert_eq!(holds(&env, SET), zen, "the threshold set on AMD Zen 3 and later only");
    // It still serves, from the new image.
    let r = curl(&srv, Proto::H2Tls, "/hello.txt", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    drop(srv);
    // Tunables the operator set are kept, the others added after them; a cache size the
    // operator set is theirs.
    let srv = Server::start_with(&Options {
        env: &[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=7")],
        ..Options::default()
    });
    let env = srv.environ();
    assert!(holds(&env, "GLIBC_TUNABLES=glibc.malloc.tcache_count=7"));
    assert!(!holds(&env, CACHE));
    assert_eq!(holds(&env, SET), zen);
    drop(srv);
    // A threshold the operator set is theirs (and is how to keep glibc's choice).
    const MINE: &str = "glibc.cpu.x86_rep_movsb_threshold=2112";
    let srv = Server::start_with(&Options { env: &[("GLIBC_TUNABLES", MINE)], ..Options::default() });
    let env = srv.environ();
    assert!(holds(&env, &format!("GLIBC_TUNABLES={MINE}")) && holds(&env, CACHE) && !holds(&env, SET));
}
