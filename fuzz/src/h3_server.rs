//! The HTTP/3 server engine: an arbitrary sequence of (stream, bytes, fin) on request, control
//! and QPACK streams, well-formed frames and QPACK-encoded requests, resets and STOP_SENDING,
//! interleaved with the handler's answers, timers and transmits.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use sluice_h3::wire::{encode_frame, encode_settings, varint};
use sluice_h3::{Code, Config, Connection, Event, Field as H3Field, Priority, Transmit};
use sluice_qpack::{Encoder, FieldRef};

use crate::seed::{variant, Seed};
use crate::{pick, Chunk, Field, Lifecycle};

/// Our unidirectional streams, as a driver opens them (server-initiated, RFC 9000 §2.1).
const S_CONTROL: u64 = 3;
const S_ENCODER: u64 = 7;
const S_DECODER: u64 = 11;
/// The client's control and QPACK streams, as the preamble opens them.
const C_CONTROL: u64 = 2;
const C_ENCODER: u64 = 6;

/// A QUIC stream id from a byte: the two low bits are the kind (RFC 9000 §2.1), the rest the
/// number. 2, 6 and 10 are the client's first unidirectional streams.
fn stream_id(b: u8) -> u64 {
    u64::from(b)
}

/// What the client or the handler does next.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Raw bytes on a stream, `fin` after them.
    Data {
        /// Stream (see `stream_id`).
        stream: u8,
        /// Bytes.
        bytes: Chunk,
        /// The stream ends after them.
        fin: bool,
    },
    /// One frame on a stream, its header well-formed.
    Frame {
        /// Stream.
        stream: u8,
        /// Frame type (a varint).
        ty: u32,
        /// Payload.
        payload: Chunk,
        /// The stream ends after it.
        fin: bool,
    },
    /// A request head on request stream `4 * n`, QPACK-encoded by a well-behaved encoder whose
    /// encoder-stream instructions go to the client's encoder stream first.
    Request {
        /// Request stream number.
        n: u8,
        /// `:method` from a short list.
        method: u8,
        /// Regular fields.
        fields: Vec<Field>,
        /// The stream ends after the head.
        fin: bool,
    },
    /// The client opened a stream.
    Opened(u8),
    /// The client reset a stream.
    Reset {
        /// Stream.
        stream: u8,
        /// Code.
        code: u16,
    },
    /// The client asked us to stop sending.
    StopSending {
        /// Stream.
        stream: u8,
        /// Code.
        code: u16,
    },
    /// Virtual time goes on by `n` × 10 ms.
    Advance(u16),
    /// The timer fires at its deadline.
    Timeout,
    /// The driver takes up to `n` transmits.
    Transmit(u8),
    /// The handler answers a request.
    Respond {
        /// Which request.
        pick: u8,
        /// Status.
        status: u16,
        /// Without a body.
        end: bool,
    },
    /// The handler sends `len` body bytes.
    Body {
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
    ResetStream(u8),
    /// The handler stops reading a request.
    StopReading(u8),
    /// The transport cannot take more on a stream, or can again.
    Blocked {
        /// Which request.
        pick: u8,
        /// Blocked (or writable again).
        blocked: bool,
    },
    /// The handler reprioritises a response.
    Priority {
        /// Which request.
        pick: u8,
        /// Urgency (low 3 bits) and incremental (bit 3).
        p: u8,
    },
    /// Graceful shutdown.
    GoAway,
}

/// Structured input of `h3_server`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// Open the client's control stream (with SETTINGS) and QPACK streams first.
    pub preamble: bool,
    /// Small limits (bit 0 streams, 1 field sections, 2 budgets, 3 no dynamic table, 4 ORIGIN).
    pub knobs: u8,
    /// What happens.
    pub ops: Vec<Op>,
}

