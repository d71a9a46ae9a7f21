//! The servers under test and their configurations: Sluice, nginx as the write-up ran it
//! (128k request body buffer) and with 512k, h2o and Caddy. Pure: configuration text,
//! binaries, command lines; starting them in the server namespace is `stage`'s job.
//!
//! Besides the defaults, Sluice runs with each of its other receive-window policies
//! (`sluice-fixed64k`, `sluice-fixed512k`, `sluice-writeup`, `sluice-quiche`, `sluice-hyper`: `[flow] policy`), for
//! "HTTP/2 with fixed windows vs autotuned" side by side; a Sluice binary older than `[flow]`
//! refuses those configurations and the variant is skipped with its error.
//!
//! Every server listens with TLS on the server namespace's address with one self-signed
//! certificate. The peers are reverse proxies: `POST /up` goes to one upstream sink, a second
//! Sluice instance serving cleartext HTTP/1.1 on 127.0.0.1 inside the server namespace, whose
//! `POST /__up` reads the whole body and answers `{"bytes":N,"seconds":S,"mbps":M}`. Sluice
//! itself answers `POST /__up` on its TLS listener directly.

use std::env;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use super::common::write_private;

/// Port of the upstream sink on 127.0.0.1 inside the server namespace.
pub const SINK_PORT: u16 = 9000;

mod kind;
mod peers;

pub use kind::*;
pub use peers::{
    caddy_config, caddy_proxy, caddy_static, fill, h2o_config, h2o_proxy, h2o_static, haproxy_proxy, nginx_config,
    nginx_proxy, nginx_static,
};

/// Finds `name` on `PATH` or in the sbin directories (nginx lives in /usr/sbin).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Whether `p` is an executable file.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The Sluice binary: `--sluice`, else `$SLUICE_BIN`, else `sluice` next to this executable
/// (target/release/sluice beside target/release/sluice-lab), else the parent directory of
/// that (tests run from target/release/deps).
pub fn find_sluice(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!("--sluice {}: not an executable file", p.display()))
        };
    }
    if let Some(p) = env::var_os("SLUICE_BIN") {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!("SLUICE_BIN={}: not an executable file", p.display()))
        };
    }
    let exe = env::current_exe().map_err(|e| format!("locating sluice-lab: {e}"))?;
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join("sluice");
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        dir = d.parent();
    }
    Err(format!(
        "no sluice binary next to {} (build it: cargo build --release -p sluice, or pass --sluice PATH)",
        exe.display()
    ))
}

/// Quotes `s` as a TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Refuses paths the configuration files cannot carry safely (control characters, `;`, `{`,
/// `}` and `$`, which nginx and the Caddyfile treat specially even inside quotes).
pub fn check_config_path(p: &Path) -> Result<String, String> {
    let s = p.to_str().ok_or_else(|| format!("{}: not UTF-8", p.display()))?;
    if s.chars().any(|c| c.is_control() || matches!(c, ';' | '{' | '}' | '$')) {
        return Err(format!("{s}: contains characters the server configurations cannot carry (control, ; {{ }} $)"));
    }
    Ok(s.to_string())
}

/// Where one server's files live and what it listens on.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Directory for this server's configuration, logs and state.
    pub dir: PathBuf,
    /// TLS listen address.
    pub listen: SocketAddr,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM, PKCS#8).
    pub key: PathBuf,
    /// Upstream sink (cleartext HTTP/1.1).
    pub sink: SocketAddr,
}

impl Setup {
    /// The usual setup of `kind` under `work` on `addr`.
    pub fn new(kind: ServerKind, work: &Path, addr: Ipv4Addr, cert: &Path, key: &Path) -> Self {
        Self {
            dir: work.join(kind.name()),
            listen: SocketAddr::V4(SocketAddrV4::new(addr, kind.port())),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            sink: sink_addr(),
        }
    }

    fn paths(&self) -> Result<(String, String, String), String> {
        Ok((check_config_path(&self.dir)?, check_config_path(&self.cert)?, check_config_path(&self.key)?))
    }
}

/// The sink's address inside the server namespace.
pub fn sink_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, SINK_PORT))
}

