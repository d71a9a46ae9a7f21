//! End to end: `sluice-lab run download --quick --servers sluice,caddy` (100 Mbit/s × 13 ms, one
//! run: a 20 MB file over HTTP/2 and HTTP/3 from Sluice and Caddy with `sluice get`, and over
//! HTTP/2 with curl).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probe and a client), Caddy and the
//! Sluice binary next to sluice-lab (`cargo build --release -p sluice` before `cargo test
//! --release`); without any of them it prints a SKIP note and passes. Bounded to about three
//! minutes: the run gets `--max-minutes 3` and is interrupted, then killed, if it outlives that.

mod support;

use std::time::Duration;

use sluice_lab::experiments::report::parse_csv;

/// The whole test's bound (the run itself is told 3 minutes).
const LIMIT: Duration = Duration::from_secs(210);

#[test]
fn download_quick() {
    let Some(sluice) = support::ready("experiments_download", &["curl", "caddy"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let args = ["download", "--quick", "--servers", "sluice,caddy", "--max-minutes", "3"];
    let status = support::run_lab(&args, &sluice, out.path(), LIMIT);
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run download --quick failed ({status}); results.csv:\n{csv}");
    let rows = parse_csv(&csv).expect("results.csv parses");
    // Sluice must deliver both protocols, and HTTP/2 to curl; Caddy's rows must be there (its
    // HTTP/3 is the peer's business: a failure is recorded, not fatal).
    for protocol in ["h2", "h3", "h2-curl"] {
        let good: Vec<f64> =
            rows.iter().filter(|r| r.server == "sluice" && r.protocol == protocol && r.ok).map(|r| r.mbps).collect();
        assert!(good.iter().any(|m| *m > 0.0), "no successful sluice {protocol} download in results.csv:\n{csv}");
        // Beside each figure, the link's server → client direction during that download.
        for r in rows.iter().filter(|r| r.server == "sluice" && r.protocol == protocol && r.ok) {
            let link = r.link.unwrap_or_else(|| panic!("sluice {protocol} run {} has no link reading:\n{csv}", r.run));
            assert!(link.peak_packets >= link.p95_packets && link.p95_packets >= link.p50_packets, "{link:?}");
            assert!(link.queue_drops_per_100mb >= 0.0 && link.peak_ms >= 0.0, "{link:?}");
        }
        assert!(rows.iter().any(|r| r.server == "caddy" && r.protocol == protocol), "no caddy {protocol} row:\n{csv}");
        eprintln!("sluice {protocol}: {good:?} Mbit/s");
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| h3/h2 |") && summary.contains("| sluice |"), "{summary}");
    assert!(summary.contains("not measured here"), "{summary}");
    // With both servers' curl downloads done, Sluice's is compared with Caddy's.
    if rows.iter().any(|r| r.server == "caddy" && r.protocol == "h2-curl" && r.ok) {
        assert!(summary.contains("`sluice` with curl over HTTP/2: "), "{summary}");
    }
    assert!(summary.contains("| sluice | h3 |") && summary.contains("queue drops / 100 MB"), "{summary}");
    let png = std::fs::read(out.path().join("download.png")).expect("download.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
