//! The `earlyhints` experiment: what 103 Early Hints buy a page behind a reverse proxy whose
//! origin thinks before it answers.
//!
//! The origin (Node's `http` module, `assets/earlyhints-origin.js`, on 127.0.0.1 in the server
//! namespace) answers a page after [`THINK_MS`] ms with `Link: <…>; rel=preload` fields for the
//! page's stylesheet ([`CSS_BYTES`]), web font ([`FONT_BYTES`], `font-display: block`, preloaded
//! with `crossorigin`) and script ([`JS_BYTES`]); those are served at once and are cacheable
//! (`max-age=3600`: Chromium keeps an early-hints preload in its HTTP cache and uses it only if it
//! may). Two variants, two paths of the same origin: `links` (only the `Link` fields of the final
//! response) and `origin103` (the origin also sends its own 103 with the same links at once,
//! before it thinks).
//!
//! Each server is a TLS HTTP/2 reverse proxy of the origin (HTTP/1.1 upstream): `sluice` (learned
//! hints, its default), `sluice-nolearn` (`early_hints_learn = false`: forwards the origin's 103
//! only), `h2o` (`proxy.reverse.url`) and `caddy` (`reverse_proxy`), both forwarding the
//! origin's 103 where they can. Headless Chromium in the client namespace loads the page with a
//! fresh profile per load (so its own caches are cold and the preloads are what the 103 brought),
//! certificate pinned by SPKI (`--ignore-certificate-errors-spki-list`: the certificate counts as
//! valid, so Chromium acts on 103s as it would in the field). Per case, variant and server: one
//! warm-up load (which teaches Sluice the hints), then the measured loads in an order rotating
//! run by run. The page observes first-contentful-paint and largest-contentful-paint, and writes
//! them with Resource Timing (`initiatorType` of the hinted resources, the navigation's first
//! interim response and last byte) into the DOM, which `--dump-dom` prints; an image that is
//! never shown holds the load event until then (see the origin script).

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::case::Case;
use super::chromium;
use super::common::{first_line, fmt_duration, rotation, write_random};
use super::digest;
use super::plan::{select_proxies, Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Site, Want};
use super::proc;
use super::report::{fmt_stat, Stat};
use super::servers::{self, ServerKind, Setup};
use crate::net::{SERVER_ADDR, SERVER_NS};

/// How long the origin thinks before it answers a page, ms.
pub const THINK_MS: u64 = 300;
/// The stylesheet (render-blocking; declares the web font).
pub const CSS_BYTES: usize = 60_000;
/// The web font (woff2-sized; random bytes: Chromium fetches it whole, then falls back).
pub const FONT_BYTES: u64 = 40_000;
/// The script in the head (parser-blocking).
pub const JS_BYTES: usize = 20_000;
/// Measured loads per case, variant and server (after the warm-up) unless `--runs` says.
pub const LOADS: u32 = 10;
/// The origin's port on 127.0.0.1 in the server namespace.
pub const ORIGIN_PORT: u16 = 9100;
/// The origin's script.
const ORIGIN_JS: &str = include_str!("../../assets/earlyhints-origin.js");
/// Pause between loads, so queues drain.
const PAUSE: Duration = Duration::from_millis(300);
/// The marker around the timings in the dumped DOM (assembled at run time in the page).
const MARK: &str = "SLUICE-EH:";
/// The resources the origin hints, in the order of its `Link` fields.
pub const HINTED: [&str; 3] = ["style.css", "font.woff2", "app.js"];

/// The servers the global default `--servers` means here.
pub const DEFAULT: [ServerKind; 4] =
    [ServerKind::Sluice, ServerKind::SluiceNoLearn, ServerKind::H2o, ServerKind::Caddy];

/// The origin's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `Link` fields on the final response only.
    Links,
    /// The origin's own 103 with the same links first, then the final response.
    Origin103,
}

impl Variant {
    /// Both, in report order.
    pub const ALL: [Self; 2] = [Self::Links, Self::Origin103];

    /// Its name in the CSV, the report and the page's path.
    pub fn name(self) -> &'static str {
        match self {
            Self::Links => "links",
            Self::Origin103 => "origin103",
        }
    }

    /// Whether the origin sends a 103 itself.
    pub fn sends_103(self) -> bool {
        self == Self::Origin103
    }

    /// The page's path.
    pub fn page_path(self) -> String {
        format!("/{}/page.html", self.name())
    }

    /// How the report describes it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Links => "origin without 103 (Link fields on its 200 only)",
            Self::Origin103 => "origin with its own 103 (same links) before it thinks",
        }
    }
}

/// The links (`Link` field values) the origin sends for the page under `/<variant>/`.
pub fn links(v: Variant) -> Vec<String> {
    let p = format!("/{}/", v.name());
    vec![
        format!("<{p}style.css>; rel=preload; as=style"),
        format!("<{p}font.woff2>; rel=preload; as=font; crossorigin"),
        format!("<{p}app.js>; rel=preload; as=script"),
    ]
}

