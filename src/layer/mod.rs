//! [`LensLayer`]: the `tracing` layer that turns spans and events into OpenTelemetry spans.
//! Its callbacks run on the training thread; they keep a compact record per span (`record/`)
//! and hand closed records to the queue (`queue/`).

pub(crate) mod activation;
pub(crate) mod detail;
pub(crate) mod fields;
pub(crate) mod filter;
pub(crate) mod hooks;
pub(crate) mod logs;
pub(crate) mod pipeline;
pub(crate) mod span_ext;
mod spans;
pub(crate) mod unwind;

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Interest, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use self::filter::LensFilter;
use self::logs::{LensLoggerProvider, LogFilter, LogLayer};
use self::pipeline::Pipeline;
use self::spans::SpanLayer;

/// The nemo-lens layer: spans and events of a `tracing` subscriber, exported through
/// OpenTelemetry, behind its rank / group / sampling per-layer filter.
///
/// Get one from [`Telemetry::layer`](crate::Telemetry::layer) and add it to any
/// `tracing_subscriber::registry()`-based subscriber. It has its own per-layer filter, so it
/// composes with whatever the application already has (`fmt`, `EnvFilter`, other exporters)
/// and never disables callsites for them:
///
/// ```
/// use tracing_subscriber::prelude::*;
/// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let subscriber = tracing_subscriber::registry()
///     .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
///     .with(telemetry.layer());
/// tracing::subscriber::with_default(subscriber, || {
///     tracing::info_span!("step").in_scope(|| {});
/// });
/// ```
///
///
/// # What becomes what
///
/// | `tracing` | OpenTelemetry |
/// |---|---|
/// | span (name, fields) | span (name, attributes); started when the span is created, ended when it closes |
/// | parent span (explicit or current) | parent; a span without one takes the current OpenTelemetry context (an attached remote parent) or the launcher's `TRACEPARENT` |
/// | `i64`/`u64`/`bool`/`f64`/`&str` field | attribute of that type (`u64` above `i64::MAX` becomes a string) |
/// | `?debug` / `%display` field | string attribute |
/// | event inside a span | span event named by its message |
/// | `ERROR` event, `#[instrument(err)]` | status `ERROR` with the message, plus an `exception` event with Python's `exception.type`, `exception.message`, `exception.stacktrace` (with [`TelemetryBuilder::error_backtraces`](crate::TelemetryBuilder::error_backtraces)), `exception.escaped = "False"` (see [`semconv::EXCEPTION_TYPE`](crate::semconv::EXCEPTION_TYPE)) |
/// | `follows_from` | link |
/// | field `otel.name` / `otel.kind` / `otel.status_code` / `otel.status_description` | span name / kind / status |
/// | field named `nemo.group.<g>` | the span's [group](crate::groups); not exported |
///
/// String values of fields named `prompt`, `input_text`, `output_text`, `text`, `password`,
/// `token`, `secret` or `key` are replaced with `[REDACTED]` ([`TelemetryBuilder::DEFAULT_REDACT_KEYS`](crate::TelemetryBuilder::DEFAULT_REDACT_KEYS), or the
/// keys given to [`TelemetryBuilder::redact_keys`](crate::TelemetryBuilder::redact_keys)), on
/// spans and events alike. String values longer than `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`
/// (else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) characters are cut to it, on a character boundary,
/// on spans and events alike; redaction comes first, as in Python (limit 8: `[REDACTE`).
///
/// # Internal targets
///
/// Callsites whose target starts with one of the exporters' own stacks (`opentelemetry`,
/// `hyper`, `tonic`, `h2`, `reqwest`, `tower`) or with `nemo_lens` (the crate's own diagnostics)
/// are never recorded: they reach your other layers (`fmt`) but never become exported telemetry.
///
/// Spans and events raised while OpenTelemetry telemetry is suppressed on the thread (an
/// exporter at work: nemo-lens exports in a suppressed scope) are not recorded, so an exporter
/// that logs through `tracing` never feeds back into the pipeline nor re-enters itself.
///
/// # Cost
///
/// Which callsites the layer records is decided by its per-layer filter once per callsite; on a
/// non-exporting rank or for a disabled group the callsite is `Interest::never` and a span costs
/// what a disabled callsite costs. Events outside any span are ignored by this layer.
///
/// On an exporting rank the training thread keeps only a compact record per span (see
/// the `record` stage): ids, timestamps, attributes, events. The OpenTelemetry SDK span is
/// built from it later on the batch worker thread, where span processors also run.
pub struct LensLayer<S> {
    filter: LensFilter,
    logs: LogFilter,
    /// The log part bridges something (`logs.is_on()`, fixed at setup). When it is off (the
    /// default) no callback reaches it: see the combination below.
    logs_on: bool,
    spans: Filtered<SpanLayer<S>, LensFilter, S>,
    logs_layer: Filtered<LogLayer<S>, LogFilter, S>,
}

