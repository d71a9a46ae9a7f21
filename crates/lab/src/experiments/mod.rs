//! Experiments run side by side with peer servers: `sluice-lab run <experiment>`.
//!
//! ```text
//! sluice-lab run upload [--runs N] [--out DIR] [--servers sluice,nginx,nginx512,h2o,caddy] [--quick]
//!                       [--sluice PATH] [--max-minutes M]
//! sluice-lab run download [--runs N] [--out DIR] [--servers sluice,sluice-h3cubic,sluice-h3bbr,caddy]
//!                         [--quick] [--sluice PATH] [--max-minutes M]
//! sluice-lab run pageload [--runs N] [--out DIR] [--servers …,sluice-h3,caddy-h3] [--quick]
//! sluice-lab run fairness [--runs N] [--out DIR] [--servers sluice,sluice-h3cubic,…] [--quick]
//! sluice-lab run earlyhints [--runs N] [--out DIR] [--servers sluice,sluice-nolearn,h2o,caddy] [--quick]
//! sluice-lab run proxymem [--runs N] [--out DIR] [--servers sluice,nginx,h2o,caddy,haproxy] [--quick]
//!                         [--cap-secs S]
//! ```
//!
//! `--servers` also knows `sluice-fixed64k`, `sluice-fixed512k`, `sluice-writeup`, `sluice-quiche` and `sluice-hyper`:
//! Sluice with that receive-window policy (`[flow] policy`) beside its default; `sluice-cwnd`:
//! Sluice filling the congestion window (`[tcp] limit_inflight = false`); `sluice-h3bbr`,
//! `sluice-h3cubic`: HTTP/3 on quinn's BBR, CUBIC (`[quic] congestion`); `sluice-h3nocap`: HTTP/3
//! without the in-flight bound (`[quic] limit_inflight = false`); `sluice-tcpcubic`: TCP on
//! CUBIC without the in-flight bound (`[tcp] congestion = "cubic"`, `limit_inflight = false`).
//!
//! Each experiment starts the lab (two namespaces joined by the emulated link), the servers
//! inside the server namespace (TLS on the server address, one self-signed certificate), runs
//! its clients inside the client namespace, N runs per case with the server order rotating run
//! by run, and writes into `--out` (default `lab-results/<experiment>-<UTC timestamp>`):
//! `results.csv` (one row per run, written as it goes), `summary.md` (medians, min–max, h2/h1
//! ratios) and `<experiment>.png` / `.svg` charts; server configurations and logs stay in
//! `work/`. Servers are stopped and the lab torn down on success, error and Ctrl-C alike.
//!
//! Experiments: `upload` (the HTTP/2 upload write-up), `priority` (a critical resource on a busy
//! connection, the prioritization write-up; `--servers` also knows `nginx-tuned`, `h2o-tuned`,
//! `caddy-tuned`), `pageload` (the same at browser level: headless Chromium, a web font
//! discovered while images stream; `sluice-h3` and `caddy-h3` load it over HTTP/3), `download`
//! (a 200 MB file over HTTP/2 and HTTP/3 from Sluice and Caddy, `sluice get` as the client, at
//! three rates and RTTs and with 0.5 % loss; with the global default `--servers` it runs
//! `sluice,sluice-h3cubic,sluice-h3bbr,caddy`, the servers with HTTP/3 here), `fairness` (an
//! HTTP/3 download and a TCP CUBIC download sharing the link), `earlyhints` (headless Chromium
//! through reverse proxies of an origin that thinks 300 ms: FCP and LCP with learned, forwarded or
//! no 103 Early Hints; `sluice-nolearn` is Sluice with `early_hints_learn = false`), `proxymem`
//! (20 slow HTTP/2 clients download 100 MB each through each reverse proxy: its RSS; `haproxy` is
//! known here); `origin` is not yet available. `upload`'s default servers gain `sluice-proxy`
//! (Sluice proxying `/p/__up` to the same sink as the peers).
//!
//! Beside their figures, `download`, `pageload` and `fairness` report the emulated link during
//! each transfer (`upload` in `results.csv` only), in the direction of its data: drops per 100 MB delivered (by the
//! full queue, by the random loss) and the queue as arriving packets found it (p50/p95/peak,
//! packets and ms).

