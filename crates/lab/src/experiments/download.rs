//! The `download` experiment: one large file, HTTP/2 against HTTP/3, from Sluice and from Caddy
//! side by side, and HTTP/2 with curl too. The bar: a 200 MB download at 100 Mbit/s ×
//! 13 ms, 200 Mbit/s × 40 ms and 500 Mbit/s × 10 ms RTT with h3/h2 ≥ 0.95 in each, and at
//! 200 Mbit/s × 40 ms with 0.5 % random loss h3/h2 ≥ 0.8 with HTTP/2 on BBR.
//!
//! Every server serves the same docroot (`body.bin`: [`BODY_BYTES`] random bytes; `--quick`:
//! [`QUICK_BODY_BYTES`] and the first case only) as static files over TLS and over HTTP/3 on
//! UDP at the same port ([`servers::static_launch_h3`]: Sluice's `[quic]`, Caddy's
//! `protocols h1 h2 h3`). The client is the project's own, `sluice get --json`, run inside the
//! client namespace with `--http2` or `--http3` (no fallback either way), the body discarded;
//! the figure is its `bytes × 8 / seconds` in Mbit/s, the clock running from just before the
//! connect (QUIC or TCP + TLS handshakes included) to the last body byte. A run counts when the
//! status is 200, every byte arrived and the protocol is the one asked for; a failed run stays in
//! `results.csv` with its error, out of the figures.
//!
//! Each run adds a third download per server, with curl (`curl --http2`, protocol `h2-curl` in
//! the CSV): a client none of the servers wrote, for the later issue's row that Sluice's HTTP/2
//! downloads be at least as fast as every peer's. Its figure is curl's `%{size_download}` × 8 /
//! `%{time_total}`, the same clock as `sluice get`'s.
//!
//! In each run every server is measured in an order rotating run by run, h2, h3 then curl's h2
//! in odd runs and the reverse in even ones, with a pause between transfers so queues drain.
//! Sluice sets BBR on its own TCP sockets (`[tcp] congestion`, default `bbr`); for the loss case the server
//! namespace's default (`net.ipv4.tcp_congestion_control`) is set to `bbr` too, so Caddy's
//! HTTP/2 runs on BBR there (accepted sockets of a listener that did not choose its congestion
//! control take the namespace's default), and restored afterwards. HTTP/3 runs on each server's
//! own QUIC congestion control (Sluice: `[quic] congestion`, its default unless a variant sets
//! it; quic-go: its own).
//!
//! With `--servers` left at the global default, the experiment runs `sluice` (its defaults),
//! `sluice-h3cubic` and `sluice-h3bbr` (HTTP/3 on quinn's CUBIC, on its BBR) and `caddy`; a list
//! given replaces it (`sluice-h3nocap`: HTTP/3 without Sluice's in-flight bound). nginx
//! 1.22 and h2o 2.2 (the Debian packages) have no HTTP/3: listed explicitly they serve HTTP/2
//! only (`sluice get --http2` and curl), their h3 column empty; Sluice's variants
//! (`sluice-cwnd`, `sluice-fixed64k`, …) run as they are.
//!
//! Beside each download the emulated link's server → client direction is read over that
//! transfer: packets dropped by the full queue and by the random loss per 100 MB delivered, and
//! the queue as arriving packets found it (p50/p95/peak in packets and ms).
//!
//! Output: `results.csv` (one row per transfer, as it goes, with the link's readings),
//! `summary.md` (per case each server's h2 and h3 medians with min–max, the h3/h2 ratio of the
//! medians and whether Sluice meets the bar, then the link readings per server and protocol;
//! curl's HTTP/2 median, and each Sluice server's curl median against each peer's; the issue's
//! nginx figures quoted, marked as such), `download.png`/`.svg` (the loss-free
//! cases) and `download-loss.png`/`.svg` (the loss case: the chart's panel titles show rate
//! and RTT only, so it gets a chart of its own).

use std::fs;
use std::path::Path;
use std::time::Duration;

use super::case::link_spec;
use super::chart;
use super::common::{fmt_duration, one_line, rotation};
use super::plan::{Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Site, Want};
use super::proc;
use super::report::{self, fmt_stat, LinkWindow, Row, Summary};
use super::servers::{self, ServerKind};
use super::stage::Stage;
use super::transfer::{
    curl_args, get_args, judge, probe_h3, proto_order, url, write_docroot, Proto, FILE, FLOOR_MBIT, H3_READY_TIMEOUT,
    READY_FILE, READY_TEXT,
};
use crate::model::{LinkSpec, Queue};
use crate::net::{self, SERVER_NS};

/// The body: 200 MB.
pub const BODY_BYTES: u64 = 200_000_000;
/// The body of a `--quick` run.
pub const QUICK_BODY_BYTES: u64 = 20_000_000;
/// The bar for Sluice's h3/h2 ratio without loss.
pub const BAR: f64 = 0.95;
/// The bar with loss (HTTP/2 on BBR).
pub const LOSS_BAR: f64 = 0.8;
/// Slack on top of the body at [`FLOOR_MBIT`]: handshakes, start-up.
const MAX_TIME_SLACK: Duration = Duration::from_secs(30);
/// The bound in the loss case: a download still running after a minute is far below the bar
/// (200 MB at 0.8 × 170 Mbit/s takes 12 s), and its partial rate is the figure; loss-based
/// QUIC controllers run at a few Mbit/s there and would otherwise take minutes each.
const LOSS_MAX_TIME: Duration = Duration::from_secs(60);
/// Pause between transfers, so queues drain and closed connections finish.
const PAUSE: Duration = Duration::from_millis(300);
/// The sysctl that gives Caddy's HTTP/2 BBR in the loss case.
const CC_SYSCTL: &str = "net.ipv4.tcp_congestion_control";

