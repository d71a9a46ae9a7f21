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

/// A kept list, its block, and the encoder state `S` the block holds for.
pub struct ListMemo<S> {
    /// `None`: nothing kept.
    state: Option<S>,
    /// With a key, the kept lines are the list's other lines: the key stands for the rest.
    key: Option<Key>,
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
            .field("lines", &self.lens.len())
            .field("block", &self.out.len())
            .finish()
    }
}

impl<S> Default for ListMemo<S> {
    fn default() -> Self {
        Self { state: None, key: None, src: Vec::new(), lens: Vec::new(), out: Vec::new() }
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
    }

    /// Whether a block is kept and `lines` (name, value, never-indexed) are its lines, one by one.
    pub fn holds<'a>(&self, lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>) -> bool {
        self.key.is_none() && self.holds_lines(lines)
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
            if self.src[at..at + n] != *name || self.src[at + n..at + n + v] != *value {
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

    /// Keep `out`, the block of a list made of the shared part `key` and the other lines
    /// `lines` (nothing, if those lines or the block are longer than `MAX_MEMO`).
    pub fn keep_keyed<'a>(
        &mut self,
        key: Option<Key>,
        lines: impl Iterator<Item = (&'a [u8], &'a [u8], bool)>,
        out: &[u8],
        state: S,
    ) {
        self.state = None;
        self.key = None;
        self.src.clear();
        self.lens.clear();
        for (name, value, never) in lines {
            let line = name.len() + value.len() + LINE_OVERHEAD;
            if self.src.len() + self.lens.len() * LINE_OVERHEAD + line > MAX_MEMO {
                return;
            }
            self.src.extend_from_slice(name);
            self.src.extend_from_slice(value);
            self.lens.push((name.len(), value.len(), never));
        }
        // The shared part's lines are not kept, so the block is bounded on its own.
        if out.len() > MAX_MEMO {
            return;
        }
        self.out.clear();
        self.out.extend_from_slice(out);
        self.key = key;
        self.state = Some(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
