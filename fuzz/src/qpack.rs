//! QPACK (RFC 9204): arbitrary encoder-stream bytes and field sections into the decoder, and
//! field sections through an encoder–decoder pair with the encoder stream delayed, sections
//! blocked, reordered across streams and cancelled.

use std::collections::{HashMap, VecDeque};

use arbitrary::Arbitrary;
use sluice_qpack::{Decoded, Decoder, Encoder, FieldLine, FieldRef};

use crate::seed::{variant, Seed};
use crate::{Chunk, Field};

/// RFC 9204 §3.2.1 / RFC 9114 §4.2.2 counting.
const FIELD_OVERHEAD: u64 = 32;

/// One input to the decoder.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum DecodeOp {
    /// Bytes of the peer's encoder stream.
    Encoder(Chunk),
    /// A field section (a HEADERS payload) of request stream `4 * stream`.
    Section {
        /// Stream number.
        stream: u8,
        /// The section.
        bytes: Chunk,
    },
    /// Request stream `4 * stream` abandoned.
    Cancel(u8),
}

/// Structured input of `qpack_decode`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct DecodeInput {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY we advertise.
    pub capacity: u16,
    /// SETTINGS_QPACK_BLOCKED_STREAMS we advertise.
    pub blocked: u8,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE.
    pub max_section: u16,
    /// The inputs, in order.
    pub ops: Vec<DecodeOp>,
}

fn section_size(fields: &[FieldLine]) -> u64 {
    fields.iter().map(|f| f.name.len() as u64 + f.value.len() as u64 + FIELD_OVERHEAD).sum()
}

/// Never a panic; the table within its capacity, blocked streams within the limit, decoded
/// sections within the section limit, decoder-stream output bounded by the input. Stops at
/// the first error, as the connection would close.
pub fn decode(input: &DecodeInput) {
    let capacity = u64::from(input.capacity);
    let blocked = u64::from(input.blocked);
    let max_section = u64::from(input.max_section);
    let mut dec = Decoder::new(capacity, blocked, max_section);
    let mut fed = 0usize;
    let mut acks = 0usize;
    let check_fields = |fields: &[FieldLine]| {
        assert!(section_size(fields) <= max_section, "section beyond SETTINGS_MAX_FIELD_SECTION_SIZE");
    };
    for op in &input.ops {
        let result = match op {
            DecodeOp::Encoder(b) => {
                fed += b.0.len();
                dec.on_encoder_stream(&b.0).map(|()| {
                    while let Some((_, r)) = dec.poll_unblocked() {
                        if let Ok(f) = r {
                            check_fields(&f);
                        }
                    }
                })
            }
            DecodeOp::Section { stream, bytes } => {
                fed += bytes.0.len();
                dec.decode(4 * u64::from(*stream), &bytes.0).map(|d| {
                    if let Decoded::Fields(f) = d {
                        check_fields(&f);
                    }
                })
            }
            DecodeOp::Cancel(stream) => {
                dec.cancel_stream(4 * u64::from(*stream));
                Ok(())
            }
        };
        assert!(dec.table_size() <= capacity, "table {} above capacity {capacity}", dec.table_size());
        assert!(dec.blocked_streams() as u64 <= blocked, "more blocked streams than advertised");
        while let Some(b) = dec.poll_decoder_stream() {
            acks += b.len();
        }
        // Each instruction or section yields at most one instruction of at most 10 bytes
        // (a varint of a stream id or increment), and each costs at least one byte.
        assert!(acks <= 10 * (fed + input.ops.len()), "decoder stream {acks} bytes for {fed} in");
        if result.is_err() {
            return;
        }
    }
}

