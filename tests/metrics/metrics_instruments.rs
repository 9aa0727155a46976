//! Lens's instrument families (`gen_ai.*`, `rl.*`, `gym.*`, `dl.*`) through a real exporting
//! `Telemetry`: names, units, descriptions, attributes and values as the SDK exports them.

use std::time::Duration;

use nemo_lens::metrics::{GymMetrics, InferenceMetrics, RlMetrics, TrainingMetrics};
use nemo_lens::{LensConfig, Place, Telemetry, semconv};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};

use common::metrics::{exporting, metric};
use nemo_lens_test_support as common;

/// The last (cumulative) batch after a flush.
fn collect(telemetry: &Telemetry, exporter: &InMemoryMetricExporter) -> ResourceMetrics {
    common::metrics::collect(telemetry, exporter).expect("one export after the flush")
}

fn names(rm: &ResourceMetrics) -> Vec<String> {
    let mut v: Vec<String> = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| m.name().to_owned())
        .collect();
    v.sort();
    v
}

/// Attributes as sorted `(key, value)` pairs.
type Attrs = Vec<(String, Value)>;

fn attrs<'a>(it: impl Iterator<Item = &'a KeyValue>) -> Attrs {
    let mut v: Attrs = it
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn s(v: &str) -> Value {
    Value::from(v.to_owned())
}

/// `(attributes, count, sum)` of every point of an f64 histogram.
fn f64_histogram(m: &Metric) -> Vec<(Attrs, u64, f64)> {
    match m.data() {
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| (attrs(p.attributes()), p.count(), p.sum()))
            .collect(),
        other => panic!("{} is not an f64 histogram: {other:?}", m.name()),
    }
}

fn f64_gauge(m: &Metric) -> Vec<(Attrs, f64)> {
    match m.data() {
        AggregatedMetrics::F64(MetricData::Gauge(g)) => g
            .data_points()
            .map(|p| (attrs(p.attributes()), p.value()))
            .collect(),
        other => panic!("{} is not an f64 gauge: {other:?}", m.name()),
    }
}

