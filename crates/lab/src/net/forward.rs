//! The forwarder: one thread per direction reads packets from one TUN device, asks the model
//! what happens to each, and writes the survivors to the other TUN device when they are due.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::tun::{self, Tun};
use crate::model::{self, DirSpec, Direction, Histogram, LinkSpec, Occupancy, QueueSummary, Reason, Seen, Verdict};

/// Counters of one direction.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DirStats {
    /// Packets delivered to the other side.
    pub packets: u64,
    /// Bytes (IP packets) delivered to the other side.
    pub bytes: u64,
    /// Packets dropped by the random loss.
    pub dropped_loss: u64,
    /// Packets dropped because the queue was full.
    pub dropped_queue: u64,
    /// Bytes delivered of TCP packets (IPv4 protocol 6): one flow's share when the others are
    /// UDP.
    pub tcp_bytes: u64,
    /// Bytes delivered of UDP packets (IPv4 protocol 17; QUIC).
    pub udp_bytes: u64,
    /// TCP packets dropped because the queue was full.
    pub tcp_dropped_queue: u64,
    /// UDP packets dropped because the queue was full.
    pub udp_dropped_queue: u64,
    /// Packets lost to read or write errors on the TUN devices (should stay 0).
    pub errors: u64,
    /// CPU seconds used by this direction's forwarder thread, including the receiving network
    /// stack that each TUN write runs.
    pub cpu_secs: f64,
    /// The drop-tail queue as arriving packets found it (see [`DirStats::queue`] for the
    /// figures).
    #[serde(rename = "queue", serialize_with = "summarise")]
    pub occupancy: Occupancy,
}

fn summarise<S: serde::Serializer>(o: &Occupancy, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&o.summary(), s)
}

impl DirStats {
    fn since(&self, e: &Self) -> Self {
        Self {
            occupancy: self.occupancy.since(&e.occupancy),
            packets: self.packets.saturating_sub(e.packets),
            bytes: self.bytes.saturating_sub(e.bytes),
            dropped_loss: self.dropped_loss.saturating_sub(e.dropped_loss),
            dropped_queue: self.dropped_queue.saturating_sub(e.dropped_queue),
            tcp_bytes: self.tcp_bytes.saturating_sub(e.tcp_bytes),
            udp_bytes: self.udp_bytes.saturating_sub(e.udp_bytes),
            tcp_dropped_queue: self.tcp_dropped_queue.saturating_sub(e.tcp_dropped_queue),
            udp_dropped_queue: self.udp_dropped_queue.saturating_sub(e.udp_dropped_queue),
            errors: self.errors.saturating_sub(e.errors),
            cpu_secs: (self.cpu_secs - e.cpu_secs).max(0.0),
        }
    }

    /// Packets dropped, by loss or by the queue.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_queue
    }

    /// The queue occupancy in figures: what arriving packets found (median, 95th percentile,
    /// peak; packets and queueing delay).
    pub fn queue(&self) -> QueueSummary {
        self.occupancy.summary()
    }

    /// Drops per 100 MB (10^8 bytes) delivered: (by the queue, by the random loss); `None`
    /// when nothing was delivered.
    pub fn drops_per_100mb(&self) -> Option<(f64, f64)> {
        (self.bytes > 0).then(|| {
            let per = 1e8 / self.bytes as f64;
            (self.dropped_queue as f64 * per, self.dropped_loss as f64 * per)
        })
    }
}

/// Forwarder counters: per direction, and the wall time they cover.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Client → server.
    pub up: DirStats,
    /// Server → client.
    pub down: DirStats,
    /// Wall-clock seconds covered (since the lab started, or between two snapshots).
    pub elapsed_secs: f64,
}

impl Stats {
    /// CPU seconds of both forwarder threads.
    pub fn cpu_secs(&self) -> f64 {
        self.up.cpu_secs + self.down.cpu_secs
    }

