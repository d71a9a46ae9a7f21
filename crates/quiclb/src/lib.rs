//! QUIC-LB (draft-ietf-quic-load-balancers-21): QUIC connection IDs that carry the server's id
//! where a load balancer that shares the configuration can read it, so that packets of a
//! connection reach its server whatever address they come from (migration, NAT rebinding).
//! Sans-IO: the caller brings the nonce's random bytes.
//!
//! A connection ID is `first octet ‖ block ‖ extra`: the first octet's three high bits are the
//! configuration id (§3.1; 0–6, 0b111 is "unroutable"), its five low bits the length of the
//! rest (§3.3, when the length is encoded) or random; the block is `server id ‖ nonce` (§5.2),
//! in the clear, encrypted with AES-128-ECB when it is exactly 16 bytes (§5.4.1), or else
//! with four Feistel passes of AES-128-ECB over its halves (§5.4.2). Written here because no
//! maintained crate implements the draft (Envoy and quiche have it in C++).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;

/// The configuration id no configuration may use: "unroutable" (§3.1).
pub const UNROUTABLE: u8 = 0b111;
/// QUIC v1's longest connection id (RFC 9000 §17.2).
pub const MAX_CID_LEN: usize = 20;

/// One QUIC-LB configuration, as the servers and the load balancer share it.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// The configuration id, 0–6 (the first octet's three high bits).
    pub config_id: u8,
    /// Length of server ids, 1–15 octets.
    pub server_id_len: usize,
    /// Length of the nonce, 4–18 octets; `server_id_len + nonce_len` is at most 19.
    pub nonce_len: usize,
    /// The AES-128 key; `None`: the server id goes in the clear.
    pub key: Option<[u8; 16]>,
    /// Encode the connection id's length in the first octet (§3.3).
    pub encode_len: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("config_id", &self.config_id)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("key", &self.key.map(|_| "(set)"))
            .field("encode_len", &self.encode_len)
            .finish()
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Check the lengths and the id (§3.1, §5.3).
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.config_id >= UNROUTABLE {
            return Err(ConfigError("the configuration id is 0 to 6 (7 means unroutable)"));
        }
        if !(1..=15).contains(&self.server_id_len) {
            return Err(ConfigError("a server id is 1 to 15 octets"));
        }
        if !(4..=18).contains(&self.nonce_len) {
            return Err(ConfigError("the nonce is 4 to 18 octets"));
        }
        if self.server_id_len + self.nonce_len > 19 {
            return Err(ConfigError("server id and nonce together are at most 19 octets"));
        }
        Ok(())
    }

    /// The length of the connection ids made with this configuration.
    pub fn cid_len(&self) -> usize {
        1 + self.server_id_len + self.nonce_len
    }
}

/// The block cipher of one configuration, or none (plaintext).
struct Cipher {
    aes: Option<Aes128>,
    /// Octets of the block (server id + nonce).
    n: usize,
}

impl Cipher {
    fn new(cfg: &Config) -> Self {
        Self { aes: cfg.key.map(|k| Aes128::new(&k.into())), n: cfg.server_id_len + cfg.nonce_len }
    }

    fn aes_block(aes: &Aes128, input: [u8; 16]) -> [u8; 16] {
        let mut b = input.into();
        aes.encrypt_block(&mut b);
        b.into()
    }

    /// Half length, and whether the halves share a nibble (odd block length).
    fn half(&self) -> (usize, bool) {
        (self.n.div_ceil(2), self.n % 2 == 1)
    }

    /// The round function of pass `pass` (§5.4.2.2): AES of `half ‖ zeros ‖ n ‖ pass`,
    /// truncated to a half.
    fn round(&self, aes: &Aes128, pass: u8, half: &[u8]) -> Vec<u8> {
        let mut input = [0u8; 16];
        input[..half.len()].copy_from_slice(half);
        input[14] = self.n as u8;
        input[15] = pass;
        Self::aes_block(aes, input)[..half.len()].to_vec()
    }

    /// Left half: with an odd length its last nibble belongs to the right half.
    fn fix_left(&self, mut x: Vec<u8>) -> Vec<u8> {
        if self.half().1 {
            if let Some(last) = x.last_mut() {
                *last &= 0xf0;
            }
        }
        x
    }

    /// Right half: with an odd length its first nibble belongs to the left half.
    fn fix_right(&self, mut x: Vec<u8>) -> Vec<u8> {
        if self.half().1 {
            x[0] &= 0x0f;
        }
        x
    }

    fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
        a.iter().zip(b).map(|(x, y)| x ^ y).collect()
    }

    /// The two halves of a block (an odd length shares its middle octet).
    fn split(&self, block: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (h, _) = self.half();
        (self.fix_left(block[..h].to_vec()), self.fix_right(block[self.n - h..].to_vec()))
    }

    fn join(&self, l: &[u8], r: &[u8]) -> Vec<u8> {
        let (h, odd) = self.half();
        if odd {
            let mut out = l[..h - 1].to_vec();
            out.push(l[h - 1] | r[0]);
            out.extend_from_slice(&r[1..]);
            out
        } else {
            [l, r].concat()
        }
    }

    fn encrypt(&self, block: &[u8]) -> Vec<u8> {
        let Some(aes) = &self.aes else { return block.to_vec() };
        if self.n == 16 {
            let mut b = [0u8; 16];
            b.copy_from_slice(block);
            return Self::aes_block(aes, b).to_vec();
        }
        let (l0, r0) = self.split(block);
        let r1 = self.fix_right(Self::xor(&r0, &self.round(aes, 1, &l0)));
        let l1 = self.fix_left(Self::xor(&l0, &self.round(aes, 2, &r1)));
        let r2 = self.fix_right(Self::xor(&r1, &self.round(aes, 3, &l1)));
        let l2 = self.fix_left(Self::xor(&l1, &self.round(aes, 4, &r2)));
        self.join(&l2, &r2)
    }

    fn decrypt(&self, block: &[u8]) -> Vec<u8> {
        let Some(aes) = &self.aes else { return block.to_vec() };
        if self.n == 16 {
            use aes::cipher::BlockDecrypt;
            let mut b = aes::Block::clone_from_slice(block);
            aes.decrypt_block(&mut b);
            return b.to_vec();
        }
        let (l2, r2) = self.split(block);
        let l1 = self.fix_left(Self::xor(&l2, &self.round(aes, 4, &r2)));
        let r1 = self.fix_right(Self::xor(&r2, &self.round(aes, 3, &l1)));
        let l0 = self.fix_left(Self::xor(&l1, &self.round(aes, 2, &r1)));
        let r0 = self.fix_right(Self::xor(&r1, &self.round(aes, 1, &l0)));
        self.join(&l0, &r0)
    }
}

/// Makes a server's connection ids (§5.4).
pub struct Encoder {
    cfg: Config,
    server_id: Vec<u8>,
    cipher: Cipher,
}

