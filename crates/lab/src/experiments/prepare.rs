//! What every experiment does before it measures, in one place.
//!
//! [`prepare`]: the servers asked for resolved (binaries found; the others, and those the
//! experiment refuses, skipped with the reason), Sluice and the other programs the experiment
//! needs besides them found, the lab checked, `work/` created, the run's time bound set and
//! announced, the tools' versions read for the report, the self-signed certificate (and, for
//! HAProxy, certificate and key in one PEM), the site's files, and `results.csv` with its header.
//! Its errors come before any measurement, and the experiment returns them as they are.
//!
//! Then, inside the run (whose errors still leave a report of what was measured):
//! [`Prepared::stage`] starts the lab with the first case's link, and [`Prepared::start_each`]
//! starts the servers and waits until each serves, skipping one that does not with its reason.
//! [`Prepared::go_on`] is the check before each measurement (Ctrl-C, the time bound).
//!
//! What stays each experiment's own: which servers it knows, how long it expects to take, its
//! files, how it launches a server and checks that it serves, what it measures and reports.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::common::{default_bound, fmt_duration, one_line, write_private};
use super::plan::{resolve_servers, sluice_path, Active, Plan, Skipped};
use super::proc;
use super::servers::{self, ServerKind, Setup};
use super::stage::Stage;
use crate::model::LinkSpec;
use crate::net::{self, SERVER_ADDR};

/// What a run will do, for the line printed before it starts, and how long it should take.
pub struct Estimate {
    /// `3 case(s) × 2 server(s) × 5 run(s)`: the line reads `<experiment>: <what>: expected ≈ …`.
    pub what: String,
    /// The expected duration; the bound is 3 × this, at least 3 minutes more, unless
    /// `--max-minutes` says.
    pub expected: Duration,
}

/// The files the servers serve.
pub struct Site<'a> {
    /// Writes them into the directory given (`work/docroot`).
    pub write: &'a dyn Fn(&Path) -> Result<(), String>,
    /// Permission bits then added to `work/` and to the output directory, so that servers whose
    /// workers run as another user (nginx, h2o: nobody) reach the files: `0o711` (traverse), or
    /// `0o755`.
    pub reach: u32,
}

/// What an experiment asks of [`prepare`].
pub struct Want<'a> {
    /// The experiment's name, first on the line printed before it starts.
    pub name: &'static str,
    /// The servers to run (the experiment's reading of `--servers`), in first-run order.
    pub servers: Vec<ServerKind>,
    /// Those it already left out, and why.
    pub skipped: Vec<Skipped>,
    /// A server that can run but that this experiment refuses, and why (asked once the
    /// binaries are known, so a missing binary is the reason given first).
    pub refuse: &'a dyn Fn(ServerKind) -> Option<String>,
    /// The error when no server can run.
    pub none: &'static str,
    /// Why the experiment needs the Sluice binary besides the servers (its client, its origin,
    /// its competitor), if it does: the error's first words when there is none.
    pub sluice: Option<&'static str>,
    /// Other programs it needs: (name on `PATH`, the error when missing). Each one's
    /// `--version` joins the versions.
    pub tools: &'a [(&'static str, &'static str)],
    /// What the run will do and how long it should take, given the servers that can run.
    pub estimate: &'a dyn Fn(&[Active]) -> Estimate,
    /// The docroot, if the servers serve files.
    pub site: Option<Site<'a>>,
    /// Also write `work/combined.pem` (certificate then key: HAProxy's `crt`), the certificate
    /// HAProxy is set up with.
    pub combined: bool,
    /// The header line of `results.csv`.
    pub csv_header: &'a str,
    /// A server's start-up error as its skip reason: [`one_line`] (the default), or the
    /// experiment's own reading.
    pub line: fn(&str) -> String,
}

/// No refusal.
fn refuse_none(_: ServerKind) -> Option<String> {
    None
}

impl<'a> Want<'a> {
    /// The usual: `servers` as they are, no refusal, no program besides them, no files, one-line
    /// skip reasons; the error when none can run says to see the notes.
    pub fn new(
        name: &'static str,
        servers: Vec<ServerKind>,
        estimate: &'a dyn Fn(&[Active]) -> Estimate,
        csv_header: &'a str,
    ) -> Self {
        Self {
            name,
            servers,
            skipped: Vec::new(),
            refuse: &refuse_none,
            none: "no server to run (see the SKIP notes above)",
            sluice: None,
            tools: &[],
            estimate,
            site: None,
            combined: false,
            csv_header,
            line: one_line,
        }
    }
}

/// `results.csv`, written line by line as the run goes.
pub struct Csv {
    file: File,
    path: PathBuf,
}

impl Csv {
    /// Creates `path` with `header` (a whole line).
    pub fn create(path: PathBuf, header: &str) -> Result<Self, String> {
        let mut file = File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        file.write_all(header.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Self { file, path })
    }

    /// Appends `text` (whole lines) and flushes, so the file holds every run so far.
    pub fn line(&mut self, text: &str) -> Result<(), String> {
        self.file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }
}

