//! Automatic HTTPS: certificates from an ACME CA (RFC 8555), obtained at start-up and renewed
//! without a restart. The protocol is instant-acme's; what is here is when to order, how the
//! challenges are answered, and where the results are kept.
//!
//! - One task per certificate (`[acme]` orders one per site) keeps it: a stored certificate is
//!   served at once (a restart does not contact the CA); renewal follows the CA's renewal
//!   information (RFC 9773) when it offers it, at a random instant of its suggested window,
//!   else at two thirds of the lifetime. A failure is logged and tried again after a back-off
//!   with jitter; what was served keeps being served.
//! - Challenges: TLS-ALPN-01 (RFC 8737) is answered by the TLS listeners, which present the
//!   challenge certificate to a handshake that offers only `acme-tls/1`
//!   (`sluice_tls::certs::Dynamic`); HTTP-01 (RFC 8555 §8.3) by the cleartext listeners, which
//!   also redirect every other request for a name that has its certificate to https.
//! - Storage: `store::Storage`, files under the data directory by default; an order runs under
//!   the storage's lock, so processes sharing one directory order once.

pub(crate) mod store;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::CertificateDer;
use sluice_tls::certs::{Dynamic, LoadedCert};

use crate::config::acme::{Acme, Challenge, KeyType};
use crate::message::Response;
use store::{FileStore, Storage};

/// How long an order may hold the storage's lock; a holder that dies leaves it to expire.
const LEASE: Duration = Duration::from_secs(600);
/// Back-off after a failure: doubling from the first, up to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(6 * 3600));
/// How long the CA has to validate the challenges and to issue.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a process that found the lock held looks at the storage for the other's result.
const LOCK_POLL: Duration = Duration::from_secs(2);

/// What the listeners answer with while ACME runs: the certificates obtained, the
/// TLS-ALPN-01 challenge certificates, the HTTP-01 tokens, and where plain requests for a name
/// with its certificate are redirected.
#[derive(Default)]
pub(crate) struct Shared {
    /// Obtained certificates and challenge certificates, shared by every TLS configuration.
    pub(crate) certs: Arc<Dynamic>,
    /// HTTP-01: token → key authorization.
    http01: RwLock<HashMap<String, String>>,
    /// The names ACME keeps, and the port their https redirect goes to.
    managed: RwLock<(Vec<String>, u16)>,
    /// Orders and renewals that failed (`sluice_acme_failures_total`).
    failures: std::sync::atomic::AtomicU64,
    /// The certificate served per first name: its notAfter, unix seconds.
    expiry: RwLock<HashMap<String, u64>>,
}

static SHARED: LazyLock<Shared> = LazyLock::new(Shared::default);

/// The process's ACME state (there is one certificate store per process).
pub(crate) fn shared() -> &'static Shared {
    &SHARED
}

/// The ACME metrics families, for `/metrics`.
pub(crate) fn families() -> Vec<crate::message::metrics::Family> {
    use crate::message::metrics::{Family, Members};
    let s = shared();
    if !s.active() {
        return Vec::new();
    }
    let expiry = s.expiry.read().unwrap_or_else(|e| e.into_inner());
    let mut certs: Vec<_> = expiry.iter().map(|(n, t)| (vec![("name", n.clone())], *t as i64)).collect();
    certs.sort();
    vec![
        Family {
            name: "acme_failures",
            help: "ACME orders and renewals that failed (each is tried again after a back-off)",
            members: Members::Counters(vec![(Vec::new(), s.failures.load(std::sync::atomic::Ordering::Relaxed))]),
        },
        Family {
            name: "acme_certificate_expiry_seconds",
            help: "The notAfter of the certificate ACME keeps for a site (by its first name), unix seconds",
            members: Members::Gauges(certs),
        },
    ]
}

impl Shared {
    /// Whether ACME keeps any name (a cheap test before [`Shared::cleartext`]).
    pub(crate) fn active(&self) -> bool {
        !self.managed.read().unwrap_or_else(|e| e.into_inner()).0.is_empty()
    }

