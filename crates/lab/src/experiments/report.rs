//! Results: one CSV row per run, and the summary (medians, min–max, h2/h1 ratios) as Markdown.
//!
//! The CSV is the source of truth: the summary and the charts are computed from rows, so a
//! `results.csv` from an earlier run can be summarised again (and the tests do exactly that).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::QueueSummary;
use crate::net::DirStats;

/// Columns of `results.csv`, in order. The first ten are the ones every experiment writes;
/// `sink_seconds` is what the upload sink measured itself (time from request head to last body
/// byte; far below `seconds` when a proxy buffered the whole body first); the `…drops…` and
/// `queue_…` columns are the emulated link during the transfer, in the direction that carried
/// its data ([`LinkWindow`]); `error` why a run failed.
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
    "queue_drops_per_100mb",
    "loss_drops_per_100mb",
    "queue_p50_pkts",
    "queue_p95_pkts",
    "queue_peak_pkts",
    "queue_p50_ms",
    "queue_p95_ms",
    "queue_peak_ms",
    "error",
];

/// The link columns of [`CSV_HEADER`], in order.
const LINK_COLUMNS: std::ops::Range<usize> = 11..19;

/// The emulated link during one transfer, in the direction that carried its data (server →
/// client for a download): drops per 100 MB (10^8 bytes of IP packets) delivered in that
/// direction, by the full queue and by the random loss, and the queue as arriving packets found
/// it ([`QueueSummary`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkWindow {
    /// Packets dropped by the full drop-tail queue, per 100 MB delivered.
    pub queue_drops_per_100mb: f64,
    /// Packets dropped by the random loss, per 100 MB delivered.
    pub loss_drops_per_100mb: f64,
    /// Median packets found waiting.
    pub p50_packets: f64,
    /// 95th percentile of the packets found waiting.
    pub p95_packets: f64,
    /// Most packets found waiting.
    pub peak_packets: f64,
    /// Median queueing delay, ms.
    pub p50_ms: f64,
    /// 95th percentile of the queueing delay, ms.
    pub p95_ms: f64,
    /// Longest queueing delay, ms.
    pub peak_ms: f64,
}

impl LinkWindow {
    /// The reading of one direction over a window (`Stats::since`); `None` when that direction
    /// delivered nothing.
    pub fn of(d: &DirStats) -> Option<Self> {
        let (queue, loss) = d.drops_per_100mb()?;
        Some(Self::with_queue(queue, loss, &d.queue()))
    }

    /// From drop rates and a queue summary.
    pub fn with_queue(queue_drops_per_100mb: f64, loss_drops_per_100mb: f64, q: &QueueSummary) -> Self {
        Self {
            queue_drops_per_100mb,
            loss_drops_per_100mb,
            p50_packets: q.p50_packets as f64,
            p95_packets: q.p95_packets as f64,
            peak_packets: q.peak_packets as f64,
            p50_ms: q.p50_ms,
            p95_ms: q.p95_ms,
            peak_ms: q.peak_ms,
        }
    }

    /// The CSV fields, in the order of [`CSV_HEADER`].
    pub fn fields(&self) -> [String; 8] {
        [
            format!("{:.2}", self.queue_drops_per_100mb),
            format!("{:.2}", self.loss_drops_per_100mb),
            fmt_num(self.p50_packets),
            fmt_num(self.p95_packets),
            fmt_num(self.peak_packets),
            format!("{:.2}", self.p50_ms),
            format!("{:.2}", self.p95_ms),
            format!("{:.2}", self.peak_ms),
        ]
    }

