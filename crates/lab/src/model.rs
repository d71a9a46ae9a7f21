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
//!
//! Queue readings: every packet that reaches step 2 (random loss aside, dropped or not) reports
//! what it found there ([`Seen`]: packets and bytes waiting ahead of it, and how long it would
//! wait for the serialiser), and an [`Occupancy`] gathers these into histograms with fixed
//! buckets. Histograms only grow, so the difference of two readings ([`Occupancy::since`]) is
//! the distribution over the arrivals between them: a window such as one transfer.

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
        self.handle_packet_seen(now, len).0
    }

    /// [`Direction::handle_packet`], also returning what the packet found at the queue (`None`
    /// when the random loss took it before it got there).
    pub fn handle_packet_seen(&mut self, now: Instant, len: usize) -> (Verdict, Option<Seen>) {
        // 1. Random loss.
        if self.spec.loss_pct > 0.0 && self.rng.next_f64() * 100.0 < self.spec.loss_pct {
            return (Verdict::Drop(Reason::Loss), None);
        }
        // 2. Drop-tail queue: only packets that have to wait for the serialiser count.
        self.expire(now);
        let start = match self.link_free_at {
            Some(free) if free > now => free,
            _ => now,
        };
        let seen = Seen { packets: self.waiting.len(), bytes: self.waiting_bytes, wait: start - now };
        if start > now {
            let full = match self.spec.queue {
                Queue::Packets(n) => self.waiting.len() >= n,
                Queue::Bytes(b) => self.waiting_bytes + len > b,
            };
            if full {
                return (Verdict::Drop(Reason::Queue), Some(seen));
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
        (Verdict::Deliver(at), Some(seen))
    }
}

/// What a packet found when it reached the drop-tail queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Packets waiting for the serialiser ahead of it.
    pub packets: usize,
    /// Their bytes.
    pub bytes: usize,
    /// How long until the serialiser is free: its queueing delay (the waiting packets at the
    /// link rate, plus the rest of the packet being serialised). A packet dropped by the queue
    /// reports the delay it would have had.
    pub wait: Duration,
}

/// Bits of sub-bucket resolution above the exact range: 64 buckets per power of two, so a
/// bucket is at most 1/64 (1.6 %) of its values wide.
const SUB_BITS: u32 = 6;
/// Values below this have a bucket each.
const EXACT: u64 = 2 << SUB_BITS;
/// Values from 2^(TOP_EXP + 1) on share the last bucket (packets, bytes or µs: never reached).
const TOP_EXP: u32 = 39;
/// Buckets of a [`Histogram`].
pub const BUCKETS: usize = EXACT as usize + (((TOP_EXP - SUB_BITS) as usize) << SUB_BITS);

/// The bucket of `v`: `v` itself below 128, then 64 buckets per power of two.
pub fn bucket_of(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let v = v.min((1u64 << (TOP_EXP + 1)) - 1);
    let exp = 63 - v.leading_zeros();
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) - (1 << SUB_BITS);
    EXACT as usize + (((exp - SUB_BITS - 1) as usize) << SUB_BITS) + sub as usize
}

/// The smallest and the largest value of bucket `i`.
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i < EXACT as usize {
        return (i as u64, i as u64);
    }
    let k = i - EXACT as usize;
    let exp = (k >> SUB_BITS) as u32 + SUB_BITS + 1;
    let first = (k as u64 & ((1 << SUB_BITS) - 1)) + (1 << SUB_BITS);
    let shift = exp - SUB_BITS;
    (first << shift, ((first + 1) << shift) - 1)
}

/// Counts of non-negative integers in the fixed buckets of [`bucket_of`]: exact below 128,
/// within 1.6 % above.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// [`BUCKETS`] counts, or empty when nothing was recorded.
    counts: Vec<u64>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used: Vec<(u64, u64)> =
            self.counts.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| (bucket_range(i).0, *n)).collect();
        f.debug_struct("Histogram").field("count", &self.count()).field("from_value_count", &used).finish()
    }
}

