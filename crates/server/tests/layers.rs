//! The layer rule, checked on the source (as rust-analyzer's `tidy` tests check its own): inside
//! the `sluice` binary, imports run one way, bottom to top,
//!
//! `config` → `message` → `handlers` → `state` → `app` → `io` → `main`
//!
//! (the TLS leaf below them all is the `sluice-tls` crate). A module may name its own layer and
//! the layers below it, never one above; inside `handlers`, one handler (`builtin`,
//! `speedtest`, `static_files`, `proxy`) never names another (shared helpers sit beside them).
//! Below the binary, the crates that must stay sans-IO have no runtime, QUIC stack or TLS in
//! their manifests. `docs/architecture.md` explains the order.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, bottom to top.
const LAYERS: [&str; 8] = ["config", "message", "handlers", "acme", "state", "app", "io", "main"];

/// The handlers that must not name one another.
const HANDLERS: [&str; 5] = ["builtin", "speedtest", "static_files", "proxy", "tunnel"];

/// Crates that are pure logic: what their manifests must not depend on.
const PURE: [(&str, &[&str]); 7] = [
    ("tune", &["tokio", "quinn", "quinn-proto", "rustls", "libc", "sluice-sys"]),
    ("h2", &["tokio", "quinn", "rustls", "libc"]),
    ("h3", &["tokio", "quinn", "rustls", "libc"]),
    ("hpack", &["tokio", "quinn", "rustls", "libc"]),
    ("qpack", &["tokio", "quinn", "rustls", "libc"]),
    ("http", &["tokio", "quinn", "rustls", "libc"]),
    ("quiclb", &["tokio", "quinn", "quinn-proto", "rustls", "libc", "sluice-sys"]),
];

/// A source file's module path from the crate root (`io/h2.rs` is `["io", "h2"]`, `main.rs` is
/// `["main"]`: the root, named for its layer).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_owned();
    if parts.is_empty() && stem == "main" {
        return vec!["main".into()];
    }
    if stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// `src` without comments, string literals and character literals (they may mention paths).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) && !prev_ident(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            } else {
                out.push(b[i] as char);
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A character literal ('a', '\n', '\''); lifetimes ('a) are left alone.
            let mut j = i + 1;
            if b[j] == b'\\' {
                j += 2;
            }
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            i = j + 1;
            out.push_str("' '");
        } else {
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn prev_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Every module path `code` names through `crate::` or `super::`, absolute (from the root),
/// for code in module `module`. A `use crate::{a, b::c}` group names each of its members.
fn referenced(module: &[String], code: &str) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let words: Vec<(usize, &str)> = tokens(code);
    // Inline modules (`mod tests { ... }`): their names and the brace depth they opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut k = 0;
    while k < words.len() {
        let (_, w) = words[k];
        match w {
            "{" => {
                depth += 1;
                k += 1;
                continue;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                k += 1;
                continue;
            }
            "mod" if k + 2 < words.len() && is_ident(words[k + 1].1) && words[k + 2].1 == "{" => {
                inline.push((words[k + 1].1.to_owned(), depth));
                k += 2;
                continue;
            }
            _ => {}
        }
        if w != "crate" && w != "super" {
            k += 1;
            continue;
        }
        // Not a path segment after something else (`pub(crate)` and `pub(super)` are
        // visibilities, not paths).
        if k > 0 && (words[k - 1].1 == "::" || words[k - 1].1 == "(" || words[k - 1].1 == "in") {
            k += 1;
            continue;
        }
        let mut path: Vec<String> = if w == "crate" {
            Vec::new()
        } else {
            // The module this code is in: the file's, then its inline modules. The root
            // (`main.rs`) is the empty path.
            let mut m = module.to_vec();
            if m.first().is_some_and(|s| s == "main") {
                m.clear();
            }
            m.extend(inline.iter().map(|(n, _)| n.clone()));
            m.pop();
            m
        };
        k += 1;
        // `super::super::...`
        while k + 1 < words.len() && words[k].1 == "::" && words[k + 1].1 == "super" {
            path.pop();
            k += 2;
        }
        let mut groups = vec![path];
        while k + 1 < words.len() && words[k].1 == "::" {
            let next = words[k + 1].1;
            if next == "{" {
                // A group: each member at its start.
                let mut level = 0;
                let base = groups.pop().unwrap_or_default();
                let mut j = k + 1;
                let mut expect_member = true;
                while j < words.len() {
                    match words[j].1 {
                        "{" => {
                            level += 1;
                            expect_member = true;
                        }
                        "}" => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        "," => expect_member = true,
                        t if expect_member && level == 1 && is_ident(t) => {
                            let mut p = base.clone();
                            if t != "self" {
                                p.push(t.to_owned());
                            }
                            groups.push(p);
                            expect_member = false;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                // Past the group's closing brace (its braces are not the code's).
                k = j + 1;
                break;
            }
            if !is_ident(next) {
                break;
            }
            for g in &mut groups {
                g.push(next.to_owned());
            }
            k += 2;
        }
        found.extend(groups.into_iter().filter(|g| !g.is_empty()));
    }
    found
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Identifiers, `::` and single punctuation, with their offsets.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((s, &code[s..i]));
        } else if b[i..].starts_with(b"::") {
            out.push((i, "::"));
            i += 2;
        } else if c.is_ascii_whitespace() || !c.is_ascii() {
            i += 1;
        } else {
            out.push((i, &code[i..i + 1]));
            i += 1;
        }
    }
    out
}

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == layer)
}

