//! The `proxymem` experiment: what a reverse proxy holds in memory while slow clients download
//! from a fast origin.
//!
//! [`CLIENTS`] concurrent `curl --http2` clients in the client namespace (one connection each)
//! download a [`FILE_BYTES`] file through each proxy over TLS HTTP/2, on an emulated link of
//! 100 Mbit/s × 20 ms (≈ 5 Mbit/s per client); the proxy fetches it over HTTP/1.1 from a static
//! origin on loopback in the server namespace (a cleartext Sluice), which could send it at
//! gigabytes per second. The proxy's resident memory (`VmRSS` summed over its process tree, from
//! `/proc`) is sampled every [`SAMPLE`] from before the clients start until they end, by finishing
//! or at the time cap (`--cap-secs`, default [`DEFAULT_CAP`]), and once more
//! [`AFTER`] after. Per proxy: peak RSS, RSS at the end (the last sample while downloads ran),
//! after, and idle before; bytes delivered to the clients and downloads complete.
//!
//! Proxies: `sluice` (its defaults), `nginx` (`proxy_pass`, default `proxy_buffering on`: it
//! reads the upstream ahead into memory buffers and temporary files), `h2o`
//! (`proxy.reverse.url`), `caddy` (`reverse_proxy`), `haproxy` (Debian `haproxy`, `mode http`).

use std::fs::{self, File};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::case::Case;
use super::common::{first_line, fmt_duration, rotation, write_random};
use super::plan::{select_proxies, Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Site, Want};
use super::proc;
use super::report::{fmt_stat, Stat};
use super::servers::{self, ServerKind, Setup};
use crate::net::{self, CLIENT_NS, SERVER_ADDR, SERVER_NS};

/// Concurrent clients.
pub const CLIENTS: usize = 20;
/// The file each client downloads (20 MB with `--quick`).
pub const FILE_BYTES: u64 = 100_000_000;
/// The file with `--quick`.
pub const QUICK_FILE_BYTES: u64 = 20_000_000;
/// How often the proxy's memory is read.
pub const SAMPLE: Duration = Duration::from_millis(250);
/// The downloads' default time cap (10 s with `--quick`).
pub const DEFAULT_CAP: Duration = Duration::from_secs(60);
/// The last reading, this long after the clients ended.
pub const AFTER: Duration = Duration::from_secs(2);
/// The origin's port on 127.0.0.1 in the server namespace.
pub const ORIGIN_PORT: u16 = 9200;
/// Pause between proxies, so the link's queue drains and the proxies settle.
const PAUSE: Duration = Duration::from_secs(2);

/// The proxies the global default `--servers` means here.
pub const DEFAULT: [ServerKind; 5] =
    [ServerKind::Sluice, ServerKind::Nginx, ServerKind::H2o, ServerKind::Caddy, ServerKind::Haproxy];

/// The link: 100 Mbit/s × 20 ms RTT, drop-tail queue 1.5 × BDP.
pub fn cases() -> Vec<Case> {
    vec![Case { name: "100mbit-20ms".into(), rate_mbit: 100.0, rtt_ms: 20.0, queue_bytes: None, lone: None }]
}

/// The process id in a `/proc/PID/stat` line's parent field (the 4th; the command name in
/// parentheses may hold spaces and parentheses, so the fields are counted after the last `)`).
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The KiB of field `name` (`VmRSS`, `RssAnon`) in a `/proc/PID/status` text (`None` for a kernel
/// thread or a zombie).
pub fn status_kb(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and every descendant of it among `(pid, ppid)` pairs.
pub fn descendants(root: u32, pairs: &[(u32, u32)]) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        for &(pid, ppid) in pairs {
            if ppid == parent && !out.contains(&pid) {
                out.push(pid);
            }
        }
        i += 1;
    }
    out
}

/// Memory of a process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeMem {
    /// Resident KiB (`VmRSS`, summed).
    pub rss_kb: u64,
    /// Of which anonymous (`RssAnon`): not file-backed (h2o's buffers are mapped temporary
    /// files, resident but file-backed).
    pub anon_kb: u64,
    /// Processes in the tree.
    pub procs: usize,
}

