//! HTTP/2 error codes and the engine's error type, which carries its scope.

use std::fmt;

/// An HTTP/2 error code (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful shutdown or nothing wrong.
    pub const NO_ERROR: Self = Self(0x0);
    /// Unspecific protocol error.
    pub const PROTOCOL_ERROR: Self = Self(0x1);
    /// Unexpected internal error.
    pub const INTERNAL_ERROR: Self = Self(0x2);
    /// Flow-control protocol violated.
    pub const FLOW_CONTROL_ERROR: Self = Self(0x3);
    /// SETTINGS not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Self = Self(0x4);
    /// Frame received on a half-closed or closed stream.
    pub const STREAM_CLOSED: Self = Self(0x5);
    /// Frame with an invalid size.
    pub const FRAME_SIZE_ERROR: Self = Self(0x6);
    /// Stream refused before any processing.
    pub const REFUSED_STREAM: Self = Self(0x7);
    /// Stream no longer needed.
    pub const CANCEL: Self = Self(0x8);
    /// Header compression context cannot be maintained.
    pub const COMPRESSION_ERROR: Self = Self(0x9);
    /// CONNECT tunnel failed.
    pub const CONNECT_ERROR: Self = Self(0xa);
    /// The peer is generating excessive load.
    pub const ENHANCE_YOUR_CALM: Self = Self(0xb);
    /// Transport security below minimum requirements.
    pub const INADEQUATE_SECURITY: Self = Self(0xc);
    /// HTTP/1.1 required instead.
    pub const HTTP_1_1_REQUIRED: Self = Self(0xd);

    /// The RFC name of the code.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:x})", self.name(), self.0)
    }
}

/// Who caused an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initiator {
    /// The peer sent something wrong (or too much).
    Remote,
    /// This side decided (application reset, shutdown).
    Local,
}

/// An error with its scope: one stream or the whole connection (RFC 9113 §5.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The stream is reset with RST_STREAM; the connection goes on.
    Stream {
        /// The stream.
        id: u32,
        /// The code sent or received.
        reason: Reason,
        /// Who caused it.
        initiator: Initiator,
        /// Human-readable detail for the log.
        detail: &'static str,
    },
    /// The connection is closed with GOAWAY.
    Connection {
        /// The code sent or received.
        reason: Reason,
        /// Who caused it.
        initiator: Initiator,
        /// Human-readable detail for the log (also the GOAWAY debug data when we send it).
        detail: &'static str,
    },
}

impl Error {
    /// A connection error the peer caused.
    pub(crate) fn conn(reason: Reason, detail: &'static str) -> Self {
        Self::Connection { reason, initiator: Initiator::Remote, detail }
    }

    /// A stream error the peer caused.
    pub(crate) fn stream(id: u32, reason: Reason, detail: &'static str) -> Self {
        Self::Stream { id, reason, initiator: Initiator::Remote, detail }
    }

    /// The error code.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Stream { reason, .. } | Self::Connection { reason, .. } => *reason,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stream { id, reason, initiator, detail } => {
                write!(f, "stream {id} error {reason} ({initiator:?}): {detail}")
            }
            Self::Connection { reason, initiator, detail } => {
                write!(f, "connection error {reason} ({initiator:?}): {detail}")
            }
        }
    }
}

impl std::error::Error for Error {}
