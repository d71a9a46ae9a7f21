//! The `priority` experiment's HTTP/2 measurement, on Sluice's client: `sluice_client::H2Conn`
//! (TLS with rustls) driving the sans-IO client engine `sluice_h2::client`.
//!
//! It behaves like a browser loading a page whose images were discovered before a
//! render-blocking stylesheet: preface, SETTINGS (INITIAL_WINDOW_SIZE 16 MiB, push off), a
//! connection WINDOW_UPDATE to 1 GiB, then [`IMAGES`] image requests at once, each with both
//! priority signals as Chrome sends them: the RFC 9218 header `priority: u=5, i` and RFC 7540
//! HEADERS priority fields (PRIORITY flag; weight 110, non-exclusive, dependency 0 — the
//! dependency tree is kept flat on purpose, so that a server following RFC 7540 weights
//! rather than a tree still sees the CSS as the heaviest sibling). Once the first
//! [`TRIGGER_BYTES`] of image data have arrived it requests the stylesheet with `priority: u=0`
//! and weight 256, exclusive, on stream 0, and measures the time from sending that request to
//! the END_STREAM of its response. Flow control never limits: 16 MiB stream windows and a
//! 1 GiB connection window, credit handed back once half a window is used.
//!
//! The engine sends the `priority` header as any request field, but no RFC 7540 priority
//! fields; [`add_priority_fields`] adds them to the engine's HEADERS frame before it is
//! written, the one piece of frame handling left here.
//!
//! The idle figure is the same stylesheet alone on a fresh connection, requested once the TLS
//! handshake and the SETTINGS exchange (the server's SETTINGS and the ACK of ours) are done.
//!
//! The lone variant ([`measure`] with a trigger) keeps a connection busy with one download
//! instead: a GET of [`LONE_BYTES`] with no priority signal at all (the default urgency, 3, as
//! from curl or a video player), and the stylesheet once the given number of its bytes have
//! arrived. It is the case of a connection that carried a single stream until the urgent
//! request came.
//!
//! Every wait has a timeout ([`READ_TIMEOUT`]) and a whole measurement is bounded by
//! [`RUN_LIMIT`]; nothing the server sends can make it panic.

use std::future::Future;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sluice_client::{H2Conn, H2Connector, H2Setup};
use sluice_h2::client::{ClientConfig, ClientEvent, Request};
use sluice_h2::frame::{flag, kind, Head, PriorityFields, HEADER_LEN, PREFACE};

/// Images requested on the busy connection.
pub const IMAGES: usize = 10;
/// Size of each image, bytes.
pub const IMAGE_BYTES: u64 = 1_000_000;
/// Size of the stylesheet, bytes.
pub const CSS_BYTES: u64 = 50_000;
/// Image data received before the stylesheet is requested.
pub const TRIGGER_BYTES: u64 = 100_000;
/// The lone download's path and size.
pub const LONE_PATH: &str = "/big.bin";
pub const LONE_BYTES: u64 = 10_000_000;
/// SETTINGS_INITIAL_WINDOW_SIZE we announce.
const INITIAL_WINDOW: u32 = 16 << 20;
/// The connection window we open (WINDOW_UPDATE on stream 0 after the preface).
const CONNECTION_WINDOW: u32 = 1 << 30;
/// Largest frame the server takes before its SETTINGS say otherwise (RFC 9113 §6.5.2); the
/// request heads are far smaller.
const MAX_FRAME: u32 = 16_384;
/// Bound on each wait for the server, on the TCP connect and on the TLS handshake.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on one whole measurement (busy and idle connection).
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The image request's priority signals (Chrome's for images).
pub const IMAGE_PRIORITY: (&str, PriorityFields) =
    ("u=5, i", PriorityFields { dependency: 0, exclusive: false, weight: 110 });
/// The stylesheet's priority signals (Chrome's for render-blocking CSS, flattened: exclusive on
/// stream 0 with the top weight).
pub const CSS_PRIORITY: (&str, PriorityFields) =
    ("u=0", PriorityFields { dependency: 0, exclusive: true, weight: 256 });

