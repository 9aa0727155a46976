//! [`EventMetricsLayer`]: metrics from the fields of `tracing` events.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};
use opentelemetry::{KeyValue, Value};
use parking_lot::RwLock;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Interest, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::Instruments;
use super::warn_once;
use crate::layer::filter::is_internal_target;
use crate::rank::groups::GROUP_FIELD_PREFIX;

/// Field-name prefix of a monotonic counter.
pub(super) const MONOTONIC_COUNTER_PREFIX: &str = "monotonic_counter.";
/// Field-name prefix of an up-down counter.
pub(super) const COUNTER_PREFIX: &str = "counter.";
/// Field-name prefix of a histogram.
pub(super) const HISTOGRAM_PREFIX: &str = "histogram.";
/// Field-name prefix of a gauge.
pub(super) const GAUGE_PREFIX: &str = "gauge.";

/// What a metric field name asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    MonotonicCounter,
    Counter,
    Histogram,
    Gauge,
}

/// Splits `monotonic_counter.steps` into (kind, `steps`). An empty name is not a metric.
fn metric_field(name: &'static str) -> Option<(Kind, &'static str)> {
    // `monotonic_counter.` first: `counter.` is not its prefix, but keep the order explicit.
    [
        (MONOTONIC_COUNTER_PREFIX, Kind::MonotonicCounter),
        (COUNTER_PREFIX, Kind::Counter),
        (HISTOGRAM_PREFIX, Kind::Histogram),
        (GAUGE_PREFIX, Kind::Gauge),
    ]
    .into_iter()
    .find_map(|(prefix, kind)| {
        name.strip_prefix(prefix)
            .filter(|n| !n.is_empty())
            .map(|n| (kind, n))
    })
}

/// The per-layer filter of [`EventMetricsLayer`]: `Interest::always` for events whose callsite
/// declares a metric field, `Interest::never` for everything else (and for everything when
/// inert).
#[derive(Clone, Copy, Debug)]
pub(super) struct MetricFieldFilter {
    inert: bool,
}

impl MetricFieldFilter {
    /// `true` when the layer records nothing at all.
    pub(crate) fn is_inert(&self) -> bool {
        self.inert
    }

    /// The decision for one callsite.
    pub(crate) fn allows(&self, meta: &Metadata<'_>) -> bool {
        !self.inert
            && !meta.is_span()
            && !is_internal_target(meta.target())
            && meta
                .fields()
                .iter()
                .any(|f| metric_field(f.name()).is_some())
    }
}

impl<S> Filter<S> for MetricFieldFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.allows(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        crate::layer::filter::interest(self.allows(meta))
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inert.then_some(LevelFilter::OFF)
    }
}

