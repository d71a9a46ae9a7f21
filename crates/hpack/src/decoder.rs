//! Header block decoding (RFC 7541 §3.2, §6).

use crate::table::{Table, ENTRY_OVERHEAD};
use crate::{int, string, DecodeError};

/// Decodes header blocks from one peer, keeping its encoder's dynamic table.
///
/// One `Decoder` serves one direction of one HTTP/2 connection; blocks must
/// be decoded in the order they were received.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) table: Table,
    /// The SETTINGS_HEADER_TABLE_SIZE we advertised; size updates may not
    /// exceed it (RFC 7541 §6.3).
    max_table_size: usize,
    /// Reused buffers for Huffman-decoded names and values.
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Decoder {
    /// Creates a decoder for a peer bound by `max_table_size`, the
    /// SETTINGS_HEADER_TABLE_SIZE we advertise (4096 by default). A dynamic
    /// table size update above it is an error.
    pub fn new(max_table_size: usize) -> Self {
        Self { table: Table::new(max_table_size), max_table_size, name_buf: Vec::new(), value_buf: Vec::new() }
    }

    /// Changes the limit, once the peer has acknowledged our new SETTINGS.
    ///
    /// If the current table maximum exceeds the new limit, entries are
    /// evicted right away: the peer's encoder must already have shrunk its
    /// table to at most this size and will say so in a size update at the
    /// start of its next block (RFC 7541 §4.2), and shrinking in two steps
    /// evicts exactly what shrinking in one would.
    pub fn set_max_table_size(&mut self, max: usize) {
        self.max_table_size = max;
        if self.table.max_size() > max {
            self.table.set_max_size(max);
        }
    }

    /// Current dynamic table size per RFC 7541 §4.1.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Decodes one complete header block, calling `emit(name, value,
    /// sensitive)` for each field in order. `sensitive` is set for fields
    /// sent as never-indexed literals (RFC 7541 §6.2.3).
    ///
    /// `max_list_size` bounds the header list as RFC 9113 §6.5.2 counts it
    /// (name length + value length + 32 per field). When the list exceeds it,
    /// decoding continues to the end so that the dynamic table stays in sync,
    /// but no further fields are emitted and
    /// [`DecodeError::HeaderListTooLarge`] is returned at the end. A string
    /// literal longer than the whole limit is decoded too and counted: one
    /// field too large for the list makes the list too large (the peer's
    /// request gets a 431, RFC 9113 §8.2.2 / RFC 6585 §5), not the block
    /// undecodable. It cannot be a bomb: a literal lies in the block, and
    /// Huffman coding expands it at most 8/5 times (5-bit shortest code), so
    /// its decoded length is bounded by twice the block's, which the caller
    /// bounds; repeated references to a large table entry are what the list
    /// limit stops. An announced length beyond that is
    /// [`DecodeError::StringTooLong`].
    ///
    /// # Errors
    /// Any [`DecodeError`]; all but `HeaderListTooLarge` leave the decoder
    /// out of sync with the peer, and the connection must be closed with
    /// COMPRESSION_ERROR (RFC 9113 §4.3).
    // The callback's type is part of the agreed public API; spelling it out
    // reads better than an alias.
    #[allow(clippy::type_complexity)]
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        emit: &mut dyn FnMut(&[u8], &[u8], bool),
    ) -> Result<(), DecodeError> {
        let mut pos = 0;
        // See above: no literal in this block can decode to more.
        let string_max = max_list_size.max(block.len().saturating_mul(2));
        // Size updates are only allowed before the first field (§4.2).
        let mut fields_seen = false;
        let mut list_size: usize = 0;
        let mut too_large = false;

        while pos < block.len() {
            let first = block[pos];
            let rest = &block[pos..];

            if first & 0x80 != 0 {
                // §6.1 Indexed Header Field: 1xxxxxxx, 7-bit index.
                let (index, n) = int::decode(rest, 7)?;
                pos += n;
                fields_seen = true;
                let (name, value) = self.table.get(index).ok_or(DecodeError::InvalidIndex(index))?;
                account(&mut list_size, &mut too_large, max_list_size, name, value);
                if !too_large {
                    emit(name, value, false);
                }
                continue;
            }

            if first & 0xe0 == 0x20 {
                // §6.3 Dynamic Table Size Update: 001xxxxx, 5-bit size.
                if fields_seen {
                    return Err(DecodeError::TableSizeUpdateNotAtStart);
                }
                let (size, n) = int::decode(rest, 5)?;
                pos += n;
                let requested = usize::try_from(size).unwrap_or(usize::MAX);
                if requested > self.max_table_size {
                    return Err(DecodeError::TableSizeUpdateTooLarge { requested, max: self.max_table_size });
                }
                self.table.set_max_size(requested);
                continue;
            }

            // Literal Header Field representations (§6.2):
            //   01xxxxxx with incremental indexing, 6-bit name index;
            //   0000xxxx without indexing, 4-bit name index;
            //   0001xxxx never indexed, 4-bit name index.
            let (add_to_table, sensitive, prefix) =
                if first & 0xc0 == 0x40 { (true, false, 6) } else { (false, first & 0x10 != 0, 4) };
            fields_seen = true;
            let (name_index, n) = int::decode(rest, prefix)?;
            pos += n;

            let name: &[u8] = if name_index == 0 {
                // New name: a string literal follows (§6.2.1 figure 7).
                let (s, n) = string::decode(&block[pos..], 7, string_max, &mut self.name_buf)?;
                pos += n;
                s
            } else {
                let (s, _) = self.table.get(name_index).ok_or(DecodeError::InvalidIndex(name_index))?;
                // Copied, because inserting the new entry may evict the one
                // the name comes from (§4.4).
                self.name_buf.clear();
                self.name_buf.extend_from_slice(s);
                &self.name_buf
            };
            let (value, n) = string::decode(&block[pos..], 7, string_max, &mut self.value_buf)?;
            pos += n;

            account(&mut list_size, &mut too_large, max_list_size, name, value);
            if !too_large {
                emit(name, value, sensitive);
            }
            if add_to_table {
                self.table.insert(name, value);
            }
        }

        // A large literal's scratch room is not kept for the connection's life.
        for buf in [&mut self.name_buf, &mut self.value_buf] {
            if buf.capacity() > KEEP_SCRATCH {
                *buf = Vec::new();
            }
        }
        if too_large {
            Err(DecodeError::HeaderListTooLarge)
        } else {
            Ok(())
        }
    }
}

