//! End to end: `sluice-lab run pageload --quick --servers sluice,sluice-h3` (5 Mbit/s × 40 ms
//! with a 1 MB queue, one run: headless Chromium loads a page with a web font and 20 images, and
//! the same page without images, from Sluice over HTTP/2 and over HTTP/3).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probe), Chromium
//! (`scripts/setup.sh` installs the Debian package) and the Sluice binary next to sluice-lab;
//! without any of them it prints a SKIP note and passes. Bounded to three minutes.

mod support;

use std::time::Duration;

/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn quick_pageload_run_against_sluice_over_h2_and_h3() {
    let Some(sluice) = support::ready("experiments_pageload", &["curl", "chromium"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let status = support::run_lab(
        &["pageload", "--quick", "--servers", "sluice,sluice-h3", "--max-minutes", "3"],
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
    let (protocol, peak) = (col("protocol"), col("queue_peak_pkts"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // Every resource of both pages must have come over the server's protocol, or the run fails.
    for (name, proto) in [("sluice", "h2"), ("sluice-h3", "h3")] {
        let good: Vec<&Vec<&str>> =
            rows.iter().filter(|r| r.get(server) == Some(&name) && r.get(ok) == Some(&"true")).collect();
        assert!(!good.is_empty(), "no successful {name} run in results.csv:\n{csv}");
        for r in good {
            let b: f64 = r[busy].parse().expect("font_busy_ms is a number");
            let i: f64 = r[idle].parse().expect("font_idle_ms is a number");
            assert!(b > 0.0 && i > 0.0, "{name}: font_busy_ms {b}, font_idle_ms {i}");
            assert_eq!(r[protocol], proto, "{name}: Chromium's protocol");
            let p: f64 = r[peak].parse().expect("queue_peak_pkts is a number (the busy load's link reading)");
            assert!(p >= 0.0);
            eprintln!("{name} ({proto}): font busy {b} ms, idle {i} ms, ratio {:.2}, queue peak {p} packets", b / i);
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |") && summary.contains("| sluice-h3 |"), "{summary}");
    assert!(summary.contains("| sluice-h3 | h3 |"), "the link table: {summary}");
    let png = std::fs::read(out.path().join("pageload.png")).expect("pageload.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
