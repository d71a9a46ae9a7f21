//! Flow-control accounting (RFC 9113 §5.2, §6.9) and the window-policy seam.
//!
//! The send side tracks what the peer allows us (`SendWindow`, which may go negative after a
//! SETTINGS_INITIAL_WINDOW_SIZE change, §6.9.2). The receive side (`RecvWindow`) tracks what the
//! peer may still send and the credit the application has consumed but not yet returned; it
//! returns credit once about half of the target window has been consumed, never per frame.
//! How large the target window is comes from a [`WindowPolicy`].

use std::time::{Duration, Instant};

/// Largest window RFC 9113 §6.9.1 allows: 2^31-1.
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// Initial window of every stream and the connection before SETTINGS (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

/// What the peer allows us to send.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWindow(i64);

impl SendWindow {
    pub(crate) fn new(initial: u32) -> Self {
        Self(i64::from(initial))
    }

    /// Credit from a WINDOW_UPDATE; `Err` if the window would pass 2^31-1 (§6.9.1).
    pub(crate) fn grow(&mut self, by: u32) -> Result<(), ()> {
        let next = self.0 + i64::from(by);
        if next > i64::from(MAX_WINDOW) {
            return Err(());
        }
        self.0 = next;
        Ok(())
    }

    /// Apply a change of SETTINGS_INITIAL_WINDOW_SIZE (§6.9.2): may go negative.
    pub(crate) fn adjust(&mut self, delta: i64) -> Result<(), ()> {
        let next = self.0 + delta;
        if next > i64::from(MAX_WINDOW) {
            return Err(());
        }
        self.0 = next;
        Ok(())
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.0 -= n as i64;
    }

    pub(crate) fn available(&self) -> usize {
        self.0.max(0) as usize
    }
}

/// What the peer may still send us, and the credit waiting to be returned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvWindow {
    /// Bytes the peer may send before it runs out of credit.
    open: u32,
    /// The window we want the peer to have (grows only, §6.9: never shrink below what was granted).
    target: u32,
    /// Consumed bytes not yet returned with WINDOW_UPDATE.
    pending: u32,
    /// Received bytes the application holds and has not consumed yet.
    held: u32,
}

impl RecvWindow {
    pub(crate) fn new(initial: u32, target: u32) -> Self {
        Self { open: initial, target: target.max(initial), pending: 0, held: 0 }
    }

    /// A DATA frame of `n` flow-controlled bytes arrived; `Err` if it exceeds the window.
    pub(crate) fn receive(&mut self, n: u32) -> Result<(), ()> {
        if n > self.open {
            return Err(());
        }
        self.open -= n;
        self.held = self.held.saturating_add(n);
        Ok(())
    }

    /// The application consumed `n` bytes (or they were discarded): they become credit.
    pub(crate) fn release(&mut self, n: u32) {
        self.held = self.held.saturating_sub(n);
        self.pending = self.pending.saturating_add(n);
    }

    /// Raise the target window (never lowers it).
    pub(crate) fn set_target(&mut self, target: u32) {
        self.target = self.target.max(target.min(MAX_WINDOW));
    }

    pub(crate) fn target(&self) -> u32 {
        self.target
    }

    /// Bytes the peer may still send.
    pub(crate) fn open(&self) -> u32 {
        self.open
    }

    /// The increment to send now, if any: once at least half the target window can be handed
    /// back (the 1/2 rule, as h2 and quiche do). Bytes the application still holds are not
    /// handed back, so a slow consumer closes the window: memory stays bounded.
    pub(crate) fn poll_update(&mut self) -> Option<u32> {
        let inc = self.due()?;
        self.pending = 0;
        self.open += inc;
        Some(inc)
    }

    /// The increment `poll_update` would send now.
    pub(crate) fn due(&self) -> Option<u32> {
        let in_use = self.open.saturating_add(self.pending).saturating_add(self.held);
        let grow = self.target.saturating_sub(in_use);
        let inc = self.pending.saturating_add(grow).min(MAX_WINDOW - self.open);
        (inc > 0 && inc >= self.target / 2).then_some(inc)
    }
}

/// What a window policy keeps per receiving stream; the engine owns it and hands it to the
/// policy on every decision, so policies stay stateless per stream and testable alone.
#[derive(Clone, Debug, Default)]
pub struct TuneState {
    /// The current target window (never below the initial window, never shrinks: §6.9).
    pub window: u32,
    /// Flow-controlled bytes received so far.
    pub received: u64,
    /// Start of the current measurement epoch.
    pub epoch_start: Option<Instant>,
    /// `received` at the start of the epoch.
    pub epoch_base: u64,
    /// When credit was last handed back (quiche's rule, and AutoTune's fast test).
    pub last_update: Option<Instant>,
    /// `received` when credit was last handed back.
    pub update_base: u64,
    /// Bytes delivered per RTT over the last completed epoch (0: none yet).
    pub last_per_rtt: u64,
    /// Bytes of growth beyond the initial window reserved from the memory budget.
    pub reserved: u64,
}

