//! The `sluice` binary: an HTTP/1.1, HTTP/2 and HTTP/3 edge server and reverse proxy. Its
//! modules are layered, bottom to top: `config` → `message` → `handlers` → `state` → `app` →
//! `io` → this file (`tests/layers.rs` keeps the order; `docs/architecture.md` explains it).

#![forbid(unsafe_code)]

mod acme;
mod app;
mod config;
mod handlers;
mod io;
mod message;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::sync::{mpsc, watch};

/// Sluice: an HTTP/1.1, HTTP/2 and HTTP/3 edge server and reverse proxy that gets the transport
/// right by default.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server (with no --config: HTTPS on :8443, HTTP on :8080, the built-in site).
    Serve {
        /// Configuration file (TOML); see sluice.example.toml.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Data directory (self-signed certificate); overrides the config's data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Validate a configuration file and exit (non-zero with file:line:column: reason).
    Check {
        /// Configuration file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Ask a running server to read its configuration and certificates again: through its
    /// admin listener (POST /reload, which answers with the outcome), else SIGHUP to the process
    /// in its pid file.
    Reload {
        /// The server's configuration file: checked first, and where the admin address and the
        /// pid file are found.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// The admin listener (default: the configuration's, else 127.0.0.1:9901).
        #[arg(long)]
        admin: Option<std::net::SocketAddr>,
        /// The pid file (default: the configuration's `pid_file`).
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// Download a URL and print curl's figures: speed_download, size_download, time_total, ...
    Get(sluice_client::GetArgs),
    /// Upload a file or string to a URL and print curl's figures: speed_upload, size_upload, ...
    Put(sluice_client::PutArgs),
    /// Measure a connection to a server: idle latency, capacity and responsiveness (RPM,
    /// draft-ietf-ippm-responsiveness) each way, over HTTP/2; any server with /.well-known/nq.
    Speedtest(sluice_client::SpeedtestArgs),
}

fn main() -> ExitCode {
    // First, before any thread or descriptor: run again with glibc's tunables set (a larger
    // per-thread cache of freed blocks; on AMD Zen 3 and later, copies kept off `rep movsb`;
    // see sluice_sys::tunables; returns only if it did not exec).
    let tuning = sluice_sys::tunables::reexec_if_needed();
    let cli = Cli::parse();
    if let Err(e) = &tuning {
        eprintln!("sluice: warning: cannot run again with GLIBC_TUNABLES set: {e}");
    }
    match cli.command {
        Command::Get(args) => sluice_client::get(args),
        Command::Put(args) => sluice_client::put(args),
        Command::Speedtest(args) => sluice_client::speedtest(args),
        Command::Check { config } => match config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Reload { config, admin, pid_file } => reload_command(config, admin, pid_file),
        Command::Serve { config, data_dir } => {
            init_logging();
            let cfg = match &config {
                Some(path) => match config::load(path) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                None => config::default_config(data_dir.clone().unwrap_or_else(config::default_data_dir)),
            };
            let mut cfg = cfg;
            if let Some(d) = &data_dir {
                cfg.data_dir = d.clone();
            }
            let source = io::live::Source { path: config, data_dir };
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(serve(source, cfg)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sluice: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

// The allocator stays glibc's. Measured (scripts/bench-callgrind.sh, scripts/bench-h3.sh,
// loopback, server on one core): mimalloc and jemalloc both cut a small h2 request from about
// 39,000 to 33,700 instructions (h2load's small-response req/s rose about a fifth with
// mimalloc), but mimalloc slowed 1 GB h2 downloads from 16.4 to 9.7 Gbit/s (0.46 -> 0.81
// server CPU s/GB: rustls copies each record into a freshly allocated buffer, and mimalloc
// hands out cold ones) and jemalloc slowed h3 from 11.6 to 9.7 Gbit/s (0.68 -> 0.83 s/GB).
// The cold buffers were glibc's `rep movsb` (see sluice_sys::memcpy): with it kept off, on
// 2026-11-25, mimalloc no longer slowed 300 MB h2 or h3 downloads (0.50-0.53 s/GB either way),
// cut a small TLS h2 request from 23,774 to 21,826 instructions and raised h2load's req/s from
// 272k to 285k (+4.6 %, 3 runs each). Measured again on 2026-11-28 on an Intel Xeon (glibc's
// copies untouched there), mimalloc 0.1.52 (its v3): a small TLS h2 request 23,798 -> 21,838
// instructions, a proxied one 81,333 -> 68,572. But memory freed after a burst stayed (abuse
// test w3_w9: 151 MB resident 20 s after, against a 36 MB bound) until every worker called
// mi_collect when it parked and the purge delay was 0; and with those, 300 MB h2 downloads fell
// from 13.4-15.9 to 7.6-10.2 Gbit/s (bench-h3.sh, two alternating sets; the client, the same
// binary, doubled its CPU per GB too). Not taken. On 2026-11-29 (AMD EPYC), a proxied small
// response: mimalloc 29,889 -> 27,604 instructions and 140 -> 125 atomic operations, jemalloc
// 28,162 and 126.5, but an idle TLS h2 connection then took 19.6 and 16.0 kB against glibc's
// 15.2 (nginx 15.1; bench-idle.sh -n 10000). Not taken either.

/// How often freed heap memory is handed back to the system: often enough that memory comes
/// back soon after a burst, rarely enough that the walk over the allocator's free lists costs
/// nothing measurable.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// The block allocated and freed at start (see `raise_heap_thresholds`): glibc then mmaps
/// blocks from 4 MiB on and keeps up to 8 MiB free at a heap's top between trims.
const HEAP_WARMUP: usize = 4 << 20;

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Diagnostics on standard error; standard output carries the access log.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

async fn serve(source: io::live::Source, cfg: config::Config) -> Result<(), String> {
    match sluice_sys::limits::raise_nofile() {
        Ok((before, after)) if after > before => tracing::info!(before, after, "raised the open-file limit"),
        Ok((_, after)) => tracing::info!(limit = after, "open-file limit"),
        Err(e) => tracing::warn!(%e, "cannot read or raise the open-file limit"),
    }
    // Memory freed after a burst goes back to the system within TRIM_EVERY (glibc keeps it
    // otherwise: 661 MB stayed resident for 15 minutes after a burst before this). And glibc
    // starts as if it had already seen a large block come and go, so that a fresh process does
    // not hand back and fault in its heap's top on every free.
    sluice_sys::limits::raise_heap_thresholds(HEAP_WARMUP);
    let _ = std::thread::Builder::new().name("sluice-trim".into()).spawn(|| loop {
        std::thread::sleep(TRIM_EVERY);
        sluice_sys::limits::trim_heap();
    });
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let (admin_cfg, pid_file) = (cfg.admin.clone(), cfg.pid_file.clone());
    let server = io::live::Server::start(source, cfg, alive_tx).await?;
    server.keep_acme_certificates();
    let (reload_tx, reload_rx) = mpsc::channel(4);
    let (draining_tx, draining_rx) = watch::channel(false);
    if let Some(addr) = admin_cfg.addr {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                let local = l.local_addr().map_err(|e| e.to_string())?;
                tracing::info!("admin listener on http://{local} (/metrics, /healthz, /readyz, POST /reload)");
                println!("sluice: admin on http://{local} (/metrics, /healthz, /readyz, POST /reload)");
                tokio::spawn(io::admin::serve(l, server.watch(), draining_rx, reload_tx));
            }
            Err(e) if admin_cfg.explicit => return Err(format!("cannot listen on {addr} ([admin] addr): {e}")),
            // The default address taken (another Sluice on this machine): serve without it.
            Err(e) => tracing::warn!(%addr, %e, "admin listener not started (set [admin] addr to another address)"),
        }
    }
    if let Some(p) = &pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write the pid file {}: {e}", p.display()))?;
    }
    let drain = server.run(reload_rx).await;
    let _ = draining_tx.send(true);
    if tokio::time::timeout(drain + std::time::Duration::from_secs(1), alive_rx.recv()).await.is_err() {
        tracing::warn!("drain timeout: closing the remaining connections");
    }
    if let Some(p) = &pid_file {
        let _ = std::fs::remove_file(p);
    }
    message::accesslog::flush();
    Ok(())
}

/// `sluice reload`: check the configuration, then ask the server through its admin listener,
/// else by SIGHUP to the pid in its pid file.
fn reload_command(config: Option<PathBuf>, admin: Option<std::net::SocketAddr>, pid_file: Option<PathBuf>) -> ExitCode {
    let cfg = match &config {
        Some(path) => match config::load(path) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("{e}");
                eprintln!("sluice: not reloaded: the running configuration keeps serving");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let admin = admin.or_else(|| match &cfg {
        Some(c) => c.admin.addr,
        None => config::admin_default_addr(),
    });
    let pid_file = pid_file.or_else(|| cfg.as_ref().and_then(|c| c.pid_file.clone()));
    if let Some(addr) = admin {
        match post_reload(addr) {
            Ok((200, body)) => {
                print!("{body}");
                return ExitCode::SUCCESS;
            }
            Ok((_, body)) => {
                eprint!("{body}");
                return ExitCode::from(2);
            }
            Err(e) if pid_file.is_none() => {
                eprintln!("sluice: cannot reach the admin listener at {addr}: {e} (and no pid file to signal)");
                return ExitCode::FAILURE;
            }
            Err(e) => eprintln!("sluice: cannot reach the admin listener at {addr}: {e}; signalling instead"),
        }
    }
    let Some(p) = pid_file else {
        eprintln!("sluice: no admin listener and no pid file: nothing to reach the server by");
        return ExitCode::FAILURE;
    };
    let pid = match std::fs::read_to_string(&p).map(|t| t.trim().parse::<i32>()) {
        Ok(Ok(pid)) if pid > 0 => pid,
        Ok(_) => {
            eprintln!("sluice: {} does not hold a process id", p.display());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("sluice: cannot read {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
    };
    match sluice_sys::process::hangup(pid) {
        Ok(()) => {
            println!("sluice: sent SIGHUP to {pid}; the server logs the outcome");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: cannot signal {pid}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `POST /reload` to the admin listener at `addr`: the status and the body.
fn post_reload(addr: std::net::SocketAddr) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(60);
    let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(
        format!("POST /reload HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut out = Vec::new();
    s.take(1 << 20).read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response"))?;
    Ok((status, body.to_owned()))
}
