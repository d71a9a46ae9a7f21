//! The `fairness` experiment: one HTTP/3 download and one TCP download started together and
//! sharing the emulated link. Does Sluice's HTTP/3 take its share of the bottleneck from a
//! TCP CUBIC flow, more than its share, or less?
//!
//! The HTTP/3 side is Sluice with its default configuration (`--servers` may list Sluice's
//! variants, e.g. `sluice-h3cubic`, or `caddy`), fetched with the project's client,
//! `sluice get --http3`. The TCP side is a second Sluice in the server namespace,
//! `sluice-tcpcubic` (`[tcp] congestion = "cubic"`, `limit_inflight = false`: its accepted
//! sockets on CUBIC with nothing but the congestion window limiting what is in flight), fetched
//! with `sluice get --http2`. Both serve the same large random file, large enough that neither
//! download can finish within the measurement; both clients start at the same moment, and
//! end on their own `--max-time` just after it.
//!
//! The figure is each flow's throughput over the overlap window ([`WINDOW`] after a
//! [`WARMUP`]; `--quick`: [`QUICK_WINDOW`]), measured by the link's forwarder itself: the IP
//! bytes it delivered server → client in UDP packets (the QUIC flow) and in TCP packets (the TCP
//! flow) between two readings. The ratio h3:tcp says which one took more (1 = an even split).
//! Beside it, the queue drops of each flow and the link's queue readings over the window.
//!
//! Cases: 20 Mbit/s × 40 ms RTT with a 1 MB drop-tail queue (as `pageload`'s first case), and
//! 100 Mbit/s × 13 ms with the lab's default queue (1.5 × BDP).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use super::case::Case;
use super::common::{fmt_duration, one_line, rotation};
use super::plan::{Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Site, Want};
use super::proc::{self, Service};
use super::report::{fmt_stat, LinkWindow, Stat};
use super::servers::{self, Flow, ServerKind};
use super::stage::Stage;
use super::statics::{self, order, Row};
use super::transfer::{self, Proto};
use crate::net::{self, Stats, CLIENT_NS};

/// Time from starting both downloads to the start of the window: handshakes and the first round
/// trips of slow start.
pub const WARMUP: Duration = Duration::from_secs(2);
/// The overlap window the figures cover.
pub const WINDOW: Duration = Duration::from_secs(25);
/// The window of a `--quick` run.
pub const QUICK_WINDOW: Duration = Duration::from_secs(5);
/// The clients' `--max-time` beyond the warm-up and the window.
const CLIENT_SLACK: Duration = Duration::from_secs(2);
/// Pause between measurements, so queues drain and closed connections finish.
const PAUSE: Duration = Duration::from_secs(2);
/// The TCP competitor.
pub const COMPETITOR: ServerKind = ServerKind::SluiceFlow(Flow::TcpCubic);

/// The cases; `quick` keeps the first.
pub fn cases(quick: bool) -> Vec<Case> {
    let mut v = vec![
        Case { name: "20mbit-40ms".into(), rate_mbit: 20.0, rtt_ms: 40.0, queue_bytes: Some(1_000_000), lone: None },
        Case { name: "100mbit-13ms".into(), rate_mbit: 100.0, rtt_ms: 13.0, queue_bytes: None, lone: None },
    ];
    if quick {
        v.truncate(1);
    }
    v
}

/// The window of a run.
pub fn window(quick: bool) -> Duration {
    if quick {
        QUICK_WINDOW
    } else {
        WINDOW
    }
}

/// The clients' `--max-time`, whole seconds.
fn client_limit(window: Duration) -> Duration {
    Duration::from_secs((WARMUP + window + CLIENT_SLACK).as_secs_f64().ceil() as u64)
}

