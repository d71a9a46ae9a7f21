//! What the static-docroot experiments (`priority`, `pageload`) share: every server serves the
//! same generated docroot over TLS with one self-signed certificate; the plain servers run
//! first, then the `-tuned` ones with the write-up's sysctls set in the server namespace
//! (restored afterwards, also on error); in every case each run measures each server once, in
//! an order rotating run by run, and appends a CSV line as soon as it has it.

use std::path::Path;
use std::time::Duration;

use super::case::Case;
use super::common::{fmt_duration, rotation, whole_on_one_line};
use super::plan::{Active, Plan, Skipped};
use super::prepare::{prepare, Estimate, Prepared, Site, Want};
use super::proc;
use super::servers::{self, ServerKind};
use super::stage::Stage;
use super::transfer;
use crate::net::{self, SERVER_ADDR, SERVER_NS};

/// The prioritization write-up's tuning, set in the server namespace for the `-tuned` servers:
/// (sysctl, value).
pub const TUNING: [(&str, &str); 2] =
    [("net.ipv4.tcp_notsent_lowat", "16384"), ("net.ipv4.tcp_congestion_control", "bbr")];

/// One measurement of one server in one case.
#[derive(Clone, Debug, PartialEq)]
pub struct Row<O> {
    /// Case name.
    pub case: String,
    /// Link rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Server name.
    pub server: String,
    /// Run, from 1.
    pub run: u32,
    /// The figures (the default when failed).
    pub outcome: O,
    /// Empty when ok.
    pub error: String,
}

impl<O> Row<O> {
    /// Whether the run succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_empty()
    }
}

/// Cases (name, rate, RTT) and servers in first-seen order.
pub fn order<O>(rows: &[Row<O>]) -> (Vec<(String, f64, f64)>, Vec<String>) {
    let mut cases: Vec<(String, f64, f64)> = Vec::new();
    let mut servers: Vec<String> = Vec::new();
    for r in rows {
        if !cases.iter().any(|c| c.0 == r.case) {
            cases.push((r.case.clone(), r.rate_mbit, r.rtt_ms));
        }
        if !servers.contains(&r.server) {
            servers.push(r.server.clone());
        }
    }
    (cases, servers)
}

