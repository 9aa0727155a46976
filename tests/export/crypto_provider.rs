//! The process's default rustls crypto provider belongs to the application: no setup installs
//! one (disabled, non-exporting, console, `OTEL_SDK_DISABLED`, OTLP over `https://`), so an
//! application that installs its own after setup does not panic; and nemo-lens's own TLS
//! clients (gRPC and HTTP) are built with their own provider, so an application's default,
//! even one no handshake could use, changes nothing: spans still reach a real collector behind
//! a TLS front.
//!
//! Each case runs in a child process (this binary re-executed to run `child_role`), since the
//! default provider is process-wide.

use std::time::Duration;

use tokio_rustls::rustls::crypto::{CryptoProvider, ring};

use crate::common::child::{self, Child};
use crate::common::collector::{Collector, items};
use crate::tls::{TestCa, TlsFront};

/// When the child installs a default provider: `before` or `after` setup, or `unusable`
/// (before setup, a provider without cipher suites: any client that used it would fail).
const WHEN: &str = "LENSTEST_PROVIDER";
/// `rank,world_size` for the builder (unset: rank 0 of 1).
const RANK: &str = "LENSTEST_RANK";

fn child() {
    use tracing_subscriber::prelude::*;
    let when = std::env::var(WHEN).unwrap();
    match when.as_str() {
        "before" => ring::default_provider().install_default().unwrap(),
        "unusable" => CryptoProvider {
            cipher_suites: Vec::new(),
            ..ring::default_provider()
        }
        .install_default()
        .unwrap(),
        _ => {}
    }
    let (rank, world_size) = std::env::var(RANK)
        .ok()
        .and_then(|v| {
            let (r, w) = v.split_once(',')?;
            Some((r.parse().ok()?, w.parse().ok()?))
        })
        .unwrap_or((0, 1));
    let config = nemo_lens::LensConfig::from_env().unwrap();
    let telemetry = nemo_lens::Telemetry::builder(config)
        .place(nemo_lens::Place::rank(rank).of(world_size))
        .build()
        .unwrap();
    if when == "after" {
        ring::default_provider()
            .install_default()
            .expect("no default provider installed by nemo-lens");
    }
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    for step in 0..3_i64 {
        tracing::info_span!("train_step", dl.step = step).in_scope(|| {});
    }
    telemetry.shutdown(Duration::from_secs(20)).unwrap();
    let d = telemetry.stats();
    println!(
        "EXPORTING {} DROPPED {}",
        telemetry.is_exporting(),
        d.dropped_spans
    );
    // The application's default is still there.
    assert!(CryptoProvider::get_default().is_some());
}

#[test]
#[ignore = "child process of the crypto-provider tests, started by them"]
fn child_role() {
    assert!(child::is_child(), "run by the crypto-provider tests");
    child();
}

/// Runs the child with `envs` and the provider installed `when`; returns its stdout.
fn run_child(when: &str, envs: &[(&str, String)]) -> String {
    let out = Child::sibling("child_role")
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
