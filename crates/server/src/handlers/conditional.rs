//! Validators and conditional requests (pure; RFC 9110 §8.8, §13).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderValue};

/// What conditional requests compare against.
#[derive(Debug, Clone)]
pub(crate) struct Validators {
    /// Opaque tag without quotes (our tags are always strong).
    pub(crate) etag: String,
    /// Last-Modified in whole seconds since the epoch, clamped to "now" (RFC 9110 §8.8.2.1).
    pub(crate) last_modified: u64,
    /// Whether `last_modified` can be used as a strong validator: at least one second in the
    /// past (RFC 9110 §8.8.2.2).
    pub(crate) lm_strong: bool,
}

impl Validators {
    /// Validators from a file's size and modification time.
    pub(crate) fn new(len: u64, mtime: SystemTime, now: SystemTime) -> Self {
        let ns = mtime.duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let now_secs = secs(now);
        let last_modified = secs(mtime).min(now_secs);
        // `{ns:x}-{len:x}`, written without the formatting machinery (every static request).
        let mut etag = String::with_capacity(40);
        push_hex(&mut etag, ns);
        etag.push('-');
        push_hex(&mut etag, u128::from(len));
        Self { etag, last_modified, lm_strong: last_modified < now_secs }
    }

    pub(super) fn etag_header(&self) -> HeaderValue {
        let mut v = Vec::with_capacity(self.etag.len() + 2);
        v.push(b'"');
        v.extend_from_slice(self.etag.as_bytes());
        v.push(b'"');
        // Hex digits, `-` and quotes only: always a valid header value.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(v)).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
    }

    pub(super) fn last_modified_header(&self) -> HeaderValue {
        // The same few files answer most requests: the last date formatted is kept per thread.
        thread_local! {
            static LAST: std::cell::RefCell<Option<(u64, HeaderValue)>> = const { std::cell::RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((secs, v)) = last.as_ref() {
                if *secs == self.last_modified {
                    return v.clone();
                }
            }
            let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(self.last_modified));
            let v = HeaderValue::from_maybe_shared(bytes::Bytes::from(date))
                .unwrap_or_else(|_| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
            *last = Some((self.last_modified, v.clone()));
            v
        })
    }
}

/// Lower-case hex digits of `n`, no leading zeros (`0` for zero).
fn push_hex(s: &mut String, n: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 32];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = DIGITS[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    s.extend(buf[i..].iter().map(|&b| b as char));
}

pub(super) fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// One entity tag from a request header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    pub(crate) weak: bool,
    pub(crate) opaque: String,
}

/// An `If-Match` / `If-None-Match` field value (RFC 9110 §13.1.1, §13.1.2).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TagList {
    /// `*`
    Any,
    /// A list of entity tags.
    Tags(Vec<Tag>),
    /// Unparseable: matches nothing.
    Invalid,
}

impl TagList {
    /// Strong comparison (RFC 9110 §8.8.3.2): both strong and equal.
    pub(crate) fn strong_match(&self, etag: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Tags(tags) => tags.iter().any(|t| !t.weak && t.opaque == etag),
            Self::Invalid => false,
        }
    }

    /// Weak comparison: equal opaque tags, weakness ignored.
    pub(crate) fn weak_match(&self, etag: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Tags(tags) => tags.iter().any(|t| t.opaque == etag),
            Self::Invalid => false,
        }
    }
}

/// Parses one entity-tag (`"x"` or `W/"x"`, RFC 9110 §8.8.3) at the start of `s`; returns it
/// and the rest.
pub(super) fn parse_tag(s: &str) -> Option<(Tag, &str)> {
    let (weak, s) = match s.strip_prefix("W/") {
        Some(r) => (true, r),
        None => (false, s),
    };
    let s = s.strip_prefix('"')?;
    let end = s.find('"')?;
    let opaque = &s[..end];
    // etagc = %x21 / %x23-7E / obs-text; `to_str` already limited us to visible ASCII.
    if !opaque.bytes().all(|b| b == 0x21 || (0x23..=0x7e).contains(&b)) {
        return None;
    }
    Some((Tag { weak, opaque: opaque.to_owned() }, &s[end + 1..]))
}

