//! The `priority` experiment (write-up `002_…txt`, "Optimizing HTTP/2 prioritization with BBR
//! and tcp_notsent_lowat"): a render-blocking stylesheet requested on a connection busy with
//! ten 1 MB images, against the same stylesheet on an idle connection. The figure is the
//! ratio busy/idle of the time from sending the CSS request to its END_STREAM; the write-up's
//! ideal is 1 (the bar for Sluice: ≤ 1.2).
//!
//! Every server serves the same docroot (`img0.jpg`..`img9.jpg`, 1 MB of random bytes each,
//! `style.css`, 50 KB) as static files over TLS. The client is [`super::h2client`], run on a
//! thread inside the client namespace. Cases: 5 Mbit/s × 40 ms RTT with a 1 MB drop-tail queue
//! (bufferbloat), and 50 Mbit/s × 20 ms with the default queue (1.5 × BDP).
//!
//! The `-tuned` peers run with the write-up's tuning in the server namespace
//! (`net.ipv4.tcp_notsent_lowat = 16384`, `net.ipv4.tcp_congestion_control = bbr`). These
//! sysctls are per network namespace, not per server, so the tuned servers run in a second
//! phase with the sysctls set, restored to their previous values afterwards (also on error).
//! `net.core.default_qdisc = fq` has no counterpart: the lab's link is a TUN device.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::chart::{self, Axis};
use super::h2client::{self, Outcome, CSS_BYTES, IMAGES, IMAGE_BYTES};
use super::proc;
use super::report::{self, Stat, Summary};
use super::servers::{self, Setup};
use super::stage::{self, Stage};
use super::upload::rotation;
use super::{Active, Plan, Skipped};
use crate::model::{LinkSpec, Queue};
use crate::net::{self, CLIENT_NS, SERVER_ADDR, SERVER_NS};

/// The write-up's tuning: (sysctl, value).
pub const TUNING: [(&str, &str); 2] =
    [("net.ipv4.tcp_notsent_lowat", "16384"), ("net.ipv4.tcp_congestion_control", "bbr")];
/// The bar for Sluice's busy/idle ratio.
pub const BAR: f64 = 1.2;
/// Pause between measurements, so queues drain.
const PAUSE: Duration = Duration::from_millis(500);

/// One link setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Name in the CSV: `5mbit-40ms-q1MB`.
    pub name: String,
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Drop-tail queue in bytes (`None`: the lab's default 1.5 × BDP).
    pub queue_bytes: Option<usize>,
}

impl Case {
    /// The link of this case.
    pub fn link(&self) -> LinkSpec {
        let mut spec = stage::link_spec(self.rate_mbit, self.rtt_ms);
        if let Some(q) = self.queue_bytes {
            spec.up.queue = Queue::Bytes(q);
            spec.down.queue = Queue::Bytes(q);
        }
        spec
    }

    /// Rough seconds per measurement: the images at the link rate, plus handshakes.
    fn seconds(&self) -> f64 {
        (IMAGES as f64 * IMAGE_BYTES as f64 + 2.0 * CSS_BYTES as f64) * 8.0 / (self.rate_mbit * 1e6)
            + 10.0 * self.rtt_ms / 1e3
            + PAUSE.as_secs_f64()
    }
}

/// The cases; `quick` keeps the first.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case { name: "5mbit-40ms-q1MB".into(), rate_mbit: 5.0, rtt_ms: 40.0, queue_bytes: Some(1_000_000) },
        Case { name: "50mbit-20ms".into(), rate_mbit: 50.0, rtt_ms: 20.0, queue_bytes: None },
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// One measurement of one server.
#[derive(Clone, Debug, PartialEq)]
pub struct PRow {
    /// Case name.
    pub case: String,
    /// Link rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Server name.
    pub server: String,
    /// Run, from 1.
    pub run: u32,
    /// The figures (zero when failed).
    pub outcome: Outcome,
    /// Empty when ok.
    pub error: String,
}

impl PRow {
    /// Whether the run succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }
}

/// The CSV header.
pub const CSV_HEADER: &str =
    "experiment,case,rtt_ms,rate_mbit,server,run,css_busy_ms,css_idle_ms,ratio,images_done_ms,ok,error\n";

