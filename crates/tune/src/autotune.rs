//! Receive-window autotuners (pure: time and RTT are passed in) and the process-wide memory
//! budget they draw on.
//!
//! A fixed HTTP/2 receive window caps an upload at window ÷ RTT (nginx's 128 KiB buffer gives
//! 0.24 of HTTP/1.1's upload rate at 40 ms; `docs/protocols.md`, flow control). The
//! tuners here grow each stream's window from what it measures, under three bounds: a
//! per-stream cap, a per-connection cap, and a [`MemoryBudget`] shared by every connection of
//! the process. When the budget is spent, growth stops; a stream never goes below its initial
//! window, so nothing stalls.
//!
//! - [`AutoTune`] (the default): every RTT, the bytes the stream delivered in that RTT plus
//!   10 ms (data waits for a receiving process that is not running, and so does its credit);
//!   while that is at least half the window the sender is window-limited and the window
//!   doubles, otherwise it is raised to twice that (2 × rate × (RTT + 10 ms)). The same
//!   test runs each time credit is handed back (every half window): half a window consumed in
//!   less than one RTT doubles the window at once, so growth keeps up with a sender in slow
//!   start. Growth stops once the window exceeds twice what one RTT and the 10 ms carry, so
//!   the steady state is at most 4 × rate × (RTT + 10 ms). A request body whose length is
//!   declared (content-length) starts on a window that holds it all, up to the caps, drawn
//!   from the first quarter of the budget only.
//! - [`WriteupRule`]: the write-up's rule: every RTT, double when the bytes of the last RTT
//!   (its BDP estimate) exceed a quarter of the window.
//! - [`QuicheRule`]: quiche's rule: double when credit has to be handed back again within
//!   2 × RTT of the previous time.
//! - [`HyperBdp`]: hyper's estimator: the bytes received between a PING and its ACK.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::window::{TuneState, WindowPolicy, DEFAULT_WINDOW, MAX_WINDOW};

/// Memory the receive windows of all connections may grow into beyond their initial windows.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicU64::new(0) })
    }

    /// Reserve up to `want` bytes; returns what was granted (possibly 0).
    pub fn reserve(&self, want: u64) -> u64 {
        self.reserve_below(want, self.limit)
    }

    /// Reserve up to `want` bytes without taking the budget's use past `ceiling` (or its limit);
    /// returns what was granted (possibly 0).
    pub fn reserve_below(&self, want: u64, ceiling: u64) -> u64 {
        let ceiling = ceiling.min(self.limit);
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let grant = want.min(ceiling.saturating_sub(used));
            if grant == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(used, used + grant, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return grant,
                Err(now) => used = now,
            }
        }
    }

    /// Give `n` reserved bytes back.
    pub fn release(&self, n: u64) {
        self.used.fetch_sub(n.min(self.used.load(Ordering::Relaxed)), Ordering::Relaxed);
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// Bounds shared by the tuners.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Initial (and smallest) stream window: SETTINGS_INITIAL_WINDOW_SIZE.
    pub initial_stream: u32,
    /// Initial connection window.
    pub initial_connection: u32,
    /// Largest window of one stream.
    pub max_stream: u32,
    /// Largest connection window (also the cap on the sum of this connection's stream growth).
    pub max_connection: u32,
    /// The process-wide budget.
    pub budget: Arc<MemoryBudget>,
}

impl Limits {
    /// Defaults: 1 MiB initial stream window, 1 MiB initial connection window, 16 MiB per
    /// stream, 32 MiB per connection, under `budget`.
    pub fn new(budget: Arc<MemoryBudget>) -> Self {
        Self {
            initial_stream: 1 << 20,
            initial_connection: 1 << 20,
            max_stream: 16 << 20,
            max_connection: 32 << 20,
            budget,
        }
    }
}