// The experiments, at the top: each names the layers below, never another experiment.
pub mod download;
pub mod earlyhints;
pub mod fairness;
pub mod pageload;
pub mod priority;
pub mod proxymem;
pub mod upload;

// What several experiments share, each module naming only those listed after it (the test
// `tests/layers.rs` keeps it so): the static-docroot runner, the set-up every experiment
// repeats, the clients, the lab with its servers, the run's plan, reports and helpers.
pub mod statics;

pub mod prepare;
pub mod transfer;

pub mod chromium;
pub mod digest;
pub mod h2client;
pub mod stage;

pub mod plan;
pub mod servers;

pub mod case;
pub mod chart;
pub mod common;
pub mod proc;
pub mod report;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plan::Plan;
use servers::ServerKind;

/// The experiments, present and planned.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExperimentName {
    /// 10 MiB upload, HTTP/1.1 vs HTTP/2, at 200 Mbit/s × 40 ms and × 10 ms RTT.
    Upload,
    /// 200 MB download, HTTP/2 vs HTTP/3, at 100 Mbit/s × 13 ms, 200 × 40, 500 × 10 and 200 × 40
    /// with 0.5 % loss.
    Download,
    /// A critical resource on a busy connection: 50 KB CSS after ten 1 MB images, busy vs idle.
    Priority,
    /// Headless Chromium loads a page: a web font discovered while 20 images stream, busy vs idle.
    Pageload,
    /// One HTTP/3 download and one TCP CUBIC download sharing the link: each one's share.
    Fairness,
    /// Headless Chromium through reverse proxies to an origin that thinks 300 ms: FCP and LCP
    /// with learned, forwarded or no 103 Early Hints.
    Earlyhints,
    /// 20 slow clients download 100 MB each through each reverse proxy: the proxy's memory.
    Proxymem,
    /// Connections per page with ORIGIN frames (not yet available).
    Origin,
}

impl ExperimentName {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Upload => "upload",
            Self::Download => "download",
            Self::Priority => "priority",
            Self::Pageload => "pageload",
            Self::Fairness => "fairness",
            Self::Earlyhints => "earlyhints",
            Self::Proxymem => "proxymem",
            Self::Origin => "origin",
        }
    }

    /// Runs the experiment, or says it is not available yet.
    fn run(self, plan: &Plan) -> Result<(), String> {
        match self {
            Self::Upload => upload::run(plan),
            Self::Priority => priority::run(plan),
            Self::Pageload => pageload::run(plan),
            Self::Download => download::run(plan),
            Self::Fairness => fairness::run(plan),
            Self::Earlyhints => earlyhints::run(plan),
            Self::Proxymem => proxymem::run(plan),
            Self::Origin => Err(format!(
                "experiment `{}` is not yet available (available: upload, download, priority, pageload, fairness, \
                 earlyhints, proxymem)",
                self.name()
            )),
        }
    }
}

