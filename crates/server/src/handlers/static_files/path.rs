//! Path resolution (pure): a percent-encoded request path to segments below the root, by the
//! rules of the module documentation of `static_files`.

use http::header::{self, HeaderValue};
use http::StatusCode;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

use crate::message::Response;

/// Characters escaped in a path segment of a `Location` we build (RFC 3986 §3.3 pchar).
pub(super) const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// A request path mapped onto file-system segments.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// Decoded, normalised segments below the root (no `.`, `..`, empty or hidden segments).
    pub(crate) segments: Vec<String>,
    /// Whether the path names a directory (ends in `/`, or in `.` or `..`).
    pub(crate) trailing_slash: bool,
}

/// Why a path maps to no file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PathError {
    /// 400: not an origin-form path, or not UTF-8 after decoding.
    BadRequest(&'static str),
    /// 404: cannot name a servable file (encoded `/`, NUL, dotfile).
    NotFound,
}

/// Maps a percent-encoded request path to segments under the root. Never yields a segment
/// that could leave the root: see the module documentation for the rules.
pub(crate) fn resolve_path(raw: &str) -> Result<Target, PathError> {
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(PathError::BadRequest("the path must start with `/`"));
    };
    let mut segments: Vec<String> = Vec::new();
    let mut trailing_slash = true;
    for raw_seg in rest.split('/') {
        let seg = percent_decode_str(raw_seg)
            .decode_utf8()
            .map_err(|_| PathError::BadRequest("the path is not UTF-8 after percent-decoding"))?;
        match &*seg {
            "" | "." => trailing_slash = true,
            ".." => {
                // RFC 3986 §5.2.4: remove the last segment; at the root there is none to remove.
                segments.pop();
                trailing_slash = true;
            }
            s => {
                if s.contains(['/', '\0']) {
                    return Err(PathError::NotFound);
                }
                if s.starts_with('.') && !(s == ".well-known" && segments.is_empty()) {
                    return Err(PathError::NotFound);
                }
                segments.push(s.to_owned());
                trailing_slash = false;
            }
        }
    }
    Ok(Target { segments, trailing_slash })
}

/// `Location` for a directory requested without its trailing slash, built from the normalised
/// segments (never from the raw path: `//evil.example/` must not become a
/// scheme-relative redirect).
pub(super) fn redirect_with_slash(segments: &[String], query: Option<&str>) -> Response {
    let mut loc = String::from("/");
    for s in segments {
        loc.extend(utf8_percent_encode(s, SEGMENT));
        loc.push('/');
    }
    let with_query = query.map(|q| format!("{loc}?{q}"));
    let value =
        with_query.as_deref().and_then(|l| HeaderValue::from_str(l).ok()).or_else(|| HeaderValue::from_str(&loc).ok());
    let mut r = Response::text(StatusCode::MOVED_PERMANENTLY, "moved permanently\n");
    if let Some(v) = value {
        r.headers.insert(header::LOCATION, v);
    }
    r
}
