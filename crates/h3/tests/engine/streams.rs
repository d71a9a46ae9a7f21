//! Stream lifecycle: input split at every byte, resets and STOP_SENDING both ways, send
//! backpressure, GOAWAY.

use bytes::Bytes;
use sluice_h3::{Code, Config, Event, Field, SendError, Transmit};

use crate::client::*;

const GET: &[(&str, &str)] = &[(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/")];

/// A client session as (stream, bytes, fin) pieces, in the order a driver would see them:
/// control stream with SETTINGS and a PRIORITY_UPDATE, QPACK streams with dynamic inserts, a
/// POST with body and trailers, a GET, and unknown frames and streams.
fn session() -> (Vec<(u64, Vec<u8>, bool)>, sluice_qpack::Encoder) {
    let mut c = Client::new(Config::default());
    c.enc = sluice_qpack::Encoder::new(4096, 16);
    let mut pieces = Vec::new();
    let mut control = varint(0x00);
    control.extend(settings(&[(0x01, 4096), (0x07, 16), (0x21, 1)]));
    control.extend(priority_update(PRIORITY_UPDATE, 4, "u=1, i"));
    control.extend(frame(0x21, b"grease"));
    pieces.push((C_CONTROL, control, false));
    pieces.push((C_DECODER, vec![0x03], false));

    let post = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/upload"),
        ("x-request-id", "0123456789abcdef"),
        ("content-length", "300"),
    ];
    let mut block = Vec::new();
    c.enc.encode(0, post.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
    let mut encoder = vec![0x02];
    encoder.extend(c.enc.poll_encoder_stream().expect("inserts"));
    let mut req0 = frame(HEADERS, &block);
    req0.extend(frame(DATA, &[1; 100]));
    req0.extend(frame(0x40, &[9; 70]));
    req0.extend(frame(DATA, &[2; 200]));
    let mut trailer = Vec::new();
    c.enc.encode(0, [sluice_qpack::FieldRef::new(b"x-sum", b"77")], &mut trailer);
    req0.extend(frame(HEADERS, &trailer));

    let mut block4 = Vec::new();
    let get = [(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/x")];
    c.enc.encode(4, get.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block4);
    if let Some(more) = c.enc.poll_encoder_stream() {
        encoder.extend(more);
    }
    // The request stream arrives before the encoder stream: its section blocks first.
    pieces.push((0, req0, true));
    pieces.push((C_ENCODER, encoder, false));
    pieces.push((4, frame(HEADERS, &block4), true));
    pieces.push((14, vec![0x40, 0x5f, 1, 2, 3], true));
    (pieces, c.enc)
}

#[test]
fn byte_by_byte_input_equals_whole_input() {
    let (pieces, mut enc_whole) = session();
    let (_, mut enc_split) = session();
    let mut whole = Client::bare(Config::default());
    for (id, b, fin) in &pieces {
        whole.input(*id, b, *fin);
    }
    let mut split = Client::bare(Config::default());
    for (id, b, fin) in &pieces {
        for (i, byte) in b.iter().enumerate() {
            split.input(*id, &[*byte], *fin && i == b.len() - 1);
        }
    }
    let ev = normalize(whole.events());
    assert_eq!(normalize(split.events()), ev);
    assert!(matches!(ev[0], Event::Request { stream: 0, end_stream: false, .. }), "{ev:?}");
    assert_eq!(body(&ev, 0).len(), 300);
    assert!(ev.contains(&Event::Trailers { stream: 0, fields: vec![Field::new("x-sum", "77")] }));
    assert!(ev.iter().any(|e| matches!(e, Event::Request { stream: 4, end_stream: true, .. })));
    assert_eq!(whole.conn.priority(4).map(|p| (p.urgency, p.incremental)), Some((1, true)));
    assert_eq!(split.conn.priority(4), whole.conn.priority(4));

    // Same output. Only the decoder stream may differ in form: fed a byte at a time, the
    // encoder stream's inserts are acknowledged as they come (Insert Count Increment), fed
    // whole, by the Section Acknowledgment; both leave the client's encoder in the same state.
    let (out, acks) = drain(&mut whole.conn);
    let (out_split, acks_split) = drain(&mut split.conn);
    assert_eq!(out_split, out);
    assert!(out.iter().all(|t| !matches!(t, Transmit::Close { .. })), "{out:?}");
    assert!(out.contains(&Transmit::StopSending { stream: 14, code: Code(0x0103) }));
    assert_eq!(acks[0], 0x03, "decoder stream type");
    enc_whole.on_decoder_stream(&acks[1..]).unwrap();
    enc_split.on_decoder_stream(&acks_split[1..]).unwrap();
    assert_eq!(enc_whole.known_received_count(), enc_whole.insert_count());
    assert_eq!(enc_split.known_received_count(), enc_split.insert_count());
    assert_eq!(enc_whole.unacknowledged_sections(), 0);
    assert_eq!(enc_split.unacknowledged_sections(), 0);
}

/// Everything the connection hands out, and the decoder-stream bytes separately.
fn drain(conn: &mut sluice_h3::Connection) -> (Vec<Transmit>, Vec<u8>) {
    let mut out = Vec::new();
    let mut acks = Vec::new();
    while let Some(t) = conn.poll_transmit() {
        match t {
            Transmit::Write { stream: S_DECODER, data, .. } => acks.extend_from_slice(&data),
            t => out.push(t),
        }
    }
    (out, acks)
}

#[test]
fn input_split_at_every_position() {
    // Two pieces, split at each byte of the request stream.
    let mut c0 = Client::new(Config::default());
    // Static table and literals only: the other connections never see c0's encoder stream.
    c0.enc = sluice_qpack::Encoder::new(0, 0);
    let mut b = c0.headers_frame(0, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")]);
    b.extend(frame(DATA, &[5; 70]));
    b.extend(frame(0x1f * 300 + 0x21, &[0; 3]));
    b.extend(frame(DATA, b"tail"));
    for cut in 0..=b.len() {
        let mut c = Client::new(Config::default());
        c.input(0, &b[..cut], false);
        c.input(0, &b[cut..], true);
        let ev = normalize(c.events());
        assert_eq!(ev.len(), 2, "cut {cut}: {ev:?}");
        assert_eq!(body(&ev, 0).len(), 74, "cut {cut}");
        assert!(matches!(ev[1], Event::Data { end_stream: true, .. }));
        assert_eq!(c.closed_with(), None);
    }
}

#[test]
fn client_reset_of_an_incomplete_request() {
    let mut c = Client::new(Config::default());
    c.request(0, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    let _ = c.events();
    c.conn.on_stream_reset(c.now, 0, 0x010c);
    let ev = c.events();
    assert!(
        matches!(&ev[..], [Event::StreamReset { stream: 0, error }] if error.code == Code(0x010c) && !error.is_connection_error()),
        "{ev:?}"
    );
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010c))], "the response is cancelled too");
    assert!(c.stops.is_empty());
    assert_eq!(c.conn.open_streams(), 0);
    // Late data for the stream is ignored.
    c.input(0, &frame(DATA, b"late"), true);
    assert_eq!(c.events(), []);
    assert_eq!(c.closed_with(), None);
}

#[test]
fn client_reset_after_a_complete_request_keeps_the_response() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    c.conn.on_stream_reset(c.now, 0, 0x0100);
    assert!(matches!(c.events()[..], [Event::Request { .. }]));
    c.conn.send_response(0, 200, vec![], true).unwrap();
    c.pump();
    assert!(c.finished.contains(&0));
}

#[test]
fn client_reset_before_any_data() {
    let mut c = Client::new(Config::default());
    c.conn.on_stream_reset(c.now, 8, 0x010c);
    c.pump();
    assert_eq!(c.resets, [(8, Code(0x010b))], "nothing processed: rejected");
    c.input(8, &frame(DATA, b"x"), false);
    assert_eq!(c.closed_with(), None, "the stream is gone, its data ignored");
}

#[test]
fn stop_sending_resets_with_the_same_code() {
    let mut c = Client::new(Config::default());
    c.request(0, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    c.conn.send_response(0, 200, vec![], false).unwrap();
    c.conn.send_data(0, Bytes::from(vec![0; 100_000]), false).unwrap();
    c.conn.on_stop_sending(c.now, 0, 0x010c);
    let ev = c.events();
    assert!(matches!(&ev[1], Event::StreamReset { stream: 0, error } if error.code == Code(0x010c)), "{ev:?}");
    let out = c.pump();
    assert_eq!(c.resets, [(0, Code(0x010c))]);
    assert_eq!(c.stops, [(0, Code(0x010c))], "the request body is not needed either");
    assert!(!out.iter().any(|t| matches!(t, Transmit::Write { stream: 0, .. })), "queued data is dropped");
    assert_eq!(c.conn.send_data(0, Bytes::from_static(b"x"), false), Err(SendError::UnknownStream));
}

#[test]
fn local_reset_and_stop_reading() {
    let mut c = Client::new(Config::default());
    c.request(0, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    c.conn.reset(0, Code::H3_REQUEST_CANCELLED);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010c))]);
    assert_eq!(c.stops, [(0, Code(0x010c))]);
    assert!(matches!(c.events()[..], [Event::Request { .. }]), "no reset event for our own reset");

    // Answer early and stop reading the body (§4.1).
    c.request(4, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    c.conn.stop_reading(4);
    c.input(4, &frame(DATA, b"ignored"), false);
    assert!(matches!(c.events()[..], [Event::Request { stream: 4, .. }]));
    c.conn.send_response(4, 413, vec![], true).unwrap();
    c.pump();
    assert_eq!(c.stops.last(), Some(&(4, Code(0x0100))));
    assert!(c.finished.contains(&4));
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn send_buffer_is_bounded_and_drains() {
    let cfg = Config { max_buffered_per_stream: 40_000, ..Config::default() };
    let mut c = Client::new(cfg);
    c.get(0, "/", &[]);
    c.conn.send_response(0, 200, vec![], false).unwrap();
    assert_eq!(c.conn.send_capacity(0), Some(40_000));
    c.conn.send_data(0, Bytes::from(vec![0; 30_000]), false).unwrap();
    c.conn.send_data(0, Bytes::from(vec![0; 30_000]), false).unwrap();
    assert_eq!(c.conn.buffered(0), Some(60_000));
    assert_eq!(c.conn.send_capacity(0), Some(0));
    assert_eq!(c.conn.send_data(0, Bytes::from(vec![0; 10]), false), Err(SendError::Full));
    let mut seen = Vec::new();
    c.conn.drain_sent(|id, n| seen.push((id, n)));
    assert_eq!(seen, []);
    // Head plus one write of body: the stream is alone, so its frame spans both chunks and
    // the write carries the frame's header and the first chunk.
    let mut data_writes = 0;
    while data_writes < 1 {
        if let Some(Transmit::Write { stream: 0, data, body, .. }) = c.conn.poll_transmit() {
            data_writes += usize::from(data.first() == Some(&DATA.try_into().unwrap()) && !body.is_empty());
        }
    }
    c.conn.drain_sent(|id, n| seen.push((id, n)));
    assert_eq!(seen, [(0, 30_000)]);
    assert_eq!(c.conn.buffered(0), Some(30_000));
    assert!(c.conn.send_capacity(0).unwrap() > 0);
    c.conn.send_data(0, Bytes::from(vec![0; 10]), true).unwrap();
}

#[test]
fn go_away_rejects_later_requests() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    c.get(4, "/", &[]);
    let _ = c.events();
    c.conn.go_away();
    c.conn.go_away();
    c.pump();
    let goaways: Vec<_> = c.control_frames().into_iter().filter(|f| f.0 == GOAWAY).collect();
    assert_eq!(goaways, [(GOAWAY, vec![8])], "one GOAWAY naming the first stream not processed");
    assert!(!c.conn.is_done(), "two requests in progress");

    c.get(8, "/", &[]);
    c.get(12, "/", &[]);
    assert_eq!(c.events(), []);
    c.pump();
    assert_eq!(c.resets, [(8, Code(0x010b)), (12, Code(0x010b))]);
    assert_eq!(c.stops, [(8, Code(0x010b)), (12, Code(0x010b))]);

    for id in [0, 4] {
        c.conn.send_response(id, 200, vec![], true).unwrap();
    }
    assert!(!c.conn.is_done(), "responses not handed out yet");
    c.pump();
    assert!(c.conn.is_done());
    assert_eq!(c.close, None, "the driver closes with H3_NO_ERROR");
}

