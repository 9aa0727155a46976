//! Linking nemo-lens changes nothing in the application's own HTTP clients: an application that
//! exports its own spans with opentelemetry-otlp's HTTP exporter (its default client, reqwest's
//! blocking one, to a plain `http://` endpoint) and installs no rustls crypto provider builds its
//! exporter and delivers its spans, next to nemo-lens exporting over OTLP/HTTP to the same real
//! collector. (Cargo unifies features: a TLS feature nemo-lens enabled on reqwest would be the
//! application's too, and reqwest with rustls but no provider panics building any client.)
//!
//! The application runs in a child process (this test re-executed alone): the crypto provider
//! is process-wide, and no other test of this binary may have installed one before.

use std::time::Duration;

use opentelemetry::trace::{Tracer, TracerProvider};
use opentelemetry_otlp::WithExportConfig;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::collector::{Collector, count_named};
use nemo_lens_test_support::rank::exporting_from_env;

/// The collector's OTLP/HTTP base URL, for the application's own exporter.
const APP_ENDPOINT: &str = "LENSTEST_APP_ENDPOINT";

fn application() {
    let (telemetry, _guard) = exporting_from_env();
    tracing::info_span!("lens_step").in_scope(|| {});

    // The application's own pipeline: opentelemetry-otlp's default HTTP client.
    let endpoint = std::env::var(APP_ENDPOINT).unwrap();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()
        .expect("the application's own OTLP/HTTP exporter");
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .build();
    provider.tracer("app").in_span("app_own_span", |_| {});
    provider
        .shutdown()
        .expect("the application's spans delivered");

    // Nothing nemo-lens did installed a process-wide provider either.
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    telemetry.shutdown(Duration::from_secs(20)).unwrap();
    assert_eq!(telemetry.stats().dropped_spans, 0);
}

#[test]
fn the_applications_own_otlp_http_exporter_works_without_a_crypto_provider() {
    if child::is_child() {
        return application();
    }
    let collector = Collector::start();
    Child::this_test()
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ])
        .envs(collector.otlp_env("http/protobuf"))
        .env(APP_ENDPOINT, collector.endpoint("http/protobuf"))
        .run_passing();
    collector.wait_for(
        "the application's span and nemo-lens's",
        Duration::from_secs(30),
        |o| {
            let spans = nemo_lens_test_support::collector::spans(o);
            count_named(&spans, "app_own_span") == 1 && count_named(&spans, "lens_step") == 1
        },
    );
}
