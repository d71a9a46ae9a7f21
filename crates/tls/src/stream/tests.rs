//! Tests of the TLS stream (`super`) against tokio-rustls's client over in-memory pipes.

use super::read::{to_complete, MAX_CIPHERTEXT};
use super::write::EARLY_FRAGMENT;
use super::*;
use crate::records::{HEADER as RECORD_HEADER, MAX_FRAGMENT};
use crate::split::ReadChunks;
use rustls::pki_types::{CertificateDer, ServerName};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

type Client = tokio_rustls::client::TlsStream<DuplexStream>;

/// A server config for two names (a.test first: the fallback) and a client config that
/// trusts b.test's certificate, both offering h2.
fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    configs_for(rustls::DEFAULT_VERSIONS)
}

/// The same, the client offering only `versions`.
fn configs_for(
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    configs_with(rustls::crypto::ring::default_provider(), versions)
}

/// The same, the client with `provider` (its cipher suites).
fn configs_with(
    provider: rustls::crypto::CryptoProvider,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let a = crate::certs::test_cert(&["a.test"]);
    let b = crate::certs::test_cert(&["b.test"]);
    let server = crate::certs::server_config(&[a, b.clone()], &[b"h2", b"http/1.1"]).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(b.leaf_der.clone())).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    (server, Arc::new(client))
}

