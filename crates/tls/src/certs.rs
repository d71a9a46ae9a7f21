//! Certificates: loading chains and keys, the generated self-signed default certificate,
//! certificate selection by SNI, and the rustls server configuration.
//!
//! The ring crypto provider is installed explicitly in every config we build
//! ([`rustls::ServerConfig::builder_with_provider`]), so rustls never has to guess a
//! process-wide default (which panics when more than one provider is compiled in).

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

/// File name of the generated self-signed certificate inside the data directory.
const SELF_SIGNED_CERT: &str = "self-signed-cert.pem";
/// File name of its private key (mode 0600).
const SELF_SIGNED_KEY: &str = "self-signed-key.pem";
/// Names the self-signed certificate covers.
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// Validity of the self-signed certificate. Apple platforms refuse TLS server certificates
/// valid for more than 825 days even when the user trusts them; stay below that.
const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(800 * 86_400);
/// Regenerate the self-signed certificate once its file is this old, well before it expires.
const SELF_SIGNED_RENEW_AFTER: Duration = Duration::from_secs(770 * 86_400);

/// A certificate chain with its key, ready for rustls, plus what we need to know about it.
#[derive(Debug, Clone)]
pub struct LoadedCert {
    /// Chain and signing key.
    pub key: Arc<CertifiedKey>,
    /// DNS names from the leaf's subjectAltName extension, lower case (may include `*.` names).
    pub dns_names: Vec<String>,
    /// The leaf certificate, DER (for the fingerprint).
    pub leaf_der: Vec<u8>,
}

impl LoadedCert {
    /// SHA-256 fingerprint of the leaf, colon-separated upper-case hex.
    pub fn fingerprint(&self) -> String {
        fingerprint_sha256(&self.leaf_der)
    }

    /// Whether one of the SAN DNS names covers `host` (exact, or a `*.` wildcard one label deep).
    /// For checking ORIGIN sets (RFC 8336 §2.4) against the certificate.
    pub fn covers(&self, host: &str) -> bool {
        self.exact_match(host) || self.wildcard_match(host)
    }

    fn exact_match(&self, host: &str) -> bool {
        let host = normalise_host(host);
        self.dns_names.iter().any(|n| !n.starts_with("*.") && *n == host)
    }

    fn wildcard_match(&self, host: &str) -> bool {
        let host = normalise_host(host);
        // RFC 6125 §6.4.3: the wildcard stands for exactly one, whole, left-most label.
        let Some((first, rest)) = host.split_once('.') else {
            return false;
        };
        if first.is_empty() || rest.is_empty() {
            return false;
        }
        self.dns_names.iter().any(|n| n.strip_prefix("*.") == Some(rest))
    }
}

fn normalise_host(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// SHA-256 fingerprint of a DER certificate as colon-separated upper-case hex
/// (`AB:CD:...`, the form browsers show).
pub fn fingerprint_sha256(cert_der: &[u8]) -> String {
    let digest = Sha256::digest(cert_der);
    let mut out = String::with_capacity(digest.len() * 3);
    for (i, b) in digest.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// Reads a PEM certificate chain (leaf first). Errors name the file and the reason.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = fs::read(path).map_err(|e| format!("cannot read certificate `{}`: {e}", path.display()))?;
    parse_chain(&pem).map_err(|e| format!("certificate `{}`: {e}", path.display()))
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1). Errors name the file and the reason.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = fs::read(path).map_err(|e| format!("cannot read key `{}`: {e}", path.display()))?;
    parse_key(&pem).map_err(|e| format!("key `{}`: {e}", path.display()))
}

fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a valid PEM file: {e}"))?;
    if chain.is_empty() {
        return Err("no `BEGIN CERTIFICATE` block found".into());
    }
    Ok(chain)
}

fn parse_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    match rustls_pemfile::private_key(&mut &pem[..]) {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err("no private key block found (expected PKCS#8, PKCS#1 or SEC1 PEM)".into()),
        Err(e) => Err(format!("not a valid PEM file: {e}")),
    }
}

