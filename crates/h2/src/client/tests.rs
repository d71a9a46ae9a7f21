//! The client against the server engine in memory, and against hand-made server frames for
//! what a correct server never sends.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_hpack as hpack;

use super::*;
use crate::frame::flag;
use crate::{Config, Connection, Event, Field, SendError};
use sluice_tune::window::FixedWindows;

/// The virtual time of tests that do not move it: one instant, constructed once.
fn now() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// A client and a server engine joined in memory.
struct Pair {
    client: Client,
    server: Connection,
    now: Instant,
}

impl Pair {
    fn new(client: ClientConfig, server: Config) -> Self {
        let now = now();
        let w = FixedWindows { stream: 1 << 20, connection: 1 << 20 };
        let mut p = Self { client: Client::new(client, now), server: Connection::new(server, Box::new(w), now), now };
        p.pump();
        p
    }

    /// Moves bytes both ways until neither side has anything to send.
    fn pump(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            if let Some(b) = self.client.poll_transmit() {
                self.server.handle_input(self.now, &b);
                moved = true;
            }
            let mut buf = Vec::new();
            let _ = self.server.poll_transmit(self.now, &mut buf, usize::MAX);
            if !buf.is_empty() {
                self.client.handle_input(self.now, &buf).expect("the server engine is a correct peer");
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("no quiescence");
    }

    fn client_events(&mut self) -> Vec<ClientEvent> {
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// The next request the server saw: (stream, method, authority, path, fields).
    fn server_request(&mut self) -> (u32, String, String, String, Vec<Field>) {
        while let Some(e) = self.server.poll_event() {
            if let Event::Request { stream, head, end_stream } = e {
                assert!(end_stream, "requests carry no body");
                let s = |b: Option<Bytes>| String::from_utf8_lossy(&b.unwrap_or_default()).into_owned();
                return (stream, s(Some(head.method)), s(head.authority), s(head.path), head.fields);
            }
        }
        panic!("no request reached the server");
    }
}

const GET: Request<'static> =
    Request { method: "GET", scheme: "https", authority: "a.test", path: "/x", fields: &[("accept", "*/*")] };

fn body_of(events: &[ClientEvent], stream: u32) -> (usize, bool) {
    let mut n = 0;
    let mut ended = false;
    for e in events {
        if let ClientEvent::Data { stream: s, data, end_stream } = e {
            if *s == stream {
                assert!(!ended, "data after the end");
                n += data.len();
                ended |= end_stream;
            }
        }
    }
    (n, ended)
}

#[test]
fn get_round_trip_with_the_server_engine() {
    let mut p = Pair::new(ClientConfig::default(), Config::default());
    assert!(p.client.is_ready());
    assert_eq!(p.client_events(), [ClientEvent::Ready]);
    let id = p.client.request(&GET).unwrap();
    assert_eq!(id, 1);
    p.pump();
    let (stream, method, authority, path, fields) = p.server_request();
    assert_eq!((stream, method.as_str(), authority.as_str(), path.as_str()), (1, "GET", "a.test", "/x"));
    assert_eq!(fields, [Field::new("accept", "*/*")]);
    p.server.send_response(1, 200, vec![Field::new("content-type", "text/plain")], false).unwrap();
    p.server.send_data(1, Bytes::from(vec![7u8; 100_000]), true).unwrap();
    p.pump();
    let events = p.client_events();
    assert_eq!(
        events[0],
        ClientEvent::Response {
            stream: 1,
            status: 200,
            fields: vec![("content-type".into(), "text/plain".into())],
            end_stream: false
        }
    );
    assert_eq!(body_of(&events, 1), (100_000, true));
    assert_eq!(p.client.open_streams(), 0);
    // The next request gets the next odd id.
    assert_eq!(p.client.request(&GET), Ok(3));
}

#[test]
fn origin_frame_is_reported() {
    let origins = vec!["https://a.test".to_owned(), "https://b.test:8443".to_owned()];
    let mut p = Pair::new(ClientConfig::default(), Config { origins: Some(origins.clone()), ..Config::default() });
    let events = p.client_events();
    assert_eq!(events, [ClientEvent::Ready, ClientEvent::Origin(origins)]);
}

#[test]
fn origin_frames_with_reserved_flags_or_off_stream_0_are_ignored() {
    let mut c = client_with_requests(0);
    let mut payload = Vec::new();
    Origin { origins: vec!["https://b.test".into()] }.encode(&mut payload);
    let body = &payload[HEADER_LEN..];
    for (flags, stream) in [(0x1, 0), (0x8, 0), (0, 1)] {
        c.handle_input(now(), &frame(kind::ORIGIN, flags, stream, body)).unwrap();
        assert_eq!(c.poll_event(), None, "flags {flags:#x} stream {stream}");
    }
    // A flag outside the reserved four does not matter.
    c.handle_input(now(), &frame(kind::ORIGIN, 0x10, 0, body)).unwrap();
    assert_eq!(c.poll_event(), Some(ClientEvent::Origin(vec!["https://b.test".into()])));
}

#[test]
fn credit_goes_back_so_bodies_larger_than_the_windows_arrive() {
    let small = ClientConfig { stream_window: 65_535, connection_window: 65_535, ..ClientConfig::default() };
    let mut p = Pair::new(small, Config::default());
    let id = p.client.request(&GET).unwrap();
    p.pump();
    let _ = p.server_request();
    p.server.send_response(id, 200, vec![], false).unwrap();
    p.server.send_data(id, Bytes::from(vec![1u8; 500_000]), true).unwrap();
    p.pump();
    assert_eq!(body_of(&p.client_events(), id), (500_000, true));
}

#[test]
fn credit_released_by_the_reader_holds_the_server_to_a_window() {
    let manual = ClientConfig {
        stream_window: 65_535,
        connection_window: 65_535,
        release_on_read: false,
        ..ClientConfig::default()
    };
    let mut p = Pair::new(manual, Config::default());
    let id = p.client.request(&GET).unwrap();
    p.pump();
    let _ = p.server_request();
    p.server.send_response(id, 200, vec![], false).unwrap();
    p.server.send_data(id, Bytes::from(vec![1u8; 500_000]), true).unwrap();
    p.pump();
    // Nothing consumed: the server sent one window and waits.
    let (got, done) = body_of(&p.client_events(), id);
    assert_eq!((got, done), (65_535, false));
    // Consumed and released, a window at a time, until the body is all there.
    let (mut total, mut pending) = (got, got);
    for _ in 0..40 {
        p.client.release(id, pending);
        p.pump();
        let (more, end) = body_of(&p.client_events(), id);
        total += more;
        pending = more;
        if end {
            break;
        }
        assert!(more <= 65_535, "{more} beyond a window");
    }
    assert_eq!(total, 500_000);
    // Releasing for a finished stream still credits the connection (no panic, no stream
    // update).
    p.client.release(id, 1000);
}

#[test]
fn head_only_responses_and_trailers() {
    let mut p = Pair::new(ClientConfig::default(), Config::default());
    let _ = p.client_events();
    let a = p.client.request(&GET).unwrap();
    let b = p.client.request(&GET).unwrap();
    p.pump();
    p.server.send_response(a, 204, vec![], true).unwrap();
    p.server.send_response(b, 200, vec![], false).unwrap();
    p.server.send_data(b, Bytes::from_static(b"abc"), false).unwrap();
    p.server.send_trailers(b, vec![Field::new("x-sum", "1")]).unwrap();
    p.pump();
    let events = p.client_events();
    assert!(events.contains(&ClientEvent::Response { stream: a, status: 204, fields: vec![], end_stream: true }));
    assert_eq!(events.last(), Some(&ClientEvent::Trailers { stream: b, fields: vec![("x-sum".into(), "1".into())] }));
    assert_eq!(p.client.open_streams(), 0);
}

/// A client past the handshake with `n` requests open, fed by hand-made frames.
fn client_with_requests(n: usize) -> Client {
    let mut c =
        Client::new(ClientConfig { stream_window: 65_535, connection_window: 65_535, ..Default::default() }, now());
    let mut settings = Vec::new();
    Settings { ack: false, values: vec![] }.encode(&mut settings);
    c.handle_input(now(), &settings).unwrap();
    for _ in 0..n {
        c.request(&GET).unwrap();
    }
    let _ = c.poll_transmit();
    let _ = std::iter::from_fn(|| c.poll_event()).count();
    c
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut v);
    v.extend_from_slice(payload);
    v
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut enc = hpack::Encoder::new();
    let mut b = Vec::new();
    enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false)), &mut b);
    b
}

