//! The metric-group registry: `register_metric_group`, `record_metrics`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, UpDownCounter};
use parking_lot::RwLock;

use super::Instruments;
use super::warn_once;
use crate::error::{LensError, Result};

/// What kind of instrument a [`MetricSpec`] becomes, and how a value is applied.
///
/// | kind | instrument | a value is |
/// |---|---|---|
/// | `Gauge` | gauge | set (last value wins) |
/// | `Histogram` | histogram | recorded |
/// | `Counter` | monotonic counter | added (must be ≥ 0) |
/// | `UpDownCounter` | up-down counter | added |
///
/// ```
/// use nemo_lens::metrics::MetricKind;
/// assert_eq!("up_down_counter".parse::<MetricKind>().unwrap(), MetricKind::UpDownCounter);
/// let err = "summary".parse::<MetricKind>().unwrap_err().to_string();
/// assert!(err.contains("gauge") && err.contains("up_down_counter"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    /// A gauge (the default, as in Python).
    #[default]
    Gauge,
    /// A histogram.
    Histogram,
    /// A monotonic counter.
    Counter,
    /// An up-down counter.
    UpDownCounter,
}

impl MetricKind {
    /// Every kind, in Python's `METRIC_KINDS` spelling.
    pub const ACCEPTED: &'static str = "'gauge', 'histogram', 'counter', 'up_down_counter'";

    /// The Python spelling (`gauge`, `histogram`, `counter`, `up_down_counter`).
    ///
    /// ```
    /// assert_eq!(nemo_lens::metrics::MetricKind::UpDownCounter.as_str(), "up_down_counter");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
            MetricKind::Counter => "counter",
            MetricKind::UpDownCounter => "up_down_counter",
        }
    }
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MetricKind {
    type Err = LensError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gauge" => Ok(MetricKind::Gauge),
            "histogram" => Ok(MetricKind::Histogram),
            "counter" => Ok(MetricKind::Counter),
            "up_down_counter" => Ok(MetricKind::UpDownCounter),
            _ => Err(LensError::InvalidArgument(format!(
                "MetricSpec.kind must be one of {}, got '{s}'",
                Self::ACCEPTED
            ))),
        }
    }
}

/// One metric of a group: the key you record by, the instrument name, kind, unit, description.
///
/// ```
/// use nemo_lens::metrics::{MetricKind, MetricSpec};
/// let spec = MetricSpec::new("gen_ms", "rl.generation.duration_ms", MetricKind::Histogram)
///     .with_unit("ms")
///     .with_description("Duration of text generation.");
/// assert_eq!(spec.key, "gen_ms");
/// assert_eq!(spec.unit, "ms");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MetricSpec {
    /// The key passed to [`record_metrics`].
    pub key: String,
    /// The instrument name (`rl.reward.mean`).
    pub name: String,
    /// The instrument kind.
    pub kind: MetricKind,
    /// The unit (UCUM, e.g. `ms`, `{token}/s`), empty for none.
    pub unit: String,
    /// A description, empty for none.
    pub description: String,
}

impl MetricSpec {
    /// A spec with no unit and no description.
    ///
    /// ```
    /// use nemo_lens::metrics::{MetricKind, MetricSpec};
    /// let spec = MetricSpec::new("reward_mean", "rl.reward.mean", MetricKind::Gauge);
    /// assert_eq!((spec.unit.as_str(), spec.description.as_str()), ("", ""));
    /// ```
    pub fn new(key: impl Into<String>, name: impl Into<String>, kind: MetricKind) -> Self {
        MetricSpec {
            key: key.into(),
            name: name.into(),
            kind,
            unit: String::new(),
            description: String::new(),
        }
    }

    /// Sets the unit.
    ///
    /// ```
    /// use nemo_lens::metrics::{MetricKind, MetricSpec};
    /// let spec = MetricSpec::new("tps", "rl.throughput.tokens_per_sec", MetricKind::Gauge).with_unit("{token}/s");
    /// assert_eq!(spec.unit, "{token}/s");
    /// ```
    pub fn with_unit(mut self, unit: impl Into<String>) -> Self {
        self.unit = unit.into();
        self
    }

