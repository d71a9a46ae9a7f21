//! `sluice speedtest URL`: the IETF responsiveness test (draft-ietf-ippm-responsiveness-08,
//! "RPM") with its capacity figures, from a terminal, against any server that publishes
//! `/.well-known/nq` (Sluice does, as Apple's and Cloudflare's servers do).
//!
//! Over HTTP/2 on TLS (the draft's §7 requires it of both sides), each direction in turn:
//! load-generating connections, one more per interval (§5.2: INP 1, INC 1, MNP 16, ID 1 s),
//! each a download of the large resource (or an upload that never ends); every probe period a
//! *foreign* probe (a new connection: TCP handshake, TLS handshake, GET of the 1-byte resource)
//! and a *self* probe (that GET on a random load-generating connection). The direction ends
//! when the moving average of the goodput over MAD (4) intervals and that of the
//! responsiveness are both stable (standard deviation of the last MAD averages under SDT, 5 %,
//! of the current one: §5.4), or at `--duration`. Responsiveness is §5.3.1.1's: the probes of
//! the last MAD intervals, each kind's 95 % single-sided trimmed mean (the worst 5 % dropped),
//! `foreign = 60000 / ((tcp + tls + http) / 3)`, `loaded = 60000 / http_self`,
//! RPM = (foreign + loaded) / 2. Idle latency and jitter come first: ten GETs of the 1-byte
//! resource one after another on an idle connection.
//!
//! The load-generating connections' windows are large (16 MiB per stream), so the client's
//! flow control does not cap what it measures; their requests are incremental (RFC 9218), so
//! a server's scheduler lets the self probes' small answers through; their sockets hold at
//! most 64 KiB unsent (TCP_NOTSENT_LOWAT), so a self probe's request is not queued behind
//! megabytes of upload in the kernel. A download's goodput is the body bytes received; an
//! upload's, the bytes its sockets saw acknowledged (TCP_INFO), not what was handed to them.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, ValueEnum};

use crate::conn::{self, Proto, Stream, Target};
use crate::mux::{H2Mux, MuxConfig, StreamEvent};
use crate::{code, Failure};

/// `sluice speedtest URL`.
#[derive(Args, Debug)]
#[command(after_help = "Prints the idle latency and, per direction, the capacity (Mbit/s), the \
    responsiveness (RPM, draft-ietf-ippm-responsiveness-08) and the loaded latencies; with \
    --json one object: {\"url\",\"protocol\",\"idle_latency_ms\",\"jitter_ms\",\"download\":{...},\"upload\":{...}}.")]
pub struct SpeedtestArgs {
    /// The server: an https:// origin (its /.well-known/nq is read) or the URL of a
    /// configuration document.
    url: String,
    /// Print one JSON object (no progress lines).
    #[arg(long)]
    json: bool,
    /// Accept any server certificate.
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Trust the CA certificates in this PEM file, and only them.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Seconds each direction may take at most.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    duration: f64,
    /// The interval (the draft's ID) in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    interval: f64,
    /// Load-generating connections at most (the draft's MNP).
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_connections: usize,
    /// Which directions to measure, one after the other.
    #[arg(long, value_enum, default_value_t = Direction::Both)]
    direction: Direction,
}

/// `--direction`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Both,
    Download,
    Upload,
}

/// The draft's parameters (§5.2): moving-average distance, standard-deviation tolerance,
/// trimmed-mean percentile.
const MAD: usize = 4;
const SDT: f64 = 0.05;
const TMP: f64 = 0.95;
/// Probes of each kind per second (the draft allows up to 100; ten keep the probes' own
/// traffic far under 5 % of any link worth measuring).
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Zeros an upload sends per write.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// `sluice speedtest`: runs the test and prints it.
pub fn speedtest(args: SpeedtestArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            crate::say(&format!("sluice speedtest: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(run(args));
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            crate::say(&format!("sluice speedtest: {}", f.msg));
            ExitCode::from(f.code)
        }
    }
}

/// The three resources of the configuration document.
#[derive(Debug, Clone)]
struct Urls {
    small: Target,
    large: Target,
    upload: Target,
}

/// What the connections share: TLS set-up and the server's address.
struct Net {
    tls: Arc<rustls::ClientConfig>,
    addrs: Vec<std::net::SocketAddr>,
    timeout: Duration,
}