/// Frames the client wrote: (type, flags, stream, payload).
fn written(c: &mut Client) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let out = c.poll_transmit().unwrap_or_default();
    let mut frames = Vec::new();
    let mut rest = out.strip_prefix(PREFACE).unwrap_or(&out);
    while let Some(h) = Head::parse(rest) {
        let end = HEADER_LEN + h.len as usize;
        frames.push((h.kind, h.flags, h.stream, rest[HEADER_LEN..end].to_vec()));
        rest = &rest[end..];
    }
    frames
}

#[test]
fn connection_errors_send_goaway_with_their_code() {
    let cases: Vec<(&str, Vec<u8>, Reason)> = vec![
        ("DATA on a stream never opened", frame(kind::DATA, 0, 5, b"x"), Reason::PROTOCOL_ERROR),
        ("DATA on an even stream", frame(kind::DATA, 0, 2, b"x"), Reason::PROTOCOL_ERROR),
        (
            "HEADERS opening a stream",
            frame(kind::HEADERS, flag::END_HEADERS, 2, &block(&[(":status", "200")])),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "PUSH_PROMISE with push off",
            frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            Reason::PROTOCOL_ERROR,
        ),
        ("a frame over 16,384 bytes", frame(kind::DATA, 0, 1, &[0; 16_385]), Reason::FRAME_SIZE_ERROR),
        (
            "undecodable HPACK",
            frame(kind::HEADERS, flag::END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Reason::COMPRESSION_ERROR,
        ),
        (
            "a frame between HEADERS and CONTINUATION",
            [frame(kind::HEADERS, 0, 1, &block(&[(":status", "200")])), frame(kind::PING, 0, 0, &[0; 8])].concat(),
            Reason::PROTOCOL_ERROR,
        ),
        ("CONTINUATION without HEADERS", frame(kind::CONTINUATION, flag::END_HEADERS, 1, &[]), Reason::PROTOCOL_ERROR),
        (
            "a CONTINUATION flood",
            std::iter::once(frame(kind::HEADERS, 0, 1, &block(&[(":status", "200")])))
                .chain((0..100).map(|_| frame(kind::CONTINUATION, 0, 1, &[])))
                .collect::<Vec<_>>()
                .concat(),
            Reason::ENHANCE_YOUR_CALM,
        ),
    ];
    for (what, bytes, reason) in cases {
        let mut c = client_with_requests(1);
        let e = c.handle_input(now(), &bytes).expect_err(what);
        assert_eq!(e.reason(), reason, "{what}");
        let frames = written(&mut c);
        let goaway = frames.iter().find(|f| f.0 == kind::GOAWAY).unwrap_or_else(|| panic!("{what}: no GOAWAY"));
        assert_eq!(&goaway.3[4..8], &reason.0.to_be_bytes(), "{what}");
        assert_eq!(c.request(&GET), Err(RequestError::Closed), "{what}");
        assert!(c.handle_input(now(), &[]).is_err(), "{what}: stays failed");
    }
}

#[test]
fn data_beyond_the_stream_window_resets_the_stream() {
    // Credit goes back as soon as half a window is used, so only a window smaller than a
    // frame can be overrun by a server that keeps to its frame size.
    let mut c = Client::new(ClientConfig { stream_window: 1_000, ..ClientConfig::default() }, now());
    let mut s = Vec::new();
    Settings { ack: false, values: vec![] }.encode(&mut s);
    c.handle_input(now(), &s).unwrap();
    c.request(&GET).unwrap();
    let _ = std::iter::from_fn(|| c.poll_event()).count();
    let mut bytes = Vec::new();
    Headers::encode(1, &block(&[(":status", "200")]), false, 16_384, &mut bytes);
    bytes.extend(frame(kind::DATA, 0, 1, &[0; 1_001]));
    c.handle_input(now(), &bytes).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    let Some(ClientEvent::Reset { stream: 1, error }) = events.last() else { panic!("{events:?}") };
    assert_eq!(error.reason(), Reason::FLOW_CONTROL_ERROR);
    assert!(written(&mut c)
        .iter()
        .any(|f| f.0 == kind::RST_STREAM && f.3 == Reason::FLOW_CONTROL_ERROR.0.to_be_bytes()));
}

#[test]
fn stream_errors_reset_only_their_stream() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("DATA before the head", frame(kind::DATA, 0, 1, b"x")),
        ("no :status", frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[("server", "x")]))),
        (
            "a request pseudo-field",
            frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[(":status", "200"), (":path", "/")])),
        ),
        ("status not three digits", frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[(":status", "2000")]))),
        ("101 in HTTP/2", frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[(":status", "101"), ("upgrade", "x")]))),
        (
            "1xx ending the stream",
            frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&[(":status", "103")])),
        ),
        (
            "trailers without END_STREAM",
            [
                frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[(":status", "200")])),
                frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&[("x", "y")])),
            ]
            .concat(),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = client_with_requests(2);
        c.handle_input(now(), &bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
        let Some(ClientEvent::Reset { stream: 1, error }) = events.last() else { panic!("{what}: {events:?}") };
        assert_eq!(
            (error.reason(), matches!(error, Error::Stream { initiator: Initiator::Local, .. })),
            (Reason::PROTOCOL_ERROR, true),
            "{what}"
        );
        let frames = written(&mut c);
        assert!(frames.iter().any(|f| f.0 == kind::RST_STREAM && f.2 == 1), "{what}: {frames:?}");
        // Stream 3 and the connection go on.
        assert_eq!(c.open_streams(), 1, "{what}");
        c.handle_input(
            now(),
            &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &block(&[(":status", "200")])),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(matches!(c.poll_event(), Some(ClientEvent::Response { stream: 3, status: 200, .. })), "{what}");
    }
}

