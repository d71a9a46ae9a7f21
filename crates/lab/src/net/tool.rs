//! `sluice-lab tool ...` (hidden): small traffic endpoints to run inside the namespaces with
//! [`ns_command`](super::ns_command), for the accuracy tests and for measuring the link by hand.
//! Each prints one JSON object on stdout and exits; each is bounded in time.
//!
//! ```text
//! ip netns exec sluice-lab-s sluice-lab tool tcp-sink --listen 10.99.0.2:5201
//! ip netns exec sluice-lab-c sluice-lab tool tcp-send --connect 10.99.0.2:5201 --secs 10 --cc bbr
//! ip netns exec sluice-lab-s sluice-lab tool udp-echo --listen 10.99.0.2:7
//! ip netns exec sluice-lab-c sluice-lab tool udp-ping --connect 10.99.0.2:7 --count 20 --interval-ms 10
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Arguments of `sluice-lab tool`.
#[derive(clap::Args, Debug)]
pub struct ToolArgs {
    #[command(subcommand)]
    tool: Tool,
}

/// Where a TCP tool finds its peer.
#[derive(clap::Args, Debug, Clone)]
struct Endpoint {
    /// Accept one connection on this address.
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    listen: Option<SocketAddr>,
    /// Connect to this address (retrying for 5 s while refused).
    #[arg(long)]
    connect: Option<SocketAddr>,
}

#[derive(clap::Subcommand, Debug)]
enum Tool {
    /// Receive one TCP stream until EOF; report the goodput, overall and after `--skip-secs`.
    TcpSink {
        #[command(flatten)]
        ep: Endpoint,
        /// Seconds after the first byte that the steady-state figure leaves out (slow start).
        #[arg(long, default_value_t = 2.0)]
        skip_secs: f64,
        /// Give up after this many seconds in all.
        #[arg(long, default_value_t = 60.0)]
        timeout_secs: f64,
    },
    /// Send one TCP stream for `--secs` seconds, then close.
    TcpSend {
        #[command(flatten)]
        ep: Endpoint,
        /// Seconds of sending.
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
        /// Congestion control of the sending socket (TCP_CONGESTION), e.g. cubic, bbr, reno.
        #[arg(long)]
        cc: Option<String>,
        /// Give up after this many seconds in all.
        #[arg(long, default_value_t = 60.0)]
        timeout_secs: f64,
    },
    /// Echo UDP datagrams back to their sender until `--idle-secs` without any.
    UdpEcho {
        #[arg(long)]
        listen: SocketAddr,
        /// Exit after this many seconds without a datagram.
        #[arg(long, default_value_t = 10.0)]
        idle_secs: f64,
        /// Exit after this many seconds in all.
        #[arg(long, default_value_t = 120.0)]
        timeout_secs: f64,
    },
    /// Send numbered, timestamped UDP datagrams to an echo; report round-trip times and loss.
    UdpPing {
        #[arg(long)]
        connect: SocketAddr,
        /// Datagrams to send.
        #[arg(long, default_value_t = 20)]
        count: u32,
        /// Microseconds between datagrams.
        #[arg(long, default_value_t = 10_000)]
        interval_us: u64,
        /// Datagram payload size in bytes (16–65000).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Milliseconds to wait for replies after the last datagram.
        #[arg(long, default_value_t = 1000)]
        wait_ms: u64,
    },
}

/// `sluice-lab tool ...`.
pub fn tool_main(a: ToolArgs) -> Result<(), String> {
    let out = match a.tool {
        Tool::TcpSink { ep, skip_secs, timeout_secs } => {
            watchdog(timeout_secs);
            tcp_sink(&ep, skip_secs)?
        }
        Tool::TcpSend { ep, secs, cc, timeout_secs } => {
            watchdog(timeout_secs);
            tcp_send(&ep, secs, cc.as_deref())?
        }
        Tool::UdpEcho { listen, idle_secs, timeout_secs } => {
            watchdog(timeout_secs);
            udp_echo(listen, idle_secs)?
        }
        Tool::UdpPing { connect, count, interval_us, size, wait_ms } => {
            let secs = count as f64 * interval_us as f64 / 1e6 + wait_ms as f64 / 1e3;
            watchdog(secs + 30.0);
            udp_ping(connect, count, Duration::from_micros(interval_us), size, Duration::from_millis(wait_ms))?
        }
    };
    println!("{out}");
    Ok(())
}

