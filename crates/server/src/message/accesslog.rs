//! The access log: one line per request on standard output. Lines are appended to a shared
//! buffer (no system call, no thread wake-up per request) that a dedicated thread writes out
//! every [`FLUSH_EVERY`]; [`flush`] writes the rest at shutdown.
//!
//! Line format: `unix-time.millis peer protocol method authority path status in=BYTES
//! out=BYTES [win=N] [hints=SOURCES] duration outcome`; with `access_log = "json"`, one JSON
//! object per line with those fields and the request id, the upstream, TLS and compression.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use http::Method;

use crate::message::request::{ExchangeRef, Proto};

/// Bytes buffered beyond this are dropped (and counted) rather than letting memory grow when
/// standard output blocks.
const MAX_BUFFERED: usize = 8 << 20;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static STARTED: Once = Once::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Queue one line (with its newline).
pub(crate) fn write(line: &str) {
    STARTED.call_once(start);
    let mut b = BUFFER.lock().unwrap_or_else(|p| p.into_inner());
    if b.len() + line.len() > MAX_BUFFERED {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    b.extend_from_slice(line.as_bytes());
}

/// Write out everything buffered.
pub(crate) fn flush() {
    let chunk = std::mem::take(&mut *BUFFER.lock().unwrap_or_else(|p| p.into_inner()));
    if !chunk.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&chunk);
        let _ = out.flush();
    }
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(dropped, "access log could not keep up: lines dropped");
    }
}

fn start() {
    let spawned = std::thread::Builder::new().name("access-log".into()).spawn(|| loop {
        std::thread::sleep(FLUSH_EVERY);
        flush();
    });
    if let Err(e) = spawned {
        tracing::warn!(%e, "cannot start the access-log thread: lines are written at shutdown only");
    }
}

/// What the protocol driver counts while a request runs, for its access-log line.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Request body bytes received.
    pub(crate) bytes_in: AtomicU64,
    /// Largest receive window granted to the request body (HTTP/2; 0: not applicable).
    pub(crate) recv_window: AtomicU64,
    /// Where the 103 Early Hints sent for this request came from ([`HINTS_CONFIGURED`], ...).
    pub(crate) hints: AtomicU8,
    /// The request id (`X-Request-Id`): set when the request is proxied or the log is JSON.
    pub(crate) request_id: OnceLock<RequestId>,
    /// What only the JSON log writes (the upstream, compression): made when that log is on
    /// (`Counters::detail`), so that a request costs one word of it otherwise.
    pub(crate) more: OnceLock<Box<More>>,
}

/// What the JSON log writes beyond the text line's fields.
#[derive(Debug, Default)]
pub(crate) struct More {
    /// The upstream and server that answered, and its time to first byte.
    pub(crate) upstream: OnceLock<(Arc<str>, Arc<str>)>,
    pub(crate) upstream_us: AtomicU64,
    /// The coding the response was compressed with (`Codec::index` + 1; 0: none), and the
    /// bytes before and after.
    pub(crate) codec: AtomicU8,
    pub(crate) encoded: [AtomicU64; 2],
}

/// A request id: made here (16 hex digits, no allocation), or a trusted proxy's.
#[derive(Debug)]
pub(crate) enum RequestId {
    Made([u8; 16]),
    Theirs(http::HeaderValue),
}

impl RequestId {
    /// The id's bytes (visible ASCII).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Made(b) => b,
            Self::Theirs(v) => v.as_bytes(),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // Made: hex digits; theirs: checked to be visible ASCII.
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }
}

impl Counters {
    /// The JSON log is on: keep what it writes.
    pub(crate) fn detail(&self) {
        let _ = self.more.get_or_init(Box::default);
    }

    /// The response was compressed with the codec of index `codec`, `from` bytes to `to`.
    pub(crate) fn compressed(&self, codec: usize, from: u64, to: u64) {
        if let Some(m) = self.more.get() {
            m.codec.store(codec as u8 + 1, Ordering::Relaxed);
            m.encoded[0].store(from, Ordering::Relaxed);
            m.encoded[1].store(to, Ordering::Relaxed);
        }
    }