    /// Parses [`LinkWindow::fields`]: `None` when any is empty or not a number.
    pub fn parse(fields: &[&str]) -> Option<Self> {
        let v: Vec<f64> =
            fields.iter().map(|f| f.trim().parse::<f64>().ok().filter(|x| x.is_finite())).collect::<Option<_>>()?;
        let [queue_drops_per_100mb, loss_drops_per_100mb, p50_packets, p95_packets, peak_packets, p50_ms, p95_ms, peak_ms] =
            v[..]
        else {
            return None;
        };
        Some(Self {
            queue_drops_per_100mb,
            loss_drops_per_100mb,
            p50_packets,
            p95_packets,
            peak_packets,
            p50_ms,
            p95_ms,
            peak_ms,
        })
    }

    /// The median of each figure over `windows` (`None` when empty).
    pub fn median_of(windows: &[Self]) -> Option<Self> {
        let m = |f: fn(&Self) -> f64| Stat::of(&windows.iter().map(f).collect::<Vec<_>>()).map(|s| s.median);
        Some(Self {
            queue_drops_per_100mb: m(|w| w.queue_drops_per_100mb)?,
            loss_drops_per_100mb: m(|w| w.loss_drops_per_100mb)?,
            p50_packets: m(|w| w.p50_packets)?,
            p95_packets: m(|w| w.p95_packets)?,
            peak_packets: m(|w| w.peak_packets)?,
            p50_ms: m(|w| w.p50_ms)?,
            p95_ms: m(|w| w.p95_ms)?,
            peak_ms: m(|w| w.peak_ms)?,
        })
    }

    /// `12.3 / 0.0` (queue / loss drops per 100 MB).
    pub fn fmt_drops(&self) -> String {
        format!("{:.1} / {:.1}", self.queue_drops_per_100mb, self.loss_drops_per_100mb)
    }

    /// `3 / 40 / 667` (p50 / p95 / peak, packets).
    pub fn fmt_packets(&self) -> String {
        format!("{:.0} / {:.0} / {:.0}", self.p50_packets, self.p95_packets, self.peak_packets)
    }

