//! Sites and their routes: host names, path prefixes, what serves each, and per-route response
//! header rules.

use std::fs;
use std::path::PathBuf;

use toml::Spanned;

use super::raw::{RawHeaders, RawRoute, RawSite};
use super::{host_name, line_col, Config, ConfigError, Source};

/// A site: host names and the routes that serve them.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// Host names (lower case, no port); empty means "any host" (the default site).
    pub(crate) hosts: Vec<String>,
    /// Routes, longest path prefix first (the router takes the first that matches).
    pub(crate) routes: Vec<Route>,
}

/// One route: requests whose path starts with `path` go to `handler`.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// Path prefix, starting with `/`. `/` matches every path.
    pub(crate) path: String,
    /// What answers.
    pub(crate) handler: RouteHandler,
    /// Rules applied to every response of this route.
    pub(crate) headers: HeaderRules,
    /// `Link` field values sent as a 103 Early Hints response (RFC 8297) to GET requests on
    /// HTTP/2 and HTTP/3 before the handler runs.
    pub(crate) early_hints: Vec<http::HeaderValue>,
    /// Whether responses may be compressed (`[compression]`; `compress = false` turns it off
    /// for the route).
    pub(crate) compress: bool,
}

/// What answers a route's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RouteHandler {
    /// Files under a root directory (the path is resolved below the root as a whole, prefix
    /// included, as nginx's `root`).
    Root(PathBuf),
    /// The built-in demo site.
    Builtin,
    /// The speed-test endpoints: `__down`, `__up`, `__ping` as the path's last segment.
    Speedtest,
    /// The reverse proxy to `Config::upstreams[i]`.
    Proxy(usize),
}

/// Response header rules: `remove` first, then `set` (replaces every value), then `add`
/// (appends a value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HeaderRules {
    pub(crate) set: Vec<(http::HeaderName, http::HeaderValue)>,
    pub(crate) add: Vec<(http::HeaderName, http::HeaderValue)>,
    pub(crate) remove: Vec<http::HeaderName>,
}

impl HeaderRules {
    /// Apply the rules to a response's headers.
    pub(crate) fn apply(&self, headers: &mut http::HeaderMap) {
        for n in &self.remove {
            headers.remove(n);
        }
        for (n, v) in &self.set {
            headers.insert(n.clone(), v.clone());
        }
        for (n, v) in &self.add {
            headers.append(n.clone(), v.clone());
        }
    }

    /// Whether there is nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// Fields a rule may not touch: framing and connection management belong to the protocol
/// drivers (RFC 9110 §7.6.1, RFC 9113 §8.2.2), and a wrong `content-length` would corrupt the
/// response.
const PROTECTED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "proxy-connection",
    "te",
    "trailer",
];

fn header_rules(src: &Source<'_>, raw: Option<&Spanned<RawHeaders>>) -> Result<HeaderRules, ConfigError> {
    let Some(raw) = raw else { return Ok(HeaderRules::default()) };
    let span = raw.span();
    let raw = raw.get_ref();
    let name = |n: &str| -> Result<http::HeaderName, ConfigError> {
        let lower = n.to_ascii_lowercase();
        let h = http::HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| src.err(span.clone(), format!("`{n}` is not a header field name")))?;
        if PROTECTED.contains(&h.as_str()) || h.as_str().starts_with(':') {
            return Err(
                src.err(span.clone(), format!("`{n}` is managed by the server and cannot be changed by a rule"))
            );
        }
        Ok(h)
    };
    let pairs = |m: &std::collections::BTreeMap<String, Spanned<String>>| {
        m.iter()
            .map(|(n, v)| {
                let value = http::HeaderValue::from_str(v.get_ref())
                    .map_err(|_| src.err(v.span(), format!("invalid value for `{n}` (control characters?)")))?;
                Ok((name(n)?, value))
            })
            .collect::<Result<Vec<_>, ConfigError>>()
    };
    Ok(HeaderRules {
        set: pairs(&raw.set)?,
        add: pairs(&raw.add)?,
        remove: raw.remove.iter().map(|n| name(n.get_ref())).collect::<Result<_, _>>()?,
    })
}

