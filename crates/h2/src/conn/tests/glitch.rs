//! The glitch budget (`Config::max_glitches_per_window`): each kind of frame that does no
//! useful work closes the connection with ENHANCE_YOUR_CALM at exactly one past the budget in
//! one window, not when spread over windows; browser-like page loads cost next to nothing.

use super::*;

/// Budget of the flood tests.
const N: u32 = 10;
const S: Duration = Duration::from_secs(1);

fn cfg() -> Config {
    Config { max_glitches_per_window: N, flood_window: S, ..Config::default() }
}

/// The connection error the engine reported, if any: code and detail.
fn failure(c: &mut Client) -> Option<(Reason, &'static str)> {
    c.events().into_iter().find_map(|e| match e {
        Event::ConnectionError(Error::Connection { reason, detail, .. }) => Some((reason, detail)),
        _ => None,
    })
}

fn priority_frame(dependency: u32, weight: u8) -> Vec<u8> {
    let mut p = dependency.to_be_bytes().to_vec();
    p.push(weight - 1);
    p
}

/// A stream opened and closed (bodiless request, bodiless response).
fn closed_stream(c: &mut Client) {
    c.request(1, "/", true);
    c.conn.send_response(1, 204, vec![], true).unwrap();
}

struct Flood {
    name: &'static str,
    /// What comes first: a stream to act on, and the frames that are free once.
    setup: fn(&mut Client),
    /// One glitch.
    glitch: fn(&mut Client),
}

const FLOODS: &[Flood] = &[
    Flood { name: "empty DATA", setup: |c| c.request(1, "/", false), glitch: |c| c.send(kind::DATA, 0, 1, &[]) },
    Flood {
        name: "padding-only DATA",
        setup: |c| c.request(1, "/", false),
        glitch: |c| c.send(kind::DATA, flag::PADDED, 1, &[2, 0, 0]),
    },
    Flood {
        name: "connection WINDOW_UPDATE",
        setup: |c| c.send(kind::WINDOW_UPDATE, 0, 0, &1000u32.to_be_bytes()),
        glitch: |c| c.send(kind::WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
    },
    Flood {
        name: "stream WINDOW_UPDATE",
        setup: |c| {
            c.request(1, "/", false);
            c.send(kind::WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes());
        },
        glitch: |c| c.send(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
    },
    Flood {
        name: "WINDOW_UPDATE for a closed stream",
        setup: |c| {
            closed_stream(c);
            let _ = c.output();
            // The stream's free update outlives it.
            c.send(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes());
        },
        glitch: |c| c.send(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
    },
    Flood {
        name: "PRIORITY for an idle stream",
        setup: |_| {},
        glitch: |c| c.send(kind::PRIORITY, 0, 3, &priority_frame(0, 16)),
    },
    Flood {
        name: "repeated PRIORITY",
        setup: |c| {
            c.request(1, "/", false);
            c.send(kind::PRIORITY, 0, 1, &priority_frame(0, 200));
        },
        glitch: |c| c.send(kind::PRIORITY, 0, 1, &priority_frame(0, 16)),
    },
    Flood {
        name: "repeated PRIORITY_UPDATE",
        setup: |c| {
            c.request(1, "/", false);
            c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(1, "u=1"));
        },
        glitch: |c| c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(1, "u=2")),
    },
    Flood {
        name: "repeated PRIORITY_UPDATE for an idle stream",
        setup: |c| c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(5, "u=1")),
        glitch: |c| c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(5, "u=2")),
    },
    Flood {
        name: "PRIORITY_UPDATE for a closed stream",
        setup: |c| {
            closed_stream(c);
            let _ = c.output();
        },
        glitch: |c| c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(1, "u=0")),
    },
    Flood { name: "unknown frame type on stream 0", setup: |_| {}, glitch: |c| c.send(0xfa, 0, 0, b"grease") },
    Flood {
        name: "unknown frame type on a stream",
        setup: |c| {
            c.request(1, "/", false);
            c.send(0xfa, 0, 1, b"grease");
        },
        glitch: |c| c.send(0xfa, 0, 1, b"grease"),
    },
    Flood { name: "empty SETTINGS", setup: |_| {}, glitch: |c| c.send(kind::SETTINGS, 0, 0, &[]) },
    Flood {
        name: "SETTINGS repeating its values",
        setup: |c| c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0x10, 0]),
        glitch: |c| c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0x10, 0]),
    },
    Flood { name: "SETTINGS ACK for nothing", setup: |_| {}, glitch: |c| c.send(kind::SETTINGS, flag::ACK, 0, &[]) },
    Flood {
        name: "empty CONTINUATION",
        setup: |c| {
            let b = c.block(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
            c.send(kind::HEADERS, 0, 1, &b[..1]);
        },
        glitch: |c| c.send(kind::CONTINUATION, 0, 1, &[]),
    },
    Flood {
        name: "RST_STREAM for a closed stream",
        setup: |c| {
            closed_stream(c);
            let _ = c.output();
        },
        glitch: |c| c.send(kind::RST_STREAM, 0, 1, &Reason::CANCEL.0.to_be_bytes()),
    },
    Flood { name: "PING ACK for no PING", setup: |_| {}, glitch: |c| c.send(kind::PING, flag::ACK, 0, &[0; 8]) },
    Flood {
        name: "repeated GOAWAY",
        setup: |c| c.send(kind::GOAWAY, 0, 0, &[0; 8]),
        glitch: |c| c.send(kind::GOAWAY, 0, 0, &[0; 8]),
    },
];

