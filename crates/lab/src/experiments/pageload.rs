//! The `pageload` experiment: the prioritization write-up (`002_…txt`) at browser level.
//! Headless Chromium (Debian package) in the client namespace loads a blog-like page from each
//! server: a render-blocking stylesheet and script in the head, a web font referenced from the
//! stylesheet, and [`IMAGES`] large images in the body. Chromium discovers the font only once
//! the stylesheet is applied and text is laid out, i.e. while the images stream: the figure is
//! the font's request-to-end time (Resource Timing: `responseEnd − requestStart`) on that busy
//! page, against the same font on the same page without images (`idle.html`). First contentful
//! paint is reported too; it hardly differs between servers, since the head's resources go
//! first anyway.
//!
//! Every load uses a fresh profile (`--user-data-dir` in a new directory): no cache, no
//! connection reuse between loads. The page reads its own timings on `load` and writes them
//! into the DOM, which `--dump-dom` prints; the page and every resource must have come over
//! HTTP/2 (Resource Timing's `nextHopProtocol`), or the load fails.
//!
//! HTTP/3: `sluice-h3` and `caddy-h3` are Sluice and Caddy serving the same docroot with HTTP/3
//! on the TLS port's UDP twin, and Chromium forced onto QUIC for their origin
//! (`--origin-to-force-quic-on`, and `--ignore-certificate-errors-spki-list` with the pin of
//! the lab's certificate: Chromium ignores `--ignore-certificate-errors` over QUIC). Both pages
//! load over HTTP/3 there, so their ratio is h3-busy/h3-idle; a load in which the page or any
//! resource came over something other than `h3` fails, with the resources named. The global
//! default `--servers` gains both.
//!
//! Beside each figure, the link's server → client direction over the busy load: packets
//! dropped by the full queue and by the random loss per 100 MB delivered, and the queue as
//! arriving packets found it (p50/p95/peak, packets and ms).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::case::Case;
use super::chart::{self, Axis};
use super::chromium::{client_cpu, dump_dom};
use super::common::{fmt_duration, write_random};
use super::digest;
use super::plan::Plan;
use super::proc;
use super::report::{self, fmt_stat, LinkWindow, Stat, Summary};
use super::servers::{self, ServerKind};
use super::stage::Stage;
use super::statics::{self, order, Row, Spec};
use crate::net::SERVER_ADDR;

/// The servers added to the global default `--servers`: Sluice and Caddy serving HTTP/3 too,
/// Chromium forced onto it.
pub const PAGELOAD_H3: [ServerKind; 2] = [ServerKind::SluiceH3, ServerKind::CaddyH3];

/// Images on the busy page.
pub const IMAGES: usize = 20;
/// Side of each image in pixels: a 24-bit BMP of random pixels (Chromium aborts the download of
/// an image it cannot decode, so the images must be valid), 248,886 bytes.
pub const IMAGE_SIDE: u32 = 288;
/// Bytes per image: the BMP headers (54 bytes) and the pixel rows (a multiple of 4 already).
pub const IMAGE_BYTES: u64 = 54 + IMAGE_SIDE as u64 * IMAGE_SIDE as u64 * 3;
/// The stylesheet (render-blocking, references the font).
pub const CSS_BYTES: usize = 30_000;
/// The script in the head (parser-blocking).
pub const JS_BYTES: usize = 60_000;
/// The web font.
pub const FONT_BYTES: u64 = 60_000;
/// The bar for Sluice: font time on the busy page ≤ this × on the idle page.
pub const BAR: f64 = 1.3;
/// Pause between loads, so queues drain.
const PAUSE: Duration = Duration::from_millis(500);
/// The marker around the timings in the dumped DOM.
const MARK: &str = "SLUICE-TIMINGS:";

/// The cases: the write-up's 5 Mbit/s link with a 1 MB queue, and 20 Mbit/s × 40 ms.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case { name: "5mbit-40ms-q1MB".into(), rate_mbit: 5.0, rtt_ms: 40.0, queue_bytes: Some(1_000_000), lone: None },
        Case { name: "20mbit-40ms".into(), rate_mbit: 20.0, rtt_ms: 40.0, queue_bytes: None, lone: None },
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// Rough seconds for one server's busy and idle loads in `case`.
fn seconds(case: &Case) -> f64 {
    let bytes = IMAGES as f64 * IMAGE_BYTES as f64 + 2.0 * (CSS_BYTES + JS_BYTES) as f64 + 2.0 * FONT_BYTES as f64;
    bytes * 8.0 / (case.rate_mbit * 1e6) + 2.0 * 3.0 + 2.0 * PAUSE.as_secs_f64()
}

