//! HTTP/2 over TLS on Sluice's own client engine (`sluice_h2::client`), for `sluice get` with
//! several URLs: unlike hyper's, it reports the server's ORIGIN frames (RFC 8336), which
//! decide what the connection may be reused for (`pool.rs`). One response at a time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_h2::client::{Client, ClientConfig, ClientEvent, Request, RequestError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::{code, Failure};

/// Largest read from the socket at once.
const READ_BUF: usize = 64 * 1024;

/// What a response brought.
pub(crate) struct Fetched {
    pub(crate) status: u16,
    /// Body bytes.
    pub(crate) bytes: u64,
    /// When the response head arrived.
    pub(crate) head_at: Instant,
}

/// One HTTP/2 connection.
pub(crate) struct H2Conn {
    io: Box<TlsStream<TcpStream>>,
    engine: Client,
    buf: Vec<u8>,
    /// The ORIGIN frames' entries so far, in order (RFC 8336 §2.3: each adds to the set).
    origins: Vec<String>,
    /// An ORIGIN frame arrived (the Origin Set is initialised).
    origin_seen: bool,
    /// The connection is gone (EOF, error, or GOAWAY).
    broken: bool,
}

impl H2Conn {
    /// The preface and SETTINGS exchange, bounded by `timeout`; ORIGIN frames sent with the
    /// server's SETTINGS are read with them.
    pub(crate) async fn handshake(io: Box<TlsStream<TcpStream>>, timeout: Duration) -> Result<Self, Failure> {
        let mut c = Self {
            io,
            engine: Client::new(ClientConfig::default(), Instant::now()),
            buf: vec![0; READ_BUF],
            origins: Vec::new(),
            origin_seen: false,
            broken: false,
        };
        let ready = async {
            while !c.engine.is_ready() {
                c.flush().await?;
                c.read_some().await?;
                c.note_events(|_| {});
            }
            c.flush().await
        };
        match tokio::time::timeout(timeout, ready).await {
            Ok(r) => r.map(|()| c),
            Err(_) => {
                Err(Failure::new(code::TIMEOUT, format!("no HTTP/2 SETTINGS from the server within {timeout:?}")))
            }
        }
    }

    /// The ORIGIN entries received so far, or `None` before any ORIGIN frame.
    pub(crate) fn origins(&self) -> Option<&[String]> {
        self.origin_seen.then_some(&self.origins[..])
    }

    /// Whether a new request may go out on it.
    pub(crate) fn usable(&self) -> bool {
        !self.broken && self.engine.accepts_requests()
    }

    /// Sends a GET (no body) and reads the whole response, counting its body bytes into
    /// `on_data`; frames for other streams are processed on the way.
    pub(crate) async fn get(
        &mut self,
        authority: &str,
        path: &str,
        fields: &[(&str, &str)],
        mut on_data: impl FnMut(&Bytes),
    ) -> Result<Fetched, Failure> {
        let req = Request { method: "GET", scheme: "https", authority, path, fields };
        let stream = self.engine.request(&req).map_err(|e| {
            let why = match e {
                RequestError::Closed => "the connection is closed",
                RequestError::GoingAway => "the server sent GOAWAY",
                RequestError::TooManyStreams => "the server's stream limit is reached",
                RequestError::StreamIdsExhausted => "stream ids are used up",
            };
            Failure::new(code::SEND, format!("cannot send the request: {why}"))
        })?;
        let mut status = None;
        let mut bytes = 0u64;
        let mut head_at = None;
        loop {
            self.flush().await?;
            let mut done = None;
            self.note_events(|e| match e {
                ClientEvent::Response { stream: s, status: st, end_stream, .. } if s == stream => {
                    status = Some(st);
                    head_at = Some(Instant::now());
                    if end_stream {
                        done = Some(Ok(()));
                    }
                }
                ClientEvent::Data { stream: s, data, end_stream } if s == stream => {
                    bytes += data.len() as u64;
                    on_data(&data);
                    if end_stream {
                        done = Some(Ok(()));
                    }
                }
                ClientEvent::Trailers { stream: s, .. } if s == stream => done = Some(Ok(())),
                ClientEvent::Reset { stream: s, error } if s == stream => {
                    done = Some(Err(Failure::new(code::RECV, format!("the response broke off: {error}"))));
                }
                _ => {}
            });
            match (done, status, head_at) {
                (Some(Ok(())), Some(status), Some(head_at)) => {
                    self.flush().await?;
                    return Ok(Fetched { status, bytes, head_at });
                }
                (Some(Err(f)), _, _) => return Err(f),
                _ => {}
            }
            self.read_some().await?;
        }
    }

    /// Hands every pending event to `f`, keeping the ORIGIN entries.
    fn note_events(&mut self, mut f: impl FnMut(ClientEvent)) {
        while let Some(e) = self.engine.poll_event() {
            match e {
                ClientEvent::Origin(list) => {
                    self.origin_seen = true;
                    self.origins.extend(list);
                }
                other => f(other),
            }
        }
    }

    async fn flush(&mut self) -> Result<(), Failure> {
        while let Some(out) = self.engine.poll_transmit() {
            if let Err(e) = self.io.write_all(&out).await {
                self.broken = true;
                return Err(Failure::new(code::SEND, format!("writing to the server failed: {e}")));
            }
        }
        Ok(())
    }

    async fn read_some(&mut self) -> Result<(), Failure> {
        let n = match self.io.read(&mut self.buf).await {
            Ok(0) => {
                self.broken = true;
                return Err(Failure::new(code::RECV, "the server closed the connection".to_owned()));
            }
            Ok(n) => n,
            Err(e) => {
                self.broken = true;
                return Err(Failure::new(code::RECV, format!("reading from the server failed: {e}")));
            }
        };
        // The engine's timers (an unacknowledged SETTINGS) are checked as input arrives; the
        // command's own time limit bounds a server that sends nothing at all.
        let now = Instant::now();
        if let Err(e) = self.engine.handle_input(now, &self.buf[..n]).and_then(|()| self.engine.handle_timeout(now)) {
            self.broken = true;
            // Tell the server why (the GOAWAY the engine queued), as far as it goes.
            let _ = self.flush().await;
            return Err(Failure::new(code::RECV, format!("the server broke HTTP/2: {e}")));
        }
        Ok(())
    }
}
