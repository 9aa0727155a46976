//! The approximate size of a span, a log record or a key-value in bytes: what a queue's byte
//! budget reserves for an item and what the OTLP message limit counts.

use opentelemetry::logs::AnyValue;
use opentelemetry::trace::Status;
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::logs::SdkLogRecord;
use opentelemetry_sdk::trace::SpanData;

/// What every key-value and every event costs beyond its text (pointers, tags, lengths).
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// An item's approximate size in bytes: its text and a fixed cost per entry. It errs high, and
/// stays the same while the item waits (the budget gives back what it took).
pub(crate) trait ApproxSize {
    /// The approximate size, in bytes.
    fn approx_size(&self) -> usize;
}

impl ApproxSize for String {
    fn approx_size(&self) -> usize {
        self.len()
    }
}

fn value_size(v: &Value) -> usize {
    match v {
        Value::String(s) => s.as_str().len(),
        Value::Array(a) => match a {
            opentelemetry::Array::String(v) => v.iter().map(|s| s.as_str().len() + 8).sum(),
            opentelemetry::Array::Bool(v) => v.len(),
            opentelemetry::Array::I64(v) => v.len() * 8,
            opentelemetry::Array::F64(v) => v.len() * 8,
            _ => 64,
        },
        _ => 8,
    }
}

pub(crate) fn kv_size(kv: &KeyValue) -> usize {
    ENTRY_OVERHEAD + kv.key.as_str().len() + value_size(&kv.value)
}

fn any_size(v: &AnyValue) -> usize {
    match v {
        AnyValue::String(s) => s.as_str().len(),
        AnyValue::Bytes(b) => b.len(),
        AnyValue::ListAny(l) => l.iter().map(|v| ENTRY_OVERHEAD + any_size(v)).sum(),
        AnyValue::Map(m) => m
            .iter()
            .map(|(k, v)| ENTRY_OVERHEAD + k.as_str().len() + any_size(v))
            .sum(),
        _ => 8,
    }
}

fn scope_size(s: &InstrumentationScope) -> usize {
    s.name().len()
        + s.version().map_or(0, str::len)
        + s.schema_url().map_or(0, str::len)
        + s.attributes().map(kv_size).sum::<usize>()
}

impl ApproxSize for SpanData {
    fn approx_size(&self) -> usize {
        let status = match &self.status {
            Status::Error { description } => description.len(),
            _ => 0,
        };
        std::mem::size_of::<SpanData>()
            + self.name.len()
            + status
            + self.attributes.iter().map(kv_size).sum::<usize>()
            + self
                .events
                .iter()
                .map(|e| {
                    ENTRY_OVERHEAD + e.name.len() + e.attributes.iter().map(kv_size).sum::<usize>()
                })
                .sum::<usize>()
            + self
                .links
                .iter()
                .map(|l| 64 + l.attributes.iter().map(kv_size).sum::<usize>())
                .sum::<usize>()
            + self.span_context.trace_state().header().len()
    }
}

impl ApproxSize for SdkLogRecord {
    fn approx_size(&self) -> usize {
        std::mem::size_of::<SdkLogRecord>()
            + self.body().map_or(0, any_size)
            + self.event_name().map_or(0, str::len)
            + self.target().map_or(0, |t| t.len())
            + self
                .attributes_iter()
                .map(|(k, v)| ENTRY_OVERHEAD + k.as_str().len() + any_size(v))
                .sum::<usize>()
    }
}

impl ApproxSize for (SdkLogRecord, InstrumentationScope) {
    fn approx_size(&self) -> usize {
        self.0.approx_size() + scope_size(&self.1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn span(name: &'static str) -> SpanData {
        use opentelemetry::trace::{
            SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState,
        };
        let now = std::time::SystemTime::now();
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(1),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: name.into(),
            start_time: now,
            end_time: now,
            attributes: vec![KeyValue::new("step", 1)],
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Default::default(),
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn a_span_costs_its_text() {
        let mut span = span("step");
        let small = span.approx_size();
        span.attributes
            .push(KeyValue::new("blob", "x".repeat(1 << 20)));
        assert!(span.approx_size() >= small + (1 << 20));
    }
}
