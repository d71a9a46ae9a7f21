//! Client unidirectional streams (RFC 9114 §6.2): the control stream and its frames, the QPACK
//! encoder and decoder streams (RFC 9204 §4.2), and the types we ignore.

use sluice_http::Priority;

use super::{Connection, Event, Transmit, Uni};
use crate::error::{Code, Error};
use crate::frame::{self, kind, setting, stream_type, FrameReader, Read};
use crate::ids::Kind;
use crate::varint;

impl Connection {
    pub(super) fn on_uni_data(&mut self, id: u64, mut data: &[u8], fin: bool) {
        if self.retired_uni.contains(id) {
            return;
        }
        if !self.uni.contains_key(&id) {
            let pending = self.uni.values().filter(|u| matches!(u, Uni::Pending(_))).count();
            if pending >= self.cfg.max_pending_uni_streams {
                self.ops.push_back(Transmit::StopSending { stream: id, code: Code::H3_STREAM_CREATION_ERROR });
                self.retired_uni.insert(id);
                if let Err(e) = self.glitch("glitch flood: unidirectional streams beyond the limit") {
                    self.fail(e);
                }
                return;
            }
            self.uni.insert(id, Uni::Pending(varint::Partial::default()));
        }
        if let Some(Uni::Pending(p)) = self.uni.get_mut(&id) {
            let Some(ty) = p.push(&mut data) else {
                if fin {
                    // RFC 9114 §6.2: tolerate a stream closed before its type arrived.
                    self.uni.remove(&id);
                    self.retired_uni.insert(id);
                    if let Err(e) = self.glitch("glitch flood: unidirectional streams without a type") {
                        self.fail(e);
                    }
                }
                return;
            };
            if let Err(e) = self.open_uni(id, ty) {
                return self.fail(e);
            }
        }
        let result = match self.uni.get(&id) {
            Some(Uni::Control) => self.on_control_data(&mut data),
            Some(Uni::Encoder) => self.on_encoder_stream(data),
            Some(Uni::Decoder) => {
                self.encoder.on_decoder_stream(data).map_err(|e| Error::conn(Code::from(&e), "QPACK decoder stream"))
            }
            // Ignored type: `open_uni` asked the client to stop and forgot the stream.
            Some(Uni::Pending(_)) | None => return,
        };
        if let Err(e) = result {
            return self.fail(e);
        }
        if fin {
            // RFC 9114 §6.2.1 and RFC 9204 §4.2: these streams must stay open.
            self.fail(Error::conn(Code::H3_CLOSED_CRITICAL_STREAM, "critical stream closed"));
        }
    }

    pub(super) fn on_uni_reset(&mut self, id: u64) {
        match self.uni.remove(&id) {
            Some(Uni::Control | Uni::Encoder | Uni::Decoder) => {
                self.fail(Error::conn(Code::H3_CLOSED_CRITICAL_STREAM, "critical stream reset"));
            }
            Some(Uni::Pending(_)) => {
                self.retired_uni.insert(id);
                if let Err(e) = self.glitch("glitch flood: unidirectional streams without a type") {
                    self.fail(e);
                }
            }
            None => self.retired_uni.insert(id),
        }
    }

    /// The stream type arrived (RFC 9114 §6.2, RFC 9204 §4.2).
    fn open_uni(&mut self, id: u64, ty: u64) -> Result<(), Error> {
        let (slot, what) = match ty {
            stream_type::CONTROL => (&mut self.peer.control, Uni::Control),
            stream_type::QPACK_ENCODER => (&mut self.peer.encoder, Uni::Encoder),
            stream_type::QPACK_DECODER => (&mut self.peer.decoder, Uni::Decoder),
            // §6.2.2: only servers push.
            stream_type::PUSH => return Err(Error::conn(Code::H3_STREAM_CREATION_ERROR, "push stream from a client")),
            _ => {
                // §6.2, §9: unknown and reserved types are not an error; stop reading.
                self.ops.push_back(Transmit::StopSending { stream: id, code: Code::H3_STREAM_CREATION_ERROR });
                self.uni.remove(&id);
                self.retired_uni.insert(id);
                return self.glitch("glitch flood: unidirectional streams of unknown type");
            }
        };
        if slot.is_some() {
            // §6.2.1 (one control stream) and RFC 9204 §4.2 (one stream of each QPACK type).
            return Err(Error::conn(Code::H3_STREAM_CREATION_ERROR, "second critical stream of one type"));
        }
        *slot = Some(id);
        self.uni.insert(id, what);
        Ok(())
    }

