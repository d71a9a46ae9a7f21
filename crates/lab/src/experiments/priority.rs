//! The `priority` experiment (write-up `002_…txt`, "Optimizing HTTP/2 prioritization with BBR
//! and tcp_notsent_lowat"): a render-blocking stylesheet requested on a connection busy with
//! ten 1 MB images, against the same stylesheet on an idle connection. The figure is the
//! ratio busy/idle of the time from sending the CSS request to its END_STREAM; the write-up's
//! ideal is 1 (the bar for Sluice: ≤ 1.2).
//!
//! Every server serves the same docroot (`img0.jpg`..`img9.jpg`, 1 MB of random bytes each,
//! `style.css`, 50 KB) as static files over TLS. The client is [`super::h2client`] (Sluice's
//! HTTP/2 client engine through `sluice_client::H2Conn`), run on a thread inside the client
//! namespace. Cases: 5 Mbit/s × 40 ms RTT with a 1 MB drop-tail queue (bufferbloat), and
//! 50 Mbit/s × 20 ms with the default queue (1.5 × BDP).
//!
//! The `-lone` case asks the same of a connection that carries one download: a 10 MB GET with
//! no priority signal (`big.bin`), the stylesheet requested once [`LONE_TRIGGER`] bytes of it
//! have arrived, about where a lone download's ramp fills the 50 Mbit/s × 20 ms link and its
//! queue. A single stream ramps faster than a page's several (Sluice's in-flight bound lets it
//! grow at BBR's startup gain until a second stream or an urgent response comes), and this is
//! what that costs the urgent response that follows it.
//!
//! The `-tuned` peers run with the write-up's tuning in the server namespace
//! (`net.ipv4.tcp_notsent_lowat = 16384`, `net.ipv4.tcp_congestion_control = bbr`). These
//! sysctls are per network namespace, not per server, so the tuned servers run in a second
//! phase with the sysctls set, restored to their previous values afterwards (also on error).
//! `net.core.default_qdisc = fq` has no counterpart: the lab's link is a TUN device.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::case::Case;
use super::chart::{self, Axis};
use super::common::{fmt_duration, write_random};
use super::h2client::{self, Outcome, CSS_BYTES, IMAGES, IMAGE_BYTES, LONE_BYTES, LONE_PATH};
use super::plan::Plan;
use super::report::{self, fmt_stat, Stat, Summary};
use super::servers::ServerKind;
use super::stage;
use super::statics::{self, order, Row, Spec};
use crate::net::{self, CLIENT_NS, SERVER_ADDR};
/// The bar for Sluice's busy/idle ratio.
pub const BAR: f64 = 1.2;
/// Pause between measurements, so queues drain.
const PAUSE: Duration = Duration::from_millis(500);
/// The `-lone` case: bytes of the download received before the stylesheet is requested. At
/// 50 Mbit/s × 20 ms (a BDP of 125 kB, a queue of 1.5 × BDP) a ramp from ten segments has
/// delivered about this much when what it sends first exceeds the link and its queue.
pub const LONE_TRIGGER: u64 = 500_000;

/// Rough seconds per measurement of `case`: the images (or the download) at the link rate,
/// plus handshakes.
fn seconds(case: &Case) -> f64 {
    let busy = if case.lone.is_some() { LONE_BYTES as f64 } else { IMAGES as f64 * IMAGE_BYTES as f64 };
    (busy + 2.0 * CSS_BYTES as f64) * 8.0 / (case.rate_mbit * 1e6) + 10.0 * case.rtt_ms / 1e3 + PAUSE.as_secs_f64()
}

/// The cases; `quick` keeps the first.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case { name: "5mbit-40ms-q1MB".into(), rate_mbit: 5.0, rtt_ms: 40.0, queue_bytes: Some(1_000_000), lone: None },
        Case { name: "50mbit-20ms".into(), rate_mbit: 50.0, rtt_ms: 20.0, queue_bytes: None, lone: None },
        Case {
            name: "50mbit-20ms-lone".into(),
            rate_mbit: 50.0,
            rtt_ms: 20.0,
            queue_bytes: None,
            lone: Some(LONE_TRIGGER),
        },
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// One measurement of one server.
pub type PRow = Row<Outcome>;

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
    md.push_str(&statics::failed_section(rows));
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
            link: None,
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

/// The docroot: `img0.jpg`..`img9.jpg` (1 MB of random bytes each), `style.css` (50 KB) and
/// `big.bin` (10 MB of random bytes, the `-lone` case's download).
pub fn write_docroot(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    for i in 0..IMAGES {
        write_random(&dir.join(format!("img{i}.jpg")), IMAGE_BYTES, i as u64 + 1)?;
    }
    write_random(&dir.join(LONE_PATH.trim_start_matches('/')), LONE_BYTES, IMAGES as u64 + 1)?;
    let rule = ".c{color:#123456;margin:0 auto;padding:1px 2px}\n";
    let css: String = rule.repeat(CSS_BYTES as usize / rule.len() + 1).chars().take(CSS_BYTES as usize).collect();
    let p = dir.join("style.css");
    fs::write(&p, css).map_err(|e| format!("writing {}: {e}", p.display()))?;
    let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
    Ok(())
}