/// What one measurement found (the JSON the experiment prints per run).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// CSS request sent → its END_STREAM, on the connection busy with the images, ms.
    pub css_busy_ms: f64,
    /// The same on an idle connection, ms.
    pub css_idle_ms: f64,
    /// busy / idle.
    pub ratio: f64,
    /// Image requests sent → last image's END_STREAM (the lone download's), ms.
    pub images_done_ms: f64,
}

/// The engine's windows: flow control never limits the server.
fn engine_config() -> ClientConfig {
    ClientConfig { stream_window: INITIAL_WINDOW, connection_window: CONNECTION_WINDOW, ..ClientConfig::default() }
}

/// The request's regular fields, the `priority` header carrying `urgency`.
fn request_fields(urgency: &str) -> [(&str, &str); 3] {
    [("user-agent", "sluice-lab-priority"), ("accept", "*/*"), ("priority", urgency)]
}

/// Gives the HEADERS frame of `stream` among `out` (bytes the engine queued) the RFC 7540
/// priority fields: the PRIORITY flag and five bytes (exclusive bit and dependency, weight − 1)
/// before the header block, which is left as it is. `out` may start with the connection
/// preface.
pub fn add_priority_fields(out: &mut Vec<u8>, stream: u32, fields: PriorityFields) -> Result<(), String> {
    let mut at = if out.starts_with(PREFACE) { PREFACE.len() } else { 0 };
    while let Some(head) = out.get(at..).and_then(Head::parse) {
        if head.kind != kind::HEADERS || head.stream != stream {
            at += HEADER_LEN + head.len as usize;
            continue;
        }
        if head.flags & (flag::PRIORITY | flag::PADDED) != 0 {
            return Err(format!("the HEADERS frame of stream {stream} is already padded or prioritised"));
        }
        let len = head.len + 5;
        if len > MAX_FRAME {
            return Err(format!("the request head of stream {stream} does not fit one frame ({len} bytes)"));
        }
        let mut patched = Vec::with_capacity(HEADER_LEN + 5);
        Head { len, flags: head.flags | flag::PRIORITY, ..head }.encode(&mut patched);
        let raw = (fields.dependency & 0x7fff_ffff) | if fields.exclusive { 0x8000_0000 } else { 0 };
        patched.extend_from_slice(&raw.to_be_bytes());
        patched.push((fields.weight.clamp(1, 256) - 1) as u8);
        out.splice(at..at + HEADER_LEN, patched);
        return Ok(());
    }
    Err(format!("no HEADERS frame of stream {stream} to give priority fields"))
}

/// One client connection with the measurement's bounds.
struct Conn {
    h2: H2Conn,
    authority: String,
    deadline: Instant,
}

impl Conn {
    /// The time left for a wait: [`READ_TIMEOUT`], at most until the deadline.
    fn limit(&self) -> Result<Duration, String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("the measurement exceeded {} s", RUN_LIMIT.as_secs()));
        }
        Ok(left.min(READ_TIMEOUT))
    }

    /// `f` on the connection, bounded by [`Conn::limit`]; `what` names it in the timeout error.
    async fn bounded<T>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&mut H2Conn) -> Result<T, sluice_client::Failure>,
    ) -> Result<T, String> {
        let limit = self.limit()?;
        match tokio::time::timeout(limit, f(&mut self.h2)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("{what} timed out after {} ms", limit.as_millis())),
        }
    }

    /// Queues a GET of `path` with both priority signals (`None`: with neither), ready for
    /// [`Conn::send`].
    fn request(&mut self, path: &str, prio: Option<(&str, PriorityFields)>) -> Result<Queued, String> {
        let all = request_fields(prio.map_or("", |p| p.0));
        // Without priority signals, the fields before the `priority` header.
        let fields = if prio.is_some() { &all[..] } else { &all[..2] };
        let req = Request { method: "GET", scheme: "https", authority: &self.authority, path, fields };
        let stream = self.h2.request(&req).map_err(|e| e.to_string())?;
        Ok(Queued { stream, fields: prio.map(|p| p.1) })
    }

    /// Writes everything queued, the HEADERS frames of `requests` given their RFC 7540 fields.
    async fn send(&mut self, requests: &[Queued]) -> Result<(), String> {
        let mut out = self.h2.take_transmit();
        for q in requests {
            if let Some(fields) = q.fields {
                add_priority_fields(&mut out, q.stream, fields)?;
            }
        }
        self.bounded("writing to the server", async |h2| h2.write(&out).await).await
    }

    /// The next event from the server.
    async fn next_event(&mut self) -> Result<ClientEvent, String> {
        self.bounded("waiting for the server", async |h2| h2.next_event().await).await
    }
}