/// A `tracing` layer that records `counter.*`, `monotonic_counter.*`, `histogram.*` and
/// `gauge.*` event fields as OpenTelemetry measurements: `info!(histogram.step_ms = dt)`
/// records a histogram.
///
/// [`EventMetricsLayer`] turns event fields with a metric prefix into measurements, with the
/// semantics of `tracing-opentelemetry`'s `MetricsLayer`, so code written for that layer works
/// unchanged:
///
/// | field name | instrument | value types |
/// |---|---|---|
/// | `monotonic_counter.<name>` | counter (monotonic), value added | `u64`/`i64` → `u64` counter, `f64` → `f64` counter |
/// | `counter.<name>` | up-down counter, value added | `i64`/`u64` → `i64`, `f64` → `f64` |
/// | `histogram.<name>` | histogram, value recorded | `u64`/`i64` → `u64`, `f64` → `f64` |
/// | `gauge.<name>` | gauge, value set | `u64` → `u64`, `i64` → `i64`, `f64` → `f64` |
///
/// The instrument is named `<name>` (the prefix removed). Every other field of the event becomes
/// an attribute of the measurements (strings, booleans, integers, floats; anything else in its
/// `Debug` form), except the `message` (free text: unbounded cardinality) and `nemo.group.*`
/// declarations. One event may carry several metric fields; they share the attributes.
///
/// ```
/// use nemo_lens::{LensConfig, Telemetry};
/// use tracing_subscriber::prelude::*;
///
/// let telemetry = Telemetry::builder(LensConfig::default()).build().unwrap();
/// let _guard = tracing_subscriber::registry()
///     .with(telemetry.metrics_layer())
///     .set_default();
/// for step in 0..3 {
///     let dt_ms = 840.0 + f64::from(step);
///     tracing::info!(histogram.step_ms = dt_ms, monotonic_counter.steps = 1_u64, phase = "train");
/// }
/// tracing::info!(gauge.gpu_mem_gib = 61.5, device = 0_i64);
/// ```
///
/// # Cost
///
/// Whether an event can hold a metric is a property of its callsite: its field *names* are
/// static. The layer's per-layer filter looks at them once, in `register_callsite`, and answers
/// `Interest::never` for every callsite without a metric field, so ordinary events, and all
/// spans, never reach this layer. On a rank that exports no metrics (telemetry disabled,
/// metrics disabled, a non-exporting rank) the layer is inert: every callsite is
/// `Interest::never` and the level hint is `OFF`.
///
/// Like the lens layer, it ignores the exporters' own stacks
/// (its [internal targets](crate::LensLayer#internal-targets)).
///
/// # Misuse
///
/// A metric field whose value is not a number (`histogram.x = "slow"`), a negative value for a
/// monotonic counter or a `u64` histogram, or a `u64` above `i64::MAX` for an up-down counter, is
/// skipped and reported once per metric (see
/// [the metrics module](crate::metrics#never-hurting-the-trainer)).
///
/// # Composition
///
/// `EventMetricsLayer<S>` is an ordinary `Layer<S>` that carries its own per-layer filter:
/// stack it next to the lens layer, `fmt` or `EnvFilter` in any order.
///
/// # Building one
///
/// Get one from [`Telemetry::metrics_layer`](crate::Telemetry::metrics_layer), or build one on
/// any meter's [`Instruments`] with [`EventMetricsLayer::new`].
///
/// ```
/// use nemo_lens::metrics::{EventMetricsLayer, Instruments};
/// use opentelemetry::metrics::MeterProvider as _;
/// use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
/// use tracing_subscriber::prelude::*;
///
/// let exporter = InMemoryMetricExporter::default();
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(exporter.clone()).build())
///     .build();
/// let layer = EventMetricsLayer::new(Instruments::new(provider.meter("nemo.lens")));
/// tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
///     tracing::info!(monotonic_counter.tokens = 512_u64, phase = "train");
/// });
/// provider.force_flush()?;
/// let batches = exporter.get_finished_metrics()?;
/// let metric = batches[0].scope_metrics().next().unwrap().metrics().next().unwrap();
/// assert_eq!(metric.name(), "tokens");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EventMetricsLayer<S> {
    inner: Filtered<Recorder, MetricFieldFilter, S>,
}

impl<S> fmt::Debug for EventMetricsLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventMetricsLayer")
            .field("filter", self.inner.filter())
            .finish()
    }
}

impl<S> EventMetricsLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// A layer recording into `instruments` (instruments are created on first use and cached
    /// there, shared with every other layer on the same cache).
    ///
    /// ```
    /// use nemo_lens::metrics::{EventMetricsLayer, Instruments};
    /// let layer = EventMetricsLayer::<tracing_subscriber::Registry>::new(Instruments::noop());
    /// assert!(!layer.is_inert());
    /// ```
    pub fn new(instruments: Instruments) -> Self {
        EventMetricsLayer {
            inner: Recorder {
                instruments: Some(instruments),
            }
            .with_filter(MetricFieldFilter { inert: false }),
        }
    }

    /// A layer that records nothing and is `Interest::never` for every callsite.
    pub(crate) fn inert() -> Self {
        EventMetricsLayer {
            inner: Recorder { instruments: None }.with_filter(MetricFieldFilter { inert: true }),
        }
    }

    /// `true` when the layer records nothing at all: telemetry disabled, metrics disabled, or a
    /// rank that exports no metrics. Every callsite is then `Interest::never`.
    ///
    /// ```
    /// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let layer = telemetry.metrics_layer::<tracing_subscriber::Registry>();
    /// assert!(layer.is_inert()); // disabled telemetry: nothing is recorded
    /// ```
    pub fn is_inert(&self) -> bool {
        self.inner.filter().is_inert()
    }
}