#[test]
fn each_flood_closes_at_one_past_the_budget() {
    for f in FLOODS {
        let mut c = Client::new(cfg());
        (f.setup)(&mut c);
        let _ = c.output();
        let _ = c.events();
        for i in 0..N {
            (f.glitch)(&mut c);
            let out = c.output();
            assert_eq!(goaway_reason(&out), None, "{}: glitch {} is within the budget: {out:?}", f.name, i + 1);
            assert_eq!(failure(&mut c), None, "{}", f.name);
        }
        (f.glitch)(&mut c);
        let out = c.output();
        let last = c.conn.max_client_stream;
        assert_eq!(out.last(), Some(&F::GoAway(last, Reason::ENHANCE_YOUR_CALM)), "{}: {out:?}", f.name);
        let (reason, detail) = failure(&mut c).unwrap_or_else(|| panic!("{}: no connection error", f.name));
        assert_eq!(reason, Reason::ENHANCE_YOUR_CALM, "{}", f.name);
        assert!(detail.starts_with("glitch flood"), "{}: {detail}", f.name);
        assert!(c.conn.is_done(), "{}", f.name);
    }
}

#[test]
fn the_same_floods_spread_over_windows_are_forgiven() {
    for f in FLOODS {
        let mut c = Client::new(cfg());
        (f.setup)(&mut c);
        for _ in 0..3 {
            for _ in 0..N {
                (f.glitch)(&mut c);
            }
            c.now += S;
        }
        let out = c.output();
        assert_eq!(goaway_reason(&out), None, "{}: {out:?}", f.name);
        assert_eq!(failure(&mut c), None, "{}", f.name);
    }
}