/// The cases: 20 Mbit/s × 40 ms and 5 Mbit/s × 80 ms (queues 1.5 × BDP); `quick` keeps the first.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case { name: "20mbit-40ms".into(), rate_mbit: 20.0, rtt_ms: 40.0, queue_bytes: None, lone: None },
        Case { name: "5mbit-80ms".into(), rate_mbit: 5.0, rtt_ms: 80.0, queue_bytes: None, lone: None },
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// The page: the timing script first (its observers and the hold image), the stylesheet, the
/// font preload and the script in the head; text set in the web font in the body.
pub fn page(v: Variant) -> String {
    let p = format!("/{}/", v.name());
    let para = "<p>An origin that thinks for a while leaves the connection idle. A proxy that knows \
                what the page will need can fill that time: it sends a 103 with the page's stylesheet, \
                font and script, and the browser fetches them while the origin is still busy.</p>\n";
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\n<title>Early hints</title>\n<script>\n\
         (function () {{\n\
           var R = {{fcp: null, lcp: null}};\n\
           try {{\n\
             new PerformanceObserver(function (l) {{ l.getEntries().forEach(function (e) {{ R.lcp = e.startTime; }}); }})\n\
               .observe({{type: 'largest-contentful-paint', buffered: true}});\n\
             new PerformanceObserver(function (l) {{ l.getEntries().forEach(function (e) {{\n\
               if (e.name === 'first-contentful-paint') {{ R.fcp = e.startTime; }} }}); }})\n\
               .observe({{type: 'paint', buffered: true}});\n\
           }} catch (e) {{}}\n\
           var id = String(Math.random()).slice(2);\n\
           var hold = new Image();\n\
           hold.src = 'hold?id=' + id;\n\
           var t0 = Date.now();\n\
           function report() {{\n\
             var r = {{fcp: R.fcp, lcp: R.lcp, resources: [], nav: null}};\n\
             performance.getEntriesByType('resource').forEach(function (e) {{\n\
               r.resources.push({{name: new URL(e.name).pathname, initiator: e.initiatorType, start: e.startTime,\n\
                 end: e.responseEnd, protocol: e.nextHopProtocol}});\n\
             }});\n\
             var n = performance.getEntriesByType('navigation')[0];\n\
             if (n) {{ r.nav = {{name: location.pathname, protocol: n.nextHopProtocol, end: n.responseEnd,\n\
               interim: n.firstInterimResponseStart || 0}}; }}\n\
             var t = document.createElement('pre');\n\
             t.style.display = 'none';\n\
             t.textContent = 'SLUICE-' + 'EH:' + JSON.stringify(r) + ':END';\n\
             document.body.appendChild(t);\n\
             fetch('release?id=' + id, {{cache: 'no-store'}});\n\
           }}\n\
           function check() {{\n\
             if ((R.fcp !== null && R.lcp !== null && document.body) || Date.now() - t0 > 10000) {{\n\
               setTimeout(report, 200);\n\
             }} else {{\n\
               requestAnimationFrame(check);\n\
             }}\n\
           }}\n\
           requestAnimationFrame(check);\n\
         }})();\n\
         </script>\n\
         <link rel=\"stylesheet\" href=\"{p}style.css\">\n\
         <link rel=\"preload\" href=\"{p}font.woff2\" as=\"font\" type=\"font/woff2\" crossorigin>\n\
         <script src=\"{p}app.js\"></script>\n\
         </head>\n<body><article><h1>Thinking time</h1>\n{body}</article></body></html>\n",
        body = para.repeat(6),
    )
}

/// Writes the docroot: per variant `page.html`, `style.css`, `font.woff2`, `app.js`, and
/// `pages.json` (each page's links and whether the origin sends a 103 for it).
pub fn write_docroot(dir: &Path) -> Result<(), String> {
    let mkdir = |d: &Path| -> Result<(), String> {
        fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o755));
        Ok(())
    };
    mkdir(dir)?;
    let write = |p: &Path, bytes: &[u8]| -> Result<(), String> {
        fs::write(p, bytes).map_err(|e| format!("writing {}: {e}", p.display()))?;
        let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o644));
        Ok(())
    };
    let mut pages = serde_json::Map::new();
    for v in Variant::ALL {
        let d = dir.join(v.name());
        mkdir(&d)?;
        write(&d.join("page.html"), page(v).as_bytes())?;
        let head = format!(
            "@font-face{{font-family:\"Lab Sans\";src:url(/{}/font.woff2) format(\"woff2\");font-display:block}}\n\
             body{{font-family:\"Lab Sans\",serif;max-width:40em;margin:0 auto}}\n",
            v.name()
        );
        write(
            &d.join("style.css"),
            fill(&head, ".c{color:#123456;margin:0 auto;padding:1px 2px}\n", CSS_BYTES).as_bytes(),
        )?;
        write(&d.join("app.js"), fill("var lab = 0;\n", "lab += 1;\n", JS_BYTES).as_bytes())?;
        write_random(&d.join("font.woff2"), FONT_BYTES, 3000)?;
        pages.insert(v.page_path(), serde_json::json!({"links": links(v), "send103": v.sends_103()}));
    }
    let json = serde_json::Value::Object(pages).to_string();
    write(&dir.join("pages.json"), json.as_bytes())
}

/// `head` followed by copies of `unit`, `len` bytes in all.
fn fill(head: &str, unit: &str, len: usize) -> String {
    let mut s = head.to_string();
    while s.len() + unit.len() <= len {
        s.push_str(unit);
    }
    s.push_str(&" ".repeat(len.saturating_sub(s.len() + 1)));
    s.push('\n');
    s
}

