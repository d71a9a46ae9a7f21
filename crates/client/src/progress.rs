//! Byte counting for the client's reports, and a one-line progress meter on standard error
//! (only when standard error is a terminal): bytes so far, the total and a percentage when the
//! length is known, and the average rate since the start, redrawn in place with `\r`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the meter is redrawn.
const TICK: Duration = Duration::from_millis(200);
/// `total` value meaning "length unknown".
const UNKNOWN: u64 = u64::MAX;

/// Body bytes moved so far, and how many there will be when known.
pub(crate) struct Counter {
    bytes: AtomicU64,
    total: AtomicU64,
    /// `--limit-rate`: bytes per second, and from when.
    rate: Option<(u64, Instant)>,
}

impl Default for Counter {
    fn default() -> Self {
        Self { bytes: AtomicU64::new(0), total: AtomicU64::new(UNKNOWN), rate: None }
    }
}

impl Counter {
    /// A counter whose [`Counter::pace`] holds the transfer to `rate` bytes per second.
    pub(crate) fn limited(rate: Option<u64>) -> Self {
        Self { rate: rate.filter(|&r| r > 0).map(|r| (r, Instant::now())), ..Self::default() }
    }

    /// With a rate limit, wait until the bytes so far are no ahead of it (curl's
    /// `--limit-rate`: the average from the start, so reading pauses and the peer's flow
    /// control holds it back).
    pub(crate) async fn pace(&self) {
        if let Some((rate, since)) = self.rate {
            let due = Duration::from_secs_f64(self.bytes() as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(since.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }

    pub(crate) fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn set_total(&self, total: Option<u64>) {
        self.total.store(total.unwrap_or(UNKNOWN), Ordering::Relaxed);
    }

    fn total(&self) -> Option<u64> {
        Some(self.total.load(Ordering::Relaxed)).filter(|&t| t != UNKNOWN)
    }
}

/// The progress meter; erases its line when dropped.
pub(crate) struct Meter {
    task: Option<tokio::task::JoinHandle<()>>,
    /// Length of the line last drawn (to blank it out).
    drawn: Arc<AtomicUsize>,
}

impl Meter {
    /// Starts redrawing every [`TICK`] on the current runtime, or does nothing when not
    /// `enabled`. `label` says what moves ("down", "up").
    pub(crate) fn start(enabled: bool, label: &'static str, counter: Arc<Counter>) -> Self {
        let drawn = Arc::new(AtomicUsize::new(0));
        if !enabled {
            return Self { task: None, drawn };
        }
        let width = drawn.clone();
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
            loop {
                ticks.tick().await;
                let line = render(label, counter.bytes(), counter.total(), start.elapsed());
                let pad = width.load(Ordering::Relaxed).saturating_sub(line.len());
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{line}{:pad$}", "");
                let _ = err.flush();
                width.store(line.len(), Ordering::Relaxed);
            }
        });
        Self { task: Some(task), drawn }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let n = self.drawn.load(Ordering::Relaxed);
            if n > 0 {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{:n$}\r", "");
                let _ = err.flush();
            }
        }
    }
}

/// One meter line: `down 12.3 MB of 50.0 MB  24%  98.1 MB/s (785 Mbit/s)`.
fn render(label: &str, bytes: u64, total: Option<u64>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { bytes as f64 / secs } else { 0.0 };
    let amount = match total {
        Some(t) if t > 0 => {
            let pct = (bytes as f64 * 100.0 / t as f64).min(100.0);
            format!("{} of {} {pct:3.0}%", human(bytes as f64), human(t as f64))
        }
        Some(_) | None => human(bytes as f64),
    };
    format!("{label} {amount}  {}/s ({:.0} Mbit/s)", human(rate), rate * 8.0 / 1e6)
}

/// Bytes in decimal units: `512 B`, `12.3 kB`, `4.5 MB`, `1.2 GB`.
pub(crate) fn human(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1000.0 {
        return format!("{bytes:.0} B");
    }
    let mut v = bytes / 1000.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1000.0 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lines() {
        assert_eq!(human(999.0), "999 B");
        assert_eq!(human(12_345.0), "12.3 kB");
        assert_eq!(human(5_000_000.0), "5.0 MB");
        assert_eq!(human(2.5e12), "2.5 TB");
        let line = render("down", 1_000_000, Some(4_000_000), Duration::from_secs(1));
        assert_eq!(line, "down 1.0 MB of 4.0 MB  25%  1.0 MB/s (8 Mbit/s)");
        let line = render("up", 500, None, Duration::ZERO);
        assert_eq!(line, "up 500 B  0 B/s (0 Mbit/s)");
    }

    #[test]
    fn counter_tracks_total() {
        let c = Counter::default();
        assert_eq!(c.total(), None);
        c.set_total(Some(10));
        c.add(4);
        assert_eq!((c.bytes(), c.total()), (4, Some(10)));
    }
}