fn config(knobs: u8) -> Config {
    let mut cfg = Config::default();
    if knobs & 1 != 0 {
        cfg.max_concurrent_streams = 2;
        cfg.max_pending_uni_streams = 2;
    }
    if knobs & 2 != 0 {
        cfg.max_field_section_size = 200;
        cfg.max_frame_payload = 64;
        cfg.max_blocked_input = 100;
    }
    if knobs & 4 != 0 {
        cfg.max_glitches_per_window = 3;
        cfg.max_resets_per_window = 3;
        cfg.max_pending_priority_updates = 2;
        cfg.max_buffered_per_stream = 1000;
    }
    if knobs & 8 != 0 {
        cfg.qpack_max_table_capacity = 0;
        cfg.qpack_blocked_streams = 0;
    }
    if knobs & 16 != 0 {
        cfg.origins = Some(vec!["https://a.example".into()]);
    }
    cfg
}

const METHODS: [&str; 4] = ["GET", "POST", "HEAD", "CONNECT"];

/// What we wrote on one request stream: frames split at any write boundary.
#[derive(Default)]
struct Written {
    pending: Vec<u8>,
    finished: bool,
}

impl Written {
    /// A write: only HEADERS and DATA frames (RFC 9114 §4.1), nothing after FIN, and FIN only
    /// at a frame boundary.
    fn write(&mut self, id: u64, data: &[u8], fin: bool) {
        assert!(!self.finished, "stream {id}: a write after FIN");
        self.pending.extend_from_slice(data);
        let mut p = &self.pending[..];
        while let Some((ty, n)) = varint::decode(p) {
            let Some((len, m)) = varint::decode(&p[n..]) else { break };
            assert!(ty <= 1, "stream {id}: frame type {ty} on a request stream");
            let Some(rest) = usize::try_from(len).ok().and_then(|len| p.get(n + m + len..)) else { break };
            p = rest;
        }
        let used = self.pending.len() - p.len();
        self.pending.drain(..used);
        if fin {
            assert!(self.pending.is_empty(), "stream {id}: FIN inside a frame");
            self.finished = true;
        }
    }
}

