//! The HTTP/2 client engine: arbitrary server bytes, frames and well-formed response heads,
//! interleaved with requests, uploads, cancellations, timers and transmits.

use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use sluice_h2::client::{Client, ClientConfig, ClientEvent, Request};
use sluice_hpack::Encoder;

use crate::flow::PeerWindows;
use crate::h2_server::{frame, header_frames};
use crate::seed::{variant, Seed};
use crate::{pick, Chunk, Field, Lifecycle};

/// What the server or the caller does next.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Raw bytes from the server.
    Input(Chunk),
    /// One frame from the server, its header well-formed.
    Frame {
        /// Frame type.
        kind: u8,
        /// Flags.
        flags: u8,
        /// Stream id.
        stream: u8,
        /// Payload.
        payload: Chunk,
    },
    /// A response head from the server, HPACK-encoded.
    Response {
        /// Stream id.
        stream: u8,
        /// `:status`.
        status: u16,
        /// Regular fields.
        fields: Vec<Field>,
        /// END_STREAM.
        end: bool,
    },
    /// The caller sends a request, with a body to follow or not.
    Request {
        /// A body follows.
        body: bool,
        /// Regular fields.
        fields: Vec<Field>,
    },
    /// The caller sends `len` body bytes.
    Data {
        /// Which request.
        pick: u8,
        /// Length.
        len: u16,
        /// The last.
        end: bool,
    },
    /// The caller ends a body with trailers.
    Trailers(u8),
    /// The caller cancels a request.
    Cancel(u8),
    /// Virtual time goes on by `n` × 10 ms.
    Advance(u16),
    /// The timer fires at its deadline.
    Timeout,
    /// The driver writes what is queued.
    Transmit,
}

/// Structured input of `h2_client`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// What happens.
    pub actions: Vec<Action>,
}

