//! Timers and budgets in virtual time: the request header timeout and the stream reset budget
//! (RFC 9114 §10.5).

use std::time::Duration;

use sluice_h3::{Code, Config, Event};

use crate::client::*;

const GET: &[(&str, &str)] = &[(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/")];
const POST: &[(&str, &str)] = &[(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")];
const TEN_S: Duration = Duration::from_secs(10);

#[test]
fn incomplete_header_section_is_reset_exactly_at_the_header_timeout() {
    let mut c = Client::new(Config::default());
    let t0 = c.now;
    assert_eq!(c.conn.poll_timeout(), None, "no request stream, no timer");
    let f = c.headers_frame(0, GET);
    // The frame header and part of the section: the stream is open, its head incomplete.
    c.input(0, &f[..4], false);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + TEN_S));
    // A second stream, opened 3 s later and complete at once, has no timer.
    c.now = t0 + Duration::from_secs(3);
    c.get(4, "/", &[]);
    assert!(matches!(c.events()[..], [Event::Request { stream: 4, .. }]));
    assert_eq!(c.conn.poll_timeout(), Some(t0 + TEN_S), "stream 4 took none");

    c.conn.handle_timeout(t0 + TEN_S - Duration::from_nanos(1));
    c.pump();
    assert_eq!((c.resets.len(), c.stops.len()), (0, 0), "not before the deadline");
    assert_eq!(c.conn.open_streams(), 2);

    c.conn.handle_timeout(t0 + TEN_S);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010d))], "H3_REQUEST_INCOMPLETE");
    assert_eq!(c.stops, [(0, Code(0x010d))], "and its reading stopped");
    assert_eq!(c.events(), [], "the application never knew the stream");
    assert_eq!(c.conn.poll_timeout(), None);
    assert_eq!(c.conn.open_streams(), 1, "stream 4 goes on");
    assert_eq!(c.close, None);
    // The rest of the head, arriving late, is ignored.
    c.input(0, &f[4..], true);
    assert_eq!(c.events(), []);
    assert!(!c.conn.wants_read(0));
}

#[test]
fn header_timer_starts_when_the_stream_is_opened_and_stops_with_the_head() {
    let cfg = Config { header_timeout: Duration::from_secs(2), ..Config::default() };
    let mut c = Client::new(cfg);
    let t0 = c.now;
    c.conn.on_stream_opened(t0, 0);
    assert_eq!(c.conn.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    c.now = t0 + Duration::from_secs(1);
    c.request(0, POST, false);
    assert!(matches!(c.events()[..], [Event::Request { stream: 0, end_stream: false, .. }]));
    assert_eq!(c.conn.poll_timeout(), None, "the head is complete; the body has no deadline");
    c.conn.handle_timeout(t0 + Duration::from_secs(60));
    c.pump();
    assert_eq!((c.resets.len(), c.stops.len()), (0, 0));
}

#[test]
fn header_section_blocked_on_qpack_times_out_too() {
    let mut c = Client::new(Config::default());
    let t0 = c.now;
    // A section that references an insert whose encoder-stream instruction never comes.
    assert!(c.enc.insert(b"x-token", b"abcdefghijklmnop"));
    let _withheld = c.enc.poll_encoder_stream().unwrap();
    let mut fields = GET.to_vec();
    fields.push(("x-token", "abcdefghijklmnop"));
    let mut block = Vec::new();
    c.enc.encode(0, fields.iter().map(|&(n, v)| sluice_qpack::FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
    c.input(0, &frame(HEADERS, &block), true);
    assert_eq!(c.events(), []);
    c.conn.handle_timeout(t0 + TEN_S);
    c.pump();
    assert_eq!(c.resets, [(0, Code(0x010d))]);
    assert_eq!(c.conn.open_streams(), 0);
    assert_eq!(c.close, None);
}

/// Open request stream `n` (id 4n) with an incomplete POST and reset it, as Rapid Reset does.
fn open_and_reset(c: &mut Client, n: u64) {
    let id = 4 * n;
    c.request(id, POST, false);
    let now = c.now;
    c.conn.on_stream_reset(now, id, 0x010c);
}

#[test]
fn the_201st_reset_in_the_window_closes_with_excessive_load() {
    let mut c = Client::new(Config::default());
    let t0 = c.now;
    for n in 0..200 {
        // Spread over 9.9 s: all in one window.
        c.now = t0 + Duration::from_millis(n * 49);
        open_and_reset(&mut c, n);
    }
    assert_eq!(c.closed_with(), None, "200 resets are within the budget");
    assert_eq!(c.resets.len(), 200);
    c.now = t0 + Duration::from_millis(9_900);
    open_and_reset(&mut c, 200);
    assert_eq!(c.closed_with(), Some(Code(0x0107)), "H3_EXCESSIVE_LOAD");
    assert_eq!(c.conn.poll_timeout(), None);
    assert!(matches!(c.events().last(), Some(Event::ConnectionError(e)) if e.code == Code(0x0107)));
}

#[test]
fn resets_spread_over_windows_are_forgiven() {
    let mut c = Client::new(Config::default());
    let t0 = c.now;
    // 150 resets in each of four windows: 600 in all, never 201 in one.
    for n in 0..600 {
        c.now = t0 + Duration::from_millis(n / 150 * 10_000 + n % 150);
        open_and_reset(&mut c, n);
    }
    assert_eq!(c.closed_with(), None);
    assert_eq!(c.resets.len(), 600);
}

#[test]
fn stream_errors_stop_sending_and_header_timeouts_share_the_budget() {
    let one_s = Duration::from_secs(1);
    let cfg = Config { max_resets_per_window: 3, header_timeout: one_s, ..Config::default() };
    let mut c = Client::new(cfg);
    let t0 = c.now;
    // One malformed request (H3_MESSAGE_ERROR), one STOP_SENDING of an unfinished response,
    // one header timeout: three, within the budget.
    c.request(0, &[(":method", "G ET"), (":scheme", "https"), (":authority", "a"), (":path", "/")], true);
    c.request(4, POST, false);
    c.conn.on_stop_sending(t0, 4, 0x010c);
    c.input(8, &[0x01], false);
    c.conn.handle_timeout(t0 + one_s);
    assert_eq!(c.closed_with(), None);
    assert_eq!(c.resets.iter().map(|r| r.1 .0).collect::<Vec<_>>(), [0x010e, 0x010c, 0x010d]);
    // A peer reset of a stream that sent nothing yet is the fourth.
    c.now = t0 + one_s;
    c.conn.on_stream_reset(c.now, 12, 0x010c);
    assert_eq!(c.closed_with(), Some(Code(0x0107)));
}

#[test]
fn what_we_reset_ourselves_is_not_counted() {
    let cfg = Config { max_resets_per_window: 1, ..Config::default() };
    let mut c = Client::new(cfg);
    for n in 0..5 {
        c.request(4 * n, POST, false);
        c.conn.reset(4 * n, Code(0x010c));
    }
    // Responses the peer stops after they are complete cost nothing either.
    c.get(20, "/", &[]);
    c.conn.send_response(20, 204, vec![], true).unwrap();
    c.pump();
    let now = c.now;
    c.conn.on_stop_sending(now, 20, 0x010c);
    assert_eq!(c.closed_with(), None);
}
