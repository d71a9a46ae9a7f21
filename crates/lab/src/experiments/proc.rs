//! Processes the experiments start: servers in their own process group, stopped (TERM, then
//! KILL to the whole group) when their guard drops, even on error or Ctrl-C; bounded waits;
//! an interrupt flag set by SIGINT/SIGTERM that every loop checks.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Set by the first SIGINT/SIGTERM; loops check it and unwind so guards clean up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// How often bounded waits poll a child or the interrupt flag.
const POLL: Duration = Duration::from_millis(20);
/// How long a stopped server gets after SIGTERM before its group gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

extern "C" fn on_signal(_sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // Second signal: the user insists. Only async-signal-safe calls here.
        const MSG: &[u8] = b"\nsluice-lab: interrupted twice, exiting without cleanup\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG outlives the call.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(130);
        }
    }
}

/// Installs the SIGINT/SIGTERM handler: the first signal sets the interrupt flag (the run
/// stops at the next check and cleans up), a second one exits at once.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic and calls
        // async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether a SIGINT/SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `Err("interrupted")` once a signal arrived.
pub fn check_interrupt() -> Result<(), String> {
    if interrupted() {
        Err("interrupted (SIGINT/SIGTERM): stopped the servers and tore the lab down".into())
    } else {
        Ok(())
    }
}

/// Sleeps `d`, waking early (with an error) on interrupt.
pub fn sleep(d: Duration) -> Result<(), String> {
    let end = Instant::now() + d;
    loop {
        check_interrupt()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        thread::sleep(POLL.min(end - now));
    }
}

/// Sends `sig` to the process group `pgid` (a negative pid addresses the group).
fn kill_group(pgid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pgid) {
        if p > 0 {
            // SAFETY: plain syscall; a stale group id only yields ESRCH.
            unsafe { libc::kill(-p, sig) };
        }
    }
}

/// A long-running process (a server) in its own process group, with its output in a log file.
/// Dropping the guard stops the whole group.
pub struct Service {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Service {
    /// Spawns `cmd` in a new process group, stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self, String> {
        let out = File::create(log).map_err(|e| format!("{name}: creating {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("{name}: {e}"))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        let child = cmd.spawn().map_err(|e| format!("{name}: could not start {:?}: {e}", cmd.get_program()))?;
        Ok(Self { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id (the leader of its process group), unless stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `None` while running, else how it ended.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => None,
            Some(Ok(Some(st))) => Some(describe_status(st)),
            Some(Err(e)) => Some(format!("unknown ({e})")),
            None => Some("stopped".into()),
        }
    }

    /// The last `lines` lines of the service's log (for error messages).
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    /// Stops the process group: SIGTERM, up to [`TERM_GRACE`], then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pgid = child.id();
        if matches!(child.try_wait(), Ok(None)) {
            kill_group(pgid, libc::SIGTERM);
            let end = Instant::now() + TERM_GRACE;
            while Instant::now() < end && matches!(child.try_wait(), Ok(None)) {
                thread::sleep(POLL);
            }
        }
        // Workers (nginx) may outlive their master: always sweep the group.
        kill_group(pgid, libc::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

/// "exit 1" / "signal 9".
fn describe_status(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

/// The last `lines` lines of a file, or a note that it could not be read.
pub fn tail_file(path: &Path, lines: usize) -> String {
    let mut s = String::new();
    match File::open(path).and_then(|mut f| f.read_to_string(&mut s)) {
        Ok(_) if s.trim().is_empty() => format!("({} is empty)", path.display()),
        Ok(_) => {
            let all: Vec<&str> = s.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// What a bounded command produced.
#[derive(Debug)]
pub struct Finished {
    /// Exit status, `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
}

impl Finished {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// "exit 7" / "killed at the time limit".
    pub fn describe(&self) -> String {
        self.status.map_or_else(|| "killed at the time limit".into(), describe_status)
    }
}

/// Runs `cmd` to completion, at most `limit`; stdout/stderr go through files in `scratch` (no
/// pipe can fill up while we poll). On interrupt the command is killed and an error returned.
pub fn run_bounded(mut cmd: Command, limit: Duration, scratch: &Path) -> Result<Finished, String> {
    let out_path = scratch.join("cmd.stdout");
    let err_path = scratch.join("cmd.stderr");
    let out = File::create(&out_path).map_err(|e| format!("creating {}: {e}", out_path.display()))?;
    let err = File::create(&err_path).map_err(|e| format!("creating {}: {e}", err_path.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|e| format!("could not run {program}: {e}"))?;
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("waiting for {program}: {e}"));
            }
        }
        if interrupted() || Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            check_interrupt()?;
            break None;
        }
        thread::sleep(POLL);
    };
    let read = |p: &Path| fs_read_lossy(p);
    Ok(Finished { status, stdout: read(&out_path), stderr: read(&err_path) })
}

fn fs_read_lossy(p: &Path) -> String {
    std::fs::read(p).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_command_captures_output() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let f = run_bounded(cmd, Duration::from_secs(10), dir.path()).unwrap();
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "err\n");
        assert!(!f.success());
        assert_eq!(f.describe(), "exit 3");
    }

    #[test]
    fn bounded_command_is_killed_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let t = Instant::now();
        let f = run_bounded(cmd, Duration::from_millis(200), dir.path()).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(f.status.is_none());
        assert_eq!(f.describe(), "killed at the time limit");
    }

    #[test]
    fn service_stops_its_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let mut cmd = Command::new("sh");
        // A child that ignores TERM and a grandchild: both must be gone after stop().
        cmd.args(["-c", &format!("trap '' TERM; sleep 60 & echo $! > {}; wait", pidfile.display())]);
        let mut svc = Service::spawn("test", cmd, &dir.path().join("log")).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while !pidfile.exists() && Instant::now() < end {
            thread::sleep(POLL);
        }
        assert!(svc.exited().is_none());
        let t = Instant::now();
        svc.stop();
        assert!(t.elapsed() < Duration::from_secs(10));
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The grandchild may linger as a zombie of init for a moment; give it a little time.
        let end = Instant::now() + Duration::from_secs(3);
        // SAFETY: signal 0 only checks existence.
        while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < end {
            thread::sleep(POLL);
        }
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.contains(") Z ")).unwrap_or(false);
        assert!(!alive, "grandchild {pid} survived");
        assert_eq!(svc.exited().as_deref(), Some("stopped"));
    }

    #[test]
    fn tail_of_missing_file_is_a_note() {
        assert!(tail_file(Path::new("/nonexistent/x"), 3).contains("/nonexistent/x"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "").unwrap();
        assert!(tail_file(&p, 3).contains("is empty"));
        std::fs::write(&p, "a\nb\nc\nd\n").unwrap();
        assert_eq!(tail_file(&p, 2), "c\nd");
    }
}
