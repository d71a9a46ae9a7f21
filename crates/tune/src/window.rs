//! The seam where receive-window sizing plugs into a protocol engine: what a policy keeps per
//! stream ([`TuneState`]), the policy trait ([`WindowPolicy`]) and fixed windows. The HTTP/2
//! engine asks a policy for every stream's and the connection's target window; the HTTP/3
//! driver asks the same autotuner ([`crate::autotune`]) for QUIC's connection window.

use std::time::{Duration, Instant};

/// Largest window RFC 9113 §6.9.1 allows: 2^31-1 (QUIC's windows are larger; its drivers
/// clamp to this too, being sized by the same policies).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// Initial window of every HTTP/2 stream and the connection before SETTINGS (RFC 9113 §6.9.2):
/// the smallest window a policy hands out.
pub const DEFAULT_WINDOW: u32 = 65_535;

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
/// [`crate::autotune`].
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
