//! The metric-group registry: `register_metric_group`, `Instruments::record`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, UpDownCounter};
use parking_lot::RwLock;

use super::Instruments;
use super::warn_once;
use crate::Overwrite;
use crate::error::{LensError, Result};

/// What kind of instrument a [`MetricSpec`] becomes, and how a value is applied (see the
/// constructors of [`MetricSpec`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum MetricKind {
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
    pub(crate) const ACCEPTED: &'static str = "'gauge', 'histogram', 'counter', 'up_down_counter'";

    /// The Python spelling (`gauge`, `histogram`, `counter`, `up_down_counter`).
    pub(crate) fn as_str(self) -> &'static str {
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

/// One metric of a group: the key you record by, the instrument name, its kind, unit and
/// description. One constructor per kind, as Python's `MetricSpec(kind=...)`:
///
/// | constructor | instrument | a value is |
/// |---|---|---|
/// | [`MetricSpec::gauge`] | gauge | set (last value wins) |
/// | [`MetricSpec::histogram`] | histogram | recorded |
/// | [`MetricSpec::counter`] | monotonic counter | added (must be ≥ 0) |
/// | [`MetricSpec::up_down_counter`] | up-down counter | added |
///
/// ```
/// use nemo_lens::metrics::MetricSpec;
/// let spec = MetricSpec::histogram("gen_ms", "rl.generation.duration_ms")
///     .with_unit("ms")
///     .with_description("Duration of text generation.");
/// # let _ = spec;
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MetricSpec {
    /// The key passed to [`Instruments::record`].
    pub(crate) key: String,
    /// The instrument name (`rl.reward.mean`).
    pub(crate) name: String,
    /// The instrument kind.
    pub(crate) kind: MetricKind,
    /// The unit (UCUM, e.g. `ms`, `{token}/s`), empty for none.
    pub(crate) unit: String,
    /// A description, empty for none.
    pub(crate) description: String,
}

impl MetricSpec {
    fn of(kind: MetricKind, key: impl Into<String>, name: impl Into<String>) -> Self {
        MetricSpec {
            key: key.into(),
            name: name.into(),
            kind,
            unit: String::new(),
            description: String::new(),
        }
    }

    /// A gauge recorded by `key` under the instrument `name` (no unit, no description): a value
    /// is set, the last one wins.
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::gauge("reward_mean", "rl.reward.mean");
    /// # let _ = spec;
    /// ```
    pub fn gauge(key: impl Into<String>, name: impl Into<String>) -> Self {
        Self::of(MetricKind::Gauge, key, name)
    }

    /// A histogram: every value is recorded.
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::histogram("wait_ms", "loader.wait.duration");
    /// # let _ = spec;
    /// ```
    pub fn histogram(key: impl Into<String>, name: impl Into<String>) -> Self {
        Self::of(MetricKind::Histogram, key, name)
    }

    /// A monotonic counter: a value is added and must be ≥ 0 (a negative one is warned about
    /// once and skipped).
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::counter("batches", "loader.batches");
    /// # let _ = spec;
    /// ```
    pub fn counter(key: impl Into<String>, name: impl Into<String>) -> Self {
        Self::of(MetricKind::Counter, key, name)
    }

    /// An up-down counter: a value is added, either sign.
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::up_down_counter("queue", "loader.queue.depth");
    /// # let _ = spec;
    /// ```
    pub fn up_down_counter(key: impl Into<String>, name: impl Into<String>) -> Self {
        Self::of(MetricKind::UpDownCounter, key, name)
    }

    /// Sets the unit (UCUM, e.g. `ms`, `{token}/s`).
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::gauge("tps", "rl.throughput.tokens_per_sec").with_unit("{token}/s");
    /// # let _ = spec;
    /// ```
    pub fn with_unit(mut self, unit: impl Into<String>) -> Self {
        self.unit = unit.into();
        self
    }

