//! Request streams (RFC 9114 §4.1): requests and responses, bodies, trailers, malformed
//! messages, frame sequence errors, field section limits, and blocked QPACK sections.

use bytes::Bytes;
use sluice_h3::{Code, Config, Event, Field, SendError, Transmit};

use crate::client::*;

const GET: &[(&str, &str)] = &[(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/")];

#[test]
fn get_request_and_response() {
    let mut c = Client::new(Config::default());
    c.get(0, "/index.html", &[("accept", "text/html")]);
    let ev = c.events();
    let [Event::Request { stream: 0, head, end_stream: true }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(&head.method[..], b"GET");
    assert_eq!(head.path.as_deref(), Some(&b"/index.html"[..]));
    assert_eq!(head.get(b"accept").map(|v| &v[..]), Some(&b"text/html"[..]));

    let fields = vec![Field::new("content-type", "text/plain"), Field::new("content-length", "5")];
    c.conn.send_response(0, 200, fields, false).unwrap();
    c.conn.send_data(0, Bytes::from_static(b"hello"), true).unwrap();
    c.pump();
    let f = c.frames(0);
    assert_eq!(f.len(), 2, "{f:?}");
    let F::Headers(h) = &f[0] else { panic!("{f:?}") };
    assert_eq!(h[0], (":status".into(), "200".into()), ":status first");
    assert!(h.contains(&("content-type".into(), "text/plain".into())));
    assert_eq!(f[1], F::Data(b"hello".to_vec()));
    // Exact DATA frame bytes: type 0x00, length 5, payload, then FIN.
    assert!(c.written[&0].ends_with(&[0x00, 0x05, b'h', b'e', b'l', b'l', b'o']));
    assert!(c.finished.contains(&0));
    assert_eq!(c.conn.open_streams(), 0, "both directions done: the stream is forgotten");
    assert_eq!(c.conn.send_data(0, Bytes::from_static(b"x"), true), Err(SendError::UnknownStream));
}

#[test]
fn head_only_response_ends_with_the_head() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    c.conn.send_response(0, 204, vec![], true).unwrap();
    let out = c.pump();
    assert!(out.iter().any(|t| matches!(t, sluice_h3::Transmit::Write { stream: 0, fin: true, .. })));
    assert_eq!(c.frames(0).len(), 1);
}

#[test]
fn interim_then_final_response() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    assert_eq!(c.conn.send_response(0, 101, vec![], false), Err(SendError::InvalidStatus));
    assert_eq!(c.conn.send_response(0, 1000, vec![], false), Err(SendError::InvalidStatus));
    assert_eq!(c.conn.send_response(0, 103, vec![], true), Err(SendError::InvalidState));
    assert_eq!(c.conn.send_data(0, Bytes::from_static(b"x"), false), Err(SendError::InvalidState), "no head yet");
    c.conn.send_response(0, 103, vec![Field::new("link", "</a.css>; rel=preload")], false).unwrap();
    c.conn.send_response(0, 200, vec![], false).unwrap();
    assert_eq!(c.conn.send_response(0, 200, vec![], false), Err(SendError::InvalidState));
    c.conn.send_data(0, Bytes::from_static(b"ok"), true).unwrap();
    c.pump();
    let f = c.frames(0);
    assert_eq!(f.iter().map(F::status).collect::<Vec<_>>(), [Some("103"), Some("200"), None]);
}

#[test]
fn early_hints_final_head_body_and_trailers_as_exact_frames() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    let _ = c.events();
    c.conn.send_response(0, 103, vec![Field::new("link", "</a.css>; rel=preload")], false).unwrap();
    c.conn.send_response(0, 200, vec![Field::new("content-type", "text/html")], false).unwrap();
    c.conn.send_data(0, Bytes::from_static(b"<html>"), false).unwrap();
    c.conn.send_trailers(0, vec![Field::new("x-sum", "7")]).unwrap();
    let out = c.pump();
    let s = |v: &str| (":status".to_string(), v.to_string());
    assert_eq!(
        c.frames(0),
        [
            F::Headers(vec![s("103"), ("link".into(), "</a.css>; rel=preload".into())]),
            F::Headers(vec![s("200"), ("content-type".into(), "text/html".into())]),
            F::Data(b"<html>".to_vec()),
            F::Headers(vec![("x-sum".into(), "7".into())]),
        ]
    );
    // The DATA frame's exact bytes (type 0x00, length 6) sit between the heads and the trailers.
    let written = &c.written[&0];
    let at = written.windows(8).position(|w| w == b"\x00\x06<html>").expect("DATA frame");
    assert_eq!(written[at + 8], 0x01, "the trailer HEADERS frame follows the DATA frame");
    // Both heads leave in one write, and FIN comes with the trailers: nothing after them.
    let writes: Vec<_> = out.iter().filter(|t| matches!(t, Transmit::Write { stream: 0, .. })).collect();
    assert_eq!(writes.len(), 3, "{writes:?}");
    assert!(matches!(writes[2], Transmit::Write { fin: true, data, .. } if data[0] == 0x01));
    assert!(c.finished.contains(&0));
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn post_with_body_and_trailers() {
    let mut c = Client::new(Config::default());
    let post = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/upload"),
        ("content-length", "11"),
    ];
    let mut b = c.headers_frame(0, &post);
    b.extend(frame(DATA, b"hello "));
    b.extend(frame(0x21, b"reserved frames are skipped"));
    b.extend(frame(DATA, b""));
    b.extend(frame(DATA, b"world"));
    let t = c.headers_frame(0, &[("x-checksum", "abc")]);
    b.extend(t);
    c.input(0, &b, true);
    let ev = c.events();
    assert!(matches!(&ev[0], Event::Request { stream: 0, end_stream: false, .. }), "{ev:?}");
    assert_eq!(body(&ev, 0), b"hello world");
    assert_eq!(
        ev.last(),
        Some(&Event::Trailers { stream: 0, fields: vec![Field::new("x-checksum", "abc")] }),
        "trailers end the request"
    );

    c.conn.send_response(0, 200, vec![], false).unwrap();
    c.conn.send_data(0, Bytes::from_static(b"stored"), false).unwrap();
    c.conn.send_trailers(0, vec![Field::new("x-result", "ok")]).unwrap();
    assert_eq!(c.conn.send_data(0, Bytes::from_static(b"late"), false), Err(SendError::InvalidState));
    c.pump();
    let f = c.frames(0);
    assert_eq!(f[0].status(), Some("200"));
    assert_eq!(f[1], F::Data(b"stored".to_vec()));
    assert_eq!(f[2], F::Headers(vec![("x-result".into(), "ok".into())]));
    assert!(c.finished.contains(&0));
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn a_complete_response_to_a_body_still_coming_stops_it_with_no_error() {
    let mut c = Client::new(Config::default());
    let post = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/up")];
    c.request(0, &post, false);
    c.input(0, &frame(DATA, b"first part"), false);
    let _ = c.events();
    // An early, complete answer: the rest of the body is not needed (RFC 9114 §4.1).
    c.conn.send_response(0, 413, vec![], true).unwrap();
    c.pump();
    assert_eq!(c.frames(0)[0].status(), Some("413"));
    assert!(c.stops.contains(&(0, Code::H3_NO_ERROR)), "{:?}", c.stops);
    assert_eq!(c.conn.open_streams(), 0);
    // A request whose body had ended: its reading is not stopped.
    c.request(4, &post, true);
    let _ = c.events();
    c.conn.send_response(4, 204, vec![], true).unwrap();
    c.pump();
    assert!(!c.stops.iter().any(|&(id, _)| id == 4), "{:?}", c.stops);
}

#[test]
fn body_end_without_trailers() {
    let mut c = Client::new(Config::default());
    let post = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")];
    c.request(0, &post, false);
    let ev = c.events();
    assert!(matches!(ev[..], [Event::Request { end_stream: false, .. }]));
    c.input(0, &frame(DATA, b"abc"), false);
    c.input(0, &[], true);
    // The end is marked on the last body event while it is still queued...
    assert_eq!(c.events(), [Event::Data { stream: 0, data: Bytes::from_static(b"abc"), end_stream: true }]);

    // ...and comes as an empty final Data once that was taken.
    c.request(4, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    c.input(4, &frame(DATA, b"abc"), false);
    let _ = c.events();
    c.input(4, &[], true);
    assert_eq!(c.events(), [Event::Data { stream: 4, data: Bytes::new(), end_stream: true }]);
}

fn rejected_as_malformed(fields: &[(&str, &str)]) {
    let mut c = Client::new(Config::default());
    c.request(0, fields, true);
    assert_eq!(c.events(), [], "{fields:?} must not be delivered");
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010e))], "{fields:?}");
    assert_eq!(c.close, None, "a stream error, not a connection error");
    // The connection goes on.
    c.get(4, "/", &[]);
    assert!(matches!(c.events()[..], [Event::Request { stream: 4, .. }]));
}

