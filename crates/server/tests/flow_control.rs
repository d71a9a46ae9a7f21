//! Uploads under receive-window autotuning and a memory budget: nothing lost, nothing stalled.

mod support;

use std::fs;
use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};
use support::{curl, require_tool, run, Options, Proto, Server};

/// A budget far below what one upload would like (the initial windows still apply).
const TINY_BUDGET: &str = "[flow]\npolicy = \"auto\"\nbudget = 65536\n";

fn random_file(srv: &Server, name: &str, len: usize) -> (std::path::PathBuf, String) {
    // A simple deterministic generator: enough entropy that nothing compresses or repeats.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let path = srv.scratch(name);
    fs::write(&path, &data).expect("write upload file");
    let hex: String = Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
    (path, hex)
}

#[test]
fn ten_mb_h2_upload_under_a_tiny_budget_arrives_intact() {
    require_tool!("curl", "ten_mb_h2_upload_under_a_tiny_budget_arrives_intact");
    let srv = Server::start_with(&Options { extra: TINY_BUDGET.into(), ..Options::default() });
    let (path, want) = random_file(&srv, "up.bin", 10_000_000);
    let data = format!("@{}", path.display());
    for proto in [Proto::H2Tls, Proto::H2c] {
        let r = curl(&srv, proto, "/__up?hash=sha256", &["--data-binary", &data, "-H", "Expect:"]);
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 200, "{proto:?}: {body}");
        assert_eq!(support::json_u64(&body, "bytes"), Some(10_000_000), "{proto:?}: {body}");
        assert!(body.contains(&format!("\"sha256\":\"{want}\"")), "{proto:?}: digest differs: {body}");
    }
}

/// A body of declared length starts on a window that holds all of it: the access log's `win=`
/// (the largest window granted to the stream) is the body's length for a 4 MB upload, and the
/// initial 1 MiB for a body that fits in it. curl over TLS h2 sends `content-length` with
/// `--data-binary`.
#[test]
fn a_body_of_declared_length_starts_on_a_window_that_holds_it() {
    require_tool!("curl", "a_body_of_declared_length_starts_on_a_window_that_holds_it");
    let srv = Server::start_with(&Options::default());
    let (big, _) = random_file(&srv, "up4m.bin", 4_000_000);
    let (small, _) = random_file(&srv, "up100k.bin", 100_000);
    for file in [&big, &small] {
        let data = format!("@{}", file.display());
        let r = curl(&srv, Proto::H2Tls, "/__up", &["--data-binary", &data, "-H", "Expect:"]);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    // The log is written out every 100 ms; a line's `in=` tells the two uploads apart.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let window = |log: &str, bytes: u64| -> Option<u64> {
        let line = log.lines().find(|l| l.contains(" POST ") && l.contains(&format!(" in={bytes} ")))?;
        line.split(' ').find_map(|w| w.strip_prefix("win="))?.parse().ok()
    };
    loop {
        let log = srv.log();
        if let (Some(big), Some(small)) = (window(&log, 4_000_000), window(&log, 100_000)) {
            assert_eq!(big, 4_000_000, "the declared length, granted at once:\n{log}");
            assert_eq!(small, 1 << 20, "a body under the initial window keeps it:\n{log}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no access-log lines with win= for both uploads:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fifty_concurrent_uploads_on_one_connection_and_on_fifty() {
    require_tool!("h2load", "fifty_concurrent_uploads_on_one_connection_and_on_fifty");
    let srv = Server::start_with(&Options { extra: TINY_BUDGET.into(), ..Options::default() });
    let (path, _) = random_file(&srv, "up1m.bin", 1_000_000);
    for (clients, streams) in [(1, 50), (50, 1)] {
        let out = run(
            Command::new("h2load").args([
                "-n",
                "50",
                "-c",
                &clients.to_string(),
                "-m",
                &streams.to_string(),
                "-d",
                &path.display().to_string(),
                &srv.https("/__up"),
            ]),
            Duration::from_secs(120),
        );
        out.expect_success("h2load uploads");
        assert!(
            out.stdout.contains("50 succeeded, 0 failed") && out.stdout.contains("50 2xx"),
            "{clients} connection(s) × {streams} stream(s):\n{}",
            out.stdout
        );
    }
}