impl<S> fmt::Debug for LensLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensLayer")
            .field("filter", &self.filter)
            .field("logs", &self.logs)
            .finish()
    }
}

impl<S> LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    pub(crate) fn new(
        pipeline: Option<Arc<Pipeline>>,
        filter: LensFilter,
        logs: (Option<&LensLoggerProvider>, LogFilter),
        activate: bool,
    ) -> Self {
        let (provider, log_filter) = logs;
        let spans = SpanLayer::new(pipeline, activate);
        LensLayer {
            filter: filter.clone(),
            logs_on: log_filter.is_on(),
            logs_layer: LogLayer::filtered(provider, log_filter.clone(), spans.table().clone()),
            logs: log_filter,
            spans: spans.with_filter(filter),
        }
    }

    /// `true` when the layer records no span at all (disabled, non-exporting or unsampled rank,
    /// or traces turned off): every callsite's interest is `never` for its spans.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert!(t.layer::<tracing_subscriber::Registry>().is_inert());
    /// ```
    pub fn is_inert(&self) -> bool {
        self.filter.is_inert()
    }

    /// Whether this layer bridges events into log records (an exporting rank with
    /// [`LensConfig::logs_enabled`](crate::LensConfig::logs_enabled)).
    pub fn bridges_logs(&self) -> bool {
        self.logs.is_on()
    }
}

// Two per-layer-filtered parts in one layer. `Layered` cannot be used here: for `S = Registry`
// it believes its inner part *is* the registry and keeps only the outer part's level hint, so
// an inert log part (hint OFF) would switch every callsite off. The combination below follows
// tracing-subscriber's rules for two filtered layers: the registry merges the per-layer
// interests, and the level hint is the most verbose of the two (`None` if either has none).
//
// Cost: an off log part (logs not enabled, the default) is left out of everything but the
// layer set-up (`on_layer` gives it its filter id). Registering its `never` would merge with
// the span part's `always` into `sometimes`, and `tracing` would then ask `enabled` on every
// span and event; and each `Filtered` callback that takes a span id (`on_enter`, `on_exit`,
// `on_close`, `on_record`, `on_follows_from`) looks the span up in the registry to check its
// filter bit. The span part finds its spans in its own table by id (a span its filter
// disabled is not there), so those callbacks go straight to it, past its `Filtered` wrapper.
// The log part never acts on `on_enter`/`on_exit`, so those are not forwarded to it at all (a
// part that starts to needs its forwarding back here).
impl<S> Layer<S> for LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.spans.on_register_dispatch(subscriber);
        self.logs_layer.on_register_dispatch(subscriber);
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.spans.on_layer(subscriber);
        self.logs_layer.on_layer(subscriber);
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // Each filtered part records its own interest for the registry to merge.
        if self.logs_on {
            self.logs_layer.register_callsite(metadata);
        }
        self.spans.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>, ctx: LayerContext<'_, S>) -> bool {
        (!self.logs_on || self.logs_layer.enabled(metadata, ctx.clone()))
            && self.spans.enabled(metadata, ctx)
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        self.spans.on_new_span(attrs, id, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_new_span(attrs, id, ctx);
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        let spans = self.spans.max_level_hint()?;
        if !self.logs_on {
            return Some(spans);
        }
        Some(spans.max(self.logs_layer.max_level_hint()?))
    }
    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        self.spans.inner().on_record(span, values, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_record(span, values, ctx);
        }
    }
    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: LayerContext<'_, S>) {
        self.spans
            .inner()
            .on_follows_from(span, follows, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_follows_from(span, follows, ctx);
        }
    }
    fn event_enabled(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) -> bool {
        (!self.logs_on || self.logs_layer.event_enabled(event, ctx.clone()))
            && self.spans.event_enabled(event, ctx)
    }
    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        self.spans.on_event(event, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_event(event, ctx);
        }
    }
    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        // The span part keeps the thread's stack of entered lens spans (and activates their
        // contexts when context activation is on); it returns at once on a non-exporting rank.
        self.spans.inner().on_enter(id, ctx);
    }
    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
        self.spans.inner().on_exit(id, ctx);
    }
    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        if self.logs_on {
            self.logs_layer.on_close(id.clone(), ctx.clone());
        }
        // `LensFilter` has no `on_close`: the wrapper would only check the filter bit.
        self.spans.inner().on_close(id, ctx);
    }
    fn on_id_change(&self, old: &Id, new: &Id, ctx: LayerContext<'_, S>) {
        self.spans.on_id_change(old, new, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_id_change(old, new, ctx);
        }
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped layers, which uphold the contract.
        unsafe {
            self.spans
                .downcast_raw(id)
                .or_else(|| self.logs_layer.downcast_raw(id))
        }
    }
}
