//! The TLS client configuration of an upstream.

use std::path::Path;
use std::sync::Arc;

/// A TLS client configuration: the CA bundle at `ca` or else the system's roots, ALPN `alpn`
/// (in order of preference), and an optional client certificate `(chain, key)`. Errors name
/// the file and the reason.
pub fn client_config(
    ca: Option<&Path>,
    client_cert: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("`{}`: {e}", path.display()))?;
            let mut n = 0;
            for c in rustls_pemfile::certs(&mut pem.as_slice()) {
                let c = c.map_err(|e| format!("`{}`: {e}", path.display()))?;
                roots.add(c).map_err(|e| format!("`{}`: {e}", path.display()))?;
                n += 1;
            }
            if n == 0 {
                return Err(format!("`{}` holds no PEM certificate", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err("no system CA certificates found; give `ca = \"/path/ca.pem\"`".into());
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = crate::certs::read_chain(cert)?;
            let key = crate::certs::read_key(key)?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("client certificate: {e}"))?
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(Some(&empty), None, &[b"h2"]).unwrap_err();
        assert!(e.contains("holds no PEM certificate") && e.contains("empty.pem"), "{e}");
        let e = client_config(Some(&dir.path().join("missing.pem")), None, &[b"h2"]).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
    }

    #[test]
    fn a_bundle_is_trusted_and_alpn_is_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = crate::certs::generate_self_signed(&["up.test"]).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert).unwrap();
        let cfg = client_config(Some(&ca), None, &[b"h2", b"http/1.1"]).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }
}