    /// Bytes of the client's QPACK encoder stream: table updates, which may unblock sections.
    fn on_encoder_stream(&mut self, data: &[u8]) -> Result<(), Error> {
        if data.is_empty() {
            return Ok(());
        }
        self.decoder.on_encoder_stream(data).map_err(|e| Error::conn(Code::from(&e), "QPACK encoder stream"))?;
        while let Some((id, result)) = self.decoder.poll_unblocked() {
            self.on_unblocked(id, result);
            if self.failed {
                break;
            }
        }
        Ok(())
    }

    fn on_control_data(&mut self, data: &mut &[u8]) -> Result<(), Error> {
        let mut reader = std::mem::take(&mut self.control_reader);
        let result = self.read_control(&mut reader, data);
        self.control_reader = reader;
        result
    }

    fn read_control(&mut self, reader: &mut FrameReader, data: &mut &[u8]) -> Result<(), Error> {
        while let Some(item) = reader.read(data) {
            match item {
                Read::Start { ty, len } => self.control_frame_start(reader, ty, len)?,
                Read::Frame { ty, payload } => self.control_frame(ty, &payload)?,
                // No control frame is streamed.
                Read::Chunk { .. } => {}
            }
        }
        Ok(())
    }

    /// Decide what a control frame's header allows, and how to read its payload.
    fn control_frame_start(&mut self, reader: &mut FrameReader, ty: u64, len: u64) -> Result<(), Error> {
        if !self.peer.settings && ty != kind::SETTINGS {
            // §6.2.1; §9: an unknown frame does not satisfy the requirement either.
            return Err(Error::conn(Code::H3_MISSING_SETTINGS, "control stream must start with SETTINGS"));
        }
        let limit = match ty {
            kind::SETTINGS if self.peer.settings => {
                return Err(Error::conn(Code::H3_FRAME_UNEXPECTED, "second SETTINGS"));
            }
            kind::SETTINGS | kind::PRIORITY_UPDATE_REQUEST | kind::PRIORITY_UPDATE_PUSH => self.cfg.max_frame_payload,
            // One varint: at most 8 bytes, a longer payload cannot be valid (§7.1).
            kind::GOAWAY | kind::MAX_PUSH_ID | kind::CANCEL_PUSH => {
                if len > 8 {
                    return Err(Error::conn(Code::H3_FRAME_ERROR, "frame longer than its one field"));
                }
                8
            }
            // §7.2.1, §7.2.2, §7.2.5: not on a control stream; §7.2.8: HTTP/2-only types.
            kind::DATA | kind::HEADERS | kind::PUSH_PROMISE => {
                return Err(Error::conn(Code::H3_FRAME_UNEXPECTED, "request frame on the control stream"));
            }
            t if kind::is_h2_reserved(t) => {
                return Err(Error::conn(Code::H3_FRAME_UNEXPECTED, "HTTP/2 frame type"));
            }
            // §9: unknown and reserved types are ignored (ORIGIN is server-to-client only,
            // RFC 9412 §2, so a client's is unknown here). The first is free (greasing).
            _ => {
                reader.skip();
                if std::mem::replace(&mut self.peer.unknown_control_frame, true) {
                    self.glitch("glitch flood: control frames of unknown type")?;
                }
                return Ok(());
            }
        };
        if len > limit {
            // §10.5: a frame we would have to buffer beyond our budget.
            return Err(Error::conn(Code::H3_EXCESSIVE_LOAD, "control frame too large"));
        }
        reader.buffer();
        Ok(())
    }

