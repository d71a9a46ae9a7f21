//! Engine configuration: what we advertise in SETTINGS and a budget for every quantity the peer
//! controls.

use std::time::Duration;

/// Default glitch budget per 10 s `flood_window` (see `Config::max_glitches_per_window`): as
/// the HTTP/2 engine's. A browser's page load costs a few (a grease stream, a second
/// PRIORITY_UPDATE for an image scrolled into view); 1,000 in 10 s is two orders of magnitude
/// above that, and a flood of 10^6 cheap frames per second per core is cut within a millisecond.
const DEFAULT_MAX_GLITCHES: u32 = 1000;

/// Settings and limits of one HTTP/3 server connection.
#[derive(Clone, Debug)]
pub struct Config {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY we advertise (RFC 9204 §5): the peer encoder's dynamic
    /// table, held by our decoder.
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS we advertise (RFC 9204 §5): request streams whose header
    /// section may wait for encoder-stream data at once; the QPACK decoder fails the connection
    /// beyond it (RFC 9204 §2.1.2).
    pub qpack_blocked_streams: u64,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE we advertise and enforce (RFC 9114 §4.2.2 counting: name
    /// + value + 32 per field). Also the largest HEADERS frame we buffer.
    pub max_field_section_size: u64,
    /// Largest payload of any other frame we must buffer whole (SETTINGS, PRIORITY_UPDATE); a
    /// larger one closes the connection with H3_EXCESSIVE_LOAD (RFC 9114 §10.5). DATA frames
    /// stream through and unknown frames are skipped, so neither is bounded.
    pub max_frame_payload: u64,
    /// Raw bytes kept for a request stream whose header section waits for QPACK encoder-stream
    /// data (its body cannot be delivered before its head). Beyond this the stream is reset with
    /// H3_EXCESSIVE_LOAD. The driver pauses reading such a stream (see
    /// [`Connection::wants_read`](crate::Connection::wants_read)), so this only catches a driver
    /// that does not.
    pub max_blocked_input: usize,
    /// Request streams open at once; later ones are rejected with H3_REQUEST_REJECTED. QUIC's
    /// MAX_STREAMS (the driver's transport config) is the real limit; this is a backstop.
    pub max_concurrent_streams: usize,
    /// Unidirectional streams whose type has not fully arrived yet that we track at once; more
    /// are refused with STOP_SENDING (H3_STREAM_CREATION_ERROR).
    pub max_pending_uni_streams: usize,
    /// PRIORITY_UPDATE frames kept for request streams not yet opened (RFC 9218 §7: servers may
    /// buffer them; beyond this they are dropped). Only the parsed priority is kept.
    pub max_pending_priority_updates: usize,
    /// Largest piece of one response body framed per scheduler pick (one DATA frame). A stream
    /// the scheduler would pick again anyway (the first non-incremental stream of the most
    /// urgent level, or the only incremental one) gets up to sixteen quanta in one frame, of
    /// whole queued chunks or a slice of the first: the header and the first chunk in one
    /// write, each further chunk in a write of its own.
    pub quantum: usize,
    /// Response body bytes buffered per stream: `send_data` refuses more (backpressure to the
    /// handler) until the scheduler has framed some of it.
    pub max_buffered_per_stream: usize,
    /// Origins for an ORIGIN frame (RFC 9412), written on the control stream right after
    /// SETTINGS. `None` sends no frame; `Some(vec![])` sends an empty one. Each entry is an
    /// ASCII serialised origin (RFC 6454 §6.2) such as `https://example.com`; entries longer
    /// than 65,535 bytes cannot be encoded and are left out.
    pub origins: Option<Vec<String>>,
    /// Time a request stream has, from its first byte (or its opening), to complete its header
    /// section, QPACK encoder-stream data included; then it is reset with
    /// H3_REQUEST_INCOMPLETE and its reading stopped. As the HTTP/2 engine's `header_timeout`.
    pub header_timeout: Duration,
    /// Request streams the peer resets (RESET_STREAM, or STOP_SENDING before the response is
    /// complete) plus request streams we reset for peer errors (malformed requests, header
    /// timeouts), per `flood_window`; one more closes the connection with H3_EXCESSIVE_LOAD
    /// (RFC 9114 §10.5; Rapid Reset, CVE-2023-44487; MadeYouReset, CVE-2025-8671). As the
    /// HTTP/2 engine's `max_resets_per_window`.
    pub max_resets_per_window: u32,
    /// Frames and streams that do no useful work ("glitches", as HAProxy counts them) per
    /// `flood_window`; one more closes the connection with H3_EXCESSIVE_LOAD (RFC 9114 §10.5).
    /// Each is legal alone but costs parsing and a lookup for nothing; a flood is CPU spent
    /// forever. As the HTTP/2 engine's `max_glitches_per_window`. A glitch is:
    ///
    /// - a frame of unknown or reserved type (RFC 9114 §9, §7.2.8) on the control stream or a
    ///   request stream, except the first on each stream (a client greasing the stream);
    /// - a DATA frame of length 0 on a request stream (it carries nothing; the end is QUIC's);
    /// - PRIORITY_UPDATE beyond the first for a request stream (an update buffered for a stream
    ///   not yet open is the first), and one for a closed stream, for a stream past our
    ///   GOAWAY, or dropped because `max_pending_priority_updates` is full;
    /// - a unidirectional stream of unknown or reserved type (RFC 9114 §6.2, §6.2.3), one that
    ///   ends or is reset before its type arrived, and one refused beyond
    ///   `max_pending_uni_streams`;
    /// - GOAWAY and MAX_PUSH_ID after the first of each.
    ///
    /// Request streams reset by the peer count against `max_resets_per_window` instead.
    pub max_glitches_per_window: u32,
    /// Window the reset and glitch budgets are counted in.
    pub flood_window: Duration,
    /// Send a reserved setting (RFC 9114 §7.2.4.1 recommends it, to keep peers ignoring
    /// unknown settings).
    pub grease: bool,
    /// Send SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 (RFC 9220 §3): requests may carry `:protocol`
    /// (extended CONNECT, e.g. WebSockets). Without it such a request is malformed.
    pub enable_connect_protocol: bool,
    /// Send SETTINGS_H3_DATAGRAM = 1 (RFC 9297 §2.1.1): HTTP Datagrams may ride QUIC
    /// DATAGRAM frames (the driver must have offered them in the transport parameters).
    pub h3_datagram: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            // The HTTP/2 default table size (RFC 7541 §6.5.2), plenty for request headers.
            qpack_max_table_capacity: 4096,
            // Browsers send a page's requests in a burst; each may reference fresh entries.
            qpack_blocked_streams: 16,
            // As the HTTP/2 engine's max_header_list_size.
            max_field_section_size: 64 * 1024,
            max_frame_payload: 64 * 1024,
            max_blocked_input: 256 * 1024,
            // RFC 9114 §6.1: at least 100 request streams SHOULD be permitted at a time.
            max_concurrent_streams: 256,
            // The three critical streams plus room for greasing (RFC 9114 §6.2.3).
            max_pending_uni_streams: 16,
            max_pending_priority_updates: 128,
            // As the HTTP/2 engine: one frame at the HTTP/2 default SETTINGS_MAX_FRAME_SIZE.
            quantum: 16 * 1024,
            max_buffered_per_stream: 256 * 1024,
            origins: None,
            // As the HTTP/2 engine's defaults: a header section takes a round trip or two, and
            // browsers cancel a few streams per page, not hundreds per second.
            header_timeout: Duration::from_secs(10),
            max_resets_per_window: 200,
            max_glitches_per_window: DEFAULT_MAX_GLITCHES,
            flood_window: Duration::from_secs(10),
            grease: true,
            enable_connect_protocol: false,
            h3_datagram: false,
        }
    }
}
