//! The send path of a connection: the engine's writes pulled in its order and handed to
//! quinn's streams, the streams quinn wakes flushed most urgent first, quinn's send window
//! and the receive window tuned, and framed bytes reported to the handlers as room.

use std::time::{Duration, Instant};

use quinn::VarInt;
use sluice_h3::{Code, Transmit};
use sluice_tune::inflight::URGENT;
use sluice_tune::window::WindowPolicy;

use super::driver::{Driver, PRUNE_FIRST};
use super::streams::{poll_once, quinn_priority, Flushed};
use super::{send_window, worth_setting};

impl Driver {
    /// Pull writes from the engine, in its order, while quinn takes them.
    pub(super) fn pump(&mut self) {
        while !self.closed {
            let Some(t) = self.engine.poll_transmit() else { break };
            match t {
                Transmit::Write { stream, data, body, fin } => {
                    let urgency = self.engine.priority(stream).map(|p| p.urgency);
                    let Some(out) = self.outs.get_mut(&stream) else { continue };
                    if let Some(u) = urgency {
                        let p = quinn_priority(u);
                        if p != out.priority {
                            out.priority = p;
                            let _ = out.send.set_priority(p);
                        }
                    }
                    for b in [data, body] {
                        if !b.is_empty() {
                            out.queue.push_back(b);
                        }
                    }
                    out.fin |= fin;
                    self.flush(stream);
                }
                Transmit::Reset { stream, code } => {
                    if let Some(mut out) = self.outs.remove(&stream) {
                        let _ = out.send.reset(VarInt::from_u64(code.0).unwrap_or_default());
                    }
                }
                Transmit::StopSending { stream, code } => {
                    if let Some(stop) = self.stops.remove(&stream) {
                        let _ = stop.send(code.0);
                    }
                }
                Transmit::Close { code, reason } => {
                    self.quic.close(VarInt::from_u64(code.0).unwrap_or_default(), reason.as_bytes());
                    self.closed = true;
                }
            }
        }
    }

    pub(super) fn flush(&mut self, id: u64) {
        let Some(out) = self.outs.get_mut(&id) else { return };
        let mut flushed = out.flush(self.pace.as_deref());
        if matches!(flushed, Flushed::Blocked) && out.priority >= quinn_priority(URGENT) {
            // An urgent stream does not wait for room in quinn's send window behind less urgent
            // data that filled it: the window is raised above anything quinn can hold now by
            // what the stream has queued, and quinn sends the most urgent stream first (the
            // next tuning pass sets the window back, which leaves what was written). Without
            // it a response head waited 190–390 ms at 20 Mbit/s for quinn's buffer to drain
            // below a window the bound had just shrunk (h3_priority test, traced).
            let want: u64 = out.queue.iter().map(|b| b.len() as u64).sum::<u64>().max(1);
            let now = Instant::now();
            let high = if now.duration_since(self.send_window_high.1) < Duration::from_secs(1) {
                self.send_window_high.0.max(self.send_window)
            } else {
                self.send_window
            };
            // Not recorded as the high-water mark: repeated raises (a QPACK stream's many small
            // writes) must not ratchet the window up.
            self.send_window = high + want;
            self.quic.set_send_window(self.send_window);
            let Some(out) = self.outs.get_mut(&id) else { return };
            flushed = out.flush(self.pace.as_deref());
        }
        let Some(out) = self.outs.get_mut(&id) else { return };
        match flushed {
            Flushed::Done => {
                if std::mem::take(&mut out.blocked) {
                    self.engine.on_stream_writable(id);
                }
            }
            Flushed::Finished => {
                if let Some(out) = self.outs.remove(&id) {
                    self.finishing.push(out.send);
                    if self.finishing.len() >= self.prune_at {
                        // Delivered (or stopped by the peer): nothing left to wait for.
                        self.finishing.retain_mut(|s| poll_once(s.stopped()).is_pending());
                        self.prune_at = (2 * self.finishing.len()).max(PRUNE_FIRST);
                    }
                }
            }
            Flushed::Blocked => {
                if !out.blocked {
                    out.blocked = true;
                    self.engine.on_stream_blocked(id);
                }
            }
            Flushed::Stopped(code) => {
                self.outs.remove(&id);
                match code {
                    Some(code) => self.engine.on_stop_sending(Instant::now(), id, code),
                    None => self.engine.on_stream_reset(Instant::now(), id, Code::H3_REQUEST_CANCELLED.0),
                }
            }
        }
    }

    /// Flush the streams quinn woke, most urgent first. quinn wakes every stream blocked on the
    /// connection's send window at once when room frees, in its own order; the first to write
    /// takes the room. Without the order a font blocked among twenty image streams got about a
    /// twenty-first of each ACK's room (the pageload experiment's font took 1.0–1.6 s over
    /// HTTP/3 at 5 Mbit/s, with the bottleneck queue short).
    pub(super) fn on_woken(&mut self) {
        let mut ids: Vec<u64> = self.woken.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
        ids.sort_by_key(|id| (std::cmp::Reverse(self.outs.get(id).map_or(i32::MIN, |o| o.priority)), *id));
        ids.dedup();
        for id in ids {
            self.flush(id);
        }
    }

    /// Give quinn a send window of `window` bytes.
    fn set_send_window(&mut self, now: Instant, window: u64) {
        self.send_window = window;
        if window >= self.send_window_high.0 || now.duration_since(self.send_window_high.1) >= Duration::from_secs(1) {
            self.send_window_high = (window, now);
        }
        self.quic.set_send_window(window);
    }

    /// quinn's send window from its congestion window, and the receive window from the tuner.
    pub(super) fn tune_windows(&mut self, now: Instant) {
        if let Some(p) = &self.pace {
            p.set_guarded(self.engine.mixed_urgencies());
        }
        let stats = self.quic.stats();
        let window = send_window(stats.path.cwnd, self.state.h3.quantum);
        if worth_setting(self.send_window, window) {
            self.set_send_window(now, window);
        }
        let target = self.tuner.on_stream_data(&mut self.tune, now, Some(self.quic.rtt()));
        if target > self.window {
            self.window = target;
            self.quic.set_receive_window(VarInt::from_u32(target));
        }
    }

    /// Hand framed bytes back to the handlers as room in their queues.
    pub(super) fn report_sent(&mut self) {
        let sent = &mut self.sent;
        self.engine.drain_sent(|id, n| sent.push((id, n)));
        if !self.sent.is_empty() {
            self.progress_at = Instant::now();
        }
        for (id, n) in self.sent.drain(..) {
            self.streams.sent(&mut self.engine, id, n);
        }
    }
}
