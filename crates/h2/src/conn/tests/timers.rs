//! The connection's timers in virtual time: the preface timer, the SETTINGS-ack timer and the
//! idle timeout, for peers that are silent, idle after their preface, or active.

use super::*;

const S: Duration = Duration::from_secs(1);

/// A connection whose peer has sent nothing yet; our first flight (SETTINGS) is written at
/// `now`, as a driver does at once.
fn raw(cfg: Config) -> Client {
    let now = Instant::now();
    let mut c = Client {
        conn: Connection::new(cfg, Box::<FixedWindows>::default(), now),
        enc: hpack::Encoder::new(),
        dec: hpack::Decoder::new(4096),
        now,
    };
    assert_eq!(c.output().first(), Some(&F::Settings(false)));
    c
}

/// The preface and an empty SETTINGS.
fn preface() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    frame(&mut b, kind::SETTINGS, 0, 0, &[]);
    b
}

/// The connection error the engine reported last: its code, who caused it, its detail.
fn failure(c: &mut Client) -> Option<(Reason, Initiator, &'static str)> {
    c.events().into_iter().rev().find_map(|e| match e {
        Event::ConnectionError(Error::Connection { reason, initiator, detail }) => Some((reason, initiator, detail)),
        _ => None,
    })
}

fn idle_close() -> Option<(Reason, Initiator, &'static str)> {
    Some((Reason::NO_ERROR, Initiator::Local, "idle timeout"))
}

#[test]
fn acknowledged_connection_meets_the_idle_timeout() {
    let cfg = Config { idle_timeout: 5 * S, ..Config::default() };
    let mut c = Client::new(cfg);
    let t = c.conn.poll_timeout().unwrap();
    assert_eq!(t, c.now + 5 * S);
    c.conn.handle_timeout(t);
    assert_eq!(c.output(), vec![F::GoAway(0, Reason::NO_ERROR)]);
    assert_eq!(failure(&mut c), idle_close());
}

#[test]
fn peer_that_sends_nothing_is_idle_and_closed_at_the_idle_timeout() {
    // A browser's spare connection: TLS done, then not a byte (Chromium preconnects).
    let mut c = raw(Config::default());
    let t0 = c.now;
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 60 * S), "only the idle timer runs");
    for t in [10, 11, 30, 59] {
        c.conn.handle_timeout(t0 + t * S);
        assert_eq!(c.output(), vec![], "at {t} s: no SETTINGS_TIMEOUT, no preface timeout");
    }
    c.conn.handle_timeout(t0 + 60 * S);
    assert_eq!(c.output(), vec![F::GoAway(0, Reason::NO_ERROR)]);
    assert_eq!(failure(&mut c), idle_close());
    assert!(c.conn.is_done());
}

#[test]
fn preface_timer_runs_from_the_first_byte() {
    let mut c = raw(Config::default());
    let t0 = c.now;
    c.now = t0 + 30 * S;
    c.input(&PREFACE[..5]);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 40 * S), "header timeout from the first byte");
    c.conn.handle_timeout(t0 + 40 * S - Duration::from_nanos(1));
    assert_eq!(c.output(), vec![]);
    c.conn.handle_timeout(t0 + 40 * S);
    assert_eq!(c.output(), vec![F::GoAway(0, Reason::PROTOCOL_ERROR)]);
    assert_eq!(failure(&mut c), Some((Reason::PROTOCOL_ERROR, Initiator::Remote, "request header timeout")));
}

#[test]
fn peer_silent_after_its_preface_is_idle_until_it_uses_the_connection() {
    // Chromium's and Firefox's first flight: preface, SETTINGS, a connection WINDOW_UPDATE;
    // then nothing, and our SETTINGS not acknowledged (nothing read yet).
    let mut c = raw(Config::default());
    let t0 = c.now;
    c.now = t0 + S;
    let mut b = preface();
    frame(&mut b, kind::WINDOW_UPDATE, 0, 0, &15_663_105u32.to_be_bytes());
    c.input(&b);
    assert_eq!(c.output(), vec![F::Settings(true)]);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 11 * S), "the ACK timer runs from its preface");
    c.conn.handle_timeout(t0 + 11 * S);
    assert_eq!(c.output(), vec![], "silent since its preface: idle, not in error");
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 61 * S), "the idle timer is left");
    // At 30 s it sends a request, still without acknowledging: the ACK timer starts again.
    c.now = t0 + 30 * S;
    c.request(1, "/", true);
    assert!(matches!(c.events()[..], [Event::Request { stream: 1, .. }]));
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 40 * S));
    c.conn.handle_timeout(t0 + 40 * S - Duration::from_nanos(1));
    assert_eq!(c.output(), vec![]);
    c.conn.handle_timeout(t0 + 40 * S);
    assert_eq!(c.output(), vec![F::GoAway(1, Reason::SETTINGS_TIMEOUT)]);
    assert_eq!(
        failure(&mut c),
        Some((Reason::SETTINGS_TIMEOUT, Initiator::Remote, "SETTINGS not acknowledged in time"))
    );
}

