//! The decoder side: applies the peer's encoder stream to our copy of its
//! dynamic table, decodes field sections, and writes the decoder stream
//! (RFC 9204 §2.2, §4.3, §4.4, §4.5).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::prim::{self, PrimError};
use crate::{static_table, Error, FieldLine, Reason, ENTRY_OVERHEAD};

/// Most field sections kept for one blocked stream. A request stream
/// carries a header section and at most a trailer section (RFC 9114 §4.1);
/// a few more leave room for interim responses when decoding responses.
const MAX_QUEUED_SECTIONS_PER_STREAM: usize = 4;

/// Outcome of [`Decoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The field section, in wire order.
    Fields(Vec<FieldLine>),
    /// The section needs dynamic table entries that have not arrived on the
    /// encoder stream yet (RFC 9204 §2.2.1), or an earlier section of the
    /// same stream is still waiting. The decoder kept a copy; it comes out of
    /// [`Decoder::poll_unblocked`] once decodable.
    Blocked,
}

/// Our copy of the peer encoder's dynamic table (RFC 9204 §3.2).
#[derive(Debug, Default)]
struct Table {
    /// Oldest entry first. `Bytes` makes handing out names and values a
    /// reference count bump, and keeps a name referenced by an insertion
    /// alive even if that insertion evicts its source (§3.2.2).
    entries: VecDeque<(Bytes, Bytes)>,
    /// Absolute index (§3.2.4) of `entries[0]`: the number of evictions.
    dropped: u64,
    /// Sum of entry sizes (§3.2.1).
    size: u64,
    capacity: u64,
}

/// A decoded name or value: bytes of a table entry, or where a literal lies in the section's
/// buffer of decoded literals.
enum Part {
    Bytes(Bytes),
    Literal(std::ops::Range<usize>),
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::Literal(r) => r.len(),
        }
    }
}

fn entry_size(name: &[u8], value: &[u8]) -> u64 {
    name.len() as u64 + value.len() as u64 + ENTRY_OVERHEAD
}

impl Table {
    /// Total number of insertions so far ("Insert Count", §1.1).
    fn insert_count(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }

    fn get(&self, abs: u64) -> Option<&(Bytes, Bytes)> {
        let i = usize::try_from(abs.checked_sub(self.dropped)?).ok()?;
        self.entries.get(i)
    }

    /// Encoder-stream relative index: 0 is the most recent insertion (§3.2.5).
    fn relative(&self, rel: u64) -> Option<&(Bytes, Bytes)> {
        self.get(self.insert_count().checked_sub(1)?.checked_sub(rel)?)
    }

    fn evict_to(&mut self, target: u64) {
        while self.size > target {
            let Some((n, v)) = self.entries.pop_front() else { break };
            self.size -= entry_size(&n, &v);
            self.dropped += 1;
        }
    }

    /// §3.2.2: evict until the new entry fits, then append it.
    fn insert(&mut self, name: Bytes, value: Bytes) -> Result<(), Reason> {
        let size = entry_size(&name, &value);
        if size > self.capacity {
            return Err(Reason::EntryTooLarge { size, capacity: self.capacity });
        }
        self.evict_to(self.capacity - size);
        self.entries.push_back((name, value));
        self.size += size;
        Ok(())
    }
}

/// A field section waiting for encoder-stream data.
#[derive(Debug)]
struct Pending {
    required_insert_count: u64,
    base: u64,
    /// The field line representations (the prefix already parsed).
    lines: Vec<u8>,
}

#[derive(Debug, Default)]
struct StreamQueue {
    sections: VecDeque<Pending>,
    /// The first section is decodable and the stream is in `ready`.
    ready: bool,
}

/// Why parsing an encoder instruction stopped.
enum Stop {
    /// The instruction is not complete yet.
    Incomplete,
    Invalid(Reason),
}

impl From<PrimError> for Stop {
    fn from(e: PrimError) -> Self {
        match e {
            PrimError::Truncated => Self::Incomplete,
            e => Self::Invalid(e.into()),
        }
    }
}

impl From<Reason> for Stop {
    fn from(r: Reason) -> Self {
        Self::Invalid(r)
    }
}

/// Maps a primitive error inside a field section; a string literal beyond
/// the remaining budget means the section is too large.
fn section_error(e: PrimError, limit: u64) -> Error {
    match e {
        PrimError::TooLong => Error::FieldSectionTooLarge { limit },
        e => Error::DecompressionFailed(e.into()),
    }
}

