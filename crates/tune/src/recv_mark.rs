//! Reading request bodies in batches: the receive low-water mark (SO_RCVLOWAT) of an HTTP/2
//! connection while its peer streams bodies fast.
//!
//! A client that uploads writes a DATA frame at a time (curl and browsers: 16 KiB each), and
//! each one that reaches a server which keeps up wakes it: a system call to wait, one to read,
//! a trip through the scheduler, for 16 KiB. With the mark set the kernel wakes the reader only
//! once that many bytes are queued (or at the end of the stream, or an error), and a read still
//! returns whatever is there. On loopback, curl uploading 1 GB over TLS h2, that took the
//! server's CPU from about 1.5 × its HTTP/1.1 figure to 0.95–1.05 × (`docs/protocols.md`, reads in batches).
//!
//! The mark must never wait for bytes that will not come. It is at most what the peer is bound
//! to send without anything more from us (`Connection::declared_input`: the rest of bodies of
//! declared length, within the flow-control windows; HTTP/2 forbids a body to end short of its
//! `content-length`, RFC 9113 §8.1.1), less what may already have left the socket (a TLS
//! record a read cut). Anything else the peer sends comes on top, and waits behind the mark
//! for at most about [`DELAY`]: the mark is no more than what the peer sent in that long at its
//! measured rate, so a slow upload gets none. If the input stops anyway (a peer that sends
//! less than it declared, a stream we reset) a [`SILENCE`] takes the mark off, and Linux wakes
//! the reader at once if what is queued meets the lowered mark.
//!
//! The policy is here, without sockets or clocks; the HTTP/2 driver reads the clock, sets the
//! option and arms the timer.

use std::time::{Duration, Instant};

/// The largest mark: four 16 KiB DATA frames. Linux grows a socket's receive buffer for a
/// mark it cannot hold, and then clamps the TCP window to the mark; 64 KiB fits the default
/// buffer (`tcp_rmem`'s 128 KiB), and on this machine the buffer and the window clamp of a
/// fresh socket were the same before and after (`TCP_WINDOW_CLAMP` 65,536, `SO_RCVBUF`
/// 131,072; a 256 KiB mark raised both).
pub const MAX_MARK: u32 = 64 * 1024;
/// Marks are multiples of this (none below it): a mark changes, a system call, only when the
/// rate or what is owed moves by this much.
const STEP: u32 = 16 * 1024;
/// How long input may wait behind the mark at the measured rate.
pub const DELAY: Duration = Duration::from_millis(1);
/// No input for this long with a mark set: it comes off.
pub const SILENCE: Duration = Duration::from_millis(2);
/// The rate is measured over periods of at least this long.
const RATE_EVERY: Duration = Duration::from_millis(4);
/// Bytes owed that may already be out of the socket: a TLS record a read cut (at most 16 KiB
/// and 256 bytes of protection) and the engine's part of a frame, with room to spare.
const HELD: u64 = 32 * 1024;

/// One connection's receive mark.
#[derive(Debug)]
pub struct RecvMark {
    /// The mark set on the socket (0: none, the kernel's default of 1).
    set: u32,
    /// Bytes read since `since`.
    bytes: u64,
    since: Instant,
    /// Bytes read per [`DELAY`] over the last full period.
    per_delay: u64,
    /// When input was last read.
    last_read: Instant,
    /// A silence took the mark off: it stays off until input comes again.
    quiet: bool,
}

impl RecvMark {
    pub fn new(now: Instant) -> Self {
        Self { set: 0, bytes: 0, since: now, per_delay: 0, last_read: now, quiet: false }
    }

    /// `n` bytes were read at `now`.
    pub fn on_read(&mut self, now: Instant, n: usize) {
        self.last_read = now;
        self.quiet = false;
        self.bytes += n as u64;
        let span = now.saturating_duration_since(self.since);
        if span >= RATE_EVERY {
            self.per_delay = (u128::from(self.bytes) * DELAY.as_nanos() / span.as_nanos()) as u64;
            self.bytes = 0;
            self.since = now;
        }
    }

