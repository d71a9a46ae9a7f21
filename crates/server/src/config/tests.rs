//! The configuration's parsing and validation, with the positions errors point at.

use super::*;

fn parse_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
    parse(text, Path::new("sluice.toml"), dir)
}

fn err(text: &str) -> ConfigError {
    let dir = tempfile::tempdir().unwrap();
    parse_in(dir.path(), text).unwrap_err()
}

#[test]
fn upstreams_and_proxied_routes() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9000 weight=2", "unix:/run/app.sock"]
balance = "hash"
hash_key = "cookie:session"
host = "app.internal"
[upstream.pool]
max_idle = 8
idle_secs = 3
max_connections = 100
[upstream.timeouts]
connect_secs = 2
response_head_secs = 30
[upstream.health]
path = "/healthz"
interval_secs = 2
[upstream.eject]
failures = 3
secs = 10
[[upstream]]
name = "grpc"
servers = ["127.0.0.1:50051"]
protocol = "h2c"
[proxy]
trusted_proxies = ["10.0.0.0/8", "::1"]
[[site]]
hosts = ["app.example"]
proxy = "app"
[[site]]
builtin = true
[[site.route]]
path = "/rpc/"
proxy = "grpc"
"#;
    let c = parse_in(dir.path(), text).unwrap();
    assert_eq!(c.upstreams.len(), 2);
    let app = &c.upstreams[0];
    assert_eq!(app.servers[0].weight, 2);
    assert_eq!(app.balance, Balance::Hash(HashKey::Cookie("session".into())));
    assert_eq!((app.pool_max_idle, app.pool_idle, app.max_connections), (8, Duration::from_secs(3), 100));
    assert_eq!(app.connect_timeout, Duration::from_secs(2));
    assert_eq!(app.health.as_ref().unwrap().path, "/healthz");
    assert_eq!((app.eject_failures, app.eject_for), (3, Duration::from_secs(10)));
    assert_eq!(c.upstreams[1].protocol, UpstreamProto::H2c);
    assert_eq!(c.proxy.trusted.len(), 2);
    assert_eq!(c.sites[0].routes[0].handler, RouteHandler::Proxy(0));
    assert_eq!(c.sites[1].routes[0].handler, RouteHandler::Proxy(1));
    // Errors point at the value.
    let cases: [(&str, usize, &str); 8] = [
        ("[[site]]\nproxy = \"nope\"\n", 2, "no `[[upstream]]` is named `nope`"),
        ("[[upstream]]\nname = \"a\"\nservers = [\"127.0.0.1\"]\n", 3, "needs a port"),
        ("[[upstream]]\nname = \"a\"\nservers = []\n", 3, "at least one server"),
        ("[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\nprotocol = \"h3\"\n", 4, "unknown upstream protocol"),
        ("[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\nhash_key = \"client_ip\"\n", 4, "needs `balance"),
        (
            "[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\n[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\n",
            5,
            "defined twice",
        ),
        ("[proxy]\ntrusted_proxies = [\"10.0.0.0/40\"]\n", 2, "prefix length"),
        (
            "[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\nprotocol = \"h2c\"\n[upstream.tls]\nsni = \"x\"\n",
            5,
            "`h2c` is HTTP/2 without TLS",
        ),
    ];
    for (text, line, msg) in cases {
        let e = err(text);
        assert_eq!(e.position().map(|p| p.0), Some(line), "{text}: {e}");
        assert!(e.message().contains(msg), "{text}: {e}");
    }
    // A route names one handler only.
    let e = err("[[upstream]]\nname = \"a\"\nservers = [\"h:1\"]\n[[site]]\nbuiltin = true\nproxy = \"a\"\n");
    assert!(e.message().contains("not several"), "{e}");
}

