//! Sluice's client: connectors for HTTP/1.1, HTTP/2 (hyper's and the own engine's, for shared
//! connections) and HTTP/3 (quinn and the own QPACK), and on top of them `sluice get` and
//! `sluice put`: a command-line HTTP/1.1, HTTP/2 and HTTP/3 client that measures one
//! download or one upload and prints the figures curl's `-w` variables report, so the lab can
//! put its numbers next to curl's. [`H2Conn`] (opened by an [`H2Connector`]), HTTP/2 over TLS
//! on the own engine, is public for callers that send requests and read the engine's events
//! themselves (the lab's `priority` experiment).
//!
//! # What is measured
//!
//! One URL: one request on one new connection (no redirects followed, no retries). Several
//! URLs: one after another, sharing connections where RFC 9113 §9.1.1 and RFC 8336 allow, with
//! one retry after a 421 (`pool.rs`); a reused connection's `time_connect` and
//! `time_appconnect` are 0 and its clock starts when the request is sent.
//!
//! - The clock starts once the host name has been resolved, just before the TCP connect, and
//!   stops when the last byte of the response body has arrived (with `-o`, once it has been
//!   written to the file). `time_total` therefore includes the TCP handshake, the TLS handshake
//!   (https), sending the request (for `put`, the whole upload), waiting for the response and
//!   receiving the response body; it excludes name resolution, process start-up and printing.
//!   (curl's own `time_total` also counts name resolution; for IP-literal URLs the two agree.)
//! - `size_download` (`get`): response body bytes received, after HTTP framing is removed (no
//!   headers, chunk or frame overhead, TLS records). `size_upload` (`put`): request body bytes
//!   handed to the connection (the whole `content-length`, unless the server answered before
//!   taking it all).
//! - `speed_download` / `speed_upload` = size / `time_total` in bytes per second, truncated to an
//!   integer: curl's definition (total bytes over total time, neither a peak nor a steady-state
//!   rate), so on short transfers the connection set-up weighs in.
//! - `mbps` (JSON) = bytes × 8 / seconds / 10⁶, megabits per second as the server's `/__up`
//!   reports it; `bytes_per_second` (JSON) is the integer speed above.
//! - JSON also carries `time_connect` (start → TCP established), `time_appconnect` (start → TLS
//!   handshake done; 0 for cleartext) and `time_starttransfer` (start → response head parsed).
//!
//! # Output
//!
//! - `get`: `speed_download=B/S size_download=N time_total=S http_version=V http_code=C`, or with
//!   `--json` `{"url","http_version","status","bytes","seconds","bytes_per_second","mbps",...}`.
//! - `put`: `speed_upload=B/S size_upload=N time_total=S http_version=V http_code=C`, or with
//!   `--json` the same object plus `"response"`: the response body (JSON when it parses as JSON,
//!   else a string; the first 64 KiB).
//!
//! `time_total` has six decimals, `http_version` is `1.1` or `2` (`1` for HTTP/1.0), and
//! `http_code` has three digits, as curl prints them. The response body of `get` is discarded
//! unless `-o FILE` is given.
//!
//! # Exit codes (curl's)
//!
//! 0 for any HTTP status (22 with `--fail` and a status ≥ 400), 2 bad arguments, 3 bad URL,
//! 6 cannot resolve, 7 cannot connect, 23 cannot write the output file, 26 cannot read the upload,
//! 28 timeout, 35 TLS handshake failed, 52 empty reply, 55 send failed, 56 receive failed,
//! 60 certificate not accepted, 77 CA certificate problem (or neither `--cacert` nor `-k`).

#![forbid(unsafe_code)]

mod body;
mod conn;
mod h2;
mod h3;
pub mod mux;
mod pool;
mod progress;
pub mod quic;
mod speedtest;

pub use h2::{H2Conn, H2Connector, H2Setup};
pub use mux::{H2Mux, MuxConfig, MuxError, MuxReceiver, MuxSender, StreamEvent};
pub use speedtest::{speedtest, SpeedtestArgs};

use std::error::Error as _;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Version};
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;

use body::{Gate, ReqBody};
use conn::{Proto, Target};
use progress::{Counter, Meter};