/// Scratch room for Huffman-decoded literals kept between blocks: a typical field's many times.
const KEEP_SCRATCH: usize = 16 * 1024;

/// Adds a field to the header list size (RFC 9113 §6.5.2) and notes when it
/// goes over the limit.
fn account(list_size: &mut usize, too_large: &mut bool, max: usize, name: &[u8], value: &[u8]) {
    *list_size = list_size.saturating_add(name.len()).saturating_add(value.len()).saturating_add(ENTRY_OVERHEAD);
    if *list_size > max {
        *too_large = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::appendix_c::{hex, Field};

    /// Decodes `block`, returning the fields or the error.
    fn run(d: &mut Decoder, block: &[u8], max_list: usize) -> Result<Vec<Field>, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, max_list, &mut |n, v, s| {
            out.push((n.to_vec(), v.to_vec(), s));
        })
        .map(|()| out)
    }

    fn ok(d: &mut Decoder, block: &[u8]) -> Vec<Field> {
        run(d, block, usize::MAX).expect("block decodes")
    }

    fn field(n: &str, v: &str) -> Field {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec(), false)
    }

    #[test]
    fn appendix_c_sequences() {
        for seq in crate::appendix_c::sequences() {
            let mut d = Decoder::new(seq.table_size);
            for (i, block) in seq.blocks.iter().enumerate() {
                let got = ok(&mut d, &hex(block.wire));
                assert_eq!(got, block.fields(), "{} block {}", seq.name, i + 1);
                assert_eq!(d.table_size(), block.table_size, "{} block {}", seq.name, i + 1);
                let dynamic: Vec<(&[u8], &[u8])> = (62..).map_while(|i| d.table.get(i)).collect();
                let expected: Vec<(&[u8], &[u8])> =
                    block.dynamic.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
                assert_eq!(dynamic, expected, "{} block {} table", seq.name, i + 1);
            }
        }
    }

    #[test]
    fn appendix_c2_4_indexed_field() {
        let mut d = Decoder::new(4096);
        assert_eq!(ok(&mut d, &[0x82]), [field(":method", "GET")]);
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn never_indexed_is_reported_sensitive() {
        let mut d = Decoder::new(4096);
        let got = ok(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
        assert_eq!(got, [(b"password".to_vec(), b"secret".to_vec(), true)]);
        // Never indexed with an indexed name (authorization = 23).
        let got = ok(&mut d, &[0x1f, 0x08, 0x01, b'x']);
        assert_eq!(got, [(b"authorization".to_vec(), b"x".to_vec(), true)]);
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn empty_block_is_fine() {
        let mut d = Decoder::new(4096);
        assert_eq!(ok(&mut d, &[]), []);
    }

    #[test]
    fn truncated_input() {
        let blocks: [&[u8]; 7] = [
            &[0xff],             // indexed, integer cut short
            &[0x40],             // new name, no name string
            &[0x40, 0x03, b'a'], // name string cut short
            &[0x40, 0x01, b'a'], // no value
            &[0x04, 0x05, b'a'], // value cut short
            &[0x3f],             // size update cut short
            &[0x44, 0x81],       // Huffman value cut short
        ];
        for block in blocks {
            let mut d = Decoder::new(4096);
            assert_eq!(run(&mut d, block, 1000), Err(DecodeError::Truncated), "{block:02x?}");
        }
    }

    #[test]
    fn integer_overflow() {
        let mut d = Decoder::new(4096);
        let block = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(run(&mut d, &block, 1000), Err(DecodeError::IntegerOverflow));
    }

    #[test]
    fn invalid_indices() {
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x80], 1000), Err(DecodeError::InvalidIndex(0)));
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0xbe], 1000), Err(DecodeError::InvalidIndex(62)));
        // Literal with a name index beyond the (empty) dynamic table.
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x7e, 0x00], 1000), Err(DecodeError::InvalidIndex(62)));
        // Index 62 becomes valid once an entry exists, 63 does not.
        let mut d = Decoder::new(4096);
        ok(&mut d, &[0x41, 0x01, b'x']);
        assert_eq!(ok(&mut d, &[0xbe]), [field(":authority", "x")]);
        assert_eq!(run(&mut d, &[0xbf], 1000), Err(DecodeError::InvalidIndex(63)));
        // A large but valid integer: 127 + 127 + 127 * 2^7 + 127 * 2^14.
        let big = [0xff, 0xff, 0xff, 0x7f];
        assert_eq!(run(&mut d, &big, 1000), Err(DecodeError::InvalidIndex(2_097_278)));
    }

    #[test]
    fn bad_huffman() {
        // Value "0" Huffman-coded with padding 110 (not all ones).
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x04, 0x81, 0x06], 1000), Err(DecodeError::InvalidHuffman));
        // Padding of a full octet.
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x04, 0x82, 0x07, 0xff], 1000), Err(DecodeError::InvalidHuffman));
        // EOS in the string.
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x04, 0x84, 0xff, 0xff, 0xff, 0xff], 1000), Err(DecodeError::InvalidHuffman));
    }

    #[test]
    fn size_update_limits() {
        let mut d = Decoder::new(4096);
        // 4097 with a 5-bit prefix: 0x3f, 4097 - 31 = 4066 = 0xfe2.
        assert_eq!(
            run(&mut d, &[0x3f, 0xe2, 0x1f], 1000),
            Err(DecodeError::TableSizeUpdateTooLarge { requested: 4097, max: 4096 })
        );
        let mut d = Decoder::new(4096);
        assert_eq!(ok(&mut d, &[0x3f, 0xe1, 0x1f, 0x20, 0x3f, 0x01, 0x82]), [field(":method", "GET")]);
        assert_eq!(d.table.max_size(), 32);
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &[0x82, 0x20], 1000), Err(DecodeError::TableSizeUpdateNotAtStart));
    }

    #[test]
    fn set_max_table_size_shrinks_and_limits() {
        let mut d = Decoder::new(4096);
        ok(&mut d, &[0x40, 0x01, b'a', 0x01, b'1', 0x40, 0x01, b'b', 0x01, b'2']);
        assert_eq!(d.table_size(), 68);
        d.set_max_table_size(40);
        assert_eq!(d.table_size(), 34);
        assert_eq!(ok(&mut d, &[0x3f, 0x09, 0xbe]), [field("b", "2")]);
        assert_eq!(
            run(&mut d, &[0x3f, 0x0a], 1000),
            Err(DecodeError::TableSizeUpdateTooLarge { requested: 41, max: 40 })
        );
        // Raising the limit allows a larger update.
        d.set_max_table_size(8192);
        ok(&mut d, &[0x3f, 0xe1, 0x3f]);
        assert_eq!(d.table.max_size(), 8192);
    }

    #[test]
    fn a_field_longer_than_the_list_limit_is_decoded_and_makes_the_list_too_large() {
        let mut d = Decoder::new(4096);
        // A literal with incremental indexing, longer than the limit: decoded, not emitted,
        // and in the table afterwards (the decoder stays in step with the peer).
        let block = [0x40, 0x01, b'n', 0x05, b'a', b'b', b'c', b'd', b'e'];
        assert_eq!(run(&mut d, &block, 4), Err(DecodeError::HeaderListTooLarge));
        assert_eq!(ok(&mut d, &[0xbe]), [field("n", "abcde")]);
        // A huge announced length is rejected without the data being there.
        let mut d = Decoder::new(4096);
        let block = [0x00, 0x7f, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(run(&mut d, &block, 1 << 16), Err(DecodeError::StringTooLong));
        // Huffman: 16 octets of '0' (5 bits each) decode to 25 octets, more than the limit.
        let mut value = Vec::new();
        crate::string::encode(&[b'0'; 25], 7, 0, &mut value);
        assert_eq!(value[0], 0x80 | 16);
        let mut block = vec![0x00, 0x01, b'n'];
        block.extend(&value);
        let mut d = Decoder::new(4096);
        assert_eq!(run(&mut d, &block, 24), Err(DecodeError::HeaderListTooLarge));
        // A 70 KB value in one field, the limit 64 KiB: too large, and the scratch room goes.
        let mut d = Decoder::new(4096);
        let mut block = vec![0x00, 0x01, b'x'];
        crate::string::encode(&[b'7'; 70_000], 7, 0, &mut block);
        assert_eq!(run(&mut d, &block, 65_536), Err(DecodeError::HeaderListTooLarge));
        assert!(d.value_buf.capacity() <= KEEP_SCRATCH);
        assert_eq!(ok(&mut d, &[0x82]), [field(":method", "GET")]);
    }

    #[test]
    fn header_list_too_large_keeps_table_in_sync() {
        let mut d = Decoder::new(4096);
        // Three incrementally indexed fields, each 32 + 4 + 4 = 40.
        let mut block = Vec::new();
        for (n, v) in [("k-01", "v-01"), ("k-02", "v-02"), ("k-03", "v-03")] {
            block.push(0x40);
            crate::string::encode_with(n.as_bytes(), false, 7, 0, &mut block);
            crate::string::encode_with(v.as_bytes(), false, 7, 0, &mut block);
        }
        let mut seen = Vec::new();
        let res = d.decode(&block, 80, &mut |n, v, _| seen.push((n.to_vec(), v.to_vec())));
        assert_eq!(res, Err(DecodeError::HeaderListTooLarge));
        // The first two fit exactly (80), the third was not emitted.
        assert_eq!(seen.len(), 2);
        assert_eq!(d.table_size(), 120);
        // The next block refers to all three entries and decodes correctly.
        let got = ok(&mut d, &[0xbe, 0xbf, 0xc0]);
        assert_eq!(got, [field("k-03", "v-03"), field("k-02", "v-02"), field("k-01", "v-01")]);
    }

    #[test]
    fn literal_name_from_entry_being_evicted() {
        // Table of 50: one entry "name"/"v1" (38). A new entry reusing its
        // name (index 62) evicts it while inserting (RFC 7541 §4.4).
        let mut d = Decoder::new(50);
        ok(&mut d, &[0x40, 0x04, b'n', b'a', b'm', b'e', 0x02, b'v', b'1']);
        let got = ok(&mut d, &[0x7e, 0x02, b'v', b'2', 0xbe]);
        assert_eq!(got, [field("name", "v2"), field("name", "v2")]);
        assert_eq!(d.table_size(), 38);
    }

    #[test]
    fn arbitrary_input_never_panics() {
        // A small deterministic fuzz: random blocks and mutations of valid ones.
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        let valid: Vec<Vec<u8>> =
            crate::appendix_c::sequences().iter().flat_map(|s| s.blocks.iter().map(|b| hex(b.wire))).collect();
        for round in 0..20_000 {
            let mut block = if round % 2 == 0 {
                valid[next() as usize % valid.len()].clone()
            } else {
                (0..next() % 40).map(|_| next() as u8).collect()
            };
            if !block.is_empty() {
                for _ in 0..(next() % 4) {
                    let i = next() as usize % block.len();
                    block[i] = next() as u8;
                }
                block.truncate(next() as usize % (block.len() + 1));
            }
            let mut d = Decoder::new(256);
            let _ = d.decode(&block, 1000, &mut |_, _, _| {});
            assert!(d.table_size() <= 256);
        }
    }
}