/// Growth bookkeeping common to the tuners: caps, the connection's share and the budget.
#[derive(Debug)]
struct Grower {
    limits: Limits,
    /// Growth reserved by this connection's streams.
    conn_reserved: u64,
}

impl Grower {
    fn new(limits: Limits) -> Self {
        Self { limits, conn_reserved: 0 }
    }

    /// Raise `s.window` towards `want` as far as the caps and the budget allow.
    fn grow(&mut self, s: &mut TuneState, want: u64) -> u32 {
        self.grow_below(s, want, u64::MAX)
    }

    /// As [`Grower::grow`], taking the budget's use no further than `ceiling`.
    fn grow_below(&mut self, s: &mut TuneState, want: u64, ceiling: u64) -> u32 {
        let base = u64::from(self.limits.initial_stream);
        if s.window == 0 {
            s.window = self.limits.initial_stream;
        }
        let want = want.min(u64::from(self.limits.max_stream)).min(u64::from(MAX_WINDOW));
        let extra = want.saturating_sub(u64::from(s.window));
        if extra == 0 {
            return s.window;
        }
        let conn_room = u64::from(self.limits.max_connection).saturating_sub(base).saturating_sub(self.conn_reserved);
        let granted = self.limits.budget.reserve_below(extra.min(conn_room), ceiling);
        self.conn_reserved += granted;
        s.reserved += granted;
        s.window = (u64::from(s.window) + granted).min(u64::from(MAX_WINDOW)) as u32;
        s.window
    }

    fn close(&mut self, s: &mut TuneState) {
        self.limits.budget.release(s.reserved);
        self.conn_reserved = self.conn_reserved.saturating_sub(s.reserved);
        s.reserved = 0;
    }

    fn connection_target(&self, sum: u64) -> u32 {
        // Room for every receiving stream's window and as much again, so that connection-level
        // updates (sent at half the window) never hold a stream back.
        (2 * sum).clamp(u64::from(self.limits.initial_connection), u64::from(self.limits.max_connection)) as u32
    }
}

impl Drop for Grower {
    fn drop(&mut self) {
        // Streams still open when the connection goes: give their growth back.
        self.limits.budget.release(self.conn_reserved);
    }
}

/// Shortest measurement epoch: scheduling noise on a busy host is several milliseconds.
const EPOCH_MIN: Duration = Duration::from_millis(20);