impl<S> Layer<S> for EventMetricsLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber)
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber)
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx)
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }
    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(span, values, ctx)
    }
    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx)
    }
    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.inner.on_event(event, ctx)
    }
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx)
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx)
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx)
    }
    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx)
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped layer, which upholds the contract.
        unsafe { self.inner.downcast_raw(id) }
    }
}

/// The unfiltered recorder inside [`EventMetricsLayer`].
struct Recorder {
    instruments: Option<Instruments>,
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let Some(instruments) = &self.instruments else {
            return;
        };
        let mut visitor = MetricVisitor::default();
        event.record(&mut visitor);
        let cache = instruments.events();
        let meter = instruments.meter();
        for (name, measurement) in visitor.metrics {
            cache.record(meter, name, measurement, &visitor.attributes);
        }
    }
}

/// One measurement found in an event.
#[derive(Clone, Copy, Debug)]
enum Measurement {
    CounterU64(u64),
    CounterF64(f64),
    UpDownI64(i64),
    UpDownF64(f64),
    HistogramU64(u64),
    HistogramF64(f64),
    GaugeU64(u64),
    GaugeI64(i64),
    GaugeF64(f64),
}

#[derive(Default)]
struct MetricVisitor {
    attributes: Vec<KeyValue>,
    metrics: Vec<(&'static str, Measurement)>,
}

impl MetricVisitor {
    fn attribute(&mut self, field: &Field, value: impl Into<Value>) {
        let name = field.name();
        if name == "message" || name.starts_with(GROUP_FIELD_PREFIX) {
            return;
        }
        self.attributes.push(KeyValue::new(name, value));
    }

