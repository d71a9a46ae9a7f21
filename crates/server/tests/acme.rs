//! Automatic HTTPS against Pebble, the ACME test CA (`go install
//! github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3`, scripts/setup.sh), with its challenge
//! test server as the DNS that points the test names at 127.0.0.1. Pebble validates for real:
//! it connects to Sluice's TLS listener (TLS-ALPN-01) or cleartext listener (HTTP-01); curl
//! then verifies the certificate with Pebble's root, without `-k`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use support::{free_port, require_tool, run, Options, Running, Server};

const NAME: &str = "acme.sluice.test";

/// Pebble and its DNS, killed on drop.
struct Pebble {
    _dns: support::Kill,
    _pebble: support::Kill,
    dir: tempfile::TempDir,
    directory: String,
    mgmt: u16,
    /// The CA of Pebble's own HTTPS listeners.
    https_ca: PathBuf,
}

impl Pebble {
    /// Pebble validating on `tls_port` and `http_port`; `more` adds JSON fields to its
    /// configuration, `env` environment.
    fn start(tls_port: u16, http_port: u16, more: &str, env: &[(&str, &str)]) -> Self {
        // Its four ports are picked free, but another test may take one first (the DNS port is
        // UDP, which `free_port` does not look at): three tries.
        let mut why = String::new();
        for _ in 0..3 {
            match Self::try_start(tls_port, http_port, more, env) {
                Ok(p) => return p,
                Err(e) => why = e,
            }
        }
        panic!("Pebble did not start: {why}");
    }

