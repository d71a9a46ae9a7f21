//! RFC 9218 scheduling: the `priority` header, PRIORITY_UPDATE, the response's `priority`
//! field, and one quantum per pick in urgency order.

use bytes::Bytes;
use sluice_h3::{Config, Event, Field, Priority, Transmit};

use crate::client::*;

/// Body bytes of the DATA frame in a write (the engine writes one frame per pick).
fn data_len(t: &Transmit) -> Option<(u64, usize, bool)> {
    let Transmit::Write { stream, data, body, fin } = t else { return None };
    if *stream & 3 != 0 {
        return None;
    }
    let frames = split_frames(&[&data[..], &body[..]].concat());
    match &frames[..] {
        [(0x00, p)] => Some((*stream, p.len(), *fin)),
        _ => None,
    }
}

fn datas(out: &[Transmit]) -> Vec<(u64, usize, bool)> {
    out.iter().filter_map(data_len).collect()
}

#[test]
fn urgent_response_overtakes_bulk_within_one_quantum() {
    let mut c = Client::new(Config { max_buffered_per_stream: 2 << 20, ..Config::default() });
    c.get(0, "/img", &[("priority", "u=5, i")]);
    c.conn.send_response(0, 200, vec![], false).unwrap();
    c.conn.send_data(0, Bytes::from(vec![0u8; 1 << 20]), true).unwrap();
    // Control, QPACK streams, the head, then one frame of the bulk response (alone, it gets
    // sixteen quanta per frame).
    let _ = c.pump_until_data(1);
    assert_eq!(datas(&c.log).last(), Some(&(0, 262_144, false)));
    assert_eq!(c.conn.next_urgency(), Some(5));
    assert!(c.conn.wants_write());

    c.get(4, "/css", &[("priority", "u=0")]);
    let _ = c.events();
    c.conn.send_response(4, 200, vec![], false).unwrap();
    c.conn.send_data(4, Bytes::from(vec![0u8; 50_000]), true).unwrap();
    assert_eq!(c.conn.next_urgency(), Some(0));
    let out = c.pull(4);
    let d = datas(&out);
    // The urgent stream is the scheduler's pick until it is done: its one chunk in one frame.
    assert_eq!(d[..1], [(4, 50_000, true)], "{d:?}");
    assert!(d[1..].iter().all(|&(s, _, _)| s == 0), "bulk resumes only after the urgent response: {d:?}");
    let head = out.iter().position(|t| matches!(t, Transmit::Write { stream: 4, .. })).unwrap();
    let first_data = out.iter().position(|t| data_len(t).is_some()).unwrap();
    assert!(head <= first_data, "the urgent head goes out before any further bulk data");
    assert_eq!(c.conn.next_urgency(), Some(5));
    let _ = c.pump();
    assert!(!c.conn.wants_write(), "everything written");
    assert_eq!(c.conn.next_urgency(), None);
    assert!(c.finished.contains(&0) && c.finished.contains(&4));
}

#[test]
fn mixed_urgencies_are_seen_once_final_responses_of_two_urgencies_are_queued() {
    let mut c = Client::new(Config::default());
    c.get(0, "/a", &[("priority", "u=5, i")]);
    c.get(4, "/b", &[("priority", "u=5")]);
    c.get(8, "/font", &[("priority", "u=0")]);
    let _ = c.events();
    c.conn.send_response(0, 200, vec![], true).unwrap();
    c.conn.send_response(4, 200, vec![], true).unwrap();
    assert!(!c.conn.mixed_urgencies(), "two responses of one urgency");
    // An interim response does not count; the final one does.
    c.conn.send_response(8, 103, vec![Field::new("link", "</x.css>; rel=preload")], false).unwrap();
    assert!(!c.conn.mixed_urgencies(), "an interim response is not a response of its own");
    c.conn.send_response(8, 200, vec![], true).unwrap();
    assert!(c.conn.mixed_urgencies());
}

