//! What an experiment runs ([`Plan`]: `sluice-lab run`'s arguments, resolved) and which of the
//! servers asked for can run here ([`resolve_servers`]: the binaries found, the others
//! [`Skipped`] with the reason).

use std::path::PathBuf;
use std::time::Duration;

use super::servers::{self, ServerKind};

/// What an experiment runs: resolved arguments.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Servers requested, in first-run order.
    pub servers: Vec<ServerKind>,
    /// Runs per case.
    pub runs: u32,
    /// Whether `--runs` was given (else `runs` is the global default, which an experiment may
    /// replace with its own).
    pub runs_given: bool,
    /// Smoke run: first case only.
    pub quick: bool,
    /// Add the 1 Gbit/s × 2 ms case.
    pub gigabit: bool,
    /// `priority` and `pageload`: every static server compresses responses as its operator
    /// would switch it on (otherwise none does).
    pub compress: bool,
    /// Only the cases of these names (empty: all).
    pub cases: Vec<String>,
    /// Output directory.
    pub out: PathBuf,
    /// Explicit Sluice binary.
    pub sluice: Option<PathBuf>,
    /// Explicit bound on the whole run.
    pub bound: Option<Duration>,
    /// `proxymem`: the downloads' time cap, when given.
    pub cap: Option<Duration>,
}

/// A server that can run, with its binary.
pub type Active = (ServerKind, PathBuf);

/// A server left out, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    /// The server.
    pub server: ServerKind,
    /// Why.
    pub reason: String,
}

/// The servers of `requested` that `experiment` runs as reverse proxies (those in `known`), the
/// global default list standing for the experiment's `default`; the others are skipped with the
/// reason.
pub fn select_proxies(
    requested: &[ServerKind],
    default: &[ServerKind],
    known: &[ServerKind],
    experiment: &str,
) -> (Vec<ServerKind>, Vec<Skipped>) {
    if requested == servers::DEFAULT {
        return (default.to_vec(), Vec::new());
    }
    let names: Vec<&str> = known.iter().map(|k| k.name()).collect();
    let (keep, out): (Vec<ServerKind>, Vec<ServerKind>) = requested.iter().partition(|k| known.contains(k));
    let reason = format!("not a reverse proxy here ({experiment} knows {})", names.join(", "));
    (keep, out.into_iter().map(|server| Skipped { server, reason: reason.clone() }).collect())
}

impl Plan {
    /// The runs: `--runs` when given, else `default` (the experiment's own; 1 with `--quick`).
    pub fn runs_or(&self, default: u32) -> u32 {
        match (self.runs_given, self.quick) {
            (true, _) => self.runs,
            (false, true) => 1,
            (false, false) => default,
        }
    }

    /// The experiment's `cases` that `--cases` names (all without it); a name no case has is
    /// an error that lists the names there are.
    pub fn select<C>(&self, cases: Vec<C>, name: impl Fn(&C) -> &str) -> Result<Vec<C>, String> {
        if self.cases.is_empty() {
            return Ok(cases);
        }
        if let Some(unknown) = self.cases.iter().find(|w| !cases.iter().any(|c| name(c) == w.as_str())) {
            let known: Vec<&str> = cases.iter().map(&name).collect();
            return Err(format!("--cases: no case `{unknown}` here; the cases are {}", known.join(", ")));
        }
        Ok(cases.into_iter().filter(|c| self.cases.iter().any(|w| w == name(c))).collect())
    }
}

/// Splits the requested servers into those that can run (with their binary) and those
/// skipped for a missing binary. The peers also need Sluice (their upstream sink).
pub fn resolve_servers(plan: &Plan) -> Result<(Vec<Active>, Vec<Skipped>), String> {
    let sluice = servers::find_sluice(plan.sluice.as_deref());
    if plan.sluice.is_some() {
        // An explicit --sluice that does not exist is a usage error, not a skip.
        sluice.clone()?;
    }
    let mut active = Vec::new();
    let mut skipped = Vec::new();
    for &k in &plan.servers {
        let bin = if k.is_sluice() {
            sluice.clone()
        } else {
            servers::find_program(k.program())
                .ok_or_else(|| format!("`{}` not found (Debian package {})", k.program(), k.package()))
        };
        let bin = bin.and_then(|b| match (&sluice, k.uses_sink()) {
            (Err(e), true) => Err(format!("needs Sluice as its upstream sink, and {e}")),
            _ => Ok(b),
        });
        match bin {
            Ok(b) => active.push((k, b)),
            Err(reason) => skipped.push(Skipped { server: k, reason }),
        }
    }
    Ok((active, skipped))
}

/// The Sluice binary for the sink.
pub fn sluice_path(active: &[Active], plan: &Plan) -> Result<PathBuf, String> {
    match active.iter().find(|(k, _)| *k == ServerKind::Sluice) {
        Some((_, p)) => Ok(p.clone()),
        None => servers::find_sluice(plan.sluice.as_deref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            servers: vec![ServerKind::Sluice],
            runs: 1,
            runs_given: false,
            quick: false,
            gigabit: false,
            compress: false,
            cases: vec![],
            out: PathBuf::from("/nonexistent"),
            sluice: None,
            bound: None,
            cap: None,
        }
    }

    #[test]
    fn cases_are_selected_by_name() {
        let mut plan = plan();
        let names = || vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        assert_eq!(plan.select(names(), |c| c).unwrap(), ["a", "b", "c"]);
        plan.cases = vec!["c".into(), "a".into()];
        assert_eq!(plan.select(names(), |c| c).unwrap(), ["a", "c"]);
        plan.cases = vec!["d".into()];
        let e = plan.select(names(), |c| c).unwrap_err();
        assert!(e.contains("`d`") && e.contains("a, b, c"), "{e}");
    }

    #[test]
    fn missing_binaries_are_skipped_with_a_reason() {
        let plan = Plan { servers: vec![ServerKind::Sluice, ServerKind::Nginx], quick: true, ..plan() };
        // Whatever is installed here, every requested server is either active or skipped.
        let (active, skipped) = resolve_servers(&plan).unwrap();
        assert_eq!(active.len() + skipped.len(), 2);
        for s in &skipped {
            assert!(!s.reason.is_empty());
        }
        let bad = Plan { sluice: Some(PathBuf::from("/nonexistent/sluice")), ..plan };
        assert!(resolve_servers(&bad).unwrap_err().contains("/nonexistent/sluice"));
    }
}
