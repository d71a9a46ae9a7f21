//! The glitch budget (`Config::max_glitches_per_window`, RFC 9114 §10.5): each kind of frame or
//! stream that does no useful work closes the connection with H3_EXCESSIVE_LOAD at exactly one
//! past the budget in one window, not when spread over windows; a browser-like page load costs
//! next to nothing.

use std::time::Duration;

use bytes::Bytes;
use sluice_h3::{Code, Config, Event};

use crate::client::*;

/// Budget of the flood tests.
const N: u32 = 10;
const S: Duration = Duration::from_secs(1);
const POST: &[(&str, &str)] = &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")];
/// A reserved frame or stream type, `0x1f * N + 0x21` (RFC 9114 §7.2.8, §6.2.3).
const RESERVED: u64 = 0x1f * 7 + 0x21;

fn cfg() -> Config {
    Config { max_glitches_per_window: N, flood_window: S, ..Config::default() }
}

/// The i-th client unidirectional stream after the control and QPACK streams.
fn uni(i: u64) -> u64 {
    14 + 4 * i
}

struct Flood {
    name: &'static str,
    setup: fn(&mut Client),
    /// The i-th glitch.
    glitch: fn(&mut Client, u64),
}

const FLOODS: &[Flood] = &[
    Flood {
        name: "unknown control frames",
        setup: |c| c.control(&frame(0x2f, b"first")),
        glitch: |c, _| c.control(&frame(0x2f, b"x")),
    },
    Flood {
        name: "reserved control frames",
        setup: |c| c.control(&frame(RESERVED, b"")),
        glitch: |c, _| c.control(&frame(RESERVED, b"")),
    },
    Flood {
        name: "reserved request frames",
        setup: |c| {
            c.request(0, POST, false);
            c.input(0, &frame(RESERVED, b"grease"), false);
        },
        glitch: |c, _| c.input(0, &frame(RESERVED, b"grease"), false),
    },
    Flood {
        name: "empty DATA frames",
        setup: |c| c.request(0, POST, false),
        glitch: |c, _| c.input(0, &frame(DATA, b""), false),
    },
    Flood {
        name: "repeated PRIORITY_UPDATE",
        setup: |c| {
            c.request(0, POST, false);
            c.control(&priority_update(PRIORITY_UPDATE, 0, "u=1"));
        },
        glitch: |c, _| c.control(&priority_update(PRIORITY_UPDATE, 0, "u=2")),
    },
    Flood {
        name: "repeated PRIORITY_UPDATE for a stream not open yet",
        setup: |c| c.control(&priority_update(PRIORITY_UPDATE, 8, "u=1")),
        glitch: |c, _| c.control(&priority_update(PRIORITY_UPDATE, 8, "u=2")),
    },
    Flood {
        name: "PRIORITY_UPDATE for a closed stream",
        setup: |c| {
            c.get(0, "/", &[]);
            c.conn.send_response(0, 204, vec![], true).unwrap();
            c.pump();
            assert_eq!(c.conn.open_streams(), 0);
        },
        glitch: |c, _| c.control(&priority_update(PRIORITY_UPDATE, 0, "u=0")),
    },
    Flood {
        name: "unidirectional streams of reserved type",
        setup: |_| {},
        glitch: |c, i| c.input(uni(i), &varint(RESERVED), false),
    },
    Flood {
        name: "unidirectional streams ended before their type",
        setup: |_| {},
        glitch: |c, i| c.input(uni(i), &[], true),
    },
    Flood {
        name: "unidirectional streams reset before their type",
        setup: |_| {},
        glitch: |c, i| {
            c.input(uni(i), &[0x40], false);
            c.conn.on_stream_reset(c.now, uni(i), 0x010c);
        },
    },
    Flood {
        name: "unidirectional streams beyond the pending limit",
        setup: |c| {
            for i in 0..16 {
                c.input(uni(1000 + i), &[0x40], false);
            }
        },
        glitch: |c, i| c.input(uni(i), &[0x40], false),
    },
    Flood {
        name: "repeated GOAWAY",
        setup: |c| c.control(&frame_varint(GOAWAY, 40)),
        glitch: |c, _| c.control(&frame_varint(GOAWAY, 40)),
    },
    Flood {
        name: "repeated MAX_PUSH_ID",
        setup: |c| c.control(&frame_varint(MAX_PUSH_ID, 0)),
        glitch: |c, i| c.control(&frame_varint(MAX_PUSH_ID, i)),
    },
];

