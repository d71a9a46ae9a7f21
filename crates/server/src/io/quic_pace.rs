//! The in-flight bound over QUIC, as glue: quinn's congestion controller (CUBIC, BBR or
//! NewReno) wrapped so that its window never exceeds what [`QuicBound`] allows (the policy,
//! and why, is in `sluice_tune::quic`).
//!
//! Two signals come from the driver through [`PaceLink`]: bytes of urgent responses (RFC 9218
//! urgency 0 and 1) it handed quinn, which the bound lets through on top of itself as the TCP
//! path does (quinn sends the most urgent stream first, so the next bytes sent are those); and
//! whether the connection has carried several urgencies (a page load), which keeps the cruise
//! gain from the start.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;
use sluice_tune::quic::QuicBound;

/// What a connection's driver tells its controller.
#[derive(Debug, Default)]
pub(crate) struct PaceLink {
    /// Urgent bytes handed to quinn and not yet counted as sent.
    urgent: AtomicU64,
    /// The connection has carried responses of several urgencies.
    guarded: AtomicBool,
}

impl PaceLink {
    /// `n` bytes of urgent data were handed to quinn: let them past the bound.
    pub(crate) fn urgent(&self, n: usize) {
        self.urgent.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Keep queues short from the start (see `sluice_tune::inflight::InflightCap::set_guarded`).
    pub(crate) fn set_guarded(&self, on: bool) {
        self.guarded.store(on, Ordering::Relaxed);
    }

    /// Count `n` bytes sent against the urgent allowance.
    fn sent(&self, n: u64) {
        let _ =
            self.urgent.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| (u > 0).then(|| u.saturating_sub(n)));
    }
}

/// Builds a bounded controller around the controller `inner` builds; one per connection (the
/// link is that connection's).
pub(crate) struct BoundedFactory {
    pub(crate) inner: Arc<dyn ControllerFactory + Send + Sync>,
    pub(crate) link: Arc<PaceLink>,
}

impl ControllerFactory for BoundedFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Bounded::new(self.inner.clone().build(now, current_mtu), self.link.clone()))
    }
}

/// A congestion controller whose window is bounded near the measured bandwidth-delay product.
pub(crate) struct Bounded {
    inner: Box<dyn Controller>,
    policy: QuicBound,
    link: Arc<PaceLink>,
}

impl Bounded {
    pub(crate) fn new(inner: Box<dyn Controller>, link: Arc<PaceLink>) -> Self {
        Self { inner, policy: QuicBound::new(), link }
    }

    /// Whether the bound, not the controller's window, limits what is sent (RFC 9002 §7.8:
    /// the controller is told its window is unused then).
    fn bound_limits(&self) -> bool {
        self.policy.limits(self.inner.window(), self.link.urgent.load(Ordering::Relaxed))
    }

    /// The bound as of the last ACK batch, if there is one.
    #[cfg(test)]
    pub(crate) fn bound(&self) -> Option<u64> {
        self.policy.bound()
    }

    /// One packet acknowledged, for the bound alone (tests).
    #[cfg(test)]
    fn acked(&mut self, now: Instant, sent: Instant, bytes: u64) {
        self.policy.on_ack(now, sent, bytes);
    }

    /// The end of an ACK batch, for the bound alone (tests).
    #[cfg(test)]
    fn end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        self.policy.on_end_acks(now, in_flight, app_limited, self.link.guarded.load(Ordering::Relaxed));
    }
}

