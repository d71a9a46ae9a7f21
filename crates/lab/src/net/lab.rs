//! [`Lab`]: the two namespaces, their TUN devices, and the forwarder threads between them.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::forward::{self, Shared, Stats, Way};
use super::ns::{self, LabLock};
use super::tun::Tun;
use super::{available, CLIENT_ADDR, CLIENT_NS, PREFIX_LEN, SERVER_ADDR, SERVER_NS};
use crate::model::LinkSpec;

/// TUN device names (client side, server side).
pub const CLIENT_IF: &str = "slab-c";
/// See [`CLIENT_IF`].
pub const SERVER_IF: &str = "slab-s";

/// Sysctls set inside both namespaces: TCP buffers large enough for 200 Mbit/s × 40 ms and
/// beyond (new namespaces start with 4 MiB maxima, and BBR then never leaves startup), no
/// cached per-destination metrics (each run starts fresh), and no IPv6 chatter on the link.
const SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv4.tcp_rmem", "4096 131072 67108864"),
    ("net.ipv4.tcp_wmem", "4096 16384 67108864"),
    ("net.ipv4.tcp_no_metrics_save", "1"),
    ("net.ipv6.conf.all.disable_ipv6", "1"),
    ("net.ipv6.conf.default.disable_ipv6", "1"),
];

/// Options of a lab beyond the link parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LabOptions {
    /// MTU of both TUN devices (68–65535); 1500 by default.
    pub mtu: u32,
    /// Seed of the random loss (up uses `seed`, down `seed + 1`).
    pub seed: u64,
    /// How long [`Lab::start_with`] waits for another lab (the names are fixed) to end.
    pub wait_for_other: Duration,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self { mtu: 1500, seed: 0x05ee_d1ab, wait_for_other: Duration::from_secs(120) }
    }
}

/// A running lab: namespaces [`CLIENT_NS`] and [`SERVER_NS`] joined by the emulated link.
/// Dropping it stops the forwarder and deletes the namespaces, as [`Lab::stop`] does.
#[derive(Debug)]
pub struct Lab {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    tuns: Vec<Arc<Tun>>,
    mtu: u32,
    stopped: bool,
    _lock: LabLock,
}

impl Lab {
    /// Creates both namespaces (removing stale ones left by a crash, with a note on stderr), a
    /// TUN device in each, the addresses, lo up, sysctls for large TCP buffers in both, and
    /// starts the forwarder threads applying `spec`. MTU 1500; see [`Lab::start_with`].
    pub fn start(spec: &LinkSpec) -> Result<Self, String> {
        Self::start_with(spec, &LabOptions::default())
    }

    /// [`Lab::start`] with options.
    pub fn start_with(spec: &LinkSpec, opts: &LabOptions) -> Result<Self, String> {
        available()?;
        spec.validate()?;
        if !(68..=65535).contains(&opts.mtu) {
            return Err(format!("MTU {} out of range (68–65535)", opts.mtu));
        }
        let lock = LabLock::acquire(opts.wait_for_other)?;
        for name in [CLIENT_NS, SERVER_NS] {
            if ns::exists(name) {
                eprintln!("sluice-lab: removing stale namespace {name} (left by an earlier run that did not clean up)");
                ns::delete(name)?;
            }
        }
        let shared = Arc::new(Shared::new(*spec));
        // From here on, Drop cleans up whatever was created.
        let mut lab =
            Self { shared, threads: Vec::new(), tuns: Vec::new(), mtu: opts.mtu, stopped: false, _lock: lock };
        lab.setup(opts)?;
        Ok(lab)
    }

    fn setup(&mut self, opts: &LabOptions) -> Result<(), String> {
        let mtu = opts.mtu.to_string();
        for (name, ifname, addr) in [(CLIENT_NS, CLIENT_IF, CLIENT_ADDR), (SERVER_NS, SERVER_IF, SERVER_ADDR)] {
            ns::ip(&["netns", "add", name])?;
            for (key, value) in SYSCTLS {
                if let Err(e) = ns::sysctl_in(name, key, value) {
                    // IPv6 may be compiled out; the TCP buffers matter.
                    if key.starts_with("net.ipv4") {
                        return Err(format!("namespace {name}: {e}"));
                    }
                }
            }
            let tun = Tun::create(ifname)?;
            ns::ip(&["link", "set", tun.name(), "netns", name])?;
            ns::ip_in(name, &["link", "set", "lo", "up"])?;
            ns::ip_in(name, &["addr", "add", &format!("{addr}/{PREFIX_LEN}"), "dev", ifname])?;
            ns::ip_in(name, &["link", "set", ifname, "mtu", &mtu, "txqueuelen", "1000", "up"])?;
            self.tuns.push(Arc::new(tun));
        }
        let buf_size = opts.mtu as usize + 64;
        for (way, from, to, seed) in [(Way::Up, 0, 1, opts.seed), (Way::Down, 1, 0, opts.seed.wrapping_add(1))] {
            let (shared, from, to) = (self.shared.clone(), self.tuns[from].clone(), self.tuns[to].clone());
            let name = if way == Way::Up { "slab-up" } else { "slab-down" };
            let t = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || forward::run(shared, way, from, to, buf_size, seed))
                .map_err(|e| format!("cannot start the forwarder thread: {e}"))?;
            self.threads.push(t);
        }
        Ok(())
    }

    /// Replaces the link parameters while running (packets already on the link keep their
    /// delivery times; none is reordered). Invalid parameters are refused with the reason.
    pub fn set_link(&self, spec: &LinkSpec) {
        if let Err(e) = self.try_set_link(spec) {
            eprintln!("sluice-lab: link parameters not changed: {e}");
        }
    }

    /// [`Lab::set_link`], returning an error for invalid parameters.
    pub fn try_set_link(&self, spec: &LinkSpec) -> Result<(), String> {
        spec.validate()?;
        self.shared.set_spec(*spec);
        Ok(())
    }

    /// The current link parameters.
    pub fn link(&self) -> Option<LinkSpec> {
        self.shared.spec()
    }

    /// The MTU of the TUN devices.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Forwarder counters since the start (packets and bytes forwarded and dropped per
    /// direction, CPU seconds of the forwarder threads). Use [`Stats::since`] for a window.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Stops the forwarder, deletes both namespaces, and returns the final counters.
    pub fn stop(mut self) -> Stats {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Stats {
        if self.stopped {
            return self.shared.stats();
        }
        self.stopped = true;
        self.shared.request_stop();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                eprintln!("sluice-lab: a forwarder thread panicked");
            }
        }
        let stats = self.shared.stats();
        // Closing the descriptors removes the TUN devices.
        self.tuns.clear();
        for name in [CLIENT_NS, SERVER_NS] {
            let pids = ns::pids(name);
            if !pids.is_empty() {
                eprintln!(
                    "sluice-lab: processes still inside {name} ({}); the namespace goes away when they end",
                    pids.join(" ")
                );
            }
            if let Err(e) = ns::delete(name) {
                eprintln!("sluice-lab: {e}");
            }
        }
        stats
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.shutdown();
    }
}