#[test]
fn announced_go_away_serves_requests_in_flight_until_the_real_one() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    let _ = c.events();
    c.conn.go_away_announce();
    c.pump();
    // 2^62 - 4 as a varint (8 bytes, prefix 0b11).
    let announced = vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc];
    assert_eq!(c.control_frames().into_iter().filter(|f| f.0 == GOAWAY).collect::<Vec<_>>(), [(GOAWAY, announced)]);
    c.get(4, "/", &[]);
    assert_eq!(c.events().len(), 1, "a request sent before the announcement arrived is served");
    c.conn.go_away();
    c.pump();
    assert!(c.control_frames().contains(&(GOAWAY, vec![8])));
    c.get(8, "/", &[]);
    c.pump();
    assert_eq!(c.resets, [(8, Code(0x010b))]);
}

#[test]
fn go_away_before_any_request_names_stream_zero() {
    let mut c = Client::new(Config::default());
    c.conn.go_away();
    c.pump();
    assert!(c.control_frames().contains(&(GOAWAY, vec![0])));
    assert!(c.conn.is_done());
    c.get(0, "/", &[]);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010b))]);
}

#[test]
fn concurrent_streams_are_bounded() {
    let mut c = Client::new(Config { max_concurrent_streams: 2, ..Config::default() });
    for id in [0, 4, 8] {
        c.request(id, GET, false);
    }
    c.pump();
    assert_eq!(c.resets, [(8, Code(0x010b))]);
    assert_eq!(c.conn.open_streams(), 2);
}

