//! The lab's modules name each other in one direction only: the experiments at the top, what
//! they share below them (the static-docroot runner, `prepare`, the clients, the stage and the
//! servers, the plan, reports and helpers), the link model and the namespaces at the bottom.
//!
//! The test reads `src/**/*.rs`, drops comments, strings and character literals, and collects
//! every path each module names (`crate::…`, `super::…`, `self::…`, a child module's name;
//! `use` groups expanded). Each path is resolved to the module it names, and the modules form a
//! graph whose nodes are the crate's top-level modules, except `experiments`, whose root
//! (`experiments/mod.rs`) and children (a folder with all its files) are nodes of their own.
//! (`net` stays one node: its `mod.rs` is the façade its parts sit behind.) It fails on a cycle,
//! printing it with a reference for each step, and on a reference from one child of
//! `experiments` to one declared before it in `experiments/mod.rs` (the order there is the
//! layering, top first).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Modules whose children are nodes of their own.
const SPLIT: &[&str] = &["experiments"];

/// `code` without comments, string, byte-string and character literals (each becomes a space).
fn strip(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && at(i + 1) == 'r')) && {
            let j = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut k = j;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"' && (k > j || at(j) == '"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push(' ');
        } else if c[i] == '"' || (!prev_ident && c[i] == 'b' && at(i + 1) == '"') {
            i += if c[i] == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if c[i] == '\'' {
            if at(i + 1) == '\\' {
                // An escaped character literal: '\n', '\'', '\u{7f}'.
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime.
                i += 1;
            }
            out.push(' ');
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c[i].is_whitespace() {
                out.push(c[i].to_string());
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|ch| ch.is_alphabetic() || ch == '_')
}

/// The path starting at `toks[*i]`, with its `use` groups expanded; `*i` moves past it.
fn path_at(toks: &[String], i: &mut usize, prefix: &[String]) -> Vec<Vec<String>> {
    let mut segs = prefix.to_vec();
    segs.push(toks[*i].clone());
    *i += 1;
    while toks.get(*i).map(String::as_str) == Some("::") {
        match toks.get(*i + 1).map(String::as_str) {
            Some("{") => {
                *i += 2;
                let mut all = Vec::new();
                while *i < toks.len() && toks[*i] != "}" {
                    if toks[*i] == "self" {
                        all.push(segs.clone());
                        *i += 1;
                    } else if is_ident(&toks[*i]) || toks[*i] == "*" {
                        all.extend(path_at(toks, i, &segs));
                    } else {
                        *i += 1;
                    }
                    if toks.get(*i).map(String::as_str) == Some("as") {
                        *i += 2;
                    }
                    if toks.get(*i).map(String::as_str) == Some(",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return all;
            }
            Some(t) if is_ident(t) || t == "*" => {
                segs.push(t.to_string());
                *i += 2;
            }
            _ => break,
        }
    }
    vec![segs]
}

/// A path as written in a module: (the module at that point, the path's segments).
type Reference = (Vec<String>, Vec<String>);

/// What one file declares (its child modules, `mod x;`) and names.
fn references(module: &[String], code: &str) -> (Vec<String>, Vec<Reference>) {
    let toks = tokens(&strip(code));
    let mut children = Vec::new();
    let mut refs = Vec::new();
    // One entry per open brace: the inline module it opened, if any.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut pending_mod = None;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].as_str();
        let here = || module.iter().cloned().chain(braces.iter().flatten().cloned()).collect::<Vec<_>>();
        match t {
            "{" => {
                braces.push(pending_mod.take());
                i += 1;
            }
            "}" => {
                braces.pop();
                i += 1;
            }
            "mod" if toks.get(i + 1).is_some_and(|n| is_ident(n)) => {
                let name = toks[i + 1].clone();
                match toks.get(i + 2).map(String::as_str) {
                    Some("{") => pending_mod = Some(name),
                    Some(";") if braces.is_empty() => children.push(name),
                    _ => {}
                }
                i += 2;
            }
            _ if is_ident(t)
                && toks.get(i + 1).map(String::as_str) == Some("::")
                && (i == 0 || toks[i - 1] != "::") =>
            {
                let at = here();
                for p in path_at(&toks, &mut i, &[]) {
                    refs.push((at.clone(), p));
                }
            }
            _ => i += 1,
        }
    }
    (children, refs)
}

/// The module a path names, as a path from the crate root; `None` for other crates and items
/// that are no module's (std, a local type, a child module not declared in the file).
fn resolve(at: &[String], path: &[String], children: &BTreeMap<Vec<String>, Vec<String>>) -> Option<Vec<String>> {
    let mut abs: Vec<String>;
    let mut rest = path;
    match path[0].as_str() {
        "crate" => {
            abs = Vec::new();
            rest = &path[1..];
        }
        "self" => {
            abs = at.to_vec();
            rest = &path[1..];
        }
        "super" => {
            abs = at.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                abs.pop()?;
                rest = &rest[1..];
            }
        }
        first if children.get(at).is_some_and(|c| c.iter().any(|c| c == first)) => abs = at.to_vec(),
        _ => return None,
    }
    abs.extend(rest.iter().filter(|s| s.as_str() != "*").cloned());
    Some(abs)
}

/// The graph's node for a module path: a top-level module, or `experiments::<child>`.
fn node(abs: &[String], children: &BTreeMap<Vec<String>, Vec<String>>) -> Option<String> {
    let top = abs.first()?;
    if !children.get(&Vec::new()).is_some_and(|c| c.contains(top)) {
        return None;
    }
    if SPLIT.contains(&top.as_str()) {
        if let Some(second) = abs.get(1) {
            if children.get(&vec![top.clone()]).is_some_and(|c| c.contains(second)) {
                return Some(format!("{top}::{second}"));
            }
        }
    }
    Some(top.clone())
}

/// A module graph: node → node → one reference that makes the edge (`file: path`).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The graph of a source tree: (path under `src/`, text) per file. The crate roots (`lib.rs`;
/// `main.rs` is another crate) declare the top-level modules. Also the declaration order of
/// each split module's children.
fn graph(files: &[(String, String)]) -> (Graph, BTreeMap<String, Vec<String>>) {
    let module_of = |rel: &str| -> Vec<String> {
        let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(String::from).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        parts
    };
    let mut children: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    let mut all = Vec::new();
    for (rel, text) in files.iter().filter(|(rel, _)| rel != "main.rs") {
        let module = module_of(rel);
        let (kids, refs) = references(&module, text);
        children.insert(module.clone(), kids);
        all.push((rel, module, refs));
    }
    let mut g = Graph::new();
    for (rel, module, refs) in &all {
        let Some(from) = node(module, &children) else { continue };
        g.entry(from.clone()).or_default();
        for (at, path) in refs {
            let Some(to) = resolve(at, path, &children).and_then(|abs| node(&abs, &children)) else { continue };
            if to != from {
                g.entry(from.clone()).or_default().entry(to).or_insert_with(|| format!("{rel}: {}", path.join("::")));
            }
        }
    }
    let order = SPLIT.iter().map(|s| (s.to_string(), children.get(&vec![s.to_string()]).cloned().unwrap_or_default()));
    (g, order.collect())
}

/// A cycle of `g`, as its nodes with the first repeated at the end; `None` when there is none.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(n: &str, g: &Graph, done: &mut BTreeSet<String>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for next in g.get(n).into_iter().flat_map(BTreeMap::keys) {
            if let Some(c) = visit(next, g, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|n| visit(n, g, &mut done, &mut Vec::new()))
}

