//! The protobuf wire format, written straight into a byte buffer: varints, fixed-width and
//! length-delimited fields, and the OTLP common messages (`KeyValue`, `AnyValue`).
//!
//! Fields are written as prost writes the generated `opentelemetry-proto` types: scalar fields
//! equal to their default are left out, a `oneof` value and a present sub-message are always
//! written, fields in tag order. `trace_request.rs`'s tests decode what is written here with the
//! generated types.

use opentelemetry::{Array, KeyValue, StringValue, Value};

/// Wire type of varint fields.
const VARINT: u32 = 0;
/// Wire type of 64-bit fields.
const FIXED64: u32 = 1;
/// Wire type of length-delimited fields (strings, bytes, messages).
const LEN: u32 = 2;
/// Wire type of 32-bit fields.
const FIXED32: u32 = 5;

#[inline]
pub(crate) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// How many bytes `v` takes as a varint.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per started 7 bits; 0 takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn key(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(buf, u64::from((field << 3) | wire_type));
}

/// A `uint32`/`uint64`/enum field, left out when 0.
#[inline]
pub(crate) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(buf, field, VARINT);
        varint(buf, v);
    }
}

/// A `fixed64` field, left out when 0.
#[inline]
pub(crate) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(buf, field, FIXED64);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `fixed32` field, left out when 0.
#[inline]
pub(crate) fn fixed32(buf: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        key(buf, field, FIXED32);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `string` or `bytes` field, left out when empty.
#[inline]
pub(crate) fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    if !v.is_empty() {
        always_bytes(buf, field, v);
    }
}

/// A length-delimited field written even when empty (a `oneof` value).
#[inline]
fn always_bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(buf, field, LEN);
    varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

/// A sub-message field whose body `body` writes. Its length is known only afterwards: one byte
/// is kept for it, and the body moves when the length needs more (a body of 128 bytes or more).
#[inline]
pub(crate) fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let n = varint_len(len as u64);
        let end = buf.len();
        buf.resize(end + n - 1, 0);
        buf.copy_within(at + 1..end, at + n);
        let mut prefix = [0u8; 10];
        let mut v = len as u64;
        for slot in prefix.iter_mut().take(n) {
            *slot = (v as u8 & 0x7f) | 0x80;
            v >>= 7;
        }
        prefix[n - 1] &= 0x7f;
        buf[at..at + n].copy_from_slice(&prefix[..n]);
    }
}

/// The header of a length-delimited field of `len` bytes (the body follows).
#[inline]
pub(crate) fn message_header(buf: &mut Vec<u8>, field: u32, len: usize) {
    key(buf, field, LEN);
    varint(buf, len as u64);
}

/// How many bytes the header of a length-delimited field of `len` bytes takes (fields below 16).
#[inline]
pub(crate) fn message_header_len(len: usize) -> usize {
    1 + varint_len(len as u64)
}

/// `KeyValue` messages (repeated field `field`).
#[inline]
pub(crate) fn key_values<'a>(
    buf: &mut Vec<u8>,
    field: u32,
    kvs: impl IntoIterator<Item = &'a KeyValue>,
) {
    for kv in kvs {
        key_value(buf, field, kv.key.as_str(), &kv.value);
    }
}

/// A `KeyValue` message (field `field`): the key, then the value as an `AnyValue`.
#[inline]
pub(crate) fn key_value(buf: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    message(buf, field, |buf| {
        bytes(buf, 1, key.as_bytes());
        message(buf, 2, |buf| any_value(buf, value));
    });
}

/// The fields of an `AnyValue` holding `value`.
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => always_bytes(buf, 1, s.as_str().as_bytes()),
        Value::Bool(b) => {
            key(buf, 2, VARINT);
            varint(buf, u64::from(*b));
        }
        Value::I64(i) => {
            key(buf, 3, VARINT);
            varint(buf, *i as u64);
        }
        Value::F64(f) => {
            key(buf, 4, FIXED64);
            buf.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Array(array) => message(buf, 5, |buf| array_values(buf, array)),
        // A value kind newer than this writer: an empty `AnyValue`.
        #[allow(unreachable_patterns)]
        _ => {}
    }
}

/// The `values` of an `ArrayValue`, each an `AnyValue`.
fn array_values(buf: &mut Vec<u8>, array: &Array) {
    fn each<T>(buf: &mut Vec<u8>, items: &[T], write: impl Fn(&mut Vec<u8>, &T)) {
        for item in items {
            message(buf, 1, |buf| write(buf, item));
        }
    }
    match array {
        Array::Bool(v) => each(buf, v, |buf, b| any_value(buf, &Value::Bool(*b))),
        Array::I64(v) => each(buf, v, |buf, i| any_value(buf, &Value::I64(*i))),
        Array::F64(v) => each(buf, v, |buf, f| any_value(buf, &Value::F64(*f))),
        Array::String(v) => each(buf, v, |buf, s: &StringValue| {
            always_bytes(buf, 1, s.as_str().as_bytes())
        }),
        #[allow(unreachable_patterns)]
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn a_long_message_body_moves_behind_its_length() {
        for len in [0usize, 127, 128, 300, 20_000] {
            let mut buf = vec![0xAA];
            message(&mut buf, 3, |buf| buf.extend(std::iter::repeat_n(7u8, len)));
            let mut expected = vec![0xAA];
            message_header(&mut expected, 3, len);
            expected.extend(std::iter::repeat_n(7u8, len));
            assert_eq!(buf, expected, "{len}");
            assert_eq!(message_header_len(len), expected.len() - 1 - len);
        }
    }
}
