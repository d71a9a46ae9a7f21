//! Accuracy of the emulated link, measured between the two namespaces (root and /dev/net/tun
//! needed; skipped with a note otherwise).
//!
//! The namespace names are fixed, so one `#[test]` runs the cases in sequence on one lab (the
//! lab also holds a lock file against other processes). Every case is bounded in time; the whole
//! file takes about 35 s. The traffic endpoints are `sluice-lab tool ...` run with
//! `ip netns exec`, and are killed if a case fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_lab::model::{DirSpec, LinkSpec, Queue};
use sluice_lab::net::{self, Lab, CLIENT_NS, SERVER_ADDR, SERVER_NS};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-lab");

/// A child process killed if the test ends early.
struct Guard(Option<Child>);

impl Guard {
    fn spawn(mut c: Command) -> Self {
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        Self(Some(c.spawn().expect("spawn a tool")))
    }

    /// Waits for the tool's JSON answer.
    fn json(mut self) -> serde_json::Value {
        let child = self.0.take().expect("child");
        let out = child.wait_with_output().expect("wait for a tool");
        assert!(out.status.success(), "tool failed: {}", out.status);
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("tool output {text:?}: {e}"))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tool(ns: &str, args: &[&str]) -> Guard {
    let mut c = net::ns_command(ns, BIN);
    c.arg("tool").args(args);
    Guard::spawn(c)
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// UDP round trips through the link: returns the tool's report.
fn ping(count: u32, interval_us: u64, port: u16) -> serde_json::Value {
    let echo = tool(SERVER_NS, &["udp-echo", "--listen", &format!("{SERVER_ADDR}:{port}"), "--idle-secs", "2"]);
    let report = tool(
        CLIENT_NS,
        &[
            "udp-ping",
            "--connect",
            &format!("{SERVER_ADDR}:{port}"),
            "--count",
            &count.to_string(),
            "--interval-us",
            &interval_us.to_string(),
        ],
    )
    .json();
    drop(echo);
    report
}

/// Idle RTT: the fastest of 100 UDP round trips is within 1 ms of 2 × the one-way delay (the
/// median is ~0.2 ms above on an idle host: the two forwarder hops and the two endpoints each
/// wake up once).
fn idle_rtt(lab: &Lab, one_way_ms: u64) -> Result<(), String> {
    lab.set_link(&LinkSpec::symmetric(200.0, Duration::from_millis(one_way_ms)));
    let r = ping(100, 10_000, 7000 + one_way_ms as u16);
    let (median, min) = (f(&r, "rtt_median_ms"), f(&r, "rtt_min_ms"));
    let want = 2.0 * one_way_ms as f64;
    eprintln!("idle RTT at {one_way_ms} ms one-way: median {median:.3} ms, min {min:.3} ms (want {want} ms)");
    assert_eq!(f(&r, "received"), 100.0, "{r}");
    // Early delivery is a bug whatever the load: never retried.
    assert!(min >= want - 0.2, "min RTT {min} ms below {want} ms: packets delivered early");
    // The emulator's accuracy is the floor it imposes: the fastest round trip is within 1 ms of
    // 2 × delay. The median (printed above) adds the host's scheduling delays, which on a shared
    // 2-core machine can be several milliseconds for seconds at a time, so it is reported, and
    // only checked for sanity here.
    check(min - want < 1.0, format!("min RTT {min} ms, want {want} + < 1 ms"))?;
    check(median - want < 10.0, format!("median RTT {median} ms, more than 10 ms above {want} ms"))
}

fn check(ok: bool, why: String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why)
    }
}

/// Run a timing measurement up to three times: these machines are shared, and a neighbour's
/// burst of CPU shows up as RTT or throughput the emulator did not cause. Fails only when every
/// attempt misses; each miss is printed.
fn attempts(what: &str, mut measure: impl FnMut() -> Result<(), String>) {
    let mut misses = Vec::new();
    for attempt in 1..=3 {
        match measure() {
            Ok(()) => return,
            Err(why) => {
                eprintln!("{what}: attempt {attempt} missed: {why}");
                misses.push(why);
                // Let a burst of load on the host pass before measuring again.
                std::thread::sleep(Duration::from_secs(3));
            }
        }
    }
    panic!("{what}: every attempt missed: {misses:?}");
}