#[test]
fn flow_section() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse_in(dir.path(), "[flow]\npolicy = \"hyper\"\nbudget = 1000\n").unwrap();
    assert_eq!((c.flow.policy, c.flow.budget), (FlowPolicy::Hyper, 1000));
    let e = err("[flow]\npolicy = \"magic\"\n");
    assert_eq!(e.position(), Some((2, 10)));
    assert!(e.message().contains("unknown flow policy"), "{}", e.message());
    let e = err("[flow]\ninitial_stream_window = 1000\nmax_stream_window = 10\n");
    assert_eq!(e.position().map(|p| p.0), Some(3));
}

#[test]
fn good_config() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("www")).unwrap();
    let (c, k) = sluice_tls::certs::generate_self_signed(&["example.com"]).unwrap();
    fs::create_dir(dir.path().join("certs")).unwrap();
    fs::write(dir.path().join("certs/a.pem"), c).unwrap();
    fs::write(dir.path().join("certs/a.key"), k).unwrap();
    let text = r#"
data_dir = "state"
access_log = false
[[listener]]
addr = "127.0.0.1:8443"
[[listener]]
addr = "[::1]:8080"
tls = false
[[certificate]]
cert = "certs/a.pem"
key = "certs/a.key"
[[site]]
hosts = ["Example.com", "www.example.com."]
root = "www"
[[site]]
builtin = true
[speedtest]
enabled = false
max_download_bytes = 1_000
[limits]
max_concurrent_streams = 100
header_table_size = 65536
flood_window_secs = 5
max_connections = 7
[timeouts]
header_secs = 3
drain_secs = 0
"#;
    let cfg = parse_in(dir.path(), text).unwrap();
    assert_eq!(cfg.data_dir, dir.path().join("state"));
    assert!(!cfg.access_log.on());
    assert_eq!(cfg.listeners.len(), 2);
    assert_eq!(cfg.listeners[0].addr, "127.0.0.1:8443".parse().unwrap());
    assert!(cfg.listeners[0].tls);
    assert!(!cfg.listeners[1].tls);
    assert_eq!(cfg.certificates.len(), 1);
    assert_eq!(cfg.certificates[0].cert.as_deref(), Some(dir.path().join("certs/a.pem").as_path()));
    assert_eq!(cfg.sites[0].hosts, vec!["example.com", "www.example.com"]);
    assert!(matches!(&cfg.sites[0].routes[0].handler, RouteHandler::Root(p) if *p == dir.path().join("www")));
    assert!(cfg.sites[1].hosts.is_empty());
    assert!(matches!(cfg.sites[1].routes[0].handler, RouteHandler::Builtin));
    assert!(!cfg.speedtest.enabled);
    assert_eq!(cfg.speedtest.max_download_bytes, 1000);
    assert_eq!(cfg.limits.max_concurrent_streams, 100);
    assert_eq!(cfg.limits.header_table_size, 65536);
    assert_eq!(cfg.limits.flood_window, Duration::from_secs(5));
    assert_eq!(cfg.limits.max_connections, 7);
    assert_eq!(cfg.limits.max_pings_per_window, 50);
    assert_eq!(cfg.timeouts.header, Duration::from_secs(3));
    assert_eq!(cfg.timeouts.idle, Duration::from_secs(60));
    assert_eq!(cfg.timeouts.drain, Duration::ZERO);
}

