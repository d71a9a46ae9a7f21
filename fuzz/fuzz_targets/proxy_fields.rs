#![no_main]
//! The reverse proxy's field translation. See `sluice_fuzz::forward::run`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::forward::run(data));
