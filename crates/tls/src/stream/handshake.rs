//! rustls's part of the TLS stream: the handshake, TLS 1.2 connections throughout, and the
//! hand-over of a finished TLS 1.3 handshake's records to [`Records`].

use std::io;
use std::task::{Context, Poll};

use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite};

use super::read::{deliver, no_room_for_next};
use super::write::OutBuf;
use super::{tls_error, Engine, Sink, TlsStream};
use crate::records::{Records, APPLICATION_DATA, HEADER as RECORD_HEADER};

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// After a TLS 1.3 handshake, rustls hands the records over to [`Records`]: first it is
    /// driven until it offers to encrypt application data, with what it still has to send
    /// (session tickets) queued in `out`. (Every complete record received was processed by
    /// the handshake.) In any other state it keeps the connection.
    pub(super) fn take_over(&mut self) -> io::Result<()> {
        let mut writable = false;
        for _ in 0..64 {
            let Engine::Rustls(conn) = &mut self.engine else { return Ok(()) };
            if conn.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3)
                || self.failed.is_some()
                || self.keep_rustls
            {
                return Ok(());
            }
            // No received bytes: those after the record that completed the handshake are not
            // rustls's (see `process`), and it holds no part of a message (a key change must
            // end its record, RFC 8446 §5.1, which rustls checks).
            let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut []);
            let more = match state {
                Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                    encode(&mut enc, &mut self.out);
                    true
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    t.done();
                    true
                }
                Ok(ConnectionState::WriteTraffic(_)) => {
                    writable = true;
                    false
                }
                _ => false,
            };
            if discard != 0 || !more {
                break;
            }
        }
        if !writable || self.peer_closed {
            return Ok(());
        }
        let Engine::Rustls(conn) = std::mem::replace(&mut self.engine, Engine::Gone) else { return Ok(()) };
        let records = Records::new(*conn)
            .map_err(|e| io::Error::other(format!("TLS: the records could not be taken over: {e}")))?;
        self.engine = Engine::Records(Box::new(records));
        Ok(())
    }

    pub(super) fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let sent = self.poll_send(cx)?;
            if let Some(e) = &self.failed {
                return Poll::Ready(Err(tls_error(e)));
            }
            // Done, even if the last messages (session tickets) wait for room: they go out
            // ahead of the first write.
            if !matches!(&self.engine, Engine::Rustls(conn) if conn.is_handshaking()) {
                return Poll::Ready(Ok(()));
            }
            // The peer reads our flight before it sends more.
            std::task::ready!(sent);
            if self.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed during the TLS handshake",
                )));
            }
            std::task::ready!(self.poll_receive(cx, &mut Sink::Keep))?;
        }
    }

    /// Hand `incoming` to rustls until it needs more bytes: decrypted bytes to `sink`, TLS
    /// messages to send to `out`, an error to `failed`. Returns how many bytes of `incoming`
    /// it consumed (the rest must be given again, first, next time).
    ///
    /// Once the caller's buffer has been given something, a record of application data it has
    /// no room for is left as it is (`ready`): decrypted now, the part that does not fit would
    /// be copied into `plain` and out again; left, it is decrypted straight into the next
    /// read's buffer, and does not move (`inb` is advanced over what was consumed).
    pub(super) fn process(&mut self, incoming: &mut [u8], sink: &mut Sink<'_, '_>) -> usize {
        if matches!(self.engine, Engine::Records(_)) {
            return self.open_records(incoming, sink);
        }
        let mut used = 0;
        let handshaking = matches!(&self.engine, Engine::Rustls(conn) if conn.is_handshaking());
        if handshaking {
            crate::certs::take_hello_sni();
        }
        while self.failed.is_none() {
            // A record rustls has not seen (it consumes records whole once it has: only
            // handshake messages it is joining stay, and no other record type may come between
            // their pieces, RFC 8446 §5.1).
            if no_room_for_next(sink, &incoming[used..]) {
                self.ready = true;
                break;
            }
            let Engine::Rustls(conn) = &mut self.engine else { break };
            let was_handshaking = conn.is_handshaking();
            let UnbufferedStatus { mut discard, state } = conn.process_tls_records(&mut incoming[used..]);
            let more = match state {
                Err(e) => {
                    self.failed = Some(e);
                    false
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(r) => {
                                discard += r.discard;
                                deliver(r.payload, sink, &mut self.plain);
                            }
                            Err(e) => {
                                self.failed = Some(e);
                                break;
                            }
                        }
                    }
                    true
                }
                Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                    encode(&mut enc, &mut self.out);
                    true
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    // Queued in `out`, in order: sent before anything written later.
                    t.done();
                    true
                }
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    true
                }
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    false
                }
                // Everything complete was consumed: more bytes are needed.
                Ok(ConnectionState::WriteTraffic(_)) | Ok(ConnectionState::BlockedHandshake) => false,
                Ok(ConnectionState::ReadEarlyData(_)) => {
                    // Not offered (`max_early_data_size` is 0), so never accepted.
                    self.failed = Some(rustls::Error::General("early data was not offered".into()));
                    false
                }
                Ok(_) => {
                    self.failed = Some(rustls::Error::General("unexpected TLS connection state".into()));
                    false
                }
            };
            // The handshake just completed. For TLS 1.3 the records from here on are for
            // [`Records`]: rustls gets no more of them (what it did with one would be lost in
            // the hand-over: a KeyUpdate it answers only with its next write, say). The
            // client's Finished is the one protected record of its flight (no client
            // certificate is asked for, no early data accepted), so if the call that completed
            // the handshake consumed another (rustls goes on when it has no session ticket to
            // send), rustls keeps the connection.
            if was_handshaking
                && matches!(&self.engine, Engine::Rustls(c)
                    if !c.is_handshaking() && c.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3))
            {
                self.keep_rustls |= incoming.get(used..used + discard).map_or(0, protected_records) != 1;
                used += discard;
                self.ready = used < incoming.len();
                break;
            }
            used += discard;
            if !more {
                break;
            }
        }
        if handshaking {
            if let Some(sni) = crate::certs::take_hello_sni() {
                self.sni = sni;
            }
        }
        if self.failed.is_some() {
            self.queue_alert(&mut incoming[used..]);
        }
        used
    }

    /// After a fatal error, the alert rustls queued for the peer, into `out`. `incoming` is
    /// what it has not consumed: rustls may look at it again (handshake messages it holds
    /// are read from it; an empty buffer in its place would not hold them).
    pub(super) fn queue_alert(&mut self, incoming: &mut [u8]) {
        // Bounded: what rustls queued (a handshake flight and the alert) is a few messages.
        for _ in 0..64 {
            let Engine::Rustls(conn) = &mut self.engine else { return };
            let UnbufferedStatus { state, .. } = conn.process_tls_records(incoming);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, &mut self.out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                _ => break,
            }
        }
    }
}

/// A handshake record (or an alert) into `out`.
pub(super) fn encode(
    enc: &mut rustls::unbuffered::EncodeTlsData<'_, rustls::server::ServerConnectionData>,
    out: &mut OutBuf,
) {
    let mut room = 1024;
    loop {
        match enc.encode(out.space(room)) {
            Ok(n) => {
                out.commit(n);
                return;
            }
            Err(EncodeError::InsufficientSize(s)) if s.required_size > room => room = s.required_size,
            Err(_) => return,
        }
    }
}

/// How many whole records in `b` are protected ones (TLS 1.3: outer type application_data).
pub(super) fn protected_records(mut b: &[u8]) -> usize {
    let mut n = 0;
    while let (Some(&typ), Some(len)) = (b.first(), b.get(3..5)) {
        let end = RECORD_HEADER + usize::from(u16::from_be_bytes([len[0], len[1]]));
        if b.len() < end {
            break;
        }
        n += usize::from(typ == APPLICATION_DATA);
        b = &b[end..];
    }
    n
}
