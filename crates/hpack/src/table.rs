//! The static table (RFC 7541 §2.3.1, Appendix A), the dynamic table
//! (RFC 7541 §2.3.2, §4) and the combined index address space (§2.3.3).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// Per-entry overhead added to name and value lengths when computing an
/// entry's size (RFC 7541 §4.1); it approximates bookkeeping costs.
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// The static table (RFC 7541 Appendix A); index `i` is `STATIC_TABLE[i - 1]`.
pub(crate) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Number of static entries; dynamic indices start right after
/// (RFC 7541 §2.3.3).
pub(crate) const STATIC_LEN: usize = STATIC_TABLE.len();

/// Result of looking a header field up in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    /// Name and value match the entry at this index.
    Full(usize),
    /// Only the name matches the entry at this index.
    Name(usize),
    /// Nothing matches.
    None,
}

/// Looks `name`/`value` up in the static table: a full match, else the first entry with the
/// name (entries sharing a name are adjacent), through a hash index built once.
#[cfg(test)]
fn static_find(name: &[u8], value: &[u8]) -> Match {
    static_find_hashed(name, value, field_hash(name, value), &mut None)
}

/// The static table's hash index, built once.
fn static_index() -> &'static StaticIndex {
    static INDEX: OnceLock<StaticIndex> = OnceLock::new();
    INDEX.get_or_init(|| StaticIndex::new(&STATIC_TABLE))
}

/// [`static_find`] with the field's hash computed by the caller, and its name's hash computed
/// at most once between the caller and here (`nh`): an encoder's lookup hashes each field once.
fn static_find_hashed(name: &[u8], value: &[u8], fh: u64, nh: &mut Option<u64>) -> Match {
    match static_full(name, value, fh) {
        Match::None => static_name(name, nh),
        found => found,
    }
}

/// The static table's full match for a field whose hash is `fh`, if any.
fn static_full(name: &[u8], value: &[u8], fh: u64) -> Match {
    static_index().full(name, value, fh).map_or(Match::None, |i| Match::Full(i + 1))
}

/// The static table's first entry named `name`, if any (its hash computed once, into `nh`).
fn static_name(name: &[u8], nh: &mut Option<u64>) -> Match {
    static_index().named(name, nh).map_or(Match::None, |i| Match::Name(i + 1))
}

/// The same by a linear scan (the reference the index is tested against).
#[cfg(test)]
fn static_scan(name: &[u8], value: &[u8]) -> Match {
    let mut name_match = Match::None;
    for (i, &(n, v)) in STATIC_TABLE.iter().enumerate() {
        if n.len() == name.len() && n == name {
            if v == value {
                return Match::Full(i + 1);
            }
            if name_match == Match::None {
                name_match = Match::Name(i + 1);
            }
        } else if name_match != Match::None {
            // Entries sharing a name are adjacent in the static table.
            break;
        }
    }
    name_match
}

/// A word-at-a-time multiply-rotate hash (the rustc "Fx" construction): the keys are header
/// names and values the encoder itself chose to index, so no resistance to chosen collisions is
/// needed (a collision only costs a linear scan).
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        // The last 0..=7 bytes, little-endian, built byte by byte: a copy into a padded
        // buffer is a call to memcpy per hash, a tenth of an encoder's lookup.
        let rest = chunks.remainder();
        let tail = rest.iter().rev().fold(0u64, |w, &b| (w << 8) | u64::from(b));
        self.0 = (self.0.rotate_left(5) ^ (tail ^ rest.len() as u64)).wrapping_mul(K);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Hash → position, keyed by hashes that are already well mixed.
type Lookup = HashMap<u64, u64, BuildHasherDefault<Fx>>;

fn name_hash(name: &[u8]) -> u64 {
    let mut h = Fx(0x9e37_79b9);
    h.write(name);
    h.finish()
}

fn field_hash(name: &[u8], value: &[u8]) -> u64 {
    let mut h = Fx(name.len() as u64);
    h.write(name);
    h.write(value);
    h.finish()
}

/// A hash index over a fixed table of fields (HPACK's static table, and QPACK's, RFC 9204
/// Appendix A): a lookup hashes the field, where a scan compares it with every entry.
pub struct StaticIndex {
    entries: &'static [(&'static [u8], &'static [u8])],
    full: Lookup,
    names: Lookup,
}

