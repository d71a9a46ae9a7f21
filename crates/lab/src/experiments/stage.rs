//! The stage of an experiment: the lab (two namespaces joined by the emulated link), the
//! servers started inside the server namespace, and the client commands run inside the client
//! namespace. Dropping the stage stops every server (process groups) and then tears the lab
//! down, on success, error and Ctrl-C alike.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::proc::{self, run_bounded, Service};
use super::servers::{self, Launch, ServerKind, Setup};
use crate::model::LinkSpec;
use crate::net::{self, Lab, Stats, CLIENT_NS, SERVER_ADDR, SERVER_NS};

/// How long a server may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between readiness probes.
const READY_POLL: Duration = Duration::from_millis(250);

/// The lab plus the services running in it.
pub struct Stage {
    /// Started services, in start order (stopped in reverse).
    services: Vec<Service>,
    lab: Option<Lab>,
    /// Scratch directory for client command output.
    scratch: PathBuf,
}

impl Stage {
    /// Starts the lab with `spec`.
    pub fn start(spec: &LinkSpec, scratch: &Path) -> Result<Self, String> {
        net::available().map_err(|e| format!("the lab is not available: {e}"))?;
        let lab = Lab::start(spec)?;
        Ok(Self { services: Vec::new(), lab: Some(lab), scratch: scratch.to_path_buf() })
    }

    /// Changes the link parameters.
    pub fn set_link(&self, spec: &LinkSpec) {
        if let Some(lab) = &self.lab {
            lab.set_link(spec);
        }
    }

    /// Forwarder counters since the lab started.
    pub fn stats(&self) -> Stats {
        self.lab.as_ref().map(Lab::stats).unwrap_or_default()
    }

    /// Writes `launch`'s configuration into `setup.dir` and starts `program` with it inside
    /// the server namespace.
    fn spawn(&mut self, name: &str, program: &Path, setup: &Setup, launch: &Launch) -> Result<usize, String> {
        fs::create_dir_all(&setup.dir).map_err(|e| format!("{name}: creating {}: {e}", setup.dir.display()))?;
        // nginx and h2o workers run as nobody: the directory must be traversable.
        let _ = fs::set_permissions(&setup.dir, fs::Permissions::from_mode(0o755));
        let conf = setup.dir.join(&launch.config.0);
        fs::write(&conf, &launch.config.1).map_err(|e| format!("{name}: writing {}: {e}", conf.display()))?;
        let program = program.to_str().ok_or_else(|| format!("{name}: program path is not UTF-8"))?;
        let mut cmd = net::ns_command(SERVER_NS, program);
        cmd.args(&launch.args);
        for (k, v) in &launch.env {
            cmd.env(k, v);
        }
        let svc = Service::spawn(name, cmd, &setup.dir.join("server.log"))?;
        self.services.push(svc);
        Ok(self.services.len() - 1)
    }

    /// Starts the upstream sink (cleartext Sluice on 127.0.0.1 in the server namespace) and
    /// waits until it answers an upload.
    pub fn start_sink(&mut self, sluice: &Path, work: &Path, cert: &Path, key: &Path) -> Result<(), String> {
        let (setup, launch) = servers::sink_launch(work, cert, key)?;
        let i = self.spawn("sink", sluice, &setup, &launch)?;
        let url = format!("http://{}/__up", setup.listen);
        self.wait_ready(i, SERVER_NS, &url)
    }

    /// Starts `kind` (binary `program`) and waits until it answers an upload from the client
    /// namespace. On failure the server is stopped and the error carries its log's tail.
    pub fn start_server(&mut self, kind: ServerKind, program: &Path, setup: &Setup) -> Result<(), String> {
        let launch = servers::launch(kind, setup)?;
        let i = self.spawn(kind.name(), program, setup, &launch)?;
        let url = upload_url(kind);
        match self.wait_ready(i, CLIENT_NS, &url) {
            Ok(()) => Ok(()),
            Err(e) => {
                let mut svc = self.services.remove(i);
                svc.stop();
                Err(e)
            }
        }
    }

    /// Starts `kind` with `launch` (a static-file configuration) and waits until `url` answers a
    /// GET with 200 from the client namespace. On failure the server is stopped and the error
    /// carries its log's tail.
    pub fn start_static(
        &mut self,
        kind: ServerKind,
        program: &Path,
        setup: &Setup,
        launch: &Launch,
        url: &str,
    ) -> Result<(), String> {
        self.start_checked(kind.name(), program, setup, launch, CLIENT_NS, url)
    }

