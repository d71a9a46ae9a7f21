//! Defaults. The limits a protocol engine enforces take their defaults from the engine's own
//! `Config::default()` (one source: `sluice_h2::Config`), so the file, the docs and the engines
//! cannot drift apart.

use std::time::Duration;

use super::{Limits, Speedtest, Timeouts};

impl Default for Speedtest {
    fn default() -> Self {
        Self { enabled: true, max_download_bytes: DEFAULT_MAX_DOWNLOAD }
    }
}

impl Default for Limits {
    fn default() -> Self {
        let e = sluice_h2::Config::default();
        Self {
            max_concurrent_streams: e.max_concurrent_streams,
            max_header_list_size: e.max_header_list_size,
            max_continuation_frames: e.max_continuation_frames,
            header_table_size: e.header_table_size,
            max_resets_per_window: e.max_resets_per_window,
            max_pings_per_window: e.max_pings_per_window,
            max_settings_per_window: e.max_settings_per_window,
            max_glitches_per_window: e.max_glitches_per_window,
            flood_window: e.flood_window,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            min_rate: DEFAULT_MIN_RATE,
            send_buffer: DEFAULT_SEND_BUFFER,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        let e = sluice_h2::Config::default();
        Self { header: e.header_timeout, idle: e.idle_timeout, drain: DEFAULT_DRAIN }
    }
}

/// Default largest request body: 10 GiB (uploads through the speed test and the proxy stream;
/// nothing is buffered whole).
const DEFAULT_MAX_REQUEST_BODY: u64 = 10 * 1024 * 1024 * 1024;
/// Default floor on a peer's transfer rate while the server waits on it: 500 bytes per second
/// (Apache's mod_reqtimeout uses the same floor for request bodies). A slowloris trickle of one
/// byte every few seconds falls far below it; a phone on a poor link stays far above.
const DEFAULT_MIN_RATE: u64 = 500;
/// Default budget of response bytes waiting to be framed, process-wide: 128 MiB, 2,048 chunks
/// of 64 KiB (each stream queues at most four). Stalled streams (2,000 of them held ~650 MB
/// without it) cannot hold more; active streams wait their turn for room.
const DEFAULT_SEND_BUFFER: usize = 128 << 20;
/// Default connections per listener.
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time running requests get to finish after SIGTERM/SIGINT.
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// Default largest speed-test download: 10 GB, enough for a minute at 1 Gbit/s.
pub(super) const DEFAULT_MAX_DOWNLOAD: u64 = 10_000_000_000;
/// Default HTTPS port.
pub(crate) const DEFAULT_TLS_PORT: u16 = 8443;
/// Default cleartext port.
pub(crate) const DEFAULT_PLAIN_PORT: u16 = 8080;
/// Largest SETTINGS_HEADER_TABLE_SIZE we accept to advertise: the HPACK dynamic table is per
/// connection memory (RFC 7541 §4.2), 64 KiB is already 16 times the RFC 9113 §6.5.2 default.
pub(super) const MAX_HEADER_TABLE_SIZE: u32 = 65_536;
/// Smallest useful header list limit; a plain browser request needs several hundred bytes.
pub(super) const MIN_HEADER_LIST_SIZE: u32 = 1024;