/// The seam where receive-window sizing plugs in: fixed windows, or one of the autotuners in
/// [`crate::tune`].
pub trait WindowPolicy: Send {
    /// SETTINGS_INITIAL_WINDOW_SIZE we advertise: every new stream's receive window.
    fn initial_stream_window(&self) -> u32;
    /// Initial target for the connection window (raised with WINDOW_UPDATE on stream 0 at start).
    fn initial_connection_window(&self) -> u32;
    /// DATA arrived on a stream (`s.received` already counts it). Returns the target window.
    fn on_stream_data(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        let _ = (now, rtt);
        s.window
    }
    /// A stream opened that will receive a body of `declared` bytes (its content-length, if
    /// it has one). Returns the target window.
    fn on_stream_body(&mut self, s: &mut TuneState, declared: Option<u64>) -> u32 {
        let _ = declared;
        s.window
    }
    /// Credit is about to be handed back on a stream. Returns the target window.
    fn on_stream_update(&mut self, s: &mut TuneState, now: Instant, rtt: Option<Duration>) -> u32 {
        let _ = (now, rtt);
        s.window
    }
    /// The connection's target window, given the sum of the windows of the streams still
    /// receiving a body.
    fn connection_target(&mut self, sum_stream_windows: u64, now: Instant) -> u32 {
        let _ = (sum_stream_windows, now);
        self.initial_connection_window()
    }
    /// A stream stopped receiving: release what it reserved.
    fn on_stream_closed(&mut self, s: &mut TuneState) {
        let _ = s;
    }
    /// `bytes` of DATA arrived on the connection. A policy that measures with PING (hyper's
    /// BDP estimator) returns the opaque payload of a PING to send now.
    fn poll_ping(&mut self, now: Instant, bytes: u64) -> Option<u64> {
        let _ = (now, bytes);
        None
    }
    /// The peer acknowledged a PING whose payload is `token`.
    fn on_ping_ack(&mut self, token: u64, now: Instant) {
        let _ = (token, now);
    }
}

/// Fixed windows.
#[derive(Clone, Copy, Debug)]
pub struct FixedWindows {
    /// Per-stream receive window.
    pub stream: u32,
    /// Connection receive window.
    pub connection: u32,
}

impl Default for FixedWindows {
    /// 1 MiB per stream, 4 MiB per connection.
    fn default() -> Self {
        Self { stream: 1 << 20, connection: 4 << 20 }
    }
}

impl WindowPolicy for FixedWindows {
    fn initial_stream_window(&self) -> u32 {
        self.stream.clamp(1, MAX_WINDOW)
    }
    fn initial_connection_window(&self) -> u32 {
        self.connection.clamp(DEFAULT_WINDOW, MAX_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_window_overflow_and_negative() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        assert!(w.grow(MAX_WINDOW - DEFAULT_WINDOW).is_ok());
        assert!(w.grow(1).is_err());
        let mut w = SendWindow::new(10);
        w.consume(8);
        w.adjust(-5).unwrap();
        assert_eq!(w.available(), 0);
        w.grow(4).unwrap();
        assert_eq!(w.available(), 1);
    }

    #[test]
    fn recv_window_returns_credit_at_half() {
        let mut w = RecvWindow::new(100, 100);
        assert!(w.receive(101).is_err());
        w.receive(40).unwrap();
        assert_eq!(w.poll_update(), None, "held bytes are not handed back");
        w.release(40);
        assert_eq!(w.poll_update(), None, "60 of 100 still open");
        w.receive(20).unwrap();
        w.release(20);
        assert_eq!(w.poll_update(), Some(60));
        assert_eq!(w.open(), 100);
        assert_eq!(w.poll_update(), None);
    }

    #[test]
    fn recv_window_grows_to_target() {
        let mut w = RecvWindow::new(DEFAULT_WINDOW, 1 << 20);
        // Raising the connection window at start: nothing consumed yet.
        assert_eq!(w.poll_update(), Some((1 << 20) - DEFAULT_WINDOW));
        w.set_target(10);
        assert_eq!(w.target(), 1 << 20, "targets never shrink");
    }
}
