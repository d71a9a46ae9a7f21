//! The messages every handler and every protocol driver share, below both: the request
//! ([`request`]), the response and its prebuilt fields ([`response`]), response bodies and the
//! trait another component feeds one through ([`body`]), and the access log ([`accesslog`]).

pub(crate) mod accesslog;
pub(crate) mod body;
pub(crate) mod metrics;
pub(crate) mod request;
pub(crate) mod response;

pub(crate) use body::{Body, BodySource, CHUNK};
pub(crate) use request::{
    BodyError, ConnectParts, Datagrams, Exchange, ExchangeRef, Interim, Proto, Refusal, Request, RequestBody,
    TrailerSlot,
};
pub(crate) use response::{Head, Response, SharedHead};