#[test]
fn inference_metrics_have_the_python_names_units_and_attributes() {
    let (t, exporter) = exporting();
    InferenceMetrics {
        request_duration_s: Some(0.5),
        model: Some("m"),
        input_tokens: Some(10),
        output_tokens: Some(5),
        ..Default::default()
    }
    .record(t.instruments());
    let rm = collect(&t, &exporter);
    assert_eq!(
        rm.scope_metrics().next().unwrap().scope().name(),
        "nemo.lens"
    );

    let common = vec![
        (
            semconv::GEN_AI_OPERATION_NAME.to_owned(),
            s("text_completion"),
        ),
        (semconv::GEN_AI_PROVIDER_NAME.to_owned(), s("nemo")),
        (semconv::GEN_AI_REQUEST_MODEL.to_owned(), s("m")),
    ];
    let duration = metric(&rm, "gen_ai.server.request.duration");
    assert_eq!(duration.unit(), "s");
    assert_eq!(duration.description(), "GenAI server request duration.");
    assert_eq!(f64_histogram(duration), vec![(common.clone(), 1, 0.5)]);

    let tokens = metric(&rm, "gen_ai.client.token.usage");
    assert_eq!(tokens.unit(), "{token}");
    assert_eq!(
        tokens.description(),
        "Number of input and output tokens used."
    );
    let AggregatedMetrics::U64(MetricData::Histogram(h)) = tokens.data() else {
        panic!("token usage is a u64 histogram: {:?}", tokens.data());
    };
    let mut points: Vec<_> = h
        .data_points()
        .map(|p| (attrs(p.attributes()), p.count(), p.sum()))
        .collect();
    points.sort_by_key(|p| format!("{:?}", p.0));
    let with_type = |kind: &str| {
        let mut a = common.clone();
        a.push((semconv::GEN_AI_TOKEN_TYPE.to_owned(), s(kind)));
        a
    };
    assert_eq!(
        points,
        vec![(with_type("input"), 1, 10), (with_type("output"), 1, 5)]
    );
    t.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn inference_without_model_omits_the_model_attribute_and_honours_overrides() {
    let (t, exporter) = exporting();
    for model in [None, Some("")] {
        InferenceMetrics {
            request_duration_s: Some(1.25),
            model,
            provider_name: "vllm",
            operation_name: "chat",
            ..Default::default()
        }
        .record(t.instruments());
    }
    let rm = collect(&t, &exporter);
    assert_eq!(names(&rm), vec!["gen_ai.server.request.duration"]);
    assert_eq!(
        f64_histogram(metric(&rm, "gen_ai.server.request.duration")),
        vec![(
            vec![
                (semconv::GEN_AI_OPERATION_NAME.to_owned(), s("chat")),
                (semconv::GEN_AI_PROVIDER_NAME.to_owned(), s("vllm")),
            ],
            2,
            2.5
        )]
    );
}

#[test]
fn rl_metrics_record_every_field_as_its_own_instrument() {
    let (t, exporter) = exporting();
    RlMetrics {
        reward_mean: Some(0.85),
        kl_divergence: Some(0.01),
        policy_loss: Some(0.3),
        value_loss: Some(0.5),
        entropy: Some(2.1),
        response_length_mean: Some(128.0),
        grad_norm: Some(1.5),
        learning_rate: Some(1e-6),
        throughput_tokens_per_sec: Some(9000.0),
        generation_duration_ms: Some(450.0),
        rollout_duration_ms: Some(2300.0),
    }
    .record(t.instruments());
    let rm = collect(&t, &exporter);
    let gauges = [
        (semconv::RL_REWARD_MEAN, 0.85, ""),
        (semconv::RL_KL_DIVERGENCE, 0.01, ""),
        (semconv::RL_POLICY_LOSS, 0.3, ""),
        (semconv::RL_VALUE_LOSS, 0.5, ""),
        (semconv::RL_ENTROPY, 2.1, ""),
        (semconv::RL_RESPONSE_LENGTH_MEAN, 128.0, ""),
        (semconv::RL_GRAD_NORM, 1.5, ""),
        (semconv::RL_LEARNING_RATE, 1e-6, ""),
        (semconv::RL_THROUGHPUT_TOKENS_PER_SEC, 9000.0, "{token}/s"),
    ];
    for (name, value, unit) in gauges {
        let m = metric(&rm, name);
        assert_eq!(f64_gauge(m), vec![(vec![], value)], "{name}");
        assert_eq!(m.unit(), unit, "{name}");
        assert!(!m.description().is_empty(), "{name}");
    }
    for (name, value) in [
        (semconv::RL_GENERATION_DURATION_MS, 450.0),
        (semconv::RL_ROLLOUT_DURATION_MS, 2300.0),
    ] {
        let m = metric(&rm, name);
        assert_eq!(m.unit(), "ms");
        assert_eq!(f64_histogram(m), vec![(vec![], 1, value)], "{name}");
    }
    assert_eq!(names(&rm).len(), 11);
}

#[test]
fn unset_fields_create_no_instrument_and_gauges_keep_the_last_value() {
    let (t, exporter) = exporting();
    RlMetrics {
        reward_mean: Some(0.1),
        ..Default::default()
    }
    .record(t.instruments());
    RlMetrics {
        reward_mean: Some(0.9),
        ..Default::default()
    }
    .record(t.instruments());
    let rm = collect(&t, &exporter);
    // The family's instruments exist once any field was recorded, but an instrument that never
    // saw a value exports nothing.
    assert_eq!(names(&rm), vec![semconv::RL_REWARD_MEAN]);
    assert_eq!(
        f64_gauge(metric(&rm, semconv::RL_REWARD_MEAN)),
        vec![(vec![], 0.9)]
    );
}

#[test]
fn gym_metrics_have_ms_histograms_and_gauges() {
    let (t, exporter) = exporting();
    GymMetrics {
        server_request_duration_ms: Some(42.0),
        rollout_duration_ms: Some(1000.0),
        verify_duration_ms: Some(120.0),
        verify_success_rate: Some(0.87),
        active_servers: Some(4),
    }
    .record(t.instruments());
    let rm = collect(&t, &exporter);
    for (name, value) in [
        (semconv::GYM_SERVER_REQUEST_DURATION_MS, 42.0),
        (semconv::GYM_ROLLOUT_DURATION_MS, 1000.0),
        (semconv::GYM_VERIFY_DURATION_MS, 120.0),
    ] {
        let m = metric(&rm, name);
        assert_eq!(m.unit(), "ms");
        assert_eq!(f64_histogram(m), vec![(vec![], 1, value)], "{name}");
    }
    // Units and descriptions as Python's `record_gym_metrics` writes them (`instruments/gym.py`).
    for (name, unit, description) in [
        (
            semconv::GYM_SERVER_REQUEST_DURATION_MS,
            "ms",
            "Gym server request duration in milliseconds.",
        ),
        (
            semconv::GYM_ROLLOUT_DURATION_MS,
            "ms",
            "Rollout collection duration in milliseconds.",
        ),
        (
            semconv::GYM_VERIFY_DURATION_MS,
            "ms",
            "Verification endpoint duration in milliseconds.",
        ),
        (
            semconv::GYM_VERIFY_SUCCESS_RATE,
            "",
            "Fraction of successful verifications.",
        ),
        (
            semconv::GYM_SERVERS_ACTIVE,
            "",
            "Number of active Gym servers.",
        ),
    ] {
        let m = metric(&rm, name);
        assert_eq!((m.unit(), m.description()), (unit, description), "{name}");
    }
    assert_eq!(
        f64_gauge(metric(&rm, semconv::GYM_VERIFY_SUCCESS_RATE)),
        vec![(vec![], 0.87)]
    );
    let active = metric(&rm, semconv::GYM_SERVERS_ACTIVE);
    let AggregatedMetrics::U64(MetricData::Gauge(g)) = active.data() else {
        panic!("gym.servers.active is a u64 gauge: {:?}", active.data());
    };
    assert_eq!(
        g.data_points().map(|p| p.value()).collect::<Vec<_>>(),
        vec![4]
    );
}

#[test]
fn training_metrics_carry_the_callers_attributes_and_step_buckets() {
    let (t, exporter) = exporting();
    let phase = [KeyValue::new("phase", "pretrain")];
    for (dt, loss) in [(0.8, 2.5), (1.2, 2.25)] {
        TrainingMetrics {
            step_duration_s: Some(dt),
            loss: Some(loss),
            grad_norm: Some(1.0),
            learning_rate: Some(3e-4),
            tokens_per_sec: Some(51_200.0),
            tflops: Some(182.5),
            attributes: &phase,
        }
        .record(t.instruments());
    }
    let rm = collect(&t, &exporter);
    let phase_attr = vec![("phase".to_owned(), s("pretrain"))];
    let step = metric(&rm, semconv::DL_STEP_DURATION);
    assert_eq!(step.unit(), "s");
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = step.data() else {
        panic!("dl.step.duration is an f64 histogram");
    };
    let point = h.data_points().next().unwrap();
    assert_eq!(attrs(point.attributes()), phase_attr);
    assert_eq!(point.count(), 2);
    assert_eq!(
        point.bounds().collect::<Vec<_>>(),
        vec![
            0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0,
            500.0, 600.0,
        ]
    );
    assert_eq!(
        f64_gauge(metric(&rm, semconv::DL_LOSS)),
        vec![(phase_attr.clone(), 2.25)]
    );
    for name in [
        semconv::DL_GRAD_NORM,
        semconv::DL_LEARNING_RATE,
        semconv::DL_THROUGHPUT_TOKENS_PER_SEC,
        semconv::DL_THROUGHPUT_TFLOPS,
    ] {
        assert_eq!(f64_gauge(metric(&rm, name)).len(), 1, "{name}");
    }
    assert_eq!(
        metric(&rm, semconv::DL_THROUGHPUT_TOKENS_PER_SEC).unit(),
        "{token}/s"
    );
}

#[test]
fn a_non_exporting_rank_records_into_a_no_op_meter() {
    let config = LensConfig::default()
        .with_enabled(true)
        .with(|c| c.export.strategy = "single_rank".into());
    // Rank 0 of 4: single_rank exports from the last rank only.
    let t = Telemetry::builder(config)
        .place(Place::rank(0).of(4))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(!t.is_exporting());
    assert!(t.meter_provider().is_none());
    assert_eq!(t.stats().metric_export_interval, None);
    // Nothing to observe but the absence of a panic and of a provider.
    InferenceMetrics {
        request_duration_s: Some(0.5),
        ..Default::default()
    }
    .record(t.instruments());
    t.meter().f64_gauge("x").build().record(1.0, &[]);
}
