//! Engine configuration: every quantity a peer controls has a budget here.

use std::time::Duration;

/// Default glitch budget per 10 s `flood_window` (see `Config::max_glitches_per_window`).
/// A browser's page load costs a handful: Firefox's five PRIORITY frames for its idle
/// dependency-tree streams, a repeated PRIORITY_UPDATE when an image scrolls into view, a
/// GREASE frame (free once per stream), the odd WINDOW_UPDATE more than the DATA frames it
/// acknowledges. 1,000 in 10 s is two orders of magnitude above that, and two orders below
/// what a flood does (about 0.5 µs each: 10^6 per second per core): a flooding connection
/// is cut within a millisecond of CPU, as HAProxy's glitch threshold of the same order does.
const DEFAULT_MAX_GLITCHES: u32 = 1000;

/// Limits and knobs of one HTTP/2 server connection.
#[derive(Clone, Debug)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise; streams beyond it are refused.
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE we advertise and enforce (RFC 9113 §6.5.2 counting).
    pub max_header_list_size: u32,
    /// CONTINUATION frames allowed in one header block (CONTINUATION flood defence).
    pub max_continuation_frames: u32,
    /// SETTINGS_HEADER_TABLE_SIZE we advertise: the HPACK decoder's table limit.
    pub header_table_size: u32,
    /// Peer-reset streams plus streams we reset for peer errors, per `flood_window`
    /// (Rapid Reset, CVE-2023-44487; MadeYouReset, CVE-2025-8671).
    pub max_resets_per_window: u32,
    /// PING frames per `flood_window`.
    pub max_pings_per_window: u32,
    /// SETTINGS frames per `flood_window`.
    pub max_settings_per_window: u32,
    /// Frames that do no useful work ("glitches", as HAProxy's `tune.h2.fe.glitches-threshold`
    /// counts them) per `flood_window`; one more closes the connection with
    /// GOAWAY(ENHANCE_YOUR_CALM). Each is legal alone and costs a frame's parsing and a lookup,
    /// but a flood of them is CPU spent forever for nothing (CVE-2019-9518, empty frames;
    /// CVE-2019-9515/9516 and friends). A glitch is:
    ///
    /// - DATA without END_STREAM that carries no data bytes (empty, or padding only), on an
    ///   open stream (DATA on a closed stream is a stream error, counted as a reset);
    /// - WINDOW_UPDATE beyond one per DATA frame we sent on that window (connection or
    ///   stream) since its previous WINDOW_UPDATE, the first for each window free: a receiver
    ///   acknowledging every frame it reads never counts, nor does one whose updates race the
    ///   stream's end (the credit outlives the stream among the last 256 closed), nor one that
    ///   opens a window that held data back; an update for an older closed stream counts;
    /// - PRIORITY, and PRIORITY_UPDATE, beyond the first priority frame for each stream
    ///   (either type; a PRIORITY for an idle stream counts, as we act on none; a
    ///   PRIORITY_UPDATE for an idle stream is buffered and free once per stream), and either
    ///   for a closed stream or dropped because `max_pending_priority_updates` is full;
    /// - a frame of an unknown type (RFC 9113 §5.5; a client's ORIGIN is one), except the
    ///   first on each open stream (a client greasing requests sends one per stream);
    /// - SETTINGS, after the preface's, that changes none of the values the peer set before
    ///   (empty, repeated, or unknown ids only), and a SETTINGS ACK when none is outstanding;
    /// - CONTINUATION without END_HEADERS and with an empty fragment;
    /// - RST_STREAM for a closed stream (one for an idle stream is a connection error);
    /// - a PING ACK when no PING of ours is outstanding;
    /// - GOAWAY after the peer's first.
    ///
    /// Frames that move something forward never count: DATA with bytes or END_STREAM,
    /// HEADERS, a WINDOW_UPDATE that frees data, the first priority signal for a stream,
    /// SETTINGS that change a value, PING (budgeted by `max_pings_per_window`).
    pub max_glitches_per_window: u32,
    /// Window the flood counters are counted in.
    pub flood_window: Duration,
    /// Time allowed for the connection preface, from its first byte, and for any header block
    /// to complete. A peer that sends nothing at all is idle: `idle_timeout` applies.
    pub header_timeout: Duration,
    /// Time a connection may sit with nothing received and nothing sent (GOAWAY(NO_ERROR)).
    pub idle_timeout: Duration,
    /// Time the peer has to acknowledge our SETTINGS (RFC 9113 §6.5.3), counted from its
    /// preface SETTINGS: before it, the peer may not have read ours. When it passes without an
    /// ACK, the connection fails with SETTINGS_TIMEOUT only if the peer has been active since
    /// (HEADERS, DATA, RST_STREAM or a PING: it uses the connection, so it reads it); a peer
    /// silent since its preface is idle, `idle_timeout` governs, and the timer starts again
    /// at its next such frame.
    pub settings_timeout: Duration,
    /// Largest piece of one stream's data sent per scheduler pick.
    pub quantum: usize,
    /// Send SETTINGS_NO_RFC7540_PRIORITIES = 1 (RFC 9218 §2.1): we prioritise by RFC 9218.
    /// Clients that send RFC 7540 signals anyway still get them mapped onto urgency.
    pub no_rfc7540_priorities: bool,
    /// PRIORITY_UPDATE frames kept for streams not yet opened (RFC 9218 §7.1 lets servers
    /// buffer them; beyond this they are dropped).
    pub max_pending_priority_updates: usize,
    /// Origins for an ORIGIN frame (RFC 8336), sent right after our SETTINGS. `None` sends no
    /// frame; `Some(vec![])` sends an empty one. Each entry is an ASCII serialised origin
    /// (RFC 6454 §6.2) such as `https://example.com`.
    pub origins: Option<Vec<String>>,
    /// Send SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 (RFC 8441 §3): requests may carry
    /// `:protocol` (extended CONNECT, e.g. WebSockets). Without it such a request is malformed
    /// (§4).
    pub enable_connect_protocol: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            // RFC 9113 §6.5.2 recommends no fewer than 100.
            max_concurrent_streams: 128,
            max_header_list_size: 64 * 1024,
            max_continuation_frames: 32,
            // The RFC 7541 default.
            header_table_size: 4096,
            max_resets_per_window: 200,
            max_pings_per_window: 50,
            max_settings_per_window: 50,
            max_glitches_per_window: DEFAULT_MAX_GLITCHES,
            flood_window: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            settings_timeout: Duration::from_secs(10),
            // One frame at the default SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2).
            quantum: 16 * 1024,
            no_rfc7540_priorities: true,
            max_pending_priority_updates: 128,
            origins: None,
            enable_connect_protocol: false,
        }
    }
}
