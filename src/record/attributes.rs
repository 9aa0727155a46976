//! The values a span's record holds: its attributes, the reserved settings of its `otel.*`
//! fields, its events, and the rules its text values follow (redaction, then the value length
//! limit). `crate::layer::fields` reads `tracing`'s typed values into these.

use std::borrow::Cow;
use std::sync::Arc;

use opentelemetry::trace::{Event as OtelEvent, SpanKind, Status};
use opentelemetry::{KeyValue, Value};

use crate::record::stacktrace::Stacktrace;
use crate::semconv;

/// Keys whose string values are replaced with `[REDACTED]` (exact, case-sensitive match), as the
/// Python `DEFAULT_REDACT_KEYS`.
pub(crate) const DEFAULT_REDACT_KEYS: [&str; 8] = [
    "prompt",
    "input_text",
    "output_text",
    "text",
    "password",
    "token",
    "secret",
    "key",
];

/// The replacement for redacted values.
pub(crate) const REDACTED: &str = "[REDACTED]";

/// The keys whose string values are redacted: Python's default set, or the user's own
/// ([`TelemetryBuilder::redact_keys`](crate::TelemetryBuilder::redact_keys)); exact,
/// case-sensitive matches, as Python's `key in redact_keys`.
///
/// The default set is `None`: cloning it (one per log record) and checking a key cost what a
/// constant array of eight costs. A user set is a hashed set, so a check costs one hash of the
/// key whatever the set's size, shared (`Arc`), never copied per span or record.
#[derive(Clone, Debug, Default)]
pub(crate) struct RedactKeys(Option<Arc<KeySet>>);

/// A user's redact keys.
type KeySet = std::collections::HashSet<Box<str>, foldhash::fast::RandomState>;

impl RedactKeys {
    /// The user's own set, replacing the default.
    pub(crate) fn custom<I, K>(keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        RedactKeys(Some(Arc::new(
            keys.into_iter()
                .map(|k| k.into().into_boxed_str())
                .collect(),
        )))
    }

    /// Whether string values under `key` are redacted.
    #[inline]
    pub(crate) fn contains(&self, key: &str) -> bool {
        match &self.0 {
            None => DEFAULT_REDACT_KEYS.contains(&key),
            Some(keys) => keys.contains(key),
        }
    }
}

/// How string values are written: redacted under a [redact key](RedactKeys), then cut to the
/// value length limit (in that order, as Python's SDK: with a limit of 8 a redacted value
/// reads `[REDACTE` (its first 8 characters)).
#[derive(Clone, Debug, Default)]
pub(crate) struct TextRules {
    /// Longest string value, in characters (`OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub(crate) limit: Option<usize>,
    pub(crate) redact: RedactKeys,
}

impl TextRules {
    /// The text written for a redacted value: [`REDACTED`] cut to the limit (no allocation
    /// unless the limit is below its length).
    #[inline]
    pub(crate) fn redacted(&self) -> Cow<'static, str> {
        match self.limit {
            Some(limit) if limit < REDACTED.len() => Cow::Borrowed(&REDACTED[..limit]),
            _ => Cow::Borrowed(REDACTED),
        }
    }

    /// `text` under `key`: redacted, or cut to the limit.
    #[inline]
    pub(crate) fn apply(&self, key: &str, text: String) -> Value {
        if self.redact.contains(key) {
            Value::String(self.redacted().into())
        } else {
            Value::from(truncate_chars(text, self.limit))
        }
    }
}

/// Cuts `text` to at most `limit` characters, on a character boundary.
#[inline]
pub(crate) fn truncate_chars(mut text: String, limit: Option<usize>) -> String {
    if let Some(limit) = limit {
        // Bytes bound characters from above: most values need no scan.
        if text.len() > limit
            && let Some((cut, _)) = text.char_indices().nth(limit)
        {
            text.truncate(cut);
        }
    }
    text
}

/// A span's attributes: the first few inline (no allocation for a span with up to four fields).
pub(crate) type SpanAttributes = smallvec::SmallVec<[KeyValue; 4]>;

