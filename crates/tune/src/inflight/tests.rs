//! Tests of the in-flight bound (`super`): the estimate, its rounds and gains, the ramp.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// A reading on a path with 40 ms RTT and no queue.
fn sample(rate: u64, inflight: usize) -> Sample {
    Sample {
        delivery_rate: rate,
        acked: 0,
        min_rtt: 40 * MS,
        in_flight: inflight,
        notsent_bytes: 0,
        segment: 0,
        settled: false,
        srtt: Duration::ZERO,
    }
}

/// A path in virtual time: each step is one round (40 ms) delivering at a given rate.
struct Path {
    t: Instant,
    acked: u64,
}

impl Path {
    fn new(c: &mut InflightCap) -> Self {
        let p = Self { t: Instant::now(), acked: 0 };
        c.update(p.t, &sample(0, 0), true);
        p
    }

    /// One round at `rate` (the kernel's per-ACK samples say `spike`); `busy` as in update.
    fn round(&mut self, c: &mut InflightCap, rate: u64, spike: u64, busy: bool) {
        self.t += 40 * MS;
        self.acked += rate * 40 / 1000;
        c.update(self.t, &Sample { acked: self.acked, ..sample(spike, 0) }, busy);
    }
}

/// 5 Mbit/s × 40 ms: BDP 25 kB.
const RATE: u64 = 625_000;
/// The cap at RATE with the cruise gain: 625 kB/s × (1.25 × 40 ms + 5 ms) + headroom.
const CRUISE_CAP: usize = 34_375 + HEADROOM;
/// The same with the startup gain: 625 kB/s × (2 × 40 ms + 5 ms) + headroom.
const STARTUP_CAP: usize = 53_125 + HEADROOM;

#[test]
fn no_estimate_means_the_congestion_window_decides() {
    let c = InflightCap::new();
    assert_eq!(c.cap(&sample(0, 0)), None);
    assert_eq!(c.budget(&sample(0, 0), 64 * 1024), 64 * 1024);
}

#[test]
fn startup_then_cruise_then_growth_again() {
    let mut c = InflightCap::new();
    let mut p = Path::new(&mut c);
    // The rate doubles for a few rounds, then stays: the cruise gain after one flat round.
    for (i, rate) in [RATE / 8, RATE / 4, RATE / 2, RATE, RATE, RATE, RATE].into_iter().enumerate() {
        p.round(&mut c, rate, rate, true);
        assert_eq!(c.growing(), i < 4, "round {i}");
    }
    assert_eq!(c.max_rate(), RATE);
    let cap = c.cap(&sample(RATE, 0)).unwrap();
    assert_eq!(cap, CRUISE_CAP);
    // Outstanding bytes count, unacked and unsent alike.
    let s = Sample { notsent_bytes: 10_000, ..sample(RATE, 20_000) };
    assert_eq!(c.budget(&s, 1 << 20), cap - 30_000);
    // The congestion window still bounds.
    assert_eq!(c.budget(&s, 5_000), 5_000);
    // Nearly full: wait rather than dribble.
    assert_eq!(c.budget(&sample(RATE, cap - 1_000), 1 << 20), 0);
    // The path gets faster: a quarter more in a round brings the startup gain back.
    p.round(&mut c, RATE * 5 / 4, RATE * 5 / 4, true);
    assert!(c.growing());
    assert_eq!(c.cap(&sample(RATE, 0)), Some(66_406 + HEADROOM));
}

/// A download from a sender that writes whatever the bound allows (no congestion window):
/// a link of `rate` bytes per second × 40 ms, simulated in steps of 0.5 ms. Returns
/// the round in which the link was first busy for a whole round (90 % of its rate
/// delivered), the peak queue in bytes, and how many bytes were delivered in 1.5 s.
fn ramp(c: InflightCap, rate: f64) -> (u32, f64, f64) {
    ramp_with(c, rate, true)
}

