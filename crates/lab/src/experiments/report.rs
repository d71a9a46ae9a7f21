//! Results: one CSV row per run, and the summary (medians, min–max, h2/h1 ratios) as Markdown.
//!
//! The CSV is the source of truth: the summary and the charts are computed from rows, so a
//! `results.csv` from an earlier run can be summarised again (and the tests do exactly that).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Columns of `results.csv`, in order. The first ten are the ones every experiment writes;
/// `sink_seconds` is what the upload sink measured itself (time from request head to last body
/// byte; far below `seconds` when a proxy buffered the whole body first), `error` why a run
/// failed.
pub const CSV_HEADER: &[&str] = &[
    "experiment",
    "case",
    "rtt_ms",
    "rate_mbit",
    "server",
    "protocol",
    "run",
    "mbps",
    "seconds",
    "ok",
    "sink_seconds",
    "error",
];

/// One run of one server, protocol and case.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Experiment name (`upload`).
    pub experiment: String,
    /// Case name, e.g. `200mbit-40ms`.
    pub case: String,
    /// Round-trip time of the emulated link, milliseconds.
    pub rtt_ms: f64,
    /// Rate of the emulated link, Mbit/s.
    pub rate_mbit: f64,
    /// Server name (`sluice`, `nginx`, ...).
    pub server: String,
    /// Protocol (`h1`, `h2`).
    pub protocol: String,
    /// Run number, from 1.
    pub run: u32,
    /// The figure: Mbit/s (10^6 bits per second).
    pub mbps: f64,
    /// Wall time of the transfer as the client saw it.
    pub seconds: f64,
    /// Whether the run succeeded (failed runs stay in the CSV, out of the figures).
    pub ok: bool,
    /// Time the sink measured, when it answered.
    pub sink_seconds: Option<f64>,
    /// Why the run failed (empty when ok).
    pub error: String,
}

impl Row {
    /// A run not measured yet: no figures, not ok, no error.
    pub fn pending(
        experiment: &str,
        case: &str,
        rtt_ms: f64,
        rate_mbit: f64,
        server: &str,
        protocol: &str,
        run: u32,
    ) -> Self {
        Self {
            experiment: experiment.into(),
            case: case.into(),
            rtt_ms,
            rate_mbit,
            server: server.into(),
            protocol: protocol.into(),
            run,
            mbps: 0.0,
            seconds: 0.0,
            ok: false,
            sink_seconds: None,
            error: String::new(),
        }
    }

    fn fields(&self) -> Vec<String> {
        vec![
            self.experiment.clone(),
            self.case.clone(),
            fmt_num(self.rtt_ms),
            fmt_num(self.rate_mbit),
            self.server.clone(),
            self.protocol.clone(),
            self.run.to_string(),
            format!("{:.3}", self.mbps),
            format!("{:.4}", self.seconds),
            self.ok.to_string(),
            self.sink_seconds.map(|s| format!("{s:.4}")).unwrap_or_default(),
            self.error.clone(),
        ]
    }
}

/// Formats a number without a trailing `.0` when it is whole (`40`, `12.5`).
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Quotes a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The CSV header line, with its newline.
pub fn csv_header_line() -> String {
    let mut s = CSV_HEADER.join(",");
    s.push('\n');
    s
}

/// One CSV line for `row`, with its newline.
pub fn csv_line(row: &Row) -> String {
    let mut s = row.fields().iter().map(|f| csv_field(f)).collect::<Vec<_>>().join(",");
    s.push('\n');
    s
}

/// The whole CSV: header and rows.
pub fn to_csv(rows: &[Row]) -> String {
    let mut s = csv_header_line();
    for r in rows {
        s.push_str(&csv_line(r));
    }
    s
}

