//! How much the HTTP/2 driver may hand the kernel: bytes in flight bounded near the path's
//! bandwidth-delay product, so that a newly urgent response waits behind about one round trip
//! of older data, not behind a bottleneck queue the congestion controller filled.
//!
//! TCP_NOTSENT_LOWAT keeps unsent bytes small, but sent-and-unacknowledged bytes are bounded
//! only by the congestion window, and a window larger than the path needs becomes a queue at
//! the bottleneck (BBR's startup overshoots by design; CUBIC fills drop-tail buffers). Nothing
//! in that queue can be reordered. So the driver also bounds what it has outstanding (unacked
//! plus unsent) by
//!
//! `cap = max(max_rate × (gain × min_rtt + SLACK_TIME), MIN_BASE, MIN_SEGMENTS × MSS) + HEADROOM`
//!
//! where `max_rate` is the windowed maximum, over the last [`WINDOW_ROUNDS`] busy rounds, of the
//! rate each round delivered (the growth of TCP_INFO's bytes acknowledged, cumulatively or by
//! SACK, over the round's length) and `min_rtt` the connection's minimum RTT. The kernel's own
//! per-ACK delivery-rate samples stand in only until the first busy round has ended: they spike
//! well above the bottleneck's rate when ACKs come bunched (803 kB/s measured on a 625 kB/s link),
//! and a maximum filter keeps such a spike, with the queue it allows, for ten rounds. Beside
//! them, until then, what application-limited rounds delivered is a floor (the only estimate
//! over QUIC, which has no such samples). `gain` is
//! [`STARTUP_GAIN`] while the rate grows (the last busy round raised it by a quarter or more,
//! the threshold of BBR's full-pipe rule; [`LONE_STARTUP_GAIN`] on a connection with a single
//! stream until its RTT shows a queue), else [`CRUISE_GAIN`]: room for the congestion
//! controller's bandwidth probing, and for the rate to show growth again if the path gets
//! faster. Unlike BBR, one flat round is enough to leave the startup gain: bytes queued in
//! those rounds are what an urgent response waits behind (the HTTP/2 driver's bound leads: while
//! the rate grows it starts from a sliding one-RTT rate, and on paths with a larger BDP its first
//! ramp ends after two flat rounds; see [`InflightCap::leading`]). A connection that has carried
//! responses of several urgencies (a page load) keeps the cruise gain throughout: there a
//! critical request can come during startup too. The driver does not hold back urgencies 0
//! and 1 at all ([`URGENT`]). The slack time covers the retry timer's granularity (about a
//! millisecond) and bursty ACKs; it also leaves fast, short paths (loopback) effectively
//! uncapped. Rounds in which the driver had nothing to send do not age the estimate (an idle
//! connection keeps what it learnt); nor do rounds that were busy only part of the time.
//!
//! Pure logic: time and TCP_INFO readings are passed in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The most urgent class (RFC 9218 §4.1 urgencies 0 and 1: what browsers give documents,
/// stylesheets, fonts and blocking scripts): the in-flight bound keeps room for it, and it
/// goes at what the congestion window allows. (Holding back urgency 1 too delayed Chromium's
/// first paint by about 100 ms at 20 Mbit/s in the pageload experiment, for no gain in the
/// font's time.)
pub const URGENT: u8 = 1;

