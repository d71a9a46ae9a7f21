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

/// A raw HTTP/2 frame.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The whole frames at the start of `got` as (type, flags, stream, payload); the rest stays.
fn take_frames(got: &mut Vec<u8>) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 9 <= got.len() {
        let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
        if at + 9 + len > got.len() {
            break;
        }
        let stream = u32::from_be_bytes(got[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        out.push((got[at + 3], got[at + 4], stream, got[at + 9..at + 9 + len].to_vec()));
        at += 9 + len;
    }
    got.drain(..at);
    out
}

/// A client streams a body of declared length fast (so the server reads it in batches, with
/// a receive low-water mark), stops part-way and sends a PING: the PING is answered (the
/// bytes under the mark are read once the input stops), and the rest of the body, sent after,
/// arrives whole. With the mark left up, the PING's 17 bytes would wait for the body's next
/// ones, which the client sends only after the answer.
#[test]
fn a_peer_that_pauses_in_a_fast_body_gets_its_ping_answered_and_the_body_arrives_whole() {
    use std::io::{Read, Write};
    use std::time::Instant;
    const LEN: usize = 2_000_000;
    const FRAME: usize = 16_384;
    let srv = Server::start_with(&Options::default());
    let mut x: u32 = 12345;
    let body: Vec<u8> = (0..LEN)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    let want: String = Sha256::digest(&body).iter().map(|b| format!("{b:02x}")).collect();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", srv.plain_port)).expect("connect");
    s.set_nodelay(true).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x4, 0x1, 0, &[]));
    // POST /__up?hash=sha256, authority localhost, content-length: literals with indexed names.
    let path = b"/__up?hash=sha256";
    let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path);
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    let cl = LEN.to_string();
    block.extend_from_slice(&[0x0f, 28 - 15, cl.len() as u8]);
    block.extend_from_slice(cl.as_bytes());
    out.extend(h2_frame(0x1, 0x4, 1, &block));
    s.write_all(&out).unwrap();
    // 20 steps of two frames each half a millisecond (about 60 MB/s): 640 KiB, within the
    // initial windows (1 MiB each).
    let mut sent = 0;
    for _ in 0..20 {
        for _ in 0..2 {
            s.write_all(&h2_frame(0x0, 0, 1, &body[sent..sent + FRAME])).unwrap();
            sent += FRAME;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(&h2_frame(0x6, 0, 0, b"12345678")).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut got = Vec::new();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut read_some = |s: &mut std::net::TcpStream, got: &mut Vec<u8>, frames: &mut Vec<_>| {
        assert!(Instant::now() < deadline, "stuck: frames so far {:?}", frame_kinds(frames));
        match s.read(&mut buf) {
            Ok(0) => panic!("the server closed the connection: {:?}", frame_kinds(frames)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
        frames.extend(take_frames(got));
    };
    while !frames.iter().any(|f: &(u8, u8, u32, Vec<u8>)| f.0 == 0x6 && f.1 & 0x1 != 0 && f.3 == b"12345678") {
        read_some(&mut s, &mut got, &mut frames);
    }
    // The rest, within the windows the server grants (its SETTINGS and WINDOW_UPDATEs).
    let window = |frames: &[(u8, u8, u32, Vec<u8>)], stream: u32| -> i64 {
        let mut w: i64 = 65_535;
        for (kind, flags, id, p) in frames {
            if *kind == 0x4 && flags & 0x1 == 0 && stream != 0 {
                for set in p.chunks(6).filter(|set| set[..2] == [0, 4]) {
                    w += i64::from(u32::from_be_bytes(set[2..6].try_into().unwrap())) - 65_535;
                }
            }
            if *kind == 0x8 && *id == stream {
                w += i64::from(u32::from_be_bytes(p[..4].try_into().unwrap()) & 0x7fff_ffff);
            }
        }
        w
    };
    while sent < LEN {
        let room = window(&frames, 0).min(window(&frames, 1)) - sent as i64;
        if room <= 0 {
            read_some(&mut s, &mut got, &mut frames);
            continue;
        }
        let n = (LEN - sent).min(FRAME).min(room as usize);
        let end = if sent + n == LEN { 0x1 } else { 0 };
        s.write_all(&h2_frame(0x0, end, 1, &body[sent..sent + n])).unwrap();
        sent += n;
    }
    while !frames.iter().any(|f| f.2 == 1 && matches!(f.0, 0x0 | 0x1) && f.1 & 0x1 != 0) {
        read_some(&mut s, &mut got, &mut frames);
    }
    assert!(!frames.iter().any(|f| matches!(f.0, 0x3 | 0x7)), "reset or GOAWAY: {:?}", frame_kinds(&frames));
    let answer: Vec<u8> = frames.iter().filter(|f| f.0 == 0x0 && f.2 == 1).flat_map(|f| f.3.clone()).collect();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(support::json_u64(&answer, "bytes"), Some(LEN as u64), "{answer}");
    assert!(answer.contains(&format!("\"sha256\":\"{want}\"")), "digest differs: {answer}");
}

fn frame_kinds(frames: &[(u8, u8, u32, Vec<u8>)]) -> Vec<(u8, u8, u32)> {
    frames.iter().map(|f| (f.0, f.1, f.2)).collect()
}
