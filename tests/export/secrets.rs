//! Secrets: the OTLP headers (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TRACES_HEADERS`,
//! typically an API key) never appear in nemo-lens's Debug output, errors or logs.
//!
//! The headers are read by the OTLP exporter from the process environment, so the scenario runs
//! in a fresh copy of this test binary with the variables set (`nemo_lens_test_support::child`); the copy checks
//! every string the crate produces, and the outer test checks everything the copy printed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};

const PROTOCOL_VAR: &str = "LENSTEST_SECRETS_PROTOCOL";
const SECRET: &str = "sk-live-SECRET-0123456789";

/// A `fmt` writer into a shared buffer (every log line of every crate, at TRACE).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn in_scenario(protocol: &str) {
    let enabled = || {
        let config = LensConfig::from_env().unwrap();
        assert!(config.enabled);
        config
    };
    let lookup_with = |extra: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            extra
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
                .or_else(|| std::env::var(k).ok())
        }
    };
    let mut seen = String::new();
    let logs = Captured::default();

    // The configuration, the builder and the handle, with the exporter built.
    let config = enabled();
    writeln!(seen, "{config:?}").unwrap();
    let builder = Telemetry::builder(config).env_lookup(lookup_with(&[]));
    writeln!(seen, "{builder:?}").unwrap();
    let telemetry = builder.build().unwrap();
    writeln!(seen, "{telemetry:?} {:?}", telemetry.config()).unwrap();
    let layer = telemetry.layer::<tracing_subscriber::Registry>();
    writeln!(seen, "{layer:?}").unwrap();
    drop(layer);

    // Spans exported to an endpoint where nothing listens, with every crate logging at TRACE.
    let subscriber = tracing_subscriber::registry().with(telemetry.layer()).with(
        tracing_subscriber::fmt::layer()
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
    );
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("step").in_scope(|| tracing::info!("working"));
        if let Err(e) = telemetry.force_flush() {
            writeln!(seen, "{e} {e:?}").unwrap();
        }
        if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
            writeln!(seen, "{e} {e:?}").unwrap();
        }
    });
    writeln!(seen, "{:?}", telemetry.stats()).unwrap();

    // Setup errors: an unknown protocol, a malformed endpoint.
    for extra in [
        &[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")][..],
        &[("OTEL_BSP_MAX_QUEUE_SIZE", "many")][..],
    ] {
        let err = Telemetry::builder(enabled())
            .env_lookup(lookup_with(extra))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap_err();
        writeln!(seen, "{err} {err:?}").unwrap();
    }
    // SAFETY: this scenario process is single-threaded here (the exporters are shut down).
    unsafe { std::env::set_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://[::1") };
    match Telemetry::builder(enabled())
        .allow_reinit_for_testing(true)
        .build()
    {
        Err(err) => writeln!(seen, "{err} {err:?}").unwrap(),
        Ok(t) => {
            writeln!(seen, "{t:?}").unwrap();
            let _ = t.shutdown(Duration::from_secs(5));
        }
    }

    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!logs.is_empty(), "the log capture works");
    // Control: the exporter did read the secret (its own Debug shows it), so a nemo-lens Debug
    // that printed the exporter would leak it and fail this test.
    if protocol != "grpc" {
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint("http://127.0.0.1:9/v1/traces")
            .build()
            .unwrap();
        assert!(
            format!("{exporter:?}").contains(SECRET),
            "control: {exporter:?}"
        );
    }
    assert!(seen.contains("Telemetry {") && seen.contains("LensConfig {"));
    assert!(
        !seen.contains(SECRET),
        "a secret in Debug or an error ({protocol}):\n{seen}"
    );
    assert!(
        !logs.contains(SECRET),
        "a secret in the logs ({protocol}):\n{logs}"
    );
    // Shown to the outer test, which checks the whole output.
    std::io::stderr().write_all(seen.as_bytes()).unwrap();
    std::io::stderr().write_all(logs.as_bytes()).unwrap();
}

fn run(protocol: &str) {
    let out = Child::this_test()
        .env(PROTOCOL_VAR, protocol)
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{SECRET}"),
        )
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            format!("x-api-key={SECRET},x-team=ml"),
        )
        .run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{protocol}: {stdout}\n{stderr}"
    );
    assert!(stderr.contains("Telemetry {"), "the scenario ran: {stderr}");
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn otlp_headers_never_appear_in_debug_errors_or_logs() {
    if child::is_child() {
        in_scenario(&std::env::var(PROTOCOL_VAR).unwrap());
        return;
    }
    run("http/protobuf");
    run("grpc");
}
