//! The response a handler returns: status, header fields (some prebuilt, in the engines'
//! form, [`Head`]) and a [`Body`].

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::message::body::Body;

/// A response head and body.
pub(crate) struct Response {
    /// Status code.
    pub(crate) status: StatusCode,
    /// Header fields already in the HTTP/2 and HTTP/3 engines' form (lower-case names, none
    /// connection-specific), sent before `headers`. A handler sets it for fields that are
    /// fixed and shared between responses (a cached file's, built once per file version):
    /// converting a map of them per request cost about 2,150 instructions of a small file's
    /// 22,600 (a clone of the map, its drop, and a copy of every value into the engine's form).
    /// The proxy sets it for an HTTP/1.1 upstream's response: the fields where the parser left
    /// them in the head's bytes ([`Head::Packed`]), which go to the engine as they lie. A step
    /// that changes fields after the handler, or reads them from the map alone, calls
    /// [`Response::materialize`] first, which moves them into `headers` (the HTTP/2 and
    /// HTTP/3 sender reads both).
    pub(crate) head: Option<Head>,
    /// Response headers. `content-length` is set by the handler when the length is known.
    pub(crate) headers: HeaderMap,
    /// The body.
    pub(crate) body: Body,
}

impl Response {
    /// A response with `headers` and no prebuilt fields.
    pub(crate) fn new(status: StatusCode, headers: HeaderMap, body: Body) -> Self {
        Self { status, head: None, headers, body }
    }

    /// A response with the given status, a `text/plain` body and its length.
    pub(crate) fn text(status: StatusCode, text: impl Into<Bytes>) -> Self {
        let text = text.into();
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
        headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(text.len()));
        Self::new(status, headers, Body::Full(text))
    }

    /// Move the prebuilt fields ([`Response::head`]) into `headers`, ahead of what is there.
    pub(crate) fn materialize(&mut self) {
        let Some(fields) = self.head.take() else { return };
        let mut map = HeaderMap::with_capacity(fields.len() + self.headers.len());
        fields.append_to_map(&mut map);
        // Appended, not inserted: on the wire both lists go out whole, so a name in both is sent
        // twice either way.
        let mut last: Option<http::HeaderName> = None;
        for (n, v) in std::mem::take(&mut self.headers) {
            if let Some(n) = n {
                last = Some(n);
            }
            // Invariant: a map's iteration names its first value.
            if let Some(n) = &last {
                map.append(n.clone(), v);
            }
        }
        self.headers = map;
    }

    /// Whether the prebuilt fields hold one named `name` (lower-case).
    pub(crate) fn head_has(&self, name: &str) -> bool {
        self.head.as_ref().is_some_and(|h| h.iter().any(|(n, _)| n == name.as_bytes()))
    }
}

/// Fields many responses share (a cached file version's), by pointer: a thin one, not an
/// `Arc<[Field]>`.
pub(crate) type SharedHead = Arc<Vec<sluice_http::Field>>;

/// Prebuilt response fields ([`Response::head`]).
#[derive(Debug)]
pub(crate) enum Head {
    /// Shared by many responses.
    Shared(SharedHead),
    /// This response's own, where an HTTP/1.1 upstream's head holds them (the proxy's).
    Packed(sluice_http::PackedFields),
}

impl Head {
    /// Every field as (name, value).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let (shared, packed) = match self {
            Self::Shared(s) => (Some(s.iter().map(sluice_http::Field::parts)), None),
            Self::Packed(p) => (None, Some(p.iter())),
        };
        shared.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    /// How many fields there are.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Shared(s) => s.len(),
            Self::Packed(p) => p.len(),
        }
    }

    /// Append every field to `map`. Prebuilt fields come from a map
    /// (`sluice_http::response_fields`) or the proxy's checked parse, so they convert back.
    pub(crate) fn append_to_map(&self, map: &mut HeaderMap) {
        match self {
            Self::Shared(s) => sluice_http::append_to_map(s.iter(), map),
            Self::Packed(p) => p.append_to_map(map),
        }
    }
}
