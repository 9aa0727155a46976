//! Field recording: how the typed values of `tracing` fields become OpenTelemetry attributes,
//! with redaction and the value length limit applied.
//!
//! Both halves of the crate that read `tracing` fields use it: the span layer ([`crate::layer`]),
//! for span attributes and span events, and the log bridge ([`crate::layer::logs`]), for the
//! redaction of log attributes. It only *converts*: where the values go (a span's record, an event)
//! is the caller's business, and nothing here takes a lock, so a field whose `Display` or `Debug`
//! panics unwinds through plain user code (see `src/record/`).
//!
//! | `tracing` value | attribute |
//! |---|---|
//! | `i64`, `bool`, `f64` | that type |
//! | `u64`, `i128`, `u128` | `i64` when it fits, else its decimal string |
//! | `&str`, `?debug`, `%display`, `dyn Error` | string, cut to the length limit (`OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT`); under a [redact key](crate::TelemetryBuilder::DEFAULT_REDACT_KEYS) (or a key given to `TelemetryBuilder::redact_keys`), `[REDACTED]` cut to that limit, as Python's SDK does |
//!
//! An `ERROR` event becomes an `exception` span event with the attributes of Python's
//! `record_exception` first (see [`crate::semconv::EXCEPTION_TYPE`]).
//!
//! The values themselves (attributes, reserved settings, events, the text rules) are the
//! record's types, in `crate::record::attributes`.

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use opentelemetry::trace::{Event as OtelEvent, SpanKind, Status};
use opentelemetry::{Key, KeyValue, Value};
use tracing_core::field::{Field, Visit};
use tracing_core::{Event, Level};

use crate::rank::groups::GROUP_FIELD_PREFIX;
use crate::record::attributes::{
    EventValues, Reserved, SpanAttributes, TextRules, exception_attributes, truncate_chars,
};
use crate::record::stacktrace::{Stacktrace, UserFrames};
use crate::semconv;

/// Where the typed values of a span's or an event's fields go. [`Fields`] turns `tracing`'s
/// typed callbacks into these two calls, so both kinds of record share one conversion.
trait FieldSink {
    /// A typed (non-text) value.
    fn value(&mut self, field: &Field, value: Value);
    /// A text value (`&str`, `Debug`, `Display`, `Error`), before redaction.
    fn text(&mut self, field: &Field, text: String);
    /// A value recorded as a `dyn Error`: its `Display` text, unless the sink wants more.
    fn error(&mut self, field: &Field, error: &(dyn std::error::Error + 'static)) {
        self.text(field, error.to_string());
    }
}

/// Initial capacity of the text of a `Debug`-recorded value (an event's message, `?field`).
const DEBUG_TEXT_CAPACITY: usize = 48;

/// The `Visit` adapter over a [`FieldSink`].
struct Fields<'a, T>(&'a mut T);

fn int_value<T: TryInto<i64> + ToString + Copy>(v: T) -> Value {
    v.try_into()
        .map_or_else(|_| Value::from(v.to_string()), Value::I64)
}

impl<T: FieldSink> Visit for Fields<'_, T> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.value(field, Value::F64(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.value(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.value(field, int_value(value));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.0.value(field, int_value(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.0.value(field, int_value(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.value(field, Value::Bool(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.text(field, value.to_string());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.error(field, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Messages and `?`/`%` values are mostly short: one allocation of a small buffer up
        // front instead of `format!`'s growth from an empty string.
        let mut text = String::with_capacity(DEBUG_TEXT_CAPACITY);
        let _ = fmt::Write::write_fmt(&mut text, format_args!("{value:?}"));
        self.0.text(field, text);
    }
}

/// Reads a span's fields (at creation or from `span.record`) into its attributes and the
/// reserved settings.
pub(crate) struct SpanFields<'a> {
    attributes: &'a mut SpanAttributes,
    reserved: Reserved,
    rules: &'a TextRules,
}