/// Bulk TCP client → server at 200 Mbit/s and a 40 ms RTT for 10 s with congestion control `cc`.
///
/// The sink measures goodput after the first 2 s (slow start and its overshoot), until the end
/// of the stream. The ceiling of goodput is the rate × 1448/1500 (IP and TCP headers with
/// timestamps are part of the rate): the test wants ≥ 95 % of that, and ≥ 95 % of the rate in
/// IP bytes through the forwarder over the same window (its own counters). BBR's goodput is a
/// little lower (~97 %): its ProbeRTT, 10 s after the connection's first RTT sample, drains the
/// pipe for ~200 ms at the end of the transfer, after the forwarder's window.
fn bulk(lab: &Lab, cc: &str, port: u16) -> Result<(), String> {
    let rate = 200.0;
    lab.set_link(&LinkSpec::symmetric(rate, Duration::from_millis(20)));
    let addr = format!("{SERVER_ADDR}:{port}");
    let sink = tool(SERVER_NS, &["tcp-sink", "--listen", &addr, "--skip-secs", "2", "--timeout-secs", "30"]);
    let sender = tool(CLIENT_NS, &["tcp-send", "--connect", &addr, "--secs", "10", "--cc", cc, "--timeout-secs", "30"]);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let s0 = lab.stats();
    std::thread::sleep(Duration::from_millis(7000));
    let window = lab.stats().since(&s0);
    let sent = sender.json();
    let got = sink.json();
    assert_eq!(sent["cc"].as_str(), Some(cc), "{sent}");
    let goodput = f(&got, "steady_mbit");
    let ceiling = rate * 1448.0 / 1500.0;
    let wire = window.mbit(&window.up);
    eprintln!(
        "bulk {cc} at {rate} Mbit/s, 40 ms RTT: goodput {goodput:.1} Mbit/s after 2 s ({:.1} % of the {ceiling:.1} \
         possible), link {wire:.1} Mbit/s ({:.1} %), forwarder CPU {:.0} % of a core, queue drops {}, {:.1} s",
        100.0 * goodput / ceiling,
        100.0 * wire / rate,
        window.cpu_pct(),
        window.up.dropped_queue,
        t0.elapsed().as_secs_f64(),
    );
    assert_eq!(f(&got, "bytes"), f(&sent, "bytes"), "sink and sender disagree");
    // More than the rate is an emulator bug whatever the load: never retried.
    assert!(wire <= 1.01 * rate, "{cc}: link carried {wire} Mbit/s, more than the rate {rate}");
    // CUBIC fills the queue, so it measures the emulator's rate itself: 95 %. BBR paces from
    // its own model: ProbeRTT drains the pipe about 2 % of the time, and on this shared VM a
    // moment of CPU steal reads as a lower delivery rate that BBR then paces at for a while
    // (measured 93-97 % on a quiet host, down to 83 % while busy). Those points are not the
    // emulator's error; 90 % still catches a BBR that never leaves startup or stalls.
    let want = if cc == "bbr" { 0.90 } else { 0.95 };
    let pct = want * 100.0;
    check(goodput >= want * ceiling, format!("{cc}: goodput {goodput} Mbit/s < {pct} % of {ceiling}"))?;
    check(wire >= want * rate, format!("{cc}: link carried {wire} Mbit/s < {pct} % of {rate}"))
}

/// 2 % random loss client → server, none back: 20,000 UDP round trips lose 2 % ± 20 %.
fn loss(lab: &Lab) {
    let mut spec = LinkSpec::symmetric(200.0, Duration::from_millis(5));
    spec.up.loss_pct = 2.0;
    lab.set_link(&spec);
    let before = lab.stats();
    let r = ping(20_000, 100, 7100);
    let counted = lab.stats().since(&before);
    let measured = f(&r, "loss_pct");
    eprintln!(
        "loss 2 % up: measured {measured:.2} % of {} round trips; forwarder dropped {} up, {} down",
        f(&r, "sent"),
        counted.up.dropped_loss,
        counted.down.dropped_loss
    );
    assert_eq!(f(&r, "sent"), 20_000.0, "{r}");
    assert!((measured - 2.0).abs() <= 0.4, "measured loss {measured} %, want 2 % ± 20 %");
    assert_eq!(counted.down.dropped(), 0);
    assert_eq!(counted.up.dropped_queue, 0);
    let lost = 20_000.0 - f(&r, "received");
    assert!((counted.up.dropped_loss as f64 - lost).abs() <= 2.0, "forwarder counted {counted:?}, pinger lost {lost}");
}

