//! The HTTP/2 server engine: a valid preface, then arbitrary bytes, frames and well-formed
//! requests from a peer, interleaved with the handler's answers, timers and transmits.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use sluice_h2::frame::{flag, kind, Head, HEADER_LEN, MAX_FRAME_SIZE, PREFACE};
use sluice_h2::{Config, Connection, Event, Reason};
use sluice_hpack::Encoder;
use sluice_tune::autotune::{AutoTune, Limits, MemoryBudget};
use sluice_tune::window::{FixedWindows, WindowPolicy};

use crate::flow::PeerWindows;
use crate::seed::{variant, Seed};
use crate::{pick, Chunk, Field, Lifecycle};

/// What the peer or the handler does next.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Raw bytes from the peer.
    Input(Chunk),
    /// One frame from the peer, its header well-formed.
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
    /// A request head from the peer, HPACK-encoded, in a HEADERS frame (and CONTINUATIONs
    /// past 16 KiB).
    Request {
        /// Stream id (odd ones are valid).
        stream: u8,
        /// `:method` from a short list.
        method: u8,
        /// `:path`.
        path: Chunk,
        /// Regular fields.
        fields: Vec<Field>,
        /// END_STREAM.
        end: bool,
    },
    /// Virtual time goes on by `n` × 10 ms.
    Advance(u16),
    /// The timer fires at its deadline.
    Timeout,
    /// The driver writes, up to `n` × 256 bytes of body data.
    Transmit(u16),
    /// The handler answers a request with `status` (1xx interim heads included).
    Respond {
        /// Which request.
        pick: u8,
        /// Status.
        status: u16,
        /// Without a body.
        end: bool,
    },
    /// The handler sends `len` body bytes.
    Data {
        /// Which request.
        pick: u8,
        /// Length.
        len: u16,
        /// The last.
        end: bool,
    },
    /// The handler ends with trailers.
    Trailers(u8),
    /// The handler resets a stream.
    Reset(u8),
    /// The handler consumed request body bytes.
    Release {
        /// Which request.
        pick: u8,
        /// Bytes.
        n: u16,
    },
    /// The handler drops a request body.
    Discard(u8),
    /// The handler reprioritises a response.
    Priority {
        /// Which request.
        pick: u8,
        /// A priority field value.
        value: Chunk,
    },
    /// Graceful shutdown.
    GoAway,
    /// The driver measured an RTT of `n` ms.
    Rtt(u16),
    /// The peer closed its side.
    Eof,
    /// The driver moves to a new read buffer: it takes what is unparsed (part of a DATA frame
    /// may be handed on instead, see `Connection::take_unparsed_input`) and starts the new
    /// buffer with it.
    NewBuffer,
}

/// Structured input of `h2_server`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// Small limits (bit 0 streams, 1 header list, 2 glitches and floods, 3 windows, 4
    /// auto-tuned windows, 5 a small HPACK table, 6 an ORIGIN frame); bit 7: the peer's bytes
    /// come in buffers of their own, as a TLS stream hands its records over.
    pub knobs: u8,
    /// The preface's SETTINGS: (id, value) pairs.
    pub settings: Vec<(u16, u32)>,
    /// What happens.
    pub actions: Vec<Action>,
}

fn config(knobs: u8) -> Config {
    let mut cfg = Config::default();
    if knobs & 1 != 0 {
        cfg.max_concurrent_streams = 2;
    }
    if knobs & 2 != 0 {
        cfg.max_header_list_size = 200;
        cfg.max_continuation_frames = 2;
    }
    if knobs & 4 != 0 {
        cfg.max_glitches_per_window = 3;
        cfg.max_resets_per_window = 3;
        cfg.max_pings_per_window = 3;
        cfg.max_settings_per_window = 3;
        cfg.max_pending_priority_updates = 2;
    }
    if knobs & 32 != 0 {
        cfg.header_table_size = 64;
    }
    if knobs & 64 != 0 {
        cfg.origins = Some(vec!["https://a.example".into()]);
    }
    cfg
}

fn policy(knobs: u8) -> Box<dyn WindowPolicy> {
    if knobs & 16 != 0 {
        let mut l = Limits::new(MemoryBudget::new(64 << 20));
        if knobs & 8 != 0 {
            l.initial_stream = 1000;
            l.initial_connection = 70_000;
        }
        return Box::new(AutoTune::new(l));
    }
    if knobs & 8 != 0 {
        return Box::new(FixedWindows { stream: 100, connection: 65_535 });
    }
    Box::<FixedWindows>::default()
}

/// A frame header and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut Vec<u8>) {
    // Invariant: callers pass payloads under 16 MiB (fuzz chunks are under 64 KiB).
    Head { len: payload.len() as u32, kind, flags, stream }.encode(out);
    out.extend_from_slice(payload);
}

