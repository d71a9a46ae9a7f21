//! Why a proxied request failed: the RFC 9209 error type (what `Proxy-Status` says, and the
//! status the client gets), who is to blame (what passive health counts), and whether the
//! request may go again (what the retry loop does). Pingora's `Error { etype, esource, retry }`
//! is the model: who is to blame decides between 502 and 400, and whether a retry is safe.

use http::{HeaderValue, StatusCode};

use crate::message::{BodyError, Response};

use super::body::UpBody;

/// The RFC 9209 §2.3 error types Sluice reports in `Proxy-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorType {
    /// §2.3.3: no server of the upstream may be used (ejected, failing health checks), or it
    /// could not be reached for another reason.
    DestinationUnavailable,
    /// §2.3.1: the server's name did not resolve.
    DnsError,
    /// §2.3.4: the connection was refused.
    ConnectionRefused,
    /// §2.3.6: connecting (TLS included) took longer than `connect_secs`.
    ConnectionTimeout,
    /// §2.3.5: the connection closed before a complete response.
    ConnectionTerminated,
    /// §2.3.12: the per-server connection (or stream) limit is reached.
    ConnectionLimitReached,
    /// §2.3.8: the TLS handshake failed.
    TlsProtocolError,
    /// §2.3.9: the server's certificate was not accepted.
    TlsCertificateError,
    /// §2.3.15: the upstream broke HTTP (a bad status line, framing, an unasked 101).
    HttpProtocolError,
    /// §2.3.18: the response head was over the limit.
    HttpResponseHeaderSectionSize,
    /// §2.3.20: no response head within `response_head_secs`.
    HttpResponseTimeout,
    /// §2.3.22: the proxy could not make a response for another reason.
    ProxyInternalResponse,
}

impl ErrorType {
    /// Every type, in the order metrics count them ([`ErrorType::index`]).
    pub(crate) const ALL: [Self; 12] = [
        Self::DestinationUnavailable,
        Self::DnsError,
        Self::ConnectionRefused,
        Self::ConnectionTimeout,
        Self::ConnectionTerminated,
        Self::ConnectionLimitReached,
        Self::TlsProtocolError,
        Self::TlsCertificateError,
        Self::HttpProtocolError,
        Self::HttpResponseHeaderSectionSize,
        Self::HttpResponseTimeout,
        Self::ProxyInternalResponse,
    ];

    /// Its place in [`ErrorType::ALL`].
    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    /// The name `Proxy-Status` carries.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::DestinationUnavailable => "destination_unavailable",
            Self::DnsError => "dns_error",
            Self::ConnectionRefused => "connection_refused",
            Self::ConnectionTimeout => "connection_timeout",
            Self::ConnectionTerminated => "connection_terminated",
            Self::ConnectionLimitReached => "connection_limit_reached",
            Self::TlsProtocolError => "tls_protocol_error",
            Self::TlsCertificateError => "tls_certificate_error",
            Self::HttpProtocolError => "http_protocol_error",
            Self::HttpResponseHeaderSectionSize => "http_response_header_section_size",
            Self::HttpResponseTimeout => "http_response_timeout",
            Self::ProxyInternalResponse => "proxy_internal_response",
        }
    }

    /// The client's status: 503 when no server may be used, 504 when one was too slow, else
    /// 502 (RFC 9110 §15.6).
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Self::DestinationUnavailable | Self::ConnectionLimitReached => StatusCode::SERVICE_UNAVAILABLE,
            Self::ConnectionTimeout | Self::HttpResponseTimeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

impl std::fmt::Display for ErrorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is to blame for a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blame {
    /// The upstream server: counts against it (passive health, `[upstream.eject]`).
    Server,
    /// Nobody's fault that health should count: a limit of ours, or a pooled connection the
    /// upstream closed while it sat idle.
    Nobody,
    /// The client: its own request body failed while forwarded (too large, too slow, reset);
    /// answered 413, 408 or 400, never 502.
    Client(BodyError),
}

