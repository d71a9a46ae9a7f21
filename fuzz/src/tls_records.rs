//! The TLS 1.3 record layer's opening side (`sluice_tls::records::Records::open`) against
//! records a real rustls client seals, and whatever else arrives.
//!
//! Each input starts with a real in-memory handshake (the suite a knob byte picks), then runs
//! operations: the client seals data, key updates and close_notify (valid records); raw bytes,
//! flipped bits, truncations and oversized headers make the wire anything else; delivery
//! hands the server the wire in pieces of any size; the server seals data and key updates
//! back, which the client must read exactly.
//!
//! Invariants beyond "no panic": what the server opens is always a prefix of what the client
//! sealed (nobody else can make a record that opens); while the wire is untouched every record
//! opens, in order, and close_notify is reported where the client sent it; a fatal error names
//! an alert unless the peer sent one, and the connection is done after it; the client reads
//! exactly what the server sealed, across key updates.

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use sluice_tls::records::{Opened, Records, KEY_UPDATE_RECORD, MAX_FRAGMENT, OVERHEAD};
use sluice_tls::testing;

use crate::seed::{variant, Seed};
use crate::Chunk;

/// One step.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The client seals application data.
    ClientData(Chunk),
    /// The client updates its keys and asks for ours (as rustls does).
    ClientKeyUpdate,
    /// The client sends close_notify.
    ClientClose,
    /// Bytes appended to the wire as they are.
    Raw(Chunk),
    /// A bit of the wire not yet delivered flipped: (offset, bit).
    Flip(u16, u8),
    /// The last bytes of the wire not yet delivered dropped.
    Truncate(u16),
    /// A record header announcing more than the largest record, then filler.
    Oversize(u16),
    /// The next bytes of the wire delivered to the server (0: all of it).
    Deliver(u16),
    /// The server seals data (the client must read it back).
    ServerData(Chunk),
    /// The server updates its keys.
    ServerKeyUpdate,
}

/// A whole input.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The TLS 1.3 suite (by index).
    pub suite: u8,
    /// The steps.
    pub ops: Vec<Op>,
}

/// Configurations per suite, made once (a certificate is generated for each).
fn configs(i: usize) -> &'static (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    static CONFIGS: OnceLock<Vec<(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>)>> = OnceLock::new();
    let all = CONFIGS.get_or_init(|| {
        use rustls::crypto::ring::cipher_suite as cs;
        [cs::TLS13_AES_128_GCM_SHA256, cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_CHACHA20_POLY1305_SHA256]
            .into_iter()
            .map(|s| testing::configs(&[s]))
            .collect()
    });
    &all[i % all.len()]
}

/// The server's side of the run.
struct Server {
    records: Records,
    /// Received bytes not yet opened.
    held: Vec<u8>,
    /// Plaintext opened so far.
    plain: Vec<u8>,
    closed: bool,
    failed: bool,
}

impl Server {
    /// Open what `held` starts with; checks the invariants against what the client sent.
    fn open(&mut self, sent: &[u8], clean: bool, closes_at: Option<usize>) {
        while !self.failed && !self.closed {
            let held = self.held.len();
            match self.records.open(&mut self.held) {
                Ok(None) => break,
                Ok(Some((n, opened))) => {
                    assert!(n <= held, "consumed more than held");
                    match opened {
                        Opened::Data(d) => {
                            assert!(d.len() <= MAX_FRAGMENT, "a record's plaintext over 2^14");
                            self.plain.extend_from_slice(d);
                            assert!(sent.starts_with(&self.plain), "opened bytes the client did not send");
                        }
                        Opened::Closed => {
                            self.closed = true;
                            if clean {
                                assert_eq!(Some(self.plain.len()), closes_at, "close_notify out of place");
                            }
                        }
                        Opened::Nothing => {}
                    }
                    self.held.drain(..n);
                }
                Err(fatal) => {
                    assert!(!clean, "an untouched record refused: {:?}", fatal.error);
                    if fatal.alert.is_none() {
                        assert!(
                            matches!(fatal.error, rustls::Error::AlertReceived(_)),
                            "no alert to send for {:?}",
                            fatal.error
                        );
                    }
                    self.failed = true;
                }
            }
        }
    }
}

