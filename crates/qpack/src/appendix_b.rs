//! RFC 9204 Appendix B: the encoding and decoding examples, byte for byte.
//!
//! One encoder and one decoder play the whole exchange, with Huffman coding
//! off (the examples use raw strings). Where the RFC shows the encoder
//! making a choice our policy would not make on its own (B.1 sends a
//! literal without inserting; B.3 and B.5 insert speculatively; B.4
//! duplicates), the test asks for that step explicitly, then checks the
//! bytes the encoder produces for it.

use crate::{Decoded, Decoder, Encoder, EncoderOptions, FieldLine, FieldRef};

/// Parses the RFC's hex dumps ("0381 10 11").
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

fn lines(pairs: &[(&str, &str)]) -> Vec<FieldLine> {
    pairs.iter().map(|&(n, v)| FieldLine::new(n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

fn encode(enc: &mut Encoder, stream_id: u64, pairs: &[(&'static str, &'static str)]) -> Vec<u8> {
    let mut out = Vec::new();
    enc.encode(stream_id, pairs.iter().map(|&p| FieldRef::from(p)), &mut out);
    out
}

const NO_HUFFMAN: EncoderOptions = EncoderOptions { use_dynamic_table: true, max_table_capacity: 4096, huffman: false };

#[test]
fn b1_literal_field_line_with_name_reference() {
    // The RFC's encoder sends this literal without touching the dynamic
    // table; a static-only encoder does exactly that.
    let mut enc = Encoder::with_options(220, 1, EncoderOptions { use_dynamic_table: false, ..NO_HUFFMAN });
    let section = encode(&mut enc, 0, &[(":path", "/index.html")]);
    assert_eq!(section, hex("0000 510b 2f69 6e64 6578 2e68 746d 6c"));
    assert_eq!(enc.poll_encoder_stream(), None);

    let mut dec = Decoder::new(220, 1, 16 * 1024);
    assert_eq!(dec.decode(0, &section), Ok(Decoded::Fields(lines(&[(":path", "/index.html")]))));
    // Required Insert Count 0: nothing to acknowledge.
    assert_eq!(dec.poll_decoder_stream(), None);
}

#[test]
fn b2_to_b5_dynamic_table() {
    let mut enc = Encoder::with_options(220, 1, NO_HUFFMAN);
    let mut dec = Decoder::new(220, 1, 16 * 1024);

    // B.2 Dynamic Table: our policy inserts both fields while encoding the
    // section and references them with post-Base indices.
    let section = encode(&mut enc, 4, &[(":authority", "www.example.com"), (":path", "/sample/path")]);
    let encoder_stream = enc.poll_encoder_stream().unwrap();
    assert_eq!(
        encoder_stream,
        hex("3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468")
    );
    assert_eq!(section, hex("0381 10 11"));
    assert_eq!(enc.table_size(), 106);

    dec.on_encoder_stream(&encoder_stream).unwrap();
    assert_eq!(dec.table_size(), 106);
    assert_eq!(
        dec.decode(4, &section),
        Ok(Decoded::Fields(lines(&[(":authority", "www.example.com"), (":path", "/sample/path")])))
    );
    let decoder_stream = dec.poll_decoder_stream().unwrap();
    assert_eq!(decoder_stream, hex("84"));
    assert_eq!(enc.known_received_count(), 0);
    enc.on_decoder_stream(&decoder_stream).unwrap();
    assert_eq!(enc.known_received_count(), 2);
    assert_eq!(enc.unacknowledged_sections(), 0);

    // B.3 Speculative Insert.
    assert!(enc.insert(b"custom-key", b"custom-value"));
    let encoder_stream = enc.poll_encoder_stream().unwrap();
    assert_eq!(encoder_stream, hex("4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565"));
    assert_eq!(enc.table_size(), 160);
    dec.on_encoder_stream(&encoder_stream).unwrap();
    assert_eq!(dec.table_size(), 160);
    let decoder_stream = dec.poll_decoder_stream().unwrap();
    assert_eq!(decoder_stream, hex("01"));
    enc.on_decoder_stream(&decoder_stream).unwrap();
    assert_eq!(enc.known_received_count(), 3);

    // B.4 Duplicate Instruction, Stream Cancellation.
    assert_eq!(enc.duplicate(0), Some(3));
    let encoder_stream = enc.poll_encoder_stream().unwrap();
    assert_eq!(encoder_stream, hex("02"));
    assert_eq!(enc.table_size(), 217);
    // The section references the duplicate (the newest match), the static
    // table, and the acknowledged custom-key entry.
    let section =
        encode(&mut enc, 8, &[(":authority", "www.example.com"), (":path", "/"), ("custom-key", "custom-value")]);
    assert_eq!(section, hex("0500 80 c1 81"));
    assert_eq!(enc.poll_encoder_stream(), None);
    assert_eq!(enc.blocked_streams(), 1);
    // The encoder-stream packet is delayed: the section blocks, then the
    // decoder abandons the stream.
    assert_eq!(dec.decode(8, &section), Ok(Decoded::Blocked));
    assert_eq!(dec.blocked_streams(), 1);
    dec.cancel_stream(8);
    assert_eq!(dec.blocked_streams(), 0);
    let decoder_stream = dec.poll_decoder_stream().unwrap();
    assert_eq!(decoder_stream, hex("48"));
    enc.on_decoder_stream(&decoder_stream).unwrap();
    assert_eq!(enc.unacknowledged_sections(), 0);
    assert_eq!(enc.blocked_streams(), 0);
    // The delayed encoder stream arrives; nothing is waiting for it any more.
    dec.on_encoder_stream(&encoder_stream).unwrap();
    assert_eq!(dec.poll_unblocked(), None);
    assert_eq!(dec.table_size(), 217);
    // (Not shown in the RFC: our decoder acknowledges the duplicate with an
    // Insert Count Increment. The RFC's tables keep entry 3 unacknowledged,
    // so the encoder does not see this one.)
    assert_eq!(dec.poll_decoder_stream(), Some(hex("01")));

    // B.5 Dynamic Table Insert, Eviction: the name comes from the dynamic
    // entry 2 (relative index 1) and entry 0 is evicted.
    assert!(enc.insert(b"custom-key", b"custom-value2"));
    let encoder_stream = enc.poll_encoder_stream().unwrap();
    assert_eq!(encoder_stream, hex("810d 6375 7374 6f6d 2d76 616c 7565 32"));
    assert_eq!(enc.table_size(), 215);
    dec.on_encoder_stream(&encoder_stream).unwrap();
    assert_eq!(dec.table_size(), 215);
    assert_eq!(dec.insert_count(), 5);
}

#[test]
fn appendix_b_decoder_side_from_rfc_bytes_alone() {
    // The same exchange, fed to a decoder straight from the RFC's bytes.
    let mut dec = Decoder::new(220, 1, 16 * 1024);
    let fields = |d: Result<Decoded, crate::Error>| match d.unwrap() {
        Decoded::Fields(f) => f,
        Decoded::Blocked => panic!("blocked"),
    };
    assert_eq!(
        fields(dec.decode(0, &hex("0000 510b 2f69 6e64 6578 2e68 746d 6c"))),
        lines(&[(":path", "/index.html")])
    );
    dec.on_encoder_stream(&hex("3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468"))
        .unwrap();
    assert_eq!(
        fields(dec.decode(4, &hex("0381 10 11"))),
        lines(&[(":authority", "www.example.com"), (":path", "/sample/path")])
    );
    assert_eq!(dec.poll_decoder_stream(), Some(hex("84")));
    dec.on_encoder_stream(&hex("4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565")).unwrap();
    assert_eq!(dec.poll_decoder_stream(), Some(hex("01")));
    // This time the Duplicate arrives before the section.
    dec.on_encoder_stream(&hex("02")).unwrap();
    assert_eq!(
        fields(dec.decode(8, &hex("0500 80 c1 81"))),
        lines(&[(":authority", "www.example.com"), (":path", "/"), ("custom-key", "custom-value")])
    );
    assert_eq!(dec.poll_decoder_stream(), Some(hex("88")));
    dec.on_encoder_stream(&hex("810d 6375 7374 6f6d 2d76 616c 7565 32")).unwrap();
    assert_eq!(dec.table_size(), 215);
}
