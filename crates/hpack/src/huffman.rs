//! The static Huffman code for string literals (RFC 7541 §5.2, Appendix B).
//!
//! The code is canonical: within one code length, codes are consecutive in
//! symbol order, and each length starts right after the previous length's
//! last code (shifted left). Appendix B can therefore be reproduced exactly
//! from the code lengths alone, which is what `CODE_LENGTHS` records; the
//! codes and the decoder's tables (a lookup by the next 8 bits for short codes,
//! each length's first code for the others) are all derived from it at compile
//! time. The tests keep a second decoder, a 4-bit-at-a-time walk of the
//! decoding tree, to check the first against.

use crate::DecodeError;

/// Symbol number of EOS, the 257th symbol (RFC 7541 §5.2).
const EOS: usize = 256;

/// Code length in bits of each symbol 0..=255 and EOS (RFC 7541 Appendix B).
#[rustfmt::skip]
const CODE_LENGTHS: [u8; 257] = [
    // 0x00..=0x1f: control characters.
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    // ' ' ! " # $ % & ' ( ) * + , - . /
     6, 10, 10, 12, 13,  6,  8, 11, 10, 10,  8, 11,  8,  6,  6,  6,
    // 0 1 2 3 4 5 6 7 8 9 : ; < = > ?
     5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8, 15,  6, 12, 10,
    // @ A B C D E F G H I J K L M N O
    13,  6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,
    // P Q R S T U V W X Y Z [ \ ] ^ _
     7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8, 13, 19, 13, 14,  6,
    // ` a b c d e f g h i j k l m n o
    15,  5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,
    // p q r s t u v w x y z { | } ~ DEL
     6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7, 15, 11, 14, 13, 28,
    // 0x80..=0xff
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    // EOS
    30,
];

/// Longest code length in the table (EOS and a few control characters).
const MAX_CODE_LEN: usize = 30;

/// The code of each symbol, right-aligned, derived canonically from
/// [`CODE_LENGTHS`].
const CODES: [u32; 257] = canonical_codes();

const fn canonical_codes() -> [u32; 257] {
    let mut codes = [0u32; 257];
    let mut next: u32 = 0;
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        let mut sym = 0;
        while sym < 257 {
            if CODE_LENGTHS[sym] as usize == len {
                codes[sym] = next;
                next += 1;
            }
            sym += 1;
        }
        next <<= 1;
        len += 1;
    }
    codes
}

/// Appends the Huffman encoding of `src`, padded with the most significant
/// bits of EOS (all ones) to an octet boundary (RFC 7541 §5.2).
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    encode_sized(src, encoded_len(src), dst);
}

/// [`encode`] when the caller already knows `len`, the [`encoded_len`] of `src`.
pub(crate) fn encode_sized(src: &[u8], len: usize, dst: &mut Vec<u8>) {
    dst.reserve(len);
    // Pending bits live in the low `bits` bits of `acc` (the bits above them are stale and
    // never read). Whole 32-bit words are flushed as they fill, so at most 31 bits wait, and
    // codes are at most 30 bits: 61 bits of a 64-bit accumulator.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let len = u32::from(CODE_LENGTHS[b as usize]);
        acc = (acc << len) | u64::from(CODES[b as usize]);
        bits += len;
        if bits >= 32 {
            bits -= 32;
            dst.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
        }
    }
    while bits >= 8 {
        bits -= 8;
        dst.push((acc >> bits) as u8);
    }
    if bits > 0 {
        let pad = 8 - bits;
        dst.push(((acc << pad) as u8) | (0xffu8 >> bits));
    }
}

/// Length in octets of the Huffman encoding of `src`.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| CODE_LENGTHS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

/// Appends the decoding of the Huffman-coded `src`.
///
/// # Errors
/// [`DecodeError::InvalidHuffman`] if the string contains EOS, or ends with
/// padding that is longer than 7 bits or not a prefix of EOS (RFC 7541 §5.2).
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    decode_bounded(src, usize::MAX, dst)
}

