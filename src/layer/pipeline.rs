//! The pipeline an exporting rank's layer records into: where finished records go, the span
//! tables of its layers (which shutdown and the panic hook reach), and the sampling decision
//! (trace id, flags, trace state) of a new span.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use opentelemetry::Context;
use opentelemetry::trace::{SpanKind, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SdkTracer, ShouldSample};
use tracing_core::Metadata;
use tracing_core::span::Id;

use crate::ids;
use crate::layer::detail::{DetailCapture, Outlet};
use crate::queue::span_processor::{RecordBuilder, SpanQueue};
use crate::rank::groups::declared_group;
use crate::rank::tags::GroupTags;
use crate::record::attributes::TextRules;
use crate::record::open_spans::OpenSpans;
use crate::record::stacktrace::{Stacktrace, UserFrames};
use crate::record::to_span_data::DirectBuild;
use crate::record::{Limits, Parent, SpanState};

/// Where finished span records go.
#[derive(Debug)]
pub(crate) enum RecordSink {
    /// The queue of nemo-lens's batch processor: the worker builds the SDK spans.
    Queue(SpanQueue),
    /// No batch processor (synchronous export): the SDK span is built on the thread that
    /// ends the span; a span that should have been exported and was not (its provider is shut
    /// down) is counted in `dropped`, as the queue's worker counts it.
    Inline { dropped: Arc<AtomicU64> },
}

/// What the layer shares with the telemetry handle on an exporting rank.
#[derive(Debug)]
pub(crate) struct Pipeline {
    /// Never dropped in a forked child: dropping the last reference to an inherited provider
    /// would shut it down and wait for its dead worker thread.
    pub(crate) tracer: ManuallyDrop<SdkTracer>,
    /// The span tables of the layers made for this pipeline (one per
    /// [`Telemetry::layer`](crate::Telemetry::layer) call).
    tables: parking_lot::Mutex<Vec<Weak<OpenSpans>>>,
    /// Parent of root spans (from `TRACEPARENT`), if the launcher gave one.
    pub(crate) default_parent: Option<Context>,
    /// The [fork generation](crate::ids) the pipeline was built in; in a forked child (another
    /// generation) the pipeline is inherited and the layer records nothing through it.
    pub(crate) generation: u64,
    /// Redaction and the longest string attribute value (`OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub(crate) text: TextRules,
    /// Where finished records go.
    pub(crate) sink: RecordSink,
    pub(crate) limits: Limits,
    /// The sampler follows the parent's sampled flag (the SDK's default `ParentBased`
    /// sampler); `false` with the rank sampler, which keeps every span of a sampled rank.
    pub(crate) parent_based: bool,
    /// The sampler `OTEL_TRACES_SAMPLER` gives the SDK, when it is not the default: the span's
    /// sampled flag is decided on the training thread by the same sampler, so that the context
    /// children and propagation see agrees with what the worker's SDK span will be.
    env_sampler: Option<Sampler>,
    /// Groups whose spans each start a trace of their own (`NEMO_LENS_TRACE_PER`), lower-case;
    /// empty (the default) costs one branch per span.
    trace_per: Box<[String]>,
    /// `ERROR` events (and every panic) carry a backtrace
    /// ([`TelemetryBuilder::error_backtraces`](crate::TelemetryBuilder::error_backtraces)).
    pub(crate) error_backtraces: bool,
    /// The attributes each span group gives its spans.
    pub(crate) group_tags: GroupTags,
    /// Per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`); `None` (the default) costs one
    /// branch per span.
    pub(crate) detail: Option<Arc<DetailCapture>>,
    /// Spans carry `thread.id` and `thread.name` (`NEMO_LENS_THREAD_ATTRIBUTES`); off (the
    /// default) costs one branch per span.
    pub(crate) thread_attributes: bool,
}

