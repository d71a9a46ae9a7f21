//! Metrics: what every request, connection and upstream exchange adds up to, read by the admin
//! listener's `/metrics` in the Prometheus text format (through the `prometheus-client`
//! crate's encoder, [`encode`]).
//!
//! Counting must cost little (Caddy made its metrics opt-in over their per-request cost,
//! caddy#4644). What a request adds is kept per thread ([`Shard`]): the thread that ends the
//! exchange takes its own shard's lock, which no other thread takes except a scrape, so the
//! lock never waits and its cache line stays with that thread; one lock per request covers
//! its counters, bytes and two histograms. A scrape sums the shards. Events of a connection
//! (opened, handshakes, QUIC figures at close) are rarer and count into shared atomics.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::message::request::Proto;

/// Protocols, as metric label values (index: [`proto_index`]).
const PROTOS: [&str; 3] = ["http1", "http2", "http3"];
/// Status classes (index: the status / 100 - 1).
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The upper bounds of the request-duration and time-to-first-byte buckets, in seconds: from
/// a cached file's fraction of a millisecond to a long poll's minute.
pub(crate) const BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

thread_local! {
    /// The time of the connection loop's turn running on this thread ([`ticks`]; 0: none, see
    /// [`clock`]).
    static TURN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Nanoseconds since the first request record (at least 1): request times are differences of
/// these, plain integers (an `Instant` difference checks and carries through seconds and
/// nanoseconds, about 50 instructions each).
fn ticks(t: std::time::Instant) -> u64 {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    let base = *BASE.get_or_init(|| t.checked_sub(Duration::from_secs(1)).unwrap_or(t));
    u64::try_from(t.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// A connection loop's turn on this thread starts at `now` (`Some`) or has ended (`None`).
/// While a turn runs, request times are its time, as nginx times requests by the time it
/// caches once per turn of its event loop: three clock readings a request cost 14 % of a
/// small HTTP/2 response's CPU time here (the VM's clock is slow to read). A turn lasts
/// microseconds, so durations are that fine; outside a turn the clock is read.
pub(crate) fn set_turn(now: Option<std::time::Instant>) {
    TURN.with(|t| t.set(now.map_or(0, ticks)));
}

/// The time for a request's record ([`ticks`]): the running turn's, else the clock's.
fn clock() -> u64 {
    match TURN.with(std::cell::Cell::get) {
        0 => ticks(std::time::Instant::now()),
        t => t,
    }
}

/// [`BUCKETS`] in nanoseconds.
const BUCKETS_NS: [u64; BUCKETS.len()] = {
    let us: [u64; BUCKETS.len()] = [
        500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000,
        60_000_000,
    ];
    let mut ns = [0; BUCKETS.len()];
    let mut i = 0;
    while i < us.len() {
        ns[i] = us[i] * 1_000;
        i += 1;
    }
    ns
};

/// The bucket of [`BUCKETS`] `ns` nanoseconds fall in (the last: above them all).
fn bucket_ns(ns: u64) -> usize {
    // Most requests are answered within the first bucket: no search then.
    if ns <= BUCKETS_NS[0] {
        return 0;
    }
    BUCKETS_NS.partition_point(|&b| b < ns)
}

/// The bucket of [`BUCKETS`] a duration falls in.
pub(crate) fn bucket(d: Duration) -> usize {
    bucket_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The index of `p` in [`PROTOS`].
pub(crate) fn proto_index(p: Proto) -> usize {
    match p {
        Proto::Http1 => 0,
        Proto::Http2 => 1,
        Proto::Http3 => 2,
    }
}

/// Counts per bucket of [`BUCKETS`] (the last: above them all), and the sum.
#[derive(Clone, Copy, Default)]
struct Hist {
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Hist {
    fn observe(&mut self, d: Duration) {
        self.counts[bucket(d)] += 1;
        self.sum += d.as_secs_f64();
    }

    /// The buckets as the encoder takes them (per bucket, `+Inf` last; it makes them
    /// cumulative), and the count.
    fn buckets(&self) -> (u64, Vec<(f64, u64)>) {
        let out: Vec<(f64, u64)> = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| (BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), *c))
            .collect();
        (self.counts.iter().sum(), out)
    }
}

/// What one thread's requests add up to. Only the thread that owns it writes it, with plain
/// loads and stores (no locked instruction); a scrape reads it from another thread. Routes
/// beyond `routes` (added by a reload) get a larger one, and this one stays registered with
/// what it counted.
struct Local {
    routes: usize,
    /// Requests by route, protocol and status class: `(route * 3 + proto) * 5 + class`.
    requests: Box<[AtomicU64]>,
    bytes_in: [AtomicU64; 3],
    bytes_out: [AtomicU64; 3],
    /// HTTP/1.1 requests started minus ended here, and HTTP/2 and HTTP/3 streams opened minus
    /// closed here (the sum over threads is what is open).
    open: [AtomicI64; 3],
    /// Per protocol: counts per bucket, and the sum in nanoseconds.
    duration: [[AtomicU64; BUCKETS.len() + 1]; 3],
    duration_ns: [AtomicU64; 3],
    ttfb: [[AtomicU64; BUCKETS.len() + 1]; 3],
    ttfb_ns: [AtomicU64; 3],
    /// Early Hints sent, by source (configured, learned, upstream).
    hints: [AtomicU64; 3],
}

impl Local {
    fn new(routes: usize) -> Arc<Self> {
        let l = Arc::new(Self {
            routes,
            requests: (0..routes * 15).map(|_| AtomicU64::new(0)).collect(),
            bytes_in: Default::default(),
            bytes_out: Default::default(),
            open: Default::default(),
            duration: Default::default(),
            duration_ns: Default::default(),
            ttfb: Default::default(),
            ttfb_ns: Default::default(),
            hints: Default::default(),
        });
        registry().locals.lock().unwrap_or_else(|p| p.into_inner()).push(l.clone());
        l
    }
}

/// Add `n` to a counter only this thread writes.
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn bump_i(a: &AtomicI64, n: i64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Every thread's counters, for a scrape; and the route labels.
struct Registry {
    locals: Mutex<Vec<Arc<Local>>>,
    /// `(site, route)` by route id; 0 is no route (refused before routing, or no match).
    routes: Mutex<Vec<(String, String)>>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        locals: Mutex::new(Vec::new()),
        routes: Mutex::new(vec![(String::new(), String::new())]),
    })
}

thread_local! {
    static LOCAL: std::cell::RefCell<Option<Arc<Local>>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` with this thread's counters, made (or grown) to hold route `route`.
fn with_local<R>(route: usize, f: impl FnOnce(&Local) -> R) -> R {
    LOCAL.with_borrow_mut(|l| {
        if l.as_ref().is_none_or(|l| l.routes <= route) {
            let routes = registry().routes.lock().unwrap_or_else(|p| p.into_inner()).len().max(route + 1);
            *l = Some(Local::new(routes));
        }
        // Just made if it was missing.
        match l {
            Some(l) => f(l),
            None => unreachable!(),
        }
    })
}

/// The id of the route `route` of site `site` (labels `site` and `route`), the same for the
/// same pair across reloads.
pub(crate) fn route_id(site: &str, route: &str) -> u32 {
    let mut routes = registry().routes.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = routes.iter().position(|(s, r)| s == site && r == route) {
        return i as u32;
    }
    routes.push((site.to_owned(), route.to_owned()));
    (routes.len() - 1) as u32
}

/// One request, counted when it drops: its route, status, bytes and times. Made when the
/// request is admitted (an open request until then), filled in as it is answered. 32 bytes,
/// carried in the response as it moves: no allocation.
pub(crate) struct Tally {
    /// When it started ([`ticks`]; 0: metrics are off).
    start: u64,
    pub(crate) bytes_out: u64,
    /// Until the response head was ready, in nanoseconds (`u32::MAX`: no head, or over 4 s:
    /// then the start is read again).
    first_byte_ns: u32,
    pub(crate) route: u32,
    pub(crate) status: u16,
    /// `proto_index`.
    proto: u8,
}

impl Tally {
    /// A request on protocol `p` starts now (an HTTP/1.1 request is open until this drops;
    /// HTTP/2 and HTTP/3 streams are counted by their drivers, [`streams_open`]).
    pub(crate) fn start(p: Proto) -> Self {
        let proto = proto_index(p);
        if proto == 0 {
            with_local(0, |l| bump_i(&l.open[0], 1));
        }
        Self { start: clock(), bytes_out: 0, first_byte_ns: u32::MAX, route: 0, status: 0, proto: proto as u8 }
    }

    /// A tally that counts nothing (metrics off).
    pub(crate) const fn off() -> Self {
        Self { start: 0, bytes_out: 0, first_byte_ns: u32::MAX, route: 0, status: 0, proto: 0 }
    }

    /// The response head is ready now.
    pub(crate) fn head_ready(&mut self) {
        if self.start != 0 {
            let ns = clock().saturating_sub(self.start);
            self.first_byte_ns = u32::try_from(ns).unwrap_or(u32::MAX - 1);
        }
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::off()
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if self.start == 0 {
            return;
        }
        let ns = clock().saturating_sub(self.start);
        let p = usize::from(self.proto);
        let route = self.route as usize;
        with_local(route, |l| {
            if p == 0 {
                bump_i(&l.open[0], -1);
            }
            if let Some(class) = (self.status / 100).checked_sub(1).filter(|c| *c < 5) {
                bump(&l.requests[(route * 3 + p) * 5 + usize::from(class)], 1);
            }
            bump(&l.bytes_out[p], self.bytes_out);
            bump(&l.duration[p][bucket_ns(ns)], 1);
            bump(&l.duration_ns[p], ns);
            if self.first_byte_ns != u32::MAX {
                let f = u64::from(self.first_byte_ns);
                bump(&l.ttfb[p][bucket_ns(f)], 1);
                bump(&l.ttfb_ns[p], f);
            }
        });
    }
}

/// Streams opened (`delta` > 0) or closed on an HTTP/2 or HTTP/3 connection: its driver
/// reports the change of its count once per turn, not per stream.
pub(crate) fn streams_open(p: Proto, delta: i64) {
    if delta != 0 {
        with_local(0, |l| bump_i(&l.open[proto_index(p)], delta));
    }
}

/// Request body bytes received on protocol `p`.
pub(crate) fn bytes_in(p: Proto, n: u64) {
    with_local(0, |l| bump(&l.bytes_in[proto_index(p)], n));
}

/// Early Hints sent from `source` (`accesslog::HINTS_*`: one bit).
pub(crate) fn hint(source: u8) {
    let i = source.trailing_zeros() as usize;
    if i < 3 {
        with_local(0, |l| bump(&l.hints[i], 1));
    }
}

/// Counters of rarer events, shared.
pub(crate) struct Events {
    /// Connections open and accepted in all, by protocol.
    pub(crate) connections: [AtomicI64; 3],
    pub(crate) accepted: [AtomicU64; 3],
    /// TLS handshakes over TCP: completed, resumed, failed.
    pub(crate) tls_ok: AtomicU64,
    pub(crate) tls_resumed: AtomicU64,
    pub(crate) tls_failed: AtomicU64,
    /// QUIC handshakes failed (or timed out).
    pub(crate) quic_failed: AtomicU64,
    /// Limits tripped, by [`Limit`].
    pub(crate) limits: [AtomicU64; LIMITS.len()],
    /// Bytes the in-flight bound held back from a write (TCP), and writes it limited.
    pub(crate) inflight_held: AtomicU64,
    pub(crate) inflight_limited: AtomicU64,
    /// Responses compressed, and bytes before and after, by codec (br, zstd, gzip).
    pub(crate) compressed: [AtomicU64; 3],
    pub(crate) compressed_in: [AtomicU64; 3],
    pub(crate) compressed_out: [AtomicU64; 3],
    /// QUIC connections at close: round-trip time, lost and sent packets, congestion window.
    quic: Mutex<QuicClosed>,
    /// Speed-test requests by endpoint ([`SPEEDTEST_ENDPOINTS`]), and the bytes its downloads
    /// handed to connections and its uploads took.
    pub(crate) speedtest: [AtomicU64; SPEEDTEST_ENDPOINTS.len()],
    speedtest_down: AtomicU64,
    speedtest_up: AtomicU64,
}

/// The speed test's endpoints, as metric label values (the index is what
/// [`speedtest_request`] takes).
pub(crate) const SPEEDTEST_ENDPOINTS: [&str; 7] =
    ["down", "up", "ping", "nq_config", "nq_small", "nq_large", "nq_upload"];

/// A speed-test request to endpoint `i` of [`SPEEDTEST_ENDPOINTS`].
pub(crate) fn speedtest_request(i: usize) {
    if let Some(c) = events().speedtest.get(i) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Speed-test body bytes: sent (`up` false: a download's zeros, as they are handed to the
/// connection) or received (an upload's).
pub(crate) fn speedtest_bytes(up: bool, n: u64) {
    let e = events();
    if up { &e.speedtest_up } else { &e.speedtest_down }.fetch_add(n, Ordering::Relaxed);
}

#[derive(Default)]
struct QuicClosed {
    rtt: Hist,
    lost: u64,
    sent: u64,
    cwnd: Hist,
}

/// The shared event counters.
pub(crate) fn events() -> &'static Events {
    static E: OnceLock<Events> = OnceLock::new();
    E.get_or_init(|| Events {
        connections: Default::default(),
        accepted: Default::default(),
        tls_ok: AtomicU64::new(0),
        tls_resumed: AtomicU64::new(0),
        tls_failed: AtomicU64::new(0),
        quic_failed: AtomicU64::new(0),
        limits: Default::default(),
        inflight_held: AtomicU64::new(0),
        inflight_limited: AtomicU64::new(0),
        compressed: Default::default(),
        compressed_in: Default::default(),
        compressed_out: Default::default(),
        quic: Mutex::new(QuicClosed::default()),
        speedtest: Default::default(),
        speedtest_down: AtomicU64::new(0),
        speedtest_up: AtomicU64::new(0),
    })
}

/// A limit on what a peer controls, tripped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `limits.max_connections`: a connection refused or closed at once.
    Connections,
    /// A request body over `limits.max_request_body` (413).
    RequestBody,
    /// A header section over its bound (431).
    HeaderList,
    /// A stream refused over the concurrent-stream limit, or a reset flood.
    Streams,
    /// A connection closed for idleness, a stalled peer or a slow request.
    Timeout,
    /// A peer that stopped reading: its writes timed out.
    StalledPeer,
    /// `[connect]`'s tunnel budgets: a CONNECT refused (503).
    Tunnels,
}

const LIMITS: [(Limit, &str); 7] = [
    (Limit::Connections, "connections"),
    (Limit::RequestBody, "request_body"),
    (Limit::HeaderList, "header_list"),
    (Limit::Streams, "streams"),
    (Limit::Timeout, "timeout"),
    (Limit::StalledPeer, "stalled_peer"),
    (Limit::Tunnels, "tunnels"),
];

/// Count a tripped limit.
pub(crate) fn limit(l: Limit) {
    if let Some(i) = LIMITS.iter().position(|(k, _)| *k == l) {
        events().limits[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// An open connection on protocol `p`, counted while this lives.
pub(crate) struct Connection(usize);

impl Connection {
    pub(crate) fn open(p: Proto) -> Self {
        let i = proto_index(p);
        events().connections[i].fetch_add(1, Ordering::Relaxed);
        events().accepted[i].fetch_add(1, Ordering::Relaxed);
        Self(i)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        events().connections[self.0].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A QUIC connection's figures at its close.
pub(crate) fn quic_closed(rtt: Duration, lost: u64, sent: u64, cwnd: u64) {
    let mut q = events().quic.lock().unwrap_or_else(|p| p.into_inner());
    q.rtt.observe(rtt);
    q.lost += lost;
    q.sent += sent;
    // In the duration buckets' units: megabytes for the window (0.0005 MB .. 60 MB).
    q.cwnd.observe(Duration::from_micros(cwnd));
}

/// A response compressed with codec `c` (index: `Codec::index`): `input` bytes to `output`.
pub(crate) fn compressed(c: usize, input: u64, output: u64) {
    let e = events();
    e.compressed[c].fetch_add(1, Ordering::Relaxed);
    e.compressed_in[c].fetch_add(input, Ordering::Relaxed);
    e.compressed_out[c].fetch_add(output, Ordering::Relaxed);
}

/// Labels of one member of a family: names and values.
pub(crate) type Labels = Vec<(&'static str, String)>;

/// What the members of a family the layers above add at each scrape are.
pub(crate) enum Members {
    Counters(Vec<(Labels, u64)>),
    Gauges(Vec<(Labels, i64)>),
    /// Counts per bucket of [`BUCKETS`] (the last: above them all), and the sum in seconds.
    Histograms(Vec<(Labels, Vec<u64>, f64)>),
}

/// A family of metrics the layers above add at each scrape (the upstreams, the budgets): its
/// name (after `sluice_`), help, and members.
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) members: Members,
}

/// Writes families into a descriptor encoder.
struct Writer<'a, 'b>(&'a mut DescriptorEncoder<'b>);

impl Writer<'_, '_> {
    fn counters<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        members: &[(Vec<(&str, L)>, u64)],
    ) -> std::fmt::Result {
        let mut m = self.0.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, v) in members {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_ref())).collect();
            ConstCounter::new(*v).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn gauges<L: AsRef<str>>(&mut self, name: &str, help: &str, members: &[(Vec<(&str, L)>, i64)]) -> std::fmt::Result {
        let mut m = self.0.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in members {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_ref())).collect();
            ConstGauge::new(*v).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn histograms(&mut self, name: &str, help: &str, members: &[(Vec<(&str, &str)>, Hist)]) -> std::fmt::Result {
        let mut m = self.0.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (labels, h) in members {
            let (count, buckets) = h.buckets();
            m.encode_family(labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(h.sum, count, &buckets, None)?;
        }
        Ok(())
    }
}

/// The collector of one scrape: the statics above and the families given.
#[derive(Debug)]
struct Collect(Vec<Family>);

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl prometheus_client::collector::Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let mut w = Writer(&mut enc);
        write_statics(&mut w)?;
        for f in &self.0 {
            match &f.members {
                Members::Counters(m) => w.counters(f.name, f.help, m)?,
                Members::Gauges(m) => w.gauges(f.name, f.help, m)?,
                Members::Histograms(m) => {
                    let hists: Vec<(Vec<(&str, &str)>, Hist)> = m
                        .iter()
                        .map(|(labels, counts, sum)| {
                            let mut h = Hist { sum: *sum, ..Hist::default() };
                            for (a, b) in h.counts.iter_mut().zip(counts) {
                                *a = *b;
                            }
                            (labels.iter().map(|(k, v)| (*k, v.as_str())).collect(), h)
                        })
                        .collect();
                    w.histograms(f.name, f.help, &hists)?;
                }
            }
        }
        Ok(())
    }
}

/// Everything counted, in the Prometheus text format (version 0.0.4), with `extra` after.
pub(crate) fn encode(extra: Vec<Family>) -> String {
    let mut registry = prometheus_client::registry::Registry::with_prefix("sluice");
    registry.register_collector(Box::new(Collect(extra)));
    let mut out = String::new();
    // Writing into a `String` does not fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

/// Sums of every thread's counters.
struct Totals {
    requests: Vec<u64>,
    bytes_in: [u64; 3],
    bytes_out: [u64; 3],
    open: [i64; 3],
    duration: [Hist; 3],
    ttfb: [Hist; 3],
    hints: [u64; 3],
}

fn totals() -> Totals {
    let mut t = Totals {
        requests: Vec::new(),
        bytes_in: [0; 3],
        bytes_out: [0; 3],
        open: [0; 3],
        duration: [Hist::default(); 3],
        ttfb: [Hist::default(); 3],
        hints: [0; 3],
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for l in registry().locals.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        if t.requests.len() < l.requests.len() {
            t.requests.resize(l.requests.len(), 0);
        }
        for (a, b) in t.requests.iter_mut().zip(l.requests.iter()) {
            *a += load(b);
        }
        for p in 0..3 {
            t.bytes_in[p] += load(&l.bytes_in[p]);
            t.bytes_out[p] += load(&l.bytes_out[p]);
            t.open[p] += l.open[p].load(Ordering::Relaxed);
            for (h, (counts, ns)) in [
                (&mut t.duration[p], (&l.duration[p], &l.duration_ns[p])),
                (&mut t.ttfb[p], (&l.ttfb[p], &l.ttfb_ns[p])),
            ] {
                for (a, b) in h.counts.iter_mut().zip(counts.iter()) {
                    *a += load(b);
                }
                h.sum += load(ns) as f64 / 1e9;
            }
            t.hints[p] += load(&l.hints[p]);
        }
    }
    t
}

/// The request, connection and event metrics.
fn write_statics(w: &mut Writer<'_, '_>) -> std::fmt::Result {
    let total = totals();
    let open = total.open;
    let routes = registry().routes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut requests = Vec::new();
    for (i, n) in total.requests.iter().enumerate().filter(|(_, n)| **n > 0) {
        let (class, rest) = (i % 5, i / 5);
        let (proto, route) = (rest % 3, rest / 3);
        let (site, path) = routes.get(route).cloned().unwrap_or_default();
        requests.push((
            vec![
                ("protocol", PROTOS[proto].to_owned()),
                ("site", site),
                ("route", path),
                ("class", CLASSES[class].to_owned()),
            ],
            *n,
        ));
    }
    w.counters("requests", "Requests answered, by protocol, site, route and status class", &requests)?;
    let by_proto = |v: &[u64; 3]| -> Vec<(Vec<(&str, &str)>, u64)> {
        (0..3).map(|p| (vec![("protocol", PROTOS[p])], v[p])).collect()
    };
    w.counters("request_body_bytes", "Request body bytes received", &by_proto(&total.bytes_in))?;
    w.counters("response_body_bytes", "Response body bytes handed to connections", &by_proto(&total.bytes_out))?;
    let hist = |h: &[Hist; 3]| -> Vec<(Vec<(&str, &str)>, Hist)> {
        (0..3).map(|p| (vec![("protocol", PROTOS[p])], h[p])).collect()
    };
    w.histograms(
        "request_duration_seconds",
        "From the request's arrival to the end of its response",
        &hist(&total.duration),
    )?;
    w.histograms(
        "time_to_first_byte_seconds",
        "From the request's arrival to its response head being ready",
        &hist(&total.ttfb),
    )?;
    let streams: Vec<(Vec<(&str, &str)>, i64)> = (0..3).map(|p| (vec![("protocol", PROTOS[p])], open[p])).collect();
    w.gauges("open_requests", "HTTP/1.1 requests being answered; HTTP/2 and HTTP/3 streams open", &streams)?;
    let hints: Vec<(Vec<(&str, &str)>, u64)> = ["configured", "learned", "upstream"]
        .iter()
        .enumerate()
        .map(|(i, s)| (vec![("source", *s)], total.hints[i]))
        .collect();
    w.counters(
        "early_hints_responses",
        "Requests answered with a 103 Early Hints, by where its links came from",
        &hints,
    )?;
    let e = events();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let conns: Vec<(Vec<(&str, &str)>, i64)> =
        (0..3).map(|p| (vec![("protocol", PROTOS[p])], e.connections[p].load(Ordering::Relaxed))).collect();
    w.gauges(
        "open_connections",
        "Connections open, by protocol (HTTP/1.1 and HTTP/2: after ALPN or the cleartext sniff)",
        &conns,
    )?;
    let accepted: Vec<(Vec<(&str, &str)>, u64)> =
        (0..3).map(|p| (vec![("protocol", PROTOS[p])], load(&e.accepted[p]))).collect();
    w.counters("connections", "Connections served, by protocol", &accepted)?;
    w.counters(
        "tls_handshakes",
        "TLS handshakes over TCP, by result (resumed: a session ticket or ID accepted; failed: includes timeouts)",
        &[
            (vec![("result", "full")], load(&e.tls_ok)),
            (vec![("result", "resumed")], load(&e.tls_resumed)),
            (vec![("result", "failed")], load(&e.tls_failed)),
        ],
    )?;
    w.counters(
        "quic_handshake_failures",
        "QUIC handshakes that failed or timed out",
        &[(Vec::<(&str, &str)>::new(), load(&e.quic_failed))],
    )?;
    let limits: Vec<(Vec<(&str, &str)>, u64)> =
        LIMITS.iter().enumerate().map(|(i, (_, n))| (vec![("kind", *n)], load(&e.limits[i]))).collect();
    w.counters("limits_tripped", "Limits on what a peer controls that were reached, by kind", &limits)?;
    w.counters(
        "inflight_held_bytes",
        "Bytes the in-flight bound kept out of writes that the congestion window would have taken (HTTP/2)",
        &[(Vec::<(&str, &str)>::new(), load(&e.inflight_held))],
    )?;
    w.counters(
        "inflight_limited_writes",
        "Writes the in-flight bound made smaller (HTTP/2)",
        &[(Vec::<(&str, &str)>::new(), load(&e.inflight_limited))],
    )?;
    let codecs = ["br", "zstd", "gzip"];
    let per_codec = |v: &[AtomicU64; 3]| -> Vec<(Vec<(&str, &str)>, u64)> {
        (0..3).map(|c| (vec![("codec", codecs[c])], load(&v[c]))).collect()
    };
    w.counters(
        "compressed_responses",
        "Responses sent compressed, by codec (static variants and streamed)",
        &per_codec(&e.compressed),
    )?;
    let endpoints: Vec<(Vec<(&str, &str)>, u64)> =
        SPEEDTEST_ENDPOINTS.iter().enumerate().map(|(i, n)| (vec![("endpoint", *n)], load(&e.speedtest[i]))).collect();
    w.counters("speedtest_requests", "Speed-test and responsiveness (RPM) requests, by endpoint", &endpoints)?;
    w.counters(
        "speedtest_bytes",
        "Speed-test body bytes: downloads handed to connections, uploads received",
        &[
            (vec![("direction", "download")], load(&e.speedtest_down)),
            (vec![("direction", "upload")], load(&e.speedtest_up)),
        ],
    )?;
    w.counters("compression_input_bytes", "Bytes before compression, by codec", &per_codec(&e.compressed_in))?;
    w.counters("compression_output_bytes", "Bytes after compression, by codec", &per_codec(&e.compressed_out))?;
    let q = e.quic.lock().unwrap_or_else(|p| p.into_inner());
    w.histograms("quic_closed_rtt_seconds", "Smoothed RTT of QUIC connections at their close", &[(Vec::new(), q.rtt)])?;
    w.histograms(
        "quic_closed_cwnd_megabytes",
        "Congestion window of QUIC connections at their close, in MB (the duration buckets' bounds)",
        &[(Vec::new(), q.cwnd)],
    )?;
    w.counters(
        "quic_closed_packets",
        "Packets of closed QUIC connections, sent and lost",
        &[(vec![("kind", "sent")], q.sent), (vec![("kind", "lost")], q.lost)],
    )?;
    Ok(())
}
