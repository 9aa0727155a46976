//! Metrics from `tracing` events: `counter.*`, `monotonic_counter.*`, `histogram.*` and
//! `gauge.*` fields become instruments; the per-callsite filter keeps every other callsite away
//! from the layer; the layer is inert where no metrics are exported.

use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use tracing::Level;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::metrics::{collect, exporting, metric};

fn attrs<'a>(it: impl Iterator<Item = &'a KeyValue>) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = it
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn each_prefix_makes_its_instrument_and_other_fields_become_attributes() {
    let (t, exporter) = exporting();
    let subscriber = tracing_subscriber::registry().with(t.metrics_layer());
    tracing::subscriber::with_default(subscriber, || {
        for step in 0..3_i64 {
            tracing::info!(
                histogram.step_ms = 800.0 + step as f64,
                monotonic_counter.steps = 1_u64,
                phase = "train",
                rank = 3_i64,
                nemo.group.step = true,
                "step {step} done"
            );
        }
        tracing::info!(monotonic_counter.tokens = 512_i64);
        tracing::info!(monotonic_counter.tokens_f = 0.5);
        tracing::info!(counter.queue = 5_i64);
        tracing::info!(counter.queue = -2_i64);
        tracing::info!(counter.queue_f = 1.5);
        tracing::info!(histogram.batch = 64_u64);
        tracing::info!(histogram.batch_i = 7_i64);
        tracing::info!(gauge.mem_gib = 61.5, device = 0_i64);
        tracing::info!(gauge.temp = -5_i64);
        tracing::info!(gauge.free = 9_u64);
    });
    let rm = collect(&t, &exporter).unwrap();

    let m = metric(&rm, "step_ms");
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
        panic!("f64 histogram")
    };
    let p = h.data_points().next().unwrap();
    assert_eq!((p.count(), p.sum()), (3, 2403.0));
    // `message` (free text) and the `nemo.group.*` declaration are not attributes.
    assert_eq!(
        attrs(p.attributes()),
        vec![
            ("phase".to_owned(), Value::from("train".to_owned())),
            ("rank".to_owned(), Value::I64(3)),
        ]
    );

    let sum_u64 = |name: &str| match metric(&rm, name).data() {
        AggregatedMetrics::U64(MetricData::Sum(s)) => {
            (s.is_monotonic(), s.data_points().next().unwrap().value())
        }
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(sum_u64("steps"), (true, 3));
    assert_eq!(sum_u64("tokens"), (true, 512));
    match metric(&rm, "tokens_f").data() {
        AggregatedMetrics::F64(MetricData::Sum(s)) => assert!(s.is_monotonic()),
        other => panic!("tokens_f: {other:?}"),
    }
    match metric(&rm, "queue").data() {
        AggregatedMetrics::I64(MetricData::Sum(s)) => {
            assert!(!s.is_monotonic());
            assert_eq!(s.data_points().next().unwrap().value(), 3);
        }
        other => panic!("queue: {other:?}"),
    }
    assert!(matches!(
        metric(&rm, "queue_f").data(),
        AggregatedMetrics::F64(MetricData::Sum(_))
    ));
    assert!(matches!(
        metric(&rm, "batch").data(),
        AggregatedMetrics::U64(MetricData::Histogram(_))
    ));
    assert!(matches!(
        metric(&rm, "batch_i").data(),
        AggregatedMetrics::U64(MetricData::Histogram(_))
    ));
    match metric(&rm, "mem_gib").data() {
        AggregatedMetrics::F64(MetricData::Gauge(g)) => {
            let p = g.data_points().next().unwrap();
            assert_eq!(p.value(), 61.5);
            assert_eq!(
                attrs(p.attributes()),
                vec![("device".to_owned(), Value::I64(0))]
            );
        }
        other => panic!("mem_gib: {other:?}"),
    }
    assert!(matches!(
        metric(&rm, "temp").data(),
        AggregatedMetrics::I64(MetricData::Gauge(_))
    ));
    assert!(matches!(
        metric(&rm, "free").data(),
        AggregatedMetrics::U64(MetricData::Gauge(_))
    ));
    t.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn only_callsites_with_a_metric_field_reach_the_layer() {
    let (t, _exporter) = exporting();
    let subscriber = tracing_subscriber::registry().with(t.metrics_layer());
    tracing::subscriber::with_default(subscriber, || {
        // The metrics layer is the only layer: a callsite it refuses is off altogether.
        assert!(tracing::enabled!(Level::INFO, histogram.step_ms));
        assert!(tracing::enabled!(Level::TRACE, gauge.x));
        assert!(tracing::enabled!(Level::INFO, monotonic_counter.steps));
        assert!(tracing::enabled!(Level::INFO, counter.queue));
        assert!(!tracing::enabled!(Level::INFO, loss));
        assert!(!tracing::enabled!(Level::INFO, histogram));
        assert!(!tracing::enabled!(Level::INFO, histogram_ms));
        // The exporters' own stacks are ignored even with a metric field.
        assert!(!tracing::enabled!(target: "tonic::transport", Level::INFO, counter.x));
        // Spans never reach it.
        assert!(tracing::info_span!("step", histogram.x = 1.0).is_disabled());
    });
}

#[test]
fn the_layer_is_inert_where_no_metrics_are_exported() {
    let disabled = Telemetry::builder(LensConfig::default()).build().unwrap();
    let metrics_off = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
        c.traces_enabled = false;
    }))
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    for t in [&disabled, &metrics_off] {
        let layer = t.metrics_layer::<tracing_subscriber::Registry>();
        assert!(layer.is_inert());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            assert!(!tracing::enabled!(Level::ERROR, histogram.step_ms));
            tracing::info!(histogram.step_ms = 1.0);
        });
    }
    assert!(metrics_off.meter_provider().is_none());
}

/// Misuse found inside the layer cannot go through `tracing` (it drops events emitted while an
/// event is being dispatched), so it is written to stderr, once per field. The test re-runs
/// itself as a child process and reads the child's real stderr.
#[test]
fn non_numeric_and_out_of_range_values_are_skipped_with_one_warning_each() {
    if child::is_child() {
        let (t, exporter) = exporting();
        let subscriber = tracing_subscriber::registry().with(t.metrics_layer());
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                tracing::info!(histogram.ev_slow = "slow");
                tracing::info!(monotonic_counter.ev_neg = -1_i64);
                tracing::info!(monotonic_counter.ev_negf = -0.5);
                tracing::info!(counter.ev_huge = u64::MAX);
                tracing::info!(gauge.ev_flag = true);
                tracing::info!(gauge.ev_dbg = ?Duration::from_secs(1));
                tracing::info!(gauge.ev_ok = 1.0);
            }
        });
        let rm = collect(&t, &exporter).unwrap();
        let names: Vec<&str> = rm
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .map(|m| m.name())
            .collect();
        println!("EXPORTED {names:?}");
        std::process::exit(0);
    }
    let out = Child::this_test().run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(stdout.contains(r#"EXPORTED ["ev_ok"]"#), "{stdout}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("WARN nemo_lens::metrics: "))
        .collect();
    assert_eq!(warnings.len(), 6, "{stderr}");
    for (field, problem) in [
        ("histogram.ev_slow", "not a number"),
        ("monotonic_counter.ev_neg'", "negative integer"),
        ("monotonic_counter.ev_negf", ">= 0"),
        ("counter.ev_huge", "i64::MAX"),
        ("gauge.ev_flag", "not a number"),
        ("gauge.ev_dbg", "not a u64, i64 or f64"),
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(field) && w.contains(problem)),
            "no warning for {field}: {stderr}"
        );
    }
}