/// The path prefix Sluice as a proxy forwards to the sink (`/p/__up`): Sluice does not rewrite
/// paths, so the sink answers `__up` under a speedtest route of that prefix.
pub const PROXY_PREFIX: &str = "/p/";

/// Sluice's configuration: one listener (TLS with our certificate, or cleartext for the sink),
/// the built-in site, the speed test on (`POST /__up`), no access log; `flow` sets the
/// receive-window policy (default: Sluice's own default). The sink (`tls = false`) also answers
/// the speed test under [`PROXY_PREFIX`] (`/p/__up`), the path Sluice as a proxy forwards.
pub fn sluice_config(s: &Setup, tls: bool, flow: Option<Flow>) -> Result<String, String> {
    let (dir, cert, key) = s.paths()?;
    let route = if tls {
        String::new()
    } else {
        format!(
            "# Sluice as a proxy forwards {PROXY_PREFIX}__up unchanged: a speedtest route answers it.\n\
             [[site.route]]\npath = {}\nspeedtest = true\n\n",
            toml_str(PROXY_PREFIX)
        )
    };
    Ok(format!(
        "# Generated by sluice-lab: {role}.\n\
         data_dir = {data}\n\
         access_log = false\n\n\
         [[listener]]\naddr = {addr}\ntls = {tls}\n\n\
         [[certificate]]\ncert = {cert}\nkey = {key}\n\n\
         [[site]]\nbuiltin = true\n\n\
         {route}\
         # POST /__up reads the whole body and answers {{\"bytes\",\"seconds\",\"mbps\"}}.\n\
         [speedtest]\nenabled = true\n{flow}",
        flow = flow.map(Flow::table).unwrap_or_default(),
        role = if tls { "the server under test" } else { "the upstream sink of the proxies" },
        data = toml_str(&format!("{dir}/data")),
        addr = toml_str(&s.listen.to_string()),
        cert = toml_str(&cert),
        key = toml_str(&key),
    ))
}

/// Sluice as a reverse proxy to the upload sink (`sluice-proxy`): its defaults, one
/// `[[upstream]]` (HTTP/1.1 to the sink, Sluice's keep-alive pool) and the route
/// [`PROXY_PREFIX`] proxied to it; the rest of the site is the built-in one.
pub fn sluice_proxy_config(s: &Setup) -> Result<String, String> {
    let (dir, cert, key) = s.paths()?;
    Ok(format!(
        "# Generated by sluice-lab: Sluice as a reverse proxy to the upload sink.\n\
         data_dir = {data}\n\
         access_log = false\n\n\
         [[listener]]\naddr = {addr}\ntls = true\n\n\
         [[certificate]]\ncert = {cert}\nkey = {key}\n\n\
         [[upstream]]\nname = \"sink\"\nservers = [{sink}]\n\n\
         [[site]]\nbuiltin = true\n\n\
         # {prefix}__up goes to the sink unchanged (Sluice does not rewrite paths).\n\
         [[site.route]]\npath = {prefix_q}\nproxy = \"sink\"\n",
        data = toml_str(&format!("{dir}/data")),
        addr = toml_str(&s.listen.to_string()),
        cert = toml_str(&cert),
        key = toml_str(&key),
        sink = toml_str(&s.sink.to_string()),
        prefix = PROXY_PREFIX,
        prefix_q = toml_str(PROXY_PREFIX),
    ))
}

/// How to start a server: the program's arguments, its environment and its config file.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Configuration file name (inside [`Setup::dir`]) and text.
    pub config: (String, String),
}