#[test]
fn malformed_requests_are_message_errors() {
    rejected_as_malformed(&[(":method", "GET"), (":scheme", "https"), (":authority", "a")]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("Upper", "x"),
    ]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("connection", "close"),
    ]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("transfer-encoding", "chunked"),
    ]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        (":status", "200"),
    ]);
    rejected_as_malformed(&[(":method", "GET"), (":scheme", "https"), ("a", "b"), (":path", "/"), (":authority", "a")]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("x", "a\r\nb"),
    ]);
    // §4.3.1: an https request needs :authority or host, not empty, equal when both.
    rejected_as_malformed(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
    rejected_as_malformed(&[(":method", "GET"), (":scheme", "https"), (":authority", ""), (":path", "/")]);
    rejected_as_malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("host", "b"),
    ]);
    // RFC 9220: no extended CONNECT without SETTINGS_ENABLE_CONNECT_PROTOCOL.
    rejected_as_malformed(&[
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
    ]);
    // Content-length that is not a number.
    rejected_as_malformed(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("content-length", "x"),
    ]);
}

#[test]
fn method_that_is_not_a_token_is_a_message_error() {
    // RFC 9110 §9.1: a method is a token; "G ET" is malformed (RFC 9114 §4.1.2), reset with
    // H3_MESSAGE_ERROR and never delivered.
    rejected_as_malformed(&[(":method", "G ET"), (":scheme", "https"), (":authority", "a"), (":path", "/")]);
}