/// A header block in HEADERS and CONTINUATION frames of at most 16 KiB.
pub fn header_frames(stream: u32, block: &[u8], end: bool, out: &mut Vec<u8>) {
    let mut pieces = block.chunks(16_384).peekable();
    let first = pieces.next().unwrap_or(&[]);
    let last = pieces.peek().is_none();
    let flags = if end { flag::END_STREAM } else { 0 } | if last { flag::END_HEADERS } else { 0 };
    frame(kind::HEADERS, flags, stream, first, out);
    while let Some(p) = pieces.next() {
        let flags = if pieces.peek().is_none() { flag::END_HEADERS } else { 0 };
        frame(kind::CONTINUATION, flags, stream, p, out);
    }
}

const METHODS: [&str; 5] = ["GET", "POST", "HEAD", "CONNECT", "PUT"];

/// The peer's side of a request: an HPACK block of a request head.
pub fn request_block(enc: &mut Encoder, method: u8, path: &[u8], fields: &[Field]) -> Vec<u8> {
    let m = METHODS[usize::from(method) % METHODS.len()];
    let pseudo = [
        (&b":method"[..], m.as_bytes(), false),
        (b":scheme", b"https", false),
        (b":authority", b"a.example", false),
        (b":path", path, false),
    ];
    let mut block = Vec::new();
    let regular = fields.iter().map(|f| (&f.name.0[..], &f.value.0[..], f.sensitive));
    enc.encode(pseudo.into_iter().chain(regular), &mut block);
    block
}

/// Split `out` into frames: the engine writes whole frames only.
fn check_frames(mut out: &[u8]) {
    while !out.is_empty() {
        let head = Head::parse(out).expect("a whole frame header");
        let total = 9 + head.len as usize;
        assert!(out.len() >= total, "a frame cut short");
        out = &out[total..];
    }
}

/// No panic; output is whole frames, within the peer's frame size, DATA within its
/// flow-control windows; output bounded by what the peer sent and the handler
/// queued (no amplification); a failed connection stays failed and finishes.
pub fn run(input: &Input) {
    let t0 = Instant::now();
    let mut now = t0;
    let mut conn = Connection::new(config(input.knobs), policy(input.knobs), now);
    // As the server's driver does: the engine reports the streams it forgets.
    conn.report_closed();
    let mut closed: Vec<u64> = Vec::new();
    let mut enc = Encoder::new();
    let mut first = PREFACE.to_vec();
    let mut payload = Vec::new();
    for (id, v) in &input.settings {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&v.to_be_bytes());
    }
    frame(kind::SETTINGS, 0, 0, &payload, &mut first);
    conn.handle_input(now, &first);
    let mut windows = PeerWindows::default();
    windows.peer(&first[PREFACE.len()..]);
    let mut fed = first.len();
    let mut queued = 0usize;
    let mut written = 0usize;
    let mut requests: Vec<u32> = Vec::new();
    let mut life = Lifecycle::default();
    let mut failed = false;
    let mut out = Vec::new();
    for (i, action) in input.actions.iter().enumerate() {
        let mut peer = Vec::new();
        match action {
            Action::Input(b) => peer.extend_from_slice(&b.0),
            Action::Frame { kind, flags, stream, payload } => {
                frame(*kind, *flags, u32::from(*stream), &payload.0, &mut peer);
            }
            Action::Request { stream, method, path, fields, end } => {
                let block = request_block(&mut enc, *method, &path.0, fields);
                header_frames(u32::from(*stream), &block, *end, &mut peer);
            }
            Action::Advance(n) => now += Duration::from_millis(10 * u64::from(*n)),
            Action::Timeout => {
                if let Some(t) = conn.poll_timeout() {
                    now = now.max(t);
                    conn.handle_timeout(now);
                    assert!(conn.poll_timeout().is_none_or(|next| next > now), "a timer due after it ran");
                }
            }
            Action::Transmit(n) => {
                out.clear();
                let _ = conn.poll_transmit(now, &mut out, usize::from(*n) * 256);
                check_frames(&out);
                windows.ours(&out);
                written += out.len();
            }
            Action::Respond { pick: k, status, end } => {
                if let Some(id) = pick(&requests, *k) {
                    let fields = vec![sluice_h2::Field::new("content-type", "text/plain")];
                    let _ = conn.send_response(id, *status, fields, *end);
                }
            }
            Action::Data { pick: k, len, end } => {
                if let Some(id) = pick(&requests, *k) {
                    if conn.send_data(id, Bytes::from(vec![b'x'; usize::from(*len)]), *end).is_ok() {
                        queued += usize::from(*len);
                    }
                }
            }
            Action::Trailers(k) => {
                if let Some(id) = pick(&requests, *k) {
                    let _ = conn.send_trailers(id, vec![sluice_h2::Field::new("x-checksum", "0")]);
                }
            }
            Action::Reset(k) => {
                if let Some(id) = pick(&requests, *k) {
                    conn.reset(id, Reason::CANCEL);
                }
            }
            Action::Release { pick: k, n } => {
                if let Some(id) = pick(&requests, *k) {
                    conn.release(now, id, usize::from(*n));
                }
            }
            Action::Discard(k) => {
                if let Some(id) = pick(&requests, *k) {
                    conn.discard_body(now, id);
                }
            }
            Action::Priority { pick: k, value } => {
                if let Some(id) = pick(&requests, *k) {
                    conn.apply_priority_field(id, &value.0);
                }
            }
            Action::GoAway => conn.go_away(),
            Action::Rtt(ms) => conn.handle_rtt(Duration::from_millis(u64::from(*ms))),
            Action::Eof => conn.handle_eof(),
            Action::NewBuffer => {
                // A failed connection keeps whatever input followed the frame that failed it.
                let live = conn.wants_read();
                let rest = conn.take_unparsed_input(now);
                let most = HEADER_LEN + MAX_FRAME_SIZE as usize;
                assert!(!live || rest.len() < most, "at most one frame's bytes are carried over");
                conn.handle_input(now, &rest);
            }
        }
        // A driver stops reading while the engine does not want input.
        if !peer.is_empty() && conn.wants_read() {
            fed += peer.len();
            if input.knobs & 128 != 0 {
                // Buffers that do not continue one another in memory, cut anywhere (in frame
                // headers, DATA payloads, control frames): `handle_input_buf`'s own path.
                let cut = 1 + (i * 7_919 + peer.len()) % 17_000;
                for part in peer.chunks(cut) {
                    conn.handle_input_buf(now, bytes::BytesMut::from(part));
                }
            } else {
                conn.handle_input(now, &peer);
            }
            windows.peer(&peer);
        }
        let mut seen = HashSet::new();
        while let Some(e) = conn.poll_event() {
            match e {
                Event::Request { stream, end_stream, .. } => {
                    assert!(stream % 2 == 1, "a request on an even stream");
                    assert!(seen.insert(stream) && !requests.contains(&stream), "stream {stream} opened twice");
                    requests.push(stream);
                    life.head(u64::from(stream), end_stream);
                }
                Event::Data { stream, end_stream, .. } => life.body(u64::from(stream), end_stream),
                Event::Trailers { stream, .. } => life.body(u64::from(stream), true),
                Event::Reset { stream, .. } => life.reset(u64::from(stream)),
                Event::ConnectionError(_) => failed = true,
                Event::GoAway { .. } => {}
            }
        }
        // A forgotten stream is reported once, and is gone.
        let before = closed.len();
        assert!(conn.take_closed(&mut closed));
        for (at, &id) in closed.iter().enumerate().skip(before) {
            assert!(!closed[..at].contains(&id), "stream {id} reported closed twice");
            assert!(conn.buffered(u32::try_from(id).unwrap()).is_none(), "stream {id} reported closed but held");
        }
        // The handler's frames are bounded by what it queued; the rest answers the peer, at
        // most a few control frames per frame received (4 bytes out per byte in covers a
        // RST_STREAM and two WINDOW_UPDATEs for a 9-byte frame) plus our first flight.
        let bound = 4 * fed + queued + 9 * queued.div_ceil(1024) + 256 * (i + 1) + 4096;
        assert!(written <= bound, "{written} bytes written for {fed} in and {queued} queued");
        if failed {
            out.clear();
            let _ = conn.poll_transmit(now, &mut out, usize::MAX);
            check_frames(&out);
            written += out.len();
            assert!(conn.is_done(), "a failed connection is done once its GOAWAY is out");
            assert!(conn.poll_timeout().is_none());
            assert!(!conn.wants_read());
        }
    }
}