/// The file's size: what the fastest case's link carries in the clients' whole time plus ten
/// seconds, so that not even a flow alone could finish it, in whole MB.
pub fn file_bytes(cases: &[Case], window: Duration) -> u64 {
    let rate = cases.iter().map(|c| c.rate_mbit).fold(0.0, f64::max);
    let secs = (client_limit(window) + Duration::from_secs(10)).as_secs_f64();
    ((rate * 1e6 / 8.0 * secs / 1e6).ceil() as u64).max(1) * 1_000_000
}

/// What one measurement found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The HTTP/3 flow's throughput over the window, Mbit/s of IP packets delivered.
    pub h3_mbps: f64,
    /// The TCP flow's, likewise.
    pub tcp_mbps: f64,
    /// h3_mbps / tcp_mbps (infinite or NaN when the TCP flow moved nothing).
    pub ratio: f64,
    /// The window's length, seconds.
    pub window_s: f64,
    /// The HTTP/3 flow's packets dropped by the full queue in the window.
    pub h3_queue_drops: u64,
    /// The TCP flow's.
    pub tcp_queue_drops: u64,
    /// Body bytes the HTTP/3 client reported at its end (`None`: it said nothing readable).
    pub h3_client_bytes: Option<u64>,
    /// Body bytes the TCP client reported.
    pub tcp_client_bytes: Option<u64>,
    /// The link's server → client direction over the window.
    pub link: Option<LinkWindow>,
}

impl Outcome {
    /// Which flow took more: `h3`, `tcp` or `even` (within 1 %).
    pub fn larger(&self) -> &'static str {
        larger(self.ratio)
    }
}

/// `h3` when the ratio h3:tcp is above 1.01, `tcp` below 0.99, else `even`.
pub fn larger(ratio: f64) -> &'static str {
    if ratio > 1.01 {
        "h3"
    } else if ratio < 0.99 {
        "tcp"
    } else {
        "even"
    }
}

/// One measurement of one HTTP/3 server against the TCP competitor.
pub type FRow = Row<Outcome>;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,case,rtt_ms,rate_mbit,server,run,h3_mbps,tcp_mbps,ratio,larger,window_s,\
h3_queue_drops,tcp_queue_drops,h3_client_bytes,tcp_client_bytes,queue_drops_per_100mb,loss_drops_per_100mb,\
queue_p50_pkts,queue_p95_pkts,queue_peak_pkts,queue_p50_ms,queue_p95_ms,queue_peak_ms,ok,error\n";

/// One CSV line.
pub fn csv_line(r: &FRow) -> String {
    let o = &r.outcome;
    let error = r.error.replace(['"', '\n', '\r'], " ");
    let link = o.link.map_or_else(|| [(); 8].map(|()| String::new()), |l| l.fields()).join(",");
    let bytes = |b: Option<u64>| b.map(|b| b.to_string()).unwrap_or_default();
    format!(
        "fairness,{},{},{},{},{},{:.3},{:.3},{:.4},{},{:.3},{},{},{},{},{link},{},\"{error}\"\n",
        r.case,
        r.rtt_ms,
        r.rate_mbit,
        r.server,
        r.run,
        o.h3_mbps,
        o.tcp_mbps,
        o.ratio,
        o.larger(),
        o.window_s,
        o.h3_queue_drops,
        o.tcp_queue_drops,
        bytes(o.h3_client_bytes),
        bytes(o.tcp_client_bytes),
        r.ok(),
    )
}

/// The figures of a window between two readings of the link.
pub fn figures(w: &Stats) -> Outcome {
    let secs = w.elapsed_secs;
    let mbps = |bytes: u64| if secs > 0.0 { bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 };
    let (h3_mbps, tcp_mbps) = (mbps(w.down.udp_bytes), mbps(w.down.tcp_bytes));
    Outcome {
        h3_mbps,
        tcp_mbps,
        ratio: h3_mbps / tcp_mbps,
        window_s: secs,
        h3_queue_drops: w.down.udp_dropped_queue,
        tcp_queue_drops: w.down.tcp_dropped_queue,
        h3_client_bytes: None,
        tcp_client_bytes: None,
        link: LinkWindow::of(&w.down),
    }
}

