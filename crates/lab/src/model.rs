//! The link model, sans-IO: packets and the current time in, packets with their delivery time
//! out. One [`Direction`] per way; the forwarder owns two.
//!
//! A packet entering a direction goes through, in order:
//!
//! 1. random loss (a seeded generator, so a run is reproducible for a given packet sequence);
//! 2. the drop-tail queue: the packets waiting for the serialiser (those whose serialisation has
//!    not started yet at `now`); a packet that would exceed the bound is dropped;
//! 3. serialisation at the rate: it starts when the link is free (`max(now, link_free_at)`) and
//!    takes `len * 8 / rate`;
//! 4. the fixed one-way delay: delivery at the end of serialisation plus the delay.
//!
//! Packets are delivered in the order they arrived, even across a change of parameters.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How a queue is bounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Queue {
    /// At most this many packets waiting for the link.
    Packets(usize),
    /// At most this many bytes waiting for the link.
    Bytes(usize),
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Packets(n) => write!(f, "{n}p"),
            Self::Bytes(b) if b >= 1_000_000 && b % 1000 == 0 => write!(f, "{}MB", b as f64 / 1e6),
            Self::Bytes(b) if b >= 1000 && b % 1000 == 0 => write!(f, "{}KB", b / 1000),
            Self::Bytes(b) => write!(f, "{b}B"),
        }
    }
}

impl std::str::FromStr for Queue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_queue(s)
    }
}

/// Parses a queue bound: `1000p` (packets), or bytes with a unit: `1.5MB`, `64KB`, `1500B`
/// (decimal: KB = 1000 B, MB = 10^6 B) or `64KiB`, `1MiB` (binary). Case-insensitive.
pub fn parse_queue(s: &str) -> Result<Queue, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let bad = || format!("bad queue {s:?}: expected e.g. 1000p (packets), 1.5MB, 64KB, 64KiB or 1500B (bytes)");
    if num.is_empty() {
        return Err(bad());
    }
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit.trim() {
        "p" | "pkt" | "pkts" | "packets" => {
            if num.contains('.') {
                return Err(format!("bad queue {s:?}: a packet count is a whole number"));
            }
            return num.parse::<usize>().map(Queue::Packets).map_err(|_| bad());
        }
        "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "" => return Err(format!("bad queue {s:?}: give a unit, e.g. 1000p (packets) or 1.5MB (bytes)")),
        _ => return Err(bad()),
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes > 1e12 {
        return Err(format!("bad queue {s:?}: too large"));
    }
    Ok(Queue::Bytes(bytes.round() as usize))
}

/// One direction of the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirSpec {
    /// Rate in Mbit/s (10^6 bits per second of IP packets); 0 means unlimited.
    pub rate_mbit: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Drop-tail queue in front of the serialiser.
    pub queue: Queue,
    /// Random loss, percent of packets (0–100).
    pub loss_pct: f64,
}

impl DirSpec {
    /// The default queue for a direction at `rate_mbit` on a path with round-trip time `rtt`:
    /// 1.5 × the bandwidth-delay product in bytes (enough for Cubic to keep the link busy after
    /// a loss, not so much that it turns into a standing delay many times the RTT), at least
    /// 20 full-size packets of 1500 bytes. Unlimited rate: 1000 packets (never used).
    pub fn default_queue(rate_mbit: f64, rtt: Duration) -> Queue {
        if !(rate_mbit.is_finite() && rate_mbit > 0.0) {
            return Queue::Packets(1000);
        }
        let bdp = rate_mbit * 1e6 / 8.0 * rtt.as_secs_f64();
        Queue::Bytes(((1.5 * bdp).round() as usize).max(20 * 1500))
    }
}

/// Both directions: `up` is client → server, `down` server → client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Client → server.
    pub up: DirSpec,
    /// Server → client.
    pub down: DirSpec,
}

impl LinkSpec {
    /// The same rate and one-way delay both ways (RTT = 2 × `one_way_delay`), no loss, and the
    /// default queue ([`DirSpec::default_queue`]).
    pub fn symmetric(rate_mbit: f64, one_way_delay: Duration) -> Self {
        let dir = DirSpec {
            rate_mbit,
            delay: one_way_delay,
            queue: DirSpec::default_queue(rate_mbit, one_way_delay * 2),
            loss_pct: 0.0,
        };
        Self { up: dir, down: dir }
    }