/// The "Links: …; runs: …" note.
pub fn links_note(cases: &[Case], runs: u32) -> String {
    format!(
        "Links: {}; runs: {runs} per server and case, server order rotating run by run.",
        cases
            .iter()
            .map(|c| format!(
                "{} Mbit/s × {} ms RTT, drop-tail queue {}",
                c.rate_mbit,
                c.rtt_ms,
                c.queue_bytes.map(|q| format!("{q} bytes")).unwrap_or_else(|| "1.5 × BDP".into())
            ))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// The tuning note for the `-tuned` servers.
pub fn tuning_note() -> String {
    TUNING.map(|(k, v)| format!("`{k} = {v}`")).join(" and ")
}

/// The notes every report ends with: versions, skipped servers, counts and wall time.
pub fn closing_notes<O>(ran: &Ran<O>) -> Vec<String> {
    let mut n = Vec::new();
    if !ran.versions.is_empty() {
        n.push(format!("Versions: {}.", ran.versions.join("; ")));
    }
    for s in &ran.skipped {
        n.push(format!("Skipped `{}`: {}", s.server.name(), s.reason));
    }
    n.push(format!(
        "{} of {} runs succeeded; wall time {}.",
        ran.rows.iter().filter(|r| r.ok()).count(),
        ran.rows.len(),
        fmt_duration(ran.elapsed)
    ));
    if let Err(e) = &ran.outcome {
        n.insert(0, format!("**Incomplete run**: {}", e.lines().next().unwrap_or_default()));
    }
    n
}

/// The "Failed runs" section of a report (empty when none failed).
pub fn failed_section<O>(rows: &[Row<O>]) -> String {
    let failed: Vec<&Row<O>> = rows.iter().filter(|r| !r.ok()).collect();
    let mut md = String::new();
    if !failed.is_empty() {
        md.push_str("\n## Failed runs\n\n");
        for r in failed {
            md.push_str(&format!("- {} {} run {}: {}\n", r.case, r.server, r.run, r.error));
        }
    }
    md
}

/// One static-docroot experiment.
pub struct Spec<'a, O> {
    /// Its name (`priority`, `pageload`).
    pub name: &'static str,
    /// The links.
    pub cases: &'a [Case],
    /// Rough seconds of one run of one server over all cases.
    pub seconds_per_run: f64,
    /// Writes the docroot into the directory given.
    pub docroot: &'a dyn Fn(&Path) -> Result<(), String>,
    /// Measures the server (its TLS port is `kind.port()` on the server address) once, on the
    /// link of the current case (the stage, for the link's counters).
    pub measure: &'a dyn Fn(ServerKind, &Stage, &Case) -> Result<O, String>,
    /// Whether the experiment knows the `-h3` servers (served with HTTP/3 too, the client
    /// forced onto it); elsewhere they are skipped with the reason.
    pub h3: bool,
    /// The CSV header.
    pub csv_header: &'static str,
    /// One CSV line.
    pub csv_line: fn(&Row<O>) -> String,
    /// What to print for a successful run.
    pub describe: fn(&O) -> String,
    /// Pause after each measurement, so queues drain.
    pub pause: Duration,
    /// Size of `style.css` in the docroot (the `-h3` servers' HTTP/3 readiness probe).
    pub probe_bytes: u64,
}

/// What a run produced; `outcome` is the error that stopped it early, if any (the rows so far
/// are still reported).
pub struct Ran<O> {
    /// Every measurement.
    pub rows: Vec<Row<O>>,
    /// Servers left out, and why.
    pub skipped: Vec<Skipped>,
    /// Tool versions.
    pub versions: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
    /// `Err` when the run stopped early.
    pub outcome: Result<(), String>,
}

/// Runs `spec`: starts the lab, the servers phase by phase, measures, writes `results.csv`.
/// Errors before the first measurement are returned; later ones end up in [`Ran::outcome`].
pub fn run<O: Default>(plan: &Plan, spec: &Spec<'_, O>, extra_versions: Vec<String>) -> Result<Ran<O>, String> {
    let refuse = |k: ServerKind| {
        (!spec.h3 && k.is_h3())
            .then(|| format!("the {} experiment has no HTTP/3 client; `{}` is for pageload", spec.name, k.name()))
    };
    let estimate = |active: &[Active]| Estimate {
        what: format!("{} case(s) × {} server(s) × {} run(s)", spec.cases.len(), active.len(), plan.runs),
        expected: Duration::from_secs_f64(
            spec.seconds_per_run * (active.len() * plan.runs as usize) as f64 + 5.0 * active.len() as f64,
        ),
    };
    let mut p = prepare(
        plan,
        Want {
            refuse: &refuse,
            // nginx and h2o workers read the files as nobody: every parent must be traversable.
            site: Some(Site { write: spec.docroot, reach: 0o711 }),
            line: whole_on_one_line,
            ..Want::new(spec.name, plan.servers.clone(), &estimate, spec.csv_header)
        },
    )?;
    p.versions.extend(extra_versions);
    let mut rows = Vec::new();
    let outcome = (|| -> Result<(), String> {
        let mut stage = p.stage(&spec.cases[0].link())?;
        let (plain, tuned): (Vec<Active>, Vec<Active>) = p.active.iter().cloned().partition(|(k, _)| !k.is_tuned());
        for (phase, tuned_phase) in [(plain, false), (tuned, true)] {
            if phase.is_empty() {
                continue;
            }
            let saved = if tuned_phase {
                println!("== tuned phase: {}", TUNING.map(|(k, v)| format!("{k}={v}")).join(", "));
                tune()?
            } else {
                Vec::new()
            };
            let r = run_phase(plan, spec, &mut p, &mut stage, &phase, &mut rows);
            for (k, _) in &phase {
                stage.stop_service(k.name());
            }
            restore(&saved);
            r?;
        }
        stage.stop();
        Ok(())
    })();
    Ok(Ran { rows, skipped: p.skipped, versions: p.versions, elapsed: p.started.elapsed(), outcome })
}

/// Starts the phase's servers and runs every case (the caller stops the servers).
fn run_phase<O: Default>(
    plan: &Plan,
    spec: &Spec<'_, O>,
    p: &mut Prepared,
    stage: &mut Stage,
    phase: &[Active],
    rows: &mut Vec<Row<O>>,
) -> Result<(), String> {
    let docroot = p.docroot.clone();
    let running = p.start_each(stage, phase, |stage, kind, bin, setup| {
        let url = format!("https://{SERVER_ADDR}:{}/style.css", kind.port());
        let launch = if kind.is_h3() {
            servers::static_launch_h3(kind, setup, &docroot, plan.compress)
        } else {
            servers::static_launch(kind, setup, &docroot, plan.compress)
        };
        launch.and_then(|l| stage.start_static(kind, bin, setup, &l, &url))?;
        if kind.is_h3() {
            // The UDP listener may come up after the TCP one: wait until HTTP/3 answers too,
            // with the project's client (a load that misses it fails on its protocol check).
            let probe = servers::find_sluice(plan.sluice.as_deref()).and_then(|client| {
                let client = client.to_str().ok_or("the sluice binary's path is not UTF-8")?.to_string();
                transfer::probe_h3(stage, &client, &url, spec.probe_bytes)
            });
            if let Err(e) = probe {
                eprintln!("sluice-lab: WARNING {}: HTTP/3 does not answer ({})", kind.name(), whole_on_one_line(&e));
            }
        }
        Ok(())
    });
    for case in spec.cases {
        stage.set_link(&case.link());
        println!(
            "== {}: {} Mbit/s, {} ms RTT, queue {:?}",
            case.name,
            case.rate_mbit,
            case.rtt_ms,
            case.link().down.queue
        );
        for run in 1..=plan.runs {
            for kind in rotation(&running, run) {
                p.go_on(String::new)?;
                let mut row = Row {
                    case: case.name.clone(),
                    rate_mbit: case.rate_mbit,
                    rtt_ms: case.rtt_ms,
                    server: kind.name().into(),
                    run,
                    outcome: O::default(),
                    error: String::new(),
                };
                match stage.check_alive(kind.name()).and_then(|()| (spec.measure)(kind, stage, case)) {
                    Ok(o) => row.outcome = o,
                    Err(e) => row.error = e.lines().next().unwrap_or_default().to_string(),
                }
                proc::check_interrupt()?;
                if row.ok() {
                    println!("{} run {run} {:<12} {}", case.name, kind.name(), (spec.describe)(&row.outcome));
                } else {
                    println!("{} run {run} {:<12} FAILED: {}", case.name, kind.name(), row.error);
                }
                p.csv.line(&(spec.csv_line)(&row))?;
                rows.push(row);
                proc::sleep(spec.pause)?;
            }
        }
    }
    Ok(())
}

/// Sets the tuning sysctls in the server namespace; returns the previous values to restore.
fn tune() -> Result<Vec<(&'static str, String)>, String> {
    let mut saved = Vec::new();
    for (key, value) in TUNING {
        let old = net::sysctl_get_in(SERVER_NS, key)?;
        if let Err(e) = net::sysctl_in(SERVER_NS, key, value) {
            restore(&saved);
            return Err(format!("tuning the server namespace: {e}"));
        }
        saved.push((key, old));
    }
    Ok(saved)
}

fn restore(saved: &[(&'static str, String)]) {
    for (key, value) in saved {
        if let Err(e) = net::sysctl_in(SERVER_NS, key, value) {
            eprintln!("sluice-lab: restoring {key} = {value}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: &str, server: &str, error: &str) -> Row<()> {
        Row {
            case: case.into(),
            rate_mbit: 5.0,
            rtt_ms: 40.0,
            server: server.into(),
            run: 1,
            outcome: (),
            error: error.into(),
        }
    }

    #[test]
    fn order_and_failures() {
        let rows = vec![row("a", "sluice", ""), row("b", "nginx", "boom"), row("a", "nginx", "")];
        let (cases, servers) = order(&rows);
        assert_eq!(cases.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(servers, ["sluice", "nginx"]);
        assert_eq!(failed_section(&rows), "\n## Failed runs\n\n- b nginx run 1: boom\n");
        assert_eq!(failed_section(&rows[..1]), "");
        let ran = Ran {
            rows,
            skipped: vec![],
            versions: vec!["x 1".into()],
            elapsed: Duration::from_secs(61),
            outcome: Err("stopped\nmore".into()),
        };
        let n = closing_notes(&ran);
        assert_eq!(n[0], "**Incomplete run**: stopped");
        assert_eq!(n[1], "Versions: x 1.");
        assert!(n[2].starts_with("2 of 3 runs succeeded; wall time "), "{}", n[2]);
    }
}
