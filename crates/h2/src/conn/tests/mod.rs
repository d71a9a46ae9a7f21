//! Whole-connection tests in memory: frames in, exact frames out.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_hpack as hpack;

use super::*;
use crate::frame::{flag, kind, Head, PREFACE};
use sluice_tune::window::FixedWindows;

mod glitch;
mod timers;

/// A test client: builds frames and parses what the server sends.
struct Client {
    conn: Connection,
    enc: hpack::Encoder,
    dec: hpack::Decoder,
    now: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum F {
    Settings(bool),
    WindowUpdate(u32, u32),
    Headers(u32, Vec<(String, String)>, bool),
    Data(u32, usize, bool),
    Rst(u32, Reason),
    GoAway(u32, Reason),
    Ping(bool),
    Other(u8),
}

impl Client {
    fn new(cfg: Config) -> Self {
        Self::with_windows(cfg, FixedWindows { stream: 65_535, connection: 65_535 })
    }

    fn with_windows(cfg: Config, w: FixedWindows) -> Self {
        Self::with_policy(cfg, Box::new(w))
    }

    fn with_policy(cfg: Config, policy: Box<dyn sluice_tune::window::WindowPolicy>) -> Self {
        let now = Instant::now();
        let mut c = Self {
            conn: Connection::new(cfg, policy, now),
            enc: hpack::Encoder::new(),
            dec: hpack::Decoder::new(4096),
            now,
        };
        let mut first = PREFACE.to_vec();
        frame(&mut first, kind::SETTINGS, 0, 0, &[]);
        c.input(&first);
        let out = c.output();
        assert_eq!(out[0], F::Settings(false), "server SETTINGS first");
        assert!(out.contains(&F::Settings(true)), "our SETTINGS acknowledged: {out:?}");
        let mut ack = Vec::new();
        frame(&mut ack, kind::SETTINGS, flag::ACK, 0, &[]);
        c.input(&ack);
        c
    }

    fn input(&mut self, b: &[u8]) {
        self.conn.handle_input(self.now, b);
    }

    fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut b = Vec::new();
        frame(&mut b, kind, flags, stream, payload);
        self.input(&b);
    }

    fn block(&mut self, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        self.enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false)), &mut out);
        out
    }

    fn request(&mut self, stream: u32, path: &str, end: bool) {
        let b = self.block(&[(":method", "GET"), (":scheme", "https"), (":authority", "x"), (":path", path)]);
        self.send(kind::HEADERS, flag::END_HEADERS | if end { flag::END_STREAM } else { 0 }, stream, &b);
    }

    fn output_max(&mut self, max: usize) -> Vec<F> {
        let mut buf = Vec::new();
        let _ = self.conn.poll_transmit(self.now, &mut buf, max);
        self.parse(&buf)
    }

    fn output(&mut self) -> Vec<F> {
        self.output_max(usize::MAX)
    }

    fn parse(&mut self, mut b: &[u8]) -> Vec<F> {
        let mut v = Vec::new();
        while let Some(h) = Head::parse(b) {
            let p = &b[9..9 + h.len as usize];
            v.push(match h.kind {
                kind::SETTINGS => F::Settings(h.has(flag::ACK)),
                kind::WINDOW_UPDATE => F::WindowUpdate(h.stream, u32::from_be_bytes(p.try_into().unwrap())),
                kind::HEADERS => {
                    let mut fields = Vec::new();
                    self.dec
                        .decode(p, 1 << 20, &mut |n, v, _| {
                            fields.push((String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into()))
                        })
                        .unwrap();
                    F::Headers(h.stream, fields, h.has(flag::END_STREAM))
                }
                kind::DATA => F::Data(h.stream, p.len(), h.has(flag::END_STREAM)),
                kind::RST_STREAM => F::Rst(h.stream, Reason(u32::from_be_bytes(p.try_into().unwrap()))),
                kind::GOAWAY => F::GoAway(
                    u32::from_be_bytes(p[..4].try_into().unwrap()),
                    Reason(u32::from_be_bytes(p[4..8].try_into().unwrap())),
                ),
                kind::PING => F::Ping(h.has(flag::ACK)),
                k => F::Other(k),
            });
            b = &b[9 + h.len as usize..];
        }
        v
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    Head { len: payload.len() as u32, kind, flags, stream }.encode(out);
    out.extend_from_slice(payload);
}

fn goaway_reason(out: &[F]) -> Option<Reason> {
    out.iter().find_map(|f| if let F::GoAway(_, r) = f { Some(*r) } else { None })
}

#[test]
fn get_request_and_response() {
    let mut c = Client::new(Config::default());
    c.request(1, "/index.html", true);
    let ev = c.events();
    let Event::Request { stream: 1, head, end_stream: true } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(head.path.as_deref(), Some(&b"/index.html"[..]));
    c.conn.send_response(1, 200, vec![Field::new("content-length", "5")], false).unwrap();
    c.conn.send_data(1, Bytes::from_static(b"hello"), true).unwrap();
    let out = c.output();
    assert_eq!(
        out,
        vec![
            F::Headers(1, vec![(":status".into(), "200".into()), ("content-length".into(), "5".into())], false),
            F::Data(1, 5, true)
        ]
    );
    assert_eq!(c.conn.open_streams(), 0, "both sides done: stream closed");
}

#[test]
fn closed_streams_are_reported_once_when_asked_for() {
    let mut c = Client::new(Config::default());
    let mut out = Vec::new();
    // Not asked for: nothing kept.
    c.request(1, "/", true);
    c.events();
    c.conn.send_response(1, 200, Vec::new(), true).unwrap();
    c.output();
    assert!(!c.conn.take_closed(&mut out) && out.is_empty());
    c.conn.report_closed();
    // A stream that ends both ways is reported when its last frame is framed, not before.
    c.request(3, "/", true);
    c.events();
    c.conn.send_response(3, 200, Vec::new(), false).unwrap();
    c.conn.send_data(3, Bytes::from_static(b"hi"), true).unwrap();
    assert!(c.conn.take_closed(&mut out) && out.is_empty(), "queued, not framed: still open");
    c.output();
    assert!(c.conn.take_closed(&mut out));
    assert_eq!(out, [3]);
    // Reset by the peer, and by the server: reported too, and each only once.
    c.request(5, "/", false);
    c.request(7, "/", false);
    c.events();
    c.send(kind::RST_STREAM, 0, 5, &Reason::CANCEL.0.to_be_bytes());
    c.conn.reset(7, Reason::INTERNAL_ERROR);
    c.output();
    out.clear();
    assert!(c.conn.take_closed(&mut out));
    assert_eq!(out, [5, 7]);
    out.clear();
    assert!(c.conn.take_closed(&mut out) && out.is_empty());
}

#[test]
fn heads_with_shared_fields_carry_them_first_then_their_own() {
    let mut c = Client::new(Config::default());
    let shared = std::sync::Arc::new(vec![Field::new("etag", "\"1-e\""), Field::new("content-type", "text/plain")]);
    let other = std::sync::Arc::new(vec![Field::new("etag", "\"2-f\"")]);
    // The same shared list several times (the encoder's memo repeats its block), then another
    // list, then the first with a field of its own, then the first again.
    let cases = [
        (&shared, vec![]),
        (&shared, vec![]),
        (&shared, vec![]),
        (&other, vec![]),
        (&shared, vec![Field::new("alt-svc", "h3=\":443\"")]),
        (&shared, vec![]),
    ];
    for (i, (list, own)) in cases.into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        c.request(id, "/f", true);
        c.events();
        let fields = sluice_http::HeadFields { shared: Some(list.clone()), own: own.clone(), ..Default::default() };
        c.conn.send_response(id, 200, fields, true).unwrap();
        let want: Vec<(String, String)> =
            std::iter::once((":status".to_owned(), "200".to_owned()))
                .chain(list.iter().chain(own.iter()).map(|f| {
                    (String::from_utf8(f.name.to_vec()).unwrap(), String::from_utf8(f.value.to_vec()).unwrap())
                }))
                .collect();
        assert_eq!(c.output(), vec![F::Headers(id, want, true)], "head {i}");
    }
}

