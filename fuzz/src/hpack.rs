//! HPACK (RFC 7541): arbitrary blocks into the decoder, and header lists through the encoder
//! and back.

use arbitrary::Arbitrary;
use sluice_hpack::{DecodeError, Decoder, Encoder};

use crate::seed::{variant, Seed};
use crate::Field;

/// RFC 9113 §6.5.2 counting: name + value + 32 per field.
const FIELD_OVERHEAD: usize = 32;

/// Raw input: byte 0 sets the decoder's table limit (× 64: 0 to 16,320 bytes), byte 1 the
/// header list limit ((n + 1) × 256), then blocks, each a 16-bit little-endian length and its
/// bytes; a length of 0xffff instead changes the table limit to the next byte × 64 (our
/// SETTINGS acknowledged). Decoding stops at the first error, as a connection would.
pub fn decode(data: &[u8]) {
    let [table, list, rest @ ..] = data else { return };
    let mut rest: &[u8] = rest;
    let mut max_table = usize::from(*table) * 64;
    let limit = (usize::from(*list) + 1) * 256;
    let mut dec = Decoder::new(max_table);
    while let [a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b]));
        let tail: &[u8] = tail;
        if len == 0xffff {
            let Some((&t, tail)) = tail.split_first() else { return };
            max_table = usize::from(t) * 64;
            dec.set_max_table_size(max_table);
            rest = tail;
            continue;
        }
        let (block, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        let mut emitted = 0usize;
        let result = dec.decode(block, limit, &mut |name, value, _| {
            // Bounded memory: no string longer than the list may be, and what is handed out
            // stays within the limit (the rest of an oversized list is decoded, not emitted).
            assert!(name.len() <= limit && value.len() <= limit, "string beyond the list limit");
            emitted += name.len() + value.len() + FIELD_OVERHEAD;
            assert!(emitted <= limit, "emitted {emitted} beyond the list limit {limit}");
        });
        assert!(dec.table_size() <= max_table, "dynamic table {} above its limit {max_table}", dec.table_size());
        match result {
            Ok(()) | Err(DecodeError::HeaderListTooLarge) => {}
            Err(_) => return,
        }
    }
}

/// One step of the round trip.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Encode a header list and decode it back.
    Block(Vec<Field>),
    /// The decoder's side advertises SETTINGS_HEADER_TABLE_SIZE = n and the encoder follows.
    TableSize(u16),
}

/// Structured input of `hpack_roundtrip`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct RoundTrip {
    /// The steps, in order, on one encoder–decoder pair.
    pub ops: Vec<Op>,
}

/// Every header list decodes to exactly what was encoded, sensitive fields as never-indexed,
/// whatever table sizes come and go; the decoder's table stays within its limit.
pub fn roundtrip(input: &RoundTrip) {
    let mut enc = Encoder::new();
    let mut dec = Decoder::new(4096);
    let mut max_table = 4096;
    for op in &input.ops {
        match op {
            Op::TableSize(n) => {
                max_table = usize::from(*n);
                enc.set_max_table_size(max_table);
                dec.set_max_table_size(max_table);
            }
            Op::Block(fields) => {
                let mut block = Vec::new();
                enc.encode(fields.iter().map(|f| (&f.name.0[..], &f.value.0[..], f.sensitive)), &mut block);
                let mut got = Vec::new();
                dec.decode(&block, usize::MAX, &mut |n, v, s| got.push((n.to_vec(), v.to_vec(), s)))
                    .unwrap_or_else(|e| panic!("our own block does not decode: {e}"));
                let want: Vec<_> = fields.iter().map(|f| (f.name.0.clone(), f.value.0.clone(), f.sensitive)).collect();
                assert_eq!(got, want, "round trip differs");
                // The encoder keeps at most 4,096 bytes (its own bound) and follows every limit.
                assert!(dec.table_size() <= max_table.min(4096), "table {} above {max_table}", dec.table_size());
            }
        }
    }
}

impl Seed for Op {
    fn seed(&self, out: &mut Vec<u8>) {
        match self {
            Self::Block(f) => {
                variant(0, 2, out);
                f.seed(out);
            }
            Self::TableSize(n) => {
                variant(1, 2, out);
                n.seed(out);
            }
        }
    }
}

impl Seed for RoundTrip {
    fn seed(&self, out: &mut Vec<u8>) {
        self.ops.seed(out);
    }
}
