//! OTLP `ExportTraceServiceRequest`s written straight from the export worker's batch: lens
//! records ([`Prepared`], the span limits applied while writing) and SDK spans (`SpanData`),
//! without building `SpanData` for the records or `opentelemetry-proto`'s message structs for
//! any span.
//!
//! The resource is encoded once, when the exporter learns it; each instrumentation scope once
//! per batch; each span field by field into one reused buffer, then appended to its scope's
//! spans. The batch becomes as many requests as the collector's message limit needs (exact
//! sizes: a span is measured once written); a span too large alone is left out and counted.
//! What is written is what opentelemetry-otlp sends for the same spans (scopes in first-seen
//! order, spans in batch order, prost's field order and defaults): the tests decode both with
//! the generated types and compare the bytes.

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanLimits};

use super::protobuf::{
    bytes, fixed32, fixed64, key_value, key_values, message, message_header, message_header_len,
    uint,
};
use crate::export::message_limit::MAX_MESSAGE_BYTES;
use crate::record::to_span_data::{DirectBuild, Prepared};

/// A span of the export batch, ready to be written.
#[derive(Debug)]
pub(crate) enum ReadySpan {
    /// A lens record; its span limits and scope come from the batch's [`DirectBuild`].
    Record(Prepared),
    /// A span the SDK built (limits applied already, its own scope).
    Data(SpanData),
}

/// The export worker's batch: its spans, and how records are built (set whenever a span is a
/// record).
#[derive(Debug, Default)]
pub(crate) struct ReadyBatch {
    pub(crate) build: Option<DirectBuild>,
    pub(crate) spans: Vec<ReadySpan>,
}

impl ReadyBatch {
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }
}

/// A span exporter that also takes the export worker's batch as it is (records not turned into
/// `SpanData`).
pub(crate) trait ReadyExport: opentelemetry_sdk::trace::SpanExporter {
    fn export_ready(
        &self,
        batch: ReadyBatch,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send;
}

/// The requests of one batch.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    /// Encoded `ExportTraceServiceRequest`s, each under the message limit.
    pub(crate) bodies: Vec<Vec<u8>>,
    /// Spans too large for any request, left out.
    pub(crate) oversized: u64,
}

/// One instrumentation scope's spans in the request being written.
#[derive(Debug)]
struct ScopeSpans {
    scope: InstrumentationScope,
    /// The encoded `InstrumentationScope` message body.
    encoded: Vec<u8>,
    /// Encoded `Span` fields (tag, length, body), one after the other.
    spans: Vec<u8>,
}

/// Writes the batches of one exporter (see the module docs).
#[derive(Debug)]
pub(crate) struct TraceEncoder {
    /// The encoded `Resource` message body.
    resource: Vec<u8>,
    resource_schema_url: String,
    /// The most bytes of scopes and spans per request.
    limit: usize,
    scopes: Vec<ScopeSpans>,
    /// Bytes in `scopes`, with their fields' headers.
    pending: usize,
    /// The span being written.
    span: Vec<u8>,
}

impl Default for TraceEncoder {
    fn default() -> Self {
        Self::with_limit(MAX_MESSAGE_BYTES)
    }
}

impl TraceEncoder {
    /// An encoder whose requests take at most `max_request` bytes (resource included).
    pub(crate) fn with_limit(max_request: usize) -> Self {
        TraceEncoder {
            resource: Vec::new(),
            resource_schema_url: String::new(),
            limit: max_request,
            scopes: Vec::new(),
            pending: 0,
            span: Vec::new(),
        }
    }

    /// Encodes `resource`, once: every request carries it.
    pub(crate) fn set_resource(&mut self, resource: &Resource) {
        let mut encoded = Vec::new();
        // As opentelemetry-proto's `resource_attributes`: the resource's own iteration order.
        for (k, v) in resource.iter() {
            key_value(&mut encoded, 1, k.as_str(), v);
        }
        self.resource = encoded;
        self.resource_schema_url = resource.schema_url().unwrap_or_default().to_string();
    }

    /// What spans and scopes may take in one request: the limit less the resource and the
    /// headers around them.
    fn room(&self) -> usize {
        self.limit
            .saturating_sub(self.resource.len() + self.resource_schema_url.len() + 32)
    }

