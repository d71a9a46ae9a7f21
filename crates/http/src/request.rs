//! Turning a decoded header list into a request head, enforcing RFC 9113 §8.2 and §8.3 (RFC
//! 9114 §4.2 and §4.3 state the same rules for HTTP/3): a request that breaks them is malformed,
//! a stream error of type PROTOCOL_ERROR on HTTP/2 (§8.1.1) and H3_MESSAGE_ERROR on HTTP/3.

use bytes::Bytes;

/// One header field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Lower-case name.
    pub name: Bytes,
    /// Value.
    pub value: Bytes,
}

impl Field {
    /// A field from anything byte-like.
    pub fn new(name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self { name: name.into(), value: value.into() }
    }

    /// The name and the value.
    pub fn parts(&self) -> (&[u8], &[u8]) {
        (&self.name, &self.value)
    }
}

/// A response head's fields: a list many responses share (made once, as for every response
/// with one file version), then fields as they were parsed (a proxied response's), then the
/// response's own. Handing one over clones a pointer or moves one buffer, not each field (a
/// field clone is two reference counts, each an atomic operation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadFields {
    /// The shared fields, first.
    pub shared: Option<std::sync::Arc<Vec<Field>>>,
    /// Parsed fields, after them.
    pub packed: crate::PackedFields,
    /// The response's own fields, last.
    pub own: Vec<Field>,
}

impl HeadFields {
    /// Whether one of the fields is `date` (names are lower case). The shared fields are not
    /// looked at: they are made once for many responses (a file version's), which is no place
    /// for a date.
    pub fn has_date(&self) -> bool {
        // The parsed fields are a proxied response's: the origin's `Date` stays (RFC 9110
        // §6.6.1 has a recipient add one only when it is missing).
        self.own.iter().any(|f| &f.name[..] == b"date") || self.packed.has(b"date")
    }

    /// Every field as (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.shared
            .iter()
            .flat_map(|s| s.iter())
            .map(Field::parts)
            .chain(self.packed.iter())
            .chain(self.own.iter().map(Field::parts))
    }
}

impl From<Vec<Field>> for HeadFields {
    fn from(own: Vec<Field>) -> Self {
        // Every field named: `..Self::default()` would make a default `own` and drop it.
        Self { shared: None, packed: crate::PackedFields::default(), own }
    }
}

/// A decoded field name or value as a decoder hands it over: read where it lies, and made
/// into [`Bytes`] only if it is kept (pseudo-header names never are; the common methods and
/// schemes are kept as static bytes). Made into `Bytes`, a slice of a decoder's buffer is a
/// reference count taken, and its drop one given back: two atomic operations.
pub trait Name: AsRef<[u8]> {
    /// The name as bytes the field can keep.
    fn into_bytes(self) -> Bytes;
}

impl Name for Bytes {
    fn into_bytes(self) -> Bytes {
        self
    }
}