/// A request queued in the engine, not yet written.
struct Queued {
    stream: u32,
    /// The RFC 7540 priority fields its HEADERS frame gets, if any.
    fields: Option<PriorityFields>,
}

/// The measurement's connector: ALPN h2, any certificate (the lab's is self-signed). Both
/// connections of a measurement come from one connector, so the busy connection resumes the
/// idle one's TLS session, as the lab's client always did (with a full handshake instead,
/// nginx's busy figure at 5 Mbit/s × 40 ms drops from about 734 ms to 540–570 ms).
fn connector() -> Result<H2Connector, String> {
    let setup = H2Setup { connect_timeout: READ_TIMEOUT, insecure: true, cacert: None, engine: engine_config() };
    H2Connector::new(setup).map_err(|e| e.to_string())
}

/// Connects over TCP and TLS.
async fn connect(tls: &H2Connector, addr: Ipv4Addr, port: u16, deadline: Instant) -> Result<Conn, String> {
    let h2 = within(deadline, tls.connect(&format!("https://{addr}:{port}/"))).await?;
    Ok(Conn { h2, authority: format!("{addr}:{port}"), deadline })
}

/// `f`, bounded by `deadline`.
async fn within<T>(deadline: Instant, f: impl Future<Output = Result<T, sluice_client::Failure>>) -> Result<T, String> {
    match tokio::time::timeout_at(deadline.into(), f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("the measurement exceeded {} s", RUN_LIMIT.as_secs())),
    }
}

/// Expected body size of a path.
fn expected_size(path: &str) -> u64 {
    if path.ends_with(".css") {
        CSS_BYTES
    } else if path == LONE_PATH {
        LONE_BYTES
    } else {
        IMAGE_BYTES
    }
}

/// Per-stream progress.
#[derive(Clone, Debug)]
struct Progress {
    stream: u32,
    path: String,
    bytes: u64,
    done: Option<Instant>,
}

/// Applies an event to the streams; `Err` on a non-200 status, a short body, an unknown
/// stream, a reset or GOAWAY.
fn apply(streams: &mut [Progress], ev: &ClientEvent, now: Instant) -> Result<(), String> {
    let (stream, end) = match ev {
        &ClientEvent::Response { stream, status, end_stream, .. } => {
            let Some(p) = streams.iter().find(|p| p.stream == stream) else {
                return Err(format!("response on unknown stream {stream}"));
            };
            if status != 200 {
                return Err(format!("GET {}: HTTP status {status}", p.path));
            }
            (stream, end_stream)
        }
        ClientEvent::Data { stream, data, end_stream } => {
            let Some(p) = streams.iter_mut().find(|p| p.stream == *stream) else {
                return Err(format!("data on unknown stream {stream}"));
            };
            p.bytes += data.len() as u64;
            (*stream, *end_stream)
        }
        // Trailers end the response.
        &ClientEvent::Trailers { stream, .. } => (stream, true),
        ClientEvent::Reset { stream, error } => return Err(format!("stream {stream} was reset: {error}")),
        ClientEvent::GoAway { last_stream, reason } => {
            return Err(format!("the server sent GOAWAY ({reason:?}, last stream {last_stream})"))
        }
        // SETTINGS, ORIGIN, interim (1xx) heads: nothing to measure.
        ClientEvent::Ready | ClientEvent::Origin(_) | ClientEvent::Informational { .. } => return Ok(()),
    };
    if end {
        if let Some(p) = streams.iter_mut().find(|p| p.stream == stream) {
            if p.bytes != expected_size(&p.path) {
                return Err(format!("GET {}: {} bytes instead of {}", p.path, p.bytes, expected_size(&p.path)));
            }
            p.done = Some(now);
        }
    }
    Ok(())
}