/// What a site-level or route-level table names as its handler.
pub(super) struct Handlers<'a> {
    pub(super) root: Option<&'a Spanned<String>>,
    pub(super) builtin: Option<&'a Spanned<bool>>,
    pub(super) speedtest: Option<&'a Spanned<bool>>,
    pub(super) proxy: Option<&'a Spanned<String>>,
}

/// What serves a site-level or route-level table: exactly one of `root`, `builtin = true`,
/// `speedtest = true`, `proxy = "upstream"`; `None` when none is given.
fn handler(
    src: &Source<'_>,
    span: std::ops::Range<usize>,
    h: Handlers<'_>,
    upstreams: &[super::Upstream],
) -> Result<Option<RouteHandler>, ConfigError> {
    let Handlers { root, builtin, speedtest, proxy } = h;
    let builtin = builtin.filter(|b| *b.get_ref());
    let speedtest = speedtest.filter(|b| *b.get_ref());
    let given = usize::from(root.is_some())
        + usize::from(builtin.is_some())
        + usize::from(speedtest.is_some())
        + usize::from(proxy.is_some());
    if given > 1 {
        return Err(src.err(span, "give one of `root`, `builtin = true`, `speedtest = true` or `proxy`, not several"));
    }
    if let Some(p) = proxy {
        return match upstreams.iter().position(|u| u.name == *p.get_ref()) {
            Some(i) => Ok(Some(RouteHandler::Proxy(i))),
            None => Err(src.err(p.span(), format!("no `[[upstream]]` is named `{}`", p.get_ref()))),
        };
    }
    if builtin.is_some() {
        return Ok(Some(RouteHandler::Builtin));
    }
    if speedtest.is_some() {
        return Ok(Some(RouteHandler::Speedtest));
    }
    let Some(root) = root else { return Ok(None) };
    let path = src.path(root.get_ref());
    match fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(Some(RouteHandler::Root(path))),
        Ok(_) => Err(src.err(root.span(), format!("root `{}` is not a directory", path.display()))),
        Err(e) => Err(src.err(root.span(), format!("root directory `{}`: {e}", path.display()))),
    }
}

/// `early_hints = ["</app.css>; rel=preload; as=style", ...]`: each a `Link` field value
/// (RFC 8288 §3) whose target is a URI reference in angle brackets.
fn early_hints(src: &Source<'_>, raw: Option<&Vec<Spanned<String>>>) -> Result<Vec<http::HeaderValue>, ConfigError> {
    raw.into_iter()
        .flatten()
        .map(|v| {
            let text = v.get_ref().trim();
            if !text.starts_with('<') || !text.contains('>') {
                return Err(
                    src.err(v.span(), "an early hint is a Link value such as `</app.css>; rel=preload; as=style`")
                );
            }
            http::HeaderValue::from_str(text).map_err(|_| src.err(v.span(), "an early hint holds control characters"))
        })
        .collect()
}

fn route(src: &Source<'_>, r: &Spanned<RawRoute>, upstreams: &[super::Upstream]) -> Result<Route, ConfigError> {
    let raw = r.get_ref();
    let path = raw.path.get_ref();
    if !path.starts_with('/') || path.contains(['?', '#']) || path.contains("/../") || path.ends_with("/..") {
        return Err(
            src.err(raw.path.span(), format!("route path `{path}` must start with `/` and hold no `?`, `#` or `..`"))
        );
    }
    let named = Handlers {
        root: raw.root.as_ref(),
        builtin: raw.builtin.as_ref(),
        speedtest: raw.speedtest.as_ref(),
        proxy: raw.proxy.as_ref(),
    };
    let handler = handler(src, r.span(), named, upstreams)?.ok_or_else(|| {
        src.err(r.span(), "a route needs `root = \"/path\"`, `builtin = true`, `speedtest = true` or `proxy`")
    })?;
    Ok(Route {
        path: path.clone(),
        handler,
        headers: header_rules(src, raw.headers.as_ref())?,
        early_hints: early_hints(src, raw.early_hints.as_ref())?,
        compress: raw.compress.unwrap_or(true),
    })
}

