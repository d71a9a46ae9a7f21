//! The raw layer: what the file may contain, mirrored by serde (`deny_unknown_fields`, every
//! field optional, `toml::Spanned` on what gets validated so errors can point at it).

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) data_dir: Option<Spanned<String>>,
    pub(super) access_log: Option<Spanned<RawAccessLog>>,
    pub(super) pid_file: Option<Spanned<String>>,
    pub(super) listener: Option<Spanned<Vec<Spanned<RawListener>>>>,
    #[serde(default)]
    pub(super) certificate: Vec<RawCertificate>,
    pub(super) site: Option<Vec<Spanned<RawSite>>>,
    #[serde(default)]
    pub(super) speedtest: RawSpeedtest,
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) timeouts: RawTimeouts,
    #[serde(default)]
    pub(super) flow: RawFlow,
    #[serde(default)]
    pub(super) tcp: RawTcp,
    #[serde(default)]
    pub(super) quic: RawQuic,
    #[serde(default)]
    pub(super) upstream: Vec<Spanned<super::upstream::RawUpstream>>,
    #[serde(default)]
    pub(super) proxy: super::upstream::RawProxy,
    #[serde(default)]
    pub(super) compression: super::compression::RawCompression,
    #[serde(default)]
    pub(super) admin: super::admin::RawAdmin,
    #[serde(default)]
    pub(super) acme: super::acme::RawAcme,
    #[serde(default)]
    pub(super) connect: super::connect::RawConnect,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuic {
    pub(super) enabled: Option<bool>,
    pub(super) congestion: Option<Spanned<String>>,
    pub(super) socket_buffer: Option<Spanned<usize>>,
    pub(super) stream_window: Option<Spanned<u32>>,
    pub(super) limit_inflight: Option<bool>,
    pub(super) server_id: Option<Spanned<String>>,
    pub(super) lb_config_id: Option<Spanned<u8>>,
    pub(super) lb_nonce_len: Option<Spanned<usize>>,
    pub(super) lb_key: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTcp {
    pub(super) congestion: Option<Spanned<String>>,
    pub(super) notsent_lowat: Option<Spanned<u32>>,
    pub(super) limit_inflight: Option<bool>,
    pub(super) batch_reads: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFlow {
    pub(super) policy: Option<Spanned<String>>,
    pub(super) initial_stream_window: Option<Spanned<u32>>,
    pub(super) initial_connection_window: Option<Spanned<u32>>,
    pub(super) max_stream_window: Option<Spanned<u32>>,
    pub(super) max_connection_window: Option<Spanned<u32>>,
    pub(super) budget: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub(super) addr: Spanned<String>,
    pub(super) tls: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCertificate {
    pub(super) cert: Spanned<String>,
    pub(super) key: Spanned<String>,
    /// `"from-certificate"` or `["https://a.example", ...]` (an untagged enum would lose the
    /// spans, so the value is taken as it is and checked below).
    pub(super) origins: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSite {
    pub(super) hosts: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) root: Option<Spanned<String>>,
    pub(super) builtin: Option<Spanned<bool>>,
    pub(super) speedtest: Option<Spanned<bool>>,
    pub(super) proxy: Option<Spanned<String>>,
    /// Response header rules of the site's own route (`root`/`builtin` at the site level).
    pub(super) headers: Option<Spanned<RawHeaders>>,
    /// `Link` values sent in a 103 (Early Hints) before the site's own route answers.
    pub(super) early_hints: Option<Vec<Spanned<String>>>,
    /// `false`: the site's own route's responses go uncompressed.
    pub(super) compress: Option<Spanned<bool>>,
    /// Where the site's certificate comes from: "auto" (the default), "acme" or "manual".
    pub(super) tls: Option<Spanned<String>>,
    pub(super) route: Option<Vec<Spanned<RawRoute>>>,
}

/// `[[site.route]]`: a path prefix and what serves it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) path: Spanned<String>,
    pub(super) root: Option<Spanned<String>>,
    pub(super) builtin: Option<Spanned<bool>>,
    pub(super) speedtest: Option<Spanned<bool>>,
    pub(super) proxy: Option<Spanned<String>>,
    pub(super) headers: Option<Spanned<RawHeaders>>,
    pub(super) early_hints: Option<Vec<Spanned<String>>>,
    /// `false`: this route's responses go uncompressed.
    pub(super) compress: Option<bool>,
}

/// `headers = { set = {..}, add = {..}, remove = [..] }`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHeaders {
    #[serde(default)]
    pub(super) set: std::collections::BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(super) add: std::collections::BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(super) remove: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpeedtest {
    pub(super) enabled: Option<bool>,
    pub(super) max_download_bytes: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) max_concurrent_streams: Option<Spanned<u32>>,
    pub(super) max_header_list_size: Option<Spanned<u32>>,
    pub(super) max_continuation_frames: Option<u32>,
    pub(super) header_table_size: Option<Spanned<u32>>,
    pub(super) max_resets_per_window: Option<Spanned<u32>>,
    pub(super) max_pings_per_window: Option<Spanned<u32>>,
    pub(super) max_settings_per_window: Option<Spanned<u32>>,
    pub(super) max_glitches_per_window: Option<Spanned<u32>>,
    pub(super) flood_window_secs: Option<Spanned<u64>>,
    pub(super) max_request_body: Option<u64>,
    pub(super) max_connections: Option<Spanned<usize>>,
    pub(super) min_rate: Option<Spanned<u64>>,
    pub(super) send_buffer: Option<Spanned<usize>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    pub(super) header_secs: Option<Spanned<u64>>,
    pub(super) idle_secs: Option<Spanned<u64>>,
    pub(super) drain_secs: Option<Spanned<u64>>,
}

/// `access_log`: `true`, `false`, `"text"` or `"json"`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum RawAccessLog {
    On(bool),
    Format(String),
}