/// Splits CSV text into records of fields (RFC 4180: quoted fields may hold commas, quotes
/// and newlines). Blank lines are skipped.
fn parse_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut in_quotes = false;
    let mut line = 1;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => in_quotes = true,
            ',' => record.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                line += 1;
                record.push(std::mem::take(&mut field));
                if !(record.len() == 1 && record[0].is_empty()) {
                    records.push(std::mem::take(&mut record));
                }
                record.clear();
            }
            c => field.push(c),
        }
    }
    if in_quotes {
        return Err(format!("line {line}: unterminated quoted field"));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

/// Parses `results.csv` text. Columns are found by header name, so extra columns are ignored
/// and `sink_seconds`/`error` may be missing; the first ten are required.
pub fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let records = parse_records(text)?;
    let Some((header, body)) = records.split_first() else {
        return Err("empty CSV: no header line".into());
    };
    let col = |name: &str| header.iter().position(|h| h.trim() == name);
    let mut idx = Vec::new();
    for name in &CSV_HEADER[..10] {
        idx.push(col(name).ok_or_else(|| format!("CSV header lacks the column `{name}`"))?);
    }
    let sink_idx = col("sink_seconds");
    let err_idx = col("error");
    let mut rows = Vec::with_capacity(body.len());
    for (i, rec) in body.iter().enumerate() {
        let line = i + 2;
        let get = |k: usize| -> Result<&str, String> {
            rec.get(idx[k]).map(|s| s.trim()).ok_or_else(|| format!("CSV line {line}: missing `{}`", CSV_HEADER[k]))
        };
        let num = |k: usize| -> Result<f64, String> {
            let s = get(k)?;
            s.parse::<f64>().map_err(|_| format!("CSV line {line}: `{}` is not a number: {s:?}", CSV_HEADER[k]))
        };
        let run = get(6)?;
        let ok = get(9)?;
        rows.push(Row {
            experiment: get(0)?.to_string(),
            case: get(1)?.to_string(),
            rtt_ms: num(2)?,
            rate_mbit: num(3)?,
            server: get(4)?.to_string(),
            protocol: get(5)?.to_string(),
            run: run.parse().map_err(|_| format!("CSV line {line}: `run` is not a whole number: {run:?}"))?,
            mbps: num(7)?,
            seconds: num(8)?,
            ok: match ok {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => return Err(format!("CSV line {line}: `ok` is neither true nor false: {ok:?}")),
            },
            sink_seconds: sink_idx.and_then(|k| rec.get(k)).and_then(|s| s.trim().parse().ok()),
            error: err_idx.and_then(|k| rec.get(k)).cloned().unwrap_or_default(),
        });
    }
    Ok(rows)
}

/// Median, minimum and maximum of the successful runs of one cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// Successful runs.
    pub n: usize,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Stat {
    /// Statistics of `values`, `None` when empty or when a value is not finite.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Self { n, median, min: v[0], max: v[n - 1] })
    }
}

/// A case as the summary lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseInfo {
    /// Case name.
    pub name: String,
    /// RTT, ms.
    pub rtt_ms: f64,
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
}

/// One cell of the summary: a server, protocol and case.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Statistics of the successful runs (`None`: none succeeded).
    pub stat: Option<Stat>,
    /// Runs attempted.
    pub attempted: usize,
}

/// Everything the Markdown table and the charts show, computed from rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Experiment name.
    pub experiment: String,
    /// Cases in the order they first appear.
    pub cases: Vec<CaseInfo>,
    /// Servers in the order they first appear.
    pub servers: Vec<String>,
    /// Protocols in the order they first appear.
    pub protocols: Vec<String>,
    /// Cells by (case, server, protocol).
    pub cells: BTreeMap<(String, String, String), Cell>,
}

impl Summary {
    /// Summarises `rows` (failed runs count as attempted, not in the figures).
    pub fn from_rows(rows: &[Row]) -> Self {
        let mut cases: Vec<CaseInfo> = Vec::new();
        let mut servers: Vec<String> = Vec::new();
        let mut protocols: Vec<String> = Vec::new();
        let mut values: BTreeMap<(String, String, String), (Vec<f64>, usize)> = BTreeMap::new();
        for r in rows {
            if !cases.iter().any(|c| c.name == r.case) {
                cases.push(CaseInfo { name: r.case.clone(), rtt_ms: r.rtt_ms, rate_mbit: r.rate_mbit });
            }
            if !servers.contains(&r.server) {
                servers.push(r.server.clone());
            }
            if !protocols.contains(&r.protocol) {
                protocols.push(r.protocol.clone());
            }
            let e = values.entry((r.case.clone(), r.server.clone(), r.protocol.clone())).or_default();
            e.1 += 1;
            if r.ok {
                e.0.push(r.mbps);
            }
        }
        let cells = values.into_iter().map(|(k, (v, attempted))| (k, Cell { stat: Stat::of(&v), attempted })).collect();
        let experiment = rows.first().map(|r| r.experiment.clone()).unwrap_or_default();
        Self { experiment, cases, servers, protocols, cells }
    }

    /// The cell of (case, server, protocol).
    pub fn cell(&self, case: &str, server: &str, protocol: &str) -> Option<&Cell> {
        self.cells.get(&(case.to_string(), server.to_string(), protocol.to_string()))
    }