fn glitch_close(c: &mut Client) -> Option<(Code, &'static str)> {
    c.pump();
    c.close
}

#[test]
fn each_flood_closes_at_one_past_the_budget() {
    for f in FLOODS {
        let mut c = Client::new(cfg());
        (f.setup)(&mut c);
        c.pump();
        let _ = c.events();
        for i in 0..u64::from(N) {
            (f.glitch)(&mut c, i);
            assert_eq!(glitch_close(&mut c), None, "{}: glitch {} is within the budget", f.name, i + 1);
        }
        (f.glitch)(&mut c, u64::from(N));
        let (code, reason) = glitch_close(&mut c).unwrap_or_else(|| panic!("{}: not closed", f.name));
        assert_eq!(code, Code::H3_EXCESSIVE_LOAD, "{}", f.name);
        assert!(reason.starts_with("glitch flood"), "{}: {reason}", f.name);
        assert!(
            matches!(c.events().last(), Some(Event::ConnectionError(e)) if e.code == Code::H3_EXCESSIVE_LOAD),
            "{}",
            f.name
        );
        assert!(c.conn.is_done(), "{}", f.name);
    }
}

#[test]
fn the_same_floods_spread_over_windows_are_forgiven() {
    for f in FLOODS {
        let mut c = Client::new(cfg());
        (f.setup)(&mut c);
        for w in 0..3 {
            for i in 0..u64::from(N) {
                (f.glitch)(&mut c, w * 100 + i);
            }
            c.now += S;
        }
        assert_eq!(glitch_close(&mut c), None, "{}", f.name);
    }
}

#[test]
fn default_budget_is_a_thousand_per_ten_seconds() {
    let d = Config::default();
    assert_eq!((d.max_glitches_per_window, d.flood_window), (1000, Duration::from_secs(10)));
    let mut c = Client::new(Config::default());
    c.control(&frame(RESERVED, b"free"));
    for _ in 0..1000 {
        c.control(&frame(RESERVED, b""));
    }
    assert_eq!(glitch_close(&mut c), None);
    c.now += Duration::from_millis(9_999);
    c.control(&frame(RESERVED, b""));
    assert_eq!(glitch_close(&mut c).map(|(code, _)| code), Some(Code::H3_EXCESSIVE_LOAD));
}

#[test]
fn browser_like_page_load_costs_only_its_grease_stream() {
    // A client that greases everything (RFC 9114 §6.2.3, §7.2.8, §9): a reserved frame on its
    // control stream and after each request's HEADERS, a reserved unidirectional stream (the
    // one glitch), a PRIORITY_UPDATE for some requests, the odd cancelled request.
    let mut c = Client::new(Config { max_glitches_per_window: 1, ..Config::default() });
    c.control(&frame(RESERVED, b"grease"));
    c.input(uni(0), &varint(RESERVED), false);
    c.input(uni(0), b"whatever follows", true);
    for i in 0..60u64 {
        let id = 4 * i;
        let prio = if i < 5 { "u=1" } else { "u=4, i" };
        let head = c.headers_frame(
            id,
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "a.example"),
                (":path", "/"),
                ("priority", prio),
            ],
        );
        c.input(id, &[head, frame(RESERVED, b"grease")].concat(), true);
        if (10..20).contains(&i) {
            c.control(&priority_update(PRIORITY_UPDATE, id, "u=2, i"));
        }
        if i == 30 {
            c.conn.on_stop_sending(c.now, id, 0x010c);
            assert!(matches!(c.events()[..], [Event::Request { .. }, Event::StreamReset { .. }]));
            continue;
        }
        assert!(matches!(c.events()[..], [Event::Request { .. }]), "request {i}");
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 20_000]), true).unwrap();
        c.pump();
    }
    assert_eq!(glitch_close(&mut c), None);
    assert_eq!(c.conn.open_streams(), 0, "every response went out");
    // The second glitch would close it.
    c.input(uni(1), &varint(RESERVED), false);
    assert_eq!(glitch_close(&mut c).map(|(code, _)| code), Some(Code::H3_EXCESSIVE_LOAD));
}
