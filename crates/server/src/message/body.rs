//! Response bodies: what a handler returns and the protocol driver pulls, at most [`CHUNK`]
//! bytes at a time, only as the client takes them ([`Body`]), and the trait through which
//! another component feeds one ([`BodySource`], the reverse proxy's upstream response).

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;

/// Largest chunk a body hands out at once. One HTTP/2 DATA frame at the default
/// SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2) is 16 KiB; 64 KiB keeps per-chunk overhead low for
/// HTTP/1.1 while the HTTP/2 engine splits it into frames.
pub(crate) const CHUNK: usize = 64 * 1024;

/// A body that another component feeds and the protocol driver reads as the client takes it:
/// the layer below (this one) defines it, the one above (the proxy) implements it, so the
/// message types know nothing of where the bytes come from.
pub(crate) trait BodySource: Send {
    /// The next chunk of at most `max` bytes; `Ready(None)` at a clean end. An error fails
    /// the response: the client's stream is reset (HTTP/1.1: the connection closed), so a
    /// truncated body never looks complete.
    fn poll_chunk(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<Option<io::Result<Bytes>>>;
    /// Exact length when known (it becomes the `content-length`).
    fn len(&self) -> Option<u64>;
    /// Whether a trailer section may follow the data (known before it is sent: then even an
    /// empty body is sent, so that the trailers can follow).
    fn may_trail(&self) -> bool;
    /// The trailer section, once [`BodySource::poll_chunk`] has returned `None`.
    fn take_trailers(&mut self) -> Option<HeaderMap>;
}

/// A response body the driver pulls from, at most [`CHUNK`] bytes at a time.
pub(crate) enum Body {
    /// No body.
    Empty,
    /// Bytes in memory.
    Full(Bytes),
    /// `len` zero bytes from a shared static buffer (speed test: no allocation per chunk).
    Zeros(u64),
    /// A section of a file, read as the driver asks.
    File {
        /// The open file.
        file: std::fs::File,
        /// First byte.
        offset: u64,
        /// Bytes to send.
        len: u64,
    },
    /// Several bodies one after another (multipart byte ranges).
    Concat(std::collections::VecDeque<Self>),
    /// A body another component feeds, read as the client takes it (the reverse proxy's
    /// upstream response). Boxed, as the trailers below: a `Body` is moved several times per
    /// request (handler, router, the prepared response), and inline these rare variants made
    /// every one 152 bytes instead of 40.
    Source(Box<dyn BodySource>),
    /// A body followed by a trailer section.
    Trailed(Box<Self>, Box<HeaderMap>),
}

static ZEROS: [u8; CHUNK] = [0; CHUNK];

impl Body {
    /// The trailer section, once [`Body::next_chunk`] has returned `None`.
    pub(crate) fn take_trailers(&mut self) -> Option<HeaderMap> {
        match self {
            Self::Source(s) => s.take_trailers(),
            Self::Trailed(_, t) => Some(std::mem::take(&mut **t)).filter(|t| !t.is_empty()),
            _ => None,
        }
    }

    /// Exact length when known.
    pub(crate) fn len(&self) -> Option<u64> {
        match self {
            Self::Empty => Some(0),
            Self::Full(b) => Some(b.len() as u64),
            Self::Zeros(n) => Some(*n),
            Self::File { len, .. } => Some(*len),
            Self::Concat(parts) => parts.iter().map(Self::len).sum(),
            Self::Source(s) => s.len(),
            Self::Trailed(b, _) => b.len(),
        }
    }

    /// Whether the body ends with trailers (known before it is sent: then even an empty body
    /// is sent, so that the trailers can follow).
    pub(crate) fn has_trailers(&self) -> bool {
        match self {
            Self::Trailed(..) => true,
            Self::Source(s) => s.may_trail(),
            _ => false,
        }
    }

    /// Whether the body is known to be empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == Some(0) && !self.has_trailers()
    }