/// Combines a chain and a key: the key must parse and match the leaf's public key, and the
/// leaf must be a parseable X.509 certificate.
pub fn certified(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<LoadedCert, String> {
    let Some(leaf) = chain.first() else {
        return Err("empty certificate chain".into());
    };
    let leaf_der = leaf.as_ref().to_vec();
    let dns_names = {
        let ee = webpki::EndEntityCert::try_from(leaf)
            .map_err(|e| format!("the first certificate is not a valid X.509 certificate: {e}"))?;
        ee.valid_dns_names().map(|n| n.to_ascii_lowercase()).collect()
    };
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => "the key does not match the certificate".to_string(),
        e => format!("unusable private key: {e}"),
    })?;
    Ok(LoadedCert { key: Arc::new(key), dns_names, leaf_der })
}

/// A PEM chain and key held in memory (an ACME order's result, a stored certificate).
pub fn load_pem(chain: &[u8], key: &[u8]) -> Result<LoadedCert, String> {
    certified(parse_chain(chain)?, parse_key(key)?)
}

/// Loads a PEM chain and key from files.
pub fn load_cert(cert: &Path, key: &Path) -> Result<LoadedCert, String> {
    let chain = read_chain(cert)?;
    let key_der = read_key(key)?;
    certified(chain, key_der).map_err(|e| format!("`{}` + `{}`: {e}", cert.display(), key.display()))
}

