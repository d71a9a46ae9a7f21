//! The encoder side: encodes field sections, maintains our dynamic table,
//! writes the encoder stream and processes the peer's decoder stream
//! (RFC 9204 §2.1, §4.3, §4.4, §4.5).

use std::collections::{HashMap, VecDeque};

use crate::prim::{self, PrimError};
use crate::static_table::{self, Match};
use crate::{Error, FieldRef, Reason, ENTRY_OVERHEAD};
use sluice_hpack::ListMemo;

/// Names never inserted into the dynamic table and always sent as
/// never-indexed literals: credentials whose values must not be exposed to
/// guessing through the shared compression context (RFC 9204 §7.1.3).
const SENSITIVE_NAMES: [&[u8]; 4] = [b"authorization", b"proxy-authorization", b"cookie", b"set-cookie"];

/// Names whose values rarely repeat between messages: inserting them would
/// only churn the table and the encoder stream. They are still sent as
/// ordinary (indexable) literals.
const VOLATILE_NAMES: [&[u8]; 8] = [
    b"content-length",
    b"content-range",
    b"etag",
    b"last-modified",
    b"if-modified-since",
    b"if-none-match",
    b"expires",
    b"age",
];

/// Most sections with dynamic references we track at once. A peer that
/// never acknowledges would otherwise make this state grow for the life of
/// the connection; past the bound, sections use only the static table and
/// literals, which need no tracking (RFC 9204 §7.3).
const MAX_UNACKED_SECTIONS: usize = 1024;

/// Tunables of an [`Encoder`]; see [`EncoderOptions::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Use the dynamic table at all. When `false` the encoder is static-only:
    /// it never writes to the encoder stream and its sections never block.
    pub use_dynamic_table: bool,
    /// Upper bound on the dynamic table capacity we choose, whatever the
    /// peer allows (our memory, per connection).
    pub max_table_capacity: u64,
    /// Huffman-code string literals when that is shorter.
    pub huffman: bool,
}

impl Default for EncoderOptions {
    /// Dynamic table on, capacity at most 4096 (the HTTP/2 default table
    /// size, plenty for the responses an edge server sends), Huffman on.
    fn default() -> Self {
        Self { use_dynamic_table: true, max_table_capacity: 4096, huffman: true }
    }
}

/// An entry of our dynamic table.
#[derive(Debug)]
struct Entry {
    name: Vec<u8>,
    value: Vec<u8>,
    /// References from field sections not yet acknowledged or cancelled
    /// (§2.1.1); the entry cannot be evicted while this is non-zero.
    refs: u32,
}

