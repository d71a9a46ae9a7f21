//! How much one write may carry: what the congestion window can take now (TCP_INFO), what
//! the in-flight bound (`sluice_tune::inflight`) leaves, with room kept for urgent data, and
//! what is left of the last reading for the writes close behind it.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use sluice_tune::inflight::{InflightCap, URGENT};

/// Smallest and largest fill of one write.
pub(super) const MIN_WRITE: usize = 16 * 1024;
const MAX_WRITE: usize = 1024 * 1024;
/// How long a TCP_INFO reading's allowance serves later writes (see [`Allowance`]).
const ALLOWANCE_FOR: std::time::Duration = std::time::Duration::from_millis(1);

/// With the in-flight bound, bytes not yet sent that the socket may hold: what its pacing sends
/// in this long (at least [`MIN_WRITE`]). They wait in the socket, in front of anything written
/// after them, urgent responses included, and the kernel's TCP_NOTSENT_LOWAT does not bound
/// them: one write fills the socket to that mark and one buffer of up to 64 KiB beyond it. Where
/// the bound allows more than BBR's pacing sends (its ramp, which leads BBR's estimate), a
/// write of all of it queued there: the lab's priority experiment at 50 Mbit/s × 20 ms found
/// 21–45 kB unsent when its stylesheet was asked for, busy/idle 0.58–0.62 against 0.54–0.55
/// with a slower ramp; with this limit 0.56 and 0.56 (against 0.57 and 0.55, 5 runs each).
const UNSENT_AHEAD: std::time::Duration = std::time::Duration::from_millis(2);

/// Of `budget`, what keeps the socket's unsent bytes within [`UNSENT_AHEAD`] of its pacing
/// (`pacing_rate` bytes per second, 0 where the kernel does not pace: no limit), but never less
/// than [`MIN_SEND`](sluice_tune::inflight::MIN_SEND) of a budget that has it: that write then waits
/// for the socket to take it (TCP_NOTSENT_LOWAT's wake-up), where a budget of 0 would set the
/// retry timer, which under a peer that stopped reading (a zero window: pacing sends nothing)
/// would fire every millisecond until the write timeout.
pub(super) fn within_unsent(budget: usize, pacing_rate: u64, notsent: usize) -> usize {
    if pacing_rate == 0 {
        return budget;
    }
    let ahead = ((pacing_rate as f64 * UNSENT_AHEAD.as_secs_f64()) as usize).max(MIN_WRITE);
    budget.min(ahead.saturating_sub(notsent).max(sluice_tune::inflight::MIN_SEND))
}

/// Whether a connection with `open` streams, the most urgent of them with data ready at
/// `urgency`, is more than a single download: then its in-flight bound keeps the startup gain
/// of 2 (see `InflightCap::set_lone`). Several streams at once, or an urgent one (a browser's
/// document, whose stylesheets follow on the same connection).
pub(super) fn crowds(open: usize, urgency: Option<u8>) -> bool {
    open > 1 || is_urgent(urgency)
}

/// Whether data at `urgency` is urgent ([`URGENT`] or more urgent): what the bound keeps room for.
fn is_urgent(urgency: Option<u8>) -> bool {
    urgency.is_some_and(|u| u <= URGENT)
}

/// What the next write may carry.
pub(super) struct Budget {
    /// What the congestion window can take now (at least [`MIN_WRITE`]).
    pub(super) room: usize,
    /// Bytes of urgent data ([`URGENT`] or more urgent): `room`, when such data waits; else 0.
    pub(super) urgent: usize,
    /// Bytes in all, urgent data included: with the in-flight bound, what it leaves.
    pub(super) other: usize,
    /// When to look again, if the bound holds data back.
    pub(super) retry: Option<std::time::Duration>,
}

/// What the in-flight bound needs from one TCP_INFO reading.
fn sample(p: &sluice_sys::sock::PathInfo) -> sluice_tune::inflight::Sample {
    sluice_tune::inflight::Sample {
        delivery_rate: p.delivery_rate,
        acked: p.delivered_bytes(),
        min_rtt: Duration::from_micros(u64::from(p.min_rtt_us)),
        in_flight: p.in_flight_bytes(),
        notsent_bytes: p.notsent_bytes as usize,
        segment: p.mss.max(536) as usize,
        settled: p.unacked == 0 && p.notsent_bytes == 0,
        srtt: Duration::from_micros(u64::from(p.rtt_us)),
    }
}

