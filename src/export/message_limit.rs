//! [`MessageLimit`]: OTLP batches kept under the collector's message size limit.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::size::ApproxSize;

/// The largest request [`MessageLimit`] sends: 4 MiB, the default receive limit of gRPC
/// servers.
pub(super) const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// What a request costs beyond its spans (resource, scope, framing), kept free under the limit.
const REQUEST_OVERHEAD: usize = 64 << 10;

/// A span exporter whose requests stay under [`MAX_MESSAGE_BYTES`].
///
/// A collector refuses an OTLP request larger than its receive limit (4 MiB by default for
/// gRPC servers, the OpenTelemetry Collector's and rotel's included) as a whole: one span with a
/// huge attribute would sink every innocent span of its batch. [`MessageLimit`] wraps the OTLP
/// span exporter and, before each export,
///
/// * drops a span whose own size ([`ApproxSize`], which errs high) exceeds
///   [`MAX_MESSAGE_BYTES`], counting it as dropped (it could never be delivered);
/// * splits the rest into consecutive requests of at most [`MAX_MESSAGE_BYTES`] each.
///
/// When a request fails, the batch counts as dropped as a whole (as without splitting), so a
/// request sent before the failing one may be both delivered and counted.
pub(crate) struct MessageLimit<E> {
    inner: E,
    dropped: Arc<AtomicU64>,
    limit: usize,
}

impl<E: fmt::Debug> fmt::Debug for MessageLimit<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageLimit")
            .field("inner", &self.inner)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<E> MessageLimit<E> {
    /// Wraps `inner`; spans too large to send are added to `dropped`.
    pub(crate) fn new(inner: E, dropped: Arc<AtomicU64>) -> Self {
        MessageLimit {
            inner,
            dropped,
            limit: MAX_MESSAGE_BYTES - REQUEST_OVERHEAD,
        }
    }
}

/// Splits `batch` into requests of at most `limit` bytes; returns them and the number of spans
/// too large for any request (left out).
fn split(batch: Vec<SpanData>, limit: usize) -> (Vec<Vec<SpanData>>, u64) {
    let mut requests = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    let mut oversized = 0;
    for span in batch {
        let size = span.approx_size();
        if size > limit {
            oversized += 1;
            continue;
        }
        if bytes + size > limit && !current.is_empty() {
            requests.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(span);
    }
    if !current.is_empty() {
        requests.push(current);
    }
    (requests, oversized)
}

impl<E: SpanExporter> SpanExporter for MessageLimit<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (requests, oversized) = split(batch, self.limit);
        async move {
            for request in requests {
                // A failed request fails the batch: the batch processor counts all of it.
                self.inner.export(request).await?;
            }
            self.dropped.fetch_add(oversized, Ordering::Relaxed);
            Ok(())
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::tests::span;

    #[test]
    fn requests_stay_under_the_limit_and_oversized_spans_are_left_out() {
        let mut batch: Vec<SpanData> = (0..10).map(|_| span("s")).collect();
        let one = batch[0].approx_size();
        let mut huge = span("huge");
        huge.attributes
            .push(opentelemetry::KeyValue::new("blob", "x".repeat(one * 4)));
        batch.insert(3, huge);
        let (requests, oversized) = split(batch, one * 3);
        assert_eq!(oversized, 1);
        assert_eq!(
            requests.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
    }

    #[test]
    fn a_span_too_large_alone_is_dropped_and_counted() {
        use super::MessageLimit;
        use opentelemetry::trace::{Span, Tracer, TracerProvider};
        use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        let memory = InMemorySpanExporter::default();
        let dropped = Arc::new(AtomicU64::new(0));
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(MessageLimit::new(memory.clone(), dropped.clone()))
            .build();
        let tracer = provider.tracer("demo");
        tracer.in_span("small", |_cx| {});
        let mut huge = tracer.start("huge");
        huge.set_attribute(opentelemetry::KeyValue::new("blob", "x".repeat(5 << 20)));
        huge.end();
        assert_eq!(memory.get_finished_spans().unwrap().len(), 1); // "small" only
        assert_eq!(dropped.load(Ordering::Relaxed), 1); // "huge", counted
    }
}
