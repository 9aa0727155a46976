//! JSON written byte for byte as Python's `json.dumps` writes it (the default
//! separators `", "` and `": "`, `ensure_ascii=True`), with floats in Python's `repr(float)`
//! digits and times as the OTel Python SDK's microsecond UTC strings.
//!
//! Float digits: the shortest round-trip digits come from the [`ryu`] crate (pinned in
//! `Cargo.toml`; Ryū's shortest representation is the same digit string Python's `repr` picks,
//! except for ties, which Python breaks to even — handled in `prefer_even_on_tie`); the layout
//! (positional for decimal exponents in `-5..16`, else `1e-05` / `1.5e+16`) is Python's
//! `float_repr_style = 'short'` rule.

use std::fmt;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::Resource;

/// Writes a JSON object of attributes. A key set twice keeps its first position and its last
/// value, like the Python dict the SDK fills.
pub(crate) fn write_attributes(out: &mut Vec<u8>, attrs: &[KeyValue]) {
    out.push(b'{');
    let mut first = true;
    for (i, kv) in attrs.iter().enumerate() {
        let key = kv.key.as_str();
        if attrs[..i].iter().any(|p| p.key.as_str() == key) {
            continue;
        }
        let value = attrs[i + 1..]
            .iter()
            .rev()
            .find(|p| p.key.as_str() == key)
            .map_or(&kv.value, |p| &p.value);
        if !first {
            out.extend_from_slice(b", ");
        }
        first = false;
        write_json_str(out, key);
        out.extend_from_slice(b": ");
        write_value(out, value);
    }
    out.push(b'}');
}

pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => write_bool(out, *b),
        Value::I64(n) => write_i64(out, *n),
        Value::F64(f) => write_f64(out, *f),
        Value::String(s) => write_json_str(out, s.as_str()),
        Value::Array(array) => match array {
            Array::Bool(v) => write_array(out, v, |o, b| write_bool(o, *b)),
            Array::I64(v) => write_array(out, v, |o, n| write_i64(o, *n)),
            Array::F64(v) => write_array(out, v, |o, f| write_f64(o, *f)),
            Array::String(v) => write_array(out, v, |o, s| write_json_str(o, s.as_str())),
            // Future array kinds: fall back to their text form.
            other => write_json_str(out, &other.to_string()),
        },
        // Future value kinds: fall back to their text form.
        other => write_json_str(out, &other.as_str()),
    }
}

fn write_array<T>(out: &mut Vec<u8>, items: &[T], mut item: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        item(out, x);
    }
    out.push(b']');
}

pub(crate) fn write_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

