//! Writes the seed corpus, `fuzz/corpus/<target>/seed-*`: a handful of valid inputs per target
//! (requests, responses, uploads, priorities, QPACK with blocked sections, the RFC 7541
//! examples). Structured inputs are read back with `arbitrary` and compared with what was
//! written, so a change in `arbitrary`'s format fails here.
//!
//! Run from `fuzz/`: `cargo run --example seeds` (or `scripts/fuzz.sh --seeds`).

use std::fmt::Debug;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use sluice_fuzz::seed::Seed;
use sluice_fuzz::{h2_client, h2_server, h3_server, hpack, qpack, tls_records, Chunk, Field};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed file");
}

fn structured<T: Seed + for<'a> Arbitrary<'a> + PartialEq + Debug>(target: &str, name: &str, value: &T) {
    let bytes = value.to_seed();
    let back = T::arbitrary_take_rest(Unstructured::new(&bytes)).expect("seed reads back");
    assert_eq!(&back, value, "{target}/{name}: arbitrary reads the seed back differently");
    write(target, name, &bytes);
}

fn fields(list: &[(&str, &str)]) -> Vec<Field> {
    list.iter().map(|(n, v)| Field::new(n, v)).collect()
}

const REQUEST: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "www.example.com"),
    (":path", "/index.html"),
    ("user-agent", "Mozilla/5.0"),
    ("accept", "text/html"),
    ("priority", "u=0, i"),
];

fn hpack_seeds() {
    // RFC 7541 Appendix C.3 (requests without Huffman) and C.4.1 (with), one decoder.
    let c3: [&[u8]; 3] = [
        b"\x82\x86\x84\x41\x0fwww.example.com",
        b"\x82\x86\x84\xbe\x58\x08no-cache",
        b"\x82\x87\x85\xbf\x40\x0acustom-key\x0ccustom-value",
    ];
    let c41: &[u8] =
        &[0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
    let mut raw = vec![64, 255];
    for b in c3 {
        raw.extend_from_slice(&(b.len() as u16).to_le_bytes());
        raw.extend_from_slice(b);
    }
    write("hpack_decode", "rfc7541-c3", &raw);
    let mut raw = vec![64, 255];
    raw.extend_from_slice(&(c41.len() as u16).to_le_bytes());
    raw.extend_from_slice(c41);
    write("hpack_decode", "rfc7541-c4-huffman", &raw);
    // Our encoder: Huffman, indexing, a never-indexed field, a table size change between.
    let mut enc = sluice_hpack::Encoder::new();
    let mut raw = vec![64, 15];
    for round in 0..3 {
        if round == 2 {
            enc.set_max_table_size(256);
            raw.extend_from_slice(&[0xff, 0xff, 4]);
        }
        let mut block = Vec::new();
        let list = REQUEST.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes(), false));
        enc.encode(list.chain([(&b"authorization"[..], &b"secret"[..], true)]), &mut block);
        raw.extend_from_slice(&(block.len() as u16).to_le_bytes());
        raw.extend_from_slice(&block);
    }
    write("hpack_decode", "encoder-table-resize", &raw);

    use hpack::{Op, RoundTrip};
    let mut secret = fields(REQUEST);
    secret.push(Field { name: "cookie".into(), value: "a=b".into(), sensitive: true });
    structured(
        "hpack_roundtrip",
        "request-twice",
        &RoundTrip { ops: vec![Op::Block(fields(REQUEST)), Op::Block(secret)] },
    );
    structured(
        "hpack_roundtrip",
        "table-sizes",
        &RoundTrip {
            ops: vec![
                Op::Block(fields(REQUEST)),
                Op::TableSize(0),
                Op::Block(fields(REQUEST)),
                Op::TableSize(100),
                Op::TableSize(8192),
                Op::Block(fields(&[("x-long", &"v".repeat(300)), ("x-long", &"v".repeat(300))])),
            ],
        },
    );
    structured(
        "hpack_roundtrip",
        "empty-and-binary",
        &RoundTrip {
            ops: vec![
                Op::Block(vec![]),
                Op::Block(vec![Field {
                    name: Chunk(vec![0, 0xff, b'A']),
                    value: Chunk(vec![0x80; 20]),
                    sensitive: false,
                }]),
            ],
        },
    );
}

