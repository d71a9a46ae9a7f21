//! Harness for the end-to-end tests: a Sluice process on free loopback ports with its own
//! temporary config, data dir and document root, plus bounded runs of external clients
//! (curl, nghttp, h2load).
//!
//! Every process started here is bounded in time and killed when the bound passes or its
//! owner is dropped, so a hung server or client fails one test instead of hanging the suite.
//! A test whose client tool is missing prints a SKIP note straight to the terminal (past the
//! test harness's output capture) and passes.

// Each test crate uses a different part of this shared module.
#![allow(dead_code)]

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test; `SLUICE_TEST_BIN` overrides it (to run the suite against another build).
pub(crate) fn sluice_bin() -> PathBuf {
    std::env::var_os("SLUICE_TEST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sluice")), PathBuf::from)
}

/// How long a server gets to start accepting on its ports (it may generate a certificate).
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a killed process gets to be reaped before we give up on it.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Contents of `/hello.txt` in every test site.
pub(crate) const HELLO: &[u8] = b"Hello from the Sluice integration tests.\n";
/// Size of `/data.bin` (a byte pattern, for ranges and conditional requests).
pub(crate) const DATA_LEN: usize = 100_000;
/// Marker in a file beside (outside) the document root; traversal must never reveal it.
pub(crate) const SECRET: &str = "SLUICE-TEST-SECRET-7f3a";

/// The pattern `/data.bin` holds.
pub(crate) fn data_bin() -> Vec<u8> {
    (0..DATA_LEN).map(|i| (i % 251) as u8).collect()
}

/// Prints a note on the terminal even while the test harness captures output.
pub(crate) fn note(msg: &str) {
    let _ = writeln!(io::stderr(), "{msg}");
}

/// Whether `tool` runs (its probe, usually `--version`, succeeds); for curl, also whether it
/// speaks HTTP/2.
pub(crate) fn have(tool: &str) -> bool {
    static SEEN: OnceLock<Mutex<Vec<(String, bool)>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(Vec::new()));
    let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, ok)) = seen.iter().find(|(t, _)| t == tool) {
        return *ok;
    }
    // The probe each tool answers with success: `openssl version` and `caddy version`,
    // `gtlsclient --help` (its `--version` takes an argument), `nginx -v`, `pebble -version`,
    // `pebble-challtestsrv -h`, `--version` for the rest.
    let probe = match tool {
        "openssl" | "caddy" => "version",
        "gtlsclient" => "--help",
        "nginx" => "-v",
        "pebble" => "-version",
        "pebble-challtestsrv" => "-h",
        _ => "--version",
    };
    let ok =
        Command::new(tool).arg(probe).stdin(Stdio::null()).stderr(Stdio::null()).output().is_ok_and(|o| {
            o.status.success() && (tool != "curl" || String::from_utf8_lossy(&o.stdout).contains("HTTP2"))
        });
    seen.push((tool.to_owned(), ok));
    ok
}

/// Returns early from a test (passing it) with a SKIP note when a client tool is missing.
macro_rules! require_tool {
    ($tool:expr, $test:expr) => {
        if !support::have($tool) {
            let why = if $tool == "curl" { "not found or without HTTP/2" } else { "not found" };
            // Under CI a missing tool is a failure: scripts/setup.sh installs every one.
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{}: `{}` {why} under CI=true (scripts/setup.sh installs it)",
                $test,
                $tool
            );
            support::note(&format!("SKIP {}: `{}` {why}; run scripts/setup.sh", $test, $tool));
            return;
        }
    };
}
pub(crate) use require_tool;

/// What a finished external command produced.
pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    /// Panics with both output streams unless the command exited 0.
    pub(crate) fn expect_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// An external command running in the background with its output collected.
pub(crate) struct Running {
    what: String,
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
}

fn collect(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Waits up to `limit` for `child` to exit.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Kills `child` (if it still runs) and reaps it, giving up after [`REAP_TIMEOUT`].
fn kill_and_reap(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        let _ = wait_bounded(child, REAP_TIMEOUT);
    }
}