/// What [`prepare`] made ready.
pub struct Prepared {
    /// The servers that can run, with their binaries, in first-run order.
    pub active: Vec<Active>,
    /// The servers left out so far, and why (those that do not start join them).
    pub skipped: Vec<Skipped>,
    /// The Sluice binary, when [`Want::sluice`] asked for it.
    pub sluice: Option<PathBuf>,
    /// The programs of [`Want::tools`], in its order.
    pub tools: Vec<PathBuf>,
    /// `<out>/work`: configurations, logs, certificate, files.
    pub work: PathBuf,
    /// The self-signed certificate for the server address (PEM).
    pub cert: PathBuf,
    /// Its key (PEM, readable by root only).
    pub key: PathBuf,
    /// Certificate and key in one PEM, when [`Want::combined`] asked for it.
    pub combined: Option<PathBuf>,
    /// `work/docroot` (written when [`Want::site`] was given).
    pub docroot: PathBuf,
    /// One line per tool in play (curl, each server's program, the kernel, [`Want::tools`]); the
    /// experiment may add its own.
    pub versions: Vec<String>,
    /// When the run started (after the line announcing it).
    pub started: Instant,
    /// The bound on the whole run.
    pub bound: Duration,
    /// `results.csv`, its header written.
    pub csv: Csv,
    line: fn(&str) -> String,
}