/// The launch of `kind` with `setup`.
pub fn launch(kind: ServerKind, s: &Setup) -> Result<Launch, String> {
    let dir = check_config_path(&s.dir)?;
    let (name, text) = match kind {
        ServerKind::Sluice => ("sluice.toml", sluice_config(s, true, None)?),
        ServerKind::SluiceFlow(f) => ("sluice.toml", sluice_config(s, true, Some(f))?),
        ServerKind::Nginx => ("nginx.conf", nginx_config(s, 128)?),
        ServerKind::Nginx512 => ("nginx.conf", nginx_config(s, 512)?),
        ServerKind::H2o => ("h2o.conf", h2o_config(s)?),
        ServerKind::Caddy => ("Caddyfile", caddy_config(s)?),
        ServerKind::NginxTuned | ServerKind::H2oTuned | ServerKind::CaddyTuned => {
            return Err(format!("`{}` is only for the priority experiment", kind.name()))
        }
        ServerKind::SluiceProxy => ("sluice.toml", sluice_proxy_config(s)?),
        ServerKind::SluiceH3 | ServerKind::CaddyH3 => {
            return Err(format!("`{}` is only for the pageload experiment", kind.name()))
        }
        ServerKind::SluiceNoLearn => return Err(format!("`{}` is only for the earlyhints experiment", kind.name())),
        ServerKind::Haproxy => return Err(format!("`{}` is only for the proxymem experiment", kind.name())),
    };
    let (args, env) = args_env(kind, &dir, name);
    Ok(Launch { args, env, config: (name.into(), text) })
}

/// Command-line arguments and environment of `kind` with its configuration `dir/name`.
pub(crate) fn args_env(kind: ServerKind, dir: &str, name: &str) -> (Vec<String>, Vec<(String, String)>) {
    let conf = format!("{dir}/{name}");
    match kind {
        ServerKind::Sluice
        | ServerKind::SluiceFlow(_)
        | ServerKind::SluiceH3
        | ServerKind::SluiceProxy
        | ServerKind::SluiceNoLearn => (vec!["serve".into(), "--config".into(), conf], vec![]),
        // Foreground (`-db`), no master-worker process.
        ServerKind::Haproxy => (vec!["-db".into(), "-f".into(), conf], vec![]),
        ServerKind::Nginx | ServerKind::Nginx512 | ServerKind::NginxTuned => {
            (vec!["-p".into(), format!("{dir}/"), "-e".into(), format!("{dir}/error.log"), "-c".into(), conf], vec![])
        }
        ServerKind::H2o | ServerKind::H2oTuned => (vec!["-c".into(), conf], vec![]),
        ServerKind::Caddy | ServerKind::CaddyTuned | ServerKind::CaddyH3 => (
            vec!["run".into(), "--config".into(), conf, "--adapter".into(), "caddyfile".into()],
            vec![
                ("HOME".into(), dir.to_string()),
                ("XDG_DATA_HOME".into(), format!("{dir}/data")),
                ("XDG_CONFIG_HOME".into(), format!("{dir}/config")),
            ],
        ),
    }
}

/// The launch of `kind` serving the static files of `docroot` over TLS (the `priority`
/// experiment): Sluice `[[site]] root`, nginx `root`, h2o `file.dir`, Caddy `file_server`.
/// The tuned variants have the same configuration as their base; their tuning is the server
/// namespace's sysctls. `compress`: responses compressed as an operator switches it on (Sluice
/// `[compression] enabled`, nginx `gzip on` for the text types, h2o `compress: ON`, Caddy
/// `encode zstd gzip`); without it none of them compresses.
pub fn static_launch(kind: ServerKind, s: &Setup, docroot: &Path, compress: bool) -> Result<Launch, String> {
    let (dir, cert, key) = s.paths()?;
    let root = check_config_path(docroot)?;
    let (name, text) = match kind {
        ServerKind::SluiceProxy | ServerKind::SluiceNoLearn | ServerKind::Haproxy => {
            return Err(format!("`{}` is a reverse proxy: it serves no static files", kind.name()))
        }
        ServerKind::Sluice | ServerKind::SluiceFlow(_) | ServerKind::SluiceH3 => (
            "sluice.toml",
            format!(
                "# Generated by sluice-lab: static files for the priority experiment.\n\
                 data_dir = {data}\n\
                 access_log = false\n\n\
                 [[listener]]\naddr = {addr}\ntls = true\n\n\
                 [[certificate]]\ncert = {cert}\nkey = {key}\n\n\
                 [[site]]\nroot = {root}\n\n\
                 [compression]\nenabled = {compress}\n{flow}",
                data = toml_str(&format!("{dir}/data")),
                addr = toml_str(&s.listen.to_string()),
                cert = toml_str(&cert),
                key = toml_str(&key),
                root = toml_str(&root),
                flow = match kind {
                    ServerKind::SluiceFlow(f) => f.table(),
                    _ => String::new(),
                },
            ),
        ),
        ServerKind::Nginx | ServerKind::Nginx512 | ServerKind::NginxTuned => {
            ("nginx.conf", nginx_static(s, &root, compress)?)
        }
        ServerKind::H2o | ServerKind::H2oTuned => ("h2o.conf", h2o_static(s, &root, compress)?),
        ServerKind::Caddy | ServerKind::CaddyTuned | ServerKind::CaddyH3 => {
            ("Caddyfile", caddy_static(s, &root, false, compress)?)
        }
    };
    let (args, env) = args_env(kind, &dir, name);
    Ok(Launch { args, env, config: (name.into(), text) })
}

