//! Byte tunnels, shared by the handlers that open them (the reverse proxy's WebSockets, the
//! forward proxy's CONNECT): two byte streams copied into each other ([`splice`]), and a
//! request stream of HTTP/2 or HTTP/3 made into one side of such a pair ([`stream_side`]: its
//! request body one way, a response body the other).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::message::{Body, BodySource, RequestBody};

/// Bytes a tunnel moved each way: `a_to_b` and `b_to_a` of a [`splice`].
#[derive(Debug, Default)]
pub(crate) struct Moved {
    pub(crate) a_to_b: AtomicU64,
    pub(crate) b_to_a: AtomicU64,
}

impl Moved {
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.a_to_b.load(Ordering::Relaxed), self.b_to_a.load(Ordering::Relaxed))
    }
}

/// Bytes held per direction of a [`splice`]: what one read takes before its write.
const BUF: usize = 16 * 1024;

/// Copy bytes both ways until both sides have closed, either fails, or nothing moves for
/// `idle`; `pre` (what `b` sent right after its 101) goes to `a` first. A side's end of stream
/// is passed on as a shutdown of the other side's writes. Counts into `moved` as it goes.
pub(crate) async fn splice<A, B>(a: A, b: B, pre: bytes::Bytes, idle: Duration, moved: &Moved)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::AsyncReadExt;
    let (mut ar, mut aw) = tokio::io::split(a);
    if !pre.is_empty() {
        if aw.write_all(&pre).await.is_err() {
            return;
        }
        moved.b_to_a.fetch_add(pre.len() as u64, Ordering::Relaxed);
    }
    let (mut br, mut bw) = tokio::io::split(b);
    let mut abuf = vec![0u8; BUF];
    let mut bbuf = vec![0u8; BUF];
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        // A write that does not complete within `idle` (a peer that never reads) ends the
        // tunnel as surely as silence does.
        let step = async {
            tokio::select! {
                r = ar.read(&mut abuf), if a_open => match r {
                    Ok(0) | Err(_) => {
                        a_open = false;
                        let _ = bw.shutdown().await;
                        true
                    }
                    Ok(n) => {
                        let ok = bw.write_all(&abuf[..n]).await.is_ok();
                        moved.a_to_b.fetch_add(n as u64, Ordering::Relaxed);
                        ok
                    }
                },
                r = br.read(&mut bbuf), if b_open => match r {
                    Ok(0) | Err(_) => {
                        b_open = false;
                        let _ = aw.shutdown().await;
                        true
                    }
                    Ok(n) => {
                        let ok = aw.write_all(&bbuf[..n]).await.is_ok();
                        moved.b_to_a.fetch_add(n as u64, Ordering::Relaxed);
                        ok
                    }
                },
            }
        };
        match tokio::time::timeout(idle, step).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

/// One side of a byte tunnel made of an HTTP/2 or HTTP/3 request stream (a CONNECT or an
/// extended CONNECT): the returned stream reads what the client sends in its request body
/// and writes into the returned response body. The stream's flow control bounds what each
/// direction holds; an in-memory pipe of `BUF` bytes joins them.
pub(crate) fn stream_side(client: RequestBody) -> (tokio::io::DuplexStream, Body) {
    let (near, far) = tokio::io::duplex(BUF * 4);
    let (rd, mut wr) = tokio::io::split(near);
    tokio::spawn(async move {
        let mut client = client;
        while let Some(Ok(b)) = client.chunk().await {
            if wr.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    (far, Body::Source(Box::new(ReadSource { rd })))
}

/// A response body read from a byte stream until its end.
pub(crate) struct ReadSource<R> {
    pub(crate) rd: R,
}

impl<R: AsyncRead + Send + Unpin> BodySource for ReadSource<R> {
    fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
        max: usize,
    ) -> std::task::Poll<Option<std::io::Result<bytes::Bytes>>> {
        let mut buf = vec![0u8; max.clamp(1, BUF)];
        let mut rb = tokio::io::ReadBuf::new(&mut buf);
        match std::pin::Pin::new(&mut self.rd).poll_read(cx, &mut rb) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(Err(e)) => std::task::Poll::Ready(Some(Err(e))),
            std::task::Poll::Ready(Ok(())) if rb.filled().is_empty() => std::task::Poll::Ready(None),
            std::task::Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                buf.truncate(n);
                std::task::Poll::Ready(Some(Ok(bytes::Bytes::from(buf))))
            }
        }
    }

    fn len(&self) -> Option<u64> {
        None
    }

    fn may_trail(&self) -> bool {
        false
    }

    fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        None
    }
}

/// A shared count, for tunnels' byte counters handed to tasks.
pub(crate) fn moved() -> Arc<Moved> {
    Arc::new(Moved::default())
}
