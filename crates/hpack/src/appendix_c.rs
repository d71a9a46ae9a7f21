//! The examples of RFC 7541 Appendix C (test data shared by the decoder and
//! encoder tests).

/// A decoded field: name, value, never-indexed.
pub(crate) type Field = (Vec<u8>, Vec<u8>, bool);

/// One header block of an example.
pub(crate) struct Block {
    /// The encoded block, as printed in the RFC.
    pub(crate) wire: &'static str,
    /// The decoded header list.
    pub(crate) headers: &'static [(&'static str, &'static str)],
    /// Whether the fields are never-indexed literals (only C.2.3).
    pub(crate) never_indexed: bool,
    /// The dynamic table after the block, newest entry first.
    pub(crate) dynamic: &'static [(&'static str, &'static str)],
    /// The dynamic table size after the block.
    pub(crate) table_size: usize,
}

impl Block {
    pub(crate) fn fields(&self) -> Vec<Field> {
        self.headers.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec(), self.never_indexed)).collect()
    }
}

/// Blocks decoded in one context.
pub(crate) struct Sequence {
    pub(crate) name: &'static str,
    /// Maximum dynamic table size of the context.
    pub(crate) table_size: usize,
    /// Whether the RFC Huffman-codes the strings.
    pub(crate) huffman: bool,
    pub(crate) blocks: Vec<Block>,
}

/// Parses hex, ignoring whitespace.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).expect("ascii");
            u8::from_str_radix(text, 16).expect("hex digits")
        })
        .collect()
}

const REQ1: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")];
const REQ2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQ3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];
const REQ_TABLE1: &[(&str, &str)] = &[(":authority", "www.example.com")];
const REQ_TABLE2: &[(&str, &str)] = &[("cache-control", "no-cache"), (":authority", "www.example.com")];
const REQ_TABLE3: &[(&str, &str)] =
    &[("custom-key", "custom-value"), ("cache-control", "no-cache"), (":authority", "www.example.com")];

const DATE1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

const RESP1: &[(&str, &str)] =
    &[(":status", "302"), ("cache-control", "private"), ("date", DATE1), ("location", LOCATION)];
const RESP2: &[(&str, &str)] =
    &[(":status", "307"), ("cache-control", "private"), ("date", DATE1), ("location", LOCATION)];
const RESP3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", DATE2),
    ("location", LOCATION),
    ("content-encoding", "gzip"),
    ("set-cookie", COOKIE),
];
const RESP_TABLE1: &[(&str, &str)] =
    &[("location", LOCATION), ("date", DATE1), ("cache-control", "private"), (":status", "302")];
const RESP_TABLE2: &[(&str, &str)] =
    &[(":status", "307"), ("location", LOCATION), ("date", DATE1), ("cache-control", "private")];
const RESP_TABLE3: &[(&str, &str)] = &[("set-cookie", COOKIE), ("content-encoding", "gzip"), ("date", DATE2)];

fn block(
    wire: &'static str,
    headers: &'static [(&'static str, &'static str)],
    dynamic: &'static [(&'static str, &'static str)],
    table_size: usize,
) -> Block {
    Block { wire, headers, never_indexed: false, dynamic, table_size }
}

fn requests(name: &'static str, huffman: bool, wires: [&'static str; 3]) -> Sequence {
    Sequence {
        name,
        table_size: 4096,
        huffman,
        blocks: vec![
            block(wires[0], REQ1, REQ_TABLE1, 57),
            block(wires[1], REQ2, REQ_TABLE2, 110),
            block(wires[2], REQ3, REQ_TABLE3, 164),
        ],
    }
}

fn responses(name: &'static str, huffman: bool, wires: [&'static str; 3]) -> Sequence {
    Sequence {
        name,
        table_size: 256,
        huffman,
        blocks: vec![
            block(wires[0], RESP1, RESP_TABLE1, 222),
            block(wires[1], RESP2, RESP_TABLE2, 222),
            block(wires[2], RESP3, RESP_TABLE3, 215),
        ],
    }
}

/// Every example of RFC 7541 Appendix C.2 to C.6.
pub(crate) fn sequences() -> Vec<Sequence> {
    let single = |name, wire, headers, never_indexed, dynamic, table_size| Sequence {
        name,
        table_size: 4096,
        huffman: false,
        blocks: vec![Block { wire, headers, never_indexed, dynamic, table_size }],
    };
    vec![
        single(
            "C.2.1",
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            &[("custom-key", "custom-header")],
            false,
            &[("custom-key", "custom-header")],
            55,
        ),
        single("C.2.2", "040c 2f73 616d 706c 652f 7061 7468", &[(":path", "/sample/path")], false, &[], 0),
        single("C.2.3", "1008 7061 7373 776f 7264 0673 6563 7265 74", &[("password", "secret")], true, &[], 0),
        single("C.2.4", "82", &[(":method", "GET")], false, &[], 0),
        requests(
            "C.3",
            false,
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
        ),
        requests(
            "C.4",
            true,
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ),
        responses(
            "C.5",
            false,
            [
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 \
                 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 \
                 7861 6d70 6c65 2e63 6f6d",
                "4803 3330 37c1 c0bf",
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 \
                 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 \
                 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 \
                 6572 7369 6f6e 3d31",
            ],
        ),
        responses(
            "C.6",
            true,
            [
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 \
                 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b \
                 d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 \
                 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ],
        ),
    ]
}
