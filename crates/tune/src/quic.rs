//! The in-flight bound over QUIC, as a policy a congestion controller defers to: fed the ACKs
//! and losses a QUIC stack reports, it says how much may be in flight ([`QuicBound::window`]),
//! given the controller's own window. The driver wraps quinn's controller with it (the glue
//! is `io/quic_pace.rs` in the server).
//!
//! Why: quinn lets through whatever its controller's `window()` says is allowed, and paces at
//! 1.25 × window / smoothed RTT, not at a rate the controller computes, so every controller
//! fills the bottleneck's queue (CUBIC on a drop-tail buffer by design; quinn's BBR because
//! its window is 2 × its bandwidth estimate × min RTT plus an ACK-aggregation allowance, and
//! its startup grows by every acknowledged byte until the pipe is deemed full). The lab
//! measured up to ~370 packets queued and, with BBR, about half of all packets dropped.
//! In-flight is the one quantity quinn enforces, so that is where the bound goes.
//!
//! The inputs: bytes acknowledged (the counter rounds are measured on), the RTT of each
//! acknowledged packet (the newest of an ACK gives the smallest), and whether the connection
//! had run out of data (the "busy" of [`InflightCap::update`]). The minimum RTT is windowed
//! ([`MinRtt`]): a QUIC stack's estimator keeps the lifetime minimum, which a standing queue
//! from another flow would turn into a bound below a fair share.
//!
//! A standing queue the bound's own bytes cannot explain is another flow's: against a
//! loss-based flow that keeps a drop-tail buffer full, a bound near the BDP starves (0.8
//! Mbit/s against CUBIC's 19 on a 20 Mbit/s link). While such a queue stands ([`Contention`],
//! with its periodic probe) the bound steps aside and the controller competes, with a window
//! no smaller than what holds the connection's rate ([`SHARE_GAIN`]).
//!
//! Under the bound the controller is told its window is unused whenever the bound is the limit
//! (RFC 9002 §7.8), and losses up to [`LOSS_TOLERANCE`] of what is sent stay here: with the
//! queue kept short they are random, not congestion. On a short fast path (loopback, a LAN),
//! while losses stay within it, the bound decides alone, also above the controller's window.
//!
//! Sans-IO: time comes in with every call.

use std::time::{Duration, Instant};

use crate::contention::Contention;
use crate::inflight::{InflightCap, MinRtt, Sample, HEADROOM};

/// The loss fraction up to which a connection whose queue the bound keeps short treats losses
/// as random rather than as congestion (the threshold BBR v2 uses). Random loss says nothing
/// about the queue the bound already keeps short, and a loss-based controller fed every random
/// loss stays near the Mathis limit (HTTP/3 on CUBIC reached ~7.5 Mbit/s of a 200 Mbit/s link
/// at 0.5 % loss). Above it, or in the bound's absence, losses reach the controller: a buffer
/// shallower than the bound's quarter-BDP of queue, or a policer, loses more than that.
pub const LOSS_TOLERANCE: f64 = 0.02;

/// While the queue is another flow's, the window is at least this × the bound's rate estimate
/// × the RTT of the last round (plus the bound's headroom): what holds the rate the connection
/// has against a queue that grows under it. quinn's BBR sizes its window from the lifetime
/// minimum RTT (2 × its estimate × 40 ms where a CUBIC flow keeps 400 ms queued), so on its
/// own its rate falls round by round: it kept 0.21–0.24 of a CUBIC TCP flow's share of a 1 MB
/// buffer at 20 Mbit/s. At 1 the estimate ratchets up each time the loss-based flow backs off
/// and the queue drains under a window sized for the longer RTT (h3:tcp 1.9 and 3.2 measured);
/// below 1 it also decays while the other flow's queue grows. Measured with
/// `sluice-lab run fairness` (h3:tcp; 20 Mbit/s × 40 ms with a 1 MB buffer, then
/// 100 Mbit/s × 13 ms with 1.5 × BDP): 0.8 gave 0.59–0.64 and 0.93–1.13 (3 runs each), 0.9
/// 0.89–2.14 (9 runs) and 0.86–1.45, 0.85 0.58–0.82 (5 runs) and 0.90–1.11 (3 runs): the
/// deep buffer's outcome jumps between 0.85 and 0.9, and 0.9 once went past 2:1.
pub const SHARE_GAIN: f64 = 0.85;