/// The launch of `kind` serving the static files of `docroot` over TLS and over HTTP/3 (QUIC on
/// UDP, the same port as the TLS listener): the `download` experiment. Sluice's `[quic]` is on by
/// default; it is written out (`enabled = true`) so that a Sluice binary without HTTP/3 refuses
/// the configuration at start-up instead of silently serving TCP only. Caddy (2.6: quic-go)
/// gets `protocols h1 h2 h3` in its `servers` global option; its UDP listener comes with the
/// TLS one. The other peers have no HTTP/3 in their Debian packages (nginx 1.22: `http_v3`
/// came with 1.25; h2o 2.2: QUIC came with 2.3), and are refused.
pub fn static_launch_h3(kind: ServerKind, s: &Setup, docroot: &Path, compress: bool) -> Result<Launch, String> {
    let mut l = static_launch(kind, s, docroot, compress)?;
    match kind {
        ServerKind::Sluice | ServerKind::SluiceFlow(_) | ServerKind::SluiceH3 => {
            // HTTP/3 on UDP, the TLS listener's port (inside a variant's own [quic] table, if any).
            if l.config.1.contains("\n[quic]\n") {
                l.config.1 = l.config.1.replacen("\n[quic]\n", "\n[quic]\nenabled = true\n", 1);
            } else {
                l.config.1.push_str("\n# HTTP/3 on UDP, the TLS listener's port.\n[quic]\nenabled = true\n");
            }
        }
        ServerKind::Caddy | ServerKind::CaddyTuned | ServerKind::CaddyH3 => {
            l.config.1 = caddy_static(s, &check_config_path(docroot)?, true, compress)?;
        }
        _ => return Err(format!("`{}` has no HTTP/3 in its Debian package", kind.name())),
    }
    Ok(l)
}

/// The launch of `kind` as a reverse proxy of every path to the cleartext HTTP/1.1 `origin`
/// over TLS on `s.listen` (the `earlyhints` and `proxymem` experiments): Sluice (`sluice`,
/// `sluice-proxy`: learned early hints on, as by default; `sluice-nolearn`: `early_hints_learn =
/// false`; the access log on, for its `hints=` marks), nginx (`proxy_pass` with its default
/// `proxy_buffering on`, HTTP/1.1 keep-alive upstream), h2o (`proxy.reverse.url`), Caddy
/// (`reverse_proxy`) and HAProxy (`mode http`, `alpn h2,http/1.1`). HAProxy reads certificate and
/// key from one file: `s.cert` must be that combined PEM (`s.key` is unused for it).
pub fn proxy_launch(kind: ServerKind, s: &Setup, origin: SocketAddr) -> Result<Launch, String> {
    let (dir, cert, key) = s.paths()?;
    let (name, text) = match kind {
        ServerKind::Sluice | ServerKind::SluiceProxy | ServerKind::SluiceNoLearn => (
            "sluice.toml",
            format!(
                "# Generated by sluice-lab: Sluice as a reverse proxy to the origin.\n\
                 data_dir = {data}\n\
                 # The access log marks requests that got a 103 (hints=learned, upstream, ...).\n\
                 access_log = true\n\n\
                 [[listener]]\naddr = {addr}\ntls = true\n\n\
                 [[certificate]]\ncert = {cert}\nkey = {key}\n\n\
                 [[upstream]]\nname = \"origin\"\nservers = [{origin}]\nearly_hints_learn = {learn}\n\n\
                 [[site]]\nproxy = \"origin\"\n",
                data = toml_str(&format!("{dir}/data")),
                addr = toml_str(&s.listen.to_string()),
                cert = toml_str(&cert),
                key = toml_str(&key),
                origin = toml_str(&origin.to_string()),
                learn = kind != ServerKind::SluiceNoLearn,
            ),
        ),
        ServerKind::Nginx | ServerKind::Nginx512 | ServerKind::NginxTuned => ("nginx.conf", nginx_proxy(s, origin)?),
        ServerKind::H2o | ServerKind::H2oTuned => ("h2o.conf", h2o_proxy(s, origin)?),
        ServerKind::Caddy | ServerKind::CaddyTuned | ServerKind::CaddyH3 => ("Caddyfile", caddy_proxy(s, origin)?),
        ServerKind::Haproxy => ("haproxy.cfg", haproxy_proxy(s, origin)?),
        ServerKind::SluiceFlow(_) | ServerKind::SluiceH3 => {
            return Err(format!("`{}` is not a reverse proxy here (list `sluice`)", kind.name()))
        }
    };
    let (args, env) = args_env(kind, &dir, name);
    Ok(Launch { args, env, config: (name.into(), text) })
}

