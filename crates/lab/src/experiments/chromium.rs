//! Headless Chromium inside the client namespace: one page load in a fresh profile, its DOM
//! once the load event fired (the `pageload` and `earlyhints` experiments), confined to a CPU of
//! its own where there is one.

use std::fs;
use std::path::Path;
use std::time::Duration;

use super::proc;
use super::servers;
use crate::net::{self, CLIENT_NS};

/// Bound on one page load (Chromium start-up included).
const LOAD_LIMIT: Duration = Duration::from_secs(120);

/// The CPU Chromium is confined to: the last one, when the machine has two or more and
/// `taskset` is there. Client, server and emulated link share this machine; a browser decoding
/// twenty images would otherwise take CPU time from the server and the link's forwarder that
/// separate machines would not (traced: requests waited up to 21 ms between arriving at the
/// server's interface and being read, and image requests were read 5–13 ms apart). Every server
/// meets the same confinement.
pub(crate) fn client_cpu() -> Option<usize> {
    static CPU: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        (n >= 2 && servers::find_program("taskset").is_some()).then(|| n - 1)
    })
}

/// Loads `url` once in a fresh headless Chromium (a new profile under `scratch`, removed after)
/// inside the client namespace, confined to [`client_cpu`] where there is one, with `flags` (the
/// certificate flags) after the common ones; the DOM once the page's load event fired.
pub(crate) fn dump_dom(chromium: &Path, url: &str, scratch: &Path, flags: &[String]) -> Result<String, String> {
    let profile = scratch.join("profile");
    let _ = fs::remove_dir_all(&profile);
    fs::create_dir_all(&profile).map_err(|e| format!("creating {}: {e}", profile.display()))?;
    let program = chromium.to_str().ok_or("chromium path is not UTF-8")?;
    let mut cmd = match client_cpu() {
        Some(cpu) => {
            let mut c = net::ns_command(CLIENT_NS, "taskset");
            c.args(["-c", &cpu.to_string(), program]);
            c
        }
        None => net::ns_command(CLIENT_NS, program),
    };
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--mute-audio",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display()));
    cmd.args(flags);
    cmd.env("HOME", &profile).env("XDG_CONFIG_HOME", &profile).env("XDG_CACHE_HOME", &profile);
    cmd.args(["--dump-dom", url]);
    let f = proc::run_bounded(cmd, LOAD_LIMIT, scratch)?;
    let _ = fs::remove_dir_all(&profile);
    if !f.success() {
        let last = f.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        return Err(format!("chromium: {} ({last})", f.describe()));
    }
    Ok(f.stdout)
}
