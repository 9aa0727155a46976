//! No feedback loop: with the collector down, the OTLP exporter, the SDK and the HTTP stack log
//! their failures through `tracing` (and `log`), and none of those records comes back into the
//! log pipeline, while the application's own records do.
//!
//! The test runs in a process of its own (`nemo_lens_test_support::child`): it installs the process-wide `log` →
//! `tracing` forwarder and global subscriber, and sets the OTLP endpoint in the process
//! environment, as a user's program would.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use opentelemetry_sdk::logs::InMemoryLogExporter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[test]
fn collector_down_errors_go_to_fmt_never_into_the_log_pipeline() {
    child::run_alone(collector_down);
}

fn collector_down() {
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // SAFETY: the only test of this child process, before any thread of ours reads the
    // environment.
    unsafe {
        std::env::set_var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        );
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    }
    tracing_log::LogTracer::init().unwrap();

    let logs = InMemoryLogExporter::default();
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.logs_enabled = true;
        c.metrics_enabled = false;
        c.logs_level = tracing_core::LevelFilter::TRACE;
        c.export.exporter = ExporterKind::Otlp;
    });
    let telemetry = Telemetry::builder(config)
        .log_exporter(logs.clone())
        .build()
        .unwrap();
    let fmt_out = Captured::default();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer()).with(
        tracing_subscriber::fmt::layer()
            .with_writer(fmt_out.clone())
            .with_ansi(false)
            .with_filter(tracing_core::LevelFilter::TRACE),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    for step in 0..3_i64 {
        tracing::info_span!("train_step", step).in_scope(|| {
            tracing::info!(step, "application record");
            log::warn!(target: "reqwest::connect", "a log-crate record from the HTTP stack");
            log::warn!("a log-crate record from the application");
        });
        // Export now, to the dead collector: the exporter fails and says so.
        let _ = telemetry.force_flush();
    }
    // The in-memory exporter forgets its records at shutdown: read them first.
    let _ = telemetry.force_flush();
    let records = logs.get_emitted_logs().unwrap();
    let _ = telemetry.shutdown(Duration::from_secs(10));

    let fmt_text = String::from_utf8(fmt_out.0.lock().unwrap().clone()).unwrap();
    assert!(
        fmt_text.contains("opentelemetry"),
        "the exporter stack logged nothing, so this test would prove nothing:\n{fmt_text}"
    );
    let mut bodies: Vec<String> = records
        .iter()
        .map(|r| match r.record.body() {
            Some(opentelemetry::logs::AnyValue::String(s)) => s.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    bodies.dedup();
    assert_eq!(
        bodies,
        [
            "application record",
            "a log-crate record from the application",
        ]
        .repeat(3),
        "records: {records:#?}"
    );
    for r in &records {
        let target = r.record.target().map(|t| t.to_string()).unwrap_or_default();
        // The internal targets the lens layer documents.
        let internal_targets = [
            "opentelemetry",
            "hyper",
            "tonic",
            "h2",
            "reqwest",
            "tower",
            "nemo_lens",
        ];
        for internal in internal_targets {
            assert!(
                !target.starts_with(internal),
                "internal record bridged: {r:#?}"
            );
        }
    }
}