pub(crate) fn write_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Writes a float the way Python's `repr(float)` (and so `json.dumps`) does: shortest round-trip
/// digits, positional notation for decimal exponents in `-5..16`, otherwise `1e-05` / `1.5e+16`.
/// Non-finite values become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub(crate) fn write_f64(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
        return;
    }
    if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 {
            b"\"Infinity\"".as_slice()
        } else {
            b"\"-Infinity\""
        });
        return;
    }
    // Ryū gives the shortest round-trip digits, laid out as `1.0`, `0.0001`, `1e-5`,
    // `1.2345678901234568e17`; take the digits and decimal exponent from that.
    let mut ryu_buf = ryu::Buffer::new();
    let text = ryu_buf.format_finite(f).as_bytes();
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let e_pos = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
    let mut exp10 = 0i32;
    let mut exp_negative = false;
    for &b in text.get(e_pos + 1..).unwrap_or_default() {
        match b {
            b'-' => exp_negative = true,
            b'0'..=b'9' => exp10 = exp10 * 10 + i32::from(b - b'0'),
            _ => {}
        }
    }
    if exp_negative {
        exp10 = -exp10;
    }
    // Significant digits, without the point and without leading/trailing zeros; `point` is
    // how many of them stand before the decimal point (negative: zeros after the point).
    let mut digits = [0u8; 24];
    let mut n_digits = 0;
    let mut point = 0i32;
    let mut seen_point = false;
    for &b in &text[..e_pos] {
        if b == b'.' {
            seen_point = true;
        } else if n_digits == 0 && b == b'0' {
            if seen_point {
                point -= 1;
            }
        } else {
            digits[n_digits] = b;
            n_digits += 1;
            if !seen_point {
                point += 1;
            }
        }
    }
    while n_digits > 0 && digits[n_digits - 1] == b'0' {
        n_digits -= 1;
    }
    if n_digits == 0 {
        out.extend_from_slice(if negative { b"-0.0".as_slice() } else { b"0.0" });
        return;
    }
    // The value is d.ddd × 10^exp.
    let exp = point + exp10 - 1;
    // A tie between two shortest candidates needs at least 16 digits (the candidates' spacing
    // must fit inside one ulp), and Python's pick differs from Rust's only if Rust's is odd.
    if n_digits >= 16 && (digits[n_digits - 1] - b'0') % 2 == 1 {
        prefer_even_on_tie(f.abs(), &mut digits[..n_digits], exp);
    }
    let digits = &digits[..n_digits];
    if negative {
        out.push(b'-');
    }
    // Python's rule (float_repr_style 'short'): with `decpt = exp + 1`, positional notation
    // when -4 < decpt <= 16.
    let decpt = exp + 1;
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', decpt.unsigned_abs() as usize));
            out.extend_from_slice(digits);
        } else {
            let decpt = decpt as usize;
            if decpt >= digits.len() {
                out.extend_from_slice(digits);
                out.extend(std::iter::repeat_n(b'0', decpt - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..decpt]);
                out.push(b'.');
                out.extend_from_slice(&digits[decpt..]);
            }
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        if exp.unsigned_abs() < 10 {
            out.push(b'0');
        }
        write_i64(out, i64::from(exp.unsigned_abs()));
    }
}

/// Python's `repr` breaks a tie between two equally near shortest digit strings towards the
/// even last digit (David Gay's `dtoa`, round-half-even); Rust's shortest formatting rounds such
/// ties up. `digits` (shortest, from Rust) are `d.ddd × 10^exp`; replace the last digit with its
/// even neighbour when `value` lies exactly halfway between the two and the neighbour also
/// reads back as `value`.
fn prefer_even_on_tie(value: f64, digits: &mut [u8], exp: i32) {
    let n = digits.len();
    let last = digits[n - 1];
    // Exact decimal expansion to n + 21 significant digits: a double that is not exactly the
    // midpoint differs from it within far fewer digits than that.
    let mut exact = StackBuf::<72>::new();
    if fmt::write(&mut exact, format_args!("{value:.prec$e}", prec = n + 20)).is_err() {
        return;
    }
    let text = exact.as_bytes();
    let Some(e_pos) = text.iter().position(|&b| b == b'e') else {
        return;
    };
    let exact_exp: Option<i32> = std::str::from_utf8(&text[e_pos + 1..])
        .ok()
        .and_then(|s| s.parse().ok());
    if exact_exp != Some(exp) {
        return;
    }
    let exact_digits = text[..e_pos].iter().copied().filter(|&b| b != b'.');
    // Midpoint with the lower neighbour is `...(last-1)5`, with the upper one `...last5`.
    let mut midpoint_lower = true;
    let mut midpoint_upper = true;
    for (i, b) in exact_digits.enumerate() {
        let (want_lower, want_upper) = match i {
            i if i < n - 1 => (digits[i], digits[i]),
            i if i == n - 1 => (last - 1, last),
            i if i == n => (b'5', b'5'),
            _ => (b'0', b'0'),
        };
        midpoint_lower &= b == want_lower;
        midpoint_upper &= b == want_upper;
    }
    let even = if midpoint_lower {
        last - 1
    } else if midpoint_upper && last < b'9' {
        last + 1
    } else {
        return;
    };
    if even == b'0' {
        return;
    }
    // The neighbour must round-trip as well (not a given at a power-of-two boundary).
    let mut candidate = StackBuf::<40>::new();
    for (i, &d) in digits.iter().enumerate() {
        let d = if i == n - 1 { even } else { d };
        let _ = fmt::write(&mut candidate, format_args!("{}", char::from(d)));
    }
    let _ = fmt::write(&mut candidate, format_args!("e{}", exp - (n as i32 - 1)));
    let reads_back = std::str::from_utf8(candidate.as_bytes())
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        == Some(value);
    if reads_back {
        digits[n - 1] = even;
    }
}

