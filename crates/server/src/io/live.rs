//! The running server across reloads: configuration generations, the listeners, and the
//! reload itself (SIGHUP, `POST /reload` on the admin listener, certificate files that
//! changed).
//!
//! A generation is one loaded configuration: its state, its certificates and TLS settings, and
//! its stop signal. Listeners accept each connection into the generation current at that
//! moment, and the connection keeps it to its end. A reload builds the next generation beside
//! the running one (anything wrong in it is refused before anything changes), binds the
//! listeners that are new, makes the generation current, stops the listeners that went, and
//! retires the previous generation: its connections take no new requests and finish the ones
//! in progress without a deadline (`io::Stop::Retire`). Upstreams whose configuration did not
//! change keep their pools (`State::after`); the QUIC endpoints stay, so HTTP/3 connections
//! carry on.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::{self, Config};
use crate::io::Stop;
use crate::state::State;
use sluice_tls::certs::ServedCert;

/// One loaded configuration.
pub(crate) struct Generation {
    pub(crate) state: Arc<State>,
    /// Every configured certificate with the origin set it announces.
    pub(crate) certs: Arc<Vec<Arc<ServedCert>>>,
    /// TLS over TCP (ALPN h2, http/1.1) and over QUIC (h3); `None` without TLS listeners.
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    pub(crate) quic_tls: Option<Arc<rustls::ServerConfig>>,
    /// The stop signal of this generation's connections.
    pub(crate) stop: crate::io::StopRx,
}

/// Where the configuration comes from, to read it again.
pub(crate) struct Source {
    /// The file (`None`: the embedded default).
    pub(crate) path: Option<PathBuf>,
    /// `--data-dir`, which overrides the file's.
    pub(crate) data_dir: Option<PathBuf>,
}

impl Source {
    /// Read and check the configuration: the same messages as `sluice check`.
    pub(crate) fn load(&self) -> Result<Config, String> {
        let mut cfg = match &self.path {
            Some(p) => config::load(p).map_err(|e| e.to_string())?,
            None => config::default_config(self.data_dir.clone().unwrap_or_else(config::default_data_dir)),
        };
        if let Some(d) = &self.data_dir {
            cfg.data_dir = d.clone();
        }
        Ok(cfg)
    }
}

/// What asks for a reload, and where its outcome goes.
pub(crate) type ReloadRequest = oneshot::Sender<Result<String, String>>;

/// How often certificate and key files are looked at for a change (their size and
/// modification time; a renamed-over file, as certbot and Kubernetes secrets do it, counts).
const CERT_POLL: Duration = Duration::from_secs(2);

/// A listener and how to stop it.
struct Running {
    close: watch::Sender<bool>,
    /// The TCP accept loop: awaited when the listener stops, so that its address is free again.
    task: tokio::task::JoinHandle<()>,
    /// The QUIC endpoint's accept loop, when the listener has HTTP/3.
    quic: Option<tokio::task::JoinHandle<()>>,
}

/// A listener's identity across reloads: what it binds and how it serves.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    addr: SocketAddr,
    tls: bool,
    quic: bool,
}

fn keys(cfg: &Config) -> Vec<Key> {
    cfg.listeners.iter().map(|l| Key { addr: l.addr, tls: l.tls, quic: l.tls && cfg.quic.enabled }).collect()
}

/// The running server: the current generation, the listeners, and the stop signals of every
/// generation that may still have connections.
pub(crate) struct Server {
    source: Source,
    live: watch::Sender<Arc<Generation>>,
    listeners: HashMap<Key, Running>,
    stops: Vec<watch::Sender<Stop>>,
    alive: mpsc::Sender<()>,
    /// The certificate and key files of the current generation, as last seen.
    stamps: Vec<(PathBuf, Option<(SystemTime, u64)>)>,
}

impl Server {
    /// Load the first generation and bind every listener (an error here stops start-up).
    pub(crate) async fn start(source: Source, cfg: Config, alive: mpsc::Sender<()>) -> Result<Self, String> {
        let (g, stop) = generation(cfg, None)?;
        for up in &g.state.upstreams {
            up.start_health_checks();
        }
        let stamps = stamps(&g.state.cfg);
        let g = Arc::new(g);
        let (live, _) = watch::channel(g.clone());
        let mut s = Self { source, live, listeners: HashMap::new(), stops: vec![stop], alive, stamps };
        for key in keys(&g.state.cfg) {
            let bound = bind(key, &g).await?;
            s.spawn(key, bound);
        }
        Ok(s)
    }

