//! `[compression]`: content codings for responses (RFC 9110 §8.4), negotiated from each
//! request's `Accept-Encoding`. See docs/configuration.md.

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};

/// A content coding Sluice produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Codec {
    /// Brotli (RFC 7932), `br`.
    Br,
    /// Zstandard (RFC 8878), `zstd`.
    Zstd,
    /// gzip (RFC 1952), `gzip`.
    Gzip,
}

impl Codec {
    /// Every codec, in the default order of preference.
    pub(crate) const ALL: [Self; 3] = [Self::Br, Self::Zstd, Self::Gzip];

    /// The coding's name in `Accept-Encoding` and `Content-Encoding`.
    pub(crate) fn token(self) -> &'static str {
        match self {
            Self::Br => "br",
            Self::Zstd => "zstd",
            Self::Gzip => "gzip",
        }
    }

    /// The file-name suffix of a precompressed sibling (`app.js.br`).
    pub(crate) fn extension(self) -> &'static str {
        match self {
            Self::Br => "br",
            Self::Zstd => "zst",
            Self::Gzip => "gz",
        }
    }

    /// A small index, for per-codec arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Br => 0,
            Self::Zstd => 1,
            Self::Gzip => 2,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.token() == s)
    }
}

/// Levels of one codec: for a response compressed as it streams, and for a static file's
/// variant, compressed once and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Levels {
    pub(crate) streaming: u32,
    pub(crate) stored: u32,
}

/// `[compression]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compression {
    /// Off: every response goes as it is (a route can also say `compress = false`).
    pub(crate) enabled: bool,
    /// The codings offered, most preferred first (a request's q-values decide first).
    pub(crate) codecs: Vec<Codec>,
    /// Bodies shorter than this go as they are (a known length; streamed bodies of unknown
    /// length are compressed).
    pub(crate) min_size: u64,
    /// Media types compressed: `type/subtype`, `type/*`, or `*/*+suffix` (`*/*+json`). Empty:
    /// the built-in list ([`compressible`]).
    pub(crate) types: Vec<String>,
    /// Levels per codec, indexed by [`Codec::index`].
    pub(crate) levels: [Levels; 3],
    /// Serve `file.br`, `file.zst` or `file.gz` beside `file` when it is there and not older.
    pub(crate) precompressed: bool,
    /// Static files larger than this are not compressed on the fly (a precompressed sibling
    /// still serves them).
    pub(crate) max_file: u64,
    /// Memory for the compressed variants of static files, kept across requests.
    pub(crate) store_bytes: usize,
    /// Responses compressed as they stream at once, process-wide (each holds a codec's
    /// window and tables: up to about 1 MiB for brotli); beyond it, responses go as they are.
    pub(crate) max_streams: usize,
}

impl Default for Compression {
    fn default() -> Self {
        Self {
            enabled: true,
            codecs: Codec::ALL.to_vec(),
            min_size: 512,
            types: Vec::new(),
            // On the fly: the levels nginx, Caddy and h2o use by default or near them (brotli
            // 4 and zstd 3 compress faster than gzip 6, and smaller). Stored: a file's variant
            // is made once per version, so it gets the levels that pay off over many requests
            // without making the first one wait long (brotli 11 takes seconds on a megabyte).
            levels: [
                Levels { streaming: 4, stored: 9 },
                Levels { streaming: 3, stored: 15 },
                Levels { streaming: 6, stored: 9 },
            ],
            precompressed: true,
            max_file: 8 << 20,
            store_bytes: 64 << 20,
            max_streams: 1024,
        }
    }
}

impl Compression {
    /// The levels of `c`.
    pub(crate) fn levels(&self, c: Codec) -> Levels {
        self.levels[c.index()]
    }

    /// Whether a response of media type `content_type` (the field's value) is compressed.
    /// Without an allocation: it is asked of every proxied response.
    pub(crate) fn compresses(&self, content_type: &[u8]) -> bool {
        let media = media_type(content_type);
        if self.types.is_empty() {
            return compressible(media);
        }
        self.types.iter().any(|t| type_matches(t.as_bytes(), media))
    }
}

/// The media type of a `Content-Type` value: before any parameter, trimmed.
fn media_type(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    v[..end].trim_ascii()
}

