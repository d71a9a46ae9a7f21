//! Differential tests of the record layer against rustls: records sealed here are opened by
//! rustls's client, and records rustls's client seals are opened here, for every TLS 1.3
//! suite, across key updates both ways, with alerts, and with records cut anywhere.

use rustls::crypto::ring::cipher_suite;

use super::*;
use crate::testing::{client_data, client_reads, configs, drain, handshake, Pair};

const SUITES: [rustls::SupportedCipherSuite; 3] = [
    cipher_suite::TLS13_AES_128_GCM_SHA256,
    cipher_suite::TLS13_AES_256_GCM_SHA384,
    cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
];

fn pair(suite: rustls::SupportedCipherSuite) -> Pair {
    let (server, client) = configs(&[suite]);
    let pair = handshake(&server, &client).unwrap();
    assert_eq!(pair.client.negotiated_cipher_suite(), Some(suite));
    pair
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Seal `data` as the TLS stream does: records of at most `MAX_FRAGMENT`, a KeyUpdate first
/// when one is due.
fn seal(server: &mut Records, data: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    let mut chunks: Vec<&[u8]> = data.chunks(MAX_FRAGMENT).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for c in chunks {
        let mut room = vec![0u8; c.len() + OVERHEAD + KEY_UPDATE_RECORD];
        let mut at = 0;
        if server.key_update_due() {
            at += server.seal_key_update(&mut room).unwrap();
        }
        at += server.seal_data_with(c.len(), |d| d.copy_from_slice(c), &mut room[at..]).unwrap();
        wire.extend_from_slice(&room[..at]);
    }
    wire
}

/// Open every record of `wire`, fed `step` bytes at a time as a socket would hand them over:
/// the application data, and whether close_notify came.
fn open_all(server: &mut Records, wire: &[u8], step: usize) -> Result<(Vec<u8>, bool), Fatal> {
    let mut held: Vec<u8> = Vec::new();
    let mut plain = Vec::new();
    let mut closed = false;
    for piece in wire.chunks(step.max(1)) {
        held.extend_from_slice(piece);
        loop {
            match server.open(&mut held)? {
                None => break,
                Some((n, opened)) => {
                    match opened {
                        Opened::Data(d) => plain.extend_from_slice(d),
                        Opened::Closed => closed = true,
                        Opened::Nothing => {}
                    }
                    held.drain(..n);
                }
            }
        }
    }
    assert!(held.is_empty(), "a record left unopened");
    Ok((plain, closed))
}

#[test]
fn every_suite_carries_data_both_ways_across_key_updates() {
    for suite in SUITES {
        let Pair { mut server, mut client } = pair(suite);
        for round in 0..6u8 {
            // Ours, opened by rustls: sizes around a record's edges.
            for n in [0, 1, 100, MAX_FRAGMENT - 1, MAX_FRAGMENT, MAX_FRAGMENT + 1, 3 * MAX_FRAGMENT + 7] {
                let data = pattern(n, round);
                let wire = seal(&mut server, &data);
                assert_eq!(client_reads(&mut client, &wire).unwrap(), data, "{suite:?}: {n} bytes to the client");
            }
            // rustls's, opened here, handed over in pieces of every shape.
            for (n, step) in [(1, 1), (5000, 7), (40_000, 4096), (70_000, 70_000)] {
                let data = pattern(n, round ^ 0x5a);
                let wire = client_data(&mut client, &data);
                let (got, closed) = open_all(&mut server, &wire, step).unwrap_or_else(|f| panic!("{:?}", f.error));
                assert_eq!(got, data, "{suite:?}: {n} bytes from the client in steps of {step}");
                assert!(!closed);
            }
            // A key update each way: ours (the client follows it), then the client's, which
            // asks for ours in turn (rustls asks): the next record we seal carries it.
            let before = server.key_updates();
            let mut ku = vec![0u8; KEY_UPDATE_RECORD];
            let n = server.seal_key_update(&mut ku).unwrap();
            assert_eq!(n, KEY_UPDATE_RECORD);
            assert_eq!(client_reads(&mut client, &ku[..n]).unwrap(), b"");
            client.refresh_traffic_keys().unwrap();
            let wire = drain(&mut client);
            let (got, _) = open_all(&mut server, &wire, 3).unwrap_or_else(|f| panic!("{:?}", f.error));
            assert!(got.is_empty());
            assert!(server.key_update_due(), "the client asked for our update");
            let data = pattern(2000, round);
            let wire = seal(&mut server, &data);
            assert_eq!(server.key_updates(), before + 2);
            assert_eq!(client_reads(&mut client, &wire).unwrap(), data);
            assert!(!server.key_update_due());
        }
        // close_notify both ways.
        let mut alert = vec![0u8; 2 + OVERHEAD];
        let n = server.seal_alert(alert::CLOSE_NOTIFY, &mut alert).unwrap();
        assert_eq!(client_reads(&mut client, &alert[..n]).unwrap(), b"");
        client.send_close_notify();
        let wire = drain(&mut client);
        let (got, closed) = open_all(&mut server, &wire, 1).unwrap_or_else(|f| panic!("{:?}", f.error));
        assert!(got.is_empty() && closed, "{suite:?}: close_notify from the client");
    }
}

#[test]
fn a_record_changed_anywhere_is_refused_with_bad_record_mac_or_a_header_alert() {
    let Pair { mut server, mut client } = pair(SUITES[0]);
    let wire = client_data(&mut client, b"hello, records");
    for at in 0..wire.len() {
        let Pair { server: mut fresh, client: mut c2 } = pair(SUITES[0]);
        let mut w = client_data(&mut c2, b"hello, records");
        w[at] ^= 0x40;
        let alert = match fresh.open(&mut w) {
            Err(f) => f.alert,
            // A length made longer: the record is not complete yet.
            Ok(None) => continue,
            // The legacy version (bytes 1 and 2) is ignored on receipt (RFC 8446 §5.1), and
            // the additional data is made with 0x0303 whatever came, as rustls makes it.
            Ok(Some((_, Opened::Data(d)))) if at == 1 || at == 2 => {
                assert_eq!(d, b"hello, records");
                continue;
            }
            Ok(Some(_)) => panic!("a changed byte at {at} was accepted"),
        };
        // The outer type must be application data; the length, the ciphertext and the tag
        // are authenticated.
        let want = if at == 0 { alert::UNEXPECTED_MESSAGE } else { alert::BAD_RECORD_MAC };
        assert_eq!(alert, Some(want), "byte {at}");
    }
    // The untouched record still opens.
    let (got, _) = open_all(&mut server, &wire, 1).unwrap_or_else(|f| panic!("{:?}", f.error));
    assert_eq!(got, b"hello, records");
}

#[test]
fn records_of_another_connection_or_out_of_order_do_not_open() {
    let Pair { mut server, .. } = pair(SUITES[2]);
    let Pair { client: mut other, .. } = pair(SUITES[2]);
    let wire = client_data(&mut other, b"not for you");
    assert_eq!(server.open(&mut wire.clone()).err().and_then(|f| f.alert), Some(alert::BAD_RECORD_MAC));
    // A replayed record: its sequence number has passed.
    let Pair { mut server, mut client } = pair(SUITES[1]);
    let first = client_data(&mut client, b"one");
    assert!(matches!(server.open(&mut first.clone()), Ok(Some(_))));
    assert_eq!(server.open(&mut first.clone()).err().and_then(|f| f.alert), Some(alert::BAD_RECORD_MAC));
}

#[test]
fn an_oversized_or_unprotected_record_is_refused_before_it_is_read_whole() {
    let Pair { mut server, .. } = pair(SUITES[0]);
    // A header announcing more than 2^14 + 256 bytes (RFC 8446 §5.2): refused on the header.
    let mut long = vec![APPLICATION_DATA, 3, 3, 0x41, 0x01];
    assert_eq!(server.open(&mut long).err().and_then(|f| f.alert), Some(alert::RECORD_OVERFLOW));
    let Pair { mut server, .. } = pair(SUITES[0]);
    let mut plain = vec![HANDSHAKE, 3, 3, 0, 1, 0];
    assert_eq!(server.open(&mut plain).err().and_then(|f| f.alert), Some(alert::UNEXPECTED_MESSAGE));
    // Part of a header, or a record not all there: nothing yet.
    let Pair { mut server, .. } = pair(SUITES[0]);
    assert!(matches!(server.open(&mut [APPLICATION_DATA, 3, 3]), Ok(None)));
    assert!(matches!(server.open(&mut [APPLICATION_DATA, 3, 3, 0, 20, 1, 2]), Ok(None)));
}

#[test]
fn a_run_of_key_updates_without_data_is_bounded_and_data_resets_the_count() {
    let Pair { mut server, mut client } = pair(SUITES[0]);
    // Up to the allowance, then data resets it.
    for _ in 0..KEY_UPDATES_ALLOWED {
        client.refresh_traffic_keys().unwrap();
        let wire = drain(&mut client);
        open_all(&mut server, &wire, 64).unwrap_or_else(|f| panic!("{:?}", f.error));
    }
    let wire = client_data(&mut client, b"x");
    assert_eq!(open_all(&mut server, &wire, 64).unwrap_or_else(|f| panic!("{:?}", f.error)).0, b"x");
    for _ in 0..KEY_UPDATES_ALLOWED {
        client.refresh_traffic_keys().unwrap();
        let wire = drain(&mut client);
        open_all(&mut server, &wire, 64).unwrap_or_else(|f| panic!("{:?}", f.error));
    }
    client.refresh_traffic_keys().unwrap();
    let wire = drain(&mut client);
    let err = open_all(&mut server, &wire, 64).expect_err("one key update too many");
    assert_eq!(err.alert, Some(alert::UNEXPECTED_MESSAGE));
}
