//! Setup: validation, the double-init guard, custom exporters, strategies and processors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, LensError, Place, Telemetry};
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;

fn enabled() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
    })
}

#[test]
fn unknown_strategy_fails_even_when_disabled_and_names_the_variable() {
    let config = LensConfig::from_lookup("NEMO_LENS", None, |k| {
        (k == "NEMO_LENS_EXPORT_STRATEGY").then(|| "fastest_rank".to_string())
    })
    .unwrap();
    assert!(!config.enabled);
    let err = Telemetry::builder(config).build().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LensError::UnknownStrategy { .. }));
    assert!(
        msg.contains("NEMO_LENS_EXPORT_STRATEGY")
            && msg.contains("fastest_rank")
            && msg.contains("single_rank"),
        "{msg}"
    );
}

/// A job-wide spec may name groups that only other processes register (Python's Megatron
/// groups): the setup builds, the known groups are enabled, the unknown ones ignored (the
/// warning is checked on real processes in tests/config/job_env.rs). In a process of its own:
/// it reads the process-wide span groups, which other tests of this binary set.
#[test]
fn unknown_span_groups_are_ignored_and_the_known_ones_apply() {
    child::run_alone(unknown_groups_ignored);
}

fn unknown_groups_ignored() {
    let config = LensConfig::from_lookup("MEGATRON_OTEL", Some("NEMO_LENS"), |k| match k {
        "MEGATRON_OTEL_ENABLED" => Some("1".into()),
        "MEGATRON_OTEL_EXPORTER" => Some("console".into()),
        "NEMO_LENS_SPAN_GROUPS" => Some("default, warp_drive".into()),
        _ => None,
    })
    .unwrap()
    .with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
        c.export.console_path = Some("/dev/null".into());
    });
    let telemetry = Telemetry::builder(config)
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(nemo_lens::groups::is_span_group_enabled("checkpoint"));
    assert!(!nemo_lens::groups::is_span_group_enabled("warp_drive"));
    telemetry
        .shutdown(std::time::Duration::from_secs(5))
        .unwrap();
}

#[test]
fn rank_must_be_below_world_size_when_enabled() {
    let enabled = || LensConfig::default().with_enabled(true);
    let err = Telemetry::builder(enabled())
        .place(Place::rank(8).of(8))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("rank 8, world_size 8"));
    assert!(
        Telemetry::builder(enabled())
            .place(Place::default().of(0))
            .allow_reinit_for_testing(true)
            .build()
            .is_err()
    );
    // Disabled: nothing uses them, any numbers are accepted (as in Python).
    for (rank, world) in [(8, 8), (0, 0), (u32::MAX, 1)] {
        let t = Telemetry::builder(LensConfig::default())
            .place(Place::rank(rank).of(world))
            .build()
            .unwrap();
        assert!(!t.is_exporting());
    }
}

#[test]
fn sample_rate_of_a_config_built_in_code_is_checked() {
    let config = LensConfig::default().with(|c| c.export.sample_rate = -0.5);
    assert!(matches!(
        Telemetry::builder(config).build(),
        Err(LensError::SampleRateOutOfRange { .. })
    ));
}

#[test]
fn single_rank_exports_from_the_last_rank_by_default() {
    let cfg = LensConfig::default().with_enabled(true);
    for rank in 0..4 {
        let t = Telemetry::builder(cfg.clone())
            .place(Place::rank(rank).of(4))
            .span_exporter(CollectingExporter::default())
            .allow_reinit_for_testing(true)
            .build()
            .unwrap();
        assert_eq!(t.is_exporting(), rank == 3, "rank {rank}");
    }
}

#[test]
fn a_registered_strategy_decides_by_name() {
    nemo_lens::strategy::register_export_strategy(
        "lenstest_even_ranks",
        |_, r, _| r % 2 == 0,
        nemo_lens::Overwrite::Yes,
    )
    .unwrap();
    for rank in 0..4 {
        let config = LensConfig::default()
            .with_enabled(true)
            .with(|c| c.export.strategy = "lenstest_even_ranks".into());
        let t = Telemetry::builder(config)
            .place(Place::rank(rank).of(4))
            .span_exporter(CollectingExporter::default())
            .allow_reinit_for_testing(true)
            .build()
            .unwrap();
        assert_eq!(t.is_exporting(), rank % 2 == 0);
    }
}

#[derive(Debug, Clone, Default)]
struct Counting {
    started: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}
