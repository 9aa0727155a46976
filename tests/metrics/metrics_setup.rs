//! Setup of the metric pipeline: `OTEL_METRIC_EXPORT_INTERVAL` (default, valid, malformed), the
//! global meter provider, periodic export to the console file, OTLP without an application
//! Tokio runtime, bounded shutdown, and nothing at all on ranks that do not export.
//!
//! Building an exporting handle replaces the process's global meter provider, so the tests of
//! this file that build one take `SERIAL` first; the two that read process-wide state (the
//! global meter provider, the process's threads) run in a process of their own, away from the
//! other modules of this binary.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nemo_lens_test_support::child;
use nemo_lens_test_support::wait::{wait_for, wait_until};

use nemo_lens::{ExporterKind, LensConfig, LensError, Place, Telemetry};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn console(path: Option<String>) -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.exporter = ExporterKind::Console;
        c.export.strategy = "all_ranks".into();
        c.traces_enabled = false;
        c.export.console_path = path;
    })
}

fn interval_env(value: &'static str) -> impl Fn(&str) -> Option<String> + Send + Sync + 'static {
    move |k: &str| (k == "OTEL_METRIC_EXPORT_INTERVAL").then(|| value.to_owned())
}

#[test]
fn the_interval_defaults_to_ten_seconds_and_reads_the_variable() {
    let _s = serial();
    let t = Telemetry::builder(console(None))
        .env_lookup(|_| None)
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert_eq!(
        t.stats().metric_export_interval,
        Some(Duration::from_secs(10))
    );
    t.shutdown(Duration::from_secs(5)).unwrap();

    for (raw, want) in [("250", 250), (" 60000 ", 60_000), ("", 10_000)] {
        let t = Telemetry::builder(console(None))
            .env_lookup(interval_env(raw))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap();
        assert_eq!(
            t.stats().metric_export_interval,
            Some(Duration::from_millis(want)),
            "{raw:?}"
        );
        t.shutdown(Duration::from_secs(5)).unwrap();
    }
}

#[test]
fn a_malformed_interval_is_a_typed_error_on_the_exporting_rank() {
    for raw in ["10s", "-5", "0", "1.5", "ten"] {
        // single_rank: rank 0 of 4 does not export and never reads the interval (a job-wide
        // value meant for Python ranks does not stop it).
        let quiet =
            Telemetry::builder(console(None).with(|c| c.export.strategy = "single_rank".into()))
                .place(Place::rank(0).of(4))
                .env_lookup(interval_env(raw))
                .allow_reinit_for_testing(true)
                .build()
                .unwrap();
        assert!(!quiet.is_exporting());
        for (rank, world_size) in [(0, 1), (3, 4)] {
            let config = console(None).with(|c| c.export.strategy = "single_rank".into());
            let err = Telemetry::builder(config)
                .place(Place::rank(rank).of(world_size))
                .env_lookup(interval_env(raw))
                .allow_reinit_for_testing(true)
                .build()
                .unwrap_err();
            let msg = err.to_string();
            match &err {
                LensError::InvalidMillis { var, value } => {
                    assert_eq!(var, "OTEL_METRIC_EXPORT_INTERVAL");
                    assert_eq!(value, raw);
                }
                other => panic!("expected InvalidMillis, got {other:?}"),
            }
            assert!(
                msg.contains("OTEL_METRIC_EXPORT_INTERVAL")
                    && msg.contains(&format!("'{raw}'"))
                    && msg.contains("positive integer number of milliseconds"),
                "{msg}"
            );
        }
    }
    // Not read when it cannot matter: telemetry disabled, metrics off, or a reader injected.
    Telemetry::builder(LensConfig::default())
        .env_lookup(interval_env("ten"))
        .build()
        .unwrap();
    let metrics_off = console(None).with(|c| c.metrics_enabled = false);
    Telemetry::builder(metrics_off)
        .env_lookup(interval_env("ten"))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let _s = serial();
    let t = Telemetry::builder(console(None))
        .env_lookup(interval_env("ten"))
        .metric_reader(|| PeriodicReader::builder(InMemoryMetricExporter::default()).build())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert_eq!(t.stats().metric_export_interval, None);
    t.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn the_meter_provider_is_global_and_exports_on_its_interval() {
    child::run_alone(the_meter_provider_is_global);
}

fn the_meter_provider_is_global() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("m-{rank}.jsonl");
    let t = Telemetry::builder(console(Some(template.to_str().unwrap().into())))
        .env_lookup(interval_env("100"))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    // Through the global API, as a library that knows nothing about lens would record.
    opentelemetry::global::meter("some.library")
        .u64_counter("library.calls")
        .build()
        .add(7, &[]);

    // No flush, no shutdown: the periodic reader writes on its own (bound: must not hang).
    let path = dir.path().join("m-0.jsonl");
    let line = wait_for(Duration::from_secs(60), "a periodic export", || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("library.calls"))
            .map(str::to_owned)
    });
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let scope = &v["resource_metrics"][0]["scope_metrics"][0];
    assert_eq!(scope["scope"]["name"], "some.library");
    assert_eq!(scope["metrics"][0]["data"]["data_points"][0]["value"], 7);
    t.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn otlp_metrics_need_no_application_runtime_and_shutdown_is_bounded() {
    let _s = serial();
    for protocol in ["grpc", "http/protobuf", "http/json"] {
        let config = console(None).with(|c| c.export.exporter = ExporterKind::Otlp);
        let t = Telemetry::builder(config)
            .env_lookup(move |k| {
                (k == "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL").then(|| protocol.into())
            })
            .allow_reinit_for_testing(true)
            .build()
            .unwrap_or_else(|e| panic!("{protocol}: {e}"));
        assert!(t.meter_provider().is_some(), "{protocol}");
        t.meter().u64_counter("otlp.calls").build().add(1, &[]);
        // Whether or not a collector listens, shutdown returns within its deadline.
        let start = Instant::now();
        let _ = t.shutdown(Duration::from_secs(3));
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{protocol}: shutdown hung"
        );
    }
}