    /// Median of (case, server, protocol), when some run succeeded.
    pub fn median(&self, case: &str, server: &str, protocol: &str) -> Option<f64> {
        self.cell(case, server, protocol).and_then(|c| c.stat).map(|s| s.median)
    }

    /// `num`/`den` protocol ratio of the medians (e.g. h2/h1) for a server in a case.
    pub fn ratio(&self, case: &str, server: &str, num: &str, den: &str) -> Option<f64> {
        let n = self.median(case, server, num)?;
        let d = self.median(case, server, den)?;
        (d > 0.0).then(|| n / d)
    }

    /// Largest maximum over all cells (chart scale).
    pub fn max_value(&self) -> f64 {
        self.cells.values().filter_map(|c| c.stat).map(|s| s.max).fold(0.0, f64::max)
    }
}

/// Formats a throughput cell: `median (min–max)`, or `n/a`.
fn fmt_cell(cell: Option<&Cell>) -> String {
    match cell.and_then(|c| c.stat) {
        Some(s) => format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max),
        None => "n/a".into(),
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}")).unwrap_or_else(|| "n/a".into())
}

/// Case title, e.g. `200 Mbit/s × 40 ms RTT`.
pub fn case_title(c: &CaseInfo) -> String {
    format!("{} Mbit/s × {} ms RTT", fmt_num(c.rate_mbit), fmt_num(c.rtt_ms))
}