/// curl's exit codes for the failures the client can meet.
mod code {
    pub(crate) const USAGE: u8 = 2;
    pub(crate) const URL: u8 = 3;
    pub(crate) const RESOLVE: u8 = 6;
    pub(crate) const CONNECT: u8 = 7;
    pub(crate) const HTTP_ERROR: u8 = 22;
    pub(crate) const WRITE: u8 = 23;
    pub(crate) const READ: u8 = 26;
    pub(crate) const TIMEOUT: u8 = 28;
    pub(crate) const TLS: u8 = 35;
    pub(crate) const EMPTY_REPLY: u8 = 52;
    pub(crate) const SEND: u8 = 55;
    pub(crate) const RECV: u8 = 56;
    pub(crate) const PEER_VERIFY: u8 = 60;
    pub(crate) const CA_CERT: u8 = 77;
}

/// How long a body waits for `100 Continue` with `--expect-100` (curl's default).
const EXPECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of a `put` response is kept for the JSON report.
const RESPONSE_KEEP: usize = 64 * 1024;

/// Options shared by `get` and `put`.
#[derive(Args, Debug)]
pub(crate) struct Common {
    /// Speak HTTP/1.1 (over TLS, ALPN offers only http/1.1).
    #[arg(long = "http1.1", group = "proto")]
    http1_1: bool,
    /// Speak HTTP/2 over TLS (ALPN h2, falling back to HTTP/1.1 if the server does not pick it);
    /// the default for https://. Over http:// curl would try an h2c upgrade, which this client
    /// does not do: it speaks HTTP/1.1 and says so.
    #[arg(long, group = "proto")]
    http2: bool,
    /// Speak HTTP/2 without negotiating: h2c over http://, ALPN h2 only over https://.
    #[arg(long = "http2-prior-knowledge", group = "proto")]
    http2_prior_knowledge: bool,
    /// Speak HTTP/3 (QUIC on UDP, ALPN h3) to the URL's port; https:// only. No fallback to TCP.
    #[arg(long, group = "proto")]
    http3: bool,
    /// Accept any server certificate (the handshake signatures are still checked).
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Trust the CA certificates in this PEM file, and only them. There is no built-in root
    /// store: https:// needs --cacert or -k.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Print a JSON object instead of the key=value line.
    #[arg(long)]
    json: bool,
    /// Extra request header, `Name: value` (repeatable); `Name:` with no value removes a default
    /// header (user-agent, accept, content-type).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Exit 22 (curl's code) when the status is 400 or more, without reading the body.
    #[arg(short = 'f', long)]
    fail: bool,
    /// Connect to ADDR for HOST:PORT instead of asking the resolver (curl's syntax;
    /// repeatable). The URL's host still names the server in SNI and `:authority`.
    #[arg(long = "resolve", value_name = "HOST:PORT:ADDR")]
    resolve: Vec<String>,
    /// Give up (exit 28) when the whole run takes longer than this many seconds.
    #[arg(short = 'm', long, value_name = "SECONDS")]
    max_time: Option<f64>,
    /// Give up (exit 28) when resolving, connecting and the TLS handshake take longer than this.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    connect_timeout: f64,
    /// No progress meter (it is shown on standard error only when that is a terminal anyway).
    #[arg(short = 's', long)]
    silent: bool,
}