/// Generates a self-signed certificate for `names` (DNS names or IP literals).
/// Returns `(certificate PEM, key PEM)`.
pub fn generate_self_signed(names: &[&str]) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("key generation failed: {e}"))?;
    let sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(sans).map_err(|e| format!("bad name: {e}"))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, "Sluice self-signed");
    let now = rcgen::date_time_ymd(1970, 1, 1) + SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    // Start a day early so clients with a slightly slow clock accept it.
    params.not_before = now - Duration::from_secs(86_400);
    params.not_after = now + SELF_SIGNED_VALIDITY;
    let cert = params.self_signed(&key).map_err(|e| format!("self-signing failed: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Makes sure `data_dir` holds a usable self-signed certificate for localhost, 127.0.0.1 and
/// ::1, generating one on first run (or when the stored one is unreadable or due for renewal).
/// Returns `(cert path, key path, created)`.
pub fn ensure_self_signed(data_dir: &Path) -> io::Result<(PathBuf, PathBuf, bool)> {
    let cert_path = data_dir.join(SELF_SIGNED_CERT);
    let key_path = data_dir.join(SELF_SIGNED_KEY);
    if load_cert(&cert_path, &key_path).is_ok() && !due_for_renewal(&cert_path) {
        return Ok((cert_path, key_path, false));
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(data_dir)?;
    let names: Vec<&str> = SELF_SIGNED_NAMES.to_vec();
    let (cert_pem, key_pem) = generate_self_signed(&names).map_err(io::Error::other)?;
    // Key first, certificate last: a certificate file on disk implies its key is there too.
    write_atomically(&key_path, key_pem.as_bytes(), 0o600)?;
    write_atomically(&cert_path, cert_pem.as_bytes(), 0o644)?;
    Ok((cert_path, key_path, true))
}

fn due_for_renewal(cert_path: &Path) -> bool {
    let Ok(modified) = fs::metadata(cert_path).and_then(|m| m.modified()) else {
        return true;
    };
    SystemTime::now().duration_since(modified).map(|age| age > SELF_SIGNED_RENEW_AFTER).unwrap_or(false)
}

/// Writes `data` to a temporary file with `mode` next to `path`, then renames it into place.
fn write_atomically(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Picks the certificate for an SNI name: an exact SAN match first, then a one-label `*.`
/// wildcard match, then the first certificate (also when the client sent no SNI).
pub fn pick_cert<'a>(certs: &'a [LoadedCert], sni: Option<&str>) -> Option<&'a LoadedCert> {
    if let Some(name) = sni {
        if let Some(c) = certs.iter().find(|c| c.exact_match(name)) {
            return Some(c);
        }
        if let Some(c) = certs.iter().find(|c| c.wildcard_match(name)) {
            return Some(c);
        }
    }
    certs.first()
}

/// A certificate as served: the loaded chain and the origins its connections announce.
#[derive(Debug)]
pub struct ServedCert {
    pub cert: LoadedCert,
    /// The ORIGIN frame's set (RFC 8336): (host, port), a `None` port meaning the port of the
    /// connection's listener. `None`: no ORIGIN frame.
    pub origins: Option<Vec<(String, Option<u16>)>>,
    /// Answer 421 for authorities it does not cover (configured certificates; not the
    /// generated self-signed one).
    pub enforce: bool,
}

/// What one TLS connection serves: the certificate its SNI picked, on its listener's port.
#[derive(Clone, Debug)]
pub struct Served {
    cert: Arc<ServedCert>,
    port: u16,
}

impl Served {
    /// The certificate [`pick_cert`] would present for `sni`, on `port`.
    pub fn for_sni(certs: &[Arc<ServedCert>], sni: Option<&str>, port: u16) -> Option<Self> {
        let pick = sni.and_then(|name| {
            certs
                .iter()
                .find(|c| c.cert.exact_match(name))
                .or_else(|| certs.iter().find(|c| c.cert.wildcard_match(name)))
        });
        pick.or_else(|| certs.first())
            .filter(|c| c.enforce || c.origins.is_some())
            .map(|c| Self { cert: c.clone(), port })
    }

    /// [`Served::for_sni`], the [`Dynamic`] certificates first, as the resolver picks them: a
    /// connection that presented an ACME certificate answers the names that certificate
    /// covers.
    pub fn for_sni_with(certs: &[Arc<ServedCert>], dynamic: &Dynamic, sni: Option<&str>, port: u16) -> Option<Self> {
        if let Some(cert) = sni.and_then(|n| dynamic.get(n)) {
            return Some(Self { cert: Arc::new(ServedCert { cert, origins: None, enforce: true }), port });
        }
        Self::for_sni(certs, sni, port)
    }

    /// Whether a request for `authority` belongs on this connection (else 421, RFC 9110
    /// §15.5.20): its port is the listener's (443 when it names none), and its host is one the
    /// certificate covers. A connection coalesced for a name the certificate does not cover,
    /// or for a site on another listener, is refused rather than answered. IP-literal hosts
    /// are not checked against the certificate (clients do not coalesce onto addresses), nor
    /// is an empty authority (HTTP/1.0 without Host).
    pub fn serves(&self, authority: &str) -> bool {
        if authority.is_empty() || !self.cert.enforce {
            return true;
        }
        let (host, port) = split_authority(authority);
        let port = match port {
            None => 443,
            Some(p) => match p.parse::<u16>() {
                Ok(p) => p,
                Err(_) => return false,
            },
        };
        if port != self.port {
            return false;
        }
        host.parse::<std::net::IpAddr>().is_ok() || self.cert.cert.covers(host)
    }

    /// This connection's ORIGIN frame entries (`https://host` or `https://host:port`), only
    /// those on its own port.
    pub fn origins(&self) -> Option<Vec<String>> {
        let list = self.cert.origins.as_ref()?;
        Some(
            list.iter()
                .filter(|(_, p)| p.unwrap_or(self.port) == self.port)
                .map(
                    |(h, _)| {
                        if self.port == 443 {
                            format!("https://{h}")
                        } else {
                            format!("https://{h}:{}", self.port)
                        }
                    },
                )
                .collect(),
        )
    }
}

/// `host[:port]` with IPv6 literals in brackets → (host without brackets, port text).
fn split_authority(a: &str) -> (&str, Option<&str>) {
    if let Some(rest) = a.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, after)) => (h, after.strip_prefix(':')),
            None => (a, None),
        };
    }
    match a.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (a, None),
    }
}