/// Ends the process after `secs` whatever it is doing (every tool is bounded in time).
fn watchdog(secs: f64) {
    let secs = if secs.is_finite() && secs > 0.0 { secs.min(86_400.0) } else { 60.0 };
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(secs));
        eprintln!("sluice-lab tool: timed out after {secs} s");
        std::process::exit(3);
    });
}

fn stream(ep: &Endpoint) -> Result<TcpStream, String> {
    if let Some(addr) = ep.listen {
        let l = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept on {addr}: {e}"))?;
        return Ok(s);
    }
    let Some(addr) = ep.connect else { return Err("give --listen or --connect".into()) };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("connect {addr}: {e}")),
        }
    }
}

fn tcp_sink(ep: &Endpoint, skip_secs: f64) -> Result<serde_json::Value, String> {
    let mut s = stream(ep)?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    let mut first: Option<Instant> = None;
    let mut after_skip = 0u64;
    let mut skip_end: Option<Instant> = None;
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("read: {e}")),
        };
        let now = Instant::now();
        let t0 = *first.get_or_insert(now);
        total += n as u64;
        match skip_end {
            Some(_) => after_skip += n as u64,
            None if now.duration_since(t0).as_secs_f64() >= skip_secs => skip_end = Some(now),
            None => {}
        }
    }
    let end = Instant::now();
    let secs = first.map_or(0.0, |t| end.duration_since(t).as_secs_f64());
    let steady_secs = skip_end.map_or(0.0, |t| end.duration_since(t).as_secs_f64());
    let mbit = |bytes: u64, secs: f64| if secs > 0.0 { bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 };
    Ok(serde_json::json!({
        "bytes": total,
        "secs": secs,
        "mbit": mbit(total, secs),
        "steady_bytes": after_skip,
        "steady_secs": steady_secs,
        "steady_mbit": mbit(after_skip, steady_secs),
    }))
}

fn set_cc(s: &TcpStream, cc: &str) -> Result<String, String> {
    let fd = s.as_raw_fd();
    // SAFETY: `cc` points to `cc.len()` readable bytes for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_ptr().cast(), cc.len() as libc::socklen_t)
    };
    if rc != 0 {
        return Err(format!("TCP_CONGESTION {cc}: {}", std::io::Error::last_os_error()));
    }
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: `name` is a live 16-byte buffer and `len` holds its size.
    let rc =
        unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(format!("TCP_CONGESTION: {}", std::io::Error::last_os_error()));
    }
    let got = &name[..(len as usize).min(name.len())];
    let got = got.split(|&b| b == 0).next().unwrap_or_default();
    Ok(String::from_utf8_lossy(got).into_owned())
}

fn tcp_send(ep: &Endpoint, secs: f64, cc: Option<&str>) -> Result<serde_json::Value, String> {
    let mut s = stream(ep)?;
    let cc = match cc {
        Some(cc) => set_cc(&s, cc)?,
        None => String::new(),
    };
    let buf = vec![0x5au8; 256 * 1024];
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs.clamp(0.0, 3600.0));
    let mut total = 0u64;
    while Instant::now() < until {
        match s.write(&buf) {
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    s.shutdown(std::net::Shutdown::Write).map_err(|e| format!("shutdown: {e}"))?;
    // Wait for the peer to close, so that the process ends when the data has arrived.
    let mut tail = [0u8; 1024];
    while matches!(s.read(&mut tail), Ok(n) if n > 0) {}
    let secs = start.elapsed().as_secs_f64();
    Ok(serde_json::json!({ "bytes": total, "secs": secs, "cc": cc }))
}

fn udp_echo(listen: SocketAddr, idle_secs: f64) -> Result<serde_json::Value, String> {
    let sock = UdpSocket::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
    let idle = Duration::from_secs_f64(if idle_secs.is_finite() && idle_secs > 0.0 { idle_secs } else { 10.0 });
    sock.set_read_timeout(Some(idle)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let mut echoed = 0u64;
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                if sock.send_to(&buf[..n], from).is_ok() {
                    echoed += 1;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("recv: {e}")),
        }
    }
    Ok(serde_json::json!({ "echoed": echoed }))
}

