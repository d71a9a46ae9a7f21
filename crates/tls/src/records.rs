//! TLS 1.3 records after the handshake, sealed and opened here rather than by rustls.
//!
//! Why: rustls's unbuffered API copies every byte twice besides encrypting it. Sending, it
//! copies the plaintext into a buffer of its own, encrypts it there and copies the record into
//! ours; receiving, it decrypts in our buffer and copies the plaintext into a queue of its own,
//! which we copy out of. Those copies were about a fifth of what a bulk transfer cost the
//! server (`docs/decisions/0002-own-tls-records.md`). rustls hands a finished TLS 1.3 handshake's
//! traffic keys over for such uses (its kernel-connection API, made for kernel TLS), and goes
//! on computing the next keys when a key update asks for them. What is left to do here is
//! small: a record's header, nonce and inner content type (RFC 8446 §5.2–5.3), the AEAD itself
//! (ring for sealing, into the caller's buffer; rustls's own decrypter for opening, in place),
//! alerts, and key updates (RFC 8446 §4.6.3). TLS 1.2 connections stay with rustls.
//!
//! Sans-IO: bytes in, bytes out; the TLS stream (`stream/`) moves them.

use rustls::crypto::cipher::{InboundOpaqueMessage, Iv, MessageDecrypter, Nonce};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{ConnectionTrafficSecrets, ContentType, ProtocolVersion, SupportedCipherSuite};

/// A record's header (RFC 8446 §5.1).
pub const HEADER: usize = 5;
/// What sealing adds to a record's plaintext: the header, the inner content type and the
/// 16-byte tag of all three AEADs TLS 1.3 has.
pub const OVERHEAD: usize = HEADER + 1 + TAG;
const TAG: usize = 16;
/// The largest plaintext in a record (RFC 8446 §5.1).
pub const MAX_FRAGMENT: usize = 16 * 1024;
/// The largest protected record body (RFC 8446 §5.2: 2^14 + 256).
const MAX_CIPHERTEXT: usize = MAX_FRAGMENT + 256;
/// A sealed KeyUpdate message (handshake type 24, length 1, RFC 8446 §4.6.3).
pub const KEY_UPDATE_RECORD: usize = 5 + OVERHEAD;

pub const APPLICATION_DATA: u8 = 23;
const HANDSHAKE: u8 = 22;
const ALERT: u8 = 21;
const KEY_UPDATE: u8 = 24;
/// KeyUpdates a peer may send in a row without application data.
const KEY_UPDATES_ALLOWED: u8 = 32;

/// Alert descriptions sent (RFC 8446 §6).
pub mod alert {
    pub const CLOSE_NOTIFY: u8 = 0;
    pub const UNEXPECTED_MESSAGE: u8 = 10;
    pub const BAD_RECORD_MAC: u8 = 20;
    pub const RECORD_OVERFLOW: u8 = 22;
    pub const ILLEGAL_PARAMETER: u8 = 47;
    pub const DECODE_ERROR: u8 = 50;
    pub const INTERNAL_ERROR: u8 = 80;
    pub const USER_CANCELED: u8 = 90;
}

/// The records of a TLS 1.3 connection whose handshake is done, both ways.
pub struct Records {
    /// rustls's part: the next traffic secrets, when a key update asks for them.
    kernel: KernelConnection<ServerConnectionData>,
    suite: &'static rustls::Tls13CipherSuite,
    seal: Sealer,
    open: Box<dyn MessageDecrypter>,
    open_seq: u64,
    /// The peer asked us to update our keys: a KeyUpdate goes before our next record.
    update_requested: bool,
    /// KeyUpdates the peer may still send before its next application data, and warning
    /// alerts (user_canceled) it may still send at all: each costs us work and moves nothing
    /// (rustls's and BoringSSL's limits: 32 and 4).
    key_updates_allowed: u8,
    warnings_allowed: u8,
    /// Key updates sent (tests).
    #[cfg(test)]
    key_updates: u64,
}

/// What a record opened to.
pub enum Opened<'a> {
    /// Application data (possibly none).
    Data(&'a [u8]),
    /// close_notify: the peer sends no more.
    Closed,
    /// A message handled here (a key update, a user_canceled warning).
    Nothing,
}

/// A fatal error: the alert to send the peer (none for an alert it sent), and why.
pub struct Fatal {
    pub alert: Option<u8>,
    pub error: rustls::Error,
}

impl Fatal {
    fn new(alert: u8, why: &str) -> Self {
        Self { alert: Some(alert), error: rustls::Error::General(why.into()) }
    }
}

impl Records {
    /// Take over from `conn`, whose TLS 1.3 handshake is done and which has nothing left to
    /// send (it was driven until it offered to encrypt application data). Its configuration
    /// must allow secret extraction.
    pub fn new(conn: UnbufferedServerConnection) -> Result<Self, rustls::Error> {
        let (secrets, kernel) = conn.dangerous_into_kernel_connection()?;
        let SupportedCipherSuite::Tls13(suite) = kernel.negotiated_cipher_suite() else {
            return Err(rustls::Error::General("records are protected here for TLS 1.3 only".into()));
        };
        let (seal_seq, seal) = secrets.tx;
        let (open_seq, open) = secrets.rx;
        Ok(Self {
            seal: Sealer::new(seal, seal_seq, suite.common.confidentiality_limit)?,
            open: opener(suite, open)?,
            open_seq,
            kernel,
            suite,
            update_requested: false,
            key_updates_allowed: KEY_UPDATES_ALLOWED,
            warnings_allowed: 4,
            #[cfg(test)]
            key_updates: 0,
        })
    }

