//! Tests of the contention rule (`super`): a standing queue the bound cannot explain, and the
//! probes that end a verdict on a queue of the connection's own.

use std::time::{Duration, Instant};

use super::*;
use crate::inflight::{CRUISE_GAIN, STARTUP_GAIN};

const MS: Duration = Duration::from_millis(1);
/// 5 Mbit/s.
const RATE: u64 = 625_000;

#[test]
fn contention_needs_a_standing_queue_the_bound_cannot_explain() {
    let mut c = Contention::default();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // 5 Mbit/s × 40 ms: the bound's own queue at the cruise gain reaches 1.25 × 40 ms + 5 ms
    // + 6.6 ms (the headroom at 625 kB/s); the verdict needs 10 ms more in every round.
    // A few ms of ACK delay on top of the own queue: never contention, however long.
    for i in 0..200 {
        c.update(at(i * 10), (66 + (i % 3) as u32) * MS, 40 * MS, RATE, CRUISE_GAIN);
    }
    assert!(!c.contended);
    // Startup's overshoot at its gain: a queue of one BDP (RTT 80 ms) for ever.
    for i in 0..200 {
        c.update(at(2_000 + i * 10), 80 * MS, 40 * MS, RATE, STARTUP_GAIN);
    }
    assert!(!c.contended);
    // At the cruise gain, seven rounds of it are not enough.
    for i in 0..(CONTENTION_ROUNDS - 1) * 4 {
        c.update(at(4_000 + u64::from(i) * 10), 80 * MS, 40 * MS, RATE, CRUISE_GAIN);
    }
    assert!(!c.contended);
    c.update(at(4_300), 60 * MS, 40 * MS, RATE, CRUISE_GAIN);
    // Another flow's queue: 300 ms in every sample, for eight rounds of 40 ms.
    let mut t = 5_000;
    for _ in 0..(CONTENTION_ROUNDS + 2) * 4 {
        c.update(at(t), 300 * MS, 40 * MS, RATE, CRUISE_GAIN);
        t += 10;
    }
    assert!(c.contended);
    // One round in which the queue drained to what the bound explains: the bound is back.
    for _ in 0..5 {
        c.update(at(t), 50 * MS, 40 * MS, RATE, CRUISE_GAIN);
        t += 10;
    }
    assert!(!c.contended);
    // A shallow buffer: 100 Mbit/s × 13 ms behind a 1.5 BDP queue (19.5 ms). A CUBIC flow
    // keeping it over 12 ms full is another flow's queue (own: 1.25 × 13 + 5 + 0.3 ms).
    let mut s = Contention::default();
    for i in 0..(CONTENTION_ROUNDS + 2) * 2 {
        s.update(at(u64::from(i) * 7), 27 * MS, 13 * MS, 12_500_000, CRUISE_GAIN);
    }
    assert!(s.contended);
    // No minimum RTT yet: no verdict.
    let mut d = Contention::default();
    d.update(t0, 300 * MS, Duration::ZERO, 0, CRUISE_GAIN);
    assert!(!d.contended);
}

#[test]
fn a_probe_ends_a_verdict_on_a_queue_of_the_connections_own() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // The bound, which holds during a probe.
    let target = Some(25_000);
    // The eighth round of 40 ms ends at 320 ms: the verdict, which starts with a probe.
    let verdict = || {
        let mut c = Contention::default();
        for i in 0..33 {
            c.update(at(i * 10), 300 * MS, 40 * MS, RATE, CRUISE_GAIN);
            c.probe(at(i * 10), 500_000, target);
        }
        assert!(c.contended && c.probing() && !c.contended(), "the bound holds for the probe");
        assert_eq!(c.since, Some(at(320)));
        c
    };
    // The queue was the connection's own (a rate estimate above the path's, since gone from
    // the estimate): drained to the bound, the RTT falls, and the verdict ends without the
    // bound ever stepping aside.
    let mut c = verdict();
    c.probe(at(400), 24_000, target);
    for i in 0..8 {
        c.update(at(400 + i * 10), 45 * MS, 40 * MS, RATE, CRUISE_GAIN);
        c.probe(at(400 + i * 10), 24_000, target);
    }
    assert!(!c.contended && !c.probing() && !c.contended());
    c.probe(at(20_000), 500_000, target);
    assert!(!c.probing(), "no probes without a verdict");

    // Another flow's queue: the RTT stays up through the probe, the verdict stands, and the
    // bound steps aside once the probe has watched three min RTTs after draining.
    let mut c = verdict();
    c.probe(at(400), 24_000, target);
    for i in 0..2 {
        c.update(at(440 + i * 40), 290 * MS, 40 * MS, RATE, CRUISE_GAIN);
        c.probe(at(440 + i * 40), 24_000, target);
    }
    assert!(c.probing(), "still watching");
    c.update(at(520), 290 * MS, 40 * MS, RATE, CRUISE_GAIN);
    c.probe(at(520), 24_000, target);
    assert!(c.contended(), "stepped aside after 120 ms of watching");
    assert_eq!(c.since, Some(at(520)));
    // The next probe after PROBE_EVERY; one that never drains ends after PROBE_MAX.
    let next = 520 + PROBE_EVERY.as_millis() as u64;
    c.probe(at(next - 10), 500_000, target);
    assert!(c.contended());
    c.probe(at(next), 500_000, target);
    assert!(c.probing() && !c.contended());
    c.probe(at(next + PROBE_MAX.as_millis() as u64), 500_000, target);
    assert!(c.contended());
}