#[test]
fn defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse_in(dir.path(), "").unwrap();
    assert_eq!(cfg.listeners.len(), 2);
    assert_eq!(cfg.listeners[0].addr.port(), 8443);
    assert!(cfg.listeners[0].tls);
    assert!(cfg.listeners[0].addr.ip().is_unspecified());
    assert_eq!(cfg.listeners[1].addr.port(), 8080);
    assert!(!cfg.listeners[1].tls);
    assert_eq!(cfg.certificates.len(), 1);
    assert!(cfg.certificates[0].cert.is_none());
    assert_eq!(cfg.sites.len(), 1);
    assert!(matches!(cfg.sites[0].routes[0].handler, RouteHandler::Builtin));
    assert!(cfg.speedtest.enabled);
    assert_eq!(cfg.speedtest.max_download_bytes, 10_000_000_000);
    assert_eq!(cfg.limits.max_concurrent_streams, 128);
    assert_eq!(cfg.limits.max_header_list_size, 65536);
    assert_eq!(cfg.limits.max_request_body, 10_737_418_240);
    assert_eq!(cfg.limits.max_connections, 10_000);
    assert_eq!(cfg.timeouts.idle, Duration::from_secs(60));
    assert!(cfg.access_log.on());
    assert!(cfg.data_dir.ends_with("sluice"));
    let d = default_config(PathBuf::from("/tmp/x"));
    assert_eq!(d.listeners.len(), 2);
    assert_eq!(d.certificates.len(), 1);
    assert_eq!(d.data_dir, PathBuf::from("/tmp/x"));
}

#[test]
fn no_tls_listener_no_default_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse_in(dir.path(), "[[listener]]\naddr = \"127.0.0.1:80\"\ntls = false\n").unwrap();
    assert!(cfg.certificates.is_empty());
}

#[test]
fn unknown_key_with_line() {
    let e = err("access_log = true\n\n[[site]]\nbuiltin = true\n  rooot = \"/x\"\n");
    assert_eq!(e.position(), Some((5, 3)));
    let s = e.to_string();
    assert!(s.starts_with("sluice.toml:5:3: unknown field `rooot`"), "{s}");
    assert!(s.contains("expected one of"), "{s}");
}

#[test]
fn bad_value_type_with_line() {
    let e = err("[limits]\nmax_concurrent_streams = \"many\"\n");
    assert_eq!(e.position(), Some((2, 26)));
    assert!(e.message().contains("invalid type"), "{e}");
    let e = err("[limits]\nmax_concurrent_streams = -1\n");
    assert_eq!(e.position(), Some((2, 26)));
    let e = err("access_log = 1\n");
    assert_eq!(e.position(), Some((1, 14)));
    let e = err("x = \n");
    assert_eq!(e.position().map(|p| p.0), Some(1));
    assert!(!e.to_string().contains('\n'), "{e}");
}

#[test]
fn missing_root_with_line() {
    let e = err("[[site]]\nhosts = [\"a.test\"]\nroot = \"does-not-exist\"\n");
    assert_eq!(e.position(), Some((3, 8)));
    assert!(e.message().contains("does-not-exist"), "{e}");
}

