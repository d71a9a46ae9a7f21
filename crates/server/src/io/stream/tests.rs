//! The stream layer's tests: an engine that records what it is handed, and streams driven
//! through it.

use super::*;
use std::collections::HashMap;
use std::time::Duration;

/// An engine that records what the stream layer hands it, with a settable send-buffer
/// bound (as HTTP/3's `max_buffered_per_stream`) and streams that can vanish.
#[derive(Default)]
struct Recorder {
    heads: Vec<(u64, u16, bool)>,
    /// The last head's fields, per stream.
    fields: HashMap<u64, Vec<Field>>,
    data: HashMap<u64, Vec<u8>>,
    ended: HashMap<u64, bool>,
    trailers: HashMap<u64, Vec<Field>>,
    released: usize,
    failed: Vec<u64>,
    /// Bytes queued per stream and not yet "framed".
    queued: HashMap<u64, usize>,
    /// `send_data` refuses with Full beyond this many queued bytes.
    bound: Option<usize>,
    gone: Vec<u64>,
    /// Reports the streams it forgets (as the HTTP/2 engine does): those in `closed`, and
    /// then a stream is gone only when in `gone`, ended or not.
    reports: bool,
    closed: Vec<u64>,
    /// The request heads handed back (boxed as they came, to tell them by address).
    #[allow(clippy::vec_box)]
    recycled: Vec<Box<RequestHead>>,
}

impl Engine for Recorder {
    fn send_head(&mut self, id: u64, status: u16, fields: HeadFields, end: bool) -> Result<(), Refused> {
        if self.gone.contains(&id) {
            return Err(Refused::Gone);
        }
        self.heads.push((id, status, end));
        self.fields.insert(id, fields.iter().map(|(n, v)| Field::new(n.to_vec(), v.to_vec())).collect());
        self.queued.entry(id).or_default();
        Ok(())
    }

    fn accepts_data(&self, id: u64) -> bool {
        self.bound.is_none_or(|b| self.queued.get(&id).copied().unwrap_or(0) < b)
    }

    fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), Refused> {
        if self.gone.contains(&id) {
            return Err(Refused::Gone);
        }
        let q = self.queued.entry(id).or_default();
        if self.bound.is_some_and(|b| *q >= b) {
            return Err(Refused::Full);
        }
        *q += data.len();
        self.data.entry(id).or_default().extend_from_slice(&data);
        if end {
            self.ended.insert(id, true);
        }
        Ok(())
    }

    fn send_trailers(&mut self, id: u64, fields: Vec<Field>) -> Result<(), Refused> {
        self.trailers.insert(id, fields);
        self.ended.insert(id, true);
        Ok(())
    }

    fn release(&mut self, _id: u64, n: usize) {
        self.released += n;
    }

    fn fail(&mut self, id: u64) {
        self.failed.push(id);
    }

    fn priority(&mut self, _id: u64, _value: &[u8]) {}

    fn recycle_head(&mut self, head: Box<RequestHead>) {
        self.recycled.push(head);
    }

    fn take_closed(&mut self, out: &mut Vec<u64>) -> bool {
        out.append(&mut self.closed);
        self.reports
    }

    fn buffered(&self, id: u64) -> Option<usize> {
        if self.reports {
            return if self.gone.contains(&id) { None } else { Some(self.queued.get(&id).copied().unwrap_or(0)) };
        }
        if self.gone.contains(&id) || self.ended.get(&id).copied().unwrap_or(false) {
            return None;
        }
        self.queued.get(&id).copied()
    }
}

fn streams() -> (Streams, CmdReceiver, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::config::default_config(dir.path().to_path_buf());
    cfg.access_log = crate::config::AccessLogFormat::Off;
    let state = Arc::new(State::new(cfg));
    let info = Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), false, None, None));
    let (s, rx) = Streams::new(state, info, Proto::Http2);
    (s, rx, dir)
}

fn head(method: &'static str, path: &'static str) -> Box<RequestHead> {
    head_with(method, "localhost", path, &[])
}

fn head_with(method: &str, authority: &str, path: &str, fields: &[(&str, &str)]) -> Box<RequestHead> {
    let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    let mut list = vec![
        (b(":method"), b(method)),
        (b(":scheme"), b("https")),
        (b(":authority"), b(authority)),
        (b(":path"), b(path)),
    ];
    list.extend(fields.iter().map(|(n, v)| (b(n), b(v))));
    Box::new(sluice_http::request_head(list).unwrap())
}