/// `Some(name)` as static bytes when it is one of the listed names, grouped by their length:
/// a `match` on the length first (a jump table), then on the few names of that length, compared
/// inline. A `match` on the names alone compares them one after another. Each group's length
/// is checked at compile time.
macro_rules! names_by_length {
    ($name:expr; $($len:literal => [$($n:literal),+]),+ $(,)?) => {{
        $($(const _: () = assert!($n.len() == $len, "a name in the wrong length group");)+)+
        match $name.len() {
            $($len => match $name {
                $($n => Some($n as &'static [u8]),)+
                _ => None,
            },)+
            _ => None,
        }
    }};
}

/// The names [`static_name`] knows, for the tests.
#[cfg(test)]
const STATIC_NAMES: [&[u8]; 24] = [
    b"te",
    b"range",
    b"accept",
    b"cookie",
    b"origin",
    b"pragma",
    b"referer",
    b"priority",
    b"user-agent",
    b"content-type",
    b"x-request-id",
    b"authorization",
    b"cache-control",
    b"if-none-match",
    b"content-length",
    b"sec-fetch-dest",
    b"sec-fetch-mode",
    b"sec-fetch-site",
    b"accept-encoding",
    b"accept-language",
    b"x-forwarded-for",
    b"if-modified-since",
    b"x-forwarded-proto",
    b"upgrade-insecure-requests",
];

/// `name` as static bytes when it is a field name requests commonly carry: a field kept with
/// such a name costs no reference count (as its clone and drop) on a shared buffer, and is a
/// valid lower-case token that is not connection-specific, so it needs no check either (te
/// aside, whose value is checked). A `match` on literals compares the bytes inline, where a
/// search of a list would call `memcmp` for each.
pub fn static_name(name: &[u8]) -> Option<&'static [u8]> {
    names_by_length!(name;
        2 => [b"te"],
        5 => [b"range"],
        6 => [b"accept", b"cookie", b"origin", b"pragma"],
        7 => [b"referer"],
        8 => [b"priority"],
        10 => [b"user-agent"],
        12 => [b"content-type", b"x-request-id"],
        13 => [b"authorization", b"cache-control", b"if-none-match"],
        14 => [b"content-length", b"sec-fetch-dest", b"sec-fetch-mode", b"sec-fetch-site"],
        15 => [b"accept-encoding", b"accept-language", b"x-forwarded-for"],
        17 => [b"if-modified-since", b"x-forwarded-proto"],
        25 => [b"upgrade-insecure-requests"],
    )
}

/// Whether `a` is a valid authority for an `http`/`https` request: `uri-host [":" port]`
/// (RFC 3986 §3.2; RFC 9110 §4.2.1 forbids an empty host), the port at most 65535. This is
/// what `Host` and `:authority` must hold (RFC 9112 §3.2, RFC 9113 §8.3.1).
pub fn valid_authority(a: &str) -> bool {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        // IP-literal: an IPv6 address (or IPvFuture, which no client sends) in brackets.
        let Some((inner, after)) = rest.split_once(']') else { return false };
        if inner.is_empty() || !inner.bytes().all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.') {
            return false;
        }
        match after {
            "" => return true,
            _ => match after.strip_prefix(':') {
                Some(p) => ("[]", p),
                None => return false,
            },
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (a, ""),
        }
    };
    let host_ok = !host.is_empty()
        && (host == "[]"
            || host.bytes().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(
                        c,
                        b'-' | b'.'
                            | b'_'
                            | b'~'
                            | b'!'
                            | b'$'
                            | b'&'
                            | b'\''
                            | b'('
                            | b')'
                            | b'*'
                            | b'+'
                            | b','
                            | b';'
                            | b'='
                            | b'%'
                    )
            }));
    // An empty port is allowed (RFC 3986 §3.2.3: "host:" means the default port).
    let port_ok = port.is_empty()
        || (port.len() <= 5
            && port.bytes().all(|c| c.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| p <= 65535));
    host_ok && port_ok
}

/// A response status (100..=999, as the engines take it) as the three digits of `:status`.
pub fn status_digits(n: u16) -> [u8; 3] {
    match n {
        // The usual one without the three divisions.
        200 => *b"200",
        _ => [b'0' + (n / 100 % 10) as u8, b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8],
    }
}

/// `name` as static bytes when it is one of the response field names that Sluice's own
/// handlers send or that origins commonly do. A field with such a name costs no copy and no
/// reference count.
pub fn static_response_name(name: &[u8]) -> Option<&'static [u8]> {
    names_by_length!(name;
        3 => [b"via"],
        4 => [b"etag", b"date", b"vary", b"link"],
        5 => [b"allow"],
        6 => [b"server"],
        7 => [b"alt-svc", b"expires"],
        8 => [b"location", b"priority"],
        10 => [b"set-cookie"],
        11 => [b"retry-after"],
        12 => [b"content-type"],
        13 => [b"last-modified", b"accept-ranges", b"cache-control", b"content-range"],
        14 => [b"content-length", b"content-digest"],
        16 => [b"content-encoding", b"www-authenticate"],
        22 => [b"x-content-type-options"],
        25 => [b"strict-transport-security"],
        27 => [b"access-control-allow-origin"],
    )
}

/// Whether `v` is a field value the `http` crate's `HeaderValue` accepts: no control character
/// but HTAB (RFC 9110 §5.5; obs-text passes). Empty values pass.
pub fn map_value(v: &[u8]) -> bool {
    // Every byte looked at, without stopping at the first bad one: the compiler then checks
    // sixteen or more at a time (values are short, and nearly always good).
    !v.iter().fold(false, |bad, &b| bad | ((b < 0x20 && b != b'\t') | (b == 0x7f)))
}