impl Pipeline {
    /// `queue` is the batch processor's record queue when spans are exported in batches
    /// (it counts the spans it drops); without one, the spans not built are counted in
    /// `dropped`. `rank_sampler` says whether the provider samples with [`crate::RankAwareSampler`]
    /// (which ignores the parent's flag) instead of the SDK default.
    ///
    /// `direct` (what the worker needs to build `SpanData` itself) when no span processor of
    /// the application needs to see the spans: see [`crate::record::to_span_data`].
    pub(crate) fn new(
        tracer: SdkTracer,
        default_parent: Option<Context>,
        text: TextRules,
        queue: Option<SpanQueue>,
        dropped: Arc<AtomicU64>,
        rank_sampler: bool,
        direct: Option<DirectBuild>,
    ) -> Self {
        let sink = match queue {
            Some(queue) => {
                queue.attach(RecordBuilder {
                    tracer: tracer.clone(),
                    direct,
                });
                RecordSink::Queue(queue)
            }
            None => RecordSink::Inline { dropped },
        };
        Pipeline {
            tracer: ManuallyDrop::new(tracer),
            tables: parking_lot::Mutex::new(Vec::new()),
            default_parent,
            generation: ids::fork_generation(),
            text,
            sink,
            limits: Limits::from_env(),
            parent_based: !rank_sampler,
            env_sampler: if rank_sampler { None } else { env_sampler() },
            trace_per: Box::default(),
            error_backtraces: false,
            group_tags: GroupTags::default(),
            detail: None,
            thread_attributes: false,
        }
    }

    /// The spans of a group carry these attributes of their group.
    pub(crate) fn with_group_tags(mut self, tags: GroupTags) -> Self {
        self.group_tags = tags;
        self
    }

    /// Spans of `groups` (lower-case names) start a trace each, linked to the span that would
    /// have been their parent.
    pub(crate) fn with_trace_per(mut self, groups: Vec<String>) -> Self {
        self.trace_per = groups.into_boxed_slice();
        self
    }

    /// `ERROR` events (and every panic) carry a backtrace.
    pub(crate) fn with_error_backtraces(mut self, on: bool) -> Self {
        self.error_backtraces = on;
        self
    }

    /// Spans carry the `thread.id` and `thread.name` of the thread they are made on.
    pub(crate) fn with_thread_attributes(mut self, on: bool) -> Self {
        self.thread_attributes = on;
        self
    }

    /// Holds the detail of steps (see [`crate::layer::detail`]).
    pub(crate) fn with_detail(mut self, detail: Option<Arc<DetailCapture>>) -> Self {
        self.detail = detail;
        self
    }

    /// Whether a span of `meta` starts a trace of its own.
    #[inline]
    pub(crate) fn starts_trace(&self, meta: &Metadata<'_>) -> bool {
        !self.trace_per.is_empty()
            && declared_group(meta)
                .is_some_and(|g| self.trace_per.iter().any(|t| t.eq_ignore_ascii_case(g)))
    }

    /// `true` in a process forked (without exec) after the pipeline was built.
    #[inline]
    pub(crate) fn inherited(&self) -> bool {
        self.generation != ids::fork_generation()
    }

    /// An emptied span state to reuse, if any.
    #[inline]
    pub(crate) fn spare_state(&self) -> Option<Arc<SpanState>> {
        match &self.sink {
            RecordSink::Queue(queue) => queue.spare(),
            RecordSink::Inline { .. } => None,
        }
    }