/// The bound of one QUIC connection: what it learnt from ACKs and losses.
#[derive(Clone, Debug)]
pub struct QuicBound {
    cap: InflightCap,
    min_rtt: MinRtt,
    contention: Contention,
    /// Bytes acknowledged on the connection so far.
    acked: u64,
    /// The smallest RTT sample of the ACK batch being processed.
    batch_rtt: Option<Duration>,
    /// The bound as of the last ACK batch (`None`: no estimate yet, or stepped aside).
    bound: Option<u64>,
    /// The path's bandwidth-delay product is under a quarter of the bound (the slack
    /// dominates: a minimum RTT under about 1.8 ms).
    short_path: bool,
    /// Bytes lost and delivered in the current and the previous epoch of at least 8 min RTTs
    /// (and 100 ms), and when the current one started: the recent loss fraction.
    lost: [u64; 2],
    delivered: [u64; 2],
    epoch: Option<Instant>,
    /// While the queue is another flow's: the smallest window that holds the rate the
    /// connection has ([`SHARE_GAIN`]).
    share: Option<u64>,
}

impl Default for QuicBound {
    fn default() -> Self {
        Self::new()
    }
}

impl QuicBound {
    /// A connection's bound, with no estimate yet.
    pub fn new() -> Self {
        Self {
            cap: InflightCap::new(),
            min_rtt: MinRtt::new(),
            contention: Contention::default(),
            acked: 0,
            batch_rtt: None,
            bound: None,
            short_path: false,
            lost: [0; 2],
            delivered: [0; 2],
            epoch: None,
            share: None,
        }
    }

    /// Whether the bound, not the controller's window `inner`, limits what is sent. The
    /// controller is then to be told its window is not in use, as RFC 9002 §7.8 asks (an
    /// underused window must not grow): otherwise a loss-based window grows without limit
    /// under the bound and, when the bound steps aside, lets out a burst far beyond anything
    /// the path has carried.
    pub fn limits(&self, inner: u64, urgent: u64) -> bool {
        self.window(inner, urgent) < inner
    }

    /// Start a new loss epoch when the current one is old enough.
    fn roll_epoch(&mut self, now: Instant) {
        let len = (self.min_rtt.get() * 8).max(Duration::from_millis(100));
        let start = *self.epoch.get_or_insert(now);
        if now.saturating_duration_since(start) >= len {
            self.lost = [0, self.lost[0]];
            self.delivered = [0, self.delivered[0]];
            self.epoch = Some(now);
        }
    }

    /// Lost bytes as a fraction of lost and delivered ones over the last one to two epochs.
    pub fn loss_fraction(&self) -> f64 {
        let lost = (self.lost[0] + self.lost[1]) as f64;
        let all = lost + (self.delivered[0] + self.delivered[1]) as f64;
        if all > 0.0 {
            lost / all
        } else {
            0.0
        }
    }

    /// A congestion event of `lost_bytes` at `now`: whether it stays here instead of reaching
    /// the controller: the bound is keeping the queue short (it has an estimate and has not
    /// stepped aside), the loss is not persistent congestion nor an ECN mark, and recent losses
    /// are within [`LOSS_TOLERANCE`].
    pub fn on_loss(&mut self, now: Instant, persistent: bool, lost_bytes: u64) -> bool {
        self.roll_epoch(now);
        self.lost[0] += lost_bytes;
        !persistent && lost_bytes > 0 && self.bound.is_some() && self.loss_fraction() <= LOSS_TOLERANCE
    }

