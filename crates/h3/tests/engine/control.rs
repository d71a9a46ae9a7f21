//! Our control stream and the client's: SETTINGS exchange, ORIGIN, control frames and their
//! errors (RFC 9114 §6.2.1, §7.2), unidirectional stream types (§6.2, RFC 9204 §4.2).

use bytes::Bytes;
use sluice_h3::{Code, Config, Event, Field, SendError, Transmit};

use crate::client::*;

/// A client whose control stream is open with an empty SETTINGS.
fn with_settings() -> Client {
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(settings(&[]));
    c.input(C_CONTROL, &b, false);
    c
}

fn closes_with(c: &mut Client, code: Code) {
    assert_eq!(c.closed_with(), Some(code), "log: {:?}", c.log);
    let events = c.events();
    assert!(
        matches!(events.last(), Some(Event::ConnectionError(e)) if e.code == code && e.is_connection_error()),
        "{events:?}"
    );
    assert!(c.conn.is_done(), "done once the close is out");
    assert_eq!(c.conn.poll_transmit(), None, "nothing after the close");
}

#[test]
fn control_stream_prefix_and_settings_exact_bytes() {
    let mut c = Client::bare(Config::default());
    let out = c.pump();
    // Stream type 0x00, then SETTINGS (type 0x04, length 14):
    //   QPACK_MAX_TABLE_CAPACITY (0x01) = 4096 (0x50 0x00)
    //   MAX_FIELD_SECTION_SIZE (0x06) = 65536 (0x80 0x01 0x00 0x00)
    //   QPACK_BLOCKED_STREAMS (0x07) = 16
    //   reserved 0x1f * 42 + 0x21 = 0x537 (0x45 0x37) = 0x5c (0x40 0x5c)
    let control =
        [0x00, 0x04, 0x0e, 0x01, 0x50, 0x00, 0x06, 0x80, 0x01, 0x00, 0x00, 0x07, 0x10, 0x45, 0x37, 0x40, 0x5c];
    assert_eq!(
        out,
        [
            Transmit::Write {
                stream: S_CONTROL,
                data: Bytes::copy_from_slice(&control),
                body: Bytes::new(),
                fin: false
            },
            Transmit::Write { stream: S_ENCODER, data: Bytes::from_static(&[0x02]), body: Bytes::new(), fin: false },
            Transmit::Write { stream: S_DECODER, data: Bytes::from_static(&[0x03]), body: Bytes::new(), fin: false },
        ]
    );
    assert!(!c.conn.wants_write());
    assert!(!c.conn.is_done());
    let id = 0x537u64;
    assert_eq!((id - 0x21) % 0x1f, 0, "the extra setting is a reserved one");
}

#[test]
fn settings_follow_config_without_grease() {
    let cfg = Config {
        qpack_max_table_capacity: 0,
        qpack_blocked_streams: 0,
        max_field_section_size: 100,
        grease: false,
        ..Config::default()
    };
    let mut c = Client::bare(cfg);
    c.pump();
    assert_eq!(c.written[&S_CONTROL], [0x00, 0x04, 0x07, 0x01, 0x00, 0x06, 0x40, 0x64, 0x07, 0x00]);
}

#[test]
fn origin_frame_right_after_settings() {
    let cfg = Config {
        origins: Some(vec!["https://a.example".into(), "https://b.example:8443".into()]),
        ..Config::default()
    };
    let mut c = Client::bare(cfg);
    c.pump();
    let frames = c.control_frames();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].0, SETTINGS);
    let mut payload = vec![0x00, 17];
    payload.extend_from_slice(b"https://a.example");
    payload.extend_from_slice(&[0x00, 22]);
    payload.extend_from_slice(b"https://b.example:8443");
    assert_eq!(frames[1], (ORIGIN, payload.clone()));
    // Exact bytes: type 0x0c, length 43, entries.
    let all = &c.written[&S_CONTROL];
    let mut tail = vec![0x0c, 43];
    tail.extend(payload);
    assert!(all.ends_with(&tail));

    let mut empty = Client::bare(Config { origins: Some(vec![]), ..Config::default() });
    empty.pump();
    assert_eq!(empty.control_frames()[1], (ORIGIN, vec![]));
}