/// Gain on the estimated BDP while the delivery rate still grows (lets it double per round).
pub const STARTUP_GAIN: f64 = 2.0;
/// The same on a connection that has only ever carried one response at a time (a single
/// download; see [`InflightCap::set_lone`]): kernel BBR's startup gain (2/ln 2, about 2.89),
/// so the bound lets BBR's window grow as fast as BBR grows it. At 2 the bound held BBR's
/// startup back by about two rounds on a 200 Mbit/s × 40 ms path (0.99 of Caddy's download
/// rate in the lab); the lab's priority experiment, ten images on one connection, lost a
/// tenth of its figure at 2.89 (busy/idle 0.57 → 0.67 at 50 Mbit/s × 20 ms), hence only here,
/// and only until the ramp starts to queue (see [`queue_delay`]).
pub const LONE_STARTUP_GAIN: f64 = 2.89;
/// The smoothed RTT above the minimum by which a lone ramp is taken to fill the bottleneck's
/// queue, so that from then on it grows at [`STARTUP_GAIN`]: HyStart++'s delay-increase
/// threshold (RFC 9406 §4.2: an eighth of the minimum RTT, within 4 and 16 ms).
fn queue_delay(min_rtt: Duration) -> Duration {
    (min_rtt / 8).clamp(Duration::from_millis(4), Duration::from_millis(16))
}
/// Gain once the pipe is full: room for the congestion controller's probing (BBR probes at
/// 1.25 × the bandwidth for one round in eight).
pub const CRUISE_GAIN: f64 = 1.25;
/// Added to the cap as time at the estimated rate: the retry timer's granularity and bursty
/// ACKs would otherwise cost throughput (measured: 2 ms still cost 7 % at 500 Mbit/s × 10 ms).
pub const SLACK_TIME: Duration = Duration::from_millis(5);
/// Added to the cap: a few segments, so a tiny BDP still keeps the ACK clock going.
pub const HEADROOM: usize = 4 * 1024;
/// The cap's smallest base: about TCP's initial window (10 segments, RFC 6928), so the first
/// rounds are not slowed by rate samples taken during the TLS handshake.
pub const MIN_BASE: usize = 16 * 1024;
/// Over TCP the cap's base is also at least this many of the sender's segments: TCP_INFO counts
/// what is in flight in segments, each as a full one, and where the MSS is large a few small
/// ones outweigh [`MIN_BASE`] (on loopback, MSS 65,483, one unacknowledged 60-byte record
/// counted as 64 KiB and held a proxied small-response benchmark's writes back a millisecond
/// at a time, 4 % of them). The initial window again (RFC 6928). At an Ethernet MSS (1,448) it is
/// 14,480 bytes, under [`MIN_BASE`]: nothing changes there.
pub const MIN_SEGMENTS: usize = 10;
/// Busy rounds the maximum delivery rate is kept for.
pub const WINDOW_ROUNDS: u64 = 10;
/// The smallest write worth making when the cap is the limit; on fast paths at least what
/// the path drains in [`MIN_SEND_TIME`], so writes stay few (the cap leaves [`SLACK_TIME`] of
/// room above the BDP for it).
pub const MIN_SEND: usize = 4 * 1024;
pub const MIN_SEND_TIME: Duration = Duration::from_millis(1);
/// The estimated BDP from which a leading bound's first ramp ends after two flat rounds instead
/// of one (see [`InflightCap::leading`]): twice the smallest bound. Below it the second flat
/// round's startup gain only queued data in front of a critical response (the lab's priority
/// experiment at 5 Mbit/s × 40 ms, a 25 kB BDP: the stylesheet's busy/idle 0.95-0.99 became
/// 1.12-1.28 without this threshold, and stayed 0.95-1.00 with it).
pub const LEAD_FROM: usize = 32 * 1024;

/// The smallest minimum RTT on which a leading bound slides (see [`InflightCap::leading`]): the
/// shortest round. Below it the cap's [`SLACK_TIME`] dwarfs what a round adds, and keeping the
/// readings of the last RTT cost about 120 instructions per small response on loopback
/// (`scripts/bench-callgrind.sh`: 7,825 against 7,700 without), a connection there being
/// in its ramp for most of its life (its rounds are seldom busy, so few end it).
pub const SLIDE_FROM_RTT: Duration = Duration::from_millis(1);

/// A round's length: the minimum RTT, at least 1 ms (the retry timer's granularity).
pub(crate) fn round_len(min_rtt: Duration) -> Duration {
    min_rtt.max(Duration::from_millis(1))
}

