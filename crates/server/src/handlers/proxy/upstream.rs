//! An upstream's servers and their live state: passive and active health, the balancing
//! choice, the HTTP/1.1 connection pool and the shared HTTP/2 connection, and the count of
//! requests in progress on each server.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::{Blame, ErrorType, ProxyError};
use super::{balance, connect, h1, health, hints};
use crate::config::{Balance, HashKey, ServerAddr, Upstream as UpstreamCfg};
use crate::message::Request;

/// One upstream server's live state.
pub(crate) struct ServerState {
    pub(crate) addr: ServerAddr,
    /// `addr` as text, made once (the JSON access log's `upstream.server`).
    pub(crate) label: Arc<str>,
    weight: u32,
    /// Requests in progress (least-requests balancing).
    active: AtomicUsize,
    /// Idle HTTP/1.1 connections, most recent last.
    idle: Mutex<Vec<IdleH1>>,
    /// The shared HTTP/2 connection.
    h2: tokio::sync::Mutex<Option<sluice_client::H2Mux>>,
    /// Connections open (busy and idle), when `max_connections` bounds them.
    slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Told when a connection goes back to the idle list (requests waiting at the limit).
    returned: tokio::sync::Notify,
    /// Consecutive failed requests (passive health).
    fails: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
    /// Whether `ejected_until` was ever set: the server's usability is read on every request,
    /// and a plain load costs what the lock's two atomic operations cost in a small proxied
    /// response otherwise.
    ever_ejected: AtomicBool,
    /// The active health check's verdict (true when there is none).
    pub(super) healthy: AtomicBool,
    /// What the metrics read of it.
    pub(crate) stats: ServerStats,
}

/// What a server's exchanges add up to, for the metrics.
#[derive(Default)]
pub(crate) struct ServerStats {
    /// Requests sent (attempts, retries included).
    pub(crate) requests: AtomicU64,
    /// Times passive health ejected it.
    pub(crate) ejections: AtomicU64,
    /// HTTP/1.1 connections open (busy and idle); shared with each connection.
    pub(crate) open_h1: Arc<AtomicI64>,
    /// Time from sending a request to its response head, counted per bucket of
    /// `metrics::BUCKETS` (the last: above them), and its sum in microseconds.
    pub(crate) ttfb: [AtomicU64; crate::message::metrics::BUCKETS.len() + 1],
    pub(crate) ttfb_us: AtomicU64,
}

impl ServerStats {
    fn observe_ttfb(&self, d: Duration) {
        self.ttfb[crate::message::metrics::bucket(d)].fetch_add(1, Ordering::Relaxed);
        self.ttfb_us.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl ServerState {
    /// Idle HTTP/1.1 connections now.
    pub(crate) fn idle_count(&self) -> usize {
        lock(&self.idle).len()
    }

    /// Whether the server may be used now: healthy and not ejected.
    pub(crate) fn usable(&self) -> bool {
        self.healthy.load(Ordering::Relaxed) && !self.ejected(Instant::now)
    }

    /// Whether its shared HTTP/2 connection is open.
    pub(crate) fn h2_open(&self) -> bool {
        self.h2.try_lock().is_ok_and(|g| g.as_ref().is_some_and(sluice_client::H2Mux::is_open))
    }
}

impl ServerState {
    /// Whether passive health checks have the server ejected now (`now` is asked only of a
    /// server that was ever ejected: a pick reads no clock while none was).
    fn ejected(&self, now: impl FnOnce() -> Instant) -> bool {
        self.ever_ejected.load(Ordering::Acquire) && lock(&self.ejected_until).is_some_and(|until| now() < until)
    }
}

struct IdleH1 {
    conn: h1::Conn,
    until: Instant,
}

/// Counts a request in progress on a server until dropped.
pub(crate) struct Active(Arc<Upstream>, usize);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.servers[self.1].active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request counted as active on server `.1` while the proxy's future handles it, without a
/// reference count of its own (a clone and a drop, two atomic operations, for every request):
/// [`Counted::keep`] makes it an [`Active`] for a body that outlives that future.
pub(crate) struct Counted<'a>(&'a Upstream, usize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.servers[self.1].active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counted<'_> {
    /// The same count, held by `up` (the upstream this borrows) for as long as it must.
    pub(super) fn keep(self, up: &Arc<Upstream>) -> Active {
        let i = self.1;
        // The count moves to the `Active`: not decremented here.
        std::mem::forget(self);
        Active(up.clone(), i)
    }
}

/// An upstream with its servers' state.
pub(crate) struct Upstream {
    pub(crate) cfg: UpstreamCfg,
    pub(crate) servers: Vec<ServerState>,
    pub(super) name: Arc<str>,
    rr: Mutex<balance::RoundRobin>,
    tick: AtomicUsize,
    pub(super) tls: Option<tokio_rustls::TlsConnector>,
    /// 103 Early Hints learned from this upstream's responses.
    pub(crate) hints: hints::HintCache,
    /// Failures answered to clients, by `ErrorType::index`, and retries.
    pub(crate) errors: [AtomicU64; 12],
    pub(crate) retries: AtomicU64,
}

impl Upstream {
    pub(crate) fn new(cfg: UpstreamCfg) -> Arc<Self> {
        let servers = cfg
            .servers
            .iter()
            .map(|s| ServerState {
                addr: s.addr.clone(),
                label: s.addr.to_string().into(),
                weight: s.weight,
                active: AtomicUsize::new(0),
                idle: Mutex::new(Vec::new()),
                h2: tokio::sync::Mutex::new(None),
                slots: (cfg.max_connections > 0).then(|| Arc::new(tokio::sync::Semaphore::new(cfg.max_connections))),
                returned: tokio::sync::Notify::new(),
                fails: AtomicU32::new(0),
                ejected_until: Mutex::new(None),
                ever_ejected: AtomicBool::new(false),
                healthy: AtomicBool::new(true),
                stats: ServerStats::default(),
            })
            .collect();
        let tls = connect::tls_connector(&cfg);
        Arc::new(Self {
            name: cfg.name.as_str().into(),
            servers,
            rr: Mutex::new(balance::RoundRobin::default()),
            tick: AtomicUsize::new(0),
            tls,
            hints: hints::HintCache::new(hints::MAX_ENTRIES, hints::MAX_BYTES, hints::TTL),
            errors: Default::default(),
            retries: AtomicU64::new(0),
            cfg,
        })
    }