/// Appends `fields` to `map`, in order. A field the map cannot hold is skipped; fields made by
/// Sluice's parsers and checks always convert.
pub fn append_to_map<'a>(fields: impl IntoIterator<Item = &'a Field>, map: &mut http::HeaderMap) {
    for f in fields {
        if let (Ok(n), Ok(v)) =
            (http::HeaderName::from_bytes(&f.name), http::HeaderValue::from_maybe_shared(f.value.clone()))
        {
            map.append(n, v);
        }
    }
}

/// A request's pseudo-header fields and its regular fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// `:method`.
    pub method: Bytes,
    /// `:scheme` (absent for CONNECT).
    pub scheme: Option<Bytes>,
    /// `:authority`.
    pub authority: Option<Bytes>,
    /// `:path` (absent for CONNECT).
    pub path: Option<Bytes>,
    /// `:protocol` (RFC 8441).
    pub protocol: Option<Bytes>,
    /// Whether a regular field's value holds a control character other than HTAB. RFC 9110
    /// §5.5 allows none in a valid value, but HTTP/2 (RFC 9113 §8.2.1) and HTTP/3 make only
    /// NUL, CR and LF malformed: such a request is the application's to refuse.
    pub controls: bool,
    /// Regular fields in order (cookie crumbs kept separate, §8.2.3).
    pub fields: Vec<Field>,
}

impl RequestHead {
    /// Empty it (as `default()`), keeping the field list's room.
    pub fn clear(&mut self) {
        self.method = Bytes::new();
        self.scheme = None;
        self.authority = None;
        self.path = None;
        self.protocol = None;
        self.controls = false;
        self.fields.clear();
    }

    /// The first value of a regular field.
    pub fn get(&self, name: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|f| f.name == name).map(|f| &f.value)
    }
}

/// Fields that are connection-specific and so forbidden in HTTP/2 (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: &[&[u8]] =
    &[b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"];

/// A field name is valid when it is a non-empty token of lower-case characters (RFC 9113 §8.2.1,
/// RFC 9110 §5.1); pseudo-header names are checked separately.
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| CLASS[c as usize] & NAME != 0)
}

/// RFC 9110 §5.6.2: `token = 1*tchar`. Methods are tokens (§9.1), and so are field names.
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&c| CLASS[c as usize] & TCHAR != 0)
}

/// RFC 9113 §8.2.1: no NUL, CR or LF anywhere, no leading or trailing space or tab.
fn valid_value(v: &[u8]) -> bool {
    value_classes(v).is_some()
}

/// The byte classes of a valid value, or-ed ([`CTL`] among them tells a control character
/// apart), or `None` for a value [`valid_value`] refuses.
fn value_classes(v: &[u8]) -> Option<u8> {
    let classes = v.iter().fold(0, |a, &c| a | CLASS[c as usize]);
    (classes & NOT_IN_VALUE == 0 && !matches!(v.first(), Some(b' ' | b'\t')) && !matches!(v.last(), Some(b' ' | b'\t')))
        .then_some(classes)
}

/// Byte classes, one table lookup per byte of every field checked (three comparisons and a
/// range test per byte before).
const TCHAR: u8 = 1;
/// A `tchar` that is not an upper-case letter: what a field name may hold in HTTP/2 and HTTP/3.
const NAME: u8 = 2;
const NOT_IN_VALUE: u8 = 4;
/// A control character other than HTAB (RFC 9110 §5.5: not in a valid field value).
const CTL: u8 = 8;

/// Whether `b` is a `tchar` (RFC 9110 §5.6.2), a byte of a token.
pub(crate) const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
        )
}

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if is_tchar(b) {
            t[c] |= TCHAR;
            if !b.is_ascii_uppercase() {
                t[c] |= NAME;
            }
        }
        if matches!(b, 0 | b'\r' | b'\n') {
            t[c] |= NOT_IN_VALUE;
        }
        if b < 0x20 && b != b'\t' || b == 0x7f {
            t[c] |= CTL;
        }
        c += 1;
    }
    t
};

/// Build a request head from decoded fields (in wire order), or say why it is malformed:
/// pseudo-header fields (known, unique, before regular fields, valid values), lower-case token
/// names, valid values, no connection-specific fields, `te` only `trailers`, and the mandatory
/// pseudo-header fields of a request or a CONNECT request (RFC 9113 §8.2, §8.3, §8.5).
pub fn request_head<N: Name, V: Name>(list: impl IntoIterator<Item = (N, V)>) -> Result<RequestHead, &'static str> {
    let mut head = RequestHead::default();
    fill_request_head(list, &mut head)?;
    Ok(head)
}