/// Bytes a load-generating connection's socket may hold unsent (TCP_NOTSENT_LOWAT): the rest
/// waits in the HTTP/2 engine, where a self probe's request can go ahead of it. Without it
/// the kernel queues megabytes of upload ahead of the probe, and the probe measures the
/// client's own send buffer (the draft's -09 suggests this socket option for that reason).
const LOAD_NOTSENT: u32 = 64 * 1024;

impl Net {
    /// A new HTTP/2 connection to `t`, its TCP and TLS handshake times, and its socket.
    /// `load`: a load-generating connection (large windows, a small unsent-bytes mark).
    async fn connect(&self, t: &Target, load: bool) -> Result<(H2Mux, Duration, Duration, RawFd), Failure> {
        let opened = conn::open(t, &self.addrs, Some(self.tls.clone()), self.timeout).await?;
        if !opened.alpn_h2() {
            return Err(Failure::new(code::TLS, format!("{}: the server did not agree to h2", t.url)));
        }
        let tcp = opened.connect;
        let tls = opened.appconnect.unwrap_or(tcp).saturating_sub(tcp);
        let Stream::Tls(io) = opened.stream else {
            return Err(Failure::new(code::TLS, "https without TLS".to_owned()));
        };
        let fd = io.get_ref().0.as_raw_fd();
        let mut cfg = MuxConfig::default();
        if load {
            let _ = sluice_sys::sock::set_notsent_lowat(fd, LOAD_NOTSENT);
            // What an upload queues in the engine ahead of a self probe's request, likewise.
            cfg.send_buffer = LOAD_NOTSENT as usize;
            cfg.engine.stream_window = 16 << 20;
            cfg.engine.connection_window = 32 << 20;
        }
        let mux = H2Mux::handshake(io, cfg, self.timeout)
            .await
            .map_err(|e| Failure::new(code::CONNECT, format!("HTTP/2 with {}: {e}", t.url)))?;
        Ok((mux, tcp, tls, fd))
    }
}

/// GET `t` on `mux`: the status and the body (at most `keep` bytes kept), and how long from
/// the request to the body's end.
async fn get(mux: &H2Mux, t: &Target, keep: usize) -> Result<(u16, Vec<u8>, Duration), Failure> {
    let start = Instant::now();
    let req = sluice_h2::client::Request {
        method: "GET",
        scheme: "https",
        authority: t.authority.as_str(),
        path: &t.path,
        fields: &[("accept-encoding", "identity"), ("user-agent", "sluice-speedtest")],
    };
    let (_tx, mut rx) = mux
        .request(&req, true, Duration::from_secs(10))
        .await
        .map_err(|e| Failure::new(code::SEND, format!("{}: {e}", t.url)))?;
    let mut status = 0;
    let mut body = Vec::new();
    while let Some(ev) = rx.next_event().await {
        match ev {
            StreamEvent::Head { status: s, .. } => status = s,
            StreamEvent::Data { data, .. } => {
                let room = keep.saturating_sub(body.len());
                body.extend_from_slice(&data[..data.len().min(room)]);
                rx.release(data.len());
            }
            StreamEvent::Reset(e) => return Err(Failure::new(code::RECV, format!("{}: {e}", t.url))),
            _ => {}
        }
    }
    Ok((status, body, start.elapsed()))
}