    /// Start the active health checks, if configured (needs a Tokio runtime).
    pub(crate) fn start_health_checks(self: &Arc<Self>) {
        if self.cfg.health.is_some() {
            for i in 0..self.servers.len() {
                tokio::spawn(health::run(Arc::downgrade(self), i));
            }
        }
    }

    fn usable(&self, avoid: &[usize]) -> Vec<bool> {
        let up: Vec<bool> =
            self.servers.iter().map(|s| s.healthy.load(Ordering::Relaxed) && !s.ejected(Instant::now)).collect();
        // Servers already tried are avoided while another is usable.
        let fresh: Vec<bool> = up.iter().enumerate().map(|(i, &u)| u && !avoid.contains(&i)).collect();
        if fresh.iter().any(|&u| u) {
            fresh
        } else {
            up
        }
    }

    pub(super) fn pick(&self, req: &Request, peer: IpAddr, avoid: &[usize]) -> Option<usize> {
        if self.servers.len() == 1 {
            let s = &self.servers[0];
            let up = s.healthy.load(Ordering::Relaxed) && !s.ejected(Instant::now);
            return up.then_some(0);
        }
        let usable = self.usable(avoid);
        let weights: Vec<u32> = self.servers.iter().map(|s| s.weight).collect();
        match &self.cfg.balance {
            Balance::RoundRobin => lock(&self.rr).pick(&weights, &usable),
            Balance::LeastRequests => {
                let active: Vec<usize> = self.servers.iter().map(|s| s.active.load(Ordering::Relaxed)).collect();
                let start = self.tick.fetch_add(1, Ordering::Relaxed);
                balance::least_requests(&weights, &usable, &active, start)
            }
            Balance::Hash(key) => {
                let k: Option<Vec<u8>> = match key {
                    HashKey::ClientIp => Some(peer.to_string().into_bytes()),
                    HashKey::Header(h) => req.headers.get(h).map(|v| v.as_bytes().to_vec()),
                    HashKey::Cookie(name) => cookie(&req.headers, name).map(String::into_bytes),
                };
                match k {
                    Some(k) => balance::rendezvous(&k, &weights, &usable),
                    // No key: round-robin.
                    None => lock(&self.rr).pick(&weights, &usable),
                }
            }
        }
    }

    pub(super) fn begin(&self, i: usize) -> Counted<'_> {
        self.servers[i].active.fetch_add(1, Ordering::Relaxed);
        self.servers[i].stats.requests.fetch_add(1, Ordering::Relaxed);
        Counted(self, i)
    }

    /// The client's answer to a failed proxied request, counted by its error type.
    pub(super) fn fail_response(&self, err: &ProxyError) -> crate::message::Response {
        if !matches!(err.blame, Blame::Client(_)) {
            self.errors[err.kind.index()].fetch_add(1, Ordering::Relaxed);
        }
        err.response(&self.name)
    }

    /// Server `i` answered a request with a head `took` after it was sent.
    pub(super) fn answered(&self, i: usize, took: Duration) {
        self.servers[i].fails.store(0, Ordering::Relaxed);
        self.servers[i].stats.observe_ttfb(took);
    }

