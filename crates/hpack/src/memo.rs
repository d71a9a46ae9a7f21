//! The last field list an encoder wrote and its encoded bytes, shared by the HPACK and QPACK
//! encoders. A server repeats its response heads (every response for one file, every error of a
//! kind), and comparing a list costs a fraction of encoding it (finding each field in a table,
//! Huffman coding literals). The encoder decides when a kept block is still valid: it keys the
//! memo on the state its encoding depended on (HPACK: the dynamic table's; QPACK without a
//! dynamic table: nothing).

/// Longest list a memo keeps, counting names, values and 32 bytes per line (what the memo spends
/// per line, and the line's share of the block): a typical head is a few hundred bytes, and a
/// long one (a proxied origin's) must not stay in every connection's memory.
const MAX_MEMO: usize = 1024;
/// What a line costs against [`MAX_MEMO`] beside its name and value.
const LINE_OVERHEAD: usize = 32;

/// A shared part of a list, known by identity: lists that hold the same `Arc` hold the same
/// lines there (what is behind an `Arc` does not change while the memo holds a clone of it).
pub type Key = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// A part of a list that stands for its lines with an image cheaper to compare than the
/// lines one by one (a proxied response's parsed fields: the head's bytes and where each
/// field lies in them, one comparison where line by line would be two per field).
pub trait Imprint {
    /// How long the image is.
    fn imprint_len(&self) -> usize;
    /// Append the image of the lines.
    fn imprint(&self, out: &mut Vec<u8>);
    /// Whether `kept`, an image [`imprint`](Self::imprint) made, is this part's: if so the
    /// lines are the ones it was made from, in order.
    fn is_imprint(&self, kept: &[u8]) -> bool;
}

/// A kept list, its block, and the encoder state `S` the block holds for.
pub struct ListMemo<S> {
    /// `None`: nothing kept.
    state: Option<S>,
    /// With a key, the kept lines are the list's other lines: the key stands for the rest.
    key: Option<Key>,
    /// With an image (`imprinted`), the kept lines are the list's other lines: the image
    /// stands for the rest.
    imprinted: bool,
    image: Vec<u8>,
    /// The lines' names and values, back to back.
    src: Vec<u8>,
    /// Per line: name length, value length, never-indexed.
    lens: Vec<(usize, usize, bool)>,
    /// The encoded block.
    out: Vec<u8>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for ListMemo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListMemo")
            .field("state", &self.state)
            .field("keyed", &self.key.is_some())
            .field("imprinted", &self.imprinted)
            .field("lines", &self.lens.len())
            .field("block", &self.out.len())
            .finish()
    }
}

impl<S> Default for ListMemo<S> {
    fn default() -> Self {
        Self {
            state: None,
            key: None,
            imprinted: false,
            image: Vec::new(),
            src: Vec::new(),
            lens: Vec::new(),
            out: Vec::new(),
        }
    }
}

impl<S: Copy + PartialEq> ListMemo<S> {
    /// The state the kept block holds for, if one is kept.
    pub fn state(&self) -> Option<S> {
        self.state
    }

    /// The kept block.
    pub fn block(&self) -> &[u8] {
        &self.out
    }

    /// Keep nothing (the encoder's state moved on).
    pub fn forget(&mut self) {
        self.state = None;
        self.key = None;
        self.imprinted = false;
    }

    /// Whether a block is kept and `lines` (name, value, never-indexed) are its lines, one by one.
    pub fn holds<'a>(&self, lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>) -> bool {
        self.key.is_none() && !self.imprinted && self.holds_lines(lines)
    }

    /// Whether a block is kept for a list with the part `part` (by its image) and the other
    /// lines `lines`.
    pub fn holds_imprinted<'a>(
        &self,
        part: &dyn Imprint,
        lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>,
    ) -> bool {
        self.imprinted && self.state.is_some() && part.is_imprint(&self.image) && self.holds_lines(lines)
    }

    /// Whether a block is kept for a list with the shared part `key` (by identity: the address
    /// of what the key's `Arc` holds) and the other lines `lines`.
    pub fn holds_keyed<'a>(&self, key: *const (), lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>) -> bool {
        self.key.as_ref().is_some_and(|k| std::ptr::eq(std::sync::Arc::as_ptr(k).cast::<()>(), key))
            && self.holds_lines(lines)
    }

    fn holds_lines<'a>(&self, lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>) -> bool {
        if self.state.is_none() {
            return false;
        }
        let mut at = 0;
        let mut kept = self.lens.iter();
        for (name, value, never) in lines {
            let Some(&(n, v, s)) = kept.next() else { return false };
            if n != name.len() || v != value.len() || s != never {
                return false;
            }
            let Some(kept) = self.src.get(at..at + n + v) else { return false };
            if !same(&kept[..n], name) || !same(&kept[n..], value) {
                return false;
            }
            at += n + v;
        }
        kept.next().is_none()
    }

    /// Keep `lines` and their block `out`, for the encoder state `state` (nothing, if the lines
    /// are longer than `MAX_MEMO`).
    pub fn keep<'a>(&mut self, lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>, out: &[u8], state: S) {
        self.keep_keyed(None, lines, out, state);
    }

    /// Keep `out`, the block of a list made of the part `part` (kept as its image) and the
    /// other lines `lines` (nothing, if the image with those lines, or the block, is longer
    /// than `MAX_MEMO`).
    pub fn keep_imprinted<'a>(
        &mut self,
        part: &dyn Imprint,
        lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        out: &[u8],
        state: S,
    ) {
        self.image.clear();
        let used = part.imprint_len();
        if used > MAX_MEMO {
            self.forget();
            return;
        }
        part.imprint(&mut self.image);
        if self.keep_lines(used, lines, out) {
            self.imprinted = true;
            self.state = Some(state);
        }
    }

    /// Keep `out`, the block of a list with the shared part `key` and the other lines `lines`
    /// (nothing, if those lines or the block are longer than `MAX_MEMO`).
    pub fn keep_keyed<'a>(
        &mut self,
        key: Option<Key>,
        lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        out: &[u8],
        state: S,
    ) {
        if self.keep_lines(0, lines, out) {
            self.key = key;
            self.state = Some(state);
        }
    }

    /// Forget what was kept, then keep `lines` and the block `out` if they fit in `MAX_MEMO`
    /// beside `used` bytes already spent (an image). The caller sets what stands for the rest
    /// of the list and the state when this returns true.
    fn keep_lines<'a>(
        &mut self,
        used: usize,
        lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        out: &[u8],
    ) -> bool {
        self.forget();
        self.src.clear();
        self.lens.clear();
        for (name, value, never) in lines {
            let line = name.len() + value.len() + LINE_OVERHEAD;
            if used + self.src.len() + self.lens.len() * LINE_OVERHEAD + line > MAX_MEMO {
                return false;
            }
            self.src.extend_from_slice(name);
            self.src.extend_from_slice(value);
            self.lens.push((name.len(), value.len(), never));
        }
        // A shared part's lines are not kept, so the block is bounded on its own.
        if out.len() > MAX_MEMO {
            return false;
        }
        self.out.clear();
        self.out.extend_from_slice(out);
        true
    }
}