    /// Hands an ended record (of approximate size `size`) over for export.
    #[inline]
    pub(crate) fn finish(&self, state: Arc<SpanState>, size: usize) {
        match &self.sink {
            RecordSink::Queue(queue) => queue.push_record(state, size),
            RecordSink::Inline { dropped } => {
                if !state.build_sdk_span(&self.tracer) {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// An ended record that will not be exported (per-step detail not kept): emptied here and
    /// handed back for reuse, as the worker does with the records it exports, so that a dropped
    /// span costs the training thread no more than an exported one.
    pub(crate) fn discard(&self, mut state: Arc<SpanState>) {
        if let RecordSink::Queue(queue) = &self.sink
            && state.empty_for_reuse()
        {
            queue.recycle(state);
        }
    }

    /// A new span table, for a new layer: shutdown and the panic hook reach its spans.
    pub(crate) fn new_table(&self) -> Arc<OpenSpans> {
        let table = Arc::new(OpenSpans::default());
        let mut tables = self.tables.lock();
        tables.retain(|s| s.strong_count() > 0);
        tables.push(Arc::downgrade(&table));
        table
    }

    fn tables(&self) -> Vec<Arc<OpenSpans>> {
        match self
            .tables
            .try_lock_for(std::time::Duration::from_millis(200))
        {
            Some(tables) => tables.iter().filter_map(Weak::upgrade).collect(),
            None => Vec::new(),
        }
    }

    /// Recorded spans open now, in every layer of this pipeline.
    pub(crate) fn open_spans(&self) -> usize {
        self.tables().iter().map(|s| s.len()).sum()
    }

    /// Ends every open span as truncated with `reason`, innermost first, and hands them over
    /// for export; returns how many.
    pub(crate) fn close_all(&self, reason: &'static str) -> usize {
        // The held detail of the open steps is kept: the steps never got to decide.
        if let Some(detail) = &self.detail {
            detail.release_open(self);
        }
        let mut open: Vec<_> = self.tables().iter().flat_map(|s| s.drain()).collect();
        // Each table's spans are innermost first; across layers, by start time.
        open.sort_by_key(|s| std::cmp::Reverse(s.start_time()));
        self.truncate_all(open, reason)
    }

    /// Ends the open spans of `table` as truncated with `reason` (its layer is dropped, with the
    /// subscriber, while they are open); returns how many. The held detail of its open steps is
    /// kept first, as at shutdown: nothing would ever decide on it.
    pub(crate) fn close_table(&self, table: &OpenSpans, reason: &'static str) -> usize {
        if let Some(detail) = &self.detail {
            detail.release_steps(self, table.step_holds());
        }
        self.truncate_all(table.drain(), reason)
    }

    fn truncate_all(&self, open: Vec<Arc<SpanState>>, reason: &'static str) -> usize {
        let mut closed = 0;
        for state in open {
            if let Some(size) = state.truncate(reason, self.limits) {
                self.finish(state, size);
                closed += 1;
            }
        }
        closed
    }

    /// Records a panic on the innermost open span among `scope` (span ids, innermost first),
    /// without waiting on any lock for long (the panic hook): in `table` when it is one of
    /// this pipeline's tables (the subscriber's lens layer), else in this pipeline's tables.
    pub(crate) fn record_panic(&self, table: Option<&Arc<OpenSpans>>, scope: &[Id], message: &str) {
        let limit = self.text.limit;
        let message = crate::record::attributes::truncate_chars(message.to_string(), limit);
        // Captured here, resolved by the worker (or not at all if no span records it).
        let mut stacktrace =
            Stacktrace::capture(self.error_backtraces, UserFrames::AfterPanic, limit);
        let tables = self.tables();
        let tables: Vec<&Arc<OpenSpans>> = match table {
            Some(s) if tables.iter().any(|o| Arc::ptr_eq(o, s)) => vec![s],
            _ => tables.iter().collect(),
        };
        for id in scope {
            for table in &tables {
                if let Some(state) = table.find(id.into_u64())
                    && state.record_exception("panic", &message, &mut stacktrace, self.limits)
                {
                    return;
                }
            }
        }
    }

    /// Before the provider shuts down: export what is queued, within `deadline` (the SDK
    /// builds no span once its provider is shut down, so records must be turned into spans
    /// first).
    pub(crate) fn drain(&self, deadline: std::time::Instant) {
        if let RecordSink::Queue(queue) = &self.sink {
            queue.drain(deadline);
        }
    }
}

/// The sampler the SDK's default configuration reads from `OTEL_TRACES_SAMPLER` and
/// `OTEL_TRACES_SAMPLER_ARG` (the same mapping), unless it is the default
/// `parentbased_always_on` (or unset, or one the SDK does not implement, which it replaces by
/// the default).
fn env_sampler() -> Option<Sampler> {
    let name = std::env::var("OTEL_TRACES_SAMPLER").ok()?;
    let ratio = || {
        std::env::var("OTEL_TRACES_SAMPLER_ARG")
            .ok()
            .and_then(|r| r.parse::<f64>().ok())
            .unwrap_or(1.0)
    };
    Some(match name.as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio()),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio())))
        }
        _ => return None,
    })
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !self.inherited() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.tracer) }
        }
    }
}