/// How long an RTT sample counts towards [`MinRtt`]: BBR's min-RTT filter length (10 s).
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// The minimum RTT over the last 10 to 20 s ([`MIN_RTT_WINDOW`] per generation, two
/// generations kept), for transports that do not keep one (QUIC: quinn's estimator keeps the
/// minimum of the connection's life).
///
/// A minimum kept for ever would shrink the bound below a fair share when a loss-based flow
/// keeps the bottleneck's queue standing: the bound's rounds would measure the delivery rate
/// at the base RTT while every byte waits behind the other flow's queue, so the bound, then
/// the rate, would fall round by round. Expiring the minimum lets the bound see the RTT the
/// path has now. The bound's own queue (a quarter of the BDP and the slack) leaves samples
/// near the base RTT in every window, so on an uncontested path the minimum does not move.
#[derive(Clone, Copy, Debug)]
pub struct MinRtt {
    /// The minimum of the previous generation and the current one.
    best: Option<Duration>,
    /// The minimum of the current generation, and when it started.
    current: Option<Duration>,
    since: Option<Instant>,
}

impl Default for MinRtt {
    fn default() -> Self {
        Self::new()
    }
}

impl MinRtt {
    pub const fn new() -> Self {
        Self { best: None, current: None, since: None }
    }

    /// Take one RTT sample at `now`.
    pub fn update(&mut self, now: Instant, rtt: Duration) {
        let since = *self.since.get_or_insert(now);
        if now.saturating_duration_since(since) >= MIN_RTT_WINDOW {
            // A new generation: the older one's samples drop out.
            self.best = self.current;
            self.current = None;
            self.since = Some(now);
        }
        self.current = Some(self.current.map_or(rtt, |c| c.min(rtt)));
        self.best = Some(self.best.map_or(rtt, |b| b.min(rtt)));
    }

    /// The minimum over the kept generations (zero before any sample).
    pub fn get(&self) -> Duration {
        self.best.unwrap_or_default()
    }
}

/// What one TCP_INFO reading contributes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Latest delivery-rate sample, bytes per second (0: none yet).
    pub delivery_rate: u64,
    /// Bytes delivered so far on the connection (a counter): over TCP, cumulatively
    /// acknowledged plus SACKed beyond a hole, so that rounds in which a loss is being
    /// repaired still count what arrived.
    pub acked: u64,
    /// Minimum RTT of the connection (zero: none yet).
    pub min_rtt: Duration,
    /// Bytes in flight: sent and neither acknowledged nor deemed lost (over TCP not the
    /// unacknowledged count, which after a loss holds everything sent since the hole, SACKed
    /// or not, and would stall the bound for a round trip per loss).
    pub in_flight: usize,
    /// Bytes written to the socket and not yet sent.
    pub notsent_bytes: usize,
    /// Over TCP, the sender's MSS, the unit `in_flight` is counted in (see [`MIN_SEGMENTS`]);
    /// 0 where it is counted in bytes (QUIC).
    pub segment: usize,
    /// Everything written was acknowledged (none unacknowledged, none unsent): until more is
    /// written, no ACK can come that would change a reading (see
    /// [`note_idle`](InflightCap::note_idle)).
    pub settled: bool,
    /// The smoothed RTT (zero: not known).
    pub srtt: Duration,
}

/// The in-flight bound of one connection.
#[derive(Clone, Debug)]
pub struct InflightCap {
    /// Per busy round: the rate it delivered.
    rounds: VecDeque<(u64, u64)>,
    /// The largest kernel delivery-rate sample, used until the first busy round has ended.
    first_rate: u64,
    round: u64,
    /// When the current round started, and the acknowledged-bytes counter then.
    round_start: Option<(Instant, u64)>,
    /// The current round was started by [`note_idle`](Self::note_idle), from the counter of
    /// an earlier reading: what it delivered is not known.
    unread_start: bool,
    /// Whether every reading in the current round found data waiting.
    busy: bool,
    /// Whether the rate still grows: the last busy round raised the maximum rate by a quarter or
    /// more (leading, during the first ramp: one of the last two did).
    growing: bool,
    /// The maximum rate at the end of the last busy round.
    last_max: u64,
    /// Busy rounds in a row that did not raise the maximum rate by a quarter.
    flat: u32,
    /// Whether a ramp has ended on a path where the bound leads (the first ramp is over).
    ramped: bool,
    /// Leading: readings of the acknowledged-bytes counter over about the last RTT, oldest
    /// first, at least an eighth of the minimum RTT apart (see [`leading`](Self::leading)).
    recent: VecDeque<(Instant, u64)>,
    /// Leading: what the last RTT delivered, bytes per second, as of the last reading.
    recent_rate: u64,
    /// See [`leading`](Self::leading).
    lead: bool,
    /// See [`set_guarded`](Self::set_guarded).
    guarded: bool,
    /// See [`set_lone`](Self::set_lone).
    lone: bool,
    /// A busy reading's smoothed RTT has been [`queue_delay`] or more above the minimum: the
    /// lone ramp has reached the bottleneck.
    queued: bool,
    /// The minimum RTT as of the last reading (see [`note_idle`](Self::note_idle)).
    min_rtt: Duration,
    /// The last reading, if it found everything acknowledged (see
    /// [`note_idle`](Self::note_idle)).
    settled: Option<Sample>,
}

