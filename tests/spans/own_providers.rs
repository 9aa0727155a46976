//! Bring your own providers: `install_globals(false)` keeps a telemetry out of every
//! process-wide slot, and `tracer_provider(builder)` builds lens's tracer provider from the
//! application's own builder (its processors, exporters and resource).

use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry::trace::Tracer as _;
use opentelemetry::{Key, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;

fn exporting() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
    })
}

fn names(spans: &[SpanData]) -> Vec<String> {
    let mut names: Vec<String> = spans.iter().map(|s| s.name.to_string()).collect();
    names.sort();
    names
}

/// Records `prefix.job` (group `job`) and `prefix.step` (group `step`) through `telemetry`'s
/// layer, on a thread of its own with its own subscriber.
fn record(telemetry: &Telemetry, prefix: &'static str) {
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, || {
        let job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty, prefix);
        job.in_scope(|| {
            tracing::info_span!("step", nemo.group.step = tracing::field::Empty, prefix)
                .in_scope(|| {});
        });
    });
}

/// Runs in a process of its own: it checks that the process-wide slots are untouched, which the
/// other tests of this binary fill.
#[test]
fn two_telemetries_without_globals_live_side_by_side() {
    child::run_alone(two_telemetries_side_by_side);
}

fn two_telemetries_side_by_side() {
    let (a, b) = (
        InMemorySpanExporter::default(),
        InMemorySpanExporter::default(),
    );
    let first = Telemetry::builder(exporting().with(|c| c.groups.span_groups = "per_step".into()))
        .install_globals(false)
        .span_exporter(a.clone())
        .build()
        .unwrap();
    // No double-init error: neither setup claims the process.
    let second = Telemetry::builder(exporting())
        .install_globals(false)
        .span_exporter(b.clone())
        .build()
        .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| record(&first, "first"));
        s.spawn(|| record(&second, "second"));
    });
    // The global tracer provider is still the no-op one: nothing reaches either exporter.
    opentelemetry::global::tracer("app").in_span("global", |_| {});
    // Each telemetry keeps its own groups; the process-wide gate was not touched.
    assert!(first.is_span_group_enabled("step"));
    assert!(!second.is_span_group_enabled("step"));
    assert!(!nemo_lens::groups::is_span_group_enabled("job"));
    // Flushed, not shut down: the in-memory exporter forgets its spans at shutdown.
    first.force_flush().unwrap();
    second.force_flush().unwrap();
    assert_eq!(names(&a.get_finished_spans().unwrap()), ["job", "step"]);
    assert_eq!(names(&b.get_finished_spans().unwrap()), ["job"]);
    first.shutdown(Duration::from_secs(5)).unwrap();
    second.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn a_telemetry_over_the_applications_own_provider_builder() {
    let mine = InMemorySpanExporter::default();
    let resource = Resource::builder_empty()
        .with_attributes([KeyValue::new("service.name", "my-app")])
        .build();
    let builder = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_simple_exporter(mine.clone());
    let telemetry = Telemetry::builder(exporting())
        .install_globals(false)
        .tracer_provider(builder)
        .build()
        .unwrap();
    record(&telemetry, "own");
    // Spans made with the OpenTelemetry API on lens's tracer go through the same provider.
    telemetry.tracer().in_span("api", |_| {});
    telemetry.force_flush().unwrap();
    let spans = mine.get_finished_spans().unwrap();
    // The layer's group filter applies (the `step` group is off by default); the application's
    // exporter and resource are used, with no exporter of lens's own.
    assert_eq!(names(&spans), ["api", "job"]);
    for span in &spans {
        assert_eq!(span.instrumentation_scope.name(), "nemo.lens");
    }
    let job = spans.iter().find(|s| s.name == "job").unwrap();
    assert!(job.span_context.is_valid());
    // Lens's rank attributes are still on `Telemetry::resource`.
    let rank = telemetry.resource().unwrap();
    assert_eq!(
        rank.get(&Key::from_static_str("dl.rank")),
        Some(0_i64.into())
    );
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn a_non_exporting_rank_never_builds_the_applications_provider() {
    let mine = InMemorySpanExporter::default();
    let builder = SdkTracerProvider::builder().with_simple_exporter(mine.clone());
    let telemetry = Telemetry::builder(
        LensConfig::default()
            .with_enabled(true)
            .with(|c| c.metrics_enabled = false),
    )
    .place(Place::rank(0).of(4)) // single_rank: rank 3 exports
    .install_globals(false)
    .tracer_provider(builder)
    .build()
    .unwrap();
    assert!(!telemetry.is_exporting());
    record(&telemetry, "idle");
    telemetry.tracer().in_span("api", |_| {});
    telemetry.force_flush().unwrap();
    assert!(mine.get_finished_spans().unwrap().is_empty());
}

/// Two telemetries in one subscriber (each layer keeps its own spans): both export their
/// spans, each with its own groups, parents and events.
#[test]
fn two_telemetries_in_one_subscriber_both_export() {
    let (a, b) = (
        InMemorySpanExporter::default(),
        InMemorySpanExporter::default(),
    );
    let first = Telemetry::builder(exporting().with(|c| c.groups.span_groups = "per_step".into()))
        .install_globals(false)
        .span_exporter(a.clone())
        .build()
        .unwrap();
    let second = Telemetry::builder(exporting())
        .install_globals(false)
        .span_exporter(b.clone())
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(first.layer())
        .with(second.layer());
    tracing::subscriber::with_default(subscriber, || {
        let job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty);
        job.in_scope(|| {
            tracing::info!("job started");
            tracing::info_span!("step", nemo.group.step = tracing::field::Empty)
                .in_scope(|| tracing::info!("step done"));
        });
    });
    first.force_flush().unwrap();
    second.force_flush().unwrap();
    let (a, b) = (
        a.get_finished_spans().unwrap(),
        b.get_finished_spans().unwrap(),
    );
    assert_eq!(names(&a), ["job", "step"]);
    assert_eq!(
        names(&b),
        ["job"],
        "the second telemetry keeps its own groups"
    );
    let span =
        |spans: &[SpanData], name: &str| spans.iter().find(|s| s.name == name).cloned().unwrap();
    let (job_a, step_a, job_b) = (span(&a, "job"), span(&a, "step"), span(&b, "job"));
    assert_eq!(step_a.parent_span_id, job_a.span_context.span_id());
    assert_eq!(
        step_a.span_context.trace_id(),
        job_a.span_context.trace_id()
    );
    assert_eq!(step_a.events.events[0].name, "step done");
    assert_eq!(job_a.events.events[0].name, "job started");
    assert_eq!(job_b.events.events[0].name, "job started");
    assert_ne!(
        job_a.span_context.span_id(),
        job_b.span_context.span_id(),
        "each telemetry draws its own ids"
    );
    first.shutdown(Duration::from_secs(5)).unwrap();
    second.shutdown(Duration::from_secs(5)).unwrap();
}