/// `sluice get URL`.
#[derive(Args, Debug)]
#[command(after_help = "Prints `speed_download=B/S size_download=N time_total=S http_version=V http_code=C` \
    (curl's -w variables; speed = size / time_total, time_total from just before the TCP connect \
    to the last body byte, including the TCP and TLS handshakes), or with --json \
    {\"url\",\"http_version\",\"status\",\"bytes\",\"seconds\",\"bytes_per_second\",\"mbps\",...}.")]
pub struct GetArgs {
    /// http:// or https:// URLs (IPv6 literals in brackets: http://[::1]:8080/). Several are
    /// fetched one after another, sharing HTTP/2 connections where ORIGIN frames, or the
    /// address and certificate, allow it; a line (or JSON object) each.
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
    /// Write the response body to FILE (by default it is discarded); one URL only.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Read the body no faster than this many bytes per second on average (curl's
    /// --limit-rate; a plain number of bytes); one URL only.
    #[arg(long, value_name = "BYTES")]
    limit_rate: Option<u64>,
    #[command(flatten)]
    common: Common,
}

/// Request method for `put`.
#[derive(ValueEnum, Clone, Copy, Debug)]
#[value(rename_all = "UPPER")]
pub(crate) enum UploadMethod {
    Put,
    Post,
}

/// `sluice put URL --data ...`.
#[derive(Args, Debug)]
#[command(after_help = "Prints `speed_upload=B/S size_upload=N time_total=S http_version=V http_code=C` \
    (curl's -w variables; speed = size / time_total, time_total from just before the TCP connect \
    to the end of the response), or with --json \
    {\"bytes\",\"seconds\",\"bytes_per_second\",\"mbps\",\"status\",\"response\",...}.")]
pub struct PutArgs {
    /// http:// or https:// URL (IPv6 literals in brackets: http://[::1]:8080/).
    url: String,
    /// Body: @FILE streams the file from disk as is (like curl's --data-binary; its size is the
    /// content-length), anything else is sent as the body itself.
    #[arg(short = 'd', long, value_name = "@FILE|STRING")]
    data: String,
    /// Request method.
    #[arg(short = 'X', long, value_enum, ignore_case = true, default_value_t = UploadMethod::Put)]
    method: UploadMethod,
    /// Send `Expect: 100-continue` and hold the body until `100 Continue` arrives (at most one
    /// second), over HTTP/1.1 only. Off by default (as curl with `-H 'Expect:'`); note that curl
    /// itself sends it on large HTTP/1.1 uploads, which costs a round trip before the body.
    #[arg(long = "expect-100")]
    expect_100: bool,
    #[command(flatten)]
    common: Common,
}

/// Why a run failed: the message and curl's exit code for it.
#[derive(Debug)]
pub struct Failure {
    pub(crate) code: u8,
    pub(crate) msg: String,
}

impl Failure {
    pub(crate) fn new(code: u8, msg: impl Into<String>) -> Self {
        Self { code, msg: msg.into() }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Failure {}

/// An error and its sources, `outer: inner: innermost`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// What one run measured.
struct Report {
    url: String,
    version: &'static str,
    status: u16,
    /// Body bytes: received (`get`) or sent (`put`).
    bytes: u64,
    total: Duration,
    connect: Duration,
    appconnect: Option<Duration>,
    starttransfer: Duration,
    /// The start of the response body (`put`).
    response: Option<Vec<u8>>,
    /// With several URLs: the connection that served this one.
    reuse: Option<pool::Reuse>,
}

impl Report {
    /// A report for `t` with nothing measured yet.
    fn new(t: &conn::Target) -> Self {
        Self {
            url: t.url.clone(),
            version: "1.1",
            status: 0,
            bytes: 0,
            total: Duration::ZERO,
            connect: Duration::ZERO,
            appconnect: None,
            starttransfer: Duration::ZERO,
            response: None,
            reuse: None,
        }
    }

    fn bytes_per_second(&self) -> u64 {
        let secs = self.total.as_secs_f64();
        if secs > 0.0 {
            (self.bytes as f64 / secs) as u64
        } else {
            0
        }
    }

    fn mbps(&self) -> f64 {
        let secs = self.total.as_secs_f64();
        let mbps = if secs > 0.0 { self.bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 };
        (mbps * 1000.0).round() / 1000.0
    }

    /// The curl-style line; `dir` is `download` or `upload`. With several URLs it goes on with
    /// curl's `num_connects` (0 when the connection was reused), the connection's number in
    /// the run, and how it was found.
    fn line(&self, dir: &str) -> String {
        let mut line = format!(
            "speed_{dir}={} size_{dir}={} time_total={:.6} http_version={} http_code={:03}",
            self.bytes_per_second(),
            self.bytes,
            self.total.as_secs_f64(),
            self.version,
            self.status
        );
        if let Some(r) = &self.reuse {
            let new = u8::from(r.via == pool::Via::New);
            line.push_str(&format!(" num_connects={new} connection={} via={}", r.connection, r.via.name()));
            if r.retried_after_421 {
                line.push_str(" retried_after_421=1");
            }
        }
        line
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "url": self.url,
            "http_version": self.version,
            "status": self.status,
            "bytes": self.bytes,
            "seconds": self.total.as_secs_f64(),
            "bytes_per_second": self.bytes_per_second(),
            "mbps": self.mbps(),
            "time_connect": self.connect.as_secs_f64(),
            "time_appconnect": self.appconnect.unwrap_or_default().as_secs_f64(),
            "time_starttransfer": self.starttransfer.as_secs_f64(),
        });
        if let (Some(r), Some(obj)) = (&self.reuse, v.as_object_mut()) {
            obj.insert("num_connects".to_owned(), u8::from(r.via == pool::Via::New).into());
            obj.insert("connection".to_owned(), r.connection.into());
            obj.insert("via".to_owned(), r.via.name().into());
            obj.insert("retried_after_421".to_owned(), r.retried_after_421.into());
        }
        if let (Some(body), Some(obj)) = (&self.response, v.as_object_mut()) {
            let response = serde_json::from_slice::<serde_json::Value>(body)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into_owned()));
            obj.insert("response".to_owned(), response);
        }
        v
    }
}

