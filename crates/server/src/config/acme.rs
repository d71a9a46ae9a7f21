//! `[acme]` and a site's `tls`: which names get certificates from an ACME CA (RFC 8555), from
//! which CA, by which challenge. See docs/configuration.md#acme.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Listener, Site, Source};

/// Let's Encrypt's production directory, the default CA.
pub(crate) const LETSENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory (`directory = "letsencrypt-staging"`).
pub(crate) const LETSENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// Top-level domains that no public CA issues for (RFC 2606, RFC 6761, RFC 6762, RFC 8375,
/// RFC 9476 and the ICANN-reserved `.internal`): a site named under one is never given to ACME
/// by default.
const RESERVED_TLDS: [&str; 10] =
    ["test", "example", "invalid", "localhost", "local", "internal", "lan", "arpa", "onion", "alt"];

/// The challenge Sluice answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Challenge {
    /// TLS-ALPN-01 (RFC 8737): answered by the TLS listener itself.
    TlsAlpn01,
    /// HTTP-01 (RFC 8555 §8.3): answered on the cleartext listener.
    Http01,
}

/// The key of the certificates ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyType {
    EcdsaP256,
    EcdsaP384,
}

/// `[acme]`, with the certificates to order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acme {
    /// The CA's directory URL.
    pub(crate) directory: String,
    /// `mailto:` contact for the account.
    pub(crate) email: Option<String>,
    /// External Account Binding (RFC 8555 §7.3.4): key id and the HMAC key.
    pub(crate) eab: Option<(String, Vec<u8>)>,
    pub(crate) key_type: KeyType,
    pub(crate) challenge: Challenge,
    /// A PEM root the CA's own HTTPS is verified with (a private or test CA), beside the
    /// system's roots.
    pub(crate) ca_root: Option<PathBuf>,
    /// One certificate per site: its host names.
    pub(crate) orders: Vec<Vec<String>>,
    /// How often a kept certificate is looked at again: its renewal information asked anew
    /// (RFC 9773 §4.3 suggests polling; Let's Encrypt answers with a Retry-After of 6 hours).
    pub(crate) check: std::time::Duration,
    /// The TLS port that cleartext requests to a name with a certificate are redirected to.
    pub(crate) https_port: u16,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAcme {
    enabled: Option<bool>,
    directory: Option<Spanned<String>>,
    email: Option<Spanned<String>>,
    eab_kid: Option<Spanned<String>>,
    eab_hmac_key: Option<Spanned<String>>,
    key_type: Option<Spanned<String>>,
    challenge: Option<Spanned<String>>,
    ca_root: Option<Spanned<String>>,
    check_secs: Option<Spanned<u64>>,
}

/// Whether a configured host could get a certificate from a public CA: a DNS name of two or
/// more labels, not an IP literal, not under a reserved top-level domain.
pub(crate) fn public_name(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() || !host.contains('.') {
        return false;
    }
    let tld = host.rsplit('.').next().unwrap_or("");
    !RESERVED_TLDS.contains(&tld) && !tld.bytes().all(|b| b.is_ascii_digit())
}