    /// Forwarder CPU use in percent of one core over `elapsed_secs`.
    pub fn cpu_pct(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            100.0 * self.cpu_secs() / self.elapsed_secs
        } else {
            0.0
        }
    }

    /// The difference between this snapshot and an earlier one (a window of a run).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            up: self.up.since(&earlier.up),
            down: self.down.since(&earlier.down),
            elapsed_secs: (self.elapsed_secs - earlier.elapsed_secs).max(0.0),
        }
    }

    /// Delivered rate of a direction in Mbit/s over `elapsed_secs` (IP bytes).
    pub fn mbit(&self, d: &DirStats) -> f64 {
        if self.elapsed_secs > 0.0 {
            d.bytes as f64 * 8.0 / self.elapsed_secs / 1e6
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, d) in [("up  ", &self.up), ("down", &self.down)] {
            writeln!(
                f,
                "{name}: {} packets, {:.1} MB ({:.1} Mbit/s), dropped {} by loss + {} by the queue, {} errors, \
                 CPU {:.2} s",
                d.packets,
                d.bytes as f64 / 1e6,
                self.mbit(d),
                d.dropped_loss,
                d.dropped_queue,
                d.errors,
                d.cpu_secs,
            )?;
            writeln!(f, "      {}", d.queue())?;
        }
        write!(
            f,
            "forwarder CPU: {:.2} s in {:.1} s = {:.1} % of one core",
            self.cpu_secs(),
            self.elapsed_secs,
            self.cpu_pct()
        )
    }
}

/// An [`Occupancy`] the forwarder thread records into while others read it.
#[derive(Debug)]
struct SharedOccupancy {
    packets: Box<[AtomicU64]>,
    bytes: Box<[AtomicU64]>,
    wait_us: Box<[AtomicU64]>,
    peak_packets: AtomicU64,
    peak_bytes: AtomicU64,
    peak_wait_us: AtomicU64,
}

impl Default for SharedOccupancy {
    fn default() -> Self {
        let buckets = || (0..model::BUCKETS).map(|_| AtomicU64::new(0)).collect();
        Self {
            packets: buckets(),
            bytes: buckets(),
            wait_us: buckets(),
            peak_packets: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            peak_wait_us: AtomicU64::new(0),
        }
    }
}