#[test]
fn informational_heads_are_their_own_events() {
    let mut c = client_with_requests(1);
    let mut enc = hpack::Encoder::new();
    let mut bytes = Vec::new();
    for fields in [
        vec![(":status", "100")],
        vec![(":status", "103"), ("link", "</a.css>; rel=preload")],
        vec![(":status", "200")],
    ] {
        let mut b = Vec::new();
        enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false)), &mut b);
        bytes.extend(frame(kind::HEADERS, flag::END_HEADERS, 1, &b));
    }
    c.handle_input(now(), &bytes).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert_eq!(
        events,
        [
            ClientEvent::Informational { stream: 1, status: 100, fields: vec![] },
            ClientEvent::Informational {
                stream: 1,
                status: 103,
                fields: vec![("link".into(), "</a.css>; rel=preload".into())]
            },
            ClientEvent::Response { stream: 1, status: 200, fields: vec![], end_stream: false },
        ]
    );
}

#[test]
fn early_hints_from_the_server_engine_arrive_before_the_response() {
    let mut p = Pair::new(ClientConfig::default(), Config::default());
    let _ = p.client_events();
    let id = p.client.request(&GET).unwrap();
    p.pump();
    let _ = p.server_request();
    p.server.send_response(id, 103, vec![Field::new("link", "</s.js>; rel=preload")], false).unwrap();
    p.pump();
    assert_eq!(
        p.client_events(),
        [ClientEvent::Informational {
            stream: id,
            status: 103,
            fields: vec![("link".into(), "</s.js>; rel=preload".into())]
        }]
    );
    p.server.send_response(id, 200, vec![], false).unwrap();
    p.server.send_data(id, Bytes::from_static(b"ok"), false).unwrap();
    p.server.send_trailers(id, vec![Field::new("x-sum", "2")]).unwrap();
    p.pump();
    assert_eq!(
        p.client_events(),
        [
            ClientEvent::Response { stream: id, status: 200, fields: vec![], end_stream: false },
            ClientEvent::Data { stream: id, data: Bytes::from_static(b"ok"), end_stream: false },
            ClientEvent::Trailers { stream: id, fields: vec![("x-sum".into(), "2".into())] },
        ]
    );
}

