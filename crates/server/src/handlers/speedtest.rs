//! Speed-test endpoints (the kind of test that found the HTTP/2 upload problem; see
//! `docs/protocols.md`):
//!
//! - `GET /__down?bytes=N` → 200 with `N` zero bytes (`application/octet-stream`, exact
//!   `content-length`), served from a shared static buffer: no allocation per chunk.
//!   `N` is a plain decimal integer (no suffixes) at most `max_download_bytes`; anything else is
//!   400 with a message saying why. Other query parameters (cache busters) are ignored.
//! - `POST /__up` (or `PUT`) → reads and discards the body, counting bytes, and answers
//!   `{"bytes":N,"seconds":S,"mbps":M}`. `seconds` runs from the moment the handler sees the
//!   request (the head has arrived) to the last body byte; `mbps` is megabits per second
//!   (`bytes × 8 / seconds / 10⁶`), 0 when no time could be measured.
//! - `GET /__ping` → 204 at once, for round-trip times.
//!
//! The server side of the IETF responsiveness test (draft-ietf-ippm-responsiveness-08, "RPM"),
//! server-wide only:
//!
//! - `GET /.well-known/nq` (§8.1) → the configuration document: `version` 1 and `urls` with the
//!   draft's names (`small_download_url`, `large_download_url`, `upload_url`) and the older
//!   ones clients such as goresponsiveness still read (`small_https_download_url`,
//!   `large_https_download_url`, `https_upload_url`), all on the request's own origin.
//! - `GET /__nq/small` → 1 byte; `GET /__nq/large` → 8 GiB of zeros (§7: at least 8 GB; the
//!   client stops reading when it has measured); `POST /__nq/upload` → the body discarded, then
//!   the `/__up` JSON. Bodies are `application/octet-stream` from the shared zero buffer (no
//!   allocation per request or chunk).
//!
//! Every answer carries `cache-control: no-store` so no cache can fake a result. Requests and
//! bytes are counted in `sluice_speedtest_*` metrics; each request's rate is in its
//! access-log line (bytes and duration).

use std::time::Instant;

use sha2::{Digest, Sha256};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

use crate::config::Speedtest as SpeedtestConfig;
use crate::message::{Body, BodyError, Request, Response};

/// Download path.
const DOWN: &str = "/__down";
/// Upload path.
const UP: &str = "/__up";
/// Latency path.
const PING: &str = "/__ping";
/// The responsiveness test's configuration document (draft-ietf-ippm-responsiveness §8.1).
const NQ_CONFIG: &str = "/.well-known/nq";
/// Its 1-byte resource.
const NQ_SMALL: &str = "/__nq/small";
/// Its large resource.
const NQ_LARGE: &str = "/__nq/large";
/// Its upload resource.
const NQ_UPLOAD: &str = "/__nq/upload";
/// Size of the large resource: 8 GiB (§7 asks for at least 8 GB).
const NQ_LARGE_BYTES: u64 = 8 << 30;
/// Every server-wide path, in `message::metrics::SPEEDTEST_ENDPOINTS`'s order.
const PATHS: [&str; 7] = [DOWN, UP, PING, NQ_CONFIG, NQ_SMALL, NQ_LARGE, NQ_UPLOAD];

/// The speed-test endpoints: server-wide (`[speedtest] enabled`, on every site before routing:
/// [`Speedtest::claims`]) or as a route's handler (`speedtest = true`: the path's last segment
/// names the endpoint).
pub(crate) struct Speedtest {
    cfg: SpeedtestConfig,
}

impl Speedtest {
    pub(crate) fn new(cfg: &SpeedtestConfig) -> Self {
        Self { cfg: cfg.clone() }
    }

    /// Whether `path` is one of the server-wide endpoints (when enabled).
    pub(crate) fn claims(&self, path: &str) -> bool {
        self.cfg.enabled && PATHS.contains(&path)
    }

    /// Answer a request whose path [`Speedtest::claims`]; the upload reads `req.body` to the end.
    pub(crate) async fn serve_claimed(&self, req: &mut Request) -> Response {
        let endpoint = PATHS.into_iter().find(|p| *p == req.path).unwrap_or(PING);
        serve(&self.cfg, req, endpoint).await
    }

    /// Answer a request on a `speedtest = true` route: the endpoint its path's last segment
    /// names (`/x/__down` is `/__down`), else 404.
    pub(crate) async fn serve_route(&self, req: &mut Request) -> Response {
        match endpoint(&req.path) {
            Some(ep) => serve(&self.cfg, req, ep).await,
            None => Response::text(StatusCode::NOT_FOUND, "not a speed-test endpoint (__down, __up, __ping)\n"),
        }
    }
}

