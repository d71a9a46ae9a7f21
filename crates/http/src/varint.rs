//! QUIC variable-length integers (RFC 9000 §16): every HTTP/3 frame type, frame length, stream
//! type, setting and identifier is one. The two most significant bits of the first byte give the
//! length (1, 2, 4 or 8 bytes); the rest is the value, big-endian.

/// Largest encodable value: 2^62 - 1 (RFC 9000 §16).
pub const MAX: u64 = (1 << 62) - 1;

/// Encoded length of `v` in its shortest form.
pub fn len(v: u64) -> usize {
    match v {
        0..=0x3f => 1,
        0x40..=0x3fff => 2,
        0x4000..=0x3fff_ffff => 4,
        _ => 8,
    }
}

/// Append `v` in its shortest form. Values above [`MAX`] cannot be encoded; every caller passes
/// a stream id, length or code, all of which QUIC bounds by [`MAX`], so they are clamped.
pub fn encode(v: u64, out: &mut Vec<u8>) {
    let v = v.min(MAX);
    match len(v) {
        1 => out.push(v as u8),
        2 => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Decode one integer from the start of `b`: the value and the bytes used, or `None` if `b`
/// holds only part of it. Non-shortest encodings are accepted (RFC 9000 §16 allows them).
pub fn decode(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let n = 1usize << (first >> 6);
    let bytes = b.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for &c in &bytes[1..] {
        v = (v << 8) | u64::from(c);
    }
    Some((v, n))
}

/// A varint arriving in pieces (a stream type split across reads): feed it bytes until it
/// returns the value.
#[derive(Debug, Default)]
pub struct Partial {
    buf: [u8; 8],
    len: usize,
}

impl Partial {
    /// Take bytes from `input` until the integer is complete; `None` while it is not.
    pub fn push(&mut self, input: &mut &[u8]) -> Option<u64> {
        loop {
            if let Some((v, _)) = decode(&self.buf[..self.len]) {
                return Some(v);
            }
            let (&b, rest) = input.split_first()?;
            // Invariant: decode succeeds once `len` reaches the length the first byte names
            // (at most 8), so `len` < 8 here.
            self.buf[self.len] = b;
            self.len += 1;
            *input = rest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_9000_appendix_a1_examples() {
        let cases: &[(&[u8], u64)] = &[
            (&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], 151_288_809_941_952_652),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            (&[0x40, 0x25], 37),
        ];
        for &(bytes, v) in cases {
            assert_eq!(decode(bytes), Some((v, bytes.len())));
        }
        for &(bytes, v) in &cases[..4] {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(out, bytes);
            assert_eq!(len(v), bytes.len());
        }
    }

    #[test]
    fn partial_input() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x9d, 0x7f, 0x3e]), None);
        let mut p = Partial::default();
        let bytes = [0x9d, 0x7f, 0x3e, 0x7d, 0xaa];
        for (i, b) in bytes[..4].iter().enumerate() {
            let mut input = &[*b][..];
            let got = p.push(&mut input);
            assert_eq!(got.is_some(), i == 3);
            assert!(input.is_empty());
        }
        let mut rest = &bytes[4..];
        assert_eq!(p.push(&mut rest), Some(494_878_333));
        assert_eq!(rest, [0xaa], "bytes after the integer stay");
    }

    #[test]
    fn boundaries() {
        for v in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, MAX] {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(decode(&out), Some((v, out.len())));
        }
    }
}
