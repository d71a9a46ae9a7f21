//! End to end: `sluice-lab run pageload --quick --servers sluice` (5 Mbit/s × 40 ms with a 1 MB
//! queue, one run: headless Chromium loads a page with a web font and 20 images, and the same
//! page without images).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probe), Chromium
//! (`scripts/setup.sh` installs the Debian package) and the Sluice binary next to sluice-lab;
//! without any of them it prints a SKIP note and passes. Bounded to three minutes.

mod support;

use std::time::Duration;

/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn quick_pageload_run_against_sluice() {
    let Some(sluice) = support::ready("experiments_pageload", &["curl", "chromium"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let status = support::run_lab(
        &["pageload", "--quick", "--servers", "sluice", "--max-minutes", "3"],
        &sluice,
        out.path(),
        LIMIT,
    );
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run pageload --quick failed ({status}); results.csv:\n{csv}");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let (server, busy, idle, ok) = (col("server"), col("font_busy_ms"), col("font_idle_ms"), col("ok"));
    let protocol = col("protocol");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let good: Vec<&Vec<&str>> =
        rows.iter().filter(|r| r.get(server) == Some(&"sluice") && r.get(ok) == Some(&"true")).collect();
    assert!(!good.is_empty(), "no successful sluice run in results.csv:\n{csv}");
    for r in good {
        let b: f64 = r[busy].parse().expect("font_busy_ms is a number");
        let i: f64 = r[idle].parse().expect("font_idle_ms is a number");
        assert!(b > 0.0 && i > 0.0, "font_busy_ms {b}, font_idle_ms {i}");
        assert_eq!(r[protocol], "h2", "Chromium spoke HTTP/2");
        eprintln!("sluice: font busy {b} ms, idle {i} ms, ratio {:.2}", b / i);
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |"), "{summary}");
    let png = std::fs::read(out.path().join("pageload.png")).expect("pageload.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
