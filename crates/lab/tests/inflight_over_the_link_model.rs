//! The in-flight bound (`sluice_tune::inflight`) over the lab's link model, in virtual time.
//!
//! A bulk sender whose congestion window grows as slow start does (by what each ACK
//! acknowledges) up to 6 × the path's bandwidth-delay product, and never shrinks: what BBR's
//! startup or CUBIC on a deep buffer put in flight, with the buffer deep enough (8 × BDP) that
//! nothing is lost. It sends 1,500-byte packets through the model's server → client direction
//! (200 Mbit/s, 20 ms, drop-tail queue) and each delivered packet's ACK comes back through the
//! client → server direction (20 ms). Once on its own, once with what it sends bounded by an
//! `InflightCap` as the HTTP/2 driver makes one (`leading().lone()`), fed every 0.1 ms with what
//! a TCP_INFO reading would say: bytes acknowledged, the minimum and smoothed RTT of the ACKs,
//! bytes in flight, always busy.
//!
//! No clock, no socket: time is a counter, and the same run gives the same figures.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sluice_lab::model::{DirSpec, Direction, Occupancy, Queue, Verdict};
use sluice_tune::inflight::{InflightCap, Sample, HEADROOM, SLACK_TIME};

/// The bottleneck: 200 Mbit/s, 25 MB/s.
const RATE_MBIT: f64 = 200.0;
const RATE: f64 = RATE_MBIT * 1e6 / 8.0;
/// One-way delay each way: a 40 ms round trip.
const ONE_WAY: Duration = Duration::from_millis(20);
/// The bandwidth-delay product, bytes: 1 MB.
const BDP: f64 = RATE * 0.040;
/// The drop-tail queue: 8 × BDP, deeper than the sender ever fills.
const QUEUE: usize = 8_000_000;
/// The sender's largest congestion window: 6 × BDP.
const CWND_MAX: f64 = 6.0 * BDP;
/// The initial window: 10 segments.
const MSS: usize = 1500;
const ACK_BYTES: usize = 64;
/// How often the sender looks (and, bounded, reads).
const TICK: Duration = Duration::from_micros(100);
/// Simulated time, and the part after the ramp over which the delivered rate is taken.
const RUN: Duration = Duration::from_secs(3);
const AFTER_RAMP: Duration = Duration::from_secs(1);

/// What a run shows.
#[derive(Debug)]
struct Run {
    /// The queue's largest backlog as arriving packets found it, bytes.
    peak_queue: u64,
    /// Its largest backlog after the ramp.
    peak_queue_after_ramp: u64,
    /// Bytes delivered to the client per second from [`AFTER_RAMP`] on.
    rate_after_ramp: f64,
    /// The largest amount in flight, bytes.
    peak_in_flight: usize,
    /// Packets the queue dropped.
    drops: u64,
}

fn dir() -> DirSpec {
    DirSpec { rate_mbit: RATE_MBIT, delay: ONE_WAY, queue: Queue::Bytes(QUEUE), loss_pct: 0.0 }
}