#[test]
fn peer_settings_enable_dynamic_table_and_encoder_stream_goes_first() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    let _ = c.events();
    let fields = vec![Field::new("x-custom", "a fairly long value worth indexing"), Field::new("server", "sluice")];
    c.conn.send_response(0, 200, fields, true).unwrap();
    let out = c.pump();
    let pos = |s: u64| out.iter().position(|t| matches!(t, Transmit::Write { stream, .. } if *stream == s));
    let enc = pos(S_ENCODER).expect("the response inserted entries");
    let head = pos(0).expect("response written");
    assert!(enc < head, "encoder instructions before the HEADERS that use them: {out:?}");
    let f = c.frames(0);
    assert_eq!(f[0].status(), Some("200"));
    assert!(matches!(&f[0], F::Headers(h) if h.iter().any(|(n, v)| n == "server" && v == "sluice")));
    assert!(c.finished.contains(&0));
    // The client acknowledged the section; the server's encoder took the decoder stream.
    c.pump();
    assert_eq!(c.close, None);
}

#[test]
fn peer_max_field_section_size_limits_responses() {
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(settings(&[(0x06, 100)]));
    c.input(C_CONTROL, &b, false);
    c.get(0, "/", &[]);
    let big = vec![Field::new("x-big", "v".repeat(80))];
    assert_eq!(c.conn.send_response(0, 200, big, true), Err(SendError::FieldSectionTooLarge));
    assert_eq!(c.conn.send_response(0, 200, vec![], true), Ok(()));
}

#[test]
fn first_control_frame_must_be_settings() {
    for first in [frame_varint(GOAWAY, 0), frame(0x21, b"grease"), frame(MAX_PUSH_ID, &[0])] {
        let mut c = Client::bare(Config::default());
        let mut b = varint(0x00);
        b.extend(first);
        c.input(C_CONTROL, &b, false);
        closes_with(&mut c, Code(0x010a));
    }
}

#[test]
fn second_control_stream_is_a_creation_error() {
    let mut c = with_settings();
    c.input(14, &[0x00], false);
    closes_with(&mut c, Code(0x0103));
}

#[test]
fn closing_or_resetting_critical_streams() {
    let mut c = with_settings();
    c.input(C_CONTROL, &[], true);
    closes_with(&mut c, Code(0x0104));

    let mut c = with_settings();
    c.conn.on_stream_reset(c.now, C_CONTROL, 0x100);
    closes_with(&mut c, Code(0x0104));

    for (id, ty) in [(C_ENCODER, 0x02), (C_DECODER, 0x03)] {
        let mut c = with_settings();
        c.input(id, &[ty], false);
        c.input(id, &[], true);
        closes_with(&mut c, Code(0x0104));
        let mut c = with_settings();
        c.input(id, &[ty], false);
        c.conn.on_stream_reset(c.now, id, 0x100);
        closes_with(&mut c, Code(0x0104));
    }

    for ours in [S_CONTROL, S_ENCODER, S_DECODER] {
        let mut c = with_settings();
        c.conn.on_stop_sending(c.now, ours, 0x100);
        closes_with(&mut c, Code(0x0104));
    }
}

#[test]
fn request_frames_on_the_control_stream() {
    for f in [frame(DATA, b"x"), frame(HEADERS, &[0, 0]), frame(PUSH_PROMISE, &[0, 0, 0])] {
        let mut c = with_settings();
        c.control(&f);
        closes_with(&mut c, Code(0x0105));
    }
}

#[test]
fn second_settings_is_unexpected() {
    let mut c = with_settings();
    c.control(&settings(&[]));
    closes_with(&mut c, Code(0x0105));
}

#[test]
fn http2_settings_are_settings_errors() {
    for id in 0x02..=0x05 {
        let mut c = Client::bare(Config::default());
        let mut b = varint(0x00);
        b.extend(settings(&[(0x06, 1000), (id, 1)]));
        c.input(C_CONTROL, &b, false);
        closes_with(&mut c, Code(0x0109));
    }
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(settings(&[(0x06, 1000), (0x06, 1000)]));
    c.input(C_CONTROL, &b, false);
    closes_with(&mut c, Code(0x0109));
}

/// A SETTINGS frame of 64 KiB less one byte (our `max_frame_payload` is 64 KiB): 13,107
/// distinct unknown ids from 0x4000 (four-byte varints, reserved ones among them, none known)
/// with one-byte values.
fn huge_settings(duplicate_at_end: bool) -> Vec<u8> {
    let mut values: Vec<(u64, u64)> = (0..13_107).map(|i| (0x4000 + i, 1)).collect();
    if duplicate_at_end {
        let last = values.len() - 1;
        values[last] = values[0];
    }
    let f = settings(&values);
    assert_eq!(f.len() - 1 - 4, 65_535, "type, four-byte length, payload");
    f
}

#[test]
fn a_64_kib_settings_frame_of_distinct_ids_is_accepted() {
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(huge_settings(false));
    c.input(C_CONTROL, &b, false);
    assert_eq!(c.closed_with(), None);
    c.get(0, "/", &[]);
    assert!(matches!(c.events()[..], [Event::Request { stream: 0, .. }]));
}

