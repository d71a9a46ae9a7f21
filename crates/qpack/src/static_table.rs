//! The QPACK static table (RFC 9204 §3.1, Appendix A).
//!
//! Unlike HPACK's, the QPACK static table is indexed from 0 (§3.1), and it
//! is addressed separately from the dynamic table: representations carry a
//! `T` bit saying which table an index refers to.

/// Number of entries in the static table (RFC 9204 Appendix A: 0..=98).
pub(crate) const LEN: usize = 99;

/// RFC 9204 Appendix A, in index order; index `i` is `ENTRIES[i]`.
#[rustfmt::skip]
pub(crate) static ENTRIES: [(&[u8], &[u8]); LEN] = [
    /*  0 */ (b":authority", b""),
    /*  1 */ (b":path", b"/"),
    /*  2 */ (b"age", b"0"),
    /*  3 */ (b"content-disposition", b""),
    /*  4 */ (b"content-length", b"0"),
    /*  5 */ (b"cookie", b""),
    /*  6 */ (b"date", b""),
    /*  7 */ (b"etag", b""),
    /*  8 */ (b"if-modified-since", b""),
    /*  9 */ (b"if-none-match", b""),
    /* 10 */ (b"last-modified", b""),
    /* 11 */ (b"link", b""),
    /* 12 */ (b"location", b""),
    /* 13 */ (b"referer", b""),
    /* 14 */ (b"set-cookie", b""),
    /* 15 */ (b":method", b"CONNECT"),
    /* 16 */ (b":method", b"DELETE"),
    /* 17 */ (b":method", b"GET"),
    /* 18 */ (b":method", b"HEAD"),
    /* 19 */ (b":method", b"OPTIONS"),
    /* 20 */ (b":method", b"POST"),
    /* 21 */ (b":method", b"PUT"),
    /* 22 */ (b":scheme", b"http"),
    /* 23 */ (b":scheme", b"https"),
    /* 24 */ (b":status", b"103"),
    /* 25 */ (b":status", b"200"),
    /* 26 */ (b":status", b"304"),
    /* 27 */ (b":status", b"404"),
    /* 28 */ (b":status", b"503"),
    /* 29 */ (b"accept", b"*/*"),
    /* 30 */ (b"accept", b"application/dns-message"),
    /* 31 */ (b"accept-encoding", b"gzip, deflate, br"),
    /* 32 */ (b"accept-ranges", b"bytes"),
    /* 33 */ (b"access-control-allow-headers", b"cache-control"),
    /* 34 */ (b"access-control-allow-headers", b"content-type"),
    /* 35 */ (b"access-control-allow-origin", b"*"),
    /* 36 */ (b"cache-control", b"max-age=0"),
    /* 37 */ (b"cache-control", b"max-age=2592000"),
    /* 38 */ (b"cache-control", b"max-age=604800"),
    /* 39 */ (b"cache-control", b"no-cache"),
    /* 40 */ (b"cache-control", b"no-store"),
    /* 41 */ (b"cache-control", b"public, max-age=31536000"),
    /* 42 */ (b"content-encoding", b"br"),
    /* 43 */ (b"content-encoding", b"gzip"),
    /* 44 */ (b"content-type", b"application/dns-message"),
    /* 45 */ (b"content-type", b"application/javascript"),
    /* 46 */ (b"content-type", b"application/json"),
    /* 47 */ (b"content-type", b"application/x-www-form-urlencoded"),
    /* 48 */ (b"content-type", b"image/gif"),
    /* 49 */ (b"content-type", b"image/jpeg"),
    /* 50 */ (b"content-type", b"image/png"),
    /* 51 */ (b"content-type", b"text/css"),
    /* 52 */ (b"content-type", b"text/html; charset=utf-8"),
    /* 53 */ (b"content-type", b"text/plain"),
    /* 54 */ (b"content-type", b"text/plain;charset=utf-8"),
    /* 55 */ (b"range", b"bytes=0-"),
    /* 56 */ (b"strict-transport-security", b"max-age=31536000"),
    /* 57 */ (b"strict-transport-security", b"max-age=31536000; includesubdomains"),
    /* 58 */ (b"strict-transport-security", b"max-age=31536000; includesubdomains; preload"),
    /* 59 */ (b"vary", b"accept-encoding"),
    /* 60 */ (b"vary", b"origin"),
    /* 61 */ (b"x-content-type-options", b"nosniff"),
    /* 62 */ (b"x-xss-protection", b"1; mode=block"),
    /* 63 */ (b":status", b"100"),
    /* 64 */ (b":status", b"204"),
    /* 65 */ (b":status", b"206"),
    /* 66 */ (b":status", b"302"),
    /* 67 */ (b":status", b"400"),
    /* 68 */ (b":status", b"403"),
    /* 69 */ (b":status", b"421"),
    /* 70 */ (b":status", b"425"),
    /* 71 */ (b":status", b"500"),
    /* 72 */ (b"accept-language", b""),
    /* 73 */ (b"access-control-allow-credentials", b"FALSE"),
    /* 74 */ (b"access-control-allow-credentials", b"TRUE"),
    /* 75 */ (b"access-control-allow-headers", b"*"),
    /* 76 */ (b"access-control-allow-methods", b"get"),
    /* 77 */ (b"access-control-allow-methods", b"get, post, options"),
    /* 78 */ (b"access-control-allow-methods", b"options"),
    /* 79 */ (b"access-control-expose-headers", b"content-length"),
    /* 80 */ (b"access-control-request-headers", b"content-type"),
    /* 81 */ (b"access-control-request-method", b"get"),
    /* 82 */ (b"access-control-request-method", b"post"),
    /* 83 */ (b"alt-svc", b"clear"),
    /* 84 */ (b"authorization", b""),
    /* 85 */ (b"content-security-policy", b"script-src 'none'; object-src 'none'; base-uri 'none'"),
    /* 86 */ (b"early-data", b"1"),
    /* 87 */ (b"expect-ct", b""),
    /* 88 */ (b"forwarded", b""),
    /* 89 */ (b"if-range", b""),
    /* 90 */ (b"origin", b""),
    /* 91 */ (b"purpose", b"prefetch"),
    /* 92 */ (b"server", b""),
    /* 93 */ (b"timing-allow-origin", b"*"),
    /* 94 */ (b"upgrade-insecure-requests", b"1"),
    /* 95 */ (b"user-agent", b""),
    /* 96 */ (b"x-forwarded-for", b""),
    /* 97 */ (b"x-frame-options", b"deny"),
    /* 98 */ (b"x-frame-options", b"sameorigin"),
];