/// The memory of `root`'s process tree; `None` when `root` is gone.
pub fn tree_mem(root: u32) -> Option<TreeMem> {
    let mut pairs = Vec::new();
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some(ppid) = fs::read_to_string(e.path().join("stat")).ok().as_deref().and_then(parse_ppid) {
            pairs.push((pid, ppid));
        }
    }
    if !pairs.iter().any(|(p, _)| *p == root) {
        return None;
    }
    let tree = descendants(root, &pairs);
    let mut m = TreeMem { procs: tree.len(), ..TreeMem::default() };
    for status in tree.iter().filter_map(|p| fs::read_to_string(format!("/proc/{p}/status")).ok()) {
        m.rss_kb += status_kb(&status, "VmRSS").unwrap_or(0);
        m.anon_kb += status_kb(&status, "RssAnon").unwrap_or(0);
    }
    Some(m)
}

/// One reading: seconds since the clients started (negative: before), KiB, processes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the clients started.
    pub t: f64,
    /// Resident KiB of the process tree.
    pub rss_kb: u64,
    /// Of which anonymous.
    pub anon_kb: u64,
    /// Processes in the tree.
    pub procs: usize,
    /// Clients still running.
    pub running: usize,
}

/// What the readings say: (peak, at the end = the last reading while a client ran, idle = the
/// first reading), KiB.
pub fn summarize(samples: &[Sample]) -> Option<(u64, u64, u64)> {
    let peak = samples.iter().map(|s| s.rss_kb).max()?;
    let end = samples.iter().rev().find(|s| s.running > 0 && s.t >= 0.0).or(samples.last())?.rss_kb;
    Some((peak, end, samples.first()?.rss_kb))
}

/// curl's `-w` format: status, version, bytes downloaded, seconds.
const CURL_W: &str = "%{http_code} %{http_version} %{size_download} %{time_total}";

/// One client's `-w` output: (status, version, bytes, seconds).
pub fn parse_client(out: &str) -> Option<(u16, String, u64, f64)> {
    let parts: Vec<&str> = out.split_whitespace().collect();
    let [code, version, size, total] = parts[..] else { return None };
    Some((code.parse().ok()?, version.to_string(), size.parse::<f64>().ok()? as u64, total.parse().ok()?))
}

/// One proxy's measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Idle RSS before the clients started, KiB.
    pub idle_kb: u64,
    /// Peak RSS, KiB.
    pub peak_kb: u64,
    /// Peak anonymous RSS, KiB.
    pub peak_anon_kb: u64,
    /// RSS at the end (the last reading while a download ran), KiB.
    pub end_kb: u64,
    /// RSS [`AFTER`] after the clients ended, KiB.
    pub after_kb: u64,
    /// Most processes in the proxy's tree.
    pub procs: usize,
    /// Bytes delivered to the clients (curl's `size_download`, summed).
    pub delivered: u64,
    /// Downloads complete (every byte, HTTP/2, 200).
    pub complete: usize,
    /// Clients started.
    pub clients: usize,
    /// Seconds from the clients' start to the last one's end.
    pub seconds: f64,
    /// Clients that failed otherwise than by the time cap (status, protocol, curl's error).
    pub failures: Vec<String>,
}

/// One row: the proxy, the run, the outcome or the error.
#[derive(Clone, Debug, PartialEq)]
pub struct MemRow {
    /// Case name.
    pub case: String,
    /// Proxy name.
    pub server: String,
    /// Run, from 1.
    pub run: u32,
    /// The figures.
    pub outcome: Outcome,
    /// Empty when ok.
    pub error: String,
}

