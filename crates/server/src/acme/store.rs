//! Where ACME state lives: the account, certificates and keys, and the order locks. Behind a
//! small trait so that a fleet's shared store only implements these five calls; files in the
//! data directory by default.
//!
//! Layout under `DATA_DIR/acme/` (every file 0600, every directory 0700), one directory per CA
//! (its directory URL's host and path, made a file name):
//!
//! ```text
//! acme/<ca>/account.json              the account's credentials (id, key, URLs)
//! acme/<ca>/certs/<name>/cert.pem     the chain, leaf first
//! acme/<ca>/certs/<name>/key.pem      its private key (PKCS#8)
//! acme/<ca>/locks/<name>.lock         held while an order runs: the holder and the lease's end
//! ```

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// ACME state storage. Keys are relative, `/`-separated paths of safe characters.
pub(crate) trait Storage: Send + Sync {
    /// The value at `key`, `None` if there is none.
    fn load(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// Replace the value at `key` as a whole (a reader sees the old value or the new one).
    fn store(&self, key: &str, value: &[u8]) -> io::Result<()>;
    /// The keys directly under `prefix`.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
    /// Take the lock `key` for `lease` unless someone else holds an unexpired one: whether it
    /// was taken. A holder that dies leaves the lock to expire.
    fn lock(&self, key: &str, lease: Duration) -> io::Result<bool>;
    /// Give the lock `key` back.
    fn unlock(&self, key: &str) -> io::Result<()>;
}

/// A directory of files.
pub(crate) struct FileStore {
    root: PathBuf,
}

impl FileStore {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn path(&self, key: &str) -> io::Result<PathBuf> {
        let ok = !key.is_empty()
            && key.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
            });
        if !ok {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad storage key `{key}`")));
        }
        Ok(self.root.join(key))
    }

    fn parent_dirs(path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) => fs::DirBuilder::new().recursive(true).mode(0o700).create(p),
            None => Ok(()),
        }
    }
}

impl Storage for FileStore {
    fn load(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(key)?) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn store(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let path = self.path(key)?;
        Self::parent_dirs(&path)?;
        // Written beside and renamed over: a reader never sees half a file.
        // A name of its own per write: two writers of one key must not share the file.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
        let write = || -> io::Result<()> {
            let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(value)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        };
        let r = write();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let dir = self.path(prefix)?;
        let mut out = Vec::new();
        match fs::read_dir(&dir) {
            Ok(entries) => {
                for e in entries {
                    if let Some(name) = e?.file_name().to_str() {
                        out.push(format!("{prefix}/{name}"));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        out.sort();
        Ok(out)
    }

    fn lock(&self, key: &str, lease: Duration) -> io::Result<bool> {
        let path = self.path(key)?;
        Self::parent_dirs(&path)?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        for _ in 0..2 {
            // O_EXCL: of two processes creating the file at once, one wins.
            match fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
                Ok(mut f) => {
                    writeln!(f, "pid {} until {}", std::process::id(), now + lease.as_secs())?;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let text = fs::read_to_string(&path).unwrap_or_default();
                    let until = match text.split_whitespace().last().and_then(|t| t.parse::<u64>().ok()) {
                        Some(u) => u,
                        // Just created, its holder not done writing: held, for a minute at most
                        // from the file's time.
                        None => fs::metadata(&path)
                            .and_then(|m| m.modified())
                            .map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() + 60)
                            .unwrap_or(0),
                    };
                    if until > now {
                        return Ok(false);
                    }
                    // An expired lease (its holder died): take it over, once.
                    let _ = fs::remove_file(&path);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    fn unlock(&self, key: &str) -> io::Result<()> {
        match fs::remove_file(self.path(key)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A CA's directory URL as one file name: `acme-v02.api.letsencrypt.org-directory`.
pub(crate) fn ca_dir(directory: &str) -> String {
    let rest = directory.split_once("://").map_or(directory, |(_, r)| r);
    let mut s: String =
        rest.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' }).collect();
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() {
        s.push_str("ca");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_locks_and_keys() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStore::new(dir.path().join("acme"));
        assert_eq!(s.load("ca/account.json").unwrap(), None);
        s.store("ca/certs/example.com/cert.pem", b"x").unwrap();
        assert_eq!(s.load("ca/certs/example.com/cert.pem").unwrap().as_deref(), Some(&b"x"[..]));
        let meta = fs::metadata(dir.path().join("acme/ca/certs/example.com/cert.pem")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let meta = fs::metadata(dir.path().join("acme/ca/certs")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(s.list("ca/certs").unwrap(), vec!["ca/certs/example.com".to_string()]);
        assert!(s.lock("ca/locks/example.com.lock", Duration::from_secs(60)).unwrap());
        assert!(!s.lock("ca/locks/example.com.lock", Duration::from_secs(60)).unwrap(), "held");
        s.unlock("ca/locks/example.com.lock").unwrap();
        assert!(s.lock("ca/locks/example.com.lock", Duration::ZERO).unwrap());
        assert!(
            s.lock("ca/locks/example.com.lock", Duration::from_secs(60)).unwrap(),
            "an expired lease is taken over"
        );
        for bad in ["../x", "a//b", "", "a/./b", "a b"] {
            assert!(s.load(bad).is_err(), "{bad}");
        }
        assert_eq!(ca_dir("https://acme-v02.api.letsencrypt.org/directory"), "acme-v02.api.letsencrypt.org-directory");
        assert_eq!(ca_dir("https://127.0.0.1:14000/dir"), "127.0.0.1-14000-dir");
    }
}