#[test]
fn heads_with_parsed_fields_carry_every_part_in_order() {
    let mut c = Client::new(Config::default());
    let packed = |pairs: &[(&str, &str)]| {
        let mut p = sluice_http::PackedFields::copied(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        p.push_static(&(b"via", b"1.1 sluice"));
        p
    };
    let origin = [("server", "nginx"), ("date", "Sun, 29 Nov 2026 23:40:00 GMT"), ("content-length", "14")];
    let later = [("server", "nginx"), ("date", "Sun, 29 Nov 2026 23:40:01 GMT"), ("content-length", "14")];
    let shared = std::sync::Arc::new(vec![Field::new("x-shared", "1")]);
    let alt_svc = vec![Field::new("alt-svc", "h3=\":443\"")];
    // The same parsed head several times (the encoder's memo repeats its block, known by the
    // parsed part's image), one with a value changed, with another status, with a field
    // removed (the same buffer, other lines), then with fields of the response's own, then
    // behind a shared list.
    let without_server = || {
        let mut p = packed(&later);
        p.retain(|n, _| n != b"server");
        p
    };
    let cases = [
        (200, None, packed(&origin), vec![]),
        (200, None, packed(&origin), vec![]),
        (200, None, packed(&later), vec![]),
        (200, None, packed(&later), vec![]),
        (404, None, packed(&later), vec![]),
        (200, None, without_server(), vec![]),
        (200, None, packed(&later), vec![]),
        (200, None, packed(&later), alt_svc.clone()),
        (200, None, packed(&later), vec![]),
        (200, Some(shared.clone()), packed(&later), alt_svc.clone()),
        (200, Some(shared.clone()), packed(&later), alt_svc.clone()),
    ];
    for (i, (status, shared, packed, own)) in cases.into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        c.request(id, "/p", true);
        c.events();
        let fields = sluice_http::HeadFields { shared, packed, own };
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let want: Vec<(String, String)> = std::iter::once((":status".to_owned(), status.to_string()))
            .chain(fields.iter().map(|(n, v)| (text(n), text(v))))
            .collect();
        let parsed = fields.packed.len();
        assert_eq!(want.len(), 1 + parsed + fields.own.len() + fields.shared.as_ref().map_or(0, |s| s.len()));
        assert!(parsed == 4 || (parsed == 3 && !want.iter().any(|(n, _)| n == "server")));
        assert_eq!(want.last().map(|(n, _)| &n[..]), Some(if fields.own.is_empty() { "via" } else { "alt-svc" }));
        c.conn.send_response(id, status, fields, true).unwrap();
        assert_eq!(c.output(), vec![F::Headers(id, want, true)], "head {i}");
    }
}

#[test]
fn final_heads_carry_the_date_the_driver_set_unless_they_have_their_own() {
    let mut c = Client::new(Config::default());
    c.request(1, "/a", true);
    c.events();
    // No date set: none sent (the engine has no clock of its own).
    c.conn.send_response(1, 200, vec![Field::new("x", "1")], true).unwrap();
    assert_eq!(c.output(), vec![F::Headers(1, vec![(":status".into(), "200".into()), ("x".into(), "1".into())], true)]);
    let date = "Mon, 07 Dec 2026 17:12:31 GMT";
    c.conn.set_date(bytes::Bytes::from_static(date.as_bytes()));
    let with_date = |status: &str, rest: &[(&str, &str)]| -> Vec<(String, String)> {
        [(":status", status), ("date", date)].iter().chain(rest).map(|(n, v)| (n.to_string(), v.to_string())).collect()
    };
    // A 103, then a 404: the interim head has none, the final one has it.
    c.request(3, "/b", true);
    c.events();
    c.conn.send_response(3, 103, vec![Field::new("link", "</s.css>; rel=preload")], false).unwrap();
    c.conn.send_response(3, 404, vec![], true).unwrap();
    let want_103 =
        vec![(":status".to_owned(), "103".to_owned()), ("link".to_owned(), "</s.css>; rel=preload".to_owned())];
    assert_eq!(c.output(), vec![F::Headers(3, want_103, false), F::Headers(3, with_date("404", &[]), true)]);
    // The engine's own 431 has it too.
    let big = "v".repeat(70_000);
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("x-big", &big)]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 5, &b);
    let out = c.output();
    assert!(
        matches!(&out[0], F::Headers(5, f, true) if f[0].1 == "431" && f[1] == ("date".into(), date.into())),
        "{out:?}"
    );
    // A proxied head with the origin's date keeps it, alone.
    c.request(7, "/c", true);
    c.events();
    let origin = "Sun, 29 Nov 2026 23:40:00 GMT";
    let packed = sluice_http::PackedFields::copied([(&b"date"[..], origin.as_bytes())]);
    let fields = sluice_http::HeadFields { packed, ..Default::default() };
    c.conn.send_response(7, 200, fields, true).unwrap();
    assert_eq!(
        c.output(),
        vec![F::Headers(7, vec![(":status".into(), "200".into()), ("date".into(), origin.into())], true)]
    );
}

/// Requests on `ids` at once (no body), each answered with a `server` field and two bytes;
/// what the server sent.
fn answer_burst(c: &mut Client, ids: &[u32], path: &str) -> Vec<F> {
    for &id in ids {
        c.request(id, path, true);
    }
    assert_eq!(c.events().len(), ids.len());
    for &id in ids {
        c.conn.send_response(id, 200, vec![Field::new("server", "sluice")], false).unwrap();
        c.conn.send_data(id, Bytes::from_static(b"ok"), true).unwrap();
    }
    c.output()
}

#[test]
fn a_shrunk_connection_serves_on_and_keeps_its_tables() {
    let mut c = Client::new(Config::default());
    // A burst of streams grows the queues and maps; shrinking between bursts must lose no
    // state (the HPACK tables, the last stream id, the stream queues reused).
    for round in 0..3u32 {
        let ids: Vec<u32> = (0..8).map(|i| 1 + 2 * (8 * round + i)).collect();
        let out = answer_burst(&mut c, &ids, "/same-path");
        let heads = out.iter().filter(|f| matches!(f, F::Headers(_, h, false) if h[1].1 == "sluice")).count();
        assert_eq!(heads, ids.len(), "round {round}: {out:?}");
        assert_eq!(c.conn.open_streams(), 0);
        c.conn.shrink();
        assert_eq!(c.conn.streams.capacity(), 0, "an empty map hands back its room and slots");
        assert!(c.conn.events.capacity() == 0);
    }
    // The streams it closed are still known as closed (RFC 9113 §5.1).
    c.request(3, "/again", true);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::STREAM_CLOSED));
}

#[test]
fn consecutive_request_heads_share_one_buffer_and_keep_their_own_bytes() {
    let mut c = Client::new(Config::default());
    let mut heads = Vec::new();
    for i in 0..10u32 {
        c.request(1 + 2 * i, &format!("/p{i}"), true);
        for e in c.events() {
            if let Event::Request { head, .. } = e {
                heads.push(head);
            }
        }
    }
    assert_eq!(heads.len(), 10);
    // Each head's bytes are its own (decoding the next one wrote after them), and all ten lie
    // in one allocation of DECODED_CHUNK.
    for (i, h) in heads.iter().enumerate() {
        assert_eq!(h.path.as_deref(), Some(format!("/p{i}").as_bytes()));
    }
    let at = |h: &crate::RequestHead| h.path.as_ref().unwrap().as_ptr() as usize;
    let (first, last) = (at(&heads[0]), at(&heads[9]));
    assert!(last > first && last - first < super::DECODED_CHUNK, "{first:#x} {last:#x}");
    // An idle connection lets go of the rest of the buffer; the heads keep theirs.
    c.conn.shrink();
    assert_eq!(c.conn.decoded.capacity(), 0);
    assert_eq!(heads[9].path.as_deref(), Some(&b"/p9"[..]));
}

#[test]
fn a_recycled_head_holds_the_next_request_s_head() {
    let mut c = Client::new(Config::default());
    let fields = [(":method", "GET"), (":scheme", "https"), (":authority", "x"), (":path", "/"), ("accept", "*/*")];
    let head = |c: &mut Client, stream: u32, path: &str| {
        let mut fields = fields.to_vec();
        fields[3].1 = path;
        let b = c.block(&fields);
        c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, stream, &b);
        match c.events().pop() {
            Some(Event::Request { head, .. }) => head,
            e => panic!("{e:?}"),
        }
    };
    let first = head(&mut c, 1, "/a");
    let (at, fields_at) = (&*first as *const crate::RequestHead, first.fields.as_ptr());
    c.conn.recycle_head(first);
    let second = head(&mut c, 3, "/b");
    assert_eq!(&*second as *const _, at, "the head handed back holds the next one");
    assert_eq!(second.fields.as_ptr(), fields_at, "and its field list the next fields");
    assert_eq!(second.path.as_deref(), Some(&b"/b"[..]));
    assert_eq!(second.fields, vec![Field::new("accept", "*/*")]);
    // A recycled head holds nothing of its request; one with a long field list keeps no list,
    // heads beyond the count are let go, and an idle connection lets go of them all.
    let mut long = second.clone();
    long.fields.reserve(super::KEPT_FIELDS + 1);
    c.conn.recycle_head(long);
    assert_eq!(c.conn.spare_heads.len(), 1);
    assert_eq!(*c.conn.spare_heads[0], crate::RequestHead::default());
    assert_eq!(c.conn.spare_heads[0].fields.capacity(), 0);
    for _ in 0..super::SPARE_HEADS + 1 {
        c.conn.recycle_head(second.clone());
    }
    assert_eq!(c.conn.spare_heads.len(), super::SPARE_HEADS);
    assert!(c.conn.spare_heads[1..].iter().all(|h| h.path.is_none() && h.fields.is_empty() && h.fields.capacity() > 0));
    c.conn.shrink();
    assert_eq!(c.conn.spare_heads.capacity(), 0);
}