/// The figures for nginx and the other HTTP/3 peers, quoted (not measured here).
pub const QUOTED: [&str; 3] = [
    "nginx 1.31: h3/h2 = 0.40 at 100 Mbit/s × 13 ms RTT",
    "nginx 1.31: h3/h2 = 0.07 at 200 Mbit/s × 40 ms RTT",
    "with 0.5 % loss every HTTP/3 peer stayed at 5–31 Mbit/s: h3/h2 ≤ 0.18",
];

/// One link setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Name in the CSV: `200mbit-40ms`, `200mbit-40ms-loss0.5`.
    pub name: String,
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Random loss, percent of packets, each way.
    pub loss_pct: f64,
    /// The bar for Sluice's h3/h2 ratio.
    pub bar: f64,
}

impl Case {
    fn new(rate_mbit: f64, rtt_ms: f64, loss_pct: f64) -> Self {
        let mut name = format!("{rate_mbit}mbit-{rtt_ms}ms");
        let bar = if loss_pct > 0.0 {
            name.push_str(&format!("-loss{loss_pct}"));
            LOSS_BAR
        } else {
            BAR
        };
        Self { name, rate_mbit, rtt_ms, loss_pct, bar }
    }

    /// Whether the link drops packets at random.
    pub fn lossy(&self) -> bool {
        self.loss_pct > 0.0
    }

    /// The link: the lab's default (1.5 × BDP drop-tail queue, RTT/2 each way) plus the loss,
    /// both ways.
    pub fn link(&self) -> LinkSpec {
        let mut spec = link_spec(self.rate_mbit, self.rtt_ms);
        spec.up.loss_pct = self.loss_pct;
        spec.down.loss_pct = self.loss_pct;
        spec
    }

    /// `200 Mbit/s × 40 ms RTT, 0.5 % loss`.
    pub fn title(&self) -> String {
        let loss = if self.lossy() { format!(", {} % loss each way", self.loss_pct) } else { String::new() };
        format!("{} Mbit/s × {} ms RTT{loss}", self.rate_mbit, self.rtt_ms)
    }

    /// Rough seconds for one transfer of `body` bytes, pause included: about 85 % of the rate
    /// without loss, 40 % with (HTTP/3 peers were far slower there; this is an estimate only).
    pub fn seconds(&self, body: u64) -> f64 {
        let share = if self.lossy() { 0.4 } else { 0.85 };
        body as f64 * 8.0 / (self.rate_mbit * 1e6 * share) + 1.0 + PAUSE.as_secs_f64()
    }
}

/// The cases: 100 Mbit/s × 13 ms, 200 Mbit/s × 40 ms, 500 Mbit/s × 10 ms, and 200 Mbit/s ×
/// 40 ms with 0.5 % loss; `quick` keeps the first.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case::new(100.0, 13.0, 0.0),
        Case::new(200.0, 40.0, 0.0),
        Case::new(500.0, 10.0, 0.0),
        Case::new(200.0, 40.0, 0.5),
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// The body size of a run.
pub fn body_bytes(quick: bool) -> u64 {
    if quick {
        QUICK_BODY_BYTES
    } else {
        BODY_BYTES
    }
}

/// `sluice get --max-time` for a body: the body at [`FLOOR_MBIT`], plus [`MAX_TIME_SLACK`].
pub fn max_time(body: u64) -> Duration {
    Duration::from_secs((body as f64 * 8.0 / (FLOOR_MBIT * 1e6)).ceil() as u64) + MAX_TIME_SLACK
}

/// The servers the global default `--servers` means here: Sluice with its defaults, with
/// HTTP/3 on CUBIC and on BBR, and Caddy.
pub const DOWNLOAD_DEFAULT: [ServerKind; 4] = [
    ServerKind::Sluice,
    ServerKind::SluiceFlow(servers::Flow::QuicCubic),
    ServerKind::SluiceFlow(servers::Flow::QuicBbr),
    ServerKind::Caddy,
];

/// Why `kind` has no HTTP/3 here, if it has none: its downloads are HTTP/2 only (`sluice get
/// --http2` and curl), its h3 column stays empty.
pub fn no_h3(kind: ServerKind) -> Option<&'static str> {
    match kind {
        ServerKind::Nginx | ServerKind::Nginx512 | ServerKind::NginxTuned => {
            Some("no HTTP/3 in the Debian package (nginx 1.22; `http_v3` came with 1.25)")
        }
        ServerKind::H2o | ServerKind::H2oTuned => Some("no HTTP/3 in the Debian package (h2o 2.2; QUIC came with 2.3)"),
        _ => None,
    }
}