    /// Let a key seal at most `n` records (tests: the real limits are millions).
    #[cfg(test)]
    pub fn set_seal_limit(&mut self, n: u64) {
        self.seal.limit = n;
    }

    #[cfg(test)]
    pub fn key_updates(&self) -> u64 {
        self.key_updates
    }

    /// The sequence number of the next record sealed (tests: records sealed since).
    #[cfg(test)]
    pub fn next_seal_seq(&self) -> u64 {
        self.seal.seq
    }

    /// Whether a KeyUpdate must go before the next record: the peer asked for one, or the
    /// key's confidentiality limit is near (RFC 8446 §5.5).
    pub fn key_update_due(&self) -> bool {
        self.update_requested || self.seal.seq.saturating_add(2) >= self.seal.limit
    }

    /// Seal a KeyUpdate (not asking the peer for one in turn) into `dst` with the current key,
    /// and move on to the next: its length.
    pub fn seal_key_update(&mut self, dst: &mut [u8]) -> Result<usize, rustls::Error> {
        let n = self.seal.seal(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], dst)?;
        let (seq, secrets) = self.kernel.update_tx_secret()?;
        self.seal = Sealer::new(secrets, seq, self.seal.limit)?;
        self.update_requested = false;
        #[cfg(test)]
        {
            self.key_updates += 1;
        }
        Ok(n)
    }

    /// Seal `len` bytes (at most [`MAX_FRAGMENT`]), which `fill` writes into the slice it is
    /// given, as one record of application data into `dst` (room for `len + OVERHEAD`): its
    /// length. The plaintext is written straight into the record (a record gathered from
    /// several slices costs no copy of its own).
    pub fn seal_data_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        dst: &mut [u8],
    ) -> Result<usize, rustls::Error> {
        self.seal.seal_with(APPLICATION_DATA, len, fill, dst)
    }

    /// Seal an alert into `dst` (room for `2 + OVERHEAD`): its length. Level 1 (warning) for
    /// close_notify, 2 (fatal) for the rest (RFC 8446 §6).
    pub fn seal_alert(&mut self, description: u8, dst: &mut [u8]) -> Result<usize, rustls::Error> {
        let level = if description == alert::CLOSE_NOTIFY { 1 } else { 2 };
        self.seal.seal(ALERT, &[level, description], dst)
    }

    /// Open the record `buf` starts with, in place, if it is complete: `None` if it is not,
    /// else how many bytes it took and what it held.
    pub fn open<'a>(&mut self, buf: &'a mut [u8]) -> Result<Option<(usize, Opened<'a>)>, Fatal> {
        let Some(header) = buf.get(..HEADER) else { return Ok(None) };
        let (typ, len) = (header[0], usize::from(u16::from_be_bytes([header[3], header[4]])));
        if len > MAX_CIPHERTEXT {
            return Err(Fatal::new(alert::RECORD_OVERFLOW, "a TLS record longer than 2^14 + 256 bytes"));
        }
        // Every record is protected once the handshake is done, and says it is application
        // data (RFC 8446 §5.1, §5.2); its legacy version is ignored.
        if typ != APPLICATION_DATA {
            return Err(Fatal::new(alert::UNEXPECTED_MESSAGE, "an unprotected TLS record after the handshake"));
        }
        let Some(body) = buf.get_mut(HEADER..HEADER + len) else { return Ok(None) };
        if self.open_seq == u64::MAX {
            return Err(Fatal::new(alert::INTERNAL_ERROR, "TLS record sequence numbers ran out"));
        }
        let msg = InboundOpaqueMessage::new(ContentType::ApplicationData, ProtocolVersion::TLSv1_2, body);
        let plain = self.open.decrypt(msg, self.open_seq).map_err(|e| Fatal {
            alert: Some(match e {
                rustls::Error::DecryptError => alert::BAD_RECORD_MAC,
                rustls::Error::PeerSentOversizedRecord => alert::RECORD_OVERFLOW,
                _ => alert::UNEXPECTED_MESSAGE,
            }),
            error: e,
        })?;
        self.open_seq += 1;
        let opened = match plain.typ {
            ContentType::ApplicationData => {
                self.key_updates_allowed = KEY_UPDATES_ALLOWED;
                Opened::Data(plain.payload)
            }
            ContentType::Alert => match *plain.payload {
                [_, alert::CLOSE_NOTIFY] => Opened::Closed,
                // Followed by close_notify (RFC 8446 §6.1).
                [_, alert::USER_CANCELED] if self.warnings_allowed > 0 => {
                    self.warnings_allowed -= 1;
                    Opened::Nothing
                }
                [_, alert::USER_CANCELED] => {
                    return Err(Fatal::new(alert::UNEXPECTED_MESSAGE, "too many TLS warning alerts"))
                }
                // Every other alert ends the connection (RFC 8446 §6.2): a fatal one as it is,
                // a warning with decode_error (TLS 1.3 has no other warnings; as rustls does).
                [level, d] => {
                    return Err(Fatal {
                        alert: (level != 2).then_some(alert::DECODE_ERROR),
                        error: rustls::Error::AlertReceived(rustls::AlertDescription::from(d)),
                    });
                }
                _ => return Err(Fatal::new(alert::DECODE_ERROR, "a malformed TLS alert")),
            },
            ContentType::Handshake => {
                // From a client after the handshake only a KeyUpdate can come (no
                // post-handshake authentication is asked for), and a key change must end its
                // record (RFC 8446 §5.1). A KeyUpdate split across records is refused too.
                let request = match *plain.payload {
                    [KEY_UPDATE, 0, 0, 1, r] => r,
                    _ => {
                        return Err(Fatal::new(
                            alert::UNEXPECTED_MESSAGE,
                            "a TLS handshake message after the handshake",
                        ))
                    }
                };
                if request > 1 {
                    return Err(Fatal::new(alert::ILLEGAL_PARAMETER, "a KeyUpdate asking for neither"));
                }
                if self.key_updates_allowed == 0 {
                    return Err(Fatal::new(alert::UNEXPECTED_MESSAGE, "too many TLS KeyUpdates in a row"));
                }
                self.key_updates_allowed -= 1;
                let (seq, secrets) = self
                    .kernel
                    .update_rx_secret()
                    .map_err(|e| Fatal { alert: Some(alert::INTERNAL_ERROR), error: e })?;
                self.open =
                    opener(self.suite, secrets).map_err(|e| Fatal { alert: Some(alert::INTERNAL_ERROR), error: e })?;
                self.open_seq = seq;
                self.update_requested |= request == 1;
                Opened::Nothing
            }
            _ => return Err(Fatal::new(alert::UNEXPECTED_MESSAGE, "a TLS record of an unexpected type")),
        };
        Ok(Some((HEADER + len, opened)))
    }
}