/// What one load measured, ms from navigation start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Load {
    /// First contentful paint.
    pub fcp_ms: f64,
    /// Largest contentful paint.
    pub lcp_ms: f64,
    /// The page's last byte (the navigation's `responseEnd`).
    pub html_ms: f64,
    /// The first interim response (103) of the navigation; 0 without one.
    pub hint_ms: f64,
    /// The stylesheet's `initiatorType` (`early-hints` when the 103 brought it).
    pub css_initiator: String,
    /// How many of the three hinted resources came by the 103.
    pub early: usize,
    /// The page and every resource with the protocol it came over.
    pub protocols: Vec<(String, String)>,
}

impl Load {
    /// Whether the stylesheet came by the 103.
    pub fn css_early(&self) -> bool {
        self.css_initiator == "early-hints"
    }
}

#[derive(serde::Deserialize)]
struct Timings {
    fcp: Option<f64>,
    lcp: Option<f64>,
    resources: Vec<Resource>,
    nav: Option<Nav>,
}

#[derive(serde::Deserialize)]
struct Resource {
    name: String,
    initiator: String,
    protocol: String,
}

#[derive(serde::Deserialize)]
struct Nav {
    name: String,
    protocol: String,
    end: f64,
    interim: f64,
}

/// The page's report (JSON) in a dumped DOM.
pub fn timings_json(dom: &str) -> Result<&str, String> {
    let start = dom.find(MARK).ok_or("the page did not report its timings")? + MARK.len();
    let end = dom[start..].find(":END").ok_or("truncated timings")? + start;
    Ok(&dom[start..end])
}

/// Reads the timings out of a dumped DOM.
pub fn parse_dom(dom: &str) -> Result<Load, String> {
    let t: Timings = serde_json::from_str(timings_json(dom)?).map_err(|e| format!("timings: {e}"))?;
    let fcp = t.fcp.filter(|v| *v > 0.0).ok_or("no first-contentful-paint within 10 s")?;
    let lcp = t.lcp.filter(|v| *v > 0.0).ok_or("no largest-contentful-paint within 10 s")?;
    let nav = t.nav.ok_or("no navigation timing")?;
    let css = t.resources.iter().find(|r| r.name.ends_with("/style.css")).ok_or("the stylesheet was never loaded")?;
    let early = HINTED
        .iter()
        .filter(|h| t.resources.iter().any(|r| r.name.ends_with(&format!("/{h}")) && r.initiator == "early-hints"))
        .count();
    let mut protocols = vec![(nav.name.clone(), nav.protocol.clone())];
    protocols.extend(
        t.resources
            .iter()
            .filter(|r| !r.name.ends_with("/hold") && !r.name.ends_with("/release"))
            .map(|r| (r.name.clone(), r.protocol.clone())),
    );
    Ok(Load {
        fcp_ms: fcp,
        lcp_ms: lcp,
        html_ms: nav.end,
        hint_ms: nav.interim,
        css_initiator: css.initiator.clone(),
        early,
        protocols,
    })
}

/// One load: the server, the variant, the run (0: the warm-up), the figures or the error.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadRow {
    /// Case name.
    pub case: String,
    /// Link rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// The origin's variant.
    pub variant: String,
    /// Server name.
    pub server: String,
    /// Run; 0 is the warm-up (kept out of the figures).
    pub run: u32,
    /// The figures (default when failed).
    pub load: Load,
    /// Empty when ok.
    pub error: String,
}

impl LoadRow {
    /// Whether the load succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,case,rtt_ms,rate_mbit,variant,server,run,fcp_ms,lcp_ms,html_end_ms,\
first_103_ms,css_initiator,early_hints_resources,ok,error\n";

/// One CSV line.
pub fn csv_line(r: &LoadRow) -> String {
    let l = &r.load;
    format!(
        "earlyhints,{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.1},{},{},{},\"{}\"\n",
        r.case,
        r.rtt_ms,
        r.rate_mbit,
        r.variant,
        r.server,
        r.run,
        l.fcp_ms,
        l.lcp_ms,
        l.html_ms,
        l.hint_ms,
        l.css_initiator,
        l.early,
        r.ok(),
        r.error.replace(['"', '\n', '\r'], " ")
    )
}

/// Figures of one server for one case and variant (measured loads only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// First contentful paint, ms.
    pub fcp: Stat,
    /// Largest contentful paint, ms.
    pub lcp: Stat,
    /// The page's last byte, ms.
    pub html: Stat,
    /// The first 103, ms, over the loads that got one (`None`: none did).
    pub hint: Option<Stat>,
    /// Loads whose stylesheet came by the 103.
    pub css_early: usize,
    /// Successful measured loads.
    pub ok: usize,
    /// Measured loads in all.
    pub loads: usize,
}

/// The figures of `server` for `case` and `variant`, `None` without a successful measured load.
pub fn cell(rows: &[LoadRow], case: &str, variant: &str, server: &str) -> Option<Cell> {
    let all: Vec<&LoadRow> =
        rows.iter().filter(|r| r.case == case && r.variant == variant && r.server == server && r.run > 0).collect();
    let ok: Vec<&Load> = all.iter().filter(|r| r.ok()).map(|r| &r.load).collect();
    let of = |f: fn(&Load) -> f64| Stat::of(&ok.iter().map(|l| f(l)).collect::<Vec<_>>());
    let hints: Vec<f64> = ok.iter().map(|l| l.hint_ms).filter(|v| *v > 0.0).collect();
    Some(Cell {
        fcp: of(|l| l.fcp_ms)?,
        lcp: of(|l| l.lcp_ms)?,
        html: of(|l| l.html_ms)?,
        hint: Stat::of(&hints),
        css_early: ok.iter().filter(|l| l.css_early()).count(),
        ok: ok.len(),
        loads: all.len(),
    })
}