/// The servers to run for `requested`: the global default list means [`DOWNLOAD_DEFAULT`];
/// nginx and h2o (no HTTP/3 here) run HTTP/2 only; servers that are not static-file servers here,
/// and Caddy's `-tuned` variant, are skipped with the reason.
pub fn select_servers(requested: &[ServerKind]) -> Result<(Vec<ServerKind>, Vec<Skipped>), String> {
    if requested == servers::DEFAULT {
        return Ok((DOWNLOAD_DEFAULT.to_vec(), Vec::new()));
    }
    let mut keep = Vec::new();
    let mut skipped = Vec::new();
    for &k in requested {
        let reason = match k {
            ServerKind::Sluice | ServerKind::SluiceFlow(_) | ServerKind::Caddy => None,
            ServerKind::Nginx
            | ServerKind::Nginx512
            | ServerKind::NginxTuned
            | ServerKind::H2o
            | ServerKind::H2oTuned => None,
            ServerKind::CaddyTuned => Some(
                "the download experiment runs Caddy's HTTP/2 on BBR in the loss case by itself; list `caddy` instead",
            ),
            ServerKind::SluiceH3 | ServerKind::CaddyH3 => {
                Some("the download experiment runs HTTP/3 for every server by itself; list `sluice` or `caddy` instead")
            }
            ServerKind::SluiceProxy | ServerKind::SluiceNoLearn | ServerKind::Haproxy => {
                Some("a reverse proxy: the download experiment serves static files (list `sluice` or `caddy`)")
            }
        };
        match reason {
            None => keep.push(k),
            Some(r) => skipped.push(Skipped { server: k, reason: r.into() }),
        }
    }
    if keep.is_empty() {
        return Err("none of the requested servers serves static files here (the download experiment knows sluice, \
                    its variants, caddy, nginx and h2o)"
            .into());
    }
    Ok((keep, skipped))
}

/// Expected seconds of a whole run.
pub fn expected_seconds(cases: &[Case], servers: &[ServerKind], runs: u32, body: u64) -> f64 {
    let per_run: f64 = cases.iter().map(|c| downloads_per_run(servers) as f64 * c.seconds(body)).sum();
    // Start-up: the body file, the lab, each server and its HTTP/3 probe.
    per_run * runs as f64 + 10.0 + 5.0 * servers.len() as f64
}

/// Downloads per case and run: three per server, two for one without HTTP/3.
pub fn downloads_per_run(servers: &[ServerKind]) -> usize {
    servers.iter().map(|k| if no_h3(*k).is_some() { 2 } else { 3 }).sum()
}

fn title(body: u64) -> String {
    format!("download: {} MB GET, HTTP/2 vs HTTP/3, sluice get --json and curl", body / 1_000_000)
}

/// The `summary.md` text: notes, one table per case (each server's h2 and h3 medians with
/// min–max, h3/h2 of the medians, ok runs; Sluice's verdict), the ratios side by side, the
/// issue's quoted figures and the failed runs.
pub fn markdown(rows: &[Row], cases: &[Case], body: u64, notes: &[String]) -> String {
    let s = Summary::from_rows(rows);
    let mut md = format!("# {}\n\n", title(body));
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let shown: Vec<&Case> = cases.iter().filter(|c| rows.iter().any(|r| r.case == c.name)).collect();
    for case in &shown {
        md.push_str(&format!("\n## {} (`{}`)\n\n", case.title(), case.name));
        md.push_str(
            "| server | h2 Mbit/s median (min–max) | h3 Mbit/s median (min–max) | h3/h2 | curl h2 Mbit/s median \
             (min–max) | ok runs |\n|---|---:|---:|---:|---:|---|\n",
        );
        for server in &s.servers {
            let cell = |p: &str| s.cell(&case.name, server, p);
            if cell("h2").is_none() && cell("h3").is_none() && cell(CURL).is_none() {
                continue;
            }
            let fmt = |p: &str| cell(p).and_then(|c| c.stat).map_or_else(|| "n/a".into(), |st| fmt_stat(&st, 1));
            let runs = |p: &str| {
                cell(p).map_or_else(
                    || format!("{p} 0/0"),
                    |c| format!("{p} {}/{}", c.stat.map_or(0, |st| st.n), c.attempted),
                )
            };
            md.push_str(&format!(
                "| {server} | {} | {} | {} | {} | {}, {}, {} |\n",
                fmt("h2"),
                fmt("h3"),
                fmt_ratio(s.ratio(&case.name, server, "h3", "h2")),
                fmt(CURL),
                runs("h2"),
                runs("h3"),
                runs(CURL)
            ));
        }
        md.push('\n');
        for server in s.servers.iter().filter(|n| n.starts_with("sluice")) {
            md.push_str(&verdict(server, s.ratio(&case.name, server, "h3", "h2"), case));
        }
        md.push_str(&curl_verdicts(&s, &case.name));
        if let Some(table) = report::link_table(rows, &case.name, "Mbit/s") {
            md.push_str(
                "\nThe link's server → client direction during each download (medians over the successful runs): \
                 packets dropped by the full queue and by the random loss per 100 MB delivered, and the queue as \
                 arriving packets found it.\n\n",
            );
            md.push_str(&table);
        }
    }
    if shown.len() > 1 {
        md.push_str("\n## h3/h2 ratio of the medians\n\n| server |");
        for case in &shown {
            md.push_str(&format!(" {} |", case.name));
        }
        md.push_str("\n|---|");
        md.push_str(&"---:|".repeat(shown.len()));
        md.push('\n');
        for server in &s.servers {
            md.push_str(&format!("| {server} |"));
            for case in &shown {
                md.push_str(&format!(" {} |", fmt_ratio(s.ratio(&case.name, server, "h3", "h2"))));
            }
            md.push('\n');
        }
    }
    md.push_str("\n## For comparison: quoted from the issue, not measured here\n\n");
    for q in QUOTED {
        md.push_str(&format!("- {q} (quoted)\n"));
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.ok).collect();
    if !failed.is_empty() {
        md.push_str("\n## Failed runs\n\n");
        for r in failed {
            md.push_str(&format!("- {} {} {} run {}: {}\n", r.case, r.server, r.protocol, r.run, r.error));
        }
    }
    md
}

