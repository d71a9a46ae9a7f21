//! One large file fetched from the servers with the project's client and with curl (the
//! `download` and `fairness` experiments; the static-docroot ones use its HTTP/3 readiness
//! probe): the docroot ([`write_docroot`]: [`FILE`] and `READY_FILE`), the clients (`sluice get
//! --http2`/`--http3` and `curl --http2`), their arguments, what they print, the verdict on one
//! transfer, and the HTTP/3 readiness probe.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::common::{one_line, write_random};
use super::proc;
use super::servers::ServerKind;
use super::stage::Stage;
use crate::net::SERVER_ADDR;

/// The file served, in the docroot.
pub const FILE: &str = "body.bin";
/// A small file for the readiness probes.
pub(crate) const READY_FILE: &str = "ready.txt";
/// Its contents.
pub(crate) const READY_TEXT: &str = "ready\n";
/// A transfer slower than this (Mbit/s) over the whole body is cut off by `--max-time`.
pub const FLOOR_MBIT: f64 = 10.0;
/// How long a server's HTTP/3 listener may take to answer after its TLS one does.
pub const H3_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// `sluice get --connect-timeout`, seconds (QUIC or TCP + TLS handshake).
const CONNECT_TIMEOUT_S: u32 = 10;

/// A protocol and client a download is made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// `sluice get --http2` (TLS, ALPN h2).
    H2,
    /// `sluice get --http3` (QUIC, ALPN h3).
    H3,
    /// `curl --http2` (TLS, ALPN h2): a third-party client, for comparing servers' HTTP/2.
    H2Curl,
}

impl Proto {
    /// Name in the CSV.
    pub const fn name(self) -> &'static str {
        match self {
            Self::H2 => "h2",
            Self::H3 => "h3",
            Self::H2Curl => "h2-curl",
        }
    }

    /// The flag that asks the client for the protocol (`sluice get` and curl spell it alike).
    fn flag(self) -> &'static str {
        match self {
            Self::H2 | Self::H2Curl => "--http2",
            Self::H3 => "--http3",
        }
    }

    /// What the client's `http_version` (curl's `%{http_version}`) says for it.
    fn version(self) -> &'static str {
        match self {
            Self::H2 | Self::H2Curl => "2",
            Self::H3 => "3",
        }
    }

    /// The client program's name, for error messages.
    fn client(self) -> &'static str {
        match self {
            Self::H2 | Self::H3 => "sluice get",
            Self::H2Curl => "curl",
        }
    }
}

/// The order of downloads in run `run` (from 1): `sluice get` h2, h3, then curl h2 in odd runs,
/// the reverse in even ones.
pub fn proto_order(run: u32) -> [Proto; 3] {
    if run % 2 == 1 {
        [Proto::H2, Proto::H3, Proto::H2Curl]
    } else {
        [Proto::H2Curl, Proto::H3, Proto::H2]
    }
}

/// curl's `-w` format: status, negotiated version, body bytes, connect to last byte (seconds).
const CURL_W: &str = "%{http_code} %{http_version} %{size_download} %{time_total}";

/// Parses the output of [`CURL_W`] into the figures `sluice get --json` gives.
pub fn parse_curl_w(out: &str) -> Result<GetFigures, String> {
    let parts: Vec<&str> = out.split_whitespace().collect();
    let [code, version, size, total] = parts[..] else {
        return Err(format!("curl's -w output is not `code version size time`: {:?}", out.trim()));
    };
    let seconds = total.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    Ok(GetFigures {
        status: code.parse().map_err(|_| format!("curl's http_code is {code:?}"))?,
        version: version.to_string(),
        bytes: size.parse().map_err(|_| format!("curl's size_download is {size:?}"))?,
        seconds: seconds.ok_or_else(|| format!("curl's time_total is {total:?}"))?,
    })
}

/// curl's arguments for `url` over HTTP/2, bounded by `limit`, the body discarded.
pub(crate) fn curl_args(url: &str, limit: Duration) -> Vec<String> {
    let max = limit.as_secs().to_string();
    let connect = CONNECT_TIMEOUT_S.to_string();
    let args = ["--http2", "-k", "-sS", "--noproxy", "*", "--connect-timeout", &connect, "--max-time", &max];
    args.iter().chain(&["-o", "/dev/null", "-w", CURL_W, url]).map(|s| s.to_string()).collect()
}