    fn try_start(tls_port: u16, http_port: u16, more: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        // Pebble's own HTTPS: a CA and a certificate for 127.0.0.1 that it signs.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // OpenSSL (curl) wants a CA that says it signs certificates.
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "Sluice test: Pebble's HTTPS");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let https_ca = dir.path().join("https-ca.pem");
        fs::write(&https_ca, ca_cert.pem()).unwrap();
        fs::write(dir.path().join("cert.pem"), leaf.pem()).unwrap();
        fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        let (acme, mgmt, dns, dns_mgmt) = (free_port(), free_port(), free_port(), free_port());
        let config = format!(
            r#"{{"pebble": {{"listenAddress": "127.0.0.1:{acme}", "managementListenAddress": "127.0.0.1:{mgmt}",
              "certificate": "{dir}/cert.pem", "privateKey": "{dir}/key.pem",
              "httpPort": {http_port}, "tlsPort": {tls_port}, "ocspResponderURL": "",
              "domainBlocklist": ["blocked.sluice.test"], "retryAfter": {{"authz": 1, "order": 1}},
              "keyAlgorithm": "ecdsa"{more}}}}}"#,
            dir = dir.path().display()
        );
        fs::write(dir.path().join("pebble.json"), config).unwrap();
        let log = |name: &str| fs::File::create(dir.path().join(name)).unwrap();
        let dns_child = Command::new("pebble-challtestsrv")
            .args(["-dnsserver", &format!("127.0.0.1:{dns}"), "-management", &format!("127.0.0.1:{dns_mgmt}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(log("dns.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv");
        let pebble_child = Command::new("pebble")
            .args(["-config", &dir.path().join("pebble.json").display().to_string()])
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .envs(env.iter().copied())
            .stdout(log("pebble.log"))
            .stderr(log("pebble.err"))
            .spawn()
            .expect("pebble");
        let p = Self {
            _dns: support::Kill(dns_child),
            _pebble: support::Kill(pebble_child),
            directory: format!("https://127.0.0.1:{acme}/dir"),
            mgmt,
            https_ca,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(support::accepts(acme) && support::accepts(dns_mgmt)) {
            if Instant::now() > deadline {
                let dns = fs::read_to_string(p.dir.path().join("dns.log")).unwrap_or_default();
                return Err(format!("{}\n--- challtestsrv ---\n{dns}", p.log()));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(p)
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
            + &fs::read_to_string(self.dir.path().join("pebble.err")).unwrap_or_default()
    }

    /// Pebble's root (generated at its start), as a PEM file.
    fn root(&self) -> PathBuf {
        let path = self.dir.path().join("root.pem");
        let out = run(
            Command::new("curl")
                .args(["-sf", "--cacert"])
                .arg(&self.https_ca)
                .arg(format!("https://127.0.0.1:{}/roots/0", self.mgmt))
                .arg("-o")
                .arg(&path),
            Duration::from_secs(15),
        );
        out.expect_success("fetching Pebble's root");
        path
    }

    /// Make Pebble's renewal information for `cert_pem` suggest `[start, end]`.
    fn set_ari(&self, cert_pem: &str, start: SystemTime, end: SystemTime) {
        let rfc3339 = |t: SystemTime| httpdate_rfc3339(t);
        let ari = format!(r#"{{"suggestedWindow": {{"start": "{}", "end": "{}"}}}}"#, rfc3339(start), rfc3339(end));
        let body = serde_json::json!({ "Certificate": cert_pem, "ARIResponse": ari }).to_string();
        let out = run(
            Command::new("curl")
                .args(["-sf", "-X", "POST", "--data-binary", &body, "--cacert"])
                .arg(&self.https_ca)
                .arg(format!("https://127.0.0.1:{}/set-renewal-info/", self.mgmt)),
            Duration::from_secs(15),
        );
        out.expect_success("setting Pebble's renewal information");
    }
}

/// RFC 3339 in UTC.
fn httpdate_rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t).format(&time::format_description::well_known::Rfc3339).unwrap()
}

/// The site and `[acme]` for a server's configuration.
fn acme_config(p: &Pebble, challenge: &str, more: &str) -> String {
    acme_config_for(&p.directory, &p.https_ca, challenge, more)
}

fn acme_config_for(directory: &str, ca: &Path, challenge: &str, more: &str) -> String {
    format!(
        "[[site]]\nhosts = [\"{NAME}\"]\nroot = '{{www}}'\ntls = \"acme\"\n\n\
         [acme]\ndirectory = \"{directory}\"\nca_root = '{}'\nchallenge = \"{challenge}\"\n{more}",
        ca.display()
    )
}

/// Waits until `srv`'s log has `needle` `n` times.
fn wait_log(srv: &Server, needle: &str, n: usize, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let log = srv.log();
        if log.matches(needle).count() >= n {
            return log;
        }
        assert!(Instant::now() < deadline, "no {n}× `{needle}` within {within:?}:\n{log}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// curl verifying with `root` (no `-k`): whether it succeeded, and the HTTP status.
fn verified_get(root: &Path, port: u16, path: &str) -> (bool, String) {
    verified_get_name(NAME, root, port, path)
}

fn verified_get_name(name: &str, root: &Path, port: u16, path: &str) -> (bool, String) {
    let out = run(
        Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(root)
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .arg(format!("https://{name}:{port}{path}")),
        Duration::from_secs(15),
    );
    (out.status.success(), out.stdout)
}

/// The serial of the certificate the TLS listener presents for the name.
fn served_serial(port: u16) -> String {
    let out = run(
        Command::new("sh").arg("-c").arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername {NAME} </dev/null 2>/dev/null | openssl x509 -noout -serial"
        )),
        Duration::from_secs(15),
    );
    out.stdout.trim().to_owned()
}

/// The stored chain of the name's certificate under `data`.
fn stored_chain(data: &Path) -> String {
    let ca = fs::read_dir(data.join("acme")).unwrap().flatten().next().expect("a CA directory").path();
    fs::read_to_string(ca.join("certs").join(NAME).join("cert.pem")).expect("the stored certificate")
}

/// At start-up, through each challenge type, a certificate curl verifies with Pebble's root;
/// HTTP-01's cleartext listener redirects the rest to https; a restart serves the stored
/// certificate without the CA.
#[test]
fn a_certificate_through_each_challenge_and_again_after_a_restart() {
    const TEST: &str = "a_certificate_through_each_challenge_and_again_after_a_restart";
    require_tool!("curl", TEST);
    require_tool!("pebble", TEST);
    require_tool!("pebble-challtestsrv", TEST);
    for challenge in ["tls-alpn-01", "http-01"] {
        let (tls, plain) = (free_port(), free_port());
        let pebble = Pebble::start(tls, plain, "", &[]);
        let data = tempfile::tempdir().unwrap();
        // A configured certificate for another name, first: it must not make the ACME site's
        // requests misdirected (421).
        let other = rcgen::generate_simple_self_signed(vec!["other.sluice.test".to_string()]).unwrap();
        let (ocert, okey) = (data.path().join("other.pem"), data.path().join("other.key"));
        fs::write(&ocert, other.cert.pem()).unwrap();
        fs::write(&okey, other.signing_key.serialize_pem()).unwrap();
        let configured = format!("\n[[certificate]]\ncert = '{}'\nkey = '{}'\n", ocert.display(), okey.display());
        let started = Instant::now();
        let srv = Server::start_with(&Options {
            extra: acme_config(&pebble, challenge, "") + &configured,
            ports: Some((tls, plain)),
            data_dir: Some(data.path().to_path_buf()),
            ..Options::default()
        });
        wait_log(&srv, "acme: obtained a certificate", 1, Duration::from_secs(60));
        let took = started.elapsed();
        let log = wait_log(&srv, "acme: serving the stored certificate", 1, Duration::from_secs(10));
        assert!(log.contains(&format!("acme: keeping a certificate for {NAME} from {}", pebble.directory)), "{log}");
        let root = pebble.root();
        assert_eq!(verified_get(&root, tls, "/hello.txt"), (true, "200".into()), "{challenge}\n{log}");
        support::note(&format!("{TEST}: {challenge}: from start to a valid certificate {took:.2?}"));
        // Files only the server's user reads.
        use std::os::unix::fs::PermissionsExt;
        let ca_dir = fs::read_dir(data.path().join("acme")).unwrap().flatten().next().unwrap().path();
        for f in ["account.json", &format!("certs/{NAME}/key.pem")] {
            let mode = fs::metadata(ca_dir.join(f)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let metrics = run(Command::new("curl").args(["-s", &srv.admin("/metrics")]), Duration::from_secs(10)).stdout;
        assert!(metrics.contains(&format!("sluice_acme_certificate_expiry_seconds{{name=\"{NAME}\"}}")), "{metrics}");
        assert!(metrics.contains("sluice_acme_failures_total 0"), "{metrics}");
        if challenge == "http-01" {
            let out = run(
                Command::new("curl")
                    .args(["-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "--resolve"])
                    .arg(format!("{NAME}:{plain}:127.0.0.1"))
                    .arg(format!("http://{NAME}:{plain}/hello.txt?a=1")),
                Duration::from_secs(10),
            );
            assert_eq!(out.stdout, format!("308 https://{NAME}:{tls}/hello.txt?a=1"));
            continue;
        }
        // Restart without the CA: the stored certificate, no order, no account.
        let (directory, keep) = (pebble.directory.clone(), tempfile::tempdir().unwrap());
        let (ca, root_copy) = (keep.path().join("ca.pem"), keep.path().join("root.pem"));
        fs::copy(&pebble.https_ca, &ca).unwrap();
        fs::copy(&root, &root_copy).unwrap();
        let root = root_copy;
        drop(srv);
        drop(pebble);
        let srv = Server::start_with(&Options {
            extra: acme_config_for(&directory, &ca, challenge, ""),
            data_dir: Some(data.path().to_path_buf()),
            ..Options::default()
        });
        let log = wait_log(&srv, "acme: serving the stored certificate", 1, Duration::from_secs(20));
        assert!(!log.contains("obtained a certificate") && !log.contains("created account"), "{log}");
        assert_eq!(verified_get(&root, srv.tls_port, "/hello.txt"), (true, "200".into()), "{log}");
    }
}

/// A CA that refuses: an External Account Binding it does not accept, a name it will not
/// certify, a challenge it cannot validate. Each leaves a line saying what and why, counts a
/// failure, and the server goes on serving (the configured fallback certificate).
#[test]
fn refusals_leave_a_clear_error_and_the_server_serving() {
    const TEST: &str = "refusals_leave_a_clear_error_and_the_server_serving";
    require_tool!("curl", TEST);
    require_tool!("pebble", TEST);
    require_tool!("pebble-challtestsrv", TEST);
    // Validation connects to a port nobody listens on; the account needs a binding.
    let (tls, plain, nobody) = (free_port(), free_port(), free_port());
    let eab = r#", "externalAccountBindingRequired": true,
        "externalAccountMACKeys": {"kid-1": "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"}"#;
    let pebble = Pebble::start(nobody, plain, eab, &[]);
    // A key the CA does not know for kid-1.
    let wrong = "[acme]\neab_kid = \"kid-1\"\neab_hmac_key = \"b10lLJs8l1GPIzsLP0s6pMt8O0XVGnfTaCeROxQM0BIt2XrJMDHJZBM5NuQmQJQH\"\n";
    let cfg = acme_config(&pebble, "tls-alpn-01", "").replace("[acme]\n", wrong);
    let srv = Server::start_with(&Options { extra: cfg, ports: Some((tls, plain)), ..Options::default() });
    let log = wait_log(&srv, "acme: certificate for", 1, Duration::from_secs(30));
    assert!(log.contains("creating an account at") && log.contains("trying again in"), "{log}");
    let hello = run(
        Command::new("curl").args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"]).arg(srv.https("/hello.txt")),
        Duration::from_secs(10),
    );
    assert_eq!(hello.stdout, "200", "still serving: {log}");
    let metrics = run(Command::new("curl").args(["-s", &srv.admin("/metrics")]), Duration::from_secs(10)).stdout;
    assert!(!metrics.contains("sluice_acme_failures_total 0"), "{metrics}");
    support::note(&format!("{TEST}: bad EAB: {}", log.lines().find(|l| l.contains("acme: certificate for")).unwrap()));
    drop(srv);

    // The right binding; a blocked name and an unreachable validation.
    let right = "[acme]\neab_kid = \"kid-1\"\neab_hmac_key = \"zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W\"\n";
    let cfg = acme_config(&pebble, "tls-alpn-01", "").replace("[acme]\n", right)
        + "\n[[site]]\nhosts = [\"blocked.sluice.test\"]\nroot = '{www}'\ntls = \"acme\"\n";
    let srv = Server::start_with(&Options { extra: cfg, ports: Some((tls, plain)), ..Options::default() });
    let log = wait_log(&srv, "acme: certificate for", 2, Duration::from_secs(60));
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("acme: certificate for")).collect();
    let blocked = lines.iter().find(|l| l.contains("blocked.sluice.test")).expect("the blocked name's line");
    assert!(blocked.contains("new order") && blocked.contains("rejectedIdentifier"), "{blocked}");
    let invalid = lines.iter().find(|l| l.contains(NAME)).expect("the unreachable name's line");
    assert!(invalid.contains("validation: "), "{invalid}");
    assert!(log.contains("created account"), "the binding was accepted: {log}");
    let hello = run(
        Command::new("curl").args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"]).arg(srv.https("/hello.txt")),
        Duration::from_secs(10),
    );
    assert_eq!(hello.stdout, "200", "still serving: {log}");
    support::note(&format!("{TEST}: blocked name: {blocked}"));
    support::note(&format!("{TEST}: validation failure: {invalid}"));
}

/// The CA's renewal information moves renewal into a window a few seconds ahead (RFC 9773):
/// the certificate is renewed inside it, replaced without a restart, while a download over a
/// connection made with the old certificate goes on to its last byte.
#[test]
fn renewal_in_the_cas_window_while_a_download_runs() {
    const TEST: &str = "renewal_in_the_cas_window_while_a_download_runs";
    require_tool!("curl", TEST);
    require_tool!("openssl", TEST);
    require_tool!("pebble", TEST);
    require_tool!("pebble-challtestsrv", TEST);
    let (tls, plain) = (free_port(), free_port());
    let pebble = Pebble::start(tls, plain, "", &[]);
    let data = tempfile::tempdir().unwrap();
    let srv = Server::start_with(&Options {
        // Renewal information asked every second.
        extra: acme_config(&pebble, "tls-alpn-01", "check_secs = 1\n"),
        ports: Some((tls, plain)),
        data_dir: Some(data.path().to_path_buf()),
        ..Options::default()
    });
    wait_log(&srv, "acme: serving the stored certificate", 1, Duration::from_secs(60));
    let root = pebble.root();
    let first = served_serial(tls);
    assert!(first.starts_with("serial="), "{first}");
    // A download over the first certificate's connection, about 10 s long.
    let size: u64 = 300_000_000;
    let out = data.path().join("down.bin");
    let mut down = Running::spawn(
        Command::new("curl")
            .args(["-s", "--limit-rate", "30M", "--max-time", "60", "--cacert"])
            .arg(&root)
            .args(["--resolve", &format!("{NAME}:{tls}:127.0.0.1"), "-o"])
            .arg(&out)
            .arg(format!("https://{NAME}:{tls}/__down?bytes={size}")),
    );
    support::wait_until_flowing(&mut down, &out, TEST);
    let start = SystemTime::now() + Duration::from_secs(3);
    let end = start + Duration::from_secs(3);
    pebble.set_ari(&stored_chain(data.path()), start, end);
    let log = wait_log(&srv, "acme: renewing the certificate", 1, Duration::from_secs(30));
    let at = SystemTime::now();
    // Seen within the polling's 50 ms and the server's one-second look.
    assert!(
        at + Duration::from_secs(1) >= start && at <= end + Duration::from_secs(2),
        "renewed at {at:?}, window {start:?}..{end:?}\n{log}"
    );
    let log = wait_log(&srv, "acme: obtained a certificate", 2, Duration::from_secs(30));
    wait_log(&srv, "acme: serving the stored certificate", 2, Duration::from_secs(10));
    let second = served_serial(tls);
    assert!(second.starts_with("serial=") && second != first, "{first} then {second}\n{log}");
    assert_eq!(verified_get(&root, tls, "/hello.txt"), (true, "200".into()));
    assert!(down.is_running(), "the download ended before the renewal: make it longer");
    let o = down.finish(Duration::from_secs(60));
    assert!(o.status.success(), "download across the renewal: {}\n{log}", o.stderr);
    assert_eq!(support::file_len(&out), size, "the whole body");
    assert!(log.contains("names the certificate it replaces"), "RFC 9773 §5: {log}");
    support::note(&format!("{TEST}: renewed in the window; serial {first} -> {second}"));
}

/// Two servers sharing one storage directory start together: one orders, the other waits on
/// the storage's lock and serves what the first stored. (Pebble here accepts every challenge,
/// `PEBBLE_VA_ALWAYS_VALID`: it validates one port, and which server orders is the point.)
#[test]
fn two_servers_sharing_storage_order_once() {
    const TEST: &str = "two_servers_sharing_storage_order_once";
    require_tool!("curl", TEST);
    require_tool!("openssl", TEST);
    require_tool!("pebble", TEST);
    require_tool!("pebble-challtestsrv", TEST);
    let pebble = Pebble::start(free_port(), free_port(), "", &[("PEBBLE_VA_ALWAYS_VALID", "1")]);
    let data = tempfile::tempdir().unwrap();
    let opts = || Options {
        extra: acme_config(&pebble, "tls-alpn-01", ""),
        data_dir: Some(data.path().to_path_buf()),
        ..Options::default()
    };
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| Server::start_with(&opts()));
        let b = s.spawn(|| Server::start_with(&opts()));
        (a.join().unwrap(), b.join().unwrap())
    });
    let la = wait_log(&a, "acme: serving the stored certificate", 1, Duration::from_secs(60));
    let lb = wait_log(&b, "acme: serving the stored certificate", 1, Duration::from_secs(60));
    let orders = pebble.log().matches("Added order").count();
    assert_eq!(orders, 1, "one order for both:\n{}\n--- a ---\n{la}\n--- b ---\n{lb}", pebble.log());
    let obtained = [&la, &lb].iter().filter(|l| l.contains("acme: obtained a certificate")).count();
    assert_eq!(obtained, 1, "--- a ---\n{la}\n--- b ---\n{lb}");
    assert_eq!(served_serial(a.tls_port), served_serial(b.tls_port));
    let root = pebble.root();
    assert_eq!(verified_get(&root, a.tls_port, "/hello.txt"), (true, "200".into()));
    assert_eq!(verified_get(&root, b.tls_port, "/hello.txt"), (true, "200".into()));
}

/// A reload that adds a site gets its certificate without a restart; one that turns a site's
/// ACME off stops serving its ACME certificate.
#[test]
fn a_reload_adds_and_drops_names() {
    const TEST: &str = "a_reload_adds_and_drops_names";
    require_tool!("curl", TEST);
    require_tool!("pebble", TEST);
    require_tool!("pebble-challtestsrv", TEST);
    let (tls, plain) = (free_port(), free_port());
    let pebble = Pebble::start(tls, plain, "", &[]);
    let srv = Server::start_with(&Options {
        extra: acme_config(&pebble, "tls-alpn-01", ""),
        ports: Some((tls, plain)),
        ..Options::default()
    });
    wait_log(&srv, "acme: serving the stored certificate", 1, Duration::from_secs(60));
    let root = pebble.root();
    assert_eq!(verified_get(&root, tls, "/hello.txt"), (true, "200".into()));
    let reload = || {
        let out = run(
            Command::new("curl").args(["-s", "-X", "POST", "-w", "\n%{http_code}", &srv.admin("/reload")]),
            Duration::from_secs(30),
        );
        assert!(out.stdout.ends_with("200"), "reload: {}\n{}", out.stdout, srv.log());
    };
    let path = srv.config_path();
    let text = fs::read_to_string(&path).unwrap();
    let two = "two.sluice.test";
    fs::write(
        &path,
        format!("{text}\n[[site]]\nhosts = [\"{two}\"]\nroot = '{}'\ntls = \"acme\"\n", srv.scratch("").display()),
    )
    .unwrap();
    reload();
    wait_log(&srv, &format!("acme: obtained a certificate for {two}"), 1, Duration::from_secs(60));
    wait_log(&srv, &format!("acme: serving the stored certificate for {two}"), 1, Duration::from_secs(10));
    let (ok, _) = verified_get_name(two, &root, tls, "/");
    assert!(ok, "the added name's certificate verifies\n{}", srv.log());
    assert_eq!(verified_get(&root, tls, "/hello.txt"), (true, "200".into()), "the first is still served");
    // The first site's ACME off: its name is back on the configured (self-signed) certificate.
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replacen("tls = \"acme\"", "tls = \"manual\"", 1)).unwrap();
    reload();
    let deadline = Instant::now() + Duration::from_secs(10);
    while verified_get(&root, tls, "/hello.txt").0 {
        assert!(Instant::now() < deadline, "still served ACME's certificate\n{}", srv.log());
        thread::sleep(Duration::from_millis(100));
    }
    let (ok, _) = verified_get_name(two, &root, tls, "/");
    assert!(ok, "the other name keeps its certificate\n{}", srv.log());
}