const POST: Request<'static> =
    Request { method: "POST", scheme: "https", authority: "a.test", path: "/up", fields: &[("content-type", "x/y")] };

/// Decode the header block of a written HEADERS frame.
fn decode(dec: &mut hpack::Decoder, block: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    dec.decode(block, 1 << 20, &mut |n, v, _| {
        fields.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
    })
    .expect("the client's HPACK is valid");
    fields
}

#[test]
fn request_body_and_trailers_as_exact_frames() {
    let mut c = client_with_requests(0);
    let id = c.send_request(&POST, false).unwrap();
    c.send_data(id, Bytes::from_static(b"hello "), false).unwrap();
    c.send_data(id, Bytes::from_static(b"world"), false).unwrap();
    assert_eq!(c.buffered(id), Some(11));
    c.send_trailers(id, &[("x-checksum", "abc")]).unwrap();
    let frames = written(&mut c);
    let mut dec = hpack::Decoder::new(4096);
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert_eq!((frames[0].0, frames[0].1, frames[0].2), (kind::HEADERS, flag::END_HEADERS, 1), "no END_STREAM");
    assert_eq!(
        decode(&mut dec, &frames[0].3),
        [
            (":method".into(), "POST".into()),
            (":scheme".into(), "https".into()),
            (":authority".into(), "a.test".into()),
            (":path".into(), "/up".into()),
            ("content-type".into(), "x/y".into())
        ]
    );
    assert_eq!(frames[1], (kind::DATA, 0, 1, b"hello world".to_vec()));
    assert_eq!((frames[2].0, frames[2].1, frames[2].2), (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1));
    assert_eq!(decode(&mut dec, &frames[2].3), [("x-checksum".to_string(), "abc".to_string())]);
    assert_eq!(c.buffered(id), Some(0));
    assert_eq!(c.send_data(id, Bytes::from_static(b"x"), false), Err(SendError::InvalidState), "after the trailers");
    assert_eq!(c.open_streams(), 1, "the response is still to come");
}