/// Everything every experiment sets up before its first measurement (see the module's notes).
pub fn prepare(plan: &Plan, want: Want<'_>) -> Result<Prepared, String> {
    let narrowed = Plan { servers: want.servers, ..plan.clone() };
    let (mut active, more) = resolve_servers(&narrowed)?;
    let mut skipped = want.skipped;
    skipped.extend(more);
    active.retain(|&(server, _)| match (want.refuse)(server) {
        Some(reason) => {
            skipped.push(Skipped { server, reason });
            false
        }
        None => true,
    });
    for s in &skipped {
        eprintln!("sluice-lab: SKIP {}: {}", s.server.name(), s.reason);
    }
    if active.is_empty() {
        return Err(want.none.into());
    }
    let sluice = match want.sluice {
        Some(why) => Some(sluice_path(&active, plan).map_err(|e| format!("{why}: {e}"))?),
        None => None,
    };
    let tools = want
        .tools
        .iter()
        .map(|&(program, missing)| servers::find_program(program).ok_or_else(|| missing.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    net::available().map_err(|e| format!("the lab is not available: {e}"))?;
    let work = plan.out.join("work");
    fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let Estimate { what, expected } = (want.estimate)(&active);
    let bound = plan.bound.unwrap_or_else(|| default_bound(expected));
    println!(
        "{}: {what}: expected ≈ {} (bounded to {}); results in {}",
        want.name,
        fmt_duration(expected),
        fmt_duration(bound),
        plan.out.display()
    );
    let started = Instant::now();
    let mut versions = versions(&active, &work);
    for (&(label, _), program) in want.tools.iter().zip(&tools) {
        let mut cmd = Command::new(program);
        cmd.arg("--version");
        if let Ok(f) = proc::run_bounded(cmd, Duration::from_secs(20), &work) {
            if f.success() {
                versions.push(format!("{label}: {}", f.stdout.trim()));
            }
        }
    }
    let (cert, key) = servers::write_self_signed(&work, SERVER_ADDR)?;
    let combined = if want.combined {
        let path = work.join("combined.pem");
        write_combined_pem(&path, &cert, &key)?;
        Some(path)
    } else {
        None
    };
    let docroot = work.join("docroot");
    if let Some(site) = want.site {
        (site.write)(&docroot)?;
        for dir in [&work, &plan.out] {
            if let Ok(m) = fs::metadata(dir) {
                let _ = fs::set_permissions(dir, fs::Permissions::from_mode(m.permissions().mode() | site.reach));
            }
        }
    }
    let csv = Csv::create(plan.out.join("results.csv"), want.csv_header)?;
    Ok(Prepared {
        active,
        skipped,
        sluice,
        tools,
        work,
        cert,
        key,
        combined,
        docroot,
        versions,
        started,
        bound,
        csv,
        line: want.line,
    })
}

impl Prepared {
    /// When the run's time is up.
    pub fn deadline(&self) -> Instant {
        self.started + self.bound
    }

    /// Before each measurement: `Err` after Ctrl-C, or once the run is past its bound ("the run
    /// exceeded its time bound of …", then `progress`, e.g. " after 3 of 20 uploads").
    pub fn go_on(&self, progress: impl FnOnce() -> String) -> Result<(), String> {
        proc::check_interrupt()?;
        if Instant::now() >= self.deadline() {
            return Err(format!("the run exceeded its time bound of {}{}", fmt_duration(self.bound), progress()));
        }
        Ok(())
    }

    /// Starts the lab with `link` (the first case's), its scratch files in `work/`.
    pub fn stage(&self, link: &LinkSpec) -> Result<Stage, String> {
        Stage::start(link, &self.work)
    }

    /// The setup of `kind`: its directory under `work/`, its port on the server address, the
    /// certificate (HAProxy's: the combined PEM, when there is one).
    pub fn setup(&self, kind: ServerKind) -> Setup {
        let cert = match (&self.combined, kind) {
            (Some(combined), ServerKind::Haproxy) => combined,
            _ => &self.cert,
        };
        Setup::new(kind, &self.work, SERVER_ADDR, cert, &self.key)
    }

    /// Starts each server of `servers` with `start` (given the stage, the kind, its binary and
    /// [`setup`](Self::setup)), which returns once the server serves. One that does not start is
    /// stopped and skipped (`did not start: <reason>`); the servers started, in order.
    pub fn start_each(
        &mut self,
        stage: &mut Stage,
        servers: &[Active],
        mut start: impl FnMut(&mut Stage, ServerKind, &Path, &Setup) -> Result<(), String>,
    ) -> Vec<ServerKind> {
        let mut running = Vec::new();
        for (kind, bin) in servers {
            let setup = self.setup(*kind);
            match start(stage, *kind, bin, &setup) {
                Ok(()) => running.push(*kind),
                Err(e) => {
                    eprintln!("sluice-lab: SKIP {}: {e}", kind.name());
                    stage.stop_service(kind.name());
                    self.skipped.push(Skipped { server: *kind, reason: format!("did not start: {}", (self.line)(&e)) });
                }
            }
        }
        running
    }
}

/// One-line versions of the tools in play (curl and each server), best effort.
pub fn versions(active: &[Active], scratch: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut probe = |label: &str, program: &Path, args: &[&str]| {
        let mut cmd = Command::new(program);
        cmd.args(args);
        if let Ok(f) = proc::run_bounded(cmd, Duration::from_secs(5), scratch) {
            let text = if f.stdout.trim().is_empty() { f.stderr } else { f.stdout };
            if let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) {
                out.push(format!("{label}: {line}"));
            }
        }
    };
    if let Some(curl) = servers::find_program("curl") {
        probe("curl", &curl, &["--version"]);
    }
    for (k, bin) in active {
        if seen.contains(&k.program()) {
            continue;
        }
        seen.push(k.program());
        let args: &[&str] = match k {
            ServerKind::Nginx | ServerKind::Nginx512 | ServerKind::NginxTuned | ServerKind::Haproxy => &["-v"],
            ServerKind::Caddy | ServerKind::CaddyTuned | ServerKind::CaddyH3 => &["version"],
            _ => &["--version"],
        };
        probe(k.program(), bin, args);
    }
    if let Ok(v) = fs::read_to_string("/proc/sys/kernel/osrelease") {
        out.push(format!("Linux {}", v.trim()));
    }
    out
}

/// Writes a PEM of `cert` then `key` to `path` (HAProxy's `crt`), readable by root only.
pub(crate) fn write_combined_pem(path: &Path, cert: &Path, key: &Path) -> Result<(), String> {
    let read = |p: &Path| fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let text = format!("{}\n{}", read(cert)?.trim_end(), read(key)?);
    write_private(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_csv_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        let mut csv = Csv::create(path.clone(), "a,b\n").unwrap();
        csv.line("1,2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "a,b\n1,2\n", "flushed as it goes");
        let e = Csv::create(dir.path().join("no/such/dir.csv"), "").err().unwrap();
        assert!(e.starts_with("creating "), "{e}");
    }

    #[test]
    fn haproxy_gets_the_combined_pem() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        fs::write(&cert, "CERT\n\n").unwrap();
        fs::write(&key, "KEY\n").unwrap();
        let combined = dir.path().join("combined.pem");
        write_combined_pem(&combined, &cert, &key).unwrap();
        assert_eq!(fs::read_to_string(&combined).unwrap(), "CERT\nKEY\n");
        assert_eq!(fs::metadata(&combined).unwrap().permissions().mode() & 0o777, 0o600);
        let p = Prepared {
            active: vec![],
            skipped: vec![],
            sluice: None,
            tools: vec![],
            work: dir.path().to_path_buf(),
            cert: cert.clone(),
            key,
            combined: Some(combined.clone()),
            docroot: dir.path().join("docroot"),
            versions: vec![],
            started: Instant::now(),
            bound: Duration::from_secs(60),
            csv: Csv::create(dir.path().join("r.csv"), "").unwrap(),
            line: one_line,
        };
        assert_eq!(p.setup(ServerKind::Haproxy).cert, combined);
        assert_eq!(p.setup(ServerKind::Nginx).cert, cert);
        assert_eq!(p.setup(ServerKind::Nginx).dir, dir.path().join("nginx"));
        assert!(p.go_on(String::new).is_ok());
        let late = Prepared { bound: Duration::ZERO, ..p };
        let e = late.go_on(|| " after 1 of 2 runs".into()).unwrap_err();
        assert_eq!(e, "the run exceeded its time bound of 0 s after 1 of 2 runs");
    }
}