/// Streams over a site serving `dir/www`, where `a.txt` holds `A_TXT`, with an `Alt-Svc`.
fn file_streams(dir: &std::path::Path) -> (Streams, CmdReceiver) {
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/a.txt"), A_TXT).unwrap();
    let toml = format!(
        "data_dir = '{d}'\naccess_log = false\n[[site]]\nroot = '{d}/www'\n[quic]\nenabled = false\n",
        d = dir.display()
    );
    std::fs::write(dir.join("sluice.toml"), toml).unwrap();
    let cfg = crate::config::load(&dir.join("sluice.toml")).unwrap();
    let alt_svc = crate::app::respond::AltSvc::new(http::HeaderValue::from_static("h3=\":8443\""));
    let info = Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), true, Some(&alt_svc), None));
    Streams::new(Arc::new(State::new(cfg)), info, Proto::Http2)
}

const A_TXT: &[u8] = b"a small static file\n";

#[tokio::test]
async fn a_cached_file_is_answered_inline_exactly_as_its_handler_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut rx) = file_streams(dir.path());
    let mut e = Recorder::default();
    // The first request takes the usual path: it finds the authority valid and served on
    // this connection, and puts the file in the cache.
    let fields = [("accept", "*/*"), ("user-agent", "test")];
    s.start(&mut e, 1, head_with("GET", "localhost", "/a.txt", &fields), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    assert_eq!(e.heads, vec![(1, 200, false)]);
    assert_eq!(e.data[&1], A_TXT);
    // The head goes back to the engine, its fields taken by the request for the handler.
    assert_eq!(e.recycled.len(), 1);
    assert!(e.recycled[0].fields.is_empty() && e.recycled[0].fields.capacity() >= fields.len());
    // The next is answered at once, through no command: the same head, fields and body.
    let h = head_with("GET", "localhost", "/a.txt?x=1", &fields);
    let at = &*h as *const RequestHead;
    s.start(&mut e, 3, h, true, None, None);
    assert_eq!(e.recycled.len(), 2);
    assert_eq!(&*e.recycled[1] as *const _, at, "the head goes back to the engine");
    assert_eq!(e.heads[1], (3, 200, false));
    assert_eq!(e.fields[&3], e.fields[&1]);
    assert!(e.fields[&3].iter().any(|f| f.name == "alt-svc"), "{:?}", e.fields[&3]);
    assert_eq!(e.data[&3], A_TXT);
    assert_eq!(e.ended.get(&3), Some(&true));
    assert!(!s.contains(3), "no stream state is kept for it");
    // HEAD: the same fields, no body, the head ends the stream.
    s.start(&mut e, 5, head_with("HEAD", "localhost", "/a.txt", &[]), true, None, None);
    assert_eq!(e.heads[2], (5, 200, true));
    assert_eq!(e.fields[&5], e.fields[&1]);
    assert!(!e.data.contains_key(&5));
    assert!(rx.try_recv().is_none());
}

#[tokio::test]
async fn an_inline_body_the_engine_refuses_as_full_is_held_and_sent_after_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut rx) = file_streams(dir.path());
    let mut e = Recorder { bound: Some(1), ..Recorder::default() };
    s.start(&mut e, 1, head_with("GET", "localhost", "/a.txt", &[]), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    e.queued.insert(1, 0);
    // Stream 3's queue is full when its answer comes: the head goes, the body waits.
    e.queued.insert(3, 1);
    s.start(&mut e, 3, head_with("GET", "localhost", "/a.txt", &[]), true, None, None);
    assert_eq!(e.heads.last(), Some(&(3, 200, false)));
    assert!(e.data.get(&3).is_none_or(Vec::is_empty));
    assert!(s.contains(3), "the refused body is held");
    e.queued.insert(3, 0);
    s.sent(&mut e, 3, 1);
    assert_eq!(e.data[&3], A_TXT);
    assert_eq!(e.ended.get(&3), Some(&true));
    s.sweep(&mut e);
    assert!(!s.contains(3), "forgotten once the engine has it all");
}