    /// For bodies in memory, the next chunk without waiting (`Some(None)` at the end); `None`
    /// when the body must be read with [`Body::next_chunk`].
    pub(crate) fn next_ready(&mut self, max: usize) -> Option<Option<io::Result<Bytes>>> {
        let max = max.clamp(1, CHUNK);
        match self {
            Self::Empty => Some(None),
            Self::Full(b) if b.is_empty() => Some(None),
            Self::Full(b) => {
                let n = b.len().min(max);
                Some(Some(Ok(b.split_to(n))))
            }
            Self::Zeros(0) => Some(None),
            Self::Zeros(left) => {
                let n = (*left).min(max as u64) as usize;
                *left -= n as u64;
                crate::message::metrics::speedtest_bytes(false, n as u64);
                Some(Some(Ok(Bytes::from_static(&ZEROS[..n]))))
            }
            Self::Trailed(b, _) => b.next_ready(max),
            Self::File { .. } | Self::Concat(_) | Self::Source(_) => None,
        }
    }

    /// The next chunk of at most `max` bytes, `None` at the end.
    pub(crate) async fn next_chunk(&mut self, max: usize) -> Option<io::Result<Bytes>> {
        let max = max.clamp(1, CHUNK);
        loop {
            match self {
                Self::Empty => return None,
                Self::Full(b) => {
                    if b.is_empty() {
                        return None;
                    }
                    let n = b.len().min(max);
                    return Some(Ok(b.split_to(n)));
                }
                Self::Zeros(left) => {
                    if *left == 0 {
                        return None;
                    }
                    let n = (*left).min(max as u64) as usize;
                    *left -= n as u64;
                    crate::message::metrics::speedtest_bytes(false, n as u64);
                    return Some(Ok(Bytes::from_static(&ZEROS[..n])));
                }
                Self::File { file, offset, len } => {
                    if *len == 0 {
                        return None;
                    }
                    let n = (*len).min(max as u64) as usize;
                    // Page-cached data is read right here (RWF_NOWAIT never blocks on the disk);
                    // only data that would need the disk goes to the blocking pool.
                    let read = match read_cached(file, *offset, n) {
                        Some(r) => r,
                        None => {
                            let f = match file.try_clone() {
                                Ok(f) => f,
                                Err(e) => return Some(Err(e)),
                            };
                            let off = *offset;
                            match tokio::task::spawn_blocking(move || read_exact_at(&f, off, n)).await {
                                Ok(r) => r,
                                Err(e) => Err(io::Error::other(e)),
                            }
                        }
                    };
                    return match read {
                        Ok(b) => {
                            *offset += b.len() as u64;
                            *len -= b.len() as u64;
                            Some(Ok(b))
                        }
                        Err(e) => Some(Err(e)),
                    };
                }
                Self::Concat(parts) => {
                    let front = parts.front_mut()?;
                    match Box::pin(front.next_chunk(max)).await {
                        Some(r) => return Some(r),
                        None => {
                            parts.pop_front();
                        }
                    }
                }
                Self::Trailed(b, _) => return Box::pin(b.next_chunk(max)).await,
                Self::Source(s) => return std::future::poll_fn(|cx| s.poll_chunk(cx, max)).await,
            }
        }
    }
}

/// Read `n` bytes at `off`, blocking as long as it takes.
fn read_exact_at(f: &std::fs::File, off: u64, n: usize) -> io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Bytes::from(buf))
}

/// Read up to `n` bytes at `off` only if they are in the page cache; `None` when that would
/// block.
fn read_cached(f: &std::fs::File, off: u64, n: usize) -> Option<io::Result<Bytes>> {
    sluice_sys::file::read_cached(f, off, n).map(|r| r.map(Bytes::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_bodies_read_from_cache_or_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // Just written, so in the page cache: either served from it or not supported here.
        if let Some(r) = read_cached(&f, 10, 100) {
            assert_eq!(&r.unwrap()[..], &content[10..110]);
        }
        assert_eq!(&read_exact_at(&f, 5, 7).unwrap()[..], &content[5..12]);
        let mut body = Body::File { file: f, offset: 1000, len: 150_000 };
        let mut got = Vec::new();
        while let Some(c) = body.next_chunk(CHUNK).await {
            got.extend_from_slice(&c.unwrap());
        }
        assert_eq!(got, &content[1000..151_000]);
    }
}