/// As [`request_head`], into `head` (emptied first, and left in no particular state on an
/// error): an engine reuses a head it has done with, so the next request's head is neither
/// allocated (its field list) nor moved (about 200 bytes, several times on its way out).
pub fn fill_request_head<N: Name, V: Name>(
    list: impl IntoIterator<Item = (N, V)>,
    head: &mut RequestHead,
) -> Result<(), &'static str> {
    let list = list.into_iter();
    head.clear();
    // Sized once: at most the list, less the (usually four) pseudo-header fields.
    head.fields.reserve(list.size_hint().0.saturating_sub(4).max(1));
    let mut method = None;
    let mut method_known = false;
    let mut regular_seen = false;
    for (name, value) in list {
        if let Some(pseudo) = name.as_ref().strip_prefix(b":") {
            if regular_seen {
                return Err("pseudo-header field after a regular field");
            }
            // The common methods and schemes are known valid: no byte-by-byte check (about
            // 60 instructions each, the method's token check 30 more), and kept as static
            // bytes.
            let v = value.as_ref();
            let (slot, known) = match pseudo {
                b"method" => {
                    let known: Option<&'static [u8]> = match v {
                        b"GET" => Some(b"GET"),
                        b"POST" => Some(b"POST"),
                        b"HEAD" => Some(b"HEAD"),
                        _ => None,
                    };
                    method_known = known.is_some();
                    (&mut method, known)
                }
                b"scheme" => {
                    let known: Option<&'static [u8]> = match v {
                        b"https" => Some(b"https"),
                        b"http" => Some(b"http"),
                        _ => None,
                    };
                    (&mut head.scheme, known)
                }
                b"authority" => (&mut head.authority, None),
                b"path" => (&mut head.path, None),
                b"protocol" => (&mut head.protocol, None),
                _ => return Err("unknown or response pseudo-header field"),
            };
            if slot.is_some() {
                return Err("duplicate pseudo-header field");
            }
            *slot = Some(match known {
                Some(k) => Bytes::from_static(k),
                None if valid_value(v) => value.into_bytes(),
                None => return Err("invalid pseudo-header value"),
            });
            continue;
        }
        regular_seen = true;
        let n = name.as_ref();
        let known = static_name(n);
        if known.is_none() {
            if !valid_name(n) {
                return Err("invalid field name (upper case or not a token)");
            }
            if CONNECTION_SPECIFIC.contains(&n) {
                return Err("connection-specific field");
            }
        }
        let Some(classes) = value_classes(value.as_ref()) else { return Err("invalid field value") };
        head.controls |= classes & CTL != 0;
        if n == b"te" && value.as_ref() != b"trailers" {
            return Err("te other than trailers");
        }
        let name = match known {
            Some(k) => Bytes::from_static(k),
            None => name.into_bytes(),
        };
        head.fields.push(Field { name, value: value.into_bytes() });
    }
    let Some(method) = method else { return Err("missing :method") };
    if !method_known && !is_token(&method) {
        // RFC 9110 §9.1: a method is a token; anything else is no method at all.
        return Err("invalid :method (not a token)");
    }
    head.method = method;
    if &head.method[..] == b"CONNECT" && head.protocol.is_none() {
        // §8.5: CONNECT carries only :method and :authority.
        if head.scheme.is_some() || head.path.is_some() || head.authority.is_none() {
            return Err("malformed CONNECT request");
        }
        return Ok(());
    }
    match &head.path {
        None => return Err("missing :path"),
        Some(p) if p.is_empty() => return Err("empty :path"),
        _ => {}
    }
    if head.scheme.is_none() {
        return Err("missing :scheme");
    }
    if head.protocol.is_some() && &head.method[..] != b"CONNECT" {
        return Err(":protocol on a method other than CONNECT");
    }
    Ok(())
}

/// Check a trailer section: no pseudo-header fields (RFC 9113 §8.1), same field rules as a
/// head; returns the fields or why the section is malformed.
pub fn trailers<N: Name, V: Name>(list: impl IntoIterator<Item = (N, V)>) -> Result<Vec<Field>, &'static str> {
    let list = list.into_iter();
    let mut out = Vec::with_capacity(list.size_hint().0);
    for (name, value) in list {
        let n = name.as_ref();
        if n.starts_with(b":") {
            return Err("pseudo-header field in trailers");
        }
        if !valid_name(n) || !valid_value(value.as_ref()) {
            return Err("invalid trailer field");
        }
        if CONNECTION_SPECIFIC.contains(&n) {
            return Err("connection-specific field in trailers");
        }
        out.push(Field { name: name.into_bytes(), value: value.into_bytes() });
    }
    Ok(out)
}