/// What one page load measured, ms from navigation start.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Load {
    /// Font: request sent → last byte.
    pub font_ms: f64,
    /// Font: fetch start (discovery) → last byte.
    pub font_fetch_ms: f64,
    /// First contentful paint.
    pub fcp_ms: f64,
    /// The load event.
    pub load_ms: f64,
    /// Protocol of the font's response (`h2` expected; `h3` for the `-h3` servers).
    pub protocol: String,
    /// Images with a complete response.
    pub images: usize,
    /// Every resource and the page itself (`/` + its path), with the protocol it came over.
    #[serde(skip)]
    pub protocols: Vec<(String, String)>,
}

impl Load {
    /// Checks that the page and every resource came over `want` (`h2`, `h3`).
    pub fn check_protocols(&self, want: &str) -> Result<(), String> {
        let off: Vec<String> =
            self.protocols.iter().filter(|(_, p)| p != want).map(|(name, p)| format!("{name} ({p:?})")).collect();
        if off.is_empty() {
            return Ok(());
        }
        let shown = off.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        let more = if off.len() > 5 { format!(" and {} more", off.len() - 5) } else { String::new() };
        Err(format!("{} of {} loads did not come over {want}: {shown}{more}", off.len(), self.protocols.len()))
    }
}

/// One measurement: the busy page and the idle page of one server.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Outcome {
    /// The page with images.
    pub busy: Load,
    /// The page without images.
    pub idle: Load,
    /// busy.font_ms / idle.font_ms.
    pub ratio: f64,
    /// The link's server → client direction during the busy load (Chromium's start and end
    /// included): drops per 100 MB and the queue as arriving packets found it.
    #[serde(skip)]
    pub link: Option<LinkWindow>,
}

/// One row of the results.
pub type BRow = Row<Outcome>;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,case,rtt_ms,rate_mbit,server,run,font_busy_ms,font_idle_ms,ratio,\
font_fetch_busy_ms,font_fetch_idle_ms,fcp_busy_ms,fcp_idle_ms,load_busy_ms,protocol,queue_drops_per_100mb,\
loss_drops_per_100mb,queue_p50_pkts,queue_p95_pkts,queue_peak_pkts,queue_p50_ms,queue_p95_ms,queue_peak_ms,ok,error\n";

/// One CSV line.
pub fn csv_line(r: &BRow) -> String {
    let (b, i) = (&r.outcome.busy, &r.outcome.idle);
    let error = r.error.replace(['"', '\n', '\r'], " ");
    let link = r.outcome.link.map_or_else(|| [(); 8].map(|()| String::new()), |l| l.fields()).join(",");
    format!(
        "pageload,{},{},{},{},{},{:.1},{:.1},{:.4},{:.1},{:.1},{:.1},{:.1},{:.1},{},{link},{},\"{}\"\n",
        r.case,
        r.rtt_ms,
        r.rate_mbit,
        r.server,
        r.run,
        b.font_ms,
        i.font_ms,
        r.outcome.ratio,
        b.font_fetch_ms,
        i.font_fetch_ms,
        b.fcp_ms,
        i.fcp_ms,
        b.load_ms,
        b.protocol,
        r.ok(),
        error
    )
}

/// The page. `images`: with the images (busy) or without (idle).
pub fn page(images: bool) -> String {
    let mut body = String::new();
    let para = "<p>Edge servers decide, byte by byte, which response goes next. Once bytes sit in a \
                socket buffer or a bottleneck queue, nothing can reorder them.</p>\n";
    for i in 0..IMAGES {
        body.push_str(para);
        if images {
            body.push_str(&format!(
                "<img src=\"/img{i:02}.bmp\" width=\"{IMAGE_SIDE}\" height=\"{IMAGE_SIDE}\" alt=\"\">\n"
            ));
        }
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\n<title>A blog post</title>\n\
         <link rel=\"stylesheet\" href=\"/style.css\">\n<script src=\"/app.js\"></script>\n</head>\n\
         <body><article><h1>Late writes</h1>\n{body}</article>\n<pre id=\"t\"></pre>\n<script>\n\
         addEventListener('load', function () {{\n\
           var r = {{resources: [], paint: {{}}, load: 0}};\n\
           performance.getEntriesByType('resource').forEach(function (e) {{\n\
             r.resources.push({{name: new URL(e.name).pathname, start: e.startTime, request: e.requestStart,\n\
               end: e.responseEnd, protocol: e.nextHopProtocol}});\n\
           }});\n\
           performance.getEntriesByType('paint').forEach(function (e) {{ r.paint[e.name] = e.startTime; }});\n\
           r.load = performance.now();\n\
           var nav = performance.getEntriesByType('navigation')[0];\n\
           r.nav = {{name: location.pathname, protocol: nav ? nav.nextHopProtocol : ''}};\n\
           r.origin = performance.timeOrigin;\n\
           document.getElementById('t').textContent = 'SLUICE-' + 'TIMINGS:' + JSON.stringify(r) + ':END';\n\
         }});\n</script></body></html>\n"
    )
}