    /// Sets the description.
    ///
    /// ```
    /// use nemo_lens::metrics::{MetricKind, MetricSpec};
    /// let spec = MetricSpec::new("kl", "rl.kl_divergence", MetricKind::Gauge).with_description("KL to the reference.");
    /// assert_eq!(spec.description, "KL to the reference.");
    /// ```
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

type Groups = BTreeMap<String, Arc<[MetricSpec]>>;

fn groups() -> &'static RwLock<Groups> {
    static GROUPS: OnceLock<RwLock<Groups>> = OnceLock::new();
    GROUPS.get_or_init(Default::default)
}

/// Declares the metrics of `group`.
///
/// # Errors
///
/// [`LensError::Registry`] when `group` is empty, `specs` is empty, a spec has an empty key or
/// name, two specs share a key, or `group` is already registered and `allow_override` is
/// false. Nothing is registered on error.
///
/// ```
/// use nemo_lens::metrics::{MetricKind, MetricSpec, register_metric_group};
/// let spec = || MetricSpec::new("k", "doc.reg.k", MetricKind::Gauge);
/// register_metric_group("doc_reg", [spec()], false).unwrap();
/// assert!(register_metric_group("doc_reg", [spec()], false).unwrap_err().to_string().contains("already registered"));
/// register_metric_group("doc_reg", [spec().with_unit("ms")], true).unwrap(); // replaced
/// assert!(register_metric_group("doc_reg2", [spec(), spec()], false).is_err()); // duplicate key
/// ```
pub fn register_metric_group(
    group: &str,
    specs: impl IntoIterator<Item = MetricSpec>,
    allow_override: bool,
) -> Result<()> {
    let specs: Vec<MetricSpec> = specs.into_iter().collect();
    if group.trim().is_empty() {
        return Err(LensError::Registry(
            "metric group name must be a non-empty string".into(),
        ));
    }
    if specs.is_empty() {
        return Err(LensError::Registry(format!(
            "metric group '{group}' must declare at least one MetricSpec"
        )));
    }
    for (i, spec) in specs.iter().enumerate() {
        if spec.key.trim().is_empty() {
            return Err(LensError::Registry(format!(
                "metric group '{group}': MetricSpec.key must be a non-empty string (spec {i}, name '{}')",
                spec.name
            )));
        }
        if spec.name.trim().is_empty() {
            return Err(LensError::Registry(format!(
                "metric group '{group}': MetricSpec.name must be a non-empty string (key '{}')",
                spec.key
            )));
        }
        if specs[..i].iter().any(|s| s.key == spec.key) {
            return Err(LensError::Registry(format!(
                "metric group '{group}' declares key '{}' twice",
                spec.key
            )));
        }
    }
    let mut groups = groups().write();
    if groups.contains_key(group) && !allow_override {
        return Err(LensError::Registry(format!(
            "metric group '{group}' is already registered; pass allow_override = true to replace it"
        )));
    }
    groups.insert(group.to_owned(), specs.into());
    Ok(())
}

/// Removes `group`.
///
/// # Errors
///
/// [`LensError::Registry`] when `group` is not registered.
///
/// ```
/// use nemo_lens::metrics::{MetricKind, MetricSpec, register_metric_group, unregister_metric_group};
/// register_metric_group("doc_unreg", [MetricSpec::new("k", "doc.unreg.k", MetricKind::Gauge)], false).unwrap();
/// unregister_metric_group("doc_unreg").unwrap();
/// assert!(unregister_metric_group("doc_unreg").is_err());
/// ```
pub fn unregister_metric_group(group: &str) -> Result<()> {
    match groups().write().remove(group) {
        Some(_) => Ok(()),
        None => Err(LensError::Registry(format!(
            "metric group '{group}' is not registered"
        ))),
    }
}

/// Every registered group and its specs, sorted by group.
///
/// ```
/// use nemo_lens::metrics::{MetricKind, MetricSpec, register_metric_group, registered_metric_groups};
/// register_metric_group("doc_list", [MetricSpec::new("k", "doc.list.k", MetricKind::Counter)], false).unwrap();
/// let groups = registered_metric_groups();
/// assert_eq!(groups["doc_list"][0].kind, MetricKind::Counter);
/// ```
pub fn registered_metric_groups() -> BTreeMap<String, Vec<MetricSpec>> {
    groups()
        .read()
        .iter()
        .map(|(g, specs)| (g.clone(), specs.to_vec()))
        .collect()
}

