//! End to end: `sluice-lab run fairness --quick --servers sluice` (20 Mbit/s × 40 ms with a 1 MB
//! queue, one run: an HTTP/3 download from Sluice and a TCP CUBIC download from a second Sluice
//! start together; the link's forwarder measures each flow over a 5 s window).
//!
//! Checks that both flows moved data and that their ratio is a finite positive number; how the
//! link is shared is the experiment's finding, not a pass/fail criterion. Needs root (the lab's
//! namespaces and TUN devices), curl (the readiness probe) and the Sluice binary next to
//! sluice-lab; without any of them it prints a SKIP note and passes. Bounded to two minutes.

mod support;

use std::time::Duration;

/// The whole test's bound (the run itself is told 2 minutes).
const LIMIT: Duration = Duration::from_secs(130);

#[test]
fn fairness_quick() {
    let Some(sluice) = support::ready("experiments_fairness", &["curl"]) else { return };
    let out = tempfile::tempdir().expect("temp dir");
    let args = ["fairness", "--quick", "--servers", "sluice", "--max-minutes", "2"];
    let status = support::run_lab(&args, &sluice, out.path(), LIMIT);
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap_or_default();
    assert!(status.success(), "sluice-lab run fairness --quick failed ({status}); results.csv:\n{csv}");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let (server, h3, tcp, ratio, ok) = (col("server"), col("h3_mbps"), col("tcp_mbps"), col("ratio"), col("ok"));
    let peak = col("queue_peak_pkts");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let good: Vec<&Vec<&str>> =
        rows.iter().filter(|r| r.get(server) == Some(&"sluice") && r.get(ok) == Some(&"true")).collect();
    assert!(!good.is_empty(), "no successful sluice run in results.csv:\n{csv}");
    for r in good {
        let num = |k: usize| -> f64 { r[k].parse().unwrap_or_else(|_| panic!("{} is not a number: {r:?}", header[k])) };
        let (h3, tcp, ratio, peak) = (num(h3), num(tcp), num(ratio), num(peak));
        assert!(h3 > 0.0 && tcp > 0.0, "both flows must move data: h3 {h3} Mbit/s, tcp {tcp} Mbit/s");
        assert!(ratio.is_finite() && ratio > 0.0, "h3:tcp {ratio}");
        assert!(peak >= 0.0);
        eprintln!("sluice: h3 {h3} Mbit/s, tcp {tcp} Mbit/s, h3:tcp {ratio:.2}, queue peak {peak} packets");
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    assert!(summary.contains("| sluice |") && summary.contains("h3:tcp"), "{summary}");
}