/// `sluice get`: downloads the URL and prints the figures.
pub fn get(args: GetArgs) -> ExitCode {
    drive("get", run_get(args))
}

/// `sluice put`: uploads the data to the URL and prints the figures.
pub fn put(args: PutArgs) -> ExitCode {
    drive("put", run_put(args))
}

/// Runs `fut` on a single-threaded runtime of its own (one connection, like curl's one
/// thread); a failure is printed as `sluice WHAT: message` and exits with its code.
fn drive(what: &str, fut: impl Future<Output = Result<(), Failure>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("sluice {what}: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(fut);
    // Don't wait for the connection task or a reader thread still blocked on the network.
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            say(&format!("sluice {what}: {}", f.msg));
            ExitCode::from(f.code)
        }
    }
}

/// A line on standard error (unlike `eprintln!`, never panics when that is gone).
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Everything decided before connecting.
struct Setup {
    target: Target,
    proto: Proto,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `--header`s; a `None` value removes a default header.
    headers: Vec<(HeaderName, Option<HeaderValue>)>,
    connect_timeout: Duration,
    max_time: Option<Duration>,
    /// `--resolve` entries.
    overrides: Vec<conn::Override>,
}

impl Setup {
    fn new(url: &str, c: &Common) -> Result<Self, Failure> {
        let target = conn::parse_url(url)?;
        let proto = if c.http1_1 {
            Proto::H1
        } else if c.http2 {
            Proto::H2
        } else if c.http2_prior_knowledge {
            Proto::H2Prior
        } else if c.http3 {
            Proto::H3
        } else {
            Proto::Default
        };
        if proto == Proto::H3 && !target.https {
            return Err(Failure::new(code::USAGE, "--http3 needs an https:// URL".to_owned()));
        }
        if proto == Proto::H2 && !target.https {
            say("sluice: note: --http2 over http:// means an h2c upgrade, which this client does not do; \
                 using HTTP/1.1 (--http2-prior-knowledge speaks h2c)");
        }
        let tls = conn::tls_config(&target, proto, c.insecure, c.cacert.as_deref())?;
        let headers = c.headers.iter().map(|h| parse_header(h)).collect::<Result<_, _>>()?;
        let connect_timeout = seconds("--connect-timeout", c.connect_timeout)?;
        let max_time = c.max_time.map(|s| seconds("--max-time", s)).transpose()?;
        let overrides = c.resolve.iter().map(|r| conn::Override::parse(r)).collect::<Result<_, _>>()?;
        Ok(Self { target, proto, tls, headers, connect_timeout, max_time, overrides })
    }

    /// The target's addresses (`--resolve`, else the resolver).
    async fn addrs(&self) -> Result<Vec<std::net::SocketAddr>, Failure> {
        conn::resolve(&self.target, &self.overrides, self.connect_timeout).await
    }

    /// The request, with the default headers, then the user's.
    fn request(&self, h2: bool, method: Method, body: ReqBody, len: Option<u64>) -> Result<Request<ReqBody>, Failure> {
        let mut req = Request::new(body);
        *req.method_mut() = method;
        *req.uri_mut() = self.target.request_uri(h2)?;
        let h = req.headers_mut();
        if !h2 {
            h.insert(header::HOST, authority_value(&self.target)?);
        }
        self.add_headers(h, len);
        Ok(req)
    }

