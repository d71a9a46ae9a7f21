//! Header block encoding (RFC 7541 §3.2, §6).

use crate::table::{Match, Table, ENTRY_OVERHEAD};
use crate::{int, string, Imprint, ListMemo};

/// What stands for a part of a list the memo compares: nothing (every line is compared), a
/// shared part known by its `Arc`'s identity, or a part known by its image.
enum Known<'p, T> {
    Lines,
    Shared(&'p std::sync::Arc<T>),
    Imprinted(&'p dyn Imprint),
}

/// Largest dynamic table we keep, whatever the peer allows.
///
/// The peer's SETTINGS_HEADER_TABLE_SIZE only bounds what we may use; a
/// bigger table costs memory per connection and gains little for the
/// responses an edge server sends. 4096 is also the protocol default
/// (RFC 9113 §6.5.2).
const MAX_TABLE_SIZE: usize = 4096;

/// Default dynamic table size before any SETTINGS (RFC 9113 §6.5.2).
const DEFAULT_TABLE_SIZE: usize = 4096;

/// Values shorter than this are not indexed for `cookie`: a short secret in
/// the table is open to guessing attacks (RFC 7541 §7.1.3).
const MIN_INDEXED_COOKIE_LEN: usize = 20;

/// Encodes header lists for one peer, keeping our dynamic table.
///
/// One `Encoder` serves one direction of one HTTP/2 connection; blocks must
/// be sent in the order they were encoded.
#[derive(Debug)]
pub struct Encoder {
    table: Table,
    /// Smallest table size chosen since the last block, when the size has
    /// changed and the peer has not been told yet (RFC 7541 §4.2).
    pending_min: Option<usize>,
    /// The table size we want from the next block on.
    target_size: usize,
    /// Whether to Huffman-code strings when that is shorter (always, except
    /// in tests reproducing the RFC's raw examples).
    use_huffman: bool,
    /// The last literal sent for each never-indexed name (see [`never_indexed`]), encoded:
    /// `(static name index, value, representation)`. Such a field repeats verbatim from one
    /// response to the next (a file's ETag, Last-Modified and length), and then costs a
    /// comparison instead of a Huffman coding. The representation does not depend on the
    /// dynamic table, so it stays valid.
    literals: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// The last header list encoded and its block, when encoding it left the dynamic table as
    /// it was: the same list again, with the table still in that state, encodes to the same
    /// bytes. A server repeats its response heads (every response for one file, every error of
    /// a kind), and comparing a list costs a fraction of encoding it (finding each field in the
    /// table, Huffman coding literals). Boxed: an idle connection's encoder has none, and
    /// holds a pointer, not the memo's room.
    memo: Option<Box<ListMemo<(u64, usize, usize)>>>,
    /// Whether a block was encoded since the last `shrink`: the memo is made from the second
    /// on, so a connection that answers one request and idles never allocates it.
    encoded: bool,
    /// Whether the block being encoded wrote a value of [`indexed_on_repeat`] for the first
    /// time: the same list again would index it, so the block is not kept as the memo's.
    first_sight: bool,
}

/// Literals remembered per encoder (one per never-indexed name, the least recent replaced).
const MAX_LITERALS: usize = 4;
/// Longest value remembered: validators, dates and lengths are far shorter, and a long value
/// (a peer's, through the proxy) must not stay in every connection's memory.
const MAX_REMEMBERED: usize = 128;

/// Names whose fields this encoder never indexes, whatever the value, with their static
/// table index (RFC 7541 Appendix A): values that change with every message (counters,
/// timestamps, validators), where indexing would only evict useful entries, and credentials,
/// kept out of the table so that they cannot be probed through compression (RFC 7541 §7.1).
/// `date` is not one of them: it changes once a second, and every response of that second
/// repeats it (one table entry a second). Three of them are indexed after all when a value
/// repeats on the connection: see [`indexed_on_repeat`].
fn never_indexed(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"age" => 21,
        b"authorization" => 23,
        b"content-length" => 28,
        b"content-range" => 30,
        b"etag" => 34,
        b"expires" => 36,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"proxy-authorization" => 49,
        _ => return None,
    })
}

