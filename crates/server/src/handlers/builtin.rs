//! The built-in demo site, embedded in the binary: an introduction (`/`), a stylesheet, and a
//! browser speed test (`/speedtest.html` + `/speedtest.js`) using the `/__down`, `/__up` and
//! `/__nq/small` endpoints of [`crate::speedtest`].
//!
//! Each asset's strong ETag is an FNV-1a hash of its bytes computed at compile time, so it is
//! stable across restarts and changes exactly when the asset does; `If-None-Match` answers 304
//! (RFC 9110 §13.1.2). Assets are served with `cache-control: no-cache` (always revalidate:
//! cheap with the ETag, and a new binary's assets show up at once).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};

use crate::handlers::conditional::parse_tag_list;
use crate::message::{Body, Request, Response};

/// One embedded file.
struct Asset {
    path: &'static str,
    body: &'static [u8],
    content_type: &'static str,
    hash: u64,
}

/// 64-bit FNV-1a: tiny, `const`, and plenty to tell versions of a few files apart.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

macro_rules! asset {
    ($path:literal, $file:literal, $ct:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../../site/", $file));
        Asset { path: $path, body: BODY, content_type: $ct, hash: fnv1a(BODY) }
    }};
}

static ASSETS: [Asset; 5] = [
    asset!("/index.html", "index.html", "text/html; charset=utf-8"),
    asset!("/style.css", "style.css", "text/css; charset=utf-8"),
    asset!("/speedtest.html", "speedtest.html", "text/html; charset=utf-8"),
    asset!("/speedtest.js", "speedtest.js", "text/javascript; charset=utf-8"),
    asset!("/favicon.svg", "favicon.svg", "image/svg+xml"),
];

/// Content-Security-Policy for the pages: everything from this origin only, no inline script;
/// the speed test may also fetch from a second origin of the server over https (its latency
/// on a separate connection).
const CSP: &str = "default-src 'self'; connect-src 'self' https:; base-uri 'none'; frame-ancestors 'none'";

fn find(path: &str) -> Option<&'static Asset> {
    let path = if path == "/" { "/index.html" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

/// Serves the built-in site: GET and HEAD, 304 on a matching `If-None-Match`, 404 for
/// anything else under it.
pub(crate) fn serve_builtin(req: &Request) -> Response {
    if req.method != Method::GET && req.method != Method::HEAD {
        let mut r = Response::text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Some(asset) = find(&req.path) else {
        return Response::text(StatusCode::NOT_FOUND, "not found\n");
    };
    let opaque = format!("{:016x}", asset.hash);
    let mut headers = HeaderMap::new();
    // 16 hex digits in quotes: always a valid header value.
    if let Ok(v) = HeaderValue::from_str(&format!("\"{opaque}\"")) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if parse_tag_list(&req.headers, &header::IF_NONE_MATCH).is_some_and(|l| l.weak_match(&opaque)) {
        return Response::new(StatusCode::NOT_MODIFIED, headers, Body::Empty);
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.body.len()));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if asset.content_type.starts_with("text/html") {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    }
    let body = if req.method == Method::HEAD { Body::Empty } else { Body::Full(Bytes::from_static(asset.body)) };
    Response::new(StatusCode::OK, headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Proto, RequestBody};

    fn req(method: Method, path: &str, inm: Option<&str>) -> Request {
        let mut headers = HeaderMap::new();
        if let Some(v) = inm {
            headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(v).unwrap());
        }
        Request {
            proto: Proto::Http1,
            peer: "127.0.0.1:1".parse().unwrap(),
            upgrade: None,
            websocket: false,
            connect: None,
            exchange: Default::default(),
            method,
            authority: "localhost".into(),
            path: path.into(),
            query: None,
            headers,
            tls: false,
            body: RequestBody::empty(),
            malformed: None,
        }
    }

    #[test]
    fn fnv_known_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn serves_assets_with_etags() {
        let r = serve_builtin(&req(Method::GET, "/", None));
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.headers["content-type"], "text/html; charset=utf-8");
        assert!(r.headers.contains_key("content-security-policy"));
        let Body::Full(b) = &r.body else { panic!("full body expected") };
        assert!(std::str::from_utf8(b).unwrap().contains("/speedtest.html"));
        assert_eq!(r.headers["content-length"], b.len().to_string());
        let etag = r.headers["etag"].to_str().unwrap().to_string();

        let again = serve_builtin(&req(Method::GET, "/index.html", None));
        assert_eq!(again.headers["etag"], etag.as_str(), "stable");
        let r = serve_builtin(&req(Method::GET, "/", Some(&etag)));
        assert_eq!(r.status, StatusCode::NOT_MODIFIED);
        assert!(matches!(r.body, Body::Empty));
        let r = serve_builtin(&req(Method::GET, "/", Some(&format!("\"x\", W/{etag}"))));
        assert_eq!(r.status, StatusCode::NOT_MODIFIED);
        let r = serve_builtin(&req(Method::GET, "/", Some("\"x\"")));
        assert_eq!(r.status, StatusCode::OK);

        let r = serve_builtin(&req(Method::HEAD, "/speedtest.js", None));
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.headers["content-type"], "text/javascript; charset=utf-8");
        assert_ne!(r.headers["content-length"], "0");
        assert!(matches!(r.body, Body::Empty));
        assert_ne!(r.headers["etag"], etag.as_str());

        for p in ["/speedtest.html", "/style.css", "/favicon.svg"] {
            assert_eq!(serve_builtin(&req(Method::GET, p, None)).status, StatusCode::OK, "{p}");
        }
        assert_eq!(serve_builtin(&req(Method::GET, "/nope", None)).status, StatusCode::NOT_FOUND);
        let r = serve_builtin(&req(Method::POST, "/", None));
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn speedtest_page_uses_the_endpoints() {
        let js = std::str::from_utf8(find("/speedtest.js").unwrap().body).unwrap();
        for needle in ["/__down?bytes=", "/__up", "/__nq/small"] {
            assert!(js.contains(needle), "{needle}");
        }
    }
}