    /// `0.2 / 3.1 / 40.0` (p50 / p95 / peak, ms).
    pub fn fmt_ms(&self) -> String {
        format!("{:.1} / {:.1} / {:.1}", self.p50_ms, self.p95_ms, self.peak_ms)
    }
}

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
    /// The emulated link during the transfer (`None`: not read, or nothing delivered).
    pub link: Option<LinkWindow>,
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
            link: None,
            error: String::new(),
        }
    }

    fn fields(&self) -> Vec<String> {
        let link = self.link.map_or_else(|| [(); 8].map(|()| String::new()), |l| l.fields());
        let mut v = vec![
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
        ];
        v.extend(link);
        v.push(self.error.clone());
        v
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
    let link_idx: Option<Vec<usize>> = CSV_HEADER[LINK_COLUMNS].iter().map(|name| col(name)).collect();
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
            link: link_idx.as_ref().and_then(|idx| {
                let fields: Option<Vec<&str>> = idx.iter().map(|&k| rec.get(k).map(String::as_str)).collect();
                LinkWindow::parse(&fields?)
            }),
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

/// `median (min–max)`.
pub fn fmt_stat(s: &Stat, decimals: usize) -> String {
    format!("{:.*} ({:.*}–{:.*})", decimals, s.median, decimals, s.min, decimals, s.max)
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

/// The link table of one case: per server and protocol, the median figure of the successful
/// runs beside the medians of their link readings (`figure` names the figure's column, e.g.
/// `Mbit/s`; `readings`: successful runs with a reading). Servers and protocols in first-seen order; `None` when no row of the case has a
/// reading.
pub fn link_table(rows: &[Row], case: &str, figure: &str) -> Option<String> {
    let here: Vec<&Row> = rows.iter().filter(|r| r.case == case).collect();
    if !here.iter().any(|r| r.link.is_some()) {
        return None;
    }
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for r in &here {
        if !pairs.contains(&(r.server.as_str(), r.protocol.as_str())) {
            pairs.push((&r.server, &r.protocol));
        }
    }
    let mut md = format!(
        "| server | protocol | {figure} | queue drops / 100 MB | loss drops / 100 MB | queue p50 / p95 / peak, packets \
         | queue p50 / p95 / peak, ms | readings |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
    );
    for (server, protocol) in pairs {
        let ok: Vec<&Row> =
            here.iter().copied().filter(|r| r.server == server && r.protocol == protocol && r.ok).collect();
        let figure = Stat::of(&ok.iter().map(|r| r.mbps).collect::<Vec<_>>())
            .map_or_else(|| "n/a".into(), |s| format!("{:.1}", s.median));
        let windows: Vec<LinkWindow> = ok.iter().filter_map(|r| r.link).collect();
        let (drops_q, drops_l, packets, ms) = match LinkWindow::median_of(&windows) {
            Some(w) => (
                format!("{:.1}", w.queue_drops_per_100mb),
                format!("{:.1}", w.loss_drops_per_100mb),
                w.fmt_packets(),
                w.fmt_ms(),
            ),
            None => ("n/a".into(), "n/a".into(), "n/a".into(), "n/a".into()),
        };
        let _ = writeln!(
            md,
            "| {server} | {protocol} | {figure} | {drops_q} | {drops_l} | {packets} | {ms} | {} |",
            windows.len()
        );
    }
    Some(md)
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
    fn link_columns_round_trip() {
        let mut rows = parse_csv(SMALL).unwrap();
        assert!(rows.iter().all(|r| r.link.is_none()), "files without the columns still parse");
        let w = LinkWindow {
            queue_drops_per_100mb: 12.5,
            loss_drops_per_100mb: 0.0,
            p50_packets: 3.0,
            p95_packets: 40.0,
            peak_packets: 667.0,
            p50_ms: 0.25,
            p95_ms: 3.5,
            peak_ms: 40.02,
        };
        rows[0].link = Some(w);
        let text = to_csv(&rows);
        assert!(text.lines().next().unwrap().ends_with(",queue_peak_ms,error"), "{text}");
        assert!(text.contains(",0.4500,12.50,0.00,3,40,667,0.25,3.50,40.02,\n"), "{text}");
        assert_eq!(parse_csv(&text).unwrap(), rows);
        assert_eq!(w.fmt_drops(), "12.5 / 0.0");
        assert_eq!((w.fmt_packets().as_str(), w.fmt_ms().as_str()), ("3 / 40 / 667", "0.2 / 3.5 / 40.0"));
        let twice = LinkWindow { peak_packets: 1.0, ..w };
        let m = LinkWindow::median_of(&[w, twice, w]).unwrap();
        assert_eq!((m.peak_packets, m.p95_ms), (667.0, 3.5));
        assert_eq!(LinkWindow::median_of(&[]), None);
        assert_eq!(LinkWindow::parse(&["1", "2", "3", "4", "5", "6", "7", ""]), None);
        let d = DirStats { bytes: 200_000_000, dropped_queue: 10, dropped_loss: 2, ..DirStats::default() };
        let l = LinkWindow::of(&d).unwrap();
        assert_eq!((l.queue_drops_per_100mb, l.loss_drops_per_100mb, l.peak_packets), (5.0, 1.0, 0.0));
        assert_eq!(LinkWindow::of(&DirStats::default()), None);
        let table = link_table(&rows, "200mbit-40ms", "Mbit/s").unwrap();
        assert!(table.starts_with("| server | protocol | Mbit/s | queue drops / 100 MB |"), "{table}");
        assert!(
            table.contains("| sluice | h1 | 180.0 | 12.5 | 0.0 | 3 / 40 / 667 | 0.2 / 3.5 / 40.0 | 1 |"),
            "{table}"
        );
        assert!(table.contains("| nginx | h2 | 42.0 | n/a | n/a | n/a | n/a | 0 |"), "{table}");
        assert_eq!(link_table(&rows, "200mbit-10ms", "Mbit/s"), None);
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