    /// The answer to a cleartext request, if ACME has one: an HTTP-01 key authorization, or a
    /// redirect to https for a name that has its certificate (RFC 9110 §15.4.9, 308 keeps the
    /// method).
    pub(crate) fn cleartext(&self, authority: &str, path: &str, query: Option<&str>) -> Option<Response> {
        let host = crate::config::host_of(authority);
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let port = {
            let managed = self.managed.read().unwrap_or_else(|e| e.into_inner());
            if !managed.0.contains(&host) {
                return None;
            }
            managed.1
        };
        if let Some(token) = path.strip_prefix("/.well-known/acme-challenge/") {
            return Some(match self.http01.read().unwrap_or_else(|e| e.into_inner()).get(token) {
                Some(ka) => Response::text(StatusCode::OK, ka.clone()),
                None => Response::text(StatusCode::NOT_FOUND, "no such ACME challenge\n"),
            });
        }
        self.certs.get(&host)?;
        let port = if port == 443 { String::new() } else { format!(":{port}") };
        let location = match query {
            Some(q) => format!("https://{host}{port}{path}?{q}"),
            None => format!("https://{host}{port}{path}"),
        };
        let mut r = Response::text(StatusCode::PERMANENT_REDIRECT, format!("{location}\n"));
        r.headers.insert(http::header::LOCATION, http::HeaderValue::from_str(&location).ok()?);
        Some(r)
    }
}