#[test]
fn default_budget_is_a_thousand_per_ten_seconds() {
    let d = Config::default();
    assert_eq!((d.max_glitches_per_window, d.flood_window), (1000, Duration::from_secs(10)));
    let mut c = Client::new(Config::default());
    for _ in 0..1000 {
        c.send(0xfa, 0, 0, b"");
    }
    assert_eq!(goaway_reason(&c.output()), None);
    c.now += Duration::from_millis(9_999);
    c.send(0xfa, 0, 0, b"");
    assert_eq!(goaway_reason(&c.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn window_updates_that_free_blocked_data_are_never_glitches() {
    // The peer opens the stream window a byte at a time while data waits: each update frees
    // data, so none counts, even with no budget at all.
    let mut c = Client::new(Config { max_glitches_per_window: 0, ..Config::default() });
    c.send(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]);
    c.request(1, "/", true);
    c.conn.send_response(1, 200, vec![], false).unwrap();
    c.conn.send_data(1, Bytes::from(vec![0u8; 50]), true).unwrap();
    let _ = c.output();
    for _ in 0..49 {
        c.send(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes());
        assert_eq!(c.output(), vec![F::Data(1, 1, false)]);
    }
    c.send(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes());
    assert_eq!(c.output(), vec![F::Data(1, 1, true)]);
    assert_eq!(failure(&mut c), None);
}

/// A client's first flight: preface, SETTINGS with `settings` (id, value), and a connection
/// WINDOW_UPDATE, as browsers send it.
fn browser(cfg: Config, settings: &[(u16, u32)], conn_window: u32) -> Client {
    let now = Instant::now();
    let mut c = Client {
        conn: Connection::new(cfg, Box::<FixedWindows>::default(), now),
        enc: hpack::Encoder::new(),
        dec: hpack::Decoder::new(4096),
        now,
    };
    let mut p = Vec::new();
    for &(id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    let mut b = PREFACE.to_vec();
    frame(&mut b, kind::SETTINGS, 0, 0, &p);
    frame(&mut b, kind::WINDOW_UPDATE, 0, 0, &conn_window.to_be_bytes());
    c.input(&b);
    let out = c.output();
    assert_eq!((out.first(), out.last()), (Some(&F::Settings(false)), Some(&F::Settings(true))));
    c.send(kind::SETTINGS, flag::ACK, 0, &[]);
    c
}

/// A GET on `id` (HEADERS `flags` and payload `prefix`: RFC 7540 priority fields), answered
/// with 100 kB.
fn get(c: &mut Client, id: u32, priority: Option<&str>, flags: u8, prefix: &[u8]) {
    let mut fields = vec![(":method", "GET"), (":scheme", "https"), (":authority", "x"), (":path", "/")];
    fields.extend(priority.map(|p| ("priority", p)));
    let b = [prefix, &c.block(&fields)].concat();
    c.send(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM | flags, id, &b);
    let _ = c.events();
    c.conn.send_response(id, 200, vec![], false).unwrap();
    c.conn.send_data(id, Bytes::from(vec![0u8; 100_000]), true).unwrap();
}

#[test]
fn chromium_like_page_load_costs_no_glitch() {
    // Budget 0: the first glitch would close the connection.
    let cfg = Config { max_glitches_per_window: 0, ..Config::default() };
    let settings = [(0x1, 65_536), (0x2, 0), (0x4, 6_291_456), (0x6, 262_144)];
    let mut c = browser(cfg, &settings, 15_663_105);
    get(&mut c, 1, Some("u=0, i"), 0, &[]);
    // A GREASE frame on the request stream, a PING to check liveness.
    c.send(0x0b + 0x1f * 3, 0, 1, b"grease");
    c.send(kind::PING, 0, 0, &[1; 8]);
    let mut consumed = 0usize;
    for i in 0..40u32 {
        let id = 3 + 2 * i;
        let prio = if i < 5 { "u=1" } else { "u=4, i" };
        get(&mut c, id, Some(prio), 0, &[]);
    }
    for round in 0..400 {
        // Images scrolled into view become more urgent: one update each.
        if round == 2 {
            for id in (13..30).step_by(2) {
                c.send(kind::PRIORITY_UPDATE, 0, 0, &priority_update(id, "u=2, i"));
            }
        }
        if round == 3 {
            // One image is no longer needed.
            c.send(kind::RST_STREAM, 0, 81, &Reason::CANCEL.0.to_be_bytes());
        }
        let out = c.output_max(64 * 1024);
        if out.is_empty() {
            break;
        }
        // Chromium acknowledges the connection window when half of it is consumed.
        consumed += out.iter().map(|f| if let F::Data(_, n, _) = f { *n } else { 0 }).sum::<usize>();
        if consumed >= 15_663_105 / 2 {
            c.send(kind::WINDOW_UPDATE, 0, 0, &(consumed as u32).to_be_bytes());
            consumed = 0;
        }
    }
    assert_eq!(failure(&mut c), None);
    assert_eq!(c.conn.open_streams(), 0, "every response went out");
}

#[test]
fn firefox_like_page_load_costs_only_its_priority_tree() {
    // Firefox's five PRIORITY frames for idle "group" streams are glitches (we keep no RFC 7540
    // tree); nothing else is, with a receiver that acknowledges every DATA frame it reads on
    // both windows, updates racing the streams' ends.
    let cfg = Config { max_glitches_per_window: 5, ..Config::default() };
    let settings = [(0x1, 65_536), (0x4, 131_072), (0x5, 16_384)];
    let mut c = browser(cfg, &settings, 12_517_377);
    for (id, dep, weight) in [(3, 0, 201), (5, 0, 101), (7, 0, 1), (9, 7, 1), (11, 3, 1)] {
        c.send(kind::PRIORITY, 0, id, &priority_frame(dep, weight));
    }
    for i in 0..40u32 {
        let id = 13 + 2 * i;
        // HEADERS with the PRIORITY flag: depends on group stream 3 or 5.
        let mut prefix = (if i < 5 { 3u32 } else { 5 }).to_be_bytes().to_vec();
        prefix.push(if i < 5 { 31 } else { 21 });
        get(&mut c, id, None, flag::PRIORITY, &prefix);
    }
    for _ in 0..400 {
        let out = c.output_max(32 * 1024);
        if out.is_empty() {
            break;
        }
        for f in out {
            if let F::Data(id, n @ 1.., _) = f {
                // Sent for every frame read, ended stream or not: the end raced the update.
                c.send(kind::WINDOW_UPDATE, 0, id, &(n as u32).to_be_bytes());
                c.send(kind::WINDOW_UPDATE, 0, 0, &(n as u32).to_be_bytes());
            }
        }
    }
    assert_eq!(failure(&mut c), None);
    assert_eq!(c.conn.open_streams(), 0, "every response went out");
    // The sixth glitch would close it.
    c.send(kind::PRIORITY, 0, 999, &priority_frame(0, 1));
    assert_eq!(failure(&mut c).map(|(r, _)| r), Some(Reason::ENHANCE_YOUR_CALM));
}