/// The request's `content-length`, if any: digits only, and repeated or comma-separated values
/// must agree (RFC 9110 §8.6); an error says why the value is invalid.
pub fn content_length(head: &RequestHead) -> Result<Option<u64>, &'static str> {
    let mut found: Option<u64> = None;
    for f in head.fields.iter().filter(|f| f.name == "content-length") {
        for part in f.value.split(|&c| c == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) || part.len() > 19 {
                return Err("invalid content-length");
            }
            let n: u64 = std::str::from_utf8(part).ok().and_then(|s| s.parse().ok()).ok_or("invalid content-length")?;
            if found.is_some_and(|f| f != n) {
                return Err("conflicting content-length values");
            }
            found = Some(n);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(fields: &[(&'static str, &'static str)]) -> Vec<(Bytes, Bytes)> {
        fields.iter().map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes()))).collect()
    }

    const GOOD: &[(&str, &str)] =
        &[(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/x")];

    #[test]
    fn common_methods_and_schemes_are_kept_as_static_bytes_not_slices_of_the_block() {
        // Every value a slice of one decoded block, as the HTTP/2 engine hands them over.
        let block = Bytes::from_static(b"GEThttpsa.example/xPUThttp");
        let at = |a: usize, b: usize| block.slice(a..b);
        let within = |b: &Bytes| {
            (block.as_ptr() as usize..block.as_ptr() as usize + block.len()).contains(&(b.as_ptr() as usize))
        };
        let names = [":method", ":scheme", ":authority", ":path"].map(|n| Bytes::from_static(n.as_bytes()));
        let h = request_head(names.clone().into_iter().zip([at(0, 3), at(3, 8), at(8, 17), at(17, 19)])).unwrap();
        assert_eq!((&h.method[..], h.scheme.as_deref()), (&b"GET"[..], Some(&b"https"[..])));
        assert!(!within(&h.method) && !within(h.scheme.as_ref().unwrap()), "GET and https are not kept as slices");
        assert!(within(h.authority.as_ref().unwrap()) && within(h.path.as_ref().unwrap()));
        // Others are slices of the block.
        let h = request_head(names.into_iter().zip([at(19, 22), at(22, 26), at(8, 17), at(17, 19)])).unwrap();
        assert_eq!((&h.method[..], h.scheme.as_deref()), (&b"PUT"[..], Some(&b"http"[..])));
        assert!(within(&h.method) && !within(h.scheme.as_ref().unwrap()));
    }

    #[test]
    fn byte_classes_match_the_grammar() {
        // RFC 9110 §5.6.2 tchar, spelled out here independently of the table.
        let others = b"!#$%&'*+-.^_`|~";
        for c in 0..=255u8 {
            let tchar = c.is_ascii_alphanumeric() || others.contains(&c);
            assert_eq!(is_token(&[c]), tchar, "{c}");
            assert_eq!(valid_name(&[c]), tchar && !c.is_ascii_uppercase(), "{c}");
            assert_eq!(valid_value(&[b'a', c, b'a']), !matches!(c, 0 | b'\r' | b'\n'), "{c}");
        }
        assert!(!is_token(b"") && !valid_name(b""));
        assert!(valid_value(b"") && !valid_value(b" a") && !valid_value(b"a\t"));
    }

    #[test]
    fn good_request() {
        let h = request_head(list(GOOD)).unwrap();
        assert_eq!(&h.method[..], b"GET");
        assert_eq!(h.path.as_deref(), Some(&b"/x"[..]));
    }

    #[test]
    fn status_digits_are_the_decimal_status() {
        for n in 100..=999u16 {
            assert_eq!(status_digits(n), n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn a_filled_head_holds_nothing_of_the_last_request() {
        // A reused head that held an extended CONNECT with a control character in a field.
        let mut h = request_head(list(&[
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":authority", "b.example"),
            (":path", "/chat"),
            ("x", "a\x01b"),
            ("y", "1"),
        ]))
        .unwrap();
        assert!(h.controls && h.protocol.is_some());
        let room = h.fields.capacity();
        fill_request_head(list(GOOD), &mut h).unwrap();
        assert_eq!(h, request_head(list(GOOD)).unwrap());
        assert_eq!(h.fields.capacity(), room, "the list keeps its room");
        h.clear();
        assert_eq!(h, RequestHead::default());
    }

    #[test]
    fn malformed_requests() {
        let cases: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":scheme", "https")],
            &[(":method", "GET"), (":path", "/")],
            &[(":scheme", "https"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "")],
            &[(":method", "GET"), (":method", "GET"), (":scheme", "https"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), (":status", "200")],
            &[(":method", "GET"), (":scheme", "https"), ("a", "b"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("Upper", "x")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("connection", "close")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("te", "gzip")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("x", "a\nb")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("x", " a")],
            &[(":method", "CONNECT"), (":authority", "a:443"), (":path", "/")],
            &[(":method", "G ET"), (":scheme", "https"), (":path", "/")],
            &[(":method", "GET/"), (":scheme", "https"), (":path", "/")],
            &[(":method", ""), (":scheme", "https"), (":path", "/")],
        ];
        for c in cases {
            assert!(request_head(list(c)).is_err(), "{c:?} should be malformed");
        }
        assert!(request_head(list(&[(":method", "CONNECT"), (":authority", "a:443")])).is_ok());
        // Extension methods are tokens too (RFC 9110 §9.1), in any case.
        assert!(request_head(list(&[(":method", "PROPFIND"), (":scheme", "https"), (":path", "/")])).is_ok());
        assert!(request_head(list(&[(":method", "m-search"), (":scheme", "https"), (":path", "*")])).is_ok());
        assert!(
            request_head(list(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("te", "trailers")])).is_ok()
        );
    }

    #[test]
    fn content_lengths() {
        let mut f = list(GOOD);
        f.push((Bytes::from_static(b"content-length"), Bytes::from_static(b"10, 10")));
        assert_eq!(content_length(&request_head(f.clone()).unwrap()), Ok(Some(10)));
        f.push((Bytes::from_static(b"content-length"), Bytes::from_static(b"11")));
        assert!(content_length(&request_head(f).unwrap()).is_err());
        let mut g = list(GOOD);
        g.push((Bytes::from_static(b"content-length"), Bytes::from_static(b"-1")));
        assert!(content_length(&request_head(g).unwrap()).is_err());
    }

    #[test]
    fn only_whole_common_names_are_static() {
        // Every name is found in its length's group, and each is a valid name that is not
        // connection-specific (request_head skips those checks for them).
        for n in STATIC_NAMES {
            assert_eq!(static_name(n), Some(n), "{:?}", String::from_utf8_lossy(n));
            assert!(valid_name(n) && !CONNECTION_SPECIFIC.contains(&n));
        }
        let names = request_head(list(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("user-agent", "u"),
            ("x-other", "o"),
        ]))
        .unwrap()
        .fields;
        assert_eq!(names.iter().map(|f| &f.name[..]).collect::<Vec<_>>(), [&b"user-agent"[..], b"x-other"]);
        for n in [&b"accep"[..], b"accept-", b"Accept", b"x-other", b""] {
            assert_eq!(static_name(n), None, "{:?}", String::from_utf8_lossy(n));
        }
    }

    #[test]
    fn control_characters_other_than_nul_cr_lf_are_marked_not_refused() {
        let head = |v: &'static [u8]| {
            let mut l = list(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
            l.push((Bytes::from_static(b"x-a"), Bytes::from_static(v)));
            request_head(l)
        };
        assert!(!head(b"plain text").unwrap().controls);
        assert!(!head(b"a\tb").unwrap().controls, "HTAB is allowed");
        assert!(head(b"a\x01b").unwrap().controls);
        assert!(head(b"a\x7fb").unwrap().controls);
        assert!(head(b"a\rb").is_err(), "CR is malformed, not marked");
    }

    #[test]
    fn authorities() {
        for good in [
            "localhost",
            "localhost:8443",
            "a.example",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "xn--bcher-kva.example",
            "a:",
            "b%20c",
        ] {
            assert!(valid_authority(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "localhost:99999",
            "localhost:65536",
            "a:b",
            ":80",
            "[::1",
            "[::1]x",
            "[]",
            "a/b",
            "a@b",
            "[::1]:80:1",
            "a\tb",
            "localhost:123456",
        ] {
            assert!(!valid_authority(bad), "{bad}");
        }
    }
}