/// [`ramp`], the readings' smoothed RTT given (the queue's delay added to 40 ms) or not (zero).
fn ramp_with(mut c: InflightCap, rate: f64, srtt_known: bool) -> (u32, f64, f64) {
    let (rtt, step) = (0.040, 0.0005);
    let start = Instant::now();
    let (mut sent, mut acked, mut queue, mut peak) = (0.0_f64, 0.0_f64, 0.0_f64, 0.0_f64);
    // Bytes leaving the queue, acknowledged one RTT later.
    let mut wire: VecDeque<(f64, f64)> = VecDeque::new();
    let (mut round_start, mut round_acked, mut rounds, mut full) = (0.0, 0.0, 0, None);
    for i in 0..3_000 {
        let t = f64::from(i) * step;
        while wire.front().is_some_and(|&(at, _)| at <= t) {
            acked += wire.pop_front().map_or(0.0, |(_, b)| b);
        }
        let out = queue.min(rate * step);
        queue -= out;
        if out > 0.0 {
            wire.push_back((t + rtt, out));
        }
        if t - round_start >= rtt {
            rounds += 1;
            if full.is_none() && acked - round_acked >= 0.9 * rate * (t - round_start) {
                full = Some(rounds);
            }
            (round_start, round_acked) = (t, acked);
        }
        let s = Sample {
            delivery_rate: 0,
            acked: acked as u64,
            min_rtt: 40 * MS,
            in_flight: (sent - acked) as usize,
            notsent_bytes: 0,
            segment: 0,
            settled: false,
            // What the queue adds to the round trip (as a smoothed RTT would show it).
            srtt: if srtt_known { 40 * MS + Duration::from_secs_f64(queue / rate) } else { Duration::ZERO },
        };
        c.update(start + Duration::from_secs_f64(t), &s, true);
        let cap = c.cap(&s).unwrap_or(MIN_BASE + HEADROOM) as f64;
        // The initial window's worth at once, then up to the bound.
        let room = (cap - (sent - acked)).min(4.0 * rate * step);
        if room > 0.0 {
            sent += room;
            queue += room;
        }
        peak = peak.max(queue);
    }
    (full.unwrap_or(u32::MAX), peak, acked)
}

#[test]
fn a_leading_bound_ramps_up_one_doubling_per_round() {
    let bdp = 25e6 * 0.040;
    let (lead_full, lead_peak, lead_acked) = ramp(InflightCap::new().leading(), 25e6);
    let (plain_full, plain_peak, plain_acked) = ramp(InflightCap::new(), 25e6);
    // From a 20 kB window to 1 MB per round is six doublings: leading, the link is full in
    // well under twice that many rounds; the estimate alone, two rounds behind, takes longer
    // (traced: one doubling per two rounds).
    assert!(lead_full <= 9, "leading: the link first full in round {lead_full}");
    assert!(plain_full >= lead_full + 2, "not leading: round {plain_full} (leading: {lead_full})");
    assert!(lead_acked > plain_acked * 1.05, "{lead_acked} against {plain_acked} bytes in 1.5 s");
    // The ramp's end overshoots about as far either way: the sliding rate is what was
    // delivered, so the bound is at most twice what the link carries per RTT.
    assert!(lead_peak <= 1.25 * bdp && lead_peak <= plain_peak * 1.25, "peak queues {lead_peak} and {plain_peak}");
    // A guarded connection ramps as it did, and so does a path with a small BDP.
    let mut guarded = InflightCap::new().leading();
    guarded.set_guarded(true);
    let mut plain_guarded = InflightCap::new();
    plain_guarded.set_guarded(true);
    assert_eq!(ramp(guarded, 25e6), ramp(plain_guarded, 25e6));
    let mut c = InflightCap::new().leading();
    let mut p = Path::new(&mut c);
    p.round(&mut c, RATE, RATE, true);
    let two_flat_rounds = |c: &InflightCap| c.leads_at(c.max_rate(), 40 * MS);
    assert!(c.slides() && !two_flat_rounds(&c), "5 Mbit/s × 40 ms is a 25 kB BDP");
    p.round(&mut c, 25_000_000, 25_000_000, true);
    assert!(two_flat_rounds(&c));
    c.set_guarded(true);
    assert!(!c.slides() && !two_flat_rounds(&c));
}