#[tokio::test]
async fn requests_the_inline_answer_does_not_cover_take_the_usual_path() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut rx) = file_streams(dir.path());
    let mut e = Recorder::default();
    s.start(&mut e, 1, head_with("GET", "localhost", "/a.txt", &[]), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    let etag = e.fields[&1].iter().find(|f| f.name == "etag").unwrap().value.clone();
    let etag = std::str::from_utf8(&etag).unwrap().to_owned();
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], u16);
    let cases: [Case; 6] = [
        // A precondition: the file handler answers 304.
        ("GET", "localhost", &[("if-none-match", &etag)], 304),
        // A range: 206.
        ("GET", "localhost", &[("range", "bytes=0-0")], 206),
        // A `host` naming another entity than :authority: 400.
        ("GET", "localhost", &[("host", "elsewhere")], 400),
        // An authority this connection has not checked yet (here: an invalid one): 400.
        ("GET", "local host", &[], 400),
        // A value the `http` crate refuses: 400.
        ("GET", "localhost", &[("x-bad", "a\u{1}b")], 400),
        // Not GET or HEAD: 405.
        ("DELETE", "localhost", &[], 405),
    ];
    for (i, (method, authority, fields, status)) in cases.into_iter().enumerate() {
        let id = 3 + 2 * i as u64;
        s.start(&mut e, id, head_with(method, authority, "/a.txt", fields), true, None, None);
        // Nothing went to the engine from `start` itself: the handler's commands did.
        assert!(!e.fields.contains_key(&id), "{method} {authority} {fields:?} answered inline");
        pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
        assert_eq!(e.heads.last().map(|h| (h.0, h.1)), Some((id, status)), "{method} {authority} {fields:?}");
    }
}

/// Apply every command that arrives within `wait`.
async fn pump(s: &mut Streams, rx: &mut CmdReceiver, e: &mut Recorder, wait: Duration) {
    while let Ok(Some(cmd)) = tokio::time::timeout(wait, rx.recv()).await {
        s.apply(e, cmd);
        s.poll_ready(e);
    }
}

#[test]
fn a_request_s_handler_future_fits_the_allocator_s_thread_cache() {
    // Every HTTP/2 and HTTP/3 request boxes its handler's future. glibc serves blocks of up
    // to 1032 bytes from a per-thread cache; a larger one goes through its bins, several
    // times the cost to allocate and free (2,768 bytes before the request was boxed and the
    // router borrowed it).
    let (s, _rx, _dir) = streams();
    let room = Shared::new(1, &s.conn);
    let counters = ExchangeRef::new(room.clone());
    let req = Box::new(to_request(&mut head("GET", "/"), RequestBody::empty(), &s.conn.info, s.proto, counters));
    let fut = run_handler(req, room);
    let size = std::mem::size_of_val(&fut);
    assert!(size <= 1024, "the handler future is {size} bytes");
}

/// Stream state for a handler made by a test.
fn bare_ctx(s: &Streams) -> StreamCtx {
    StreamCtx {
        body_tx: None,
        trailers: None,
        room: Shared::new(1, &s.conn),
        handler: None,
        held: VecDeque::new(),
        held_trailers: None,
        framed: 0,
        tunnel: false,
    }
}

#[tokio::test]
async fn a_woken_handler_is_polled_once_per_round_even_if_it_wakes_itself() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder::default();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p = polls.clone();
    // What tokio's cooperative budget does to a task that used it up: wake and pend.
    let spinner = std::future::poll_fn(move |cx| {
        p.fetch_add(1, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        cx.waker().wake_by_ref();
        Poll::<()>::Pending
    });
    s.run(&mut e, 1, bare_ctx(&s), Box::pin(spinner));
    assert_eq!(polls.load(Ordering::SeqCst), 1, "polled once as it starts");
    for round in 2..5 {
        // Two wake-ups, one command.
        let Some(Cmd::Poll { id: 1 }) = rx.try_recv() else { panic!("no poll command") };
        assert!(rx.try_recv().is_none());
        s.apply(&mut e, Cmd::Poll { id: 1 });
        assert!(s.has_ready());
        s.poll_ready(&mut e);
        // Its new wake-up waits in the channel for the next round: no loop here.
        assert_eq!(polls.load(Ordering::SeqCst), round);
        assert!(!s.has_ready());
    }
    // A reset drops the handler; a late wake-up finds nothing to poll.
    s.reset(1);
    let Some(cmd) = rx.try_recv() else { panic!("no poll command") };
    s.apply(&mut e, cmd);
    s.poll_ready(&mut e);
    assert_eq!(polls.load(Ordering::SeqCst), 4);
    assert_eq!(Arc::strong_count(&polls), 1, "the handler was dropped");
}