/// The configuration document at `url` (or at the origin's `/.well-known/nq`), read over
/// `net`: the three resources, by the draft's names or the older `*_https_*` ones.
async fn config(net: &Net, url: &Target) -> Result<Urls, Failure> {
    let mut at = url.clone();
    if at.path == "/" || at.path.is_empty() {
        at.path = "/.well-known/nq".into();
        at.url = format!("https://{}{}", at.authority, at.path);
    }
    let (mux, ..) = net.connect(&at, false).await?;
    let (status, body, _) = get(&mux, &at, 64 * 1024).await?;
    if status != 200 {
        return Err(Failure::new(code::HTTP_ERROR, format!("{}: status {status}", at.url)));
    }
    let doc: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| Failure::new(code::RECV, format!("{}: not a JSON configuration: {e}", at.url)))?;
    if doc["version"] != 1 && !doc["version"].is_null() {
        return Err(Failure::new(
            code::RECV,
            format!("{}: configuration version {} (1 expected)", at.url, doc["version"]),
        ));
    }
    let pick = |names: [&str; 2]| -> Result<Target, Failure> {
        let u = names.iter().find_map(|n| doc["urls"][n].as_str()).ok_or_else(|| {
            Failure::new(code::RECV, format!("{}: the configuration names no `{}`", at.url, names[0]))
        })?;
        let t = conn::parse_url(u)?;
        if !t.https {
            return Err(Failure::new(code::URL, format!("{u}: the test runs over HTTP/2 on TLS (https://)")));
        }
        if t.host != at.host || t.port != at.port {
            return Err(Failure::new(code::URL, format!("{u}: not the configuration's server (§8.1: one host)")));
        }
        Ok(t)
    };
    Ok(Urls {
        small: pick(["small_download_url", "small_https_download_url"])?,
        large: pick(["large_download_url", "large_https_download_url"])?,
        upload: pick(["upload_url", "https_upload_url"])?,
    })
}

/// The probes' times, in ms, with when they were taken.
#[derive(Default)]
struct Probes {
    /// Foreign probes: (taken at, TCP, TLS, HTTP).
    foreign: Vec<(Instant, f64, f64, f64)>,
    /// Self probes: (taken at, HTTP).
    own: Vec<(Instant, f64)>,
}

/// The mean of the best `TMP` share of `v` (the worst values dropped): the draft's
/// single-sided trimmed mean; `None` when empty.
fn trimmed_mean(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let keep = ((v.len() as f64 * TMP).ceil() as usize).clamp(1, v.len());
    Some(v[..keep].iter().sum::<f64>() / keep as f64)
}

/// Responsiveness from the probes taken since `since` (§5.3.1.1), with the loaded latencies
/// it came from: (RPM, foreign ms, self ms).
fn responsiveness(p: &Probes, since: Instant) -> Option<(f64, f64, f64)> {
    let f: Vec<_> = p.foreign.iter().filter(|x| x.0 >= since).collect();
    let tcp = trimmed_mean(f.iter().map(|x| x.1).collect())?;
    let tls = trimmed_mean(f.iter().map(|x| x.2).collect())?;
    let http = trimmed_mean(f.iter().map(|x| x.3).collect())?;
    let own = trimmed_mean(p.own.iter().filter(|x| x.0 >= since).map(|x| x.1).collect())?;
    let foreign_ms = (tcp + tls + http) / 3.0;
    let foreign = 60_000.0 / foreign_ms.max(0.001);
    let loaded = 60_000.0 / own.max(0.001);
    Some(((foreign + loaded) / 2.0, foreign_ms, own))
}

/// Whether the last `MAD` values of `avgs` are within `SDT` of the last one (§5.4).
fn stable(avgs: &[f64]) -> bool {
    if avgs.len() < MAD {
        return false;
    }
    let w = &avgs[avgs.len() - MAD..];
    let mean = w.iter().sum::<f64>() / MAD as f64;
    let sd = (w.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / MAD as f64).sqrt();
    let last = *w.last().unwrap_or(&0.0);
    last > 0.0 && sd < SDT * last
}

/// One direction's result.
struct Leg {
    mbps: f64,
    rpm: Option<(f64, f64, f64)>,
    flows: usize,
    intervals: usize,
    confidence: &'static str,
    bytes: u64,
}

/// A load-generating connection: its task moves bytes and counts them into `bytes`
/// (downloads); an upload's goodput is what its socket saw acknowledged (`acked` from
/// `acked_at_start`), not what was handed to it.
struct Load {
    mux: Arc<H2Mux>,
    task: tokio::task::JoinHandle<()>,
    fd: RawFd,
    acked_at_start: u64,
}

impl Load {
    /// Bytes the peer acknowledged on this connection since it was opened for load (TLS and
    /// HTTP/2 framing included: about 0.3 % more than the body bytes).
    fn acked(&self) -> u64 {
        sluice_sys::sock::path_info(self.fd).map_or(0, |i| i.bytes_acked.saturating_sub(self.acked_at_start))
    }
}

