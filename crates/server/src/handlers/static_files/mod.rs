//! Static files under a root directory: GET and HEAD, validators and conditional requests
//! (RFC 9110 §8.8, §13), byte ranges (RFC 9110 §14), directories via `index.html`.
//!
//! Decisions:
//! - **Path mapping.** The path is split on `/` *before* percent-decoding, then each segment is
//!   decoded. A segment that decodes to something containing `/` (`%2F`) or NUL can name no
//!   file, so such requests get 404 (like Apache's `AllowEncodedSlashes Off`), and `..%2f`
//!   can never become a traversal. Decoded `.` and `..` segments (so also `%2e%2e`) are applied
//!   as in RFC 3986 §5.2.4; a `..` at the root stays at the root. Segments that are not valid
//!   UTF-8 after decoding get 400. Dotfiles (a segment starting with `.`) are hidden (404)
//!   except `/.well-known/` (RFC 8615), so `.git` or `.env` under a root never leak.
//! - **Containment.** The candidate path is canonicalized and must stay under the canonical
//!   root; a symlink leading outside answers 404, the same as a missing file, so probing
//!   reveals nothing. The file is opened with `O_NOFOLLOW` and checked to be a regular file
//!   through the open descriptor.
//! - **ETag.** Strong, `"<mtime in ns, hex>-<size, hex>"` — nanosecond mtimes make a change
//!   that keeps both size and mtime practically impossible, and a strong tag lets `If-Range`
//!   and `If-Match` work (RFC 9110 §8.8.3.2). No inode, so replicas of the same tree agree.
//! - **Ranges.** Only for GET. A malformed `Range`, an unknown unit, more than
//!   [`MAX_RANGE_SPECS`] specs or more than [`MAX_RANGES`] ranges left after coalescing →
//!   the header is ignored and the whole file is sent with 200 (RFC 9110 §14.2 allows ignoring
//!   such requests; a full response is always correct). Overlapping ranges and ranges less
//!   than [`COALESCE_GAP`] bytes apart are merged (§14.6); the parts keep the order in which
//!   their first range was requested.
//! - Directory listings are not generated; a directory without `index.html` is 404.

use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use sha2::{Digest, Sha256};

use crate::config::{Codec, Compression};
use crate::handlers::encoding;
use crate::message::{Body, Head, Proto, Request, Response, SharedHead};

mod lookup;
mod path;
mod range;
mod variants;

use super::conditional::*;
use lookup::*;
use path::*;
use range::*;

/// The handler of a route with `root`: the files under a directory.
pub(crate) struct Files {
    root: PathBuf,
    /// `[compression]`, when the route's responses may be compressed.
    compression: Option<std::sync::Arc<Compression>>,
}

impl Files {
    pub(crate) fn new(root: PathBuf, compression: Option<std::sync::Arc<Compression>>) -> Self {
        Self { root, compression }
    }

    /// Serves `req` from the files under the root.
    pub(crate) async fn serve(&self, req: &Request) -> Response {
        serve(self, req).await
    }

    /// Whether a request field named `name` (lower case) can change the answer to a GET or
    /// HEAD ([`SELECTING`]).
    pub(crate) fn selects(name: &[u8]) -> bool {
        SELECTING.iter().any(|s| s.as_str().as_bytes() == name)
    }

    /// What [`Files::serve`] answers to a GET (or, with `head_only`, a HEAD) for `path` that
    /// carries none of the fields [`Files::selects`] and `accept` as its one `Accept-Encoding`
    /// (if any), when the file is in the small-file cache and, if the answer is an encoded
    /// variant, that variant is known: the shared whole-file fields and the whole content
    /// (none for HEAD). `None` otherwise.
    pub(crate) fn cached_whole(
        &self,
        path: &str,
        head_only: bool,
        accept: Option<&[u8]>,
    ) -> Option<(SharedHead, Bytes)> {
        let hit = cache::get(&self.root, path)?;
        let f = &hit.fields;
        let codec =
            self.compression.as_deref().filter(|_| f.varies).and_then(|c| encoding::negotiate(accept, &c.codecs));
        let Some(codec) = codec else { return Some(whole(f, &hit.content, head_only)) };
        match f.variants[codec.index()].get()? {
            Some(v) => {
                let answer = whole(&v.fields, v.content.as_ref()?, head_only);
                if !head_only {
                    crate::message::metrics::compressed(codec.index(), f.len, v.fields.len);
                }
                Some(answer)
            }
            // None worth sending: the file as it is.
            None => Some(whole(f, &hit.content, head_only)),
        }
    }
}

/// Serves `req` from the files of `files`. The lookup and the answer happen at once; only an
/// encoded variant that is not known yet (the first request for it of a file version) waits,
/// boxed: its future (a read and a compression on the blocking pool) would otherwise grow
/// every request's.
async fn serve(files: &Files, req: &Request) -> Response {
    let (src, held, codec) = match lookup(files, req) {
        Step::Done(resp) => return resp,
        Step::Make(src, held, codec) => (src, held, codec),
    };
    let made = Box::pin(make_then_respond(files, req, src, held, codec));
    made.await
}

/// The answer to `req`, or the variant to make before it can be given.
enum Step {
    Done(Response),
    Make(Source, Held, Codec),
}

/// A file's fields while its variant is made: the cache entry's, or the request's own.
enum Held {
    Entry(std::sync::Arc<cache::Entry>),
    Own(Box<Fields>),
}

impl Held {
    fn fields(&self) -> &Fields {
        match self {
            Self::Entry(e) => &e.fields,
            Self::Own(f) => f,
        }
    }
}