impl Entry {
    fn size(&self) -> u64 {
        self.name.len() as u64 + self.value.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A sent field section with dynamic references, awaiting acknowledgment.
#[derive(Debug)]
struct Section {
    required_insert_count: u64,
    /// Absolute indices referenced, one per reference.
    refs: Vec<u64>,
}

/// Encodes field sections for one peer (one per HTTP/3 connection), keeping
/// our dynamic table. See the crate documentation for how to drive it.
///
/// # Policy
/// * Static table matches are always used; they never block.
/// * Fields named `authorization`, `proxy-authorization`, `cookie` or
///   `set-cookie`, and fields the caller marks with
///   [`FieldRef::never_indexed`], are sent as literals with the `N` bit
///   (RFC 9204 §4.5.4) and never inserted.
/// * Other fields are inserted into the dynamic table when their entry takes
///   at most half of the table, unless their name is one whose values rarely
///   repeat (`content-length`, `etag`, `last-modified`, ...).
/// * Entries the peer has not acknowledged are referenced only if the stream
///   may block: it already could, or fewer than the peer's
///   SETTINGS_QPACK_BLOCKED_STREAMS streams could (§2.1.2). Otherwise the
///   field goes out as a literal and the new entry serves later sections.
/// * The oldest quarter of the table is "draining" (§2.1.1.1): its entries
///   are not referenced; an acknowledged one that is still needed is
///   refreshed with a Duplicate instruction instead.
#[derive(Debug)]
pub struct Encoder {
    opts: EncoderOptions,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY from the peer (§3.2.3).
    peer_max_capacity: u64,
    /// floor(peer_max_capacity / 32), for Required Insert Count (§4.5.1.1).
    max_entries: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS from the peer (§2.1.2).
    max_blocked: u64,
    /// The capacity announced with Set Dynamic Table Capacity; `None` until
    /// the first insertion (the initial capacity is zero, §3.2.2).
    capacity: Option<u64>,
    /// Oldest entry first.
    entries: VecDeque<Entry>,
    /// Absolute index of `entries[0]` (§3.2.4).
    dropped: u64,
    /// Sum of entry sizes (§3.2.1).
    size: u64,
    /// Known Received Count (§2.1.4).
    known_received: u64,
    /// Unacknowledged sections with dynamic references, per stream, oldest
    /// first (§2.2.2.1: acknowledgments apply to the earliest).
    unacked: HashMap<u64, VecDeque<Section>>,
    /// Total number of sections in `unacked`.
    unacked_count: usize,
    /// Encoder-stream bytes for the caller to send.
    encoder_out: Vec<u8>,
    /// A partial decoder instruction awaiting more bytes.
    decoder_in: Vec<u8>,
    /// Reused buffer for the field lines of the section being encoded.
    scratch: Vec<u8>,
    /// The last field section encoded while the encoder was static-only, and its bytes. Without
    /// a dynamic table a section is a function of its field lines alone, and a server repeats
    /// its response heads; comparing a list costs a fraction of encoding it (looking each field
    /// up in the static table, Huffman coding literals). Many HTTP/3 clients allow no dynamic
    /// table (QPACK_MAX_TABLE_CAPACITY 0, the default). Boxed: a connection that has answered
    /// one request holds a pointer, not the memo's room; one that has answered more keeps the
    /// memo (bounded by `ListMemo`) until it ends, or until its encoder starts using the
    /// dynamic table.
    memo: Option<Box<ListMemo<()>>>,
    /// Whether a section was encoded before: the memo is made from the second on, so a
    /// connection that answers one request never allocates it.
    encoded: bool,
    /// Sections the memo served.
    #[cfg(test)]
    memo_hits: usize,
}

impl Encoder {
    /// Creates an encoder for a peer that sent
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY = `max_table_capacity` and
    /// SETTINGS_QPACK_BLOCKED_STREAMS = `max_blocked_streams` (both 0 until
    /// its SETTINGS arrive), with default [`EncoderOptions`].
    pub fn new(max_table_capacity: u64, max_blocked_streams: u64) -> Self {
        Self::with_options(max_table_capacity, max_blocked_streams, EncoderOptions::default())
    }

    /// Like [`Encoder::new`] with explicit options.
    pub fn with_options(max_table_capacity: u64, max_blocked_streams: u64, opts: EncoderOptions) -> Self {
        Self {
            opts,
            peer_max_capacity: max_table_capacity,
            max_entries: max_table_capacity / ENTRY_OVERHEAD,
            max_blocked: max_blocked_streams,
            capacity: None,
            entries: VecDeque::new(),
            dropped: 0,
            size: 0,
            known_received: 0,
            unacked: HashMap::new(),
            unacked_count: 0,
            encoder_out: Vec::new(),
            decoder_in: Vec::new(),
            scratch: Vec::new(),
            memo: None,
            encoded: false,
            #[cfg(test)]
            memo_hits: 0,
        }
    }

    /// Applies the peer's SETTINGS when they arrive after the encoder was
    /// created (e.g. created with zeros before SETTINGS).
    ///
    /// # Errors
    /// If the dynamic table is already in use (possible only with
    /// remembered 0-RTT settings), the capacity must not change
    /// (RFC 9204 §3.2.3): [`Error::DecoderStream`] with
    /// [`Reason::SettingsMismatch`].
    pub fn set_peer_settings(&mut self, max_table_capacity: u64, max_blocked_streams: u64) -> Result<(), Error> {
        if self.capacity.is_some() && max_table_capacity != self.peer_max_capacity {
            return Err(Error::DecoderStream(Reason::SettingsMismatch));
        }
        self.peer_max_capacity = max_table_capacity;
        self.max_entries = max_table_capacity / ENTRY_OVERHEAD;
        self.max_blocked = max_blocked_streams;
        Ok(())
    }

    /// Number of entries inserted into the dynamic table so far.
    pub fn insert_count(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }

    /// The Known Received Count: insertions the peer has acknowledged.
    pub fn known_received_count(&self) -> u64 {
        self.known_received
    }

    /// Current dynamic table size (RFC 9204 §3.2.1).
    pub fn table_size(&self) -> u64 {
        self.size
    }

    /// Streams whose unacknowledged sections could currently be blocked at
    /// the peer (§2.1.2); never more than its SETTINGS_QPACK_BLOCKED_STREAMS.
    pub fn blocked_streams(&self) -> usize {
        self.unacked.values().filter(|q| q.iter().any(|s| s.required_insert_count > self.known_received)).count()
    }

    /// Number of sent sections still awaiting acknowledgment.
    pub fn unacknowledged_sections(&self) -> usize {
        self.unacked_count
    }

    /// The capacity we use: the peer's maximum, bounded by our own.
    fn target_capacity(&self) -> u64 {
        if self.opts.use_dynamic_table {
            self.peer_max_capacity.min(self.opts.max_table_capacity)
        } else {
            0
        }
    }

    /// Whether any entry can ever fit (the smallest takes 32 octets).
    fn dynamic_enabled(&self) -> bool {
        self.target_capacity() >= ENTRY_OVERHEAD
    }

    fn entry(&self, abs: u64) -> Option<&Entry> {
        self.entries.get(usize::try_from(abs.checked_sub(self.dropped)?).ok()?)
    }

    fn entry_mut(&mut self, abs: u64) -> Option<&mut Entry> {
        self.entries.get_mut(usize::try_from(abs.checked_sub(self.dropped)?).ok()?)
    }

    /// §2.1.1: acknowledged, and no unacknowledged section references it.
    fn evictable(&self, abs: u64) -> bool {
        abs < self.known_received && self.entry(abs).is_some_and(|e| e.refs == 0)
    }

    /// Entries with an absolute index below the returned one are draining
    /// (§2.1.1.1): together with the free space they make up at most a
    /// quarter of the capacity, so the next insertions will evict them.
    fn draining_index(&self) -> u64 {
        let capacity = self.capacity.unwrap_or(0);
        let reserve = capacity / 4;
        let mut reclaimable = capacity.saturating_sub(self.size);
        let mut abs = self.dropped;
        for e in &self.entries {
            reclaimable += e.size();
            if reclaimable > reserve {
                break;
            }
            abs += 1;
        }
        abs
    }

    /// Number of oldest entries to evict for an entry of `size` to fit, or
    /// `None` if that would evict a non-evictable entry (§2.1.1, §3.2.2).
    fn room_for(&self, size: u64) -> Option<usize> {
        let capacity = self.target_capacity();
        if size > capacity {
            return None;
        }
        let mut free = capacity.saturating_sub(self.size);
        let mut evict = 0;
        while free < size {
            let e = self.entries.get(evict)?;
            if !self.evictable(self.dropped + evict as u64) {
                return None;
            }
            free += e.size();
            evict += 1;
        }
        Some(evict)
    }

    /// Newest entry with this name and value.
    fn find_exact(&self, name: &[u8], value: &[u8]) -> Option<u64> {
        let i = self.entries.iter().rposition(|e| e.name == name && e.value == value)?;
        Some(self.dropped + i as u64)
    }

    /// Newest entry with this name whose absolute index is in
    /// `min_abs..below`.
    fn find_name(&self, name: &[u8], min_abs: u64, below: u64) -> Option<u64> {
        (self.dropped..self.insert_count())
            .rev()
            .filter(|&abs| abs >= min_abs && abs < below)
            .find(|&abs| self.entry(abs).is_some_and(|e| e.name == name))
    }

    /// Inserts an entry, writing the instruction to the encoder stream;
    /// `duplicate_of` makes it a Duplicate (§4.3.4) of that entry. Returns
    /// the new entry's absolute index, or `None` if the table cannot take it
    /// without evicting blocking entries.
    fn try_insert(&mut self, name: &[u8], value: &[u8], duplicate_of: Option<u64>) -> Option<u64> {
        if !self.dynamic_enabled() {
            return None;
        }
        let size = name.len() as u64 + value.len() as u64 + ENTRY_OVERHEAD;
        let evict = self.room_for(size)?;
        if self.capacity.is_none() {
            // §4.3.1 Set Dynamic Table Capacity: 001 Capacity(5+), sent once
            // before the first insertion (the initial capacity is 0, §3.2.2).
            let capacity = self.target_capacity();
            prim::encode_int(capacity, 5, 0x20, &mut self.encoder_out);
            self.capacity = Some(capacity);
        }
        let insert_count = self.insert_count();
        let huffman = self.opts.huffman;
        // Encoder-stream relative index: 0 is the newest entry (§3.2.5).
        // References are resolved before this insertion evicts anything.
        let relative = |abs: u64| insert_count - 1 - abs;
        let dynamic_name = self.find_name(name, 0, u64::MAX);
        let out = &mut self.encoder_out;
        if let Some(abs) = duplicate_of {
            // §4.3.4 Duplicate: 000 Index(5+).
            prim::encode_int(relative(abs), 5, 0x00, out);
        } else if let Match::Full(i) | Match::Name(i) = static_table::find(name, value) {
            // §4.3.2 Insert with Name Reference, T=1: 11 Index(6+), Value.
            prim::encode_int(u64::from(i), 6, 0xc0, out);
            prim::encode_string(value, 7, 0x00, huffman, out);
        } else if let Some(abs) = dynamic_name {
            // §4.3.2 Insert with Name Reference, T=0: 10 Index(6+), Value.
            prim::encode_int(relative(abs), 6, 0x80, out);
            prim::encode_string(value, 7, 0x00, huffman, out);
        } else {
            // §4.3.3 Insert with Literal Name: 01 H NameLen(5+), Value.
            prim::encode_string(name, 5, 0x40, huffman, out);
            prim::encode_string(value, 7, 0x00, huffman, out);
        }
        for _ in 0..evict {
            if let Some(e) = self.entries.pop_front() {
                self.size -= e.size();
                self.dropped += 1;
            }
        }
        self.entries.push_back(Entry { name: name.to_vec(), value: value.to_vec(), refs: 0 });
        self.size += size;
        Some(insert_count)
    }

    /// Inserts `name: value` into the dynamic table ahead of use (RFC 9204
    /// §2.1: an encoder may insert any entry), queuing the instruction for
    /// the encoder stream. Returns `false` if the dynamic table is unused or
    /// has no room without evicting entries still in use.
    pub fn insert(&mut self, name: &[u8], value: &[u8]) -> bool {
        self.try_insert(name, value, None).is_some()
    }

    /// Duplicates an existing entry (§4.3.4); for tests reproducing
    /// RFC 9204 Appendix B.4, where the policy's choice is illustrative.
    #[cfg(test)]
    pub(crate) fn duplicate(&mut self, abs: u64) -> Option<u64> {
        let (name, value) = self.entry(abs).map(|e| (e.name.clone(), e.value.clone()))?;
        self.try_insert(&name, &value, Some(abs))
    }

    /// Whether a section on `stream_id` may reference unacknowledged entries
    /// without exceeding the peer's blocked-stream limit (§2.1.2).
    fn may_block(&self, stream_id: u64) -> bool {
        let blocking = |q: &VecDeque<Section>| q.iter().any(|s| s.required_insert_count > self.known_received);
        if self.unacked.get(&stream_id).is_some_and(blocking) {
            return true;
        }
        (self.unacked.values().filter(|q| blocking(q)).count() as u64) < self.max_blocked
    }

    /// Encodes one field section for `stream_id`, appending it to `out`
    /// (the payload of a HEADERS frame).
    ///
    /// Dynamic table insertions made along the way are queued for the
    /// encoder stream: drain [`Encoder::poll_encoder_stream`] afterwards.
    /// Field lines are emitted in the order given (RFC 9204 §2.1). See the
    /// type documentation for the indexing policy. The lines are walked more than once (hence
    /// `Clone`): a static-only encoder compares them with the last section's and, when they are
    /// the same, appends that section's bytes again (see `Encoder::memo`).
    pub fn encode<'a, I, F>(&mut self, stream_id: u64, fields: I, out: &mut Vec<u8>)
    where
        I: IntoIterator<Item = F>,
        I::IntoIter: Clone,
        F: Into<FieldRef<'a>>,
    {
        let lines = fields.into_iter().map(Into::into);
        let as_memo = |f: FieldRef<'a>| (f.name, f.value, f.never_indexed);
        // Static-only (no dynamic table allowed or wanted): the section depends on the lines
        // alone, and the last one's bytes serve again for the same lines.
        let static_only = !self.dynamic_enabled();
        if !static_only {
            // SETTINGS allowed the dynamic table after sections went out without it.
            self.memo = None;
        } else if let Some(m) = self.memo.as_ref().filter(|m| m.holds(lines.clone().map(as_memo))) {
            out.extend_from_slice(m.block());
            #[cfg(test)]
            {
                self.memo_hits += 1;
            }
            return;
        }
        let start = out.len();
        // Single pass (RFC 9204 Appendix C): the Base is the insert count
        // before this section; entries inserted while encoding it are
        // referenced with post-Base indices.
        let base = self.insert_count();
        let may_block = self.may_block(stream_id);
        let use_dynamic = self.unacked_count < MAX_UNACKED_SECTIONS;
        let mut section = Section { required_insert_count: 0, refs: Vec::new() };
        let mut encoded = std::mem::take(&mut self.scratch);
        encoded.clear();
        for field in lines.clone() {
            self.encode_line(field, base, may_block, use_dynamic, &mut section, &mut encoded);
        }

        // §4.5.1 Encoded Field Section Prefix.
        let ric = section.required_insert_count;
        if ric == 0 {
            out.extend_from_slice(&[0, 0]);
        } else {
            // §4.5.1.1: EncInsertCount = (ReqInsertCount mod (2 * MaxEntries)) + 1.
            prim::encode_int(ric % (2 * self.max_entries) + 1, 8, 0, out);
            // §4.5.1.2: Sign and Delta Base.
            if base >= ric {
                prim::encode_int(base - ric, 7, 0x00, out);
            } else {
                prim::encode_int(ric - base - 1, 7, 0x80, out);
            }
            self.unacked.entry(stream_id).or_default().push_back(section);
            self.unacked_count += 1;
        }
        out.extend_from_slice(&encoded);
        self.scratch = encoded;
        if static_only && self.encoded {
            self.memo.get_or_insert_with(Box::default).keep(lines.map(as_memo), &out[start..], ());
        }
        self.encoded = true;
    }

    /// Records a reference from the section being encoded; the entry cannot
    /// be evicted until the section is acknowledged or cancelled.
    fn reference(&mut self, abs: u64, section: &mut Section) {
        if let Some(e) = self.entry_mut(abs) {
            e.refs += 1;
        }
        section.refs.push(abs);
        section.required_insert_count = section.required_insert_count.max(abs + 1);
    }

    fn encode_line(
        &mut self,
        field: FieldRef<'_>,
        base: u64,
        may_block: bool,
        use_dynamic: bool,
        section: &mut Section,
        out: &mut Vec<u8>,
    ) {
        let FieldRef { name, value, .. } = field;
        let sensitive = field.never_indexed || SENSITIVE_NAMES.contains(&name);
        let found = static_table::find(name, value);
        if let (Match::Full(i), false) = (found, sensitive) {
            // §4.5.2 Indexed Field Line, T=1: 11 Index(6+).
            prim::encode_int(u64::from(i), 6, 0xc0, out);
            return;
        }
        let static_name = match found {
            Match::Full(i) | Match::Name(i) => Some(i),
            Match::None => None,
        };
        let huffman = self.opts.huffman;
        if sensitive {
            // §7.1.3: a never-indexed literal, with a static name reference
            // if there is one (static references cannot leak anything).
            match static_name {
                Some(i) => self.literal_static_name(i, value, true, out),
                None => Self::literal_literal_name(name, value, true, huffman, out),
            }
            return;
        }

        // Entries below this absolute index may be referenced: acknowledged
        // ones only, unless the stream may block (§2.1.2).
        let usable_below = if may_block { u64::MAX } else { self.known_received };
        if use_dynamic && self.dynamic_enabled() {
            let draining = self.draining_index();
            if let Some(abs) = self.find_exact(name, value) {
                if abs >= draining {
                    if abs < usable_below {
                        self.indexed_dynamic(abs, base, section, out);
                        return;
                    }
                } else if abs < self.known_received {
                    // §2.1.1.1: refresh a draining entry rather than keep it
                    // alive with new references.
                    if let Some(dup) = self.try_insert(name, value, Some(abs)) {
                        if dup < usable_below {
                            self.indexed_dynamic(dup, base, section, out);
                            return;
                        }
                    }
                }
            } else if self.should_index(name, value) {
                if let Some(new) = self.try_insert(name, value, None) {
                    if new < usable_below {
                        self.indexed_dynamic(new, base, section, out);
                        return;
                    }
                }
            }
            // Draining entries are not referenced for names either.
            let draining = self.draining_index();
            if static_name.is_none() {
                if let Some(abs) = self.find_name(name, draining, usable_below) {
                    self.literal_dynamic_name(abs, base, value, section, out);
                    return;
                }
            }
        }
        match static_name {
            Some(i) => self.literal_static_name(i, value, false, out),
            None => Self::literal_literal_name(name, value, false, huffman, out),
        }
    }

    fn should_index(&self, name: &[u8], value: &[u8]) -> bool {
        let size = name.len() as u64 + value.len() as u64 + ENTRY_OVERHEAD;
        size <= self.target_capacity() / 2 && !VOLATILE_NAMES.contains(&name)
    }

    fn indexed_dynamic(&mut self, abs: u64, base: u64, section: &mut Section, out: &mut Vec<u8>) {
        if abs < base {
            // §4.5.2 Indexed Field Line, T=0: 10 Index(6+), relative to Base.
            prim::encode_int(base - 1 - abs, 6, 0x80, out);
        } else {
            // §4.5.3 Indexed Field Line with Post-Base Index: 0001 Index(4+).
            prim::encode_int(abs - base, 4, 0x10, out);
        }
        self.reference(abs, section);
    }

    fn literal_static_name(&self, index: u8, value: &[u8], never: bool, out: &mut Vec<u8>) {
        // §4.5.4 Literal Field Line with Name Reference, T=1: 01 N 1 Index(4+).
        prim::encode_int(u64::from(index), 4, if never { 0x70 } else { 0x50 }, out);
        prim::encode_string(value, 7, 0x00, self.opts.huffman, out);
    }

    fn literal_dynamic_name(&mut self, abs: u64, base: u64, value: &[u8], section: &mut Section, out: &mut Vec<u8>) {
        if abs < base {
            // §4.5.4 Literal Field Line with Name Reference, T=0: 01 0 0 Index(4+).
            prim::encode_int(base - 1 - abs, 4, 0x40, out);
        } else {
            // §4.5.5 Literal Field Line with Post-Base Name Reference: 0000 0 Index(3+).
            prim::encode_int(abs - base, 3, 0x00, out);
        }
        prim::encode_string(value, 7, 0x00, self.opts.huffman, out);
        self.reference(abs, section);
    }

    fn literal_literal_name(name: &[u8], value: &[u8], never: bool, huffman: bool, out: &mut Vec<u8>) {
        // §4.5.6 Literal Field Line with Literal Name: 001 N H NameLen(3+).
        prim::encode_string(name, 3, if never { 0x30 } else { 0x20 }, huffman, out);
        prim::encode_string(value, 7, 0x00, huffman, out);
    }

    /// Takes the bytes to write on our encoder stream, if any.
    ///
    /// Call after every [`Encoder::encode`] or [`Encoder::insert`], and send
    /// the bytes no later than the field sections that were encoded with
    /// them, or the peer may block on (or, with no blocking allowed, never
    /// see) entries those sections reference.
    pub fn poll_encoder_stream(&mut self) -> Option<Vec<u8>> {
        (!self.encoder_out.is_empty()).then(|| std::mem::take(&mut self.encoder_out))
    }

    /// Processes bytes received on the peer's decoder stream (RFC 9204
    /// §4.4), in order, in chunks of any size.
    ///
    /// # Errors
    /// [`Error::DecoderStream`] for a Section Acknowledgment on a stream with
    /// no unacknowledged section (§4.4.1), an Insert Count Increment of zero
    /// or beyond what we inserted (§4.4.3), or a malformed integer. The
    /// connection must then be closed.
    pub fn on_decoder_stream(&mut self, data: &[u8]) -> Result<(), Error> {
        let mut buf = std::mem::take(&mut self.decoder_in);
        buf.extend_from_slice(data);
        let mut pos = 0;
        while pos < buf.len() {
            let first = buf[pos];
            // Each instruction is one prefixed integer (§4.4).
            let prefix = if first & 0x80 != 0 { 7 } else { 6 };
            let (value, used) = match prim::decode_int(&buf[pos..], prefix) {
                Ok(v) => v,
                Err(PrimError::Truncated) => break,
                Err(e) => return Err(Error::DecoderStream(e.into())),
            };
            pos += used;
            let applied = if first & 0x80 != 0 {
                self.on_section_ack(value)
            } else if first & 0x40 != 0 {
                self.on_stream_cancellation(value);
                Ok(())
            } else {
                self.on_insert_count_increment(value)
            };
            applied.map_err(Error::DecoderStream)?;
        }
        buf.drain(..pos);
        // A partial instruction is a partial integer: at most 11 octets
        // before decode_int reports an overflow.
        if buf.len() > 16 {
            return Err(Error::DecoderStream(Reason::InstructionTooLong));
        }
        self.decoder_in = buf;
        Ok(())
    }

    /// Drops a section's references (acknowledged or cancelled).
    fn release(&mut self, section: &Section) {
        for &abs in &section.refs {
            if let Some(e) = self.entry_mut(abs) {
                e.refs = e.refs.saturating_sub(1);
            }
        }
    }

    /// §4.4.1: acknowledges the earliest unacknowledged section of the
    /// stream (§2.2.2.1) and may raise the Known Received Count (§2.1.4).
    fn on_section_ack(&mut self, stream_id: u64) -> Result<(), Reason> {
        let queue = self.unacked.get_mut(&stream_id).ok_or(Reason::UnexpectedSectionAck(stream_id))?;
        let section = queue.pop_front().ok_or(Reason::UnexpectedSectionAck(stream_id))?;
        if queue.is_empty() {
            self.unacked.remove(&stream_id);
        }
        self.unacked_count -= 1;
        self.release(&section);
        self.known_received = self.known_received.max(section.required_insert_count);
        Ok(())
    }

    /// §4.4.2: every reference from the stream's sections is gone. Not an
    /// error for a stream we know nothing about: the decoder may cancel any
    /// stream it abandons.
    fn on_stream_cancellation(&mut self, stream_id: u64) {
        if let Some(queue) = self.unacked.remove(&stream_id) {
            self.unacked_count -= queue.len();
            for section in &queue {
                self.release(section);
            }
        }
    }

    /// §4.4.3: raises the Known Received Count.
    fn on_insert_count_increment(&mut self, increment: u64) -> Result<(), Reason> {
        if increment == 0 {
            return Err(Reason::ZeroIncrement);
        }
        let known_received = self.known_received.saturating_add(increment);
        if known_received > self.insert_count() {
            return Err(Reason::IncrementBeyondInsertCount { known_received, insert_count: self.insert_count() });
        }
        self.known_received = known_received;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decoded, Decoder, FieldLine};

    fn encode(enc: &mut Encoder, stream_id: u64, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        enc.encode(stream_id, pairs.iter().map(|&p| FieldRef::from(p)), &mut out);
        out
    }

    fn decode_all(dec: &mut Decoder, stream_id: u64, section: &[u8]) -> Vec<FieldLine> {
        match dec.decode(stream_id, section).unwrap() {
            Decoded::Fields(f) => f,
            Decoded::Blocked => panic!("stream {stream_id} blocked"),
        }
    }

    /// Encodes, delivers the encoder stream first, decodes, and feeds the
    /// decoder stream back.
    fn round_trip(enc: &mut Encoder, dec: &mut Decoder, stream_id: u64, pairs: &[(&str, &str)]) -> Vec<u8> {
        let section = encode(enc, stream_id, pairs);
        if let Some(bytes) = enc.poll_encoder_stream() {
            dec.on_encoder_stream(&bytes).unwrap();
        }
        let got = decode_all(dec, stream_id, &section);
        let want: Vec<FieldLine> = pairs.iter().map(|&(n, v)| FieldLine::new(n.to_owned(), v.to_owned())).collect();
        let strip = |v: Vec<FieldLine>| v.into_iter().map(|f| (f.name, f.value)).collect::<Vec<_>>();
        assert_eq!(strip(got), strip(want));
        if let Some(bytes) = dec.poll_decoder_stream() {
            enc.on_decoder_stream(&bytes).unwrap();
        }
        section
    }

    #[test]
    fn sensitive_fields_are_never_indexed() {
        let mut enc = Encoder::new(4096, 100);
        let mut out = Vec::new();
        let fields = [
            FieldRef::new(b"cookie", b"session=abcdef0123456789"),
            FieldRef::new(b"authorization", b"Bearer abc"),
            FieldRef::new(b"set-cookie", b""),
            FieldRef::sensitive(b"x-api-key", b"k"),
        ];
        enc.encode(0, fields, &mut out);
        assert_eq!(enc.poll_encoder_stream(), None);
        assert_eq!(enc.insert_count(), 0);
        // cookie: 01 N=1 T=1 index 5.
        assert_eq!(out[2], 0x75);
        let mut dec = Decoder::new(4096, 100, 64 * 1024);
        let got = decode_all(&mut dec, 0, &out);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|f| f.never_indexed));
        assert_eq!(&got[3].name[..], b"x-api-key");
    }