#[test]
fn request_body_calls_that_are_refused() {
    let mut c = client_with_requests(1);
    assert_eq!(c.send_data(1, Bytes::from_static(b"x"), true), Err(SendError::InvalidState), "sent without body");
    assert_eq!(c.send_trailers(1, &[]), Err(SendError::InvalidState));
    assert_eq!(c.send_data(7, Bytes::new(), true), Err(SendError::UnknownStream));
    let id = c.send_request(&POST, false).unwrap();
    c.send_data(id, Bytes::new(), true).unwrap();
    assert_eq!(c.send_trailers(id, &[("a", "b")]), Err(SendError::InvalidState), "the body has ended");
    // An empty body ends with an empty DATA frame carrying END_STREAM.
    let frames = written(&mut c);
    assert_eq!(frames.last(), Some(&(kind::DATA, flag::END_STREAM, id, vec![])));
}

#[test]
fn request_body_waits_for_the_servers_windows() {
    let mut c = Client::new(ClientConfig::default(), now());
    let mut s = Vec::new();
    Settings { ack: false, values: vec![Setting::InitialWindowSize(10)] }.encode(&mut s);
    c.handle_input(now(), &s).unwrap();
    let _ = written(&mut c);
    let id = c.send_request(&POST, false).unwrap();
    c.send_data(id, Bytes::from(vec![7u8; 25]), true).unwrap();
    let frames = written(&mut c);
    assert_eq!(frames[1], (kind::DATA, 0, id, vec![7; 10]), "the stream window: 10 bytes");
    assert_eq!(written(&mut c), [], "nothing more until credit comes");
    c.handle_input(now(), &frame(kind::WINDOW_UPDATE, 0, id, &20u32.to_be_bytes())).unwrap();
    assert_eq!(written(&mut c), [(kind::DATA, flag::END_STREAM, id, vec![7; 15])]);

    // The connection window (65,535 until the server opens it) bounds all streams together.
    let mut c = Client::new(ClientConfig::default(), now());
    let mut s = Vec::new();
    Settings { ack: false, values: vec![Setting::InitialWindowSize(1 << 20)] }.encode(&mut s);
    c.handle_input(now(), &s).unwrap();
    let _ = written(&mut c);
    let a = c.send_request(&POST, false).unwrap();
    let b = c.send_request(&POST, false).unwrap();
    c.send_data(a, Bytes::from(vec![1u8; 40_000]), true).unwrap();
    c.send_data(b, Bytes::from(vec![2u8; 40_000]), true).unwrap();
    let data: Vec<(u32, usize, u8)> =
        written(&mut c).into_iter().filter(|f| f.0 == kind::DATA).map(|f| (f.2, f.3.len(), f.1)).collect();
    // One frame per stream in turn, 16,384 at most, 65,535 in all.
    assert_eq!(data, [(a, 16_384, 0), (b, 16_384, 0), (a, 16_384, 0), (b, 16_383, 0)]);
    c.handle_input(now(), &frame(kind::WINDOW_UPDATE, 0, 0, &100_000u32.to_be_bytes())).unwrap();
    let data: Vec<(u32, usize, u8)> =
        written(&mut c).into_iter().filter(|f| f.0 == kind::DATA).map(|f| (f.2, f.3.len(), f.1)).collect();
    assert_eq!(data, [(a, 7_232, flag::END_STREAM), (b, 7_233, flag::END_STREAM)]);
}