#[test]
fn semantic_errors_point_at_the_key() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        ("listener = []\n", (1, 12), "at least one"),
        ("[[listener]]\naddr = \"localhost\"\n", (2, 8), "not an address"),
        ("[[listener]]\naddr = \"[::]:1\"\n[[listener]]\naddr = \"[::]:1\"\n", (4, 8), "twice"),
        ("[limits]\nmax_concurrent_streams = 0\n", (2, 26), "between 1 and"),
        ("[limits]\n\nheader_table_size = 65537\n", (3, 21), "between 0 and 65536"),
        ("[timeouts]\nidle_secs = 0\n", (2, 13), "idle_secs"),
        ("[[site]]\nbuiltin = true\n[[site]]\nbuiltin = true\n", (3, 1), "second default site"),
        ("[[site]]\nhosts = [\"a.test\"]\nbuiltin = true\n[[site]]\nhosts = [\"b.test\", \"A.test\"]\nbuiltin = true\n", (5, 20), "line 1"),
        ("[[site]]\nhosts = []\nbuiltin = true\n", (2, 9), "empty"),
        ("[[site]]\nhosts = [\"a.test:80\"]\nbuiltin = true\n", (2, 10), "port"),
        ("[[site]]\nhosts = [\"*.a.test\"]\nbuiltin = true\n", (2, 10), "wildcards"),
        ("[[site]]\nhosts = [\"[::1]\", \"0:0::1\"]\nbuiltin = true\n", (2, 19), "already served"),
        ("[[site]]\nhosts = [\"a.test\"]\n", (1, 1), "needs `root"),
        ("[[certificate]]\ncert = \"nope.pem\"\nkey = \"nope.key\"\n", (2, 8), "cannot read certificate"),
    ];
    for (text, pos, needle) in cases {
        let e = err(text);
        assert_eq!(e.position(), Some(*pos), "{text:?}: {e}");
        assert!(e.message().contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn certificate_origins_are_checked_against_names_and_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let (c, k) = sluice_tls::certs::generate_self_signed(&["a.test", "*.b.test"]).unwrap();
    fs::write(dir.path().join("c.pem"), c).unwrap();
    fs::write(dir.path().join("k.pem"), k).unwrap();
    let head =
        "[[listener]]\naddr = \"127.0.0.1:8443\"\ntls = true\n\n[[certificate]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n";
    let with = |o: &str| parse_in(dir.path(), &format!("{head}origins = {o}\n"));
    assert_eq!(with("\"from-certificate\"").unwrap().certificates[0].origins, Some(OriginSpec::FromCertificate));
    let ok = with("[\"https://a.test:8443\", \"https://x.b.test:8443\"]").unwrap();
    assert_eq!(
        ok.certificates[0].origins,
        Some(OriginSpec::List(vec![("a.test".into(), 8443), ("x.b.test".into(), 8443)]))
    );
    // Not on the certificate: refused at start-up, naming the origin, at its position.
    let e = with("[\"https://a.test:8443\", \"https://c.test:8443\"]").unwrap_err();
    assert_eq!(e.position(), Some((8, 11)), "{e}");
    assert!(e.message().contains("`https://c.test:8443` is not covered by certificate"), "{e}");
    assert!(e.message().contains("a.test, *.b.test"), "{e}");
    // A wildcard covers one label only (RFC 6125 §6.4.3).
    assert!(with("[\"https://x.y.b.test:8443\"]").is_err());
    // No TLS listener on that port (443 when the origin names none).
    let e = with("[\"https://a.test\"]").unwrap_err();
    assert!(e.message().contains("no TLS listener on port 443"), "{e}");
    for bad in ["\"all\"", "[\"http://a.test:8443\"]", "[\"https://a.test:8443/x\"]", "[\"https://a.test:0\"]"] {
        assert!(with(bad).is_err(), "{bad}");
    }
    assert_eq!(parse_origin("https://[::1]:8443"), Ok(("::1".into(), 8443)));
    assert_eq!(parse_origin("https://A.Test"), Ok(("a.test".into(), 443)));
}

#[test]
fn key_mismatch_points_at_key() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _) = sluice_tls::certs::generate_self_signed(&["a.test"]).unwrap();
    let (_, k) = sluice_tls::certs::generate_self_signed(&["a.test"]).unwrap();
    fs::write(dir.path().join("c.pem"), c).unwrap();
    fs::write(dir.path().join("k.pem"), k).unwrap();
    fs::write(dir.path().join("junk.pem"), "nothing here").unwrap();
    let e = parse_in(dir.path(), "[[certificate]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n").unwrap_err();
    assert_eq!(e.position(), Some((3, 7)), "{e}");
    assert!(e.message().contains("does not match"), "{e}");
    let e = parse_in(dir.path(), "[[certificate]]\ncert = \"junk.pem\"\nkey = \"k.pem\"\n").unwrap_err();
    assert_eq!(e.position(), Some((2, 8)), "{e}");
}

#[test]
fn load_names_the_file_and_resolves_relative_paths() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("www")).unwrap();
    let p = dir.path().join("s.toml");
    fs::write(&p, "[[site]]\nroot = \"www\"\n").unwrap();
    let cfg = load(&p).unwrap();
    assert!(matches!(&cfg.sites[0].routes[0].handler, RouteHandler::Root(r) if *r == dir.path().join("www")));
    fs::write(&p, "[[site]]\nroot = \"nope\"\n").unwrap();
    let e = load(&p).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:2:8: root directory", p.display())), "{e}");
    let e = load(&dir.path().join("missing.toml")).unwrap_err().to_string();
    assert!(e.contains("missing.toml: cannot read"), "{e}");
}

