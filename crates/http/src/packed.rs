//! Header fields kept where they were parsed: one buffer and, per field, where its name and
//! value lie in it.
//!
//! A list of [`Field`](crate::Field)s made from one parsed head holds a reference to the head's buffer per
//! name and value (every value, and every name that is not made static): cloning each into
//! its field and dropping it afterwards are two atomic operations per field, about 18 for an
//! origin's eight-field response head. Held here, the list takes one reference, and the fields
//! are read where they lie until the engines encode them.

use bytes::Bytes;

/// A field of static bytes added after the parse (as `Via`): a lower-case name and a valid
/// value.
pub type StaticField = (&'static [u8], &'static [u8]);

/// One field: where it is, and its kind ([`kind_of`] its name: 0 for a name not known).
/// 24 bytes on a 64-bit target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// Name and value as ranges of the buffer.
    Span { kind: u8, name: [u32; 2], value: [u32; 2] },
    /// A field of static bytes.
    Static { kind: u8, field: &'static StaticField },
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Line>() == 24);

impl Line {
    fn kind(&self) -> u8 {
        match *self {
            Self::Span { kind, .. } | Self::Static { kind, .. } => kind,
        }
    }

    /// Where the line lies, as 16 bytes ([`PackedFields::imprint`]): a span's four offsets,
    /// or a static field's address after an offset no span starts at (`u32::MAX`; the buffer
    /// is shorter). The kind is the name's, so it is not part of it.
    fn image(&self) -> u128 {
        match *self {
            Self::Span { name: [a, b], value: [c, d], .. } => {
                u128::from(a) | u128::from(b) << 32 | u128::from(c) << 64 | u128::from(d) << 96
            }
            Self::Static { field, .. } => u128::from(u32::MAX) | (std::ptr::from_ref(field) as usize as u128) << 64,
        }
    }
}

/// The kind of `name` (see [`Line`]). The names known are those looked up in nearly every
/// proxied response (its framing, its connection options, the fields a proxy removes,
/// priority, the hints the proxy learns, and `date`, which the engines add when it is
/// missing): told by their kind, one byte, not by comparing names, and when none of a kind is
/// there a lookup reads no line. A `match` on byte-string
/// literals, compared inline, which works at compile time too. Kinds are bits of a `u16`: at
/// most 15 names.
#[inline] // with a constant name (a lookup's), folded away
const fn kind_of(name: &[u8]) -> u8 {
    // By length first: a `match` on the names alone compares them one after another.
    match name.len() {
        2 => match name {
            b"te" => 5,
            _ => 0,
        },
        4 => match name {
            b"link" => 10,
            b"date" => 13,
            _ => 0,
        },
        7 => match name {
            b"upgrade" => 6,
            _ => 0,
        },
        8 => match name {
            b"priority" => 9,
            _ => 0,
        },
        10 => match name {
            b"connection" => 1,
            b"keep-alive" => 2,
            _ => 0,
        },
        12 => match name {
            b"content-type" => 11,
            _ => 0,
        },
        14 => match name {
            b"content-length" => 4,
            _ => 0,
        },
        16 => match name {
            b"proxy-connection" => 7,
            b"content-encoding" => 12,
            _ => 0,
        },
        17 => match name {
            b"transfer-encoding" => 3,
            _ => 0,
        },
        18 => match name {
            b"proxy-authenticate" => 8,
            _ => 0,
        },
        _ => 0,
    }
}

/// Field names to [`remove`](PackedFields::remove), sorted out once (at compile time for a
/// `const`): the known ones as a set of kinds, the others kept to be compared.
#[derive(Clone, Copy, Debug)]
pub struct Names {
    /// Bit `kind` set for each known name; bit 0: there are others.
    kinds: u16,
    names: &'static [&'static [u8]],
}

impl Names {
    /// The set of `names` (lower case).
    pub const fn new(names: &'static [&'static [u8]]) -> Self {
        let mut kinds = 0u16;
        let mut i = 0;
        while i < names.len() {
            kinds |= 1 << kind_of(names[i]);
            i += 1;
        }
        Self { kinds, names }
    }
}

/// The lines of a head being parsed, before its buffer is split off: made as the parser
/// finds each field, so that a head is walked once.
#[derive(Debug, Default)]
pub(crate) struct Spans {
    lines: Vec<Line>,
    kinds: u16,
}