impl Running {
    /// Starts `cmd` with stdin closed and stdout/stderr collected.
    pub(crate) fn spawn(cmd: &mut Command) -> Self {
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let out = child.stdout.take().map(collect);
        let err = child.stderr.take().map(collect);
        Self { what, child, out, err }
    }

    /// The process id.
    #[allow(dead_code)] // Used by the reload tests only.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the command is still running.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the command to finish; kills it and panics after `limit`.
    pub(crate) fn finish(mut self, limit: Duration) -> Output {
        let status = wait_bounded(&mut self.child, limit);
        if status.is_none() {
            kill_and_reap(&mut self.child);
        }
        let text = |h: Option<JoinHandle<Vec<u8>>>| {
            h.and_then(|h| h.join().ok()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
        };
        let (stdout, stderr) = (text(self.out.take()), text(self.err.take()));
        let Some(status) = status else {
            panic!("{} did not finish within {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", self.what);
        };
        Output { status, stdout, stderr }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// A child process (a peer a test started) killed and reaped when the test ends, failed or not.
#[allow(dead_code)] // Not every test file starts a peer of its own.
pub(crate) struct Kill(pub(crate) Child);

impl Drop for Kill {
    fn drop(&mut self) {
        kill_and_reap(&mut self.0);
    }
}

/// Runs `cmd` to completion, killing it and panicking after `limit`.
pub(crate) fn run(cmd: &mut Command, limit: Duration) -> Output {
    Running::spawn(cmd).finish(limit)
}

/// Two distinct loopback ports that were free a moment ago.
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    (a.local_addr().expect("local addr").port(), b.local_addr().expect("local addr").port())
}

/// A TCP port free on 127.0.0.1 just now (for a peer server a test starts).
pub(crate) fn free_port() -> u16 {
    free_ports().0
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub(crate) fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_millis(500)).is_ok()
}

/// Settings for one test server.
pub(crate) struct Options {
    /// `[timeouts] drain_secs`.
    pub(crate) drain_secs: u64,
    /// More TOML appended to the configuration (whole tables, e.g. `[flow]`); `{tls_port}`
    /// in it becomes the TLS listener's port, `{www}` the document root.
    pub(crate) extra: String,
    /// The TLS listener on 0.0.0.0 (every loopback address) instead of 127.0.0.1.
    pub(crate) listen_any: bool,
    /// `[timeouts] idle_secs`, when not the default.
    pub(crate) idle_secs: Option<u64>,
    /// `SLUICE_LOG` for the server (its log filter), when not the default.
    pub(crate) log: Option<&'static str>,
    /// More environment for the server.
    pub(crate) env: &'static [(&'static str, &'static str)],
    /// Top-level keys, replacing `access_log = true` (before the first table).
    pub(crate) top: &'static str,
    /// The TLS and cleartext listeners' ports, when a peer must know them beforehand.
    pub(crate) ports: Option<(u16, u16)>,
    /// `data_dir`, when not the server's own (two servers sharing one, or a restart).
    pub(crate) data_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            drain_secs: 10,
            extra: String::new(),
            listen_any: false,
            idle_secs: None,
            log: None,
            env: &[],
            top: "access_log = true",
            ports: None,
            data_dir: None,
        }
    }
}

/// A running Sluice with a TLS and a cleartext listener, killed on drop.
pub(crate) struct Server {
    child: Option<Child>,
    /// TLS listener (ALPN h2, http/1.1).
    pub(crate) tls_port: u16,
    /// Cleartext listener (HTTP/1.1, h2c prior knowledge).
    pub(crate) plain_port: u16,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub(crate) admin_port: u16,
    /// Holds `www/` (the document root), `data/`, `sluice.toml`, `server.log` and scratch files.
    dir: TempDir,
}

impl Server {
    /// Starts a server with default options.
    pub(crate) fn start() -> Self {
        Self::start_with(&Options::default())
    }