/// `a == b`, inline. A head's names and values are short, and the library's comparison calls
/// `memcmp` for each (about 20 instructions a call before a byte is compared): here, eight
/// bytes at a time, the last eight overlapping the ones before, and shorter slices as two
/// overlapping words of four or byte by byte.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word8 = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let word4 = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap_or_default());
    match len {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, len - 4) == word4(b, len - 4),
        _ => {
            let mut at = 0;
            while at + 8 < len {
                if word8(a, at) != word8(b, at) {
                    return false;
                }
                at += 8;
            }
            word8(a, len - 8) == word8(b, len - 8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_is_slice_equality() {
        let base: Vec<u8> = (0..40u8).collect();
        for len in 0..40 {
            let a = &base[..len];
            let copy = a.to_vec();
            assert!(same(a, a) && same(a, &copy));
            assert!(!same(a, &base[..len + 1]));
            // One byte changed, wherever it is.
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same(a, &b), "len {len}, byte {at}");
            }
        }
    }

    #[test]
    fn a_list_over_the_bound_is_not_kept() {
        let mut m = ListMemo::default();
        let long = vec![b'v'; MAX_MEMO];
        m.keep([(&b"x-long"[..], &long[..], false)].into_iter(), b"block", ());
        assert_eq!(m.state(), None);
        // Many short lines count their overhead too.
        let lines: Vec<(&[u8], &[u8], bool)> =
            (0..MAX_MEMO / LINE_OVERHEAD).map(|_| (&b"a"[..], &b""[..], false)).collect();
        m.keep(lines.iter().copied(), b"block", ());
        assert_eq!(m.state(), None);
        m.keep(lines[..4].iter().copied(), b"block", ());
        assert_eq!((m.state(), m.block()), (Some(()), &b"block"[..]));
        assert!(m.holds(lines[..4].iter().copied()));
        m.forget();
        assert!(!m.holds(lines[..4].iter().copied()));
    }

    /// A part whose image is its bytes.
    struct Bytes(Vec<u8>);

    impl Imprint for Bytes {
        fn imprint_len(&self) -> usize {
            self.0.len()
        }
        fn imprint(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0);
        }
        fn is_imprint(&self, kept: &[u8]) -> bool {
            kept == self.0
        }
    }

    #[test]
    fn an_imprinted_list_is_held_by_its_image_and_other_lines_only() {
        let mut m = ListMemo::default();
        let rest = [(&b":status"[..], &b"200"[..], false)];
        let part = Bytes(b"server: x".to_vec());
        m.keep_imprinted(&part, rest.into_iter(), b"block", 7);
        assert_eq!((m.state(), m.block()), (Some(7), &b"block"[..]));
        assert!(m.holds_imprinted(&part, rest.into_iter()));
        assert!(!m.holds_imprinted(&Bytes(b"server: y".to_vec()), rest.into_iter()));
        assert!(!m.holds_imprinted(&part, [(&b":status"[..], &b"404"[..], false)].into_iter()));
        assert!(!m.holds_imprinted(&part, rest.into_iter().chain(rest)));
        // Not the same list without the part, nor one with a shared part.
        assert!(!m.holds(rest.into_iter()));
        assert!(!m.holds_keyed(std::ptr::null(), rest.into_iter()));
        // A list kept without a part is not held with one.
        m.keep(rest.into_iter(), b"block", 8);
        assert!(m.holds(rest.into_iter()) && !m.holds_imprinted(&Bytes(Vec::new()), rest.into_iter()));
        // The image counts against the bound.
        m.keep_imprinted(&Bytes(vec![b'v'; MAX_MEMO]), rest.into_iter(), b"block", 9);
        assert_eq!(m.state(), None);
        m.keep_imprinted(&Bytes(vec![b'v'; MAX_MEMO - LINE_OVERHEAD]), rest.into_iter(), b"block", 9);
        assert_eq!(m.state(), None);
        m.keep_imprinted(&Bytes(vec![b'v'; MAX_MEMO - LINE_OVERHEAD - 10]), rest.into_iter(), b"block", 9);
        assert_eq!(m.state(), Some(9));
    }
}