impl Encoder {
    /// An encoder for `server_id` (exactly `cfg.server_id_len` octets).
    pub fn new(cfg: Config, server_id: &[u8]) -> Result<Self, ConfigError> {
        cfg.check()?;
        if server_id.len() != cfg.server_id_len {
            return Err(ConfigError("the server id's length is not the configuration's"));
        }
        let cipher = Cipher::new(&cfg);
        Ok(Self { cfg, server_id: server_id.to_vec(), cipher })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A connection id with `nonce` (exactly `nonce_len` octets, which the caller draws at
    /// random: §5.4 wants no observable relation between a server's ids). `random_bits`
    /// fills the first octet's low five bits when the length is not encoded.
    pub fn encode(&self, nonce: &[u8], random_bits: u8) -> Vec<u8> {
        debug_assert_eq!(nonce.len(), self.cfg.nonce_len);
        let low = if self.cfg.encode_len { (self.cfg.cid_len() - 1) as u8 } else { random_bits } & 0x1f;
        let mut block = self.server_id.clone();
        block.extend_from_slice(nonce);
        let mut cid = vec![(self.cfg.config_id << 5) | low];
        cid.extend(self.cipher.encrypt(&block));
        cid
    }
}

/// Reads server ids out of connection ids (§5.5): the load balancer's side, and a server's
/// check of its own ids.
pub struct Decoder {
    cfg: Config,
    cipher: Cipher,
}

impl Decoder {
    /// A decoder for `cfg`.
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        cfg.check()?;
        let cipher = Cipher::new(&cfg);
        Ok(Self { cfg, cipher })
    }

    /// The configuration id a connection id names (its first octet's high bits).
    pub fn config_id_of(cid: &[u8]) -> Option<u8> {
        cid.first().map(|b| b >> 5)
    }

    /// The server id in `cid`, or `None` when it is not routable by this configuration: another
    /// configuration id, or too short (§4.1). Extra octets after the block are allowed (§5.4).
    pub fn server_id(&self, cid: &[u8]) -> Option<Vec<u8>> {
        if Self::config_id_of(cid)? != self.cfg.config_id || cid.len() < self.cfg.cid_len() {
            return None;
        }
        let block = &cid[1..self.cfg.cid_len()];
        let plain = self.cipher.decrypt(block);
        Some(plain[..self.cfg.server_id_len].to_vec())
    }

    /// The server id and the nonce (`server_id ‖ nonce`, decrypted).
    pub fn decode(&self, cid: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        if Self::config_id_of(cid)? != self.cfg.config_id || cid.len() < self.cfg.cid_len() {
            return None;
        }
        let plain = self.cipher.decrypt(&cid[1..self.cfg.cid_len()]);
        Some((plain[..self.cfg.server_id_len].to_vec(), plain[self.cfg.server_id_len..].to_vec()))
    }
}

/// Lowercase hex of `b` (logs and tests).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Octets from hex (`None` for odd length or a non-hex digit).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> [u8; 16] {
        unhex(s).unwrap().try_into().unwrap()
    }

    fn cfg(config_id: u8, sid: &str, nonce: &str, k: Option<&str>) -> Config {
        Config {
            config_id,
            server_id_len: sid.len() / 2,
            nonce_len: nonce.len() / 2,
            key: k.map(key),
            encode_len: true,
        }
    }

    /// Encode `sid ‖ nonce` and expect `cid`; decode it back.
    fn vector(config_id: u8, sid: &str, nonce: &str, k: Option<&str>, cid: &str) {
        let c = cfg(config_id, sid, nonce, k);
        let e = Encoder::new(c.clone(), &unhex(sid).unwrap()).unwrap();
        assert_eq!(hex(&e.encode(&unhex(nonce).unwrap(), 0)), cid, "sid {sid} nonce {nonce}");
        let d = Decoder::new(c).unwrap();
        let (s, n) = d.decode(&unhex(cid).unwrap()).unwrap();
        assert_eq!((hex(&s), hex(&n)), (sid.to_owned(), nonce.to_owned()));
        // Extra octets after the block do not change what is read (§5.4).
        let mut longer = unhex(cid).unwrap();
        longer.push(0xaa);
        assert_eq!(hex(&d.server_id(&longer).unwrap()), sid);
    }

    #[test]
    fn the_drafts_worked_example() {
        // §5.4.2.4: four passes over a 7-octet block.
        vector(0, "31441a", "9c69c275", Some("fdf726a9893ec05c0632d3956680baf0"), "0767947d29be054a");
    }

    #[test]
    fn appendix_b1_plaintext() {
        vector(0, "c4605e", "4504cc4f", None, "07c4605e4504cc4f");
        // B.1's second row is printed malformed in -21 (a 9-digit nonce); its first octet and
        // server id are unambiguous: config 1, 10 octets after the first.
        let c = cfg(1, "350d28b420", "03487d970b", None);
        let e = Encoder::new(c.clone(), &unhex("350d28b420").unwrap()).unwrap();
        let cid = e.encode(&unhex("03487d970b").unwrap(), 0);
        assert_eq!(cid[0], 0x2a);
        assert_eq!(hex(&Decoder::new(c).unwrap().server_id(&cid).unwrap()), "350d28b420");
    }

    #[test]
    fn appendix_b2_encrypted() {
        let k = Some("8f95f09245765f80256934e50c66207f");
        vector(0, "ed793a", "ee080dbf", k, "0720b1d07b359d3c");
        vector(1, "ed793a51d49b8f5fab65", "ee080dbf48", k, "2fcc381bc74cb4fbad2823a3d1f8fed2");
        vector(2, "ed793a51d49b8f5f", "ee080dbf48c0d1e5", k, "504dd2d05a7b0de9b2b9907afb5ecf8cc3");
        // Printed with a first octet of config 0 in -21 (quiche tests it so).
        vector(0, "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", k, "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc");
    }

    #[test]
    fn every_length_round_trips() {
        let k = Some("8f95f09245765f80256934e50c66207f");
        for sid_len in 1..=15usize {
            for nonce_len in 4..=(19 - sid_len).min(18) {
                for key in [None, k] {
                    let c = Config {
                        config_id: 3,
                        server_id_len: sid_len,
                        nonce_len,
                        key: key.map(super::tests::key),
                        encode_len: false,
                    };
                    let sid: Vec<u8> = (0..sid_len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
                    let nonce: Vec<u8> = (0..nonce_len as u8).map(|i| i.wrapping_mul(91) ^ 0xc3).collect();
                    let cid = Encoder::new(c.clone(), &sid).unwrap().encode(&nonce, 0x15);
                    assert_eq!(cid.len(), c.cid_len());
                    assert_eq!(cid[0], (3 << 5) | 0x15);
                    let d = Decoder::new(c).unwrap();
                    assert_eq!(d.decode(&cid), Some((sid.clone(), nonce.clone())), "{sid_len} + {nonce_len}");
                    if key.is_some() {
                        assert_ne!(&cid[1..1 + sid_len], &sid[..], "the server id is not in the clear");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_configurations_and_foreign_ids() {
        let ok = Config { config_id: 0, server_id_len: 2, nonce_len: 6, key: None, encode_len: true };
        assert!(ok.check().is_ok());
        for bad in [
            Config { config_id: 7, ..ok.clone() },
            Config { server_id_len: 0, ..ok.clone() },
            Config { nonce_len: 3, ..ok.clone() },
            Config { server_id_len: 15, nonce_len: 5, ..ok.clone() },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert!(Encoder::new(ok.clone(), &[1, 2, 3]).is_err());
        let d = Decoder::new(ok).unwrap();
        assert_eq!(d.server_id(&[0x20, 1, 2, 3, 4, 5, 6, 7, 8]), None, "another configuration id");
        assert_eq!(d.server_id(&[0x07, 1, 2, 3]), None, "too short");
        assert_eq!(d.server_id(&[0x07, 1, 2, 3, 4, 5, 6, 7, 8]), Some(vec![1, 2]));
    }
}