    /// Starts a server; when it exits during start-up (say, a port was taken in between), tries
    /// again with new ports, three times in all.
    pub(crate) fn start_with(opts: &Options) -> Self {
        let mut last_log = String::new();
        for _attempt in 0..3 {
            let dir = tempfile::Builder::new().prefix("sluice-it-").tempdir().expect("temp dir");
            let (tls_port, plain_port) = opts.ports.unwrap_or_else(free_ports);
            let admin_port = free_port();
            write_site(dir.path());
            let config = dir.path().join("sluice.toml");
            fs::write(&config, config_text(dir.path(), tls_port, plain_port, admin_port, opts)).expect("write config");
            let log = fs::File::create(dir.path().join("server.log")).expect("create server.log");
            let mut cmd = Command::new(sluice_bin());
            if let Some(filter) = opts.log {
                cmd.env("SLUICE_LOG", filter);
            }
            cmd.envs(opts.env.iter().copied());
            let child = cmd
                .arg("serve")
                .arg("--config")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", sluice_bin().display()));
            let mut server = Self { child: Some(child), tls_port, plain_port, admin_port, dir };
            match server.wait_ready() {
                Ok(()) => return server,
                Err((why, exited)) => {
                    server.kill();
                    last_log = format!("{why}\n----- server log -----\n{}", server.log());
                    if !exited {
                        break;
                    }
                }
            }
        }
        panic!("sluice did not start: {last_log}");
    }

    /// Waits until both ports accept; errs (saying whether the process exited) when the process
    /// exits or [`START_TIMEOUT`] passes.
    fn wait_ready(&mut self) -> Result<(), (String, bool)> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait() {
                return Err((format!("sluice exited during start-up: {status}"), true));
            }
            if accepts(self.tls_port) && accepts(self.plain_port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let why =
                    format!("ports {} and {} not accepting after {START_TIMEOUT:?}", self.tls_port, self.plain_port);
                return Err((why, false));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The document root.
    pub(crate) fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }

    /// A scratch path inside the server's temp dir (outside the document root).
    pub(crate) fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The config file the server runs with.
    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.path().join("sluice.toml")
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub(crate) fn https(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.tls_port)
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub(crate) fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.plain_port)
    }

    /// `http://127.0.0.1:ADMIN_PORT{path}`.
    pub(crate) fn admin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// Everything the server printed so far.
    pub(crate) fn log(&self) -> String {
        fs::read(self.dir.path().join("server.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        let pid = self.child.as_ref().expect("server running").id();
        let out = run(Command::new("kill").args(["-TERM", &pid.to_string()]), Duration::from_secs(10));
        out.expect_success("kill -TERM");
    }

    /// The server's resident set size in kB (VmRSS from /proc), while it runs.
    #[allow(dead_code)] // Used by the abuse suite and the proxy tests only.
    pub(crate) fn rss_kb(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
    }

    /// The server process's environment block as the kernel holds it (/proc/PID/environ):
    /// `NAME=value` strings, each ended by a NUL. glibc's start-up parses `GLIBC_TUNABLES` in
    /// place, so that one's value may have NULs where it had colons.
    #[allow(dead_code)] // Used by the integration suite only.
    pub(crate) fn environ(&self) -> Vec<u8> {
        let pid = self.child.as_ref().expect("server running").id();
        fs::read(format!("/proc/{pid}/environ")).expect("read /proc/PID/environ")
    }

    /// The exit status, if the server has exited.
    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits up to `limit` for the server to exit.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| wait_bounded(c, limit))
    }

    /// After SIGTERM at `sigterm_at`: the server exits 0 within `drain_secs` + 5 s of it.
    pub(crate) fn expect_clean_exit(&mut self, sigterm_at: Instant, drain_secs: u64, test: &str) {
        let status = self
            .wait_exit(Duration::from_secs(drain_secs + 5).saturating_sub(sigterm_at.elapsed()))
            .unwrap_or_else(|| panic!("{test}: server still running {drain_secs} s + 5 s after SIGTERM"));
        assert_eq!(status.code(), Some(0), "{test}: server exit status after SIGTERM: {status}");
    }

    fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            kill_and_reap(child);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            // Shown with the failing test's output.
            eprintln!("----- server log ({}) -----\n{}", sluice_bin().display(), self.log());
        }
    }
}

