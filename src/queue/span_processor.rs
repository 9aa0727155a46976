//! The span processor: [`LensBatchProcessor`], a [`Batcher`] of span items (lens records, or
//! SDK spans ended elsewhere) whose worker builds the records' SDK spans and exports them.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use opentelemetry::Context as OtelContext;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracer, Span, SpanData, SpanExporter, SpanProcessor};
use parking_lot::Mutex;

use super::batcher::{BatchExport, BatchHandle, Batcher, Role, block_on_timeout};
use super::config::QueueConfig;
use crate::error::Result;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::export::otlp::trace_request::ReadyExport;
use crate::export::otlp::trace_request::{ReadyBatch, ReadySpan};
use crate::record::SpanState;
use crate::record::to_span_data::{Direct, DirectBuild};
use crate::size::ApproxSize;

/// One item of the span batch queue: a finished lens record (its SDK span is built on the
/// worker) or an SDK span ended elsewhere (spans of [`Telemetry::tracer`](crate::Telemetry::tracer)).
#[derive(Debug)]
pub(crate) enum SpanItem {
    Record(Arc<SpanState>),
    Data(Box<opentelemetry_sdk::trace::SpanData>),
}

impl ApproxSize for SpanItem {
    /// An SDK span's or a record's estimated size (see [`SpanState`]'s).
    fn approx_size(&self) -> usize {
        match self {
            SpanItem::Data(span) => span.approx_size(),
            SpanItem::Record(state) => state.approx_size(),
        }
    }
}

thread_local! {
    /// On a span worker thread while it builds SDK spans from records: the identity of its
    /// queue, and the spans its processor's `on_end` collected for the batch being exported.
    static COLLECTING: RefCell<Option<(usize, Vec<SpanData>)>> = const { RefCell::new(None) };
}

/// How the worker turns records into spans: through the lens tracer (its provider's sampler,
/// limits and processors), or straight into `SpanData` when no processor of the application
/// needs to see them (see [`crate::record::to_span_data`]).
#[derive(Clone, Debug)]
pub(crate) struct RecordBuilder {
    pub(crate) tracer: SdkTracer,
    pub(crate) direct: Option<DirectBuild>,
}

/// The record side of the span queue, shared by the processor, its worker and the lens
/// layer: the layer pushes finished records; the worker builds their spans with the builder
/// attached here.
#[derive(Clone)]
pub(crate) struct SpanQueue {
    handle: BatchHandle<SpanItem>,
    builder: Arc<Mutex<Option<RecordBuilder>>>,
    /// Emptied span states the worker hands back for reuse: a span then costs the training
    /// thread no allocation (memory a worker thread frees is slow for another thread to get
    /// back from the allocator).
    spare: Arc<ArrayQueue<Arc<SpanState>>>,
}

/// How many emptied span states wait for reuse, at most: four export batches' worth, about
/// 1.2 MB (a state the worker has emptied holds no attribute, event or link storage), so that
/// the training thread rarely allocates one while the worker catches up with a burst.
const SPARE_STATES: usize = 2048;

impl fmt::Debug for SpanQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanQueue")
            .field("queued", &self.handle.queued())
            .finish_non_exhaustive()
    }
}

impl SpanQueue {
    /// How the worker builds the spans of records: the tracer of the provider this queue's
    /// processor belongs to, and, when no processor of the application needs to see them,
    /// what it needs to build `SpanData` directly. Released when the worker stops.
    pub(crate) fn attach(&self, builder: RecordBuilder) {
        *self.builder.lock() = Some(builder);
    }

    /// Queues a finished record (one pointer) of approximate size `size` without blocking;
    /// drops and counts it when the queue or the byte budget is full.
    #[inline]
    pub(crate) fn push_record(&self, state: Arc<SpanState>, size: usize) {
        self.handle.push_sized(SpanItem::Record(state), size);
    }

    /// Exports what is queued until `deadline` (before the provider shuts down).
    pub(crate) fn drain(&self, deadline: Instant) {
        self.handle.drain(deadline);
    }

    /// An emptied span state to reuse, if the worker has one.
    #[inline]
    pub(crate) fn spare(&self) -> Option<Arc<SpanState>> {
        self.spare.pop()
    }

    /// Hands an emptied state back for reuse (a record that will not be exported); dropped
    /// when the spare states are full.
    #[inline]
    pub(crate) fn recycle(&self, state: Arc<SpanState>) {
        let _ = self.spare.push(state);
    }

    fn identity(&self) -> usize {
        self.handle.identity()
    }
}

/// The export of a whole [`ReadyBatch`] by an exporter that writes its requests itself.
type ExportReady<E> =
    for<'a> fn(
        &'a E,
        ReadyBatch,
    ) -> std::pin::Pin<Box<dyn Future<Output = OTelSdkResult> + Send + 'a>>;