    /// A request to server `i` failed in a way that counts against it.
    pub(super) fn failed(&self, i: usize, why: &ProxyError) {
        let s = &self.servers[i];
        let n = s.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if self.cfg.eject_failures > 0 && n >= self.cfg.eject_failures {
            s.fails.store(0, Ordering::Relaxed);
            *lock(&s.ejected_until) = Some(Instant::now() + self.cfg.eject_for);
            s.ever_ejected.store(true, Ordering::Release);
            s.stats.ejections.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %self.name, server = %s.addr, failures = n, last = %why.kind,
                for_secs = self.cfg.eject_for.as_secs(), "upstream server ejected");
        }
    }

    /// An idle HTTP/1.1 connection of server `i` that is ready for a request, if any: within
    /// its keep-alive time and with nothing (not even a close) arrived on it.
    fn take_idle(&self, i: usize) -> Option<h1::Conn> {
        let s = &self.servers[i];
        let now = Instant::now();
        loop {
            let IdleH1 { mut conn, until } = lock(&s.idle).pop()?;
            if until > now && conn.looks_open() {
                conn.reused = true;
                return Some(conn);
            }
        }
    }

    /// An HTTP/1.1 connection to server `i`: an idle one unless `fresh`, else a new one. At
    /// `max_connections`, waits (up to `connect_secs`) for a connection to come back idle or
    /// for one to close.
    pub(super) async fn h1(&self, i: usize, fresh: bool) -> Result<h1::Conn, ProxyError> {
        let s = &self.servers[i];
        let deadline = tokio::time::Instant::now() + self.cfg.connect_timeout;
        let slot = loop {
            if !fresh {
                if let Some(c) = self.take_idle(i) {
                    return Ok(c);
                }
            }
            let Some(sem) = &s.slots else { break None };
            if let Ok(p) = sem.clone().try_acquire_owned() {
                break Some(p);
            }
            tokio::select! {
                p = sem.clone().acquire_owned() => match p {
                    Ok(p) => break Some(p),
                    Err(_) => return Err(ProxyError::new(ErrorType::ConnectionLimitReached, "connection slots closed").blaming(Blame::Nobody)),
                },
                // A connection came back idle (`put_back` stores the wake-up if nobody waits).
                () = s.returned.notified(), if !fresh => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(ProxyError::new(ErrorType::ConnectionLimitReached, "every connection to the server is busy")
                        .blaming(Blame::Nobody));
                }
            }
        };
        // Boxed: connecting (a TLS handshake included) is a large future, and inline it would
        // grow every proxied request's future, reused connection or not.
        let io = Box::pin(connect::transport(&self.cfg, self.tls.as_ref(), &s.addr, self.cfg.connect_timeout)).await?;
        Ok(h1::Conn::new(io, slot).counted(s.stats.open_h1.clone()))
    }

    /// The shared HTTP/2 connection to server `i` (opened when there is none or it closed).
    pub(super) async fn h2(&self, i: usize) -> Result<(sluice_client::H2Mux, bool), ProxyError> {
        let s = &self.servers[i];
        let mut g = s.h2.lock().await;
        if let Some(tx) = g.as_ref().filter(|tx| tx.is_open()) {
            return Ok((tx.clone(), true));
        }
        *g = None;
        let io = connect::transport(&self.cfg, self.tls.as_ref(), &s.addr, self.cfg.connect_timeout).await?;
        let tx = connect::h2(io, self.cfg.connect_timeout).await?;
        *g = Some(tx.clone());
        Ok((tx, false))
    }

    /// Drop server `i`'s shared HTTP/2 connection (it failed): the next request opens one.
    /// Streams still running on it finish there.
    pub(super) fn forget_h2(&self, i: usize) {
        if let Ok(mut g) = self.servers[i].h2.try_lock() {
            *g = None;
        }
    }

    /// Put an HTTP/1.1 connection back in server `i`'s idle list, keeping it at most `keep`.
    pub(super) fn put_back(&self, i: usize, conn: h1::Conn, keep: Duration) {
        if self.cfg.pool_max_idle == 0 {
            return;
        }
        let mut idle = lock(&self.servers[i].idle);
        let now = Instant::now();
        // The oldest are first: the expired ones there go (one with a shorter keep-alive further
        // in goes when `take_idle` reaches it, or when it is oldest), without a pass over all.
        let expired = idle.iter().take_while(|c| c.until <= now).count();
        idle.drain(..expired);
        if idle.len() >= self.cfg.pool_max_idle {
            idle.remove(0);
        }
        idle.push(IdleH1 { conn, until: now + keep });
        drop(idle);
        if self.servers[i].slots.is_some() {
            self.servers[i].returned.notify_one();
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The value of cookie `name` in the request's `Cookie` fields.
fn cookie(h: &http::HeaderMap, name: &str) -> Option<String> {
    h.get_all(http::header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}