    /// The default headers (user-agent, accept; content-type and -length for a body of `len`),
    /// then the user's `--header`s over them.
    fn add_headers(&self, h: &mut http::HeaderMap, len: Option<u64>) {
        h.insert(header::USER_AGENT, HeaderValue::from_static(concat!("sluice/", env!("CARGO_PKG_VERSION"))));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        if let Some(len) = len {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        for (name, value) in &self.headers {
            match value {
                Some(v) => {
                    h.insert(name.clone(), v.clone());
                }
                None => {
                    h.remove(name);
                }
            }
        }
    }
}

fn authority_value(t: &Target) -> Result<HeaderValue, Failure> {
    HeaderValue::from_str(t.authority.as_str()).map_err(|e| Failure::new(code::URL, format!("bad host: {e}")))
}

fn seconds(flag: &str, s: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure::new(code::USAGE, format!("{flag} {s}: give a positive number of seconds")))
}

/// `Name: value` → header; `Name:` → remove that header.
fn parse_header(text: &str) -> Result<(HeaderName, Option<HeaderValue>), Failure> {
    let bad = |why: String| Failure::new(code::USAGE, format!("--header `{text}`: {why}"));
    let (name, value) = text.split_once(':').ok_or_else(|| bad("expected `Name: value`".to_owned()))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| bad(e.to_string()))?;
    let value = value.trim();
    if value.is_empty() {
        return Ok((name, None));
    }
    let value = HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?;
    Ok((name, Some(value)))
}

fn progress_wanted(c: &Common) -> bool {
    !c.silent && std::io::stderr().is_terminal()
}

/// Runs `fut`, bounded by `--max-time`.
async fn bounded<T>(
    max_time: Option<Duration>,
    counter: &Counter,
    fut: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    let Some(limit) = max_time else {
        return fut.await;
    };
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(Failure::new(
            code::TIMEOUT,
            format!("operation timed out after {limit:?} with {} body bytes transferred", counter.bytes()),
        )),
    }
}

/// Prints the report (line or JSON) on standard output.
fn print_report(report: &Report, json: bool, dir: &str) -> Result<(), Failure> {
    let text = if json { report.json().to_string() } else { report.line(dir) };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(code::WRITE, format!("cannot write to standard output: {e}")))
}

fn fail_on_status(fail: bool, status: u16) -> Result<(), Failure> {
    if fail && status >= 400 {
        return Err(Failure::new(code::HTTP_ERROR, format!("the requested URL returned error: {status}")));
    }
    Ok(())
}

fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// A request that got no response head.
fn send_failure(e: &hyper::Error, h2: bool) -> Failure {
    let text = chain(e);
    if e.is_incomplete_message() || (!h2 && e.is_canceled()) {
        return Failure::new(code::EMPTY_REPLY, format!("empty reply from server: {text}"));
    }
    if let Some(io) = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()) {
        return Failure::new(code::READ, format!("reading the upload failed: {io}"));
    }
    if e.is_parse() && !h2 {
        return Failure::new(code::RECV, format!("the answer is not HTTP/1.x ({text}); a TLS port? (https://)"));
    }
    if e.is_user() {
        return Failure::new(code::SEND, format!("sending the request failed: {text}"));
    }
    Failure::new(code::RECV, format!("no response: {text}"))
}

/// A response body that broke off.
fn body_failure(e: &hyper::Error, counter: &Counter) -> Failure {
    Failure::new(code::RECV, format!("receiving the body failed after {} bytes: {}", counter.bytes(), chain(e)))
}

async fn run_get(args: GetArgs) -> Result<(), Failure> {
    if args.urls.len() > 1 {
        return run_get_many(&args).await;
    }
    let setup = Setup::new(&args.urls[0], &args.common)?;
    let counter = Arc::new(Counter::limited(args.limit_rate));
    let meter = Meter::start(progress_wanted(&args.common), "down", counter.clone());
    let report =
        bounded(setup.max_time, &counter, download(&setup, args.output.as_deref(), args.common.fail, &counter)).await;
    drop(meter);
    let report = report?;
    print_report(&report, args.common.json, "download")?;
    fail_on_status(args.common.fail, report.status)
}

