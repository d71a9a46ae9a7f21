//! 103 Early Hints (RFC 8297) learned from an upstream's own responses, so that a proxied site
//! gets them without configuring anything.
//!
//! What is learned: from a 200, 301 or 302 answer to a GET, the `Link` values whose `rel` is
//! `preload`, `modulepreload` or `preconnect` and whose target is same-origin (a path) or
//! `https:`; when the response has no `Link` field and is HTML, the `<link>` elements of its
//! `<head>` (`preload`, `modulepreload`, `preconnect`, and `stylesheet` as a style preload),
//! scanned as the body streams by, within [`HEAD_BUDGET`] bytes. Keyed by scheme, authority
//! and path (the query ignored), bounded in entries and bytes, each entry for [`TTL`]. Every
//! learning response replaces its entry, so a hint the upstream stops sending goes away, and
//! an entry is only ever used for requests to the same authority.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderValue;

/// How long a learned entry is used without being confirmed by a new response.
pub(crate) const TTL: Duration = Duration::from_secs(600);
/// Entries per upstream.
pub(crate) const MAX_ENTRIES: usize = 4096;
/// Bytes of keys and values per upstream.
pub(crate) const MAX_BYTES: usize = 1 << 20;
/// `Link` values kept per entry, and their bytes.
const MAX_LINKS: usize = 16;
const MAX_ENTRY_BYTES: usize = 4096;
/// Bytes of an HTML response scanned for its `<head>`.
pub(crate) const HEAD_BUDGET: usize = 64 * 1024;

struct Entry {
    links: Vec<HeaderValue>,
    at: Instant,
    /// Position in the use order.
    tick: u64,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Use order: tick → key (least recently used first).
    order: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(e) = self.map.remove(key) {
            self.order.remove(&e.tick);
            self.bytes -= e.bytes;
        }
    }
}

/// One upstream's learned hints.
pub(crate) struct HintCache {
    inner: Mutex<Inner>,
    /// How many entries `inner` holds, kept beside it (set under its lock): [`is_empty`],
    /// asked for every response with nothing to learn, then takes no lock (two atomic
    /// operations of a small proxied response).
    ///
    /// [`is_empty`]: HintCache::is_empty
    entries: std::sync::atomic::AtomicUsize,
    max_entries: usize,
    max_bytes: usize,
    ttl: Duration,
}

impl HintCache {
    pub(crate) fn new(max_entries: usize, max_bytes: usize, ttl: Duration) -> Self {
        Self { inner: Mutex::new(Inner::default()), entries: Default::default(), max_entries, max_bytes, ttl }
    }

    /// The key of a request: scheme, authority (lower case, port included) and path.
    pub(crate) fn key(tls: bool, authority: &str, path: &str) -> String {
        let scheme = if tls { "https://" } else { "http://" };
        let mut key = String::with_capacity(scheme.len() + authority.len() + path.len());
        key.push_str(scheme);
        key.extend(authority.chars().map(|c| c.to_ascii_lowercase()));
        key.push_str(path);
        key
    }