async fn connect(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
    pipe: usize,
) -> (TlsStream<DuplexStream>, Client) {
    let (s, c) = tokio::io::duplex(pipe);
    let name = ServerName::try_from("b.test").unwrap();
    let (s, c) = tokio::join!(
        TlsStream::accept(s, server.clone()),
        tokio_rustls::TlsConnector::from(client.clone()).connect(name, c)
    );
    (s.unwrap(), c.unwrap())
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Whether the stream holds no buffer memory (as an idle connection must not).
fn holds_nothing(s: &mut TlsStream<DuplexStream>) -> bool {
    !holds_room(s) && s.plain.capacity() == 0 && s.out.capacity() == 0
}

/// Whether `inb` holds memory (advanced to its end it has no capacity left, but keeps its
/// allocation: which `try_reclaim` takes back).
fn holds_room(s: &mut TlsStream<DuplexStream>) -> bool {
    s.inb.capacity() > 0 || s.inb.try_reclaim(1)
}

#[tokio::test]
async fn data_crosses_both_ways_in_pieces_and_the_idle_stream_holds_no_buffers() {
    let (server, client) = configs();
    // A narrow pipe: records arrive cut into many reads, and writes wait for room.
    let (mut s, mut c) = connect(&server, &client, 1000).await;
    assert_eq!(s.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(s.server_name(), Some("b.test"));
    let up = pattern(200_000);
    let down = pattern(150_001);
    let (read_up, wrote_down) = tokio::join!(
        async {
            // The client's data, read 100 bytes at a time (records are up to 16 KiB: the
            // rest of each waits in the stream).
            let mut got = Vec::new();
            let mut buf = [0u8; 100];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            // Ours: plain writes, and vectored ones of small slices (gathered).
            let mut at = 0;
            for (i, size) in [1, 7_000, 70_000, 3].iter().cycle().enumerate() {
                if at == down.len() {
                    break;
                }
                let end = (at + size).min(down.len());
                if i % 2 == 0 {
                    s.write_all(&down[at..end]).await.unwrap();
                } else {
                    let mid = (at + end) / 2;
                    let slices = [io::IoSlice::new(&down[at..mid]), io::IoSlice::new(&down[mid..end])];
                    let n = s.write_vectored(&slices).await.unwrap();
                    s.write_all(&down[at + n..end]).await.unwrap();
                }
                at = end;
            }
            s.shutdown().await.unwrap();
            (got, holds_nothing(&mut s))
        },
        async {
            c.write_all(&up).await.unwrap();
            c.shutdown().await.unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    let (got_up, idle) = read_up;
    assert!(got_up == up, "the server read {} bytes, not the client's {}", got_up.len(), up.len());
    assert!(wrote_down == down, "the client read {} bytes, not the server's {}", wrote_down.len(), down.len());
    assert!(idle, "buffers held after everything was read and written");
}

#[tokio::test]
async fn a_request_and_its_answer_leave_no_buffer_behind() {
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (server, client) = configs_for(&[version]);
        let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
        assert_eq!(s.protocol_version(), Some(version.version));
        // TLS 1.3's records are protected here once the handshake is done; TLS 1.2's by
        // rustls throughout.
        let ours = matches!(s.engine, Engine::Records(_));
        assert_eq!(ours, *version == rustls::version::TLS13, "{:?}", version.version);
        exchange(&mut s, &mut c).await;
    }
}

async fn exchange(s: &mut TlsStream<DuplexStream>, c: &mut Client) {
    for round in 0..3 {
        c.write_all(b"GET / HTTP/1.1\r\nhost: b.test\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\nhost: b.test\r\n\r\n");
        s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await.unwrap();
        s.flush().await.unwrap();
        let n = c.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"HTTP/1.1 204 No Content\r\n\r\n");
        assert!(holds_nothing(s), "round {round}: buffers held while idle");
    }
}

#[tokio::test]
async fn an_end_without_close_notify_is_an_error_after_the_data() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
    c.write_all(b"cut").await.unwrap();
    c.flush().await.unwrap();
    drop(c);
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).await.unwrap(), 3);
    let e = s.read(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn a_bad_record_after_the_handshake_is_refused_with_the_right_alert() {
    let mut forged = vec![23, 3, 3, 0, 40];
    forged.extend_from_slice(&[0x5a; 40]);
    let mut unprotected = vec![22, 3, 3, 0, 4];
    unprotected.extend_from_slice(&[24, 0, 0, 0]);
    // RFC 8446 §6: bad_record_mac 20, unexpected_message 10, record_overflow 22.
    let cases: [(&str, Vec<u8>, rustls::AlertDescription); 3] = [
        ("a record that does not decrypt", forged, rustls::AlertDescription::BadRecordMac),
        ("an unprotected handshake record", unprotected, rustls::AlertDescription::UnexpectedMessage),
        ("a record longer than 2^14 + 256", vec![23, 3, 3, 0x41, 0x01], rustls::AlertDescription::RecordOverflow),
    ];
    for (what, bytes, alert) in cases {
        let (server, client) = configs();
        let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
        c.write_all(b"fine").await.unwrap();
        c.flush().await.unwrap();
        // Written under the client's TLS layer, after a good record.
        c.get_mut().0.write_all(&bytes).await.unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"fine", "{what}");
        let e = s.read(&mut buf).await.expect_err(what);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}");
        // The alert goes out with the next write (the read side does not write).
        assert!(s.write_all(b"no").await.is_err(), "{what}: a write after the error");
        let _ = s.flush().await;
        drop(s);
        let got = c.read(&mut buf).await.expect_err(what);
        let inner = got.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
        assert_eq!(inner, Some(&rustls::Error::AlertReceived(alert)), "{what}: {got}");
    }
}