/// Several URLs, one after another, on shared connections where allowed (`pool.rs`). Each
/// gets its line; a failed URL is reported and the run goes on; the exit code is the last
/// failure's (as curl's).
async fn run_get_many(args: &GetArgs) -> Result<(), Failure> {
    if args.output.is_some() || args.limit_rate.is_some() {
        return Err(Failure::new(code::USAGE, "-o/--output and --limit-rate take one URL".to_owned()));
    }
    let setups = args.urls.iter().map(|u| Setup::new(u, &args.common)).collect::<Result<Vec<_>, _>>()?;
    let mut pool = pool::Pool::default();
    let (mut failed, mut last_code) = (0, 0);
    for setup in &setups {
        let counter = Arc::new(Counter::default());
        let meter = Meter::start(progress_wanted(&args.common), "down", counter.clone());
        let report = bounded(setup.max_time, &counter, pool.fetch(setup, args.common.fail, &counter)).await;
        drop(meter);
        let outcome = report.and_then(|r| {
            print_report(&r, args.common.json, "download")?;
            fail_on_status(args.common.fail, r.status)
        });
        if let Err(f) = outcome {
            say(&format!("sluice get: {}: {}", setup.target.url, f.msg));
            failed += 1;
            last_code = f.code;
        }
    }
    pool.close().await;
    if failed > 0 {
        return Err(Failure::new(last_code, format!("{failed} of {} URLs failed", setups.len())));
    }
    Ok(())
}

async fn download(setup: &Setup, output: Option<&Path>, fail: bool, counter: &Counter) -> Result<Report, Failure> {
    if setup.proto == Proto::H3 {
        return download_h3(setup, output, fail, counter).await;
    }
    let conn =
        conn::connect(&setup.target, &setup.addrs().await?, setup.proto, setup.tls.clone(), setup.connect_timeout)
            .await?;
    download_on(setup, conn, output, fail, counter).await
}

/// GET on `conn` (hyper, HTTP/1.1 or HTTP/2).
async fn download_on(
    setup: &Setup,
    mut conn: conn::Connected,
    output: Option<&Path>,
    fail: bool,
    counter: &Counter,
) -> Result<Report, Failure> {
    let req = setup.request(conn.h2, Method::GET, ReqBody::empty(), None)?;
    let resp = conn.sender.send(req).await.map_err(|e| send_failure(&e, conn.h2))?;
    let starttransfer = conn.start.elapsed();
    let status = resp.status().as_u16();
    let mut report = Report {
        version: version_str(resp.version()),
        status,
        connect: conn.connect,
        appconnect: conn.appconnect,
        starttransfer,
        ..Report::new(&setup.target)
    };
    if fail && status >= 400 {
        report.total = conn.start.elapsed();
        return Ok(report);
    }
    counter.set_total(content_length(resp.headers()));
    let mut out = match output {
        Some(path) => Some(tokio::fs::File::create(path).await.map_err(|e| write_failure(path, &e))?),
        None => None,
    };
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| body_failure(&e, counter))?;
        if let Ok(data) = frame.into_data() {
            counter.add(data.len() as u64);
            if let (Some(file), Some(path)) = (out.as_mut(), output) {
                file.write_all(&data).await.map_err(|e| write_failure(path, &e))?;
            }
            counter.pace().await;
        }
    }
    if let (Some(file), Some(path)) = (out.as_mut(), output) {
        file.flush().await.map_err(|e| write_failure(path, &e))?;
    }
    report.total = conn.start.elapsed();
    report.bytes = counter.bytes();
    Ok(report)
}

/// The request's regular header fields for the own HTTP/2 and HTTP/3 clients (hyper builds
/// its own): the defaults, then the user's.
fn own_fields(setup: &Setup, len: Option<u64>) -> Vec<(String, String)> {
    let mut h = http::HeaderMap::new();
    setup.add_headers(&mut h, len);
    h.iter().map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
}

async fn download_h3(setup: &Setup, output: Option<&Path>, fail: bool, counter: &Counter) -> Result<Report, Failure> {
    let tls = setup.tls.clone().ok_or_else(|| Failure::new(code::USAGE, "--http3 needs https://".to_owned()))?;
    let c = h3::connect(&setup.target, setup.addrs().await?[0], tls, setup.connect_timeout).await?;
    let mut resp = h3::send(&c, &setup.target, &Method::GET, &own_fields(setup, None), None).await?;
    let mut report = Report {
        version: "3",
        status: resp.status,
        connect: c.appconnect,
        appconnect: Some(c.appconnect),
        starttransfer: resp.starttransfer,
        ..Report::new(&setup.target)
    };
    if fail && resp.status >= 400 {
        report.total = c.start.elapsed();
        return Ok(report);
    }
    counter.set_total(resp.content_length);
    let mut out = match output {
        Some(path) => Some(tokio::fs::File::create(path).await.map_err(|e| write_failure(path, &e))?),
        None => None,
    };
    while let Some(data) = resp.chunk().await? {
        counter.add(data.len() as u64);
        if let (Some(file), Some(path)) = (out.as_mut(), output) {
            file.write_all(&data).await.map_err(|e| write_failure(path, &e))?;
        }
        counter.pace().await;
    }
    if let (Some(file), Some(path)) = (out.as_mut(), output) {
        file.flush().await.map_err(|e| write_failure(path, &e))?;
    }
    report.total = c.start.elapsed();
    report.bytes = counter.bytes();
    c.close().await;
    Ok(report)
}