/// What the next write may carry: what the congestion window can take now (TCP_INFO), at
/// least [`MIN_WRITE`] and at most [`MAX_WRITE`], and with `pace` no more than its in-flight
/// bound leaves, except for urgent data (`busy`: the engine has data waiting).
pub(super) fn write_budget(
    fd: RawFd,
    pace: Option<&mut InflightCap>,
    busy: bool,
    urgency: Option<u8>,
    now: Instant,
) -> Budget {
    let Ok(p) = sluice_sys::sock::path_info(fd) else {
        return Budget { room: MAX_WRITE, urgent: 0, other: MAX_WRITE, retry: None };
    };
    let room = if p.cwnd > 0 { p.cwnd_room().clamp(MIN_WRITE, MAX_WRITE) } else { MAX_WRITE };
    let urgent = if is_urgent(urgency) { room } else { 0 };
    let Some(pace) = pace else { return Budget { room, urgent, other: room, retry: None } };
    let s = sample(&p);
    pace.update(now, &s, busy);
    let budget = within_unsent(pace.budget(&s, room), p.pacing_rate, s.notsent_bytes);
    if busy && budget < room {
        let e = crate::message::metrics::events();
        e.inflight_held.fetch_add((room - budget) as u64, std::sync::atomic::Ordering::Relaxed);
        e.inflight_limited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    tracing::trace!(
        urgency = urgency.unwrap_or(8),
        rate = s.delivery_rate,
        pacing = p.pacing_rate,
        est = pace.max_rate(),
        min_rtt_us = s.min_rtt.as_micros() as u64,
        srtt_us = p.rtt_us,
        in_flight = s.in_flight,
        notsent = s.notsent_bytes,
        cwnd = p.cwnd,
        room,
        cap = pace.cap(&s).unwrap_or(0),
        gain = pace.gain(),
        urgent,
        budget,
        "write budget"
    );
    Budget { room, urgent, other: budget, retry: (budget == 0).then(|| pace.retry_after(&s)) }
}

/// What is left of the last TCP_INFO reading's budget: writes that follow within
/// [`ALLOWANCE_FOR`] and fit in it take no reading of their own. A connection that carries
/// small responses wrote every few hundred microseconds, a few responses at a time, and read
/// TCP_INFO before each write: a system call for every third proxied request. What is left only
/// shrinks as writes spend it, while ACKs arriving since would only have made more room, so a
/// write within it is one the reading allowed. Not on a connection that has carried several
/// urgencies (a page load: the bound's every reading counts there), nor in a ramp of the bound
/// that keeps the readings of the last RTT, nor once less than [`MIN_WRITE`] is left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Allowance {
    at: Instant,
    room: usize,
    other: usize,
}

impl Allowance {
    pub(super) fn new(at: Instant, b: &Budget) -> Self {
        Self { at, room: b.room, other: b.other }
    }

    /// The budget of a write at `now` without a reading, if what is left covers one.
    pub(super) fn budget(&self, now: Instant, urgency: Option<u8>, guarded: bool) -> Option<Budget> {
        let urgent = is_urgent(urgency);
        let fresh = now.saturating_duration_since(self.at) < ALLOWANCE_FOR;
        if guarded || !fresh || self.other < MIN_WRITE || urgent && self.room < MIN_WRITE {
            return None;
        }
        Some(Budget { room: self.room, urgent: if urgent { self.room } else { 0 }, other: self.other, retry: None })
    }

    /// `n` bytes written.
    pub(super) fn spend(&mut self, n: usize) {
        self.room = self.room.saturating_sub(n);
        self.other = self.other.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_close_behind_a_reading_spend_what_it_allowed() {
        let t = Instant::now();
        let read = Budget { room: 100_000, urgent: 0, other: 60_000, retry: None };
        let mut a = Allowance::new(t, &read);
        let soon = t + ALLOWANCE_FOR / 2;
        let b = a.budget(soon, Some(3), false).expect("within the allowance");
        assert_eq!((b.room, b.urgent, b.other, b.retry), (100_000, 0, 60_000, None));
        // Urgent data gets the congestion window's room, as from a reading.
        assert_eq!(a.budget(soon, Some(0), false).map(|b| b.urgent), Some(100_000));
        a.spend(50_000);
        // 10 kB left: less than a write's worth, so the next write reads.
        assert_eq!(a, Allowance { at: t, room: 50_000, other: 10_000 });
        assert!(a.budget(soon, Some(3), false).is_none());
        let a = Allowance::new(t, &read);
        // Stale, or a page load's connection: a reading.
        assert!(a.budget(t + ALLOWANCE_FOR, Some(3), false).is_none());
        assert!(a.budget(soon, Some(3), true).is_none());
        // The bound left room for other data but the window little for urgent data: a reading.
        let tight = Allowance::new(t, &Budget { room: MIN_WRITE - 1, urgent: 0, other: 60_000, retry: None });
        assert!(tight.budget(soon, Some(URGENT), false).is_none());
        assert!(tight.budget(soon, Some(URGENT + 1), false).is_some());
        // A reading that held writes back leaves nothing to spend.
        let held = Allowance::new(t, &Budget { room: 100_000, urgent: 0, other: 0, retry: Some(ALLOWANCE_FOR) });
        assert!(held.budget(soon, None, false).is_none());
    }

    #[test]
    fn only_a_single_download_that_is_not_urgent_ramps_alone() {
        // curl or `sluice get`: one stream at the default urgency 3, or none ready yet.
        assert!(!crowds(1, Some(3)) && !crowds(1, None) && !crowds(0, None));
        // A page: several streams, or a document or stylesheet (urgency 0 or 1) even alone.
        assert!(crowds(2, Some(5)) && crowds(10, None));
        assert!(crowds(1, Some(0)) && crowds(1, Some(URGENT)));
    }

    #[test]
    fn unsent_bytes_stay_within_what_pacing_sends_in_two_milliseconds() {
        // Paced at 25 MB/s (200 Mbit/s): 50 kB may wait unsent.
        let rate = 25_000_000;
        assert_eq!(within_unsent(200_000, rate, 0), 50_000);
        assert_eq!(within_unsent(200_000, rate, 30_000), 20_000);
        assert_eq!(within_unsent(10_000, rate, 30_000), 10_000, "the bound's budget, when smaller");
        // Less than the smallest write left: the smallest write (it waits for the socket, not
        // for a timer); none where the bound allows none.
        assert_eq!(within_unsent(200_000, rate, 47_000), sluice_tune::inflight::MIN_SEND);
        assert_eq!(within_unsent(200_000, rate, 1 << 20), sluice_tune::inflight::MIN_SEND);
        assert_eq!(within_unsent(0, rate, 0), 0);
        // A slow pace still allows the smallest fill of a write; no pacing, no limit.
        assert_eq!(within_unsent(200_000, 100_000, 0), MIN_WRITE);
        assert_eq!(within_unsent(200_000, 0, 1 << 20), 200_000);
    }
}