/// The ALPN protocol of TLS-ALPN-01 validation handshakes (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Certificates that change while the server runs, shared by every configuration generation:
/// those obtained from an ACME CA (chosen before the configured ones for the names they
/// cover), and the TLS-ALPN-01 challenge certificates (RFC 8737), presented only to a
/// handshake that offers `acme-tls/1`.
#[derive(Debug, Default)]
pub struct Dynamic {
    certs: RwLock<Vec<LoadedCert>>,
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl Dynamic {
    /// Serve `cert` from now on, in place of one for the same set of names.
    pub fn install(&self, cert: LoadedCert) {
        let mut certs = self.certs.write().unwrap_or_else(|e| e.into_inner());
        let mut names = cert.dns_names.clone();
        names.sort();
        certs.retain(|c| {
            let mut n = c.dns_names.clone();
            n.sort();
            n != names
        });
        certs.push(cert);
    }

    /// Stop serving the installed certificates `keep` says no to.
    pub fn retain(&self, keep: impl Fn(&LoadedCert) -> bool) {
        self.certs.write().unwrap_or_else(|e| e.into_inner()).retain(|c| keep(c));
    }

    /// The certificate served for `name`, if one was installed.
    pub fn get(&self, name: &str) -> Option<LoadedCert> {
        let certs = self.certs.read().unwrap_or_else(|e| e.into_inner());
        certs.iter().find(|c| c.exact_match(name)).or_else(|| certs.iter().find(|c| c.wildcard_match(name))).cloned()
    }

    /// Present a TLS-ALPN-01 challenge certificate for `name` (RFC 8737 §3): self-signed for
    /// that one name, with the critical acmeIdentifier extension holding the SHA-256 digest of
    /// the key authorization.
    pub fn set_challenge(&self, name: &str, key_authorization_digest: &[u8]) -> Result<(), String> {
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(key_authorization_digest)];
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
        let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        // Not through `certified`: webpki refuses the critical extension it does not know,
        // which is the validation server's to read.
        let signing = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(der)
            .map_err(|e| format!("challenge key: {e}"))?;
        let key = Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing));
        self.challenges.write().unwrap_or_else(|e| e.into_inner()).insert(normalise_host(name), key);
        Ok(())
    }

    /// Stop presenting the challenge certificate for `name`.
    pub fn clear_challenge(&self, name: &str) {
        self.challenges.write().unwrap_or_else(|e| e.into_inner()).remove(&normalise_host(name));
    }

    fn challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.challenges.read().unwrap_or_else(|e| e.into_inner()).get(&normalise_host(name)).cloned()
    }
}

/// rustls certificate resolver over [`pick_cert`], with the [`Dynamic`] certificates first.
#[derive(Debug)]
struct SniResolver {
    certs: Vec<LoadedCert>,
    dynamic: Option<Arc<Dynamic>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        HELLO_SNI.set(Some(hello.server_name().map(Box::from)));
        if let Some(d) = &self.dynamic {
            // RFC 8737 §3: a validation offers `acme-tls/1` and nothing else.
            if hello.alpn().is_some_and(|mut a| a.next() == Some(ACME_TLS_ALPN) && a.next().is_none()) {
                // A validation handshake (RFC 8737 §3): the challenge certificate or nothing,
                // never a certificate of the site.
                return hello.server_name().and_then(|n| d.challenge(n));
            }
            if let Some(c) = hello.server_name().and_then(|n| d.get(n)) {
                return Some(c.key);
            }
        }
        pick_cert(&self.certs, hello.server_name()).map(|c| Arc::clone(&c.key))
    }
}

thread_local! {
    /// The SNI of the last ClientHello the resolver saw on this thread (`Some(None)`: it had
    /// none). rustls's unbuffered server connection does not say which name the client asked
    /// for; rustls calls the resolver for every ClientHello, resumptions included, within the
    /// call that processes it, so the handshake that made the call takes the name right after.
    static HELLO_SNI: std::cell::Cell<Option<Option<Box<str>>>> = const { std::cell::Cell::new(None) };
}

/// Take what the resolver noted on this thread since the last call (see `HELLO_SNI`): `None`
/// if it was not called.
pub fn take_hello_sni() -> Option<Option<Box<str>>> {
    HELLO_SNI.take()
}

