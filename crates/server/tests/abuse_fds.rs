//! The abuse suite, out of file descriptors (W4): a server whose open-file limit is used up by
//! idle connections answers an existing file 503 (not 404), and recovers once they go. Its
//! own test binary: it points the whole process's `SLUICE_TEST_BIN` at a wrapper that starts
//! the server under `prlimit`.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::{Duration, Instant};

use support::{require_tool, Server};

#[test]
fn w4_out_of_descriptors_is_503_not_404_and_the_server_recovers() {
    require_tool!("prlimit", "w4_out_of_descriptors_is_503_not_404_and_the_server_recovers");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("sluice-64fds");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec prlimit --nofile=64:64 {} \"$@\"\n", support::sluice_bin().display()),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // This test binary holds only this test: the variable affects no other.
    std::env::set_var("SLUICE_TEST_BIN", &wrapper);
    let srv = Server::start();
    // The request connection first, accepted while descriptors remain.
    let mut first = TcpStream::connect(("127.0.0.1", srv.plain_port)).unwrap();
    thread::sleep(Duration::from_millis(300));
    // Then idle connections until the server has none left (the rest wait in the backlog).
    let idle: Vec<TcpStream> =
        (0..100).filter_map(|_| TcpStream::connect(("127.0.0.1", srv.plain_port)).ok()).collect();
    thread::sleep(Duration::from_millis(500));
    // /data.bin is larger than the small-file cache holds: serving it needs a descriptor.
    first.write_all(b"GET /data.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    assert_eq!(support::h1_status_of(&mut first), "503", "server log:\n{}", srv.log());
    assert!(srv.log().contains("out of file descriptors"), "{}", srv.log());
    drop(first);
    drop(idle);
    // Descriptors back: the accept loop's back-off ends and files are served again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", srv.plain_port)) {
            if s.write_all(b"GET /data.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").is_ok() {
                last = support::h1_status_of(&mut s);
                if last == "200" {
                    return;
                }
            }
        }
        thread::sleep(Duration::from_millis(200));
    }
    panic!("not served after the idle connections closed (last status {last:?}):\n{}", srv.log());
}
