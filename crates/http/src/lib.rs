//! What the HTTP/2 and HTTP/3 engines share, sans-IO: header [`Field`]s, the [`RequestHead`]
//! and its validation (RFC 9113 §8.2–§8.3, RFC 9114 §4.2–§4.3 say the same), RFC 9218
//! [`Priority`] and the [`Scheduler`] that orders response data by it, the [`Budget`] the
//! flood defences count in, HTTP Datagrams and capsules ([`capsule`], RFC 9297), the fields a reverse proxy forwards ([`forward`]) and the
//! HTTP/1.1 messages its upstream client writes and reads ([`h1`]).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod budget;
pub mod capsule;
pub mod forward;
pub mod h1;
pub mod packed;
pub mod priority;
pub mod request;
pub mod response;
pub mod sched;
pub mod varint;

pub use budget::Budget;
pub use packed::PackedFields;
pub use priority::Priority;
pub use request::{
    append_to_map, content_length, fill_request_head, map_value, request_head, static_response_name, status_digits,
    trailers, valid_authority, Field, HeadFields, RequestHead,
};
pub use response::response_fields;
pub use sched::Scheduler;
