#![no_main]
//! Arbitrary bytes into the HPACK decoder, table size from the first byte: never a panic,
//! memory bounded by the limits. See `sluice_fuzz::hpack::decode`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::hpack::decode(data));
