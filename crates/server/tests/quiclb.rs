//! QUIC-LB connection ids (draft-ietf-quic-load-balancers-21): with `[quic] server_id` every
//! connection id Sluice gives a client (the handshake's and those of NEW_CONNECTION_ID) carries
//! that server id, encrypted with `lb_key`, where a load balancer holding the configuration
//! reads it (`sluice_quiclb::Decoder`). The client is aioquic.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{require_tool, run, Options, Server};

/// The connection ids an aioquic client holds for the server after a request: hex, the one in
/// use first.
fn server_cids(srv: &Server) -> Vec<String> {
    let script = format!(
        "import asyncio, ssl\n\
         from aioquic.asyncio import connect\n\
         from aioquic.quic.configuration import QuicConfiguration\n\
         from aioquic.h3.connection import H3_ALPN\n\
         async def main():\n\
         \x20   cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE)\n\
         \x20   async with connect('127.0.0.1', {port}, configuration=cfg) as c:\n\
         \x20       await c.ping()\n\
         \x20       await asyncio.sleep(0.3)\n\
         \x20       q = c._quic\n\
         \x20       print(' '.join([q._peer_cid.cid.hex()] + [x.cid.hex() for x in q._peer_cid_available]))\n\
         asyncio.run(main())\n",
        port = srv.tls_port
    );
    let out = run(Command::new("python3").arg("-c").arg(&script), Duration::from_secs(30));
    out.expect_success("aioquic client");
    out.stdout.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn connection_ids_carry_the_server_id() {
    const TEST: &str = "connection_ids_carry_the_server_id";
    require_tool!("python3", TEST);
    if !support::have_aioquic(TEST) {
        return;
    }
    let key = "8f95f09245765f80256934e50c66207f";
    let extra = format!("[quic]\nserver_id = \"5a17\"\nlb_config_id = 2\nlb_nonce_len = 8\nlb_key = \"{key}\"\n");
    let srv = Server::start_with(&Options { extra, ..Options::default() });
    let cids = server_cids(&srv);
    assert!(cids.len() >= 2, "the client should hold more than the handshake's id: {cids:?}");
    let decoder = sluice_quiclb::Decoder::new(sluice_quiclb::Config {
        config_id: 2,
        server_id_len: 2,
        nonce_len: 8,
        key: Some(sluice_quiclb::unhex(key).unwrap().try_into().unwrap()),
        encode_len: true,
    })
    .unwrap();
    for c in &cids {
        let b = sluice_quiclb::unhex(c).unwrap();
        assert_eq!(b.len(), 11, "{c}");
        // Config 2 in the high bits, the length (10 after the first octet) in the low ones.
        assert_eq!(b[0], (2 << 5) | 10, "{c}");
        assert_eq!(decoder.server_id(&b), Some(vec![0x5a, 0x17]), "{c}");
        assert!(!c[2..].starts_with("5a17"), "the server id is encrypted: {c}");
    }
    let mut unique = cids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), cids.len(), "{cids:?}");

    // Without the configuration: quinn's random ids, which do not decode to the server id.
    let plain = Server::start();
    for c in server_cids(&plain) {
        let b = sluice_quiclb::unhex(&c).unwrap();
        assert!(b.len() != 11 || decoder.server_id(&b) != Some(vec![0x5a, 0x17]), "{c}");
    }
}
