//! RFC 9218 priority parameters: the `priority` field parser and the RFC 7540 weight mapping.

use sluice_http::Priority;

fn serialize(p: Priority) -> String {
    format!("u={}, i={}", p.urgency, if p.incremental { "?1" } else { "?0" })
}

/// Raw input: byte 0 is the base priority (urgency in the low 3 bits, incremental bit 3),
/// byte 1 where the value splits in two, the rest the field value.
///
/// Urgency stays within 0–7; a parsed priority written back parses to itself, whatever the
/// base; a value is its members in order, so parsing `a, b` is parsing `b` over the result of
/// `a` (RFC 9218 §4 with RFC 8941 §3.2: later members win); heavier RFC 7540 weights are never
/// less urgent.
pub fn run(data: &[u8]) {
    let [base, split, value @ ..] = data else { return };
    let base = Priority { urgency: base & 7, incremental: base & 8 != 0 };
    let p = Priority::parse(value, base);
    assert!(p.urgency <= 7, "urgency {} out of range", p.urgency);
    let other = Priority { urgency: 7 - base.urgency, incremental: !base.incremental };
    assert_eq!(Priority::parse(serialize(p).as_bytes(), other), p, "written back");
    let at = usize::from(*split).min(value.len());
    let (a, b) = value.split_at(at);
    if let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) {
        let joined = format!("{a},{b}");
        let stepwise = Priority::parse(b.as_bytes(), Priority::parse(a.as_bytes(), base));
        assert_eq!(Priority::parse(joined.as_bytes(), base), stepwise, "{joined:?}");
    }
    if let [w0, w1, ..] = value {
        let w = u16::from_be_bytes([*w0, *w1]);
        let (lo, hi) = (Priority::from_rfc7540_weight(w), Priority::from_rfc7540_weight(w.saturating_add(1)));
        assert!(lo.urgency <= 7 && hi.urgency <= lo.urgency, "weight {w}: {lo:?} then {hi:?}");
    }
}
