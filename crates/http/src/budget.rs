//! A budget of peer actions per time window: the flood defences of both engines (stream resets,
//! PINGs, SETTINGS) count what the peer makes them do and give up beyond it.

use std::time::{Duration, Instant};

/// At most `limit` actions per fixed window of `window`, the first window starting at the first
/// action. Time is passed in; the budget reads no clock.
#[derive(Clone, Debug)]
pub struct Budget {
    limit: u32,
    count: u32,
    start: Option<Instant>,
    window: Duration,
}

impl Budget {
    /// A budget of `limit` actions per `window`.
    pub fn new(limit: u32, window: Duration) -> Self {
        Self { limit, count: 0, start: None, window }
    }

    /// Count one action at `now`; `true` once the current window holds more than `limit`.
    pub fn spend(&mut self, now: Instant) -> bool {
        let expired = self.start.is_none_or(|s| now.saturating_duration_since(s) >= self.window);
        if expired {
            self.start = Some(now);
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count > self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_past_the_limit_is_over_and_a_new_window_forgives() {
        let t0 = Instant::now();
        let mut b = Budget::new(3, Duration::from_secs(10));
        assert!(!b.spend(t0 + Duration::from_secs(5)));
        assert!(!b.spend(t0 + Duration::from_secs(6)));
        assert!(!b.spend(t0 + Duration::from_secs(14)), "the window starts at the first action");
        assert!(b.spend(t0 + Duration::from_secs(14)), "the fourth within 10 s");
        assert!(!b.spend(t0 + Duration::from_secs(15)), "a new window");
    }

    #[test]
    fn zero_limit_refuses_the_first() {
        let mut b = Budget::new(0, Duration::from_secs(1));
        assert!(b.spend(Instant::now()));
    }
}