/// `[acme]` and the sites' `tls`, validated. `tls` is each site's setting with its span
/// (`None`: not set). A site with `tls = "acme"` orders for all its hosts; a site without `tls`
/// orders by default when every host is a [`public_name`] and no configured certificate covers
/// them. `covered(host)`: whether a `[[certificate]]` covers it.
pub(super) fn acme(
    src: &Source<'_>,
    raw: &RawAcme,
    sites: &[Site],
    tls: &[Option<Spanned<String>>],
    listeners: &[Listener],
    covered: &dyn Fn(&str) -> bool,
) -> Result<Option<Acme>, ConfigError> {
    let Some(https) = listeners.iter().find(|l| l.tls) else {
        if let Some(t) = tls.iter().flatten().find(|t| t.get_ref() == "acme") {
            return Err(src.err(t.span(), "`tls = \"acme\"` needs a [[listener]] with `tls = true`"));
        }
        return Ok(None);
    };
    let mut orders = Vec::new();
    for (site, t) in sites.iter().zip(tls) {
        let explicit = match t {
            None => false,
            Some(t) => match t.get_ref().as_str() {
                "acme" => true,
                "auto" => false,
                "manual" => continue,
                other => {
                    return Err(src.err(
                        t.span(),
                        format!("`tls` is \"acme\", \"manual\" or \"auto\" (the default), not \"{other}\""),
                    ))
                }
            },
        };
        if explicit {
            let t = t.as_ref().map(|t| t.span()).unwrap_or_default();
            if site.hosts.is_empty() {
                return Err(src.err(t, "`tls = \"acme\"` needs `hosts`: a CA certifies names"));
            }
            // A private CA may certify a reserved domain (`.internal`); no CA certifies these.
            if let Some(h) = site
                .hosts
                .iter()
                .find(|h| h.parse::<std::net::IpAddr>().is_ok() || !h.contains('.') || h.ends_with(".localhost"))
            {
                return Err(src.err(
                    t,
                    format!(
                        "`tls = \"acme\"`: a CA does not certify `{h}` (an IP address, a single label or localhost)"
                    ),
                ));
            }
        } else if raw.enabled == Some(false)
            || site.hosts.is_empty()
            || !site.hosts.iter().all(|h| public_name(h))
            || site.hosts.iter().any(|h| covered(h))
        {
            continue;
        }
        orders.push(site.hosts.clone());
    }
    if raw.enabled == Some(false) {
        if let Some(t) = tls.iter().flatten().find(|t| t.get_ref() == "acme") {
            return Err(src.err(t.span(), "`tls = \"acme\"` with `[acme] enabled = false`"));
        }
    }
    if orders.is_empty() {
        return Ok(None);
    }
    let directory = match &raw.directory {
        None => LETSENCRYPT.to_string(),
        Some(d) => match d.get_ref().as_str() {
            "letsencrypt" => LETSENCRYPT.to_string(),
            "letsencrypt-staging" => LETSENCRYPT_STAGING.to_string(),
            url if url.starts_with("https://") && url.len() > "https://".len() => url.to_string(),
            other => {
                return Err(src.err(
                    d.span(),
                    format!(
                        "`directory` is an https:// URL, \"letsencrypt\" or \"letsencrypt-staging\", not `{other}`"
                    ),
                ))
            }
        },
    };
    let email = match &raw.email {
        None => None,
        Some(e) if !e.get_ref().contains('@') || e.get_ref().contains([' ', ',']) => {
            return Err(src.err(e.span(), format!("`email` is one address, not `{}`", e.get_ref())))
        }
        Some(e) => Some(e.get_ref().clone()),
    };
    let eab = match (&raw.eab_kid, &raw.eab_hmac_key) {
        (None, None) => None,
        (Some(kid), Some(key)) => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(key.get_ref().trim_end_matches('='))
                .map_err(|e| src.err(key.span(), format!("`eab_hmac_key` is not base64url: {e}")))?;
            Some((kid.get_ref().clone(), bytes))
        }
        (Some(s), None) | (None, Some(s)) => {
            return Err(src.err(s.span(), "External Account Binding needs both `eab_kid` and `eab_hmac_key`"))
        }
    };
    let key_type = match raw.key_type.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
        None | Some(("ecdsa-p256", _)) => KeyType::EcdsaP256,
        Some(("ecdsa-p384", _)) => KeyType::EcdsaP384,
        Some((other, span)) => {
            return Err(src.err(span, format!("`key_type` is \"ecdsa-p256\" or \"ecdsa-p384\", not \"{other}\"")))
        }
    };
    let challenge = match raw.challenge.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
        None | Some(("tls-alpn-01", _)) => Challenge::TlsAlpn01,
        Some(("http-01", span)) => {
            if !listeners.iter().any(|l| !l.tls) {
                return Err(src.err(span, "`challenge = \"http-01\"` needs a cleartext [[listener]] (port 80)"));
            }
            Challenge::Http01
        }
        Some((other, span)) => {
            return Err(src.err(span, format!("`challenge` is \"tls-alpn-01\" or \"http-01\", not \"{other}\"")))
        }
    };
    let ca_root = raw.ca_root.as_ref().map(|p| src.path(p.get_ref()));
    let check = std::time::Duration::from_secs(super::bounded(src, &raw.check_secs, "check_secs", 1, 86_400, 21_600)?);
    Ok(Some(Acme { directory, email, eab, key_type, challenge, ca_root, orders, check, https_port: https.addr.port() }))
}

#[cfg(test)]
mod tests {
    use super::public_name;

    #[test]
    fn public_names() {
        for n in ["example.com", "www.example.org", "a.b.co.uk"] {
            assert!(public_name(n), "{n}");
        }
        for n in
            ["localhost", "app.example", "x.test", "127.0.0.1", "::1", "intranet", "a.local", "1.2.3.4", "x.internal"]
        {
            assert!(!public_name(n), "{n}");
        }
    }
}