impl<'a> SpanFields<'a> {
    /// Reads the fields of a new span into `attributes` (`Empty` ones, such as a group field,
    /// are not visited); returns the reserved settings.
    #[inline]
    pub(crate) fn read_new_span(
        attrs: &tracing_core::span::Attributes<'_>,
        attributes: &'a mut SpanAttributes,
        rules: &'a TextRules,
    ) -> Reserved {
        Self::read(attributes, rules, |visit| attrs.record(visit))
    }

    /// Reads the values of a `span.record` call into `attributes`; returns the reserved
    /// settings.
    pub(crate) fn read_record(
        values: &tracing_core::span::Record<'_>,
        attributes: &'a mut SpanAttributes,
        rules: &'a TextRules,
    ) -> Reserved {
        Self::read(attributes, rules, |visit| values.record(visit))
    }

    /// Runs `record` (a `tracing` value set's `record`) over these fields.
    #[inline]
    fn read(
        attributes: &'a mut SpanAttributes,
        rules: &'a TextRules,
        record: impl FnOnce(&mut dyn Visit),
    ) -> Reserved {
        let mut fields = SpanFields {
            attributes,
            reserved: Reserved::default(),
            rules,
        };
        record(&mut Fields(&mut fields));
        fields.reserved
    }

    #[cold]
    fn reserved(&mut self, name: &'static str, value: Value) {
        match name {
            "otel.name" => self.reserved.name = Some(value.to_string()),
            "otel.kind" => {
                self.reserved.kind = match value.as_str().to_ascii_lowercase().as_str() {
                    "server" => Some(SpanKind::Server),
                    "client" => Some(SpanKind::Client),
                    "producer" => Some(SpanKind::Producer),
                    "consumer" => Some(SpanKind::Consumer),
                    "internal" => Some(SpanKind::Internal),
                    _ => None,
                }
            }
            "otel.status_code" => {
                self.reserved.status_code = match value.as_str().to_ascii_lowercase().as_str() {
                    "ok" => Some(true),
                    "error" => Some(false),
                    _ => None,
                }
            }
            "otel.status_description" => self.reserved.status_description = Some(value.to_string()),
            _ if name.starts_with(GROUP_FIELD_PREFIX) => {}
            _ => self
                .attributes
                .push(KeyValue::new(Key::from_static_str(name), value)),
        }
    }
}

impl FieldSink for SpanFields<'_> {
    #[inline]
    fn value(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name.starts_with("otel.") || name.starts_with(GROUP_FIELD_PREFIX) {
            self.reserved(name, value);
            return;
        }
        self.attributes
            .push(KeyValue::new(Key::from_static_str(name), value));
    }

    fn text(&mut self, field: &Field, text: String) {
        let value = self.rules.apply(field.name(), text);
        self.value(field, value);
    }
}

/// Collects an event: its message, fields and error text.
struct EventFields<'a> {
    message: Option<String>,
    /// The text of the `error` field, or of a field recorded as a `dyn Error`.
    error: Option<String>,
    /// The type name the error's `Debug` text starts with, if it has that shape.
    error_type: Option<String>,
    /// An explicit `exception.type` field (`ERROR` events only).
    exception_type: Option<String>,
    /// An `ERROR` event: `exception.type` is read as the exception's type.
    is_error: bool,
    attributes: Vec<KeyValue>,
    rules: &'a TextRules,
}

impl FieldSink for EventFields<'_> {
    fn value(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name.starts_with(GROUP_FIELD_PREFIX) || name.starts_with("log.") {
            return;
        }
        self.attributes
            .push(KeyValue::new(Key::from_static_str(name), value));
    }

    fn text(&mut self, field: &Field, text: String) {
        match field.name() {
            "message" => self.message = Some(text),
            "error" => {
                if self.is_error && self.error_type.is_none() {
                    self.error_type = debug_type_name(&text).map(str::to_string);
                }
                self.error = Some(text.clone());
                self.value(field, Value::from(truncate_chars(text, self.rules.limit)));
            }
            semconv::EXCEPTION_TYPE if self.is_error => {
                self.exception_type = Some(truncate_chars(text, self.rules.limit));
            }
            name => {
                let value = self.rules.apply(name, text);
                self.value(field, value);
            }
        }
    }

    fn error(&mut self, field: &Field, error: &(dyn std::error::Error + 'static)) {
        if self.is_error && self.error_type.is_none() {
            self.error_type = debug_type_name(&format!("{error:?}")).map(str::to_string);
        }
        if field.name() != "error" {
            self.error.get_or_insert_with(|| error.to_string());
        }
        self.text(field, error.to_string());
    }
}