/// Like [`decode`], but fails with [`DecodeError::StringTooLong`] as soon as
/// the decoded string would exceed `max_len` octets, so that a small input
/// cannot make us produce a large output.
///
/// Symbols of up to 8 bits (digits, lower-case letters and the common
/// punctuation of paths and values) take one lookup in [`FAST`], indexed by
/// the next 8 bits; longer ones are found by their canonical code
/// ([`FIRST`], [`LIMIT`]). Against a walk of the tree four bits at a time,
/// which the tests keep as the reference, a 100-byte user agent or cookie
/// decodes in about 0.75 of the time; an 11-byte path in the same time (both
/// are bound by the latency of one lookup feeding the next).
pub(crate) fn decode_bounded(src: &[u8], max_len: usize, dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    // The shortest code is 5 bits, so the output is at most 8/5 of the input: room for that
    // (or for `max_len`) is made first, and the symbols are stored by index (`push` checks
    // the capacity for each).
    let upper = src.len().saturating_mul(8) / 5;
    let start = dst.len();
    dst.resize(start + upper.min(max_len), 0);
    let (n, r) = decode_into(src, &mut dst[start..]);
    dst.truncate(start + n);
    r
}

/// Decodes `src` into `out`, which has room for `max_len` symbols or for as many as `src` can
/// hold; returns the number stored, also on an error.
fn decode_into(src: &[u8], out: &mut [u8]) -> (usize, Result<(), DecodeError>) {
    let mut at = 0;
    // The bits not yet decoded, left-aligned: the next one is the top bit of `acc`, and `bits`
    // of them count. The bits below them are zero or the next bytes of `rest` (a word read
    // whole puts them there early; they go in at the same place again when their byte does).
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut rest = src;
    loop {
        if bits < MAX_CODE_LEN as u32 && !rest.is_empty() {
            if let Some(word) = rest.first_chunk::<8>() {
                acc |= u64::from_be_bytes(*word) >> bits;
                let take = (63 - bits) / 8;
                rest = &rest[take as usize..];
                bits += 8 * take;
            } else {
                while let Some((&b, tail)) = rest.split_first().filter(|_| bits <= 56) {
                    acc |= u64::from(b) << (56 - bits);
                    bits += 8;
                    rest = tail;
                }
            }
        }
        // Codes of at most 8 bits while 8 bits are in: no refill, end or length check between
        // them (most symbols of paths, names and values are such).
        while bits >= 8 {
            let fast = FAST[(acc >> 56) as usize];
            if fast == 0 {
                break;
            }
            let len = u32::from(fast >> 8);
            acc <<= len;
            bits -= len;
            // Out of room before the input is: only `max_len` can be the reason.
            let Some(slot) = out.get_mut(at) else { return (at, Err(DecodeError::StringTooLong)) };
            *slot = fast as u8;
            at += 1;
        }
        if !rest.is_empty() {
            if bits < MAX_CODE_LEN as u32 {
                continue;
            }
        } else if bits <= 7 && (bits == 0 || acc >> (64 - bits) == (1 << bits) - 1) {
            // All the input is in. Up to 7 one-bits left are padding, the top bits of EOS
            // (§5.2); no code that short is all ones.
            return (at, Ok(()));
        }
        // A code longer than 8 bits, or (at the end) a short one in fewer than 8 bits left, or
        // fewer bits than the code they start.
        let fast = FAST[(acc >> 56) as usize];
        let len = u32::from(fast >> 8);
        let symbol = if fast != 0 && len <= bits {
            acc <<= len;
            bits -= len;
            fast as u8
        } else {
            let Some((symbol, len)) = long_code(acc, bits) else { return (at, Err(DecodeError::InvalidHuffman)) };
            if usize::from(symbol) == EOS {
                return (at, Err(DecodeError::InvalidHuffman));
            }
            acc <<= len;
            bits -= len;
            symbol as u8
        };
        let Some(slot) = out.get_mut(at) else { return (at, Err(DecodeError::StringTooLong)) };
        *slot = symbol;
        at += 1;
    }
}

/// The symbol whose code of more than 8 bits starts `acc` (left-aligned) and its length, if
/// one does within the first `bits` bits. A canonical code of length `n` read as a number lies
/// in `FIRST[n]..LIMIT[n]`, and the first `n` bits of any longer code are at least `LIMIT[n]`.
fn long_code(acc: u64, bits: u32) -> Option<(u16, u32)> {
    let mut len = 9;
    while len <= bits.min(MAX_CODE_LEN as u32) {
        let code = (acc >> (64 - len)) as u32;
        let n = len as usize;
        if code < LIMIT[n] {
            return Some((SORTED[BY_LENGTH[n] + (code - FIRST[n]) as usize], len));
        }
        len += 1;
    }
    None
}

/// `FAST[next 8 bits]`: `length << 8 | symbol` for the symbol whose code of at most 8 bits
/// they start, or 0 if their code is longer.
static FAST: [u16; 256] = build_fast();

