//! The batch span processor behind the whole stack: every drop counted on the handle
//! (dropped = produced − exported) and reported once, `OTEL_BSP_*` validated at setup. The
//! processor's own tests (a burst, failed and hung exports) are unit tests in `src/queue/`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};

/// An exporter that takes `delay` per batch and counts what it exported.
#[derive(Clone, Debug)]
struct SlowExporter {
    delay: Duration,
    exported: Arc<AtomicU64>,
}

impl SlowExporter {
    fn new(delay: Duration) -> Self {
        SlowExporter {
            delay,
            exported: Arc::default(),
        }
    }
}

impl SpanExporter for SlowExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (delay, exported) = (self.delay, self.exported.clone());
        async move {
            std::thread::sleep(delay);
            exported.fetch_add(batch.len() as u64, Ordering::Relaxed);
            Ok(())
        }
    }
}

fn enabled() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
    })
}

/// The whole stack (tracing spans, the layer, the SDK, the processor) with an exporter too slow
/// for the burst: `Telemetry::stats().dropped_spans` equals produced − exported, and the count is reported
/// once, on stderr, at shutdown.
#[test]
fn drops_are_counted_on_the_handle_and_reported_once_at_shutdown() {
    const SPANS: u64 = 200_000;
    if !child::is_child() {
        let out = Child::this_test().run_passing();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reports: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("nemo-lens: dropped"))
            .collect();
        assert_eq!(reports.len(), 1, "reported once: {stderr}");
        assert!(reports[0].contains(" spans, 0 log records, 0 metric exports"));
        return;
    }
    let exporter = SlowExporter::new(Duration::from_millis(50));
    let exported = exporter.exported.clone();
    let telemetry = Telemetry::builder(enabled())
        .span_exporter(exporter)
        .env_lookup(|k| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "1024".into()))
        .build()
        .unwrap();
    let _sub = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    for i in 0..SPANS {
        tracing::info_span!("burst", i).in_scope(|| {});
    }
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    telemetry.shutdown(Duration::from_secs(10)).unwrap(); // no second report
    let exported = exported.load(Ordering::Relaxed);
    let dropped = telemetry.stats();
    assert!(
        dropped.dropped_spans > 0 && exported > 0,
        "{dropped:?}, exported {exported}"
    );
    assert_eq!(dropped.dropped_spans, SPANS - exported);
}

/// `OTEL_BSP_*`: setup fails with a typed error naming the variable before touching anything
/// global.
#[test]
fn batch_variables_are_validated() {
    let err = Telemetry::builder(enabled())
        .span_exporter(SlowExporter::new(Duration::ZERO))
        .env_lookup(|k| (k == "OTEL_BSP_SCHEDULE_DELAY").then(|| "soon".into()))
        // Other tests of this binary set up telemetry: the double-init guard is not the point.
        .allow_reinit_for_testing(true)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("OTEL_BSP_SCHEDULE_DELAY"), "{err}");
}