impl SpanProcessor for Counting {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }
    fn on_end(&self, _span: SpanData) {
        self.ended.fetch_add(1, Ordering::SeqCst);
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[test]
fn extra_processors_see_every_span_and_the_exporter_still_gets_them() {
    let counting = Counting::default();
    let exporter = CollectingExporter::default();
    let c = counting.clone();
    let t = Telemetry::builder(enabled())
        .span_processor(move || c)
        .span_exporter(exporter.clone())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        tracing::info_span!("a").in_scope(|| tracing::info_span!("b").in_scope(|| {}));
    });
    t.shutdown(Duration::from_secs(5)).unwrap();
    assert_eq!(counting.started.load(Ordering::SeqCst), 2);
    assert_eq!(counting.ended.load(Ordering::SeqCst), 2);
    assert_eq!(
        exporter.spans().len(),
        2,
        "batch processor flushed at shutdown"
    );
}

#[test]
fn processors_are_not_built_on_a_non_exporting_rank() {
    let built = Arc::new(AtomicUsize::new(0));
    let b = built.clone();
    let t = Telemetry::builder(LensConfig::default().with_enabled(true))
        .place(Place::rank(0).of(2))
        .span_processor(move || {
            b.fetch_add(1, Ordering::SeqCst);
            Counting::default()
        })
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(!t.is_exporting());
    assert_eq!(built.load(Ordering::SeqCst), 0);
    assert!(t.resource().is_none());
}

#[test]
fn the_resource_carries_rank_and_run_identity() {
    let t = Telemetry::builder(enabled().with(|c| c.identity.run_id = "demo42".into()))
        .place(Place::rank(3).of(8))
        .span_exporter(CollectingExporter::default())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let r = t.resource().unwrap();
    let get = |k: &str| r.get(&opentelemetry::Key::from(k.to_string()));
    assert_eq!(get("dl.rank"), Some(opentelemetry::Value::I64(3)));
    assert_eq!(get("dl.world_size"), Some(opentelemetry::Value::I64(8)));
    assert_eq!(get("nemo.run.id"), Some("demo42".into()));
    assert_eq!(get("service.instance.id"), Some("demo42-rank3".into()));
    assert_eq!(get("service.name"), Some("nemo".into()));
}

#[test]
fn exporting_ranks_install_the_w3c_propagator() {
    let capture = nemo_lens::testing::SpanCapture::new();
    let mut carrier = std::collections::HashMap::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!("step").entered();
        nemo_lens::propagation::inject_context(&mut carrier);
    });
    let step = capture.span("step").unwrap();
    // Sampled + W3C random (`W3cTraceContextPropagator` keeps the flag the SDK's would clear).
    assert_eq!(
        carrier["traceparent"],
        format!(
            "00-{}-{}-03",
            step.span_context.trace_id(),
            step.span_context.span_id()
        )
    );
}

#[test]
fn launcher_traceparent_parents_every_root_span() {
    let exporter = CollectingExporter::default();
    let t = Telemetry::builder(enabled())
        .span_exporter(exporter.clone())
        .export_mode(nemo_lens::ExportMode::Synchronous)
        .env_lookup(|k| {
            (k == "TRACEPARENT")
                .then(|| "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string())
        })
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        tracing::info_span!("train").in_scope(|| tracing::info_span!("step").in_scope(|| {}));
    });
    let spans = exporter.spans();
    let train = spans.iter().find(|s| s.name == "train").unwrap();
    assert_eq!(
        train.span_context.trace_id().to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(train.parent_span_id.to_string(), "00f067aa0ba902b7");
    let step = spans.iter().find(|s| s.name == "step").unwrap();
    assert_eq!(step.parent_span_id, train.span_context.span_id());
}

#[test]
fn an_injected_metric_reader_gets_the_metrics_and_the_span_exporter_only_traces() {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
    let metrics = InMemoryMetricExporter::default();
    let spans = CollectingExporter::default();
    let m = metrics.clone();
    let t = Telemetry::builder(enabled())
        .span_exporter(spans.clone())
        .metric_reader(move || PeriodicReader::builder(m).build())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let meter = t
        .meter_provider()
        .expect("meter provider on an exporting rank")
        .meter("test");
    meter.u64_counter("steps").build().add(3, &[]);
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        tracing::info_span!("step").in_scope(|| {});
    });
    t.shutdown(Duration::from_secs(5)).unwrap();
    let exported = metrics.get_finished_metrics().unwrap();
    let names: Vec<String> = exported
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .map(|m| m.name().to_string())
        .collect();
    assert!(names.contains(&"steps".to_string()), "{names:?}");
    let resource = exported[0].resource();
    assert_eq!(
        resource.get(&opentelemetry::Key::from_static_str("dl.rank")),
        Some(opentelemetry::Value::I64(0))
    );
    assert_eq!(spans.spans().len(), 1);
}
