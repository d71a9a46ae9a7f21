//! The `upload` experiment (write-up `000_…txt`): a 10 MiB random body POSTed with
//! `curl --http1.1` and `curl --http2` to each server's upload sink over TLS, at 200 Mbit/s
//! with a 40 ms and a 10 ms round trip. The figure is curl's `%{speed_upload}` (bytes/s over
//! the whole transfer) in Mbit/s. `Expect: 100-continue` is turned off for every protocol
//! alike (`-H 'Expect:'`): curl would otherwise wait up to a second, or a round trip, before
//! sending an HTTP/1.1 body this large, and HTTP/2 never waits.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::case::link_spec;
use super::chart;
use super::common::{fmt_duration, one_line, rotation, write_random};
use super::plan::{sluice_path, Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Want};
use super::proc;
use super::report::{self, Row, Summary};
use super::servers::{self, ServerKind};
use super::stage::{self, Stage};

/// Body size: 10 MiB, as the write-up's `dd if=/dev/urandom of=test.dat bs=1M count=10`.
pub const BODY_BYTES: u64 = 10 * 1024 * 1024;
/// Link rate of every case, Mbit/s (the write-up's "200Mbps available bandwidth").
const RATE_MBIT: f64 = 200.0;
/// RTTs of the cases, ms: the write-up's 40 ms, then 10 ms. `--quick` runs the first only.
const RTTS_MS: [f64; 2] = [40.0, 10.0];
/// curl's `--max-time` per upload: 10 MiB at 2 Mbit/s, far below any sane result.
const CURL_MAX_TIME: Duration = Duration::from_secs(45);
/// Pause between uploads, so queues drain and closed connections finish.
const PAUSE: Duration = Duration::from_millis(300);
/// Rough seconds per upload for the duration estimate: measured 1.7 s on average over both
/// cases and all five servers (h1 ≈ 0.5–0.8 s, nginx h2 3.5 s at 40 ms, plus the pause).
pub const SECS_PER_UPLOAD: f64 = 2.0;

/// One link setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Name in the CSV: `200mbit-40ms`.
    pub name: String,
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
}

/// The servers the global default `--servers` means here: the default list and `sluice-proxy`
/// (Sluice as a reverse proxy to the same sink as the peers).
pub fn default_servers() -> Vec<ServerKind> {
    servers::DEFAULT.iter().copied().chain([ServerKind::SluiceProxy]).collect()
}

/// The cases: 200 Mbit/s × 40 ms and × 10 ms RTT; `quick` keeps the first; `gigabit` adds
/// the fast, short links: 1 Gbit/s × 2 ms and × 5 ms, 500 Mbit/s × 5 ms.
pub fn cases(quick: bool, gigabit: bool) -> Vec<Case> {
    let n = if quick { 1 } else { RTTS_MS.len() };
    let mut v: Vec<Case> = RTTS_MS[..n]
        .iter()
        .map(|&rtt| Case { name: format!("{RATE_MBIT}mbit-{rtt}ms"), rate_mbit: RATE_MBIT, rtt_ms: rtt })
        .collect();
    if gigabit {
        for (rate, rtt) in [(1000.0, 2.0), (1000.0, 5.0), (500.0, 5.0)] {
            v.push(Case { name: format!("{rate}mbit-{rtt}ms"), rate_mbit: rate, rtt_ms: rtt });
        }
    }
    v
}

/// A protocol curl is told to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// `--http1.1`.
    H1,
    /// `--http2` (over TLS: ALPN h2).
    H2,
    /// HTTP/3, with `sluice put --http3` (curl here has no HTTP/3); Sluice only.
    H3,
}

impl Proto {
    /// Name in the CSV.
    pub fn name(self) -> &'static str {
        match self {
            Self::H1 => "h1",
            Self::H2 => "h2",
            Self::H3 => "h3",
        }
    }

    fn curl_flag(self) -> &'static str {
        match self {
            Self::H1 => "--http1.1",
            Self::H2 => "--http2",
            Self::H3 => "--http3",
        }
    }

    /// What curl's `%{http_version}` says for it.
    fn curl_version(self) -> &'static str {
        match self {
            Self::H1 => "1.1",
            Self::H2 => "2",
            Self::H3 => "3",
        }
    }
}