impl MemRow {
    /// Whether the measurement succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,case,server,run,idle_rss_mb,peak_rss_mb,end_rss_mb,after_rss_mb,\
peak_anon_mb,processes,delivered_mb,complete,clients,seconds,ok,error\n";

fn mb(kb: u64) -> f64 {
    kb as f64 * 1024.0 / 1e6
}

/// One CSV line.
pub fn csv_line(r: &MemRow) -> String {
    let o = &r.outcome;
    format!(
        "proxymem,{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{},{:.1},{},{},{:.1},{},\"{}\"\n",
        r.case,
        r.server,
        r.run,
        mb(o.idle_kb),
        mb(o.peak_kb),
        mb(o.end_kb),
        mb(o.after_kb),
        mb(o.peak_anon_kb),
        o.procs,
        o.delivered as f64 / 1e6,
        o.complete,
        o.clients,
        o.seconds,
        r.ok(),
        r.error.replace(['"', '\n', '\r'], " ")
    )
}

/// `summary.md`.
pub fn markdown(rows: &[MemRow], notes: &[String], file_bytes: u64) -> String {
    let mut md = "# proxymem: reverse proxies' memory with slow HTTP/2 clients\n\n".to_string();
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let mut cases: Vec<&str> = Vec::new();
    let mut servers: Vec<&str> = Vec::new();
    for r in rows {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
        if !servers.contains(&r.server.as_str()) {
            servers.push(&r.server);
        }
    }
    for case in cases {
        md.push_str(&format!(
            "\n## {case}\n\n| proxy | peak RSS MB | RSS at the end MB | RSS {} s after MB | idle RSS MB | peak anonymous \
             MB | delivered MB | complete downloads | Mbit/s to the clients | ok runs |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
            AFTER.as_secs()
        ));
        for s in &servers {
            let all: Vec<&MemRow> = rows.iter().filter(|r| r.case == case && r.server == *s).collect();
            let ok: Vec<&Outcome> = all.iter().filter(|r| r.ok()).map(|r| &r.outcome).collect();
            let of = |f: &dyn Fn(&Outcome) -> f64| Stat::of(&ok.iter().map(|o| f(o)).collect::<Vec<_>>());
            let (Some(peak), Some(end), Some(after), Some(idle), Some(anon), Some(del), Some(rate)) = (
                of(&|o| mb(o.peak_kb)),
                of(&|o| mb(o.end_kb)),
                of(&|o| mb(o.after_kb)),
                of(&|o| mb(o.idle_kb)),
                of(&|o| mb(o.peak_anon_kb)),
                of(&|o| o.delivered as f64 / 1e6),
                of(&|o| if o.seconds > 0.0 { o.delivered as f64 * 8.0 / 1e6 / o.seconds } else { 0.0 }),
            ) else {
                md.push_str(&format!("| {s} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 0/{} |\n", all.len()));
                continue;
            };
            let complete = ok.iter().map(|o| format!("{}/{}", o.complete, o.clients)).collect::<Vec<_>>().join(", ");
            md.push_str(&format!(
                "| {s} | {} | {} | {} | {} | {} | {} | {complete} | {} | {}/{} |\n",
                fmt_stat(&peak, 1),
                fmt_stat(&end, 1),
                fmt_stat(&after, 1),
                fmt_stat(&idle, 1),
                fmt_stat(&anon, 1),
                fmt_stat(&del, 0),
                fmt_stat(&rate, 1),
                ok.len(),
                all.len()
            ));
        }
        md.push_str(&format!(
            "\nDelivered MB are 10⁶ bytes over all {CLIENTS} clients (of {:.0} MB asked); RSS in 10⁶ bytes; \
             anonymous = `RssAnon`, the part of the RSS that is not file-backed (mapped files, such as h2o's \
             buffers in temporary files, count in the RSS but not here).\n",
            (CLIENTS as u64 * file_bytes) as f64 / 1e6
        ));
    }
    let failed: Vec<&MemRow> = rows.iter().filter(|r| !r.ok() || !r.outcome.failures.is_empty()).collect();
    if !failed.is_empty() {
        md.push_str("\n## Failures\n\n");
        for r in failed {
            let what = if r.ok() { r.outcome.failures.join("; ") } else { r.error.clone() };
            md.push_str(&format!("- {} {} run {}: {what}\n", r.case, r.server, r.run));
        }
    }
    md
}

/// The proxies to run for `requested`: the global default list means [`DEFAULT`]; the servers
/// that are no reverse proxy here are skipped with the reason.
pub fn select_servers(requested: &[ServerKind]) -> (Vec<ServerKind>, Vec<Skipped>) {
    select_proxies(
        requested,
        &DEFAULT,
        &[
            ServerKind::Sluice,
            ServerKind::SluiceNoLearn,
            ServerKind::Nginx,
            ServerKind::H2o,
            ServerKind::Caddy,
            ServerKind::Haproxy,
        ],
        "proxymem",
    )
}

/// The origin's address inside the server namespace.
pub fn origin_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, ORIGIN_PORT))
}

