//! The transport side: listeners, the HTTP/1.1, HTTP/2 and HTTP/3 drivers (the only code
//! that touches sockets, spawns per-connection tasks or reads the clock for the engines), the
//! stream layer the HTTP/2 and HTTP/3 drivers share, and the glue that applies the transport
//! policy of `sluice_tune` (TCP_INFO readings, quinn's congestion controller).

pub(crate) mod admin;
pub(crate) mod date;
pub(crate) mod h1;
pub(crate) mod h2;
pub(crate) mod h3;
pub(crate) mod linger;
pub(crate) mod listen;
pub(crate) mod live;
pub(crate) mod mailbox;
pub(crate) mod notify;
pub(crate) mod progress;
pub(crate) mod quic_pace;
pub(crate) mod stream;

/// Set a connection loop's one timer for `next`, the earliest of the loop's deadlines, unless
/// it is set for an earlier instant already (`set_for`): then it fires early, finds nothing
/// due, and is set again. A deadline that moves later every turn (an idle or write timeout)
/// so costs no registration in tokio's timer wheel per turn.
pub(crate) fn arm(
    timer: std::pin::Pin<&mut tokio::time::Sleep>,
    set_for: &mut Option<tokio::time::Instant>,
    next: Option<tokio::time::Instant>,
) {
    if let Some(at) = next.filter(|&at| set_for.is_none_or(|t| at < t)) {
        timer.reset(at);
        *set_for = Some(at);
    }
}

/// How the server asks a connection to stop; each configuration generation has its own signal
/// (`io::live`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Serve on.
    Run,
    /// A reload put a new configuration in place: finish what is in progress, however long it
    /// takes, and move to a new connection at the next pause (HTTP/2 and HTTP/3: once no stream
    /// has been open for `RETIRE_IDLE`, a GOAWAY announced, then the final one a second later;
    /// HTTP/1.1: `Connection: close` on the next response).
    Retire,
    /// The server stops (SIGTERM, SIGINT): GOAWAY, and `[timeouts] drain` for what is in
    /// progress.
    Drain,
}

/// Between a reload's announced GOAWAY and the final one (h2o waits one second too): time for
/// requests the peer sent before it read the first to arrive and be served.
pub(crate) const GOAWAY_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a connection retired by a reload must have no stream open before its GOAWAY: a
/// pause between a client's bursts of work, not a gap between two requests in a row.
pub(crate) const RETIRE_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A connection's stop signal.
pub(crate) type StopRx = tokio::sync::watch::Receiver<Stop>;

/// The next change of a stop signal, with the receiver to wait for the one after: a loop keeps
/// this future pinned across its turns and sets it anew only once it has fired.
pub(crate) async fn next_stop(mut rx: StopRx) -> (Stop, StopRx) {
    if rx.changed().await.is_err() {
        // The signal's sender is gone only when the process ends.
        std::future::pending::<()>().await;
    }
    let s = *rx.borrow_and_update();
    (s, rx)
}

/// A GOAWAY a driver is to send now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GoAway {
    /// The announcement: the largest stream id, nothing refused yet.
    Announce,
    /// The final one: the last stream the connection will process.
    Final,
}

/// What the HTTP/2 and HTTP/3 drivers keep of a reload's [`Stop::Retire`]: the GOAWAY once
/// the connection has had no stream open for [`RETIRE_IDLE`], and the final one
/// [`GOAWAY_GRACE`] after it.
#[derive(Default)]
pub(crate) struct Retirement {
    retiring: bool,
    final_at: Option<tokio::time::Instant>,
}

impl Retirement {
    /// A stop signal: whether the connection must drain now (then GOAWAY, final, and a
    /// deadline are the driver's).
    pub(crate) fn on_stop(&mut self, stop: Stop) -> bool {
        match stop {
            Stop::Run => false,
            Stop::Retire => {
                self.retiring = true;
                false
            }
            Stop::Drain => {
                *self = Self::default();
                true
            }
        }
    }

    /// The next instant this needs the driver's timer, for a connection idle since
    /// `idle_since`.
    pub(crate) fn deadline(&self, idle_since: Option<tokio::time::Instant>) -> Option<tokio::time::Instant> {
        self.final_at.or_else(|| idle_since.filter(|_| self.retiring).map(|t| t + RETIRE_IDLE))
    }

    /// The GOAWAY due at `now`, if any.
    pub(crate) fn due(
        &mut self,
        now: tokio::time::Instant,
        idle_since: Option<tokio::time::Instant>,
    ) -> Option<GoAway> {
        if self.final_at.is_some_and(|t| t <= now) {
            self.final_at = None;
            return Some(GoAway::Final);
        }
        if self.retiring && idle_since.is_some_and(|t| t + RETIRE_IDLE <= now) {
            self.retiring = false;
            self.final_at = Some(now + GOAWAY_GRACE);
            return Some(GoAway::Announce);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn a_retired_connection_goes_away_at_its_first_pause_then_for_good() {
        let mut r = Retirement::default();
        let t0 = Instant::now();
        assert!(!r.on_stop(Stop::Run));
        assert_eq!(r.deadline(Some(t0)), None, "not retired: nothing to do");
        assert!(!r.on_stop(Stop::Retire));
        // Busy (no idle instant): nothing, however long.
        assert_eq!(r.deadline(None), None);
        assert_eq!(r.due(t0 + Duration::from_secs(60), None), None);
        // Idle since t0: announced once RETIRE_IDLE has passed, final GOAWAY_GRACE later.
        assert_eq!(r.deadline(Some(t0)), Some(t0 + RETIRE_IDLE));
        assert_eq!(r.due(t0 + RETIRE_IDLE / 2, Some(t0)), None);
        let at = t0 + RETIRE_IDLE;
        assert_eq!(r.due(at, Some(t0)), Some(GoAway::Announce));
        assert_eq!(r.deadline(None), Some(at + GOAWAY_GRACE), "the final one comes busy or not");
        assert_eq!(r.due(at + GOAWAY_GRACE, None), Some(GoAway::Final));
        assert_eq!(r.due(at + GOAWAY_GRACE * 10, Some(t0)), None, "each once");
        // A drain takes over from a retirement.
        let mut r = Retirement::default();
        r.on_stop(Stop::Retire);
        assert!(r.on_stop(Stop::Drain));
        assert_eq!(r.deadline(Some(t0)), None);
    }
}