/// The Markdown summary: a title, the notes, one table per case (each server's h1 and h2
/// medians with min–max, the h2/h1 ratio, runs that succeeded), then the h2/h1 ratios of all
/// servers side by side, case by case.
pub fn markdown(summary: &Summary, title: &str, notes: &[String]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {title}\n");
    for n in notes {
        let _ = writeln!(md, "- {n}");
    }
    if !notes.is_empty() {
        md.push('\n');
    }
    let has_ratio = summary.protocols.iter().any(|p| p == "h1") && summary.protocols.iter().any(|p| p == "h2");
    let has_h3 = summary.protocols.iter().any(|p| p == "h1") && summary.protocols.iter().any(|p| p == "h3");
    for case in &summary.cases {
        let _ = writeln!(md, "## {}\n", case_title(case));
        let mut head = String::from("| server |");
        let mut rule = String::from("|---|");
        for p in &summary.protocols {
            let _ = write!(head, " {p} Mbit/s median (min–max) |");
            rule.push_str("---:|");
        }
        if has_ratio {
            head.push_str(" h2/h1 |");
            rule.push_str("---:|");
        }
        if has_h3 {
            head.push_str(" h3/h1 |");
            rule.push_str("---:|");
        }
        head.push_str(" ok runs |");
        rule.push_str("---|");
        let _ = writeln!(md, "{head}\n{rule}");
        for server in &summary.servers {
            let mut line = format!("| {server} |");
            let mut runs = Vec::new();
            for p in &summary.protocols {
                let cell = summary.cell(&case.name, server, p);
                let _ = write!(line, " {} |", fmt_cell(cell));
                if let Some(c) = cell {
                    runs.push(format!("{p} {}/{}", c.stat.map_or(0, |s| s.n), c.attempted));
                }
            }
            if has_ratio {
                let _ = write!(line, " {} |", fmt_ratio(summary.ratio(&case.name, server, "h2", "h1")));
            }
            if has_h3 {
                let _ = write!(line, " {} |", fmt_ratio(summary.ratio(&case.name, server, "h3", "h1")));
            }
            let _ = write!(line, " {} |", runs.join(", "));
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }
    if has_ratio && !summary.cases.is_empty() {
        let _ = writeln!(md, "## h2/h1 ratio of the medians\n");
        let mut head = String::from("| server |");
        let mut rule = String::from("|---|");
        for case in &summary.cases {
            let _ = write!(head, " {} |", case_title(case));
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for server in &summary.servers {
            let mut line = format!("| {server} |");
            for case in &summary.cases {
                let _ = write!(line, " {} |", fmt_ratio(summary.ratio(&case.name, server, "h2", "h1")));
            }
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "\
experiment,case,rtt_ms,rate_mbit,server,protocol,run,mbps,seconds,ok,sink_seconds,error
upload,200mbit-40ms,40,200,sluice,h1,1,180,0.5,true,0.45,
upload,200mbit-40ms,40,200,sluice,h1,2,170,0.5,true,,
upload,200mbit-40ms,40,200,sluice,h1,3,190,0.5,true,,
upload,200mbit-40ms,40,200,sluice,h2,1,90,1,true,,
upload,200mbit-40ms,40,200,sluice,h2,2,100,1,true,,
upload,200mbit-40ms,40,200,sluice,h2,3,0,0,false,,\"curl exit 28, \"\"timeout\"\"\"
upload,200mbit-40ms,40,200,nginx,h1,1,160,0.5,true,,
upload,200mbit-40ms,40,200,nginx,h1,2,200,0.5,true,,
upload,200mbit-40ms,40,200,nginx,h2,1,40,2,true,,
upload,200mbit-40ms,40,200,nginx,h2,2,44,2,true,,
upload,200mbit-10ms,10,200,sluice,h1,1,190,0.5,true,,
upload,200mbit-10ms,10,200,sluice,h2,1,95,1,true,,
";

    #[test]
    fn parses_and_round_trips() {
        let rows = parse_csv(SMALL).unwrap();
        assert_eq!(rows.len(), 12);
        assert_eq!(rows[0].sink_seconds, Some(0.45));
        assert_eq!(rows[5].error, "curl exit 28, \"timeout\"");
        assert!(!rows[5].ok);
        let again = parse_csv(&to_csv(&rows)).unwrap();
        assert_eq!(rows, again);
    }

    #[test]
    fn medians_min_max_and_ratios() {
        let s = Summary::from_rows(&parse_csv(SMALL).unwrap());
        assert_eq!(s.servers, ["sluice", "nginx"]);
        assert_eq!(s.protocols, ["h1", "h2"]);
        assert_eq!(s.cases.len(), 2);
        let c = s.cell("200mbit-40ms", "sluice", "h1").unwrap();
        assert_eq!(c.stat, Some(Stat { n: 3, median: 180.0, min: 170.0, max: 190.0 }));
        // The failed run counts as attempted, not in the figures.
        let c = s.cell("200mbit-40ms", "sluice", "h2").unwrap();
        assert_eq!((c.attempted, c.stat.unwrap().n, c.stat.unwrap().median), (3, 2, 95.0));
        // Even count: mean of the two middle values.
        assert_eq!(s.median("200mbit-40ms", "nginx", "h1"), Some(180.0));
        assert_eq!(s.median("200mbit-40ms", "nginx", "h2"), Some(42.0));
        let r = s.ratio("200mbit-40ms", "sluice", "h2", "h1").unwrap();
        assert!((r - 95.0 / 180.0).abs() < 1e-12);
        let r = s.ratio("200mbit-40ms", "nginx", "h2", "h1").unwrap();
        assert!((r - 42.0 / 180.0).abs() < 1e-12);
        assert_eq!(s.ratio("200mbit-10ms", "nginx", "h2", "h1"), None);
        assert_eq!(s.max_value(), 200.0);
    }

    #[test]
    fn markdown_has_tables_and_ratios() {
        let s = Summary::from_rows(&parse_csv(SMALL).unwrap());
        let md = markdown(&s, "upload", &["Expect: 100-continue disabled".into()]);
        assert!(md.contains("## 200 Mbit/s × 40 ms RTT"), "{md}");
        assert!(md.contains("| sluice | 180.0 (170.0–190.0) | 95.0 (90.0–100.0) | 0.53 | h1 3/3, h2 2/3 |"), "{md}");
        assert!(md.contains("| nginx | 180.0 (160.0–200.0) | 42.0 (40.0–44.0) | 0.23 |"), "{md}");
        assert!(md.contains("## h2/h1 ratio of the medians"), "{md}");
        assert!(md.contains("| sluice | 0.53 | 0.50 |"), "{md}");
        assert!(md.contains("| nginx | 0.23 | n/a |"), "{md}");
        assert!(md.contains("- Expect: 100-continue disabled"));
    }

    #[test]
    fn stat_edge_cases() {
        assert_eq!(Stat::of(&[]), None);
        assert_eq!(Stat::of(&[f64::NAN]), None);
        assert_eq!(Stat::of(&[3.0]), Some(Stat { n: 1, median: 3.0, min: 3.0, max: 3.0 }));
        assert_eq!(Stat::of(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
    }

    #[test]
    fn bad_csv_is_an_error_not_a_panic() {
        assert!(parse_csv("").is_err());
        assert!(parse_csv("a,b\n1,2\n").unwrap_err().contains("experiment"));
        let bad = format!("{}upload,c,x,200,s,h1,1,1,1,true\n", csv_header_line());
        assert!(parse_csv(&bad).unwrap_err().contains("rtt_ms"));
        let short = format!("{}upload,c\n", csv_header_line());
        assert!(parse_csv(&short).is_err());
        assert!(parse_csv("\"unterminated").is_err());
    }
}