    /// Upstream `name`'s server `server` answered after `took`.
    pub(crate) fn upstream(&self, name: &Arc<str>, server: &Arc<str>, took: Duration) {
        if let Some(m) = self.more.get() {
            let _ = m.upstream.set((name.clone(), server.clone()));
            m.upstream_us.store(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    /// The request's id: the one set already; else the `X-Request-Id` a trusted proxy sent
    /// (1 to 128 visible ASCII characters); else a new one (16 hex digits: a per-process
    /// random start and a count, unique within the process and unlikely to repeat across).
    pub(crate) fn request_id(&self, headers: &http::HeaderMap, trusted: bool) -> &RequestId {
        self.request_id.get_or_init(|| {
            let theirs = trusted
                .then(|| headers.get(REQUEST_ID))
                .flatten()
                .filter(|v| (1..=128).contains(&v.len()) && v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b)));
            match theirs {
                Some(v) => RequestId::Theirs(v.clone()),
                None => RequestId::Made(new_request_id()),
            }
        })
    }
}

/// `X-Request-Id`.
pub(crate) const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

fn new_request_id() -> [u8; 16] {
    static START: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // std's hasher keys are random per process: 64 random bits without another crate.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        h.finish()
    });
    let n = start.wrapping_add(COUNT.fetch_add(1, Ordering::Relaxed));
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = b"0123456789abcdef"[(n >> (60 - 4 * i) & 0xf) as usize];
    }
    out
}

/// What a TLS connection agreed, for the JSON log (made per connection only when it is on).
#[derive(Debug)]
pub(crate) struct TlsInfo {
    pub(crate) version: Option<&'static str>,
    pub(crate) cipher: Option<&'static str>,
    pub(crate) alpn: Option<&'static str>,
    pub(crate) resumed: Option<bool>,
}

/// A 103 carried the route's configured `early_hints`.
pub(crate) const HINTS_CONFIGURED: u8 = 1;
/// A 103 carried hints learned from the upstream's earlier responses.
pub(crate) const HINTS_LEARNED: u8 = 2;
/// The upstream's own 103 was passed on.
pub(crate) const HINTS_UPSTREAM: u8 = 4;

/// The sources of a request's 103 Early Hints, by name.
fn hint_sources(flags: u8) -> Vec<&'static str> {
    [(HINTS_CONFIGURED, "configured"), (HINTS_LEARNED, "learned"), (HINTS_UPSTREAM, "upstream")]
        .into_iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| n)
        .collect()
}

/// ` hints=configured+learned+upstream` (the sources present), or nothing.
fn hints_note(flags: u8) -> String {
    if flags == 0 {
        return String::new();
    }
    format!(" hints={}", hint_sources(flags).join("+"))
}

/// One access-log line, written when the exchange ends (the guard is dropped).
pub(crate) struct AccessLog {
    pub(crate) proto: Proto,
    pub(crate) peer: SocketAddr,
    pub(crate) method: Method,
    pub(crate) authority: String,
    pub(crate) path: String,
    pub(crate) status: u16,
    /// When the request arrived.
    pub(crate) start: Instant,
    /// Request body bytes received, and the receive window granted (the driver counts them).
    pub(crate) counters: ExchangeRef,
    /// Response body bytes handed to the connection.
    pub(crate) bytes_out: u64,
    /// How the exchange ended ("ok", "reset", ...).
    pub(crate) outcome: &'static str,
    /// A JSON line, not a text one; with the connection's TLS (`None`: cleartext).
    pub(crate) json: bool,
    pub(crate) tls: Option<Arc<TlsInfo>>,
}

/// Longest method, authority and path written (bytes): a peer controls them, and a line must
/// not cost more than a bounded amount of log however long the request's fields (a spray of
/// 60 KB paths wrote 233 MB in 4 s before). Longer values end in `...`.
const MAX_METHOD: usize = 32;
const MAX_AUTHORITY: usize = 256;
const MAX_PATH: usize = 512;

/// A peer-controlled field as written to the log: at most `.1` bytes, and with spaces and
/// control characters escaped (`%XX`) so a line keeps its fields apart.
struct Field<'a>(&'a str, usize);

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut written = 0;
        for c in self.0.chars() {
            if written >= self.1 {
                return f.write_str("...");
            }
            if c == ' ' || c.is_control() {
                for b in c.to_string().bytes() {
                    write!(f, "%{b:02X}")?;
                }
                written += 3;
            } else {
                write!(f, "{c}")?;
                written += c.len_utf8();
            }
        }
        if self.0.is_empty() {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// What an exchange leaves when it ends: its access-log line (boxed: about 200 bytes a
/// response moves a few times) when the log is on, and its tally in the metrics when they are
/// on. Neither is made when off.
#[derive(Default)]
pub(crate) struct Record {
    pub(crate) line: Option<Box<AccessLog>>,
    pub(crate) tally: crate::message::metrics::Tally,
}

impl Record {
    /// Response body bytes handed to the connection.
    pub(crate) fn sent(&mut self, n: u64) {
        if let Some(log) = &mut self.line {
            log.bytes_out += n;
        }
        self.tally.bytes_out += n;
    }

    /// How the exchange ended.
    pub(crate) fn ended(&mut self, outcome: &'static str) {
        if let Some(log) = &mut self.line {
            log.outcome = outcome;
        }
    }

    /// The response's status, its head ready now.
    pub(crate) fn answered(&mut self, status: u16) {
        if let Some(log) = &mut self.line {
            log.status = status;
        }
        self.tally.status = status;
        self.tally.head_ready();
    }

    /// Response bytes sent so far.
    pub(crate) fn bytes_out(&self) -> u64 {
        self.line.as_ref().map_or(self.tally.bytes_out, |l| l.bytes_out)
    }
}

/// `s` cut to at most `max` bytes (at a character boundary) with `...` after, for the JSON
/// log (which escapes what it writes; the bound is the text log's).
fn bounded(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end]).into()
}

