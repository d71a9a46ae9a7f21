//! The static Huffman code for string literals (RFC 7541 §5.2, Appendix B).
//!
//! The code is canonical: within one code length, codes are consecutive in
//! symbol order, and each length starts right after the previous length's
//! last code (shifted left). Appendix B can therefore be reproduced exactly
//! from the code lengths alone, which is what `CODE_LENGTHS` records; the
//! codes, the decoding tree and a 4-bit-at-a-time decoding state machine are
//! all derived from it at compile time by `const fn`s below.

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
pub(crate) fn decode_bounded(src: &[u8], max_len: usize, dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    // The shortest code is 5 bits, so the output is at most 8/5 of the input.
    let upper = src.len().saturating_mul(8) / 5;
    dst.reserve(upper.min(max_len));
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

// ---------------------------------------------------------------------------
// Compile-time construction of the decoder.
//
// The decoding tree of 257 leaves has exactly 256 internal nodes, so a node
// number fits in a u8. Each internal node is a decoder state ("bits read so
// far of the current code"); for every state and every 4-bit input we
// precompute the state reached, the symbol completed on the way (at most one,
// since no code is shorter than 5 bits) and whether EOS was reached.

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
    fn decode_appends() {
        let mut out = b"x".to_vec();
        decode(&enc(b"yz"), &mut out).unwrap();
        assert_eq!(out, b"xyz");
    }
}
