#![no_main]
//! Stream bytes, frames, requests, resets and timers into the HTTP/3 server engine. See
//! `sluice_fuzz::h3_server::run`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::h3_server::Input| sluice_fuzz::h3_server::run(&input));