#[test]
fn window_overflow_resets_the_stream_or_fails_the_connection() {
    let mut c = client_with_requests(0);
    let id = c.send_request(&POST, false).unwrap();
    let _ = written(&mut c);
    c.handle_input(now(), &frame(kind::WINDOW_UPDATE, 0, id, &0x7fff_ffffu32.to_be_bytes())).unwrap();
    assert_eq!(written(&mut c), [(kind::RST_STREAM, 0, id, Reason::FLOW_CONTROL_ERROR.0.to_be_bytes().to_vec())]);
    let ev: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        matches!(&ev[..], [ClientEvent::Reset { stream, error }] if *stream == id && error.reason() == Reason::FLOW_CONTROL_ERROR)
    );
    let e = c.handle_input(now(), &frame(kind::WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())).unwrap_err();
    assert_eq!(e.reason(), Reason::FLOW_CONTROL_ERROR);
    let frames = written(&mut c);
    assert_eq!(frames[0].0, kind::GOAWAY);
    assert_eq!(&frames[0].3[4..8], &Reason::FLOW_CONTROL_ERROR.0.to_be_bytes());
}

#[test]
fn upload_with_trailers_to_the_server_engine() {
    let mut p = Pair::new(ClientConfig::default(), Config::default());
    let _ = p.client_events();
    let id = p.client.send_request(&POST, false).unwrap();
    // Three times the server's stream window (1 MiB): credit must come back as it is consumed.
    let body: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    p.client.send_data(id, Bytes::from(body.clone()), false).unwrap();
    p.client.send_trailers(id, &[("x-sum", "9")]).unwrap();
    let mut got = Vec::new();
    let mut trailers = None;
    for _ in 0..1_000 {
        p.pump();
        while let Some(e) = p.server.poll_event() {
            match e {
                Event::Request { stream, end_stream, .. } => assert_eq!((stream, end_stream), (id, false)),
                Event::Data { stream, data, end_stream } => {
                    assert!(!end_stream, "the trailers end the body");
                    got.extend_from_slice(&data);
                    p.server.release(p.now, stream, data.len());
                }
                Event::Trailers { stream, fields } => trailers = Some((stream, fields)),
                other => panic!("{other:?}"),
            }
        }
        if trailers.is_some() {
            break;
        }
    }
    assert_eq!(trailers, Some((id, vec![Field::new("x-sum", "9")])));
    assert!(got == body, "the body arrived whole and in order");
    p.server.send_response(id, 201, vec![], true).unwrap();
    p.pump();
    assert_eq!(
        p.client_events(),
        [ClientEvent::Response { stream: id, status: 201, fields: vec![], end_stream: true }]
    );
    assert_eq!(p.client.open_streams(), 0);
}

