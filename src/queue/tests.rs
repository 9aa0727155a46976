//! The batch span processor: bounded memory under a burst, every drop counted
//! (dropped = produced − exported), export failures and timeouts counted, bounded shutdown,
//! `OTEL_BSP_*` read with typed errors.

use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use proptest::prelude::*;

use super::config::{MAX_QUEUE_SIZE_LIMIT, QueueConfig};
use super::span_processor::LensBatchProcessor;
use crate::error::LensError;

/// The variable that marks this test binary, started again by [`in_own_process`], as the child
/// that runs the named test.
const CHILD_VAR: &str = "NEMO_LENS_QUEUE_TEST_CHILD";

/// `true` in the child that must run test `name`; in the parent, starts this test binary again
/// to run only `name`, asserts that it passed, and returns `false`.
fn in_own_process(name: &str) -> bool {
    if std::env::var(CHILD_VAR).is_ok_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .output()
        .expect("start the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {name}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

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
/// waits, and every span is either exported or counted as dropped. Runs in its own process (this
/// test binary started again), so the resident-set figures are this burst's. (The spans are built here rather than through
/// `tracing`: ten million spans through the whole stack take minutes in a debug build; the
/// test below drives the whole stack.)
#[test]
fn a_ten_million_span_burst_keeps_memory_bounded_and_counts_every_drop() {
    if !in_own_process(
        "queue::tests::a_ten_million_span_burst_keeps_memory_bounded_and_counts_every_drop",
    ) {
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
/// are typed errors naming the variable.
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
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// `OTEL_BSP_*` / `OTEL_BLRP_*`: default when blank, else a valid configuration, else an
    /// `InvalidValue` naming the variable.
    #[test]
    fn batch_variables_yield_a_default_a_valid_value_or_a_named_error(
        prefix in prop::sample::select(vec!["OTEL_BSP", "OTEL_BLRP"]),
        key in prop::sample::select(vec![
            "MAX_QUEUE_SIZE", "SCHEDULE_DELAY", "MAX_EXPORT_BATCH_SIZE", "EXPORT_TIMEOUT",
        ]),
        value in prop_oneof![
            any::<String>(),
            "[ \\t]{0,2}[-+_.0-9eExa-f/:]{0,24}[ \\t]{0,2}",
            prop::sample::select(vec![
                "", " ", "\t\n", "0", "-1", "1.5", "1e3", "nan", "18446744073709551616",
                "99999999999999999999999999",
            ]).prop_map(String::from),
        ],
    ) {
        let var = format!("{prefix}_{key}");
        let lookup = |k: &str| (k == var).then(|| value.clone());
        match QueueConfig::from_env(prefix, &lookup) {
            Ok(c) => {
                if value.trim().is_empty() {
                    prop_assert_eq!(c, QueueConfig::default());
                }
                prop_assert!((1..=MAX_QUEUE_SIZE_LIMIT).contains(&c.max_queue_size));
                prop_assert!(c.max_export_batch_size >= 1);
                prop_assert!(c.max_export_batch_size <= c.max_queue_size);
                prop_assert!(!c.export_timeout.is_zero());
            }
            Err(e) => {
                match &e {
                    LensError::InvalidValue { var: named, .. } => prop_assert_eq!(named, &var),
                    other => prop_assert!(false, "{:?}", other),
                }
                prop_assert!(e.to_string().len() < 400, "the value is shortened in the message");
            }
        }
    }
}
