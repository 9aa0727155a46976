//! The batch span processor: bounded memory under a burst, every drop counted
//! (dropped = produced − exported), export failures and timeouts counted, bounded shutdown,
//! `OTEL_BSP_*` read with typed errors.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};

use nemo_lens::export::{LensBatchProcessor, MAX_QUEUE_SIZE_LIMIT, QueueConfig};
use nemo_lens::{LensConfig, LensError, Telemetry};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};

/// Spans of the burst.
const BURST: u64 = 10_000_000;
/// The stated bound (README, "Guarantees"): the burst raises the peak resident set by less than
/// this.
const RSS_BOUND_KIB: u64 = 64 * 1024;

/// An exporter that takes `delay` per batch and counts what it exported (or fails every
/// export, or never completes one).
#[derive(Clone, Debug)]
struct SlowExporter {
    delay: Duration,
    exported: Arc<AtomicU64>,
    largest_batch: Arc<AtomicU64>,
    fail: bool,
    hang: bool,
}

impl SlowExporter {
    fn new(delay: Duration) -> Self {
        SlowExporter {
            delay,
            exported: Arc::default(),
            largest_batch: Arc::default(),
            fail: false,
            hang: false,
        }
    }
}

impl SpanExporter for SlowExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (fail, hang, delay) = (self.fail, self.hang, self.delay);
        let exported = self.exported.clone();
        self.largest_batch
            .fetch_max(batch.len() as u64, Ordering::Relaxed);
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            std::thread::sleep(delay);
            if fail {
                return Err(OTelSdkError::InternalFailure(
                    "collector unreachable".into(),
                ));
            }
            exported.fetch_add(batch.len() as u64, Ordering::Relaxed);
            Ok(())
        }
    }
}