impl Default for InflightCap {
    fn default() -> Self {
        Self::new()
    }
}

impl InflightCap {
    pub fn new() -> Self {
        Self {
            rounds: VecDeque::new(),
            first_rate: 0,
            round: 0,
            round_start: None,
            unread_start: false,
            busy: false,
            growing: true,
            last_max: 0,
            flat: 0,
            ramped: false,
            recent: VecDeque::new(),
            recent_rate: 0,
            lead: false,
            guarded: false,
            lone: false,
            queued: false,
            min_rtt: Duration::ZERO,
            settled: None,
        }
    }

    /// While the rate grows, the bound starts from what the last RTT delivered (acknowledged bytes
    /// over a window of one minimum RTT that slides with every reading) when that is more than the
    /// estimate, and where the estimated BDP is [`LEAD_FROM`] or more, one flat round does not end
    /// the first ramp's startup gain, two do. A round's rate is what its ACKs delivered, which is
    /// what the round before sent, and the bound it gives holds the round after: the estimate
    /// trails what is sent by two rounds. With it alone the bound doubled every second round,
    /// every other round looked flat, and the gain alternated between startup and cruise (traced
    /// over TCP at 200 Mbit/s × 40 ms: the estimate went 4, 6, 12, 23, 45, 91, 183 Mbit/s in steps
    /// of 82 ms, about twice as long as BBR's own ramp, which cost 2 % of a 200 MB download). The
    /// sliding rate trails by one RTT, so the startup gain doubles the bound once per round, as
    /// BBR's window grows, and since it is what was delivered, the bound at the ramp's end is at
    /// most twice what the path carries per RTT, as before.
    ///
    /// The sliding rate applies from the first reading, whatever the BDP (on paths whose minimum
    /// RTT is [`SLIDE_FROM_RTT`] or more): at first it applied only
    /// from an estimated BDP of [`LEAD_FROM`], and every ramp starts below that (a 16 kB window),
    /// so its first doublings still took two rounds each. Traced at 200 Mbit/s × 40 ms with 0.5 %
    /// loss (the driver's `write budget` trace): the estimate went from 0.3 to 0.8 MB/s in 184 ms
    /// and reached 22 MB/s (the link carries about 24) after 622 ms, where a client-side capture
    /// had Caddy's BBR filling the link after about 460 ms; sliding from the start, 1.1 MB/s after
    /// 180 ms and 21 MB/s after 444 ms. A faster ramp holds more in flight at any moment of it,
    /// and the socket's unsent bytes grew with it (a stylesheet asked for during the ramp waited
    /// behind 21–45 kB of them instead of 3–6), so the HTTP/2 driver now also keeps those within
    /// what pacing sends in 2 ms (`UNSENT_AHEAD` in `io/h2.rs`). On a small-BDP path the sliding
    /// rate changes only how soon the bound gets there: it is at most what was delivered, and one
    /// flat round still ends the startup gain. Not on a guarded connection. The HTTP/2 driver's
    /// bound leads; the one over QUIC does not (in the same lab run HTTP/3 downloads reached
    /// 183.5 Mbit/s where HTTP/2 reached 179.9).
    pub fn leading(mut self) -> Self {
        self.lead = true;
        self
    }