/// Exports spans through a [`SpanExporter`], shared with the processor (which forwards the
/// resource to it at build time).
struct SpanExport<E> {
    exporter: Arc<StdMutex<E>>,
    /// Set when the exporter takes the batch as it is (`ReadyExport`): records are not
    /// turned into `SpanData` on the way.
    ready: Option<ExportReady<E>>,
    /// Builds the spans of records.
    builder: Arc<Mutex<Option<RecordBuilder>>>,
    /// This queue's identity (see [`COLLECTING`]).
    identity: usize,
    dropped: Arc<AtomicU64>,
    /// See [`SpanQueue::spare`].
    spare: Arc<ArrayQueue<Arc<SpanState>>>,
}

impl<E> SpanExport<E> {
    /// Turns a batch of queue items into `SpanData`, in queue order: records become
    /// `SpanData` directly, or SDK spans (through the provider: its sampler, limits and
    /// processors) whose `on_end` in [`LensBatchProcessor`] hands them back here. Records the
    /// SDK does not record (its provider is shut down) are counted as dropped.
    fn span_data(&self, batch: Vec<SpanItem>) -> Vec<SpanData> {
        let builder = self.builder.lock().clone();
        let direct = builder.as_ref().and_then(|b| b.direct.as_ref());
        let mut out = Vec::with_capacity(batch.len());
        let mut lost = 0;
        for item in batch {
            match item {
                SpanItem::Data(data) => out.push(*data),
                SpanItem::Record(mut state) => {
                    let how = match direct {
                        Some(direct) => state.span_data(direct, &mut out),
                        None => Direct::ViaSdk,
                    };
                    let built = how != Direct::ViaSdk
                        || builder
                            .as_ref()
                            .is_some_and(|b| self.through_sdk(&state, &b.tracer, &mut out));
                    if !built {
                        lost += 1;
                    }
                    // Emptied, and referenced nowhere else: back for reuse.
                    if Arc::get_mut(&mut state).is_some() {
                        let _ = self.spare.push(state);
                    }
                }
            }
        }
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
        out
    }

    /// Turns a batch of queue items into a [`ReadyBatch`], in queue order: records are taken
    /// as they are (their limits applied when written), or, when they need the SDK, become
    /// SDK spans as in [`SpanExport::span_data`].
    fn ready_batch(&self, batch: Vec<SpanItem>) -> ReadyBatch {
        let builder = self.builder.lock().clone();
        let direct = builder.as_ref().and_then(|b| b.direct.clone());
        let mut out = Vec::with_capacity(batch.len());
        let mut via_sdk = Vec::new();
        let mut lost = 0;
        for item in batch {
            match item {
                SpanItem::Data(data) => out.push(ReadySpan::Data(*data)),
                SpanItem::Record(mut state) => {
                    let how = match &direct {
                        Some(_) => match state.prepare() {
                            Ok(prepared) => {
                                out.push(ReadySpan::Record(prepared));
                                Direct::Built
                            }
                            Err(how) => how,
                        },
                        None => Direct::ViaSdk,
                    };
                    if how == Direct::ViaSdk {
                        let built = builder
                            .as_ref()
                            .is_some_and(|b| self.through_sdk(&state, &b.tracer, &mut via_sdk));
                        if built {
                            out.extend(via_sdk.drain(..).map(ReadySpan::Data));
                        } else {
                            lost += 1;
                        }
                    }
                    if Arc::get_mut(&mut state).is_some() {
                        let _ = self.spare.push(state);
                    }
                }
            }
        }
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
        ReadyBatch {
            build: direct,
            spans: out,
        }
    }

    /// Builds the SDK span of `state` through `tracer`; its `on_end` in [`LensBatchProcessor`]
    /// appends it to `out` (see [`COLLECTING`]). `false` when the SDK did not record it.
    fn through_sdk(&self, state: &SpanState, tracer: &SdkTracer, out: &mut Vec<SpanData>) -> bool {
        COLLECTING.with(|c| *c.borrow_mut() = Some((self.identity, std::mem::take(out))));
        let built = state.build_sdk_span(tracer);
        if let Some((_, spans)) = COLLECTING.with(|c| c.borrow_mut().take()) {
            *out = spans;
        }
        built
    }
}