impl StaticIndex {
    /// The index of `entries`.
    pub fn new(entries: &'static [(&'static [u8], &'static [u8])]) -> Self {
        let (mut full, mut names) = (Lookup::default(), Lookup::default());
        for (i, &(n, v)) in entries.iter().enumerate() {
            full.entry(field_hash(n, v)).or_insert(i as u64);
            names.entry(name_hash(n)).or_insert(i as u64);
        }
        Self { entries, full, names }
    }

    /// The position of the first entry equal to the field (`true`), else of the first entry
    /// with its name (`false`), as a scan in order would find them.
    pub fn find(&self, name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
        match self.full(name, value, field_hash(name, value)) {
            Some(i) => Some((i, true)),
            None => self.named(name, &mut None).map(|i| (i, false)),
        }
    }

    /// The first entry equal to the field whose hash is `fh` (an encoder hashes each field once
    /// for both tables).
    pub(crate) fn full(&self, name: &[u8], value: &[u8], fh: u64) -> Option<usize> {
        match self.full.get(&fh) {
            Some(&i) if self.entries[i as usize] == (name, value) => Some(i as usize),
            // A hash collision: scan.
            Some(_) => self.entries.iter().position(|&e| e == (name, value)),
            None => None,
        }
    }

    /// The first entry named `name`, its hash computed at most once (into `nh`).
    pub(crate) fn named(&self, name: &[u8], nh: &mut Option<u64>) -> Option<usize> {
        match self.names.get(nh.get_or_insert_with(|| name_hash(name))) {
            Some(&i) if self.entries[i as usize].0 == name => Some(i as usize),
            Some(_) => self.entries.iter().position(|&(n, _)| n == name),
            None => None,
        }
    }

    /// The same by a scan (collisions, and the reference in tests).
    pub fn scan(&self, name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
        let mut first = None;
        for (i, &(n, v)) in self.entries.iter().enumerate() {
            if n == name {
                if v == value {
                    return Some((i, true));
                }
                first.get_or_insert((i, false));
            }
        }
        first
    }
}

impl std::fmt::Debug for StaticIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticIndex").field("entries", &self.entries.len()).finish()
    }
}

/// One dynamic table entry: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    data: Box<[u8]>,
    name_len: usize,
    /// Insertion number: the entry's dynamic position is `inserted - 1 - seq`.
    seq: u64,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.data[..self.name_len]
    }

    fn value(&self) -> &[u8] {
        &self.data[self.name_len..]
    }

    /// Size per RFC 7541 §4.1.
    fn size(&self) -> usize {
        self.data.len() + ENTRY_OVERHEAD
    }
}

/// The static and dynamic tables as one index space (RFC 7541 §2.3.3).
#[derive(Debug)]
pub(crate) struct Table {
    /// Newest entry at the front: dynamic index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    /// Sum of entry sizes (RFC 7541 §4.1).
    size: usize,
    /// Current maximum size, as last set by a dynamic table size update.
    max_size: usize,
    /// Entries inserted so far.
    inserted: u64,
    /// The encoder's index of the dynamic table (the decoder only reads by position).
    index: Option<Box<DynIndex>>,
}

/// Where the newest dynamic entry with a given field, and with a given name, is: insertion
/// numbers by hash. Kept exact on insert and eviction; a hash collision is verified and falls
/// back to a scan.
#[derive(Debug, Default)]
struct DynIndex {
    full: Lookup,
    names: Lookup,
}

impl std::fmt::Debug for Fx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fx")
    }
}

impl Table {
    pub(crate) fn new(max_size: usize) -> Self {
        Self { entries: VecDeque::new(), size: 0, max_size, inserted: 0, index: None }
    }

    /// A table for an encoder: lookups by field go through a hash index instead of a scan.
    pub(crate) fn indexed(max_size: usize) -> Self {
        Self { index: Some(Box::default()), ..Self::new(max_size) }
    }

    /// Current size per RFC 7541 §4.1.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Entries inserted so far: with the maximum size and the current size, what the table
    /// holds (an entry is evicted only by an insert or a size change, and an entry too large to
    /// fit empties the table without counting as inserted, which the current size shows).
    pub(crate) fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Current maximum size.
    pub(crate) fn max_size(&self) -> usize {
        self.max_size
    }

    /// Number of dynamic entries.
    #[cfg(test)]
    pub(crate) fn dynamic_len(&self) -> usize {
        self.entries.len()
    }

