//! End to end: `sluice-lab run priority --quick --servers sluice` (5 Mbit/s × 40 ms with a 1 MB
//! queue, one run: ten 1 MB images and a 50 KB stylesheet over HTTP/2, busy vs idle).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probe) and the Sluice
//! binary next to sluice-lab (`cargo build --release -p sluice` before `cargo test --release`);
//! without any of them it prints a SKIP note and passes. Bounded to two minutes: the run gets
//! `--max-minutes 2` and is interrupted, then killed, if it outlives that.

mod support;

use std::time::Duration;

/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn quick_priority_run_against_sluice() {
    let Some(sluice) = support::ready("experiments_priority", &["curl"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let status = support::run_lab(
        &["priority", "--quick", "--servers", "sluice", "--max-minutes", "2"],
        &sluice,
        out.path(),
        LIMIT,
    );
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run priority --quick failed ({status}); results.csv:\n{csv}");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let (server, busy, idle, ok) = (col("server"), col("css_busy_ms"), col("css_idle_ms"), col("ok"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let good: Vec<&Vec<&str>> =
        rows.iter().filter(|r| r.get(server) == Some(&"sluice") && r.get(ok) == Some(&"true")).collect();
    assert!(!good.is_empty(), "no successful sluice run in results.csv:\n{csv}");
    for r in good {
        let b: f64 = r[busy].parse().expect("css_busy_ms is a number");
        let i: f64 = r[idle].parse().expect("css_idle_ms is a number");
        assert!(b > 0.0 && i > 0.0, "css_busy_ms {b}, css_idle_ms {i}");
        eprintln!("sluice: CSS busy {b} ms, idle {i} ms, ratio {:.2}", b / i);
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |"), "{summary}");
    let png = std::fs::read(out.path().join("priority.png")).expect("priority.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
