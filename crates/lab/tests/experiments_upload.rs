//! End to end: `sluice-lab run upload --quick --servers sluice,nginx` (the CI's "one upload
//! case" smoke run: 200 Mbit/s × 40 ms, one run, HTTP/1.1 and HTTP/2 against Sluice and nginx).
//!
//! Needs root (the lab's namespaces and TUN devices), curl, nginx and the Sluice binary next to
//! sluice-lab (`cargo build --release -p sluice` before `cargo test --release`); without any of
//! them it prints a SKIP note and passes. Bounded to about two minutes: the run gets
//! `--max-minutes 2` and is interrupted, then killed, if it outlives that.

mod support;

use std::time::Duration;

use sluice_lab::experiments::report::parse_csv;

/// The whole test's bound (the run itself is told 2 minutes).
const LIMIT: Duration = Duration::from_secs(150);

#[test]
fn quick_upload_run_against_sluice_and_nginx() {
    let Some(sluice) = support::ready("experiments_upload", &["curl", "nginx"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let args = ["upload", "--quick", "--servers", "sluice,nginx", "--max-minutes", "2"];
    let status = support::run_lab(&args, &sluice, out.path(), LIMIT);
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run upload --quick failed ({status}); results.csv:\n{csv}");
    let rows = parse_csv(&csv).expect("results.csv parses");
    for server in ["sluice", "nginx"] {
        for protocol in ["h1", "h2"] {
            let ok = rows.iter().filter(|r| r.server == server && r.protocol == protocol);
            let good: Vec<f64> = ok.filter(|r| r.ok && r.mbps > 0.0).map(|r| r.mbps).collect();
            assert!(!good.is_empty(), "no successful {server} {protocol} upload in results.csv:\n{csv}");
            eprintln!("{server} {protocol}: {good:?} Mbit/s");
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("h2/h1"), "{summary}");
    assert!(summary.contains("Expect: 100-continue"), "{summary}");
    let png = std::fs::read(out.path().join("upload.png")).expect("upload.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(out.path().join("upload.svg")).expect("upload.svg");
    assert!(svg.contains("<svg"));
}
