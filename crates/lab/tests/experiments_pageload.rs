//! End to end: `sluice-lab run pageload --quick --servers sluice` (5 Mbit/s × 40 ms with a 1 MB
//! queue, one run: headless Chromium loads a page with a web font and 20 images, and the same
//! page without images).
//!
//! Needs root (the lab's namespaces and TUN devices), curl (the readiness probe), Chromium
//! (`scripts/setup.sh` installs the Debian package) and the Sluice binary next to sluice-lab;
//! without any of them it prints a SKIP note and passes. Bounded to three minutes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_lab::experiments::servers::{find_program, is_executable};
use sluice_lab::net;

const BIN: &str = env!("CARGO_BIN_EXE_sluice-lab");
/// The whole test's bound.
const LIMIT: Duration = Duration::from_secs(180);

fn sluice_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return Some(PathBuf::from(p)).filter(|p| is_executable(p));
    }
    Path::new(BIN).parent().map(|d| d.join("sluice")).filter(|p| is_executable(p))
}

fn skip(why: &str) {
    eprintln!("SKIP experiments_pageload: {why}");
}

#[test]
fn quick_pageload_run_against_sluice() {
    if let Err(e) = net::available() {
        return skip(&format!("the lab is not available: {e}"));
    }
    let Some(sluice) = sluice_binary() else {
        return skip("no sluice binary next to sluice-lab (cargo build --release -p sluice) and no $SLUICE_BIN");
    };
    if find_program("curl").is_none() {
        return skip("`curl` is not installed (scripts/setup.sh)");
    }
    if find_program("chromium").is_none() {
        return skip("`chromium` is not installed (scripts/setup.sh)");
    }
    let out = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(BIN)
        .args(["run", "pageload", "--quick", "--servers", "sluice", "--max-minutes", "3", "--sluice"])
        .arg(&sluice)
        .arg("--out")
        .arg(out.path())
        .stdin(Stdio::null())
        .spawn()
        .expect("start sluice-lab");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for sluice-lab") {
            break st;
        }
        if start.elapsed() > LIMIT {
            // SIGINT first, so it stops the servers and removes the namespaces.
            // SAFETY: plain syscall on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            std::thread::sleep(Duration::from_secs(10));
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice-lab run pageload --quick took longer than {} s", LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