impl Histogram {
    /// A histogram of these bucket counts (as many as [`BUCKETS`]; missing ones are 0, extra
    /// ones are added to the last bucket).
    pub fn from_counts(mut counts: Vec<u64>) -> Self {
        if counts.iter().all(|n| *n == 0) {
            return Self::default();
        }
        if counts.len() > BUCKETS {
            let extra: u64 = counts[BUCKETS..].iter().sum();
            counts.truncate(BUCKETS);
            counts[BUCKETS - 1] += extra;
        }
        counts.resize(BUCKETS, 0);
        Self { counts }
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        self.counts[bucket_of(v)] += 1;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The values recorded since `earlier`, a reading of the same histogram before.
    pub fn since(&self, earlier: &Self) -> Self {
        let counts = (0..self.counts.len())
            .map(|i| self.counts[i].saturating_sub(earlier.counts.get(i).copied().unwrap_or(0)))
            .collect();
        Self::from_counts(counts)
    }

    /// The `q` quantile (0–1): the value at or below which at least that fraction of the
    /// recorded values lie, as the middle of its bucket (exact below 128). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bucket_range(i);
                return Some(lo + (hi - lo) / 2);
            }
        }
        None
    }

    /// The largest value recorded, to within its bucket (the bucket's largest value); `None`
    /// when empty.
    pub fn max(&self) -> Option<u64> {
        self.counts.iter().rposition(|c| *c > 0).map(|i| bucket_range(i).1)
    }
}

/// The queue as arriving packets found it: histograms of [`Seen`] over every packet that
/// reached the queue, and the largest values exactly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Occupancy {
    /// Packets waiting ahead.
    pub packets: Histogram,
    /// Bytes waiting ahead.
    pub bytes: Histogram,
    /// Queueing delay in µs.
    pub wait_us: Histogram,
    /// Most packets found waiting (over the whole reading; see [`Occupancy::since`]).
    pub peak_packets: u64,
    /// Most bytes found waiting.
    pub peak_bytes: u64,
    /// Longest queueing delay, µs.
    pub peak_wait_us: u64,
}

impl Occupancy {
    /// Counts one arrival.
    pub fn record(&mut self, s: Seen) {
        let wait_us = u64::try_from(s.wait.as_micros()).unwrap_or(u64::MAX);
        self.packets.record(s.packets as u64);
        self.bytes.record(s.bytes as u64);
        self.wait_us.record(wait_us);
        self.peak_packets = self.peak_packets.max(s.packets as u64);
        self.peak_bytes = self.peak_bytes.max(s.bytes as u64);
        self.peak_wait_us = self.peak_wait_us.max(wait_us);
    }

    /// Arrivals counted.
    pub fn arrivals(&self) -> u64 {
        self.packets.count()
    }

    /// The arrivals since `earlier`, a reading of the same queue before. The histograms are
    /// exact differences; the peaks of the window are its histograms' largest buckets (within
    /// 1.6 %; exact below 128), capped by the exact peaks of the whole reading.
    pub fn since(&self, earlier: &Self) -> Self {
        let (packets, bytes, wait_us) = (
            self.packets.since(&earlier.packets),
            self.bytes.since(&earlier.bytes),
            self.wait_us.since(&earlier.wait_us),
        );
        Self {
            peak_packets: packets.max().map_or(0, |m| m.min(self.peak_packets)),
            peak_bytes: bytes.max().map_or(0, |m| m.min(self.peak_bytes)),
            peak_wait_us: wait_us.max().map_or(0, |m| m.min(self.peak_wait_us)),
            packets,
            bytes,
            wait_us,
        }
    }