/// Start a load-generating connection for `dir` counting into `bytes`.
async fn load(net: &Net, urls: &Urls, upload: bool, bytes: Arc<AtomicU64>) -> Result<Load, Failure> {
    let target = if upload { urls.upload.clone() } else { urls.large.clone() };
    let (mux, _, _, fd) = net.connect(&target, true).await?;
    let acked_at_start = sluice_sys::sock::path_info(fd).map_or(0, |i| i.bytes_acked);
    let mux = Arc::new(mux);
    let m = mux.clone();
    let task = tokio::spawn(async move {
        // Again and again, should the server end a response (or an upload) before the test.
        loop {
            // Incremental (RFC 9218 §4.2): a server serves same-urgency non-incremental
            // responses one after another (§10; Sluice and h2o do), and the 1-byte answer of a
            // self probe, which carries no priority (§5.3 of the draft), would wait behind
            // 8 GiB. Marked incremental, the load shares the connection with it.
            let req = sluice_h2::client::Request {
                method: if upload { "POST" } else { "GET" },
                scheme: "https",
                authority: target.authority.as_str(),
                path: &target.path,
                fields: &[
                    ("accept-encoding", "identity"),
                    ("content-type", "application/octet-stream"),
                    ("priority", "i"),
                ],
            };
            let Ok((mut tx, mut rx)) = m.request(&req, !upload, Duration::from_secs(10)).await else { return };
            if upload {
                while tx.send_data(Bytes::from_static(&ZEROS), false).await.is_ok() {
                    bytes.fetch_add(ZEROS.len() as u64, Ordering::Relaxed);
                }
                return;
            }
            while let Some(ev) = rx.next_event().await {
                match ev {
                    StreamEvent::Data { data, .. } => {
                        bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                        rx.release(data.len());
                    }
                    StreamEvent::Reset(_) => return,
                    _ => {}
                }
            }
        }
    });
    Ok(Load { mux, task, fd, acked_at_start })
}