/// One CSV line.
pub fn csv_line(r: &PRow) -> String {
    let o = &r.outcome;
    let error = r.error.replace(['"', '\n', '\r'], " ");
    format!(
        "priority,{},{},{},{},{},{:.2},{:.2},{:.4},{:.1},{},\"{}\"\n",
        r.case,
        r.rtt_ms,
        r.rate_mbit,
        r.server,
        r.run,
        o.css_busy_ms,
        o.css_idle_ms,
        o.ratio,
        o.images_done_ms,
        r.ok(),
        error
    )
}

/// Statistics of one server in one case over its successful runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellStats {
    /// CSS on the busy connection, ms.
    pub busy: Stat,
    /// CSS on an idle connection, ms.
    pub idle: Stat,
    /// busy/idle, run by run.
    pub ratio: Stat,
    /// All images done, ms.
    pub images: Stat,
    /// Runs in all (failed included).
    pub runs: usize,
}

/// Statistics of `server` in `case`, `None` without a successful run.
pub fn cell(rows: &[PRow], case: &str, server: &str) -> Option<CellStats> {
    let all: Vec<&PRow> = rows.iter().filter(|r| r.case == case && r.server == server).collect();
    let ok: Vec<&Outcome> = all.iter().filter(|r| r.ok()).map(|r| &r.outcome).collect();
    let of = |f: fn(&Outcome) -> f64| Stat::of(&ok.iter().map(|o| f(o)).collect::<Vec<_>>());
    Some(CellStats {
        busy: of(|o| o.css_busy_ms)?,
        idle: of(|o| o.css_idle_ms)?,
        ratio: of(|o| o.ratio)?,
        images: of(|o| o.images_done_ms)?,
        runs: all.len(),
    })
}

fn fmt_stat(s: &Stat, decimals: usize) -> String {
    format!("{:.*} ({:.*}–{:.*})", decimals, s.median, decimals, s.min, decimals, s.max)
}

/// Cases and servers in first-seen order.
fn order(rows: &[PRow]) -> (Vec<(String, f64, f64)>, Vec<String>) {
    let mut cases: Vec<(String, f64, f64)> = Vec::new();
    let mut servers: Vec<String> = Vec::new();
    for r in rows {
        if !cases.iter().any(|c| c.0 == r.case) {
            cases.push((r.case.clone(), r.rate_mbit, r.rtt_ms));
        }
        if !servers.contains(&r.server) {
            servers.push(r.server.clone());
        }
    }
    (cases, servers)
}

/// `summary.md`: per case, each server's median (min–max) of the CSS times and of the ratio.
pub fn markdown(rows: &[PRow], notes: &[String]) -> String {
    let mut md = format!("# {}\n\n", title());
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let (cases, servers) = order(rows);
    for (case, rate, rtt) in &cases {
        md.push_str(&format!("\n## {case}: {rate} Mbit/s, {rtt} ms RTT\n\n"));
        md.push_str(
            "| server | CSS busy ms | CSS idle ms | busy/idle | all images done ms | ok runs |\n\
             |---|---|---|---|---|---|\n",
        );
        for s in &servers {
            let runs = rows.iter().filter(|r| &r.case == case && &r.server == s).count();
            match cell(rows, case, s) {
                Some(c) => md.push_str(&format!(
                    "| {s} | {} | {} | {} | {} | {}/{} |\n",
                    fmt_stat(&c.busy, 0),
                    fmt_stat(&c.idle, 0),
                    fmt_stat(&c.ratio, 2),
                    fmt_stat(&c.images, 0),
                    c.busy.n,
                    c.runs
                )),
                None if runs > 0 => md.push_str(&format!("| {s} | n/a | n/a | n/a | n/a | 0/{runs} |\n")),
                None => {}
            }
        }
        if let Some(c) = cell(rows, case, "sluice") {
            let verdict = if c.ratio.median <= BAR { "meets" } else { "misses" };
            md.push_str(&format!("\nSluice's busy/idle ratio {:.2} {verdict} the bar of ≤ {BAR}.\n", c.ratio.median));
        }
    }
    let failed: Vec<&PRow> = rows.iter().filter(|r| !r.ok()).collect();
    if !failed.is_empty() {
        md.push_str("\n## Failed runs\n\n");
        for r in failed {
            md.push_str(&format!("- {} {} run {}: {}\n", r.case, r.server, r.run, r.error));
        }
    }
    md
}

