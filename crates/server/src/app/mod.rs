//! Answering requests, the same for every protocol: choosing the handler ([`router`]) and the
//! one path every request takes around it ([`respond`]: admission, the handler, the response
//! streamed into the protocol's sink).

pub(crate) mod respond;
pub(crate) mod router;
