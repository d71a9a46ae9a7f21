//! Flow-control accounting (RFC 9113 §5.2, §6.9) and the window-policy seam.
//!
//! The send side tracks what the peer allows us (`SendWindow`, which may go negative after a
//! SETTINGS_INITIAL_WINDOW_SIZE change, §6.9.2). The receive side (`RecvWindow`) tracks what the
//! peer may still send and the credit the application has consumed but not yet returned; it
//! returns credit once about half of the target window has been consumed, never per frame.
//! How large the target window is comes from a
//! [`WindowPolicy`](sluice_tune::window::WindowPolicy) (`sluice_tune`).

pub use sluice_tune::window::{DEFAULT_WINDOW, MAX_WINDOW};

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