    #[test]
    fn static_only_modes_never_write_the_encoder_stream() {
        let opts = EncoderOptions { use_dynamic_table: false, ..EncoderOptions::default() };
        for mut enc in [Encoder::new(0, 0), Encoder::with_options(4096, 100, opts)] {
            let mut dec = Decoder::new(4096, 100, 64 * 1024);
            for i in 0..3 {
                let section = round_trip(&mut enc, &mut dec, 4 * i, &[(":status", "200"), ("x-custom", "same")]);
                assert_eq!(&section[..3], &[0, 0, 0xd9]);
            }
            assert_eq!(enc.poll_encoder_stream(), None);
            assert_eq!(dec.insert_count(), 0);
        }
    }

    #[test]
    fn capacity_is_bounded_by_our_limit_and_sent_once() {
        let mut enc = Encoder::new(100_000, 0);
        encode(&mut enc, 0, &[("x-a", "1"), ("x-b", "2")]);
        let stream = enc.poll_encoder_stream().unwrap();
        assert_eq!(&stream[..3], &[0x3f, 0xe1, 0x1f]); // 4096
        assert_eq!(stream.iter().filter(|&&b| b == 0x3f).count(), 1);
        // The RIC encoding still uses the peer's maximum (§4.5.1.1).
        assert_eq!(enc.max_entries, 3125);
    }