/// Decodes field sections from one peer (one per HTTP/3 connection),
/// keeping its encoder's dynamic table. See the crate documentation for how
/// to drive it.
#[derive(Debug)]
pub struct Decoder {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY we advertised (§3.2.3).
    max_capacity: u64,
    /// floor(max_capacity / 32), for Required Insert Count (§4.5.1.1).
    max_entries: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS we advertised (§2.1.2).
    max_blocked: u64,
    /// Our limit on decoded field sections (RFC 9114 §4.2.2).
    max_field_section_size: u64,
    table: Table,
    /// A partial encoder instruction awaiting more bytes.
    encoder_in: Vec<u8>,
    /// Decoder-stream bytes for the caller to send.
    decoder_out: Vec<u8>,
    /// The encoder's Known Received Count as our instructions so far define
    /// it (§2.1.4); Insert Count Increments bring it up to the insert count.
    acked_insert_count: u64,
    /// Streams with sections waiting, by stream ID.
    queued: BTreeMap<u64, StreamQueue>,
    /// Streams whose first queued section is decodable, in unblock order.
    ready: VecDeque<u64>,
}

impl Decoder {
    /// Creates a decoder for the values we advertise in our SETTINGS:
    /// `max_table_capacity` (SETTINGS_QPACK_MAX_TABLE_CAPACITY),
    /// `max_blocked_streams` (SETTINGS_QPACK_BLOCKED_STREAMS), and
    /// `max_field_section_size` (SETTINGS_MAX_FIELD_SECTION_SIZE, RFC 9114
    /// §4.2.2; `u64::MAX` for no limit).
    pub fn new(max_table_capacity: u64, max_blocked_streams: u64, max_field_section_size: u64) -> Self {
        Self {
            max_capacity: max_table_capacity,
            max_entries: max_table_capacity / ENTRY_OVERHEAD,
            max_blocked: max_blocked_streams,
            max_field_section_size,
            table: Table::default(),
            encoder_in: Vec::new(),
            decoder_out: Vec::new(),
            acked_insert_count: 0,
            queued: BTreeMap::new(),
            ready: VecDeque::new(),
        }
    }

    /// Number of entries inserted into the dynamic table so far.
    pub fn insert_count(&self) -> u64 {
        self.table.insert_count()
    }

    /// Current dynamic table size (RFC 9204 §3.2.1).
    pub fn table_size(&self) -> u64 {
        self.table.size
    }

    /// Current dynamic table capacity, as last set by the peer's encoder.
    pub fn table_capacity(&self) -> u64 {
        self.table.capacity
    }

    /// Number of streams currently blocked on encoder-stream data.
    pub fn blocked_streams(&self) -> usize {
        self.queued.values().filter(|q| !q.ready).count()
    }

    /// Bound on a partial encoder instruction: the longest valid one is an
    /// Insert with Literal Name whose two strings, Huffman-coded at worst at
    /// 30 bits per octet, fill the table, plus a few integer octets.
    fn max_instruction_len(&self) -> usize {
        usize::try_from(self.max_capacity.saturating_mul(8).saturating_add(64)).unwrap_or(usize::MAX)
    }

