//! Metrics: the instruments NeMo Lens defines, a registry for your own, and metrics from
//! `tracing` events.
//!
//! Spans say *where time went*; metrics say *how numbers move*: loss, throughput, token counts,
//! rewards. On an exporting rank with metrics enabled (`NEMO_LENS_METRICS_ENABLED`, default on),
//! [`Telemetry`](crate::Telemetry) builds a meter provider that exports every
//! `OTEL_METRIC_EXPORT_INTERVAL` milliseconds (default 10 000) to the configured exporter (OTLP,
//! or one JSON line per export on the console) and once more at shutdown. On any other rank
//! there is no provider and no thread, and everything below records into a no-op meter.
//!
//! There are three ways to record, from most to least structured:
//!
//! 1. **Lens's own instrument families** ([`families`]): fill a struct of optional values and
//!    call `record`. Only the fields you set are recorded; the instruments are created on first
//!    use and cached in an [`Instruments`] (the handle holds one: [`Telemetry::instruments`]).
//!
//!    ```
//!    use nemo_lens::metrics::{InferenceMetrics, TrainingMetrics};
//!    # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//!    TrainingMetrics { loss: Some(2.31), step_duration_s: Some(0.84), ..Default::default() }
//!        .record(&telemetry);
//!    InferenceMetrics { request_duration_s: Some(0.5), model: Some("llama"), input_tokens: Some(10),
//!        ..Default::default() }
//!        .record(&telemetry);
//!    ```
//!
//! 2. **Registered metric groups** ([`registry`]): a library declares its metrics once
//!    ([`register_metric_group`]) and records them by key ([`record_metrics`]). Recording never
//!    fails: an unknown group or key is reported once and skipped.
//!
//!    ```
//!    use nemo_lens::metrics::{MetricKind, MetricSpec, record_metrics, register_metric_group};
//!    # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//!    register_metric_group("doc_rl", [
//!        MetricSpec::new("reward", "doc_rl.reward.mean", MetricKind::Gauge),
//!        MetricSpec::new("gen_ms", "doc_rl.generation.duration", MetricKind::Histogram).with_unit("ms"),
//!    ], false).unwrap();
//!    record_metrics(&telemetry, "doc_rl", [("reward", 0.7), ("gen_ms", 1250.0)], &[]);
//!    ```
//!
//! 3. **Fields of `tracing` events** ([`events`]): with [`Telemetry::metrics_layer`] in the
//!    subscriber, an event field named `histogram.<name>`, `gauge.<name>`, `counter.<name>`
//!    (up-down) or `monotonic_counter.<name>` records into that instrument, and the event's other
//!    fields become attributes:
//!
//!    ```
//!    # let dt = 12.5_f64;
//!    tracing::info!(histogram.step_ms = dt, phase = "train");
//!    ```
//!
//! # Never hurting the trainer
//!
//! Recording never panics and never returns an error into the training loop. Misuse found while
//! recording (an unknown metric group or key, a negative value for a monotonic counter, a `u64` too
//! large for an up-down counter) is reported **once** per distinct problem and the measurement is
//! skipped. The report is a `tracing` warning with target [`DIAGNOSTICS_TARGET`]
//! (`nemo_lens::metrics`); that target is one of the [internal targets](crate::INTERNAL_TARGETS),
//! so the warning reaches your `fmt` layer but is never exported as telemetry itself. Where
//! `tracing` cannot deliver it (no subscriber is installed, or the problem is found inside
//! [`EventMetricsLayer`], where `tracing` drops re-entrant events) it is one `WARN
//! nemo_lens::metrics: …` line on stderr instead. At most [`MAX_DISTINCT_WARNINGS`] distinct
//! warnings are remembered, so a loop inventing new keys cannot grow memory. Registration errors
//! ([`register_metric_group`]) are typed [`LensError`](crate::LensError)s, since they happen at
//! start-up.
//!
//! [`Telemetry::instruments`]: crate::Telemetry::instruments
//! [`Telemetry::metrics_layer`]: crate::Telemetry::metrics_layer

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::metrics::{Meter, MeterProvider as _, NoopMeterProvider};
use parking_lot::Mutex;

pub mod events;
pub mod families;
pub mod registry;

pub use events::EventMetricsLayer;
pub use families::{GymMetrics, InferenceMetrics, RlMetrics, TrainingMetrics};
pub use registry::{
    MetricKind, MetricSpec, record_metrics, register_metric_group, registered_metric_groups,
    unregister_metric_group,
};