/// One step of the round trip.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum RoundTripOp {
    /// Encode a section on the stream of `slot` (a fresh stream after two sections: head and
    /// trailers), held until delivered.
    Encode {
        /// One of four concurrent request streams.
        slot: u8,
        /// The field lines.
        fields: Vec<Field>,
    },
    /// Insert an entry ahead of use.
    Insert {
        /// Name.
        name: Chunk,
        /// Value.
        value: Chunk,
    },
    /// Deliver everything queued on the encoder stream.
    DeliverEncoder,
    /// Deliver the oldest held section of `slot`'s stream.
    DeliverSection(u8),
    /// Deliver everything queued on the decoder stream (acknowledgments).
    DeliverDecoder,
    /// Abandon `slot`'s stream (its held sections are dropped).
    Cancel(u8),
}

/// Structured input of `qpack_roundtrip`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct RoundTrip {
    /// Table capacity both sides agree on (the decoder's SETTINGS).
    pub capacity: u16,
    /// Blocked streams both sides agree on.
    pub blocked: u8,
    /// The steps.
    pub ops: Vec<RoundTripOp>,
}

type Lines = Vec<(Vec<u8>, Vec<u8>, bool)>;

struct Pair {
    enc: Encoder,
    dec: Decoder,
    /// Encoder-stream bytes not delivered yet.
    encoder_stream: Vec<u8>,
    decoder_stream: Vec<u8>,
    /// Per stream: sections encoded and not delivered.
    held: HashMap<u64, VecDeque<Vec<u8>>>,
    /// Per stream: field lines encoded and not decoded yet, in order.
    expected: HashMap<u64, VecDeque<Lines>>,
    /// Per slot: its stream and the sections encoded on it.
    slots: [(u64, u8); 4],
    next_id: u64,
}

impl Pair {
    fn check(&mut self, id: u64, got: &[FieldLine]) {
        let want = self.expected.get_mut(&id).and_then(VecDeque::pop_front).expect("a section that was encoded");
        assert_eq!(got.len(), want.len(), "stream {id}: field count");
        for (g, (name, value, sensitive)) in got.iter().zip(want) {
            assert_eq!((&g.name[..], &g.value[..]), (&name[..], &value[..]), "stream {id}");
            assert!(g.never_indexed || !sensitive, "a sensitive field lost its N bit");
        }
    }

    fn poll(&mut self) {
        while let Some((id, r)) = self.dec.poll_unblocked() {
            let fields = r.unwrap_or_else(|e| panic!("unblocked section of {id} fails: {e:?}"));
            self.check(id, &fields);
        }
        while let Some(b) = self.dec.poll_decoder_stream() {
            self.decoder_stream.extend_from_slice(&b);
        }
        while let Some(b) = self.enc.poll_encoder_stream() {
            self.encoder_stream.extend_from_slice(&b);
        }
    }

    fn deliver_encoder(&mut self) {
        let b = std::mem::take(&mut self.encoder_stream);
        self.dec.on_encoder_stream(&b).unwrap_or_else(|e| panic!("our encoder stream fails: {e:?}"));
        self.poll();
    }

    fn deliver_section(&mut self, id: u64) {
        let Some(section) = self.held.get_mut(&id).and_then(VecDeque::pop_front) else { return };
        match self.dec.decode(id, &section).unwrap_or_else(|e| panic!("our section fails: {e:?}")) {
            Decoded::Fields(f) => self.check(id, &f),
            Decoded::Blocked => {}
        }
        self.poll();
    }

    fn slot(&mut self, k: u8) -> u64 {
        let s = &mut self.slots[usize::from(k % 4)];
        if s.1 >= 2 {
            *s = (self.next_id, 0);
            self.next_id += 4;
        }
        s.0
    }
}