/// Measure one direction.
async fn leg(
    net: Arc<Net>,
    urls: Arc<Urls>,
    upload: bool,
    args: &SpeedtestArgs,
    progress: bool,
) -> Result<Leg, Failure> {
    let name = if upload { "upload" } else { "download" };
    let bytes = Arc::new(AtomicU64::new(0));
    let probes = Arc::new(Mutex::new(Probes::default()));
    let mut loads = vec![load(&net, &urls, upload, bytes.clone()).await?];
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 10.0));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration.clamp(1.0, 600.0));
    // Probes: every period a foreign and a self probe, each in a task of its own.
    let muxes: Arc<Mutex<Vec<Arc<H2Mux>>>> = Arc::new(Mutex::new(loads.iter().map(|l| l.mux.clone()).collect()));
    let prober = {
        let (net, urls, probes, muxes) = (net.clone(), urls.clone(), probes.clone(), muxes.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_EVERY);
            let mut n: usize = 0;
            loop {
                tick.tick().await;
                n = n.wrapping_add(1);
                let (net2, small, probes2) = (net.clone(), urls.small.clone(), probes.clone());
                tokio::spawn(async move {
                    let taken = Instant::now();
                    let Ok((mux, tcp, tls, _)) = net2.connect(&small, false).await else { return };
                    if let Ok((200, _, http)) = get(&mux, &small, 1).await {
                        let ms = |d: Duration| d.as_secs_f64() * 1e3;
                        // TLS 1.3: one round trip.
                        probes2.lock().unwrap_or_else(|p| p.into_inner()).foreign.push((
                            taken,
                            ms(tcp),
                            ms(tls),
                            ms(http),
                        ));
                    }
                });
                let pick = {
                    let m = muxes.lock().unwrap_or_else(|p| p.into_inner());
                    m.get(n % m.len().max(1)).cloned()
                };
                if let Some(mux) = pick {
                    let (small, probes2) = (urls.small.clone(), probes.clone());
                    tokio::spawn(async move {
                        let taken = Instant::now();
                        if let Ok((200, _, http)) = get(&mux, &small, 1).await {
                            probes2
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .own
                                .push((taken, http.as_secs_f64() * 1e3));
                        }
                    });
                }
            }
        })
    };
    let mut per_interval: Vec<f64> = Vec::new();
    let mut goodput_avgs: Vec<f64> = Vec::new();
    let mut rpm_avgs: Vec<f64> = Vec::new();
    let mut interval_starts: Vec<Instant> = Vec::new();
    let moved = |loads: &[Load]| -> u64 {
        if upload {
            loads.iter().map(Load::acked).sum()
        } else {
            bytes.load(Ordering::Relaxed)
        }
    };
    let mut last_bytes = moved(&loads);
    let mut last_at = Instant::now();
    let mut saturated = false;
    let mut result_rpm = None;
    while Instant::now() < end {
        interval_starts.push(last_at);
        tokio::time::sleep(interval).await;
        // Bytes and time since the last measurement (a new connection's set-up between two
        // intervals counts in the next one, both its bytes and its time).
        let now_bytes = moved(&loads);
        let now = Instant::now();
        let secs = now.duration_since(last_at).as_secs_f64();
        per_interval.push(now_bytes.saturating_sub(last_bytes) as f64 * 8.0 / secs);
        last_bytes = now_bytes;
        last_at = now;
        let w = &per_interval[per_interval.len().saturating_sub(MAD)..];
        goodput_avgs.push(w.iter().sum::<f64>() / w.len() as f64);
        let since = interval_starts[interval_starts.len().saturating_sub(MAD)];
        let r = responsiveness(&probes.lock().unwrap_or_else(|p| p.into_inner()), since);
        if let Some(r) = r {
            rpm_avgs.push(r.0);
            result_rpm = Some(r);
        }
        saturated |= stable(&goodput_avgs);
        if progress {
            let mbps = goodput_avgs.last().copied().unwrap_or(0.0) / 1e6;
            let rpm = result_rpm.map_or("-".to_owned(), |r| format!("{:.0}", r.0));
            let _ = write!(
                std::io::stderr().lock(),
                "\r{name:<8} {mbps:>9.1} Mbit/s  {:>2} flows  {rpm:>6} RPM  {:>4.1} s ",
                loads.len(),
                start.elapsed().as_secs_f64()
            );
        }
        if saturated && stable(&rpm_avgs) {
            break;
        }
        if !saturated && loads.len() < args.max_connections {
            // §5.4: one more load-generating connection per interval until goodput is stable.
            if let Ok(l) = load(&net, &urls, upload, bytes.clone()).await {
                muxes.lock().unwrap_or_else(|p| p.into_inner()).push(l.mux.clone());
                loads.push(l);
            }
        }
    }
    if progress {
        let _ = writeln!(std::io::stderr().lock());
    }
    prober.abort();
    for l in &loads {
        l.task.abort();
    }
    let intervals = per_interval.len();
    let confidence = if intervals < MAD {
        "low"
    } else if saturated && stable(&rpm_avgs) {
        "high"
    } else {
        "medium"
    };
    Ok(Leg {
        mbps: goodput_avgs.last().copied().unwrap_or(0.0) / 1e6,
        rpm: result_rpm,
        flows: loads.len(),
        intervals,
        confidence,
        bytes: moved(&loads),
    })
}