    /// Keep the readings of about the last RTT and what they delivered (see `leading`).
    fn track_recent(&mut self, now: Instant, s: &Sample) {
        let rtt = s.min_rtt;
        if rtt.is_zero() {
            return;
        }
        if self.recent.back().is_none_or(|&(t, _)| now.saturating_duration_since(t) >= rtt / 8) {
            self.recent.push_back((now, s.acked));
        }
        // Keep the newest reading that is at least one RTT old, and none older.
        while self.recent.get(1).is_some_and(|&(t, _)| now.saturating_duration_since(t) >= rtt) {
            self.recent.pop_front();
        }
        self.recent_rate = match self.recent.front() {
            Some(&(t, acked)) if now.saturating_duration_since(t) >= rtt => {
                let span = now.saturating_duration_since(t).as_secs_f64();
                (s.acked.saturating_sub(acked) as f64 / span) as u64
            }
            _ => 0,
        };
    }

    /// Only a ramp needs the readings of the last RTT: a connection past it holds none (one that
    /// goes idle during its ramp keeps the few it has).
    fn forget_recent(&mut self) {
        if self.recent.capacity() > 0 {
            self.recent = VecDeque::new();
            self.recent_rate = 0;
        }
    }

    /// Feed one reading; `busy`: the driver has data waiting to be framed (the sample is not
    /// limited by the application).
    pub fn update(&mut self, now: Instant, s: &Sample, busy: bool) {
        self.settled = s.settled.then_some(*s);
        self.min_rtt = s.min_rtt;
        // Once a measured round is in (the handshake's and the first flight's RTT samples are
        // behind), a queue that a busy ramp builds shows as RTT above the minimum.
        if busy && !self.rounds.is_empty() && !s.srtt.is_zero() && !s.min_rtt.is_zero() {
            self.queued |= s.srtt >= s.min_rtt + queue_delay(s.min_rtt);
        }
        if self.ramping() {
            self.track_recent(now, s);
        } else {
            self.forget_recent();
        }
        if self.rounds.is_empty() {
            self.first_rate = self.first_rate.max(s.delivery_rate);
        }
        let Some((start, start_acked)) = self.round_start else {
            self.round_start = Some((now, s.acked));
            self.busy = busy;
            return;
        };
        let round_len = round_len(s.min_rtt);
        let elapsed = now.saturating_duration_since(start);
        if elapsed < round_len {
            self.busy &= busy;
            return;
        }
        // A round ended. Only rounds in which the driver had data waiting at every reading, with
        // no long silence between readings, measure the path; the others (application-limited,
        // or spanning an idle gap) neither age the estimate nor count towards a full pipe.
        let measured = self.busy && busy && elapsed <= 2 * round_len;
        let known = !std::mem::take(&mut self.unread_start);
        self.round_start = Some((now, s.acked));
        self.busy = busy;
        let delivered = s.acked.saturating_sub(start_acked);
        let rate = (delivered as f64 / elapsed.as_secs_f64()).round() as u64;
        if !measured {
            // Until a busy round has ended, what an application-limited round delivered is a
            // floor under the path's rate, and the bound's only estimate where the transport
            // gives no rate samples of its own (QUIC): without it the first burst after a
            // quiet start (a page's images, requested once its stylesheet is in) goes out at
            // whatever the controller's window has grown to.
            if self.rounds.is_empty() && elapsed <= 2 * round_len && known {
                self.first_rate = self.first_rate.max(rate);
            }
            return;
        }
        if rate > 0 {
            self.rounds.push_back((self.round, rate));
        }
        let max = self.max_rate();
        if max > 0 {
            let grew = self.last_max == 0 || max as f64 >= self.last_max as f64 * 1.25;
            self.flat = if grew { 0 } else { self.flat.saturating_add(1) };
            // Leading, a connection's first ramp ends after two flat rounds: with the estimate
            // two rounds behind, every other round of it can look flat. Later growth (a faster
            // path, or bunched ACKs) keeps the one-round rule.
            let leads = self.leads_at(max, s.min_rtt);
            let flat_rounds = if leads && !self.ramped { 2 } else { 1 };
            self.growing = self.flat < flat_rounds;
            self.ramped |= !self.growing && leads;
            self.last_max = max;
        }
        self.round += 1;
        while self.rounds.front().is_some_and(|&(r, _)| r + WINDOW_ROUNDS <= self.round) {
            self.rounds.pop_front();
        }
    }

