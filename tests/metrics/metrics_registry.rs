//! The metric-group registry: typed registration errors, recording by key into a real meter
//! provider, and "warn once, skip, never fail" recording (listing and removal are unit tests in
//! `src/metrics/`).
//!
//! The registry is process-wide and tests run in parallel, so every test uses its own groups.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens::metrics::{MetricSpec, register_metric_group};
use nemo_lens::{LensConfig, LensError, Overwrite, Telemetry};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

use common::metrics::{collect, exporting, metric};
use nemo_lens_test_support as common;

/// The `tracing` target of the metrics diagnostics.
const DIAGNOSTICS_TARGET: &str = "nemo_lens::metrics";

/// Collects the messages of warnings emitted under the metrics diagnostics target.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _cx: Context<'_, S>) {
        if event.metadata().target() != DIAGNOSTICS_TARGET {
            return;
        }
        struct Msg(String);
        impl tracing::field::Visit for Msg {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = Msg(String::new());
        event.record(&mut m);
        self.0.lock().unwrap().push(m.0);
    }
}

impl Warnings {
    fn during(&self, f: impl FnOnce()) {
        tracing::subscriber::with_default(tracing_subscriber::registry().with(self.clone()), f);
    }
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn registry_err(r: Result<(), LensError>) -> String {
    match r {
        Err(e @ LensError::Registry(_)) => e.to_string(),
        other => panic!("expected LensError::Registry, got {other:?}"),
    }
}

#[test]
fn registration_mistakes_are_typed_errors_and_register_nothing() {
    let ok = || MetricSpec::gauge("k", "reg_err.k");
    let msg = registry_err(register_metric_group("", [ok()], Overwrite::No));
    assert!(msg.contains("non-empty"), "{msg}");
    let msg = registry_err(register_metric_group("reg_err_empty", [], Overwrite::No));
    assert!(msg.contains("at least one"), "{msg}");
    let msg = registry_err(register_metric_group(
        "reg_err_key",
        [MetricSpec::gauge("", "reg_err.x")],
        Overwrite::No,
    ));
    assert!(msg.contains("MetricSpec.key"), "{msg}");
    let msg = registry_err(register_metric_group(
        "reg_err_name",
        [MetricSpec::gauge("x", " ")],
        Overwrite::No,
    ));
    assert!(msg.contains("MetricSpec.name"), "{msg}");
    let msg = registry_err(register_metric_group(
        "reg_err_dup",
        [ok(), ok()],
        Overwrite::No,
    ));
    assert!(msg.contains("'k' twice"), "{msg}");

    // Nothing was registered: each name is still free.
    for g in [
        "reg_err_empty",
        "reg_err_key",
        "reg_err_name",
        "reg_err_dup",
    ] {
        register_metric_group(g, [ok()], Overwrite::No).unwrap();
    }
}

#[test]
fn every_kind_records_by_key_with_units_and_attributes() {
    register_metric_group(
        "reg_kinds",
        [
            MetricSpec::gauge("reward", "reg_kinds.reward"),
            MetricSpec::histogram("gen_ms", "reg_kinds.gen")
                .with_unit("ms")
                .with_description("Generation time."),
            MetricSpec::counter("samples", "reg_kinds.samples").with_unit("{sample}"),
            MetricSpec::up_down_counter("inflight", "reg_kinds.inflight"),
        ],
        Overwrite::No,
    )
    .unwrap();
    let (t, exporter) = exporting();
    let env = [KeyValue::new("env", "math")];
    t.instruments().record(
        "reg_kinds",
        [
            ("reward", Some(0.25)),
            ("gen_ms", Some(120.0)),
            ("samples", Some(32.0)),
            ("inflight", Some(3.0)),
        ],
        &env,
    );
    t.instruments().record(
        "reg_kinds",
        [
            ("reward", Some(0.75)),
            ("samples", Some(32.0)),
            ("inflight", Some(-1.0)),
            ("gen_ms", None),
        ],
        &env,
    );
    let rm = collect(&t, &exporter).unwrap();
    let env_attr = |it: &mut dyn Iterator<Item = &KeyValue>| {
        let v: Vec<(String, Value)> = it
            .map(|kv| (kv.key.to_string(), kv.value.clone()))
            .collect();
        assert_eq!(v, vec![("env".to_owned(), Value::from("math".to_owned()))]);
    };

    let m = metric(&rm, "reg_kinds.reward");
    let AggregatedMetrics::F64(MetricData::Gauge(g)) = m.data() else {
        panic!("gauge")
    };
    let p = g.data_points().next().unwrap();
    env_attr(&mut p.attributes());
    assert_eq!(p.value(), 0.75);

    let m = metric(&rm, "reg_kinds.gen");
    assert_eq!((m.unit(), m.description()), ("ms", "Generation time."));
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
        panic!("histogram")
    };
    let p = h.data_points().next().unwrap();
    assert_eq!((p.count(), p.sum()), (1, 120.0)); // the `None` was skipped

