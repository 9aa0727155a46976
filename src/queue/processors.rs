//! The span and log processors lens puts before an exporter: batched (counted drops) or
//! synchronous, and every export run with OpenTelemetry telemetry suppressed.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogExporter, SdkLoggerProvider};
use opentelemetry_sdk::trace::{SimpleSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};

use crate::error::Result;
use crate::export::DeadlineExporter;
use crate::queue::config::QueueConfig;
use crate::queue::log_processor::LensBatchLogProcessor;
use crate::queue::sdk_span_closer::SdkSpanCloser;
use crate::queue::span_processor::{LensBatchProcessor, SpanQueue};

/// A span processor behind a box (the SDK builder wants a concrete type).
pub(crate) struct BoxedProcessor(pub(crate) Box<dyn SpanProcessor>);

impl fmt::Debug for BoxedProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl SpanProcessor for BoxedProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx)
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn shutdown(&self) -> OTelSdkResult {
        self.0.shutdown()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}

/// A logger provider for `exporter`: nemo-lens's batch processor (`OTEL_BLRP_*`, counted
/// drops), or synchronous.
pub(crate) fn log_provider<E: LogExporter + 'static>(
    exporter: E,
    resource: Resource,
    settings: &ExportSettings,
) -> Result<SdkLoggerProvider> {
    let builder = SdkLoggerProvider::builder().with_resource(resource);
    Ok(if settings.synchronous {
        builder.with_simple_exporter(exporter).build()
    } else {
        builder
            .with_log_processor(LensBatchLogProcessor::new(
                DeadlineExporter::new("logs", exporter),
                settings.batch,
                settings.dropped.clone(),
            )?)
            .build()
    })
}

/// An exporter that runs with OpenTelemetry telemetry suppressed, so that what it logs through
/// `tracing` is not recorded by the lens layer (which would re-enter the exporter's lock in the
/// synchronous processor).
#[derive(Debug)]
struct Suppressed<E>(E);

impl<E: SpanExporter> SpanExporter for Suppressed<E> {
    fn export(
        &self,
        mut batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        batch.iter_mut().for_each(crate::ids::mark_random_root);
        let future = {
            let _guard = Context::enter_telemetry_suppressed_scope();
            self.0.export(batch)
        };
        SuppressedFuture(Box::pin(future))
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.shutdown_with_timeout(timeout)
    }
    fn force_flush(&self) -> OTelSdkResult {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}

/// Polls the wrapped export future with telemetry suppressed.
struct SuppressedFuture<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for SuppressedFuture<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.as_mut().poll(cx)
    }
}

/// How the exporter's processor is built.
pub(crate) struct ExportSettings {
    pub(crate) synchronous: bool,
    pub(crate) batch: QueueConfig,
    pub(crate) dropped: Arc<AtomicU64>,
    /// The record queue of the span batch processor, once built (the lens layer feeds it).
    pub(crate) span_queue: std::sync::OnceLock<SpanQueue>,
}

/// The processor of an exporter whose export may block (the application's, the console's):
/// its exports run on a helper thread ([`DeadlineExporter`]) so the export timeout holds.
pub(crate) fn exporter_processor<E: SpanExporter + 'static>(
    exporter: E,
    settings: &ExportSettings,
) -> Result<BoxedProcessor> {
    if settings.synchronous {
        return Ok(BoxedProcessor(Box::new(SimpleSpanProcessor::new(
            Suppressed(exporter),
        ))));
    }
    batch_processor(DeadlineExporter::new("spans", exporter), settings)
}

/// The processor of an exporter whose export future yields while it waits and is bounded by
/// its own timeout (nemo-lens's OTLP exporters): the batch worker polls it itself, without a
/// helper thread's two thread switches per batch, which on a loaded machine are what limits
/// how fast the queue drains.
pub(crate) fn yielding_exporter_processor<E: SpanExporter + 'static>(
    exporter: E,
    settings: &ExportSettings,
) -> Result<BoxedProcessor> {
    if settings.synchronous {
        return exporter_processor(exporter, settings);
    }
    batch_processor(exporter, settings)
}

fn batch_processor<E: SpanExporter + 'static>(
    exporter: E,
    settings: &ExportSettings,
) -> Result<BoxedProcessor> {
    let processor = LensBatchProcessor::new(exporter, settings.batch, settings.dropped.clone())?;
    let _ = settings.span_queue.set(processor.span_queue());
    Ok(BoxedProcessor(Box::new(processor)))
}

/// The batch processor of an exporter that writes its requests straight from the batch
/// (see [`ReadyExport`](crate::export::otlp::trace_request::ReadyExport)).
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn ready_processor<E: crate::export::otlp::trace_request::ReadyExport + 'static>(
    exporter: E,
    settings: &ExportSettings,
) -> Result<BoxedProcessor> {
    let processor = LensBatchProcessor::new_ready(
        DeadlineExporter::new("spans", exporter),
        settings.batch,
        settings.dropped.clone(),
    )?;
    let _ = settings.span_queue.set(processor.span_queue());
    Ok(BoxedProcessor(Box::new(processor)))
}

