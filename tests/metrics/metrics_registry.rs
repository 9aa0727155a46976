//! The metric-group registry: typed registration errors, listing and removal, recording by key
//! into a real meter provider, and "warn once, skip, never fail" recording.
//!
//! The registry is process-wide and tests run in parallel, so every test uses its own groups.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens::metrics::{
    DIAGNOSTICS_TARGET, MetricKind, MetricSpec, record_metrics, register_metric_group,
    registered_metric_groups, unregister_metric_group,
};
use nemo_lens::{LensConfig, LensError, Telemetry};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

use common::metrics::{collect, exporting, metric};
use nemo_lens_test_support as common;

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
    let ok = || MetricSpec::new("k", "reg_err.k", MetricKind::Gauge);
    let msg = registry_err(register_metric_group("", [ok()], false));
    assert!(msg.contains("non-empty"), "{msg}");
    let msg = registry_err(register_metric_group("reg_err_empty", [], false));
    assert!(msg.contains("at least one"), "{msg}");
    let msg = registry_err(register_metric_group(
        "reg_err_key",
        [MetricSpec::new("", "reg_err.x", MetricKind::Gauge)],
        false,
    ));
    assert!(msg.contains("MetricSpec.key"), "{msg}");
    let msg = registry_err(register_metric_group(
        "reg_err_name",
        [MetricSpec::new("x", " ", MetricKind::Gauge)],
        false,
    ));
    assert!(msg.contains("MetricSpec.name"), "{msg}");
    let msg = registry_err(register_metric_group("reg_err_dup", [ok(), ok()], false));
    assert!(msg.contains("'k' twice"), "{msg}");

    let groups = registered_metric_groups();
    for g in [
        "",
        "reg_err_empty",
        "reg_err_key",
        "reg_err_name",
        "reg_err_dup",
    ] {
        assert!(!groups.contains_key(g), "{g} was registered");
    }
    let err = "summary".parse::<MetricKind>().unwrap_err().to_string();
    assert!(
        err.contains("'up_down_counter'") && err.contains("summary"),
        "{err}"
    );
}

#[test]
fn groups_are_listed_replaced_only_with_override_and_removed() {
    let v1 = MetricSpec::new("a", "reg_list.a", MetricKind::Histogram).with_unit("ms");
    register_metric_group("reg_list", [v1.clone()], false).unwrap();
    assert_eq!(registered_metric_groups()["reg_list"], vec![v1.clone()]);

    let v2 = MetricSpec::new("b", "reg_list.b", MetricKind::Counter).with_description("B.");
    let msg = registry_err(register_metric_group("reg_list", [v2.clone()], false));
    assert!(
        msg.contains("already registered") && msg.contains("allow_override"),
        "{msg}"
    );
    assert_eq!(registered_metric_groups()["reg_list"], vec![v1]);

    register_metric_group("reg_list", [v2.clone()], true).unwrap();
    assert_eq!(registered_metric_groups()["reg_list"], vec![v2]);

    unregister_metric_group("reg_list").unwrap();
    assert!(!registered_metric_groups().contains_key("reg_list"));
    let msg = registry_err(unregister_metric_group("reg_list"));
    assert!(msg.contains("not registered"), "{msg}");
}

#[test]
fn every_kind_records_by_key_with_units_and_attributes() {
    register_metric_group(
        "reg_kinds",
        [
            MetricSpec::new("reward", "reg_kinds.reward", MetricKind::Gauge),
            MetricSpec::new("gen_ms", "reg_kinds.gen", MetricKind::Histogram)
                .with_unit("ms")
                .with_description("Generation time."),
            MetricSpec::new("samples", "reg_kinds.samples", MetricKind::Counter)
                .with_unit("{sample}"),
            MetricSpec::new("inflight", "reg_kinds.inflight", MetricKind::UpDownCounter),
        ],
        false,
    )
    .unwrap();
    let (t, exporter) = exporting();
    let env = [KeyValue::new("env", "math")];
    record_metrics(
        &t,
        "reg_kinds",
        [
            ("reward", Some(0.25)),
            ("gen_ms", Some(120.0)),
            ("samples", Some(32.0)),
            ("inflight", Some(3.0)),
        ],
        &env,
    );
    record_metrics(
        t.instruments(),
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
        [MetricSpec::new("x", "reg_override.v1", MetricKind::Gauge)],
        false,
    )
    .unwrap();
    let (t, exporter) = exporting();
    record_metrics(&t, "reg_override", [("x", 1.0)], &[]);
    register_metric_group(
        "reg_override",
        [MetricSpec::new(
            "x",
            "reg_override.v2",
            MetricKind::Histogram,
        )],
        true,
    )
    .unwrap();
    record_metrics(&t, "reg_override", [("x", 2.0)], &[]);
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
            MetricSpec::new("ok", "reg_warn.ok", MetricKind::Gauge),
            MetricSpec::new("steps", "reg_warn.steps", MetricKind::Counter),
        ],
        false,
    )
    .unwrap();
    let (t, exporter) = exporting();
    let warnings = Warnings::default();
    warnings.during(|| {
        for _ in 0..3 {
            record_metrics(&t, "reg_warn_missing", [("ok", 1.0)], &[]);
            record_metrics(&t, "reg_warn", [("typo", 1.0), ("ok", 5.0)], &[]);
            record_metrics(&t, "reg_warn", [("steps", -2.0)], &[]);
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
        [MetricSpec::new(
            "ok",
            "reg_disabled.ok",
            MetricKind::Histogram,
        )],
        false,
    )
    .unwrap();
    let t = Telemetry::builder(LensConfig::default()).build().unwrap();
    let warnings = Warnings::default();
    warnings.during(|| record_metrics(&t, "reg_disabled", [("ok", f64::NAN)], &[]));
    assert!(warnings.taken().is_empty());
}