/// The endpoint a path names under a `speedtest = true` route: its last segment, if it is one.
fn endpoint(path: &str) -> Option<&'static str> {
    let last = &path[path.rfind('/')?..];
    [DOWN, UP, PING].into_iter().find(|e| *e == last)
}

/// Answer the speed-test `endpoint` ([`DOWN`], [`UP`] or [`PING`]).
async fn serve(cfg: &SpeedtestConfig, req: &mut Request, endpoint: &str) -> Response {
    if let Some(i) = PATHS.iter().position(|p| *p == endpoint) {
        crate::message::metrics::speedtest_request(i);
    }
    let get = matches!(req.method, Method::GET | Method::HEAD);
    let resp = match endpoint {
        NQ_CONFIG if get => nq_config(req),
        NQ_SMALL if get => zeros(req, 1),
        NQ_LARGE if get => zeros(req, NQ_LARGE_BYTES),
        NQ_CONFIG | NQ_SMALL | NQ_LARGE => method_not_allowed("GET, HEAD"),
        NQ_UPLOAD => match req.method {
            Method::POST | Method::PUT => upload(req).await,
            _ => method_not_allowed("POST, PUT"),
        },
        DOWN => match req.method {
            Method::GET | Method::HEAD => download(cfg, req),
            _ => method_not_allowed("GET, HEAD"),
        },
        UP => match req.method {
            Method::POST | Method::PUT => upload(req).await,
            _ => method_not_allowed("POST, PUT"),
        },
        _ => match req.method {
            Method::GET | Method::HEAD => Response::new(StatusCode::NO_CONTENT, http::HeaderMap::new(), Body::Empty),
            _ => method_not_allowed("GET, HEAD"),
        },
    };
    no_store(resp)
}

/// `no-store` on every answer; and any origin may read them and their timing (the speed
/// test's page measures a second origin of the server for latency on a separate connection;
/// the answers are zeros, counts and times, nothing private).
fn no_store(mut r: Response) -> Response {
    r.headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    r.headers.insert("timing-allow-origin", HeaderValue::from_static("*"));
    r
}

fn method_not_allowed(allow: &'static str) -> Response {
    let mut r = Response::text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    r.headers.insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// Parses `bytes=N` out of a query string; `max` is the configured ceiling.
pub(crate) fn parse_download_size(query: Option<&str>, max: u64) -> Result<u64, String> {
    let value = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("bytes="))
        .ok_or_else(|| "missing `bytes=N` query parameter (N: number of bytes to download)".to_string())?;
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`bytes={value}`: N must be a plain decimal integer"));
    }
    let n: u64 = value.parse().map_err(|_| format!("`bytes={value}` exceeds the limit of {max} bytes"))?;
    if n > max {
        return Err(format!("`bytes={n}` exceeds the limit of {max} bytes"));
    }
    Ok(n)
}

fn download(cfg: &SpeedtestConfig, req: &Request) -> Response {
    match parse_download_size(req.query.as_deref(), cfg.max_download_bytes) {
        Ok(n) => zeros(req, n),
        Err(msg) => Response::text(StatusCode::BAD_REQUEST, format!("{msg}\n")),
    }
}

/// The responsiveness test's configuration document for the origin `req` came to.
fn nq_config(req: &Request) -> Response {
    let origin = format!("{}://{}", if req.tls { "https" } else { "http" }, req.authority);
    let url = |p: &str| format!("{origin}{p}");
    let doc = serde_json::json!({
        "version": 1,
        "urls": {
            "small_download_url": url(NQ_SMALL),
            "large_download_url": url(NQ_LARGE),
            "upload_url": url(NQ_UPLOAD),
            "small_https_download_url": url(NQ_SMALL),
            "large_https_download_url": url(NQ_LARGE),
            "https_upload_url": url(NQ_UPLOAD),
        }
    });
    let mut headers = http::HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::new(StatusCode::OK, headers, Body::Full(Bytes::from(doc.to_string())))
}

/// `n` zero bytes, `application/octet-stream` (none for HEAD, with the length).
fn zeros(req: &Request, n: u64) -> Response {
    let mut headers = http::HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    let body = if req.method == Method::HEAD { Body::Empty } else { Body::Zeros(n) };
    Response::new(StatusCode::OK, headers, body)
}