fn lookup(files: &Files, req: &Request) -> Step {
    let root = &files.root;
    if req.method != Method::GET && req.method != Method::HEAD {
        let mut r = Response::text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Step::Done(r);
    }
    // The lookup (canonicalize, stat, open, and reading a small file) runs right here on the
    // worker, as nginx and h2o do: on local, cached metadata it takes microseconds, while a hop
    // to the blocking pool costs two context switches per request (it cut small-file
    // throughput about fivefold). Large bodies are still read on the blocking pool. Small
    // files are kept in memory for SMALL_FILE_TTL (path checks, open and read were half the
    // time of a small-file request).
    // Keyed by the path as sent: a hit skips resolving it (it resolved the same way when it
    // was put, and the entry is trusted only for the cache's TTL).
    if let Some(hit) = cache::get(root, &req.path) {
        return negotiated(files, req, Source::Memory(hit.content.clone()), Held::Entry(hit));
    }
    let target = match resolve_path(&req.path) {
        Ok(t) => t,
        Err(PathError::BadRequest(why)) => {
            return Step::Done(Response::text(StatusCode::BAD_REQUEST, format!("{why}\n")))
        }
        Err(PathError::NotFound) => return Step::Done(not_found()),
    };
    let found = open_beneath(root, &target.segments, target.trailing_slash);
    Step::Done(match found {
        Lookup::File(file, meta, is_index, small, path) => {
            let name = if is_index { Some("index.html") } else { target.segments.last().map(String::as_str) };
            let ctype = content_type(name);
            let varies = files
                .compression
                .as_deref()
                .is_some_and(|c| c.compresses(ctype.as_bytes()) && meta.len() >= c.min_size);
            let mut fields = Fields::new(&meta, ctype, SystemTime::now());
            if varies {
                fields.varies = true;
                fields.path = Some(path);
                fields.full.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            }
            return match small {
                // Only the canonical spelling of a path is cached: one entry per file, however
                // many spellings clients send (each would hold its own copy: see W6 in
                // docs/hardening.md).
                Some(content) if canonical_spelling(&req.path, &target) => {
                    let entry = cache::put(root, &req.path, content, fields);
                    negotiated(files, req, Source::Memory(entry.content.clone()), Held::Entry(entry))
                }
                Some(content) => negotiated(files, req, Source::Memory(content), Held::Own(Box::new(fields))),
                None => negotiated(files, req, Source::File(file), Held::Own(Box::new(fields))),
            };
        }
        Lookup::AddSlash => redirect_with_slash(&target.segments, req.query.as_deref()),
        Lookup::NotFound => not_found(),
        Lookup::Forbidden => Response::text(StatusCode::FORBIDDEN, "forbidden\n"),
        Lookup::Exhausted => {
            tracing::warn!(
                "static file not opened: out of file descriptors (raise RLIMIT_NOFILE or lower limits.max_connections)"
            );
            let mut r = Response::text(StatusCode::SERVICE_UNAVAILABLE, "temporarily out of resources\n");
            r.headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
        Lookup::Error(e) => {
            tracing::warn!("static file error: {e}");
            Response::text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
        }
    })
}

/// Whether `path` is the canonical spelling of `target`: each segment percent-encoded as
/// [`SEGMENT`] encodes it (as browsers do), no empty, `.` or `..` segments.
fn canonical_spelling(path: &str, target: &Target) -> bool {
    let mut rest = path;
    for seg in &target.segments {
        let Some(r) = rest.strip_prefix('/') else { return false };
        rest = r;
        for piece in percent_encoding::utf8_percent_encode(seg, SEGMENT) {
            let Some(r) = rest.strip_prefix(piece) else { return false };
            rest = r;
        }
    }
    if target.trailing_slash {
        rest == "/"
    } else {
        rest.is_empty()
    }
}

fn not_found() -> Response {
    Response::text(StatusCode::NOT_FOUND, "not found\n")
}

// ---------------------------------------------------------------------------------------------
// Responses.

/// Content type by file extension; unknown → `application/octet-stream`.
pub(crate) fn content_type(name: Option<&str>) -> &'static str {
    let ext = name.and_then(|n| n.rsplit_once('.')).map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "bmp" => "image/bmp",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mp3" => "audio/mpeg",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        _ => "application/octet-stream",
    }
}

/// What every response for one file version repeats: its validators and their header values.
/// A cached small file builds them once per cache entry, not per request.
pub(crate) struct Fields {
    v: Validators,
    len: u64,
    ctype: &'static str,
    etag: HeaderValue,
    /// The header section of a whole-file response (200, GET or HEAD): cloned, not rebuilt.
    full: HeaderMap,
    /// The same in the HTTP/2 and HTTP/3 engines' form, made by the first such response and
    /// shared by the others over those protocols (see `Response::head`).
    wire: std::sync::OnceLock<SharedHead>,
    /// Whether the answer depends on `Accept-Encoding` (the type is compressed and the file
    /// long enough): then every answer says `Vary: accept-encoding`.
    varies: bool,
    /// The file's canonical path, for its variants (`variants.rs`); only when it `varies`.
    path: Option<PathBuf>,
    /// Its encoded variants by `Codec::index`, once looked up: `Some(None)` when none is worth
    /// sending.
    variants: [std::sync::OnceLock<Option<std::sync::Arc<variants::Variant>>>; 3],
}

impl Fields {
    /// The fields of a file with metadata `meta`, served as `ctype`, at `now` (Last-Modified
    /// is clamped to it, and within its second it is a weak validator: RFC 9110 §8.8.2).
    pub(crate) fn new(meta: &Metadata, ctype: &'static str, now: SystemTime) -> Self {
        let len = meta.len();
        let mtime = meta
            .modified()
            .unwrap_or_else(|_| UNIX_EPOCH + Duration::from_secs(u64::try_from(meta.mtime()).unwrap_or(0)));
        let v = Validators::new(len, mtime, now);
        let etag = v.etag_header();
        let mut full = HeaderMap::with_capacity(6);
        full.insert(header::ETAG, etag.clone());
        full.insert(header::LAST_MODIFIED, v.last_modified_header());
        full.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        full.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        full.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
        full.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        Self {
            v,
            len,
            ctype,
            etag,
            full,
            wire: std::sync::OnceLock::new(),
            varies: false,
            path: None,
            variants: Default::default(),
        }
    }
}