/// Lines a parsed head has room for at first: an origin's response head has about ten
/// fields (one more is the `Via` a proxy appends); a longer one grows the list.
const FIRST_ROOM: usize = 16;

impl Spans {
    /// Note a field whose name, lower case, is `name` and lies at `at[0]..at[1]` of the
    /// buffer, its value at `at[2]..at[3]`.
    #[inline(always)]
    pub(crate) fn push(&mut self, name: &[u8], at: [u32; 4]) {
        if self.lines.capacity() == 0 {
            self.lines.reserve_exact(FIRST_ROOM);
        }
        let kind = kind_of(name);
        self.kinds |= 1 << kind;
        self.lines.push(Line::Span { kind, name: [at[0], at[1]], value: [at[2], at[3]] });
    }

    /// How many fields were noted.
    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    /// The fields, reading `buf`.
    pub(crate) fn into_fields(self, buf: Bytes) -> PackedFields {
        PackedFields { buf, lines: self.lines, kinds: self.kinds }
    }
}

/// Header fields as one buffer and the place of each field in it, in order. Names are lower
/// case (the parser that fills it lower-cases them in place); connection-specific fields are
/// the user's to take out ([`remove`](Self::remove), [`retain`](Self::retain)) before the list
/// goes to an engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedFields {
    buf: Bytes,
    lines: Vec<Line>,
    /// Bit `kind` set: a field of that kind is there.
    kinds: u16,
}

impl PackedFields {
    /// The fields of `buf` at `spans` (name start, name end, value start, value end), names
    /// already lower case. A span outside `buf` reads as empty (the parser never makes one).
    pub(crate) fn from_spans(buf: Bytes, spans: &[[u32; 4]]) -> Self {
        let mut lines = Spans::default();
        for &s in spans {
            lines.push(buf.get(s[0] as usize..s[1] as usize).unwrap_or_default(), s);
        }
        lines.into_fields(buf)
    }

