//! The connection's buffers: reads in place into what follows the last read, a new buffer
//! taken when one runs low, small ones while the connection has no stream open; and the
//! receive low-water mark that batches reads of fast request bodies.

use std::os::fd::RawFd;
use std::time::Instant;

use bytes::BytesMut;
use sluice_h2::frame::{Head, HEADER_LEN, MAX_FRAME_SIZE};
use sluice_h2::Connection;
use sluice_tls::split::{ReadChunks, ReadHalf};
use sluice_tune::recv_mark::RecvMark;

/// Read buffer while the connection has no stream open, and while it has; a new one is taken
/// when less than a quarter of that is left (reads go into what follows the last one, and the
/// engine keeps slices of them, so a buffer is freed when its last DATA payload is). Idle, 256
/// bytes: over TLS the records are read into rustls's own buffer and this one takes plaintext,
/// so a larger request head only takes a few more reads (1 KiB cost 0.7 kB per idle connection,
/// 4 KiB 3 kB; `scripts/bench-idle.sh`).
pub(super) const IDLE_READ: usize = 256;
pub(super) const BUSY_READ: usize = 64 * 1024;
/// Write buffer kept while the connection has no stream open: none (the next write allocates;
/// keeping 16 KiB cost 4.6 kB per idle connection, `scripts/bench-idle.sh`).
pub(super) const IDLE_WRITE: usize = 0;
/// How long a connection has no stream open before its buffers shrink to the idle sizes.
pub(super) const SHRINK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Set the socket's receive low-water mark to `v` (0: none), and tell the reader whether to
/// expect batches; if the system refuses, stop batching reads on this connection.
pub(super) fn set_mark<S: ReadChunks>(fd: RawFd, rd: &ReadHalf<S>, mark: &mut Option<RecvMark>, v: u32) {
    if let Err(e) = sluice_sys::sock::set_rcvlowat(fd, v.max(1)) {
        tracing::debug!(error = %e, "SO_RCVLOWAT refused: reads are not batched on this connection");
        let _ = sluice_sys::sock::set_rcvlowat(fd, 1);
        *mark = None;
        rd.set_bulk(false);
        return;
    }
    rd.set_bulk(v > 0);
}

/// The connection's read buffers: reads go into what follows the last one, and the engine
/// keeps slices of them (DATA payloads), so a buffer's memory is in use until its last payload
/// is consumed. When one runs low, the one before it is taken back if nothing holds it any
/// more (a handler that has consumed everything it was given); else a new one is allocated.
pub(super) struct ReadBufs {
    pub(super) cur: BytesMut,
    prev: Option<BytesMut>,
    /// The size `cur` was allocated with (its capacity shrinks as reads are split off).
    size: usize,
}

impl ReadBufs {
    pub(super) fn new(size: usize) -> Self {
        Self { cur: BytesMut::with_capacity(size), prev: None, size }
    }

    /// Whether it holds more than an idle connection needs.
    pub(super) fn big(&self) -> bool {
        self.size > IDLE_READ || self.prev.is_some()
    }

    /// Move on to a buffer of `size` (the previous one, or a new one), starting with the bytes
    /// of a frame the last read cut (of a DATA frame, only a header for its rest when the
    /// engine hands on the part read; of any other, that part: under 64 KiB), so that the reads
    /// that follow go on joining them in place (see `Connection::take_unparsed_input`). With
    /// `keep` false, as when shrinking, the old buffers are let go.
    ///
    /// The new buffer has room for the whole of the frame it starts with, so that a large frame
    /// is copied once, not once per read: an idle connection reads 256 bytes at a time, and each
    /// new buffer started with all of the frame so far (for a 64 KiB HEADERS frame sent to a
    /// connection with no stream open, 256 buffers and about 8 MB copied, by the arithmetic).
    pub(super) fn renew(&mut self, conn: &mut Connection, size: usize, keep: bool) {
        let unparsed = conn.take_unparsed_input(Instant::now());
        let frame = Head::parse(&unparsed).map_or(0, |h| HEADER_LEN + h.len.min(MAX_FRAME_SIZE) as usize);
        let want = (size + unparsed.len()).max(frame);
        let reused = self.prev.take().filter(|_| keep).and_then(|mut b| b.try_reclaim(want).then_some(b));
        let mut next = reused.unwrap_or_else(|| BytesMut::with_capacity(want));
        next.extend_from_slice(&unparsed);
        drop(unparsed);
        let old = std::mem::replace(&mut self.cur, next);
        self.size = size;
        if keep {
            self.prev = Some(old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_h2::frame::PREFACE;

    #[test]
    fn a_new_read_buffer_has_room_for_the_whole_frame_it_starts_with() {
        let now = Instant::now();
        let windows = sluice_tune::window::FixedWindows { stream: 65_535, connection: 65_535 };
        let mut conn = Connection::new(sluice_h2::Config::default(), Box::new(windows), now);
        let mut input = PREFACE.to_vec();
        Head { len: 0, kind: 0x4, flags: 0, stream: 0 }.encode(&mut input);
        // The first 1,000 bytes of a 40,000-byte frame (of an unknown type: skipped when whole).
        Head { len: 40_000, kind: 0xfa, flags: 0, stream: 0 }.encode(&mut input);
        input.extend([0; 1_000]);
        conn.handle_input(now, &input);
        let mut rbuf = ReadBufs::new(IDLE_READ);
        rbuf.renew(&mut conn, IDLE_READ, true);
        assert_eq!(rbuf.cur.len(), HEADER_LEN + 1_000, "the part read is carried over");
        assert!(rbuf.cur.capacity() >= HEADER_LEN + 40_000, "room for the rest: {}", rbuf.cur.capacity());
        // Nothing unparsed: the size asked for.
        let mut conn = Connection::new(sluice_h2::Config::default(), Box::new(windows), now);
        conn.handle_input(now, &input[..PREFACE.len() + HEADER_LEN]);
        rbuf.renew(&mut conn, IDLE_READ, false);
        assert_eq!((rbuf.cur.len(), rbuf.cur.capacity()), (0, IDLE_READ));
    }
}