fn title() -> String {
    format!(
        "priority: {} KB CSS after {} × {} MB images (busy) vs alone (idle), HTTP/2 over TLS",
        CSS_BYTES / 1000,
        IMAGES,
        IMAGE_BYTES / 1_000_000
    )
}

/// The chart's rows: the ratio per server and case, as the shared chart's "figure".
fn chart_rows(rows: &[PRow]) -> Vec<report::Row> {
    rows.iter()
        .map(|r| report::Row {
            experiment: "priority".into(),
            case: r.case.clone(),
            rtt_ms: r.rtt_ms,
            rate_mbit: r.rate_mbit,
            server: r.server.clone(),
            protocol: "CSS busy/idle".into(),
            run: r.run,
            mbps: r.outcome.ratio,
            seconds: r.outcome.css_busy_ms / 1e3,
            ok: r.ok() && r.outcome.ratio.is_finite(),
            sink_seconds: None,
            error: r.error.clone(),
        })
        .collect()
}

/// Writes `summary.md`, `priority.png` and `priority.svg`.
pub fn write_outputs(dir: &Path, rows: &[PRow], notes: &[String]) -> Result<(), String> {
    let md_path = dir.join("summary.md");
    fs::write(&md_path, markdown(rows, notes)).map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    let summary = Summary::from_rows(&chart_rows(rows));
    let axis = Axis { desc: "CSS time busy / idle (median, whiskers min–max; ideal 1)", decimals: 2 };
    chart::write_charts_axis(dir, "priority", &summary, &title(), axis)
}

/// The docroot: `img0.jpg`..`img9.jpg` (1 MB of random bytes each) and `style.css` (50 KB).
pub fn write_docroot(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    for i in 0..IMAGES {
        super::write_random(&dir.join(format!("img{i}.jpg")), IMAGE_BYTES, i as u64 + 1)?;
    }
    let rule = ".c{color:#123456;margin:0 auto;padding:1px 2px}\n";
    let css: String = rule.repeat(CSS_BYTES as usize / rule.len() + 1).chars().take(CSS_BYTES as usize).collect();
    let p = dir.join("style.css");
    fs::write(&p, css).map_err(|e| format!("writing {}: {e}", p.display()))?;
    let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
    Ok(())
}

/// Sets the tuning sysctls in the server namespace; returns the previous values to restore.
pub(super) fn tune() -> Result<Vec<(&'static str, String)>, String> {
    let mut saved = Vec::new();
    for (key, value) in TUNING {
        let old = net::sysctl_get_in(SERVER_NS, key)?;
        if let Err(e) = net::sysctl_in(SERVER_NS, key, value) {
            restore(&saved);
            return Err(format!("tuning the server namespace: {e}"));
        }
        saved.push((key, old));
    }
    Ok(saved)
}