/// Writes the docroot: `page.html`, `idle.html`, `style.css`, `app.js`, `font.woff2`,
/// `img00.bmp`…
pub fn write_docroot(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    let write = |name: &str, text: &str| -> Result<(), String> {
        let p = dir.join(name);
        fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
        let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
        Ok(())
    };
    write("page.html", &page(true))?;
    write("idle.html", &page(false))?;
    let head = "@font-face{font-family:\"Lab Serif\";src:url(/font.woff2) format(\"woff2\");font-display:swap}\n\
                body{font-family:\"Lab Serif\",serif;max-width:50em;margin:0 auto}\n";
    // Rules and functions that vary as a site's do: about 4:1 under gzip, like real stylesheets
    // and scripts (a repeated line would shrink a hundredfold and flatter compression).
    let rule = |i: usize, r: u64| {
        format!(
            ".c{i}{{color:#{:06x};margin:{}px {}px;padding:{}px}}\n",
            r & 0xff_ffff,
            (r >> 24) % 40,
            (r >> 32) % 40,
            (r >> 40) % 16
        )
    };
    write("style.css", &fill(head, rule, CSS_BYTES))?;
    let function = |i: usize, r: u64| {
        format!("lab.f{i} = function (a, b) {{ return a * {} + b - {}; }};\n", r % 1000, (r >> 20) % 10000)
    };
    write("app.js", &fill("var lab = {};\n", function, JS_BYTES))?;
    write_random(&dir.join("font.woff2"), FONT_BYTES, 1000)?;
    for i in 0..IMAGES {
        let p = dir.join(format!("img{i:02}.bmp"));
        fs::write(&p, bmp(IMAGE_SIDE, 2000 + i as u64)).map_err(|e| format!("writing {}: {e}", p.display()))?;
        let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
    }
    Ok(())
}