/// Bytes delivered per RTT over the epoch that just ended, if it has lasted long enough.
fn epoch(s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> Option<u64> {
    let rtt = rtt.filter(|r| !r.is_zero())?;
    let Some(start) = s.epoch_start else {
        s.epoch_start = Some(now);
        s.epoch_base = s.received;
        return None;
    };
    let elapsed = now.saturating_duration_since(start);
    // Reads arrive in bursts (the process is descheduled, the stack coalesces): an epoch of
    // at least EPOCH_MIN averages them out on short paths.
    if elapsed < rtt.max(EPOCH_MIN) {
        return None;
    }
    let bytes = s.received - s.epoch_base;
    s.epoch_start = Some(now);
    s.epoch_base = s.received;
    Some((u128::from(bytes) * rtt.as_nanos() / elapsed.as_nanos().max(1)) as u64)
}

/// The `WindowPolicy` methods every tuner shares: initial windows from its limits, the
/// connection target and the budget release from its `Grower` (the field named).
macro_rules! grower_basics {
    ($g:tt) => {
        fn initial_stream_window(&self) -> u32 {
            self.$g.limits.initial_stream
        }
        fn initial_connection_window(&self) -> u32 {
            self.$g.limits.initial_connection.max(DEFAULT_WINDOW)
        }
        fn connection_target(&mut self, sum: u64, _: Instant) -> u32 {
            self.$g.connection_target(sum)
        }
        fn on_stream_closed(&mut self, s: &mut TuneState) {
            self.$g.close(s);
        }
    };
}

/// How long the receiving process may leave data unread (descheduled on a busy host) that
/// [`AutoTune`] makes room for: without it, a 1 Gbit/s × 2 ms upload whose receiver runs
/// every 10 ms reaches 0.84 of the link (the emulated link in the lab: h2/h1 0.83).
const RECEIVER_SLACK: Duration = Duration::from_millis(10);

/// A body's declared length may take the budget's use up to its 1/DECLARED_SHARE
/// ([`AutoTune`]'s start window).
const DECLARED_SHARE: u64 = 4;

/// The default tuner; see the module documentation.
#[derive(Debug)]
pub struct AutoTune(Grower);

impl AutoTune {
    /// A tuner with these bounds.
    pub fn new(limits: Limits) -> Self {
        Self(Grower::new(limits))
    }
}

impl WindowPolicy for AutoTune {
    grower_basics!(0);
    fn on_stream_data(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        let Some(per_rtt) = epoch(s, now, rtt) else { return s.window.max(self.0.limits.initial_stream) };
        // Credit comes back a round trip after data left the sender only if the receiving
        // process reads at once; on a busy host data and credit also wait for it to run. Count
        // RECEIVER_SLACK's worth of the rate on top of the RTT's.
        // (`epoch` gave a figure, so the RTT is known and not zero.)
        let rtt = rtt.unwrap_or_default().as_nanos().max(1);
        let per_rtt = per_rtt + (u128::from(per_rtt) * RECEIVER_SLACK.as_nanos() / rtt) as u64;
        s.last_per_rtt = per_rtt;
        let window = u64::from(s.window.max(self.0.limits.initial_stream));
        // Window-limited: the sender delivered at least half its window in one RTT.
        let want = if 2 * per_rtt >= window { 2 * window } else { 2 * per_rtt };
        self.0.grow(s, want)
    }
    fn on_stream_body(&mut self, s: &mut TuneState, declared: Option<u64>) -> u32 {
        // A body of known length starts on a window that holds all of it (up to the caps), so
        // the sender's slow start never waits on credit: on a fast, short path the epochs below
        // are too coarse to keep up with it (a 10 MiB curl upload at 1 Gbit/s × 5 ms: h2/h1 0.90
        // from the 1 MiB initial window, 0.98 started this way). Nothing has been measured yet,
        // so only the first quarter of the budget is drawn on: peers that announce large bodies
        // and send slowly cannot take the growth that measured senders need.
        let initial = self.0.limits.initial_stream;
        match declared {
            Some(n) if n > u64::from(s.window.max(initial)) => {
                let ceiling = self.0.limits.budget.limit() / DECLARED_SHARE;
                self.0.grow_below(s, n, ceiling)
            }
            _ => s.window.max(initial),
        }
    }
    fn on_stream_update(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        // Credit goes back each time half the window has been consumed. Half a window in less
        // than one RTT is the same window-limited test as above, but seen as soon as it
        // happens instead of at the end of an epoch: during slow start the sender doubles every
        // RTT, and a window that only doubles once per measured RTT stays a step behind.
        let window = u64::from(s.window.max(self.0.limits.initial_stream));
        // Only bytes the peer sent count: an update right after the window grew (the growth
        // itself makes credit due) says nothing about the sender.
        let sent = s.received - s.update_base;
        let fast = 2 * sent >= window
            && matches!((s.last_update, rtt), (Some(last), Some(rtt)) if now.saturating_duration_since(last) < rtt);
        s.last_update = Some(now);
        s.update_base = s.received;
        if fast {
            // Reads can arrive in bursts (the process was descheduled, the stack coalesced), so
            // a fast half window alone is weak evidence: never beyond four times what the last
            // whole RTT delivered. While the sender is window-limited that allows doubling.
            let cap = if s.last_per_rtt > 0 { 4 * s.last_per_rtt } else { u64::MAX };
            return self.0.grow(s, (2 * window).min(cap).max(window));
        }
        window as u32
    }
}

/// The write-up's rule; see the module documentation.
#[derive(Debug)]
pub struct WriteupRule(Grower);

impl WriteupRule {
    /// A tuner with these bounds.
    pub fn new(limits: Limits) -> Self {
        Self(Grower::new(limits))
    }
}

impl WindowPolicy for WriteupRule {
    grower_basics!(0);
    fn on_stream_data(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        let Some(bdp) = epoch(s, now, rtt) else { return s.window.max(self.0.limits.initial_stream) };
        let window = u64::from(s.window.max(self.0.limits.initial_stream));
        if 4 * bdp > window {
            return self.0.grow(s, 2 * window);
        }
        s.window.max(self.0.limits.initial_stream)
    }
}

/// quiche's rule; see the module documentation.
#[derive(Debug)]
pub struct QuicheRule(Grower);

impl QuicheRule {
    /// A tuner with these bounds.
    pub fn new(limits: Limits) -> Self {
        Self(Grower::new(limits))
    }
}

impl WindowPolicy for QuicheRule {
    grower_basics!(0);
    fn on_stream_update(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        let window = u64::from(s.window.max(self.0.limits.initial_stream));
        let soon = match (s.last_update, rtt) {
            (Some(last), Some(rtt)) => now.saturating_duration_since(last) < 2 * rtt,
            _ => false,
        };
        s.last_update = Some(now);
        if soon {
            return self.0.grow(s, 2 * window);
        }
        window as u32
    }
}

/// hyper's BDP estimator: a PING goes out with the first DATA after a pause; the bytes
/// received until its ACK are one RTT's worth, the BDP sample. When a sample is at least two
/// thirds of the current estimate and the bandwidth (sample ÷ RTT) is the highest seen, every
/// stream's window becomes twice the sample. Pings are spaced further apart while the estimate
/// holds still (hyper stretches its delay so as not to look like a PING flood).
#[derive(Debug)]
pub struct HyperBdp {
    grower: Grower,
    bdp: u64,
    max_bandwidth: f64,
    ping: Option<(u64, Instant)>,
    bytes: u64,
    next_ping: Option<Instant>,
    delay: Duration,
    token: u64,
}

impl HyperBdp {
    /// A tuner with these bounds.
    pub fn new(limits: Limits) -> Self {
        let bdp = u64::from(limits.initial_stream);
        Self {
            grower: Grower::new(limits),
            bdp,
            max_bandwidth: 0.0,
            ping: None,
            bytes: 0,
            next_ping: None,
            delay: Duration::ZERO,
            token: 0x5b_d0_00_00,
        }
    }
}

impl WindowPolicy for HyperBdp {
    grower_basics!(grower);
    fn on_stream_data(&mut self, s: &mut TuneState, _: Instant, _: Option<Duration>) -> u32 {
        self.grower.grow(s, 2 * self.bdp)
    }
    fn poll_ping(&mut self, now: Instant, bytes: u64) -> Option<u64> {
        if self.ping.is_some() {
            self.bytes += bytes;
            return None;
        }
        if self.next_ping.is_some_and(|t| now < t) {
            return None;
        }
        self.token = self.token.wrapping_add(1);
        self.ping = Some((self.token, now));
        self.bytes = bytes;
        Some(self.token)
    }
    fn on_ping_ack(&mut self, token: u64, now: Instant) {
        let Some((sent_token, sent)) = self.ping else { return };
        if token != sent_token {
            return;
        }
        self.ping = None;
        let rtt = now.saturating_duration_since(sent).max(Duration::from_micros(1));
        let bandwidth = self.bytes as f64 / rtt.as_secs_f64();
        if 3 * self.bytes >= 2 * self.bdp && bandwidth > self.max_bandwidth {
            self.max_bandwidth = bandwidth;
            self.bdp = (2 * self.bytes).min(u64::from(self.grower.limits.max_stream));
            self.delay = Duration::ZERO;
        } else {
            // The estimate held: wait longer before the next sample (at most a second).
            self.delay = (self.delay * 2 + rtt).min(Duration::from_secs(1));
        }
        self.next_ping = Some(now + self.delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: u64) -> Limits {
        Limits::new(MemoryBudget::new(budget))
    }

    /// A sender with `window` credit on a link of `rate` bytes/s and `rtt`, feeding the policy
    /// one 16 KiB frame at a time in virtual time; the receiver consumes at once and hands
    /// credit back at half the window. Returns the window after `secs` seconds and the bytes
    /// delivered in the last second.
    fn simulate(p: &mut dyn WindowPolicy, rate: f64, rtt: Duration, secs: f64) -> (u32, f64, TuneState) {
        simulate_paused(p, rate, rtt, secs, 0.0)
    }

    /// As [`simulate`], with a receiver that runs only every `pause` seconds (a busy host's
    /// scheduler): what arrived in between is read, and its credit handed back, at once.
    fn simulate_paused(
        p: &mut dyn WindowPolicy,
        rate: f64,
        rtt: Duration,
        secs: f64,
        pause: f64,
    ) -> (u32, f64, TuneState) {
        let mut s = TuneState { window: p.initial_stream_window(), ..TuneState::default() };
        let t0 = Instant::now();
        let frame = 16_384u64;
        let mut t = 0.0f64;
        // Credit the sender holds, and credit in flight back to it (arrives at time .0).
        let mut credit = u64::from(s.window);
        let mut returning: std::collections::VecDeque<(f64, u64)> = Default::default();
        let mut unreturned = 0u64;
        let mut last_second = 0u64;
        let mut pings: std::collections::VecDeque<(Instant, u64)> = Default::default();
        let half_rtt = rtt.as_secs_f64() / 2.0;
        while t < secs {
            while returning.front().is_some_and(|&(at, _)| at <= t) {
                credit += returning.pop_front().map(|(_, n)| n).unwrap_or(0);
            }
            if credit < frame {
                // Window-limited: wait for the next credit.
                t = returning.front().map_or(t + 0.001, |&(at, _)| at);
                continue;
            }
            credit -= frame;
            t += frame as f64 / rate;
            let arrive = if pause > 0.0 { ((t + half_rtt) / pause).ceil() * pause } else { t + half_rtt };
            s.received += frame;
            let before = s.window;
            let now = t0 + Duration::from_secs_f64(arrive);
            while pings.front().is_some_and(|&(at, _)| at <= now) {
                if let Some((at, token)) = pings.pop_front() {
                    p.on_ping_ack(token, at);
                }
            }
            if let Some(token) = p.poll_ping(now, frame) {
                pings.push_back((now + rtt, token));
            }
            let w = p.on_stream_data(&mut s, now, Some(rtt));
            if w > before {
                // A larger window is granted with the next update.
                unreturned += u64::from(w - before);
            }
            unreturned += frame;
            if unreturned >= u64::from(s.window) / 2 {
                // As the engine does: growth decided at an update goes out with that update.
                let before = s.window;
                let w = p.on_stream_update(&mut s, now, Some(rtt));
                if w > before {
                    unreturned += u64::from(w - before);
                }
                returning.push_back((arrive + half_rtt, unreturned));
                unreturned = 0;
            }
            if t > secs - 1.0 {
                last_second += frame;
            }
        }
        (s.window, last_second as f64, s.clone())
    }

    const MBIT: f64 = 1e6 / 8.0;

    #[test]
    fn autotune_reaches_the_link_rate_and_stays_under_four_bdp() {
        for (rate_mbit, rtt_ms) in [(200.0, 40), (200.0, 10), (1000.0, 2), (50.0, 100)] {
            let rate = rate_mbit * MBIT;
            let rtt = Duration::from_millis(rtt_ms);
            let mut p = AutoTune::new(limits(1 << 30));
            let (window, last, _) = simulate(&mut p, rate, rtt, 6.0);
            let bdp = rate * rtt.as_secs_f64();
            assert!(last >= 0.95 * rate, "{rate_mbit} Mbit/s × {rtt_ms} ms: {:.0} of {rate:.0} B/s", last);
            assert!(f64::from(window) <= 4.0 * bdp.max(f64::from(1u32 << 20)), "window {window} vs BDP {bdp:.0}");
        }
    }

    #[test]
    fn autotune_reaches_the_link_rate_with_a_receiver_that_runs_every_few_milliseconds() {
        // The receiving process runs every 10 ms: data waits for it, and so does the credit.
        for (rate_mbit, rtt_ms) in [(1000.0, 2), (200.0, 10), (200.0, 40)] {
            let rate = rate_mbit * MBIT;
            let rtt = Duration::from_millis(rtt_ms);
            let mut p = AutoTune::new(limits(1 << 30));
            let (window, last, _) = simulate_paused(&mut p, rate, rtt, 6.0, 0.010);
            assert!(
                last >= 0.95 * rate,
                "{rate_mbit} Mbit/s × {rtt_ms} ms: {last:.0} of {rate:.0} B/s, window {window}"
            );
        }
    }

    #[test]
    fn fixed_window_is_window_limited() {
        let rate = 200.0 * MBIT;
        let rtt = Duration::from_millis(40);
        let mut p = crate::window::FixedWindows { stream: 128 * 1024, connection: 1 << 20 };
        let (_, last, _) = simulate(&mut p, rate, rtt, 3.0);
        // 128 KiB per 40 ms is 3.3 MB/s, an eighth of the link.
        assert!(last < 0.2 * rate, "{last}");
    }

    #[test]
    fn link_limited_sender_does_not_grow_the_window() {
        // 10 Mbit/s × 10 ms: BDP 12.5 KB, far below the 1 MiB initial window.
        let mut p = AutoTune::new(limits(1 << 30));
        let (window, _, _) = simulate(&mut p, 10.0 * MBIT, Duration::from_millis(10), 3.0);
        assert_eq!(window, 1 << 20);
    }

    #[test]
    fn stream_and_connection_caps_hold() {
        let mut l = limits(1 << 30);
        l.max_stream = 2 << 20;
        let mut p = AutoTune::new(l.clone());
        let (window, _, mut s) = simulate(&mut p, 1000.0 * MBIT, Duration::from_millis(100), 4.0);
        assert_eq!(window, 2 << 20);
        p.on_stream_closed(&mut s);
        assert_eq!(l.budget.used(), 0, "closing returns the reservation");
        assert_eq!(p.connection_target(100 << 20, Instant::now()), 32 << 20);
        assert_eq!(p.connection_target(0, Instant::now()), 1 << 20);
    }

    #[test]
    fn budget_pressure_stops_growth_but_never_below_initial() {
        let budget = MemoryBudget::new(300 * 1024);
        let mut a = AutoTune::new(Limits::new(budget.clone()));
        let (wa, _, _) = simulate(&mut a, 200.0 * MBIT, Duration::from_millis(40), 3.0);
        assert_eq!(u64::from(wa), (1 << 20) + 300 * 1024, "the first stream takes the whole budget");
        let mut b = AutoTune::new(Limits::new(budget.clone()));
        let (wb, last, _) = simulate(&mut b, 200.0 * MBIT, Duration::from_millis(40), 2.0);
        assert_eq!(wb, 1 << 20, "no budget left: the initial window, no stall");
        assert!(last > 0.0);
        drop(a);
        assert_eq!(budget.used(), 0, "a connection's reservations return when it goes");
    }

    #[test]
    fn a_declared_body_starts_on_a_window_that_holds_it_from_a_quarter_of_the_budget() {
        let l = limits(1 << 30);
        let mut p = AutoTune::new(l.clone());
        let mut s = TuneState { window: 1 << 20, ..TuneState::default() };
        assert_eq!(p.on_stream_body(&mut s, None), 1 << 20, "unknown length: the initial window");
        assert_eq!(p.on_stream_body(&mut s, Some(500_000)), 1 << 20, "fits the initial window");
        assert_eq!(p.on_stream_body(&mut s, Some(10_000_000)), 10_000_000);
        assert_eq!(l.budget.used(), 10_000_000 - (1 << 20));
        let mut big = TuneState { window: 1 << 20, ..TuneState::default() };
        assert_eq!(p.on_stream_body(&mut big, Some(1 << 40)), 16 << 20, "the stream cap");
        p.on_stream_closed(&mut s);
        p.on_stream_closed(&mut big);
        assert_eq!(l.budget.used(), 0);

        // 4 MiB of budget: declared lengths may take it to 1 MiB, measured growth beyond.
        let budget = MemoryBudget::new(4 << 20);
        let mut p = AutoTune::new(Limits::new(budget.clone()));
        let mut a = TuneState { window: 1 << 20, ..TuneState::default() };
        assert_eq!(p.on_stream_body(&mut a, Some(10 << 20)), 2 << 20);
        let mut b = TuneState { window: 1 << 20, ..TuneState::default() };
        assert_eq!(p.on_stream_body(&mut b, Some(10 << 20)), 1 << 20, "the declared share is spent");
        let mut q = AutoTune::new(Limits::new(budget.clone()));
        let (w, _, _) = simulate(&mut q, 200.0 * MBIT, Duration::from_millis(40), 3.0);
        assert_eq!(w, 4 << 20, "a measured sender still grows into the rest");
    }

    #[test]
    fn rtt_increase_grows_the_window_again() {
        let rate = 200.0 * MBIT;
        let mut p = AutoTune::new(limits(1 << 30));
        let (w10, _, mut s) = simulate(&mut p, rate, Duration::from_millis(10), 3.0);
        // Same stream, RTT now 40 ms: bytes per RTT quadruple, so the window grows again.
        let t0 = Instant::now() + Duration::from_secs(10);
        for i in 0..400u64 {
            s.received += 16_384;
            let now = t0 + Duration::from_micros(i * 655);
            p.on_stream_data(&mut s, now, Some(Duration::from_millis(40)));
        }
        assert!(s.window > w10, "{} > {w10}", s.window);
    }

    #[test]
    fn writeup_and_quiche_rules_grow_when_window_limited() {
        let rate = 200.0 * MBIT;
        let rtt = Duration::from_millis(40);
        let (w, last, _) = simulate(&mut WriteupRule::new(limits(1 << 30)), rate, rtt, 6.0);
        assert!(last >= 0.9 * rate && w > 256 * 1024, "writeup: {w} {last}");
        let (w, last, _) = simulate(&mut QuicheRule::new(limits(1 << 30)), rate, rtt, 6.0);
        assert!(last >= 0.9 * rate && w > 256 * 1024, "quiche: {w} {last}");
        let (w, last, _) = simulate(&mut HyperBdp::new(limits(1 << 30)), rate, rtt, 6.0);
        assert!(last >= 0.9 * rate && w > 256 * 1024, "hyper: {w} {last}");
    }

    #[test]
    fn budget_reserve_is_bounded() {
        let b = MemoryBudget::new(100);
        assert_eq!(b.reserve_below(60, 50), 50, "no further than the ceiling");
        assert_eq!(b.reserve_below(10, 50), 0);
        assert_eq!(b.reserve_below(10, 500), 10, "nor than the limit");
        b.release(60);
        assert_eq!(b.reserve(60), 60);
        assert_eq!(b.reserve(60), 40);
        assert_eq!(b.reserve(1), 0);
        b.release(100);
        assert_eq!(b.used(), 0);
    }
}