/// A tiny queue at a low rate drops a burst's tail: the queue is enforced.
fn queue(lab: &Lab) {
    let dir = DirSpec { rate_mbit: 1.0, delay: Duration::from_millis(1), queue: Queue::Packets(5), loss_pct: 0.0 };
    lab.set_link(&LinkSpec { up: dir, down: DirSpec { queue: Queue::Packets(1000), ..dir } });
    let before = lab.stats();
    // 200 datagrams of 1000 B as fast as possible: at 1 Mbit/s each takes 8 ms to serialise.
    let r = tool(
        CLIENT_NS,
        &[
            "udp-ping",
            "--connect",
            &format!("{SERVER_ADDR}:7200"),
            "--count",
            "200",
            "--interval-us",
            "0",
            "--size",
            "1000",
        ],
    );
    let echo = tool(SERVER_NS, &["udp-echo", "--listen", &format!("{SERVER_ADDR}:7200"), "--idle-secs", "2"]);
    let r = r.json();
    drop(echo);
    let c = lab.stats().since(&before);
    eprintln!(
        "queue 5p at 1 Mbit/s: {} of 200 answered, forwarder dropped {} by the queue",
        r["received"], c.up.dropped_queue
    );
    assert!(c.up.dropped_queue >= 150, "{c:?}");
    assert!(f(&r, "received") >= 5.0, "{r}");
    // The queue readings: the burst found the queue full (5 packets of 1028 B, 8.2 ms each at
    // 1 Mbit/s, and the one on the wire), the datagrams coming back found it empty.
    let (up, down) = (c.up.queue(), c.down.queue());
    eprintln!("queue readings: up {up}; down {down}");
    // (A window's peak bytes are exact to within their histogram bucket, 1.6 %.)
    assert_eq!(up.peak_packets, 5, "{up:?}");
    assert!((5 * 1028..=5 * 1028 * 65 / 64).contains(&up.peak_bytes), "{up:?}");
    assert_eq!(up.p95_packets, 5, "{up:?}");
    assert!((40.0..=50.0).contains(&up.peak_ms), "{up:?}");
    assert!(up.arrivals >= 200 && down.peak_packets <= 1, "{up:?} {down:?}");
}

/// `sluice-lab link` sets the link up, answers through it, and on SIGTERM prints the counters
/// and removes the namespaces.
fn link_command() {
    use std::io::{BufRead, BufReader, Read};
    let mut c = Command::new(BIN);
    c.args(["link", "--rate", "50", "--delay", "2", "--loss-down", "1", "--wait", "120"]);
    c.stdout(Stdio::piped());
    let mut link = Guard(Some(c.spawn().expect("spawn sluice-lab link")));
    let child = link.0.as_mut().expect("child");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(150);
    while !text.contains("Ctrl-C") {
        assert!(Instant::now() < deadline, "no banner from sluice-lab link: {text}");
        let mut line = String::new();
        if out.read_line(&mut line).expect("read the banner") == 0 {
            panic!("sluice-lab link ended: {text}");
        }
        text.push_str(&line);
    }
    assert!(text.contains("50 Mbit/s, 2 ms one-way") && text.contains("loss 1 %"), "{text}");
    let r = ping(50, 2000, 7300);
    // Traffic flows with the delay asked for: the floor is exact, the median only sane (the
    // ±1 ms accuracy is checked above, with retries against a busy host).
    let (min, median) = (f(&r, "rtt_min_ms"), f(&r, "rtt_median_ms"));
    assert!((3.8..5.0).contains(&min) && median < 9.0, "{r}");
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read the report");
    let status = link.0.take().expect("child").wait().expect("wait for sluice-lab link");
    assert!(status.success(), "{status}: {rest}");
    assert!(
        rest.contains("forwarder CPU") && rest.contains("namespaces sluice-lab-c and sluice-lab-s removed"),
        "{rest}"
    );
    for ns in [CLIENT_NS, SERVER_NS] {
        assert!(!std::path::Path::new("/run/netns").join(ns).exists(), "namespace {ns} left behind");
    }
    eprintln!("sluice-lab link: ok; its report:\n{}", rest.trim());
}

#[test]
fn link_accuracy() {
    if let Err(why) = net::available() {
        eprintln!("SKIP link_accuracy: {why}");
        return;
    }
    let start = Instant::now();
    let lab = Lab::start(&LinkSpec::symmetric(200.0, Duration::from_millis(20))).expect("start the lab");
    for ns in [CLIENT_NS, SERVER_NS] {
        let rmem = net::sysctl_get_in(ns, "net.ipv4.tcp_rmem").expect("read tcp_rmem");
        assert!(rmem.ends_with("67108864"), "{ns}: tcp_rmem {rmem}");
    }
    attempts("idle RTT 20 ms", || idle_rtt(&lab, 20));
    attempts("idle RTT 5 ms", || idle_rtt(&lab, 5));
    let mut port = 5200;
    attempts("bulk cubic", || {
        port += 1;
        bulk(&lab, "cubic", port)
    });
    attempts("bulk bbr", || {
        port += 1;
        bulk(&lab, "bbr", port)
    });
    loss(&lab);
    queue(&lab);
    let stats = lab.stop();
    eprintln!("lab total:\n{stats}");
    assert_eq!(stats.up.errors + stats.down.errors, 0, "{stats:?}");
    for ns in [CLIENT_NS, SERVER_NS] {
        assert!(!std::path::Path::new("/run/netns").join(ns).exists(), "namespace {ns} left behind");
    }
    link_command();
    eprintln!("link_accuracy: {:.1} s", start.elapsed().as_secs_f64());
}
