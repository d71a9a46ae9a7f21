//! A minimum-progress rule on writes: a peer that stops reading (or reads slower than a floor)
//! must not hold a connection, its file descriptor and its `max_connections` slot forever.
//!
//! The wrapper counts only the time a write waits for the socket (the kernel's send buffer is
//! full because the peer does not take the bytes): a server that is slow to produce a
//! response costs the peer nothing. Within every `window` of such waiting, at least
//! `min_bytes` must have been written; otherwise the write fails with `TimedOut` and the
//! connection's driver tears the connection down. Reads are left to the protocols' own rules
//! (header timeouts, HTTP/2's idle timeout, the request body's rate in `message::request`), because a
//! pending read also means "waiting for the next request", which is no fault of the peer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::config::ProgressRule;

/// An I/O object whose writes must keep up with a [`ProgressRule`].
pub(crate) struct WriteProgress<S> {
    inner: S,
    rule: ProgressRule,
    /// Waiting time accumulated in the current window (completed waits).
    waited: Duration,
    /// Bytes written in the current window.
    moved: u64,
    /// Since when the current write has been waiting.
    pending_since: Option<Instant>,
    /// Wakes the writer when the window would be used up.
    timer: Pin<Box<Sleep>>,
}

impl<S> WriteProgress<S> {
    pub(crate) fn new(inner: S, rule: ProgressRule) -> Self {
        Self {
            inner,
            rule,
            waited: Duration::ZERO,
            moved: 0,
            pending_since: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Account for one poll of a write: `Some(n)` bytes went out, or `None` (pending).
    fn account(&mut self, cx: &mut Context<'_>, wrote: Option<usize>) -> Option<io::Error> {
        if let (Some(n), None) = (wrote, self.pending_since) {
            // The common case, a write the socket took at once: no clock read.
            self.moved += n as u64;
            return None;
        }
        let now = Instant::now();
        match wrote {
            Some(n) => {
                if let Some(since) = self.pending_since.take() {
                    self.waited += now.saturating_duration_since(since);
                }
                self.moved += n as u64;
                if self.waited >= self.rule.window {
                    // A window of waiting is complete and this write made it: a new one starts.
                    if self.moved >= self.rule.min_bytes {
                        self.waited = Duration::ZERO;
                        self.moved = 0;
                    }
                }
                None
            }
            None => {
                let since = *self.pending_since.get_or_insert(now);
                let waited = self.waited + now.saturating_duration_since(since);
                if waited >= self.rule.window {
                    if self.moved < self.rule.min_bytes {
                        return Some(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "the peer took {} bytes in {:?} of waiting (at least {} required)",
                                self.moved, self.rule.window, self.rule.min_bytes
                            ),
                        ));
                    }
                    self.waited = Duration::ZERO;
                    self.moved = 0;
                    self.pending_since = Some(now);
                }
                // Look again when the window would be used up.
                let due = now
                    + (self.rule.window - (self.waited + now.saturating_duration_since(since)).min(self.rule.window));
                self.timer.as_mut().reset(due.max(now + Duration::from_millis(1)));
                if self.timer.as_mut().poll(cx).is_ready() {
                    cx.waker().wake_by_ref();
                }
                None
            }
        }
    }
}

impl<S> WriteProgress<S> {
    /// A write's outcome, accounted: a pending write past the rule fails with `TimedOut`.
    fn after(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                self.account(cx, Some(n));
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.account(cx, None) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteProgress<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteProgress<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Cleartext: reads copy into the caller's buffer (the default of [`ReadChunks`]).
impl<S: AsyncRead + AsyncWrite + Unpin> sluice_tls::ReadChunks for WriteProgress<S> {}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_fails_the_write_after_one_window() {
        // A pipe of 64 KiB that nobody reads.
        let (a, _b) = tokio::io::duplex(64 * 1024);
        let mut w = WriteProgress::new(a, ProgressRule::new(500, Duration::from_secs(10)));
        let start = Instant::now();
        let chunk = vec![0u8; 16 * 1024];
        let err = loop {
            if let Err(e) = w.write_all(&chunk).await {
                break e;
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        // The pipe took 64 KiB at once, which counts for the first window; the next window of
        // waiting with nothing moving fails: at most two windows in all.
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(10) && waited <= Duration::from_secs(20), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_steady_reader_keeps_the_connection_and_a_trickle_does_not() {
        for (read_every, survives) in [(Duration::from_millis(100), true), (Duration::from_secs(3), false)] {
            let (a, mut b) = tokio::io::duplex(1024);
            // The reader takes 100 bytes per `read_every`: 1,000 B/s, or 33 B/s.
            let reader = tokio::spawn(async move {
                let mut buf = [0u8; 100];
                let mut total = 0usize;
                loop {
                    tokio::time::sleep(read_every).await;
                    match b.read(&mut buf).await {
                        Ok(0) | Err(_) => return total,
                        Ok(n) => total += n,
                    }
                }
            });
            let mut w = WriteProgress::new(a, ProgressRule::new(500, Duration::from_secs(10)));
            let data = vec![1u8; 60_000];
            let r = w.write_all(&data).await;
            assert_eq!(r.is_ok(), survives, "{read_every:?}: {r:?}");
            drop(w);
            let got = reader.await.unwrap();
            if survives {
                assert_eq!(got, 60_000);
            } else {
                assert!(got < 60_000, "{got}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn time_the_server_spends_without_writing_does_not_count() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = WriteProgress::new(a, ProgressRule::new(500, Duration::from_secs(10)));
        w.write_all(&[0u8; 100]).await.unwrap();
        // The server thinks for a minute; the peer has nothing to read meanwhile.
        tokio::time::sleep(Duration::from_secs(60)).await;
        w.write_all(&[0u8; 100]).await.unwrap();
        let mut buf = [0u8; 200];
        b.read_exact(&mut buf).await.unwrap();
    }
}
