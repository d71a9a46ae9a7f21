//! The `sluice` binary: an HTTP/1.1, HTTP/2 and HTTP/3 edge server and reverse proxy. Its
//! modules are layered, bottom to top: `config` → `message` → `handlers` → `state` → `app` →
//! `io` → this file (`tests/layers.rs` keeps the order; `docs/architecture.md` explains it).

#![forbid(unsafe_code)]

mod app;
mod config;
mod handlers;
mod io;
mod message;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    /// Download a URL and print curl's figures: speed_download, size_download, time_total, ...
    Get(sluice_client::GetArgs),
    /// Upload a file or string to a URL and print curl's figures: speed_upload, size_upload, ...
    Put(sluice_client::PutArgs),
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
            if let Some(d) = data_dir {
                cfg.data_dir = d;
            }
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(serve(cfg)) {
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

async fn serve(cfg: config::Config) -> Result<(), String> {
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
    let served = if cfg.listeners.iter().any(|l| l.tls) { load_certificates(&cfg)? } else { Vec::new() };
    let certs: Vec<sluice_tls::certs::LoadedCert> = served.iter().map(|s| s.cert.clone()).collect();
    let served = Arc::new(served);
    let tls_config =
        if certs.is_empty() { None } else { Some(sluice_tls::certs::server_config(&certs, &[b"h2", b"http/1.1"])?) };
    let quic_tls = if certs.is_empty() || !cfg.quic.enabled {
        None
    } else {
        Some(sluice_tls::certs::server_config(&certs, &[b"h3"])?)
    };
    let state = Arc::new(state::State::new(cfg));
    for up in &state.upstreams {
        up.start_health_checks();
    }
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    for l in &state.cfg.listeners {
        let listener =
            tokio::net::TcpListener::bind(l.addr).await.map_err(|e| format!("cannot listen on {}: {e}", l.addr))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // HTTP/3 on UDP at the same address and port (the TCP port, when the file asked for
        // port 0), advertised on the TCP side with Alt-Svc (RFC 9114 §3.1.1, RFC 7838).
        let quic = match quic_tls.as_ref().filter(|_| l.tls) {
            Some(q) => Some(io::h3::endpoint(local, q.clone(), &state.cfg)?),
            None => None,
        };
        let alt_svc = quic
            .as_ref()
            .and_then(|_| ::http::HeaderValue::from_str(&format!("h3=\":{}\"; ma=86400", local.port())).ok())
            .map(app::respond::AltSvc::new);
        let what = match (l.tls, &quic) {
            (true, Some(_)) => format!("https://{local} (h2, http/1.1; h3 on UDP {local})"),
            (true, None) => format!("https://{local} (h2, http/1.1)"),
            _ => format!("http://{local} (http/1.1, h2c prior knowledge)"),
        };
        tracing::info!("listening on {what}");
        println!("sluice: listening on {what}");
        let tls = tls_config.as_ref().filter(|_| l.tls).map(|c| {
            Arc::new(io::listen::ListenerTls { config: c.clone(), certs: served.clone(), port: local.port(), alt_svc })
        });
        if let Some(ep) = quic {
            let certs = served.clone();
            tokio::spawn(io::h3::accept_loop(ep, certs, state.clone(), shutdown_rx.clone(), alive_tx.clone()));
        }
        tokio::spawn(io::listen::accept_loop(listener, tls, state.clone(), shutdown_rx.clone(), alive_tx.clone()));
    }
    if let Some(addr) = state.cfg.admin.addr {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                let local = l.local_addr().map_err(|e| e.to_string())?;
                tracing::info!("admin listener on http://{local} (/metrics, /healthz, /readyz)");
                println!("sluice: admin on http://{local} (/metrics, /healthz, /readyz)");
                tokio::spawn(io::admin::serve(l, state.clone(), shutdown_rx.clone()));
            }
            Err(e) if state.cfg.admin.explicit => return Err(format!("cannot listen on {addr} ([admin] addr): {e}")),
            // The default address taken (another Sluice on this machine): serve without it.
            Err(e) => tracing::warn!(%addr, %e, "admin listener not started (set [admin] addr to another address)"),
        }
    }
    drop(alive_tx);
    wait_for_signal().await;
    tracing::info!(drain = ?state.cfg.timeouts.drain, "shutting down: no new connections, draining open ones");
    let _ = shutdown_tx.send(true);
    let drain = state.cfg.timeouts.drain + std::time::Duration::from_secs(1);
    if tokio::time::timeout(drain, alive_rx.recv()).await.is_err() {
        tracing::warn!("drain timeout: closing the remaining connections");
    }
    message::accesslog::flush();
    Ok(())
}

/// Load every configured certificate (generating the self-signed default where needed) with
/// the origin set it announces; prints each certificate's fingerprint.
fn load_certificates(cfg: &config::Config) -> Result<Vec<Arc<sluice_tls::certs::ServedCert>>, String> {
    let mut certs = Vec::new();
    for c in &cfg.certificates {
        let (cert, key) = match (&c.cert, &c.key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            _ => {
                let (cert, key, created) = sluice_tls::certs::ensure_self_signed(&cfg.data_dir).map_err(|e| {
                    format!("cannot create the self-signed certificate in {}: {e}", cfg.data_dir.display())
                })?;
                if created {
                    println!(
                        "sluice: generated a self-signed certificate for localhost, 127.0.0.1, ::1 in {}",
                        cert.display()
                    );
                }
                (cert, key)
            }
        };
        let loaded = sluice_tls::certs::load_cert(&cert, &key)?;
        println!(
            "sluice: certificate {} ({}) SHA-256 {}",
            cert.display(),
            loaded.dns_names.join(", "),
            loaded.fingerprint()
        );
        let origins = c.origins.as_ref().map(|spec| match spec {
            config::OriginSpec::List(list) => list.iter().map(|(h, p)| (h.clone(), Some(*p))).collect(),
            // RFC 8336 §2.4 lets the set name only origins the certificate covers; of its
            // names, those a site answers for (any, when a site has no `hosts`).
            config::OriginSpec::FromCertificate => loaded
                .dns_names
                .iter()
                .filter(|n| !n.starts_with("*."))
                .filter(|n| cfg.sites.iter().any(|s| s.hosts.is_empty() || s.hosts.contains(n)))
                .map(|n| (n.clone(), None))
                .collect::<Vec<_>>(),
        });
        if let Some(o) = &origins {
            let names: Vec<&str> = o.iter().map(|(h, _)| h.as_str()).collect();
            println!("sluice: certificate {} announces ORIGIN {}", cert.display(), names.join(", "));
        }
        // The generated certificate is for trying things out (clients skip verification): its
        // names are not enforced with 421s.
        let enforce = c.cert.is_some();
        certs.push(Arc::new(sluice_tls::certs::ServedCert { cert: loaded, origins, enforce }));
    }
    Ok(certs)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