pub(super) fn restore(saved: &[(&'static str, String)]) {
    for (key, value) in saved {
        if let Err(e) = net::sysctl_in(SERVER_NS, key, value) {
            eprintln!("sluice-lab: restoring {key} = {value}: {e}");
        }
    }
}

/// Writes the private key readable by root only.
pub(super) fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = fs::remove_file(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// What the phases share.
struct Ctx<'a> {
    plan: &'a Plan,
    cases: &'a [Case],
    work: &'a Path,
    docroot: &'a Path,
    cert: &'a Path,
    key: &'a Path,
    deadline: Instant,
    bound: Duration,
}

/// Runs the experiment.
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = cases(plan.quick);
    let (active, mut skipped) = super::resolve_servers(plan)?;
    for s in &skipped {
        eprintln!("sluice-lab: SKIP {}: {}", s.server.name(), s.reason);
    }
    if active.is_empty() {
        return Err("no server to run (see the SKIP notes above)".into());
    }
    net::available().map_err(|e| format!("the lab is not available: {e}"))?;
    let work = plan.out.join("work");
    fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let per_run: f64 = cases.iter().map(Case::seconds).sum();
    let expected =
        Duration::from_secs_f64(per_run * (active.len() * plan.runs as usize) as f64 + 5.0 * active.len() as f64);
    let bound = plan.bound.unwrap_or_else(|| super::default_bound(expected));
    println!(
        "priority: {} case(s) × {} server(s) × {} run(s): expected ≈ {} (bounded to {}); results in {}",
        cases.len(),
        active.len(),
        plan.runs,
        super::fmt_duration(expected),
        super::fmt_duration(bound),
        plan.out.display()
    );
    let started = Instant::now();
    let versions = super::versions(&active, &work);
    let (cert_pem, key_pem) = servers::self_signed(SERVER_ADDR)?;
    let cert = work.join("cert.pem");
    let key = work.join("key.pem");
    fs::write(&cert, cert_pem).map_err(|e| format!("writing {}: {e}", cert.display()))?;
    write_private(&key, &key_pem)?;
    let docroot = work.join("docroot");
    write_docroot(&docroot)?;
    // nginx and h2o workers read the files as nobody: every parent must be traversable.
    for dir in [&work, &plan.out] {
        if let Ok(m) = fs::metadata(dir) {
            let mode = m.permissions().mode();
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o711));
        }
    }

    let csv_path = plan.out.join("results.csv");
    let mut csv = File::create(&csv_path).map_err(|e| format!("creating {}: {e}", csv_path.display()))?;
    csv.write_all(CSV_HEADER.as_bytes()).map_err(|e| format!("writing {}: {e}", csv_path.display()))?;
    let ctx = Ctx {
        plan,
        cases: &cases,
        work: &work,
        docroot: &docroot,
        cert: &cert,
        key: &key,
        deadline: started + bound,
        bound,
    };
    let mut rows: Vec<PRow> = Vec::new();
    let outcome = (|| -> Result<(), String> {
        let mut stage = Stage::start(&cases[0].link(), &work)?;
        let (plain, tuned): (Vec<Active>, Vec<Active>) = active.iter().cloned().partition(|(k, _)| !k.is_tuned());
        for (phase, tuned_phase) in [(plain, false), (tuned, true)] {
            if phase.is_empty() {
                continue;
            }
            let saved = if tuned_phase {
                println!("== tuned phase: {}", TUNING.map(|(k, v)| format!("{k}={v}")).join(", "));
                tune()?
            } else {
                Vec::new()
            };
            let r = run_phase(&ctx, &mut stage, &phase, &mut skipped, &mut rows, &mut csv, &csv_path);
            for (k, _) in &phase {
                stage.stop_service(k.name());
            }
            restore(&saved);
            r?;
        }
        stage.stop();
        Ok(())
    })();

    let mut notes = notes(plan, &cases, &versions, &skipped, &rows, started.elapsed());
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", e.lines().next().unwrap_or_default()));
    }
    let written = write_outputs(&plan.out, &rows, &notes);
    outcome?;
    written?;
    println!(
        "priority: done in {}; {} of {} runs ok; wrote {}/{{results.csv,summary.md,priority.png,priority.svg}}",
        super::fmt_duration(started.elapsed()),
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        plan.out.display()
    );
    let (cs, ss) = order(&rows);
    for (case, _, _) in &cs {
        let parts: Vec<String> = ss
            .iter()
            .map(|s| match cell(&rows, case, s) {
                Some(c) => format!("{s} {:.2}", c.ratio.median),
                None => format!("{s} n/a"),
            })
            .collect();
        println!("busy/idle at {case}: {}", parts.join(", "));
    }
    Ok(())
}

