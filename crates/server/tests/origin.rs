//! ORIGIN frames and 421s (RFC 8336, RFC 9412, RFC 9110 §15.5.20) end to end: a configured
//! certificate for a.test and b.test with `origins = "from-certificate"`; the ORIGIN frame
//! read off the wire after SETTINGS; 421 for authorities the connection does not serve, over
//! HTTP/1.1, HTTP/2 and HTTP/3.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use support::{note, require_tool, run, Options, Server};

/// A server whose one certificate covers a.test and b.test and announces them.
fn server() -> Server {
    let ck = rcgen::generate_simple_self_signed(vec!["a.test".to_string(), "b.test".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let (cert, key) = (dir.join("ab.pem"), dir.join("ab.key"));
    fs::write(&cert, ck.cert.pem()).unwrap();
    fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let extra = format!(
        "[[certificate]]\ncert = '{}'\nkey = '{}'\norigins = \"from-certificate\"\n",
        cert.display(),
        key.display()
    );
    Server::start_with(&Options { extra, ..Options::default() })
}

/// The frames an HTTP/2 server sends first, over TLS with `sni`: (type, stream, payload).
fn first_frames(port: u16, sni: &str) -> Vec<(u8, u32, Vec<u8>)> {
    #[derive(Debug)]
    struct AnyCert;
    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // The preface and an empty SETTINGS (RFC 9113 §3.4).
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut chunk = [0u8; 4096];
    // Read until a few frames are in (the server sends SETTINGS, ORIGIN, WINDOW_UPDATE, then
    // the SETTINGS ACK), or the connection stalls.
    while frames.len() < 3 {
        let n = match tls.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            frames.push((buf[3], stream, buf[9..9 + len].to_vec()));
            buf.drain(..9 + len);
        }
    }
    frames
}

/// ORIGIN payload entries (RFC 8336 §2: 16-bit length, then the ASCII origin).
fn origin_entries(mut p: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while p.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([p[0], p[1]]));
        out.push(String::from_utf8_lossy(&p[2..2 + n]).into_owned());
        p = &p[2 + n..];
    }
    out
}

#[test]
fn origin_frame_right_after_settings() {
    let srv = server();
    let frames = first_frames(srv.tls_port, "a.test");
    assert_eq!(frames[0].0, 0x4, "SETTINGS first: {frames:?}");
    assert_eq!((frames[1].0, frames[1].1), (0xc, 0), "ORIGIN second, on stream 0: {frames:?}");
    let port = srv.tls_port;
    assert_eq!(
        origin_entries(&frames[1].2),
        [format!("https://a.test:{port}"), format!("https://b.test:{port}")],
        "the certificate's names that map to a site, on the listener's port"
    );
}

/// curl over `proto_flag` to `https://{host}:PORT/hello.txt` resolved to 127.0.0.1, with
/// `Host`/`:authority` set to `authority` when given: (status, body).
fn get(srv: &Server, proto_flag: &str, host: &str, authority: Option<&str>) -> (u16, String) {
    let port = srv.tls_port;
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-k", "--noproxy", "*", "--max-time", "20", proto_flag])
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(["-w", "\n%{http_code}"]);
    if let Some(a) = authority {
        cmd.args(["-H", &format!("Host: {a}")]);
    }
    cmd.arg(format!("https://{host}:{port}/hello.txt"));
    let out = run(&mut cmd, Duration::from_secs(30));
    out.expect_success("curl");
    let (body, code) = out.stdout.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

#[test]
fn authorities_outside_the_connection_get_421() {
    require_tool!("curl", "authorities_outside_the_connection_get_421");
    let srv = server();
    let port = srv.tls_port;
    for flag in ["--http1.1", "--http2"] {
        assert_eq!(get(&srv, flag, "a.test", None).0, 200, "{flag}");
        // Coalesced onto a.test's connection: b.test is on the certificate, so it is served.
        assert_eq!(get(&srv, flag, "a.test", Some(&format!("b.test:{port}"))).0, 200, "{flag}");
        // Not on the certificate: a client must not get an answer for it here.
        let (code, body) = get(&srv, flag, "a.test", Some(&format!("evil.test:{port}")));
        assert_eq!(code, 421, "{flag}: {body}");
        assert!(body.contains("misdirected"), "{body}");
        // On the certificate but another port (another listener's site).
        assert_eq!(get(&srv, flag, "a.test", Some("b.test:1")).0, 421, "{flag}");
    }
    let log = srv.log();
    assert!(log.contains(" 421 "), "access log:\n{log}");
}

#[test]
fn a_served_authority_does_not_open_the_connection_to_others() {
    require_tool!("curl", "a_served_authority_does_not_open_the_connection_to_others");
    // One connection (curl reuses it for each --next): a.test is served, then evil.test must
    // still get 421, then a.test 200 again (the connection remembers the authority it
    // checked, not a verdict for every other one).
    let srv = server();
    let port = srv.tls_port;
    for flag in ["--http1.1", "--http2"] {
        let mut cmd = Command::new("curl");
        let url = format!("https://a.test:{port}/hello.txt");
        let resolve = format!("a.test:{port}:127.0.0.1");
        for (i, host) in [None, Some(format!("evil.test:{port}")), None, Some("b.test:1".to_owned())].iter().enumerate()
        {
            if i > 0 {
                cmd.arg("--next");
            }
            cmd.args(["-sS", "-k", "--noproxy", "*", "--max-time", "20", flag, "-o", "/dev/null"])
                .args(["--resolve", &resolve])
                .args(["-w", "%{http_code} %{num_connects}\n"]);
            if let Some(h) = host {
                cmd.args(["-H", &format!("Host: {h}")]);
            }
            cmd.arg(&url);
        }
        let out = run(&mut cmd, Duration::from_secs(30));
        out.expect_success("curl");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines, ["200 1", "421 0", "200 0", "421 0"], "{flag}: one connection, each authority checked");
    }
}

#[test]
fn http3_origin_set_and_421() {
    let has_aioquic = Command::new("python3").args(["-c", "import aioquic"]).output().is_ok_and(|o| o.status.success());
    if !has_aioquic {
        note("SKIP http3_origin_set_and_421: python3 with aioquic not found; run scripts/setup.sh");
        return;
    }
    let srv = server();
    let port = srv.tls_port;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/h3client.py");
    let fetch = |authority: &str| {
        let out = run(
            Command::new("python3")
                .args([script, "--insecure", "--connect-to", "127.0.0.1"])
                .arg(format!("https://{authority}/hello.txt")),
            Duration::from_secs(30),
        );
        out.expect_success("h3client.py");
        let v: serde_json::Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
        v["status"].as_u64().unwrap()
    };
    assert_eq!(fetch(&format!("a.test:{port}")), 200);
    assert_eq!(fetch(&format!("evil.test:{port}")), 421);
}