    /// The current generation, for the admin listener.
    pub(crate) fn watch(&self) -> watch::Receiver<Arc<Generation>> {
        self.live.subscribe()
    }

    /// Keep the ACME certificates each generation asks for (`crate::acme`), across reloads.
    pub(crate) fn keep_acme_certificates(&self) {
        let mut live = self.watch();
        tokio::spawn(async move {
            let mut keepers = crate::acme::Keepers::default();
            loop {
                let g = live.borrow_and_update().clone();
                keepers.apply(g.state.cfg.acme.as_ref(), &g.state.cfg.data_dir);
                if live.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Read the configuration and certificates again and put them in place; the running
    /// generation keeps serving if anything is wrong. Returns what changed.
    pub(crate) async fn reload(&mut self) -> Result<String, String> {
        let started = Instant::now();
        let cfg = self.source.load()?;
        let old = self.live.borrow().clone();
        let (g, stop) = generation(cfg, Some(&old.state))?;
        let (was, now) = (&old.state.cfg, &g.state.cfg);
        if was.admin != now.admin || was.pid_file != now.pid_file {
            tracing::warn!("[admin] and pid_file keep their values from start-up: changing them takes a restart");
        }
        let wanted = keys(&g.state.cfg);
        let g = Arc::new(g);
        // Bind what is new first: a failure leaves everything as it was, but for a listener
        // whose address a changed one takes over (TLS turned on or off): that one is stopped
        // just before its successor binds, and stays stopped if the bind fails.
        let mut bound = Vec::new();
        let mut stopped = 0;
        let new_keys: Vec<Key> = wanted.iter().filter(|k| !self.listeners.contains_key(k)).copied().collect();
        for key in &new_keys {
            let taken: Vec<Key> =
                self.listeners.keys().filter(|k| k.addr == key.addr && !wanted.contains(k)).copied().collect();
            for k in taken {
                self.stop_listener(k).await;
                stopped += 1;
            }
            bound.push((*key, bind(*key, &g).await?));
        }
        let added = bound.len();
        for up in g.state.upstreams.iter().filter(|u| !old.state.upstreams.iter().any(|o| Arc::ptr_eq(o, u))) {
            up.start_health_checks();
        }
        let kept = g.state.upstreams.iter().filter(|u| old.state.upstreams.iter().any(|o| Arc::ptr_eq(o, u))).count();
        self.stamps = stamps(&g.state.cfg);
        self.live.send_replace(g.clone());
        for (key, b) in bound {
            self.spawn(key, b);
        }
        let gone: Vec<Key> = self.listeners.keys().filter(|k| !wanted.contains(k)).copied().collect();
        for k in gone {
            self.stop_listener(k).await;
            stopped += 1;
        }
        // The previous generation's connections finish what they have and take nothing new.
        old.state.retire();
        for s in &self.stops {
            s.send_if_modified(|v| {
                let retire = *v == Stop::Run;
                if retire {
                    *v = Stop::Retire;
                }
                retire
            });
        }
        self.stops.retain(|s| s.receiver_count() > 0);
        self.stops.push(stop);
        Ok(format!(
            "reloaded in {:.1} ms: {} listener(s) added, {stopped} stopped, {kept} of {} upstream(s) kept with their connections",
            started.elapsed().as_secs_f64() * 1e3,
            added,
            g.state.upstreams.len()
        ))
    }

    /// Whether a certificate or key file changed since the current generation read it.
    fn certificates_changed(&self) -> bool {
        self.stamps.iter().any(|(p, seen)| stamp(p) != *seen)
    }

    fn spawn(&mut self, key: Key, b: Bound) {
        let (close, close_rx) = watch::channel(false);
        let quic = b.quic.map(|ep| {
            tokio::spawn(crate::io::h3::accept_loop(ep, self.live.subscribe(), close_rx.clone(), self.alive.clone()))
        });
        let task = tokio::spawn(crate::io::listen::accept_loop(
            b.tcp,
            b.tls,
            self.live.subscribe(),
            close_rx,
            self.alive.clone(),
        ));
        self.listeners.insert(key, Running { close, task, quic });
    }

    async fn stop_listener(&mut self, key: Key) {
        if let Some(r) = self.listeners.remove(&key) {
            let _ = r.close.send(true);
            let _ = r.task.await;
            tracing::info!(addr = %key.addr, "listener stopped (connections on it finish)");
            // The QUIC loop waits for its connections; it is not awaited.
            drop(r.quic);
        }
    }

    /// Serve until SIGTERM or SIGINT: reload on SIGHUP, on `POST /reload` and when certificate
    /// files change; then stop the listeners and drain every generation's connections.
    pub(crate) async fn run(mut self, mut requests: mpsc::Receiver<ReloadRequest>) -> Duration {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int, mut hup) =
            match (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup())) {
                (Ok(t), Ok(i), Ok(h)) => (t, i, h),
                _ => {
                    tracing::error!("cannot install signal handlers: stopping on Ctrl-C only, no reload");
                    let _ = tokio::signal::ctrl_c().await;
                    return self.stop();
                }
            };
        let mut poll = tokio::time::interval(CERT_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        crate::io::notify::ready();
        loop {
            let (why, reply) = tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => ("SIGHUP", None),
                Some(r) = requests.recv() => ("POST /reload", Some(r)),
                _ = poll.tick() => {
                    if !self.certificates_changed() {
                        continue;
                    }
                    ("a certificate or key file changed", None)
                }
            };
            crate::io::notify::reloading();
            let outcome = self.reload().await;
            match &outcome {
                Ok(what) => tracing::info!(why, "{what}"),
                Err(e) => {
                    // Not again for the same files: a certificate written before its key is
                    // read again when the key changes too.
                    self.stamps = stamps(&self.live.borrow().state.cfg);
                    tracing::error!(why, "reload refused, the running configuration keeps serving: {e}");
                }
            }
            crate::io::notify::ready();
            if let Some(r) = reply {
                let _ = r.send(outcome);
            }
        }
        self.stop()
    }

    /// Stop every listener and ask every generation's connections to drain; the time they
    /// have.
    fn stop(self) -> Duration {
        crate::io::notify::stopping();
        let drain = self.live.borrow().state.cfg.timeouts.drain;
        tracing::info!(?drain, "shutting down: no new connections, draining open ones");
        for r in self.listeners.values() {
            let _ = r.close.send(true);
        }
        for s in &self.stops {
            s.send_replace(Stop::Drain);
        }
        drain
    }
}

/// A listener's sockets, bound.
struct Bound {
    tcp: tokio::net::TcpListener,
    tls: Option<crate::io::listen::TlsSide>,
    quic: Option<crate::io::h3::Listener>,
}

async fn bind(key: Key, g: &Generation) -> Result<Bound, String> {
    let tcp =
        tokio::net::TcpListener::bind(key.addr).await.map_err(|e| format!("cannot listen on {}: {e}", key.addr))?;
    let local = tcp.local_addr().map_err(|e| e.to_string())?;
    // HTTP/3 on UDP at the same address and port (the TCP port, when the file asked for port
    // 0), advertised on the TCP side with Alt-Svc (RFC 9114 §3.1.1, RFC 7838).
    let quic = match g.quic_tls.as_ref().filter(|_| key.quic) {
        Some(q) => Some(crate::io::h3::endpoint(local, q.clone(), &g.state.cfg)?),
        None => None,
    };
    let alt_svc = quic
        .as_ref()
        .and_then(|_| ::http::HeaderValue::from_str(&format!("h3=\":{}\"; ma=86400", local.port())).ok())
        .map(crate::app::respond::AltSvc::new);
    let what = match (key.tls, &quic) {
        (true, Some(_)) => format!("https://{local} (h2, http/1.1; h3 on UDP {local})"),
        (true, None) => format!("https://{local} (h2, http/1.1)"),
        _ => format!("http://{local} (http/1.1, h2c prior knowledge)"),
    };
    tracing::info!("listening on {what}");
    println!("sluice: listening on {what}");
    let tls = key.tls.then(|| crate::io::listen::TlsSide { port: local.port(), alt_svc });
    Ok(Bound { tcp, tls, quic })
}

/// A generation for `cfg`, taking over what `previous` shares (see `State::after`), and the
/// sender of its stop signal.
fn generation(cfg: Config, previous: Option<&State>) -> Result<(Generation, watch::Sender<Stop>), String> {
    let served =
        if cfg.listeners.iter().any(|l| l.tls) { load_certificates(&cfg, previous.is_none())? } else { Vec::new() };
    let certs: Vec<sluice_tls::certs::LoadedCert> = served.iter().map(|s| s.cert.clone()).collect();
    // The ACME certificates come first for their names; TLS-ALPN-01 validations are answered
    // on TCP when that is the challenge (RFC 8737 §3).
    let dynamic = Some(crate::acme::shared().certs.clone());
    let alpn: &[&[u8]] = match &cfg.acme {
        Some(a) if a.challenge == crate::config::acme::Challenge::TlsAlpn01 => {
            &[b"h2", b"http/1.1", sluice_tls::certs::ACME_TLS_ALPN]
        }
        _ => &[b"h2", b"http/1.1"],
    };
    // Session-ticket keys from the data directory: kept across reloads, and shared by every
    // instance that shares the directory (a ticket from one resumes on another).
    let tickets = || Some(sluice_tls::tickets::for_dir(&cfg.data_dir) as Arc<dyn rustls::server::ProducesTickets>);
    let tls = if certs.is_empty() {
        None
    } else {
        Some(sluice_tls::certs::server_config_with(&certs, alpn, dynamic.clone(), tickets())?)
    };
    let quic_tls = if certs.is_empty() || !cfg.quic.enabled {
        None
    } else {
        Some(sluice_tls::certs::server_config_with(&certs, &[b"h3"], dynamic, tickets())?)
    };
    let state = Arc::new(State::after(cfg, previous));
    let (stop_tx, stop) = watch::channel(Stop::Run);
    Ok((Generation { state, certs: Arc::new(served), tls, quic_tls, stop }, stop_tx))
}

/// The configured certificate and key files with their size and modification time.
fn stamps(cfg: &Config) -> Vec<(PathBuf, Option<(SystemTime, u64)>)> {
    cfg.certificates
        .iter()
        .flat_map(|c| [c.cert.clone(), c.key.clone()])
        .flatten()
        .map(|p| {
            let s = stamp(&p);
            (p, s)
        })
        .collect()
}

fn stamp(p: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Load every configured certificate (generating the self-signed default where needed) with
/// the origin set it announces; prints each certificate's fingerprint.
fn load_certificates(cfg: &Config, first: bool) -> Result<Vec<Arc<ServedCert>>, String> {
    // At start-up on standard output; on a reload in the log (standard output carries the
    // access log by then).
    let say = |line: String| if first { println!("sluice: {line}") } else { tracing::info!("{line}") };
    let mut certs = Vec::new();
    for c in &cfg.certificates {
        let (cert, key) = match (&c.cert, &c.key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            _ => {
                let (cert, key, created) = sluice_tls::certs::ensure_self_signed(&cfg.data_dir).map_err(|e| {
                    format!("cannot create the self-signed certificate in {}: {e}", cfg.data_dir.display())
                })?;
                if created {
                    say(format!(
                        "generated a self-signed certificate for localhost, 127.0.0.1, ::1 in {}",
                        cert.display()
                    ));
                }
                (cert, key)
            }
        };
        let loaded = sluice_tls::certs::load_cert(&cert, &key)?;
        say(format!(
            "certificate {} ({}) SHA-256 {}",
            cert.display(),
            loaded.dns_names.join(", "),
            loaded.fingerprint()
        ));
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
            say(format!("certificate {} announces ORIGIN {}", cert.display(), names.join(", ")));
        }
        // The generated certificate is for trying things out (clients skip verification): its
        // names are not enforced with 421s.
        let enforce = c.cert.is_some();
        certs.push(Arc::new(ServedCert { cert: loaded, origins, enforce }));
    }
    Ok(certs)
}