/// Looks up a static entry by index; `None` past index 98.
pub(crate) fn get(index: u64) -> Option<(&'static [u8], &'static [u8])> {
    usize::try_from(index).ok().and_then(|i| ENTRIES.get(i)).copied()
}

/// Result of searching the static table for a field line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    /// Name and value both match the entry at this index.
    Full(u8),
    /// Only the name matches (the lowest such index).
    Name(u8),
    /// The name is not in the static table.
    None,
}

/// Finds the best static entry for `name: value`.
///
/// A linear scan: 99 short comparisons, most rejected on length, cost less
/// than hashing the field would.
pub(crate) fn find(name: &[u8], value: &[u8]) -> Match {
    // Through a hash index built once: a scan of the 99 entries cost about a thousand
    // instructions per field encoded.
    static INDEX: std::sync::OnceLock<sluice_hpack::StaticIndex> = std::sync::OnceLock::new();
    match INDEX.get_or_init(|| sluice_hpack::StaticIndex::new(&ENTRIES)).find(name, value) {
        Some((i, true)) => Match::Full(i as u8),
        Some((i, false)) => Match::Name(i as u8),
        None => Match::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_what_a_scan_finds() {
        let index = sluice_hpack::StaticIndex::new(&ENTRIES);
        let mut probes: Vec<(&[u8], &[u8])> = ENTRIES.to_vec();
        probes.extend([
            (&b":status"[..], &b"999"[..]),
            (b"content-type", b"text/x-unknown"),
            (b"x-none", b""),
            (b"", b""),
            (b"accept", b"*/*"),
        ]);
        for (n, v) in probes {
            let want = index.scan(n, v);
            assert_eq!(index.find(n, v), want);
            let m = match want {
                Some((i, true)) => Match::Full(i as u8),
                Some((i, false)) => Match::Name(i as u8),
                None => Match::None,
            };
            assert_eq!(find(n, v), m);
        }
        // Names repeat far apart in this table: the first is the name match.
        assert_eq!(find(b":status", b"999"), Match::Name(24));
    }

    #[test]
    fn spot_checks_against_appendix_a() {
        assert_eq!(ENTRIES.len(), 99);
        assert_eq!(get(0), Some((&b":authority"[..], &b""[..])));
        assert_eq!(get(1), Some((&b":path"[..], &b"/"[..])));
        assert_eq!(get(17), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(get(25), Some((&b":status"[..], &b"200"[..])));
        assert_eq!(get(52), Some((&b"content-type"[..], &b"text/html; charset=utf-8"[..])));
        assert_eq!(get(63), Some((&b":status"[..], &b"100"[..])));
        assert_eq!(get(84), Some((&b"authorization"[..], &b""[..])));
        assert_eq!(get(98), Some((&b"x-frame-options"[..], &b"sameorigin"[..])));
        assert_eq!(get(99), None);
        assert_eq!(get(u64::MAX), None);
    }

    #[test]
    fn names_are_lowercase_and_tidy() {
        for (name, value) in ENTRIES {
            assert!(!name.is_empty());
            assert!(name.iter().all(|b| !b.is_ascii_uppercase() && !b.is_ascii_whitespace()), "{name:?}");
            assert_eq!(value.trim_ascii(), value, "{value:?}");
        }
    }

    #[test]
    fn find_prefers_full_matches() {
        assert_eq!(find(b":method", b"GET"), Match::Full(17));
        assert_eq!(find(b":method", b"PATCH"), Match::Name(15));
        assert_eq!(find(b":status", b"500"), Match::Full(71));
        assert_eq!(find(b"x-custom", b""), Match::None);
        assert_eq!(find(b"cookie", b""), Match::Full(5));
    }
}
