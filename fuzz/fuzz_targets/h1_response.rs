#![no_main]
//! The proxy's HTTP/1.1 response-head parser against httparse's. See `sluice_fuzz::h1::run`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::h1::run(data));
