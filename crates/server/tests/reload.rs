//! Reload: a new configuration and new certificates without a restart and without cutting
//! anything that runs. Real peers: curl and `sluice get` downloading 1 GB over HTTP/1.1,
//! HTTP/2 and HTTP/3, h2load, a WebSocket session (PyPI `websockets`) and a gRPC stream (PyPI
//! `grpcio`) through the proxy.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::{file_len, free_port, require_tool, run, sluice_bin, Options, Running, Server};

/// `POST /reload` on the admin listener: the status and the body.
fn reload(srv: &Server) -> (u16, String) {
    let out = run(
        Command::new("curl").args(["-s", "-X", "POST", "-w", "\n%{http_code}", &srv.admin("/reload")]),
        Duration::from_secs(30),
    );
    let (body, code) = out.stdout.trim_end().rsplit_once('\n').unwrap_or(("", out.stdout.trim()));
    (code.parse().unwrap_or(0), body.to_owned())
}

fn get(url: &str, extra: &[&str]) -> String {
    let out = run(Command::new("curl").args(["-sk", "--max-time", "10"]).args(extra).arg(url), Duration::from_secs(15));
    out.stdout
}

fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !support::accepts(port) {
        assert!(Instant::now() < deadline, "{what} did not start");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A generation's document root for `/gen/`: a directory in `base` whose `v.txt` says `n`.
fn gen_root(base: &Path, n: u32) -> String {
    let dir = base.join(format!("gen-{n}"));
    // A route's root holds the whole path: `/gen/v.txt` is `ROOT/gen/v.txt`.
    fs::create_dir_all(dir.join("gen")).unwrap();
    fs::write(dir.join("gen/v.txt"), format!("{n}\n")).unwrap();
    dir.display().to_string()
}

fn set_generation(srv: &Server, base: &Path, from: u32, to: u32) {
    let path = srv.config_path();
    let text = fs::read_to_string(&path).unwrap();
    let (a, b) = (gen_root(base, from), gen_root(base, to));
    assert!(text.contains(&a));
    fs::write(&path, text.replace(&a, &b)).unwrap();
}

/// While 1 GB downloads run over HTTP/1.1, HTTP/2 and HTTP/3, h2load sends small requests over
/// HTTP/2 and HTTP/1.1, a WebSocket echoes every 50 ms and a gRPC client stream sends every
/// 50 ms (both through the proxy), the configuration is reloaded three times: each reload
/// serves the new site at once; every download arrives whole, every request h2load sent that
/// reached the server was answered whole and counted a success,
/// the WebSocket and the gRPC stream finish; a bad configuration in between is refused with
/// file:line:column and the running one keeps serving.
#[test]
fn reloads_under_load_cut_nothing() {
    const TEST: &str = "reloads_under_load_cut_nothing";
    require_tool!("curl", TEST);
    require_tool!("h2load", TEST);
    if !support::python_has("websockets", TEST) || !support::python_has("grpc", TEST) {
        return;
    }
    let ws_port = free_port();
    let ws_server = format!(
        "import websockets.sync.server as s\n\
         def echo(ws):\n    for m in ws:\n        ws.send(m)\n\
         with s.serve(echo, '127.0.0.1', {ws_port}) as srv:\n    srv.serve_forever()\n"
    );
    let _ws_child = support::Kill(
        Command::new("python3").arg("-c").arg(&ws_server).stderr(Stdio::null()).spawn().expect("python3"),
    );
    let grpc_port = free_port();
    let grpc_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/grpc_echo.py");
    let _grpc_child = support::Kill(
        Command::new("python3")
            .arg(&grpc_script)
            .args(["serve", &grpc_port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3"),
    );
    wait_port(ws_port, "websocket server");
    wait_port(grpc_port, "gRPC server");
    let gens = tempfile::tempdir().unwrap();
    let extra = format!(
        "[[upstream]]\nname = \"ws\"\nservers = [\"127.0.0.1:{ws_port}\"]\n\
         [[upstream]]\nname = \"grpc\"\nservers = [\"127.0.0.1:{grpc_port}\"]\nprotocol = \"h2c\"\n\
         [[site.route]]\npath = \"/ws/\"\nproxy = \"ws\"\n\
         [[site.route]]\npath = \"/echo.Echo/\"\nproxy = \"grpc\"\n\
         [[site.route]]\npath = \"/gen/\"\nroot = '{}'\n",
        gen_root(gens.path(), 0)
    );
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let path = srv.config_path();
    assert_eq!(get(&srv.https("/gen/v.txt"), &[]), "0\n");

    // 1 GB each, read at 150 MB/s: about 7 s, across every reload.
    let size = 1_000_000_000u64;
    let url = srv.https(&format!("/__down?bytes={size}"));
    let mut downloads = Vec::new();
    for (proto, flag) in [("h1", "--http1.1"), ("h2", "--http2")] {
        let out = srv.scratch(&format!("{proto}.bin"));
        let d = Running::spawn(
            Command::new("curl")
                .args(["-sk", flag, "--limit-rate", "150M", "--max-time", "60", "-o"])
                .arg(&out)
                .arg(&url),
        );
        downloads.push((proto, d, out));
    }
    let out = srv.scratch("h3.bin");
    let d = Running::spawn(
        Command::new(sluice_bin())
            .args(["get", "-k", "-s", "--http3", "--limit-rate", "150000000", "--max-time", "60", "-o"])
            .arg(&out)
            .arg(&url),
    );
    downloads.push(("h3", d, out));
    let ws = Running::spawn(Command::new("python3").arg("-c").arg(format!(
        "import time, websockets.sync.client as c\n\
         n = 0\n\
         with c.connect('ws://127.0.0.1:{}/ws/') as ws:\n\
         \x20   end = time.monotonic() + 6\n\
         \x20   while time.monotonic() < end:\n\
         \x20       ws.send(f'm{{n}}')\n\
         \x20       assert ws.recv(timeout=10) == f'm{{n}}'\n\
         \x20       n += 1\n\
         \x20       time.sleep(0.05)\n\
         print('echoed', n)\n",
        srv.plain_port
    )));
    let grpc = Running::spawn(Command::new("python3").arg(&grpc_script).args([
        "slow",
        &format!("127.0.0.1:{}", srv.plain_port),
        "6",
    ]));
    let h2load = |h1: bool| {
        let mut c = Command::new("h2load");
        // 8 s at 500 requests per second per client: across every reload.
        c.args(["-D", "8", "--rps", "500", "-c", "4", "-m", if h1 { "1" } else { "8" }]);
        if h1 {
            c.arg("--h1");
        }
        Running::spawn(c.arg(srv.https("/hello.txt")))
    };
    let (load_h2, load_h1) = (h2load(false), h2load(true));
    for (proto, d, out) in &mut downloads {
        support::wait_until_flowing(d, out, &format!("{TEST} ({proto})"));
    }

    let mut took = Vec::new();
    for n in 1..=3u32 {
        thread::sleep(Duration::from_millis(700));
        set_generation(&srv, gens.path(), n - 1, n);
        let t = Instant::now();
        let (code, body) = reload(&srv);
        assert_eq!(code, 200, "reload {n}: {body}\n{}", srv.log());
        // The next request sees the new site (a new connection: curl's own).
        assert_eq!(get(&srv.https("/gen/v.txt"), &[]), format!("{n}\n"), "reload {n}");
        took.push(t.elapsed());
        if n == 2 {
            // A bad file is refused with where and why, and changes nothing.
            let good = fs::read_to_string(&path).unwrap();
            fs::write(&path, format!("{good}\n[limits]\nmax_connections = \"many\"\n")).unwrap();
            let (code, body) = reload(&srv);
            assert_eq!(code, 422, "{body}");
            let line = good.lines().count() + 3;
            assert!(body.contains(&format!("sluice.toml:{line}:19")), "{body}");
            assert_eq!(get(&srv.https("/gen/v.txt"), &[]), "2\n");
            fs::write(&path, good).unwrap();
        }
    }
    // Everything was still running when the last reload was over.
    for (proto, d, _) in &mut downloads {
        assert!(d.is_running(), "{proto}: the download ended before the reloads did; make it longer");
    }
    let (mut ws, mut grpc, mut load_h2, mut load_h1) = (ws, grpc, load_h2, load_h1);
    for (what, r) in
        [("websocket", &mut ws), ("grpc", &mut grpc), ("h2load h2", &mut load_h2), ("h2load h1", &mut load_h1)]
    {
        assert!(r.is_running(), "{what} ended before the reloads did");
    }
    for (proto, d, out) in downloads {
        let o = d.finish(Duration::from_secs(60));
        assert!(o.status.success(), "{proto} download failed across reloads: {}\n{}", o.stderr, srv.log());
        assert_eq!(file_len(&out), size, "{proto}: the whole body");
    }
    let o = ws.finish(Duration::from_secs(30));
    assert!(o.status.success() && o.stdout.contains("echoed"), "WebSocket: {}\n{}", o.stdout, o.stderr);
    let o = grpc.finish(Duration::from_secs(40));
    assert!(o.status.success(), "gRPC stream: {}\n{}", o.stdout, o.stderr);
    // The server's own record of the load (the access log's text lines: `time peer protocol
    // method authority path status in out duration outcome`), once its buffer is written out.
    thread::sleep(Duration::from_millis(300));
    let log = srv.log();
    let served = |proto: &str| -> (u64, Vec<String>) {
        let (mut ok, mut other) = (0, Vec::new());
        for l in log.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 6 && f[2] == proto && f[5] == "/hello.txt" {
                if f[6] == "200" && f.last() == Some(&"ok") {
                    ok += 1;
                } else {
                    other.push(l.to_owned());
                }
            }
        }
        (ok, other)
    };
    for (what, proto, load) in [("h2", "HTTP/2", load_h2), ("h1", "HTTP/1.1", load_h1)] {
        let o = load.finish(Duration::from_secs(120));
        let line = o.stdout.lines().find(|l| l.starts_with("requests:")).unwrap_or_default().to_owned();
        let n = |label: &str| -> u64 {
            line.split(", ")
                .find_map(|p| p.trim_start_matches("requests: ").strip_suffix(label)?.trim().parse().ok())
                .unwrap_or(u64::MAX)
        };
        let (ok, other) = served(proto);
        // Nothing cut: every request that reached the server was answered whole, and each of
        // those the client counted a success.
        assert!(other.is_empty(), "h2load over {what}: requests not answered whole:\n{}", other.join("\n"));
        assert!(n(" succeeded") > 100 && n(" succeeded") == ok, "h2load over {what}: {line}; the server answered {ok}");
        assert_eq!(n(" timeout"), 0, "h2load over {what}: {line}");
        if what == "h1" {
            // h2load opens a new connection after `Connection: close`: nothing fails at all.
            assert_eq!((n(" failed"), n(" errored")), (0, 0), "h2load over {what}: {line}");
        } else {
            // A retired HTTP/2 connection gets its GOAWAY once it has been idle for a second,
            // which a starved h2load can let happen (when the machine is loaded). Unlike
            // browsers, h2load does not send the requests it queued meanwhile on a new
            // connection (RFC 9113 §6.8 allows it: nothing was processed) and counts them
            // failed; they never reached the server (checked above), at most `-m` per client.
            assert!(n(" errored") == n(" failed") && n(" errored") <= 4 * 8, "h2load over {what}: {line}");
        }
        support::note(&format!("{TEST}: h2load over {what} across the reloads: {line}"));
    }
    support::note(&format!("{TEST}: reload to new site served {took:?}"));
}

/// A certificate file replaced on disk: new handshakes present the new certificate within the
/// poll interval, over TCP and QUIC's configuration alike, without a reload command; a
/// connection opened before keeps working.
#[test]
fn a_replaced_certificate_file_is_served_to_new_handshakes() {
    const TEST: &str = "a_replaced_certificate_file_is_served_to_new_handshakes";
    require_tool!("openssl", TEST);
    let make = |name: &str| {
        let ck = rcgen::generate_simple_self_signed(vec![name.to_owned(), "localhost".to_owned()]).unwrap();
        (ck.cert.pem(), ck.signing_key.serialize_pem())
    };
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let (c1, k1) = make("first.test");
    fs::write(&cert, &c1).unwrap();
    fs::write(&key, &k1).unwrap();
    let extra = format!("[[certificate]]\ncert = '{}'\nkey = '{}'\n", cert.display(), key.display());
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let names = || {
        let out = run(
            Command::new("sh").arg("-c").arg(format!(
                "openssl s_client -connect 127.0.0.1:{} -servername localhost </dev/null 2>/dev/null | \
                 openssl x509 -noout -ext subjectAltName",
                srv.tls_port
            )),
            Duration::from_secs(15),
        );
        out.stdout
    };
    assert!(names().contains("first.test"), "{}", srv.log());
    let (c2, k2) = make("second.test");
    // As certbot does: the key first, then the certificate (a moment when they do not match is
    // refused and tried again when the other file changes).
    fs::write(&key, &k2).unwrap();
    fs::write(&cert, &c2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n = names();
        if n.contains("second.test") {
            break;
        }
        assert!(Instant::now() < deadline, "still {n}\n{}", srv.log());
        thread::sleep(Duration::from_millis(200));
    }
    assert!(srv.log().contains("a certificate or key file changed"), "{}", srv.log());
}

/// `sluice reload` reaches the server through its admin listener and reports the outcome; it
/// checks the file itself first; without an admin listener it signals the pid in `pid_file`.
#[test]
fn the_reload_command_reports_the_outcome() {
    const TEST: &str = "the_reload_command_reports_the_outcome";
    require_tool!("curl", TEST);
    let srv = Server::start_with(&Options {
        extra: "[[site.route]]\npath = \"/gen/\"\nroot = '{www}'\n".into(),
        ..Options::default()
    });
    let cfg = srv.config_path();
    let out = run(Command::new(sluice_bin()).arg("reload").arg("--config").arg(&cfg), Duration::from_secs(30));
    out.expect_success("sluice reload");
    assert!(out.stdout.contains("reloaded in"), "{}", out.stdout);
    let good = fs::read_to_string(&cfg).unwrap();
    fs::write(&cfg, format!("{good}\nbogus = 1\n")).unwrap();
    let out = run(Command::new(sluice_bin()).arg("reload").arg("--config").arg(&cfg), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.contains("sluice.toml:") && out.stderr.contains("bogus"), "{}", out.stderr);
    assert!(!srv.log().contains("reload refused"), "checked before the server was asked");
    fs::write(&cfg, good).unwrap();

    // No admin listener: the pid file and SIGHUP.
    let pid_file = srv.scratch("sluice.pid");
    let extra = format!("pid_file = '{}'\n", pid_file.display());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("s.toml");
    let text = |root: &str| {
        format!(
            "{extra}data_dir = '{}'\n[[listener]]\naddr = \"127.0.0.1:{port}\"\ntls = false\n\
             [[site]]\nroot = '{root}'\n[admin]\nenabled = false\n",
            dir.path().join("data").display()
        )
    };
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (d, v) in [(&a, "a\n"), (&b, "b\n")] {
        fs::create_dir_all(d).unwrap();
        fs::write(d.join("v.txt"), v).unwrap();
    }
    fs::write(&conf, text(&a.display().to_string())).unwrap();
    let mut child = Running::spawn(Command::new(sluice_bin()).arg("serve").arg("--config").arg(&conf));
    wait_port(port, "sluice with a pid file");
    assert_eq!(get(&format!("http://127.0.0.1:{port}/v.txt"), &[]), "a\n");
    fs::write(&conf, text(&b.display().to_string())).unwrap();
    let out = run(Command::new(sluice_bin()).arg("reload").arg("--config").arg(&conf), Duration::from_secs(30));
    out.expect_success("sluice reload by pid file");
    assert!(out.stdout.contains("sent SIGHUP"), "{}", out.stdout);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&format!("http://127.0.0.1:{port}/v.txt"), &[]) != "b\n" {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        thread::sleep(Duration::from_millis(100));
    }
    assert!(child.is_running());
    let pid = fs::read_to_string(&pid_file).unwrap();
    let _ = Command::new("kill").arg(pid.trim()).status();
    let o = child.finish(Duration::from_secs(20));
    assert!(o.status.success(), "{}", o.stderr);
    assert!(!pid_file.exists(), "the pid file is removed at exit");
}

/// What a service manager hears on `NOTIFY_SOCKET` (systemd's `Type=notify-reload`, played
/// here by a unix datagram socket): READY=1 once listening; RELOADING=1 with MONOTONIC_USEC,
/// then READY=1, around a SIGHUP reload; STOPPING=1 on SIGTERM.
#[test]
fn a_service_manager_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let port = free_port();
    let conf = dir.path().join("s.toml");
    fs::create_dir_all(dir.path().join("www")).unwrap();
    fs::write(
        &conf,
        format!(
            "data_dir = '{d}/data'\n[[listener]]\naddr = \"127.0.0.1:{port}\"\ntls = false\n\
             [[site]]\nroot = '{d}/www'\n[admin]\nenabled = false\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let child = Running::spawn(
        Command::new(sluice_bin()).arg("serve").arg("--config").arg(&conf).env("NOTIFY_SOCKET", &sock_path),
    );
    let mut buf = [0u8; 4096];
    let mut next = || {
        let n = sock.recv(&mut buf).expect("a notification within 15 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let ready = next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(support::accepts(port), "READY=1 comes once the listeners are bound");
    let pid = child.pid().to_string();
    let _ = Command::new("kill").args(["-HUP", &pid]).status();
    let reloading = next();
    assert!(reloading.lines().any(|l| l == "RELOADING=1"), "{reloading}");
    let usec =
        reloading.lines().find_map(|l| l.strip_prefix("MONOTONIC_USEC=")).expect("MONOTONIC_USEC with RELOADING");
    assert!(usec.parse::<u64>().is_ok_and(|u| u > 0), "{reloading}");
    let again = next();
    assert!(again.lines().any(|l| l == "READY=1"), "{again}");
    let _ = Command::new("kill").arg(&pid).status();
    let stopping = next();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    let o = child.finish(Duration::from_secs(20));
    assert!(o.status.success(), "{}", o.stderr);
}

/// A connection a reload retired moves to the new configuration at its first pause: Node's
/// HTTP/2 client, idle after one request, gets the announced GOAWAY (last stream 2^31-1) and
/// then the final one naming its last stream, and the connection closes; its request was
/// served by the old configuration, the next one on a new connection by the new.
#[test]
fn an_idle_retired_http2_connection_gets_goaway_and_closes() {
    const TEST: &str = "an_idle_retired_http2_connection_gets_goaway_and_closes";
    require_tool!("node", TEST);
    let gens = tempfile::tempdir().unwrap();
    let extra = format!("[[site.route]]\npath = \"/gen/\"\nroot = '{}'\n", gen_root(gens.path(), 0));
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let flag = srv.scratch("reloaded");
    let script = format!(
        "const http2 = require('http2');\n\
         const fs = require('fs');\n\
         const s = http2.connect('https://127.0.0.1:{port}', {{ rejectUnauthorized: false }});\n\
         const t0 = Date.now();\n\
         const out = {{ goaways: [], body: '' }};\n\
         s.on('goaway', (code, last) => out.goaways.push([code, last, fs.existsSync('{flag}')]));\n\
         s.on('close', () => {{ out.closed_ms = Date.now() - t0; console.log(JSON.stringify(out)); }});\n\
         s.on('error', (e) => {{ out.error = String(e); }});\n\
         const r = s.request({{ ':path': '/gen/v.txt' }});\n\
         r.setEncoding('utf8');\n\
         r.on('data', (d) => out.body += d);\n\
         r.on('end', () => console.error('first response done'));\n\
         r.end();\n\
         setTimeout(() => {{ out.timeout = true; s.close(); }}, 15000).unref();\n",
        port = srv.tls_port,
        flag = flag.display()
    );
    let mut node = Running::spawn(Command::new("node").arg("-e").arg(&script));
    thread::sleep(Duration::from_millis(500));
    let path = srv.config_path();
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace(&gen_root(gens.path(), 0), &gen_root(gens.path(), 1))).unwrap();
    fs::write(&flag, "").unwrap();
    assert_eq!(reload(&srv).0, 200);
    assert!(node.is_running(), "the old connection is not cut by the reload");
    assert_eq!(get(&srv.https("/gen/v.txt"), &[]), "1\n");
    let o = node.finish(Duration::from_secs(30));
    let v: serde_json::Value =
        serde_json::from_str(o.stdout.trim()).unwrap_or_else(|_| panic!("{}\n{}", o.stdout, o.stderr));
    assert_eq!(v["body"], "0\n", "served by the configuration it started with");
    assert!(v.get("timeout").is_none(), "the retired connection closed by itself: {v}");
    let goaways = v["goaways"].as_array().unwrap();
    // Node reports the first GOAWAY; both arrive after the reload, with NO_ERROR.
    assert!(!goaways.is_empty(), "{v}");
    assert!(goaways.iter().all(|g| g[0] == 0 && g[2] == true), "{v}");
    assert!(v["closed_ms"].as_u64().unwrap() < 10_000, "{v}");
    support::note(&format!("{TEST}: {v}"));
}