async fn upload_h3(
    setup: &Setup,
    method: Method,
    body: ReqBody,
    len: u64,
    counter: &Counter,
) -> Result<Report, Failure> {
    let tls = setup.tls.clone().ok_or_else(|| Failure::new(code::USAGE, "--http3 needs https://".to_owned()))?;
    let c = h3::connect(&setup.target, setup.addrs().await?[0], tls, setup.connect_timeout).await?;
    let mut resp = h3::send(&c, &setup.target, &method, &own_fields(setup, Some(len)), Some(body)).await?;
    let mut kept = Vec::new();
    while let Some(data) = resp.chunk().await? {
        let room = RESPONSE_KEEP.saturating_sub(kept.len());
        kept.extend_from_slice(&data[..data.len().min(room)]);
    }
    resp.upload_result().await?;
    let report = Report {
        version: "3",
        status: resp.status,
        bytes: counter.bytes(),
        total: c.start.elapsed(),
        connect: c.appconnect,
        appconnect: Some(c.appconnect),
        starttransfer: resp.starttransfer,
        response: Some(kept),
        ..Report::new(&setup.target)
    };
    c.close().await;
    Ok(report)
}

fn write_failure(path: &Path, e: &std::io::Error) -> Failure {
    Failure::new(code::WRITE, format!("cannot write `{}`: {e}", path.display()))
}

fn content_length(h: &http::HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// What `put` sends.
enum Upload {
    Bytes(Bytes),
    File(std::fs::File, u64),
}

impl Upload {
    /// `@FILE` → the file, opened now (so a missing file fails before connecting); else the text.
    fn open(data: &str) -> Result<Self, Failure> {
        let Some(path) = data.strip_prefix('@') else {
            return Ok(Self::Bytes(Bytes::copy_from_slice(data.as_bytes())));
        };
        let fail = |why: String| Failure::new(code::READ, format!("--data @{path}: {why}"));
        if path == "-" {
            return Err(fail("standard input is not supported (the length must be known): give a file".to_owned()));
        }
        let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() {
            return Err(fail("not a regular file".to_owned()));
        }
        Ok(Self::File(file, meta.len()))
    }

    fn len(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::File(_, len) => *len,
        }
    }
}

async fn run_put(args: PutArgs) -> Result<(), Failure> {
    let setup = Setup::new(&args.url, &args.common)?;
    let upload = Upload::open(&args.data)?;
    let method = match args.method {
        UploadMethod::Put => Method::PUT,
        UploadMethod::Post => Method::POST,
    };
    let counter = Arc::new(Counter::default());
    counter.set_total(Some(upload.len()));
    let meter = Meter::start(progress_wanted(&args.common), "up", counter.clone());
    let report =
        bounded(setup.max_time, &counter, send_upload(&setup, method, upload, args.expect_100, &counter)).await;
    drop(meter);
    let report = report?;
    print_report(&report, args.common.json, "upload")?;
    fail_on_status(args.common.fail, report.status)
}