/// The keepers of the configuration's certificates, one task each, started anew when `[acme]`
/// or its names change (the driver that follows reloads calls [`Keepers::apply`]).
#[derive(Default)]
pub(crate) struct Keepers {
    current: Option<Acme>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Keepers {
    /// Keep what `want` asks for, storing under `data_dir`.
    pub(crate) fn apply(&mut self, want: Option<&Acme>, data_dir: &std::path::Path) {
        if want == self.current.as_ref() {
            return;
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        let s = shared();
        // A name no longer kept by ACME is served from the configuration again.
        let orders = want.map(|a| a.orders.clone()).unwrap_or_default();
        s.certs.retain(|c| orders.iter().any(|o| o.iter().all(|n| c.covers(n))));
        s.expiry.write().unwrap_or_else(|e| e.into_inner()).retain(|n, _| orders.iter().any(|o| o[0] == *n));
        match want {
            None => *s.managed.write().unwrap_or_else(|e| e.into_inner()) = (Vec::new(), 0),
            Some(a) => {
                let names: Vec<String> = a.orders.iter().flatten().cloned().collect();
                *s.managed.write().unwrap_or_else(|e| e.into_inner()) = (names, a.https_port);
                let store: Arc<dyn Storage> = Arc::new(FileStore::new(data_dir.join("acme")));
                for names in &a.orders {
                    tracing::info!(
                        "acme: keeping a certificate for {} from {} ({})",
                        names.join(", "),
                        a.directory,
                        match a.challenge {
                            Challenge::TlsAlpn01 => "tls-alpn-01",
                            Challenge::Http01 => "http-01",
                        }
                    );
                    let keeper = Keeper {
                        acme: a.clone(),
                        names: names.clone(),
                        store: store.clone(),
                        chosen: std::sync::Mutex::new(None),
                    };
                    self.tasks.push(tokio::spawn(keeper.run()));
                }
                let ca = store::ca_dir(&a.directory);
                for key in store.list(&format!("{ca}/certs")).unwrap_or_default() {
                    let name = key.rsplit('/').next().unwrap_or_default();
                    if !a.orders.iter().any(|o| o[0] == name) {
                        tracing::info!("acme: the stored certificate for {name} stays in storage; no site asks for it");
                    }
                }
            }
        }
        self.current = want.cloned();
    }
}

/// One certificate's keeper.
struct Keeper {
    acme: Acme,
    names: Vec<String>,
    store: Arc<dyn Storage>,
    /// The CA's last suggested window (start, end) and the instant chosen in it: chosen once
    /// per window, not drawn again at each look (RFC 9773 §4.2).
    chosen: std::sync::Mutex<Option<(u64, u64, u64)>>,
}

/// A certificate as stored, with what renewal needs.
struct Stored {
    loaded: LoadedCert,
    not_before: u64,
    not_after: u64,
    id: Option<CertificateIdentifier<'static>>,
}

impl Keeper {
    fn ca(&self) -> String {
        store::ca_dir(&self.acme.directory)
    }

    fn key(&self, file: &str) -> String {
        format!("{}/certs/{}/{file}", self.ca(), self.names[0])
    }

    fn lock_key(&self) -> String {
        format!("{}/locks/{}.lock", self.ca(), self.names[0])
    }

    async fn run(self) {
        let mut failures = 0u32;
        let mut installed: Option<Vec<u8>> = None;
        loop {
            let wait = match self.step(&mut installed).await {
                Ok(d) => {
                    failures = 0;
                    d
                }
                Err(e) => {
                    failures += 1;
                    let d = backoff(failures);
                    tracing::error!(
                        "acme: certificate for {}: {e}; trying again in {} s ({} failure(s) in a row); serving what was served",
                        self.names.join(", "),
                        d.as_secs(),
                        failures
                    );
                    shared().failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    d
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Serve the stored certificate, order one when it is missing or due; how long until the
    /// next look.
    async fn step(&self, installed: &mut Option<Vec<u8>>) -> Result<Duration, String> {
        if let Some(s) = self.load()? {
            if installed.as_deref() != Some(&s.loaded.leaf_der[..]) {
                shared().certs.install(s.loaded.clone());
                shared().expiry.write().unwrap_or_else(|e| e.into_inner()).insert(self.names[0].clone(), s.not_after);
                *installed = Some(s.loaded.leaf_der.clone());
                tracing::info!(
                    "acme: serving the stored certificate for {} (valid until {})",
                    self.names.join(", "),
                    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s.not_after))
                );
            }
            let (due, account) = self.renewal_time(&s).await;
            let now = unix_now();
            if due > now {
                return Ok(Duration::from_secs(due - now).min(self.acme.check));
            }
            tracing::info!("acme: renewing the certificate for {}", self.names.join(", "));
            return self.order_locked(Some(&s), account).await.map(|()| Duration::ZERO);
        }
        self.order_locked(None, None).await.map(|()| Duration::ZERO)
    }

    /// The stored certificate, if any and usable.
    fn load(&self) -> Result<Option<Stored>, String> {
        let io = |e: std::io::Error| format!("storage: {e}");
        let (Some(chain), Some(key)) =
            (self.store.load(&self.key("cert.pem")).map_err(io)?, self.store.load(&self.key("key.pem")).map_err(io)?)
        else {
            return Ok(None);
        };
        let loaded = match sluice_tls::certs::load_pem(&chain, &key) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("acme: the stored certificate for {} is unusable ({e}): ordering anew", self.names[0]);
                return Ok(None);
            }
        };
        if self.names.iter().any(|n| !loaded.covers(n)) {
            // The site's names changed: a new certificate for the new set.
            return Ok(None);
        }
        let (not_before, not_after) = validity(&loaded.leaf_der)?;
        if not_after <= unix_now() {
            return Ok(None);
        }
        let id = CertificateIdentifier::try_from(&CertificateDer::from(loaded.leaf_der.clone()))
            .ok()
            .map(CertificateIdentifier::into_owned);
        Ok(Some(Stored { loaded, not_before, not_after, id }))
    }

    /// When to renew `s` (unix seconds): a random instant in the CA's suggested window (RFC
    /// 9773 §4.2) when it has renewal information, else two thirds into the lifetime. The
    /// account is returned when it had to be loaded for the question.
    async fn renewal_time(&self, s: &Stored) -> (u64, Option<Account>) {
        let fallback = s.not_before + s.not_after.saturating_sub(s.not_before) * 2 / 3;
        let Some(id) = &s.id else { return (fallback, None) };
        let Ok(account) = self.account().await else { return (fallback, None) };
        match account.renewal_info(id).await {
            Ok((info, _retry_after)) => {
                let start = info.suggested_window.start.unix_timestamp().max(0) as u64;
                let end = (info.suggested_window.end.unix_timestamp().max(0) as u64).max(start);
                let mut chosen = self.chosen.lock().unwrap_or_else(|e| e.into_inner());
                let at = match *chosen {
                    Some((s, e, at)) if (s, e) == (start, end) => at,
                    _ => start + jitter(end - start + 1),
                };
                *chosen = Some((start, end, at));
                tracing::debug!("acme: renewal window for {}: {start}..{end}, renewing at {at}", self.names[0]);
                (at.min(s.not_after), Some(account))
            }
            Err(e) => {
                tracing::debug!("acme: no renewal information for {} ({e})", self.names[0]);
                (fallback, Some(account))
            }
        }
    }

    /// Order under the storage's lock; a process that finds it held waits for the other's
    /// certificate instead.
    async fn order_locked(&self, old: Option<&Stored>, account: Option<Account>) -> Result<(), String> {
        let lock = self.lock_key();
        let deadline = tokio::time::Instant::now() + LEASE;
        loop {
            if self.store.lock(&lock, LEASE).map_err(|e| format!("storage lock: {e}"))? {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err("the storage's order lock stayed held".into());
            }
            tracing::info!("acme: another process is ordering the certificate for {}; waiting", self.names[0]);
            tokio::time::sleep(LOCK_POLL).await;
            if let Some(s) = self.load()? {
                if old.is_none_or(|o| o.loaded.leaf_der != s.loaded.leaf_der) {
                    return Ok(());
                }
            }
        }
        let _unlock = Unlock { store: &*self.store, key: lock };
        // Another process may have finished between our look and the lock.
        if let Some(s) = self.load()? {
            if old.is_none_or(|o| o.loaded.leaf_der != s.loaded.leaf_der) {
                return Ok(());
            }
        }
        let account = match account {
            Some(a) => a,
            None => self.account().await?,
        };
        let started = std::time::Instant::now();
        let (chain, key) = self.order(&account, old).await?;
        let loaded = sluice_tls::certs::load_pem(chain.as_bytes(), key.as_bytes())
            .map_err(|e| format!("the CA's certificate: {e}"))?;
        self.store.store(&self.key("key.pem"), key.as_bytes()).map_err(|e| format!("storage: {e}"))?;
        self.store.store(&self.key("cert.pem"), chain.as_bytes()).map_err(|e| format!("storage: {e}"))?;
        let (_, not_after) = validity(&loaded.leaf_der)?;
        tracing::info!(
            "acme: obtained a certificate for {} in {:.1} s (valid until {})",
            self.names.join(", "),
            started.elapsed().as_secs_f64(),
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(not_after))
        );
        Ok(())
    }

    /// The stored account, or a new one (stored).
    async fn account(&self) -> Result<Account, String> {
        // One account per CA: the keepers of one process create it once, and a second process
        // waits on the storage's lock for it.
        static CREATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = CREATING.lock().await;
        let key = format!("{}/account.json", self.ca());
        let lock = format!("{}/locks/account.lock", self.ca());
        let deadline = tokio::time::Instant::now() + LEASE;
        let mut held = false;
        loop {
            if self.store.lock(&lock, LEASE).map_err(|e| format!("storage lock: {e}"))? {
                held = true;
                break;
            }
            if self.store.load(&key).map_err(|e| format!("storage: {e}"))?.is_some()
                || tokio::time::Instant::now() > deadline
            {
                break;
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
        let _unlock = held.then(|| Unlock { store: &*self.store, key: lock });
        let builder = || match &self.acme.ca_root {
            Some(root) => Account::builder_with_root(root).map_err(|e| format!("CA root {}: {e}", root.display())),
            None => Account::builder().map_err(|e| format!("HTTP client: {e}")),
        };
        if let Some(json) = self.store.load(&key).map_err(|e| format!("storage: {e}"))? {
            let creds: AccountCredentials =
                serde_json::from_slice(&json).map_err(|e| format!("stored account {key}: {e}"))?;
            return builder()?
                .from_credentials(creds)
                .await
                .map_err(|e| format!("account at {}: {e}", self.acme.directory));
        }
        let contact = self.acme.email.as_ref().map(|e| format!("mailto:{e}"));
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let eab = self.acme.eab.as_ref().map(|(kid, hmac)| ExternalAccountKey::new(kid.clone(), hmac));
        let (account, creds) = builder()?
            .create(
                &NewAccount { contact: &contacts, terms_of_service_agreed: true, only_return_existing: false },
                self.acme.directory.clone(),
                eab.as_ref(),
            )
            .await
            .map_err(|e| format!("creating an account at {}: {e}", self.acme.directory))?;
        let json = serde_json::to_vec(&creds).map_err(|e| e.to_string())?;
        self.store.store(&key, &json).map_err(|e| format!("storage: {e}"))?;
        tracing::info!("acme: created account {} at {}", account.id(), self.acme.directory);
        Ok(account)
    }

    /// One order, its challenges answered: the chain and the key (PEM).
    async fn order(&self, account: &Account, old: Option<&Stored>) -> Result<(String, String), String> {
        let ids: Vec<Identifier> = self.names.iter().map(|n| Identifier::Dns(n.clone())).collect();
        let mut new = NewOrder::new(&ids);
        let replaces = old.and_then(|o| o.id.clone());
        if let Some(id) = replaces.clone() {
            // RFC 9773 §5: the renewal names the certificate it replaces (a CA without ARI
            // gets a plain order).
            new = new.replaces(id);
        }
        let mut order = match account.new_order(&new).await {
            Err(instant_acme::Error::Unsupported(_)) => account.new_order(&NewOrder::new(&ids)).await,
            Ok(o) => {
                if let Some(id) = replaces {
                    tracing::info!("acme: the order for {} names the certificate it replaces ({id})", self.names[0]);
                }
                Ok(o)
            }
            r => r,
        }
        .map_err(|e| format!("new order: {e}"))?;
        let mut answered = Answered::default();
        let mut auths = order.authorizations();
        while let Some(a) = auths.next().await {
            let mut a = a.map_err(|e| format!("authorization: {e}"))?;
            match a.status {
                AuthorizationStatus::Valid => continue,
                AuthorizationStatus::Pending => {}
                s => return Err(format!("authorization for {} is {s:?}", a.identifier())),
            }
            let name = a.identifier().to_string();
            let preferred = match self.acme.challenge {
                Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
                Challenge::Http01 => ChallengeType::Http01,
            };
            let Some(mut ch) = a.challenge(preferred.clone()) else {
                return Err(format!("the CA offers no {preferred:?} challenge for {name}"));
            };
            let ka = ch.key_authorization();
            match preferred {
                ChallengeType::TlsAlpn01 => {
                    shared().certs.set_challenge(&name, ka.digest().as_ref())?;
                    answered.alpn.push(name.clone());
                }
                _ => {
                    shared()
                        .http01
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(ch.token.clone(), ka.as_str().into());
                    answered.tokens.push(ch.token.clone());
                }
            }
            ch.set_ready().await.map_err(|e| format!("challenge for {name}: {e}"))?;
        }
        let policy = RetryPolicy::new().timeout(ORDER_TIMEOUT);
        let status = order.poll_ready(&policy).await;
        if !matches!(status, Ok(OrderStatus::Ready)) {
            // Say why: the failed challenges' errors.
            let mut why = Vec::new();
            let mut auths = order.authorizations();
            while let Some(Ok(a)) = auths.next().await {
                for c in a.challenges.iter().filter_map(|c| c.error.as_ref()) {
                    why.push(format!("{}: {c}", a.identifier()));
                }
            }
            let head = match status {
                Ok(s) => format!("validation: the order is {s:?}"),
                Err(e) => format!("validation: {e}"),
            };
            return Err(if why.is_empty() { head } else { format!("{head}; {}", why.join("; ")) });
        }
        let key = match self.acme.key_type {
            KeyType::EcdsaP256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            KeyType::EcdsaP384 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
        }
        .map_err(|e| format!("key: {e}"))?;
        let mut params = rcgen::CertificateParams::new(self.names.clone()).map_err(|e| format!("CSR: {e}"))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key).map_err(|e| format!("CSR: {e}"))?;
        order.finalize_csr(csr.der()).await.map_err(|e| format!("finalize: {e}"))?;
        let chain = order.poll_certificate(&policy).await.map_err(|e| format!("certificate: {e}"))?;
        drop(answered);
        Ok((chain, key.serialize_pem()))
    }
}

/// Challenge answers taken down when the order ends, however it ends.
#[derive(Default)]
struct Answered {
    alpn: Vec<String>,
    tokens: Vec<String>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        for n in &self.alpn {
            shared().certs.clear_challenge(n);
        }
        let mut map = shared().http01.write().unwrap_or_else(|e| e.into_inner());
        for t in &self.tokens {
            map.remove(t);
        }
    }
}

/// The storage's lock given back when the order ends (or its task is stopped by a reload).
struct Unlock<'a> {
    store: &'a dyn Storage,
    key: String,
}

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.store.unlock(&self.key) {
            tracing::warn!("acme: giving back the lock {}: {e}", self.key);
        }
    }
}