/// Runs the experiment.
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(), |c| &c.name)?;
    let (wanted, skipped) = select_servers(&plan.servers);
    let runs = plan.runs_or(1);
    let cap = plan.cap.unwrap_or(if plan.quick { Duration::from_secs(10) } else { DEFAULT_CAP });
    let file_bytes = if plan.quick { QUICK_FILE_BYTES } else { FILE_BYTES };
    let estimate = |active: &[Active]| {
        // Each measurement: at most the cap (the clients at 5 Mbit/s each need FILE × 8 / 5e6 s),
        // the reading after, the pause.
        let per = cap.as_secs_f64().min(file_bytes as f64 * 8.0 / (100e6 / CLIENTS as f64)) + 5.0 + PAUSE.as_secs_f64();
        Estimate {
            what: format!(
                "{} proxies × {runs} run(s): {CLIENTS} clients × {file_bytes} bytes each, capped at {} s",
                active.len(),
                cap.as_secs(),
            ),
            expected: Duration::from_secs_f64(per * (active.len() * runs as usize * cases.len()) as f64 + 15.0),
        }
    };
    let write = |docroot: &Path| {
        fs::create_dir_all(docroot).map_err(|e| format!("creating {}: {e}", docroot.display()))?;
        write_random(&docroot.join("big.bin"), file_bytes, 4000)?;
        fs::write(docroot.join("small.txt"), "ready\n").map_err(|e| format!("writing small.txt: {e}"))?;
        if let Ok(m) = fs::metadata(docroot) {
            let _ = fs::set_permissions(docroot, fs::Permissions::from_mode(m.permissions().mode() | 0o755));
        }
        let _ = fs::set_permissions(docroot.join("small.txt"), fs::Permissions::from_mode(0o644));
        Ok(())
    };
    let mut p = prepare(
        plan,
        Want {
            skipped,
            sluice: Some("the origin is a Sluice"),
            site: Some(Site { write: &write, reach: 0o755 }),
            combined: true,
            line: first_line,
            ..Want::new("proxymem", wanted, &estimate, CSV_HEADER)
        },
    )?;
    let sluice = p.sluice.clone().unwrap_or_default();
    let samples_path = plan.out.join("samples.csv");
    let mut samples_csv =
        File::create(&samples_path).map_err(|e| format!("creating {}: {e}", samples_path.display()))?;
    samples_csv
        .write_all(b"server,run,t_secs,rss_mb,anon_mb,processes,clients_running\n")
        .map_err(|e| format!("writing {}: {e}", samples_path.display()))?;
    let mut rows: Vec<MemRow> = Vec::new();
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&cases[0].link())?;
        let origin_dir = p.work.join("origin");
        let setup = Setup {
            dir: origin_dir.clone(),
            listen: origin_addr(),
            cert: p.cert.clone(),
            key: p.key.clone(),
            sink: servers::sink_addr(),
        };
        let launch = servers::static_origin_launch(&origin_dir, origin_addr(), &p.docroot)?;
        stage.start_checked(
            "origin",
            &sluice,
            &setup,
            &launch,
            SERVER_NS,
            &format!("http://{}/small.txt", origin_addr()),
        )?;
        let active = p.active.clone();
        let running = p.start_each(&mut stage, &active, |stage, kind, bin, setup| {
            let url = format!("https://{SERVER_ADDR}:{}/small.txt", kind.port());
            servers::proxy_launch(kind, setup, origin_addr())
                .and_then(|l| stage.start_static(kind, bin, setup, &l, &url))
        });
        if running.is_empty() {
            return Err("no proxy started (see above)".into());
        }
        let clients_dir = p.work.join("clients");
        fs::create_dir_all(&clients_dir).map_err(|e| format!("creating {}: {e}", clients_dir.display()))?;
        for case in &cases {
            stage.set_link(&case.link());
            println!("== {}: {} Mbit/s, {} ms RTT", case.name, case.rate_mbit, case.rtt_ms);
            for run in 1..=runs {
                for kind in rotation(&running, run) {
                    p.go_on(String::new)?;
                    let mut row = MemRow {
                        case: case.name.clone(),
                        server: kind.name().into(),
                        run,
                        outcome: Outcome::default(),
                        error: String::new(),
                    };
                    let url = format!("https://{SERVER_ADDR}:{}/big.bin", kind.port());
                    let mut samples = Vec::new();
                    let measured = stage.check_alive(kind.name()).and_then(|()| {
                        let pid = stage.service_pid(kind.name()).ok_or("no process id")?;
                        measure(pid, &url, cap, file_bytes, &clients_dir, &mut samples)
                    });
                    for s in &samples {
                        let line = format!(
                            "{},{run},{:.2},{:.1},{:.1},{},{}\n",
                            kind.name(),
                            s.t,
                            mb(s.rss_kb),
                            mb(s.anon_kb),
                            s.procs,
                            s.running
                        );
                        samples_csv.write_all(line.as_bytes()).map_err(|e| format!("writing samples.csv: {e}"))?;
                    }
                    match measured {
                        Ok(o) => row.outcome = o,
                        Err(e) => row.error = e.lines().next().unwrap_or_default().to_string(),
                    }
                    proc::check_interrupt()?;
                    let o = &row.outcome;
                    if row.ok() {
                        println!(
                            "{} run {run} {:<8} peak {:.1} MB (anonymous {:.1}), end {:.1} MB, after {:.1} MB, idle {:.1} \
                             MB; delivered {:.0} MB, {}/{} complete in {:.1} s{}",
                            case.name,
                            kind.name(),
                            mb(o.peak_kb),
                            mb(o.peak_anon_kb),
                            mb(o.end_kb),
                            mb(o.after_kb),
                            mb(o.idle_kb),
                            o.delivered as f64 / 1e6,
                            o.complete,
                            o.clients,
                            o.seconds,
                            if o.failures.is_empty() { String::new() } else { format!("; {}", o.failures.join("; ")) }
                        );
                    } else {
                        println!("{} run {run} {:<8} FAILED: {}", case.name, kind.name(), row.error);
                    }
                    p.csv.line(&csv_line(&row))?;
                    rows.push(row);
                    proc::sleep(PAUSE)?;
                }
            }
        }
        stage.stop();
        Ok(())
    })();
    let _ = fs::remove_file(p.docroot.join("big.bin"));
    let mut notes = notes(&cases, runs, cap, file_bytes);
    if !p.versions.is_empty() {
        notes.push(format!("Versions: {}.", p.versions.join("; ")));
    }
    for s in &p.skipped {
        notes.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    notes.push(format!(
        "{} of {} measurements succeeded; wall time {}. Every reading is in `samples.csv`.",
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        fmt_duration(p.started.elapsed())
    ));
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", e.lines().next().unwrap_or_default()));
    }
    let md_path = plan.out.join("summary.md");
    let written = fs::write(&md_path, markdown(&rows, &notes, file_bytes))
        .map_err(|e| format!("writing {}: {e}", md_path.display()));
    outcome?;
    written?;
    println!(
        "proxymem: done in {}; wrote {}/{{results.csv,samples.csv,summary.md}}",
        fmt_duration(p.started.elapsed()),
        plan.out.display()
    );
    Ok(())
}

