//! Sluice's TLS, the lowest layer of the server: nothing here knows about HTTP, the
//! configuration or the drivers.
//!
//! - [`certs`]: certificate chains and keys (PEM files, the generated self-signed default),
//!   selection by SNI, the rustls server configuration, and [`Served`]: what one connection's
//!   certificate lets it answer for (421 and the ORIGIN frame).
//! - [`client`]: the TLS client configuration of an upstream.
//! - [`stream`]: the server's TLS stream over rustls's unbuffered API, which holds no buffer
//!   while a connection is idle, and [`split`]: its read and write halves for two tasks.
//! - [`records`]: TLS 1.3 records after the handshake, sealed and opened here with the traffic
//!   keys rustls hands over (sans-IO: bytes in, bytes out). See `docs/decisions/` for why.
//!
//! The ring crypto provider is named explicitly in every configuration built here, so rustls
//! never has to guess a process-wide default.

#![forbid(unsafe_code)]

pub mod certs;
pub mod client;
pub mod records;
pub mod split;
pub mod stream;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod tickets;

pub use certs::{LoadedCert, Served, ServedCert};
pub use client::client_config;
pub use split::{ReadChunks, ReadHalf, WriteHalf};
pub use stream::TlsStream;