/// A connection with one stream (a single download) ramps at BBR's startup gain until the RTT
/// shows a queue: the link is full sooner than at the gain of 2, and the queue at the ramp's
/// end is no longer than at the gain of 2; without the RTT, the gain of 2.89 runs to the ramp's
/// end and leaves a longer queue. A guarded connection keeps the cruise gain whether lone or not.
#[test]
fn a_lone_download_ramps_at_bbrs_startup_gain_until_it_queues() {
    let bdp = 25e6 * 0.040;
    let lone = || {
        let mut c = InflightCap::new().leading();
        c.set_lone(true);
        c
    };
    let (lone_full, lone_peak, lone_acked) = ramp(lone(), 25e6);
    let (full, peak, acked) = ramp(InflightCap::new().leading(), 25e6);
    assert!(lone_full < full, "lone: the link first full in round {lone_full}, else {full}");
    assert!(lone_acked > acked, "{lone_acked} against {acked} bytes in 1.5 s");
    assert!(lone_peak <= peak * 1.05, "peak queue {lone_peak} against {peak} at the gain of 2");
    let (blind_full, blind_peak, _) = ramp_with(lone(), 25e6, false);
    assert!(blind_full <= lone_full, "without the RTT the link is full in round {blind_full}");
    assert!(blind_peak > peak * 1.2 && blind_peak < LONE_STARTUP_GAIN * bdp, "peak queue without the RTT {blind_peak}");
    // Read once a measured round is in, the delay sticks; before, it is not read (the
    // handshake's samples).
    let mut c = lone();
    let queued = Sample { srtt: 40 * MS + queue_delay(40 * MS), ..sample(RATE, 0) };
    c.update(Instant::now(), &queued, true);
    assert_eq!(c.gain(), LONE_STARTUP_GAIN, "no measured round yet");
    let mut p = Path::new(&mut c);
    p.round(&mut c, RATE, RATE, true);
    p.round(&mut c, 2 * RATE, 2 * RATE, true);
    assert_eq!(c.gain(), LONE_STARTUP_GAIN);
    c.update(p.t + MS, &Sample { acked: p.acked, ..queued }, true);
    assert!(c.growing());
    assert_eq!(c.gain(), STARTUP_GAIN, "a queue: the ramp goes on at 2");
    c.update(p.t + 2 * MS, &Sample { acked: p.acked, ..sample(RATE, 0) }, true);
    assert_eq!(c.gain(), STARTUP_GAIN, "and stays there");
    assert_eq!(queue_delay(MS), 4 * MS);
    assert_eq!(queue_delay(400 * MS), 16 * MS);
    let mut c = InflightCap::new();
    c.update(Instant::now(), &sample(RATE, 0), true);
    assert!(c.growing());
    c.set_lone(true);
    assert_eq!(c.gain(), LONE_STARTUP_GAIN);
    c.set_guarded(true);
    assert_eq!(c.gain(), CRUISE_GAIN);
    c.set_guarded(false);
    c.set_lone(false);
    assert_eq!(c.gain(), STARTUP_GAIN);
}

/// The first doublings of a ramp, from the initial window up to an estimated BDP of
/// [`LEAD_FROM`], take a round each too: the sliding rate applies from the first reading.
#[test]
fn a_leading_bound_slides_from_the_initial_window() {
    // A first round at 200 kB/s (an 8 kB BDP at 40 ms), then half a round at 800 kB/s:
    // the last RTT delivered 24 kB in 60 ms, 400 kB/s.
    let cap_after = |mut c: InflightCap| {
        let mut p = Path::new(&mut c);
        p.round(&mut c, 200_000, 200_000, true);
        let s = Sample { acked: p.acked + 16_000, ..sample(200_000, 0) };
        c.update(p.t + 20 * MS, &s, true);
        assert!(c.growing());
        c.cap(&s)
    };
    let slack = 2.0 * 0.040 + SLACK_TIME.as_secs_f64();
    let sliding = (400_000.0 * slack) as usize + HEADROOM;
    let estimate = ((200_000.0 * slack) as usize).max(MIN_BASE) + HEADROOM;
    assert_eq!(cap_after(InflightCap::new().leading()), Some(sliding));
    assert_eq!(cap_after(InflightCap::new()), Some(estimate));
    let mut guarded = InflightCap::new().leading();
    guarded.set_guarded(true);
    let guarded_cap = ((200_000.0 * (CRUISE_GAIN * 0.040 + SLACK_TIME.as_secs_f64())) as usize).max(MIN_BASE);
    assert_eq!(cap_after(guarded), Some(guarded_cap + HEADROOM));
    // Not on a path shorter than a round (loopback, a LAN).
    let mut short = InflightCap::new().leading();
    short.update(Instant::now(), &Sample { min_rtt: MS / 2, ..sample(0, 0) }, true);
    assert!(!short.slides());
    short.update(Instant::now(), &sample(0, 0), true);
    assert!(short.slides());
}

#[test]
fn startup_gain_while_the_rate_grows() {
    let mut c = InflightCap::new();
    c.update(Instant::now(), &sample(RATE, 0), true);
    assert!(c.growing());
    assert_eq!(c.cap(&sample(RATE, 0)), Some(STARTUP_CAP));
    // A guarded connection (several urgencies seen) keeps the cruise gain while growing.
    c.set_guarded(true);
    assert_eq!(c.cap(&sample(RATE, 0)), Some(CRUISE_CAP));
    c.set_guarded(false);
    assert_eq!(c.cap(&sample(RATE, 0)), Some(STARTUP_CAP));
}