    /// The figures the reports show.
    pub fn summary(&self) -> QueueSummary {
        let ms = |us: Option<u64>| us.map_or(0.0, |us| us as f64 / 1e3);
        QueueSummary {
            arrivals: self.arrivals(),
            p50_packets: self.packets.quantile(0.5).unwrap_or(0),
            p95_packets: self.packets.quantile(0.95).unwrap_or(0),
            peak_packets: self.peak_packets,
            peak_bytes: self.peak_bytes,
            p50_ms: ms(self.wait_us.quantile(0.5)),
            p95_ms: ms(self.wait_us.quantile(0.95)),
            peak_ms: ms(Some(self.peak_wait_us)),
        }
    }
}

/// The queue occupancy of a reading in a few figures: what arriving packets found, median,
/// 95th percentile and peak, in packets and as queueing delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct QueueSummary {
    /// Packets that reached the queue (the random loss's aside).
    pub arrivals: u64,
    /// Median of the packets found waiting.
    pub p50_packets: u64,
    /// 95th percentile of the packets found waiting.
    pub p95_packets: u64,
    /// Most packets found waiting.
    pub peak_packets: u64,
    /// Most bytes found waiting.
    pub peak_bytes: u64,
    /// Median queueing delay, ms.
    pub p50_ms: f64,
    /// 95th percentile of the queueing delay, ms.
    pub p95_ms: f64,
    /// Longest queueing delay, ms.
    pub peak_ms: f64,
}