#[test]
fn a_closed_streams_queues_serve_the_next_streams() {
    let mut c = Client::new(Config::default());
    // Ten streams at once, as h2load -m 10 sends them: every one's head and body queues come
    // stay in their slots with their room when the streams close.
    let ids: Vec<u32> = (0..10).map(|i| 1 + 2 * i).collect();
    answer_burst(&mut c, &ids, "/a");
    assert_eq!(c.conn.open_streams(), 0);
    assert_eq!(c.conn.streams.free_queues().count(), ids.len(), "every closed stream's queues are kept");
    assert!(
        c.conn.streams.free_queues().all(|(h, q)| h.capacity() > 0 && q.capacity() > 0 && h.is_empty() && q.is_empty()),
        "kept with their room, emptied"
    );
    // The next stream takes a pair: its head goes out without growing a queue.
    c.request(21, "/b", true);
    c.events();
    let s = c.conn.streams.get(&21).unwrap();
    assert!(s.heads.capacity() > 0 && s.queue.capacity() > 0);
}

#[test]
fn bad_preface_is_protocol_error() {
    let now = Instant::now();
    let mut conn = Connection::new(Config::default(), Box::<FixedWindows>::default(), now);
    conn.handle_input(now, b"GET / HTTP/1.1\r\n\r\n");
    let mut buf = Vec::new();
    let _ = conn.poll_transmit(now, &mut buf, usize::MAX);
    assert!(matches!(conn.poll_event(), Some(Event::ConnectionError(e)) if e.reason() == Reason::PROTOCOL_ERROR));
    assert!(conn.is_done());
}

#[test]
fn respects_peer_stream_window_and_resumes_on_update() {
    let mut c = Client::new(Config::default());
    // Peer SETTINGS_INITIAL_WINDOW_SIZE = 10.
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10]);
    let _ = c.output();
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![1u8; 25]), true).unwrap();
    let out = c.output();
    assert_eq!(out[1..], [F::Data(1, 10, false)]);
    assert_eq!(c.output(), vec![]);
    c.send(kind::WINDOW_UPDATE, 0, 1, &20u32.to_be_bytes());
    assert_eq!(c.output(), vec![F::Data(1, 15, true)]);
}

#[test]
fn settings_initial_window_change_applies_to_open_streams() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    // Shrink to 0 before any data: nothing may be sent, then raise to 100.
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]);
    c.conn.send_data(1, Bytes::from(vec![0u8; 300]), true).unwrap();
    let out = c.output();
    assert!(!out.iter().any(|f| matches!(f, F::Data(..))), "{out:?}");
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 100]);
    assert_eq!(c.output(), vec![F::Settings(true), F::Data(1, 100, false)]);
}

#[test]
fn continuation_flood_is_enhance_your_calm() {
    let cfg = Config { max_continuation_frames: 3, ..Config::default() };
    let mut c = Client::new(cfg);
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
    c.send(kind::HEADERS, 0, 1, &b[..1]);
    for _ in 0..4 {
        c.send(kind::CONTINUATION, 0, 1, &[]);
    }
    assert_eq!(goaway_reason(&c.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn headers_split_over_continuation() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/split")]);
    c.send(kind::HEADERS, flag::END_STREAM, 1, &b[..2]);
    c.send(kind::CONTINUATION, flag::END_HEADERS, 1, &b[2..]);
    let ev = c.events();
    assert!(matches!(&ev[0], Event::Request { stream: 1, head, .. } if head.path.as_deref() == Some(&b"/split"[..])));
}

#[test]
fn interleaved_frame_during_header_block_is_protocol_error() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
    c.send(kind::HEADERS, flag::END_STREAM, 1, &b);
    c.send(kind::DATA, 0, 3, b"x");
    assert_eq!(goaway_reason(&c.output()), Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn rapid_reset_is_enhance_your_calm() {
    let cfg = Config { max_resets_per_window: 5, ..Config::default() };
    let mut c = Client::new(cfg);
    for i in 0..6u32 {
        let id = 1 + 2 * i;
        c.request(id, "/", false);
        c.send(kind::RST_STREAM, 0, id, &Reason::CANCEL.0.to_be_bytes());
    }
    assert_eq!(goaway_reason(&c.output()), Some(Reason::ENHANCE_YOUR_CALM));
    let ev = c.events();
    // Five resets by the peer, then the sixth stream is reset when the connection fails.
    assert_eq!(ev.iter().filter(|e| matches!(e, Event::Reset { .. })).count(), 6);
}

#[test]
fn resets_outside_the_window_are_forgiven() {
    let cfg = Config { max_resets_per_window: 2, flood_window: Duration::from_secs(1), ..Config::default() };
    let mut c = Client::new(cfg);
    for i in 0..6u32 {
        let id = 1 + 2 * i;
        c.now += Duration::from_millis(600);
        c.request(id, "/", false);
        c.send(kind::RST_STREAM, 0, id, &Reason::CANCEL.0.to_be_bytes());
    }
    assert_eq!(goaway_reason(&c.output()), None);
}

#[test]
fn ping_flood_is_enhance_your_calm() {
    let cfg = Config { max_pings_per_window: 3, ..Config::default() };
    let mut c = Client::new(cfg);
    for _ in 0..3 {
        c.send(kind::PING, 0, 0, &[1; 8]);
    }
    assert_eq!(c.output(), vec![F::Ping(true); 3]);
    c.send(kind::PING, 0, 0, &[1; 8]);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn settings_flood_is_enhance_your_calm() {
    let cfg = Config { max_settings_per_window: 4, ..Config::default() };
    let mut c = Client::new(cfg);
    // One SETTINGS was the preface's.
    for _ in 0..4 {
        c.send(kind::SETTINGS, 0, 0, &[]);
    }
    assert_eq!(goaway_reason(&c.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn too_many_streams_are_refused() {
    let cfg = Config { max_concurrent_streams: 2, ..Config::default() };
    let mut c = Client::new(cfg);
    c.request(1, "/", false);
    c.request(3, "/", false);
    c.request(5, "/", false);
    assert_eq!(c.output(), vec![F::Rst(5, Reason::REFUSED_STREAM)]);
    assert_eq!(c.conn.open_streams(), 2);
}

#[test]
fn oversized_header_list_gets_431_and_table_stays_in_sync() {
    let cfg = Config { max_header_list_size: 200, ..Config::default() };
    let mut c = Client::new(cfg);
    let big = "v".repeat(100);
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("x-a", &big), ("x-b", &big)]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b);
    let out = c.output();
    assert!(matches!(&out[0], F::Headers(1, f, true) if f[0].1 == "431"), "{out:?}");
    // The next request on the same HPACK context decodes fine.
    c.request(3, "/next", true);
    assert!(c.events().iter().any(|e| matches!(e, Event::Request { stream: 3, .. })));
}

#[test]
fn malformed_request_is_stream_error() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "GET"), (":path", "/")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b);
    assert_eq!(c.output(), vec![F::Rst(1, Reason::PROTOCOL_ERROR)]);
    assert!(c.events().is_empty(), "no request event for a malformed request");
}

#[test]
fn a_refused_request_leaves_no_window_in_the_connection_s_sum() {
    let mut c = Client::new(Config::default());
    // Malformed requests that announce a body (no END_STREAM): refused before the stream
    // opens, so none of them counts in the receive windows that size the connection's.
    for (i, bad) in ["G ET", "GET"].iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let fields =
            [(":method", *bad), (":scheme", "https"), (":authority", "x"), (":path", "/"), ("content-length", "x")];
        let b = c.block(&fields);
        c.send(kind::HEADERS, flag::END_HEADERS, stream, &b);
        assert_eq!(c.output(), vec![F::Rst(stream, Reason::PROTOCOL_ERROR)]);
    }
    assert_eq!(c.conn.recv_windows, 0);
    // One that opens does count, until its body ends.
    c.request(5, "/", false);
    assert!(c.conn.recv_windows > 0);
    c.send(kind::DATA, flag::END_STREAM, 5, b"");
    assert_eq!(c.conn.recv_windows, 0);
}

#[test]
fn method_that_is_not_a_token_is_stream_error() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "G ET"), (":scheme", "https"), (":authority", "x"), (":path", "/")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b);
    // RFC 9110 §9.1: not a token, so malformed (RFC 9113 §8.1.1): RST_STREAM PROTOCOL_ERROR.
    assert_eq!(c.output(), vec![F::Rst(1, Reason::PROTOCOL_ERROR)]);
    assert!(c.events().is_empty(), "never a request event");
    assert_eq!(c.conn.open_streams(), 0);
    // The connection goes on.
    c.request(3, "/", true);
    assert!(matches!(&c.events()[..], [Event::Request { stream: 3, .. }]));
}

