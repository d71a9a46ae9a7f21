//! Network namespaces: `ip` for setup, `setns(2)` on a thread for in-process work, and a lock
//! file so that only one lab uses the fixed namespace names at a time.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `ip ARGS...`; the error carries the command line and what `ip` said.
pub(crate) fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`ip {}` failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Runs `ip -n NS ARGS...` (the command inside namespace `ns`).
pub(crate) fn ip_in(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    ip(&all)
}

fn netns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

/// Whether the named namespace exists (`ip netns add` created it).
pub(crate) fn exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Deletes the named namespace if it exists.
pub(crate) fn delete(name: &str) -> Result<(), String> {
    if exists(name) {
        ip(&["netns", "del", name])?;
    }
    Ok(())
}

/// PIDs of processes still inside the namespace (for a warning at cleanup).
pub(crate) fn pids(name: &str) -> Vec<String> {
    ip(&["netns", "pids", name]).map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default()
}

/// Runs `f` on a new thread that has joined network namespace `ns` (`setns(2)`), and returns
/// its result. Sockets created there belong to that namespace and keep working from any thread.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let file = File::open(netns_path(ns)).map_err(|e| format!("cannot open namespace {ns}: {e}"))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: `file` is an open namespace file; setns only changes this (new, scoped)
            // thread's network namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(format!("setns({ns}): {}", io::Error::last_os_error()));
            }
            Ok(f())
        })
        .join()
        .map_err(|_| format!("thread inside namespace {ns} panicked"))?
    })
}

/// Writes a sysctl (`net.ipv4.tcp_rmem` style) inside namespace `ns`.
pub(crate) fn sysctl_in(ns: &str, key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    in_netns(ns, || -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| format!("{key}: {e}"))?;
        f.write_all(value.as_bytes()).map_err(|e| format!("{key} = {value}: {e}"))
    })?
}

/// Reads a sysctl (`net.ipv4.tcp_rmem` style) inside namespace `ns`.
pub fn sysctl_get_in(ns: &str, key: &str) -> Result<String, String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    in_netns(ns, || std::fs::read_to_string(&path).map(|s| s.trim().to_string()).map_err(|e| format!("{key}: {e}")))?
}

/// An exclusive lock on the lab (the namespace names are fixed): held as long as this value.
#[derive(Debug)]
pub(crate) struct LabLock {
    _file: File,
}

impl LabLock {
    const PATH: &'static str = "/run/sluice-lab.lock";

    /// Takes the lock, waiting up to `wait` for another lab (in this or another process) to end.
    pub(crate) fn acquire(wait: Duration) -> Result<Self, String> {
        let path = if Path::new("/run").is_dir() { Self::PATH } else { "/tmp/sluice-lab.lock" };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot open lock file {path}: {e}"))?;
        let deadline = Instant::now() + wait;
        let mut told = false;
        loop {
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(format!("cannot lock {path}: {e}"));
            }
            let holder = std::fs::read_to_string(path).unwrap_or_default();
            let holder = holder.trim();
            if Instant::now() >= deadline {
                return Err(format!(
                    "another lab is running (lock {path} held by pid {holder}); the namespace names are fixed, \
                     so only one lab at a time"
                ));
            }
            if !told {
                eprintln!("sluice-lab: waiting for another lab (pid {holder}) to end");
                told = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Best effort: who holds the lock, for the message above.
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(Self { _file: file })
    }
}

/// Whether the kernel has the netem qdisc: tried once per process in a throwaway namespace.
pub fn kernel_netem_available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let name = format!("sluice-lab-probe-{}", std::process::id());
        if ip(&["netns", "add", &name]).is_err() {
            return false;
        }
        let ok = Command::new("tc")
            .args(["-n", &name, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let _ = delete(&name);
        ok
    })
}
