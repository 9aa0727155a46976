//! Field recording: how the typed values of `tracing` fields become OpenTelemetry attributes,
//! with redaction and the value length limit applied.
//!
//! Both halves of the crate that read `tracing` fields use it: the span layer
//! ([`crate::layer`]), for span attributes and span events, and the log bridge
//! ([`crate::logs`]), for the redaction of log attributes. It only *converts*: where the values
//! go (a span's record, an event) is the caller's business, and nothing here takes a lock, so a
//! field whose `Display` or `Debug` panics unwinds through plain user code (see
//! `src/recording.rs`).
//!
//! | `tracing` value | attribute |
//! |---|---|
//! | `i64`, `bool`, `f64` | that type |
//! | `u64`, `i128`, `u128` | `i64` when it fits, else its decimal string |
//! | `&str`, `?debug`, `%display`, `dyn Error` | string, cut to the [length limit](value_length_limit), or [`REDACTED`] under a [redact key](DEFAULT_REDACT_KEYS) |
//!
//! ```
//! use nemo_lens::{DEFAULT_REDACT_KEYS, REDACTED};
//! assert!(DEFAULT_REDACT_KEYS.contains(&"password"));
//! assert_eq!(REDACTED, "[REDACTED]");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use opentelemetry::trace::{Event as OtelEvent, SpanKind, Status};
use opentelemetry::{Key, KeyValue, Value};
use tracing_core::field::{Field, Visit};
use tracing_core::{Event, Level};

use crate::groups::GROUP_FIELD_PREFIX;
use crate::semconv;

/// Keys whose string values are replaced with `[REDACTED]` (exact, case-sensitive match), as the
/// Python `DEFAULT_REDACT_KEYS`.
pub const DEFAULT_REDACT_KEYS: [&str; 8] = [
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
pub const REDACTED: &str = "[REDACTED]";

#[inline]
pub(crate) fn is_redacted(key: &str) -> bool {
    DEFAULT_REDACT_KEYS.contains(&key)
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
    status_code: Option<bool>,
    status_description: Option<String>,
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
/// Where the typed values of a span's or an event's fields go. [`Fields`] turns `tracing`'s
/// typed callbacks into these two calls, so both kinds of record share one conversion.
trait FieldSink {
    /// A typed (non-text) value.
    fn value(&mut self, field: &Field, value: Value);
    /// A text value (`&str`, `Debug`, `Display`, `Error`), before redaction.
    fn text(&mut self, field: &Field, text: String);
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
        self.0.text(field, value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Messages and `?`/`%` values are mostly short: one allocation of a small buffer up
        // front instead of `format!`'s growth from an empty string.
        let mut text = String::with_capacity(DEBUG_TEXT_CAPACITY);
        let _ = fmt::Write::write_fmt(&mut text, format_args!("{value:?}"));
        self.0.text(field, text);
    }
}

/// A text value, cut to the length limit, or `[REDACTED]` under a redact key.
fn redacted(field: &Field, text: String, limit: Option<usize>) -> Value {
    if is_redacted(field.name()) {
        Value::from(REDACTED)
    } else {
        Value::from(truncate_chars(text, limit))
    }
}

/// Reads a span's fields (at creation or from `span.record`) into its attributes and the
/// reserved settings.
pub(crate) struct SpanFields<'a> {
    attributes: &'a mut SpanAttributes,
    reserved: Reserved,
    limit: Option<usize>,
}

impl<'a> SpanFields<'a> {
    /// Reads the fields of a new span into `attributes` (`Empty` ones, such as a group field,
    /// are not visited); returns the reserved settings.
    #[inline]
    pub(crate) fn read_new_span(
        attrs: &tracing_core::span::Attributes<'_>,
        attributes: &'a mut SpanAttributes,
        limit: Option<usize>,
    ) -> Reserved {
        let mut fields = SpanFields {
            attributes,
            reserved: Reserved::default(),
            limit,
        };
        attrs.record(&mut Fields(&mut fields));
        fields.reserved
    }

    /// Reads the values of a `span.record` call into `attributes`; returns the reserved
    /// settings.
    pub(crate) fn read_record(
        values: &tracing_core::span::Record<'_>,
        attributes: &'a mut SpanAttributes,
        limit: Option<usize>,
    ) -> Reserved {
        let mut fields = SpanFields {
            attributes,
            reserved: Reserved::default(),
            limit,
        };
        values.record(&mut Fields(&mut fields));
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
        self.value(field, redacted(field, text, self.limit));
    }
}

/// Collects an event: its message, fields and error text.
#[derive(Default)]
struct EventFields {
    message: Option<String>,
    error: Option<String>,
    attributes: Vec<KeyValue>,
    limit: Option<usize>,
}

impl FieldSink for EventFields {
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
                self.error = Some(text.clone());
                self.value(field, Value::from(truncate_chars(text, self.limit)));
            }
            _ => self.value(field, redacted(field, text, self.limit)),
        }
    }
}

/// A span event read from a `tracing` event, and the status it sets.
pub(crate) struct EventValues {
    pub(crate) event: OtelEvent,
    /// `ERROR` events set the span's status to `ERROR` with their message.
    pub(crate) status: Option<Status>,
}

impl EventValues {
    /// Reads `event`: its message names the span event (else the callsite name); an `ERROR`
    /// event becomes an `exception` event and an `ERROR` status.
    pub(crate) fn of(event: &Event<'_>, limit: Option<usize>) -> Self {
        // One allocation for the attributes: every field but the message becomes one.
        let meta = event.metadata();
        let fields = meta.fields();
        let mut v = EventFields {
            limit,
            attributes: Vec::with_capacity(
                fields.len() - usize::from(fields.field("message").is_some()),
            ),
            ..EventFields::default()
        };
        event.record(&mut Fields(&mut v));
        let now = SystemTime::now();
        if *meta.level() == Level::ERROR {
            let description = v
                .message
                .clone()
                .or_else(|| v.error.clone())
                .unwrap_or_default();
            let mut attributes = v.attributes;
            attributes.push(KeyValue::new(
                semconv::EXCEPTION_MESSAGE,
                truncate_chars(description.clone(), limit),
            ));
            if let Some(message) = v.message {
                attributes.push(KeyValue::new("message", truncate_chars(message, limit)));
            }
            EventValues {
                event: OtelEvent::new(semconv::EXCEPTION_EVENT, now, attributes, 0),
                status: Some(Status::error(description)),
            }
        } else {
            let name: Cow<'static, str> = match v.message {
                Some(m) => Cow::Owned(m),
                None => Cow::Borrowed(meta.name()),
            };
            EventValues {
                event: OtelEvent::new(name, now, v.attributes, 0),
                status: None,
            }
        }
    }
}
