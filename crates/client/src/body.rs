//! Request bodies for the client: none (`get`), a string, or a file streamed from disk by a
//! reader thread (`put --data @FILE`), never loaded whole. Every body has an exact length,
//! which hyper turns into `content-length`. Bytes handed to hyper are counted for the report
//! and the progress meter. An optional gate holds the body back until `100 Continue` arrives
//! (`--expect-100`).

use std::fs::File;
use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, oneshot};

use super::progress::Counter;

/// Bytes the reader thread reads per chunk (and hands to hyper per frame).
const CHUNK: usize = 256 * 1024;
/// Chunks read ahead of the connection: bounds the memory an upload takes to about 1 MiB.
const READ_AHEAD: usize = 4;

/// A request body of known length.
pub(crate) struct ReqBody {
    source: Source,
    /// Bytes not yet handed to hyper.
    remaining: u64,
    counter: Option<Arc<Counter>>,
    gate: Option<Gate>,
}

enum Source {
    Empty,
    Bytes(Option<Bytes>),
    File(mpsc::Receiver<io::Result<Bytes>>),
}

impl ReqBody {
    /// No body (`GET`).
    pub(crate) fn empty() -> Self {
        Self { source: Source::Empty, remaining: 0, counter: None, gate: None }
    }

    /// A body held in memory (`--data STRING`).
    pub(crate) fn bytes(data: Bytes, counter: Arc<Counter>) -> Self {
        let remaining = data.len() as u64;
        Self { source: Source::Bytes(Some(data)), remaining, counter: Some(counter), gate: None }
    }

    /// The first `len` bytes of `file`, read on a thread of their own in [`CHUNK`]s, at most
    /// [`READ_AHEAD`] chunks ahead of the connection. A file that ends early fails the body
    /// (and so the request) instead of sending less than `content-length` promised.
    pub(crate) fn file(file: File, len: u64, counter: Arc<Counter>) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        std::thread::Builder::new().name("sluice-put-read".to_owned()).spawn(move || read_file(file, len, &tx))?;
        Ok(Self { source: Source::File(rx), remaining: len, counter: Some(counter), gate: None })
    }

    /// Holds the body back until `gate` opens.
    pub(crate) fn set_gate(&mut self, gate: Gate) {
        self.gate = Some(gate);
    }

    fn take(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let n = data.len() as u64;
        if n > self.remaining {
            return Poll::Ready(Some(Err(io::Error::other("more body data than its length"))));
        }
        self.remaining -= n;
        if let Some(c) = &self.counter {
            c.add(n);
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

/// Reads `len` bytes of `file` into the channel; stops early when the receiver is gone.
fn read_file(mut file: File, len: u64, tx: &mpsc::Sender<io::Result<Bytes>>) {
    let mut left = len;
    while left > 0 {
        // Fits in usize: at most CHUNK.
        let want = left.min(CHUNK as u64) as usize;
        let mut buf = vec![0u8; want];
        let got = match file.read(&mut buf) {
            Ok(0) => {
                let e = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ended after {} of {len} bytes (did it change during the upload?)", len - left),
                );
                let _ = tx.blocking_send(Err(e));
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        buf.truncate(got);
        left -= got as u64;
        if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
            return;
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(gate) = &mut this.gate {
            if gate.poll_open(cx).is_pending() {
                return Poll::Pending;
            }
            this.gate = None;
        }
        match &mut this.source {
            Source::Empty => Poll::Ready(None),
            Source::Bytes(data) => match data.take() {
                Some(d) if !d.is_empty() => this.take(d),
                _ => Poll::Ready(None),
            },
            Source::File(rx) => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(d))) => this.take(d),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) if this.remaining > 0 => {
                    Poll::Ready(Some(Err(io::Error::other("the file reader stopped early"))))
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Holds a body back until `100 Continue` arrives, or the interim response callback is
/// dropped (the request is over), or a timeout passes: what curl does with
/// `Expect: 100-continue` (its default wait is one second).
pub(crate) struct Gate {
    rx: oneshot::Receiver<()>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

/// Opens a [`Gate`]; cheap to call more than once.
#[derive(Clone)]
pub(crate) struct GateOpener(Arc<Mutex<Option<oneshot::Sender<()>>>>);

impl Gate {
    /// A closed gate that opens by itself after `timeout`.
    pub(crate) fn new(timeout: Duration) -> (Self, GateOpener) {
        let (tx, rx) = oneshot::channel();
        (Self { rx, timer: Box::pin(tokio::time::sleep(timeout)) }, GateOpener(Arc::new(Mutex::new(Some(tx)))))
    }

    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Either a message or a dropped sender opens it.
        if Pin::new(&mut self.rx).poll(cx).is_ready() || self.timer.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl GateOpener {
    pub(crate) fn open(&self) {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = slot.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::Write;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    #[test]
    fn file_body_streams_exact_length() {
        let mut tmp = tempfile::NamedTempFile::new().expect("temp file");
        let data: Vec<u8> = (0..(CHUNK * 2 + 123)).map(|i| (i % 251) as u8).collect();
        tmp.write_all(&data).expect("write");
        let counter = Arc::new(Counter::default());
        let f = File::open(tmp.path()).expect("open");
        let body = ReqBody::file(f, data.len() as u64, counter.clone()).expect("body");
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let got = rt().block_on(body.collect()).expect("collect").to_bytes();
        assert_eq!(&got[..], &data[..]);
        assert_eq!(counter.bytes(), data.len() as u64);
    }

    #[test]
    fn short_file_fails_the_body() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(b"short").expect("write");
        let file = File::open(f.path()).expect("open");
        let body = ReqBody::file(file, 100, Arc::new(Counter::default())).expect("body");
        let e = rt().block_on(body.collect()).expect_err("must fail");
        assert!(e.to_string().contains("ended after 5 of 100"), "{e}");
    }

    #[test]
    fn gate_holds_the_body_until_opened_or_timeout() {
        rt().block_on(async {
            let mut body = ReqBody::bytes(Bytes::from_static(b"abc"), Arc::new(Counter::default()));
            let (gate, opener) = Gate::new(Duration::from_secs(30));
            body.set_gate(gate);
            let mut body = std::pin::pin!(body);
            let first = tokio::time::timeout(Duration::from_millis(50), body.frame()).await;
            assert!(first.is_err(), "gate must hold the body");
            opener.open();
            let frame = body.frame().await.expect("frame").expect("ok");
            assert_eq!(frame.into_data().expect("data"), Bytes::from_static(b"abc"));

            let mut body = ReqBody::bytes(Bytes::from_static(b"x"), Arc::new(Counter::default()));
            let (gate, _opener) = Gate::new(Duration::from_millis(20));
            body.set_gate(gate);
            let got = tokio::time::timeout(Duration::from_secs(5), body.collect()).await;
            assert_eq!(got.expect("timer opens the gate").expect("ok").to_bytes(), Bytes::from_static(b"x"));
        });
    }
}