    /// Writes `batch` as requests.
    pub(crate) fn encode(&mut self, batch: ReadyBatch) -> Requests {
        let mut out = Requests::default();
        let ReadyBatch { build, spans } = batch;
        for span in spans {
            let mut written = std::mem::take(&mut self.span);
            written.clear();
            let scope = match &span {
                ReadySpan::Record(p) => {
                    let Some(build) = &build else {
                        // Never queued without its build; nothing to write it with.
                        out.oversized += 1;
                        self.span = written;
                        continue;
                    };
                    record_span(&mut written, p, build.limits());
                    build.scope()
                }
                ReadySpan::Data(data) => {
                    data_span(&mut written, data);
                    &data.instrumentation_scope
                }
            };
            let size = message_header_len(written.len()) + written.len();
            let mut index = self.scopes.iter().position(|s| &s.scope == scope);
            let scope_cost = match index {
                Some(_) => 0,
                None => scope_overhead(scope),
            };
            if size + scope_cost > self.room() {
                out.oversized += 1;
                self.span = written;
                continue;
            }
            if self.pending + size + scope_cost > self.room() && !self.scopes.is_empty() {
                out.bodies.push(self.finish_request());
                index = None;
            }
            let index = match index {
                Some(i) => i,
                None => {
                    self.pending += scope_overhead(scope);
                    self.scopes.push(ScopeSpans {
                        scope: scope.clone(),
                        encoded: encode_scope(scope),
                        spans: Vec::new(),
                    });
                    self.scopes.len() - 1
                }
            };
            let spans = &mut self.scopes[index].spans;
            message_header(spans, 2, written.len());
            spans.extend_from_slice(&written);
            self.pending += size;
            self.span = written;
        }
        if !self.scopes.is_empty() {
            out.bodies.push(self.finish_request());
        }
        out
    }

    /// The request of the spans written so far; starts the next one.
    fn finish_request(&mut self) -> Vec<u8> {
        let scope_spans_len = |s: &ScopeSpans| {
            let schema = s.scope.schema_url().unwrap_or_default().len();
            message_header_len(s.encoded.len())
                + s.encoded.len()
                + s.spans.len()
                + if schema > 0 {
                    message_header_len(schema) + schema
                } else {
                    0
                }
        };
        let schema = self.resource_schema_url.len();
        let resource_spans_len = message_header_len(self.resource.len())
            + self.resource.len()
            + self
                .scopes
                .iter()
                .map(|s| {
                    let n = scope_spans_len(s);
                    message_header_len(n) + n
                })
                .sum::<usize>()
            + if schema > 0 {
                message_header_len(schema) + schema
            } else {
                0
            };
        let mut body =
            Vec::with_capacity(message_header_len(resource_spans_len) + resource_spans_len);
        message_header(&mut body, 1, resource_spans_len);
        message_header(&mut body, 1, self.resource.len());
        body.extend_from_slice(&self.resource);
        for s in self.scopes.drain(..) {
            message_header(&mut body, 2, scope_spans_len(&s));
            message_header(&mut body, 1, s.encoded.len());
            body.extend_from_slice(&s.encoded);
            body.extend_from_slice(&s.spans);
            bytes(
                &mut body,
                3,
                s.scope.schema_url().unwrap_or_default().as_bytes(),
            );
        }
        bytes(&mut body, 3, self.resource_schema_url.as_bytes());
        self.pending = 0;
        body
    }
}

/// What a scope adds to a request: its `ScopeSpans` and `InstrumentationScope` headers and body.
fn scope_overhead(scope: &InstrumentationScope) -> usize {
    let encoded = encode_scope(scope).len();
    let schema = scope.schema_url().unwrap_or_default().len();
    encoded + 2 * message_header_len(encoded) + schema + 16
}

/// The `InstrumentationScope` message body of `scope`.
fn encode_scope(scope: &InstrumentationScope) -> Vec<u8> {
    let mut buf = Vec::new();
    bytes(&mut buf, 1, scope.name().as_bytes());
    bytes(&mut buf, 2, scope.version().unwrap_or_default().as_bytes());
    key_values(&mut buf, 3, scope.attributes());
    buf
}

/// OTLP's span flags: the W3C flags, and whether the parent (or linked) context is remote.
fn span_flags(trace_flags: u8, remote: bool) -> u32 {
    // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK.
    u32::from(trace_flags) | 0x100 | if remote { 0x200 } else { 0 }
}

