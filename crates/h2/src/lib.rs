//! Sans-IO HTTP/2 (RFC 9113): the server engine ([`Connection`]) and a small client ([`client::Client`]).
//!
//! The engine owns no sockets, tasks, locks or clocks: bytes and the current time go in
//! (`handle_*`), frames, events and deadlines come out (`poll_*`). See [`Connection`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
mod config;
mod conn;
mod error;
pub mod flow;
pub mod frame;
mod stream;
pub mod transmit;

pub use config::Config;
pub use conn::{Connection, Event, SendError};
pub use error::{Error, Initiator, Reason};
pub use sluice_http::{content_length, priority, request_head, sched, trailers, Field, RequestHead};
pub use transmit::{Transmit, TransmitReader};