impl<E: SpanExporter + 'static> BatchExport<SpanItem> for SpanExport<E> {
    fn export(
        &mut self,
        batch: Vec<SpanItem>,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        // The exporter's (and the span processors') own logs must not feed back into the
        // pipeline.
        let _guard = OtelContext::enter_telemetry_suppressed_scope();
        if let Some(export_ready) = self.ready {
            let batch = self.ready_batch(batch);
            if batch.spans.is_empty() {
                return Ok(());
            }
            let n = batch.len();
            let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
            return match block_on_timeout(export_ready(&exporter, batch), timeout) {
                Some(Ok(())) => Ok(()),
                Some(Err(e)) => Err(format!("span export failed ({n} spans): {e}")),
                None => Err(format!(
                    "span export timed out after {timeout:?} ({n} spans)"
                )),
            };
        }
        let batch = self.span_data(batch);
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.len();
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        match block_on_timeout(exporter.export(batch), timeout) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(format!("span export failed ({n} spans): {e}")),
            None => Err(format!(
                "span export timed out after {timeout:?} ({n} spans)"
            )),
        }
    }

    fn shutdown(&mut self, timeout: Duration) -> std::result::Result<(), String> {
        // The worker stops: release the provider it holds through the tracer.
        self.builder.lock().take();
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        exporter
            .shutdown_with_timeout(timeout)
            .map_err(|e| format!("span exporter shutdown: {e}"))
    }
}

/// The span processor of nemo-lens: a bounded queue and worker thread of sampled, ended spans
/// in front of a
/// [`SpanExporter`].
///
/// Spans recorded by the lens layer reach its queue as compact records, and their SDK spans
/// are built on its worker thread (see `src/record/`); spans ended elsewhere (the
/// OpenTelemetry API) reach it through [`SpanProcessor::on_end`] as usual.
pub(crate) struct LensBatchProcessor<E> {
    batcher: Batcher<SpanItem>,
    queue: SpanQueue,
    exporter: Arc<StdMutex<E>>,
    flush_timeout: Duration,
}

impl<E> fmt::Debug for LensBatchProcessor<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchProcessor")
            .field("batcher", &self.batcher)
            .finish_non_exhaustive()
    }
}

impl<E: SpanExporter + 'static> LensBatchProcessor<E> {
    /// Starts the worker thread; spans dropped are added to `dropped`.
    pub(crate) fn new(exporter: E, config: QueueConfig, dropped: Arc<AtomicU64>) -> Result<Self> {
        Self::start(exporter, None, config, dropped)
    }

    fn start(
        exporter: E,
        ready: Option<ExportReady<E>>,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
    ) -> Result<Self> {
        let exporter = Arc::new(StdMutex::new(exporter));
        let builder = Arc::new(Mutex::new(None));
        let spare = Arc::new(ArrayQueue::new(SPARE_STATES));
        // The worker learns its queue's identity (see `COLLECTING`) before it starts.
        let export = SpanExport {
            exporter: exporter.clone(),
            ready,
            builder: builder.clone(),
            identity: 0,
            dropped: dropped.clone(),
            spare: spare.clone(),
        };
        let batcher = Batcher::new_with(Role::SPANS, config, dropped, export, |shared, e| {
            e.identity = Arc::as_ptr(shared) as usize;
        })?;
        let queue = SpanQueue {
            handle: batcher.handle(),
            builder,
            spare,
        };
        Ok(LensBatchProcessor {
            batcher,
            queue,
            exporter,
            flush_timeout: config.export_timeout,
        })
    }

    /// The record queue, for the lens layer.
    pub(crate) fn span_queue(&self) -> SpanQueue {
        self.queue.clone()
    }
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl<E: ReadyExport + 'static> LensBatchProcessor<E> {
    /// Starts the worker thread of an exporter that takes the batch as it is (records are
    /// written straight into its requests); spans dropped are added to `dropped`.
    pub(crate) fn new_ready(
        exporter: E,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
    ) -> Result<Self> {
        Self::start(
            exporter,
            Some(|e, batch| Box::pin(e.export_ready(batch))),
            config,
            dropped,
        )
    }
}

impl<E: SpanExporter + 'static> SpanProcessor for LensBatchProcessor<E> {
    fn on_start(&self, _span: &mut Span, _cx: &OtelContext) {}

    #[inline]
    fn on_end(&self, mut span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        crate::ids::mark_random_root(&mut span);
        // On this processor's worker, building the spans of records: hand the span back to
        // the batch being exported.
        let identity = self.queue.identity();
        let span = COLLECTING.with(|c| match c.borrow_mut().as_mut() {
            Some((id, spans)) if *id == identity => {
                spans.push(span);
                None
            }
            _ => Some(span),
        });
        if let Some(span) = span {
            self.batcher.push(SpanItem::Data(Box::new(span)));
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batcher
            .force_flush(self.flush_timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batcher
            .shutdown(timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(mut e) = self.exporter.lock() {
            e.set_resource(resource);
        }
    }
}