#[test]
fn small_estimates_keep_the_initial_window() {
    let mut c = InflightCap::new();
    // A rate sample from the TLS handshake: 35 kB/s.
    c.update(Instant::now(), &sample(35_000, 0), true);
    assert_eq!(c.cap(&sample(35_000, 0)), Some(MIN_BASE + HEADROOM));
}

#[test]
fn the_base_holds_ten_segments_however_large() {
    let mut c = InflightCap::new();
    // Loopback as a small-response load sees it: little delivered (app-limited), a tiny
    // RTT, and one small record in flight that TCP_INFO counts as a whole 65,483-byte segment.
    let s = Sample { min_rtt: Duration::from_micros(20), segment: 65_483, ..sample(300_000, 65_483) };
    c.update(Instant::now(), &s, true);
    assert_eq!(c.cap(&s), Some(654_830 + HEADROOM));
    assert_eq!(c.budget(&s, 1 << 20), 654_830 + HEADROOM - 65_483);
    // At an Ethernet MSS the byte floor rules, as before.
    let eth = Sample { segment: 1_448, ..s };
    assert_eq!(c.cap(&eth), Some(MIN_BASE + HEADROOM));
}

#[test]
fn fast_short_paths_are_effectively_uncapped() {
    let mut c = InflightCap::new();
    // Loopback-like: 3 GB/s, 20 µs: 15 MB, far beyond any congestion window there.
    let s = Sample { min_rtt: Duration::from_micros(20), ..sample(3_000_000_000, 0) };
    c.update(Instant::now(), &s, true);
    let cap = c.cap(&s).unwrap();
    assert!((15_119_000..=15_121_000).contains(&(cap - HEADROOM)), "{cap}");
    // Writes when the cap limits are at least a millisecond's worth (3 MB).
    assert_eq!(c.budget(&Sample { in_flight: cap - 2_000_000, ..s }, usize::MAX), 0);
}

#[test]
fn the_estimate_ages_only_in_busy_rounds() {
    let mut c = InflightCap::new();
    let mut p = Path::new(&mut c);
    p.round(&mut c, RATE, RATE, true);
    // Twenty idle rounds delivering little (application-limited): the maximum stays.
    for _ in 0..20 {
        p.round(&mut c, RATE / 10, RATE / 10, false);
    }
    assert_eq!(c.max_rate(), RATE);
    // Busy rounds at a lower rate: after the window the old maximum is gone.
    for _ in 0..=WINDOW_ROUNDS {
        p.round(&mut c, RATE / 2, RATE / 2, true);
    }
    assert_eq!(c.max_rate(), RATE / 2);
}

#[test]
fn bunched_acks_do_not_inflate_the_estimate() {
    let mut c = InflightCap::new();
    let mut p = Path::new(&mut c);
    // Before a round has ended, the kernel's samples are all there is.
    c.update(p.t + MS, &sample(RATE, 0), true);
    assert_eq!(c.max_rate(), RATE);
    // Rounds deliver at the link's rate while single samples spike 28 % above it.
    for _ in 0..5 {
        p.round(&mut c, RATE, RATE * 128 / 100, true);
    }
    assert!((RATE * 99 / 100..=RATE).contains(&c.max_rate()), "{}", c.max_rate());
    let cap = c.cap(&sample(RATE, 0)).unwrap();
    assert!(cap <= CRUISE_CAP && CRUISE_CAP - cap < 100, "{cap}");
}

#[test]
fn partly_idle_rounds_do_not_count() {
    let mut c = InflightCap::new();
    let mut p = Path::new(&mut c);
    p.round(&mut c, RATE, RATE, true);
    assert_eq!(c.max_rate(), RATE);
    // A silence of a second, then a busy reading: the "round" spans the gap, and the little
    // it delivered says nothing about the path.
    for _ in 0..WINDOW_ROUNDS + 1 {
        p.t += 1000 * MS;
        p.round(&mut c, RATE / 100, RATE / 100, true);
    }
    assert_eq!(c.max_rate(), RATE);
    // Rounds with an idle reading in the middle do not count either.
    for _ in 0..WINDOW_ROUNDS + 1 {
        c.update(p.t + 20 * MS, &Sample { acked: p.acked, ..sample(RATE, 0) }, false);
        p.round(&mut c, RATE / 2, RATE / 2, true);
    }
    assert_eq!(c.max_rate(), RATE);
}