    /// Whether nothing is learned (then a response with nothing to learn changes nothing).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// Note how many entries `g` holds, before its lock goes.
    fn counted(&self, g: &Inner) {
        self.entries.store(g.map.len(), std::sync::atomic::Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The hints learned for `key`, if fresh.
    pub(crate) fn get(&self, key: &str, now: Instant) -> Option<Vec<HeaderValue>> {
        let mut g = self.lock();
        let inner = &mut *g;
        let e = inner.map.get_mut(key)?;
        if now.saturating_duration_since(e.at) >= self.ttl {
            inner.remove(key);
            self.counted(inner);
            return None;
        }
        inner.order.remove(&e.tick);
        inner.tick += 1;
        e.tick = inner.tick;
        inner.order.insert(e.tick, key.to_owned());
        Some(e.links.clone())
    }

    /// What the latest response for `key` carried: it replaces the entry (none: removed).
    pub(crate) fn learn(&self, key: &str, mut links: Vec<HeaderValue>, now: Instant) {
        links.truncate(MAX_LINKS);
        let mut size = key.len();
        links.retain(|l| {
            size += l.len();
            size <= MAX_ENTRY_BYTES
        });
        let mut g = self.lock();
        g.remove(key);
        if links.is_empty() {
            self.counted(&g);
            return;
        }
        let bytes = key.len() + links.iter().map(HeaderValue::len).sum::<usize>();
        while !g.map.is_empty() && (g.map.len() >= self.max_entries || g.bytes + bytes > self.max_bytes) {
            let Some((_, oldest)) = g.order.pop_first() else { break };
            if let Some(e) = g.map.remove(&oldest) {
                g.bytes -= e.bytes;
            }
        }
        g.tick += 1;
        let tick = g.tick;
        g.order.insert(tick, key.to_owned());
        g.bytes += bytes;
        g.map.insert(key.to_owned(), Entry { links, at: now, tick, bytes });
        self.counted(&g);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// Whether a link target may be hinted: a same-origin path (`/x`, not `//host`), or `https:`.
fn target_ok(t: &str) -> bool {
    let safe = !t.is_empty() && t.bytes().all(|c| c.is_ascii_graphic() && c != b'>' && c != b'<' && c != b',');
    safe && ((t.starts_with('/') && !t.starts_with("//")) || t.to_ascii_lowercase().starts_with("https://"))
}

/// The `rel` values that are worth a 103.
fn hintable(rel: &str) -> bool {
    rel.split_ascii_whitespace().any(|r| {
        r.eq_ignore_ascii_case("preload")
            || r.eq_ignore_ascii_case("modulepreload")
            || r.eq_ignore_ascii_case("preconnect")
    })
}

/// The link-values of a `Link` field (RFC 8288 §3): split at commas outside `<...>` and quoted
/// strings.
fn link_values(field: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut in_uri, mut in_quote, mut escaped) = (0, false, false, false);
    for (i, c) in field.char_indices() {
        if in_quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_quote = false,
                _ => {}
            }
            continue;
        }
        match c {
            '<' => in_uri = true,
            '>' => in_uri = false,
            '"' => in_quote = true,
            ',' if !in_uri => {
                out.push(field[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(field[start..].trim());
    out.retain(|v| !v.is_empty());
    out
}

/// A link-value's target and its `rel`.
fn parse_link_value(v: &str) -> Option<(&str, String)> {
    let rest = v.strip_prefix('<')?;
    let (target, params) = rest.split_once('>')?;
    let mut rel = None;
    for p in params.split(';') {
        if let Some((k, val)) = p.trim().split_once('=') {
            if k.trim().eq_ignore_ascii_case("rel") {
                rel = Some(val.trim().trim_matches('"').to_owned());
            }
        }
    }
    Some((target.trim(), rel?))
}

/// Every link-value of the `Link` fields, each its own value (a field may join several with
/// commas, RFC 8288 §3), for merging 103s link by link.
pub(crate) fn each_link<'a>(fields: impl Iterator<Item = &'a HeaderValue>) -> Vec<HeaderValue> {
    let mut out = Vec::new();
    for f in fields {
        match f.to_str() {
            Ok(text) => out.extend(link_values(text).into_iter().filter_map(|v| HeaderValue::from_str(v).ok())),
            // Not text: kept whole, compared whole.
            Err(_) => out.push(f.clone()),
        }
    }
    out
}

/// The hintable values of a response's `Link` fields.
pub(crate) fn from_link_fields<'a>(fields: impl Iterator<Item = &'a HeaderValue>) -> Vec<HeaderValue> {
    let mut out: Vec<HeaderValue> = Vec::new();
    for f in fields {
        let Ok(text) = f.to_str() else { continue };
        for v in link_values(text) {
            let Some((target, rel)) = parse_link_value(v) else { continue };
            if hintable(&rel) && target_ok(target) {
                if let Ok(h) = HeaderValue::from_str(v) {
                    if !out.contains(&h) {
                        out.push(h);
                    }
                }
            }
        }
    }
    out
}

/// Finds the `<link>` elements of an HTML document's `<head>` as the body streams by: fed
/// chunks, done at `</head>`, `<body` or [`HEAD_BUDGET`] bytes.
#[derive(Default)]
pub(crate) struct HeadScanner {
    buf: Vec<u8>,
    done: bool,
}

impl HeadScanner {
    /// Take the next body bytes; true once the scan is over (what it found is in `links`).
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> bool {
        if self.done {
            return true;
        }
        let room = HEAD_BUDGET - self.buf.len();
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let lower = self.buf.to_ascii_lowercase();
        if self.buf.len() >= HEAD_BUDGET || find(&lower, b"</head").is_some() || find(&lower, b"<body").is_some() {
            self.done = true;
        }
        self.done
    }

    /// The hints found in what was fed (the whole prefix, `<head>` or not: a document cut off
    /// by the budget still yields what it had).
    pub(crate) fn links(&self) -> Vec<HeaderValue> {
        let text = String::from_utf8_lossy(&self.buf);
        let lower = text.to_ascii_lowercase();
        let end = [find(lower.as_bytes(), b"</head"), find(lower.as_bytes(), b"<body")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(lower.len());
        let mut out: Vec<HeaderValue> = Vec::new();
        let mut at = 0;
        while let Some(i) = find(&lower.as_bytes()[at..end], b"<link") {
            let start = at + i + 5;
            let Some(close) = lower[start..end].find('>') else { break };
            let attrs = attributes(&text[start..start + close]);
            at = start + close;
            let get = |n: &str| attrs.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
            let (Some(rel), Some(href)) = (get("rel"), get("href")) else { continue };
            if !target_ok(href) {
                continue;
            }
            let rels: Vec<String> = rel.split_ascii_whitespace().map(str::to_ascii_lowercase).collect();
            let value = if rels.iter().any(|r| r == "stylesheet") {
                format!("<{href}>; rel=preload; as=style")
            } else if rels.iter().any(|r| r == "preload") {
                let mut v = format!("<{href}>; rel=preload");
                if let Some(a) = get("as").filter(|a| a.bytes().all(|c| c.is_ascii_alphanumeric())) {
                    v.push_str(&format!("; as={a}"));
                }
                if let Some(t) = get("type").filter(|t| t.bytes().all(|c| c.is_ascii_graphic() && c != b'"')) {
                    v.push_str(&format!("; type=\"{t}\""));
                }
                v
            } else if rels.iter().any(|r| r == "modulepreload") {
                format!("<{href}>; rel=modulepreload")
            } else if rels.iter().any(|r| r == "preconnect") {
                format!("<{href}>; rel=preconnect")
            } else {
                continue;
            };
            let value = match get("crossorigin") {
                Some(c) if c.eq_ignore_ascii_case("use-credentials") => value + "; crossorigin=use-credentials",
                Some(_) => value + "; crossorigin",
                None => value,
            };
            if let Ok(h) = HeaderValue::from_str(&value) {
                if !out.contains(&h) {
                    out.push(h);
                }
            }
        }
        out
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An HTML start tag's attributes (names lower-cased; valueless ones get an empty value).
fn attributes(s: &str) -> Vec<(String, String)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'=' && b[i] != b'/' {
            i += 1;
        }
        if start == i {
            break;
        }
        let name = s[start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let vs = i + 1;
                i = vs;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                value = s[vs..i.min(b.len())].to_owned();
                i += 1;
            } else {
                let vs = i;
                while i < b.len() && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
                value = s[vs..i].to_owned();
            }
        }
        out.push((name, value));
    }
    out
}

/// Phase two of a proxied GET: the route's configured Early Hints and, for a navigation, what
/// the upstream's earlier responses to this URL carried, sent at once as a 103 (RFC 8297),
/// before the upstream is asked. `key` makes the cache key (only when it is used: most
/// requests have nothing learned). The links sent, for a 103 of the upstream's own to add only
/// new ones to.
pub(super) fn send_early(
    cache: &HintCache,
    req: &crate::message::Request,
    configured: &[HeaderValue],
    learning: bool,
    key: &dyn Fn() -> String,
) -> Vec<HeaderValue> {
    use crate::message::accesslog::{HINTS_CONFIGURED, HINTS_LEARNED};
    let interim = crate::message::Interim::of(&req.exchange);
    if req.method != http::Method::GET || !interim.available() {
        return Vec::new();
    }
    let mut flags = 0;
    let mut links: Vec<HeaderValue> = configured.to_vec();
    if !links.is_empty() {
        flags |= HINTS_CONFIGURED;
    }
    if learning && navigation(&req.headers) {
        for v in cache.get(&key(), Instant::now()).unwrap_or_default() {
            if !links.contains(&v) {
                links.push(v);
                flags |= HINTS_LEARNED;
            }
        }
    }
    if links.is_empty() {
        return links;
    }
    let mut h = http::HeaderMap::with_capacity(links.len());
    for v in &links {
        h.append(http::header::LINK, v.clone());
    }
    if !interim.send(http::StatusCode::EARLY_HINTS, &h) {
        return Vec::new();
    }
    req.exchange.hints.fetch_or(flags, std::sync::atomic::Ordering::Relaxed);
    for source in [HINTS_CONFIGURED, HINTS_LEARNED] {
        if flags & source != 0 {
            crate::message::metrics::hint(source);
        }
    }
    links
}

/// Whether a request is a navigation (a browser loading a page): `Sec-Fetch-Mode: navigate`,
/// or, from a client that sends no `Sec-Fetch-*` fields, an `Accept` naming `text/html`.
pub(super) fn navigation(h: &http::HeaderMap) -> bool {
    // One pass over the fields, no lookups by name and no lower-cased copy: this runs for
    // every proxied GET.
    let (mut mode, mut fetch, mut html) = (None, false, false);
    for (n, v) in h {
        let n = n.as_str();
        if n == "sec-fetch-mode" {
            mode = mode.or(Some(v.as_bytes().eq_ignore_ascii_case(b"navigate")));
        } else if n.starts_with("sec-fetch-") {
            fetch = true;
        } else if n == "accept" && !html {
            html = v.to_str().is_ok() && v.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"text/html"));
        }
    }
    mode.unwrap_or(!fetch && html)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn link_fields_keep_hintable_same_origin_or_https_targets() {
        let f = [
            hv("</app.css>; rel=preload; as=style, </x>; rel=\"canonical\""),
            hv("<https://cdn.example/f.woff2>; rel=preload; as=font; crossorigin, <http://plain.example/a.js>; rel=preload"),
            hv("<//other.example/a.js>; rel=modulepreload, </m.js>; rel=\"modulepreload\", <https://fonts.example>; rel=preconnect"),
            hv("</q,uoted>; rel=preload; title=\"a, b\""),
        ];
        let got: Vec<String> = from_link_fields(f.iter()).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        assert_eq!(
            got,
            vec![
                "</app.css>; rel=preload; as=style",
                "<https://cdn.example/f.woff2>; rel=preload; as=font; crossorigin",
                "</m.js>; rel=\"modulepreload\"",
                "<https://fonts.example>; rel=preconnect",
            ]
        );
    }

    #[test]
    fn joined_link_fields_split_into_links() {
        let f = [hv("</a.css>; rel=preload; as=style, </b.js>; rel=preload; as=script"), hv("</c>; rel=preconnect")];
        let got: Vec<String> = each_link(f.iter()).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        assert_eq!(
            got,
            vec!["</a.css>; rel=preload; as=style", "</b.js>; rel=preload; as=script", "</c>; rel=preconnect"]
        );
    }

    #[test]
    fn the_head_of_an_html_document_is_scanned_within_the_budget() {
        let html = "<!doctype html><html><HEAD><title>t</title>\
            <link rel=stylesheet href=\"/app.css\">\
            <link rel='preload' href='/font.woff2' as=font type=font/woff2 crossorigin>\
            <link href=\"/m.js\" rel=modulepreload>\
            <link rel=\"icon\" href=\"/favicon.ico\">\
            <link rel=preload href=\"http://insecure.example/a.js\" as=script>\
            <link rel=preconnect href=\"https://api.example\">\
            </head><body><link rel=preload href=\"/late.js\" as=script></body>";
        let mut s = HeadScanner::default();
        // In pieces that split a tag.
        let (a, b) = html.split_at(80);
        assert!(!s.feed(a.as_bytes()));
        assert!(s.feed(b.as_bytes()));
        let got: Vec<String> = s.links().iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        assert_eq!(
            got,
            vec![
                "</app.css>; rel=preload; as=style",
                "</font.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin",
                "</m.js>; rel=modulepreload",
                "<https://api.example>; rel=preconnect",
            ]
        );
        // A head longer than the budget ends the scan with what came before.
        let mut s = HeadScanner::default();
        let long = format!("<head><link rel=preload href=/a.js as=script>{}", " ".repeat(HEAD_BUDGET));
        assert!(s.feed(long.as_bytes()));
        assert_eq!(s.links().len(), 1);
    }

    #[test]
    fn the_cache_keys_expires_replaces_and_evicts() {
        let t0 = Instant::now();
        let c = HintCache::new(3, 10_000, Duration::from_secs(10));
        let k = HintCache::key(true, "A.example:443", "/page");
        assert_eq!(k, "https://a.example:443/page");
        assert!(c.is_empty());
        c.learn(&k, vec![hv("</a.css>; rel=preload")], t0);
        assert!(!c.is_empty());
        assert_eq!(c.get(&k, t0 + Duration::from_secs(9)).unwrap().len(), 1);
        // Another host, or scheme, never sees it.
        assert!(c.get(&HintCache::key(true, "b.example:443", "/page"), t0).is_none());
        assert!(c.get(&HintCache::key(false, "a.example:443", "/page"), t0).is_none());
        // The TTL.
        assert!(c.get(&k, t0 + Duration::from_secs(10)).is_none());
        assert!(c.is_empty(), "the expired entry went");
        // A later response without the hint drops it.
        c.learn(&k, vec![hv("</a.css>; rel=preload")], t0);
        c.learn(&k, vec![], t0);
        assert!(c.get(&k, t0).is_none());
        assert!(c.is_empty(), "the dropped entry went");
        // Eviction: the least recently used goes first.
        for p in ["/1", "/2", "/3"] {
            c.learn(&HintCache::key(true, "a", p), vec![hv("</x>; rel=preload")], t0);
        }
        assert!(c.get(&HintCache::key(true, "a", "/1"), t0).is_some());
        c.learn(&HintCache::key(true, "a", "/4"), vec![hv("</x>; rel=preload")], t0);
        assert_eq!(c.len(), 3);
        assert!(!c.is_empty());
        assert!(c.get(&HintCache::key(true, "a", "/2"), t0).is_none(), "/2 was the least recently used");
        assert!(c.get(&HintCache::key(true, "a", "/1"), t0).is_some());
        // The byte bound.
        let small = HintCache::new(100, 200, Duration::from_secs(10));
        for i in 0..10 {
            small.learn(&format!("https://a/{i}"), vec![hv(&format!("</{}>; rel=preload", "x".repeat(40)))], t0);
        }
        assert!(small.len() <= 3, "{}", small.len());
        assert!(small.lock().bytes <= 200);
    }
}
