#![no_main]
//! A peer's bytes after a valid preface into the HTTP/2 server engine, with the handler's
//! answers and timers. See `sluice_fuzz::h2_server::run`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::h2_server::Input| sluice_fuzz::h2_server::run(&input));
