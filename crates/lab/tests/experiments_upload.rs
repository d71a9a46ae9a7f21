//! End to end: `sluice-lab run upload --quick --servers sluice,nginx` (the CI's "one upload
//! case" smoke run: 200 Mbit/s × 40 ms, one run, HTTP/1.1 and HTTP/2 against Sluice and nginx).
//!
//! Needs root (the lab's namespaces and TUN devices), curl, nginx and the Sluice binary next to
//! sluice-lab (`cargo build --release -p sluice` before `cargo test --release`); without any of
//! them it prints a SKIP note and passes. Bounded to about two minutes: the run gets
//! `--max-minutes 2` and is interrupted, then killed, if it outlives that.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_lab::experiments::report::parse_csv;
use sluice_lab::experiments::servers::{find_program, is_executable};
use sluice_lab::net;

const BIN: &str = env!("CARGO_BIN_EXE_sluice-lab");
/// The whole test's bound (the run itself is told 2 minutes).
const LIMIT: Duration = Duration::from_secs(150);

fn sluice_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return Some(PathBuf::from(p)).filter(|p| is_executable(p));
    }
    Path::new(BIN).parent().map(|d| d.join("sluice")).filter(|p| is_executable(p))
}

fn skip(why: &str) {
    eprintln!("SKIP experiments_upload: {why}");
}

#[test]
fn quick_upload_run_against_sluice_and_nginx() {
    if let Err(e) = net::available() {
        return skip(&format!("the lab is not available: {e}"));
    }
    let Some(sluice) = sluice_binary() else {
        return skip("no sluice binary next to sluice-lab (cargo build --release -p sluice) and no $SLUICE_BIN");
    };
    for program in ["curl", "nginx"] {
        if find_program(program).is_none() {
            return skip(&format!("`{program}` is not installed (scripts/setup.sh)"));
        }
    }
    let out = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(BIN)
        .args(["run", "upload", "--quick", "--servers", "sluice,nginx", "--max-minutes", "2", "--sluice"])
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
            panic!("sluice-lab run upload --quick took longer than {} s", LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