    /// Checks that the numbers make sense: a rate of 0 (unlimited) or at least 1 kbit/s, a
    /// loss within 0–100 %, a delay of at most a minute.
    pub fn validate(&self) -> Result<(), String> {
        for (name, d) in [("up", &self.up), ("down", &self.down)] {
            if !(d.rate_mbit == 0.0 || (d.rate_mbit >= 0.001 && d.rate_mbit.is_finite())) {
                return Err(format!("{name}: rate must be 0 (unlimited) or ≥ 0.001 Mbit/s, got {}", d.rate_mbit));
            }
            if !(0.0..=100.0).contains(&d.loss_pct) {
                return Err(format!("{name}: loss must be within 0–100 %, got {}", d.loss_pct));
            }
            if d.delay > Duration::from_secs(60) {
                return Err(format!("{name}: delay {:?} is more than a minute", d.delay));
            }
        }
        Ok(())
    }
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Random loss.
    Loss,
    /// The queue in front of the serialiser was full.
    Queue,
}

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Dropped.
    Drop(Reason),
    /// Delivered to the other side at this time.
    Deliver(Instant),
}

/// Bound on a serialisation time or a delay (parameters are validated well below it; this
/// only keeps time arithmetic from overflowing).
const MAX_TIME: Duration = Duration::from_secs(3600);

/// A small deterministic generator (SplitMix64), good enough for loss decisions.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// One way of the link: the state machine that decides each packet's fate.
#[derive(Clone, Debug)]
pub struct Direction {
    spec: DirSpec,
    rng: SplitMix64,
    /// When the serialiser is free again (end of the last accepted packet's serialisation).
    link_free_at: Option<Instant>,
    /// Packets accepted whose serialisation starts in the future: (start, len), in order.
    waiting: VecDeque<(Instant, usize)>,
    waiting_bytes: usize,
    /// Delivery time of the last accepted packet (deliveries never go backwards).
    last_delivery: Option<Instant>,
}

impl Direction {
    /// A direction with these parameters; `seed` drives the random loss.
    pub fn new(spec: DirSpec, seed: u64) -> Self {
        Self {
            spec,
            rng: SplitMix64(seed),
            link_free_at: None,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            last_delivery: None,
        }
    }

    /// The current parameters.
    pub fn spec(&self) -> &DirSpec {
        &self.spec
    }

    /// Changes the parameters; packets already accepted keep their delivery times, and later
    /// packets are never delivered before them.
    pub fn set_spec(&mut self, spec: DirSpec) {
        self.spec = spec;
    }

