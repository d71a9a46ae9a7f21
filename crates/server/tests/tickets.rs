//! TLS session tickets sealed with keys from the data directory (`tls-ticket-keys`): a ticket
//! one instance issued resumes on another that shares the directory, and on the same instance
//! after a reload; an instance with a directory of its own cannot open it. The client is
//! Python's `ssl` (OpenSSL), TLS 1.3.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{require_tool, run, Options, Server};

/// Connects to `first`, then (after `POST reload`, when given: an admin URL) with that session
/// to each of `then`: whether each resumed.
fn resumed(first: u16, reload: Option<&str>, then: &[u16]) -> Vec<bool> {
    let ports: Vec<String> = then.iter().map(u16::to_string).collect();
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n\
         ctx.check_hostname = False\n\
         ctx.verify_mode = ssl.CERT_NONE\n\
         ctx.minimum_version = ssl.TLSVersion.TLSv1_3\n\
         def get(port, session=None):\n\
         \x20   with socket.create_connection(('127.0.0.1', port)) as raw:\n\
         \x20       with ctx.wrap_socket(raw, server_hostname='localhost', session=session) as s:\n\
         \x20           s.sendall(b'GET / HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n')\n\
         \x20           while s.recv(65536):\n\
         \x20               pass\n\
         \x20           return s.session, s.session_reused\n\
         session, _ = get({first})\n\
         import urllib.request\n\
         if '{reload}':\n\
         \x20   print(urllib.request.urlopen(urllib.request.Request('{reload}', method='POST')).read().decode().replace(' ', '_').strip())\n\
         print(' '.join(str(get(int(p), session)[1]) for p in '{ports}'.split()))\n",
        ports = ports.join(" "),
        reload = reload.unwrap_or("")
    );
    let out = run(Command::new("python3").arg("-c").arg(&script), Duration::from_secs(30));
    out.expect_success("python ssl client");
    let mut words: Vec<&str> = out.stdout.split_whitespace().collect();
    if reload.is_some() {
        let said = words.remove(0);
        assert!(said.contains("reloaded"), "{}", out.stdout);
    }
    words.into_iter().map(|w| w == "True").collect()
}

#[test]
fn a_ticket_from_one_instance_resumes_on_another() {
    require_tool!("python3", "a_ticket_from_one_instance_resumes_on_another");
    let shared = tempfile::tempdir().unwrap();
    let opts = || Options { data_dir: Some(shared.path().to_path_buf()), ..Options::default() };
    let a = Server::start_with(&opts());
    let b = Server::start_with(&opts());
    let lone = Server::start();
    // Instance A's ticket: on A again, on B (same directory), on the lone one (not).
    assert_eq!(resumed(a.tls_port, None, &[a.tls_port, b.tls_port, lone.tls_port]), [true, true, false]);
    assert!(shared.path().join("tls-ticket-keys").exists());
    // A reload keeps the keys: a ticket from before it resumes after it.
    assert_eq!(resumed(a.tls_port, Some(&a.admin("/reload")), &[a.tls_port]), [true]);
}
