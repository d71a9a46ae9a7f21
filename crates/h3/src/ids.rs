//! QUIC stream ids (RFC 9000 §2.1) and the set of streams we are done with.

use std::collections::BTreeMap;

/// What a stream id says about its stream: the two low bits are the initiator (bit 0: server)
/// and the directionality (bit 1: unidirectional), RFC 9000 §2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 0x0: a client-initiated bidirectional stream, i.e. a request stream (RFC 9114 §6.1).
    Request,
    /// 0x2: a client-initiated unidirectional stream (RFC 9114 §6.2).
    ClientUni,
    /// 0x1: server-initiated bidirectional; HTTP/3 does not use these.
    ServerBidi,
    /// 0x3: one of our own unidirectional streams.
    ServerUni,
}

impl Kind {
    /// The kind of stream `id`.
    pub fn of(id: u64) -> Self {
        match id & 0x3 {
            0x0 => Self::Request,
            0x2 => Self::ClientUni,
            0x1 => Self::ServerBidi,
            _ => Self::ServerUni,
        }
    }
}

/// Whether the client opened stream `id` (bit 0 clear, RFC 9000 §2.1).
pub fn is_client_initiated(id: u64) -> bool {
    id & 0x1 == 0
}

/// Whether stream `id` is unidirectional (bit 1 set, RFC 9000 §2.1).
pub fn is_unidirectional(id: u64) -> bool {
    id & 0x2 != 0
}

/// Stream ids we are done with, as ranges of stream sequence numbers (`id >> 2`), so that late
/// data or resets for them are ignored. QUIC opens streams of one type in order and few stay
/// open at once, so closed streams form a few long runs: the map holds at most one range more
/// than there are streams still open below the highest closed one.
#[derive(Debug, Default)]
pub(crate) struct Retired {
    /// Start → end (exclusive), disjoint and not adjacent.
    ranges: BTreeMap<u64, u64>,
}

impl Retired {
    pub(crate) fn insert(&mut self, id: u64) {
        let n = id >> 2;
        if self.contains(id) {
            return;
        }
        let (mut start, mut end) = (n, n + 1);
        if let Some((&s, &e)) = self.ranges.range(..n).next_back() {
            if e == n {
                start = s;
                self.ranges.remove(&s);
            }
        }
        if let Some(e) = self.ranges.remove(&(n + 1)) {
            end = e;
        }
        self.ranges.insert(start, end);
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        let n = id >> 2;
        self.ranges.range(..=n).next_back().is_some_and(|(_, &e)| n < e)
    }

    #[cfg(test)]
    fn runs(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiator_and_direction_bits() {
        assert!(is_client_initiated(0) && !is_unidirectional(0));
        assert!(is_client_initiated(2) && is_unidirectional(2));
        assert!(!is_client_initiated(1) && !is_unidirectional(1));
        assert!(!is_client_initiated(7) && is_unidirectional(7));
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of(0), Kind::Request);
        assert_eq!(Kind::of(4), Kind::Request);
        assert_eq!(Kind::of(2), Kind::ClientUni);
        assert_eq!(Kind::of(3), Kind::ServerUni);
        assert_eq!(Kind::of(5), Kind::ServerBidi);
    }

    #[test]
    fn merges_runs() {
        let mut r = Retired::default();
        for id in [0, 8, 4, 16] {
            r.insert(id);
        }
        assert!(r.contains(0) && r.contains(4) && r.contains(8) && r.contains(16));
        assert!(!r.contains(12) && !r.contains(20));
        assert_eq!(r.runs(), 2);
        r.insert(12);
        assert_eq!(r.runs(), 1);
        r.insert(12);
        assert_eq!(r.runs(), 1);
        for id in (24..4000).step_by(4) {
            r.insert(id);
        }
        assert_eq!(r.runs(), 2, "one gap at 20");
    }
}
