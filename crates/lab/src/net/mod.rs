//! Namespaces, TUN devices and the forwarder that applies the link model.
//!
//! # `sluice-lab link`
//!
//! ```text
//! sluice-lab link --rate 200 --delay 20 [--queue 1000p|1.5MB] [--loss 0.5] [--mtu 1500]
//!                 [--rate-up X --rate-down Y] [--delay-up MS --delay-down MS]
//!                 [--loss-up PCT --loss-down PCT] [--queue-up Q --queue-down Q] [--stats-every SECS]
//!                 [--seed N] [--wait SECS]
//! ```
//!
//! Creates two network namespaces, `sluice-lab-c` (the client, 10.99.0.1 on `slab-c`) and
//! `sluice-lab-s` (the server, 10.99.0.2 on `slab-s`), joined by an emulated link, and runs until
//! SIGINT (Ctrl-C), SIGTERM or SIGHUP; then prints the forwarder's counters (packets, drops, CPU,
//! and the queue as arriving packets found it: p50/p95/peak in packets and ms, peak bytes) and
//! removes the namespaces. Needs root.
//!
//! - `--rate`: Mbit/s (10^6 bit/s of IP packets) each way; 0 = unlimited.
//! - `--delay`: one-way delay in ms each way (so the RTT is twice it): `--rate 200 --delay 20`
//!   is 200 Mbit/s with a 40 ms RTT.
//! - `--queue`: the drop-tail queue in front of each serialiser, in packets (`1000p`) or bytes
//!   (`1.5MB`, `64KB`, `64KiB`). Default: 1.5 × the bandwidth-delay product of that direction
//!   (rate × RTT), at least 30 KB: enough for Cubic to keep the link busy after a loss without a
//!   standing queue many times the RTT (1.5 MB at 200 Mbit/s × 40 ms).
//! - `--loss`: random loss in percent of packets, each way.
//! - `--*-up` / `--*-down`: override one direction (up = client → server).
//! - `--mtu`: MTU of both TUN devices (1500; 9000 cuts the forwarder's work at high rates).
//! - `--stats-every`: print the counters of each such period; `--seed`: of the random loss;
//!   `--wait`: seconds to wait for another lab to end (the names are fixed; one lab at a time).
//!
//! Use the namespaces with `ip netns exec`:
//!
//! ```text
//! ip netns exec sluice-lab-s sluice serve -c lab.toml           # listening on 10.99.0.2
//! ip netns exec sluice-lab-c curl -o /dev/null https://10.99.0.2:8443/file
//! ```
//!
//! To measure the link by hand, the hidden `sluice-lab tool` has TCP and UDP endpoints that print
//! JSON (`tcp-sink`, `tcp-send --cc bbr`, `udp-echo`, `udp-ping`; see `sluice-lab tool --help`).
//! Only one lab runs at a time (the names are fixed): a lab holds `/run/sluice-lab.lock`, and
//! namespaces left by a crash are removed, with a note, when the next lab starts.
//!
//! Timing: packets are delivered within about ±0.1 ms of their model time (a wake-up of the
//! forwarder delivers the packets due in the next 100 µs, as a NIC coalesces interrupts); an idle
//! UDP round trip measures 2 × delay + ~0.2 ms (the forwarder and the endpoints waking up).
//!
//! The forwarder is a userspace thread per direction; each TUN write runs the receiving network
//! stack in that thread, so at high rates it is CPU-bound (roughly 500 Mbit/s – 1 Gbit/s on two
//! cores; 500 Mbit/s works with MTU 1500, 1 Gbit/s with `--mtu 9000`): the counters report its
//! CPU use, and a case near that limit should say so. Kernel netem is not used even where the
//! kernel has it (these machines' kernels lack it): a netem backend is a TODO.

mod forward;
mod lab;
mod ns;
mod tool;
mod tun;

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use forward::{DirStats, Stats};
pub use lab::{Lab, LabOptions, CLIENT_IF, SERVER_IF};
pub(crate) use ns::sysctl_in;
pub use ns::{in_netns, kernel_netem_available, sysctl_get_in};
pub use tool::{tool_main, ToolArgs};

use crate::model::{parse_queue, DirSpec, LinkSpec, Queue};