/// The body bytes a client's log reports: the JSON's `bytes` when it finished, else the count
/// in its time-out message.
pub fn client_bytes(log: &str) -> Option<u64> {
    transfer::partial_bytes(log).or_else(|| {
        log.lines()
            .filter(|l| l.trim_start().starts_with('{'))
            .find_map(|l| transfer::parse_get_json(l).ok())
            .map(|f| f.bytes)
    })
}

/// The HTTP/3 servers to run for `requested`: the global default list means Sluice alone;
/// Sluice's variants and Caddy run as listed; the others (no HTTP/3 here, or the competitor
/// itself) are skipped with the reason.
pub fn select_servers(requested: &[ServerKind]) -> Result<(Vec<ServerKind>, Vec<Skipped>), String> {
    if requested == servers::DEFAULT {
        return Ok((vec![ServerKind::Sluice], Vec::new()));
    }
    let mut keep = Vec::new();
    let mut skipped = Vec::new();
    for &k in requested {
        let reason = match k {
            COMPETITOR => Some("it is the TCP competitor here, not an HTTP/3 side"),
            ServerKind::Sluice | ServerKind::SluiceFlow(_) | ServerKind::Caddy => None,
            ServerKind::SluiceH3 | ServerKind::CaddyH3 => {
                Some("every server's HTTP/3 is used here; list `sluice` or `caddy` instead")
            }
            _ => Some("no HTTP/3 here (the fairness experiment knows sluice, its variants and caddy)"),
        };
        match reason {
            None => keep.push(k),
            Some(r) => skipped.push(Skipped { server: k, reason: r.into() }),
        }
    }
    if keep.is_empty() {
        return Err("none of the requested servers can be the HTTP/3 side (sluice, its variants, caddy)".into());
    }
    Ok((keep, skipped))
}

/// Starts one `sluice get` in the client namespace, its output in `log`.
fn spawn_client(client: &str, proto: Proto, url: &str, limit: Duration, log: &Path) -> Result<Service, String> {
    let mut cmd = net::ns_command(CLIENT_NS, client);
    cmd.args(transfer::get_args(proto, url, limit));
    Service::spawn(&format!("{} client", proto.name()), cmd, log)
}

/// Both clients: started together, the window read between `WARMUP` and `WARMUP + window`,
/// then waited for (they end on their `--max-time`).
#[allow(clippy::too_many_arguments)]
fn measure(
    stage: &mut Stage,
    client: &str,
    case: &Case,
    kind: ServerKind,
    run: u32,
    window: Duration,
    logs: &Path,
) -> Result<FRow, String> {
    let mut row = FRow {
        case: case.name.clone(),
        rate_mbit: case.rate_mbit,
        rtt_ms: case.rtt_ms,
        server: kind.name().into(),
        run,
        outcome: Outcome::default(),
        error: String::new(),
    };
    if let Err(e) = stage.check_alive(kind.name()).and_then(|()| stage.check_alive(COMPETITOR.name())) {
        row.error = one_line(&e);
        return Ok(row);
    }
    let limit = client_limit(window);
    let stem = format!("{}-{}-run{run}", case.name, kind.name());
    let (h3_log, tcp_log) = (logs.join(format!("{stem}-h3.log")), logs.join(format!("{stem}-tcp.log")));
    let file = transfer::FILE;
    let mut h3 = spawn_client(client, Proto::H3, &transfer::url(kind, file), limit, &h3_log)?;
    let mut tcp = spawn_client(client, Proto::H2, &transfer::url(COMPETITOR, file), limit, &tcp_log)?;
    let started = Instant::now();
    proc::sleep(WARMUP)?;
    let before = stage.stats();
    proc::sleep(window)?;
    let after = stage.stats();
    // A client that ended before the window closed did not overlap the other all along.
    let mut gone: Vec<String> = Vec::new();
    for (name, c, log) in [("HTTP/3", &mut h3, &h3_log), ("TCP", &mut tcp, &tcp_log)] {
        if let Some(how) = c.exited() {
            gone.push(format!("the {name} client ended before the window closed ({how}: {})", tail_line(log)));
        }
    }
    // They end on their own just after the window; stop them if they outstay it.
    let end = started + limit + Duration::from_secs(15);
    while (h3.exited().is_none() || tcp.exited().is_none()) && Instant::now() < end {
        proc::sleep(Duration::from_millis(100))?;
    }
    h3.stop();
    tcp.stop();
    let mut o = figures(&after.since(&before));
    o.h3_client_bytes = client_bytes(&fs::read_to_string(&h3_log).unwrap_or_default());
    o.tcp_client_bytes = client_bytes(&fs::read_to_string(&tcp_log).unwrap_or_default());
    let mut errors = gone;
    if o.h3_mbps <= 0.0 {
        errors.push("the HTTP/3 flow delivered nothing in the window".into());
    }
    if o.tcp_mbps <= 0.0 {
        errors.push("the TCP flow delivered nothing in the window".into());
    }
    row.error = errors.join("; ");
    row.outcome = o;
    Ok(row)
}