/// A site's routes: its `[[site.route]]` tables and, when the site itself names a handler, the
/// route `/` (the form every configuration had before routes: a site's `root`/`builtin` is its
/// single route). Sorted longest prefix first.
fn routes(src: &Source<'_>, s: &Spanned<RawSite>, upstreams: &[super::Upstream]) -> Result<Vec<Route>, ConfigError> {
    let r = s.get_ref();
    let mut out: Vec<(Route, usize)> = Vec::new();
    for raw in r.route.iter().flatten() {
        let line = line_col(src.text, raw.span().start).0;
        let route = route(src, raw, upstreams)?;
        if let Some((_, other)) = out.iter().find(|(o, _)| o.path == route.path) {
            return Err(src
                .err(raw.get_ref().path.span(), format!("route `{}` is already defined at line {other}", route.path)));
        }
        out.push((route, line));
    }
    let named = Handlers {
        root: r.root.as_ref(),
        builtin: r.builtin.as_ref(),
        speedtest: r.speedtest.as_ref(),
        proxy: r.proxy.as_ref(),
    };
    if let Some(h) = handler(src, s.span(), named, upstreams)? {
        if let Some((_, other)) = out.iter().find(|(o, _)| o.path == "/") {
            return Err(
                src.err(s.span(), format!("the site names a handler for `/` and so does the route at line {other}"))
            );
        }
        let route = Route {
            path: "/".into(),
            handler: h,
            headers: header_rules(src, r.headers.as_ref())?,
            early_hints: early_hints(src, r.early_hints.as_ref())?,
            compress: r.compress.as_ref().is_none_or(|c| *c.get_ref()),
        };
        out.push((route, 0));
    } else if let Some(h) = &r.headers {
        return Err(
            src.err(h.span(), "site-level `headers` apply to the site's own `root`/`builtin`; put them in a route")
        );
    } else if let Some(h) = r.early_hints.as_ref().and_then(|v| v.first()) {
        return Err(
            src.err(h.span(), "site-level `early_hints` apply to the site's own `root`/`builtin`; put them in a route")
        );
    } else if let Some(c) = &r.compress {
        return Err(
            src.err(c.span(), "site-level `compress` applies to the site's own `root`/`builtin`; put it in a route")
        );
    }
    if out.is_empty() {
        return Err(src.err(
            s.span(),
            "a site needs `root = \"/path\"`, `builtin = true`, `proxy = \"upstream\"` or `[[site.route]]` tables",
        ));
    }
    let mut routes: Vec<Route> = out.into_iter().map(|(r, _)| r).collect();
    routes.sort_by_key(|r| std::cmp::Reverse(r.path.len()));
    Ok(routes)
}

/// The default site: the built-in site on every path.
pub(super) fn builtin_site() -> Site {
    Site {
        hosts: Vec::new(),
        routes: vec![Route {
            path: "/".into(),
            handler: RouteHandler::Builtin,
            headers: HeaderRules::default(),
            early_hints: Vec::new(),
            compress: true,
        }],
    }
}