    /// Note that the driver had nothing to send at `now` without a TCP_INFO reading, where a
    /// reading would mostly tell [`update`](Self::update) (`busy` false) nothing more: outside
    /// a leading ramp, once there is an estimate. Then such a reading only marks the
    /// round in progress as not busy or, if the round has run its length (the minimum RTT as of
    /// the last reading, at least 1 ms), ends it unmeasured and starts the next one not busy;
    /// that one ends unmeasured too, so the count of acknowledged bytes it starts from is never
    /// read. A leading ramp keeps the readings of the last RTT, and before there is any
    /// estimate (no busy round ended, no kernel delivery-rate sample, no application-limited
    /// round) what an application-limited round delivered is the floor: there this notes
    /// nothing and returns false, and the driver reads. Before a busy round has ended, such a
    /// reading could still raise the floor above the kernel's samples that earlier readings
    /// gave; a moment noted instead leaves the estimate lower, never higher. That was a reading
    /// at nearly every idle moment of a connection that carries only small responses (its
    /// rounds are never busy throughout, so none ends measured): 0.01–0.06 TCP_INFO calls per
    /// proxied request on a quiet machine, up to 0.19 on a loaded one (the writes' own: 0.42).
    ///
    /// The HTTP/2 driver notes its idle moments every 250 µs at most (`IDLE_READING_EVERY`);
    /// as readings they were a system call (about 0.55 µs here) for every third small response
    /// a proxied connection carried.
    ///
    /// `quiet`: nothing was written since the last reading. If that reading found everything
    /// acknowledged, a new one would read the same (no ACK can have come, so the counters, the
    /// delivery-rate sample and the minimum RTT stand), and it is replayed instead, whatever
    /// the state: a connection that only receives (an upload, answered with WINDOW_UPDATEs now
    /// and then) made a TCP_INFO reading every 250 µs, about one per 64 KiB read.
    pub fn note_idle(&mut self, now: Instant, quiet: bool) -> bool {
        if let Some(s) = self.settled.filter(|_| quiet) {
            self.update(now, &s, false);
            return true;
        }
        if self.rounds.is_empty() && self.first_rate == 0 || self.ramping() {
            return false;
        }
        let Some((start, acked)) = self.round_start else { return false };
        self.forget_recent();
        if now.saturating_duration_since(start) >= round_len(self.min_rtt) {
            self.round_start = Some((now, acked));
            self.unread_start = true;
        }
        self.busy = false;
        true
    }

    /// The largest rate a busy round in the window delivered, bytes per second (before the
    /// first busy round has ended: the largest of the kernel's samples).
    pub fn max_rate(&self) -> u64 {
        self.rounds.iter().map(|&(_, r)| r).max().unwrap_or(self.first_rate)
    }

    /// Whether the rate grew in the last busy round.
    #[cfg(test)]
    pub fn growing(&self) -> bool {
        self.growing
    }

    /// Keep queues short from the start: the cruise gain even while the rate grows. The driver
    /// sets it once a connection has carried responses of several urgencies (a page load):
    /// then a critical response can arrive at any moment, startup included, and the rate still
    /// grows by a quarter per round. A single download keeps the faster ramp.
    pub fn set_guarded(&mut self, on: bool) {
        self.guarded = on;
    }

    /// Grow as BBR's startup does ([`LONE_STARTUP_GAIN`]) while the rate grows and the RTT
    /// shows no queue: the HTTP/2
    /// driver starts each connection so ([`lone`](Self::lone)) and turns it off for good once
    /// the connection has had more than one stream open, or a response at urgency 0 or 1 (a
    /// single download has no other response to wait behind the queue it builds; a browser's
    /// document is urgent, and urgent requests follow it). Off by default.
    ///
    /// A single download can still be followed by an urgent request, and what its ramp queued
    /// at the bottleneck cannot be recalled: the lab's `priority` experiment, case
    /// `50mbit-20ms-lone` (a 10 MB download, a stylesheet asked for after 500 kB of it, at the
    /// end of the ramp), had the stylesheet take 64–73 ms at 2.89 against 51 at 2 (54 alone).
    /// BBR's startup fills the queue only in its last rounds, when the window outgrows the path,
    /// and that shows at once as RTT above the minimum: from the first busy reading with a
    /// smoothed RTT [`queue_delay`] above it, the ramp goes on at [`STARTUP_GAIN`], so the queue
    /// ends as a gain of 2 leaves it, and the rounds before it ramp as BBR does.
    pub fn set_lone(&mut self, on: bool) {
        self.lone = on;
    }