/// Run one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else { return };
    let (server_cfg, client_cfg) = configs(usize::from(input.suite));
    let testing::Pair { server: records, mut client } = testing::handshake(server_cfg, client_cfg).expect("handshake");
    let mut server = Server { records, held: Vec::new(), plain: Vec::new(), closed: false, failed: false };
    // The wire from the client not yet delivered, what the client sealed, whether the wire is
    // still exactly what the client sealed, and where its close_notify came.
    let mut wire: Vec<u8> = Vec::new();
    let mut sent: Vec<u8> = Vec::new();
    let mut clean = true;
    let mut closes_at: Option<usize> = None;
    let mut client_closed = false;
    let mut client_updates = 0u32;
    // Our key updates since our last data: rustls's client, like us, allows only so many in a
    // row (a TLS stream never sends more than one before a record of data).
    let mut server_updates = 0u32;
    for op in input.ops.into_iter().take(256) {
        match op {
            Op::ClientData(c) if !client_closed => {
                wire.extend_from_slice(&testing::client_data(&mut client, &c.0));
                sent.extend_from_slice(&c.0);
            }
            // At most 16 in all: under the 32 in a row the server allows, so an untouched wire
            // stays valid whatever comes between.
            Op::ClientKeyUpdate if !client_closed && client_updates < 16 => {
                client.refresh_traffic_keys().expect("a TLS 1.3 connection");
                wire.extend_from_slice(&testing::drain(&mut client));
                client_updates += 1;
            }
            Op::ClientClose if !client_closed => {
                client.send_close_notify();
                wire.extend_from_slice(&testing::drain(&mut client));
                client_closed = true;
                closes_at = Some(sent.len());
            }
            Op::Raw(c) if !c.0.is_empty() => {
                wire.extend_from_slice(&c.0);
                clean = false;
            }
            Op::Flip(at, bit) if !wire.is_empty() => {
                let at = usize::from(at) % wire.len();
                wire[at] ^= 1 << (bit % 8);
                clean = false;
            }
            Op::Truncate(n) if n > 0 && !wire.is_empty() => {
                let keep = wire.len().saturating_sub(usize::from(n));
                wire.truncate(keep);
                clean = false;
            }
            Op::Oversize(n) => {
                let len = 16 * 1024 + 257 + usize::from(n) % 1024;
                wire.extend_from_slice(&[23, 3, 3, (len >> 8) as u8, len as u8]);
                wire.resize(wire.len() + usize::from(n) % 64, 0);
                clean = false;
            }
            Op::Deliver(n) => {
                let n = if n == 0 { wire.len() } else { usize::from(n).min(wire.len()) };
                server.held.extend(wire.drain(..n));
                server.open(&sent, clean, closes_at);
            }
            Op::ServerData(c) => {
                let data = &c.0;
                if !data.is_empty() {
                    server_updates = 0;
                }
                let mut out = Vec::new();
                for piece in data.chunks(MAX_FRAGMENT) {
                    let mut room = vec![0u8; piece.len() + OVERHEAD + KEY_UPDATE_RECORD];
                    let mut at = 0;
                    if server.records.key_update_due() {
                        at += server.records.seal_key_update(&mut room).expect("room for a key update");
                    }
                    at += server
                        .records
                        .seal_data_with(piece.len(), |d| d.copy_from_slice(piece), &mut room[at..])
                        .expect("room for the record");
                    out.extend_from_slice(&room[..at]);
                }
                let got = testing::client_reads(&mut client, &out).expect("the client opens what we seal");
                assert_eq!(&got, data, "the client read other bytes than we sealed");
            }
            Op::ServerKeyUpdate if server_updates < 16 => {
                server_updates += 1;
                let mut room = vec![0u8; KEY_UPDATE_RECORD];
                let n = server.records.seal_key_update(&mut room).expect("room for a key update");
                let got = testing::client_reads(&mut client, &room[..n]).expect("the client follows our key update");
                assert!(got.is_empty());
            }
            _ => {}
        }
    }
    // Everything left goes in; an untouched wire opens whole.
    server.held.append(&mut wire);
    server.open(&sent, clean, closes_at);
    if clean && !server.failed {
        assert_eq!(server.plain, sent, "an untouched wire did not open whole");
        assert!(server.held.is_empty() || server.closed, "a whole record left unopened");
    }
}

impl Seed for Op {
    fn seed(&self, out: &mut Vec<u8>) {
        const N: u32 = 10;
        match self {
            Self::ClientData(c) => {
                variant(0, N, out);
                c.seed(out);
            }
            Self::ClientKeyUpdate => variant(1, N, out),
            Self::ClientClose => variant(2, N, out),
            Self::Raw(c) => {
                variant(3, N, out);
                c.seed(out);
            }
            Self::Flip(at, bit) => {
                variant(4, N, out);
                at.seed(out);
                bit.seed(out);
            }
            Self::Truncate(n) => {
                variant(5, N, out);
                n.seed(out);
            }
            Self::Oversize(n) => {
                variant(6, N, out);
                n.seed(out);
            }
            Self::Deliver(n) => {
                variant(7, N, out);
                n.seed(out);
            }
            Self::ServerData(c) => {
                variant(8, N, out);
                c.seed(out);
            }
            Self::ServerKeyUpdate => variant(9, N, out),
        }
    }
}

impl Seed for Input {
    fn seed(&self, out: &mut Vec<u8>) {
        self.suite.seed(out);
        self.ops.seed(out);
    }
}
