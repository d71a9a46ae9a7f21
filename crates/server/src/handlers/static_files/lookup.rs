//! File-system lookup (blocking system calls on local metadata; see `serve`): opening a file
//! beneath the root, and the small-file cache.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

// Returned once per lookup and matched at once: its size is never stored or moved about.
#[allow(clippy::large_enum_variant)]
pub(super) enum Lookup {
    /// The open file, its metadata, whether it is a directory's `index.html`, its whole
    /// content when it is small, and its canonical path.
    File(File, Metadata, bool, Option<Bytes>, PathBuf),
    AddSlash,
    NotFound,
    Forbidden,
    /// Out of file descriptors (EMFILE, ENFILE): the file exists, the server cannot open it
    /// now. 503, never a 404 that a cache or a crawler would believe.
    Exhausted,
    Error(String),
}

pub(super) fn classify(e: &io::Error) -> Lookup {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => return Lookup::Exhausted,
        // O_NOFOLLOW on a symlink, a name too long, a path through a file: no such file here.
        Some(libc::ELOOP | libc::ENAMETOOLONG | libc::ENOTDIR | libc::ENOENT) => return Lookup::NotFound,
        Some(libc::EACCES | libc::EPERM) => return Lookup::Forbidden,
        _ => {}
    }
    match e.kind() {
        io::ErrorKind::NotFound => Lookup::NotFound,
        io::ErrorKind::PermissionDenied => Lookup::Forbidden,
        _ => Lookup::Error(e.to_string()),
    }
}

/// Finds and opens the file for `segments` under `root`, refusing anything whose canonical
/// path leaves the canonical root.
pub(super) fn open_beneath(root: &Path, segments: &[String], trailing_slash: bool) -> Lookup {
    let root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) => return Lookup::Error(format!("site root `{}`: {e}", root.display())),
    };
    let mut candidate = root.clone();
    candidate.extend(segments);
    let mut path = match inside(&root, &candidate) {
        Ok(p) => p,
        Err(e) => return classify(&e),
    };
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => return classify(&e),
    };
    let is_index = meta.is_dir();
    if is_index {
        if !trailing_slash {
            return Lookup::AddSlash;
        }
        path = match inside(&root, &path.join("index.html")) {
            Ok(p) => p,
            Err(e) => return classify(&e),
        };
    } else if trailing_slash {
        // `/file.txt/` names a directory that does not exist.
        return Lookup::NotFound;
    }
    let file =
        match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path) {
            Ok(f) => f,
            Err(e) => return classify(&e),
        };
    match file.metadata() {
        Ok(m) if m.is_file() => {
            let small = (m.len() <= SMALL_FILE).then(|| read_whole(&file, m.len())).flatten();
            Lookup::File(file, m, is_index, small, path)
        }
        Ok(_) => Lookup::NotFound,
        Err(e) => Lookup::Error(format!("fstat `{}`: {e}", path.display())),
    }
}

/// Files up to this size are read at lookup and answered from memory: one chunk of the
/// response body.
pub(super) const SMALL_FILE: u64 = crate::message::CHUNK as u64;

/// The small-file cache: root and request path → content and response fields, trusted for
/// `TTL` (a file changed on disk is served at most that long in its old version, as with
/// nginx's open_file_cache_valid).
pub(super) mod cache {
    use std::collections::HashMap;
    use std::hash::BuildHasher;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::super::Fields;

    /// How long a cached lookup is trusted.
    const TTL: Duration = Duration::from_secs(1);
    /// Entries kept at most; at the limit the cache starts over.
    const MAX_ENTRIES: usize = 4096;
    /// Bytes kept at most, keys and contents (each content is at most one chunk, 64 KiB); at
    /// the limit the cache starts over. Keys are the paths as sent, so several spellings of one
    /// file are several entries: the budget bounds them all.
    pub(crate) const MAX_BYTES: usize = 32 << 20;
    /// Longest key cached: longer paths are served, not cached.
    pub(crate) const MAX_KEY: usize = 1024;

    pub(crate) struct Entry {
        /// The root and the path as sent, `\0` between them.
        key: Box<[u8]>,
        pub(crate) content: Bytes,
        pub(crate) fields: Fields,
    }

    impl Entry {
        fn is(&self, root: &[u8], path: &str) -> bool {
            self.key.len() == root.len() + 1 + path.len()
                && self.key.starts_with(root)
                && self.key.ends_with(path.as_bytes())
                && self.key[root.len()] == 0
        }
    }

    /// Entries by a keyed hash of their key, one per hash: a lookup hashes the root and path
    /// where they are, without building the key. Two keys with one hash take turns. The path,
    /// which the client chooses, goes through SipHash with a random key, so a client cannot aim
    /// for that; the root, which the operator chooses, through Fx, mixed in after (SipHash over
    /// a long root was 60 % of the hash, about 250 instructions a request).
    struct Cache {
        /// Each entry with the time it expires.
        map: HashMap<u64, (Instant, Arc<Entry>), rustc_hash::FxBuildHasher>,
        bytes: usize,
        hasher: std::hash::RandomState,
    }

