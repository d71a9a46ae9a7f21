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
pub(crate) mod mailbox;
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