#[test]
fn content_length_mismatch_is_stream_error() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/"), ("content-length", "3")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    c.send(kind::DATA, flag::END_STREAM, 1, b"toolong");
    assert_eq!(c.output(), vec![F::Rst(1, Reason::PROTOCOL_ERROR)]);
}

#[test]
fn a_complete_response_to_a_body_still_coming_resets_it_with_no_error() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up"), ("content-length", "1000000")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    c.send(kind::DATA, 0, 1, &[7u8; 1000]);
    assert!(matches!(&c.events()[..], [Event::Request { stream: 1, .. }, Event::Data { stream: 1, .. }]));
    // An early answer (413), complete: RST_STREAM(NO_ERROR) right after its last frame
    // (RFC 9113 §8.1), and the body's reader learns it ends there.
    c.conn.send_response(1, 413, vec![], true).unwrap();
    // The reset comes a little later, apart from the response (`RESET_AFTER_RESPONSE`).
    let out = c.output();
    assert!(matches!(&out[..], [F::Headers(1, f, true)] if f[0].1 == "413"), "{out:?}");
    assert_eq!(c.output(), vec![]);
    let due = c.conn.poll_timeout().unwrap();
    assert!(due <= c.now + Duration::from_millis(10));
    c.now = due;
    c.conn.handle_timeout(due);
    assert_eq!(c.output(), vec![F::Rst(1, Reason::NO_ERROR)]);
    assert!(matches!(&c.events()[..], [Event::Reset { stream: 1, .. }]));
    assert_eq!(c.conn.open_streams(), 0);
    // What the client sent before it read the reset is ignored, its bytes given back to the
    // connection window; no second reset, no connection error.
    c.send(kind::DATA, 0, 1, &[7u8; 16_000]);
    let out = c.output();
    assert!(out.iter().all(|f| !matches!(f, F::Rst(..) | F::GoAway(..))), "{out:?}");
    // A response with a body, to a request whose body is still open: the same, after the data.
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 3, &b);
    c.events();
    c.conn.send_response(3, 200, vec![], false).unwrap();
    c.conn.send_data(3, Bytes::from_static(b"early"), true).unwrap();
    let out: Vec<F> = c.output().into_iter().filter(|f| !matches!(f, F::WindowUpdate(..))).collect();
    assert_eq!(out, vec![F::Headers(3, vec![(":status".into(), "200".into())], false), F::Data(3, 5, true)]);
    c.now += Duration::from_millis(10);
    assert_eq!(c.output(), vec![F::Rst(3, Reason::NO_ERROR)]);
    // A body that ends before the next write: no reset.
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 7, &b);
    c.events();
    c.conn.send_response(7, 200, vec![], true).unwrap();
    assert_eq!(c.output(), vec![F::Headers(7, vec![(":status".into(), "200".into())], true)]);
    c.send(kind::DATA, flag::END_STREAM, 7, b"done");
    c.now += Duration::from_millis(10);
    assert!(c.output().iter().all(|f| !matches!(f, F::Rst(..))));
    assert_eq!(c.conn.open_streams(), 0);
    // A request whose body had ended: no reset after its response.
    c.events();
    c.request(9, "/", true);
    c.conn.send_response(9, 204, vec![], true).unwrap();
    assert_eq!(c.output(), vec![F::Headers(9, vec![(":status".into(), "204".into())], true)]);
}

#[test]
fn data_on_idle_stream_is_connection_error_and_on_closed_stream_is_stream_closed() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    c.conn.send_response(1, 204, vec![], true).unwrap();
    let _ = c.output();
    c.send(kind::DATA, 0, 1, b"x");
    assert_eq!(c.output(), vec![F::Rst(1, Reason::STREAM_CLOSED)]);
    c.send(kind::DATA, 0, 7, b"x");
    assert_eq!(goaway_reason(&c.output()), Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn headers_on_closed_vs_lower_stream() {
    let mut c = Client::new(Config::default());
    c.request(3, "/", true);
    c.conn.send_response(3, 204, vec![], true).unwrap();
    let _ = c.output();
    c.request(3, "/", true);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::STREAM_CLOSED));
    let mut c = Client::new(Config::default());
    c.request(5, "/", true);
    c.request(3, "/", true);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn request_body_credit_returns_when_released() {
    let mut c = Client::with_windows(Config::default(), FixedWindows { stream: 65_535, connection: 1 << 20 });
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    for _ in 0..3 {
        c.send(kind::DATA, 0, 1, &[0; 16_000]);
    }
    let _ = c.events();
    assert_eq!(c.output(), vec![], "nothing consumed yet: no WINDOW_UPDATE");
    let now = c.now;
    c.conn.release(now, 1, 10_000);
    assert_eq!(c.output(), vec![], "less than half the window to hand back");
    c.conn.release(now, 1, 38_000);
    assert_eq!(c.output(), vec![F::WindowUpdate(1, 48_000)]);
    // The stream window is full again (65,535): one byte more is a stream FLOW_CONTROL_ERROR.
    for _ in 0..4 {
        c.send(kind::DATA, 0, 1, &[0; 16_000]);
    }
    c.send(kind::DATA, 0, 1, &[0; 2_000]);
    assert_eq!(c.output(), vec![F::Rst(1, Reason::FLOW_CONTROL_ERROR)]);
}

#[test]
fn padding_is_returned_at_once() {
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    let mut p = vec![200u8];
    p.extend_from_slice(&[0; 40_000 - 1]);
    c.send(kind::DATA, flag::PADDED, 1, &p[..16_384]);
    c.send(kind::DATA, flag::PADDED, 1, &p[..16_384]);
    c.send(kind::DATA, flag::PADDED, 1, &p[..16_384]);
    let ev = c.events();
    assert!(matches!(&ev[1], Event::Data { stream: 1, data, end_stream: false } if data.len() == 16_384 - 201));
    // 3 × 201 padding bytes is too little to pass half the window: no update yet.
    assert_eq!(c.output(), vec![]);
}