fn nanos(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// The span's fields up to its name (tags 1–4).
fn ids(buf: &mut Vec<u8>, cx: &SpanContext, parent: SpanId) {
    bytes(buf, 1, &cx.trace_id().to_bytes());
    bytes(buf, 2, &cx.span_id().to_bytes());
    bytes(buf, 3, cx.trace_state().header().as_bytes());
    if parent != SpanId::INVALID {
        bytes(buf, 4, &parent.to_bytes());
    }
}

fn event(buf: &mut Vec<u8>, event: &Event, max_attributes: usize, dropped: u32) {
    message(buf, 11, |buf| {
        fixed64(buf, 1, nanos(event.timestamp));
        bytes(buf, 2, event.name.as_bytes());
        key_values(buf, 3, event.attributes.iter().take(max_attributes));
        uint(buf, 4, u64::from(dropped));
    });
}

fn link(buf: &mut Vec<u8>, cx: &SpanContext, attributes: &[opentelemetry::KeyValue], dropped: u32) {
    message(buf, 13, |buf| {
        bytes(buf, 1, &cx.trace_id().to_bytes());
        bytes(buf, 2, &cx.span_id().to_bytes());
        bytes(buf, 3, cx.trace_state().header().as_bytes());
        key_values(buf, 4, attributes);
        uint(buf, 5, u64::from(dropped));
        fixed32(buf, 6, span_flags(cx.trace_flags().to_u8(), cx.is_remote()));
    });
}

fn status(buf: &mut Vec<u8>, status: &Status) {
    message(buf, 15, |buf| {
        let code = match status {
            Status::Unset => 0,
            Status::Ok => 1,
            Status::Error { description } => {
                bytes(buf, 2, description.as_bytes());
                2
            }
        };
        uint(buf, 3, code);
    });
}

/// A lens record's `Span` body, its span limits applied as the SDK applies them (see
/// [`Prepared::into_span_data`]).
fn record_span(buf: &mut Vec<u8>, p: &Prepared, limits: &SpanLimits) {
    ids(buf, &p.span_context, p.parent_span_id);
    bytes(buf, 5, p.name.as_bytes());
    uint(buf, 6, kind(&p.kind));
    fixed64(buf, 7, nanos(p.start));
    fixed64(buf, 8, nanos(p.end));
    let max = limits.max_attributes_per_span as usize;
    key_values(buf, 9, p.attributes.iter().take(max));
    uint(buf, 10, p.attributes.len().saturating_sub(max) as u64);

    let max_events = limits.max_events_per_span as usize;
    let per_event = limits.max_attributes_per_event as usize;
    let kept = p.events.len().min(max_events);
    for e in &p.events[..kept] {
        let dropped = e.attributes.len().saturating_sub(per_event) as u32;
        event(buf, e, per_event, dropped);
    }
    let late_kept = (p.late_events as usize).min(max_events - kept);
    if late_kept > 0 {
        let empty = Event::new("", p.start, Vec::new(), 0);
        for _ in 0..late_kept {
            event(buf, &empty, 0, 0);
        }
    }
    let dropped_events = (p.events.len() - kept) + (p.late_events as usize - late_kept);
    uint(buf, 12, dropped_events as u64);

    let max_links = limits.max_links_per_span as usize;
    let per_link = limits.max_attributes_per_link as usize;
    let kept = p.links.len().min(max_links);
    for l in &p.links[..kept] {
        let n = l.attributes.len().min(per_link);
        let dropped = (l.attributes.len() - n) as u32;
        link(buf, &l.span_context, &l.attributes[..n], dropped);
    }
    let late_kept = (p.late_links as usize).min(max_links - kept);
    for _ in 0..late_kept {
        link(buf, &p.own_context, &[], 0);
    }
    let dropped_links = (p.links.len() - kept) + (p.late_links as usize - late_kept);
    uint(buf, 14, dropped_links as u64);

    status(buf, &p.status);
    fixed32(
        buf,
        16,
        span_flags(
            p.span_context.trace_flags().to_u8(),
            p.parent_span_is_remote,
        ),
    );
}

/// An SDK span's `Span` body.
fn data_span(buf: &mut Vec<u8>, d: &SpanData) {
    ids(buf, &d.span_context, d.parent_span_id);
    bytes(buf, 5, d.name.as_bytes());
    uint(buf, 6, kind(&d.span_kind));
    fixed64(buf, 7, nanos(d.start_time));
    fixed64(buf, 8, nanos(d.end_time));
    key_values(buf, 9, &d.attributes);
    uint(buf, 10, u64::from(d.dropped_attributes_count));
    for e in d.events.iter() {
        event(buf, e, usize::MAX, e.dropped_attributes_count);
    }
    uint(buf, 12, u64::from(d.events.dropped_count));
    for l in d.links.iter() {
        link(
            buf,
            &l.span_context,
            &l.attributes,
            l.dropped_attributes_count,
        );
    }
    uint(buf, 14, u64::from(d.links.dropped_count));
    status(buf, &d.status);
    fixed32(
        buf,
        16,
        span_flags(
            d.span_context.trace_flags().to_u8(),
            d.parent_span_is_remote,
        ),
    );
}

#[cfg(test)]
#[path = "trace_request_tests.rs"]
mod tests;
