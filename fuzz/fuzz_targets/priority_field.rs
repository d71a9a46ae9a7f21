#![no_main]
//! The RFC 9218 priority field parser. See `sluice_fuzz::priority::run`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::priority::run(data));