/// curl's `-w` format: status, negotiated version, speed_upload (bytes/s), size_upload,
/// time_total.
const CURL_W: &str = "%{http_code} %{http_version} %{speed_upload} %{size_upload} %{time_total}";

/// What curl's `-w` reported.
#[derive(Clone, Debug, PartialEq)]
pub struct CurlFigures {
    /// HTTP status.
    pub code: u16,
    /// HTTP version (`1.1`, `2`).
    pub version: String,
    /// Average upload speed, bytes per second.
    pub speed_upload: f64,
    /// Bytes uploaded.
    pub size_upload: f64,
    /// Whole transfer, seconds.
    pub time_total: f64,
}

/// Parses the output of [`CURL_W`].
pub fn parse_curl_w(out: &str) -> Result<CurlFigures, String> {
    let parts: Vec<&str> = out.split_whitespace().collect();
    let [code, version, speed, size, total] = parts[..] else {
        return Err(format!("curl's -w output is not `code version speed size time`: {:?}", out.trim()));
    };
    let num = |what: &str, s: &str| -> Result<f64, String> {
        s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| format!("curl's {what} is {s:?}"))
    };
    Ok(CurlFigures {
        code: code.parse().map_err(|_| format!("curl's http_code is {code:?}"))?,
        version: version.to_string(),
        speed_upload: num("speed_upload", speed)?,
        size_upload: num("size_upload", size)?,
        time_total: num("time_total", total)?,
    })
}

/// The sink's answer `{"bytes":N,"seconds":S,"mbps":M}`: (bytes, seconds).
pub fn parse_sink_answer(body: &str) -> Option<(u64, f64)> {
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    Some((v.get("bytes")?.as_u64()?, v.get("seconds")?.as_f64()?))
}

/// The verdict on one upload: (Mbit/s, seconds, sink seconds, error; empty error = ok).
pub fn judge(
    exit_ok: bool,
    exit_desc: &str,
    stderr: &str,
    w: &str,
    body: &str,
    proto: Proto,
) -> (f64, f64, Option<f64>, String) {
    let fig = match parse_curl_w(w) {
        Ok(f) => f,
        Err(e) if exit_ok => return (0.0, 0.0, None, e),
        Err(_) => return (0.0, 0.0, None, format!("curl {exit_desc}: {}", stderr.trim())),
    };
    let mbps = fig.speed_upload * 8.0 / 1e6;
    let sink = parse_sink_answer(body);
    let sink_secs = sink.map(|s| s.1);
    let error = if !exit_ok {
        format!("curl {exit_desc}: {}", stderr.trim())
    } else if fig.code != 200 {
        format!("HTTP {}: {}", fig.code, body.chars().take(200).collect::<String>().trim())
    } else if fig.version != proto.curl_version() {
        format!("curl negotiated HTTP/{} instead of HTTP/{}", fig.version, proto.curl_version())
    } else if fig.size_upload as u64 != BODY_BYTES {
        format!("curl uploaded {} bytes, not {BODY_BYTES}", fig.size_upload)
    } else if sink.map(|s| s.0) != Some(BODY_BYTES) {
        format!("the sink did not confirm {BODY_BYTES} bytes: {}", body.chars().take(200).collect::<String>().trim())
    } else if mbps <= 0.0 {
        "curl reported no upload speed".into()
    } else {
        String::new()
    };
    (mbps, fig.time_total, sink_secs, error)
}

/// The order of protocols in run `run`: h1 first in odd runs, h2 first in even runs.
pub fn proto_order(run: u32) -> [Proto; 2] {
    if run % 2 == 1 {
        [Proto::H1, Proto::H2]
    } else {
        [Proto::H2, Proto::H1]
    }
}

