//! The transport side: listeners, TLS, the HTTP/1.1, HTTP/2 and HTTP/3 drivers (the only code
//! that touches sockets, spawns per-connection tasks or reads the clock for the engines), the
//! stream layer the HTTP/2 and HTTP/3 drivers share, and the in-flight bound.

pub(crate) mod h1;
pub(crate) mod h2;
pub(crate) mod h3;
pub(crate) mod linger;
pub(crate) mod listen;
pub(crate) mod mailbox;
pub(crate) mod pace;
pub(crate) mod progress;
pub(crate) mod quic_pace;
pub(crate) mod stream;
pub(crate) mod tls;