    /// Changes the maximum size, evicting the oldest entries until the table
    /// fits (RFC 7541 §4.3).
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            match self.entries.pop_back() {
                Some(e) => {
                    self.size -= e.size();
                    if let Some(ix) = &mut self.index {
                        // Only the newest entry for a key is indexed; an older one is gone
                        // before a newer one (FIFO), so the key is free when this was it.
                        let (fh, nh) = (field_hash(e.name(), e.value()), name_hash(e.name()));
                        if ix.full.get(&fh) == Some(&e.seq) {
                            ix.full.remove(&fh);
                        }
                        if ix.names.get(&nh) == Some(&e.seq) {
                            ix.names.remove(&nh);
                        }
                    }
                }
                None => {
                    debug_assert!(false, "size accounting out of sync");
                    self.size = 0;
                }
            }
        }
    }

    /// Adds an entry at the front, evicting old entries to make room
    /// (RFC 7541 §4.4). An entry larger than the maximum size empties the
    /// table and is not added.
    pub(crate) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            if let Some(ix) = &mut self.index {
                ix.full.clear();
                ix.names.clear();
            }
            return;
        }
        self.evict_to(self.max_size - size);
        let mut data = Vec::with_capacity(name.len() + value.len());
        data.extend_from_slice(name);
        data.extend_from_slice(value);
        let seq = self.inserted;
        self.inserted += 1;
        if let Some(ix) = &mut self.index {
            ix.full.insert(field_hash(name, value), seq);
            ix.names.insert(name_hash(name), seq);
        }
        self.entries.push_front(Entry { data: data.into_boxed_slice(), name_len: name.len(), seq });
        self.size += size;
    }

    /// The field at `index` (1-based, static then dynamic), if any.
    pub(crate) fn get(&self, index: u64) -> Option<(&[u8], &[u8])> {
        let index = usize::try_from(index).ok()?;
        match index {
            0 => None,
            1..=STATIC_LEN => {
                let (n, v) = STATIC_TABLE[index - 1];
                Some((n, v))
            }
            _ => {
                let e = self.entries.get(index - STATIC_LEN - 1)?;
                Some((e.name(), e.value()))
            }
        }
    }

    /// Finds the best match for a field: a full match (static preferred,
    /// then the newest dynamic entry), else a name match (static preferred,
    /// since its index is small and stable).
    pub(crate) fn find(&self, name: &[u8], value: &[u8]) -> Match {
        let fh = field_hash(name, value);
        let mut nh = None;
        let Some(ix) = &self.index else {
            return match static_find_hashed(name, value, fh, &mut nh) {
                full @ Match::Full(_) => full,
                from_static => self.scan(name, value, from_static),
            };
        };
        if let Match::Full(i) = static_full(name, value, fh) {
            return Match::Full(i);
        }
        let at = |seq: u64| -> Option<(usize, &Entry)> {
            let pos = usize::try_from(self.inserted.checked_sub(seq + 1)?).ok()?;
            self.entries.get(pos).map(|e| (pos, e))
        };
        // A full dynamic match before any name lookup: a repeated field (the common case)
        // hashes once.
        match ix.full.get(&fh).and_then(|&s| at(s)) {
            Some((pos, e)) if e.name() == name && e.value() == value => return Match::Full(STATIC_LEN + 1 + pos),
            Some(_) => return self.scan(name, value, static_name(name, &mut nh)),
            None => {}
        }
        if let Match::Name(i) = static_name(name, &mut nh) {
            return Match::Name(i);
        }
        match ix.names.get(nh.get_or_insert_with(|| name_hash(name))).and_then(|&s| at(s)) {
            Some((pos, e)) if e.name() == name => Match::Name(STATIC_LEN + 1 + pos),
            Some(_) => self.scan(name, value, Match::None),
            None => Match::None,
        }
    }

    /// `find` by a linear scan of the dynamic table (the decoder's tables, and hash
    /// collisions).
    fn scan(&self, name: &[u8], value: &[u8], from_static: Match) -> Match {
        let mut dyn_name = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.name_len == name.len() && e.name() == name {
                if e.value() == value {
                    return Match::Full(STATIC_LEN + 1 + i);
                }
                dyn_name.get_or_insert(STATIC_LEN + 1 + i);
            }
        }
        match (from_static, dyn_name) {
            (Match::Name(i), _) => Match::Name(i),
            (_, Some(i)) => Match::Name(i),
            _ => Match::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_spot_checks() {
        assert_eq!(STATIC_LEN, 61);
        let t = Table::new(4096);
        assert_eq!(t.get(1), Some((&b":authority"[..], &b""[..])));
        assert_eq!(t.get(2), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(t.get(16), Some((&b"accept-encoding"[..], &b"gzip, deflate"[..])));
        assert_eq!(t.get(59), Some((&b"vary"[..], &b""[..])));
        assert_eq!(t.get(61), Some((&b"www-authenticate"[..], &b""[..])));
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(62), None);
        assert_eq!(t.get(u64::MAX), None);
    }

    #[test]
    fn static_find_prefers_full_then_first_name() {
        assert_eq!(static_find(b":status", b"404"), Match::Full(13));
        assert_eq!(static_find(b":status", b"302"), Match::Name(8));
        assert_eq!(static_find(b":authority", b""), Match::Full(1));
        assert_eq!(static_find(b"www-authenticate", b"x"), Match::Name(61));
        assert_eq!(static_find(b"x-custom", b""), Match::None);
        // Every static entry finds itself.
        for (i, (n, v)) in STATIC_TABLE.iter().enumerate() {
            assert_eq!(static_find(n, v), Match::Full(i + 1));
        }
    }

    #[test]
    fn the_index_agrees_with_a_scan() {
        // Random inserts (with repeats), size changes and lookups: the indexed table answers
        // exactly as scanning does, and the static index as the static scan.
        let mut next = crate::xorshift(0x2545_f491_4f6c_dd1d);
        let names: [&[u8]; 6] = [b"server", b"x-a", b"date", b"content-type", b"x-long-name-here", b""];
        let values: [&[u8]; 5] = [b"", b"1", b"text/plain", b"sluice", b"a much longer value than the others"];
        let mut ix = Table::indexed(256);
        let mut plain = Table::new(256);
        for round in 0..20_000 {
            let (n, v) = (names[next() as usize % names.len()], values[next() as usize % values.len()]);
            match next() % 10 {
                0..=4 => {
                    ix.insert(n, v);
                    plain.insert(n, v);
                }
                5 if round % 50 == 0 => {
                    let m = (next() % 300) as usize;
                    ix.set_max_size(m);
                    plain.set_max_size(m);
                }
                _ => {
                    let want = match static_scan(n, v) {
                        m @ Match::Full(_) => m,
                        m => plain.scan(n, v, m),
                    };
                    assert_eq!(ix.find(n, v), want, "round {round}");
                    assert_eq!(plain.find(n, v), want);
                }
            }
        }
        for (n, v) in STATIC_TABLE.iter().chain([(&b":status"[..], &b"302"[..]), (b"x-none", b"")].iter()) {
            assert_eq!(static_find(n, v), static_scan(n, v));
        }
    }

    #[test]
    fn insert_evict_and_indices() {
        let mut t = Table::new(100);
        t.insert(b"a", b"1"); // 34
        t.insert(b"b", b"2"); // 34
        assert_eq!(t.size(), 68);
        assert_eq!(t.get(62), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(t.get(63), Some((&b"a"[..], &b"1"[..])));
        t.insert(b"c", b"3"); // evicts "a"
        assert_eq!(t.size(), 68);
        assert_eq!(t.dynamic_len(), 2);
        assert_eq!(t.get(63), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(t.get(64), None);
        assert_eq!(t.find(b"b", b"2"), Match::Full(63));
        assert_eq!(t.find(b"b", b"9"), Match::Name(63));
        assert_eq!(t.find(b"age", b"9"), Match::Name(21));
        // Too large: clears the table.
        t.insert(b"big", &[0; 80]);
        assert_eq!((t.size(), t.dynamic_len()), (0, 0));
        // Exactly the maximum fits.
        t.insert(b"", &[0; 68]);
        assert_eq!(t.size(), 100);
        t.set_max_size(99);
        assert_eq!((t.size(), t.dynamic_len()), (0, 0));
    }

    #[test]
    fn entry_referring_to_evicted_name_is_fine() {
        // RFC 7541 §4.4: the name may be that of an entry about to be evicted;
        // callers pass copies, so this just exercises eviction order.
        let mut t = Table::new(70);
        t.insert(b"name", b"v1"); // 38
        let (n, _) = t.get(62).unwrap();
        let n = n.to_vec();
        t.insert(&n, b"v2");
        assert_eq!(t.get(62), Some((&b"name"[..], &b"v2"[..])));
        assert_eq!(t.dynamic_len(), 1);
    }
}