/// Runs the experiment: resolves the servers, starts the lab and the servers, runs every case,
/// writes `results.csv` as it goes, then `summary.md`, `upload.png` and `upload.svg` (also
/// after an error or Ctrl-C, from the runs done so far).
pub fn run(plan: &Plan) -> Result<(), String> {
    let cases = plan.select(cases(plan.quick, plan.gigabit), |c| &c.name)?;
    // The global default list gains Sluice as a proxy here.
    let plan = &Plan {
        servers: if plan.servers == servers::DEFAULT { default_servers() } else { plan.servers.clone() },
        ..plan.clone()
    };
    // HTTP/3 uploads too where the server is Sluice (its own `/__up`; the peers' Debian
    // packages have no HTTP/3, or proxy it).
    let protos_of = |k: ServerKind| if k.uses_sink() { 2 } else { 3 };
    let uploads_of = |servers: &[ServerKind]| {
        cases.len() * servers.iter().map(|&k| protos_of(k)).sum::<usize>() * plan.runs as usize
    };
    let estimate = |active: &[Active]| {
        let uploads = uploads_of(&active.iter().map(|(k, _)| *k).collect::<Vec<_>>());
        Estimate {
            what: format!(
                "{} case(s) × {} server(s) × 2–3 protocols × {} run(s) = {uploads} uploads of {BODY_BYTES} bytes, \
                 ~{SECS_PER_UPLOAD:.0} s each",
                cases.len(),
                active.len(),
                plan.runs,
            ),
            expected: Duration::from_secs_f64(uploads as f64 * SECS_PER_UPLOAD + 10.0 + 3.0 * active.len() as f64),
        }
    };
    let csv_header = report::csv_header_line();
    let mut p = prepare(plan, Want::new("upload", plan.servers.clone(), &estimate, &csv_header))?;
    let work = p.work.clone();
    let body = work.join("body.bin");
    write_random(&body, BODY_BYTES, u64::from(std::process::id()))?;
    let body_arg = format!("@{}", servers::check_config_path(&body)?);

    let mut rows: Vec<Row> = Vec::new();
    let mut cpu_max = 0.0f64;
    let mut final_stats = None;
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&link_spec(cases[0].rate_mbit, cases[0].rtt_ms))?;
        let mut running: Vec<ServerKind> = Vec::new();
        let mut sink_error = None;
        if p.active.iter().any(|(k, _)| k.uses_sink()) {
            let started = sluice_path(&p.active, plan).and_then(|s| stage.start_sink(&s, &work, &p.cert, &p.key));
            if let Err(e) = started {
                eprintln!("sluice-lab: the upstream sink did not start, so the proxies are skipped: {e}");
                sink_error = Some(one_line(&e));
            }
        }
        for server in p.active.clone() {
            if let (true, Some(e)) = (server.0.uses_sink(), &sink_error) {
                p.skipped.push(Skipped { server: server.0, reason: format!("the upstream sink did not start: {e}") });
                continue;
            }
            let started =
                p.start_each(&mut stage, &[server], |stage, kind, bin, setup| stage.start_server(kind, bin, setup));
            running.extend(started);
        }
        if running.is_empty() {
            return Err("no server started (see above)".into());
        }
        let total = uploads_of(&running);
        let sluice_bin = sluice_path(&p.active, plan)?;
        let mut done = 0;
        for case in &cases {
            stage.set_link(&link_spec(case.rate_mbit, case.rtt_ms));
            println!("== {}: {} Mbit/s, {} ms RTT", case.name, case.rate_mbit, case.rtt_ms);
            for run in 1..=plan.runs {
                for kind in rotation(&running, run) {
                    let mut protos = proto_order(run).to_vec();
                    if !kind.uses_sink() {
                        protos.push(Proto::H3);
                    }
                    for proto in protos {
                        p.go_on(|| format!(" after {done} of {total} uploads"))?;
                        done += 1;
                        let before = stage.stats();
                        let mut row = if proto == Proto::H3 {
                            upload_h3(&mut stage, &sluice_bin, case, kind, run, &body_arg)?
                        } else {
                            upload_once(&mut stage, case, kind, proto, run, &body_arg, &work)?
                        };
                        // Ctrl-C reaches curl too: that failure is not the server's.
                        proc::check_interrupt()?;
                        let window = stage.stats().since(&before);
                        row.link = report::LinkWindow::of(&window.up);
                        cpu_max = cpu_max.max(window.cpu_pct());
                        println!(
                            "[{done}/{total}] {} run {run} {:<14} {}: {}",
                            case.name,
                            kind.name(),
                            proto.name(),
                            describe_row(&row, window.cpu_pct(), window.up.dropped())
                        );
                        p.csv.line(&report::csv_line(&row))?;
                        rows.push(row);
                        proc::sleep(PAUSE)?;
                    }
                }
            }
        }
        final_stats = stage.stop();
        Ok(())
    })();
    let _ = fs::remove_file(&body);

    // Whatever happened, write what we have.
    let mut notes = notes(plan, &cases, &p.versions, &p.skipped, &rows, cpu_max, p.started.elapsed());
    if let Some(s) = final_stats {
        notes.push(format!("Link forwarder over the whole run: {}", s.to_string().replace('\n', "; ")));
    }
    if let Err(e) = &outcome {
        notes.insert(0, format!("**Incomplete run**: {}", one_line(e)));
    }
    let written = write_outputs(&plan.out, "upload", &rows, &upload_title(), &notes);
    match (outcome, written) {
        (Ok(()), Ok(())) => {
            println!(
                "upload: done in {}; {} of {} uploads ok; wrote {}/{{results.csv,summary.md,upload.png,upload.svg}}",
                fmt_duration(p.started.elapsed()),
                rows.iter().filter(|r| r.ok).count(),
                rows.len(),
                plan.out.display()
            );
            print_ratios(&Summary::from_rows(&rows));
            Ok(())
        }
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(e),
    }
}