    let m = metric(&rm, "reg_kinds.samples");
    assert_eq!(m.unit(), "{sample}");
    let AggregatedMetrics::F64(MetricData::Sum(sum)) = m.data() else {
        panic!("sum")
    };
    assert!(sum.is_monotonic());
    assert_eq!(sum.data_points().next().unwrap().value(), 64.0);

    let m = metric(&rm, "reg_kinds.inflight");
    let AggregatedMetrics::F64(MetricData::Sum(sum)) = m.data() else {
        panic!("sum")
    };
    assert!(!sum.is_monotonic());
    assert_eq!(sum.data_points().next().unwrap().value(), 2.0);
    t.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn an_overridden_spec_gets_a_new_instrument() {
    register_metric_group(
        "reg_override",
        [MetricSpec::gauge("x", "reg_override.v1")],
        Overwrite::No,
    )
    .unwrap();
    let (t, exporter) = exporting();
    t.instruments().record("reg_override", [("x", 1.0)], &[]);
    register_metric_group(
        "reg_override",
        [MetricSpec::histogram("x", "reg_override.v2")],
        Overwrite::Yes,
    )
    .unwrap();
    t.instruments().record("reg_override", [("x", 2.0)], &[]);
    let rm = collect(&t, &exporter).unwrap();
    assert!(matches!(
        metric(&rm, "reg_override.v2").data(),
        AggregatedMetrics::F64(MetricData::Histogram(_))
    ));
}

#[test]
fn unknown_groups_and_keys_are_warned_about_once_and_skipped() {
    register_metric_group(
        "reg_warn",
        [
            MetricSpec::gauge("ok", "reg_warn.ok"),
            MetricSpec::counter("steps", "reg_warn.steps"),
        ],
        Overwrite::No,
    )
    .unwrap();
    let (t, exporter) = exporting();
    let warnings = Warnings::default();
    warnings.during(|| {
        for _ in 0..3 {
            t.instruments()
                .record("reg_warn_missing", [("ok", 1.0)], &[]);
            t.instruments()
                .record("reg_warn", [("typo", 1.0), ("ok", 5.0)], &[]);
            t.instruments().record("reg_warn", [("steps", -2.0)], &[]);
        }
    });
    let got = warnings.taken();
    assert_eq!(got.len(), 3, "{got:#?}");
    assert!(
        got[0].contains("'reg_warn_missing' is not registered"),
        "{got:#?}"
    );
    assert!(got[1].contains("has no key 'typo'"), "{got:#?}");
    assert!(got[2].contains("only accepts values >= 0"), "{got:#?}");

    let rm = collect(&t, &exporter).unwrap();
    let names: Vec<&str> = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| m.name())
        .collect();
    // The good key of the same call was recorded; the negative counter value was not.
    assert_eq!(names, vec!["reg_warn.ok"]);
}

#[test]
fn recording_on_a_disabled_handle_is_silent_and_harmless() {
    register_metric_group(
        "reg_disabled",
        [MetricSpec::histogram("ok", "reg_disabled.ok")],
        Overwrite::No,
    )
    .unwrap();
    let t = Telemetry::builder(LensConfig::default()).build().unwrap();
    let warnings = Warnings::default();
    warnings.during(|| {
        t.instruments()
            .record("reg_disabled", [("ok", f64::NAN)], &[])
    });
    assert!(warnings.taken().is_empty());
}