/// What `sluice get --json` reported.
#[derive(Clone, Debug, PartialEq)]
pub struct GetFigures {
    /// HTTP status.
    pub status: u16,
    /// HTTP version (`2`, `3`).
    pub version: String,
    /// Body bytes received.
    pub bytes: u64,
    /// Connect to last body byte, seconds.
    pub seconds: f64,
}

impl GetFigures {
    /// bytes × 8 / seconds / 10⁶.
    pub fn mbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// Parses `sluice get --json`'s object.
pub fn parse_get_json(out: &str) -> Result<GetFigures, String> {
    let text = out.trim();
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!("sluice get's output is not JSON ({e}): {:?}", text.chars().take(200).collect::<String>())
    })?;
    let field = |name: &str| v.get(name).ok_or_else(|| format!("sluice get's JSON lacks `{name}`"));
    let version = match field("http_version")? {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let status = field("status")?.as_u64().and_then(|s| u16::try_from(s).ok());
    let bytes = field("bytes")?.as_u64();
    let seconds = field("seconds")?.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
    Ok(GetFigures {
        status: status.ok_or("sluice get's `status` is not an HTTP status")?,
        version,
        bytes: bytes.ok_or("sluice get's `bytes` is not a byte count")?,
        seconds: seconds.ok_or("sluice get's `seconds` is not a duration")?,
    })
}

