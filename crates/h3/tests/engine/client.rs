//! A test client: encodes varints, frames and QPACK sections itself (independently of the
//! engine's code), drives a server `Connection`, and parses everything it writes.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use bytes::Bytes;
use sluice_h3::{Code, Config, Connection, Event, Transmit};
use sluice_qpack::{Decoded, Decoder, Encoder, FieldRef};

/// Our (server) unidirectional stream ids, as a driver would have opened them.
pub(crate) const S_CONTROL: u64 = 3;
pub(crate) const S_ENCODER: u64 = 7;
pub(crate) const S_DECODER: u64 = 11;
/// The client's unidirectional streams.
pub(crate) const C_CONTROL: u64 = 2;
pub(crate) const C_ENCODER: u64 = 6;
pub(crate) const C_DECODER: u64 = 10;

/// Frame types, written out here rather than taken from the engine.
pub(crate) const DATA: u64 = 0x00;
pub(crate) const HEADERS: u64 = 0x01;
pub(crate) const CANCEL_PUSH: u64 = 0x03;
pub(crate) const SETTINGS: u64 = 0x04;
pub(crate) const PUSH_PROMISE: u64 = 0x05;
pub(crate) const GOAWAY: u64 = 0x07;
pub(crate) const ORIGIN: u64 = 0x0c;
pub(crate) const MAX_PUSH_ID: u64 = 0x0d;
pub(crate) const PRIORITY_UPDATE: u64 = 0xf0700;
pub(crate) const PRIORITY_UPDATE_PUSH: u64 = 0xf0701;

/// QUIC varint (RFC 9000 §16), shortest form.
pub(crate) fn varint(v: u64) -> Vec<u8> {
    match v {
        0..=0x3f => vec![v as u8],
        0x40..=0x3fff => (v as u16 | 0x4000).to_be_bytes().to_vec(),
        0x4000..=0x3fff_ffff => (v as u32 | 0x8000_0000).to_be_bytes().to_vec(),
        _ => (v | 0xc000_0000_0000_0000).to_be_bytes().to_vec(),
    }
}

fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let n = 1usize << (b.first()? >> 6);
    let bytes = b.get(..n)?;
    let mut v = u64::from(bytes[0] & 0x3f);
    for &c in &bytes[1..] {
        v = (v << 8) | u64::from(c);
    }
    Some((v, n))
}

