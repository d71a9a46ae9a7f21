//! The `Date` response field (RFC 9110 §6.6.1: an origin server with a clock sends it in every
//! 2xx, 3xx and 4xx response) for the HTTP/2 and HTTP/3 engines, which read no clock: each
//! connection's driver hands its engine the current value when the second changes
//! ([`Stamp::due`]). The text is made once a second per thread, not per connection or response.
//! (HTTP/1.1 responses get theirs from hyper.)

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

thread_local! {
    /// The second last formatted on this thread, and its text.
    static CACHE: RefCell<(u64, Bytes)> = const { RefCell::new((u64::MAX, Bytes::new())) };
}

/// What a connection last gave its engine.
#[derive(Debug, Default)]
pub(crate) struct Stamp {
    secs: Option<u64>,
}

impl Stamp {
    /// The value to hand the engine now, if the second changed since the last one (or there
    /// was none): an IMF-fixdate such as `Mon, 07 Dec 2026 17:12:31 GMT` (RFC 9110 §5.6.7).
    pub(crate) fn due(&mut self) -> Option<Bytes> {
        let now = SystemTime::now();
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if self.secs == Some(secs) {
            return None;
        }
        self.secs = Some(secs);
        Some(CACHE.with_borrow_mut(|(at, text)| {
            if *at != secs {
                *at = secs;
                *text = Bytes::from(httpdate::fmt_http_date(now));
            }
            text.clone()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_is_due_once_a_second_and_reads_as_an_imf_fixdate() {
        let mut s = Stamp::default();
        let first = s.due().expect("the first is always due");
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&first).unwrap()).unwrap();
        let off = SystemTime::now().duration_since(parsed).unwrap_or_default();
        assert!(off.as_secs() <= 2, "{first:?} is {off:?} behind");
        assert!(first.ends_with(b" GMT") && first.len() == 29, "{first:?}");
        // Within the same second: nothing new (unless the second just turned).
        match s.due() {
            None => {}
            Some(next) => assert!(next != first),
        }
        // Another connection on the thread gets the same text, shared.
        let mut t = Stamp::default();
        let other = t.due().unwrap();
        assert!(other == first || httpdate::parse_http_date(std::str::from_utf8(&other).unwrap()).is_ok());
    }
}