    /// The mark wanted at `now` when the peer owes `owed` bytes (`declared_input`): `Some` with
    /// the value to set (0 to take it off) when it differs from the one set, which it then is.
    /// `owed` is asked only when the rate allows a mark (it walks the streams).
    pub fn update(&mut self, now: Instant, owed: impl FnOnce() -> u64) -> Option<u32> {
        self.quiet |= self.set > 0 && now.saturating_duration_since(self.last_read) >= SILENCE;
        let want = if self.quiet || self.per_delay < u64::from(STEP) {
            0
        } else {
            let cap = self.per_delay.min(owed().saturating_sub(HELD)).min(u64::from(MAX_MARK)) as u32;
            cap / STEP * STEP
        };
        (want != self.set).then(|| {
            self.set = want;
            want
        })
    }

    /// When to look again for a silence: while a mark is set.
    pub fn deadline(&self) -> Option<Instant> {
        (self.set > 0).then(|| self.last_read + SILENCE)
    }

    /// The mark set (0: none).
    #[cfg(test)]
    fn set(&self) -> u32 {
        self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A mark that has read `per_ms` bytes a millisecond for 8 ms, from `t0`.
    fn streaming(t0: Instant, per_ms: usize) -> (RecvMark, Instant) {
        let mut m = RecvMark::new(t0);
        let mut t = t0;
        for _ in 0..8 {
            t += MS;
            m.on_read(t, per_ms);
        }
        (m, t)
    }

    #[test]
    fn a_fast_body_of_declared_length_gets_a_mark_as_large_as_the_rate_allows() {
        let t0 = Instant::now();
        assert_eq!(RecvMark::new(t0).update(t0, || 10 << 20), None, "no rate measured yet: no mark");
        // Loopback-fast: the largest mark; 200 Mbit/s (25 kB a millisecond): one step.
        let (mut m, t) = streaming(t0, 1 << 20);
        assert_eq!(m.update(t, || 10 << 20), Some(MAX_MARK));
        assert_eq!(m.update(t, || 10 << 20), None, "unchanged: no system call");
        let (mut m, t) = streaming(t0, 25_000);
        assert_eq!(m.update(t, || 10 << 20), Some(16 * 1024));
        // Slower than a step a millisecond: none.
        let (mut m, t) = streaming(t0, 10_000);
        assert_eq!(m.update(t, || 10 << 20), None);
        assert_eq!(m.set(), 0);
    }

    #[test]
    fn the_mark_never_waits_for_more_than_the_peer_owes() {
        let t0 = Instant::now();
        let (mut m, mut t) = streaming(t0, 1 << 20);
        assert_eq!(m.update(t, || 10 << 20), Some(MAX_MARK));
        // The body's end comes near: the mark steps down, and off, ahead of it, with what
        // may already be out of the socket (`HELD`) kept out of it.
        let mut marks = Vec::new();
        for owed in (0..=200_000u64).rev().step_by(10_000) {
            t += MS / 10;
            m.on_read(t, 10_000);
            if let Some(v) = m.update(t, || owed) {
                marks.push((owed, v));
            }
            assert!(u64::from(m.set()) + HELD <= owed.max(HELD), "owed {owed}, mark {}", m.set());
        }
        let values: Vec<u32> = marks.iter().map(|&(_, v)| v).collect();
        assert_eq!(values, [48 * 1024, 32 * 1024, 16 * 1024, 0], "{marks:?}");
        // Nothing owed (an undeclared length): none, however fast.
        let (mut m, t) = streaming(t0, 1 << 20);
        assert_eq!(m.update(t, || 0), None);
    }

    #[test]
    fn a_silence_takes_the_mark_off_until_input_comes_again() {
        let t0 = Instant::now();
        let (mut m, t) = streaming(t0, 1 << 20);
        assert_eq!(m.update(t, || 10 << 20), Some(MAX_MARK));
        assert_eq!(m.deadline(), Some(t + SILENCE));
        assert_eq!(m.update(t + SILENCE / 2, || 10 << 20), None, "not silent yet");
        assert_eq!(m.update(t + SILENCE, || 10 << 20), Some(0), "silent: off");
        assert_eq!(m.deadline(), None, "nothing to look for");
        assert_eq!(m.update(t + 2 * SILENCE, || 10 << 20), None, "stays off while silent");
        // Input again: the rate measured before still holds until a period measures the pause.
        let t = t + 3 * SILENCE;
        m.on_read(t, 200 * 1024);
        assert_eq!(m.update(t, || 10 << 20), Some(32 * 1024), "the period with the pause: a lower rate");
    }
}