/// The last non-empty line of a log, for error messages.
fn tail_line(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("(no output)").chars().take(300).collect()
}

/// Statistics of one HTTP/3 server in one case over its successful runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellStats {
    /// The HTTP/3 flow, Mbit/s.
    pub h3: Stat,
    /// The TCP flow, Mbit/s.
    pub tcp: Stat,
    /// h3:tcp, run by run.
    pub ratio: Stat,
    /// The HTTP/3 flow's queue drops.
    pub h3_drops: Stat,
    /// The TCP flow's queue drops.
    pub tcp_drops: Stat,
    /// Medians of the link readings.
    pub link: Option<LinkWindow>,
    /// Runs in all (failed included).
    pub runs: usize,
}

/// Statistics of `server` in `case`, `None` without a successful run.
pub fn cell(rows: &[FRow], case: &str, server: &str) -> Option<CellStats> {
    let all: Vec<&FRow> = rows.iter().filter(|r| r.case == case && r.server == server).collect();
    let ok: Vec<&Outcome> = all.iter().filter(|r| r.ok()).map(|r| &r.outcome).collect();
    let of = |f: fn(&Outcome) -> f64| Stat::of(&ok.iter().map(|o| f(o)).collect::<Vec<_>>());
    let links: Vec<LinkWindow> = ok.iter().filter_map(|o| o.link).collect();
    Some(CellStats {
        h3: of(|o| o.h3_mbps)?,
        tcp: of(|o| o.tcp_mbps)?,
        ratio: of(|o| o.ratio)?,
        h3_drops: of(|o| o.h3_queue_drops as f64)?,
        tcp_drops: of(|o| o.tcp_queue_drops as f64)?,
        link: LinkWindow::median_of(&links),
        runs: all.len(),
    })
}

fn title() -> String {
    "fairness: one HTTP/3 download and one TCP CUBIC download sharing the link".into()
}

