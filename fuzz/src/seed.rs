//! Writing structured inputs back as the bytes `arbitrary` 1.x reads them from, for the seed
//! corpus: integers little-endian, `bool` one byte, an enum variant as a `u32` the derive maps
//! by multiply-and-shift, a `Vec` as a continuation byte (1) before each element and a 0 after
//! the last, a [`Chunk`] as a 16-bit length and its bytes. The corpus generator
//! (`examples/seeds.rs`) reads every seed back and checks it equals the value it wrote, so a
//! change of format in `arbitrary` shows there, not as a silently useless corpus.

use crate::{Chunk, Field};

/// A value that can be written as `arbitrary` input.
pub trait Seed {
    /// Append the bytes `arbitrary` reads this value from.
    fn seed(&self, out: &mut Vec<u8>);

    /// The bytes of this value alone.
    fn to_seed(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.seed(&mut out);
        out
    }
}

/// The selector of variant `index` of an enum of `count` variants: the derive picks
/// `(u64::from(x) * count) >> 32`, so the smallest `x` that lands on `index`.
pub fn variant(index: u32, count: u32, out: &mut Vec<u8>) {
    let x = (u64::from(index) << 32).div_ceil(u64::from(count));
    // Invariant: index < count, so x < 2^32.
    out.extend_from_slice(&u32::try_from(x).expect("variant index below the count").to_le_bytes());
}

macro_rules! int_seed {
    ($($t:ty),*) => {$(
        impl Seed for $t {
            fn seed(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
int_seed!(u8, u16, u32, u64);

impl Seed for bool {
    fn seed(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl<T: Seed> Seed for Vec<T> {
    fn seed(&self, out: &mut Vec<u8>) {
        for x in self {
            out.push(1);
            x.seed(out);
        }
        out.push(0);
    }
}

impl<A: Seed, B: Seed> Seed for (A, B) {
    fn seed(&self, out: &mut Vec<u8>) {
        self.0.seed(out);
        self.1.seed(out);
    }
}

impl Seed for Chunk {
    fn seed(&self, out: &mut Vec<u8>) {
        // Invariant: seeds are built by hand, small.
        let n = u16::try_from(self.0.len()).expect("seed chunk under 64 KiB");
        n.seed(out);
        out.extend_from_slice(&self.0);
    }
}

impl Seed for Field {
    fn seed(&self, out: &mut Vec<u8>) {
        self.name.seed(out);
        self.value.seed(out);
        self.sensitive.seed(out);
    }
}