/// Starts the phase's servers, runs every case, stops nothing (the caller does).
fn run_phase(
    ctx: &Ctx,
    stage: &mut Stage,
    phase: &[Active],
    skipped: &mut Vec<Skipped>,
    rows: &mut Vec<PRow>,
    csv: &mut File,
    csv_path: &Path,
) -> Result<(), String> {
    let mut running = Vec::new();
    for (kind, bin) in phase {
        let setup = Setup::new(*kind, ctx.work, SERVER_ADDR, ctx.cert, ctx.key);
        let url = format!("https://{SERVER_ADDR}:{}/style.css", kind.port());
        let started = servers::static_launch(*kind, &setup, ctx.docroot)
            .and_then(|l| stage.start_static(*kind, bin, &setup, &l, &url));
        match started {
            Ok(()) => running.push(*kind),
            Err(e) => {
                eprintln!("sluice-lab: SKIP {}: {e}", kind.name());
                let line = e.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
                skipped.push(Skipped { server: *kind, reason: format!("did not start: {line}") });
            }
        }
    }
    for case in ctx.cases {
        stage.set_link(&case.link());
        println!(
            "== {}: {} Mbit/s, {} ms RTT, queue {:?}",
            case.name,
            case.rate_mbit,
            case.rtt_ms,
            case.link().down.queue
        );
        for run in 1..=ctx.plan.runs {
            for kind in rotation(&running, run) {
                proc::check_interrupt()?;
                if Instant::now() >= ctx.deadline {
                    return Err(format!("the run exceeded its time bound of {}", super::fmt_duration(ctx.bound)));
                }
                let mut row = PRow {
                    case: case.name.clone(),
                    rate_mbit: case.rate_mbit,
                    rtt_ms: case.rtt_ms,
                    server: kind.name().into(),
                    run,
                    outcome: Outcome { css_busy_ms: 0.0, css_idle_ms: 0.0, ratio: 0.0, images_done_ms: 0.0 },
                    error: String::new(),
                };
                match stage.check_alive(kind.name()) {
                    Err(e) => row.error = e.lines().next().unwrap_or_default().to_string(),
                    Ok(()) => match net::in_netns(CLIENT_NS, || h2client::measure(SERVER_ADDR, kind.port())) {
                        Ok(Ok(o)) => row.outcome = o,
                        Ok(Err(e)) | Err(e) => row.error = e,
                    },
                }
                proc::check_interrupt()?;
                let json = serde_json::to_string(&row.outcome).unwrap_or_default();
                if row.ok() {
                    println!("{} run {run} {:<12} {json}", case.name, kind.name());
                } else {
                    println!("{} run {run} {:<12} FAILED: {}", case.name, kind.name(), row.error);
                }
                csv.write_all(csv_line(&row).as_bytes())
                    .and_then(|()| csv.flush())
                    .map_err(|e| format!("writing {}: {e}", csv_path.display()))?;
                rows.push(row);
                proc::sleep(PAUSE)?;
            }
        }
    }
    Ok(())
}