impl Seed for Action {
    fn seed(&self, out: &mut Vec<u8>) {
        const N: u32 = 17;
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
            Self::Request { stream, method, path, fields, end } => {
                variant(2, N, out);
                stream.seed(out);
                method.seed(out);
                path.seed(out);
                fields.seed(out);
                end.seed(out);
            }
            Self::Advance(n) => {
                variant(3, N, out);
                n.seed(out);
            }
            Self::Timeout => variant(4, N, out),
            Self::Transmit(n) => {
                variant(5, N, out);
                n.seed(out);
            }
            Self::Respond { pick, status, end } => {
                variant(6, N, out);
                pick.seed(out);
                status.seed(out);
                end.seed(out);
            }
            Self::Data { pick, len, end } => {
                variant(7, N, out);
                pick.seed(out);
                len.seed(out);
                end.seed(out);
            }
            Self::Trailers(k) => {
                variant(8, N, out);
                k.seed(out);
            }
            Self::Reset(k) => {
                variant(9, N, out);
                k.seed(out);
            }
            Self::Release { pick, n } => {
                variant(10, N, out);
                pick.seed(out);
                n.seed(out);
            }
            Self::Discard(k) => {
                variant(11, N, out);
                k.seed(out);
            }
            Self::Priority { pick, value } => {
                variant(12, N, out);
                pick.seed(out);
                value.seed(out);
            }
            Self::GoAway => variant(13, N, out),
            Self::Rtt(n) => {
                variant(14, N, out);
                n.seed(out);
            }
            Self::Eof => variant(15, N, out),
            Self::NewBuffer => variant(16, N, out),
        }
    }
}

impl Seed for Input {
    fn seed(&self, out: &mut Vec<u8>) {
        self.knobs.seed(out);
        self.settings.seed(out);
        self.actions.seed(out);
    }
}