#[test]
fn host_without_authority_is_fine() {
    let mut c = Client::new(Config::default());
    c.request(0, &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("host", "a.example")], true);
    assert!(matches!(c.events()[..], [Event::Request { stream: 0, .. }]));
}

#[test]
fn content_length_mismatch_is_a_message_error() {
    // More DATA than announced: detected at once.
    let mut c = Client::new(Config::default());
    let post =
        [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("content-length", "3")];
    c.request(0, &post, false);
    c.input(0, &frame(DATA, b"abcd"), false);
    let ev = c.events();
    assert!(matches!(&ev[1], Event::StreamReset { stream: 0, error } if error.code == Code(0x010e)), "{ev:?}");
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010e))]);
    assert_eq!(c.stops, [(0, Code(0x010e))]);

    // Less DATA than announced at the end of the stream.
    let mut c = Client::new(Config::default());
    c.request(0, &post, false);
    c.input(0, &frame(DATA, b"ab"), true);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010e))]);
    assert!(c.stops.is_empty(), "the request side is already complete");

    // And before trailers.
    let mut c = Client::new(Config::default());
    c.request(0, &post, false);
    let t = c.headers_frame(0, &[("x", "y")]);
    c.input(0, &t, true);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010e))]);
}

#[test]
fn invalid_trailers_are_message_errors() {
    let mut c = Client::new(Config::default());
    let post = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")];
    c.request(0, &post, false);
    let t = c.headers_frame(0, &[(":path", "/x")]);
    c.input(0, &t, true);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010e))]);
}