fn enabled() -> LensConfig {
    LensConfig::default()
        .with_enabled(true)
        .with_export_strategy("all_ranks")
        .with_metrics_enabled(false)
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A finished span as the SDK hands it to a processor (a training step with a few fields).
fn finished_span(i: u64) -> SpanData {
    let now = std::time::SystemTime::now();
    SpanData {
        span_context: SpanContext::new(
            TraceId::from(u128::from(i) + 1),
            SpanId::from(i + 1),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: "train_step".into(),
        start_time: now,
        end_time: now,
        attributes: vec![
            KeyValue::new("step", i as i64),
            KeyValue::new("dl.loss", 0.25),
            KeyValue::new("dl.rank", 3),
            KeyValue::new("phase", "forward_backward"),
        ],
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status: Default::default(),
        instrumentation_scope: Default::default(),
    }
}

/// Ten million finished spans handed to the batch span processor (as the SDK does when spans
/// end) while the exporter manages one 512-span batch every 10 ms: the peak resident set grows
/// by less than [`RSS_BOUND_KIB`] (an unbounded queue would hold gigabytes), the producer never
/// waits, and every span is either exported or counted as dropped. Runs in its own process, so
/// the resident-set figures are this burst's. (The spans are built here rather than through
/// `tracing`: ten million spans through the whole stack take minutes in a debug build; the
/// test below drives the whole stack.)
#[test]
fn a_ten_million_span_burst_keeps_memory_bounded_and_counts_every_drop() {
    if !child::is_child() {
        Child::this_test().run_passing();
        return;
    }
    let exporter = SlowExporter::new(Duration::from_millis(10));
    let (exported, largest) = (exporter.exported.clone(), exporter.largest_batch.clone());
    let dropped = Arc::new(AtomicU64::new(0));
    let processor =
        LensBatchProcessor::new(exporter, QueueConfig::default(), dropped.clone()).unwrap();
    let template = finished_span(7);
    let rss_before = status_kib("VmRSS:");
    for _ in 0..BURST {
        processor.on_end(template.clone());
    }
    let peak = status_kib("VmHWM:");
    processor
        .shutdown_with_timeout(Duration::from_secs(10))
        .unwrap();
    let exported = exported.load(Ordering::Relaxed);
    let dropped = dropped.load(Ordering::Relaxed);
    println!(
        "burst: {BURST} spans, exported {exported}, dropped {dropped}, resident {rss_before} KiB before, peak {peak} KiB"
    );
    assert!(
        peak < rss_before + RSS_BOUND_KIB,
        "peak resident set {peak} KiB, {rss_before} KiB before the burst"
    );
    assert_eq!(dropped, BURST - exported, "dropped = produced - exported");
    assert!(dropped > 0, "the slow exporter cannot keep up");
    assert!(exported > 0);
    assert!(largest.load(Ordering::Relaxed) <= 512);
}

/// The whole stack (tracing spans, the layer, the SDK, the processor) with an exporter too slow
/// for the burst: `Telemetry::dropped()` equals produced − exported, and the count is reported
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
    let dropped = telemetry.dropped();
    assert!(
        dropped.spans > 0 && exported > 0,
        "{dropped:?}, exported {exported}"
    );
    assert_eq!(dropped.spans, SPANS - exported);
}

fn processor_with(
    exporter: SlowExporter,
    config: QueueConfig,
) -> (LensBatchProcessor<SlowExporter>, Arc<AtomicU64>) {
    let dropped = Arc::new(AtomicU64::new(0));
    (
        LensBatchProcessor::new(exporter, config, dropped.clone()).unwrap(),
        dropped,
    )
}

/// Every span of a failed export counts as dropped; the first error is reported by flush.
#[test]
fn failed_exports_count_their_spans_as_dropped() {
    let mut exporter = SlowExporter::new(Duration::ZERO);
    exporter.fail = true;
    let config = QueueConfig {
        max_export_batch_size: 10,
        ..QueueConfig::default()
    };
    let (processor, dropped) = processor_with(exporter, config);
    for i in 0..95 {
        processor.on_end(finished_span(i));
    }
    let err = processor.force_flush().unwrap_err().to_string();
    assert!(err.contains("collector unreachable"), "{err}");
    assert_eq!(dropped.load(Ordering::Relaxed), 95);
    processor
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
}

/// An export that never completes is abandoned after `OTEL_BSP_EXPORT_TIMEOUT` and its spans
/// counted; shutdown returns by its deadline (plus slack) however much is queued, counting what
/// it could not export.
#[test]
fn hung_exports_time_out_and_shutdown_is_bounded() {
    let mut exporter = SlowExporter::new(Duration::ZERO);
    exporter.hang = true;
    let lookup = |k: &str| match k {
        "OTEL_BSP_EXPORT_TIMEOUT" => Some("50".to_string()),
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" => Some("100".to_string()),
        _ => None,
    };
    let config = QueueConfig::from_env("OTEL_BSP", &lookup).unwrap();
    assert_eq!(config.export_timeout, Duration::from_millis(50));
    let (processor, dropped) = processor_with(exporter, config);
    for i in 0..2000 {
        processor.on_end(finished_span(i));
    }
    let start = Instant::now();
    let _ = processor.shutdown_with_timeout(Duration::from_millis(500));
    // Generous "must not hang" bound: the deadline is 0.5 s.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(dropped.load(Ordering::Relaxed), 2000);
    // After shutdown, spans are dropped and counted, never queued.
    processor.on_end(finished_span(1));
    assert_eq!(dropped.load(Ordering::Relaxed), 2001);
}

/// `OTEL_BSP_*`: blank means the default; garbage, zero, negative, huge or out-of-range values
/// are typed errors naming the variable; setup fails with it before touching anything global.
#[test]
fn batch_variables_are_validated() {
    let parse = |var: &'static str, value: &'static str| {
        QueueConfig::from_env("OTEL_BSP", &move |k: &str| {
            (k == var).then(|| value.to_string())
        })
    };
    assert_eq!(
        parse("OTEL_BSP_MAX_QUEUE_SIZE", "  ").unwrap(),
        QueueConfig::default()
    );
    assert_eq!(
        parse("OTEL_BSP_SCHEDULE_DELAY", "").unwrap(),
        QueueConfig::default()
    );
    assert_eq!(
        parse("OTEL_BSP_SCHEDULE_DELAY", "0")
            .unwrap()
            .scheduled_delay,
        Duration::ZERO
    );
    // A batch larger than the queue is clamped to it.
    assert_eq!(
        parse("OTEL_BSP_MAX_QUEUE_SIZE", "100")
            .unwrap()
            .max_export_batch_size,
        100
    );
    for (var, value) in [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "1e6"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "99999999999999999999999"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "5s"),
        ("OTEL_BSP_SCHEDULE_DELAY", "-1"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "0"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "1.5"),
    ] {
        let err = parse(var, value).unwrap_err();
        assert!(
            matches!(err, LensError::InvalidValue { .. }),
            "{var}={value}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(var) && msg.contains(&format!("'{value}'")),
            "{msg}"
        );
    }
    let too_big = (MAX_QUEUE_SIZE_LIMIT + 1).to_string();
    let lookup = move |k: &str| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| too_big.clone());
    assert!(QueueConfig::from_env("OTEL_BSP", &lookup).is_err());

    let err = Telemetry::builder(enabled())
        .span_exporter(SlowExporter::new(Duration::ZERO))
        .env_lookup(|k| (k == "OTEL_BSP_SCHEDULE_DELAY").then(|| "soon".into()))
        // Other tests of this binary set up telemetry: the double-init guard is not the point.
        .allow_reinit_for_testing(true)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("OTEL_BSP_SCHEDULE_DELAY"), "{err}");
}
