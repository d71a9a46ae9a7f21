//! Interoperability test against the hpack-test-case corpus
//! (https://github.com/http2jp/hpack-test-case), read from the shared test
//! data folder next to the workspace; it is never copied into the project.
//!
//! * Every encoder folder except `raw-data`: each story is decoded in one
//!   decoder context and compared with the expected header lists.
//! * `raw-data`: each story is encoded with our `Encoder` and decoded back.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_hpack::{Decoder, Encoder};

type Header = (Vec<u8>, Vec<u8>);

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/hpack-test-case")
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 == 1 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `headers` is a list of single-entry objects, in order.
fn headers_of(case: &Value) -> Result<Vec<Header>, String> {
    let list = case["headers"].as_array().ok_or("case without headers")?;
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        let obj = item.as_object().ok_or("header is not an object")?;
        if obj.len() != 1 {
            return Err(format!("header object with {} entries", obj.len()));
        }
        for (name, value) in obj {
            let value = value.as_str().ok_or("header value is not a string")?;
            out.push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
        }
    }
    Ok(out)
}

fn stories(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("story_") && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    files
}

fn load(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn decode_block(d: &mut Decoder, wire: &[u8]) -> Result<Vec<Header>, String> {
    let mut out = Vec::new();
    d.decode(wire, usize::MAX, &mut |n, v, _| out.push((n.to_vec(), v.to_vec()))).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Decodes one story in one context; returns (cases checked, failure).
fn check_decoding(path: &Path) -> (usize, Option<String>) {
    let story = load(path);
    let Some(cases) = story["cases"].as_array() else {
        return (0, Some("no cases array".into()));
    };
    let mut decoder = Decoder::new(4096);
    for (i, case) in cases.iter().enumerate() {
        if let Some(size) = case.get("header_table_size").and_then(Value::as_u64) {
            decoder.set_max_table_size(size as usize);
        }
        let result = (|| {
            let wire = case["wire"].as_str().ok_or("case without wire")?;
            let wire = unhex(wire).ok_or("wire is not hex")?;
            let expected = headers_of(case)?;
            let got = decode_block(&mut decoder, &wire)?;
            if got != expected {
                return Err(format!("decoded {got:?}, expected {expected:?}"));
            }
            Ok::<(), String>(())
        })();
        if let Err(e) = result {
            return (i, Some(format!("case {i}: {e}")));
        }
    }
    (cases.len(), None)
}

/// Encodes and decodes one raw-data story in one context.
fn check_round_trip(path: &Path) -> (usize, Option<String>) {
    let story = load(path);
    let Some(cases) = story["cases"].as_array() else {
        return (0, Some("no cases array".into()));
    };
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    for (i, case) in cases.iter().enumerate() {
        let result = (|| {
            let expected = headers_of(case)?;
            let mut wire = Vec::new();
            encoder.encode(expected.iter().map(|(n, v)| (&n[..], &v[..], false)), &mut wire);
            let got = decode_block(&mut decoder, &wire)?;
            if got != expected {
                return Err(format!("round trip gave {got:?}, expected {expected:?}"));
            }
            Ok::<(), String>(())
        })();
        if let Err(e) = result {
            return (i, Some(format!("case {i}: {e}")));
        }
    }
    (cases.len(), None)
}

#[test]
fn hpack_test_case_corpus() {
    let root = corpus_dir();
    if !root.is_dir() {
        println!("skipping: shared/testdata/hpack-test-case not found at {}", root.display());
        return;
    }

    let mut folders: Vec<PathBuf> = fs::read_dir(&root)
        .expect("reading corpus root")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();

    let mut failures = Vec::new();
    let (mut decoded_stories, mut decoded_cases) = (0, 0);
    let (mut round_trip_stories, mut round_trip_cases) = (0, 0);

    for folder in &folders {
        let name = folder.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        if name.starts_with('.') {
            continue;
        }
        let raw = name == "raw-data";
        let (mut stories_ok, mut cases_ok) = (0, 0);
        for story in stories(folder) {
            let (cases, failure) = if raw { check_round_trip(&story) } else { check_decoding(&story) };
            cases_ok += cases;
            match failure {
                Some(f) => failures.push(format!("{}: {f}", story.display())),
                None => stories_ok += 1,
            }
        }
        println!("{name}: {stories_ok} stories, {cases_ok} cases passed");
        if raw {
            round_trip_stories += stories_ok;
            round_trip_cases += cases_ok;
        } else {
            decoded_stories += stories_ok;
            decoded_cases += cases_ok;
        }
    }

    println!(
        "decoded {decoded_stories} stories / {decoded_cases} cases; \
         round-tripped {round_trip_stories} raw-data stories / {round_trip_cases} cases"
    );
    for f in failures.iter().take(10) {
        println!("FAILED {f}");
    }
    assert!(failures.is_empty(), "{} stories failed", failures.len());
    assert!(decoded_cases > 0, "no encoded cases were checked");
    assert!(round_trip_cases > 0, "no raw-data cases were round-tripped");
}