/// notBefore and notAfter of a DER certificate, unix seconds.
fn validity(der: &[u8]) -> Result<(u64, u64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("certificate: {e}"))?;
    let v = cert.validity();
    Ok((v.not_before.timestamp().max(0) as u64, v.not_after.timestamp().max(0) as u64))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// A number in `0..n` from the clock's nanoseconds: spreads renewals and retries, nothing
/// secret depends on it.
fn jitter(n: u64) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos() as u64;
    let x = nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(std::process::id());
    x % n.max(1)
}

/// The wait after `failures` failures in a row: doubling from 30 s to 6 h, each between 75 %
/// and 100 % of that (jitter: processes that failed together do not retry together).
fn backoff(failures: u32) -> Duration {
    let full = BACKOFF.0.saturating_mul(1 << failures.saturating_sub(1).min(20)).min(BACKOFF.1);
    let ms = full.as_millis() as u64;
    Duration::from_millis(ms - jitter(ms / 4 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling_with_jitter() {
        for (n, secs) in [(1, 30), (2, 60), (3, 120), (12, 6 * 3600), (40, 6 * 3600)] {
            let d = backoff(n);
            assert!(d <= Duration::from_secs(secs) && d >= Duration::from_secs(secs) * 3 / 4, "{n}: {d:?}");
        }
    }

    #[test]
    fn cleartext_answers_only_managed_names() {
        let s = Shared::default();
        *s.managed.write().unwrap() = (vec!["www.example.com".into()], 8443);
        s.http01.write().unwrap().insert("tok".into(), "tok.thumb".into());
        let r = s.cleartext("www.example.com:8080", "/.well-known/acme-challenge/tok", None).unwrap();
        assert_eq!(r.status, StatusCode::OK);
        let r = s.cleartext("www.example.com", "/.well-known/acme-challenge/other", None).unwrap();
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert!(s.cleartext("other.example.com", "/.well-known/acme-challenge/tok", None).is_none());
        // No certificate yet: no redirect.
        assert!(s.cleartext("www.example.com", "/page", None).is_none());
        let ck = rcgen::generate_simple_self_signed(vec!["www.example.com".to_string()]).unwrap();
        let loaded =
            sluice_tls::certs::load_pem(ck.cert.pem().as_bytes(), ck.signing_key.serialize_pem().as_bytes()).unwrap();
        s.certs.install(loaded);
        let r = s.cleartext("WWW.example.com.", "/page", Some("a=1")).unwrap();
        assert_eq!(r.status, StatusCode::PERMANENT_REDIRECT);
        assert_eq!(r.headers[http::header::LOCATION], "https://www.example.com:8443/page?a=1");
    }
}
