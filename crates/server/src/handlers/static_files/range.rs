//! Byte ranges (pure; RFC 9110 §14).

/// Most comma-separated range specs we look at; beyond this the `Range` header is ignored.
pub(super) const MAX_RANGE_SPECS: usize = 64;
/// Most ranges served in one multipart response (after coalescing); beyond this the whole
/// file is sent instead. Each part costs a header and a file descriptor.
pub(super) const MAX_RANGES: usize = 16;
/// Ranges closer than this are merged: about the size of one part header (RFC 9110 §14.6
/// allows coalescing ranges "separated by a gap that is smaller than the overhead of sending
/// multiple parts").
pub(super) const COALESCE_GAP: u64 = 80;

/// What a `Range` header asks of a representation of a given length.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ranges {
    /// Ignore the header: send everything with 200.
    Full,
    /// 206: these inclusive `(first, last)` ranges, in the order to send them.
    Partial(Vec<(u64, u64)>),
    /// 416.
    Unsatisfiable,
}

/// Digits only (no sign, no spaces); saturates at `u64::MAX` so a huge number stays
/// meaningful (a huge first-pos is unsatisfiable, a huge last-pos means "to the end").
pub(super) fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |n, b| n.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

/// Parses a `Range` header value (RFC 9110 §14.1.1, §14.2) against a representation of
/// `len` bytes. See the module documentation for what is ignored.
pub(crate) fn parse_ranges(value: &str, len: u64) -> Ranges {
    let Some((unit, specs)) = value.trim().split_once('=') else {
        return Ranges::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ranges::Full;
    }
    // (first, last, order of appearance)
    let mut wanted: Vec<(u64, u64, usize)> = Vec::new();
    let mut count = 0usize;
    let mut suffix_on_empty = false;
    for spec in specs.split(',') {
        let spec = spec.trim_matches([' ', '\t']);
        if spec.is_empty() {
            continue; // RFC 9110 §5.6.1.2: ignore empty list elements.
        }
        count += 1;
        if count > MAX_RANGE_SPECS {
            return Ranges::Full;
        }
        let Some((a, b)) = spec.split_once('-') else {
            return Ranges::Full;
        };
        if a.is_empty() {
            // suffix-range: the last `n` bytes; unsatisfiable when n is 0.
            let Some(n) = digits(b) else {
                return Ranges::Full;
            };
            if n > 0 && len > 0 {
                wanted.push((len - n.min(len), len - 1, count));
            } else if n > 0 {
                suffix_on_empty = true;
            }
            continue;
        }
        let Some(first) = digits(a) else {
            return Ranges::Full;
        };
        let last = if b.is_empty() {
            u64::MAX
        } else {
            match digits(b) {
                Some(l) if l >= first => l,
                // last-pos < first-pos makes the whole ranges-specifier invalid.
                _ => return Ranges::Full,
            }
        };
        if first < len {
            wanted.push((first, last.min(len - 1), count));
        }
    }
    if count == 0 {
        return Ranges::Full;
    }
    if wanted.is_empty() {
        // §14.1.1: with zero length only a non-zero suffix-range is satisfiable, and there is
        // no byte it could select; the whole (empty) representation is the honest answer.
        return if suffix_on_empty { Ranges::Full } else { Ranges::Unsatisfiable };
    }
    let merged = coalesce(wanted);
    if merged.len() > MAX_RANGES {
        return Ranges::Full;
    }
    Ranges::Partial(merged)
}

/// Merges overlapping or nearly adjacent ranges; each merged range is placed where its
/// earliest-requested member was requested (RFC 9110 §14.6).
pub(super) fn coalesce(mut ranges: Vec<(u64, u64, usize)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable_by_key(|r| r.0);
    let mut merged: Vec<(u64, u64, usize)> = Vec::with_capacity(ranges.len());
    for (first, last, order) in ranges {
        match merged.last_mut() {
            Some(m) if first <= m.1.saturating_add(COALESCE_GAP) => {
                m.1 = m.1.max(last);
                m.2 = m.2.min(order);
            }
            _ => merged.push((first, last, order)),
        }
    }
    merged.sort_unstable_by_key(|m| m.2);
    merged.into_iter().map(|(f, l, _)| (f, l)).collect()
}