#[tokio::test]
async fn a_handler_that_panics_fails_its_stream_only() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder::default();
    let (tx, wait) = tokio::sync::oneshot::channel::<()>();
    s.run(
        &mut e,
        1,
        bare_ctx(&s),
        Box::pin(async move {
            let _ = wait.await;
            panic!("a handler bug");
        }),
    );
    s.start(&mut e, 3, head("GET", "/__down?bytes=10"), true, None, None);
    assert!(s.contains(1));
    tx.send(()).unwrap();
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    assert_eq!(e.failed, vec![1]);
    assert!(!s.contains(1));
    assert_eq!(e.heads, vec![(3, 200, false)], "the other stream is answered");
    assert_eq!(e.data[&3].len(), 10);
}

#[tokio::test]
async fn a_handler_blocks_on_a_full_queue_and_resumes_as_frames_go_out() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder::default();
    let total = 1_000_000;
    s.start(&mut e, 1, head("GET", "/__down?bytes=1000000"), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(200)).await;
    assert_eq!(e.heads, vec![(1, 200, false)]);
    // The handler stopped at the stream's send buffer: not one byte more.
    assert_eq!(e.data[&1].len(), STREAM_SEND_BUFFER);
    assert!(!e.ended.contains_key(&1));
    // Frames go out: room comes back and the handler goes on, one buffer at a time.
    let mut rounds = 0;
    while !e.ended.contains_key(&1) {
        rounds += 1;
        assert!(rounds < 100, "the handler did not finish");
        let framed = e.queued.insert(1, 0).unwrap_or(0);
        s.sent(&mut e, 1, framed);
        pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
        assert!(e.queued[&1] <= STREAM_SEND_BUFFER, "{} queued", e.queued[&1]);
    }
    assert_eq!(e.data[&1].len(), total);
    assert!(rounds >= total / STREAM_SEND_BUFFER - 1, "{rounds} rounds");
}

#[tokio::test]
async fn data_the_engine_refuses_as_full_is_held_and_sent_after_progress() {
    let (mut s, mut rx, _dir) = streams();
    // An engine that takes one chunk at a time.
    let mut e = Recorder { bound: Some(1), ..Recorder::default() };
    s.start(&mut e, 1, head("GET", "/__down?bytes=200000"), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(200)).await;
    assert_eq!(e.data[&1].len(), CHUNK, "one chunk taken, the rest held");
    while !e.ended.contains_key(&1) {
        let framed = e.queued.insert(1, 0).unwrap_or(0);
        assert!(framed > 0, "no progress");
        s.sent(&mut e, 1, framed);
        pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    }
    // Nothing lost, nothing reordered: 200,000 zero bytes, the last one ending the stream.
    assert_eq!(e.data[&1].len(), 200_000);
    assert!(e.data[&1].iter().all(|&b| b == 0));
}

#[tokio::test]
async fn request_body_credit_is_returned_only_as_the_handler_consumes() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder::default();
    let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = consumed.clone();
    let on_consumed: Arc<dyn Fn(usize) + Send + Sync> = Arc::new(move |n| {
        c.fetch_add(n, Ordering::SeqCst);
    });
    // A body with no handler reading it yet: credit stays with the handler's queue.
    s.start(&mut e, 3, head("POST", "/__up"), false, Some(on_consumed), None);
    assert_eq!(consumed.load(Ordering::SeqCst), 0);
    for _ in 0..10 {
        assert_eq!(s.body(3, Bytes::from(vec![7u8; 1000]), false, Some(65_535)), BodyVerdict::Taken);
    }
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    // The speed test consumes as it goes: every byte delivered so far is credited, once.
    assert_eq!(consumed.load(Ordering::SeqCst), 10_000);
    s.trailers(3, vec![Field::new("x-done", "1")]);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(200)).await;
    assert_eq!(consumed.load(Ordering::SeqCst), 10_000);
    assert_eq!(e.heads, vec![(3, 200, false)]);
    let body = String::from_utf8(e.data[&3].clone()).unwrap();
    assert!(body.contains("\"bytes\":10000"), "{body}");
}