/// Runs the experiment.
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick), |c| &c.name)?;
    let measure = |kind: ServerKind, _: &stage::Stage, case: &Case| {
        net::in_netns(CLIENT_NS, || h2client::measure(SERVER_ADDR, kind.port(), case.lone))?
    };
    let spec = Spec {
        name: "priority",
        cases: &cases,
        seconds_per_run: cases.iter().map(seconds).sum(),
        docroot: &write_docroot,
        measure: &measure,
        csv_header: CSV_HEADER,
        csv_line,
        describe: |o| serde_json::to_string(o).unwrap_or_default(),
        pause: PAUSE,
        h3: false,
        probe_bytes: CSS_BYTES,
    };
    let ran = statics::run(plan, &spec, Vec::new())?;
    let mut notes = notes(&cases, plan.runs);
    notes.extend(statics::closing_notes(&ran));
    let written = write_outputs(&plan.out, &ran.rows, &notes);
    ran.outcome?;
    written?;
    let rows = ran.rows;
    println!(
        "priority: done in {}; {} of {} runs ok; wrote {}/{{results.csv,summary.md,priority.png,priority.svg}}",
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
                Some(c) => format!("{s} {:.2}", c.ratio.median),
                None => format!("{s} n/a"),
            })
            .collect();
        println!("busy/idle at {case}: {}", parts.join(", "));
    }
    Ok(())
}

fn notes(cases: &[Case], runs: u32) -> Vec<String> {
    let lone = cases.iter().filter_map(|c| c.lone.map(|n| (c.name.as_str(), n))).map(|(name, n)| {
        format!(
            "`{name}`: the busy connection carries one GET of the {LONE_BYTES}-byte `{}` with no priority \
             signal (the default urgency, 3) instead of the images, and the stylesheet is requested once {n} \
             bytes of it have arrived; \"all images done\" is then the download's end.",
            LONE_PATH.trim_start_matches('/')
        )
    });
    let mut v = vec![
        format!(
            "Method: Sluice's HTTP/2 client engine (sluice-client's `H2Conn`, rustls): on one connection \
             {IMAGES} GETs of {IMAGE_BYTES}-byte images, each with `priority: u=5, i` and RFC 7540 priority fields \
             (weight 110, non-exclusive, dependency 0); after {} bytes of image data a GET of the {CSS_BYTES}-byte \
             `style.css` with `priority: u=0` and weight 256, exclusive, dependency 0. **busy** = CSS request sent → \
             its END_STREAM; **idle** = the same request alone on a fresh connection after the TLS handshake and \
             the SETTINGS exchange; ratio = busy/idle per run (ideal 1; the bar for Sluice ≤ {BAR}). \
             Flow control never limits (16 MiB stream windows, 1 GiB connection window, credit handed back \
             once half a window is used). \
             The idle request starts from a fresh connection's initial congestion window while the busy one \
             rides a grown window, so a ratio below 1 is possible when the link is fast; the images' data \
             already in flight or queued in the network when the CSS is requested is what no server can recall.",
            h2client::TRIGGER_BYTES
        ),
        statics::links_note(cases, runs),
        format!(
            "Servers serve the docroot as static files over TLS: `sluice` (`[[site]] root`; it sets \
             TCP_NOTSENT_LOWAT 16 KiB and BBR on its own sockets), nginx (`root`), h2o (`file.dir`), Caddy \
             (`file_server`). The `-tuned` variants are the same configurations run in a second phase with {} \
             set in the server namespace (restored afterwards); `net.core.default_qdisc = fq` has no \
             counterpart on the lab's TUN link.",
            statics::tuning_note()
        ),
    ];
    v.extend(lone);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::case::link_spec;
    use crate::model::Queue;

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
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].lone, c[1].lone), (None, None));
        assert_eq!(c[2].lone, Some(LONE_TRIGGER));
        assert_eq!(c[2].link(), c[1].link(), "the lone case runs on the page case's link");
        // 10 MB at 50 Mbit/s is 1.6 s.
        assert!((seconds(&c[2]) - 2.316).abs() < 0.01, "{}", seconds(&c[2]));
        assert_eq!(c[0].link().down.queue, Queue::Bytes(1_000_000));
        assert_eq!(c[0].link().up.delay, Duration::from_millis(20));
        assert_eq!(c[1].link(), link_spec(50.0, 20.0));
        assert_eq!(cases(true), c[..1]);
        // 10 MB at 5 Mbit/s is 16 s.
        assert!((seconds(&c[0]) - 17.06).abs() < 0.01, "{}", seconds(&c[0]));
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
        assert_eq!(fs::metadata(root.join("big.bin")).unwrap().len(), LONE_BYTES);
        assert_ne!(fs::read(root.join("img0.jpg")).unwrap(), fs::read(root.join("img1.jpg")).unwrap());
    }
}