/// Body bytes from the client's timeout message (`… with N body bytes transferred`).
pub(crate) fn partial_bytes(stderr: &str) -> Option<u64> {
    let (before, _) = stderr.split_once(" body bytes transferred")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// The verdict on one transfer of `body` bytes bounded by `limit`: (Mbit/s, seconds, error;
/// empty error = ok). A transfer cut off at the limit gets its partial rate as the figure (and
/// stays failed).
pub fn judge(
    exit_ok: bool,
    exit_desc: &str,
    stderr: &str,
    stdout: &str,
    proto: Proto,
    body: u64,
    limit: Duration,
) -> (f64, f64, String) {
    // curl prints its `-w` line after a time-out too (exit 28), with the bytes that arrived;
    // `sluice get` says them on stderr.
    let (fig, partial) = match proto {
        Proto::H2Curl => {
            let fig = parse_curl_w(stdout);
            let partial = fig.as_ref().ok().map(|f| f.bytes).filter(|&n| n > 0 && n < body);
            (fig, partial)
        }
        Proto::H2 | Proto::H3 => (parse_get_json(stdout), partial_bytes(stderr)),
    };
    if !exit_ok {
        let mut error = format!("{} {exit_desc}: {}", proto.client(), one_line(stderr));
        if let Some(n) = partial {
            let secs = limit.as_secs_f64();
            let mbps = n as f64 * 8.0 / secs / 1e6;
            error.push_str(&format!(
                " (below {FLOOR_MBIT} Mbit/s: {n} of {body} bytes in {secs:.0} s, {mbps:.1} Mbit/s)"
            ));
            return (mbps, secs, error);
        }
        return (0.0, 0.0, error);
    }
    match fig {
        Ok(f) => (f.mbps(), f.seconds, verdict_on(&f, proto, body)),
        Err(e) => (0.0, 0.0, e),
    }
}

/// Whether a finished download is a good one: empty, or what is wrong with it.
fn verdict_on(fig: &GetFigures, proto: Proto, body: u64) -> String {
    if fig.status != 200 {
        format!("HTTP {}", fig.status)
    } else if fig.version != proto.version() {
        format!("negotiated HTTP/{} instead of HTTP/{}", fig.version, proto.version())
    } else if fig.bytes != body {
        format!("received {} bytes, not {body}", fig.bytes)
    } else if fig.mbps() <= 0.0 {
        format!("{} reported no duration", proto.client())
    } else {
        String::new()
    }
}

/// `sluice get` arguments for `url` over `proto`, bounded by `limit`.
pub(crate) fn get_args(proto: Proto, url: &str, limit: Duration) -> Vec<String> {
    let max = limit.as_secs().to_string();
    let connect = CONNECT_TIMEOUT_S.to_string();
    ["get", proto.flag(), "-k", "-s", "--json", "--connect-timeout", &connect, "--max-time", &max, url]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// `https://<server>:<port>/<file>`.
pub(crate) fn url(kind: ServerKind, file: &str) -> String {
    format!("https://{SERVER_ADDR}:{}/{file}", kind.port())
}

/// The docroot: [`FILE`] (`body` random bytes) and [`READY_FILE`].
pub fn write_docroot(dir: &Path, body: u64) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    write_random(&dir.join(FILE), body, u64::from(std::process::id()))?;
    let p = dir.join(READY_FILE);
    fs::write(&p, READY_TEXT).map_err(|e| format!("writing {}: {e}", p.display()))?;
    let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
    Ok(())
}

/// Polls `url` (a file of `bytes` bytes) with `sluice get --http3` (`client`) from the client
/// namespace until it arrives, or [`H3_READY_TIMEOUT`] passes.
pub(crate) fn probe_h3(stage: &Stage, client: &str, url: &str, bytes: u64) -> Result<(), String> {
    let end = Instant::now() + H3_READY_TIMEOUT;
    let limit = Duration::from_secs(3);
    loop {
        proc::check_interrupt()?;
        let f = stage.client(client, &get_args(Proto::H3, url, limit), limit + Duration::from_secs(2))?;
        let (_, _, error) = judge(f.success(), &f.describe(), &f.stderr, &f.stdout, Proto::H3, bytes, limit);
        if error.is_empty() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(error);
        }
        proc::sleep(Duration::from_millis(500))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The download experiment's bodies (`--quick` and full) and its bounds: `--max-time` for
    /// the quick body (its `max_time`), and the loss case's.
    const QUICK_BODY_BYTES: u64 = 20_000_000;
    const BODY_BYTES: u64 = 200_000_000;
    const QUICK_MAX_TIME: Duration = Duration::from_secs(46);
    const LOSS_MAX_TIME: Duration = Duration::from_secs(60);

    const OK_H2: &str = r#"{"url":"https://10.99.0.2:8443/body.bin","http_version":"2","status":200,
        "bytes":20000000,"seconds":2.0,"bytes_per_second":10000000,"mbps":80.0,"time_connect":0.013}"#;

    #[test]
    fn client_json() {
        let f = parse_get_json(OK_H2).unwrap();
        assert_eq!(f, GetFigures { status: 200, version: "2".into(), bytes: 20_000_000, seconds: 2.0 });
        assert_eq!(f.mbps(), 80.0);
        assert!(parse_get_json("").unwrap_err().contains("not JSON"));
        assert!(parse_get_json(r#"{"status":200}"#).unwrap_err().contains("http_version"));
        assert!(parse_get_json(r#"{"http_version":"3","status":200,"bytes":-1,"seconds":1}"#).is_err());
        // A numeric version is read as its text.
        let f = parse_get_json(r#"{"http_version":3,"status":200,"bytes":1,"seconds":1}"#).unwrap();
        assert_eq!(f.version, "3");
    }

    #[test]
    fn judging_downloads() {
        let limit = QUICK_MAX_TIME;
        let (mbps, secs, err) = judge(true, "exit 0", "", OK_H2, Proto::H2, QUICK_BODY_BYTES, limit);
        assert_eq!((mbps, secs, err.as_str()), (80.0, 2.0, ""));
        let e = judge(true, "exit 0", "", OK_H2, Proto::H3, QUICK_BODY_BYTES, limit).2;
        assert_eq!(e, "negotiated HTTP/2 instead of HTTP/3");
        let e = judge(true, "exit 0", "", OK_H2, Proto::H2, BODY_BYTES, limit).2;
        assert_eq!(e, "received 20000000 bytes, not 200000000");
        let nf = OK_H2.replace("\"status\":200", "\"status\":404");
        assert_eq!(judge(true, "exit 0", "", &nf, Proto::H2, QUICK_BODY_BYTES, limit).2, "HTTP 404");
        // Cut off at the limit: the partial rate is the figure, the run failed.
        let stderr = "sluice get: operation timed out after 46s with 11500000 body bytes transferred\n";
        let (mbps, secs, e) = judge(false, "exit 28", stderr, "", Proto::H3, QUICK_BODY_BYTES, limit);
        assert!((mbps - 2.0).abs() < 1e-9 && secs == 46.0, "{mbps} {secs}");
        assert!(
            e.starts_with("sluice get exit 28: sluice get: operation timed out") && e.contains("2.0 Mbit/s"),
            "{e}"
        );
        let (mbps, _, e) = judge(false, "exit 7", "sluice get: cannot connect\n", "", Proto::H3, 1, limit);
        assert_eq!((mbps, e.as_str()), (0.0, "sluice get exit 7: sluice get: cannot connect"));
        let e = judge(false, "killed at the time limit", "", "", Proto::H2, 1, limit).2;
        assert!(e.contains("killed at the time limit"), "{e}");
    }

    #[test]
    fn judging_curl_downloads() {
        let limit = LOSS_MAX_TIME;
        let ok = "200 2 20000000 2.000000\n";
        assert_eq!(
            parse_curl_w(ok).unwrap(),
            GetFigures { status: 200, version: "2".into(), bytes: 20_000_000, seconds: 2.0 }
        );
        assert!(parse_curl_w("200 2 5").unwrap_err().contains("not `code version size time`"));
        assert!(parse_curl_w("200 2 many 1").unwrap_err().contains("size_download"));
        assert!(parse_curl_w("200 2 1 -1").unwrap_err().contains("time_total"));
        let (mbps, secs, err) = judge(true, "exit 0", "", ok, Proto::H2Curl, QUICK_BODY_BYTES, limit);
        assert_eq!((mbps, secs, err.as_str()), (80.0, 2.0, ""));
        // curl fell back to HTTP/1.1: not an HTTP/2 figure.
        let e = judge(true, "exit 0", "", "200 1.1 20000000 2.0", Proto::H2Curl, QUICK_BODY_BYTES, limit).2;
        assert_eq!(e, "negotiated HTTP/1.1 instead of HTTP/2");
        let e = judge(true, "exit 0", "", ok, Proto::H2Curl, BODY_BYTES, limit).2;
        assert_eq!(e, "received 20000000 bytes, not 200000000");
        let e = judge(true, "exit 0", "", "200 2 20000000 0.0", Proto::H2Curl, QUICK_BODY_BYTES, limit).2;
        assert_eq!(e, "curl reported no duration");
        // Cut off at the limit: curl still prints its line; the partial rate is the figure.
        let out = "200 2 7500000 60.001\n";
        let stderr =
            "curl: (28) Operation timed out after 60001 milliseconds with 7500000 out of 20000000 bytes received\n";
        let (mbps, secs, e) = judge(false, "exit 28", stderr, out, Proto::H2Curl, QUICK_BODY_BYTES, limit);
        assert!((mbps - 1.0).abs() < 1e-9 && secs == 60.0, "{mbps} {secs}");
        assert!(e.starts_with("curl exit 28: curl: (28) Operation timed out") && e.contains("1.0 Mbit/s"), "{e}");
        let (mbps, _, e) =
            judge(false, "exit 7", "curl: (7) Failed to connect\n", "000 0 0 0.001", Proto::H2Curl, 1, limit);
        assert_eq!((mbps, e.as_str()), (0.0, "curl exit 7: curl: (7) Failed to connect"));
    }

    #[test]
    fn client_arguments() {
        let u = url(ServerKind::Caddy, FILE);
        assert_eq!(u, format!("https://{SERVER_ADDR}:8447/body.bin"));
        let a = get_args(Proto::H3, &u, Duration::from_secs(46));
        let want = ["get", "--http3", "-k", "-s", "--json", "--connect-timeout", "10", "--max-time", "46", u.as_str()];
        assert_eq!(a, want);
        let c = curl_args(&u, Duration::from_secs(60));
        let want = [
            "--http2",
            "-k",
            "-sS",
            "--noproxy",
            "*",
            "--connect-timeout",
            "10",
            "--max-time",
            "60",
            "-o",
            "/dev/null",
            "-w",
            CURL_W,
            u.as_str(),
        ];
        assert_eq!(c, want);
    }
}