    #[test]
    fn without_blocking_only_acknowledged_entries_are_referenced() {
        let mut enc = Encoder::new(4096, 0);
        let mut dec = Decoder::new(4096, 0, 64 * 1024);
        // First use: inserted, but sent as a literal (RIC 0).
        let s0 = encode(&mut enc, 0, &[("x-a", "1")]);
        assert_eq!(&s0[..2], &[0, 0]);
        assert_eq!(enc.insert_count(), 1);
        // The section is decodable even before the encoder stream arrives.
        assert_eq!(decode_all(&mut dec, 0, &s0), [FieldLine::new("x-a", "1")]);
        dec.on_encoder_stream(&enc.poll_encoder_stream().unwrap()).unwrap();
        // Still unacknowledged: not referenced, not inserted again.
        let s4 = encode(&mut enc, 4, &[("x-a", "1")]);
        assert_eq!(&s4[..2], &[0, 0]);
        assert_eq!(enc.insert_count(), 1);
        assert_eq!(enc.poll_encoder_stream(), None);
        // After the Insert Count Increment the entry is used.
        enc.on_decoder_stream(&dec.poll_decoder_stream().unwrap()).unwrap();
        assert_eq!(enc.known_received_count(), 1);
        let s8 = encode(&mut enc, 8, &[("x-a", "1")]);
        assert_eq!(s8, [2, 0, 0x80]);
        assert_eq!(decode_all(&mut dec, 8, &s8), [FieldLine::new("x-a", "1")]);
        assert_eq!(enc.blocked_streams(), 0);
    }