async fn upload(req: &mut Request) -> Response {
    let start = Instant::now();
    let mut bytes: u64 = 0;
    // `?hash=sha256` also hashes the body (for integrity tests; it costs CPU per byte), and so
    // does a request that carries or announces a `content-digest` (RFC 9530 §2), to check it.
    let announces_digest = req.headers.contains_key(CONTENT_DIGEST)
        || req
            .headers
            .get_all(header::TRAILER)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|n| n.trim().eq_ignore_ascii_case(CONTENT_DIGEST))));
    let mut hasher = (announces_digest
        || req.query.as_deref().is_some_and(|q| q.split('&').any(|kv| kv == "hash=sha256")))
    .then(Sha256::new);
    while let Some(chunk) = req.body.chunk().await {
        match chunk {
            Ok(b) => {
                bytes = bytes.saturating_add(b.len() as u64);
                crate::message::metrics::speedtest_bytes(true, b.len() as u64);
                if let Some(h) = hasher.as_mut() {
                    h.update(&b);
                }
            }
            Err(BodyError::TooLarge) => {
                return Response::text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
            }
            Err(BodyError::TooSlow) => {
                let mut r = Response::text(StatusCode::REQUEST_TIMEOUT, "request body too slow\n");
                r.headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
                return r;
            }
            Err(e) => return Response::text(StatusCode::BAD_REQUEST, format!("upload failed: {e}\n")),
        }
    }
    let mut body = upload_json(bytes, start.elapsed().as_secs_f64());
    if hasher.is_none() && req.body.trailers().is_some_and(|t| t.contains_key(CONTENT_DIGEST)) {
        // RFC 9110 §6.6.2: a sender should announce trailer fields (`Trailer`); this one came
        // unannounced, after a body that was not hashed, and cannot be checked.
        return Response::text(
            StatusCode::BAD_REQUEST,
            "a content-digest trailer that no `Trailer: content-digest` field announced cannot be checked\n",
        );
    }
    if let Some(h) = hasher {
        let sum = h.finalize();
        // The request's digest, from its head or (streamed uploads) its trailers.
        let claimed =
            req.headers.get(CONTENT_DIGEST).cloned().or_else(|| req.body.trailers()?.get(CONTENT_DIGEST).cloned());
        let mut extra = String::new();
        if let Some(claimed) = claimed {
            match sha256_of(&claimed) {
                Some(d) if d == sum.as_slice() => extra.push_str(",\"content_digest\":\"verified\""),
                Some(_) => {
                    return Response::text(
                        StatusCode::BAD_REQUEST,
                        "content-digest does not match the content received\n",
                    )
                }
                None => {
                    return Response::text(
                        StatusCode::BAD_REQUEST,
                        "content-digest carries no sha-256 (RFC 9530 §2; the only algorithm checked here)\n",
                    )
                }
            }
        }
        let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
        // upload_json ends with `}`: append the digest as one more member.
        body.pop();
        body.push_str(&format!(",\"sha256\":\"{hex}\"{extra}}}"));
    }
    let mut headers = http::HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // RFC 9530 §4: a client that asks for a digest of the response (`Want-Content-Digest`)
    // gets one, as a trailer: sent after the content, as a streamed response would.
    let want = req.headers.get(WANT_CONTENT_DIGEST).and_then(|v| v.to_str().ok()).is_some_and(wants_sha256);
    let content = Bytes::from(body);
    let body = if want {
        let mut trailers = http::HeaderMap::new();
        trailers.insert(CONTENT_DIGEST, content_digest(&content));
        Body::Trailed(Box::new(Body::Full(content)), Box::new(trailers))
    } else {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(content.len()));
        Body::Full(content)
    };
    if want {
        headers.insert(header::TRAILER, HeaderValue::from_static(CONTENT_DIGEST));
    }
    Response::new(StatusCode::OK, headers, body)
}

/// RFC 9530 §2: the digest of the content.
const CONTENT_DIGEST: &str = "content-digest";
/// RFC 9530 §4: which digest algorithms the sender would like, with preferences.
const WANT_CONTENT_DIGEST: &str = "want-content-digest";

/// Whether a `Want-Content-Digest` value (RFC 9530 §4: a dictionary of algorithm = preference
/// 0–10, 0 meaning "not acceptable") accepts sha-256.
fn wants_sha256(v: &str) -> bool {
    v.split(',').any(|member| {
        let (key, pref) = member.split_once('=').unwrap_or((member, "1"));
        key.trim() == "sha-256" && pref.trim().parse::<u8>().is_ok_and(|p| p > 0)
    })
}