#[test]
fn idle_after_preface_ends_at_the_idle_timeout() {
    let mut c = raw(Config::default());
    let t0 = c.now;
    c.input(&preface());
    let _ = c.output();
    c.conn.handle_timeout(t0 + 10 * S);
    assert_eq!(c.output(), vec![]);
    c.conn.handle_timeout(t0 + 60 * S);
    assert_eq!(c.output(), vec![F::GoAway(0, Reason::NO_ERROR)]);
    assert_eq!(failure(&mut c), idle_close());
}

#[test]
fn active_peer_that_never_acknowledges_gets_settings_timeout() {
    // Preface, SETTINGS and a PING in one flight: it reads and writes, yet never ACKs.
    let mut c = raw(Config::default());
    let t0 = c.now;
    let mut b = preface();
    frame(&mut b, kind::PING, 0, 0, &[7; 8]);
    c.input(&b);
    assert_eq!(c.output(), vec![F::Settings(true), F::Ping(true)]);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 10 * S));
    c.conn.handle_timeout(t0 + 10 * S);
    assert_eq!(c.output(), vec![F::GoAway(0, Reason::SETTINGS_TIMEOUT)]);
    assert_eq!(
        failure(&mut c),
        Some((Reason::SETTINGS_TIMEOUT, Initiator::Remote, "SETTINGS not acknowledged in time"))
    );
}

#[test]
fn acknowledgement_stops_the_settings_timer() {
    let mut c = raw(Config::default());
    let t0 = c.now;
    c.input(&preface());
    c.request(1, "/", true);
    c.now = t0 + 9 * S;
    c.send(kind::SETTINGS, flag::ACK, 0, &[]);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + 69 * S), "only the idle timer from the ACK");
    c.conn.handle_timeout(t0 + 10 * S);
    let out = c.output();
    assert_eq!(goaway_reason(&out), None, "{out:?}");
}

/// A request waiting on its handler (a long poll, a slow upstream) keeps the connection from
/// being idle: the idle timer starts over instead of closing it. Once answered, or when the
/// stream waits on the peer instead (a request body that stopped coming), idleness counts.
#[test]
fn a_request_waiting_on_the_application_is_not_idleness() {
    let cfg = Config { idle_timeout: 5 * S, ..Config::default() };
    let mut c = Client::new(cfg);
    c.request(1, "/long-poll", true);
    assert!(matches!(&c.events()[..], [Event::Request { stream: 1, .. }]));
    let t0 = c.now;
    for k in 1..=4 {
        let t = c.conn.poll_timeout().unwrap();
        assert!(t >= t0 + k * 5 * S, "round {k}");
        c.conn.handle_timeout(t);
        assert_eq!(c.output(), vec![], "round {k}: no GOAWAY while the handler works");
        c.now = t;
    }
    // Answered at last; then idle.
    c.conn.send_response(1, 200, vec![], true).unwrap();
    assert!(matches!(&c.output()[..], [F::Headers(1, _, true)]));
    let t = c.conn.poll_timeout().unwrap();
    c.conn.handle_timeout(t);
    assert_eq!(c.output(), vec![F::GoAway(1, Reason::NO_ERROR)]);
    assert_eq!(failure(&mut c), idle_close());

    // A request whose body stopped coming waits on the peer: idle.
    let mut c = Client::new(Config { idle_timeout: 5 * S, ..Config::default() });
    let b = c.block(&[(":method", "POST"), (":scheme", "https"), (":path", "/up")]);
    c.send(kind::HEADERS, flag::END_HEADERS, 1, &b);
    c.events();
    let t = c.conn.poll_timeout().unwrap();
    c.conn.handle_timeout(t);
    assert_eq!(c.output(), vec![F::GoAway(1, Reason::NO_ERROR)]);
}
