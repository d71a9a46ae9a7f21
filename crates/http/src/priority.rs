//! RFC 9218 priority parameters as carried by the `priority` header field (§4) and the
//! mapping of RFC 7540 weights onto them.

/// Urgency and incremental flag (RFC 9218 §4.1, §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// 0 (most urgent) to 7.
    pub urgency: u8,
    /// Whether the response can be used as it arrives (and so shares bandwidth).
    pub incremental: bool,
}

impl Default for Priority {
    /// RFC 9218 §4.1: urgency 3; §4.2: not incremental.
    fn default() -> Self {
        Self { urgency: 3, incremental: false }
    }
}

impl Priority {
    /// Parse a `priority` field value (a Structured Fields dictionary, RFC 8941). Unknown keys and
    /// out-of-range or mistyped values are ignored, as RFC 9218 §4 requires, keeping `base`.
    pub fn parse(value: &[u8], base: Self) -> Self {
        let mut p = base;
        let Ok(s) = std::str::from_utf8(value) else { return p };
        for member in s.split(',') {
            let member = member.trim_matches([' ', '\t']);
            let (key, val) = match member.split_once('=') {
                Some((k, v)) => (k, Some(v.split(';').next().unwrap_or("").trim())),
                None => (member.split(';').next().unwrap_or(""), None),
            };
            match (key, val) {
                ("u", Some(v)) => {
                    if let Ok(u) = v.parse::<u8>() {
                        if u <= 7 {
                            p.urgency = u;
                        }
                    }
                }
                ("i", None) | ("i", Some("?1")) => p.incremental = true,
                ("i", Some("?0")) => p.incremental = false,
                _ => {}
            }
        }
        p
    }

    /// Map an RFC 7540 weight (1–256) onto urgency, for clients that still send PRIORITY
    /// information: heavier weights are more urgent; RFC 7540 streams share bandwidth by
    /// weight, so they are incremental. 256 → 0 … 1 → 7 in eight equal bands of 32.
    pub fn from_rfc7540_weight(weight: u16) -> Self {
        let w = weight.clamp(1, 256);
        Self { urgency: (7 - (w - 1) / 32) as u8, incremental: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dictionary() {
        let d = Priority::default();
        assert_eq!(Priority::parse(b"u=0", d), Priority { urgency: 0, incremental: false });
        assert_eq!(Priority::parse(b"u=5, i", d), Priority { urgency: 5, incremental: true });
        assert_eq!(Priority::parse(b"i=?0, u=1", d), Priority { urgency: 1, incremental: false });
        assert_eq!(Priority::parse(b"u=9", d), d, "out of range ignored");
        assert_eq!(Priority::parse(b"u=x, foo=1", d), d);
        assert_eq!(Priority::parse(b"u=2;a=b, i;q", d), Priority { urgency: 2, incremental: true });
    }

    #[test]
    fn maps_weights() {
        assert_eq!(Priority::from_rfc7540_weight(256).urgency, 0);
        assert_eq!(Priority::from_rfc7540_weight(16).urgency, 7);
        assert_eq!(Priority::from_rfc7540_weight(220).urgency, 1);
        assert_eq!(Priority::from_rfc7540_weight(1).urgency, 7);
    }
}
