//! A static file's encoded variants (`Content-Encoding: br`, `zstd`, `gzip`): a precompressed
//! sibling on disk (`app.js.br` beside `app.js`, not older than it), else the file compressed
//! once at the stored level and kept in memory for as long as that version of the file is
//! asked for, within `[compression] store_bytes`. A variant no smaller than the file is
//! remembered as not worth sending, so the file is not compressed again.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};

use super::lookup::{read_whole, SMALL_FILE};
use super::{Fields, Source};
use crate::config::{Codec, Compression};
use crate::handlers::conditional::Validators;
use crate::handlers::encoding;

/// One encoded variant of one version of a file.
pub(crate) struct Variant {
    /// The encoded bytes, in memory; `None` for a large precompressed sibling, read from
    /// `sibling` as it is sent.
    pub(crate) content: Option<Bytes>,
    sibling: Option<PathBuf>,
    /// Its fields: its own entity tag, `Content-Encoding`, `Vary`, its length.
    pub(crate) fields: Fields,
}

impl Variant {
    /// Where its bytes come from, for one response (`None`: the sibling went away or changed
    /// since; the identity is sent instead).
    pub(super) fn source(&self) -> Option<Source> {
        if let Some(c) = &self.content {
            return Some(Source::Memory(c.clone()));
        }
        let file = open_regular(self.sibling.as_deref()?)?;
        let len = file.metadata().ok()?.len();
        (len == self.fields.len).then_some(Source::File(file))
    }

    fn held(&self) -> usize {
        self.content.as_ref().map_or(0, Bytes::len) + 256
    }
}

/// What a variant was looked up by: the file's canonical path, its version (the identity's
/// entity tag) and the coding.
type Key = (PathBuf, String, Codec);

struct Store {
    map: HashMap<Key, Option<Arc<Variant>>>,
    bytes: usize,
}

static STORE: Mutex<Option<Store>> = Mutex::new(None);

fn stored(key: &Key) -> Option<Option<Arc<Variant>>> {
    let guard = STORE.lock().unwrap_or_else(|p| p.into_inner());
    guard.as_ref()?.map.get(key).cloned()
}

fn keep(key: Key, v: Option<Arc<Variant>>, budget: usize) {
    let size = key.0.as_os_str().len() + key.1.len() + v.as_ref().map_or(0, |v| v.held());
    if size > budget {
        return;
    }
    let mut guard = STORE.lock().unwrap_or_else(|p| p.into_inner());
    let s = guard.get_or_insert_with(|| Store { map: HashMap::new(), bytes: 0 });
    if s.bytes + size > budget {
        // At the budget the store starts over: the variants asked for again are made again
        // (what is asked for often is back at once; a least-recently-used order would cost a
        // list update per request for little).
        s.map = HashMap::new();
        s.bytes = 0;
    }
    s.bytes += size;
    if let Some(old) = s.map.insert(key, v) {
        s.bytes -= old.map_or(0, |v| v.held());
    }
}

/// The variant of the file of `f` in `codec` if it is known: `Some(None)` when none is worth
/// sending, `None` when it has not been made.
pub(super) fn known(f: &Fields, codec: Codec) -> Option<Option<Arc<Variant>>> {
    let memo = &f.variants[codec.index()];
    if let Some(v) = memo.get() {
        return Some(v.clone());
    }
    let key = (f.path.clone()?, f.v.etag.clone(), codec);
    let v = stored(&key)?;
    let _ = memo.set(v.clone());
    Some(v)
}

/// The variant of the file of `f` (whose identity is `src`) in `codec`, made now if it is not
/// known yet; `None` when there is none worth sending.
pub(super) async fn variant(cfg: &Compression, f: &Fields, src: &Source, codec: Codec) -> Option<Arc<Variant>> {
    if let Some(v) = known(f, codec) {
        return v;
    }
    let path = f.path.as_ref()?;
    let v = make(cfg, f, path, src, codec).await.map(Arc::new);
    keep((path.clone(), f.v.etag.clone(), codec), v.clone(), cfg.store_bytes);
    let _ = f.variants[codec.index()].set(v.clone());
    v
}

async fn make(cfg: &Compression, f: &Fields, path: &Path, src: &Source, codec: Codec) -> Option<Variant> {
    if cfg.precompressed {
        if let Some(v) = sibling(f, path, codec) {
            return Some(v);
        }
    }
    if f.len > cfg.max_file {
        return None;
    }
    let identity = match src {
        Source::Memory(b) => b.clone(),
        Source::File(file) => {
            let (file, len) = (file.try_clone().ok()?, f.len);
            tokio::task::spawn_blocking(move || read_whole(&file, len)).await.ok()??
        }
    };
    let level = cfg.levels(codec).stored;
    // Large files on the blocking pool: brotli at its stored level takes tens of milliseconds
    // per megabyte, which would hold every other connection of this worker.
    let encoded = if identity.len() as u64 > SMALL_FILE {
        tokio::task::spawn_blocking(move || encoding::compress(codec, level, &identity)).await.ok()?
    } else {
        encoding::compress(codec, level, &identity)
    };
    let encoded = match encoded {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(path = %path.display(), codec = codec.token(), "compression failed: {e}");
            return None;
        }
    };
    if encoded.len() as u64 >= f.len {
        return None;
    }
    let fields = f.variant(codec, encoded.len() as u64, None)?;
    Some(Variant { content: Some(Bytes::from(encoded)), sibling: None, fields })
}

/// `file.br` (`.zst`, `.gz`) beside the file, when it is a regular file not older than it.
fn sibling(f: &Fields, path: &Path, codec: Codec) -> Option<Variant> {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(codec.extension());
    let sibling = PathBuf::from(name);
    let file = open_regular(&sibling)?;
    let meta = file.metadata().ok()?;
    let mtime = meta.modified().ok()?;
    if mtime.duration_since(UNIX_EPOCH).ok()?.as_secs() < f.v.last_modified {
        tracing::debug!(path = %sibling.display(), "precompressed file older than its original: not served");
        return None;
    }
    // The sibling's own version names the variant: it may change while the original does not.
    let own = Validators::new(meta.len(), mtime, std::time::SystemTime::now());
    let fields = f.variant(codec, meta.len(), Some(&own.etag))?;
    let content = (meta.len() <= SMALL_FILE).then(|| read_whole(&file, meta.len())).flatten();
    let sibling = content.is_none().then_some(sibling);
    Some(Variant { content, sibling, fields })
}

/// `path` opened for reading if it is a regular file (not through a symbolic link).
fn open_regular(path: &Path) -> Option<File> {
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

impl Fields {
    /// The fields of this file's variant in `codec`, `len` bytes long, tagged with `tag` (a
    /// precompressed sibling's own) or else this file's tag, with the coding's name after it.
    fn variant(&self, codec: Codec, len: u64, tag: Option<&str>) -> Option<Self> {
        let mut v = self.v.clone();
        v.etag = format!("{}-{}", tag.unwrap_or(&self.v.etag), codec.token());
        let etag = v.etag_header();
        let mut full = HeaderMap::with_capacity(8);
        full.insert(header::ETAG, etag.clone());
        full.insert(header::LAST_MODIFIED, v.last_modified_header());
        full.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        full.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        full.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.ctype));
        full.insert(header::CONTENT_ENCODING, HeaderValue::from_static(codec.token()));
        full.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        full.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        Some(Self {
            v,
            len,
            ctype: self.ctype,
            etag,
            full,
            wire: std::sync::OnceLock::new(),
            varies: true,
            path: None,
            variants: Default::default(),
        })
    }
}