/// The client's namespace.
pub const CLIENT_NS: &str = "sluice-lab-c";
/// The server's namespace.
pub const SERVER_NS: &str = "sluice-lab-s";
/// The client's address (in [`CLIENT_NS`]).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// The server's address (in [`SERVER_NS`]).
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// Prefix length of the link's subnet.
pub const PREFIX_LEN: u8 = 24;

/// A command that runs `program` inside namespace `ns` (`ip netns exec ns program`); add the
/// program's arguments with [`Command::arg`].
pub fn ns_command(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// Whether this process can build a lab (root, `/dev/net/tun`, `ip` present): `Ok`, or the
/// reason, for tests to skip with a clear note.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (the lab creates network namespaces and TUN devices)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("no /dev/net/tun (the tun module is not loaded, or a container hides it)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Err(format!("`ip -V` failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => return Err(format!("no `ip` command (iproute2): {e}")),
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Err("no network namespaces (/proc/self/ns/net missing)".into());
    }
    Ok(())
}

/// Arguments of `sluice-lab link`.
#[derive(clap::Args, Debug)]
pub struct LinkArgs {
    /// Rate each way in Mbit/s (0 = unlimited).
    #[arg(long)]
    rate: Option<f64>,
    /// One-way delay each way in milliseconds (RTT = 2 × delay).
    #[arg(long, default_value_t = 0.0)]
    delay: f64,
    /// Drop-tail queue each way: packets (1000p) or bytes (1.5MB, 64KB). Default 1.5 × BDP.
    #[arg(long, value_parser = parse_queue)]
    queue: Option<Queue>,
    /// Random loss each way, percent of packets.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Client → server rate in Mbit/s (overrides --rate).
    #[arg(long)]
    rate_up: Option<f64>,
    /// Server → client rate in Mbit/s (overrides --rate).
    #[arg(long)]
    rate_down: Option<f64>,
    /// Client → server one-way delay in ms (overrides --delay).
    #[arg(long)]
    delay_up: Option<f64>,
    /// Server → client one-way delay in ms (overrides --delay).
    #[arg(long)]
    delay_down: Option<f64>,
    /// Client → server loss in percent (overrides --loss).
    #[arg(long)]
    loss_up: Option<f64>,
    /// Server → client loss in percent (overrides --loss).
    #[arg(long)]
    loss_down: Option<f64>,
    /// Client → server queue (overrides --queue).
    #[arg(long, value_parser = parse_queue)]
    queue_up: Option<Queue>,
    /// Server → client queue (overrides --queue).
    #[arg(long, value_parser = parse_queue)]
    queue_down: Option<Queue>,
    /// MTU of the TUN devices.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Seed of the random loss.
    #[arg(long, default_value_t = LabOptions::default().seed)]
    seed: u64,
    /// Print the counters every this many seconds (0 = only at the end).
    #[arg(long, default_value_t = 0.0)]
    stats_every: f64,
    /// Seconds to wait for another lab (the namespace names are fixed) to end before giving up.
    #[arg(long, default_value_t = 0.0)]
    wait: f64,
}