    #[test]
    fn blocked_streams_stay_within_the_peer_limit() {
        let mut enc = Encoder::new(4096, 2);
        let s0 = encode(&mut enc, 0, &[("x-a", "1")]);
        let s4 = encode(&mut enc, 4, &[("x-b", "2")]);
        let s8 = encode(&mut enc, 8, &[("x-c", "3")]);
        assert_ne!(s0[0], 0);
        assert_ne!(s4[0], 0);
        assert_eq!(s8[0], 0, "a third stream must not risk blocking");
        assert_eq!(enc.blocked_streams(), 2);
        // A stream that may already block can take more references.
        let s0b = encode(&mut enc, 0, &[("x-c", "3")]);
        assert_ne!(s0b[0], 0);
        assert_eq!(enc.blocked_streams(), 2);
        // The peer decodes with the same limit without error.
        let mut dec = Decoder::new(4096, 2, 64 * 1024);
        for (id, s) in [(0, &s0), (4, &s4), (8, &s8), (0, &s0b)] {
            dec.decode(id, s).unwrap();
        }
        assert_eq!(dec.blocked_streams(), 2);
        dec.on_encoder_stream(&enc.poll_encoder_stream().unwrap()).unwrap();
        let mut unblocked = Vec::new();
        while let Some((id, r)) = dec.poll_unblocked() {
            unblocked.push((id, r.unwrap()));
        }
        assert_eq!(unblocked.len(), 3);
        enc.on_decoder_stream(&dec.poll_decoder_stream().unwrap()).unwrap();
        assert_eq!(enc.blocked_streams(), 0);
        assert_eq!(enc.unacknowledged_sections(), 0);
        assert_eq!(enc.known_received_count(), 3);
    }

