//! Telling a service manager (systemd's `Type=notify-reload`) where the server is: ready once
//! it listens, reloading while a reload runs, stopping when it drains. Nothing happens unless
//! `NOTIFY_SOCKET` is set. Through the sd-notify crate: the protocol is a datagram on a unix
//! socket, and the crate also reads the monotonic clock the reload message must carry.

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(%e, "cannot notify the service manager");
    }
}

/// Listening: start-up or a reload is over.
pub(crate) fn ready() {
    send(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

/// A reload starts (systemd 253 and later want the monotonic time with it, or they fail the
/// reload).
pub(crate) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// Draining before exit.
pub(crate) fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}