/// The sending direction's key.
struct Sealer {
    key: ring::aead::LessSafeKey,
    iv: Iv,
    seq: u64,
    /// Records this key may seal (the suite's confidentiality limit).
    limit: u64,
}

impl Sealer {
    fn new(secrets: ConnectionTrafficSecrets, seq: u64, limit: u64) -> Result<Self, rustls::Error> {
        let (algorithm, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&ring::aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&ring::aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&ring::aead::CHACHA20_POLY1305, key, iv),
            _ => return Err(rustls::Error::General("an AEAD this server does not seal with".into())),
        };
        let key = ring::aead::UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| rustls::Error::General("a traffic key of the wrong length".into()))?;
        Ok(Self { key: ring::aead::LessSafeKey::new(key), iv, seq, limit })
    }

    /// One record of inner content type `typ` holding `data` into `dst`: its length.
    fn seal(&mut self, typ: u8, data: &[u8], dst: &mut [u8]) -> Result<usize, rustls::Error> {
        self.seal_with(typ, data.len(), |d| d.copy_from_slice(data), dst)
    }

    /// One record of inner content type `typ` holding the `plain` bytes `fill` writes into
    /// `dst`: its length.
    fn seal_with(
        &mut self,
        typ: u8,
        plain: usize,
        fill: impl FnOnce(&mut [u8]),
        dst: &mut [u8],
    ) -> Result<usize, rustls::Error> {
        debug_assert!(plain <= MAX_FRAGMENT);
        if self.seq >= self.limit {
            return Err(rustls::Error::EncryptError);
        }
        let len = plain + 1 + TAG;
        let total = HEADER + len;
        let Some(dst) = dst.get_mut(..total) else {
            return Err(rustls::Error::General("no room to seal a TLS record".into()));
        };
        let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        dst[..HEADER].copy_from_slice(&header);
        fill(&mut dst[HEADER..HEADER + plain]);
        dst[HEADER + plain] = typ;
        let (body, tag) = dst[HEADER..].split_at_mut(plain + 1);
        // The per-record nonce is the IV XORed with the sequence number (RFC 8446 §5.3); the
        // additional data is the record's header (§5.2).
        let nonce = ring::aead::Nonce::assume_unique_for_key(Nonce::new(&self.iv, self.seq).0);
        let sealed = self
            .key
            .seal_in_place_separate_tag(nonce, ring::aead::Aad::from(header), body)
            .map_err(|_| rustls::Error::EncryptError)?;
        tag.copy_from_slice(sealed.as_ref());
        self.seq += 1;
        Ok(total)
    }
}

fn opener(
    suite: &'static rustls::Tls13CipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Result<Box<dyn MessageDecrypter>, rustls::Error> {
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Ok(suite.aead_alg.decrypter(key, iv)),
        _ => Err(rustls::Error::General("an AEAD this server does not open".into())),
    }
}

#[cfg(test)]
mod tests;