    fn misuse(name: &'static str, problem: &str) {
        warn_once("event metric misuse", "", name, || {
            format!("event metric field '{name}': {problem}; measurement skipped")
        });
    }
}

impl Visit for MetricVisitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let Some((kind, name)) = metric_field(field.name()) else {
            return self.attribute(field, value);
        };
        let m = match kind {
            Kind::MonotonicCounter if value < 0.0 || value.is_nan() => {
                return Self::misuse(field.name(), "a monotonic counter needs a value >= 0");
            }
            Kind::MonotonicCounter => Measurement::CounterF64(value),
            Kind::Counter => Measurement::UpDownF64(value),
            Kind::Histogram => Measurement::HistogramF64(value),
            Kind::Gauge => Measurement::GaugeF64(value),
        };
        self.metrics.push((name, m));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let Some((kind, name)) = metric_field(field.name()) else {
            return self.attribute(field, value);
        };
        let m = match (kind, u64::try_from(value)) {
            (Kind::Counter, _) => Measurement::UpDownI64(value),
            (Kind::Gauge, _) => Measurement::GaugeI64(value),
            (Kind::MonotonicCounter, Ok(v)) => Measurement::CounterU64(v),
            (Kind::Histogram, Ok(v)) => Measurement::HistogramU64(v),
            (Kind::MonotonicCounter | Kind::Histogram, Err(_)) => {
                return Self::misuse(
                    field.name(),
                    "negative integer for an unsigned instrument (use a float)",
                );
            }
        };
        self.metrics.push((name, m));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let Some((kind, name)) = metric_field(field.name()) else {
            return match i64::try_from(value) {
                Ok(v) => self.attribute(field, v),
                Err(_) => self.attribute(field, value.to_string()),
            };
        };
        let m = match kind {
            Kind::MonotonicCounter => Measurement::CounterU64(value),
            Kind::Histogram => Measurement::HistogramU64(value),
            Kind::Gauge => Measurement::GaugeU64(value),
            Kind::Counter => match i64::try_from(value) {
                Ok(v) => Measurement::UpDownI64(v),
                Err(_) => {
                    return Self::misuse(field.name(), "u64 above i64::MAX for an up-down counter");
                }
            },
        };
        self.metrics.push((name, m));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if metric_field(field.name()).is_some() {
            return Self::misuse(field.name(), "a boolean is not a number");
        }
        self.attribute(field, value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if metric_field(field.name()).is_some() {
            return Self::misuse(field.name(), "a string is not a number");
        }
        self.attribute(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if metric_field(field.name()).is_some() {
            return Self::misuse(
                field.name(),
                "not a u64, i64 or f64 (Debug/Display values are not numbers)",
            );
        }
        self.attribute(field, format!("{value:?}"));
    }
}

type Map<T> = RwLock<HashMap<&'static str, T>>;

/// The event-metric instruments of one [`Instruments`], by name and type. Bounded: names are
/// the static field names of the program's callsites.
#[derive(Default)]
pub(super) struct Cache {
    counter_u64: Map<Counter<u64>>,
    counter_f64: Map<Counter<f64>>,
    up_down_i64: Map<UpDownCounter<i64>>,
    up_down_f64: Map<UpDownCounter<f64>>,
    histogram_u64: Map<Histogram<u64>>,
    histogram_f64: Map<Histogram<f64>>,
    gauge_u64: Map<Gauge<u64>>,
    gauge_i64: Map<Gauge<i64>>,
    gauge_f64: Map<Gauge<f64>>,
}

fn with<K: Eq + Hash + Copy, T>(
    map: &RwLock<HashMap<K, T>>,
    key: K,
    create: impl FnOnce() -> T,
    use_it: impl FnOnce(&T),
) {
    if let Some(i) = map.read().get(&key) {
        return use_it(i);
    }
    use_it(map.write().entry(key).or_insert_with(create))
}

impl Cache {
    fn record(&self, meter: &Meter, name: &'static str, m: Measurement, attrs: &[KeyValue]) {
        match m {
            Measurement::CounterU64(v) => with(
                &self.counter_u64,
                name,
                || meter.u64_counter(name).build(),
                |i| i.add(v, attrs),
            ),
            Measurement::CounterF64(v) => with(
                &self.counter_f64,
                name,
                || meter.f64_counter(name).build(),
                |i| i.add(v, attrs),
            ),
            Measurement::UpDownI64(v) => with(
                &self.up_down_i64,
                name,
                || meter.i64_up_down_counter(name).build(),
                |i| i.add(v, attrs),
            ),
            Measurement::UpDownF64(v) => with(
                &self.up_down_f64,
                name,
                || meter.f64_up_down_counter(name).build(),
                |i| i.add(v, attrs),
            ),
            Measurement::HistogramU64(v) => with(
                &self.histogram_u64,
                name,
                || meter.u64_histogram(name).build(),
                |i| i.record(v, attrs),
            ),
            Measurement::HistogramF64(v) => with(
                &self.histogram_f64,
                name,
                || meter.f64_histogram(name).build(),
                |i| i.record(v, attrs),
            ),
            Measurement::GaugeU64(v) => with(
                &self.gauge_u64,
                name,
                || meter.u64_gauge(name).build(),
                |i| i.record(v, attrs),
            ),
            Measurement::GaugeI64(v) => with(
                &self.gauge_i64,
                name,
                || meter.i64_gauge(name).build(),
                |i| i.record(v, attrs),
            ),
            Measurement::GaugeF64(v) => with(
                &self.gauge_f64,
                name,
                || meter.f64_gauge(name).build(),
                |i| i.record(v, attrs),
            ),
        }
    }
}