/// No panic; request bodies within the server's windows and frames within its frame size;
/// requests only on odd, rising streams; output bounded by what the server sent and
/// the caller queued; a failed connection stays failed.
pub fn run(input: &Input) {
    let t0 = Instant::now();
    let mut now = t0;
    let mut client = Client::new(ClientConfig::default(), now);
    let mut enc = Encoder::new();
    let mut streams: Vec<u32> = Vec::new();
    let (mut fed, mut queued, mut written) = (0usize, 0usize, 0usize);
    let mut failed = false;
    let mut windows = PeerWindows::default();
    let mut life = Lifecycle::default();
    let mut preface = sluice_h2::frame::PREFACE.len();
    let mut transmit = |b: &[u8], windows: &mut PeerWindows| {
        // Our first bytes are the connection preface, then frames.
        let skip = preface.min(b.len());
        preface -= skip;
        windows.ours(&b[skip..]);
    };
    for (i, action) in input.actions.iter().enumerate() {
        let mut server = Vec::new();
        match action {
            Action::Input(b) => server.extend_from_slice(&b.0),
            Action::Frame { kind, flags, stream, payload } => {
                frame(*kind, *flags, u32::from(*stream), &payload.0, &mut server);
            }
            Action::Response { stream, status, fields, end } => {
                let status = status.to_string();
                let mut block = Vec::new();
                let head = std::iter::once((&b":status"[..], status.as_bytes(), false));
                enc.encode(head.chain(fields.iter().map(|f| (&f.name.0[..], &f.value.0[..], f.sensitive))), &mut block);
                header_frames(u32::from(*stream), &block, *end, &mut server);
            }
            Action::Request { body, fields } => {
                let fields: Vec<(String, String)> = fields
                    .iter()
                    .map(|f| (String::from_utf8_lossy(&f.name.0).into(), String::from_utf8_lossy(&f.value.0).into()))
                    .collect();
                let refs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                let req = Request { method: "POST", scheme: "https", authority: "a.example", path: "/", fields: &refs };
                if let Ok(id) = client.send_request(&req, !body) {
                    assert!(id % 2 == 1 && streams.last().is_none_or(|&l| id > l), "stream {id} after {streams:?}");
                    streams.push(id);
                    queued += 64 + refs.iter().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
                }
            }
            Action::Data { pick: k, len, end } => {
                if let Some(id) = pick(&streams, *k) {
                    let data = Bytes::from(vec![b'x'; usize::from(*len)]);
                    if client.send_data(id, data, *end).is_ok() {
                        queued += usize::from(*len);
                    }
                }
            }
            Action::Trailers(k) => {
                if let Some(id) = pick(&streams, *k) {
                    if client.send_trailers(id, &[("x-checksum", "0")]).is_ok() {
                        queued += 64;
                    }
                }
            }
            Action::Cancel(k) => {
                if let Some(id) = pick(&streams, *k) {
                    client.cancel(id);
                }
            }
            Action::Advance(n) => now += Duration::from_millis(10 * u64::from(*n)),
            Action::Timeout => {
                if let Some(t) = client.poll_timeout() {
                    now = now.max(t);
                    failed |= client.handle_timeout(now).is_err();
                }
            }
            Action::Transmit => {
                while let Some(b) = client.poll_transmit() {
                    written += b.len();
                    transmit(&b, &mut windows);
                }
            }
        }
        if !server.is_empty() {
            fed += server.len();
            let r = client.handle_input(now, &server);
            windows.peer(&server);
            assert!(!failed || r.is_err(), "a failed connection took input");
            failed |= r.is_err();
        }
        while let Some(e) = client.poll_event() {
            match e {
                ClientEvent::Response { stream, end_stream, .. } => {
                    assert!(streams.contains(&stream), "a response on stream {stream}, never requested");
                    life.head(u64::from(stream), end_stream);
                }
                ClientEvent::Informational { stream, status, .. } => {
                    assert!(streams.contains(&stream) && (100..200).contains(&status) && status != 101);
                }
                ClientEvent::Data { stream, end_stream, .. } => life.body(u64::from(stream), end_stream),
                ClientEvent::Trailers { stream, .. } => life.body(u64::from(stream), true),
                ClientEvent::Reset { stream, .. } => life.reset(u64::from(stream)),
                ClientEvent::Ready | ClientEvent::Origin(_) | ClientEvent::GoAway { .. } => {}
            }
        }
        if failed {
            assert!(!client.accepts_requests());
            assert!(client.poll_timeout().is_none());
        }
        // Our first flight, each request's head and body, and at most a few control frames
        // (a PING ACK, a RST_STREAM, two WINDOW_UPDATEs) per server frame.
        let bound = 4 * fed + queued + 9 * queued.div_ceil(256) + 128 * (i + 1) + 4096;
        assert!(written <= bound, "{written} bytes written for {fed} in and {queued} queued");
    }
}

impl Seed for Action {
    fn seed(&self, out: &mut Vec<u8>) {
        const N: u32 = 10;
        match self {
            Self::Input(b) => {
                variant(0, N, out);
                b.seed(out);
            }
            Self::Frame { kind, flags, stream, payload } => {
                variant(1, N, out);
                kind.seed(out);
                flags.seed(out);
                stream.seed(out);
                payload.seed(out);
            }
            Self::Response { stream, status, fields, end } => {
                variant(2, N, out);
                stream.seed(out);
                status.seed(out);
                fields.seed(out);
                end.seed(out);
            }
            Self::Request { body, fields } => {
                variant(3, N, out);
                body.seed(out);
                fields.seed(out);
            }
            Self::Data { pick, len, end } => {
                variant(4, N, out);
                pick.seed(out);
                len.seed(out);
                end.seed(out);
            }
            Self::Trailers(k) => {
                variant(5, N, out);
                k.seed(out);
            }
            Self::Cancel(k) => {
                variant(6, N, out);
                k.seed(out);
            }
            Self::Advance(n) => {
                variant(7, N, out);
                n.seed(out);
            }
            Self::Timeout => variant(8, N, out),
            Self::Transmit => variant(9, N, out),
        }
    }
}

impl Seed for Input {
    fn seed(&self, out: &mut Vec<u8>) {
        self.actions.seed(out);
    }
}
