//! Firefox ESR and the ORIGIN frame: a page on a.test whose images come from five host names on
//! one certificate, each name on its own loopback address (so Firefox cannot coalesce by IP);
//! the server counts TLS connections with `origins` on and off.
//!
//! Needs root (a private mount namespace gives Firefox its own /etc/hosts), `firefox-esr`,
//! `certutil` (libnss3-tools; the test CA goes into the profile) and `openssl`; skips with a
//! note otherwise. The counts are printed for the closing note; the test asserts that ORIGIN
//! brings the page down to one connection and that without it Firefox opened one per name.

mod support;

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{note, require_tool, run, Options, Server};

const HOSTS: [&str; 5] = ["a.test", "b.test", "c.test", "d.test", "e.test"];

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn sh(dir: &Path, script: &str) {
    let out = run(Command::new("sh").arg("-ec").arg(script).current_dir(dir), Duration::from_secs(60));
    out.expect_success(script);
}

/// A CA and a leaf for the five names, signed by it: (ca.pem, leaf.pem, leaf.key) in `dir`.
fn make_certs(dir: &Path) {
    let sans: Vec<String> = HOSTS.iter().map(|h| format!("DNS:{h}")).collect();
    sh(
        dir,
        &format!(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
               -subj '/CN=Sluice test CA' -keyout ca.key -out ca.pem \
               -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=a.test' \
               -keyout leaf.key -out leaf.csr 2>/dev/null
             printf 'subjectAltName={}\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
             openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
               -extfile ext.cnf -out leaf.pem 2>/dev/null",
            sans.join(",")
        ),
    );
}

/// Loads the page in a fresh headless Firefox; returns the distinct client connections the
/// server saw (peer address and port of the access-log lines).
fn load_page(srv: &Server, dir: &Path, tag: &str) -> usize {
    let profile = dir.join(format!("profile-{tag}"));
    fs::create_dir_all(&profile).unwrap();
    sh(
        &profile,
        &format!(
            "certutil -N -d sql:. --empty-password
             certutil -A -d sql:. -n sluice-test-ca -t C,, -i '{}'",
            dir.join("ca.pem").display()
        ),
    );
    // No DNS over HTTPS, no HTTP/3, no background connections that would muddy the count.
    fs::write(
        profile.join("user.js"),
        "user_pref(\"network.trr.mode\", 5);\n\
         user_pref(\"network.http.http3.enable\", false);\n\
         user_pref(\"network.dns.disableIPv6\", true);\n\
         user_pref(\"network.http.speculative-parallel-limit\", 0);\n\
         user_pref(\"network.predictor.enabled\", false);\n\
         user_pref(\"network.prefetch-next\", false);\n\
         user_pref(\"browser.shell.checkDefaultBrowser\", false);\n\
         user_pref(\"datareporting.policy.dataSubmissionEnabled\", false);\n\
         user_pref(\"toolkit.telemetry.enabled\", false);\n\
         user_pref(\"app.update.enabled\", false);\n\
         user_pref(\"browser.safebrowsing.malware.enabled\", false);\n\
         user_pref(\"browser.safebrowsing.phishing.enabled\", false);\n",
    )
    .unwrap();
    let before = srv.log().lines().count();
    let url = format!("https://a.test:{}/page.html", srv.tls_port);
    let script = format!(
        "mount --bind '{hosts}' /etc/hosts && exec timeout 60 firefox-esr --headless --no-remote \
         --profile '{profile}' --screenshot '{shot}' '{url}'",
        hosts = dir.join("hosts").display(),
        profile = profile.display(),
        shot = dir.join(format!("{tag}.png")).display(),
    );
    let out = run(Command::new("unshare").args(["-m", "sh", "-c", &script]), Duration::from_secs(90));
    assert!(out.status.success(), "firefox: {}\n{}", out.stdout, out.stderr);
    let log = srv.log();
    let lines: Vec<&str> = log.lines().skip(before).filter(|l| l.contains(" GET ")).collect();
    for h in HOSTS {
        assert!(
            lines.iter().any(|l| l.contains(&format!("{h}:{} /img-", srv.tls_port)) || h == "a.test"),
            "{h}: {log}"
        );
    }
    let peers: HashSet<&str> = lines.iter().filter_map(|l| l.split_whitespace().nth(1)).collect();
    peers.len()
}

fn server_with(dir: &Path, origins: bool) -> Server {
    let origins = if origins { "origins = \"from-certificate\"\n" } else { "" };
    let extra = format!(
        "[[certificate]]\ncert = '{}'\nkey = '{}'\n{origins}\n[quic]\nenabled = false\n",
        dir.join("leaf.pem").display(),
        dir.join("leaf.key").display()
    );
    Server::start_with(&Options { extra, listen_any: true, ..Options::default() })
}

#[test]
fn firefox_uses_one_connection_with_origin_frames() {
    let test = "firefox_uses_one_connection_with_origin_frames";
    if !is_root() {
        note(&format!("SKIP {test}: needs root (a mount namespace for Firefox's /etc/hosts)"));
        return;
    }
    require_tool!("firefox-esr", test);
    require_tool!("openssl", test);
    require_tool!("unshare", test);
    // certutil has no --version.
    if Command::new("sh").args(["-c", "command -v certutil"]).output().map_or(true, |o| !o.status.success()) {
        note(&format!("SKIP {test}: `certutil` (libnss3-tools) not found; run scripts/setup.sh"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let hosts: String = HOSTS.iter().enumerate().map(|(i, h)| format!("127.0.0.{} {h}\n", i + 1)).collect::<String>();
    fs::write(dir.path().join("hosts"), format!("127.0.0.1 localhost\n{hosts}")).unwrap();
    let mut counts = Vec::new();
    for origins in [true, false] {
        let srv = server_with(dir.path(), origins);
        let port = srv.tls_port;
        let imgs: String =
            HOSTS.iter().map(|h| format!("<img src=\"https://{h}:{port}/img-{h}.png\" width=1 height=1>")).collect();
        fs::write(srv.www().join("page.html"), format!("<!doctype html><title>origin</title>{imgs}")).unwrap();
        // A 1×1 PNG.
        let png: &[u8] = &[
            0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 1, 0, 0, 0,
            1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0, 1, 0,
            0, 5, 0, 1, 0x0d, 0x0a, 0x2d, 0xb4, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
        ];
        for h in HOSTS {
            fs::write(srv.www().join(format!("img-{h}.png")), png).unwrap();
        }
        let n = load_page(&srv, dir.path(), if origins { "on" } else { "off" });
        note(&format!("{test}: ORIGIN {}: {n} TLS connection(s) for 5 host names", if origins { "on" } else { "off" }));
        counts.push(n);
    }
    assert_eq!(counts[0], 1, "with ORIGIN frames Firefox should use one connection");
    assert!(counts[1] >= 5, "without ORIGIN frames Firefox opened {} connections", counts[1]);
}