    /// Starts the service `name` (`program` with `launch`, its configuration written into
    /// `setup.dir`) inside the server namespace and waits until `url` answers a GET with 200 from
    /// the namespace `ns`. On failure the service is stopped and the error carries its log's tail.
    pub fn start_checked(
        &mut self,
        name: &str,
        program: &Path,
        setup: &Setup,
        launch: &Launch,
        ns: &str,
        url: &str,
    ) -> Result<(), String> {
        let i = self.spawn(name, program, setup, launch)?;
        let end = Instant::now() + READY_TIMEOUT;
        let result = loop {
            proc::check_interrupt()?;
            if let Some(how) = self.services[i].exited() {
                break Err(format!(
                    "{name} exited at start-up ({how}); its log ends with:\n{}",
                    self.services[i].log_tail(15)
                ));
            }
            let mut cmd = net::ns_command(ns, "curl");
            cmd.args(["-k", "-sS", "--noproxy", "*", "--max-time", "3", "-o", "/dev/null", "-w", "%{http_code}", url]);
            let f = run_bounded(cmd, Duration::from_secs(5), &self.scratch)?;
            if f.success() && f.stdout.trim() == "200" {
                break Ok(());
            }
            if Instant::now() >= end {
                break Err(format!(
                    "{name} did not answer GET {url} within {} s (last: curl {} {} {}); its log ends with:\n{}",
                    READY_TIMEOUT.as_secs(),
                    f.describe(),
                    f.stdout.trim(),
                    f.stderr.trim(),
                    self.services[i].log_tail(15)
                ));
            }
            proc::sleep(READY_POLL)?;
        };
        if result.is_err() {
            let mut svc = self.services.remove(i);
            svc.stop();
        }
        result
    }

    /// Stops the service `name` if it runs (for experiments run in phases).
    pub fn stop_service(&mut self, name: &str) {
        if let Some(i) = self.services.iter().position(|s| s.name() == name) {
            let mut svc = self.services.remove(i);
            svc.stop();
        }
    }

    /// The process id of service `name` (the program itself: `ip netns exec` execs it), while it
    /// runs.
    pub fn service_pid(&mut self, name: &str) -> Option<u32> {
        let s = self.services.iter_mut().find(|s| s.name() == name)?;
        if s.exited().is_some() {
            return None;
        }
        s.pid()
    }

    /// The last `lines` lines of service `name`'s log.
    pub fn service_log_tail(&self, name: &str, lines: usize) -> String {
        self.services.iter().find(|s| s.name() == name).map_or_else(String::new, |s| s.log_tail(lines))
    }

    /// Whether service `name` is still running (`Err` with how it ended, and its log).
    pub fn check_alive(&mut self, name: &str) -> Result<(), String> {
        match self.services.iter_mut().find(|s| s.name() == name) {
            None => Err(format!("{name} is not running")),
            Some(s) => match s.exited() {
                None => Ok(()),
                Some(how) => Err(format!("{name} ended ({how}); its log ends with:\n{}", s.log_tail(10))),
            },
        }
    }

    /// Polls with a tiny upload until the service answers 200 with the sink's JSON, it exits,
    /// or [`READY_TIMEOUT`] passes.
    fn wait_ready(&mut self, i: usize, ns: &str, url: &str) -> Result<(), String> {
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            proc::check_interrupt()?;
            let name = self.services[i].name().to_string();
            if let Some(how) = self.services[i].exited() {
                return Err(format!(
                    "{name} exited at start-up ({how}); its log ends with:\n{}",
                    self.services[i].log_tail(15)
                ));
            }
            let mut cmd = net::ns_command(ns, "curl");
            cmd.args(["-k", "-sS", "--noproxy", "*", "--max-time", "3", "-H", "Expect:", "--data-binary", "ready?"]);
            cmd.args(["-w", "\n%{http_code}", url]);
            let f = run_bounded(cmd, Duration::from_secs(5), &self.scratch)?;
            if f.success() && probe_ok(&f.stdout) {
                return Ok(());
            }
            if Instant::now() >= end {
                let last = format!("curl {}: {} {}", f.describe(), f.stdout.trim(), f.stderr.trim());
                return Err(format!(
                    "{name} did not answer POST {url} within {} s (last: {}); its log ends with:\n{}",
                    READY_TIMEOUT.as_secs(),
                    last.trim(),
                    self.services[i].log_tail(15)
                ));
            }
            proc::sleep(READY_POLL)?;
        }
    }

    /// Runs a client command inside the client namespace, bounded by `limit`.
    pub fn client(&self, program: &str, args: &[String], limit: Duration) -> Result<proc::Finished, String> {
        let mut cmd: Command = net::ns_command(CLIENT_NS, program);
        cmd.args(args);
        run_bounded(cmd, limit, &self.scratch)
    }

    /// Stops every service, then the lab; returns the forwarder's final counters.
    pub fn stop(&mut self) -> Option<Stats> {
        while let Some(mut s) = self.services.pop() {
            s.stop();
        }
        self.lab.take().map(Lab::stop)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The upload URL of `kind` (on the server address, its own port).
pub fn upload_url(kind: ServerKind) -> String {
    format!("https://{}:{}{}", SERVER_ADDR, kind.port(), kind.upload_path())
}

/// Whether a readiness probe's output (`body\nstatus`) is a 200 with the sink's JSON.
fn probe_ok(out: &str) -> bool {
    let Some((body, code)) = out.trim_end().rsplit_once('\n') else { return false };
    code.trim() == "200" && serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| v.get("bytes").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_parsing() {
        assert!(probe_ok("{\"bytes\":6,\"seconds\":0.0,\"mbps\":0}\n200"));
        assert!(!probe_ok("{\"bytes\":6}\n502"));
        assert!(!probe_ok("<html>bad gateway</html>\n200"));
        assert!(!probe_ok(""));
    }

    #[test]
    fn urls() {
        assert_eq!(upload_url(ServerKind::Sluice), format!("https://{SERVER_ADDR}:8443/__up"));
        assert_eq!(upload_url(ServerKind::Nginx512), format!("https://{SERVER_ADDR}:8445/up"));
    }
}