/// Span-level settings carried by reserved fields (`otel.name`, `otel.kind`,
/// `otel.status_code`, `otel.status_description`).
#[derive(Default)]
pub(crate) struct Reserved {
    pub(crate) name: Option<String>,
    pub(crate) kind: Option<SpanKind>,
    pub(crate) status_code: Option<bool>,
    pub(crate) status_description: Option<String>,
}

impl Reserved {
    /// Whether any reserved field was recorded.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.name.is_some()
            || self.kind.is_some()
            || self.status_code.is_some()
            || self.status_description.is_some()
    }

    /// The status the reserved fields set, if any.
    pub(crate) fn status(&mut self) -> Option<Status> {
        match (self.status_code, self.status_description.take()) {
            (Some(true), _) => Some(Status::Ok),
            (Some(false), d) | (None, d @ Some(_)) => Some(Status::error(d.unwrap_or_default())),
            (None, None) => None,
        }
    }
}

/// The attributes of an `exception` event, in the order of Python's `record_exception`
/// (`exception.type`, `exception.message`, `exception.escaped`), before any other; a
/// backtrace becomes `exception.stacktrace` after the message when the SDK span is built
/// ([`PendingStacktraces`](crate::record::stacktrace::PendingStacktraces)).
pub(crate) fn exception_attributes(
    kind: String,
    message: String,
    escaped: bool,
    capacity: usize,
) -> Vec<KeyValue> {
    // Room for the stack trace inserted later.
    let mut attributes = Vec::with_capacity(capacity + 4);
    attributes.push(KeyValue::new(semconv::EXCEPTION_TYPE, kind));
    attributes.push(KeyValue::new(semconv::EXCEPTION_MESSAGE, message));
    // A string, as Python writes it (`str(escaped)`).
    attributes.push(KeyValue::new(
        semconv::EXCEPTION_ESCAPED,
        if escaped { "True" } else { "False" },
    ));
    attributes
}

/// A span event read from a `tracing` event, and the status it sets.
pub(crate) struct EventValues {
    pub(crate) event: OtelEvent,
    /// `ERROR` events set the span's status to `ERROR` with their message.
    pub(crate) status: Option<Status>,
    /// The backtrace of an `ERROR` event, captured when the application asked for it.
    pub(crate) stacktrace: Option<Stacktrace>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_then_limit() {
        let rules = |limit| TextRules {
            limit,
            redact: RedactKeys::default(),
        };
        assert_eq!(
            rules(Some(8)).apply("token", "abc".into()),
            Value::from("[REDACTE")
        );
        assert_eq!(
            rules(Some(10)).apply("token", "abc".into()),
            Value::from(REDACTED)
        );
        assert_eq!(
            rules(None).apply("token", "abc".into()),
            Value::from(REDACTED)
        );
        assert_eq!(
            rules(Some(2)).apply("loss", "abc".into()),
            Value::from("ab")
        );
        let custom = TextRules {
            limit: None,
            redact: RedactKeys::custom(["api_key"]),
        };
        assert_eq!(custom.apply("api_key", "x".into()), Value::from(REDACTED));
        assert_eq!(custom.apply("token", "x".into()), Value::from("x"));
    }

    #[test]
    fn custom_keys_match_exactly_whatever_the_set_size() {
        let many = RedactKeys::custom((0..10_000).map(|i| format!("key_{i}")));
        assert!(many.contains("key_0") && many.contains("key_9999"));
        // Exact and case-sensitive, as Python's `key in redact_keys`.
        for other in ["key_10000", "KEY_0", "key_0 ", "key", ""] {
            assert!(!many.contains(other), "{other:?}");
        }
        assert!(!RedactKeys::custom(Vec::<String>::new()).contains("token"));
        let default = RedactKeys::default();
        assert!(DEFAULT_REDACT_KEYS.iter().all(|k| default.contains(k)));
        assert!(!default.contains("Token") && !default.contains("api_key"));
    }
}
