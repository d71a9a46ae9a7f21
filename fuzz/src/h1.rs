//! The proxy's HTTP/1.1 response-head parser (`sluice_http::h1::parse_response`), against
//! httparse's default response parser: for any bytes, both accept the same heads (the same
//! length, status, version and fields, names lower-cased) and refuse the same ones; the
//! parsed fields convert to `http` values; what follows the head stays in the buffer.

use bytes::BytesMut;
use sluice_http::h1::{parse_response, Error, MAX_FIELDS};

/// Raw input: byte 0 picks the size limit (255: none to speak of), the rest is what the
/// upstream sent.
pub fn run(data: &[u8]) {
    let [limit, text @ ..] = data else { return };
    let max = if *limit == 255 { 1 << 20 } else { usize::from(*limit) * 4 };
    let mut buf = BytesMut::from(text);
    let ours = parse_response(&mut buf, max);
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut r = httparse::Response::new(&mut slots);
    let theirs = r.parse(text);
    match (ours, theirs) {
        (Ok(Some(head)), Ok(httparse::Status::Complete(len))) => {
            assert!(len <= max, "a {len}-byte head over the {max}-byte limit");
            assert_eq!(text.len() - buf.len(), len, "head length");
            assert_eq!(&buf[..], &text[len..], "what follows the head stays");
            assert_eq!(Some(head.status.as_u16()), r.code);
            assert_eq!(Some(u8::from(head.version == http::Version::HTTP_11)), r.version);
            assert_eq!(head.fields.len(), r.headers.len());
            for ((name, value), h) in head.fields.iter().zip(r.headers.iter()) {
                assert_eq!(name, h.name.to_ascii_lowercase().as_bytes());
                assert_eq!(value, h.value);
                assert!(http::HeaderName::from_bytes(name).is_ok());
                assert!(http::HeaderValue::from_bytes(value).is_ok());
                // Looked up by name (known names by their kind), the field is found.
                assert!(head.fields.values(name).any(|v| v == value));
            }
            let mut map = http::HeaderMap::new();
            head.fields.append_to_map(&mut map);
            assert_eq!(map.len(), r.headers.len(), "every field converts to the map");
        }
        // httparse takes any three digits; a status code is 100 to 999.
        (Err(Error::Invalid(_)), Ok(httparse::Status::Complete(len))) if r.code.is_some_and(|c| c < 100) => {
            assert!(len <= max);
        }
        (Err(Error::TooLarge), Ok(httparse::Status::Complete(len))) => assert!(len > max, "{len} within {max}"),
        (Ok(None), Ok(httparse::Status::Partial)) => assert!(text.len() <= max),
        (Err(Error::TooLarge), Ok(httparse::Status::Partial)) => assert!(text.len() > max),
        (Err(Error::TooLarge), Err(httparse::Error::TooManyHeaders)) => {}
        (Err(Error::Invalid(_)), Err(e)) if e != httparse::Error::TooManyHeaders => {}
        (ours, theirs) => panic!("ours {ours:?}, httparse's {theirs:?}"),
    }
}