/// A cleartext Sluice on `listen` serving the static files of `docroot` (the `proxymem`
/// experiment's origin, on 127.0.0.1 in the server namespace), with its state under `dir`.
pub fn static_origin_launch(dir: &Path, listen: SocketAddr, docroot: &Path) -> Result<Launch, String> {
    let d = check_config_path(dir)?;
    let root = check_config_path(docroot)?;
    let text = format!(
        "# Generated by sluice-lab: a static origin behind the proxies.\n\
         data_dir = {data}\n\
         access_log = false\n\n\
         [[listener]]\naddr = {addr}\ntls = false\n\n\
         [[site]]\nroot = {root}\n",
        data = toml_str(&format!("{d}/data")),
        addr = toml_str(&listen.to_string()),
        root = toml_str(&root),
    );
    let (args, env) = args_env(ServerKind::Sluice, &d, "sluice.toml");
    Ok(Launch { args, env, config: ("sluice.toml".into(), text) })
}

/// The sink's launch (a cleartext Sluice on 127.0.0.1:[`SINK_PORT`]).
pub fn sink_launch(work: &Path, cert: &Path, key: &Path) -> Result<(Setup, Launch), String> {
    let s =
        Setup { dir: work.join("sink"), listen: sink_addr(), cert: cert.into(), key: key.into(), sink: sink_addr() };
    let dir = check_config_path(&s.dir)?;
    let text = sluice_config(&s, false, None)?;
    let args = vec!["serve".into(), "--config".into(), format!("{dir}/sluice.toml")];
    Ok((s, Launch { args, env: vec![], config: ("sluice.toml".into(), text) }))
}

/// [`self_signed`] for `addr`, written to `dir` as `cert.pem` and `key.pem` (the key readable
/// by its owner only); their paths.
pub fn write_self_signed(dir: &Path, addr: Ipv4Addr) -> Result<(PathBuf, PathBuf), String> {
    let (cert_pem, key_pem) = self_signed(addr)?;
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, cert_pem).map_err(|e| format!("writing {}: {e}", cert.display()))?;
    write_private(&key, &key_pem)?;
    Ok((cert, key))
}