/// Every section decodes to what was encoded, blocked or not, once the encoder stream has
/// caught up; no instruction or acknowledgment of ours is refused by the other side.
pub fn roundtrip(input: &RoundTrip) {
    let capacity = u64::from(input.capacity);
    let blocked = u64::from(input.blocked);
    let mut p = Pair {
        enc: Encoder::new(capacity, blocked),
        dec: Decoder::new(capacity, blocked, u64::MAX),
        encoder_stream: Vec::new(),
        decoder_stream: Vec::new(),
        held: HashMap::new(),
        expected: HashMap::new(),
        slots: [(0, 0), (4, 0), (8, 0), (12, 0)],
        next_id: 16,
    };
    for op in &input.ops {
        match op {
            RoundTripOp::Encode { slot, fields } => {
                let id = p.slot(*slot);
                let mut out = Vec::new();
                let refs =
                    fields.iter().map(|f| FieldRef { name: &f.name.0, value: &f.value.0, never_indexed: f.sensitive });
                p.enc.encode(id, refs, &mut out);
                let lines = fields.iter().map(|f| (f.name.0.clone(), f.value.0.clone(), f.sensitive)).collect();
                p.expected.entry(id).or_default().push_back(lines);
                p.held.entry(id).or_default().push_back(out);
                p.slots[usize::from(slot % 4)].1 += 1;
                p.poll();
            }
            RoundTripOp::Insert { name, value } => {
                p.enc.insert(&name.0, &value.0);
                p.poll();
            }
            RoundTripOp::DeliverEncoder => p.deliver_encoder(),
            RoundTripOp::DeliverSection(k) => {
                let id = p.slots[usize::from(k % 4)].0;
                p.deliver_section(id);
            }
            RoundTripOp::DeliverDecoder => {
                let b = std::mem::take(&mut p.decoder_stream);
                p.enc.on_decoder_stream(&b).unwrap_or_else(|e| panic!("our decoder stream fails: {e:?}"));
            }
            RoundTripOp::Cancel(k) => {
                let s = &mut p.slots[usize::from(k % 4)];
                let id = s.0;
                *s = (p.next_id, 0);
                p.next_id += 4;
                p.dec.cancel_stream(id);
                p.held.remove(&id);
                p.expected.remove(&id);
                p.poll();
            }
        }
        assert!(p.dec.table_size() <= capacity);
    }
    // Everything arrives: every section must decode.
    p.deliver_encoder();
    let mut ids: Vec<u64> = p.held.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        while p.held.get(&id).is_some_and(|q| !q.is_empty()) {
            p.deliver_section(id);
        }
    }
    let left: usize = p.expected.values().map(VecDeque::len).sum();
    assert_eq!(left, 0, "sections never decoded");
    let b = std::mem::take(&mut p.decoder_stream);
    p.enc.on_decoder_stream(&b).unwrap_or_else(|e| panic!("our decoder stream fails: {e:?}"));
}

impl Seed for DecodeOp {
    fn seed(&self, out: &mut Vec<u8>) {
        match self {
            Self::Encoder(b) => {
                variant(0, 3, out);
                b.seed(out);
            }
            Self::Section { stream, bytes } => {
                variant(1, 3, out);
                stream.seed(out);
                bytes.seed(out);
            }
            Self::Cancel(s) => {
                variant(2, 3, out);
                s.seed(out);
            }
        }
    }
}

impl Seed for DecodeInput {
    fn seed(&self, out: &mut Vec<u8>) {
        self.capacity.seed(out);
        self.blocked.seed(out);
        self.max_section.seed(out);
        self.ops.seed(out);
    }
}

impl Seed for RoundTripOp {
    fn seed(&self, out: &mut Vec<u8>) {
        match self {
            Self::Encode { slot, fields } => {
                variant(0, 6, out);
                slot.seed(out);
                fields.seed(out);
            }
            Self::Insert { name, value } => {
                variant(1, 6, out);
                name.seed(out);
                value.seed(out);
            }
            Self::DeliverEncoder => variant(2, 6, out),
            Self::DeliverSection(k) => {
                variant(3, 6, out);
                k.seed(out);
            }
            Self::DeliverDecoder => variant(4, 6, out),
            Self::Cancel(k) => {
                variant(5, 6, out);
                k.seed(out);
            }
        }
    }
}

impl Seed for RoundTrip {
    fn seed(&self, out: &mut Vec<u8>) {
        self.capacity.seed(out);
        self.blocked.seed(out);
        self.ops.seed(out);
    }
}