/// A square 24-bit BMP of pseudo-random pixels (incompressible, like a photo): BITMAPFILEHEADER
/// and BITMAPINFOHEADER, rows bottom-up; `side` × 3 must be a multiple of 4 (no row padding).
pub fn bmp(side: u32, seed: u64) -> Vec<u8> {
    assert_eq!(side * 3 % 4, 0, "rows would need padding");
    let pixels = side * side * 3;
    let mut v = Vec::with_capacity(54 + pixels as usize);
    v.extend_from_slice(b"BM");
    v.extend_from_slice(&(54 + pixels).to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(&54u32.to_le_bytes());
    v.extend_from_slice(&40u32.to_le_bytes());
    v.extend_from_slice(&side.to_le_bytes());
    v.extend_from_slice(&side.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&24u16.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes()); // BI_RGB
    v.extend_from_slice(&pixels.to_le_bytes());
    v.extend_from_slice(&2835u32.to_le_bytes());
    v.extend_from_slice(&2835u32.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    // xorshift64*: deterministic, fast, random enough to defeat compression.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < 54 + pixels as usize {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(54 + pixels as usize);
    v
}

/// `head`, then `unit(i, random)` for i = 0, 1, … while it fits, padded with spaces to `len`
/// bytes (a deterministic generator: every docroot is the same).
fn fill(head: &str, unit: impl Fn(usize, u64) -> String, len: usize) -> String {
    let mut s = head.to_string();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = unit(i, x);
        if s.len() + u.len() > len {
            break;
        }
        s.push_str(&u);
    }
    s.push_str(&" ".repeat(len.saturating_sub(s.len() + 1)));
    s.push('\n');
    s
}

#[derive(serde::Deserialize)]
struct Timings {
    resources: Vec<Resource>,
    paint: std::collections::HashMap<String, f64>,
    load: f64,
    #[serde(default)]
    nav: Option<Nav>,
}

#[derive(serde::Deserialize)]
struct Nav {
    name: String,
    protocol: String,
}

#[derive(serde::Deserialize)]
struct Resource {
    name: String,
    start: f64,
    request: f64,
    end: f64,
    protocol: String,
}

/// Reads the timings out of a dumped DOM.
pub fn parse_dom(dom: &str) -> Result<Load, String> {
    let start = dom.find(MARK).ok_or("the page did not report its timings (no load event?)")? + MARK.len();
    let end = dom[start..].find(":END").ok_or("truncated timings")? + start;
    let t: Timings = serde_json::from_str(&dom[start..end]).map_err(|e| format!("timings: {e}"))?;
    let font = t.resources.iter().find(|r| r.name == "/font.woff2").ok_or("the font was never requested")?;
    if font.end <= 0.0 || font.request <= 0.0 {
        return Err("the font's timing is incomplete".into());
    }
    let images = t.resources.iter().filter(|r| r.name.ends_with(".bmp") && r.end > 0.0).count();
    let mut protocols: Vec<(String, String)> = t.nav.iter().map(|n| (n.name.clone(), n.protocol.clone())).collect();
    protocols.extend(t.resources.iter().map(|r| (r.name.clone(), r.protocol.clone())));
    Ok(Load {
        font_ms: font.end - font.request,
        font_fetch_ms: font.end - font.start,
        fcp_ms: t.paint.get("first-contentful-paint").copied().unwrap_or(f64::NAN),
        load_ms: t.load,
        protocol: font.protocol.clone(),
        images,
        protocols,
    })
}

/// How Chromium reaches a server forced onto HTTP/3: `--origin-to-force-quic-on` for its
/// origin, and the pin of the lab's certificate (Chromium ignores `--ignore-certificate-errors`
/// over QUIC).
struct Quic {
    /// `10.99.0.2:8460`.
    origin: String,
    /// base64 SHA-256 of the certificate's SubjectPublicKeyInfo.
    pin: String,
}

/// Loads `url` once; every resource must come over h2, or over h3 with `quic`.
fn load(chromium: &Path, url: &str, scratch: &Path, quic: Option<&Quic>) -> Result<Load, String> {
    let mut flags = vec!["--ignore-certificate-errors".to_string()];
    if let Some(q) = quic {
        flags.push(format!("--origin-to-force-quic-on={}", q.origin));
        flags.push(format!("--ignore-certificate-errors-spki-list={}", q.pin));
    }
    let dom = dump_dom(chromium, url, scratch, &flags)?;
    let l = parse_dom(&dom)?;
    l.check_protocols(if quic.is_some() { "h3" } else { "h2" })?;
    Ok(l)
}

/// One measurement of `kind`: the idle page, then the busy one (both over HTTP/3 for the `-h3`
/// servers, with the certificate pin `pin` gives), with the link's readings over the busy load.
fn measure(
    chromium: &Path,
    kind: ServerKind,
    stage: &Stage,
    scratch: &Path,
    pin: &dyn Fn() -> Result<String, String>,
) -> Result<Outcome, String> {
    let origin = format!("{SERVER_ADDR}:{}", kind.port());
    let quic = if kind.is_h3() { Some(Quic { origin: origin.clone(), pin: pin()? }) } else { None };
    let base = format!("https://{origin}");
    let idle = load(chromium, &format!("{base}/idle.html"), scratch, quic.as_ref())?;
    proc::sleep(PAUSE)?;
    let before = stage.stats();
    let busy = load(chromium, &format!("{base}/page.html"), scratch, quic.as_ref())?;
    let link = LinkWindow::of(&stage.stats().since(&before).down);
    if busy.images != IMAGES {
        return Err(format!("{} of {IMAGES} images loaded", busy.images));
    }
    let ratio = if idle.font_ms > 0.0 { busy.font_ms / idle.font_ms } else { f64::NAN };
    Ok(Outcome { busy, idle, ratio, link })
}

/// The protocol a server's loads must come over.
fn protocol_of(server: &str) -> &'static str {
    if ServerKind::parse(server).is_ok_and(ServerKind::is_h3) {
        "h3"
    } else {
        "h2"
    }
}

/// Statistics of one server in one case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellStats {
    /// Font on the busy page, ms.
    pub font_busy: Stat,
    /// Font on the idle page, ms.
    pub font_idle: Stat,
    /// busy/idle, run by run.
    pub ratio: Stat,
    /// First contentful paint of the busy page, ms.
    pub fcp: Stat,
    /// Load event of the busy page, ms.
    pub load: Stat,
    /// Runs in all (failed included).
    pub runs: usize,
}

/// Statistics of `server` in `case`, `None` without a successful run.
pub fn cell(rows: &[BRow], case: &str, server: &str) -> Option<CellStats> {
    let all: Vec<&BRow> = rows.iter().filter(|r| r.case == case && r.server == server).collect();
    let ok: Vec<&Outcome> = all.iter().filter(|r| r.ok()).map(|r| &r.outcome).collect();
    let of = |f: fn(&Outcome) -> f64| Stat::of(&ok.iter().map(|o| f(o)).collect::<Vec<_>>());
    Some(CellStats {
        font_busy: of(|o| o.busy.font_ms)?,
        font_idle: of(|o| o.idle.font_ms)?,
        ratio: of(|o| o.ratio)?,
        fcp: of(|o| o.busy.fcp_ms).unwrap_or(Stat { n: 0, median: f64::NAN, min: f64::NAN, max: f64::NAN }),
        load: of(|o| o.busy.load_ms)?,
        runs: all.len(),
    })
}

fn title() -> String {
    format!("pageload: headless Chromium, web font discovered while {IMAGES} × {} KB images stream", IMAGE_BYTES / 1000)
}

