//! What the static-docroot experiments (`priority`, `pageload`) share: every server serves the
//! same generated docroot over TLS with one self-signed certificate; the plain servers run
//! first, then the `-tuned` ones with the write-up's sysctls set in the server namespace
//! (restored afterwards, also on error); in every case each run measures each server once, in
//! an order rotating run by run, and appends a CSV line as soon as it has it.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::priority::{Case, TUNING};
use super::proc;
use super::report::Stat;
use super::servers::{self, ServerKind, Setup};
use super::stage::Stage;
use super::upload::rotation;
use super::{Active, Plan, Skipped};
use crate::net::{self, SERVER_ADDR, SERVER_NS};

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

/// `median (min–max)`.
pub fn fmt_stat(s: &Stat, decimals: usize) -> String {
    format!("{:.*} ({:.*}–{:.*})", decimals, s.median, decimals, s.min, decimals, s.max)
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
        super::fmt_duration(ran.elapsed)
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

/// A multi-line message on one line.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ")
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
    let (mut active, mut skipped) = super::resolve_servers(plan)?;
    if !spec.h3 {
        for (k, _) in active.iter().filter(|(k, _)| k.is_h3()) {
            let reason = format!("the {} experiment has no HTTP/3 client; `{}` is for pageload", spec.name, k.name());
            skipped.push(Skipped { server: *k, reason });
        }
        active.retain(|(k, _)| !k.is_h3());
    }
    for s in &skipped {
        eprintln!("sluice-lab: SKIP {}: {}", s.server.name(), s.reason);
    }
    if active.is_empty() {
        return Err("no server to run (see the SKIP notes above)".into());
    }
    net::available().map_err(|e| format!("the lab is not available: {e}"))?;
    let work = plan.out.join("work");
    fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let expected = Duration::from_secs_f64(
        spec.seconds_per_run * (active.len() * plan.runs as usize) as f64 + 5.0 * active.len() as f64,
    );
    let bound = plan.bound.unwrap_or_else(|| super::default_bound(expected));
    println!(
        "{}: {} case(s) × {} server(s) × {} run(s): expected ≈ {} (bounded to {}); results in {}",
        spec.name,
        spec.cases.len(),
        active.len(),
        plan.runs,
        super::fmt_duration(expected),
        super::fmt_duration(bound),
        plan.out.display()
    );
    let started = Instant::now();
    let mut versions = super::versions(&active, &work);
    versions.extend(extra_versions);
    let (cert, key) = servers::write_self_signed(&work, SERVER_ADDR)?;
    let docroot = work.join("docroot");
    (spec.docroot)(&docroot)?;
    // nginx and h2o workers read the files as nobody: every parent must be traversable.
    for dir in [&work, &plan.out] {
        if let Ok(m) = fs::metadata(dir) {
            let mode = m.permissions().mode();
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o711));
        }
    }
    let csv_path = plan.out.join("results.csv");
    let mut csv = File::create(&csv_path).map_err(|e| format!("creating {}: {e}", csv_path.display()))?;
    csv.write_all(spec.csv_header.as_bytes()).map_err(|e| format!("writing {}: {e}", csv_path.display()))?;

    let mut p = Phases {
        plan,
        spec,
        work: &work,
        docroot: &docroot,
        cert: &cert,
        key: &key,
        deadline: started + bound,
        bound,
        csv,
        csv_path: &csv_path,
        rows: Vec::new(),
    };
    let outcome = (|| -> Result<(), String> {
        let mut stage = Stage::start(&spec.cases[0].link(), &work)?;
        let (plain, tuned): (Vec<Active>, Vec<Active>) = active.iter().cloned().partition(|(k, _)| !k.is_tuned());
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
            let r = p.phase(&mut stage, &phase, &mut skipped);
            for (k, _) in &phase {
                stage.stop_service(k.name());
            }
            restore(&saved);
            r?;
        }
        stage.stop();
        Ok(())
    })();
    Ok(Ran { rows: p.rows, skipped, versions, elapsed: started.elapsed(), outcome })
}