/// A fixed-size `fmt::Write` target, to format without allocating.
struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackBuf<N> {
    fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 0: byte passes through; otherwise the escape to use (`u` means `\u00XX`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x20..=0x7e => 0,
            _ => b'u',
        };
        i += 1;
    }
    table
};

/// Writes `s` as a JSON string exactly like Python's `json.dumps` (`ensure_ascii=True`): `"` and
/// `\` backslash-escaped, `\n \r \t \b \f` short forms, other control characters, DEL and all
/// non-ASCII characters as lowercase `\uXXXX` (UTF-16 surrogate pairs above U+FFFF).
pub(crate) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let esc = ESCAPE[usize::from(bytes[i])];
        if esc == 0 {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if bytes[i] >= 0x80 {
            // `i` is at a char boundary: everything before it was ASCII or a whole char.
            let c = s[i..].chars().next().unwrap_or('\u{fffd}');
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write_u_escape(out, *unit);
            }
            i += c.len_utf8();
        } else if esc == b'u' {
            write_u_escape(out, u16::from(bytes[i]));
            i += 1;
        } else {
            out.extend_from_slice(&[b'\\', esc]);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_u_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[usize::from(unit >> 12)],
        HEX[usize::from((unit >> 8) & 0xf)],
        HEX[usize::from((unit >> 4) & 0xf)],
        HEX[usize::from(unit & 0xf)],
    ]);
}

/// The last instant RFC 3339 (and Python) can write: 9999-12-31T23:59:59.999999Z.
const MAX_MICROS: u128 = 253_402_300_799_999_999;

/// Writes `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` (with the quotes), UTC, rounded to the nearest
/// microsecond with ties to even, as Python's `datetime.fromtimestamp` rounds. Instants before
/// 1970 or after 9999 are clamped to those bounds (the formatter cannot write them).
pub(crate) fn write_time(out: &mut Vec<u8>, t: SystemTime) {
    let nanos = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let (mut micros, rest) = (nanos / 1000, nanos % 1000);
    if rest > 500 || (rest == 500 && micros % 2 == 1) {
        micros += 1;
    }
    let micros = micros.min(MAX_MICROS) as u64;
    let t = UNIX_EPOCH + Duration::from_micros(micros);
    let _ = write!(out, "\"{}\"", humantime::format_rfc3339_micros(t));
}

