//! The access log: one line per request on standard output. Lines are appended to a shared
//! buffer (no system call, no thread wake-up per request) that a dedicated thread writes out
//! every [`FLUSH_EVERY`]; [`flush`] writes the rest at shutdown.
//!
//! Line format: `unix-time.millis peer protocol method authority path status in=BYTES
//! out=BYTES duration outcome`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

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