/// `summary.md`.
pub fn markdown(rows: &[BRow], notes: &[String]) -> String {
    let mut md = format!("# {}\n\n", title());
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let (cases, servers) = order(rows);
    for (case, rate, rtt) in &cases {
        md.push_str(&format!("\n## {case}: {rate} Mbit/s, {rtt} ms RTT\n\n"));
        md.push_str(
            "| server | font busy ms | font idle ms | busy/idle | FCP ms | load ms | ok runs |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for s in &servers {
            let runs = rows.iter().filter(|r| &r.case == case && &r.server == s).count();
            match cell(rows, case, s) {
                Some(c) => md.push_str(&format!(
                    "| {s} | {} | {} | {} | {} | {} | {}/{} |\n",
                    fmt_stat(&c.font_busy, 0),
                    fmt_stat(&c.font_idle, 0),
                    fmt_stat(&c.ratio, 2),
                    fmt_stat(&c.fcp, 0),
                    fmt_stat(&c.load, 0),
                    c.font_busy.n,
                    c.runs
                )),
                None if runs > 0 => md.push_str(&format!("| {s} | n/a | n/a | n/a | n/a | n/a | 0/{runs} |\n")),
                None => {}
            }
        }
        for (me, who) in [("sluice", "Sluice's font time"), ("sluice-h3", "Sluice's font time over HTTP/3")] {
            let Some(c) = cell(rows, case, me) else { continue };
            let peers = if protocol_of(me) == "h3" { "the HTTP/3 servers here" } else { "the servers here" };
            let lower = servers
                .iter()
                .filter(|s| s.as_str() != me && protocol_of(s) == protocol_of(me))
                .filter_map(|s| cell(rows, case, s).map(|o| (s, o.font_busy.median)))
                .filter(|(_, m)| *m < c.font_busy.median)
                .map(|(s, m)| format!("{s} {m:.0} ms"))
                .collect::<Vec<_>>();
            let lowest = if lower.is_empty() {
                format!("the lowest of {peers}")
            } else {
                format!("not the lowest of {peers} (lower: {})", lower.join(", "))
            };
            let verdict = if c.ratio.median <= BAR { "meets" } else { "misses" };
            md.push_str(&format!(
                "\n{who} on the busy page is {lowest}; its busy/idle ratio {:.2} {verdict} the bar of ≤ {BAR}.\n",
                c.ratio.median
            ));
        }
        if let Some(table) = report::link_table(&link_rows(rows), case, "font busy ms") {
            md.push_str(
                "\nThe link's server → client direction during each busy load (Chromium's start-up and exit \
                 included; medians over the successful runs): packets dropped by the full queue and by the random \
                 loss per 100 MB delivered, and the queue as arriving packets found it.\n\n",
            );
            md.push_str(&table);
        }
    }
    md.push_str(&statics::failed_section(rows));
    md
}

/// The rows as the generic report sees them: the figure is the font's time on the busy page,
/// the protocol the one the server's loads must come over, with the busy load's link readings.
fn link_rows(rows: &[BRow]) -> Vec<report::Row> {
    rows.iter().map(|r| report_row(r, protocol_of(&r.server), r.outcome.link)).collect()
}

/// One load as a generic report row: the figure is the font's time on the busy page.
fn report_row(r: &BRow, protocol: &str, link: Option<LinkWindow>) -> report::Row {
    report::Row {
        experiment: "pageload".into(),
        case: r.case.clone(),
        rtt_ms: r.rtt_ms,
        rate_mbit: r.rate_mbit,
        server: r.server.clone(),
        protocol: protocol.into(),
        run: r.run,
        mbps: r.outcome.busy.font_ms,
        seconds: r.outcome.busy.load_ms / 1e3,
        ok: r.ok(),
        sink_seconds: None,
        link,
        error: r.error.clone(),
    }
}

/// Writes `summary.md`, `pageload.png` and `pageload.svg` (font ms on the busy page).
pub fn write_outputs(dir: &Path, rows: &[BRow], notes: &[String]) -> Result<(), String> {
    let md_path = dir.join("summary.md");
    fs::write(&md_path, markdown(rows, notes)).map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    let chart_rows: Vec<report::Row> = rows.iter().map(|r| report_row(r, "font busy", None)).collect();
    let summary = Summary::from_rows(&chart_rows);
    let axis = Axis { desc: "font request → end on the busy page, ms (median, whiskers min–max)", decimals: 0 };
    chart::write_charts_axis(dir, "pageload", &summary, &title(), axis)
}