fn udp_ping(
    to: SocketAddr,
    count: u32,
    interval: Duration,
    size: usize,
    wait: Duration,
) -> Result<serde_json::Value, String> {
    if !(16..=65000).contains(&size) {
        return Err(format!("--size {size}: must be within 16–65000"));
    }
    let local: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().map_err(|_| "addr")?;
    let sock = UdpSocket::bind(local).map_err(|e| format!("bind: {e}"))?;
    sock.connect(to).map_err(|e| format!("connect {to}: {e}"))?;
    wait_for_echo(&sock, size)?;
    let sender = sock.try_clone().map_err(|e| e.to_string())?;
    let epoch = Instant::now();
    let send_thread = std::thread::spawn(move || {
        let mut pkt = vec![0u8; size];
        let mut sent = 0u32;
        for seq in 0..count {
            let due = epoch + interval * seq;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            pkt[..8].copy_from_slice(&u64::from(seq).to_le_bytes());
            pkt[8..16].copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_le_bytes());
            // A refused or full send counts as lost.
            if sender.send(&pkt).is_ok() {
                sent += 1;
            }
        }
        (sent, Instant::now())
    });
    sock.set_read_timeout(Some(Duration::from_millis(20))).map_err(|e| e.to_string())?;
    let mut seen = vec![false; count as usize];
    let mut rtts: Vec<f64> = Vec::with_capacity(count as usize);
    let mut buf = vec![0u8; 65536];
    while !send_thread.is_finished() {
        recv_one(&sock, &mut buf, epoch, &mut seen, &mut rtts);
    }
    let (sent, done_at) = send_thread.join().map_err(|_| "the sending thread panicked".to_string())?;
    while done_at.elapsed() < wait && rtts.len() < sent as usize {
        recv_one(&sock, &mut buf, epoch, &mut seen, &mut rtts);
    }
    let received = rtts.len();
    rtts.sort_by(f64::total_cmp);
    let pick = |q: f64| rtts.get(((rtts.len() as f64 - 1.0) * q).round() as usize).copied();
    let mean = if rtts.is_empty() { None } else { Some(rtts.iter().sum::<f64>() / rtts.len() as f64) };
    let loss_pct = if sent > 0 { 100.0 * (1.0 - received as f64 / sent as f64) } else { 0.0 };
    Ok(serde_json::json!({
        "sent": sent,
        "received": received,
        "loss_pct": loss_pct,
        "rtt_min_ms": pick(0.0),
        "rtt_median_ms": pick(0.5),
        "rtt_mean_ms": mean,
        "rtt_p99_ms": pick(0.99),
        "rtt_max_ms": pick(1.0),
    }))
}

/// Sends probes (sequence number `u64::MAX`, not counted) until the echo answers, for up to 5 s,
/// so that a measurement does not start before the echo is listening.
fn wait_for_echo(sock: &UdpSocket, size: usize) -> Result<(), String> {
    let mut probe = vec![0u8; size];
    probe[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut buf = vec![0u8; 65536];
    sock.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        // Refused (nobody listening yet) is expected here.
        let _ = sock.send(&probe);
        if matches!(sock.recv(&mut buf), Ok(n) if n >= 8 && buf[..8] == probe[..8]) {
            // Late answers to earlier probes are ignored: their number is out of range.
            return Ok(());
        }
    }
    Err("no answer from the echo within 5 s".into())
}

fn recv_one(sock: &UdpSocket, buf: &mut [u8], epoch: Instant, seen: &mut [bool], rtts: &mut Vec<f64>) {
    let Ok(n) = sock.recv(buf) else { return };
    let now_ns = epoch.elapsed().as_nanos() as u64;
    if n < 16 {
        return;
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&buf[..8]);
    let seq = u64::from_le_bytes(word) as usize;
    word.copy_from_slice(&buf[8..16]);
    let sent_ns = u64::from_le_bytes(word);
    if let Some(s) = seen.get_mut(seq) {
        if !*s {
            *s = true;
            rtts.push(now_ns.saturating_sub(sent_ns) as f64 / 1e6);
        }
    }
}