impl SharedOccupancy {
    fn record(&self, s: Seen) {
        let wait_us = u64::try_from(s.wait.as_micros()).unwrap_or(u64::MAX);
        for (h, peak, v) in [
            (&self.packets, &self.peak_packets, s.packets as u64),
            (&self.bytes, &self.peak_bytes, s.bytes as u64),
            (&self.wait_us, &self.peak_wait_us, wait_us),
        ] {
            h[model::bucket_of(v)].fetch_add(1, Ordering::Relaxed);
            peak.fetch_max(v, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> Occupancy {
        let read = |h: &[AtomicU64]| Histogram::from_counts(h.iter().map(|c| c.load(Ordering::Relaxed)).collect());
        Occupancy {
            packets: read(&self.packets),
            bytes: read(&self.bytes),
            wait_us: read(&self.wait_us),
            peak_packets: self.peak_packets.load(Ordering::Relaxed),
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed),
            peak_wait_us: self.peak_wait_us.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    packets: AtomicU64,
    bytes: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue: AtomicU64,
    tcp_bytes: AtomicU64,
    udp_bytes: AtomicU64,
    tcp_dropped_queue: AtomicU64,
    udp_dropped_queue: AtomicU64,
    errors: AtomicU64,
    /// What arriving packets found at the queue.
    occupancy: SharedOccupancy,
    /// CPU nanoseconds, stored by the thread when it ends.
    final_cpu_ns: AtomicU64,
    /// The thread's CPU clock, for reading while it runs.
    clock: Mutex<Option<libc::clockid_t>>,
}

impl Counters {
    fn snapshot(&self) -> DirStats {
        let running_cpu = self.clock.lock().ok().and_then(|c| *c).and_then(clock_ns);
        let cpu_ns = running_cpu.unwrap_or_else(|| self.final_cpu_ns.load(Ordering::Relaxed));
        DirStats {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            dropped_loss: self.dropped_loss.load(Ordering::Relaxed),
            dropped_queue: self.dropped_queue.load(Ordering::Relaxed),
            tcp_bytes: self.tcp_bytes.load(Ordering::Relaxed),
            udp_bytes: self.udp_bytes.load(Ordering::Relaxed),
            tcp_dropped_queue: self.tcp_dropped_queue.load(Ordering::Relaxed),
            udp_dropped_queue: self.udp_dropped_queue.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            cpu_secs: cpu_ns as f64 / 1e9,
            occupancy: self.occupancy.snapshot(),
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, exclusively borrowed timespec.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// What the forwarder threads share with the [`Lab`](super::Lab).
#[derive(Debug)]
pub(crate) struct Shared {
    stop: AtomicBool,
    spec: Mutex<LinkSpec>,
    generation: AtomicU64,
    up: Counters,
    down: Counters,
    started: Instant,
}

impl Shared {
    pub(crate) fn new(spec: LinkSpec) -> Self {
        Self {
            stop: AtomicBool::new(false),
            spec: Mutex::new(spec),
            generation: AtomicU64::new(0),
            up: Counters::default(),
            down: Counters::default(),
            started: Instant::now(),
        }
    }

    pub(crate) fn set_spec(&self, spec: LinkSpec) {
        if let Ok(mut s) = self.spec.lock() {
            *s = spec;
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn spec(&self) -> Option<LinkSpec> {
        self.spec.lock().ok().map(|s| *s)
    }

    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats { up: self.up.snapshot(), down: self.down.snapshot(), elapsed_secs: self.started.elapsed().as_secs_f64() }
    }
}

/// Which way a thread forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

impl Way {
    fn dir_spec(self, s: &LinkSpec) -> DirSpec {
        match self {
            Self::Up => s.up,
            Self::Down => s.down,
        }
    }
}

/// Packets read per wake-up before delivering what is due again.
const READ_BATCH: usize = 64;
/// Longest sleep, so that a stop request is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Packets due within this much of a wake-up are delivered in that wake-up: at high rates a
/// wake-up delivers a few packets (a wake-up costs about as much CPU as delivering a packet),
/// the way a NIC coalesces interrupts. Packets are at most this early.
const DELIVER_AHEAD: Duration = Duration::from_micros(100);
/// The thread wakes this much before the first packet is due: about the wake-up latency with
/// a timer slack of 1 ns (~30 µs here), so that a lone packet is delivered on time.
const WAKE_AHEAD: Duration = Duration::from_micros(20);
/// When the next delivery is closer than this, sleep without watching the input: packets that
/// arrive meanwhile are read (and time-stamped) at the next wake-up, at most this late, instead
/// of each waking the thread.
const BLIND_SLEEP: Duration = Duration::from_micros(200);

/// A packet on its way: delivery time, length, buffer (of the full buffer size).
struct Scheduled {
    at: Instant,
    len: usize,
    buf: Vec<u8>,
}

/// Runs one direction until `shared.stop` is set.
pub(crate) fn run(shared: Arc<Shared>, way: Way, from: Arc<Tun>, to: Arc<Tun>, buf_size: usize, seed: u64) {
    let counters = match way {
        Way::Up => &shared.up,
        Way::Down => &shared.down,
    };
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is always valid for the calling thread; `clock` is a live clockid_t.
    if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
        if let Ok(mut c) = counters.clock.lock() {
            *c = Some(clock);
        }
    }
    // Precise wake-ups: the default timer slack of 50 µs would be added to every sleep.
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0) };

    let mut generation = shared.generation.load(Ordering::Acquire);
    let initial = shared.spec().map(|s| way.dir_spec(&s));
    let Some(initial) = initial else { return };
    let mut model = Direction::new(initial, seed);
    let mut pool: Vec<Vec<u8>> = (0..256).map(|_| vec![0u8; buf_size]).collect();
    let mut scheduled: VecDeque<Scheduled> = VecDeque::with_capacity(4096);
    let (in_fd, out_fd) = (from.raw_fd(), to.raw_fd());
    let mut read_failures = 0u32;

    while !shared.stop.load(Ordering::Acquire) {
        let g = shared.generation.load(Ordering::Acquire);
        if g != generation {
            generation = g;
            if let Some(s) = shared.spec() {
                model.set_spec(way.dir_spec(&s));
            }
        }

        // Read what has arrived.
        let mut more = false;
        for i in 0..READ_BATCH {
            let mut buf = pool.pop().unwrap_or_else(|| vec![0u8; buf_size]);
            match tun::read_packet(in_fd, &mut buf) {
                Ok(Some(len)) => {
                    let (verdict, seen) = model.handle_packet_seen(Instant::now(), len);
                    if let Some(seen) = seen {
                        counters.occupancy.record(seen);
                    }
                    match verdict {
                        Verdict::Deliver(at) => scheduled.push_back(Scheduled { at, len, buf }),
                        Verdict::Drop(reason) => {
                            let c =
                                if reason == Reason::Loss { &counters.dropped_loss } else { &counters.dropped_queue };
                            c.fetch_add(1, Ordering::Relaxed);
                            if reason == Reason::Queue {
                                match ip_protocol(&buf[..len]) {
                                    Some(TCP) => counters.tcp_dropped_queue.fetch_add(1, Ordering::Relaxed),
                                    Some(UDP) => counters.udp_dropped_queue.fetch_add(1, Ordering::Relaxed),
                                    _ => 0,
                                };
                            }
                            pool.push(buf);
                        }
                    }
                }
                Ok(None) => {
                    pool.push(buf);
                    break;
                }
                Err(e) => {
                    pool.push(buf);
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    read_failures += 1;
                    if read_failures <= 3 {
                        eprintln!("sluice-lab: forwarder ({way:?}): read: {e}");
                    }
                    // A persistent error (device gone) must not spin.
                    std::thread::sleep(Duration::from_millis(1));
                    break;
                }
            }
            more = i + 1 == READ_BATCH;
        }

        // Deliver what is due (or nearly).
        let now = Instant::now();
        while scheduled.front().is_some_and(|p| p.at <= now + DELIVER_AHEAD) {
            let Some(p) = scheduled.pop_front() else { break };
            match tun::write_packet(out_fd, &p.buf[..p.len]) {
                Ok(()) => {
                    counters.packets.fetch_add(1, Ordering::Relaxed);
                    counters.bytes.fetch_add(p.len as u64, Ordering::Relaxed);
                    match ip_protocol(&p.buf[..p.len]) {
                        Some(TCP) => counters.tcp_bytes.fetch_add(p.len as u64, Ordering::Relaxed),
                        Some(UDP) => counters.udp_bytes.fetch_add(p.len as u64, Ordering::Relaxed),
                        _ => 0,
                    };
                }
                Err(e) => {
                    let n = counters.errors.fetch_add(1, Ordering::Relaxed);
                    if n < 3 && e.raw_os_error() != Some(libc::EIO) {
                        eprintln!("sluice-lab: forwarder ({way:?}): write: {e}");
                    }
                }
            }
            pool.push(p.buf);
        }
        if more {
            continue;
        }

        // Sleep until the next delivery is nearly due, or (if that is far) a packet arrives.
        let wait = match scheduled.front() {
            Some(p) => p.at.saturating_duration_since(Instant::now() + WAKE_AHEAD).min(MAX_SLEEP),
            None => MAX_SLEEP,
        };
        if wait.is_zero() {
            continue;
        }
        let _ = sleep_or_readable(in_fd, wait, wait >= BLIND_SLEEP);
    }

    if let Some(ns) = clock_ns(clock) {
        counters.final_cpu_ns.store(ns, Ordering::Relaxed);
    }
    if let Ok(mut c) = counters.clock.lock() {
        *c = None;
    }
}

/// IPv4's protocol numbers of TCP and UDP.
const TCP: u8 = 6;
/// See [`TCP`].
const UDP: u8 = 17;

/// The protocol field of an IPv4 packet (`None` for anything else).
fn ip_protocol(packet: &[u8]) -> Option<u8> {
    (packet.len() >= 20 && packet[0] >> 4 == 4).then(|| packet[9])
}

/// Waits until `timeout` has passed or, if `watch`, until `fd` is readable (nanosecond
/// resolution).
fn sleep_or_readable(fd: i32, timeout: Duration, watch: bool) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: `pfd` and `ts` are live for the call; one pollfd (or none); a null signal mask.
    let rc = unsafe { libc::ppoll(&mut pfd, libc::nfds_t::from(watch), &ts, std::ptr::null()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_windows_and_rates() {
        let d = |packets, bytes, cpu_secs| DirStats { packets, bytes, cpu_secs, ..DirStats::default() };
        let a = Stats { up: d(10, 1000, 0.5), down: d(5, 200, 0.25), elapsed_secs: 1.0 };
        let b = Stats { up: d(1010, 1_251_000, 1.0), down: d(105, 10_200, 0.5), elapsed_secs: 2.0 };
        let w = b.since(&a);
        assert_eq!(w.up.packets, 1000);
        assert_eq!(w.elapsed_secs, 1.0);
        assert!((w.mbit(&w.up) - 10.0).abs() < 1e-9);
        assert!((w.cpu_secs() - 0.75).abs() < 1e-9);
        assert!((w.cpu_pct() - 75.0).abs() < 1e-9);
        // A later snapshot minus an earlier one never goes negative, even if swapped.
        assert_eq!(a.since(&b).up.packets, 0);
        assert_eq!(Stats::default().cpu_pct(), 0.0);
        assert!(b.to_string().contains("forwarder CPU: 1.50 s in 2.0 s = 75.0 % of one core"));
    }

    #[test]
    fn queue_readings_are_shared_and_windowed() {
        let shared = SharedOccupancy::default();
        let mut plain = Occupancy::default();
        let seen = |packets: usize, ms: u64| Seen { packets, bytes: packets * 1500, wait: Duration::from_millis(ms) };
        for i in 0..20 {
            shared.record(seen(i, i as u64));
            plain.record(seen(i, i as u64));
        }
        assert_eq!(shared.snapshot(), plain);
        let at = |occupancy: Occupancy, bytes| Stats {
            down: DirStats { bytes, dropped_queue: 4, dropped_loss: 1, occupancy, ..DirStats::default() },
            ..Stats::default()
        };
        let first = at(shared.snapshot(), 50_000_000);
        for _ in 0..10 {
            shared.record(seen(2, 1));
        }
        let second = at(shared.snapshot(), 250_000_000);
        let w = second.since(&first);
        let q = w.down.queue();
        assert_eq!((q.arrivals, q.p50_packets, q.peak_packets), (10, 2, 2));
        // A window's peak bytes: 3000 to within its bucket (2976–3007).
        assert_eq!(q.peak_bytes, 3007);
        assert_eq!(second.down.queue().peak_packets, 19);
        // No drops in the window (the counters did not move), 200 MB delivered.
        assert_eq!(w.down.drops_per_100mb(), Some((0.0, 0.0)));
        assert_eq!(second.down.drops_per_100mb(), Some((1.6, 0.4)));
        assert_eq!(DirStats::default().drops_per_100mb(), None);
        let text = second.to_string();
        assert!(text.contains("queue found by 30 arrivals: p50 4 packets"), "{text}");
        assert!(text.contains("peak 19 packets, 28500 bytes, 19.0 ms"), "{text}");
        assert!(text.contains("up  : 0 packets") && text.contains("queue: no packet reached it"), "{text}");
        assert_eq!(ip_protocol(&[0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 99, 0, 2, 10, 99, 0, 1]), Some(UDP));
        assert_eq!(ip_protocol(&[0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 99, 0, 2, 10, 99, 0, 1]), Some(TCP));
        assert_eq!(ip_protocol(&[0x60; 40]), None);
        assert_eq!(ip_protocol(&[0x45; 10]), None);
        let json = serde_json::to_value(&second).unwrap();
        assert_eq!(json["down"]["queue"]["peak_packets"], 19, "{json}");
    }
}