#[test]
fn tcp_section() {
    let dir = tempfile::tempdir().unwrap();
    let d = parse_in(dir.path(), "").unwrap().tcp;
    assert!(d.limit_inflight && d.notsent_lowat == 16_384 && d.congestion.as_deref() == Some("bbr"));
    assert!(d.batch_reads);
    let q = parse_in(dir.path(), "").unwrap().quic;
    assert!(q.enabled && q.congestion == QuicCongestion::Bbr && q.stream_window == 16 << 20);
    assert!(q.limit_inflight);
    let q = parse_in(
        dir.path(),
        "[quic]\nenabled = false\ncongestion = \"cubic\"\nsocket_buffer = 1048576\nlimit_inflight = false\n",
    )
    .unwrap()
    .quic;
    assert!(!q.enabled && q.congestion == QuicCongestion::Cubic && q.socket_buffer == 1 << 20);
    assert!(!q.limit_inflight);
    let e = parse_in(dir.path(), "[quic]\ncongestion = \"vegas\"\n").unwrap_err();
    assert_eq!(e.position(), Some((2, 14)), "{e}");
    assert!(e.message().contains("`vegas`"), "{e}");
    let e = parse_in(dir.path(), "[quic]\nstream_window = 100\n").unwrap_err();
    assert!(e.message().contains("stream_window"), "{e}");
    let t = parse_in(
        dir.path(),
        "[tcp]\ncongestion = \"\"\nnotsent_lowat = 0\nlimit_inflight = false\nbatch_reads = false\n",
    )
    .unwrap()
    .tcp;
    assert!(!t.limit_inflight && t.notsent_lowat == 0 && t.congestion.is_none() && !t.batch_reads);
    let e = parse_in(dir.path(), "[tcp]\nlimit_inflight = \"yes\"\n").unwrap_err();
    assert_eq!(e.position().map(|p| p.0), Some(2), "{e}");
    let e = parse_in(dir.path(), "[tcp]\ncongestion = \"no such\"\n").unwrap_err();
    assert!(e.message().contains("not a congestion control name"), "{e}");
}

#[test]
fn example_config_loads() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sluice.example.toml");
    let cfg = load(&p).unwrap_or_else(|e| panic!("{e}"));
    assert!(!cfg.listeners.is_empty());
    assert!(!cfg.sites.is_empty());
}

#[test]
fn line_col_counts_chars() {
    assert_eq!(line_col("ab\ncé\nx", 0), (1, 1));
    assert_eq!(line_col("ab\ncé\nx", 3), (2, 1));
    assert_eq!(line_col("ab\ncé\nx", 7), (3, 1));
    assert_eq!(line_col("ab\ncé\nx", 5), (2, 2), "inside a multi-byte char");
    assert_eq!(line_col("ab", 99), (1, 3));
}

#[test]
fn routes_longest_prefix_and_header_rules() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["www", "docs", "docs-v2"] {
        fs::create_dir(dir.path().join(d)).unwrap();
    }
    let text = r#"
[[site]]
hosts = ["a.test"]
root = "www"
headers = { set = { "x-frame-options" = "DENY" } }

[[site.route]]
path = "/docs/"
root = "docs"
headers = { set = { "Cache-Control" = "max-age=60" }, add = { "x-tag" = "docs" }, remove = ["server"] }

[[site.route]]
path = "/docs/v2/"
root = "docs-v2"
early_hints = ["</v2.css>; rel=preload; as=style"]

[[site.route]]
path = "/speed"
speedtest = true

