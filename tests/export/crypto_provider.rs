//! The process's default rustls crypto provider belongs to the application: no setup installs
//! one (disabled, non-exporting, console, `OTEL_SDK_DISABLED`, OTLP over `https://`), so an
//! application that installs its own after setup does not panic; and nemo-lens's own TLS
//! clients (gRPC and HTTP) are built with their own provider, so an application's default,
//! even one no handshake could use, changes nothing: spans still reach a real collector behind
//! a TLS front.
//!
//! Each case runs in a child process (the fixture program `crypto_provider_rank`), since the
//! default provider is process-wide.

use std::time::Duration;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::collector::{Collector, items};
use nemo_lens_test_support::tls::{TestCa, TlsFront};

/// When the child installs a default provider: `before` or `after` setup, or `unusable`
/// (before setup, a provider without cipher suites: any client that used it would fail). The
/// names are `crypto_provider_rank`'s.
const WHEN: &str = "LENSTEST_PROVIDER";
/// `rank,world_size` for the builder (unset: rank 0 of 1).
const RANK: &str = "LENSTEST_RANK";

/// Runs the child with `envs` and the provider installed `when`; returns its stdout.
fn run_child(when: &str, envs: &[(&str, String)]) -> String {
    let out = Child::fixture("crypto_provider_rank")
        .env(WHEN, when)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .run_passing();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Setups that export nothing over TLS: installing a default afterwards must not panic.
#[test]
fn no_setup_installs_a_default_provider() {
    let dir = tempfile::tempdir().unwrap();
    let console = dir.path().join("spans.jsonl").display().to_string();
    let setups: [(&str, Vec<(&str, String)>); 4] = [
        ("disabled", vec![("NEMO_LENS_ENABLED", "0".into())]),
        (
            "non-exporting",
            vec![
                ("NEMO_LENS_ENABLED", "1".into()),
                ("NEMO_LENS_EXPORT_STRATEGY", "single_rank".into()),
                (RANK, "0,2".into()),
            ],
        ),
        (
            "console",
            vec![
                ("NEMO_LENS_ENABLED", "1".into()),
                ("NEMO_LENS_EXPORTER", "console".into()),
                ("NEMO_LENS_CONSOLE_PATH", console),
            ],
        ),
        (
            "OTEL_SDK_DISABLED",
            vec![
                ("NEMO_LENS_ENABLED", "1".into()),
                ("OTEL_SDK_DISABLED", "true".into()),
            ],
        ),
    ];
    for (what, envs) in setups {
        for when in ["before", "after"] {
            let stdout = run_child(when, &envs);
            let exporting = what == "console";
            assert!(
                stdout.contains(&format!("EXPORTING {exporting} DROPPED 0")),
                "{what}, {when}: {stdout}"
            );
        }
    }
}

/// OTLP over `https://` to rotel behind a TLS front, over gRPC and HTTP: spans arrive whether
/// the application installs its default before setup (ring, or one no handshake could use) or
/// after it.
#[test]
fn tls_export_works_whatever_default_the_application_installs() {
    let ca = TestCa::new("nemo-lens test CA");
    let collector = Collector::start();
    let grpc = TlsFront::start(collector.grpc_port, &ca, &["127.0.0.1"], None);
    let http = TlsFront::start(collector.http_port, &ca, &["127.0.0.1"], None);
    let mut expected = 0;
    for (protocol, port) in [("grpc", grpc.port), ("http/protobuf", http.port)] {
        for when in ["before", "unusable", "after"] {
            let stdout = run_child(
                when,
                &[
                    ("NEMO_LENS_ENABLED", "1".into()),
                    ("NEMO_LENS_EXPORTER", "otlp".into()),
                    ("NEMO_LENS_METRICS_ENABLED", "0".into()),
                    ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into()),
                    (
                        "OTEL_EXPORTER_OTLP_ENDPOINT",
                        format!("https://127.0.0.1:{port}"),
                    ),
                    (
                        "OTEL_EXPORTER_OTLP_CERTIFICATE",
                        ca.path.display().to_string(),
                    ),
                ],
            );
            assert!(
                stdout.contains("EXPORTING true DROPPED 0"),
                "{protocol}, {when}: {stdout}"
            );
            expected += 3;
            collector.wait_for(
                &format!("{expected} spans ({protocol}, default installed {when})"),
                Duration::from_secs(30),
                |o| items(o, "Span #").len() >= expected,
            );
        }
    }
    assert!(grpc.handshake_errors().is_empty() && http.handshake_errors().is_empty());
}
