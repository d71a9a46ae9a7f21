//! Sans-IO HTTP/2 (RFC 9113): the server engine ([`Connection`]) and a small client ([`client::Client`]).
//!
//! The engine owns no sockets, tasks, locks or clocks: bytes and the current time go in
//! (`handle_*`), frames, events and deadlines come out (`poll_*`). See [`Connection`].

#![warn(missing_docs)]

pub mod client;
mod config;
mod conn;
mod error;
pub mod flow;
pub mod frame;
pub mod priority;
mod request;
pub mod sched;
mod stream;
pub mod tune;

pub use config::Config;
pub use conn::{Connection, Event, SendError};
pub use error::{Error, Initiator, Reason};
pub use request::{content_length, request_head, trailers, Field, RequestHead};