/// Parses all lines of an entity-tag list header; `None` when the header is absent.
pub(crate) fn parse_tag_list(headers: &HeaderMap, name: &header::HeaderName) -> Option<TagList> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    let mut tags = Vec::new();
    let mut any = false;
    for v in values {
        let Ok(mut s) = v.to_str() else {
            return Some(TagList::Invalid);
        };
        loop {
            s = s.trim_start_matches([' ', '\t', ',']);
            if s.is_empty() {
                break;
            }
            if let Some(rest) = s.strip_prefix('*') {
                any = true;
                s = rest;
            } else {
                let Some((tag, rest)) = parse_tag(s) else {
                    return Some(TagList::Invalid);
                };
                tags.push(tag);
                s = rest;
            }
            let trimmed = s.trim_start_matches([' ', '\t']);
            if !(trimmed.is_empty() || trimmed.starts_with(',')) {
                return Some(TagList::Invalid);
            }
            s = trimmed;
        }
    }
    Some(match (any, tags.is_empty()) {
        (true, true) => TagList::Any,
        (false, false) => TagList::Tags(tags),
        // `*` mixed with tags, or nothing but commas.
        _ => TagList::Invalid,
    })
}

/// An HTTP-date header present exactly once and valid; otherwise `None` (RFC 9110 §13.1.3,
/// §13.1.4: such fields are ignored).
pub(super) fn single_date(headers: &HeaderMap, name: &header::HeaderName) -> Option<u64> {
    let mut it = headers.get_all(name).iter();
    let v = it.next()?;
    if it.next().is_some() {
        return None;
    }
    httpdate::parse_http_date(v.to_str().ok()?).ok().map(secs)
}

/// Outcome of evaluating the preconditions of a GET or HEAD.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Serve the representation; `honor_range` is false when `If-Range` failed.
    Proceed { honor_range: bool },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates conditional headers in the order of RFC 9110 §13.2.2 for a GET or HEAD of an
/// existing representation.
pub(crate) fn evaluate(headers: &HeaderMap, v: &Validators) -> Precondition {
    // Step 1: If-Match, strong comparison (§13.1.1).
    if let Some(list) = parse_tag_list(headers, &header::IF_MATCH) {
        if !list.strong_match(&v.etag) {
            return Precondition::Failed;
        }
    } else if let Some(date) = single_date(headers, &header::IF_UNMODIFIED_SINCE) {
        // Step 2: If-Unmodified-Since, only without If-Match (§13.1.4).
        if v.last_modified > date {
            return Precondition::Failed;
        }
    }
    // Step 3: If-None-Match, weak comparison (§13.1.2); for GET/HEAD a match is 304.
    if let Some(list) = parse_tag_list(headers, &header::IF_NONE_MATCH) {
        if list.weak_match(&v.etag) {
            return Precondition::NotModified;
        }
    } else if let Some(date) = single_date(headers, &header::IF_MODIFIED_SINCE) {
        // Step 4: If-Modified-Since, only without If-None-Match (§13.1.3).
        if v.last_modified <= date {
            return Precondition::NotModified;
        }
    }
    // Step 5: If-Range (§13.1.5), relevant only with Range.
    let honor_range = match headers.get(header::IF_RANGE) {
        None => true,
        Some(value) => if_range_holds(value, v),
    };
    Precondition::Proceed { honor_range }
}

/// RFC 9110 §13.1.5: an entity tag must match strongly; a date must equal Last-Modified
/// exactly and Last-Modified must be strong.
pub(super) fn if_range_holds(value: &HeaderValue, v: &Validators) -> bool {
    let Ok(s) = value.to_str() else { return false };
    let s = s.trim();
    if s.starts_with('"') || s.starts_with("W/") {
        return match parse_tag(s) {
            Some((tag, rest)) => rest.trim().is_empty() && !tag.weak && tag.opaque == v.etag,
            None => false,
        };
    }
    match httpdate::parse_http_date(s) {
        Ok(date) => v.lm_strong && secs(date) == v.last_modified,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validators_are_written_as_before() {
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let mtime = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let v = Validators::new(0x1f4, mtime, now);
        assert_eq!(v.etag, format!("{:x}-{:x}", 1_700_000_000_123_456_789u128, 0x1f4));
        assert_eq!(v.etag_header(), format!("\"{}\"", v.etag).as_str());
        assert_eq!(Validators::new(0, UNIX_EPOCH, now).etag, "0-0");
        // The per-thread date: right for each value, not only the first.
        for secs in [1_700_000_000u64, 1_700_000_001, 1_700_000_000] {
            let v = Validators { etag: String::new(), last_modified: secs, lm_strong: true };
            let want = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(v.last_modified_header(), want.as_str());
        }
    }
}