#[test]
fn frame_sequence_errors_close_the_connection() {
    // DATA before HEADERS.
    let mut c = Client::new(Config::default());
    c.input(0, &frame(DATA, b"x"), false);
    assert_eq!(c.closed_with(), Some(Code(0x0105)));

    // HEADERS after trailers.
    let mut c = Client::new(Config::default());
    c.request(0, GET, false);
    let t = c.headers_frame(0, &[("x", "y")]);
    c.input(0, &t, false);
    let t2 = c.headers_frame(0, &[("x", "z")]);
    c.input(0, &t2, false);
    assert_eq!(c.closed_with(), Some(Code(0x0105)));

    // DATA after trailers.
    let mut c = Client::new(Config::default());
    c.request(0, GET, false);
    let t = c.headers_frame(0, &[("x", "y")]);
    c.input(0, &t, false);
    c.input(0, &frame(DATA, b"x"), false);
    assert_eq!(c.closed_with(), Some(Code(0x0105)));

    // Control frames and PUSH_PROMISE on a request stream.
    for f in [settings(&[]), frame_varint(GOAWAY, 0), frame_varint(MAX_PUSH_ID, 1), frame_varint(CANCEL_PUSH, 0)] {
        let mut c = Client::new(Config::default());
        c.request(0, GET, false);
        c.input(0, &f, false);
        assert_eq!(c.closed_with(), Some(Code(0x0105)), "{f:?}");
    }
    let mut c = Client::new(Config::default());
    c.request(0, GET, false);
    c.input(0, &frame(PUSH_PROMISE, &[0, 0, 0]), false);
    assert_eq!(c.closed_with(), Some(Code(0x0105)));
}

#[test]
fn unknown_frames_are_ignored_anywhere_on_a_request_stream() {
    let mut c = Client::new(Config::default());
    let mut b = frame(0x21, b"before the head");
    b.extend(c.headers_frame(0, GET));
    b.extend(frame(0x40, &[1; 1000]));
    b.extend(c.headers_frame(0, &[("x", "y")]));
    b.extend(frame(0x1f * 5 + 0x21, b"after the trailers"));
    c.input(0, &b, true);
    let ev = c.events();
    assert!(matches!(ev[..], [Event::Request { .. }, Event::Trailers { .. }]), "{ev:?}");
    assert_eq!(c.closed_with(), None);
}

#[test]
fn truncated_frame_at_the_end_is_a_frame_error() {
    let mut c = Client::new(Config::default());
    let mut b = c.headers_frame(0, GET);
    b.extend(&frame(DATA, b"abcdef")[..4]);
    c.input(0, &b, true);
    assert_eq!(c.closed_with(), Some(Code(0x0106)));

    // Half a frame header.
    let mut c = Client::new(Config::default());
    let mut b = c.headers_frame(0, GET);
    b.push(0x40);
    c.input(0, &b, true);
    assert_eq!(c.closed_with(), Some(Code(0x0106)));
}

#[test]
fn stream_without_headers_is_incomplete() {
    let mut c = Client::new(Config::default());
    c.input(0, &frame(0x21, b"only padding"), true);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010d))]);
    assert_eq!(c.events(), []);
    assert_eq!(c.close, None);
}

#[test]
fn oversized_header_frame_gets_a_431_chance() {
    let cfg = Config { max_field_section_size: 200, ..Config::default() };
    let mut c = Client::new(cfg);
    // Literals only, so the frame is as large as the section.
    c.enc = sluice_qpack::Encoder::new(0, 0);
    let mut fields = GET.to_vec();
    let big = "v".repeat(300);
    fields.push(("x-big", &big));
    let b = c.headers_frame(0, &fields);
    assert!(b.len() > 200);
    c.input(0, &b, false);
    c.input(0, &frame(DATA, b"ignored"), false);
    assert_eq!(c.events(), [Event::HeaderTooLarge { stream: 0 }]);
    c.pump();
    assert_eq!(c.stops, [(0, Code(0x0100))], "H3_NO_ERROR: we do not need the rest (§4.1)");
    assert!(c.resets.is_empty());
    c.conn.send_response(0, 431, vec![], true).unwrap();
    c.pump();
    assert_eq!(c.frames(0)[0].status(), Some("431"));
    assert!(c.finished.contains(&0));
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn oversized_decoded_section_gets_a_431_chance() {
    // The frame is small (Huffman), the decoded section is not: QPACK finds it too large.
    let cfg = Config { max_field_section_size: 250, ..Config::default() };
    let mut c = Client::new(cfg);
    let mut fields = GET.to_vec();
    let big = "a".repeat(300);
    fields.push(("x-big", &big));
    let b = c.headers_frame(0, &fields);
    assert!(b.len() < 250, "frame of {} bytes", b.len());
    c.input(0, &b, true);
    assert_eq!(c.events(), [Event::HeaderTooLarge { stream: 0 }]);
    c.conn.send_response(0, 431, vec![], true).unwrap();
    c.pump();
    assert_eq!(c.frames(0)[0].status(), Some("431"));
    assert_eq!(c.close, None);
}

#[test]
fn oversized_trailers_reset_the_stream() {
    let cfg = Config { max_field_section_size: 200, ..Config::default() };
    let mut c = Client::new(cfg);
    c.request(0, GET, false);
    let big = "v".repeat(300);
    let t = c.headers_frame(0, &[("x-big", &big)]);
    c.input(0, &t, true);
    let ev = c.events();
    assert!(matches!(&ev[1], Event::StreamReset { error, .. } if error.code == Code(0x0107)), "{ev:?}");
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x0107))]);
}

