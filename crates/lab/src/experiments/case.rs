//! The link of a case: [`link_spec`] (rate and RTT, the lab's default queue) and the [`Case`]
//! the static-docroot, fairness, early-hints and proxy-memory experiments share (rate, RTT, an
//! explicit queue where the case sets one).

use std::time::Duration;

use crate::model::{DirSpec, LinkSpec, Queue};

/// The link of a case: `rate_mbit` both ways, one-way delay RTT/2 each way, no loss, a
/// drop-tail queue of 1.5 × the bandwidth-delay product (at least 20 full-size packets).
pub fn link_spec(rate_mbit: f64, rtt_ms: f64) -> LinkSpec {
    let rtt = Duration::from_secs_f64(rtt_ms.max(0.0) / 1e3);
    let bdp = rate_mbit * 1e6 / 8.0 * rtt.as_secs_f64();
    let queue = Queue::Bytes(((1.5 * bdp).round() as usize).max(20 * 1500));
    let dir = DirSpec { rate_mbit, delay: rtt / 2, queue, loss_pct: 0.0 };
    LinkSpec { up: dir, down: dir }
}

/// One link setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Name in the CSV: `5mbit-40ms-q1MB`.
    pub name: String,
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Drop-tail queue in bytes (`None`: the lab's default 1.5 × BDP).
    pub queue_bytes: Option<usize>,
    /// `priority` only: `Some(n)`, the busy connection carries one download instead of the
    /// images, and the stylesheet is requested once `n` bytes of it have arrived.
    pub lone: Option<u64>,
}

impl Case {
    /// The link of this case.
    pub fn link(&self) -> LinkSpec {
        let mut spec = link_spec(self.rate_mbit, self.rtt_ms);
        if let Some(q) = self.queue_bytes {
            spec.up.queue = Queue::Bytes(q);
            spec.down.queue = Queue::Bytes(q);
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_of_a_case() {
        let s = link_spec(200.0, 40.0);
        assert_eq!(s.up, s.down);
        assert_eq!(s.up.delay, Duration::from_millis(20));
        assert_eq!(s.up.rate_mbit, 200.0);
        // BDP = 25 MB/s × 40 ms = 1 MB; 1.5 × BDP.
        assert_eq!(s.up.queue, Queue::Bytes(1_500_000));
        assert_eq!(link_spec(200.0, 10.0).up.queue, Queue::Bytes(375_000));
        assert_eq!(link_spec(1.0, 1.0).up.queue, Queue::Bytes(30_000));
        let c = Case { name: "c".into(), rate_mbit: 5.0, rtt_ms: 40.0, queue_bytes: Some(1_000_000), lone: None };
        assert_eq!((c.link().up.queue, c.link().down.queue), (Queue::Bytes(1_000_000), Queue::Bytes(1_000_000)));
    }
}