#[test]
fn a_bad_metrics_protocol_names_the_variable() {
    let config = console(None).with(|c| c.export.exporter = ExporterKind::Otlp);
    let err = Telemetry::builder(config)
        .env_lookup(|k| (k == "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL").then(|| "udp".into()))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") && err.contains("udp"),
        "{err}"
    );
}

/// Threads started by the calling thread or by the SDK's periodic reader: those named like the
/// reader (Linux truncates names to 15 bytes) and those still carrying the calling thread's name,
/// which a new thread inherits until it names itself.
fn spawned_threads() -> usize {
    let me = std::fs::read_link("/proc/thread-self").unwrap();
    let my_tid = me.file_name().unwrap().to_owned();
    let my_name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != my_tid)
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .filter(|name| *name == my_name || name.starts_with("OpenTelemetry.M"))
        .count()
}

#[test]
fn ranks_that_do_not_export_metrics_build_no_provider_and_start_no_thread() {
    child::run_alone(no_provider_and_no_thread);
}

fn no_provider_and_no_thread() {
    let _s = serial();
    // Readers of earlier tests (all shut down under `SERIAL`) may still be exiting.
    wait_until(
        Duration::from_secs(30),
        "the reader threads of shut-down providers to exit",
        || spawned_threads() == 0,
    );
    let non_exporting = console(None).with(|c| c.export.strategy = "single_rank".into());
    let metrics_off = console(None).with(|c| c.metrics_enabled = false);
    let cases = [
        (LensConfig::default(), 0, 1),
        (non_exporting, 0, 4),
        (metrics_off, 0, 1),
    ];
    for (config, rank, world_size) in cases {
        let t = Telemetry::builder(config)
            .place(Place::rank(rank).of(world_size))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap();
        assert!(t.meter_provider().is_none());
        assert!(t.metrics_layer::<tracing_subscriber::Registry>().is_inert());
        t.meter().f64_histogram("h").build().record(1.0, &[]);
        assert_eq!(spawned_threads(), 0);
    }
    // The exporting counterpart does start one, so the count above can see it.
    let t = Telemetry::builder(console(None))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(spawned_threads() >= 1);
    t.shutdown(Duration::from_secs(5)).unwrap();
}