/// The violations in one file's code: `module` is the file's module path.
fn violations(module: &[String], code: &str) -> Vec<String> {
    let own = module.first().map(String::as_str).unwrap_or("main");
    let Some(own_rank) = rank(own) else {
        return vec![format!("`{own}` is in no layer: add it to LAYERS in tests/layers.rs")];
    };
    let mut out = Vec::new();
    for path in referenced(module, code) {
        let Some(top) = path.first() else { continue };
        match rank(top) {
            Some(r) if r > own_rank => out.push(format!("`{own}` names `{}`, a higher layer", path.join("::"))),
            Some(_) => {}
            None => out.push(format!("names `{}`, which is in no layer", path.join("::"))),
        }
        // One handler never names another.
        if own == "handlers" && top == "handlers" {
            if let (Some(mine), Some(theirs)) = (module.get(1), path.get(1)) {
                if mine != theirs && HANDLERS.contains(&mine.as_str()) && HANDLERS.contains(&theirs.as_str()) {
                    out.push(format!("handler `{mine}` names handler `{}`", path.join("::")));
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn imports_run_one_way_through_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 30, "found only {} files under {}", files.len(), src.display());
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = module_of(rel);
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        for v in violations(&module, &code) {
            problems.push(format!("src/{}: {v}", rel.display()));
        }
    }
    assert!(problems.is_empty(), "the layer rule is broken:\n{}", problems.join("\n"));
}

#[test]
fn pure_crates_have_no_runtime_in_their_manifests() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for (name, forbidden) in PURE {
        let manifest = std::fs::read_to_string(crates.join(name).join("Cargo.toml")).unwrap();
        // Only [dependencies] counts (tests may use a runtime).
        let deps = manifest.split("\n[dependencies]").nth(1).unwrap_or("").split("\n[").next().unwrap_or("");
        for line in deps.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            let dep = line.split(['=', ' ', '.']).next().unwrap_or("");
            assert!(!forbidden.contains(&dep), "crates/{name}/Cargo.toml depends on `{dep}`: it must stay sans-IO");
        }
    }
    // The policy crate reads no clock either.
    let mut files = Vec::new();
    rust_files(&crates.join("tune").join("src"), &mut files);
    for file in files.iter().filter(|f| !f.ends_with("tests.rs") && !f.to_string_lossy().contains("/tests/")) {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let code = code.split("#[cfg(test)]").next().unwrap_or("");
        assert!(!code.contains("Instant::now"), "{}: reads the clock", file.display());
        assert!(!code.contains("std::net") && !code.contains("std::thread"), "{}: touches IO", file.display());
    }
}

/// The checker itself finds what it must: a lower layer naming a higher one by every form of
/// path, and one handler naming another; it leaves comments, strings and visibilities alone.
#[test]
fn the_checker_finds_wrong_way_imports() {
    let m = |p: &str| module_of(Path::new(p));
    assert_eq!(m("main.rs"), ["main"]);
    assert_eq!(m("io/h2.rs"), ["io", "h2"]);
    assert_eq!(m("handlers/proxy/mod.rs"), ["handlers", "proxy"]);
    let bad = [
        ("config/mod.rs", "use crate::app::respond::send;"),
        ("message/body.rs", "fn f() { crate::handlers::proxy::serve(); }"),
        ("message/body.rs", "use crate::{config::Config, state::State};"),
        ("handlers/builtin.rs", "use super::super::io::h2;"),
        ("handlers/builtin.rs", "use super::static_files::parse;"),
        ("handlers/proxy/body.rs", "use crate::handlers::speedtest::Speedtest;"),
        ("state.rs", "pub(crate) fn f() -> crate::app::respond::Prepared { todo!() }"),
        ("state.rs", "mod tests { use super::super::app::respond; }"),
    ];
    for (file, code) in bad {
        assert!(!violations(&m(file), &code_only(code)).is_empty(), "{file}: `{code}` passed");
    }
    let good = [
        ("io/h2.rs", "use crate::{app::respond, config::Config, state::State};"),
        (
            "handlers/proxy/body.rs",
            "use super::Upstream; use crate::message::Body; use crate::handlers::conditional::x;",
        ),
        ("handlers/mod.rs", "pub(crate) mod proxy; use crate::handlers::static_files::Files;"),
        ("config/mod.rs", "// see crate::app::respond\nconst S: &str = \"crate::io::h2\"; pub(crate) fn f() {}"),
        ("message/request.rs", "use crate::config::ProgressRule; pub(super) struct A;"),
        ("main.rs", "use crate::io::listen; fn main() { app::x(); }"),
        ("state.rs", "fn a() {} #[cfg(test)] mod tests { use super::a; use super::super::config::X; }"),
    ];
    for (file, code) in good {
        let v = violations(&m(file), &code_only(code));
        assert!(v.is_empty(), "{file}: `{code}` refused: {v:?}");
    }
}