#[test]
fn incremental_streams_share_round_robin_and_sequential_ones_do_not() {
    let mut c = Client::new(Config::default());
    for id in [0, 4] {
        c.get(id, "/", &[("priority", "u=3, i")]);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 100_000]), true).unwrap();
    }
    for id in [8, 12] {
        c.get(id, "/", &[("priority", "u=4")]);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 600_000]), true).unwrap();
    }
    let out = c.pump();
    let d = datas(&out);
    assert_eq!(d[..4], [(0, 16_384, false), (4, 16_384, false), (0, 16_384, false), (4, 16_384, false)], "{d:?}");
    let tail: Vec<(u64, usize)> = d.iter().filter(|d| d.0 >= 8).map(|d| (d.0, d.1)).collect();
    // The first sequential stream is picked until it is done, so it gets sixteen quanta a frame.
    let run = |id| [(id, 262_144), (id, 262_144), (id, 75_712)];
    assert_eq!(tail, [run(8), run(12)].concat(), "non-incremental: one after the other, in stream order");
}

#[test]
fn priority_update_changes_order() {
    let mut c = Client::new(Config { max_buffered_per_stream: 2 << 20, ..Config::default() });
    for id in [0, 4] {
        c.get(id, "/", &[]);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 1 << 20]), true).unwrap();
    }
    let _ = c.pump_until_data(1);
    assert_eq!(datas(&c.log).last().map(|d| d.0), Some(0), "same urgency: lower stream id first");
    c.control(&priority_update(PRIORITY_UPDATE, 4, "u=1"));
    assert_eq!(c.conn.priority(4), Some(Priority { urgency: 1, incremental: false }));
    let out = c.pump();
    let ids: Vec<u64> = datas(&out).iter().map(|d| d.0).collect();
    assert_eq!(ids, [4, 4, 4, 4, 0, 0, 0], "stream 4 overtakes after the update");
}

#[test]
fn priority_update_replaces_the_whole_value() {
    // RFC 9218 §7: the frame carries a full Priority Field Value; omitted parameters default.
    let mut c = Client::new(Config::default());
    c.get(0, "/", &[("priority", "u=6, i")]);
    c.control(&priority_update(PRIORITY_UPDATE, 0, "u=2"));
    assert_eq!(c.conn.priority(0), Some(Priority { urgency: 2, incremental: false }));
}

#[test]
fn priority_update_before_the_request_is_kept_and_wins() {
    let mut c = Client::new(Config::default());
    c.control(&priority_update(PRIORITY_UPDATE, 8, "u=6"));
    c.control(&priority_update(PRIORITY_UPDATE, 8, "u=0, i"));
    c.get(8, "/", &[("priority", "u=5")]);
    assert!(matches!(c.events()[..], [Event::Request { stream: 8, .. }]));
    assert_eq!(c.conn.priority(8), Some(Priority { urgency: 0, incremental: true }), "the latest update wins");
}

#[test]
fn pending_priority_updates_are_bounded() {
    let mut c = Client::new(Config { max_pending_priority_updates: 2, ..Config::default() });
    for id in [8, 12, 16] {
        c.control(&priority_update(PRIORITY_UPDATE, id, "u=1"));
    }
    for id in [8, 12, 16] {
        c.get(id, "/", &[]);
    }
    assert_eq!(c.conn.priority(8).unwrap().urgency, 1);
    assert_eq!(c.conn.priority(12).unwrap().urgency, 1);
    assert_eq!(c.conn.priority(16), Some(Priority::default()), "beyond the budget: dropped");
}

#[test]
fn response_priority_field_is_merged_and_applied() {
    let mut c = Client::new(Config::default());
    c.get(0, "/menu.png", &[("priority", "u=5, i")]);
    assert_eq!(c.conn.priority(0), Some(Priority { urgency: 5, incremental: true }));
    c.conn.send_response(0, 200, vec![Field::new("priority", "u=1")], false).unwrap();
    // RFC 9218 §8: the server changes urgency; incremental stays as the client said.
    assert_eq!(c.conn.priority(0), Some(Priority { urgency: 1, incremental: true }));
}