/// The busy connection: (CSS ms, images done ms). With `lone`, one download instead of the
/// images, the stylesheet requested after that many of its bytes.
async fn busy(
    tls: &H2Connector,
    addr: Ipv4Addr,
    port: u16,
    deadline: Instant,
    lone: Option<u64>,
) -> Result<(f64, f64), String> {
    let mut c = connect(tls, addr, port, deadline).await?;
    let mut streams: Vec<Progress> = Vec::new();
    let mut queued = Vec::new();
    if lone.is_some() {
        let q = c.request(LONE_PATH, None)?;
        streams.push(Progress { stream: q.stream, path: LONE_PATH.into(), bytes: 0, done: None });
        queued.push(q);
    } else {
        for i in 0..IMAGES {
            let path = format!("/img{i}.jpg");
            let q = c.request(&path, Some(IMAGE_PRIORITY))?;
            streams.push(Progress { stream: q.stream, path, bytes: 0, done: None });
            queued.push(q);
        }
    }
    let trigger = lone.unwrap_or(TRIGGER_BYTES);
    // The preface, SETTINGS and WINDOW_UPDATE go out with the requests, in one write.
    let images_sent = Instant::now();
    c.send(&queued).await?;
    let mut css: Option<(u32, Instant)> = None;
    // Bounded by the deadline (every wait is timed against it).
    while streams.iter().any(|p| p.done.is_none()) {
        let ev = c.next_event().await?;
        apply(&mut streams, &ev, Instant::now())?;
        if css.is_none() {
            let image_bytes: u64 = streams.iter().map(|p| p.bytes).sum();
            if image_bytes >= trigger {
                let q = c.request("/style.css", Some(CSS_PRIORITY))?;
                css = Some((q.stream, Instant::now()));
                streams.push(Progress { stream: q.stream, path: "/style.css".into(), bytes: 0, done: None });
                c.send(&[q]).await?;
            }
        }
    }
    let Some((css_stream, css_sent)) = css else { return Err("the stylesheet was never requested".into()) };
    let css_done = streams.iter().find(|p| p.stream == css_stream).and_then(|p| p.done);
    let Some(css_done) = css_done else { return Err("the stylesheet never completed".into()) };
    let images = streams
        .iter()
        .filter(|p| p.stream != css_stream)
        .filter_map(|p| p.done)
        .max()
        .map(|d| d.duration_since(images_sent))
        .unwrap_or_default();
    Ok((ms(css_done.duration_since(css_sent)), ms(images)))
}