/// The type name a `Debug` text starts with, when the text has the shape of a `Debug` value:
/// `NotFound`, `Os { code: 2, .. }` → `Os`, `ConfigError("..")` → `ConfigError`. A sentence
/// (the `Display` text `#[instrument(err)]` records) has no such name.
fn debug_type_name(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    (name.starts_with(|c: char| c.is_ascii_uppercase())
        && (rest.is_empty() || rest.starts_with('(') || rest.starts_with(" {")))
    .then_some(name)
}

impl EventValues {
    /// Reads `event`: its message names the span event (else the callsite name); an `ERROR`
    /// event becomes an `exception` event and an `ERROR` status.
    ///
    /// The `exception` event carries Python's `record_exception` attributes, then the event's
    /// other fields: `exception.type` (an `exception.type` field, else the type name the
    /// error's `Debug` text starts with, else `Error`), `exception.message` (the message, else
    /// the error's text), `exception.stacktrace` (only with `backtraces`: the stack is captured
    /// here and resolved when the SDK span is built) and `exception.escaped = "False"` (the
    /// span goes on). The message is not repeated as a `message` attribute, nor the error's
    /// text as an `error` attribute when it is the exception's message.
    pub(crate) fn of(event: &Event<'_>, rules: &TextRules, backtraces: bool) -> Self {
        // One allocation for the attributes: every field but the message becomes one.
        let meta = event.metadata();
        let fields = meta.fields();
        let is_error = *meta.level() == Level::ERROR;
        let mut v = EventFields {
            message: None,
            error: None,
            error_type: None,
            exception_type: None,
            is_error,
            rules,
            attributes: Vec::with_capacity(
                fields.len() - usize::from(fields.field("message").is_some()),
            ),
        };
        event.record(&mut Fields(&mut v));
        let now = SystemTime::now();
        if is_error {
            let limit = rules.limit;
            let kind = v
                .exception_type
                .or(v.error_type)
                .unwrap_or_else(|| "Error".to_string());
            let mut user = v.attributes;
            let description = match v.message {
                Some(message) => message,
                None => {
                    // The error is the exception: its text is `exception.message`.
                    user.retain(|kv| kv.key.as_str() != "error");
                    v.error.unwrap_or_default()
                }
            };
            let stacktrace = if backtraces {
                let from = match (meta.file(), meta.line()) {
                    (Some(file), Some(line)) => UserFrames::Callsite(file, line),
                    _ => UserFrames::All,
                };
                Stacktrace::capture(true, from, limit)
            } else {
                None
            };
            let mut attributes = exception_attributes(
                kind,
                truncate_chars(description.clone(), limit),
                false,
                user.len(),
            );
            attributes.extend(user);
            EventValues {
                event: OtelEvent::new(semconv::EXCEPTION_EVENT, now, attributes, 0),
                status: Some(Status::error(description)),
                stacktrace,
            }
        } else {
            let name: Cow<'static, str> = match v.message {
                Some(m) => Cow::Owned(m),
                None => Cow::Borrowed(meta.name()),
            };
            EventValues {
                event: OtelEvent::new(name, now, v.attributes, 0),
                status: None,
                stacktrace: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_type_names() {
        assert_eq!(debug_type_name("NotFound"), Some("NotFound"));
        assert_eq!(
            debug_type_name("Os { code: 2, kind: NotFound }"),
            Some("Os")
        );
        assert_eq!(debug_type_name("ConfigError(\"bad\")"), Some("ConfigError"));
        assert_eq!(debug_type_name("nan loss"), None);
        assert_eq!(debug_type_name("Connection refused (os error 111)"), None);
        assert_eq!(debug_type_name("\"text\""), None);
        assert_eq!(debug_type_name(""), None);
    }
}