/// Renders a resource the way Python's `Resource.to_json()` lays it out:
/// `{"attributes": {...}, "schema_url": "..."}` (attributes sorted by key, `schema_url` is `""`
/// when unset).
pub(crate) fn resource_json(resource: &Resource) -> String {
    let mut attrs: Vec<(&str, &Value)> = resource.iter().map(|(k, v)| (k.as_str(), v)).collect();
    attrs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"attributes\": {");
    for (i, (key, value)) in attrs.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_json_str(&mut out, key);
        out.extend_from_slice(b": ");
        write_value(&mut out, value);
    }
    out.extend_from_slice(b"}, \"schema_url\": ");
    write_json_str(&mut out, resource.schema_url().unwrap_or(""));
    out.push(b'}');
    // Only ASCII JSON is ever written (see `write_json_str`).
    String::from_utf8(out).expect("console JSON is ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, f);
        String::from_utf8(out).unwrap()
    }

    fn json_str(s: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    fn time(nanos: u64) -> String {
        time_at(UNIX_EPOCH + Duration::from_nanos(nanos))
    }

    fn time_at(t: SystemTime) -> String {
        let mut out = Vec::new();
        write_time(&mut out, t);
        String::from_utf8(out).unwrap()
    }

    #[test]
    // The tie cases are written with their exact binary values on purpose.
    #[allow(clippy::excessive_precision)]
    fn floats_match_python_repr() {
        // Expected values are Python 3 `repr(x)`.
        let cases: &[(f64, &str)] = &[
            (0.5, "0.5"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (-2.75, "-2.75"),
            (1234.5678, "1234.5678"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234567e17, "1.2345678901234566e+17"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (123456789.125, "123456789.125"),
            // Exactly halfway between two shortest candidates: Python keeps the even digit.
            (-1113178120592002.25, "-1113178120592002.2"),
            (111659285584252.125, "111659285584252.12"),
            (-233891771783429.625, "-233891771783429.62"),
        ];
        for (f, want) in cases {
            assert_eq!(float(*f), *want, "repr of {f:?}");
        }
    }

    #[test]
    fn non_finite_floats_are_strings() {
        assert_eq!(float(f64::NAN), r#""NaN""#);
        assert_eq!(float(f64::INFINITY), r#""Infinity""#);
        assert_eq!(float(f64::NEG_INFINITY), r#""-Infinity""#);
    }

    #[test]
    fn strings_are_escaped_like_python_ensure_ascii() {
        // Expected values are Python 3 `json.dumps(s)`.
        assert_eq!(json_str("plain"), r#""plain""#);
        assert_eq!(json_str("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            json_str("\n\r\t\u{8}\u{c}\u{1}\u{7f}"),
            r#""\n\r\t\b\f\u0001\u007f""#
        );
        assert_eq!(json_str("héllo"), r#""h\u00e9llo""#);
        assert_eq!(json_str("日本"), r#""\u65e5\u672c""#);
        assert_eq!(json_str("🚀!"), r#""\ud83d\ude80!""#);
        assert_eq!(json_str(""), r#""""#);
    }

    #[test]
    fn times_are_utc_micro_iso() {
        assert_eq!(time(0), r#""1970-01-01T00:00:00.000000Z""#);
        assert_eq!(
            time(1_795_990_174_298_704_000),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        // Rounded to the nearest microsecond, ties to even, like Python.
        assert_eq!(
            time(1_795_990_174_298_704_499),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        assert_eq!(
            time(1_795_990_174_298_704_501),
            r#""2026-11-29T22:09:34.298705Z""#
        );
        assert_eq!(
            time(1_795_990_174_298_704_500),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        assert_eq!(time(999_999_500), r#""1970-01-01T00:00:01.000000Z""#);
        // Leap day and end of year.
        assert_eq!(
            time(1_709_164_800_000_000_000),
            r#""2024-02-29T00:00:00.000000Z""#
        );
        assert_eq!(
            time(1_735_689_599_999_999_000),
            r#""2024-12-31T23:59:59.999999Z""#
        );
        // Outside what RFC 3339 can write: clamped, never a panic.
        assert_eq!(
            time_at(UNIX_EPOCH - Duration::from_secs(5)),
            r#""1970-01-01T00:00:00.000000Z""#
        );
        assert_eq!(
            time_at(UNIX_EPOCH + Duration::from_secs(300_000_000_000)),
            r#""9999-12-31T23:59:59.999999Z""#
        );
    }

    #[test]
    fn duplicate_attribute_keeps_first_position_last_value() {
        let attrs = vec![
            KeyValue::new("a", 1),
            KeyValue::new("b", true),
            KeyValue::new("a", 2),
            KeyValue::new("c", Value::Array(Array::F64(vec![1.5, 2.0]))),
        ];
        let mut out = Vec::new();
        write_attributes(&mut out, &attrs);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a": 2, "b": true, "c": [1.5, 2.0]}"#
        );
    }

    #[test]
    fn resource_json_example() {
        use opentelemetry::KeyValue;
        use opentelemetry_sdk::Resource;

        let resource = Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "nemo"),
                KeyValue::new("dl.rank", 3),
            ])
            .build();
        assert_eq!(
            resource_json(&resource),
            r#"{"attributes": {"dl.rank": 3, "service.name": "nemo"}, "schema_url": ""}"#
        );
    }
}