/// Writes `summary.md` and the charts `<stem>.png`/`.svg` from `rows` into `dir`.
pub fn write_outputs(dir: &Path, stem: &str, rows: &[Row], title: &str, notes: &[String]) -> Result<(), String> {
    let summary = Summary::from_rows(rows);
    let md = report::markdown(&summary, title, notes);
    let md_path = dir.join("summary.md");
    fs::write(&md_path, md).map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    chart::write_charts(dir, stem, &summary, title)
}

/// One HTTP/3 upload: `sluice put --http3` in the client namespace, judged into a row like
/// curl's (the figure is the client's bytes over its total time, handshake included).
fn upload_h3(
    stage: &mut Stage,
    sluice: &Path,
    case: &Case,
    kind: ServerKind,
    run: u32,
    body_arg: &str,
) -> Result<Row, String> {
    let mut row = Row::pending("upload", &case.name, case.rtt_ms, case.rate_mbit, kind.name(), Proto::H3.name(), run);
    if let Err(e) = stage.check_alive(kind.name()) {
        row.error = one_line(&e);
        return Ok(row);
    }
    let max = CURL_MAX_TIME.as_secs().to_string();
    let url = stage::upload_url(kind);
    let args = ["put", "--http3", "-k", "-s", "--json", "--connect-timeout", "10", "--max-time", &max, "--data"];
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.push(body_arg.to_string());
    args.push(url);
    let program = sluice.to_string_lossy().into_owned();
    let f = stage.client(&program, &args, CURL_MAX_TIME + Duration::from_secs(10))?;
    let (mbps, seconds, sink, error) = judge_h3(f.success(), &f.describe(), &f.stderr, &f.stdout);
    row.mbps = mbps;
    row.seconds = seconds;
    row.sink_seconds = sink;
    row.ok = error.is_empty();
    row.error = error;
    Ok(row)
}

