//! End to end: `sluice-lab run earlyhints --quick --servers sluice,sluice-nolearn` (20 Mbit/s ×
//! 40 ms, both origin variants, one warm-up and one measured load per server: headless Chromium
//! through Sluice as a reverse proxy of a Node origin that thinks 300 ms).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probes), Chromium and
//! Node.js (`scripts/setup.sh` installs both) and the Sluice binary next to sluice-lab; without any
//! of them it prints a SKIP note and passes. Bounded to three minutes.

mod support;

use std::time::Duration;

/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn quick_earlyhints_run_through_sluice_with_and_without_learning() {
    let Some(sluice) = support::ready("experiments_earlyhints", &["curl", "chromium", "node"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let args = ["earlyhints", "--quick", "--servers", "sluice,sluice-nolearn", "--max-minutes", "3"];
    let status = support::run_lab(&args, &sluice, out.path(), LIMIT);
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run earlyhints --quick failed ({status}); results.csv:\n{csv}");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let (variant, server, run, ok) = (col("variant"), col("server"), col("run"), col("ok"));
    let (fcp, lcp, css) = (col("fcp_ms"), col("lcp_ms"), col("css_initiator"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let measured = |v: &str, s: &str| -> Vec<&Vec<&str>> {
        rows.iter().filter(|r| r[variant] == v && r[server] == s && r[run] != "0" && r[ok] == "true").collect()
    };
    // (variant, server, whether the stylesheet must have come by the 103)
    for (v, s, early) in [
        // Learned from the warm-up's Link fields: Sluice sends them itself.
        ("links", "sluice", true),
        // Nothing learned, and the origin sends no 103.
        ("links", "sluice-nolearn", false),
        // The origin's own 103, forwarded.
        ("origin103", "sluice-nolearn", true),
        ("origin103", "sluice", true),
    ] {
        let good = measured(v, s);
        assert!(!good.is_empty(), "no successful measured {v} load through {s} in results.csv:\n{csv}");
        for r in good {
            let (f, l): (f64, f64) = (r[fcp].parse().expect("fcp_ms"), r[lcp].parse().expect("lcp_ms"));
            assert!(f > 0.0 && l >= f, "{v} {s}: FCP {f} ms, LCP {l} ms");
            assert_eq!(r[css] == "early-hints", early, "{v} {s}: the stylesheet's initiatorType is {}\n{csv}", r[css]);
            eprintln!("{v} {s}: FCP {f} ms, LCP {l} ms, stylesheet by {}", r[css]);
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |") && summary.contains("| sluice-nolearn |"), "{summary}");
    assert!(summary.contains("hints=learned"), "Sluice's access log marks its learned 103s: {summary}");
}
