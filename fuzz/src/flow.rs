//! A model of what an HTTP/2 peer allows us to send, built from the frames it sends (RFC 9113
//! §6.5.2, §6.9): its SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE and
//! SETTINGS_HEADER_TABLE_SIZE and its WINDOW_UPDATEs. An engine's DATA must stay within the
//! windows, every frame within the frame size, and every header block must decode with the
//! peer's HPACK decoder (its table bound by what it advertised), whatever the peer sent.

use std::collections::{HashMap, VecDeque};

use sluice_h2::frame::{flag, kind, Head};
use sluice_hpack::Decoder;

/// RFC 9113 §6.9.2: 65,535 until SETTINGS say otherwise.
const DEFAULT_WINDOW: i64 = 65_535;
/// RFC 9113 §4.2: 16,384 until SETTINGS say otherwise.
const DEFAULT_MAX_FRAME: usize = 16_384;

/// What the peer allows, from its frames.
#[derive(Debug)]
pub struct PeerWindows {
    /// Peer bytes not yet a whole frame.
    buf: Vec<u8>,
    initial: i64,
    max_frame: usize,
    /// Connection window: 65,535 plus increments.
    granted: i64,
    /// Per stream: increments.
    stream_granted: HashMap<u32, i64>,
    /// Per stream and for the connection: DATA bytes we sent.
    stream_sent: HashMap<u32, i64>,
    sent: i64,
    /// The peer's HPACK decoder, fed our header blocks.
    decoder: Decoder,
    /// Per SETTINGS of the peer not acknowledged yet, its last SETTINGS_HEADER_TABLE_SIZE: the
    /// peer's decoder holds to the old limit until our ACK reaches it (RFC 9113 §6.5.3), and
    /// blocks we queued before the ACK use the old table.
    unacked_tables: VecDeque<Option<u32>>,
    /// A header block of ours being collected (HEADERS, CONTINUATION).
    block: Vec<u8>,
    /// The peer's frames no longer parse as the engine would (a frame beyond the maximum size
    /// is a connection error there): stop modelling.
    lost: bool,
}

impl Default for PeerWindows {
    fn default() -> Self {
        Self {
            buf: Vec::new(),
            initial: DEFAULT_WINDOW,
            max_frame: DEFAULT_MAX_FRAME,
            granted: DEFAULT_WINDOW,
            stream_granted: HashMap::new(),
            stream_sent: HashMap::new(),
            sent: 0,
            // RFC 7541 §4.2: 4,096 until the peer advertises otherwise.
            decoder: Decoder::new(4096),
            unacked_tables: VecDeque::new(),
            block: Vec::new(),
            lost: false,
        }
    }
}

impl PeerWindows {
    /// Bytes the peer sent (after the connection preface, for a server).
    pub fn peer(&mut self, data: &[u8]) {
        if self.lost {
            return;
        }
        self.buf.extend_from_slice(data);
        let mut used = 0;
        while let Some(head) = Head::parse(&self.buf[used..]) {
            // Our engines accept frames up to their own (default) SETTINGS_MAX_FRAME_SIZE.
            if head.len as usize > DEFAULT_MAX_FRAME {
                self.lost = true;
                return;
            }
            let total = 9 + head.len as usize;
            let Some(payload) = self.buf.get(used + 9..used + total) else { break };
            match head.kind {
                kind::SETTINGS if head.flags & 1 == 0 => {
                    let mut table = None;
                    for s in payload.chunks_exact(6) {
                        let id = u16::from_be_bytes([s[0], s[1]]);
                        let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                        match id {
                            0x1 => table = Some(v),
                            0x4 => self.initial = i64::from(v),
                            0x5 if (16_384..=16_777_215).contains(&v) => self.max_frame = v as usize,
                            _ => {}
                        }
                    }
                    self.unacked_tables.push_back(table);
                }
                kind::WINDOW_UPDATE if payload.len() == 4 => {
                    let inc =
                        i64::from(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff);
                    if head.stream == 0 {
                        self.granted += inc;
                    } else {
                        *self.stream_granted.entry(head.stream).or_default() += inc;
                    }
                }
                _ => {}
            }
            used += total;
        }
        self.buf.drain(..used);
    }

    /// Frames we wrote in one transmit, after every peer byte so far was processed: each
    /// within the peer's frame size, DATA within the windows as they stood.
    pub fn ours(&mut self, mut out: &[u8]) {
        let conn_room = (self.granted - self.sent).max(0);
        let mut per_stream: HashMap<u32, i64> = HashMap::new();
        while let Some(head) = Head::parse(out) {
            let total = 9 + head.len as usize;
            if !self.lost {
                assert!(
                    head.len as usize <= self.max_frame,
                    "a {}-byte frame beyond the peer's {}",
                    head.len,
                    self.max_frame
                );
            }
            let payload = out.get(9..total).unwrap_or_default();
            match head.kind {
                kind::DATA => *per_stream.entry(head.stream).or_default() += i64::from(head.len),
                kind::SETTINGS if head.flags & flag::ACK != 0 => {
                    if let Some(Some(v)) = self.unacked_tables.pop_front() {
                        self.decoder.set_max_table_size(v as usize);
                    }
                }
                kind::HEADERS | kind::CONTINUATION => {
                    assert!(head.flags & (flag::PADDED | flag::PRIORITY) == 0 || head.kind != kind::HEADERS);
                    self.block.extend_from_slice(payload);
                    if head.flags & flag::END_HEADERS != 0 {
                        let block = std::mem::take(&mut self.block);
                        if !self.lost {
                            let r = self.decoder.decode(&block, usize::MAX, &mut |_, _, _| {});
                            assert!(r.is_ok(), "our header block does not decode at the peer: {r:?}");
                        }
                    }
                }
                _ => {}
            }
            out = &out[total.min(out.len())..];
        }
        let total: i64 = per_stream.values().sum();
        if !self.lost {
            assert!(total <= conn_room, "{total} DATA bytes with {conn_room} of connection window");
        }
        for (id, n) in per_stream {
            let granted = self.initial + self.stream_granted.get(&id).copied().unwrap_or(0);
            let sent = self.stream_sent.entry(id).or_default();
            if !self.lost {
                let room = (granted - *sent).max(0);
                assert!(n <= room, "stream {id}: {n} DATA bytes with {room} of window");
            }
            *sent += n;
        }
        self.sent += total;
    }
}
