//! A stream split into a read half and a write half for two tasks, as `tokio::io::split`
//! splits it (one lock around the stream, taken for each call), with one more way to read:
//! [`ReadChunks`], through which the HTTP/2 driver takes a TLS stream's decrypted records
//! without a copy. `tokio::io::split`'s halves give no way to the stream's own methods.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Reads that may hand over buffers of their own instead of copying into the caller's.
pub trait ReadChunks: AsyncRead + AsyncWrite + Unpin {
    /// Decrypted bytes as buffers of their own into `chunks` where the stream can (see
    /// `TlsStream`'s implementation in `crate::stream`), else a read into `buf` (the
    /// default); how many bytes, 0 at the end of the stream.
    fn poll_read_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut Vec<BytesMut>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        let _ = chunks;
        poll_read_buf(self, cx, buf)
    }

    /// Every read should expect a batch of input (see `TlsStream`'s implementation); by
    /// default nothing changes.
    fn set_bulk(&mut self, on: bool) {
        let _ = on;
    }
}

/// One read from `r` into the room after `buf`'s bytes (not zeroed first): how many bytes, 0 at
/// the end of the stream (or when `buf` has no room).
pub fn poll_read_buf<R: AsyncRead + Unpin + ?Sized, B: BufMut>(
    r: &mut R,
    cx: &mut Context<'_>,
    buf: &mut B,
) -> Poll<io::Result<usize>> {
    let read = tokio::io::AsyncReadExt::read_buf(r, buf);
    std::future::Future::poll(std::pin::pin!(read), cx)
}

/// The read half of a [`split`] stream.
pub struct ReadHalf<S>(Arc<Mutex<S>>);

/// The write half of a [`split`] stream.
pub struct WriteHalf<S> {
    stream: Arc<Mutex<S>>,
    vectored: bool,
}

/// Split `stream` into halves that two tasks can use at once.
pub fn split<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> (ReadHalf<S>, WriteHalf<S>) {
    let vectored = stream.is_write_vectored();
    let stream = Arc::new(Mutex::new(stream));
    (ReadHalf(stream.clone()), WriteHalf { stream, vectored })
}

/// The stream, locked. A panic while it was held (a bug, not the peer) leaves it as it was:
/// the connection's own error handling deals with the rest.
fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S: ReadChunks> ReadHalf<S> {
    /// See [`ReadChunks::poll_read_chunks`].
    pub fn poll_read_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut Vec<BytesMut>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_read_chunks(cx, chunks, buf)
    }

    /// See [`ReadChunks::set_bulk`].
    pub fn set_bulk(&self, on: bool) {
        lock(&self.0).set_bulk(on);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadHalf<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteHalf<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *lock(&self.stream)).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *lock(&self.stream)).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.stream)).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.stream)).poll_shutdown(cx)
    }
}