#[test]
fn blocked_header_section_is_delivered_when_the_encoder_stream_arrives() {
    let mut c = Client::new(Config::default());
    // Insert an entry, but hold its encoder-stream instruction back.
    assert!(c.enc.insert(b"x-token", b"abcdefghijklmnop"));
    let held = c.enc.poll_encoder_stream().unwrap();
    let mut fields = GET.to_vec();
    fields[0] = (":method", "POST");
    fields.push(("x-token", "abcdefghijklmnop"));
    let mut block = Vec::new();
    c.enc.encode(0, fields.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
    let mut held = held;
    held.extend(c.enc.poll_encoder_stream().unwrap_or_default());
    let mut b = frame(HEADERS, &block);
    b.extend(frame(DATA, b"body "));
    c.input(0, &b, false);
    c.input(0, &frame(DATA, b"bytes"), true);
    assert_eq!(c.events(), [], "blocked: nothing delivered");
    assert!(!c.conn.wants_read(0), "the driver pauses the stream");
    c.pump();
    assert_eq!(c.close, None);

    c.input(C_ENCODER, &held, false);
    let ev = normalize(c.events());
    let [Event::Request { stream: 0, head, end_stream: false }, Event::Data { stream: 0, data, end_stream: true }] =
        &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(head.get(b"x-token").map(|v| &v[..]), Some(&b"abcdefghijklmnop"[..]));
    assert_eq!(&data[..], b"body bytes");
    assert!(!c.conn.wants_read(0), "request complete");
    // Our decoder stream acknowledges the section (Section Acknowledgment, RFC 9204 §4.4.1).
    c.pump();
    assert_eq!(c.enc.known_received_count(), c.enc.insert_count(), "every insert acknowledged");
    assert!(c.enc.insert_count() >= 1);
}

#[test]
fn blocked_trailers_end_the_request_when_decoded() {
    let mut c = Client::new(Config::default());
    c.request(0, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    c.input(0, &frame(DATA, b"x"), false);
    assert!(c.enc.insert(b"x-sum", b"0123456789"));
    let held = c.enc.poll_encoder_stream().unwrap();
    let mut block = Vec::new();
    c.enc.encode(0, [sluice_qpack::FieldRef::new(b"x-sum", b"0123456789")], &mut block);
    c.input(0, &frame(HEADERS, &block), true);
    let ev = c.events();
    assert_eq!(ev.len(), 2, "request and data only: {ev:?}");
    c.input(C_ENCODER, &held, false);
    assert_eq!(c.events(), [Event::Trailers { stream: 0, fields: vec![Field::new("x-sum", "0123456789")] }]);
    c.conn.send_response(0, 200, vec![], true).unwrap();
    c.pump();
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn too_many_blocked_streams_is_a_qpack_error() {
    let cfg = Config { qpack_blocked_streams: 1, ..Config::default() };
    let mut c = Client::new(cfg);
    c.enc = sluice_qpack::Encoder::new(4096, 16);
    assert!(c.enc.insert(b"x-a", b"1"));
    let _held = c.enc.poll_encoder_stream().unwrap();
    for id in [0, 4] {
        let mut block = Vec::new();
        let fields = [(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("x-a", "1")];
        c.enc.encode(
            id,
            fields.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        c.input(id, &frame(HEADERS, &block), true);
    }
    assert_eq!(c.closed_with(), Some(Code(0x0200)));
}

#[test]
fn held_input_behind_a_blocked_section_is_bounded() {
    let cfg = Config { max_blocked_input: 1000, ..Config::default() };
    let mut c = Client::new(cfg);
    assert!(c.enc.insert(b"x-a", b"1"));
    let _held = c.enc.poll_encoder_stream().unwrap();
    let mut block = Vec::new();
    let fields = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/"), ("x-a", "1")];
    c.enc.encode(0, fields.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
    c.input(0, &frame(HEADERS, &block), false);
    c.input(0, &frame(DATA, &[0; 900]), false);
    c.pump();
    assert!(c.resets.is_empty());
    c.input(0, &frame(DATA, &[0; 200]), false);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x0107))]);
    assert_eq!(c.stops, [(0, Code(0x0107))]);
    assert_eq!(c.events(), [], "never delivered, so no reset event");
    assert_eq!(c.close, None);
}

/// Body pieces are copied into blocks of their stream's own: one allocation per block, not per
/// piece, and never a block shared with another stream (a handler that holds a piece keeps
/// only its own stream's bytes). The bodies arrive whole however the input is cut.
#[test]
fn body_pieces_are_cut_from_blocks_of_their_own_stream() {
    let mut c = Client::new(Config::default());
    let post = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/up")];
    c.request(0, &post, false);
    c.request(4, &post, false);
    let _ = c.events();
    let body_of = |seed: u32| -> Vec<u8> { (0..50_000u32).map(|i| (i.wrapping_mul(seed) % 251) as u8).collect() };
    let (a, b) = (body_of(7), body_of(13));
    // Packet-sized pieces, the two streams interleaved.
    for (pa, pb) in a.chunks(1_200).zip(b.chunks(1_200)) {
        c.input(0, &frame(DATA, pa), false);
        c.input(4, &frame(DATA, pb), false);
    }
    c.input(0, &[], true);
    c.input(4, &[], true);
    let ev = c.events();
    assert_eq!(body(&ev, 0), a);
    assert_eq!(body(&ev, 4), b);
    let pieces = |stream: u64| -> Vec<(usize, usize)> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Data { stream: s, data, .. } if *s == stream && !data.is_empty() => {
                    Some((data.as_ptr() as usize, data.len()))
                }
                _ => None,
            })
            .collect()
    };
    let (pa, pb) = (pieces(0), pieces(4));
    // Within a stream most pieces follow the one before in memory: a new block every 16 KiB.
    let adjacent = |p: &[(usize, usize)]| p.windows(2).filter(|w| w[0].0 + w[0].1 == w[1].0).count();
    assert!(adjacent(&pa) + 1 + 50_000 / 16_384 >= pa.len(), "{} of {} pieces adjacent", adjacent(&pa), pa.len());
    assert!(adjacent(&pb) + 1 + 50_000 / 16_384 >= pb.len(), "{} of {} pieces adjacent", adjacent(&pb), pb.len());
    // Across streams never: no piece of one ends where a piece of the other starts.
    for &(sa, la) in &pa {
        for &(sb, lb) in &pb {
            assert!(sa + la != sb && sb + lb != sa, "streams 0 and 4 share a block");
        }
    }
}

#[test]
fn extended_connect_where_announced() {
    // RFC 9220 §3: announced with SETTINGS_ENABLE_CONNECT_PROTOCOL = 1; then a request with
    // `:protocol` is delivered with it, its stream left open for the tunnel's bytes.
    let mut c = Client::new(Config { enable_connect_protocol: true, ..Config::default() });
    assert!(c.server_settings().contains(&(0x08, 1)), "{:?}", c.server_settings());
    let websocket = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/ws"),
    ];
    c.request(0, &websocket, false);
    match &c.events()[..] {
        [Event::Request { stream: 0, head, .. }] => assert_eq!(head.protocol.as_deref(), Some(&b"websocket"[..])),
        e => panic!("{e:?}"),
    }
    assert!(!Client::new(Config::default()).server_settings().iter().any(|(id, _)| *id == 0x08));
}