/// The document root every test server serves, plus a secret beside it.
fn write_site(dir: &Path) {
    let www = dir.join("www");
    fs::create_dir_all(www.join("sub")).expect("create www");
    fs::create_dir_all(dir.join("data")).expect("create data dir");
    fs::write(www.join("index.html"), "<!doctype html><title>Sluice test</title><p>index</p>\n").expect("write index");
    fs::write(www.join("sub/index.html"), "<!doctype html><p>sub index</p>\n").expect("write sub index");
    fs::write(www.join("hello.txt"), HELLO).expect("write hello");
    fs::write(www.join("data.bin"), data_bin()).expect("write data");
    fs::write(dir.join("secret.txt"), SECRET).expect("write secret");
}

fn config_text(dir: &Path, tls_port: u16, plain_port: u16, admin_port: u16, opts: &Options) -> String {
    // TOML literal strings: temp paths contain no single quotes.
    format!(
        "data_dir = '{data}'\n\
         {top}\n\
         \n\
         [[listener]]\n\
         addr = \"{tls_host}:{tls_port}\"\n\
         tls = true\n\
         \n\
         [[listener]]\n\
         addr = \"127.0.0.1:{plain_port}\"\n\
         tls = false\n\
         \n\
         [[site]]\n\
         root = '{www}'\n\
         \n\
         [speedtest]\n\
         enabled = true\n\
         \n\
         [admin]\n\
         addr = \"127.0.0.1:{admin_port}\"\n\
         \n\
         [timeouts]\n\
         drain_secs = {drain}\n\
         {idle}\
         {extra}\n",
        data = opts.data_dir.clone().unwrap_or_else(|| dir.join("data")).display(),
        top = opts.top,
        www = dir.join("www").display(),
        drain = opts.drain_secs,
        idle = opts.idle_secs.map(|s| format!("idle_secs = {s}\n")).unwrap_or_default(),
        tls_host = if opts.listen_any { "0.0.0.0" } else { "127.0.0.1" },
        extra = opts
            .extra
            .replace("{tls_port}", &tls_port.to_string())
            .replace("{www}", &dir.join("www").display().to_string()),
    )
}

/// The ways curl reaches a test server.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Proto {
    /// HTTPS, HTTP/1.1 by ALPN.
    H1Tls,
    /// HTTPS, h2 by ALPN.
    H2Tls,
    /// Cleartext HTTP/1.1.
    H1Plain,
    /// Cleartext HTTP/2 with prior knowledge.
    H2c,
}

impl Proto {
    pub(crate) const ALL: [Self; 4] = [Self::H1Tls, Self::H2Tls, Self::H1Plain, Self::H2c];

    /// curl's option for this protocol.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Self::H1Tls | Self::H1Plain => "--http1.1",
            Self::H2Tls => "--http2",
            Self::H2c => "--http2-prior-knowledge",
        }
    }

    /// curl's `%{http_version}` for this protocol.
    pub(crate) fn version(self) -> &'static str {
        match self {
            Self::H1Tls | Self::H1Plain => "1.1",
            Self::H2Tls | Self::H2c => "2",
        }
    }

    /// The URL of `path` on `srv` for this protocol.
    pub(crate) fn url(self, srv: &Server, path: &str) -> String {
        match self {
            Self::H1Tls | Self::H2Tls => srv.https(path),
            Self::H1Plain | Self::H2c => srv.http(path),
        }
    }
}

/// A response as curl saw it.
pub(crate) struct Response {
    /// `%{http_code}`.
    pub(crate) status: u16,
    /// `%{http_version}`: "1.1" or "2".
    pub(crate) version: String,
    /// Response header block(s), as received.
    pub(crate) headers: String,
    /// The body (for `--head`, curl writes the header block here instead).
    pub(crate) body: Vec<u8>,
    /// `%{size_download}`: body bytes received (0 for HEAD).
    pub(crate) size: u64,
}

impl Response {
    /// The value of the last `name` header (case-insensitive), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .next_back()
    }
}