#[test]
fn a_64_kib_settings_frame_with_a_duplicate_at_the_very_end_is_a_settings_error() {
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(huge_settings(true));
    c.input(C_CONTROL, &b, false);
    closes_with(&mut c, Code(0x0109));
}

#[test]
fn unknown_settings_are_ignored() {
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(settings(&[(0x21, 7), (0x1f * 9 + 0x21, 1 << 40), (0x00, 3), (0x33, 1), (0x08, 1)]));
    c.input(C_CONTROL, &b, false);
    c.get(0, "/", &[]);
    assert!(matches!(c.events()[..], [Event::Request { stream: 0, .. }]));
    assert_eq!(c.closed_with(), None);
}

#[test]
fn http2_frame_types_are_unexpected() {
    for ty in [0x02, 0x06, 0x08, 0x09] {
        let mut c = with_settings();
        c.control(&frame(ty, &[0; 4]));
        closes_with(&mut c, Code(0x0105));

        let mut c = Client::new(Config::default());
        let mut b =
            c.headers_frame(0, &[(":method", "GET"), (":scheme", "https"), (":path", "/"), (":authority", "a")]);
        b.extend(frame(ty, &[0; 4]));
        c.input(0, &b, false);
        closes_with(&mut c, Code(0x0105));
    }
}

#[test]
fn unknown_and_reserved_frames_are_ignored() {
    let mut c = with_settings();
    for ty in [0x21, 0x1f * 1000 + 0x21, 0x0c, 0x2f, 0x1234_5678] {
        c.control(&frame(ty, &vec![0xab; 300]));
    }
    assert_eq!(c.closed_with(), None);
}

#[test]
fn client_goaway_is_reported_and_may_not_increase() {
    let mut c = with_settings();
    c.control(&frame_varint(GOAWAY, 10));
    c.control(&frame_varint(GOAWAY, 10));
    c.control(&frame_varint(GOAWAY, 4));
    assert_eq!(
        c.events(),
        [Event::GoAway { push_id: 10 }, Event::GoAway { push_id: 10 }, Event::GoAway { push_id: 4 }]
    );
    assert_eq!(c.closed_with(), None);
    c.control(&frame_varint(GOAWAY, 5));
    closes_with(&mut c, Code(0x0108));
}

#[test]
fn max_push_id_accepted_but_may_not_decrease() {
    let mut c = with_settings();
    c.control(&frame_varint(MAX_PUSH_ID, 3));
    c.control(&frame_varint(MAX_PUSH_ID, 8));
    assert_eq!(c.closed_with(), None);
    c.control(&frame_varint(MAX_PUSH_ID, 7));
    closes_with(&mut c, Code(0x0108));
}

#[test]
fn cancel_push_for_a_push_never_promised() {
    // RFC 9114 §7.2.3: a server receiving CANCEL_PUSH for a push id no PUSH_PROMISE mentioned
    // MUST treat it as H3_ID_ERROR; this server never promises.
    let mut c = with_settings();
    c.control(&frame_varint(MAX_PUSH_ID, 8));
    c.control(&frame_varint(CANCEL_PUSH, 0));
    closes_with(&mut c, Code(0x0108));
}

#[test]
fn malformed_control_frames() {
    // One-varint frames with extra bytes or a cut varint: H3_FRAME_ERROR (§7.1).
    for f in [frame(GOAWAY, &[0x01, 0x00]), frame(GOAWAY, &[0x40]), frame(MAX_PUSH_ID, &[]), frame(GOAWAY, &[0; 9])] {
        let mut c = with_settings();
        c.control(&f);
        closes_with(&mut c, Code(0x0106));
    }
    let mut c = Client::bare(Config::default());
    let mut b = varint(0x00);
    b.extend(frame(SETTINGS, &[0x06]));
    c.input(C_CONTROL, &b, false);
    closes_with(&mut c, Code(0x0106));
}

#[test]
fn oversized_control_frames_are_excessive_load() {
    let cfg = Config { max_frame_payload: 64, ..Config::default() };
    let mut c = Client::bare(cfg.clone());
    let mut b = varint(0x00);
    b.extend(settings(&(0x100..0x120).map(|i| (i * 0x1f + 0x21, 1)).collect::<Vec<_>>()));
    c.input(C_CONTROL, &b, false);
    closes_with(&mut c, Code(0x0107));

    let mut c = Client::bare(cfg);
    let mut b = varint(0x00);
    b.extend(settings(&[]));
    c.input(C_CONTROL, &b, false);
    c.control(&priority_update(PRIORITY_UPDATE, 0, &format!("u=1, {}", "x".repeat(80))));
    closes_with(&mut c, Code(0x0107));
}