#[test]
fn a_complete_response_before_the_request_body_ends() {
    let mut c = client_with_requests(0);
    let id = c.send_request(&POST, false).unwrap();
    c.send_data(id, Bytes::from_static(b"part"), false).unwrap();
    let _ = written(&mut c);
    let mut bytes = Vec::new();
    Headers::encode(id, &block(&[(":status", "413")]), true, 16_384, &mut bytes);
    c.handle_input(now(), &bytes).unwrap();
    assert_eq!(
        std::iter::from_fn(|| c.poll_event()).collect::<Vec<_>>(),
        [ClientEvent::Response { stream: id, status: 413, fields: vec![], end_stream: true }]
    );
    // RFC 9113 §8.1: the request may go on, until the server says stop with RST_STREAM
    // NO_ERROR, which is not a failure of the (complete) response.
    assert_eq!(c.open_streams(), 1);
    c.send_data(id, Bytes::from_static(b"more"), false).unwrap();
    assert_eq!(written(&mut c), [(kind::DATA, 0, id, b"more".to_vec())]);
    c.handle_input(now(), &frame(kind::RST_STREAM, 0, id, &Reason::NO_ERROR.0.to_be_bytes())).unwrap();
    assert_eq!(c.poll_event(), None);
    assert_eq!(c.open_streams(), 0);
    assert_eq!(c.send_data(id, Bytes::from_static(b"x"), true), Err(SendError::UnknownStream));
}

#[test]
fn settings_not_acknowledged_in_time_is_settings_timeout() {
    let t0 = now();
    let cfg = ClientConfig { settings_timeout: Duration::from_secs(5), ..ClientConfig::default() };
    let mut c = Client::new(cfg, t0);
    let _ = c.poll_transmit();
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    // The server's SETTINGS (no acknowledgement of ours yet) leaves the timer running.
    let mut s = Vec::new();
    Settings { ack: false, values: vec![] }.encode(&mut s);
    c.handle_input(t0 + Duration::from_secs(1), &s).unwrap();
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    assert_eq!(c.handle_timeout(t0 + Duration::from_secs(5) - Duration::from_nanos(1)), Ok(()));
    let e = c.handle_timeout(t0 + Duration::from_secs(5)).unwrap_err();
    assert_eq!(e.reason(), Reason::SETTINGS_TIMEOUT);
    let frames = written(&mut c);
    let goaway = frames.iter().find(|f| f.0 == kind::GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.3, [0, 0, 0, 0, 0, 0, 0, 0x4], "last stream 0, SETTINGS_TIMEOUT");
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.request(&GET), Err(RequestError::Closed));

    // Late input runs the timer too: a server that talks but never acknowledges.
    let mut c = Client::new(cfg, t0);
    let e = c.handle_input(t0 + Duration::from_secs(6), &s).unwrap_err();
    assert_eq!(e.reason(), Reason::SETTINGS_TIMEOUT);

    // Acknowledged: no timer.
    let mut c = Client::new(cfg, t0);
    let mut ack = s.clone();
    Settings { ack: true, values: vec![] }.encode(&mut ack);
    c.handle_input(t0 + Duration::from_secs(1), &ack).unwrap();
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.handle_timeout(t0 + Duration::from_secs(60)), Ok(()));
}

#[test]
fn the_server_engine_acknowledges_in_time() {
    let p = Pair::new(ClientConfig::default(), Config::default());
    assert_eq!(p.client.poll_timeout(), None, "the pump carried the server's acknowledgement");
}