/// A client for uploads: windows of 1 MiB, and a POST on stream 1 whose events are taken.
fn uploading(content_length: Option<&str>) -> Client {
    let mut c = Client::with_windows(Config::default(), FixedWindows { stream: 1 << 20, connection: 1 << 20 });
    let mut fields = vec![(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/up")];
    fields.extend(content_length.map(|v| ("content-length", v)));
    let b = c.block(&fields);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    assert!(matches!(c.events()[..], [Event::Request { stream: 1, .. }]));
    c
}

/// The first `have` payload bytes of a DATA frame of `len`, in a buffer of their own.
fn cut_data(flags: u8, len: usize, have: usize) -> bytes::BytesMut {
    let mut b = Vec::new();
    Head { len: len as u32, kind: kind::DATA, flags, stream: 1 }.encode(&mut b);
    b.extend((0..have).map(|i| i as u8));
    bytes::BytesMut::from(&b[..])
}

#[test]
fn a_data_frame_cut_by_the_read_buffer_is_handed_on_in_two_parts() {
    let mut c = uploading(Some("40000"));
    let buf = cut_data(flag::END_STREAM, 40_000, 25_000);
    let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len());
    c.conn.handle_input_buf(c.now, buf);
    assert!(c.events().is_empty(), "a frame is handed on when whole");
    let rest = c.conn.take_unparsed_input(c.now);
    // What is carried over is the header of a frame of the rest, with the original's flags.
    assert_eq!(rest.len(), 9);
    let h = Head::parse(&rest).unwrap();
    assert_eq!((h.len, h.kind, h.flags, h.stream), (15_000, kind::DATA, flag::END_STREAM, 1));
    let ev = c.events();
    let [Event::Data { stream: 1, data, end_stream: false }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(data.len(), 25_000);
    assert_eq!(data[..3], [0, 1, 2]);
    let at = data.as_ptr() as usize;
    assert!(at >= start && at + data.len() <= end, "the part is a slice of the read buffer, not a copy");
    // The whole frame counts against both windows once, as when it arrives whole.
    assert_eq!(c.conn.recv_window.open(), (1 << 20) - 25_000);
    let mut next = rest.to_vec();
    next.extend((25_000..40_000).map(|i| i as u8));
    c.input(&next);
    let ev = c.events();
    let [Event::Data { stream: 1, data, end_stream: true }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!((data.len(), data[0]), (15_000, (25_000 % 256) as u8));
    assert_eq!(c.conn.recv_window.open(), (1 << 20) - 40_000);
    assert_eq!(c.output(), vec![], "no error, no reset");
}

#[test]
fn a_cut_data_frame_that_could_fail_is_carried_over_whole() {
    let whole = |c: &mut Client, buf: bytes::BytesMut| {
        let len = buf.len();
        c.conn.handle_input_buf(c.now, buf);
        let rest = c.conn.take_unparsed_input(c.now);
        assert_eq!(rest.len(), len, "carried over as it came");
        assert!(c.events().is_empty());
    };
    // Past the content-length, padded, too small a part to share, and not a DATA frame.
    whole(&mut uploading(Some("30000")), cut_data(0, 40_000, 25_000));
    whole(&mut uploading(None), cut_data(flag::PADDED, 40_000, 25_000));
    whole(&mut uploading(None), cut_data(0, 40_000, 4_000));
    let mut c = uploading(None);
    let mut b = Vec::new();
    Head { len: 40_000, kind: 0xfa, flags: 0, stream: 0 }.encode(&mut b);
    b.extend([0; 25_000]);
    whole(&mut c, bytes::BytesMut::from(&b[..]));
    // Beyond the stream's window (64 KiB less a byte) and on a stream already ended: refused
    // once, whole, when complete.
    let mut c = Client::new(Config::default());
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    let _ = c.events();
    whole(&mut c, cut_data(0, 65_536, 30_000));
    let mut c = uploading(None);
    c.send(kind::DATA, flag::END_STREAM, 1, b"x");
    let _ = c.events();
    whole(&mut c, cut_data(0, 40_000, 25_000));
}

#[test]
fn frames_up_to_the_announced_max_frame_size_are_taken() {
    let now = Instant::now();
    let mut conn =
        Connection::new(Config::default(), Box::new(FixedWindows { stream: 1 << 20, connection: 1 << 20 }), now);
    let mut out = Vec::new();
    let _ = conn.poll_transmit(now, &mut out, usize::MAX);
    let h = Head::parse(&out).unwrap();
    assert_eq!(h.kind, kind::SETTINGS);
    let announced = out[9..9 + h.len as usize]
        .chunks(6)
        .find(|s| s[..2] == [0, 5])
        .map(|s| u32::from_be_bytes(s[2..].try_into().unwrap()));
    assert_eq!(announced, Some(crate::frame::MAX_FRAME_SIZE), "SETTINGS_MAX_FRAME_SIZE (RFC 9113 §6.5.2)");
    let mut c = uploading(None);
    c.send(kind::DATA, 0, 1, &vec![7; crate::frame::MAX_FRAME_SIZE as usize]);
    let ev = c.events();
    assert!(matches!(&ev[..], [Event::Data { data, .. }] if data.len() == crate::frame::MAX_FRAME_SIZE as usize));
    c.send(kind::DATA, 0, 1, &vec![7; crate::frame::MAX_FRAME_SIZE as usize + 1]);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::FRAME_SIZE_ERROR));
}

#[test]
fn graceful_goaway_finishes_open_streams_and_refuses_new() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    let _ = c.events();
    c.conn.go_away();
    assert_eq!(c.output(), vec![F::GoAway(1, Reason::NO_ERROR)]);
    c.request(3, "/", true);
    assert_eq!(c.output(), vec![F::Rst(3, Reason::REFUSED_STREAM)]);
    assert!(!c.conn.is_done());
    c.conn.send_response(1, 200, vec![], true).unwrap();
    let _ = c.output();
    assert!(c.conn.is_done());
}

#[test]
fn announced_goaway_serves_streams_in_flight_until_the_real_one() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    let _ = c.events();
    c.conn.go_away_announce();
    assert_eq!(c.output(), vec![F::GoAway((1 << 31) - 1, Reason::NO_ERROR)]);
    // A request the peer sent before it read the announcement is still served.
    c.request(3, "/", true);
    assert_eq!(c.events().len(), 1);
    assert!(!c.conn.is_done(), "announced only: not draining");
    c.conn.go_away();
    assert_eq!(c.output(), vec![F::GoAway(3, Reason::NO_ERROR)]);
    c.request(5, "/", true);
    assert_eq!(c.output(), vec![F::Rst(5, Reason::REFUSED_STREAM)]);
    for id in [1, 3] {
        c.conn.send_response(id, 200, vec![], true).unwrap();
    }
    let _ = c.output();
    assert!(c.conn.is_done());
}

#[test]
fn urgent_response_overtakes_bulk_within_one_quantum() {
    let mut c = Client::new(Config::default());
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    c.send(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes());
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/img"), ("priority", "u=5, i")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![0u8; 1 << 20]), true).unwrap();
    let out = c.output_max(64 * 1024);
    assert_eq!(out.iter().filter(|f| matches!(f, F::Data(1, _, false))).count(), 4, "{out:?}");
    // What the driver's in-flight bound looks at: data waiting, and how urgent.
    assert!(c.conn.wants_write());
    assert_eq!(c.conn.next_urgency(), Some(5));
    assert!(!c.conn.mixed_urgencies());
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/css"), ("priority", "u=0")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &b);
    c.conn.send_response(3, 200, vec![], false).unwrap();
    c.conn.send_data(3, Bytes::from(vec![0u8; 50_000]), true).unwrap();
    assert_eq!(c.conn.next_urgency(), Some(0));
    let out = c.output_max(64 * 1024);
    let data: Vec<_> = out.iter().filter(|f| matches!(f, F::Data(..))).cloned().collect();
    assert_eq!(
        data[..4],
        [F::Data(3, 16_384, false), F::Data(3, 16_384, false), F::Data(3, 16_384, false), F::Data(3, 848, true)]
    );
    assert!(
        data[4..].iter().all(|f| matches!(f, F::Data(1, _, false))),
        "bulk resumes only after the urgent response: {data:?}"
    );
    assert!(c.conn.mixed_urgencies());
    assert_eq!(c.conn.next_urgency(), Some(5));
    let _ = c.output_max(2 << 20);
    assert!(!c.conn.wants_write(), "everything framed");
    assert_eq!(c.conn.next_urgency(), None);
}

#[test]
fn urgent_room_carries_only_urgent_data() {
    let mut c = Client::new(Config::default());
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    c.send(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes());
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/img"), ("priority", "u=5, i")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![0u8; 1 << 20]), true).unwrap();
    let _ = c.output_max(16 * 1024);
    let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/font"), ("priority", "u=0")]);
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &b);
    // The urgent response's head is ready, its body not yet (the handler is still reading).
    c.conn.send_response(3, 200, vec![], false).unwrap();
    let mut buf = Vec::new();
    assert!(c.conn.poll_transmit_upto(c.now, &mut buf, 256 * 1024, 1));
    let out = c.parse(&buf);
    assert!(matches!(out[..], [F::Headers(3, _, false)]), "the head alone, no u=5 data in the urgent room: {out:?}");
    // Its body arrives: the urgent room takes exactly that, and stops before the bulk.
    c.conn.send_data(3, Bytes::from(vec![0u8; 20_000]), true).unwrap();
    let mut buf = Vec::new();
    assert!(c.conn.poll_transmit_upto(c.now, &mut buf, 256 * 1024, 1));
    assert_eq!(c.parse(&buf), [F::Data(3, 16_384, false), F::Data(3, 3_616, true)]);
    // Nothing urgent is left: the urgent room frames nothing, the ordinary call the bulk.
    let mut buf = Vec::new();
    assert!(!c.conn.poll_transmit_upto(c.now, &mut buf, 256 * 1024, 1));
    assert!(c.output_max(16 * 1024).iter().all(|f| matches!(f, F::Data(1, _, false))));
}

#[test]
fn incremental_streams_share_round_robin() {
    let mut c = Client::new(Config::default());
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    c.send(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes());
    for id in [1, 3] {
        let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("priority", "u=3, i")]);
        c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, id, &b);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 100_000]), true).unwrap();
    }
    let out = c.output_max(4 * 16_384);
    let ids: Vec<u32> = out.iter().filter_map(|f| if let F::Data(id, ..) = f { Some(*id) } else { None }).collect();
    assert_eq!(ids, [1, 3, 1, 3]);
}

