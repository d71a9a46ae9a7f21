//! What the send path frames, for a driver that writes it with vectored writes: the bytes the
//! engine wrote itself (frame headers, control frames, header blocks, small payloads) and,
//! where they go between those, DATA payloads as the handler gave them, not copied.
//!
//! Why: with a `Vec<u8>` every payload byte was copied into it, and the TLS layer copies it once
//! more into the record it seals. Handed on as a slice, the only user-space copy of a body byte
//! is the one into its record (callgrind, a 200 MB download over HTTP/2: one `memcpy` of every
//! byte less).

use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Payloads shorter than this are copied into the bytes: a slice costs an entry here and one in
/// the writer's list of slices, more than copying a small payload does (and a write of no
/// slices goes out without a list at all).
pub const SLICE_MIN: usize = 1024;

/// Where a frame goes: a `Vec<u8>` (every payload copied) or a [`Transmit`].
pub trait FrameSink {
    /// The bytes written so far (frame headers and everything copied).
    fn bytes(&mut self) -> &mut Vec<u8>;
    /// Append the first `n` bytes of `front` (a queued DATA payload) and advance it over them.
    fn payload_from(&mut self, front: &mut Bytes, n: usize);
    /// Everything written so far.
    fn len(&self) -> usize;
    /// Whether nothing was written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FrameSink for Vec<u8> {
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }

    fn payload_from(&mut self, front: &mut Bytes, n: usize) {
        self.extend_from_slice(&front[..n]);
        front.advance(n);
    }

    fn len(&self) -> usize {
        Self::len(self)
    }
}

/// Frames for one write: `bytes` with `slices` spliced in, each before the byte of `bytes` at
/// the offset it was added at.
#[derive(Debug, Default)]
pub struct Transmit {
    bytes: Vec<u8>,
    slices: Vec<(usize, Bytes)>,
    sliced: usize,
}

impl Transmit {
    /// An empty one whose bytes have room for `capacity`.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { bytes: Vec::with_capacity(capacity), slices: Vec::new(), sliced: 0 }
    }

    /// Forget what it holds (the slices are let go: their memory goes back to whoever shares
    /// it), keeping the room.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.slices.clear();
        self.sliced = 0;
    }

    /// Everything it holds, in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.sliced
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory it keeps for the next use, in bytes: the room of its bytes and of its list of
    /// slices (a driver that shrinks an idle connection's buffers looks at this).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity() + self.slices.capacity() * std::mem::size_of::<(usize, Bytes)>()
    }

    /// The whole content when it holds no slice (all of it copied: small responses), for a
    /// plain write.
    pub fn flat(&self) -> Option<&[u8]> {
        self.slices.is_empty().then_some(&self.bytes[..])
    }

    /// How many payloads it holds as slices.
    pub fn slices(&self) -> usize {
        self.slices.len()
    }

    /// The whole content, in order, as one vector (for tests and for drivers that cannot write
    /// slices).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FrameSink::len(self));
        let mut r = self.reader();
        while r.has_remaining() {
            out.extend_from_slice(r.chunk());
            let n = r.chunk().len();
            r.advance(n);
        }
        out
    }

    /// A reader over the content, for `AsyncWriteExt::write_all_buf` (vectored where the
    /// writer is).
    pub fn reader(&self) -> TransmitReader<'_> {
        let mut r = TransmitReader { t: self, seg: 0, at: 0, left: FrameSink::len(self) };
        r.skip_empty();
        r
    }

    /// How many segments it is made of: runs of `bytes` and the slices between them.
    fn segments(&self) -> usize {
        2 * self.slices.len() + 1
    }

    /// Segment `k`: even ones are runs of `bytes`, odd ones the slices.
    fn segment(&self, k: usize) -> &[u8] {
        let i = k / 2;
        if k % 2 == 1 {
            return &self.slices[i].1;
        }
        let start = if i == 0 { 0 } else { self.slices[i - 1].0 };
        let end = self.slices.get(i).map_or(self.bytes.len(), |&(pos, _)| pos);
        &self.bytes[start..end]
    }
}

impl FrameSink for Transmit {
    fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    fn payload_from(&mut self, front: &mut Bytes, n: usize) {
        if n < SLICE_MIN {
            self.bytes.extend_from_slice(&front[..n]);
            front.advance(n);
            return;
        }
        // The whole of it moves over as it is (no reference count touched); a part is split off.
        let part = if n == front.len() { std::mem::take(front) } else { front.split_to(n) };
        self.sliced += n;
        self.slices.push((self.bytes.len(), part));
    }