    /// One packet of `bytes`, sent at `sent`, was acknowledged at `now`.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) {
        self.acked += bytes;
        self.delivered[0] += bytes;
        let sample = now.saturating_duration_since(sent);
        self.batch_rtt = Some(self.batch_rtt.map_or(sample, |b| b.min(sample)));
    }

    /// The end of an ACK's batch: one reading for the bound. `guarded`: the connection has
    /// carried several urgencies (see [`InflightCap::set_guarded`]).
    pub fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, guarded: bool) {
        self.roll_epoch(now);
        if let Some(rtt) = self.batch_rtt.take() {
            self.min_rtt.update(now, rtt);
            self.contention.update(now, rtt, self.min_rtt.get(), self.cap.max_rate(), self.cap.gain());
        }
        let s = Sample {
            delivery_rate: 0,
            acked: self.acked,
            min_rtt: self.min_rtt.get(),
            in_flight: in_flight as usize,
            notsent_bytes: 0,
            segment: 0,
            // QUIC's bound is fed from ACKs, never read idle.
            settled: false,
            // Only the lone ramp reads it, and QUIC's bound is never lone.
            srtt: Duration::ZERO,
        };
        self.cap.update(now, &s, !app_limited);
        self.cap.set_guarded(guarded);
        let cap = self.cap.cap(&s).map(|c| c as u64);
        self.contention.probe(now, in_flight, cap);
        self.bound = if self.contention.contended() { None } else { cap };
        self.share = self.contention.contended().then(|| {
            let rate = self.cap.max_rate() as f64;
            (rate * self.contention.recent_rtt().as_secs_f64() * SHARE_GAIN) as u64 + HEADROOM as u64
        });
        let bdp = self.cap.max_rate() as f64 * s.min_rtt.as_secs_f64();
        self.short_path = self.bound.is_some_and(|b| 4.0 * bdp < b as f64);
    }

    /// The bound as of the last ACK batch, if there is one.
    pub fn bound(&self) -> Option<u64> {
        self.bound
    }

    /// While the queue is another flow's: the smallest window that holds the connection's rate.
    pub fn share(&self) -> Option<u64> {
        self.share
    }

    /// Whether the queue reads as another flow's (the bound has stepped aside).
    pub fn contended(&self) -> bool {
        self.contention.contended()
    }

    /// The smallest RTT sample of the last completed round.
    pub fn recent_rtt(&self) -> Duration {
        self.contention.recent_rtt()
    }

    /// The rate estimate, bytes per second.
    pub fn max_rate(&self) -> u64 {
        self.cap.max_rate()
    }

    /// The windowed minimum RTT.
    pub fn min_rtt(&self) -> Duration {
        self.min_rtt.get()
    }

    /// What may be in flight, given the controller's window `inner` and `urgent` bytes of
    /// urgent responses (RFC 9218 urgency 0 and 1) handed to the stack and not yet sent, which
    /// go past the bound as far as the controller's window allows.
    pub fn window(&self, inner: u64, urgent: u64) -> u64 {
        let Some(bound) = self.bound else {
            // Another flow's queue: the controller competes, with at least the window that
            // holds the connection's rate, while losses stay within the tolerance.
            return match self.share {
                Some(share) if self.loss_fraction() <= LOSS_TOLERANCE => inner.max(share),
                _ => inner,
            };
        };
        let window = inner.min(bound.saturating_add(urgent));
        if self.short_path && self.loss_fraction() <= LOSS_TOLERANCE {
            // A short, fast, clean path (the bound is mostly its 5 ms of slack: loopback, a
            // LAN): the bound decides, also above the controller's window. quinn's BBR keeps
            // its window at 2 × its bandwidth estimate × min RTT, which where the RTT is
            // mostly queueing in a busy receiver held HTTP/3 to 6–7 Gbit/s on loopback where
            // CUBIC, or the bound, reached 9–11. On longer paths both limit, as measured in
            // the lab (a build where the bound alone decided everywhere saw queue peaks of 125
            // packets in page loads at 5 Mbit/s, later traced to the bound's missing first
            // estimate, now a floor: the rule is kept as the measured configuration).
            window.max(bound)
        } else {
            window
        }
    }
}
