#![no_main]
//! Header lists through the HPACK encoder and decoder: equal. See `sluice_fuzz::hpack::roundtrip`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::hpack::RoundTrip| sluice_fuzz::hpack::roundtrip(&input));