#[tokio::test]
async fn keys_are_updated_before_their_limit_and_the_client_follows() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 256 * 1024).await;
    // A key may seal five records here: forty records take several key updates.
    let Engine::Records(records) = &mut s.engine else { panic!("TLS 1.3 records not taken over") };
    records.set_seal_limit(5);
    let data = pattern(40 * 1000);
    let (wrote, read) = tokio::join!(
        async {
            for part in data.chunks(1000) {
                s.write_all(part).await.unwrap();
                s.flush().await.unwrap();
            }
            s.shutdown().await.unwrap();
            s
        },
        async {
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    assert!(read == data, "the client read {} bytes, not the server's {}", read.len(), data.len());
    let Engine::Records(records) = &wrote.engine else { unreachable!() };
    assert!(records.key_updates() >= 9, "{} key updates", records.key_updates());
}

#[tokio::test]
async fn every_tls13_suite_carries_data_both_ways() {
    use rustls::crypto::ring::cipher_suite;
    for suite in [
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = vec![suite];
        let (server, client) = configs_with(provider, &[&rustls::version::TLS13]);
        let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
        assert_eq!(c.get_ref().1.negotiated_cipher_suite(), Some(suite));
        assert!(matches!(s.engine, Engine::Records(_)), "{suite:?}: records not taken over");
        let up = pattern(50_000);
        let (got, ()) = tokio::join!(
            async {
                let mut got = vec![0u8; up.len()];
                s.read_exact(&mut got).await.unwrap();
                s.write_all(&got).await.unwrap();
                s.flush().await.unwrap();
                got
            },
            async {
                c.write_all(&up).await.unwrap();
                c.flush().await.unwrap();
            }
        );
        assert!(got == up, "{suite:?}: the server read other bytes");
        let mut back = vec![0u8; up.len()];
        c.read_exact(&mut back).await.unwrap();
        assert!(back == up, "{suite:?}: the client read other bytes");
    }
}

#[tokio::test]
async fn a_key_update_in_the_flight_that_ends_the_handshake_is_answered() {
    // The client's Finished, a KeyUpdate asking for ours, and data, all in the pipe before
    // the server reads past its own flight: rustls must not answer the KeyUpdate (its
    // answer would be lost when the records are handed over), the records layer does.
    let (server, client) = configs();
    let (s, c) = tokio::io::duplex(64 * 1024);
    let accept = tokio::spawn(TlsStream::accept(s, server));
    let name = ServerName::try_from("b.test").unwrap();
    let mut c = tokio_rustls::TlsConnector::from(client).connect(name, c).await.unwrap();
    c.get_mut().1.refresh_traffic_keys().unwrap();
    c.write_all(b"after the update").await.unwrap();
    c.flush().await.unwrap();
    let mut s = accept.await.unwrap().unwrap();
    assert!(matches!(s.engine, Engine::Records(_)), "records not taken over");
    read_then_reply(&mut s, &mut c).await;
}

/// The server reads "after the update" (sent after the client's KeyUpdate) and replies; the
/// reply is encrypted with the server's new keys, so the client reads it only if the server's
/// own KeyUpdate went out first.
async fn read_then_reply(s: &mut TlsStream<DuplexStream>, c: &mut Client) {
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"after the update");
    s.write_all(b"reply").await.unwrap();
    s.flush().await.unwrap();
    let n = c.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"reply");
}

#[tokio::test]
async fn a_run_of_key_updates_is_bounded() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 256 * 1024).await;
    let mut buf = [0u8; 64];
    // 32 in a row are taken (application data starts the count again) ...
    for _ in 0..2 {
        for _ in 0..32 {
            c.get_mut().1.refresh_traffic_keys().unwrap();
        }
        c.write_all(b"ok").await.unwrap();
        c.flush().await.unwrap();
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"ok");
    }
    // ... a 33rd is not.
    for _ in 0..33 {
        c.get_mut().1.refresh_traffic_keys().unwrap();
    }
    c.write_all(b"late").await.unwrap();
    c.flush().await.unwrap();
    let e = s.read(&mut buf).await.expect_err("33 key updates in a row");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}

#[tokio::test]
async fn not_tls_is_refused_with_an_alert() {
    let (server, _) = configs();
    let (s, mut c) = tokio::io::duplex(64 * 1024);
    c.write_all(b"GET / HTTP/1.1\r\nhost: b.test\r\n\r\n").await.unwrap();
    let e = TlsStream::accept(s, server).await.err().expect("a handshake from HTTP/1.1");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).await.unwrap();
    // An alert record (RFC 8446 §5.1: content type 21), fatal (level 2).
    assert!(answer.len() >= 7 && answer[0] == 21 && answer[5] == 2, "{answer:?}");
}