/// Runs the experiment.
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick), |c| &c.name)?;
    let chromium = servers::find_program("chromium").ok_or(
        "`chromium` not found: the pageload experiment needs the Debian package (scripts/setup.sh installs it)",
    )?;
    let mut version = std::process::Command::new(&chromium);
    version.arg("--version");
    let scratch = plan.out.join("work").join("chromium");
    fs::create_dir_all(&scratch).map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    let versions = match proc::run_bounded(version, Duration::from_secs(20), &scratch) {
        Ok(f) if f.success() => vec![format!("chromium: {}", f.stdout.trim())],
        _ => Vec::new(),
    };
    // The pin of the certificate the run generates (work/key.pem), read at the first HTTP/3 load.
    let key = plan.out.join("work").join("key.pem");
    let pinned: std::cell::OnceCell<String> = std::cell::OnceCell::new();
    let pin = || -> Result<String, String> {
        if let Some(p) = pinned.get() {
            return Ok(p.clone());
        }
        let pem = fs::read_to_string(&key).map_err(|e| format!("reading {}: {e}", key.display()))?;
        let p = digest::spki_pin(&pem)?;
        Ok(pinned.get_or_init(|| p).clone())
    };
    let measure = |kind: ServerKind, stage: &Stage, _: &Case| measure(&chromium, kind, stage, &scratch, &pin);
    // The global default list gains the HTTP/3 servers here.
    let plan = &Plan {
        servers: if plan.servers == servers::DEFAULT {
            servers::DEFAULT.iter().copied().chain(PAGELOAD_H3).collect()
        } else {
            plan.servers.clone()
        },
        ..plan.clone()
    };
    let spec = Spec {
        name: "pageload",
        cases: &cases,
        seconds_per_run: cases.iter().map(seconds).sum(),
        docroot: &write_docroot,
        measure: &measure,
        csv_header: CSV_HEADER,
        csv_line,
        describe: |o| {
            let link = o.link.map_or_else(String::new, |l| {
                format!(
                    "; busy load down: queue drops {:.0}/100 MB, queue p50/p95/peak {} packets, {} ms",
                    l.queue_drops_per_100mb,
                    l.fmt_packets(),
                    l.fmt_ms()
                )
            });
            format!(
                "{}: font busy {:.0} ms, idle {:.0} ms, ratio {:.2}; FCP {:.0} ms; load {:.0} ms{link}",
                o.busy.protocol, o.busy.font_ms, o.idle.font_ms, o.ratio, o.busy.fcp_ms, o.busy.load_ms
            )
        },
        pause: PAUSE,
        h3: true,
        probe_bytes: CSS_BYTES as u64,
    };
    let ran = statics::run(plan, &spec, versions)?;
    let mut notes = notes(&cases, plan.runs);
    notes.push(if plan.compress {
        "Compression on (`--compress`), as each server's operator switches it on: Sluice `[compression] enabled = true` \
         (brotli, zstd or gzip by `Accept-Encoding`), nginx `gzip on` for stylesheets and scripts, h2o `compress: ON`, \
         Caddy `encode zstd gzip`. The stylesheet and the script shrink about 4:1 under gzip; the images and the \
         font do not compress."
            .to_string()
    } else {
        "Compression off on every server (Sluice `[compression] enabled = false`; `--compress` turns it on everywhere)."
            .to_string()
    });
    notes.extend(statics::closing_notes(&ran));
    let written = write_outputs(&plan.out, &ran.rows, &notes);
    ran.outcome?;
    written?;
    let rows = ran.rows;
    println!(
        "pageload: done in {}; {} of {} runs ok; wrote {}/{{results.csv,summary.md,pageload.png,pageload.svg}}",
        fmt_duration(ran.elapsed),
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        plan.out.display()
    );
    let (cs, ss) = order(&rows);
    for (case, _, _) in &cs {
        let parts: Vec<String> = ss
            .iter()
            .map(|s| match cell(&rows, case, s) {
                Some(c) => format!("{s} {:.0} ms ({:.2})", c.font_busy.median, c.ratio.median),
                None => format!("{s} n/a"),
            })
            .collect();
        println!("font busy (busy/idle) at {case}: {}", parts.join(", "));
    }
    Ok(())
}