#[test]
fn goaway_refuses_the_streams_it_did_not_process() {
    let mut c = client_with_requests(3);
    let mut g = Vec::new();
    GoAway { last_stream: 1, reason: Reason::NO_ERROR, debug: vec![] }.encode(&mut g);
    c.handle_input(now(), &g).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert_eq!(events[0], ClientEvent::GoAway { last_stream: 1, reason: Reason::NO_ERROR });
    let refused: Vec<u32> = events[1..]
        .iter()
        .map(|e| match e {
            ClientEvent::Reset { stream, error } if error.reason() == Reason::REFUSED_STREAM => *stream,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(refused, [3, 5]);
    assert_eq!(c.open_streams(), 1);
    assert!(!c.accepts_requests());
    assert_eq!(c.request(&GET), Err(RequestError::GoingAway));
}

#[test]
fn the_servers_settings_bound_requests() {
    let mut c = Client::new(ClientConfig::default(), now());
    let mut s = Vec::new();
    Settings { ack: false, values: vec![Setting::MaxConcurrentStreams(1), Setting::MaxFrameSize(16_384)] }
        .encode(&mut s);
    c.handle_input(now(), &s).unwrap();
    let frames = written(&mut c);
    // Preface and our SETTINGS went first; the server's SETTINGS is acknowledged.
    assert!(frames.iter().any(|f| f.0 == kind::SETTINGS && f.1 == flag::ACK));
    assert_eq!(c.request(&GET), Ok(1));
    assert_eq!(c.request(&GET), Err(RequestError::TooManyStreams));
    c.cancel(1);
    assert!(written(&mut c).iter().any(|f| f.0 == kind::RST_STREAM && f.2 == 1));
    assert_eq!(c.request(&GET), Ok(3));
    // PINGs are answered with the same payload.
    c.handle_input(now(), &frame(kind::PING, 0, 0, b"12345678")).unwrap();
    assert!(written(&mut c).iter().any(|f| f.0 == kind::PING && f.1 == flag::ACK && f.3 == b"12345678"));
}

#[test]
fn frames_split_anywhere_decode_the_same() {
    let mut whole = Vec::new();
    Headers::encode(1, &block(&[(":status", "200"), ("content-length", "5")]), false, 16_384, &mut whole);
    whole.extend(frame(kind::DATA, flag::END_STREAM, 1, b"hello"));
    let mut c = client_with_requests(1);
    for b in &whole {
        c.handle_input(now(), std::slice::from_ref(b)).unwrap();
    }
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(body_of(&events, 1), (5, true));
}

/// Fuzzing (h2_client) checked every request head against the server's HPACK decoder; its
/// first model applied a smaller SETTINGS_HEADER_TABLE_SIZE at once and flagged a head queued
/// before the SETTINGS arrived. The client is right, as this pins down: a head queued before
/// the SETTINGS uses the old table and goes out before our ACK; the server's decoder takes the
/// new limit at the ACK (RFC 9113 §6.5.3), and the next head opens with the size update
/// (RFC 7541 §4.2).
#[test]
fn header_table_shrunk_by_settings_applies_after_the_ack() {
    let mut c = client_with_requests(0);
    let first = c.request(&GET).unwrap();
    let mut s = Vec::new();
    Settings { ack: false, values: vec![Setting::HeaderTableSize(0)] }.encode(&mut s);
    c.handle_input(now(), &s).unwrap();
    let second = c.request(&GET).unwrap();
    let frames = written(&mut c);
    let kinds: Vec<(u8, u8, u32)> = frames.iter().map(|f| (f.0, f.1, f.2)).collect();
    let eh = flag::END_HEADERS | flag::END_STREAM;
    assert_eq!(kinds, [(kind::HEADERS, eh, first), (kind::SETTINGS, flag::ACK, 0), (kind::HEADERS, eh, second)]);
    // The server's decoder: the RFC default until the ACK, then the new limit.
    let mut dec = hpack::Decoder::new(4096);
    let mut fields = Vec::new();
    dec.decode(&frames[0].3, usize::MAX, &mut |n, v, _| fields.push((n.to_vec(), v.to_vec()))).unwrap();
    assert!(dec.table_size() > 0, "the first head indexed fields");
    dec.set_max_table_size(0);
    assert_eq!(frames[2].3[0], 0x20, "the second head opens with a size update to 0");
    let mut again = Vec::new();
    dec.decode(&frames[2].3, usize::MAX, &mut |n, v, _| again.push((n.to_vec(), v.to_vec()))).unwrap();
    assert_eq!(again, fields);
    assert_eq!(dec.table_size(), 0);
}