#[tokio::test]
async fn handshake_messages_left_after_an_error_do_not_upset_the_alert() {
    // A ClientHello record carrying two more ClientHellos after it: rustls refuses them
    // while it still holds the ones it has not processed, and the alert must be drawn
    // from it without losing track of them.
    let (server, client) = configs();
    let mut hello = Vec::new();
    let name = ServerName::try_from("b.test").unwrap();
    rustls::ClientConnection::new(client, name).unwrap().write_tls(&mut hello).unwrap();
    assert_eq!(hello[0], 22, "a handshake record");
    let message = hello[5..].to_vec();
    let mut record = hello[..5].to_vec();
    for _ in 0..3 {
        record.extend_from_slice(&message);
    }
    let len = u16::try_from(record.len() - 5).unwrap();
    record[3..5].copy_from_slice(&len.to_be_bytes());
    let (s, mut c) = tokio::io::duplex(64 * 1024);
    c.write_all(&record).await.unwrap();
    let e = TlsStream::accept(s, server).await.err().expect("the handshake fails");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).await.unwrap();
    // A fatal alert (RFC 8446 §5.1: content type 21, level 2).
    assert!(answer.len() >= 7 && answer[0] == 21 && answer[5] == 2, "{answer:?}");
}

#[tokio::test]
async fn a_resumed_handshake_still_knows_the_name() {
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (server, client) = configs_for(&[version]);
        resume(&server, &client).await;
    }
}

async fn resume(server: &Arc<rustls::ServerConfig>, client: &Arc<rustls::ClientConfig>) {
    for round in 0..2 {
        let (mut s, mut c) = connect(server, client, 64 * 1024).await;
        assert_eq!(s.server_name(), Some("b.test"), "round {round}");
        // The client takes its session tickets in with the data that follows them.
        s.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        c.read_exact(&mut buf).await.unwrap();
        let kind = c.get_ref().1.handshake_kind();
        let want = if round == 0 { rustls::HandshakeKind::Full } else { rustls::HandshakeKind::Resumed };
        assert_eq!(kind, Some(want), "round {round}");
    }
}

#[tokio::test]
async fn a_name_another_handshake_left_on_the_thread_is_not_taken() {
    let (server, client) = configs();
    // A ClientHello for a.test processed by a buffered connection on this thread (as the
    // QUIC endpoint's would be): the resolver notes the name and nobody takes it.
    let other = ServerName::try_from("a.test").unwrap();
    let mut hello = Vec::new();
    rustls::ClientConnection::new(client.clone(), other).unwrap().write_tls(&mut hello).unwrap();
    let mut buffered = rustls::ServerConnection::new(server.clone()).unwrap();
    buffered.read_tls(&mut &hello[..]).unwrap();
    buffered.process_new_packets().unwrap();
    assert_eq!(buffered.server_name(), Some("a.test"));
    // Through a narrow pipe: the first reads hold part of the ClientHello only.
    let (s, _c) = connect(&server, &client, 100).await;
    assert_eq!(s.server_name(), Some("b.test"));
}

#[tokio::test]
async fn records_the_reader_has_no_room_for_wait_encrypted_and_writes_go_on() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
    // A key update and three records of 1,000 bytes, all in the pipe before the server
    // reads. (rustls processes the key update and the record after it in one call.)
    c.get_mut().1.refresh_traffic_keys().unwrap();
    let data = pattern(3_000);
    for part in data.chunks(1_000) {
        c.write_all(part).await.unwrap();
        c.flush().await.unwrap();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1_500];
    for (round, reply) in [&b"first"[..], b"second", b"third"].into_iter().enumerate() {
        let n = s.read(&mut buf).await.unwrap();
        got.extend_from_slice(&buf[..n]);
        // One record per read: the next one did not fit in the 500 bytes left, so it waits
        // undecrypted (nothing copied aside) ...
        assert_eq!((n, s.plain.capacity()), (1_000, 0), "read {round}");
        assert_eq!(s.ready, round < 2, "read {round}");
        // ... and the write side, which asks rustls for its state, does not take it (our
        // reply goes after our own key update, or the client could not read it).
        s.write_all(reply).await.unwrap();
        s.flush().await.unwrap();
        let m = c.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..m], reply, "reply {round}");
    }
    assert!(got == data, "the server read other bytes than the client sent");
    assert!(holds_nothing(&mut s), "buffers held after everything was read and written");
}

