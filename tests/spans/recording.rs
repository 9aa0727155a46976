//! The compact span record (`src/record/`): the SDK span is built on the batch worker, and
//! everything an SDK span carries arrives: ids seen on the training thread, span
//! processors' `on_start` and `on_end` (on the worker), re-recorded fields, event limits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens::testing::{CollectingExporter, SpanCapture};
use nemo_lens::{LensConfig, LensSpanExt, Telemetry};
use opentelemetry::trace::{Span as _, SpanId};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::{child, memory};

/// Records, for every span, the thread `on_start` and `on_end` ran on, and tags the span in
/// `on_start`.
#[derive(Debug, Clone, Default)]
struct Watcher {
    starts: Calls,
    ends: Calls,
}

/// Span id and thread name of each call.
type Calls = Arc<Mutex<Vec<(SpanId, Option<String>)>>>;

fn thread_name() -> Option<String> {
    std::thread::current().name().map(str::to_string)
}

impl SpanProcessor for Watcher {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        span.set_attribute(KeyValue::new("seen.by.on_start", true));
        let id = span.span_context().span_id();
        self.starts.lock().unwrap().push((id, thread_name()));
    }
    fn on_end(&self, span: SpanData) {
        let id = span.span_context.span_id();
        self.ends.lock().unwrap().push((id, thread_name()));
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[test]
fn user_span_processors_run_on_the_worker_with_the_ids_the_training_thread_saw() {
    let exporter = CollectingExporter::default();
    let watcher = Watcher::default();
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
    });
    let telemetry = Telemetry::builder(config)
        .span_exporter(exporter.clone())
        .span_processor({
            let watcher = watcher.clone();
            move || watcher
        })
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let (outer_id, inner_id) = tracing::subscriber::with_default(subscriber, || {
        let outer = tracing::info_span!("outer", nemo.group.step = Empty);
        let inner = outer.in_scope(|| tracing::info_span!("inner", step = 3_i64));
        let ids = (
            outer.span_context().unwrap().span_id(),
            inner.span_context().unwrap().span_id(),
        );
        drop(inner);
        drop(outer);
        ids
    });
    telemetry.shutdown(Duration::from_secs(5)).unwrap();

    let spans = exporter.spans();
    let inner = spans.iter().find(|s| s.name == "inner").unwrap();
    let outer = spans.iter().find(|s| s.name == "outer").unwrap();
    assert_eq!(inner.span_context.span_id(), inner_id);
    assert_eq!(outer.span_context.span_id(), outer_id);
    assert_eq!(inner.parent_span_id, outer_id);
    assert_eq!(inner.span_context.trace_id(), outer.span_context.trace_id());
    assert_eq!(
        SpanCapture::attribute(inner, "seen.by.on_start"),
        Some(Value::Bool(true)),
        "what on_start sets is exported"
    );
    assert!(inner.start_time <= inner.end_time);
    for calls in [&watcher.starts, &watcher.ends] {
        let calls = calls.lock().unwrap();
        assert_eq!(calls.len(), 2, "{calls:?}");
        for (id, thread) in calls.iter() {
            assert!([inner_id, outer_id].contains(id));
            assert_eq!(
                thread.as_deref(),
                Some("nemo-lens-spans"),
                "processors run on the batch worker"
            );
        }
    }
}

#[test]
fn a_field_recorded_again_replaces_its_value() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let span = tracing::info_span!("step", loss = Empty);
        for i in 0..300_i64 {
            span.record("loss", i);
        }
    });
    let span = capture.span("step").unwrap();
    let losses: Vec<_> = span
        .attributes
        .iter()
        .filter(|kv| kv.key.as_str() == "loss")
        .collect();
    assert_eq!(losses.len(), 1, "{losses:?}");
    assert_eq!(losses[0].value, Value::I64(299));
    assert_eq!(span.dropped_attributes_count, 0);
}

#[test]
fn events_past_the_limit_are_counted_not_kept() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _span = tracing::info_span!("step").entered();
        for i in 0..130_i64 {
            tracing::info!(i, "tick");
        }
    });
    let span = capture.span("step").unwrap();
    assert_eq!(span.events.events.len(), 128);
    assert_eq!(span.events.dropped_count, 2);
    assert_eq!(
        span.events.events[127].attributes[0].value,
        Value::I64(127),
        "the first events are kept"
    );
}

/// Five events in one span, built directly and through the SDK (a span processor of the
/// application sees it): for each, the events kept and those counted as dropped.
fn five_events_each_way() -> [(usize, u32); 2] {
    [false, true].map(|through_sdk| {
        let spans = memory::run_exporting(
            |b| match through_sdk {
                true => b.span_processor(Watcher::default),
                false => b,
            },
            |_| {
                let _span = tracing::info_span!("step").entered();
                for i in 0..5_i64 {
                    tracing::info!(i, "tick");
                }
            },
        );
        let span = memory::named(&spans, "step");
        let ticks = span.events.iter().filter(|e| e.name == "tick").count();
        assert_eq!(ticks, span.events.len(), "{:?}", span.events);
        (ticks, span.events.dropped_count)
    })
}

#[test]
fn the_event_limit_variable_bounds_the_record_as_it_bounds_the_sdk_span() {
    child::run_in_child([("OTEL_SPAN_EVENT_COUNT_LIMIT", "3")], || {
        assert_eq!(five_events_each_way(), [(3, 2); 2]);
    });
}

#[test]
fn an_event_limit_the_sdk_does_not_read_leaves_the_default_for_the_record_too() {
    // The SDK parses the value untrimmed: " 3" is no number to it.
    child::run_in_child([("OTEL_SPAN_EVENT_COUNT_LIMIT", " 3")], || {
        assert_eq!(five_events_each_way(), [(5, 0); 2]);
    });
}

/// `span.record` on a span the lens layer does not record (its group is off; another layer
/// keeps it) never reads the values: no `Display` of the application runs for it.
#[test]
fn record_on_a_span_of_another_layer_reads_nothing() {
    struct Counted(Arc<Mutex<u32>>);
    impl std::fmt::Display for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            *self.0.lock().unwrap() += 1;
            f.write_str("value")
        }
    }
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let telemetry = nemo_lens_test_support::memory::builder(&exporter)
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
    let reads = Arc::new(Mutex::new(0));
    tracing::subscriber::with_default(subscriber, || {
        // `step` is not in the default groups: the lens layer does not record it.
        let off = tracing::info_span!("off", nemo.group.step = Empty, note = Empty);
        off.record("note", tracing::field::display(Counted(reads.clone())));
        let fmt_reads = *reads.lock().unwrap();
        let on = tracing::info_span!("on", nemo.group.job = Empty, note = Empty);
        on.record("note", tracing::field::display(Counted(reads.clone())));
        // The fmt layer formats each record once; the lens layer only the recorded span's.
        assert_eq!(*reads.lock().unwrap(), 2 * fmt_reads + 1);
    });
    telemetry.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let on = nemo_lens_test_support::memory::named(&spans, "on");
    assert_eq!(
        SpanCapture::attribute(on, "note"),
        Some(Value::from("value"))
    );
    assert!(spans.iter().all(|s| s.name != "off"));
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
}