struct Phases<'a, O> {
    plan: &'a Plan,
    spec: &'a Spec<'a, O>,
    work: &'a Path,
    docroot: &'a Path,
    cert: &'a Path,
    key: &'a Path,
    deadline: Instant,
    bound: Duration,
    csv: File,
    csv_path: &'a Path,
    rows: Vec<Row<O>>,
}

impl<O: Default> Phases<'_, O> {
    /// Starts the phase's servers and runs every case (the caller stops the servers).
    fn phase(&mut self, stage: &mut Stage, phase: &[Active], skipped: &mut Vec<Skipped>) -> Result<(), String> {
        let mut running = Vec::new();
        for (kind, bin) in phase {
            let setup = Setup::new(*kind, self.work, SERVER_ADDR, self.cert, self.key);
            let url = format!("https://{SERVER_ADDR}:{}/style.css", kind.port());
            let launch = if kind.is_h3() {
                servers::static_launch_h3(*kind, &setup, self.docroot)
            } else {
                servers::static_launch(*kind, &setup, self.docroot)
            };
            let started = launch.and_then(|l| stage.start_static(*kind, bin, &setup, &l, &url));
            match started {
                Ok(()) => running.push(*kind),
                Err(e) => {
                    eprintln!("sluice-lab: SKIP {}: {e}", kind.name());
                    skipped.push(Skipped { server: *kind, reason: format!("did not start: {}", one_line(&e)) });
                    continue;
                }
            }
            if kind.is_h3() {
                // The UDP listener may come up after the TCP one: wait until HTTP/3 answers too,
                // with the project's client (a load that misses it fails on its protocol check).
                let probe = servers::find_sluice(self.plan.sluice.as_deref()).and_then(|client| {
                    let client = client.to_str().ok_or("the sluice binary's path is not UTF-8")?.to_string();
                    super::download::probe_h3(stage, &client, &url, self.spec.probe_bytes)
                });
                if let Err(e) = probe {
                    eprintln!("sluice-lab: WARNING {}: HTTP/3 does not answer ({})", kind.name(), one_line(&e));
                }
            }
        }
        for case in self.spec.cases {
            stage.set_link(&case.link());
            println!(
                "== {}: {} Mbit/s, {} ms RTT, queue {:?}",
                case.name,
                case.rate_mbit,
                case.rtt_ms,
                case.link().down.queue
            );
            for run in 1..=self.plan.runs {
                for kind in rotation(&running, run) {
                    proc::check_interrupt()?;
                    if Instant::now() >= self.deadline {
                        return Err(format!("the run exceeded its time bound of {}", super::fmt_duration(self.bound)));
                    }
                    let mut row = Row {
                        case: case.name.clone(),
                        rate_mbit: case.rate_mbit,
                        rtt_ms: case.rtt_ms,
                        server: kind.name().into(),
                        run,
                        outcome: O::default(),
                        error: String::new(),
                    };
                    match stage.check_alive(kind.name()).and_then(|()| (self.spec.measure)(kind, stage, case)) {
                        Ok(o) => row.outcome = o,
                        Err(e) => row.error = e.lines().next().unwrap_or_default().to_string(),
                    }
                    proc::check_interrupt()?;
                    if row.ok() {
                        println!("{} run {run} {:<12} {}", case.name, kind.name(), (self.spec.describe)(&row.outcome));
                    } else {
                        println!("{} run {run} {:<12} FAILED: {}", case.name, kind.name(), row.error);
                    }
                    self.csv
                        .write_all((self.spec.csv_line)(&row).as_bytes())
                        .and_then(|()| self.csv.flush())
                        .map_err(|e| format!("writing {}: {e}", self.csv_path.display()))?;
                    self.rows.push(row);
                    proc::sleep(self.spec.pause)?;
                }
            }
        }
        Ok(())
    }
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