impl Fields {
    /// The whole-file fields in the HTTP/2 and HTTP/3 engines' form, shared.
    fn wire(&self) -> SharedHead {
        self.wire.get_or_init(|| std::sync::Arc::new(sluice_http::response_fields(&self.full))).clone()
    }
}

/// The request fields besides method and path that a static answer depends on: the
/// preconditions (RFC 9110 §13.1) and the range (§14.2). Without any, the answer to GET or
/// HEAD is the whole file.
const SELECTING: [HeaderName; 6] = [
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// The answer to a GET (or, with `head_only`, a HEAD) for the whole of a file in memory, as
/// [`respond`] gives it over HTTP/2 and HTTP/3: the shared whole-file fields and the content.
fn whole(f: &Fields, content: &Bytes, head_only: bool) -> (SharedHead, Bytes) {
    let body = if head_only {
        Bytes::new()
    } else {
        // As `Source::section(0, len)`: the content is the file's length (at most a chunk).
        let len = usize::try_from(f.len).map_or(content.len(), |l| l.min(content.len()));
        content.slice(..len)
    };
    (f.wire(), body)
}

/// [`respond`] with the representation the request's `Accept-Encoding` selects: an encoded
/// variant of a file whose type is compressed (`Fields::varies`), else the file as it is. A
/// request for a range gets ranges of the file as it is (RFC 9110 §14: ranges of an encoded
/// variant would be ranges of bytes no cache could combine with the identity's).
fn negotiated(files: &Files, req: &Request, src: Source, held: Held) -> Step {
    let f = held.fields();
    if let Some(codec) = wanted(files, req, f) {
        match variants::known(f, codec) {
            Some(Some(v)) => {
                if let Some(vsrc) = v.source() {
                    counted(req, codec, f, &v.fields);
                    return Step::Done(respond(req, vsrc, &v.fields));
                }
            }
            // None worth sending.
            Some(None) => {}
            None => return Step::Make(src, held, codec),
        }
    }
    Step::Done(respond(req, src, f))
}

/// A GET answered with the variant of `f` whose fields are `v`, in the metrics.
fn counted(req: &Request, codec: Codec, f: &Fields, v: &Fields) {
    if req.method == Method::GET {
        crate::message::metrics::compressed(codec.index(), f.len, v.len);
        req.exchange.compressed(codec.index(), f.len, v.len);
    }
}

/// The coding `req` gets for the file of `f`, if it gets one.
fn wanted(files: &Files, req: &Request, f: &Fields) -> Option<Codec> {
    let cfg = files.compression.as_deref().filter(|_| f.varies && !req.headers.contains_key(header::RANGE))?;
    encoding::negotiate(req.headers.get_all(header::ACCEPT_ENCODING).iter().map(HeaderValue::as_bytes), &cfg.codecs)
}

/// Make the variant of `held`'s file in `codec`, then answer with it (or, if none is worth
/// sending, with the file as it is).
async fn make_then_respond(files: &Files, req: &Request, src: Source, held: Held, codec: Codec) -> Response {
    let f = held.fields();
    if let Some(cfg) = files.compression.as_deref() {
        if let Some(v) = variants::variant(cfg, f, &src, codec).await {
            if let Some(vsrc) = v.source() {
                counted(req, codec, f, &v.fields);
                return respond(req, vsrc, &v.fields);
            }
        }
    }
    respond(req, src, f)
}

fn respond(req: &Request, src: Source, f: &Fields) -> Response {
    let (v, len, ctype) = (&f.v, f.len, f.ctype);
    // One pass over the request's field names decides whether any precondition or range
    // applies: most requests carry none, and each lookup below is a hash probe.
    let conditional = req.headers.keys().any(|n| SELECTING.contains(n));
    let is_head = req.method == Method::HEAD;
    let ranges = if !conditional {
        Ranges::Full
    } else {
        let honor_range = match evaluate(&req.headers, v) {
            Precondition::NotModified => {
                // RFC 9110 §15.4.5: repeat ETag and Vary; no content metadata.
                let mut headers = HeaderMap::with_capacity(2);
                headers.insert(header::ETAG, f.etag.clone());
                if f.varies {
                    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
                }
                return Response::new(StatusCode::NOT_MODIFIED, headers, Body::Empty);
            }
            Precondition::Failed => {
                let mut headers = HeaderMap::with_capacity(2);
                headers.insert(header::ETAG, f.etag.clone());
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
                return Response::new(StatusCode::PRECONDITION_FAILED, headers, Body::Empty);
            }
            Precondition::Proceed { honor_range } => honor_range,
        };
        // RFC 9110 §14.2: Range is defined for GET only.
        match req.headers.get(header::RANGE) {
            Some(r) if honor_range && !is_head => match r.to_str() {
                Ok(s) => parse_ranges(s, len),
                Err(_) => Ranges::Full,
            },
            _ => Ranges::Full,
        }
    };
    // ETag, Last-Modified, Accept-Ranges, nosniff, and the whole file's type and length; the
    // other answers change what differs.
    match ranges {
        Ranges::Full => {
            let body = if is_head {
                Body::Empty
            } else {
                match src.section(0, len) {
                    Ok(b) => b,
                    Err(e) => return internal_error(&e),
                }
            };
            if req.proto == Proto::Http1 {
                Response::new(StatusCode::OK, f.full.clone(), body)
            } else {
                // HTTP/2 and HTTP/3: the fields as their engines take them, shared.
                Response { status: StatusCode::OK, head: Some(Head::Shared(f.wire())), headers: HeaderMap::new(), body }
            }
        }
        Ranges::Unsatisfiable => {
            let mut headers = f.full.clone();
            headers.remove(header::CONTENT_TYPE);
            headers.insert(header::CONTENT_RANGE, content_range_value(&format!("bytes */{len}")));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            Response::new(StatusCode::RANGE_NOT_SATISFIABLE, headers, Body::Empty)
        }
        Ranges::Partial(parts) if parts.len() == 1 => {
            // Index 0 exists: this arm requires exactly one part.
            let (first, last) = parts[0];
            let n = last - first + 1;
            let mut headers = f.full.clone();
            headers.insert(header::CONTENT_RANGE, content_range_value(&format!("bytes {first}-{last}/{len}")));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            match src.section(first, n) {
                Ok(body) => Response::new(StatusCode::PARTIAL_CONTENT, headers, body),
                Err(e) => internal_error(&e),
            }
        }
        Ranges::Partial(parts) => multipart(&src, len, ctype, &parts, v, f.full.clone()),
    }
}

/// Where a response's bytes come from: an open file (streamed) or memory (small files).
enum Source {
    File(File),
    Memory(Bytes),
}

impl Source {
    /// A body for `len` bytes from `offset` (within bounds: callers clamp ranges to the length).
    fn section(&self, offset: u64, len: u64) -> io::Result<Body> {
        match self {
            Self::File(f) => Ok(Body::File { file: f.try_clone()?, offset, len }),
            Self::Memory(b) => {
                let start = usize::try_from(offset).map_err(io::Error::other)?.min(b.len());
                let end = usize::try_from(offset + len).map_err(io::Error::other)?.min(b.len());
                Ok(Body::Full(b.slice(start..end)))
            }
        }
    }
}

fn internal_error(e: &io::Error) -> Response {
    tracing::warn!("static file error: {e}");
    Response::text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
}

fn content_range_value(s: &str) -> HeaderValue {
    // Digits, `bytes`, `-`, `/`, `*` and spaces: always valid.
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
}

/// A boundary that cannot plausibly occur in the file (RFC 2046 §5.1.1: at most 70 chars).
fn boundary(v: &Validators) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = Sha256::new();
    h.update(v.etag.as_bytes());
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0).to_le_bytes());
    let digest = h.finalize();
    let mut s = String::from("sluice-");
    for b in &digest[..12] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// 206 with `multipart/byteranges` (RFC 9110 §14.6): each part has its own Content-Type and
