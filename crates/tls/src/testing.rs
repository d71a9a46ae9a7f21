//! In-memory TLS 1.3 handshakes whose server side is handed over to [`Records`], with a rustls
//! client on the other end: for the record layer's differential tests and its fuzz target
//! (feature `test-support`). Nothing here touches a socket.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};

use crate::records::Records;

/// A server configuration for `server.test` (made once per call: a new key) and a client
/// configuration that trusts it and offers only the TLS 1.3 `suites` given (every one when
/// empty).
pub fn configs(suites: &[rustls::SupportedCipherSuite]) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let cert = crate::certs::test_cert(&["server.test"]);
    let server = crate::certs::server_config(std::slice::from_ref(&cert), &[b"h2"]).expect("a generated certificate");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(cert.leaf_der.clone())).expect("a generated certificate");
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        provider.cipher_suites = suites.to_vec();
    }
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring's suites")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    (server, Arc::new(client))
}

/// A finished handshake: the server's records, the client, and what the server sent after
/// the handshake that the client has not read yet (session tickets are read already).
pub struct Pair {
    /// The server's side, handed over.
    pub server: Records,
    /// The client (rustls's buffered connection).
    pub client: rustls::ClientConnection,
}

/// Run a TLS 1.3 handshake between `client_cfg` and `server_cfg` in memory and hand the
/// server's side over to [`Records`], as the TLS stream does.
pub fn handshake(
    server_cfg: &Arc<rustls::ServerConfig>,
    client_cfg: &Arc<rustls::ClientConfig>,
) -> Result<Pair, String> {
    let name = ServerName::try_from("server.test").expect("a valid name");
    let mut client = rustls::ClientConnection::new(client_cfg.clone(), name).map_err(|e| e.to_string())?;
    let mut server = UnbufferedServerConnection::new(server_cfg.clone()).map_err(|e| e.to_string())?;
    // Bytes the server has received and not consumed, and bytes it sent.
    let mut inb: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    for _ in 0..64 {
        while client.wants_write() {
            client.write_tls(&mut inb).map_err(|e| e.to_string())?;
        }
        let mut progressed = true;
        let mut writable = false;
        while progressed {
            let UnbufferedStatus { discard, state } = server.process_tls_records(&mut inb);
            progressed = discard > 0;
            match state.map_err(|e| format!("server: {e}"))? {
                ConnectionState::EncodeTlsData(mut enc) => {
                    let mut buf = vec![0u8; 16 * 1024];
                    match enc.encode(&mut buf) {
                        Ok(n) => out.extend_from_slice(&buf[..n]),
                        Err(EncodeError::InsufficientSize(_)) => return Err("a handshake message over 16 KiB".into()),
                        Err(e) => return Err(e.to_string()),
                    }
                    progressed = true;
                }
                ConnectionState::TransmitTlsData(t) => {
                    t.done();
                    progressed = true;
                }
                ConnectionState::WriteTraffic(_) => writable = true,
                ConnectionState::BlockedHandshake => {}
                _ => return Err("an unexpected server state during the handshake".into()),
            }
            inb.drain(..discard);
        }
        if !out.is_empty() {
            let mut rd = &out[..];
            while !rd.is_empty() {
                client.read_tls(&mut rd).map_err(|e| e.to_string())?;
                client.process_new_packets().map_err(|e| format!("client: {e}"))?;
            }
            out.clear();
        }
        if writable && !server.is_handshaking() && !client.is_handshaking() && inb.is_empty() {
            let server = Records::new(server).map_err(|e| e.to_string())?;
            return Ok(Pair { server, client });
        }
    }
    Err("the handshake did not finish".into())
}

/// Application data sealed by the client, as the bytes it would send.
pub fn client_data(client: &mut rustls::ClientConnection, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut wire = Vec::new();
    let mut rest = data;
    // rustls's writer takes as much as its buffer limit allows; the rest after a drain.
    while !rest.is_empty() {
        let n = client.writer().write(rest).expect("writes into rustls's buffer do not fail");
        rest = &rest[n..];
        wire.extend_from_slice(&drain(client));
    }
    wire
}

/// What the client has queued to send.
pub fn drain(client: &mut rustls::ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).expect("writes into a Vec do not fail");
    }
    wire
}

/// Feed `wire` (the server's records) to the client and read the plaintext it yields.
pub fn client_reads(client: &mut rustls::ClientConnection, wire: &[u8]) -> Result<Vec<u8>, rustls::Error> {
    use std::io::Read;
    let mut rd = wire;
    let mut plain = Vec::new();
    while !rd.is_empty() {
        client.read_tls(&mut rd).map_err(|e| rustls::Error::General(e.to_string()))?;
        client.process_new_packets()?;
        let mut buf = [0u8; 4096];
        loop {
            match client.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => plain.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
    }
    Ok(plain)
}