fn notes(cases: &[Case], runs: u32) -> Vec<String> {
    vec![
        format!(
            "Method: headless Chromium (`--headless=new`, a fresh `--user-data-dir` per load, \
             `--ignore-certificate-errors` for the lab's self-signed certificate) in the client namespace loads \
             `page.html`: `style.css` ({CSS_BYTES} B, render-blocking, declares the web font) and `app.js` \
             ({JS_BYTES} B, parser-blocking) in the head, {IMAGES} images of {IMAGE_BYTES} B in the body, text \
             set in the web font (`font.woff2`, {FONT_BYTES} B). The page reports Resource Timing on `load`. \
             **font busy** = the font's `responseEnd − requestStart` on that page; **font idle** = the same on \
             `idle.html`, the same page without images; ratio = busy/idle per run (the bar for Sluice ≤ {BAR}, \
             and the lowest font time). FCP = first-contentful-paint of the busy page; load = its load event."
        ),
        statics::links_note(cases, runs),
        match client_cpu() {
            Some(cpu) => format!(
                "Chromium runs confined to CPU {cpu} (`taskset`), the servers and the link's forwarder wherever the \
                 scheduler puts them: on separate machines the browser's image decoding would not take their CPU time."
            ),
            None => "Chromium runs unconfined (fewer than two CPUs, or no `taskset`): its image decoding competes \
                     with the servers and the link's forwarder for CPU time."
                .to_owned(),
        },
        format!(
            "Servers as in `priority` (static files over TLS); the `-tuned` variants run in a second phase with {} \
             set in the server namespace. Every load must have fetched the page and every resource over h2 \
             (Resource Timing's `nextHopProtocol`), or it fails.",
            statics::tuning_note()
        ),
        "`sluice-h3` and `caddy-h3`: the same servers with HTTP/3 on the TLS port's UDP twin (Sluice \
         `[quic] enabled = true`, Caddy `protocols h1 h2 h3`), Chromium forced onto QUIC for their origin \
         (`--origin-to-force-quic-on`, and `--ignore-certificate-errors-spki-list` with the pin of the lab's \
         certificate: Chromium ignores `--ignore-certificate-errors` over QUIC). Both pages load over HTTP/3, so \
         their ratio is h3-busy/h3-idle; a load in which the page or any resource came over something other than \
         h3 fails, with the resources named."
            .to_owned(),
        "Link readings: the emulated link's server → client direction from the start of the busy load's \
         Chromium to its exit: packets dropped by the full queue and by the random loss per 100 MB delivered, and \
         the queue as arriving packets found it (p50 / p95 / peak in packets, and as queueing delay in ms)."
            .to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::case::link_spec;

    fn dom(font: (f64, f64, f64), proto: &str) -> String {
        format!(
            "<html><pre id=\"t\">{MARK}{{\"resources\":[{{\"name\":\"/style.css\",\"start\":5,\"request\":6,\"end\":50,\
             \"protocol\":\"h2\"}},{{\"name\":\"/img00.bmp\",\"start\":7,\"request\":8,\"end\":900,\"protocol\":\"h2\"}},\
             {{\"name\":\"/font.woff2\",\"start\":{},\"request\":{},\"end\":{},\"protocol\":\"{proto}\"}}],\
             \"paint\":{{\"first-contentful-paint\":120.5}},\"load\":950}}:END</pre></html>",
            font.0, font.1, font.2
        )
    }

    #[test]
    fn timings_from_the_dom() {
        let l = parse_dom(&dom((100.0, 110.0, 300.0), "h2")).unwrap();
        assert_eq!((l.font_ms, l.font_fetch_ms, l.fcp_ms, l.load_ms), (190.0, 200.0, 120.5, 950.0));
        assert_eq!((l.protocol.as_str(), l.images), ("h2", 1));
        assert_eq!(l.protocols.len(), 3);
        assert_eq!(l.check_protocols("h2"), Ok(()));
        let e = l.check_protocols("h3").unwrap_err();
        assert!(e.starts_with("3 of 3 loads did not come over h3: /style.css (\"h2\")"), "{e}");
        // One resource off the protocol fails the load; the page itself counts too.
        let l = parse_dom(&dom((100.0, 110.0, 300.0), "h3")).unwrap();
        assert_eq!(l.check_protocols("h2").unwrap_err(), "1 of 3 loads did not come over h2: /font.woff2 (\"h3\")");
        let with_nav = dom((1.0, 2.0, 3.0), "h3")
            .replace("\"load\":950", "\"load\":950,\"nav\":{\"name\":\"/page.html\",\"protocol\":\"http/1.1\"}")
            .replace("\"h2\"", "\"h3\"");
        let l = parse_dom(&with_nav).unwrap();
        assert_eq!(l.protocols[0], ("/page.html".to_string(), "http/1.1".to_string()));
        assert!(l.check_protocols("h3").unwrap_err().contains("1 of 4 loads"), "{:?}", l.protocols);
        assert!(parse_dom("<html></html>").unwrap_err().contains("did not report"));
        assert!(parse_dom(&dom((100.0, 0.0, 300.0), "h2")).unwrap_err().contains("incomplete"));
        let no_font = dom((1.0, 2.0, 3.0), "h2").replace("/font.woff2", "/other");
        assert!(parse_dom(&no_font).unwrap_err().contains("never requested"));
    }

    #[test]
    fn pages_and_docroot() {
        let busy = page(true);
        let idle = page(false);
        assert_eq!(busy.matches("<img ").count(), IMAGES);
        assert_eq!(idle.matches("<img ").count(), 0);
        for p in [&busy, &idle] {
            assert!(p.contains("href=\"/style.css\"") && p.contains("src=\"/app.js\""));
            // The marker is assembled at run time, so the script's own text never matches it.
            assert!(!p.contains(MARK));
        }
        let dir = tempfile::tempdir().unwrap();
        write_docroot(dir.path()).unwrap();
        let css = fs::read_to_string(dir.path().join("style.css")).unwrap();
        assert_eq!(css.len(), CSS_BYTES);
        assert!(css.contains("url(/font.woff2)"));
        assert_eq!(fs::metadata(dir.path().join("app.js")).unwrap().len(), JS_BYTES as u64);
        assert_eq!(fs::metadata(dir.path().join("font.woff2")).unwrap().len(), FONT_BYTES);
        assert_eq!(fs::metadata(dir.path().join("img19.bmp")).unwrap().len(), IMAGE_BYTES);
        let a = fs::read(dir.path().join("img00.bmp")).unwrap();
        assert_eq!(&a[..2], b"BM");
        assert_eq!(u32::from_le_bytes(a[2..6].try_into().unwrap()) as u64, IMAGE_BYTES);
        assert_ne!(a, fs::read(dir.path().join("img01.bmp")).unwrap());
    }

    #[test]
    fn report() {
        let row = |server: &str, run, busy: f64, idle: f64, error: &str| BRow {
            case: "5mbit".into(),
            rate_mbit: 5.0,
            rtt_ms: 40.0,
            server: server.into(),
            run,
            outcome: Outcome {
                busy: Load { font_ms: busy, fcp_ms: 300.0, load_ms: 9000.0, protocol: "h2".into(), ..Load::default() },
                idle: Load { font_ms: idle, ..Load::default() },
                ratio: busy / idle,
                link: error.is_empty().then_some(LinkWindow { queue_drops_per_100mb: 20.0, ..LinkWindow::default() }),
            },
            error: error.into(),
        };
        let rows = vec![
            row("sluice", 1, 120.0, 100.0, ""),
            row("sluice", 2, 140.0, 100.0, ""),
            row("nginx", 1, 560.0, 100.0, ""),
            row("nginx", 2, 0.0, 0.0, "boom"),
        ];
        let c = cell(&rows, "5mbit", "sluice").unwrap();
        assert_eq!(c.font_busy.median, 130.0);
        assert!((c.ratio.median - 1.3).abs() < 1e-9);
        let md = markdown(&rows, &[]);
        assert!(md.contains("| nginx | 560 (560–560) | 100 (100–100) | 5.60 (5.60–5.60) | 300 (300–300) |"), "{md}");
        assert!(md.contains("the lowest of the servers here") && md.contains("meets the bar"), "{md}");
        assert!(md.contains("5mbit nginx run 2: boom"));
        assert!(md.contains("| sluice | h2 | 130.0 | 20.0 | 0.0 | 0 / 0 / 0 | 0.0 / 0.0 / 0.0 | 2 |"), "{md}");
        assert!(md.contains("| nginx | h2 | 560.0 | 20.0 | 0.0 |"), "{md}");
        let slow = vec![
            row("sluice", 1, 700.0, 100.0, ""),
            row("h2o", 1, 300.0, 100.0, ""),
            row("sluice-h3", 1, 200.0, 100.0, ""),
            row("caddy-h3", 1, 250.0, 100.0, ""),
        ];
        let md = markdown(&slow, &[]);
        assert!(md.contains("not the lowest of the servers here (lower: h2o 300 ms)") && md.contains("misses"), "{md}");
        assert!(
            md.contains(
                "Sluice's font time over HTTP/3 on the busy page is the lowest of the HTTP/3 servers here; its \
             busy/idle ratio 2.00 misses"
            ),
            "{md}"
        );
        assert!(md.contains("| sluice-h3 | h3 | 200.0 |") && md.contains("| caddy-h3 | h3 | 250.0 |"), "{md}");
        for r in [&rows[0], &rows[3]] {
            let line = csv_line(r);
            assert_eq!(line.split(',').count(), CSV_HEADER.split(',').count(), "{line}");
        }
        assert!(csv_line(&rows[0]).contains(",h2,20.00,0.00,0,0,0,0.00,0.00,0.00,true,"), "{}", csv_line(&rows[0]));
        let dir = tempfile::tempdir().unwrap();
        write_outputs(dir.path(), &rows, &[]).unwrap();
        assert!(dir.path().join("pageload.svg").exists());
    }

    #[test]
    fn the_cases() {
        let c = cases(false);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].link(), link_spec(20.0, 40.0));
        assert_eq!(cases(true).len(), 1);
        // 5 MB of images at 5 Mbit/s: about 8 s, plus Chromium start-ups and pauses.
        assert!((seconds(&c[0]) - 15.5).abs() < 0.5, "{}", seconds(&c[0]));
    }
}