/// A self-signed certificate (ECDSA P-256) for `addr` (and localhost), as PEM (cert, key).
pub fn self_signed(addr: Ipv4Addr) -> Result<(String, String), String> {
    let ck = rcgen::generate_simple_self_signed(vec![addr.to_string(), "localhost".to_string()])
        .map_err(|e| format!("generating the self-signed certificate: {e}"))?;
    Ok((ck.cert.pem(), ck.signing_key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(kind: ServerKind) -> Setup {
        Setup::new(
            kind,
            Path::new("/tmp/lab work"),
            Ipv4Addr::new(10, 77, 0, 2),
            Path::new("/c/cert.pem"),
            Path::new("/c/key.pem"),
        )
    }

    #[test]
    fn server_list_parsing() {
        assert_eq!(ServerKind::parse_list("sluice,nginx").unwrap(), [ServerKind::Sluice, ServerKind::Nginx]);
        assert_eq!(ServerKind::parse_list(" caddy , h2o,").unwrap(), [ServerKind::Caddy, ServerKind::H2o]);
        assert!(ServerKind::parse_list("sluice,apache").unwrap_err().contains("apache"));
        assert!(ServerKind::parse_list("nginx,nginx").unwrap_err().contains("twice"));
        assert!(ServerKind::parse_list(",").is_err());
        let ports: std::collections::HashSet<u16> = ALL.iter().map(|k| k.port()).collect();
        assert_eq!(ports.len(), ALL.len());
        let names: std::collections::HashSet<&str> = ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), ALL.len());
        for k in ALL {
            assert_eq!(ServerKind::parse(k.name()), Ok(k));
        }
        let default = DEFAULT.map(|k| k.name()).join(",");
        assert_eq!(default, "sluice,nginx,nginx512,h2o,caddy");
        assert!(!ports.contains(&SINK_PORT));
    }

    #[test]
    fn sluice_configs() {
        let c = sluice_config(&setup(ServerKind::Sluice), true, None).unwrap();
        assert!(!c.contains("[flow]"), "the default policy is Sluice's own");
        assert!(c.contains("addr = \"10.77.0.2:8443\"\ntls = true"), "{c}");
        assert!(c.contains("cert = \"/c/cert.pem\"") && c.contains("key = \"/c/key.pem\""));
        assert!(c.contains("[speedtest]\nenabled = true"));
        assert!(c.contains("data_dir = \"/tmp/lab work/sluice/data\""));
        let (s, l) = sink_launch(Path::new("/w"), Path::new("/c/cert.pem"), Path::new("/c/key.pem")).unwrap();
        assert!(l.config.1.contains("addr = \"127.0.0.1:9000\"\ntls = false"), "{}", l.config.1);
        assert_eq!(s.listen, sink_addr());
        assert_eq!(l.args, ["serve", "--config", "/w/sink/sluice.toml"]);
        let kind = ServerKind::parse("sluice-fixed64k").unwrap();
        let l = launch(kind, &setup(kind)).unwrap();
        assert!(l.config.1.contains("addr = \"10.77.0.2:8448\"\ntls = true"), "{}", l.config.1);
        assert!(l.config.1.contains("\n[flow]\npolicy = \"fixed\"\n"), "{}", l.config.1);
        assert_eq!((kind.upload_path(), kind.uses_sink(), kind.program()), ("/__up", false, "sluice"));
    }

    #[test]
    fn sluice_as_a_proxy_to_the_sink() {
        let kind = ServerKind::SluiceProxy;
        let l = launch(kind, &setup(kind)).unwrap();
        let c = &l.config.1;
        for needle in [
            "addr = \"10.77.0.2:8463\"\ntls = true",
            "[[upstream]]\nname = \"sink\"\nservers = [\"127.0.0.1:9000\"]\n",
            "[[site.route]]\npath = \"/p/\"\nproxy = \"sink\"\n",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert_eq!(l.args, ["serve", "--config", "/tmp/lab work/sluice-proxy/sluice.toml"]);
        assert_eq!((kind.upload_path(), kind.uses_sink(), kind.program()), ("/p/__up", true, "sluice"));
        assert!(kind.is_sluice() && !ServerKind::Caddy.is_sluice());
        // The path arrives at the sink unchanged, where a speedtest route answers its last segment.
        let (_, sink) = sink_launch(Path::new("/w"), Path::new("/c/cert.pem"), Path::new("/c/key.pem")).unwrap();
        let route = "[[site]]\nbuiltin = true\n\n# Sluice as a proxy forwards /p/__up unchanged: a speedtest route \
                     answers it.\n[[site.route]]\npath = \"/p/\"\nspeedtest = true\n\n";
        assert!(sink.config.1.contains(route), "{}", sink.config.1);
        // The server under test has no such route.
        assert!(!sluice_config(&setup(ServerKind::Sluice), true, None).unwrap().contains("[[site.route]]"));
        // The other proxies are for their own experiments.
        assert!(launch(ServerKind::SluiceNoLearn, &setup(ServerKind::SluiceNoLearn))
            .unwrap_err()
            .contains("earlyhints"));
        assert!(launch(ServerKind::Haproxy, &setup(ServerKind::Haproxy)).unwrap_err().contains("proxymem"));
        let root = Path::new("/d");
        assert!(static_launch(kind, &setup(kind), root, false).unwrap_err().contains("reverse proxy"));
    }

    #[test]
    fn nginx_config_as_the_write_up_ran_it() {
        let c = nginx_config(&setup(ServerKind::Nginx), 128).unwrap();
        for needle in [
            "listen 10.77.0.2:8444 ssl http2;",
            "ssl_certificate \"/c/cert.pem\";",
            "ssl_certificate_key \"/c/key.pem\";",
            "client_body_buffer_size 128k;",
            "client_max_body_size 64m;",
            "location /up {",
            "proxy_pass http://sink/__up;",
            "proxy_request_buffering off;",
            "proxy_http_version 1.1;",
            "server 127.0.0.1:9000;",
            "daemon off;",
            "pid \"/tmp/lab work/nginx/nginx.pid\";",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert!(!c.contains("http2_body_preread_size"), "the write-up ran the default preread size");
        let c = launch(ServerKind::Nginx512, &setup(ServerKind::Nginx512)).unwrap();
        assert!(c.config.1.contains("client_body_buffer_size 512k;"));
        assert!(c.config.1.contains("listen 10.77.0.2:8445 ssl http2;"));
        assert_eq!(c.config.0, "nginx.conf");
        assert_eq!(c.args[..2], ["-p".to_string(), "/tmp/lab work/nginx512/".to_string()]);
    }

    #[test]
    fn h2o_config_directives() {
        let c = h2o_config(&setup(ServerKind::H2o)).unwrap();
        for needle in [
            "host: 10.77.0.2\n",
            "port: 8446\n",
            "certificate-file: \"/c/cert.pem\"",
            "key-file: \"/c/key.pem\"",
            "ocsp-update-interval: 0",
            "/up:\n",
            "proxy.reverse.url: \"http://127.0.0.1:9000/__up\"",
            "limit-request-body: 67108864",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
    }

    #[test]
    fn caddy_config_directives() {
        let c = caddy_config(&setup(ServerKind::Caddy)).unwrap();
        for needle in [
            "\tadmin off\n",
            "\tauto_https off\n",
            "protocols h1 h2",
            "https://10.77.0.2:8447 {",
            "\tbind 10.77.0.2\n",
            "\ttls \"/c/cert.pem\" \"/c/key.pem\"\n",
            "handle /up {",
            "rewrite * /__up",
            "reverse_proxy 127.0.0.1:9000",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        let l = launch(ServerKind::Caddy, &setup(ServerKind::Caddy)).unwrap();
        assert_eq!(l.args, ["run", "--config", "/tmp/lab work/caddy/Caddyfile", "--adapter", "caddyfile"]);
        assert!(l.env.iter().any(|(k, v)| k == "HOME" && v == "/tmp/lab work/caddy"));
    }

    #[test]
    fn static_configs_for_the_priority_experiment() {
        let root = Path::new("/tmp/lab work/docroot");
        let cases = [
            (ServerKind::Sluice, "[[site]]\nroot = \"/tmp/lab work/docroot\""),
            (ServerKind::NginxTuned, "root \"/tmp/lab work/docroot\";"),
            (ServerKind::H2oTuned, "file.dir: \"/tmp/lab work/docroot\""),
            (ServerKind::Caddy, "root * \"/tmp/lab work/docroot\"\n\tfile_server"),
        ];
        for (kind, needle) in cases {
            let l = static_launch(kind, &setup(kind), root, false).unwrap();
            assert!(l.config.1.contains(needle), "missing {needle:?} in\n{}", l.config.1);
            assert!(l.config.1.contains(&kind.port().to_string()), "{}", l.config.1);
            assert!(!l.config.1.contains("/up"), "no upload sink in a static configuration");
        }
        let nginx = static_launch(ServerKind::NginxTuned, &setup(ServerKind::NginxTuned), root, false).unwrap();
        assert!(nginx.config.1.contains("listen 10.77.0.2:8453 ssl http2;"));
        assert!(ServerKind::NginxTuned.is_tuned() && !ServerKind::Nginx.is_tuned());
        assert_eq!(ServerKind::CaddyTuned.program(), "caddy");
        // The tuned variants are the priority experiment's only.
        assert!(launch(ServerKind::H2oTuned, &setup(ServerKind::H2oTuned)).unwrap_err().contains("priority"));
        assert!(static_launch(ServerKind::Sluice, &setup(ServerKind::Sluice), Path::new("/a;b"), false).is_err());
    }

    #[test]
    fn compression_is_switched_alike() {
        let root = Path::new("/tmp/lab work/docroot");
        let cases = [
            (ServerKind::Sluice, "[compression]\nenabled = true\n", "[compression]\nenabled = false\n"),
            (ServerKind::Nginx, "gzip on;", "gzip"),
            (ServerKind::H2o, "compress: ON", "compress"),
            (ServerKind::Caddy, "\tencode zstd gzip\n", "encode"),
        ];
        for (kind, on, off) in cases {
            let with = static_launch(kind, &setup(kind), root, true).unwrap().config.1;
            let without = static_launch(kind, &setup(kind), root, false).unwrap().config.1;
            assert!(with.contains(on), "{} with compression:\n{with}", kind.name());
            assert_eq!(without.contains(off), kind == ServerKind::Sluice, "{} without:\n{without}", kind.name());
        }
        let c = static_launch_h3(ServerKind::CaddyH3, &setup(ServerKind::CaddyH3), root, true).unwrap().config.1;
        assert!(c.contains("protocols h1 h2 h3") && c.contains("encode zstd gzip"), "{c}");
    }

    #[test]
    fn static_configs_with_http3_for_the_download_experiment() {
        let root = Path::new("/tmp/lab work/docroot");
        let c = static_launch_h3(ServerKind::Caddy, &setup(ServerKind::Caddy), root, false).unwrap().config.1;
        assert!(c.contains("\t\tprotocols h1 h2 h3\n") && c.contains("file_server"), "{c}");
        let c = static_launch_h3(ServerKind::Sluice, &setup(ServerKind::Sluice), root, false).unwrap().config.1;
        assert!(c.ends_with("\n[quic]\nenabled = true\n") && c.contains("root = \"/tmp/lab work/docroot\""), "{c}");
        let kind = ServerKind::SluiceFlow(Flow::FillCwnd);
        let c = static_launch_h3(kind, &setup(kind), root, false).unwrap().config.1;
        assert!(c.contains("[tcp]\nlimit_inflight = false\n") && c.contains("[quic]\nenabled = true"), "{c}");
        let kind = ServerKind::parse("sluice-h3nocap").unwrap();
        let c = static_launch_h3(kind, &setup(kind), root, false).unwrap().config.1;
        assert!(c.contains("\n[quic]\nenabled = true\nlimit_inflight = false\n") && c.contains(":8459\""), "{c}");
        let kind = ServerKind::parse("sluice-h3cubic").unwrap();
        let c = static_launch_h3(kind, &setup(kind), root, false).unwrap().config.1;
        assert!(c.contains("\n[quic]\nenabled = true\ncongestion = \"cubic\"\n"), "{c}");
        for kind in [ServerKind::Nginx, ServerKind::H2o] {
            assert!(static_launch_h3(kind, &setup(kind), root, false).unwrap_err().contains("no HTTP/3"));
        }
        // The plain static configuration keeps Caddy on h1 and h2.
        let c = static_launch(ServerKind::Caddy, &setup(ServerKind::Caddy), root, false).unwrap().config.1;
        assert!(c.contains("\t\tprotocols h1 h2\n"), "{c}");
    }

    #[test]
    fn unsafe_paths_are_refused() {
        let mut s = setup(ServerKind::Nginx);
        s.dir = PathBuf::from("/tmp/a;b");
        assert!(nginx_config(&s, 128).unwrap_err().contains("cannot carry"));
        s.dir = PathBuf::from("/tmp/a\nb");
        assert!(caddy_config(&s).is_err());
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }

    #[test]
    fn certificate_is_pem() {
        let (cert, key) = self_signed(Ipv4Addr::new(10, 77, 0, 2)).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY-----"));
    }
}