impl std::fmt::Display for QueueSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.arrivals == 0 {
            return write!(f, "queue: no packet reached it");
        }
        write!(
            f,
            "queue found by {} arrivals: p50 {} packets / {:.1} ms, p95 {} / {:.1} ms, peak {} packets, {} bytes, \
             {:.1} ms",
            self.arrivals,
            self.p50_packets,
            self.p50_ms,
            self.p95_packets,
            self.p95_ms,
            self.peak_packets,
            self.peak_bytes,
            self.peak_ms
        )
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
    fn histogram_buckets_cover_every_value_once() {
        assert_eq!(BUCKETS, 128 + 33 * 64);
        let mut next = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i} does not start where {} ended", i.wrapping_sub(1));
            assert!(hi >= lo);
            assert_eq!((bucket_of(lo), bucket_of(hi)), (i, i));
            // At most 1/64 of its values wide (exact below 128).
            assert!((hi - lo) as f64 <= lo as f64 / 64.0, "bucket {i}: {lo}–{hi}");
            next = hi + 1;
        }
        assert_eq!(next, 1 << 40);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_range(bucket_of(1000)), (1000, 1007));
    }

    #[test]
    fn histogram_quantiles_and_windows() {
        let mut h = Histogram::default();
        assert_eq!((h.count(), h.quantile(0.5), h.max()), (0, None, None));
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!((h.count(), h.quantile(0.5), h.quantile(0.95), h.max()), (100, Some(50), Some(95), Some(100)));
        assert_eq!((h.quantile(0.0), h.quantile(1.0)), (Some(1), Some(100)));
        let earlier = h.clone();
        for _ in 0..10 {
            h.record(1_000_000);
        }
        // The window holds the ten large values only, to within their bucket.
        let w = h.since(&earlier);
        assert_eq!(w.count(), 10);
        let (lo, hi) = bucket_range(bucket_of(1_000_000));
        assert!(lo <= 1_000_000 && hi >= 1_000_000 && hi - lo < 1_000_000 / 64);
        assert_eq!(w.max(), Some(hi));
        assert_eq!(w.quantile(0.5), Some(lo + (hi - lo) / 2));
        // A window with nothing in it is empty; an older reading minus a newer one too.
        assert_eq!(h.since(&h), Histogram::default());
        assert_eq!(earlier.since(&h).count(), 0);
        assert_eq!(Histogram::from_counts(vec![0; 3]), Histogram::default());
        assert_eq!(Histogram::from_counts(vec![1; BUCKETS + 2]).count(), BUCKETS as u64 + 2);
    }

    /// Records every arrival of `packets` (arrival time, length) into an occupancy; returns the
    /// verdicts.
    fn feed(
        d: &mut Direction,
        occ: &mut Occupancy,
        packets: impl IntoIterator<Item = (Instant, usize)>,
    ) -> Vec<Verdict> {
        packets
            .into_iter()
            .map(|(at, len)| {
                let (v, seen) = d.handle_packet_seen(at, len);
                if let Some(s) = seen {
                    occ.record(s);
                }
                v
            })
            .collect()
    }

    #[test]
    fn occupancy_of_a_burst_and_of_a_window_after_it() {
        let t0 = Instant::now();
        // 1500 B at 12 Mbit/s: 1 ms each; five may wait.
        let mut d = Direction::new(spec(12.0, 10, Queue::Packets(5), 0.0), 1);
        let mut occ = Occupancy::default();
        let v = feed(&mut d, &mut occ, (0..10).map(|_| (t0, 1500)));
        assert_eq!(v.iter().filter(|v| **v == Verdict::Drop(Reason::Queue)).count(), 4);
        // Found waiting: 0 (straight onto the wire), 0 (waits for the first), 1, 2, 3, 4, then
        // four drops that found the queue full (5).
        let s = occ.summary();
        assert_eq!((s.arrivals, s.p50_packets, s.p95_packets, s.peak_packets, s.peak_bytes), (10, 3, 5, 5, 7500));
        // The dropped ones would have waited for the packet on the wire and the five queued.
        // Delays found: 0, 1, 2, 3, 4, 5 ms, then 6 ms four times (within a bucket's 1.6 %).
        assert_eq!(s.peak_ms, 6.0);
        assert!((s.p50_ms - 4.0).abs() < 4.0 / 64.0, "{s:?}");
        assert!((s.p95_ms - 6.0).abs() < 6.0 / 64.0, "{s:?}");
        // A window after the queue drained: paced arrivals find it empty.
        let before = occ.clone();
        let later = t0 + Duration::from_millis(20);
        feed(&mut d, &mut occ, (0..50u32).map(|i| (later + Duration::from_millis(2) * i, 1500)));
        let w = occ.since(&before).summary();
        assert_eq!((w.arrivals, w.p95_packets, w.peak_packets, w.peak_bytes, w.peak_ms), (50, 0, 0, 0, 0.0));
        // The whole reading keeps the burst.
        assert_eq!(occ.summary().peak_packets, 5);
        // Lost packets never reach the queue and are not counted.
        let mut lossy = Direction::new(spec(12.0, 0, Queue::Packets(5), 100.0), 1);
        let mut none = Occupancy::default();
        feed(&mut lossy, &mut none, (0..10).map(|_| (t0, 1500)));
        assert_eq!(none.arrivals(), 0);
    }

    #[test]
    fn occupancy_of_a_standing_queue() {
        let t0 = Instant::now();
        // Twice the rate for two seconds into a 100-packet queue: it fills in about 0.2 s and
        // stays full; arrivals then find 100 (or 99, just after one left) packets and a delay
        // of about 100 ms.
        let mut d = Direction::new(spec(12.0, 5, Queue::Packets(100), 0.0), 1);
        let mut occ = Occupancy::default();
        feed(&mut d, &mut occ, (0..4000u32).map(|i| (t0 + Duration::from_micros(500) * i, 1500)));
        let s = occ.summary();
        assert_eq!(s.arrivals, 4000);
        assert!((99..=100).contains(&s.p50_packets) && s.p95_packets == 100 && s.peak_packets == 100, "{s:?}");
        assert_eq!(s.peak_bytes, 150_000);
        for ms in [s.p50_ms, s.p95_ms, s.peak_ms] {
            assert!((99.0..=102.0).contains(&ms), "{s:?}");
        }
        assert!(s.to_string().contains("p95 100 / 10"), "{s}");
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