/// The decision of an `OTEL_TRACES_SAMPLER` sampler for a new span (see
/// [`env_sampler`]): sampled, and the trace state.
#[cold]
fn sample(
    sampler: &Sampler,
    parent: &Parent,
    trace_id: opentelemetry::trace::TraceId,
    name: &str,
) -> (bool, TraceState) {
    let cx = match parent {
        Parent::Root => Context::new(),
        Parent::Span(sc) => Context::new().with_remote_span_context(sc.clone()),
        Parent::Context(cx) => cx.clone(),
    };
    let result = sampler.should_sample(Some(&cx), trace_id, name, &SpanKind::Internal, &[], &[]);
    (
        result.decision == SamplingDecision::RecordAndSample,
        result.trace_state,
    )
}

/// The trace id, trace flags (sampled, W3C `random`) and trace state of a new span with
/// `parent`.
pub(crate) fn decide(
    pipeline: &Pipeline,
    parent: &Parent,
    name: &str,
) -> (opentelemetry::trace::TraceId, TraceFlags, TraceState) {
    let parent_cx = parent.span_context();
    let (trace_id, mut sampled, mut trace_state) = match &parent_cx {
        Some(p) => (
            p.trace_id(),
            !pipeline.parent_based || p.is_sampled(),
            p.trace_state().clone(),
        ),
        None => (ids::new_trace_id(), true, TraceState::default()),
    };
    if let Some(sampler) = &pipeline.env_sampler {
        (sampled, trace_state) = sample(sampler, parent, trace_id, name);
    }
    let flags = ids::trace_flags(sampled, parent_cx.map(|p| p.trace_flags()));
    (trace_id, flags, trace_state)
}

impl Outlet for Pipeline {
    fn finish(&self, state: Arc<SpanState>, size: usize) {
        Pipeline::finish(self, state, size);
    }

    fn discard(&self, state: Arc<SpanState>) {
        Pipeline::discard(self, state);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceId, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    use super::*;
    use crate::record::SpanRecord;

    /// On the synchronous path, a span the SDK does not build (its provider is shut down) is
    /// counted as dropped, as the queue's worker counts it: dropped = produced − exported.
    #[test]
    fn a_span_not_built_inline_is_counted_as_dropped() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let dropped = Arc::new(AtomicU64::new(0));
        let pipeline = Pipeline::new(
            provider.tracer(crate::SCOPE_NAME),
            None,
            TextRules::default(),
            None,
            dropped.clone(),
            false,
            None,
        );
        let ended = |span: u64| {
            let cx = SpanContext::new(
                TraceId::from(1),
                SpanId::from(span),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            );
            let state = Arc::new(SpanState::new(
                cx,
                Some(SpanRecord::start("step", Parent::Root)),
            ));
            let size = state.end().expect("the span was open");
            (state, size)
        };

        let (state, size) = ended(1);
        pipeline.finish(state, size);
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
        assert_eq!(dropped.load(Ordering::Relaxed), 0);

        provider.shutdown().unwrap();
        let (state, size) = ended(2);
        pipeline.finish(state, size);
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
    }
}