/// The verdict on one `sluice put --http3 --json`: (Mbit/s, seconds, sink seconds, error).
pub fn judge_h3(exit_ok: bool, exit_desc: &str, stderr: &str, stdout: &str) -> (f64, f64, Option<f64>, String) {
    if !exit_ok {
        return (0.0, 0.0, None, format!("sluice put {exit_desc}: {}", stderr.trim()));
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(stdout.trim()) else {
        return (0.0, 0.0, None, format!("sluice put printed no JSON: {:?}", stdout.trim()));
    };
    let mbps = v["mbps"].as_f64().unwrap_or(0.0);
    let seconds = v["seconds"].as_f64().unwrap_or(0.0);
    let sink = v["response"]["seconds"].as_f64();
    let error = if v["status"] != 200 {
        format!("HTTP {}", v["status"])
    } else if v["http_version"] != "3" {
        format!("sluice put spoke HTTP/{} instead of HTTP/3", v["http_version"].as_str().unwrap_or("?"))
    } else if v["bytes"].as_u64() != Some(BODY_BYTES) || v["response"]["bytes"].as_u64() != Some(BODY_BYTES) {
        format!("the upload or the sink's count is not {BODY_BYTES} bytes: {}", stdout.trim())
    } else if mbps <= 0.0 {
        "sluice put reported no speed".into()
    } else {
        String::new()
    };
    (mbps, seconds, sink, error)
}

/// One upload: curl in the client namespace, judged into a row (a failed upload is a row
/// with `ok = false`, not an error; only an interrupt is an error).
fn upload_once(
    stage: &mut Stage,
    case: &Case,
    kind: ServerKind,
    proto: Proto,
    run: u32,
    body_arg: &str,
    work: &Path,
) -> Result<Row, String> {
    let mut row = Row::pending("upload", &case.name, case.rtt_ms, case.rate_mbit, kind.name(), proto.name(), run);
    if let Err(e) = stage.check_alive(kind.name()) {
        row.error = one_line(&e);
        return Ok(row);
    }
    let answer: PathBuf = work.join("answer.json");
    let _ = fs::remove_file(&answer);
    let answer_arg = servers::check_config_path(&answer)?;
    let args: Vec<String> = [
        proto.curl_flag(),
        "-k",
        "-sS",
        "--noproxy",
        "*",
        "-H",
        "Expect:",
        "-H",
        "Content-Type: application/octet-stream",
        "--connect-timeout",
        "10",
        "--max-time",
        &CURL_MAX_TIME.as_secs().to_string(),
        "--data-binary",
        body_arg,
        "-o",
        &answer_arg,
        "-w",
        CURL_W,
        &stage::upload_url(kind),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let f = stage.client("curl", &args, CURL_MAX_TIME + Duration::from_secs(10))?;
    let body = fs::read_to_string(&answer).unwrap_or_default();
    let (mbps, seconds, sink, error) = judge(f.success(), &f.describe(), &f.stderr, &f.stdout, &body, proto);
    row.mbps = mbps;
    row.seconds = seconds;
    row.sink_seconds = sink;
    row.ok = error.is_empty();
    row.error = error;
    Ok(row)
}

fn describe_row(r: &Row, cpu_pct: f64, drops: u64) -> String {
    let fwd = format!("forwarder {cpu_pct:.0} % CPU, {drops} drops up");
    if r.ok {
        let sink = r.sink_seconds.map(|s| format!(", sink {s:.2} s")).unwrap_or_default();
        format!("{:.1} Mbit/s ({:.2} s{sink}; {fwd})", r.mbps, r.seconds)
    } else {
        format!("FAILED: {} ({fwd})", r.error)
    }
}

fn upload_title() -> String {
    format!("upload: {} MiB POST, curl -w %{{speed_upload}}, TLS", BODY_BYTES / (1024 * 1024))
}

/// Prints the h2/h1 ratios, case by case, for the console.
fn print_ratios(s: &Summary) {
    for case in &s.cases {
        let parts: Vec<String> = s
            .servers
            .iter()
            .map(|srv| match s.ratio(&case.name, srv, "h2", "h1") {
                Some(r) => format!("{srv} {r:.2}"),
                None => format!("{srv} n/a"),
            })
            .collect();
        println!("h2/h1 at {}: {}", report::case_title(case), parts.join(", "));
    }
}

/// Median of sink time / client time per server over successful runs: near 1 when the body
/// streams through, near 0 when a proxy buffered it all before forwarding.
pub fn sink_share(rows: &[Row], server: &str) -> Option<f64> {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.ok && r.server == server && r.seconds > 0.0)
        .filter_map(|r| r.sink_seconds.map(|s| s / r.seconds))
        .collect();
    report::Stat::of(&v).map(|s| s.median)
}

/// The notes at the top of `summary.md`: method, link, servers and versions, what was skipped.
fn notes(
    plan: &Plan,
    cases: &[Case],
    versions: &[String],
    skipped: &[Skipped],
    rows: &[Row],
    cpu_max: f64,
    elapsed: Duration,
) -> Vec<String> {
    let mut n = vec![
        format!(
            "Method: {} bytes of random data POSTed with `curl --http1.1` and `curl --http2` (TLS, `-k`, \
             `--data-binary`), one connection per upload; the figure is curl's `%{{speed_upload}}` (bytes/s \
             over the whole transfer, TLS handshake included) × 8 / 10⁶. Runs: {} per server, protocol and case; \
             the server order rotates run by run and the protocol order alternates. Sluice (and its variants) \
             also gets an HTTP/3 upload each run, after the two: `sluice put --http3 --json` (this curl has no \
             HTTP/3), the figure its bytes over its total time, QUIC handshake included; the h3/h1 column \
             compares it with curl's HTTP/1.1 to the same server.",
            BODY_BYTES, plan.runs
        ),
        "`Expect: 100-continue` is disabled for every protocol alike (`-H 'Expect:'`): curl would otherwise \
         hold an HTTP/1.1 body of this size back for a round trip or its 1 s timeout, while HTTP/2 never waits."
            .into(),
        format!(
            "Link: sluice-lab's emulator between two network namespaces, {} both ways, one-way delay RTT/2 per \
             direction, drop-tail queue 1.5 × BDP, no loss; cases: {}.",
            cases.first().map(|c| format!("{} Mbit/s", c.rate_mbit)).unwrap_or_default(),
            cases.iter().map(|c| format!("{} ms RTT", c.rtt_ms)).collect::<Vec<_>>().join(", ")
        ),
        "Servers, each with TLS on the server address with one self-signed certificate: `sluice` (the binary \
         under test, default settings) answers `POST /__up` itself. The peers proxy `POST /up` to one upstream sink, a second Sluice \
         serving cleartext HTTP/1.1 on 127.0.0.1:9000 inside the server namespace whose `/__up` reads the whole \
         body: `nginx` as the write-up ran it (`client_body_buffer_size 128k`, default \
         `http2_body_preread_size 64k`, `proxy_request_buffering off`, `proxy_http_version 1.1`, one worker), \
         `nginx512` the same with 512k, `h2o` (`proxy.reverse.url`, one thread), `caddy` (`reverse_proxy`), \
         `sluice-proxy` (Sluice with its defaults, `[[upstream]] servers = [\"127.0.0.1:9000\"]` and the route \
         `/p/` proxied to it: Sluice does not rewrite paths, so the upload goes to `/p/__up` and the sink answers \
         it under a `/p/` speedtest route)."
            .into(),
    ];
    n.extend(servers::variants_note(&plan.servers));
    let shares: Vec<String> = plan
        .servers
        .iter()
        .filter_map(|k| {
            let note = |s: f64| if s < 0.2 { " (buffers the whole body before forwarding)" } else { "" };
            sink_share(rows, k.name()).map(|s| format!("{} {s:.2}{}", k.name(), note(s)))
        })
        .collect();
    if !shares.is_empty() {
        n.push(format!(
            "Sink time / client time (median; near 1: the body streams through, near 0: the proxy buffered all \
             of it before forwarding): {}.",
            shares.join(", ")
        ));
    }
    if !versions.is_empty() {
        n.push(format!("Versions: {}.", versions.join("; ")));
    }
    for s in skipped {
        n.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    let ok = rows.iter().filter(|r| r.ok).count();
    n.push(format!(
        "{ok} of {} uploads succeeded (failed ones are in results.csv with their error, out of the figures); \
         wall time {}; link forwarder peaked at {cpu_max:.0} % of one core during an upload{}.",
        rows.len(),
        fmt_duration(elapsed),
        if cpu_max > 85.0 { " (near CPU-bound: figures near the link rate may be capped by the emulator)" } else { "" }
    ));
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::SERVER_ADDR;

    #[test]
    fn h3_upload_verdicts() {
        let ok = format!(
            r#"{{"http_version":"3","status":200,"bytes":{BODY_BYTES},"seconds":0.8,"mbps":104.9,"response":{{"bytes":{BODY_BYTES},"seconds":0.7}}}}"#
        );
        assert_eq!(judge_h3(true, "exit 0", "", &ok), (104.9, 0.8, Some(0.7), String::new()));
        assert!(judge_h3(true, "exit 0", "", &ok.replace("\"3\"", "\"2\"")).3.contains("HTTP/2"));
        assert!(judge_h3(true, "exit 0", "", &ok.replace("200", "502")).3.contains("HTTP 502"));
        let short = ok.replacen(&BODY_BYTES.to_string(), "5", 2);
        assert!(judge_h3(true, "exit 0", "", &short).3.contains("not"));
        assert!(judge_h3(false, "exit 28", "timed out", "").3.contains("exit 28: timed out"));
        assert!(judge_h3(true, "exit 0", "", "nope").3.contains("no JSON"));
    }

    #[test]
    fn sluice_proxy_joins_the_default_servers() {
        let d = default_servers();
        assert_eq!(d[..servers::DEFAULT.len()], servers::DEFAULT);
        assert_eq!(d.last(), Some(&ServerKind::SluiceProxy));
        assert_eq!(stage::upload_url(ServerKind::SluiceProxy), format!("https://{SERVER_ADDR}:8463/p/__up"));
    }

    #[test]
    fn cases_and_orders() {
        let c = cases(false, false);
        let fast: Vec<String> = cases(false, true).into_iter().map(|c| c.name).collect();
        assert_eq!(fast, ["200mbit-40ms", "200mbit-10ms", "1000mbit-2ms", "1000mbit-5ms", "500mbit-5ms"]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], Case { name: "200mbit-40ms".into(), rate_mbit: 200.0, rtt_ms: 40.0 });
        assert_eq!(c[1].name, "200mbit-10ms");
        assert_eq!(cases(true, false).len(), 1);
        assert_eq!(rotation(&[1, 2, 3], 1), [1, 2, 3]);
        assert_eq!(rotation(&[1, 2, 3], 2), [2, 3, 1]);
        assert_eq!(rotation(&[1, 2, 3], 4), [1, 2, 3]);
        assert!(rotation::<u8>(&[], 3).is_empty());
        assert_eq!(proto_order(1), [Proto::H1, Proto::H2]);
        assert_eq!(proto_order(2), [Proto::H2, Proto::H1]);
    }

    const SINK_OK: &str = "{\"bytes\":10485760,\"seconds\":0.52,\"mbps\":161.3}";

    #[test]
    fn curl_output_parsing() {
        let f = parse_curl_w("200 2 20971520 10485760 0.512\n").unwrap();
        assert_eq!(f.code, 200);
        assert_eq!(f.version, "2");
        assert_eq!(f.speed_upload, 20971520.0);
        assert!(parse_curl_w("").is_err());
        assert!(parse_curl_w("200 2 fast 1 1").unwrap_err().contains("speed_upload"));
        assert!(parse_curl_w("200 2 -5 1 1").is_err());
    }

    #[test]
    fn judging_uploads() {
        let (mbps, secs, sink, err) = judge(true, "exit 0", "", "200 1.1 20971520 10485760 0.5", SINK_OK, Proto::H1);
        assert_eq!(err, "");
        assert!((mbps - 167.77216).abs() < 1e-9);
        assert_eq!(secs, 0.5);
        assert_eq!(sink, Some(0.52));
        // Wrong protocol negotiated.
        let e = judge(true, "exit 0", "", "200 1.1 20971520 10485760 0.5", SINK_OK, Proto::H2).3;
        assert!(e.contains("HTTP/1.1 instead of HTTP/2"), "{e}");
        // Proxy error.
        let e = judge(true, "exit 0", "", "502 2 100 10485760 0.5", "<html>Bad Gateway</html>", Proto::H2).3;
        assert!(e.starts_with("HTTP 502"), "{e}");
        // Truncated body at the sink.
        let e = judge(true, "exit 0", "", "200 2 100 10485760 0.5", "{\"bytes\":5,\"seconds\":1}", Proto::H2).3;
        assert!(e.contains("did not confirm"), "{e}");
        // curl failed (timeout) with partial figures.
        let e = judge(false, "exit 28", "curl: (28) Operation timed out", "000 2 100 5000 45", "", Proto::H2).3;
        assert!(e.contains("exit 28") && e.contains("timed out"), "{e}");
        // curl failed without output.
        let e = judge(false, "exit 7", "curl: (7) Failed to connect", "", "", Proto::H1).3;
        assert!(e.contains("Failed to connect"), "{e}");
    }

    #[test]
    fn sink_answer_and_share() {
        assert_eq!(parse_sink_answer(SINK_OK), Some((10485760, 0.52)));
        assert_eq!(parse_sink_answer("nope"), None);
        let mk = |server: &str, seconds: f64, sink: Option<f64>| Row {
            experiment: "upload".into(),
            case: "c".into(),
            rtt_ms: 40.0,
            rate_mbit: 200.0,
            server: server.into(),
            protocol: "h2".into(),
            run: 1,
            mbps: 1.0,
            seconds,
            ok: true,
            sink_seconds: sink,
            link: None,
            error: String::new(),
        };
        let rows = [mk("h2o", 2.0, Some(0.02)), mk("nginx", 2.0, Some(1.9)), mk("nginx", 1.0, Some(1.0))];
        assert_eq!(sink_share(&rows, "h2o"), Some(0.01));
        assert_eq!(sink_share(&rows, "nginx"), Some(0.975));
        assert_eq!(sink_share(&rows, "caddy"), None);
    }

    #[test]
    fn random_body_has_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b");
        write_random(&p, 100_003, u64::from(std::process::id())).unwrap();
        let b = fs::read(&p).unwrap();
        assert_eq!(b.len(), 100_003);
        // Not constant (incompressible data is the point).
        assert!(b.windows(2).filter(|w| w[0] != w[1]).count() > 90_000);
    }

    #[test]
    fn outputs_from_rows() {
        let dir = tempfile::tempdir().unwrap();
        let csv = "\
experiment,case,rtt_ms,rate_mbit,server,protocol,run,mbps,seconds,ok
upload,200mbit-40ms,40,200,sluice,h1,1,180,0.5,true
upload,200mbit-40ms,40,200,sluice,h2,1,90,1,true
";
        let rows = report::parse_csv(csv).unwrap();
        write_outputs(dir.path(), "upload", &rows, "t", &["note".into()]).unwrap();
        let md = fs::read_to_string(dir.path().join("summary.md")).unwrap();
        assert!(md.contains("| sluice | 180.0 (180.0–180.0) | 90.0 (90.0–90.0) | 0.50 |"), "{md}");
        assert!(dir.path().join("upload.png").metadata().unwrap().len() > 0);
        assert!(dir.path().join("upload.svg").metadata().unwrap().len() > 0);
    }
}