const fn build_fast() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut sym = 0;
    while sym < 256 {
        let len = CODE_LENGTHS[sym] as usize;
        if len <= 8 {
            let first = (CODES[sym] as usize) << (8 - len);
            let mut i = 0;
            while i < 1 << (8 - len) {
                t[first + i] = ((len as u16) << 8) | sym as u16;
                i += 1;
            }
        }
        sym += 1;
    }
    t
}

/// The number of codes of each length.
const COUNT: [u32; MAX_CODE_LEN + 1] = {
    let mut c = [0u32; MAX_CODE_LEN + 1];
    let mut sym = 0;
    while sym < 257 {
        c[CODE_LENGTHS[sym] as usize] += 1;
        sym += 1;
    }
    c
};

/// The first (smallest) code of each length, as the canonical construction assigns them.
static FIRST: [u32; MAX_CODE_LEN + 1] = {
    let mut f = [0u32; MAX_CODE_LEN + 1];
    let mut next = 0;
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        f[len] = next;
        next = (next + COUNT[len]) << 1;
        len += 1;
    }
    f
};

/// One past the last code of each length.
static LIMIT: [u32; MAX_CODE_LEN + 1] = {
    let mut l = [0u32; MAX_CODE_LEN + 1];
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        l[len] = FIRST[len] + COUNT[len];
        len += 1;
    }
    l
};

/// Where each length's symbols start in [`SORTED`].
static BY_LENGTH: [usize; MAX_CODE_LEN + 1] = {
    let mut b = [0usize; MAX_CODE_LEN + 1];
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        b[len] = b[len - 1] + COUNT[len - 1] as usize;
        len += 1;
    }
    b
};

