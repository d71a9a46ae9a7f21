//! File-system lookup (blocking system calls on local metadata; see `serve`): opening a file
//! beneath the root, and the small-file cache.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

pub(super) enum Lookup {
    /// The open file, its metadata, whether it is a directory's `index.html`, and its whole
    /// content when it is small (read here, on the blocking pool, to save a second trip).
    File(File, Metadata, bool, Option<Bytes>),
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
            Lookup::File(file, m, is_index, small)
        }
        Ok(_) => Lookup::NotFound,
        Err(e) => Lookup::Error(format!("fstat `{}`: {e}", path.display())),
    }
}

/// Files up to this size are read at lookup and answered from memory: one chunk of the
/// response body.
pub(super) const SMALL_FILE: u64 = crate::app::http::CHUNK as u64;

/// The small-file cache: path → content and metadata, trusted for `TTL` (a file changed on disk
/// is served at most that long in its old version, as with nginx's open_file_cache_valid).
pub(super) mod cache {
    use std::collections::HashMap;
    use std::fs::Metadata;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    /// How long a cached lookup is trusted.
    const TTL: Duration = Duration::from_secs(1);
    /// Entries kept at most; at the limit the cache starts over.
    const MAX_ENTRIES: usize = 4096;
    /// Bytes kept at most, keys and contents (each content is at most one chunk, 64 KiB); at
    /// the limit the cache starts over. Keys are canonical (the decoded, normalised path), so
    /// spellings of one file share one entry.
    pub(crate) const MAX_BYTES: usize = 32 << 20;
    /// Longest key cached: longer paths are served, not cached.
    pub(crate) const MAX_KEY: usize = 1024;

    pub(crate) struct Entry {
        pub(crate) content: Bytes,
        pub(crate) meta: Metadata,
        pub(crate) ctype: &'static str,
    }

    /// Key (root and canonical path) → when it was looked up, and what was found; and the
    /// bytes held.
    struct Cache {
        map: HashMap<String, (Instant, Arc<Entry>)>,
        bytes: usize,
    }

    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

    pub(crate) fn get(key: &str) -> Option<Arc<Entry>> {
        let guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let (at, e) = guard.as_ref()?.map.get(key)?;
        (at.elapsed() < TTL).then(|| e.clone())
    }

    pub(crate) fn put(key: String, e: Entry) {
        if key.len() > MAX_KEY {
            return;
        }
        let size = key.len() + e.content.len();
        let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let c = guard.get_or_insert_with(|| Cache { map: HashMap::new(), bytes: 0 });
        if c.map.len() >= MAX_ENTRIES || c.bytes + size > MAX_BYTES {
            // Starting over also hands the table's memory back.
            c.map = HashMap::new();
            c.bytes = 0;
        }
        if let Some((_, old)) = c.map.insert(key.clone(), (std::time::Instant::now(), Arc::new(e))) {
            c.bytes -= key.len() + old.content.len();
        }
        c.bytes += size;
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