/// Content-Range; file data is streamed from duplicated descriptors, never read whole.
fn multipart(
    src: &Source,
    len: u64,
    ctype: &str,
    parts: &[(u64, u64)],
    v: &Validators,
    mut headers: HeaderMap,
) -> Response {
    let b = boundary(v);
    let mut body = VecDeque::with_capacity(parts.len() * 2 + 1);
    for (i, &(first, last)) in parts.iter().enumerate() {
        let lead = if i == 0 { "" } else { "\r\n" };
        let head = format!("{lead}--{b}\r\nContent-Type: {ctype}\r\nContent-Range: bytes {first}-{last}/{len}\r\n\r\n");
        let part = match src.section(first, last - first + 1) {
            Ok(b) => b,
            Err(e) => return internal_error(&e),
        };
        body.push_back(Body::Full(Bytes::from(head)));
        body.push_back(part);
    }
    body.push_back(Body::Full(Bytes::from(format!("\r\n--{b}--\r\n"))));
    let body = Body::Concat(body);
    let total = body.len().unwrap_or(0);
    let ct = format!("multipart/byteranges; boundary={b}");
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&ct).unwrap_or_else(|_| HeaderValue::from_static("multipart/byteranges")),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    Response::new(StatusCode::PARTIAL_CONTENT, headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Proto, RequestBody};
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    fn req(method: Method, path: &str, hdrs: &[(&str, &str)]) -> Request {
        let mut headers = HeaderMap::new();
        for (k, v) in hdrs {
            headers.append(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (path.to_string(), None),
        };
        Request {
            proto: Proto::Http1,
            peer: "127.0.0.1:1".parse().unwrap(),
            upgrade: None,
            websocket: false,
            connect: None,
            exchange: Default::default(),
            method,
            authority: "localhost".into(),
            path,
            query,
            headers,
            tls: false,
            body: RequestBody::empty(),
            malformed: None,
        }
    }

    async fn collect(mut body: Body) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(chunk) = body.next_chunk(1000).await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    fn hdr<'a>(r: &'a Response, name: &str) -> &'a str {
        r.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
    }

    /// root/ with files, plus secret.txt next to root.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::create_dir_all(root.join("empty")).unwrap();
        fs::create_dir_all(root.join(".well-known")).unwrap();
        fs::write(root.join("hello.txt"), "hello world").unwrap();
        fs::write(root.join("sub/index.html"), "<p>sub</p>").unwrap();
        fs::write(root.join("a b.css"), "body{}").unwrap();
        fs::write(root.join(".env"), "SECRET=1").unwrap();
        fs::write(root.join(".well-known/x.json"), "{}").unwrap();
        fs::write(root.join("zero.bin"), "").unwrap();
        fs::write(dir.path().join("secret.txt"), "top secret").unwrap();
        std::os::unix::fs::symlink("../secret.txt", root.join("escape.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("escape-dir")).unwrap();
        std::os::unix::fs::symlink("hello.txt", root.join("alias.txt")).unwrap();
        (dir, root)
    }

    async fn get(root: &Path, path: &str, hdrs: &[(&str, &str)]) -> (Response, Vec<u8>) {
        let mut r = Files::new(root.to_path_buf(), None).serve(&req(Method::GET, path, hdrs)).await;
        let body = std::mem::replace(&mut r.body, Body::Empty);
        (r, collect(body).await)
    }

    #[test]
    fn resolve_path_rules() {
        let t = |p: &str| resolve_path(p).map(|t| (t.segments.join("|"), t.trailing_slash));
        assert_eq!(t("/"), Ok((String::new(), true)));
        assert_eq!(t("/a/b.txt"), Ok(("a|b.txt".into(), false)));
        assert_eq!(t("/a//b/"), Ok(("a|b".into(), true)));
        assert_eq!(t("/a/./b/../c"), Ok(("a|c".into(), false)));
        assert_eq!(t("/../../etc/passwd"), Ok(("etc|passwd".into(), false)));
        assert_eq!(t("/%2e%2e/%2E%2E/etc/passwd"), Ok(("etc|passwd".into(), false)));
        assert_eq!(t("/a/.."), Ok((String::new(), true)));
        assert_eq!(t("/a%20b"), Ok(("a b".into(), false)));
        assert_eq!(t("/caf%C3%A9"), Ok(("café".into(), false)));
        assert_eq!(t("/..%2fetc/passwd"), Err(PathError::NotFound));
        assert_eq!(t("/a%2Fb"), Err(PathError::NotFound));
        assert_eq!(t("/a%00b"), Err(PathError::NotFound));
        assert_eq!(t("/.env"), Err(PathError::NotFound));
        assert_eq!(t("/a/.git/config"), Err(PathError::NotFound));
        assert_eq!(t("/a/.well-known/x"), Err(PathError::NotFound));
        assert_eq!(t("/.well-known/acme"), Ok((".well-known|acme".into(), false)));
        assert!(matches!(t("/%ff"), Err(PathError::BadRequest(_))));
        assert!(matches!(t("*"), Err(PathError::BadRequest(_))));
        assert!(matches!(t(""), Err(PathError::BadRequest(_))));
    }

    #[test]
    fn range_parsing() {
        use Ranges::*;
        let p = parse_ranges;
        assert_eq!(p("bytes=0-4", 10), Partial(vec![(0, 4)]));
        assert_eq!(p("Bytes = 0-4", 10), Partial(vec![(0, 4)]));
        assert_eq!(p("bytes=5-", 10), Partial(vec![(5, 9)]));
        assert_eq!(p("bytes=-3", 10), Partial(vec![(7, 9)]));
        assert_eq!(p("bytes=-30", 10), Partial(vec![(0, 9)]));
        assert_eq!(p("bytes=0-99999999999999999999999", 10), Partial(vec![(0, 9)]));
        assert_eq!(p("bytes=8-20", 10), Partial(vec![(8, 9)]));
        assert_eq!(p("bytes=10-", 10), Unsatisfiable);
        assert_eq!(p("bytes=-0", 10), Unsatisfiable);
        assert_eq!(p("bytes=99999999999999999999999-", 10), Unsatisfiable);
        assert_eq!(p("bytes=10-, 20-30", 10), Unsatisfiable);
        assert_eq!(p("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(p("bytes=-5", 0), Full);
        // Invalid → ignored.
        assert_eq!(p("bytes=5-4", 10), Full);
        assert_eq!(p("bytes=a-b", 10), Full);
        assert_eq!(p("bytes=+1-2", 10), Full);
        assert_eq!(p("bytes=1", 10), Full);
        assert_eq!(p("bytes=", 10), Full);
        assert_eq!(p("bytes=,,", 10), Full);
        assert_eq!(p("items=0-1", 10), Full);
        assert_eq!(p("0-1", 10), Full);
        // Empty elements ignored; unsatisfiable members dropped.
        assert_eq!(p("bytes=, 0-1 ,, 50-60", 10), Partial(vec![(0, 1)]));
        // Multiple: order kept, overlapping and close ranges merged.
        assert_eq!(p("bytes=500-600,0-10", 1000), Partial(vec![(500, 600), (0, 10)]));
        assert_eq!(p("bytes=0-10,5-20", 1000), Partial(vec![(0, 20)]));
        assert_eq!(p("bytes=0-10,50-60", 1000), Partial(vec![(0, 60)]));
        assert_eq!(p("bytes=900-950,0-10,5-20,-50", 1000), Partial(vec![(900, 999), (0, 20)]));
        // Caps.
        let many: Vec<String> = (0..17).map(|i| format!("{}-{}", i * 200, i * 200 + 1)).collect();
        assert_eq!(p(&format!("bytes={}", many.join(",")), 100_000), Full);
        let ok: Vec<String> = (0..16).map(|i| format!("{}-{}", i * 200, i * 200 + 1)).collect();
        assert!(matches!(p(&format!("bytes={}", ok.join(",")), 100_000), Partial(v) if v.len() == 16));
        let overlapping = vec!["0-1"; 64].join(",");
        assert_eq!(p(&format!("bytes={overlapping}"), 10), Partial(vec![(0, 1)]));
        let too_many = vec!["0-1"; 65].join(",");
        assert_eq!(p(&format!("bytes={too_many}"), 10), Full);
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn tag_lists() {
        let p = |v: &[&str]| {
            let pairs: Vec<(&str, &str)> = v.iter().map(|s| ("if-none-match", *s)).collect();
            parse_tag_list(&hm(&pairs), &header::IF_NONE_MATCH)
        };
        assert_eq!(p(&[]), None);
        assert_eq!(p(&["*"]), Some(TagList::Any));
        let l = p(&[r#""a", W/"b""#, r#""c,d""#]).unwrap();
        assert!(l.strong_match("a") && !l.strong_match("b") && l.weak_match("b") && l.strong_match("c,d"));
        assert_eq!(p(&["a"]), Some(TagList::Invalid));
        assert_eq!(p(&[r#""a" "b""#]), Some(TagList::Invalid));
        assert_eq!(p(&[r#""a", *"#]), Some(TagList::Invalid));
        assert_eq!(p(&[r#""a"#]), Some(TagList::Invalid));
        assert_eq!(p(&[" , "]), Some(TagList::Invalid));
    }

    #[test]
    fn precondition_order() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let v = Validators::new(5, now - Duration::from_secs(100), now);
        let tag = format!("\"{}\"", v.etag);
        let lm = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(v.last_modified));
        let older = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(v.last_modified - 10));
        let e = |h: &[(&str, &str)]| evaluate(&hm(h), &v);
        let go = Precondition::Proceed { honor_range: true };
        assert_eq!(e(&[]), go);
        assert_eq!(e(&[("if-match", &tag)]), go);
        assert_eq!(e(&[("if-match", "*")]), go);
        assert_eq!(e(&[("if-match", "\"nope\"")]), Precondition::Failed);
        assert_eq!(e(&[("if-match", &format!("W/{tag}"))]), Precondition::Failed, "If-Match is strong");
        assert_eq!(e(&[("if-unmodified-since", &older)]), Precondition::Failed);
        assert_eq!(e(&[("if-unmodified-since", &lm)]), go);
        assert_eq!(e(&[("if-match", &tag), ("if-unmodified-since", &older)]), go, "IUS ignored with If-Match");
        assert_eq!(e(&[("if-unmodified-since", "garbage")]), go);
        assert_eq!(e(&[("if-none-match", &tag)]), Precondition::NotModified);
        assert_eq!(e(&[("if-none-match", &format!("W/{tag}"))]), Precondition::NotModified, "weak comparison");
        assert_eq!(e(&[("if-none-match", "*")]), Precondition::NotModified);
        assert_eq!(e(&[("if-modified-since", &lm)]), Precondition::NotModified);
        assert_eq!(e(&[("if-modified-since", &older)]), go);
        assert_eq!(e(&[("if-none-match", "\"x\""), ("if-modified-since", &lm)]), go, "IMS ignored with INM");
        assert_eq!(e(&[("if-match", "\"x\""), ("if-none-match", &tag)]), Precondition::Failed, "412 first");
        assert_eq!(e(&[("if-range", &tag)]), go);
        assert_eq!(e(&[("if-range", &lm)]), go);
        let stale = Precondition::Proceed { honor_range: false };
        assert_eq!(e(&[("if-range", "\"other\"")]), stale);
        assert_eq!(e(&[("if-range", &format!("W/{tag}"))]), stale);
        assert_eq!(e(&[("if-range", &older)]), stale);
        // A Last-Modified within the current second is weak: no If-Range by date.
        let fresh = Validators::new(5, now, now);
        assert!(!fresh.lm_strong);
        assert_eq!(evaluate(&hm(&[("if-range", &httpdate::fmt_http_date(now))]), &fresh), stale);
        // Future mtimes are clamped to now.
        let future = Validators::new(5, now + Duration::from_secs(1000), now);
        assert_eq!(future.last_modified, 1_700_000_000);
    }

    #[test]
    fn content_types() {
        let ct = |n: &str| content_type(Some(n));
        assert_eq!(ct("a.HTML"), "text/html; charset=utf-8");
        assert_eq!(ct("x.tar.gz"), "application/gzip");
        assert_eq!(ct("m.mjs"), "text/javascript; charset=utf-8");
        assert_eq!(ct("f.woff2"), "font/woff2");
        assert_eq!(ct("README"), "application/octet-stream");
        assert_eq!(content_type(None), "application/octet-stream");
    }

    #[test]
    fn only_the_canonical_spelling_of_a_path_is_cached() {
        let canonical = |p: &str| canonical_spelling(p, &resolve_path(p).unwrap());
        for p in ["/", "/a/b.txt", "/a/", "/a%20b.css", "/%C3%A9t%C3%A9.txt", "/.well-known/x"] {
            assert!(canonical(p), "{p}");
        }
        for p in ["/a//b.txt", "/a/./b.txt", "/%61/b.txt", "/x/../a/b.txt", "/a/%62.txt", "/./a/b.txt", "//", "/a/."] {
            assert!(!canonical(p), "{p}");
        }
    }

    #[test]
    fn the_cache_is_keyed_by_root_and_path_as_sent_and_bounded() {
        let meta = std::fs::metadata("/").unwrap();
        let fields = || Fields::new(&meta, "x", SystemTime::now());
        let root = Path::new("/test-key/www");
        cache::put(root, "/a/b.txt", Bytes::from_static(b"one"), fields());
        let hit = cache::get(root, "/a/b.txt").expect("a hit");
        assert_eq!(&hit.content[..], b"one");
        // Another root, another spelling, a prefix, or a path running into the root's name:
        // other keys.
        assert!(cache::get(Path::new("/test-key/www2"), "/a/b.txt").is_none());
        assert!(cache::get(Path::new("/test-key"), "/www/a/b.txt").is_none());
        assert!(cache::get(root, "/a//b.txt").is_none());
        assert!(cache::get(root, "/a/b.txt/").is_none());
        assert!(cache::get(root, "/a/b.tx").is_none());
        // The same path under two roots is two entries, both kept (the root is in the hash).
        let other = Path::new("/test-key/other");
        cache::put(other, "/a/b.txt", Bytes::from_static(b"two"), fields());
        assert_eq!(&cache::get(other, "/a/b.txt").expect("a hit").content[..], b"two");
        assert_eq!(&cache::get(root, "/a/b.txt").expect("still a hit").content[..], b"one");
        // Whatever is put, the cache holds at most its byte budget, and no overlong key.
        let content = Bytes::from(vec![0u8; 60_000]);
        let bound = Path::new("/test-bound");
        for i in 0..2_000 {
            cache::put(bound, &format!("/{i}"), content.clone(), fields());
            assert!(cache::usage().1 <= cache::MAX_BYTES);
        }
        // The budget made the cache start over, so the first root's entry is gone, also from
        // this thread's front, which held it since the lookups above.
        assert!(cache::get(root, "/a/b.txt").is_none());
        let long = format!("/{}", "x".repeat(cache::MAX_KEY));
        cache::put(bound, &long, content, fields());
        assert!(cache::get(bound, &long).is_none());
    }

    #[tokio::test]
    async fn a_whole_file_over_http2_or_http3_carries_the_same_fields_prebuilt() {
        let (_d, root) = tree();
        // HTTP/1.1 gets the map; the others the same fields, in order, as the engines take
        // them, shared between responses; a partial answer stays a map. Compared through one
        // `Fields` (the shared cache may be emptied by other tests meanwhile, and a new
        // `Fields` can differ in its validators a second later).
        let meta = std::fs::metadata(root.join("hello.txt")).unwrap();
        let fields = Fields::new(&meta, "text/plain; charset=utf-8", SystemTime::now());
        let file = || Source::Memory(Bytes::from_static(b"hello world"));
        let h1 = respond(&req(Method::GET, "/hello.txt", &[]), file(), &fields);
        assert!(h1.head.is_none());
        let want: Vec<(String, String)> =
            h1.headers.iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned())).collect();
        assert_eq!(want.len(), 6, "{want:?}");
        for proto in [Proto::Http2, Proto::Http3] {
            let with = |method: Method, hdrs: &[(&str, &str)]| {
                let mut rq = req(method, "/hello.txt", hdrs);
                rq.proto = proto;
                rq
            };
            let r = respond(&with(Method::GET, &[]), file(), &fields);
            assert_eq!(r.status, StatusCode::OK);
            assert!(r.headers.is_empty());
            let Some(Head::Shared(head)) = r.head.as_ref() else { panic!("no shared prebuilt fields") };
            let got: Vec<(String, String)> = head
                .iter()
                .map(|f| (String::from_utf8(f.name.to_vec()).unwrap(), String::from_utf8(f.value.to_vec()).unwrap()))
                .collect();
            assert_eq!(got, want);
            let again = respond(&with(Method::GET, &[]), file(), &fields);
            let Some(Head::Shared(again)) = again.head.as_ref() else { panic!("no shared prebuilt fields") };
            assert!(Arc::ptr_eq(head, again), "one list per file version");
            assert_eq!(collect(r.body).await, b"hello world");
            let r = respond(&with(Method::HEAD, &[]), file(), &fields);
            assert!(r.head.is_some() && r.body.is_empty());
            let r = respond(&with(Method::GET, &[("range", "bytes=0-1")]), file(), &fields);
            assert_eq!(
                (r.status, r.head.is_none(), hdr(&r, "content-length")),
                (StatusCode::PARTIAL_CONTENT, true, "2")
            );
            // And end to end, through the cache.
            let r = Files::new(root.clone(), None).serve(&with(Method::GET, &[])).await;
            assert!(r.head.is_some() && r.headers.is_empty());
            assert_eq!(collect(r.body).await, b"hello world");
        }
        // Materialized, the fields are the map HTTP/1.1 gets, and what the map held follows.
        let mut rq = req(Method::GET, "/hello.txt", &[]);
        rq.proto = Proto::Http2;
        let mut r = respond(&rq, file(), &fields);
        r.headers.insert(header::VARY, HeaderValue::from_static("accept"));
        r.headers.append(header::ETAG, HeaderValue::from_static("\"x\""));
        r.materialize();
        assert!(r.head.is_none());
        let got: Vec<(String, String)> =
            r.headers.iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned())).collect();
        let mut want = want.clone();
        want.insert(1, ("etag".into(), "\"x\"".into()));
        want.push(("vary".into(), "accept".into()));
        assert_eq!(got, want, "the map's own etag is appended after the prebuilt one");
    }

    #[tokio::test]
    async fn serves_files_and_directories() {
        let (_d, root) = tree();
        let (r, body) = get(&root, "/hello.txt", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(body, b"hello world");
        assert_eq!(hdr(&r, "content-type"), "text/plain; charset=utf-8");
        assert_eq!(hdr(&r, "content-length"), "11");
        assert_eq!(hdr(&r, "accept-ranges"), "bytes");
        assert!(hdr(&r, "etag").starts_with('"'));
        assert!(hdr(&r, "last-modified").ends_with("GMT"));

        let (r, body) = get(&root, "/a%20b.css", &[]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::OK, &b"body{}"[..]));
        let (r, body) = get(&root, "/alias.txt", &[]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::OK, &b"hello world"[..]), "symlink inside root");
        let (r, body) = get(&root, "/sub/", &[]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::OK, &b"<p>sub</p>"[..]));
        assert_eq!(hdr(&r, "content-type"), "text/html; charset=utf-8");
        let (r, _) = get(&root, "/sub?x=1", &[]).await;
        assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(hdr(&r, "location"), "/sub/?x=1");
        let (r, _) = get(&root, "//sub", &[]).await;
        assert_eq!(hdr(&r, "location"), "/sub/", "never a scheme-relative redirect");
        let (r, _) = get(&root, "/empty/", &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "no listing");
        let (r, _) = get(&root, "/hello.txt/", &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let (r, _) = get(&root, "/.well-known/x.json", &[]).await;
        assert_eq!((r.status, hdr(&r, "content-type")), (StatusCode::OK, "application/json"));
        let (r, body) = get(&root, "/zero.bin", &[("range", "bytes=0-")]).await;
        assert_eq!((r.status, body.len()), (StatusCode::RANGE_NOT_SATISFIABLE, 0));

        let mut r =
            Files::new(root.clone(), None).serve(&req(Method::HEAD, "/hello.txt", &[("range", "bytes=0-1")])).await;
        assert_eq!(r.status, StatusCode::OK, "Range ignored for HEAD");
        assert_eq!(hdr(&r, "content-length"), "11");
        assert!(collect(std::mem::replace(&mut r.body, Body::Empty)).await.is_empty());

        let r = Files::new(root.clone(), None).serve(&req(Method::POST, "/hello.txt", &[])).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(hdr(&r, "allow"), "GET, HEAD");
    }

    #[tokio::test]
    async fn traversal_is_refused() {
        let (_d, root) = tree();
        for path in [
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/%2E%2E/%2e%2e/secret.txt",
            "/sub/../../secret.txt",
            "/..%2fsecret.txt",
            "/sub%2f..%2f..%2fsecret.txt",
            "/escape.txt",
            "/escape-dir/secret.txt",
            "/.env",
            "/%2eenv",
            "/hello.txt%00",
        ] {
            let (r, body) = get(&root, path, &[]).await;
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
            assert!(!body.windows(6).any(|w| w == b"secret" || w == b"SECRET"), "{path}");
        }
        let (r, _) = get(&root, "/%ff", &[]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn single_ranges() {
        let (_d, root) = tree();
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=0-4")]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::PARTIAL_CONTENT, &b"hello"[..]));
        assert_eq!(hdr(&r, "content-range"), "bytes 0-4/11");
        assert_eq!(hdr(&r, "content-length"), "5");
        assert_eq!(hdr(&r, "content-type"), "text/plain; charset=utf-8");
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=-5")]).await;
        assert_eq!((hdr(&r, "content-range"), body.as_slice()), ("bytes 6-10/11", &b"world"[..]));
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=100-")]).await;
        assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(hdr(&r, "content-range"), "bytes */11");
        assert_eq!(hdr(&r, "content-length"), "0");
        assert!(r.headers.get("content-type").is_none(), "no content type on a 416");
        assert!(body.is_empty());
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=5-1")]).await;
        assert_eq!((r.status, body.len()), (StatusCode::OK, 11), "invalid range ignored");
        let (r, _) = get(&root, "/hello.txt", &[]).await;
        let etag = hdr(&r, "etag").to_string();
        let (r, _) = get(&root, "/hello.txt", &[("range", "bytes=0-0"), ("if-range", &etag)]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=0-0"), ("if-range", "\"old\"")]).await;
        assert_eq!((r.status, body.len()), (StatusCode::OK, 11));
    }

    #[tokio::test]
    async fn conditional_requests() {
        let (_d, root) = tree();
        let (r, _) = get(&root, "/hello.txt", &[]).await;
        let etag = hdr(&r, "etag").to_string();
        let lm = hdr(&r, "last-modified").to_string();
        let (r, body) = get(&root, "/hello.txt", &[("if-none-match", &etag)]).await;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED);
        assert_eq!(hdr(&r, "etag"), etag);
        assert!(body.is_empty());
        assert!(r.headers.get("content-length").is_none());
        let (r, _) = get(&root, "/hello.txt", &[("if-modified-since", &lm)]).await;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED);
        let (r, _) = get(&root, "/hello.txt", &[("if-none-match", "\"other\"")]).await;
        assert_eq!(r.status, StatusCode::OK);
        let (r, _) = get(&root, "/hello.txt", &[("if-match", "\"other\"")]).await;
        assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
        let (r, _) = get(&root, "/hello.txt", &[("if-unmodified-since", "Sun, 06 Nov 1994 08:49:37 GMT")]).await;
        assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
        let (r, _) = get(&root, "/hello.txt", &[("if-match", &etag)]).await;
        assert_eq!(r.status, StatusCode::OK);
    }

    /// Splits a multipart/byteranges body back into (headers, data) parts.
    fn parse_multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
        let delim = format!("--{boundary}");
        let text = body.to_vec();
        let mut parts = Vec::new();
        let mut pos = 0;
        let find = |from: usize, pat: &[u8]| text[from..].windows(pat.len()).position(|w| w == pat).map(|i| i + from);
        loop {
            let start = find(pos, delim.as_bytes()).unwrap();
            let after = start + delim.len();
            if text[after..].starts_with(b"--") {
                assert_eq!(&text[after..], b"--\r\n");
                break;
            }
            let head_end = find(after, b"\r\n\r\n").unwrap();
            let head = String::from_utf8(text[after + 2..head_end].to_vec()).unwrap();
            let next = find(head_end, format!("\r\n{delim}").as_bytes()).unwrap();
            parts.push((head, text[head_end + 4..next].to_vec()));
            pos = next + 2;
        }
        parts
    }

    #[tokio::test]
    async fn multipart_ranges() {
        let (_d, root) = tree();
        // Close ranges are coalesced into one single-part response.
        let (r, body) = get(&root, "/hello.txt", &[("range", "bytes=6-7, 0-1")]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::PARTIAL_CONTENT, &b"hello wo"[..]));
        assert_eq!(hdr(&r, "content-range"), "bytes 0-7/11");

        let text = format!("he{}wo", "-".repeat(996));
        fs::write(root.join("long.txt"), &text).unwrap();
        let (r, body) = get(&root, "/long.txt", &[("range", "bytes=998-999, 0-1")]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        let ct = hdr(&r, "content-type");
        let b = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
        assert_eq!(hdr(&r, "content-length"), body.len().to_string());
        let parts = parse_multipart(&body, b);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].1, b"wo");
        assert!(parts[0].0.contains("Content-Range: bytes 998-999/1000"), "{}", parts[0].0);
        assert!(parts[0].0.contains("Content-Type: text/plain; charset=utf-8"));
        assert_eq!(parts[1].1, b"he");
        assert!(parts[1].0.contains("Content-Range: bytes 0-1/1000"));

        // A larger file: ranges far apart stay separate, data is streamed in chunks.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(root.join("big.bin"), &data).unwrap();
        let (r, body) = get(&root, "/big.bin", &[("range", "bytes=0-99,200000-200099,-10")]).await;
        let ct = hdr(&r, "content-type").to_string();
        let b = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
        let parts = parse_multipart(&body, b);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].1, &data[..100]);
        assert_eq!(parts[1].1, &data[200_000..200_100]);
        assert_eq!(parts[2].1, &data[299_990..]);
        assert!(parts[2].0.contains("bytes 299990-299999/300000"));
        let (r, body) = get(&root, "/big.bin", &[]).await;
        assert_eq!((r.status, body == data), (StatusCode::OK, true));
    }

    #[tokio::test]
    async fn small_files_are_cached_for_a_second_and_ranges_work_from_memory() {
        let (_d, root) = tree();
        fs::write(root.join("c.txt"), "abcdef").unwrap();
        let (r, body) = get(&root, "/c.txt", &[]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::OK, &b"abcdef"[..]));
        let (r, body) = get(&root, "/c.txt", &[("range", "bytes=1-2")]).await;
        assert_eq!((r.status, body.as_slice()), (StatusCode::PARTIAL_CONTENT, &b"bc"[..]));
        fs::write(root.join("m.txt"), format!("{}{}", "a".repeat(150), "b".repeat(150))).unwrap();
        let (r, body) = get(&root, "/m.txt", &[("range", "bytes=0-0,298-299")]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        let text = String::from_utf8(body).unwrap();
        assert!(text.contains("\r\n\r\na\r\n") && text.contains("\r\n\r\nbb\r\n"), "{text}");
        fs::write(root.join("c.txt"), "changed").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let (_, body) = get(&root, "/c.txt", &[]).await;
        assert_eq!(body, b"changed", "a cached entry is trusted for one second only");
    }
}