/// The protocol name of curl's HTTP/2 downloads.
const CURL: &str = Proto::H2Curl.name();

/// Per Sluice server, its curl HTTP/2 median against each other server's in `case` (the
/// issue's row: HTTP/2 downloads at least as fast as every peer's, with a third-party client).
fn curl_verdicts(s: &Summary, case: &str) -> String {
    let median = |server: &str| s.median(case, server, CURL);
    let mut out = String::new();
    for ours in s.servers.iter().filter(|n| n.starts_with("sluice")) {
        let Some(m) = median(ours) else { continue };
        for peer in s.servers.iter().filter(|n| !n.starts_with("sluice")) {
            if let Some(p) = median(peer).filter(|p| *p > 0.0) {
                let word = if m >= p { "at least as fast as" } else { "slower than" };
                out.push_str(&format!("`{ours}` with curl over HTTP/2: {:.3} × `{peer}`'s, {word} it.\n", m / p));
            }
        }
    }
    out
}

/// `243750 bytes`, `100 packets`.
fn fmt_queue(q: Queue) -> String {
    match q {
        Queue::Bytes(b) => format!("{b} bytes"),
        Queue::Packets(p) => format!("{p} packets"),
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".into(), |r| format!("{r:.2}"))
}

/// The line on whether `server` meets the case's bar.
fn verdict(server: &str, ratio: Option<f64>, case: &Case) -> String {
    let bbr = if case.lossy() { ", HTTP/2 on BBR" } else { "" };
    match ratio {
        Some(r) => {
            let word = if r >= case.bar { "meets" } else { "misses" };
            format!("`{server}`: h3/h2 = {r:.2} {word} the bar of ≥ {}{bbr}.\n", case.bar)
        }
        None => {
            format!("`{server}`: h3/h2 n/a (no successful h2 and h3 runs to compare; the bar is ≥ {}).\n", case.bar)
        }
    }
}

/// Writes `summary.md` and the charts (`download.*` for the loss-free cases, `download-loss.*`
/// for the loss case), each chart only when it has rows.
pub fn write_outputs(dir: &Path, rows: &[Row], cases: &[Case], body: u64, notes: &[String]) -> Result<(), String> {
    let md_path = dir.join("summary.md");
    fs::write(&md_path, markdown(rows, cases, body, notes))
        .map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    let lossy: Vec<&str> = cases.iter().filter(|c| c.lossy()).map(|c| c.name.as_str()).collect();
    let (loss_rows, clean_rows): (Vec<Row>, Vec<Row>) =
        rows.iter().cloned().partition(|r| lossy.contains(&r.case.as_str()));
    if !clean_rows.is_empty() {
        chart::write_charts(dir, "download", &Summary::from_rows(&clean_rows), &title(body))?;
    }
    if !loss_rows.is_empty() {
        let loss = cases.iter().find(|c| c.lossy()).map(|c| c.loss_pct).unwrap_or_default();
        let t = format!("{}, {loss} % loss each way", title(body));
        chart::write_charts(dir, "download-loss", &Summary::from_rows(&loss_rows), &t)?;
    }
    Ok(())
}

/// The server namespace's TCP congestion control set to BBR, restored when dropped.
struct Bbr {
    old: String,
}

impl Bbr {
    fn set() -> Result<Self, String> {
        let old = net::sysctl_get_in(SERVER_NS, CC_SYSCTL)?;
        net::sysctl_in(SERVER_NS, CC_SYSCTL, "bbr")?;
        Ok(Self { old })
    }
}

impl Drop for Bbr {
    fn drop(&mut self) {
        if let Err(e) = net::sysctl_in(SERVER_NS, CC_SYSCTL, &self.old) {
            eprintln!("sluice-lab: restoring {CC_SYSCTL} = {}: {e}", self.old);
        }
    }
}

/// Runs the experiment: resolves the servers, writes the docroot, starts the lab and the
/// servers, runs every case, writes `results.csv` as it goes, then `summary.md` and the charts
/// (also after an error or Ctrl-C, from the transfers done so far).
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick), |c| &c.name)?;
    let body = body_bytes(plan.quick);
    let limit = max_time(body);
    let (wanted, skipped) = select_servers(&plan.servers)?;
    let default_list = plan.servers == servers::DEFAULT;
    let estimate = |active: &[Active]| {
        let kinds: Vec<ServerKind> = active.iter().map(|(k, _)| *k).collect();
        let transfers = cases.len() * downloads_per_run(&kinds) * plan.runs as usize;
        Estimate {
            what: format!(
                "{} case(s) × {} server(s) (3 downloads each, 2 without HTTP/3) × {} run(s) = {transfers} \
                 downloads of {body} bytes (each bounded to {} s)",
                cases.len(),
                active.len(),
                plan.runs,
                limit.as_secs(),
            ),
            expected: Duration::from_secs_f64(expected_seconds(&cases, &kinds, plan.runs, body)),
        }
    };
    let csv_header = report::csv_header_line();
    let write = |dir: &Path| write_docroot(dir, body);
    let mut p = prepare(
        plan,
        Want {
            skipped,
            sluice: Some("the download experiment's client is `sluice get`"),
            // The servers may read the files as another user: every parent must be traversable.
            site: Some(Site { write: &write, reach: 0o711 }),
            ..Want::new("download", wanted, &estimate, &csv_header)
        },
    )?;
    let client = p.sluice.clone().unwrap_or_default();
    let client = client.to_str().ok_or("the sluice binary's path is not UTF-8")?.to_string();
    p.versions.push(format!("client: {client} get"));

    let mut rows: Vec<Row> = Vec::new();
    let mut run_notes: Vec<String> = Vec::new();
    let mut cpu_max = 0.0f64;
    let mut final_stats = None;
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&cases[0].link())?;
        let (docroot, active) = (p.docroot.clone(), p.active.clone());
        let running = p.start_each(&mut stage, &active, |stage, kind, bin, setup| {
            let launch = match no_h3(kind) {
                None => servers::static_launch_h3(kind, setup, &docroot, false),
                Some(_) => servers::static_launch(kind, setup, &docroot, false),
            };
            launch.and_then(|l| stage.start_static(kind, bin, setup, &l, &url(kind, READY_FILE)))?;
            if let Some(why) = no_h3(kind) {
                run_notes.push(format!("`{}` ran HTTP/2 only: {why}.", kind.name()));
                return Ok(());
            }
            if let Err(e) = probe_h3(stage, &client, &url(kind, READY_FILE), READY_TEXT.len() as u64) {
                eprintln!("sluice-lab: WARNING {}: HTTP/3 does not answer ({e}); its h3 runs will fail", kind.name());
                run_notes.push(format!(
                    "`{}` did not answer the HTTP/3 readiness probe within {} s ({}); its h3 runs are recorded \
                     as failures.",
                    kind.name(),
                    H3_READY_TIMEOUT.as_secs(),
                    one_line(&e)
                ));
            }
            Ok(())
        });
        if running.is_empty() {
            return Err("no server started (see above)".into());
        }
        let total = cases.len() * downloads_per_run(&running) * plan.runs as usize;
        let mut done = 0;
        for case in &cases {
            stage.set_link(&case.link());
            let _bbr = if case.lossy() {
                match Bbr::set() {
                    Ok(g) => {
                        println!("   {CC_SYSCTL} = bbr in the server namespace for this case (was {})", g.old);
                        Some(g)
                    }
                    Err(e) => {
                        eprintln!("sluice-lab: WARNING: could not set {CC_SYSCTL} = bbr: {e}");
                        run_notes.push(format!(
                            "Could not set `{CC_SYSCTL} = bbr` in the server namespace for `{}` ({e}): peers' \
                             HTTP/2 ran on the namespace's default there.",
                            case.name
                        ));
                        None
                    }
                }
            } else {
                None
            };
            println!("== {}: {}", case.name, case.title());
            for run in 1..=plan.runs {
                for kind in rotation(&running, run) {
                    for proto in proto_order(run) {
                        if proto == Proto::H3 && no_h3(kind).is_some() {
                            continue;
                        }
                        p.go_on(|| format!(" after {done} of {total} downloads"))?;
                        done += 1;
                        let before = stage.stats();
                        let limit = if case.lossy() { limit.min(LOSS_MAX_TIME) } else { limit };
                        let mut row = download_once(&mut stage, &client, case, kind, proto, run, body, limit)?;
                        // Ctrl-C reaches the client too: that failure is not the server's.
                        proc::check_interrupt()?;
                        let window = stage.stats().since(&before);
                        row.link = LinkWindow::of(&window.down);
                        cpu_max = cpu_max.max(window.cpu_pct());
                        let q = window.down.queue();
                        let fwd = format!(
                            "forwarder {:.0} % CPU; down: {} lost, {} queue drops; queue p50/p95/peak {}/{}/{} \
                             packets, {:.1}/{:.1}/{:.1} ms",
                            window.cpu_pct(),
                            window.down.dropped_loss,
                            window.down.dropped_queue,
                            q.p50_packets,
                            q.p95_packets,
                            q.peak_packets,
                            q.p50_ms,
                            q.p95_ms,
                            q.peak_ms
                        );
                        let what = if row.ok {
                            format!("{:.1} Mbit/s ({:.2} s; {fwd})", row.mbps, row.seconds)
                        } else {
                            format!("FAILED: {} ({fwd})", row.error)
                        };
                        println!(
                            "[{done}/{total}] {} run {run} {:<14} {}: {what}",
                            case.name,
                            kind.name(),
                            proto.name()
                        );
                        p.csv.line(&report::csv_line(&row))?;
                        rows.push(row);
                        proc::sleep(PAUSE)?;
                    }
                }
            }
        }
        final_stats = stage.stop();
        Ok(())
    })();
    let _ = fs::remove_file(p.docroot.join(FILE));

    let elapsed = p.started.elapsed();
    let mut notes = notes(plan, &cases, body, default_list, &p.versions, &p.skipped, &rows, cpu_max, elapsed);
    notes.extend(run_notes);
    if let Some(s) = final_stats {
        notes.push(format!("Link forwarder over the whole run: {}", s.to_string().replace('\n', "; ")));
    }
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", one_line(e)));
    }
    let written = write_outputs(&plan.out, &rows, &cases, body, &notes);
    outcome?;
    written?;
    println!(
        "download: done in {}; {} of {} downloads ok; wrote {}/{{results.csv,summary.md,download.png,download.svg{}}}",
        fmt_duration(p.started.elapsed()),
        rows.iter().filter(|r| r.ok).count(),
        rows.len(),
        plan.out.display(),
        if cases.iter().any(Case::lossy) { ",download-loss.png,download-loss.svg" } else { "" }
    );
    let s = Summary::from_rows(&rows);
    for case in &cases {
        let parts: Vec<String> =
            s.servers.iter().map(|srv| format!("{srv} {}", fmt_ratio(s.ratio(&case.name, srv, "h3", "h2")))).collect();
        println!("h3/h2 at {} (bar for Sluice ≥ {}): {}", case.name, case.bar, parts.join(", "));
    }
    Ok(())
}