    /// Packets and bytes waiting for the serialiser at `now`.
    pub fn backlog(&mut self, now: Instant) -> (usize, usize) {
        self.expire(now);
        (self.waiting.len(), self.waiting_bytes)
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(start, len)) = self.waiting.front() {
            if start > now {
                break;
            }
            self.waiting.pop_front();
            self.waiting_bytes -= len;
        }
    }

    /// Decides the fate of a packet of `len` bytes arriving at `now`. `now` should not go
    /// backwards between calls (if it does, it is treated as the latest time seen).
    pub fn handle_packet(&mut self, now: Instant, len: usize) -> Verdict {
        // 1. Random loss.
        if self.spec.loss_pct > 0.0 && self.rng.next_f64() * 100.0 < self.spec.loss_pct {
            return Verdict::Drop(Reason::Loss);
        }
        // 2. Drop-tail queue: only packets that have to wait for the serialiser count.
        self.expire(now);
        let start = match self.link_free_at {
            Some(free) if free > now => free,
            _ => now,
        };
        if start > now {
            let full = match self.spec.queue {
                Queue::Packets(n) => self.waiting.len() >= n,
                Queue::Bytes(b) => self.waiting_bytes + len > b,
            };
            if full {
                return Verdict::Drop(Reason::Queue);
            }
            self.waiting.push_back((start, len));
            self.waiting_bytes += len;
        }
        // 3. Serialisation at the rate.
        let rate = self.spec.rate_mbit;
        let end = if rate.is_finite() && rate > 0.0 {
            let secs = len as f64 * 8.0 / (rate * 1e6);
            start + Duration::try_from_secs_f64(secs).unwrap_or(MAX_TIME).min(MAX_TIME)
        } else {
            start
        };
        self.link_free_at = Some(end);
        // 4. Fixed delay, in order.
        let mut at = end + self.spec.delay.min(MAX_TIME);
        if let Some(last) = self.last_delivery {
            at = at.max(last);
        }
        self.last_delivery = Some(at);
        Verdict::Deliver(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rate_mbit: f64, delay_ms: u64, queue: Queue, loss_pct: f64) -> DirSpec {
        DirSpec { rate_mbit, delay: Duration::from_millis(delay_ms), queue, loss_pct }
    }

    fn deliver(v: Verdict) -> Instant {
        match v {
            Verdict::Deliver(at) => at,
            Verdict::Drop(r) => panic!("dropped: {r:?}"),
        }
    }

    #[test]
    fn rate_1000_packets_of_1500_bytes_at_12_mbit_take_one_second() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(12.0, 0, Queue::Packets(10_000), 0.0), 1);
        let mut last = t0;
        for i in 0..1000 {
            let at = deliver(d.handle_packet(t0, 1500));
            if i == 0 {
                assert_eq!(at - t0, Duration::from_millis(1));
            }
            last = at;
        }
        let took = last - t0;
        assert!((took.as_secs_f64() - 1.0).abs() < 1e-6, "took {took:?}");
    }

    #[test]
    fn paced_arrivals_below_the_rate_never_queue() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(12.0, 5, Queue::Packets(0), 0.0), 1);
        for i in 0..100u32 {
            // One packet of 1500 B every 2 ms at 12 Mbit/s (1 ms to serialise).
            let now = t0 + Duration::from_millis(2) * i;
            let at = deliver(d.handle_packet(now, 1500));
            assert_eq!(at - now, Duration::from_millis(6));
        }
    }

    #[test]
    fn delay_is_added_after_serialisation() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(0.0, 20, Queue::Packets(10), 0.0), 1);
        assert_eq!(deliver(d.handle_packet(t0, 1500)) - t0, Duration::from_millis(20));
        let t1 = t0 + Duration::from_millis(3);
        assert_eq!(deliver(d.handle_packet(t1, 1500)) - t1, Duration::from_millis(20));
        let mut d = Direction::new(spec(1.2, 20, Queue::Packets(10), 0.0), 1);
        // 1500 B at 1.2 Mbit/s = 10 ms.
        assert_eq!(deliver(d.handle_packet(t0, 1500)) - t0, Duration::from_millis(30));
        assert_eq!(deliver(d.handle_packet(t0, 1500)) - t0, Duration::from_millis(40));
    }

    #[test]
    fn packet_queue_drops_at_the_limit() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(12.0, 10, Queue::Packets(3), 0.0), 1);
        // The first is serialised at once, 3 wait, the 5th is dropped.
        for _ in 0..4 {
            deliver(d.handle_packet(t0, 1500));
        }
        assert_eq!(d.handle_packet(t0, 1500), Verdict::Drop(Reason::Queue));
        assert_eq!(d.backlog(t0), (3, 4500));
        // After 1 ms the first waiting one is on the wire: room for one more.
        let t1 = t0 + Duration::from_millis(1);
        let at = deliver(d.handle_packet(t1, 1500));
        assert_eq!(at - t0, Duration::from_millis(5 + 10));
        assert_eq!(d.handle_packet(t1, 1500), Verdict::Drop(Reason::Queue));
        // Once everything is serialised the queue is empty and a packet goes straight out.
        let t2 = t0 + Duration::from_millis(5);
        assert_eq!(d.backlog(t2), (0, 0));
        assert_eq!(deliver(d.handle_packet(t2, 1500)) - t2, Duration::from_millis(11));
    }

    #[test]
    fn byte_queue_drops_at_the_limit() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(12.0, 0, Queue::Bytes(3000), 0.0), 1);
        deliver(d.handle_packet(t0, 1500)); // on the wire
        deliver(d.handle_packet(t0, 1500)); // 1500 waiting
        deliver(d.handle_packet(t0, 1000)); // 2500 waiting
        assert_eq!(d.handle_packet(t0, 600), Verdict::Drop(Reason::Queue));
        deliver(d.handle_packet(t0, 500)); // exactly 3000 waiting
        assert_eq!(d.handle_packet(t0, 1), Verdict::Drop(Reason::Queue));
        assert_eq!(d.backlog(t0), (3, 3000));
    }

    #[test]
    fn loss_matches_the_percentage_with_a_fixed_seed() {
        let t0 = Instant::now();
        for (pct, seed) in [(2.0, 7), (0.5, 11), (30.0, 3)] {
            let mut d = Direction::new(spec(0.0, 0, Queue::Packets(10), pct), seed);
            let n = 100_000;
            let lost = (0..n).filter(|_| d.handle_packet(t0, 100) == Verdict::Drop(Reason::Loss)).count();
            let measured = lost as f64 * 100.0 / n as f64;
            assert!((measured - pct).abs() < pct * 0.1, "{pct} %: measured {measured} %");
        }
        // Same seed, same decisions.
        let decide = |seed| {
            let mut d = Direction::new(spec(0.0, 0, Queue::Packets(10), 10.0), seed);
            (0..1000).map(|_| d.handle_packet(t0, 100)).collect::<Vec<_>>()
        };
        assert_eq!(decide(5), decide(5));
        assert_ne!(decide(5), decide(6));
        // No loss configured, none dropped.
        let mut d = Direction::new(spec(0.0, 0, Queue::Packets(10), 0.0), 1);
        assert!((0..10_000).all(|_| matches!(d.handle_packet(t0, 100), Verdict::Deliver(_))));
    }

    #[test]
    fn no_reordering_even_when_the_delay_shrinks() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(100.0, 50, Queue::Packets(1000), 0.0), 1);
        let mut prev = t0;
        for i in 0..2000u32 {
            if i == 1000 {
                d.set_spec(spec(100.0, 1, Queue::Packets(1000), 0.0));
            }
            let now = t0 + Duration::from_micros(50) * i;
            let len = 40 + (i as usize * 37) % 1460;
            let at = deliver(d.handle_packet(now, len));
            assert!(at >= prev, "packet {i} delivered before its predecessor");
            assert!(at >= now);
            prev = at;
        }
    }

    #[test]
    fn unlimited_rate_has_no_serialisation() {
        let t0 = Instant::now();
        let mut d = Direction::new(spec(0.0, 0, Queue::Packets(0), 0.0), 1);
        for _ in 0..10 {
            assert_eq!(d.handle_packet(t0, 65535), Verdict::Deliver(t0));
        }
    }

    #[test]
    fn queue_strings() {
        assert_eq!(parse_queue("1000p"), Ok(Queue::Packets(1000)));
        assert_eq!(parse_queue(" 20P "), Ok(Queue::Packets(20)));
        assert_eq!(parse_queue("1.5MB"), Ok(Queue::Bytes(1_500_000)));
        assert_eq!(parse_queue("64KB"), Ok(Queue::Bytes(64_000)));
        assert_eq!(parse_queue("64kib"), Ok(Queue::Bytes(65_536)));
        assert_eq!(parse_queue("1MiB"), Ok(Queue::Bytes(1_048_576)));
        assert_eq!(parse_queue("1500B"), Ok(Queue::Bytes(1500)));
        assert_eq!("2mb".parse::<Queue>(), Ok(Queue::Bytes(2_000_000)));
        for bad in ["", "p", "1000", "1.5p", "-3p", "12XB", "1e99MB", "MB", "1.2.3MB"] {
            assert!(parse_queue(bad).is_err(), "{bad:?} accepted");
        }
        for q in [Queue::Packets(1000), Queue::Bytes(1_500_000), Queue::Bytes(64_000), Queue::Bytes(1234)] {
            assert_eq!(parse_queue(&q.to_string()), Ok(q));
        }
    }

    #[test]
    fn default_queue_is_one_and_a_half_bdp() {
        // 200 Mbit/s × 40 ms = 1 MB.
        assert_eq!(DirSpec::default_queue(200.0, Duration::from_millis(40)), Queue::Bytes(1_500_000));
        assert_eq!(DirSpec::default_queue(1.0, Duration::from_millis(2)), Queue::Bytes(30_000));
        let s = LinkSpec::symmetric(200.0, Duration::from_millis(20));
        assert_eq!(s.up.queue, Queue::Bytes(1_500_000));
        assert!(s.validate().is_ok());
        let mut bad = s;
        bad.down.loss_pct = 101.0;
        assert!(bad.validate().is_err());
    }
}