fn notes(
    plan: &Plan,
    cases: &[Case],
    versions: &[String],
    skipped: &[Skipped],
    rows: &[PRow],
    elapsed: Duration,
) -> Vec<String> {
    let mut n = vec![
        format!(
            "Method: sluice-lab's own HTTP/2 client (Sluice's frame and HPACK code, rustls): on one connection \
             {IMAGES} GETs of {IMAGE_BYTES}-byte images, each with `priority: u=5, i` and RFC 7540 priority fields \
             (weight 110, non-exclusive, dependency 0); after {} bytes of image data a GET of the {CSS_BYTES}-byte \
             `style.css` with `priority: u=0` and weight 256, exclusive, dependency 0. **busy** = CSS request sent → \
             its END_STREAM; **idle** = the same request alone on a fresh connection after the TLS handshake and \
             the SETTINGS exchange; ratio = busy/idle per run (ideal 1; the bar for Sluice ≤ {BAR}). \
             Flow control never limits (16 MiB stream windows, 1 GiB connection window, topped up). \
             The idle request starts from a fresh connection's initial congestion window while the busy one \
             rides a grown window, so a ratio below 1 is possible when the link is fast; the images' data \
             already in flight or queued in the network when the CSS is requested is what no server can recall.",
            h2client::TRIGGER_BYTES
        ),
        format!(
            "Links: {}; runs: {} per server and case, server order rotating run by run.",
            cases
                .iter()
                .map(|c| format!(
                    "{} Mbit/s × {} ms RTT, drop-tail queue {}",
                    c.rate_mbit,
                    c.rtt_ms,
                    c.queue_bytes.map(|q| format!("{q} bytes")).unwrap_or_else(|| "1.5 × BDP".into())
                ))
                .collect::<Vec<_>>()
                .join("; "),
            plan.runs
        ),
        format!(
            "Servers serve the docroot as static files over TLS: `sluice` (`[[site]] root`; it sets \
             TCP_NOTSENT_LOWAT 16 KiB and BBR on its own sockets), nginx (`root`), h2o (`file.dir`), Caddy \
             (`file_server`). The `-tuned` variants are the same configurations run in a second phase with {} \
             set in the server namespace (restored afterwards); `net.core.default_qdisc = fq` has no \
             counterpart on the lab's TUN link.",
            TUNING.map(|(k, v)| format!("`{k} = {v}`")).join(" and ")
        ),
    ];
    if !versions.is_empty() {
        n.push(format!("Versions: {}.", versions.join("; ")));
    }
    for s in skipped {
        n.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    n.push(format!(
        "{} of {} runs succeeded; wall time {}.",
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        super::fmt_duration(elapsed)
    ));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: &str, server: &str, run: u32, busy: f64, idle: f64, error: &str) -> PRow {
        PRow {
            case: case.into(),
            rate_mbit: 5.0,
            rtt_ms: 40.0,
            server: server.into(),
            run,
            outcome: Outcome { css_busy_ms: busy, css_idle_ms: idle, ratio: busy / idle, images_done_ms: 16000.0 },
            error: error.into(),
        }
    }

    #[test]
    fn the_cases() {
        let c = cases(false);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].link().down.queue, Queue::Bytes(1_000_000));
        assert_eq!(c[0].link().up.delay, Duration::from_millis(20));
        assert_eq!(c[1].link(), stage::link_spec(50.0, 20.0));
        assert_eq!(cases(true), c[..1]);
        // 10 MB at 5 Mbit/s is 16 s.
        assert!((c[0].seconds() - 17.06).abs() < 0.01, "{}", c[0].seconds());
    }

    #[test]
    fn report_math() {
        let rows = vec![
            row("a", "sluice", 1, 110.0, 100.0, ""),
            row("a", "sluice", 2, 300.0, 100.0, ""),
            row("a", "sluice", 3, 120.0, 100.0, ""),
            row("a", "nginx", 1, 3000.0, 100.0, ""),
            row("a", "nginx", 2, 0.0, 0.0, "boom"),
        ];
        let s = cell(&rows, "a", "sluice").unwrap();
        assert_eq!(s.busy.median, 120.0);
        assert!((s.ratio.median - 1.2).abs() < 1e-9);
        assert!((s.ratio.min - 1.1).abs() < 1e-9 && (s.ratio.max - 3.0).abs() < 1e-9);
        assert_eq!((s.busy.n, s.runs), (3, 3));
        let n = cell(&rows, "a", "nginx").unwrap();
        assert_eq!((n.busy.n, n.runs, n.ratio.median), (1, 2, 30.0));
        assert!(cell(&rows, "b", "sluice").is_none());
        let md = markdown(&rows, &["note".into()]);
        assert!(md.contains("| sluice | 120 (110–300) | 100 (100–100) | 1.20 (1.10–3.00) |"), "{md}");
        assert!(md.contains(
            "| nginx | 3000 (3000–3000) | 100 (100–100) | 30.00 (30.00–30.00) | 16000 (16000–16000) | 1/2 |"
        ));
        assert!(md.contains("meets the bar"), "{md}");
        assert!(md.contains("a nginx run 2: boom"));
        let line = csv_line(&rows[4]);
        assert!(line.starts_with("priority,a,40,5,nginx,2,") && line.ends_with(",false,\"boom\"\n"), "{line}");
        assert_eq!(line.split(',').count(), CSV_HEADER.split(',').count());
    }

    #[test]
    fn outputs_and_docroot() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![row("5mbit", "sluice", 1, 110.0, 100.0, ""), row("5mbit", "nginx", 1, 900.0, 100.0, "")];
        write_outputs(dir.path(), &rows, &[]).unwrap();
        assert!(fs::read_to_string(dir.path().join("summary.md")).unwrap().contains("| sluice |"));
        let svg = fs::read_to_string(dir.path().join("priority.svg")).unwrap();
        assert!(svg.contains("1.10") && svg.contains("9.00"), "ratios labelled with two decimals");
        assert!(dir.path().join("priority.png").metadata().unwrap().len() > 1000);
        let root = dir.path().join("docroot");
        write_docroot(&root).unwrap();
        assert_eq!(fs::metadata(root.join("img9.jpg")).unwrap().len(), IMAGE_BYTES);
        assert_eq!(fs::metadata(root.join("style.css")).unwrap().len(), CSS_BYTES);
        assert_ne!(fs::read(root.join("img0.jpg")).unwrap(), fs::read(root.join("img1.jpg")).unwrap());
    }
}