    impl Cache {
        fn hash(&self, root: &[u8], path: &str) -> u64 {
            let mut fx = rustc_hash::FxHasher::default();
            std::hash::Hasher::write(&mut fx, root);
            self.hasher.hash_one(path) ^ std::hash::Hasher::finish(&fx)
        }
    }

    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

    /// Counts the times the cache started over, so that each thread's [`Front`] lets go of
    /// what the cache no longer holds.
    static GENERATION: AtomicU64 = AtomicU64::new(0);

    /// Slots in a thread's [`Front`].
    const FRONT_SLOTS: usize = 64;

    /// A thread's own copy of the entries it found lately, one per slot, the slot picked by
    /// a cheap hash of the path (and the root's address). A request for a hot file costs a
    /// hash of its path, a comparison of the key and a clock read; the shared cache behind it
    /// costs a lock, a keyed hash (SipHash: the path is the client's) and a probe, about 300
    /// instructions more. The cheap hash is safe here: colliding paths only take turns in a
    /// slot, each lookup is one slot, and a miss goes on to the shared cache. An entry keeps
    /// the expiry it has there. Beyond the cache's budget, a front keeps alive at most the
    /// `FRONT_SLOTS` entries it holds (each at most one 64 KiB chunk) after the cache replaced
    /// or dropped them; when the cache starts over, each front lets go of all it holds at its
    /// thread's next lookup.
    struct Front {
        generation: u64,
        slots: [Option<(Instant, Arc<Entry>)>; FRONT_SLOTS],
    }

    impl Front {
        const fn empty(generation: u64) -> Self {
            Self { generation, slots: [const { None }; FRONT_SLOTS] }
        }
    }

    thread_local! {
        static FRONT: std::cell::RefCell<Front> = const { std::cell::RefCell::new(Front::empty(0)) };
    }

    fn front_slot(root: &[u8], path: &str) -> usize {
        let mut fx = rustc_hash::FxHasher::default();
        std::hash::Hasher::write_usize(&mut fx, root.as_ptr() as usize);
        std::hash::Hasher::write(&mut fx, path.as_bytes());
        (std::hash::Hasher::finish(&fx) >> 58) as usize % FRONT_SLOTS
    }

    pub(crate) fn get(root: &Path, path: &str) -> Option<Arc<Entry>> {
        let root = root.as_os_str().as_bytes();
        let slot = front_slot(root, path);
        let generation = GENERATION.load(Ordering::Relaxed);
        let now = Instant::now();
        let found = FRONT.with_borrow_mut(|f| {
            if f.generation != generation {
                *f = Front::empty(generation);
            }
            match &f.slots[slot] {
                Some((until, e)) if now < *until && e.is(root, path) => Some(e.clone()),
                _ => None,
            }
        });
        if found.is_some() {
            return found;
        }
        let (until, e) = {
            let guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
            let c = guard.as_ref()?;
            let (until, e) = c.map.get(&c.hash(root, path))?;
            if now >= *until || !e.is(root, path) {
                return None;
            }
            (*until, e.clone())
        };
        FRONT.with_borrow_mut(|f| {
            if f.generation == generation {
                f.slots[slot] = Some((until, e.clone()));
            }
        });
        Some(e)
    }

    /// Keeps `content` and `fields` for `path` under `root` (unless the key is too long), and
    /// hands them back as the entry.
    pub(crate) fn put(root: &Path, path: &str, content: Bytes, fields: Fields) -> Arc<Entry> {
        let root = root.as_os_str().as_bytes();
        let mut key = Vec::with_capacity(root.len() + 1 + path.len());
        key.extend_from_slice(root);
        key.push(0);
        key.extend_from_slice(path.as_bytes());
        let size = key.len() + content.len();
        let e = Arc::new(Entry { key: key.into_boxed_slice(), content, fields });
        if e.key.len() > MAX_KEY {
            return e;
        }
        let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let c = guard.get_or_insert_with(|| Cache {
            map: HashMap::default(),
            bytes: 0,
            hasher: std::hash::RandomState::new(),
        });
        if c.map.len() >= MAX_ENTRIES || c.bytes + size > MAX_BYTES {
            // Starting over also hands the table's memory back, and the fronts' (at their
            // threads' next lookups).
            c.map = HashMap::default();
            c.bytes = 0;
            GENERATION.fetch_add(1, Ordering::Relaxed);
        }
        let h = c.hash(root, path);
        if let Some((_, old)) = c.map.insert(h, (Instant::now() + TTL, e.clone())) {
            c.bytes -= old.key.len() + old.content.len();
        }
        c.bytes += size;
        e
    }

    /// Entries and bytes held (for tests).
    #[cfg(test)]
    pub(crate) fn usage() -> (usize, usize) {
        let guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map_or((0, 0), |c| (c.map.len(), c.bytes))
    }
}

/// The first `len` bytes of `file`, if it has exactly that many.
pub(super) fn read_whole(file: &File, len: u64) -> Option<Bytes> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(Bytes::from(buf))
}

/// Canonicalizes `path` and checks it is `root` or below it; a path leading outside reports
/// `NotFound`, like a missing file.
pub(super) fn inside(root: &Path, path: &Path) -> io::Result<PathBuf> {
    let canon = path.canonicalize()?;
    if canon.starts_with(root) {
        Ok(canon)
    } else {
        Err(io::ErrorKind::NotFound.into())
    }
}