/// One download: `sluice get` in the client namespace, judged into a row (a failed download
/// is a row with `ok = false`, not an error; only an interrupt is an error).
#[allow(clippy::too_many_arguments)]
fn download_once(
    stage: &mut Stage,
    client: &str,
    case: &Case,
    kind: ServerKind,
    proto: Proto,
    run: u32,
    body: u64,
    limit: Duration,
) -> Result<Row, String> {
    let mut row = Row::pending("download", &case.name, case.rtt_ms, case.rate_mbit, kind.name(), proto.name(), run);
    if let Err(e) = stage.check_alive(kind.name()) {
        row.error = one_line(&e);
        return Ok(row);
    }
    let u = url(kind, FILE);
    let f = match proto {
        Proto::H2Curl => stage.client("curl", &curl_args(&u, limit), limit + Duration::from_secs(15))?,
        Proto::H2 | Proto::H3 => stage.client(client, &get_args(proto, &u, limit), limit + Duration::from_secs(15))?,
    };
    let (mbps, seconds, error) = judge(f.success(), &f.describe(), &f.stderr, &f.stdout, proto, body, limit);
    row.mbps = mbps;
    row.seconds = seconds;
    row.ok = error.is_empty();
    row.error = error;
    Ok(row)
}

/// The notes at the top of `summary.md`: method, links, servers, versions, what was skipped.
#[allow(clippy::too_many_arguments)]
fn notes(
    plan: &Plan,
    cases: &[Case],
    body: u64,
    default_list: bool,
    versions: &[String],
    skipped: &[Skipped],
    rows: &[Row],
    cpu_max: f64,
    elapsed: Duration,
) -> Vec<String> {
    let mut n = vec![
        format!(
            "Method: `GET /{FILE}` ({body} random bytes) with the project's own client, `sluice get --http2` \
             (TLS, ALPN h2) and `sluice get --http3` (QUIC, ALPN h3; no fallback either way), `-k --json`, the body \
             discarded, one new connection per download, run in the client namespace. The figure is bytes × 8 / \
             seconds / 10⁶, the clock running from just before the connect (handshakes included) to the last body \
             byte. A download counts when the status is 200, all {body} bytes arrived and the protocol is the one \
             asked for; each is bounded to {} s (the body at {FLOOR_MBIT} Mbit/s plus {} s; {} s in the loss case, where a \
             cut-off download's partial rate is its figure). A third download per run is a third-party client's, \
             `curl --http2 -k -o /dev/null` (`h2-curl`; curl 7.88 with nghttp2 1.52, Debian's), its figure \
             `%{{size_download}}` × 8 / `%{{time_total}}` (also from before the connect), so that servers' HTTP/2 \
             compare with a client none of them wrote. Runs: {} per server, client and case; the server order \
             rotates run by run, the downloads go h2, h3, curl h2 in odd runs and the reverse in even ones, {} ms \
             pause between downloads.",
            max_time(body).as_secs(),
            MAX_TIME_SLACK.as_secs(),
            LOSS_MAX_TIME.as_secs(),
            plan.runs,
            PAUSE.as_millis()
        ),
        format!(
            "Links: sluice-lab's emulator between two network namespaces, the rate both ways, one-way delay RTT/2 \
             each way, drop-tail queue 1.5 × BDP (the lab's default); cases: {}.",
            cases
                .iter()
                .map(|c| format!("{} ({}, queue {})", c.name, c.title(), fmt_queue(c.link().down.queue)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        "Servers serve the same docroot as static files over TLS with one self-signed certificate, and HTTP/3 \
         on UDP at the same port: `sluice` (`[[site]] root`, `[quic] enabled = true`; its TCP sockets use BBR \
         by default, `[tcp] congestion = \"bbr\"`; QUIC runs on the `[quic]` defaults unless a variant sets \
         them), `caddy` (`file_server`, `servers { protocols h1 h2 h3 }`: quic-go; its TCP follows the \
         namespace's default congestion control)."
            .into(),
    ];
    if cases.iter().any(Case::lossy) {
        n.push(format!(
            "Loss case: `{CC_SYSCTL} = bbr` in the server namespace for that case only (restored afterwards), so \
             every server's HTTP/2 runs on BBR there, as the issue asks; HTTP/3 keeps each server's own QUIC \
             congestion control. The bar for Sluice there is h3/h2 ≥ {LOSS_BAR}, elsewhere ≥ {BAR}."
        ));
    }
    if default_list {
        n.push(
            "`--servers` was the global default: the download experiment runs `sluice` (its defaults), \
             `sluice-h3cubic` and `sluice-h3bbr` (HTTP/3 on quinn's CUBIC and on its BBR: in the loss case CUBIC, \
             like every loss-based controller, is held to about MSS/RTT × 1.22/√p, some 4 Mbit/s at 0.5 % and \
             40 ms) and `caddy` (nginx 1.22 and h2o 2.2, the Debian packages, have no HTTP/3)."
                .into(),
        );
    }
    n.extend(servers::variants_note(&plan.servers));
    if !versions.is_empty() {
        n.push(format!("Versions: {}.", versions.join("; ")));
    }
    for s in skipped {
        n.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    let ok = rows.iter().filter(|r| r.ok).count();
    n.push(format!(
        "{ok} of {} downloads succeeded (failed ones are in results.csv with their error, out of the figures); \
         wall time {}; the link forwarder peaked at {cpu_max:.0} % of one core during a download{}. HTTP/3 runs \
         QUIC and its crypto in user space at both ends, on the same cores as the emulator: at high rates on a \
         small machine it is partly CPU-bound.",
        rows.len(),
        fmt_duration(elapsed),
        if cpu_max > 85.0 { " (near CPU-bound: figures near the link rate may be capped by the emulator)" } else { "" }
    ));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cases() {
        let c = cases(false);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["100mbit-13ms", "200mbit-40ms", "500mbit-10ms", "200mbit-40ms-loss0.5"]);
        assert_eq!(c.iter().map(|c| c.bar).collect::<Vec<_>>(), [0.95, 0.95, 0.95, 0.8]);
        assert_eq!(cases(true), c[..1]);
        assert!(!c[1].lossy() && c[3].lossy());
        // The loss case: the 200 Mbit/s × 40 ms link with 0.5 % loss both ways.
        let l = c[3].link();
        assert_eq!((l.up.loss_pct, l.down.loss_pct), (0.5, 0.5));
        assert_eq!(l.down.queue, Queue::Bytes(1_500_000));
        assert_eq!(c[1].link(), link_spec(200.0, 40.0));
        let half = c[0].link().down.delay.as_secs_f64();
        assert!((half - 0.0065).abs() < 1e-6, "{half}");
        assert_eq!(c[3].title(), "200 Mbit/s × 40 ms RTT, 0.5 % loss each way");
        assert_eq!(c[2].title(), "500 Mbit/s × 10 ms RTT");
        assert_eq!(fmt_queue(c[0].link().down.queue), "243750 bytes");
        assert_eq!((body_bytes(false), body_bytes(true)), (200_000_000, 20_000_000));
        // 200 MB at 10 Mbit/s is 160 s.
        assert_eq!(max_time(BODY_BYTES), Duration::from_secs(190));
        assert_eq!(max_time(QUICK_BODY_BYTES), Duration::from_secs(46));
        assert_eq!(proto_order(1), [Proto::H2, Proto::H3, Proto::H2Curl]);
        assert_eq!(proto_order(2), [Proto::H2Curl, Proto::H3, Proto::H2]);
        // 200 MB at 85 % of 100 Mbit/s ≈ 18.8 s, plus 1.3 s.
        assert!((c[0].seconds(BODY_BYTES) - 20.12).abs() < 0.01, "{}", c[0].seconds(BODY_BYTES));
        let two = [ServerKind::Sluice, ServerKind::Caddy];
        let e = expected_seconds(&c, &two, 5, BODY_BYTES);
        assert!((1500.0..4500.0).contains(&e), "{e}");
        // nginx has no HTTP/3 here: two downloads per run, not three.
        assert_eq!(downloads_per_run(&[ServerKind::Sluice, ServerKind::Nginx, ServerKind::H2o]), 7);
        assert!(expected_seconds(&c, &[ServerKind::Sluice, ServerKind::Nginx], 5, BODY_BYTES) < e);
    }

    #[test]
    fn server_selection() {
        let (k, s) = select_servers(&servers::DEFAULT).unwrap();
        let names: Vec<&str> = k.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["sluice", "sluice-h3cubic", "sluice-h3bbr", "caddy"]);
        assert!(s.is_empty());
        let cwnd = ServerKind::parse("sluice-cwnd").unwrap();
        let asked = [ServerKind::Caddy, ServerKind::Nginx, cwnd, ServerKind::H2o, ServerKind::CaddyTuned];
        let (k, s) = select_servers(&asked).unwrap();
        // nginx and h2o run HTTP/2 only (no HTTP/3 in their Debian packages).
        assert_eq!(k, [ServerKind::Caddy, ServerKind::Nginx, cwnd, ServerKind::H2o]);
        assert!(no_h3(ServerKind::Nginx).unwrap().contains("no HTTP/3"));
        assert!(no_h3(ServerKind::H2o).unwrap().contains("no HTTP/3"));
        assert_eq!((no_h3(ServerKind::Caddy), no_h3(cwnd)), (None, None));
        let reasons: Vec<(&str, &str)> = s.iter().map(|s| (s.server.name(), s.reason.as_str())).collect();
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].1.contains("`caddy`"), "{reasons:?}");
        let e = select_servers(&[ServerKind::Haproxy]).unwrap_err();
        assert!(e.contains("none of the requested servers serves static files"), "{e}");
    }

    fn row(case: &str, server: &str, proto: &str, run: u32, mbps: f64, error: &str) -> Row {
        Row {
            experiment: "download".into(),
            case: case.into(),
            rtt_ms: 40.0,
            rate_mbit: 200.0,
            server: server.into(),
            protocol: proto.into(),
            run,
            mbps,
            seconds: 1.0,
            ok: error.is_empty(),
            sink_seconds: None,
            link: None,
            error: error.into(),
        }
    }

    fn sample() -> Vec<Row> {
        vec![
            row("200mbit-40ms", "sluice", "h2", 1, 190.0, ""),
            row("200mbit-40ms", "sluice", "h3", 1, 180.0, ""),
            row("200mbit-40ms", "sluice", "h3", 2, 186.0, ""),
            row("200mbit-40ms", "sluice", "h2", 2, 186.0, ""),
            row("200mbit-40ms", "caddy", "h2", 1, 150.0, ""),
            row("200mbit-40ms", "caddy", "h3", 1, 0.0, "sluice get exit 7: boom"),
            row("200mbit-40ms-loss0.5", "sluice", "h2", 1, 100.0, ""),
            row("200mbit-40ms-loss0.5", "sluice", "h3", 1, 70.0, ""),
            row("200mbit-40ms-loss0.5", "caddy", "h2", 1, 90.0, ""),
            row("200mbit-40ms-loss0.5", "caddy", "h3", 1, 9.0, ""),
            row("200mbit-40ms-loss0.5", "sluice", CURL, 1, 99.0, ""),
            row("200mbit-40ms-loss0.5", "caddy", CURL, 1, 110.0, ""),
            row("200mbit-40ms", "sluice", CURL, 1, 189.0, ""),
            row("200mbit-40ms", "caddy", CURL, 1, 0.0, "curl exit 7: boom"),
        ]
    }

    #[test]
    fn ratio_tables() {
        let md = markdown(&sample(), &cases(false), BODY_BYTES, &["a note".into()]);
        assert!(md.starts_with("# download: 200 MB GET, HTTP/2 vs HTTP/3"), "{md}");
        assert!(md.contains("- a note\n"));
        assert!(!md.contains("100mbit-13ms"), "cases without rows are left out:\n{md}");
        assert!(md.contains("## 200 Mbit/s × 40 ms RTT (`200mbit-40ms`)"), "{md}");
        assert!(md.contains("| sluice | 188.0 (186.0–190.0) | 183.0 (180.0–186.0) | 0.97 | 189.0 (189.0–189.0) | h2 2/2, h3 2/2, h2-curl 1/1 |"), "{md}");
        assert!(md.contains("| caddy | 150.0 (150.0–150.0) | n/a | n/a | n/a | h2 1/1, h3 0/1, h2-curl 0/1 |"), "{md}");
        assert!(md.contains("`sluice`: h3/h2 = 0.97 meets the bar of ≥ 0.95.\n"), "{md}");
        assert!(md.contains("## 200 Mbit/s × 40 ms RTT, 0.5 % loss each way (`200mbit-40ms-loss0.5`)"), "{md}");
        assert!(md.contains("| caddy | 90.0 (90.0–90.0) | 9.0 (9.0–9.0) | 0.10 | 110.0 (110.0–110.0) | h2 1/1, h3 1/1, h2-curl 1/1 |"), "{md}");
        // curl's HTTP/2, Sluice against each peer: the loss case has both, the other no peer figure.
        assert!(md.contains("`sluice` with curl over HTTP/2: 0.900 × `caddy`'s, slower than it.\n"), "{md}");
        assert_eq!(md.matches("with curl over HTTP/2").count(), 1, "{md}");
        assert!(md.contains("- 200mbit-40ms caddy h2-curl run 1: curl exit 7: boom\n"), "{md}");
        assert!(md.contains("`sluice`: h3/h2 = 0.70 misses the bar of ≥ 0.8, HTTP/2 on BBR.\n"), "{md}");
        assert!(md.contains("| server | 200mbit-40ms | 200mbit-40ms-loss0.5 |\n|---|---:|---:|\n"), "{md}");
        assert!(md.contains("| sluice | 0.97 | 0.70 |\n| caddy | n/a | 0.10 |\n"), "{md}");
        assert!(md.contains("not measured here") && md.contains("nginx 1.31: h3/h2 = 0.40"), "{md}");
        assert!(md.contains("h3/h2 ≤ 0.18 (quoted)"), "{md}");
        assert!(md.contains("- 200mbit-40ms caddy h3 run 1: sluice get exit 7: boom\n"), "{md}");
        assert!(!md.contains("queue drops / 100 MB"), "no link table without readings:\n{md}");
        let mut rows = sample();
        rows[0].link = Some(LinkWindow { queue_drops_per_100mb: 7.0, peak_packets: 900.0, ..LinkWindow::default() });
        let md = markdown(&rows, &cases(false), BODY_BYTES, &[]);
        assert!(md.contains("The link's server → client direction during each download"), "{md}");
        assert!(md.contains("| sluice | h2 | 188.0 | 7.0 | 0.0 | 0 / 0 / 900 | 0.0 / 0.0 / 0.0 | 1 |"), "{md}");
        assert!(md.contains("| caddy | h3 | n/a | n/a | n/a | n/a | n/a | 0 |"), "{md}");
        // No successful pair: n/a, with the bar.
        let v = verdict("sluice", None, &cases(false)[0]);
        assert!(v.contains("n/a") && v.contains("≥ 0.95"), "{v}");
    }

    #[test]
    fn outputs_and_docroot() {
        let dir = tempfile::tempdir().unwrap();
        write_outputs(dir.path(), &sample(), &cases(false), BODY_BYTES, &[]).unwrap();
        assert!(fs::read_to_string(dir.path().join("summary.md")).unwrap().contains("| sluice |"));
        for f in ["download.png", "download.svg", "download-loss.png", "download-loss.svg"] {
            assert!(dir.path().join(f).metadata().unwrap().len() > 0, "{f}");
        }
        // A quick run has no loss chart.
        let quick = tempfile::tempdir().unwrap();
        let rows = vec![row("100mbit-13ms", "sluice", "h2", 1, 90.0, "")];
        write_outputs(quick.path(), &rows, &cases(true), QUICK_BODY_BYTES, &[]).unwrap();
        assert!(quick.path().join("download.png").exists() && !quick.path().join("download-loss.png").exists());
        let root = dir.path().join("docroot");
        write_docroot(&root, 100_001).unwrap();
        assert_eq!(fs::metadata(root.join(FILE)).unwrap().len(), 100_001);
        assert_eq!(fs::read_to_string(root.join(READY_FILE)).unwrap(), READY_TEXT);
    }
}
