#![no_main]
//! A server's bytes into the HTTP/2 client engine. See `sluice_fuzz::h2_client::run`.

libfuzzer_sys::fuzz_target!(|input: sluice_fuzz::h2_client::Input| sluice_fuzz::h2_client::run(&input));