/// The span processors lens registers with a tracer provider, as one processor shared between
/// the provider and the handle, so that the handle can shut them down without shutting the
/// provider down, and with the [closer of SDK spans](crate::queue::sdk_span_closer) in front.
///
/// A shut-down tracer provider skips every span that ends afterwards without a word (the SDK
/// checks the provider before calling `on_end`); a shut-down nemo-lens batch processor refuses
/// the span and counts it as dropped. So [`Telemetry::shutdown`](crate::Telemetry::shutdown)
/// shuts the processors down through this handle and leaves the provider running: spans
/// that end while the shutdown runs (training goes on during a SIGTERM flush) or after it are
/// counted, not lost silently.
///
/// One registered processor, not one per processor: the SDK clones a span's data for each
/// registered processor when there are several, so a separately registered closer would add
/// a clone to every span. Here a single inner processor (the usual case: the exporter's)
/// gets the data without a copy.
#[derive(Clone)]
struct SharedProcessors(Arc<Shared>);

struct Shared {
    processors: Vec<Box<dyn SpanProcessor>>,
    closer: SdkSpanCloser,
    shut: AtomicBool,
}

impl fmt::Debug for SharedProcessors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.0.processors).finish()
    }
}

impl Shared {
    #[inline]
    fn forward(&self, span: SpanData) {
        match self.processors.as_slice() {
            [] => {}
            [one] => one.on_end(span),
            [rest @ .., last] => {
                for p in rest {
                    p.on_end(span.clone());
                }
                last.on_end(span);
            }
        }
    }
}

impl SpanProcessor for SharedProcessors {
    #[inline]
    fn on_start(&self, span: &mut Span, cx: &Context) {
        for p in &self.0.processors {
            p.on_start(span, cx);
        }
        // After the processors: the copy keeps what they add at start.
        self.0.closer.on_start(span);
    }
    #[inline]
    fn on_end(&self, span: SpanData) {
        if self.0.closer.on_end(&span) {
            self.0.forward(span);
        }
    }
    fn force_flush(&self) -> OTelSdkResult {
        let errors: Vec<String> = self
            .0
            .processors
            .iter()
            .filter_map(|p| p.force_flush().err().map(|e| e.to_string()))
            .collect();
        joined(errors)
    }
    /// Shuts the processors down once, in registration order, within `timeout` (the handle,
    /// then the provider when dropped, both call this); a later call returns `Ok` at once.
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.0.shut.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut errors = Vec::new();
        for p in &self.0.processors {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = p.shutdown_with_timeout(left) {
                errors.push(e.to_string());
            }
        }
        joined(errors)
    }
    /// The resource was given to the processors before they were shared
    /// ([`SpanProcessors::new`]).
    fn set_resource(&mut self, _resource: &Resource) {}
}

fn joined(errors: Vec<String>) -> OTelSdkResult {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(OTelSdkError::InternalFailure(errors.join("; ")))
    }
}

/// The span processors of a tracer provider, in registration order, behind the SDK-span
/// closer, shut down by the handle (see [`SharedProcessors`]).
#[derive(Clone, Default)]
pub(crate) struct SpanProcessors(Option<SharedProcessors>);

impl SpanProcessors {
    /// Gives every processor `resource` (the provider's), then shares them (none: nothing to
    /// register, and no closer: it would have nowhere to export to).
    pub(crate) fn new(processors: Vec<BoxedProcessor>, resource: &Resource) -> Self {
        if processors.is_empty() {
            return SpanProcessors(None);
        }
        SpanProcessors(Some(SharedProcessors(Arc::new(Shared {
            processors: processors
                .into_iter()
                .map(|mut p| {
                    p.set_resource(resource);
                    p.0
                })
                .collect(),
            closer: SdkSpanCloser::new(),
            shut: AtomicBool::new(false),
        }))))
    }

    /// The processor to register with the provider builder (none without processors).
    pub(crate) fn registered(&self) -> Option<impl SpanProcessor + 'static> {
        self.0.clone()
    }

    /// Ends the SDK spans still open as truncated with `reason`, innermost first, and hands
    /// them to the processors (before they shut down); returns how many.
    pub(crate) fn close_open(&self, reason: &'static str) -> usize {
        let Some(shared) = &self.0 else {
            return 0;
        };
        let spans = shared.0.closer.close_all(reason);
        let n = spans.len();
        for span in spans {
            shared.0.forward(span);
        }
        n
    }

    /// SDK spans the closer had no room to track (see [`crate::queue::sdk_span_closer`]).
    pub(crate) fn untracked(&self) -> u64 {
        self.0.as_ref().map_or(0, |s| s.0.closer.untracked())
    }

    /// Shuts every processor down within `timeout`, in registration order.
    pub(crate) fn shutdown(&self, timeout: Duration) -> OTelSdkResult {
        match &self.0 {
            Some(p) => p.shutdown_with_timeout(timeout),
            None => Ok(()),
        }
    }
}