/// Lazily created, cached instruments of one [`Meter`] (see [`families`]).
///
/// Cloning is cheap and clones share the cache.
///
/// ```
/// use nemo_lens::metrics::{Instruments, TrainingMetrics};
/// let instruments = Instruments::noop(); // records nothing
/// TrainingMetrics { loss: Some(1.5), ..Default::default() }.record(&instruments);
/// ```
#[derive(Clone)]
pub struct Instruments {
    inner: Arc<Inner>,
}

struct Inner {
    meter: Meter,
    inference: OnceLock<families::Inference>,
    rl: OnceLock<families::Rl>,
    gym: OnceLock<families::Gym>,
    training: OnceLock<families::Training>,
    registered: registry::Cache,
    events: events::Cache,
}

impl fmt::Debug for Instruments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instruments")
            .field("inference", &self.inner.inference.get().is_some())
            .field("rl", &self.inner.rl.get().is_some())
            .field("gym", &self.inner.gym.get().is_some())
            .field("training", &self.inner.training.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Instruments {
    /// A cache for `meter`; nothing is created until something is recorded.
    ///
    /// ```
    /// let meter = opentelemetry::global::meter("nemo.lens");
    /// let instruments = nemo_lens::metrics::Instruments::new(meter);
    /// # let _ = instruments;
    /// ```
    pub fn new(meter: Meter) -> Self {
        Instruments {
            inner: Arc::new(Inner {
                meter,
                inference: OnceLock::new(),
                rl: OnceLock::new(),
                gym: OnceLock::new(),
                training: OnceLock::new(),
                registered: Default::default(),
                events: Default::default(),
            }),
        }
    }

    /// Instruments of a no-op meter: every record is dropped (a non-exporting rank).
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// # let _ = instruments;
    /// ```
    pub fn noop() -> Self {
        Self::new(NoopMeterProvider::new().meter(crate::SCOPE_NAME))
    }

    /// The meter the instruments are created from.
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// let steps = instruments.meter().u64_counter("my.steps").build();
    /// steps.add(1, &[]);
    /// ```
    pub fn meter(&self) -> &Meter {
        &self.inner.meter
    }

    fn registered(&self) -> &registry::Cache {
        &self.inner.registered
    }

    fn events(&self) -> &events::Cache {
        &self.inner.events
    }
}

impl AsRef<Instruments> for Instruments {
    fn as_ref(&self) -> &Instruments {
        self
    }
}

/// The `tracing` target of the warnings metrics recording emits (once per distinct problem).
pub const DIAGNOSTICS_TARGET: &str = "nemo_lens::metrics";

/// How many distinct recording problems are remembered (and so warned about) per process.
pub const MAX_DISTINCT_WARNINGS: usize = 1024;

/// Emits `message()` as a warning unless the same `(reason, group, key)` was already reported.
/// Beyond [`MAX_DISTINCT_WARNINGS`] problems, one last warning says further ones are dropped.
pub(crate) fn warn_once(
    reason: &'static str,
    group: &str,
    key: &str,
    message: impl FnOnce() -> String,
) {
    type Seen = HashSet<(&'static str, String, String)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock();
    let entry = (reason, group.to_owned(), key.to_owned());
    if seen.contains(&entry) {
        return;
    }
    match seen.len() {
        n if n < MAX_DISTINCT_WARNINGS => {
            seen.insert(entry);
            drop(seen);
            emit(reason, &message());
        }
        n if n == MAX_DISTINCT_WARNINGS => {
            // A sentinel entry makes this the last warning.
            seen.insert(("", String::new(), String::new()));
            drop(seen);
            emit(
                "too many warnings",
                &format!(
                    "{MAX_DISTINCT_WARNINGS} distinct metric recording problems reported; \
                     further ones are skipped silently"
                ),
            );
        }
        _ => {}
    }
}

/// A `tracing` warning when a subscriber can take it; otherwise (no subscriber, or called from
/// inside a layer, where `tracing` drops re-entrant events) one line on stderr.
fn emit(reason: &'static str, message: &str) {
    let no_subscriber =
        tracing::dispatcher::get_default(|d| d.is::<tracing_core::subscriber::NoSubscriber>());
    if no_subscriber {
        eprintln!("WARN {DIAGNOSTICS_TARGET}: {message}");
    } else {
        tracing::warn!(target: DIAGNOSTICS_TARGET, reason, "{message}");
    }
}