    /// Processes bytes received on the peer's encoder stream (RFC 9204
    /// §4.3), in order, in chunks of any size. A trailing partial
    /// instruction is buffered until the rest arrives.
    ///
    /// Afterwards, call [`Decoder::poll_unblocked`] for sections that became
    /// decodable and [`Decoder::poll_decoder_stream`] for acknowledgments.
    ///
    /// # Errors
    /// [`Error::EncoderStream`] for any invalid instruction: a capacity above
    /// our advertised maximum (§4.3.1), an entry larger than the capacity
    /// (§3.2.2), a reference to a missing entry (§3.1, §2.2.3), malformed
    /// integers or strings, or a partial instruction longer than any valid
    /// one could be. The connection must then be closed.
    pub fn on_encoder_stream(&mut self, data: &[u8]) -> Result<(), Error> {
        let before = self.table.insert_count();
        if self.encoder_in.is_empty() {
            let used = self.apply_instructions(data)?;
            self.encoder_in.extend_from_slice(&data[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.encoder_in);
            buf.extend_from_slice(data);
            let used = self.apply_instructions(&buf)?;
            buf.drain(..used);
            self.encoder_in = buf;
        }
        if self.encoder_in.len() > self.max_instruction_len() {
            return Err(Error::EncoderStream(Reason::InstructionTooLong));
        }
        if self.table.insert_count() > before {
            self.mark_unblocked();
        }
        Ok(())
    }

    /// Applies every complete instruction at the start of `buf`; returns the
    /// number of octets consumed.
    fn apply_instructions(&mut self, buf: &[u8]) -> Result<usize, Error> {
        let mut pos = 0;
        while pos < buf.len() {
            match self.apply_instruction(&buf[pos..]) {
                Ok(used) => pos += used,
                Err(Stop::Incomplete) => break,
                Err(Stop::Invalid(reason)) => return Err(Error::EncoderStream(reason)),
            }
        }
        Ok(pos)
    }

    /// Parses and applies one encoder instruction (RFC 9204 §4.3).
    ///
    /// String literals are located first and decoded only once the whole
    /// instruction is present, so re-parsing a partial instruction as more
    /// bytes trickle in costs a few integer decodes, not a Huffman pass.
    fn apply_instruction(&mut self, buf: &[u8]) -> Result<usize, Stop> {
        let first = buf[0];
        // An entry must fit in the table with its 32 octets of overhead
        // (§3.2.2), which bounds both strings.
        let max_str = self.max_capacity.saturating_sub(ENTRY_OVERHEAD);
        if first & 0x80 != 0 {
            // §4.3.2 Insert with Name Reference: 1 T Index(6+), Value(8+).
            let (index, n) = prim::decode_int(buf, 6)?;
            let span = prim::string_span(buf, n, 7, max_str)?;
            let value = prim::decode_span(buf, span, max_str)?;
            let name = if first & 0x40 != 0 {
                // §3.1: an invalid static index on the encoder stream is
                // QPACK_ENCODER_STREAM_ERROR.
                Bytes::from_static(static_table::get(index).ok_or(Reason::InvalidStaticIndex(index))?.0)
            } else {
                self.table.relative(index).ok_or(Reason::InvalidDynamicIndex)?.0.clone()
            };
            self.table.insert(name, value)?;
            Ok(span.end)
        } else if first & 0x40 != 0 {
            // §4.3.3 Insert with Literal Name: 01 H NameLen(5+) Name, Value(8+).
            let name_span = prim::string_span(buf, 0, 5, max_str)?;
            let value_span = prim::string_span(buf, name_span.end, 7, max_str)?;
            let name = prim::decode_span(buf, name_span, max_str)?;
            let value = prim::decode_span(buf, value_span, max_str)?;
            self.table.insert(name, value)?;
            Ok(value_span.end)
        } else if first & 0x20 != 0 {
            // §4.3.1 Set Dynamic Table Capacity: 001 Capacity(5+).
            let (capacity, n) = prim::decode_int(buf, 5)?;
            if capacity > self.max_capacity {
                return Err(Reason::CapacityExceedsLimit { requested: capacity, max: self.max_capacity }.into());
            }
            self.table.capacity = capacity;
            self.table.evict_to(capacity);
            Ok(n)
        } else {
            // §4.3.4 Duplicate: 000 Index(5+).
            let (index, n) = prim::decode_int(buf, 5)?;
            let (name, value) = self.table.relative(index).ok_or(Reason::InvalidDynamicIndex)?.clone();
            self.table.insert(name, value)?;
            Ok(n)
        }
    }

    /// Moves streams whose first queued section is now decodable to `ready`,
    /// lowest Required Insert Count first, then by stream ID.
    fn mark_unblocked(&mut self) {
        let inserted = self.table.insert_count();
        let mut newly: Vec<(u64, u64)> = Vec::new();
        for (&id, q) in &mut self.queued {
            if let Some(head) = q.sections.front() {
                if !q.ready && head.required_insert_count <= inserted {
                    q.ready = true;
                    newly.push((head.required_insert_count, id));
                }
            }
        }
        newly.sort_unstable();
        self.ready.extend(newly.into_iter().map(|(_, id)| id));
    }

    /// Decodes Required Insert Count (§4.5.1.1) from its encoded form.
    fn required_insert_count(&self, encoded: u64) -> Result<u64, Reason> {
        if encoded == 0 {
            return Ok(0);
        }
        let full_range = 2 * self.max_entries;
        if encoded > full_range {
            return Err(Reason::InvalidRequiredInsertCount);
        }
        let max_value = self.table.insert_count() + self.max_entries;
        let max_wrapped = (max_value / full_range) * full_range;
        let mut ric = max_wrapped + encoded - 1;
        if ric > max_value {
            if ric <= full_range {
                return Err(Reason::InvalidRequiredInsertCount);
            }
            ric -= full_range;
        }
        if ric == 0 {
            return Err(Reason::InvalidRequiredInsertCount);
        }
        Ok(ric)
    }

    /// Parses the Encoded Field Section Prefix (§4.5.1): returns Required
    /// Insert Count, Base and the prefix length.
    fn parse_prefix(&self, section: &[u8]) -> Result<(u64, u64, usize), Reason> {
        let (encoded, n1) = prim::decode_int(section, 8)?;
        let ric = self.required_insert_count(encoded)?;
        let sign = section.get(n1).ok_or(Reason::Truncated)? & 0x80 != 0;
        let (delta, n2) = prim::decode_int(&section[n1..], 7)?;
        // §4.5.1.2: Base = RIC + Delta if S = 0, else RIC - Delta - 1; a
        // negative Base (S = 1 and RIC <= Delta) is invalid.
        let base = if sign {
            if ric <= delta {
                return Err(Reason::InvalidBase);
            }
            ric - delta - 1
        } else {
            ric.checked_add(delta).filter(|&b| b <= prim::MAX_INT).ok_or(Reason::InvalidBase)?
        };
        Ok((ric, base, n1 + n2))
    }

    /// Decodes one complete encoded field section (a HEADERS frame payload)
    /// received on `stream_id`.
    ///
    /// Returns the fields, or [`Decoded::Blocked`] if the section must wait
    /// for encoder-stream data (RFC 9204 §2.2.1); the decoder then keeps a
    /// copy and returns it from [`Decoder::poll_unblocked`] later. A section
    /// passed while an earlier one of the same stream waits is queued behind
    /// it, so sections always come out in stream order.
    ///
    /// After a section with a non-zero Required Insert Count is decoded, a
    /// Section Acknowledgment is queued for the decoder stream (§4.4.1).
    ///
    /// # Errors
    /// * [`Error::FieldSectionTooLarge`] if the fields exceed
    ///   `max_field_section_size` (the section still counts as processed and
    ///   is acknowledged). For a section that would block, this is also
    ///   returned without queuing it when its encoded length alone exceeds
    ///   the limit (no conforming encoder needs more octets than the decoded
    ///   size); the caller should then reject the request and call
    ///   [`Decoder::cancel_stream`].
    /// * [`Error::DecompressionFailed`] for a malformed or invalid section
    ///   (§2.2.3, §4.5), or when blocking would exceed
    ///   `max_blocked_streams` (§2.1.2). The connection must be closed.
    pub fn decode(&mut self, stream_id: u64, section: &[u8]) -> Result<Decoded, Error> {
        let (ric, base, prefix_len) = self.parse_prefix(section).map_err(Error::DecompressionFailed)?;
        let lines = &section[prefix_len..];
        let inserted = self.table.insert_count();
        let queued_already = self.queued.contains_key(&stream_id);
        if !queued_already && ric <= inserted {
            return Ok(Decoded::Fields(self.decode_now(stream_id, ric, base, lines)?));
        }
        if !queued_already && self.blocked_streams() as u64 >= self.max_blocked {
            return Err(Error::DecompressionFailed(Reason::TooManyBlockedStreams));
        }
        if lines.len() as u64 > self.max_field_section_size {
            return Err(Error::FieldSectionTooLarge { limit: self.max_field_section_size });
        }
        let q = self.queued.entry(stream_id).or_default();
        if q.sections.len() >= MAX_QUEUED_SECTIONS_PER_STREAM {
            return Err(Error::DecompressionFailed(Reason::TooManyQueuedSections));
        }
        q.sections.push_back(Pending { required_insert_count: ric, base, lines: lines.to_vec() });
        Ok(Decoded::Blocked)
    }

    /// Returns the next field section that became decodable after
    /// encoder-stream data arrived, with its stream ID, decoding it now.
    /// Call until it returns `None` after each [`Decoder::on_encoder_stream`].
    ///
    /// The result is what [`Decoder::decode`] would have returned for the
    /// section had it not been blocked.
    pub fn poll_unblocked(&mut self) -> Option<(u64, Result<Vec<FieldLine>, Error>)> {
        let id = self.ready.pop_front()?;
        let inserted = self.table.insert_count();
        let q = self.queued.get_mut(&id)?;
        let section = q.sections.pop_front()?;
        match q.sections.front() {
            None => {
                self.queued.remove(&id);
            }
            // The next section of the same stream is decodable as well:
            // keep the stream at the head so its sections stay together.
            Some(next) if next.required_insert_count <= inserted => self.ready.push_front(id),
            Some(_) => q.ready = false,
        }
        Some((id, self.decode_now(id, section.required_insert_count, section.base, &section.lines)))
    }

    /// Decodes the representations of a section that is not blocked and
    /// acknowledges it (§2.2.2.1) if it was processed.
    fn decode_now(&mut self, stream_id: u64, ric: u64, base: u64, lines: &[u8]) -> Result<Vec<FieldLine>, Error> {
        let result = self.decode_lines(ric, base, lines);
        let processed = matches!(result, Ok(_) | Err(Error::FieldSectionTooLarge { .. }));
        if ric > 0 && processed {
            // §4.4.1 Section Acknowledgment: 1 StreamID(7+).
            prim::encode_int(stream_id, 7, 0x80, &mut self.decoder_out);
            self.acked_insert_count = self.acked_insert_count.max(ric);
        }
        result
    }

    /// Resolves a dynamic table reference of a field line (§2.2.3): the
    /// entry must be below the Required Insert Count and still in the table.
    fn dynamic_entry(&self, ric: u64, abs: Option<u64>) -> Result<(Bytes, Bytes), Error> {
        abs.filter(|&a| a < ric)
            .and_then(|a| self.table.get(a))
            .cloned()
            .ok_or(Error::DecompressionFailed(Reason::InvalidDynamicIndex))
    }

    /// Decodes field line representations (§4.5.2–§4.5.6).
    fn decode_lines(&self, ric: u64, base: u64, buf: &[u8]) -> Result<Vec<FieldLine>, Error> {
        let limit = self.max_field_section_size;
        let err = |e: PrimError| section_error(e, limit);
        let too_large = Error::FieldSectionTooLarge { limit };
        let relative = |rel: u64| base.checked_sub(1).and_then(|b| b.checked_sub(rel));
        let post_base = |idx: u64| base.checked_add(idx);
        let static_entry = |index: u64| {
            static_table::get(index)
                .map(|(n, v)| (Bytes::from_static(n), Bytes::from_static(v)))
                .ok_or(Error::DecompressionFailed(Reason::InvalidStaticIndex(index)))
        };

        // Literal strings are decoded into one buffer, and the fields take slices of it: one
        // allocation per section, not one per literal (a client without a dynamic table sends
        // most values as literals). Sized once: the literals decode to at most 8/5 of the bytes
        // they take here (Huffman's shortest code is 5 bits), and the section to at most
        // `limit`; grown literal by literal, it was reallocated two or three times a request.
        let most = buf.len().saturating_mul(8) / 5;
        let mut all = Vec::with_capacity(most.min(usize::try_from(limit).unwrap_or(usize::MAX)));
        // Room for a typical request's lines from the start (pushed one by one from empty, it
        // grew twice); each line takes at least one byte of the section.
        let mut parts: Vec<(Part, Part, bool)> = Vec::with_capacity(buf.len().min(8));
        // Size of the fields so far; kept <= limit.
        let mut size: u64 = 0;
        let mut pos = 0;
        while pos < buf.len() {
            let first = buf[pos];
            let rest = &buf[pos..];
            let (name, value, never_indexed, used): (Part, Part, bool, usize);
            if first & 0x80 != 0 {
                // §4.5.2 Indexed Field Line: 1 T Index(6+).
                let (index, n) = prim::decode_int(rest, 6).map_err(err)?;
                let (n_, v) =
                    if first & 0x40 != 0 { static_entry(index)? } else { self.dynamic_entry(ric, relative(index))? };
                (name, value) = (Part::Bytes(n_), Part::Bytes(v));
                never_indexed = false;
                used = n;
            } else if first & 0x40 != 0 || first & 0xf0 == 0x00 {
                // §4.5.4 Literal Field Line with Name Reference:
                //   01 N T NameIndex(4+), Value(8+);
                // §4.5.5 Literal Field Line with Post-Base Name Reference:
                //   0000 N NameIndex(3+), Value(8+).
                let post = first & 0x40 == 0;
                let (index, n) = prim::decode_int(rest, if post { 3 } else { 4 }).map_err(err)?;
                name = Part::Bytes(if post {
                    self.dynamic_entry(ric, post_base(index))?.0
                } else if first & 0x10 != 0 {
                    static_entry(index)?.0
                } else {
                    self.dynamic_entry(ric, relative(index))?.0
                });
                never_indexed = first & if post { 0x08 } else { 0x20 } != 0;
                let budget = (limit - size).checked_sub(ENTRY_OVERHEAD + name.len() as u64).ok_or(too_large.clone())?;
                let (v, end) = prim::decode_string_into(rest, n, 7, budget, &mut all).map_err(err)?;
                (value, used) = (Part::Literal(v), end);
            } else if first & 0x20 != 0 {
                // §4.5.6 Literal Field Line with Literal Name:
                //   001 N H NameLen(3+) Name, Value(8+).
                never_indexed = first & 0x10 != 0;
                let budget = (limit - size).checked_sub(ENTRY_OVERHEAD).ok_or(too_large.clone())?;
                let (n, end) = prim::decode_string_into(rest, 0, 3, budget, &mut all).map_err(err)?;
                let n_len = n.len() as u64;
                let (v, end) = prim::decode_string_into(rest, end, 7, budget - n_len, &mut all).map_err(err)?;
                (name, value, used) = (Part::Literal(n), Part::Literal(v), end);
            } else {
                // §4.5.3 Indexed Field Line with Post-Base Index: 0001 Index(4+).
                let (index, n) = prim::decode_int(rest, 4).map_err(err)?;
                let (n_, v) = self.dynamic_entry(ric, post_base(index))?;
                (name, value) = (Part::Bytes(n_), Part::Bytes(v));
                never_indexed = false;
                used = n;
            }
            size = size.saturating_add(name.len() as u64 + value.len() as u64 + ENTRY_OVERHEAD);
            if size > limit {
                return Err(too_large);
            }
            parts.push((name, value, never_indexed));
            pos += used;
        }
        let all = Bytes::from(all);
        let bytes = |p: Part| match p {
            Part::Bytes(b) => b,
            Part::Literal(r) => all.slice(r),
        };
        Ok(parts
            .into_iter()
            .map(|(n, v, never_indexed)| FieldLine { name: bytes(n), value: bytes(v), never_indexed })
            .collect())
    }

    /// Abandons `stream_id` (reset, or reading stopped; RFC 9204 §2.2.2.2):
    /// drops its queued sections and queues a Stream Cancellation (§4.4.2)
    /// so the peer's encoder can release its references. With a maximum
    /// table capacity of zero the instruction is omitted, as §2.2.2.2
    /// permits.
    pub fn cancel_stream(&mut self, stream_id: u64) {
        if let Some(q) = self.queued.remove(&stream_id) {
            if q.ready {
                self.ready.retain(|&id| id != stream_id);
            }
        }
        if self.max_capacity > 0 {
            // §4.4.2 Stream Cancellation: 01 StreamID(6+).
            prim::encode_int(stream_id, 6, 0x40, &mut self.decoder_out);
        }
    }

    /// Takes the bytes to write on our decoder stream, if any.
    ///
    /// Insert Count Increments (§4.4.3) are produced here, lazily: entries
    /// received since the last call that no Section Acknowledgment already
    /// covered are acknowledged with one increment, after the queued
    /// acknowledgments and cancellations. Call it after every
    /// [`Decoder::on_encoder_stream`], [`Decoder::decode`],
    /// [`Decoder::poll_unblocked`] or [`Decoder::cancel_stream`] batch.
    pub fn poll_decoder_stream(&mut self) -> Option<Vec<u8>> {
        let inserted = self.table.insert_count();
        if inserted > self.acked_insert_count {
            prim::encode_int(inserted - self.acked_insert_count, 6, 0x00, &mut self.decoder_out);
            self.acked_insert_count = inserted;
        }
        (!self.decoder_out.is_empty()).then(|| std::mem::take(&mut self.decoder_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(d: Decoded) -> Vec<(String, String)> {
        match d {
            Decoded::Fields(f) => f
                .into_iter()
                .map(|f| (String::from_utf8(f.name.to_vec()).unwrap(), String::from_utf8(f.value.to_vec()).unwrap()))
                .collect(),
            Decoded::Blocked => panic!("blocked"),
        }
    }

    fn pair(n: &str, v: &str) -> (String, String) {
        (n.to_owned(), v.to_owned())
    }

    #[test]
    fn static_only_section() {
        let mut d = Decoder::new(0, 0, 1000);
        // RIC 0, Base 0, indexed static 17 (:method GET), 23 (:scheme https).
        assert_eq!(
            fields(d.decode(0, &[0, 0, 0xd1, 0xd7]).unwrap()),
            [pair(":method", "GET"), pair(":scheme", "https")]
        );
        assert_eq!(d.poll_decoder_stream(), None);
    }

    #[test]
    fn required_insert_count_wraps_as_in_section_4_5_1_1() {
        // 100-octet table: MaxEntries 3, encoded modulo 6. After 10 inserts,
        // an encoded value of 4 means 9 (the RFC's example).
        let mut d = Decoder::new(100, 0, 1000);
        d.table.dropped = 10;
        assert_eq!(d.required_insert_count(4), Ok(9));
        assert_eq!(d.required_insert_count(0), Ok(0));
        assert_eq!(d.required_insert_count(7), Err(Reason::InvalidRequiredInsertCount));
        // With no inserts, values wrapping below zero are invalid.
        let d = Decoder::new(100, 0, 1000);
        assert_eq!(d.required_insert_count(1), Err(Reason::InvalidRequiredInsertCount));
        assert_eq!(d.required_insert_count(2), Ok(1));
        assert_eq!(d.required_insert_count(4), Ok(3));
        assert_eq!(d.required_insert_count(5), Err(Reason::InvalidRequiredInsertCount));
        // No dynamic table: any non-zero value is invalid.
        let d = Decoder::new(0, 0, 1000);
        assert_eq!(d.required_insert_count(1), Err(Reason::InvalidRequiredInsertCount));
    }

    #[test]
    fn base_sign_rules() {
        let mut d = Decoder::new(4096, 10, 1000);
        d.on_encoder_stream(&[0x3f, 0xe1, 0x1f]).unwrap(); // capacity 4096
        for i in 0..3u8 {
            d.on_encoder_stream(&[0x41, b'a' + i, 0x00]).unwrap();
        }
        // RIC 3 (encoded 4), S=1 Delta 2 => Base 0 — valid.
        assert!(d.parse_prefix(&[4, 0x82]).is_ok());
        // S=1 with Delta >= RIC => negative Base.
        assert_eq!(d.parse_prefix(&[4, 0x83]), Err(Reason::InvalidBase));
        // RIC 0 with S=1 is always invalid.
        assert_eq!(d.parse_prefix(&[0, 0x80]), Err(Reason::InvalidBase));
        assert_eq!(d.parse_prefix(&[4]), Err(Reason::Truncated));
    }

    #[test]
    fn invalid_references_in_sections() {
        let mut d = Decoder::new(4096, 10, 1000);
        d.on_encoder_stream(&[0x3f, 0xe1, 0x1f, 0x41, b'a', 0x01, b'b']).unwrap();
        let code = |r: Result<Decoded, Error>| r.unwrap_err();
        // Static index 99.
        assert_eq!(code(d.decode(0, &[0, 0, 0xff, 0x24])), Error::DecompressionFailed(Reason::InvalidStaticIndex(99)));
        // Dynamic reference with RIC 0.
        assert_eq!(code(d.decode(0, &[0, 0, 0x80])), Error::DecompressionFailed(Reason::InvalidDynamicIndex));
        // RIC 1, Base 1, relative index 1 => absolute -1.
        assert_eq!(code(d.decode(0, &[2, 0, 0x81])), Error::DecompressionFailed(Reason::InvalidDynamicIndex));
        // RIC 1, Base 0, post-base 1 => absolute 1 >= RIC.
        assert_eq!(code(d.decode(0, &[2, 0x80, 0x11])), Error::DecompressionFailed(Reason::InvalidDynamicIndex));
        // Valid: RIC 1, Base 0, post-base 0.
        assert_eq!(fields(d.decode(0, &[2, 0x80, 0x10]).unwrap()), [pair("a", "b")]);
        // Truncated literal.
        assert_eq!(code(d.decode(0, &[0, 0, 0x51, 0x03, b'a'])), Error::DecompressionFailed(Reason::Truncated));
    }

    #[test]
    fn evicted_reference_is_invalid() {
        // Capacity 64 holds one 34-octet entry; the second evicts the first.
        let mut d = Decoder::new(64, 10, 1000);
        d.on_encoder_stream(&[0x3f, 0x21, 0x41, b'a', 0x01, b'b', 0x41, b'c', 0x01, b'd']).unwrap();
        assert_eq!(d.insert_count(), 2);
        // MaxEntries 2: RIC 1 => encoded 2, Base 1, relative 0 => absolute 0 (evicted).
        assert_eq!(d.decode(0, &[2, 0, 0x80]), Err(Error::DecompressionFailed(Reason::InvalidDynamicIndex)));
        // Absolute 1 is fine.
        assert_eq!(fields(d.decode(0, &[3, 0, 0x80]).unwrap()), [pair("c", "d")]);
    }

    #[test]
    fn encoder_stream_errors() {
        let mut d = Decoder::new(100, 0, 1000);
        // Capacity above our advertised 100.
        assert_eq!(
            d.on_encoder_stream(&[0x3f, 0x46]),
            Err(Error::EncoderStream(Reason::CapacityExceedsLimit { requested: 101, max: 100 }))
        );
        // Insert while the capacity is still 0 (§3.2.2: initial capacity is zero).
        let mut d = Decoder::new(100, 0, 1000);
        assert_eq!(
            d.on_encoder_stream(&[0xc0, 0x00]),
            Err(Error::EncoderStream(Reason::EntryTooLarge { size: 42, capacity: 0 }))
        );
        // Invalid static index 99 and dynamic references to nothing.
        let mut d = Decoder::new(100, 0, 1000);
        d.on_encoder_stream(&[0x3f, 0x45]).unwrap();
        assert_eq!(d.on_encoder_stream(&[0xff, 0x24, 0x00]), Err(Error::EncoderStream(Reason::InvalidStaticIndex(99))));
        let mut d = Decoder::new(100, 0, 1000);
        d.on_encoder_stream(&[0x3f, 0x45]).unwrap();
        assert_eq!(d.on_encoder_stream(&[0x80, 0x00]), Err(Error::EncoderStream(Reason::InvalidDynamicIndex)));
        assert_eq!(d.on_encoder_stream(&[0x00]), Err(Error::EncoderStream(Reason::InvalidDynamicIndex)));
        // Strings longer than any entry could be are refused before their data.
        let mut d = Decoder::new(100, 0, 1000);
        assert_eq!(d.on_encoder_stream(&[0x5f, 0x7f]), Err(Error::EncoderStream(Reason::StringTooLong)));
        // Integer overflow.
        let mut d = Decoder::new(100, 0, 1000);
        let mut bad = vec![0x3f];
        bad.extend([0xff; 12]);
        assert_eq!(d.on_encoder_stream(&bad), Err(Error::EncoderStream(Reason::IntegerOverflow)));
    }

    #[test]
    fn encoder_stream_byte_by_byte() {
        let mut d = Decoder::new(4096, 0, 1000);
        let mut stream = vec![0x3f, 0xe1, 0x1f];
        prim::encode_string(b"x-name", 5, 0x40, true, &mut stream);
        prim::encode_string(b"some value, huffman coded", 7, 0, true, &mut stream);
        stream.extend([0x00]); // duplicate
        for &b in &stream {
            d.on_encoder_stream(&[b]).unwrap();
        }
        assert_eq!(d.insert_count(), 2);
        assert!(d.encoder_in.is_empty());
        assert_eq!(d.table_size(), 2 * (6 + 25 + 32));
        // One Insert Count Increment of 2.
        assert_eq!(d.poll_decoder_stream(), Some(vec![0x02]));
        assert_eq!(d.poll_decoder_stream(), None);
    }

    #[test]
    fn capacity_reduction_evicts() {
        let mut d = Decoder::new(200, 0, 1000);
        d.on_encoder_stream(&[0x3f, 0xa9, 0x01]).unwrap(); // 200
        d.on_encoder_stream(&[0x41, b'a', 0x01, b'b', 0x41, b'c', 0x01, b'd']).unwrap();
        assert_eq!(d.table_size(), 68);
        d.on_encoder_stream(&[0x3f, 0x16]).unwrap(); // 53: only one fits
        assert_eq!(d.table_size(), 34);
        assert_eq!(d.table.get(0), None);
        assert!(d.table.get(1).is_some());
    }

    #[test]
    fn blocked_sections_are_bounded_and_released() {
        let mut d = Decoder::new(4096, 2, 1000);
        d.on_encoder_stream(&[0x3f, 0xe1, 0x1f]).unwrap();
        // RIC 1 (encoded 2), Base 1, relative 0.
        let section = [2, 0, 0x80];
        assert_eq!(d.decode(4, &section), Ok(Decoded::Blocked));
        assert_eq!(d.decode(8, &section), Ok(Decoded::Blocked));
        // A second section on a blocked stream queues without counting.
        assert_eq!(d.decode(8, &[0, 0, 0xd1]), Ok(Decoded::Blocked));
        assert_eq!(d.blocked_streams(), 2);
        assert_eq!(d.decode(12, &section), Err(Error::DecompressionFailed(Reason::TooManyBlockedStreams)));
        // Cancel 4; its cancellation is queued.
        d.cancel_stream(4);
        assert_eq!(d.poll_decoder_stream(), Some(vec![0x44]));
        assert_eq!(d.poll_unblocked(), None);
        // The insert unblocks stream 8; both of its sections come out, in order.
        d.on_encoder_stream(&[0x41, b'a', 0x01, b'b']).unwrap();
        assert_eq!(d.blocked_streams(), 0);
        let (id, first) = d.poll_unblocked().unwrap();
        assert_eq!((id, first.unwrap()), (8, vec![FieldLine::new("a", "b")]));
        let (id, second) = d.poll_unblocked().unwrap();
        assert_eq!((id, second.unwrap()), (8, vec![FieldLine::new(":method", "GET")]));
        assert_eq!(d.poll_unblocked(), None);
        // Section Acknowledgment for stream 8 only; it covers the insert.
        assert_eq!(d.poll_decoder_stream(), Some(vec![0x88]));
    }

    #[test]
    fn zero_blocked_streams_allowed() {
        let mut d = Decoder::new(4096, 0, 1000);
        assert_eq!(d.decode(0, &[2, 0, 0x80]), Err(Error::DecompressionFailed(Reason::TooManyBlockedStreams)));
    }

    #[test]
    fn field_section_size_limit() {
        // Two fields of 32 + 5 + 4 = 41 octets each.
        let mut section = vec![0, 0];
        for _ in 0..2 {
            prim::encode_string(b"x-abc", 3, 0x20, false, &mut section);
            prim::encode_string(b"1234", 7, 0, false, &mut section);
        }
        let mut d = Decoder::new(0, 0, 82);
        assert_eq!(fields(d.decode(0, &section).unwrap()).len(), 2);
        let mut d = Decoder::new(0, 0, 81);
        assert_eq!(d.decode(0, &section), Err(Error::FieldSectionTooLarge { limit: 81 }));
        // A single huge literal is refused from its length.
        let mut d = Decoder::new(0, 0, 100);
        let mut section = vec![0, 0, 0x51];
        prim::encode_int(1 << 40, 7, 0, &mut section);
        assert_eq!(d.decode(0, &section), Err(Error::FieldSectionTooLarge { limit: 100 }));
    }

    #[test]
    fn too_large_section_is_still_acknowledged() {
        let mut d = Decoder::new(4096, 0, 40);
        d.on_encoder_stream(&[0x3f, 0xe1, 0x1f, 0x41, b'a', 0x01, b'b']).unwrap();
        assert_eq!(d.poll_decoder_stream(), Some(vec![0x01]));
        // RIC 1, Base 1: indexed relative 0 twice => 68 > 40.
        assert_eq!(d.decode(4, &[2, 0, 0x80, 0x80]), Err(Error::FieldSectionTooLarge { limit: 40 }));
        assert_eq!(d.poll_decoder_stream(), Some(vec![0x84]));
    }

    #[test]
    fn never_indexed_flag_is_reported() {
        let mut d = Decoder::new(0, 0, 1000);
        // Literal with static name ref 5 (cookie), N=1: 0111 0101.
        let mut section = vec![0, 0, 0x75];
        prim::encode_string(b"secret", 7, 0, false, &mut section);
        prim::encode_string(b"x-secret", 3, 0x30, false, &mut section);
        prim::encode_string(b"v", 7, 0, false, &mut section);
        let Decoded::Fields(f) = d.decode(0, &section).unwrap() else { panic!() };
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.never_indexed));
        assert_eq!(&f[0].name[..], b"cookie");
    }
}