[[site]]
builtin = true
"#;
    let cfg = parse_in(dir.path(), text).unwrap();
    let route = |host: &str, path: &str| cfg.route(host, path).map(|r| r.path.as_str());
    assert_eq!(route("a.test", "/docs/v2/x.html"), Some("/docs/v2/"));
    assert_eq!(route("a.test:8443", "/docs/v1/x.html"), Some("/docs/"));
    assert_eq!(route("a.test", "/docs"), Some("/"), "`/docs/` does not match `/docs`");
    assert_eq!(route("a.test", "/speed/__down"), Some("/speed"));
    assert_eq!(route("a.test", "/speedy"), Some("/"));
    assert_eq!(route("a.test", "/"), Some("/"));
    // Another host: the default site's single route.
    let other = cfg.route("b.test", "/docs/x").unwrap();
    assert_eq!((other.path.as_str(), &other.handler), ("/", &RouteHandler::Builtin));
    let docs = cfg.route("a.test", "/docs/a").unwrap();
    assert_eq!(docs.handler, RouteHandler::Root(dir.path().join("docs")));
    let v2 = cfg.route("a.test", "/docs/v2/a").unwrap();
    assert_eq!(v2.early_hints, vec![http::HeaderValue::from_static("</v2.css>; rel=preload; as=style")]);
    assert!(v2.headers.is_empty());
    let mut h = http::HeaderMap::new();
    h.insert("server", http::HeaderValue::from_static("sluice"));
    h.insert("cache-control", http::HeaderValue::from_static("no-cache"));
    h.insert("x-tag", http::HeaderValue::from_static("file"));
    docs.headers.apply(&mut h);
    assert!(h.get("server").is_none());
    assert_eq!(h.get("cache-control").unwrap(), "max-age=60");
    let tags: Vec<_> = h.get_all("x-tag").iter().collect();
    assert_eq!(tags, ["file", "docs"]);
    let root = cfg.route("a.test", "/x").unwrap();
    let expect = HeaderRules {
        set: vec![(http::HeaderName::from_static("x-frame-options"), http::HeaderValue::from_static("DENY"))],
        ..HeaderRules::default()
    };
    assert_eq!(root.headers, expect);
}

#[test]
fn old_site_forms_are_a_single_route() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("www")).unwrap();
    let cfg =
        parse_in(dir.path(), "[[site]]\nhosts = [\"a.test\"]\nroot = \"www\"\n[[site]]\nbuiltin = true\n").unwrap();
    assert_eq!(cfg.sites[0].routes.len(), 1);
    assert_eq!(cfg.sites[0].routes[0].path, "/");
    assert_eq!(cfg.sites[0].routes[0].handler, RouteHandler::Root(dir.path().join("www")));
    assert!(cfg.sites[0].routes[0].headers.is_empty() && cfg.sites[0].routes[0].early_hints.is_empty());
    assert_eq!(cfg.sites[1].routes[0].handler, RouteHandler::Builtin);
}

#[test]
fn route_errors_point_at_the_key() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        ("[[site]]\nbuiltin = true\n[[site.route]]\npath = \"api\"\nbuiltin = true\n", (4, 8), "must start with"),
        ("[[site]]\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\n", (6, 8), "line 2"),
        ("[[site]]\nbuiltin = true\n[[site.route]]\npath = \"/\"\nbuiltin = true\n", (1, 1), "line 3"),
        ("[[site]]\n[[site.route]]\npath = \"/a/\"\n", (2, 1), "needs `root"),
        ("[[site]]\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\nspeedtest = true\n", (2, 1), "not several"),
        ("[[site]]\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\nheaders = { set = { \"content-length\" = \"1\" } }\n", (5, 11), "managed by the server"),
        ("[[site]]\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\nearly_hints = [\"/a.css\"]\n", (5, 16), "Link value"),
        ("[[site]]\nhosts = [\"a.test\"]\nheaders = { set = { \"a\" = \"b\" } }\n[[site.route]]\npath = \"/a/\"\nbuiltin = true\n", (3, 11), "put them in a route"),
        ("[[site]]\nhosts = [\"a.test\"]\n", (1, 1), "needs `root"),
    ];
    for (text, pos, want) in cases {
        let e = err(text);
        assert_eq!(e.position(), Some(*pos), "{text}: {e}");
        assert!(e.message().contains(want), "{text}: {e}");
    }
}

