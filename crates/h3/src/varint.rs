//! QUIC variable-length integers (RFC 9000 §16): every HTTP/3 frame type, frame length, stream
//! type, setting and identifier is one. Shared with HTTP Datagrams and capsules
//! (`sluice_http::capsule`), so the one implementation lives in `sluice_http::varint`.

pub use sluice_http::varint::*;