/// Names of [`never_indexed`] whose value enters the table the second time in a row it is sent
/// (the encoder remembers the last literal per name): a file's or a resource's validators and
/// length, when the same version is asked for again on the connection (a poll, a reload, a
/// benchmark). The third response then carries each in one byte instead of about 45 bytes of
/// literals for the three, which the client decodes and both ends encrypt. Values seen once,
/// as in a page load of many files, stay out of the table and evict nothing.
fn indexed_on_repeat(name: &[u8]) -> bool {
    matches!(name, b"etag" | b"last-modified" | b"content-length")
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// Creates an encoder with the protocol's default table size of 4096.
    pub fn new() -> Self {
        Self {
            table: Table::indexed(DEFAULT_TABLE_SIZE),
            pending_min: None,
            target_size: DEFAULT_TABLE_SIZE,
            use_huffman: true,
            literals: Vec::new(),
            memo: None,
            encoded: false,
            first_sight: false,
        }
    }

    /// Forget the remembered literals (an idle connection hands back their memory; the next
    /// response codes its literals afresh).
    pub fn shrink(&mut self) {
        self.literals = Vec::new();
        self.memo = None;
        self.encoded = false;
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed.
    ///
    /// We pick a table size of at most `max` (and at most 4096, to bound
    /// memory) and signal it with a dynamic table size update at the start of
    /// the next block. If the size went down and up again in between, the
    /// minimum is signalled first, then the final size (RFC 7541 §4.2).
    pub fn set_max_table_size(&mut self, max: usize) {
        let size = max.min(MAX_TABLE_SIZE);
        let min = self.pending_min.unwrap_or(self.table.max_size());
        self.pending_min = Some(min.min(size));
        self.target_size = size;
    }

    /// Encodes a header list, appending the header block to `dst`.
    ///
    /// Items are `(name, value, sensitive)`; sensitive fields are sent as
    /// never-indexed literals (RFC 7541 §6.2.3) and never enter the table.
    pub fn encode<'a, I>(&mut self, headers: I, dst: &mut Vec<u8>)
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8], bool)>,
        I::IntoIter: Clone,
    {
        let list = headers.into_iter();
        self.encode_memo(Known::<()>::Lines, list.clone(), list, dst);
    }

    /// [`encode`](Self::encode) for a list part of which is shared with other lists and known
    /// by `key`: every list encoded with the same `Arc` holds the same lines at the same place.
    /// `lines` is the whole list, `rest` its lines outside the shared part, in order. A repeat
    /// is recognised by the key's identity and `rest`, without comparing the shared lines.
    pub fn encode_keyed<'a, T, I, J>(&mut self, key: &std::sync::Arc<T>, lines: I, rest: J, dst: &mut Vec<u8>)
    where
        T: Send + Sync + 'static,
        I: Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        J: Iterator<Item = (&'a [u8], &'a [u8], bool)> + Clone,
    {
        self.encode_memo(Known::Shared(key), rest, lines, dst);
    }

    /// [`encode`](Self::encode) for a list with a part that stands for its lines by an image
    /// ([`Imprint`]): `lines` is the whole list, `rest` its lines outside that part, in order.
    /// A repeat is recognised by the part's image and `rest`, without comparing the part's
    /// lines one by one. Every list encoded this way must hold the part at the same place.
    pub fn encode_imprinted<'a, I, J>(&mut self, part: &dyn Imprint, lines: I, rest: J, dst: &mut Vec<u8>)
    where
        I: Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        J: Iterator<Item = (&'a [u8], &'a [u8], bool)> + Clone,
    {
        self.encode_memo(Known::<()>::Imprinted(part), rest, lines, dst);
    }

    /// Encode `lines`, or repeat the kept block when the memo holds `memo_lines` (with a
    /// shared or imprinted part, the lines outside it; without, the whole list).
    fn encode_memo<'a, T, I, J>(&mut self, known: Known<'_, T>, memo_lines: J, lines: I, dst: &mut Vec<u8>)
    where
        T: Send + Sync + 'static,
        I: Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        J: Iterator<Item = (&'a [u8], &'a [u8], bool)> + Clone,
    {
        let state = self.table_state();
        if let Some(memo) = self.memo.as_ref().filter(|m| self.pending_min.is_none() && m.state() == Some(state)) {
            let held = match known {
                Known::Lines => memo.holds(memo_lines.clone()),
                Known::Shared(k) => memo.holds_keyed(std::sync::Arc::as_ptr(k).cast::<()>(), memo_lines.clone()),
                Known::Imprinted(part) => memo.holds_imprinted(part, memo_lines.clone()),
            };
            if held {
                dst.extend_from_slice(memo.block());
                return;
            }
        }
        self.encode_size_updates(dst);
        let before = self.table_state();
        let start = dst.len();
        self.first_sight = false;
        for (name, value, sensitive) in lines {
            self.encode_field(name, value, sensitive, dst);
        }
        // Kept only if the block changed nothing: the next identical list then encodes to
        // these bytes (a block that inserted would index those fields the next time, and so
        // would one that sent a validator for the first time).
        if self.table_state() == before && self.encoded && !self.first_sight {
            let memo = self.memo.get_or_insert_with(Box::default);
            match known {
                Known::Lines => memo.keep_keyed(None, memo_lines, &dst[start..], before),
                Known::Shared(k) => memo.keep_keyed(Some(k.clone() as crate::Key), memo_lines, &dst[start..], before),
                Known::Imprinted(part) => memo.keep_imprinted(part, memo_lines, &dst[start..], before),
            }
        } else if let Some(memo) = &mut self.memo {
            memo.forget();
        }
        self.encoded = true;
    }

    /// What the dynamic table holds, as far as a kept block depends on it (see `memo`).
    fn table_state(&self) -> (u64, usize, usize) {
        (self.table.inserted(), self.table.max_size(), self.table.size())
    }

    /// Emits pending dynamic table size updates (RFC 7541 §4.2, §6.3).
    fn encode_size_updates(&mut self, dst: &mut Vec<u8>) {
        let Some(min) = self.pending_min.take() else {
            return;
        };
        if min < self.target_size {
            int::encode(min as u64, 5, 0x20, dst);
            self.table.set_max_size(min);
        }
        if self.table.max_size() != self.target_size {
            int::encode(self.target_size as u64, 5, 0x20, dst);
            self.table.set_max_size(self.target_size);
        }
    }

    fn encode_field(&mut self, name: &[u8], value: &[u8], sensitive: bool, dst: &mut Vec<u8>) {
        if !sensitive {
            if let Some(index) = never_indexed(name) {
                if indexed_on_repeat(name) {
                    if let Match::Full(i) = self.table.find(name, value) {
                        int::encode(i as u64, 7, 0x80, dst);
                        return;
                    }
                }
                // §6.2.2 Literal Header Field without Indexing, the name by its static index
                // (or, for a repeated validator, §6.2.1 with incremental indexing).
                self.encode_unindexed(index, name, value, dst);
                return;
            }
        }
        let found = self.table.find(name, value);
        let name_index = match found {
            Match::Full(i) | Match::Name(i) => i,
            Match::None => 0,
        };

        if sensitive {
            // §6.2.3 Literal Header Field Never Indexed: 0001xxxx. Used even
            // when the field is in the table, so that intermediaries keep
            // the protection (RFC 7541 §7.1.3).
            self.encode_literal(name_index, name, value, 4, 0x10, dst);
            return;
        }
        if let Match::Full(index) = found {
            // §6.1 Indexed Header Field: 1xxxxxxx.
            int::encode(index as u64, 7, 0x80, dst);
            return;
        }
        if self.should_index(name, value) {
            // §6.2.1 Literal Header Field with Incremental Indexing: 01xxxxxx.
            self.encode_literal(name_index, name, value, 6, 0x40, dst);
            self.table.insert(name, value);
        } else {
            // §6.2.2 Literal Header Field without Indexing: 0000xxxx.
            self.encode_literal(name_index, name, value, 4, 0x00, dst);
        }
    }

    /// A literal without indexing for the static name `index`, from the remembered
    /// representation when the value repeats; a repeated value of [`indexed_on_repeat`] goes
    /// into the table instead.
    fn encode_unindexed(&mut self, index: usize, name: &[u8], value: &[u8], dst: &mut Vec<u8>) {
        if value.len() > MAX_REMEMBERED {
            self.encode_literal(index, b"", value, 4, 0x00, dst);
            return;
        }
        if let Some(at) = self.literals.iter().position(|(i, _, _)| *i == index) {
            let (_, v, repr) = &self.literals[at];
            if v == value {
                if indexed_on_repeat(name) && self.should_index(name, value) {
                    self.literals.remove(at);
                    self.encode_literal(index, b"", value, 6, 0x40, dst);
                    self.table.insert(name, value);
                    return;
                }
                dst.extend_from_slice(repr);
                return;
            }
            self.literals.remove(at);
        } else if self.literals.len() == MAX_LITERALS {
            self.literals.remove(0);
        }
        let start = dst.len();
        self.encode_literal(index, b"", value, 4, 0x00, dst);
        self.literals.push((index, value.to_vec(), dst[start..].to_vec()));
        self.first_sight |= indexed_on_repeat(name);
    }

    fn encode_literal(
        &self,
        name_index: usize,
        name: &[u8],
        value: &[u8],
        prefix_bits: u8,
        flags: u8,
        dst: &mut Vec<u8>,
    ) {
        int::encode(name_index as u64, prefix_bits, flags, dst);
        if name_index == 0 {
            self.encode_string(name, dst);
        }
        self.encode_string(value, dst);
    }

    fn encode_string(&self, s: &[u8], dst: &mut Vec<u8>) {
        if self.use_huffman {
            string::encode_shortest(s, 7, 0, dst);
        } else {
            string::encode_with(s, false, 7, 0, dst);
        }
    }

    /// Whether a field not yet in the table is worth adding to it.
    fn should_index(&self, name: &[u8], value: &[u8]) -> bool {
        // An entry over half the table would evict most of what is there for
        // a field that rarely repeats verbatim (this also covers a table of
        // size 0, where nothing fits).
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.table.max_size() / 2 {
            return false;
        }
        match name {
            // A query string is usually unique per request.
            b":path" => !value.contains(&b'?'),
            // (Names that are never indexed do not come here: see `never_indexed`.)
            b"cookie" | b"set-cookie" => value.len() >= MIN_INDEXED_COOKIE_LEN,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::appendix_c::{hex, sequences, Field};
    use crate::Decoder;

    fn encode_list(e: &mut Encoder, list: &[(&str, &str)], sensitive: bool) -> Vec<u8> {
        let mut out = Vec::new();
        e.encode(list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), sensitive)), &mut out);
        out
    }

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Vec<Field> {
        let mut out = Vec::new();
        d.decode(block, usize::MAX, &mut |n, v, s| out.push((n.to_vec(), v.to_vec(), s)))
            .expect("our own output decodes");
        out
    }

    fn as_line((n, v, s): &(Vec<u8>, Vec<u8>, bool)) -> (&[u8], &[u8], bool) {
        (&n[..], &v[..], *s)
    }

    fn dynamic_entries(t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        (62..).map_while(|i| t.get(i)).map(|(n, v)| (n.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn appendix_c_exact_bytes_where_strategy_matches() {
        // C.2.2 uses "without indexing" for :path where we index, and C.5/C.6
        // evict from a 256-octet table (this encoder's is 4096 here);
        // everything else matches exactly.
        for seq in sequences() {
            if matches!(seq.name, "C.2.2" | "C.5" | "C.6") {
                continue;
            }
            let mut e = Encoder::new();
            e.use_huffman = seq.huffman;
            for (i, block) in seq.blocks.iter().enumerate() {
                let got = encode_list(&mut e, block.headers, block.never_indexed);
                assert_eq!(got, hex(block.wire), "{} block {}", seq.name, i + 1);
                assert_eq!(e.table.size(), block.table_size, "{} block {}", seq.name, i + 1);
            }
        }
    }

    #[test]
    fn appendix_c_round_trips() {
        for seq in sequences() {
            for huffman in [false, true] {
                let mut e = Encoder::new();
                e.use_huffman = huffman;
                e.set_max_table_size(seq.table_size);
                let mut d = Decoder::new(seq.table_size);
                for (i, block) in seq.blocks.iter().enumerate() {
                    let wire = encode_list(&mut e, block.headers, block.never_indexed);
                    assert_eq!(decode_all(&mut d, &wire), block.fields(), "{} {}", seq.name, i);
                    assert_eq!(d.table_size(), e.table.size());
                }
            }
        }
    }

    #[test]
    fn c6_evicts_in_sync() {
        let seq = sequences().into_iter().find(|s| s.name == "C.6").unwrap();
        let mut e = Encoder::new();
        e.set_max_table_size(256);
        let mut d = Decoder::new(256);
        let mut total = 0;
        for block in &seq.blocks {
            let wire = encode_list(&mut e, block.headers, false);
            total += wire.len();
            decode_all(&mut d, &wire);
            assert_eq!(dynamic_entries(&e.table), dynamic_entries(&d.table));
        }
        // The RFC's encoding takes 54 + 8 + 79 = 141 octets; ours adds a
        // 3-octet size update.
        assert!(total < 180, "{total}");
    }

    #[test]
    fn size_update_is_emitted_once() {
        let mut e = Encoder::new();
        e.set_max_table_size(100);
        let wire = encode_list(&mut e, &[(":method", "GET")], false);
        // 100 with a 5-bit prefix: 0x3f, 100 - 31 = 69.
        assert_eq!(wire, [0x3f, 69, 0x82]);
        assert_eq!(encode_list(&mut e, &[(":method", "GET")], false), [0x82]);
    }

    #[test]
    fn size_update_lowered_then_raised_emits_minimum_then_final() {
        let mut e = Encoder::new();
        encode_list(&mut e, &[("x-a", "1")], false);
        assert_eq!(e.table.size(), 36);
        e.set_max_table_size(0);
        e.set_max_table_size(65536); // capped at 4096
        let wire = encode_list(&mut e, &[], false);
        assert_eq!(wire, [0x20, 0x3f, 0xe1, 0x1f]);
        assert_eq!(e.table.size(), 0);
        let mut d = Decoder::new(4096);
        decode_all(&mut d, &wire);
    }

    #[test]
    fn size_update_minimum_above_zero() {
        let mut e = Encoder::new();
        e.set_max_table_size(1000);
        e.set_max_table_size(2000);
        let wire = encode_list(&mut e, &[], false);
        let mut expected = Vec::new();
        int::encode(1000, 5, 0x20, &mut expected);
        int::encode(2000, 5, 0x20, &mut expected);
        assert_eq!(wire, expected);
    }

    #[test]
    fn no_update_when_effective_size_is_unchanged() {
        let mut e = Encoder::new();
        e.set_max_table_size(8192);
        assert_eq!(encode_list(&mut e, &[], false), []);
        e.set_max_table_size(4096);
        assert_eq!(encode_list(&mut e, &[], false), []);
    }

    #[test]
    fn zero_table_never_indexes() {
        let mut e = Encoder::new();
        e.set_max_table_size(0);
        let mut d = Decoder::new(0);
        let list = [("x-custom", "value"), (":status", "302")];
        for _ in 0..2 {
            let wire = encode_list(&mut e, &list, false);
            assert_eq!(decode_all(&mut d, &wire).len(), 2);
            assert_eq!((e.table.size(), d.table_size()), (0, 0));
        }
    }

    #[test]
    fn sensitive_fields_are_never_indexed() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        // Even a full static match (":method GET") is sent as a literal.
        let list = [("authorization", "Bearer abc"), ("x-secret", "s"), (":method", "GET")];
        let wire = encode_list(&mut e, &list, true);
        assert_eq!(wire[0], 0x1f); // never indexed, name index 23 (15 + 8)
        let got = decode_all(&mut d, &wire);
        assert!(got.iter().all(|f| f.2));
        assert_eq!(got.len(), 3);
        assert_eq!(e.table.size(), 0);
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn date_is_indexed_and_repeats_as_one_octet() {
        let mut e = Encoder::new();
        let date = [("date", "Mon, 21 Oct 2013 20:13:21 GMT")];
        assert!(encode_list(&mut e, &date, false).len() > 10);
        assert_eq!(encode_list(&mut e, &date, false).len(), 1);
    }

    #[test]
    fn volatile_fields_are_not_indexed() {
        let mut e = Encoder::new();
        let list = [
            ("content-length", "1234"),
            ("etag", "\"5f-1a\""),
            (":path", "/search?q=1"),
            ("cookie", "short=1"),
            ("authorization", "Basic Zm9vOmJhcg=="),
        ];
        let wire = encode_list(&mut e, &list, false);
        assert_eq!(e.table.size(), 0);
        let mut d = Decoder::new(4096);
        let got = decode_all(&mut d, &wire);
        assert!(got.iter().all(|f| !f.2));
        // Whereas a plain repeated field is indexed and then referenced.
        let list = [("server", "sluice"), (":path", "/static/app.js")];
        let first = encode_list(&mut e, &list, false);
        let second = encode_list(&mut e, &list, false);
        assert_eq!(second, [0xbf, 0xbe]);
        assert!(first.len() > second.len());
    }

    #[test]
    fn huge_values_are_not_indexed() {
        let mut e = Encoder::new();
        let big = "x".repeat(3000);
        let wire = encode_list(&mut e, &[("x-big", &big)], false);
        assert_eq!(e.table.size(), 0);
        let mut d = Decoder::new(4096);
        assert_eq!(decode_all(&mut d, &wire)[0].1.len(), 3000);
    }

    #[test]
    fn never_indexed_names_carry_their_static_index() {
        let mut listed = 0;
        for (i, (name, _)) in crate::table::STATIC_TABLE.iter().enumerate() {
            let first = crate::table::STATIC_TABLE.iter().position(|(n, _)| n == name).unwrap() + 1;
            if let Some(index) = never_indexed(name) {
                assert_eq!(index, first, "{}", String::from_utf8_lossy(name));
                listed += usize::from(i + 1 == first);
            }
        }
        assert_eq!(listed, 13, "every never-indexed name is a static one");
    }

    #[test]
    fn remembered_literals_are_the_bytes_a_fresh_encoder_writes() {
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        // Six never-indexed names against four remembered literals, values that repeat often
        // (none of the names indexed on a repeat).
        let names = ["age", "if-modified-since", "if-none-match", "authorization", "expires", "content-range"];
        let values = ["\"1a2b-3c\"", "Tue, 24 Nov 2026 10:00:00 GMT", "14", "0", "", "bytes 0-1/2"];
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for _ in 0..2_000 {
            let list: Vec<(&str, &str)> = (0..1 + next() % 4)
                .map(|_| (names[next() as usize % names.len()], values[next() as usize % values.len()]))
                .collect();
            let wire = encode_list(&mut e, &list, false);
            // These literals never touch the table: a fresh encoder writes the same bytes.
            assert_eq!(wire, encode_list(&mut Encoder::new(), &list, false), "{list:?}");
            let want: Vec<Field> =
                list.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec(), false)).collect();
            assert_eq!(decode_all(&mut d, &wire), want);
        }
        assert!(e.literals.len() <= MAX_LITERALS);
        assert_eq!(e.table.dynamic_len(), 0);
        // A long value is written, not remembered.
        let long = "x".repeat(MAX_REMEMBERED + 1);
        let mut e = Encoder::new();
        let wire = encode_list(&mut e, &[("etag", long.as_str())], false);
        assert_eq!(
            decode_all(&mut Decoder::new(4096), &wire),
            vec![(b"etag".to_vec(), long.clone().into_bytes(), false)]
        );
        assert!(e.literals.is_empty());
    }

    #[test]
    fn validators_enter_the_table_when_they_repeat() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let list =
            [("etag", "\"1a2b-3c\""), ("last-modified", "Tue, 24 Nov 2026 10:00:00 GMT"), ("content-length", "14")];
        let want: Vec<Field> =
            list.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec(), false)).collect();
        // First sight: literals without indexing. Second: with indexing. Then one byte each.
        let first = encode_list(&mut e, &list, false);
        assert_eq!(e.table.dynamic_len(), 0);
        let second = encode_list(&mut e, &list, false);
        assert_eq!(e.table.dynamic_len(), 3);
        let third = encode_list(&mut e, &list, false);
        assert_eq!(third.len(), 3, "{third:02x?}");
        for wire in [first, second, third] {
            assert_eq!(decode_all(&mut d, &wire), want);
        }
        // Values that change from one response to the next (one file after another) never
        // enter it, so they evict nothing.
        let mut e = Encoder::new();
        for i in 0..50 {
            let etag = format!("\"{i}-e\"");
            let wire = encode_list(&mut e, &[("etag", etag.as_str()), ("content-type", "text/css")], false);
            assert_eq!(decode_all(&mut d, &wire)[0].1, etag.as_bytes());
        }
        assert_eq!(e.table.dynamic_len(), 1, "content-type only");
    }

    #[test]
    fn random_lists_stay_in_sync_with_small_table() {
        let mut next = crate::xorshift(0x2545_f491_4f6c_dd1d);
        let names = ["x-a", "x-b", "content-type", ":status", "cookie", "x-long-header-name"];
        let mut e = Encoder::new();
        e.set_max_table_size(300);
        let mut d = Decoder::new(300);
        for round in 0..500 {
            let list: Vec<(Vec<u8>, Vec<u8>, bool)> = (0..next() % 8)
                .map(|_| {
                    let name = names[next() as usize % names.len()].as_bytes().to_vec();
                    let len = next() as usize % 60;
                    let value: Vec<u8> = (0..len).map(|_| b"abc012/;=\x01\xff"[next() as usize % 11]).collect();
                    (name, value, next() % 10 == 0)
                })
                .collect();
            if round % 100 == 99 {
                let size = next() as usize % 400;
                e.set_max_table_size(size);
                d.set_max_table_size(size);
            }
            let mut wire = Vec::new();
            e.encode(list.iter().map(|(n, v, s)| (&n[..], &v[..], *s)), &mut wire);
            assert_eq!(decode_all(&mut d, &wire), list);
            assert_eq!(dynamic_entries(&e.table), dynamic_entries(&d.table));
        }
    }

    #[test]
    fn a_repeated_list_is_the_block_an_encoder_without_the_memo_writes() {
        // Lists drawn from a few, so that most repeat; some fields indexed, some not, some
        // sensitive, size changes now and then. In lockstep, an encoder whose memo is cleared
        // before every list writes exactly the same bytes, and a decoder reads the lists back.
        let mut next = crate::xorshift(0x1234_5678_9abc_def1);
        let pool: Vec<Vec<Field>> = (0..6)
            .map(|_| {
                (0..1 + next() % 6)
                    .map(|_| {
                        let name =
                            [":status", "content-type", "etag", "date", "x-a", "set-cookie", "x-long-header-name"]
                                [next() as usize % 7]
                                .as_bytes()
                                .to_vec();
                        let len = next() as usize % 40;
                        let value: Vec<u8> = (0..len).map(|_| b"abc012/;= "[next() as usize % 10]).collect();
                        (name, value, next() % 12 == 0)
                    })
                    .collect()
            })
            .collect();
        let (mut e, mut plain, mut d) = (Encoder::new(), Encoder::new(), Decoder::new(4096));
        let (mut reused, mut pick) = (0, 0);
        for round in 0..3_000 {
            if round % 500 == 499 {
                let size = [0, 200, 4096, 1000][next() as usize % 4];
                e.set_max_table_size(size);
                plain.set_max_table_size(size);
                d.set_max_table_size(4096);
            }
            // The same list as the last one two times in three, as a server's heads repeat.
            if next() % 3 == 0 {
                pick = next() as usize % pool.len();
            }
            let list = &pool[pick];
            let fields = || list.iter().map(|(n, v, s)| (&n[..], &v[..], *s));
            let state = e.table_state();
            let hit = e.pending_min.is_none()
                && e.memo.as_ref().is_some_and(|m| m.state() == Some(state) && m.holds(fields()));
            reused += usize::from(hit);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            e.encode(fields(), &mut a);
            plain.memo = None;
            plain.encode(fields(), &mut b);
            assert_eq!(a, b, "round {round}");
            assert_eq!(decode_all(&mut d, &a), *list);
        }
        assert!(reused > 1_000, "the memo served {reused} of 3,000 lists");
        // A list that differs only in a value, in a field's flag, or by a field less: no hit.
        let list = [(&b"x-a"[..], &b"1"[..], false), (b"x-b", b"2", false)];
        let mut e = Encoder::new();
        e.encode(list, &mut Vec::new());
        assert!(e.memo.is_none(), "not for the first block");
        e.encode(list, &mut Vec::new());
        e.encode(list, &mut Vec::new());
        let memo = e.memo.as_ref().expect("kept");
        assert!(memo.holds(list.into_iter()));
        assert!(!memo.holds([(&b"x-a"[..], &b"1"[..], false), (b"x-b", b"3", false)].into_iter()));
        assert!(!memo.holds([(&b"x-a"[..], &b"1"[..], false), (b"x-b", b"2", true)].into_iter()));
        assert!(!memo.holds([(&b"x-a"[..], &b"1"[..], false)].into_iter()));
        e.shrink();
        assert!(e.memo.is_none(), "an idle connection's encoder holds no memo");
    }

    #[test]
    fn a_list_with_a_keyed_shared_part_encodes_as_the_whole_list_would() {
        // Heads made of a status, a shared part (one of three Arcs, two of them with the same
        // lines) and a few lines of their own. In lockstep with an encoder that has no memo, the
        // keyed encoder writes the same bytes and a decoder reads the whole lists back.
        type Lines = Vec<(Vec<u8>, Vec<u8>, bool)>;
        let line = |n: &str, v: &str, s| (n.as_bytes().to_vec(), v.as_bytes().to_vec(), s);
        let a: Lines = vec![line("etag", "\"1-e\"", false), line("content-type", "text/plain", false)];
        let b: Lines = vec![line("etag", "\"2-f\"", false), line("x-a", "1", true)];
        let shared = [std::sync::Arc::new(a.clone()), std::sync::Arc::new(a), std::sync::Arc::new(b)];
        let owns: [Lines; 3] = [vec![], vec![line("alt-svc", "h3=\":443\"", false)], vec![line("x-b", "2", false)]];
        let mut next = crate::xorshift(0x0bad_cafe_1234_5678);
        let (mut e, mut plain, mut d) = (Encoder::new(), Encoder::new(), Decoder::new(4096));
        let (mut hits, mut pick) = (0, (0, 0, 0));
        for round in 0..2_000 {
            if next() % 3 == 0 {
                pick = (next() as usize % 3, next() as usize % 3, next() as usize % 2);
            }
            let (key, own, status) = (&shared[pick.0], &owns[pick.1], [&b"200"[..], b"404"][pick.2]);
            let head = || std::iter::once((&b":status"[..], status, false));
            let lines = || head().chain(key.iter().map(as_line)).chain(own.iter().map(as_line));
            let rest = || head().chain(own.iter().map(as_line));
            let state = e.table_state();
            hits += usize::from(
                e.pending_min.is_none()
                    && e.memo.as_ref().is_some_and(|m| {
                        m.state() == Some(state) && m.holds_keyed(std::sync::Arc::as_ptr(key).cast(), rest())
                    }),
            );
            let (mut x, mut y) = (Vec::new(), Vec::new());
            e.encode_keyed(key, lines(), rest(), &mut x);
            plain.memo = None;
            plain.encode(lines(), &mut y);
            assert_eq!(x, y, "round {round}");
            let want: Vec<Field> = lines().map(|(n, v, s)| (n.to_vec(), v.to_vec(), s)).collect();
            assert_eq!(decode_all(&mut d, &x), want);
        }
        assert!(hits > 500, "the memo served {hits} of 2,000 lists");
        // Kept for one Arc: not for another with the same lines, nor for a plain list.
        let mut e = Encoder::new();
        let rest = [(&b":status"[..], &b"200"[..], false)];
        for _ in 0..3 {
            let lines = rest.into_iter().chain(shared[0].iter().map(as_line));
            e.encode_keyed(&shared[0], lines, rest.into_iter(), &mut Vec::new());
        }
        let memo = e.memo.as_ref().expect("kept");
        assert!(memo.holds_keyed(std::sync::Arc::as_ptr(&shared[0]).cast(), rest.into_iter()));
        assert!(!memo.holds_keyed(std::sync::Arc::as_ptr(&shared[1]).cast(), rest.into_iter()));
        assert!(!memo.holds(rest.into_iter()));
    }
}