#[tokio::test]
async fn a_busy_connection_lets_its_room_go_when_nothing_waits() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 256 * 1024).await;
    // Six records of the largest size: a stack read takes the first (and part of the
    // second), the busy connection's next read exactly the other five.
    let data = pattern(6 * MAX_FRAGMENT);
    for part in data.chunks(MAX_FRAGMENT) {
        c.write_all(part).await.unwrap();
    }
    c.flush().await.unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 128 * 1024];
    while got.len() < data.len() {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended early");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == data, "the server read other bytes than the client sent");
    // The last read filled all it asked for: the room is kept for the next one ...
    assert!(s.busy && holds_room(&mut s), "the reads did not go as planned");
    // ... which finds nothing, and lets it go.
    let pending = std::future::poll_fn(|cx| {
        let mut rb = ReadBuf::new(&mut buf);
        Poll::Ready(Pin::new(&mut s).poll_read(cx, &mut rb).is_pending())
    })
    .await;
    assert!(pending, "a read found data the client did not send");
    assert!(holds_nothing(&mut s), "room held while nothing waits");
}

#[tokio::test]
async fn a_key_update_from_the_client_is_answered_before_our_data() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 64 * 1024).await;
    c.get_mut().1.refresh_traffic_keys().unwrap();
    c.write_all(b"after the update").await.unwrap();
    c.flush().await.unwrap();
    read_then_reply(&mut s, &mut c).await;
}

/// A vectored write of HTTP/2-like frames (9-byte headers between large payloads, a small
/// payload at the end) goes out in records filled to the largest fragment across the slices'
/// ends, the last one with what is left, and the client reads every byte in order.
#[tokio::test]
async fn a_vectored_write_fills_its_records_across_the_slices() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 256 * 1024).await;
    // One exchange first: the client's handshake is over and its first data read.
    c.write_all(b"hello").await.unwrap();
    c.flush().await.unwrap();
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"hello");
    // Past the connection's first bytes, which go in smaller records.
    s.early = 0;
    let seq = |s: &TlsStream<DuplexStream>| match &s.engine {
        Engine::Records(r) => r.next_seal_seq(),
        _ => panic!("TLS 1.3 runs on the record layer"),
    };
    let data = pattern(16_384 * 2 + 5_000);
    let (a, rest) = data.split_at(16_384);
    let (b, tail) = rest.split_at(16_384);
    let slices = [&b"head-one!"[..], a, &b"head-two!"[..], b, &b"head-end!"[..], tail];
    let want: Vec<u8> = slices.concat();
    let before = seq(&s);
    let ios: Vec<io::IoSlice<'_>> = slices.iter().map(|b| io::IoSlice::new(b)).collect();
    let n = std::future::poll_fn(|cx| Pin::new(&mut s).poll_write_vectored(cx, &ios)).await.unwrap();
    assert_eq!(n, want.len(), "all of it taken (under the most one write seals)");
    s.flush().await.unwrap();
    // 37,795 bytes: two full records and one of 5,027 bytes; one record per slice would be six.
    assert_eq!(seq(&s) - before, want.len().div_ceil(MAX_FRAGMENT) as u64);
    let mut got = vec![0u8; want.len()];
    c.read_exact(&mut got).await.unwrap();
    assert!(got == want, "the client reads the slices in order");
}

