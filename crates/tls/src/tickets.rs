//! TLS 1.3 session-ticket keys kept in a file, so that a ticket one Sluice issued resumes on
//! another that reads the same file (instances of a fleet sharing the data directory, or one
//! server across its reloads and restarts). rustls's own `Ticketer` keeps random keys in
//! memory: every instance, and every reload, had keys of its own, and a client resumed only
//! where it had first connected.
//!
//! The file (`tls-ticket-keys` in the data directory) holds two keys, newest first, one per
//! line: `UNIX-SECONDS HEX-KEY` (32 octets, AES-256-GCM). A ticket is `key id (4) ‖ nonce
//! (12) ‖ sealed state`; either key opens one. The newest key seals. When it is older than the
//! rotation period, the instance that notices first writes a new file (the new key, then the
//! old newest; written beside and renamed into place, so a reader sees one whole file), and
//! every instance reads the file again at most a minute after it changed. Tickets thus live
//! between one and two periods.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};

/// How long a key seals new tickets.
const ROTATE: Duration = Duration::from_secs(12 * 3600);
/// How often the file is looked at again.
const RECHECK: Duration = Duration::from_secs(60);
/// The file's name in the data directory.
pub const FILE: &str = "tls-ticket-keys";

struct Key {
    created: u64,
    id: [u8; 4],
    aead: LessSafeKey,
}

impl Key {
    fn new(created: u64, raw: &[u8]) -> Option<Self> {
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, raw).ok()?);
        // The key's id: the first octets of a hash of it (not the key itself).
        let digest = ring::digest::digest(&ring::digest::SHA256, raw);
        let mut id = [0u8; 4];
        id.copy_from_slice(&digest.as_ref()[..4]);
        Some(Self { created, id, aead })
    }
}

struct Keys {
    keys: Vec<Key>,
    checked: Option<std::time::Instant>,
    modified: Option<SystemTime>,
}

/// Session-ticket keys from a file (see the module's documentation).
pub struct FileTicketer {
    path: PathBuf,
    rng: SystemRandom,
    state: Mutex<Keys>,
}

impl std::fmt::Debug for FileTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTicketer").field("path", &self.path).finish()
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (s.len() % 2 == 0).then_some(())?;
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The keys in the file's text, newest first; lines that do not parse are skipped.
fn parse(text: &str) -> Vec<Key> {
    let mut keys: Vec<Key> = text
        .lines()
        .filter_map(|l| {
            let (t, k) = l.trim().split_once(' ')?;
            Key::new(t.parse().ok()?, &unhex(k.trim())?).filter(|_| k.trim().len() == 64)
        })
        .collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.created));
    keys.truncate(2);
    keys
}

impl FileTicketer {
    /// Keys from `dir`'s file, made (and the directory) when there is none.
    pub fn new(dir: &Path) -> Self {
        let t = Self {
            path: dir.join(FILE),
            rng: SystemRandom::new(),
            state: Mutex::new(Keys { keys: Vec::new(), checked: None, modified: None }),
        };
        t.refresh(&mut t.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        t
    }

    /// Read the file when it changed, and rotate when the newest key is too old (or there is
    /// none). Failures to write are logged by leaving the keys in memory as they are: serving
    /// goes on with them.
    fn refresh(&self, s: &mut Keys) {
        s.checked = Some(std::time::Instant::now());
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified.is_some() && modified != s.modified {
            if let Ok(text) = std::fs::read_to_string(&self.path) {
                let keys = parse(&text);
                if !keys.is_empty() {
                    s.keys = keys;
                    s.modified = modified;
                }
            }
        }
        let stale = s.keys.first().is_none_or(|k| now().saturating_sub(k.created) >= ROTATE.as_secs());
        if !stale {
            return;
        }
        let mut raw = [0u8; 32];
        if self.rng.fill(&mut raw).is_err() {
            return;
        }
        let created = now();
        let mut text = format!("{created} {}\n", hex(&raw));
        // The newest key stays, to open the tickets it sealed; the file keeps its raw form.
        if let Ok(old) = std::fs::read_to_string(&self.path) {
            if let Some(line) = old.lines().find(|l| !parse(l).is_empty()) {
                text.push_str(line.trim());
                text.push('\n');
            }
        }
        let Some(key) = Key::new(created, &raw) else { return };
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = self.path.with_extension(format!("tmp{}", std::process::id()));
        let written = write_private(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        let keep = s.keys.drain(..).next();
        s.keys = std::iter::once(key).chain(keep).collect();
        s.modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.checked.is_none_or(|t| t.elapsed() >= RECHECK) {
            self.refresh(&mut s);
        }
        s
    }
}

/// Write `text` to a new file readable by its owner only (the keys decrypt every session).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

impl rustls::server::ProducesTickets for FileTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        ROTATE.as_secs() as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let s = self.keys();
        let key = s.keys.first()?;
        let mut nonce = [0u8; 12];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(4 + 12 + plain.len() + 16);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.aead.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&key.id), &mut body).ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let (id, rest) = cipher.split_at_checked(4)?;
        let (nonce, sealed) = rest.split_at_checked(12)?;
        let s = self.keys();
        let key = s.keys.iter().find(|k| k.id == id)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        let plain = key.aead.open_in_place(nonce, Aad::from(&key.id), &mut body).ok()?;
        Some(plain.to_vec())
    }
}

/// The ticketer of data directory `dir`, one per directory in the process (a reload keeps it,
/// and with it every ticket issued).
pub fn for_dir(dir: &Path) -> Arc<FileTicketer> {
    static ALL: Mutex<Vec<(PathBuf, Arc<FileTicketer>)>> = Mutex::new(Vec::new());
    let mut all = ALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, t)) = all.iter().find(|(p, _)| p == dir) {
        return t.clone();
    }
    let t = Arc::new(FileTicketer::new(dir));
    all.push((dir.to_path_buf(), t.clone()));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn a_ticket_opens_on_another_instance_of_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = FileTicketer::new(dir.path());
        let b = FileTicketer::new(dir.path());
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"session state"[..]));
        // Tampered, truncated, or from other keys: nothing.
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(b.decrypt(&bad), None);
        assert_eq!(b.decrypt(&t[..10]), None);
        let other = tempfile::tempdir().unwrap();
        assert_eq!(FileTicketer::new(other.path()).decrypt(&t), None);
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key file is private");
    }

    #[test]
    fn a_stale_key_is_rotated_and_still_opens_its_tickets() {
        let dir = tempfile::tempdir().unwrap();
        let old = now() - ROTATE.as_secs() - 10;
        std::fs::write(dir.path().join(FILE), format!("{old} {}\n", "ab".repeat(32))).unwrap();
        let sealed_with_old = {
            let k = Key::new(old, &[0xab; 32]).unwrap();
            let mut body = b"x".to_vec();
            let nonce = [7u8; 12];
            k.aead.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&k.id), &mut body).unwrap();
            [&k.id[..], &nonce[..], &body[..]].concat()
        };
        let t = FileTicketer::new(dir.path());
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 2, "a new key, then the old one: {text}");
        assert!(text.lines().nth(1).unwrap().starts_with(&old.to_string()));
        assert_eq!(t.decrypt(&sealed_with_old).as_deref(), Some(&b"x"[..]));
        let fresh = t.encrypt(b"y").unwrap();
        assert_ne!(&fresh[..4], &sealed_with_old[..4], "new tickets use the new key");
        assert!(parse("garbage\n1 zz\n").is_empty());
    }
}
