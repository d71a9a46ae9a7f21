//! Response fields in the engines' form, made from an `http` header map.

use bytes::Bytes;
use http::HeaderMap;

use crate::request::{static_response_name, Field};

/// Response header fields for HTTP/2 and HTTP/3: lower-case names (the http crate's are),
/// minus the connection-specific ones both forbid (RFC 9113 §8.2.2, RFC 9114 §4.2).
pub fn response_fields(headers: &HeaderMap) -> Vec<Field> {
    if headers.is_empty() {
        return Vec::new();
    }
    let mut fields = Vec::with_capacity(headers.len());
    let hop = |n: &http::HeaderName| {
        matches!(n.as_str(), "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade")
    };
    // One buffer for every value and every name not in `static_response_name`, each split off
    // it as it is written: one allocation per response head for the bytes (and one for the
    // list), not two per field, and one pass over the map. 512 bytes hold a typical head; a
    // larger one grows it. A name in the list costs no copy and no reference count (as its
    // drop).
    let mut all = bytes::BytesMut::with_capacity(512);
    for (n, v) in headers.iter().filter(|(n, _)| !hop(n)) {
        let name = match static_response_name(n.as_str().as_bytes()) {
            Some(s) => Bytes::from_static(s),
            None => {
                all.extend_from_slice(n.as_str().as_bytes());
                all.split_to(n.as_str().len()).freeze()
            }
        };
        all.extend_from_slice(v.as_bytes());
        fields.push(Field::new(name, all.split_to(v.len()).freeze()));
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_names_are_the_names_asked_for() {
        for n in ["content-type", "etag", "x-content-type-options", "alt-svc", "set-cookie", "priority", "via"] {
            assert_eq!(static_response_name(n.as_bytes()), Some(n.as_bytes()));
        }
        assert_eq!(static_response_name(b"x-unknown"), None);
        assert_eq!(static_response_name(b"etags"), None);
    }

    #[test]
    fn response_fields_keep_order_and_values_and_drop_connection_fields() {
        let mut h = HeaderMap::new();
        let big = "v".repeat(3000);
        h.insert("content-type", http::HeaderValue::from_static("text/plain"));
        h.insert("connection", http::HeaderValue::from_static("close"));
        h.append("set-cookie", http::HeaderValue::from_static("a=1"));
        h.append("set-cookie", http::HeaderValue::from_static("b=2"));
        h.insert("x-big", http::HeaderValue::from_str(&big).unwrap());
        h.insert("transfer-encoding", http::HeaderValue::from_static("chunked"));
        h.insert("x-last", http::HeaderValue::from_static(""));
        h.insert("etag", http::HeaderValue::from_static("\"1\""));
        let got: Vec<(String, String)> = response_fields(&h)
            .iter()
            .map(|f| (String::from_utf8(f.name.to_vec()).unwrap(), String::from_utf8(f.value.to_vec()).unwrap()))
            .collect();
        let want = [
            ("content-type", "text/plain"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("x-big", big.as_str()),
            ("x-last", ""),
            ("etag", "\"1\""),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        assert_eq!(got, want);
    }
}