#[test]
fn priority_update_id_errors_and_placement() {
    let mut c = with_settings();
    c.control(&priority_update(PRIORITY_UPDATE_PUSH, 0, "u=1"));
    closes_with(&mut c, Code(0x0108));

    for not_request in [2, 3, 1] {
        let mut c = with_settings();
        c.control(&priority_update(PRIORITY_UPDATE, not_request, "u=1"));
        closes_with(&mut c, Code(0x0108));
    }

    let mut c = Client::new(Config::default());
    let mut b = c.headers_frame(0, &[(":method", "GET"), (":scheme", "https"), (":path", "/"), (":authority", "a")]);
    b.extend(priority_update(PRIORITY_UPDATE, 0, "u=1"));
    c.input(0, &b, false);
    closes_with(&mut c, Code(0x0105));
}

#[test]
fn client_push_stream_is_a_creation_error() {
    let mut c = with_settings();
    c.input(14, &[0x01, 0x00], false);
    closes_with(&mut c, Code(0x0103));
}

#[test]
fn duplicate_qpack_streams_are_creation_errors() {
    for ty in [0x02, 0x03] {
        let mut c = with_settings();
        c.input(C_ENCODER, &[ty], false);
        c.input(14, &[ty], false);
        closes_with(&mut c, Code(0x0103));
    }
}

#[test]
fn unknown_uni_stream_types_are_stopped_and_ignored() {
    let mut c = with_settings();
    // A reserved type (0x1f * 2 + 0x21 = 0x5f, two-byte varint) and an unknown one, with data.
    c.input(14, &[0x40, 0x5f, 1, 2, 3], false);
    c.input(18, &[0x54], false);
    c.input(18, b"more data the server never reads", true);
    c.input(14, &[9, 9], false);
    c.pump();
    assert_eq!(c.stops, [(14, Code(0x0103)), (18, Code(0x0103))]);
    assert_eq!(c.close, None);
    // A stream closed before its type arrived is tolerated (§6.2).
    c.input(22, &[0x40], true);
    c.conn.on_stream_reset(c.now, 26, 0);
    assert_eq!(c.closed_with(), None);
}

#[test]
fn pending_uni_streams_are_bounded() {
    let mut c = Client::bare(Config { max_pending_uni_streams: 2, ..Config::default() });
    // Half a stream type on each: they stay pending.
    for id in [6, 10, 14] {
        c.input(id, &[0x40], false);
    }
    c.pump();
    assert_eq!(c.stops, [(14, Code(0x0103))]);
    // The pending ones still open normally.
    c.input(6, &[0x02], false);
    c.input(10, &[0x03], false);
    assert_eq!(c.closed_with(), None);
}

#[test]
fn invalid_qpack_streams_close_with_qpack_codes() {
    let mut c = with_settings();
    // Set Dynamic Table Capacity to 1 MiB, above our 4096.
    c.input(C_ENCODER, &[0x02, 0x3f, 0xe1, 0xff, 0x3f], false);
    closes_with(&mut c, Code(0x0201));

    let mut c = with_settings();
    // Insert Count Increment of zero.
    c.input(C_DECODER, &[0x03, 0x00], false);
    closes_with(&mut c, Code(0x0202));
}

#[test]
fn h3_datagram_needs_both_sides_and_a_boolean() {
    // RFC 9297 §2.1.1: announced by SETTINGS_H3_DATAGRAM = 1; usable once the peer's says so
    // too; any value other than 0 or 1 is H3_SETTINGS_ERROR.
    let open = |ours: bool, theirs: Option<u64>| {
        let mut c = Client::bare(Config { h3_datagram: ours, ..Config::default() });
        let mut control = varint(0x00);
        let mut s = vec![(0x01, 0)];
        s.extend(theirs.map(|v| (0x33, v)));
        control.extend(settings(&s));
        c.input(C_CONTROL, &control, false);
        c.pump();
        c
    };
    let c = open(true, Some(1));
    assert!(c.server_settings().contains(&(0x33, 1)));
    assert!(c.conn.datagrams() && c.close.is_none());
    assert!(!open(true, None).conn.datagrams());
    assert!(!open(true, Some(0)).conn.datagrams());
    let c = open(false, Some(1));
    assert!(!c.conn.datagrams() && !c.server_settings().iter().any(|(id, _)| *id == 0x33));
    assert_eq!(open(true, Some(2)).close.map(|c| c.0), Some(Code::H3_SETTINGS_ERROR));
}