/// No panic; the close is the last transmit and nothing follows it; request streams carry
/// only HEADERS and DATA frames, nothing after their FIN or reset, FIN at a frame boundary; what the engine writes is
/// bounded by what the client sent and the handler queued; events name streams the client
/// opened.
pub fn run(input: &Input) {
    let cfg = config(input.knobs);
    let mut enc = Encoder::new(cfg.qpack_max_table_capacity, cfg.qpack_blocked_streams);
    let mut conn = Connection::new(cfg, S_CONTROL, S_ENCODER, S_DECODER);
    let mut now = Instant::now();
    let (mut fed, mut queued, mut written) = (0usize, 0usize, 0usize);
    if input.preamble {
        let mut control = Vec::new();
        varint::encode(0x00, &mut control);
        encode_settings(&[(0x01, 4096), (0x07, 16)], &mut control);
        conn.on_stream_data(now, C_CONTROL, &control, false);
        conn.on_stream_data(now, C_ENCODER, &[0x02], false);
        conn.on_stream_data(now, 10, &[0x03], false);
        fed += control.len() + 2;
    }
    let mut requests: Vec<u64> = Vec::new();
    let mut life = Lifecycle::default();
    let mut closed = false;
    let mut decoder_stream = Vec::new();
    let mut streams: HashMap<u64, Written> = HashMap::new();
    for (i, op) in input.ops.iter().enumerate() {
        let mut input_on: Option<(u64, Vec<u8>, bool)> = None;
        match op {
            Op::Data { stream, bytes, fin } => input_on = Some((stream_id(*stream), bytes.0.clone(), *fin)),
            Op::Frame { stream, ty, payload, fin } => {
                let mut b = Vec::new();
                encode_frame(u64::from(*ty), &payload.0, &mut b);
                input_on = Some((stream_id(*stream), b, *fin));
            }
            Op::Request { n, method, fields, fin } => {
                let id = 4 * u64::from(*n);
                let m = METHODS[usize::from(*method) % METHODS.len()];
                let pseudo = [
                    FieldRef::new(b":method", m.as_bytes()),
                    FieldRef::new(b":scheme", b"https"),
                    FieldRef::new(b":authority", b"a.example"),
                    FieldRef::new(b":path", b"/"),
                ];
                let regular =
                    fields.iter().map(|f| FieldRef { name: &f.name.0, value: &f.value.0, never_indexed: f.sensitive });
                let mut section = Vec::new();
                enc.encode(id, pseudo.into_iter().chain(regular), &mut section);
                if let Some(ins) = enc.poll_encoder_stream() {
                    fed += ins.len();
                    conn.on_stream_data(now, C_ENCODER, &ins, false);
                }
                let mut b = Vec::new();
                encode_frame(0x01, &section, &mut b);
                input_on = Some((id, b, *fin));
            }
            Op::Opened(s) => conn.on_stream_opened(now, stream_id(*s)),
            Op::Reset { stream, code } => conn.on_stream_reset(now, stream_id(*stream), u64::from(*code)),
            Op::StopSending { stream, code } => conn.on_stop_sending(now, stream_id(*stream), u64::from(*code)),
            Op::Advance(n) => now += Duration::from_millis(10 * u64::from(*n)),
            Op::Timeout => {
                if let Some(t) = conn.poll_timeout() {
                    now = now.max(t);
                    conn.handle_timeout(now);
                    assert!(conn.poll_timeout().is_none_or(|next| next > now), "a timer due after it ran");
                }
            }
            Op::Transmit(n) => {
                for _ in 0..*n {
                    let Some(t) = conn.poll_transmit() else { break };
                    assert!(!closed, "a transmit after the close: {t:?}");
                    match t {
                        Transmit::Write { stream, data, body, fin } => {
                            written += data.len() + body.len();
                            if stream % 4 == 0 {
                                let w = streams.entry(stream).or_default();
                                w.write(stream, &data, fin && body.is_empty());
                                if !body.is_empty() {
                                    w.write(stream, &body, fin);
                                }
                            }
                            if stream == S_DECODER {
                                decoder_stream.extend_from_slice(&data);
                            }
                        }
                        Transmit::Close { .. } => closed = true,
                        Transmit::Reset { stream, .. } => {
                            written += 8;
                            // The sending part is over: nothing more may be written on it.
                            streams.entry(stream).or_default().finished = true;
                        }
                        Transmit::StopSending { .. } => written += 8,
                    }
                }
            }
            Op::Respond { pick: k, status, end } => {
                if let Some(id) = pick(&requests, *k) {
                    let _ = conn.send_response(id, *status, vec![H3Field::new("content-type", "text/plain")], *end);
                }
            }
            Op::Body { pick: k, len, end } => {
                if let Some(id) = pick(&requests, *k) {
                    if conn.send_data(id, Bytes::from(vec![b'x'; usize::from(*len)]), *end).is_ok() {
                        queued += usize::from(*len);
                    }
                }
            }
            Op::Trailers(k) => {
                if let Some(id) = pick(&requests, *k) {
                    let _ = conn.send_trailers(id, vec![H3Field::new("x-checksum", "0")]);
                }
            }
            Op::ResetStream(k) => {
                if let Some(id) = pick(&requests, *k) {
                    conn.reset(id, Code::H3_REQUEST_CANCELLED);
                }
            }
            Op::StopReading(k) => {
                if let Some(id) = pick(&requests, *k) {
                    conn.stop_reading(id);
                }
            }
            Op::Blocked { pick: k, blocked } => {
                if let Some(id) = pick(&requests, *k) {
                    if *blocked {
                        conn.on_stream_blocked(id);
                    } else {
                        conn.on_stream_writable(id);
                    }
                }
            }
            Op::Priority { pick: k, p } => {
                if let Some(id) = pick(&requests, *k) {
                    conn.set_priority(id, Priority { urgency: p & 7, incremental: p & 8 != 0 });
                }
            }
            Op::GoAway => conn.go_away(),
        }
        if let Some((id, bytes, fin)) = input_on {
            fed += bytes.len();
            conn.on_stream_data(now, id, &bytes, fin);
        }
        // Keep the request encoder in step with the server's acknowledgments (the stream type
        // byte first); a desynchronised encoder only makes later requests fail to decode.
        if decoder_stream.len() > 1 {
            let _ = enc.on_decoder_stream(&decoder_stream[1..]);
            decoder_stream.truncate(1);
        }
        let mut seen = HashSet::new();
        while let Some(e) = conn.poll_event() {
            match e {
                Event::Request { stream, end_stream, .. } => {
                    assert!(stream % 4 == 0, "a request on stream {stream}");
                    assert!(seen.insert(stream) && !requests.contains(&stream), "stream {stream} delivered twice");
                    requests.push(stream);
                    life.head(stream, end_stream);
                }
                Event::HeaderTooLarge { stream } => {
                    assert!(stream % 4 == 0, "a request on stream {stream}");
                    assert!(seen.insert(stream) && !requests.contains(&stream), "stream {stream} delivered twice");
                    requests.push(stream);
                    // The request is not read further: no body follows.
                    life.head(stream, true);
                }
                Event::Data { stream, end_stream, .. } => life.body(stream, end_stream),
                Event::Trailers { stream, .. } => life.body(stream, true),
                Event::StreamReset { stream, .. } => life.reset(stream),
                Event::GoAway { .. } | Event::ConnectionError(_) => {}
            }
        }
        // Our first flight (SETTINGS, stream types), the handler's heads and bodies, and at
        // most a few bytes of resets, STOP_SENDING and QPACK acknowledgments per byte in.
        let bound = 4 * fed + queued + 16 * queued.div_ceil(1024) + 512 * (i + 1) + 4096;
        assert!(written <= bound, "{written} bytes written for {fed} in and {queued} queued");
    }
}

