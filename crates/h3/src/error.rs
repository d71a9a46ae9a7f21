//! HTTP/3 error codes (RFC 9114 §8.1, RFC 9204 §6) and the engine's error type, which carries
//! its scope (one stream or the whole connection) and who caused it.

use std::fmt;

/// An HTTP/3 application error code, as carried by RESET_STREAM, STOP_SENDING and
/// CONNECTION_CLOSE (RFC 9114 §8.1). Unknown codes are equivalent to [`Code::H3_NO_ERROR`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code(pub u64);

impl Code {
    /// No error: graceful closure, or a stream no longer needed.
    pub const H3_NO_ERROR: Self = Self(0x0100);
    /// Protocol violated in a way no more specific code covers.
    pub const H3_GENERAL_PROTOCOL_ERROR: Self = Self(0x0101);
    /// Internal error in the HTTP stack.
    pub const H3_INTERNAL_ERROR: Self = Self(0x0102);
    /// The peer created a stream we will not accept.
    pub const H3_STREAM_CREATION_ERROR: Self = Self(0x0103);
    /// A stream the connection needs was closed or reset.
    pub const H3_CLOSED_CRITICAL_STREAM: Self = Self(0x0104);
    /// A frame not permitted in the current state or on this stream.
    pub const H3_FRAME_UNEXPECTED: Self = Self(0x0105);
    /// A frame that violates layout or size rules.
    pub const H3_FRAME_ERROR: Self = Self(0x0106);
    /// The peer is generating excessive load.
    pub const H3_EXCESSIVE_LOAD: Self = Self(0x0107);
    /// A stream id or push id used incorrectly.
    pub const H3_ID_ERROR: Self = Self(0x0108);
    /// Invalid SETTINGS payload.
    pub const H3_SETTINGS_ERROR: Self = Self(0x0109);
    /// The control stream did not start with SETTINGS.
    pub const H3_MISSING_SETTINGS: Self = Self(0x010a);
    /// Request rejected before any application processing (safe to retry).
    pub const H3_REQUEST_REJECTED: Self = Self(0x010b);
    /// Request or response cancelled.
    pub const H3_REQUEST_CANCELLED: Self = Self(0x010c);
    /// The client's stream ended without a complete request.
    pub const H3_REQUEST_INCOMPLETE: Self = Self(0x010d);
    /// A malformed message.
    pub const H3_MESSAGE_ERROR: Self = Self(0x010e);
    /// The TCP connection of a CONNECT request failed.
    pub const H3_CONNECT_ERROR: Self = Self(0x010f);
    /// Retry over HTTP/1.1.
    pub const H3_VERSION_FALLBACK: Self = Self(0x0110);
    /// RFC 9204 §6: an encoded field section could not be decoded.
    pub const QPACK_DECOMPRESSION_FAILED: Self = Self(0x0200);
    /// RFC 9204 §6: an encoder-stream instruction could not be interpreted.
    pub const QPACK_ENCODER_STREAM_ERROR: Self = Self(0x0201);
    /// RFC 9204 §6: a decoder-stream instruction could not be interpreted.
    pub const QPACK_DECODER_STREAM_ERROR: Self = Self(0x0202);

    /// The RFC name of the code.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x0100 => "H3_NO_ERROR",
            0x0101 => "H3_GENERAL_PROTOCOL_ERROR",
            0x0102 => "H3_INTERNAL_ERROR",
            0x0103 => "H3_STREAM_CREATION_ERROR",
            0x0104 => "H3_CLOSED_CRITICAL_STREAM",
            0x0105 => "H3_FRAME_UNEXPECTED",
            0x0106 => "H3_FRAME_ERROR",
            0x0107 => "H3_EXCESSIVE_LOAD",
            0x0108 => "H3_ID_ERROR",
            0x0109 => "H3_SETTINGS_ERROR",
            0x010a => "H3_MISSING_SETTINGS",
            0x010b => "H3_REQUEST_REJECTED",
            0x010c => "H3_REQUEST_CANCELLED",
            0x010d => "H3_REQUEST_INCOMPLETE",
            0x010e => "H3_MESSAGE_ERROR",
            0x010f => "H3_CONNECT_ERROR",
            0x0110 => "H3_VERSION_FALLBACK",
            0x0200 => "QPACK_DECOMPRESSION_FAILED",
            0x0201 => "QPACK_ENCODER_STREAM_ERROR",
            0x0202 => "QPACK_DECODER_STREAM_ERROR",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:x})", self.name(), self.0)
    }
}

/// What an error affects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One request stream: it is reset (RESET_STREAM and STOP_SENDING); the connection goes on.
    Stream(u64),
    /// The whole connection: it is closed with CONNECTION_CLOSE.
    Connection,
}

/// Who caused an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initiator {
    /// The peer sent something wrong, too much, or reset a stream.
    Remote,
    /// This side decided (application reset, shutdown).
    Local,
}

/// An error with its code, scope and cause (RFC 9114 §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    /// The code sent or received.
    pub code: Code,
    /// Stream or connection.
    pub scope: Scope,
    /// Who caused it.
    pub initiator: Initiator,
    /// Human-readable detail for the log (also the CONNECTION_CLOSE reason phrase we send).
    pub reason: &'static str,
}

impl Error {
    /// A connection error the peer caused.
    pub(crate) fn conn(code: Code, reason: &'static str) -> Self {
        Self { code, scope: Scope::Connection, initiator: Initiator::Remote, reason }
    }

    /// A stream error the peer caused.
    pub(crate) fn stream(id: u64, code: Code, reason: &'static str) -> Self {
        Self { code, scope: Scope::Stream(id), initiator: Initiator::Remote, reason }
    }

    /// Whether the whole connection is affected.
    pub fn is_connection_error(&self) -> bool {
        self.scope == Scope::Connection
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scope {
            Scope::Stream(id) => write!(f, "stream {id} error {} ({:?}): {}", self.code, self.initiator, self.reason),
            Scope::Connection => write!(f, "connection error {} ({:?}): {}", self.code, self.initiator, self.reason),
        }
    }
}

impl std::error::Error for Error {}

impl From<&sluice_qpack::Error> for Code {
    /// The RFC 9204 §6 code of a QPACK error; a field section over our size limit is not a
    /// QPACK error and maps to H3_EXCESSIVE_LOAD.
    fn from(e: &sluice_qpack::Error) -> Self {
        e.code().map_or(Self::H3_EXCESSIVE_LOAD, |c| Self(c.value()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_rfc_9114_section_8_1() {
        assert_eq!(Code::H3_NO_ERROR.0, 0x100);
        assert_eq!(Code::H3_MISSING_SETTINGS.0, 0x10a);
        assert_eq!(Code::H3_VERSION_FALLBACK.0, 0x110);
        assert_eq!(Code::H3_MESSAGE_ERROR.to_string(), "H3_MESSAGE_ERROR (0x10e)");
        let q = sluice_qpack::Error::EncoderStream(sluice_qpack::Reason::Truncated);
        assert_eq!(Code::from(&q), Code::QPACK_ENCODER_STREAM_ERROR);
        let e = Error::stream(4, Code::H3_MESSAGE_ERROR, "x");
        assert!(!e.is_connection_error());
        assert!(e.to_string().starts_with("stream 4 error H3_MESSAGE_ERROR"));
    }
}