/// The cycle with the reference behind each step, one per line.
fn describe(cycle: &[String], g: &Graph) -> String {
    cycle.windows(2).map(|w| format!("  {} -> {}   ({})\n", w[0], w[1], g[&w[0]][&w[1]])).collect()
}

/// References from a split module's child to a sibling declared before it (`parent::a ->
/// parent::b` with `b` above `a`).
fn upward(g: &Graph, order: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (parent, kids) in order {
        let pos = |n: &str| n.strip_prefix(&format!("{parent}::")).and_then(|k| kids.iter().position(|c| c == k));
        for (from, tos) in g {
            for (to, why) in tos {
                if let (Some(a), Some(b)) = (pos(from), pos(to)) {
                    if b < a {
                        out.push(format!("{from} -> {to} ({why}), but {to} is declared above {from}"));
                    }
                }
            }
        }
    }
    out
}

fn sources(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(&p, base, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn the_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    let (g, order) = graph(&files);
    // The reading works: the experiments and what they share are there, with their references.
    assert!(g.len() > 10, "{g:#?}");
    assert!(g["experiments::statics"].contains_key("experiments::prepare"), "{:#?}", g["experiments::statics"]);
    assert!(g["experiments"].contains_key("experiments::upload"), "the dispatch names the experiments");
    if let Some(cycle) = find_cycle(&g) {
        panic!("the lab's modules name each other in a circle:\n{}", describe(&cycle, &g));
    }
    let up = upward(&g, &order);
    assert!(up.is_empty(), "against the order of experiments/mod.rs:\n{}", up.join("\n"));
}

#[test]
fn the_checker_finds_a_cycle() {
    let files = |b_rs: &str| {
        vec![
            ("lib.rs".to_string(), "pub mod a;\npub mod b;\npub mod c;\nmod d;\n".to_string()),
            ("a.rs".to_string(), "use crate::b::{self, X as Y};\npub fn f() {}\n".to_string()),
            ("b.rs".to_string(), b_rs.to_string()),
            ("c.rs".to_string(), "pub use super::d::*;\n".to_string()),
            ("d/mod.rs".to_string(), "mod e;\npub use e::E;\n".to_string()),
            ("d/e.rs".to_string(), "pub struct E;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n".to_string()),
        ]
    };
    // What comments, strings and character literals hold is no reference.
    let quiet = "// use crate::a;\n/* crate::a::f() /* nested */ crate::a */\n\
                 pub fn g() -> (&'static str, char, &'static str) {\n\
                 \x20   (\"crate::a::f\", '\"', r#\"super::a::f\"#)\n}\n";
    let (g, _) = graph(&files(quiet));
    assert_eq!(find_cycle(&g), None, "{g:#?}");
    assert!(g["a"].contains_key("b") && g["c"].contains_key("d") && !g["b"].contains_key("a"), "{g:#?}");
    assert!(g["d"].is_empty(), "a module's own children are part of it: {g:#?}");
    // A reference back through `super` inside a `use` group closes the circle.
    let (g, _) = graph(&files("use super::{c, a::f};\n"));
    let cycle = find_cycle(&g).expect("a -> b -> a");
    assert_eq!(cycle, ["a", "b", "a"]);
    let text = describe(&cycle, &g);
    assert!(text.contains("a -> b   (a.rs: crate::b)") && text.contains("b -> a   (b.rs: super::a::f)"), "{text}");
    // In a split module, a child naming a sibling declared above it is reported.
    let tree = vec![
        ("lib.rs".to_string(), "pub mod experiments;\n".to_string()),
        ("experiments/mod.rs".to_string(), "pub mod top;\npub mod low;\n".to_string()),
        ("experiments/top.rs".to_string(), "use super::low::f;\n".to_string()),
        ("experiments/low.rs".to_string(), "pub fn f() { crate::experiments::top::g() }\n".to_string()),
    ];
    let (g, order) = graph(&tree);
    assert_eq!(find_cycle(&g).unwrap(), ["experiments::low", "experiments::top", "experiments::low"]);
    assert_eq!(upward(&g, &order).len(), 1, "{:?}", upward(&g, &order));
}