#[test]
fn drain_sent_reports_framed_bytes() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![0u8; 40_000]), false).unwrap();
    let _ = c.output();
    let mut seen = Vec::new();
    c.conn.drain_sent(|id, n| seen.push((id, n)));
    assert_eq!(seen, [(1, 40_000)]);
    assert_eq!(c.conn.buffered(1), Some(0));
    // Reported once; the list keeps its room for the next writes.
    c.conn.drain_sent(|id, n| seen.push((id, n)));
    assert_eq!(seen.len(), 1);
    assert!(c.conn.sent_dirty.is_empty() && c.conn.sent_dirty.capacity() > 0);
}

#[test]
fn trailers_follow_body() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from_static(b"abc"), false).unwrap();
    c.conn.send_trailers(1, vec![Field::new("grpc-status", "0")]).unwrap();
    let out = c.output();
    assert_eq!(out[1..], [F::Data(1, 3, false), F::Headers(1, vec![("grpc-status".into(), "0".into())], true)]);
}

#[test]
fn unknown_frames_are_ignored_and_extension_frames_sent() {
    let mut c = Client::new(Config::default());
    c.send(0xfa, 0, 0, b"whatever");
    assert_eq!(c.output(), vec![]);
    c.conn.send_frame(kind::ORIGIN, 0, 0, b"\x00\x13https://example.com");
    assert_eq!(c.output(), vec![F::Other(kind::ORIGIN)]);
}

#[test]
fn zero_window_stall_times_out_but_progress_does_not() {
    let cfg = Config { idle_timeout: Duration::from_secs(5), ..Config::default() };
    let mut c = Client::new(cfg);
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]);
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![0u8; 1000]), true).unwrap();
    let _ = c.output();
    // Four seconds later the peer opens a little window: progress, the deadline moves.
    c.now += Duration::from_secs(4);
    c.send(kind::WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes());
    assert_eq!(c.output(), vec![F::Data(1, 100, false)]);
    c.now += Duration::from_secs(4);
    c.conn.handle_timeout(c.now);
    assert_eq!(c.output(), vec![], "progress 4 s ago: not stalled yet");
    c.now += Duration::from_secs(2);
    c.conn.handle_timeout(c.now);
    assert_eq!(goaway_reason(&c.output()), Some(Reason::NO_ERROR));
}

#[test]
fn autotuned_stream_window_grows_when_window_limited_and_budget_returns() {
    use sluice_tune::autotune::{AutoTune, Limits, MemoryBudget};
    let budget = MemoryBudget::new(1 << 30);
    let now = Instant::now();
    let policy = AutoTune::new(Limits::new(budget.clone()));
    let mut c = Client {
        conn: Connection::new(Config::default(), Box::new(policy), now),
        enc: hpack::Encoder::new(),
        dec: hpack::Decoder::new(4096),
        now,
    };
    let mut first = PREFACE.to_vec();
    frame(&mut first, kind::SETTINGS, 0, 0, &[]);
    c.input(&first);
    let _ = c.output();
    c.conn.handle_rtt(Duration::from_millis(40));
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    assert_eq!(c.conn.stream_window(1), Some(1 << 20));
    // The client sends its whole window every 40 ms (window-limited); we consume at once.
    let mut window = 1usize << 20;
    for _round in 0..6 {
        let mut sent = 0;
        while sent + 16_384 <= window {
            c.send(kind::DATA, 0, 1, &[0; 16_384]);
            sent += 16_384;
            let n = c.now;
            c.conn.release(n, 1, 16_384);
        }
        c.now += Duration::from_millis(40);
        let grants: u64 = c
            .output()
            .iter()
            .filter_map(|f| if let F::WindowUpdate(1, n) = f { Some(u64::from(*n)) } else { None })
            .sum();
        window = window - sent + grants as usize;
    }
    let w = c.conn.stream_window(1).unwrap();
    assert!(w >= 8 << 20, "window-limited for six RTTs: doubled several times, got {w}");
    assert!(budget.used() > 0);
    c.send(kind::DATA, flag::END_STREAM, 1, &[]);
    assert_eq!(budget.used(), 0, "the end of the body returns the stream's growth to the budget");
}

#[test]
fn a_declared_request_body_starts_on_a_window_that_holds_it() {
    use sluice_tune::autotune::{AutoTune, Limits, MemoryBudget};
    let budget = MemoryBudget::new(1 << 30);
    let mut c = Client::with_policy(Config::default(), Box::new(AutoTune::new(Limits::new(budget.clone()))));
    let ten = 10u32 << 20;
    let b =
        c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up"), ("content-length", &ten.to_string())]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    // The stream's credit goes out with the request, before any DATA; the connection's (1 MiB
    // at start) follows, to twice the receiving streams' windows.
    let out = c.output();
    assert!(out.contains(&F::WindowUpdate(1, ten - (1 << 20))), "{out:?}");
    assert!(out.contains(&F::WindowUpdate(0, 2 * ten - (1 << 20))), "{out:?}");
    assert_eq!(c.conn.stream_window(1), Some(ten));
    assert_eq!(budget.used(), u64::from(ten - (1 << 20)), "the growth is reserved from the budget");
    // The peer may now send past the initial window without waiting for credit.
    for _ in 0..(2 << 20) / 16_384 {
        c.send(kind::DATA, 0, 1, &[0; 16_384]);
    }
    assert!(!c.output().iter().any(|f| matches!(f, F::Rst(..) | F::GoAway(..))));
    // A body no larger than the initial window, or of unknown length, starts on the initial one.
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up"), ("content-length", "1000")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 3, &b);
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 5, &b);
    assert!(!c.output().iter().any(|f| matches!(f, F::WindowUpdate(3 | 5, _))));
    assert_eq!((c.conn.stream_window(3), c.conn.stream_window(5)), (Some(1 << 20), Some(1 << 20)));
    c.send(kind::RST_STREAM, 0, 1, &Reason::CANCEL.0.to_be_bytes());
    assert_eq!(budget.used(), 0, "a reset stream gives its start window back");
}

fn priority_update(prioritized: u32, value: &str) -> Vec<u8> {
    let mut p = prioritized.to_be_bytes().to_vec();
    p.extend_from_slice(value.as_bytes());
    p
}

#[test]
fn priority_update_reorders_open_streams_and_is_buffered_for_idle_ones() {
    let mut c = Client::new(Config::default());
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    c.send(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes());
    // Stream 3's update arrives before its HEADERS: it takes precedence over the header.
    c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(3, "u=0"));
    for (id, prio) in [(1, "u=1"), (3, "u=6")] {
        let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("priority", prio)]);
        c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, id, &b);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 100_000]), true).unwrap();
    }
    let ids = |out: Vec<F>| -> Vec<u32> {
        out.iter().filter_map(|f| if let F::Data(id, ..) = f { Some(*id) } else { None }).collect()
    };
    assert_eq!(ids(c.output_max(3 * 16_384)), [3, 3, 3], "buffered u=0 wins over the header's u=6");
    // Now stream 1 becomes the most urgent.
    c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(1, "u=0"));
    c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(3, "u=7"));
    assert_eq!(ids(c.output_max(2 * 16_384)), [1, 1]);
}

#[test]
fn priority_update_errors() {
    let mut c = Client::new(Config::default());
    c.send(kind::PRIORITY_UPDATE, 0, 1, &priority_update(1, "u=0"));
    assert_eq!(goaway_reason(&c.output()), Some(Reason::PROTOCOL_ERROR), "on a stream");
    let mut c = Client::new(Config::default());
    c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(2, "u=0"));
    assert_eq!(goaway_reason(&c.output()), Some(Reason::PROTOCOL_ERROR), "for a push stream");
    // Updates for idle streams are kept only up to the budget, and cost nothing beyond it.
    let cfg = Config { max_pending_priority_updates: 2, ..Config::default() };
    let mut c = Client::new(cfg);
    for id in [1, 3, 5, 7] {
        c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(id, "u=0"));
    }
    assert_eq!(c.conn.pending_priority.len(), 2);
}

#[test]
fn settings_announce_no_rfc7540_priorities_and_weights_still_map() {
    let now = Instant::now();
    let mut conn = Connection::new(Config::default(), Box::<FixedWindows>::default(), now);
    let mut buf = Vec::new();
    let _ = conn.poll_transmit(now, &mut buf, usize::MAX);
    // SETTINGS_NO_RFC7540_PRIORITIES (0x9) = 1 in our first frame.
    let head = Head::parse(&buf).unwrap();
    let params = &buf[9..9 + head.len as usize];
    assert!(params.chunks(6).any(|p| p == [0, 9, 0, 0, 0, 1]), "{params:?}");
    // A client that sends a PRIORITY frame anyway: weight 256 maps to urgency 0.
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    let mut p = 0u32.to_be_bytes().to_vec();
    p.push(255);
    c.send(kind::PRIORITY, 0, 1, &p);
    assert_eq!(c.conn.streams.get(&1).unwrap().priority.urgency, 0);
}