#[test]
fn handler_can_reprioritize() {
    let mut c = Client::new(Config::default());
    for id in [0, 4] {
        c.get(id, "/", &[]);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 20_000]), true).unwrap();
    }
    c.conn.set_priority(4, Priority { urgency: 0, incremental: false });
    let out = c.pump();
    assert_eq!(datas(&out).first().map(|d| d.0), Some(4));
}

#[test]
fn blocked_streams_are_skipped_until_writable() {
    let mut c = Client::new(Config::default());
    for id in [0, 4] {
        c.get(id, "/", &[]);
        c.conn.send_response(id, 200, vec![], false).unwrap();
        c.conn.send_data(id, Bytes::from(vec![0u8; 40_000]), true).unwrap();
    }
    c.conn.on_stream_blocked(0);
    let out = c.pump();
    assert!(datas(&out).iter().all(|d| d.0 == 4), "{:?}", datas(&out));
    assert!(!out.iter().any(|t| matches!(t, Transmit::Write { stream: 0, .. })), "not even the head");
    assert!(!c.conn.wants_write());
    c.conn.on_stream_writable(0);
    let out = c.pump();
    assert_eq!(datas(&out).iter().map(|d| d.1).sum::<usize>(), 40_000);
    assert!(c.finished.contains(&0));
}

impl Client {
    /// Pump until `n` DATA writes came out (one pull at a time).
    fn pump_until_data(&mut self, n: usize) -> Vec<Transmit> {
        let mut out = Vec::new();
        while datas(&out).len() < n {
            let got = self.pull(1);
            assert!(!got.is_empty(), "ran dry after {out:?}");
            out.extend(got);
        }
        out
    }
}

#[test]
fn a_frame_that_spans_chunks_is_finished_after_a_more_urgent_stream_cuts_in() {
    let mut c = Client::new(Config { max_buffered_per_stream: 1 << 20, ..Config::default() });
    c.get(0, "/img", &[("priority", "u=5")]);
    c.conn.send_response(0, 200, vec![], false).unwrap();
    let chunks: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 50_000]).chain([vec![9u8; 10]]).collect();
    for (i, ch) in chunks.iter().enumerate() {
        c.conn.send_data(0, Bytes::from(ch.clone()), i == chunks.len() - 1).unwrap();
    }
    // Alone, stream 0 gets one frame for all five chunks (200,010 bytes, under sixteen quanta):
    // its header and the first chunk in the first write.
    loop {
        let got = c.pull(1);
        assert!(!got.is_empty(), "ran dry");
        if let [Transmit::Write { stream: 0, data, body, .. }] = &got[..] {
            if data.first() == Some(&0) {
                assert_eq!(body.len(), 50_000);
                break;
            }
        }
    }
    // A more urgent response cuts in before the rest of that frame.
    c.get(4, "/css", &[("priority", "u=0")]);
    let _ = c.events();
    c.conn.send_response(4, 200, vec![], false).unwrap();
    c.conn.send_data(4, Bytes::from(vec![7u8; 30_000]), true).unwrap();
    let out = c.pump();
    let order: Vec<(u64, usize)> = out
        .iter()
        .filter_map(|t| match t {
            Transmit::Write { stream, data, body, .. } if *stream & 3 == 0 => Some((*stream, data.len() + body.len())),
            _ => None,
        })
        .collect();
    let first_of_0 = order.iter().position(|w| w.0 == 0).expect("stream 0 continues");
    assert!(order[..first_of_0].iter().any(|w| w.0 == 4), "the urgent stream goes first: {order:?}");
    assert!(order[first_of_0..].iter().all(|w| w.0 == 0), "{order:?}");
    // The rest of the frame went out a chunk per write, with no header of its own.
    assert_eq!(order[first_of_0..], [(0, 50_000), (0, 50_000), (0, 50_000), (0, 10)]);
    // On the wire, stream 0 is its head and one DATA frame of every chunk in order.
    let frames = split_frames(&c.written[&0]);
    let data: Vec<&(u64, Vec<u8>)> = frames.iter().filter(|(t, _)| *t == 0).collect();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].1, chunks.concat());
    assert!(c.finished.contains(&0) && c.finished.contains(&4));
}