/// A case as the report names it: (name, rate, RTT).
type CaseKey = (String, f64, f64);

/// Cases, variants and servers in first-seen order.
fn order(rows: &[LoadRow]) -> (Vec<CaseKey>, Vec<String>, Vec<String>) {
    let (mut cases, mut variants, mut servers) = (Vec::<CaseKey>::new(), Vec::new(), Vec::new());
    for r in rows {
        if !cases.iter().any(|c| c.0 == r.case) {
            cases.push((r.case.clone(), r.rate_mbit, r.rtt_ms));
        }
        if !variants.contains(&r.variant) {
            variants.push(r.variant.clone());
        }
        if !servers.contains(&r.server) {
            servers.push(r.server.clone());
        }
    }
    (cases, variants, servers)
}

fn title() -> String {
    format!("earlyhints: headless Chromium through reverse proxies, origin thinking {THINK_MS} ms")
}

/// `summary.md`.
pub fn markdown(rows: &[LoadRow], notes: &[String]) -> String {
    let mut md = format!("# {}\n\n", title());
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let (cases, variants, servers) = order(rows);
    for (case, rate, rtt) in &cases {
        for variant in &variants {
            let desc = Variant::ALL.iter().find(|v| v.name() == variant).map_or("", |v| v.describe());
            md.push_str(&format!("\n## {case}: {rate} Mbit/s, {rtt} ms RTT; `{variant}`: {desc}\n\n"));
            md.push_str(
                "| server | FCP ms | LCP ms | page's last byte ms | first 103 at ms | stylesheet by early hints | ok loads |\n\
                 |---|---|---|---|---|---|---|\n",
            );
            let mut cells = Vec::new();
            for s in &servers {
                let loads =
                    rows.iter().filter(|r| &r.case == case && &r.variant == variant && &r.server == s && r.run > 0);
                let n = loads.count();
                match cell(rows, case, variant, s) {
                    Some(c) => {
                        md.push_str(&format!(
                            "| {s} | {} | {} | {} | {} | {}/{} | {}/{} |\n",
                            fmt_stat(&c.fcp, 0),
                            fmt_stat(&c.lcp, 0),
                            fmt_stat(&c.html, 0),
                            c.hint.map_or_else(|| "none".to_string(), |h| fmt_stat(&h, 0)),
                            c.css_early,
                            c.ok,
                            c.ok,
                            c.loads
                        ));
                        cells.push((s.clone(), c));
                    }
                    None if n > 0 => md.push_str(&format!("| {s} | n/a | n/a | n/a | n/a | n/a | 0/{n} |\n")),
                    None => {}
                }
            }
            let base = cells.iter().find(|(s, _)| s == "sluice-nolearn").map(|(_, c)| *c);
            let learned = cells.iter().find(|(s, _)| s == "sluice").map(|(_, c)| *c);
            if let (Some(b), Some(l)) = (base, learned) {
                md.push_str(&format!(
                    "\nLearned hints (`sluice`) against `sluice-nolearn`: FCP {:+.0} ms, LCP {:+.0} ms (medians; \
                     the origin thinks {THINK_MS} ms).\n",
                    l.fcp.median - b.fcp.median,
                    l.lcp.median - b.lcp.median
                ));
            }
        }
    }
    let failed: Vec<&LoadRow> = rows.iter().filter(|r| !r.ok()).collect();
    if !failed.is_empty() {
        md.push_str("\n## Failed loads\n\n");
        for r in failed {
            md.push_str(&format!("- {} {} {} run {}: {}\n", r.case, r.variant, r.server, r.run, r.error));
        }
    }
    md
}

/// The servers to run for `requested`: the global default list means [`DEFAULT`]; the servers
/// that are no reverse proxy here are skipped with the reason.
pub fn select_servers(requested: &[ServerKind]) -> (Vec<ServerKind>, Vec<Skipped>) {
    select_proxies(
        requested,
        &DEFAULT,
        &[
            ServerKind::Sluice,
            ServerKind::SluiceNoLearn,
            ServerKind::H2o,
            ServerKind::Caddy,
            ServerKind::Nginx,
            ServerKind::Haproxy,
        ],
        "earlyhints",
    )
}

/// The origin's address inside the server namespace.
pub fn origin_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, ORIGIN_PORT))
}