    #[test]
    fn referenced_entries_are_not_evicted() {
        // 100 octets hold two 39-octet entries.
        let mut enc = Encoder::new(100, 10);
        let mut dec = Decoder::new(100, 10, 64 * 1024);
        let s0 = encode(&mut enc, 0, &[("x-a", "aaaa")]);
        encode(&mut enc, 4, &[("x-b", "bbbb")]);
        assert_eq!(enc.insert_count(), 2);
        dec.on_encoder_stream(&enc.poll_encoder_stream().unwrap()).unwrap();
        // Entries not yet acknowledged cannot be evicted: no insertion.
        encode(&mut enc, 8, &[("x-c", "cccc")]);
        assert_eq!(enc.insert_count(), 2);
        // Acknowledged (Insert Count Increment) but still referenced by the
        // unacknowledged section on stream 0: still no insertion.
        let increment = dec.poll_decoder_stream().unwrap();
        assert_eq!(increment, [0x02]);
        enc.on_decoder_stream(&increment).unwrap();
        encode(&mut enc, 12, &[("x-c", "cccc")]);
        assert_eq!(enc.insert_count(), 2);
        // Once stream 0's section is acknowledged, entry 0 can go.
        assert!(matches!(dec.decode(0, &s0).unwrap(), Decoded::Fields(_)));
        let ack = dec.poll_decoder_stream().unwrap();
        assert_eq!(ack, [0x80]);
        enc.on_decoder_stream(&ack).unwrap();
        encode(&mut enc, 16, &[("x-c", "cccc")]);
        assert_eq!(enc.insert_count(), 3);
        assert_eq!(enc.entry(0).map(|e| e.name.clone()), None);
        dec.on_encoder_stream(&enc.poll_encoder_stream().unwrap()).unwrap();
        assert_eq!(dec.table_size(), 78);
    }