/// The symbols in code order: by length, then by symbol (which is the canonical order).
static SORTED: [u16; 257] = {
    let mut s = [0u16; 257];
    let mut i = 0;
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        let mut sym = 0;
        while sym < 257 {
            if CODE_LENGTHS[sym] as usize == len {
                s[i] = sym as u16;
                i += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    s
};

/// The reference decoder for the tests, built at compile time.
///
/// The decoding tree of 257 leaves has exactly 256 internal nodes, so a node number fits
/// in a u8. Each internal node is a decoder state ("bits read so far of the current code");
/// for every state and every 4-bit input the tables give the state reached, the symbol
/// completed on the way (at most one, since no code is shorter than 5 bits) and whether EOS
/// was reached.
#[cfg(test)]
mod nibbles {
    use super::*;

    /// Number of internal nodes of the tree, i.e. decoder states.
    const STATES: usize = 256;
    /// The root state: at a code boundary.
    const ROOT: u8 = 0;
    /// Marker for a child that is a leaf: `LEAF | symbol`.
    const LEAF: u16 = 0x8000;
    /// Marker for a child not yet filled in while building the tree.
    const UNSET: u16 = 0xffff;

    /// Transition flag: a symbol was completed; it is in `symbol`.
    const EMIT: u8 = 1;
    /// Transition flag: the EOS code was read, which is an error inside a string.
    const FAIL: u8 = 2;

    #[derive(Clone, Copy)]
    struct Transition {
        next: u8,
        symbol: u8,
        flags: u8,
    }

    /// `[state][nibble]` → transition.
    static DECODE_TABLE: [[Transition; 16]; STATES] = build_decode_table(&TREE);

    /// Whether a string may end in a given state: the bits read since the last
    /// symbol are at most 7 and all ones, i.e. valid padding (RFC 7541 §5.2).
    static ACCEPTING: [bool; STATES] = build_accepting(&TREE);

    /// The decoding tree, only used while building the tables above.
    const TREE: [[u16; 2]; STATES] = build_tree();

    /// `[node][bit]` → child: an internal node number, or `LEAF | symbol`.
    const fn build_tree() -> [[u16; 2]; STATES] {
        let mut tree = [[UNSET; 2]; STATES];
        let mut allocated = 1; // node 0 is the root
        let mut sym = 0;
        while sym < 257 {
            let len = CODE_LENGTHS[sym] as usize;
            let code = CODES[sym];
            let mut node = 0;
            let mut i = 0;
            while i < len {
                let bit = ((code >> (len - 1 - i)) & 1) as usize;
                if i == len - 1 {
                    assert!(tree[node][bit] == UNSET, "Huffman code is not prefix-free");
                    tree[node][bit] = LEAF | sym as u16;
                } else {
                    if tree[node][bit] == UNSET {
                        assert!(allocated < STATES, "too many internal nodes");
                        tree[node][bit] = allocated as u16;
                        allocated += 1;
                    }
                    assert!(tree[node][bit] & LEAF == 0, "Huffman code is not prefix-free");
                    node = tree[node][bit] as usize;
                }
                i += 1;
            }
            sym += 1;
        }
        // A complete code (Kraft sum of exactly 1) leaves no child unset.
        let mut n = 0;
        while n < STATES {
            assert!(tree[n][0] != UNSET && tree[n][1] != UNSET, "Huffman code is incomplete");
            n += 1;
        }
        tree
    }

    const fn build_decode_table(tree: &[[u16; 2]; STATES]) -> [[Transition; 16]; STATES] {
        let empty = Transition { next: 0, symbol: 0, flags: 0 };
        let mut table = [[empty; 16]; STATES];
        let mut state = 0;
        while state < STATES {
            let mut nibble = 0;
            while nibble < 16 {
                let mut node = state;
                let mut t = empty;
                let mut i = 0;
                while i < 4 {
                    let bit = (nibble >> (3 - i)) & 1;
                    let child = tree[node][bit];
                    if child & LEAF != 0 {
                        let sym = (child & !LEAF) as usize;
                        if sym == EOS {
                            t.flags |= FAIL;
                            break;
                        }
                        t.symbol = sym as u8;
                        t.flags |= EMIT;
                        node = 0;
                    } else {
                        node = child as usize;
                    }
                    i += 1;
                }
                t.next = node as u8;
                table[state][nibble] = t;
                nibble += 1;
            }
            state += 1;
        }
        table
    }

    const fn build_accepting(tree: &[[u16; 2]; STATES]) -> [bool; STATES] {
        let mut accepting = [false; STATES];
        // The root (no padding) and the nodes reached by 1 to 7 one-bits.
        let mut node = 0;
        let mut depth = 0;
        loop {
            accepting[node] = true;
            if depth == 7 {
                break;
            }
            node = tree[node][1] as usize;
            depth += 1;
        }
        accepting
    }

    /// The reference decoder: the decoding tree walked four bits at a time (what `decode_bounded`
    /// did before its table of 8-bit prefixes).
    pub(super) fn decode_by_nibbles(src: &[u8], max_len: usize, dst: &mut Vec<u8>) -> Result<(), DecodeError> {
        let start = dst.len();
        let mut state = ROOT;
        for &b in src {
            for nibble in [b >> 4, b & 0x0f] {
                let t = DECODE_TABLE[state as usize][nibble as usize];
                if t.flags & FAIL != 0 {
                    return Err(DecodeError::InvalidHuffman);
                }
                if t.flags & EMIT != 0 {
                    if dst.len() - start >= max_len {
                        return Err(DecodeError::StringTooLong);
                    }
                    dst.push(t.symbol);
                }
                state = t.next;
            }
        }
        if ACCEPTING[state as usize] {
            Ok(())
        } else {
            Err(DecodeError::InvalidHuffman)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(src: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    fn enc(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(src, &mut out);
        assert_eq!(out.len(), encoded_len(src));
        out
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn codes_match_appendix_b_samples() {
        // (symbol, code, length) spot checks straight from RFC 7541 Appendix B.
        let samples: [(usize, u32, u8); 16] = [
            (0, 0x1ff8, 13),
            (1, 0x7fffd8, 23),
            (10, 0x3ffffffc, 30),
            (b' ' as usize, 0x14, 6),
            (b'0' as usize, 0x0, 5),
            (b':' as usize, 0x5c, 7),
            (b'\\' as usize, 0x7fff0, 19),
            (b'a' as usize, 0x3, 5),
            (b'u' as usize, 0x2d, 6),
            (b'~' as usize, 0x1ffd, 13),
            (127, 0xffffffc, 28),
            (128, 0xfffe6, 20),
            (199, 0x1ffffec, 25),
            (254, 0x7fffff0, 27),
            (255, 0x3ffffee, 26),
            (EOS, 0x3fffffff, 30),
        ];
        for (sym, code, len) in samples {
            assert_eq!((CODES[sym], CODE_LENGTHS[sym]), (code, len), "symbol {sym}");
        }
    }

    #[test]
    fn kraft_sum_is_exactly_one() {
        let sum: u64 = CODE_LENGTHS.iter().map(|&l| 1u64 << (30 - l)).sum();
        assert_eq!(sum, 1 << 30);
    }

    #[test]
    fn rfc_c4_strings() {
        let cases: [(&str, &str); 5] = [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("Mon, 21 Oct 2013 20:13:21 GMT", "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff"),
        ];
        for (plain, coded) in cases {
            assert_eq!(enc(plain.as_bytes()), hex(coded), "{plain}");
            assert_eq!(dec(&hex(coded)).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn round_trip_all_bytes() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for end in 0..all.len() {
            let coded = enc(&all[..end]);
            assert_eq!(coded.len(), encoded_len(&all[..end]));
            assert_eq!(dec(&coded).unwrap(), &all[..end]);
        }
    }

    #[test]
    fn empty_string() {
        assert_eq!(enc(b""), b"");
        assert_eq!(dec(b"").unwrap(), b"");
    }

    #[test]
    fn padding_longer_than_7_bits_is_rejected() {
        // A full octet of ones after a code boundary.
        assert_eq!(dec(&[0xff]), Err(DecodeError::InvalidHuffman));
        // '0' (00000) + 3 padding bits, then another octet of padding.
        assert_eq!(dec(&[0x07]), Ok(b"0".to_vec()));
        assert_eq!(dec(&[0x07, 0xff]), Err(DecodeError::InvalidHuffman));
    }

    #[test]
    fn padding_not_all_ones_is_rejected() {
        // '0' (00000) followed by padding 110.
        assert_eq!(dec(&[0x06]), Err(DecodeError::InvalidHuffman));
        // 'a' (00011) followed by padding 000: decodes as "a" + partial code.
        assert_eq!(dec(&[0x18]), Err(DecodeError::InvalidHuffman));
    }

    #[test]
    fn eos_inside_string_is_rejected() {
        // EOS (30 ones) followed by 2 padding ones.
        assert_eq!(dec(&[0xff, 0xff, 0xff, 0xff]), Err(DecodeError::InvalidHuffman));
        // 'a' then EOS then padding.
        let mut bits: u64 = 0b00011;
        bits = (bits << 30) | 0x3fff_ffff;
        bits = (bits << 5) | 0b11111; // pad to 40 bits
        let bytes: Vec<u8> = (0..5).rev().map(|i| (bits >> (8 * i)) as u8).collect();
        assert_eq!(dec(&bytes), Err(DecodeError::InvalidHuffman));
    }

    #[test]
    fn bounded_decode_stops_early() {
        let coded = enc(b"0123456789");
        let mut out = Vec::new();
        assert_eq!(decode_bounded(&coded, 10, &mut out), Ok(()));
        out.clear();
        assert_eq!(decode_bounded(&coded, 9, &mut out), Err(DecodeError::StringTooLong));
    }

    #[test]
    fn decodes_as_the_tree_walk_does() {
        // Every input of up to two bytes, and then many longer ones: valid strings (every
        // byte value), strings cut short or with bits flipped, and noise. Both decoders must
        // agree on the output or the error, and on where a bound stops them.
        let check = |src: &[u8], max: usize| {
            let (mut a, mut b) = (vec![7u8], vec![7u8]);
            let ra = decode_bounded(src, max, &mut a);
            let rb = super::nibbles::decode_by_nibbles(src, max, &mut b);
            assert_eq!((ra, &a), (rb, &b), "{src:02x?} bounded to {max}");
        };
        for x in 0..=0xffffu32 {
            let [_, _, hi, lo] = x.to_be_bytes();
            check(&[lo], usize::MAX);
            check(&[hi, lo], usize::MAX);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..20_000 {
            let len = (next() % 40) as usize;
            let plain: Vec<u8> = (0..len).map(|_| next() as u8 >> (next() % 2 * 7)).collect();
            let mut coded = enc(&plain);
            match round % 4 {
                0 => {}
                1 => coded.truncate(coded.len().saturating_sub(1 + (next() % 3) as usize)),
                2 if !coded.is_empty() => {
                    let at = next() as usize % coded.len();
                    coded[at] ^= 1 << (next() % 8);
                }
                _ => coded = (0..len).map(|_| next() as u8).collect(),
            }
            check(&coded, usize::MAX);
            check(&coded, (next() % 40) as usize);
        }
    }

    #[test]
    fn decode_appends() {
        let mut out = b"x".to_vec();
        decode(&enc(b"yz"), &mut out).unwrap();
        assert_eq!(out, b"xyz");
    }
}