/// A whole frame.
pub(crate) fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = varint(ty);
    out.extend(varint(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// A SETTINGS frame.
pub(crate) fn settings(values: &[(u64, u64)]) -> Vec<u8> {
    let mut p = Vec::new();
    for &(id, v) in values {
        p.extend(varint(id));
        p.extend(varint(v));
    }
    frame(SETTINGS, &p)
}

/// A frame whose payload is one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
pub(crate) fn frame_varint(ty: u64, v: u64) -> Vec<u8> {
    frame(ty, &varint(v))
}

/// A PRIORITY_UPDATE frame.
pub(crate) fn priority_update(ty: u64, id: u64, value: &str) -> Vec<u8> {
    let mut p = varint(id);
    p.extend_from_slice(value.as_bytes());
    frame(ty, &p)
}

/// A frame of the server's output, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum F {
    Headers(Vec<(String, String)>),
    Data(Vec<u8>),
    Other(u64, Vec<u8>),
}

impl F {
    pub(crate) fn status(&self) -> Option<&str> {
        match self {
            Self::Headers(h) => h.iter().find(|(n, _)| n == ":status").map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

pub(crate) struct Client {
    pub(crate) conn: Connection,
    /// The virtual time every input is given (tests move it forward by hand).
    pub(crate) now: Instant,
    /// The client's QPACK encoder (requests) and decoder (responses).
    pub(crate) enc: Encoder,
    pub(crate) dec: Decoder,
    /// Every transmit, in order.
    pub(crate) log: Vec<Transmit>,
    /// Bytes written per server-side stream and how far the client has parsed them.
    pub(crate) written: HashMap<u64, Vec<u8>>,
    parsed: HashMap<u64, usize>,
    pub(crate) finished: HashSet<u64>,
    pub(crate) resets: Vec<(u64, Code)>,
    pub(crate) stops: Vec<(u64, Code)>,
    pub(crate) close: Option<(Code, &'static str)>,
}

impl Client {
    /// A fresh server connection; nothing sent by the client yet.
    pub(crate) fn bare(cfg: Config) -> Self {
        Self {
            conn: Connection::new(cfg, S_CONTROL, S_ENCODER, S_DECODER),
            now: Instant::now(),
            enc: Encoder::new(0, 0),
            dec: Decoder::new(4096, 16, u64::MAX),
            log: Vec::new(),
            written: HashMap::new(),
            parsed: HashMap::new(),
            finished: HashSet::new(),
            resets: Vec::new(),
            stops: Vec::new(),
            close: None,
        }
    }

    /// A server connection after the client opened its control stream (with SETTINGS
    /// announcing a 4096-byte QPACK table and 16 blocked streams) and its QPACK streams, and
    /// read the server's SETTINGS.
    pub(crate) fn new(cfg: Config) -> Self {
        let mut c = Self::bare(cfg);
        let mut control = varint(0x00);
        control.extend(settings(&[(0x01, 4096), (0x07, 16)]));
        c.input(C_CONTROL, &control, false);
        c.input(C_ENCODER, &[0x02], false);
        c.input(C_DECODER, &[0x03], false);
        c.pump();
        assert_eq!(c.close, None);
        let server = c.server_settings();
        let get = |id| server.iter().find(|&&(i, _)| i == id).map_or(0, |&(_, v)| v);
        c.enc = Encoder::new(get(0x01), get(0x07));
        c
    }

    pub(crate) fn input(&mut self, stream: u64, data: &[u8], fin: bool) {
        self.conn.on_stream_data(self.now, stream, data, fin);
    }

    /// Bytes on the client's control stream (after its type byte).
    pub(crate) fn control(&mut self, frame: &[u8]) {
        self.input(C_CONTROL, frame, false);
    }

    /// Take every transmit; feed the server's QPACK streams to the client's QPACK state.
    pub(crate) fn pump(&mut self) -> Vec<Transmit> {
        let mut got = Vec::new();
        while let Some(t) = self.conn.poll_transmit() {
            match &t {
                Transmit::Write { stream, data, body, fin } => {
                    let w = self.written.entry(*stream).or_default();
                    w.extend_from_slice(data);
                    w.extend_from_slice(body);
                    if *fin {
                        assert!(self.finished.insert(*stream), "stream {stream} finished twice");
                    }
                }
                Transmit::Reset { stream, code } => self.resets.push((*stream, *code)),
                Transmit::StopSending { stream, code } => self.stops.push((*stream, *code)),
                Transmit::Close { code, reason } => {
                    assert!(self.close.is_none(), "closed twice");
                    self.close = Some((*code, reason));
                }
            }
            got.push(t);
        }
        self.log.extend(got.iter().cloned());
        self.qpack_streams();
        got
    }

    /// Pull at most `n` transmits.
    pub(crate) fn pull(&mut self, n: usize) -> Vec<Transmit> {
        let mut got = Vec::new();
        for _ in 0..n {
            let Some(t) = self.conn.poll_transmit() else { break };
            if let Transmit::Write { stream, data, body, fin } = &t {
                let w = self.written.entry(*stream).or_default();
                w.extend_from_slice(data);
                w.extend_from_slice(body);
                if *fin {
                    self.finished.insert(*stream);
                }
            }
            got.push(t);
        }
        self.log.extend(got.iter().cloned());
        self.qpack_streams();
        got
    }

    fn new_bytes(&mut self, stream: u64, skip_type: bool) -> Vec<u8> {
        let all = self.written.get(&stream).cloned().unwrap_or_default();
        let from = self.parsed.entry(stream).or_insert(usize::from(skip_type && !all.is_empty()));
        let out = all[(*from).min(all.len())..].to_vec();
        *from = all.len();
        out
    }

    fn qpack_streams(&mut self) {
        let e = self.new_bytes(S_ENCODER, true);
        if !e.is_empty() {
            self.dec.on_encoder_stream(&e).expect("server encoder stream valid");
        }
        let d = self.new_bytes(S_DECODER, true);
        if !d.is_empty() {
            self.enc.on_decoder_stream(&d).expect("server decoder stream valid");
        }
    }

    /// All bytes the server wrote on its control stream, split into frames (after the type).
    pub(crate) fn control_frames(&self) -> Vec<(u64, Vec<u8>)> {
        let all = self.written.get(&S_CONTROL).cloned().unwrap_or_default();
        assert_eq!(all.first(), Some(&0x00), "control stream type first");
        split_frames(&all[1..])
    }

    /// The server's SETTINGS values.
    pub(crate) fn server_settings(&self) -> Vec<(u64, u64)> {
        let frames = self.control_frames();
        assert_eq!(frames[0].0, SETTINGS, "SETTINGS is the first frame");
        let mut p = &frames[0].1[..];
        let mut out = Vec::new();
        while !p.is_empty() {
            let (id, n) = read_varint(p).unwrap();
            let (v, m) = read_varint(&p[n..]).unwrap();
            out.push((id, v));
            p = &p[n + m..];
        }
        out
    }

    /// Encode a field section for `stream`; encoder-stream instructions go to the server first.
    pub(crate) fn section(&mut self, stream: u64, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        self.enc.encode(stream, fields.iter().map(|&(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
        if let Some(ins) = self.enc.poll_encoder_stream() {
            self.input(C_ENCODER, &ins, false);
        }
        block
    }

    /// A HEADERS frame for `stream` (encoder-stream bytes are sent ahead).
    pub(crate) fn headers_frame(&mut self, stream: u64, fields: &[(&str, &str)]) -> Vec<u8> {
        let block = self.section(stream, fields);
        frame(HEADERS, &block)
    }

    /// Send a request head on `stream`.
    pub(crate) fn request(&mut self, stream: u64, fields: &[(&str, &str)], fin: bool) {
        let f = self.headers_frame(stream, fields);
        self.input(stream, &f, fin);
    }

    /// A GET for `path`.
    pub(crate) fn get(&mut self, stream: u64, path: &str, extra: &[(&str, &str)]) {
        let mut fields = vec![(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", path)];
        fields.extend_from_slice(extra);
        self.request(stream, &fields, true);
    }

    pub(crate) fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    /// Frames the server wrote on request `stream` since the last call, HEADERS decoded.
    pub(crate) fn frames(&mut self, stream: u64) -> Vec<F> {
        let all = self.written.get(&stream).cloned().unwrap_or_default();
        let from = *self.parsed.get(&stream).unwrap_or(&0);
        let mut out = Vec::new();
        let mut used = from;
        let mut p = &all[from..];
        while let Some((ty, n)) = read_varint(p) {
            let Some((len, m)) = read_varint(&p[n..]) else { break };
            let Some(payload) = p.get(n + m..n + m + len as usize) else { break };
            out.push(match ty {
                HEADERS => match self.dec.decode(stream, payload).expect("valid field section") {
                    Decoded::Fields(f) => F::Headers(
                        f.iter()
                            .map(|l| {
                                (String::from_utf8_lossy(&l.name).into(), String::from_utf8_lossy(&l.value).into())
                            })
                            .collect(),
                    ),
                    Decoded::Blocked => panic!("response section blocked: encoder stream not sent first"),
                },
                DATA => F::Data(payload.to_vec()),
                t => F::Other(t, payload.to_vec()),
            });
            used += n + m + len as usize;
            p = &p[n + m + len as usize..];
        }
        self.parsed.insert(stream, used);
        if let Some(ack) = self.dec.poll_decoder_stream() {
            self.input(C_DECODER, &ack, false);
        }
        out
    }

    /// The code of the connection close, if the server closed.
    pub(crate) fn closed_with(&mut self) -> Option<Code> {
        self.pump();
        self.close.map(|(c, _)| c)
    }
}

/// Split bytes into whole frames.
pub(crate) fn split_frames(mut p: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some((ty, n)) = read_varint(p) {
        let (len, m) = read_varint(&p[n..]).expect("frame length");
        out.push((ty, p[n + m..n + m + len as usize].to_vec()));
        p = &p[n + m + len as usize..];
    }
    out
}

/// Request body bytes of `events`, per stream, concatenated.
pub(crate) fn body(events: &[Event], stream: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        if let Event::Data { stream: s, data, .. } = e {
            if *s == stream {
                out.extend_from_slice(data);
            }
        }
    }
    out
}

/// Events with consecutive `Data` of one stream merged (read boundaries differ, content not).
pub(crate) fn normalize(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for e in events {
        if let (Some(Event::Data { stream: s0, data: d0, end_stream: e0 }), Event::Data { stream, data, end_stream }) =
            (out.last_mut(), &e)
        {
            if *s0 == *stream && !*e0 {
                let mut joined = d0.to_vec();
                joined.extend_from_slice(data);
                *d0 = Bytes::from(joined);
                *e0 = *end_stream;
                continue;
            }
        }
        if let Event::Data { data, end_stream: false, .. } = &e {
            if data.is_empty() {
                continue;
            }
        }
        out.push(e);
    }
    out
}