impl Controller for Bounded {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
        self.link.sent(bytes);
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        let limited = app_limited || self.bound_limits();
        self.inner.on_ack(now, sent, bytes, limited, rtt);
        self.policy.on_ack(now, sent, bytes);
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, largest: Option<u64>) {
        let limited = app_limited || self.bound_limits();
        self.inner.on_end_acks(now, in_flight, limited, largest);
        self.policy.on_end_acks(now, in_flight, app_limited, self.link.guarded.load(Ordering::Relaxed));
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost_bytes: u64) {
        if !self.policy.on_loss(now, persistent, lost_bytes) {
            self.inner.on_congestion_event(now, sent, persistent, lost_bytes);
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.policy.window(self.inner.window(), self.link.urgent.load(Ordering::Relaxed))
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = self.inner.metrics();
        m.congestion_window = self.window();
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Self { inner: self.inner.clone_box(), policy: self.policy.clone(), link: self.link.clone() })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use sluice_tune::inflight::MIN_RTT_WINDOW;
    use std::time::Duration;

    use sluice_tune::inflight::HEADROOM;
    use sluice_tune::quic::{LOSS_TOLERANCE, SHARE_GAIN};

    const PACKET: u64 = 1_200;

    /// A controller that grows its window by every acknowledged byte and never stops: what
    /// quinn's BBR startup and CUBIC on a deep buffer amount to for the queue. The simulation
    /// grows it (quinn's `RttEstimator`, which `on_ack` takes, has no public constructor).
    #[derive(Clone)]
    struct Runaway {
        window: Arc<AtomicU64>,
        /// Congestion events that reached it.
        events: Arc<AtomicU64>,
    }

    impl Controller for Runaway {
        fn on_congestion_event(&mut self, _: Instant, _: Instant, _: bool, _: u64) {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
        fn on_mtu_update(&mut self, _: u16) {}
        fn window(&self) -> u64 {
            self.window.load(Ordering::Relaxed)
        }
        fn clone_box(&self) -> Box<dyn Controller> {
            Box::new(self.clone())
        }
        fn initial_window(&self) -> u64 {
            12_000
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any> {
            self
        }
    }

    /// What a run saw after its warm-up.
    #[derive(Debug, Default)]
    struct Seen {
        /// Largest bottleneck queue, bytes.
        max_queue: u64,
        /// Bytes acknowledged per second.
        rate: f64,
        /// Packets dropped at the queue (whole run).
        drops: u64,
    }

    /// A bottleneck in virtual time: `rate` bytes/s, a drop-tail queue of `limit` bytes, a
    /// fixed base RTT plus `extra` (another flow's standing queue, from `extra_from` on). The
    /// sender sends whenever the window allows (no pacing: the worst case for the queue).
    struct Sim {
        rate: f64,
        rtt: Duration,
        limit: u64,
        extra: Duration,
        extra_from: Duration,
        /// Whether ACK batches report the sender busy (false: application-limited).
        busy: bool,
        /// Whether ACK batches reach the bound at all (false: it never gets an estimate).
        readings: bool,
    }

    impl Sim {
        fn run(&self, c: &mut Bounded, grow: &AtomicU64, secs: f64, warmup: f64) -> Seen {
            let t0 = Instant::now();
            let step = Duration::from_micros(100);
            let mut now = t0;
            let mut link_free = t0;
            // Departure times from the bottleneck of packets still queued or in service.
            let mut queue: VecDeque<Instant> = VecDeque::new();
            // (ack arrival, sent) per packet in flight, in arrival order.
            let mut acks: VecDeque<(Instant, Instant)> = VecDeque::new();
            // When the sender finds out about each dropped packet (a round trip later).
            let mut lost: VecDeque<Instant> = VecDeque::new();
            let (mut in_flight, mut pn) = (0u64, 0u64);
            let mut seen = Seen::default();
            let mut acked_after_warmup = 0u64;
            let serialise = Duration::from_secs_f64(PACKET as f64 / self.rate);
            while now - t0 < Duration::from_secs_f64(secs) {
                let measuring = now - t0 >= Duration::from_secs_f64(warmup);
                let mut batch = false;
                while acks.front().is_some_and(|&(at, _)| at <= now) {
                    let (_, sent) = acks.pop_front().unwrap();
                    c.acked(now, sent, PACKET);
                    grow.fetch_add(PACKET, Ordering::Relaxed);
                    in_flight -= PACKET;
                    batch = true;
                    if measuring {
                        acked_after_warmup += PACKET;
                    }
                }
                while lost.front().is_some_and(|&at| at <= now) {
                    lost.pop_front();
                    in_flight -= PACKET;
                }
                if batch && self.readings {
                    c.end_acks(now, in_flight, !self.busy);
                }
                while queue.front().is_some_and(|&d| d <= now) {
                    queue.pop_front();
                }
                while in_flight + PACKET <= c.window() {
                    c.on_sent(now, PACKET, pn);
                    pn += 1;
                    in_flight += PACKET;
                    // Bytes waiting (the one in service does not count).
                    let waiting = queue.len().saturating_sub(1) as u64 * PACKET;
                    if waiting + PACKET > self.limit {
                        seen.drops += 1;
                        lost.push_back(now + self.rtt);
                        continue;
                    }
                    let depart = link_free.max(now) + serialise;
                    link_free = depart;
                    queue.push_back(depart);
                    let extra = if now - t0 >= self.extra_from { self.extra } else { Duration::ZERO };
                    acks.push_back((depart + self.rtt + extra, now));
                    if measuring {
                        seen.max_queue = seen.max_queue.max(queue.len().saturating_sub(1) as u64 * PACKET);
                    }
                }
                now += step;
            }
            seen.rate = acked_after_warmup as f64 / (secs - warmup);
            seen
        }
    }

    fn bounded(window: u64) -> (Bounded, Arc<AtomicU64>, Arc<PaceLink>) {
        let (c, grow, link, _) = bounded_counting(window);
        (c, grow, link)
    }

    /// As [`bounded`], with the count of congestion events that reach the controller.
    fn bounded_counting(window: u64) -> (Bounded, Arc<AtomicU64>, Arc<PaceLink>, Arc<AtomicU64>) {
        let grow = Arc::new(AtomicU64::new(window));
        let events = Arc::new(AtomicU64::new(0));
        let link = Arc::new(PaceLink::default());
        let inner = Runaway { window: grow.clone(), events: events.clone() };
        (Bounded::new(Box::new(inner), link.clone()), grow, link, events)
    }

    /// 5 Mbit/s × 40 ms (BDP 25 kB) behind a 1 MB drop-tail queue: the pageload link.
    fn slow_link() -> Sim {
        Sim {
            rate: 625_000.0,
            rtt: Duration::from_millis(40),
            limit: 1_000_000,
            extra: Duration::ZERO,
            extra_from: Duration::MAX,
            busy: true,
            readings: true,
        }
    }

    #[test]
    fn a_runaway_window_fills_the_queue_without_the_bound() {
        // The control: with no readings the bound has no estimate, the runaway window decides,
        // and the simulated queue fills.
        let (mut c, grow, _) = bounded(12_000);
        let seen = Sim { readings: false, ..slow_link() }.run(&mut c, &grow, 4.0, 1.0);
        assert!(seen.drops > 0 && seen.max_queue > 900_000, "{seen:?}");
        // Readings that never count as busy (every batch application-limited) still give the
        // bound a floor from what those rounds delivered; with the startup gain it holds.
        let (mut c, grow, _) = bounded(12_000);
        let seen = Sim { busy: false, ..slow_link() }.run(&mut c, &grow, 4.0, 1.0);
        assert!(seen.drops == 0 && seen.max_queue < 50_000, "{seen:?}");
    }

    #[test]
    fn the_bound_keeps_the_queue_short_and_the_link_full() {
        let (mut c, grow, _) = bounded(12_000);
        let seen = slow_link().run(&mut c, &grow, 6.0, 2.0);
        let bdp = 25_000.0;
        assert_eq!(seen.drops, 0, "{seen:?}");
        assert!(seen.rate >= 0.95 * 625_000.0, "{seen:?}");
        // The cruise bound: 1.25 × BDP, 5 ms of slack and 4 kB; what exceeds the BDP queues
        // (about 13 kB here, against the 1 MB the runaway window alone fills).
        assert!((seen.max_queue as f64) < 0.6 * bdp, "{seen:?}");
        assert!(grow.load(Ordering::Relaxed) > 1_000_000, "the inner window ran away meanwhile");
        let b = c.bound().unwrap();
        assert!((30_000..45_000).contains(&b), "{b}");
        assert_eq!(c.window(), b);
    }

    #[test]
    fn the_bound_may_exceed_the_controllers_window_only_on_short_clean_paths() {
        // 5 Mbit/s × 40 ms: both limit.
        let (mut c, grow, _) = bounded(12_000);
        let _ = slow_link().run(&mut c, &grow, 2.0, 1.0);
        let b = c.bound().unwrap();
        grow.store(b / 2, Ordering::Relaxed);
        assert_eq!(c.window(), b / 2);
        // 1 Gbit/s × 0.2 ms: the bound (mostly its 5 ms of slack) decides.
        let (mut f, g, _) = bounded(12_000);
        let fast = Sim { rate: 125_000_000.0, rtt: Duration::from_micros(200), limit: 10_000_000, ..slow_link() };
        let _ = fast.run(&mut f, &g, 0.3, 0.2);
        let fb = f.bound().unwrap();
        g.store(fb / 4, Ordering::Relaxed);
        assert_eq!(f.window(), fb);
        // Heavy loss: the controller's smaller window decides again.
        let t = Instant::now() + Duration::from_secs(3);
        for _ in 0..1_000 {
            f.acked(t, t, PACKET);
        }
        for _ in 0..1_000 {
            f.on_congestion_event(t, t, false, PACKET);
        }
        assert!(f.policy.loss_fraction() > LOSS_TOLERANCE);
        assert_eq!(f.window(), fb / 4);
    }

    #[test]
    fn urgent_bytes_go_past_the_bound_once() {
        let (mut c, grow, link) = bounded(12_000);
        let _ = slow_link().run(&mut c, &grow, 2.0, 1.0);
        let b = c.bound().unwrap();
        link.urgent(50_000);
        assert_eq!(c.window(), b + 50_000);
        let t = Instant::now();
        for pn in 0..40 {
            c.on_sent(t, PACKET, pn);
        }
        assert_eq!(c.window(), b + 2_000);
        c.on_sent(t, PACKET, 41);
        assert_eq!(c.window(), b + 800);
        c.on_sent(t, PACKET, 42);
        assert_eq!(c.window(), b, "the allowance is used up, not overdrawn");
        // The controller's window bounds urgent data.
        grow.store(b + 10_000, Ordering::Relaxed);
        link.urgent(50_000);
        assert_eq!(c.window(), b + 10_000);
    }

    #[test]
    fn a_page_load_keeps_the_cruise_gain_from_the_start() {
        // Two connections in startup, one guarded: its bound is the smaller.
        let (mut plain, g1, _) = bounded(12_000);
        let (mut guarded, g2, link) = bounded(12_000);
        link.set_guarded(true);
        let _ = slow_link().run(&mut plain, &g1, 0.2, 0.1);
        let _ = slow_link().run(&mut guarded, &g2, 0.2, 0.1);
        let (p, g) = (plain.bound().unwrap(), guarded.bound().unwrap());
        assert!(g < p, "guarded {g}, plain {p}");
    }

    #[test]
    fn another_flows_standing_queue_is_learnt_within_two_rtt_windows() {
        // From 3 s on every packet also waits 200 ms in a queue another flow keeps full. With a
        // lifetime minimum RTT and no contention rule the bound would settle near 1.25 × rate ×
        // 40 ms: a sixth of the link. The bound steps aside while that queue stands, and the
        // windowed minimum learns the new RTT; the rate comes back.
        let (mut c, grow, _) = bounded(12_000);
        let sim = Sim { extra: Duration::from_millis(200), extra_from: Duration::from_secs(3), ..slow_link() };
        let secs = 3.0 + 2.0 * MIN_RTT_WINDOW.as_secs_f64() + 5.0;
        let seen = sim.run(&mut c, &grow, secs, secs - 3.0);
        assert!(seen.rate >= 0.8 * 625_000.0, "{seen:?}");
    }

    #[test]
    fn against_another_flows_queue_the_window_holds_the_rate() {
        // A controller whose window stays small (quinn's BBR sizes it from the lifetime
        // minimum RTT), and from 2 s on another flow's 300 ms standing queue. Alone that
        // window carries 20 kB per 340 ms, 9 % of the link. Its ACKs come once a round trip,
        // so the verdict's eight rounds take about 3 s.
        let fixed = Arc::new(AtomicU64::new(20_000));
        let inner = Runaway { window: fixed.clone(), events: Arc::new(AtomicU64::new(0)) };
        let mut c = Bounded::new(Box::new(inner), Arc::new(PaceLink::default()));
        let sim = Sim { extra: Duration::from_millis(300), extra_from: Duration::from_secs(2), ..slow_link() };
        let mut alone = Bounded::new(c.inner.clone_box(), Arc::new(PaceLink::default()));
        let _ = sim.run(&mut alone, &AtomicU64::new(0), 2.0, 1.0);
        assert!(alone.policy.share().is_none() && !alone.policy.contended());
        let seen = sim.run(&mut c, &AtomicU64::new(0), 8.0, 7.0);
        assert!(c.policy.contended(), "{seen:?}");
        // The window: 0.8 × the rate estimate × the last round's RTT, above the controller's.
        let share = c.policy.share().expect("a share while contended");
        let rtt = c.policy.recent_rtt();
        assert!(rtt >= Duration::from_millis(340), "{rtt:?}");
        let expected = c.policy.max_rate() as f64 * rtt.as_secs_f64() * SHARE_GAIN + HEADROOM as f64;
        assert!((share as f64 - expected).abs() < 2.0, "{share} vs {expected}");
        assert!(share > 20_000 && c.window() == share, "share {share}, window {}", c.window());
        assert!(seen.rate > 1.5 * 20_000.0 / 0.34, "{seen:?}");
        // Heavy loss: the controller's window decides again.
        let t = Instant::now() + Duration::from_secs(5);
        for _ in 0..100 {
            c.on_congestion_event(t, t, false, PACKET);
        }
        assert_eq!(c.window(), 20_000);
    }

    #[test]
    fn random_loss_stays_with_the_bound_and_heavy_loss_does_not() {
        // No bound yet: every loss is the controller's.
        let (mut fresh, _, _, events) = bounded_counting(12_000);
        let t = Instant::now();
        fresh.on_congestion_event(t, t, false, PACKET);
        assert_eq!(events.load(Ordering::Relaxed), 1);

        let (mut c, grow, _, events) = bounded_counting(12_000);
        let _ = slow_link().run(&mut c, &grow, 2.0, 1.0);
        assert!(c.bound().is_some());
        let t = Instant::now() + Duration::from_secs(3);
        // 0.5 % loss: one packet in two hundred.
        for i in 0..1_000u64 {
            c.acked(t, t, PACKET);
            if i % 200 == 0 {
                c.on_congestion_event(t, t, false, PACKET);
            }
        }
        assert_eq!(events.load(Ordering::Relaxed), 0, "random loss under the bound");
        // Persistent congestion and ECN marks (no bytes lost) always reach the controller.
        c.on_congestion_event(t, t, true, PACKET);
        c.on_congestion_event(t, t, false, 0);
        assert_eq!(events.load(Ordering::Relaxed), 2);
        // Five per cent: a shallow buffer or a policer, not chance.
        for _ in 0..60 {
            c.on_congestion_event(t, t, false, PACKET);
        }
        assert!(events.load(Ordering::Relaxed) > 2 + 30, "{}", events.load(Ordering::Relaxed));
    }

    #[test]
    fn the_controller_is_told_its_window_is_unused_while_the_bound_limits() {
        let (mut c, grow, _) = bounded(12_000);
        assert!(!c.bound_limits(), "no bound yet");
        let _ = slow_link().run(&mut c, &grow, 2.0, 1.0);
        // The runaway window is far above the bound now.
        assert!(c.bound_limits());
        grow.store(c.bound().unwrap() / 2, Ordering::Relaxed);
        assert!(!c.bound_limits(), "the bound is above the controller's window: not limiting it");
    }
}
