//! Plugging a hand-written `SpanExporter` for a made-up backend into nemo-lens.
//!
//! ```sh
//! cargo run --example custom_exporter
//! ```
//!
//! `MyBackendExporter` stands for any backend without an OTLP endpoint: it receives batches of
//! finished spans on the batch processor's thread (never on the training thread) and here writes
//! one line per span in its own format. It replaces only the trace exporter; everything else
//! (strategies, groups, resource, the closer) works as usual.

use std::io::Write;
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

/// A made-up backend: "<service> | <name> | <duration µs> | <attributes>" lines on stdout.
#[derive(Debug, Default)]
struct MyBackendExporter {
    service: String,
}

impl SpanExporter for MyBackendExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut out = std::io::stdout().lock();
        for span in batch {
            let micros = span
                .end_time
                .duration_since(span.start_time)
                .unwrap_or_default()
                .as_micros();
            let attributes: Vec<String> = span
                .attributes
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value))
                .collect();
            writeln!(
                out,
                "{} | {} | {micros} | {}",
                self.service,
                span.name,
                attributes.join(",")
            )
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.service = resource
            .get(&opentelemetry::Key::from_static_str("service.name"))
            .map(|v| v.to_string())
            .unwrap_or_default();
    }
}

#[tracing::instrument(fields(nemo.group.step))]
fn train_step(step: i64) {
    std::thread::sleep(Duration::from_millis(1));
}

fn main() -> Result<(), nemo_lens::LensError> {
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.identity.service_name = "my-backend-demo".into();
        c.groups.span_groups = "per_step".into();
        c.metrics_enabled = false;
    });
    let telemetry = Telemetry::builder(config)
        .span_exporter(MyBackendExporter::default())
        .build()?;
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, || {
        let _job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty).entered();
        for step in 0..3 {
            train_step(step);
        }
    });
    telemetry.shutdown(Duration::from_secs(5))
}