/// `summary.md`.
pub fn markdown(rows: &[FRow], notes: &[String]) -> String {
    let mut md = format!("# {}\n\n", title());
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    let (cases, servers) = order(rows);
    for (case, rate, rtt) in &cases {
        md.push_str(&format!("\n## {case}: {rate} Mbit/s, {rtt} ms RTT\n\n"));
        md.push_str(
            "| HTTP/3 server | h3 Mbit/s | TCP Mbit/s | h3:tcp | larger | queue drops h3 / TCP, packets | \
             drops / 100 MB, queue / loss | queue p50 / p95 / peak, packets | queue p50 / p95 / peak, ms | ok runs |\n\
             |---|---:|---:|---:|---|---:|---:|---:|---:|---|\n",
        );
        for s in &servers {
            let runs = rows.iter().filter(|r| &r.case == case && &r.server == s).count();
            match cell(rows, case, s) {
                Some(c) => {
                    let (drops, packets, ms) = c.link.map_or_else(
                        || ("n/a".into(), "n/a".into(), "n/a".into()),
                        |l| (l.fmt_drops(), l.fmt_packets(), l.fmt_ms()),
                    );
                    md.push_str(&format!(
                        "| {s} | {} | {} | {} | {} | {:.0} / {:.0} | {drops} | {packets} | {ms} | {}/{} |\n",
                        fmt_stat(&c.h3, 1),
                        fmt_stat(&c.tcp, 1),
                        fmt_stat(&c.ratio, 2),
                        larger(c.ratio.median),
                        c.h3_drops.median,
                        c.tcp_drops.median,
                        c.h3.n,
                        c.runs
                    ));
                }
                None if runs > 0 => {
                    md.push_str(&format!("| {s} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 0/{runs} |\n"))
                }
                None => {}
            }
        }
    }
    md.push_str(&statics::failed_section(rows));
    md
}

fn notes(plan: &Plan, cases: &[Case], window: Duration, file: u64, versions: &[String]) -> Vec<String> {
    let mut n = vec![
        format!(
            "Method: two downloads of the same {file}-byte random file start together from the client namespace: \
             `sluice get --http3` from the HTTP/3 server of the row, and `sluice get --http2` from \
             `{competitor}`, a second Sluice whose TCP sockets use CUBIC with no in-flight bound ({config}). The \
             window starts {warmup} s after both and lasts {window} s; both clients run {limit} s (`--max-time`), \
             so they overlap all along it, and neither can finish the file. The figures come from the link's \
             forwarder: the IP bytes it delivered server → client in UDP packets (the QUIC flow) and in TCP \
             packets (the TCP flow) over the window, × 8 / its length. h3:tcp = their ratio run by run (1 = an \
             even split; `larger` says which took more, `even` within 1 %). A run counts when both clients were \
             still running at the end of the window and both flows moved data.",
            competitor = COMPETITOR.name(),
            config = Flow::TcpCubic.describe(),
            warmup = WARMUP.as_secs(),
            window = window.as_secs(),
            limit = client_limit(window).as_secs(),
        ),
        statics::links_note(cases, plan.runs),
        "Link readings over the window, server → client: each flow's packets dropped by the full queue, all \
         drops per 100 MB delivered (by the queue / by the random loss), and the queue as arriving packets found \
         it (p50 / p95 / peak in packets, and as queueing delay in ms)."
            .into(),
    ];
    n.extend(servers::variants_note(&plan.servers));
    if !versions.is_empty() {
        n.push(format!("Versions: {}.", versions.join("; ")));
    }
    n
}

/// Expected seconds of a whole run.
pub fn expected_seconds(cases: usize, servers: usize, runs: u32, window: Duration) -> f64 {
    let each = client_limit(window).as_secs_f64() + PAUSE.as_secs_f64() + 1.0;
    each * (cases * servers * runs as usize) as f64 + 15.0 + 5.0 * servers as f64
}

