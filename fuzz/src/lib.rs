//! What Sluice's fuzz targets share: their structured inputs (`arbitrary`), the drivers that
//! feed them to the engines and check invariants, and [`seed::Seed`], which writes an input
//! back as the bytes `arbitrary` reads it from (for the committed seed corpus).
//!
//! Every driver asserts what it can beyond "no panic": outputs bounded by inputs and limits,
//! round trips equal, connections that failed stay failed.

pub mod flow;
pub mod forward;
pub mod h1;
pub mod h2_client;
pub mod h2_server;
pub mod h3_server;
pub mod hpack;
pub mod priority;
pub mod qpack;
pub mod seed;
pub mod tls_records;

use arbitrary::{Arbitrary, Unstructured};

/// A byte string read as a 16-bit little-endian length (clamped to what is left) and that
/// many bytes: denser than `Vec<u8>`'s one continuation byte per element, so mutations of
/// payloads stay payload mutations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk(pub Vec<u8>);

impl<'a> Arbitrary<'a> for Chunk {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let n = usize::from(u16::arbitrary(u)?).min(u.len());
        Ok(Self(u.bytes(n)?.to_vec()))
    }
}

impl From<&[u8]> for Chunk {
    fn from(b: &[u8]) -> Self {
        Self(b.to_vec())
    }
}

impl From<&str> for Chunk {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

/// A header field of a structured input.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Name (any bytes: the compressors do not validate them).
    pub name: Chunk,
    /// Value.
    pub value: Chunk,
    /// Never-indexed (HPACK §6.2.3) / the N bit (QPACK §4.5.4).
    pub sensitive: bool,
}

impl Field {
    /// A field that may be indexed.
    pub fn new(name: &str, value: &str) -> Self {
        Self { name: name.into(), value: value.into(), sensitive: false }
    }
}

/// Pick one of `items` by a fuzzer-chosen byte, if there are any.
pub(crate) fn pick<T: Copy>(items: &[T], k: u8) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(k) % items.len()])
}

/// The order of a message's events on one stream, as an application sees them: a head, body
/// pieces, at most one end (the last piece or trailers), nothing after the end or a reset.
#[derive(Debug, Default)]
pub struct Lifecycle {
    open: std::collections::HashSet<u64>,
    ended: std::collections::HashSet<u64>,
    gone: std::collections::HashSet<u64>,
}

impl Lifecycle {
    /// The head of stream `id`; `end` when there is no body.
    pub fn head(&mut self, id: u64, end: bool) {
        assert!(!self.gone.contains(&id), "stream {id}: a head after its reset");
        assert!(self.open.insert(id), "stream {id}: a second head");
        if end {
            self.ended.insert(id);
        }
    }

    /// A piece of body, or the trailers (`end`).
    pub fn body(&mut self, id: u64, end: bool) {
        assert!(self.open.contains(&id), "stream {id}: body before its head");
        assert!(!self.gone.contains(&id), "stream {id}: body after its reset");
        assert!(!self.ended.contains(&id), "stream {id}: body after its end");
        if end {
            self.ended.insert(id);
        }
    }

    /// The stream was reset: nothing follows.
    pub fn reset(&mut self, id: u64) {
        self.gone.insert(id);
    }
}
