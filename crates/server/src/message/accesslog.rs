//! The access log: one line per request on standard output. Lines are appended to a shared
//! buffer (no system call, no thread wake-up per request) that a dedicated thread writes out
//! every [`FLUSH_EVERY`]; [`flush`] writes the rest at shutdown.
//!
//! Line format: `unix-time.millis peer protocol method authority path status in=BYTES
//! out=BYTES [win=N] [hints=SOURCES] duration outcome`.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, Once};
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
}

/// A 103 carried the route's configured `early_hints`.
pub(crate) const HINTS_CONFIGURED: u8 = 1;
/// A 103 carried hints learned from the upstream's earlier responses.
pub(crate) const HINTS_LEARNED: u8 = 2;
/// The upstream's own 103 was passed on.
pub(crate) const HINTS_UPSTREAM: u8 = 4;

/// ` hints=configured+learned+upstream` (the sources present), or nothing.
fn hints_note(flags: u8) -> String {
    if flags == 0 {
        return String::new();
    }
    let names: Vec<&str> = [(HINTS_CONFIGURED, "configured"), (HINTS_LEARNED, "learned"), (HINTS_UPSTREAM, "upstream")]
        .into_iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| n)
        .collect();
    format!(" hints={}", names.join("+"))
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

impl Drop for AccessLog {
    fn drop(&mut self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
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