/// Idle moments noted without a reading leave the bound where idle readings would have:
/// two bounds fed the same busy readings, one also every idle reading and the other only
/// those `note_idle` declines, agree after every step, on paths where the bound leads and
/// where it does not, through ramps, flat stretches, slowdowns and silences.
#[test]
fn noting_an_idle_moment_is_an_idle_reading() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let (mut noted, mut declined) = (0, 0);
    for (rtt, lead) in [(40 * MS, true), (40 * MS, false), (MS / 20, true), (3 * MS, true)] {
        let new = || if lead { InflightCap::new().leading() } else { InflightCap::new() };
        let (mut a, mut b) = (new(), new());
        let mut t = Instant::now();
        let mut acked = 0;
        let mut rate = 1_000_000_u64;
        let mut busy_of_20 = 10;
        for step in 0..4_000 {
            // The path changes now and then (faster: a ramp; slower; or the same), and so
            // does the load: busy almost throughout, half the time, or seldom.
            if step % 100 == 0 {
                rate = match next(3) {
                    0 => (rate * 4).min(1 << 31),
                    1 => (rate / 3).max(10_000),
                    _ => rate,
                };
                busy_of_20 = [19, 10, 2][next(3) as usize];
            }
            // Readings a tenth of an RTT to two RTTs apart, now and then a long silence.
            let gap = if next(50) == 0 { 3 * rtt + 200 * MS } else { rtt.mul_f64((1 + next(20)) as f64 / 10.0) };
            t += gap;
            let busy = next(20) < busy_of_20;
            let delivered = (rate as f64 * gap.as_secs_f64()) as u64;
            acked += if busy { delivered } else { delivered / 4 };
            let s = Sample {
                delivery_rate: rate + next(rate / 4),
                acked,
                min_rtt: rtt,
                in_flight: next(50_000) as usize,
                notsent_bytes: 0,
                segment: 1_448,
                settled: false,
                srtt: Duration::ZERO,
            };
            a.update(t, &s, busy);
            if busy {
                b.update(t, &s, busy);
            } else if b.note_idle(t, false) {
                noted += 1;
            } else {
                declined += 1;
                b.update(t, &s, busy);
            }
            let what = |c: &InflightCap| {
                let round_started = c.round_start.map(|(t, _)| t);
                (c.growing(), c.gain(), c.busy, c.recent_rate, round_started, c.rounds.clone())
            };
            let estimate = |c: &InflightCap| (c.cap(&s), c.budget(&s, 1 << 20), c.max_rate());
            assert_eq!(what(&a), what(&b), "rtt {rtt:?}, lead {lead}, step {step}");
            if a.rounds.is_empty() {
                // Before a busy round has ended, the idle readings' kernel samples and floors
                // are what noting forgoes: never a larger estimate.
                assert!(b.max_rate() <= a.max_rate(), "rtt {rtt:?}, lead {lead}, step {step}");
                assert!(b.cap(&s) <= a.cap(&s) && b.cap(&s).is_some() == a.cap(&s).is_some());
            } else {
                assert_eq!(estimate(&a), estimate(&b), "rtt {rtt:?}, lead {lead}, step {step}");
            }
        }
    }
    assert!(noted > 1_000 && declined > 10, "noted {noted}, declined {declined}");
}