async fn send_upload(
    setup: &Setup,
    method: Method,
    upload: Upload,
    expect_100: bool,
    counter: &Arc<Counter>,
) -> Result<Report, Failure> {
    let len = upload.len();
    let mut body = match upload {
        Upload::Bytes(b) => ReqBody::bytes(b, counter.clone()),
        Upload::File(file, len) => ReqBody::file(file, len, counter.clone())
            .map_err(|e| Failure::new(code::READ, format!("cannot start reading the upload: {e}")))?,
    };
    if setup.proto == Proto::H3 {
        if expect_100 {
            say("sluice: note: --expect-100 applies to HTTP/1.1 only; not sent over HTTP/3");
        }
        return upload_h3(setup, method, body, len, counter).await;
    }
    let mut conn =
        conn::connect(&setup.target, &setup.addrs().await?, setup.proto, setup.tls.clone(), setup.connect_timeout)
            .await?;
    let gate = if expect_100 && !conn.h2 && len > 0 {
        let (gate, opener) = Gate::new(EXPECT_TIMEOUT);
        body.set_gate(gate);
        Some(opener)
    } else {
        if expect_100 && conn.h2 {
            say("sluice: note: --expect-100 applies to HTTP/1.1 only; not sent over HTTP/2");
        }
        None
    };
    let mut req = setup.request(conn.h2, method, body, Some(len))?;
    if let Some(opener) = gate {
        req.headers_mut().insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        hyper::ext::on_informational(&mut req, move |res| {
            if res.status() == http::StatusCode::CONTINUE {
                opener.open();
            }
        });
    }
    let resp = conn.sender.send(req).await.map_err(|e| send_failure(&e, conn.h2))?;
    let starttransfer = conn.start.elapsed();
    let status = resp.status().as_u16();
    let version = version_str(resp.version());
    let mut kept = Vec::new();
    let mut body = resp.into_body();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Failure::new(code::RECV, format!("receiving the response failed after {received} bytes: {}", chain(&e)))
        })?;
        if let Ok(data) = frame.into_data() {
            received += data.len() as u64;
            let room = RESPONSE_KEEP.saturating_sub(kept.len());
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(Report {
        version,
        status,
        bytes: counter.bytes(),
        total: conn.start.elapsed(),
        connect: conn.connect,
        appconnect: conn.appconnect,
        starttransfer,
        response: Some(kept),
        ..Report::new(&setup.target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(bytes: u64, total: Duration) -> Report {
        Report {
            url: "https://127.0.0.1:1/x".to_owned(),
            version: "2",
            status: 200,
            bytes,
            total,
            connect: Duration::from_millis(1),
            appconnect: Some(Duration::from_millis(2)),
            starttransfer: Duration::from_millis(3),
            response: None,
            reuse: None,
        }
    }

    #[test]
    fn line_matches_curl_write_out() {
        let r = report(5_000_000, Duration::from_millis(500));
        assert_eq!(
            r.line("download"),
            "speed_download=10000000 size_download=5000000 time_total=0.500000 http_version=2 http_code=200"
        );
        let mut r = report(0, Duration::ZERO);
        r.status = 0;
        assert_eq!(r.line("upload"), "speed_upload=0 size_upload=0 time_total=0.000000 http_version=2 http_code=000");
    }

    #[test]
    fn json_report() {
        let mut r = report(3_000_000, Duration::from_secs(2));
        r.response = Some(br#"{"bytes":3000000,"seconds":1.5,"mbps":16.0}"#.to_vec());
        let v = r.json();
        assert_eq!(v["bytes"], 3_000_000);
        assert_eq!(v["bytes_per_second"], 1_500_000);
        assert_eq!(v["mbps"], 12.0);
        assert_eq!(v["seconds"], 2.0);
        assert_eq!(v["http_version"], "2");
        assert_eq!(v["status"], 200);
        assert_eq!(v["response"]["bytes"], 3_000_000);
        r.response = Some(b"not json".to_vec());
        assert_eq!(r.json()["response"], "not json");
    }

    #[test]
    fn headers_parse() {
        let (n, v) = parse_header("X-Test:  a b ").expect("valid");
        assert_eq!((n.as_str(), v.expect("value").to_str().expect("ascii")), ("x-test", "a b"));
        let (n, v) = parse_header("User-Agent:").expect("valid");
        assert_eq!(n, header::USER_AGENT);
        assert!(v.is_none());
        for bad in ["no colon", ": value", "bad name: x", "x: a\u{1}b"] {
            assert_eq!(parse_header(bad).expect_err(bad).code, code::USAGE, "{bad}");
        }
    }

    #[test]
    fn versions_as_curl_prints_them() {
        assert_eq!(version_str(Version::HTTP_11), "1.1");
        assert_eq!(version_str(Version::HTTP_2), "2");
        assert_eq!(version_str(Version::HTTP_10), "1");
    }

    #[test]
    fn timeouts_must_be_positive() {
        assert!(seconds("--max-time", 1.5).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(seconds("--max-time", bad).expect_err("bad").code, code::USAGE);
        }
    }
}