/// One proxy (process `pid`): [`CLIENTS`] curls download `url` at once, at most `cap` each,
/// while the proxy's memory is read every [`SAMPLE`] into `samples`.
fn measure(
    pid: u32,
    url: &str,
    cap: Duration,
    file_bytes: u64,
    dir: &Path,
    samples: &mut Vec<Sample>,
) -> Result<Outcome, String> {
    let read = |t: f64, running: usize| -> Result<Sample, String> {
        let m = tree_mem(pid).ok_or("the proxy's process is gone")?;
        Ok(Sample { t, rss_kb: m.rss_kb, anon_kb: m.anon_kb, procs: m.procs, running })
    };
    samples.push(read(-SAMPLE.as_secs_f64(), 0)?);
    let outs: Vec<PathBuf> = (0..CLIENTS).map(|i| dir.join(format!("client{i:02}.out"))).collect();
    let errs: Vec<PathBuf> = (0..CLIENTS).map(|i| dir.join(format!("client{i:02}.err"))).collect();
    let max = format!("{:.0}", cap.as_secs_f64().max(1.0));
    let start = Instant::now();
    let mut children: Vec<Option<Child>> = Vec::new();
    let kill_all = |children: &mut Vec<Option<Child>>| {
        for c in children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for i in 0..CLIENTS {
        let out = File::create(&outs[i]).map_err(|e| format!("creating {}: {e}", outs[i].display()))?;
        let err = File::create(&errs[i]).map_err(|e| format!("creating {}: {e}", errs[i].display()))?;
        let mut cmd = net::ns_command(CLIENT_NS, "curl");
        cmd.args(["--http2", "-k", "-sS", "--noproxy", "*", "-o", "/dev/null", "--connect-timeout", "10"]);
        cmd.args(["--max-time", &max, "-w", CURL_W, url]);
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        match cmd.spawn() {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("starting curl: {e}"));
            }
        }
    }
    let hard_end = start + cap + Duration::from_secs(15);
    let mut next = start;
    let mut last_end = start;
    loop {
        if proc::interrupted() || Instant::now() >= hard_end {
            kill_all(&mut children);
            proc::check_interrupt()?;
            break;
        }
        let mut running = 0;
        for c in children.iter_mut() {
            if let Some(child) = c {
                match child.try_wait() {
                    Ok(None) => running += 1,
                    _ => {
                        *c = None;
                        last_end = Instant::now();
                    }
                }
            }
        }
        let t = start.elapsed().as_secs_f64();
        match read(t, running) {
            Ok(s) => samples.push(s),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
        if running == 0 {
            break;
        }
        next += SAMPLE;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
    let seconds = last_end.duration_since(start).as_secs_f64();
    proc::sleep(AFTER)?;
    let after = read(start.elapsed().as_secs_f64(), 0)?;
    samples.push(after);
    let (peak_kb, end_kb, idle_kb) = summarize(samples).ok_or("no readings")?;
    let mut o = Outcome {
        idle_kb,
        peak_kb,
        peak_anon_kb: samples.iter().map(|s| s.anon_kb).max().unwrap_or(0),
        end_kb,
        after_kb: after.rss_kb,
        procs: samples.iter().map(|s| s.procs).max().unwrap_or(0),
        clients: CLIENTS,
        seconds,
        ..Outcome::default()
    };
    for i in 0..CLIENTS {
        let out = fs::read_to_string(&outs[i]).unwrap_or_default();
        let err = fs::read_to_string(&errs[i]).unwrap_or_default();
        match parse_client(&out) {
            Some((code, version, bytes, _)) => {
                o.delivered += bytes;
                if code == 200 && version == "2" && bytes == file_bytes {
                    o.complete += 1;
                } else if code != 200 || version != "2" || !err.contains("Operation timed out") {
                    o.failures.push(format!("client {i}: HTTP {code}, HTTP/{version}, {bytes} bytes, {}", err.trim()));
                }
            }
            None => o.failures.push(format!("client {i}: no figures ({})", err.trim())),
        }
    }
    Ok(o)
}

fn notes(cases: &[Case], runs: u32, cap: Duration, file_bytes: u64) -> Vec<String> {
    vec![
        format!(
            "Method: {CLIENTS} `curl --http2` clients (one TLS connection each) in the client namespace start together \
             and each download a {file_bytes}-byte random file through the proxy, which fetches it over HTTP/1.1 from \
             a static origin (a cleartext Sluice on 127.0.0.1:{ORIGIN_PORT} in the server namespace, loopback fast). \
             Downloads stop when complete or after {} s (curl `--max-time`). The proxy's RSS (VmRSS summed over its \
             process tree, /proc) is read every {} ms: peak; at the end = the last reading while a download ran; \
             {} s after the clients ended; idle = before they started.",
            cap.as_secs(),
            SAMPLE.as_millis(),
            AFTER.as_secs()
        ),
        format!(
            "Link: {}; runs: {runs} per proxy, order rotating run by run.",
            cases
                .iter()
                .map(|c| format!("{} Mbit/s × {} ms RTT (queue 1.5 × BDP)", c.rate_mbit, c.rtt_ms))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        "Proxies (TLS, HTTP/2 to the clients, HTTP/1.1 to the origin): `sluice` (its defaults), `nginx` \
         (`proxy_pass`, one worker, default `proxy_buffering on`: it reads ahead of a slow client into memory \
         buffers and then temporary files, up to `proxy_max_temp_file_size` 1024m per request; files are not RSS), \
         `h2o` (`proxy.reverse.url`, one thread), `caddy` (`reverse_proxy`), `haproxy` (`mode http`, `alpn \
         h2,http/1.1`)."
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_parsing() {
        assert_eq!(parse_ppid("1234 (nginx: worker) S 1200 1200 1200 0 -1"), Some(1200));
        assert_eq!(parse_ppid("7 (a) b) c) R 3 7 7"), Some(3));
        assert_eq!(parse_ppid("garbage"), None);
        let status = "Name:\tcaddy\nVmPeak:\t  900 kB\nVmRSS:\t   45678 kB\nRssAnon:\t 40000 kB\nRssFile:\t 5678 kB\n";
        assert_eq!(status_kb(status, "VmRSS"), Some(45678));
        assert_eq!(status_kb(status, "RssAnon"), Some(40000));
        assert_eq!(status_kb(status, "Rss"), None);
        assert_eq!(status_kb("Name:\tkworker\n", "VmRSS"), None);
        let pairs = [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1), (21, 20)];
        let mut d = descendants(10, &pairs);
        d.sort_unstable();
        assert_eq!(d, [10, 11, 12, 13]);
        assert_eq!(descendants(99, &pairs), [99]);
        // This process: itself at least, with some memory.
        let m = tree_mem(std::process::id()).unwrap();
        assert!(m.rss_kb > 0 && m.anon_kb > 0 && m.anon_kb <= m.rss_kb && m.procs >= 1, "{m:?}");
        assert!(tree_mem(u32::MAX).is_none());
    }

    #[test]
    fn readings_summarized() {
        let s = |t: f64, rss_kb: u64, running: usize| Sample { t, rss_kb, anon_kb: rss_kb, procs: 1, running };
        let samples = [s(-0.25, 10, 0), s(0.0, 50, 20), s(0.25, 900, 20), s(0.5, 400, 3), s(0.75, 30, 0)];
        assert_eq!(summarize(&samples), Some((900, 400, 10)));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[s(-0.25, 7, 0)]), Some((7, 7, 7)));
    }

    #[test]
    fn client_output() {
        assert_eq!(parse_client("200 2 100000000 20.5"), Some((200, "2".into(), 100_000_000, 20.5)));
        assert_eq!(parse_client("200 2 31457280.000000 60.0\n"), Some((200, "2".into(), 31_457_280, 60.0)));
        assert_eq!(parse_client(""), None);
    }

    fn row(server: &str, run: u32, peak_kb: u64, error: &str) -> MemRow {
        MemRow {
            case: "100mbit-20ms".into(),
            server: server.into(),
            run,
            outcome: Outcome {
                idle_kb: 10_000,
                peak_kb,
                peak_anon_kb: peak_kb / 4,
                end_kb: peak_kb / 2,
                after_kb: 12_000,
                procs: 1,
                delivered: 750_000_000,
                complete: 0,
                clients: CLIENTS,
                seconds: 60.0,
                failures: vec![],
            },
            error: error.into(),
        }
    }

    #[test]
    fn report() {
        let rows = vec![row("sluice", 1, 40_000, ""), row("sluice", 2, 60_000, ""), row("h2o", 1, 0, "gone")];
        let md = markdown(&rows, &["n".into()], FILE_BYTES);
        assert!(
            md.contains(
                "| sluice | 51.2 (41.0–61.4) | 25.6 (20.5–30.7) | 12.3 (12.3–12.3) | 10.2 (10.2–10.2) | 12.8 (10.2–15.4) \
                 | 750 (750–750) | 0/20, 0/20 | 100.0 (100.0–100.0) | 2/2 |"
            ),
            "{md}"
        );
        assert!(md.contains("| h2o | n/a |") && md.contains("- 100mbit-20ms h2o run 1: gone"), "{md}");
        assert!(md.contains("(of 2000 MB asked)"), "{md}");
        for r in &rows {
            assert_eq!(csv_line(r).split(',').count(), CSV_HEADER.split(',').count(), "{}", csv_line(r));
        }
        assert!(csv_line(&rows[0])
            .starts_with("proxymem,100mbit-20ms,sluice,1,10.2,41.0,20.5,12.3,10.2,1,750.0,0,20,60.0,true,"));
    }

    #[test]
    fn servers_and_origin() {
        let (k, s) = select_servers(&servers::DEFAULT);
        assert_eq!((k, s.len()), (DEFAULT.to_vec(), 0));
        let (k, s) = select_servers(&[ServerKind::Haproxy, ServerKind::Nginx512]);
        assert_eq!((k, s.len()), (vec![ServerKind::Haproxy], 1));
        let l = servers::static_origin_launch(Path::new("/w/origin"), origin_addr(), Path::new("/w/docroot")).unwrap();
        assert!(
            l.config.1.contains("addr = \"127.0.0.1:9200\"\ntls = false")
                && l.config.1.contains("root = \"/w/docroot\"")
        );
        assert_eq!(l.args, ["serve", "--config", "/w/origin/sluice.toml"]);
        assert_eq!(cases()[0].link(), crate::experiments::case::link_spec(100.0, 20.0));
    }
}