#[tokio::test]
async fn with_an_engine_that_reports_closed_streams_a_stream_goes_when_both_are_done() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder { reports: true, ..Recorder::default() };
    // The handler finishes first: the stream stays while the engine holds it.
    s.start(&mut e, 5, head("POST", "/__up"), false, None, None);
    assert_eq!(s.body(5, Bytes::from_static(b"abc"), true, None), BodyVerdict::Taken);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    assert_eq!(e.ended.get(&5), Some(&true), "the handler answered");
    s.sweep(&mut e);
    assert!(s.contains(5), "the engine still holds stream 5");
    s.sweep(&mut e);
    assert!(s.contains(5));
    e.gone.push(5);
    e.closed.push(5);
    s.sweep(&mut e);
    assert!(!s.contains(5), "gone once the engine reported it");
    // The engine forgets the stream first: it stays until its handler finishes.
    s.start(&mut e, 7, head("POST", "/__up"), false, None, None);
    assert_eq!(s.body(7, Bytes::from_static(b"abc"), false, None), BodyVerdict::Taken);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    e.gone.push(7);
    e.closed.extend([7, 99]);
    s.sweep(&mut e);
    assert!(s.contains(7), "its handler still runs");
    assert_eq!(s.body(7, Bytes::new(), true, None), BodyVerdict::Taken);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    s.sweep(&mut e);
    assert!(s.is_empty(), "gone once its handler finished");
}

#[tokio::test]
async fn a_reset_stream_fails_its_body_and_stops_its_handler() {
    let (mut s, mut rx, _dir) = streams();
    let mut e = Recorder::default();
    s.start(&mut e, 5, head("POST", "/__up"), false, None, None);
    assert_eq!(s.body(5, Bytes::from_static(b"abc"), false, None), BodyVerdict::Taken);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    assert!(s.contains(5));
    s.reset(5);
    assert!(!s.contains(5));
    // The upload handler saw the reset as a failed body; whatever it answers is refused by
    // the engine (the stream is gone), and nothing is left behind.
    e.gone.push(5);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    assert!(e.data.get(&5).is_none_or(Vec::is_empty));
    s.sweep(&mut e);
    assert!(s.is_empty());
    // A stream whose handler is blocked on permits wakes when reset, and ends.
    s.start(&mut e, 7, head("GET", "/__down?bytes=10000000"), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    assert_eq!(e.data[&7].len(), STREAM_SEND_BUFFER);
    s.reset(7);
    e.gone.push(7);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(100)).await;
    assert_eq!(e.data[&7].len(), STREAM_SEND_BUFFER);
    assert!(rx.try_recv().is_none());
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::config::default_config(dir.path().to_path_buf());
    cfg.access_log = crate::config::AccessLogFormat::Off;
    cfg.limits.max_request_body = 1500;
    let info = Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), false, None, None));
    let (mut s, _rx) = Streams::new(Arc::new(State::new(cfg)), info, Proto::Http3);
    let mut e = Recorder::default();
    s.start(&mut e, 1, head("POST", "/__up"), false, None, None);
    assert_eq!(s.body(1, Bytes::from(vec![0u8; 1000]), false, None), BodyVerdict::Taken);
    assert_eq!(s.body(1, Bytes::from(vec![0u8; 1000]), false, None), BodyVerdict::TooLarge);
}