/// Runs the experiment: resolves the servers, writes the file, starts the lab, the TCP competitor
/// and the HTTP/3 servers, measures every case, writes `results.csv` as it goes and then
/// `summary.md` (also after an error or Ctrl-C, from the measurements so far).
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick), |c| &c.name)?;
    let window = window(plan.quick);
    let (wanted, skipped) = select_servers(&plan.servers)?;
    let file = file_bytes(&cases, window);
    let estimate = |active: &[Active]| Estimate {
        what: format!(
            "{} case(s) × {} HTTP/3 server(s) × {} run(s), each an HTTP/3 and a TCP download together, {} s window",
            cases.len(),
            active.len(),
            plan.runs,
            window.as_secs(),
        ),
        expected: Duration::from_secs_f64(expected_seconds(cases.len(), active.len(), plan.runs, window)),
    };
    let write = |dir: &Path| transfer::write_docroot(dir, file);
    let mut p = prepare(
        plan,
        Want {
            skipped,
            none: "no HTTP/3 server to run (see the SKIP notes above)",
            sluice: Some("the fairness experiment's client and TCP competitor are Sluice"),
            site: Some(Site { write: &write, reach: 0o711 }),
            ..Want::new("fairness", wanted, &estimate, CSV_HEADER)
        },
    )?;
    let sluice = p.sluice.clone().unwrap_or_default();
    let client = sluice.to_str().ok_or("the sluice binary's path is not UTF-8")?.to_string();
    p.versions.push(format!("client: {client} get"));
    let logs = p.work.join("clients");
    fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;

    let mut rows: Vec<FRow> = Vec::new();
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&cases[0].link())?;
        let docroot = p.docroot.clone();
        let setup = p.setup(COMPETITOR);
        let ready = transfer::url(COMPETITOR, transfer::READY_FILE);
        servers::static_launch(COMPETITOR, &setup, &docroot, false)
            .and_then(|l| stage.start_static(COMPETITOR, &sluice, &setup, &l, &ready))
            .map_err(|e| format!("the TCP competitor `{}` did not start: {e}", COMPETITOR.name()))?;
        let active = p.active.clone();
        let running = p.start_each(&mut stage, &active, |stage, kind, bin, setup| {
            let ready = transfer::url(kind, transfer::READY_FILE);
            servers::static_launch_h3(kind, setup, &docroot, false)
                .and_then(|l| stage.start_static(kind, bin, setup, &l, &ready))
                .and_then(|()| transfer::probe_h3(stage, &client, &ready, transfer::READY_TEXT.len() as u64))
        });
        if running.is_empty() {
            return Err("no HTTP/3 server started (see above)".into());
        }
        let total = cases.len() * running.len() * plan.runs as usize;
        let mut done = 0;
        for case in &cases {
            stage.set_link(&case.link());
            println!(
                "== {}: {} Mbit/s, {} ms RTT, queue {}",
                case.name,
                case.rate_mbit,
                case.rtt_ms,
                case.link().down.queue
            );
            for run in 1..=plan.runs {
                for kind in rotation(&running, run) {
                    p.go_on(|| format!(" after {done} of {total} measurements"))?;
                    done += 1;
                    let row = measure(&mut stage, &client, case, kind, run, window, &logs)?;
                    proc::check_interrupt()?;
                    let o = &row.outcome;
                    let link = o.link.map_or_else(String::new, |l| {
                        format!("; queue p50/p95/peak {} packets, {} ms", l.fmt_packets(), l.fmt_ms())
                    });
                    let what = format!(
                        "h3 {:.1} Mbit/s, tcp {:.1} Mbit/s, h3:tcp {:.2} ({} larger); queue drops h3 {}, tcp {}{link}",
                        o.h3_mbps,
                        o.tcp_mbps,
                        o.ratio,
                        o.larger(),
                        o.h3_queue_drops,
                        o.tcp_queue_drops
                    );
                    if row.ok() {
                        println!("[{done}/{total}] {} run {run} {:<14} {what}", case.name, kind.name());
                    } else {
                        println!(
                            "[{done}/{total}] {} run {run} {:<14} FAILED: {} ({what})",
                            case.name,
                            kind.name(),
                            row.error
                        );
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
    let _ = fs::remove_file(p.docroot.join(transfer::FILE));

    let mut notes = notes(plan, &cases, window, file, &p.versions);
    for s in &p.skipped {
        notes.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    notes.push(format!(
        "{} of {} runs succeeded; wall time {}.",
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        fmt_duration(p.started.elapsed())
    ));
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", one_line(e)));
    }
    let md_path = plan.out.join("summary.md");
    let written =
        fs::write(&md_path, markdown(&rows, &notes)).map_err(|e| format!("writing {}: {e}", md_path.display()));
    outcome?;
    written?;
    println!(
        "fairness: done in {}; {} of {} runs ok; wrote {}/{{results.csv,summary.md}}",
        fmt_duration(p.started.elapsed()),
        rows.iter().filter(|r| r.ok()).count(),
        rows.len(),
        plan.out.display()
    );
    let (cs, ss) = order(&rows);
    for (case, _, _) in &cs {
        let parts: Vec<String> = ss
            .iter()
            .map(|s| match cell(&rows, case, s) {
                Some(c) => format!(
                    "{s} {:.2} (h3 {:.1}, tcp {:.1} Mbit/s; {} larger)",
                    c.ratio.median,
                    c.h3.median,
                    c.tcp.median,
                    larger(c.ratio.median)
                ),
                None => format!("{s} n/a"),
            })
            .collect();
        println!("h3:tcp at {case}: {}", parts.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::DirStats;

    #[test]
    fn cases_sizes_and_bounds() {
        let c = cases(false);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["20mbit-40ms", "100mbit-13ms"]);
        assert_eq!(c[0].link().down.queue, crate::model::Queue::Bytes(1_000_000));
        assert_eq!(c[1].link(), crate::experiments::case::link_spec(100.0, 13.0));
        assert_eq!(cases(true), c[..1]);
        assert_eq!((window(false), window(true)), (WINDOW, QUICK_WINDOW));
        // 2 + 25 + 2 s of clients, plus 10 s, at 100 Mbit/s: 487.5 MB, rounded up.
        assert_eq!(client_limit(WINDOW), Duration::from_secs(29));
        assert_eq!(file_bytes(&c, WINDOW), 488_000_000);
        // Quick: 20 Mbit/s for 19 s.
        assert_eq!(file_bytes(&cases(true), QUICK_WINDOW), 48_000_000);
        let e = expected_seconds(2, 1, 5, WINDOW);
        assert!((300.0..400.0).contains(&e), "{e}");
    }

    #[test]
    fn figures_of_a_window() {
        let w = Stats {
            down: DirStats {
                bytes: 40_000_000,
                udp_bytes: 15_000_000,
                tcp_bytes: 25_000_000,
                udp_dropped_queue: 3,
                tcp_dropped_queue: 40,
                dropped_queue: 43,
                ..DirStats::default()
            },
            elapsed_secs: 20.0,
            ..Stats::default()
        };
        let o = figures(&w);
        assert_eq!((o.h3_mbps, o.tcp_mbps, o.window_s), (6.0, 10.0, 20.0));
        assert!((o.ratio - 0.6).abs() < 1e-12);
        assert_eq!((o.larger(), o.h3_queue_drops, o.tcp_queue_drops), ("tcp", 3, 40));
        assert_eq!(o.link.unwrap().queue_drops_per_100mb, 107.5);
        assert_eq!((larger(1.5), larger(1.005), larger(0.5)), ("h3", "even", "tcp"));
        // Nothing from TCP: an infinite ratio, the run will fail on it.
        let lone = figures(&Stats {
            down: DirStats { udp_bytes: 1000, ..DirStats::default() },
            elapsed_secs: 1.0,
            ..Stats::default()
        });
        assert!(lone.ratio.is_infinite() && lone.tcp_mbps == 0.0);
    }

    #[test]
    fn client_logs() {
        let timed_out = "sluice get: operation timed out after 9s with 11500000 body bytes transferred\n";
        assert_eq!(client_bytes(timed_out), Some(11_500_000));
        let done = r#"{"url":"x","http_version":"3","status":200,"bytes":1234,"seconds":1.0}"#;
        assert_eq!(client_bytes(&format!("{done}\n")), Some(1234));
        assert_eq!(client_bytes("sluice get: cannot connect\n"), None);
    }

    #[test]
    fn server_selection() {
        let (k, s) = select_servers(&servers::DEFAULT).unwrap();
        assert_eq!((k, s.len()), (vec![ServerKind::Sluice], 0));
        let cubic = ServerKind::parse("sluice-h3cubic").unwrap();
        let asked = [ServerKind::Sluice, cubic, ServerKind::Nginx, COMPETITOR, ServerKind::Caddy, ServerKind::SluiceH3];
        let (k, s) = select_servers(&asked).unwrap();
        assert_eq!(k, [ServerKind::Sluice, cubic, ServerKind::Caddy]);
        let skipped: Vec<&str> = s.iter().map(|s| s.server.name()).collect();
        assert_eq!(skipped, ["nginx", "sluice-tcpcubic", "sluice-h3"]);
        assert!(s[1].reason.contains("competitor"), "{:?}", s[1]);
        assert!(select_servers(&[ServerKind::H2o]).is_err());
    }

    fn row(server: &str, run: u32, h3: f64, tcp: f64, error: &str) -> FRow {
        FRow {
            case: "20mbit-40ms".into(),
            rate_mbit: 20.0,
            rtt_ms: 40.0,
            server: server.into(),
            run,
            outcome: Outcome {
                h3_mbps: h3,
                tcp_mbps: tcp,
                ratio: h3 / tcp,
                window_s: 25.0,
                h3_queue_drops: 10,
                tcp_queue_drops: 30,
                h3_client_bytes: Some(30_000_000),
                tcp_client_bytes: None,
                link: Some(LinkWindow { queue_drops_per_100mb: 50.0, peak_packets: 666.0, ..LinkWindow::default() }),
            },
            error: error.into(),
        }
    }

    #[test]
    fn report() {
        let rows = vec![
            row("sluice", 1, 6.0, 12.0, ""),
            row("sluice", 2, 8.0, 10.0, ""),
            row("sluice-h3cubic", 1, 12.0, 6.0, ""),
            row("sluice-h3cubic", 2, 0.0, 0.0, "the TCP flow delivered nothing in the window"),
        ];
        let c = cell(&rows, "20mbit-40ms", "sluice").unwrap();
        assert_eq!((c.h3.median, c.tcp.median, c.runs), (7.0, 11.0, 2));
        assert!((c.ratio.median - 0.65).abs() < 1e-12);
        let md = markdown(&rows, &["a note".into()]);
        assert!(md.contains("- a note\n") && md.contains("## 20mbit-40ms: 20 Mbit/s, 40 ms RTT"), "{md}");
        assert!(
            md.contains(
                "| sluice | 7.0 (6.0–8.0) | 11.0 (10.0–12.0) | 0.65 (0.50–0.80) | tcp | 10 / 30 | 50.0 / 0.0 | \
                 0 / 0 / 666 | 0.0 / 0.0 / 0.0 | 2/2 |"
            ),
            "{md}"
        );
        assert!(md.contains("| sluice-h3cubic | 12.0 (12.0–12.0) | 6.0 (6.0–6.0) | 2.00 (2.00–2.00) | h3 |"), "{md}");
        assert!(md.contains("- 20mbit-40ms sluice-h3cubic run 2: the TCP flow delivered nothing"), "{md}");
        let line = csv_line(&rows[0]);
        assert_eq!(line.split(',').count(), CSV_HEADER.split(',').count(), "{line}");
        assert!(
            line.starts_with(
                "fairness,20mbit-40ms,40,20,sluice,1,6.000,12.000,0.5000,tcp,25.000,10,30,30000000,,50.00,"
            ),
            "{line}"
        );
        assert!(line.ends_with(",true,\"\"\n"), "{line}");
    }
}