impl Seed for Op {
    fn seed(&self, out: &mut Vec<u8>) {
        const N: u32 = 17;
        match self {
            Self::Data { stream, bytes, fin } => {
                variant(0, N, out);
                stream.seed(out);
                bytes.seed(out);
                fin.seed(out);
            }
            Self::Frame { stream, ty, payload, fin } => {
                variant(1, N, out);
                stream.seed(out);
                ty.seed(out);
                payload.seed(out);
                fin.seed(out);
            }
            Self::Request { n, method, fields, fin } => {
                variant(2, N, out);
                n.seed(out);
                method.seed(out);
                fields.seed(out);
                fin.seed(out);
            }
            Self::Opened(s) => {
                variant(3, N, out);
                s.seed(out);
            }
            Self::Reset { stream, code } => {
                variant(4, N, out);
                stream.seed(out);
                code.seed(out);
            }
            Self::StopSending { stream, code } => {
                variant(5, N, out);
                stream.seed(out);
                code.seed(out);
            }
            Self::Advance(n) => {
                variant(6, N, out);
                n.seed(out);
            }
            Self::Timeout => variant(7, N, out),
            Self::Transmit(n) => {
                variant(8, N, out);
                n.seed(out);
            }
            Self::Respond { pick, status, end } => {
                variant(9, N, out);
                pick.seed(out);
                status.seed(out);
                end.seed(out);
            }
            Self::Body { pick, len, end } => {
                variant(10, N, out);
                pick.seed(out);
                len.seed(out);
                end.seed(out);
            }
            Self::Trailers(k) => {
                variant(11, N, out);
                k.seed(out);
            }
            Self::ResetStream(k) => {
                variant(12, N, out);
                k.seed(out);
            }
            Self::StopReading(k) => {
                variant(13, N, out);
                k.seed(out);
            }
            Self::Blocked { pick, blocked } => {
                variant(14, N, out);
                pick.seed(out);
                blocked.seed(out);
            }
            Self::Priority { pick, p } => {
                variant(15, N, out);
                pick.seed(out);
                p.seed(out);
            }
            Self::GoAway => variant(16, N, out),
        }
    }
}

impl Seed for Input {
    fn seed(&self, out: &mut Vec<u8>) {
        self.preamble.seed(out);
        self.knobs.seed(out);
        self.ops.seed(out);
    }
}