impl AccessLog {
    /// The JSON line (with its newline).
    fn json_line(&self, now: Duration) -> String {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut v = serde_json::json!({
            "time": now.as_secs_f64(),
            "peer": self.peer.to_string(),
            "protocol": self.proto.to_string(),
            "method": bounded(self.method.as_str(), MAX_METHOD),
            "authority": bounded(&self.authority, MAX_AUTHORITY),
            "path": bounded(&self.path, MAX_PATH),
            "status": self.status,
            "bytes_in": load(&c.bytes_in),
            "bytes_out": self.bytes_out,
            "duration_ms": (self.start.elapsed().as_secs_f64() * 1e6).round() / 1e3,
            "outcome": self.outcome,
            "request_id": c.request_id.get().map(RequestId::as_str),
        });
        let o = v.as_object_mut().expect("an object");
        if let Some(w) = Some(load(&c.recv_window)).filter(|&w| w > 0) {
            o.insert("recv_window".into(), w.into());
        }
        let hints = c.hints.load(Ordering::Relaxed);
        if hints != 0 {
            o.insert("hints".into(), hint_sources(hints).into());
        }
        let more = c.more.get();
        if let Some((m, (name, server))) = more.and_then(|m| Some((m, m.upstream.get()?))) {
            o.insert(
                "upstream".into(),
                serde_json::json!({
                    "name": &**name,
                    "server": &**server,
                    "ttfb_ms": load(&m.upstream_us) as f64 / 1e3,
                }),
            );
        }
        if let Some(t) = &self.tls {
            o.insert(
                "tls".into(),
                serde_json::json!({"version": t.version, "cipher": t.cipher, "alpn": t.alpn, "resumed": t.resumed}),
            );
        }
        let codec = more.map_or(0, |m| m.codec.load(Ordering::Relaxed));
        if let (Some(m), true) = (more, codec > 0) {
            let (from, to) = (load(&m.encoded[0]), load(&m.encoded[1]));
            o.insert(
                "compression".into(),
                serde_json::json!({
                    "codec": crate::config::Codec::ALL.get(usize::from(codec - 1)).map(|c| c.token()),
                    "bytes_before": from,
                    "bytes_after": to,
                    "ratio": if to > 0 { (from as f64 / to as f64 * 100.0).round() / 100.0 } else { 0.0 },
                }),
            );
        }
        let mut line = v.to_string();
        line.push('\n');
        line
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        if self.json {
            write(&self.json_line(now));
            return;
        }
        write(&format!(
            "{}.{:03} {} {} {} {} {} {} in={} out={}{}{} {:.1}ms {}\n",
            now.as_secs(),
            now.subsec_millis(),
            self.peer,
            self.proto,
            Field(self.method.as_str(), MAX_METHOD),
            Field(&self.authority, MAX_AUTHORITY),
            Field(&self.path, MAX_PATH),
            self.status,
            self.counters.bytes_in.load(Ordering::Relaxed),
            self.bytes_out,
            match self.counters.recv_window.load(Ordering::Relaxed) {
                0 => String::new(),
                w => format!(" win={w}"),
            },
            hints_note(self.counters.hints.load(Ordering::Relaxed)),
            self.start.elapsed().as_secs_f64() * 1e3,
            self.outcome
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_fields_are_bounded_and_escaped() {
        let long = "/".repeat(60_000);
        let shown = Field(&long, MAX_PATH).to_string();
        assert_eq!(shown.len(), MAX_PATH + 3);
        assert!(shown.ends_with("..."));
        assert_eq!(Field("/a b\tc", MAX_PATH).to_string(), "/a%20b%09c");
        assert_eq!(Field("", MAX_PATH).to_string(), "-");
        assert_eq!(Field("/ok/é", MAX_PATH).to_string(), "/ok/é");
    }

    #[test]
    fn hint_sources() {
        assert_eq!(hints_note(0), "");
        assert_eq!(hints_note(HINTS_LEARNED), " hints=learned");
        assert_eq!(hints_note(HINTS_CONFIGURED | HINTS_UPSTREAM), " hints=configured+upstream");
    }
}