/// One download of [`RUN`], bounded by `cap` or not.
fn download(mut cap: Option<InflightCap>) -> Run {
    let start = Instant::now();
    let mut down = Direction::new(dir(), 1);
    let mut up = Direction::new(dir(), 2);
    let (mut queue, mut queue_after) = (Occupancy::default(), Occupancy::default());
    // ACKs on their way back: (arrival at the sender, bytes acknowledged, when the data was sent).
    let mut acks: VecDeque<(Instant, usize, Instant)> = VecDeque::new();
    let (mut sent, mut acked) = (0usize, 0usize);
    let mut cwnd = 10.0 * MSS as f64;
    let (mut min_rtt, mut srtt) = (Duration::ZERO, Duration::ZERO);
    let (mut delivered_after, mut peak_in_flight, mut drops) = (0u64, 0usize, 0u64);
    let ticks = (RUN.as_micros() / TICK.as_micros()) as u32;
    for i in 0..ticks {
        let now = start + TICK * i;
        while let Some(&(at, bytes, sent_at)) = acks.front() {
            if at > now {
                break;
            }
            acks.pop_front();
            acked += bytes;
            cwnd = (cwnd + bytes as f64).min(CWND_MAX);
            let rtt = at - sent_at;
            min_rtt = if min_rtt.is_zero() { rtt } else { min_rtt.min(rtt) };
            srtt = if srtt.is_zero() { rtt } else { (srtt * 7 + rtt) / 8 };
        }
        let in_flight = sent - acked;
        let room = (cwnd as usize).saturating_sub(in_flight);
        let budget = match cap.as_mut() {
            None => room,
            Some(c) => {
                let s = Sample {
                    delivery_rate: 0,
                    acked: acked as u64,
                    min_rtt,
                    in_flight,
                    notsent_bytes: 0,
                    segment: 0,
                    settled: in_flight == 0 && sent > 0,
                    srtt,
                };
                c.update(now, &s, true);
                c.budget(&s, room)
            }
        };
        let mut left = budget;
        while left >= MSS {
            left -= MSS;
            let (verdict, seen) = down.handle_packet_seen(now, MSS);
            if let Some(seen) = seen {
                queue.record(seen);
                if now >= start + AFTER_RAMP {
                    queue_after.record(seen);
                }
            }
            match verdict {
                Verdict::Deliver(at) => {
                    sent += MSS;
                    if at >= start + AFTER_RAMP && at < start + RUN {
                        delivered_after += MSS as u64;
                    }
                    if let Verdict::Deliver(back) = up.handle_packet(at, ACK_BYTES) {
                        acks.push_back((back, MSS, now));
                    }
                }
                Verdict::Drop(_) => drops += 1,
            }
        }
        peak_in_flight = peak_in_flight.max(sent - acked);
    }
    Run {
        peak_queue: queue.peak_bytes,
        peak_queue_after_ramp: queue_after.peak_bytes,
        rate_after_ramp: delivered_after as f64 / (RUN - AFTER_RAMP).as_secs_f64(),
        peak_in_flight,
        drops,
    }
}

#[test]
fn the_bound_keeps_the_queue_near_the_bdp_and_the_link_full() {
    let free = download(None);
    let bound = download(Some(InflightCap::new().leading().lone()));
    let mb = |b: f64| b / 1e6;
    eprintln!(
        "200 Mbit/s × 40 ms (BDP {:.2} MB), queue {:.1} MB:\n  without the bound: peak queue {:.2} MB ({:.2} after the \
         ramp), peak in flight {:.2} MB, {:.1} % of the link after the ramp, {} drops\n  with it: peak queue {:.2} MB \
         ({:.2} after the ramp), peak in flight {:.2} MB, {:.1} % of the link after the ramp, {} drops",
        mb(BDP),
        mb(QUEUE as f64),
        mb(free.peak_queue as f64),
        mb(free.peak_queue_after_ramp as f64),
        mb(free.peak_in_flight as f64),
        100.0 * free.rate_after_ramp / RATE,
        free.drops,
        mb(bound.peak_queue as f64),
        mb(bound.peak_queue_after_ramp as f64),
        mb(bound.peak_in_flight as f64),
        100.0 * bound.rate_after_ramp / RATE,
        bound.drops,
    );
    // On its own the window becomes a standing queue of several BDPs (nothing is lost: it stays).
    assert_eq!(free.drops, 0);
    assert!(free.peak_queue as f64 >= 4.0 * BDP, "{free:?}");
    assert!(free.peak_queue_after_ramp as f64 >= 4.0 * BDP, "{free:?}");
    // Bounded, the queue stays near the BDP: at most 1.5 × BDP plus the bound's slack (what the
    // path carries in SLACK_TIME) and headroom, during the ramp as after it.
    let limit = 1.5 * BDP + RATE * SLACK_TIME.as_secs_f64() + HEADROOM as f64;
    assert!((bound.peak_queue as f64) <= limit, "peak queue {} > {limit}: {bound:?}", bound.peak_queue);
    assert!((bound.peak_queue_after_ramp as f64) < BDP, "{bound:?}");
    assert_eq!(bound.drops, 0);
    // And the link stays busy: at least 90 % of its rate once the ramp is over.
    assert!(
        bound.rate_after_ramp >= 0.9 * RATE,
        "{:.1} % of the link: {bound:?}",
        100.0 * bound.rate_after_ramp / RATE
    );
    assert!(free.rate_after_ramp >= 0.9 * RATE, "{free:?}");
}

#[test]
fn the_simulation_is_deterministic() {
    let a = download(Some(InflightCap::new().leading().lone()));
    let b = download(Some(InflightCap::new().leading().lone()));
    assert_eq!(
        (a.peak_queue, a.peak_queue_after_ramp, a.peak_in_flight, a.rate_after_ramp.to_bits()),
        (b.peak_queue, b.peak_queue_after_ramp, b.peak_in_flight, b.rate_after_ramp.to_bits())
    );
}
