//! The link model, sans-IO: packets and the current time in, packets with their delivery time
//! out. One [`Direction`] per way; the forwarder owns two.

use std::time::{Duration, Instant};

/// How a queue is bounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Queue {
    /// At most this many packets waiting for the link.
    Packets(usize),
    /// At most this many bytes waiting for the link.
    Bytes(usize),
}

/// One direction of the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirSpec {
    /// Rate in Mbit/s (10^6 bits per second).
    pub rate_mbit: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Drop-tail queue in front of the serialiser.
    pub queue: Queue,
    /// Random loss, percent of packets (0–100).
    pub loss_pct: f64,
}

/// Both directions: `up` is client → server, `down` server → client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Client → server.
    pub up: DirSpec,
    /// Server → client.
    pub down: DirSpec,
}

// The helper writing this module fills in `Direction` (the per-direction state machine:
// `handle_packet(now, len) -> Verdict`, `poll_timeout`, deterministic loss from a seeded RNG)
// and its tests.
#[allow(dead_code)]
fn _placeholder(_: Instant) {}
