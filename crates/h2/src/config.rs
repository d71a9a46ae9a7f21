//! Engine configuration: every quantity a peer controls has a budget here.

use std::time::Duration;

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
    /// Window the flood counters are counted in.
    pub flood_window: Duration,
    /// Time allowed for the connection preface and for any header block to complete.
    pub header_timeout: Duration,
    /// Time a connection may sit with no open streams.
    pub idle_timeout: Duration,
    /// Time the peer has to acknowledge our SETTINGS (RFC 9113 §6.5.3).
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
            flood_window: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            settings_timeout: Duration::from_secs(10),
            // One frame at the default SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2).
            quantum: 16 * 1024,
            no_rfc7540_priorities: true,
            max_pending_priority_updates: 128,
            origins: None,
        }
    }
}