    #[test]
    fn cancellation_releases_references() {
        let mut enc = Encoder::new(100, 10);
        encode(&mut enc, 0, &[("x-a", "aaaa")]);
        encode(&mut enc, 4, &[("x-b", "bbbb")]);
        assert_eq!(enc.blocked_streams(), 2);
        enc.on_decoder_stream(&[0x02]).unwrap(); // both received
        assert_eq!(enc.blocked_streams(), 0);
        enc.on_decoder_stream(&[0x40, 0x44]).unwrap(); // cancel 0 and 4
        assert_eq!(enc.unacknowledged_sections(), 0);
        assert!(enc.insert(b"x-c", b"cccc"));
        // Cancelling an unknown stream is harmless.
        enc.on_decoder_stream(&[0x48]).unwrap();
    }

    #[test]
    fn decoder_stream_errors() {
        let mut enc = Encoder::new(4096, 10);
        assert_eq!(enc.on_decoder_stream(&[0x84]), Err(Error::DecoderStream(Reason::UnexpectedSectionAck(4))));
        let mut enc = Encoder::new(4096, 10);
        assert_eq!(enc.on_decoder_stream(&[0x00]), Err(Error::DecoderStream(Reason::ZeroIncrement)));
        let mut enc = Encoder::new(4096, 10);
        assert_eq!(
            enc.on_decoder_stream(&[0x01]),
            Err(Error::DecoderStream(Reason::IncrementBeyondInsertCount { known_received: 1, insert_count: 0 }))
        );
        // A second acknowledgment for a stream with one section.
        let mut enc = Encoder::new(4096, 10);
        encode(&mut enc, 4, &[("x-a", "1")]);
        enc.on_decoder_stream(&[0x84]).unwrap();
        assert_eq!(enc.on_decoder_stream(&[0x84]), Err(Error::DecoderStream(Reason::UnexpectedSectionAck(4))));
        // Integer overflow.
        let mut enc = Encoder::new(4096, 10);
        let mut bad = vec![0xff];
        bad.extend([0xff; 11]);
        assert_eq!(enc.on_decoder_stream(&bad), Err(Error::DecoderStream(Reason::IntegerOverflow)));
    }

    #[test]
    fn decoder_stream_in_pieces_with_large_stream_ids() {
        let mut enc = Encoder::new(4096, 10);
        let id = (1u64 << 62) - 4; // the largest client bidi stream ID
        encode(&mut enc, id, &[("x-a", "1")]);
        let mut ack = Vec::new();
        prim::encode_int(id, 7, 0x80, &mut ack);
        assert!(ack.len() > 5);
        for b in ack.chunks(1) {
            enc.on_decoder_stream(b).unwrap();
        }
        assert_eq!(enc.unacknowledged_sections(), 0);
        assert_eq!(enc.known_received_count(), 1);
    }

    #[test]
    fn draining_entries_are_duplicated() {
        // 256 octets: seven 36-octet entries leave 4 free; the oldest entry
        // is in the draining quarter.
        let mut enc = Encoder::new(256, 10);
        let mut dec = Decoder::new(256, 10, 64 * 1024);
        for i in 0..7 {
            let value = i.to_string();
            round_trip(&mut enc, &mut dec, 4 * i, &[("x-a", value.as_str())]);
        }
        assert_eq!(enc.table_size(), 252);
        assert_eq!(enc.known_received_count(), 7);
        assert_eq!(enc.draining_index(), 1);
        let section = round_trip(&mut enc, &mut dec, 100, &[("x-a", "0")]);
        // Duplicate of relative index 6 (absolute 0), which evicts entry 0
        // itself, then a post-Base reference to the copy (absolute 7).
        assert_eq!(enc.insert_count(), 8);
        assert_eq!(enc.entry(7).map(|e| e.value.clone()), Some(b"0".to_vec()));
        assert_eq!(section, [9, 0x80, 0x10]);
    }

    #[test]
    fn required_insert_count_wraps_around() {
        // 96 octets: MaxEntries 3, so the encoded count wraps every 6
        // insertions; run far past that with blocking allowed and not.
        for max_blocked in [0, 1] {
            let mut enc = Encoder::new(96, max_blocked);
            let mut dec = Decoder::new(96, max_blocked, 64 * 1024);
            for i in 0..50u64 {
                let value = format!("{}", i % 7);
                round_trip(&mut enc, &mut dec, 4 * i, &[("x-k", value.as_str()), (":status", "200")]);
            }
            assert!(enc.insert_count() > 12, "{}", enc.insert_count());
            assert_eq!(enc.insert_count(), dec.insert_count());
        }
    }

    #[test]
    fn tracked_sections_are_bounded() {
        let mut enc = Encoder::new(4096, 0);
        encode(&mut enc, 0, &[("x-a", "1")]);
        enc.on_decoder_stream(&[0x01]).unwrap();
        for i in 0..MAX_UNACKED_SECTIONS as u64 {
            assert_eq!(encode(&mut enc, 4 * i, &[("x-a", "1")]), [2, 0, 0x80]);
        }
        assert_eq!(enc.unacknowledged_sections(), MAX_UNACKED_SECTIONS);
        // The peer never acknowledges: further sections avoid the table.
        assert_eq!(encode(&mut enc, 1 << 20, &[("x-a", "1")])[..2], [0, 0]);
        // An acknowledgment makes room again.
        enc.on_decoder_stream(&[0x80]).unwrap();
        assert_eq!(encode(&mut enc, 1 << 20, &[("x-a", "1")]), [2, 0, 0x80]);
    }

