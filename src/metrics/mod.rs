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
//! 1. **Lens's own instrument families** ([below](#instrument-families)): fill a struct of optional values and
//!    call `record`. Only the fields you set are recorded; the instruments are created on first
//!    use and cached in an [`Instruments`] (the handle holds one: [`Telemetry::instruments`]).
//!
//!    ```
//!    use nemo_lens::metrics::{InferenceMetrics, TrainingMetrics};
//!    # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//!    TrainingMetrics { loss: Some(2.31), step_duration_s: Some(0.84), ..Default::default() }
//!        .record(telemetry.instruments());
//!    InferenceMetrics { request_duration_s: Some(0.5), model: Some("llama"), input_tokens: Some(10),
//!        ..Default::default() }
//!        .record(telemetry.instruments());
//!    ```
//!
//! 2. **Registered metric groups** ([below](#metric-groups)): a library declares its metrics once
//!    ([`register_metric_group`]) and records them by key ([`Instruments::record`]). Recording
//!    never fails: an unknown group or key is reported once and skipped.
//!
//!    ```
//!    use nemo_lens::Overwrite;
//!    use nemo_lens::metrics::{MetricSpec, register_metric_group};
//!    # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//!    register_metric_group("doc_rl", [
//!        MetricSpec::gauge("reward", "doc_rl.reward.mean"),
//!        MetricSpec::histogram("gen_ms", "doc_rl.generation.duration").with_unit("ms"),
//!    ], Overwrite::No).unwrap();
//!    telemetry.instruments().record("doc_rl", [("reward", 0.7), ("gen_ms", 1250.0)], &[]);
//!    ```
//!
//! 3. **Fields of `tracing` events** ([`EventMetricsLayer`]): with [`Telemetry::metrics_layer`] in the
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
//! skipped. The report is a `tracing` warning with target `nemo_lens::metrics`; that target is one of the [internal targets](crate::LensLayer#internal-targets),
//! so the warning reaches your `fmt` layer but is never exported as telemetry itself. Where
//! `tracing` cannot deliver it (no subscriber is installed, or the problem is found inside
//! [`EventMetricsLayer`], where `tracing` drops re-entrant events) it is one `WARN
//! nemo_lens::metrics: …` line on stderr instead. At most 1,024 distinct
//! warnings are remembered, so a loop inventing new keys cannot grow memory. Registration errors
//! ([`register_metric_group`]) are typed [`LensError`](crate::LensError)s, since they happen at
//! start-up.
//!
//! # Instrument families
//!
//! Lens's families: inference (`gen_ai.*`), RL (`rl.*`), Gym (`gym.*`) and training (`dl.*`),
//! each a struct of optional values with a `record` method.
//!
//! This is the Rust form of the Python `record_inference_metrics(meter, request_duration_s=…,
//! …)`, `record_rl_metrics` and `record_gym_metrics`: keyword arguments become fields, `None`
//! means *not recorded*, and `..Default::default()` fills the rest.
//!
//! ```
//! use nemo_lens::metrics::{GymMetrics, Instruments, RlMetrics};
//! use opentelemetry::metrics::MeterProvider as _;
//! use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
//!
//! let exporter = InMemoryMetricExporter::default();
//! let provider = SdkMeterProvider::builder()
//!     .with_reader(PeriodicReader::builder(exporter.clone()).build())
//!     .build();
//! let instruments = Instruments::new(provider.meter("nemo.lens"));
//!
//! RlMetrics { reward_mean: Some(0.85), generation_duration_ms: Some(450.0), ..Default::default() }
//!     .record(&instruments);
//! GymMetrics { active_servers: Some(4), ..Default::default() }.record(&instruments);
//!
//! provider.force_flush()?;
//! let batches = exporter.get_finished_metrics()?;
//! let names: Vec<&str> = batches[0].scope_metrics().flat_map(|s| s.metrics()).map(|m| m.name()).collect();
//! assert!(names.contains(&"rl.reward.mean") && names.contains(&"gym.servers.active"));
//! assert!(!names.contains(&"rl.kl_divergence")); // never set, never created
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Instrument caching
//!
//! Python caches each family's instruments per meter in a `WeakKeyDictionary`. An OpenTelemetry
//! [`Meter`] in Rust has no identity to key a cache on, so the cache is a value you hold:
//! [`Instruments`], one per meter. Each family's instruments are created together the first
//! time that family is recorded and reused afterwards; recording is then a few atomic
//! operations in the SDK, with no allocation beyond the attribute values. The
//! [`Telemetry`](crate::Telemetry) handle holds one for its meter ([`Telemetry::instruments`]),
//! and every `record` accepts anything that is `AsRef<Instruments>`, the handle included.
//!
//! ## The families
//!
//! | struct | instrument | kind | unit | attributes |
//! |---|---|---|---|---|
//! | [`InferenceMetrics`] | `gen_ai.server.request.duration` | histogram (f64) | `s` | operation, provider, model |
//! | | `gen_ai.client.token.usage` | histogram (u64) | `{token}` | the above + `gen_ai.token.type` = `input` / `output` |
//! | [`RlMetrics`] | `rl.reward.mean`, `rl.kl_divergence`, `rl.policy_loss`, `rl.value_loss`, `rl.entropy`, `rl.response_length.mean`, `rl.grad_norm`, `rl.learning_rate` | gauge (f64) | | none |
//! | | `rl.throughput.tokens_per_sec` | gauge (f64) | `{token}/s` | none |
//! | | `rl.generation.duration_ms`, `rl.rollout.duration_ms` | histogram (f64) | `ms` | none |
//! | [`GymMetrics`] | `gym.server.request_duration_ms`, `gym.rollout.duration_ms`, `gym.verify.duration_ms` | histogram (f64) | `ms` | none |
//! | | `gym.verify.success_rate` | gauge (f64) | none (as Python) | none |
//! | | `gym.servers.active` | gauge (u64) | none (as Python) | none |
//! | [`TrainingMetrics`] | `dl.step.duration` | histogram (f64) | `s` | yours |
//! | | `dl.loss`, `dl.grad_norm`, `dl.learning_rate` | gauge (f64) | | yours |
//! | | `dl.throughput_tokens_per_sec` | gauge (f64) | `{token}/s` | yours |
//! | | `dl.throughput_tflops` | gauge (f64) | `TFLOP/s` | yours |
//!
//! Attributes are the sort of thing that takes tens to hundreds of values (model name, phase);
//! never put the step number or a request id on a metric.
//!
//!
//! # Metric groups
//!
//! A library (an RL framework, a data loader) owns its metric names. It declares them at
//! start-up as [`MetricSpec`]s under a *group* with [`register_metric_group`], then records
//! whichever of them it has values for with [`Instruments::record`], as Python NeMo Lens's
//! `instruments.registry` (nightly):
//!
//! ```
//! use nemo_lens::Overwrite;
//! use nemo_lens::metrics::{MetricSpec, register_metric_group};
//! # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//!
//! register_metric_group("doc_loader", [
//!     MetricSpec::counter("batches", "loader.batches").with_unit("{batch}"),
//!     MetricSpec::histogram("wait_ms", "loader.wait.duration")
//!         .with_unit("ms")
//!         .with_description("Time the trainer waited for a batch."),
//!     MetricSpec::up_down_counter("queue", "loader.queue.depth"),
//! ], Overwrite::No)?;
//!
//! // In the loop: only the keys you have values for; `None` is skipped.
//! let wait_ms: Option<f64> = Some(3.5);
//! let instruments = telemetry.instruments();
//! instruments.record("doc_loader", [("batches", Some(1.0)), ("wait_ms", wait_ms)], &[]);
//! # Ok::<(), nemo_lens::LensError>(())
//! ```
//!
//! ## Errors and warnings
//!
//! Registration happens once, at start-up, so its mistakes are typed errors
//! ([`LensError::Registry`](crate::LensError::Registry)): an empty group, no specs, an empty key or name, a key declared
//! twice, or a group that is already registered (unless [`Overwrite::Yes`](crate::Overwrite)).
//! A group, once registered, stays for the life of the process; replace it with
//! `Overwrite::Yes`.
//!
//! Recording happens in the training loop, so it **never** returns an error: an unknown group,
//! an unknown key, or a negative value for a counter is reported once per
//! `(reason, group, key)` (see [the metrics module](crate::metrics#never-hurting-the-trainer))
//! and skipped.
//!
//! ## Instruments
//!
//! Every spec becomes an `f64` instrument of its kind, created the first time it is
//! recorded through an [`Instruments`] cache and reused afterwards. Re-registering a group with
//! `Overwrite::Yes` takes effect for the next record.
//!
//! [`Telemetry::instruments`]: crate::Telemetry::instruments
//! [`Telemetry::metrics_layer`]: crate::Telemetry::metrics_layer

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::metrics::{Meter, MeterProvider as _, NoopMeterProvider};
use parking_lot::Mutex;

mod events;
mod families;
mod registry;

pub use events::EventMetricsLayer;
pub use families::{GymMetrics, InferenceMetrics, RlMetrics, TrainingMetrics};
pub use registry::{MetricSpec, register_metric_group};

/// Lazily created, cached instruments of one [`Meter`] (see
/// [instrument caching](crate::metrics#instrument-caching)).
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
pub(crate) const DIAGNOSTICS_TARGET: &str = "nemo_lens::metrics";

/// How many distinct recording problems are remembered (and so warned about) per process.
pub(crate) const MAX_DISTINCT_WARNINGS: usize = 1024;

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
