#![no_main]
//! The TLS 1.3 record layer's opening side against a rustls client's records and anything
//! else. See `sluice_fuzz::tls_records::run`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::tls_records::run(data));