    fn control_frame(&mut self, ty: u64, payload: &[u8]) -> Result<(), Error> {
        match ty {
            kind::SETTINGS => self.on_settings(payload),
            kind::GOAWAY => {
                let push_id = frame::parse_single_varint(payload, "malformed GOAWAY")?;
                // §5.2: identifiers in successive GOAWAY frames must not increase.
                if self.peer.goaway.is_some_and(|prev| push_id > prev) {
                    return Err(Error::conn(Code::H3_ID_ERROR, "GOAWAY id increased"));
                }
                if self.peer.goaway.is_some() {
                    self.glitch("glitch flood: repeated GOAWAY")?;
                }
                self.peer.goaway = Some(push_id);
                self.events.push_back(Event::GoAway { push_id });
                Ok(())
            }
            kind::MAX_PUSH_ID => {
                let v = frame::parse_single_varint(payload, "malformed MAX_PUSH_ID")?;
                // §7.2.7: MAX_PUSH_ID cannot reduce the maximum push id.
                if self.peer.max_push_id.is_some_and(|prev| v < prev) {
                    return Err(Error::conn(Code::H3_ID_ERROR, "MAX_PUSH_ID reduced"));
                }
                if self.peer.max_push_id.is_some() {
                    // We never push: a raised limit changes nothing.
                    self.glitch("glitch flood: repeated MAX_PUSH_ID")?;
                }
                self.peer.max_push_id = Some(v);
                Ok(())
            }
            kind::CANCEL_PUSH => {
                frame::parse_single_varint(payload, "malformed CANCEL_PUSH")?;
                // §7.2.3: a server receiving CANCEL_PUSH for a push id no PUSH_PROMISE has
                // mentioned MUST treat it as H3_ID_ERROR; we never promise.
                Err(Error::conn(Code::H3_ID_ERROR, "CANCEL_PUSH for a push never promised"))
            }
            kind::PRIORITY_UPDATE_REQUEST => {
                let (id, value) = frame::parse_priority_update(payload)?;
                self.on_priority_update(id, value)
            }
            kind::PRIORITY_UPDATE_PUSH => {
                frame::parse_priority_update(payload)?;
                // RFC 9218 §7.2: a push id that has not been promised is H3_ID_ERROR.
                Err(Error::conn(Code::H3_ID_ERROR, "PRIORITY_UPDATE for a push never promised"))
            }
            _ => Ok(()),
        }
    }

    /// The client's SETTINGS (§7.2.4): unknown ids are ignored; QPACK's go to our encoder.
    fn on_settings(&mut self, payload: &[u8]) -> Result<(), Error> {
        let (mut capacity, mut blocked) = (0, 0);
        for (id, value) in frame::parse_settings(payload)? {
            match id {
                setting::QPACK_MAX_TABLE_CAPACITY => capacity = value,
                setting::QPACK_BLOCKED_STREAMS => blocked = value,
                setting::MAX_FIELD_SECTION_SIZE => self.peer.max_field_section_size = value,
                setting::H3_DATAGRAM => match value {
                    0 | 1 => self.peer.h3_datagram = value == 1,
                    _ => return Err(Error::conn(Code::H3_SETTINGS_ERROR, "SETTINGS_H3_DATAGRAM not 0 or 1")),
                },
                _ => {}
            }
        }
        self.encoder.set_peer_settings(capacity, blocked).map_err(|_| {
            // RFC 9204 §3.2.3: the capacity cannot change once the table is in use.
            Error::conn(Code::H3_SETTINGS_ERROR, "QPACK settings changed after use")
        })?;
        self.peer.settings = true;
        Ok(())
    }

    /// A PRIORITY_UPDATE for request stream `id` (RFC 9218 §7.2). Its value replaces the
    /// stream's priority: omitted parameters take their defaults, as in the header (§4).
    fn on_priority_update(&mut self, id: u64, value: &[u8]) -> Result<(), Error> {
        if Kind::of(id) != Kind::Request {
            return Err(Error::conn(Code::H3_ID_ERROR, "PRIORITY_UPDATE for a non-request stream"));
        }
        let p = Priority::parse(value, Priority::default());
        let first = if let Some(s) = self.streams.get_mut(&id) {
            let first = !std::mem::replace(&mut s.priority_signalled, true);
            if s.delivered {
                self.reprioritize(id, p);
            } else {
                // The request has not been processed yet: the update overrides its header.
                s.priority_update = Some(p);
            }
            first
        } else if !self.retired.contains(id) && self.goaway.is_none_or(|g| id < g) {
            let known = self.pending_priority.contains_key(&id);
            let room = known || self.pending_priority.len() < self.cfg.max_pending_priority_updates;
            if room {
                // Not opened yet: kept, only the most recent per stream (§7), within the budget.
                self.pending_priority.insert(id, p);
            }
            !known && room
        } else {
            // A closed stream, or one we will not process.
            false
        };
        if !first {
            self.glitch("glitch flood: PRIORITY_UPDATE frames")?;
        }
        Ok(())
    }
}