#[tokio::test]
async fn a_finished_handler_s_framed_bytes_go_back_when_its_stream_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::config::default_config(dir.path().to_path_buf());
    cfg.access_log = crate::config::AccessLogFormat::Off;
    let state = Arc::new(State::new(cfg));
    let total = state.send_budget.available_permits();
    let info = Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), false, None, None));
    let (mut s, mut rx) = Streams::new(state.clone(), info, Proto::Http2);
    let mut e = Recorder { reports: true, ..Default::default() };
    // Not answered inline (a method the file handler refuses): a handler's whole answer,
    // its head and its one chunk in one command.
    s.start(&mut e, 1, head("DELETE", "/a.txt"), true, None, None);
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(50)).await;
    assert_eq!(e.heads, [(1, 405, false)]);
    assert!(e.ended.get(&1).copied().unwrap_or(false), "the body ended the stream");
    let n = e.data[&1].len();
    assert!(n > 0);
    assert_eq!(state.send_budget.available_permits(), total - n, "the chunk holds its room");
    assert!(s.queued(), "queued, not framed");
    // Framed: nothing is queued any more, but the room goes back only with the stream.
    s.sent(&mut e, 1, n);
    assert!(!s.queued(), "framed bytes of a finished handler are not queued ones");
    assert_eq!(state.send_budget.available_permits(), total - n);
    e.gone.push(1);
    e.closed.push(1);
    s.sweep(&mut e);
    assert!(!s.contains(1));
    assert_eq!(state.send_budget.available_permits(), total, "returned with the stream");
}

#[tokio::test]
async fn stalled_streams_hold_at_most_the_global_budget_and_give_it_back_when_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::config::default_config(dir.path().to_path_buf());
    cfg.access_log = crate::config::AccessLogFormat::Off;
    // Room for three chunks in the whole process.
    cfg.limits.send_buffer = 3 * CHUNK;
    let state = Arc::new(State::new(cfg));
    let info = Arc::new(ConnInfo::new("127.0.0.1:1".parse().unwrap(), false, None, None));
    let (mut s, mut rx) = Streams::new(state.clone(), info, Proto::Http2);
    let mut e = Recorder::default();
    // Five downloads whose client never lets a byte be framed.
    for id in [1, 3, 5, 7, 9] {
        s.start(&mut e, id, head("GET", "/__down?bytes=10000000"), true, None, None);
    }
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(200)).await;
    let queued: usize = e.data.values().map(Vec::len).sum();
    assert_eq!(queued, 3 * CHUNK, "the five streams together hold the budget, no more");
    assert_eq!(state.send_budget.available_permits(), 0);
    // Resetting the streams that hold room hands it back, and the others go on.
    let holders: Vec<u64> = e.data.iter().filter(|(_, d)| !d.is_empty()).map(|(&id, _)| id).collect();
    for id in &holders {
        s.reset(*id);
        e.gone.push(*id);
    }
    pump(&mut s, &mut rx, &mut e, Duration::from_millis(200)).await;
    let others: usize = e.data.iter().filter(|(id, _)| !holders.contains(id)).map(|(_, d)| d.len()).sum();
    assert_eq!(others, 3 * CHUNK, "the waiting streams got the room back");
    // The handlers are dropped at once, and with them their pending acquisitions (which
    // return what was assigned).
    s.abort_all();
    assert_eq!(state.send_budget.available_permits(), 3 * CHUNK, "everything returned at the end");
}

#[test]
fn a_request_reaches_its_stream_s_interim_path_through_its_counters() {
    use crate::message::Interim;
    let (s, mut rx, _dir) = streams();
    let room = Shared::new(7, &s.conn);
    let counters = ExchangeRef::new(room.clone());
    let interim = Interim::of(&counters);
    assert!(interim.available());
    let mut hints = http::HeaderMap::new();
    hints.insert(http::header::LINK, http::HeaderValue::from_static("</a.css>; rel=preload"));
    assert!(interim.send(http::StatusCode::EARLY_HINTS, &hints));
    match rx.try_recv() {
        Some(Cmd::Head { id: 7, status: 103, fields, end: false }) => {
            assert_eq!(fields.iter().collect::<Vec<_>>(), [(&b"link"[..], &b"</a.css>; rel=preload"[..])]);
        }
        _ => panic!("no interim head for stream 7"),
    }
    // Only 1xx, and never 101 (HTTP/1.1's alone).
    assert!(!interim.send(http::StatusCode::SWITCHING_PROTOCOLS, &hints));
    assert!(!interim.send(http::StatusCode::OK, &hints));
    assert!(rx.try_recv().is_none());
    // Counters of their own (HTTP/1.1's) have no interim path.
    let own = ExchangeRef::default();
    assert!(!Interim::of(&own).available());
    assert!(!Interim::of(&own).send(http::StatusCode::EARLY_HINTS, &hints));
}