    /// Sets the description.
    ///
    /// ```
    /// let spec = nemo_lens::metrics::MetricSpec::gauge("kl", "rl.kl_divergence").with_description("KL to the reference.");
    /// # let _ = spec;
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
/// name, two specs share a key, or `group` is already registered and `overwrite` is
/// [`Overwrite::No`]. Nothing is registered on error. With [`Overwrite::Yes`] the new specs
/// replace the group's.
///
/// ```
/// use nemo_lens::Overwrite;
/// use nemo_lens::metrics::{MetricSpec, register_metric_group};
/// let spec = || MetricSpec::gauge("k", "doc.reg.k");
/// register_metric_group("doc_reg", [spec()], Overwrite::No).unwrap();
/// let err = register_metric_group("doc_reg", [spec()], Overwrite::No).unwrap_err();
/// assert!(err.to_string().contains("already registered"));
/// register_metric_group("doc_reg", [spec().with_unit("ms")], Overwrite::Yes).unwrap(); // replaced
/// assert!(register_metric_group("doc_reg2", [spec(), spec()], Overwrite::No).is_err()); // duplicate key
/// ```
pub fn register_metric_group(
    group: &str,
    specs: impl IntoIterator<Item = MetricSpec>,
    overwrite: Overwrite,
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
    if groups.contains_key(group) && !overwrite.yes() {
        return Err(LensError::Registry(format!(
            "metric group '{group}' is already registered; pass Overwrite::Yes to replace it"
        )));
    }
    groups.insert(group.to_owned(), specs.into());
    Ok(())
}

/// Removes `group`.
#[cfg(test)]
pub(crate) fn unregister_metric_group(group: &str) -> Result<()> {
    match groups().write().remove(group) {
        Some(_) => Ok(()),
        None => Err(LensError::Registry(format!(
            "metric group '{group}' is not registered"
        ))),
    }
}

/// Every registered group and its specs, sorted by group.
#[cfg(test)]
pub(crate) fn registered_metric_groups() -> BTreeMap<String, Vec<MetricSpec>> {
    groups()
        .read()
        .iter()
        .map(|(g, specs)| (g.clone(), specs.to_vec()))
        .collect()
}

impl Instruments {
    /// Records `values` (`(key, value)` pairs; `None` values are skipped) of the metric group
    /// `group` (see [`register_metric_group`]) with `attributes`, as Python's
    /// `record_metrics`. Never fails, never panics: an unknown group or key, or a negative value
    /// for a [`MetricSpec::counter`], is warned about once and skipped.
    ///
    /// ```
    /// use nemo_lens::Overwrite;
    /// use nemo_lens::metrics::{MetricSpec, register_metric_group};
    /// use opentelemetry::KeyValue;
    /// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// register_metric_group("doc_rec", [MetricSpec::gauge("reward", "doc.rec.reward")], Overwrite::No).unwrap();
    /// let env = [KeyValue::new("env", "math")];
    /// let instruments = telemetry.instruments();
    /// instruments.record("doc_rec", [("reward", 0.7)], &env);
    /// instruments.record("doc_rec", [("typo", 1.0)], &env); // warned once, skipped
    /// instruments.record("no_such_group", [("reward", 1.0)], &[]); // warned once, skipped
    /// ```
    pub fn record<K, V>(
        &self,
        group: &str,
        values: impl IntoIterator<Item = (K, V)>,
        attributes: &[KeyValue],
    ) where
        K: AsRef<str>,
        V: Into<Option<f64>>,
    {
        record_metrics(self, group, values, attributes);
    }
}

/// The body of [`Instruments::record`].
fn record_metrics<K, V>(
    instruments: &Instruments,
    group: &str,
    values: impl IntoIterator<Item = (K, V)>,
    attributes: &[KeyValue],
) where
    K: AsRef<str>,
    V: Into<Option<f64>>,
{
    let Some(specs) = groups().read().get(group).cloned() else {
        warn_once("unknown metric group", group, "", || {
            format!("Instruments::record: metric group '{group}' is not registered; values skipped")
        });
        return;
    };
    for (key, value) in values {
        let key = key.as_ref();
        let Some(value) = value.into() else {
            continue;
        };
        let Some(spec) = specs.iter().find(|s| s.key == key) else {
            warn_once("unknown metric key", group, key, || {
                format!(
                    "Instruments::record: metric group '{group}' has no key '{key}'; value skipped"
                )
            });
            continue;
        };
        if spec.kind == MetricKind::Counter && (value < 0.0 || value.is_nan()) {
            warn_once("negative counter value", group, key, || {
                format!(
                    "Instruments::record: '{key}' of group '{group}' is a counter ({}), which only \
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

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_err(r: Result<()>) -> String {
        match r {
            Err(e @ LensError::Registry(_)) => e.to_string(),
            other => panic!("expected LensError::Registry, got {other:?}"),
        }
    }

    #[test]
    fn kinds_parse_in_python_s_spelling() {
        assert_eq!(
            "up_down_counter".parse::<MetricKind>().unwrap(),
            MetricKind::UpDownCounter
        );
        let err = "summary".parse::<MetricKind>().unwrap_err().to_string();
        assert!(
            err.contains("'up_down_counter'") && err.contains("summary"),
            "{err}"
        );
    }

    #[test]
    fn groups_are_listed_replaced_only_with_override_and_removed() {
        let v1 = MetricSpec::histogram("a", "reg_list.a").with_unit("ms");
        register_metric_group("reg_list", [v1.clone()], Overwrite::No).unwrap();
        assert_eq!(registered_metric_groups()["reg_list"], vec![v1.clone()]);

        let v2 = MetricSpec::counter("b", "reg_list.b").with_description("B.");
        let msg = registry_err(register_metric_group(
            "reg_list",
            [v2.clone()],
            Overwrite::No,
        ));
        assert!(
            msg.contains("already registered") && msg.contains("Overwrite::Yes"),
            "{msg}"
        );
        assert_eq!(registered_metric_groups()["reg_list"], vec![v1]);

        register_metric_group("reg_list", [v2.clone()], Overwrite::Yes).unwrap();
        assert_eq!(registered_metric_groups()["reg_list"], vec![v2]);

        unregister_metric_group("reg_list").unwrap();
        assert!(!registered_metric_groups().contains_key("reg_list"));
        let msg = registry_err(unregister_metric_group("reg_list"));
        assert!(msg.contains("not registered"), "{msg}");
    }
}
