//! Sans-IO HTTP/3 (RFC 9114) server engine.
//!
//! The engine owns no sockets, tasks, locks or clocks, and no QUIC: a driver moves bytes
//! between it and the transport's streams. Bytes and the current time in:
//! [`Connection::on_stream_data`] with the QUIC stream id (whose low bits say what kind of
//! stream it is, RFC 9000 §2.1), plus resets and STOP_SENDING, and expired timers
//! ([`Connection::handle_timeout`]). Out: [`Connection::poll_transmit`] (stream writes, resets,
//! STOP_SENDING, the connection close), [`Connection::poll_event`] (requests, bodies, trailers,
//! resets) and [`Connection::poll_timeout`] (the next deadline).
//!
//! Inside: the frame layer (RFC 9114 §7), the control stream and SETTINGS (§6.2.1, §7.2.4),
//! the QPACK streams and field sections (RFC 9204, via `sluice-qpack`), request validation
//! shared with the HTTP/2 engine (§4.2, §4.3), RFC 9218 priorities (the `priority` header and
//! PRIORITY_UPDATE) driving the scheduler shared with the HTTP/2 engine (`sluice-http`), GOAWAY
//! (§5.2) and ORIGIN (RFC 9412).
//! See [`Connection`] for the streams the driver opens, the call order, the timers and the
//! reset budget. [`wire`] exposes the wire format (varints, frame headers and types, stream ids
//! and types) for drivers and clients.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod conn;
mod error;
mod frame;
mod ids;
mod stream;
mod varint;
pub mod wire;

pub use config::Config;
pub use conn::{Connection, Event, SendError, Transmit};
pub use error::{Code, Error, Initiator, Scope};
pub use sluice_http::{Field, Priority, RequestHead};