/// Builds a rustls server configuration serving `certs` (selected by SNI, the first is the
/// fallback) and offering the `alpn` protocols in order of preference.
pub fn server_config(certs: &[LoadedCert], alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, String> {
    server_config_with(certs, alpn, None, None)
}

/// [`server_config`] with the [`Dynamic`] certificates: chosen first for the names they cover;
/// with `acme-tls/1` among `alpn`, a validation handshake gets its challenge certificate.
/// `tickets` seals TLS 1.3 session tickets (`crate::tickets`: keys shared through a file);
/// without it, keys of rustls's own in memory.
pub fn server_config_with(
    certs: &[LoadedCert],
    alpn: &[&[u8]],
    dynamic: Option<Arc<Dynamic>>,
    tickets: Option<Arc<dyn rustls::server::ProducesTickets>>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    if certs.is_empty() {
        return Err("no certificate to serve".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver { certs: certs.to_vec(), dynamic }));
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // After a TLS 1.3 handshake the TLS stream protects the records itself with the traffic
    // keys rustls hands over (`records.rs`).
    cfg.enable_secret_extraction = true;
    // Stateless TLS 1.3 resumption; without a ticketer rustls falls back to its in-memory cache.
    if let Some(t) = tickets {
        cfg.ticketer = t;
    } else if let Ok(ticketer) = rustls::crypto::ring::Ticketer::new() {
        cfg.ticketer = ticketer;
    }
    Ok(Arc::new(cfg))
}

/// A generated certificate for `names`, loaded (tests).
#[cfg(any(test, feature = "test-support"))]
pub fn test_cert(names: &[&str]) -> LoadedCert {
    let (c, k) = generate_self_signed(names).unwrap();
    certified(parse_chain(c.as_bytes()).unwrap(), parse_key(k.as_bytes()).unwrap()).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(names: &[&str]) -> LoadedCert {
        let (c, k) = generate_self_signed(names).unwrap();
        certified(parse_chain(c.as_bytes()).unwrap(), parse_key(k.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn self_signed_generated_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("state");
        let (cert, key, created) = ensure_self_signed(&data).unwrap();
        assert!(created);
        let mode = fs::metadata(&key).unwrap().permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
        let first = fs::read(&cert).unwrap();
        let lc = load_cert(&cert, &key).unwrap();
        assert_eq!(lc.dns_names, vec!["localhost".to_string()]);
        assert!(lc.covers("LOCALHOST."));
        let fp = lc.fingerprint();
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.chars().all(|c| c == ':' || c.is_ascii_digit() || ('A'..='F').contains(&c)));
        server_config(&[lc], &[b"h2", b"http/1.1"]).unwrap();

        let (cert2, key2, created2) = ensure_self_signed(&data).unwrap();
        assert!(!created2);
        assert_eq!((cert2, key2), (cert.clone(), key));
        assert_eq!(fs::read(&cert).unwrap(), first);
    }

    #[test]
    fn broken_self_signed_is_regenerated() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _, _) = ensure_self_signed(dir.path()).unwrap();
        fs::write(&cert, "garbage").unwrap();
        let (_, _, created) = ensure_self_signed(dir.path()).unwrap();
        assert!(created);
    }

    #[test]
    fn load_errors_are_specific() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = generate_self_signed(&["a.test"]).unwrap();
        let (_, k2) = generate_self_signed(&["b.test"]).unwrap();
        let p = |n: &str| dir.path().join(n);
        fs::write(p("c1"), &c1).unwrap();
        fs::write(p("k1"), &k1).unwrap();
        fs::write(p("k2"), &k2).unwrap();
        fs::write(p("junk"), "hello").unwrap();
        assert!(load_cert(&p("c1"), &p("k1")).is_ok());
        let e = load_cert(&p("c1"), &p("k2")).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        let e = load_cert(&p("missing"), &p("k1")).unwrap_err();
        assert!(e.contains("cannot read certificate"), "{e}");
        let e = load_cert(&p("junk"), &p("k1")).unwrap_err();
        assert!(e.contains("BEGIN CERTIFICATE"), "{e}");
        let e = load_cert(&p("c1"), &p("c1")).unwrap_err();
        assert!(e.contains("no private key"), "{e}");
    }

    #[test]
    fn fingerprint_format() {
        assert_eq!(
            fingerprint_sha256(b""),
            "E3:B0:C4:42:98:FC:1C:14:9A:FB:F4:C8:99:6F:B9:24:27:AE:41:E4:64:9B:93:4C:A4:95:99:1B:78:52:B8:55"
        );
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_first() {
        let a = loaded(&["a.test", "*.wild.test"]);
        let b = loaded(&["b.test", "x.wild.test"]);
        let certs = vec![a, b];
        let pick = |n: Option<&str>| pick_cert(&certs, n).unwrap().dns_names[0].clone();
        assert_eq!(pick(Some("a.test")), "a.test");
        assert_eq!(pick(Some("B.test")), "b.test");
        assert_eq!(pick(Some("x.wild.test")), "b.test", "exact beats wildcard");
        assert_eq!(pick(Some("y.wild.test")), "a.test");
        assert_eq!(pick(Some("z.y.wild.test")), "a.test", "fallback: first");
        assert_eq!(pick(Some("wild.test")), "a.test", "fallback: first");
        assert_eq!(pick(None), "a.test");
        assert!(!certs[0].covers("z.y.wild.test"));
        assert!(!certs[0].covers(".wild.test"));
        assert!(certs[0].covers("q.wild.test"));
    }

    /// A full in-memory handshake: the client trusts only `b.test`'s certificate, so the
    /// handshake succeeds only if the resolver picked it for SNI `b.test`.
    #[test]
    fn handshake_uses_sni_certificate() {
        let (ca, ka) = generate_self_signed(&["a.test"]).unwrap();
        let (cb, kb) = generate_self_signed(&["b.test"]).unwrap();
        let a = certified(parse_chain(ca.as_bytes()).unwrap(), parse_key(ka.as_bytes()).unwrap()).unwrap();
        let b = certified(parse_chain(cb.as_bytes()).unwrap(), parse_key(kb.as_bytes()).unwrap()).unwrap();
        let server_cfg = server_config(&[a, b.clone()], &[b"h2"]).unwrap();
        for (sni, trusted, ok) in [("b.test", &b, true), ("a.test", &b, false)] {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from(trusted.leaf_der.clone())).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut ccfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            ccfg.alpn_protocols = vec![b"h2".to_vec()];
            let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
            let mut client = rustls::ClientConnection::new(Arc::new(ccfg), name).unwrap();
            let mut server = rustls::ServerConnection::new(Arc::clone(&server_cfg)).unwrap();
            let mut failed = false;
            for _ in 0..10 {
                let mut buf = Vec::new();
                client.write_tls(&mut buf).unwrap();
                if server.read_tls(&mut &buf[..]).is_ok() && server.process_new_packets().is_err() {
                    failed = true;
                }
                let mut buf = Vec::new();
                server.write_tls(&mut buf).unwrap();
                if client.read_tls(&mut &buf[..]).is_ok() && client.process_new_packets().is_err() {
                    failed = true;
                }
                if failed || (!client.is_handshaking() && !server.is_handshaking()) {
                    break;
                }
            }
            assert_eq!(!failed && !client.is_handshaking(), ok, "sni {sni}");
            if ok {
                assert_eq!(server.server_name(), Some(sni));
                assert_eq!(client.alpn_protocol(), Some(&b"h2"[..]));
            }
        }
    }

    #[test]
    fn served_answers_for_its_names_and_port_only() {
        let served = |origins, enforce| {
            let certs = vec![
                Arc::new(ServedCert { cert: loaded(&["a.test", "*.b.test"]), origins, enforce }),
                Arc::new(ServedCert { cert: loaded(&["c.test"]), origins: None, enforce: true }),
            ];
            (Served::for_sni(&certs, Some("a.test"), 8443), Served::for_sni(&certs, Some("c.test"), 8443))
        };
        let (a, c) = served(None, true);
        let (a, c) = (a.unwrap(), c.unwrap());
        assert!(a.serves("a.test:8443") && a.serves("x.b.test:8443") && a.serves("A.TEST:8443"));
        // Another certificate's name, a name no certificate has, another port, port 443 by default.
        assert!(!a.serves("c.test:8443") && !a.serves("evil.test:8443"));
        assert!(!a.serves("a.test:9443") && !a.serves("a.test") && !a.serves("a.test:x"));
        assert!(c.serves("c.test:8443") && !c.serves("a.test:8443"));
        // Addresses are not checked against names; the port still is.
        assert!(a.serves("127.0.0.1:8443") && a.serves("[::1]:8443") && !a.serves("[::1]:1"));
        assert_eq!(a.origins(), None);
        // Origins on the listener's port only, with the port written when not 443.
        let list = Some(vec![("a.test".to_string(), None), ("x.b.test".to_string(), Some(9443))]);
        let (a, _) = served(list, true);
        assert_eq!(a.unwrap().origins(), Some(vec!["https://a.test:8443".to_string()]));
        // The generated certificate (not enforced, no origins) serves any name.
        let (a, _) = served(None, false);
        assert!(a.is_none());
    }
}