async fn run(args: SpeedtestArgs) -> Result<(), Failure> {
    let target = conn::parse_url(&args.url)?;
    if !target.https {
        return Err(Failure::new(code::URL, format!("{}: the test runs over HTTP/2 on TLS (https://)", args.url)));
    }
    let timeout = Duration::from_secs(10);
    let tls = conn::tls_client(&args.url, Proto::H2Prior, args.insecure, args.cacert.as_deref())?;
    let addrs = conn::resolve(&target, &[], timeout).await?;
    let net = Arc::new(Net { tls, addrs, timeout });
    let urls = Arc::new(config(&net, &target).await?);
    let progress = !args.json && std::io::stderr().is_terminal();
    // Idle latency: ten GETs one after another on one idle connection.
    let (mux, ..) = net.connect(&urls.small, false).await?;
    let mut idle = Vec::new();
    for _ in 0..10 {
        let (status, _, d) = get(&mux, &urls.small, 1).await?;
        if status != 200 {
            return Err(Failure::new(code::HTTP_ERROR, format!("{}: status {status}", urls.small.url)));
        }
        idle.push(d.as_secs_f64() * 1e3);
    }
    drop(mux);
    let jitter = idle.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / (idle.len() - 1) as f64;
    let mut sorted = idle.clone();
    sorted.sort_by(f64::total_cmp);
    let idle_ms = sorted[sorted.len() / 2];
    if progress {
        crate::say(&format!("idle latency {idle_ms:.2} ms, jitter {jitter:.2} ms"));
    }
    let mut legs = Vec::new();
    for upload in [false, true] {
        let wanted = match args.direction {
            Direction::Both => true,
            Direction::Download => !upload,
            Direction::Upload => upload,
        };
        if wanted {
            legs.push((upload, leg(net.clone(), urls.clone(), upload, &args, progress).await?));
        }
    }
    let leg_json = |l: &Leg| {
        serde_json::json!({
            "mbps": (l.mbps * 1000.0).round() / 1000.0,
            "rpm": l.rpm.map(|r| r.0.round()),
            "loaded_latency_ms": {
                "foreign": l.rpm.map(|r| (r.1 * 1000.0).round() / 1000.0),
                "self": l.rpm.map(|r| (r.2 * 1000.0).round() / 1000.0),
            },
            "flows": l.flows,
            "intervals": l.intervals,
            "confidence": l.confidence,
            "bytes": l.bytes,
        })
    };
    if args.json {
        let mut out = serde_json::json!({
            "url": args.url,
            "protocol": "h2",
            "draft": "draft-ietf-ippm-responsiveness-08",
            "idle_latency_ms": (idle_ms * 1000.0).round() / 1000.0,
            "jitter_ms": (jitter * 1000.0).round() / 1000.0,
        });
        for (upload, l) in &legs {
            out[if *upload { "upload" } else { "download" }] = leg_json(l);
        }
        println!("{out}");
    } else {
        println!("idle latency  {idle_ms:.2} ms (jitter {jitter:.2} ms)");
        for (upload, l) in &legs {
            let rpm = l.rpm.map_or("no probes".to_owned(), |r| {
                format!(
                    "{:.0} RPM ({}; loaded latency {:.1} ms own connection, {:.1} ms new ones)",
                    r.0,
                    class(r.0),
                    r.2,
                    r.1
                )
            });
            println!(
                "{:<9} {:.1} Mbit/s over {} connections, {rpm}, {} confidence",
                if *upload { "upload" } else { "download" },
                l.mbps,
                l.flows,
                l.confidence
            );
        }
    }
    Ok(())
}

/// The draft's words for an RPM (§1.2).
fn class(rpm: f64) -> &'static str {
    match rpm {
        r if r < 300.0 => "poor",
        r if r < 1000.0 => "fair",
        r if r < 6000.0 => "good",
        _ => "excellent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trimmed_mean_drops_the_worst_five_percent() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        // The worst 5 (96..=100) go: the mean of 1..=95.
        assert_eq!(trimmed_mean(v.clone()), Some(48.0));
        v.reverse();
        assert_eq!(trimmed_mean(v), Some(48.0));
        assert_eq!(trimmed_mean(vec![7.0]), Some(7.0));
        assert_eq!(trimmed_mean(Vec::new()), None);
    }

    #[test]
    fn responsiveness_averages_the_foreign_and_the_loaded_rpm() {
        let t = Instant::now();
        let mut p = Probes::default();
        for _ in 0..20 {
            p.foreign.push((t, 10.0, 20.0, 30.0));
            p.own.push((t, 60.0));
        }
        // foreign: 60000 / 20 = 3000; loaded: 60000 / 60 = 1000; RPM 2000.
        let (rpm, f, s) = responsiveness(&p, t).unwrap();
        assert!((rpm - 2000.0).abs() < 1e-9 && (f - 20.0).abs() < 1e-9 && (s - 60.0).abs() < 1e-9);
        assert!(responsiveness(&p, t + Duration::from_secs(1)).is_none());
    }

    #[test]
    fn stability_needs_mad_averages_within_five_percent() {
        assert!(!stable(&[100.0, 100.0, 100.0]));
        assert!(stable(&[50.0, 100.0, 101.0, 99.0, 100.0]));
        assert!(!stable(&[60.0, 80.0, 100.0, 120.0]));
        assert!(!stable(&[0.0, 0.0, 0.0, 0.0]));
        assert_eq!(class(299.0), "poor");
        assert_eq!(class(6000.0), "excellent");
    }
}