/// After a reading that found everything acknowledged, a quiet idle moment (nothing
/// written since) replays that reading: the bound ends where idle readings (which would
/// read the same) leave it, in a ramp and after it, leading or not, through silences that
/// end rounds. After a reading with bytes in flight it does not.
#[test]
fn a_quiet_moment_after_a_settled_reading_is_that_reading_again() {
    for lead in [true, false] {
        let new = || if lead { InflightCap::new().leading() } else { InflightCap::new() };
        for busy_rounds in [0, 1, 12] {
            let (mut a, mut b) = (new(), new());
            let mut t = Instant::now();
            let mut acked = 0;
            // Busy rounds first (none: a connection that only receives), then it settles.
            for _ in 0..busy_rounds * 4 {
                t += 10 * MS;
                acked += RATE / 100;
                let s = Sample { acked, ..sample(RATE, 100_000) };
                a.update(t, &s, true);
                b.update(t, &s, true);
            }
            let settled = Sample { acked, settled: true, ..sample(RATE, 0) };
            t += 5 * MS;
            a.update(t, &settled, false);
            b.update(t, &settled, false);
            for step in 0..400 {
                t += if step % 50 == 0 { 300 * MS } else { MS / 4 };
                a.update(t, &settled, false);
                assert!(b.note_idle(t, true), "lead {lead}, busy rounds {busy_rounds}: replayed");
                let what = |c: &InflightCap| {
                    (c.cap(&settled), c.max_rate(), c.growing(), c.gain(), c.busy, c.recent_rate, c.round_start)
                };
                assert_eq!(what(&a), what(&b), "lead {lead}, busy rounds {busy_rounds}, step {step}");
            }
            // Bytes in flight at the last reading: no replay, and with no busy round ended
            // and no rate sample from the kernel yet no noting either (the reading is needed).
            let mut c = new();
            c.update(t, &Sample { acked, ..sample(0, 5_000) }, false);
            assert!(!c.note_idle(t + MS, true), "not settled, no estimate: read again");
            // With one, the moment is noted as idle (see `note_idle`), except in a leading
            // ramp, which keeps the readings of the last RTT.
            c.update(t + MS, &Sample { acked, ..sample(RATE, 5_000) }, false);
            assert_eq!(c.note_idle(t + 2 * MS, true), !lead, "not settled, a kernel sample: noted");
            // Something written since the settled reading: not replayed (and with no estimate
            // yet, not noted either).
            let mut d = new();
            d.update(t, &Sample { delivery_rate: 0, ..settled }, false);
            assert!(!d.note_idle(t + MS, false), "written since: read again");
        }
    }
}

#[test]
fn application_limited_rounds_give_a_floor_until_a_busy_round_ends() {
    let mut c = InflightCap::new();
    let mut p = Path::new(&mut c);
    // Quiet rounds (a page's first requests): their rate is the only estimate.
    p.round(&mut c, RATE / 10, 0, false);
    assert_eq!(c.max_rate(), RATE / 10);
    assert_eq!(c.cap(&sample(RATE / 10, 0)), Some(MIN_BASE + HEADROOM));
    p.round(&mut c, RATE / 5, 0, false);
    assert_eq!(c.max_rate(), RATE / 5);
    // Busy rounds (the first reading busy begins one) replace the floor with a measurement.
    p.round(&mut c, RATE, 0, true);
    p.round(&mut c, RATE, 0, true);
    assert_eq!(c.max_rate(), RATE);
    // Later quiet rounds change nothing.
    p.round(&mut c, 2 * RATE, 0, false);
    assert_eq!(c.max_rate(), RATE);
}

#[test]
fn min_rtt_expires_after_one_to_two_windows() {
    let mut m = MinRtt::new();
    assert_eq!(m.get(), Duration::ZERO);
    let t0 = Instant::now();
    m.update(t0, 40 * MS);
    m.update(t0 + MS, 60 * MS);
    assert_eq!(m.get(), 40 * MS);
    // A competing flow's queue: every later sample is 300 ms or more. The 40 ms sample
    // counts until the generation after its own has started.
    for s in 1..=19 {
        m.update(t0 + Duration::from_secs(s), (300 + s as u32) * MS);
        assert_eq!(m.get(), 40 * MS, "at {s} s");
    }
    m.update(t0 + Duration::from_secs(20), 400 * MS);
    assert_eq!(m.get(), 310 * MS);
    // A lower sample counts at once.
    m.update(t0 + Duration::from_secs(21), 41 * MS);
    assert_eq!(m.get(), 41 * MS);
}

#[test]
fn retry_when_the_rate_will_have_made_room() {
    let mut c = InflightCap::new();
    let t0 = Instant::now();
    c.update(t0, &sample(RATE, 0), true);
    c.update(t0 + 41 * MS, &sample(RATE, 0), true);
    let cap = c.cap(&sample(RATE, 0)).unwrap();
    // Full: MIN_SEND (4096 bytes) drains in 6.55 ms at 625 kB/s.
    assert_eq!(c.retry_after(&sample(RATE, cap)).as_micros(), 6_553);
    // Far over the cap (a loss burst): at most a quarter of the RTT.
    assert_eq!(c.retry_after(&sample(RATE, cap + 1_000_000)), 10 * MS);
    // No estimate, or room already: the shortest wait.
    assert_eq!(InflightCap::new().retry_after(&sample(RATE, 0)), MS);
    assert_eq!(c.retry_after(&sample(RATE, 0)), MS);
}
