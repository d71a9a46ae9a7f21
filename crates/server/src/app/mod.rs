//! The application side, the same for every protocol: requests and responses
//! ([`http`]), running a handler and streaming its answer ([`respond`]), choosing the handler
//! ([`router`]), and the access log.

pub(crate) mod accesslog;
pub(crate) mod http;
pub(crate) mod respond;
pub(crate) mod router;