/// Arguments of `sluice-lab run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The experiment: upload, download, priority, pageload, fairness, earlyhints, proxymem
    /// (origin: not yet available).
    #[arg(value_enum)]
    pub experiment: ExperimentName,
    /// Runs per server, protocol and case (default 5; 1 with --quick; `earlyhints`: loads per
    /// server, variant and case after one warm-up, default 10; `proxymem`: default 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: Option<u32>,
    /// Output directory (default lab-results/<experiment>-<UTC timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Servers, comma-separated, in first-run order. Also known: sluice-fixed64k, sluice-fixed512k,
    /// sluice-writeup, sluice-quiche, sluice-hyper (Sluice with that `[flow] policy`), sluice-cwnd
    /// (Sluice with `[tcp] limit_inflight = false`), sluice-h3bbr, sluice-h3cubic (`[quic]
    /// congestion`), sluice-h3nocap (`[quic] limit_inflight = false`), sluice-tcpcubic; for
    /// `priority` also nginx-tuned, h2o-tuned, caddy-tuned (tcp_notsent_lowat 16384 and BBR in the
    /// server namespace); for `pageload` also sluice-h3, caddy-h3 (Chromium forced onto HTTP/3).
    /// For `download` this default means sluice,sluice-h3cubic,sluice-h3bbr,caddy (nginx and h2o
    /// have no HTTP/3 here); for `pageload` it gains sluice-h3,caddy-h3; for `fairness` (the HTTP/3
    /// side against a TCP CUBIC download) it means sluice; for `upload` it gains sluice-proxy (Sluice
    /// proxying to the sink); for `earlyhints` it means sluice,sluice-nolearn,h2o,caddy (reverse
    /// proxies; sluice-nolearn: `early_hints_learn = false`); for `proxymem`
    /// sluice,nginx,h2o,caddy,haproxy.
    #[arg(long, default_value = "sluice,nginx,nginx512,h2o,caddy")]
    pub servers: String,
    /// Smoke run: 1 run, the first case only (the CI's "one upload case"); `download`: a 20 MB
    /// body; `fairness`: a 5 s window.
    #[arg(long)]
    pub quick: bool,
    /// `upload` only: also run the fast, short links, 1 Gbit/s × 2 ms and × 5 ms and 500 Mbit/s
    /// × 5 ms (the emulator reaches about 820 Mbit/s with MTU 1500 on two cores: a gigabit case
    /// is partly emulator-bound, and the report says so).
    #[arg(long)]
    pub gigabit: bool,
    /// `priority` and `pageload` only: every server compresses its responses, switched on as an
    /// operator would (Sluice `[compression] enabled`, nginx `gzip on` for stylesheets and
    /// scripts, h2o `compress: ON`, Caddy `encode zstd gzip`); without it none does.
    #[arg(long)]
    pub compress: bool,
    /// Only these cases, comma-separated, by the names the reports use (e.g. `20mbit-40ms`).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub cases: Vec<String>,
    /// The Sluice binary (default: `sluice` next to sluice-lab, or $SLUICE_BIN).
    #[arg(long)]
    pub sluice: Option<PathBuf>,
    /// Bound on the whole run in minutes (default: 3 × the expected duration, at least 3
    /// minutes more than it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1440))]
    pub max_minutes: Option<u32>,
    /// `proxymem` only: stop the downloads after this many seconds (default 60; 10 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub cap_secs: Option<u32>,
}

/// `sluice-lab run`.
pub fn run_main(a: RunArgs) -> Result<(), String> {
    let servers = ServerKind::parse_list(&a.servers)?;
    let out =
        a.out.unwrap_or_else(|| PathBuf::from("lab-results").join(format!("{}-{}", a.experiment.name(), timestamp())));
    // Absolute: server configurations under it name files by path, and a relative path there
    // would be taken relative to the configuration file.
    let out = std::path::absolute(&out).map_err(|e| format!("output directory {}: {e}", out.display()))?;
    let plan = Plan {
        servers,
        runs: a.runs.unwrap_or(if a.quick { 1 } else { 5 }),
        runs_given: a.runs.is_some(),
        quick: a.quick,
        gigabit: a.gigabit,
        compress: a.compress,
        cases: a.cases,
        out,
        sluice: a.sluice,
        bound: a.max_minutes.map(|m| Duration::from_secs(u64::from(m) * 60)),
        cap: a.cap_secs.map(|s| Duration::from_secs(u64::from(s))),
    };
    proc::install_signal_handlers();
    a.experiment.run(&plan)
}

/// UTC `YYYYMMDD-HHMMSS` for output directory names.
pub fn timestamp() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_utc(secs)
}

/// `secs` since the epoch as UTC `YYYYMMDD-HHMMSS` (civil-from-days, proleptic Gregorian).
fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(format_utc(0), "19700101-000000");
        assert_eq!(format_utc(951_782_400), "20000229-000000");
        assert_eq!(format_utc(1_700_000_000), "20231114-221320");
    }

    #[test]
    fn origin_is_not_yet_available() {
        let plan = Plan {
            servers: vec![ServerKind::Sluice],
            runs: 1,
            runs_given: false,
            quick: true,
            gigabit: false,
            compress: false,
            cases: vec![],
            out: PathBuf::from("/nonexistent"),
            sluice: None,
            bound: None,
            cap: None,
        };
        let e = ExperimentName::Origin.run(&plan).unwrap_err();
        assert!(e.contains("not yet available") && e.contains("download"), "{e}");
    }
}