/// Whether the request may go to the upstream again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// It may have reached the upstream: never again (unless [`Failed::back`] has it).
    No,
    /// A pooled connection closed before answering: again on a fresh connection, free of the
    /// retry budget when the request came back unsent; an idempotent request without a
    /// streamed body may go again anyway (RFC 9110 §9.2.2).
    Stale,
    /// The upstream said it did not process it (HTTP/2 REFUSED_STREAM, RFC 9113 §8.7): any
    /// method may go again if its body was not streamed.
    Unprocessed,
}

/// Why a proxied request failed.
#[derive(Debug)]
pub(crate) struct ProxyError {
    /// What `Proxy-Status` says.
    pub(crate) kind: ErrorType,
    /// Who is to blame.
    pub(crate) blame: Blame,
    /// Whether it may go again.
    pub(crate) retry: Retry,
    /// For the log and `Proxy-Status`'s `details`.
    pub(crate) detail: String,
}

impl ProxyError {
    /// The upstream server's fault, not to be retried.
    pub(crate) fn new(kind: ErrorType, detail: impl Into<String>) -> Self {
        Self { kind, blame: Blame::Server, retry: Retry::No, detail: detail.into() }
    }

    /// With another party to blame.
    pub(crate) fn blaming(mut self, blame: Blame) -> Self {
        self.blame = blame;
        self
    }

    /// With another retry rule.
    pub(crate) fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The client's status (see [`ErrorType::status`]).
    pub(crate) fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The client's answer: for an upstream's failure, its status, a `Proxy-Status` field and
    /// a short text; for the client's own body failure, 413, 408 or 400.
    pub(crate) fn response(&self, upstream: &str) -> Response {
        if let Blame::Client(e) = &self.blame {
            let status = match e {
                BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                BodyError::TooSlow => StatusCode::REQUEST_TIMEOUT,
                BodyError::Reset | BodyError::Other(_) => StatusCode::BAD_REQUEST,
            };
            tracing::debug!(upstream, %e, status = status.as_u16(), "request body failed while forwarded");
            return Response::text(status, format!("{e}\n"));
        }
        let status = self.status();
        let mut resp = Response::text(
            status,
            format!(
                "{} {}: upstream `{upstream}`: {}\n",
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                self.kind
            ),
        );
        // `details` is a quoted sf-string: printable ASCII, `"` and `\` escaped (RFC 8941 §3.3.3).
        let details: String = self
            .detail
            .chars()
            .filter(|c| (' '..='~').contains(c))
            .flat_map(|c| if c == '"' || c == '\\' { vec!['\\', c] } else { vec![c] })
            .take(200)
            .collect();
        if let Ok(v) = HeaderValue::from_str(&format!("sluice; error={}; details=\"{details}\"", self.kind)) {
            resp.headers.insert("proxy-status", v);
        }
        resp
    }
}

/// How an attempt failed: why, and the request's body when it came back unsent.
pub(crate) struct Failed {
    pub(crate) err: ProxyError,
    /// The request came back unsent: its body, untouched.
    pub(crate) back: Option<UpBody>,
}

impl From<ProxyError> for Failed {
    fn from(err: ProxyError) -> Self {
        Self { err, back: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_names_follow_rfc_9209() {
        assert_eq!(ErrorType::DestinationUnavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ErrorType::ConnectionLimitReached.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ErrorType::HttpResponseTimeout.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(ErrorType::ConnectionTimeout.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(ErrorType::ConnectionRefused.status(), StatusCode::BAD_GATEWAY);
        let r = ProxyError::new(ErrorType::HttpProtocolError, "bad \"status\" line\u{1}").response("app");
        assert_eq!(r.status, StatusCode::BAD_GATEWAY);
        assert_eq!(r.headers["proxy-status"], "sluice; error=http_protocol_error; details=\"bad \\\"status\\\" line\"");
        // The client's own body failure is its answer, not a 502.
        let r = ProxyError::new(ErrorType::ProxyInternalResponse, "x")
            .blaming(Blame::Client(BodyError::TooSlow))
            .response("app");
        assert_eq!(r.status, StatusCode::REQUEST_TIMEOUT);
        assert!(r.headers.get("proxy-status").is_none());
    }
}
