//! End to end: `sluice-lab run proxymem --quick --servers sluice` (100 Mbit/s × 20 ms, 20 HTTP/2
//! clients each downloading 20 MB through Sluice as a reverse proxy of a static origin, capped at
//! 10 s, Sluice's memory read every 250 ms).
//!
//! Needs root (the lab's namespaces and TUN devices), curl and the Sluice binary next to
//! sluice-lab; without any of them it prints a SKIP note and passes. Bounded to two minutes.

mod support;

use std::time::Duration;

/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn quick_proxymem_run_through_sluice() {
    let Some(sluice) = support::ready("experiments_proxymem", &["curl"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let args = ["proxymem", "--quick", "--servers", "sluice", "--max-minutes", "2"];
    let status = support::run_lab(&args, &sluice, out.path(), LIMIT);
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run proxymem --quick failed ({status}); results.csv:\n{csv}");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let row = rows.iter().find(|r| r[col("server")] == "sluice" && r[col("ok")] == "true");
    let row = row.unwrap_or_else(|| panic!("no successful sluice measurement in results.csv:\n{csv}"));
    let num = |name: &str| -> f64 { row[col(name)].parse().unwrap_or_else(|_| panic!("{name} is a number")) };
    let (idle, peak, delivered) = (num("idle_rss_mb"), num("peak_rss_mb"), num("delivered_mb"));
    assert!(idle > 0.0 && peak >= idle, "idle {idle} MB, peak {peak} MB");
    // 100 Mbit/s for about 10 s: far more than nothing, at most what was asked.
    assert!(delivered > 10.0 && delivered <= 400.0, "delivered {delivered} MB");
    eprintln!("sluice: idle {idle} MB, peak {peak} MB, delivered {delivered} MB");
    let samples = std::fs::read_to_string(out.path().join("samples.csv")).expect("samples.csv");
    assert!(samples.lines().count() > 20, "a reading every 250 ms for about 10 s:\n{samples}");
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |"), "{summary}");
}