pub(super) fn sites(
    src: &Source<'_>,
    raw: Option<&[Spanned<RawSite>]>,
    upstreams: &[super::Upstream],
) -> Result<Vec<Site>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(vec![builtin_site()]);
    };
    let mut out: Vec<Site> = Vec::new();
    // (host, line of the site that claimed it)
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut default_line: Option<usize> = None;
    for s in raw {
        let site_line = line_col(src.text, s.span().start).0;
        let r = s.get_ref();
        let mut hosts = Vec::new();
        match &r.hosts {
            None => {
                if let Some(line) = default_line {
                    return Err(src.err(
                        s.span(),
                        format!("a second default site (no `hosts`); the site at line {line} already serves any host"),
                    ));
                }
                default_line = Some(site_line);
            }
            Some(list) if list.get_ref().is_empty() => {
                return Err(src.err(list.span(), "`hosts` is empty; omit it to make this the default site"));
            }
            Some(list) => {
                for h in list.get_ref() {
                    let name = host_name(h.get_ref()).map_err(|e| src.err(h.span(), e))?;
                    if let Some((_, line)) = seen.iter().find(|(n, _)| *n == name) {
                        return Err(
                            src.err(h.span(), format!("host `{name}` is already served by the site at line {line}"))
                        );
                    }
                    seen.push((name.clone(), site_line));
                    hosts.push(name);
                }
            }
        }
        out.push(Site { hosts, routes: routes(src, s, upstreams)? });
    }
    Ok(out)
}

impl Config {
    /// The site serving `authority`: the one naming its host, else the default site; its
    /// index in `sites`.
    #[inline]
    pub(crate) fn site_for(&self, authority: &str) -> Option<usize> {
        let host = host_of(authority);
        self.sites
            .iter()
            .position(|s| s.hosts.iter().any(|h| h == host))
            .or_else(|| self.sites.iter().position(|s| s.hosts.is_empty()))
    }

    /// The route for `path` on the site serving `authority`: the longest prefix that matches
    /// (routes are kept longest first). A prefix ending in `/` matches what starts with it;
    /// one that does not also matches the same path with a `/` after it, never a longer name
    /// (`/api` matches `/api` and `/api/x`, not `/apis`). Its indexes: site, route.
    #[inline] // into the router: a call per request to a function of a few instructions
    pub(crate) fn route_for(&self, authority: &str, path: &str) -> Option<(usize, usize)> {
        let site = self.site_for(authority)?;
        let route = self.sites[site].routes.iter().position(|r| prefix_matches(&r.path, path))?;
        Some((site, route))
    }

    /// The route for `path` on the site serving `authority` ([`Config::route_for`]; tests).
    #[cfg(test)]
    pub(crate) fn route(&self, authority: &str, path: &str) -> Option<&Route> {
        let (site, route) = self.route_for(authority, path)?;
        Some(&self.sites[site].routes[route])
    }
}

fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// The host part of an authority: no port, no IPv6 brackets, no trailing dot (the config
/// stores site hosts the same way).
#[inline]
pub(crate) fn host_of(authority: &str) -> &str {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        // The port, if any, is the digits after the last colon: scanned from the end by hand
        // (`rsplit_once(':')` sets up a general searcher, about 150 instructions a request).
        let b = authority.as_bytes();
        let mut at = b.len();
        while at > 0 && b[at - 1].is_ascii_digit() {
            at -= 1;
        }
        if at > 0 && b[at - 1] == b':' {
            &authority[..at - 1]
        } else {
            authority
        }
    };
    host.strip_suffix('.').unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(host_of("example.com:8443"), "example.com");
        assert_eq!(host_of("example.com"), "example.com");
        assert_eq!(host_of("[::1]:8443"), "::1");
        assert_eq!(host_of("[::1]"), "::1");
        assert_eq!(host_of("example.com.:443"), "example.com");
        // What follows the last colon is a port only if it is all digits (or nothing).
        assert_eq!(host_of("example.com:"), "example.com");
        assert_eq!(host_of("a:b1"), "a:b1");
        assert_eq!(host_of("a:1b"), "a:1b");
        assert_eq!(host_of("a:1:2"), "a:1");
        assert_eq!(host_of("8443"), "8443");
    }

    #[test]
    fn prefixes() {
        assert!(prefix_matches("/", "/anything"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(!prefix_matches("/api/", "/api"));
        assert!(prefix_matches("/api", "/api"));
        assert!(prefix_matches("/api", "/api/x"));
        assert!(!prefix_matches("/api", "/apis"));
        assert!(!prefix_matches("/api", "/"));
    }
}