    #[test]
    fn settings_after_creation() {
        let mut enc = Encoder::new(0, 0);
        encode(&mut enc, 0, &[("x-a", "1")]);
        assert_eq!(enc.poll_encoder_stream(), None);
        enc.set_peer_settings(4096, 10).unwrap();
        encode(&mut enc, 4, &[("x-a", "1")]);
        assert!(enc.poll_encoder_stream().is_some());
        assert_eq!(enc.set_peer_settings(4096, 20), Ok(()));
        assert_eq!(enc.set_peer_settings(8192, 20), Err(Error::DecoderStream(Reason::SettingsMismatch)));
    }

    #[test]
    fn a_static_only_encoder_repeats_the_section_an_encoder_without_the_memo_writes() {
        // A pool of lists, repeated two times in three in a fixed pseudo-random order: values
        // that Huffman-code and that do not, static-table hits, never-indexed lines.
        let pool: [&[(&str, &str, bool)]; 5] = [
            &[(":status", "200"), ("content-type", "text/html"), ("content-length", "14")].map(|(n, v)| (n, v, false)),
            &[(":status", "200"), ("content-type", "text/html"), ("content-length", "15")].map(|(n, v)| (n, v, false)),
            &[(":status", "404"), ("x-a", "1"), ("set-cookie", "id=1")].map(|(n, v)| (n, v, false)),
            &[(":status", "404", false), ("x-a", "1", true), ("set-cookie", "id=1", false)],
            &[(":status", "200"), ("server", "sluice"), ("content-type", "text/html"), ("content-length", "14")]
                .map(|(n, v)| (n, v, false)),
        ];
        let line = |&(n, v, s): &(&'static str, &'static str, bool)| FieldRef {
            name: n.as_bytes(),
            value: v.as_bytes(),
            never_indexed: s,
        };
        let opts = EncoderOptions { use_dynamic_table: false, ..EncoderOptions::default() };
        for (mut enc, mut plain) in [
            (Encoder::new(0, 0), Encoder::new(0, 0)),
            (Encoder::with_options(4096, 16, opts.clone()), Encoder::with_options(4096, 16, opts.clone())),
        ] {
            let mut dec = Decoder::new(0, 0, 64 * 1024);
            let (mut seed, mut last) = (7u32, usize::MAX);
            for i in 0..3_000u64 {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let pick =
                    if (seed >> 16) % 3 != 0 && last != usize::MAX { last } else { (seed >> 8) as usize % pool.len() };
                last = pick;
                let lines = pool[pick].iter().map(line);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                enc.encode(4 * i, lines.clone(), &mut a);
                plain.memo = None;
                plain.encode(4 * i, lines, &mut b);
                assert_eq!(a, b, "list {pick} at {i}");
                let got = decode_all(&mut dec, 4 * i, &a);
                let want: Vec<(&[u8], &[u8], bool)> =
                    pool[pick].iter().map(|&(n, v, s)| (n.as_bytes(), v.as_bytes(), s)).collect();
                let got: Vec<(&[u8], &[u8], bool)> = got
                    .iter()
                    .map(|f| (&f.name[..], &f.value[..], f.never_indexed && !SENSITIVE_NAMES.contains(&&f.name[..])))
                    .collect();
                assert_eq!(got, want, "list {pick} at {i}");
            }
            assert!(enc.memo_hits > 1_000, "the memo served {} of 3,000 sections", enc.memo_hits);
            assert_eq!(plain.memo_hits, 0);
            assert_eq!(enc.poll_encoder_stream(), None);
        }

        // Not for a connection's first section; lines that differ in a value, a flag or their
        // number miss; too long a list is not kept.
        let mut enc = Encoder::new(0, 0);
        let kept = [FieldRef::new(b"x-a", b"1"), FieldRef::new(b"x-b", b"2")];
        enc.encode(0, kept, &mut Vec::new());
        assert!(enc.memo.is_none(), "made on the first section");
        enc.encode(4, kept, &mut Vec::new());
        let memo = enc.memo.as_ref().expect("kept from the second section");
        let lines = |l: &[FieldRef<'static>]| l.iter().map(|f| (f.name, f.value, f.never_indexed)).collect::<Vec<_>>();
        assert!(memo.holds(lines(&kept).into_iter()));
        assert!(!memo.holds(lines(&[FieldRef::new(b"x-a", b"1"), FieldRef::new(b"x-b", b"3")]).into_iter()));
        assert!(!memo.holds(lines(&[FieldRef::new(b"x-a", b"1"), FieldRef::sensitive(b"x-b", b"2")]).into_iter()));
        assert!(!memo.holds(lines(&[FieldRef::new(b"x-a", b"1")]).into_iter()));
        assert!(!memo.holds(lines(&[kept[0], kept[1], FieldRef::new(b"x-c", b"")]).into_iter()));
        // ListMemo's bound is 1,024 bytes.
        let long = vec![b'v'; 1024];
        enc.encode(8, [FieldRef::new(b"x-long", &long)], &mut Vec::new());
        assert!(enc.memo.as_ref().is_none_or(|m| m.state().is_none()), "a list over the memo's bound was kept");

        // SETTINGS that allow the dynamic table after two static sections: the memo goes, and
        // the same lines now use the table.
        let mut enc = Encoder::new(0, 0);
        let (mut first, mut again) = (Vec::new(), Vec::new());
        enc.encode(0, kept, &mut first);
        enc.encode(4, kept, &mut Vec::new());
        assert!(enc.memo.is_some());
        enc.set_peer_settings(4096, 16).unwrap();
        enc.encode(8, kept, &mut again);
        assert!(enc.memo.is_none(), "a memo kept past SETTINGS that allow the table");
        assert!(enc.poll_encoder_stream().is_some(), "the lines were not inserted");
        assert_ne!(first, again);

        // An encoder with a dynamic table keeps none: its sections depend on the table.
        let mut enc = Encoder::new(4096, 16);
        let mut dec = Decoder::new(4096, 16, 64 * 1024);
        for i in 0..5 {
            round_trip(&mut enc, &mut dec, 4 * i, &[(":status", "200"), ("x-custom", "same")]);
        }
        assert!(enc.memo.is_none());
    }
}