    /// The same as [`set_lone`](Self::set_lone)`(true)`, for a new connection's bound.
    pub fn lone(mut self) -> Self {
        self.lone = true;
        self
    }

    /// Whether the bound needs every reading it can get: in a leading ramp, which keeps the
    /// readings of the last RTT (see [`leading`](Self::leading)).
    pub fn ramping(&self) -> bool {
        self.growing && self.slides()
    }

    /// Whether the bound starts from what the last RTT delivered while the rate grows: leading,
    /// not guarded, and on a path whose minimum RTT is [`SLIDE_FROM_RTT`] or more.
    fn slides(&self) -> bool {
        self.lead && !self.guarded && self.min_rtt >= SLIDE_FROM_RTT
    }

    /// Whether a first ramp on this path ends after two flat rounds: the bound slides, and the
    /// estimated BDP (at `max_rate`) is [`LEAD_FROM`] or more.
    fn leads_at(&self, max_rate: u64, min_rtt: Duration) -> bool {
        self.slides() && max_rate as f64 * min_rtt.as_secs_f64() >= LEAD_FROM as f64
    }

    /// The gain on the estimated BDP now.
    pub fn gain(&self) -> f64 {
        if self.growing && !self.guarded {
            if self.lone && !self.queued {
                LONE_STARTUP_GAIN
            } else {
                STARTUP_GAIN
            }
        } else {
            CRUISE_GAIN
        }
    }

    /// The bound on outstanding bytes, or `None` before there is an estimate.
    pub fn cap(&self, s: &Sample) -> Option<usize> {
        let rate = self.max_rate();
        if rate == 0 || s.min_rtt.is_zero() {
            return None;
        }
        // See `leading`: while the rate grows, what the last RTT delivered, if more.
        let rate = if self.ramping() { rate.max(self.recent_rate) } else { rate };
        let time = s.min_rtt.as_secs_f64() * self.gain() + SLACK_TIME.as_secs_f64();
        Some(((rate as f64 * time) as usize).max(MIN_BASE).max(MIN_SEGMENTS * s.segment) + HEADROOM)
    }

    /// How many bytes to frame now, given what the congestion window allows (`cwnd_room`,
    /// already clamped by the caller): 0 means wait (see [`retry_after`](Self::retry_after)).
    pub fn budget(&self, s: &Sample, cwnd_room: usize) -> usize {
        let Some(cap) = self.cap(s) else { return cwnd_room };
        let left = cap.saturating_sub(s.in_flight + s.notsent_bytes);
        if left < self.min_send() {
            0
        } else {
            left.min(cwnd_room)
        }
    }

    /// The smallest write when the cap limits.
    fn min_send(&self) -> usize {
        ((self.max_rate() as f64 * MIN_SEND_TIME.as_secs_f64()) as usize).max(MIN_SEND)
    }

    /// When to look again after a budget of 0: about when ACKs at the estimated rate will have
    /// made room for the smallest write, within [1 ms, a quarter of the RTT].
    pub fn retry_after(&self, s: &Sample) -> Duration {
        let short = Duration::from_millis(1);
        let (Some(cap), rate) = (self.cap(s), self.max_rate()) else { return short };
        let deficit = (s.in_flight + s.notsent_bytes + self.min_send()).saturating_sub(cap);
        let wait = Duration::from_secs_f64(deficit as f64 / rate.max(1) as f64);
        wait.min(s.min_rtt / 4).max(short)
    }
}

#[cfg(test)]
mod tests;