/// Runs the experiment.
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick), |c| &c.name)?;
    let (wanted, skipped) = select_servers(&plan.servers);
    let runs = plan.runs_or(LOADS);
    let estimate = |active: &[Active]| {
        let loads = cases.len() * Variant::ALL.len() * active.len() * (runs as usize + 1);
        let per_load = |c: &Case| 1.5 + THINK_MS as f64 / 1e3 + 12.0 * c.rtt_ms / 1e3 + PAUSE.as_secs_f64();
        Estimate {
            what: format!(
                "{} case(s) × {} variants × {} server(s) × (1 warm-up + {runs}) = {loads} page loads",
                cases.len(),
                Variant::ALL.len(),
                active.len(),
            ),
            expected: Duration::from_secs_f64(
                cases.iter().map(per_load).sum::<f64>()
                    * (Variant::ALL.len() * active.len() * (runs as usize + 1)) as f64
                    + 5.0 * active.len() as f64,
            ),
        }
    };
    let tools = [
        ("chromium", "`chromium` not found: the earlyhints experiment needs the Debian package (scripts/setup.sh)"),
        (
            "node",
            "`node` not found: the earlyhints experiment's origin needs Node.js (Debian nodejs; scripts/setup.sh)",
        ),
    ];
    let mut p = prepare(
        plan,
        Want {
            skipped,
            tools: &tools,
            site: Some(Site { write: &write_docroot, reach: 0o711 }),
            combined: true,
            line: first_line,
            ..Want::new("earlyhints", wanted, &estimate, CSV_HEADER)
        },
    )?;
    let (chromium, node) = (p.tools[0].clone(), p.tools[1].clone());
    let scratch = p.work.join("chromium");
    fs::create_dir_all(&scratch).map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    let pin = digest::spki_pin(&fs::read_to_string(&p.key).map_err(|e| format!("reading {}: {e}", p.key.display()))?)?;
    let mut rows: Vec<LoadRow> = Vec::new();
    let mut logs: Vec<(String, String)> = Vec::new();
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&cases[0].link())?;
        // The origin.
        let setup = Setup {
            dir: p.work.join("origin"),
            listen: origin_addr(),
            cert: p.cert.clone(),
            key: p.key.clone(),
            sink: servers::sink_addr(),
        };
        let script = setup.dir.join("origin.js");
        let launch = servers::Launch {
            args: vec![
                servers::check_config_path(&script)?,
                servers::check_config_path(&p.docroot)?,
                ORIGIN_PORT.to_string(),
                THINK_MS.to_string(),
            ],
            env: vec![],
            config: ("origin.js".into(), ORIGIN_JS.into()),
        };
        let probe = format!("http://{}/links/style.css", origin_addr());
        stage.start_checked("origin", &node, &setup, &launch, SERVER_NS, &probe)?;
        // The proxies.
        let active = p.active.clone();
        let running = p.start_each(&mut stage, &active, |stage, kind, bin, setup| {
            let url = format!("https://{SERVER_ADDR}:{}/links/style.css", kind.port());
            servers::proxy_launch(kind, setup, origin_addr())
                .and_then(|l| stage.start_static(kind, bin, setup, &l, &url))
        });
        if running.is_empty() {
            return Err("no proxy started (see above)".into());
        }
        let flags = vec![format!("--ignore-certificate-errors-spki-list={pin}")];
        let timings = p.work.join("timings");
        fs::create_dir_all(&timings).map_err(|e| format!("creating {}: {e}", timings.display()))?;
        for case in &cases {
            stage.set_link(&case.link());
            println!("== {}: {} Mbit/s, {} ms RTT", case.name, case.rate_mbit, case.rtt_ms);
            for variant in Variant::ALL {
                for run in 0..=runs {
                    for kind in rotation(&running, run.max(1)) {
                        p.go_on(String::new)?;
                        let mut row = LoadRow {
                            case: case.name.clone(),
                            rate_mbit: case.rate_mbit,
                            rtt_ms: case.rtt_ms,
                            variant: variant.name().into(),
                            server: kind.name().into(),
                            run,
                            load: Load::default(),
                            error: String::new(),
                        };
                        let url = format!("https://{SERVER_ADDR}:{}{}", kind.port(), variant.page_path());
                        let measured = stage.check_alive(kind.name()).and_then(|()| {
                            let dom = chromium::dump_dom(&chromium, &url, &scratch, &flags)?;
                            // Every load's own report, for a closer look.
                            let saved =
                                timings.join(format!("{}-{}-{}-{run}.json", case.name, variant.name(), kind.name()));
                            let _ = fs::write(&saved, timings_json(&dom).unwrap_or_default());
                            let load = parse_dom(&dom)?;
                            match load.protocols.iter().find(|(_, p)| p != "h2") {
                                Some((name, p)) => Err(format!("{name} came over {p:?}, not h2")),
                                None => Ok(load),
                            }
                        });
                        match measured {
                            Ok(l) => row.load = l,
                            Err(e) => row.error = first_line(&e),
                        }
                        proc::check_interrupt()?;
                        let what = if run == 0 { "warm-up".to_string() } else { format!("run {run}") };
                        if row.ok() {
                            let l = &row.load;
                            println!(
                                "{} {:<9} {what:<7} {:<14} FCP {:.0} ms, LCP {:.0} ms, page end {:.0} ms, 103 {}, \
                                 stylesheet by {}, {} of 3 hinted resources by early hints",
                                case.name,
                                variant.name(),
                                kind.name(),
                                l.fcp_ms,
                                l.lcp_ms,
                                l.html_ms,
                                if l.hint_ms > 0.0 { format!("at {:.0} ms", l.hint_ms) } else { "none".into() },
                                l.css_initiator,
                                l.early
                            );
                        } else {
                            println!(
                                "{} {:<9} {what:<7} {:<14} FAILED: {}",
                                case.name,
                                variant.name(),
                                kind.name(),
                                row.error
                            );
                        }
                        p.csv.line(&csv_line(&row))?;
                        rows.push(row);
                        proc::sleep(PAUSE)?;
                    }
                }
            }
        }
        for kind in &running {
            logs.push((kind.name().to_string(), stage.service_log_tail(kind.name(), 4000)));
        }
        stage.stop();
        Ok(())
    })();
    let mut notes = notes(&cases, runs);
    notes.extend(hint_marks(&logs));
    if !p.versions.is_empty() {
        notes.push(format!("Versions: {}.", p.versions.join("; ")));
    }
    for s in &p.skipped {
        notes.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    let measured = rows.iter().filter(|r| r.run > 0);
    notes.push(format!(
        "{} of {} measured loads succeeded (warm-ups: {} of {}); wall time {}.",
        measured.clone().filter(|r| r.ok()).count(),
        measured.count(),
        rows.iter().filter(|r| r.run == 0 && r.ok()).count(),
        rows.iter().filter(|r| r.run == 0).count(),
        fmt_duration(p.started.elapsed())
    ));
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", first_line(e)));
    }
    let md_path = plan.out.join("summary.md");
    let written =
        fs::write(&md_path, markdown(&rows, &notes)).map_err(|e| format!("writing {}: {e}", md_path.display()));
    outcome?;
    written?;
    println!(
        "earlyhints: done in {}; wrote {}/{{results.csv,summary.md}}",
        fmt_duration(p.started.elapsed()),
        plan.out.display()
    );
    let (cs, vs, ss) = order(&rows);
    for (case, _, _) in &cs {
        for v in &vs {
            let parts: Vec<String> = ss
                .iter()
                .map(|s| match cell(&rows, case, v, s) {
                    Some(c) => format!(
                        "{s} FCP {:.0} / LCP {:.0} ms (css early {}/{})",
                        c.fcp.median, c.lcp.median, c.css_early, c.ok
                    ),
                    None => format!("{s} n/a"),
                })
                .collect();
            println!("{case} {v}: {}", parts.join(", "));
        }
    }
    Ok(())
}