    fn len(&self) -> usize {
        Self::len(self)
    }
}

/// A cursor over a [`Transmit`].
#[derive(Debug)]
pub struct TransmitReader<'a> {
    t: &'a Transmit,
    /// The segment the cursor is in (never an empty one while bytes remain).
    seg: usize,
    /// Offset into it.
    at: usize,
    left: usize,
}

impl TransmitReader<'_> {
    fn skip_empty(&mut self) {
        while self.seg < self.t.segments() && self.at == self.t.segment(self.seg).len() {
            self.seg += 1;
            self.at = 0;
        }
    }
}

impl Buf for TransmitReader<'_> {
    fn remaining(&self) -> usize {
        self.left
    }

    fn chunk(&self) -> &[u8] {
        if self.left == 0 {
            return &[];
        }
        &self.t.segment(self.seg)[self.at..]
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.left, "advance past the end of a Transmit");
        self.left -= cnt;
        while cnt > 0 {
            let here = self.t.segment(self.seg).len() - self.at;
            if cnt < here {
                self.at += cnt;
                break;
            }
            cnt -= here;
            self.seg += 1;
            self.at = 0;
        }
        self.skip_empty();
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let mut k = self.seg;
        let mut at = self.at;
        while n < dst.len() && k < self.t.segments() {
            let s = &self.t.segment(k)[at..];
            if !s.is_empty() {
                dst[n] = IoSlice::new(s);
                n += 1;
            }
            k += 1;
            at = 0;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Transmit and the bytes it must come to; `big`, whose memory its slices share.
    fn sample() -> (Transmit, Vec<u8>, Bytes) {
        let big = Bytes::from((0..5000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let mut t = Transmit::with_capacity(64);
        let mut want = Vec::new();
        t.bytes().extend_from_slice(b"head");
        want.extend_from_slice(b"head");
        let mut whole = big.clone();
        t.payload_from(&mut whole, 5000);
        assert!(whole.is_empty());
        want.extend_from_slice(&big);
        let mut part = big.clone();
        t.payload_from(&mut part, 3000);
        assert_eq!(part.len(), 2000, "advanced over what was taken");
        want.extend_from_slice(&big[..3000]);
        t.payload_from(&mut Bytes::from_static(b"tiny"), 4);
        want.extend_from_slice(b"tiny");
        t.bytes().extend_from_slice(b"mid");
        want.extend_from_slice(b"mid");
        t.payload_from(&mut big.slice(100..2100), 2000);
        want.extend_from_slice(&big[100..2100]);
        (t, want, big)
    }

    #[test]
    fn large_payloads_are_shared_small_ones_copied() {
        let (t, want, big) = sample();
        assert_eq!(t.slices(), 3, "the three payloads of 1 KiB or more");
        assert!(t.flat().is_none());
        assert_eq!(FrameSink::len(&t), want.len());
        assert_eq!(t.to_vec(), want);
        // Shared, not copied: the slice points into the handler's memory.
        assert_eq!(t.slices[0].1.as_ptr(), big.as_ptr());
    }

    #[test]
    fn the_reader_goes_through_in_order_whatever_the_steps() {
        let (t, want, _) = sample();
        for step in [1, 7, 999, 1000, 3001, 20000] {
            let mut r = t.reader();
            let mut got = Vec::new();
            while r.has_remaining() {
                // Vectored as a writer sees it, then a partial write of `step` bytes.
                let mut io = [IoSlice::new(&[]); 8];
                let n = r.chunks_vectored(&mut io);
                let mut take = step.min(r.remaining());
                let taken = take;
                for s in &io[..n] {
                    let k = s.len().min(take);
                    got.extend_from_slice(&s[..k]);
                    take -= k;
                }
                assert_eq!(take, 0, "the slices cover what remains");
                r.advance(taken);
            }
            assert_eq!(got, want, "step {step}");
            assert!(r.chunk().is_empty());
        }
    }

    #[test]
    fn clear_keeps_the_room_and_lets_the_slices_go() {
        let (mut t, _, big) = sample();
        let cap = t.capacity();
        assert!(cap >= 3 * std::mem::size_of::<(usize, Bytes)>(), "the list of slices counts");
        t.clear();
        t.bytes().extend_from_slice(b"flat");
        assert_eq!(t.flat(), Some(&b"flat"[..]));
        t.clear();
        assert_eq!(FrameSink::len(&t), 0);
        assert_eq!(t.capacity(), cap);
        assert!(!t.reader().has_remaining());
        // Only `big` itself holds its memory now: unique again.
        drop(t);
        assert!(big.is_unique());
    }
}
