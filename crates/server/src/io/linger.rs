//! Lingering close (RFC 9112 §9.6): a server that closes a connection while the peer's input is
//! still arriving shuts its write side down first and keeps reading for a while. Closing a
//! socket with unread input makes the kernel send RST, which fails the peer's next send and can
//! destroy our last bytes (a 431 or 413 saying why, a GOAWAY) before the peer reads them.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Most input read and discarded after our last bytes, and for how long: enough for what the
/// peer has in flight to arrive before the socket closes, and a bound on what a peer that keeps
/// sending gets out of it.
const LINGER_BYTES: usize = 1 << 20;
const LINGER: Duration = Duration::from_secs(1);

/// Read and discard the peer's input until it closes, [`LINGER_BYTES`] or [`LINGER`].
pub(crate) async fn drain_input<R: AsyncRead + Unpin>(rd: &mut R) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER, async {
        while left > 0 {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// A stream handed to code that owns it to the end (hyper's HTTP/1.1 connection), which gives
/// it back when dropped: into `slot`, unless the peer's end of input was already read (nothing
/// to linger for). The driver that made it takes it from there for [`close`].
pub(crate) struct Returning<S> {
    inner: Option<S>,
    eof: bool,
    slot: Arc<Mutex<Option<S>>>,
}

impl<S> Returning<S> {
    pub(crate) fn new(inner: S) -> (Self, Arc<Mutex<Option<S>>>) {
        let slot = Arc::new(Mutex::new(None));
        (Self { inner: Some(inner), eof: false, slot: slot.clone() }, slot)
    }

    fn get(&mut self) -> &mut S {
        // Only Drop takes `inner`.
        self.inner.as_mut().expect("stream present until drop")
    }
}

impl<S> Drop for Returning<S> {
    fn drop(&mut self) {
        if self.eof {
            return;
        }
        if let (Some(s), Ok(mut slot)) = (self.inner.take(), self.slot.lock()) {
            *slot = Some(s);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Returning<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(self.get()).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() == before && buf.remaining() > 0 {
            self.eof = true;
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Returning<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.get()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.get()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get()).poll_shutdown(cx)
    }
}

/// Close a stream given back by [`Returning`]: shut the write side down (sending FIN, and
/// close_notify over TLS, if its owner did not), then drain the input.
pub(crate) async fn close<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    if tokio::time::timeout(LINGER, s.shutdown()).await.is_err() {
        return;
    }
    drain_input(&mut s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stream_comes_back_unless_its_input_ended() {
        // Input left unread: the stream is given back on drop.
        let (a, mut b) = tokio::io::duplex(64);
        let (mut r, slot) = Returning::new(a);
        b.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 2];
        r.read_exact(&mut got).await.unwrap();
        drop(r);
        let mut back = slot.lock().unwrap().take().expect("given back");
        let mut rest = [0u8; 1];
        back.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"c");

        // The peer's end of input read: nothing to linger for, so nothing comes back.
        let (a, b) = tokio::io::duplex(64);
        let (mut r, slot) = Returning::new(a);
        drop(b);
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).await.unwrap(), 0);
        drop(r);
        assert!(slot.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn close_shuts_down_then_reads_until_the_peer_closes() {
        // A pipe that holds 1 KiB: the peer's 40,000 bytes get through only if close reads them.
        let (a, mut b) = tokio::io::duplex(1024);
        let closing = tokio::spawn(close(a));
        let sent = tokio::time::timeout(Duration::from_secs(5), b.write_all(&[7u8; 40_000])).await;
        assert!(matches!(sent, Ok(Ok(()))), "{sent:?}");
        // And our write side was shut down.
        let mut buf = [0u8; 16];
        assert_eq!(b.read(&mut buf).await.unwrap(), 0);
        drop(b);
        closing.await.unwrap();
    }
}
