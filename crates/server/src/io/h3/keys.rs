//! QUIC's own secrets, kept in the data directory (`quic-keys`) so that every instance that
//! shares it, and this one after a restart, hold the same: the stateless-reset key (RFC 9000
//! §10.3: an instance can reset a connection another issued, or one from before a restart, so
//! the client learns at once that it is gone) and the address-validation token key (a token
//! one instance gave, in a Retry or NEW_TOKEN, validates on another). Without the file, each
//! process had random keys of its own.
//!
//! The file holds 64 random octets in hex (the reset key's 32, then the token key's 32), mode
//! 0600; the first instance to find none makes it (`create_new`, so two at once agree on one).

use std::path::Path;
use std::sync::Arc;

/// The file's name in the data directory.
pub(crate) const FILE: &str = "quic-keys";

/// The reset key and the token key of `dir`'s file, made when there is none; `None` when it
/// can be neither read nor made (quinn's random keys then serve, logged).
pub(crate) fn load(dir: &Path) -> Option<(Arc<ring::hmac::Key>, Arc<ring::hkdf::Prk>)> {
    let raw = match read_or_make(&dir.join(FILE)) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(file = %dir.join(FILE).display(), %e, "QUIC keys not shared: each start has its own");
            return None;
        }
    };
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &raw[..32]);
    let token = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"sluice quic token key").extract(&raw[32..]);
    Some((Arc::new(reset), Arc::new(token)))
}

fn read_or_make(path: &Path) -> std::io::Result<[u8; 64]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut raw = [0u8; 64];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw)
        .map_err(|_| std::io::Error::other("no randomness"))?;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(mut f) => {
            let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            f.write_all(format!("{hex}\n").as_bytes())?;
            f.sync_all()?;
            Ok(raw)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another instance may be writing it this very moment: a short file is read again.
            for _ in 0..50 {
                let text = std::fs::read_to_string(path)?;
                let t = text.trim();
                if t.len() == 128 {
                    for (i, b) in raw.iter_mut().enumerate() {
                        *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16)
                            .map_err(|_| std::io::Error::other("not 128 hex digits"))?;
                    }
                    return Ok(raw);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::io::Error::other("not 128 hex digits"))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_sharing_a_directory_share_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (reset_a, _) = load(dir.path()).unwrap();
        let (reset_b, _) = load(dir.path()).unwrap();
        let tag = |k: &ring::hmac::Key| ring::hmac::sign(k, b"connection id").as_ref().to_vec();
        assert_eq!(tag(&reset_a), tag(&reset_b));
        let other = tempfile::tempdir().unwrap();
        assert_ne!(tag(&reset_a), tag(&load(other.path()).unwrap().0));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
        std::fs::write(dir.path().join(FILE), "short\n").unwrap();
        assert!(read_or_make(&dir.path().join(FILE)).is_err(), "a damaged file is not used");
    }
}