fn starts_with_ci(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn ends_with_ci(s: &[u8], suffix: &[u8]) -> bool {
    s.len() >= suffix.len() && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// Whether `pattern` (lower case: `type/subtype`, `type/*`, `*/*+suffix`) matches `media`.
fn type_matches(pattern: &[u8], media: &[u8]) -> bool {
    if let Some(suffix) = pattern.strip_prefix(b"*/*") {
        return ends_with_ci(media, suffix);
    }
    if let Some(top) = pattern.strip_suffix(b"*") {
        return starts_with_ci(media, top);
    }
    pattern.eq_ignore_ascii_case(media)
}

/// The built-in list: text, scripts, JSON, XML, SVG, WebAssembly and the uncompressed font
/// and icon formats. Images, audio, video, archives and WOFF fonts are compressed already.
pub(crate) fn compressible(media: &[u8]) -> bool {
    const EXACT: [&[u8]; 15] = [
        b"application/javascript",
        b"application/x-javascript",
        b"application/ecmascript",
        b"application/json",
        b"application/xml",
        b"application/wasm",
        b"application/x-ndjson",
        b"application/vnd.ms-fontobject",
        b"font/ttf",
        b"font/otf",
        b"image/svg+xml",
        b"image/x-icon",
        b"image/vnd.microsoft.icon",
        b"image/bmp",
        b"application/manifest+json",
    ];
    starts_with_ci(media, b"text/")
        || ends_with_ci(media, b"+json")
        || ends_with_ci(media, b"+xml")
        || EXACT.iter().any(|e| e.eq_ignore_ascii_case(media))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCompression {
    enabled: Option<bool>,
    codecs: Option<Spanned<Vec<Spanned<String>>>>,
    min_size: Option<Spanned<u64>>,
    types: Option<Vec<Spanned<String>>>,
    brotli_level: Option<Spanned<u32>>,
    zstd_level: Option<Spanned<u32>>,
    gzip_level: Option<Spanned<u32>>,
    brotli_stored_level: Option<Spanned<u32>>,
    zstd_stored_level: Option<Spanned<u32>>,
    gzip_stored_level: Option<Spanned<u32>>,
    precompressed: Option<bool>,
    max_file: Option<Spanned<u64>>,
    store_bytes: Option<Spanned<usize>>,
    max_streams: Option<Spanned<usize>>,
}

/// `[compression]`, validated.
pub(super) fn compression(src: &Source<'_>, raw: &RawCompression) -> Result<Compression, ConfigError> {
    let d = Compression::default();
    let codecs = match &raw.codecs {
        None => d.codecs.clone(),
        Some(list) => {
            let mut out = Vec::new();
            for c in list.get_ref() {
                let codec = Codec::parse(c.get_ref()).ok_or_else(|| {
                    src.err(c.span(), format!("unknown content coding `{}`, expected br, zstd or gzip", c.get_ref()))
                })?;
                if out.contains(&codec) {
                    return Err(src.err(c.span(), format!("`{}` is named twice", c.get_ref())));
                }
                out.push(codec);
            }
            out
        }
    };
    let mut types = Vec::new();
    for t in raw.types.iter().flatten() {
        let s = t.get_ref().trim().to_ascii_lowercase();
        let ok = match s.split_once('/') {
            Some((top, sub)) => {
                let token = |x: &str| {
                    !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+*".contains(&b))
                };
                token(top) && token(sub) && (!top.contains('*') || top == "*" && sub.starts_with("*+"))
            }
            None => false,
        };
        if !ok {
            return Err(src.err(
                t.span(),
                format!("`{}` is not a media type pattern (`type/subtype`, `type/*` or `*/*+suffix`)", t.get_ref()),
            ));
        }
        types.push(s);
    }
    let level = |v: &Option<Spanned<u32>>, name: &str, lo: u32, hi: u32, def: u32| -> Result<u32, ConfigError> {
        match v {
            None => Ok(def),
            Some(l) if (lo..=hi).contains(l.get_ref()) => Ok(*l.get_ref()),
            Some(l) => Err(src.err(l.span(), format!("`{name}` must be between {lo} and {hi}"))),
        }
    };
    let [br, zstd, gzip] = d.levels;
    let levels = [
        Levels {
            streaming: level(&raw.brotli_level, "brotli_level", 0, 11, br.streaming)?,
            stored: level(&raw.brotli_stored_level, "brotli_stored_level", 0, 11, br.stored)?,
        },
        Levels {
            streaming: level(&raw.zstd_level, "zstd_level", 1, 22, zstd.streaming)?,
            stored: level(&raw.zstd_stored_level, "zstd_stored_level", 1, 22, zstd.stored)?,
        },
        Levels {
            streaming: level(&raw.gzip_level, "gzip_level", 1, 9, gzip.streaming)?,
            stored: level(&raw.gzip_stored_level, "gzip_stored_level", 1, 9, gzip.stored)?,
        },
    ];
    let min_size = super::bounded(src, &raw.min_size, "min_size", 0, 1 << 30, d.min_size)?;
    let max_file = super::bounded(src, &raw.max_file, "max_file", 0, 1 << 30, d.max_file)?;
    let store_bytes = super::bounded(src, &raw.store_bytes, "store_bytes", 0, 1 << 34, d.store_bytes)?;
    let max_streams = super::bounded(src, &raw.max_streams, "max_streams", 0, 1 << 20, d.max_streams)?;
    Ok(Compression {
        enabled: raw.enabled.unwrap_or(d.enabled),
        codecs,
        min_size,
        types,
        levels,
        precompressed: raw.precompressed.unwrap_or(d.precompressed),
        max_file,
        store_bytes,
        max_streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_match_exactly_by_top_level_or_by_suffix() {
        let c = Compression {
            types: vec!["text/*".into(), "application/json".into(), "*/*+xml".into()],
            ..Compression::default()
        };
        assert!(c.compresses(b"text/html; charset=utf-8") && c.compresses(b"Application/JSON"));
        assert!(c.compresses(b"application/atom+xml") && !c.compresses(b"application/javascript"));
        let d = Compression::default();
        assert!(d.compresses(b"text/javascript; charset=utf-8") && d.compresses(b"image/svg+xml"));
        assert!(d.compresses(b"application/ld+json") && d.compresses(b"text/event-stream"));
        assert!(!d.compresses(b"image/png") && !d.compresses(b"font/woff2") && !d.compresses(b"application/gzip"));
        assert!(!d.compresses(b"") && !d.compresses(b"application/octet-stream"));
    }
}
