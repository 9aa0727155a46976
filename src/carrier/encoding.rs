//! The text of `OTEL_RESOURCE_ATTRIBUTES`, byte by byte as Python reads and writes it: segments,
//! Python's `str.strip`, percent-encoding (`urllib.parse.quote(s, safe="")`) and decoding
//! (`unquote`), and attribute values as Python's `str()` prints them.

use std::borrow::Cow;

use opentelemetry::Value;

use crate::pyjson::write_f64;

/// Whether Python's `str.isspace` holds for `c`: Unicode White_Space (Rust's
/// `char::is_whitespace`) plus the ASCII separators U+001C–U+001F, which Python counts too.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `s.strip()` as Python strips.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python's `strip()` on bytes that are mostly UTF-8: whitespace characters are removed from
/// both ends; a byte that does not start a valid UTF-8 character is never whitespace.
pub(crate) fn py_strip_bytes(mut b: &[u8]) -> &[u8] {
    while let Some((c, len)) = first_char(b)
        && is_py_space(c)
    {
        b = &b[len..];
    }
    while let Some((c, len)) = last_char(b)
        && is_py_space(c)
    {
        b = &b[..b.len() - len];
    }
    b
}

fn first_char(b: &[u8]) -> Option<(char, usize)> {
    (1..=b.len().min(4)).find_map(|n| {
        let s = std::str::from_utf8(&b[..n]).ok()?;
        s.chars().next().map(|c| (c, n))
    })
}

fn last_char(b: &[u8]) -> Option<(char, usize)> {
    (1..=b.len().min(4)).find_map(|n| {
        let s = std::str::from_utf8(&b[b.len() - n..]).ok()?;
        s.chars().next_back().map(|c| (c, n))
    })
}

/// One `key=value` segment of the variable: its key (stripped, never decoded) and the segment
/// exactly as it stands.
pub(crate) struct Segment<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) raw: &'a [u8],
}

impl Segment<'_> {
    /// The text after the first `=`, stripped (not decoded).
    pub(crate) fn raw_value(&self) -> &[u8] {
        let eq = self
            .raw
            .iter()
            .position(|&b| b == b'=')
            .unwrap_or(self.raw.len());
        py_strip_bytes(self.raw.get(eq + 1..).unwrap_or_default())
    }
}

/// The segments Python keeps (`_otel_resource_attribute_segments`): split on every `,`; a blank
/// segment, one without `=`, or one whose key is blank is skipped.
pub(crate) fn segments(text: &[u8]) -> impl Iterator<Item = Segment<'_>> {
    text.split(|&b| b == b',').filter_map(|raw| {
        let eq = raw.iter().position(|&b| b == b'=')?;
        let key = py_strip_bytes(&raw[..eq]);
        (!key.is_empty()).then_some(Segment { key, raw })
    })
}

/// Percent-encodes the UTF-8 bytes of `s` as `urllib.parse.quote(s, safe="")`: everything but
/// `A–Z a–z 0–9 - . _ ~` becomes `%XX` (upper-case hex).
pub(crate) fn percent_encode(s: &str) -> Cow<'_, str> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    if s.bytes().all(unreserved) {
        return Cow::Borrowed(s);
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    Cow::Owned(out)
}

/// Decodes `%XX` escapes as Python's `urllib.parse.unquote`: an escape that is not two hex
/// digits stays as written, `+` is not a space, and bytes that are not UTF-8 become U+FFFD (one
/// per maximal invalid sequence).
pub(crate) fn percent_decode(value: &[u8]) -> Cow<'_, str> {
    if !value.contains(&b'%') {
        return String::from_utf8_lossy(value);
    }
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                value.get(i + 1).and_then(|b| hex_digit(*b)),
                value.get(i + 2).and_then(|b| hex_digit(*b)),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(value[i]);
            i += 1;
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A value as Python's `str()` prints the scalar it would be: `True` / `False`, the integer,
/// `repr(float)` (`1.0`, `1e-05`, `inf`, `nan`), the string itself. `None` for an array, which
/// the variable cannot carry.
pub(crate) fn python_text(value: &Value) -> Option<Cow<'_, str>> {
    Some(match value {
        Value::Bool(true) => Cow::Borrowed("True"),
        Value::Bool(false) => Cow::Borrowed("False"),
        Value::I64(n) => Cow::Owned(n.to_string()),
        Value::F64(f) => Cow::Owned(python_float(*f)),
        Value::String(s) => Cow::Borrowed(s.as_str()),
        _ => return None,
    })
}

/// Python's `repr(float)`: `inf`, `-inf`, `nan`, else the shortest round-trip digits laid out
/// as Python does (`1.0`, `0.0001`, `1e-05`, `1e+16`).
pub(crate) fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let mut out = Vec::with_capacity(24);
    write_f64(&mut out, f);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_is_python_s() {
        assert_eq!(py_strip("\u{1c} a b\u{1f}\u{85}"), "a b");
        assert_eq!(py_strip_bytes(b"\xc2\xa0 k \xff\t"), b"k \xff");
        assert_eq!(py_strip_bytes(b"\x1e\xe3\x80\x80"), b"");
    }

    #[test]
    fn decoding_matches_python_unquote() {
        for (raw, want) in [
            ("a%20b", "a b"),
            ("a+b", "a+b"),
            ("100%", "100%"),
            ("%zz%4", "%zz%4"),
            ("%%41", "%A"),
            ("%c3%bc", "ü"),
            ("%C3%28", "\u{fffd}("),
            ("%E2%82", "\u{fffd}"),
            ("%F0%80%80", "\u{fffd}\u{fffd}\u{fffd}"),
        ] {
            assert_eq!(percent_decode(raw.as_bytes()), want, "{raw}");
        }
    }

    #[test]
    fn floats_read_as_python_prints_them() {
        for (f, want) in [
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(python_float(f), want);
        }
    }
}
