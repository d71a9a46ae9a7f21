#![no_main]
//! Field sections through the QPACK encoder and decoder, blocked, reordered and cancelled:
//! equal. See `sluice_fuzz::qpack::roundtrip`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::qpack::RoundTrip| sluice_fuzz::qpack::roundtrip(&input));