/// Records `values` (`(key, value)` pairs; `None` values are skipped) of `group` with
/// `attributes`. Never fails, never panics: an unknown group or key, or a negative value for a
/// [`MetricKind::Counter`], is warned about once and skipped.
///
/// `to` is an [`Instruments`] cache or anything holding one, such as the
/// [`Telemetry`](crate::Telemetry) handle.
///
/// ```
/// use nemo_lens::metrics::{MetricKind, MetricSpec, record_metrics, register_metric_group};
/// use opentelemetry::KeyValue;
/// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// register_metric_group("doc_rec", [MetricSpec::new("reward", "doc.rec.reward", MetricKind::Gauge)], false).unwrap();
/// let env = [KeyValue::new("env", "math")];
/// record_metrics(telemetry.instruments(), "doc_rec", [("reward", 0.7)], &env);
/// record_metrics(telemetry.instruments(), "doc_rec", [("typo", 1.0)], &env); // warned once, skipped
/// record_metrics(telemetry.instruments(), "no_such_group", [("reward", 1.0)], &[]); // warned once, skipped
/// ```
pub fn record_metrics<K, V>(
    to: &impl AsRef<Instruments>,
    group: &str,
    values: impl IntoIterator<Item = (K, V)>,
    attributes: &[KeyValue],
) where
    K: AsRef<str>,
    V: Into<Option<f64>>,
{
    let Some(specs) = groups().read().get(group).cloned() else {
        warn_once("unknown metric group", group, "", || {
            format!("record_metrics: metric group '{group}' is not registered; values skipped")
        });
        return;
    };
    let instruments = to.as_ref();
    for (key, value) in values {
        let key = key.as_ref();
        let Some(value) = value.into() else {
            continue;
        };
        let Some(spec) = specs.iter().find(|s| s.key == key) else {
            warn_once("unknown metric key", group, key, || {
                format!("record_metrics: metric group '{group}' has no key '{key}'; value skipped")
            });
            continue;
        };
        if spec.kind == MetricKind::Counter && (value < 0.0 || value.is_nan()) {
            warn_once("negative counter value", group, key, || {
                format!(
                    "record_metrics: '{key}' of group '{group}' is a counter ({}), which only \
                     accepts values >= 0; got {value}, skipped",
                    spec.name
                )
            });
            continue;
        }
        instruments
            .registered()
            .record(instruments, spec, value, attributes);
    }
}

/// An instrument created from a [`MetricSpec`].
enum Instrument {
    Gauge(Gauge<f64>),
    Histogram(Histogram<f64>),
    Counter(Counter<f64>),
    UpDownCounter(UpDownCounter<f64>),
}

impl Instrument {
    fn record(&self, value: f64, attributes: &[KeyValue]) {
        match self {
            Instrument::Gauge(g) => g.record(value, attributes),
            Instrument::Histogram(h) => h.record(value, attributes),
            Instrument::Counter(c) => c.add(value, attributes),
            Instrument::UpDownCounter(c) => c.add(value, attributes),
        }
    }
}

/// The registry instruments of one [`Instruments`], by spec (so an overridden spec gets a
/// new instrument). Bounded by the specs ever registered.
#[derive(Default)]
pub(super) struct Cache(RwLock<HashMap<MetricSpec, Instrument>>);

impl Cache {
    fn record(
        &self,
        instruments: &Instruments,
        spec: &MetricSpec,
        value: f64,
        attributes: &[KeyValue],
    ) {
        if let Some(i) = self.0.read().get(spec) {
            i.record(value, attributes);
            return;
        }
        let meter = instruments.meter();
        let name = spec.name.clone();
        let (unit, description) = (spec.unit.clone(), spec.description.clone());
        let instrument = match spec.kind {
            MetricKind::Gauge => Instrument::Gauge(
                meter
                    .f64_gauge(name)
                    .with_unit(unit)
                    .with_description(description)
                    .build(),
            ),
            MetricKind::Histogram => Instrument::Histogram(
                meter
                    .f64_histogram(name)
                    .with_unit(unit)
                    .with_description(description)
                    .build(),
            ),
            MetricKind::Counter => Instrument::Counter(
                meter
                    .f64_counter(name)
                    .with_unit(unit)
                    .with_description(description)
                    .build(),
            ),
            MetricKind::UpDownCounter => Instrument::UpDownCounter(
                meter
                    .f64_up_down_counter(name)
                    .with_unit(unit)
                    .with_description(description)
                    .build(),
            ),
        };
        self.0
            .write()
            .entry(spec.clone())
            .or_insert(instrument)
            .record(value, attributes);
    }
}