/// Counts of Sluice's access-log marks (`hints=learned`, `hints=upstream`, …) per Sluice server,
/// as a note: which 103s Sluice sent.
fn hint_marks(logs: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (server, log) in logs {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for mark in log.split_whitespace().filter_map(|w| w.strip_prefix("hints=")) {
            match counts.iter_mut().find(|(m, _)| m == mark) {
                Some((_, n)) => *n += 1,
                None => counts.push((mark.to_string(), 1)),
            }
        }
        if log.contains(" GET ") || !counts.is_empty() {
            let list = if counts.is_empty() {
                "none".to_string()
            } else {
                counts.iter().map(|(m, n)| format!("`hints={m}` × {n}")).collect::<Vec<_>>().join(", ")
            };
            out.push(format!("`{server}`'s access log: 103s sent: {list}."));
        }
    }
    out
}

fn notes(cases: &[Case], runs: u32) -> Vec<String> {
    vec![
        format!(
            "Method: headless Chromium (`--headless=new`, a fresh `--user-data-dir` per load, the lab's certificate \
             pinned with `--ignore-certificate-errors-spki-list`) in the client namespace loads `/<variant>/page.html` \
             through each server, a TLS HTTP/2 reverse proxy of one origin (Node's `http`, HTTP/1.1, on 127.0.0.1 in \
             the server namespace) that thinks {THINK_MS} ms before it answers the page with `Link: <…>; \
             rel=preload` fields for `style.css` ({CSS_BYTES} B, render-blocking, declares the web font with \
             `font-display: block`), `font.woff2` ({FONT_BYTES} B, also preloaded by the page with `crossorigin`) and \
             `app.js` ({JS_BYTES} B, parser-blocking). Those are served at once with `Cache-Control: max-age=3600`. \
             Per case, variant and server: one warm-up load (it teaches Sluice the hints; kept out of the figures), \
             then {runs} loads, the server order rotating run by run. FCP and LCP come from the page's \
             PerformanceObservers; \"first 103\" is the navigation's `firstInterimResponseStart` over the loads that \
             got one; \"stylesheet by early hints\" counts loads whose `style.css` has `initiatorType` `early-hints`. \
             Medians with min–max."
        ),
        format!(
            "Links: {}; runs: {runs} per server, variant and case.",
            cases
                .iter()
                .map(|c| format!("{} Mbit/s × {} ms RTT", c.rate_mbit, c.rtt_ms))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        "Servers: `sluice` (Sluice as a reverse proxy, `early_hints_learn = true`, its default: it sends what it \
         learned from the previous response at once, before asking the origin, and forwards only the links of the \
         origin's own 103 not sent yet), `sluice-nolearn` (`early_hints_learn = false`: the origin's 103 only), `h2o` \
         (`proxy.reverse.url`), `caddy` (`reverse_proxy`); each forwards the origin's 103 if it can."
            .into(),
        "The font is random bytes of a woff2's size: Chromium fetches it whole, fails to decode it and falls back, \
         so text paints once it has arrived, as with a real font under `font-display: block`."
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dom(fcp: &str, css_initiator: &str, interim: f64) -> String {
        format!(
            "<html><body><pre style=\"display: none;\">{MARK}{{\"fcp\":{fcp},\"lcp\":450.5,\"resources\":[\
             {{\"name\":\"/links/hold\",\"initiator\":\"img\",\"start\":1,\"end\":0,\"protocol\":\"\"}},\
             {{\"name\":\"/links/style.css\",\"initiator\":\"{css_initiator}\",\"start\":5,\"end\":50,\"protocol\":\"h2\"}},\
             {{\"name\":\"/links/font.woff2\",\"initiator\":\"early-hints\",\"start\":5,\"end\":60,\"protocol\":\"h2\"}},\
             {{\"name\":\"/links/app.js\",\"initiator\":\"script\",\"start\":6,\"end\":70,\"protocol\":\"h2\"}}],\
             \"nav\":{{\"name\":\"/links/page.html\",\"protocol\":\"h2\",\"end\":420.25,\"interim\":{interim}}}}}:END</pre>\
             </body></html>"
        )
    }

    #[test]
    fn timings_from_the_dom() {
        let l = parse_dom(&dom("440", "early-hints", 95.5)).unwrap();
        assert_eq!((l.fcp_ms, l.lcp_ms, l.html_ms, l.hint_ms), (440.0, 450.5, 420.25, 95.5));
        assert!(l.css_early());
        assert_eq!(l.early, 2);
        // The hold image (pending) is not among the protocols checked.
        assert_eq!(l.protocols.len(), 4);
        assert!(l.protocols.iter().all(|(_, p)| p == "h2"), "{:?}", l.protocols);
        let l = parse_dom(&dom("440", "link", 0.0)).unwrap();
        assert!(!l.css_early());
        assert_eq!((l.early, l.hint_ms), (1, 0.0));
        assert!(parse_dom(&dom("null", "link", 0.0)).unwrap_err().contains("first-contentful-paint"));
        assert!(parse_dom("<html></html>").unwrap_err().contains("did not report"));
        let no_css = dom("440", "link", 0.0).replace("/links/style.css", "/other");
        assert!(parse_dom(&no_css).unwrap_err().contains("stylesheet"));
    }

    #[test]
    fn page_links_and_docroot() {
        for v in Variant::ALL {
            let p = page(v);
            let prefix = format!("/{}/", v.name());
            assert!(p.contains(&format!("<link rel=\"stylesheet\" href=\"{prefix}style.css\">")), "{p}");
            assert!(p.contains(&format!("href=\"{prefix}font.woff2\" as=\"font\" type=\"font/woff2\" crossorigin")));
            assert!(p.contains(&format!("<script src=\"{prefix}app.js\">")));
            // The timing script comes before the stylesheet, and its marker is assembled at run time.
            assert!(p.find("PerformanceObserver").unwrap() < p.find("rel=\"stylesheet\"").unwrap());
            assert!(!p.contains(MARK));
            let l = links(v);
            assert_eq!(l.len(), HINTED.len());
            for (link, name) in l.iter().zip(HINTED) {
                assert!(link.starts_with(&format!("<{prefix}{name}>; rel=preload; as=")), "{link}");
            }
            assert!(l[1].ends_with("as=font; crossorigin"));
        }
        let dir = tempfile::tempdir().unwrap();
        write_docroot(dir.path()).unwrap();
        let css = fs::read_to_string(dir.path().join("links/style.css")).unwrap();
        assert_eq!(css.len(), CSS_BYTES);
        assert!(css.contains("src:url(/links/font.woff2)") && css.contains("font-display:block"), "{}", &css[..200]);
        assert_eq!(fs::metadata(dir.path().join("origin103/font.woff2")).unwrap().len(), FONT_BYTES);
        assert_eq!(fs::metadata(dir.path().join("origin103/app.js")).unwrap().len(), JS_BYTES as u64);
        let pages: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join("pages.json")).unwrap()).unwrap();
        assert_eq!(pages["/links/page.html"]["send103"], false);
        assert_eq!(pages["/origin103/page.html"]["send103"], true);
        assert_eq!(pages["/origin103/page.html"]["links"][0], "</origin103/style.css>; rel=preload; as=style");
        assert!(ORIGIN_JS.contains("writeEarlyHints") && ORIGIN_JS.contains("max-age=3600"));
    }

    fn row(variant: &str, server: &str, run: u32, fcp: f64, css: &str, error: &str) -> LoadRow {
        LoadRow {
            case: "20mbit-40ms".into(),
            rate_mbit: 20.0,
            rtt_ms: 40.0,
            variant: variant.into(),
            server: server.into(),
            run,
            load: Load {
                fcp_ms: fcp,
                lcp_ms: fcp + 10.0,
                html_ms: 400.0,
                hint_ms: if css == "early-hints" { 60.0 } else { 0.0 },
                css_initiator: css.into(),
                early: usize::from(css == "early-hints") * 3,
                protocols: vec![],
            },
            error: error.into(),
        }
    }

    #[test]
    fn report() {
        let rows = vec![
            row("links", "sluice", 0, 700.0, "link", ""),
            row("links", "sluice", 1, 450.0, "early-hints", ""),
            row("links", "sluice", 2, 470.0, "early-hints", ""),
            row("links", "sluice-nolearn", 0, 690.0, "link", ""),
            row("links", "sluice-nolearn", 1, 650.0, "link", ""),
            row("links", "sluice-nolearn", 2, 670.0, "link", ""),
            row("links", "caddy", 1, 0.0, "", "chromium: killed"),
        ];
        let c = cell(&rows, "20mbit-40ms", "links", "sluice").unwrap();
        assert_eq!((c.fcp.median, c.css_early, c.ok, c.loads), (460.0, 2, 2, 2));
        assert_eq!(c.hint.unwrap().median, 60.0);
        let b = cell(&rows, "20mbit-40ms", "links", "sluice-nolearn").unwrap();
        assert!(b.hint.is_none());
        assert!(cell(&rows, "20mbit-40ms", "links", "caddy").is_none());
        let md = markdown(&rows, &["a note".into()]);
        assert!(md.contains("- a note"), "{md}");
        assert!(
            md.contains("| sluice | 460 (450–470) | 470 (460–480) | 400 (400–400) | 60 (60–60) | 2/2 | 2/2 |"),
            "{md}"
        );
        assert!(
            md.contains("| sluice-nolearn | 660 (650–670) | 670 (660–680) | 400 (400–400) | none | 0/2 | 2/2 |"),
            "{md}"
        );
        assert!(md.contains("| caddy | n/a | n/a | n/a | n/a | n/a | 0/1 |"), "{md}");
        assert!(md.contains("FCP -200 ms, LCP -200 ms"), "{md}");
        assert!(md.contains("20mbit-40ms links caddy run 1: chromium: killed"), "{md}");
        for r in &rows {
            assert_eq!(csv_line(r).split(',').count(), CSV_HEADER.split(',').count(), "{}", csv_line(r));
        }
        assert!(csv_line(&rows[1]).contains(",links,sluice,1,450.0,460.0,400.0,60.0,early-hints,3,true,\"\""));
    }

    #[test]
    fn servers_and_cases() {
        let (k, s) = select_servers(&servers::DEFAULT);
        assert_eq!(k, DEFAULT);
        assert!(s.is_empty());
        let (k, s) = select_servers(&[ServerKind::Sluice, ServerKind::SluiceH3, ServerKind::Haproxy]);
        assert_eq!(k, [ServerKind::Sluice, ServerKind::Haproxy]);
        assert_eq!(s.len(), 1);
        assert!(s[0].reason.contains("not a reverse proxy"));
        let c = cases(false);
        assert_eq!(c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["20mbit-40ms", "5mbit-80ms"]);
        assert_eq!(c[1].link(), crate::experiments::case::link_spec(5.0, 80.0));
        assert_eq!(cases(true).len(), 1);
        assert_eq!(Variant::Origin103.page_path(), "/origin103/page.html");
        assert!(Variant::Origin103.sends_103() && !Variant::Links.sends_103());
    }

    #[test]
    fn access_log_marks() {
        let logs = vec![
            (
                "sluice".to_string(),
                "1.2 10.99.0.1:5 h2 GET 10.99.0.2:8443 /links/page.html 200 hints=learned\n\
             1.3 p h2 GET a /x 200 hints=learned\n1.4 p h2 GET a /o 200 hints=learned+upstream 0.3s ok\n"
                    .to_string(),
            ),
            ("sluice-nolearn".to_string(), "1.2 p h2 GET a /links/page.html 200\n".to_string()),
            ("h2o".to_string(), String::new()),
        ];
        let n = hint_marks(&logs);
        assert_eq!(n.len(), 2, "{n:?}");
        assert_eq!(n[0], "`sluice`'s access log: 103s sent: `hints=learned` × 2, `hints=learned+upstream` × 1.");
        assert_eq!(n[1], "`sluice-nolearn`'s access log: 103s sent: none.");
    }

    /// The setup `Prepared::setup` gives: HAProxy's certificate is the combined PEM.
    fn proxy_setup(kind: ServerKind, work: &Path, cert: &Path, key: &Path, combined: &Path) -> Setup {
        let c = if kind == ServerKind::Haproxy { combined } else { cert };
        Setup::new(kind, work, SERVER_ADDR, c, key)
    }

    #[test]
    fn proxy_configs() {
        let work = Path::new("/w");
        let (cert, key, combined) = (Path::new("/c/cert.pem"), Path::new("/c/key.pem"), Path::new("/w/combined.pem"));
        let origin = origin_addr();
        let conf =
            |k: ServerKind| servers::proxy_launch(k, &proxy_setup(k, work, cert, key, combined), origin).unwrap();
        let s = conf(ServerKind::Sluice).config.1;
        assert!(
            s.contains("[[upstream]]\nname = \"origin\"\nservers = [\"127.0.0.1:9100\"]\nearly_hints_learn = true\n"),
            "{s}"
        );
        assert!(s.contains("[[site]]\nproxy = \"origin\"\n") && s.contains("access_log = true"), "{s}");
        assert!(conf(ServerKind::SluiceNoLearn).config.1.contains("early_hints_learn = false"));
        assert!(conf(ServerKind::SluiceNoLearn).config.1.contains(":8464\""));
        let h = conf(ServerKind::H2o).config.1;
        assert!(h.contains("      /:\n        proxy.reverse.url: \"http://127.0.0.1:9100/\"\n"), "{h}");
        let c = conf(ServerKind::Caddy).config.1;
        assert!(c.contains("\treverse_proxy 127.0.0.1:9100\n"), "{c}");
        let n = conf(ServerKind::Nginx).config.1;
        assert!(n.contains("server 127.0.0.1:9100;") && n.contains("proxy_pass http://origin;"), "{n}");
        assert!(!n.contains("proxy_buffering off;"), "nginx keeps its default proxy_buffering on");
        let l = conf(ServerKind::Haproxy);
        assert!(
            l.config.1.contains("bind 10.99.0.2:8465 ssl crt \"/w/combined.pem\" alpn h2,http/1.1"),
            "{}",
            l.config.1
        );
        assert!(l.config.1.contains("server origin 127.0.0.1:9100"), "{}", l.config.1);
        assert_eq!(l.args, ["-db", "-f", "/w/haproxy/haproxy.cfg"]);
        assert!(servers::proxy_launch(
            ServerKind::SluiceH3,
            &proxy_setup(ServerKind::SluiceH3, work, cert, key, combined),
            origin
        )
        .is_err());
    }
}