/// The idle connection: CSS ms once the SETTINGS exchange is done.
async fn idle(tls: &H2Connector, addr: Ipv4Addr, port: u16, deadline: Instant) -> Result<f64, String> {
    let mut c = connect(tls, addr, port, deadline).await?;
    c.bounded("the SETTINGS exchange", async |h2| h2.exchange_settings().await).await?;
    let q = c.request("/style.css", Some(CSS_PRIORITY))?;
    let mut streams = vec![Progress { stream: q.stream, path: "/style.css".into(), bytes: 0, done: None }];
    let sent = Instant::now();
    c.send(&[q]).await?;
    loop {
        let ev = c.next_event().await?;
        apply(&mut streams, &ev, Instant::now())?;
        if let Some(done) = streams[0].done {
            return Ok(ms(done.duration_since(sent)));
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One measurement against `addr:port`: the idle connection, then the busy one (`lone`: the
/// lone variant with that trigger). Runs its own single-threaded runtime; call it from a thread
/// inside the client namespace.
pub fn measure(addr: Ipv4Addr, port: u16, lone: Option<u64>) -> Result<Outcome, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the client runtime: {e}"))?;
    let tls = connector()?;
    rt.block_on(async {
        let deadline = Instant::now() + RUN_LIMIT;
        let run = async {
            let css_idle_ms = idle(&tls, addr, port, deadline).await?;
            let (css_busy_ms, images_done_ms) = busy(&tls, addr, port, deadline, lone).await?;
            let ratio = if css_idle_ms > 0.0 { css_busy_ms / css_idle_ms } else { f64::NAN };
            Ok::<_, String>(Outcome { css_busy_ms, css_idle_ms, ratio, images_done_ms })
        };
        match tokio::time::timeout(RUN_LIMIT + Duration::from_secs(1), run).await {
            Ok(r) => r,
            Err(_) => Err(format!("the measurement exceeded {} s", RUN_LIMIT.as_secs())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_h2::client::Client;
    use sluice_h2::frame::{Headers, Setting, Settings, WindowUpdate};
    use sluice_h2::{Config, Connection, Event};
    use sluice_tune::window::FixedWindows;

    /// The frames of `b` (after the preface): header and payload.
    fn frames(mut b: &[u8]) -> Vec<(Head, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(head) = Head::parse(b) {
            let end = HEADER_LEN + head.len as usize;
            assert!(b.len() >= end, "a whole frame");
            out.push((head, b[HEADER_LEN..end].to_vec()));
            b = &b[end..];
        }
        assert!(b.is_empty(), "nothing after the last frame");
        out
    }

    /// What the busy connection's first write holds: the engine's preface, SETTINGS and
    /// WINDOW_UPDATE, an image request and the stylesheet's, both with RFC 7540 fields added.
    fn first_write() -> (Vec<u8>, Vec<u8>) {
        let now = Instant::now();
        let mut client = Client::new(engine_config(), now);
        let a = "10.99.0.2:8443";
        let mut queued = Vec::new();
        for (path, prio) in [("/img1.jpg", IMAGE_PRIORITY), ("/style.css", CSS_PRIORITY)] {
            let fields = request_fields(prio.0);
            let req = Request { method: "GET", scheme: "https", authority: a, path, fields: &fields };
            queued.push((client.request(&req).expect("a new connection takes requests"), prio.1));
        }
        let plain = client.poll_transmit().expect("the preface and requests are queued");
        let mut out = plain.clone();
        for (stream, fields) in queued {
            add_priority_fields(&mut out, stream, fields).expect("each request has its HEADERS");
        }
        (plain, out)
    }

    #[test]
    fn requests_carry_both_priority_signals() {
        let (plain, out) = first_write();
        assert!(out.starts_with(PREFACE));
        let got = frames(&out[PREFACE.len()..]);
        let before = frames(&plain[PREFACE.len()..]);
        assert_eq!(got.len(), before.len(), "frames are patched, none added");
        // The connection start: push off, 16 MiB stream windows, a 1 GiB connection window.
        let s = Settings::decode(&got[0].0, &got[0].1).expect("SETTINGS first");
        assert!(s.values.contains(&Setting::InitialWindowSize(16 << 20)) && s.values.contains(&Setting::EnablePush(0)));
        let w = WindowUpdate::decode(&got[1].0, &got[1].1).expect("then WINDOW_UPDATE");
        assert_eq!((w.stream, w.increment + 65_535), (0, 1 << 30));
        let heads: Vec<_> = got.iter().zip(&before).filter(|((h, _), _)| h.kind == kind::HEADERS).collect();
        assert_eq!(heads.len(), 2);
        for (((head, payload), (old, old_payload)), (stream, prio)) in heads.into_iter().zip([(1, 110), (3, 256)]) {
            assert_eq!(head.stream, stream);
            assert_eq!(head.flags, flag::END_STREAM | flag::END_HEADERS | flag::PRIORITY);
            assert_eq!(head.len, old.len + 5);
            let h = Headers::decode(head, payload.clone().into()).expect("a valid HEADERS frame");
            let want = PriorityFields { dependency: 0, exclusive: prio == 256, weight: prio };
            assert_eq!(h.priority, Some(want));
            // The header block is the engine's, untouched.
            assert_eq!(&h.fragment[..], &old_payload[..]);
        }
    }

    #[test]
    fn the_server_engine_reads_the_patched_requests() {
        let (_, out) = first_write();
        let now = Instant::now();
        let w = FixedWindows { stream: 1 << 20, connection: 1 << 20 };
        let mut server = Connection::new(Config::default(), Box::new(w), now);
        server.handle_input(now, &out);
        let mut seen = Vec::new();
        while let Some(e) = server.poll_event() {
            match e {
                Event::Request { stream, head, end_stream } => {
                    assert!(end_stream);
                    let field = |n: &str| head.fields.iter().find(|f| f.name == n.as_bytes()).map(|f| f.value.clone());
                    let path = head.path.unwrap_or_default();
                    seen.push((stream, path, field("priority").unwrap_or_default()));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let want: Vec<(u32, &[u8], &[u8])> = vec![(1, b"/img1.jpg", b"u=5, i"), (3, b"/style.css", b"u=0")];
        let seen: Vec<(u32, &[u8], &[u8])> = seen.iter().map(|(s, p, v)| (*s, &p[..], &v[..])).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn priority_fields_are_added_only_where_they_fit() {
        let (plain, _) = first_write();
        // No HEADERS of stream 5: an error, the bytes unchanged.
        let mut out = plain.clone();
        assert!(add_priority_fields(&mut out, 5, CSS_PRIORITY.1).is_err());
        assert_eq!(out, plain);
        // A frame already carrying them is not patched twice.
        let mut once = plain[PREFACE.len()..].to_vec();
        add_priority_fields(&mut once, 1, CSS_PRIORITY.1).expect("stream 1's HEADERS");
        let patched = once.clone();
        assert!(add_priority_fields(&mut once, 1, CSS_PRIORITY.1).unwrap_err().contains("already"));
        assert_eq!(once, patched);
        // A header that claims more than there is: an error, not a panic.
        let mut short = Vec::new();
        Head { len: 1 << 20, kind: kind::DATA, flags: 0, stream: 1 }.encode(&mut short);
        assert!(add_priority_fields(&mut short, 1, CSS_PRIORITY.1).is_err());
    }

    #[test]
    fn the_lone_download_is_held_to_its_size() {
        let now = Instant::now();
        let head = ClientEvent::Response { stream: 1, status: 200, fields: Vec::new(), end_stream: false };
        let fresh = || vec![Progress { stream: 1, path: LONE_PATH.into(), bytes: 0, done: None }];
        let body = |n: u64, end_stream| ClientEvent::Data { stream: 1, data: vec![0; n as usize].into(), end_stream };
        // An image's size is not the download's.
        let mut s = fresh();
        apply(&mut s, &head, now).unwrap();
        assert!(apply(&mut s, &body(IMAGE_BYTES, true), now).unwrap_err().contains("bytes"));
        let mut s = fresh();
        apply(&mut s, &head, now).unwrap();
        apply(&mut s, &body(LONE_BYTES, true), now).unwrap();
        assert_eq!(s[0].done, Some(now));
    }

    #[test]
    fn progress_checks_status_sizes_and_resets() {
        let now = Instant::now();
        let data = |stream, n: usize, end_stream| ClientEvent::Data { stream, data: vec![0; n].into(), end_stream };
        let head = |stream, status| ClientEvent::Response { stream, status, fields: Vec::new(), end_stream: false };
        let css = || vec![Progress { stream: 1, path: "/style.css".into(), bytes: 0, done: None }];
        let mut s = css();
        apply(&mut s, &head(1, 200), now).unwrap();
        apply(&mut s, &data(1, CSS_BYTES as usize - 1, false), now).unwrap();
        assert!(apply(&mut s, &data(1, 0, true), now).unwrap_err().contains("bytes"));
        apply(&mut s, &data(1, 1, true), now).unwrap();
        assert_eq!(s[0].done, Some(now));
        assert!(apply(&mut s, &head(3, 200), now).unwrap_err().contains("unknown stream"));
        // Trailers end a response too.
        let mut s = css();
        apply(&mut s, &data(1, CSS_BYTES as usize, false), now).unwrap();
        apply(&mut s, &ClientEvent::Trailers { stream: 1, fields: Vec::new() }, now).unwrap();
        assert_eq!(s[0].done, Some(now));
        let mut s = vec![Progress { stream: 1, path: "/img0.jpg".into(), bytes: 0, done: None }];
        assert!(apply(&mut s, &head(1, 404), now).unwrap_err().contains("404"));
        let error = sluice_h2::Error::Stream {
            id: 1,
            reason: sluice_h2::Reason::CANCEL,
            initiator: sluice_h2::Initiator::Remote,
            detail: "reset by the server",
        };
        assert!(apply(&mut s, &ClientEvent::Reset { stream: 1, error }, now).unwrap_err().contains("reset"));
        let away = ClientEvent::GoAway { last_stream: 0, reason: sluice_h2::Reason::NO_ERROR };
        assert!(apply(&mut s, &away, now).unwrap_err().contains("GOAWAY"));
        apply(&mut s, &ClientEvent::Ready, now).unwrap();
        assert_eq!((s[0].bytes, s[0].done), (0, None));
    }
}