    /// A copy of `fields` (names lower case, values valid) in one new buffer.
    pub fn copied<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        let mut buf = Vec::new();
        let mut spans = Vec::new();
        for (n, v) in fields {
            let at = |b: &Vec<u8>| u32::try_from(b.len()).unwrap_or(u32::MAX);
            let name = at(&buf);
            buf.extend_from_slice(n);
            let value = at(&buf);
            buf.extend_from_slice(v);
            spans.push([name, value, value, at(&buf)]);
        }
        Self::from_spans(buf.into(), &spans)
    }

    /// The bytes of `at` in the buffer.
    fn part(&self, [a, b]: [u32; 2]) -> &[u8] {
        self.buf.get(a as usize..b as usize).unwrap_or_default()
    }

    /// The bytes of `at` as a slice of the buffer (empty where [`part`](Self::part) is).
    fn share(&self, [a, b]: [u32; 2]) -> Bytes {
        if a <= b && b as usize <= self.buf.len() {
            self.buf.slice(a as usize..b as usize)
        } else {
            Bytes::new()
        }
    }

    fn name(&self, line: &Line) -> &[u8] {
        match *line {
            Line::Span { name, .. } => self.part(name),
            Line::Static { field, .. } => field.0,
        }
    }

    fn value(&self, line: &Line) -> &[u8] {
        match *line {
            Line::Span { value, .. } => self.part(value),
            Line::Static { field, .. } => field.1,
        }
    }

    fn value_bytes(&self, line: &Line) -> Bytes {
        match *line {
            Line::Span { value, .. } => self.share(value),
            Line::Static { field, .. } => Bytes::from_static(field.1),
        }
    }

    fn field(&self, line: &Line) -> (&[u8], &[u8]) {
        match *line {
            Line::Span { name, value, .. } => (self.part(name), self.part(value)),
            Line::Static { field, .. } => *field,
        }
    }

    /// Every field as (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.lines.iter().map(|l| self.field(l))
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The lines of the fields named `name` (lower case), in order.
    #[inline]
    fn named<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a Line> + 'a {
        let kind = kind_of(name);
        // None of a known kind: no line to read.
        let lines = if kind != 0 && self.kinds & (1 << kind) == 0 { &[][..] } else { &self.lines[..] };
        lines.iter().filter(move |l| if kind != 0 { l.kind() == kind } else { self.name(l) == name })
    }

    /// The values of the fields named `name` (lower case), in order.
    #[inline]
    pub fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.named(name).map(|l| self.value(l))
    }

    /// Whether a field named `name` (lower case) is there.
    #[inline]
    pub fn has(&self, name: &[u8]) -> bool {
        self.named(name).next().is_some()
    }

    /// The first value of the fields named `name` (lower case), sharing the buffer.
    #[inline]
    pub fn first_bytes(&self, name: &[u8]) -> Option<Bytes> {
        self.named(name).next().map(|l| self.value_bytes(l))
    }

    /// Keep only the fields for which `keep(name, value)` is true, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        self.retain_lines(|p, l| {
            let (n, v) = p.field(l);
            keep(n, v)
        });
    }

    /// Remove every field named one of `names`.
    pub fn remove(&mut self, names: &Names) {
        let others = names.kinds & 1 != 0;
        // Only known names, none of them here: nothing to do.
        if !others && self.kinds & names.kinds == 0 {
            return;
        }
        self.retain_lines(|p, l| match l.kind() {
            0 => !others || !names.names.contains(&p.name(l)),
            k => names.kinds & (1 << k) == 0,
        });
    }

    fn retain_lines(&mut self, mut keep: impl FnMut(&Self, &Line) -> bool) {
        // By hand rather than `Vec::retain` (whose guard against a panicking closure cost
        // about 17 instructions a line): lines are `Copy`; the ones before the first that
        // goes stay where they are.
        let Some(first) = self.lines.iter().position(|l| !keep(self, l)) else { return };
        let mut kept = first;
        for i in first + 1..self.lines.len() {
            let l = self.lines[i];
            if keep(self, &l) {
                self.lines[kept] = l;
                kept += 1;
            }
        }
        self.lines.truncate(kept);
        self.kinds = self.lines.iter().fold(0, |k, l| k | 1 << l.kind());
    }

    /// Append a field made of static bytes.
    pub fn push_static(&mut self, field: &'static StaticField) {
        let kind = kind_of(field.0);
        self.kinds |= 1 << kind;
        self.lines.push(Line::Static { kind, field });
    }

    /// How long [`imprint`](Self::imprint)'s image is.
    pub fn imprint_len(&self) -> usize {
        self.buf.len() + 16 * self.lines.len()
    }

    /// Append an image of the fields: the buffer, then where each line lies in it (a static
    /// field by its address). Two lists with the same image hold the same fields in the same
    /// order (a line reads only its buffer or its static field), so an encoder can tell a
    /// repeated list by one comparison instead of two per field ([`is_imprint`](Self::is_imprint)).
    pub fn imprint(&self, out: &mut Vec<u8>) {
        out.reserve(self.imprint_len());
        out.extend_from_slice(&self.buf);
        for l in &self.lines {
            out.extend_from_slice(&l.image().to_le_bytes());
        }
    }

    /// Whether `kept` is [`imprint`](Self::imprint)'s image of these fields.
    pub fn is_imprint(&self, kept: &[u8]) -> bool {
        let n = self.buf.len();
        kept.len() == self.imprint_len()
            && kept[..n] == self.buf[..]
            && kept[n..].chunks_exact(16).zip(&self.lines).all(|(k, l)| k == l.image().to_le_bytes())
    }

    /// Append every field to `map`, values sharing the buffer; a field the `http` crate does
    /// not take is left out (the parser's checks are `http`'s, so none is).
    pub fn append_to_map(&self, map: &mut http::HeaderMap) {
        for l in &self.lines {
            if let (Ok(n), Ok(v)) =
                (http::HeaderName::from_bytes(self.name(l)), http::HeaderValue::from_maybe_shared(self.value_bytes(l)))
            {
                map.append(n, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names [`kind_of`] knows, in the order of their kinds.
    const KNOWN: [&[u8]; 12] = [
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"te",
        b"upgrade",
        b"proxy-connection",
        b"proxy-authenticate",
        b"priority",
        b"link",
        b"content-type",
        b"content-encoding",
    ];

    fn packed() -> PackedFields {
        let buf = Bytes::from_static(b"server: x\r\nlink: </a>\r\nlink: </b>\r\n");
        PackedFields::from_spans(buf, &[[0, 6, 8, 9], [11, 15, 17, 21], [23, 27, 29, 33]])
    }

    #[test]
    fn fields_read_where_they_lie_and_added_ones_follow() {
        let mut p = packed();
        p.push_static(&(b"via", b"1.1 sluice"));
        let all: Vec<_> = p.iter().collect();
        assert_eq!(all, [(&b"server"[..], &b"x"[..]), (b"link", b"</a>"), (b"link", b"</b>"), (b"via", b"1.1 sluice")]);
        assert_eq!(p.values(b"link").collect::<Vec<_>>(), [b"</a>", b"</b>"]);
        assert_eq!(p.first_bytes(b"link").as_deref(), Some(&b"</a>"[..]));
        assert_eq!(p.first_bytes(b"via").as_deref(), Some(&b"1.1 sluice"[..]));
        assert_eq!(p.first_bytes(b"date"), None);
        let mut map = http::HeaderMap::new();
        p.append_to_map(&mut map);
        assert_eq!(map.get_all("link").iter().collect::<Vec<_>>(), ["</a>", "</b>"]);
        assert_eq!(map.len(), 4);
    }

    #[test]
    fn an_empty_list_holds_nothing_until_a_field_is_pushed() {
        let mut p = PackedFields::default();
        assert!(p.is_empty() && p.iter().next().is_none() && !p.has(b"via") && p.first_bytes(b"via").is_none());
        p.remove(&Names::new(&[b"via", b"x"]));
        p.retain(|_, _| false);
        assert!(p.is_empty());
        p.push_static(&(b"via", b"1.1 sluice"));
        assert_eq!(p.iter().collect::<Vec<_>>(), [(&b"via"[..], &b"1.1 sluice"[..])]);
        assert!(p.has(b"via") && p.len() == 1);
    }

    #[test]
    fn a_copy_holds_the_same_fields() {
        let p = packed();
        let copy = PackedFields::copied(p.iter());
        assert!(copy.iter().eq(p.iter()));
        assert!(PackedFields::copied([]).is_empty());
    }

    #[test]
    fn an_image_is_its_fields_and_only_theirs() {
        static VIA: StaticField = (b"via", b"1.1 sluice");
        static OTHER_VIA: StaticField = (b"via", b"1.1 sluice");
        let image = |p: &PackedFields| {
            let mut out = vec![0xaa];
            p.imprint(&mut out);
            assert_eq!(out.len(), 1 + p.imprint_len());
            out.split_off(1)
        };
        let mut base = packed();
        base.push_static(&VIA);
        let kept = image(&base);
        // The same bytes parsed again, another buffer: the same image.
        let mut again = PackedFields::from_spans(
            Bytes::copy_from_slice(&base.buf),
            &[[0, 6, 8, 9], [11, 15, 17, 21], [23, 27, 29, 33]],
        );
        again.push_static(&VIA);
        assert!(again.is_imprint(&kept) && base.is_imprint(&kept));
        // Each of these holds other fields (or the same at another address), and is told apart.
        let mut changed_byte = PackedFields::from_spans(
            Bytes::from_static(b"server: y\r\nlink: </a>\r\nlink: </b>\r\n"),
            &[[0, 6, 8, 9], [11, 15, 17, 21], [23, 27, 29, 33]],
        );
        changed_byte.push_static(&VIA);
        let mut one_removed = packed();
        one_removed.retain(|n, v| (n, v) != (b"link", b"</b>"));
        one_removed.push_static(&VIA);
        let mut other_static = packed();
        other_static.push_static(&OTHER_VIA);
        let without_static = packed();
        let mut twice = packed();
        twice.push_static(&VIA);
        twice.push_static(&VIA);
        for (i, p) in [changed_byte, one_removed, other_static, without_static, twice].iter().enumerate() {
            assert!(!p.is_imprint(&kept), "case {i}");
            assert!(p.is_imprint(&image(p)), "case {i}");
        }
        assert!(!base.is_imprint(&kept[..kept.len() - 1]) && !base.is_imprint(&[]));
        assert!(PackedFields::default().is_imprint(&[]));
    }

    #[test]
    fn retain_drops_fields_and_keeps_the_order() {
        let mut p = packed();
        p.push_static(&(b"via", b"1.1 sluice"));
        p.retain(|n, v| !(n == b"link" && v == b"</a>") && n != b"via");
        assert_eq!(p.iter().collect::<Vec<_>>(), [(&b"server"[..], &b"x"[..]), (b"link", b"</b>")]);
        assert_eq!(p.len(), 2);
        // The first goes: the rest moves up.
        let mut q = packed();
        q.retain(|n, v| n != b"server" && v != b"</b>");
        assert_eq!(q.iter().collect::<Vec<_>>(), [(&b"link"[..], &b"</a>"[..])]);
        assert!(!q.has(b"server") && q.has(b"link"));
        p.retain(|_, _| false);
        assert!(p.is_empty() && p.iter().next().is_none());
    }

    #[test]
    fn known_names_are_told_by_kind_and_only_they() {
        for (i, n) in KNOWN.iter().enumerate() {
            assert_eq!(usize::from(kind_of(n)), i + 1, "{}", String::from_utf8_lossy(n));
            // The same length, one byte off, at either end.
            let mut m = n.to_vec();
            m[0] ^= 1;
            assert_eq!(kind_of(&m), 0);
            let mut m = n.to_vec();
            *m.last_mut().unwrap() ^= 1;
            assert_eq!(kind_of(&m), 0);
        }
        assert!(KNOWN.len() < 16, "a kind is a bit of a u16");
        assert_eq!(kind_of(b""), 0);
        assert_eq!(kind_of(b"server"), 0);
    }

    #[test]
    fn lookups_agree_with_a_plain_scan_as_fields_come_and_go() {
        let names: Vec<&[u8]> = KNOWN.iter().copied().chain([&b"server"[..], b"x-a", b"date"]).collect();
        let scan =
            |p: &PackedFields, n: &[u8]| p.iter().filter(|(m, _)| *m == n).map(|(_, v)| v.to_vec()).collect::<Vec<_>>();
        let check = |p: &PackedFields| {
            for n in &names {
                assert_eq!(
                    p.values(n).map(<[u8]>::to_vec).collect::<Vec<_>>(),
                    scan(p, n),
                    "{}",
                    String::from_utf8_lossy(n)
                );
                assert_eq!(p.has(n), !scan(p, n).is_empty());
                assert_eq!(p.first_bytes(n).map(|b| b.to_vec()), scan(p, n).first().cloned());
            }
        };
        // Every name twice, with values telling them apart.
        let values: Vec<String> = (0..names.len() * 2).map(|i| format!("v{i}")).collect();
        let pairs: Vec<(&[u8], &[u8])> =
            names.iter().chain(names.iter()).zip(&values).map(|(n, v)| (*n, v.as_bytes())).collect();
        let mut p = PackedFields::copied(pairs.iter().copied());
        check(&p);
        p.remove(&Names::new(&[b"connection", b"x-a"]));
        check(&p);
        assert!(!p.has(b"connection") && !p.has(b"x-a") && p.has(b"keep-alive") && p.has(b"server"));
        p.retain(|n, v| n != b"link" && v != b"v3");
        check(&p);
        assert!(!p.has(b"link") && p.has(b"content-length"));
        p.push_static(&(b"link", b"</x>"));
        check(&p);
        assert_eq!(p.values(b"link").collect::<Vec<_>>(), [b"</x>"]);
        // Removing names none of which is there leaves the list as it is.
        let before = p.clone();
        p.remove(&Names::new(&[b"x-a", b"connection"]));
        assert_eq!(p, before);
        p.remove(&Names::new(&KNOWN));
        check(&p);
        assert_eq!(p.iter().map(|(n, _)| n).collect::<Vec<_>>(), [&b"server"[..], b"date", b"server", b"date"]);
    }

    #[test]
    fn a_span_outside_the_buffer_reads_as_empty() {
        let p = PackedFields::from_spans(Bytes::from_static(b"abc"), &[[0, 1, 2, 9], [5, 4, 0, 1]]);
        assert_eq!(p.iter().collect::<Vec<_>>(), [(&b"a"[..], &b""[..]), (b"", b"a")]);
        assert_eq!(p.first_bytes(b"a").as_deref(), Some(&b""[..]));
    }
}