fn millis(name: &str, ms: f64) -> Result<Duration, String> {
    if !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)) {
        return Err(format!("--{name} {ms}: a delay is 0–60000 ms"));
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

impl LinkArgs {
    /// The link these arguments describe.
    fn spec(&self) -> Result<LinkSpec, String> {
        let rate_up = self.rate_up.or(self.rate).ok_or("give --rate (Mbit/s), or --rate-up and --rate-down")?;
        let rate_down = self.rate_down.or(self.rate).ok_or("give --rate (Mbit/s), or --rate-up and --rate-down")?;
        let delay_up = millis("delay-up", self.delay_up.unwrap_or(self.delay))?;
        let delay_down = millis("delay-down", self.delay_down.unwrap_or(self.delay))?;
        let rtt = delay_up + delay_down;
        let up = DirSpec {
            rate_mbit: rate_up,
            delay: delay_up,
            queue: self.queue_up.or(self.queue).unwrap_or_else(|| DirSpec::default_queue(rate_up, rtt)),
            loss_pct: self.loss_up.unwrap_or(self.loss),
        };
        let down = DirSpec {
            rate_mbit: rate_down,
            delay: delay_down,
            queue: self.queue_down.or(self.queue).unwrap_or_else(|| DirSpec::default_queue(rate_down, rtt)),
            loss_pct: self.loss_down.unwrap_or(self.loss),
        };
        let spec = LinkSpec { up, down };
        spec.validate()?;
        Ok(spec)
    }
}

/// Set by the signal handler.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn catch_signals() -> Result<(), String> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only stores to an
        // atomic, which is async-signal-safe; `act` is live for the call.
        let rc = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn describe(name: &str, d: &DirSpec) -> String {
    let rate = if d.rate_mbit > 0.0 { format!("{} Mbit/s", d.rate_mbit) } else { "unlimited rate".into() };
    format!("{name}: {rate}, {} ms one-way, queue {}, loss {} %", d.delay.as_secs_f64() * 1e3, d.queue, d.loss_pct)
}

/// `sluice-lab link`: runs the link until SIGINT/SIGTERM/SIGHUP, then prints the counters and
/// removes the namespaces.
pub fn link_main(a: LinkArgs) -> Result<(), String> {
    let spec = a.spec()?;
    available()?;
    catch_signals()?;
    let wait = Duration::try_from_secs_f64(a.wait).map_err(|_| format!("--wait {}: not a duration", a.wait))?;
    let opts = LabOptions { mtu: a.mtu, seed: a.seed, wait_for_other: wait };
    let lab = Lab::start_with(&spec, &opts)?;
    let rtt = (spec.up.delay + spec.down.delay).as_secs_f64() * 1e3;
    println!("sluice-lab link: emulated link up (MTU {}), base RTT {rtt} ms", a.mtu);
    println!("  {}", describe("up   (client → server)", &spec.up));
    println!("  {}", describe("down (server → client)", &spec.down));
    println!("  client: namespace {CLIENT_NS}, {CLIENT_ADDR} on {CLIENT_IF}");
    println!("  server: namespace {SERVER_NS}, {SERVER_ADDR} on {SERVER_IF}");
    println!("Use it:");
    println!("  ip netns exec {SERVER_NS} <server listening on {SERVER_ADDR} or 0.0.0.0>");
    println!("  ip netns exec {CLIENT_NS} curl http://{SERVER_ADDR}:8080/");
    if kernel_netem_available() {
        println!("(The kernel has netem, but the lab uses its own forwarder: a netem backend is a TODO.)");
    }
    println!("Ctrl-C (or SIGTERM) stops the link and removes the namespaces.");
    let every = (a.stats_every.is_finite() && a.stats_every > 0.0).then(|| Duration::from_secs_f64(a.stats_every));
    let mut last = (Instant::now(), lab.stats());
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(every) = every {
            if last.0.elapsed() >= every {
                let now = lab.stats();
                println!("--- last {:.1} s\n{}", every.as_secs_f64(), now.since(&last.1));
                last = (Instant::now(), now);
            }
        }
    }
    let stats = lab.stop();
    println!("sluice-lab link: stopped; namespaces {CLIENT_NS} and {SERVER_NS} removed");
    println!("{stats}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        link: LinkArgs,
    }

    fn spec(args: &[&str]) -> Result<LinkSpec, String> {
        let mut all = vec!["link"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map_err(|e| e.to_string())?.link.spec()
    }

    #[test]
    fn link_arguments() {
        let s = spec(&["--rate", "200", "--delay", "20"]).unwrap();
        assert_eq!(s, LinkSpec::symmetric(200.0, Duration::from_millis(20)));
        let s = spec(&["--rate", "100", "--rate-down", "50", "--delay", "5", "--delay-up", "1", "--queue", "1000p"])
            .unwrap();
        assert_eq!(s.up.rate_mbit, 100.0);
        assert_eq!(s.down.rate_mbit, 50.0);
        assert_eq!(s.up.delay, Duration::from_millis(1));
        assert_eq!(s.down.delay, Duration::from_millis(5));
        assert_eq!(s.down.queue, Queue::Packets(1000));
        let s = spec(&["--rate", "10", "--loss", "1", "--loss-down", "0", "--queue-up", "64KB"]).unwrap();
        assert_eq!((s.up.loss_pct, s.down.loss_pct), (1.0, 0.0));
        assert_eq!(s.up.queue, Queue::Bytes(64_000));
        assert_eq!(s.down.queue, Queue::Bytes(30_000));
        assert!(spec(&["--delay", "20"]).is_err());
        assert!(spec(&["--rate", "10", "--loss", "200"]).is_err());
        assert!(spec(&["--rate", "10", "--delay", "-1"]).is_err());
        assert!(spec(&["--rate", "10", "--queue", "lots"]).is_err());
    }
}
