//! W3C Baggage as nemo-lens passes it on: only the members OpenTelemetry's `BaggagePropagator`
//! writes back as valid W3C Baggage (<https://www.w3.org/TR/baggage/>).
//!
//! The propagator accepts more on extraction than it can write: a property that is not a token
//! (`p@x`), a value holding `\` (which it does not escape), a key that decodes to a separator
//! (`a%28` becomes `a(`, written back unescaped), or members that outgrow 8192 bytes once
//! escaped. Passed on as they are, they would make the next service drop the whole header.

use opentelemetry::Context;
use opentelemetry::baggage::{Baggage, BaggageExt};

/// The longest `baggage` header the specification allows.
const MAX_BYTES: usize = 8192;

/// `cx` with only the baggage members that are written back valid, in order, within 8192 bytes.
pub(crate) fn writable(cx: Context) -> Context {
    let baggage = cx.baggage();
    let mut total = 0;
    let mut all = true;
    let kept: Baggage = baggage
        .iter()
        .filter(|(key, (value, meta))| {
            let len = written_len(key.as_str(), value.as_str(), meta.as_str());
            let keep = len.is_some_and(|len| total + len + usize::from(total > 0) <= MAX_BYTES);
            if keep {
                total += len.unwrap_or_default() + usize::from(total > 0);
            }
            all &= keep;
            keep
        })
        .map(|(key, (value, meta))| (key.clone(), (value.clone(), meta.clone())))
        .collect();
    if all { cx } else { cx.with_baggage(kept) }
}

/// The length of the member as the propagator writes it (key and value trimmed and
/// percent-encoded: controls, space, `"`, `,`, `;`, `=` and non-ASCII), or `None` when that is
/// not valid W3C Baggage.
fn written_len(key: &str, value: &str, meta: &str) -> Option<usize> {
    let escaped = |b: u8| !(0x20..0x7f).contains(&b) || b" \",;=".contains(&b);
    let len = |s: &str| {
        s.bytes()
            .map(|b| if escaped(b) { 3 } else { 1 })
            .sum::<usize>()
    };
    let key = key.trim();
    let value = value.trim();
    let meta = meta.trim();
    let key_ok = !key.is_empty() && key.bytes().all(|b| escaped(b) || token(b));
    let value_ok = value.bytes().all(|b| escaped(b) || octet(b));
    let meta_ok = meta.is_empty() || meta.split(';').all(property);
    (key_ok && value_ok && meta_ok)
        .then(|| len(key) + 1 + len(value) + if meta.is_empty() { 0 } else { 1 + meta.len() })
}

/// `key` or `key = value` (optional white space around each part).
fn property(p: &str) -> bool {
    match p.split_once('=') {
        Some((k, v)) => {
            let k = ows(k);
            !k.is_empty() && k.bytes().all(token) && ows(v).bytes().all(octet)
        }
        None => {
            let k = ows(p);
            !k.is_empty() && k.bytes().all(token)
        }
    }
}

/// `s` without optional white space (spaces and tabs) around it.
fn ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// An RFC 7230 `tchar`.
fn token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A `baggage-octet`: printable ASCII but space, `"`, `,`, `;` and `\`.
fn octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}
