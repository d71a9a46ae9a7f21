#![no_main]
//! Field sections and encoder-stream bytes into the QPACK decoder. See `sluice_fuzz::qpack::decode`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::qpack::DecodeInput| sluice_fuzz::qpack::decode(&input));