/// Reading in chunks: a bulk upload comes out whole and in order, partly as buffers of their
/// own (each record's plaintext where it was opened), partly (the first read, after a pause)
/// into the caller's buffer; once the chunks are dropped and a read finds nothing waiting, the
/// stream holds no buffer; close_notify ends it with 0.
#[tokio::test]
async fn reading_in_chunks_hands_over_the_records_as_they_are() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 512 * 1024).await;
    let up = pattern(300_001);
    let writer = async {
        for part in up.chunks(50_000) {
            c.write_all(part).await.unwrap();
        }
        c.flush().await.unwrap();
    };
    let mut chunks = Vec::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let reader = async {
        let mut got = Vec::new();
        let mut chunked = 0;
        while got.len() < up.len() {
            let n = std::future::poll_fn(|cx| s.poll_read_chunks(cx, &mut chunks, &mut buf)).await.unwrap();
            assert!(n > 0, "no end before the data");
            assert!(chunks.is_empty() || buf.is_empty(), "one way or the other per read");
            chunked += chunks.len();
            got.extend_from_slice(&buf.split());
            for ch in chunks.drain(..) {
                assert!(ch.len() <= MAX_FRAGMENT);
                got.extend_from_slice(&ch);
            }
            buf.reserve(64 * 1024);
        }
        (got, chunked)
    };
    let ((got, chunked), ()) = tokio::join!(reader, writer);
    assert!(got == up, "{} of {} bytes, in order", got.len(), up.len());
    assert!(chunked >= 10, "most records handed over as they are: {chunked}");
    // Nothing waits: the read is pending, and the stream lets its room go.
    let waker = std::task::Waker::noop();
    let pending = s.poll_read_chunks(&mut Context::from_waker(waker), &mut chunks, &mut buf);
    assert!(pending.is_pending());
    assert!(!holds_room(&mut s), "nothing held once the chunks are gone and nothing waits");
    c.shutdown().await.unwrap();
    let n = std::future::poll_fn(|cx| s.poll_read_chunks(cx, &mut chunks, &mut buf)).await.unwrap();
    assert_eq!((n, chunks.len(), buf.len()), (0, 0, 0), "close_notify: the end");
}

#[test]
fn what_completes_the_held_records() {
    let whole = RECORD_HEADER + MAX_FRAGMENT + 256;
    assert_eq!(to_complete(&[]), whole);
    assert_eq!(to_complete(&[23, 3, 3]), whole - 3);
    // A record of 100 bytes with 40 of them held.
    let mut held = vec![23, 3, 3, 0, 100];
    held.extend_from_slice(&[0; 40]);
    assert_eq!(to_complete(&held), 60);
    // That record whole and the next one's header begun.
    held.extend_from_slice(&[0; 60]);
    assert_eq!(to_complete(&held), whole);
    held.extend_from_slice(&[23, 3]);
    assert_eq!(to_complete(&held), whole - 2);
    // A header claiming more than any record may hold gets room for the most one may.
    assert_eq!(to_complete(&[23, 3, 3, 0xff, 0xff]), MAX_CIPHERTEXT);
}

/// The sizes of the TLS records in `wire`, their headers' length fields.
fn record_lengths(mut wire: &[u8]) -> Vec<usize> {
    let mut lengths = Vec::new();
    while wire.len() >= 5 {
        let n = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        lengths.push(n);
        wire = &wire[(5 + n).min(wire.len())..];
    }
    lengths
}

#[tokio::test]
async fn a_connection_sends_its_first_bytes_in_records_of_about_a_segment() {
    let (server, client) = configs();
    let (mut s, mut c) = connect(&server, &client, 1 << 20).await;
    // Writes of 20,000 bytes, as a download's first writes are: the records each one makes.
    let data = pattern(EARLY_BYTES + 60_000);
    let mut records = Vec::new();
    for part in data.chunks(20_000) {
        s.encrypt(part).unwrap();
        records.push(record_lengths(s.out.pending()));
        s.flush().await.unwrap();
    }
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).await.unwrap();
    assert!(got == data, "the client read {} bytes, not the server's {}", got.len(), data.len());
    // A record holds its plaintext, the content type and the 16-byte tag (RFC 8446 §5.2).
    let plain: Vec<Vec<usize>> = records.iter().map(|r| r.iter().map(|n| n - 17).collect()).collect();
    let mut sent = 0;
    for (i, write) in plain.iter().enumerate() {
        assert_eq!(write.iter().sum::<usize>(), 20_000.min(data.len() - i * 20_000), "write {i}: {write:?}");
        for &n in write {
            if sent < EARLY_BYTES {
                assert!(n <= EARLY_FRAGMENT, "a record of {n} bytes after {sent} bytes sent");
            }
            sent += n;
        }
    }
    // After the early bytes, records of the largest size (each write's last takes the rest).
    let after = &plain[EARLY_BYTES.div_ceil(20_000)];
    assert_eq!(after[0], MAX_FRAGMENT, "{after:?}");
    assert_eq!(plain[0].len(), 20_000usize.div_ceil(EARLY_FRAGMENT), "{:?}", plain[0]);
}