/// Limit for one curl call in the tests (all of them are loopback and small).
const CURL_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs curl for `path` on `srv` over `proto` with `extra` arguments; the body goes to a scratch
/// file and is read back. Panics (with curl's stderr) when curl itself fails.
pub(crate) fn curl(srv: &Server, proto: Proto, path: &str, extra: &[&str]) -> Response {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body_file = srv.scratch(&format!("curl-{n}.body"));
    let head_file = srv.scratch(&format!("curl-{n}.head"));
    let url = proto.url(srv, path);
    let out = run(
        Command::new("curl")
            .args(["-sS", "-k", "--noproxy", "*", "--max-time", "50", proto.flag()])
            .args(extra)
            .arg("-o")
            .arg(&body_file)
            .arg("-D")
            .arg(&head_file)
            .args(["-w", "%{http_code} %{http_version} %{size_download}"])
            .arg(&url),
        CURL_TIMEOUT,
    );
    out.expect_success(&format!("curl {proto:?} {url}"));
    let mut w = out.stdout.split_whitespace();
    let status = w.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("curl -w output: {:?}", out.stdout));
    let version = w.next().unwrap_or_default().to_owned();
    let size = w.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("curl -w output: {:?}", out.stdout));
    let body = fs::read(&body_file).unwrap_or_default();
    let headers = fs::read(&head_file).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let _ = fs::remove_file(&body_file);
    let _ = fs::remove_file(&head_file);
    Response { status, version, headers, body, size }
}

/// Extracts an unsigned integer field from flat JSON text: `"name": 123`.
pub(crate) fn json_u64(text: &str, name: &str) -> Option<u64> {
    let key = format!("\"{name}\"");
    let rest = &text[text.find(&key)? + key.len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Size of a file, 0 when it does not exist (yet).
/// Waits (at most 20 s) until `download` has written 1 MB to `out`, so its request is surely in
/// flight; fails if the client ends first.
pub(crate) fn wait_until_flowing(download: &mut Running, out: &Path, test: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while file_len(out) < 1_000_000 {
        assert!(download.is_running(), "{test}: the client ended before the download got going");
        assert!(Instant::now() < deadline, "{test}: download did not start within 20 s");
        thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The status code of the HTTP/1.x response that arrives on `s` (read up to the end of its
/// head, at most 10 s).
#[allow(dead_code)] // Used by the abuse suite only.
pub(crate) fn h1_status_of(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !got.windows(4).any(|w| w == b"\r\n\r\n") && Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).split(' ').nth(1).unwrap_or_default().to_owned()
}

/// Whether python3 imports `module` (a real peer from PyPI); under CI=true its absence fails
/// `test`, elsewhere the test skips with a note.
#[allow(dead_code)] // Not every test file has a Python peer.
pub(crate) fn python_has(module: &str, test: &str) -> bool {
    let ok = Command::new("python3").args(["-c", &format!("import {module}")]).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{test}: python module `{module}` missing under CI=true (scripts/setup.sh installs it)"
        );
        note(&format!("SKIP {test}: python module `{module}` missing; run scripts/setup.sh"));
    }
    ok
}

/// The base64 SHA-256 of the SubjectPublicKeyInfo of the PEM certificate `cert` (openssl): what
/// Chromium's `--ignore-certificate-errors-spki-list` takes.
#[allow(dead_code)] // Only the Chromium tests.
pub(crate) fn spki_pin(cert: &Path) -> String {
    let out = run(
        Command::new("sh").arg("-c").arg(format!(
            "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der | \
             openssl dgst -sha256 -binary | base64",
            cert.display()
        )),
        Duration::from_secs(10),
    );
    out.expect_success("SPKI hash");
    out.stdout.trim().to_owned()
}

/// scripts/h3client.py, the aioquic client of the HTTP/3 tests.
#[allow(dead_code)] // Not every test file speaks HTTP/3.
pub(crate) fn h3client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/h3client.py")
}

/// Whether aioquic imports (the HTTP/3 test clients need it); under CI=true its absence fails
/// the test, elsewhere the test skips with a note.
#[allow(dead_code)] // Not every test file speaks HTTP/3.
pub(crate) fn have_aioquic(test: &str) -> bool {
    let ok = Command::new("python3").args(["-c", "import aioquic"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "{test}: aioquic missing under CI=true");
        note(&format!("SKIP {test}: python3 with aioquic not found; run scripts/setup.sh"));
    }
    ok
}
