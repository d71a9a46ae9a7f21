//! What the end-to-end experiment tests share: finding the binaries, the SKIP rule, and running
//! `sluice-lab run …` bounded in time.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sluice_lab::experiments::servers::{find_program, is_executable};
use sluice_lab::net;

const BIN: &str = env!("CARGO_BIN_EXE_sluice-lab");

/// The Sluice binary: `$SLUICE_BIN`, else `sluice` next to sluice-lab.
fn sluice_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return Some(PathBuf::from(p)).filter(|p| is_executable(p));
    }
    Path::new(BIN).parent().map(|d| d.join("sluice")).filter(|p| is_executable(p))
}

/// The Sluice binary when the lab can run here and `programs` are installed; otherwise prints
/// `SKIP <test>: <why>` and returns `None`.
pub(crate) fn ready(test: &str, programs: &[&str]) -> Option<PathBuf> {
    let why = if let Err(e) = net::available() {
        format!("the lab is not available: {e}")
    } else if let Some(p) = programs.iter().find(|p| find_program(p).is_none()) {
        format!("`{p}` is not installed (scripts/setup.sh)")
    } else {
        match sluice_binary() {
            Some(s) => return Some(s),
            None => "no sluice binary next to sluice-lab (cargo build --release -p sluice) and no $SLUICE_BIN".into(),
        }
    };
    eprintln!("SKIP {test}: {why}");
    None
}

/// Runs `sluice-lab run <args> --sluice <sluice> --out <out>`; past `limit` it is interrupted
/// (so it stops its servers and removes the namespaces), then killed, and the test fails.
pub(crate) fn run_lab(args: &[&str], sluice: &Path, out: &Path, limit: Duration) -> ExitStatus {
    let mut child = Command::new(BIN)
        .arg("run")
        .args(args)
        .arg("--sluice")
        .arg(sluice)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("start sluice-lab");
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait for sluice-lab") {
            return st;
        }
        if start.elapsed() > limit {
            // SAFETY: plain syscall on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            std::thread::sleep(Duration::from_secs(10));
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice-lab run {} took longer than {} s", args.join(" "), limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