#[test]
fn pid_file_is_relative_to_the_file_and_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse_in(dir.path(), "pid_file = \"run/sluice.pid\"\n").unwrap();
    assert_eq!(cfg.pid_file, Some(dir.path().join("run/sluice.pid")));
    assert_eq!(parse_in(dir.path(), "").unwrap().pid_file, None);
    let e = err("pid_file = \"\"\n");
    assert_eq!(e.to_string(), "sluice.toml:1:12: `pid_file` must not be empty");
}

/// A reload keeps an upstream only when every setting is the same.
#[test]
fn an_upstream_is_the_same_only_when_every_setting_is() {
    let dir = tempfile::tempdir().unwrap();
    let up = |more: &str| {
        let text = format!("[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9000\"]\n{more}\n");
        parse_in(dir.path(), &text).unwrap().upstreams.remove(0)
    };
    assert!(up("").same_as(&up("")));
    assert!(!up("").same_as(&up("retries = 0")));
    assert!(!up("").same_as(&up("[upstream.pool]\nmax_idle = 3")));
    assert!(!up("").same_as(&up("[upstream.health]\npath = \"/h\"")));
}

#[test]
fn access_log_formats() {
    let dir = tempfile::tempdir().unwrap();
    let fmt = |v: &str| parse_in(dir.path(), &format!("access_log = {v}\n")).map(|c| c.access_log);
    assert_eq!(fmt("true").unwrap(), AccessLogFormat::Text);
    assert_eq!(fmt("false").unwrap(), AccessLogFormat::Off);
    assert_eq!(fmt("\"json\"").unwrap(), AccessLogFormat::Json);
    assert_eq!(fmt("\"text\"").unwrap(), AccessLogFormat::Text);
    let e = fmt("\"xml\"").unwrap_err().to_string();
    assert!(e.starts_with("sluice.toml:1:14:") && e.contains("\"json\""), "{e}");
}