#[test]
fn connection_error_resets_known_streams() {
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[]);
    c.request(4, &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")], false);
    let _ = c.events();
    c.control(&settings(&[]));
    let ev = c.events();
    assert!(
        matches!(
            &ev[..],
            [Event::StreamReset { stream: 0, .. }, Event::StreamReset { stream: 4, .. }, Event::ConnectionError(_)]
        ),
        "{ev:?}"
    );
    assert_eq!(c.conn.send_response(0, 200, vec![], true), Err(SendError::UnknownStream));
    assert_eq!(c.closed_with(), Some(Code(0x0105)));
}

#[test]
fn data_payloads_are_the_handlers_bytes_not_copies() {
    // Stream 0 takes turns with stream 4 (both incremental, one urgency), so its frames are
    // one quantum each; alone, one frame spans both chunks (up to sixteen quanta), each chunk
    // handed on in a write of its own.
    for shared in [true, false] {
        let mut c = Client::new(Config::default());
        c.get(0, "/", &[("priority", "u=3, i")]);
        c.conn.send_response(0, 200, vec![], false).unwrap();
        if shared {
            c.get(4, "/", &[("priority", "u=3, i")]);
            c.conn.send_response(4, 200, vec![], false).unwrap();
            c.conn.send_data(4, Bytes::from(vec![7u8; 100_000]), true).unwrap();
        }
        // One 40,000-byte chunk, then 20,000 bytes more.
        let first: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
        let second: Vec<u8> = (0..20_000u32).map(|i| (i % 249) as u8).collect();
        let (one, two) = (Bytes::from(first.clone()), Bytes::from(second.clone()));
        let range = |b: &Bytes| b.as_ptr() as usize..b.as_ptr() as usize + b.len();
        let (r1, r2) = (range(&one), range(&two));
        c.conn.send_data(0, one, false).unwrap();
        c.conn.send_data(0, two, true).unwrap();
        let out = c.pump();
        // Each DATA frame's payload length and which chunk it is a slice of (0: copied).
        let bodies: Vec<(usize, u8)> = out
            .iter()
            .filter_map(|t| match t {
                Transmit::Write { stream: 0, data, body, .. }
                    if data.first() == Some(&DATA.try_into().unwrap()) || (data.is_empty() && !body.is_empty()) =>
                {
                    let at = body.as_ptr() as usize;
                    let from = if body.is_empty() {
                        0
                    } else {
                        [(1, &r1), (2, &r2)].iter().find(|(_, r)| r.contains(&at)).map_or(9, |w| w.0)
                    };
                    Some((body.len(), from))
                }
                _ => None,
            })
            .collect();
        if shared {
            // Two whole quanta handed on as slices of the first chunk; the frame that spans
            // both chunks is copied (its payload is in `data`); the last is the second chunk's.
            assert_eq!(bodies[..2], [(16_384, 1), (16_384, 1)], "{bodies:?}");
            assert_eq!(bodies[2], (0, 0), "{bodies:?}");
            assert_eq!(bodies[3].1, 2, "{bodies:?}");
        } else {
            assert_eq!(bodies, [(40_000, 1), (20_000, 2)], "each chunk whole, as it came");
        }
        // And the stream carries the frames and the bytes in order.
        let frames = split_frames(&c.written[&0]);
        let sizes: Vec<usize> = frames.iter().filter(|(t, _)| *t == DATA).map(|(_, p)| p.len()).collect();
        if !shared {
            assert_eq!(sizes, [60_000], "one frame of both chunks");
        }
        let payload: Vec<u8> = frames.iter().filter(|(t, _)| *t == DATA).flat_map(|(_, p)| p.clone()).collect();
        assert_eq!(payload, [first, second].concat());
        assert!(c.finished.contains(&0));
    }
}