#[test]
fn origin_frame_follows_settings_and_a_client_origin_is_ignored() {
    let cfg = Config { origins: Some(vec!["https://a.test".into(), "https://b.test".into()]), ..Config::default() };
    let now = Instant::now();
    let mut conn = Connection::new(cfg, Box::new(FixedWindows { stream: 65_535, connection: 65_535 }), now);
    let mut buf = Vec::new();
    assert!(conn.poll_transmit(now, &mut buf, 1 << 20));
    // The first frame is our SETTINGS, the second the ORIGIN frame on stream 0 (RFC 8336 §2).
    let first = Head::parse(&buf).unwrap();
    assert_eq!(first.kind, kind::SETTINGS);
    let at = frame::HEADER_LEN + first.len as usize;
    let second = Head::parse(&buf[at..]).unwrap();
    assert_eq!((second.kind, second.flags, second.stream), (kind::ORIGIN, 0, 0));
    let payload = &buf[at + frame::HEADER_LEN..at + frame::HEADER_LEN + second.len as usize];
    let got = frame::Origin::decode(&second, payload).unwrap().unwrap();
    assert_eq!(got.origins, ["https://a.test", "https://b.test"]);
    // Without origins configured, no ORIGIN frame.
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    assert!(!c.output().contains(&F::Other(kind::ORIGIN)));
    // A client's ORIGIN frame means nothing to a server (RFC 8336 §2.1): ignored, connection
    // fine.
    let mut o = Vec::new();
    frame::Origin { origins: vec!["https://evil.test".into()] }.encode(&mut o);
    c.input(&o);
    c.request(3, "/", true);
    assert_eq!(goaway_reason(&c.output()), None);
    assert!(c.events().iter().any(|e| matches!(e, Event::Request { stream: 3, .. })));
}

fn status(code: &str) -> (String, String) {
    (":status".into(), code.into())
}

#[test]
fn interim_heads_then_final_head_body_and_trailers_in_order() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    let link = Field::new("link", "</a.css>; rel=preload");
    c.conn.send_response(1, 103, vec![link], false).unwrap();
    c.conn.send_response(1, 103, vec![], false).unwrap();
    c.conn.send_response(1, 200, vec![Field::new("content-type", "text/html")], false).unwrap();
    c.conn.send_data(1, Bytes::from_static(b"<html>"), false).unwrap();
    c.conn.send_trailers(1, vec![Field::new("x-sum", "7")]).unwrap();
    assert_eq!(
        c.output(),
        vec![
            F::Headers(1, vec![status("103"), ("link".into(), "</a.css>; rel=preload".into())], false),
            F::Headers(1, vec![status("103")], false),
            F::Headers(1, vec![status("200"), ("content-type".into(), "text/html".into())], false),
            F::Data(1, 6, false),
            F::Headers(1, vec![("x-sum".into(), "7".into())], true),
        ]
    );
    assert_eq!(c.conn.open_streams(), 0, "the trailers ended the stream");
}

#[test]
fn interim_head_goes_out_before_the_final_head_is_known() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    c.conn.send_response(1, 100, vec![], false).unwrap();
    assert_eq!(c.output(), vec![F::Headers(1, vec![status("100")], false)]);
    assert!(!c.conn.wants_write(), "nothing but the interim head to send");
    assert_eq!(c.conn.send_data(1, Bytes::from_static(b"x"), true), Err(SendError::InvalidState), "no final head");
    assert_eq!(c.conn.send_trailers(1, vec![]), Err(SendError::InvalidState), "no final head");
    c.conn.send_response(1, 204, vec![], true).unwrap();
    assert_eq!(c.output(), vec![F::Headers(1, vec![status("204")], true)]);
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn invalid_heads_are_refused_and_nothing_is_framed() {
    let mut c = Client::new(Config::default());
    c.request(1, "/", true);
    assert_eq!(c.conn.send_response(1, 103, vec![], true), Err(SendError::InvalidState), "1xx with END_STREAM");
    assert_eq!(c.conn.send_response(1, 101, vec![], false), Err(SendError::InvalidStatus), "101, RFC 9113 §8.6");
    assert_eq!(c.conn.send_response(1, 99, vec![], false), Err(SendError::InvalidStatus));
    assert_eq!(c.conn.send_response(1, 1000, vec![], false), Err(SendError::InvalidStatus));
    assert_eq!(c.conn.send_response(3, 200, vec![], false), Err(SendError::UnknownStream));
    assert_eq!(c.output(), vec![], "refused heads leave nothing behind");
    c.conn.send_response(1, 200, vec![], false).unwrap();
    assert_eq!(c.conn.send_response(1, 103, vec![], false), Err(SendError::InvalidState), "1xx after the final head");
    assert_eq!(c.conn.send_response(1, 200, vec![], false), Err(SendError::InvalidState), "a second final head");
    let _ = c.output();
    assert_eq!(c.conn.send_response(1, 103, vec![], false), Err(SendError::InvalidState), "after it was framed");
    c.conn.send_data(1, Bytes::new(), true).unwrap();
    assert_eq!(c.output(), vec![F::Data(1, 0, true)]);
}

#[test]
fn handed_over_input_is_sliced_for_large_data_and_copied_for_small() {
    let mut c = Client::with_windows(Config::default(), FixedWindows { stream: 1 << 20, connection: 1 << 20 });
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    let _ = c.events();
    // Two 16 KiB frames and a 100-byte last one, their bytes counting 0, 1, 2, ...
    let body: Vec<u8> = (0..2 * 16_384 + 100).map(|i| (i % 251) as u8).collect();
    let mut wire = Vec::new();
    frame(&mut wire, kind::DATA, 0, 1, &body[..16_384]);
    frame(&mut wire, kind::DATA, 0, 1, &body[16_384..32_768]);
    frame(&mut wire, kind::DATA, flag::END_STREAM, 1, &body[32_768..]);
    // One read buffer, read into in three pieces that cut the frames anywhere, as a driver
    // reading into what follows its last read would hand them over.
    let mut buf = bytes::BytesMut::with_capacity(wire.len());
    buf.extend_from_slice(&wire);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + wire.len();
    let a = buf.split_to(5_000);
    let b = buf.split_to(20_000);
    let now = c.now;
    for piece in [a, b, buf] {
        c.conn.handle_input_buf(now, piece);
    }
    let mut got = Vec::new();
    let mut shared = Vec::new();
    for e in c.events() {
        if let Event::Data { stream: 1, data, .. } = e {
            shared.push(range.contains(&(data.as_ptr() as usize)));
            got.extend_from_slice(&data);
        }
    }
    assert_eq!(got, body, "the body arrives whole and in order");
    // The 16 KiB payloads are slices of the read buffer (no copy, also where a frame was cut
    // between two pieces: they are joined in place); the 100-byte one is a copy, so it does not
    // keep the read buffer alive.
    assert_eq!(shared, vec![true, true, false]);
}