/// `sha-256=:BASE64:` (RFC 9530 §2, a structured-field dictionary with a byte sequence).
fn content_digest(content: &[u8]) -> HeaderValue {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(content));
    // Invariant: base64 and the fixed text are visible ASCII.
    HeaderValue::from_str(&format!("sha-256=:{b64}:")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The sha-256 member of a `Content-Digest` value, decoded; `None` when it has none or it does
/// not decode.
fn sha256_of(v: &HeaderValue) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let v = v.to_str().ok()?;
    v.split(',').find_map(|member| {
        let (key, value) = member.split_once('=')?;
        if key.trim() != "sha-256" {
            return None;
        }
        let b64 = value.trim().strip_prefix(':')?.strip_suffix(':')?;
        base64::engine::general_purpose::STANDARD.decode(b64).ok()
    })
}

/// The upload result: `{"bytes":N,"seconds":S,"mbps":M}`, seconds to the microsecond,
/// megabits per second (10⁶ bits) to three decimals.
pub(crate) fn upload_json(bytes: u64, seconds: f64) -> String {
    let seconds = if seconds.is_finite() && seconds > 0.0 { seconds } else { 0.0 };
    let mbps = if seconds > 0.0 { bytes as f64 * 8.0 / seconds / 1e6 } else { 0.0 };
    let round = |x: f64, scale: f64| (x * scale).round() / scale;
    serde_json::json!({
        "bytes": bytes,
        "seconds": round(seconds, 1e6),
        "mbps": round(mbps, 1e3),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Proto, RequestBody};
    use bytes::Bytes;

    fn cfg() -> SpeedtestConfig {
        SpeedtestConfig { enabled: true, max_download_bytes: 1_000_000 }
    }

    /// What the router does for the server-wide endpoints: the answer, or `None` for a path
    /// they do not claim.
    async fn claimed(cfg: &SpeedtestConfig, req: &mut Request) -> Option<Response> {
        let s = Speedtest::new(cfg);
        if !s.claims(&req.path) {
            return None;
        }
        Some(s.serve_claimed(req).await)
    }

    fn req(method: Method, path: &str, query: Option<&str>, body: RequestBody) -> Request {
        Request {
            proto: Proto::Http2,
            peer: "127.0.0.1:1".parse().unwrap(),
            upgrade: None,
            websocket: false,
            connect: None,
            exchange: Default::default(),
            method,
            authority: "localhost".into(),
            path: path.into(),
            query: query.map(String::from),
            headers: http::HeaderMap::new(),
            tls: true,
            body,
            malformed: None,
        }
    }

    #[tokio::test]
    async fn the_responsiveness_endpoints_follow_the_draft() {
        let cfg = cfg();
        let mut r = req(Method::GET, "/.well-known/nq", None, RequestBody::empty());
        let resp = claimed(&cfg, &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(resp.headers[header::CACHE_CONTROL], "no-store");
        let Body::Full(b) = &resp.body else { panic!("config body") };
        let doc: serde_json::Value = serde_json::from_slice(b).unwrap();
        assert_eq!(doc["version"], 1);
        for (k, path) in [
            ("small_download_url", "/__nq/small"),
            ("large_download_url", "/__nq/large"),
            ("upload_url", "/__nq/upload"),
            ("small_https_download_url", "/__nq/small"),
            ("large_https_download_url", "/__nq/large"),
            ("https_upload_url", "/__nq/upload"),
        ] {
            assert_eq!(doc["urls"][k], format!("https://localhost{path}"), "{k}");
        }
        let mut r = req(Method::GET, "/__nq/small", None, RequestBody::empty());
        let resp = claimed(&cfg, &mut r).await.unwrap();
        assert!(matches!(resp.body, Body::Zeros(1)));
        assert_eq!(resp.headers[header::CONTENT_TYPE], "application/octet-stream");
        let mut r = req(Method::HEAD, "/__nq/large", None, RequestBody::empty());
        let resp = claimed(&cfg, &mut r).await.unwrap();
        assert_eq!(resp.headers[header::CONTENT_LENGTH], "8589934592");
        assert!(matches!(resp.body, Body::Empty));
        let mut r = req(Method::POST, "/__nq/large", None, RequestBody::empty());
        assert_eq!(claimed(&cfg, &mut r).await.unwrap().status, StatusCode::METHOD_NOT_ALLOWED);
        let mut r = req(Method::GET, "/__nq/upload", None, RequestBody::empty());
        assert_eq!(claimed(&cfg, &mut r).await.unwrap().status, StatusCode::METHOD_NOT_ALLOWED);
        let mut r = req(Method::POST, "/__nq/upload", None, RequestBody::empty());
        assert_eq!(claimed(&cfg, &mut r).await.unwrap().status, StatusCode::OK);
        let off = SpeedtestConfig { enabled: false, ..cfg };
        let mut r = req(Method::GET, "/.well-known/nq", None, RequestBody::empty());
        assert!(claimed(&off, &mut r).await.is_none());
    }

    #[test]
    fn download_size_parsing() {
        let p = |q: Option<&str>| parse_download_size(q, 1000);
        assert_eq!(p(Some("bytes=0")), Ok(0));
        assert_eq!(p(Some("bytes=1000")), Ok(1000));
        assert_eq!(p(Some("r=0.123&bytes=42")), Ok(42));
        assert!(p(Some("bytes=1001")).unwrap_err().contains("limit of 1000"));
        assert!(p(Some("bytes=99999999999999999999999")).unwrap_err().contains("limit"));
        assert!(p(None).unwrap_err().contains("missing"));
        assert!(p(Some("size=5")).unwrap_err().contains("missing"));
        for bad in ["bytes=", "bytes=1k", "bytes=-1", "bytes=+1", "bytes= 1", "bytes=1.5"] {
            assert!(p(Some(bad)).unwrap_err().contains("plain decimal"), "{bad}");
        }
    }

    #[test]
    fn upload_json_shape() {
        let v: serde_json::Value = serde_json::from_str(&upload_json(1_000_000, 0.5)).unwrap();
        assert_eq!(v["bytes"], 1_000_000);
        assert_eq!(v["seconds"], 0.5);
        assert_eq!(v["mbps"], 16.0);
        let v: serde_json::Value = serde_json::from_str(&upload_json(0, 0.0)).unwrap();
        assert_eq!(v["mbps"], 0.0);
        let v: serde_json::Value = serde_json::from_str(&upload_json(5, f64::NAN)).unwrap();
        assert_eq!((v["seconds"].as_f64(), v["mbps"].as_f64()), (Some(0.0), Some(0.0)));
    }

    #[tokio::test]
    async fn endpoints() {
        let c = cfg();
        let mut r = req(Method::GET, "/__down", Some("bytes=100000"), RequestBody::empty());
        let resp = claimed(&c, &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.headers["content-length"], "100000");
        assert_eq!(resp.headers["cache-control"], "no-store");
        assert_eq!(resp.headers["content-type"], "application/octet-stream");
        assert!(matches!(resp.body, Body::Zeros(100_000)));

        let mut r = req(Method::GET, "/__down", Some("bytes=2000000"), RequestBody::empty());
        let resp = claimed(&c, &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers["cache-control"], "no-store");

        let mut r = req(Method::HEAD, "/__ping", None, RequestBody::empty());
        let resp = claimed(&c, &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::NO_CONTENT);

        let mut r = req(Method::GET, "/__up", None, RequestBody::empty());
        let resp = claimed(&c, &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers["allow"], "POST, PUT");

        let mut r = req(Method::GET, "/index.html", None, RequestBody::empty());
        assert!(claimed(&c, &mut r).await.is_none());
        let off = SpeedtestConfig { enabled: false, ..cfg() };
        let mut r = req(Method::GET, "/__ping", None, RequestBody::empty());
        assert!(claimed(&off, &mut r).await.is_none());
    }

    #[tokio::test]
    async fn upload_counts_bytes() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for n in [1000usize, 65536, 7] {
            tx.send(Ok(Bytes::from(vec![1u8; n]))).unwrap();
        }
        drop(tx);
        let mut r = req(Method::POST, "/__up", None, RequestBody::channel(rx, None));
        let mut resp = claimed(&cfg(), &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.headers["content-type"], "application/json");
        let mut body = Vec::new();
        while let Some(c) = resp.body.next_chunk(1 << 16).await {
            body.extend_from_slice(&c.unwrap());
        }
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["bytes"], 66543);
        assert!(v["seconds"].as_f64().unwrap() >= 0.0);
        assert!(v.get("sha256").is_none());

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(Ok(Bytes::from_static(b"ab"))).unwrap();
        tx.send(Ok(Bytes::from_static(b"c"))).unwrap();
        drop(tx);
        let mut r = req(Method::POST, "/__up", Some("hash=sha256"), RequestBody::channel(rx, None));
        let mut resp = claimed(&cfg(), &mut r).await.unwrap();
        let mut body = Vec::new();
        while let Some(c) = resp.body.next_chunk(1 << 16).await {
            body.extend_from_slice(&c.unwrap());
        }
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(v["sha256"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(Ok(Bytes::from_static(b"abc"))).unwrap();
        tx.send(Err(BodyError::TooLarge)).unwrap();
        let mut r = req(Method::PUT, "/__up", None, RequestBody::channel(rx, None));
        let resp = claimed(&cfg(), &mut r).await.unwrap();
        assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