fn qpack_seeds() {
    use qpack::{DecodeInput, DecodeOp, RoundTrip, RoundTripOp};
    let mut enc = sluice_qpack::Encoder::new(4096, 16);
    let section = |enc: &mut sluice_qpack::Encoder, id: u64, list: &[(&str, &str)]| {
        let mut out = Vec::new();
        enc.encode(id, list.iter().map(|(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut out);
        out
    };
    let s0 = section(&mut enc, 0, REQUEST);
    let ins = enc.poll_encoder_stream().unwrap_or_default();
    let s1 = section(&mut enc, 4, REQUEST);
    structured(
        "qpack_decode",
        "in-order",
        &DecodeInput {
            capacity: 4096,
            blocked: 16,
            max_section: 65_535,
            ops: vec![
                DecodeOp::Encoder(Chunk(ins.clone())),
                DecodeOp::Section { stream: 0, bytes: Chunk(s0.clone()) },
                DecodeOp::Section { stream: 1, bytes: Chunk(s1.clone()) },
            ],
        },
    );
    structured(
        "qpack_decode",
        "blocked-then-unblocked",
        &DecodeInput {
            capacity: 4096,
            blocked: 16,
            max_section: 65_535,
            ops: vec![
                DecodeOp::Section { stream: 0, bytes: Chunk(s0) },
                DecodeOp::Section { stream: 1, bytes: Chunk(s1) },
                DecodeOp::Cancel(1),
                DecodeOp::Encoder(Chunk(ins)),
            ],
        },
    );
    let mut stat = sluice_qpack::Encoder::new(0, 0);
    let s = section(&mut stat, 0, REQUEST);
    structured(
        "qpack_decode",
        "static-only",
        &DecodeInput {
            capacity: 0,
            blocked: 0,
            max_section: 300,
            ops: vec![DecodeOp::Section { stream: 0, bytes: Chunk(s) }],
        },
    );

    structured(
        "qpack_roundtrip",
        "blocked-and-acked",
        &RoundTrip {
            capacity: 4096,
            blocked: 16,
            ops: vec![
                RoundTripOp::Encode { slot: 0, fields: fields(REQUEST) },
                RoundTripOp::Encode { slot: 1, fields: fields(REQUEST) },
                RoundTripOp::DeliverSection(1),
                RoundTripOp::DeliverSection(0),
                RoundTripOp::DeliverEncoder,
                RoundTripOp::DeliverDecoder,
                RoundTripOp::Encode { slot: 0, fields: fields(&[("grpc-status", "0")]) },
            ],
        },
    );
    structured(
        "qpack_roundtrip",
        "insert-cancel-evict",
        &RoundTrip {
            capacity: 200,
            blocked: 1,
            ops: vec![
                RoundTripOp::Insert { name: "x-a".into(), value: "1".into() },
                RoundTripOp::Encode { slot: 2, fields: fields(&[("x-a", "1"), ("x-b", &"2".repeat(60))]) },
                RoundTripOp::Cancel(2),
                RoundTripOp::DeliverDecoder,
                RoundTripOp::Encode { slot: 3, fields: fields(&[("x-c", &"3".repeat(100))]) },
                RoundTripOp::DeliverEncoder,
                RoundTripOp::DeliverSection(3),
                RoundTripOp::DeliverDecoder,
            ],
        },
    );
    structured(
        "qpack_roundtrip",
        "static-only",
        &RoundTrip {
            capacity: 0,
            blocked: 0,
            ops: vec![RoundTripOp::Encode { slot: 0, fields: fields(REQUEST) }, RoundTripOp::DeliverSection(0)],
        },
    );
}

fn h2_server_seeds() {
    use h2_server::{Action as A, Input};
    let settings = vec![(0x1, 65_536), (0x2, 0), (0x4, 6_291_456), (0x6, 262_144)];
    let get = A::Request { stream: 1, method: 0, path: "/".into(), fields: fields(&[("priority", "u=1")]), end: true };
    // A POST to /up on stream 1 announcing `length` body bytes, the body to follow.
    let upload = |length: &str| A::Request {
        stream: 1,
        method: 1,
        path: "/up".into(),
        fields: fields(&[("content-length", length)]),
        end: false,
    };
    structured(
        "h2_server",
        "get",
        &Input {
            knobs: 0,
            settings: settings.clone(),
            actions: vec![
                A::Frame { kind: 0x8, flags: 0, stream: 0, payload: Chunk(15_663_105u32.to_be_bytes().to_vec()) },
                A::Frame { kind: 0x4, flags: 1, stream: 0, payload: Chunk(vec![]) },
                get.clone(),
                A::Respond { pick: 0, status: 200, end: false },
                A::Data { pick: 0, len: 5000, end: true },
                A::Transmit(64),
            ],
        },
    );
    structured(
        "h2_server",
        "upload-release-trailers",
        &Input {
            knobs: 8,
            settings: vec![],
            actions: vec![
                upload("150"),
                A::Frame { kind: 0x0, flags: 0, stream: 1, payload: Chunk(vec![1; 100]) },
                A::Release { pick: 0, n: 100 },
                A::Frame { kind: 0x0, flags: 0x8, stream: 1, payload: Chunk([&[3u8][..], &[2; 50], &[0; 3]].concat()) },
                A::Respond { pick: 0, status: 100, end: false },
                A::Respond { pick: 0, status: 200, end: false },
                A::Data { pick: 0, len: 10, end: false },
                A::Trailers(0),
                A::Transmit(1),
                A::Frame { kind: 0x1, flags: 0x5, stream: 1, payload: Chunk(vec![0x40, 1, b'x', 1, b'y']) },
                A::Transmit(1),
            ],
        },
    );
    let mut pu = 3u32.to_be_bytes().to_vec();
    pu.extend_from_slice(b"u=0");
    structured(
        "h2_server",
        "priorities-and-control",
        &Input {
            knobs: 4,
            settings: vec![(0x9, 1)],
            actions: vec![
                A::Frame { kind: 0x10, flags: 0, stream: 0, payload: Chunk(pu) },
                A::Frame { kind: 0x2, flags: 0, stream: 3, payload: Chunk(vec![0, 0, 0, 0, 200]) },
                get.clone(),
                A::Request { stream: 3, method: 0, path: "/a.css".into(), fields: vec![], end: true },
                A::Frame { kind: 0x6, flags: 0, stream: 0, payload: Chunk(vec![1; 8]) },
                A::Frame { kind: 0x4, flags: 0, stream: 0, payload: Chunk(vec![0, 4, 0, 0, 0, 0]) },
                A::Respond { pick: 1, status: 200, end: false },
                A::Data { pick: 1, len: 100, end: true },
                A::Transmit(4),
                A::Frame { kind: 0x8, flags: 0, stream: 3, payload: Chunk(1000u32.to_be_bytes().to_vec()) },
                A::Priority { pick: 0, value: "u=7".into() },
                A::Frame { kind: 0xfa, flags: 0, stream: 0, payload: "grease".into() },
                A::Transmit(4),
            ],
        },
    );
    structured(
        "h2_server",
        "resets-continuation-goaway",
        &Input {
            knobs: 3,
            settings: vec![(0x5, 20_000)],
            actions: vec![
                A::Request {
                    stream: 1,
                    method: 0,
                    path: Chunk(vec![b'/'; 20_000]),
                    fields: fields(&[("cookie", "a")]),
                    end: false,
                },
                A::Frame { kind: 0x3, flags: 0, stream: 1, payload: Chunk(vec![0, 0, 0, 8]) },
                A::Request { stream: 5, method: 2, path: "/x".into(), fields: vec![], end: true },
                A::Reset(0),
                A::GoAway,
                A::Request { stream: 7, method: 3, path: "/".into(), fields: vec![], end: false },
                A::Frame { kind: 0x7, flags: 0, stream: 0, payload: Chunk(vec![0; 8]) },
                A::Transmit(0),
                A::Eof,
            ],
        },
    );
    // A 20,000-byte DATA frame cut where a read buffer ends: its first part is handed on
    // when the driver moves to a new buffer, the rest comes after the header carried over.
    let mut cut = vec![0, 0x4e, 0x20, 0, 1, 0, 0, 0, 1];
    cut.extend_from_slice(&[5; 12_000]);
    structured(
        "h2_server",
        "cut-data-frame",
        &Input {
            knobs: 0,
            settings: vec![],
            actions: vec![
                upload("20000"),
                A::Input(Chunk(cut)),
                A::NewBuffer,
                A::Input(Chunk(vec![6; 8_000])),
                A::Release { pick: 0, n: 20_000 },
                A::Transmit(1),
            ],
        },
    );
    structured(
        "h2_server",
        "timers",
        &Input {
            knobs: 16,
            settings: vec![],
            actions: vec![
                A::Rtt(40),
                A::Input(Chunk(vec![0, 0, 5, 1, 0, 0, 0, 0, 9])),
                A::Advance(1100),
                A::Timeout,
                A::Transmit(1),
                A::Timeout,
            ],
        },
    );
}

fn h2_client_seeds() {
    use h2_client::{Action as A, Input};
    let settings = A::Frame { kind: 0x4, flags: 0, stream: 0, payload: Chunk(vec![0, 3, 0, 0, 0, 100]) };
    let ack = A::Frame { kind: 0x4, flags: 1, stream: 0, payload: Chunk(vec![]) };
    structured(
        "h2_client",
        "get",
        &Input {
            actions: vec![
                settings.clone(),
                ack.clone(),
                A::Request { body: false, fields: fields(&[("accept", "*/*")]) },
                A::Transmit,
                A::Response { stream: 1, status: 200, fields: fields(&[("content-length", "3")]), end: false },
                A::Frame { kind: 0x0, flags: 1, stream: 1, payload: "abc".into() },
                A::Transmit,
            ],
        },
    );
    structured(
        "h2_client",
        "upload-interim-trailers",
        &Input {
            actions: vec![
                settings.clone(),
                A::Request { body: true, fields: vec![] },
                A::Data { pick: 0, len: 65_000, end: false },
                A::Data { pick: 0, len: 5_000, end: false },
                A::Trailers(0),
                A::Transmit,
                A::Frame { kind: 0x8, flags: 0, stream: 0, payload: Chunk(100_000u32.to_be_bytes().to_vec()) },
                A::Frame { kind: 0x8, flags: 0, stream: 1, payload: Chunk(100_000u32.to_be_bytes().to_vec()) },
                A::Transmit,
                A::Response { stream: 1, status: 103, fields: fields(&[("link", "</a.css>")]), end: false },
                A::Response { stream: 1, status: 200, fields: vec![], end: false },
                // Trailers: a literal without indexing, new name (RFC 7541 §6.2.2).
                A::Frame { kind: 0x1, flags: 0x5, stream: 1, payload: Chunk(b"\x00\x0bgrpc-status\x010".to_vec()) },
                ack,
            ],
        },
    );
    let mut origin = vec![0, 19];
    origin.extend_from_slice(b"https://example.com");
    structured(
        "h2_client",
        "origin-goaway-reset-timeout",
        &Input {
            actions: vec![
                settings,
                A::Frame { kind: 0xc, flags: 0, stream: 0, payload: Chunk(origin) },
                A::Request { body: false, fields: vec![] },
                A::Request { body: true, fields: vec![] },
                A::Frame { kind: 0x3, flags: 0, stream: 1, payload: Chunk(vec![0, 0, 0, 7]) },
                A::Cancel(1),
                A::Frame { kind: 0x6, flags: 0, stream: 0, payload: Chunk(vec![9; 8]) },
                A::Frame { kind: 0x7, flags: 0, stream: 0, payload: Chunk(vec![0, 0, 0, 1, 0, 0, 0, 0]) },
                A::Advance(1100),
                A::Timeout,
                A::Transmit,
            ],
        },
    );
}

fn h3_seeds() {
    use h3_server::{Input, Op};
    let get = Op::Request { n: 0, method: 0, fields: fields(&[("priority", "u=2")]), fin: true };
    structured(
        "h3_server",
        "get",
        &Input {
            preamble: true,
            knobs: 0,
            ops: vec![
                get.clone(),
                Op::Respond { pick: 0, status: 200, end: false },
                Op::Body { pick: 0, len: 40_000, end: true },
                Op::Transmit(20),
            ],
        },
    );
    structured(
        "h3_server",
        "upload-blocked-stop",
        &Input {
            preamble: true,
            knobs: 2,
            ops: vec![
                Op::Request { n: 1, method: 1, fields: fields(&[("content-length", "4")]), fin: false },
                Op::Frame { stream: 4, ty: 0, payload: "ab".into(), fin: false },
                Op::Frame { stream: 4, ty: 0, payload: "cd".into(), fin: true },
                Op::Respond { pick: 0, status: 103, end: false },
                Op::Respond { pick: 0, status: 200, end: false },
                Op::Blocked { pick: 0, blocked: true },
                Op::Body { pick: 0, len: 100, end: false },
                Op::Transmit(10),
                Op::Blocked { pick: 0, blocked: false },
                Op::Trailers(0),
                Op::StopSending { stream: 4, code: 0x10c },
                Op::Transmit(10),
            ],
        },
    );
    let mut pu = vec![0x00];
    pu.extend_from_slice(b"u=0");
    structured(
        "h3_server",
        "control-frames",
        &Input {
            preamble: true,
            knobs: 20,
            ops: vec![
                Op::Frame { stream: 2, ty: 0xf0700, payload: Chunk(pu), fin: false },
                Op::Frame { stream: 2, ty: 0x21, payload: "grease".into(), fin: false },
                Op::Frame { stream: 2, ty: 0x0d, payload: Chunk(vec![0]), fin: false },
                Op::Data { stream: 14, bytes: Chunk(vec![0x40, 0x21, 1, 2, 3]), fin: true },
                get,
                Op::Frame { stream: 2, ty: 0x07, payload: Chunk(vec![4]), fin: false },
                Op::GoAway,
                Op::Transmit(20),
            ],
        },
    );
    // No preamble: the client's streams arrive as raw bytes, in pieces.
    structured(
        "h3_server",
        "raw-streams-reset-timeout",
        &Input {
            preamble: false,
            knobs: 1,
            ops: vec![
                Op::Data { stream: 2, bytes: Chunk(vec![0x00, 0x04]), fin: false },
                Op::Data { stream: 2, bytes: Chunk(vec![0x02, 0x06, 0x10]), fin: false },
                Op::Data { stream: 6, bytes: Chunk(vec![0x02]), fin: false },
                Op::Opened(8),
                Op::Data { stream: 8, bytes: Chunk(vec![0x01, 0x02]), fin: false },
                Op::Reset { stream: 12, code: 0x10c },
                Op::Advance(1100),
                Op::Timeout,
                Op::Transmit(10),
            ],
        },
    );
}

fn priority_seeds() {
    for (name, bytes) in [
        ("urgent-incremental", &b"\x03\x03u=0, i"[..]),
        ("parameters-and-unknown", b"\x08\x05u=2;a=b, i=?0, foo=bar"),
        ("out-of-range", b"\x00\x00u=9, i=1, u=x"),
        ("weights", b"\x05\x01\x00\xff"),
    ] {
        write("priority_field", name, bytes);
    }
}

fn proxy_fields_seeds() {
    for (name, bytes) in [
        (
            "connection-named-te-cookies",
            &b"\x03connection: close, x-a\nx-a: 1\nte: gzip, trailers\ncookie: a=1\ncookie: b=2\nx-forwarded-for: 6.6.6.6\n"[..],
        ),
        (
            "trusted-forwarded-hop-by-hop",
            b"\x14forwarded: for=1.2.3.4\nvia: 1.1 edge\nkeep-alive: timeout=5\nupgrade: websocket\ntransfer-encoding: chunked\n",
        ),
        ("connection-te-upgrade", b"\x08Connection: TE, Upgrade\nTE: trailers\nhost: x\n"),
        // The client names fields the proxy sets for the next hop: its values go, the proxy's
        // stay (a smoke run found the harness asserting the opposite).
        (
            "connection-names-forwarding-fields",
            b"\x19Connection: x-forwarded-host, x-forwarded-for, forwarded, via, x-forwarded-proto\nx-forwarded-host: evil\nx-forwarded-for: 6.6.6.6\nvia: 1.1 evil\nforwarded: for=6.6.6.6\nx-forwarded-proto: gopher\n",
        ),
    ] {
        write("proxy_fields", name, bytes);
    }
}

fn h1_response_seeds() {
    for (name, bytes) in [
        ("origin", &b"\xffHTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sun, 29 Nov 2026 21:00:00 GMT\r\nContent-Type: text/html\r\nContent-Length: 14\r\nConnection: keep-alive\r\n\r\nhello, world!\n"[..]),
        ("bare-lf-no-reason", &b"\xff\r\nHTTP/1.0 304\nETag: \"x\"\nX-Empty:\n\n"[..]),
        ("obs-fold-and-tabs", &b"\xffHTTP/1.1 103 Early\tHints\r\nLink: </a>; rel=preload\r\n\tfolded\r\n\r\n"[..]),
        ("over-the-limit", &b"\x04HTTP/1.1 200 OK\r\nX-Long: 0123456789abcdef0123456789abcdef\r\n\r\n"[..]),
    ] {
        write("h1_response", name, bytes);
    }
}

fn tls_records_seeds() {
    use tls_records::{Input, Op};
    let big: Chunk = vec![7u8; 40_000].as_slice().into();
    let seeds = [
        // Data both ways in whole deliveries and in pieces, then close_notify.
        (
            "data-both-ways",
            Input {
                suite: 0,
                ops: vec![
                    Op::ClientData("GET / HTTP/1.1\r\n\r\n".into()),
                    Op::Deliver(7),
                    Op::Deliver(0),
                    Op::ServerData("HTTP/1.1 200 OK\r\n\r\n".into()),
                    Op::ClientData(big.clone()),
                    Op::Deliver(1000),
                    Op::Deliver(0),
                    Op::ClientClose,
                    Op::Deliver(0),
                ],
            },
        ),
        // Key updates each way between data, on ChaCha20-Poly1305.
        (
            "key-updates",
            Input {
                suite: 2,
                ops: vec![
                    Op::ClientData("a".into()),
                    Op::ClientKeyUpdate,
                    Op::ClientData("b".into()),
                    Op::Deliver(0),
                    Op::ServerKeyUpdate,
                    Op::ServerData("c".into()),
                    Op::ClientKeyUpdate,
                    Op::ClientKeyUpdate,
                    Op::Deliver(3),
                    Op::Deliver(0),
                    Op::ServerData("d".into()),
                ],
            },
        ),
        // A flipped bit in a record, then more data.
        (
            "flipped-bit",
            Input {
                suite: 1,
                ops: vec![
                    Op::ClientData("hello".into()),
                    Op::Flip(9, 3),
                    Op::ClientData("more".into()),
                    Op::Deliver(0),
                ],
            },
        ),
        // A truncated record, an oversized header, an alert-looking raw record.
        (
            "truncated-oversized-raw",
            Input {
                suite: 0,
                ops: vec![
                    Op::ClientData(big),
                    Op::Truncate(100),
                    Op::Deliver(0),
                    Op::Oversize(5),
                    Op::Raw((&[21u8, 3, 3, 0, 2, 2, 40][..]).into()),
                    Op::Deliver(0),
                ],
            },
        ),
    ];
    for (name, input) in &seeds {
        structured("tls_records", name, input);
    }
}

fn main() {
    tls_records_seeds();
    h1_response_seeds();
    proxy_fields_seeds();
    hpack_seeds();
    qpack_seeds();
    h2_server_seeds();
    h2_client_seeds();
    h3_seeds();
    priority_seeds();
    println!("seed corpus written under {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