/// Two streams with bodies of every kind of chunk (large ones whole and cut by frame and
/// budget, small ones, an end on its own, trailers): framed into a `Transmit` they come out
/// byte for byte as into a `Vec`, the large payloads shared with the handler's chunks.
#[test]
fn a_transmit_carries_the_same_frames_with_payloads_shared() {
    let big = Bytes::from((0..40_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let run = |into_transmit: bool| {
        let mut c = Client::with_windows(Config::default(), FixedWindows { stream: 1 << 20, connection: 1 << 20 });
        // Room for large frames and windows: what the default would cut is not what is tested.
        let mut settings = Vec::new();
        crate::frame::Settings {
            ack: false,
            values: vec![
                crate::frame::Setting::MaxFrameSize(1 << 16),
                crate::frame::Setting::InitialWindowSize(1 << 20),
            ],
        }
        .encode(&mut settings);
        c.input(&settings);
        let mut wu = Vec::new();
        frame(&mut wu, kind::WINDOW_UPDATE, 0, 0, &(1u32 << 20).to_be_bytes());
        c.input(&wu);
        c.request(1, "/a", true);
        c.request(3, "/b", true);
        let _ = c.events();
        c.conn.send_response(1, 200, Vec::<Field>::new(), false).unwrap();
        c.conn.send_response(3, 200, Vec::<Field>::new(), false).unwrap();
        c.conn.send_data(1, big.clone(), false).unwrap();
        c.conn.send_data(3, big.slice(..1500), false).unwrap();
        c.conn.send_data(1, Bytes::from_static(b"small"), false).unwrap();
        c.conn.send_data(3, big.slice(7..20_007), false).unwrap();
        c.conn.send_data(1, big.slice(100..30_100), true).unwrap();
        c.conn.send_trailers(3, vec![Field::new("x-done", "1")]).unwrap();
        let mut bytes = Vec::new();
        let mut shared = 0;
        // Several writes with budgets that cut frames, then the rest.
        for max in [20_000, 5_000, 64_000, usize::MAX] {
            if into_transmit {
                let mut t = crate::Transmit::with_capacity(0);
                let _ = c.conn.poll_transmit_into(c.now, &mut t, max, u8::MAX);
                shared += t.slices();
                bytes.extend_from_slice(&t.to_vec());
            } else {
                let _ = c.conn.poll_transmit(c.now, &mut bytes, max);
            }
        }
        (bytes, shared)
    };
    let (copied, _) = run(false);
    let (sliced, shared) = run(true);
    assert!(copied.len() > 2 * big.len(), "the bodies went out: {} bytes", copied.len());
    assert_eq!(sliced, copied, "the same frames either way");
    assert!(shared >= 4, "large payloads handed on as slices: {shared}");
}

/// An upload whose bytes come in buffers that do not continue one another in memory (as the
/// TLS stream hands over each record's plaintext where it decrypted it), cut at every kind of
/// place: in frame headers, in DATA payloads, in a PING and a padded DATA frame. The body
/// arrives whole and in order with END_STREAM once, the PING is answered, nothing is reset,
/// and the large parts of payloads are slices of the buffers given, not copies.
#[test]
fn input_in_buffers_of_their_own_is_cut_anywhere_and_copied_only_where_small() {
    for (piece, frame_len) in [(16_384, 16_384), (16_384, 65_536), (5_000, 16_384), (7, 20_000), (40_000, 65_536)] {
        let mut c = uploading(None);
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let mut wire = Vec::new();
        let mut sent = 0;
        let mut k = 0;
        while sent < body.len() {
            let n = frame_len.min(body.len() - sent);
            let end = sent + n == body.len();
            if k == 3 {
                frame(&mut wire, kind::PING, 0, 0, &[7; 8]);
                // A padded frame: its payload is one byte of pad length, the data, the padding.
                let n = 1_000;
                let mut p = vec![4u8];
                p.extend_from_slice(&body[sent..sent + n]);
                p.extend_from_slice(&[0; 4]);
                frame(&mut wire, kind::DATA, flag::PADDED, 1, &p);
                sent += n;
                k += 1;
                continue;
            }
            frame(&mut wire, kind::DATA, if end { flag::END_STREAM } else { 0 }, 1, &body[sent..sent + n]);
            sent += n;
            k += 1;
        }
        let mut got = Vec::new();
        let mut ends = 0;
        let mut shared = 0;
        let mut out = Vec::new();
        // Where the buffers given lie (each is kept alive by what the engine holds of it).
        let mut given = Vec::new();
        let mut kept = Vec::new();
        for chunk in wire.chunks(piece) {
            // A buffer of its own, with room around it: never adjacent to the last one.
            let mut b = bytes::BytesMut::with_capacity(chunk.len() + 64);
            b.extend_from_slice(chunk);
            given.push((b.as_ptr() as usize, b.as_ptr() as usize + b.len()));
            c.conn.handle_input_buf(c.now, b);
            for e in c.events() {
                if let Event::Data { stream: 1, data, end_stream } = e {
                    let at = data.as_ptr() as usize;
                    let inside = given.iter().any(|&(start, stop)| at >= start && at + data.len() <= stop);
                    shared += usize::from(inside && data.len() >= 8 * 1024);
                    got.extend_from_slice(&data);
                    ends += usize::from(end_stream);
                    // Consumed at once, so that the windows stay open; kept, so that no later
                    // copy lands where a buffer given was.
                    c.conn.release(c.now, 1, data.len());
                    kept.push(data);
                }
            }
            out.extend(c.output());
        }
        assert!(got == body, "piece {piece}, frames of {frame_len}: {} of {} bytes, in order", got.len(), body.len());
        assert_eq!(ends, 1, "END_STREAM once");
        assert!(out.contains(&F::Ping(true)), "the PING answered: {out:?}");
        assert!(!out.iter().any(|f| matches!(f, F::Rst(..) | F::GoAway(..))), "no error: {out:?}");
        if piece >= 16_384 {
            assert!(shared >= 10, "piece {piece}, frames of {frame_len}: large parts shared ({shared})");
        }
    }
}

#[test]
fn declared_input_is_what_declared_bodies_still_owe_within_the_windows() {
    let mut c = uploading(Some("100000"));
    assert_eq!(c.conn.declared_input(), 100_000);
    c.send(kind::DATA, 0, 1, &[0; 16_000]);
    let _ = c.events();
    assert_eq!(c.conn.declared_input(), 84_000);
    // A body of undeclared length may end at any frame: it owes nothing.
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/up2")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 3, &b);
    c.send(kind::DATA, 0, 3, &[0; 10_000]);
    let _ = c.events();
    assert_eq!(c.conn.declared_input(), 84_000);
    // What a read cut and the engine holds has left the socket already.
    c.conn.handle_input_buf(c.now, cut_data(0, 16_000, 5_000));
    assert_eq!(c.conn.declared_input(), 84_000 - 9 - 5_000);
    let mut rest = c.conn.take_unparsed_input(c.now).to_vec();
    rest.extend([0; 11_000]);
    c.input(&rest);
    let _ = c.events();
    assert_eq!(c.conn.declared_input(), 68_000);
    for _ in 0..3 {
        c.send(kind::DATA, 0, 3, &[0; 16_384]);
    }
    assert_eq!(c.conn.declared_input(), 68_000);
    for _ in 0..4 {
        c.send(kind::DATA, 0, 1, &[0; 16_384]);
    }
    assert_eq!(c.conn.declared_input(), 68_000 - 4 * 16_384);
    c.send(kind::DATA, flag::END_STREAM, 1, &[0; 68_000 - 4 * 16_384]);
    let ev = c.events();
    assert!(matches!(ev.last(), Some(Event::Data { stream: 1, end_stream: true, .. })), "{ev:?}");
    assert_eq!(c.conn.declared_input(), 0, "the body is whole");
    // Bounded by the connection's window: a body longer than it owes only what fits.
    let mut c = uploading(Some("5000000"));
    assert_eq!(c.conn.declared_input(), 1 << 20);
    c.send(kind::DATA, 0, 1, &[0; 16_384]);
    assert_eq!(c.conn.declared_input(), (1 << 20) - 16_384);
    // A failed connection owes nothing.
    c.send(kind::DATA, 0, 7, b"x");
    assert_eq!(c.conn.declared_input(), 0);
}

/// The SETTINGS frame's (id, value) pairs in `out`, the first frame a connection sends.
fn first_settings(out: &[u8]) -> Vec<(u16, u32)> {
    let h = Head::parse(out).expect("a frame");
    assert_eq!(h.kind, kind::SETTINGS);
    out[9..9 + h.len as usize]
        .chunks(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
        .collect()
}

#[test]
fn extended_connect_only_where_announced() {
    // RFC 8441 §3: announced with SETTINGS_ENABLE_CONNECT_PROTOCOL = 1.
    for (enable, announced) in [(true, true), (false, false)] {
        let mut conn = Connection::new(
            Config { enable_connect_protocol: enable, ..Config::default() },
            Box::new(FixedWindows { stream: 65_535, connection: 65_535 }),
            Instant::now(),
        );
        let mut buf = Vec::new();
        let _ = conn.poll_transmit(Instant::now(), &mut buf, usize::MAX);
        assert_eq!(first_settings(&buf).contains(&(0x8, 1)), announced);
    }
    let websocket = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":authority", "x"),
        (":path", "/ws"),
    ];
    // Announced: the request comes through with its protocol.
    let mut c = Client::new(Config { enable_connect_protocol: true, ..Config::default() });
    let b = c.block(&websocket);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    match c.events().as_slice() {
        [Event::Request { head, end_stream: false, .. }] => {
            assert_eq!(head.protocol.as_deref(), Some(&b"websocket"[..]))
        }
        e => panic!("{e:?}"),
    }
    // Not announced: §4, a malformed request.
    let mut c = Client::new(Config::default());
    let b = c.block(&websocket);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    assert_eq!(c.output(), vec![F::Rst(1, Reason::PROTOCOL_ERROR)]);
    assert!(c.events().is_empty());
}