#[test]
fn acme_orders_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let listeners =
        "[[listener]]\naddr = \"127.0.0.1:8443\"\ntls = true\n[[listener]]\naddr = \"127.0.0.1:8080\"\ntls = false\n";
    // By default: a site of public names with no certificate; never a reserved or local one.
    let text = format!(
        "{listeners}[[site]]\nhosts = [\"example.com\", \"www.example.com\"]\nbuiltin = true\n\
         [[site]]\nhosts = [\"app.test\"]\nbuiltin = true\n\
         [[site]]\nhosts = [\"manual.example.org\"]\nbuiltin = true\ntls = \"manual\"\n"
    );
    let c = parse_in(dir.path(), &text).unwrap();
    let a = c.acme.expect("ACME for example.com");
    assert_eq!(a.orders, vec![vec!["example.com".to_string(), "www.example.com".to_string()]]);
    assert_eq!(a.directory, acme::LETSENCRYPT);
    assert_eq!((a.challenge, a.key_type, a.https_port), (acme::Challenge::TlsAlpn01, acme::KeyType::EcdsaP256, 8443));
    // `[acme] enabled = false` turns the default off.
    let off = parse_in(dir.path(), &format!("{text}[acme]\nenabled = false\n")).unwrap();
    assert!(off.acme.is_none());
    // Explicit: a reserved name is the operator's call, localhost and addresses are not.
    let text = format!(
        "{listeners}[[site]]\nhosts = [\"app.internal\"]\nbuiltin = true\ntls = \"acme\"\n\
         [acme]\ndirectory = \"letsencrypt-staging\"\nemail = \"ops@example.com\"\nchallenge = \"http-01\"\n\
         key_type = \"ecdsa-p384\"\neab_kid = \"kid\"\neab_hmac_key = \"c2VjcmV0\"\n"
    );
    let a = parse_in(dir.path(), &text).unwrap().acme.unwrap();
    assert_eq!(a.orders, vec![vec!["app.internal".to_string()]]);
    assert_eq!(a.directory, acme::LETSENCRYPT_STAGING);
    assert_eq!(a.eab, Some(("kid".to_string(), b"secret".to_vec())));
    assert_eq!((a.challenge, a.key_type), (acme::Challenge::Http01, acme::KeyType::EcdsaP384));
    let cases = [
        ("[[site]]\nhosts = [\"localhost\"]\nbuiltin = true\ntls = \"acme\"\n", 4, "does not certify `localhost`"),
        ("[[site]]\nhosts = [\"10.0.0.1\"]\nbuiltin = true\ntls = \"acme\"\n", 4, "does not certify `10.0.0.1`"),
        ("[[site]]\nbuiltin = true\ntls = \"acme\"\n", 3, "needs `hosts`"),
        ("[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\ntls = \"yes\"\n", 4, "not \"yes\""),
        (
            "[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\ndirectory = \"http://ca/dir\"\n",
            5,
            "https:// URL",
        ),
        ("[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\neab_kid = \"k\"\n", 5, "needs both"),
        (
            "[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\nchallenge = \"dns-01\"\n",
            5,
            "not \"dns-01\"",
        ),
        ("[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\nkey_type = \"rsa\"\n", 5, "not \"rsa\""),
        ("[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\ncheck_secs = 0\n", 5, "between 1 and 86400"),
    ];
    for (tail, line, msg) in cases {
        let e = err(&format!("{listeners}{tail}"));
        assert_eq!(e.pos.map(|p| p.0), Some(line + 6), "{tail}: {e}");
        assert!(e.msg.contains(msg), "{tail}: {e}");
    }
    // HTTP-01 without a cleartext listener.
    let e = err("[[listener]]\naddr = \"127.0.0.1:8443\"\ntls = true\n[[site]]\nhosts = [\"a.example.com\"]\nbuiltin = true\n[acme]\nchallenge = \"http-01\"\n");
    assert!(e.msg.contains("needs a cleartext"), "{e}");
}

#[test]
fn quic_lb_and_connect_sections() {
    let dir = tempfile::tempdir().unwrap();
    let c =
        parse_in(dir.path(), "[quic]\nserver_id = \"0A1b\"\nlb_key = \"8f95f09245765f80256934e50c66207f\"\n").unwrap();
    let (lb, sid) = c.quic.lb.unwrap();
    assert_eq!((sid, lb.config_id, lb.nonce_len, lb.key.is_some()), (vec![0x0a, 0x1b], 0, 8, true));
    for (text, line) in [
        ("[quic]\nserver_id = \"xyz\"\n", 2),
        ("[quic]\nserver_id = \"0a\"\nlb_key = \"00\"\n", 3),
        ("[quic]\nlb_key = \"8f95f09245765f80256934e50c66207f\"\n", 2),
        ("[quic]\nserver_id = \"0a\"\nlb_nonce_len = 19\n", 3),
        ("[quic]\nserver_id = \"0a\"\nlb_config_id = 7\n", 3),
        ("[connect]\ncredentials = \"users\"\n", 2),
        ("[connect]\nallow = [\"example.com\"]\n", 2),
    ] {
        let e = err(text);
        assert_eq!(e.position().map(|p| p.0), Some(line), "{text}: {e}");
    }
    let c = parse_in(dir.path(), "[connect]\nallow = [\"10.0.0.0/8:*\"]\nudp = false\n").unwrap();
    assert!(!c.udp_tunnels() && c.connect.is_some());
    assert!(parse_in(dir.path(), "").unwrap().connect.is_none());
}
